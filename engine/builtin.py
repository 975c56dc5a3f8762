"""specsim's built-in draft/target pair: loading the committed weights, and the function-preserving expansion of the
target to the size whose passes cost what a model of that size costs.

The expansion (Net2Net-style) pads the residual stream from d to D with zeros and keeps it zero: every new row of a
matrix that writes into the residual stream (attention output, SwiGLU down projection, embedding) is zero, every new
column that reads from it is zero, new heads and MLP units read zero and write zero, and new layers have all-zero
projections, so each is the identity. RMSNorm over the padded width sees the same sum of squares divided by D
instead of d, so each gain is multiplied by sqrt(d / D) and epsilon by d / D: the normalised outputs, and hence the
logits, are those of the trained model.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from engine.heads import MedusaHeads, expand_heads
from engine.model import TORCH_DTYPES, Decoder, DecoderConfig, load_state, materialize
from simulator import SpecsimError

WEIGHTS = Path(__file__).resolve().parent / "weights"
EXPANDED = {"n_layers": 12, "d_model": 768, "n_heads": 12, "d_ff": 2048}  # scenarios/models.toml: specsim-target


def _meta() -> dict:
    path = WEIGHTS / "builtin.json"
    if not path.exists():
        raise SpecsimError(f"the built-in pair is missing ({path}); train it with python -m engine.train")
    return json.loads(path.read_text())


def prompts(split: str) -> list[str]:
    """The committed calibration or held-out prompts (cut from standard-library files the pair never trained on)."""
    data = json.loads((WEIGHTS / "prompts.json").read_text())
    return data[split]


def long_texts(n: int, length: int, seed: int = 0, split: str = "calibration") -> list[list[int]]:
    """`n` ASCII stretches of `length` bytes from line starts of standard-library files of the calibration (or
    held-out) split (files the pair never trained on), at most four disjoint ones per file, spread over as many files
    as there are; for acceptance against context, and prompts of a served stream. They come from this machine's
    Python: another version measures other text."""
    from engine.train import split_of, stdlib_files

    rng = np.random.default_rng(seed)
    per_file: list[list[list[int]]] = []
    for f in (f for f in stdlib_files() if split_of(f) == split):
        try:
            data = f.read_bytes()
        except OSError:
            continue
        found, end = [], 0
        for j in range(len(data) - length - 1):
            if j >= end and data[j] == 10 and data[j + 1:j + 1 + length].isascii():
                found.append(list(data[j + 1:j + 1 + length]))
                end = j + 1 + length
                if len(found) == 4:
                    break
        if found:
            per_file.append(found)
    out = [stretch for rnd in range(4) for stretch in (fs[rnd] for fs in per_file if len(fs) > rnd)][:n]
    if len(out) < n:
        raise SpecsimError(f"this Python's standard library holds {len(out)} stretches of {length} ASCII bytes in "
                           f"its {split} files, fewer than {n}; measure at shorter contexts")
    return [out[i] for i in sorted(rng.permutation(len(out))[:n])]


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def _empty(cfg: DecoderConfig, device: torch.device | str, dtype: torch.dtype) -> Decoder:
    with torch.device("meta"):
        model = Decoder(cfg)
    return materialize(model, device, dtype)


def _load(which: str, max_seq_len: int, device: torch.device | str) -> Decoder:
    from safetensors.torch import load_file

    cfg = DecoderConfig(**{**_meta()[which], "max_seq_len": max_seq_len})
    path = WEIGHTS / f"builtin-{which}.safetensors"
    state = load_file(str(path), device=str(torch.device(device)))
    return load_state(_empty(cfg, device, torch.float32), state, str(path)).eval()


def expand(model: Decoder, n_layers: int, d_model: int, n_heads: int, d_ff: int) -> Decoder:
    """A wider, deeper decoder computing exactly the same function (see the module docstring)."""
    c = model.cfg
    if d_model < c.d_model or n_layers < c.n_layers or n_heads < c.n_heads or d_ff < c.d_ff:
        raise SpecsimError("expansion can only grow a model")
    if d_model // n_heads != c.head_dim or c.n_kv_heads != c.n_heads:
        raise SpecsimError("expansion keeps the head size and needs n_kv_heads == n_heads")
    new = replace(c, n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_heads, d_ff=d_ff,
                  norm_eps=c.norm_eps * c.d_model / d_model)
    big = _empty(new, model.device, model.dtype)
    gain = math.sqrt(c.d_model / d_model)
    d, hd = c.d_model, c.head_dim
    q_old, q_new = c.n_heads * hd, n_heads * hd
    with torch.no_grad():
        for p in big.parameters():
            p.zero_()
        big.tok_embeddings.weight[:, :d] = model.tok_embeddings.weight
        big.output.weight[:, :d] = model.output.weight
        big.norm.weight[:d] = model.norm.weight * gain
        for i, layer in enumerate(big.layers):
            layer.attention_norm.weight.fill_(1.0)
            layer.ffn_norm.weight.fill_(1.0)
            if i >= c.n_layers:
                continue  # all projections zero: the identity on the residual stream
            old = model.layers[i]
            layer.attention_norm.weight[:d] = old.attention_norm.weight * gain
            layer.ffn_norm.weight[:d] = old.ffn_norm.weight * gain
            wq, wk, wv = old.attention.wqkv.weight.split([q_old, q_old, q_old])
            W = layer.attention.wqkv.weight  # rows: q (q_new), k (q_new), v (q_new); columns: d_model
            W[:q_old, :d] = wq
            W[q_new:q_new + q_old, :d] = wk
            W[2 * q_new:2 * q_new + q_old, :d] = wv
            layer.attention.wo.weight[:d, :q_old] = old.attention.wo.weight
            gate, up = old.feed_forward.w13.weight.chunk(2)
            layer.feed_forward.w13.weight[:c.d_ff, :d] = gate
            layer.feed_forward.w13.weight[d_ff:d_ff + c.d_ff, :d] = up
            layer.feed_forward.w2.weight[:d, :c.d_ff] = old.feed_forward.w2.weight
    return big.eval()


def load_pair(expanded: bool = True, dtype: str = "bf16", max_seq_len: int = 1024,
              device: str | torch.device = "cpu") -> tuple[Decoder, Decoder]:
    """(target, draft) of the built-in pair; the target expanded to specsim-target's shape unless asked not to."""
    target = _load("target", max_seq_len, device)
    draft = _load("draft", max_seq_len, device)
    if expanded:
        target = expand(target, **EXPANDED)
    return target.to(dtype=TORCH_DTYPES[dtype]), draft.to(dtype=TORCH_DTYPES[dtype])


def load_heads(expanded: bool = True, dtype: str = "bf16", device: str | torch.device = "cpu") -> MedusaHeads:
    """The built-in target's trained prediction heads (`engine.heads`, `python -m engine.train_heads`), widened as
    the target is unless asked not to. Built on `device` and loaded there (as the pair is): nothing is made on
    torch's default device, which may be another."""
    from safetensors.torch import load_file

    meta = _meta().get("heads")
    path = WEIGHTS / "builtin-heads.safetensors"
    if meta is None or not path.exists():
        raise SpecsimError(f"the built-in heads are missing ({path}); train them with python -m engine.train_heads")
    shape = meta["shape"]
    device = torch.device(device)
    with torch.device(device):
        heads = MedusaHeads(shape["d_model"], shape["vocab_size"], shape["n_heads"], shape["layers"])
    state = load_file(str(path), device=str(device))
    missing = set(heads.state_dict()) - set(state)
    if missing:
        raise SpecsimError(f"{path} lacks {len(missing)} tensors (first: {sorted(missing)[0]}); train the heads again")
    heads.load_state_dict(state)
    heads = heads.eval()
    if expanded:
        heads = expand_heads(heads, EXPANDED["d_model"])
    return heads.to(device=device, dtype=TORCH_DTYPES[dtype]).requires_grad_(False)
