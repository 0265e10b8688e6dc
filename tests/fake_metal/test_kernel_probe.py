"""The kernel compile probe's Objective-C++ (MPSKernelProbe.mm, issue 25), run on the stand-in
Metal inside the test torch: every function of a library is enumerated, each pipeline that
fails is named with Metal's message, functions that are not kernels are left out, and the
GPU's limits come back as compat.json reads them. The rows the suite makes of the answers
(tests/regress/_kernels.py) are checked on what the operator really returned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.regress import _compat, _kernels

from .conftest import Line

pytestmark = pytest.mark.upstream  # each line's wheel, and 2.6.0's source tree

AMD = {"name": "AMD Radeon Pro 5500M", "registry_id": 513, "families": ["Mac2", "Common3", "Metal3"],
       "thread_execution_width": 64, "max_threads_per_threadgroup": 1024, "max_threadgroup_memory": 65536,
       "pipeline_failures": {"mm_simdgroup_half": "Compiler encountered an internal error (SC compilation failure)"}}


def _library(tmp: Path) -> Path:
    path = tmp / "kernels.metallib.json"
    path.write_text(json.dumps({"functions": [
        {"name": "add_dense_float"}, {"name": "mm_simdgroup_half"},
        {"name": "blit_vertex", "type": "vertex"}, {"name": "argmax_int"}]}))
    return path


def test_the_probe_names_each_kernel_that_fails(line: Line, tmp_path: Path) -> None:
    lib = _library(tmp_path)
    scenario: dict[str, Any] = {
        "id": "probe", "metal": {"devices": [AMD], "system_default": 0, "macos": "14.0", "mpsgraph": True},
        "steps": [f"kernel_probe={lib}", f"kernel_probe={tmp_path / 'missing.metallib'}", "gpu_limits"],
    }
    result = line.run([scenario])["probe"]
    assert "fatal" not in result, result
    probe, missing, limits = result["steps"][1:]
    assert probe.get("error") is None, probe
    assert probe["value"] == [
        "ok\tadd_dense_float",
        "fail\tmm_simdgroup_half\tCompiler encountered an internal error (SC compilation failure)",
        "skip\tblit_vertex\tnot a kernel function",
        "ok\targmax_int",
    ]
    rows = _kernels.rows_from_probe(probe["value"], "metallib 2.7 for macOS 14.0", 0.1)
    assert [(r["op"], r["status"]) for r in rows] == [("kernels.mm_simdgroup_half", "fail"), ("kernels.*", "fail")]
    assert "SC compilation failure" in rows[0]["detail"]
    assert "Metal could not load the library" in missing["error"], missing
    assert limits["value"]["families"] == ["Common3", "Mac2", "Metal3"]
    assert limits["value"]["thread_execution_width"] == 64
    assert limits["value"]["max_threads_per_threadgroup"] == 1024
    assert limits["value"]["max_threadgroup_memory_bytes"] == 65536
    report = {"device": {"type": "mps", "name": AMD["name"], "family": "amd-rdna1",
                         "details": {"gpu_limits": {**limits["value"], "source": "torch.ops.intelmac.mps_gpu_limits"}}},
              "torch": {"version": "x"}, "host": {"macos": "14.0"}, "summary": {}, "results": []}  # fmt: skip
    compat = _compat.build(report)
    _compat.validate(compat)
    assert compat["gpu"]["limits"]["thread_execution_width"] == 64
