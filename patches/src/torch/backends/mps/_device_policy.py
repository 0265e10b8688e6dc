"""Intel-GPU opt-in, device report and build information for ``torch.backends.mps``.

Added by the intelmac patch series (patch 0003); ``torch/backends/mps/__init__.py``
re-exports the public names and makes ``allow_intel_gpu`` a settable module attribute.

Every decision lives in C++ (``aten/src/ATen/mps/MPSDevicePolicy.h``): which Metal device
is used, why the others are skipped, how ``PYTORCH_MPS_ALLOW_INTEL_GPU`` and
``PYTORCH_MPS_DEVICE`` are read, and when a late change of the flag is an error. This
module only turns those answers into Python objects and a printable report, so that a
script, ``python -m torch.backends.mps`` and the C++ backend can never disagree. It reaches
the C++ state through the operators ``aten/src/ATen/mps/MPSDeviceSelection.mm`` registers
(``torch.ops.intelmac.mps_*``), which exist in builds with MPS only.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, TYPE_CHECKING

import torch


if TYPE_CHECKING:
    import importlib.metadata


__all__ = ["MPSDeviceInfo", "build_info", "devices", "unavailable_reason"]

ALLOW_ENV = "PYTORCH_MPS_ALLOW_INTEL_GPU"
DEVICE_ENV = "PYTORCH_MPS_DEVICE"
BUILD_INFO_FILE = "INTELMAC_BUILD.json"
NOT_BUILT_REASON = "PyTorch was built without MPS"

# The lru_cached answers of torch.backends.mps that depend on which device is chosen;
# they are refreshed whenever allow_intel_gpu changes. Some lines lack the last two.
_DEVICE_DEPENDENT_CACHES = ("is_available", "get_name", "get_core_count")

# What the C++ parser accepts (MPSDevicePolicy.h parse_bool_env); used only by builds
# without MPS, where no C++ policy exists. tests/patches_py checks the two agree.
_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off")
# C's isspace() set, which the C++ side trims; str.strip() would trim more.
_C_BLANKS = " \t\n\v\f\r"


class MPSDeviceInfo(NamedTuple):
    """One Metal device, as the MPS backend of this process sees it.

    ``index`` is the position in :func:`devices`, which lists devices in an order that
    does not depend on the order macOS reports them in (``PYTORCH_MPS_DEVICE`` accepts
    it). ``skip_reason`` says why a device is not used (for example "ranked after [0] AMD
    Radeon Pro 5500M ..."); it is ``None`` only for the selected device.
    """

    # Shadows tuple.index(); the name is the documented field, and the method is of no
    # use on a record like this.
    index: int  # type: ignore[assignment]
    name: str
    low_power: bool
    removable: bool
    headless: bool
    unified_memory: bool
    recommended_working_set_size: int
    eligible: bool
    selected: bool
    skip_reason: Optional[str]


def _built_with_mps() -> bool:
    return bool(getattr(torch._C, "_has_mps", False))


def _call(name: str, *args: Any) -> Any:
    """Run the C++ operator ``torch.ops.intelmac.<name>`` and raise the warnings it queued.

    torch.ops calls have no handler that turns TORCH_WARN into Python warnings, so the C++
    side keeps them queued for ``mps_take_warnings`` and they are raised here, once each.
    """
    ops = torch.ops.intelmac
    try:
        return getattr(ops, name)(*args)
    finally:
        for message in ops.mps_take_warnings():
            warnings.warn(message, UserWarning, stacklevel=3)


def parse_allow_env(raw: Optional[str]) -> "tuple[Optional[bool], Optional[str]]":
    """Read a ``PYTORCH_MPS_ALLOW_INTEL_GPU`` value: (value or None when unset, warning).

    Mirrors the C++ parser, for builds without MPS only. Only an empty value means unset;
    blanks alone are warned about like any other value that is not understood.
    """
    if raw is None or raw == "":
        return None, None
    text = raw.strip(_C_BLANKS).lower()
    if text in _TRUE_WORDS:
        return True, None
    if text in _FALSE_WORDS:
        return False, None
    return None, (
        f"Ignoring {ALLOW_ENV}='{raw}': expected 1, true, yes or on to allow, or 0, false, "
        "no or off not to (any case); using the default (not allowed)"
    )


class _FlagWithoutMPS:
    """``allow_intel_gpu`` of a build without MPS: stored so scripts run unchanged.

    It selects nothing, since there is no MPS backend to select a device for.
    """

    def __init__(self) -> None:
        self._value: Optional[bool] = None

    def get(self) -> bool:
        if self._value is None:
            value, warning = parse_allow_env(os.environ.get(ALLOW_ENV))
            if warning:
                warnings.warn(warning, stacklevel=3)
            self._value = bool(value)
        return self._value

    def set(self, value: bool) -> None:
        self._value = value


_flag_without_mps = _FlagWithoutMPS()


def get_allow_intel_gpu() -> bool:
    """The current value of ``torch.backends.mps.allow_intel_gpu``."""
    if not _built_with_mps():
        return _flag_without_mps.get()
    return bool(_call("mps_get_allow_intel_gpu"))


def set_allow_intel_gpu(value: bool, backend_module: Any = None) -> None:
    """Set ``allow_intel_gpu``; C++ decides whether that is allowed now.

    Raises RuntimeError when MPS already runs on a device and the new value would choose
    another one. ``backend_module`` is ``torch.backends.mps``: its cached answers that
    depend on the device are refreshed, so ``is_available()`` reflects the new choice.
    """
    # A strict type check: `allow_intel_gpu = "0"` would otherwise silently mean True.
    if not isinstance(value, bool):
        raise TypeError(
            f"torch.backends.mps.allow_intel_gpu must be True or False, not {value!r}"
        )
    if _built_with_mps():
        _call("mps_set_allow_intel_gpu", value)
    else:
        _flag_without_mps.set(value)
    if backend_module is not None:
        for name in _DEVICE_DEPENDENT_CACHES:
            cached = getattr(backend_module, name, None)
            cache_clear: Optional[Callable[[], None]] = getattr(cached, "cache_clear", None)
            if cache_clear is not None:
                cache_clear()


def devices() -> List[MPSDeviceInfo]:
    r"""Return every Metal device with whether MPS uses it, and why not if it does not.

    The list is empty when PyTorch was built without MPS or no Metal device exists.
    Example::

        >>> for d in torch.backends.mps.devices():
        ...     print(d.index, d.name, d.selected, d.skip_reason)
    """
    if not _built_with_mps():
        return []
    return [_device_info(entry) for entry in json.loads(_call("mps_device_report"))]


def _device_info(entry: Dict[str, Any]) -> MPSDeviceInfo:
    return MPSDeviceInfo(
        index=int(entry["index"]),
        name=str(entry["name"]),
        low_power=bool(entry["low_power"]),
        removable=bool(entry["removable"]),
        headless=bool(entry["headless"]),
        unified_memory=bool(entry["unified_memory"]),
        recommended_working_set_size=int(entry["recommended_working_set_size"]),
        eligible=bool(entry["eligible"]),
        selected=bool(entry["selected"]),
        skip_reason=entry["skip_reason"] or None,
    )


def unavailable_reason() -> Optional[str]:
    r"""Return why MPS cannot be used in this process, or None when it can.

    For example, on a Mac whose only GPU is an Intel one and without the opt-in:
    "only an Intel GPU (Intel(R) UHD Graphics 630) was found; set
    PYTORCH_MPS_ALLOW_INTEL_GPU=1 or torch.backends.mps.allow_intel_gpu = True ...".
    """
    if not _built_with_mps():
        return NOT_BUILT_REASON
    return _call("mps_unavailable_reason") or None


def build_info() -> Optional[Dict[str, Any]]:
    r"""Return how this torch was built (``INTELMAC_BUILD.json``), or None.

    The intelmac build writes that file into the wheel's ``.dist-info``: the upstream
    version, the patch series and its fingerprint, the toolchain and the build time.
    Other builds of torch have no such file and give None.
    """
    for dist in _torch_distributions():
        text = dist.read_text(BUILD_INFO_FILE)
        if text is None:
            continue
        try:
            data = json.loads(text)
        except ValueError as exc:
            warnings.warn(f"Ignoring an unreadable {BUILD_INFO_FILE} ({exc})", stacklevel=2)
            return None
        return data if isinstance(data, dict) else None
    return None


def _torch_distributions() -> "List[importlib.metadata.Distribution]":
    # Imported here, not at the top: this module is imported by `import torch`.
    import importlib.metadata

    # Only the .dist-info beside the torch package that is imported counts: another torch
    # elsewhere on sys.path (a user site, a source checkout) says nothing about this one.
    site = str(Path(torch.__file__).resolve().parent.parent)
    return list(importlib.metadata.distributions(name="torch", path=[site]))


def check(
    device: str = "mps",
    *,
    timings: bool = True,
    budget_s: float = 1.0,
    workloads: Optional[Sequence[str]] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> Any:
    r"""Check that MPS works on this GPU and time it against the CPU.

    Returns a ``CheckResult`` (``torch.backends.mps._check``): ``exit_status`` 0 when every
    smoke check passed, 1 when one did not, 2 when MPS is unavailable (``reason`` says
    why); ``results``, ``timings`` with a verdict each, ``summary``; ``print(result)``
    shows the report of ``python -m torch.backends.mps --check``, ``result.as_json()`` the
    data. Everything that touches the GPU runs in child processes. Example::

        >>> result = torch.backends.mps.check()
        >>> result.ok, [t.verdict for t in result.timings]
    """
    # Imported here: `import torch` imports this module, and the check is rarely used.
    from . import _check

    return _check.check(
        device, timings=timings, budget_s=budget_s, workloads=workloads, progress=progress
    )


def _install_module_properties(module_name: str) -> None:
    """Make ``allow_intel_gpu`` a settable attribute of ``torch.backends.mps``.

    It also adds ``check`` to the module: the upstream file's one hunk (patch 0003) stays
    as it is, and the new function lives in our files only.

    The same PropModule/ContextProp pattern that ``torch.backends.mkldnn`` uses for
    ``enabled``: the module in sys.modules is replaced by a proxy whose class carries the
    property; every other attribute still comes from the real module.
    """
    from torch.backends import ContextProp, PropModule

    real = sys.modules[module_name]
    real.check = check  # type: ignore[attr-defined]
    exported = getattr(real, "__all__", None)
    if isinstance(exported, list) and "check" not in exported:
        exported.append("check")

    def setter(value: bool) -> None:
        set_allow_intel_gpu(value, backend_module=real)

    class MPSBackendModule(PropModule):
        allow_intel_gpu = ContextProp(get_allow_intel_gpu, setter)

        def __dir__(self) -> List[str]:
            return sorted(set(dir(self.m)) | {"allow_intel_gpu", "check"})

    proxy = MPSBackendModule(real, module_name)
    # ModuleType.__init__ gives the proxy its own __spec__ = None (and __loader__,
    # __package__), which hide the real ones from __getattr__. This module is a package,
    # unlike mkldnn: `python -m torch.backends.mps` and submodule imports need them.
    for attr in ("__spec__", "__loader__", "__package__", "__path__", "__file__", "__doc__"):
        if hasattr(real, attr):
            setattr(proxy, attr, getattr(real, attr))
    sys.modules[module_name] = proxy


# ---------------------------------------------------------------------------------------
# python -m torch.backends.mps
# ---------------------------------------------------------------------------------------

_COLUMNS = (
    "#",
    "name",
    "low-power",
    "removable",
    "headless",
    "unified memory",
    "working set",
    "eligible",
    "selected",
    "skip reason",
)


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size else "-"


def format_device_table(infos: Sequence[MPSDeviceInfo]) -> str:
    """The device report as a plain-text table (no colour: it ends up in bug reports)."""
    if not infos:
        return "No Metal devices."
    rows = [list(_COLUMNS)]
    for d in infos:
        rows.append(
            [
                str(d.index),
                d.name,
                _yes_no(d.low_power),
                _yes_no(d.removable),
                _yes_no(d.headless),
                _yes_no(d.unified_memory),
                _gib(d.recommended_working_set_size),
                _yes_no(d.eligible),
                _yes_no(d.selected),
                d.skip_reason or "-",
            ]
        )
    # The last column is free text; padding it would only add trailing blanks.
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)] + [row[-1]]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def _env_state(value: Optional[str]) -> str:
    return "unset" if value is None else repr(value)


def report(is_available: Callable[[], bool]) -> Dict[str, Any]:
    """Everything ``python -m torch.backends.mps`` shows, as JSON-ready data."""
    from torch.backends.mps._memory import memory_limit  # it reads this module's devices()

    usable = bool(is_available()) if _built_with_mps() else False
    return {
        "torch_version": str(torch.__version__),
        "built_with_mps": _built_with_mps(),
        "usable": usable,
        "unavailable_reason": None if usable else unavailable_reason(),
        "allow_intel_gpu": get_allow_intel_gpu(),
        "environment": {name: os.environ.get(name) for name in (ALLOW_ENV, DEVICE_ENV)},
        "devices": [d._asdict() for d in devices()],
        "memory_limit": memory_limit() if usable else None,
        "build_info": build_info(),
    }


def _format_limit(limit: Optional[Dict[str, Any]]) -> str:
    if limit is None:
        return "MPS memory limit: - (no device in use)"
    if limit["ratio"] is None:
        return f"MPS memory limit: unknown ({limit['source']})"
    if limit["limit_bytes"] is None:
        return f"MPS memory limit: none (ratio 0 from {limit['source']})"
    return (f"MPS memory limit: {_gib(limit['limit_bytes'])} ({limit['ratio']:g} x the recommended working set; "
            f"{limit['source']})")


def format_report(data: Dict[str, Any]) -> str:
    infos = [MPSDeviceInfo(**entry) for entry in data["devices"]]
    selected = [d.name for d in infos if d.selected]
    status = (
        f"usable, on {selected[0]}" if data["usable"] and selected else
        "usable" if data["usable"] else
        f"unavailable: {data['unavailable_reason'] or 'no reason given'}"
    )
    info = data["build_info"]
    lines = [
        f"torch {data['torch_version']}",
        f"MPS: {status}",
        "",
        format_device_table(infos),
        "",
        _format_limit(data.get("memory_limit")),
        f"torch.backends.mps.allow_intel_gpu = {data['allow_intel_gpu']}",
        f"{ALLOW_ENV}: {_env_state(data['environment'][ALLOW_ENV])}",
        f"{DEVICE_ENV}: {_env_state(data['environment'][DEVICE_ENV])}",
        "",
    ]
    if info is None:
        lines.append(f"build info: none ({BUILD_INFO_FILE} not found: not an intelmac build)")
    else:
        lines.append("build info:")
        lines.extend(f"  {key}: {json.dumps(value)}" for key, value in info.items())
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m torch.backends.mps``: exit 0 when MPS is usable, 1 when it is not."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m torch.backends.mps",
        description="Show the Metal devices, which one the MPS backend uses and why, "
        "and how this torch was built. Exit status 0: MPS is usable; 1: it is not. "
        "With --check: whether MPS works on this GPU and whether it is worth it.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--check",
        action="store_true",
        help="check that MPS works on this GPU (smoke checks against the CPU) and time it "
        "against the CPU; exit status 0: every check passed, 1: one did not, 2: MPS is "
        "unavailable",
    )
    from . import _check

    _check.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.check:
        return _check.run_cli(args)

    import torch.backends.mps as mps_backend

    data = report(mps_backend.is_available)
    print(json.dumps(data, indent=2) if args.json else format_report(data))
    return 0 if data["usable"] else 1
