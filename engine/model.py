"""A Llama-style decoder (RMSNorm, rotary positions, grouped-query attention, SwiGLU) with a preallocated KV cache.

The cache is "rolled back" gpt-fast style by not advancing a position. Every cached pass is described by a `Window`
of static shape, so that one code path serves prefill, plain decoding, drafting, chain verification and tree
verification, eagerly or replayed as a CUDA graph:

- sequence b's n new tokens are written to cache slots ``start[b] + offsets`` (B, n) and sit at rotary positions
  ``positions`` (default: the slots; a tree node sits at the prefix length plus its depth);
- token i attends to every slot before ``start[b]`` (the cached prefix) and to the window slots ``start[b] + w`` with
  ``visible[i, w]`` (a chain: w <= i; a tree: the node's ancestors and itself);
- attention reads the first ``keys`` slots of every sequence's cache, a length the caller rounds up to a bucket so a
  captured graph serves many steps; slots past a sequence's window are masked.

Grouped-query attention groups the query heads that share a key/value head instead of repeating the cache: queries
(B, n, heads, d) become (B, kv_heads, groups x n, d) and one SDPA call reads each key and value once, with one additive
mask (B, 1, groups x n, keys) built once per pass. Nothing in a cached pass reads a value back to the host, so a pass
can be captured in a CUDA graph. A single bf16 query row on a CPU attends as two identical rows (`attend`): torch's
CPU kernel is several times slower for one bf16 query row than for two.

Rotary embeddings use the rotate-half convention of Hugging Face's Llama, so a local HF checkpoint loads as it is.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from engine.moe import MoEFeedForward, Routing
from simulator import SpecsimError
from simulator.specs import ModelSpec

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
KEY_ALIGN = 16  # attention reads a multiple of this many slots (keeps SDPA's fused kernels on aligned masks)


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
    n_experts: int = 0  # mixture of experts (engine.moe): routed experts per MoE layer, 0 for a dense model
    experts_per_token: int = 0
    d_ff_expert: int = 0
    d_ff_shared: int = 0
    dense_layers: int = 0  # leading layers with a dense MLP

    @classmethod
    def from_spec(cls, spec: ModelSpec, max_seq_len: int = 2048, rope_base: float = 10000.0) -> DecoderConfig:
        if spec.attention != "gqa" or spec.sliding_layers or spec.extra_linear_params:
            raise SpecsimError(f"{spec.name}: specsim's engine runs grouped-query attention over every cached token; "
                               "MLA, sliding windows and heads' widened inputs are priced, not run")
        return cls(spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.d_ff, spec.vocab_size,
                   spec.head_dim, spec.tied_embeddings, max_seq_len, rope_base, n_experts=spec.n_experts,
                   experts_per_token=spec.experts_per_token, d_ff_expert=spec.d_ff_expert,
                   d_ff_shared=spec.d_ff_shared, dense_layers=spec.dense_layers)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Window:
    """Where a pass's n new tokens go and what they see, as tensors on the model's device (see the module
    docstring). `keys` is a host integer: how many cache slots attention reads."""

    start: torch.Tensor  # (B,) long: first window slot per sequence; every slot before it is the cached prefix
    offsets: torch.Tensor  # (n,) long: token i is written to slot start + offsets[i]
    visible: torch.Tensor  # (n, W) bool: token i sees window slot start + w
    keys: int
    positions: torch.Tensor | None = None  # (B, n) long rotary positions; None: the slots
    row0: int = 0  # the pass's B sequences live in cache rows row0 .. row0 + B - 1 (a prefill joining a batch)

    @property
    def slots(self) -> torch.Tensor:
        return self.start[:, None] + self.offsets[None, :]


@dataclass
class KVCache:
    """A decoder's KV cache taken out of it (`Decoder.swap_cache`): per layer (keys, values), and its rows."""

    layers: list[tuple[torch.Tensor | None, torch.Tensor | None]]
    rows: int


def round_keys(slots_needed: int, max_seq_len: int, bucket: int = KEY_ALIGN) -> int:
    """Slots attention reads for a pass that needs `slots_needed`: rounded up to `bucket`, at most the cache."""
    return min(max_seq_len, -(-slots_needed // bucket) * bucket)


def causal_window(start: torch.Tensor, n: int, keys: int) -> Window:
    """n consecutive tokens from `start`, each seeing the prefix and the tokens before it (prefill, plain decoding,
    a draft step, chain verification)."""
    device = start.device
    offsets = torch.arange(n, device=device)
    visible = offsets[None, :] <= offsets[:, None]
    return Window(start, offsets, visible, keys)


def window_mask(w: Window, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, n, keys) additive mask: 0 where a token may attend, -inf elsewhere."""
    n, width = w.visible.shape
    cols = torch.arange(w.keys, device=w.start.device)
    rel = cols[None, :] - w.start[:, None]  # (B, keys): slot relative to the window start
    inside = (rel >= 0) & (rel < width)
    seen = w.visible[:, rel.clamp(0, width - 1)].permute(1, 0, 2) & inside[:, None, :]  # (B, n, keys)
    allowed = (rel < 0)[:, None, :] | seen
    zero = torch.zeros((), dtype=dtype, device=w.start.device)
    return torch.where(allowed, zero, torch.full((), float("-inf"), dtype=dtype, device=w.start.device))[:, None]


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SDPA of queries (B, kv_heads, rows, d) over the cache with an additive mask (B, 1, rows, keys).

    One bf16 query row on a CPU (a plain decoding step or a draft step of a model without grouped queries) runs as two
    identical rows, the second discarded: torch 2.13's CPU kernel takes 1.6-3.7x as long for one bf16 row as for two
    (`python benchmarks/one_row_attention.py`), so an engine calling it as it is would price a plain step, the baseline
    of every speed-up, above a two-token verify pass at long context. The result is the same (the rows do not
    interact). fp32 (fastest with one row), fp16 (slow at any row count) and CUDA take the plain call."""
    if q.shape[2] == 1 and q.device.type == "cpu" and q.dtype == torch.bfloat16:
        twice = F.scaled_dot_product_attention(torch.cat([q, q], 2), keys, values, attn_mask=torch.cat([mask, mask], 2))
        return twice[:, :, :1]
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=None))  # where the module is built (like nn.Linear's)

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
        self.k_cache: torch.Tensor | None = None  # (rows, n_kv_heads, max_seq_len, head_dim)
        self.v_cache: torch.Tensor | None = None

    def _qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        B, n, _ = x.shape
        c = self.cfg
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        q, k, v = self.wqkv(x).split([q_dim, kv_dim, kv_dim], dim=-1)
        q = q.view(B, n, c.n_heads, c.head_dim)
        k = k.view(B, n, c.n_kv_heads, c.head_dim)
        v = v.view(B, n, c.n_kv_heads, c.head_dim)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v  # cos, sin: (B, n, 1, head_dim)

    def forward_uncached(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Causal attention over the n tokens given, no cache (training)."""
        B, n, _ = x.shape
        c = self.cfg
        q, k, v = self._qkv(x, cos, sin)
        keys, values = k.transpose(1, 2), v.transpose(1, 2)
        groups = c.n_heads // c.n_kv_heads
        if groups > 1:  # training only: the built-in pair has as many key/value heads as query heads
            keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(B, n, c.n_heads * c.head_dim))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor,
                mask: torch.Tensor, keys: int, row0: int = 0) -> torch.Tensor:
        """Write the new keys and values to `slots` (B, n) of cache rows row0.., then attend over the first `keys`
        slots with `mask`."""
        assert self.k_cache is not None and self.v_cache is not None, "call setup_cache first"
        B, n, _ = x.shape
        c = self.cfg
        groups = c.n_heads // c.n_kv_heads
        q, k, v = self._qkv(x, cos, sin)
        rows = torch.arange(row0, row0 + B, device=x.device)[:, None]
        self.k_cache[rows, :, slots] = k  # (B, n) index pairs select (n_kv, head_dim) rows
        self.v_cache[rows, :, slots] = v
        # views: the cache is read once, in place
        kc, vc = self.k_cache[row0:row0 + B, :, :keys], self.v_cache[row0:row0 + B, :, :keys]
        # Grouped queries: head h = kv * groups + g reads kv head kv; (B, n, H, d) -> (B, KV, groups * n, d).
        qg = q.view(B, n, c.n_kv_heads, groups, c.head_dim).permute(0, 2, 3, 1, 4)
        qg = qg.reshape(B, c.n_kv_heads, groups * n, c.head_dim)
        out = attend(qg, kc, vc, mask)
        out = out.view(B, c.n_kv_heads, groups, n, c.head_dim).permute(0, 3, 1, 2, 4)
        return self.wo(out.reshape(B, n, c.n_heads * c.head_dim))


class FeedForward(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.w13 = nn.Linear(cfg.d_model, 2 * cfg.d_ff, bias=False)  # gate and up fused
        self.w2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: DecoderConfig, index: int = 0) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        moe = cfg.n_experts and index >= cfg.dense_layers
        self.feed_forward = MoEFeedForward(cfg.d_model, cfg.n_experts, cfg.experts_per_token, cfg.d_ff_expert,
                                           cfg.d_ff_shared) if moe else FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor | None,
                mask: torch.Tensor | None, keys: int, row0: int = 0) -> torch.Tensor:
        h = self.attention_norm(x)
        if slots is None:
            h = x + self.attention.forward_uncached(h, cos, sin)
        else:
            assert mask is not None
            h = x + self.attention(h, cos, sin, slots, mask, keys, row0)
        return h + self.feed_forward(self.ffn_norm(h))


def rope_tables(cfg: DecoderConfig, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, (max_seq_len, head_dim) float32 on `device`."""
    inv_freq = 1.0 / cfg.rope_base ** (torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim)
    angles = torch.outer(torch.arange(cfg.max_seq_len, device=device).float(), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


_DECODER_UIDS = itertools.count()


class Decoder(nn.Module):
    """Build it on the meta device and move it with `materialize` (every tensor then lives where it is put)."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        # Never reused, unlike id(): a graph captured on a model that is gone must not replay for a new one that
        # happens to sit at the same address (`engine.pass_runner.GraphRunner`).
        self.uid = next(_DECODER_UIDS)
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_tables(cfg, self.output.weight.device)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.cache_rows = 0
        self.cache_version = 0  # bumped whenever the cache is reallocated (captured graphs hold its address)
        self.keep_hidden = False  # keep the last pass's final normalised hidden states (prediction heads read them)
        self.hidden: torch.Tensor | None = None  # (B, n, d) of the last pass, when kept

    @property
    def device(self) -> torch.device:
        return self.output.weight.device

    @property
    def is_moe(self) -> bool:
        return self.cfg.n_experts > 0

    def set_routing(self, sharing: float = 0.0, seed: int = 0) -> None:
        """How this model's MoE layers choose experts (`engine.moe.Routing`); no-op for a dense model."""
        if not self.is_moe:
            return
        routing = Routing(sharing, seed, self.device)
        for layer in self.layers:
            if isinstance(layer.feed_forward, MoEFeedForward):
                layer.feed_forward.routing = routing

    @property
    def dtype(self) -> torch.dtype:
        return self.output.weight.dtype

    def setup_cache(self, rows: int) -> None:
        """Preallocate every layer's KV cache for `rows` sequences of max_seq_len slots (a pass over B <= rows
        sequences uses the first B rows)."""
        shape = (rows, self.cfg.n_kv_heads, self.cfg.max_seq_len, self.cfg.head_dim)
        for layer in self.layers:
            layer.attention.k_cache = layer.attention.v_cache = None  # free the old cache before the new one
        for layer in self.layers:
            layer.attention.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
            layer.attention.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.cache_rows = rows
        self.cache_version += 1

    def swap_cache(self, other: KVCache | None = None) -> KVCache:
        """Put `other` (None: no cache) in this decoder's place and return the cache it had, without copying: runs
        decoded in turns (`RealEngine.generate_in_turns`) each keep their own. The version moves on (a captured graph
        holds a cache's address)."""
        mine = KVCache([(layer.attention.k_cache, layer.attention.v_cache) for layer in self.layers], self.cache_rows)
        for i, layer in enumerate(self.layers):
            layer.attention.k_cache, layer.attention.v_cache = other.layers[i] if other is not None else (None, None)
        self.cache_rows = other.rows if other is not None else 0
        self.cache_version += 1
        return mine

    def free_cache(self) -> None:
        for layer in self.layers:
            layer.attention.k_cache = layer.attention.v_cache = None
        self.cache_rows = 0
        self.cache_version += 1

    def train_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab) of a causal pass over whole sequences, without the KV cache (training)."""
        return self.output(self.train_hidden(tokens))

    def train_hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """The final normalised hidden states (B, T, d) of a causal pass without the cache: what the output head
        reads, and what prediction heads are trained on (`engine.heads`)."""
        T = tokens.shape[1]
        x = self.tok_embeddings(tokens)
        cos = self.rope_cos[:T][None, :, None].to(x.dtype)
        sin = self.rope_sin[:T][None, :, None].to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, None, None, T)
        return self.norm(x)

    def move_cache(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy each sequence's cache slots src[b] to dst[b] (B, L) in every layer (compacting accepted tree paths;
        src == dst is a no-op for the padding)."""
        rows = torch.arange(src.shape[0], device=src.device)[:, None]
        for layer in self.layers:
            a = layer.attention
            assert a.k_cache is not None and a.v_cache is not None
            a.k_cache[rows, :, dst] = a.k_cache[rows, :, src]  # the right side is gathered before it is written
            a.v_cache[rows, :, dst] = a.v_cache[rows, :, src]

    def forward(self, tokens: torch.Tensor, window: Window) -> torch.Tensor:
        """Logits (B, n, vocab) for `tokens` (B, n) written and attending as `window` says. No host reads: the
        caller checks that the window fits the cache (`check_window`)."""
        positions = window.slots if window.positions is None else window.positions
        x = self.tok_embeddings(tokens)
        cos = self.rope_cos[positions].unsqueeze(2).to(x.dtype)
        sin = self.rope_sin[positions].unsqueeze(2).to(x.dtype)
        mask = window_mask(window, x.dtype)
        groups = self.cfg.n_heads // self.cfg.n_kv_heads
        if groups > 1:  # one mask row per grouped query: (B, 1, n, keys) -> (B, 1, groups * n, keys)
            B, _, n, k = mask.shape
            mask = mask[:, :, None].expand(B, 1, groups, n, k).reshape(B, 1, groups * n, k)
        slots = window.slots
        for layer in self.layers:
            x = layer(x, cos, sin, slots, mask, window.keys, window.row0)
        h = self.norm(x)
        if self.keep_hidden:
            self.hidden = h
        return self.output(h)

    def move_rows(self, src: list[int], dst: list[int], slots: int) -> None:
        """Copy the first `slots` cache slots of rows `src` to rows `dst` in every layer (a continuously batched
        engine keeps its running sequences in rows 0..B-1: a finished sequence's row takes a later one)."""
        if not src:
            return
        s = torch.tensor(src, device=self.device)
        d = torch.tensor(dst, device=self.device)
        for layer in self.layers:
            a = layer.attention
            assert a.k_cache is not None and a.v_cache is not None
            a.k_cache[d, :, :slots] = a.k_cache[s, :, :slots]
            a.v_cache[d, :, :slots] = a.v_cache[s, :, :slots]

    def check_window(self, batch: int, last_slot: int, keys: int, row0: int = 0) -> None:
        """Host-side checks of a pass before it runs (no device reads)."""
        if row0 + batch > self.cache_rows:
            raise SpecsimError(f"batch of {batch} sequences from row {row0} but the cache holds {self.cache_rows}")
        if last_slot >= self.cfg.max_seq_len or keys > self.cfg.max_seq_len:
            raise SpecsimError(f"cache slot {max(last_slot, keys - 1)} is past the cache of {self.cfg.max_seq_len}; "
                               "use a shorter prompt, a smaller k, or a larger max_seq_len")


def materialize(model: Decoder, device: torch.device | str, dtype: torch.dtype) -> Decoder:
    """A model built on the meta device, given storage on `device` in `dtype` (uninitialised) and its rotary
    tables."""
    model = model.to(dtype=dtype).to_empty(device=device)
    model.rope_cos, model.rope_sin = rope_tables(model.cfg, device)
    return model


def prefill_window(lengths: list[int], device: torch.device) -> tuple[torch.Tensor, Window]:
    """Slots 0..L-2 of each prompt (the last token is the first one decoded): (start (B,) zeros, a causal window
    over the longest prompt but one, reading just the slots it writes)."""
    longest = max(lengths) - 1
    start = torch.zeros(len(lengths), dtype=torch.long, device=device)
    return start, causal_window(start, longest, longest)


def build_decoder(spec: ModelSpec, max_seq_len: int = 2048, device: torch.device | str = "cpu",
                  dtype: str | None = None, seed: int = 0, rope_base: float = 10000.0,
                  expert_sharing: float = 0.0) -> Decoder:
    """A decoder of `spec`'s shape with random weights (enough for timing), drawn on `device` in its dtype: an 8 B
    model takes a fraction of a second on a GPU instead of a minute on the host. An MoE's tokens route as
    `engine.moe.Routing` draws them, sharing experts within a sequence's pass with probability `expert_sharing`."""
    cfg = DecoderConfig.from_spec(spec, max_seq_len, rope_base)
    device = torch.device(device)
    with torch.device("meta"):
        model = Decoder(cfg)
    model = materialize(model, device, TORCH_DTYPES[dtype or spec.dtype])
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]), generator=gen)
    model.set_routing(expert_sharing, seed)
    return model.eval()


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


def load_hf_checkpoint(folder: str | Path, dtype: str = "bf16", max_seq_len: int = 2048,
                       device: torch.device | str = "cpu") -> Decoder:
    """A local Hugging Face Llama-family checkpoint (config.json + *.safetensors); nothing is downloaded."""
    from safetensors.torch import load_file

    from scenarios import model_from_config_json
    from scenarios.files import read_json

    folder = Path(folder)
    spec = model_from_config_json(folder / "config.json", dtype)
    cfg_json = read_json(folder / "config.json", "model config")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise SpecsimError(f"{folder} holds no *.safetensors files")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f), device=str(torch.device(device))))
    model = build_decoder(spec, max_seq_len, device=device, dtype=dtype,
                          rope_base=float(cfg_json.get("rope_theta", 10000.0)))
    try:
        state = hf_llama_state(tensors, model.cfg)
    except KeyError as e:
        raise SpecsimError(f"{folder}: tensor {e.args[0]} missing; not a Llama-family checkpoint") from None
    return load_state(model, state, str(folder))
