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
    "interrupt": Figure(
        3, "min",
        "ci/warmup.py: at the time box the compile gets SIGINT, SIGTERM, then SIGKILL, each "
        "after a grace of GRACE_SECONDS (60 s)"),
    "link": Figure(12, "min", "assumption: linking libtorch_cpu and libtorch_python"),
    "objcxx_file": Figure(
        0.15, "min per Objective-C++ file on a cache miss",
        "assumption: an aten/src/ATen/native/mps .mm file on 4 vCPU; release.yml sets "
        "CMAKE_OBJCXX_COMPILER_LAUNCHER, so a wheel job misses only where another Python's "
        "include paths change the command line (counted as misses here, pessimistically)"),
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

#: Objective-C++ (.mm) files per line: `find . -name '*.mm' | wc -l` in the line's
#: source tree (2.6.0 from /work/shared/tools/upstream-src); lines without a source tree here
#: take the largest count known.
OBJCXX_FILES: Mapping[str, int] = {"2.6.0": 113}

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
    """A wheel job's Objective-C++ compiles, if every one missed the cache: the line's .mm
    count (an unpacked official wheel cannot tell it; ``OBJCXX_FILES`` holds the counts read
    from each line's source tree, or the largest one known for a line not counted yet)."""
    count = OBJCXX_FILES.get(line.version, max(OBJCXX_FILES.values()))
    return count * figure("objcxx_file")


def python_compile_minutes() -> float:
    """What one more Python compiles (libtorch_python, _C), scaled from upstream's figure."""
    return figure("upstream_extra_python") * figure("arm_to_intel_cores") * figure("peer_overrun")


def job_budget(timeout_minutes: float) -> float:
    # Rounded: 360 * 0.7 is 251.99999999999997 in floating point.
    return round(timeout_minutes * figure("budget_share"), 6)


def _warmup_overhead(replayed: float) -> float:
    """A warm-up job's minutes besides its compile time box."""
    return (figure("setup") + figure("cleanup") + figure("cache_transfer") * 2
            + figure("configure") + figure("reconfigure") + figure("interrupt") + replayed * figure("replay_direct"))


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
                   + figure("configure") + figure("reconfigure") + bulk_compile_minutes(line) * figure("replay_preprocessed")
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
