"""llama.cpp as the engine: a profile fitted to `llama-bench`'s own passes, and llama-server's speculative decoding
(``--model-draft``) checked against it, one request at a time.

- ``specsim calibrate --engine llama.cpp --target DIR --draft DIR``: DIR as `specsim export` writes it (config.json
  for the shapes, model.gguf for llama.cpp). llama-bench times, for both models, a pass of n tokens on d cached ones
  (``-p n -n 0 -d d``: n = 1 is a decode step, n = k + 1 a verification) and prefills; `calibrate.step_import`
  reads its JSON and fits the cost model under this CPU's measured bandwidth and FLOP/s. The greedy acceptance is
  the pair's own (the GGUF files compute the exported weights' logits), measured along the target's greedy text on
  the calibration prompts by specsim's engine reading the exported safetensors. llama-server's own plain requests
  add what llama-bench does not run: its work around a step, its prompts (``prompt_ms`` over llama-bench's prefill
  of that length scales the target's prefills) and the target's one-token passes over 2 and 4 slots together.
- ``specsim validate --engine llama.cpp``: llama-server started plain and with the draft (``-md DRAFT --spec-type
  draft-simple --spec-draft-n-max k --spec-draft-n-min 0 --spec-draft-p-min 0``: k drafts every step), one request
  at a time, greedy; the decode time its ``timings`` report, per prompt, against the time the profile predicts.

llama.cpp is built from the source that the llama-cpp-python source package ships (`benchmarks/build_llama_cpp.sh`);
without it these commands say so in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simulator import SpecsimError

BUILD = ("bash benchmarks/build_llama_cpp.sh (builds llama.cpp from the llama-cpp-python source package; 5-35 min on "
         "2 cores)")


def llama_cpp_bin(tool: str) -> Path:
    """A llama.cpp binary: $SPECSIM_LLAMA_CPP/bin, the build script's default folder, or the PATH."""
    roots = [os.environ.get("SPECSIM_LLAMA_CPP"),
             str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specsim" / "llama.cpp")]
    for root in filter(None, roots):
        p = Path(root) / "bin" / tool
        if p.is_file() and os.access(p, os.X_OK):
            return p
    found = shutil.which(tool)
    if found:
        return Path(found)
    raise SpecsimError(f"{tool} not found: build llama.cpp with {BUILD}, or point SPECSIM_LLAMA_CPP at a build")


def gguf_of(folder: str | Path, role: str) -> Path:
    p = Path(folder) / "model.gguf"
    if not p.is_file() or not (Path(folder) / "config.json").is_file():
        raise SpecsimError(f"--{role} {folder}: needs config.json and model.gguf (write the built-in pair so with: "
                           "specsim export --out pair/ --format both)")
    return p


def threads(profile: Any = None) -> int:
    """llama.cpp's threads: those `profile`'s passes were timed on (a validation runs the engine it predicts), else
    $SPECSIM_LLAMA_THREADS, else every core this process may use."""
    recorded = getattr(profile, "options", {}).get("llama_threads") if profile is not None else None
    if recorded:
        return int(recorded)
    text = os.environ.get("SPECSIM_LLAMA_THREADS", "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise SpecsimError(f"SPECSIM_LLAMA_THREADS={text!r}: give a whole number of threads, 1 or more")
        return int(text)
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def run_llama_bench(target: Path, draft: Path, quick: bool, out: Path, n_threads: int) -> Path:
    """llama-bench's passes of both models (-o json) written to `out`: n tokens on d cached ones, and prefills."""
    bench = llama_cpp_bin("llama-bench")
    # 16 and 24 new tokens: a served verification of several slots is one micro-batch of slots x (k + 1) rows,
    # which the fit would otherwise extrapolate from 9
    ns, depths, prefills = (("1,2,3,5,9,16,24", "32,192,352", "16,64,128,192") if quick
                            else ("1,2,3,4,5,7,9,16,24,32", "32,128,256,416", "16,48,96,160,224"))
    reps = "5" if quick else "9"
    # -lm none: weights read into memory at load, not paged in from the file by the first test's passes (a mapped
    # file made the first test of a run 10x slower than the rest)
    common = ["-m", str(target), "-m", str(draft), "-t", str(n_threads), "-r", reps, "-lm", "none", "-o", "json"]
    results = []
    for args in (["-p", ns, "-n", "0", "-d", depths], ["-p", prefills, "-n", "0", "-d", "0"]):
        proc = subprocess.run([str(bench), *common, *args], capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise SpecsimError(f"llama-bench failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
        results += json.loads(proc.stdout)
    from scenarios.files import atomic_write_text

    atomic_write_text(out, json.dumps(results, indent=1))
    return out


# -- llama-server ----------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A llama-server process on a free local port (plain, or with a draft drafting k tokens every step)."""

    target: Path
    draft: Path | None = None
    k: int = 0
    ctx: int = 1024
    slots: int = 1
    threads: int = field(default_factory=threads)  # llama.cpp's threads, the target's and the draft's
    proc: subprocess.Popen | None = None
    port: int = 0
    log: Any = None  # llama-server's stderr, a temporary file

    def __enter__(self) -> Server:
        self.port = _free_port()
        cmd = [str(llama_cpp_bin("llama-server")), "-m", str(self.target), "--port", str(self.port), "--host",
               "127.0.0.1", "-t", str(self.threads), "-c", str(self.ctx), "-np", str(self.slots), "--no-webui",
               "--metrics"]
        if self.draft is not None:
            cmd += ["-md", str(self.draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(self.k),
                    "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-td", str(self.threads)]
        # its log to a file: a pipe nobody reads fills after some hundred requests, and llama.cpp's logger then
        # blocks the server's own thread (common/log.cpp waits while its queue is full)
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, text=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                said = self.log_tail()
                self.__exit__()
                raise SpecsimError(f"llama-server exited ({self.proc.returncode}): {said}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        self.__exit__()
        raise SpecsimError("llama-server did not come up within 120 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.log is not None:
            self.log.close()
            self.log = None

    def log_tail(self, chars: int = 300) -> str:
        """The end of llama-server's log (what it said before it failed)."""
        if self.log is None:
            return ""
        self.log.flush()
        self.log.seek(0)
        return self.log.read().strip()[-chars:]

    def metrics(self) -> dict[str, float]:
        """llama-server's Prometheus counters and gauges (``/metrics``), without the ``llamacpp:`` prefix: e.g.
        ``n_decode_total`` (its ``llama_decode`` calls: one per step, speculative ones included in this version's
        single batch), ``n_busy_slots_per_decode``, ``spec_decode_num_draft_tokens_total``,
        ``spec_decode_num_accepted_tokens_total``, ``prompt_seconds_total``."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return parse_metrics(r.read().decode())

    def steps_s(self, prompts: Sequence[Sequence[int]], n: int) -> list[float]:
        """Each request's decode time per step when `prompts` are sent together (one thread each), so that they
        decode in the same steps of this server's slots."""
        import threading

        results: list[dict[str, Any]] = [{} for _ in prompts]

        def one(j: int) -> None:
            results[j] = self.complete(prompts[j], n)

        threads = [threading.Thread(target=one, args=(j,)) for j in range(len(prompts))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return [float(r["timings"]["predicted_ms"]) * 1e-3 / max(int(r["timings"].get("predicted_n", n)) - 1, 1)
                for r in results]

    def complete(self, prompt: Sequence[int], n: int, slot: int | None = None) -> dict[str, Any]:
        """One greedy completion of exactly `n` tokens from `prompt` (token ids: bytes): its tokens and timings.
        `slot`: on that slot (llama-server's ``id_slot``); None: the slot llama-server picks."""
        body = {"prompt": [list(prompt)], "n_predict": n, "temperature": 0.0, "top_k": 1, "cache_prompt": False,
                "ignore_eos": True, "samplers": ["top_k"], "return_tokens": True, "seed": 0,
                **({"id_slot": slot} if slot is not None else {})}
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            d = json.loads(r.read())
        d = d[0] if isinstance(d, list) else d
        return {"tokens": d.get("tokens") or list(d.get("content", "").encode("latin-1", "replace")),
                "timings": d.get("timings", {})}


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {name: value} for llama-server's unlabelled ``llamacpp:`` samples."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:") and "{" not in line:
            name, _, value = line[len("llamacpp:"):].partition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


# -- prediction and validation ---------------------------------------------------------------------------------------


def predict_decode_s(profile: Any, k: int, prompt_tokens: int, new_tokens: int) -> float:
    """Seconds of llama-server's decoding of `new_tokens` greedy tokens after its prefill (k = 0: plain): the passes
    as llama-bench measured them (`calibrate.engine_steps.measured_pass_s`) and the steps greedy decoding
    takes along the calibration texts (`replay` of the pair's measured greedy matches)."""
    from calibrate.engine_steps import measured_pass_s, replay

    eng = profile.fit.overheads.engine
    target, draft = profile.target, profile.draft
    c = prompt_tokens + new_tokens // 2
    if k == 0:
        return (new_tokens - 1) * (measured_pass_s(profile, target, 1, c) + eng.plain.fixed_s)
    yields = [np.asarray(y) for y in profile.acceptance.greedy_yields]
    steps = replay([np.full(len(y), k) for y in yields], [np.minimum(y - 1, k) for y in yields], new_tokens)
    tokens = float(np.mean([a + 1 for _, a in steps]))
    step = (k * measured_pass_s(profile, draft, 1, c) + measured_pass_s(profile, target, k + 1, c)
            + eng.verify.fixed_s)
    return (new_tokens - 1) / tokens * step


def validate_llama_cpp(profile: Any, target_dir: str | Path, draft_dir: str | Path, ks: Sequence[int],
                       n_prompts: int, new_tokens: int, repeats: int, progress: Any) -> dict[str, Any]:
    """Each k against plain decoding, llama-server one request at a time (see the module docstring)."""
    from engine.builtin import encode, prompts

    target, draft = gguf_of(target_dir, "target"), gguf_of(draft_dir, "draft")
    held = [encode(p) for p in prompts("heldout")[:n_prompts]]
    rng = np.random.default_rng(0)
    runs: dict[tuple[int, int], dict[int, list[float]]] = {}  # (k, 0 plain | k speculative) -> prompt -> s
    outputs: dict[tuple[int, int], dict[int, list[int]]] = {}
    accepted: dict[int, list[float]] = {}
    n_threads = threads(profile)
    with progress("llama-server: each k against plain, request by request in turns", 2 * len(ks) * repeats
                  * len(held)) as bar, Server(target, threads=n_threads) as plain:
        plain.complete(held[0], 8)  # warm-up
        for k in ks:
            with Server(target, draft, k, threads=n_threads) as spec:
                spec.complete(held[0], 8)
                for _ in range(repeats):
                    for i in rng.permutation(len(held)):
                        p = held[int(i)]
                        for key, server in sorted({(k, 0): plain, (k, k): spec}.items(),
                                                  key=lambda _: rng.random()):
                            r = server.complete(p, new_tokens)
                            t = r["timings"]
                            runs.setdefault(key, {}).setdefault(int(i), []).append(float(t["predicted_ms"]) * 1e-3)
                            outputs.setdefault(key, {})[int(i)] = r["tokens"]
                            if key[1] and t.get("draft_n"):
                                accepted.setdefault(k, []).append(t["draft_n_accepted"] / t["draft_n"])
                            bar.update(1)
    rows = []
    for k in ks:
        plain_s, spec_s = runs[(k, 0)], runs[(k, k)]
        meas = [np.median(plain_s[i]) / np.median(spec_s[i]) for i in range(len(held))]
        pred = [predict_decode_s(profile, 0, len(p), new_tokens) / predict_decode_s(profile, k, len(p), new_tokens)
                for p in held]
        m, q = float(np.median(meas)), float(np.median(pred))
        rows.append({"k": k, "measured_speedup": m, "predicted_speedup": q, "rel_error": q / m - 1,
                     "decode_s_plain": float(np.median([np.median(v) for v in plain_s.values()])),
                     "decode_s_speculative": float(np.median([np.median(v) for v in spec_s.values()])),
                     "draft_acceptance": float(np.mean(accepted.get(k, [float("nan")]))),
                     "outputs_equal_plain": all(outputs[(k, k)][i] == outputs[(k, 0)][i] for i in range(len(held)))})
    err = np.abs([r["rel_error"] for r in rows])
    return {"engine": "llama.cpp llama-server", "threads": n_threads, "prompts": len(held),
            "tokens": new_tokens, "repeats": repeats, "rows": rows, "median_abs_err_speedup": float(np.median(err)),
            "p90_abs_err_speedup": float(np.percentile(err, 90))}


def format_llama_validation(report: Mapping[str, Any]) -> str:
    lines = [f"{report['engine']} on {report.get('threads', '?')} threads, one request at a time, greedy, "
             f"{report['prompts']} held-out prompts x {report['repeats']} rounds, {report['tokens']} tokens; decode "
             "time from its timings",
             f"{'k':>3}{'measured':>10}{'predicted':>11}{'error':>9}   plain -> speculative (s)   accepted"]
    for r in report["rows"]:
        lines.append(f"{r['k']:>3}{r['measured_speedup']:>9.2f}x{r['predicted_speedup']:>10.2f}x"
                     f"{100 * r['rel_error']:>+8.1f}%   {r['decode_s_plain']:.2f} -> {r['decode_s_speculative']:.2f}"
                     f"{'':>12}{100 * r['draft_acceptance']:.0f} %"
                     f"{'' if r['outputs_equal_plain'] else '   (output differs from plain)'}")
    lines.append(f"speed-up |error|: median {100 * report['median_abs_err_speedup']:.1f} %, p90 "
                 f"{100 * report['p90_abs_err_speedup']:.1f} %")
    return "\n".join(lines)


def llama_profile(target_dir: str | Path, draft_dir: str | Path, quick: bool, seed: int, out: Path | None,
                  command: str, options: Mapping[str, Any], progress: Callable[..., Any]) -> Any:
    """`specsim calibrate --engine llama.cpp` (see the module docstring)."""
    from dataclasses import replace

    from calibrate.measure_acceptance import measure_acceptance
    from calibrate.step_import import import_profile
    from engine.builtin import encode, prompts
    from engine.model import load_hf_checkpoint
    from scenarios.profile import MeasuredAcceptance
    from simulator.specs import PerStep

    target, draft = gguf_of(target_dir, "target"), gguf_of(draft_dir, "draft")
    bench_out = (out.with_name(out.stem + ".llama-bench.json") if out is not None
                 else Path(tempfile.mkdtemp()) / "llama-bench.json")
    n_threads = threads()
    with progress(f"llama-bench: both models' passes ({n_threads} threads)", 1) as bar:
        run_llama_bench(target, draft, quick, bench_out, n_threads)
        bar.update(1)
    profile = import_profile(f"llama-bench:{bench_out}", "cpu", str(target_dir), str(draft_dir), "fp32", seed,
                             command, {**options, "llama_threads": n_threads})
    n_prompts, n_tokens = (12, 64) if quick else (24, 96)
    calib = [encode(p) for p in prompts("calibration")[:n_prompts]]
    t = load_hf_checkpoint(target_dir, dtype="fp32", max_seq_len=512)
    d = load_hf_checkpoint(draft_dir, dtype="fp32", max_seq_len=512)
    with progress("acceptance (greedy, the exported weights)", n_prompts + 1) as bar:
        acc = measure_acceptance(t, d, calib, n_tokens, 0.0, seed, tick=lambda: bar.update(1))
    with progress("llama-server around its passes (plain requests)", 3 * 2) as bar:
        loop_s, prompt_ratio = server_loop_s(profile, target, calib[:3], 2, n_tokens, lambda: bar.update(1))
    engine = replace(profile.fit.overheads.engine, plain=PerStep(loop_s), verify=PerStep(loop_s))
    acc["llama_server_loop_s"] = loop_s
    profile = replace(profile, passes=served_prompts(profile.passes, profile.target.name, prompt_ratio))
    batches = (2, 4)
    with progress("llama-server's batched plain steps (its slots together)", len(batches) * 2) as bar:
        batched = server_batched_passes(profile, target, calib, batches, 2, n_tokens, loop_s, lambda: bar.update(1))
    profile = replace(profile, passes=profile.passes + tuple(batched))
    assumed = [*profile.fit.extra.get("assumed", []),
               f"llama-server's own work, {loop_s * 1e3:.2f} ms a step (plain requests less llama-bench's passes), "
               "the same in a speculative step",
               f"a prompt as llama-server runs it: llama-bench's prefills of the target x {prompt_ratio:.3f} (its "
               "plain requests' prompt_ms over llama-bench's pass of their length), at every length",
               "the target's batched passes of one token (batch " + ", ".join(map(str, batches))
               + "): llama-server's plain steps with its slots decoding together, less that work; a batched "
               "verification is llama-bench's single-sequence pass scaled by the same ratio"]
    fit = replace(profile.fit, overheads=replace(profile.fit.overheads, engine=engine),
                  extra={**profile.fit.extra, "llama_server_prompt_ratio": prompt_ratio, "assumed": assumed})
    return replace(profile, acceptance=MeasuredAcceptance.from_dict(acc), fit=fit)


def server_loop_s(profile: Any, target: Path, prompts: Sequence[Sequence[int]], repeats: int, new_tokens: int,
                  tick: Callable[[], None]) -> tuple[float, float]:
    """What llama-server does in a decoding step beyond llama-bench's pass (sampling, its slot loop, the HTTP side):
    plain requests' decode time less the passes, per step; and how its prompts compare with llama-bench's: the
    same requests' ``prompt_ms`` over llama-bench's prefill of that length (median over the requests): llama-server
    runs a prompt somewhat slower than llama-bench, by a ratio that depends on the threads, not on the slots, the
    context or streaming (the ratios measured: docs/validation.md, llama.cpp)."""
    from calibrate.engine_steps import measured_pass_s

    per_step, prompt_ratios = [], []
    with Server(target, threads=threads(profile)) as server:
        server.complete(prompts[0], 8)
        for _ in range(repeats):
            for p in prompts:
                timings = server.complete(p, new_tokens)["timings"]
                t = float(timings["predicted_ms"]) * 1e-3
                passes = (new_tokens - 1) * measured_pass_s(profile, profile.target, 1, len(p) + new_tokens // 2)
                per_step.append((t - passes) / (new_tokens - 1))
                n, prompt_s = int(timings.get("prompt_n", len(p))), float(timings.get("prompt_ms", 0.0)) * 1e-3
                if n > 0 and prompt_s > 0:
                    prompt_ratios.append(prompt_s / measured_pass_s(profile, profile.target, n, 0))
                tick()
    return max(float(np.median(per_step)), 0.0), float(np.median(prompt_ratios)) if prompt_ratios else 1.0


def served_prompts(passes: Sequence[Any], target_name: str, ratio: float) -> tuple[Any, ...]:
    """The target's prefills (context 0) scaled by `ratio`: llama-bench's pass of a prompt as llama-server runs
    it. The other passes as they were."""
    from dataclasses import replace

    def scaled(p: Any) -> Any:
        return replace(p, median_s=p.median_s * ratio, iqr_s=None if p.iqr_s is None else p.iqr_s * ratio,
                       samples_s=tuple(s * ratio for s in p.samples_s))

    return tuple(scaled(p) if p.model == target_name and p.context == 0 and p.median_s else p for p in passes)


def server_batched_passes(profile: Any, target: Path, prompts: Sequence[Sequence[int]], batches: Sequence[int],
                          repeats: int, new_tokens: int, loop_s: float,
                          tick: Callable[[], None]) -> list[Any]:
    """The target's pass over B sequences x one new token, which llama-bench (one sequence) never runs: B plain
    requests sent together to a llama-server with B slots decode in the same steps; a request's decode time over
    its steps, less the server's own work per step (`loop_s`), is the batched pass at the mean context. Prompts
    are cut to one length so that the requests start and end together. Plain requests only: no speculative run
    enters the profile."""
    from scenarios.profile import PassRecord

    length = min(len(p) for p in prompts)
    cut = [list(p[:length]) for p in prompts]
    records = []
    for b in batches:
        samples = []
        with Server(target, ctx=b * (length + new_tokens + 64), slots=b, threads=threads(profile)) as server:
            server.complete(cut[0], 8)
            for r in range(repeats):
                batch = [cut[(r * b + j) % len(cut)] for j in range(b)]
                samples += [step - loop_s for step in server.steps_s(batch, new_tokens)]
                tick()
        records.append(PassRecord(profile.target.name, b, 1, length + new_tokens // 2,
                                  median_s=max(float(np.median(samples)), 1e-6),
                                  iqr_s=float(np.subtract(*np.percentile(samples, [75, 25]))),
                                  samples_s=tuple(max(s, 1e-6) for s in samples)))
    return records
