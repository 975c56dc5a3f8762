"""Train specsim's built-in pair: a byte-level target and a much smaller draft, on the Python standard library's own
sources (text that ships with every Python, so nothing is downloaded).

    python -m engine.train --steps 600 --seed 0          # writes engine/weights/

Both models see the same batches. The result: builtin-target.safetensors (4 layers, d = 256), builtin-draft.safetensors
(1 layer, d = 128), builtin.json (shapes, the exact command, losses, alpha) and prompts.json (calibration and held-out
prompts cut from files the models never trained on).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.model import Decoder, DecoderConfig
from scenarios.files import atomic_write_text

WEIGHTS = Path(__file__).resolve().parent / "weights"

TARGET = DecoderConfig(n_layers=4, d_model=256, n_heads=4, n_kv_heads=4, d_ff=768, vocab_size=256, head_dim=64,
                       max_seq_len=2048)
DRAFT = DecoderConfig(n_layers=1, d_model=128, n_heads=2, n_kv_heads=2, d_ff=384, vocab_size=256, head_dim=64,
                      max_seq_len=2048)


def stdlib_files() -> list[Path]:
    """The standard library's own .py files, sorted: its tests, tools and any packages installed beside it left out
    (a walk that never enters those folders: a base Python's site-packages can hold ten times the library)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__", "turtledemo"}
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in skip]
        found += [Path(folder) / n for n in names if n.endswith(".py")]
    return sorted(found)


def split_of(path: Path) -> str:
    """A stable split by file name: 90 % train, 5 % calibration prompts, 5 % held-out prompts."""
    h = int(hashlib.sha256(path.name.encode()).hexdigest()[:8], 16) % 100
    return "train" if h < 90 else ("calibration" if h < 95 else "heldout")


def load_corpus() -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {"train": [], "calibration": [], "heldout": []}
    for f in stdlib_files():
        try:
            data = f.read_bytes()
        except OSError:
            continue
        if len(data) > 512:
            out[split_of(f)].append(data)
    return out


def cut_prompts(texts: list[bytes], n: int, length: int, rng: np.random.Generator) -> list[str]:
    """`n` prompts of `length` bytes, each starting at a line start of a random file (ASCII only)."""
    prompts: list[str] = []
    while len(prompts) < n:
        t = texts[int(rng.integers(len(texts)))]
        starts = [i + 1 for i in range(len(t) - length - 1) if t[i] == 10]
        if not starts:
            continue
        s = starts[int(rng.integers(len(starts)))]
        chunk = t[s:s + length]
        if chunk.isascii() and chunk.strip():
            prompts.append(chunk.decode())
    return prompts


def batches(data: np.ndarray, batch: int, seq: int, rng: np.random.Generator):
    while True:
        idx = rng.integers(0, len(data) - seq - 1, size=batch)
        x = np.stack([data[i:i + seq + 1] for i in idx]).astype(np.int64)
        yield torch.from_numpy(x[:, :-1]), torch.from_numpy(x[:, 1:])


@torch.no_grad()
def evaluate(target: Decoder, draft: Decoder, data: np.ndarray, seq: int = 256, n: int = 16) -> dict[str, float]:
    """Held-out bits per byte of each model and alpha = E[sum_x min(p, q)] at temperature 1 on real text."""
    rng = np.random.default_rng(1234)
    x, y = next(batches(data, n, seq, rng))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lt, ld = target.train_logits(x).float(), draft.train_logits(x).float()
    bits = 1 / math.log(2)
    p, q = lt.softmax(-1), ld.softmax(-1)
    return {"target_bits_per_byte": F.cross_entropy(lt.flatten(0, 1), y.flatten()).item() * bits,
            "draft_bits_per_byte": F.cross_entropy(ld.flatten(0, 1), y.flatten()).item() * bits,
            "alpha_t1": torch.minimum(p, q).sum(-1).mean().item(),
            "greedy_match": (lt.argmax(-1) == ld.argmax(-1)).float().mean().item()}


def train(steps: int, seed: int, batch: int, seq: int, lr: float, out: Path, log=print) -> dict:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    corpus = load_corpus()
    train_data = np.frombuffer(b"".join(corpus["train"]), dtype=np.uint8)
    heldout_data = np.frombuffer(b"".join(corpus["heldout"]), dtype=np.uint8)
    log(f"corpus: {len(train_data) / 1e6:.1f} MB train, {len(heldout_data) / 1e6:.2f} MB held out "
        f"({len(corpus['train'])} files)")
    with torch.device("cpu"):  # training runs on the host
        target, draft = Decoder(TARGET), Decoder(DRAFT)
    for m in (target, draft):
        for name, p in m.named_parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)
            if name.endswith(("wo.weight", "w2.weight")):  # GPT-2's scaled init of residual projections
                torch.nn.init.normal_(p, std=0.02 / math.sqrt(2 * m.cfg.n_layers))
    params = list(target.parameters()) + list(draft.parameters())
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(steps // 20, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    data = batches(train_data, batch, seq, rng)
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        x, y = next(data)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss_t = F.cross_entropy(target.train_logits(x).float().flatten(0, 1), y.flatten())
            loss_d = F.cross_entropy(draft.train_logits(x).float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        (loss_t + loss_d).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps:
            el = time.perf_counter() - t0
            bits_t, bits_d = loss_t.item() / math.log(2), loss_d.item() / math.log(2)
            log(f"step {step}/{steps}: target {bits_t:.3f}, draft {bits_d:.3f} bits/byte, "
                f"{step * batch * seq / el:,.0f} tokens/s, {el:.0f} s")
    metrics = evaluate(target, draft, heldout_data)
    log(f"held out: {metrics}")
    prompts = {"calibration": cut_prompts(corpus["calibration"], 64, 96, np.random.default_rng(seed + 1)),
               "heldout": cut_prompts(corpus["heldout"], 64, 96, np.random.default_rng(seed + 2))}
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in target.state_dict().items() if not k.startswith("rope")},
              str(out / "builtin-target.safetensors"))
    save_file({k: v.contiguous() for k, v in draft.state_dict().items() if not k.startswith("rope")},
              str(out / "builtin-draft.safetensors"))
    meta = {"command": f"python -m engine.train --steps {steps} --seed {seed} --batch {batch} --seq {seq} --lr {lr}",
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__, "python": sys.version.split()[0], "seconds": time.perf_counter() - t0,
            "tokens_seen": steps * batch * seq, "target": TARGET.to_dict(), "draft": DRAFT.to_dict(),
            "heldout": metrics}
    atomic_write_text(out / "builtin.json", json.dumps(meta, indent=1))
    atomic_write_text(out / "prompts.json", json.dumps(prompts, indent=1))
    return meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--out", type=Path, default=WEIGHTS)
    a = ap.parse_args()
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    train(a.steps, a.seed, a.batch, a.seq, a.lr, a.out, log=lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
