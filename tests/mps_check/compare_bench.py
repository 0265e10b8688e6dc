"""Do the check's timings agree with the benchmark's for the same kernels?

    python -m tests.mps_check.compare_bench --check-json CHECK.json --bench-json bench.json
        [--tolerance 0.05] [--out compare.json]

For each workload of ``--check --json`` (its names are benchmark kernel names), the device
median is compared with the benchmark's median for that kernel; exit 1 when one differs by
more than the tolerance (5%), or when a workload has no benchmark figure. The CPU medians
are compared and reported too, as information: on a shared host they move with its load.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def compare(check: dict[str, Any], bench: dict[str, Any], tolerance: float) -> dict[str, Any]:
    kernels = {k["name"]: k for k in bench["kernels"]}
    rows = []
    for t in check["timings"]:
        row: dict[str, Any] = {"name": t["name"]}
        kernel = kernels.get(t["name"])
        for base in ("device", "cpu_all_threads", "cpu_1_thread"):
            ours = t.get(base, {}).get("median_s")
            theirs = (kernel or {}).get(base, {}).get("median_s")
            row[base] = {
                "check_ms": None if ours is None else ours * 1e3,
                "bench_ms": None if theirs is None else theirs * 1e3,
                "difference": None if ours is None or not theirs else ours / theirs - 1,
            }
        d = row["device"]["difference"]
        row["device_within_tolerance"] = d is not None and abs(d) <= tolerance
        rows.append(row)
    return {
        "tolerance": tolerance,
        "device": check.get("device_name"),
        "rows": rows,
        "ok": bool(rows) and all(r["device_within_tolerance"] for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check-json", type=Path, required=True)
    p.add_argument("--bench-json", type=Path, required=True)
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    result = compare(
        json.loads(args.check_json.read_text()), json.loads(args.bench_json.read_text()), args.tolerance
    )

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:+.1f}%"

    def ms(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.4f}"

    print(f"check against benchmark on {result['device']}: device medians within {100 * args.tolerance:.0f}%?")
    for r in result["rows"]:
        d = r["device"]
        cpu = "; ".join(f"{b} {pct(r[b]['difference'])}" for b in ("cpu_all_threads", "cpu_1_thread"))
        print(
            f"  {'ok  ' if r['device_within_tolerance'] else 'FAIL'} {r['name']}: device check "
            f"{ms(d['check_ms'])} ms, bench {ms(d['bench_ms'])} ms ({pct(d['difference'])}); {cpu}"
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
