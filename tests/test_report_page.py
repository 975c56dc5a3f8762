"""`specsim report`: one self-contained HTML page whose numbers are the other commands' numbers, its engine
configuration pasteable, its bad inputs one-line errors; and the page in a real browser (Chromium through
Playwright): no console errors, every figure drawn, the copy button fills the clipboard, no sideways scroll on a
390 px phone."""

from __future__ import annotations

import html
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.report_page import BACKING, sglang_flags
from cli.report_verdict import contradictions
from simulator.drafts import Draft
from specsim import cli

SMALL = ["--hardware", "h100-sxm", "--acceptance", "iid:0.7", "--batch", "1..64", "--k", "0..4", "--context",
         "1024,8192", "--rate", "2,40", "--requests", "120", "--policy", "off,fixed:3", "--slo-tpot-ms", "30",
         "--load-rps", "40", "--executor", "serial"]
BROWSER_INSTALL = "apt-get install -y chromium && pip install playwright"
CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "plan.html"
    r = CliRunner().invoke(cli, ["report", *SMALL, "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


def snippets(text: str) -> list[str]:
    return [html.unescape(s) for s in re.findall(r'<pre id="snippet-[^"]+">(.*?)</pre>', text, re.S)]


def test_the_page_carries_everything_it_shows(page: Path):
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r'(src|href)="(https?:)?//', text)  # nothing fetched: no CDN, no remote figure
    images = re.findall(r'<img src="([^"]+)"', text)
    assert len(images) == 3 and all(i.startswith("data:image/png;base64,") for i in images)
    assert text.index("Verdict") < text.index("Engine configuration") < text.index("<img")  # the answer first
    assert '<div class="verdict">' in text  # a preset: no warning


def test_the_vllm_config_is_what_specsim_policy_prints(page: Path):
    config = json.loads(snippets(page.read_text())[0])
    r = CliRunner().invoke(cli, ["policy", "--hardware", "h100-sxm", "--acceptance", "iid:0.7", "--batch", "1..64",
                                 "--k", "0..4", "--context", "1024", "--format", "vllm-config"])
    assert r.exit_code == 0, r.output
    assert config == json.loads(r.stdout)


def test_the_verdict_says_where_speculation_pays(page: Path):
    text = html.unescape(page.read_text())
    verdict = text[text.index("Verdict"):text.index("Engine configuration")]
    # Llama-3.1-8B with a 1B draft on an H100 at acceptance 0.7: speculation pays from batch 1 at both contexts
    assert "Context 1,024: speculation pays at batch 1-" in verdict
    assert "Context 8,192: speculation pays at batch 1-" in verdict
    assert "Within the SLO (90 % of requests):" in verdict and "For 40 req/s:" in verdict
    assert "SGLang launch flags" in text and "--speculative-algorithm STANDALONE" in text


def test_sglang_flags_for_each_kind_of_draft():
    spec = Draft.of_model(__import__("scenarios").load_model("llama-3.2-1b"))
    flags, _ = sglang_flags(spec, "meta-llama/Llama-3.1-8B", 3)
    assert "--speculative-algorithm STANDALONE" in flags
    assert "--speculative-num-steps 3" in flags and "--speculative-eagle-topk 1" in flags
    assert "--speculative-num-draft-tokens 4" in flags  # a chain: the root and the k drafted tokens
    off, why = sglang_flags(spec, "meta-llama/Llama-3.1-8B", 0)
    assert "--speculative" not in off and "without" in why
    medusa = Draft("medusa", "medusa:4", head_params=1, positions=4)
    assert sglang_flags(medusa, "t", 2)[0] == ""


def test_other_drafts_compared(tmp_path: Path):
    out = tmp_path / "plan.html"
    r = CliRunner().invoke(cli, ["report", "--hardware", "h100-sxm", "--acceptance", "iid:0.7", "--batch", "1..64",
                                 "--k", "0..4", "--context", "1024", "--rate", "4", "--requests", "40", "--policy",
                                 "off,fixed:3", "--executor", "serial", "--compare", "eagle3=iid:0.75",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = html.unescape(out.read_text())
    assert len(re.findall(r"<img ", text)) == 4 and "Other drafts, compared" in text
    assert "Of the drafts compared at context 1,024, the fastest at batch 1:" in text
    bad = CliRunner().invoke(cli, ["report", "--hardware", "h100-sxm", "--acceptance", "iid:0.7", "--compare",
                                   "eagle3", "--out", str(tmp_path / "x.html")])
    assert bad.exit_code == 2 and "DRAFT=ACCEPTANCE" in bad.output and not (tmp_path / "x.html").exists()


def test_a_profile_page_says_how_far_to_trust_it(tmp_path: Path):
    """A profile fitted to an H200's step times that its own held-out points reject: the verdict says UNTRUSTED
    first, and the sources give the held-out error."""
    profile = tmp_path / "h200.json"
    r = CliRunner().invoke(cli, ["calibrate", "--from", "csv:scenarios/samples/h200-specsim-steps.csv", "--hardware",
                                 "h200", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--out", str(profile)])
    assert r.exit_code == 0, r.output
    out = tmp_path / "plan.html"
    r = CliRunner().invoke(cli, ["report", "--profile", str(profile), "--acceptance", "iid:0.7", "--batch", "1..32",
                                 "--k", "0..3", "--context", "1024", "--rate", "4", "--requests", "40", "--policy",
                                 "off,fixed:2", "--executor", "serial", "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = html.unescape(out.read_text())
    verdict = text[text.index("Verdict"):text.index("Engine configuration")]
    assert "<li>This calibration is UNTRUSTED (held-out pass error median" in verdict
    assert "Held-out pass times (" in text and "Calibration profile" in text
    assert '<div class="verdict warn">' in text  # the box in red


@pytest.mark.parametrize("args, message", [
    (["--out", "plan.txt"], "ending in .html"),
    (["--out", "plan.html", "--batch", "1..64:x2"], "every batch from 1"),
    (["--out", "plan.html", "--draft", "medusa:4", "--acceptance", "iid:0.5", "--context", "1024"],
     None),  # vLLM has a method for it: a page, not an error
    ([], "--out"),
])
def test_bad_inputs_are_one_line_errors(args: list[str], message: str | None, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    base = ["report", "--hardware", "h100-sxm", "--acceptance", "iid:0.7", "--batch", "1..16", "--k", "0..2",
            "--rate", "4", "--requests", "40", "--policy", "off,fixed:2", "--executor", "serial"]
    r = CliRunner().invoke(cli, base + args)
    if message is None:
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 2
    assert message in r.output
    assert "Traceback" not in r.output and not (tmp_path / "plan.html").exists()


def _browser():
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        pytest.skip(f"no Chromium here: {BROWSER_INSTALL}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip(f"no Playwright here: {BROWSER_INSTALL}")
    return sync_playwright


def test_the_page_in_a_real_browser(page: Path):
    sync_playwright = _browser()
    expected = snippets(page.read_text())[0]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"])
        try:
            for width, height in ((1280, 900), (390, 844)):
                context = browser.new_context(viewport={"width": width, "height": height})
                context.grant_permissions(["clipboard-read", "clipboard-write"])
                tab = context.new_page()
                errors: list[str] = []
                tab.on("console", lambda m, seen=errors: seen.append(m.text) if m.type == "error" else None)
                tab.on("pageerror", lambda e, seen=errors: seen.append(str(e)))
                tab.goto(page.as_uri(), wait_until="load")
                assert errors == []
                widths = tab.evaluate("[...document.images].map(i => i.complete ? i.naturalWidth : 0)")
                assert len(widths) == 3 and min(widths) > 0
                assert tab.evaluate("document.documentElement.scrollWidth") <= width  # no sideways scroll
                button = tab.locator("button[data-copy]").first
                button.click()
                tab.wait_for_function("document.querySelector('button[data-copy]').textContent === 'copied'")
                assert tab.evaluate("navigator.clipboard.readText()") == expected
                context.close()
        finally:
            browser.close()


_grid_spec = importlib.util.spec_from_file_location("report_grid", ROOT / "benchmarks" / "report_grid.py")
report_grid = importlib.util.module_from_spec(_grid_spec)
_grid_spec.loader.exec_module(report_grid)
FAST = ["--requests", "100", "--rate", "2,16,64", "--batch", "1..64", "--k", "0..4", "--context", "1024",
        "--executor", "serial"]


MOE_66 = ["--hardware", "h200", "--target", "qwen3-30b-a3b", "--draft", "eagle3", "--engine", "sglang",
          "--acceptance", "accept-length:2.0@3", "--slo-tpot-ms", "40", "--load-rps", "30"]
_built: dict[str, tuple] = {}


def built(args: list[str], tmp_path: Path) -> tuple:
    """A page built once per argument list in this module (its figures drawn, not rendered)."""
    key = " ".join(args)
    if key not in _built:
        _built[key] = report_grid.build([*args, *FAST], tmp_path / "plan.html")
    return _built[key]


@pytest.mark.parametrize("args", [
    MOE_66,  # #66's page: an MoE target whose speculation pays only from batch ~10, acceptance measured at k = 3
    ["--hardware", "h100-sxm", "--acceptance", "iid:0.7", "--engine", "tensorrt-llm", "--slo-tpot-ms", "30",
     "--load-rps", "100"],
    ["--hardware", "h200", "--draft", "eagle3", "--acceptance", "accept-length:2.5@3", "--engine", "vllm",
     "--slo-tpot-ms", "25", "--load-rps", "10"],
], ids=["moe-sglang", "dense-trtllm", "eagle3-vllm"])
def test_no_verdict_line_contradicts_its_page(args: list[str], tmp_path: Path):
    """The page built without rendering its figures (benchmarks/report_grid.py runs 36 pages with more requests):
    every verdict line agrees with the results the tables and figures are drawn from."""
    code, output, page, results = built(args, tmp_path)
    assert code == 0, output
    assert contradictions(results, page.verdict) == []
    text = " ".join(page.verdict)
    assert "Under load (one engine" in text and "req/s per engine ->" in text
    config = next(s for s in page.sections if s.title == "Engine configuration")
    vllm = json.loads(config.snippets[0].text)
    deep = results.measured_k is not None and vllm["num_speculative_tokens"] > results.measured_k
    assert ("extrapolates: k =" in config.snippets[0].note) == deep  # a config past the measured k says so


def test_the_checker_catches_66s_contradictions(tmp_path: Path):
    """The verdict #66 found beside its own figures: a 'run without speculation' where speculation wins under
    load, a fleet of 2 beside 14.2 req/s per engine with no arithmetic: both caught."""
    code, output, page, results = built(MOE_66, tmp_path)
    assert code == 0, output
    assert results.measured_k == 3 and "extrapolates: k = " in page.sections[0].snippets[0].note
    old = [line for line in page.verdict if not line.startswith(("Under load", "For "))]
    old += ["From 2 req/s on no speculating policy beats plain decoding's TPOT p50: past that load, run without "
            "speculation.", "For 30 req/s: 2 engines with off (2 with fixed:4, 2 with adaptive)."]
    found = contradictions(results, old)
    assert any("run without speculation" in f for f in found)
    assert any("without the arithmetic" in f for f in found)


def test_the_validations_quoted_are_the_readmes():
    """Every figure the page quotes from a validation is in the README's accuracy table, the one place they are
    kept (the tour's page once quoted 0.7 % / 4.7 % after the README had moved to 3.4 % / 21.7 %)."""
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## How accurate it is"):readme.index("## How long it takes")]
    numbers = set(re.findall(r"\d+\.\d+|\d+", table.replace("−", "-").replace("–", "-")))
    for key, text in BACKING.items():
        quoted = re.findall(r"(\d+\.\d+|\d+) %", text) + re.findall(r"(\d+\.\d+)-", text)
        missing = [q for q in quoted if q not in numbers]
        assert not missing, f"BACKING[{key!r}] quotes {missing}, not in the README's accuracy table"
