"""`make ci-plan`: the job graph and exact commands, read from release.yml itself."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ci_support import RELEASE, copy_catalog, edit_catalog, pinned_catalog, run_cli
from intelmac_torch_builder.core import catalog as catalog_module
from intelmac_torch_builder.core import features
from intelmac_torch_builder.core.errors import BuildError

from intelmac_torch_builder.ci import budget, expressions, plan


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> catalog_module.Catalog:
    # Every line pinned, so that every release tag is allowed (unpinned ones are refused).
    return catalog_module.load(pinned_catalog(tmp_path_factory.mktemp("catalog")))


def runs_of(result: plan.Plan, job_id: str) -> list[plan.JobRun]:
    return plan.job(result, job_id).runs


def commands(run: plan.JobRun) -> list[str]:
    return [step.run for step in run.steps if step.run is not None]


def test_line_tag_builds_one_line_with_all_its_pythons(catalog: catalog_module.Catalog) -> None:
    line = catalog.line(catalog.default_version)
    result = plan.make_plan(RELEASE, catalog, tag=f"v{line.version}-1")
    (warmup,) = runs_of(result, "warmup")
    assert warmup.runs_on == "macos-15-intel"
    compile_step = next(c for c in commands(warmup) if "ci.warmup run" in c)
    # What every Python shares (fetch, patch, build stage), no one Python's make build.
    assert (f'--minutes "{budget.compile_minutes()}"' in compile_step
            and f'--version "{line.version}" --python "{line.python[-1]}"' in compile_step
            and "make build" not in compile_step)
    wheels = runs_of(result, "wheel")
    assert [run.name for run in wheels] == [f"wheel {line.version} / Python {p}" for p in line.python]
    for run, python in zip(wheels, line.python):
        build = next(c for c in commands(run) if "make build VERSION" in c)
        assert f'make build VERSION="{line.version}" PYTHON="{python}" TORCH_ONLY=1' in build
    assert line.companion is not None and line.companion.per_python
    visions = runs_of(result, "vision")
    assert [run.name for run in visions] == [
        f"torchvision {line.version} / Python {p}" for p in line.python]
    tests = runs_of(result, "test-wheel")
    assert [run.name for run in tests] == [f"test {line.version} / Python {p}" for p in line.python]
    for run, python in zip(tests, line.python):
        target = line.macos_deployment_target.replace(".", "_")
        assert line.companion is not None
        expected = ('python ci/test_wheel.py --wheel-dir dist --expect-version '
                    f'"{catalog.wheel_version(line)}" --expect-platform "macosx_{target}_x86_64" '
                    f'--expect-no-gpu --companion-version "{catalog.wheel_version(line.companion)}" '
                    f'--expect-features "{features.of(line.build_env, line.title).spec()}"')
        assert expected in commands(run)
        setup = next(step for step in run.steps if "setup-python" in (step.uses or ""))
        assert setup.with_ == {"python-version": python}


def test_release_tag_builds_every_line_and_pair(catalog: catalog_module.Catalog) -> None:
    result = plan.make_plan(RELEASE, catalog, tag="release-20261122")
    for job_id in ("warmup", "warmup-2", "warmup-3", "warmup-4"):
        assert [run.name.split(" (")[0] for run in runs_of(result, job_id)] == [
            f"warm-up {v}" for v in catalog.versions]
    pairs = sum(len(line.python) for line in catalog.lines)
    assert len(runs_of(result, "wheel")) == len(runs_of(result, "test-wheel")) == pairs
    for job_id in ("attest", "release", "pages"):
        assert plan.job(result, job_id).status == "runs"


def test_warmup_jobs_share_their_steps_and_know_their_stage(catalog: catalog_module.Catalog) -> None:
    result = plan.make_plan(RELEASE, catalog, tag="v2.6.0-3")
    (first,) = runs_of(result, "warmup")
    (second,) = runs_of(result, "warmup-2")
    # The same steps (one YAML list). Whether a job restores the actions cache or continues
    # from the earlier job's artifact is its state's say at run time (fresh or not).
    assert [step.name for step in first.steps] == [step.name for step in second.steps]
    # A tag restores no saved cache (any default-branch job could have written it); a
    # trial run on the default branch does.
    assert not any("cache/restore" in (step.uses or "") for step in first.steps)
    (trial,) = runs_of(plan.make_plan(RELEASE, catalog, lines="2.6.0"), "warmup")
    restore = next(step for step in trial.steps if "cache/restore" in (step.uses or ""))
    handed = next(step for step in first.steps if step.name.startswith("The compiler cache the earlier"))
    # The state names the artifact to continue from; none: the actions cache.
    assert "steps.state.outputs.artifact == ''" in restore.condition
    assert "steps.state.outputs.artifact != ''" in handed.condition
    state = next(step for step in second.steps if step.name.startswith("Continue, skip"))
    assert "ci.warmup next --stage" in (state.run or "")
    assert budget.WARMUP_JOBS == len([job for job in result.jobs if job.id.startswith("warmup")])


def test_cache_key_names_line_toolchain_and_fingerprint(catalog: catalog_module.Catalog) -> None:
    line = catalog.line("2.6.0")
    (warmup,) = runs_of(plan.make_plan(RELEASE, catalog, tag="v2.6.0-3"), "warmup")
    (trial,) = runs_of(plan.make_plan(RELEASE, catalog, lines="2.6.0"), "warmup")
    restore = next(step for step in trial.steps if "cache/restore" in (step.uses or ""))
    assert restore.with_["key"] == (
        f"ccache-2.6.0-<steps.toolchain.outputs.key>-{line.series_fingerprint[:16]}")
    # A tag saves nothing (its entry could evict the default branch's); the default branch
    # and the schedule save a finished compile; wheel jobs never save.
    assert not any("cache/save" in (step.uses or "") for step in warmup.steps)
    (refresh,) = runs_of(plan.make_plan(RELEASE, catalog, event="schedule"), "warmup")
    save = next(step for step in refresh.steps if "cache/save" in (step.uses or ""))
    assert save.with_["key"].startswith("ccache-" + catalog.default_version + "-")
    assert "outcome == 'finished'" in save.condition and "unfinished" not in save.condition
    assert plan.job(plan.make_plan(RELEASE, catalog, tag="v2.6.0-3"), "cache-prune").status.startswith(
        "skipped")
    # The schedule refreshes the lines the cache holds (the default first); a dispatch on
    # the default branch the lines it names.
    for event, version in (("schedule", catalog.default_version), ("workflow_dispatch", "2.6.0")):
        refreshed = plan.make_plan(RELEASE, catalog, event=event, lines="2.6.0")
        (prune,) = [run for run in runs_of(refreshed, "cache-prune") if version in run.name]
        assert any('gh cache delete "$id"' in c for c in commands(prune))
    for run in runs_of(plan.make_plan(RELEASE, catalog, tag="v2.6.0-3"), "wheel"):
        assert not any("cache/save" in (step.uses or "") for step in run.steps)


def test_a_scheduled_run_saves_and_prunes_on_the_default_branch(
        catalog: catalog_module.Catalog) -> None:
    # The schedule's payload has no repository object: github.event.repository.default_branch
    # is null there, so a condition on it alone would never save (issue 33).
    scheduled = plan.make_plan(RELEASE, catalog, event="schedule")
    assert scheduled.description.startswith("schedule (")
    assert plan.job(scheduled, "cache-prune").status == "runs"
    for job_id in ("wheel", "vision", "test-wheel", "attest", "release", "pages"):
        assert plan.job(scheduled, job_id).status.startswith("skipped")
    (warmup,) = runs_of(scheduled, "warmup")
    save = next(step for step in warmup.steps if "cache/save" in (step.uses or ""))
    assert save.condition.endswith("(decided at run time)")  # on the compile's outcome only
    contexts = plan.event_contexts(plan.load_workflow(RELEASE), catalog, event="schedule",
                                   tag=None, lines=None, pythons=None, repository="o/r",
                                   variables={})[2]
    assert "repository" not in contexts["github"]["event"]
    assert contexts["github"]["ref"] == "refs/heads/main"


def test_a_dispatch_on_a_tag_resumes_its_release(catalog: catalog_module.Catalog) -> None:
    resumed = plan.make_plan(RELEASE, catalog, event="workflow_dispatch", tag="v2.14.1-1")
    for job_id in ("attest", "release", "pages"):
        assert plan.job(resumed, job_id).status == "runs"
    (matrix_run,) = runs_of(resumed, "matrix")
    assert any("ci.draft assets --tag" in c for c in commands(matrix_run))
    assert any('--tag "v2.14.1-1"' in c and "--draft draft.json" in c for c in commands(matrix_run))


def test_publish_commands_for_a_tag(catalog: catalog_module.Catalog) -> None:
    result = plan.make_plan(RELEASE, catalog, tag="v2.14.1-2", repository="me/intelmac-torch")
    (release,) = runs_of(result, "release")
    script = "\n".join(commands(release))
    assert script.index('ci.draft add --tag "v2.14.1-2"') < script.index(
        'python -m intelmac_torch_builder.ci.release_status --tag "v2.14.1-2" --publish')
    (pages,) = runs_of(result, "pages")
    assert ('python -m intelmac_torch_builder.ci.publish_index build --releases releases --download-base '
            '"https://github.com/me/intelmac-torch/releases/download" --out site') in commands(pages)
    (attest,) = runs_of(result, "attest")
    provenance = next(s for s in attest.steps if "attest-build-provenance" in (s.uses or ""))
    assert provenance.with_ == {"subject-path": "dist/*.whl"}


def test_dispatch_builds_and_tests_but_never_publishes(catalog: catalog_module.Catalog) -> None:
    result = plan.make_plan(RELEASE, catalog, lines="2.9.1")
    assert [run.name for run in runs_of(result, "warmup")] == ["warm-up 2.9.1 (job 1)"]
    for job_id in ("attest", "release", "pages"):
        assert plan.job(result, job_id).status.startswith("skipped")


def test_gpu_job_follows_the_repository_variable(catalog: catalog_module.Catalog) -> None:
    without = plan.make_plan(RELEASE, catalog, tag="v2.15.0-1")
    assert plan.job(without, "regress-gpu").status.startswith("skipped")
    assert plan.job(without, "gpu-runner-notice").status == "runs"
    with_runner = plan.make_plan(RELEASE, catalog, tag="v2.15.0-1",
                                 variables={"HAS_INTEL_GPU_RUNNER": "true"})
    assert plan.job(with_runner, "gpu-runner-notice").status.startswith("skipped")
    (gpu,) = runs_of(with_runner, "regress-gpu")
    assert gpu.runs_on == "self-hosted, macOS, X64, intel-gpu"
    assert gpu.env["PYTORCH_MPS_ALLOW_INTEL_GPU"] == "1"
    assert any("make regress DEVICE=mps" in c for c in commands(gpu))
    # Publishing runs either way.
    assert plan.job(without, "pages").status == plan.job(with_runner, "pages").status == "runs"


def test_plan_follows_the_workflow_file_not_a_copy_of_it(tmp_path: Path,
                                                         catalog: catalog_module.Catalog) -> None:
    changed = tmp_path / "release.yml"
    shutil.copy(RELEASE, changed)
    changed.write_text(changed.read_text().replace(
        'TORCH_ONLY=1 BUILD_ARGS="$FETCH_ARGS"', 'TORCH_ONLY=1 BUILD_ARGS="$FETCH_ARGS --no-wait"'))
    wheel = runs_of(plan.make_plan(changed, catalog, tag="v2.15.0-1"), "wheel")[0]
    assert any(c.rstrip().endswith('BUILD_ARGS=" --no-wait"') for c in commands(wheel))


def test_plan_follows_the_catalog(tmp_path: Path) -> None:
    path = pinned_catalog(tmp_path)
    edit_catalog(path, lambda doc: doc["lines"][0].update(python=["3.12"]))
    edited = catalog_module.load(path)
    version = edited.lines[0].version
    result = plan.make_plan(RELEASE, edited, tag=f"v{version}-1")
    assert [run.name for run in runs_of(result, "test-wheel")] == [f"test {version} / Python 3.12"]


@pytest.mark.parametrize("tag", ["v9.9.9-1", "nightly", "v2.15.0"])
def test_tags_that_would_not_release_are_refused(tag: str, catalog: catalog_module.Catalog) -> None:
    with pytest.raises(BuildError):
        plan.make_plan(RELEASE, catalog, tag=tag)


def test_unpinned_lines_build_only_in_trial_runs(tmp_path: Path) -> None:
    path = copy_catalog(tmp_path)
    edit_catalog(path, lambda doc: doc["lines"][0]["source"].update(sha256=None))
    unpinned = catalog_module.load(path)
    version = unpinned.lines[0].version
    with pytest.raises(BuildError, match="no sha256 pin"):
        plan.make_plan(RELEASE, unpinned, tag=f"v{version}-1")
    (warmup,) = runs_of(plan.make_plan(RELEASE, unpinned, lines=version), "warmup")
    assert any('--fetch-args "--trust-on-first-use"' in c for c in commands(warmup))
    wheel = runs_of(plan.make_plan(RELEASE, unpinned, lines=version), "wheel")[0]
    assert any(step.name.startswith("Unpinned source") for step in wheel.steps)


def test_cli_prints_graph_and_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["ci-plan", "--tag", "v2.6.0-1"]) == 0
    out = capsys.readouterr().out
    assert "Job graph (budget:" in out
    assert "  warmup <- matrix  [runs]  budget " in out
    assert '$ make build VERSION="2.6.0"' in out
    assert "regress-gpu <- matrix, wheel, vision  [skipped" in out


@pytest.mark.parametrize(("expression", "expected"), [
    ("github.event_name == 'push' && github.ref_name || ''", "v1"),
    ("github.event_name == 'PUSH'", True),  # GitHub compares strings ignoring case
    ("vars.MISSING == 'true'", False),
    ("!cancelled()", True),
    ("startsWith(github.ref, 'refs/tags/')", True),
    ("fromJSON('{\"a\": [1, 2]}').a", None),  # property access on a call is not supported
])
def test_expression_evaluator(expression: str, expected: object) -> None:
    contexts = {"github": {"event_name": "push", "ref_name": "v1", "ref": "refs/tags/v1"},
                "vars": {}}
    if expected is None:
        with pytest.raises(expressions.ExpressionError):
            expressions.evaluate(expression, contexts)
    else:
        assert expressions.evaluate(expression, contexts) == expected


def test_run_time_values_stay_placeholders() -> None:
    contexts = {"github": {"run_id": expressions.Unknown("github.run_id")}}
    assert expressions.interpolate("k-${{ github.run_id }}", contexts) == "k-<github.run_id>"
