"""The release workflow's time model (ci/budget.py): every job within 70% of its timeout,
every figure with its source, and enough warm-up jobs for the modelled compile."""

from __future__ import annotations

import shutil
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
    # Counted in the 2.6.0 source tree: `find . -name '*.mm' | wc -l`.
    line = catalog_module.load().line("2.6.0")
    assert budget.objcxx_minutes(line) == budget.OBJCXX_FILES["2.6.0"] * budget.figure("objcxx_file")
    assert budget.OBJCXX_FILES["2.6.0"] > 0


def test_the_docs_quote_the_model_as_it_is() -> None:
    from ci_support import REPO

    text = (REPO / "docs" / "releasing.md").read_text(encoding="utf-8")
    assert f"time box is **{budget.compile_minutes()} minutes**" in text
    line = catalog_module.load().line("2.14.1")
    plan_ = budget.warmup_plan(line)
    assert f"needs **{plan_.jobs_needed}** warm-up jobs" in text
    assert f"release.yml has **{budget.WARMUP_JOBS}**" in text
    assert f"A `wheel` job is **{budget.job_minutes('wheel', line):.0f} minutes**" in text
