"""The bodies of the commands whose options `specsim.py` declares, each calling one library function and printing
its result: predict, validate (static and served), sweep, policy."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.options import ServedOptions, SetupOptions
from cli.output import check_figures, check_out, echo_or_write, echo_result, note, progress, say, write_figures
from simulator import SpecsimError

if TYPE_CHECKING:
    from scenarios.profile import Profile


def draft_lengths(ks: list[int], draft: Any) -> list[int]:
    """The draft lengths to price with `draft`: the default range cut to what it can fill in a step (Medusa: one
    position per head), saying so; lengths the user gave are left for the sweep to refuse, naming the limit."""
    from click.core import ParameterSource

    from simulator.drafts import as_draft

    d = as_draft(draft)
    limit = d.max_depth if d is not None else None
    ctx = click.get_current_context(silent=True)
    if limit is None or max(ks) <= limit or ctx is None or ctx.get_parameter_source("ks") != ParameterSource.DEFAULT:
        return ks
    kept = [k for k in ks if k <= limit]
    say(f"--k {kept[0]}..{kept[-1]}: {d.name} fills at most {limit} positions a step (one per head)")
    return kept


def mechanisms_of(setup: SetupOptions, result: Any) -> list[dict[str, Any]]:
    """Per best row that speculates, what the engine preset's mechanisms decided there (`EnginePreset.mechanisms`);
    empty without a preset (a profile priced by its own engine)."""
    engine = setup.engine_name if setup.engine or not setup.profile_path else None
    if engine is None and not setup.hardware:
        return []
    from scenarios import load_engine_preset

    preset = load_engine_preset(engine or "vllm")
    return [{"context": b.context, "batch": b.batch, "k": b.k, "mechanisms": preset.mechanisms(b.batch, b.k or 0)}
            for b in result.best if b.k]


def mechanisms_footnote(decided: list[dict[str, Any]]) -> str:
    """The text table's footnote: each mechanism with the batches (of the best rows that speculate) it decided."""
    where: dict[str, list[int]] = {}
    for row in decided:
        for m in row["mechanisms"]:
            where.setdefault(m, []).append(row["batch"])
    if not where:
        return ""
    lines = [f"    {m} (batch {min(bs)}{'' if min(bs) == max(bs) else f'-{max(bs)}'})" for m, bs in where.items()]
    return "  engine mechanisms where the best row speculates:\n" + "\n".join(lines) + "\n"


def run_predict(alpha: float | None, setup: SetupOptions, ks: list[int], cost_ratio: float | None,
                trees: tuple[str, ...], tree_budget: int | None, batches: list[int], contexts: list[int],
                as_json: bool, as_csv: bool, plot_path: Path | None) -> None:
    """`specsim predict`: formula mode (--c) or a sweep of a preset or profile, printed as text, JSON or CSV."""
    from dataclasses import replace

    from simulator import __version__
    from simulator.report import format_formula_table, format_hardware_table
    from simulator.sweep import candidates_from, formula_sweep, sweep

    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")
    if alpha is not None and setup.acceptance_spec:
        raise click.UsageError("give --alpha or --acceptance, not both")
    acceptance_spec = f"iid:{alpha}" if alpha is not None else setup.acceptance_spec
    plot = check_figures([plot_path])[0] if plot_path else None
    if cost_ratio is not None:
        if setup.hardware or setup.profile_path:
            raise click.UsageError("--c is formula mode; drop it to use --hardware or --profile")
        if not acceptance_spec:
            raise click.UsageError("say how often drafts are accepted: --alpha 0.7 or --acceptance SPEC")
        if plot:
            raise click.UsageError("--plot draws a sweep over batch sizes: use it with --hardware or a profile")
        from scenarios.acceptance_specs import acceptance_from_spec

        acceptance = acceptance_from_spec(acceptance_spec)
        result = formula_sweep(acceptance, candidates_from(ks, trees, tree_budget, acceptance), cost_ratio)
        meta = {"specsim_version": __version__, "acceptance": acceptance.spec, "mode": "formula", "c": cost_ratio}
        text = format_formula_table(result, cost_ratio)
    else:
        s = replace(setup, acceptance_spec=acceptance_spec).resolve()
        if alpha is not None and not setup.hardware and not setup.profile_path:
            say(f"--alpha without --c: pricing the passes of {s.target.name} drafted by {s.draft.name} from "
                f"{s.where}; give --c RATIO for the closed form")
        result = sweep(s.cost, s.target, s.draft, s.acceptance, batches,
                       candidates_from(draft_lengths(ks, s.draft), trees, tree_budget, s.acceptance), contexts)
        meta, text = s.meta(), s.heading + "\n" + format_hardware_table(result, "--json/--csv carry every row",
                                                                        s.resolution if s.profile else 0.0)
        decided = mechanisms_of(setup, result)
        if decided:
            meta["mechanisms"] = decided
            text += mechanisms_footnote(decided)
        if plot:
            from plots.speedup import speedup_vs_batch

            write_figures({plot: speedup_vs_batch(result, title=s.heading)})
    echo_result(result, meta, text, as_json, as_csv)


def run_validate(profile_path: Path | None, batches: list[int] | None, ks: list[int] | None,
                 trees: tuple[str, ...], repeats: int | None, new_tokens: int | None, quick: bool, as_json: bool,
                 plot_dir: Path | None, seed: int, target: str | None, draft: str | None,
                 acceptance_spec: str | None, served: ServedOptions, drafter: str = "model") -> None:
    """`specsim validate`: the built-in pair on held-out prompts, or (`--acceptance`) the profile's own shapes with
    random weights and the acceptance replayed, or (`--serving`) a served stream against its simulation; the
    report as text or JSON, and the plots."""
    import json

    from calibrate.validate import check_validatable, run_shape_validation, run_validation
    from engine.device import match_threads
    from scenarios.setup import resolve_profile
    from simulator.trees import parse_branching

    if served.on:
        static = [name for name, v in (("--batch", batches), ("--k", ks), ("--repeats", repeats),
                                       ("--tokens", new_tokens)) if v]
        if static:
            raise click.UsageError(f"{', '.join(static)} size a static validation; a served stream takes --rate, "
                                   "--policy, --requests, --prompt-tokens, --output-tokens, --max-batch")
        return run_served_validation(profile_path, quick, as_json, plot_dir, seed, acceptance_spec, target, draft,
                                     served)
    if served.given:
        raise click.UsageError(f"{', '.join(served.given)} describe a served stream: add --serving")
    if drafter != "model" and acceptance_spec:
        raise click.UsageError("--drafter heads validates the built-in target's trained heads; --acceptance replays "
                               "acceptance at a profile's own shapes with its draft model: give one of them")
    plots = check_figures([plot_dir / f"validation-{n}.png" for n in ("scatter", "batch")]) if plot_dir else []
    shapes = [parse_branching(t) for t in trees if t.strip()]
    if (target or draft) and not acceptance_spec:
        raise click.UsageError("--target/--draft name the shapes of a validation with --acceptance SPEC")
    profile, notes = resolve_profile(profile_path)
    notes = [*notes, *filter(None, [match_threads(profile)])]
    if acceptance_spec:
        check_shapes(profile, target, draft)
        if shapes:
            raise click.UsageError("a validation with --acceptance replays chains: add --tree '' (trees need the "
                                   "built-in pair's real acceptance)")
        from scenarios.setup import resolve_acceptance

        note(*notes)
        report, curves = run_shape_validation(profile, resolve_acceptance(acceptance_spec, profile), batches, ks,
                                              repeats, new_tokens, served.fixed_prompt_tokens, seed, progress, quick)
    else:
        check_validatable(profile)
        note(*notes)
        report, curves = run_validation(profile, batches, ks, shapes, repeats, new_tokens, seed, progress, quick,
                                        drafter)
    if plots:
        from plots.validation import predicted_vs_measured, speedup_vs_batch

        write_figures({plots[0]: predicted_vs_measured(report), plots[1]: speedup_vs_batch(report, curves)})
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1, default=float))
    else:
        from calibrate.validate_report import format_report

        click.echo(format_report(report))


def run_served_validation(profile_path: Path | None, quick: bool, as_json: bool, plot_dir: Path | None, seed: int,
                          acceptance_spec: str | None, target: str | None, draft: str | None,
                          served: ServedOptions) -> None:
    """`specsim validate --serving`: everything checked first (profile, shapes, policies, workload, plot path), then
    the served stream and its simulation at every rate and policy, the report and TPOT against rate."""
    import json

    from calibrate.served_validation import run_serving_validation
    from calibrate.served_validation_report import format_serving_validation
    from engine.device import match_threads
    from scenarios.setup import resolve_profile

    plots = check_figures([plot_dir / "validation-serving.png"]) if plot_dir else []
    profile, notes = resolve_profile(profile_path)
    check_shapes(profile, target, draft)
    note(*notes, *filter(None, [match_threads(profile)]))
    report = run_serving_validation(profile, served.serving(quick, seed), served.rates, acceptance_spec,
                                    served.time_cap(quick), seed, progress, quick, served.passes or 2)
    if plots:
        from plots.serving import served_vs_predicted

        write_figures({plots[0]: served_vs_predicted(report)})
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1, default=float))
    else:
        click.echo(format_serving_validation(report), nl=False)


def check_shapes(profile: Profile, target: str | None, draft: str | None) -> None:
    """The profile was calibrated at the shapes asked for (by name), or a one-line error saying how to get one."""
    from scenarios import load_model

    for want, have in ((target, profile.target), (draft, profile.draft)):
        if want and load_model(want, have.dtype).name != have.name:
            raise SpecsimError(f"profile {profile.path} was calibrated at {profile.target.name} / "
                               f"{profile.draft.name}; calibrate these shapes first: specsim calibrate --target "
                               f"{target or profile.target.name} --draft {draft or profile.draft.name} "
                               "(then --profile that file)")


def run_sweep(spec_path: Path, executor_text: str, out_path: Path | None, plot_dir: Path | None,
              engine: str | None = None) -> None:
    """`specsim sweep`: the spec, the executor and every output checked first; then the grid simulated, the table
    written (CSV or JSON by its suffix; CSV on stdout without --out), the capacity per configuration and policy
    said, and the figures drawn: capacity.png and one tpot-N.png per configuration."""
    import re

    from scenarios.files import check_output
    from scenarios.fleet import capacity, load_sweep_spec, run_sweep, table_text
    from simulator.executors import parse_executor

    spec = load_sweep_spec(spec_path)
    if engine:  # --engine: every configuration priced with this engine preset (refused in one line if unknown)
        from dataclasses import replace

        from scenarios import load_engine_preset

        spec = replace(spec, engine=load_engine_preset(engine).name)
    executor = parse_executor(executor_text)
    fmt = "csv"
    if out_path is not None:
        check_output(out_path, "sweep table", (".csv", ".json"))
        fmt = out_path.suffix.lower().lstrip(".")
    grid = [(h, t, d, tp) for h in spec.hardware for t, d, *_ in spec.pairs for tp in spec.tp]
    names = []
    if plot_dir is not None:
        names = check_figures([plot_dir / "capacity.png"] + [
            plot_dir / f"tpot-{i + 1}-{re.sub(r'[^a-z0-9.]+', '-', f'{h}-{t}-tp{tp}'.lower())}.png"
            for i, (h, t, _, tp) in enumerate(grid)])
    configs, rows, metrics = run_sweep(spec, executor, progress)
    caps = capacity(rows)
    slo = configs[0].scenario.slo
    say(f"{spec.simulations} simulations ({executor.label}); highest rate of the grid meeting "
        f"{slo.label if slo.tpot_s or slo.ttft_s else 'no SLO (sustained only)'} for 90 % of requests:",
        *(f"  {c['hardware']:<14} {c['target']}/{c['draft']} TP{c['tp']}  {c['policy']:<12} "
          f"{c['max_rate_per_s']:g} req/s" for c in caps))
    figures = {}
    if names:
        from plots.capacity import capacity_bars
        from plots.serving import tpot_vs_rate

        figures[names[0]] = capacity_bars(caps, f"{spec.source}: {spec.serving.n_requests} requests per simulation, "
                                                f"acceptance {spec.acceptance}")
        for path, c in zip(names[1:], configs):
            figures[path] = tpot_vs_rate([m for m, r in zip(metrics, rows) if (r["hardware"], r["target"], r["tp"])
                                          == (c.hardware, c.target, c.tp)], c.scenario.slo, caption=c.caption)
    echo_or_write(out_path, table_text(rows, fmt), "sweep table")
    if figures:
        write_figures(figures)


def llama_server_flags(draft, k: int, slots: int) -> tuple[str, str]:  # noqa: ANN001 - simulator.drafts.Draft
    """llama-server's speculative flags (b10450's names: --spec-type, --spec-draft-n-max/-n-min/-p-min; before
    them --draft-max, --draft-min, --draft-p-min) for `slots` streams drafting `k` tokens, and a note. llama-server
    runs one draft length for its life, drafted slot by slot (a draft context a slot)."""
    if k == 0:
        return f"llama-server -m TARGET.gguf -np {slots}", "speculation does not pay here: no --spec-type"
    depth = [f"--spec-draft-n-max {k}", "--spec-draft-n-min 0", "--spec-draft-p-min 0"]
    if draft.kind == "mtp":
        flags, note = ["--spec-type draft-mtp", *depth], "MTP: the target's GGUF carries its nextn layers (PR #22673)"
    elif draft.kind == "model":
        flags = ["-md DRAFT.gguf", "-ngld 99", "--spec-type draft-simple", *depth]
        note = "a draft model on the same GPU (-ngld 99)"
    elif draft.kind == "eagle3":
        flags, note = ["-md EAGLE3.gguf", "--spec-type draft-eagle3", *depth], "an EAGLE-3 head converted to GGUF"
    elif draft.kind == "ngram":
        flags, note = ["--spec-type ngram-simple", *depth], "n-gram lookup in the context, nothing on the GPU"
    else:
        return "", f"llama-server has no speculative type for a {draft.kind} draft"
    return " ".join(["llama-server -m TARGET.gguf -ngl 99", f"-np {slots}", *flags]), note


def run_policy(setup: SetupOptions, fmt: str, batches: list[int], ks: list[int], contexts: list[int],
               tolerance_pct: float | None, out_path: Path | None) -> None:
    """`specsim policy`: the table, with a note where a quick profile priced no tax or k = 0 is a memory limit."""
    import json

    from simulator.serving_report import check_contexts, policy_tables

    check_out(out_path)
    check_contexts(fmt, contexts)
    s = setup.resolve()
    if s.profile is not None and s.engine is None and any("tax" in m for m in s.profile.not_measured):
        say(f"profile {s.profile.path} did not measure the engine's tax on speculation (a quick calibration): "
                "the table prices none; run specsim calibrate without --quick to measure it")
    tolerance = s.resolution if tolerance_pct is None else tolerance_pct / 100
    ranges, record = policy_tables(s.cost, s.target, s.draft, s.acceptance, batches, draft_lengths(ks, s.draft),
                                   contexts, s.caption, tolerance)
    if fmt == "vllm-config":
        from simulator.serving_report import vllm_speculative_config

        config = vllm_speculative_config(s.draft, ranges)
        if str(config.get("model", "")).startswith("<"):
            say(f"the config's \"model\" is a placeholder (specsim knows no published {s.draft.kind} draft for "
                f"{s.target.name}): put your draft's repository or folder there")
        text = json.dumps(config, indent=1)
    elif fmt == "llama-server":  # one draft length a server: the table's k at 1, 2 and 4 streams
        lines = []
        for slots in (1, 2, 4):
            k = next((hi_k for lo, hi, hi_k in ranges if lo <= slots <= hi), 0)
            flags, note = llama_server_flags(s.draft, k, slots)
            said = f"# {slots} stream{'s' if slots > 1 else ''}: k = {k} ({note})"
            lines.append(f"{said}\n{flags}" if flags else f"# {note}")
        text = "\n".join(lines)
    else:
        text = json.dumps(ranges) if fmt == "vllm" else json.dumps(record, indent=1)
    for table in record.get("by_context", [record]):
        if table.get("fits_up_to_batch"):
            say(f"context {table['context']}: from batch {table['fits_up_to_batch'] + 1} on nothing fits in memory "
                "(the target's weights and KV cache): the table ends there")
        past = [r for r in table["ranges"] if set(r.get("extrapolated_in", ())) - {"k"}]
        if past and table.get("measured_range"):
            m = table["measured_range"]
            bench = "benchmark" in m.get("what", "")  # a profile fitted to a serving benchmark's runs
            say(f"context {table['context']}: batch {past[0]['batch_from']}..{past[-1]['batch_to']} lies past "
                f"{m['what'] if bench else 'what the profile measured'} (batches up to {m['batch']}, {m['rows']} "
                f"rows a pass, contexts up to {m['context']}): the table extrapolates its fit there (\"extrapolated\" "
                "in --format json); "
                + ("benchmark a load and lengths that cover it" if bench else
                   "calibrate with --batch and --context covering it"))
        guessed = [r for r in table["ranges"] if "k" in r.get("extrapolated_in", ())]
        if guessed:
            say(f"context {table['context']}: k = {', '.join(sorted({str(r['k']) for r in guessed}))} drafts more "
                "per step than the acceptance's source measured: its model is extrapolated there")
        for r in table["ranges"]:
            if r["k"] == 0 and r["why"].startswith("the draft"):
                say(f"batch {r['batch_from']}..{r['batch_to']} at context {table['context']}: k = 0 because "
                        f"{r['why']} (a memory limit, not speculation that stopped paying)")
    echo_or_write(out_path, text + "\n", "policy")


def plot_drafts(setup: SetupOptions, pairs: tuple[str, ...], batches: list[int], ks: list[int],
                context: int) -> Any:
    """`specsim plot drafts`: each DRAFT=ACCEPTANCE resolved and swept, each one's best speed-up drawn."""
    import re
    from dataclasses import replace

    from plots.speedup import drafts_vs_batch
    from simulator.sweep import chains, sweep

    results = {}
    caption = ""
    for pair in pairs:
        draft, eq, acceptance = pair.partition("=")
        if not eq or not draft.strip() or not acceptance.strip():
            raise click.UsageError(f"--compare {pair!r} is not DRAFT=ACCEPTANCE, e.g. eagle3=iid:0.75")
        s = replace(setup, draft=draft.strip(), acceptance_spec=acceptance.strip()).resolve()
        spec = re.sub(r"[^:=,@]*/", "", s.acceptance.spec if s.acceptance else acceptance)  # file names, not paths
        results[f"{s.draft.name} ({spec})"] = sweep(s.cost, s.target, s.draft, s.acceptance, batches,
                                                     chains(sorted(set(draft_lengths(ks, s.draft)) | {0})), [context])
        caption = f"{s.target.name} on {s.where}"
    return drafts_vs_batch(results, context, caption)


def run_export(out_dir: Path, fmt: str) -> None:
    """`specsim export`: the built-in pair as Hugging Face folders and GGUF files, the output checked first."""
    import json

    from engine.builtin import load_pair
    from engine.export import export_gguf, export_hf, hf_config
    from scenarios.files import atomic_write_text, check_output

    check_output(out_dir / "target" / "config.json", "--out")
    target, draft = load_pair(expanded=True, dtype="fp32", max_seq_len=2048)
    for name, model in (("target", target), ("draft", draft)):
        folder = out_dir / name
        if fmt in ("hf", "both"):
            export_hf(model, folder, f"specsim-{name}")
        else:  # the shapes specsim reads beside the GGUF file
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write_text(folder / "config.json", json.dumps(hf_config(model, f"specsim-{name}"), indent=1))
        if fmt in ("gguf", "both"):
            export_gguf(model, folder / "model.gguf", f"specsim-{name}")
        say(f"specsim-{name} written to {folder}")


def run_calibrate_engine(engine: str, target: str, draft: str, quick: bool, seed: int, out_path: Path | None,
                         command: str, options: dict[str, Any]) -> tuple[Profile, Path]:
    """`specsim calibrate --engine transformers|llama.cpp`: the output and the engine checked first, then that
    engine's own passes timed and fitted."""
    from scenarios.profile import save_profile

    if target == "specsim-target" or draft == "specsim-draft":
        raise click.UsageError(f"--engine {engine} times model folders: --target DIR --draft DIR (write the "
                               "built-in pair as such with: specsim export --out pair/)")
    check_out(out_path)
    if engine == "transformers":
        from calibrate.transformers_engine import hf_profile, require_transformers

        require_transformers()
        profile = hf_profile(target, draft, quick, seed, command, options, progress)
    else:
        from calibrate.llama_cpp import gguf_of, llama_cpp_bin, llama_profile

        llama_cpp_bin("llama-bench")
        gguf_of(target, "target"), gguf_of(draft, "draft")
        profile = llama_profile(target, draft, quick, seed, out_path, command, options, progress)
    return profile, save_profile(profile, out_path)


def run_validate_engine(engine: str, profile_path: Path | None, target: str | None, draft: str | None,
                        ks: list[int] | None, repeats: int | None, new_tokens: int | None, quick: bool,
                        as_json: bool, seed: int, served: ServedOptions, plot_dir: Path | None = None) -> None:
    """`specsim validate --engine transformers|llama.cpp`: that engine's speculative runs against their predictions
    (`--serving --plot DIR`: llama-server's stream against its simulation as DIR/validation-serving.png)."""
    import json

    from engine.device import match_threads
    from scenarios.setup import resolve_profile

    if engine == "transformers" and (served.on or served.given):
        raise click.UsageError("transformers decodes one request at a time: --engine transformers validates static "
                               "runs; a served stream runs through --engine llama.cpp (or specsim's own engine)")
    if not target or not draft or profile_path is None:
        raise click.UsageError(f"--engine {engine} needs --profile (from calibrate --engine {engine}), --target DIR "
                               "and --draft DIR")
    if plot_dir is not None and not (engine == "llama.cpp" and served.on):
        raise click.UsageError(f"--plot draws a served stream: --engine llama.cpp --serving; --engine {engine} "
                               "without --serving reports as text or --json")
    plots = check_figures([plot_dir / "validation-serving.png"]) if plot_dir else []
    profile, _ = resolve_profile(profile_path)
    if engine == "transformers":
        say(*filter(None, [match_threads(profile)]))
    if engine == "llama.cpp" and served.on:
        return run_llama_serving(profile, target, draft, ks, quick, as_json, seed, served, plots)
    if served.given:
        raise click.UsageError(f"{', '.join(served.given)} describe a served stream: add --serving")
    if engine == "llama.cpp":
        from calibrate.llama_cpp import format_llama_validation, llama_cpp_bin, validate_llama_cpp

        llama_cpp_bin("llama-server")
        if not profile.origin.startswith("llama-bench:") or profile.acceptance is None:
            raise SpecsimError("validate --engine llama.cpp needs a profile from specsim calibrate --engine llama.cpp")
        report = validate_llama_cpp(profile, target, draft, ks or ([1, 2, 4] if quick else [1, 2, 3, 4, 6, 8]),
                                    4 if quick else 8, new_tokens or 64, repeats or (2 if quick else 3), progress)
        click.echo(json.dumps(report, indent=1) if as_json else format_llama_validation(report))
        return
    from calibrate.transformers_validation import HFRun, check_profile, default_runs, format_validation, validate_hf

    check_profile(profile)
    runs = default_runs(quick)
    if ks:
        runs = [HFRun("assisted", k) for k in ks] + [r for r in runs if r.kind == "lookup"]
    report = validate_hf(profile, target, draft, runs, 4 if quick else 8, new_tokens or 64,
                         repeats or (2 if quick else 3), seed, progress)
    click.echo(json.dumps(report, indent=1) if as_json else format_validation(report))


def run_llama_serving(profile: Profile, target: str, draft: str, ks: list[int] | None, quick: bool, as_json: bool,
                      seed: int, served: ServedOptions, plots: list[Path] | None = None) -> None:
    """`specsim validate --engine llama.cpp --serving`: a Poisson stream through llama-server, plain and with a
    draft of k, against its simulation."""
    import json

    from calibrate.llama_cpp import llama_cpp_bin
    from calibrate.llama_served import format_llama_serving, validate_llama_serving

    other = [flag for flag, v in (("--policy", served.policy_text), ("--arrivals", served.arrivals),
                                  ("--prompt-tokens", served.prompt_tokens), ("--time-cap-s", served.time_cap_s),
                                  ("--passes", served.passes)) if v is not None]
    if other:
        raise click.UsageError(f"{', '.join(other)}: a llama-server stream takes --rate, --requests, "
                               "--output-tokens, --max-batch (its slots) and --k (one draft length)")
    if ks and len(ks) > 1:
        raise click.UsageError("a llama-server stream compares plain decoding with one draft length: --k K")
    out_text = served.output_tokens or "48"
    if not out_text.isdigit() or int(out_text) < 2:
        raise click.UsageError(f"--output-tokens {out_text!r}: a llama-server stream asks every request for one "
                               "length, a whole number >= 2")
    llama_cpp_bin("llama-server")
    if not profile.origin.startswith("llama-bench:") or profile.acceptance is None:
        raise SpecsimError("validate --engine llama.cpp needs a profile from specsim calibrate --engine llama.cpp")
    report = validate_llama_serving(profile, target, draft, ks[0] if ks else 4, served.max_batch or 4,
                                    served.n_requests or (24 if quick else 48), int(out_text), served.rates, seed,
                                    progress)
    if plots:
        from plots.serving import engine_stream_vs_simulated

        write_figures({plots[0]: engine_stream_vs_simulated(report)})
    click.echo(json.dumps(report, indent=1) if as_json else format_llama_serving(report))
