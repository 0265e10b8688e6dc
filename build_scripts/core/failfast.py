"""Compile what most likely breaks first, right after CMake configures.

A mistake in the series' own C++ or Objective-C++, or an Xcode whose compilers reject
upstream's MPS sources or Metal shaders, shows in minutes instead of after hours of
compiling the rest of PyTorch. Fail-fast builds, as ninja targets of the configured
``build.ninja``:

- every translation unit the series adds or changes (from the series itself, never a
  hand-kept list);
- all of upstream's MPS Objective-C++ sources, found as the line's CMake finds them
  (``aten/src/ATen/CMakeLists.txt`` globs ``mps/*.mm`` and, recursively,
  ``native/mps/*.mm`` into ``ATen_MPS_SRCS``, which ``caffe2/CMakeLists.txt`` compiles
  into ``torch_cpu``: ninja's objects are ``caffe2/CMakeFiles/torch_cpu.dir/__/aten/...mm.o``);
- the line's Metal shader library, CMake's custom target ``metallibs``.

A source this configuration does not compile (another platform's file) is named and
skipped, not an error; none of upstream's MPS sources in the graph with MPS on is one (CMake
configured another tree, and fail-fast would compile nothing of it). A configuration with MPS on but no ``metallibs`` target is an
error: CMake's probe found no working Metal compiler, and the wheel would compile its
shaders at run time instead of carrying upstream's library.

    python -m intelmac_torch_builder.core.failfast --tree TREE --build-dir TREE/build \\
        PATCH [PATCH ...]

runs ``ninja -C BUILD_DIR <their objects> metallibs`` (ninja from PATH: the build venv's
pinned one). With ``--shared`` (and no patches) it compiles the libraries every Python of the
line shares instead (``SHARED_TARGETS``): the warm-up's build (``build --shared-only``).

``steps`` puts it in a build plan: CMake configures alone first (``setup.py build
--cmake-only`` for a setuptools line; for scikit-build-core, which configures inside ``pip
wheel``, a ``pip wheel`` whose only build target is ``build.ninja``: see
``backend.configure_only_command``), then this compiles those targets, then the full
wheel build reuses the configured ``build/`` and the objects already built.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import backend as backend_mod
from . import features
from ._plan import Step
from .patching import file_changes

#: Suffixes of the translation units a compiler sees on its command line.
UNIT_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".m", ".mm")
#: Where upstream's MPS Objective-C++ sources are, and whether CMake globs them recursively
#: (``file(GLOB mps_mm "mps/*.mm")``, ``file(GLOB_RECURSE native_mps_mm "native/mps/*.mm")``
#: in 2.6.0's aten/src/ATen/CMakeLists.txt; later lines keep both globs).
MPS_SOURCE_DIRS: tuple[tuple[str, bool], ...] = (
    ("aten/src/ATen/mps", False),
    ("aten/src/ATen/native/mps", True),
)
#: The custom target that compiles the line's shaders and links the Metal library that
#: torch_cpu embeds (``add_custom_target(metallibs ...)`` in 2.6.0's aten/src/ATen; a stored,
#: undated later caffe2/CMakeLists.txt, one library only, still says
#: ``add_dependencies(torch_cpu metallibs)``; none of 2.14 or 2.15 is stored). A line that
#: renames it stops fail-fast with a message saying so.
METAL_TARGET = "metallibs"
#: What every Python of a line shares: the libraries that link no Python (``add_library`` in
#: 2.6.0's c10/, caffe2/ and torch/lib/libshm/CMakeLists.txt; c10 and metallibs come as
#: torch_cpu's dependencies). ``torch_python``, ``_C`` and functorch's extension link the
#: interpreter, so each Python's wheel job compiles them. The warm-up builds these alone
#: (``--shared``), so that no one Python's failure stops the line's other wheels.
SHARED_TARGETS = ("torch_cpu", "torch", "torch_global_deps", "shm")
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


def mps_units(tree: Path) -> list[str]:
    """Upstream's MPS Objective-C++ sources in ``tree`` (tree-relative, sorted), as CMake globs them."""
    found: list[str] = []
    for folder, recursive in MPS_SOURCE_DIRS:
        pattern = "**/*.mm" if recursive else "*.mm"
        found += sorted(path.relative_to(tree).as_posix()
                        for path in (tree / folder).glob(pattern) if path.is_file())
    return found


def fail_fast_units(tree: Path, patches: Iterable[Path]) -> list[str]:
    """The series' units, then upstream's MPS sources it does not touch."""
    return list(dict.fromkeys([*series_units(patches), *mps_units(tree)]))


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


def _statements(build_dir: Path) -> Iterable[re.Match[str]]:
    for ninja in _ninja_files(build_dir):
        for line in ninja.read_text(encoding="utf-8", errors="replace").splitlines():
            match = _BUILD.match(line)
            if match:
                yield match


def target_named(build_dir: Path, name: str) -> str | None:
    """The ninja target for CMake target ``name``: its top-level alias, else its folder's path."""
    nested = None
    for match in _statements(build_dir):
        for output in _unescape(match["outputs"]):
            if output == name:
                return output
            if nested is None and output.endswith("/" + name):
                nested = output
    return nested


def cache_value(build_dir: Path, key: str) -> str | None:
    """A CMakeCache.txt entry of ``build_dir`` (None: not set, or no cache)."""
    cache = build_dir / "CMakeCache.txt"
    return features.cmake_cache(cache).get(key) if cache.is_file() else None


def objects_for(build_dir: Path, sources: Sequence[Path]) -> dict[Path, str]:
    """The first output of the build statement compiling each source (those the graph has)."""
    # CMake writes each source as it was given the tree: setup.py and scikit-build-core give
    # it their working folder, which getcwd() names by its real path, while ``sources`` may
    # name the tree through a symlink (macOS's /tmp). Both spellings of a source match.
    wanted = {os.path.normpath(source): source for source in sources}
    wanted.update({os.path.realpath(source): source for source in sources})
    found: dict[Path, str] = {}
    for match in _statements(build_dir):
        explicit = match["inputs"].split(" | ", 1)[0].split(" || ", 1)[0]
        for word in _unescape(explicit):
            path = os.path.normpath(word if os.path.isabs(word) else build_dir / word)
            if path in wanted and wanted[path] not in found:
                found[wanted[path]] = _unescape(match["outputs"])[0]
    return found


@dataclass(frozen=True)
class Selection:
    """What fail-fast builds: ninja targets by tree-relative source, and the Metal library's."""

    series: Mapping[str, str]  # the series' units this configuration compiles -> object
    upstream: Mapping[str, str]  # upstream's MPS sources the series leaves alone -> object
    skipped: tuple[str, ...]  # units this configuration does not compile
    metal: str | None  # the metallibs target; None: this configuration has none

    @property
    def targets(self) -> list[str]:
        return [*self.series.values(), *self.upstream.values(), *([self.metal] if self.metal else [])]

    def describe(self) -> str:
        metal = f" and the Metal shader library ({self.metal})" if self.metal else ""
        return (f"compiling first: the series' {len(self.series)} sources, upstream's "
                f"{len(self.upstream)} other MPS sources{metal}: "
                + ", ".join([*self.series, *self.upstream]))


def select(tree: Path, build_dir: Path, patches: Sequence[Path]) -> Selection:
    """The fail-fast targets of ``tree`` configured in ``build_dir`` for this series."""
    series = series_units(patches)
    units = fail_fast_units(tree, patches)
    objects = objects_for(build_dir, [tree / unit for unit in units])
    built = {unit: objects[tree / unit] for unit in units if tree / unit in objects}
    return Selection(
        series={unit: obj for unit, obj in built.items() if unit in series},
        upstream={unit: obj for unit, obj in built.items() if unit not in series},
        skipped=tuple(unit for unit in units if unit not in built),
        metal=target_named(build_dir, METAL_TARGET),
    )


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
            "fail fast: compile the series' sources, upstream's MPS sources and the Metal "
            "shader library before the rest",
            (sys.executable, "-m", "intelmac_torch_builder.core.failfast", "--tree", str(tree),
             "--build-dir", str(build_dir), *map(str, patches)),
            cwd=tree, log_name=log_name, path_prepend=bin_dir,
        ),
    ]


def shared_targets(build_dir: Path) -> list[str]:
    """The ninja targets of ``SHARED_TARGETS`` that ``build_dir`` configures."""
    return [target for name in SHARED_TARGETS if (target := target_named(build_dir, name))]


def build_shared(build_dir: Path) -> int:
    """Compile what every Python shares (``SHARED_TARGETS``), nothing that links Python."""
    targets = shared_targets(build_dir)
    if SHARED_TARGETS[0] not in [target.rsplit("/", 1)[-1] for target in targets]:
        print(f"error: {build_dir}/build.ninja has no {SHARED_TARGETS[0]} target, so there is "
              "nothing Python-independent to compile: this is not a PyTorch tree CMake "
              "configured, or the line renamed its libraries (set failfast.SHARED_TARGETS).",
              file=sys.stderr)
        return 2
    print(f"compiling what every Python shares: {', '.join(targets)} (not torch_python, _C)")
    # As many jobs as the wheel build runs (the plan's MAX_JOBS: one per core, at most one
    # per 2 GiB): ninja's own default would overrun a 14 GB runner on torch_cpu.
    jobs = os.environ.get("MAX_JOBS", "")
    parallel = ["-j", jobs] if jobs.isdigit() else []
    return subprocess.run(["ninja", "-C", str(build_dir), *parallel, *targets],
                          check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.core.failfast",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, required=True, help="the patched source tree")
    parser.add_argument("--build-dir", type=Path, required=True, help="CMake's configured build dir")
    parser.add_argument("--shared", action="store_true",
                        help="compile the libraries every Python shares (SHARED_TARGETS) instead")
    parser.add_argument("patches", nargs="*", type=Path, help="the series, in apply order")
    args = parser.parse_args(argv)
    if not args.patches and not args.shared:
        parser.error("the series' patches are needed (or --shared)")
    tree, build_dir = args.tree.absolute(), args.build_dir.absolute()
    if not (build_dir / "build.ninja").is_file():
        print(f"error: {build_dir} has no build.ninja: CMake has not configured it with the "
              "Ninja generator. The build venv's pinned ninja must be first on PATH when CMake "
              "configures (the build plan puts it there); remove that build/ and build again.",
              file=sys.stderr)
        return 2
    if args.shared:
        return build_shared(build_dir)
    chosen = select(tree, build_dir, args.patches)
    for unit in chosen.skipped:
        print(f"not compiled in this configuration: {unit}")
    # A tree without upstream's MPS sources (a test fixture, torchvision) has no shaders either.
    upstream_mps = mps_units(tree)
    mps_on = bool(upstream_mps) and features.cmake_true(cache_value(build_dir, "USE_MPS"))
    if mps_on and not any(unit in chosen.series or unit in chosen.upstream for unit in upstream_mps):
        # Each would be "not compiled in this configuration", and fail-fast would compile none.
        print(f"error: MPS is on, but none of the {len(upstream_mps)} MPS sources in {tree} is "
              f"compiled by {build_dir}/build.ninja: CMake configured another tree (a path "
              "spelt otherwise, in another case or through another link). Build from the "
              "tree's real path, or remove build/ and build again.", file=sys.stderr)
        return 2
    if chosen.metal is None and mps_on:
        print(f"error: MPS is on but {build_dir} has no {METAL_TARGET} target. "
              + _no_metal_reason(cache_value(build_dir, "CAN_COMPILE_METAL")), file=sys.stderr)
        return 2
    if not chosen.targets:
        print("the series touches no source this configuration compiles")
        return 0
    print(chosen.describe())
    code = subprocess.run(["ninja", "-C", str(build_dir), *chosen.targets], check=False).returncode
    if code != 0:
        owners = _owners(args.patches, [tree / unit for unit in chosen.series])
        print("error: a fail-fast target does not compile (the message above names it), so "
              "the build stops before compiling the rest. A source of the series: fix the "
              f"patch that adds or changes it ({owners}). One of upstream's MPS sources or "
              "its Metal shaders: the selected Xcode is not one this line builds with; select "
              "one in the range the preflight names.", file=sys.stderr)
    return code


def _no_metal_reason(can_compile: str | None) -> str:
    """Why the configured graph has no shader library target, and what to do."""
    if features.cmake_true(can_compile):
        # The Metal compiler works, so this line's CMake calls the target something else.
        return (f"CMake found a working Metal compiler (CAN_COMPILE_METAL={can_compile}), so "
                "this line's CMake names its shader library target otherwise: find the target "
                "torch_cpu depends on in caffe2/CMakeLists.txt and set failfast.METAL_TARGET.")
    return (f"CMake's probe found no working Metal compiler (CMakeCache.txt: CAN_COMPILE_METAL="
            f"{can_compile}), so the wheel would lack upstream's shader library. Select an Xcode "
            "the line accepts (the preflight names the range) with its Metal toolchain (Xcode 26: "
            "xcodebuild -downloadComponent MetalToolchain), remove build/ and build again.")


def _owners(patches: Sequence[Path], sources: Sequence[Path]) -> str:
    """Which patch of the series adds or changes each source, for the error."""
    tree_paths = {source.as_posix() for source in sources}
    pairs = [f"{change.path}: {patch.name}" for patch in patches for change in file_changes(patch)
             if any(path.endswith("/" + change.path) for path in tree_paths)]
    return "; ".join(dict.fromkeys(pairs))


if __name__ == "__main__":
    sys.exit(main())
