"""ci/release_status.py: a release stays a draft until every Python of its lines is there, or
until a maintainer publishes the subset on purpose; the command says what is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from intelmac_torch_builder.ci import release_status
from intelmac_torch_builder.core import catalog as catalog_module

TAG = "v2.15.0-1"


def line_assets(version: str = "2.15.0", skip: tuple[str, ...] = ()) -> list[str]:
    """The wheels a whole release of ``version`` carries, less the Pythons in ``skip``."""
    catalog = catalog_module.load()
    line = catalog.line(version)
    assert line.companion is not None
    torch, vision = catalog.wheel_version(line), catalog.wheel_version(line.companion)
    names = ["SHA256SUMS"]
    for python in line.python:
        if python in skip:
            continue
        cp = "cp" + python.replace(".", "")
        names.append(f"torch-{torch}-{cp}-{cp}-macosx_14_0_x86_64.whl")
        names.append(f"torchvision-{vision}-{cp}-{cp}-macosx_14_0_x86_64.whl")
    return names


def run(tmp_path: Path, *args: str, release: dict[str, object] | None = None
        ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The command with a stand-in gh that shows ``release`` and logs every call."""
    fake = tmp_path / "bin" / "gh"
    fake.parent.mkdir(exist_ok=True)
    calls = tmp_path / "calls.txt"
    fake.write_text(f"""#!{sys.executable}
import json, sys
args = sys.argv[1:]
with open({str(calls)!r}, "a") as log:
    log.write(" ".join(args) + "\\n")
release = {release!r}
if args[:2] == ["release", "view"]:
    if release is None:
        sys.exit("release not found")
    print(json.dumps(release))
elif args[:2] == ["release", "edit"]:
    pass
else:
    sys.exit("unexpected: " + " ".join(args))
""")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
           "GH_REPO": "me/repo"}
    result = subprocess.run([sys.executable, "-m", "intelmac_torch_builder.ci.release_status",
                             "--tag", TAG, *args], capture_output=True, text=True, timeout=60,
                            check=False, env=env)
    made = calls.read_text().splitlines() if calls.exists() else []
    return result, made


def draft(names: list[str]) -> dict[str, object]:
    return {"isDraft": True, "assets": [{"name": name} for name in names]}


def test_every_python_of_the_line_is_wanted_torch_and_torchvision() -> None:
    catalog = catalog_module.load()
    wants = release_status.wanted(catalog, TAG)
    line = catalog.line("2.15.0")
    assert {(w.python, w.project) for w in wants} == {
        (python, project) for python in line.python for project in ("torch", "torchvision")}


def test_a_py3_none_torchvision_serves_every_python() -> None:
    catalog = catalog_module.load()
    vision = catalog.wheel_version(catalog.line("2.15.0").companion)  # type: ignore[arg-type]
    assets = [name for name in line_assets() if not name.startswith("torchvision")]
    assets.append(f"torchvision-{vision}-py3-none-any.whl")
    assert release_status.missing(release_status.wanted(catalog, TAG), assets) == []


def test_a_whole_draft_is_published(tmp_path: Path) -> None:
    result, calls = run(tmp_path, "--publish", release=draft(line_assets()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"release edit {TAG} --draft=false" in calls
    assert "8 of 8 wheels present" in result.stdout


def test_a_draft_missing_a_python_stays_a_draft_and_says_what_is_missing(tmp_path: Path) -> None:
    result, calls = run(tmp_path, "--publish", release=draft(line_assets(skip=("3.12",))))
    assert result.returncode == 1
    assert not any(call.startswith("release edit") for call in calls)
    assert "missing: torch 2.15.0+intelmac for Python 3.12 (line 2.15.0)" in result.stdout
    assert "missing: torchvision 0.29.2+intelmac for Python 3.12" in result.stdout
    assert "Re-run failed jobs" in result.stdout and "--publish-subset" in result.stdout


def test_the_subset_is_published_only_on_purpose_and_named(tmp_path: Path) -> None:
    result, calls = run(tmp_path, "--publish", "--publish-subset",
                        release=draft(line_assets(skip=("3.12",))))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"release edit {TAG} --draft=false" in calls
    assert "::warning title=Published a subset::" in result.stdout
    assert "torch 2.15.0+intelmac for Python 3.12" in result.stdout


def test_no_sha256sums_is_never_published(tmp_path: Path) -> None:
    names = [name for name in line_assets() if name != "SHA256SUMS"]
    result, calls = run(tmp_path, "--publish", "--publish-subset", release=draft(names))
    assert result.returncode == 1 and "missing: SHA256SUMS" in result.stdout
    assert not any(call.startswith("release edit") for call in calls)


def test_the_report_from_a_list_of_assets_needs_no_github(tmp_path: Path) -> None:
    listing = tmp_path / "assets.txt"
    listing.write_text("\n".join(line_assets(skip=("3.11", "3.14"))))
    result, calls = run(tmp_path, "--assets", str(listing))
    assert result.returncode == 1 and calls == []
    missing = [line for line in result.stdout.splitlines() if line.startswith("  missing:")]
    assert len(missing) == 4 and all("3.11" in line or "3.14" in line for line in missing)


def test_no_release_yet_and_bad_arguments(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "--publish", release=None)
    assert result.returncode == 1 and "there is no release v2.15.0-1 yet" in result.stderr
    result, _ = run(tmp_path, "--publish-subset", release=draft(line_assets()))
    assert result.returncode == 2 and "--publish-subset goes with --publish" in result.stderr


def test_a_published_release_is_left_alone(tmp_path: Path) -> None:
    result, calls = run(tmp_path, "--publish", release={"isDraft": False, "assets": [
        {"name": name} for name in line_assets()]})
    assert result.returncode == 0 and "is published" in result.stdout
    assert not any(call.startswith("release edit") for call in calls)


def test_a_release_published_without_a_python_lets_the_index_deploy(tmp_path: Path) -> None:
    # Published on purpose without 3.12: the release job of a later run succeeds (so that
    # pages lists what is published), saying what it is still without and how it is added.
    subset = {"isDraft": False, "assets": [{"name": name} for name in line_assets(skip=("3.12",))]}
    result, calls = run(tmp_path, "--publish", release=subset)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "::warning title=Published without some wheels::" in result.stdout
    assert "torch 2.15.0+intelmac for Python 3.12" in result.stdout
    assert not any(call.startswith("release edit") for call in calls)
    # The report alone still says it is not whole.
    result, _ = run(tmp_path, release=subset)
    assert result.returncode == 1
