"""The patch-application core: all-or-nothing, and failures name patch, file and hunk."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from intelmac_torch_builder.core import patching
from intelmac_torch_builder.core.patching import PatchConflict

ORIGINAL = "".join(f"line {n}\n" for n in range(1, 41))


def _diff(tmp_path: Path, name: str, path: str, before: str | None, after: str) -> Path:
    """Write a git-style patch turning ``before`` into ``after`` (None: a new file)."""
    a, b = tmp_path / f"{name}.a", tmp_path / f"{name}.b"
    for side, text in ((a, before), (b, after)):
        side.mkdir()
        if text is not None:
            (side / path).parent.mkdir(parents=True, exist_ok=True)
            (side / path).write_text(text)
    out = subprocess.run(
        ["diff", "-ruN", "--label", f"a/{path}", "--label", f"b/{path}",
         str(a / path) if before is not None else "/dev/null", str(b / path)],
        capture_output=True,
        text=True,
    ).stdout
    if before is None:
        out = out.replace(f"--- a/{path}", "--- /dev/null", 1)
        out = f"diff --git a/{path} b/{path}\nnew file mode 100644\n" + out
    patch = tmp_path / f"{name}.patch"
    patch.write_text(f"Description: {name}\n\n{out}")
    return patch


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "file.txt").write_text(ORIGINAL)
    return root


def _series(tmp_path: Path) -> list[Path]:
    first_after = ORIGINAL.replace("line 3\n", "line 3 patched\n")
    second_after = first_after.replace("line 30\n", "line 30 patched\n")
    return [
        _diff(tmp_path, "0001-edit", "src/file.txt", ORIGINAL, first_after),
        _diff(tmp_path, "0002-new", "src/new.h", None, "// new\n"),
        # Depends on 0001 having been applied: the series is applied in order.
        _diff(tmp_path, "0003-edit-again", "src/file.txt", first_after, second_after),
    ]


def test_series_applies_in_order(tmp_path: Path, tree: Path) -> None:
    series = _series(tmp_path)
    patching.check_series(tree, series)
    assert (tree / "src" / "file.txt").read_text() == ORIGINAL  # check changes nothing
    assert not patching.is_applied(tree, series)
    patching.apply_series(tree, series)
    text = (tree / "src" / "file.txt").read_text()
    assert "line 3 patched\n" in text and "line 30 patched\n" in text
    assert (tree / "src" / "new.h").read_text() == "// new\n"
    assert patching.is_applied(tree, series)


def test_conflict_names_patch_file_and_hunk_and_leaves_tree_untouched(
    tmp_path: Path, tree: Path
) -> None:
    series = _series(tmp_path)
    (tree / "src" / "file.txt").write_text(ORIGINAL.replace("line 30\n", "line thirty\n"))
    before = {p: p.read_bytes() for p in tree.rglob("*") if p.is_file()}
    with pytest.raises(PatchConflict) as error:
        patching.apply_series(tree, series)
    message = str(error.value)
    assert "0003-edit-again.patch" in message
    assert "src/file.txt" in message
    assert "hunk #1 of 1" in message
    after = {p: p.read_bytes() for p in tree.rglob("*") if p.is_file()}
    assert after == before  # nothing half-applied, no new file


def test_missing_file_is_reported(tmp_path: Path, tree: Path) -> None:
    series = _series(tmp_path)
    (tree / "src" / "file.txt").unlink()
    with pytest.raises(PatchConflict, match="src/file.txt"):
        patching.check_series(tree, series)


def test_check_upstream_skips_absent_files_but_checks_present_ones(
    tmp_path: Path, tree: Path
) -> None:
    series = _series(tmp_path)
    report = patching.check_upstream(tree, series)
    assert ("0001-edit.patch", "src/file.txt") in report.checked
    assert not report.absent

    wheel_like = tmp_path / "wheel"
    wheel_like.mkdir()
    report = patching.check_upstream(wheel_like, series)
    assert ("0001-edit.patch", "src/file.txt") in report.absent
    assert ("0002-new.patch", "src/new.h") in report.checked


def test_check_upstream_uses_the_path_map(tmp_path: Path, tree: Path) -> None:
    series = _series(tmp_path)
    mapped = tmp_path / "mapped"
    (mapped / "include").mkdir(parents=True)
    (mapped / "include" / "file.txt").write_text(ORIGINAL.replace("line 3\n", "changed\n"))
    with pytest.raises(PatchConflict, match="0001-edit.patch"):
        patching.check_upstream(mapped, series, lambda p: p.replace("src/", "include/"))


def test_tree_inside_another_git_checkout_is_patched_as_a_plain_directory(
    tmp_path: Path,
) -> None:
    outer = tmp_path / "outer"
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    tree = outer / "build" / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "file.txt").write_text(ORIGINAL)
    series = _series(tmp_path)
    patching.apply_series(tree, series)
    assert "line 30 patched" in (tree / "src" / "file.txt").read_text()
