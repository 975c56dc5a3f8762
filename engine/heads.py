"""Prediction heads on the target's own hidden state (Medusa, Cai et al. 2024, arXiv 2401.10774): head i reads the
target's final normalised hidden state at the position before the current token (the one whose next token the
target's own head predicts) and proposes the token i positions past the current one. Each head is a residual block
(h + SiLU(W h)) and an LM head over the vocabulary; all heads run in one pass, for every position of a step at once:
no draft model, no draft cache, no serial draft passes.

The built-in heads are trained on the built-in target's hidden states (`python -m engine.train_heads`) and, like the
target, widened without changing their function (`expand_heads`): the expanded target's hidden state is the trained
one padded with zeros, so heads padded the same way propose exactly what they were trained to.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class MedusaHeads(nn.Module):
    """`n_heads` heads of `layers` residual blocks each, on hidden states of width `d_model`, over `vocab_size`."""

    def __init__(self, d_model: int, vocab_size: int, n_heads: int, layers: int = 1) -> None:
        super().__init__()
        self.d_model, self.vocab_size, self.n_heads, self.layers = d_model, vocab_size, n_heads, layers
        self.blocks = nn.ModuleList(nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(layers))
                                    for _ in range(n_heads))
        self.lm = nn.ModuleList(nn.Linear(d_model, vocab_size, bias=False) for _ in range(n_heads))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (..., n_heads, vocab) of each head at hidden states (..., d_model)."""
        out = []
        for blocks, lm in zip(self.blocks, self.lm):
            h = hidden
            for block in blocks:
                h = h + F.silu(block(h))
            out.append(lm(h))
        return torch.stack(out, dim=-2)

    @property
    def device(self) -> torch.device:
        return self.lm[0].weight.device

    def shape(self) -> dict:
        return {"d_model": self.d_model, "vocab_size": self.vocab_size, "n_heads": self.n_heads,
                "layers": self.layers}


def init_from_target(heads: MedusaHeads, output: nn.Linear) -> MedusaHeads:
    """Medusa's initialisation: every head's LM head a copy of the target's, every block zero (so each head starts
    by proposing the target's next token)."""
    with torch.no_grad():
        for blocks, lm in zip(heads.blocks, heads.lm):
            lm.weight.copy_(output.weight)
            for block in blocks:
                block.weight.zero_()
                block.bias.zero_()
    return heads


def random_heads(d_model: int, vocab_size: int, n_heads: int, layers: int = 1, seed: int = 0,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> MedusaHeads:
    """Heads of a shape with random weights (timing, and a poor draft for the exactness test)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)  # drawn on the host: the same heads on every device
    with torch.device("cpu"):
        heads = MedusaHeads(d_model, vocab_size, n_heads, layers)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, device="cpu") / math.sqrt(p.shape[-1]))
    return heads.to(device=device, dtype=dtype).eval().requires_grad_(False)


def expand_heads(heads: MedusaHeads, d_model: int) -> MedusaHeads:
    """The same heads on a residual stream padded with zeros to `d_model` (see the module docstring): new rows and
    columns zero, so the padded part of every block stays zero and the logits are unchanged."""
    d = heads.d_model
    with torch.device(heads.device):  # on the heads' device, whatever torch's default is
        big = MedusaHeads(d_model, heads.vocab_size, heads.n_heads, heads.layers).to(heads.lm[0].weight.dtype)
    with torch.no_grad():
        for p in big.parameters():
            p.zero_()
        for (bb, blm), (sb, slm) in zip(zip(big.blocks, big.lm), zip(heads.blocks, heads.lm)):
            for b_block, s_block in zip(bb, sb):
                b_block.weight[:d, :d] = s_block.weight
                b_block.bias[:d] = s_block.bias
            blm.weight[:, :d] = slm.weight
    return big.eval().requires_grad_(False)
