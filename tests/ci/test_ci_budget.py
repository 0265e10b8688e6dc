"""The release workflow's time model (ci/budget.py): every job within 70% of its timeout,
every figure with its source, and enough warm-up jobs for the modelled compile."""

from __future__ import annotations

import os
import re
import shutil
import struct
from pathlib import Path

import pytest
from ci_support import RELEASE, pinned_catalog, run_cli
from intelmac_torch_builder.core import catalog as catalog_module

from intelmac_torch_builder.ci import budget, plan


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> catalog_module.Catalog:
    return catalog_module.load(pinned_catalog(tmp_path_factory.mktemp("catalog")))


def plans(catalog: catalog_module.Catalog, workflow: Path = RELEASE) -> list[plan.Plan]:
    return [
        plan.make_plan(workflow, catalog, tag="release-20261122"),
        *(plan.make_plan(workflow, catalog, tag=f"v{version}-1") for version in catalog.versions),
        plan.make_plan(workflow, catalog),  # a workflow_dispatch of every line
        plan.make_plan(workflow, catalog, lines="2.14.1", pythons="3.12"),  # the canary
    ]


def test_every_job_is_modelled_within_70_percent_of_its_timeout(
        catalog: catalog_module.Catalog) -> None:
    for result in plans(catalog):
        assert plan.over_budget(result) == [], result.description
        for job in result.jobs:
            for run in job.runs:
                assert run.budget_minutes > 0, f"{run.name} has no model"


def test_the_budget_check_fails_a_job_over_its_share(tmp_path: Path,
                                                      catalog: catalog_module.Catalog) -> None:
    # The same graph with the wheel jobs given two hours: the model's ~150-200 minutes no
    # longer fit 70% of that.
    tight = tmp_path / "release.yml"
    shutil.copy(RELEASE, tight)
    text = tight.read_text()
    marker = "  wheel:\n"
    head, tail = text.split(marker, 1)
    tight.write_text(head + marker + tail.replace("timeout-minutes: 360", "timeout-minutes: 120", 1))
    over = plan.over_budget(plan.make_plan(tight, catalog, tag="v2.14.1-1"))
    assert over and all(item.startswith("wheel 2.14.1 / Python") for item in over)


def test_every_figure_names_its_source() -> None:
    for name, figure in budget.FIGURES.items():
        assert figure.value > 0 and figure.unit, name
        assert len(figure.source) > 20, f"{name}: say where the figure comes from"


def test_the_warmup_jobs_cover_the_modelled_compile_with_a_margin(
        catalog: catalog_module.Catalog) -> None:
    box = budget.compile_minutes()
    assert box > 0
    for line in catalog.lines:
        warmup = budget.warmup_plan(line)
        assert warmup.jobs_needed <= budget.WARMUP_JOBS, line.version
        assert warmup.capacity >= budget.WARMUP_MARGIN * warmup.need, line.version


def test_the_plan_prints_each_jobs_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["ci-plan", "--lines", "2.14.1", "--pythons", "3.12"]) == 0
    out = capsys.readouterr().out
    graph = out.split("\n\n")[1]
    for job_id in ("matrix", "warmup", "warmup-4", "wheel", "test-wheel"):
        line = next(row for row in graph.splitlines() if row.strip().startswith(job_id + " ")
                    or row.strip().startswith(job_id + "  "))
        assert " budget " in line and "min timeout" in line, line
    assert "(runs-on: macos-15-intel; budget " in out


def test_torchvision_is_budgeted_in_its_own_jobs(catalog: catalog_module.Catalog) -> None:
    result = plan.make_plan(RELEASE, catalog, tag="v2.14.1-1")
    wheel = {run.budget_minutes for run in plan.job(result, "wheel").runs}
    assert wheel == {budget.job_minutes("wheel", catalog.line("2.14.1"))}
    vision = plan.job(result, "vision").runs
    # 0.29.1's official wheels are per Python: one torchvision job per Python.
    assert len(vision) == len(catalog.line("2.14.1").python)
    assert {run.budget_minutes for run in vision} == {budget.job_minutes("vision")}


def test_the_wheel_model_counts_the_objective_cxx_files() -> None:
    # Per line: the MPS .mm sources the fail-fast counts hold (the real 2.6.0 tree, estimated
    # from each other line's official binary), each one mps_unit on all the runner's vCPUs.
    for line in catalog_module.load().lines:
        sources = budget.failfast_count(line.version).mps_sources
        assert sources > 0
        assert budget.objcxx_minutes(line) == pytest.approx(
            sources * budget.figure("mps_unit") / budget.figure("runner_vcpus"))


def test_the_docs_quote_the_model_as_it_is() -> None:
    from ci_support import REPO

    text = (REPO / "docs" / "releasing.md").read_text(encoding="utf-8")
    assert f"time box is **{budget.compile_minutes()} minutes**" in text
    line = catalog_module.load().line("2.14.1")
    plan_ = budget.warmup_plan(line)
    assert f"needs **{plan_.jobs_needed}** warm-up jobs" in text
    assert f"release.yml has **{budget.WARMUP_JOBS}**" in text
    assert f"A `wheel` job is **{budget.job_minutes('wheel', line):.0f} minutes**" in text


def test_the_docs_quote_the_fail_fast_model() -> None:
    from ci_support import REPO

    text = " ".join((REPO / "docs" / "releasing.md").read_text(encoding="utf-8").split())
    lines = catalog_module.load()
    first, last = lines.line("2.6.0"), lines.line("2.15.0")
    assert (f"about {budget.failfast_minutes(first):.0f} minutes (2.6.0) to "
            f"{budget.failfast_minutes(last):.0f} minutes (2.15.0)") in text
    assert f"**{budget.failfast_extra_minutes():.1f} minutes** per build job" in text
    count = budget.FAILFAST_COUNTS["2.6.0"]
    assert (f"2.6.0's real tree has {count.mps_sources} MPS sources and {count.shaders} shaders, "
            f"built into {count.libraries} libraries") in text
    assert f"at most {budget.SHADERS_UPPER_BOUND} shaders each" in text


def test_the_plan_prints_the_fail_fast_step(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["ci-plan", "--lines", "2.14.1", "--pythons", "3.12"]) == 0
    out = capsys.readouterr().out
    minutes = budget.failfast_minutes(catalog_module.load().line("2.14.1"))
    assert (f"stops the job within 2.14.1 {minutes:.0f} min of compiling; it adds "
            f"{budget.failfast_extra_minutes():.1f} min to each build job") in out


UPSTREAM_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytorch-upstream"
_MPS_PATH = re.compile(rb"aten/src/ATen/(?:mps|native/mps)/[A-Za-z0-9_/]+\.mm")


def _upstream(name: str) -> Path:
    path = UPSTREAM_CACHE / name
    if not path.exists():
        why = f"no cached upstream {name} (a wheel or source tree): make upstream-material fetches it"
        if os.environ.get("INTELMAC_REQUIRE_WHEELS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return path


def _section_names(path: Path) -> set[str]:
    """The section names of a thin 64-bit Mach-O (the official arm64 wheels' libraries)."""
    data = path.read_bytes()
    assert struct.unpack_from("<I", data)[0] == 0xFEEDFACF, path
    ncmds = struct.unpack_from("<I", data, 16)[0]
    offset, names = 32, set()
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, offset)
        if cmd == 0x19:  # LC_SEGMENT_64: 72 bytes, then 80 per section
            nsects = struct.unpack_from("<I", data, offset + 64)[0]
            for index in range(nsects):
                raw = data[offset + 72 + 80 * index: offset + 72 + 80 * index + 16]
                names.add(raw.rstrip(b"\0").decode())
        offset += size
    return names


def test_the_2_6_0_counts_are_the_real_trees() -> None:
    from intelmac_torch_builder.core import failfast

    tree = _upstream("pytorch-v2.6.0")
    count = budget.FAILFAST_COUNTS["2.6.0"]
    assert count.mps_sources == budget.TREE_MPS_2_6_0 == len(failfast.mps_units(tree))
    assert count.shaders == len(list((tree / "aten/src/ATen/native/mps").rglob("*.metal")))


@pytest.mark.parametrize("version", sorted(budget.BINARY_MPS_PATHS))
def test_the_binary_counts_are_the_official_wheels(version: str) -> None:
    lib = _upstream(f"wheel-{version}-arm64") / "torch" / "lib" / "libtorch_cpu.dylib"
    paths = set(_MPS_PATH.findall(lib.read_bytes()))
    assert budget.BINARY_MPS_PATHS[version] == len(paths)
    libraries = {name for name in _section_names(lib) if name.startswith("metal_")} - {"metal_prepack"}
    assert budget.FAILFAST_COUNTS[version].libraries == len(libraries), sorted(libraries)
