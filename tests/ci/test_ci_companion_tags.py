"""The catalog's companion.wheel_tags against the official wheels (ci/companion_tags.py).

Per Python or py3-none is read from the official torchvision wheels' tags, never from the
version number: 0.29.1's wheels are per Python, 0.29.2's py3-none. The check runs on the
index's file list as `make upstream-material` caches it; without it the test skips, and
under INTELMAC_REQUIRE_WHEELS=1 (.ci/run) it fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ci_support import copy_catalog, edit_catalog
from pytest_httpserver import HTTPServer
from intelmac_torch_builder.core import catalog as catalog_module

from intelmac_torch_builder.ci import companion_tags

REQUIRE_ENV = "INTELMAC_REQUIRE_WHEELS"


def page(*names: str) -> dict[str, Any]:
    return {"meta": {"api-version": "1.1"}, "name": "torchvision",
            "files": [{"filename": name, "url": name, "hashes": {}} for name in names]}


def test_the_catalog_matches_the_official_wheels() -> None:
    document = companion_tags.load("torchvision")
    if document is None:
        message = (f"no cached file list in {companion_tags.default_cache()}: run "
                   "`make upstream-material` (or `python -m intelmac_torch_builder.ci."
                   "companion_tags fetch`)")
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(message)
        pytest.skip(message)
    catalog = catalog_module.load()
    assert companion_tags.mismatches(catalog, {"torchvision": document}) == []
    # The case issue 33 found: the version number does not say it.
    assert companion_tags.official_tags(document, "torchvision", "0.29.1")[0] == "cp310-cp310"
    assert companion_tags.official_tags(document, "torchvision", "0.29.2") == ("py3-none",)


def test_a_catalog_that_guesses_wrong_is_caught(tmp_path: Path) -> None:
    path = copy_catalog(tmp_path)
    edit_catalog(path, lambda doc: next(line for line in doc["lines"] if line["version"] == "2.14.1")[
        "companion"].update(wheel_tags=["py3-none"]))
    wrong = catalog_module.load(path)
    document = page(*(f"torchvision-{companion.version}-{tag}-macosx_14_0_arm64.whl"
                      for companion in catalog_module.load().companions()
                      for tag in companion.wheel_tags))
    found = companion_tags.mismatches(wrong, {"torchvision": document})
    assert len(found) == 1 and found[0].startswith("torchvision 0.29.1: the catalog says ['py3-none']")
    assert companion_tags.mismatches(catalog_module.load(), {"torchvision": document}) == []


def test_only_macos_wheels_of_that_version_count() -> None:
    document = page("torchvision-0.29.1-cp312-cp312-macosx_14_0_arm64.whl",
                    "torchvision-0.29.1-cp312-cp312-manylinux_2_28_x86_64.whl",
                    "torchvision-0.29.10-py3-none-macosx_14_0_arm64.whl",
                    "torchvision-0.29.1.tar.gz")
    assert companion_tags.official_tags(document, "torchvision", "0.29.1") == ("cp312-cp312",)


def test_fetch_reads_the_pep_691_page_from_the_configured_index(
        tmp_path: Path, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> None:
    served = page("torchvision-0.29.2-py3-none-macosx_14_0_arm64.whl")
    httpserver.expect_request(
        "/simple/torchvision/", headers={"Accept": companion_tags.ACCEPT}).respond_with_json(served)
    # The user's index setting is what is read (a version cap on installs does not apply).
    monkeypatch.setenv("PIP_INDEX_URL", httpserver.url_for("/simple"))
    assert companion_tags.index_url() == httpserver.url_for("/simple")
    saved = companion_tags.fetch("torchvision", tmp_path)
    assert json.loads(saved.read_text()) == served
    assert companion_tags.load("torchvision", tmp_path) == served


def test_fetch_from_an_index_without_json_says_so(tmp_path: Path, httpserver: HTTPServer) -> None:
    httpserver.expect_request("/simple/torchvision/").respond_with_data("<html></html>",
                                                                       content_type="text/html")
    with pytest.raises(companion_tags.BuildError, match="PEP 691"):
        companion_tags.fetch("torchvision", tmp_path, httpserver.url_for("/simple"))
    assert not (tmp_path / "torchvision.json").exists()


def test_a_built_wheel_must_carry_a_tag_the_catalog_records() -> None:
    catalog = catalog_module.load()
    per_python = next(line for line in catalog.lines if line.companion and line.companion.per_python)
    shared = next(line for line in catalog.lines if line.companion and not line.companion.per_python)

    def name(line: catalog_module.ReleaseLine, tag: str) -> str:
        assert line.companion is not None
        return f"torchvision-{catalog.wheel_version(line.companion)}-{tag}-macosx_14_0_x86_64.whl"

    assert companion_tags.built_problems(catalog, per_python.version,
                                         [name(per_python, "cp312-cp312")]) == []
    assert "tagged py3-none" in companion_tags.built_problems(
        catalog, per_python.version, [name(per_python, "py3-none")])[0]
    assert companion_tags.built_problems(catalog, shared.version, [name(shared, "py3-none")]) == []
    assert "tagged cp312-cp312" in companion_tags.built_problems(
        catalog, shared.version, [name(shared, "cp312-cp312")])[0]
    assert "no torchvision wheel" in companion_tags.built_problems(catalog, shared.version, [])[0]
