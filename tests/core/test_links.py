"""The README is a landing page and docs/ holds the reference (issue 27): every relative link
in them resolves, file and #anchor, by GitHub's rules; the README's commands and samples are
the docs' own (which the docs tests check) and name only what the code has; the README and
docs/validation stay within their size limits.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
VALIDATION = DOCS / "validation"
README_MAX_BYTES = 20 * 1024
VALIDATION_MAX_BYTES = 1536 * 1024
# A summary or a short log may stay plain; anything larger is compressed (or is a plot).
PLAIN_MAX_BYTES = 32 * 1024
COMPRESSED = (".gz", ".xz", ".bz2", ".png")

FENCE = re.compile(r"^(```|~~~)")
# [text](target) and ![alt](target), with an optional "title"; nested brackets in the text are
# rare in our pages and not supported.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, re.sub(r"`[^`]*`", "``", line)))
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: the rendered text, lowercased, with every character
    that is not a letter, a digit, a mark, `_`, `-` or a space removed, and spaces made `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"(\*\*|__|(?<!\w)[*_]|[*_](?!\w))", "", text)  # emphasis markers
    kept = "".join(
        ch for ch in text.lower()
        if ch in "-_ " or unicodedata.category(ch)[0] in ("L", "N", "M")
    )  # fmt: skip
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every #anchor a Markdown page offers on GitHub, duplicates numbered as GitHub does."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    text = page.read_text(encoding="utf-8")
    for _, line in _prose_lines(text):
        found.update(HTML_ANCHOR.findall(line))
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        heading = None if fenced else HEADING.match(line)
        if heading is None:
            continue
        slug = github_slug(heading.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every link in a page's prose."""
    found = []
    for number, line in _prose_lines(page.read_text(encoding="utf-8")):
        found += [(number, target) for target in INLINE_LINK.findall(line)]
        reference = REFERENCE_LINK.match(line)
        if reference:
            found.append((number, reference.group(1)))
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # https:, mailto: ...: not ours to check offline
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(REPO)}:{number}: {target}"
        if not resolved.exists():
            broken.append(f"{where}: no such file")
        elif REPO not in resolved.parents and resolved != REPO:
            broken.append(f"{where}: outside the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{where}: no heading with the anchor #{anchor}")
    return broken


def test_github_slugs_follow_githubs_rules() -> None:
    assert github_slug("Does my GPU help? `python -m torch.backends.mps --check`") == (
        "does-my-gpu-help-python--m-torchbackendsmps---check"
    )
    assert github_slug("Validation on an NVIDIA H100 (2026-11-23)") == "validation-on-an-nvidia-h100-2026-11-23"
    assert github_slug("What is verified here, and what only a Mac can confirm") == (
        "what-is-verified-here-and-what-only-a-mac-can-confirm"
    )
    assert github_slug("The [allocator](x.md) on **Intel** and AMD_GPUs") == "the-allocator-on-intel-and-amd_gpus"


def test_the_link_reader_finds_links_and_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## Same\n\n## Same\n\nSee [a](other.md#x), ![b](pic.png) and `[c](code.md)`.\n\n"
        "```\n[d](fenced.md)\n## not a heading\n```\n[e]: ref.md\n",
        encoding="utf-8",
    )
    assert [target for _, target in links(page)] == ["other.md#x", "pic.png", "ref.md"]
    assert anchors(page) == {"title", "same", "same-1"}


@pytest.mark.parametrize("page", _pages(), ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = broken_links(page)
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_docs_have_an_index_that_links_every_page() -> None:
    index = DOCS / "README.md"
    linked = {(index.parent / target.partition("#")[0]).resolve() for _, target in links(index)}
    pages = {page.resolve() for page in DOCS.glob("*.md") if page != index}
    pages |= {(VALIDATION / "README.md").resolve()}
    unlisted = sorted(str(page.relative_to(REPO)) for page in pages - linked)
    assert not unlisted, f"docs/README.md does not link {unlisted}"
    assert str(index.relative_to(REPO)) in README.read_text(encoding="utf-8")


def test_the_readme_is_a_landing_page() -> None:
    size = README.stat().st_size
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move reference text into docs/"


def _code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced block."""
    blocks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    language = ""
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            if current is None:
                language, current = line.strip().strip("`~").strip(), []
            else:
                blocks.append((language, current))
                current = None
            continue
        if current is not None:
            current.append(line)
    return blocks


def _statements(lines: list[str]) -> list[str]:
    """A block's commands or statements, without comments, continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    statements = []
    for line in joined.splitlines():
        code = re.sub(r"\s+#\s.*$", "", line).strip()
        if code and not code.startswith("#"):
            statements.append(" ".join(code.split()))
    return statements


def test_the_readmes_samples_are_the_docs_own() -> None:
    """Every command and statement in the README's code blocks also stands in a code block of a
    docs page, where the docs tests read it (install lines, pins, indexes), so that the landing
    page never shows a sample the reference does not."""
    in_docs: set[str] = set()
    for page in sorted(DOCS.rglob("*.md")):
        for _, lines in _code_blocks(page.read_text(encoding="utf-8")):
            in_docs.update(_statements(lines))
    blocks = _code_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 5, "the README's code blocks were not found; the reader is broken"
    missing = [
        statement
        for language, lines in blocks if language in ("sh", "python")
        for statement in _statements(lines) if statement not in in_docs
    ]  # fmt: skip
    assert not missing, f"README samples that no docs page shows: {missing}"


def _makefile_targets_and_variables() -> tuple[set[str], set[str]]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*):(?!=)", text, re.MULTILINE))
    variables = set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*[?:]?=", text, re.MULTILINE))
    return targets, variables


def test_the_make_commands_in_readme_and_docs_exist() -> None:
    """`make TARGET VAR=...` in any code block of the README or the docs names a target and
    variables that the Makefile has."""
    targets, variables = _makefile_targets_and_variables()
    assert {"build", "test"} <= targets and "VERSION" in variables
    wrong, checked = [], 0
    for page in _pages():
        for _, lines in _code_blocks(page.read_text(encoding="utf-8")):
            for statement in _statements(lines):
                for call in re.finditer(r"(?:^|[;&|]\s*)make\s+((?:-\S+\s+)*)([a-z][\w-]*)((?:\s+[A-Z][A-Z0-9_]*=\S+)*)", statement):
                    checked += 1
                    if call.group(2) not in targets:
                        wrong.append(f"{page.name}: make {call.group(2)}: no such target")
                    wrong += [
                        f"{page.name}: make {call.group(2)} {name}=: the Makefile reads no {name}"
                        for name in re.findall(r"([A-Z][A-Z0-9_]*)=", call.group(3))
                        if name not in variables
                    ]  # fmt: skip
    assert checked >= 10, "the make commands were not found; the reader is broken"
    assert not wrong, "\n".join(wrong)


MPS_SOURCES = REPO / "patches" / "src" / "torch" / "backends" / "mps"
UPSTREAM_MPS_NAMES = {"is_available", "is_built"}


def test_the_readmes_mps_names_and_options_exist() -> None:
    """What the README tells a user to type (torch.backends.mps.NAME, and the options of
    python -m torch.backends.mps) is defined by the series' own files."""
    readme = README.read_text(encoding="utf-8")
    source = "\n".join(path.read_text(encoding="utf-8") for path in sorted(MPS_SOURCES.glob("*.py")))
    names = set(re.findall(r"torch\.backends\.mps\.([a-z_]+)", readme)) - UPSTREAM_MPS_NAMES
    assert {"allow_intel_gpu", "devices", "check"} <= names
    undefined = sorted(
        name for name in names
        if not re.search(rf"^def {name}\(|\"{name}\"|^{name}\s*=", source, re.MULTILINE)
    )  # fmt: skip
    assert not undefined, f"the README names torch.backends.mps.{undefined}, which the series lacks"
    options = set(re.findall(r"python -m torch\.backends\.mps((?:\s+--[a-z-]+)+)", readme))
    flags = {flag for group in options for flag in group.split()}
    assert {"--check", "--json"} <= flags
    unknown = sorted(flag for flag in flags if f'"{flag}"' not in source)
    assert not unknown, f"the README shows options the module does not take: {unknown}"


def test_validation_runs_fit_and_keep_raw_reports_compressed() -> None:
    files = [path for path in VALIDATION.rglob("*") if path.is_file()]
    total = sum(path.stat().st_size for path in files)
    assert total <= VALIDATION_MAX_BYTES, f"docs/validation holds {total} bytes (limit 1.5 MB)"
    raw = sorted(
        str(path.relative_to(VALIDATION)) for path in files
        if path.stat().st_size > PLAIN_MAX_BYTES and path.suffix not in COMPRESSED
    )  # fmt: skip
    assert not raw, f"raw reports in docs/validation over 32 KiB must be compressed: {raw}"
    index = VALIDATION / "README.md"
    linked = {(VALIDATION / target).resolve().relative_to(VALIDATION.resolve()).parts[0]
              for _, target in links(index) if not target.startswith(("#", "..", "http"))}  # fmt: skip
    unlisted = sorted(run.name for run in VALIDATION.iterdir() if run.is_dir() and run.name not in linked)
    assert not unlisted, f"docs/validation/README.md does not summarise the runs {unlisted}"


def _release_rows() -> dict[str, list[str]]:
    """The release-lines table of docs/install.md: torch version -> its cells."""
    rows = {}
    for line in (DOCS / "install.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        version = re.match(r"^(\d+\.\d+\.\d+)( \(default\))?$", cells[0]) if line.startswith("|") else None
        if version:
            rows[version.group(1)] = [version.group(0), *cells[1:]]
    return rows


def test_the_release_lines_table_is_the_catalogs() -> None:
    """docs/install.md's table of release lines, and the Xcode per line the README names, say
    what patches/catalog.yaml says."""
    from intelmac_torch_builder.core import catalog

    loaded = catalog.load()
    rows = _release_rows()
    assert sorted(rows) == sorted(line.version for line in loaded.lines)
    for line in loaded.lines:
        cells = rows[line.version]
        assert cells[0].endswith("(default)") == (line.version == loaded.default_version), cells
        assert cells[1] == f"{line.python[0]} to {line.python[-1]}", cells
        assert cells[2] == f"{line.macos_deployment_target} and later", cells
        assert cells[3] == line.mps_min_macos, cells
        assert line.companion is not None and cells[5] == line.companion.version, cells
    readme = README.read_text(encoding="utf-8")
    named = re.search(r"an Xcode the line builds with \(([^)]*)\)", " ".join(readme.split()))
    assert named, "the README no longer names each line's Xcode range"
    said = {
        version: xcode
        for xcode, versions in re.findall(r"(\d+\.\d+ to \d+\.\d+) for ([\d. and]+?)(?:[,;]|$)",
                                          named.group(1))
        for version in re.findall(r"\d+\.\d+\.\d+", versions)
    }  # fmt: skip
    assert said == {line.version: line.xcode.words.removeprefix("Xcode ") for line in loaded.lines
                    if line.xcode is not None}, said
