"""The patched torch's public contract, as the tools that check it name it.

Issue 3 defines what every patched release line must offer; the patches implement it
(patches/src/torch/backends/mps/_device_policy.py ships inside torch and cannot import
this module). Everything here that *checks* a patched torch reads the names from this one
place: the build's verify stage, ``check-upstream``'s Python-layer exercise and the
regression suite's patched-build checks.
"""

from __future__ import annotations

#: Opts in to a low-power (Intel) GPU; the initial value of torch.backends.mps.allow_intel_gpu.
ALLOW_ENV = "PYTORCH_MPS_ALLOW_INTEL_GPU"
#: Picks a device by index in devices() or by a case-insensitive part of its name.
DEVICE_ENV = "PYTORCH_MPS_DEVICE"
#: The spellings ALLOW_ENV accepts, in any case; empty means unset.
ACCEPTED_TRUE = ("1", "true", "yes", "on")
ACCEPTED_FALSE = ("0", "false", "no", "off")

#: The fields of torch.backends.mps.MPSDeviceInfo, in order.
DEVICE_INFO_FIELDS = (
    "index",
    "name",
    "low_power",
    "removable",
    "headless",
    "unified_memory",
    "recommended_working_set_size",
    "eligible",
    "selected",
    "skip_reason",
)

#: The build information file in the wheel's .dist-info (torch.backends.mps.build_info()).
BUILD_INFO_FILE = "INTELMAC_BUILD.json"
#: The keys build_info() promises.
BUILD_INFO_KEYS = (
    "upstream_version",
    "wheel_version",
    "source_sha256",
    "series_fingerprint",
    "patches",
    "toolchain",
    "built_at",
)
