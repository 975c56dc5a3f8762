"""The corpus of published speculative-decoding measurements (scenarios/published/): every file loads, every point
carries its source and the words its figures come from, and the figures agree with themselves."""

from __future__ import annotations

import pytest

from scenarios import hardware_names, model_names
from scenarios.published import FOLDER, TIME_METRICS, load_corpus, load_source, speedup_of
from simulator import SpecsimError


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def test_every_file_loads_and_ids_are_unique(corpus):
    files = sorted(p.name for p in FOLDER.glob("*.toml"))
    assert files, "no source files"
    assert sorted({p.source.file for p in corpus}) == files
    assert len({p.source.id for p in corpus}) == len(files)


def test_every_point_has_a_source_url_and_a_quote(corpus):
    for p in corpus:
        assert p.source.url.startswith("https://"), p.label
        assert len(p.quote) >= 10, p.label


def test_stated_speedup_agrees_with_the_plain_and_speculative_figures(corpus):
    """Where a source gives both the figures and the ratio, the ratio is theirs to within rounding (3 %)."""
    checked = 0
    for p in corpus:
        if p.speedup_stated and p.plain is not None and p.spec is not None:
            assert p.speedup == pytest.approx(speedup_of(p.metric, p.plain, p.spec), rel=0.03), p.label
            checked += 1
        elif p.plain is not None and p.spec is not None:
            faster = p.spec < p.plain if TIME_METRICS[p.metric] else p.spec > p.plain
            assert (p.speedup > 1) == faster, p.label


def test_acceptance_is_within_what_k_allows(corpus):
    """A mean acceptance length counts the bonus token: 1 <= AL <= k + 1 for a chain; per-position rates fall."""
    for p in corpus:
        if p.acceptance_length is not None and p.k is not None and p.tree is None:
            assert 1.0 <= p.acceptance_length <= p.k + 1, p.label
        if p.acceptance_rates is not None and p.k is not None and p.tree is None:
            assert len(p.acceptance_rates) <= p.k, p.label


# GPUs some source measured on that specsim has no preset for (yet); a point on one of them cannot be priced.
NOT_PRESETS = {"rtx-3090", "h20", "h100-nvl"}


def test_gpu_and_target_names_are_presets_or_hugging_face_ids(corpus):
    known_gpus = set(hardware_names()) | {"b200-sxm", "b300-sxm", "gb200"} | NOT_PRESETS  # Blackwell: issue 56
    for p in corpus:
        assert p.gpu is None or p.gpu in known_gpus, p.label
        assert p.target in model_names() or "/" in p.target, p.label


def test_issue_20780_is_as_published(corpus):
    """vLLM issue #20780: plain TPOT 7.07 ms; EAGLE-3 at K = 4, 4.05 ms with acceptance length 3.08 (best K)."""
    e3 = {p.k: p for p in corpus if p.source.id == "vllm-issue-20780" and p.draft_kind == "eagle3"}
    assert sorted(e3) == [2, 3, 4, 5, 6, 7]
    assert (e3[4].plain, e3[4].spec, e3[4].acceptance_length) == (7.07, 4.05, 3.08)
    assert max(e3.values(), key=lambda p: p.speedup).k == 4


def _write(tmp_path, body: str):
    path = tmp_path / "x.toml"
    path.write_text('[source]\nid = "x"\nurl = "https://example.org"\ndate = "2025-01-01"\ntitle = "t"\n'
                    'kind = "issue"\n' + body)
    return path


_POINT = ('[[point]]\nquote = "row 1 of the table"\ngpu = "h100-sxm"\ngpu_count = 1\ntp = 1\nengine = "vllm"\n'
          'engine_version = "not stated"\ntarget = "llama-3.1-8b"\ndraft_kind = "eagle3"\nk = 3\nbatch = 1\n'
          'metric = "tpot_ms"\nplain = 8.0\nspec = 4.0\n')


def test_a_good_point_loads_and_computes_its_speedup(tmp_path):
    (p,) = load_source(_write(tmp_path, _POINT))
    assert p.speedup == 2.0 and not p.speedup_stated and p.engine_version is None


@pytest.mark.parametrize("change, words", [
    ('colour = "red"\n', "x.toml point 1: colour is not a point key"),
    ('batch = 0\n', "point 1: batch must be an integer >= 1"),
    ('concurrency = 4\n', "exactly one of batch, concurrency, rate_rps"),
    ('acceptance_rates = [0.8, 1.3]\n', "acceptance_rates must be a list of probabilities"),
])
def test_a_bad_point_is_a_one_line_error_naming_file_and_point(tmp_path, change, words):
    body = _POINT.replace('batch = 1\n', change) if change.startswith("batch") else _POINT + change
    with pytest.raises(SpecsimError, match=words) as e:
        load_source(_write(tmp_path, body))
    assert "\n" not in str(e.value)


def test_a_bad_engine_or_metric_is_refused(tmp_path):
    with pytest.raises(SpecsimError, match="engine is 'tgi'"):
        load_source(_write(tmp_path, _POINT.replace('"vllm"', '"tgi"')))
    with pytest.raises(SpecsimError, match="metric is 'tps'"):
        load_source(_write(tmp_path, _POINT.replace('"tpot_ms"', '"tps"')))


def test_the_corpus_covers_what_issue_56_asks(corpus):
    """At least 60 points from at least 10 sources that copy no other; vLLM, SGLang and TensorRT-LLM; a Blackwell GPU;
    dense and MoE targets; a draft model, EAGLE-3, MTP and n-gram; a sweep over batch or concurrency."""
    independent = {p.source.id for p in corpus if not p.source.independent_of}
    assert len(corpus) >= 60 and len(independent) >= 10
    assert {p.engine for p in corpus} >= {"vllm", "sglang", "tensorrt-llm"}
    assert {p.gpu for p in corpus} & {"b200-sxm", "b300-sxm", "gb200"}
    moe = {"qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b"}
    assert {p.target for p in corpus} & moe and {p.target for p in corpus} & {"llama-3.1-8b", "qwen3-8b"}
    assert {p.draft_kind for p in corpus} >= {"model", "eagle3", "mtp", "ngram"}
    swept = {}
    for p in corpus:
        load = p.batch or p.concurrency
        if load is not None:
            swept.setdefault((p.source.id, p.engine, p.target, p.draft_kind, p.k), set()).add(load)
    assert max(len(loads) for loads in swept.values()) >= 5
