"""The workloads group (issue 34) on the CPU: every workload fails on a fault planted in its
device output, its verdict reaches compat.json, and the group's models are the shapes the
docs say. That every workload passes clean is checked by the quick CPU run
(test_cpu_subset.py); the NVIDIA run is tests/bench/validate_cuda_workloads.sh."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("jsonschema")

from tests.regress import _compat, _parity, _workloads  # noqa: E402


@pytest.mark.parametrize("name", [w.name for w in _workloads.WORKLOADS])
def test_a_fault_in_the_device_output_fails_the_workload(name: str) -> None:
    w = _workloads.BY_NAME[name]
    fault = _parity.PlantedFault(w.op, 0.0, "nan")
    dtype = w.dtypes[0]
    row = _workloads.run_one(w, "cpu", dtype, _workloads.load_tolerances()[dtype], _workloads.Settings(True, fault))
    assert row["status"] == "fail" and "NaN" in row["detail"], row
    assert row["workload"] == w.verdict and row["op"] == f"workloads.{name}"


def test_a_workload_that_raises_is_an_error_row_and_its_verdict_says_so() -> None:
    w = _workloads.BY_NAME["vision_training"]
    fault = _parity.PlantedFault(w.op, 0.0, "raise")
    row = _workloads.run_one(w, "cpu", "float32", _workloads.load_tolerances()["float32"], _workloads.Settings(True, fault))
    assert row["status"] == "error" and "planted fault" in row["detail"], row
    verdict = _compat._workload_verdicts([row])[0]
    assert verdict["sentence"] == "CNN training (float32) does not run on this GPU"
    assert verdict["message"] and "planted fault" in verdict["message"]


def test_compat_records_a_verdict_per_workload() -> None:
    rows: list[dict[str, Any]] = [
        _workloads._row(_workloads.BY_NAME["llm_generation"], "float16", "pass"),
        _workloads._row(_workloads.BY_NAME["diffusion_unet_block"], "float16", "fail", detail="noise prediction: 3 NaN"),
        _workloads._row(_workloads.BY_NAME["speech_encoder"], "float16", "unsupported", detail="device probe: no"),
    ]
    report = {"device": {"type": "mps", "name": "AMD Radeon Pro 5500M", "family": "amd-rdna1", "details": {}},
              "torch": {"version": "2.6.0"}, "host": {"macos": "15.7"}, "summary": {}, "results": [],
              "workloads": rows}  # fmt: skip
    compat = _compat.build(report)
    _compat.validate(compat)
    assert [w["sentence"] for w in compat["workloads"]] == [
        "LLM generation (float16) works on this GPU",
        "Diffusion UNet block (float16) gives wrong results on this GPU",
        "Whisper-like speech encoder (float16) not checked (dtype unsupported) on this GPU",
    ]
    assert compat["workloads"][1]["message"] == "noise prediction: 3 NaN"
    assert any(e["group"] == "workloads" and e["op"] == "workloads.diffusion_unet_block" and e["status"] == "fail"
               for e in compat["ops"])  # fmt: skip
    assert "- Diffusion UNet block (float16) gives wrong results on this GPU" in _compat.markdown(compat)
    # A report written before issue 34 has no workloads: still valid.
    del compat["workloads"]
    _compat.validate(compat)


def test_the_models_have_the_workloads_shapes() -> None:
    assert _workloads.LATENT == 64 and _workloads.PROMPT == 128 and _workloads.VOCAB == 32000
    mel = _workloads.log_mel(torch.zeros(1, _workloads.RATE * _workloads.SECONDS), _workloads._mel_filters())
    assert mel.shape == (1, 80, 3000)  # Whisper's 30 s window: 3000 frames, 1500 after the stem
    assert _workloads.SpeechEncoder()(mel).shape == (1, 1500, _workloads.WIDTH)
    assert {w.name for w in _workloads.WORKLOADS} == {
        "llm_prompt", "llm_generation", "llm_generation_int8", "diffusion_unet_block", "speech_encoder", "vision_training"}
