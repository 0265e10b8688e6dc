"""The kernel compile probe (group `kernels`, issue 25).

Torch builds a Metal compute pipeline only when an op first needs it, so a kernel that does
not compile for a GPU (an "SC compilation failure", a `simdgroup_matrix` kernel on a GPU
without it) stays hidden until a user's model reaches it. This group builds a pipeline for
every function of the Metal libraries bundled in torch's binary, on the GPU under test, and
reports each one that fails with its name and Metal's message.

The libraries are found in the binary itself (`find_metallibs`: each starts with the
"MTLB" magic, and its header gives its length and the macOS it targets; 2.15.0's
libtorch_cpu holds one for macOS 14 and one for macOS 26.2); torch loads the newest one the
running macOS can use, and so does the probe (`chosen`). Building pipelines is Metal's part:
``torch.ops.intelmac.mps_kernel_probe`` of the patch series (MPSKernelProbe.mm, patch 0002),
which takes the library as a file. Lines whose kernels torch compiles from source at run
time bundle no library: the group then says so.
On devices other than mps the group is one skip row with the reason.
"""

from __future__ import annotations

import re
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SECTION = "kernels"
MAGIC = b"MTLB"
_HEADER = 24  # magic, target platform (2), file version (2+2), type, os, os version (2+1+1), length (8)
# The header's target platform word of a macOS library (0x8001, little-endian), and the
# operating system byte of macOS (0x81).
_MACOS_PLATFORM = 0x8001
_MACOS = 0x81


@dataclass(frozen=True)
class Metallib:
    offset: int
    length: int
    file_version: str
    macos: tuple[int, int]  # the macOS it targets (major, minor)

    @property
    def label(self) -> str:
        return f"metallib {self.file_version} for macOS {self.macos[0]}.{self.macos[1]} at offset {self.offset}"


def find_metallibs(blob: bytes) -> list[Metallib]:
    """The Metal libraries embedded in `blob` (a binary), by their headers; the magic
    inside other data (strings, symbols) fails the header's checks."""
    found = []
    for m in re.finditer(re.escape(MAGIC), blob):
        at = m.start()
        if at + _HEADER > len(blob):
            continue
        platform, major, minor, _kind, os_byte, os_major, os_minor = struct.unpack_from("<HHHBBHB", blob, at + 4)
        length = struct.unpack_from("<Q", blob, at + 16)[0]
        if platform != _MACOS_PLATFORM or os_byte != _MACOS or not _HEADER < length <= len(blob) - at:
            continue
        found.append(Metallib(at, length, f"{major}.{minor}", (os_major, os_minor)))
    return found


def chosen(libs: list[Metallib], macos: tuple[int, int]) -> Metallib | None:
    """The library torch loads on `macos`: the newest whose target it meets."""
    usable = [lib for lib in libs if lib.macos <= macos]
    return max(usable, key=lambda lib: lib.macos) if usable else None


def torch_binary() -> Path | None:
    lib = Path(torch.__file__).parent / "lib"
    for name in ("libtorch_cpu.dylib", "libtorch_cpu.so"):
        if (lib / name).exists():
            return lib / name
    return None


def _macos() -> tuple[int, int] | None:
    import platform

    parts = (platform.mac_ver()[0] or "").split(".")
    return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0) if parts[0] else None


def probe_op() -> Callable[..., Any] | None:
    try:
        return getattr(torch.ops.intelmac, "mps_kernel_probe")  # type: ignore[no-any-return]
    except (AttributeError, RuntimeError):
        return None


def skip_reason(device: str) -> str | None:
    if device != "mps":
        return f"the kernel compile probe builds Metal pipelines: it needs mps, and this run is on {device}"
    if probe_op() is None:
        return ("this torch has no torch.ops.intelmac.mps_kernel_probe (an intelmac-torch wheel "
                "of issue 25 or later has it)")  # fmt: skip
    return None


def _row(op: str, case: str, status: str, detail: str = "", seconds: float = 0.0) -> dict[str, Any]:
    return {"op": op, "family": "kernels", "case": case, "dtype": "-", "check": "compile",
            "status": status, "detail": detail, "seconds": round(seconds, 3)}  # fmt: skip


def rows_from_probe(lines: list[str], case: str, seconds: float) -> list[dict[str, Any]]:
    """The probe's answer ("ok\\t<function>", "fail\\t<function>\\t<Metal's message>", or
    "skip\\t<function>\\t<why>" for a function that is not a kernel) as rows: one per failing
    kernel, one summary row for the library."""
    ok = [line.split("\t", 1)[1] for line in lines if line.startswith("ok\t")]
    bad = [line.split("\t", 2) for line in lines if line.startswith("fail\t")]
    left_out = sum(1 for line in lines if line.startswith("skip\t"))
    rows = [_row(f"kernels.{name}", case, "fail", message or "no message") for _, name, *rest in bad
            for message in [rest[0] if rest else ""]]  # fmt: skip
    total = len(ok) + len(bad)
    status = "pass" if total and not bad else ("fail" if bad else "skip")
    summary = f"{len(ok)} of {total} functions built a compute pipeline" if total else "the library has no kernel"
    if left_out:
        summary += f" ({left_out} functions that are not kernels left out)"
    rows.append(_row("kernels.*", case, status, summary, seconds))
    return rows


def skip_row(reason: str) -> dict[str, Any]:
    return _row("kernels.*", "every bundled Metal function", "skip", reason)


def run(device: str, stream: Any, echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    reason = skip_reason(device)
    if reason is not None:
        row = skip_row(reason)
        stream.row(SECTION, row)
        return [row]
    binary, macos = torch_binary(), _macos()
    blob = binary.read_bytes() if binary is not None else b""
    lib = chosen(find_metallibs(blob), macos) if macos is not None else None
    if lib is None:
        row = _row("kernels.*", "every bundled Metal function", "skip",
                   f"no Metal library for macOS {macos} in {binary.name if binary else 'torch'}: "
                   "this line compiles its kernels from source when an op first runs")  # fmt: skip
        stream.row(SECTION, row)
        return [row]
    if not stream.begin(SECTION, _row("kernels.*", lib.label, "error")):
        return []
    op = probe_op()
    assert op is not None
    with tempfile.TemporaryDirectory(prefix="regress-kernels-") as tmp:
        path = Path(tmp) / "torch.metallib"  # Metal loads a library from a file (newLibraryWithURL:)
        path.write_bytes(blob[lib.offset : lib.offset + lib.length])
        t0 = time.perf_counter()
        rows = rows_from_probe(list(op(str(path))), lib.label, time.perf_counter() - t0)
    for row in rows:
        stream.row(SECTION, row)
        if row["status"] == "fail":
            echo(f"regress: kernels {row['op']}: {row['detail']}")
    return rows
