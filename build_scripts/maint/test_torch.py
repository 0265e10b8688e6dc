"""The torch that ``make test`` installs: pip arguments, chosen per host.

``make test`` (and ``make regress``, ``make bench``) run on a real torch. Which one depends on
the host, because the default package index has no torch for Intel Macs after 2.2.2, and its
Linux torch is the CUDA build (several GB of NVIDIA libraries the tests never use):

- **Intel Mac**: the newest torch wheel in ``wheels/`` that this Python can install, which
  ``make build`` put there (with the torchvision built against it, when there is one), so the
  tests run on our own build. Without one: torch 2.2.2, the last upstream release for Intel
  Macs (Python 3.12 and older), with a note that it is not our build.
- **Apple silicon**: the default index's torch.
- **Linux**: the CPU-only build, ``torch==<LINUX_TORCH>+cpu``. From a wheel pip already finds
  through its own configuration (a ``find-links`` folder) when there is one, else from
  PyTorch's CPU wheel index as an extra index. A CPU build is never on the default index, so
  the exact ``+cpu`` pin cannot fall back to the CUDA build.

``TEST_TORCH`` (the environment, as ``make test TEST_TORCH=...`` exports it) overrides every
rule; ``HOST_OS`` and ``HOST_ARCH`` override the detection, so each rule can be printed and
checked on any machine (``make -s test-torch HOST_OS=Darwin HOST_ARCH=x86_64``).

Prints the arguments on stdout as one shell-quoted line; a note for the user goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag, cpython_tags, mac_platforms, sys_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

#: The Linux tests' torch: a CPU build. 2.13.0 is the newest one the project's own machines
#: hold as a local file, so their `make test` installs it without a download.
LINUX_TORCH = "2.13.0"
#: PyTorch's own index of CPU-only builds (Linux tests only; see the README's "Set up").
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: The last torch release with macOS x86_64 wheels on the default index, and its Pythons.
INTEL_MAC_UPSTREAM = "2.2.2"
INTEL_MAC_UPSTREAM_PYTHONS = ((3, 8), (3, 12))
#: The macOS a synthesised tag set assumes when HOST_OS overrides the detection.
ASSUMED_MACOS = (15, 0)


@dataclass(frozen=True)
class Host:
    system: str  # platform.system(): Darwin, Linux
    machine: str  # x86_64, arm64, aarch64
    python: tuple[int, int]
    tags: frozenset[Tag]  # the wheel tags this Python can install there

    @property
    def intel_mac(self) -> bool:
        return self.system == "Darwin" and self.machine == "x86_64"


@dataclass(frozen=True)
class Choice:
    args: tuple[str, ...]
    note: str | None = None


class NoTorch(Exception):
    """No torch installs on this host and Python; the message says what to do."""


def _normalised_machine(machine: str) -> str:
    return {"amd64": "x86_64", "aarch64": "aarch64", "arm64": "arm64"}.get(
        machine.lower(), machine
    )


def detect(system: str | None = None, machine: str | None = None) -> Host:
    """This host, or the one HOST_OS / HOST_ARCH name (its tags are then synthesised)."""
    real_system, real_machine = platform.system(), _normalised_machine(platform.machine())
    system = system or real_system
    machine = _normalised_machine(machine or real_machine)
    python = sys.version_info[:2]
    if (system, machine) == (real_system, real_machine):
        tags = frozenset(sys_tags())
    elif system == "Darwin":
        arch = "x86_64" if machine == "x86_64" else "arm64"
        tags = frozenset(cpython_tags(python, platforms=list(mac_platforms(ASSUMED_MACOS, arch))))
    else:
        tags = frozenset(cpython_tags(python, platforms=[f"manylinux_2_28_{machine}"]))
    return Host(system, machine, (python[0], python[1]), tags)


def _installable(wheels: Iterable[Path], name: str, host: Host) -> list[tuple[Version, Path]]:
    found = []
    for wheel in wheels:
        try:
            dist, version, _, tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if dist == name and tags & host.tags:
            found.append((version, wheel))
    return sorted(found)


def _requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode("utf-8", "replace")
    return [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Requires-Dist:")]  # fmt: skip


def our_wheels(wheels_dir: Path, host: Host) -> tuple[Path, ...]:
    """The newest torch wheel of ours this Python installs, and the torchvision made for it."""
    wheels = sorted(wheels_dir.glob("*.whl"))
    torches = _installable(wheels, "torch", host)
    if not torches:
        return ()
    version, torch = torches[-1]
    pin = f"torch=={version}"
    visions = [wheel for _, wheel in _installable(wheels, "torchvision", host)
               if any(req.replace(" ", "").startswith(pin) for req in _requires(wheel))]  # fmt: skip
    return (torch, *visions[-1:])


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def choose(
    host: Host,
    wheels_dir: Path,
    override: str = "",
    cpu_build_found: Callable[[str], bool] = lambda requirement: False,
) -> Choice:
    """The pip arguments for ``host``. ``cpu_build_found(requirement)``: whether pip finds that
    exact CPU build through its own configuration, without an index (Linux only)."""
    if override.strip():
        return Choice(tuple(shlex.split(override)))
    if host.intel_mac:
        ours = our_wheels(wheels_dir, host)
        if ours:
            return Choice(
                tuple(_shown(wheel) for wheel in ours),
                f"make test: testing our build, {', '.join(wheel.name for wheel in ours)}",
            )
        low, high = INTEL_MAC_UPSTREAM_PYTHONS
        python = ".".join(map(str, host.python))
        if not low <= host.python <= high:
            raise NoTorch(
                f"No torch installs on an Intel Mac with Python {python} except ours: the last "
                f"upstream release for Intel Macs, {INTEL_MAC_UPSTREAM}, has wheels for Python "
                f"{low[0]}.{low[1]} to {high[0]}.{high[1]}. Run `make build` first (make test "
                "then tests the wheel it leaves in wheels/), or set up the venv with an older "
                "Python: make clean && make test HOST_PYTHON=python3.12."
            )
        return Choice(
            # torch 2.2.2 was built against NumPy 1.x and cannot use NumPy 2's C API.
            (f"torch=={INTEL_MAC_UPSTREAM}", "numpy<2"),
            f"make test: torch {INTEL_MAC_UPSTREAM} from the default index is NOT our build "
            "(upstream's last release for Intel Macs), so the checks of the patched build skip. "
            "To test ours: `make build`, then `make test` again (it installs the newest wheel "
            "in wheels/), or make test TEST_TORCH=wheels/torch-...whl.",
        )
    if host.system == "Darwin":
        return Choice(("torch",))  # Apple silicon: the default index's newest
    requirement = f"torch=={LINUX_TORCH}+cpu"
    if cpu_build_found(requirement):
        return Choice((requirement,))
    return Choice(("--extra-index-url", CPU_INDEX, requirement))


def pip_finds_without_an_index(requirement: str) -> bool:
    """Whether pip, as configured here, finds ``requirement`` without any index: in a
    find-links folder. ``--no-index`` keeps it from asking one (a failing index lookup is
    retried for over a minute)."""
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-index",
         "--no-deps", "--ignore-installed", requirement],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    return probe.returncode == 0


# --- .ci/run: each rule resolves (needs the network; never part of the hermetic make test) ---

#: The hosts `--check` resolves each rule for: (label, HOST_OS, HOST_ARCH, Python, pip --platform).
CHECKED_HOSTS = (
    ("macOS x86_64, Python 3.10", "Darwin", "x86_64", (3, 10), "macosx_14_0_x86_64"),
    ("macOS x86_64, Python 3.12", "Darwin", "x86_64", (3, 12), "macosx_14_0_x86_64"),
    ("macOS arm64, Python 3.12", "Darwin", "arm64", (3, 12), "macosx_14_0_arm64"),
)


def judge(system: str, machine: str, choice: Choice, report: dict[str, object]) -> list[str]:
    """What is wrong with what pip resolved for ``choice`` (``pip install --report``)."""
    installs = report.get("install")
    assert isinstance(installs, list)
    found = {str(item["metadata"]["name"]).lower(): item for item in installs}
    torch = found.get("torch")
    if torch is None:
        return ["pip resolved no torch"]
    version = str(torch["metadata"]["version"])
    url = str(torch["download_info"]["url"])
    wheel = url.rsplit("/", 1)[-1]
    problems = []
    if system == "Darwin" and machine == "x86_64" and not wheel.endswith("_x86_64.whl"):
        problems.append(f"{wheel} is not a macOS x86_64 wheel")
    if system == "Darwin" and machine != "x86_64" and not wheel.endswith("_arm64.whl"):
        problems.append(f"{wheel} is not a macOS arm64 wheel")
    if system == "Linux":
        if not version.endswith("+cpu"):
            problems.append(f"torch {version} is not a CPU-only build (+cpu)")
        gpu = sorted(name for name in found if name.startswith(("nvidia-", "triton")))
        if gpu:
            problems.append(f"the CPU build pulled GPU packages: {', '.join(gpu)}")
    return problems


def _resolve(args: tuple[str, ...], platform_args: list[str]) -> dict[str, object] | None:
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        resolved = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
             "--report", str(report), *platform_args, *args],
            check=False, timeout=600,
        )  # fmt: skip
        if resolved.returncode != 0:
            return None
        loaded: dict[str, object] = json.loads(report.read_text())
        return loaded


def check(wheels_dir: Path) -> int:
    """Resolve each host's rule with pip, as that host would, and judge the result."""
    import socket
    from urllib.parse import urlparse

    failed = 0
    cases: list[tuple[str, str, str, Choice, list[str]]] = []
    for label, system, machine, python, platform_tag in CHECKED_HOSTS:
        arch = "x86_64" if machine == "x86_64" else "arm64"
        tags = frozenset(cpython_tags(python, platforms=list(mac_platforms(ASSUMED_MACOS, arch))))
        choice = choose(Host(system, machine, python, tags), wheels_dir / "none")
        # --no-deps: pip evaluates dependency markers for the machine it runs on, not for
        # --platform (torch 2.2.2 would ask for Linux's NVIDIA packages); the question is
        # whether these requirements have wheels there.
        cases.append((label, system, machine, choice, [
            "--no-deps", "--only-binary=:all:", "--platform", platform_tag,
            "--python-version", "%d.%d" % python, "--implementation", "cp",
        ]))  # fmt: skip
    # Linux: this Python on this machine, dependencies included, as make test resolves it here.
    linux = detect("Linux", "x86_64")
    cases.append(("Linux x86_64 (this machine)", "Linux", "x86_64",
                  choose(linux, wheels_dir / "none", "", pip_finds_without_an_index), []))  # fmt: skip
    cpu_host = urlparse(CPU_INDEX).hostname or ""
    try:
        socket.getaddrinfo(cpu_host, 443)
    except OSError:
        print(f"note: {cpu_host} does not resolve from here; the CPU index form "
              f"(--extra-index-url {CPU_INDEX}) is not checked on this machine")  # fmt: skip
    else:
        cases.append(("Linux x86_64 (from the CPU index)", "Linux", "x86_64",
                      choose(linux, wheels_dir / "none"), []))  # fmt: skip
    for label, system, machine, choice, platform_args in cases:
        report = _resolve(choice.args, platform_args)
        if report is None:
            print(f"{label}: {shlex.join(choice.args)}: FAILED: pip cannot resolve it (above)")
            failed += 1
            continue
        problems = judge(system, machine, choice, report)
        resolved = ", ".join(
            f"{item['metadata']['name']} {item['metadata']['version']}"
            for item in report["install"]  # type: ignore[attr-defined]
            if str(item["metadata"]["name"]).lower() in ("torch", "numpy")
        )
        verdict = "ok" if not problems else "FAILED: " + "; ".join(problems)
        print(f"{label}: {shlex.join(choice.args)} -> {resolved}: {verdict}")
        failed += bool(problems)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m intelmac_torch_builder.maint.test_torch",
        description="Print the pip arguments of the torch that make test installs on this host "
        "(TEST_TORCH overrides; HOST_OS and HOST_ARCH override the detection).",
    )
    parser.add_argument(
        "--wheels-dir", type=Path, default=Path("wheels"), metavar="DIR",
        help="where make build leaves our wheels (default: ./wheels)",
    )  # fmt: skip
    parser.add_argument(
        "--check", action="store_true",
        help="resolve each host's rule with pip (network) and check what it picks (.ci/run)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.check:
        return check(args.wheels_dir)
    host = detect(os.environ.get("HOST_OS") or None, os.environ.get("HOST_ARCH") or None)
    try:
        choice = choose(
            host, args.wheels_dir, os.environ.get("TEST_TORCH", ""), pip_finds_without_an_index
        )
    except NoTorch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if choice.note:
        print(choice.note, file=sys.stderr)
    print(shlex.join(choice.args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
