"""What the matrix job checks before a tag's build: Pages, the environment, the release."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog as catalog_module

from intelmac_torch_builder.ci import publish_check as check
from intelmac_torch_builder.ci import release_status


def test_pages_must_deploy_from_actions() -> None:
    assert "not enabled" in str(check.pages_problem(None))
    assert "Source: GitHub Actions" in str(check.pages_problem({"build_type": "legacy"}))
    assert check.pages_problem({"build_type": "workflow"}) is None


def test_the_environment_must_let_the_tag_deploy() -> None:
    tag = "v2.14.1-1"
    assert check.environment_problem(None, [], tag) is None  # created on first deploy, open
    assert check.environment_problem({"deployment_branch_policy": None}, [], tag) is None
    protected = {"deployment_branch_policy": {"protected_branches": True,
                                              "custom_branch_policies": False}}
    assert "protected branches only" in str(check.environment_problem(protected, [], tag))
    custom = {"deployment_branch_policy": {"protected_branches": False,
                                           "custom_branch_policies": True}}
    branch_only = [{"name": "main", "type": "branch"}]
    problem = check.environment_problem(custom, branch_only, tag)
    assert problem is not None and "v* and release-*" in problem
    tags = [{"name": "main", "type": "branch"}, {"name": "v*", "type": "tag"}]
    assert check.environment_problem(custom, tags, tag) is None
    assert check.environment_problem(custom, tags, "release-20261122") is not None


def published_whole(folder: Path, tag: str) -> Path:
    """The REST API's release list: ``tag`` published with every wheel it must carry."""
    names = [f"{want.project}-{want.version}-cp{want.python.replace('.', '')}-"
             f"cp{want.python.replace('.', '')}-macosx_14_0_x86_64.whl"
             for want in release_status.wanted(catalog_module.load(), tag)]
    listing = folder / "releases.json"
    listing.write_text(json.dumps([[{"tag_name": tag, "draft": False,
                                     "assets": [{"name": name, "id": 1} for name in names]}]]))
    return listing


def stand_in_gh(folder: Path, monkeypatch: pytest.MonkeyPatch, *cases: str) -> None:
    """A `gh` on PATH that answers each `case` pattern of its arguments as GitHub would."""
    gh = folder / "gh"
    gh.write_text("#!/bin/sh\ncase \"$*\" in\n" + "".join(f"  {case};;\n" for case in cases)
                  + "esac\n")
    gh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")


def test_main_asks_gh_and_names_every_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    # A repository not set up yet, whose tag is already published.
    stand_in_gh(
        tmp_path, monkeypatch,
        '*"/pages") echo "gh: Not Found (HTTP 404)" >&2; exit 1',
        '*deployment-branch-policies) echo \'{"branch_policies": [{"name": "main", "type": "branch"}]}\'',
        '*environments/github-pages) echo \'{"deployment_branch_policy": {"protected_branches": false, '
        '"custom_branch_policies": true}}\'',
        f'*/releases) cat {published_whole(tmp_path, "v2.14.1-1")}')
    assert check.main(["--tag", "v2.14.1-1"]) == 1
    out = capsys.readouterr().out
    assert out.count("::error title=Cannot publish v2.14.1-1::") == 3
    assert "Source: GitHub Actions" in out and "v* and release-*" in out and "push v2.14.1-2" in out


def test_a_setting_the_token_may_not_read_warns_instead_of_blocking(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stand_in_gh(
        tmp_path, monkeypatch,
        '*"/pages") echo \'{"build_type": "workflow"}\'',
        '*environments*) echo "gh: Resource not accessible by integration (HTTP 403)" >&2; exit 1',
        "*/releases) echo '[[]]'")
    assert check.main(["--tag", "v2.14.1-1"]) == 0
    out = capsys.readouterr().out
    assert "::warning title=Not checked::the github-pages environment could not be read" in out


def test_a_line_without_a_default_branch_cache_entry_is_named_cold() -> None:
    """N6 of issue 40: a disabled schedule stops the refresh silently; a run on the default
    branch that restores the cache warns instead, saying why and what it costs."""
    catalog = catalog_module.load()
    default = catalog.default_version
    warm = [f"ccache-{default}-0123456789abcdef-fedcba9876543210-7-1-warmup-3"]
    assert check.cold_lines([default], warm) == []
    assert check.cold_lines([default, "2.6.0"], warm) == ["2.6.0"]
    said = check.cold_message(catalog, default)
    assert "60 days" in said and "Enable workflow" in said and "starts cold" in said
    other = next(line.version for line in catalog.lines if line.version != default)
    assert "10 GB" in check.cold_message(catalog, other)


def test_main_warns_of_a_cold_line_and_still_passes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    default = catalog_module.load().default_version
    stand_in_gh(
        tmp_path, monkeypatch,
        '*"/pages") echo \'{"build_type": "workflow"}\'',
        '*deployment-branch-policies) echo \'{"branch_policies": [{"name": "v*", "type": "tag"}]}\'',
        '*environments/github-pages) echo \'{"deployment_branch_policy": null}\'',
        "*/releases) echo '[[]]'",
        '*actions/caches*) echo \'{"actions_caches": []}\'',
        '*"repos/{owner}/{repo}") echo \'{"default_branch": "main"}\'')
    assert check.main(["--cold", default]) == 0
    assert f"::warning title=Cold compiler cache::No compiler cache for {default}" in (
        capsys.readouterr().out)
