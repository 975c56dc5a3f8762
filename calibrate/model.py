"""A Llama-style decoder (RMSNorm, rotary positions, grouped-query attention, SwiGLU) with a preallocated KV cache.

The cache is "rolled back" gpt-fast style by not advancing a position: every forward pass names, per sequence and
per new token, the cache slot it writes and the rotary position it has. Attention takes a boolean mask
(B, n, slots) so that one code path serves plain decoding, chain verification and tree verification (a node sees
the cached prefix and its own ancestors).

Rotary embeddings use the rotate-half convention of Hugging Face's Llama, so a local HF checkpoint loads as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from simulator import SpecsimError
from simulator.specs import ModelSpec

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class DecoderConfig:
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    head_dim: int
    tied_embeddings: bool = False
    max_seq_len: int = 2048  # KV-cache slots per sequence
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    @classmethod
    def from_spec(cls, spec: ModelSpec, max_seq_len: int = 2048, rope_base: float = 10000.0) -> DecoderConfig:
        return cls(spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.d_ff, spec.vocab_size,
                   spec.head_dim, spec.tied_embeddings, max_seq_len, rope_base)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        self.wqkv = nn.Linear(cfg.d_model, q_dim + 2 * kv_dim, bias=False)  # q, k, v fused: one matmul
        self.wo = nn.Linear(q_dim, cfg.d_model, bias=False)
        self.k_cache: torch.Tensor | None = None  # (B, n_kv_heads, max_seq_len, head_dim)
        self.v_cache: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor | None,
                mask: torch.Tensor | None, used: int) -> torch.Tensor:
        B, n, _ = x.shape
        c = self.cfg
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        q, k, v = self.wqkv(x).split([q_dim, kv_dim, kv_dim], dim=-1)
        q = q.view(B, n, c.n_heads, c.head_dim)
        k = k.view(B, n, c.n_kv_heads, c.head_dim)
        v = v.view(B, n, c.n_kv_heads, c.head_dim)
        q = q * cos + rotate_half(q) * sin  # cos, sin: (B, n, 1, head_dim)
        k = k * cos + rotate_half(k) * sin
        groups = c.n_heads // c.n_kv_heads
        if slots is None:  # training: no cache, causal over the n tokens given
            keys, values = k.transpose(1, 2), v.transpose(1, 2)
            if groups > 1:
                keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
            out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, is_causal=True)
            return self.wo(out.transpose(1, 2).reshape(B, n, q_dim))
        assert self.k_cache is not None and self.v_cache is not None, "call setup_cache first"
        assert mask is not None
        rows = torch.arange(B, device=x.device)[:, None]
        self.k_cache[rows, :, slots] = k  # (B, n) index pairs select (n_kv, head_dim) rows
        self.v_cache[rows, :, slots] = v
        keys, values = self.k_cache[:, :, :used], self.v_cache[:, :, :used]
        if groups > 1:
            keys = keys.repeat_interleave(groups, dim=1)
            values = values.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask[:, None])
        return self.wo(out.transpose(1, 2).reshape(B, n, q_dim))


class FeedForward(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.w13 = nn.Linear(cfg.d_model, 2 * cfg.d_ff, bias=False)  # gate and up fused
        self.w2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x, cos, sin, slots, mask, used):
        h = x + self.attention(self.attention_norm(x), cos, sin, slots, mask, used)
        return h + self.feed_forward(self.ffn_norm(h))


class Decoder(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight
        inv_freq = 1.0 / cfg.rope_base ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim)
        angles = torch.outer(torch.arange(cfg.max_seq_len).float(), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)
        self.batch_size = 0

    def setup_cache(self, batch_size: int) -> None:
        """Preallocate every layer's KV cache for `batch_size` sequences of max_seq_len slots."""
        p = self.output.weight
        shape = (batch_size, self.cfg.n_kv_heads, self.cfg.max_seq_len, self.cfg.head_dim)
        for layer in self.layers:
            layer.attention.k_cache = torch.zeros(shape, dtype=p.dtype, device=p.device)
            layer.attention.v_cache = torch.zeros(shape, dtype=p.dtype, device=p.device)
        self.batch_size = batch_size

    def train_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab) of a causal pass over whole sequences, without the KV cache (training)."""
        T = tokens.shape[1]
        x = self.tok_embeddings(tokens)
        cos = self.rope_cos[:T][None, :, None].to(x.dtype)
        sin = self.rope_sin[:T][None, :, None].to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, None, None, T)
        return self.output(self.norm(x))

    def move_cache(self, batch_index: int, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy cache slots `src` to `dst` for one sequence in every layer (compacting an accepted tree path)."""
        for layer in self.layers:
            a = layer.attention
            assert a.k_cache is not None and a.v_cache is not None
            a.k_cache[batch_index, :, dst] = a.k_cache[batch_index, :, src].clone()
            a.v_cache[batch_index, :, dst] = a.v_cache[batch_index, :, src].clone()

    def forward(self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, n, vocab) for `tokens` (B, n) written to cache `slots` (B, n).

        `positions` are the rotary positions (default: the slots); `mask` (B, n, used) says which cache slots each
        new token attends to (default: causal, every slot <= its own).
        """
        if tokens.shape[0] != self.batch_size:
            raise SpecsimError(f"batch of {tokens.shape[0]} sequences but the cache holds {self.batch_size}")
        if int(slots.max()) >= self.cfg.max_seq_len:
            raise SpecsimError(f"cache slot {int(slots.max())} is past the cache of {self.cfg.max_seq_len}; "
                               "use a shorter prompt, a smaller k, or a larger max_seq_len")
        positions = slots if positions is None else positions
        if mask is None:
            mask = causal_mask(slots, int(slots.max()) + 1)
        used = mask.shape[-1]
        if used > self.cfg.max_seq_len:
            raise SpecsimError(f"attention over {used} slots exceeds the cache of {self.cfg.max_seq_len}")
        x = self.tok_embeddings(tokens)
        cos = self.rope_cos[positions].unsqueeze(2).to(x.dtype)
        sin = self.rope_sin[positions].unsqueeze(2).to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, slots, mask, used)
        return self.output(self.norm(x))


def causal_mask(slots: torch.Tensor, used: int) -> torch.Tensor:
    """(B, n, used) bool: token at slot s sees slots <= s."""
    return torch.arange(used, device=slots.device)[None, None, :] <= slots[:, :, None]


def build_decoder(spec: ModelSpec, max_seq_len: int = 2048, device: str = "cpu", dtype: str | None = None,
                  seed: int = 0, rope_base: float = 10000.0) -> Decoder:
    """A decoder of `spec`'s shape with random weights (enough for timing), in the spec's dtype."""
    cfg = DecoderConfig.from_spec(spec, max_seq_len, rope_base)
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        model = Decoder(cfg)
    model = model.to_empty(device=device)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / p.shape[-1] ** 0.5))
        inv_freq = 1.0 / cfg.rope_base ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim)
        angles = torch.outer(torch.arange(cfg.max_seq_len).float(), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        model.rope_cos = angles.cos().to(device)
        model.rope_sin = angles.sin().to(device)
    return model.to(dtype=TORCH_DTYPES[dtype or spec.dtype]).eval()


def load_state(model: Decoder, state: dict[str, torch.Tensor], source: str) -> Decoder:
    """Copy `state` (this module's names) into `model`, refusing any missing key or shape mismatch in one line."""
    own = model.state_dict()
    missing = [k for k in own if k not in state and not (k == "output.weight" and model.cfg.tied_embeddings)]
    if missing:
        raise SpecsimError(f"{source} lacks {len(missing)} tensors (first: {missing[0]}); is it this model's "
                           "checkpoint?")
    for k, v in state.items():
        if k in own and own[k].shape != v.shape:
            raise SpecsimError(f"{source}: {k} has shape {tuple(v.shape)} but the model expects "
                               f"{tuple(own[k].shape)}; the checkpoint does not match this shape")
    with torch.no_grad():
        for k, p in own.items():
            if k in state:
                p.copy_(state[k].to(p.dtype))
    return model


def hf_llama_state(tensors: dict[str, torch.Tensor], cfg: DecoderConfig) -> dict[str, torch.Tensor]:
    """Hugging Face Llama-family tensor names -> this module's (q/k/v and gate/up fused)."""
    out = {"tok_embeddings.weight": tensors["model.embed_tokens.weight"], "norm.weight": tensors["model.norm.weight"]}
    out["output.weight"] = tensors.get("lm_head.weight", tensors["model.embed_tokens.weight"])
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        out[f"layers.{i}.attention.wqkv.weight"] = torch.cat(
            [tensors[p + f"self_attn.{x}_proj.weight"] for x in "qkv"], dim=0)
        out[f"layers.{i}.attention.wo.weight"] = tensors[p + "self_attn.o_proj.weight"]
        out[f"layers.{i}.feed_forward.w13.weight"] = torch.cat(
            [tensors[p + "mlp.gate_proj.weight"], tensors[p + "mlp.up_proj.weight"]], dim=0)
        out[f"layers.{i}.feed_forward.w2.weight"] = tensors[p + "mlp.down_proj.weight"]
        out[f"layers.{i}.attention_norm.weight"] = tensors[p + "input_layernorm.weight"]
        out[f"layers.{i}.ffn_norm.weight"] = tensors[p + "post_attention_layernorm.weight"]
    return out


def load_hf_checkpoint(folder: str | Path, dtype: str = "bf16", max_seq_len: int = 2048) -> Decoder:
    """A local Hugging Face Llama-family checkpoint (config.json + *.safetensors); nothing is downloaded."""
    from safetensors.torch import load_file

    from scenarios import model_from_config_json

    folder = Path(folder)
    spec = model_from_config_json(folder / "config.json", dtype)
    cfg_json = json.loads((folder / "config.json").read_text())
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise SpecsimError(f"{folder} holds no *.safetensors files")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    model = build_decoder(spec, max_seq_len, dtype=dtype, rope_base=float(cfg_json.get("rope_theta", 10000.0)))
    try:
        state = hf_llama_state(tensors, model.cfg)
    except KeyError as e:
        raise SpecsimError(f"{folder}: tensor {e.args[0]} missing; not a Llama-family checkpoint") from None
    return load_state(model, state, str(folder))
