"""Device handling shared by the regression suite and the benchmark.

Everything here has to work on every torch line in the catalog (2.6 .. 2.15) and on any
backend (mps, cuda, xpu, cpu), so each API that moved between releases is looked up with
`getattr` and has a fallback.
"""

from __future__ import annotations

import functools
import json
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from ..bench import _shared
from . import _stream

DEVICE_TYPES = ("mps", "cuda", "xpu", "cpu")


class DeviceUnavailable(Exception):
    """The requested device cannot be used; the message says why and what to do."""


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def _xpu_available() -> bool:
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available())


def default_device() -> str:
    """mps when usable (the issue's default), else cuda, else xpu, else cpu."""
    if _mps_available():
        return "mps"
    if torch.cuda.is_available():
        return "cuda"
    if _xpu_available():
        return "xpu"
    return "cpu"


def resolve_device(requested: str | None, tool: str) -> str:
    """The device to use; says so when the default fell back from MPS on a Mac.

    On an Intel Mac without the opt-in, MPS is unavailable and the default would quietly
    become the CPU: the tool would then compare the CPU with itself and report a pass that
    means nothing for the GPU. Saying why (the patched wheel's reason) avoids that.
    """
    if requested is not None:
        return requested
    device = default_device()
    mps = getattr(torch.backends, "mps", None)
    if device != "mps" and sys.platform == "darwin" and mps is not None and mps.is_built():
        print(
            f"{tool}: MPS is not used, {unavailable_reason('mps')}; running on {device}. "
            "For an Intel GPU set PYTORCH_MPS_ALLOW_INTEL_GPU=1, or pass --device explicitly.",
            file=sys.stderr,
        )
    return device


def unavailable_reason(device: str) -> str | None:
    """None when `device` can run tensors; otherwise a sentence a user can act on."""
    if device == "cpu":
        return None
    if device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_built():
            return "this torch was built without MPS (install the patched macOS x86_64 wheel)"
        if mps.is_available():
            return None
        # The patched wheel explains itself (issue 3); upstream only says "not available".
        explain = getattr(mps, "unavailable_reason", None)
        reason = explain() if callable(explain) else None
        hint = ""
        if not hasattr(mps, "allow_intel_gpu"):
            hint = " (this torch has no torch.backends.mps.allow_intel_gpu: is the patched wheel installed?)"
        return f"MPS is not available: {reason or 'torch gives no reason'}{hint}"
    if device == "cuda":
        return None if torch.cuda.is_available() else "CUDA is not available in this torch/host"
    if device == "xpu":
        return None if _xpu_available() else "XPU is not available in this torch/host"
    return f"unknown device type {device!r}; choose one of {', '.join(DEVICE_TYPES)}"


# Wait for all queued work on a device: the wheel's own rule (torch/backends/mps/_timing.py
# of the series, which `python -m torch.backends.mps --check` ships), one copy for the
# suite, the benchmark and the check. MPS work is asynchronous and old releases' timers
# never waited for it, so every timing in this project goes through it.
synchronize = _shared.load("_timing").synchronize


def manual_seed(device: str, seed: int) -> None:
    torch.manual_seed(seed)  # also seeds cuda/mps/xpu generators on every supported line


# --- GPU names and families -------------------------------------------------------------
# Families key the known-failures file. Checked in order; the first match wins.
# GPU families (compat.json, known_failures.yaml): the wheel's own table
# (torch/backends/mps/_families.py of the series), which `--check` reports with, loaded as
# the benchmark loads the wheel's timing rules: one copy.
_families = _shared.load("_families")
_FAMILY_PATTERNS = _families._FAMILY_PATTERNS
family_of = _families.family_of


@dataclass
class DeviceInfo:
    type: str
    name: str
    family: str
    # Where the name came from (patched devices(), torch._C, system_profiler, ...).
    name_source: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@functools.cache
def _cpu_name() -> str:
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mps_device_name() -> tuple[str, str, dict[str, Any]]:
    mps = torch.backends.mps
    devices = getattr(mps, "devices", None)
    if callable(devices):
        # The patched wheel (issue 3) says exactly which Metal device it chose.
        listed = [d._asdict() if hasattr(d, "_asdict") else dict(d) for d in devices()]
        chosen = [d for d in listed if d.get("selected")]
        if chosen:
            return str(chosen[0]["name"]), "torch.backends.mps.devices()", {"metal_devices": listed}
    get_name = getattr(torch._C, "_mps_get_name", None)
    if callable(get_name):
        try:
            return str(get_name()), "torch._C._mps_get_name()", {}
        except RuntimeError:
            pass
    # Best effort on stock wheels: the first display adapter macOS reports. On a dual-GPU
    # MacBook Pro this may not be the one MPS picked, which the report says.
    try:
        raw = subprocess.run(
            ["system_profiler", "SPDisplaysDataType", "-json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
        gpus = json.loads(raw).get("SPDisplaysDataType", [])
        names = [g.get("sppci_model", "") for g in gpus if g.get("sppci_model")]
        if names:
            return (
                names[0],
                "system_profiler (first GPU; may not be the MPS device)",
                {"all_gpus": names},
            )
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    return "unknown MPS device", "none", {}


def mps_gpu_limits() -> dict[str, Any]:
    """The Metal GPU families the device supports, a compute pipeline's threadExecutionWidth
    and the threadgroup limits, from ``torch.ops.intelmac.mps_gpu_limits`` of the patch series
    (several public reports depend on them); empty of values on other builds."""
    try:
        op = getattr(torch.ops.intelmac, "mps_gpu_limits")
    except (AttributeError, RuntimeError):
        return {"source": "none: this torch has no torch.ops.intelmac.mps_gpu_limits"}
    try:
        limits = json.loads(op())
    except (RuntimeError, ValueError) as exc:
        return {"source": f"torch.ops.intelmac.mps_gpu_limits raised {type(exc).__name__}: {exc}"}
    return {**limits, "source": "torch.ops.intelmac.mps_gpu_limits"}


def describe(device: str) -> DeviceInfo:
    if device == "cpu":
        return DeviceInfo(
            "cpu", _cpu_name(), "cpu", "cpuinfo", {"threads": torch.get_num_threads()}
        )
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        name = torch.cuda.get_device_name(0)
        details = {
            "capability": list(torch.cuda.get_device_capability(0)),
            "multiprocessors": props.multi_processor_count,
            "total_memory": props.total_memory,
            "cuda_runtime": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None),
            "integrated": bool(getattr(props, "is_integrated", False)),
            # CUDA's counterpart of Metal's threadExecutionWidth (compat.json, limits).
            "gpu_limits": {"thread_execution_width": getattr(props, "warp_size", None),
                           "source": "torch.cuda.get_device_properties"},
        }  # fmt: skip
        return DeviceInfo(
            "cuda", name, family_of(name, "cuda"), "torch.cuda.get_device_name", details
        )
    if device == "xpu":
        name = torch.xpu.get_device_name(0)
        return DeviceInfo("xpu", name, family_of(name, "xpu"), "torch.xpu.get_device_name", {})
    if device == "mps":
        name, source, details = _mps_device_name()
        details["macos"] = platform.mac_ver()[0]
        details["gpu_limits"] = mps_gpu_limits()
        return DeviceInfo("mps", name, family_of(name, "mps"), source, details)
    raise ValueError(device)


@functools.cache
def dtype_supported(device: str, dtype: torch.dtype) -> tuple[bool, str]:
    """Probe whether `device` can allocate and compute in `dtype` (bfloat16 on an Intel or AMD
    GPU is the case in point: docs/known-gpu-bugs.md). A probe beats a version table: the
    answer depends on the GPU, the macOS release and the torch line together.

    In a group's process the probe is a set-up step (`_stream.step`): a probe that hung
    earlier in this run is not run again, and the dtype counts as unusable."""
    hung = _stream.step(f"dtype probe {str(dtype).removeprefix('torch.')}")
    if hung is not None:
        return False, f"{_stream.NOT_RUN} ({hung})"
    try:
        if not dtype.is_floating_point:
            # Integers and bool: no matmul on every backend (CUDA has none); a sum must do.
            host = torch.arange(16).to(dtype)
            got, want = int(host.to(device).sum().to("cpu")), int(host.sum())
            synchronize(device)
            return (True, "") if got == want else (False, f"{dtype} probe summed {got} instead of {want}")
        a = torch.arange(16, dtype=torch.float32).reshape(4, 4).to(device=device, dtype=dtype)
        out = (a @ a + a).sum().to("cpu", torch.float32)
        synchronize(device)
        expected = float(
            (torch.arange(16.0).reshape(4, 4) @ torch.arange(16.0).reshape(4, 4)).sum()
            + torch.arange(16.0).sum()
        )
        if abs(float(out) - expected) > 0.02 * abs(expected):
            return False, f"{dtype} probe computed {float(out)} instead of {expected}"
        return True, ""
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def first_contact(device: str) -> None:
    """The first work on the device, the end of a group's start-up: the device comes up
    (on MPS: the Metal device, its queue and the first kernel), a copy each way, a wait."""
    x = torch.ones(8, device=device)
    (x + x).to("cpu")
    synchronize(device)


def torch_info() -> dict[str, Any]:
    mps = getattr(torch.backends, "mps", None)
    build_info_fn = getattr(mps, "build_info", None)
    try:
        build_info = build_info_fn() if callable(build_info_fn) else None
    except Exception as exc:  # noqa: BLE001  # a broken build_info() must not hide the rest of the report
        build_info = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
        "cuda": torch.version.cuda,
        "mps_built": bool(mps is not None and mps.is_built()),
        "patched_mps_api": bool(mps is not None and hasattr(mps, "allow_intel_gpu")),
        "build_info": build_info,
        "num_threads": torch.get_num_threads(),
    }


def host_info() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "cpu": _cpu_name(),
        "macos": platform.mac_ver()[0] or None,
    }
