"""Pinned with hashes: every package installed in a job that builds, signs or publishes.

`make build` and the release workflow's build, sign and publish jobs install the
orchestrator's packages from patches/toolchain/orchestrator.txt (exact versions, every
wheel's sha256), then the project itself without dependencies or build isolation; the test
extras stay out of them: `make test`, and with it every job of ci.yml, installs them from
patches/toolchain/test.txt the same way. (.ci/run checks both files against the registry:
toolchain_pins check.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from ci_support import REPO, WORKFLOWS, load_workflow
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from intelmac_torch_builder.ci import pins
from intelmac_torch_builder.ci.pins import makefile_rule, make_recipes, unpinned
from intelmac_torch_builder.core import toolchain
from intelmac_torch_builder.maint import toolchain_pins

PINS = REPO / "patches" / "toolchain" / "orchestrator.txt"
TEST_PINS = REPO / "patches" / "toolchain" / "test.txt"
MAKEFILE = REPO / "Makefile"
WRITE = re.compile(r"\bwrite\b")
#: A job builds when it runs `make build` or the warm-up's compile.
BUILDS = re.compile(r"\bmake build\b|\bci\.warmup run\b")


def environments() -> list[dict[str, str]]:
    return [toolchain_pins.marker_environment(python, platform)
            for python in toolchain_pins.ORCHESTRATOR_PYTHONS
            for platform in toolchain_pins.ORCHESTRATOR_PLATFORMS]


def applies(marker: Marker | str | None, environment: dict[str, str]) -> bool:
    return marker is None or Marker(str(marker)).evaluate(environment)


@pytest.mark.parametrize("path", [PINS, TEST_PINS], ids=lambda path: path.name)
def test_every_pin_is_exact_with_hashes(path: Path) -> None:
    chain = toolchain.load(path)
    assert chain.pins
    loose = [pin.requirement for pin in chain.pins if pin.version is None or not pin.hashes]
    assert loose == []


def wanted(source: str) -> list[Requirement]:
    """The requirements a pins file must satisfy: pyproject.toml's dependencies, one of its
    extras (`extra:NAME`), or orchestrator.in's lines."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    if source == "pyproject.toml":
        return [Requirement(spec) for spec in project["dependencies"]]
    if source.startswith("extra:"):
        return [Requirement(spec) for spec in project["optional-dependencies"][source[6:]]]
    text = (REPO / "patches" / "toolchain" / source).read_text(encoding="utf-8")
    return [Requirement(line) for line in text.splitlines()
            if line.strip() and not line.startswith("#")]


def unmet(source: str, path: Path) -> list[str]:
    """source's requirements that path pins at no version in range, for each Python and
    platform the project supports."""
    chain = toolchain.load(path)
    problems = []
    for environment in environments():
        pinned = {pin.name: pin.version for pin in chain.pins if applies(pin.marker, environment)}
        for requirement in wanted(source):
            if not applies(requirement.marker, environment):
                continue
            version = pinned.get(canonicalize_name(requirement.name))
            if version is None or not requirement.specifier.contains(version, prereleases=True):
                problems.append(f"{requirement} on {environment['sys_platform']} "
                                f"{environment['python_version']}: pinned {version}")
    return problems


@pytest.mark.parametrize(("source", "path"), [
    ("pyproject.toml", PINS), ("orchestrator.in", PINS),
    # make test installs only test.txt's pins on top (--no-deps): every extra it installs,
    # and what the project itself needs, must be there.
    ("extra:test", TEST_PINS), ("extra:regress", TEST_PINS), ("pyproject.toml", TEST_PINS),
], ids=lambda value: getattr(value, "name", value))
def test_every_dependency_is_pinned_within_its_range_wherever_it_applies(source: str,
                                                                        path: Path) -> None:
    assert unmet(source, path) == []


def test_delocate_and_everything_it_imports_are_pinned_for_a_mac() -> None:
    mac = toolchain_pins.marker_environment("3.11", "macosx_13_0_x86_64")
    linux = toolchain_pins.marker_environment("3.11", toolchain_pins.ORCHESTRATOR_PLATFORMS[-1])
    chain = toolchain.load(PINS)
    on_mac = {pin.name for pin in chain.pins if applies(pin.marker, mac)}
    on_linux = {pin.name for pin in chain.pins if applies(pin.marker, linux)}
    assert {"delocate", "macholib", "altgraph", "packaging", "typing-extensions"} <= on_mac
    assert "delocate" not in on_linux


def test_the_test_pins_keep_the_orchestrators_versions() -> None:
    """make test installs test.txt over orchestrator.txt with --no-deps: a package of both at
    another version would replace the one `make build` checked, unseen."""
    for environment in environments():
        build = {pin.name: pin.version for pin in toolchain.load(PINS).pins
                 if applies(pin.marker, environment)}
        tests = {pin.name: pin.version for pin in toolchain.load(TEST_PINS).pins
                 if applies(pin.marker, environment)}
        assert {name: (version, tests.get(name)) for name, version in build.items()
                if tests.get(name) != version} == {}, environment


def test_a_pins_file_without_an_extra_fails(tmp_path: Path) -> None:
    """The completeness check can fail: test.txt without pytest-xdist."""
    text = TEST_PINS.read_text(encoding="utf-8")
    start = text.index("pytest-xdist==")
    end = text.index("\n", text.index("    # via", start))
    path = tmp_path / "test.txt"
    path.write_text(text[:start] + text[end + 1:], encoding="utf-8")
    problems = unmet("extra:test", path)
    assert problems and all(problem.startswith("pytest-xdist>=") for problem in problems)


def test_the_test_extras_are_not_pinned_for_the_build() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = {canonicalize_name(Requirement(spec).name)
              for spec in project["optional-dependencies"]["test"]}
    runtime = {canonicalize_name(Requirement(spec).name) for spec in project["dependencies"]}
    pinned = {pin.name for pin in toolchain.load(PINS).pins}
    # setuptools builds the project itself (--no-build-isolation); packaging is a runtime need.
    assert pinned & extras - runtime - {"setuptools"} == set()


# The rule for one pip install command (ci/pins.py): everything it fetches is pinned with a
# hash, or it installs only the checkout itself, fetching nothing (no dependencies, no build
# isolation).
@pytest.mark.parametrize(("script", "bad"), [
    ("python -m pip install --quiet -e .", True),
    ("python -m pip install -q --no-deps -e .", True),  # build isolation fetches setuptools
    ("pip install --no-deps --no-build-isolation -e '.[test]'", True),
    ("python -m pip install --quiet -e . && make build", True),
    ("python -m pip install --require-hashes --no-deps -r pins.txt", False),
    ("python -m pip install --quiet --no-deps --no-build-isolation -e .", False),
    ("make build  # pip install would be unpinned here, but it is a comment", False),
    ("eval \"$(PY) -m pip install -q $$extra -e '.[test]'\"", True),  # hidden in a string
    (pins.TEST_TORCH_INSTALL, False),  # the torch the tests run on: named, documented
])
def test_the_rule_finds_an_unpinned_install(script: str, bad: bool) -> None:
    assert bool(unpinned(script)) == bad


def test_make_build_installs_only_pinned_packages_and_no_test_extras() -> None:
    script = make_recipes("build")
    assert unpinned(script) == []
    assert "[test]" not in script and "--upgrade" not in script
    assert "-r $(ORCHESTRATOR_PINS)" in script
    assert "ORCHESTRATOR_PINS := patches/toolchain/orchestrator.txt" in MAKEFILE.read_text()


def test_make_test_adds_the_test_extras_pinned_with_hashes() -> None:
    prereqs, recipe = makefile_rule("$(VENV)/.stamp")
    assert prereqs == ["$(VENV)/.stamp-build", "$(VENV)/.stamp-delocate", "$(TEST_PINS)"]
    assert "--require-hashes --only-binary=:all: --no-deps -r $(TEST_PINS)" in recipe
    assert "TEST_PINS := patches/toolchain/test.txt" in MAKEFILE.read_text()
    # Only the torch the tests run on is left (docs/releasing.md says what it trusts).
    assert unpinned(make_recipes("test")) == []
    assert pins.TEST_TORCH_INSTALL in make_recipes("test")
    # The rehearsal's delocate on Linux: the Mac's pins, hash-checked, nothing else.
    prereqs, recipe = makefile_rule("$(VENV)/.stamp-delocate")
    assert prereqs == ["$(VENV)/.stamp-build"] and "mac_tools delocate-pins" in recipe
    assert "--require-hashes --only-binary=:all: --no-deps" in recipe


def test_every_job_of_ci_yml_installs_only_pinned_packages() -> None:
    """Any job on the default branch can write the repository's cache entries (N4 of issue
    40), so all of ci.yml's, with the Makefile recipes of the make targets they run."""
    workflow = load_workflow(WORKFLOWS / "ci.yml")
    assert {"test", "matrix", "verify-patches"} <= set(workflow["jobs"])
    assert pins.workflow_unpinned(workflow) == {}


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
