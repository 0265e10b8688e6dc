"""`make ci-simulate`: the release workflow through the ways a release fails (ci/simulate.py).

The scenarios end as docs/releasing.md says with today's release.yml; they did not with the
workflow and code of the commit before issue 33 (65b1623), run here as they were; and a
planted regression in today's workflow makes the scenario that covers it fail.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from ci_support import REPO, RELEASE, pinned_catalog
from intelmac_torch_builder.core import catalog as catalog_module

from intelmac_torch_builder.ci import simulate

BEFORE = "65b162324037facd2488864be97e93b27f98e1f7"


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


def test_a_table_that_says_otherwise_fails(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "releasing.md"
    text = simulate.RELEASES_DOC.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `newest-python-fails`"))
    doc.write_text(text.replace(row, row.replace("| draft, resumable |", "| published |")))
    assert simulate.main(["--doc", str(doc)]) == 1
    out = capsys.readouterr().out
    assert "FAIL newest-python-fails" in out and "(docs/releasing.md: published)" in out


def _planted(tmp_path: Path, old: str, new: str) -> Path:
    text = RELEASE.read_text()
    assert old in text, old
    path = tmp_path / "release.yml"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize(("scenario", "old", "new"), [
    # The warm-up cache artifact kept one day, as before: a re-run two days later starts cold.
    ("rerun-after-2-days", "          compression-level: 0\n          retention-days: 30",
     "          compression-level: 0\n          retention-days: 1"),
    # The refresh asking the schedule's payload for the default branch saves nothing.
    ("schedule-refresh", "(github.event_name == 'schedule' || github.ref_name == github.event.repository.default_branch)) ||",
     "github.ref_name == github.event.repository.default_branch) ||"),
    # Publishing whatever passed: the draft never waits for the missing Python.
    ("one-python-fails", 'run: python -m intelmac_torch_builder.ci.draft publish --tag "$TAG" --without "$PUBLISH_WITHOUT"',
     'run: gh release edit "$TAG" --draft=false'),
    # torchvision waiting for every wheel job to succeed: one Python's failure costs them all.
    ("newest-python-fails", "    needs: [matrix, wheel]\n    if: ${{ !cancelled() && needs.matrix.result == 'success' && needs.matrix.outputs.pending == 'true' && github.event_name != 'schedule' }}\n    runs-on: ${{ matrix.runner }}\n    timeout-minutes: 180",
     "    needs: [matrix, wheel]\n    runs-on: ${{ matrix.runner }}\n    timeout-minutes: 180"),
])
def test_a_planted_regression_fails_its_scenario(tmp_path: Path, scenario: str, old: str,
                                                 new: str, catalog: catalog_module.Catalog) -> None:
    chosen = next(s for s in simulate.SCENARIOS if s.name == scenario)
    outcome = simulate.simulate(chosen, _planted(tmp_path, old, new), catalog,
                                catalog.default_version)
    assert outcome.state != simulate.expected_states()[scenario], outcome.trace


def test_a_step_without_a_model_is_an_error(tmp_path: Path,
                                            catalog: catalog_module.Catalog) -> None:
    path = _planted(tmp_path, "        run: ccache -s -v || true",
                    "        run: ccache -s -v || true\n      - run: ./something-new.sh")
    with pytest.raises(simulate.SimulationError, match="no model of the step"):
        simulate.simulate(simulate.SCENARIOS[0], path, catalog, catalog.default_version)


# --- the commit before issue 33, as it was ------------------------------------------------


def _git_show(path: str) -> str | None:
    if shutil.which("git") is None:
        return None
    result = subprocess.run(["git", "show", f"{BEFORE}:{path}"], cwd=REPO, capture_output=True,
                            text=True, check=False)
    return result.stdout if result.returncode == 0 else None


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, simulate.Code]:
    """That commit's release.yml and its ci/ package (plan, matrix, budget, warm-up), importable
    beside today's, sharing today's core modules."""
    root = tmp_path_factory.mktemp("before")
    workflow = _git_show(".github/workflows/release.yml")
    if workflow is None:
        pytest.skip(f"this checkout lacks commit {BEFORE[:7]} (a shallow clone): fetch it")
    (root / "release.yml").write_text(workflow)
    package = root / "intelmac_before"
    (package / "ci").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    names = ("__init__", "_args", "budget", "expressions", "matrix", "plan", "warmup")
    for name in names:
        text = _git_show(f"ci/{name}.py")
        assert text is not None, name
        (package / "ci" / f"{name}.py").write_text(text)
    # Today's core stands in for that commit's: its modules, under the old package's name.
    core = importlib.import_module("intelmac_torch_builder.core")
    sys.modules["intelmac_before.core"] = core
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("intelmac_torch_builder.core."):
            sys.modules["intelmac_before.core." + module_name.rsplit(".", 1)[1]] = module
    sys.path.insert(0, str(root))
    try:
        old_plan = importlib.import_module("intelmac_before.ci.plan")
        old_warmup = importlib.import_module("intelmac_before.ci.warmup")
    finally:
        sys.path.remove(str(root))
    assert isinstance(old_plan, types.ModuleType)

    def matrix_step(script: str, catalog: catalog_module.Catalog,
                    draft: object) -> dict[str, str] | None:
        result: dict[str, str] | None = old_plan._run_matrix_step(script, catalog)
        return result

    return root / "release.yml", simulate.Code(warmup=old_warmup, matrix_step=matrix_step)


def test_before_issue_33_every_scenario_ended_otherwise(
        before: tuple[Path, simulate.Code], catalog: catalog_module.Catalog) -> None:
    workflow, code = before
    outcomes = simulate.run_all(workflow, catalog, code=code)
    passed = [o.scenario for o in outcomes if o.ok]
    # Seen on that commit: each scenario ends otherwise than docs/releasing.md now says.
    assert passed == [], "\n".join(f"{o.scenario}: {o.state}\n  " + "\n  ".join(o.trace)
                                   for o in outcomes if o.ok)


def test_before_issue_33_on_a_py3_none_line(before: tuple[Path, simulate.Code],
                                            tmp_path: Path) -> None:
    # On 2.15.0, whose torchvision is py3-none as that commit assumed for every 0.29.x, the
    # green tag and a second build after a draft ended as documented then too; every other
    # scenario did not (2.15.0 pinned here so that a tag may release it).
    workflow, code = before
    catalog = catalog_module.load(pinned_catalog(tmp_path))
    outcomes = simulate.run_all(workflow, catalog, "2.15.0", code=code)
    assert [o.scenario for o in outcomes if o.ok] == ["first-tag-green", "second-tag-same-line"]
    assert all(o.ok for o in simulate.run_all(RELEASE, catalog, "2.15.0"))
