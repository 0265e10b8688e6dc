"""Peak rates of known GPUs, for "percent of peak". Unknown devices get no percentage.

Every number names its source. "vendor" figures are the maker's published peak; "clock" figures
are computed as ALUs x 2 FLOP (FMA) x boost clock where the maker publishes no FLOPS figure,
and are estimates. Intel Gen9/Gen11 EUs do 16 FP32 FLOP per clock (2 x SIMD4 FMA).
Bandwidths are the memory interface's peak (shared DDR/LPDDR for Intel iGPUs and Apple).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    name: str
    pattern: str  # regex on the lower-cased device name
    fp32_gflops: float
    bandwidth_gbs: float | None
    source: str
    tf32_gflops: float | None = None  # NVIDIA tensor cores, dense
    bf16_gflops: float | None = None  # dense; None where the GPU has no bf16 arithmetic
    fp16_gflops: float | None = None
    measured_bf16_gflops: float | None = None  # seen on the validation machine, with where


_H200_SOURCE = (
    "NVIDIA H200 Tensor Core GPU datasheet (SXM): FP32 67 TFLOPS, TF32 989 and BF16 1979 "
    "TFLOPS with sparsity (halved here for dense), 4.8 TB/s HBM3e"
)
_H100_SOURCE = (
    "NVIDIA H100 Tensor Core GPU datasheet: SXM FP32 67, TF32 989 / BF16 1979 TFLOPS with "
    "sparsity (halved for dense), 3.35 TB/s; PCIe FP32 51, TF32 756 / BF16 1513 sparse, 2.0 TB/s; "
    "NVL FP32 60, TF32 835 / BF16 1671 sparse, 3.9 TB/s"
)

PEAKS: tuple[Peak, ...] = (
    # --- NVIDIA (validation machines) ---
    Peak(
        "NVIDIA H200",
        r"\bh200\b",
        67_000,
        4800,
        _H200_SOURCE,
        tf32_gflops=494_500,
        bf16_gflops=989_500,
        fp16_gflops=989_500,
        measured_bf16_gflops=790_000,
    ),  # 8192^3 bf16 on random data, this workplace's H200 (KINDS.md)
    Peak(
        "NVIDIA H100 PCIe",
        r"\bh100\b.*pcie",
        51_000,
        2000,
        _H100_SOURCE,
        tf32_gflops=378_000,
        bf16_gflops=756_500,
        fp16_gflops=756_500,
    ),
    Peak(
        "NVIDIA H100 NVL",
        r"\bh100\b.*\bnvl\b",
        60_000,
        3900,
        _H100_SOURCE,
        tf32_gflops=417_500,
        bf16_gflops=835_500,
        fp16_gflops=835_500,
    ),
    # The SXM part is named "NVIDIA H100 80GB HBM3" (or "... SXM5 ..."). A bare "H100" could be
    # any variant: it gets no entry, hence no percentage, rather than the SXM's figures.
    Peak(
        "NVIDIA H100 SXM",
        r"\bh100\b.*\b(sxm\d?|hbm3)\b",
        67_000,
        3350,
        _H100_SOURCE,
        tf32_gflops=494_500,
        bf16_gflops=989_500,
        fp16_gflops=989_500,
        measured_bf16_gflops=798_000,
    ),  # 8192^3 bf16 on random data, this workplace's "NVIDIA H100 80GB HBM3" (KINDS.md, 2026-11-13)
    # --- Intel (Gen9 / Gen9.5) ---
    Peak(
        "Intel UHD Graphics 630",
        r"uhd graphics 630",
        403,
        42.7,
        "clock: 24 EU x 16 x 1.05 GHz = 403 GFLOPS, the peak the public dlprimitives-vs-MPS logs assume "
        "(1.15-1.25 GHz parts reach 442-480); DDR4-2666 dual channel",
        fp16_gflops=806,
    ),
    Peak(
        "Intel Iris Plus Graphics 640",
        r"iris plus graphics 640",
        768,
        34.1,
        "clock: 48 EU x 16 x 1.0 GHz; LPDDR3-2133",
        fp16_gflops=1536,
    ),
    Peak(
        "Intel Iris Plus Graphics 645",
        r"iris plus graphics 645",
        806,
        34.1,
        "clock: 48 EU x 16 x 1.05 GHz; LPDDR3-2133",
        fp16_gflops=1612,
    ),
    Peak(
        "Intel Iris Plus Graphics 655",
        r"iris plus graphics 655",
        806,
        34.1,
        "clock: 48 EU x 16 x 1.05 GHz (about 806 GFLOPS, ../shared/UPSTREAM.md); LPDDR3-2133",
        fp16_gflops=1612,
    ),
    # --- AMD in Macs (vendor = AMD/Apple published peak) ---
    Peak(
        "AMD Radeon Pro 555X",
        r"radeon pro 555x?\b",
        1300,
        81,
        "Apple: up to 1.3 TFLOPS (MacBook Pro 2017/2018); 4 GB GDDR5",
    ),
    Peak(
        "AMD Radeon Pro 560X",
        r"radeon pro 560x?\b",
        1900,
        81,
        "Apple: up to 1.9 TFLOPS (MacBook Pro 2017/2018); 4 GB GDDR5",
    ),
    Peak("AMD Radeon Pro 570X", r"radeon pro 570x?\b", 3600, 218, "Apple: 3.6 TFLOPS (iMac 2017)"),
    Peak("AMD Radeon Pro 575X", r"radeon pro 575x?\b", 4500, 218, "Apple: 4.5 TFLOPS (iMac 2017)"),
    Peak("AMD Radeon Pro 580X", r"radeon pro 580x?\b", 5500, 218, "Apple: 5.5 TFLOPS (iMac 2017)"),
    Peak(
        "AMD Radeon Pro 5300M", r"5300m", 3200, 192, "AMD: up to 3.2 TFLOPS; GDDR6 128-bit 12 Gbps"
    ),
    Peak(
        "AMD Radeon Pro 5500M", r"5500m", 4000, 192, "AMD: up to 4.0 TFLOPS; GDDR6 128-bit 12 Gbps"
    ),
    Peak("AMD Radeon Pro 5600M", r"5600m", 5300, 394, "AMD: up to 5.3 TFLOPS; HBM2"),
    Peak(
        "AMD Radeon Pro 5700 XT",
        r"radeon pro 5700 xt",
        7600,
        448,
        "AMD/Apple: up to 7.6 TFLOPS (iMac 2020)",
    ),
    Peak(
        "AMD Radeon Pro 5700",
        r"radeon pro 5700\b",
        6200,
        448,
        "AMD/Apple: up to 6.2 TFLOPS (iMac 2020)",
    ),
    Peak("AMD Radeon Pro W5700X", r"w5700x", 9500, 448, "AMD: up to 9.5 TFLOPS (Mac Pro 2019)"),
    Peak(
        "AMD Radeon Pro Vega 16",
        r"vega 16\b",
        2400,
        307,
        "clock: 1024 SP x 2 x 1.19 GHz (estimate); HBM2",
    ),
    Peak(
        "AMD Radeon Pro Vega 20",
        r"vega 20\b",
        3300,
        307,
        "clock: 1280 SP x 2 x 1.3 GHz (estimate); HBM2",
    ),
    Peak(
        "AMD Radeon Pro Vega 48",
        r"vega 48\b",
        7400,
        410,
        "clock: 3072 SP x 2 x 1.2 GHz (estimate); HBM2",
    ),
    Peak("AMD Radeon Pro Vega 56", r"vega 56\b", 11000, 410, "Apple: 11 TFLOPS (iMac Pro)"),
    Peak(
        "AMD Radeon Pro Vega 64X",
        r"vega 64x\b",
        12300,
        410,
        "AMD/Apple: 12.3 TFLOPS (iMac Pro 2019)",
    ),
    Peak(
        "AMD Radeon Pro Vega 64", r"vega 64\b", 11000, 410, "Apple: up to 11 TFLOPS (iMac Pro 2017)"
    ),
    Peak(
        "AMD Radeon Pro Vega II",
        r"vega ii\b",
        14100,
        1000,
        "Apple: 14.1 TFLOPS (Mac Pro 2019); HBM2 1 TB/s",
    ),
    Peak(
        "AMD Radeon RX 580",
        r"\brx 580\b",
        6170,
        256,
        "AMD: 6.17 TFLOPS (2304 SP x 2 x 1.34 GHz); GDDR5 256 GB/s",
    ),
    Peak(
        "AMD Radeon RX 5700 XT",
        r"\brx 5700 xt\b",
        9750,
        448,
        "AMD: 9.75 TFLOPS boost; GDDR6 448 GB/s",
    ),
    Peak(
        "AMD Radeon RX 6800 XT",
        r"\brx 6800 xt\b",
        20740,
        512,
        "AMD: 20.74 TFLOPS boost; GDDR6 512 GB/s",
    ),
    Peak(
        "AMD Radeon RX 6800", r"\brx 6800\b", 16170, 512, "AMD: 16.17 TFLOPS boost; GDDR6 512 GB/s"
    ),
    Peak(
        "AMD Radeon RX 6900 XT",
        r"\brx 6900 xt\b",
        23040,
        512,
        "AMD: 23.04 TFLOPS boost; GDDR6 512 GB/s",
    ),
    Peak(
        "AMD Radeon Pro W6800X",
        r"w6800x",
        16000,
        512,
        "AMD: up to 16.0 TFLOPS (Mac Pro MPX module)",
    ),
    Peak(
        "AMD Radeon Pro W6900X",
        r"w6900x",
        22200,
        512,
        "AMD: up to 22.2 TFLOPS (Mac Pro MPX module)",
    ),
    # --- Apple silicon (Apple's keynote figures; full-core variants) ---
    Peak("Apple M1 Ultra", r"apple m1 ultra", 21000, 800, "Apple: 21 TFLOPS (64-core GPU)"),
    Peak("Apple M1 Max", r"apple m1 max", 10400, 400, "Apple: 10.4 TFLOPS (32-core GPU)"),
    Peak(
        "Apple M1 Pro",
        r"apple m1 pro",
        5200,
        200,
        "Apple: 5.2 TFLOPS (16-core GPU; the 14-core part has 4.5)",
    ),
    Peak("Apple M1", r"apple m1\b", 2600, 68.25, "Apple: 2.6 TFLOPS (8-core GPU)"),
    Peak("Apple M2 Ultra", r"apple m2 ultra", 27200, 800, "Apple: 27.2 TFLOPS (76-core GPU)"),
    Peak("Apple M2 Max", r"apple m2 max", 13600, 400, "Apple: 13.6 TFLOPS (38-core GPU)"),
    Peak("Apple M2 Pro", r"apple m2 pro", 6800, 200, "Apple: 6.8 TFLOPS (19-core GPU)"),
    Peak("Apple M2", r"apple m2\b", 3600, 100, "Apple: 3.6 TFLOPS (10-core GPU)"),
    Peak(
        "Apple M3",
        r"apple m3\b(?! (pro|max|ultra))",
        3580,
        100,
        "clock: 10 cores x 128 ALUs x 2 x 1.398 GHz (estimate: Apple publishes no FLOPS for M3)",
    ),
    Peak(
        "Apple M4",
        r"apple m4\b(?! (pro|max|ultra))",
        4040,
        120,
        "clock: 10 cores x 128 ALUs x 2 x 1.578 GHz (estimate: Apple publishes no FLOPS for M4)",
    ),
)


def lookup(device_name: str) -> Peak | None:
    # Metal spells Intel GPUs "Intel(R) Iris(TM) Plus Graphics 655": drop the marks first.
    low = " ".join(re.sub(r"\((r|tm)\)", " ", device_name.lower()).split())
    for peak in PEAKS:
        if re.search(peak.pattern, low):
            return peak
    return None


def compute_peak(peak: Peak | None, dtype: str, tf32: bool) -> float | None:
    """GFLOPS peak that a kernel in `dtype` can reach (tf32: float32 matmul on tensor cores)."""
    if peak is None:
        return None
    if dtype == "float32":
        return peak.tf32_gflops if tf32 and peak.tf32_gflops else peak.fp32_gflops
    if dtype == "bfloat16":
        return peak.bf16_gflops
    if dtype == "float16":
        return peak.fp16_gflops
    return None
