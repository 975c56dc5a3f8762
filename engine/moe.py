"""A mixture-of-experts feed-forward layer as serving engines run it: a router, then every routed expert that the
pass's tokens touch run once over the tokens routed to it (grouped by expert), so a pass reads only the touched
experts' weights, and shared experts over every token.

Random weights know no language, so which experts a token routes to is drawn, not learned (`Routing`): each
sequence's first token of a pass picks top-k of E uniformly; every later token of the same sequence in that pass
reuses the first one's experts with probability `sharing`, else draws its own; sequences route independently. The
router's matmul and its gating (softmax over the chosen experts' logits) run for real. On average a sequence's n
tokens then wake the experts of 1 + (n - 1)(1 - sharing) independent tokens, which is what the cost model prices
(`simulator.specs.ModelSpec.experts_touched`). Grouping reads its routing back to the host (which experts, how
many rows each): an MoE pass runs eagerly, not as a captured graph.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Routing:
    """How a model's MoE layers choose experts: `sharing` within a sequence's tokens of one pass, draws from one
    seeded generator (one per model, so the same seed routes the same way)."""

    def __init__(self, sharing: float = 0.0, seed: int = 0, device: torch.device | str = "cpu") -> None:
        if not 0.0 <= sharing <= 1.0:
            raise ValueError(f"expert sharing must be in [0, 1], got {sharing}")
        self.sharing = sharing
        self.gen = torch.Generator(device=device).manual_seed(seed)

    def choose(self, batch: int, n: int, n_experts: int, top_k: int, device: torch.device) -> torch.Tensor:
        """(B, n, top_k) expert ids, distinct within a token."""
        scores = torch.rand(batch, n, n_experts, generator=self.gen, device=device)
        experts = scores.topk(top_k, dim=-1).indices
        if self.sharing > 0.0 and n > 1:
            reuse = torch.rand(batch, n, generator=self.gen, device=device) < self.sharing
            reuse[:, 0] = False
            experts = torch.where(reuse[..., None], experts[:, :1], experts)
        return experts


class MoEFeedForward(nn.Module):
    """Routed SwiGLU experts (weights stacked: gate and up (E, 2 f, d), down (E, d, f)), an optional shared SwiGLU
    expert of width `d_ff_shared`, and the router (d -> E)."""

    def __init__(self, d_model: int, n_experts: int, top_k: int, d_ff_expert: int, d_ff_shared: int = 0) -> None:
        super().__init__()
        self.n_experts, self.top_k, self.d_ff_expert = n_experts, top_k, d_ff_expert
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.w13 = nn.Parameter(torch.empty(n_experts, 2 * d_ff_expert, d_model))
        self.w2 = nn.Parameter(torch.empty(n_experts, d_model, d_ff_expert))
        self.shared = None
        if d_ff_shared:
            self.shared_w13 = nn.Linear(d_model, 2 * d_ff_shared, bias=False)
            self.shared_w2 = nn.Linear(d_ff_shared, d_model, bias=False)
            self.shared = True
        self.routing: Routing | None = None  # set by the model (`Decoder.set_routing`)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, n, d = x.shape
        assert self.routing is not None, "an MoE model needs its routing (Decoder.set_routing)"
        flat = x.reshape(B * n, d)
        logits = self.router(flat).float()  # (T, E): the router's real matmul
        experts = self.routing.choose(B, n, self.n_experts, self.top_k, x.device).reshape(B * n, self.top_k)
        gates = torch.softmax(logits.gather(1, experts), dim=-1).to(x.dtype)  # (T, top_k)
        out = torch.zeros_like(flat)
        order = experts.reshape(-1).argsort()
        counts = torch.bincount(experts.reshape(-1), minlength=self.n_experts).tolist()  # host read: grouping
        token_of = order // self.top_k
        gate_of = gates.reshape(-1)[order]
        first = 0
        for e, count in enumerate(counts):
            if not count:
                continue  # an untouched expert: its weights are never read
            rows = token_of[first:first + count]
            h = flat[rows]
            gate, up = F.linear(h, self.w13[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.w2[e])
            out.index_add_(0, rows, y * gate_of[first:first + count, None])
            first += count
        if self.shared:
            gate, up = self.shared_w13(flat).chunk(2, dim=-1)
            out = out + self.shared_w2(F.silu(gate) * up)
        return out.reshape(B, n, d)
