"""`specsim report` over a grid of configurations (dense and MoE targets, vLLM / SGLang / TensorRT-LLM, loads):
every page built (figures drawn, not rendered to PNG unless --render) and its verdict checked against the results it
was made from (`cli.report_verdict.contradictions`: each served claim against the runs, each capacity and fleet
number against the searches, the fleet's arithmetic, a "run without speculation" beside a speculating policy that
wins). Prints one row a page and the count of contradictions; exits 1 if there is one.

    python benchmarks/report_grid.py                 # 36 pages, 600 requests a simulation (~6 min on 2 cores)
    python benchmarks/report_grid.py --requests 2000 --render

tests/test_report_page.py runs a few of these pages with fewer requests.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (hardware, target, draft, acceptance, TP): dense with a draft model, dense with a head, MoE with a head
PAIRS = [
    ("h100-sxm", "llama-3.1-8b", "llama-3.2-1b", "iid:0.7", 1),
    ("h200", "llama-3.1-8b", "eagle3", "accept-length:2.5@3", 1),
    ("h200", "qwen3-30b-a3b", "eagle3", "accept-length:2.0@3", 1),
]
ENGINES = ["vllm", "sglang", "tensorrt-llm"]
LOADS = [(30, 40), (100, 30), (10, 25), (60, 50)]  # (req/s, TPOT SLO ms)


def grid() -> list[list[str]]:
    """The report's arguments for every page of the grid (without --out)."""
    out = []
    for (hw, target, draft, acceptance, tp), engine, (load, slo) in itertools.product(PAIRS, ENGINES, LOADS):
        out.append(["--hardware", hw, "--target", target, "--draft", draft, "--acceptance", acceptance, "--tp",
                    str(tp), "--engine", engine, "--slo-tpot-ms", str(slo), "--load-rps", str(load)])
    return out


def build(args: list[str], out: Path, render: bool = False):
    """One page through the CLI: (exit code, output, page, results); the page's figures are not rendered to PNG
    unless `render`."""
    import matplotlib.pyplot as plt
    from click.testing import CliRunner

    import cli.report_page as rp
    from specsim import cli

    got = {}
    build_page = rp.report_page

    def keep(*a, **k):
        got["page"], got["results"] = build_page(*a, **k)
        return got["page"], got["results"]

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(rp, "report_page", keep))
        if not render:
            stack.enter_context(mock.patch("plots.report_html.page_html", lambda page: "<!DOCTYPE html>\n"))
        r = CliRunner().invoke(cli, ["report", *args, "--out", str(out)])
    plt.close("all")
    return r.exit_code, r.output, got.get("page"), got.get("results")


def main() -> int:
    from cli.report_verdict import contradictions

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=600, help="requests per simulation")
    ap.add_argument("--render", action="store_true", help="render every figure too (slower)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/report-grid"), help="folder for the pages")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    found = failed = 0
    for i, args in enumerate(grid()):
        t = time.perf_counter()
        code, output, page, results = build([*args, "--requests", str(a.requests)], a.out / f"page-{i:02d}.html",
                                            a.render)
        label = " ".join(args[1::2])
        if code != 0 or page is None:
            failed += 1
            print(f"{i:2d} FAILED {label}: {output.strip().splitlines()[-1] if output.strip() else code}")
            continue
        bad = contradictions(results, page.verdict)
        found += len(bad)
        print(f"{i:2d} {time.perf_counter() - t:5.1f} s  {len(bad)} contradictions  {label}", flush=True)
        for b in bad:
            print(f"     {b}")
        for line in page.verdict:
            print(f"     | {line}")
    print(f"{len(grid())} pages, {failed} failed, {found} contradictions")
    return 1 if found or failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
