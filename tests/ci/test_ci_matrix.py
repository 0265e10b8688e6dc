"""The release matrix is generated from the catalog, and only from it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ci_support import (
    RELEASE,
    copy_catalog,
    edit_catalog,
    load_workflow,
    pinned_catalog,
    run_cli,
)
from intelmac_torch_builder.core import catalog as catalog_module
from intelmac_torch_builder.core.errors import BuildError, CatalogError

from intelmac_torch_builder.ci import matrix


def cli_matrix(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert run_cli(["matrix", *argv]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def raw_catalog() -> dict[str, Any]:
    # Read the YAML directly, so that the expectations do not come from the code under test.
    document: dict[str, Any] = yaml.safe_load(catalog_module.DEFAULT_CATALOG.read_text())
    return document


def test_every_line_builds_exactly_its_pythons(capsys: pytest.CaptureFixture[str],
                                                raw_catalog: dict[str, Any]) -> None:
    everything = cli_matrix(capsys, "--kind", "all")
    expected = {line["version"]: sorted(line["python"], key=lambda v: tuple(map(int, v.split("."))))
                for line in raw_catalog["lines"]}
    # One warm-up per line, with the line's newest Python; one wheel job per (line, Python).
    warmups = everything["build"]["include"]
    assert {entry["version"]: entry["python"] for entry in warmups} == {
        version: pythons[-1] for version, pythons in expected.items()}
    wheels: dict[str, list[str]] = {}
    for entry in everything["wheel"]["include"]:
        wheels.setdefault(entry["version"], []).append(entry["python"])
        assert entry["artifact"] == f"wheels-{entry['version']}-{entry['python']}"
    assert wheels == expected


def test_torchvision_has_its_own_jobs_as_the_official_wheels_are_tagged(
        capsys: pytest.CaptureFixture[str], raw_catalog: dict[str, Any]) -> None:
    # The wheel jobs build torch alone; torchvision is one job per line where the official
    # wheels are py3-none, one per Python where they are per Python (the catalog's wheel_tags,
    # tests/ci/test_ci_companion_tags.py checks them against the official wheels).
    wheel = cli_matrix(capsys, "--kind", "wheel")["include"]
    assert all("vision" not in entry and "torch_only_args" not in entry for entry in wheel)
    vision = cli_matrix(capsys, "--kind", "vision")["include"]
    tests = cli_matrix(capsys, "--kind", "test")["include"]
    for line in raw_catalog["lines"]:
        mine = [entry for entry in vision if entry["version"] == line["version"]]
        per_python = line["companion"]["wheel_tags"] != ["py3-none"]
        if per_python:
            assert [entry["candidates"] for entry in mine] == line["python"]
            assert [entry["artifact"] for entry in mine] == [
                f"vision-{line['version']}-{python}" for python in line["python"]]
        else:
            assert [entry["candidates"] for entry in mine] == [" ".join(line["python"])]
            assert mine[0]["torch_pattern"] == f"wheels-{line['version']}-*"
        artifacts = {entry["artifact"] for entry in mine}
        assert {entry["vision_artifact"] for entry in tests
                if entry["version"] == line["version"]} == artifacts
    # 0.29.1 is per Python (cp310-cp310 ...), 0.29.2 py3-none: not read from the version.
    by_version = {line["version"]: line["companion"]["wheel_tags"] for line in raw_catalog["lines"]}
    assert by_version["2.14.1"] != ["py3-none"] and by_version["2.15.0"] == ["py3-none"]


def test_a_draft_narrows_the_matrix_to_what_it_lacks(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from intelmac_torch_builder.core import catalog as catalog_module

    line = catalog_module.load().line("2.14.1")

    def held(pythons: tuple[str, ...]) -> list[str]:
        cps = ["cp" + python.replace(".", "") for python in pythons]
        return [f"{name}-{cp}-{cp}-macosx_14_0_x86_64.whl" for cp in cps
                for name in ("torch-2.14.1+intelmac", "torchvision-0.29.1+intelmac")]

    state = tmp_path / "draft.json"
    state.write_text(json.dumps({"state": "draft", "assets": held(line.python[:-1])}))
    left = cli_matrix(capsys, "--kind", "all", "--tag", "v2.14.1-1", "--draft", str(state))
    assert [e["python"] for e in left["wheel"]["include"]] == [line.python[-1]]
    assert [e["candidates"] for e in left["vision"]["include"]] == [line.python[-1]]
    assert left["pending"] is True and left["versions"] == ["2.14.1"]
    state.write_text(json.dumps({"state": "draft", "assets": held(line.python)}))
    whole = cli_matrix(capsys, "--kind", "all", "--tag", "v2.14.1-1", "--draft", str(state))
    assert whole["pending"] is False and whole["wheel"] == {"include": []}
    # No file (a run off a tag): every pair.
    everything = cli_matrix(capsys, "--kind", "all", "--tag", "v2.14.1-1", "--draft",
                            str(tmp_path / "absent.json"))
    assert len(everything["wheel"]["include"]) == len(line.python)


def test_the_canary_narrows_a_line_to_its_pythons(capsys: pytest.CaptureFixture[str]) -> None:
    everything = cli_matrix(capsys, "--kind", "all", "--lines", "2.14.1", "--pythons", "3.12")
    assert [(e["version"], e["python"]) for e in everything["wheel"]["include"]] == [
        ("2.14.1", "3.12")]
    # The warm-up compiles with the one Python the wheel job then builds.
    assert [e["python"] for e in everything["build"]["include"]] == ["3.12"]
    with pytest.raises(BuildError, match="not built for Python 3.8"):
        run_cli(["matrix", "--kind", "all", "--lines", "2.14.1", "--pythons", "3.8"])
    with pytest.raises(BuildError, match="--pythons is for"):
        run_cli(["matrix", "--kind", "all", "--tag", "v2.14.1-1", "--pythons", "3.12"])


def test_test_matrix_is_every_supported_pair_once(capsys: pytest.CaptureFixture[str],
                                                  raw_catalog: dict[str, Any]) -> None:
    test = cli_matrix(capsys, "--kind", "test")["include"]
    pairs = [(entry["version"], entry["python"]) for entry in test]
    expected = {(line["version"], python) for line in raw_catalog["lines"] for python in line["python"]}
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == expected
    # A Python some line lacks never shows up with that line.
    every_python = {python for line in raw_catalog["lines"] for python in line["python"]}
    for line in raw_catalog["lines"]:
        for python in every_python - set(line["python"]):
            assert (line["version"], python) not in pairs


def test_runners_labels_and_line_fields(capsys: pytest.CaptureFixture[str]) -> None:
    catalog = catalog_module.load()
    everything = cli_matrix(capsys, "--kind", "all")
    for entry in everything["build"]["include"] + everything["test"]["include"]:
        line = catalog.line(entry["version"])
        assert entry["runner"] == "macos-15-intel"
        assert entry["deployment_target"] == line.macos_deployment_target
        assert entry["fingerprint"] == line.series_fingerprint
        assert line.series_fingerprint.startswith(entry["fingerprint_short"])
        assert entry["wheel_version"] == f"{line.version}+{catalog.local_label}"
        major, minor = line.macos_deployment_target.split(".")
        assert entry["platform_tag"] == f"macosx_{major}_{minor}_x86_64"
    # The Xcode the compiling jobs select is the catalog's runner choice, inside the range
    # the preflight accepts.
    compiling = [entry for kind in ("build", "wheel") for entry in everything[kind]["include"]]
    assert compiling
    for entry in compiling:
        line = catalog.line(entry["version"])
        assert line.xcode is not None and entry["xcode"] == line.xcode.runner
        assert line.xcode.admits(entry["xcode"])
    for entry in everything["verify"]["include"]:
        assert entry["runner"].startswith("ubuntu-")
    for entry in everything["regress"]["include"]:
        assert entry["runs_on"] == ["self-hosted", "macOS", "X64", "intel-gpu"]
        assert entry["python"] == catalog.line(entry["version"]).python[-1]
    assert everything["versions"] == list(catalog.versions)


def test_regress_job_uses_the_same_labels_as_the_matrix() -> None:
    job = load_workflow(RELEASE)["jobs"]["regress-gpu"]
    assert job["runs-on"] == list(matrix.GPU_RUNNER_LABELS)


def test_unpinned_lines_are_fetched_with_explicit_trust_on_first_use(
        capsys: pytest.CaptureFixture[str], raw_catalog: dict[str, Any]) -> None:
    verify = {entry["version"]: entry for entry in cli_matrix(capsys, "--kind", "verify")["include"]}
    for line in raw_catalog["lines"]:
        entry = verify[line["version"]]
        pinned = line["source"]["sha256"] is not None
        assert entry["pinned"] is pinned
        assert entry["fetch_args"] == ("" if pinned else "--trust-on-first-use")


def test_removing_a_line_removes_it_from_every_matrix(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = copy_catalog(tmp_path)
    removed = "2.9.1"
    edit_catalog(path, lambda doc: doc.update(lines=[entry for entry in doc["lines"] if entry["version"] != removed]))
    everything = cli_matrix(capsys, "--kind", "all", "--catalog", str(path))
    for kind in matrix.KINDS:
        versions = {entry["version"] for entry in everything[kind]["include"]}
        assert removed not in versions
        assert versions == {v for v in catalog_module.load().versions if v != removed}


def test_adding_a_python_adds_a_build_python_and_a_test_pair(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = copy_catalog(tmp_path)
    before = cli_matrix(capsys, "--kind", "all", "--catalog", str(path))

    def add(doc: dict[str, Any]) -> None:
        line = next(entry for entry in doc["lines"] if entry["version"] == "2.6.0")
        line["python"] = [*line["python"], "3.14"]

    edit_catalog(path, add)
    after = cli_matrix(capsys, "--kind", "all", "--catalog", str(path))
    build = {entry["version"]: entry for entry in after["build"]["include"]}
    assert build["2.6.0"]["python"] == "3.14"
    added = {(e["version"], e["python"]) for e in after["test"]["include"]} - {
        (e["version"], e["python"]) for e in before["test"]["include"]}
    assert added == {("2.6.0", "3.14")}


def test_changing_a_patch_changes_the_cache_fingerprint(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = copy_catalog(tmp_path)
    patch = path.parent / "extra" / "0099-test.patch"
    patch.parent.mkdir()
    patch.write_text("Description: test\n")

    def use_patch(doc: dict[str, Any]) -> None:
        line = next(entry for entry in doc["lines"] if entry["version"] == "2.14.1")
        line["patches"] = [*line["patches"], "extra/0099-test.patch"]

    edit_catalog(path, use_patch)
    first = {e["version"]: e["fingerprint"] for e in
             cli_matrix(capsys, "--kind", "build", "--catalog", str(path))["include"]}
    patch.write_text("Description: test, changed\n")
    second = {e["version"]: e["fingerprint"] for e in
              cli_matrix(capsys, "--kind", "build", "--catalog", str(path))["include"]}
    assert first["2.14.1"] != second["2.14.1"]
    assert {v: f for v, f in first.items() if v != "2.14.1"} == {
        v: f for v, f in second.items() if v != "2.14.1"}


@pytest.mark.parametrize("version", catalog_module.load().versions)
def test_a_line_tag_selects_only_that_line(version: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    everything = cli_matrix(capsys, "--kind", "all", "--tag", f"v{version}-1",
                            "--catalog", str(pinned_catalog(tmp_path)))
    assert everything["versions"] == [version]
    assert {e["version"] for e in everything["test"]["include"]} == {version}


def test_a_release_tag_selects_every_line(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    everything = cli_matrix(capsys, "--kind", "all", "--tag", "refs/tags/release-20261122",
                            "--catalog", str(pinned_catalog(tmp_path)))
    assert everything["versions"] == list(catalog_module.load().versions)


@pytest.mark.parametrize("tag", ["v2.14.1-1", "release-20261122"])
def test_release_tags_refuse_unpinned_sources(tag: str, tmp_path: Path) -> None:
    path = copy_catalog(tmp_path)

    def unpin(doc: dict[str, Any]) -> None:
        line = next(entry for entry in doc["lines"] if entry["version"] == "2.14.1")
        line["source"]["sha256"] = None

    edit_catalog(path, unpin)
    with pytest.raises(BuildError, match="2.14.1, whose source tarball has no sha256 pin"):
        run_cli(["matrix", "--kind", "all", "--tag", tag, "--catalog", str(path)])
    # A trial build (workflow_dispatch) may still fetch it, with trust on first use.
    assert run_cli(["matrix", "--kind", "build", "--lines", "2.14.1", "--catalog", str(path)]) == 0


def test_trial_builds_of_unpinned_lines_say_trust_on_first_use(
        capsys: pytest.CaptureFixture[str], raw_catalog: dict[str, Any]) -> None:
    build = {e["version"]: e for e in cli_matrix(capsys, "--kind", "build")["include"]}
    for line in raw_catalog["lines"]:
        pinned = line["source"]["sha256"] is not None
        assert build[line["version"]]["fetch_args"] == ("" if pinned else "--trust-on-first-use")


def test_dispatch_lines_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_matrix(capsys, "--kind", "all", "--lines", "2.6.0, 2.9.1")["versions"] == ["2.6.0", "2.9.1"]
    assert cli_matrix(capsys, "--kind", "all", "--lines", "all")["versions"] == list(
        catalog_module.load().versions)


@pytest.mark.parametrize("tag", ["v2.7.0-1", "v2.15.0", "v2.15.0-0", "2.15.0-1", "release-2026", "latest"])
def test_bad_tags_are_refused_with_the_valid_forms(tag: str) -> None:
    with pytest.raises(BuildError) as caught:
        run_cli(["matrix", "--kind", "all", "--tag", tag])
    message = str(caught.value)
    if isinstance(caught.value, CatalogError):  # a well-formed tag for an uncatalogued line
        assert "2.15.0" in message and "Supported" in message
    else:
        assert "v<line>-<build>" in message and "release-YYYYMMDD" in message


def test_unknown_dispatch_line_is_refused() -> None:
    with pytest.raises(CatalogError, match="Supported"):
        run_cli(["matrix", "--lines", "1.13.1"])


def test_github_output_holds_one_compact_json_per_kind(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    printed = cli_matrix(capsys, "--kind", "all", "--tag", "", "--lines", "", "--github-output")
    written = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert set(written) == {*matrix.KINDS, "versions", "pending"}
    for name, value in written.items():
        assert json.loads(value) == printed[name]


def test_the_real_entry_point_prints_the_matrix() -> None:
    # `python -m intelmac_torch_builder matrix`, through the orchestrator's CLI registry.
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "intelmac_torch_builder", "matrix", "--kind", "test",
                             "--compact"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["include"]) == sum(
        len(line.python) for line in catalog_module.load().lines)


def test_the_scheduled_refresh_warms_the_lines_the_cache_holds(
        capsys: pytest.CaptureFixture[str]) -> None:
    from intelmac_torch_builder.ci import budget

    catalog = catalog_module.load()
    refreshed = cli_matrix(capsys, "--kind", "all", "--event", "schedule")["versions"]
    assert refreshed[0] == catalog.default_version
    assert len(refreshed) == budget.cache_lines_that_fit()
    # Any other event builds what it asks for.
    assert cli_matrix(capsys, "--kind", "all", "--event", "workflow_dispatch")["versions"] == list(
        catalog.versions)


def test_test_entries_carry_the_features_the_catalog_turns_on(
        capsys: pytest.CaptureFixture[str], raw_catalog: dict[str, Any], tmp_path: Path) -> None:
    # Read from the YAML here, so that the expectation does not come from the code under test.
    info = {"MKL": "mkl", "OpenBLAS": "open", "vecLib": "veclib"}
    for entry in cli_matrix(capsys, "--kind", "test")["include"]:
        env = next(line for line in raw_catalog["lines"]
                   if line["version"] == entry["version"])["build_env"]
        flags = {name: "on" if env[f"USE_{name.upper()}"] == "1" else "off"
                 for name in ("distributed", "fbgemm", "mkldnn")}
        assert entry["expect_features"] == f"blas={info[env['BLAS']]}," + ",".join(
            f"{name}={value}" for name, value in flags.items())
    # One source of truth: turning oneDNN off in the catalog changes what the checks expect.
    path = copy_catalog(tmp_path)

    def mkldnn_off(document: dict[str, Any]) -> None:
        document["lines"][0]["build_env"] = {**document["lines"][0]["build_env"], "USE_MKLDNN": "0"}

    edit_catalog(path, mkldnn_off)
    edited = catalog_module.load(path)
    (entry, *_) = matrix.matrix(edited, "test", [edited.lines[0]])["include"]
    assert "mkldnn=off" in entry["expect_features"]


@pytest.mark.parametrize(("change", "message"), [
    ({"BLAS": None}, "build_env.BLAS is None; choose one of MKL, OpenBLAS, vecLib"),
    ({"BLAS": "Eigen"}, "build_env.BLAS is 'Eigen'"),
    ({"USE_DISTRIBUTED": None}, "build_env.USE_DISTRIBUTED is None; set it to \"1\" or \"0\""),
    ({"USE_FBGEMM": "ON"}, "build_env.USE_FBGEMM is 'ON'"),
])
def test_a_line_must_choose_its_blas_and_features(change: dict[str, Any], message: str) -> None:
    from intelmac_torch_builder.core import features

    env = dict(catalog_module.load().lines[0].build_env)
    for key, value in change.items():
        if value is None:
            env.pop(key)
        else:
            env[key] = value
    with pytest.raises(CatalogError, match=re.escape(message)):
        features.of(env, "PyTorch 9.9.9")
