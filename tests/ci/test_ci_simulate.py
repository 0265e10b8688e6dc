"""`make ci-simulate`: the release workflow through the ways a release fails (ci/simulate.py).

The scenarios end as docs/releasing.md says with today's release.yml; they did not with the
workflow and code of the commit before issue 33 (65b1623), run here as they were; and a
planted regression in today's workflow makes the scenario that covers it fail.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from ci_support import RELEASE, REPO, edit_catalog, pin_everything, pinned_catalog
from intelmac_torch_builder.ci import simulate
from intelmac_torch_builder.core import catalog as catalog_module

BEFORE = "65b162324037facd2488864be97e93b27f98e1f7"
#: The scenarios issue 33's table named (later ones cover later fixes).
ISSUE_33_SCENARIOS = [name for name in (s.name for s in simulate.SCENARIOS)
                      if name not in ("test-dependency-swaps-wheels", "handover-upload-fails",
                                      "newest-python-own-part-fails")]


@pytest.fixture(scope="module")
def catalog() -> catalog_module.Catalog:
    return catalog_module.load()


def test_every_scenario_ends_as_the_docs_say(catalog: catalog_module.Catalog) -> None:
    expected = simulate.expected_states()
    assert list(expected) == [scenario.name for scenario in simulate.SCENARIOS]
    outcomes = simulate.run_all(RELEASE, catalog)
    assert [(o.scenario, o.state) for o in outcomes] == list(expected.items())


def test_cli_prints_one_line_per_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == [s.name for s in simulate.SCENARIOS]
    assert all(line.startswith("ok ") for line in lines)


@pytest.mark.parametrize(("scenario", "cell", "changed", "says"), [
    # The end state column.
    ("newest-python-fails", "| draft, resumable |", "| published |",
     "(docs/releasing.md: published, button:"),
    # The button column: first-tag-green needs none, so naming one fails.
    ("first-tag-green", "| none |", "| *Re-run failed jobs* |", "pressed: none"),
])
def test_a_table_that_says_otherwise_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           scenario: str, cell: str, changed: str,
                                           says: str) -> None:
    doc = tmp_path / "releasing.md"
    text = simulate.RELEASES_DOC.read_text()
    row = next(line for line in text.splitlines() if line.startswith(f"| `{scenario}`"))
    doc.write_text(text.replace(row, row.replace(cell, changed)))
    assert simulate.main(["--doc", str(doc)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {scenario}" in out and says in out


def _planted(tmp_path: Path, old: str, new: str) -> Path:
    text = RELEASE.read_text()
    assert old in text, old
    path = tmp_path / "release.yml"
    path.write_text(text.replace(old, new))
    return path


#: One plant per class of regression, each in a copy of today's release.yml, and the
#: scenario of `make ci-simulate` it must fail (issue 40): (class, scenario, old, new).
PLANTS = [
    # ordering: test-wheel no longer waits for torchvision; jobs start as soon as their
    # needs allow, so it races the vision jobs (passed every test when jobs ran in file order).
    ("ordering", "first-tag-green", "    needs: [matrix, wheel, vision]\n    # One failing",
     "    needs: [matrix, wheel]\n    # One failing"),
    # exit status: the last warm-up job's unfinished compile swallowed by the shell.
    ("exit status", "warmup-out-of-time", '--continued "$CONTINUED"\n',
     '--continued "$CONTINUED" || true\n'),
    # flags: the release job publishes half a line by itself (passed every test before).
    ("flags", "newest-python-fails", 'ci.release_status --tag "$TAG" --publish\n',
     'ci.release_status --tag "$TAG" --publish --publish-subset\n'),
    # flags: publishing whatever passed, with gh's own flag.
    ("flags", "newest-python-fails",
     'run: python -m intelmac_torch_builder.ci.release_status --tag "$TAG" --publish',
     'run: gh release edit "$TAG" --draft=false'),
    # permissions: the release job cannot see its draft or upload to it.
    ("permissions", "first-tag-green",
     "      contents: write # create the draft, add its assets, publish it", "      contents: read"),
    # permissions: attest cannot sign.
    ("permissions", "first-tag-green", "      id-token: write # sign the provenance",
     "      # id-token: write # sign the provenance"),
    # hashes: attest signs whatever the test jobs left, not the bytes a build job made.
    ("hashes", "test-dependency-swaps-wheels",
     "run: python3 ci/tested.py select --verdicts verdicts dist", "run: echo kept every wheel"),
    # hashes: the orchestrator's own dependencies installed without their pinned hashes.
    ("hashes", "first-tag-green",
     "pip install --quiet --require-hashes --only-binary=:all: --no-deps -r patches/toolchain/orchestrator.txt",
     "pip install --quiet -e ."),
    # retention: the warm-up cache artifact kept one day, as before: a re-run two days later
    # starts cold.
    ("retention", "rerun-after-2-days", "          compression-level: 0\n          retention-days: 30",
     "          compression-level: 0\n          retention-days: 1"),
    # keys: a save key without the run: GitHub keeps a key's first entry, so the refresh
    # saves nothing new.
    ("keys", "schedule-refresh",
     "-${{ github.run_id }}-${{ github.run_attempt }}-${{ github.job }}\n", "\n"),
    # keys: restore keys that match nothing: every refresh compiles cold (runner hours).
    ("keys", "schedule-refresh",
     ("            ccache-${{ matrix.version }}-${{ steps.toolchain.outputs.key }}-${{ matrix.fingerprint_short }}-\n"
      "            ccache-${{ matrix.version }}-${{ steps.toolchain.outputs.key }}-\n"
      "            ccache-${{ matrix.version }}-\n      - name: Compile"),
     "            ccache-${{ matrix.python }}-\n      - name: Compile"),
    # guards: the refresh asking the schedule's payload for the default branch saves nothing.
    ("guards", "schedule-refresh",
     "outcome == 'finished' && (github.event_name == 'schedule' || github.ref_name == github.event.repository.default_branch) }}",
     "outcome == 'finished' && github.ref_name == github.event.repository.default_branch }}"),
    # guards: torchvision waiting for every wheel job to succeed: one Python's failure costs
    # them all.
    ("guards", "newest-python-fails",
     "    needs: [matrix, wheel]\n    if: ${{ !cancelled() && needs.matrix.result == 'success' && needs.matrix.outputs.pending == 'true' && github.event_name != 'schedule' }}\n    runs-on: ${{ matrix.runner }}\n    timeout-minutes: 180",
     "    needs: [matrix, wheel]\n    runs-on: ${{ matrix.runner }}\n    timeout-minutes: 180"),
    # the torch build's record downloaded beside, not into, the line's dist/: the companion
    # build finds no verified torch wheel.
    ("paths", "first-tag-green",
     "          merge-multiple: true\n          path: build/${{ matrix.version }}/dist\n",
     "          merge-multiple: true\n          path: build\n"),
    # N2: the outcome recorded even when the hand-over failed.
    ("guards", "handover-upload-fails",
     " && (steps.compile.outputs.outcome == 'failed' || steps.handover.outcome == 'success') }}",
     " }}"),
]


@pytest.mark.parametrize(("kind", "scenario", "old", "new"), PLANTS,
                         ids=[f"{kind}-{scenario}-{i}" for i, (kind, scenario, *_) in
                              enumerate(PLANTS)])
def test_each_plant_class_fails_make_ci_simulate(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str], kind: str,
                                                 scenario: str, old: str, new: str) -> None:
    path = _planted(tmp_path, old, new)
    assert simulate.main(["--workflow", str(path), "--scenario", scenario]) == 1, kind
    assert f"FAIL {scenario}" in capsys.readouterr().out


def test_the_plants_cover_every_class() -> None:
    assert {kind for kind, *_ in PLANTS} >= {"ordering", "exit status", "flags", "permissions",
                                             "hashes", "retention", "keys", "guards"}


def test_a_warmup_that_returns_0_for_an_unfinished_last_job_fails(
        tmp_path: Path, catalog: catalog_module.Catalog) -> None:
    """exit status, in our code: ci.warmup runs for real, so its exit status decides."""
    source = Path(simulate.warmup.__file__).read_text()
    old = "        print(f\"::error title=Warm-up unfinished::{unfinished_message(state)}\")\n        return 1\n"
    assert old in source
    outcomes = _with_warmup(tmp_path, source.replace(old, old.replace("return 1", "return 0")),
                            catalog, "warmup-out-of-time")
    assert [o.ok for o in outcomes] == [False], outcomes[0].trace


def _with_warmup(tmp_path: Path, source: str, catalog: catalog_module.Catalog,
                 scenario: str) -> list[simulate.Outcome]:
    """A scenario played with another ci/warmup.py (its text), in place of today's."""
    path = tmp_path / "warmup_planted.py"
    path.write_text(source)
    name = "intelmac_torch_builder.ci.warmup_planted"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        return simulate.run_all(RELEASE, catalog, code=simulate.Code(warmup=module),
                                only=[scenario])
    finally:
        del sys.modules[name]


def test_the_newest_pythons_own_part_failing_costs_only_its_wheel(
        tmp_path: Path, catalog: catalog_module.Catalog) -> None:
    """N3 of issue 40: the warm-up compiled the newest Python's whole build stage, so a
    failure of that Python's own part (its _C bindings) failed the warm-up and every wheel
    job of the line (seen failing with issue 40's main's ci/warmup.py, af7490a: the state
    'failed, says why', all five wheels missing). It now builds only what every Python
    shares (build --shared-only)."""
    (outcome,) = simulate.run_all(RELEASE, catalog, only=["newest-python-own-part-fails"])
    assert outcome.ok and outcome.state == "draft, resumable", outcome.trace
    newest = catalog.line(catalog.default_version).python[-1]
    failed = [line for line in outcome.trace if line.lstrip().startswith("! wheel ")]
    assert failed and all(f"Python {newest}:" in line for line in failed), failed
    before = subprocess.run(["git", "show", "af7490a:ci/warmup.py"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    (old,) = _with_warmup(tmp_path, before, catalog, "newest-python-own-part-fails")
    assert not old.ok and old.state == "failed, says why", old.trace
    stopped = {line.split(":")[0].strip() for line in old.trace if "The warm-up failed" in line}
    assert {f"! wheel {catalog.default_version} / Python {p}"
            for p in catalog.line(catalog.default_version).python} <= stopped, stopped


def test_a_step_without_a_model_is_an_error(tmp_path: Path,
                                            catalog: catalog_module.Catalog) -> None:
    path = _planted(tmp_path, "        run: ccache -s -v || true",
                    "        run: ccache -s -v || true\n      - run: ./something-new.sh")
    with pytest.raises(simulate.SimulationError, match="no model of the step"):
        simulate.simulate(simulate.SCENARIOS[0], path, catalog, catalog.default_version)


# --- the commit before issue 33, as it was ------------------------------------------------


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, types.ModuleType]:
    """That commit's release.yml, and its package (its core, ci and patches, the catalog
    with them) importable beside today's as ``intelmac_before``."""
    root = tmp_path_factory.mktemp("before")
    if shutil.which("git") is None:
        pytest.skip("git is needed to read the commit before issue 33")
    archive = subprocess.run(["git", "archive", BEFORE, "build_scripts", "ci", "patches",
                              ".github/workflows/release.yml"], cwd=REPO, capture_output=True,
                             check=False)
    if archive.returncode != 0:
        pytest.skip(f"this checkout lacks commit {BEFORE[:7]} (a shallow clone): fetch it")
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    package = root / "intelmac_before"
    (root / "build_scripts").rename(package)
    (root / "ci").rename(package / "ci")
    (root / "patches").rename(package / "patches")
    sys.path.insert(0, str(root))
    try:
        importlib.import_module("intelmac_before.ci.plan")
    finally:
        sys.path.remove(str(root))
    return root / ".github" / "workflows" / "release.yml", package, sys.modules["intelmac_before"]


def _code_before(package: types.ModuleType, catalog_path: Path | None = None) -> simulate.Code:
    """That commit's warm-up and matrix step, on its own catalog (pinned, for a 2.15.0 tag)."""
    old_catalog = importlib.import_module("intelmac_before.core.catalog")
    old_plan = importlib.import_module("intelmac_before.ci.plan")
    errors = importlib.import_module("intelmac_before.core.errors")
    catalog = old_catalog.load(catalog_path)

    def matrix_step(script: str, today: catalog_module.Catalog,
                    draft: object) -> dict[str, str] | None:
        result: dict[str, str] | None = old_plan._run_matrix_step(script, catalog)
        return result

    # That commit predates the hash pins: its scenarios are compared on the job graph.
    return simulate.Code(warmup=importlib.import_module("intelmac_before.ci.warmup"),
                         matrix_step=matrix_step, error=errors.BuildError, hash_pins=False)


def test_before_issue_33_every_scenario_ended_otherwise(
        before: tuple[Path, Path, types.ModuleType], catalog: catalog_module.Catalog) -> None:
    workflow, _, package = before
    # Today's catalog is the world's truth (0.29.1's official wheels are per Python); that
    # commit's code reads its own catalog, as it did.
    outcomes = simulate.run_all(workflow, catalog, code=_code_before(package),
                                only=ISSUE_33_SCENARIOS)
    passed = [o.scenario for o in outcomes if o.ok]
    # Seen on that commit: each scenario ends otherwise than docs/releasing.md now says.
    assert passed == [], "\n".join(f"{o.scenario}: {o.state}\n  " + "\n  ".join(o.trace)
                                   for o in outcomes if o.ok)


def test_before_issue_33_on_a_py3_none_line(before: tuple[Path, Path, types.ModuleType],
                                            tmp_path: Path) -> None:
    # On 2.15.0, whose torchvision is py3-none as that commit assumed for every 0.29.x, the
    # green tag and a second build after a draft ended as documented then too, and so did a
    # lost runner when the button is pressed within its one-day artifact (the jobs' clock is
    # their modelled minutes); every other scenario did not (2.15.0 pinned in both catalogs
    # so that a tag may release it).
    workflow, package_dir, package = before
    catalog = catalog_module.load(pinned_catalog(tmp_path / "today"))
    old = tmp_path / "before" / "catalog.yaml"
    shutil.copytree(package_dir / "patches", old.parent)
    edit_catalog(old, pin_everything)
    outcomes = simulate.run_all(workflow, catalog, "2.15.0", code=_code_before(package, old),
                                only=ISSUE_33_SCENARIOS)
    assert [o.scenario for o in outcomes if o.ok] == ["first-tag-green", "runner-lost-mid-job",
                                                      "second-tag-same-line"]
    assert all(o.ok for o in simulate.run_all(RELEASE, catalog, "2.15.0"))


# --- what attest signs --------------------------------------------------------------------

#: A package the test job installs (not pinned: the test extras) swaps the wheels beside it.
SWAPPED_IN_TEST = simulate.Scenario(
    "test-job-swaps-wheels", "a test dependency swaps the tested wheels", (simulate.PUSH,),
    lambda catalog, version: simulate.Faults(test_swaps=True))
#: The workflow as merged for issue 33: attest signed the test jobs' uploads.
SIGNED_TEST_UPLOADS = "11c0038"


def test_attest_signs_the_build_jobs_bytes_never_the_test_jobs(
        tmp_path: Path, catalog: catalog_module.Catalog) -> None:
    outcome = simulate.simulate(SWAPPED_IN_TEST, RELEASE, catalog, catalog.default_version)
    assert outcome.state == "failed, says why", outcome.trace
    assert any("the bytes tested are not the bytes the build job made" in line
               for line in outcome.trace), outcome.trace
    shown = subprocess.run(["git", "show", f"{SIGNED_TEST_UPLOADS}:.github/workflows/release.yml"],
                           cwd=REPO, capture_output=True, text=True, check=False)
    if shown.returncode != 0:
        pytest.skip(f"this checkout lacks commit {SIGNED_TEST_UPLOADS}: fetch it")
    old = tmp_path / "release.yml"
    # That attest checked out without contents: read (issue 40's N8); given it, as today's
    # has, the rest of that workflow runs as it was.
    permissions = "    permissions:\n      id-token: write"
    assert permissions in shown.stdout
    old.write_text(shown.stdout.replace(permissions, "    permissions:\n      contents: read\n"
                                        "      id-token: write", 1))
    # Seen on that workflow: the swapped bytes were signed and published.
    before = simulate.simulate(SWAPPED_IN_TEST, old, catalog, catalog.default_version)
    assert before.state.startswith("published, with bytes no build job made"), before.state


def test_a_later_run_publishes_a_whole_draft_without_building(
        catalog: catalog_module.Catalog) -> None:
    """The draft holds every wheel but stayed a draft (its publish step failed, then the
    run's re-run window closed): a run on the tag sees the draft, builds nothing, publishes."""
    sim = simulate.Simulator(RELEASE, catalog, catalog.default_version, simulate.Faults())
    tag = f"v{catalog.default_version}-1"
    sim.push(1)
    release = sim.world.releases[tag]
    assert not release.draft and release.assets
    release.draft = True  # `release_status --publish` failed after `draft add` finished
    sim.world.advance((simulate.RERUN_DAYS + 1) * 24)
    run = sim.dispatch_on_tag(tag)
    assert run.jobs["wheel"].result == "skipped", run.jobs["matrix"].outputs
    assert simulate.end_state(sim) == "published", run.errors()


WARMUP_FAILS = simulate.Scenario(
    "warmup-1-fails", "warm-up job 1's compile fails once (a passing cause); then the button",
    (simulate.PUSH, simulate.PRESS), lambda catalog, version: simulate.Faults(warmup_fails=1))


def test_the_button_after_a_failed_first_warmup_job_finishes_the_release(
        catalog: catalog_module.Catalog) -> None:
    """Its error says to press 'Re-run failed jobs' for a passing cause. A failed job hands
    on no compiler cache, and job 1 of a run has no earlier one: the re-run starts from the
    actions cache instead of failing on the missing artifact."""
    outcome = simulate.simulate(WARMUP_FAILS, RELEASE, catalog, catalog.default_version)
    assert outcome.pressed_rerun and outcome.state == "published", outcome.trace


def test_a_run_on_a_whole_draft_with_the_gpu_runner_builds_and_tests_nothing(
        catalog: catalog_module.Catalog) -> None:
    """N7 of issue 40: with a registered GPU runner, a run of a tag whose draft holds every
    wheel has empty matrices; regress-gpu must be skipped like the other jobs, not fail on
    an empty matrix (seen failing before regress-gpu had the pending guard)."""
    sim = simulate.Simulator(RELEASE, catalog, catalog.default_version, simulate.Faults(),
                             variables={"HAS_INTEL_GPU_RUNNER": "true"})
    tag = f"v{catalog.default_version}-1"
    assert sim.push(1).jobs["regress-gpu"].result == "success"
    sim.world.releases[tag].draft = True  # its publish step failed after draft add
    sim.world.advance((simulate.RERUN_DAYS + 1) * 24)
    run = sim.dispatch_on_tag(tag)
    assert run.jobs["regress-gpu"].result == "skipped", run.errors()
    assert simulate.end_state(sim) == "published", run.errors()


LAST_JOB_LOST = simulate.Scenario(
    "last-warmup-lost", "the runner of the last warm-up job is lost; then the button",
    (simulate.PUSH, simulate.PRESS),
    lambda catalog, version: simulate.Faults(compile_boxes=simulate.budget.WARMUP_JOBS - 0.5,
                                             lost=(f"warmup-{simulate.budget.WARMUP_JOBS}", 1)))


def test_after_a_lost_last_warmup_job_the_wheel_jobs_name_it(
        catalog: catalog_module.Catalog) -> None:
    """N8 of issue 40: the state the wheel jobs read is the job before the lost one's; their
    message must name the lost job, which the button re-runs (seen failing: it said warm-up
    job 3 continues)."""
    outcome = simulate.simulate(LAST_JOB_LOST, RELEASE, catalog, catalog.default_version)
    last = simulate.budget.WARMUP_JOBS
    said = [line for line in outcome.trace if "! wheel " in line and "The warm-up" in line]
    assert said and all(f"warm-up job {last} continues" in line
                        and f"warm-up job {last - 1} continues" not in line for line in said), said
    assert outcome.pressed_rerun and outcome.state == "published", outcome.trace


def test_a_tag_saves_no_cache_entry_that_could_evict_the_default_branchs(
        catalog: catalog_module.Catalog, workflow: Path = RELEASE) -> None:
    """N5 of issue 40: each unfinished tag warm-up job saved a 3-7 GB entry, which evicted
    the default branch's under the repository's 10 GB (seen failing on issue 40's main: the
    refreshed entry was gone after one tag whose compile took every warm-up job)."""
    faults = simulate.Faults(compile_boxes=simulate.budget.WARMUP_JOBS - 0.5)
    sim = simulate.Simulator(workflow, catalog, catalog.default_version, faults)
    sim.schedule()
    refreshed = [e.key for e in sim.world.caches if e.ref == simulate.DEFAULT_REF]
    assert refreshed
    for entry in sim.world.caches:  # the tag's series changed since: few of its objects hit
        entry.payload = {f"{simulate.CCACHE}/ccache": {"boxes": 0.0}}
    sim.world.advance(24)
    sim.push(1)
    assert simulate.end_state(sim) == "published", sim.runs[-1].errors()
    assert [e.key for e in sim.world.caches if e.ref == simulate.DEFAULT_REF] == refreshed
    assert not [e.key for e in sim.world.caches if e.ref != simulate.DEFAULT_REF]


def _tag_after_refresh(catalog: catalog_module.Catalog, workflow: Path) -> simulate.Simulator:
    sim = simulate.Simulator(workflow, catalog, catalog.default_version, simulate.Faults())
    sim.schedule()
    sim.world.advance(24)
    sim.push(1)
    return sim


def test_a_tag_restores_no_cache_entry_any_default_branch_job_could_write(
        catalog: catalog_module.Catalog) -> None:
    """N4 of issue 40: any job on the default branch can write its cache entries (ci.yml's
    test job runs unpinned test dependencies there), and a tag's wheels are attested: a tag
    builds only from what its own run compiled (seen failing on issue 40's main: the tag's
    first warm-up job restored the refreshed entry)."""
    sim = _tag_after_refresh(catalog, RELEASE)
    (entry,) = [e for e in sim.world.caches if e.ref == simulate.DEFAULT_REF]
    assert entry.used < sim.runs[-1].started, "the tag's run restored the default branch's cache"
    assert simulate.end_state(sim) == "published", sim.runs[-1].errors()


MISTAGGED_VISION = simulate.Scenario(
    "vision-mistagged", "torchvision's build tags its wheel py3-none on a per-Python line",
    (simulate.PUSH,), lambda catalog, version: simulate.Faults(vision_tag="py3-none"))


def test_a_torchvision_wheel_tagged_otherwise_than_the_matrix_assumes_stops_its_job(
        catalog: catalog_module.Catalog) -> None:
    """N8 of issue 40: the matrix builds torchvision per Python on the catalog's word; a
    py3-none wheel from each job (five files of one name, each built against another
    Python's torch) now stops the vision job, naming the tag and the catalog (seen on issue
    40's main: the release was published with one of them standing in for every Python)."""
    assert catalog.line(catalog.default_version).companion.per_python
    outcome = simulate.simulate(MISTAGGED_VISION, RELEASE, catalog, catalog.default_version)
    said = "\n".join(outcome.trace)
    assert outcome.state == "failed, says why", said
    assert "is tagged py3-none, but the catalog's companion.wheel_tags" in said
    assert "the bytes tested are not the bytes" not in said


#: ci.yml's installs, each unpinned again in a copy (N4 of issue 40): (old, new).
CI_PLANTS = [
    # the lint step's ruff by version alone, as on issue 40's main
    ("        run: .venv/bin/ruff check",
     "        run: python -m pip install --quiet 'ruff==0.17.6' && ruff check"),
    # the orchestrator with its dependencies from the index, as on issue 40's main
    ("          python -m pip install --quiet --no-deps --no-build-isolation -e .\n",
     "          python -m pip install --quiet -e .\n"),
    # the test tools from a step of their own
    ("        run: make .venv/.stamp\n", "        run: python -m pip install -e '.[test]'\n"),
]


@pytest.mark.parametrize(("old", "new"), CI_PLANTS)
def test_an_unpinned_install_in_ci_yml_fails_make_ci_simulate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str) -> None:
    text = simulate.pins.CI_WORKFLOW.read_text()
    assert old in text, old
    path = tmp_path / "ci.yml"
    path.write_text(text.replace(old, new, 1))
    assert simulate.main(["--ci-workflow", str(path), "--scenario", "first-tag-green"]) == 1
    out = capsys.readouterr().out
    assert "FAIL ci.yml: " in out and "may install packages not pinned by hash" in out, out
    assert "ok   first-tag-green" in out


def test_make_test_installing_the_test_extras_unpinned_fails_make_ci_simulate(
        tmp_path: Path) -> None:
    """ci.yml's test job runs `make test`: the Makefile's venv recipes count as its steps
    (the test extras were installed with `pip install -e '.[test]'` on issue 40's main)."""
    assert simulate.ci_workflow_problems() == []
    makefile = tmp_path / "Makefile"
    text = simulate.pins.MAKEFILE.read_text()
    old = "--require-hashes --only-binary=:all: --no-deps -r $(TEST_PINS)"
    assert old in text
    makefile.write_text(text.replace(old, "-e '.[test]'"))
    found = simulate.ci_workflow_problems(makefile=makefile)
    assert found and all("make .venv/.stamp" in problem or "make test" in problem
                         or "make ci-plan" in problem for problem in found), found
    # The step that sets up the venv is read through the Makefile's $(VENV) too.
    assert any(problem.startswith("ci.yml: test: Install the orchestrator and the test tools")
               for problem in found), found


def test_issue_40s_main_installed_unpinned_packages_in_ci_yml(tmp_path: Path) -> None:
    """Seen failing on issue 40's main (af7490a): ci.yml's lint, test, matrix and
    verify-patches jobs installed packages that no hash pins."""
    for name in ("ci.yml", "Makefile"):
        source = ".github/workflows/ci.yml" if name == "ci.yml" else name
        shown = subprocess.run(["git", "show", f"af7490a:{source}"], cwd=REPO, check=True,
                               capture_output=True, text=True)
        (tmp_path / name).write_text(shown.stdout)
    found = simulate.ci_workflow_problems(tmp_path / "ci.yml", tmp_path / "Makefile")
    jobs = {problem.split(": ")[1] for problem in found}
    assert jobs == {"test", "matrix", "verify-patches"}, found


def _most_macos_legs_at_once(sim: simulate.Simulator) -> int:
    legs = [(leg.start, leg.end) for run in sim.runs for job_id, job in run.jobs.items()
            for leg in job.legs if leg.attempt and str(sim.jobs[job_id].get("runs-on", ""))
            .startswith(("macos-", "${{ matrix.runner }}"))]
    return max(sum(1 for start, end in legs if start <= at < end) for at, _ in legs)


@pytest.mark.parametrize("limit", [simulate.MACOS_CONCURRENT, 2])
def test_no_more_macos_jobs_run_at_once_than_githubs_limit(
        catalog: catalog_module.Catalog, limit: int) -> None:
    """GitHub runs at most 5 macOS jobs at once (Free, Pro and Team plans); more wait in a
    queue (the "queued" order). With a limit of 2 the five wheel jobs queue, the release
    still ends published and takes longer; the runner hours stay (seen failing before the
    model: 5 at once)."""
    sim = simulate.Simulator(RELEASE, catalog, catalog.default_version, simulate.Faults(),
                             schedule="queued")
    sim.macos_concurrent = limit
    sim.push(1)
    assert simulate.end_state(sim) == "published", sim.runs[-1].errors()
    assert _most_macos_legs_at_once(sim) == min(limit, len(
        catalog.line(catalog.default_version).python))
    free = simulate.Simulator(RELEASE, catalog, catalog.default_version, simulate.Faults())
    free.push(1)
    assert sim.runs[-1].minutes == pytest.approx(free.runs[-1].minutes)
    assert (sim.world.hour > free.world.hour) == (limit < 5)


def test_draft_add_runs_for_real_and_sha256sums_needs_clobber(
        catalog: catalog_module.Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ci.draft add` runs for real against the world's releases (gh answered by the
    world): the re-run adds the missing Python, and SHA256SUMS keeps its lines and grows.
    Its SHA256SUMS upload without --clobber is refused by gh, so the re-run cannot finish
    (seen: one-python-fails then ends "failed, says why")."""
    (outcome,) = simulate.run_all(RELEASE, catalog, only=["one-python-fails"])
    assert outcome.ok, outcome.trace
    sim = simulate.Simulator(RELEASE, catalog, catalog.default_version,
                             simulate.Faults(python_fails={catalog.line(
                                 catalog.default_version).python[1]: 1}))
    sim.push(1)
    release = sim.world.releases[f"v{catalog.default_version}-1"]
    first = release.assets[simulate.draft.SUMS]
    sim.press()
    assert release.assets[simulate.draft.SUMS].startswith(first)
    assert len(release.assets[simulate.draft.SUMS].splitlines()) > len(first.splitlines())
    real_gh = simulate.draft.gh
    monkeypatch.setattr(simulate.draft, "gh",
                        lambda *args: real_gh(*[arg for arg in args if arg != "--clobber"]))
    (planted,) = simulate.run_all(RELEASE, catalog, only=["one-python-fails"])
    assert not planted.ok and planted.state != "published", planted.trace
    assert any("asset under the same name already exists" in line for line in planted.trace)
