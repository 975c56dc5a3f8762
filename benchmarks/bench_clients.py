"""Serving benchmarks that specsim did not write, read, calibrated on and validated against.

    python benchmarks/bench_clients.py samples
        Writes scenarios/samples/bench/vllm-*.json (`vllm bench serve --save-result --save-detailed`), their
        Prometheus scrapes, sglang-bench-serving.jsonl (`sglang.bench_serving --output-file`, one line per rate) and
        the manifests beside them. vLLM and SGLang cannot run on this machine: the files follow the tools' result
        dicts (vllm/benchmarks/serve.py, python/sglang/bench_serving.py) and their numbers come from a small
        continuous-batching loop in this script (not specsim's simulator) whose step times are SpecDecode-Bench's
        linear model of vLLM on one H100 with Llama-3.1-8B (scenarios/references.toml), 3 % log-normal noise per step,
        a 1B draft's pass at 0.12 of a target step and i.i.d. acceptance 0.7: samples of the format, not measurements.

    python benchmarks/bench_clients.py llama OUT_DIR [--client guidellm|aiperf]
        End to end with parts no one here wrote: llama-server (benchmarks/build_llama_cpp.sh) serving the built-in
        pair (specsim export) plain and with its draft, driven by GuideLLM (or AIPerf) at five rates from light
        load past saturation, Poisson arrivals (--arrivals constant: evenly spaced); a manifest that fits on two
        rates, plain and speculative; then `specsim validate --against` (see docs/bench.md). SPECSIM_LLAMA_THREADS
        sets llama.cpp's threads; GUIDELLM_BIN / AIPERF_BIN the clients (each in a virtual environment of its own).
        With GuideLLM, each speculative run's requests get their own acceptance traced from their texts
        (calibrate/bench_traces.py, the manifest's acceptance_trace), checked against the server's counters.

        Why Poisson by default: with evenly spaced arrivals one rate sits where a request's time alone equals the gap
        between arrivals (about 0.45 of saturation here). There every request either just overlaps the next or just
        misses it: replayed with the fit of a quiet-host run, steps 5 % cheaper or dearer move that rate's TPOT p50
        from 24.1 ms to 15.1 or 30.2 (-37 / +25 %; two such runs missed it by -14 and +21 %), while with Poisson gaps
        at the same rate it moves 38.5 -> 35.5 or 41.3 (-8 / +7 %, mean of 8 draws). Poisson gaps are what real
        traffic has and what `vllm bench serve` sends by default; specsim replays the measured send times either
        way.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "scenarios" / "samples" / "bench"
NOISE = 0.03
DRAFT_COST = 0.12  # a draft pass over a target step
ALPHA = 0.7
K = 3


def step_model() -> dict:
    sys.path.insert(0, str(ROOT))
    from scenarios import tomllib

    return tomllib.loads((ROOT / "scenarios" / "references.toml").read_text())["llama-3.1-8b-h100-vllm"]


def step_s(ref: dict, batch: int, new_tokens: int, context: float) -> float:
    return (batch * (context + new_tokens) * ref["c_kv_s"] + batch * new_tokens * ref["c_token_s"]
            + ref["c_fixed_s"] + ref["c_step_s"])


def serve(ref: dict, arrivals: np.ndarray, prompts: np.ndarray, outputs: np.ndarray, k: int,
          rng: np.random.Generator, max_batch: int = 256) -> dict:
    """A continuous-batching engine: admitted prompts prefill as a step of their own, then decode steps (k > 0: k
    draft passes and a verification of k + 1 tokens, each sequence accepting a run of i.i.d. draws). Returns per
    request its first-token time, the times of its streamed chunks, and the speculation counters."""
    n = len(arrivals)
    t, nxt = 0.0, 0
    waiting: list[int] = []
    running: dict[int, int] = {}  # request -> tokens emitted
    chunks: list[list[float]] = [[] for _ in range(n)]
    drafts = drafted = accepted = 0
    while nxt < n or waiting or running:
        while nxt < n and arrivals[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if not waiting and not running:
            t = float(arrivals[nxt])
            continue
        if waiting and len(running) < max_batch:
            new = waiting[: max_batch - len(running)]
            waiting = waiting[len(new):]
            tokens = int(prompts[new].sum())
            t += step_s(ref, 1, tokens, 0) * np.exp(rng.normal(0, NOISE))
            for r in new:
                running[r] = 1
                chunks[r].append(t)
        else:
            b = len(running)
            ctx = float(np.mean([prompts[r] + e for r, e in running.items()]))
            if k:
                dt = step_s(ref, b, k + 1, ctx) + k * DRAFT_COST * step_s(ref, b, 1, ctx)
            else:
                dt = step_s(ref, b, 1, ctx)
            t += dt * np.exp(rng.normal(0, NOISE))
            for r in list(running):
                a = 0
                if k:
                    while a < k and rng.random() < ALPHA:
                        a += 1
                    drafts += 1
                    drafted += k
                    accepted += a
                running[r] = min(int(outputs[r]), running[r] + a + 1)
                chunks[r].append(t)
        for r in [r for r, e in running.items() if e >= outputs[r]]:
            del running[r]
    return {"chunks": chunks, "drafts": drafts, "drafted": drafted, "accepted": accepted}


def arrivals_at(rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """vllm bench serve's send times: gamma gaps (burstiness 1: Poisson) rescaled to end at n / rate."""
    t = np.cumsum(rng.gamma(1.0, 1.0 / rate, n))
    return t * (n / rate) / t[-1]


def result_dict(rate: float, arrivals: np.ndarray, prompts: np.ndarray, outputs: np.ndarray, served: dict) -> dict:
    """The keys of vllm bench serve's result (and of SGLang's bench_serving, which shares most of them)."""
    chunks = served["chunks"]
    ttfts = [c[0] - a for c, a in zip(chunks, arrivals)]
    itls = [list(np.round(np.diff(c), 6)) for c in chunks]
    lat = [c[-1] - a for c, a in zip(chunks, arrivals)]
    tpots = [(la - tt) / (o - 1) for la, tt, o in zip(lat, ttfts, outputs) if o > 1]
    flat = [x for row in itls for x in row]
    duration = max(c[-1] for c in chunks)
    out = {"duration": duration, "completed": len(chunks), "failed": 0, "total_input_tokens": int(prompts.sum()),
           "total_output_tokens": int(outputs.sum()), "request_throughput": len(chunks) / duration,
           "request_goodput": None, "output_throughput": float(outputs.sum()) / duration,
           "total_token_throughput": float(prompts.sum() + outputs.sum()) / duration}
    for name, xs in (("ttft", ttfts), ("tpot", tpots), ("itl", flat), ("e2el", lat)):
        ms = 1e3 * np.asarray(xs)
        out.update({f"mean_{name}_ms": float(ms.mean()), f"median_{name}_ms": float(np.median(ms)),
                    f"std_{name}_ms": float(ms.std()), f"p99_{name}_ms": float(np.percentile(ms, 99))})
    out["detail"] = {"input_lens": prompts.tolist(), "output_lens": outputs.tolist(),
                     "ttfts": [round(x, 6) for x in ttfts], "itls": itls,
                     "generated_texts": [""] * len(chunks), "errors": [""] * len(chunks)}
    return out


def prometheus(served: dict) -> str:
    lines = []
    for name, v in (("num_drafts", served["drafts"]), ("num_draft_tokens", served["drafted"]),
                    ("num_accepted_tokens", served["accepted"])):
        lines += [f"# TYPE vllm:spec_decode_{name} counter",
                  f'vllm:spec_decode_{name}_total{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} '
                  f"{float(v)}"]
    return "\n".join(lines) + "\n"


def samples() -> None:
    ref = step_model()
    SAMPLES.mkdir(parents=True, exist_ok=True)
    n = 100
    vllm_runs, sglang_lines = [], []
    for k, rates in ((0, (4, 12, 24, 40)), (K, (4, 12, 24))):
        for rate in rates:
            rng = np.random.default_rng([rate, k])
            prompts = rng.integers(384, 641, n)
            outputs = rng.integers(64, 129, n)
            arrivals = arrivals_at(rate, n, rng)
            served = serve(ref, arrivals, prompts, outputs, k, rng)
            res = result_dict(rate, arrivals, prompts, outputs, served)
            detail = res.pop("detail")
            name = f"vllm-{'spec' if k else 'plain'}-rate{rate}.json"
            head = {"date": "20261205-090000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
                    "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
                    "num_prompts": n, "request_rate": float(rate), "burstiness": 1.0, "max_concurrency": None}
            (SAMPLES / name).write_text(json.dumps({**head, **res, **detail}) + "\n")
            if k:
                (SAMPLES / name.replace(".json", ".prom")).write_text(prometheus(served))
            vllm_runs.append((name, k, rate))
            line = {"backend": "sglang", "dataset_name": "random", "request_rate": float(rate), "max_concurrency": None,
                    "sharegpt_output_len": None, "random_input_len": 512, "random_output_len": 96,
                    "random_range_ratio": 0.25, **{key: v for key, v in res.items() if key not in
                                                   ("failed", "request_goodput", "total_token_throughput")},
                    "total_throughput": res["total_token_throughput"], "concurrency": None,
                    "accept_length": (1 + served["accepted"] / served["drafts"]) if k else None}
            sglang_lines.append(json.dumps(line))
    (SAMPLES / "sglang-bench-serving.jsonl").write_text("\n".join(sglang_lines) + "\n")
    head = ["# Made by benchmarks/bench_clients.py samples in vllm bench serve's result format (not a measurement:",
            "# SpecDecode-Bench's step model of vLLM on an H100 with Llama-3.1-8B, 3 % noise; see the script).",
            "# specsim validate --against scenarios/samples/bench/vllm-manifest.toml", "",
            "[setup]", 'hardware = "h100-sxm"', 'target = "llama-3.1-8b"', 'draft = "llama-3.2-1b"',
            'engine = "vllm"', "max_batch = 256", ""]
    lines = list(head)
    for name, k, rate in vllm_runs:
        lines += ["[[run]]", f'file = "{name}"']
        if k:
            lines += [f"k = {k}", f'metrics = "{name.replace(".json", ".prom")}"']
        if (k, rate) in ((0, 4), (0, 24), (K, 12)):
            lines.append("fit = true")
        lines.append("")
    (SAMPLES / "vllm-manifest.toml").write_text("\n".join(lines))
    lines = [h.replace("vllm bench serve's result format", "SGLang bench_serving's JSONL format")
             .replace("vllm-manifest", "sglang-manifest") for h in head]
    lines[lines.index('engine = "vllm"')] = 'engine = "sglang"'
    for i, (_name, k, rate) in enumerate(vllm_runs, 1):
        lines += ["[[run]]", 'file = "sglang-bench-serving.jsonl"', f"index = {i}", "requests = 100"]
        if k:
            lines.append(f"k = {k}")
        if (k, rate) in ((0, 4), (0, 24), (K, 12)):
            lines.append("fit = true")
        lines.append("")
    (SAMPLES / "sglang-manifest.toml").write_text("\n".join(lines))
    print(f"samples written to {SAMPLES}")


# -- llama-server driven by GuideLLM or AIPerf ------------------------------------------------------------------------

SLOTS, PROMPT_TOKENS, OUTPUT_TOKENS, K_DRAFT = 4, 64, 48, 4
# requests a run sends. A run of 24 at the knee (about 1.1/s, 21 s) repeated with the same seed, so the same prompts
# and send times, on a fresh server measured TPOT p50 43.2 ms and then 38.2 (-11 %): the requests sent within 7 s
# in the middle of the first ran 5-70 % slower than in the repeat, the rest within 5 %; a slowdown of the shared
# host's that long moves half as many requests of a run of 48.
_REQUESTS = os.environ.get("SPECSIM_BENCH_REQUESTS", "48")
if not _REQUESTS.isdigit() or int(_REQUESTS) < 2:
    sys.exit(f"bench_clients.py: SPECSIM_BENCH_REQUESTS must be a whole number of requests >= 2, got {_REQUESTS!r}")
REQUESTS = int(_REQUESTS)
FRACTIONS = (0.25, 0.45, 0.65, 0.85, 1.3)  # of the plain server's capacity, measured first (`_capacity`)
CAPACITY_REQUESTS = 4 * SLOTS  # the capacity run: SLOTS concurrent streams, this many requests in all
FIT_FRACTIONS = (0.25, 0.85)  # the two rates fitted on (plain and speculative; a light and a loaded one)
# where the clients' own virtual environments are (their dependencies clash with specsim's): gvenv/, avenv/
VENVS = Path(os.environ.get("SPECSIM_CLIENT_VENVS", "/tmp/bench57"))


def _specsim(*args: str) -> None:
    import subprocess

    subprocess.run([str(Path(sys.executable).with_name("specsim")), *args], check=True)


def _tool(name: str) -> str:
    import shutil

    for candidate in (os.environ.get(f"{name.upper()}_BIN"), str(VENVS / ("gvenv" if name == "guidellm" else
                                                                          "avenv") / "bin" / name)):
        if candidate and Path(candidate).is_file():
            return candidate
    found = shutil.which(name)
    if not found:
        sys.exit(f"bench_clients.py: {name} not found: pip install {name} (in a virtual environment of its own), "
                 f"then set {name.upper()}_BIN")
    return found


def _scrape(port: int) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def _drive(client: str, port: int, rate: float, arrivals: str, tok: Path, out: Path, seed: int,
           streams: int | None = None, requests: int | None = None) -> Path:
    """One run of the client against the server at `rate` (`arrivals`: poisson or constant), or with `streams`
    concurrent streams (a closed loop: the rate is ignored); the path of its result file. Every run draws its own
    prompts and gaps (`seed`): llama-server keeps prompts it has seen in a cache in RAM, and a prompt sent again
    skips its prefill, which no run of a real deployment's benchmark would."""
    import subprocess

    env = dict(os.environ, GUIDELLM__MAX_WORKER_PROCESSES="1")
    count = requests or REQUESTS
    if client == "guidellm":
        path = Path(f"{out}.json")
        load = f"kind=concurrent,streams={streams}" if streams else f"kind={arrivals},rate={rate:g}"
        cmd = [_tool("guidellm"), "run", "--backend",
               f"kind=openai_http,target=http://127.0.0.1:{port},request_format=/v1/completions",
               "--profile", load, "--data",
               f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
               "--tokenizer", f"kind=huggingface_auto,model={tok}", "--constraint",
               f"kind=max_requests,count={count}", "--output", f"kind=json,path={path}",
               "--seed", f"kind=static,value={seed}", "--disable-console-interactive"]
    else:
        path = out / "profile_export_aiperf.json"
        load_args = (["--concurrency", str(streams)] if streams else
                     ["--request-rate", f"{rate:g}", "--arrival-pattern", arrivals])
        cmd = [_tool("aiperf"), "profile", "-m", "model", "--url", f"http://127.0.0.1:{port}", "--endpoint-type",
               "completions", "--streaming", *load_args,
               "--request-count", str(count), "--prompt-input-tokens-mean", str(PROMPT_TOKENS),
               "--prompt-input-tokens-stddev", "0", "--prompt-output-tokens-mean", str(OUTPUT_TOKENS),
               "--prompt-output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true", "--tokenizer", str(tok),
               "--random-seed", str(seed),
               "--output-artifact-dir", str(out), "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry"]
    with open(f"{out}.log", "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT, env=env)
    return path


OFF_PACE_RETRIES = 2  # a run whose client sent off its schedule (calibrate.bench_validate.off_pace_of) runs again
SEED_STRIDE = 1000  # a run again draws other gaps and prompts (seed + stride)


def _off_pace(path: Path, rate: float) -> tuple[bool, float | None]:
    """Whether the client sent `path`'s requests off the schedule of `rate` (a burst, or lagging; Poisson gaps alone
    never are: calibrate.bench_validate.off_pace_of), and the rate it really sent at.

    GuideLLM 0.8.1's Poisson scheduler now and then sends a whole run at once (in 4 of 20 runs of one series: 24
    requests within 0.1 s for a 1.13/s run; as far as we can tell its shared start offset is read before it is
    set); such a run measures a burst, not the rate it names."""
    from calibrate.bench_validate import off_pace_of
    from scenarios.bench_files import read_file

    runs = read_file(str(path))
    if len(runs) != 1:
        return False, None
    r = runs[0]
    return off_pace_of({"paced": True, "rate_per_s": rate, "sent_span_s": r.sent_span_s,
                        "requests": r.requests}), r.sent_rate_per_s


def _capacity(client: str, port: int, tok: Path, stem: Path) -> tuple[float, Path]:
    """Requests per second the server completes with every slot busy (`SLOTS` concurrent streams, a closed loop
    of `CAPACITY_REQUESTS`), and the client's file. The profile's decode steps alone over-predict it by about 40 %
    on this CPU: every request's 64-token prompt stalls all the slots for about as long as it takes alone (175 ms,
    against 33 ms a step of four), and rates placed by that prediction put the 0.65 rate at 0.93 of what the server
    completed (12 clones: 0.65-0.77 of the prediction)."""
    from scenarios.bench_files import read_file

    if client == "aiperf":
        stem.mkdir(exist_ok=True)
    path = _drive(client, port, 0.0, "poisson", tok, stem, seed=SEED_STRIDE - 1, streams=SLOTS,
                  requests=CAPACITY_REQUESTS)
    run = read_file(str(path))[0]
    return run.completed / run.duration_s, path


def _trace(traced: list[tuple[Path, Path]]) -> None:
    """Each speculative run's requests' own acceptance (`calibrate.bench_traces`), checked against what the server
    counted: the replay of the traces at k must give its drafted and accepted tokens."""
    from calibrate.bench_traces import replayed_counts, trace_guidellm
    from scenarios.bench_files import _counters

    for report, out in traced:
        _, yields = trace_guidellm(report, out)
        got = replayed_counts(yields, K_DRAFT)
        stem = report.with_suffix("")
        counted = _counters({"metrics": f"{stem.name}-after.prom", "metrics_before": f"{stem.name}-before.prom"},
                            report.parent, str(report))
        print(f"{report.name}: its requests traced: {got['accepted']:.0f} of {got['drafted']:.0f} drafted tokens "
              f"accepted in {got['drafts']:.0f} drafts; the server counted {counted['accepted']:.0f} of "
              f"{counted['drafted']:.0f} in {counted.get('drafts', float('nan')):.0f}", flush=True)


def llama(out: Path, client: str, arrivals: str = "poisson") -> None:
    """The end-to-end run (module docstring): results, manifest and report in `out`."""
    import shutil

    sys.path.insert(0, str(ROOT))
    from calibrate.llama_cpp import Server, gguf_of, threads
    from scenarios.profile import load_profile
    from simulator.policies import PLAIN
    from simulator.step_costs import StepCosts

    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    pair = out / "pair"
    if not (pair / "target" / "model.gguf").is_file():
        _specsim("export", "--out", str(pair), "--format", "both")
    tok = out / "tokenizer"  # what the client counts tokens with: the pair's bytes
    tok.mkdir(exist_ok=True)
    for f in ("tokenizer.json", "config.json"):
        shutil.copy(pair / "target" / f, tok / f)
    (tok / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    profile_path = out / "llama.json"
    if not profile_path.is_file():
        _specsim("calibrate", "--quick", "--engine", "llama.cpp", "--target", str(pair / "target"), "--draft",
                 str(pair / "draft"), "--out", str(profile_path))
    profile = load_profile(profile_path)
    costs = StepCosts(profile.cost_model(), profile.target, profile.draft)
    ctx = PROMPT_TOKENS + OUTPUT_TOKENS / 2
    predicted = SLOTS / costs.decode_s(SLOTS, ctx, PLAIN) / OUTPUT_TOKENS  # decode alone: no prefill, no server
    target, draft = gguf_of(pair / "target", "target"), gguf_of(pair / "draft", "draft")
    n_threads = threads(profile)
    runs = []
    rejected: list[Path] = []  # runs the client sent off its schedule, kept beside the others
    traced: list[tuple[Path, Path]] = []  # speculative reports and their requests' acceptance traces, made below
    rates: list[float] = []
    fit_rates: set[float] = set()
    capacity_note = ""
    for name, with_draft in (("plain", False), ("spec", True)):
        with Server(target, draft if with_draft else None, K_DRAFT, ctx=SLOTS * 512, slots=SLOTS,
                    threads=n_threads) as server:
            server.complete([72, 101, 108, 108, 111], 8)  # a warm-up request
            if not rates:  # the rates are fractions of what the plain server measurably completes, every slot busy
                capacity, path = _capacity(client, server.port, tok, out / f"{client}-plain-capacity")
                rates = [float(f"{capacity * f:.3g}") for f in FRACTIONS]
                fit_rates = {float(f"{capacity * f:.3g}") for f in FIT_FRACTIONS}
                capacity_note = (f"# the rates: {', '.join(f'{f:g}' for f in FRACTIONS)} x the plain server's "
                                 f"capacity, {capacity:.3g} requests/s with {SLOTS} concurrent streams "
                                 f"({path.relative_to(out)}; the profile's decode steps alone, no prefill, "
                                 f"predicted {predicted:.3g})\n")
                print(capacity_note.strip("# \n"), flush=True)
            for rate in rates:
                stem = out / f"{client}-{name}-rate{rate:g}"
                if client == "aiperf":
                    stem.mkdir(exist_ok=True)
                for attempt in range(1 + OFF_PACE_RETRIES):
                    before = _scrape(server.port)
                    path = _drive(client, server.port, rate, arrivals, tok, stem,
                                  seed=len(runs) + 1 + SEED_STRIDE * attempt)
                    after = _scrape(server.port)
                    off, sent = _off_pace(path, rate)
                    if not off or attempt == OFF_PACE_RETRIES:
                        break
                    if client == "aiperf":  # AIPerf's files are a folder: keep the folder, not judged
                        kept = stem.with_name(f"{stem.name}-offpace{attempt + 1}")
                        stem.rename(kept)
                        stem.mkdir()
                    else:
                        kept = path.with_name(f"{path.stem}-offpace{attempt + 1}{path.suffix}")
                        path.rename(kept)
                    rejected.append(kept.relative_to(out))
                    print(f"{name} at {rate:g}/s: the client sent off its schedule ({sent:.3g} requests/s), kept as "
                          f"{rejected[-1]}; run again with other gaps", flush=True)
                entry = ["[[run]]", f'file = "{path.relative_to(out)}"', f'tool = "{client}"']
                if attempt:
                    entry.insert(1, f"# run {attempt + 1} of this rate; the client sent the earlier ones off its "
                                    f"schedule: {', '.join(str(x) for x in rejected[-attempt:])}")
                if with_draft:
                    Path(f"{stem}-before.prom").write_text(before)
                    Path(f"{stem}-after.prom").write_text(after)
                    entry += [f"k = {K_DRAFT}", f'metrics_before = "{Path(f"{stem}-before.prom").name}"',
                              f'metrics = "{Path(f"{stem}-after.prom").name}"']
                    if client == "guidellm":  # its report keeps every request's texts: their own acceptance
                        traced.append((path, Path(f"{stem}-trace.jsonl")))
                        entry.append(f'acceptance_trace = "{traced[-1][1].name}"')
                if rate in fit_rates:
                    entry.append("fit = true")
                runs.append("\n".join(entry))
                print(f"{name} at {rate:g}/s: {path}", flush=True)
    _trace(traced)  # after the server has stopped: nothing else runs beside a measured run
    head = (f"# llama-server ({SLOTS} slots, {n_threads} thread(s)) serving the built-in pair, plain and with its "
            f"draft (k = {K_DRAFT}), driven by {client} at {arrivals} rates (benchmarks/bench_clients.py llama)\n"
            f'{capacity_note}[setup]\nprofile = "llama.json"\nengine = "llama-server"\nmax_batch = {SLOTS}\n\n')
    (out / "manifest.toml").write_text(head + "\n\n".join(runs) + "\n")
    print(f"manifest written to {out / 'manifest.toml'}; now: specsim validate --against {out / 'manifest.toml'} "
          f"--plot {out}")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("samples", help="write the vLLM and SGLang samples and their manifests")
    end_to_end = sub.add_parser("llama", help="llama-server driven by a benchmark client, then validate --against")
    end_to_end.add_argument("out", type=Path, help="a new folder for the pair, the client's reports and the manifest")
    end_to_end.add_argument("--client", choices=("guidellm", "aiperf"), default="guidellm")
    end_to_end.add_argument("--arrivals", choices=("poisson", "constant"), default="poisson",
                            help="the gaps between sends (default poisson; constant: evenly spaced)")
    args = parser.parse_args()
    if args.what == "samples":
        samples()
    else:
        llama(args.out, args.client, args.arrivals)
