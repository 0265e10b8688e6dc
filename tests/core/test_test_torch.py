"""The torch `make test` installs, per host (build_scripts/maint/test_torch.py).

Each rule is checked here offline, through the module and through the real Makefile with
HOST_OS/HOST_ARCH. That each rule's choice really resolves with pip is `.ci/run`'s job
(`python -m intelmac_torch_builder.maint.test_torch --check`, which needs the network).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from intelmac_torch_builder.maint import test_torch as tt
from packaging.tags import cpython_tags, mac_platforms

REPO = Path(__file__).resolve().parents[2]


def _host(system: str, machine: str, python: tuple[int, int] = (3, 11)) -> tt.Host:
    if system == "Darwin":
        platforms = list(mac_platforms((15, 0), "x86_64" if machine == "x86_64" else "arm64"))
    else:
        platforms = [f"manylinux_2_28_{machine}"]
    return tt.Host(system, machine, python, frozenset(cpython_tags(python, platforms=platforms)))


def _wheel(folder: Path, name: str, version: str, tag: str, requires: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        body = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        body += f"Requires-Dist: {requires}\n" if requires else ""
        archive.writestr(f"{name}-{version}.dist-info/METADATA", body)
    return path


INTEL_MAC = _host("Darwin", "x86_64")


def test_intel_mac_tests_the_newest_wheel_of_ours_it_can_install(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    _wheel(wheels, "torch", "2.9.1+intelmac", "cp311-cp311-macosx_13_0_x86_64")
    newest = _wheel(wheels, "torch", "2.14.1+intelmac", "cp311-cp311-macosx_14_0_x86_64")
    _wheel(wheels, "torch", "2.15.0+intelmac", "cp312-cp312-macosx_14_0_x86_64")  # another Python
    _wheel(wheels, "torch", "2.16.0", "cp311-cp311-macosx_14_0_arm64")  # not this machine
    _wheel(wheels, "torchvision", "0.24.1+intelmac", "cp311-cp311-macosx_13_0_x86_64",
           "torch==2.9.1+intelmac")  # fmt: skip
    vision = _wheel(wheels, "torchvision", "0.29.1+intelmac", "cp311-cp311-macosx_14_0_x86_64",
                    "torch==2.14.1+intelmac")  # fmt: skip
    choice = tt.choose(INTEL_MAC, wheels)
    assert choice.args == (str(newest), str(vision))
    assert choice.note is not None and "testing our build" in choice.note


def test_intel_mac_without_our_wheel_takes_upstreams_last_and_says_so(tmp_path: Path) -> None:
    for python in ((3, 10), (3, 12)):
        choice = tt.choose(_host("Darwin", "x86_64", python), tmp_path / "empty")
        assert choice.args == ("torch==2.2.2", "numpy<2")
        assert choice.note is not None
        assert "NOT our build" in choice.note and "make build" in choice.note
    with pytest.raises(tt.NoTorch, match="Python 3.13 except ours.*make build"):
        tt.choose(_host("Darwin", "x86_64", (3, 13)), tmp_path / "empty")


def test_apple_silicon_takes_the_default_index_torch(tmp_path: Path) -> None:
    _wheel(tmp_path, "torch", "2.14.1+intelmac", "cp311-cp311-macosx_14_0_x86_64")
    assert tt.choose(_host("Darwin", "arm64"), tmp_path) == tt.Choice(("torch",))


def test_linux_takes_the_cpu_build_locally_or_from_the_cpu_index(tmp_path: Path) -> None:
    linux = _host("Linux", "x86_64")
    asked: list[str] = []

    def found(requirement: str) -> bool:
        asked.append(requirement)
        return True

    assert tt.choose(linux, tmp_path, "", found).args == ("torch==2.13.0+cpu",)
    assert asked == ["torch==2.13.0+cpu"]
    assert tt.choose(linux, tmp_path, "", lambda _: False).args == (
        "--extra-index-url", "https://download.pytorch.org/whl/cpu", "torch==2.13.0+cpu",
    )  # fmt: skip


def test_test_torch_overrides_every_rule(tmp_path: Path) -> None:
    _wheel(tmp_path, "torch", "2.14.1+intelmac", "cp311-cp311-macosx_14_0_x86_64")
    for host in (INTEL_MAC, _host("Darwin", "arm64"), _host("Linux", "x86_64"),
                 _host("Darwin", "x86_64", (3, 14))):  # fmt: skip
        choice = tt.choose(host, tmp_path, "torch==2.5.1 'numpy<2'", lambda _: True)
        assert choice == tt.Choice(("torch==2.5.1", "numpy<2"))


def test_judge_refuses_a_cuda_build_and_a_wrong_platform() -> None:
    def report(*items: tuple[str, str, str]) -> dict[str, object]:
        return {"install": [{"metadata": {"name": n, "version": v}, "download_info": {"url": u}}
                            for n, v, u in items]}  # fmt: skip

    cpu = tt.Choice(("torch==2.13.0+cpu",))
    assert tt.judge("Linux", "x86_64", cpu, report(
        ("torch", "2.13.0+cpu", "file:///w/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"),
    )) == []  # fmt: skip
    problems = tt.judge("Linux", "x86_64", cpu, report(
        ("torch", "2.13.0", "https://x/torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"),
        ("nvidia-cublas-cu12", "12.8", "https://x/nvidia_cublas.whl"), ("triton", "3.5", "t.whl"),
    ))  # fmt: skip
    assert problems == ["torch 2.13.0 is not a CPU-only build (+cpu)",
                        "the CPU build pulled GPU packages: nvidia-cublas-cu12, triton"]  # fmt: skip
    arm = report(("torch", "2.15.0", "https://x/torch-2.15.0-cp312-cp312-macosx_14_0_arm64.whl"))
    assert tt.judge("Darwin", "x86_64", cpu, arm) == [
        "torch-2.15.0-cp312-cp312-macosx_14_0_arm64.whl is not a macOS x86_64 wheel"
    ]
    assert tt.judge("Darwin", "arm64", cpu, report()) == ["pip resolved no torch"]


MAKE = shutil.which("make")


def _clean_env() -> dict[str, str]:
    """This environment less what an outer `make test TEST_TORCH=...` hands down to sub-makes."""
    passed_down = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TEST_TORCH", "HOST_OS", "HOST_ARCH")
    return {key: value for key, value in os.environ.items() if key not in passed_down}


def _make_test_torch(tmp_path: Path, *variables: str) -> subprocess.CompletedProcess[str]:
    venv = tmp_path / "venv"
    venv.mkdir(exist_ok=True)
    for stamp in (".stamp-build", ".stamp"):  # newer than pyproject.toml, in make's order:
        (venv / stamp).touch()  # make does not set up a venv
    return subprocess.run(
        [str(MAKE), "-s", "-C", str(REPO), "test-torch", f"VENV={venv}", f"PY={sys.executable}",
         *variables],
        capture_output=True, text=True, timeout=120, check=False, env=_clean_env(),
    )  # fmt: skip


@pytest.mark.skipif(MAKE is None, reason="needs make")
def test_make_prints_each_hosts_choice(tmp_path: Path) -> None:
    intel = _make_test_torch(tmp_path, "HOST_OS=Darwin", "HOST_ARCH=x86_64", "WHEELS_DIR=none")
    version = "%d.%d" % sys.version_info[:2]
    if sys.version_info[:2] <= (3, 12):
        assert intel.stdout == "torch==2.2.2 'numpy<2'\n", intel.stderr
        assert "NOT our build" in intel.stderr
    else:
        assert intel.returncode == 2 and f"Python {version} except ours" in intel.stderr
    arm = _make_test_torch(tmp_path, "HOST_OS=Darwin", "HOST_ARCH=arm64")
    assert arm.stdout == "torch\n", arm.stderr
    linux = _make_test_torch(tmp_path, "HOST_OS=Linux", "HOST_ARCH=x86_64")
    assert linux.stdout.rstrip().endswith("torch==2.13.0+cpu"), linux.stderr
    wheels = tmp_path / "wheels"
    tag = f"cp{version.replace('.', '')}"
    ours = _wheel(wheels, "torch", "2.14.1+intelmac", f"{tag}-{tag}-macosx_14_0_x86_64")
    built = _make_test_torch(tmp_path, "HOST_OS=Darwin", "HOST_ARCH=x86_64", f"WHEELS_DIR={wheels}")
    assert built.stdout == f"{ours}\n", built.stderr
    override = _make_test_torch(tmp_path, "HOST_OS=Darwin", "HOST_ARCH=x86_64", "TEST_TORCH=torch==2.5.1")
    assert override.stdout == "torch==2.5.1\n", override.stderr


@pytest.mark.skipif(MAKE is None, reason="needs make")
def test_make_test_installs_what_test_torch_prints(tmp_path: Path) -> None:
    """The install step takes its arguments from the same command (no second rule in make)."""
    venv = tmp_path / "venv"
    dry = subprocess.run(
        [str(MAKE), "-n", "-C", str(REPO), "test", f"VENV={venv}"],
        capture_output=True, text=True, timeout=60, check=True, env=_clean_env(),
    ).stdout  # fmt: skip
    assert "-m intelmac_torch_builder.maint.test_torch --wheels-dir wheels" in dry
    assert "pip install -q $args -e '.[regress]'" in dry
