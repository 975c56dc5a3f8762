"""Whether a draft, a target and an acceptance go together: a pairing that cannot be is refused in one line
(`check_draft`), and what was assumed rather than given is said (`guesses_said`): a config.json read as another
family, a head shaped after a target no published head is known for, a preset's head taken for a config that is
that preset by its fields, an acceptance trace measured on another model."""

from __future__ import annotations

import re
from pathlib import Path

from scenarios.acceptance_specs import split_trace_spec
from scenarios.traces import trace_model
from simulator import SpecsimError
from simulator.acceptance import Acceptance
from simulator.drafts import Draft
from simulator.specs import ModelSpec


def check_draft(draft: Draft, target: ModelSpec, acceptance: Acceptance | None) -> None:
    """The pairing refused in one line: a head of another width; a proposal rate for a draft that always
    proposes; a model-free draft without one."""
    draft.check_target(target)
    if acceptance is None:
        return
    rate = acceptance.proposal_rate(1)
    if draft.on_device and rate < 1.0:
        raise SpecsimError(f"acceptance {acceptance.spec} has a proposal rate ({rate:g}) but {draft.name} is "
                           f"{'an' if draft.kind[0] in 'aeiou' else 'a'} {draft.kind} draft, which proposes on every "
                           "step; @proposed:P is for ngram, suffix and retrieval")
    if not draft.on_device and rate >= 1.0:
        raise SpecsimError(f"a {draft.kind} draft finds nothing to propose on many steps: say how often it "
                           f"proposes, e.g. --acceptance {acceptance.spec}@proposed:0.3, or replay a lookup's trace "
                           "(trace:FILE:ngram)")


def guesses_said(target: ModelSpec, draft: Draft, draft_spec: str | None, acceptance_spec: str | None) -> list[str]:
    """The lines that say what was assumed rather than given: a config.json read as a family it is not, a bare
    ``eagle3`` (``medusa``, ``mtp``) shaped after a target no published head is known for, a preset's head taken for
    a config.json that is that preset by its fields, an acceptance trace measured on another model."""
    from scenarios import READ_AS, preset_of

    notes, model = [], preset_of(target)
    if READ_AS in target.source:
        notes.append(f"target {target.name}: {target.source}")
    bare = (draft_spec or "").strip().lower() in ("eagle3", "medusa", "mtp")
    if bare and not draft.repo and "shaped " in draft.source:
        notes.append(f"no published {draft.kind} draft is known for {target.name} (its fields are "
                     f"{'no preset' if model is None else 'the preset ' + model}'s, and "
                     f"drafts.toml has no {draft.kind} for it): pricing a generic one, {draft.source}")
    if draft.kind in ("eagle3", "medusa", "mtp") and draft.repo and model and model != target.name:
        notes.append(f"target {target.name} is the preset {model} by its fields: its published {draft.kind} draft "
                     f"{draft.repo}")
    for path in re.findall(r"trace:([^@]+)", acceptance_spec or ""):
        measured_on = trace_model(split_trace_spec(path)[0])
        if measured_on and measured_on != model:
            notes.append(f"acceptance trace {Path(split_trace_spec(path)[0]).name} was measured on {measured_on}, not "
                         f"on {target.name}: its acceptance is that model's, assumed here for this one")
    return notes
