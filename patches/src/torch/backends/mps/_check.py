"""``python -m torch.backends.mps --check``: does MPS work on this GPU, and is it worth it?

Added by the intelmac patch series (patch 0003); ``torch.backends.mps.check()`` is the same
from Python. Two questions, each answered on the device against the CPU:

* **Does it work?** Smoke checks (the first allocation, ``.item()``, copies at odd offsets,
  matmul, conv2d, softmax and layer_norm forward and backward, an optimizer step) compared
  with a float64 reference on the CPU.
* **Is it worth it?** Timings of a few workloads on the device and on the CPU, with all
  threads and with one, by the benchmark's timing rules (``_timing.py``), and a verdict in
  words per workload, with the geometric mean and the worst case.

Everything that touches the device runs in child processes (``python -m
torch.backends.mps._check --worker ...``). A check that aborts the process (a Metal
validation failure, a driver crash) is named as the one that died, and the checks after it
run in a new process. The parent asks only whether MPS is available and which device it
chose.

The device is a parameter (``mps``, ``cuda``, ``xpu`` or ``cpu``) so that the check itself
can be tested where no Mac is: against the CPU, and on an NVIDIA GPU against ``cuda``.

Exit status of ``--check``: 0 every smoke check passed; 1 one failed or raised; 2 the
device is unavailable (the reason is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import _timing, _workloads
from ._families import family_of


__all__ = ["CheckResult", "SmokeResult", "WorkloadTiming", "check", "main"]

DEVICES = ("mps", "cuda", "xpu", "cpu")
ALLOW_ENV = "PYTORCH_MPS_ALLOW_INTEL_GPU"
DEVICE_ENV = "PYTORCH_MPS_DEVICE"
# What the worker prints before each of its records: anything else on its stdout (a
# library's own print) is not mistaken for a result.
_MARK = "@intelmac-check "
DEFAULT_BUDGET_S = 1.0
# Whole-process limits of one worker; a hung check is reported as such and the rest go on.
_SMOKE_TIMEOUT_S = 300
_TIMING_TIMEOUT_S = 900


# ---------------------------------------------------------------------------------------
# Smoke checks (run in the worker process)
# ---------------------------------------------------------------------------------------


class _Mismatch(AssertionError):
    """The device's result differs from the reference by more than the tolerance."""


def _compare(what: str, got: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> None:
    """Raise _Mismatch unless max |got - ref| <= atol + rtol * max |ref|.

    The tolerance scales with the largest reference value, not element by element: a GPU's
    float32 kernel may sum in another order or use TF32/fast math, which moves small values
    by much more than their own size but never by much compared with the largest one.
    """
    # To the CPU first, then to float64: MPS has no float64, so no conversion may happen there.
    got64 = got.detach().to("cpu").to(torch.float64)
    ref64 = ref.detach().to("cpu").to(torch.float64)
    if got64.shape != ref64.shape:
        raise _Mismatch(f"{what}: shape {tuple(got64.shape)}, expected {tuple(ref64.shape)}")
    if not bool(torch.isfinite(got64).all()):
        bad = int((~torch.isfinite(got64)).sum())
        raise _Mismatch(f"{what}: {bad} of {got64.numel()} values are NaN or infinite")
    err = float((got64 - ref64).abs().max()) if got64.numel() else 0.0
    allowed = atol + rtol * float(ref64.abs().max()) if ref64.numel() else atol
    if err > allowed:
        where = int((got64 - ref64).abs().argmax())
        raise _Mismatch(
            f"{what}: max |error| {err:.3g} > {allowed:.3g} allowed "
            f"(at flat index {where}: {float(got64.flatten()[where]):.6g}, "
            f"expected {float(ref64.flatten()[where]):.6g})"
        )


def _equal(what: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    got_cpu = got.detach().to("cpu")
    if got_cpu.shape != ref.shape or not bool(torch.equal(got_cpu, ref)):
        diff = (got_cpu != ref).nonzero() if got_cpu.shape == ref.shape else None
        first = tuple(diff[0].tolist()) if diff is not None and len(diff) else "shape"
        count = len(diff) if diff is not None else "?"
        raise _Mismatch(f"{what}: {count} of {ref.numel()} values differ (first at {first})")


def _data(shape: Tuple[int, ...], seed: int) -> torch.Tensor:
    """float64 data on the CPU: the reference's input, cast for the device."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def _forward_backward(
    device: str,
    fn: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    seed: int,
    rtol: float,
    atol: float,
) -> None:
    """fn on the device in float32 and on the CPU in float64; outputs and gradients compared."""
    results = []
    for where, dtype in ((device, torch.float32), ("cpu", torch.float64)):
        # Cast on the CPU, then move: the float64 data never reaches the device.
        args = [t.to(dtype).to(where).requires_grad_(True) for t in inputs]
        out = fn(*args)
        grad_out = _data(tuple(out.shape), seed).to(dtype).to(where)
        grads = torch.autograd.grad(out, args, grad_out)
        results.append((out, grads))
    (out, grads), (ref, ref_grads) = results
    _compare("forward", out, ref, rtol, atol)
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        _compare(f"backward (gradient of input {i})", g, r, rtol, atol)


def smoke_allocation(device: str) -> None:
    zeros = torch.zeros(3, device=device)  # the first allocation on the device
    scalar = torch.tensor(2.5, device=device)
    _equal("zeros + scalar", zeros + scalar, torch.full((3,), 2.5))
    _equal("the scalar alone", scalar, torch.tensor(2.5))


def smoke_item(device: str) -> None:
    values = torch.arange(10, dtype=torch.float32, device=device)
    got = [values.sum().item(), torch.arange(7, device=device).max().item(), bool((values > 8).any().item())]
    if got != [45.0, 6, True]:
        raise _Mismatch(f".item() gave {got}, expected [45.0, 6, True]")


def smoke_copy_to_device_odd_offset(device: str) -> None:
    host = torch.arange(1027, dtype=torch.float32)
    src = host[1:]  # starts one element (4 bytes) into its storage: an odd offset
    _equal("tensor.to(device) from an odd offset", src.to(device), src)
    dst = torch.full((1026,), -1.0, device=device)
    dst.copy_(src)
    _equal("device.copy_(host slice at an odd offset)", dst, src)


def smoke_copy_from_device_odd_offset(device: str) -> None:
    on_device = torch.arange(1027, dtype=torch.float32, device=device)
    expected = torch.arange(1027, dtype=torch.float32)
    _equal("device slice at an odd offset .to('cpu')", on_device[3:].to("cpu"), expected[3:])
    host = torch.full((1024,), -1.0)
    host.copy_(on_device[1:1025])
    _equal("host.copy_(device slice at an odd offset)", host, expected[1:1025])


def smoke_matmul(device: str) -> None:
    # Odd sizes: tiles of any width leave a tail.
    _forward_backward(device, torch.matmul, [_data((33, 129), 1), _data((129, 65), 2)], 3, 2e-3, 1e-5)


def smoke_conv2d(device: str) -> None:
    def conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(x, w, b, padding=1)

    inputs = [_data((2, 5, 17, 19), 4), _data((7, 5, 3, 3), 5) / 4, _data((7,), 6)]
    _forward_backward(device, conv, inputs, 7, 2e-3, 1e-5)


def smoke_softmax(device: str) -> None:
    # Rows of 33 and 1025: both end in a partial SIMD group on every GPU width.
    for cols, seed in ((33, 8), (1025, 9)):
        _forward_backward(
            device, lambda x: torch.softmax(x, dim=-1), [_data((6, cols), seed)], seed + 1, 1e-3, 1e-6
        )


def smoke_layer_norm(device: str) -> None:
    def norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)

    inputs = [_data((6, 1025), 11), _data((1025,), 12), _data((1025,), 13)]
    _forward_backward(device, norm, inputs, 14, 1e-3, 1e-5)


def smoke_optimizer_step(device: str) -> None:
    from torch import nn

    params = []
    for where, dtype in ((device, torch.float32), ("cpu", torch.float64)):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(where, dtype)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        x = _data((16, 32), 15).to(dtype).to(where)
        labels = torch.arange(16).remainder(10).to(where)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), labels).backward()
        opt.step()
        params.append([p.detach() for p in model.parameters()])
    for i, (got, ref) in enumerate(zip(*params)):
        _compare(f"parameter {i} after one SGD step", got, ref, 1e-3, 1e-5)


# name -> (function, what it checks); in the order they run.
SMOKE_CHECKS: Dict[str, Tuple[Callable[[str], None], str]] = {
    "allocation": (smoke_allocation, "the first allocation and a scalar"),
    "item": (smoke_item, ".item() of a float, an integer and a bool"),
    "copy_to_device_odd_offset": (smoke_copy_to_device_odd_offset, "host to device from an odd offset"),
    "copy_from_device_odd_offset": (smoke_copy_from_device_odd_offset, "device to host from an odd offset"),
    "matmul": (smoke_matmul, "33x129 @ 129x65, forward and backward"),
    "conv2d": (smoke_conv2d, "3x3 conv, 17x19 px, forward and backward"),
    "softmax": (smoke_softmax, "rows of 33 and 1025, forward and backward"),
    "layer_norm": (smoke_layer_norm, "rows of 1025, forward and backward"),
    "optimizer_step": (smoke_optimizer_step, "one SGD step of a small MLP"),
}


# ---------------------------------------------------------------------------------------
# Workloads to time (run in the worker process)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str  # also the benchmark's kernel name for the same work
    label: str
    setup: Callable[[], _workloads.Setup]  # built lazily: the parent never builds one
    faster_on_gpu: str  # advice when the GPU wins
    faster_on_cpu: str  # advice when the CPU wins


WORKLOADS: Tuple[Workload, ...] = (
    Workload(
        "matmul_NN_1024", "matmul 1024", lambda: _workloads.matmul_setup(1024),
        "large matrix products belong on the GPU", "keep matrix products on the CPU",
    ),
    Workload(
        "matmul_NN_1025", "matmul 1025", lambda: _workloads.matmul_setup(1025),
        "large matrix products belong on the GPU", "keep matrix products on the CPU",
    ),
    Workload(
        "conv2d_3x3_64ch_56px", "conv2d 3x3, 64 channels, 56 px, batch 8",
        lambda: _workloads.conv2d_setup(8, 64, 64, 56, 3, 1),
        "convolutions belong on the GPU", "keep convolutions on the CPU",
    ),
    Workload(
        "small_ops_chain_64x64", "small ops (30 elementwise ops on 64x64)",
        lambda: _workloads.small_ops_setup(64, 10),
        "even small ops gain", "keep small models on the CPU",
    ),
    Workload(
        "train_step_small_cnn_b32", "training step, small CNN, batch 32",
        lambda: _workloads.small_cnn_training_setup(32, 32, 32),
        "train on the GPU", "train small CNNs on the CPU",
    ),
)
_WORKLOAD_BY_NAME = {w.name: w for w in WORKLOADS}


def _time_workload(workload: Workload, device: str, budget_s: float) -> Dict[str, Any]:
    """The workload on the device, on the CPU with one thread, then with all threads."""

    def timed(where: str) -> Dict[str, Any]:
        try:
            fn = workload.setup()(where)
            return _timing.measure_on(fn, where, budget_s).as_dict()
        except Exception as exc:  # noqa: BLE001  # one failed timing must not hide the others
            return {"error": _one_line(exc)}

    record: Dict[str, Any] = {"threads": torch.get_num_threads()}
    record["device"] = timed(device)
    all_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        record["cpu_1_thread"] = timed("cpu")
    finally:
        torch.set_num_threads(all_threads)
    record["cpu_all_threads"] = timed("cpu")
    return record


# ---------------------------------------------------------------------------------------
# The worker: python -m torch.backends.mps._check --worker smoke|timing ...
# ---------------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _emit(record: Dict[str, Any]) -> None:
    sys.stdout.write(_MARK + json.dumps(record) + "\n")
    sys.stdout.flush()


def _worker(kind: str, device: str, names: Sequence[str], budget_s: float) -> int:
    for name in names:
        _emit({"event": "start", "name": name})
        started = time.perf_counter()
        if kind == "smoke":
            try:
                SMOKE_CHECKS[name][0](device)
                _timing.synchronize(device)
                record: Dict[str, Any] = {"status": "pass", "message": ""}
            except _Mismatch as exc:
                record = {"status": "fail", "message": str(exc)}
            except Exception as exc:  # noqa: BLE001  # reported as this check's error
                record = {"status": "error", "message": _one_line(exc)}
        else:
            try:
                record = _time_workload(_WORKLOAD_BY_NAME[name], device, budget_s)
            except Exception as exc:  # noqa: BLE001  # no timing for this one; the others go on
                record = {"message": _one_line(exc)}
        record.update(event="end", name=name, seconds=round(time.perf_counter() - started, 3))
        _emit(record)
    return 0


def _module_name() -> str:
    spec = globals().get("__spec__")
    return spec.name if spec is not None else __name__


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _tail(text: str, lines: int = 6) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)


def _run_workers(
    kind: str,
    device: str,
    names: Sequence[str],
    budget_s: float,
    env: Dict[str, str],
    on_record: Callable[[Dict[str, Any]], None],
) -> List[Dict[str, Any]]:
    """Run ``names`` in worker processes; a worker that dies is replaced for the rest.

    Returns one record per name: the worker's, or one saying that the process died (or hung)
    during that name, or that it failed before its first check.
    """
    timeout = _SMOKE_TIMEOUT_S if kind == "smoke" else _TIMING_TIMEOUT_S
    remaining = list(names)
    records: List[Dict[str, Any]] = []
    while remaining:
        cmd = [
            sys.executable, "-m", _module_name(), "--worker", kind, "--device", device,
            "--only", ",".join(remaining), "--budget", repr(budget_s),
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
            ending = _describe_exit(proc.returncode)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            ending = f"no answer after {timeout} s; stopped"
        started: Optional[str] = None
        for line in stdout.splitlines():
            if not line.startswith(_MARK):
                continue
            record = json.loads(line[len(_MARK):])
            if record["event"] == "start":
                started = record["name"]
            elif record["event"] == "end" and record["name"] in remaining:
                started = None
                remaining.remove(record["name"])
                records.append(record)
                on_record(record)
        if not remaining:
            break
        detail = f"; stderr: {_tail(stderr)}" if stderr.strip() else ""
        if started is None:
            # It never reached a check (an import error, a crash at start-up): another
            # process would fail the same way.
            for name in remaining:
                record = {
                    "event": "end", "name": name, "status": "error",
                    "message": f"the check process ended before this check ({ending}){detail}",
                }  # fmt: skip
                records.append(record)
                on_record(record)
            break
        record = {
            "event": "end", "name": started, "status": "error", "died": True,
            "message": f"the check process died during this check ({ending}){detail}",
        }  # fmt: skip
        remaining.remove(started)
        records.append(record)
        on_record(record)
    return records


# ---------------------------------------------------------------------------------------
# The parent: which device, the result, the verdicts
# ---------------------------------------------------------------------------------------



# --json: compat.json's shape (tests/regress/compat.schema.json) where the two overlap.
FORMAT = "intelmac-torch-check/1"
MESSAGE_LIMIT = 240  # compat.json's longest message


@dataclass
class SmokeResult:
    op: str
    dtype: str
    status: str  # pass, fail or error
    message: str
    seconds: Optional[float] = None


@dataclass
class WorkloadTiming:
    name: str
    label: str
    device: Dict[str, Any]  # a Timing's fields, or {"error": ...}
    cpu_all_threads: Dict[str, Any]
    cpu_1_thread: Dict[str, Any]
    threads: Optional[int]
    speedup_all_threads: Optional[float]  # CPU all threads median / device median
    speedup_1_thread: Optional[float]
    verdict: str


@dataclass
class CheckResult:
    """What ``check()`` found. ``exit_status``: 0 all smoke checks passed, 1 not, 2 unavailable."""

    device: str
    device_name: Optional[str]
    selection: str  # the device chosen and why, in words
    gpu: Optional[Dict[str, Any]]
    macos: Optional[str]
    torch: str
    series_fingerprint: Optional[str]
    status: str  # ok, failed or unavailable
    exit_status: int
    reason: Optional[str]
    results: List[SmokeResult] = field(default_factory=list)
    timings: List[WorkloadTiming] = field(default_factory=list)
    summary: Dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def as_json(self) -> Dict[str, Any]:
        """The result in the shape of the regression suite's compat.json where they overlap:
        ``gpu``, ``macos``, ``torch`` and ``ops`` (one entry per smoke check, group
        ``check``) follow its schema; the timings and verdicts come beside them."""
        wheel_version = _build_info().get("wheel_version")
        return {
            "format": FORMAT,
            "tool": "python -m torch.backends.mps --check",
            "gpu": self.gpu,
            "macos": self.macos,
            "torch": {
                "version": self.torch,
                "patched": True,  # this module exists only in the patched Python layer
                "wheel_version": str(wheel_version) if wheel_version else None,
                "series_fingerprint": self.series_fingerprint,
            },
            "ops": [
                {"group": "check", "op": r.op, "dtype": r.dtype, "status": r.status, "rows": 1,
                 "failed_checks": [] if r.status == "pass" else [r.op],
                 "message": (r.message[:MESSAGE_LIMIT] if r.message else None)}
                for r in self.results
            ],
            "check_seconds": {r.op: r.seconds for r in self.results},
            "device": self.device,
            "device_name": self.device_name,
            "selection": self.selection,
            "status": self.status,
            "exit_status": self.exit_status,
            "reason": self.reason,
            "timings": [asdict(t) for t in self.timings],
            "summary": self.summary,
            "elapsed_s": round(self.elapsed_s, 1),
        }

    def format(self) -> str:
        return format_result(self)

    def __str__(self) -> str:
        return self.format()


def _gpu_word(device: str) -> str:
    return "device (cpu)" if device == "cpu" else "GPU"


def verdict(workload: Workload, speedup: Optional[float], device: str, error: Optional[str]) -> str:
    """One sentence: who is faster than all CPU threads, by how much, and what to do."""
    if speedup is None:
        return f"{workload.label}: no verdict ({error or 'not timed'})"
    gpu = _gpu_word(device)
    if speedup >= 1.1:
        return f"{workload.label}: {gpu} {speedup:.1f}x faster than all CPU threads: {workload.faster_on_gpu}"
    if speedup <= 1 / 1.1:
        return f"{workload.label}: CPU {1 / speedup:.1f}x faster than the {gpu}: {workload.faster_on_cpu}"
    return f"{workload.label}: {gpu} and all CPU threads within 10% ({speedup:.2f}x): no gain either way"


def _ratio(cpu: Dict[str, Any], dev: Dict[str, Any]) -> Optional[float]:
    if "median_s" in cpu and "median_s" in dev and dev["median_s"] > 0:
        return float(cpu["median_s"]) / float(dev["median_s"])
    return None


def timing_from_record(workload: Workload, record: Dict[str, Any], device: str) -> WorkloadTiming:
    dev = record.get("device") or {"error": record.get("message", "not timed")}
    cpu_all = record.get("cpu_all_threads") or {"error": record.get("message", "not timed")}
    cpu_one = record.get("cpu_1_thread") or {"error": record.get("message", "not timed")}
    speed_all, speed_one = _ratio(cpu_all, dev), _ratio(cpu_one, dev)
    error = dev.get("error") or cpu_all.get("error")
    return WorkloadTiming(
        workload.name, workload.label, dev, cpu_all, cpu_one, record.get("threads"),
        speed_all, speed_one, verdict(workload, speed_all, device, error),
    )  # fmt: skip


def summarise(timings: Sequence[WorkloadTiming], device: str) -> Dict[str, Any]:
    """The geometric mean and the worst case of the speedups, against each CPU baseline."""
    out: Dict[str, Any] = {}
    for key, attr in (("cpu_all_threads", "speedup_all_threads"), ("cpu_1_thread", "speedup_1_thread")):
        pairs = [(t.label, getattr(t, attr)) for t in timings if getattr(t, attr) is not None]
        summary = _timing.speedup_summary(pairs, "workload")
        if summary is not None:
            out[key] = summary
    return out


def _speed_words(speedup: float, gpu: str, baseline: str) -> str:
    if speedup >= 1:
        return f"{gpu} {speedup:.1f}x faster than {baseline}"
    return f"{baseline} {1 / speedup:.1f}x faster than the {gpu}"


def summary_lines(summary: Dict[str, Any], device: str) -> List[str]:
    gpu = _gpu_word(device)
    lines = []
    for key, baseline in (("cpu_all_threads", "all CPU threads"), ("cpu_1_thread", "one CPU thread")):
        s = summary.get(key)
        if not s:
            continue
        lines.append(
            f"against {baseline}: geometric mean {_speed_words(s['geomean'], gpu, baseline)}; "
            f"worst case {s['worst_workload']}: {_speed_words(s['worst'], gpu, baseline)} "
            f"(over {s['workloads']} workloads)"
        )
    return lines


def _ms(timing: Dict[str, Any]) -> str:
    if "median_s" not in timing:
        return "error"
    return (
        f"{timing['median_s'] * 1e3:.3f} ms "
        f"({timing['q1_s'] * 1e3:.3f}-{timing['q3_s'] * 1e3:.3f})"
    )


def format_result(result: CheckResult) -> str:
    lines = [f"torch {result.torch}; device {result.device}"]
    lines.append(f"device chosen: {result.selection}")
    if result.status == "unavailable":
        lines.append(f"unavailable: {result.reason}")
        lines.append("Nothing was run (exit status 2).")
        return "\n".join(lines)
    lines += ["", "Does it work? (each check on the device against the CPU in float64)"]
    width = max(len(r.op) for r in result.results) if result.results else 0
    for r in result.results:
        what = SMOKE_CHECKS[r.op][1] if r.op in SMOKE_CHECKS else ""
        detail = r.message or what
        lines.append(f"  {r.status.upper() if r.status != 'pass' else 'pass':5}  {r.op.ljust(width)}  {detail}")
    failed = [r.op for r in result.results if r.status != "pass"]
    lines.append(
        f"  {len(result.results) - len(failed)} of {len(result.results)} pass"
        + (f"; not passing: {', '.join(failed)}" if failed else "")
    )
    if result.timings:
        threads = next((t.threads for t in result.timings if t.threads), None)
        gpu = "GPU" if result.device != "cpu" else "device"
        lines += [
            "",
            f"Is it worth it? (median per call, quartiles in brackets; CPU with "
            f"{threads if threads else '?'} threads and with 1)",
        ]
        rows = [["workload", gpu, "CPU all threads", "CPU 1 thread"]]
        rows += [[t.name, _ms(t.device), _ms(t.cpu_all_threads), _ms(t.cpu_1_thread)] for t in result.timings]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for row in rows:
            lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        lines.append("")
        lines += [f"  {t.verdict}" for t in result.timings]
        lines += [f"  {line}" for line in summary_lines(result.summary, result.device)]
    lines.append("")
    lines.append(
        "Result: every smoke check passed (exit status 0)" if result.ok
        else "Result: a smoke check did not pass (exit status 1)"
    )
    return "\n".join(lines)


def _mps_state() -> Tuple[bool, Optional[str], str, Optional[Dict[str, Any]], Optional[str], Dict[str, str]]:
    """(usable, reason, selection, gpu, name, environment for the workers) of MPS."""
    from . import _device_policy as policy

    env = dict(os.environ)
    built = policy._built_with_mps()
    if not built:
        return False, policy.NOT_BUILT_REASON, "none: this torch has no MPS backend", None, None, env
    # The flag may have been set in Python (torch.backends.mps.allow_intel_gpu = True):
    # the workers are new processes and learn it from the variable.
    allow = policy.get_allow_intel_gpu()
    env[ALLOW_ENV] = "1" if allow else "0"
    import torch.backends.mps as backend

    usable = bool(backend.is_available())
    infos = policy.devices()
    chosen = [d for d in infos if d.selected]
    info = chosen[0] if chosen else (infos[0] if infos else None)
    gpu = None
    if info is not None:
        gpu = {
            "name": info.name,
            "family": family_of(info.name, "mps"),
            "device_type": "mps",
            "name_source": "torch.backends.mps.devices()",
            "low_power": info.low_power,
            "unified_memory": info.unified_memory,
        }
    if not usable or not chosen:
        reason = policy.unavailable_reason() or "MPS is not available (no reason given)"
        return False, reason, "none", gpu, None, env
    d = chosen[0]
    if os.environ.get(DEVICE_ENV):
        why = f"picked by {DEVICE_ENV}={os.environ[DEVICE_ENV]!r}"
    elif d.low_power:
        source = f" ({ALLOW_ENV}={os.environ[ALLOW_ENV]!r})" if os.environ.get(ALLOW_ENV) else ""
        why = f"an integrated GPU, used because allow_intel_gpu is True{source}"
    elif sum(1 for x in infos if x.eligible) > 1:
        why = "the first eligible device in the stable order (external, discrete, then integrated)"
    else:
        why = "the only eligible device"
    others = [f"[{x.index}] {x.name}: {x.skip_reason}" for x in infos if not x.selected]
    selection = f"[{d.index}] {d.name}: {why}" + ("; others: " + "; ".join(others) if others else "")
    return True, None, selection, gpu, d.name, env


def _other_state(device: str) -> Tuple[bool, Optional[str], str, Optional[Dict[str, Any]], Optional[str], Dict[str, str]]:
    env = dict(os.environ)
    if device == "cpu":
        name = platform.processor() or platform.machine() or "cpu"
        return (
            True, None,
            "the CPU itself: a test of the check, which compares the CPU with itself",
            {"name": name, "family": "cpu", "device_type": "cpu", "name_source": "platform.processor()",
             "low_power": None, "unified_memory": None}, name, env,
        )  # fmt: skip
    backend = getattr(torch, device, None)
    is_available = getattr(backend, "is_available", None)
    if not (callable(is_available) and is_available()):
        return False, f"{device.upper()} is not available in this torch or on this host", "none", None, None, env
    index = backend.current_device()
    name = str(backend.get_device_name(index))
    gpu = {"name": name, "family": family_of(name, device), "device_type": device,
           "name_source": f"torch.{device}.get_device_name()", "low_power": None, "unified_memory": None}
    return True, None, f"{device}:{index} {name}: the current {device.upper()} device (not MPS)", gpu, name, env


def _build_info() -> Dict[str, Any]:
    try:
        from . import _device_policy as policy

        return dict(policy.build_info() or {})
    except Exception:  # noqa: BLE001  # a report without build information is still a report
        return {}


def _series_fingerprint() -> Optional[str]:
    value = _build_info().get("series_fingerprint")
    return str(value) if value else None


def check(
    device: str = "mps",
    *,
    timings: bool = True,
    budget_s: float = DEFAULT_BUDGET_S,
    workloads: Optional[Sequence[str]] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> CheckResult:
    r"""Check that ``device`` works and time it against the CPU; returns a :class:`CheckResult`.

    Example::

        >>> result = torch.backends.mps.check()
        >>> result.exit_status, [r.status for r in result.results]
        >>> print(result)             # the report python -m torch.backends.mps --check prints

    ``device`` is ``"mps"`` unless you test the check itself elsewhere (``cuda``, ``xpu``,
    ``cpu``). ``timings=False`` runs the smoke checks only. ``budget_s`` is the seconds of
    timed repeats per workload on the device (half of it on the CPU). ``workloads`` names
    the workloads to time (default: all of ``WORKLOADS``). ``progress`` receives one line
    per finished check.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    chosen = list(workloads) if workloads is not None else [w.name for w in WORKLOADS]
    unknown = [n for n in chosen if n not in _WORKLOAD_BY_NAME]
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; known: {', '.join(_WORKLOAD_BY_NAME)}")
    say = progress or (lambda line: None)
    started = time.perf_counter()
    usable, reason, selection, gpu, name, env = (
        _mps_state() if device == "mps" else _other_state(device)
    )
    result = CheckResult(
        device=device,
        device_name=name,
        selection=selection,
        gpu=gpu,
        macos=platform.mac_ver()[0] or None,
        torch=str(getattr(torch, "__version__", "unknown")),
        series_fingerprint=_series_fingerprint(),
        status="unavailable",
        exit_status=2,
        reason=reason,
    )
    if not usable:
        result.elapsed_s = time.perf_counter() - started
        return result
    say(f"device chosen: {selection}")

    def smoke_done(record: Dict[str, Any]) -> None:
        say(f"  {record['status']:5}  {record['name']}" + (f": {record['message']}" if record["message"] else ""))

    records = _run_workers("smoke", device, list(SMOKE_CHECKS), budget_s, env, smoke_done)
    by_name = {r["name"]: r for r in records}
    result.results = [
        SmokeResult(n, "float32", by_name[n]["status"], by_name[n]["message"], by_name[n].get("seconds"))
        for n in SMOKE_CHECKS
    ]
    passed = all(r.status == "pass" for r in result.results)
    result.status, result.exit_status = ("ok", 0) if passed else ("failed", 1)
    if timings:

        def timing_done(record: Dict[str, Any]) -> None:
            t = timing_from_record(_WORKLOAD_BY_NAME[record["name"]], record, device)
            say(f"  timed  {t.verdict}")

        say("timing (median of repeats on the device, then the CPU with 1 and all threads)")
        timed = _run_workers("timing", device, chosen, budget_s, env, timing_done)
        by_name = {r["name"]: r for r in timed}
        result.timings = [
            timing_from_record(_WORKLOAD_BY_NAME[n], by_name[n], device) for n in chosen
        ]
        result.summary = summarise(result.timings, device)
    result.elapsed_s = time.perf_counter() - started
    return result


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``--check`` (shared with ``python -m torch.backends.mps``)."""
    parser.add_argument(
        "--device", choices=DEVICES, default="mps",
        help="with --check: the device to check (default mps; the others test the check itself)",
    )  # fmt: skip
    parser.add_argument(
        "--no-timings", action="store_true", help="with --check: smoke checks only, no timings"
    )
    parser.add_argument(
        "--budget", type=float, default=DEFAULT_BUDGET_S, metavar="SECONDS",
        help=f"with --check: seconds of timed repeats per workload on the device, half on the "
        f"CPU (default {DEFAULT_BUDGET_S})",
    )  # fmt: skip
    parser.add_argument(
        "--workloads", default=None, metavar="NAME,...",
        help="with --check: time only these workloads (default: "
        + ",".join(w.name for w in WORKLOADS) + ")",
    )  # fmt: skip


def run_cli(args: argparse.Namespace) -> int:
    """``--check`` with parsed options: the report (or JSON) on stdout, progress on stderr."""
    if args.budget <= 0:
        print("--budget must be a positive number of seconds", file=sys.stderr)
        return 2
    workloads = None
    if args.workloads is not None:
        workloads = [n for n in args.workloads.split(",") if n]
        unknown = [n for n in workloads if n not in _WORKLOAD_BY_NAME]
        if unknown:
            print(
                f"--workloads: unknown {unknown}; choose from {','.join(_WORKLOAD_BY_NAME)}",
                file=sys.stderr,
            )
            return 2

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result = check(
        args.device,
        timings=not args.no_timings,
        budget_s=args.budget,
        workloads=workloads,
        progress=progress,
    )
    if args.json:
        print(json.dumps(result.as_json(), indent=2))
    else:
        print(result.format())
    return result.exit_status


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m torch.backends.mps._check``: the worker, or ``--check`` on its own."""
    parser = argparse.ArgumentParser(prog="python -m torch.backends.mps --check")
    parser.add_argument("--worker", choices=("smoke", "timing"), help=argparse.SUPPRESS)
    parser.add_argument("--only", default="", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.worker:
        names = [n for n in args.only.split(",") if n]
        known = SMOKE_CHECKS if args.worker == "smoke" else _WORKLOAD_BY_NAME
        unknown = [n for n in names if n not in known]
        if unknown:
            parser.error(f"unknown {args.worker} names {unknown}")
        return _worker(args.worker, args.device, names, args.budget)
    return run_cli(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
