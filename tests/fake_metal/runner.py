"""Runs scenarios against one line's compiled MPS code inside the test torch, one fork each.

``python -m tests.fake_metal.runner BUILD.json`` imports torch once, then reads scenarios
(one JSON object a line) on stdin and prints one JSON result a line. Every scenario runs
in a forked child, because everything it exercises is once per process: the MPSDevice
singleton, the policy's state, ``TORCH_LIBRARY(intelmac)`` and upstream's lru_cached
``is_available()``. The child:

configures the stand-in Metal (``fake_metal_configure``) and the environment, runs the
steps and reports each value, error and warning, and the stand-in's records. Before the
forks, the parent (``Loaded``) loads the line's library with ``torch.ops.load_library``
(our operators register), gives ``torch._C`` what a Mac build has and a CPU build lacks
(``_has_mps``, and ``_mps_is_available`` calling the compiled ``at::mps::is_available()``
through harness.mm, its TORCH_WARNs raised as Python warnings as torch's handler does),
and imports the line's own ``torch/backends/mps/__init__.py`` with patch 0003 applied and
our ``_device_policy.py`` as ``torch.backends.mps``.

BUILD.json: {"library", "fake_metal", "python_layer" (the patched torch/backends/mps)}.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

ENV_NAMES = ("PYTORCH_MPS_ALLOW_INTEL_GPU", "PYTORCH_MPS_DEVICE", "PYTORCH_MPS_HIGH_WATERMARK_RATIO")


def _upstream_module(build: dict[str, Any], path: str, name: str) -> Any:
    """The line's own upstream Python file (conftest.UPSTREAM_PYTHON, the series applied),
    loaded under ``name`` inside the test torch's package (its relative imports resolve
    there); None when the line has no such file."""
    source = Path(build["upstream_python"]) / path
    if not source.is_file():
        return None
    spec = importlib.util.spec_from_file_location(name, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _data_loader_pins(build: dict[str, Any]) -> bool:
    """Whether the line's own DataLoader, made with pin_memory=True for "mps" on a Mac build
    (the accelerator is MPS; pin_memory_device is what 2.6.0 needs), would pin its batches."""
    import torch

    module = _upstream_module(build, "torch/utils/data/dataloader.py", "torch.utils.data._intelmac_dataloader")
    torch.accelerator.is_available = lambda: True
    torch.accelerator.current_accelerator = lambda check_available=False: torch.device("mps")
    loader = module.DataLoader([torch.zeros(2)] * 4, batch_size=2, pin_memory=True, pin_memory_device="mps")
    return bool(iter(loader)._pin_memory)


def _stream_step(build: dict[str, Any], step: str) -> str:
    """torch.mps.Stream made or set current, through the line's own streams.py: what
    happened ("no torch.mps.Stream on this line", or "allowed": it reached torch._C, which a
    CPU torch lacks). Refusals raise."""
    module = _upstream_module(build, "torch/mps/streams.py", "torch.mps._intelmac_streams")
    if module is None:
        return "no torch.mps.Stream on this line"
    kind, _, value = step.partition("=")
    try:
        if kind == "stream":
            module.Stream() if value == "new" else module.Stream(stream_id=int(value))
        else:
            module.set_stream(type("S", (), {"stream_id": int(value)})())
    except (RuntimeError, AttributeError) as exc:
        if "dummy base class" in str(exc) or "_mps_setStream" in str(exc):
            return "allowed"
        raise
    return "allowed"


def _install_layer(layer: Path) -> Any:
    import torch

    for name in [n for n in sys.modules if n == "torch.backends.mps" or n.startswith("torch.backends.mps.")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        "torch.backends.mps", layer / "__init__.py", submodule_search_locations=[str(layer)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["torch.backends.mps"] = module
    spec.loader.exec_module(module)
    installed = sys.modules["torch.backends.mps"]  # the PropModule proxy of patch 0003
    torch.backends.mps = installed
    return installed


class Loaded:
    """What every scenario shares, loaded once before the forks.

    Loading runs only static initialisers: ``TORCH_LIBRARY(intelmac)`` registers the
    operators, nothing more. The once-per-process state under test (the MPSDevice
    singleton, the policy's DeviceState, which reads PYTORCH_MPS_* at its first use, and
    upstream's lru_cached ``is_available()``) is created lazily, so each forked child
    starts with none of it.
    """

    def __init__(self, build: dict[str, Any]) -> None:
        import torch

        self.build = build
        self.fake = ctypes.CDLL(build["fake_metal"], mode=ctypes.RTLD_GLOBAL)
        self.fake.fake_metal_last_error.restype = ctypes.c_char_p
        self.fake.fake_metal_records_json.restype = ctypes.c_char_p
        self.fake.fake_metal_device_retain_count.restype = ctypes.c_long
        self.fake.fake_metal_device_retain_count.argtypes = [ctypes.c_uint64]
        torch.ops.load_library(build["library"])
        lib = ctypes.CDLL(build["library"], mode=ctypes.RTLD_GLOBAL)
        lib.intelmac_test_take_warnings.restype = ctypes.c_char_p
        lib.intelmac_test_retained_registry_id.restype = ctypes.c_ulonglong
        lib.intelmac_test_core_count.restype = ctypes.c_long
        self.lib = lib

        def raise_queued() -> None:
            queued = lib.intelmac_test_take_warnings().decode()
            for message in queued.split("\x1e") if queued else []:
                warnings.warn(message, UserWarning, stacklevel=3)

        def mps_is_available() -> bool:
            try:
                return bool(lib.intelmac_test_is_available())
            finally:
                raise_queued()

        self.raise_queued = raise_queued
        torch._C._has_mps = True
        torch._C._mps_is_available = mps_is_available
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.mps = _install_layer(Path(build["python_layer"]))
        self.import_warnings = [str(w.message) for w in caught]


def _memory_limit() -> Any:
    import importlib

    return importlib.import_module("torch.backends.mps._memory").memory_limit()


def _run(loaded: Loaded, scenario: dict[str, Any]) -> dict[str, Any]:
    fake, lib, mps = loaded.fake, loaded.lib, loaded.mps
    if fake.fake_metal_configure(json.dumps(scenario["metal"]).encode()) != 0:
        return {"fatal": fake.fake_metal_last_error().decode()}
    for name in ENV_NAMES:
        os.environ.pop(name, None)
    os.environ.update(scenario.get("env", {}))

    steps_out: list[dict[str, Any]] = [{"step": "import", "warnings": loaded.import_warnings}]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        def drained() -> list[str]:
            messages = [str(w.message) for w in caught]
            del caught[:]
            return messages

        for step in scenario["steps"]:
            record: dict[str, Any] = {"step": step}
            try:
                if step == "get":
                    record["value"] = mps.allow_intel_gpu
                elif step.startswith("set="):
                    mps.allow_intel_gpu = json.loads(step[4:])
                elif step == "is_available":
                    record["value"] = mps.is_available()
                elif step == "devices":
                    record["value"] = [d._asdict() for d in mps.devices()]
                elif step == "reason":
                    record["value"] = mps.unavailable_reason()
                elif step == "retained":
                    record["value"] = int(lib.intelmac_test_retained_registry_id())
                    loaded.raise_queued()
                elif step == "core_count":
                    record["value"] = int(lib.intelmac_test_core_count())
                    loaded.raise_queued()
                elif step.startswith("kernel_probe="):
                    import torch

                    record["value"] = list(torch.ops.intelmac.mps_kernel_probe(step[len("kernel_probe="):]))
                elif step == "gpu_limits":
                    import torch

                    record["value"] = json.loads(torch.ops.intelmac.mps_gpu_limits())
                elif step == "memory_limit":
                    record["value"] = _memory_limit()
                elif step == "report_text":
                    record["value"] = mps._device_policy.format_report(mps._device_policy.report(mps.is_available))
                elif step == "data_loader_pins":
                    record["value"] = _data_loader_pins(loaded.build)
                elif step.startswith(("stream=", "set_stream=")):
                    record["value"] = _stream_step(loaded.build, step)
                elif step == "retain_counts":
                    record["value"] = {str(d["registry_id"]): int(fake.fake_metal_device_retain_count(d["registry_id"]))
                                       for d in scenario["metal"]["devices"]}
                else:
                    raise ValueError("unknown step " + step)
            except Exception as exc:  # noqa: BLE001 (reported, not raised: the test compares)
                record["error"] = f"{type(exc).__name__}: {exc}"
            record["warnings"] = drained()
            steps_out.append(record)
    return {"steps": steps_out, "records": json.loads(fake.fake_metal_records_json().decode())}


def _child(loaded: Loaded, scenario: dict[str, Any], write_fd: int) -> None:
    try:
        result = _run(loaded, scenario)
    except BaseException:  # noqa: BLE001 (the parent reports it with the scenario)
        result = {"fatal": traceback.format_exc()}
    with os.fdopen(write_fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(result))
    os._exit(0)


def run_one(loaded: Loaded, scenario: dict[str, Any]) -> dict[str, Any]:
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(loaded, scenario, write_fd)
    os.close(write_fd)
    with os.fdopen(read_fd, encoding="utf-8") as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return {"fatal": f"the child died of signal {os.WTERMSIG(status)}", "partial": text}
    if not text:
        return {"fatal": f"the child exited with status {os.WEXITSTATUS(status)} and no result"}
    return json.loads(text)


def main() -> int:
    build = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # fork() with threads
    loaded = Loaded(build)
    for raw in sys.stdin:
        if raw.strip():
            scenario = json.loads(raw)
            result = run_one(loaded, scenario)
            result["id"] = scenario.get("id")
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
