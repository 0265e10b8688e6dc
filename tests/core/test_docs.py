"""What the project tells users: install instructions name only our index, with the exact pin,
no registry host is named anywhere, and the layout section of docs/contributing.md matches the
folders.
"""

from __future__ import annotations

import ast
import html
import re
import subprocess
from pathlib import Path

import pytest
from intelmac_torch_builder.ci import publish_index

REPO = Path(__file__).resolve().parents[2]
# Spelt in pieces so that this file does not name them either.
REGISTRY_HOSTS = ("pypi" + ".org", "files." + "pythonhosted" + ".org", "download." + "pytorch" + ".org")
# Our index, as the instructions write it: the Pages site, the page itself, or the local one.
OUR_INDEXES = re.compile(
    r"^(https://<owner>\.github\.io/<repo>/simple|<site>/simple|file://\$PWD/wheels/simple)$"
)
PIN = re.compile(r"^torch==[^\s]+\+intelmac$")


def _tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=REPO, capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [REPO / name for name in listed if (REPO / name).is_file()]


# PyTorch's CPU wheel index is named only where Linux tests need a CPU-only torch: the rule
# that picks make test's torch, and its test.
CPU_INDEX = "https://" + REGISTRY_HOSTS[2] + "/whl/cpu"
CPU_INDEX_ALLOWED = {"build_scripts/maint/test_torch.py", "tests/core/test_test_torch.py"}


def test_no_file_names_a_registry_host() -> None:
    named = []
    for path in _tracked_files():
        try:
            text = path.read_text(encoding="utf-8").lower()
        except UnicodeDecodeError:
            continue  # images
        name = str(path.relative_to(REPO))
        if name in CPU_INDEX_ALLOWED:
            text = text.replace(CPU_INDEX, "")
        named += [f"{name}: {host}" for host in REGISTRY_HOSTS if host in text]
    assert not named, "registry hosts named:\n" + "\n".join(named)


def test_the_cpu_index_is_the_linux_tests_one() -> None:
    from intelmac_torch_builder.maint import test_torch

    assert test_torch.CPU_INDEX == CPU_INDEX


def _instructions() -> dict[str, str]:
    """Every text that tells a user how to install: docs, comments, the index pages."""
    files = [REPO / "README.md", REPO / "Makefile", REPO / "wheels" / "README.md",
             REPO / "wheels" / ".gitignore", REPO / "patches" / "README.md",
             *sorted((REPO / "docs").glob("*.md"))]  # fmt: skip
    texts = {str(path.relative_to(REPO)): path.read_text(encoding="utf-8") for path in files}
    index_stage = REPO / "build_scripts" / "stages" / "index.py"
    texts["stages/index.py docstring"] = ast.get_docstring(ast.parse(index_stage.read_text())) or ""
    page = publish_index.landing_page(["2.14.1+intelmac"])
    texts["published index page"] = html.unescape(re.sub(r"<[^>]+>", " ", page))
    return texts


def _index_then_requirement(text: str) -> list[tuple[str, str]]:
    """(index URL, the torch requirement that follows it) for every --extra-index-url."""
    words = [word.strip("`'\"\\#.,;:()") for word in text.split()]
    found = []
    for position, word in enumerate(words):
        if word == "--extra-index-url":
            url = words[position + 1] if position + 1 < len(words) else ""
            requirement = next((w for w in words[position + 2:] if w.startswith("torch")), "")
            found.append((url, requirement))
    return found


def test_install_instructions_name_only_our_index_with_an_exact_pin() -> None:
    checked = 0
    for name, text in _instructions().items():
        plain = re.findall(r"(?<![-\w])--index-url\s+\S+", text)
        assert not plain, f"{name}: {plain}: use --extra-index-url <ours> with an exact pin"
        for url, requirement in _index_then_requirement(text):
            assert OUR_INDEXES.match(url), f"{name}: --extra-index-url {url} is not our index"
            assert PIN.match(requirement), f"{name}: {url} is followed by {requirement!r}, not torch==X+intelmac"
            checked += 1
    assert checked >= 5, "the instructions were not found; the reader is broken"


LAYOUT_DOC = REPO / "docs" / "contributing.md"


def _layout_block() -> list[str]:
    text = LAYOUT_DOC.read_text(encoding="utf-8")
    section = text.split("## Repository layout", 1)[1]
    return section.split("```", 2)[1].splitlines()[1:]


def _layout_entries() -> list[str]:
    """The paths the layout block lists, nested ones joined to their folder."""
    entries: list[str] = []
    parents: list[tuple[int, str]] = []
    for line in _layout_block():
        indent = len(line) - len(line.lstrip())
        name = line.split()[0] if line.strip() else ""
        if not name or indent > 8 or not (name.endswith("/") or "." in name):
            continue  # a description's continuation line
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = "".join(parent for _, parent in parents) + name
        entries.append(path)
        if name.endswith("/"):
            parents.append((indent, name))
    return entries


def test_layout_lists_only_what_exists() -> None:
    entries = _layout_entries()
    assert "build_scripts/stages/" in entries
    missing = [entry for entry in entries if not (REPO / entry).exists()]
    assert not missing, f"{LAYOUT_DOC.name}'s layout names {missing}, which do not exist"


def test_layout_lists_every_folder_of_the_code() -> None:
    entries = set(_layout_entries())
    folders = {f"{path.name}/" for path in REPO.iterdir() if path.is_dir() and path.name in
               ("patches", "build_scripts", "wheels", "ci", "tests", "docs", ".github")}
    folders |= {
        f"{path.relative_to(REPO)}/"
        for path in (REPO / "build_scripts").rglob("*")
        if path.is_dir() and path.name != "__pycache__"
    }
    unlisted = sorted(
        folder for folder in folders if not any(entry.startswith(folder) for entry in entries)
    )
    assert not unlisted, f"{LAYOUT_DOC.name}'s layout does not show {unlisted}"


def test_install_lines_name_torch_and_its_torchvision() -> None:
    """A pip install of our torch also pins the torchvision built against it (the catalog's
    companion), so a later `pip install torchvision` cannot pull a public one."""
    from intelmac_torch_builder.core import catalog

    lines = catalog.load()
    checked = 0
    for path in (REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))):
        for text in path.read_text(encoding="utf-8").splitlines():
            if "pip install" not in text or "--extra-index-url" not in text:
                continue
            torch = re.search(r"\btorch==([\d.]+)\+intelmac", text)
            if torch is None:
                continue
            companion = lines.line(torch.group(1)).companion
            assert companion is not None
            assert f"torchvision=={companion.version}+intelmac" in text, f"{path.name}: {text}"
            checked += 1
    assert checked >= 2


def test_the_linux_stop_sample_shows_the_current_series() -> None:
    from intelmac_torch_builder.core import catalog

    text = (REPO / "docs" / "building.md").read_text(encoding="utf-8")
    found = re.search(
        r"Compiling PyTorch ([\d.]+) needs macOS.*?patched it with (\d+) patches "
        r"\(series ([0-9a-f]{12})\)", text, re.DOTALL,
    )  # fmt: skip
    assert found, "docs/building.md has no sample of the Linux stop"
    line = catalog.load().line(found.group(1))
    assert (int(found.group(2)), found.group(3)) == (len(line.patches), line.series_fingerprint[:12])
    assert line.companion is not None
    assert f"{line.companion.title} is not fetched here" in text
    assert f"make build VERSION={line.version} PYTHON=" in text and "BUILD_ARGS=--dry-run" in text
    # The Xcode it asks for is what the preflight accepts (the line's range).
    from intelmac_torch_builder.core import preflight

    assert f"with {preflight.xcode_wanted(line)} and ccache" in text


def test_the_allocator_case_count_is_the_tests() -> None:
    """docs/mps-device-policy.md says how many cases the allocator tests have: pytest counts them."""
    import sys

    text = " ".join((REPO / "docs" / "mps-device-policy.md").read_text(encoding="utf-8").split())
    for name in ("test_allocator.py", "test_whole_allocator.py"):
        said = re.search(rf"(\d+) of the (\d+) cases of `{name}`", text)
        assert said, f"docs/mps-device-policy.md no longer counts the cases of {name}"
        listed = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             f"tests/fake_metal/{name}"],
            cwd=REPO, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        cases = [row for row in listed.splitlines() if row.startswith(f"tests/fake_metal/{name}::")]
        assert int(said.group(2)) == len(cases), name
        assert 0 < int(said.group(1)) < len(cases), name
