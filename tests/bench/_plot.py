"""Markdown table and PNG plot of a benchmark report."""

from __future__ import annotations

import textwrap
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
        f"- torch {report['torch']['version']}; float32 matmul precision `{opts['float32_matmul_precision']}` "
        + (
            f"(set with `--float32-matmul-precision {opts['float32_matmul_precision_requested']}`)"
            if opts.get("float32_matmul_precision_requested")
            else "(torch's setting; change it with `--float32-matmul-precision`)"
        )
        + f"; TF32 for matmul {'on' if opts['tf32'] else 'off'}, for cuDNN convolutions {'on' if opts.get('tf32_conv') else 'off'}",
        "- Percent of peak, one rule: a float32 kernel is held to the TF32 peak when TF32 is allowed "
        "in any library it runs in (cuBLAS matmuls, cuDNN convolutions), else to the FP32 peak.",
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
    pairs = aligned_pairs(report)
    if pairs:
        lines += [
            "## Aligned against unaligned sizes",
            "",
            "float32 matmul at n and n + 1 on the device: the drop a size off the GPU's tile gives.",
            "",
            "| layout | n | n + 1 | GFLOPS at n | GFLOPS at n + 1 | change | % of peak at n | % of peak at n + 1 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for p in pairs:
            pa, pu = p["pct_peak_aligned"], p["pct_peak_unaligned"]
            lines.append(
                f"| {p['layout']} | {p['n']} | {p['n'] + 1} | {p['gflops_aligned']:.1f} | "
                f"{p['gflops_unaligned']:.1f} | {p['change_pct']:+.0f}% | "
                f"{'' if pa is None else f'{pa:.1f}%'} | {'' if pu is None else f'{pu:.1f}%'} |"
            )
        lines.append("")
    alone = device_only(report)
    if alone:
        lines += [f"Device only (no CPU baseline): {', '.join(alone)}.", ""]
    for row in report["kernels"]:
        if row.get("percent_of_measured_bf16") is not None:
            lines.append(
                f"- {row['name']}: {row['percent_of_measured_bf16']:.1f}% of the bf16 rate measured on this "
                f"GPU model ({peak['measured_bf16_gflops'] / 1e3:.0f} TFLOP/s, the peak table's reference)"
            )
    lines.append("")
    return "\n".join(lines)


def matmul_peak(report: dict[str, Any]) -> tuple[float | None, str]:
    """The peak a float32 matmul is held to (TF32 when allowed), and its label."""
    peak = report.get("peak") or {}
    if report["options"].get("tf32") and peak.get("tf32_gflops"):
        return peak["tf32_gflops"], "TF32 peak"
    return peak.get("fp32_gflops"), "FP32 peak"


def aligned_pairs(report: dict[str, Any]) -> list[dict[str, Any]]:
    """float32 matmuls at n and n + 1 (1024 against 1025), per layout, with the change in rate."""
    mm = {
        (r["params"]["layout"], r["params"]["n"]): r
        for r in report["kernels"]
        if r["group"] == "matmul" and r["dtype"] == "float32" and r["device"].get("gflops")
    }
    pairs = []
    for (layout, n), a in sorted(mm.items()):
        u = mm.get((layout, n + 1))
        if u is None:
            continue
        ga, gu = a["device"]["gflops"], u["device"]["gflops"]
        pairs.append(
            {
                "layout": layout,
                "n": n,
                "gflops_aligned": ga,
                "gflops_unaligned": gu,
                "change_pct": 100.0 * (gu / ga - 1.0),
                "pct_peak_aligned": a.get("percent_of_peak"),
                "pct_peak_unaligned": u.get("percent_of_peak"),
            }
        )
    return pairs


def device_only(report: dict[str, Any]) -> list[str]:
    return [
        r["name"]
        for r in report["kernels"]
        if "median_s" in r["device"] and not any("median_s" in r.get(b, {}) for b in _BASES)
    ]


_BASES = ("cpu_1_thread", "cpu_all_threads")


def figure(report: dict[str, Any]) -> Any:
    """Three panels: speedup per kernel against both CPU baselines; matmul GFLOPS against size
    (aligned sizes), the peak as a line; aligned against unaligned sizes side by side."""
    import matplotlib

    matplotlib.use("Agg")  # no display on CI machines or over ssh
    import matplotlib.pyplot as plt

    rows = report["kernels"]
    fig, (ax1, ax2, ax3) = plt.subplots(
        1, 3, figsize=(20, 6.5), gridspec_kw={"width_ratios": [1.3, 1, 1]}
    )
    # Kernels without a CPU baseline (the bf16 product) would be empty bars: left out, named.
    shown = [
        r
        for r in rows
        if "median_s" in r["device"] and any("median_s" in r.get(b, {}) for b in _BASES)
    ]
    for offset, base, label in (
        (-0.2, "cpu_1_thread", "vs CPU 1 thread"),
        (0.2, "cpu_all_threads", "vs CPU all threads"),
    ):
        vals = [
            r[base]["median_s"] / r["device"]["median_s"]
            if "median_s" in r.get(base, {})
            else float("nan")
            for r in shown
        ]
        ax1.barh([i + offset for i in range(len(shown))], vals, height=0.4, label=label)
    ax1.set_yticks(range(len(shown)))
    ax1.set_yticklabels([r["name"] for r in shown], fontsize=7)
    ax1.set_xscale("log")
    ax1.axvline(1.0, color="black", linewidth=0.8)
    ax1.set_xlabel("speedup of the device (log; < 1 means the CPU is faster)")
    ax1.set_title(f"{report['device']['name']}: speedup per kernel")
    ax1.legend(fontsize=8, loc="lower right")
    alone = device_only(report)
    if alone and not shown:
        ax1.text(0.5, 0.5, "no CPU baseline measured (--no-cpu)", ha="center", transform=ax1.transAxes)
    elif alone:
        ax1.text(
            0.01,
            -0.09,
            textwrap.fill("not shown (no CPU baseline, device only): " + ", ".join(alone), 90),
            transform=ax1.transAxes,
            fontsize=8,
            va="top",
        )

    peak, peak_label = matmul_peak(report)
    pairs = aligned_pairs(report)
    odd = {p["n"] + 1 for p in pairs}
    for layout, style in (("NN", "-o"), ("NT", "--s")):
        mm = sorted(
            (
                r
                for r in rows
                if r["group"] == "matmul"
                and r["dtype"] == "float32"
                and r["params"].get("layout") == layout
                and r["params"]["n"] not in odd  # unaligned sizes: their own panel
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
    if peak:
        ax2.axhline(peak, color="red", linestyle=":", label=f"{peak_label} {peak / 1e3:g} TFLOP/s")
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("matrix size n (n x n x n, float32; aligned sizes)")
    ax2.set_ylabel("GFLOPS")
    ax2.set_title("matmul GFLOPS against size")
    ax2.legend(fontsize=8)

    if pairs:
        labels, values, colors = [], [], []
        for p in pairs:
            labels += [f"{p['layout']} {p['n']}", f"{p['layout']} {p['n'] + 1}"]
            values += [p["gflops_aligned"], p["gflops_unaligned"]]
            colors += ["tab:blue", "tab:orange"]
        xs = list(range(len(values)))
        ax3.bar(xs, values, color=colors)
        ax3.set_xticks(xs)
        ax3.set_xticklabels(labels, fontsize=8)
        top = max(values + ([peak] if peak else []))
        for k, p in enumerate(pairs):
            ax3.text(
                2 * k + 0.5,
                max(p["gflops_aligned"], p["gflops_unaligned"]) + 0.02 * top,
                f"{p['change_pct']:+.0f}%",
                ha="center",
                fontsize=10,
                fontweight="bold",
            )
        if peak:
            ax3.axhline(peak, color="red", linestyle=":", label=f"{peak_label} {peak / 1e3:g} TFLOP/s")
            ax3.legend(fontsize=8)
        ax3.set_ylim(0, top * 1.12)
    else:
        ax3.text(0.5, 0.5, "no n / n + 1 matmul pair measured", ha="center", transform=ax3.transAxes)
    ax3.set_ylabel("GFLOPS (linear)")
    ax3.set_title("aligned n against unaligned n + 1 (float32 matmul)")
    fig.tight_layout()
    return fig


def png(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = figure(report)
    fig.savefig(path, dpi=110)
    plt.close(fig)
