"""python -m tests.bench --device D --out DIR [--smoke] [--matmul-bf16 N]

Times each kernel on the device and on the CPU with one thread and with all threads, and
writes bench.json, bench.md and bench.png. Exit 0 on success, 2 when the device is unusable.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import torch

from tests.regress._device import (
    DEVICE_TYPES,
    describe,
    host_info,
    resolve_device,
    torch_info,
    unavailable_reason,
)

from . import _kernels, _peaks, _plot, _timing


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tests.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--device",
        choices=DEVICE_TYPES,
        default=None,
        help="device to benchmark (default: mps when available, else cuda, xpu, cpu)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("reports/bench"),
        help="folder for the JSON, Markdown and PNG reports (default: reports/bench)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes (CI): checks the tool, measures nothing useful",
    )
    p.add_argument(
        "--matmul-bf16",
        type=int,
        default=0,
        metavar="N",
        help="also time an N x N x N bfloat16 matmul on the device (e.g. 8192; no CPU baseline)",
    )
    p.add_argument("--no-cpu", action="store_true", help="skip the CPU baselines")
    p.add_argument(
        "--float32-matmul-precision",
        choices=("highest", "high", "medium"),
        default=None,
        help="torch.set_float32_matmul_precision before measuring (high/medium allow TF32 "
        "or bf16 matmuls on CUDA); default: leave torch's setting",
    )
    p.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="PREFIX",
        help="only kernels whose name starts with one of these (e.g. matmul_NN conv2d)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds of timed repeats per kernel and backend (default 2, smoke 0.2)",
    )
    return p.parse_args(argv)


def _rate(kernel: _kernels.Kernel, seconds: float) -> dict[str, float | None]:
    return {
        "gflops": kernel.flops / seconds / 1e9 if kernel.flops else None,
        "gbps": kernel.bytes / seconds / 1e9 if kernel.bytes else None,
    }


def _time_on(kernel: _kernels.Kernel, device: str, budget: float) -> dict[str, Any]:
    try:
        # The rules per kind of device are the ones python -m torch.backends.mps --check uses.
        timing = _timing.measure_on(kernel.setup(device), device, budget)
    except Exception as exc:  # noqa: BLE001  # report the kernel as failed and go on with the others
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    return {**timing.as_dict(), **_rate(kernel, timing.median_s)}


def _percent(
    kernel: _kernels.Kernel, result: dict[str, Any], peak: _peaks.Peak | None, tf32: dict[str, bool]
) -> float | None:
    if peak is None or "error" in result:
        return None
    if kernel.flops and kernel.libs:
        # One rule for every kernel: the peak of the fastest unit its FLOPs may run on. A
        # float32 kernel is held to the TF32 peak when TF32 is allowed in any library it calls
        # (cuDNN convolutions: cudnn.allow_tf32; cuBLAS matmuls: float32 matmul precision).
        top = _peaks.compute_peak(peak, kernel.dtype, any(tf32[lib] for lib in kernel.libs))
        return 100.0 * result["gflops"] / top if top else None
    if kernel.bytes and peak.bandwidth_gbs:
        return 100.0 * result["gbps"] / peak.bandwidth_gbs
    return None


def speedups(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for base in ("cpu_1_thread", "cpu_all_threads"):
        pairs = [
            (r["name"], r[base]["median_s"] / r["device"]["median_s"])
            for r in rows
            if "median_s" in r.get(base, {}) and "median_s" in r["device"]
        ]
        summary = _timing.speedup_summary(pairs, "kernel")
        if summary is not None:
            out[base] = {**summary, "slower_than_cpu": [n for n, s in pairs if s < 1.0]}
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = resolve_device(args.device, "bench")
    reason = unavailable_reason(device)
    if reason is not None:
        print(f"bench: cannot use device {device!r}: {reason}", file=sys.stderr)
        return 2
    info = describe(device)
    peak = _peaks.lookup(info.name) if device != "cpu" else None
    if args.float32_matmul_precision:
        torch.set_float32_matmul_precision(args.float32_matmul_precision)
    # Which float32 kernels may run on TF32 tensor cores on CUDA: matmul when the precision is
    # not "highest" (torch's default is "highest"), cuDNN convolutions when cudnn.allow_tf32
    # (torch's default is True). Measured as set; the percent of peak follows (_percent).
    tf32 = {
        "matmul": device == "cuda" and torch.get_float32_matmul_precision() != "highest",
        "conv": device == "cuda" and bool(torch.backends.cudnn.allow_tf32),
    }
    budget = args.budget if args.budget is not None else (0.2 if args.smoke else 2.0)
    all_threads = torch.get_num_threads()
    kernels = _kernels.suite(args.smoke, args.matmul_bf16 or None)
    if args.only:
        kernels = [k for k in kernels if any(k.name.startswith(p) for p in args.only)]
    started = dt.datetime.now(dt.timezone.utc)
    print(
        f"bench: {device} = {info.name} (peak table: {peak.name if peak else 'unknown device: no percentages'}); "
        f"CPU {all_threads} threads; {len(kernels)} kernels",
        flush=True,
    )

    rows: list[dict[str, Any]] = []
    for kernel in kernels:
        row: dict[str, Any] = {
            "name": kernel.name,
            "group": kernel.group,
            "dtype": kernel.dtype,
            "params": kernel.params,
            "flops": kernel.flops,
            "bytes": kernel.bytes,
        }
        row["device"] = _time_on(kernel, device, budget)
        row["percent_of_peak"] = _percent(kernel, row["device"], peak, tf32)
        if (
            peak is not None
            and peak.measured_bf16_gflops
            and kernel.dtype == "bfloat16"
            and row["device"].get("gflops")
        ):
            # Against the rate measured on this very machine type, not the datasheet's.
            row["percent_of_measured_bf16"] = (
                100.0 * row["device"]["gflops"] / peak.measured_bf16_gflops
            )
        if kernel.cpu_baseline and not args.no_cpu:
            try:
                torch.set_num_threads(1)
                row["cpu_1_thread"] = _time_on(kernel, "cpu", budget)
            finally:
                torch.set_num_threads(all_threads)
            row["cpu_all_threads"] = _time_on(kernel, "cpu", budget)
        rows.append(row)
        dev = row["device"]
        rate = (
            f"{dev['gflops']:.1f} GFLOPS"
            if dev.get("gflops")
            else f"{dev['gbps']:.1f} GB/s"
            if dev.get("gbps")
            else dev.get("error", "")
        )
        pct = (
            f" ({row['percent_of_peak']:.0f}% of peak)"
            if row["percent_of_peak"] is not None
            else ""
        )
        if "percent_of_measured_bf16" in row:
            pct += f" ({row['percent_of_measured_bf16']:.1f}% of the {peak.measured_bf16_gflops / 1e3:.0f} TFLOP/s measured reference)"
        cpu = "".join(
            f"; {b} x{row[b]['median_s'] / dev['median_s']:.2f}"
            for b in ("cpu_1_thread", "cpu_all_threads")
            if "median_s" in row.get(b, {}) and "median_s" in dev
        )
        med = f"{dev['median_s'] * 1e3:.3f} ms " if "median_s" in dev else ""
        print(f"bench: {kernel.name}: {med}{rate}{pct}{cpu}", flush=True)

    report = {
        "tool": "tests.bench",
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": host_info(),
        "torch": torch_info(),
        "device": info.as_dict(),
        "peak": None if peak is None else {**peak.__dict__},
        "options": {
            "smoke": args.smoke,
            "matmul_bf16": args.matmul_bf16,
            "budget_s": budget,
            "cpu_threads_all": all_threads,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "float32_matmul_precision_requested": args.float32_matmul_precision,
            "tf32": tf32["matmul"],
            "tf32_conv": tf32["conv"],
            "argv": sys.argv[1:] if argv is None else argv,
        },
        "speedup": speedups(rows),
        "kernels": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (args.out / "bench.md").write_text(_plot.markdown(report), encoding="utf-8")
    _plot.png(report, args.out / "bench.png")
    for base, s in report["speedup"].items():
        print(
            f"bench: speedup vs {base}: geomean x{s['geomean']:.2f}, worst x{s['worst']:.2f} ({s['worst_kernel']})"
        )
    failed = [r["name"] for r in rows if "error" in r["device"]]
    if failed:
        print(f"bench: kernels that failed on {device}: {failed}", file=sys.stderr)
    print(f"bench: wrote {args.out / 'bench.json'}, bench.md, bench.png")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
