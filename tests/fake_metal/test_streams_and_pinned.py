"""Tensor.record_stream() and DataLoader(pin_memory=True) on Intel, AMD and Apple GPUs, on every
line, through the line's own Python files (issue 35, findings 2 and 3), and the MPS memory
limit the device report shows.

Each scenario runs in the test torch against the stand-in Metal (runner.py): our compiled
MPSDeviceSelection.mm chooses the device, the line's patched torch/backends/mps reports it,
and the line's own torch/utils/data/dataloader.py and torch/mps/streams.py (exact, from its
wheel, with patch 0012 applied where the line has it) decide what happens:

- DataLoader(pin_memory=True): 2.9.1 to 2.15.0 skip pinning for MPS on every GPU, with
  upstream's warning (their exact dataloader.py); 2.6.0 pins for pin_memory_device="mps",
  which an AMD GPU cannot (no shared allocator: it would crash), so 0012 skips it there
  with one warning.
- Streams: only 2.15.0 has torch.mps.Stream and an MPS kernel for record_stream (the
  wheels' native_functions.yaml); off Apple GPUs 0012 refuses any stream but the default
  one, since record_stream cannot defer reuse there.

Seen failing: without patch 0012 (the series of 65b1623) the AMD 2.6.0 scenario pins and
the Intel and AMD 2.15.0 scenarios make a second stream; without 0003's _memory.py the
memory-limit steps raise.
"""

from __future__ import annotations

from typing import Any

import pytest

from ..patches_cpp import objc_lines
from ..patches_cpp.test_policy import M1, PRO5500M, UHD630
from .conftest import LINES, Line
from .test_devices import metal_device, steps_of

pytestmark = pytest.mark.upstream

GPUS = {"intel": (UHD630, {"PYTORCH_MPS_ALLOW_INTEL_GPU": "1"}), "amd": (PRO5500M, {}), "apple": (M1, {})}
STEPS = ["memory_limit", "report_text", "data_loader_pins", "stream=new", "stream=0", "set_stream=3"]
REFUSED = "streams other than the default one are not supported"


@pytest.fixture(scope="module")
def results(line: Line) -> dict[str, dict[str, Any]]:
    scenarios = []
    for name, (dev, env) in GPUS.items():
        metal = {"devices": [metal_device(dev)], "mpsgraph": True}
        scenarios.append({"id": name, "metal": metal, "env": env, "steps": STEPS})
        scenarios.append({"id": f"{name} ratio", "metal": metal, "env": {**env, "PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.5"},
                          "steps": ["memory_limit"]})
    return {r_id: steps_of(r, f"{line.line} {r_id}") for r_id, r in line.run(scenarios).items()}


@pytest.mark.parametrize("gpu", list(GPUS))
def test_the_report_shows_the_memory_limit_in_force(line: Line, results: dict[str, Any], gpu: str) -> None:
    """Issue 35: an Intel GPU's default limit is its working set (1.0), others keep
    upstream's 1.7 times it; PYTORCH_MPS_HIGH_WATERMARK_RATIO wins on every GPU."""
    dev = GPUS[gpu][0]
    got = results[gpu]["memory_limit"]
    assert "error" not in got, got
    ratio = 1.0 if gpu == "intel" else 1.7
    assert got["value"]["ratio"] == ratio and got["value"]["limit_bytes"] == int(ratio * dev.working_set), got
    set_by_env = results[f"{gpu} ratio"]["memory_limit"]["value"]
    assert set_by_env == {"ratio": 0.5, "limit_bytes": int(0.5 * dev.working_set),
                          "source": "PYTORCH_MPS_HIGH_WATERMARK_RATIO"}
    text = results[gpu]["report_text"]["value"]
    assert f"MPS memory limit: {ratio * dev.working_set / 2**30:.1f} GiB ({ratio:g} x" in text, text


@pytest.mark.parametrize("gpu", list(GPUS))
def test_data_loader_pins_only_where_pinned_memory_exists(line: Line, results: dict[str, Any], gpu: str) -> None:
    got = results[gpu]["data_loader_pins"]
    assert "error" not in got, got
    if line.line == "2.6.0":
        assert got["value"] == (gpu != "amd"), got  # the shared allocator exists with unified memory only
        if gpu == "amd":
            assert any("no unified memory" in w and "pin_memory=False" in w for w in got["warnings"]), got
    else:  # upstream's own dataloader.py: never for MPS, with its warning, on every GPU
        assert got["value"] is False, got
        assert any("not supported on MPS" in w for w in got["warnings"]), got


@pytest.mark.parametrize("gpu", list(GPUS))
def test_no_second_stream_where_record_stream_cannot_defer_reuse(line: Line, results: dict[str, Any],
                                                                 gpu: str) -> None:
    steps = results[gpu]
    if line.line != "2.15.0":
        for step in ("stream=new", "stream=0", "set_stream=3"):
            assert steps[step].get("value") == "no torch.mps.Stream on this line", steps[step]
        return
    assert steps["stream=0"].get("value") == "allowed", steps["stream=0"]  # the default stream, everywhere
    for step in ("stream=new", "set_stream=3"):
        if gpu == "apple":
            assert steps[step].get("value") == "allowed", steps[step]
        else:
            assert REFUSED in steps[step].get("error", ""), steps[step]
            assert "default stream" in steps[step]["error"], steps[step]


@pytest.mark.parametrize("version", LINES)
def test_record_stream_has_an_mps_kernel_only_on_2_15_0(version: str) -> None:
    """Before 2.15.0 Tensor.record_stream() has no MPS kernel (it raises on every GPU, Apple
    GPUs too) and torch.mps no Stream: one stream, nothing to defer. The wheel's own
    native_functions.yaml says which backends the operator has."""
    if not objc_lines.has_wheel(version):
        pytest.skip(f"no unpacked upstream {version} wheel: make upstream-material fetches it")
    root = objc_lines.wheel_root(version)
    text = (root / "torchgen" / "packaged" / "ATen" / "native" / "native_functions.yaml").read_text(encoding="utf-8")
    entry = text.split("- func: record_stream(", 1)[1].split("\n\n", 1)[0]
    assert ("MPS: record_stream_mps" in entry) == (version == "2.15.0"), entry
    assert (root / "torch" / "mps" / "streams.py").is_file() == (version == "2.15.0")
