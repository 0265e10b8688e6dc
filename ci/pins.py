"""Which `pip install` commands of the workflows and the Makefile may fetch an unpinned package.

The rule (docs/releasing.md, "Pinned with hashes"): a pip install either checks every
package against its pinned hash (`--require-hashes` on a requirements file), or installs
only the checkout itself and fetches nothing (`--no-deps --no-build-isolation` on `.`).
A `make TARGET` in a workflow step runs the Makefile's recipes of TARGET and of the venv
stamps it needs, so those are read too. `make ci-simulate` applies it to every job of
ci.yml (any job on the default branch can write the cache entries a refresh restores) and
to the release jobs' steps; tests/ci/test_ci_orchestrator_pins.py to both workflows.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..core.catalog import REPO_ROOT

MAKEFILE = REPO_ROOT / "Makefile"
CI_WORKFLOW = REPO_ROOT / ".github" / "workflows" / "ci.yml"
PIP_INSTALL = re.compile(r"\bpip3? install\b")
MAKE = re.compile(r"(?:^|\s)make\s+(?P<targets>[^;&|#\n]*)")
#: The one install of make test's that is not hash-checked, and why it may stay so: the torch
#: the tests run on (build_scripts/maint/test_torch.py prints its exact version, from
#: PyTorch's CPU wheel index on Linux), with its own dependencies. docs/releasing.md says
#: what that trusts.
TEST_TORCH_INSTALL = "$(PY) -m pip install -q $$args -e '.[regress]'"


def commands(script: str) -> Iterator[str]:
    """The simple commands of a shell script, comments dropped."""
    for line in re.split(r"\n|&&|\|\||;", script.replace("\\\n", " ")):
        command = re.sub(r"(^|\s)#.*", "", line).strip()  # a shell comment runs nothing
        if command:
            yield command


def unpinned_command(command: str) -> bool:
    """Whether one pip install command may fetch a package that no hash pins."""
    if not PIP_INSTALL.search(command) or command == TEST_TORCH_INSTALL:
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return True  # unbalanced quotes: nothing here can be read as pinned
    if "install" not in words:  # inside a quoted string: eval "pip install ...", echo ...
        return any(unpinned_command(word) for word in words if PIP_INSTALL.search(word))
    if "--require-hashes" in words and "-r" in words:
        return False
    after = words[words.index("install") + 1:]
    targets = [word for word in after if not word.startswith("-")]
    return not ({"--no-deps", "--no-build-isolation"} <= set(after) and targets == ["."])


def unpinned(script: str) -> list[str]:
    """The pip install commands in a shell script that may fetch an unpinned package."""
    return [command for command in commands(script) if unpinned_command(command)]


def makefile_rule(target: str, makefile: Path = MAKEFILE) -> tuple[list[str], str]:
    """A Makefile rule's prerequisites and recipe (the recipe's lines without their tab)."""
    text = makefile.read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(target)}:(?P<prereqs>[^\n]*)\n(?P<recipe>(?:\t[^\n]*\n)*)",
                      text, re.MULTILINE)
    if not match:
        raise KeyError(f"no rule for {target} in {makefile.name}")
    recipe = "\n".join(line[1:] for line in match["recipe"].splitlines())
    return match["prereqs"].split(), recipe


def make_recipes(target: str, makefile: Path = MAKEFILE) -> str:
    """Every recipe `make TARGET` runs to set up the venv: TARGET's and its stamps'."""
    recipes = []
    pending, seen = [target], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        prereqs, recipe = makefile_rule(name, makefile)
        recipes.append(recipe)
        pending += [p for p in prereqs if p.startswith("$(VENV)/") or p == "$(TORCH_STAMP)"]
    return "\n".join(recipes)


def step_unpinned(script: str, makefile: Path = MAKEFILE) -> list[str]:
    """A step's unpinned installs, its own and those of the make targets it runs."""
    found = unpinned(script)
    for command in commands(script):
        match = MAKE.search(command)
        if not match:
            continue
        for target in match["targets"].split():
            if "=" in target or target.startswith("-"):
                continue  # a variable or an option, not a target
            rule = re.sub(r"^\.venv/", "$(VENV)/", target)  # the Makefile's VENV default
            try:
                found += [f"make {target}: {bad}" for bad in unpinned(make_recipes(rule, makefile))]
            except KeyError:
                continue  # a target without a rule of its own (a phony alias) installs nothing
    return found


def workflow_unpinned(workflow: Mapping[str, Any], makefile: Path = MAKEFILE) -> dict[str, list[str]]:
    """Each job's steps that may install an unpinned package, by 'job: step name'."""
    found = {}
    for job_id, job in (workflow.get("jobs") or {}).items():
        for step in job.get("steps", []):
            bad = step_unpinned(str(step.get("run", "")), makefile)
            if bad:
                found[f"{job_id}: {step.get('name', step.get('run', ''))}"] = bad
    return found
