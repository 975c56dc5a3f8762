"""Train prediction heads (`engine.heads`) on the built-in target's own hidden states, the target frozen, on the same
standard-library text the pair trained on:

    python -m engine.train_heads --heads 4 --steps 800 --seed 0     # writes engine/weights/builtin-heads.safetensors

Head i learns the target's own distribution i positions ahead (self-distillation: the cross-entropy of its
proposal against the target's probabilities there), so what it is judged by - how often the target accepts it -
is what it is trained for. Written beside the weights: the heads' shape, the command, and per head the held-out
acceptance alpha_i = E[sum_x min(p(x), q_i(x))] at temperature 1 (`builtin.json`, key "heads"), and a check:
the heads' logits on a fixed held-out input, which a test compares with the loaded heads' (`heads-check.json`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.builtin import WEIGHTS, _load
from engine.heads import MedusaHeads, init_from_target
from engine.train import batches, load_corpus
from scenarios.files import atomic_write_text

CHECK_TOKENS = 64  # the fixed held-out input whose logits are kept (heads-check.json)


def head_loss(heads: MedusaHeads, hidden: torch.Tensor, p_target: torch.Tensor) -> torch.Tensor:
    """Mean over heads of the cross-entropy of head i at position t against the target's distribution at t + i
    (which predicts the token i + 1 past t, the one head i proposes)."""
    logits = heads(hidden)  # (B, T, H, V)
    losses = []
    for i in range(1, heads.n_heads + 1):
        logq = F.log_softmax(logits[:, :-i, i - 1].float(), dim=-1)
        losses.append(-(p_target[:, i:] * logq).sum(-1).mean())
    return torch.stack(losses).mean()


@torch.no_grad()
def head_alphas(target, heads: MedusaHeads, data: np.ndarray, seq: int = 256, n: int = 16) -> list[float]:
    """Per head, alpha_i = E_t[sum_x min(p_{t+i}(x), q_i(x | h_t))] on held-out text at temperature 1."""
    x, _ = next(batches(data, n, seq, np.random.default_rng(1234)))
    hidden = target.train_hidden(x)
    p = target.output(hidden).float().softmax(-1)
    q = heads(hidden).float().softmax(-1)
    return [torch.minimum(p[:, i:], q[:, :-i, i - 1]).sum(-1).mean().item() for i in range(1, heads.n_heads + 1)]


def train(n_heads: int, steps: int, seed: int, batch: int, seq: int, lr: float, out: Path, log=print) -> dict:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    corpus = load_corpus()
    train_data = np.frombuffer(b"".join(corpus["train"]), dtype=np.uint8)
    heldout = np.frombuffer(b"".join(corpus["heldout"]), dtype=np.uint8)
    target = _load("target", 2048, "cpu")  # the trained 4-layer target, fp32, frozen
    for p in target.parameters():
        p.requires_grad_(False)
    heads = init_from_target(MedusaHeads(target.cfg.d_model, target.cfg.vocab_size, n_heads), target.output)
    opt = torch.optim.AdamW(heads.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    warmup = max(steps // 20, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    data = batches(train_data, batch, seq, rng)
    log(f"heads: {n_heads} on the built-in target (d = {target.cfg.d_model}); before training alpha = "
        f"{[round(a, 3) for a in head_alphas(target, heads, heldout)]}")
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        x, _ = next(data)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = target.train_hidden(x)
            p = target.output(hidden).float().softmax(-1)
        loss = head_loss(heads, hidden.float(), p)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(heads.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps:
            log(f"step {step}/{steps}: loss {loss.item():.3f}, {time.perf_counter() - t0:.0f} s")
    heads.eval()
    alphas = head_alphas(target, heads, heldout)
    log(f"held out: alpha by head {[round(a, 3) for a in alphas]}")
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in heads.state_dict().items()}, str(out / "builtin-heads.safetensors"))
    check_x = torch.from_numpy(heldout[:CHECK_TOKENS].astype(np.int64))[None]
    with torch.no_grad():
        check = heads(target.train_hidden(check_x))[0, -1]  # (H, V) at the last position
    atomic_write_text(out / "heads-check.json", json.dumps({"tokens": check_x[0].tolist(),
                                                             "logits": check.tolist()}))
    meta_path = out / "builtin.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta["heads"] = {"command": f"python -m engine.train_heads --heads {n_heads} --steps {steps} --seed {seed} "
                                f"--batch {batch} --seq {seq} --lr {lr}",
                     "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                     "seconds": time.perf_counter() - t0, "shape": heads.shape(),
                     "heldout_alpha_by_head": alphas}
    atomic_write_text(meta_path, json.dumps(meta, indent=1))
    return meta["heads"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--out", type=Path, default=WEIGHTS)
    a = ap.parse_args()
    train(a.heads, a.steps, a.seed, a.batch, a.seq, a.lr, a.out, log=lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
