"""python -m tests.regress --device D --out DIR [--quick] [--self-test] [--ops OP ...]

Exit codes: 0 no unexpected failure; 1 unexpected failure(s) (or, with --self-test, the planted
fault was caught, which is also reported as a failure); 2 the device cannot be used.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from . import _known, _ops, _parity, _patched, _report, _training
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
    p.add_argument("--no-training", action="store_true", help="skip the training smoke")
    p.add_argument("--no-patched", action="store_true", help="skip the patched-build checks")
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = resolve_device(args.device, "regress")
    reason = unavailable_reason(device)
    if reason is not None:
        print(f"regress: cannot use device {device!r}: {reason}", file=sys.stderr)
        return 2
    _configure_precision(device)
    fault = _parity.PlantedFault() if args.self_test else _parity.fault_from_env()
    info = describe(device)
    started = dt.datetime.now(dt.timezone.utc)
    print(
        f"regress: device {device} = {info.name} (family {info.family}); torch {torch.__version__}"
        f"{'; SELF-TEST: fault planted in ' + fault.op if fault else ''}",
        flush=True,
    )

    results: list[dict[str, Any]] = []
    dtype_notes: dict[str, str] = {}
    known_table = _known.load(args.known_failures)
    samples = args.samples or (2 if args.quick else 8)
    if not args.no_parity:
        ops = args.ops or (list(_ops.QUICK) if args.quick else _ops.all_ops())
        unknown = [op for op in ops if op not in _ops.FAMILY_OF]
        if unknown:
            print(
                f"regress: not in the curated op set: {unknown}; see tests/regress/_ops.py",
                file=sys.stderr,
            )
            return 2
        wanted = args.dtypes or (
            ["float32", "float16"] if args.quick else ["float32", "float16", "bfloat16"]
        )
        dtypes = [d for d, n in _parity.DTYPE_NAMES.items() if n in wanted]
        t0 = time.perf_counter()
        runner = _parity.ParityRunner(
            device,
            _parity.load_tolerances(),
            samples,
            fault,
            op_db_index=_parity.opinfo_index(_parity.import_op_db()),
        )
        print(
            f"regress: OpInfo database loaded in {time.perf_counter() - t0:.1f}s; "
            f"{len(ops)} ops x {[_parity.DTYPE_NAMES[d] for d in dtypes]}",
            flush=True,
        )
        for dtype in dtypes:
            dname = _parity.DTYPE_NAMES[dtype]
            ok, why = dtype_supported(device, dtype)
            if not ok:
                # One result for the whole dtype: listing 95 identical "unsupported" lines says less.
                dtype_notes[dname] = why
                results.append(
                    _parity.Result(
                        "*", "*", dname, "forward", "unsupported", detail=f"device probe: {why}"
                    ).as_dict()
                )
                continue
            for op in ops:
                for res in runner.run_op(op, _ops.FAMILY_OF[op], dtype):
                    results.append(res.as_dict())
        for res in results:
            known = _known.lookup(known_table, info.family, res["op"], res["dtype"], res["check"])
            res["raw_status"] = res["status"]
            res["status"] = _known.apply(res["status"], known)
            res["known"] = known.as_dict() if known else None

    training: list[dict[str, Any]] = []
    if not args.no_training:
        steps = args.train_steps or (6 if args.quick else 20)
        for tr in _training.run(device, steps, _parity.training_tolerance()):
            training.append(tr.as_dict())
            print(
                f"regress: training {tr.model}: {tr.status} (max |loss diff| {tr.max_abs_diff:.2e})",
                flush=True,
            )

    patched: list[dict[str, Any]] = []
    skip = "--no-patched" if args.no_patched else _patched.skip_reason()
    if skip is None:
        patched = [c.as_dict() for c in _patched.run_checks()]
    else:
        patched = [{"name": "patched-build checks", "status": "skip", "detail": skip}]

    unexpected = [r for r in results if r["status"] in UNEXPECTED]
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
    xpass = [r for r in results if r["status"] == "xpass"]
    self_test = None
    if fault is not None:
        caught = [r for r in results if r["op"] == fault.op and r["status"] in UNEXPECTED]
        self_test = {
            "planted_op": fault.op,
            "relative_noise": fault.relative,
            "caught": bool(caught),
            "caught_in": [f"{r['dtype']}/{r['check']}" for r in caught],
        }
    exit_code = 1 if unexpected or (args.strict_xpass and xpass) else 0
    if self_test is not None and not self_test["caught"]:
        exit_code = 1  # a self-test that misses its fault is itself a failure of the suite

    counts: dict[str, int] = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
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
            "self_test": fault is not None,
            "mps_fallback": os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", "") == "1",
            "argv": sys.argv[1:] if argv is None else argv,
        },
        "dtype_support": {n: (n not in dtype_notes) for n in (_parity.DTYPE_NAMES.values())},
        "dtype_notes": dtype_notes,
        "summary": {
            "counts": counts,
            "ops_checked": len({r["op"] for r in results if r["op"] != "*"}),
            "ops_passing_on_device": len({r["op"] for r in results if r["status"] == "pass"}),
            "unexpected_failures": len(unexpected),
            "unexpected_passes": len(xpass),
            "training": {t["model"]: t["status"] for t in training},
            "patched_checks": {
                c["status"]: sum(1 for x in patched if x["status"] == c["status"]) for c in patched
            },
            "exit_code": exit_code,
        },
        "self_test": self_test,
        "results": results,
        "training": training,
        "patched_checks": patched,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / "regress.json"
    md_path = args.out / "regress.md"
    json_path.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    md_path.write_text(_report.markdown(report, unexpected, xpass), encoding="utf-8")
    print(_report.console_summary(report, unexpected, xpass))
    print(f"regress: wrote {json_path} and {md_path}; exit {exit_code}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
