"""vllm bench serve's own speculation counters (spec_decode_*, vLLM PR #31739) read in place of a /metrics scrape."""

import json

import pytest

from scenarios.bench_files import read_manifest
from simulator import SpecsimError

SAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "scenarios" / "samples" / "bench"
COUNTED = SAMPLES / "vllm-spec-rate12-counted.json"


def manifest(tmp_path, **run):
    lines = [f'file = "{COUNTED}"'] + [f"{k} = {json.dumps(v)}" for k, v in run.items()]
    path = tmp_path / "m.toml"
    path.write_text('[setup]\nhardware = "h100-sxm"\n\n[[run]]\n' + "\n".join(lines) + "\n")
    return path


def test_the_files_counters_are_the_scrapes(tmp_path):
    own = read_manifest(manifest(tmp_path, k=3)).runs[0]
    scraped = read_manifest(manifest(tmp_path, k=3, metrics=str(SAMPLES / "vllm-spec-rate12.prom"))).runs[0]
    for key in ("drafts", "drafted", "accepted"):
        assert own.counters[key] == scraped.counters[key]
    assert (own.counters["drafts"], own.counters["drafted"], own.counters["accepted"]) == (3852, 11556, 5821)
    assert own.per_position == pytest.approx((2696 / 3852, 1849 / 3852, 1276 / 3852))
    assert own.speculative and own.k == 3


def test_a_k_the_counters_deny_is_refused(tmp_path):
    with pytest.raises(SpecsimError, match=r"result file's spec_decode counters says .*k = 3.* gives k = 2"):
        read_manifest(manifest(tmp_path, k=2))
    with pytest.raises(SpecsimError, match="give k = N .its counters say k = 3"):
        read_manifest(manifest(tmp_path))


def test_a_scrape_that_disagrees_is_refused(tmp_path):
    prom = tmp_path / "other.prom"
    prom.write_text((SAMPLES / "vllm-spec-rate12.prom").read_text().replace(" 5821.0", " 5900.0"))
    with pytest.raises(SpecsimError, match=r"spec_decode counters and the metrics scrape .*other.prom disagree "
                                           r"\(accepted 5,821 against 5,900\)") as e:
        read_manifest(manifest(tmp_path, k=3, metrics=str(prom)))
    assert "\n" not in str(e.value)


def test_counters_that_contradict_themselves_are_refused(tmp_path):
    d = json.loads(COUNTED.read_text())
    d["spec_decode_acceptance_length"] = 2.5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    path = tmp_path / "m.toml"
    path.write_text(f'[[run]]\nfile = "{bad}"\nk = 3\n')
    with pytest.raises(SpecsimError, match="do not follow from"):
        read_manifest(path)
