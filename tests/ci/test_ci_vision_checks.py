"""ci/vision_checks.py and test_wheel.py --companion-version, against stand-in torchvisions.

No torchvision that runs on this machine's CPU-only torch can be installed offline, so the
checks run against stand-ins (tests/vision_standin.py): they test the checks, the
registration probes and the reporting, not torchvision's kernels; the release workflow's
test-wheel job runs the same checks on our real torchvision.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.vision_standin import stand_in

REPO = Path(__file__).resolve().parents[2]
CHECKS = REPO / "ci" / "vision_checks.py"

def run_checks(site: Path, *args: str) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(site))
    done = subprocess.run(
        [sys.executable, str(CHECKS), *args],
        capture_output=True, text=True, env=env, cwd=site, check=False, timeout=300,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_checks_pass_on_a_conforming_torchvision(tmp_path: Path) -> None:
    code, out = run_checks(stand_in(tmp_path), "--expect-version", "0.1.0+intelmac",
                           "--device", "cpu")  # fmt: skip
    assert code == 0, out
    for name in ("torchvision-version", "requires-our-torch", "ops-registered",
                 "mps-kernels-registered", "cpu-nms", "cpu-roi_align", "cpu-ps_roi_pool",
                 "cpu-roi_pool", "cpu-ps_roi_align", "cpu-nms"):  # fmt: skip
        assert f"PASS {name}" in out
    # Image I/O: decode and encode against Pillow, JPEG, PNG and WebP.
    for name in ("image-io-decode-jpeg", "image-io-decode-png", "image-io-decode-webp",
                 "image-io-encode-jpeg", "image-io-encode-png", "image-io-read-image"):
        assert f"PASS {name}" in out
    # --device runs each op there against the CPU, forward and backward.
    for op in ("nms", "roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool"):
        assert f"PASS cpu-vs-cpu-{op}" in out


def test_matrix_entries_name_the_companion_and_tags_refuse_it_unpinned(tmp_path: Path) -> None:
    from ci_support import copy_catalog, edit_catalog
    from intelmac_torch_builder.ci import matrix
    from intelmac_torch_builder.core import catalog as catalog_module
    from intelmac_torch_builder.core.errors import BuildError

    real = catalog_module.load()
    for kind in ("build", "test", "regress"):
        for entry in matrix.matrix(real, kind, real.lines)["include"]:
            companion = real.line(entry["version"]).companion
            assert companion is not None
            assert entry["companion_wheel_version"] == f"{companion.version}+intelmac"
    path = copy_catalog(tmp_path)

    def pin_torch_only(document: dict[str, Any]) -> None:
        for line in document["lines"]:
            line["source"]["sha256"] = line["source"]["sha256"] or "0" * 64

    edit_catalog(path, pin_torch_only)
    edited = catalog_module.load(path)
    (build,) = matrix.matrix(edited, "build", [edited.line("2.15.0")])["include"]
    assert build["fetch_args"] == "--trust-on-first-use"  # a trial build may try it
    with pytest.raises(BuildError, match="2.15.0's torchvision 0.29.2, whose source"):
        matrix.select_lines(edited, tag="v2.15.0-1")
    assert matrix.select_lines(edited, tag="v2.14.1-1")[0].version == "2.14.1"


@pytest.mark.parametrize(
    ("knobs", "failing"),
    [
        ({"mps": False}, "mps-kernels-registered: no MPS kernel for nms, roi_align, roi_pool"),
        ({"broken_nms": True}, "cpu-nms: kept [3, 0, 1, 2], expected [3, 2]"),
        ({"requires": "torch"}, "requires-our-torch"),
        ({"requires": "torch==2.2.2"}, "requires-our-torch"),
        ({"version": "0.1.0"}, "torchvision-version: torchvision 0.1.0, expected 0.1.0+intelmac"),
        # Built without a codec (setup.py found no libwebp / libjpeg): torchvision's own words.
        ({"missing": ["webp"]}, "image-io-decode-webp: raised"),
        ({"missing": ["jpeg"]}, "image-io-encode-jpeg: raised"),
        ({"swap_channels": ["png"]}, "image-io-decode-png: decode_png: differs from Pillow's decoding"),
    ],
)
def test_checks_catch_a_wrong_torchvision(tmp_path: Path, knobs: dict[str, Any],
                                          failing: str) -> None:
    code, out = run_checks(stand_in(tmp_path, **knobs), "--expect-version", "0.1.0+intelmac")
    # A broken codec also fails read_image; the other knobs fail exactly one check.
    image = {"missing", "swap_channels"} & set(knobs)
    assert code >= 1 if image else code == 1, out
    assert f"FAIL {failing}" in out


def _wheel(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("placeholder", "")
    return path


def test_wheel_selection_keeps_torch_and_torchvision_apart(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "ci"))
    try:
        import test_wheel  # the CI script itself, as the workflow runs it
    finally:
        sys.path.remove(str(REPO / "ci"))
    torch_wheel = _wheel(tmp_path, "torch-2.14.1+intelmac-cp312-cp312-macosx_14_0_x86_64.whl")
    vision = _wheel(tmp_path, "torchvision-0.29.1+intelmac-cp312-cp312-macosx_14_0_x86_64.whl")
    assert test_wheel.select_wheel(tmp_path, "cp312") == torch_wheel.resolve()
    assert test_wheel.select_wheel(tmp_path, "cp312", project="torchvision") == vision.resolve()
    # 0.29.2 builds against torch's stable ABI: one py3-none wheel for every Python.
    vision.unlink()
    stable = _wheel(tmp_path, "torchvision-0.29.2+intelmac-py3-none-macosx_14_0_x86_64.whl")
    assert test_wheel.select_wheel(tmp_path, "cp313", project="torchvision") == stable.resolve()
    with pytest.raises(test_wheel.WheelSelectionError, match="no torchvision-"):
        test_wheel.select_wheel(tmp_path / "empty", "cp312", project="torchvision")


def test_a_missing_codec_fails_with_torchvision_s_message(tmp_path: Path) -> None:
    code, out = run_checks(stand_in(tmp_path, missing=["png"]), "--expect-version", "0.1.0+intelmac")
    assert code == 3, out  # decode, encode and read_image of a PNG
    assert "torchvision not compiled with libpng support" in out
    assert "PASS image-io-decode-jpeg" in out and "PASS image-io-decode-webp" in out
