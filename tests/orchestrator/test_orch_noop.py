"""The no-op `all` (a second make build with nothing changed) does nothing, and a changed
input still takes the stages again: a patch, the catalog (its series, macOS fields, build_env
and pinned toolchain), an option, the source.

How quick the no-op is, is measured (docs/building.md), not timed here.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from orch_fixture import (MPS_AFTER, MPS_BEFORE, MPS_PATH, _diff, _header, make_tarball, sha256,
                          upstream_files, write_tree)
from orch_project import Project, Result

from intelmac_torch_builder.core import buildinfo

BUILT = ("all", "--builder", "setuptools")


def _wheel_text(wheel: Path, member: str) -> tuple[dict[str, object], str]:
    """The wheel's build information and the text of ``member``."""
    with zipfile.ZipFile(wheel) as archive:
        dist_info = buildinfo.dist_info_dir(archive.namelist())
        return json.loads(archive.read(f"{dist_info}/INTELMAC_BUILD.json")), archive.read(member).decode()


@pytest.fixture
def built(project: Project) -> Project:
    """The fixture upstream built once, and a second `all` seen doing nothing."""
    first = project.cli(*BUILT)
    assert first.code == 0, first.text
    requests = len(project.server.requests)
    again = project.cli(*BUILT)
    assert again.code == 0 and "Up to date" in again.err, again.text
    assert "patch:" not in again.err and len(project.server.requests) == requests
    return project


def _again(project: Project, *args: str) -> Result:
    """``all`` again, which must take the stages (no "Up to date")."""
    result = project.cli(*BUILT, *args)
    assert "Up to date" not in result.err and "patch:" in result.err, result.text
    return result


def _rebuilt(project: Project, *args: str) -> tuple[dict[str, object], str]:
    """``all`` again, built and verified anew: the new wheel's build information and module.

    The index then refuses it, by design: a file name in the index never changes bytes (the
    error says how to replace the old wheel), so the new one is read from the build's dist.
    """
    result = _again(project, *args)
    assert result.code == 1 and "A file name in the index never changes bytes" in result.err, result.text
    (wheel,) = (project.work / project.version / "dist").glob("*/repaired/*.whl")
    return _wheel_text(wheel, MPS_PATH)


def test_a_changed_patch_rebuilds(built: Project) -> None:
    (indexed,) = built.wheels.glob("*.whl")
    before, _ = _wheel_text(indexed, MPS_PATH)
    changed = MPS_AFTER.replace('"yes", "on")', '"yes", "on", "y")')
    assert changed != MPS_AFTER
    built.patches[0].write_text(_header("fixture opt-in flag, also 'y'") + _diff(MPS_PATH, MPS_BEFORE, changed))
    info, text = _rebuilt(built)
    assert '"yes", "on", "y")' in text
    assert info["series_fingerprint"] != before["series_fingerprint"]


def test_a_changed_catalog_rebuilds(built: Project) -> None:
    """The catalog's series for the line (here: its second patch left out)."""
    built.rewrite_catalog(patches=built.patches[:1])
    info, _ = _rebuilt(built)
    assert info["patches"] == [built.patches[0].name]


@pytest.mark.parametrize("field", ["macos_deployment_target", "mps_min_macos"])
def test_a_changed_macos_target_in_the_catalog_rebuilds(built: Project, field: str) -> None:
    """The catalog's macOS fields, which the wheel's build information records."""
    built.rewrite_catalog(**{field: "14.0"})
    info, _ = _rebuilt(built)
    assert info[field] == "14.0"


def test_a_changed_build_env_rebuilds(built: Project) -> None:
    """The line's build_env, which the compile reads (e.g. USE_MKLDNN)."""
    (indexed,) = built.wheels.glob("*.whl")
    before, _ = _wheel_text(indexed, MPS_PATH)
    built.rewrite_catalog(build_env={"USE_MKLDNN": "0"})
    info, _ = _rebuilt(built)
    assert info["build_fingerprint"] != before["build_fingerprint"]


def test_a_changed_pinned_toolchain_rebuilds(project: Project) -> None:
    """The line's pinned build toolchain: the same pin file with other content."""
    pins = project.catalog.parent / "toolchain" / "line.txt"
    pins.parent.mkdir(parents=True, exist_ok=True)
    pins.write_text("ninja==1.11.1.1 --hash=sha256:" + "0" * 64 + "\n")
    toolchain = {"pins": "toolchain/line.txt", "requires": ["ninja"]}
    project.rewrite_catalog(toolchain=toolchain)
    first = project.cli(*BUILT)
    assert first.code == 0, first.text
    again = project.cli(*BUILT)
    assert again.code == 0 and "Up to date" in again.err, again.text
    (indexed,) = project.wheels.glob("*.whl")
    before, _ = _wheel_text(indexed, MPS_PATH)
    pins.write_text("ninja==1.11.1.4 --hash=sha256:" + "1" * 64 + "\n")
    info, _ = _rebuilt(project)
    assert info["build_fingerprint"] != before["build_fingerprint"]


def test_a_changed_option_rebuilds(built: Project) -> None:
    """Another builder: the wheel in the index was not built by it, so the build stage runs
    (and refuses this tree, whose backend is setuptools)."""
    result = _again(built, "--builder", "scikit-build-core")
    assert result.code == 1 and "Not building" in result.err and "scikit-build-core" in result.err, result.text


def test_a_changed_source_rebuilds(built: Project) -> None:
    """A local tarball with other content (and its own --sha256)."""
    files = upstream_files(built.version)
    files["torch/_local_fix.py"] = "FIXED = True\n"  # beside the files the series touches
    tree = write_tree(built.root / "other" / f"pytorch-v{built.version}", files)
    tarball = make_tarball(tree, built.root / "other.tar.gz", f"pytorch-v{built.version}")
    info, _ = _rebuilt(built, "--source", str(tarball), "--sha256", sha256(tarball))
    assert info["source_sha256"] == sha256(tarball) != built.sha256
