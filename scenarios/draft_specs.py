"""`--draft SPEC`: one grammar for every kind of draft, resolved against the target it drafts for (no torch).

    NAME | PATH/config.json              a draft model (models.toml, or a Hugging Face config.json), a head preset of
                                         drafts.toml, or an EAGLE-3 head's own config.json (LlamaForCausalLMEagle3)
    eagle[:layers=L]                     an EAGLE-1/2 head shaped after the target (its LM head the target's)
    eagle3[:layers=L,vocab=V,d_ff=F]     an EAGLE-3 head: the target's preset head, or one shaped after the target
    eagle3:PATH/config.json              an EAGLE-3 head from its config.json
    mtp[:N]                              the target's multi-token-prediction modules (N positions; bare: as many as
                                         its checkpoint carries); mtp:N,assumed on a target that carries none
    medusa:H[,layers=L]                  H Medusa heads (bare `medusa`: the target's preset)
    ngram | suffix | retrieval[:us_per_seq=U,ns_per_token=N,fixed_us=F,overlap]
                                         a model-free draft priced by its host lookup (defaults in drafts.toml)

Bad input (a head for a target of another width, `medusa:0`, a head config.json missing its fields, a draft model
with another vocabulary) is a one-line `SpecsimError` that says what is wrong and what to give instead.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from scenarios import _table, _unknown, load_model, model_names, preset_of
from scenarios.files import read_json
from simulator import SpecsimError
from simulator.drafts import (
    EAGLE3_DRAFT_VOCAB,
    MODEL_FREE,
    Draft,
    HostCost,
    eagle3_head,
    eagle_head,
    medusa_heads,
    model_free,
    mtp_modules,
)
from simulator.specs import ModelSpec

KINDS = ("eagle", "eagle3", "mtp", "medusa", *MODEL_FREE)
BUILTIN_HEADS = "specsim-target-medusa"  # the built-in target's trained prediction heads (drafts.toml)
# A draft model's vocabulary must be the target's (standard speculative sampling compares p and q over one
# vocabulary); sizes within 1 % are one tokenizer padded differently (Qwen2.5-7B's 152,064 against 0.5B's 151,936).
VOCAB_PADDING = 0.01
# Assumed: mapping a drafted token to the target's vocabulary on the host (detokenise, retokenise), per sequence.
VOCAB_MAPPING_S = 10e-6


def draft_preset_names() -> list[str]:
    return list(_table("drafts"))


# The least value each option takes (a head needs a layer and a vocabulary; d_ff 0 is the target's width; a host
# cost may be nothing).
LEAST = {"layers": 1, "vocab": 1, "d_ff": 0}


def _options(body: str, kind: str, allowed: tuple[str, ...], flags: tuple[str, ...] = ()) -> dict[str, Any]:
    """``key=value,...`` (and bare flags) after a kind, each value a finite number at least its `LEAST` (0 unless
    listed); a key given twice is refused."""
    out: dict[str, Any] = {}
    for part in (p.strip() for p in body.split(",") if p.strip()):
        key, eq, value = part.partition("=")
        key = key.strip().lower()
        if key in out:
            raise SpecsimError(f"{kind}: {key} is given twice; give it once (e.g. {kind}:{key}=...)")
        if not eq and key in flags:
            out[key] = True
            continue
        if key not in allowed or not eq:
            raise SpecsimError(f"{kind}: {part!r} is not one of {', '.join(f'{a}=N' for a in allowed)}"
                               + (f" or {', '.join(flags)}" if flags else ""))
        try:
            out[key] = float(value)
        except ValueError:
            raise SpecsimError(f"{kind}: {key} = {value!r} is not a number") from None
        least = LEAST.get(key, 0)
        if not math.isfinite(out[key]) or out[key] < least:
            raise SpecsimError(f"{kind}: {key} = {value.strip()} must be a finite number >= {least}")
    return out


def _whole(kind: str, key: str, v: float, least: int = 1) -> int:
    if v != int(v) or v < least:
        raise SpecsimError(f"{kind}: {key} must be a whole number >= {least}, got {v:g}")
    return int(v)


def _preset_for(target: ModelSpec, kind: str) -> tuple[str, dict[str, Any]] | None:
    """The drafts.toml head of `kind` made for `target`, when the target is that preset's model by its fields (a
    config.json in a folder named after a preset is not that model unless its fields are)."""
    model = preset_of(target)
    for name, d in _table("drafts").items():
        if d.get("kind") == kind and model is not None and d.get("target") == model:
            return name, d
    return None


def _from_preset(name: str, d: dict[str, Any], target: ModelSpec) -> Draft:
    """A preset of drafts.toml for `target`; a head preset made for another target is refused (a head reads its
    own target's hidden states: another target's, even of the same width, mean nothing to it)."""
    kind, source = d["kind"], str(d.get("source", ""))
    own = d.get("target")
    if own and own != preset_of(target):
        made_for = load_model(own, target.dtype)
        width = (f"a head of width {made_for.d_model}, but target {target.name} is {target.d_model} wide"
                 if made_for.d_model != target.d_model else f"made for {own}, not {target.name}")
        raise SpecsimError(f"draft {name} is {width}: a head runs on its own target's hidden states; give the "
                           f"head made for this target, or {kind} to price one shaped after it")
    if kind == "eagle3":
        draft = eagle3_head(target, int(d.get("layers", 1)), int(d.get("draft_vocab", EAGLE3_DRAFT_VOCAB)),
                            int(d.get("d_ff", 0)), int(d.get("heads", 0)), int(d.get("kv_heads", 0)), name=name,
                            source=source)
    elif kind == "mtp":
        draft = mtp_modules(target, int(d.get("modules", 1)), name=name, source=source)
    elif kind == "medusa":
        draft = medusa_heads(target, int(d["heads"]), int(d.get("layers", 1)), name=name, source=source)
    else:
        host = HostCost(0.0, float(d.get("host_us_per_sequence", 0.0)) * 1e-6,
                        float(d.get("host_ns_per_context_token", 0.0)) * 1e-9, source)
        return model_free(kind, host, name=name)
    return replace(draft, repo=str(d.get("repo", "")))


def _eagle3_config(path: Path, target: ModelSpec) -> Draft:
    """An EAGLE-3 head from its own config.json (SpecForge's and the published heads': LlamaForCausalLMEagle3)."""
    cfg = read_json(path, "EAGLE-3 head config")
    if not isinstance(cfg, dict):
        raise SpecsimError(f"{path} holds no JSON object: give the head's config.json (its fields as one object)")
    need = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    missing = [k for k in need if k not in cfg]
    if missing:
        raise SpecsimError(f"{path}: an EAGLE-3 head's config.json needs {', '.join(missing)}")
    if cfg["hidden_size"] != target.d_model:
        raise SpecsimError(f"{path} is a head of width {cfg['hidden_size']}, but target {target.name} is "
                           f"{target.d_model} wide: a head runs on its own target's hidden states")
    return eagle3_head(target, int(cfg["num_hidden_layers"]),
                       int(cfg.get("draft_vocab_size") or cfg.get("vocab_size") or EAGLE3_DRAFT_VOCAB),
                       int(cfg["intermediate_size"]), int(cfg["num_attention_heads"]),
                       int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"]), int(cfg.get("head_dim") or 0),
                       name=str(cfg.get("_name_or_path") or path.parent.name or "eagle3-head"), source=str(path))


def _is_head_config(path: Path) -> bool:
    cfg = read_json(path, "config")
    archs = cfg.get("architectures") or [] if isinstance(cfg, dict) else []
    return isinstance(cfg, dict) and ("draft_vocab_size" in cfg or any("eagle" in str(a).lower() for a in archs))


def load_draft(spec: str, target: ModelSpec, dtype: str = "bf16", heterogeneous_vocab: bool = False) -> Draft:
    """The draft `spec` names (module docstring), for `target`."""
    text = spec.strip()
    kind, sep, body = text.partition(":")
    low = kind.lower()
    if low == "eagle":
        opts = _options(body, "eagle", ("layers",))
        return eagle_head(target, _whole("eagle", "layers", opts.get("layers", 1)))
    if low == "eagle3":
        if sep and (body.endswith(".json") or Path(body).is_dir()):
            p = Path(body) / "config.json" if Path(body).is_dir() else Path(body)
            if not p.is_file():
                raise SpecsimError(f"no such EAGLE-3 head config {str(p)!r}; give the head's config.json or its folder")
            return _eagle3_config(p, target)
        opts = _options(body, "eagle3", ("layers", "vocab", "d_ff"))
        preset = _preset_for(target, "eagle3")
        if preset and not opts:
            return _from_preset(*preset, target)
        return eagle3_head(target, _whole("eagle3", "layers", opts.get("layers", 1)),
                           _whole("eagle3", "vocab", opts.get("vocab", EAGLE3_DRAFT_VOCAB)),
                           _whole("eagle3", "d_ff", opts.get("d_ff", 0), 0))
    if low == "mtp":
        carried = target.mtp_modules or (1 if _preset_for(target, "mtp") else 0)
        if sep:
            count, _, flag = body.partition(",")
            try:
                n = int(count)
            except ValueError:
                raise SpecsimError(f"mtp:{body!r} is not mtp:N[,assumed] (N positions, e.g. mtp:1)") from None
            if n < 1:
                raise SpecsimError(f"mtp needs at least one module, got mtp:{n}")
            if flag.strip().lower() not in ("", "assumed"):
                raise SpecsimError(f"mtp:{body!r}: after N only 'assumed' is taken; give mtp:{n},assumed or mtp:{n}")
            if not carried and flag.strip().lower() != "assumed":
                raise SpecsimError(f"{target.name} carries no MTP module (its config.json has no "
                                   f"num_nextn_predict_layers): say mtp:{n},assumed to price {n} modules shaped like "
                                   "its block that it does not have, or give another draft (eagle3, a model, ngram)")
            return mtp_modules(target, n, source=(f"{n} MTP module(s) shaped like {target.name}'s block, assumed (its "
                                                  "checkpoint carries none)") if not carried else "")
        preset = _preset_for(target, "mtp")
        if preset:
            return _from_preset(*preset, target)
        if not target.mtp_modules:
            raise SpecsimError(f"{target.name} carries no MTP module (its config.json has no "
                               "num_nextn_predict_layers); give mtp:N,assumed to price N modules shaped like its "
                               "block, or another draft (eagle3, a model, ngram)")
        return mtp_modules(target, target.mtp_modules)
    if low == "medusa":
        if not sep:
            preset = _preset_for(target, "medusa")
            if preset is None:
                raise SpecsimError(f"no Medusa preset for {target.name}: give medusa:H (H heads, e.g. medusa:4)")
            return _from_preset(*preset, target)
        head, _, rest = body.partition(",")
        try:
            heads = int(head)
        except ValueError:
            raise SpecsimError(f"medusa:{body!r} is not medusa:H[,layers=L] (H heads); give e.g. medusa:4") from None
        if heads < 1:
            raise SpecsimError(f"medusa needs at least one head, got medusa:{heads} (e.g. medusa:4)")
        opts = _options(rest, "medusa", ("layers",))
        preset = _preset_for(target, "medusa")
        if preset and int(preset[1]["heads"]) == heads and not opts:
            return _from_preset(*preset, target)
        return medusa_heads(target, heads, _whole("medusa", "layers", opts.get("layers", 1)))
    if low in MODEL_FREE:
        base = _from_preset(low, _table("drafts")[low], target)
        opts = _options(body, low, ("us_per_seq", "ns_per_token", "fixed_us"), ("overlap",))
        if not opts:
            return base
        host = HostCost(opts.get("fixed_us", base.host.fixed_s * 1e6) * 1e-6,
                        opts.get("us_per_seq", base.host.per_sequence_s * 1e6) * 1e-6,
                        opts.get("ns_per_token", base.host.per_context_token_s * 1e9) * 1e-9,
                        f"given: {text}" if set(opts) - {"overlap"} else base.host.source)
        return model_free(low, host, bool(opts.get("overlap", False)), name=low)
    if text.lower() in _table("drafts"):
        return _from_preset(text.lower(), _table("drafts")[text.lower()], target)
    p = Path(text)
    if (text.endswith(".json") or p.is_dir()) and (p / "config.json" if p.is_dir() else p).is_file():
        cfg_path = p / "config.json" if p.is_dir() else p
        if _is_head_config(cfg_path):
            return _eagle3_config(cfg_path, target)
    if text.lower() not in model_names() and not (text.endswith(".json") or p.exists()):
        known = model_names() + draft_preset_names() + [k for k in KINDS if k not in draft_preset_names()]
        raise _unknown("draft", text, known, " (or a config.json; eagle3, mtp[:N], medusa:H, ngram, suffix, "
                       "retrieval)")
    return model_draft(load_model(text, dtype), target, heterogeneous_vocab)


def model_draft(spec: ModelSpec, target: ModelSpec, heterogeneous_vocab: bool = False) -> Draft:
    """A draft model for `target`: its vocabulary must be the target's (within padding), unless the engine maps one
    to the other (vLLM's heterogeneous-vocabulary mode: its drafted tokens re-tokenised on the host, priced at
    `VOCAB_MAPPING_S` per token, an assumption)."""
    a, b = spec.vocab_size, target.vocab_size
    if abs(a - b) / max(a, b) <= VOCAB_PADDING:
        return _with_repo(Draft.of_model(spec))
    if not heterogeneous_vocab:
        raise SpecsimError(f"draft {spec.name} has a vocabulary of {a:,} tokens and target {target.name} one of "
                           f"{b:,}: speculative sampling compares the two models over one vocabulary; give a draft "
                           "of the target's family, or --heterogeneous-vocab to price an engine that maps one to the "
                           "other (vLLM's heterogeneous-vocabulary mode)")
    d = _with_repo(Draft.of_model(spec))
    return replace(d, vocab_mapping_s=VOCAB_MAPPING_S,
                   source=f"{d.source}; its tokens mapped to {target.name}'s vocabulary on the host, assumed "
                          f"{VOCAB_MAPPING_S * 1e6:g} us per drafted token")


def _with_repo(draft: Draft) -> Draft:
    """A draft model's repository for an engine's config: a preset's (its source opens with it); a config.json's
    folder, which is what the user has and an engine loads; nothing for a source that names neither."""
    first = draft.source.split(" ")[0] if draft.source else ""
    if first.endswith("config.json") and Path(first).is_file():
        return replace(draft, repo=str(Path(first).resolve().parent))
    if first.startswith(("/", ".")) or Path(first).exists():  # a local path, not a repository
        return replace(draft, repo="")
    return draft
