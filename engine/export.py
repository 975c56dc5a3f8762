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
