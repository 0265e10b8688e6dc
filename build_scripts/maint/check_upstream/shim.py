"""The C-ABI shim: MPSDevice.mm's state around the series' real policy header."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

from ...core.errors import BuildError

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
