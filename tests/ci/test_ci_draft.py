"""A release is whole, or a draft (ci/draft.py): what a tag's draft lacks, what a later run
adds to it, and when it is published."""

from __future__ import annotations

import pytest
from ci_support import pinned_catalog
from intelmac_torch_builder.core import catalog as catalog_module
from intelmac_torch_builder.core.errors import BuildError

from intelmac_torch_builder.ci import draft

PLATFORM = "macosx_14_0_x86_64.whl"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> catalog_module.Catalog:
    return catalog_module.load(pinned_catalog(tmp_path_factory.mktemp("catalog")))


def names(catalog: catalog_module.Catalog, version: str, pythons: list[str]) -> list[str]:
    line = catalog.line(version)
    return sorted({prefix + PLATFORM for python in pythons
                   for prefix in draft.wheel_prefixes(catalog, line, python)})


def test_a_tag_stands_for_every_python_of_its_lines(catalog: catalog_module.Catalog) -> None:
    wanted = draft.expected(catalog, "v2.14.1-1")
    line = catalog.line("2.14.1")
    assert list(wanted) == [draft.Pair("2.14.1", python) for python in line.python]
    # 0.29.1's official wheels are per Python; 0.29.2's (2.15.0) one py3-none wheel.
    assert wanted[draft.Pair("2.14.1", "3.12")] == (
        "torch-2.14.1+intelmac-cp312-cp312-", "torchvision-0.29.1+intelmac-cp312-cp312-")
    assert draft.expected(catalog, "v2.15.0-1")[draft.Pair("2.15.0", "3.12")][1] == (
        "torchvision-0.29.2+intelmac-py3-none-")
    assert len(draft.expected(catalog, "release-20261127")) == sum(
        len(line.python) for line in catalog.lines)


def test_what_is_missing(catalog: catalog_module.Catalog) -> None:
    wanted = draft.expected(catalog, "v2.14.1-1")
    pythons = list(catalog.line("2.14.1").python)
    assert draft.missing(wanted, names(catalog, "2.14.1", pythons)) == []
    held = names(catalog, "2.14.1", pythons[:-1])
    assert draft.missing(wanted, held) == [draft.Pair("2.14.1", pythons[-1])]
    # A torch wheel without its torchvision is not there yet.
    torch_only = [name for name in names(catalog, "2.14.1", pythons) if name.startswith("torch-")]
    assert len(draft.missing(wanted, torch_only)) == len(pythons)


def test_add_never_replaces_what_the_draft_holds() -> None:
    plan = draft.plan_add({"a.whl": "1", "b.whl": "2", "c.whl": "3"},
                          {"a.whl": "1", "b.whl": "9"})
    assert plan == draft.AddPlan(upload=("c.whl",), kept=("b.whl",))


def test_publish_only_when_whole_or_on_purpose() -> None:
    one, two = draft.Pair("2.14.1", "3.13"), draft.Pair("2.14.1", "3.14")
    assert draft.publish_decision("v2.14.1-1", [], []).publish
    kept = draft.publish_decision("v2.14.1-1", [one, two], [])
    assert not kept.publish
    assert "stays a draft: missing 2.14.1/3.13, 2.14.1/3.14" in kept.message
    assert "Press 'Re-run failed jobs'" in kept.message and "Use workflow from" in kept.message
    assert ("gh workflow run release.yml --ref v2.14.1-1 -f publish_without=2.14.1/3.13,2.14.1/3.14"
            in kept.message)
    assert draft.publish_decision("v2.14.1-1", [one, two], [two, one]).publish
    # Leaving out less, or something that is there, is refused: the command must say it all.
    assert not draft.publish_decision("v2.14.1-1", [one, two], [two]).publish
    assert not draft.publish_decision("v2.14.1-1", [], [two]).publish


def test_pairs_are_read_as_line_slash_python() -> None:
    assert draft.parse_pairs("2.14.1/3.13, 2.14.1/3.14") == [
        draft.Pair("2.14.1", "3.13"), draft.Pair("2.14.1", "3.14")]
    assert draft.parse_pairs("") == []
    with pytest.raises(BuildError, match="'3.14' is not <line>/<python>"):
        draft.parse_pairs("3.14")


def test_sums_cover_the_drafts_wheels() -> None:
    assert draft.sums_text({"b.whl": "2" * 64, "a.whl": "1" * 64, "SHA256SUMS": "x"}) == (
        f"{'1' * 64}  a.whl\n{'2' * 64}  b.whl\n")
