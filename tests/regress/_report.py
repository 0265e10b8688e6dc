"""Markdown and console summaries of a regression report (the JSON is the full record)."""

from __future__ import annotations

from typing import Any

_SYMBOL = {
    "pass": "ok",
    "fail": "FAIL",
    "error": "ERROR",
    "gpu-error": "GPU-ERROR",
    "unsupported": "unsupported",
    "fallback": "fallback",
    "xfail": "xfail",
    "xpass": "XPASS",
    "skip": "skip",
}

_TITLE = {"mps": "Metal (MPS)", "cuda": "CUDA", "xpu": "XPU", "cpu": "CPU"}


def report_title(dev: dict[str, Any]) -> str:
    """The report's title names the device it ran on, not the one the project is for."""
    return f"# Regression report: {dev['name']} (`{dev['type']}`, {_TITLE.get(dev['type'], dev['type'])})"


def _verdict(report: dict[str, Any]) -> str:
    ok = report["summary"]["exit_code"] == 0
    if report.get("self_test"):
        # With a planted fault, failures are the point: say what the exit code means.
        caught = report["self_test"]["caught"]
        return (
            "SELF-TEST PASS, planted fault caught"
            if ok
            else "SELF-TEST FAIL, "
            + ("planted fault NOT caught" if not caught else "other failures too")
        )
    return "PASS" if ok else "FAIL"


def _err(r: dict[str, Any] | None) -> str:
    if not r or r.get("max_rel_err") is None:
        return ""
    text = f"{r['max_rel_err']:.1e}"
    return text + (f" + {r['nan_count']} NaN" if r.get("nan_count") else "")


def _cell(rows: list[dict[str, Any]], op: str, dtype: str, check: str) -> str:
    for r in rows:
        if r["op"] == op and r["dtype"] == dtype and r["check"] == check:
            return _SYMBOL.get(r["status"], r["status"])
    return ""


def markdown(
    report: dict[str, Any], unexpected: list[dict[str, Any]], xpass: list[dict[str, Any]]
) -> str:
    dev, tv, summ = report["device"], report["torch"], report["summary"]
    lines = [
        report_title(dev),
        "",
        f"- Device: `{dev['type']}` = **{dev['name']}** (family `{dev['family']}`, name from {dev['name_source']})",
        f"- torch {tv['version']} (git {tv['git_version']}); patched MPS API: {tv['patched_mps_api']}",
        f"- Build info: `{tv['build_info']}`"
        if tv["build_info"]
        else "- Build info: none (not a patched wheel built by this project)",
        f"- Host: {report['host']['platform']}, Python {report['host']['python']}, CPU {report['host']['cpu']}",
        f"- Run: {report['started_at']} .. {report['finished_at']}; options {report['options']}",
        "- dtypes: "
        + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in report["dtype_support"].items()),
        "",
        (
            f"**Result: {_verdict(report)}** (exit {summ['exit_code']}): "
            f"{summ['unexpected_failures']} unexpected failure(s), "
            f"{summ['unexpected_passes']} unexpected pass(es); "
            f"{summ['ops_checked']} ops checked, "
            f"{summ['ops_passing_on_device']} passing on the device (every row of the op passes)"
            + (
                f"; failing: {', '.join(summ['ops_failing_on_device'])}."
                if summ["ops_failing_on_device"]
                else "."
            )
        ),
        "",
        "Counts: " + ", ".join(f"{k} {v}" for k, v in sorted(summ["counts"].items())),
        "",
        "Memory checks: "
        + (", ".join(f"{k} {v}" for k, v in sorted(summ["memory_counts"].items())) or "none"),
        "",
        "Shapes checks: "
        + (", ".join(f"{k} {v}" for k, v in sorted(summ.get("shape_counts", {}).items())) or "none"),
        "",
        "Public-report cases: "
        + (", ".join(f"{k} {v}" for k, v in sorted(summ.get("report_counts", {}).items())) or "none"),
        "",
        "Groups (each in its own process): "
        + ", ".join(f"{k} {v}" for k, v in summ["groups"].items()),
        "",
    ]
    if report.get("self_test"):
        st = report["self_test"]
        planted = ", ".join(
            f"`{p['op']}` ({'kernel' if p['mode'] == 'kernel' else p['mode'] if p['mode'] in ('nan', 'hang') else format(p['relative'], 'g') + ' relative noise'})"
            for p in st["planted"]
        )
        lines += [
            (
                f"**Self-test:** fault(s) planted in {planted}: "
                f"{'CAUGHT in ' + ', '.join(st['caught_in']) if st['caught'] else 'NOT CAUGHT: ' + ', '.join(st['missed'])}"
            ),
            "",
        ]
    broken = {k: g for k, g in report.get("groups", {}).items() if g["status"] == "error"}
    if broken:
        lines += ["## Groups that did not finish", ""]
        for name, g in broken.items():
            lines += [
                f"**group {name}**: {g['detail']} (exit {g['returncode']}). Last lines of its stderr:",
                "",
                "```",
                g["stderr_tail"].strip()[-2000:],
                "```",
                "",
            ]
    if unexpected:
        lines += [
            "## Unexpected failures",
            "",
            "| op | dtype | check | status | detail |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['op']} | {r['dtype']} | {r['check']} | {r['status']} | {str(r.get('detail', '')).replace('|', '/')} |"
            for r in unexpected
        ]
        lines.append("")
    if xpass:
        lines += [
            "## Unexpected passes (known failures that passed: update known_failures.yaml)",
            "",
            "| op | dtype | check | issue |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['op']} | {r['dtype']} | {r['check']} | {r['known']['issue']} |" for r in xpass
        ]
        lines.append("")
    known = [r for r in report["results"] if r["status"] == "xfail"]
    if known:
        lines += [
            "## Known failures seen",
            "",
            "| op | dtype | check | issue | reason |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['op']} | {r['dtype']} | {r['check']} | {r['known']['issue']} | {r['known']['reason']} |"
            for r in known
        ]
        lines.append("")
    for status, title in (
        ("unsupported", "Unsupported on this device"),
        ("fallback", "Ran through the MPS CPU fallback"),
    ):
        rows = [r for r in report["results"] if r["status"] == status]
        if rows:
            lines += (
                [f"## {title}", ""]
                + [f"- {r['op']} {r['dtype']} {r['check']}: {r.get('detail', '')}" for r in rows]
                + [""]
            )
    if report["training"]:
        lines += [
            "## Training smoke",
            "",
            "| model | status | steps | first loss (dev/CPU) | last loss (dev/CPU) | max abs diff | tolerance |",
            "|---|---|---|---|---|---|---|",
        ]
        for t in report["training"]:
            first = (
                f"{t['device_losses'][0]:.4f} / {t['cpu_losses'][0]:.4f}"
                if t["device_losses"]
                else "-"
            )
            last = (
                f"{t['device_losses'][-1]:.4f} / {t['cpu_losses'][-1]:.4f}"
                if t["device_losses"]
                else "-"
            )
            lines.append(
                f"| {t['model']} | {t['status']} {t['detail']} | {t['steps']} | {first} | {last} | "
                f"{t['max_abs_diff']:.2e} | {t['atol']:g} + {t['rtol']:g}*abs |"
            )
        lines.append("")
    lines += ["## Patched-build checks", "", "| check | status | detail |", "|---|---|---|"]
    lines += [
        f"| {c['name']} | {c['status']} | {str(c['detail']).replace('|', '/')} |"
        for c in report["patched_checks"]
    ]
    lines.append("")
    ops = []
    for r in report["results"]:
        if r["op"] != "*" and r["op"] not in ops:
            ops.append(r["op"])
    if ops:
        lines += [
            "## Op parity",
            "",
            "| op | family | float32 | float32 grad | float16 | bfloat16 | max rel err (f32) |",
            "|---|---|---|---|---|---|---|",
        ]
        for op in ops:
            fam = next(r["family"] for r in report["results"] if r["op"] == op)
            f32 = next(
                (
                    r
                    for r in report["results"]
                    if r["op"] == op and r["dtype"] == "float32" and r["check"] == "forward"
                ),
                None,
            )
            err = _err(f32)
            lines.append(
                f"| {op} | {fam} | {_cell(report['results'], op, 'float32', 'forward')} | "
                f"{_cell(report['results'], op, 'float32', 'grad')} | {_cell(report['results'], op, 'float16', 'forward')} | "
                f"{_cell(report['results'], op, 'bfloat16', 'forward') or _cell(report['results'], '*', 'bfloat16', 'forward')} | {err} |"
            )
        lines.append("")
    lines += _shapes_section(report)
    lines += _grid_section(report)
    lines += _soak_section(report)
    lines += _reports_section(report)
    lines += checks_section(
        "Sampling", report.get("sampling") or [],
        "Random ops checked by what every correct draw satisfies: range, zero-probability "
        "categories never drawn, moments within 6 standard errors, same seed same draw "
        "(tests/regress/_sampling.py).",
    )  # fmt: skip
    lines += _workloads_section(report)
    lines += checks_section(
        "Kernel compile probe", report.get("kernels") or [],
        "A compute pipeline for every function of torch's bundled Metal library, on this GPU "
        "(tests/regress/_kernels.py).",
    )  # fmt: skip
    if report.get("memory"):
        lines += [
            "## Memory paths",
            "",
            "Copies at unaligned offsets and odd sizes, non_blocking, strided and casting copies,",
            "scalar operands, `torch.where` with a scalar, `.item()`, large allocations, pinned memory.",
            "",
            "| check | status | detail |",
            "|---|---|---|",
        ]
        lines += [
            f"| {m['name']} | {_SYMBOL.get(m['status'], m['status'])} | {str(m.get('detail', '')).replace('|', '/')} |"
            for m in report["memory"]
        ]
        lines.append("")
    return "\n".join(lines)


def checks_section(title: str, rows: list[dict[str, Any]], intro: str) -> list[str]:
    """A group of (op, dtype, check, case) rows: counts per op, then every row not passing."""
    if not rows:
        return []
    lines = [f"## {title}", "", intro, "", "| op | pass | not passing |", "|---|---|---|"]
    by_op: dict[str, list[str]] = {}
    for r in rows:
        by_op.setdefault(r["op"], []).append(r["status"])
    for op, st in by_op.items():
        lines.append(f"| {op} | {st.count('pass')} | {len(st) - st.count('pass')} |")
    bad = [r for r in rows if r["status"] != "pass"]
    if bad:
        lines += ["", "| op | dtype | check | case | status | detail |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {r['op']} | {r['dtype']} | {r['check']} | {r['case']} | {r['status']} | "
            f"{str(r.get('detail', '')).replace('|', '/')} |"
            for r in bad
        ]
    return [*lines, ""]


def _shapes_section(report: dict[str, Any]) -> list[str]:
    rows = report.get("shapes") or []
    if not rows:
        return []
    notes = report.get("shapes_notes", {})
    lines = [
        "## Shapes (boundary sizes against a float64 reference)",
        "",
        f"Tolerance: `{notes.get('tolerance', '')}`. n is the reduction length of the case; "
        "s the magnitude of the summed terms (tests/regress/tolerances.yaml, `shapes`).",
        f"Large tensors: {notes.get('large', '')}; budget {notes.get('budget', '')}.",
        "",
    ]
    # How the accumulated bound grows: lambda * sqrt(n) * u_acc at a few lengths, per dtype.
    factors: dict[tuple[str, int], float] = {}
    for r in rows:
        if r.get("tol_factor") and r["check"] == "forward" and r["op"] in ("shapes.sum", "shapes.matmul"):
            factors.setdefault((f"{r['op'][7:]} {r['dtype']}", r["n"]), r["tol_factor"])
    lengths = sorted({n for _, n in factors})
    if lengths:
        shown = [n for n in lengths if n in (31, 33, 1025, 4097, 65537)] or lengths[:5]
        lines += ["| sqrt(n) term of the bound, per unit of s | " + " | ".join(f"n={n}" for n in shown) + " |",
                  "|---|" + "---|" * len(shown)]  # fmt: skip
        for key in sorted({k for k, _ in factors}):
            lines.append(f"| {key} | " + " | ".join(
                f"{factors[(key, n)]:.2g}" if (key, n) in factors else "" for n in shown) + " |")  # fmt: skip
        lines.append("")
    by_op: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        by_op.setdefault(r["op"], {}).setdefault(r["dtype"], []).append(r["status"])
    dtypes = [d for d in ("float32", "float16", "bfloat16", "int32", "int64", "uint8", "bool")
              if any(d in per for per in by_op.values())]  # fmt: skip
    lines += ["| op | " + " | ".join(dtypes) + " | worst err / bound |", "|---|" + "---|" * (len(dtypes) + 1)]
    for op, per in by_op.items():
        ratios = [r["err_ratio"] for r in rows if r["op"] == op and isinstance(r.get("err_ratio"), (int, float))
                  and r["err_ratio"] != float("inf")]  # fmt: skip
        cells = []
        for d in dtypes:
            st = per.get(d, [])
            ok = sum(1 for x in st if x == "pass")
            cells.append(f"{ok}/{len(st)} ok" if st else "")
        lines.append(f"| {op} | " + " | ".join(cells) + f" | {max(ratios):.2g} |" if ratios else f"| {op} | " + " | ".join(cells) + " | |")
    bad = [r for r in rows if r["status"] not in ("pass", "skip")]
    if bad:
        lines += ["", "| op | dtype | check | case | n | status | detail |", "|---|---|---|---|---|---|---|"]
        lines += [
            f"| {r['op']} | {r['dtype']} | {r['check']} | {r['case']} | {r['n']} | {r['status']} | "
            f"{str(r.get('detail', '')).replace('|', '/')} |"
            for r in bad[:60]
        ]
        if len(bad) > 60:
            lines.append(f"| ... | | | {len(bad) - 60} more in regress.json | | | |")
    lines.append("")
    return lines


def _reports_section(report: dict[str, Any]) -> list[str]:
    rows = report.get("reports") or []
    if not rows:
        return []
    lines = [
        "## Public reports (the cases of tests/regress/known_gpu_bugs.yaml)",
        "",
        "Each case at the shapes and values of a public Intel/AMD report, against the CPU with its",
        "op family's tolerances (tests/regress/tolerances.yaml); repeated cases compare every run.",
        "",
        "| case | dtype | status | runs | max abs err | what | detail |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        err = r.get("max_abs_err")
        lines.append(
            f"| {r['op']} | {r['dtype']} | {_SYMBOL.get(r['status'], r['status'])} | {r.get('runs', '')} | "
            f"{f'{err:.3g}' if isinstance(err, (int, float)) else ''} | {r['case']} | "
            f"{str(r.get('detail', '')).replace('|', '/')} |"
        )
    lines.append("")
    return lines


def _grid_section(report: dict[str, Any]) -> list[str]:
    """The regime grid: per op and regime class, what ran, what was skipped and why, and
    every row that did not pass."""
    table = report.get("grid_regimes") or []
    rows = report.get("grid") or []
    if not table:
        return []
    counts = report.get("summary", {}).get("grid_counts", {})
    lines = [
        "## Regime grid",
        "",
        "Every op at the regimes where GPU kernels change path, generated from per-op declarations",
        "(tests/regress/_grid.py): sizes, special values, optional arguments, memory layouts.",
        "Integer and index results, moved data and special values' positions exactly; other floats",
        "with the parity tolerances. Rows: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none")
        + (f"; memory budget: {report['grid_budget']}" if report.get("grid_budget") else "") + ".",
        "",
        "| op | class | declared | ran | failed | skipped (why) | not run (why) |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in table:
        if not t["declared"]:
            lines.append(f"| {t['op']} | {t['class']} | 0 | | | | none declared: {t['none'] or 'no reason given'} |")
            continue
        skipped = "; ".join(f"{k}: {v}" for k, v in t["skipped"].items()).replace("|", "/")
        not_run = f"{len(t['not_run'])}: {t['not_run_why']}" if t["not_run"] else ""
        lines.append(f"| {t['op']} | {t['class']} | {t['declared']} | {len(t['ran'])} | "
                     f"{', '.join(t['failed'])} | {skipped} | {not_run} |")  # fmt: skip
    bad = [r for r in rows if r["status"] not in ("pass", "skip")]
    if bad:
        lines += ["", "| row | dtype | regime | status | detail |", "|---|---|---|---|---|"]
        lines += [f"| {r['op']} | {r['dtype']} | {r['case']} | {_SYMBOL.get(r['status'], r['status'])} | "
                  f"{str(r.get('detail', '')).replace('|', '/')} |" for r in bad]  # fmt: skip
    lines.append("")
    return lines


def _soak_section(report: dict[str, Any]) -> list[str]:
    lines = []
    for r in report.get("soak") or []:
        lines += [
            "## Soak",
            "",
            f"{r['case']}: {_SYMBOL.get(r['status'], r['status'])} after {r.get('steps', 0)} steps in "
            f"{r.get('seconds', 0)} s; median step {r.get('median_step_ms')} ms, worst {r.get('worst_step_ms')} ms; "
            f"median by tenth of the run (ms): {r.get('median_step_ms_by_tenth')}. {r.get('detail', '')}",
            "",
        ]
    return lines


def _workloads_section(report: dict[str, Any]) -> list[str]:
    rows = report.get("workloads") or []
    if not rows:
        return []
    lines = [
        "## Workloads",
        "",
        "Small fixed models at the shapes real workloads use, against the CPU, forward (and",
        "backward where it trains), with the tolerances of tolerances.yaml's `workloads`",
        "(tests/regress/_workloads.py).",
        "",
        "| workload | row | dtype | status | max abs err | seconds | what | detail |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        err = r.get("max_abs_err")
        lines.append(
            f"| {r.get('workload', '')} | {r['op']} | {r['dtype']} | {_SYMBOL.get(r['status'], r['status'])} | "
            f"{f'{err:.3g}' if isinstance(err, (int, float)) else ''} | {r.get('seconds', '')} | {r['case']} | "
            f"{str(r.get('detail', '')).replace('|', '/')} |"
        )
    lines.append("")
    return lines


def console_summary(
    report: dict[str, Any], unexpected: list[dict[str, Any]], xpass: list[dict[str, Any]]
) -> str:
    summ = report["summary"]
    out = [
        f"regress: {summ['ops_checked']} ops checked, {summ['ops_passing_on_device']} passing; "
        + ", ".join(f"{k} {v}" for k, v in sorted(summ["counts"].items()))
        + "; memory checks: "
        + (", ".join(f"{k} {v}" for k, v in sorted(summ["memory_counts"].items())) or "none")
        + "; shapes checks: "
        + (", ".join(f"{k} {v}" for k, v in sorted(summ.get("shape_counts", {}).items())) or "none")
        + "; report cases: "
        + (", ".join(f"{k} {v}" for k, v in sorted(summ.get("report_counts", {}).items())) or "none")
        + "; grid rows: "
        + (", ".join(f"{k} {v}" for k, v in sorted(summ.get("grid_counts", {}).items())) or "none")
    ]
    out += [
        f"  group {name}: {g['detail']}"
        for name, g in report.get("groups", {}).items()
        if g["status"] == "error"
    ]
    for r in unexpected:
        out.append(
            f"  UNEXPECTED {r['status']}: {r['op']} {r['dtype']} {r['check']}: {r.get('detail', '')}"
        )
    for r in xpass:
        out.append(
            f"  unexpected pass: {r['op']} {r['dtype']} {r['check']} (issue {r['known']['issue']})"
        )
    if report.get("self_test"):
        out.append(
            f"  self-test: fault in {report['self_test']['planted_op']} "
            f"{'caught' if report['self_test']['caught'] else 'NOT caught'}"
        )
    return "\n".join(out)
