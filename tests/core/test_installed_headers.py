"""Headers in the form upstream's install step leaves them (2.14's TORCH_STABLE_ONLY guard),
and verify's patched-code check on them."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from intelmac_torch_builder.core import catalog, installed_headers
from intelmac_torch_builder.stages import verify

from ..patches_cpp.objc_lines import REQUIRE_ENV, wheel_root

SOURCE = b"#pragma once\n\nnamespace at::mps {\nint x();\n} // namespace at::mps\n"
OPEN = b"#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)\n"
CLOSE = (b"\n#else\n#error \"This file should not be included when either TORCH_STABLE_ONLY or "
         b"TORCH_TARGET_VERSION is defined.\"\n#endif  // !defined(TORCH_STABLE_ONLY) && "
         b"!defined(TORCH_TARGET_VERSION)\n")  # fmt: skip


def test_a_guarded_header_splits_into_its_guard_and_the_source_file() -> None:
    found = installed_headers.split(OPEN + SOURCE + CLOSE)
    assert found is not None
    guard, body = found
    assert body == SOURCE and guard.wrap(body) == OPEN + SOURCE + CLOSE
    assert installed_headers.source_form(OPEN + SOURCE + CLOSE) == SOURCE
    assert installed_headers.split(SOURCE) is None and installed_headers.source_form(SOURCE) == SOURCE


def test_a_guard_without_its_closing_lines_is_an_error() -> None:
    with pytest.raises(ValueError, match="#else/#error/#endif"):
        installed_headers.split(OPEN + SOURCE)


def _check(tmp_path: Path, installed: bytes, patched: bytes) -> verify.Finding:
    patch = tmp_path / "0001.patch"
    patch.write_text(
        "--- a/aten/src/ATen/mps/MPSDevice.h\n+++ b/aten/src/ATen/mps/MPSDevice.h\n"
        "@@ -1 +1 @@\n-old\n+new\n"
    )
    tree = tmp_path / "patched"
    (tree / "aten/src/ATen/mps").mkdir(parents=True)
    (tree / "aten/src/ATen/mps/MPSDevice.h").write_bytes(patched)
    wheel = tmp_path / "torch.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch/include/ATen/mps/MPSDevice.h", installed)
    with zipfile.ZipFile(wheel) as archive:
        (finding,) = verify.check_patched_code(archive, tree, (patch,))
    return finding


@pytest.mark.parametrize(("installed", "ok", "message"), [
    (SOURCE, True, "1 patched files present"),
    # 2.14.1 and 2.15.0: the install step wrapped the patched header (the official wheels').
    (OPEN + SOURCE + CLOSE, True, "1 patched files present"),
    (OPEN + SOURCE.replace(b"int x", b"long x") + CLOSE, False, "inside the install step's guard, differs"),
    (SOURCE.replace(b"int x", b"long x"), False, "differs from the patched"),
    (OPEN + SOURCE, False, "opens with the install step's guard but"),
])  # fmt: skip
def test_verify_compares_a_header_inside_the_install_guard(
    tmp_path: Path, installed: bytes, ok: bool, message: str
) -> None:
    finding = _check(tmp_path, installed, SOURCE)
    assert finding.ok is ok and message in finding.detail, finding.detail


def test_a_source_header_without_a_final_newline_is_wrapped_as_the_install_step_does() -> None:
    """The install step appends its ``\\n#else`` to the file as it is: a source header whose
    last line has no newline (2.14.1's and 2.15.0's symm_mem/env.hpp) gets no blank line."""
    unterminated = SOURCE.rstrip(b"\n")
    found = installed_headers.split(OPEN + unterminated + CLOSE)
    assert found is not None
    guard, body = found
    assert body == unterminated and guard.wrap(body) == OPEN + unterminated + CLOSE


@pytest.mark.parametrize("line", [line.version for line in catalog.load().lines])
def test_every_guarded_header_of_the_official_wheel_splits_and_wraps_back(line: str) -> None:
    """Each header the line's official wheel installs inside the guard is read as the install
    step wrote it: the guard and the source file, which wrapped again is the installed file."""
    include = wheel_root(line) / "torch" / "include"
    if not include.is_dir():
        why = f"no unpacked upstream {line} wheel: make upstream-material fetches it"
        if os.environ.get(REQUIRE_ENV) or os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    guarded, refused = 0, []
    for path in sorted(include.rglob("*")):
        if not path.is_file() or not path.name.endswith((".h", ".hpp", ".cuh")):
            continue
        installed = path.read_bytes()
        try:
            found = installed_headers.split(installed)
        except ValueError as exc:
            refused.append(f"{path.relative_to(include)}: {exc}")
            continue
        if found is not None:
            guarded += 1
            guard, body = found
            assert guard.wrap(body) == installed, path
    assert refused == []
    # 2.14 wraps every header outside the stable-ABI folders; earlier lines none.
    assert (guarded > 1000) == (Version(line) >= Version("2.14")), guarded
