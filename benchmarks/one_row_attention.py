"""Why the engine attends with one bf16 query row as two on a CPU (`engine.model.attend`): torch's CPU attention
kernel takes several times as long for one bf16 query row as for two, so an engine that calls it as it is prices a
plain decoding step (and a draft step) above a two-token verify pass. Outside the test suite (about a minute).

Part 1 times one SDPA call over a bf16 cache: one query row, two rows, and one row run as two (what `attend` does).
Part 2 times the built-in target's and draft's cached passes, one token against two per sequence, with `attend` as
shipped and with the plain call put back. Medians over interleaved repeats, with the spread (IQR / median).

    python benchmarks/one_row_attention.py [--repeats 30] [--contexts 64,384,960] [--batches 1,4,16]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

import engine.model as model_module
from engine.builtin import load_pair
from engine.model import causal_window


def timed(fns: dict[str, Callable[[], object]], repeats: int,
          rng: np.random.Generator) -> dict[str, tuple[float, float]]:
    """Median seconds and IQR / median of each function, the functions taken in a fresh random order per repeat."""
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for _ in range(repeats):
        for i in rng.permutation(len(names)):
            t0 = time.perf_counter()
            fns[names[i]]()
            samples[names[i]].append(time.perf_counter() - t0)
    out = {}
    for name, xs in samples.items():
        q1, med, q3 = np.percentile(xs, [25, 50, 75])
        out[name] = (float(med), float((q3 - q1) / med))
    return out


def sdpa_table(batches: list[int], contexts: list[int], repeats: int, rng: np.random.Generator) -> None:
    heads, head_dim = 12, 64  # the built-in target's attention
    print("one SDPA call, bf16, 12 heads of 64 (median us [IQR/median]):")
    print(f"{'keys':>6} {'batch':>5} {'one row':>16} {'two rows':>16} {'one row as two':>16}")
    for keys in contexts:
        for b in batches:
            k = torch.randn(b, heads, keys, head_dim, dtype=torch.bfloat16)
            v = torch.randn(b, heads, keys, head_dim, dtype=torch.bfloat16)
            q1 = torch.randn(b, heads, 1, head_dim, dtype=torch.bfloat16)
            q2 = torch.randn(b, heads, 2, head_dim, dtype=torch.bfloat16)
            m1 = torch.zeros(b, 1, 1, keys, dtype=torch.bfloat16)
            m2 = torch.zeros(b, 1, 2, keys, dtype=torch.bfloat16)
            sdpa = F.scaled_dot_product_attention
            r = timed({"one": partial(sdpa, q1, k, v, attn_mask=m1), "two": partial(sdpa, q2, k, v, attn_mask=m2),
                       "as two": partial(model_module.attend, q1, k, v, m1)}, repeats * 4, rng)
            cells = " ".join(f"{1e6 * r[n][0]:9.1f} [{100 * r[n][1]:3.0f}%]" for n in ("one", "two", "as two"))
            print(f"{keys:>6} {b:>5} {cells}")


def pass_table(batches: list[int], contexts: list[int], repeats: int, rng: np.random.Generator) -> None:
    target, draft = load_pair(max_seq_len=max(contexts) + 64)
    shipped = model_module.attend

    def plain(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    print("\ncached passes of the built-in pair, bf16: one token per sequence against two (median ms)")
    print(f"{'model':>14} {'context':>7} {'batch':>5} {'1 token, plain':>15} {'1 token, as two':>16} {'2 tokens':>9}"
          f" {'1/2 plain':>9} {'1/2 as two':>10}")
    for name, m in (("specsim-target", target.eval()), ("specsim-draft", draft.eval())):
        m.setup_cache(max(batches))
        for c in contexts:
            for b in batches:
                def run(n: int, attend: Callable[..., torch.Tensor], b: int = b, c: int = c,
                        m: torch.nn.Module = m) -> Callable[[], object]:
                    tokens = torch.zeros(b, n, dtype=torch.long)
                    window = causal_window(torch.full((b,), c, dtype=torch.long), n, c + 32)

                    def go() -> object:
                        model_module.attend = attend
                        try:
                            with torch.inference_mode():
                                return m(tokens, window)
                        finally:
                            model_module.attend = shipped
                    return go
                r = timed({"plain": run(1, plain), "as two": run(1, shipped), "two": run(2, shipped)}, repeats, rng)
                p, a, t = (1e3 * r[n][0] for n in ("plain", "as two", "two"))
                print(f"{name:>14} {c:>7} {b:>5} {p:>15.2f} {a:>16.2f} {t:>9.2f} {p / t:>9.2f} {a / t:>10.2f}")
        m.free_cache()


def int_list(high: int) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated integers from 1 to `high`."""
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: want integers, e.g. 15 or 1,4,16") from None
        if not all(1 <= v <= high for v in values):
            raise argparse.ArgumentTypeError(f"{text!r}: each value must be from 1 to {high}")
        return values
    return parse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=lambda text: int_list(1000)(text)[0], default=15)
    ap.add_argument("--contexts", type=int_list(4096), default=[64, 384, 960])
    ap.add_argument("--batches", type=int_list(256), default=[1, 4, 16])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    sdpa_table(a.batches, a.contexts, a.repeats, rng)
    pass_table(a.batches, a.contexts, a.repeats, rng)


if __name__ == "__main__":
    main()
