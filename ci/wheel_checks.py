"""Checks that run *inside* the venv a wheel was installed into (stdlib + torch only).

``ci/test_wheel.py`` creates the venv and runs this file with the venv's Python. Each check
prints ``PASS name`` or ``FAIL name: why``; the exit status is the number of failures
(capped at 100). Groups:

* ``api``   - the patched ``torch.backends.mps`` contract (issue 3): ``allow_intel_gpu``
  (default False, settable, ``PYTORCH_MPS_ALLOW_INTEL_GPU`` parsing with one warning for a
  bad value), ``devices()``, ``unavailable_reason()``, ``build_info()``,
  ``python -m torch.backends.mps``, ``python -m torch.backends.mps --check`` (issue 18:
  exit 2 with the reason where MPS is unusable, 0 where every smoke check passes) and
  ``torch.backends.mps.check``. With ``--expect-no-gpu`` (hosted runners) MPS must be
  unusable, say why, and not blame the macOS version.
* ``smoke`` - CPU operations with known answers.
* ``features`` - what an official torch wheel carries, against ``--expect-features`` (the
  release matrix computes it from the catalog's ``build_env``, the one source of truth):
  BLAS_INFO/LAPACK_INFO and the other build settings in ``torch.__config__.show()``, oneDNN
  (``torch.backends.mkldnn``), OpenMP, distributed (gloo, a one-process group over a file
  store), the quantized engines, LAPACK (``torch.linalg.svd``, ``solve``, ``eigh``) against
  NumPy, and ``torch.compile`` on CPU (inductor's C++ kernel, compiled and linked here with
  ``-lomp`` against torch/lib, as on a user's Mac). A feature the build turns off on purpose
  prints ``OFF name: why`` and is checked to be really absent. Runs only with
  ``--expect-features``.

``--skip NAME`` leaves one named check out and prints ``SKIP NAME``: for a torch that only
models the Python layer (tests/ci runs these checks inside check-upstream's sandbox, whose
stand-in torch has the real patched ``torch.backends`` but no tensors).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

ENV_FLAG = "PYTORCH_MPS_ALLOW_INTEL_GPU"
TRUE_VALUES = ("1", "true", "YES", "On")
FALSE_VALUES = ("0", "false", "No", "OFF")
#: The spellings the contract accepts; a warning about a bad value must name them all.
ACCEPTED_WORDS = ("1", "true", "yes", "on", "0", "false", "no", "off")
DEVICE_FIELDS = ("index", "name", "low_power", "removable", "headless", "unified_memory",
                 "recommended_working_set_size", "eligible", "selected", "skip_reason")
BUILD_INFO_KEYS = ("upstream_version", "wheel_version", "source_sha256", "series_fingerprint",
                   "patches", "toolchain", "built_at")
#: Upstream's message when no device was picked, whatever the cause (upstream issue 177819).
MISLEADING = "supported on macOS 14.0+"

API_CHECKS = ("version", "mps-built", "api-present", "allow-intel-gpu-default-off",
              "allow-intel-gpu-settable", "env-valid-values", "env-invalid-value-warns-once",
              "devices", "unavailable-reason", "python-m-torch.backends.mps", "mps-check",
              "build-info",
              "opt-in-without-gpu", "mps-tensor-error")
SMOKE_CHECKS = ("cpu-matmul", "cpu-conv2d", "cpu-autograd", "cpu-softmax", "cpu-training")
FEATURE_CHECKS = ("config-string", "blas-lapack-info", "mkldnn", "openmp", "distributed",
                  "quantized-engines", "lapack-vs-numpy", "torch-compile-cpu")
#: The features --expect-features names, and the build variable that turns each on or off.
SWITCHES = {"mkldnn": "USE_MKLDNN", "distributed": "USE_DISTRIBUTED", "fbgemm": "USE_FBGEMM"}
#: BLAS_INFO values a build may report (cmake/Dependencies.cmake).
BLAS_NAMES = ("mkl", "open", "veclib", "accelerate", "generic", "atlas", "apl", "nvpl", "flexi")

# Run in a child interpreter: the flag's value as torch sees it right after import, and
# every warning raised in the whole life of the process: while importing and reading it,
# and while MPS is first used and the flag read again (the contract allows one warning per
# process for a bad value, not one per read or per scan).
_PROBE = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    value = torch.backends.mps.allow_intel_gpu
    torch.backends.mps.is_available()
    torch.backends.mps.unavailable_reason()
    torch.backends.mps.devices()
    again = torch.backends.mps.allow_intel_gpu
print("PROBE" + json.dumps({"value": value, "again": again,
                            "warnings": [str(w.message) for w in caught]}))
"""


class CheckFailed(Exception):
    pass


def parse_features(spec: str) -> dict[str, str]:
    """``blas=mkl,distributed=on,fbgemm=off,mkldnn=on`` -> a dict; a bad spec is an error."""
    parsed = dict(item.partition("=")[::2] for item in spec.split(",") if item)
    wanted = {"blas", *SWITCHES}
    problems = sorted(wanted ^ set(parsed))
    bad = [f"{key}={value}" for key, value in parsed.items()
           if (key in SWITCHES and value not in ("on", "off"))
           or (key == "blas" and value not in BLAS_NAMES)]
    if problems or bad:
        raise argparse.ArgumentTypeError(
            f"--expect-features {spec!r}: needs exactly {', '.join(sorted(wanted))} "
            f"(blas=<BLAS_INFO>, the others on/off); wrong: {', '.join(problems + bad)}")
    return parsed


def build_settings(show: str) -> dict[str, str]:
    """The ``Build settings: KEY=VALUE, ...`` line of ``torch.__config__.show()`` as a dict."""
    line = next((item for item in show.splitlines() if "Build settings:" in item), "")
    settings = {}
    for match in re.finditer(r"([A-Z][A-Z0-9_]*)=(.*?)(?=, [A-Z][A-Z0-9_]*=|,?\s*$)",
                             line.partition("Build settings:")[2]):
        settings[match[1]] = match[2].strip()
    return settings


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def probe_env(value: str | None) -> dict[str, Any]:
    """allow_intel_gpu and the warnings of a fresh process with the variable set to ``value``."""
    env = {key: item for key, item in os.environ.items() if key != ENV_FLAG}
    if value is not None:
        env[ENV_FLAG] = value
    result = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    require(result.returncode == 0,
            f"importing torch with {ENV_FLAG}={value!r} failed:\n{result.stderr[-2000:]}")
    line = next((item for item in result.stdout.splitlines() if item.startswith("PROBE")), None)
    require(line is not None, f"the probe printed no result:\n{result.stdout[-2000:]}")
    data: dict[str, Any] = json.loads(line[len("PROBE"):])  # type: ignore[index]
    data["stderr"] = result.stderr
    require(data["again"] == data["value"],
            f"{ENV_FLAG}={value!r}: allow_intel_gpu was {data['value']!r} after import but "
            f"{data['again']!r} after the first use of MPS")
    return data


class Checks:
    def __init__(self, expect_version: str | None, expect_no_gpu: bool,
                 skip: frozenset[str] = frozenset(),
                 features: dict[str, str] | None = None) -> None:
        self.expect_version = expect_version
        self.features = features or {}
        self.expect_no_gpu = expect_no_gpu
        self.skip = skip
        self.failures = 0
        self.skipped = 0

    def run(self, name: str, check: Callable[[], None]) -> None:
        assert name in API_CHECKS + SMOKE_CHECKS + FEATURE_CHECKS, f"{name} is not a known check"
        if name in self.skip:
            self.skipped += 1
            print(f"SKIP {name}: left out with --skip", flush=True)
            return
        try:
            check()
        except CheckFailed as exc:
            self.failures += 1
            print(f"FAIL {name}: {exc}", flush=True)
        except Exception:  # noqa: BLE001  a check that crashes is a failed check, with the evidence
            self.failures += 1
            print(f"FAIL {name}: raised\n{traceback.format_exc()}", flush=True)
        else:
            print(f"PASS {name}", flush=True)

    # -- api -----------------------------------------------------------------------------

    def version(self) -> None:
        import torch

        require(torch.__version__ == self.expect_version,
                f"torch.__version__ is {torch.__version__!r}, expected {self.expect_version!r}")

    def mps_built(self) -> None:
        import torch

        require(torch.backends.mps.is_built() is True,
                "torch.backends.mps.is_built() is not True: the wheel was built without MPS")

    def api_present(self) -> None:
        import torch

        mps = torch.backends.mps
        missing = [name for name in ("allow_intel_gpu", "devices", "unavailable_reason",
                                     "build_info", "MPSDeviceInfo") if not hasattr(mps, name)]
        require(not missing, f"torch.backends.mps lacks {', '.join(missing)}: not a patched build")

    def default_off(self) -> None:
        data = probe_env(None)
        require(data["value"] is False,
                f"allow_intel_gpu is {data['value']!r} without {ENV_FLAG}; the default must be False")

    def settable(self) -> None:
        import torch

        mps = torch.backends.mps
        before = mps.allow_intel_gpu
        try:
            mps.allow_intel_gpu = True
            require(mps.allow_intel_gpu is True, "setting allow_intel_gpu = True did not stick")
            # The C++ side itself (MPSDeviceSelection.mm's operator), where this build has it.
            getter = getattr(getattr(torch, "ops", None), "intelmac", None)
            getter = getattr(getter, "mps_get_allow_intel_gpu", None) if getter is not None else None
            if getter is not None:
                require(getter() is True, "torch.ops.intelmac.mps_get_allow_intel_gpu() disagrees after True")
            mps.allow_intel_gpu = False
            require(mps.allow_intel_gpu is False, "setting allow_intel_gpu = False did not stick")
            if getter is not None:
                require(getter() is False, "torch.ops.intelmac.mps_get_allow_intel_gpu() disagrees after False")
        finally:
            mps.allow_intel_gpu = before

    def env_parsing(self) -> None:
        for value in TRUE_VALUES:
            data = probe_env(value)
            require(data["value"] is True, f"{ENV_FLAG}={value} gave {data['value']!r}, expected True")
        for value in FALSE_VALUES + ("",):
            data = probe_env(value)
            require(data["value"] is False, f"{ENV_FLAG}={value!r} gave {data['value']!r}, expected False")
            mentions = [w for w in data["warnings"] if ENV_FLAG in w]
            require(not mentions, f"{ENV_FLAG}={value!r} is valid but warned: {mentions}")

    def env_bad_value(self) -> None:
        bad = "maybe-later"
        data = probe_env(bad)
        require(data["value"] is False,
                f"{ENV_FLAG}={bad} gave {data['value']!r}; the default (False) must apply")
        # One warning naming the variable and the value; a C++ warning may reach stderr instead.
        mentions = [w for w in data["warnings"] if ENV_FLAG in w]
        if not mentions:
            mentions = [line for line in data["stderr"].splitlines() if ENV_FLAG in line]
        require(len(mentions) == 1,
                f"{ENV_FLAG}={bad}: expected exactly one warning naming the variable, got {mentions}")
        require(bad in mentions[0], f"the warning does not name the value {bad!r}: {mentions[0]}")
        unnamed = [word for word in ACCEPTED_WORDS
                   if not re.search(rf"\b{word}\b", mentions[0], re.IGNORECASE)]
        require(not unnamed, f"the warning does not name the accepted values {unnamed}: {mentions[0]}")

    def devices(self) -> None:
        import torch

        mps = torch.backends.mps
        devices = mps.devices()
        require(isinstance(devices, list), f"devices() returned {type(devices).__name__}, not a list")
        fields = getattr(mps.MPSDeviceInfo, "_fields", ())
        missing = [name for name in DEVICE_FIELDS if name not in fields]
        require(not missing, f"MPSDeviceInfo lacks the fields {missing}")
        for position, device in enumerate(devices):
            require(isinstance(device, mps.MPSDeviceInfo), f"devices()[{position}] is {device!r}")
            require(device.index == position, f"devices()[{position}].index is {device.index}")
            require(isinstance(device.eligible, bool) and isinstance(device.selected, bool),
                    f"eligible/selected of {device.name!r} are not booleans")
            if not device.eligible:
                require(isinstance(device.skip_reason, str) and device.skip_reason != "",
                        f"{device.name!r} is not eligible but gives no skip_reason")
        selected = [device.name for device in devices if device.selected]
        require(len(selected) <= 1, f"more than one device is selected: {selected}")
        if self.expect_no_gpu:
            require(not selected, f"no usable GPU was expected, but {selected} is selected")
        print(f"  devices: {[(d.index, d.name, d.eligible, d.skip_reason) for d in devices]}")

    def unavailable_reason(self) -> None:
        import torch

        mps = torch.backends.mps
        available = mps.is_available()
        reason = mps.unavailable_reason()
        if self.expect_no_gpu:
            require(available is False, "MPS is available on a machine expected to have no usable GPU")
        if available:
            require(reason is None, f"MPS is available but unavailable_reason() is {reason!r}")
        else:
            require(isinstance(reason, str) and reason.strip() != "",
                    f"MPS is unavailable but unavailable_reason() is {reason!r}")
            require(MISLEADING not in reason, f"the reason blames the macOS version: {reason!r}")
            print(f"  reason: {reason}")

    def opt_in_without_gpu(self) -> None:
        """With no usable GPU, opting in must not make MPS appear (and must not crash)."""
        import torch

        mps = torch.backends.mps
        before = mps.allow_intel_gpu
        try:
            mps.allow_intel_gpu = True
            require(mps.unavailable_reason() is not None,
                    "allow_intel_gpu = True made MPS usable on a machine with no usable GPU")
            require(mps.is_available() is False,
                    "is_available() is True after allow_intel_gpu = True on a machine with no "
                    "usable GPU")
        finally:
            mps.allow_intel_gpu = before

    def tensor_error(self) -> None:
        import torch

        try:
            torch.zeros(2, device="mps")
        except RuntimeError as exc:
            message = str(exc)
            require(MISLEADING not in message,
                    f"creating an mps tensor still says upstream's misleading message: {message!r}")
            print(f"  mps tensor error: {message.splitlines()[0] if message else ''}")
        else:
            raise CheckFailed("creating an mps tensor succeeded on a machine with no usable GPU")

    def module_report(self) -> None:
        import torch

        result = subprocess.run([sys.executable, "-m", "torch.backends.mps"], capture_output=True,
                                text=True, timeout=300, check=False)
        output = result.stdout + result.stderr
        available = torch.backends.mps.is_available()
        expected = 0 if available else 1
        require(result.returncode == expected,
                f"python -m torch.backends.mps exited {result.returncode}, expected {expected}:\n"
                f"{output[-2000:]}")
        if not available:
            reason = torch.backends.mps.unavailable_reason() or ""
            require(bool(reason) and reason in output,
                    f"python -m torch.backends.mps does not print the reason {reason!r}:\n{output[-2000:]}")
        # The report shows every device and the build information (issue 3).
        unlisted = [d.name for d in torch.backends.mps.devices() if d.name not in output]
        require(not unlisted, f"python -m torch.backends.mps does not list {unlisted}:\n{output[-2000:]}")
        info = torch.backends.mps.build_info()
        if isinstance(info, dict) and isinstance(info.get("wheel_version"), str):
            require(info["wheel_version"] in output,
                    f"python -m torch.backends.mps does not show the build information "
                    f"(wheel_version {info['wheel_version']!r}):\n{output[-2000:]}")

    def mps_check(self) -> None:
        import torch

        mps = torch.backends.mps
        require(callable(getattr(mps, "check", None)), "torch.backends.mps has no check()")
        # Smoke checks only: timings say nothing about the wheel and take a minute.
        result = subprocess.run([sys.executable, "-m", "torch.backends.mps", "--check", "--json",
                                 "--no-timings"], capture_output=True, text=True, timeout=600,
                                check=False)
        output = result.stdout + result.stderr
        try:
            data = json.loads(result.stdout)
        except ValueError:
            raise CheckFailed(f"--check --json printed no JSON (exit {result.returncode}):\n"
                              f"{output[-2000:]}") from None
        if not mps.is_available():
            reason = mps.unavailable_reason() or ""
            require(result.returncode == 2 and data.get("status") == "unavailable",
                    f"--check exited {result.returncode} with status {data.get('status')!r}, "
                    f"expected 2 and 'unavailable' where MPS is unusable:\n{output[-2000:]}")
            require(bool(reason) and data.get("reason") == reason,
                    f"--check gives the reason {data.get('reason')!r}, the device report "
                    f"{reason!r}")
            return
        not_passing = [(r["op"], r["status"], r["message"]) for r in data.get("ops", [])
                       if r.get("status") != "pass"]
        require(result.returncode == 0 and data.get("ops") and not not_passing,
                f"--check exited {result.returncode}; not passing: {not_passing}")

    def build_info(self) -> None:
        import torch

        info = torch.backends.mps.build_info()
        require(isinstance(info, dict), f"build_info() is {info!r}, expected the INTELMAC_BUILD.json dict")
        missing = [key for key in BUILD_INFO_KEYS if key not in info]
        require(not missing, f"build_info() lacks {missing}")
        if self.expect_version:
            require(info["wheel_version"] == self.expect_version,
                    f"build_info()['wheel_version'] is {info['wheel_version']!r}")
        print(f"  build: {json.dumps({k: info[k] for k in ('upstream_version', 'series_fingerprint')})}")

    # -- features ------------------------------------------------------------------------

    def on(self, feature: str) -> bool:
        return self.features[feature] == "on"

    def off_note(self, feature: str) -> None:
        """Say that a feature is absent because the build turned it off, not by accident."""
        print(f"OFF {feature}: turned off on purpose ({SWITCHES[feature]}=0 in the catalog's "
              "build_env); checked to be absent", flush=True)

    def config_string(self) -> None:
        import torch

        show = torch.__config__.show()
        settings = build_settings(show)
        require(settings, f"torch.__config__.show() has no 'Build settings:' line:\n{show}")
        expected = {"USE_OPENMP": "ON", "USE_MKLDNN": "ON" if self.on("mkldnn") else "OFF"}
        if self.features["blas"] == "mkl":
            expected["USE_MKL"] = "ON"
        wrong = [f"{key}={settings.get(key)!r} (expected {value})"
                 for key, value in expected.items() if settings.get(key) != value]
        require(not wrong, "build settings: " + "; ".join(wrong))
        # USE_GLOO appears in the settings from about 2.3; a build that says OFF lacks gloo.
        if "USE_GLOO" in settings:
            want = "ON" if self.on("distributed") else "OFF"
            require(settings["USE_GLOO"] == want, f"USE_GLOO={settings['USE_GLOO']}, expected {want}")
        lines = [item.strip() for item in show.splitlines() if item.strip().startswith("- ")]
        print("  " + "\n  ".join(item for item in lines if "Build settings" not in item))

    def blas_lapack_info(self) -> None:
        import torch

        settings = build_settings(torch.__config__.show())
        blas = self.features["blas"]
        found = {key: settings.get(key) for key in ("BLAS_INFO", "LAPACK_INFO")}
        require(found == {"BLAS_INFO": blas, "LAPACK_INFO": blas},
                f"{found}, expected BLAS_INFO={blas} and LAPACK_INFO={blas}: CMake did not use "
                "the BLAS the catalog chose (build_env.BLAS)")
        if blas == "mkl":
            require(torch.backends.mkl.is_available(), "torch.backends.mkl.is_available() is False")

    def mkldnn(self) -> None:
        import torch

        available = torch.backends.mkldnn.is_available()
        if not self.on("mkldnn"):
            require(not available, "torch.backends.mkldnn.is_available() is True but the build "
                    "turned oneDNN off")
            self.off_note("mkldnn")
            return
        require(available, "torch.backends.mkldnn.is_available() is False: built without oneDNN")
        from torch.utils import mkldnn as mkldnn_utils

        torch.manual_seed(0)
        layer = torch.nn.Linear(16, 8).eval()
        x = torch.randn(4, 16)
        with torch.no_grad():
            want = layer(x)
            got = mkldnn_utils.to_mkldnn(layer)(x.to_mkldnn()).to_dense()
        require(torch.allclose(got, want, atol=1e-5), "a oneDNN Linear differs from the CPU's")

    def openmp(self) -> None:
        import torch

        require(torch.backends.openmp.is_available(), "torch.backends.openmp.is_available() is False")
        info = torch.__config__.parallel_info()
        require("ATen parallel backend: OpenMP" in info,
                f"the parallel backend is not OpenMP:\n{info}")
        threads, cores = torch.get_num_threads(), os.cpu_count() or 1
        # 4 logical cores are at least 2 physical ones, which torch's default uses.
        if cores >= 4:
            require(threads > 1, f"torch.get_num_threads() is {threads} on {cores} cores")
        print(f"  {threads} threads on {cores} logical cores")

    def torch_compile_cpu(self) -> None:
        """torch.compile's CPU path: C++ compiled here, linked with -lomp against torch/lib.

        On macOS that link finds the wheel's torch/lib/libomp.dylib and torch/include/omp.h
        or fails (the wheel layout verify checks). A fresh, uncached inductor folder, so the
        kernel is compiled now and not loaded from an earlier run.
        """
        import tempfile

        import torch

        def f(x: Any, y: Any) -> Any:
            return torch.sin(x) * y + torch.cos(y).sum(dim=-1, keepdim=True)

        x, y = torch.randn(256, 4096), torch.randn(256, 4096)
        saved = {key: os.environ.get(key) for key in ("TORCHINDUCTOR_CACHE_DIR",
                                                       "TORCHINDUCTOR_FORCE_DISABLE_CACHES")}
        with tempfile.TemporaryDirectory() as folder:
            os.environ.update(TORCHINDUCTOR_CACHE_DIR=folder, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
            try:
                got = torch.compile(f, backend="inductor", fullgraph=True)(x, y)
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
            built = [os.path.join(root, name) for root, _, names in os.walk(folder)
                     for name in names]
            require(any(name.endswith((".so", ".dylib")) for name in built),
                    f"torch.compile built no C++ library in {folder}: its CPU path did not run")
            parallel = any(name.endswith((".cpp", ".py")) and "#pragma omp" in _read(name)
                           for name in built)
        require(torch.allclose(got, f(x, y), atol=1e-4), "the compiled function's result differs")
        # One thread: inductor writes no OpenMP region, so nothing linked libomp's code.
        if torch.get_num_threads() > 1:
            require(parallel, "the compiled C++ kernel has no OpenMP region (#pragma omp)")

    def distributed(self) -> None:
        import torch

        dist = torch.distributed
        if not self.on("distributed"):
            require(not dist.is_available(), "torch.distributed is available but the build "
                    "turned it off")
            self.off_note("distributed")
            return
        require(dist.is_available(), "torch.distributed.is_available() is False")
        require(dist.is_gloo_available(), "torch.distributed.is_gloo_available() is False")
        import datetime
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            store = os.path.join(scratch, "store")
            dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1,
                                    timeout=datetime.timedelta(seconds=60))
            try:
                tensor = torch.arange(4.0)
                dist.all_reduce(tensor)
                require(tensor.tolist() == [0.0, 1.0, 2.0, 3.0], f"all_reduce gave {tensor}")
                require(dist.get_backend() == "gloo", f"backend {dist.get_backend()}")
            finally:
                dist.destroy_process_group()

    def quantized_engines(self) -> None:
        import torch

        engines = set(torch.backends.quantized.supported_engines) - {"none"}
        expected = {"qnnpack"} | ({"onednn"} if self.on("mkldnn") else set())
        expected |= {"x86", "fbgemm"} if self.on("fbgemm") else set()
        require(engines == expected, f"quantized engines {sorted(engines)}, expected "
                f"{sorted(expected)} (fbgemm={self.features['fbgemm']}, "
                f"mkldnn={self.features['mkldnn']})")
        before = torch.backends.quantized.engine
        try:
            for engine in sorted(engines):
                torch.backends.quantized.engine = engine
                with warnings.catch_warnings():  # quantized tensors are deprecated from 2.13
                    warnings.simplefilter("ignore")
                    layer = torch.ao.nn.quantized.Linear(8, 4)
                    x = torch.quantize_per_tensor(torch.randn(3, 8), 0.05, 64, torch.quint8)
                    out = layer(x)
                require(tuple(out.shape) == (3, 4), f"{engine}: quantized Linear gave {out.shape}")
        finally:
            torch.backends.quantized.engine = before
        if not self.on("fbgemm"):
            print("OFF fbgemm: turned off on purpose (USE_FBGEMM=0 in the catalog's build_env); "
                  "the x86 and fbgemm quantized engines are absent, "
                  f"{', '.join(sorted(engines))} remain", flush=True)

    def lapack_vs_numpy(self) -> None:
        import torch

        try:
            import numpy
        except ImportError:
            raise CheckFailed("NumPy is not installed in this venv; the LAPACK check compares "
                              "against it (ci/test_wheel.py installs it)") from None
        generator = torch.Generator().manual_seed(0)
        a = torch.randn(24, 24, dtype=torch.float64, generator=generator)
        a = a @ a.T + 24 * torch.eye(24, dtype=torch.float64)  # symmetric, well conditioned
        b = torch.randn(24, 3, dtype=torch.float64, generator=generator)
        ref = a.numpy()
        singular = torch.linalg.svd(a).S.numpy()
        require(numpy.allclose(singular, numpy.linalg.svd(ref, compute_uv=False), rtol=1e-10),
                "torch.linalg.svd's singular values differ from NumPy's")
        require(numpy.allclose(torch.linalg.solve(a, b).numpy(), numpy.linalg.solve(ref, b.numpy()),
                               rtol=1e-10), "torch.linalg.solve differs from NumPy's")
        values, vectors = torch.linalg.eigh(a)
        require(numpy.allclose(values.numpy(), numpy.linalg.eigvalsh(ref), rtol=1e-10),
                "torch.linalg.eigh's eigenvalues differ from NumPy's")
        require(torch.allclose(a @ vectors, vectors * values, atol=1e-8),
                "torch.linalg.eigh's eigenvectors do not satisfy A v = lambda v")

    # -- smoke ---------------------------------------------------------------------------

    def cpu_matmul(self) -> None:
        import torch

        a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        b = torch.tensor([[5.0, 6.0], [7.0, 8.0]])
        require((a @ b).tolist() == [[19.0, 22.0], [43.0, 50.0]], f"matmul gave {(a @ b).tolist()}")
        big = torch.arange(64 * 64, dtype=torch.float64).reshape(64, 64) / 4096
        identity = torch.eye(64, dtype=torch.float64)
        require(torch.equal(big @ identity, big), "a matrix times the identity changed")

    def cpu_conv(self) -> None:
        import torch

        image = torch.ones(1, 1, 4, 4)
        kernel = torch.ones(1, 1, 3, 3)
        out = torch.nn.functional.conv2d(image, kernel)
        require(out.shape == (1, 1, 2, 2) and bool((out == 9).all()), f"conv2d gave {out.tolist()}")

    def cpu_autograd(self) -> None:
        import torch

        x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
        (x * x).sum().backward()
        require(x.grad is not None and x.grad.tolist() == [2.0, -4.0, 6.0], f"grad is {x.grad}")

    def cpu_softmax(self) -> None:
        import torch

        p = torch.softmax(torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]), dim=1)
        require(torch.allclose(p.sum(dim=1), torch.ones(2)), f"softmax rows sum to {p.sum(dim=1)}")
        require(abs(p[1, 0].item() - 1 / 3) < 1e-6, f"uniform softmax gave {p[1].tolist()}")

    def cpu_training(self) -> None:
        import torch

        torch.manual_seed(0)
        x = torch.randn(64, 8)
        y = x @ torch.randn(8, 1)
        model = torch.nn.Linear(8, 1)
        optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(50):
            optimiser.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimiser.step()
            losses.append(loss.item())
        require(losses[-1] < 0.1 * losses[0], f"the loss went from {losses[0]:.4f} to {losses[-1]:.4f}")


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="checks run inside the wheel's venv")
    parser.add_argument("--expect-version", help="torch.__version__ the wheel must report")
    parser.add_argument("--expect-no-gpu", action="store_true",
                        help="MPS must be unusable here (GitHub-hosted runners have no usable GPU)")
    parser.add_argument("--only", choices=("api", "smoke", "features"), action="append",
                        help="run only these groups (default: all; features needs "
                        "--expect-features)")
    parser.add_argument("--expect-features", type=parse_features,
                        help="what the build turned on, from the catalog: "
                        "blas=mkl,distributed=on,fbgemm=off,mkldnn=on (python -m "
                        "intelmac_torch_builder matrix gives each line's)")
    parser.add_argument("--skip", choices=API_CHECKS + SMOKE_CHECKS + FEATURE_CHECKS,
                        action="append", default=[],
                        metavar="CHECK",
                        help="leave this check out, saying so (repeatable); for a stand-in torch "
                        "that cannot do what the check needs, e.g. mps-tensor-error without tensors")
    args = parser.parse_args(argv)
    groups = args.only or ["api", "smoke"] + (["features"] if args.expect_features else [])
    if "features" in groups and not args.expect_features:
        parser.error("--only features needs --expect-features")
    checks = Checks(args.expect_version, args.expect_no_gpu, frozenset(args.skip),
                    args.expect_features)
    import torch

    print(f"torch {torch.__version__} from {os.path.dirname(torch.__file__)}", flush=True)
    if "api" in groups:
        if args.expect_version:
            checks.run("version", checks.version)
        checks.run("mps-built", checks.mps_built)
        before = checks.failures
        checks.run("api-present", checks.api_present)
        if checks.failures > before:
            print("SKIP the other api checks: this torch has no patched MPS API", flush=True)
            groups = [group for group in groups if group != "api"]
    if "api" in groups:
        checks.run("allow-intel-gpu-default-off", checks.default_off)
        checks.run("allow-intel-gpu-settable", checks.settable)
        checks.run("env-valid-values", checks.env_parsing)
        checks.run("env-invalid-value-warns-once", checks.env_bad_value)
        checks.run("devices", checks.devices)
        checks.run("unavailable-reason", checks.unavailable_reason)
        checks.run("python-m-torch.backends.mps", checks.module_report)
        checks.run("mps-check", checks.mps_check)
        checks.run("build-info", checks.build_info)
        if args.expect_no_gpu:
            checks.run("opt-in-without-gpu", checks.opt_in_without_gpu)
            checks.run("mps-tensor-error", checks.tensor_error)
    if "smoke" in groups:
        checks.run("cpu-matmul", checks.cpu_matmul)
        checks.run("cpu-conv2d", checks.cpu_conv)
        checks.run("cpu-autograd", checks.cpu_autograd)
        checks.run("cpu-softmax", checks.cpu_softmax)
        checks.run("cpu-training", checks.cpu_training)
    if "features" in groups:
        checks.run("config-string", checks.config_string)
        checks.run("blas-lapack-info", checks.blas_lapack_info)
        checks.run("mkldnn", checks.mkldnn)
        checks.run("openmp", checks.openmp)
        checks.run("distributed", checks.distributed)
        checks.run("quantized-engines", checks.quantized_engines)
        checks.run("lapack-vs-numpy", checks.lapack_vs_numpy)
        checks.run("torch-compile-cpu", checks.torch_compile_cpu)
    skipped = f", {checks.skipped} skipped" if checks.skipped else ""
    print(f"{checks.failures} failure(s){skipped}", flush=True)
    return min(checks.failures, 100)


if __name__ == "__main__":
    sys.exit(main())
