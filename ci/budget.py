"""The release workflow's time model: how long each job of ``release.yml`` is expected to run.

Nothing here has run on GitHub yet. Each figure below says where it comes from: a documented
limit, a timing a peer published, or an assumption of ours (said so). The first real run
replaces the assumptions: its job timings go into ``MEASURED`` below (see docs/releasing.md,
"Replacing the model with measurements"), and ``make ci-plan`` then shows both.

What the model decides:

* the compile time box of a warm-up job (``compile_minutes``), so that a warm-up job that
  restores, compiles and saves stays within ``BUDGET_SHARE`` of its timeout;
* how many warm-up jobs a line may take (``WARMUP_JOBS``; release.yml has that many), with
  a margin over the modelled need;
* each job's modelled minutes, which ``make ci-plan`` prints as its budget and a test holds
  to ``BUDGET_SHARE`` of the job's ``timeout-minutes``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..core.catalog import ReleaseLine
from ..core.errors import BuildError


@dataclass(frozen=True)
class Figure:
    value: float
    unit: str
    source: str


#: Every number the model uses, with its source. ``assumption`` marks our own estimates.
FIGURES: Mapping[str, Figure] = {
    "job_limit": Figure(
        360, "min",
        "GitHub docs, 'Actions limits': each job can run for up to 6 hours of execution time"),
    "budget_share": Figure(
        0.70, "of a job's timeout", "issue 24: a job's modelled time stays within 70% of it"),
    "peer_one_python": Figure(
        360, "min, a lower bound",
        "conda-forge admin-requests PR 1743 (2025-11-07): on Azure's Intel macOS agents the "
        "best run of pytorch 2.9.0 'hasn't been even able to finish compilation' in the 6 h "
        "limit, so the feedstock moved to cirun-macos-m4-large"),
    "peer_vcpus": Figure(
        3, "vCPU",
        "assumption: Azure's Microsoft-hosted macOS agents are sized as GitHub's Intel "
        "macos-13 runner, 3 CPUs and 14 GB (ruby/ruby PR 10074 lists those sizes)"),
    "runner_vcpus": Figure(
        4, "vCPU",
        "GitHub docs, 'GitHub-hosted runners': macos-15-intel has 4 vCPU, 14 GB RAM"),
    "peer_overrun": Figure(
        1.5, "x the peer's bound",
        "assumption: the peer's job was cut off at 6 h, so its compile took longer; 1.5x"),
    "upstream_full_build": Figure(
        35, "min",
        "pytorch PR 181171: a full macOS arm64 build takes ~35 min on macos-26-xlarge "
        "(cross-check only; arm64 compiles no AVX2/AVX512 kernels and no oneDNN)"),
    "upstream_extra_python": Figure(
        7, "min",
        "pytorch PR 181171: each further Python in a kept build/ recompiles libtorch_python "
        "and _C in ~7 min on macos-26-xlarge"),
    "arm_to_intel_cores": Figure(
        3, "x (6 M1 cores = 12 x86 cores, over our 4)",
        "pytorch PR 110432: cross-compiling on macos12-xl (12 x86 cores) was no faster "
        "than on macos-13-xlarge (6 M1 cores)"),
    "replay_direct": Figure(
        0.03, "of the compile already done",
        "assumption: a ccache direct-mode hit skips the preprocessor (ccache manual, "
        "'The direct mode'); a continuation with the same Python and flags gets those"),
    "replay_preprocessed": Figure(
        0.15, "of the bulk compile",
        "assumption, pessimistic: as if another Python's include paths changed every command "
        "line, so that hits came from the preprocessor mode, which still preprocesses each "
        "source (ccache manual, 'The preprocessor mode'). In 2.6.0's cmake/Dependencies.cmake "
        "Python's include dirs reach only targets that link pybind11 (Python::Module), so "
        "torch_cpu's hits are likely direct; the first run's `ccache -s` says which"),
    "setup": Figure(
        12, "min",
        "assumption: checkout, setup-python, the pinned native tools and the pinned build "
        "toolchain (pip --require-hashes) into a venv"),
    "cleanup": Figure(6, "min", "assumption: deleting unused Xcodes and simulator runtimes"),
    "cache_transfer": Figure(
        5, "min each way",
        "assumption: ~5.5 GB of ccache (issue 24's figure) at ~20-50 MB/s to or from the "
        "artifact or cache store"),
    "configure": Figure(6, "min", "assumption: CMake's configure of a PyTorch tree"),
    "reconfigure": Figure(
        3, "min",
        "assumption: the fail-fast step configures CMake alone (core/failfast.py), then the "
        "wheel build re-runs CMake on the kept cache; on a scikit-build-core line the "
        "configure-only pip wheel also packs a throwaway wheel of the Python files"),
    "mps_unit": Figure(
        1.5, "min on one vCPU",
        "assumption: one of upstream's MPS Objective-C++ sources, which include ATen's "
        "operator headers and the MPSGraph framework headers, compiled on one of the "
        "runner's vCPUs; the first run's fail-fast step log replaces it"),
    "shader_unit": Figure(
        0.25, "min on one vCPU",
        "assumption: `xcrun metal -c` of one of the line's .metal sources for one shader "
        "library; linking the library is counted in it"),
    "interrupt": Figure(
        3, "min",
        "ci/warmup.py: at the time box the compile gets SIGINT, SIGTERM, then SIGKILL, each "
        "after a grace of GRACE_SECONDS (60 s)"),
    "link": Figure(12, "min", "assumption: linking libtorch_cpu and libtorch_python"),
    "repair": Figure(
        11, "min",
        "pytorch PR 181171: delocate-listdeps took ~11 min per wheel; delocate-wheel, which "
        "we run, does less, so this bounds it"),
    "verify": Figure(10, "min", "assumption: our verify stage and the wheel checks"),
    "torchvision": Figure(
        30, "min", "assumption: torchvision's ~200 C++ sources and its wheel on 4 vCPU"),
    "test_wheel": Figure(12, "min", "assumption: a fresh venv, torch and torchvision, checks"),
    "cheap_job": Figure(3, "min", "assumption: a Linux job that only calls gh or Python"),
    "publish": Figure(
        10, "min", "assumption: uploading ~100 MB wheels to a release, or the index to Pages"),
    "ccache_size": Figure(
        5.5, "GB",
        "issue 24's figure for one line's build; ROCm/TheRock issue 4519 reports 8.9 GB of "
        "ccache for pytorch + torchaudio + torchvision with ROCm (an upper reference). "
        "Replace with 'Cache size' from the first warm-up's `ccache -s`"),
    "repo_cache_limit": Figure(
        10, "GB",
        "GitHub docs, 'Dependency caching': 10 GB per repository, least recently used "
        "entries evicted, entries unused for 7 days removed"),
}

@dataclass(frozen=True)
class FailFastCount:
    """What the fail-fast step (core/failfast.py) compiles of upstream's for one line."""

    mps_sources: int  # upstream's MPS Objective-C++ sources (estimated where no tree)
    shaders: int  # .metal sources the shader libraries compile
    libraries: int  # shader libraries (each compiles every shader once)
    source: str


#: The official arm64 wheel's libtorch_cpu.dylib names upstream's MPS sources in its error
#: locations (``__FILE__`` of TORCH_CHECK): 61 distinct .mm paths in 2.6.0, whose tree has
#: 69. Lines without a source tree here are estimated by that ratio from their binary's count
#: (tests/ci/test_ci_budget.py counts both again from the real tree and wheels).
TREE_MPS_2_6_0 = 69
BINARY_MPS_PATHS: Mapping[str, int] = {"2.6.0": 61, "2.9.1": 59, "2.14.1": 62, "2.15.0": 65}
#: Every .metal file under aten/src/ATen/native/mps in the stored history of upstream's
#: repository (not dated to a release): an upper bound for the lines without a tree here.
SHADERS_UPPER_BOUND = 74


def _estimated_mps(version: str) -> int:
    return math.ceil(BINARY_MPS_PATHS[version] * TREE_MPS_2_6_0 / BINARY_MPS_PATHS["2.6.0"])


#: Per line; the shader libraries are the official binary's __TEXT sections (metal_basic,
#: metal_bfloat, metal_40).
FAILFAST_COUNTS: Mapping[str, FailFastCount] = {
    "2.6.0": FailFastCount(
        TREE_MPS_2_6_0, 15, 2,
        "the real 2.6.0 tree: 9 .mm in aten/src/ATen/mps, 60 under native/mps; 15 .metal "
        "in native/mps/kernels, compiled for kernels_basic (metal3.0) and kernels_bfloat "
        "(metal3.1)"),
    "2.9.1": FailFastCount(
        _estimated_mps("2.9.1"), SHADERS_UPPER_BOUND, 1,
        "estimated from the official wheel (59 .mm paths); one library (metal_basic)"),
    "2.14.1": FailFastCount(
        _estimated_mps("2.14.1"), SHADERS_UPPER_BOUND, 2,
        "estimated from the official wheel (62 .mm paths); two libraries (metal_basic, metal_40)"),
    "2.15.0": FailFastCount(
        _estimated_mps("2.15.0"), SHADERS_UPPER_BOUND, 2,
        "estimated from the official wheel (65 .mm paths); two libraries (metal_basic, metal_40)"),
}


def failfast_count(version: str) -> FailFastCount:
    """The line's counts; a line the table lacks gets the largest (pessimistic)."""
    if version in FAILFAST_COUNTS:
        return FAILFAST_COUNTS[version]
    return max(FAILFAST_COUNTS.values(), key=lambda count: count.mps_sources + count.shaders * count.libraries)


def failfast_minutes(line: ReleaseLine) -> float:
    """How long the fail-fast step compiles on the runner before the bulk compile starts:
    the series' own units, upstream's MPS sources and every shader of each library."""
    from ..core import failfast  # the series' units; core does not import ci

    count = failfast_count(line.version)
    units = count.mps_sources + len(failfast.series_units(line.patches))
    cpu = units * figure("mps_unit") + count.shaders * count.libraries * figure("shader_unit")
    return cpu / figure("runner_vcpus")


def failfast_extra_minutes() -> float:
    """What the fail-fast step adds to a job: the full build reuses its objects and shader
    libraries, so only the cores it leaves idle while its last sources finish are lost, at
    most one MPS source on each idle vCPU. The same for every line."""
    return figure("mps_unit") * (figure("runner_vcpus") - 1) / figure("runner_vcpus")


#: How many warm-up jobs (the first and its continuations) release.yml has per line.
WARMUP_JOBS = 4
#: The warm-up jobs must be able to do this much more than the modelled compile.
WARMUP_MARGIN = 1.5

#: Measured job minutes of a real run, keyed like ``job_minutes``'s result ("wheel 2.14.1
#: / Python 3.12": 143). Empty until the first run; docs/releasing.md says how to fill it.
MEASURED: Mapping[str, float] = {}


def figure(name: str) -> float:
    return FIGURES[name].value


def bulk_compile_minutes(line: ReleaseLine) -> float:
    """The Python-independent compile of one line on the build runner, from the peer bound.

    The same for every line: the lines' compile sizes differ less than the model's
    uncertainty, and no line has a timing of its own yet.
    """
    del line
    scale = figure("peer_vcpus") / figure("runner_vcpus")
    return figure("peer_one_python") * scale * figure("peer_overrun")


def objcxx_minutes(line: ReleaseLine) -> float:
    """A wheel job's Objective-C++ compiles if every one missed the cache: the line's MPS
    ``.mm`` count (``failfast_count``: the real 2.6.0 tree, estimated from each other line's
    official binary) at ``mps_unit`` each, on all the runner's vCPUs. release.yml sets
    CMAKE_OBJCXX_COMPILER_LAUNCHER, so they go through ccache; counted as misses,
    pessimistically, as where another Python's include paths change the command line."""
    return failfast_count(line.version).mps_sources * figure("mps_unit") / figure("runner_vcpus")


def python_compile_minutes() -> float:
    """What one more Python compiles (libtorch_python, _C), scaled from upstream's figure."""
    return figure("upstream_extra_python") * figure("arm_to_intel_cores") * figure("peer_overrun")


def job_budget(timeout_minutes: float) -> float:
    # Rounded: 360 * 0.7 is 251.99999999999997 in floating point.
    return round(timeout_minutes * figure("budget_share"), 6)


def _warmup_overhead(replayed: float) -> float:
    """A warm-up job's minutes besides its compile time box."""
    return (figure("setup") + figure("cleanup") + figure("cache_transfer") * 2
            + figure("configure") + figure("reconfigure") + failfast_extra_minutes()
            + figure("interrupt") + replayed * figure("replay_direct"))


def compile_minutes(timeout_minutes: float = 360) -> int:
    """The compile time box of a warm-up job: its budget less everything else it does,
    counting the replay of the most that the earlier warm-up jobs can have compiled."""
    budget = job_budget(timeout_minutes)
    box = budget - _warmup_overhead(0)
    for _ in range(10):  # the replay depends on the box; a few rounds settle it
        box = budget - _warmup_overhead(box * (WARMUP_JOBS - 1))
    return math.floor(box)


@dataclass(frozen=True)
class WarmupPlan:
    jobs_needed: int
    capacity: float  # compile minutes WARMUP_JOBS jobs can do
    need: float  # modelled compile minutes


def warmup_plan(line: ReleaseLine, timeout_minutes: float = 360) -> WarmupPlan:
    need = bulk_compile_minutes(line)
    box = compile_minutes(timeout_minutes)
    return WarmupPlan(math.ceil(need / box), box * WARMUP_JOBS, need)


def job_minutes(kind: str, line: ReleaseLine | None = None, *,
                timeout_minutes: float = 360) -> float:
    """The modelled minutes of one job of ``kind`` (the release.yml job ids)."""
    if kind == "warmup":
        # The warm-up's Objective-C++ goes through ccache (CMAKE_OBJCXX_COMPILER_LAUNCHER);
        # its Metal shaders do not, and the bulk compile's figure covers them.
        return _warmup_overhead(compile_minutes(timeout_minutes) * (WARMUP_JOBS - 1)) + (
            compile_minutes(timeout_minutes))
    if kind == "wheel":
        if line is None:
            raise BuildError("the wheel job's model needs its line")
        minutes = (figure("setup") + figure("cleanup") + figure("cache_transfer")
                   + figure("configure") + figure("reconfigure") + failfast_extra_minutes()
                   + bulk_compile_minutes(line) * figure("replay_preprocessed")
                   + python_compile_minutes() + figure("link") + figure("repair")
                   + figure("verify") + objcxx_minutes(line))
        return minutes
    if kind == "vision":
        return (figure("setup") + figure("cleanup") + figure("torchvision") + figure("repair")
                + figure("verify"))
    if kind in ("test-wheel", "regress-gpu"):
        return figure("test_wheel")
    if kind in ("release", "pages", "attest"):
        return figure("publish")
    return figure("cheap_job")


def cache_lines_that_fit() -> int:
    """How many lines' ccache entries the repository's cache holds at once."""
    return max(1, math.floor(figure("repo_cache_limit") / figure("ccache_size")))


def ccache_maxsize() -> str:
    """CCACHE_MAXSIZE for one line: the whole build's objects, so that nothing it compiled
    is evicted before the wheel jobs reuse it (ccache evicts the oldest first)."""
    return f"{math.ceil(figure('ccache_size') * 1.2)}G"
