"""Where a macOS torch wheel keeps OpenMP's runtime: ``torch/lib/libomp.dylib``, as upstream's do.

torch.compile's CPU code is compiled on the user's Mac and linked with ``-lomp`` against
torch/lib: torch/_inductor/cpp_builder.py (2.6.0 to 2.15.0) appends ``omp`` to the libraries
on macOS, with ``TORCH_LIB_PATH`` among the library folders and torch/include (omp.h) among
the include folders. Upstream's arm64 wheels of every line carry exactly one runtime there,
linked by libtorch_cpu through ``@rpath/libomp.dylib`` (2.6.0, 2.9.1) or
``@loader_path/libomp.dylib`` (2.14.1, 2.15.0).

delocate bundles the runtime our libtorch_cpu links into torch/.dylibs/ instead, where
``-lomp`` never looks. ``relink_plan`` says what to move into torch/lib and which install
names change; ``relocate`` does it on a Mac (delocate's install_name_tool wrappers, which
re-sign what they change). ``problems`` is verify's check of the result.
"""

from __future__ import annotations

import posixpath
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from ._binaries import UNREADABLE_MACHO, MachOSlice, kind, read_macho
from ._fsutil import CHUNK
from .errors import BuildError

#: The one runtime, under the name ``-lomp`` finds in torch/lib.
OMP_LIBRARY = "torch/lib/libomp.dylib"
#: Its header, for the same compile (torch/include is on its include path).
OMP_HEADER = "torch/include/omp.h"
#: The install id the runtime gets there (conda-forge's own, and upstream's 2.6.0 wheel's).
OMP_ID = "@rpath/libomp.dylib"
#: File names of an OpenMP runtime: LLVM's libomp, its libiomp5 and libgomp aliases, Intel's.
_RUNTIME = re.compile(r"^lib(omp|iomp5|gomp)(\.[0-9]+)*\.dylib$")


def is_runtime(name: str) -> bool:
    return _RUNTIME.match(posixpath.basename(name)) is not None


def resolve(binary: str, load: str, rpaths: list[str], members: AbstractSet[str]) -> str | None:
    """The wheel member a load command of ``binary`` (a wheel path) finds, if any."""
    folder = posixpath.dirname(binary)

    def inside(path: str) -> str:
        return posixpath.normpath(path.replace("@loader_path", folder, 1).lstrip("/"))

    if load.startswith("@loader_path/"):
        candidates = [inside(load)]
    elif load.startswith("@rpath/"):
        tail = load.removeprefix("@rpath/")
        candidates = [inside(posixpath.join(rpath, tail)) for rpath in rpaths
                      if rpath.startswith("@loader_path")]  # fmt: skip
    else:
        return None  # an absolute path: outside the wheel
    return next((path for path in candidates if path in members), None)


def _links(binary: str, slices: list[MachOSlice]) -> list[tuple[str, list[str]]]:
    """(install name, rpaths) of each OpenMP runtime ``binary`` loads, per slice."""
    return [(load, piece.rpaths) for piece in slices for load in piece.dylibs if is_runtime(load)]


def problems(members: AbstractSet[str], machos: Mapping[str, list[MachOSlice]]) -> list[str]:
    """How a torch wheel's OpenMP differs from upstream's layout (empty: it matches).

    ``members``: the wheel's file names; ``machos``: its Mach-O files, read.
    """
    found = []
    if OMP_LIBRARY not in members:
        found.append(f"no {OMP_LIBRARY}: torch.compile's CPU code links -lomp against torch/lib")
    if OMP_HEADER not in members:
        found.append(f"no {OMP_HEADER}: torch.compile's CPU code includes it from torch/include")
    others = sorted(name for name in members if is_runtime(name) and name != OMP_LIBRARY)
    found += [f"a second OpenMP runtime {name} (one process would load two)" for name in others]
    for binary, slices in sorted(machos.items()):
        for load, rpaths in _links(binary, slices):
            target = resolve(binary, load, rpaths, members)
            if target != OMP_LIBRARY:
                found.append(
                    f"{binary} links {load}, which finds {target or 'nothing in the wheel'}, "
                    f"not {OMP_LIBRARY}"
                )
    return found


@dataclass(frozen=True)
class RelinkPlan:
    """Move ``source`` to OMP_LIBRARY; change each (binary, old name, new name)."""

    source: str
    changes: tuple[tuple[str, str, str], ...]


def _name_from(binary: str) -> str:
    """How ``binary`` names OMP_LIBRARY: relative to itself, as 2.14.1's libtorch_cpu does."""
    relative = posixpath.relpath(OMP_LIBRARY, posixpath.dirname(binary))
    return f"@loader_path/{relative}"


def relink_plan(
    members: AbstractSet[str], machos: Mapping[str, list[MachOSlice]]
) -> RelinkPlan | None:
    """What puts a delocated wheel's one OpenMP runtime at OMP_LIBRARY; None if it is there."""
    runtimes = sorted(name for name in members if is_runtime(name))
    if runtimes == [OMP_LIBRARY] or not runtimes:
        return None
    if len(runtimes) > 1:
        raise BuildError(
            f"the wheel carries {len(runtimes)} OpenMP runtimes ({', '.join(runtimes)}); it must "
            f"carry one, at {OMP_LIBRARY}. Build against one OpenMP (the pinned llvm-openmp, or "
            "one --libomp) and repair again."
        )
    (source,) = runtimes
    changes: dict[tuple[str, str], str] = {}
    for binary, slices in sorted(machos.items()):
        for load, rpaths in _links(binary, slices):
            if resolve(binary, load, rpaths, members) == source:
                changes[(binary, load)] = _name_from(binary)
    return RelinkPlan(source, tuple((binary, old, new) for (binary, old), new in changes.items()))


def read_machos(archive: zipfile.ZipFile) -> dict[str, list[MachOSlice]]:
    """Every Mach-O file in a wheel, read (load commands and symbols), by member name."""
    found: dict[str, list[MachOSlice]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        local = Path(scratch) / "binary"
        for info in archive.infolist():
            if info.is_dir() or info.file_size < 16:
                continue
            with archive.open(info) as handle:
                if kind(handle.read(8)) != "macho":
                    continue
            with archive.open(info) as src, local.open("wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
            try:
                found[info.filename] = read_macho(local)
            except UNREADABLE_MACHO:
                continue  # verify's library-path check names it
    return found


def outside_rpaths(machos: Mapping[str, list[MachOSlice]]) -> dict[str, list[str]]:
    """The LC_RPATHs of each binary that point outside the wheel (not ``@loader_path``- or
    ``@executable_path``-relative), which ``delocate --sanitize-rpaths`` leaves in place.

    delocate 0.13 sanitizes only the binaries that load another library of the wheel or one it
    bundles, deleting one copy of each name; a binary that loads neither (libc10.dylib) and
    the bundled library itself (Intel's libiomp5 in torch 2.2.2 carries /nfs/site/...) keep
    their rpaths, which verify refuses.
    """
    found: dict[str, list[str]] = {}
    for binary, slices in sorted(machos.items()):
        outside = sorted({rpath for piece in slices for rpath in piece.rpaths
                          if not rpath.startswith(("@loader_path", "@executable_path"))})  # fmt: skip
        if outside:
            found[binary] = outside
    return found


def _delete_rpaths(path: Path, rpaths: list[str]) -> None:
    """Delete every copy of each of ``rpaths`` (Apple's tool deletes one per call), then sign."""
    from delocate.tools import replace_signature  # macOS only (Linux: maint/mac_tools)

    for _ in range(64):
        left = [rpath for piece in read_macho(path) for rpath in piece.rpaths if rpath in rpaths]
        if not left:
            break
        done = subprocess.run(["install_name_tool", "-delete_rpath", left[0], str(path)],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode != 0:
            raise BuildError(f"install_name_tool -delete_rpath {left[0]} {path.name} failed: "
                             f"{done.stderr.strip()}")  # fmt: skip
    replace_signature(str(path), "-")


def relocate(wheel: Path, out_dir: Path, openmp: bool = True) -> Path:
    """Apply ``relink_plan`` to ``wheel`` (a torch wheel: ``openmp``) and drop its
    ``outside_rpaths``, on a Mac; the wheel to use from here (maybe ``wheel``).

    delocate rewrites RECORD when it packs the wheel again into ``out_dir``; install_name_tool's
    changes are re-signed ad hoc, as delocate's own are.
    """
    with zipfile.ZipFile(wheel) as archive:
        machos = read_machos(archive)
        plan = relink_plan(set(archive.namelist()), machos) if openmp else None
    outside = outside_rpaths(machos)
    if plan is None and not outside:
        return wheel
    from delocate.tools import set_install_id, set_install_name  # macOS only
    from delocate.wheeltools import InWheel

    out = out_dir / wheel.name
    out_dir.mkdir(parents=True, exist_ok=True)
    with InWheel(str(wheel), str(out)) as root:  # type: ignore[no-untyped-call, unused-ignore]
        tree = Path(root)
        for binary, rpaths in outside.items():
            _delete_rpaths(tree / binary, rpaths)
        if plan is not None:
            source, target = tree / plan.source, tree / OMP_LIBRARY
            shutil.move(source, target)
            if not any(source.parent.iterdir()):
                source.parent.rmdir()
            set_install_id(str(target), OMP_ID)
            for binary, old, new in plan.changes:
                set_install_name(str(tree / binary), old, new)
    return out
