"""Independent check of the benchmark's matmul figures on CUDA.

    python -m tests.bench.independent_matmul --bench-json reports/bench/bench.json [--out DIR]

For each matmul kernel of the benchmark report (by default every float32 one of size >= 1024
and every bfloat16 one), times the same product (same n, layout, dtype, random inputs) with
CUDA events around a bare loop, sharing no code with the benchmark's timer, and checks that
the two GFLOPS figures agree within --tolerance (5%). Exit 1 when one does not.

The loop has as many products as one of the benchmark's timed repeats and is repeated as
often, so both see the same load: a large bf16 product drives the GPU to its power limit,
and a loop of very different length would measure a different clock, not a different timer.
For bfloat16 kernels a sustained figure (0.5 s loops) is recorded too, as information.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def time_with_events(
    n: int, layout: str, dtype: torch.dtype, loops: int, repeats: int
) -> list[float]:
    """Seconds per product for each of `repeats` event-timed loops of `loops` products."""
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    bb = b.t() if layout == "NT" else b
    for _ in range(5):  # warm-up: cuBLAS handle, heuristics, clocks
        a @ bb
    torch.cuda.synchronize()
    per_product = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(loops):
            a @ bb
        end.record()
        end.synchronize()
        per_product.append(start.elapsed_time(end) / 1e3 / loops)
    return per_product


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--bench-json", type=Path, required=True)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--min-n", type=int, default=1024)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("independent_matmul: needs CUDA (CUDA events)", file=sys.stderr)
        return 2
    report = json.loads(args.bench_json.read_text(encoding="utf-8"))
    if report["device"]["type"] != "cuda":
        print("independent_matmul: the benchmark report is not from a cuda run", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = bool(report["options"].get("tf32"))
    rows: list[dict[str, Any]] = []
    for k in report["kernels"]:
        if k["group"] != "matmul" or "gflops" not in k["device"] or not k["device"]["gflops"]:
            continue
        n, layout, dtype = k["params"]["n"], k["params"]["layout"], k["dtype"]
        if dtype == "float32" and n < args.min_n:
            continue
        flops = 2.0 * n**3
        loops, repeats = int(k["device"]["inner"]), int(k["device"]["repeats"])
        times = time_with_events(n, layout, DTYPES[dtype], loops, repeats)
        gflops = flops / statistics.median(times) / 1e9
        ratio = k["device"]["gflops"] / gflops
        row: dict[str, Any] = {
            "kernel": k["name"],
            "n": n,
            "layout": layout,
            "dtype": dtype,
            "bench_gflops": k["device"]["gflops"],
            "events_gflops": gflops,
            "events_spread_gflops": [flops / max(times) / 1e9, flops / min(times) / 1e9],
            "loops": loops,
            "repeats": repeats,
            "ratio": ratio,
            "agree": abs(ratio - 1.0) <= args.tolerance,
        }
        if dtype == "bfloat16":
            sustained_loops = max(10, int(0.5 / (flops / (gflops * 1e9))))
            sustained = time_with_events(n, layout, DTYPES[dtype], sustained_loops, repeats=7)
            row["sustained_gflops"] = flops / statistics.median(sustained) / 1e9
            row["sustained_loops"] = sustained_loops
        rows.append(row)
        extra = (
            f", sustained {row['sustained_gflops'] / 1e3:.2f}" if "sustained_gflops" in row else ""
        )
        print(
            f"independent: {k['name']}: bench {k['device']['gflops'] / 1e3:.2f} TFLOP/s, "
            f"CUDA events {gflops / 1e3:.2f} TFLOP/s{extra}, ratio {ratio:.4f} "
            f"{'OK' if row['agree'] else 'DISAGREE'}",
            flush=True,
        )
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "bench_json": str(args.bench_json),
        "tolerance": args.tolerance,
        "rows": rows,
        "all_agree": bool(rows) and all(r["agree"] for r in rows),
    }
    out = args.out or args.bench_json.parent
    out.mkdir(parents=True, exist_ok=True)
    (out / "independent_matmul.json").write_text(
        json.dumps(result, indent=1) + "\n", encoding="utf-8"
    )
    return 0 if result["all_agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
