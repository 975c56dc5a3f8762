"""The falsification test of the essay: speculative sampling must leave the output distribution exactly the
target's, whatever the draft; a poor draft may only show up as a lower acceptance rate.

Draw N completions of m tokens from one prompt, by plain sampling and by speculative sampling, and compare the
observed joint distribution of the m tokens with the target's exact probabilities, enumerated over every outcome
(a small vocabulary, or m = 2 with the byte-level pair). Pearson's chi-square with cells of expected count < 5
pooled, and the total-variation distance beside its Monte-Carlo noise level (the 95th percentile of the TV of N
exact draws). Negative controls run the same test on deliberately broken rules, which must be rejected.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from calibrate.progress import no_progress
from engine.model import Decoder, build_decoder, causal_window
from engine.rejection import distribution
from engine.speculative import Decoding, RealEngine
from simulator import SpecsimError
from simulator.specs import ModelSpec
from simulator.trees import Tree

PASS_P = 0.01  # the exact rule passes when p > PASS_P
CATCH_P = 1e-6  # a broken rule is caught when p < CATCH_P


def chi2_sf(x: float, df: int) -> float:
    """P(chi^2_df > x): the regularised upper incomplete gamma Q(df/2, x/2) (series / continued fraction)."""
    a, z = df / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    lg = math.lgamma(a)
    if z < a + 1:  # series for P, then Q = 1 - P
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= z / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(-z + a * math.log(z) - lg))
    b = z + 1 - a  # Lentz's continued fraction for Q
    c, d = 1e300, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1e-300 if abs(d) < 1e-300 else d
        c = b + an / c
        c = 1e-300 if abs(c) < 1e-300 else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return math.exp(-z + a * math.log(z) - lg) * h


@dataclass(frozen=True)
class TestResult:
    label: str
    p_value: float
    chi2: float
    df: int
    tv: float
    tv_noise95: float
    acceptance_rate: float | None
    tokens_per_pass: float | None
    samples: int


def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int, float]:
    """Pearson chi-square of observed counts against exact probabilities, pooling cells expected below 5."""
    n = counts.sum()
    expected = probs * n
    small = expected < 5
    obs = np.concatenate([counts[~small], [counts[small].sum()]]) if small.any() else counts
    exp = np.concatenate([expected[~small], [expected[small].sum()]]) if small.any() else expected
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = len(obs) - 1
    return stat, df, chi2_sf(stat, df)


def tv_noise(probs: np.ndarray, n: int, rng: np.random.Generator, reps: int = 200) -> float:
    """95th percentile of the total-variation distance between N exact draws and the exact distribution."""
    draws = rng.multinomial(n, probs, size=reps) / n
    return float(np.percentile(0.5 * np.abs(draws - probs).sum(axis=1), 95))


@torch.inference_mode()
def exact_joint(target: Decoder, prompt: Sequence[int], m: int, temperature: float) -> np.ndarray:
    """P(first m tokens = x) for every x in vocab^m (row-major), by enumerating every prefix."""
    V = target.cfg.vocab_size
    joint = np.ones(1)
    for j in range(m):
        prefixes = list(itertools.product(range(V), repeat=j))
        seqs = torch.tensor([list(prompt) + list(pre) for pre in prefixes], device=target.device)
        target.setup_cache(len(prefixes))
        start = torch.zeros(len(prefixes), dtype=torch.long, device=target.device)
        logits = target(seqs, causal_window(start, seqs.shape[1], seqs.shape[1]))[:, -1]
        p = distribution(logits, temperature).double().cpu().numpy()  # (V^j, V)
        joint = (joint[:, None] * p).reshape(-1)
    return joint / joint.sum()


def draw(engine: RealEngine, prompt: Sequence[int], m: int, n: int, how: Decoding, gen: torch.Generator,
         batch: int = 2000, tick: Callable[[int], object] | None = None
         ) -> tuple[np.ndarray, float | None, float | None]:
    """N samples of the first m tokens (as outcome indices), the acceptance rate and the tokens per pass;
    `tick(b)` is told of every b samples drawn."""
    V = engine.target.cfg.vocab_size
    outcomes: list[int] = []
    accepted = tried = 0
    passes = emitted = 0
    while len(outcomes) < n:
        b = min(batch, n - len(outcomes))
        res = engine.generate([list(prompt)] * b, m, how, gen)
        for toks in res.tokens:
            idx = 0
            for t in toks:
                idx = idx * V + t
            outcomes.append(idx)
        for s in res.steps:
            accepted += sum(s.accepted)
            tried += sum(s.tried)
            passes += len(s.accepted)
            emitted += sum(a + 1 for a in s.accepted)
        if tick:
            tick(b)
    rate = accepted / tried if tried else None
    return np.bincount(outcomes, minlength=V**m), rate, (emitted / passes if how.span else None)


def run_case(label: str, engine: RealEngine, prompt: Sequence[int], m: int, n: int, how: Decoding, exact: np.ndarray,
             seed: int, tick: Callable[[int], object] | None = None) -> TestResult:
    gen = torch.Generator(device=engine.device).manual_seed(seed)
    counts, rate, tpp = draw(engine, prompt, m, n, how, gen, tick=tick)
    stat, df, p = chi_square(counts, exact)
    tv = 0.5 * float(np.abs(counts / counts.sum() - exact).sum())
    noise = tv_noise(exact, n, np.random.default_rng(seed))
    return TestResult(label, p, stat, df, tv, noise, rate, tpp, n)


TOY_TARGET = ModelSpec("toy-target", n_layers=2, d_model=32, n_heads=2, n_kv_heads=2, d_ff=64, vocab_size=8,
                       dtype="fp32")
TOY_DRAFT = ModelSpec("toy-draft", n_layers=1, d_model=16, n_heads=1, n_kv_heads=1, d_ff=32, vocab_size=8,
                      dtype="fp32")
TOY_PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]


def toy_pair(seed: int, device: torch.device | str = "cpu") -> tuple[Decoder, Decoder]:
    """A small-vocabulary target whose outcomes can be enumerated, and a poor draft (another random model)."""
    target = build_decoder(TOY_TARGET, max_seq_len=64, seed=seed, device=device)
    draft = build_decoder(TOY_DRAFT, max_seq_len=64, seed=seed + 1, device=device)
    with torch.no_grad():
        target.output.weight.mul_(3.0)  # peakier than uniform, so a wrong rule has something to distort
    return target, draft


def run_exactness(draft_kind: str, ks: Sequence[int], trees: Sequence[Tree], samples: int, seed: int,
                  temperature: float = 1.0, m: int | None = None,
                  echo: Callable[[str], None] | None = None, device: str = "cpu",
                  progress: Callable[[str, int], Any] | None = None) -> int:
    """The exact rule for every k and tree, then the broken rules (negative controls) on the first configuration;
    each verdict is echoed as it comes, the samples drawn shown by `progress(label, total)` (a context manager
    whose bar takes `update(n)`). Returns the number of failures (an exact case rejected, a broken rule
    missed)."""
    checks, controls = exactness_cases(draft_kind, ks, trees, samples, seed, temperature, m, echo, device, progress)
    missed = sum(not verdict(r, "control")[0] for r in controls)
    if missed and echo:
        echo(f"a broken rule not caught: {samples:,} completions per case cannot tell it from the exact one (the test "
             "has no power there, which says nothing about the exact rule); raise --samples, e.g. 20000")
    return sum(not verdict(r, "check")[0] for r in checks) + missed


def exactness_cases(draft_kind: str, ks: Sequence[int], trees: Sequence[Tree], samples: int, seed: int,
                    temperature: float = 1.0, m: int | None = None, echo: Callable[[str], None] | None = None,
                    device: str = "cpu", progress: Callable[[str, int], Any] | None = None
                    ) -> tuple[list[TestResult], list[TestResult]]:
    """Every case's result: the exact rule (checks) and the broken rules (controls), on `device` (auto, cpu,
    cuda[:N])."""
    from engine.device import resolve_device

    if draft_kind == "ngram" and trees:
        raise SpecsimError("prompt lookup proposes one continuation: drop --tree with --draft ngram (pass --tree '')")
    dev = resolve_device(device)

    def report(r: TestResult, kind: str) -> None:
        if echo:
            echo(verdict(r, kind)[1])

    drafter = {"ngram": "ngram", "heads": "heads", "built-in-heads": "heads"}.get(draft_kind, "model")
    depth = max([*ks, *(t.depth for t in trees), 1])
    heads = None
    if draft_kind in ("built-in", "built-in-heads"):
        from engine.builtin import encode, load_heads, load_pair

        target, draft = load_pair(expanded=False, dtype="fp32", max_seq_len=256, device=dev)
        if drafter == "heads":
            heads = load_heads(expanded=False, dtype="fp32", device=dev)
        prompt = encode("def main():\n    return ")
        m = m or 2
    else:
        from engine.heads import random_heads

        target, draft = toy_pair(seed, dev)
        if drafter == "heads":  # poor heads: random weights
            heads = random_heads(TOY_TARGET.d_model, TOY_TARGET.vocab_size, depth, seed=seed + 2, device=dev)
        prompt = TOY_PROMPT
        m = m or 3
    if heads is not None and depth > heads.n_heads:
        raise SpecsimError(f"the heads draft at most {heads.n_heads} positions: use --k and trees of depth "
                           f"{heads.n_heads} or less")
    engine = RealEngine(target, draft if drafter == "model" else None, heads=heads)
    exact = exact_joint(target, prompt, m, temperature)
    configs: list[tuple[str, Decoding]] = [(f"chain k={k}", Decoding(k=k, drafter=drafter, temperature=temperature))
                                           for k in ks]
    configs += [(f"tree {t.label}", Decoding(tree=t, drafter=drafter, temperature=temperature)) for t in trees]
    cases = [("plain sampling", Decoding(k=0, temperature=temperature), seed, "check")]
    cases += [(f"speculative {label}", how, seed + 1 + i, "check") for i, (label, how) in enumerate(configs)]
    base_label, base = configs[0] if configs else ("chain k=1", Decoding(k=1, drafter=drafter))
    cases += [(f"negative control: {rule} ({base_label})",
               Decoding(k=base.k, tree=base.tree, drafter=base.drafter, temperature=temperature, rule=rule),
               seed + 100 + j, "control") for j, rule in enumerate(("resample-from-p", "accept-q-over-p"))]
    checks: list[TestResult] = []
    controls: list[TestResult] = []
    with (progress or no_progress)(f"sampling {len(cases)} cases x {samples:,}", len(cases) * samples) as bar:
        for label, how, case_seed, kind in cases:
            r = run_case(label, engine, prompt, m, samples, how, exact, case_seed, tick=bar.update)
            (checks if kind == "check" else controls).append(r)
            report(r, kind)
    return checks, controls


def verdict(r: TestResult, kind: str) -> tuple[bool, str]:
    ok = r.p_value > PASS_P if kind == "check" else r.p_value < CATCH_P
    acc = "" if r.acceptance_rate is None else f", acceptance {r.acceptance_rate:.3f}"
    tpp = "" if r.tokens_per_pass is None else f", {r.tokens_per_pass:.2f} tokens/pass"
    word = ("PASS" if ok else "FAIL") if kind == "check" else ("CAUGHT" if ok else "MISSED")
    expect = f"p > {PASS_P}" if kind == "check" else f"p < {CATCH_P:g}"
    return ok, (f"{word:6s} {r.label}: chi2 {r.chi2:.1f} on {r.df} df, p = {r.p_value:.3g} (want {expect}); "
                f"TV {r.tv:.4f} vs noise {r.tv_noise95:.4f}{acc}{tpp}")
