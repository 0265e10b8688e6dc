"""Patches that add new files, generated from real source files kept under patches/src/.

Code we add to PyTorch (a new header, a new Python module) is easier to read, lint and
test as a normal file than as ``+`` lines of a patch. So the file lives at
``patches/src/<path in the PyTorch tree>`` and its patch is generated from it:

    python -m intelmac_torch_builder.maint.newfile_patch create patches/common/0001-x.patch \\
        --file aten/src/ATen/mps/MPSDevicePolicy.h \\
        --description "Add ..." --applies-to "2.15.0, 2.14.1, 2.9.1, 2.6.0"
    python -m intelmac_torch_builder.maint.newfile_patch refresh patches/common/0001-x.patch
    python -m intelmac_torch_builder.maint.newfile_patch check          # every patch under patches/

The patch's DEP-3 header records which of its files are generated in a
``Generated-Files:`` field, so ``refresh`` and ``check`` need no other list. A patch may
mix generated new files with hand-written hunks on upstream files: ``refresh`` rewrites
only the generated sections and keeps everything else as it is.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from ..core import catalog
from ..core.errors import BuildError

PATCHES_DIR = catalog.PATCHES_DIR
SRC_ROOT = PATCHES_DIR / "src"
GENERATED_FIELD = "Generated-Files"

_SECTION_START = re.compile(r"^(?=diff --git )", re.MULTILINE)
_SECTION_PATH = re.compile(r"^diff --git a/(?P<a>\S+) b/(?P<b>\S+)$", re.MULTILINE)


def render_new_file(tree_path: str, content: str) -> str:
    """A git-style diff that creates ``tree_path`` with ``content``."""
    if not content:
        raise BuildError(f"{tree_path}: an empty file cannot be carried by a new-file patch")
    data = content.encode("utf-8")
    # git's own blob id, so the index line is what `git diff` would write.
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:7]
    lines = content.splitlines(keepends=True)
    body = "".join("+" + line for line in lines)
    if not content.endswith("\n"):
        body += "\n\\ No newline at end of file\n"
    return (
        f"diff --git a/{tree_path} b/{tree_path}\n"
        "new file mode 100644\n"
        f"index 0000000..{blob}\n"
        "--- /dev/null\n"
        f"+++ b/{tree_path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n"
        f"{body}"
    )


def dep3_header(description: str, applies_to: str, generated: Sequence[str], *,
                origin: str = "intelmac-torch", forwarded: str = "not-needed") -> str:
    """A DEP-3 header; continuation lines of the description are indented by one space."""
    first, *rest = description.strip().splitlines() or [""]
    text = f"Description: {first}\n"
    for line in rest:
        text += f" {line.strip() or '.'}\n"
    text += f"Origin: {origin}\nForwarded: {forwarded}\nApplies-To: {applies_to}\n"
    if generated:
        text += f"{GENERATED_FIELD}: {' '.join(generated)}\n"
    return text + "\n"


def split_sections(patch_text: str) -> tuple[str, list[tuple[str, str]]]:
    """(header, [(path, section text)]) where each section is one file's ``diff --git``."""
    chunks = _SECTION_START.split(patch_text)
    header, sections = chunks[0], []
    for chunk in chunks[1:]:
        match = _SECTION_PATH.match(chunk)
        if not match:
            raise BuildError(f"cannot read the file names of this diff section:\n{chunk[:200]}")
        sections.append((match["b"], chunk))
    return header, sections


def generated_files(patch_text: str) -> list[str]:
    """The tree paths that the header's ``Generated-Files`` field names."""
    header, _ = split_sections(patch_text)
    names: list[str] = []
    collecting = False
    for line in header.splitlines():
        if line.startswith(f"{GENERATED_FIELD}:"):
            names += line.split(":", 1)[1].split()
            collecting = True
        elif collecting and line.startswith(" "):
            names += line.split()
        else:
            collecting = False
    return names


def _source(src_root: Path, tree_path: str) -> str:
    path = src_root / tree_path
    if not path.is_file():
        raise BuildError(f"{path} does not exist: the patch says {tree_path} is generated from it")
    return path.read_text(encoding="utf-8")


def regenerate(patch_text: str, src_root: Path = SRC_ROOT) -> str:
    """The patch with every generated section rewritten from its source file."""
    header, sections = split_sections(patch_text)
    wanted = generated_files(patch_text)
    fresh = {path: render_new_file(path, _source(src_root, path)) for path in wanted}
    out = header
    for path, text in sections:
        out += fresh.pop(path, text)
    # Generated files not yet in the patch go after the sections it already has.
    for path in wanted:
        if path in fresh:
            out += fresh.pop(path)
    return out


def out_of_sync(patch: Path, src_root: Path = SRC_ROOT) -> list[str]:
    """The generated files of ``patch`` whose sections differ from their sources."""
    text = patch.read_text(encoding="utf-8")
    _, sections = split_sections(text)
    have = dict(sections)
    stale = []
    for path in generated_files(text):
        if have.get(path) != render_new_file(path, _source(src_root, path)):
            stale.append(path)
    return stale


def all_patches(root: Path = PATCHES_DIR) -> list[Path]:
    return sorted(path for path in root.rglob("*.patch") if SRC_ROOT not in path.parents)


def _create(args: argparse.Namespace) -> int:
    header = dep3_header(args.description, args.applies_to, args.file,
                         origin=args.origin, forwarded=args.forwarded)
    args.patch.parent.mkdir(parents=True, exist_ok=True)
    args.patch.write_text(regenerate(header, args.src_root), encoding="utf-8")
    print(f"wrote {args.patch}")
    return 0


def _refresh(args: argparse.Namespace) -> int:
    for patch in args.patch:
        text = patch.read_text(encoding="utf-8")
        if not generated_files(text):
            raise BuildError(f"{patch} has no {GENERATED_FIELD} field: nothing to regenerate")
        new = regenerate(text, args.src_root)
        if new != text:
            patch.write_text(new, encoding="utf-8")
            print(f"refreshed {patch}")
        else:
            print(f"{patch} is up to date")
    return 0


def _check(args: argparse.Namespace) -> int:
    patches = args.patch or all_patches()
    stale = [(patch, path) for patch in patches for path in out_of_sync(patch, args.src_root)]
    for patch, path in stale:
        print(f"{patch}: {path} differs from {args.src_root / path}; "
              f"run: python -m intelmac_torch_builder.maint.newfile_patch refresh {patch}")
    return 1 if stale else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.maint.newfile_patch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src-root", type=Path, default=SRC_ROOT,
                        help="where the source files live, by tree path (default: patches/src)")
    sub = parser.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create", help="write a new patch from source files")
    create.add_argument("patch", type=Path, help="the patch file to write")
    create.add_argument("--file", action="append", required=True, metavar="TREE_PATH",
                        help="path inside the PyTorch tree; the source is SRC_ROOT/TREE_PATH")
    create.add_argument("--description", required=True,
                        help="what the patch does: its DEP-3 Description")
    create.add_argument("--applies-to", required=True, help='release lines, e.g. "2.15.0, 2.14.1"')
    create.add_argument("--origin", default="intelmac-torch",
                        help="where the change comes from (default: intelmac-torch)")
    create.add_argument("--forwarded", default="not-needed",
                        help="the upstream PR it was sent as (default: not-needed)")
    create.set_defaults(func=_create)
    refresh = sub.add_parser("refresh", help="rewrite the generated sections of patches")
    refresh.add_argument("patch", type=Path, nargs="+", help="patch files to rewrite")
    refresh.set_defaults(func=_refresh)
    check = sub.add_parser("check", help="exit 1 if a generated section is out of date")
    check.add_argument("patch", type=Path, nargs="*",
                       help="patch files to check (default: every patch under patches/)")
    check.set_defaults(func=_check)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
