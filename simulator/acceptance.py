"""Acceptance models: how many of k drafted tokens the target accepts.

Every model gives the distribution of the accepted length A for a chain of k drafted tokens (``chain_pmf``, exact),
the expected tokens per target pass E[A + 1], and two ways to draw A with a caller's ``numpy.random.Generator``:
``sample_chain`` draws steps independently (matching ``chain_pmf``), and ``stream`` follows one sequence across
steps, carrying whatever state the model has (a Markov state, a per-sequence alpha, a position in a trace).

Spec strings (`simulator.acceptance_parse.parse_acceptance`):

- ``iid:A`` - every drafted token accepted independently with probability A (Leviathan et al. 2023, Eq. 1).
- ``positional:A1,A2,...`` - Ai = P(accept position i | positions < i accepted); the last value repeats past the list.
- ``beta:a,b`` - each sequence has its own alpha ~ Beta(a, b), for its whole life; its steps pooled with every
  other sequence's, each emitting the same number of tokens, are the model's ``chain_pmf`` (`BetaAcceptance`).
- ``markov:AE,AH,PEH,PHE`` - a hidden easy/hard state per token: alpha AE in the easy state, AH in the hard one,
  P(easy -> hard) = PEH and P(hard -> easy) = PHE between consecutive tokens.
- ``hmm:A1,..,AS/ROW1/../ROWS`` - the same with S hidden states: their alphas, then the transition matrix by rows.
- ``trace:FILE[:COLUMN]`` - replay a greedy acceptance trace (the per-request lines of ``data/acceptance-traces``:
  per position, the tokens one step starting there yields; COLUMN ``eagle`` (default) or ``ngram``). This package
  reads no files:
  ``scenarios.acceptance_from_spec`` reads the trace and builds a ``simulator.replay.TraceAcceptance``.
- ``ranks:R1,R2,...`` - Sequoia's per-rank vector: Rj = P(the j-th ranked draft candidate is the accepted one).
  A chain uses alpha = R1; trees need this model.
- ``SPEC@proposed:P`` - a model-free draft's acceptance (n-gram, suffix, retrieval): on a fraction P of steps it
  proposes and ``SPEC`` says what is accepted; on the others it finds nothing and the step is a plain one (A = 0).
  (`Proposing`; one measurement: Qwen3-8B on gsm8k drafted on 30 % of rounds.)
- ``SPEC@context:C1=F1,C2=F2,...`` - any of the parametric models above with acceptance that changes with context:
  at a sequence's context c (cached tokens) every drafted token's acceptance probability is the base model's times
  F(c), the factors interpolated linearly between the given contexts and flat beyond them, capped at 1
  (`simulator.context.ContextDependent`; MTP and EAGLE drafts trained at short context lose acceptance at long
  context, vLLM #47602; prompt-lookup gains it). A replayed trace carries its own contexts and takes no factor.

One concept past 500 lines: the acceptance models, each with its exact pmf and its samplers side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import SpecsimError

AcceptanceStream = Callable[[int], int]
"""One sequence followed across steps: called with k, returns A for its next step of k drafts."""


def _check_prob(name: str, value: float) -> float:
    if not (0.0 <= value <= 1.0) or not np.isfinite(value):
        raise SpecsimError(f"{name} must be a probability in [0, 1], got {value}")
    return float(value)


def check_k(k: int) -> int:
    if k < 0:
        raise SpecsimError(f"draft length k must be >= 0, got {k}")
    return int(k)


class Acceptance:
    """Base class: subclasses implement ``chain_pmf``; the rest follows from it."""

    spec: str = ""
    ranks: tuple[float, ...] | None = None  # per-rank vector where the model has one (trees need it)

    def chain_pmf(self, k: int) -> np.ndarray:
        """P(A = a) for a = 0..k, a chain of k drafted tokens."""
        raise NotImplementedError

    def expected_tokens(self, k: int) -> float:
        """E[A + 1]: tokens emitted per target pass by a chain of k (accepted plus the resampled or bonus one)."""
        pmf = self.chain_pmf(k)
        return float(np.dot(np.arange(1, k + 2), pmf))

    def survival(self, k: int) -> np.ndarray:
        """P(A >= i) for i = 1..k: vLLM's per-position acceptance counters divided by the number of steps."""
        pmf = self.chain_pmf(k)
        return np.cumsum(pmf[::-1])[::-1][1:]

    @property
    def alpha(self) -> float:
        """Mean per-token acceptance rate (P(A >= 1) for k = 1)."""
        return float(self.chain_pmf(1)[1])

    @property
    def measured_up_to_k(self) -> int | None:
        """The most drafts per step the source of this model saw (an engine's counters at its k); None for a model
        given by its parameters. A prediction for more drafts than that extrapolates the model."""
        return None

    def proposal_rate(self, k: int) -> float:
        """P(a step drafts anything for a sequence) with chains of k: 1 for a draft that always drafts; a model-free
        draft finds nothing on many steps (`Proposing`, or a lookup's trace), and those steps are plain ones. The
        model's ``chain_pmf`` counts them (A = 0, one token)."""
        return 1.0

    def sample_chain(self, k: int, rng: np.random.Generator, size: int) -> np.ndarray:
        """`size` independent draws of A for a chain of k (the distribution ``chain_pmf`` gives)."""
        return rng.choice(k + 1, size=size, p=self.chain_pmf(check_k(k)))

    def stream(self, rng: np.random.Generator, stationary: bool = False) -> AcceptanceStream:
        """A sequence followed across steps (stateless models: independent steps). `stationary`: start it at a
        random point of the process rather than at a request's start (matters only for position-dependent
        replays: a short run that starts every sequence at a response's opening sees only openings)."""
        return lambda k: int(self.sample_chain(k, rng, 1)[0])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"

    def context_factor(self, context: float) -> float:
        """The factor on every drafted token's acceptance at this context (1: no context dependence)."""
        return 1.0

    def at_context(self, context: float) -> Acceptance:
        """The model as it stands at `context` cached tokens (itself, for a model without context dependence)."""
        return self

    def scaled(self, factor: float) -> Acceptance:
        """Every drafted token's acceptance probability times `factor`, capped at 1."""
        if factor == 1.0:
            return self
        raise SpecsimError(f"acceptance {self.spec} cannot scale with context: use iid, positional, beta, markov, "
                           "hmm or ranks (a replayed trace carries its own contexts)")


@dataclass(frozen=True, repr=False)
class IIDAcceptance(Acceptance):
    alpha_: float

    def __post_init__(self) -> None:
        _check_prob("alpha", self.alpha_)

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"iid:{self.alpha_:g}"

    def chain_pmf(self, k: int) -> np.ndarray:
        k = check_k(k)
        a = self.alpha_
        pmf = a ** np.arange(k + 1) * (1.0 - a)
        pmf[k] = a**k
        return pmf

    def expected_tokens(self, k: int) -> float:
        """Leviathan et al. 2023, Eq. 1: (1 - a^(k+1)) / (1 - a); k + 1 at a = 1."""
        k = check_k(k)
        a = self.alpha_
        return float(k + 1) if a == 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)

    @property
    def alpha(self) -> float:
        return self.alpha_

    def scaled(self, factor: float) -> Acceptance:
        return IIDAcceptance(min(self.alpha_ * factor, 1.0))


@dataclass(frozen=True, repr=False)
class PositionalAcceptance(Acceptance):
    alphas: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.alphas:
            raise SpecsimError("positional acceptance needs at least one alpha, e.g. positional:0.8,0.75,0.7")
        for i, a in enumerate(self.alphas, 1):
            _check_prob(f"positional alpha {i}", a)

    @property
    def spec(self) -> str:  # type: ignore[override]
        return "positional:" + ",".join(f"{a:g}" for a in self.alphas)

    def conditional(self, k: int) -> np.ndarray:
        """alpha_i for i = 1..k, the last given value repeated."""
        a = np.asarray(self.alphas, dtype=float)
        return np.concatenate([a[:k], np.full(max(k - len(a), 0), a[-1])])

    def chain_pmf(self, k: int) -> np.ndarray:
        k = check_k(k)
        at_least = np.concatenate([[1.0], np.cumprod(self.conditional(k))])  # P(A >= i), i = 0..k
        pmf = at_least.copy()
        pmf[:-1] -= at_least[1:]
        return pmf

    def scaled(self, factor: float) -> Acceptance:
        return PositionalAcceptance(tuple(min(a * factor, 1.0) for a in self.alphas))


@lru_cache(maxsize=256)
def beta_quadrature(a: float, b: float, n: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Jacobi nodes and weights for E[f(x)] with x ~ Beta(a, b): sum(w * f(x)) is exact for polynomials of
    degree < 2n, and a density that diverges at 0 or 1 (a or b < 1) is weighed exactly, as the weight carries it.

    Golub & Welsch (1969): the nodes are the eigenvalues of the Jacobi matrix of the three-term recurrence of the
    polynomials orthogonal under (1 - t)^p (1 + t)^q on [-1, 1], p = b - 1, q = a - 1 (x = (1 + t) / 2); the weights
    are the squared first components of its eigenvectors."""
    p, q = b - 1.0, a - 1.0
    s = p + q
    j = np.arange(1, n, dtype=float)
    diag = np.empty(n)
    diag[0] = (q - p) / (s + 2.0)
    diag[1:] = (q * q - p * p) / ((2 * j + s) * (2 * j + s + 2))
    off2 = np.empty(n - 1)
    off2[0] = 4 * (1 + p) * (1 + q) / ((2 + s) ** 2 * (3 + s))  # j = 1: (j + s) / (2j + s - 1) = 1, cancelled
    j = j[1:]
    off2[1:] = 4 * j * (j + p) * (j + q) * (j + s) / ((2 * j + s) ** 2 * (2 * j + s + 1) * (2 * j + s - 1))
    nodes, vectors = np.linalg.eigh(np.diag(diag) + np.diag(np.sqrt(off2), 1) + np.diag(np.sqrt(off2), -1))
    weights = vectors[0] ** 2
    return np.clip((1.0 + nodes) / 2.0, 0.0, 1.0), weights / weights.sum()


def tokens_given_alpha(alpha: np.ndarray, k: int) -> np.ndarray:
    """E[A + 1 | alpha] = 1 + alpha + ... + alpha^k for a chain of k at per-token acceptance `alpha`."""
    return (np.asarray(alpha, dtype=float)[..., None] ** np.arange(k + 1)).sum(-1)


def step_weighted_pmf(alpha: np.ndarray, weight: np.ndarray, k: int) -> np.ndarray:
    """P(A = j) over all the steps of sequences whose per-token acceptance `alpha` has weights `weight` over
    sequences, every sequence emitting the same number of tokens: a sequence takes steps in proportion to
    1 / E[A + 1 | alpha], so that is its share of the steps. E[A + 1] is then the weighted harmonic mean of the
    sequences' own E[A + 1 | alpha], below their plain mean: a hard sequence stays longer and weighs more."""
    alpha = np.asarray(alpha, dtype=float)
    j = np.arange(k + 1)
    given = alpha[:, None] ** j * (1.0 - alpha[:, None])  # P(A = j | alpha), j < k
    given[:, k] = alpha**k
    pmf = (np.asarray(weight, dtype=float) / tokens_given_alpha(alpha, k)) @ given
    return pmf / pmf.sum()


@dataclass(frozen=True, repr=False)
class BetaAcceptance(Acceptance):
    """Each sequence has its own alpha ~ Beta(a, b) for its whole life, its steps independent given it.

    ``chain_pmf`` is the distribution of A over all the steps of many such sequences, each emitting the same number of
    tokens (requests' lengths do not depend on their acceptance): what a server's counters pool and what the serving
    simulator's sequences produce. A low-alpha sequence takes more steps, so it weighs more than its share of
    sequences (`step_weighted_pmf`)."""

    a: float
    b: float

    def __post_init__(self) -> None:
        if not (self.a > 0 and self.b > 0 and np.isfinite(self.a) and np.isfinite(self.b)):
            raise SpecsimError(f"beta acceptance needs a > 0 and b > 0, got a={self.a}, b={self.b}")

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"beta:{self.a:g},{self.b:g}"

    def draw_alphas(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Sequences' own acceptance rates."""
        return rng.beta(self.a, self.b, size=size)

    def chain_pmf(self, k: int) -> np.ndarray:
        """The step-weighted mixture over alpha ~ Beta(a, b) of the geometric P(A = j | alpha), by Gauss-Jacobi
        quadrature (`beta_quadrature`)."""
        k = check_k(k)
        x, w = beta_quadrature(float(self.a), float(self.b))
        return step_weighted_pmf(x, w, k)

    def sample_chain(self, k: int, rng: np.random.Generator, size: int) -> np.ndarray:
        """Steps drawn as a server pools them: a sequence's alpha, kept for the step with probability
        1 / E[A + 1 | alpha] (its share of the steps; rejection sampling), then A given alpha."""
        k = check_k(k)
        kept: list[np.ndarray] = []
        need = size
        while need > 0:
            alpha = self.draw_alphas(rng, (k + 1) * need + 16)
            alpha = alpha[rng.random(alpha.size) * tokens_given_alpha(alpha, k) < 1.0]
            kept.append(alpha[:need])
            need -= kept[-1].size
        return _geometric_capped(np.concatenate(kept), k, rng)

    def stream(self, rng: np.random.Generator, stationary: bool = False) -> AcceptanceStream:
        alpha = self.draw_alphas(rng, 1)
        return lambda k: int(_geometric_capped(alpha, k, rng)[0])

    def scaled(self, factor: float) -> Acceptance:
        return ScaledBetaAcceptance(self.a, self.b, factor) if factor != 1.0 else self


@dataclass(frozen=True, repr=False)
class ScaledBetaAcceptance(BetaAcceptance):
    """A sequence's alpha is min(factor x, 1) with x ~ Beta(a, b): ``beta:a,b`` at another context."""

    factor: float = 1.0

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"beta:{self.a:g},{self.b:g}x{self.factor:.4g}"

    def draw_alphas(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.minimum(self.factor * rng.beta(self.a, self.b, size=size), 1.0)

    def chain_pmf(self, k: int) -> np.ndarray:
        """As `BetaAcceptance`'s, with alpha = min(f x, 1): by quadrature over x on a fine grid (min() has a kink a
        Gauss rule would not see; the Beta density is integrated per cell, so one that diverges at 0 or 1 is still
        weighed exactly)."""
        k = check_k(k)
        edges = np.linspace(0.0, 1.0, 4097)
        weights = np.diff(_beta_cdf(edges, self.a, self.b))
        return step_weighted_pmf(np.minimum(self.factor * (edges[:-1] + edges[1:]) / 2, 1.0), weights, k)

    def scaled(self, factor: float) -> Acceptance:
        return ScaledBetaAcceptance(self.a, self.b, self.factor * factor)


def _beta_cdf(x: np.ndarray, a: float, b: float) -> np.ndarray:
    """The Beta(a, b) distribution function at points `x` in [0, 1] (numerically, from the log-density on a fine
    grid: enough for weights, not a special-function library)."""
    grid = np.linspace(0.0, 1.0, 200_001)[1:-1]
    log_pdf = (a - 1) * np.log(grid) + (b - 1) * np.log1p(-grid)
    pdf = np.exp(log_pdf - log_pdf.max())
    cdf = np.concatenate([[0.0], np.cumsum(pdf)])
    cdf /= cdf[-1]
    return np.interp(x, np.concatenate([[0.0], grid]), cdf)


def _geometric_capped(alpha: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted length for per-draw acceptance rates `alpha`: leading successes among k Bernoulli(alpha) trials."""
    accepted = rng.random((alpha.size, k)) < alpha[:, None]
    return np.where(accepted.all(axis=1), k, np.argmin(accepted, axis=1)) if k else np.zeros(alpha.size, int)


@lru_cache(maxsize=64)
def _eye(n: int) -> np.ndarray:
    e = np.eye(n)
    e.flags.writeable = False
    return e


@lru_cache(maxsize=64)
def _upper(n: int) -> np.ndarray:
    u = np.triu(np.ones((n, n)))
    u.flags.writeable = False
    return u


def stationary_many(M: np.ndarray) -> np.ndarray:
    """`stationary` of a stack of row-stochastic matrices (n, S, S) at once: pi (M - I) = 0 with one equation
    replaced by sum(pi) = 1, solved directly (the chains here are ergodic, so the system is regular). With two or
    three states, in closed form: pi_i is proportional to the principal minor of I - M without row and column i
    (the Markov chain tree theorem), a few array operations where a batched solve costs several times more - the
    fits of hidden chains evaluate this thousands of times."""
    n, S, _ = M.shape
    if S == 2:
        pi = np.stack([M[:, 1, 0], M[:, 0, 1]], axis=1)
        return pi / pi.sum(axis=1, keepdims=True)
    if S == 3:
        j, k = (1, 0, 0), (2, 2, 1)  # pi_i from the other two states j < k
        d = 1.0 - M[:, (0, 1, 2), (0, 1, 2)]  # (n, 3): 1 - M_ii
        pi = np.maximum(d[:, j] * d[:, k] - M[:, j, k] * M[:, k, j], 0.0)
        return pi / pi.sum(axis=1, keepdims=True)
    A = np.swapaxes(M, 1, 2) - _eye(S)
    A[:, -1, :] = 1.0
    b = np.zeros((n, S))
    b[:, -1] = 1.0
    pi = np.linalg.solve(A, b[..., None])[..., 0].clip(min=0.0)
    return pi / pi.sum(axis=1, keepdims=True)


def hidden_chain_pmf_matrix(alphas: np.ndarray, T: np.ndarray, K: int) -> np.ndarray:
    """The accepted-length distributions of a hidden chain for k = 1..K as rows of a (K, K + 1) matrix (row k - 1
    holds P(A = 0..k), zeros beyond), in one forward pass from every start state at once.

    With D = diag(alphas), the mass still accepted after i drafts is (D T)^i from each start state (rows) to each
    state of the next token (columns); what is rejected at draft i is (D T)^i (I - D). A step of k drafts moves
    the start state by the chain sum_{i<k} (D T)^i (I - D) T + (D T)^k T, whose stationary law pi_k is where the
    steps of a long run start; P(A = i) = pi_k rejected_i 1, P(A = k) = pi_k (D T)^k 1."""
    return hidden_chain_pmf_stack(np.asarray(alphas)[None], np.asarray(T)[None], K)[0]


def hidden_chain_pmf_stack(alphas: np.ndarray, T: np.ndarray, K: int) -> np.ndarray:
    """`hidden_chain_pmf_matrix` of a stack of B chains at once: alphas (B, S), T (B, S, S) -> (B, K, K + 1). The
    fits evaluate several candidate chains per step (`simulator.minimize.nelder_mead_many`), and for chains of
    2-3 states one evaluation of a stack costs about what one chain does."""
    B, S = alphas.shape
    DT = alphas[:, :, None] * T
    powers = np.empty((B, K + 1, S, S))
    powers[:, 0] = _eye(S)
    for i in range(K):
        powers[:, i + 1] = powers[:, i] @ DT
    rejected = powers[:, :K] * (1.0 - alphas)[:, None, None, :]  # (B, K, S, S): column s scaled by its rejection
    chains = (np.cumsum(rejected, axis=1) + powers[:, 1:]) @ T[:, None]  # chains[:, k - 1]: the step of k drafts
    pis = stationary_many(chains.reshape(B * K, S, S)).reshape(B, K, S)
    out = np.zeros((B, K, K + 1))
    per_position = rejected.sum(axis=3) @ np.swapaxes(pis, 1, 2)  # [b, i, k - 1] = P(rejected at draft i | k)
    out[:, :, :K] = np.swapaxes(per_position * _upper(K), 1, 2)  # keep i < k: row k - 1 has k rejections
    out[:, np.arange(K), np.arange(1, K + 1)] = (pis * powers[:, 1:].sum(axis=3)).sum(axis=2)
    return out


def hidden_chain_pmfs(alphas: np.ndarray, T: np.ndarray, ks: Sequence[int]) -> dict[int, np.ndarray]:
    """`HiddenChain.chain_pmfs` from the arrays alone (`hidden_chain_pmf_matrix`'s rows)."""
    want = sorted(set(ks))
    out: dict[int, np.ndarray] = {0: np.ones(1)} if 0 in want else {}
    K = want[-1] if want else 0
    if K > 0:
        matrix = hidden_chain_pmf_matrix(np.asarray(alphas, dtype=float), np.asarray(T, dtype=float), K)
        out.update({k: matrix[k - 1, :k + 1].copy() for k in want if k > 0})
    return out


def stationary(M: np.ndarray) -> np.ndarray:
    """The stationary distribution pi = pi M of a row-stochastic matrix (least squares with sum(pi) = 1)."""
    S = M.shape[0]
    A = np.vstack([M.T - np.eye(S), np.ones((1, S))])
    b = np.concatenate([np.zeros(S), [1.0]])
    pi = np.linalg.lstsq(A, b, rcond=None)[0].clip(min=0.0)
    return pi / pi.sum()


class HiddenChain(Acceptance):
    """A hidden state per token position that persists across tokens and steps: a token in state s is accepted with
    probability ``alphas[s]``; between consecutive positions the state moves by ``transition`` (row-stochastic).

    A step's first drafted token has the step-start distribution: the stationary distribution of the chain of step
    starts (the position after the last token a step emits), which the forward algorithm gives. This is what a real
    step sees: it starts right after the last rejection or bonus token, not at an average position."""

    @property
    def alphas(self) -> np.ndarray:
        raise NotImplementedError

    @property
    def transition(self) -> np.ndarray:
        raise NotImplementedError

    @property
    def n_states(self) -> int:
        return len(self.alphas)

    @property
    def token_stationary(self) -> np.ndarray:
        return stationary(self.transition)

    @property
    def alpha(self) -> float:
        """Per-token acceptance averaged over the token-level stationary distribution."""
        return float(self.token_stationary @ self.alphas)

    def _forward(self, start: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """From the state distribution of the first drafted token: (pmf of A, distribution of the next step's
        first drafted token). Rows of ``start`` are separate start distributions."""
        alphas, T = self.alphas, self.transition
        f = np.atleast_2d(start).astype(float)  # f[:, s] = P(all earlier accepted, current token in state s)
        pmf = np.zeros((f.shape[0], k + 1))
        next_start = np.zeros_like(f)
        for i in range(k):
            rejected = f * (1.0 - alphas)
            pmf[:, i] = rejected.sum(axis=1)
            next_start += rejected @ T  # resampled token sits at the rejected position; next draft one further
            f = (f * alphas) @ T
        pmf[:, k] = f.sum(axis=1)
        next_start += f @ T  # f is now the bonus token's position
        return pmf, next_start

    def step_start_distribution(self, k: int) -> np.ndarray:
        """Stationary distribution of the state at the first drafted token of a step of k drafts."""
        if check_k(k) == 0:
            return self.token_stationary
        _, M = self._forward(np.eye(self.n_states), k)
        return stationary(M)

    def chain_pmf(self, k: int) -> np.ndarray:
        k = check_k(k)
        if k == 0:
            return np.ones(1)
        pmf, _ = self._forward(self.step_start_distribution(k), k)
        return pmf[0]

    def chain_pmfs(self, ks: Sequence[int]) -> dict[int, np.ndarray]:
        """`chain_pmf` for several k in one forward pass up to max(ks), from every start state at once."""
        return hidden_chain_pmfs(self.alphas, self.transition, ks)

    def _next_state(self, s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        cum = np.cumsum(self.transition, axis=1)
        return (rng.random(len(s))[:, None] >= cum[s]).sum(axis=1).clip(max=self.n_states - 1)

    def sample_chain(self, k: int, rng: np.random.Generator, size: int) -> np.ndarray:
        k = check_k(k)
        start = np.cumsum(self.step_start_distribution(k))
        state = (rng.random(size)[:, None] >= start).sum(axis=1).clip(max=self.n_states - 1)
        out = np.zeros(size, dtype=int)
        alive = np.ones(size, dtype=bool)
        for _ in range(k):
            ok = alive & (rng.random(size) < self.alphas[state])
            out += ok
            alive = ok
            state = self._next_state(state, rng)
        return out

    def scaled(self, factor: float) -> Acceptance:
        if factor == 1.0:
            return self
        return HiddenStateAcceptance(tuple(float(min(a * factor, 1.0)) for a in self.alphas),
                                     tuple(tuple(float(p) for p in row) for row in self.transition))

    def stream(self, rng: np.random.Generator, stationary: bool = False) -> AcceptanceStream:
        alphas = self.alphas
        pi = np.cumsum(self.token_stationary)
        state = [int(min((rng.random() >= pi).sum(), self.n_states - 1))]

        def step(k: int) -> int:
            s, accepted = state[0], 0
            while accepted < k and rng.random() < alphas[s]:
                accepted += 1
                s = int(self._next_state(np.array([s]), rng)[0])
            # The emitted token (resampled or bonus) sits at position s; the next step drafts one further.
            state[0] = int(self._next_state(np.array([s]), rng)[0])
            return accepted

        return step


@dataclass(frozen=True, repr=False)
class MarkovAcceptance(HiddenChain):
    """Two hidden states, easy (0) and hard (1): alpha AE in the easy one, AH in the hard one."""

    alpha_easy: float
    alpha_hard: float
    p_easy_to_hard: float
    p_hard_to_easy: float

    def __post_init__(self) -> None:
        for name in ("alpha_easy", "alpha_hard", "p_easy_to_hard", "p_hard_to_easy"):
            _check_prob(f"markov {name}", getattr(self, name))
        if self.p_easy_to_hard + self.p_hard_to_easy == 0:
            raise SpecsimError("markov: p_easy_to_hard and p_hard_to_easy cannot both be 0 (no stationary state)")

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"markov:{self.alpha_easy:g},{self.alpha_hard:g},{self.p_easy_to_hard:g},{self.p_hard_to_easy:g}"

    @property
    def alphas(self) -> np.ndarray:
        return np.array([self.alpha_easy, self.alpha_hard])

    @property
    def transition(self) -> np.ndarray:
        e, h = self.p_easy_to_hard, self.p_hard_to_easy
        return np.array([[1.0 - e, e], [h, 1.0 - h]])

    @property
    def token_stationary(self) -> np.ndarray:
        e, h = self.p_easy_to_hard, self.p_hard_to_easy
        return np.array([h, e]) / (e + h)


@dataclass(frozen=True, repr=False)
class HiddenStateAcceptance(HiddenChain):
    """Any number of hidden states: ``hmm:A1,A2,A3/P11,P12,P13/P21,P22,P23/P31,P32,P33`` (the alphas, then each row of
    the transition matrix)."""

    alphas_: tuple[float, ...]
    transition_: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        S = len(self.alphas_)
        if S < 1 or len(self.transition_) != S or any(len(r) != S for r in self.transition_):
            raise SpecsimError(f"hmm: {S} alphas need {S} transition rows of {S} values each")
        for i, a in enumerate(self.alphas_, 1):
            _check_prob(f"hmm alpha {i}", a)
        for i, row in enumerate(self.transition_, 1):
            for p in row:
                _check_prob(f"hmm transition row {i}", p)
            if abs(sum(row) - 1.0) > 1e-6:
                raise SpecsimError(f"hmm: transition row {i} sums to {sum(row):g}, not 1")

    @property
    def spec(self) -> str:  # type: ignore[override]
        rows = "/".join(",".join(f"{p:.4g}" for p in row) for row in self.transition_)
        return "hmm:" + ",".join(f"{a:.4g}" for a in self.alphas_) + "/" + rows

    @property
    def alphas(self) -> np.ndarray:
        return np.asarray(self.alphas_, dtype=float)

    @property
    def transition(self) -> np.ndarray:
        return np.asarray(self.transition_, dtype=float)


@dataclass(frozen=True, repr=False, eq=False)
class WithRanks(Acceptance):
    """A chain model plus a measured per-rank vector, so that one measured acceptance serves chains and trees."""

    chain: Acceptance
    ranks_: tuple  # (r_1, r_2, ...), or one such vector per depth (prediction heads)
    label: str = ""

    @property
    def spec(self) -> str:  # type: ignore[override]
        return self.label or self.chain.spec

    @property
    def ranks(self) -> tuple[float, ...]:  # type: ignore[override]
        return self.ranks_

    def chain_pmf(self, k: int) -> np.ndarray:
        return self.chain.chain_pmf(k)

    def expected_tokens(self, k: int) -> float:
        return self.chain.expected_tokens(k)

    def sample_chain(self, k: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return self.chain.sample_chain(k, rng, size)

    def stream(self, rng: np.random.Generator, stationary: bool = False) -> AcceptanceStream:
        return self.chain.stream(rng, stationary)

    def scaled(self, factor: float) -> Acceptance:
        if factor == 1.0:
            return self
        if self.ranks_ and isinstance(self.ranks_[0], tuple):  # one vector per depth
            ranks: tuple = tuple(tuple(min(r * factor, 1.0) for r in row) for row in self.ranks_)
        else:
            ranks = tuple(min(r * factor, 1.0) for r in self.ranks_)
        return WithRanks(self.chain.scaled(factor), ranks, f"{self.spec}x{factor:.4g}")


def iid_from_mean_length(tokens_per_step: float, k: int) -> IIDAcceptance:
    """The i.i.d. alpha whose chain of k drafts emits `tokens_per_step` = E[A + 1] tokens per verification on average
    (the "mean acceptance length" engines report, bonus token included); bisection on the increasing
    (1 - a^(k+1)) / (1 - a)."""
    if k < 1:
        raise SpecsimError(f"a mean acceptance length needs the draft length it was measured with (k >= 1), got {k}")
    if not 1.0 <= tokens_per_step <= k + 1:
        raise SpecsimError(f"a mean acceptance length with k = {k} lies in [1, {k + 1}] (tokens per verification, "
                           f"bonus included); got {tokens_per_step:g}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if IIDAcceptance(mid).expected_tokens(k) < tokens_per_step:
            lo = mid
        else:
            hi = mid
    return IIDAcceptance(round((lo + hi) / 2, 12))


@dataclass(frozen=True, repr=False)
class RanksAcceptance(Acceptance):
    """Sequoia's acceptance vector: ranks[j-1] = P(the j-th ranked candidate is the accepted one) at any node.

    The events are exclusive, so the ranks sum to at most 1; a chain sees only rank 1 and is i.i.d. with alpha = r1.
    """

    ranks_: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.ranks_:
            raise SpecsimError("ranks acceptance needs at least one value, e.g. ranks:0.6,0.15,0.05")
        for j, r in enumerate(self.ranks_, 1):
            _check_prob(f"rank {j} acceptance", r)
        if sum(self.ranks_) > 1.0 + 1e-9:
            raise SpecsimError(f"ranks must sum to at most 1 (they are exclusive outcomes); got {sum(self.ranks_):g}")

    @property
    def spec(self) -> str:  # type: ignore[override]
        return "ranks:" + ",".join(f"{r:g}" for r in self.ranks_)

    @property
    def ranks(self) -> tuple[float, ...]:  # type: ignore[override]
        return self.ranks_

    def chain_pmf(self, k: int) -> np.ndarray:
        return IIDAcceptance(self.ranks_[0]).chain_pmf(k)

    def expected_tokens(self, k: int) -> float:
        return IIDAcceptance(self.ranks_[0]).expected_tokens(k)

    def scaled(self, factor: float) -> Acceptance:
        """Each candidate's acceptance times `factor` (each node's path one factor per depth, as a chain's)."""
        ranks = [r * factor for r in self.ranks_]
        total = sum(ranks)
        return RanksAcceptance(tuple(r / max(total, 1.0) for r in ranks))


@dataclass(frozen=True, repr=False, eq=False)
class Proposing(Acceptance):
    """A model-free draft's acceptance: on a fraction `rate` of steps the lookup proposes and `base` says how much
    of the proposal is accepted; on the others it finds nothing and the sequence takes a plain step (A = 0).
    ``chain_pmf`` is the mixture, so tokens per step count the plain steps; `proposal_rate` is what the step's cost
    needs (`simulator.sweep.step_times`)."""

    base: Acceptance
    rate: float

    def __post_init__(self) -> None:
        _check_prob("a proposal rate", self.rate)
        if isinstance(self.base, Proposing):
            raise SpecsimError("give one @proposed: rate per acceptance model")

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"{self.base.spec}@proposed:{self.rate:g}"

    @property
    def ranks(self) -> tuple[float, ...] | None:  # type: ignore[override]
        return self.base.ranks

    @property
    def measured_up_to_k(self) -> int | None:
        return self.base.measured_up_to_k

    def proposal_rate(self, k: int) -> float:
        return self.rate

    def chain_pmf(self, k: int) -> np.ndarray:
        pmf = self.rate * self.base.chain_pmf(k)
        pmf[0] += 1.0 - self.rate
        return pmf

    def stream(self, rng: np.random.Generator, stationary: bool = False) -> AcceptanceStream:
        inner = self.base.stream(rng, stationary)
        return lambda k: inner(k) if rng.random() < self.rate else 0

    def context_factor(self, context: float) -> float:
        return self.base.context_factor(context)

    def at_context(self, context: float) -> Acceptance:
        at = self.base.at_context(context)
        return self if at is self.base else Proposing(at, self.rate)

    def scaled(self, factor: float) -> Acceptance:
        return self if factor == 1.0 else Proposing(self.base.scaled(factor), self.rate)
