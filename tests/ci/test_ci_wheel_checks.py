"""ci/test_wheel.py and ci/wheel_checks.py: they pass a correct wheel and catch wrong ones."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ci_support import REPO, build_fake_wheel, write_fake_torch

CHECKS = REPO / "ci" / "wheel_checks.py"
TEST_WHEEL = REPO / "ci" / "test_wheel.py"


def _load_script(path: Path) -> ModuleType:
    """ci/test_wheel.py is a script, not a module of the ci package; load it by path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


test_wheel = _load_script(TEST_WHEEL)
wheel_checks_module = _load_script(CHECKS)


def run_checks(*args: str, torch_root: Path | None = None,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTORCH_MPS")}
    if torch_root is not None:
        env["PYTHONPATH"] = str(torch_root)
    return subprocess.run([sys.executable, str(CHECKS), *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600, check=False)


def test_smoke_checks_pass_on_the_real_cpu_torch(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    result = run_checks("--only", "smoke", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASS cpu-") == 5


def test_api_checks_reject_an_unpatched_torch(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    result = run_checks("--only", "api", "--expect-no-gpu", cwd=tmp_path)
    assert result.returncode != 0
    assert "FAIL api-present" in result.stdout and "not a patched build" in result.stdout


def test_api_checks_accept_the_contract(tmp_path: Path) -> None:
    root = write_fake_torch(tmp_path / "site")
    result = run_checks("--only", "api", "--expect-no-gpu", "--expect-version", "2.15.0+intelmac",
                        torch_root=root, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout


@pytest.mark.parametrize(("knobs", "failing_check"), [
    ({"default": True}, "allow-intel-gpu-default-off"),
    ({"warn": False}, "env-invalid-value-warns-once"),
    # Names the variable and the value but not the accepted values.
    ({"warning": "{flag}={raw!r} is not a valid value"}, "env-invalid-value-warns-once"),
    ({"exit_code": 0}, "python-m-torch.backends.mps"),
    ({"check_exit": 1}, "mps-check"),  # --check must exit 2 where MPS is unusable
    ({"reason": "The MPS backend is supported on macOS 14.0+"}, "unavailable-reason"),
    ({"tensor_error": "The MPS backend is supported on macOS 14.0+"}, "mps-tensor-error"),
])
def test_api_checks_catch_a_broken_contract(tmp_path: Path, knobs: dict[str, Any],
                                            failing_check: str) -> None:
    root = write_fake_torch(tmp_path / "site", **knobs)
    result = run_checks("--only", "api", "--expect-no-gpu", torch_root=root, cwd=tmp_path)
    assert result.returncode != 0
    assert f"FAIL {failing_check}" in result.stdout, result.stdout


def test_skip_leaves_a_check_out_and_says_so(tmp_path: Path) -> None:
    root = write_fake_torch(tmp_path / "site", exit_code=0)  # would fail python-m-torch.backends.mps
    result = run_checks("--only", "api", "--expect-no-gpu", "--skip", "python-m-torch.backends.mps",
                        torch_root=root, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SKIP python-m-torch.backends.mps" in result.stdout
    assert "0 failure(s), 1 skipped" in result.stdout
    unknown = run_checks("--skip", "no-such-check", torch_root=root, cwd=tmp_path)
    assert unknown.returncode == 2 and "no-such-check" in unknown.stderr


def test_version_mismatch_is_caught(tmp_path: Path) -> None:
    root = write_fake_torch(tmp_path / "site")
    result = run_checks("--only", "api", "--expect-version", "2.14.1+intelmac", torch_root=root,
                        cwd=tmp_path)
    assert "FAIL version" in result.stdout and "FAIL build-info" in result.stdout


def test_wheel_selection(tmp_path: Path) -> None:
    for name in ("torch-2.6.0+intelmac-cp310-cp310-macosx_13_0_x86_64.whl",
                 "torch-2.6.0+intelmac-cp311-cp311-macosx_13_0_x86_64.whl",
                 "torch-2.6.0+intelmac-cp312-cp312-macosx_13_0_x86_64.whl"):
        (tmp_path / name).write_bytes(b"")
    assert test_wheel.select_wheel(tmp_path, "cp311").name.startswith("torch-2.6.0+intelmac-cp311-")
    with pytest.raises(test_wheel.WheelSelectionError, match="cp39"):
        test_wheel.select_wheel(tmp_path, "cp39")
    (tmp_path / "torch-2.9.1+intelmac-cp311-cp311-macosx_13_0_x86_64.whl").write_bytes(b"")
    with pytest.raises(test_wheel.WheelSelectionError, match="exactly one"):
        test_wheel.select_wheel(tmp_path, "cp311")


def test_a_wheel_tagged_for_a_newer_macos_is_refused(tmp_path: Path) -> None:
    # delocate raises the tag when a bundled library needs a newer macOS than the target.
    wheel = tmp_path / "torch-2.6.0+intelmac-py3-none-macosx_15_0_x86_64.whl"
    wheel.write_bytes(b"")
    result = subprocess.run(
        [sys.executable, str(TEST_WHEEL), "--wheel-dir", str(tmp_path),
         "--expect-platform", "macosx_13_0_x86_64"],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1 and "is not tagged macosx_13_0_x86_64" in result.stderr


def hermetic_pip_env() -> dict[str, str]:
    """No machine-wide pip configuration (constraints, extra indexes): only the test's wheel."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PIP_", "PYTORCH_MPS"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


@pytest.mark.slow
def test_end_to_end_install_into_a_fresh_venv(tmp_path: Path) -> None:
    build_fake_wheel(tmp_path / "dist")
    result = subprocess.run(
        [sys.executable, str(TEST_WHEEL), "--wheel-dir", str(tmp_path / "dist"), "--only", "api",
         "--expect-version", "2.15.0+intelmac", "--expect-no-gpu", "--pip-arg=--no-index"],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
        env=hermetic_pip_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checks passed" in result.stdout
    assert str(tmp_path / "site") not in result.stdout  # the venv's torch, not a stray one


@pytest.mark.slow
def test_end_to_end_fails_for_a_wheel_that_breaks_the_contract(tmp_path: Path) -> None:
    build_fake_wheel(tmp_path / "dist", default=True)
    result = subprocess.run(
        [sys.executable, str(TEST_WHEEL), "--wheel-dir", str(tmp_path / "dist"), "--only", "api",
         "--expect-no-gpu", "--pip-arg=--no-index"],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
        env=hermetic_pip_env())
    assert result.returncode == 1
    assert "FAIL allow-intel-gpu-default-off" in result.stdout and "checks FAILED" in result.stdout


#: What the test torch (the CPU wheel of PyTorch's own index) was built with.
TEST_TORCH_FEATURES = "blas=mkl,distributed=on,fbgemm=on,mkldnn=on"


def test_feature_checks_pass_on_the_real_cpu_torch(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("numpy")
    result = run_checks("--only", "features", "--expect-features", TEST_TORCH_FEATURES,
                        cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in wheel_checks_module.FEATURE_CHECKS:
        assert f"PASS {name}" in result.stdout, result.stdout


@pytest.mark.parametrize(("spec", "failing", "why"), [
    # A BLAS other than the one the build reports (the catalog chose another one).
    ("blas=veclib,distributed=on,fbgemm=on,mkldnn=on", "blas-lapack-info", "BLAS_INFO=veclib"),
    # The catalog turned FBGEMM off, but the x86/fbgemm engines are there.
    ("blas=mkl,distributed=on,fbgemm=off,mkldnn=on", "quantized-engines", "expected ['onednn', 'qnnpack']"),
    ("blas=mkl,distributed=on,fbgemm=on,mkldnn=off", "mkldnn", "turned oneDNN off"),
    ("blas=mkl,distributed=off,fbgemm=on,mkldnn=on", "distributed", "turned it off"),
])
def test_feature_checks_catch_a_wheel_unlike_the_catalog(tmp_path: Path, spec: str, failing: str,
                                                         why: str) -> None:
    pytest.importorskip("torch")
    # Without torch.compile's kernel build (most of the run): it does not read the spec, and
    # the two tests around this one check it passes and fails.
    result = run_checks("--only", "features", "--expect-features", spec, "--skip", "torch-compile-cpu",
                        cwd=tmp_path)
    assert result.returncode != 0
    line = next((item for item in result.stdout.splitlines()
                 if item.startswith(f"FAIL {failing}:")), "")
    assert why in line, result.stdout


def test_torch_compile_on_cpu_fails_where_openmp_does_not_link(tmp_path: Path) -> None:
    """The torch.compile check compiles and links inductor's C++ kernel for real.

    The compiler here is the system's, except that linking the OpenMP runtime fails, as on a
    Mac whose wheel lacks torch/lib/libomp.dylib; the check then fails with the linker's word.
    """
    pytest.importorskip("torch")
    real = shutil.which("c++") or shutil.which("g++")
    if real is None:
        pytest.skip("no C++ compiler: torch.compile's CPU path needs one")
    broken = tmp_path / "c++"
    broken.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do case "$arg" in -lomp|-lgomp|-fopenmp)\n'
        '  for next in "$@"; do [ "$next" = -c ] && exec ' + real + ' "$@"; done\n'
        "  echo 'ld: library not found for -lomp' >&2; exit 1;; esac; done\n"
        f'exec {real} "$@"\n'
    )
    broken.chmod(0o755)
    result = subprocess.run(
        [sys.executable, str(CHECKS), "--only", "features", "--expect-features",
         TEST_TORCH_FEATURES, "--skip", "config-string", "--skip", "blas-lapack-info",
         "--skip", "mkldnn", "--skip", "openmp", "--skip", "distributed",
         "--skip", "quantized-engines", "--skip", "lapack-vs-numpy"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False,
        env={**os.environ, "CXX": str(broken)},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL torch-compile-cpu: raised" in result.stdout
    assert "library not found for -lomp" in result.stdout


def test_a_bad_feature_spec_is_refused(tmp_path: Path) -> None:
    result = run_checks("--only", "features", "--expect-features", "blas=mkl,mkldnn=maybe",
                        cwd=tmp_path)
    assert result.returncode == 2
    assert "distributed, fbgemm" in result.stderr and "mkldnn=maybe" in result.stderr
    missing = run_checks("--only", "features", cwd=tmp_path)
    assert missing.returncode == 2 and "needs --expect-features" in missing.stderr


def test_build_settings_are_read_from_the_config_string() -> None:
    show = ("PyTorch built with:\n  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, "
            "CXX_FLAGS= -DUSE_PTHREADPOOL -O2, LAPACK_INFO=mkl, USE_MKLDNN=ON, USE_OPENMP=ON, \n")
    settings = wheel_checks_module.build_settings(show)
    assert settings == {"BLAS_INFO": "mkl", "BUILD_TYPE": "Release",
                        "CXX_FLAGS": "-DUSE_PTHREADPOOL -O2", "LAPACK_INFO": "mkl",
                        "USE_MKLDNN": "ON", "USE_OPENMP": "ON"}


def test_a_feature_turned_off_on_purpose_is_listed_and_checked_absent(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # A torch built like our wheels with USE_FBGEMM=0: the test torch with its x86/fbgemm
    # engines hidden (the engine list is what a build without FBGEMM reports).
    torch = pytest.importorskip("torch")
    quantized = torch.backends.quantized
    monkeypatch.setattr(type(quantized), "supported_engines",
                        property(lambda self: ["qnnpack", "none", "onednn"]))
    spec = wheel_checks_module.parse_features("blas=mkl,distributed=on,fbgemm=off,mkldnn=on")
    checks = wheel_checks_module.Checks(None, False, features=spec)
    checks.run("quantized-engines", checks.quantized_engines)
    out = capsys.readouterr().out
    assert checks.failures == 0, out
    assert "PASS quantized-engines" in out
    assert ("OFF fbgemm: turned off on purpose (USE_FBGEMM=0 in the catalog's build_env); the "
            "x86 and fbgemm quantized engines are absent, onednn, qnnpack remain") in out
