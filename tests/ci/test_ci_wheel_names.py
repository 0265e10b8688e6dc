"""ci/wheel_names.py: a release's wheels carry its build number, so no two releases share a
file name (the index refuses a name that comes back with other bytes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ci_support import REPO
from packaging.utils import parse_wheel_filename

from intelmac_torch_builder.ci import publish_index, tags, wheel_names

TORCH = "torch-2.15.0+intelmac-cp312-cp312-macosx_14_0_x86_64.whl"
VISION = "torchvision-0.29.2+intelmac-py3-none-any.whl"


@pytest.mark.parametrize(("tag", "build"), [
    ("v2.15.0-1", None), ("v2.15.0-2", "2"), ("v2.14.1-12", "12"),
    ("release-20261127", "20261127"), ("release-20261127.2", "20261127.2"),
])
def test_each_tag_s_build_tag(tag: str, build: str | None) -> None:
    assert wheel_names.build_tag(tag) == build
    renamed = wheel_names.with_build_tag(TORCH, build)
    name, version, parsed_build, tags = parse_wheel_filename(renamed)
    assert (str(name), str(version)) == ("torch", "2.15.0+intelmac")
    assert {str(t) for t in tags} == {"cp312-cp312-macosx_14_0_x86_64"}
    assert parsed_build == (() if build is None else (int(build.split(".")[0]), build[len(build.split(".")[0]):]))
    assert publish_index.WHEEL.match(renamed)


def test_later_builds_sort_higher_for_pip() -> None:
    order = ["v2.15.0-1", "v2.15.0-2", "v2.15.0-10"]
    builds = [parse_wheel_filename(wheel_names.with_build_tag(TORCH, wheel_names.build_tag(t)))[2]
              for t in order]
    assert builds == sorted(builds)


def test_the_tags_match_ci_tags() -> None:
    """wheel_names is standard library only, so it keeps its own copy of the tag patterns."""
    assert wheel_names.LINE_TAG.pattern == tags.LINE_TAG.pattern
    assert wheel_names.ALL_TAG.pattern == tags.ALL_TAG.pattern


def test_renames_only_the_names_and_is_idempotent(tmp_path: Path) -> None:
    for name in (TORCH, VISION):
        (tmp_path / name).write_bytes(name.encode())
    script = REPO / "ci" / "wheel_names.py"
    first = subprocess.run([sys.executable, str(script), "--tag", "v2.15.0-3", str(tmp_path)],
                           capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == ["torch-2.15.0+intelmac-3-cp312-cp312-macosx_14_0_x86_64.whl",
                     "torchvision-0.29.2+intelmac-3-py3-none-any.whl"]
    assert (tmp_path / names[0]).read_bytes() == TORCH.encode()
    again = subprocess.run([sys.executable, str(script), "--tag", "v2.15.0-3", str(tmp_path)],
                           capture_output=True, text=True, check=False)
    assert again.returncode == 0 and "unchanged" in again.stdout
    assert sorted(path.name for path in tmp_path.iterdir()) == names


def test_another_release_s_wheel_is_refused_and_nothing_is_renamed(tmp_path: Path) -> None:
    (tmp_path / TORCH).write_bytes(b"x")
    (tmp_path / "torchvision-0.29.2+intelmac-2-py3-none-any.whl").write_bytes(b"y")
    assert wheel_names.main(["--tag", "v2.15.0-3", str(tmp_path)]) == 1
    assert (tmp_path / TORCH).is_file()


def test_a_bad_tag_says_which_tags_are_valid() -> None:
    with pytest.raises(wheel_names.WheelNameError, match="v<line>-<build> or release-YYYYMMDD"):
        wheel_names.build_tag("v2.15.0")
