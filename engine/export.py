"""The built-in pair in other engines' formats: a Hugging Face `LlamaForCausalLM` folder (config.json,
model.safetensors and a byte-level tokenizer.json), which `transformers` loads as it is.

specsim's decoder is a Llama (RMSNorm, rotate-half rotary positions as Hugging Face's Llama, grouped-query
attention, SwiGLU), so the export is a renaming: the fused q/k/v and gate/up matrices split into Llama's own. The
expanded target's RMSNorm epsilon is the trained one scaled to its width (`engine.builtin`), written as
``rms_norm_eps``: the exported model computes the built-in one's logits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from engine.model import Decoder
from scenarios.files import atomic_write_text


def to_hf_state(model: Decoder) -> dict[str, torch.Tensor]:
    """This decoder's tensors under Hugging Face Llama's names (the inverse of `engine.model.hf_llama_state`)."""
    c = model.cfg
    sd = model.state_dict()
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    out = {"model.embed_tokens.weight": sd["tok_embeddings.weight"], "model.norm.weight": sd["norm.weight"],
           "lm_head.weight": sd["output.weight"]}
    for i in range(c.n_layers):
        p = f"model.layers.{i}."
        wq, wk, wv = sd[f"layers.{i}.attention.wqkv.weight"].split([q, kv, kv])
        gate, up = sd[f"layers.{i}.feed_forward.w13.weight"].chunk(2)
        out.update({p + "self_attn.q_proj.weight": wq, p + "self_attn.k_proj.weight": wk,
                    p + "self_attn.v_proj.weight": wv,
                    p + "self_attn.o_proj.weight": sd[f"layers.{i}.attention.wo.weight"],
                    p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                    p + "mlp.down_proj.weight": sd[f"layers.{i}.feed_forward.w2.weight"],
                    p + "input_layernorm.weight": sd[f"layers.{i}.attention_norm.weight"],
                    p + "post_attention_layernorm.weight": sd[f"layers.{i}.ffn_norm.weight"]})
    return {k: v.detach().to(torch.float32).contiguous().clone() for k, v in out.items()}


def hf_config(model: Decoder, name: str) -> dict:
    c = model.cfg
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "_name_or_path": name,
            "hidden_size": c.d_model, "intermediate_size": c.d_ff, "num_hidden_layers": c.n_layers,
            "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads, "head_dim": c.head_dim,
            "vocab_size": c.vocab_size, "rms_norm_eps": c.norm_eps, "rope_theta": c.rope_base,
            "max_position_embeddings": c.max_seq_len, "tie_word_embeddings": False, "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32", "bos_token_id": None,
            "eos_token_id": None, "pad_token_id": 0, "use_cache": True}


def byte_tokenizer() -> dict:
    """A tokenizer.json (Hugging Face `tokenizers`) for the pair's 256-byte vocabulary: token i is byte i."""
    vocab = {f"<0x{i:02X}>": i for i in range(256)}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": None, "post_processor": None,
            "decoder": {"type": "ByteFallback"},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": True, "vocab": vocab,
                      "merges": []}}


def export_hf(model: Decoder, folder: Path, name: str) -> Path:
    """Write `model` as a Hugging Face LlamaForCausalLM folder: config.json, model.safetensors, tokenizer.json."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "model.safetensors.tmp"
    save_file(to_hf_state(model), str(tmp), metadata={"format": "pt"})
    tmp.replace(folder / "model.safetensors")
    atomic_write_text(folder / "config.json", json.dumps(hf_config(model, name), indent=1))
    atomic_write_text(folder / "tokenizer.json", json.dumps(byte_tokenizer()))
    atomic_write_text(folder / "tokenizer_config.json", json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    atomic_write_text(folder / "generation_config.json", json.dumps({"pad_token_id": 0}))
    return folder


# -- GGUF (llama.cpp) ------------------------------------------------------------------------------------------------
# The file format of ggml's docs/gguf.md, version 3, written here (no converter needed): a header, key-value
# metadata, tensor descriptions, then the tensors aligned to 32 bytes. llama.cpp's `llama` architecture rotates
# adjacent pairs of a head's dimensions where Hugging Face's Llama rotates its two halves, so the q and k rows are
# reordered as llama.cpp's own converter does; the 256-byte vocabulary is a BPE vocabulary without merges over
# GPT-2's byte-to-character map, so llama.cpp tokenizes text into exactly its bytes.

GGUF_ALIGN = 32
_U32, _I32, _F32, _BOOL, _STR, _ARR = 4, 5, 6, 7, 8, 9


def gpt2_byte_chars() -> list[str]:
    """GPT-2's printable character for each byte (the map byte-level BPE vocabularies are written in)."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return [chars[b] for b in range(256)]


def _rope_pairs(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of a q or k projection from rotate-half order to llama.cpp's adjacent pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def to_gguf_tensors(model: Decoder) -> dict[str, torch.Tensor]:
    c = model.cfg
    hf = to_hf_state(model)
    out = {"token_embd.weight": hf["model.embed_tokens.weight"], "output_norm.weight": hf["model.norm.weight"],
           "output.weight": hf["lm_head.weight"]}
    for i in range(c.n_layers):
        p = f"model.layers.{i}."
        out.update({f"blk.{i}.attn_q.weight": _rope_pairs(hf[p + "self_attn.q_proj.weight"], c.n_heads),
                    f"blk.{i}.attn_k.weight": _rope_pairs(hf[p + "self_attn.k_proj.weight"], c.n_kv_heads),
                    f"blk.{i}.attn_v.weight": hf[p + "self_attn.v_proj.weight"],
                    f"blk.{i}.attn_output.weight": hf[p + "self_attn.o_proj.weight"],
                    f"blk.{i}.ffn_gate.weight": hf[p + "mlp.gate_proj.weight"],
                    f"blk.{i}.ffn_up.weight": hf[p + "mlp.up_proj.weight"],
                    f"blk.{i}.ffn_down.weight": hf[p + "mlp.down_proj.weight"],
                    f"blk.{i}.attn_norm.weight": hf[p + "input_layernorm.weight"],
                    f"blk.{i}.ffn_norm.weight": hf[p + "post_attention_layernorm.weight"]})
    return {k: v.contiguous() for k, v in out.items()}


def gguf_metadata(model: Decoder, name: str) -> dict[str, tuple[int, Any]]:
    c = model.cfg
    u32 = {"llama.context_length": c.max_seq_len, "llama.embedding_length": c.d_model,
           "llama.block_count": c.n_layers, "llama.feed_forward_length": c.d_ff,
           "llama.attention.head_count": c.n_heads, "llama.attention.head_count_kv": c.n_kv_heads,
           "llama.rope.dimension_count": c.head_dim, "llama.attention.key_length": c.head_dim,
           "llama.attention.value_length": c.head_dim, "llama.vocab_size": c.vocab_size,
           "general.alignment": GGUF_ALIGN,
           "general.file_type": 0, "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 0,
           "tokenizer.ggml.padding_token_id": 0}
    meta: dict[str, tuple[int, Any]] = {"general.architecture": (_STR, "llama"), "general.name": (_STR, name)}
    meta.update({k: (_U32, v) for k, v in u32.items()})
    meta.update({"llama.attention.layer_norm_rms_epsilon": (_F32, c.norm_eps),
                 "llama.rope.freq_base": (_F32, c.rope_base),
                 "tokenizer.ggml.model": (_STR, "gpt2"), "tokenizer.ggml.pre": (_STR, "default"),
                 "tokenizer.ggml.tokens": (_ARR, (_STR, gpt2_byte_chars())),
                 "tokenizer.ggml.token_type": (_ARR, (_I32, [1] * 256)),
                 "tokenizer.ggml.merges": (_ARR, (_STR, [])),
                 "tokenizer.ggml.add_bos_token": (_BOOL, False), "tokenizer.ggml.add_eos_token": (_BOOL, False)})
    return meta


def _gguf_value(kind: int, value: Any) -> bytes:
    import struct

    if kind == _STR:
        b = value.encode("utf-8")
        return struct.pack("<Q", len(b)) + b
    if kind == _ARR:
        inner, items = value
        return struct.pack("<IQ", inner, len(items)) + b"".join(_gguf_value(inner, v) for v in items)
    return struct.pack({_U32: "<I", _I32: "<i", _F32: "<f", _BOOL: "<?"}[kind], value)


def export_gguf(model: Decoder, path: Path, name: str) -> Path:
    """Write `model` as one GGUF file (fp32 tensors) that llama.cpp loads as a `llama` model; atomically."""
    import struct

    tensors = to_gguf_tensors(model)
    meta = gguf_metadata(model, name)
    head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)))
    for key, (kind, value) in meta.items():
        head += _gguf_value(_STR, key) + struct.pack("<I", kind) + _gguf_value(kind, value)
    offset, blobs = 0, []
    for tname, t in tensors.items():
        data = t.to(torch.float32).numpy().tobytes()
        dims = list(reversed(t.shape))  # ggml's first dimension is the innermost
        head += _gguf_value(_STR, tname) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        head += struct.pack("<IQ", 0, offset)  # type 0: F32
        pad = -len(data) % GGUF_ALIGN
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    head += b"\0" * (-len(head) % GGUF_ALIGN)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    tmp.replace(path)
    return path
