"""verify refuses a wheel that lacks a file the series creates or changes and the install puts
in the wheel (a Python module, a stub, an installed header).

Before, ``check_patched_code`` compared only the series' files that were present: a wheel
without ``torch/backends/mps/_device_policy.py`` (which the patched ``__init__.py`` imports)
or without the new ``MPSDeviceSelection.h`` (which an installed header includes) passed verify
and was indexed. Shown here on a small wheel and on each line's official wheel, with the
series placed as the rehearsal places it.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog
from intelmac_torch_builder.core._log import Log
from intelmac_torch_builder.core.errors import BuildError
from intelmac_torch_builder.maint import official_wheels, rehearse
from intelmac_torch_builder.stages import verify

from ..patches_cpp.objc_lines import skip_or_fail

SERIES = """\
--- a/torch/backends/mps/__init__.py
+++ b/torch/backends/mps/__init__.py
@@ -1 +1,2 @@
 import os
+from . import _device_policy
--- /dev/null
+++ b/torch/backends/mps/_device_policy.py
@@ -0,0 +1 @@
+POLICY = 1
--- /dev/null
+++ b/aten/src/ATen/mps/MPSDeviceSelection.h
@@ -0,0 +1 @@
+#pragma once
--- a/aten/src/ATen/mps/MPSDevice.mm
+++ b/aten/src/ATen/mps/MPSDevice.mm
@@ -1 +1 @@
-old
+new
"""

PATCHED = {
    "torch/backends/mps/__init__.py": b"import os\nfrom . import _device_policy\n",
    "torch/backends/mps/_device_policy.py": b"POLICY = 1\n",
    "aten/src/ATen/mps/MPSDeviceSelection.h": b"#pragma once\n",
    "aten/src/ATen/mps/MPSDevice.mm": b"new\n",
}
INSTALLED = {
    "torch/backends/mps/__init__.py": PATCHED["torch/backends/mps/__init__.py"],
    "torch/backends/mps/_device_policy.py": PATCHED["torch/backends/mps/_device_policy.py"],
    "torch/include/ATen/mps/MPSDeviceSelection.h": PATCHED["aten/src/ATen/mps/MPSDeviceSelection.h"],
}


def _finding(tmp_path: Path, members: dict[str, bytes], patches: tuple[Path, ...],
             tree: Path) -> verify.Finding:  # fmt: skip
    wheel = tmp_path / "torch-2.6.0+intelmac-cp312-cp312-macosx_11_0_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with zipfile.ZipFile(wheel) as archive:
        (finding,) = verify.check_patched_code(archive, tree, patches)
    return finding


def _small_series(tmp_path: Path) -> tuple[tuple[Path, ...], Path]:
    patch = tmp_path / "0001-series.patch"
    patch.write_text(SERIES)
    tree = tmp_path / "patched"
    for path, data in PATCHED.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(data)
    return (patch,), tree


def test_a_wheel_with_every_series_file_passes(tmp_path: Path) -> None:
    patches, tree = _small_series(tmp_path)
    finding = _finding(tmp_path, INSTALLED, patches, tree)
    # The .mm is a build input: the install puts no copy of it in the wheel.
    assert finding.ok and "3 patched files present" in finding.detail, finding.detail


@pytest.mark.parametrize(("left_out", "says"), [
    ("torch/backends/mps/_device_policy.py", "the series creates torch/backends/mps/_device_policy.py"),
    ("torch/include/ATen/mps/MPSDeviceSelection.h", "the series creates aten/src/ATen/mps/MPSDeviceSelection.h"),
    ("torch/backends/mps/__init__.py", "the series changes torch/backends/mps/__init__.py"),
])  # fmt: skip
def test_a_wheel_without_a_series_file_fails(tmp_path: Path, left_out: str, says: str) -> None:
    patches, tree = _small_series(tmp_path)
    members = {name: data for name, data in INSTALLED.items() if name != left_out}
    finding = _finding(tmp_path, members, patches, tree)
    assert not finding.ok, finding.detail
    assert f"{left_out}: missing; {says}" in finding.detail, finding.detail


#: Files every line's series creates, which the install puts in the wheel.
NEW_IN_EVERY_LINE = ("torch/backends/mps/_device_policy.py", "torch/include/ATen/mps/MPSDeviceSelection.h")


@pytest.mark.parametrize("version", [line.version for line in catalog.load().lines])
def test_the_official_wheel_with_the_series_loses_a_new_file(tmp_path: Path, version: str) -> None:
    """The series placed in the line's official wheel as the rehearsal's build places it: every
    file is found; leave out a new module or header and verify names it."""
    try:
        official, _ = official_wheels.fetch("torch", version, "arm64", Log.create(), offline=True)
    except BuildError as exc:
        skip_or_fail(f"{exc} (make upstream-material fetches it)")
    options = rehearse.line_options(version, tmp_path / "work", None)
    tree = tmp_path / "patched"
    with zipfile.ZipFile(official) as source:
        landing = rehearse.patched_files(source, options.line.patches, tree)
        members, removed, _ = rehearse.series_members(source, landing, tree)
    assert not removed
    assert set(NEW_IN_EVERY_LINE) <= set(members), sorted(members)
    whole = _finding(tmp_path, members, options.line.patches, tree)
    assert whole.ok, whole.detail
    for left_out in NEW_IN_EVERY_LINE:
        finding = _finding(tmp_path, {k: v for k, v in members.items() if k != left_out},
                           options.line.patches, tree)  # fmt: skip
        assert not finding.ok and f"{left_out}: missing; the series creates" in finding.detail, finding.detail
