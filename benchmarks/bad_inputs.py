"""Bad inputs, as a newcomer types them: every one must be refused in one line that says what to do (exit code 2), or
answered with what it means (exit 0 and the words that say so), and never with a traceback.

    python benchmarks/bad_inputs.py            # every case, in-process (about a minute on a 2-core CPU)
    python benchmarks/bad_inputs.py -k draft   # the cases whose category or command holds 'draft'
    python benchmarks/bad_inputs.py --list     # the cases, without running them

Each case is a category, a command line (``{D}`` is a folder of bad files made here: missing, empty, truncated,
of the wrong kind, contradictory) and what it must give: ``refuse`` (exit 2, one line starting ``specsim: error:``,
holding the fragment when one is given, and saying what to do), or ``ok`` (exit 0, the fragment in what it prints).
Counted: tracebacks (any exception but a clean exit), nonsense answered with exit 0 (a case that must be refused,
or an answer holding nan/inf), refusals that are not one line, refusals that do not say what to do, and cases that
ran past their time. The commands run with an empty cache folder, so no calibration profile of this machine is
seen. Exit status 1 when any count is not zero.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

P = "--hardware h100-sxm --acceptance iid:0.7 --batch 1,8 --k 0..2"  # a preset prediction that works
LLAMA_CFG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
             "vocab_size": 64}
QWEN_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
            "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
            "intermediate_size": 6144, "vocab_size": 151936, "tie_word_embeddings": False, "num_experts": 128,
            "num_experts_per_tok": 8, "moe_intermediate_size": 768, "torch_dtype": "bfloat16"}
# Words a refusal uses when it says what to do (or what the input must be).
# Words a refusal uses when it says what to do, or what the input must be (its domain, the choices).
ACTIONABLE = re.compile(r"\b(give|use|write|run|try|e\.g\.|did you mean|choose|pick|must|needs?|check|known|"
                        r"allowed|say|see|keep|put|fix|leave|add|one of|expected|between|at most|at least|lies in|"
                        r"outside|takes|is for|it has|above the largest|pip install|instead)|>=|<=|\.\.",
                        re.IGNORECASE)
NONSENSE = re.compile(r"(?<![\w.])(nan|inf|-inf)(?![\w.])")


@dataclass(frozen=True)
class Case:
    category: str
    command: str  # after `specsim`
    expect: str  # "refuse" or "ok"
    fragment: str = ""


def refuse(category: str, command: str, fragment: str = "") -> Case:
    return Case(category, command, "refuse", fragment)


def ok(category: str, command: str, fragment: str = "") -> Case:
    return Case(category, command, "ok", fragment)


def cases() -> list[Case]:
    c: list[Case] = []
    # -- ranges and numbers ------------------------------------------------------------------------------------
    for bad, frag in (("", "empty"), ("1..0", ">= 1"), ("8..2", "write 2..8"), ("0", ">= 1"), ("-4", ">= 1"),
                      ("1..1e3", "not an integer"), ("abc", "not an integer"), ("1..64:x1", "x2 or more"),
                      ("1..64:0", "at least 1"), ("1..99999999", "more than"), ("1..", "not an integer"),
                      ("nan", "not an integer"), ("1,,2", "not an integer"), ("0..64:x2", "start at 1")):
        c.append(refuse("range --batch", f"predict {P.replace('--batch 1,8', '')} --batch '{bad}'", frag))
    for bad, frag in (("3..-1", ">= 0"), ("-1", ">= 0"), ("0..99", "largest"), ("x", "not an integer")):
        c.append(refuse("range --k", f"predict {P.replace('--k 0..2', '')} --k '{bad}'", frag))
    for bad, frag in (("-5", ""), ("0..10000000000", "largest"), ("1k", "not an integer")):
        c.append(refuse("range --context", f"predict {P} --context '{bad}'", frag))
    for bad in ("0", "-1", "nan", "inf", "1e12", "x", "5..1", ""):
        c.append(refuse("range --rate", f"simulate --hardware h100-sxm --acceptance iid:0.7 --rate '{bad}' "
                                        "--requests 50"))
    for opt, bad in (("--alpha", "1.5"), ("--alpha", "nan"), ("--alpha", "-0.1"), ("--alpha", "inf"),
                     ("--c", "nan"), ("--c", "-1"), ("--c", "inf")):
        c.append(refuse("numbers", f"predict {opt} {bad} --k 1..4" + (" --c 0.05" if opt == "--alpha" else
                                                                         " --alpha 0.8")))
    for opt, bad in (("--tolerance", "-1"), ("--tolerance", "nan"), ("--tolerance", "500")):
        c.append(refuse("numbers", f"policy --hardware h100-sxm --acceptance iid:0.6 --context 128 {opt} {bad}"))
    for opt, bad in (("--slo-tpot-ms", "0"), ("--slo-tpot-ms", "nan"), ("--slo-tpot-ms", "-3"),
                     ("--slo-ttft-ms", "inf"), ("--requests", "0"), ("--requests", "100000000"),
                     ("--engines", "0"), ("--max-batch", "0"), ("--seed", "-1")):
        c.append(refuse("numbers", f"simulate --hardware h100-sxm --acceptance iid:0.7 --rate 5 --requests 50 "
                                   f"{opt} {bad}"))
    for opt, bad in (("--expert-sharing", "2"), ("--expert-sharing", "nan"), ("--routing-skew", "-1"),
                     ("--routing-skew", "nan"), ("--power-law-routing", "nan"), ("--power-law-routing", "0.5"),
                     ("--routing-skew 1 --power-law-routing", "1.2"), ("--tp", "0"), ("--tp", "3"), ("--tp", "4096"),
                     ("--draft-tp", "0")):
        c.append(refuse("numbers", f"predict {P} --target qwen3-30b-a3b --draft eagle3 {opt} {bad}"))
    # -- acceptance specs ----------------------------------------------------------------------------------------
    for spec, frag in (("iid:", ""), ("iid:1.5", ""), ("iid:nan", ""), ("iid:inf", ""), ("iid:-0.2", ""),
                       ("iid:abc", ""), ("positional:", ""), ("positional:0.5,x", ""), ("positional:0.5,1.2", ""),
                       ("beta:0,1", ""), ("beta:nan,1", ""), ("beta:1", ""), ("markov:1,2", ""),
                       ("markov:0.5,0.5,0.5", ""), ("markov:0.9,0.2,nan,0.1", ""), ("ranks:", ""),
                       ("ranks:-1", ""), ("ranks:2,3", ""), ("bogus:1", "use"), ("tensorrt:x.json", "use"),
                       ("accept-length:0.5@3", ""), ("accept-length:5@3", ""), ("accept-length:nan@3", ""),
                       ("accept-length:2", ""), ("accept-length:2@0", ""), ("trace:{D}/missing.jsonl", ""),
                       ("trace:{D}/empty.jsonl", ""), ("trace:{D}/trace_fields.jsonl", ""),
                       ("trace:{D}/trace_neg.jsonl", ""),
                       ("trace:" + str(ROOT / "scenarios/samples/acceptance/llama3.1-8b-instruct_cnn-40.jsonl")
                        + ":medusa", ""),
                       ("vllm-metrics:{D}/missing.txt", ""), ("vllm-metrics:{D}/empty.txt", ""),
                       ("vllm-metrics:{D}/garbage.txt", ""), ("sglang:{D}/missing.jsonl@3", ""),
                       ("sglang:{D}/empty.jsonl@0", ""), ("trtllm:{D}/missing.json", ""),
                       ("fit:", "fit needs a source"), ("fit:{D}/fit_bad.json", ""), ("fit:{D}/missing.json", ""),
                       ("measured", "profile"), ("iid:0.6@context:1024=5", "above 1"),
                       ("iid:0.6@context:abc", ""), ("iid:0.6@context:1024=nan", ""),
                       ("iid:0.6@context:1024=-1", ""), ("iid:0.6@context:", ""),
                       ("iid:0.6@context:1024=1@context:2048=1", ""), ("iid:0.8@proposed:0", ""),
                       ("iid:0.8@proposed:1.5", ""), ("iid:0.8@proposed:nan", ""),
                       ("iid:0.8@proposed:0.3", "@proposed")):
        c.append(refuse("acceptance", f"predict --hardware h100-sxm --batch 1,8 --k 0..2 --acceptance '{spec}'",
                        frag))
    c.append(refuse("acceptance", "predict --hardware h100-sxm --batch 1,8 --k 0..2", "--acceptance"))
    # -- drafts --------------------------------------------------------------------------------------------------
    for spec, frag in (("eagle3:layers=0", ">= 1"), ("eagle3:layers=-1", ">= 1"), ("eagle3:layers=nan", "finite"),
                       ("eagle3:layers=inf", "finite"), ("eagle3:layers=1.5", "whole"),
                       ("eagle3:layers=2,layers=3", "twice"), ("eagle3:heads=4", "layers=N"),
                       ("eagle3:layers", "layers=N"), ("eagle3:vocab=0", ">= 1"), ("eagle3:d_ff=-5", ">= 0"),
                       ("eagle3:{D}/missing.json", "no such"), ("eagle3:{D}/array.json", ""),
                       ("eagle3:{D}/head_lacks/config.json", "needs"), ("mtp:0", "at least one"),
                       ("mtp:x", "mtp:N"), ("mtp:2", "mtp:2,assumed"), ("mtp", "mtp:N,assumed"),
                       ("mtp:2,maybe", "assumed"), ("medusa:0", "at least one"), ("medusa:x", "medusa:H"),
                       ("medusa:4,layers=0", ">= 1"), ("medusa:4,layers=2,layers=2", "twice"),
                       ("medsa:4", "unknown draft"), ("qwen3-8b-eagle3", "made for"),
                       ("qwen3-30b-a3b-eagle3", "width"), ("qwen2.5-0.5b", "vocabulary"),
                       ("{D}/missing/config.json", ""), ("{D}/empty.json", ""), ("tensorrt:foo", "")):
        c.append(refuse("draft", f"predict {P} --target llama-3.1-8b --draft '{spec}'", frag))
    for spec, frag in (("ngram:us_per_seq=nan", "finite"), ("ngram:us_per_seq=inf", "finite"),
                       ("ngram:us_per_seq=-1", ">= 0"), ("ngram:bogus=1", "us_per_seq=N"),
                       ("ngram:overlap,overlap", "twice"), ("suffix:fixed_us=abc", "not a number")):
        c.append(refuse("draft", f"predict --hardware h100-sxm --acceptance iid:0.8@proposed:0.3 --batch 1,8 "
                                 f"--k 0..2 --draft '{spec}'", frag))
    c.append(ok("draft", f"predict {P} --draft eagle3:layers=100000", "does not fit"))
    c.append(refuse("draft", f"predict {P} --draft medusa:3 --k 4", "--k 3"))
    # -- models and config.json ----------------------------------------------------------------------------------
    for target, frag in (("llama-9b", "unknown model"), ("{D}/missing.json", "no such"), ("{D}/empty.json", ""),
                         ("{D}/trunc.json", ""), ("{D}/array.json", "no JSON object"), ("{D}/image.png", ""),
                         ("{D}/lacks/config.json", "lacks"), ("{D}/unk", "not a family"),
                         ("{D}/moe0", "contradict"), ("{D}/moefam", "mixture of experts"),
                         ("{D}/topk", "top-k"), ("{D}/strlayers", "whole number"), ("{D}/neglayers", ">= 1"),
                         ("{D}/heads", "multiple"), ("{D}/nanwidth", "finite"), ("{D}/noconfig", ""),
                         ("tensorrt:foo", "unknown model"), ("{D}/steps_ok.csv", "")):
        c.append(refuse("model", f"predict {P} --draft ngram --acceptance iid:0.8@proposed:0.3 --target "
                                 f"'{target}'", frag))
    c.append(ok("model", f"predict {P} --target {{D}}/w4096/qwen3-30b-a3b --draft eagle3", "no published"))
    c.append(ok("model", f"predict {P} --target {{D}}/gemma --draft ngram --acceptance iid:0.8@proposed:0.3",
                "read as a Llama-family"))
    c.append(ok("model", "policy --hardware h100-sxm --target llama-3.1-70b --tp 4 --draft eagle3 --acceptance "
                         "iid:0.7 --context 1024 --format vllm-config", "placeholder"))
    c.append(ok("model", "predict --hardware h100-sxm --target llama-3.1-70b --tp 4 --draft eagle3 --batch 1,8 "
                         "--k 0..2 --acceptance trace:" +
                str(ROOT / "scenarios/samples/acceptance/llama3.1-8b-instruct_cnn-40.jsonl"),
                "measured on llama-3.1-8b"))
    # -- hardware, engine, modes ---------------------------------------------------------------------------------
    c += [refuse("hardware", "predict --hardware h1000 --acceptance iid:0.7", "did you mean"),
          refuse("hardware", "predict --hardware h100-sxm --acceptance iid:0.7 --engine tensorrt", "tensorrt-llm"),
          refuse("hardware", "predict --hardware h100-sxm --profile {D}/missing.json --acceptance iid:0.7", ""),
          refuse("hardware", "predict --acceptance iid:0.7 --batch 1", "calibrate"),
          refuse("hardware", "predict --acceptance iid:0.7 --tp 2 --profile {D}/missing.json", ""),
          refuse("hardware", "predict --hardware h100-sxm --acceptance iid:0.7 --dtype fp4", ""),
          ok("hardware", "predict --hardware h100-sxm --target llama-3.1-405b --acceptance iid:0.7 --batch 1 "
                         "--k 0..2", "nothing fits")]
    # -- profiles ------------------------------------------------------------------------------------------------
    for name in ("missing.json", "empty.json", "trunc.json", "array.json", "profile_fields.json",
                 "lacks/config.json", "profile.toml", "image.png"):
        c.append(refuse("profile", f"predict --profile {{D}}/{name} --acceptance iid:0.7 --batch 1,8"))
    c.append(refuse("profile", "policy --profile {D}/trunc.json --acceptance iid:0.7"))
    c.append(refuse("profile", "simulate --profile {D}/array.json --acceptance iid:0.7 --rate 5 --requests 50"))
    # -- calibrate --from ----------------------------------------------------------------------------------------
    pair = "--hardware h100-sxm --target llama-3.1-8b --draft llama-3.2-1b --out {D}/out/p.json"
    for source, frag in (("tensorrt:{D}/steps_ok.csv", "not a source"), ("{D}/steps.txt", "say which engine"),
                         ("csv:{D}/missing.csv", ""), ("csv:{D}/empty.csv", ""), ("csv:{D}/steps_header.csv", ""),
                         ("csv:{D}/steps_badheader.csv", "header"), ("csv:{D}/steps_nan.csv", "finite"),
                         ("csv:{D}/steps_11d.csv", "units"), ("csv:{D}/steps_fast.csv", "faster than"),
                         ("csv:{D}/steps_neg.csv", ""),
                         ("csv:{D}/steps_phase.csv", "phase"), ("csv:{D}/steps_fields.csv", "fields"),
                         ("csv:{D}/steps_few.csv", "at least 6"), ("csv:{D}/image.png", ""),
                         ("vllm:{D}/missing.toml", ""), ("vllm:{D}/m_nottoml.toml", "not TOML"),
                         ("vllm:{D}/empty.toml", "no [[run]]"), ("vllm:{D}/m_unknown.toml", "allowed"),
                         ("vllm:{D}/m_topkey.toml", "[[run]]"), ("vllm:{D}/m_dup.toml", ""),
                         ("vllm:{D}/m_missingfile.toml", ""), ("vllm:{D}/m_wrongjson.toml", "vllm bench latency"),
                         ("vllm:{D}/m_spec_nolen.toml", "mean_acceptance_length"),
                         ("vllm:{D}/m_spec_eagle.toml", "cannot be fitted yet"),
                         ("vllm:{D}/m_one.toml", "one output length"), ("vllm:{D}/m_negbatch.toml", "batch"),
                         ("vllm:{D}/m_shrinks.toml", "does not grow"), ("sglang:{D}/missing.jsonl", ""),
                         ("sglang:{D}/empty.jsonl", ""), ("sglang:{D}/sg_nokeys.jsonl", ""),
                         ("sglang:{D}/sg_notjson.jsonl", ""), ("llama-bench:{D}/empty.json", ""),
                         ("llama-bench:{D}/lb_bad.json", ""), ("aiconfigurator:", "")):
        c.append(refuse("calibrate --from", f"calibrate --from '{source}' {pair}", frag))
    c += [refuse("calibrate --from", "calibrate --from csv:{D}/steps_ok.csv --target llama-3.1-8b --draft "
                                     "llama-3.2-1b", "--hardware"),
          refuse("calibrate --from", "calibrate --from csv:{D}/steps_ok.csv --hardware h100-sxm", "--target"),
          refuse("calibrate --from", "calibrate --from csv:{D}/steps_ok.csv --hardware h100-sxm --target "
                                     "llama-3.1-8b --draft llama-3.2-1b --out {D}/out/p.txt", ".json"),
          refuse("calibrate --from", "calibrate --from csv:{D}/steps_ok.csv --hardware h100-sxm --target "
                                     "llama-3.1-8b --draft llama-3.1-8b --out {D}/out/p.json", "one model"),
          refuse("calibrate", "calibrate --device cuda:7 --quick", ""),
          refuse("calibrate", "calibrate --device tpu --quick", ""),
          refuse("calibrate", "calibrate --quick --out {D}/image.png/p.json", "is a file"),
          refuse("calibrate", "calibrate --quick --batch 0..4", ">= 1"),
          refuse("calibrate", "calibrate --quick --target {D}/unk", "not a family"),
          refuse("calibrate", "calibrate --engine transformers --target {D}/hf_noweights --draft "
                              "{D}/hf_noweights --quick --out {D}/out/hf.json", "no weights"),
          refuse("calibrate", "calibrate --engine transformers --target {D}/noconfig --draft {D}/noconfig "
                              "--quick --out {D}/out/hf.json", "config.json")]
    # -- bench manifests: counters that contradict their run, a choice said (#66) ----------------------------------
    for name, frag in (("mb_k7.toml", "11,556 draft tokens in 3,852 drafts (k = 3) but the manifest gives k = 7"),
                       ("mb_twice.toml", "count twice"), ("mb_nok.toml", "give k = N (its counters say k = 3)"),
                       ("mb_plainmetrics.toml", "speculative = false"), ("mb_llamak3.toml", "give k = 4"),
                       ("mb_allruns.toml", "the scrape counts other runs too")):
        c.append(refuse("bench manifest", f"calibrate --from bench:{{D}}/{name}", frag))
    c += [refuse("bench manifest", "validate --against {D}/mb_nofit.toml", "no run is marked fit = true"),
          ok("bench manifest", "calibrate --from bench:{D}/mb_nofit.toml", "so every run is fitted (1 plain, 0 "
                                                                           "speculative)"),
          ok("bench manifest", "calibrate --from bench:{D}/mb_nofit.toml --json", "rate = 5/s from the manifest, "
                                                                                  "over the file's 4/s"),
          ok("bench manifest", "validate --against {D}/mb_model.toml", "names model 'meta-llama/Llama-3.1-8B")]
    # -- settings that do not apply to the target, profile or GPU (#66) ------------------------------------------
    measured = str(ROOT / "scenarios/samples/h200-graph-3/real-profile.json")  # an H200's, in bf16
    for command in ("predict --batch 1,8 --k 0..2", "simulate --rate 5 --requests 50", "plan --slo-tpot-ms 20 "
                    "--requests 50", "report --out {D}/out/r.html --requests 50"):
        for flag in ("--expert-sharing 0.3", "--routing-skew 1", "--power-law-routing 1.2"):
            c.append(refuse("not applied", f"{command} --hardware h100-sxm --target llama-3.1-8b --draft eagle3 "
                                           f"--acceptance iid:0.7 {flag}", "is dense"))
    c += [refuse("not applied", f"predict --profile {measured} --dtype nvfp4 --acceptance iid:0.7 --batch 1,8",
                 "measured its passes in bf16"),
          refuse("not applied", f"simulate --profile {measured} --dtype fp8 --acceptance iid:0.7 --rate 5 "
                                "--requests 50", "measured its passes in bf16"),
          ok("not applied", f"predict --profile {measured} --dtype bf16 --acceptance iid:0.7 --batch 1,8 --k 0..2",
             "k=2"),
          refuse("not applied", f"predict {P.replace('h100-sxm', 'mi300x')} --dtype nvfp4", "use --dtype mxfp4"),
          ok("not applied", f"predict {P.replace('h100-sxm', 'mi300x')} --dtype mxfp4", "k=2"),
          ok("not applied", f"predict {P.replace('h100-sxm', 'rtx-4090')} --dtype fp8", "k=2"),
          refuse("not applied", f"predict {P} --engine ''", "names no engine"),
          refuse("not applied", "simulate --hardware h100-sxm --acceptance iid:0.7 --rate 5 --engine ' '",
                 "names no engine"),
          refuse("not applied", "sweep {D}/sw_ok.toml --engine ''", "names no engine"),
          refuse("calibrate --from", "calibrate --from aiconfigurator:h200_sxm/vllm --target llama-3.1-8b --draft "
                                     "llama-3.2-1b --tp 3", "use --tp 2, 4, 8, 16 or 32")]
    # -- simulate, plan, policies, workloads ---------------------------------------------------------------------
    sim = "simulate --hardware h100-sxm --acceptance iid:0.7 --rate 5 --requests 50"
    for opt, frag in (("--policy bogus", ""), ("--policy fixed:-1", ""), ("--policy fixed:x", ""),
                      ("--policy threshold:4@0", ""), ("--policy threshold:4", ""), ("--policy adaptive:x", ""),
                      ("--policy tree:0", ""), ("--policy fixed:99", ""), ("--policy ''", ""),
                      ("--arrivals bogus", "poisson"), ("--arrivals gamma:0", ""), ("--arrivals gamma:nan", ""),
                      ("--arrivals trace:{D}/missing.csv", ""), ("--arrivals trace:{D}/empty.csv", ""),
                      ("--arrivals trace:{D}/arr_nocol.csv", "missing column"),
                      ("--arrivals trace:{D}/arr_neg.csv", ""), ("--lengths-from {D}/missing.csv", ""),
                      ("--lengths-from {D}/arr_zero.csv", "at least one"), ("--prompt-tokens 0", ""),
                      ("--prompt-tokens exp:-1", ""), ("--output-tokens 5..1", ""), ("--output-tokens abc", ""),
                      ("--executor bogus", ""), ("--executor local:0", ""), ("--plot {D}/out/t.txt", ""),
                      ("--plot {D}/image.png/t.png", "is a file"), ("--json --csv", "")):
        c.append(refuse("simulate", f"{sim} {opt}", frag))
    c += [refuse("plan", "plan --hardware h100-sxm --acceptance iid:0.7 --requests 50", "--slo"),
          refuse("plan", "plan --hardware h100-sxm --acceptance iid:0.7 --slo-tpot-ms 10 --load-rps -1"),
          refuse("plan", "plan --hardware h100-sxm --acceptance iid:0.7 --slo-tpot-ms 10 --attainment 1.5"),
          refuse("policy", "policy --hardware h100-sxm --acceptance iid:0.6 --format bogus"),
          refuse("policy", "policy --hardware h100-sxm --acceptance iid:0.6 --context 128,1024", "context"),
          refuse("policy", "policy --hardware h100-sxm --acceptance iid:0.6 --batch 2..64", "from 1"),
          refuse("policy", "policy --hardware h100-sxm --acceptance iid:0.8@proposed:0.3 --draft suffix "
                           "--format vllm-config", "no speculative method"),
          refuse("policy", "policy --hardware h100-sxm --acceptance iid:0.6 --out {D}/image.png/p.json"),
          refuse("tree", f"predict {P} --tree 0", ""), refuse("tree", f"predict {P} --tree 2,x", ""),
          refuse("tree", f"predict {P} --tree 64,64,64,64", ""), refuse("tree", f"predict {P} --tree-budget 0"),
          ok("tree", f"predict {P} --tree ' '", "k=2")]
    # -- non-finite numbers anywhere -----------------------------------------------------------------------------
    for opt in ("--prompt-tokens exp:nan", "--output-tokens exp:inf", "--attainment nan", "--load-rps nan",
                "--load-rps inf"):
        c.append(refuse("non-finite", f"plan --hardware h100-sxm --acceptance iid:0.7 --slo-tpot-ms 10 "
                                      f"--requests 50 {opt}"))
    for spec in ("ranks:nan", "positional:0.8,nan", "beta:inf,1", "sglang:{D}/empty.jsonl@nan",
                 "accept-length:inf@3", "iid:0.7@context:nan=1", "iid:1e400"):
        c.append(refuse("non-finite", f"predict --hardware h100-sxm --batch 1,8 --k 0..2 --acceptance '{spec}'"))
    for name in ("sw_nanrate.toml", "sw_nanslo.toml", "sw_infreq.toml", "m_nanlen.toml"):
        c.append(refuse("non-finite", f"sweep {{D}}/{name} --executor serial" if name.startswith("sw") else
                        f"calibrate --from vllm:{{D}}/{name} --hardware h100-sxm --target llama-3.1-8b --draft "
                        "llama-3.2-1b --out {D}/out/p.json"))
    c.append(refuse("non-finite", "calibrate --from csv:{D}/steps_inf.csv --hardware h100-sxm --target llama-3.1-8b "
                                  "--draft llama-3.2-1b --out {D}/out/p.json", "finite"))
    c.append(refuse("non-finite", f"predict {P} --target {{D}}/infheads --draft ngram --acceptance "
                                  "iid:0.8@proposed:0.3"))
    # -- sweep TOML ----------------------------------------------------------------------------------------------
    for name, frag in (("missing.toml", ""), ("m_nottoml.toml", ""), ("empty.toml", ""), ("sw_unknown.toml", ""),
                       ("sw_badhw.toml", "did you mean"), ("sw_badrates.toml", ""), ("sw_negreq.toml", ""),
                       ("sw_types.toml", ""), ("image.png", "")):
        c.append(refuse("sweep", f"sweep {{D}}/{name} --executor serial", frag))
    # -- acceptance fit, plots, export, validate -----------------------------------------------------------------
    sample = str(ROOT / "scenarios/samples/acceptance/llama3.1-8b-instruct_sharegpt-48.jsonl")
    c += [refuse("acceptance fit", "acceptance fit {D}/missing.jsonl"),
          refuse("acceptance fit", "acceptance fit tensorrt:foo.json", "not a source"),
          refuse("acceptance fit", f"acceptance fit trace:{sample} --models bogus", "choose"),
          refuse("acceptance fit", f"acceptance fit trace:{sample} --folds 1"),
          refuse("acceptance fit", f"acceptance fit trace:{sample} --out {{D}}/image.png/f.json"),
          refuse("acceptance fit", "acceptance fit trace:{D}/empty.jsonl"),
          refuse("acceptance fit", "acceptance fit measured", "profile"),
          refuse("plot", "plot bogus --out {D}/out/x.png"),
          refuse("plot", "plot speedup --hardware h100-sxm --acceptance iid:0.6 --out {D}/out/x.txt"),
          refuse("plot", "plot speedup --hardware h100-sxm --acceptance iid:0.6 --out {D}/image.png/x.png"),
          refuse("plot", "plot acceptance --trace {D}/missing.jsonl --out {D}/out/a.png"),
          refuse("plot", "plot acceptance --out {D}/out/a.png"),
          refuse("plot", "plot drafts --hardware h100-sxm --compare eagle3 --out {D}/out/d.png", "DRAFT=ACCEPTANCE"),
          refuse("plot", "plot drafts --hardware h100-sxm --compare eagle3=iid:2 --out {D}/out/d.png"),
          refuse("plot", "plot speedup --hardware h100-sxm --acceptance iid:0.6"),
          refuse("export", "export --out {D}/out/pair --format bogus"),
          refuse("export", "export --out {D}/image.png"),
          refuse("validate", "validate --engine transformers --target {D}/noconfig --draft {D}/noconfig "
                             "--profile {D}/missing.json"),
          refuse("validate", "validate --profile {D}/trunc.json --quick"),
          refuse("validate", "validate --serving --quick --rate 0 --profile {D}/missing.json"),
          refuse("exactness", "exactness --samples 0"),
          refuse("exactness", "exactness --draft bogus"),
          refuse("cli", "predcit --alpha 0.8"), refuse("cli", "predict --alpah 0.8")]
    # -- a hardware file of one's own (#68, docs/hardware.md) -------------------------------------------------------
    for name, frag in (("hw_zero.toml", "mem_bw_GB_per_s = 0"), ("hw_neg.toml", "mem_GB = -24"),
                       ("hw_nan.toml", "peak_TFLOP_per_s.bf16 = nan"), ("hw_absurd.toml", "out of range"),
                       ("hw_typo.toml", "not a hardware field"), ("hw_lacks.toml", "mem_GB is missing"),
                       ("hw_eff.toml", "bw_efficiency = 80"), ("trunc.json", "not a TOML file"),
                       ("missing.toml", "no such hardware file")):
        c.append(refuse("hardware file", f"predict --hardware {{D}}/{name} --acceptance iid:0.7 --batch 1,8", frag))
    c += [refuse("hardware file", "sweep {D}/sw_hwfile.toml", "hw_zero.toml"),
          refuse("hardware file", "hardware show h100", "h100-sxm"),
          refuse("hardware file", "hardware show {D}/hw_typo.toml", "not a hardware field"),
          ok("hardware file", "predict --hardware {D}/hw_ok.toml --acceptance iid:0.7 --batch 1,8 --k 0..2",
             "are assumed"),
          ok("hardware file", "hardware show rtx-4090", "mem_bw_GB_per_s = 1008")]
    return c


def write_files(d: Path) -> None:
    """The bad files the cases name."""
    def put(name: str, text: str | bytes) -> None:
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text if isinstance(text, bytes) else text.encode())

    def cfg(name: str, **change: object) -> None:
        base = dict(LLAMA_CFG if "model_type" not in change or change["model_type"] == "llama" else QWEN_MOE)
        base.update(change)
        put(f"{name}/config.json", json.dumps({k: v for k, v in base.items() if v is not None}))

    (d / "out").mkdir(parents=True, exist_ok=True)
    (d / "noconfig").mkdir(parents=True, exist_ok=True)
    put("empty.json", "")
    put("empty.jsonl", "")
    put("empty.csv", "")
    put("empty.toml", "")
    put("empty.txt", "")
    put("trunc.json", '{"hidden_size": 4096, "num')
    put("array.json", "[1, 2]")
    put("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(40))
    put("garbage.txt", "this is not a Prometheus scrape\n")
    put("fit_bad.json", '{"x": 1}')
    put("profile_fields.json", '{"device": {}, "fit": {}}')
    put("profile.toml", 'device = "cpu"\n')
    put("lacks/config.json", '{"hidden_size": 64}')
    put("head_lacks/config.json", '{"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096}')
    cfg("unk", model_type="mamba", architectures=["MambaForCausalLM"])
    cfg("moe0", model_type="qwen3_moe", num_experts=0)
    cfg("moefam", model_type="qwen3_moe", num_experts=None, num_experts_per_tok=None)
    cfg("topk", model_type="qwen3_moe", num_experts=4)
    cfg("strlayers", num_hidden_layers="abc")
    cfg("neglayers", num_hidden_layers=-2)
    cfg("heads", num_attention_heads=32, num_key_value_heads=5, hidden_size=4096)
    put("nanwidth/config.json", json.dumps({**LLAMA_CFG, "hidden_size": float("nan")}))
    cfg("gemma", model_type="gemma2", architectures=["Gemma2ForCausalLM"], hidden_size=2304,
        num_attention_heads=8, num_key_value_heads=4, intermediate_size=9216, vocab_size=256000,
        num_hidden_layers=26, head_dim=256)
    put("w4096/qwen3-30b-a3b/config.json", json.dumps({**QWEN_MOE, "hidden_size": 4096}))
    cfg("hf_noweights")
    put("trace_fields.jsonl", '{"prompt_len": 5}\n')
    put("trace_neg.jsonl", '{"id": "1", "prompt_len": 5, "generated_len": 3, "eagle": [1, -2, 1]}\n')
    put("steps.txt", "batch,new_tokens,context,step_ms\n1,1,100,7\n")
    rows = "".join(f"{b},1,512,{6 + 0.05 * b}\n" for b in (1, 2, 4, 8, 16, 32, 64))
    head = "batch,new_tokens,context,step_ms\n"
    put("steps_ok.csv", head + rows)
    put("steps_header.csv", head)
    put("steps_badheader.csv", "batch,tokens,ctx,ms\n1,1,1,1\n")
    put("steps_nan.csv", head + rows + "128,1,512,nan\n")
    put("steps_11d.csv", head + "1,1,100,950400000\n" + rows)
    put("steps_neg.csv", head + rows + "128,1,512,-4\n")
    put("steps_fast.csv", head + rows + "128,1,512,0.01\n")
    put("steps_phase.csv", "batch,new_tokens,context,step_ms,phase\n1,1,5,3,warmup\n")
    put("steps_fields.csv", head + "1,1,5\n")
    put("steps_few.csv", head + "1,1,100,7\n2,1,100,7.1\n")
    lat = {"avg_latency": 1.0, "percentiles": {"50": 1.0}}
    put("l1.json", json.dumps(lat))
    put("l2.json", json.dumps({"avg_latency": 1.9, "percentiles": {"50": 1.9}}))
    put("l0.json", json.dumps({"avg_latency": 0.5, "percentiles": {"50": 0.5}}))
    put("wrong.json", json.dumps({"hello": 1}))

    def run(file: str, out: int, extra: str = "", batch: int = 1) -> str:
        return f'[[run]]\nfile = "{file}"\nbatch = {batch}\ninput_len = 512\noutput_len = {out}\n{extra}'

    spec = 'speculative_config = {method = "draft_model", num_speculative_tokens = 3}\n'
    put("m_nottoml.toml", "[[run]\nfile = \n")
    put("m_unknown.toml", run("l1.json", 128, "warmup = 3\n") + run("l2.json", 256))
    put("m_topkey.toml", "title = 'mine'\n" + run("l1.json", 128) + run("l2.json", 256))
    put("m_dup.toml", run("l1.json", 128) + run("l1.json", 128) + run("l2.json", 256))
    put("m_missingfile.toml", run("nothere.json", 128) + run("l2.json", 256))
    put("m_wrongjson.toml", run("wrong.json", 128) + run("l2.json", 256))
    put("m_spec_nolen.toml", run("l1.json", 128, spec) + run("l2.json", 256, spec))
    eagle = 'speculative_config = {method = "eagle3", num_speculative_tokens = 3}\nmean_acceptance_length = 2\n'
    put("m_spec_eagle.toml", run("l1.json", 128, eagle) + run("l2.json", 256, eagle))
    put("m_one.toml", run("l1.json", 128))
    put("m_negbatch.toml", run("l1.json", 128, batch=-1) + run("l2.json", 256, batch=-1))
    put("m_shrinks.toml", run("l1.json", 128) + run("l0.json", 256))
    put("sg_nokeys.jsonl", json.dumps({"batch_size": 1, "input_len": 8, "output_len": 4}) + "\n")
    put("sg_notjson.jsonl", "batch_size=1\n")
    put("lb_bad.json", json.dumps([{"model_type": "x"}]))
    sweep = ('hardware = ["h100-sxm"]\npairs = [["llama-3.1-8b", "llama-3.2-1b"]]\npolicies = ["off"]\n'
             'rates = [5]\nacceptance = "iid:0.7"\n')
    put("sw_unknown.toml", sweep + "colour = 'blue'\n")
    put("sw_badhw.toml", sweep.replace('"h100-sxm"', '"h1000"'))
    put("sw_badrates.toml", sweep.replace("rates = [5]", "rates = [0, -5]"))
    put("sw_negreq.toml", sweep + "[serving]\nrequests = -10\n")
    put("sw_types.toml", sweep.replace('hardware = ["h100-sxm"]', "hardware = 5"))
    put("sw_nanrate.toml", sweep.replace("rates = [5]", "rates = [nan]"))
    put("sw_nanslo.toml", sweep + "[serving]\nslo_tpot_ms = nan\n")
    put("sw_infreq.toml", sweep + "[serving]\nrequests = inf\n")
    nan = 'speculative_config = {method = "draft_model", num_speculative_tokens = 3}\nmean_acceptance_length = nan\n'
    put("m_nanlen.toml", run("l1.json", 128, nan) + run("l2.json", 256, nan))
    put("steps_inf.csv", head + rows + "128,1,512,inf\n")
    put("infheads/config.json", json.dumps(LLAMA_CFG).replace('"num_attention_heads": 4',
                                                            '"num_attention_heads": 1e999'))
    put("arr_nocol.csv", "when,prompt_tokens,output_tokens\n0,5,5\n")
    put("arr_neg.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,5\n1,-5,5\n")
    put("arr_zero.csv", "prompt_tokens,output_tokens\n5,0\n")
    put("sw_ok.toml", sweep)
    bench = ROOT / "scenarios/samples/bench"
    setup = '[setup]\nhardware = "h100-sxm"\ntarget = "llama-3.1-8b"\ndraft = "llama-3.2-1b"\n'

    def brun(file: str, extra: str = "") -> str:
        return f'[[run]]\nfile = "{bench / file}"\n{extra}'

    plain = brun("vllm-plain-rate4.json", "fit = true\n")
    prom = f'metrics = "{bench / "vllm-spec-rate12.prom"}"\n'
    put("mb_k7.toml", setup + plain + brun("vllm-spec-rate12.json", "k = 7\n" + prom))
    put("mb_twice.toml", setup + plain + brun("vllm-plain-rate12.json", "k = 3\n" + prom)
        + brun("vllm-spec-rate12.json", "k = 3\n" + prom))
    put("mb_nok.toml", setup + plain + brun("vllm-spec-rate12.json", prom))
    put("mb_plainmetrics.toml", setup + plain + brun("vllm-spec-rate12.json", "speculative = false\n" + prom))
    llama = f'metrics = "{bench / "guidellm-llama-spec-after.prom"}"\n'
    before = f'metrics_before = "{bench / "guidellm-llama-spec-before.prom"}"\n'
    put("mb_llamak3.toml", setup + brun("guidellm-llama-spec.json", "k = 3\nfit = true\n" + llama + before))
    put("mb_allruns.toml", setup + brun("guidellm-llama-spec.json", "k = 4\nfit = true\n" + llama))
    put("mb_nofit.toml", setup + brun("vllm-plain-rate4.json", "rate = 5\n"))
    put("mb_model.toml", setup.replace("llama-3.1-8b", "qwen3-8b").replace("llama-3.2-1b", "qwen3-0.6b") + plain
        + brun("vllm-plain-rate24.json"))
    gpu = ('name = "My GPU"\nmem_bw_GB_per_s = 936\npeak_TFLOP_per_s = { bf16 = 142 }\nmem_GB = 24\n'
           'source = "a datasheet"\n')
    put("hw_ok.toml", gpu)
    put("hw_zero.toml", gpu.replace("= 936", "= 0"))
    put("hw_neg.toml", gpu.replace("= 24", "= -24"))
    put("hw_nan.toml", gpu.replace("= 142", "= nan"))
    put("hw_absurd.toml", gpu.replace("= 936", "= 1e9"))  # 1e6 TB/s
    put("hw_typo.toml", gpu + "bw_effciency = 0.8\n")
    put("hw_lacks.toml", gpu.replace("mem_GB = 24\n", ""))
    put("hw_eff.toml", gpu + "bw_efficiency = 80\n")  # a percentage for a fraction
    put("sw_hwfile.toml", 'hardware = ["hw_zero.toml"]\npairs = [["llama-3.1-8b", "llama-3.2-1b"]]\n'
        'acceptance = "iid:0.7"\npolicies = ["off"]\nrates = [1]\n')


class Slow(Exception):
    pass


def run_case(case: Case, d: Path, timeout_s: int) -> tuple[str, str]:
    """(verdict, detail): ok, traceback, nonsense-exit-0, not-one-line, no-advice, wrong-exit, slow."""
    from click.testing import CliRunner

    from specsim import cli

    args = shlex.split(case.command.replace("{D}", str(d)))

    def alarm(*_: object) -> None:
        raise Slow

    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout_s)
    try:
        r = CliRunner().invoke(cli, args, prog_name="specsim", env={"XDG_CACHE_HOME": str(d / "cache")})
    except Slow:
        return "slow", f"ran past {timeout_s} s"
    finally:
        signal.alarm(0)
    out = r.output.strip()
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        if isinstance(r.exception, Slow):
            return "slow", f"ran past {timeout_s} s"
        first = str(r.exception).splitlines()[0][:160] if str(r.exception) else ""
        return "traceback", f"{type(r.exception).__name__}: {first}"
    if "Traceback" in out:
        return "traceback", out.splitlines()[-1][:160]
    if case.expect == "ok":
        if r.exit_code != 0:
            return "wrong-exit", f"exit {r.exit_code}: {out.splitlines()[-1][:160] if out else ''}"
        if NONSENSE.search(r.stdout):
            return "nonsense-exit-0", "prints nan/inf"
        if case.fragment and case.fragment not in out:
            return "wrong-answer", f"{case.fragment!r} not in what it prints"
        return "ok", ""
    if r.exit_code == 0:
        return "nonsense-exit-0", (out.splitlines()[-1][:160] if out else "(nothing printed)")
    lines = out.splitlines()
    if r.exit_code != 2 or len(lines) != 1 or not lines[0].startswith("specsim: error:"):
        return "not-one-line", f"exit {r.exit_code}, {len(lines)} lines: {' | '.join(lines)[:200]}"
    if case.fragment and case.fragment not in lines[0]:
        return "wrong-answer", f"{case.fragment!r} not in: {lines[0][:200]}"
    if not ACTIONABLE.search(lines[0][len("specsim: error:"):]):
        return "no-advice", lines[0][:200]
    return "ok", ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", default="", help="only the cases whose category or command holds this")
    ap.add_argument("--list", action="store_true", help="list the cases")
    ap.add_argument("--timeout-s", type=int, default=60, help="the longest one case may run")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case, not only the failures")
    a = ap.parse_args()
    chosen = [c for c in cases() if a.k in c.category or a.k in c.command]
    if a.list:
        for c in chosen:
            print(f"{c.category:18s} {c.expect:6s} specsim {c.command}")
        print(f"{len(chosen)} cases")
        return 0
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specsim-bad-") as tmp:
        d = Path(tmp)
        write_files(d)
        os.environ["XDG_CACHE_HOME"] = str(d / "cache")
        for c in chosen:
            verdict, detail = run_case(c, d, a.timeout_s)
            counts[verdict] = counts.get(verdict, 0) + 1
            if verdict != "ok" or a.verbose:
                print(f"{verdict:16s} [{c.category}] specsim {c.command}" + (f"\n{'':16s} {detail}" if detail else ""),
                      flush=True)
    bad = {k: v for k, v in counts.items() if k != "ok"}
    print(f"{len(chosen)} bad inputs in {time.perf_counter() - t0:.0f} s: {counts.get('ok', 0)} answered as they "
          f"should; tracebacks {counts.get('traceback', 0)}, nonsense answered with exit 0 "
          f"{counts.get('nonsense-exit-0', 0)}, refusals not one line {counts.get('not-one-line', 0)}, refusals "
          f"without advice {counts.get('no-advice', 0)}, other answers {counts.get('wrong-answer', 0)}, wrong exit "
          f"{counts.get('wrong-exit', 0)}, slow {counts.get('slow', 0)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
