"""A tag's draft between runs (ci/draft.py): what a later run still builds, and adding to the
draft without replacing what it holds. Publishing (whole, or a subset on purpose) is
ci/release_status.py's, tested in test_ci_release_status.py."""

from __future__ import annotations

import pytest
from ci_support import pinned_catalog
from intelmac_torch_builder.core import catalog as catalog_module

from intelmac_torch_builder.ci import draft


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> catalog_module.Catalog:
    return catalog_module.load(pinned_catalog(tmp_path_factory.mktemp("catalog")))


def wheels(version: str, vision: str, pythons: list[str], py3_none: bool = False) -> list[str]:
    names = []
    for python in pythons:
        cp = "cp" + python.replace(".", "")
        names.append(f"torch-{version}+intelmac-{cp}-{cp}-macosx_14_0_x86_64.whl")
        tag = "py3-none" if py3_none else f"{cp}-{cp}"
        names.append(f"torchvision-{vision}+intelmac-{tag}-macosx_14_0_x86_64.whl")
    return sorted(set(names))


def test_a_later_run_builds_only_the_pairs_the_draft_lacks(catalog: catalog_module.Catalog) -> None:
    pythons = list(catalog.line("2.14.1").python)
    assert draft.pending_pairs(catalog, "v2.14.1-1", []) == [("2.14.1", p) for p in pythons]
    held = wheels("2.14.1", "0.29.1", pythons[:-1])
    assert draft.pending_pairs(catalog, "v2.14.1-1", held) == [("2.14.1", pythons[-1])]
    assert draft.pending_pairs(catalog, "v2.14.1-1", wheels("2.14.1", "0.29.1", pythons)) == []
    # A torch wheel without its torchvision is not there yet.
    torch_only = [name for name in held if name.startswith("torch-")]
    assert len(draft.pending_pairs(catalog, "v2.14.1-1", torch_only)) == len(pythons)
    # A py3-none torchvision serves every Python (2.15.0's 0.29.2).
    newer = list(catalog.line("2.15.0").python)
    assert draft.pending_pairs(catalog, "v2.15.0-1", wheels("2.15.0", "0.29.2", newer, True)) == []


def test_add_never_replaces_what_the_draft_holds() -> None:
    plan = draft.plan_add({"a.whl": "1", "b.whl": "2", "c.whl": "3"},
                          {"a.whl": "1", "b.whl": "9"})
    assert plan == draft.AddPlan(upload=("c.whl",), kept=("b.whl",))


def test_sums_cover_the_drafts_wheels() -> None:
    assert draft.sums_text({"b.whl": "2" * 64, "a.whl": "1" * 64, "SHA256SUMS": "x"}) == (
        f"{'1' * 64}  a.whl\n{'2' * 64}  b.whl\n")
