"""Probes of the machine the orchestrator runs on: small, cached, typed.

The build plan is computed from a ``Host`` value, never from live probes spread through the
code, so ``--dry-run`` tests can hand in a fake Intel or Apple-silicon Mac.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3


@dataclass(frozen=True)
class Host:
    system: str  # platform.system(): "Darwin", "Linux", ...
    machine: str  # "x86_64" or "arm64"
    macos_version: str | None  # "14.6" on macOS, else None
    cpu_count: int
    memory_bytes: int
    ccache: str | None
    sccache: str | None
    libomp_prefix: Path | None  # where libomp's include/ and lib/ live (Homebrew's opt prefix)

    @property
    def is_macos(self) -> bool:
        return self.system == "Darwin"

    @property
    def description(self) -> str:
        name = f"macOS {self.macos_version}" if self.is_macos else self.system
        return f"{name} {self.machine}, {self.cpu_count} cores, {self.memory_bytes / GIB:.0f} GiB"


def command_output(*argv: str) -> str | None:
    """The stripped stdout of a command that succeeded, else None."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def _memory_bytes(system: str) -> int:
    if system == "Darwin":
        value = command_output("sysctl", "-n", "hw.memsize")
        if value and value.isdigit():
            return int(value)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * GIB  # unknown: assume a small machine so MAX_JOBS stays safe


def _machine() -> str:
    machine = platform.machine()
    # A Python running under Rosetta reports x86_64 on an Apple-silicon Mac.
    translated = (
        command_output("sysctl", "-n", "sysctl.proc_translated") if platform.system() == "Darwin" else None
    )
    if machine == "x86_64" and translated == "1":
        return "arm64"
    return "arm64" if machine == "aarch64" else machine


def _libomp_prefix(system: str, machine: str) -> Path | None:
    if system != "Darwin":
        return None
    # The x86_64 Homebrew lives in /usr/local: that libomp is the one an x86_64 wheel can
    # bundle, also when cross-building from an arm64 host (whose own Homebrew is /opt/homebrew).
    candidates = [Path("/usr/local/opt/libomp")]
    if machine == "x86_64":
        prefix = command_output("brew", "--prefix", "libomp")
        if prefix:
            candidates.insert(0, Path(prefix))
    for candidate in candidates:
        if (candidate / "include" / "omp.h").is_file():
            return candidate
    return None


@functools.cache
def probe() -> Host:
    system = platform.system()
    machine = _machine()
    return Host(
        system=system,
        machine=machine,
        macos_version=(platform.mac_ver()[0] or None) if system == "Darwin" else None,
        cpu_count=os.cpu_count() or 1,
        memory_bytes=_memory_bytes(system),
        ccache=shutil.which("ccache"),
        sccache=shutil.which("sccache"),
        libomp_prefix=_libomp_prefix(system, machine),
    )


#: max_jobs as the shell computes it on a Mac (sysctl), for a plan pasted there.
MAX_JOBS_SHELL = (
    "$(( $(sysctl -n hw.ncpu) < $(sysctl -n hw.memsize) / 2147483648"
    " ? $(sysctl -n hw.ncpu) : $(sysctl -n hw.memsize) / 2147483648 ))"
)


def max_jobs(host: Host) -> int:
    """Parallel compile jobs: one per core, but at most one per 2 GiB of memory.

    Some of PyTorch's translation units need well over 1 GiB each; more jobs than memory
    allows ends in swapping or the OOM killer, not a faster build.
    """
    return max(1, min(host.cpu_count, host.memory_bytes // (2 * GIB)))
