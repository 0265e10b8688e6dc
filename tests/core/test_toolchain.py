"""Every release line's build toolchain is pinned, exactly and with hashes, for each of its Pythons.

Checked from the pin files alone (hermetic); ``.ci/run`` checks the same files against the
registry with ``maint/toolchain_pins.py check``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog, toolchain
from intelmac_torch_builder.core.errors import CatalogError

LINES = catalog.load().lines


@pytest.mark.parametrize("line", LINES, ids=[line.version for line in LINES])
def test_every_line_pins_its_build_dependencies_for_every_python(line: catalog.ReleaseLine) -> None:
    assert line.toolchain is not None, f"{line.version} has no pinned toolchain in the catalog"
    chain = toolchain.load(line.toolchain.pins)
    assert toolchain.problems(chain, line.toolchain.requires, line.python, backend=line.build_backend) == []
    for python in line.python:
        versions = chain.versions(python)
        assert set(line.toolchain.requires) <= set(versions)
        assert all(version != "?" for version in versions.values())


@pytest.mark.parametrize("line", LINES, ids=[line.version for line in LINES])
def test_cmake_is_below_4(line: catalog.ReleaseLine) -> None:
    # CMake 4 refuses third-party cmake_minimum_required below 3.5 (upstream issues 150149,
    # 150167); every line builds with a pinned 3.x. See the pin files' headers for why.
    chain = toolchain.load(line.pins)
    for python in line.python:
        assert chain.versions(python)["cmake"].startswith("3.")


def test_pin_files_are_in_the_format_the_refresh_tool_writes() -> None:
    for line in LINES:
        chain = toolchain.load(line.pins)
        assert toolchain.render(chain.header, chain.pins) == line.pins.read_text()


def _copy(tmp_path: Path, version: str = "2.6.0") -> Path:
    source = catalog.load().line(version).pins
    path = tmp_path / source.name
    path.write_text(source.read_text())
    return path


def _drop(path: Path, name: str) -> None:
    """Remove requirement ``name`` (its continuation lines and #: lines) from a pin file."""
    chain = toolchain.load(path)
    kept = [pin for pin in chain.pins if pin.name != name]
    path.write_text(toolchain.render(chain.header, kept))


PY26 = catalog.load().line("2.6.0").python
REQ26 = catalog.load().line("2.6.0").toolchain.requires  # type: ignore[union-attr]


def test_an_unpinned_build_dependency_is_reported(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    _drop(path, "six")
    found = toolchain.problems(toolchain.load(path), REQ26, PY26)
    assert found == [f"2.6.0.txt: six is not pinned for Python {python}" for python in PY26]


def test_a_python_without_a_recorded_wheel_is_reported(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    text = path.read_text()
    # numpy 2.1.0 serves 3.13 only: drop its cp313 file lines.
    path.write_text("\n".join(line for line in text.splitlines() if "numpy-2.1.0-cp313" not in line) + "\n")
    found = toolchain.problems(toolchain.load(path), REQ26, PY26)
    assert len(found) == 1
    assert "numpy==2.1.0" in found[0] and "records no macOS x86_64 wheel for cp313" in found[0]


def _problems_after(tmp_path: Path, *edits: tuple[str, str]) -> str:
    """The problems of the 2.6.0 pin file after text replacements, one per line."""
    path = _copy(tmp_path)
    text = path.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    path.write_text(text)
    return "\n".join(toolchain.problems(toolchain.load(path), REQ26, PY26))


def test_loose_pins_and_missing_hashes_are_reported(tmp_path: Path) -> None:
    found = _problems_after(
        tmp_path,
        ("setuptools==75.8.0", "setuptools>=75"),
        ("wheel==0.45.1 \\\n", "wheel==0.45.1\n# "),
    )
    assert "setuptools>=75 is not an exact '==' pin" in found
    assert "wheel==0.45.1 has no --hash=sha256:..." in found


def test_a_recorded_file_must_be_hashed_and_a_mac_x86_64_wheel(tmp_path: Path) -> None:
    found = _problems_after(
        tmp_path,
        ("#: cp312 six-1.17.0-py2.py3-none-any.whl", "#: cp312 six-1.17.0-cp312-cp312-manylinux_2_17_x86_64.whl"),
        ("#: cp39 six-1.17.0-py2.py3-none-any.whl sha256:4", "#: cp39 six-1.17.0-py2.py3-none-any.whl sha256:5"),
    )
    assert "six-1.17.0-cp312-cp312-manylinux_2_17_x86_64.whl is not a macOS x86_64 wheel" in found
    assert "its hash is not among the requirement's --hash options" in found


def test_the_line_must_require_the_base_toolchain(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    found = toolchain.problems(toolchain.load(path), ("cmake", "numpy"), PY26)
    assert found[0].startswith("the line's build requirements lack ninja, setuptools, wheel")


def test_markers_pick_one_numpy_per_python() -> None:
    chain = toolchain.load(catalog.load().line("2.6.0").pins)
    assert chain.versions("3.9")["numpy"] == "2.0.2"
    assert chain.versions("3.12")["numpy"] == "2.0.2"
    assert chain.versions("3.13")["numpy"] == "2.1.0"


def test_malformed_pin_file_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("# header\ncmake==3.31.4 --hash=sha256:" + "a" * 64 + "\n#: cp312 oops\n")
    with pytest.raises(CatalogError, match=r"x.txt, line 3: expected '#: cpXY <wheel file> sha256:<hex>'"):
        toolchain.load(path)
    path.write_text("-e .\n")
    with pytest.raises(CatalogError, match=r"x.txt, line 1: only requirements with --hash"):
        toolchain.load(path)


def test_build_imports_of_a_tree_must_be_pinned(tmp_path: Path) -> None:
    from intelmac_torch_builder.maint import toolchain_pins

    files = {
        "setup.py": "import os\nimport setuptools\nfrom tools.setup_helpers.env import X\n"
        "def later():\n    import requests\n",
        "tools/__init__.py": "",
        "tools/setup_helpers/__init__.py": "",
        "tools/setup_helpers/env.py": "from typing import TYPE_CHECKING\nfrom . import helper\n"
        "if TYPE_CHECKING:\n    import pandas\n",
        "tools/setup_helpers/helper.py": "import yaml\nimport jinja2\n",
        "torchgen/gen.py": "import typing_extensions\nimport torch\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = toolchain_pins.build_imports(tmp_path)
    assert sorted(found) == ["jinja2", "setuptools", "typing_extensions", "yaml"]
    assert found["jinja2"] == {"tools/setup_helpers/helper.py"}
    line = catalog.load().line("2.6.0")
    assert toolchain_pins.import_problems(line, tmp_path) == [
        "the build imports jinja2 (tools/setup_helpers/helper.py), which 2.6.0.txt does not pin"
    ]
