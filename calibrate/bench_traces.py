"""Each served request's own acceptance, recovered from what it generated: the built-in draft re-run over the
request's prompt and output, one teacher-forced pass (`acceptance_traces`), written as the manifest's
``acceptance_trace`` (JSON lines, one per successful request in send order: ``{"yields": [...]}``).

Why it is exact. llama-server's draft-model speculation (``--spec-type draft-simple``, ``--spec-draft-p-min 0``)
proposes the draft's greedy tokens and keeps a drafted token while the target's own sampled token equals it
(``common_sampler_sample_and_accept_n``): the output is the target's samples, and a step starting after output
position j - 1 keeps as many drafted tokens as the draft's greedy choices match the output from j on. The draft's
greedy choice at every position of the output is one causal pass over prompt + output, so

    yields[j] = 1 + the run of consecutive matches argmax draft(prompt, out[:i]) == out[i] from i = j on

(capped at `LOOKAHEAD`), for j = 1 .. n - 1 (out[0] is the prefill's token): the greedy-trace format
`simulator.replay.TraceAcceptance` replays, a step of k drafts at position j emitting min(yields[j], k + 1).
The replay of those yields at the run's k gives the drafted and accepted tokens the server's own counters count
(`replayed_counts`): the check that draft and tokenisation are the server's (benchmarks/bench_clients.py prints it).

The built-in pair's tokeniser is bytes (`engine.builtin.encode`), so the texts a client keeps round-trip to the
server's tokens exactly; a request whose byte count differs from the tokens the client counted is refused.
GuideLLM keeps each request's prompt and output text (``requests.successful[].request_args`` and ``.output``);
other clients' files do not (or not by default), so traces are read from GuideLLM's report only.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from scenarios.files import atomic_write_text, read_text
from simulator import SpecsimError

LOOKAHEAD = 8  # drafted tokens a trace follows past a step's start: it replays any k up to this


def guidellm_texts(path: str | Path) -> list[tuple[list[int], list[int]]]:
    """Each successful request's (prompt tokens, output tokens) from a GuideLLM report, in send order, as the
    built-in pair tokenises them; checked against the token counts GuideLLM recorded."""
    from engine.builtin import encode

    try:
        data = json.loads(read_text(path, "GuideLLM report"))
    except json.JSONDecodeError as e:
        raise SpecsimError(f"{path}: not JSON ({e.msg} at line {e.lineno}); give GuideLLM's report") from None
    benches = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benches, list) or len(benches) != 1:
        raise SpecsimError(f"{path}: acceptance traces need a GuideLLM report of one benchmark (a run at one rate)")
    reqs = (benches[0].get("requests") or {}).get("successful")
    if not isinstance(reqs, list) or not reqs:
        raise SpecsimError(f"{path}: no successful request kept in requests.successful; nothing to trace")
    rows = []
    for n, r in enumerate(reqs, 1):
        try:
            body = json.loads(r["request_args"])["body"]
            prompt, output = str(body["prompt"]), r["output"]
            start = float(r["request_start_time"])
            counted = (int(r["prompt_tokens"]), int(r["output_tokens"]))
        except (KeyError, TypeError, ValueError, json.JSONDecodeError):
            raise SpecsimError(f"{path}: request {n} lacks its prompt text, output text, start time or token counts "
                               "(GuideLLM keeps them in requests.successful)") from None
        if not isinstance(output, str):
            raise SpecsimError(f"{path}: request {n} kept no output text; nothing to trace")
        tokens = (encode(prompt), encode(output))
        if (len(tokens[0]), len(tokens[1])) != counted:
            raise SpecsimError(f"{path}: request {n}'s texts are {len(tokens[0])} + {len(tokens[1])} bytes but the "
                               f"server counted {counted[0]} + {counted[1]} tokens: traces need the built-in pair's "
                               "byte tokeniser")
        rows.append((start, tokens))
    return [t for _, t in sorted(rows, key=lambda x: x[0])]


def yields_of(match: np.ndarray, lookahead: int = LOOKAHEAD) -> np.ndarray:
    """Per output position j = 1 .. n - 1: 1 + the run of consecutive True in `match` from j (capped)."""
    run = np.zeros(len(match) + 1, dtype=np.int64)
    for i in range(len(match) - 1, -1, -1):
        run[i] = run[i + 1] + 1 if match[i] else 0
    return 1 + np.minimum(run[1:len(match)], lookahead)


def acceptance_traces(requests: list[tuple[list[int], list[int]]], draft: torch.nn.Module,
                      lookahead: int = LOOKAHEAD) -> list[np.ndarray]:
    """Each request's yields (module docstring): the draft's greedy choice at every output position against the
    output, one causal pass over prompt + output."""
    out = []
    for prompt, output in requests:
        if not prompt or not output:
            raise SpecsimError("a request with an empty prompt or output cannot be traced")
        seq = torch.tensor([prompt + output], dtype=torch.long, device=draft.device)
        with torch.no_grad():
            greedy = draft.train_logits(seq)[0].argmax(-1).cpu().numpy()
        p = len(prompt)
        match = greedy[p - 1:p - 1 + len(output)] == np.asarray(output)
        out.append(yields_of(match, lookahead))
    return out


def replayed_counts(yields: list[np.ndarray], k: int) -> dict[str, float]:
    """What the server counts for these requests at draft length k (each step drafting min(k, tokens left - 1), as
    llama-server caps a draft at the request's end): drafts, drafted and accepted tokens."""
    drafts = drafted = accepted = 0
    for y in yields:
        t, n = 0, len(y)
        while t < n:
            kk = min(k, n - t - 1)  # the step emits at most the n - t tokens the request still needs
            step = min(int(y[t]), kk + 1)
            drafts += kk > 0
            drafted += kk
            accepted += step - 1
            t += step
    return {"drafts": float(drafts), "drafted": float(drafted), "accepted": float(accepted)}


def write_traces(path: str | Path, yields: list[np.ndarray]) -> Path:
    """The manifest's acceptance_trace file (JSON lines, one request each, in send order), atomically."""
    return atomic_write_text(path, "".join(json.dumps({"yields": [int(v) for v in y]}) + "\n" for y in yields))


def load_draft(max_seq_len: int) -> torch.nn.Module:
    """The built-in draft as exported to llama.cpp (fp32, the GGUF's weights)."""
    from engine.builtin import load_pair

    return load_pair(expanded=False, dtype="fp32", max_seq_len=max_seq_len)[1]


def trace_guidellm(report: str | Path, out: str | Path) -> tuple[Path, list[np.ndarray]]:
    """`report`'s requests traced with the built-in draft and written to `out`."""
    requests = guidellm_texts(report)
    longest = max(len(p) + len(o) for p, o in requests)
    yields = acceptance_traces(requests, load_draft(max(1024, longest + 1)))
    return write_traces(out, yields), yields
