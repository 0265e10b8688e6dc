"""The package's import graph: stages do not import each other, and no module cycle exists.

A stage reads what earlier stages left through ``core.records``; only ``pipeline`` (``all``)
knows every stage. The graph is read from the source with ``ast``, imports inside functions
included, so a late import cannot hide a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "intelmac_torch_builder"
# The installed package's parts and the repository folders they come from (pyproject.toml).
FOLDERS = {PACKAGE: REPO / "build_scripts", f"{PACKAGE}.ci": REPO / "ci"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for prefix, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([prefix, *parts])] = path
    return found


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def imports_of(name: str) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its body."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    package = name if _is_package(name) else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {target for target in targets if target in MODULES and target != name}


def test_the_graph_is_read_from_real_modules() -> None:
    # Guards the reader itself: a graph it cannot see would pass every test below.
    assert f"{PACKAGE}.stages.index" in MODULES
    assert f"{PACKAGE}.core.records" in imports_of(f"{PACKAGE}.stages.index")
    assert {f"{PACKAGE}.stages.source", f"{PACKAGE}.stages.index"} <= imports_of(
        f"{PACKAGE}.pipeline"
    )


STAGES = sorted(name for name in MODULES if name.startswith(f"{PACKAGE}.stages."))


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_imports_no_other_stage(stage: str) -> None:
    others = {name for name in imports_of(stage) if name.startswith(f"{PACKAGE}.stages")}
    assert not others, f"{stage} imports {sorted(others)}; read their output via core.records"


def test_only_the_pipeline_and_the_cli_know_the_stages() -> None:
    # The dress rehearsal (make rehearse) is the pipeline's second driver: it runs the stages
    # after the compile on upstream's official wheels, the same code on other input.
    allowed = {f"{PACKAGE}.pipeline", f"{PACKAGE}.cli", f"{PACKAGE}.maint.rehearse", *STAGES}
    users = {
        name
        for name in MODULES
        if name not in allowed
        and any(target.startswith(f"{PACKAGE}.stages") for target in imports_of(name))
    }
    assert not users, f"{sorted(users)} import a stage; shared code belongs in core/"


def test_the_core_imports_no_stage_tool_or_ci_module() -> None:
    outside = (f"{PACKAGE}.stages", f"{PACKAGE}.maint", f"{PACKAGE}.ci", f"{PACKAGE}.pipeline")
    for name in MODULES:
        if name.startswith(f"{PACKAGE}.core"):
            bad = {target for target in imports_of(name) if target.startswith(outside)}
            assert not bad, f"{name} imports {sorted(bad)}"


def _cycle() -> list[str] | None:
    graph = {name: imports_of(name) for name in MODULES}
    # A package's own modules import through it (``from . import x``); an edge from a
    # module to its parent package is that binding, not a dependency.
    for name, targets in graph.items():
        targets -= {target for target in targets if name.startswith(f"{target}.")}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name)):
            return found
    return None


def test_no_import_cycle() -> None:
    cycle = _cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
