"""Faults planted below the suite, in the device's kernels (test tooling).

--self-test and INTELMAC_REGRESS_PLANT_FAULT corrupt an op's output after the op returns.
These go one level lower, where a real bug sits: the suite calls torch as usual and the
wrong result comes from the kernel. They prove on a real GPU that the suite catches kernel
bugs. INTELMAC_REGRESS_KERNEL_FAULT=<name>[,<name>] installs them, each in the group
subprocess it belongs to:

- `softmax_odd_tail` (OpInfo group): aten::_softmax's CUDA kernel is replaced, through
  torch.library, by one that leaves the last element of an odd-length softmax dimension out
  of the normalising sum: the tail bug of a vectorised kernel. Must be caught by `softmax`.
- `copy_h2d_odd_offset` (memory group): a copy from host memory that starts at an odd element
  offset into the device leaves the last element stale (+1): the kind of fault a wrong offset
  into a no-copy buffer gives. Installed as a TorchDispatchMode for the whole group process.
  Must be caught by a memory check.

Each fault is reported in the JSON like a planted fault (self_test), with the rows that
must catch it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

ENV = "INTELMAC_REGRESS_KERNEL_FAULT"


@dataclass(frozen=True)
class KernelFault:
    group: str  # the suite group whose process gets it
    catcher: str  # an op name, or a "memory." prefix of memory checks, that must fail
    devices: tuple[str, ...]


FAULTS = {
    "softmax_odd_tail": KernelFault("parity", "softmax", ("cuda",)),
    "copy_h2d_odd_offset": KernelFault("memory", "memory.", ("cuda", "mps", "xpu", "cpu")),
}


def from_env() -> list[str]:
    names = [n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ValueError(f"{ENV}: unknown fault(s) {unknown}; known: {', '.join(FAULTS)}")
    return names


def _softmax_odd_tail(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    cpu = x.detach().to("cpu")
    d = dim % max(cpu.dim(), 1)
    n = cpu.shape[d] if cpu.dim() else 1
    work = cpu.float()
    if cpu.numel() and n >= 3 and n % 2 == 1:
        e = (work - work.amax(d, keepdim=True)).exp()
        y = e / e.narrow(d, 0, n - 1).sum(d, keepdim=True)  # the tail element left out
    else:
        y = torch.softmax(work, d)
    return y.to(torch.float32 if half_to_float else x.dtype).to(x.device)


_LIBS: list[Any] = []


def _install_softmax_odd_tail(device: str) -> None:
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_softmax", _softmax_odd_tail, device.upper())
    _LIBS.append(lib)  # the override lives as long as the library object


def _stale_tail_mode(device: str) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten

    class StaleTail(TorchDispatchMode):
        """Host-to-device copies from an odd element offset leave the last element stale."""

        def __torch_dispatch__(  # type: ignore[override]
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            src = dst = None
            if func is aten._to_copy.default:
                target = kwargs.get("device")
                if target is not None and torch.device(target).type == device:
                    src, dst = args[0], out
            elif func is aten.copy_.default and args[0].device.type == device:
                src, dst = args[1], args[0]
            if (
                isinstance(src, torch.Tensor)
                and src.device.type == "cpu"
                and src.storage_offset() % 2 == 1
                and dst is not None
                and dst.numel() > 1
            ):
                last = tuple(s - 1 for s in dst.shape)
                if dst.dtype == torch.bool:
                    dst[last] = ~dst[last]
                else:
                    dst[last] += 1
            return out

    return StaleTail()


def install_from_env(group: str, device: str) -> list[str]:
    """Install the faults of `group` for `device`; the names installed."""
    done = []
    for name in from_env():
        fault = FAULTS[name]
        if fault.group != group or device not in fault.devices:
            continue
        if name == "softmax_odd_tail":
            _install_softmax_odd_tail(device)
        else:
            mode = _stale_tail_mode(device)
            mode.__enter__()  # for the rest of this group's process
            _LIBS.append(mode)
        done.append(name)
        print(f"regress: kernel fault {name} planted in group {group}", flush=True)
    return done
