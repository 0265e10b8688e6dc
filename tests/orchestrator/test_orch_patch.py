"""The patch stage: fresh copy, check before apply, conflicts named, trees left clean."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from intelmac_torch_builder.core import patching

from orch_fixture import MPS_BEFORE, POLICY_PATH, write_conflicting_patch
from orch_project import Project


def _snapshot(tree: Path) -> dict[str, str]:
    return {
        str(path.relative_to(tree)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(tree.rglob("*"))
        if path.is_file()
    }


def test_patch_applies_to_a_copy_and_records_the_fingerprint(project: Project) -> None:
    assert project.cli("fetch").code == 0
    pristine = project.work / project.version / "source"
    before = _snapshot(pristine)
    result = project.cli("patch")
    assert result.code == 0, result.text
    patched = project.work / project.version / "patched"
    assert (patched / POLICY_PATH).is_file()
    assert "allow_intel_gpu" in (patched / "torch/backends/mps/__init__.py").read_text()
    assert _snapshot(pristine) == before  # the pristine tree is never touched
    marker = json.loads((patched / ".intelmac-series.json").read_text())
    assert marker["patches"] == [p.name for p in project.patches]
    assert len(marker["series_fingerprint"]) == 64

    again = project.cli("patch")
    assert again.code == 0
    assert "Already patched" in again.err


def test_an_unchanged_patched_tree_is_known_without_git_and_an_edited_one_is_checked(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """The marker's digests of the files the series touches spare a no-op the git process per
    patch; a touched file edited since is checked the old way, by reversing the series."""
    assert project.cli("fetch").code == 0
    assert project.cli("patch").code == 0
    patched = project.work / project.version / "patched"
    marker = json.loads((patched / ".intelmac-series.json").read_text())
    touched = {change.path for patch in project.patches for change in patching.file_changes(patch)}
    assert set(marker["touched_files"]) == touched
    assert marker["touched_files"][POLICY_PATH] == hashlib.sha256((patched / POLICY_PATH).read_bytes()).hexdigest()
    calls: list[object] = []
    real = patching._git_apply
    monkeypatch.setattr(patching, "_git_apply", lambda *args: calls.append(args) or real(*args))
    again = project.cli("patch")
    assert again.code == 0 and "Already patched" in again.err, again.text
    assert calls == []
    # Digests that no longer match (an edit the series' hunks do not see), or none (a marker
    # from before them): the series is reversed with git, and the tree kept when it reverses.
    for digests in ({path: "0" * 64 for path in touched}, None):
        marker["touched_files"] = digests
        (patched / ".intelmac-series.json").write_text(json.dumps(marker))
        calls.clear()
        again = project.cli("patch")
        assert again.code == 0 and "Already patched" in again.err, again.text
        assert len(calls) == len(project.patches)
        again = project.cli("patch")  # the digests were recorded afresh: no git this time
        assert "Already patched" in again.err and len(calls) == len(project.patches), again.text
    mps = patched / "torch/backends/mps/__init__.py"
    # An edit that takes the series' lines out: a fresh copy is patched.
    mps.write_text((project.work / project.version / "source" / "torch/backends/mps/__init__.py").read_text())
    again = project.cli("patch")
    assert again.code == 0 and "no longer carries the series" in again.err, again.text
    assert "allow_intel_gpu" in mps.read_text()


def test_conflict_names_patch_file_and_hunk_and_leaves_no_tree(project: Project) -> None:
    stale = write_conflicting_patch(project.catalog.parent / "stale")
    project.rewrite_catalog(patches=[stale])
    assert project.cli("fetch").code == 0
    pristine = project.work / project.version / "source"
    before = _snapshot(pristine)
    result = project.cli("patch")
    assert result.code == 1
    assert "Patch 0001-mps-fixture-stale.patch does not apply" in result.err
    assert "file torch/backends/mps/__init__.py" in result.err
    assert "hunk #1 of 1" in result.err
    version_dir = project.work / project.version
    assert not (version_dir / "patched").exists()
    assert sorted(p.name for p in version_dir.iterdir() if p.name.startswith(".")) == []
    assert _snapshot(pristine) == before


def test_conflict_keeps_the_previous_patched_tree(project: Project) -> None:
    assert project.cli("fetch").code == 0
    assert project.cli("patch").code == 0
    patched = project.work / project.version / "patched"
    before = _snapshot(patched)
    stale = write_conflicting_patch(project.catalog.parent / "stale")
    project.rewrite_catalog(patches=[*project.patches, stale])
    assert project.cli("patch").code == 1
    assert _snapshot(patched) == before


def test_already_patched_source_is_detected(project: Project) -> None:
    assert project.cli("fetch").code == 0
    assert project.cli("patch").code == 0
    # Someone hands us a tree that already carries the series.
    carried = project.root / "already-patched"
    shutil.copytree(project.work / project.version / "patched", carried)
    (carried / ".intelmac-series.json").unlink()
    result = project.cli("all", "--builder", "setuptools", "--source", str(carried))
    assert result.code == 0, result.text
    assert "already carries the whole series" in result.err
    mps = (
        project.work / project.version / "patched" / "torch/backends/mps/__init__.py"
    ).read_text()
    assert mps.count("allow_intel_gpu =") == 1  # not applied twice


def test_new_series_keeps_the_build_folder(project: Project) -> None:
    assert project.cli("fetch").code == 0
    project.rewrite_catalog(patches=project.patches[:1])
    assert project.cli("patch").code == 0
    build = project.work / project.version / "patched" / "build"
    build.mkdir()
    (build / "CMakeCache.txt").write_text("kept\n")
    project.rewrite_catalog(patches=project.patches)
    result = project.cli("patch")
    assert result.code == 0, result.text
    assert (build / "CMakeCache.txt").read_text() == "kept\n"
    assert (project.work / project.version / "patched" / POLICY_PATH).is_file()


def test_patch_before_fetch_says_what_to_run(project: Project) -> None:
    result = project.cli("patch")
    assert result.code == 1
    assert "python -m intelmac_torch_builder fetch" in result.err


def test_fixture_base_is_what_the_stale_patch_does_not_match() -> None:
    # Guards the conflict tests: the stale patch's context must really differ from upstream.
    assert "# exclude Intel GPUs" in MPS_BEFORE


def _wheel_files(project: Project) -> set[str]:
    wheels = list((project.work / project.version / "dist").glob("cp*/raw/*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as archive:
        return set(archive.namelist())


def test_build_stage_repatches_a_tree_from_an_older_series(project: Project) -> None:
    # Patched with the first patch only; then the catalog's series grows.
    assert project.cli("fetch").code == 0
    project.rewrite_catalog(patches=project.patches[:1])
    assert project.cli("patch").code == 0
    project.rewrite_catalog(patches=project.patches)
    # `build` alone, without `patch` first: it must not compile the old series.
    result = project.cli("build", "--builder", "setuptools")
    assert result.code == 0, result.text
    assert "but the catalog's series is now" in result.err and "patching it again" in result.err
    assert POLICY_PATH in _wheel_files(project)
    marker = json.loads((project.work / project.version / "patched" / ".intelmac-series.json").read_text())
    assert marker["patches"] == [patch.name for patch in project.patches]


def test_build_stage_on_an_unpatched_tree_says_what_to_run(project: Project) -> None:
    assert project.cli("fetch").code == 0
    result = project.cli("build", "--builder", "setuptools")
    assert result.code == 1
    assert "is not a patched tree" in result.err and "run the patch stage first" in result.err
