"""Markdown table and PNG plot of a benchmark report."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _fmt_time(r: dict[str, Any]) -> str:
    if "median_s" not in r:
        return r.get("error", "-") if r else "-"
    return f"{r['median_s'] * 1e3:.3f} ({r['q1_s'] * 1e3:.3f}-{r['q3_s'] * 1e3:.3f})"


def _fmt_rate(r: dict[str, Any]) -> str:
    if r.get("gflops"):
        return f"{r['gflops']:.1f} GFLOPS"
    if r.get("gbps"):
        return f"{r['gbps']:.1f} GB/s"
    return "-"


def _speed(row: dict[str, Any], base: str) -> str:
    b, d = row.get(base, {}), row["device"]
    if "median_s" in b and "median_s" in d:
        return f"{b['median_s'] / d['median_s']:.2f}x"
    return "-"


def markdown(report: dict[str, Any]) -> str:
    dev, opts = report["device"], report["options"]
    peak = report["peak"]
    lines = [
        "# CPU-vs-GPU benchmark",
        "",
        f"- Device: `{dev['type']}` = **{dev['name']}** (family `{dev['family']}`)",
        f"- Peak table entry: {peak['name'] + ' - ' + peak['source'] if peak else 'none (unknown device: no percent of peak)'}",
        f"- CPU: {report['host']['cpu']}, {opts['cpu_threads_all']} threads for the all-threads baseline",
        f"- torch {report['torch']['version']}; float32 matmul precision `{opts['float32_matmul_precision']}` (TF32 for matmul {'on' if opts['tf32'] else 'off'}, for cuDNN convolutions {'on' if opts.get('tf32_conv') else 'off'})",
        (
            "- conv2d GFLOPS count direct-convolution FLOPs; Winograd/FFT algorithms do fewer, "
            "so their effective rate can pass the peak."
        ),
        f"- Run: {report['started_at']} .. {report['finished_at']}{' (SMOKE: tiny sizes, numbers mean nothing)' if opts['smoke'] else ''}",
        "- Times are medians in ms with the interquartile range, after warm-up, with device synchronisation.",
        "",
    ]
    sp = report["speedup"]
    if sp:
        lines += [
            "| speedup of the device over | geometric mean | worst case | best case | kernels slower than the CPU |",
            "|---|---|---|---|---|",
        ]
        for base, s in sp.items():
            lines.append(
                f"| {base.replace('_', ' ')} | {s['geomean']:.2f}x | {s['worst']:.2f}x ({s['worst_kernel']}) | "
                f"{s['best']:.2f}x ({s['best_kernel']}) | {', '.join(s['slower_than_cpu']) or 'none'} |"
            )
        lines.append("")
    lines += [
        "| kernel | device ms (IQR) | device rate | % of peak | CPU 1 thread ms | CPU all threads ms | vs 1 thread | vs all threads |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in report["kernels"]:
        pct = f"{row['percent_of_peak']:.1f}%" if row["percent_of_peak"] is not None else ""
        lines.append(
            f"| {row['name']} | {_fmt_time(row['device'])} | {_fmt_rate(row['device'])} | {pct} | "
            f"{_fmt_time(row.get('cpu_1_thread', {}))} | {_fmt_time(row.get('cpu_all_threads', {}))} | "
            f"{_speed(row, 'cpu_1_thread')} | {_speed(row, 'cpu_all_threads')} |"
        )
    lines.append("")
    for row in report["kernels"]:
        if row.get("percent_of_measured_bf16") is not None:
            lines.append(
                f"- {row['name']}: {row['percent_of_measured_bf16']:.1f}% of the bf16 rate measured on this "
                f"GPU model ({peak['measured_bf16_gflops'] / 1e3:.0f} TFLOP/s, the peak table's reference)"
            )
    lines.append("")
    return "\n".join(lines)


def png(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display on CI machines or over ssh
    import matplotlib.pyplot as plt

    rows = report["kernels"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 6))
    names = [r["name"] for r in rows if "median_s" in r["device"]]
    for offset, base, label in (
        (-0.2, "cpu_1_thread", "vs CPU 1 thread"),
        (0.2, "cpu_all_threads", "vs CPU all threads"),
    ):
        vals = []
        for r in rows:
            if "median_s" not in r["device"]:
                continue
            b = r.get(base, {})
            vals.append(
                b["median_s"] / r["device"]["median_s"] if "median_s" in b else float("nan")
            )
        ax1.barh([i + offset for i in range(len(names))], vals, height=0.4, label=label)
    ax1.set_yticks(range(len(names)))
    ax1.set_yticklabels(names, fontsize=7)
    ax1.set_xscale("log")
    ax1.axvline(1.0, color="black", linewidth=0.8)
    ax1.set_xlabel("speedup of the device (log; < 1 means the CPU is faster)")
    ax1.set_title(f"{report['device']['name']}: speedup per kernel")
    ax1.legend(fontsize=8)
    for layout, style in (("NN", "-o"), ("NT", "--s")):
        mm = sorted(
            (
                r
                for r in rows
                if r["group"] == "matmul"
                and r["dtype"] == "float32"
                and r["params"].get("layout") == layout
            ),
            key=lambda r: r["params"]["n"],
        )
        for source, label in (
            ("device", report["device"]["type"]),
            ("cpu_1_thread", "CPU 1 thread"),
            ("cpu_all_threads", "CPU all threads"),
        ):
            pts = [
                (r["params"]["n"], r[source]["gflops"])
                for r in mm
                if r.get(source, {}).get("gflops")
            ]
            if pts:
                ax2.plot([p[0] for p in pts], [p[1] for p in pts], style, label=f"{label} {layout}")
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("matrix size n (n x n x n, float32)")
    ax2.set_ylabel("GFLOPS")
    ax2.set_title("matmul GFLOPS against size")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
