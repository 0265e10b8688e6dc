"""ci/vision_checks.py and test_wheel.py --companion-version, against stand-in torchvisions.

No torchvision that runs on this machine's CPU-only torch can be installed offline (the
registry's Linux torchvision wheels link CUDA torch), so the checks run against small
stand-in packages: they register the five ops with the dispatcher as torchvision's
``_C`` does, for CPU (and MPS, when built "with FORCE_MPS"), with kernels written in torch.
They test the checks, the registration probes and the reporting, not torchvision's kernels;
the release workflow's test-wheel job runs the same checks on our real torchvision.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
CHECKS = REPO / "ci" / "vision_checks.py"

STAND_IN = '''
"""Stand-in torchvision: the five MPS-capable ops, registered as torchvision's _C does."""
import json
import torch
import torch.nn.functional as F

KNOBS = json.loads({knobs!r})
__version__ = KNOBS["version"]
_lib = torch.library.Library("torchvision", "DEF")
_SCHEMAS = {{
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align": "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                 "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "roi_pool": "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                "SymInt pooled_width) -> Tensor",
    "ps_roi_align": "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, "
                    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio) -> Tensor",
    "ps_roi_pool": "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, "
                   "SymInt pooled_height, SymInt pooled_width) -> Tensor",
}}


def _nms(dets, scores, iou_threshold):
    order = torch.argsort(scores, descending=True)
    if KNOBS.get("broken_nms"):
        return order
    keep = []
    area = (dets[:, 2] - dets[:, 0]) * (dets[:, 3] - dets[:, 1])
    for i in order.tolist():
        ok = True
        for j in keep:
            lt = torch.maximum(dets[i, :2], dets[j, :2])
            rb = torch.minimum(dets[i, 2:], dets[j, 2:])
            inter = (rb - lt).clamp(min=0).prod()
            if inter / (area[i] + area[j] - inter) > iou_threshold:
                ok = False
                break
        if ok:
            keep.append(i)
    return torch.tensor(keep, dtype=torch.int64, device=dets.device)


def _crops(x, rois, scale, ph, pw, pool):
    out = []
    for roi in rois:
        b, x1, y1, x2, y2 = [float(v) for v in roi]
        c0, r0 = int(x1 * scale), int(y1 * scale)
        c1, r1 = max(int(x2 * scale), c0 + 1), max(int(y2 * scale), r0 + 1)
        out.append(pool(x[int(b), :, r0:r1 + 1, c0:c1 + 1], (ph, pw)))
    return torch.stack(out)


def _sensitive(pooled, ph, pw):
    # Output bin (i, j) of output channel c reads input channel (c * ph + i) * pw + j.
    k, channels = pooled.shape[:2]
    out = pooled.new_empty(k, channels // (ph * pw), ph, pw)
    for c in range(out.shape[1]):
        for i in range(ph):
            for j in range(pw):
                out[:, c, i, j] = pooled[:, (c * ph + i) * pw + j, i, j]
    return out


_KERNELS = {{
    "nms": _nms,
    "roi_align": lambda x, r, s, ph, pw, sr, al: _crops(x, r, s, ph, pw, F.adaptive_avg_pool2d),
    "roi_pool": lambda x, r, s, ph, pw: _crops(x, r, s, ph, pw, F.adaptive_max_pool2d),
    "ps_roi_align": lambda x, r, s, ph, pw, sr: _sensitive(
        _crops(x, r, s, ph, pw, F.adaptive_avg_pool2d), ph, pw),
    "ps_roi_pool": lambda x, r, s, ph, pw: _sensitive(
        _crops(x, r, s, ph, pw, F.adaptive_max_pool2d), ph, pw),
}}
for _name, _schema in _SCHEMAS.items():
    _lib.define(_schema)
    # The kernels are plain torch code: registered for autograd too, so backward works.
    for _key in ["CPU", "AutogradCPU"] + (["MPS"] if KNOBS["mps"] else []):
        _lib.impl(_name, _KERNELS[_name], _key)
'''

OPS_PY = '''
import torch


def nms(boxes, scores, iou_threshold):
    return torch.ops.torchvision.nms(boxes, scores, iou_threshold)


def roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
    return torch.ops.torchvision.roi_align(input, boxes, spatial_scale, output_size, output_size,
                                           sampling_ratio, aligned)


def roi_pool(input, boxes, output_size, spatial_scale=1.0):
    return torch.ops.torchvision.roi_pool(input, boxes, spatial_scale, output_size, output_size)


def ps_roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1):
    return torch.ops.torchvision.ps_roi_align(input, boxes, spatial_scale, output_size,
                                              output_size, sampling_ratio)


def ps_roi_pool(input, boxes, output_size, spatial_scale=1.0):
    return torch.ops.torchvision.ps_roi_pool(input, boxes, spatial_scale, output_size,
                                             output_size)
'''


def stand_in(root: Path, **knobs: Any) -> Path:
    """A site folder with a stand-in torchvision and its dist-info."""
    settings = {"version": "0.1.0+intelmac", "mps": True, "requires": f"torch=={torch.__version__}"}
    settings.update(knobs)
    package = root / "torchvision"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        STAND_IN.format(knobs=json.dumps(settings)) + "\nfrom . import ops\n"
    )
    (package / "ops.py").write_text(OPS_PY)
    dist_info = root / f"torchvision-{settings['version']}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torchvision\nVersion: {settings['version']}\n"
        f"Requires-Dist: numpy\nRequires-Dist: {settings['requires']}\n"
    )
    return root


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
    ],
)
def test_checks_catch_a_wrong_torchvision(tmp_path: Path, knobs: dict[str, Any],
                                          failing: str) -> None:
    code, out = run_checks(stand_in(tmp_path, **knobs), "--expect-version", "0.1.0+intelmac")
    assert code == 1, out
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
