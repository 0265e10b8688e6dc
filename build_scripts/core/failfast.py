"""Compile the sources the patch series touches or creates first, right after CMake configures.

A mistake in the series' own C++ or Objective-C++ shows in minutes instead of after hours
of compiling the rest of PyTorch. The list comes from the series itself (every file a patch
adds or changes, kept if it is a translation unit), never from a hand-kept list, and the
objects to build come from the configured ``build.ninja``: a source this configuration does
not compile (another platform's file) is named and skipped, not an error.

    python -m intelmac_torch_builder.core.failfast --tree TREE --build-dir TREE/build \\
        PATCH [PATCH ...]

runs ``ninja -C BUILD_DIR <their objects>`` (ninja from PATH: the build venv's pinned one).

``steps`` puts it in a build plan: CMake configures alone first (``setup.py build
--cmake-only`` for a setuptools line; for scikit-build-core, which configures inside ``pip
wheel``, a ``pip wheel`` whose only build target is ``build.ninja``: see
``backend.configure_only_command``), then this compiles the series' objects, then the full
wheel build reuses the configured ``build/``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import backend as backend_mod
from ._plan import Step
from .patching import file_changes

#: Suffixes of the translation units a compiler sees on its command line.
UNIT_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".m", ".mm")
#: ``build <outputs>: <rule> <explicit inputs> [| implicit] [|| order-only]`` in a ninja file.
_BUILD = re.compile(r"^build (?P<outputs>(?:[^:$]|\$.)+): (?P<rule>\S+)(?P<inputs>.*)$")


def series_units(patches: Iterable[Path]) -> list[str]:
    """The translation units the series adds or changes (tree-relative), in series order."""
    units: dict[str, None] = {}
    for patch in patches:
        for change in file_changes(patch):
            if change.path.endswith(UNIT_SUFFIXES) and not change.is_removed:
                units[change.path] = None
    return list(units)


def _unescape(text: str) -> list[str]:
    """Ninja's path list: space-separated, ``$ `` / ``$:`` / ``$$`` escaped."""
    words, current, index = [], "", 0
    while index < len(text):
        char = text[index]
        if char == "$" and index + 1 < len(text):
            current += text[index + 1]
            index += 2
            continue
        if char == " ":
            if current:
                words.append(current)
            current = ""
        else:
            current += char
        index += 1
    if current:
        words.append(current)
    return words


def _ninja_files(build_dir: Path) -> Iterable[Path]:
    """build.ninja and the files it includes (CMake writes one for some generators)."""
    pending, seen = [build_dir / "build.ninja"], set()
    while pending:
        path = pending.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        yield path
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith(("include ", "subninja ")):
                pending.append(build_dir / _unescape(line.split(" ", 1)[1])[0])


def objects_for(build_dir: Path, sources: Sequence[Path]) -> dict[Path, str]:
    """The first output of the build statement compiling each source (those the graph has)."""
    wanted = {os.path.normpath(source): source for source in sources}
    found: dict[Path, str] = {}
    for ninja in _ninja_files(build_dir):
        for line in ninja.read_text(encoding="utf-8", errors="replace").splitlines():
            match = _BUILD.match(line)
            if not match:
                continue
            explicit = match["inputs"].split(" | ", 1)[0].split(" || ", 1)[0]
            for word in _unescape(explicit):
                path = os.path.normpath(word if os.path.isabs(word) else build_dir / word)
                if path in wanted and wanted[path] not in found:
                    found[wanted[path]] = _unescape(match["outputs"])[0]
    return found


def steps(backend_name: str, interpreter: str, tree: Path, patches: Sequence[Path],
          log_name: str, bin_dir: Path | None = None) -> list[Step]:
    """Configure CMake alone in ``tree/build``, then compile the series' own sources.

    ``interpreter``: the build venv's Python; ``bin_dir``: put first on PATH (the pinned
    cmake and ninja), None to keep PATH.
    """
    build_dir = tree / backend_mod.BUILD_DIR
    chosen = backend_mod.get(backend_name)
    if chosen.cmake_driven:
        configure = Step(
            f"configure CMake alone (pip wheel with build.targets={backend_mod.CONFIGURE_ONLY_TARGET}, "
            "which compiles nothing); the wheel build reuses build/",
            backend_mod.configure_only_command(chosen, interpreter, build_dir / "configure-only"),
            cwd=tree, log_name=log_name, path_prepend=bin_dir,
        )
    else:
        configure = Step(
            "configure CMake alone (setup.py build --cmake-only); the wheel build reuses it",
            (interpreter, "setup.py", "build", "--cmake-only"),
            cwd=tree, log_name=log_name, path_prepend=bin_dir,
        )
    return [
        configure,
        Step(
            "fail fast: compile the sources the series touches or creates before the rest",
            (sys.executable, "-m", "intelmac_torch_builder.core.failfast", "--tree", str(tree),
             "--build-dir", str(build_dir), *map(str, patches)),
            cwd=tree, log_name=log_name, path_prepend=bin_dir,
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.core.failfast",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, required=True, help="the patched source tree")
    parser.add_argument("--build-dir", type=Path, required=True, help="CMake's configured build dir")
    parser.add_argument("patches", nargs="+", type=Path, help="the series, in apply order")
    args = parser.parse_args(argv)
    tree, build_dir = args.tree.absolute(), args.build_dir.absolute()
    if not (build_dir / "build.ninja").is_file():
        print(f"error: {build_dir} has no build.ninja: CMake has not configured it with the "
              "Ninja generator. The build venv's pinned ninja must be first on PATH when CMake "
              "configures (the build plan puts it there); remove that build/ and build again.",
              file=sys.stderr)
        return 2
    units = series_units(args.patches)
    objects = objects_for(build_dir, [tree / unit for unit in units])
    skipped = [unit for unit in units if tree / unit not in objects]
    for unit in skipped:
        print(f"not compiled in this configuration: {unit}")
    if not objects:
        print("the series touches no source this configuration compiles")
        return 0
    print(f"compiling the series' {len(objects)} sources first: "
          + ", ".join(str(path.relative_to(tree)) for path in objects))
    code = subprocess.run(["ninja", "-C", str(build_dir), *objects.values()], check=False).returncode
    if code != 0:
        print(f"error: the series' own sources do not compile (the compiler's message is above), "
              "so the build stops before compiling the rest. Fix the patch that adds or changes "
              f"the failing source (the series' sources: {_owners(args.patches, [tree / unit for unit in units])}), "
              "then build again.", file=sys.stderr)
    return code


def _owners(patches: Sequence[Path], sources: Sequence[Path]) -> str:
    """Which patch of the series adds or changes each source, for the error."""
    tree_paths = {source.as_posix() for source in sources}
    pairs = [f"{change.path}: {patch.name}" for patch in patches for change in file_changes(patch)
             if any(path.endswith("/" + change.path) for path in tree_paths)]
    return "; ".join(dict.fromkeys(pairs))


if __name__ == "__main__":
    sys.exit(main())
