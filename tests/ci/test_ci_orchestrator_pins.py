"""Pinned with hashes: every package installed in a job that builds, signs or publishes.

`make build` and the release workflow's build, sign and publish jobs install the
orchestrator's packages from patches/toolchain/orchestrator.txt (exact versions, every
wheel's sha256), then the project itself without dependencies or build isolation; the test
extras stay out of them. (.ci/run checks the file against the registry:
toolchain_pins check.)"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
from ci_support import REPO, WORKFLOWS, load_workflow
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from intelmac_torch_builder.core import toolchain
from intelmac_torch_builder.maint import toolchain_pins

PINS = REPO / "patches" / "toolchain" / "orchestrator.txt"
MAKEFILE = REPO / "Makefile"
WRITE = re.compile(r"\bwrite\b")
#: A job builds when it runs `make build` or the warm-up's compile.
BUILDS = re.compile(r"\bmake build\b|\bci\.warmup run\b")
PIP_INSTALL = re.compile(r"\bpip3? install\b")


def environments() -> list[dict[str, str]]:
    return [toolchain_pins.marker_environment(python, platform)
            for python in toolchain_pins.ORCHESTRATOR_PYTHONS
            for platform in toolchain_pins.ORCHESTRATOR_PLATFORMS]


def applies(marker: Marker | str | None, environment: dict[str, str]) -> bool:
    return marker is None or Marker(str(marker)).evaluate(environment)


def test_every_pin_is_exact_with_hashes() -> None:
    chain = toolchain.load(PINS)
    assert chain.pins
    loose = [pin.requirement for pin in chain.pins if pin.version is None or not pin.hashes]
    assert loose == []


@pytest.mark.parametrize("source", ["pyproject.toml", "orchestrator.in"])
def test_every_dependency_is_pinned_within_its_range_wherever_it_applies(source: str) -> None:
    if source == "pyproject.toml":
        project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        wanted = [Requirement(spec) for spec in project["dependencies"]]
    else:
        text = (REPO / "patches" / "toolchain" / source).read_text(encoding="utf-8")
        wanted = [Requirement(line) for line in text.splitlines()
                  if line.strip() and not line.startswith("#")]
    chain = toolchain.load(PINS)
    problems = []
    for environment in environments():
        pinned = {pin.name: pin.version for pin in chain.pins if applies(pin.marker, environment)}
        for requirement in wanted:
            if not applies(requirement.marker, environment):
                continue
            version = pinned.get(canonicalize_name(requirement.name))
            if version is None or not requirement.specifier.contains(version, prereleases=True):
                problems.append(f"{requirement} on {environment['sys_platform']} "
                                f"{environment['python_version']}: pinned {version}")
    assert problems == []


def test_delocate_and_everything_it_imports_are_pinned_for_a_mac() -> None:
    mac = toolchain_pins.marker_environment("3.11", "macosx_13_0_x86_64")
    linux = toolchain_pins.marker_environment("3.11", toolchain_pins.ORCHESTRATOR_PLATFORMS[-1])
    chain = toolchain.load(PINS)
    on_mac = {pin.name for pin in chain.pins if applies(pin.marker, mac)}
    on_linux = {pin.name for pin in chain.pins if applies(pin.marker, linux)}
    assert {"delocate", "macholib", "altgraph", "packaging", "typing-extensions"} <= on_mac
    assert "delocate" not in on_linux


def test_the_test_extras_are_not_pinned_for_the_build() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = {canonicalize_name(Requirement(spec).name)
              for spec in project["optional-dependencies"]["test"]}
    runtime = {canonicalize_name(Requirement(spec).name) for spec in project["dependencies"]}
    pinned = {pin.name for pin in toolchain.load(PINS).pins}
    # setuptools builds the project itself (--no-build-isolation); packaging is a runtime need.
    assert pinned & extras - runtime - {"setuptools"} == set()


# The rule for one pip install command: everything it fetches is pinned with a hash, or it
# installs only the checkout itself, fetching nothing (no dependencies, no build isolation).
def unpinned(script: str) -> list[str]:
    """The pip install commands in a shell script that may fetch an unpinned package."""
    found = []
    for line in re.split(r"\n|&&|\|\||;", script.replace("\\\n", " ")):
        command = re.sub(r"(^|\s)#.*", "", line)  # a shell comment runs nothing
        if not PIP_INSTALL.search(command):
            continue
        words = shlex.split(command)
        if "--require-hashes" in words:
            continue
        after = words[words.index("install") + 1:]
        targets = [word for word in after if not word.startswith("-")]
        if {"--no-deps", "--no-build-isolation"} <= set(after) and targets == ["."]:
            continue
        found.append(command.strip())
    return found


@pytest.mark.parametrize(("script", "bad"), [
    ("python -m pip install --quiet -e .", True),
    ("python -m pip install -q --no-deps -e .", True),  # build isolation fetches setuptools
    ("pip install --no-deps --no-build-isolation -e '.[test]'", True),
    ("python -m pip install --quiet -e . && make build", True),
    ("python -m pip install --require-hashes --no-deps -r pins.txt", False),
    ("python -m pip install --quiet --no-deps --no-build-isolation -e .", False),
    ("make build  # pip install would be unpinned here, but it is a comment", False),
])
def test_the_rule_finds_an_unpinned_install(script: str, bad: bool) -> None:
    assert bool(unpinned(script)) == bad


def makefile_recipe(target: str) -> tuple[list[str], str]:
    """A Makefile rule's prerequisites and recipe."""
    text = MAKEFILE.read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(target)}:(?P<prereqs>[^\n]*)\n(?P<recipe>(?:\t[^\n]*\n)*)",
                      text, re.MULTILINE)
    assert match, f"no rule for {target} in the Makefile"
    recipe = "\n".join(line[1:] for line in match["recipe"].splitlines())
    return match["prereqs"].split(), recipe


def build_installs() -> str:
    """Every recipe `make build` runs to set up its venv."""
    recipes = []
    pending = ["build"]
    while pending:
        target = pending.pop()
        prereqs, recipe = makefile_recipe(target)
        recipes.append(recipe)
        pending += [p for p in prereqs if p.startswith("$(VENV)/")]
    return "\n".join(recipes)


def test_make_build_installs_only_pinned_packages_and_no_test_extras() -> None:
    script = build_installs()
    assert unpinned(script) == []
    assert "[test]" not in script and "--upgrade" not in script
    assert "-r $(ORCHESTRATOR_PINS)" in script
    assert "ORCHESTRATOR_PINS := patches/toolchain/orchestrator.txt" in MAKEFILE.read_text()


def test_make_test_adds_the_test_extras() -> None:
    prereqs, recipe = makefile_recipe("$(VENV)/.stamp")
    assert prereqs == ["$(VENV)/.stamp-build", "$(VENV)/.stamp-delocate"] and "-e '.[test]'" in recipe
    # The rehearsal's delocate on Linux: the Mac's pins, hash-checked, nothing else.
    prereqs, recipe = makefile_recipe("$(VENV)/.stamp-delocate")
    assert prereqs == ["$(VENV)/.stamp-build"] and "mac_tools delocate-pins" in recipe
    assert "--require-hashes --only-binary=:all: --no-deps" in recipe


def builds_signs_or_publishes(job: dict[str, Any]) -> bool:
    permissions = job.get("permissions") or {}
    writes = isinstance(permissions, dict) and any(WRITE.search(str(v)) for v in permissions.values())
    scripts = "\n".join(str(step.get("run", "")) for step in job.get("steps", []))
    return writes or bool(BUILDS.search(scripts))


def test_jobs_that_build_sign_or_publish_install_only_pinned_packages() -> None:
    found = {}
    checked = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job_id, job in load_workflow(path)["jobs"].items():
            if not builds_signs_or_publishes(job):
                continue
            checked.append(job_id)
            for step in job.get("steps", []):
                bad = unpinned(str(step.get("run", "")))
                if bad:
                    found[f"{path.name}:{job_id}: {step.get('name', '')}"] = bad
    # The jobs the rule must see; a renamed job keeps being checked by the rule above.
    assert {"warmup", "wheel", "attest", "release", "pages"} <= set(checked)
    assert found == {}


def test_the_release_jobs_install_the_pins_file() -> None:
    text = (WORKFLOWS / "release.yml").read_text(encoding="utf-8")
    assert text.count("--require-hashes --only-binary=:all: --no-deps -r "
                      "patches/toolchain/orchestrator.txt") >= 3  # the anchor, matrix, pages


def test_pins_file_is_in_the_package_data() -> None:
    assert Path(toolchain_pins.ORCHESTRATOR_PINS).is_file()
