"""2.15.0's MPSGuardImpl.h, the series applied, run against the stand-in Metal: the C++ route
by which a second MPS stream becomes current (issue 35, finding 2).

``with torch.Stream("mps"):`` makes a stream current without any Python: torch.Stream's
__enter__ calls at::accelerator::setCurrentStream, which calls the MPS guard's
exchangeStream (both seen in the 2.15.0 binaries; patch 0012's description). Patch 0012
hooks that inline function of the exact header; the decision is MPSStoragePolicy.h's rule 9
and MPSHeapStorage.mm raises it. Here the patched header, with 2.15.0's own headers, is
compiled with our MPSHeapStorage.mm and ``alloc/guard_streams.mm`` (small MPSDevice and
MPSStream free functions of our own: alloc_build.guard_streams_program), and run once per
pretend GPU: the guard is asked for the default stream, a new stream (what
torch.Stream("mps") gets) is made current, then the default one again.

Off Apple GPUs the new stream must be refused with check_stream's own message (the Python
refusal the same GPU gets through torch.mps.set_stream, from test_streams_and_pinned's
runner) and the current stream must stay the default one; on an Apple GPU it switches.

Seen failing: without 0012's MPSGuardImpl.h hunks (``INTELMAC_GUARD_WITHOUT_HOOK=1``, and
once with main's 0012 of 7bf3d83) the Intel and AMD GPUs' new stream became current.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from intelmac_torch_builder.core import catalog

from ..patches_cpp import objc_lines
from ..patches_cpp.test_policy import M1, PRO5500M, UHD630
from . import alloc_build, conftest
from .test_devices import metal_device

LINE = "2.15.0"
GUARD_HEADER = "aten/src/ATen/mps/MPSGuardImpl.h"
WITHOUT_HOOK_ENV = "INTELMAC_GUARD_WITHOUT_HOOK"
GPUS = {"intel": UHD630, "amd": PRO5500M, "apple": M1}

pytestmark = pytest.mark.upstream  # the official 2.15.0 wheel's headers


def _series(work: Path) -> list[Path]:
    series = list(catalog.load().line(LINE).patches)
    if os.environ.get(WITHOUT_HOOK_ENV) != "1":
        return series
    from intelmac_torch_builder.maint.check_upstream.series import filter_series

    return filter_series(series, lambda path: path != GUARD_HEADER, work / "without-hook")


@pytest.fixture(scope="module")
def program(fake_metal_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    conftest.require_toolchain()
    objc_lines.require_wheel(LINE)
    work = tmp_path_factory.mktemp("guard-streams")
    lt = objc_lines.prepare(LINE, _series(work), work / "prep")
    return alloc_build.guard_streams_program(lt.tree, lt.wheel_include, objc_lines.cxx_standard(LINE),
                                             fake_metal_lib, conftest.torch_lib_dir(), work / "build")


@pytest.fixture(scope="module")
def results(program: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, dev in GPUS.items():
        env = {**os.environ, "FAKE_METAL_CONFIG": json.dumps({"devices": [metal_device(dev)], "macos": "15.0"})}
        done = subprocess.run([str(program)], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stderr[-4000:]}"
        out[name] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("gpu", list(GPUS))
def test_the_default_stream_is_always_current(results: dict[str, dict[str, Any]], gpu: str) -> None:
    r = results[gpu]
    assert r["device"] == GPUS[gpu].name, r
    for step in ("to_default", "back"):
        assert "error" not in r[step] and r[step]["current"] == r["default_id"], r


@pytest.mark.parametrize("gpu", list(GPUS))
def test_a_second_stream_becomes_current_only_on_an_apple_gpu(results: dict[str, dict[str, Any]], gpu: str) -> None:
    r = results[gpu]
    to_pool = r["to_pool"]
    assert to_pool["to"] != r["default_id"], r  # getNewStream gave a pool stream, not the default one
    if gpu == "apple":
        assert "error" not in to_pool and to_pool["current"] == to_pool["to"], r
        assert r["back"]["returned"] == to_pool["to"], r
    else:
        assert "streams other than the default one are not supported" in to_pool.get("error", ""), r
        assert "default stream" in to_pool["error"] and GPUS[gpu].name in to_pool["error"], r
        assert to_pool["current"] == r["default_id"], r  # nothing changed


@pytest.mark.parametrize("gpu", ["intel", "amd"])
def test_cpp_and_python_refuse_with_the_same_message(results: dict[str, dict[str, Any]], gpu: str,
                                                     fake_metal_lib: Path,
                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    """MPSStoragePolicy.h's stream_refused_message and _memory.py's check_stream say the same
    thing: the Python refusal comes from the line's own torch.mps.set_stream on the same GPU."""
    line = conftest.line_build(LINE, fake_metal_lib, tmp_path_factory)
    env = {"PYTORCH_MPS_ALLOW_INTEL_GPU": "1"} if gpu == "intel" else {}
    scenario = {"id": gpu, "metal": {"devices": [metal_device(GPUS[gpu])], "mpsgraph": True}, "env": env,
                "steps": ["set_stream=3"]}
    python = line.run([scenario])[gpu]
    step = next(s for s in python["steps"] if s["step"] == "set_stream=3")
    assert step.get("error", "").endswith(results[gpu]["to_pool"].get("error", "<no C++ error>")), (step, results[gpu])
