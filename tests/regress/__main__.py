"""python -m tests.regress --device D --out DIR [--quick] [--self-test] [--ops OP ...]

Each group (OpInfo parity, shapes, the public reports' cases, memory paths, training smoke,
patched-build checks) runs in its own subprocess and writes each row as it finishes: a
process abort (a Metal validation failure aborts) is recorded as that group's failure, with
its stderr; the check it was in becomes an error row, the rows finished before it stay, and
the rest of the report survives.
Every run also writes compat.json and compat.md, the small report to share (_compat.py).

Exit codes: 0 no unexpected failure (with a planted fault: it was caught and nothing else
failed); 1 unexpected failure(s); 2 the device cannot be used; 3 a planted fault was not
caught (the suite itself is broken).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from . import (
    _compat,
    _faults,
    _known,
    _memory,
    _ops,
    _parity,
    _patched,
    _report,
    _reports,
    _shapes,
    _stream,
    _training,
    _vision,
)
from ._device import (
    DEVICE_TYPES,
    describe,
    dtype_supported,
    host_info,
    resolve_device,
    torch_info,
    unavailable_reason,
)

UNEXPECTED = ("fail", "error")
GROUPS = ("parity", "shapes", "reports", "memory", "training", "patched")
# The report section each group's rows go to (the parity group's are "results").
SECTIONS = {"parity": "results", "shapes": "shapes", "reports": "reports", "memory": "memory",
            "training": "training", "patched": "patched"}  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]
EXIT_FAULT_MISSED = 3


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
        help="dtypes to compare (default: float32 float16 bfloat16; float32 float16 with --quick)",
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
    p.add_argument("--no-training", action="store_true", help="skip the training smoke")
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
    # Internal: run one group in this process and write its results to a file.
    p.add_argument("--worker", choices=GROUPS, default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
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


def _planted(args: argparse.Namespace) -> list[_parity.PlantedFault]:
    faults = [_parity.PlantedFault()] if args.self_test else []
    # A kernel fault changes no output here: its catcher row must fail by itself.
    kernel = [
        _parity.PlantedFault(_faults.FAULTS[n].catcher, 0.0, "kernel") for n in _faults.from_env()
    ]
    return faults + _parity.fault_from_env() + kernel


def _parity_group(args: argparse.Namespace, device: str, stream: _stream.RowStream) -> None:
    samples = args.samples or (2 if args.quick else 8)
    stream.meta("samples", samples)
    ops = args.ops or (list(_ops.QUICK) if args.quick else _ops.all_ops())
    wanted = args.dtypes or (
        ["float32", "float16"] if args.quick else ["float32", "float16", "bfloat16"]
    )
    dtypes = [d for d, n in _parity.DTYPE_NAMES.items() if n in wanted]
    t0 = time.perf_counter()
    runner = _parity.ParityRunner(
        device,
        _parity.load_tolerances(),
        samples,
        tuple(_planted(args)),
        op_db_index=_parity.opinfo_index(_parity.import_op_db()),
    )
    print(
        f"regress: OpInfo database loaded in {time.perf_counter() - t0:.1f}s; "
        f"{len(ops)} ops x {[_parity.DTYPE_NAMES[d] for d in dtypes]}",
        flush=True,
    )
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
        for op in ops:
            family = _ops.FAMILY_OF[op]
            stream.begin("results", _parity.Result(op, family, dname, "forward", "error").as_dict())
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
    wanted = args.dtypes or (
        ["float32", "float16"] if args.quick else ["float32", "float16", "bfloat16"]
    )
    budget, where = _memory.budget_bytes(device, args.memory_bytes, args.memory_fraction)
    stream.meta("shapes_budget", where)
    ops = tuple(args.shapes_ops) if args.shapes_ops else None
    _shapes.run(device, args.quick, wanted, budget, stream, ops=ops)


def _run_group_here(
    name: str, args: argparse.Namespace, device: str, stream: _stream.RowStream
) -> None:
    """One group, in this process (the worker); its rows go to `stream` as they finish."""
    if _stream.abort_plan(name)[0]:
        _stream.planted_abort(f"in group {name}")
    _faults.install_from_env(name, device)
    if name == "parity":
        _parity_group(args, device, stream)
    elif name == "shapes":
        _shapes_group(args, device, stream)
    elif name == "reports":
        _reports.run(device, tuple(f for f in _planted(args) if f.op.startswith(_reports.PREFIX)), stream)
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
        for tr in _training.run(device, steps, _parity.training_tolerance(), stream=stream):
            print(
                f"regress: training {tr.model}: {tr.status} (max |loss diff| {tr.max_abs_diff:.2e})",
                flush=True,
            )
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


def run_group(name: str, argv: list[str], device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one group in a subprocess; its rows (as many as it finished) and a record of how
    the process ended."""
    with tempfile.TemporaryDirectory(prefix=f"regress-{name}-") as tmp:
        out = Path(tmp) / "group.jsonl"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "tests.regress", *argv, "--device", device,
             "--worker", name, "--worker-out", str(out)],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            check=False,
        )
        seconds = time.perf_counter() - t0
        finished = _stream.read(out)
    if proc.stderr:
        sys.stderr.write(proc.stderr)
    record: dict[str, Any] = {
        "status": "ok",
        "returncode": proc.returncode,
        "seconds": round(seconds, 2),
        "detail": "",
        "rows_kept": finished.rows,
        "stderr_tail": _tail(proc.stderr or ""),
    }
    how = ""
    if proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = f"signal {-proc.returncode}"
        how = f"the group's process ended by {sig}"
    elif proc.returncode != 0 or not finished.done:
        crash = finished.meta.get("crash")
        how = f"the group's process exited {proc.returncode}" + (f" ({crash})" if crash else "")
    if how:
        record["status"] = "error"
        kept = f"{finished.rows} finished row(s) kept"
        if finished.in_flight is not None:
            section, row = finished.in_flight
            finished.sections.setdefault(section, []).append(_in_flight_row(section, row, how))
            kept += f"; the check in progress ({row.get('op', row.get('name', row.get('model')))}) is an error row"
        record["detail"] = f"{how}; {kept}; the checks not yet started are lost"
        print(f"regress: group {name}: {record['detail']}", file=sys.stderr, flush=True)
    payload: dict[str, Any] = dict(finished.sections)
    payload["meta"] = finished.meta
    return payload, record


def _worker(args: argparse.Namespace, device: str) -> int:
    _configure_precision(device)
    assert args.worker_out is not None
    stream = _stream.RowStream(args.worker_out, args.worker)
    try:
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
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    device = resolve_device(args.device, "regress")
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
        "reports": not args.no_reports,
        "memory": not args.no_memory,
        "training": not args.no_training,
        "patched": not args.no_patched and _patched.skip_reason() is None,
    }
    payloads: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {}
    for name in GROUPS:
        if wanted[name]:
            payloads[name], groups[name] = run_group(name, raw_argv, device)
        else:
            groups[name] = {"status": "skipped", "detail": "not run (option or host)"}

    def section(name: str) -> list[dict[str, Any]]:
        return payloads.get(name, {}).get(SECTIONS[name], [])

    def meta(name: str) -> dict[str, Any]:
        return payloads.get(name, {}).get("meta", {})

    results: list[dict[str, Any]] = section("parity")
    shapes: list[dict[str, Any]] = section("shapes")
    reports: list[dict[str, Any]] = section("reports")
    dtype_notes: dict[str, str] = meta("parity").get("dtype_notes", {})
    samples = meta("parity").get("samples", args.samples or (2 if args.quick else 8))
    for res in results + shapes + reports:
        known = _known.lookup(known_table, info.family, res["op"], res["dtype"], res["check"])
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
        {**r, "check": f"{r['check']} [{r['case']}]"} for r in shapes if r["status"] in UNEXPECTED
    ]
    unexpected += [
        {**r, "check": f"{r['check']} [{r['case']}]"} for r in reports if r["status"] in UNEXPECTED
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
    xpass = [r for r in results + reports if r["status"] == "xpass"]
    self_test, unexpected = _self_test(faults, unexpected)
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
    if self_test is not None and not self_test["caught"]:
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
    report_counts: dict[str, int] = {}
    for r in reports:
        report_counts[r["status"]] = report_counts.get(r["status"], 0) + 1
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
            "self_test": bool(faults),
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
            "shape_ops_failing": sorted({r["op"] for r in shapes if r["status"] in ("fail", "error", "xfail")}),
            "report_counts": report_counts,
            "report_ops_failing": sorted({r["op"] for r in reports if r["status"] in ("fail", "error", "xfail")}),
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
    json_path.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    md_path.write_text(_report.markdown(report, unexpected, xpass), encoding="utf-8")
    compat = _compat.build(report)
    compat_path, compat_md = args.out / "compat.json", args.out / "compat.md"
    compat_path.write_text(json.dumps(compat, indent=1) + "\n", encoding="utf-8")
    compat_md.write_text(_compat.markdown(compat), encoding="utf-8")
    print(_report.console_summary(report, unexpected, xpass))
    print(f"regress: wrote {json_path}, {md_path}, {compat_path} and {compat_md}; exit {exit_code}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
