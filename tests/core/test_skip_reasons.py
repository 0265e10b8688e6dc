"""Skip reasons point at something a contributor has: a make target or a package to install,
never a path outside the repository (../shared, a cache folder on the machine that wrote it)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTSIDE = ("../shared", "upstream-src", "upstream-wheel", "upstream-tarball", ".cache/")
# Names that hold paths into the upstream cache: a reason that shows them points outside.
CACHE_PATHS = {"SOURCE_2_6", "UPSTREAM_CACHE", "root", "binary", "cache", "source"}
# Words of a reason about upstream material, which make upstream-material fetches.
MATERIAL = ("wheel", "source tree", "archive", "cached")


def _assigned(tree: ast.AST, name: str) -> list[ast.expr]:
    """The values assigned to `name` anywhere in the module (a skip reason built first)."""
    return [
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        and isinstance(node.value, (ast.Constant, ast.JoinedStr))
    ]  # fmt: skip


def _reasons() -> list[tuple[str, int, str, set[str]]]:
    """(file, line, the reason's text, the names it formats in) of every skip in tests/."""
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr == "skip":
                texts = node.args[:1]
                if texts and isinstance(texts[0], ast.Name):
                    # pytest.skip(why): the texts assigned to that name in the same file
                    texts = _assigned(tree, texts[0].id)
            elif node.func.attr == "skipif":
                texts = [k.value for k in node.keywords if k.arg == "reason"]
            else:
                continue
            for text in texts:
                parts = [text] if not isinstance(text, ast.JoinedStr) else text.values
                words = "".join(
                    part.value for part in parts
                    if isinstance(part, ast.Constant) and isinstance(part.value, str)
                )  # fmt: skip
                names = {n.id for n in ast.walk(text) if isinstance(n, ast.Name)}
                found.append((str(path.relative_to(REPO)), node.lineno, words, names))
    return found


def test_the_reader_finds_the_skips() -> None:
    assert len(_reasons()) >= 20


def test_skip_reasons_name_nothing_outside_the_repository() -> None:
    bad = [
        f"{name}:{line}: {text!r}"
        for name, line, text, names in _reasons()
        if any(word in text for word in OUTSIDE) or names & CACHE_PATHS
    ]
    assert not bad, "skip reasons pointing outside the repository:\n" + "\n".join(bad)


def test_upstream_material_skips_name_the_make_target() -> None:
    bad = [
        f"{name}:{line}: {text!r}"
        for name, line, text, _ in _reasons()
        if any(word in text for word in MATERIAL) and "make upstream-material" not in text
    ]
    assert not bad, "\n".join(bad)
