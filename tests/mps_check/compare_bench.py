"""Do the check's timings agree with the benchmark's for the same kernels? Two ways of asking.

    python -m tests.mps_check.compare_bench paired --device cuda [--budget 1.0] [--repeat 5]
        [--only NAME ...] [--plant NAME] [--out paired.json]
    python -m tests.mps_check.compare_bench runs --check-json C1.json [C2.json ...]
        --bench-json B1.json [B2.json ...] [--out runs.json]

``paired`` is the gate. In one process it builds each workload twice, as the check builds it
(the wheel's ``_check.WORKLOADS``, from the series' files) and as the benchmark builds its
kernel of the same name (``tests/bench/_kernels.py``), and times the two with the shared
rules' ``measure_interleaved``: their repeats alternate, so both see the same moments of the
machine. Of ``--repeat`` such measurements (the order of the two swapped every other time),
the median of their differences (check median / benchmark median - 1) is the workload's:
exit 1 when one differs by more than the tolerance (5%). This holds for workloads bound by the host's speed too (the small-op chain,
the CNN's training step), whose figures from two runs one after the other differ by as much
as the host's speed does between them. ``--plant NAME`` makes the check's closure of NAME do
one call in eight twice (12.5% more work), which the comparison must catch.

``runs`` compares the figures of whole runs of the two tools (``--check --json`` and
``tests.bench``'s bench.json), several of each taken in turn: per workload, the median over
the check's runs against the median over the benchmark's, with each tool's spread between
its own runs. It is information, not a gate: where the host's speed wanders (a shared
host, a laptop that throttles), a workload bound by it differs between two runs of one tool
as much as between the tools. A difference above the tolerance is labelled "within the
run-to-run spread" when one tool's own runs differ by as much; exit 1 when a difference is
larger than that too, or a figure is missing. The CPU figures are reported too.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

TOLERANCE = 0.05
PLANT_EVERY = 8  # --plant: one call in eight is made twice


def _difference(ours: float | None, theirs: float | None) -> float | None:
    return None if ours is None or not theirs else ours / theirs - 1


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.4f}"


def _median_of(runs: Sequence[dict[str, Any]], name: str, base: str) -> tuple[float | None, list[float]]:
    values = [r[name][base]["median_s"] for r in runs if "median_s" in r.get(name, {}).get(base, {})]
    return (statistics.median(values) if values else None), values


def _spread(values: Sequence[float]) -> float | None:
    """(slowest - fastest) / median of one tool's runs; None below two runs."""
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else None


def compare_runs(
    checks: Sequence[dict[str, Any]], benches: Sequence[dict[str, Any]], tolerance: float = TOLERANCE
) -> dict[str, Any]:
    """Whole runs: the median over the check's runs against the median over the benchmark's."""
    check_runs = [{t["name"]: t for t in c["timings"]} for c in checks]
    bench_runs = [{k["name"]: k for k in b["kernels"]} for b in benches]
    rows = []
    for name in check_runs[0]:
        row: dict[str, Any] = {"name": name}
        for base in ("device", "cpu_all_threads", "cpu_1_thread"):
            ours, ours_all = _median_of(check_runs, name, base)
            theirs, theirs_all = _median_of(bench_runs, name, base)
            row[base] = {
                "check_s": ours, "bench_s": theirs, "difference": _difference(ours, theirs),
                "check_runs_s": ours_all, "bench_runs_s": theirs_all,
                "check_spread": _spread(ours_all), "bench_spread": _spread(theirs_all),
            }  # fmt: skip
        d = row["device"]
        spread = max((x for x in (d["check_spread"], d["bench_spread"]) if x is not None), default=None)
        if d["difference"] is None:
            row["verdict"] = "FAIL"  # no figure from one of the two
        elif abs(d["difference"]) <= tolerance:
            row["verdict"] = "ok"
        elif spread is not None and abs(d["difference"]) <= spread:
            row["verdict"] = "within the run-to-run spread"
        else:
            row["verdict"] = "FAIL"
        rows.append(row)
    return {
        "mode": "runs",
        "tolerance": tolerance,
        "device": checks[0].get("device_name"),
        "check_runs": len(checks),
        "bench_runs": len(benches),
        "rows": rows,
        "ok": bool(rows) and all(r["verdict"] != "FAIL" for r in rows),
    }


def _planted(fn: Callable[[], Any]) -> Callable[[], Any]:
    calls = 0

    def twice_in_eight() -> Any:
        nonlocal calls
        calls += 1
        if calls % PLANT_EVERY == 0:
            fn()
        return fn()

    return twice_in_eight


def compare_paired(
    device: str,
    budget_s: float,
    repeat: int,
    only: Sequence[str] | None = None,
    plant: str | None = None,
    tolerance: float = TOLERANCE,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Each workload as the check builds it and as the benchmark builds it, timed in turn."""
    from tests.bench import _kernels

    from . import overlay

    kernels = {k.name: k for k in _kernels.suite(False, None)}

    with tempfile.TemporaryDirectory() as layer:
        path = str(overlay.make(Path(layer)))
        sys.path.insert(0, path)
        try:
            check = importlib.import_module(f"{overlay.PACKAGE}._check")
            timing = importlib.import_module(f"{overlay.PACKAGE}._timing")
            rows = _paired_rows(
                check, timing, device, budget_s, repeat, only, plant, tolerance, progress, kernels=kernels
            )
        finally:
            sys.path.remove(path)
    return {
        "mode": "paired",
        "tolerance": tolerance,
        "device": device,
        "budget_s": budget_s,
        "repeat": repeat,
        "plant": plant,
        "rows": rows,
        "ok": bool(rows) and all(r["within_tolerance"] for r in rows),
    }


def _paired_rows(
    check: Any,
    timing: Any,
    device: str,
    budget_s: float,
    repeat: int,
    only: Sequence[str] | None,
    plant: str | None,
    tolerance: float,
    progress: Callable[[str], None],
    *,
    kernels: dict[str, Any],
) -> list[dict[str, Any]]:
    """One row per workload: ``check``'s own closure against ``kernels[name]``'s."""
    names = list(only) if only else [w.name for w in check.WORKLOADS]
    unknown = [n for n in names if n not in check._WORKLOAD_BY_NAME or n not in kernels]
    if unknown:
        known = [w.name for w in check.WORKLOADS if w.name in kernels]
        raise ValueError(f"not a workload of both the check and the benchmark: {', '.join(unknown)}; known: {', '.join(known)}")
    if plant is not None and plant not in names:
        raise ValueError(f"--plant {plant}: not one of the workloads compared ({', '.join(names)})")
    rules = timing.rules_on(device, budget_s)
    rows = []
    for name in names:
        ours = check._WORKLOAD_BY_NAME[name].setup()(device)
        if name == plant:
            ours = _planted(ours)
        theirs = kernels[name].setup(device)
        pairs = []
        for i in range(repeat):
            # The order swapped every other time: neither is always the first of a round.
            if i % 2 == 0:
                c, b = timing.measure_interleaved([ours, theirs], device, **rules)
            else:
                b, c = timing.measure_interleaved([theirs, ours], device, **rules)
            pairs.append({"check": c.as_dict(), "bench": b.as_dict()})
        # The statistic of a paired design: the median of each measurement's own difference.
        # Medians taken side by side first would set one measurement's check against
        # another's benchmark, moments apart, and bring back the drift the pairing removes.
        d = statistics.median(_difference(p["check"]["median_s"], p["bench"]["median_s"]) for p in pairs)
        check_s = statistics.median(p["check"]["median_s"] for p in pairs)
        bench_s = statistics.median(p["bench"]["median_s"] for p in pairs)
        row = {
            "name": name, "check_s": check_s, "bench_s": bench_s, "difference": d,
            "within_tolerance": d is not None and abs(d) <= tolerance,
            "planted": name == plant, "measurements": pairs,
        }  # fmt: skip
        rows.append(row)
        progress(_paired_line(row))
    return rows


def _paired_line(r: dict[str, Any]) -> str:
    each = ", ".join(
        _pct(_difference(p["check"]["median_s"], p["bench"]["median_s"])) for p in r["measurements"]
    )
    return (
        f"  {'ok  ' if r['within_tolerance'] else 'FAIL'} {r['name']}"
        f"{' (planted: 12.5% more work in the check)' if r['planted'] else ''}: device check "
        f"{_ms(r['check_s'])} ms, bench {_ms(r['bench_s'])} ms ({_pct(r['difference'])}; "
        f"each measurement {each})"
    )


def _print_runs(result: dict[str, Any]) -> None:
    print(
        f"runs of the check ({result['check_runs']}) and of the benchmark ({result['bench_runs']}) "
        f"on {result['device']}: medians over runs within {100 * result['tolerance']:.0f}%, "
        "or within the run-to-run spread? (information: see --help)"
    )
    for r in result["rows"]:
        d = r["device"]
        runs = lambda key: ", ".join(_ms(x) for x in d[key])  # noqa: E731
        cpu = "; ".join(f"{b} {_pct(r[b]['difference'])}" for b in ("cpu_all_threads", "cpu_1_thread"))
        print(
            f"  {r['verdict']}: {r['name']}: device check {_ms(d['check_s'])} ms ({runs('check_runs_s')}), "
            f"bench {_ms(d['bench_s'])} ms ({runs('bench_runs_s')}), {_pct(d['difference'])}, "
            f"spread between runs: check {_pct(d['check_spread'])}, bench {_pct(d['bench_spread'])}; {cpu}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    paired = sub.add_parser("paired", help="time the check's and the benchmark's workloads in turn")
    paired.add_argument("--device", default="cuda")
    paired.add_argument("--budget", type=float, default=1.0, help="seconds per measurement, as the check's --budget")
    paired.add_argument("--repeat", type=int, default=5, help="interleaved measurements per workload")
    paired.add_argument("--only", nargs="+", default=None, metavar="NAME")
    paired.add_argument("--plant", default=None, metavar="NAME", help="12.5%% more work in the check's NAME")
    runs = sub.add_parser("runs", help="compare whole runs of the two tools")
    runs.add_argument("--check-json", type=Path, nargs="+", required=True)
    runs.add_argument("--bench-json", type=Path, nargs="+", required=True)
    for s in (paired, runs):
        s.add_argument("--tolerance", type=float, default=TOLERANCE)
        s.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.mode == "paired":
        if args.repeat < 1 or args.budget <= 0:
            p.error("--repeat must be 1 or more and --budget a positive number of seconds")
        print(
            f"check against benchmark on {args.device}, in one process, their repeats in turn: "
            f"device medians within {100 * args.tolerance:.0f}%?",
            flush=True,
        )
        try:
            result = compare_paired(
                args.device, args.budget, args.repeat, args.only, args.plant, args.tolerance,
                progress=lambda line: print(line, flush=True),
            )  # fmt: skip
        except (ValueError, KeyError) as exc:
            print(f"compare_bench paired: {exc}", file=sys.stderr)
            return 2
    else:
        result = compare_runs(
            [json.loads(f.read_text()) for f in args.check_json],
            [json.loads(f.read_text()) for f in args.bench_json],
            args.tolerance,
        )
        _print_runs(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
