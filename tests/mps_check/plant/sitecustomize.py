"""Faults planted under ``python -m torch.backends.mps --check`` (test tooling, never shipped).

Put this folder first on PYTHONPATH and name the faults in INTELMAC_CHECK_FAULT
(comma-separated) and the device they hit in INTELMAC_CHECK_FAULT_DEVICE (default cuda).
Python imports ``sitecustomize`` at start-up, so every process of the check, the workers
included, runs with the faults: the check itself is not changed, and what it reports is
what it would report for a GPU with such a bug. Each fault hits float32 work on the device
only, so the check's float64 reference on the CPU stays right even when the device is the
CPU.

- ``softmax_odd_tail``: a softmax over an odd-length row leaves the last element out of its
  normalising sum (the tail bug of a vectorised kernel). The ``softmax`` check must fail.
- ``copy_h2d_odd_offset``: a copy from host memory at an odd element offset into the device
  leaves the last element stale (+1). ``copy_to_device_odd_offset`` must fail.
- ``conv2d_raises``: a float32 convolution on the device raises. ``conv2d`` must be an error.
- ``layer_norm_abort``: a float32 layer_norm on the device aborts the process, as a Metal
  validation failure does. ``layer_norm`` must be named as the check that died, and the
  checks after it must still run.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

ENV = "INTELMAC_CHECK_FAULT"
KNOWN = ("softmax_odd_tail", "copy_h2d_odd_offset", "conv2d_raises", "layer_norm_abort")


def _load_regress_faults() -> ModuleType:
    """``tests/regress/_faults.py``, by path: only this folder is on PYTHONPATH, not the
    checkout. Its odd-offset copy test is the regression suite's."""
    path = Path(__file__).resolve().parents[2] / "regress" / "_faults.py"
    spec = importlib.util.spec_from_file_location("intelmac_regress_faults", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # before it runs: its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _install() -> None:
    names = [n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()]
    if not names:
        return
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise SystemExit(f"{ENV}: unknown fault(s) {unknown}; known: {', '.join(KNOWN)}")
    device = os.environ.get("INTELMAC_CHECK_FAULT_DEVICE", "cuda")

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    regress_faults = _load_regress_faults()

    aten = torch.ops.aten

    def on_device(t: object) -> bool:
        return isinstance(t, torch.Tensor) and t.device.type == device and t.dtype == torch.float32

    class PlantedFaults(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            if "layer_norm_abort" in names and func is aten.native_layer_norm.default and on_device(args[0]):
                os.abort()
            if "conv2d_raises" in names and func is aten.convolution.default and on_device(args[0]):
                raise RuntimeError("planted fault: this device refuses float32 convolutions")
            out = func(*args, **kwargs)
            if "softmax_odd_tail" in names and func is aten._softmax.default and on_device(args[0]):
                x, dim = args[0], args[1]
                n = x.shape[dim]
                if n >= 3 and n % 2 == 1:
                    e = (x - x.amax(dim, keepdim=True)).exp()
                    out = e / e.narrow(dim, 0, n - 1).sum(dim, keepdim=True)
            if "copy_h2d_odd_offset" in names:
                dst = regress_faults.odd_offset_h2d_destination(func, args, kwargs, out, device)
                if dst is not None:
                    dst.view(-1)[-1] += 1
            return out

    mode = PlantedFaults()
    mode.__enter__()  # for the life of the process
    globals()["_MODE"] = mode
    print(f"planted faults on {device}: {', '.join(names)}", file=__import__("sys").stderr)


_install()
