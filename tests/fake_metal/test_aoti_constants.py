"""An AOTInductor model's constants, loaded by the line's exact model_base.h with the series
applied (patch 0011), into a blob in private and in shared storage on the stand-in Metal.

Issue 23, finding 9: the header copied each constant with aoti_torch_mps_memcpy, which
writes through [buffer contents]; a private buffer's contents is NULL, so on an Intel or
AMD GPU, where tensors live in private buffers, loading a model crashed. The harness
(``aoti/aoti_constants.mm``) compiles the header with ``-DUSE_MPS`` as AOTInductor compiles
a model for "mps", with stand-ins of our own for the C shim functions (module comment
there), and runs load_constants() in a process of its own, so that the crash is a result.

Without patch 0011 (``INTELMAC_AOTI_WITHOUT_FIX=1``) the private cases crash (SIGSEGV).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from intelmac_torch_builder.core import catalog

from ..patches_cpp import objc_lines
from . import build

pytestmark = pytest.mark.upstream  # each line's wheel

HARNESS = Path(__file__).resolve().parent / "aoti" / "aoti_constants.mm"
WITHOUT_FIX_ENV = "INTELMAC_AOTI_WITHOUT_FIX"
LINES = ("2.9.1", "2.14.1", "2.15.0")  # the lines whose model_base.h has aoti_torch_mps_memcpy
#: MTLResourceOptions of the blob, and a GPU where the allocator gives tensors that storage:
#: private on an AMD GPU (every line) and an Intel iGPU (2.14.1, 2.15.0); shared on an Apple GPU.
STORAGE = {
    "private": (2 << 4, {"name": "AMD Radeon Pro 5500M", "registry_id": 0x100000201, "unified_memory": False,
                         "families": ["Mac2", "Common3"]}),
    "shared": (0, {"name": "Apple M1", "registry_id": 0x100000701, "unified_memory": True,
                   "families": ["Apple1", "Apple7", "Mac2", "Common3"]}),
}
RUNNER = """
import ctypes, json, sys
fake = ctypes.CDLL(sys.argv[2])
if fake.fake_metal_configure(sys.argv[3].encode()) != 0:
    sys.exit("the stand-in refused its configuration")
lib = ctypes.CDLL(sys.argv[1])
lib.intelmac_aoti_load_constants.restype = ctypes.c_char_p
print(lib.intelmac_aoti_load_constants(ctypes.c_ulong(int(sys.argv[4]))).decode())
"""


def _series(line: str) -> list[Path]:
    series = list(catalog.load().line(line).patches)
    if os.environ.get(WITHOUT_FIX_ENV) == "1":
        series = [p for p in series if not p.name.startswith("0011-")]
    return series


@pytest.fixture(scope="module")
def libraries() -> dict[str, Path]:
    """The harness built per line, once per module."""
    return {}


def _library(line: str, cache: dict[str, Path], fake_lib: Path, work: Path) -> Path:
    if line not in cache:
        if not objc_lines.has_wheel(line):
            why = f"no unpacked upstream {line} wheel: make upstream-material fetches it"
            if os.environ.get(objc_lines.REQUIRE_ENV) == "1" or os.environ.get("CI") == "true":
                pytest.fail(why)
            pytest.skip(why)
        lt = objc_lines.prepare(line, _series(line), work / "prep")
        # the patched header first; without 0011 the wheel's own (the series leaves it alone)
        includes = ["-DUSE_MPS", f"-I{lt.tree}", f"-I{build.INCLUDE}", "-isystem", str(lt.wheel_include)]
        obj = build.compile_objcxx(HARNESS, work / "aoti_constants.o", includes, objc_lines.cxx_standard(line))
        cache[line] = build.link(work / "libintelmac_aoti.so", [obj], [
            str(fake_lib), f"-Wl,-rpath,{fake_lib.parent}", "-Wl,--no-undefined", *build.LINK_LIBS])
    return cache[line]


def _load(library: Path, fake_lib: Path, storage: str) -> dict[str, Any]:
    options, gpu = STORAGE[storage]
    config = json.dumps({"devices": [gpu], "macos": "14.0"})
    done = subprocess.run([sys.executable, "-c", RUNNER, str(library), str(fake_lib), config, str(options)],
                          capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        pytest.fail(f"load_constants() crashed (exit {done.returncode}) with the blob in {storage} storage "
                    f"on {gpu['name']}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("storage", list(STORAGE))
@pytest.mark.parametrize("line", LINES)
def test_constants_load_into_the_blob_in_every_storage_mode(
        line: str, storage: str, libraries: dict[str, Path], fake_metal_lib: Path,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    library = _library(line, libraries, fake_metal_lib, tmp_path_factory.mktemp(f"aoti-{line}"))
    result = _load(library, fake_metal_lib, storage)
    # each constant's tensor, as the model wraps it, reads the constant's bytes on the GPU
    assert result["constants"]["w0"] == {"reads_its_bytes": True, "storage_offset": 0}, result
    assert result["constants"]["w1"]["reads_its_bytes"] is True, result
    assert result["constants"]["w1"]["storage_offset"] > 0, result
    # no memcpy through contents: a CPU tensor, an MPS tensor at the constant's offset, a copy
    assert "mps_memcpy" not in result["calls"], result["calls"]
    assert result["calls"].count("copy_") == 2, result["calls"]
    assert result["violations"] == 0, result["records"]
    assert result["live_tensors"] == 0, result  # the copies' tensors are deleted, the model's too

