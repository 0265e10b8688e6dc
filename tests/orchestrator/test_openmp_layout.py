"""The OpenMP runtime sits where torch.compile's ``-lomp`` finds it: upstream's layout.

The expectation is read from upstream's official arm64 wheels of every line (unpacked by
../shared/tools/upstream-wheel): one runtime, torch/lib/libomp.dylib, linked by libtorch_cpu
through @rpath (2.6.0, 2.9.1) or @loader_path (2.14.1, 2.15.0), and torch/include/omp.h.
Wrong layouts are written as small Mach-O files (tests/macho_fixture.py): delocate's
torch/.dylibs/ copy, which repair moves, and the dangling libiomp5 link of upstream's install
step that scikit-build-core drops.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
from intelmac_torch_builder.core import _binaries, catalog
from intelmac_torch_builder.core.openmp_layout import (
    OMP_HEADER,
    OMP_LIBRARY,
    problems,
    read_machos,
    relink_plan,
)
from intelmac_torch_builder.stages import verify

from tests.macho_fixture import dylib

from ..patches_cpp.objc_lines import REQUIRE_ENV, wheel_root

CPU = "torch/lib/libtorch_cpu.dylib"
DELOCATED = "torch/.dylibs/libomp.dylib"


def unpacked(root: Path) -> tuple[set[str], dict[str, list[_binaries.MachOSlice]]]:
    """An unpacked wheel's members and its Mach-O libraries and extensions, read."""
    members, machos = set(), {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            member = path.relative_to(root).as_posix()
            members.add(member)
            if path.suffix in (".dylib", ".so"):
                with path.open("rb") as handle:
                    if _binaries.kind(handle.read(8)) == "macho":
                        machos[member] = _binaries.read_macho(path)
    return members, machos


def layout(tmp_path: Path, files: dict[str, dict[str, object] | bytes]) -> Path:
    """A wheel folder: Mach-O files from macho_fixture.dylib's arguments, other files as bytes."""
    root = tmp_path / "wheel"
    for member, spec in files.items():
        path = root / member
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, bytes):
            path.write_bytes(spec)
        else:
            dylib(path, **spec)  # type: ignore[arg-type]
    return root


def zipped(root: Path, wheel: Path) -> Path:
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(root).as_posix())
    return wheel


#: Our wheel as delocate leaves it: libtorch_cpu links the runtime delocate copied.
AS_DELOCATED = {
    CPU: {"install_id": "@rpath/libtorch_cpu.dylib", "rpaths": ["@loader_path"],
          "loads": ["@loader_path/../.dylibs/libomp.dylib", "/usr/lib/libSystem.B.dylib"]},
    DELOCATED: {"install_id": "/DLC/torch/.dylibs/libomp.dylib"},
    "torch/_C.cpython-312-darwin.so": {"rpaths": ["@loader_path/lib"],
                                       "loads": ["@rpath/libtorch_cpu.dylib"]},
    OMP_HEADER: b"/* omp.h */\n",
}  # fmt: skip


@pytest.mark.parametrize("line", [line.version for line in catalog.load().lines])
def test_upstreams_wheels_have_the_layout(line: str) -> None:
    root = wheel_root(line)
    if not (root / "torch" / "lib").is_dir():
        why = f"no unpacked upstream {line} wheel: make upstream-material fetches it"
        if os.environ.get(REQUIRE_ENV) or os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    members, machos = unpacked(root)
    assert problems(members, machos) == []
    # libtorch_cpu links the one runtime, whichever way the line spells it.
    assert any(_binaries.read_macho(root / CPU)[0].dylibs.count(name) for name in
               ("@rpath/libomp.dylib", "@loader_path/libomp.dylib"))  # fmt: skip
    assert relink_plan(members, machos) is None  # repair leaves such a wheel as it is


def test_delocates_layout_is_refused_and_the_plan_fixes_it(tmp_path: Path) -> None:
    members, machos = unpacked(layout(tmp_path / "before", AS_DELOCATED))
    found = problems(members, machos)
    assert found == [
        f"no {OMP_LIBRARY}: torch.compile's CPU code links -lomp against torch/lib",
        f"a second OpenMP runtime {DELOCATED} (one process would load two)",
        f"{CPU} links @loader_path/../.dylibs/libomp.dylib, which finds {DELOCATED}, not {OMP_LIBRARY}",
    ]
    plan = relink_plan(members, machos)
    assert plan is not None and plan.source == DELOCATED
    assert plan.changes == ((CPU, "@loader_path/../.dylibs/libomp.dylib", "@loader_path/libomp.dylib"),)
    # The wheel as repair leaves it: the runtime moved, each change made.
    after = dict(AS_DELOCATED)
    del after[DELOCATED]
    after[OMP_LIBRARY] = {"install_id": "@rpath/libomp.dylib"}
    after[CPU] = {**AS_DELOCATED[CPU], "loads": ["@loader_path/libomp.dylib"]}  # type: ignore[dict-item]
    assert problems(*unpacked(layout(tmp_path / "after", after))) == []


def test_a_binary_outside_torch_lib_is_pointed_at_it(tmp_path: Path) -> None:
    files = {**AS_DELOCATED, "functorch/_C.cpython-312-darwin.so": {
        "loads": ["@loader_path/../torch/.dylibs/libomp.dylib"]}}
    plan = relink_plan(*unpacked(layout(tmp_path, files)))
    assert plan is not None
    assert ("functorch/_C.cpython-312-darwin.so", "@loader_path/../torch/.dylibs/libomp.dylib",
            "@loader_path/../torch/lib/libomp.dylib") in plan.changes  # fmt: skip


def test_a_dangling_libiomp5_and_a_missing_header(tmp_path: Path) -> None:
    """Upstream's install step links libiomp5, whose file scikit-build-core never packs."""
    files = {
        CPU: {"rpaths": ["@loader_path"], "loads": ["@rpath/libiomp5.dylib"]},
        OMP_LIBRARY: {"install_id": "@rpath/libomp.dylib"},
    }
    found = problems(*unpacked(layout(tmp_path, files)))
    assert found == [
        f"no {OMP_HEADER}: torch.compile's CPU code includes it from torch/include",
        f"{CPU} links @rpath/libiomp5.dylib, which finds nothing in the wheel, not {OMP_LIBRARY}",
    ]


def test_two_runtimes_stop_the_repair(tmp_path: Path) -> None:
    files = {**AS_DELOCATED, OMP_LIBRARY: {"install_id": "@rpath/libomp.dylib"}}
    with pytest.raises(Exception, match="carries 2 OpenMP runtimes"):
        relink_plan(*unpacked(layout(tmp_path, files)))


def test_verify_checks_the_layout_in_the_wheel(tmp_path: Path) -> None:
    bad = zipped(layout(tmp_path / "bad", AS_DELOCATED), tmp_path / "bad.whl")
    with zipfile.ZipFile(bad) as archive:
        assert set(read_machos(archive)) == {CPU, DELOCATED, "torch/_C.cpython-312-darwin.so"}
        (finding,) = verify.check_openmp(archive, True)
        assert verify.check_openmp(archive, False) == []  # a companion or a generic build
    assert not finding.ok and f"no {OMP_LIBRARY}" in finding.detail
    good = dict(AS_DELOCATED)
    del good[DELOCATED]
    good[OMP_LIBRARY] = {"install_id": "@rpath/libomp.dylib"}
    good[CPU] = {**AS_DELOCATED[CPU], "loads": ["@rpath/libomp.dylib"]}  # type: ignore[dict-item]
    with zipfile.ZipFile(zipped(layout(tmp_path / "good", good), tmp_path / "good.whl")) as archive:
        (finding,) = verify.check_openmp(archive, True)
    assert finding.ok, finding.detail


def _rewrite(path: Path, install_id: str | None = None,
             change: tuple[str, str] | None = None) -> None:
    """What install_name_tool -id / -change does, for a macho_fixture file: written again."""
    (piece,) = _binaries.read_macho(path)
    loads = [change[1] if change and load == change[0] else load for load in piece.dylibs]
    dylib(path, install_id=install_id or piece.install_id, loads=loads, rpaths=piece.rpaths)


def stand_in_delocate(monkeypatch: pytest.MonkeyPatch, calls: list[tuple[str, ...]]) -> None:
    """delocate's Python API, which repair uses on a Mac only, for macho_fixture wheels.

    InWheel unpacks, yields the folder and packs it again (RECORD is not rewritten here);
    set_install_id / set_install_name record the call and make the change install_name_tool
    would make. What is tested is ours: which file moves, which names change, to what.
    """
    import contextlib
    import sys
    import tempfile
    import types

    @contextlib.contextmanager
    def in_wheel(in_wheel: str, out_wheel: str):  # type: ignore[no-untyped-def]
        with tempfile.TemporaryDirectory() as folder:
            with zipfile.ZipFile(in_wheel) as archive:
                archive.extractall(folder)
            yield folder
            zipped(Path(folder), Path(out_wheel))

    def set_install_id(filename: str, install_id: str) -> None:
        calls.append(("id", Path(filename).name, install_id))
        _rewrite(Path(filename), install_id=install_id)

    def set_install_name(filename: str, old: str, new: str) -> None:
        calls.append(("change", Path(filename).name, old, new))
        _rewrite(Path(filename), change=(old, new))

    package = types.ModuleType("delocate")
    tools = types.ModuleType("delocate.tools")
    wheeltools = types.ModuleType("delocate.wheeltools")
    tools.set_install_id, tools.set_install_name = set_install_id, set_install_name  # type: ignore[attr-defined]
    wheeltools.InWheel = in_wheel  # type: ignore[attr-defined]
    for name, module in (("delocate", package), ("delocate.tools", tools),
                         ("delocate.wheeltools", wheeltools)):  # fmt: skip
        monkeypatch.setitem(sys.modules, name, module)


def test_repair_moves_delocates_copy_into_torch_lib(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from intelmac_torch_builder.core.openmp_layout import OMP_ID, relocate

    calls: list[tuple[str, ...]] = []
    stand_in_delocate(monkeypatch, calls)
    wheel = zipped(layout(tmp_path / "delocated", AS_DELOCATED),
                   tmp_path / "torch-2.14.1+intelmac-cp312-cp312-macosx_14_0_x86_64.whl")
    out = relocate(wheel, tmp_path / "out")
    assert out == tmp_path / "out" / wheel.name
    assert calls == [
        ("id", "libomp.dylib", OMP_ID),
        ("change", "libtorch_cpu.dylib", "@loader_path/../.dylibs/libomp.dylib",
         "@loader_path/libomp.dylib"),
    ]  # fmt: skip
    with zipfile.ZipFile(out) as archive:
        names = set(archive.namelist())
        assert OMP_LIBRARY in names and not any("/.dylibs/" in name for name in names)
        (finding,) = verify.check_openmp(archive, True)
    assert finding.ok, finding.detail
    # A wheel already in upstream's layout is left as it is, with no Mac tool called.
    calls.clear()
    assert relocate(out, tmp_path / "again") == out and calls == []
