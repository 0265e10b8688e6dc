"""python -m tests.regress --device D --out DIR [--quick] [--self-test] [--ops OP ...]

Each group (OpInfo parity, shapes, the public reports' cases, memory paths, training smoke,
patched-build checks) runs in its own subprocess and writes each row as it finishes: a
process abort (a Metal validation failure aborts) is recorded as that group's failure, with
its stderr; the check it was in becomes an error row, the rows finished before it stay, and
the rest of the report survives.
Every run also writes compat.json and compat.md, the small report to share (_compat.py).

A check that never returns (a GPU that deadlocks or times out) is stopped: once a group's
process has started up (imported, loaded its tables, reached the device), silence longer than
--check-timeout is a hang, wherever it falls: in a check, in the group's set-up, between
checks. The parent ends the process, names what was running (the check, with its op, dtype
and input; a set-up step; else the Python stack), and starts the group again after it. What
hung is not run again in this run: the later rows of the same op read `not run: hung earlier
in this run`. Start-up alone has the longer STARTUP_TIMEOUT; a start-up that never ends stops
the run's later groups (the device did not answer). SIGINT (Ctrl-C), SIGTERM and SIGHUP stop
the group in progress and still write the report of what finished.

Exit codes: 0 no unexpected failure (with a planted fault: it was caught and nothing else
failed); 1 unexpected failure(s); 2 the device cannot be used; 3 a planted fault was not
caught (the suite itself is broken); 128 + the signal's number when stopped by a signal (130
SIGINT, 143 SIGTERM, 129 SIGHUP), the report holds what finished.
"""

from __future__ import annotations

import argparse
import datetime as dt
import faulthandler
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import (
    _compat,
    _faults,
    _grid,
    _kernels,
    _known,
    _memory,
    _ops,
    _parity,
    _patched,
    _report,
    _reports,
    _sampling,
    _shapes,
    _soak,
    _stream,
    _training,
    _vision,
    _workloads,
)
from ._device import (
    DEVICE_TYPES,
    describe,
    dtype_supported,
    first_contact,
    host_info,
    resolve_device,
    torch_info,
    unavailable_reason,
)

UNEXPECTED = ("fail", "error", "hang", "gpu-error")
GROUPS = ("parity", "shapes", "grid", "reports", "sampling", "memory", "training", "workloads", "patched", "kernels", "soak")
# The report section each group's rows go to (the parity group's are "results").
SECTIONS = {
    "parity": "results", "shapes": "shapes", "reports": "reports", "sampling": "sampling",
    "memory": "memory", "training": "training", "patched": "patched", "kernels": "kernels",
    "workloads": "workloads", "grid": "grid", "soak": "soak",
}  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]
EXIT_FAULT_MISSED = 3
EXIT_INTERRUPTED = 128  # + the signal's number
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_ORPHANED = 125  # a group's process whose parent is gone
# The deadline of one check: an Intel UHD 630 compiling its first kernels and running the
# largest cases of the shapes group needs tens of seconds; a check silent for 5 minutes is
# taken as hung. A real hang costs this much once per hung check.
DEFAULT_CHECK_TIMEOUT = 300.0
# A group's start-up (the interpreter, importing torch and the suite, loading OpInfo's
# database, the first device contact: _startup) has this deadline, or --check-timeout when
# that is longer. Each group's record keeps its `startup_seconds`; measured figures are in
# docs/regression-and-benchmark.md ("Hangs"): tens of seconds at most on a loaded 2-core
# runner. A busy laptop compiling its first Metal kernels takes longer, hence the wide margin.
# After start-up, --check-timeout is the deadline everywhere.
STARTUP_TIMEOUT = 600.0
MAX_HANGS = 3  # per group; after that the GPU is taken as wedged and the group stops
POLL_SECONDS = 0.2
STACK_WAIT = 1.0  # seconds a hung process gets to write its Python stack (faulthandler)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tests.regress",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--device",
        choices=DEVICE_TYPES,
        default=None,
        help="device under test (default: mps when available, else cuda, xpu, cpu)",
    )
    p.add_argument("--out", type=Path, default=Path("reports/regress"), help="folder for the JSON and Markdown reports (default: reports/regress)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="small CPU-friendly subset (CI): a few ops per family, 2 samples, short training",
    )
    p.add_argument(
        "--self-test",
        action="store_true",
        help="plant a fault (1e-2 relative noise on the device's torch.add output); "
        "the suite must report it (also: INTELMAC_REGRESS_PLANT_FAULT=op[:rel])",
    )
    p.add_argument(
        "--ops",
        nargs="+",
        default=None,
        metavar="OP",
        help="only these OpInfo names (e.g. mm nn.functional.conv1d)",
    )
    p.add_argument(
        "--dtypes",
        nargs="+",
        default=None,
        choices=list(_parity.DTYPE_NAMES.values()),
        help="dtypes to compare (default: float32 float16 bfloat16 int32 int64 uint8 bool; "
        "float32 float16 int32 with --quick); integer dtypes run the integer ops "
        "(tests/regress/_ops.py, INTEGER)",
    )
    p.add_argument("--samples", type=int, default=None, help="OpInfo samples per op and dtype")
    p.add_argument(
        "--train-steps",
        type=int,
        default=None,
        help="optimizer steps of each training smoke model (default: 20; 6 with --quick)",
    )
    p.add_argument("--no-parity", action="store_true", help="skip the op parity checks")
    p.add_argument(
        "--no-shapes",
        action="store_true",
        help="skip the shapes group (boundary sizes 31/32/33 .. 65535/65536/65537 against float64)",
    )
    p.add_argument(
        "--shapes-ops",
        nargs="+",
        default=None,
        choices=list(_shapes.OPS),
        metavar="OP",
        help="only these ops in the shapes group (e.g. sum softmax)",
    )
    p.add_argument(
        "--no-grid",
        action="store_true",
        help="skip the regime grid (every op at the sizes, values, arguments and layouts where "
        "GPU kernels change path; tests/regress/_grid.py)",
    )
    p.add_argument(
        "--grid-ops",
        nargs="+",
        default=None,
        choices=[op.name for op in _grid.OPS],
        metavar="OP",
        help="only these ops in the regime grid (parity names, e.g. index_select amax)",
    )
    p.add_argument(
        "--soak",
        type=float,
        default=None,
        metavar="MINUTES",
        help="also train a small CNN on the device for MINUTES, failing on a GPU error, a NaN "
        "loss or a stall (a step 20x the median); opt-in (pytorch 125954: a GPU timeout "
        "after 11,580 steps)",
    )
    p.add_argument(
        "--no-reports",
        action="store_true",
        help="skip the reports group (the public Intel/AMD bug reports' own shapes and values; "
        "tests/regress/known_gpu_bugs.yaml)",
    )
    p.add_argument(
        "--no-vision",
        action="store_true",
        help="skip torchvision's MPS ops (checked with the op parity when torchvision is installed)",
    )
    p.add_argument(
        "--no-sampling",
        action="store_true",
        help="skip the random-sampling checks (multinomial, randint, rand, randn, normal_, bernoulli)",
    )
    p.add_argument(
        "--no-kernels",
        action="store_true",
        help="skip the kernel compile probe (a pipeline for every bundled Metal function; mps only)",
    )
    p.add_argument("--no-training", action="store_true", help="skip the training smoke")
    p.add_argument(
        "--no-workloads",
        action="store_true",
        help="skip the workloads group (LLM prompt and generation, a diffusion UNet block, a "
        "Whisper-like speech encoder, CNN training, each against the CPU)",
    )
    p.add_argument("--no-patched", action="store_true", help="skip the patched-build checks")
    p.add_argument("--no-memory", action="store_true", help="skip the memory-path checks")
    p.add_argument(
        "--memory-fraction",
        type=float,
        default=0.6,
        help="allocate up to this fraction of the device's recommended working set (default 0.6)",
    )
    p.add_argument(
        "--memory-bytes",
        type=int,
        default=None,
        help="allocation budget in bytes instead of --memory-fraction (needed on the CPU)",
    )
    p.add_argument(
        "--check-timeout",
        type=float,
        default=DEFAULT_CHECK_TIMEOUT,
        metavar="SECONDS",
        help=f"a group that writes no result for this long is taken as hung in its current "
        f"check: that check becomes a `hang` row and the group goes on after it (default "
        f"{DEFAULT_CHECK_TIMEOUT:g}, for a slow integrated GPU; test tool: "
        f"{_faults.HANG_ENV}=OP)",
    )
    # Internal: run one group in this process and write its results to a file.
    p.add_argument("--worker", choices=GROUPS, default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--skip-checks", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--run-hangs", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--known-failures",
        type=Path,
        default=_known.KNOWN_FILE,
        help="known-failures file (default: tests/regress/known_failures.yaml)",
    )
    p.add_argument(
        "--strict-xpass",
        action="store_true",
        help="also exit 1 when a known failure passes (default: report it only)",
    )
    return p.parse_args(argv)


def _configure_precision(device: str) -> None:
    # The suite checks float32 arithmetic: TF32 would be a (legitimate) precision mode, not a
    # bug, so it is switched off. This must happen before OpInfo's import, which freezes the
    # cudnn flags (torch.backends.disable_global_flags).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # TORCH_WARN_ONCE would report only the first op that uses the MPS CPU fallback.
    torch.set_warn_always(True)


def _configure_threads(device: str) -> None:
    """With the CPU as the device, one intra-op thread (unless OMP_NUM_THREADS says otherwise).
    Both sides of every comparison then run on the CPU of a run that only checks the suite, of
    small tensors mostly, and on a busy machine two spinning OpenMP threads that wait on each
    other's time slices made the quick run three times slower (docs/regression-and-benchmark.md,
    "How long it takes"). A GPU run keeps every thread for its CPU references."""
    if device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


def _planted(args: argparse.Namespace) -> list[_parity.PlantedFault]:
    faults = [_parity.PlantedFault()] if args.self_test else []
    # A kernel fault changes no output here: its catcher row must fail by itself.
    kernel = [
        _parity.PlantedFault(c, 0.0, "kernel") for n in _faults.from_env() for c in _faults.FAULTS[n].catchers
    ]
    return faults + _parity.fault_from_env() + kernel


def _wanted_dtypes(args: argparse.Namespace) -> list[str]:
    if args.dtypes:
        return list(args.dtypes)
    return ["float32", "float16", "int32"] if args.quick else list(_parity.DTYPE_NAMES.values())


def _parity_group(args: argparse.Namespace, device: str, stream: _stream.RowStream) -> None:
    samples = args.samples or (2 if args.quick else 8)
    stream.meta("samples", samples)
    ops = args.ops or (list(_ops.QUICK) if args.quick else _ops.all_ops())
    wanted = _wanted_dtypes(args)
    dtypes = [d for d, n in _parity.DTYPE_NAMES.items() if n in wanted]
    runner = _parity.ParityRunner(
        device,
        _parity.load_tolerances(),
        samples,
        tuple(_planted(args)),
        op_db_index=_parity.opinfo_index(_parity.import_op_db()),
        progress=stream.at,
    )
    print(f"regress: {len(ops)} ops x {[_parity.DTYPE_NAMES[d] for d in dtypes]}", flush=True)
    dtype_notes: dict[str, str] = {}
    for dtype in dtypes:
        dname = _parity.DTYPE_NAMES[dtype]
        ok, why = dtype_supported(device, dtype)
        if not ok:
            # One result for the whole dtype: listing 95 identical "unsupported" lines says less.
            dtype_notes[dname] = why
            stream.meta("dtype_notes", dtype_notes)
            stream.row("results", _parity.Result(
                "*", "*", dname, "forward", "unsupported", detail=f"device probe: {why}"
            ).as_dict())  # fmt: skip
            continue
        for op in _ops.ops_for(dtype.is_floating_point, args.ops, args.quick):
            family = _ops.FAMILY_OF[op]
            if not stream.begin("results", _parity.Result(op, family, dname, "forward", "error").as_dict()):
                continue  # an earlier attempt of this group began it (hung there)
            try:
                rows = runner.run_op(op, family, dtype)
            except Exception as exc:  # noqa: BLE001  # the check's own code: still this op's row
                rows = [_parity.Result(op, family, dname, "forward", "error",
                                       detail=f"check raised {_parity._short(exc)}")]  # fmt: skip
            for res in rows:
                stream.row("results", res.as_dict())
    if not args.no_vision:
        _vision.run(device, _planted(args), stream)


def _shapes_group(args: argparse.Namespace, device: str, stream: _stream.RowStream) -> None:
    wanted = _wanted_dtypes(args)
    budget, where = _memory.budget_bytes(device, args.memory_bytes, args.memory_fraction)
    stream.meta("shapes_budget", where)
    ops = tuple(args.shapes_ops) if args.shapes_ops else None
    _shapes.run(device, args.quick, wanted, budget, stream, ops=ops)


def _grid_group(args: argparse.Namespace, device: str, stream: _stream.RowStream) -> None:
    budget, where = _memory.budget_bytes(device, args.memory_bytes, args.memory_fraction)
    stream.meta("grid_budget", where)
    ops = tuple(args.grid_ops) if args.grid_ops else None
    dtypes = tuple(args.dtypes) if args.dtypes else None
    _grid.run(device, args.quick, budget, stream, ops=ops, dtypes=dtypes)


def _run_group_here(
    name: str, args: argparse.Namespace, device: str, stream: _stream.RowStream
) -> None:
    """One group, in this process (the worker); its rows go to `stream` as they finish."""
    if _stream.abort_plan(name)[0]:
        _stream.planted_abort(f"in group {name}")
    _faults.install_from_env(name, device)
    _faults.install_hang_from_env(device)
    if name == "parity":
        _parity_group(args, device, stream)
    elif name == "shapes":
        _shapes_group(args, device, stream)
    elif name == "grid":
        _grid_group(args, device, stream)
    elif name == "soak":
        _soak.run(device, float(args.soak), stream, tuple(f for f in _planted(args) if f.op == _soak.OP))
    elif name == "reports":
        _reports.run(device, tuple(f for f in _planted(args) if f.op.startswith(_reports.PREFIX)), stream)
    elif name == "sampling":
        _sampling.run(device, stream)
    elif name == "kernels":
        _kernels.run(device, stream)
    elif name == "memory":
        _memory.run(
            device,
            tuple(f for f in _planted(args) if f.memory),
            args.memory_bytes,
            args.memory_fraction,
            stream=stream,
        )
    elif name == "training":
        steps = args.train_steps or (6 if args.quick else 20)
        repeats = 0 if args.quick else _training.REPEATS
        faults = tuple(f for f in _planted(args) if f.op in _training.MODELS)
        for tr in _training.run(device, steps, _parity.training_tolerance(), stream=stream,
                                repeats=repeats, faults=faults):  # fmt: skip
            print(
                f"regress: training {tr.model}: {tr.status} (max |loss diff| {tr.max_abs_diff:.2e})",
                flush=True,
            )
    elif name == "workloads":
        faults = tuple(f for f in _planted(args) if f.op.startswith(_workloads.PREFIX))
        _workloads.run(device, args.quick, faults, stream)
    else:
        for check in _patched.run_checks():
            stream.row("patched", check.as_dict())
    if _faults.FIRED:
        stream.meta("fault_fired", dict(_faults.FIRED))


def _tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def _in_flight_row(section: str, row: dict[str, Any], how: str) -> dict[str, Any]:
    row = dict(row)
    row["status"] = "error"
    row["detail"] = f"{how} during this check"
    return row


class StopRequest:
    """The run's stop signals. The first SIGINT, SIGTERM or SIGHUP asks for a stop: the group
    in progress is ended, the finished rows are kept, the check in progress is named, and the
    report is written (exit 128 + the signal's number). A second one ends the suite at once,
    as the signal does by default."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signum = signum  # polled by _attempt and the group loop; nothing raised here

    @property
    def name(self) -> str:
        if self.signum is None:
            return ""
        return signal.Signals(self.signum).name


@dataclass
class RunState:
    """What every group of one run shares: what hung so far, whether the planted hang
    (INTELMAC_REGRESS_PLANT_HANG, one per run) is still to fire, the group whose start-up
    never ended, and the stop signals."""

    stop: StopRequest = field(default_factory=StopRequest)
    hangs: _stream.RunHangs = field(default_factory=_stream.RunHangs)
    plant_armed: bool = True
    startup_hung: str | None = None
    # The (op, at) of each row the planted hang made: its process wrote HANG_MARK. Any other
    # hang of the run is a real one, reported as such.
    planted: set[tuple[str, str]] = field(default_factory=set)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a group's process and everything it started (its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _python_stack(proc: subprocess.Popen[bytes], path: Path) -> str:
    """The hung process's Python stack (faulthandler, registered by _worker), innermost
    first; "" when it wrote none in time."""
    try:
        os.kill(proc.pid, signal.SIGUSR1)
    except ProcessLookupError:
        return ""
    deadline = time.monotonic() + STACK_WAIT
    while time.monotonic() < deadline:
        time.sleep(0.1)
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        if "most recent call first" in text and text.endswith("\n"):
            time.sleep(0.1)  # the other threads' stacks
            return path.read_text(encoding="utf-8", errors="replace")
    return ""


QUOTE = '"'


def _innermost(stack: str, frames: int = 3) -> str:
    """The suite's innermost frames in the thread running the group (the one in
    _run_group_here), as "_device.py:262 dtype_supported <- ..."."""
    for block in stack.split("\n\n"):
        if "_run_group_here" not in block:
            continue
        ours = []
        for line in block.splitlines():
            path, _, rest = line.strip().removeprefix("File ").partition(", line ")
            if "/tests/regress/" in path:
                number, _, func = rest.partition(" in ")
                ours.append(f"{Path(path.strip(QUOTE)).name}:{number} {func}")
        return " <- ".join(ours[:frames])
    return ""


@dataclass
class Attempt:
    """How one process of a group ended: its return code; `stopped` "" (by itself), "hang"
    (silent past --check-timeout after start-up), "startup" (start-up past its deadline) or
    "interrupt" (a stop signal); its start-up time; the Python stack of a hang."""

    returncode: int
    stopped: str = ""
    startup_seconds: float | None = None
    stack: str = ""


def _attempt(
    cmd: list[str], env: dict[str, str], out: Path, err: Path, timeout: float, stop: StopRequest
) -> Attempt:
    """Run one process of a group until it ends, hangs, or a stop signal comes.

    Until the worker says start-up is over, the deadline is STARTUP_TIMEOUT (or `timeout`
    when longer) from the process's start; after it, `timeout` seconds without a new line in
    the group's file is a hang, in a check or not: each check begins, notes its samples and
    ends with a line, and set-up work on the device is a step with a line of its own."""
    if stop.signum is not None:
        return Attempt(0, "interrupt")
    watch = _stream.Watch(out)
    stack_path = out.with_name("stack")
    with err.open("ab") as err_fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=err_fh, start_new_session=True)
        started = last_change = time.monotonic()
        startup: float | None = None
        try:
            while True:
                try:
                    return Attempt(proc.wait(timeout=POLL_SECONDS), "", startup)
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if stop.signum is not None:
                    _stop(proc)
                    return Attempt(proc.returncode, "interrupt", startup)
                if watch.grew():
                    last_change = now
                    if watch.ready and startup is None:
                        startup = round(now - started, 2)
                elif not watch.ready and now - started > max(timeout, STARTUP_TIMEOUT):
                    _stop(proc)
                    return Attempt(proc.returncode, "startup")
                elif watch.ready and now - last_change > timeout:
                    stack = _python_stack(proc, stack_path)
                    _stop(proc)
                    return Attempt(proc.returncode, "hang", startup, stack)
        except KeyboardInterrupt:  # a SIGINT before StopRequest.install (tests call run_group)
            _stop(proc)
            return Attempt(proc.returncode, "interrupt", startup)


def _hang_row(row: dict[str, Any], at: str, timeout: float, stack: str = "") -> dict[str, Any]:
    row = dict(row)
    row["status"] = "hang"
    row["at"] = at
    row["detail"] = (
        f"no result within {timeout:g} s (--check-timeout)"
        + (f"; hung at {at}" if at else "")
        + "; the group's process was stopped and the group went on after this check"
        + (f"; Python stack: {stack}" if stack else "")
    )
    return row


def _where(name: str, row: dict[str, Any]) -> str:
    """Where a check hung, for the later rows of its op: "group parity, argmax float32"."""
    what = " ".join(str(x) for x in (_stream.row_name(row), row.get("dtype", ""), row.get("case", "")) if x)
    return f"group {name}, {what}"


def run_group(
    name: str, argv: list[str], device: str, timeout: float = DEFAULT_CHECK_TIMEOUT,
    run: RunState | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """Run one group in a subprocess; its rows (as many as it finished) and a record of how
    the process ended. A check or set-up step silent past `timeout` becomes a hang (a row, or
    the record's `setup_hangs`), is added to `run.hangs`, and the group starts again after it
    (at most MAX_HANGS times); a hang between checks that names nothing ends the group. A
    stop signal gives the record status "interrupted"."""
    run = run or RunState()
    with tempfile.TemporaryDirectory(prefix=f"regress-{name}-") as tmp:
        out, err, skip = Path(tmp) / "group.jsonl", Path(tmp) / "stderr", Path(tmp) / "skip.json"
        state = Path(tmp) / "hangs.json"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "tests.regress", *argv, "--device", device,
               "--worker", name, "--worker-out", str(out), "--run-hangs", str(state)]  # fmt: skip
        t0 = time.perf_counter()
        hangs: list[str] = []
        setup_hangs: list[dict[str, str]] = []
        startups: list[float] = []
        between = ""
        while True:
            if not run.plant_armed:
                env.pop(_faults.HANG_ENV, None)  # the planted hang is spent (one per run)
            state.write_text(json.dumps(run.hangs.as_dict()), encoding="utf-8")
            err_before = err.stat().st_size if err.exists() else 0
            att = _attempt(cmd, env, out, err, timeout, run.stop)
            if att.startup_seconds is not None:
                startups.append(att.startup_seconds)
            finished = _stream.read(out)
            if att.stopped != "hang":
                break
            planted = run.plant_armed and _faults.HANG_MARK in err.read_bytes()[err_before:].decode(
                "utf-8", errors="replace")
            run.plant_armed = False
            # What was running: a set-up step, a check (or both: a step inside a check).
            if finished.step is not None:
                note = (f"no output within {timeout:g} s (--check-timeout) in set-up step "
                        f"'{finished.step}'; not run again in this run")  # fmt: skip
                setup_hangs.append({"step": finished.step, "detail": note, "stack": _innermost(att.stack)})
                if planted:
                    run.planted.add((f"set-up: {finished.step}", ""))
                run.hangs.steps[finished.step] = f"group {name}"
            if finished.in_flight is not None:
                section, row = finished.in_flight
                hung = _hang_row(row, finished.at, timeout, _innermost(att.stack))
                if planted:
                    run.planted.add((_stream.row_name(hung), str(hung.get("at") or "")))
                hangs.append(_stream.row_name(row))
                run.hangs.ops.setdefault(_stream.op_key(_stream.row_name(row)), _where(name, row))
                with out.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"section": section, "row": hung}, default=str) + "\n")
                print(f"regress: group {name}: {hangs[-1]} {hung.get('dtype', '')} "
                      f"{hung.get('case', '')}: hang: {hung['detail']}", file=sys.stderr, flush=True)  # fmt: skip
            elif finished.step is None:
                # Nothing named: the Python stack says where. Started again, the group would
                # run the same code again; it ends here instead (one timeout).
                inner = _innermost(att.stack)
                if planted:
                    run.planted.add((f"group {name}", ""))
                between = (f"no output within {timeout:g} s (--check-timeout) between checks"
                           + (f", after {finished.last_row}" if finished.last_row else ", before any check")
                           + (f"; Python stack: {inner}" if inner else ""))  # fmt: skip
                break
            else:
                print(f"regress: group {name}: hang: {setup_hangs[-1]['detail']}", file=sys.stderr, flush=True)
            if len(hangs) + len(setup_hangs) >= MAX_HANGS:
                break
            # A new process of the group skips every check begun so far.
            skip.write_text(json.dumps(finished.begun), encoding="utf-8")
            if "--skip-checks" not in cmd:
                cmd += ["--skip-checks", str(skip)]
        finished = _stream.read(out)  # with the hang rows written above
        seconds = time.perf_counter() - t0
        stderr = err.read_text(encoding="utf-8", errors="replace") if err.exists() else ""
    if stderr:
        sys.stderr.write(stderr)
    named = [f"check {h}" for h in hangs] + [f"set-up step '{h['step']}'" for h in setup_hangs]
    record: dict[str, Any] = {
        "status": "hang" if named else "ok",
        "returncode": att.returncode,
        "seconds": round(seconds, 2),
        "startup_seconds": startups,
        "threads": finished.meta.get("threads"),
        "detail": f"{len(named)} hang(s), each stopped and not run again: {', '.join(named)}" if named else "",
        "hangs": hangs,
        "setup_hangs": setup_hangs,
        "rows_kept": finished.rows,
        "stderr_tail": _tail(stderr),
    }
    how = ""
    if att.stopped == "interrupt":
        how = f"interrupted ({run.stop.name or 'SIGINT'})"
        record["status"] = "interrupted"
    elif att.stopped == "startup":
        how = (f"start-up (importing, loading, the first device contact) did not end within "
               f"{max(timeout, STARTUP_TIMEOUT):g} s: the device did not answer")  # fmt: skip
        record["status"] = "hang"
        record["startup_hang"] = how
        run.startup_hung = name
        run.plant_armed = False
    elif att.stopped == "hang" and between:
        how = between
        record["status"] = "hang"
        record["between_checks"] = between
    elif att.stopped == "hang":
        how = f"no result for {timeout:g} s (--check-timeout) after {len(named)} hang(s): the GPU may be wedged"
    elif att.returncode < 0:
        try:
            sig = signal.Signals(-att.returncode).name
        except ValueError:
            sig = f"signal {-att.returncode}"
        how = f"the group's process ended by {sig}"
    elif att.returncode != 0 or not finished.done:
        crash = finished.meta.get("crash")
        how = f"the group's process exited {att.returncode}" + (f" ({crash})" if crash else "")
    if att.stack:
        record["stack"] = _tail(att.stack, 3000)
    if how:
        if record["status"] not in ("interrupted", "hang"):
            record["status"] = "error"
        kept = f"{finished.rows} finished row(s) kept"
        if finished.in_flight is not None:
            section, row = finished.in_flight
            bad = _in_flight_row(section, row, how)
            finished.sections.setdefault(section, []).append(bad)
            kept += f"; the check in progress ({_stream.row_name(row)}) is an error row"
        record["detail"] = "; ".join(
            x for x in (record["detail"], f"{how}; {kept}; the checks not yet started are lost") if x
        )
        print(f"regress: group {name}: {record['detail']}", file=sys.stderr, flush=True)
    payload: dict[str, Any] = dict(finished.sections)
    payload["meta"] = finished.meta
    return payload, record


def _end_with_parent() -> None:
    """A group's process runs in a session of its own (so that a hang is stopped with all it
    started): when its parent is gone (killed, or a crash in the suite), it ends too, instead
    of hanging on in a check that never returns."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


def _startup(name: str, args: argparse.Namespace, device: str) -> None:
    """What a group needs before its first check, under the start-up deadline: its tables
    (OpInfo's database, torchvision) and the first device contact."""
    if name == "parity":
        t0 = time.perf_counter()
        _parity.import_op_db()
        print(f"regress: OpInfo database loaded in {time.perf_counter() - t0:.1f}s", flush=True)
        if not args.no_vision:
            _vision.skip_reason()  # imports torchvision when it is there
    first_contact(device)


def _worker(args: argparse.Namespace, device: str) -> int:
    t0 = time.perf_counter()
    _end_with_parent()
    _configure_precision(device)
    assert args.worker_out is not None
    # On a hang the parent asks for the Python stack (SIGUSR1) before it ends the process.
    stack_fh = args.worker_out.with_name("stack").open("w", encoding="utf-8")
    faulthandler.register(signal.SIGUSR1, file=stack_fh, all_threads=True)
    skip = frozenset(json.loads(args.skip_checks.read_text(encoding="utf-8"))) if args.skip_checks else frozenset()
    stream = _stream.RowStream(args.worker_out, args.worker, skip, _stream.RunHangs.load(args.run_hangs))
    _stream.ACTIVE = stream
    try:
        _startup(args.worker, args, device)
        stream.meta("threads", torch.get_num_threads())
        stream.ready(time.perf_counter() - t0)
        _run_group_here(args.worker, args, device, stream)
    except Exception as exc:  # noqa: BLE001  # the rows already written stay; say what broke
        import traceback

        traceback.print_exc()
        stream.meta("crash", _parity._short(exc))
        stream.close()
        return 1
    stream.meta("done", True)
    stream.close()
    return 0


def _self_test(
    faults: list[_parity.PlantedFault], rows: list[dict[str, Any]]
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Which planted faults were caught, and the unexpected rows that are not theirs."""
    if not faults:
        return None, rows
    theirs = [r for r in rows if any(f.targets(r["op"]) for f in faults)]
    caught_faults = [f for f in faults if any(f.targets(r["op"]) for r in theirs)]
    record = {
        "planted": [f.as_dict() for f in faults],
        "planted_op": faults[0].op,
        "relative_noise": faults[0].relative,
        "caught": len(caught_faults) == len(faults),
        "missed": [f.op for f in faults if f not in caught_faults],
        "caught_in": [
            f"memory/{r['op'][len(_parity.MEMORY_PREFIX):]}"
            if r["op"].startswith(_parity.MEMORY_PREFIX)
            else f"{r['dtype']}/{r['check']}"
            for r in theirs
        ],
    }
    return record, [r for r in rows if r not in theirs]


def _planted_hang(
    op: str | None, self_test: dict[str, Any] | None, rows: list[dict[str, Any]],
    planted: set[tuple[str, str]],
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """With INTELMAC_REGRESS_PLANT_HANG, the hang rows the plant made (`planted`, their
    (op, at): RunState.planted) are the fault's: caught when there is one (whichever check
    first called the op). Every other hang row stays unexpected: a real hang is never
    counted as the plant."""
    if op is None:
        return self_test, rows
    hung = [r for r in rows if r["status"] == "hang"
            and (str(r.get("op", "")), str(r.get("at") or "")) in planted]
    record = self_test or {"planted": [], "planted_op": f"hang:{op}", "relative_noise": 0.0,
                           "caught": True, "missed": [], "caught_in": []}  # fmt: skip
    record["planted"].append({"op": op, "relative": 0.0, "mode": "hang"})
    record["caught_in"] += [
        f"hang: {r['op']} {r['dtype']} {r.get('case') or r.get('at') or ''}".strip() for r in hung
    ]
    if not hung:
        record["caught"] = False
        record["missed"].append(f"hang:{op}")
    return record, [r for r in rows if r not in hung]


def _hangs_outside_checks(groups: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A row for each hang that no check's row holds: in a set-up step, between checks, in
    start-up."""
    rows = [
        {"op": f"set-up: {h['step']}", "check": "set-up", "dtype": "-", "status": "hang",
         "group": name, "detail": h["detail"] + (f"; Python stack: {h['stack']}" if h.get("stack") else "")}
        for name, g in groups.items()
        for h in g.get("setup_hangs", [])
    ]  # fmt: skip
    for name, g in groups.items():
        if g.get("between_checks") or g.get("startup_hang"):
            where = "between checks" if g.get("between_checks") else "start-up"
            rows.append({"op": f"group {name}", "check": where, "dtype": "-", "status": "hang",
                         "group": name, "detail": g["detail"]})  # fmt: skip
    return rows


def _write(path: Path, text: str) -> None:
    """Whole or not at all: a second stop signal while the report is written (it ends the
    suite at once) leaves the earlier file, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _count(rows: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def ops_summary(results: list[dict[str, Any]]) -> tuple[int, list[str], list[str]]:
    """Ops checked, ops passing (every row of the op passes), ops failing (any row fails or
    errors, expected or not). Rows for a whole dtype ("*") belong to no op."""
    by_op: dict[str, list[str]] = {}
    for r in results:
        if r["op"] != "*":
            by_op.setdefault(r["op"], []).append(r["status"])
    passing = [op for op, st in by_op.items() if st and all(s == "pass" for s in st)]
    failing = [op for op, st in by_op.items() if any(s in ("fail", "error", "xfail") for s in st)]
    return len(by_op), passing, failing


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = RunState()
    if not args.worker:  # a group's process is stopped by its parent, with SIGKILL
        run.stop.install()
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    device = resolve_device(args.device, "regress")
    _configure_threads(device)
    reason = unavailable_reason(device)
    if reason is not None:
        print(f"regress: cannot use device {device!r}: {reason}", file=sys.stderr)
        return 2
    try:
        faults = _planted(args)
        _faults.from_env()
    except ValueError as exc:
        print(f"regress: {exc}", file=sys.stderr)
        return 2
    if args.worker:
        return _worker(args, device)
    ops = args.ops or (list(_ops.QUICK) if args.quick else _ops.all_ops())
    unknown = [op for op in ops if op not in _ops.FAMILY_OF]
    if unknown:
        print(
            f"regress: not in the curated op set: {unknown}; see tests/regress/_ops.py",
            file=sys.stderr,
        )
        return 2
    info = describe(device)
    started = dt.datetime.now(dt.timezone.utc)
    kernel_faults = _faults.from_env()
    print(
        f"regress: device {device} = {info.name} (family {info.family}); torch {torch.__version__}"
        f"{'; SELF-TEST: fault planted in ' + ', '.join(f.op for f in faults) if faults else ''}"
        f"{'; kernel fault(s) planted: ' + ', '.join(kernel_faults) if kernel_faults else ''}",
        flush=True,
    )
    known_table = _known.load(args.known_failures)
    wanted = {
        "parity": not args.no_parity,
        "shapes": not args.no_shapes,
        "grid": not args.no_grid,
        "soak": args.soak is not None,
        "reports": not args.no_reports,
        "sampling": not args.no_sampling,
        "kernels": not args.no_kernels,
        "memory": not args.no_memory,
        "training": not args.no_training,
        "workloads": not args.no_workloads,
        "patched": not args.no_patched and _patched.skip_reason() is None,
    }
    payloads: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {}
    for name in GROUPS:
        if run.stop.signum is not None:
            groups[name] = {"status": "skipped", "detail": f"not run: the run was interrupted ({run.stop.name})"}
        elif run.startup_hung is not None and wanted[name]:
            groups[name] = {"status": "skipped", "detail": f"not run: the start-up of group "
                            f"{run.startup_hung} hung earlier in this run (the device did not answer)"}  # fmt: skip
        elif name == "kernels" and wanted[name] and _kernels.skip_reason(device) is not None:
            # One skip row needs no process of its own (that would cost a start-up of torch).
            payloads[name] = {"kernels": [_kernels.skip_row(str(_kernels.skip_reason(device)))], "meta": {}}
            groups[name] = {"status": "ok", "detail": "", "seconds": 0.0, "rows_kept": 1}
        elif wanted[name]:
            payloads[name], groups[name] = run_group(name, raw_argv, device, args.check_timeout, run)
        else:
            groups[name] = {"status": "skipped", "detail": "not run (option or host)"}
    interrupted = run.stop.signum is not None

    def section(name: str) -> list[dict[str, Any]]:
        return payloads.get(name, {}).get(SECTIONS[name], [])

    def meta(name: str) -> dict[str, Any]:
        return payloads.get(name, {}).get("meta", {})

    results: list[dict[str, Any]] = section("parity")
    shapes: list[dict[str, Any]] = section("shapes")
    reports: list[dict[str, Any]] = section("reports")
    sampling: list[dict[str, Any]] = section("sampling")
    kernels: list[dict[str, Any]] = section("kernels")
    workloads: list[dict[str, Any]] = section("workloads")
    grid: list[dict[str, Any]] = section("grid")
    soak: list[dict[str, Any]] = section("soak")
    dtype_notes: dict[str, str] = meta("parity").get("dtype_notes", {})
    samples = meta("parity").get("samples", args.samples or (2 if args.quick else 8))
    host_macos = host_info()["macos"]
    for res in results + shapes + grid + reports + sampling + kernels + workloads + soak:
        known = _known.lookup(known_table, info.family, res["op"], res["dtype"], res["check"], host_macos)
        res["raw_status"] = res["status"]
        res["status"] = _known.apply(res["status"], known)
        res["known"] = known.as_dict() if known else None
    memory: list[dict[str, Any]] = section("memory")
    training: list[dict[str, Any]] = section("training")
    skip = "--no-patched" if args.no_patched else _patched.skip_reason()
    patched: list[dict[str, Any]] = section("patched")
    if skip is not None:
        patched = [{"name": "patched-build checks", "status": "skip", "detail": skip}]

    unexpected = [r for r in results if r["status"] in UNEXPECTED]
    unexpected += [
        {**r, "check": f"{r['check']} [{r['case']}]"}
        for r in shapes + grid + reports + sampling + kernels + workloads + soak
        if r["status"] in UNEXPECTED
    ]
    unexpected += [
        {"op": m["op"], "check": "memory", "dtype": m["name"].partition(":")[2] or "-", **m}
        for m in memory
        if m["status"] in UNEXPECTED
    ]
    unexpected += [
        {"op": t["model"], "check": "training", "dtype": "float32", **t}
        for t in training
        if t["status"] in UNEXPECTED
    ]
    unexpected += [
        {"op": c["name"], "check": "patched", "dtype": "-", **c}
        for c in patched
        if c["status"] in UNEXPECTED
    ]
    unexpected += [
        {"op": f"group {name}", "check": "group", "dtype": "-", "status": "error",
         "detail": f"{g['detail']}; stderr: {g['stderr_tail'][-300:].strip()}"}
        for name, g in groups.items()
        if g["status"] == "error"
    ]
    unexpected += _hangs_outside_checks(groups)
    xpass = [r for r in results + reports if r["status"] == "xpass"]
    self_test, unexpected = _self_test(faults, unexpected)
    self_test, unexpected = _planted_hang(_faults.hang_from_env(), self_test, unexpected, run.planted)
    if self_test is not None and kernel_faults:
        self_test["kernel_faults"] = kernel_faults
        # Where each kernel fault fired, and, for the size-only ones, how the OpInfo rows of
        # the same op came out: they pass when OpInfo's small samples miss the fault.
        self_test["fired"] = {
            name: meta(name).get("fault_fired", {}) for name in GROUPS if meta(name).get("fault_fired")
        }
        self_test["opinfo_rows"] = {
            _faults.FAULTS[k].opinfo: sorted({f"{r['dtype']}/{r['check']}: {r['status']}" for r in results
                                              if r["op"] == _faults.FAULTS[k].opinfo})
            for k in kernel_faults
            if _faults.FAULTS[k].opinfo
        }  # fmt: skip
    if interrupted:
        exit_code = EXIT_INTERRUPTED + int(run.stop.signum or signal.SIGINT)
    elif self_test is not None and not self_test["caught"]:
        exit_code = EXIT_FAULT_MISSED  # a planted fault that goes unreported: the suite is broken
    else:
        exit_code = 1 if unexpected or (args.strict_xpass and xpass) else 0

    counts: dict[str, int] = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    memory_counts: dict[str, int] = {}
    for m in memory:
        memory_counts[m["status"]] = memory_counts.get(m["status"], 0) + 1
    shape_counts: dict[str, int] = {}
    for r in shapes:
        shape_counts[r["status"]] = shape_counts.get(r["status"], 0) + 1
    checked, passing, failing = ops_summary(results)
    report = {
        "tool": "tests.regress",
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": host_info(),
        "torch": torch_info(),
        "device": info.as_dict(),
        "options": {
            "quick": args.quick,
            "samples": samples,
            "self_test": self_test is not None,
            "check_timeout": args.check_timeout,
            "kernel_faults": kernel_faults,
            "mps_fallback": os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", "") == "1",
            "memory_fraction": args.memory_fraction,
            "memory_bytes": args.memory_bytes,
            "argv": raw_argv,
        },
        "dtype_support": {n: (n not in dtype_notes) for n in (_parity.DTYPE_NAMES.values())},
        "dtype_notes": dtype_notes,
        "summary": {
            "counts": counts,
            "ops_checked": checked,
            "ops_passing_on_device": len(passing),
            "ops_failing_on_device": failing,
            "memory_counts": memory_counts,
            "shape_counts": shape_counts,
            "shape_ops_failing": sorted({r["op"] for r in shapes if r["status"] in ("fail", "error", "xfail", "hang")}),
            "report_counts": _count(reports),
            "report_ops_failing": sorted({r["op"] for r in reports if r["status"] in ("fail", "error", "xfail", "hang")}),
            "sampling_counts": _count(sampling),
            "kernel_counts": _count(kernels),
            "workload_counts": _count(workloads),
            "grid_counts": _count(grid),
            "grid_ops_failing": sorted({r["op"] for r in grid if r["status"] in ("fail", "error", "xfail", "hang", "gpu-error")}),
            "soak": {r["op"]: r["status"] for r in soak},
            "unexpected_failures": len(unexpected),
            "unexpected_passes": len(xpass),
            "training": {t["model"]: t["status"] for t in training},
            "patched_checks": {
                c["status"]: sum(1 for x in patched if x["status"] == c["status"]) for c in patched
            },
            "groups": {name: g["status"] for name, g in groups.items()},
            "exit_code": exit_code,
        },
        "self_test": self_test,
        "groups": groups,
        "unexpected": unexpected,
        "results": results,
        "shapes": shapes,
        "sampling": sampling,
        "kernels": kernels,
        "workloads": workloads,
        "grid": grid,
        "grid_regimes": _grid.regime_table(grid, meta("grid").get("grid_declared", {}), bool(meta("grid").get("grid_quick"))),
        "grid_budget": meta("grid").get("grid_budget", ""),
        "soak": soak,
        "shapes_notes": {
            "tolerance": meta("shapes").get("shapes_tolerance", ""),
            "large": meta("shapes").get("shapes_large", ""),
            "budget": meta("shapes").get("shapes_budget", ""),
        },
        "reports": reports,
        "memory": memory,
        "training": training,
        "patched_checks": patched,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / "regress.json"
    md_path = args.out / "regress.md"
    _write(json_path, json.dumps(report, indent=1, default=str) + "\n")
    _write(md_path, _report.markdown(report, unexpected, xpass))
    compat = _compat.build(report)
    compat_path, compat_md = args.out / "compat.json", args.out / "compat.md"
    _write(compat_path, json.dumps(compat, indent=1) + "\n")
    _write(compat_md, _compat.markdown(compat))
    print(_report.console_summary(report, unexpected, xpass))
    print(f"regress: wrote {json_path}, {md_path}, {compat_path} and {compat_md}; exit {exit_code}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
