"""#66, routes that agree or explain: benchmarks/routes_check.py's comparison of a preset and its GPU's kernel tables
(`calibrate --from aiconfigurator:SYSTEM/vllm`) on two cells of its grid, and the note a preset's command says where
the grid found them apart."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("aiconfigurator_core")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import routes_check  # noqa: E402

from scenarios import load_model  # noqa: E402
from scenarios.datasheet_order import route_notes  # noqa: E402


def cell(target: str, tmp_path: Path) -> dict:
    found = next(t for t in routes_check.TARGETS if t[0] == target)
    return routes_check.check_cell("h100_sxm", "h100-sxm", *found, "iid:0.7", tmp_path)


def test_llama_on_h100_agrees_at_batch_1(tmp_path):
    c = cell("llama-3.1-8b", tmp_path)
    one = next(r for r in c["rows"] if r["batch"] == 1)
    assert abs(one["plain_diff"]) < routes_check.FLAG and abs(one["best_diff"]) < routes_check.FLAG
    assert not c["flagged"] and "reason" not in c


def test_qwen3_on_h100_is_flagged_with_the_kernel_named(tmp_path):
    c = cell("qwen3-30b-a3b", tmp_path)
    assert c["flagged"] and abs(c["max_diff"]) > routes_check.FLAG and c["of"] == "plain"
    assert "fused MoE" in c["reason"] and "--power-law-routing 1.2" in c["reason"]
    assert "not the routing" not in c["reason"]  # the tables' routing closes it
    said = route_notes("h100-sxm", load_model("qwen3-30b-a3b"))
    assert len(said) == 1 and "aiconfigurator:h100_sxm/vllm" in said[0] and "Routes that disagree" in said[0]
    assert route_notes("h100-sxm", load_model("qwen3-30b-a3b"), routed=True) == []
    assert route_notes("h100-sxm", load_model("llama-3.1-8b")) == []
