"""Generated new-file patches: in sync with patches/src, and the generator itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from intelmac_torch_builder.core import patching
from intelmac_torch_builder.maint import newfile_patch


@pytest.mark.parametrize("patch", newfile_patch.all_patches(), ids=lambda p: p.name)
def test_generated_patches_match_their_sources(patch: Path) -> None:
    stale = newfile_patch.out_of_sync(patch)
    assert not stale, (
        f"{patch.name}: {stale} differ from patches/src; "
        f"run: python -m intelmac_torch_builder.maint.newfile_patch refresh {patch}"
    )


def test_policy_patch_is_generated() -> None:
    text = (newfile_patch.PATCHES_DIR / "common" / "0001-mps-portable-device-policy.patch").read_text()
    assert newfile_patch.generated_files(text) == ["aten/src/ATen/mps/MPSDevicePolicy.h"]


def test_round_trip_through_git_apply(tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = {
        "pkg/a.h": "// one\n#pragma once\n\n  indented \\ backslash\n",
        "pkg/sub/b.py": "no trailing newline",
    }
    for name, content in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(content)
    patch = tmp_path / "0009-x.patch"
    assert newfile_patch.main(["--src-root", str(src), "create", str(patch), "--file", "pkg/a.h",
                               "--file", "pkg/sub/b.py", "--description", "Add things\nSecond line",
                               "--applies-to", "2.15.0"]) == 0
    text = patch.read_text()
    assert text.startswith("Description: Add things\n Second line\nOrigin: intelmac-torch\n")
    assert "Forwarded: not-needed\nApplies-To: 2.15.0\nGenerated-Files: pkg/a.h pkg/sub/b.py\n" in text
    tree = tmp_path / "tree"
    tree.mkdir()
    patching.apply_series(tree, [patch])
    for name, content in files.items():
        assert (tree / name).read_text() == content
    assert newfile_patch.out_of_sync(patch, src) == []
    (src / "pkg/a.h").write_text("changed\n")
    assert newfile_patch.out_of_sync(patch, src) == ["pkg/a.h"]
    assert newfile_patch.main(["--src-root", str(src), "check", str(patch)]) == 1


def test_refresh_keeps_hand_written_sections(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "new").mkdir(parents=True)
    (src / "new/x.py").write_text("x = 1\n")
    hand = (
        "diff --git a/old/y.py b/old/y.py\n--- a/old/y.py\n+++ b/old/y.py\n"
        "@@ -1,1 +1,2 @@\n y = 0\n+z = 1\n"
    )
    patch = tmp_path / "p.patch"
    header = newfile_patch.dep3_header("Mixed", "2.6.0", ["new/x.py"])
    patch.write_text(header + newfile_patch.render_new_file("new/x.py", "x = 0\n") + hand)
    assert newfile_patch.out_of_sync(patch, src) == ["new/x.py"]
    assert newfile_patch.main(["--src-root", str(src), "refresh", str(patch)]) == 0
    text = patch.read_text()
    assert text.endswith(hand) and "+x = 1\n" in text and newfile_patch.out_of_sync(patch, src) == []
