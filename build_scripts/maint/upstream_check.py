"""``check-upstream``: does the patch series fit a real upstream PyTorch, and does it work?

    intelmac-torch check-upstream SRC [--torch X.Y.Z] [--no-python]

SRC is either an upstream source tree (it has ``version.txt``) or an unpacked torch wheel
(``torch/`` and ``torch-*.dist-info/``). The release line comes from the tree (``2.6.0a0``
and ``2.9.1+cpu`` both name their X.Y.Z line) unless ``--torch`` says otherwise.

Two checks, in order:

1. **Fidelity.** The line's series from the catalog is applied (in a scratch copy) with
   ``patching.check_upstream``. Every hunk whose file the tree has must apply. A wheel has
   no ``.mm``/``.cpp``/CMake files; those are reported as absent, not failed. Its headers
   live under ``torch/include/``; its ``torch/_C/__init__.pyi`` is generated from the
   ``.pyi.in`` (should a series edit that), keeping the hand-written part verbatim.
2. **The Python layer.** The line's own ``torch/backends/__init__.py`` and
   ``torch/backends/mps/__init__.py`` are copied into a sandbox, patched with the series'
   Python hunks and imported under a stand-in ``torch`` package. Only the C++ entry points
   (``torch._C._mps_is_available`` and the operators ``torch.ops.intelmac.mps_*`` that
   MPSDeviceSelection.mm registers) are replaced, by test doubles that run the real policy: a small
   C-ABI shim compiled around the series' own ``MPSDevicePolicy.h`` (patch 0001), driven
   through ctypes on pretend Macs (UHD 630 only, UHD 630 + Radeon Pro 5500M, Mac Pro, M1).
   The scenarios below exercise the contract of issue 3: the default, the environment
   variables, the opt-in after a failed first scan, the late-change RuntimeError, device
   picking, ``devices()``, ``build_info()`` and ``python -m torch.backends.mps``.

The shim plays the part of MPSDeviceSelection.mm (patch 0002), which only a Mac compiles: like it,
it holds one ``policy::DeviceState`` of the header (the flag, the current choice, rescans and
refusals, the one-time warnings) and adds only the pretend devices and the first-use scan.
tests/patches_py calls the same functions.
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import email.parser
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ..core import catalog, patching
from ..core.contract import (
    ACCEPTED_FALSE,
    ACCEPTED_TRUE,
    ALLOW_ENV,
    BUILD_INFO_FILE,
    DEVICE_ENV,
    DEVICE_INFO_FIELDS,
)
from ..core.errors import BuildError
from ..maint.newfile_patch import split_sections

POLICY_HEADER = "aten/src/ATen/mps/MPSDevicePolicy.h"


# ---------------------------------------------------------------------------------------
# Which tree, which line
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpstreamTree:
    root: Path
    kind: str  # "source" or "wheel"
    raw_version: str  # as the tree states it, e.g. "2.6.0a0"

    @property
    def line(self) -> str:
        return normalise_version(self.raw_version)

    def describe(self) -> str:
        what = "source tree" if self.kind == "source" else "unpacked wheel"
        return f"{self.root} ({what}, torch {self.raw_version})"


def normalise_version(raw: str) -> str:
    """The X.Y.Z release line of a version string: ``2.6.0a0`` and ``2.9.1+cpu`` -> X.Y.Z."""
    try:
        version = Version(raw.strip())
    except InvalidVersion:
        raise BuildError(
            f"'{raw}' is not a PyTorch version; pass the release line with --torch X.Y.Z"
        ) from None
    return f"{version.major}.{version.minor}.{version.micro}"


def detect_tree(root: Path) -> UpstreamTree:
    """Recognise an upstream source tree or an unpacked wheel, and its version."""
    if not root.is_dir():
        raise BuildError(
            f"{root} is not a directory; give a PyTorch source tree or an unpacked torch wheel"
        )
    version_txt = root / "version.txt"
    if version_txt.is_file():
        return UpstreamTree(root, "source", version_txt.read_text(encoding="utf-8").strip())
    dist_infos = sorted(root.glob("torch-*.dist-info"))
    if (root / "torch").is_dir() and dist_infos:
        metadata = dist_infos[0] / "METADATA"
        if not metadata.is_file():
            raise BuildError(f"{dist_infos[0]} has no METADATA: is the wheel fully unpacked?")
        headers = email.parser.Parser().parsestr(
            metadata.read_text(encoding="utf-8"), headersonly=True
        )
        version = headers.get("Version")
        if not version:
            raise BuildError(f"{metadata} names no Version")
        return UpstreamTree(root, "wheel", version)
    raise BuildError(
        f"{root} is neither a PyTorch source tree (no version.txt) nor an unpacked torch wheel "
        "(no torch/ beside a torch-*.dist-info/). Unpack a wheel with: python -m zipfile -e torch-*.whl DIR"
    )


def wheel_path(path: str) -> str | None:
    """Where a file of the upstream source tree lives in an unpacked wheel (None: nowhere)."""
    if path.endswith((".mm", ".cpp", ".cu", ".c", ".txt", ".cmake", ".bzl")):
        return None
    if path.startswith("aten/src/ATen/"):
        return (
            "torch/include/ATen/" + path[len("aten/src/ATen/") :] if path.endswith(".h") else None
        )
    if path.startswith("c10/") and path.endswith(".h"):
        return "torch/include/" + path
    if path.startswith("torch/csrc/") and path.endswith(".h"):
        return "torch/include/" + path
    if path.endswith(".pyi.in"):
        # The wheel ships the stub generated from it; the hand-written part is verbatim.
        return path[: -len(".in")]
    if path.startswith("torch/"):
        return path
    return None  # cmake/, tools/, setup.py, ...: build inputs a wheel does not carry


def path_map_for(tree: UpstreamTree) -> patching.PathMap:
    return (lambda path: path) if tree.kind == "source" else wheel_path


# ---------------------------------------------------------------------------------------
# Parts of a series
# ---------------------------------------------------------------------------------------


def filter_series(patches: Sequence[Path], keep: Callable[[str], bool], dest: Path) -> list[Path]:
    """Copies of ``patches`` with only the file sections whose path ``keep`` accepts.

    Patches left with no section are dropped. The copies are applied with the project's
    own applier; this only selects text.
    """
    dest.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    for patch in patches:
        header, sections = split_sections(patch.read_text(encoding="utf-8"))
        kept = [text for path, text in sections if keep(path)]
        if kept:
            copy = dest / patch.name
            copy.write_text(header + "".join(kept), encoding="utf-8")
            out.append(copy)
    return out


def is_python_layer(path: str) -> bool:
    return path.startswith("torch/") and path.endswith(".py")


def materialise_header(patches: Sequence[Path], dest: Path) -> Path:
    """Write MPSDevicePolicy.h as the series leaves it under ``dest``; return the include root."""
    with tempfile.TemporaryDirectory(prefix="policy-patches-") as scratch:
        header_only = filter_series(patches, lambda path: path == POLICY_HEADER, Path(scratch))
        if not header_only:
            raise BuildError(
                f"the series does not create {POLICY_HEADER} (patch 0001 missing from the catalog?)"
            )
        dest.mkdir(parents=True, exist_ok=True)
        patching.apply_series(dest, header_only)
    return dest / "aten" / "src"


# ---------------------------------------------------------------------------------------
# The C-ABI shim: MPSDevice.mm's state around the real policy header
# ---------------------------------------------------------------------------------------

# Plays MPSDeviceSelection.mm of patch 0002 on a pretend Mac. The state and all its rules (the flag
# read from the environment once, the scan, a rescan or a refusal when the flag changes, the
# one-time warnings) are the header's policy::DeviceState, as in MPSDevice.mm; the shim only
# holds the pretend device list and plays MPSDevice::getInstance() (the first use scans once)
# and rescanIfUnavailable() (scan again when DeviceState says so).
SHIM_SOURCE = r"""
#include <ATen/mps/MPSDevicePolicy.h>

#include <cstring>
#include <string>
#include <vector>

namespace policy = at::mps::policy;

namespace {

struct FakeMac {
  std::vector<policy::DeviceProps> devices; // what MTLCopyAllDevices() returns
  policy::Platform platform;                // whether upstream's macOS probe passes
  bool constructed = false;                 // MPSDevice::getInstance() ran
  policy::DeviceState state;
  std::string error;
  std::string text;                         // storage for returned strings
};

FakeMac mac;

// MPSDevice::getInstance(): the first use of MPS scans once.
void ensure_device() {
  if (!mac.constructed) {
    mac.constructed = true;
    mac.state.scan(mac.devices, mac.platform);
  }
}

const char* keep(const std::string& text) {
  mac.text = text;
  return mac.text.c_str();
}

} // namespace

extern "C" {

struct ShimDevice {
  const char* name;
  int low_power;
  int removable;
  int headless;
  int unified_memory;
  unsigned long long working_set;
  unsigned long long registry_id;
  int supports_mac2;
  int apple_gpu;
};

void shim_configure(const ShimDevice* devices, size_t count, int macos_ok, const char* min_macos) {
  mac = FakeMac();
  for (size_t i = 0; i < count; ++i) {
    policy::DeviceProps props;
    props.name = devices[i].name;
    props.low_power = devices[i].low_power != 0;
    props.removable = devices[i].removable != 0;
    props.headless = devices[i].headless != 0;
    props.unified_memory = devices[i].unified_memory != 0;
    props.recommended_working_set_size = devices[i].working_set;
    props.registry_id = devices[i].registry_id;
    props.supports_mac2 = devices[i].supports_mac2 != 0;
    props.apple_gpu = devices[i].apple_gpu != 0;
    mac.devices.push_back(props);
  }
  mac.platform.macos_ok = macos_ok != 0;
  mac.platform.min_macos = min_macos ? min_macos : "";
}

int shim_is_available() {
  ensure_device();
  return mac.state.selection().chosen() != nullptr;
}

int shim_get_allow() {
  return mac.state.allow_intel_gpu() ? 1 : 0;
}

// setAllowIntelGpu(): 1 when refused (the message in shim_error), else 0; a rescan that
// DeviceState asks for is run at once, as rescanIfUnavailable() does.
int shim_set_allow(int value) {
  const auto change = mac.state.set_allow_intel_gpu(value != 0, mac.error);
  if (change == policy::DeviceState::Change::rescan) {
    mac.state.scan(mac.devices, mac.platform);
  }
  return change == policy::DeviceState::Change::refused ? 1 : 0;
}

const char* shim_error() {
  return mac.error.c_str();
}

const char* shim_unavailable_reason() {
  ensure_device();
  return keep(mac.state.selection().unavailable_reason);
}

// mps_device_report(): the header's own JSON report.
const char* shim_report_json() {
  ensure_device();
  return keep(policy::report_json(mac.state.selection()));
}

// The warnings DeviceState queued since the last call, '\x1e'-separated.
const char* shim_take_warnings() {
  std::string joined;
  for (const std::string& warning : mac.state.take_warnings()) {
    joined += (joined.empty() ? "" : "\x1e") + warning;
  }
  return keep(joined);
}

// parse_bool_env on its own: -1 unset, 0 or 1; the warning (if any) into `warning`.
int shim_parse_bool_env(const char* raw, char* warning, size_t size) {
  const auto env = policy::parse_bool_env(policy::kAllowIntelGpuEnv, raw);
  if (size > 0) {
    std::strncpy(warning, env.warning.c_str(), size - 1);
    warning[size - 1] = '\0';
  }
  return env.value ? (*env.value ? 1 : 0) : -1;
}

} // extern "C"
"""


def compiler() -> str:
    """The C++ compiler for the shim: $CXX, else g++ (clang++ works as well)."""
    name = os.environ.get("CXX", "g++")
    found = shutil.which(name)
    if found is None:
        raise BuildError(
            f"no C++ compiler '{name}' for the policy shim; install g++ (apt-get install g++) or set CXX, "
            "or skip the Python-layer check with --no-python"
        )
    return found


def build_shim(include_root: Path, dest: Path) -> Path:
    """Compile the shim around the header under ``include_root``; return the shared library."""
    dest.mkdir(parents=True, exist_ok=True)
    source = dest / "policy_shim.cpp"
    source.write_text(SHIM_SOURCE, encoding="utf-8")
    library = dest / "policy_shim.so"
    argv = [
        compiler(),
        "-std=c++17",
        "-O1",
        "-Wall",
        "-Werror",
        "-shared",
        "-fPIC",
        f"-I{include_root}",
        str(source),
        "-o",
        str(library),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(
            f"the policy shim does not compile against {include_root}:\n{result.stderr.strip()}"
        )
    return library


def c_parse_bool_env(library: Path, raw: str | None) -> tuple[bool | None, str]:
    """What the C++ parser makes of a PYTORCH_MPS_ALLOW_INTEL_GPU value: (value, warning)."""
    lib = ctypes.CDLL(str(library))
    lib.shim_parse_bool_env.restype = ctypes.c_int
    lib.shim_parse_bool_env.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    buffer = ctypes.create_string_buffer(4096)
    encoded = None if raw is None else raw.encode("utf-8")
    code = lib.shim_parse_bool_env(encoded, buffer, len(buffer))
    value = None if code < 0 else bool(code)
    return value, buffer.value.decode("utf-8")


# ---------------------------------------------------------------------------------------
# Pretend Macs
# ---------------------------------------------------------------------------------------

GIB = 1024**3


def _device(
    name: str,
    registry_id: int,
    *,
    low_power: bool = False,
    removable: bool = False,
    headless: bool = False,
    unified_memory: bool = False,
    working_set: int = 4 * GIB,
    mac2: bool = True,
    apple: bool = False,
) -> dict[str, Any]:
    return {
        "name": name,
        "registry_id": registry_id,
        "low_power": low_power,
        "removable": removable,
        "headless": headless,
        "unified_memory": unified_memory,
        "working_set": working_set,
        "supports_mac2": mac2,
        "apple_gpu": apple,
    }


UHD630 = _device(
    "Intel(R) UHD Graphics 630",
    0x1001,
    low_power=True,
    unified_memory=True,
    working_set=1536 * 1024**2,
)
PRO5500M = _device("AMD Radeon Pro 5500M", 0x2001, working_set=8 * GIB)
VEGA_II_A = _device("AMD Radeon Pro Vega II", 0x3001, working_set=32 * GIB)
VEGA_II_B = _device("AMD Radeon Pro Vega II", 0x3002, headless=True, working_set=32 * GIB)
M1 = _device("Apple M1", 0x4001, unified_memory=True, apple=True, working_set=11 * GIB)
# The only Metal device of a macOS VM (GitHub's hosted macOS runners): not GPU family Mac2.
PARAVIRT = _device("Apple Paravirtual device", 0x5001, mac2=False, working_set=1 * GIB)

FAKE_MACS: dict[str, list[dict[str, Any]]] = {
    "mac-mini-2018": [UHD630],
    "macbook-pro-16-2019": [UHD630, PRO5500M],
    "mac-pro-2019": [VEGA_II_A, VEGA_II_B],
    "apple-m1": [M1],
    "macos-vm": [PARAVIRT],
    "no-devices": [],
}


# ---------------------------------------------------------------------------------------
# The sandbox: the patched torch.backends under a stand-in torch
# ---------------------------------------------------------------------------------------

_STANDIN_TORCH_INIT = '''"""Stand-in torch for exercising the patched torch.backends.mps (build_scripts/maint/upstream_check.py)."""
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
_STANDIN_C = r'''"""Stand-in torch._C over the policy shim (build_scripts/maint/upstream_check.py)."""
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
_STANDIN_OPS = r'''"""Stand-in torch.ops over the policy shim (build_scripts/upstream_check.py)."""
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
_PROBE = r'''"""Probe for build_scripts/maint/upstream_check.py: run steps against torch.backends.mps."""
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
        result = subprocess.run(
            [self.python, str(self.root / "intelmac_probe.py"), json.dumps(list(steps))],
            cwd=self.root,
            env=self.environment(mac, env or {}, has_mps),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
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
        return subprocess.run(
            [self.python, "-m", "torch.backends.mps", *args],
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


# ---------------------------------------------------------------------------------------
# Scenarios: the contract of issue 3, checked against a sandbox
# ---------------------------------------------------------------------------------------


class ScenarioFailure(AssertionError):
    """A scenario found the patched Python layer breaking the contract."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ScenarioFailure(message)


def _only(records: Sequence[ProbeRecord], step: str) -> ProbeRecord:
    found = [r for r in records if r.step == step]
    _expect(len(found) == 1, f"expected one '{step}' record, got {len(found)}")
    return found[0]


def _no_error(record: ProbeRecord) -> ProbeRecord:
    _expect(record.error is None, f"step '{record.step}' failed: {record.error}")
    return record


def _all_warnings(records: Sequence[ProbeRecord]) -> list[str]:
    return [w for r in records for w in r.warnings]


def _index_of(sandbox: Sandbox, mac: str, name_part: str) -> int:
    """The index devices() gives a device, asked of the patched layer itself."""
    (record,) = [r for r in sandbox.probe(mac, ["devices"]) if r.step == "devices"]
    matches = [
        d["index"] for d in _no_error(record).value if name_part.lower() in d["name"].lower()
    ]
    _expect(
        len(matches) == 1,
        f"devices() on {mac} lists {len(matches)} devices named like '{name_part}'",
    )
    return int(matches[0])


def scenario_default_is_off(sandbox: Sandbox) -> None:
    """Intel-only Mac, no environment: the flag is False and MPS says why it is unavailable."""
    records = sandbox.probe("mac-mini-2018", ["get", "is_available", "reason"])
    _expect(
        _no_error(_only(records, "get")).value is False, "allow_intel_gpu must default to False"
    )
    _expect(
        _no_error(_only(records, "is_available")).value is False,
        "an Intel-only Mac must not use MPS without the opt-in",
    )
    reason = _no_error(_only(records, "reason")).value
    _expect(
        isinstance(reason, str) and "Intel(R) UHD Graphics 630" in reason and ALLOW_ENV in reason,
        f"unavailable_reason() must name the Intel GPU and {ALLOW_ENV}, got {reason!r}",
    )
    _expect(
        not _all_warnings(records), f"no warning expected by default, got {_all_warnings(records)}"
    )


def scenario_env_spellings(sandbox: Sandbox) -> None:
    """Every accepted spelling, in any case; empty means unset; all without a warning."""
    # Each word once, in turn lower, upper and mixed case (one process per value).
    styles = (str.lower, str.upper, str.capitalize)
    cases = [(styles[i % 3](word), True) for i, word in enumerate(ACCEPTED_TRUE)]
    cases += [(styles[(i + 1) % 3](word), False) for i, word in enumerate(ACCEPTED_FALSE)]
    cases += [("", False), (" on ", True), ("oFf", False)]
    for raw, expected in dict(cases).items():
        records = sandbox.probe("mac-mini-2018", ["get"], {ALLOW_ENV: raw})
        value = _no_error(_only(records, "get")).value
        _expect(
            value is expected,
            f"{ALLOW_ENV}={raw!r} must give allow_intel_gpu={expected}, got {value!r}",
        )
        _expect(
            not _all_warnings(records),
            f"{ALLOW_ENV}={raw!r} must not warn, got {_all_warnings(records)}",
        )


def scenario_env_invalid_warns_once(sandbox: Sandbox) -> None:
    """An unknown value, blanks alone included: one warning naming variable, value and accepted values."""
    for raw in ("maybe", "   "):
        records = sandbox.probe(
            "mac-mini-2018", ["get", "is_available", "get", "reason"], {ALLOW_ENV: raw}
        )
        _expect(_no_error(_only(records, "import")).error is None, "import failed")
        values = [r.value for r in records if r.step == "get"]
        _expect(
            values == [False, False],
            f"{raw!r}: an invalid value must leave the default (False), got {values}",
        )
        found = _all_warnings(records)
        _expect(len(found) == 1, f"{raw!r}: expected exactly one warning, got {found}")
        text = found[0]
        missing = [
            part
            for part in (ALLOW_ENV, f"'{raw}'", *ACCEPTED_TRUE, *ACCEPTED_FALSE)
            if part not in text
        ]
        _expect(
            not missing,
            f"the warning must name the variable, the value and the accepted values; "
            f"{missing} missing from {text!r}",
        )


def scenario_opt_in_after_failed_scan(sandbox: Sandbox) -> None:
    """is_available() False, then allow_intel_gpu = True, then is_available() True."""
    records = sandbox.probe(
        "mac-mini-2018",
        ["is_available", "set=true", "get", "is_available", "reason", "devices", "is_available"],
    )
    available = [r.value for r in records if r.step == "is_available"]
    _expect(
        all(r.error is None for r in records),
        f"no step may fail: {[r.error for r in records if r.error]}",
    )
    _expect(
        available == [False, True, True],
        f"expected is_available() False, True, True; got {available}",
    )
    _expect(_only(records, "get").value is True, "the flag must read back True")
    _expect(
        _only(records, "reason").value is None,
        "unavailable_reason() must be None once MPS is usable",
    )
    selected = [d["name"] for d in _only(records, "devices").value if d["selected"]]
    _expect(selected == [UHD630["name"]], f"the Intel GPU must be selected, got {selected}")
    intel_notes = [w for w in _all_warnings(records) if UHD630["name"] in w]
    _expect(
        len(intel_notes) == 1,
        f"the Intel performance note must come exactly once, got {intel_notes}",
    )
    _expect(
        "CPU" in intel_notes[0] and "benchmark" in intel_notes[0],
        f"the Intel note must compare with the CPU and point to the benchmark: {intel_notes[0]!r}",
    )


def scenario_set_before_first_use(sandbox: Sandbox) -> None:
    """Set right after import, before any MPS use: it decides the first scan."""
    records = sandbox.probe("mac-mini-2018", ["set=true", "is_available", "get"])
    _expect(
        all(r.error is None for r in records),
        f"no step may fail: {[r.error for r in records if r.error]}",
    )
    _expect(
        _only(records, "is_available").value is True,
        "allow_intel_gpu = True before first use must make the Intel GPU usable",
    )
    dual = sandbox.probe("macbook-pro-16-2019", ["set=true", "devices"])
    selected = [d["name"] for d in _no_error(_only(dual, "devices")).value if d["selected"]]
    _expect(
        selected == [PRO5500M["name"]],
        f"the opt-in must not move a dual-GPU Mac off its Radeon, got {selected}",
    )


def scenario_late_change_raises(sandbox: Sandbox) -> None:
    """A device in use and a flag change that would switch it: RuntimeError, flag unchanged."""
    records = sandbox.probe(
        "mac-mini-2018", ["is_available", "set=false", "get", "is_available"], {ALLOW_ENV: "1"}
    )
    first, second = [r for r in records if r.step == "is_available"]
    _expect(first.value is True, f"{ALLOW_ENV}=1 must make the Intel GPU usable, got {first.value}")
    change = _only(records, "set=false")
    _expect(
        change.error is not None and change.error.startswith("RuntimeError"),
        f"switching off after first use must raise RuntimeError, got {change.error!r}",
    )
    _expect(
        ALLOW_ENV in (change.error or "") and "before" in (change.error or ""),
        f"the error must say to set {ALLOW_ENV} or the flag before first use: {change.error!r}",
    )
    _expect(_only(records, "get").value is True, "a refused change must leave the flag as it was")
    _expect(second.value is True, "a refused change must leave MPS usable")


def scenario_unchanged_choice_is_noop(sandbox: Sandbox) -> None:
    """Discrete GPU in use: toggling the flag does not change the choice, so nothing happens."""
    records = sandbox.probe(
        "macbook-pro-16-2019",
        ["is_available", "set=true", "get", "set=false", "get", "is_available", "devices"],
    )
    _expect(
        all(r.error is None for r in records),
        f"no step may fail: {[r.error for r in records if r.error]}",
    )
    _expect(
        [r.value for r in records if r.step == "get"] == [True, False],
        "the flag must follow each set",
    )
    _expect(
        [r.value for r in records if r.step == "is_available"] == [True, True],
        "MPS must stay usable",
    )
    selected = [d["name"] for d in _only(records, "devices").value if d["selected"]]
    _expect(selected == [PRO5500M["name"]], f"the Radeon must stay selected, got {selected}")


def scenario_pick_by_index(sandbox: Sandbox) -> None:
    """PYTORCH_MPS_DEVICE=<index of the Intel GPU in devices()> picks it: an explicit opt-in."""
    index = _index_of(sandbox, "macbook-pro-16-2019", "UHD")
    records = sandbox.probe(
        "macbook-pro-16-2019", ["get", "is_available", "devices"], {DEVICE_ENV: str(index)}
    )
    _expect(
        _only(records, "is_available").value is True,
        "picking a device by index must make MPS usable",
    )
    selected = [d for d in _only(records, "devices").value if d["selected"]]
    _expect(
        [d["index"] for d in selected] == [index],
        f"device {index} must be selected, got {selected}",
    )


def scenario_pick_by_name(sandbox: Sandbox) -> None:
    """PYTORCH_MPS_DEVICE=<part of a name>, any case."""
    for part, expected in (("uhd graphics", UHD630["name"]), ("RADEON", PRO5500M["name"])):
        records = sandbox.probe(
            "macbook-pro-16-2019", ["is_available", "devices"], {DEVICE_ENV: part}
        )
        selected = [d["name"] for d in _no_error(_only(records, "devices")).value if d["selected"]]
        _expect(
            selected == [expected], f"{DEVICE_ENV}={part!r} must select {expected}, got {selected}"
        )


def scenario_pick_ambiguous_or_unknown(sandbox: Sandbox) -> None:
    """A name matching several devices, or none, or an index out of range: unavailable, devices listed."""
    cases = (
        ("mac-pro-2019", "vega"),
        ("macbook-pro-16-2019", "nvidia"),
        ("macbook-pro-16-2019", "7"),
    )
    for mac, value in cases:
        records = sandbox.probe(mac, ["is_available", "reason", "devices"], {DEVICE_ENV: value})
        _expect(
            _only(records, "is_available").value is False,
            f"{DEVICE_ENV}={value!r} on {mac} must leave MPS off",
        )
        reason = _only(records, "reason").value or ""
        names = {d["name"] for d in _only(records, "devices").value}
        _expect(
            DEVICE_ENV in reason and all(name in reason for name in names),
            f"the reason must name {DEVICE_ENV} and list the devices {sorted(names)}: {reason!r}",
        )


def scenario_devices_fields(sandbox: Sandbox) -> None:
    """devices(): MPSDeviceInfo NamedTuples with the contract's fields, a stable index order."""
    records = sandbox.probe("macbook-pro-16-2019", ["devices", "exports"])
    record = _no_error(_only(records, "devices"))
    _expect(
        record.extra.get("types") == ["MPSDeviceInfo"],
        f"devices() must hold MPSDeviceInfo, got {record.extra}",
    )
    _expect(
        tuple(record.extra.get("fields", ())) == DEVICE_INFO_FIELDS,
        f"MPSDeviceInfo fields must be {DEVICE_INFO_FIELDS}, got {record.extra.get('fields')}",
    )
    infos = record.value
    _expect(
        len(infos) == len(FAKE_MACS["macbook-pro-16-2019"]),
        f"one entry per Metal device, got {infos}",
    )
    _expect(
        [d["index"] for d in infos] == list(range(len(infos))),
        "index must be the position in devices()",
    )
    by_name = {d["name"]: d for d in infos}
    for fake in FAKE_MACS["macbook-pro-16-2019"]:
        info = by_name[fake["name"]]
        for key, fake_key in (
            ("low_power", "low_power"),
            ("removable", "removable"),
            ("headless", "headless"),
            ("unified_memory", "unified_memory"),
            ("recommended_working_set_size", "working_set"),
        ):
            _expect(
                info[key] == fake[fake_key],
                f"{fake['name']}: {key} is {info[key]!r}, Metal said {fake[fake_key]!r}",
            )
    selected = [d for d in infos if d["selected"]]
    _expect(
        len(selected) == 1 and selected[0]["skip_reason"] is None and selected[0]["eligible"],
        f"exactly one eligible selected device without a skip reason, got {selected}",
    )
    skipped = [d for d in infos if not d["selected"]]
    _expect(
        all(isinstance(d["skip_reason"], str) and d["skip_reason"] for d in skipped),
        f"every other device must say why it was skipped: {skipped}",
    )
    exports = _no_error(_only(records, "exports")).value
    missing = {"MPSDeviceInfo", "build_info", "devices", "unavailable_reason"} - set(exports)
    _expect(not missing, f"__all__ lacks {sorted(missing)}")


def scenario_apple_silicon_unchanged(sandbox: Sandbox) -> None:
    """On Apple silicon the flag changes nothing: the M1 is used either way."""
    for env in ({}, {ALLOW_ENV: "0"}, {ALLOW_ENV: "1"}):
        records = sandbox.probe(
            "apple-m1", ["is_available", "set=true", "set=false", "devices"], env
        )
        _expect(
            all(r.error is None for r in records),
            f"{env}: no step may fail: {[r.error for r in records]}",
        )
        _expect(_only(records, "is_available").value is True, f"{env}: the M1 must be usable")
        _expect(
            not _all_warnings(records),
            f"{env}: no warning on Apple silicon, got {_all_warnings(records)}",
        )


def scenario_not_built_with_mps(sandbox: Sandbox) -> None:
    """A torch built without MPS: devices() is empty, the reason says so, the flag is stored."""
    records = sandbox.probe(
        "macbook-pro-16-2019",
        ["get", "set=true", "get", "devices", "reason", "is_available"],
        {ALLOW_ENV: "0"},
        has_mps=False,
    )
    _expect(
        all(r.error is None for r in records),
        f"no step may fail: {[r.error for r in records if r.error]}",
    )
    _expect(
        [r.value for r in records if r.step == "get"] == [False, True], "the flag must be stored"
    )
    _expect(_only(records, "devices").value == [], "devices() must be empty without MPS")
    _expect(
        _only(records, "reason").value == "PyTorch was built without MPS",
        f"unexpected reason {_only(records, 'reason').value!r}",
    )
    _expect(
        _only(records, "is_available").value is False, "is_available() must be False without MPS"
    )
    invalid = sandbox.probe("mac-mini-2018", ["get", "get"], {ALLOW_ENV: "2"}, has_mps=False)
    found = _all_warnings(invalid)
    _expect(
        len(found) == 1 and ALLOW_ENV in found[0] and "'2'" in found[0],
        f"without MPS an invalid value must still warn once, got {found}",
    )


def scenario_type_and_frozen_flags(sandbox: Sandbox) -> None:
    """Only True/False are accepted; torch.backends.disable_global_flags() freezes the flag too."""
    records = sandbox.probe("mac-mini-2018", ['set="1"', "get"])
    _expect(
        (_only(records, 'set="1"').error or "").startswith("TypeError"), "a string must be refused"
    )
    _expect(_only(records, "get").value is False, "a refused value must not change the flag")
    if "disable_global_flags" in (sandbox.root / "torch/backends/__init__.py").read_text(
        encoding="utf-8"
    ):
        frozen = sandbox.probe("mac-mini-2018", ["freeze_then_set", "get"])
        _expect(
            (_only(frozen, "freeze_then_set").error or "").startswith("RuntimeError"),
            "after disable_global_flags() setting the flag must raise, like the other backend flags",
        )
        _expect(_only(frozen, "get").value is False, "a frozen flag must keep its value")


def scenario_build_info(sandbox: Sandbox) -> None:
    """build_info(): the dist-info's INTELMAC_BUILD.json as a dict, or None without it."""
    absent = sandbox.probe("apple-m1", ["build_info"])
    _expect(
        _no_error(_only(absent, "build_info")).value is None,
        "build_info() must be None without the file",
    )
    data = {
        "upstream_version": sandbox.torch_version,
        "wheel_version": "probe+intelmac",
        "series_fingerprint": "0" * 64,
        "patches": ["0001-x.patch"],
        "toolchain": {"xcode": "16.4"},
        "source_sha256": "1" * 64,
        "built_at": "2026-11-22T00:00:00Z",
    }
    with sandbox.build_info_file(json.dumps(data)):
        present = sandbox.probe("apple-m1", ["build_info"])
    _expect(
        _no_error(_only(present, "build_info")).value == data,
        "build_info() must return the file's content",
    )


def scenario_main_report(sandbox: Sandbox) -> None:
    """python -m torch.backends.mps: the table, the flag and env state, build info; exit 0/1."""
    off = sandbox.run_main("mac-mini-2018")
    _expect(
        off.returncode == 1,
        f"exit status must be 1 when MPS is unusable, got {off.returncode}: {off.stderr}",
    )
    for part in (
        "low-power",
        "unified memory",
        "working set",
        "skip reason",
        UHD630["name"],
        ALLOW_ENV,
        DEVICE_ENV,
        "allow_intel_gpu",
        sandbox.torch_version,
        "build info",
    ):
        _expect(part in off.stdout, f"the report must show {part!r}:\n{off.stdout}")
    on = sandbox.run_main("mac-mini-2018", env={ALLOW_ENV: "yes"})
    _expect(
        on.returncode == 0,
        f"exit status must be 0 when MPS is usable, got {on.returncode}: {on.stderr}",
    )
    as_json = sandbox.run_main("macbook-pro-16-2019", ["--json"])
    _expect(
        as_json.returncode == 0,
        f"--json on a usable Mac must exit 0, got {as_json.returncode}: {as_json.stderr}",
    )
    data = json.loads(as_json.stdout)
    _expect(
        data["usable"] is True and len(data["devices"]) == 2 and data["allow_intel_gpu"] is False,
        f"unexpected --json report: {data}",
    )
    without = sandbox.run_main("mac-mini-2018", has_mps=False)
    _expect(
        without.returncode == 1 and "built without MPS" in without.stdout,
        f"without MPS the report must say so and exit 1:\n{without.stdout}{without.stderr}",
    )


Scenario = Callable[[Sandbox], None]

SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_default_is_off,
        scenario_env_spellings,
        scenario_env_invalid_warns_once,
        scenario_opt_in_after_failed_scan,
        scenario_set_before_first_use,
        scenario_late_change_raises,
        scenario_unchanged_choice_is_noop,
        scenario_pick_by_index,
        scenario_pick_by_name,
        scenario_pick_ambiguous_or_unknown,
        scenario_devices_fields,
        scenario_apple_silicon_unchanged,
        scenario_not_built_with_mps,
        scenario_type_and_frozen_flags,
        scenario_build_info,
        scenario_main_report,
    )
}


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    failure: str | None  # None: passed

    @property
    def ok(self) -> bool:
        return self.failure is None


def run_scenarios(sandbox: Sandbox, names: Sequence[str] | None = None) -> list[ScenarioResult]:
    results = []
    for name in names or list(SCENARIOS):
        try:
            SCENARIOS[name](sandbox)
        except ScenarioFailure as failure:
            results.append(ScenarioResult(name, str(failure)))
        else:
            results.append(ScenarioResult(name, None))
    return results


# ---------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------


def series_for(line: str) -> list[Path]:
    patches = list(catalog.load().line(line).patches)
    if not patches:
        raise BuildError(
            f"the catalog lists no patches for {line}; nothing to check (patches/catalog.yaml)"
        )
    return patches


def fidelity_report(
    tree: UpstreamTree, patches: Sequence[Path], result: patching.UpstreamCheck
) -> str:
    mapper = path_map_for(tree)
    new = {(p.name, c.path) for p in patches for c in patching.file_changes(p) if c.is_new}
    checked, absent = set(result.checked), set(result.absent)
    lines = []
    for patch in patches:
        lines.append(f"  {patch.parent.name}/{patch.name}")
        for change in patching.file_changes(patch):
            entry = (patch.name, change.path)
            if entry in new:
                lines.append(f"    new      {change.path}")
            elif entry in absent:
                lines.append(f"    absent   {change.path} (this tree has no such file)")
            elif entry in checked:
                mapped = mapper(change.path)
                where = f" (as {mapped})" if mapped != change.path else ""
                lines.append(f"    applies  {change.path}{where}")
    return "\n".join(lines)


def check(
    src: Path,
    version: str | None = None,
    *,
    python_layer: bool = True,
    out: Callable[[str], None] = print,
) -> int:
    """The whole check-upstream run; returns the exit status (raises BuildError on conflicts)."""
    tree = detect_tree(src)
    line = normalise_version(version) if version else tree.line
    patches = series_for(line)
    fingerprint = hashlib.sha256(b"".join(p.read_bytes() for p in patches)).hexdigest()[:12]
    out(f"check-upstream: {tree.describe()}")
    out(f"series of line {line}: {len(patches)} patches (sha256 {fingerprint}...)")
    result = patching.check_upstream(tree.root, patches, path_map_for(tree))
    out(fidelity_report(tree, patches, result))
    out(
        f"fidelity: every hunk on the {len(result.checked)} present or new files applies; "
        f"{len(result.absent)} files absent from this tree"
    )
    if not python_layer:
        return 0
    with tempfile.TemporaryDirectory(prefix="check-upstream-") as scratch:
        results = run_scenarios(sandbox_for(tree, Path(scratch), line))
    out(
        f"python layer ({line}'s own torch/backends files, patched; torch._C doubles over {POLICY_HEADER}):"
    )
    for outcome in results:
        out(f"  {'ok  ' if outcome.ok else 'FAIL'}  {outcome.name}")
        if outcome.failure:
            out("        " + outcome.failure.replace("\n", "\n        "))
    failed = [r.name for r in results if not r.ok]
    out(f"python layer: {len(results) - len(failed)} of {len(results)} scenarios pass")
    return 1 if failed else 0


def _run(args: argparse.Namespace) -> int:
    return check(args.src, args.version, python_layer=not args.no_python)


#: check-upstream --help: what a maintainer needs to run it (the module docstring says how).
DESCRIPTION = """\
Check the patch series against a real upstream PyTorch: a source tree (it has version.txt)
or an unpacked torch wheel (torch/ and torch-*.dist-info/).

1. Every hunk of the line's series must apply to the files SRC has. A wheel has no .mm,
   .cpp or CMake files; those are reported as absent, not as failures.
2. The line's own torch/backends Python files, patched, are imported in a sandbox with
   pretend Macs (UHD 630 alone, UHD 630 + Radeon Pro 5500M, Mac Pro, M1), and the opt-in,
   the device choice and the report are exercised. This needs a C++ compiler for the
   device policy: g++, or the one $CXX names.

Nothing in SRC is changed. Exit status 0: every check passed; 1: a check failed.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check-upstream",
        help="check that the patch series applies to a real upstream tree or unpacked wheel, "
        "and that its Python layer works there",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "src", type=Path, metavar="SRC", help="upstream source tree or unpacked torch wheel"
    )
    parser.add_argument(
        "--torch",
        metavar="X.Y.Z",
        dest="version",
        help="release line whose series to check (default: the one SRC's version names)",
    )
    parser.add_argument(
        "--no-python",
        action="store_true",
        help="check only that the hunks apply; skip the Python-layer scenarios",
    )
    parser.set_defaults(func=_run)
