"""The repair stage's delocate is pinned with hashes (patches/toolchain/repair.txt), installed
before the orchestrator on a Mac, so the release workflow's delocate never floats."""

from __future__ import annotations

import re
import tomllib

from ci_support import REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PINS = REPO / "patches" / "toolchain" / "repair.txt"
PIN = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)==(?P<version>\S+) \\\n    --hash=sha256:(?P<sha>[0-9a-f]{64})$",
                 re.MULTILINE)


def pins() -> dict[str, str]:
    text = PINS.read_text(encoding="utf-8")
    found = {canonicalize_name(m["name"]): m["version"] for m in PIN.finditer(text)}
    requirement_lines = [line for line in text.splitlines()
                         if line and not line.startswith(("#", " "))]
    assert len(requirement_lines) == len(found), "every requirement needs ==version and one hash"
    return found


def test_delocate_and_everything_it_imports_are_pinned_with_hashes() -> None:
    assert set(pins()) == {"delocate", "macholib", "altgraph", "packaging", "typing-extensions"}


def test_the_pin_meets_pyproject_s_delocate_requirement() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = next(Requirement(spec) for spec in project["dependencies"]
                  if canonicalize_name(Requirement(spec).name) == "delocate")
    assert wanted.specifier.contains(pins()["delocate"])


def test_make_installs_them_before_the_orchestrator_on_a_mac() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    stamp = makefile[makefile.index("$(VENV)/.stamp:"):]
    assert stamp.index("--require-hashes --no-deps -r $(REPAIR_PINS)") < stamp.index("pip install -q -e")
    assert "REPAIR_PINS := patches/toolchain/repair.txt" in makefile
