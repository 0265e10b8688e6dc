"""The sandbox: a line's patched torch.backends under a stand-in torch."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core import patching
from ...core.contract import (
    BUILD_INFO_FILE,
)
from ...core.errors import BuildError
from .macs import FAKE_MACS
from .series import filter_series, is_python_layer, materialise_header, series_for
from .shim import build_shim
from .tree import UpstreamTree, path_map_for

_STANDIN_TORCH_INIT = '''"""Stand-in torch for exercising the patched torch.backends.mps (build_scripts/maint/check_upstream/)."""
import os

__version__ = os.environ.get("INTELMAC_SANDBOX_TORCH_VERSION", "0.0.0+sandbox")

from torch import _C as _C
from torch import ops as ops
from torch import backends as backends
'''

_STANDIN_LIBRARY = '''"""Stand-in torch.library: the MPS backend module only imports Library."""


class Library:
    def __init__(self, *args, **kwargs):
        pass

    def impl(self, *args, **kwargs):
        pass
'''

# torch._C: upstream's bindings that torch.backends.mps uses; is_available() runs the first
# scan over the policy shim. Its queued C++ warnings become Python UserWarnings, as torch's
# PyWarningHandler does for TORCH_WARN in upstream's bindings.
_STANDIN_C = r'''"""Stand-in torch._C over the policy shim (build_scripts/maint/check_upstream/)."""
import ctypes
import json
import os
import warnings

_has_mps = os.environ.get("INTELMAC_SANDBOX_HAS_MPS", "1") == "1"


class _Device(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("low_power", ctypes.c_int), ("removable", ctypes.c_int),
                ("headless", ctypes.c_int), ("unified_memory", ctypes.c_int),
                ("working_set", ctypes.c_ulonglong), ("registry_id", ctypes.c_ulonglong),
                ("supports_mac2", ctypes.c_int), ("apple_gpu", ctypes.c_int)]


_lib = ctypes.CDLL(os.environ["INTELMAC_SANDBOX_SHIM"])
for _name in ("shim_error", "shim_unavailable_reason", "shim_take_warnings", "shim_report_json"):
    getattr(_lib, _name).restype = ctypes.c_char_p

_mac = json.loads(os.environ.get("INTELMAC_SANDBOX_MAC", "[]"))
_devices = (_Device * max(len(_mac), 1))(*[
    _Device(d["name"].encode(), d["low_power"], d["removable"], d["headless"], d["unified_memory"],
            d["working_set"], d["registry_id"], d["supports_mac2"], d["apple_gpu"]) for d in _mac])
_lib.shim_configure(_devices, len(_mac), 1, b"14.0")


def _flush():
    queued = _lib.shim_take_warnings().decode()
    for message in queued.split("\x1e") if queued else []:
        warnings.warn(message, UserWarning, stacklevel=3)


def _mps_is_available():
    if not _has_mps:
        return False
    try:
        return bool(_lib.shim_is_available())
    finally:
        _flush()


def _mps_is_on_macos_or_newer(major, minor):
    return _has_mps


'''

# torch.ops: the operators MPSDeviceSelection.mm registers (builds with MPS only). Like the
# real torch.ops calls they raise no Python warning themselves: what the C++ side queued is
# returned by mps_take_warnings(), which the patched layer must call and raise.
_STANDIN_OPS = r'''"""Stand-in torch.ops over the policy shim (build_scripts/maint/check_upstream/)."""
from torch import _C


class _Intelmac:
    def mps_get_allow_intel_gpu(self):
        return bool(_C._lib.shim_get_allow())

    def mps_set_allow_intel_gpu(self, allow):
        if not isinstance(allow, bool):
            raise TypeError("intelmac::mps_set_allow_intel_gpu() expected a bool")
        if _C._lib.shim_set_allow(int(allow)):
            raise RuntimeError(_C._lib.shim_error().decode())

    def mps_unavailable_reason(self):
        return _C._lib.shim_unavailable_reason().decode()

    def mps_device_report(self):
        return _C._lib.shim_report_json().decode()

    def mps_take_warnings(self):
        queued = _C._lib.shim_take_warnings().decode()
        return queued.split("\x1e") if queued else []


if _C._has_mps:
    intelmac = _Intelmac()
'''

# Stand-ins for the "new module alone" sandbox: no upstream file at all.
_STANDIN_BACKENDS_INIT = '''"""Stand-in torch.backends with the settable-attribute helpers the new module uses."""
import types


class ContextProp:
    def __init__(self, getter, setter):
        self.getter = getter
        self.setter = setter

    def __get__(self, obj, objtype):
        return self.getter()

    def __set__(self, obj, val):
        self.setter(val)


class PropModule(types.ModuleType):
    def __init__(self, m, name):
        super().__init__(name)
        self.m = m

    def __getattr__(self, attr):
        return self.m.__getattribute__(attr)


from torch.backends import mps as mps
'''

_STANDIN_MPS_INIT = '''"""Stand-in torch.backends.mps: upstream's is_available only."""
import torch


def is_available():
    return torch._C._mps_is_available()
'''

# Runs inside the sandbox: performs the steps given as JSON in argv[1] and prints one JSON
# record per step (value or error, and the warnings raised meanwhile).
_PROBE = r'''"""Probe for build_scripts/maint/check_upstream/: run steps against torch.backends.mps."""
import json
import sys
import warnings

steps = json.loads(sys.argv[1])
records = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")

    def drained():
        messages = [str(w.message) for w in caught]
        del caught[:]
        return messages

    import torch
    import torch.backends.mps as mps
    from torch.backends.mps import _device_policy as policy

    records.append({"step": "import", "warnings": drained()})
    for step in steps:
        record = {"step": step}
        try:
            if step == "get":
                record["value"] = mps.allow_intel_gpu
            elif step.startswith("set="):
                mps.allow_intel_gpu = json.loads(step[4:])
            elif step == "is_available":
                record["value"] = mps.is_available()
            elif step == "devices":
                infos = mps.devices()
                record["value"] = [d._asdict() for d in infos]
                record["types"] = sorted({type(d).__name__ for d in infos})
                record["fields"] = list(mps.MPSDeviceInfo._fields)
            elif step == "reason":
                record["value"] = mps.unavailable_reason()
            elif step == "build_info":
                record["value"] = mps.build_info()
            elif step == "exports":
                record["value"] = sorted(mps.__all__)
            elif step == "check":
                result = mps.check(timings=False)
                record["value"] = {
                    "type": type(result).__name__,
                    "exit_status": result.exit_status,
                    "status": result.status,
                    "reason": result.reason,
                    "exported": "check" in mps.__all__ and "check" in dir(mps),
                }
            elif step == "freeze_then_set":
                torch.backends.disable_global_flags()
                mps.allow_intel_gpu = True
            else:
                raise ValueError("unknown probe step " + step)
        except Exception as exc:
            record["error"] = type(exc).__name__ + ": " + str(exc)
        record["warnings"] = drained()
        records.append(record)
print(json.dumps(records))
'''


class ScenarioFailure(AssertionError):
    """A scenario found the patched Python layer breaking the contract."""


@dataclass(frozen=True)
class ProbeRecord:
    step: str
    value: Any = None
    error: str | None = None
    warnings: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sandbox:
    """A directory that imports as ``torch``, with the patched ``torch.backends.mps``."""

    root: Path
    shim: Path
    torch_version: str
    label: str  # what was patched, for messages
    python: str = sys.executable  # the interpreter the patched layer runs on

    def environment(self, mac: str, env: Mapping[str, str], has_mps: bool) -> dict[str, str]:
        # Only what the run needs: PYTORCH_MPS_* of the caller must not leak in.
        base = {
            key: os.environ[key]
            for key in ("PATH", "HOME", "SYSTEMROOT", "TMPDIR")
            if key in os.environ
        }
        base.update(
            PYTHONPATH=str(self.root),
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONIOENCODING="utf-8",
            INTELMAC_SANDBOX_SHIM=str(self.shim),
            INTELMAC_SANDBOX_MAC=json.dumps(FAKE_MACS[mac]),
            INTELMAC_SANDBOX_HAS_MPS="1" if has_mps else "0",
            INTELMAC_SANDBOX_TORCH_VERSION=self.torch_version,
        )
        base.update(env)
        return base

    def probe(
        self,
        mac: str,
        steps: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        has_mps: bool = True,
    ) -> list[ProbeRecord]:
        """Run ``steps`` in a fresh interpreter on the pretend Mac ``mac``."""
        result = self._run(
            [str(self.root / "intelmac_probe.py"), json.dumps(list(steps))], mac, env, has_mps
        )
        if result.returncode != 0:
            raise ScenarioFailure(
                f"the probe crashed on {mac} ({self.label}):\n{result.stderr.strip()}"
            )
        records = []
        for raw in json.loads(result.stdout):
            extra = {
                k: v for k, v in raw.items() if k not in ("step", "value", "error", "warnings")
            }
            records.append(
                ProbeRecord(
                    raw["step"],
                    raw.get("value"),
                    raw.get("error"),
                    tuple(raw.get("warnings", ())),
                    extra,
                )
            )
        return records

    def run_main(
        self,
        mac: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        has_mps: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``python -m torch.backends.mps ARGS`` on the pretend Mac ``mac``."""
        return self._run(["-m", "torch.backends.mps", *args], mac, env, has_mps)

    def _run(
        self, args: Sequence[str], mac: str, env: Mapping[str, str] | None, has_mps: bool
    ) -> subprocess.CompletedProcess[str]:
        """The sandbox's Python with ``args``, on the pretend Mac ``mac``."""
        return subprocess.run(
            [self.python, *args],
            cwd=self.root,
            env=self.environment(mac, env or {}, has_mps),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    @contextmanager
    def build_info_file(self, content: str) -> Iterator[Path]:
        """Put INTELMAC_BUILD.json into the sandbox's torch .dist-info for the duration."""
        path = next(self.root.glob("torch-*.dist-info")) / BUILD_INFO_FILE
        path.write_text(content, encoding="utf-8")
        try:
            yield path
        finally:
            path.unlink()


def _standin_siblings(backends_init: str) -> list[str]:
    """The submodules torch/backends/__init__.py imports (``from torch.backends import ...``)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(backends_init)):
        if isinstance(node, ast.ImportFrom) and node.module == "torch.backends":
            names += [alias.name for alias in node.names]
    return names


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _write_common(root: Path, torch_version: str) -> None:
    _write(root / "torch" / "__init__.py", _STANDIN_TORCH_INIT)
    _write(root / "torch" / "_C.py", _STANDIN_C)
    _write(root / "torch" / "ops.py", _STANDIN_OPS)
    _write(root / "torch" / "library.py", _STANDIN_LIBRARY)
    _write(root / "intelmac_probe.py", _PROBE)
    # build_info() looks for the .dist-info beside the imported torch package.
    _write(
        root / f"torch-{torch_version}.dist-info" / "METADATA",
        f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_version}\n",
    )


def make_sandbox(tree: UpstreamTree, patches: Sequence[Path], dest: Path, shim: Path) -> Sandbox:
    """The line's own Python files, patched with the series' Python hunks, under a stand-in torch."""
    mapper = path_map_for(tree)
    root = dest / "sandbox"
    with tempfile.TemporaryDirectory(prefix="python-patches-") as scratch:
        python_only = filter_series(patches, is_python_layer, Path(scratch))
        if not python_only:
            raise BuildError(
                "the series has no Python hunks (patch 0003 missing from the catalog?)"
            )
        needed = {"torch/backends/__init__.py", "torch/backends/mps/__init__.py"}
        for patch in python_only:
            needed |= {c.path for c in patching.file_changes(patch) if not c.is_new}
        for path in sorted(needed):
            mapped = mapper(path)
            source = tree.root / mapped if mapped else None
            if source is None or not source.is_file():
                raise BuildError(
                    f"{tree.root} has no {mapped or path}, which the Python-layer check needs"
                )
            _write(root / path, source.read_text(encoding="utf-8"))
        patching.apply_series(root, python_only)
    siblings = _standin_siblings((root / "torch/backends/__init__.py").read_text(encoding="utf-8"))
    for name in siblings:
        if name != "mps":
            _write(
                root / "torch" / "backends" / f"{name}.py",
                f'"""Stand-in torch.backends.{name}."""\n',
            )
    _write_common(root, tree.raw_version)
    return Sandbox(root, shim, tree.raw_version, f"{tree.describe()}, patched")


def sandbox_for(tree: UpstreamTree, dest: Path, line: str | None = None) -> Sandbox:
    """A ready sandbox of ``tree``: its line's series from the catalog applied to the tree's
    own Python files, and the policy shim built around the series' header, all under ``dest``.

    Run anything in it with ``Sandbox.environment(mac, ...)`` as the environment (tests/ci
    runs ci/wheel_checks.py there).
    """
    patches = series_for(line or tree.line)
    shim = build_shim(materialise_header(patches, dest / "policy"), dest / "shim")
    return make_sandbox(tree, patches, dest, shim)


def make_module_sandbox(patches: Sequence[Path], dest: Path, shim: Path) -> Sandbox:
    """The series' new Python files alone, with stand-ins instead of every upstream file."""
    root = dest / "module-sandbox"
    with tempfile.TemporaryDirectory(prefix="python-new-files-") as scratch:
        new_files = {
            c.path
            for p in patches
            for c in patching.file_changes(p)
            if c.is_new and is_python_layer(c.path)
        }
        only_new = filter_series(patches, lambda path: path in new_files, Path(scratch))
        root.mkdir(parents=True, exist_ok=True)
        patching.apply_series(root, only_new)
    _write(root / "torch" / "backends" / "__init__.py", _STANDIN_BACKENDS_INIT)
    mps_init = root / "torch" / "backends" / "mps" / "__init__.py"
    _write(mps_init, _STANDIN_MPS_INIT + _MODULE_EXPORTS)
    _write_common(root, "0.0.0+module")
    return Sandbox(root, shim, "0.0.0+module", "the new module alone")


# In the module-alone sandbox, the stand-in mps/__init__.py wires the new module in the way
# the patched upstream file does, so the same probe and scenarios run against it.
_MODULE_EXPORTS = """
from torch.backends.mps import _device_policy as _device_policy
from torch.backends.mps._device_policy import build_info, devices, MPSDeviceInfo, unavailable_reason

__all__ = ["is_available", "MPSDeviceInfo", "build_info", "devices", "unavailable_reason"]
_device_policy._install_module_properties(__name__)
"""
