"""The house's shape (DESIGN.md, The shape of it), read from the source with `ast`: imports point down the layers,
no two modules import each other in a circle, the heavy libraries stay in their rooms, and every module says in
its opening docstring what it holds."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Lower first: a package may import itself and those before it, never one after it. `plots` sits beside the stack
# and imports only the simulator's result types.
LAYERS = ["simulator", "scenarios", "engine", "calibrate", "cli"]
ALLOWED = {p: set(LAYERS[: i + 1]) for i, p in enumerate(LAYERS)}
ALLOWED["plots"] = {"plots", "simulator"}
ALLOWED["cli"] |= {"plots"}
PACKAGES = set(ALLOWED)
HEAVY = {"torch": {"engine", "calibrate"}, "pynvml": {"engine", "calibrate", "scenarios"},
         "matplotlib": {"plots"}}
# scenarios/host.py reads GPU names through pynvml (lazily, never torch) so that `predict` can find this
# machine's latest profile without importing torch.


def modules() -> Iterator[tuple[str, Path]]:
    for pkg in sorted(PACKAGES):
        for path in sorted((ROOT / pkg).glob("*.py")):
            name = pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"
            yield name, path
    yield "specsim", ROOT / "specsim.py"


def _nodes(tree: ast.AST, typing_only: bool) -> Iterator[ast.AST]:
    """Every node of `tree`; without the bodies of ``if TYPE_CHECKING:`` unless `typing_only` imports count."""
    for node in ast.iter_child_nodes(tree):
        if (not typing_only and isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            continue
        yield node
        yield from _nodes(node, typing_only)


def imports(name: str, path: Path, typing_only: bool = True) -> set[str]:
    """Every module `path` imports (at any depth of the file: imports inside functions count), absolute; those
    only a type checker sees (``if TYPE_CHECKING:``) unless `typing_only` is False."""
    pkg = name.split(".")[0]
    out: set[str] = set()
    for node in _nodes(ast.parse(path.read_text()), typing_only):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = (pkg + ("." + node.module if node.module else "")) if node.level else node.module
            assert base is not None
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


GRAPH = {name: imports(name, path) for name, path in modules()}
RUNTIME = {name: imports(name, path, typing_only=False) for name, path in modules()}


def test_imports_point_down_the_layers():
    up = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() if m != "specsim"
                for d in deps if d.split(".")[0] in PACKAGES and d.split(".")[0] not in ALLOWED[m.split(".")[0]])
    assert up == []


def test_no_module_imports_itself_through_others():
    known = set(GRAPH)
    edges = {m: {d for d in deps if d in known and d != m and d != m.split(".")[0]} for m, deps in GRAPH.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                cycles.append(path[path.index(d):] + [d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert cycles == []


@pytest.mark.parametrize("library", sorted(HEAVY))
def test_heavy_libraries_stay_in_their_rooms(library: str):
    rooms = HEAVY[library] | {"specsim"} if library == "matplotlib" else HEAVY[library]
    strays = sorted(m for m, deps in RUNTIME.items() if m.split(".")[0] not in rooms and m != "specsim"
                    and any(d.split(".")[0] == library for d in deps))
    assert strays == []


def test_the_cli_starts_without_torch():
    """`specsim predict` starts fast and works without torch: importing the CLI and resolving a preset loads none of
    torch, the engine or matplotlib (commands import them when they run)."""
    code = ("import sys, specsim; from scenarios.setup import resolve_setup; "
            "resolve_setup('h100-sxm', None, 'llama-3.1-8b', 'llama-3.2-1b', 'bf16', 'iid:0.7'); "
            "print(sorted(m for m in ('torch', 'engine', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_module_says_what_it_holds():
    silent = sorted(name for name, path in modules() if not ast.get_docstring(ast.parse(path.read_text())))
    assert silent == []


def test_a_module_past_500_lines_says_it_is_one_concept():
    """A long module is allowed where it is one concept that reads better whole; its opening docstring says so."""
    long = {name: len(path.read_text().splitlines()) for name, path in modules()
            if len(path.read_text().splitlines()) > 500}
    unsaid = sorted(name for name, path in modules() if name in long
                    and "One concept past 500 lines:" not in (ast.get_docstring(ast.parse(path.read_text())) or ""))
    assert unsaid == [], long


def test_module_names_are_unique_but_for_a_concept_and_its_picture():
    """Two modules share a name only where `plots` draws the simulator's concept of that name."""
    seen: dict[str, list[str]] = {}
    for name, _ in modules():
        if "." in name:
            seen.setdefault(name.split(".", 1)[1], []).append(name.split(".")[0])
    shared = {stem: pkgs for stem, pkgs in seen.items() if len(pkgs) > 1}
    assert all(sorted(pkgs) == ["plots", "simulator"] for pkgs in shared.values()), shared
