"""Write and check the pinned build toolchains (``patches/toolchain/<line>.txt``) with pip.

    python -m intelmac_torch_builder.maint.toolchain_pins refresh [--line 2.6.0]
    python -m intelmac_torch_builder.maint.toolchain_pins check   [--line 2.6.0]
    python -m intelmac_torch_builder.maint.toolchain_pins imports --line 2.6.0 --tree SRC

Both ask pip which file it would install on an Intel Mac for each Python of the line and
each macOS an Intel Mac may run (``pip install --dry-run --report`` with ``--platform`` and
``--python-version``: pip reads the index's metadata and hashes, and downloads no wheel).
Environment markers are evaluated here for each Python, because pip evaluates them for the
interpreter it runs on, not for ``--python-version``.

``refresh`` rewrites each file's hashes and ``#:`` lines from what pip reports, keeping its
requirements and header. ``check`` changes nothing and fails when pip would pick a file
whose hash is not pinned, when a pinned version has no wheel for a Python, or when a
pinned package needs a dependency that is not pinned (the build installs with
``--no-deps``). ``.ci/run`` runs ``check``; it needs the network. ``imports`` follows the
module-level imports of a real source tree's build (``setup.py`` and the generators CMake
runs) and fails when a third-party module they import is not pinned; ``.ci/run`` runs it on
the real 2.6.0 tree. ``make test`` checks the
files on their own (``core/toolchain.problems``).

``check`` also checks the orchestrator's own pins (``patches/toolchain/orchestrator.txt``,
which ``make build`` and the release workflow install; ``uv pip compile`` writes it, as its
header says): for each Python the project supports on each platform it runs on, pip picks
a file whose hash is pinned, and every dependency is pinned; and the test tools' pins
(``patches/toolchain/test.txt``, which ``make test`` installs on top) the same way.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from packaging.markers import Marker
from packaging.utils import canonicalize_name

from ..core import catalog as catalog_mod
from ..core import toolchain
from ..core.catalog import ReleaseLine
from ..core.errors import BuildError

#: macOS releases an Intel Mac may build on: pip picks a wheel by the host's macOS, and
#: some packages (numpy) ship a separate x86_64 wheel for 14.0 and later.
MACOS_PLATFORMS = (
    "macosx_13_0_x86_64",
    "macosx_14_0_x86_64",
    "macosx_15_0_x86_64",
    "macosx_26_0_x86_64",
)
#: ``check`` asks for the oldest and the newest only, to stay quick in CI; ``refresh`` asks
#: for all of them.
CHECK_PLATFORMS = (MACOS_PLATFORMS[0], MACOS_PLATFORMS[-1])


@dataclass(frozen=True)
class Picked:
    name: str
    version: str
    filename: str
    sha256: str


def requires(line: ReleaseLine) -> tuple[str, ...]:
    return line.toolchain.requires if line.toolchain else toolchain.BASE_REQUIRES


def pip_picks(
    requirements: Sequence[str], python: str, platform: str, *, with_deps: bool
) -> list[Picked]:
    """What pip would install for ``requirements`` on ``platform`` with CPython ``python``."""
    with tempfile.TemporaryDirectory(prefix="toolchain-pins-") as scratch:
        folder = Path(scratch)
        (folder / "requirements.txt").write_text("\n".join(requirements) + "\n")
        argv = [
            sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
            "--disable-pip-version-check", "--only-binary=:all:",
            # "a,b": every tag a host of that kind accepts (a Linux host takes older manylinux).
            *(flag for tag in platform.split(",") for flag in ("--platform", tag)),
            "--python-version", python, "--implementation", "cp", "--target", str(folder / "t"),
            "--report", str(folder / "report.json"), "-r", str(folder / "requirements.txt"),
        ]  # fmt: skip
        if not with_deps:
            argv.append("--no-deps")
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BuildError(
                f"pip cannot install the toolchain for Python {python} on {platform}:\n"
                + (result.stderr.strip() or result.stdout.strip())
            )
        report = json.loads((folder / "report.json").read_text())
    picked = []
    for item in report["install"]:
        info = item["download_info"]
        picked.append(
            Picked(
                canonicalize_name(item["metadata"]["name"]),
                item["metadata"]["version"],
                PurePosixPath(unquote(urlparse(info["url"]).path)).name,
                info["archive_info"]["hashes"]["sha256"],
            )
        )
    return picked


def _jobs(
    line: ReleaseLine, chain: toolchain.Toolchain, platforms: Sequence[str]
) -> list[tuple[str, str, list[str]]]:
    return [
        (
            python,
            platform,
            [pin.requirement.split(";")[0].strip() for pin in chain.for_python(python)],
        )
        for python in line.python
        for platform in platforms
    ]


def _gather(
    line: ReleaseLine, chain: toolchain.Toolchain, *, with_deps: bool
) -> list[tuple[str, str, list[Picked]]]:
    jobs = _jobs(line, chain, CHECK_PLATFORMS if with_deps else MACOS_PLATFORMS)
    # pip spends its time waiting for the index; four at a time keeps a small machine usable.
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(
            pool.map(lambda job: pip_picks(job[2], job[0], job[1], with_deps=with_deps), jobs)
        )
    return [(python, platform, picks) for (python, platform, _), picks in zip(jobs, results)]


def refresh(line: ReleaseLine) -> Path:
    chain = toolchain.load(line.pins)
    files: dict[int, set[toolchain.PinnedFile]] = {index: set() for index in range(len(chain.pins))}
    for python, _platform, picks in _gather(line, chain, with_deps=False):
        for pick in picks:
            for index, pin in enumerate(chain.pins):
                if pin.name == pick.name and pin.applies_to(python):
                    files[index].add(
                        toolchain.PinnedFile(
                            toolchain.python_tag(python), pick.filename, pick.sha256
                        )
                    )
    pins = [
        dataclasses.replace(
            pin,
            hashes=tuple(sorted({item.sha256 for item in files[index]})),
            files=tuple(sorted(files[index], key=lambda f: (f.python_tag, f.filename))),
        )
        for index, pin in enumerate(chain.pins)
    ]
    line.pins.write_text(toolchain.render(chain.header, pins), encoding="utf-8")
    return line.pins


#: The orchestrator's own pins, and where it runs: CI's Linux jobs and Intel Mac build jobs,
#: and a developer's Mac or Linux machine, with any Python the project supports.
ORCHESTRATOR_PINS = catalog_mod.PATCHES_DIR / "toolchain" / "orchestrator.txt"
#: The test tools, which `make test` (and ci.yml) installs on top of them, checked the same way.
TEST_PINS = catalog_mod.PATCHES_DIR / "toolchain" / "test.txt"
ORCHESTRATOR_PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
ORCHESTRATOR_PLATFORMS = (
    "macosx_13_0_x86_64",
    "macosx_14_0_arm64",
    "manylinux_2_28_x86_64,manylinux_2_17_x86_64,manylinux2014_x86_64",
)


def marker_environment(python: str, platform: str) -> dict[str, str]:
    """The environment markers of CPython ``python`` on the wheel platform ``platform``."""
    darwin = platform.startswith("macosx")
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "darwin" if darwin else "linux",
        "platform_system": "Darwin" if darwin else "Linux",
        "platform_machine": platform.split(",")[0].rsplit("_", 1)[-1] if darwin else "x86_64",
        "os_name": "posix",
    }


def orchestrator_problems(path: Path = ORCHESTRATOR_PINS) -> list[str]:
    """Where pip would install a file of the orchestrator's that ``path`` does not pin."""
    chain = toolchain.load(path)
    jobs = []
    for python in ORCHESTRATOR_PYTHONS:
        for platform in ORCHESTRATOR_PLATFORMS:
            environment = marker_environment(python, platform)
            pins = [pin for pin in chain.pins
                    if pin.marker is None or Marker(pin.marker).evaluate(environment)]
            jobs.append((python, platform, pins))

    def picks(job: tuple[str, str, list[toolchain.Pin]]) -> list[Picked]:
        python, platform, pins = job
        return pip_picks([f"{pin.name}=={pin.version}" for pin in pins], python, platform,
                         with_deps=True)

    # pip spends its time waiting for the index; four at a time keeps a small machine usable.
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(picks, jobs))
    found = []
    for (python, platform, pins), picked in zip(jobs, results):
        # pip evaluates the dependencies' own markers for the interpreter it runs on, not for
        # --python-version, so it may add one the target does not need (typing-extensions on
        # 3.13): a pin of that name for another environment, with the file's hash, will do.
        pinned = {pin.name: pin for pin in chain.pins} | {pin.name: pin for pin in pins}
        for pick in picked:
            pin = pinned.get(pick.name)
            if pin is None:
                found.append(f"{path.name}: Python {python} on {platform}: {pick.name} "
                             f"{pick.version} is a dependency but is not pinned for it")
            elif pick.sha256 not in pin.hashes:
                found.append(f"{path.name}:{pin.line}: Python {python} on {platform}: pip picks "
                             f"{pick.filename} (sha256 {pick.sha256}), whose hash is not pinned")
    return sorted(set(found))


def check(line: ReleaseLine) -> list[str]:
    chain = toolchain.load(line.pins)
    where = chain.path.name
    found = toolchain.problems(chain, requires(line), line.python, backend=line.build_backend)
    for python, platform, picks in _gather(line, chain, with_deps=True):
        pinned = {pin.name: pin for pin in chain.for_python(python)}
        for pick in picks:
            pin = pinned.get(pick.name)
            if pin is None:
                found.append(
                    f"{where}: Python {python} on {platform}: {pick.name} {pick.version} is a "
                    "dependency of the toolchain but is not pinned"
                )
            elif pick.sha256 not in pin.hashes:
                found.append(
                    f"{where}:{pin.line}: Python {python} on {platform}: pip picks "
                    f"{pick.filename} (sha256 {pick.sha256}), whose hash is not pinned"
                )
    return sorted(set(found))


#: Where a PyTorch tree's build runs Python: setup.py, and the generators CMake calls.
BUILD_ENTRY_POINTS = (
    "setup.py",
    "tools/setup_helpers/generate_code.py",
    "torchgen/gen.py",
    "tools/pyi/gen_pyi.py",
    "tools/jit/gen_unboxing.py",
)
#: The tree's own packages; imports of tools.* and torchgen.* are followed into the tree.
_OWN = ("tools", "torchgen", "torch", "caffe2", "functorch")
#: Import names that are not the distribution's name.
_DISTRIBUTIONS = {"yaml": "pyyaml", "typing_extensions": "typing-extensions"}


def _module_file(tree: Path, module: str) -> Path | None:
    base = tree.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _top_level_imports(path: Path) -> Iterator[str]:
    """Modules imported when ``path`` is imported: module-level statements only (not inside
    functions, ``if TYPE_CHECKING:`` or ``try: ... except ImportError``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = path.parent

    def walk(body: list[ast.stmt]) -> Iterator[str]:
        for node in body:
            if isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    prefix = "." * node.level + (node.module or "")
                    yield prefix + "|" + str(package)
                    joint = "" if prefix.endswith(".") else "."
                    for alias in node.names:
                        yield f"{prefix}{joint}{alias.name}|{package}"
                elif node.module:
                    yield node.module
                    yield from (f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                yield from walk(node.body)
                yield from walk(node.orelse)

    yield from walk(tree.body)


def build_imports(tree: Path) -> dict[str, set[str]]:
    """Third-party modules the build of the PyTorch ``tree`` imports, with who imports them."""
    found: dict[str, set[str]] = {}
    todo = [tree / entry for entry in BUILD_ENTRY_POINTS if (tree / entry).is_file()]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _top_level_imports(path):
            if "|" in name:  # relative: resolve against the importing file's package
                dotted, _, folder = name.partition("|")
                level = len(dotted) - len(dotted.lstrip("."))
                base = Path(folder)
                for _ in range(level - 1):
                    base = base.parent
                rest = dotted.lstrip(".")
                target = base.joinpath(*rest.split(".")) if rest else base
                for candidate in (target.with_suffix(".py"), target / "__init__.py"):
                    if candidate.is_file():
                        todo.append(candidate)
                continue
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            if top in _OWN:
                local = _module_file(tree, name) if top in ("tools", "torchgen") else None
                if local is not None:
                    todo.append(local)
                continue
            found.setdefault(top, set()).add(str(path.relative_to(tree)))
    return found


def import_problems(line: ReleaseLine, tree: Path) -> list[str]:
    """Modules the real ``tree``'s build imports that the line's toolchain does not pin."""
    pinned = {canonicalize_name(name) for name in requires(line)}
    problems = []
    for module, importers in sorted(build_imports(tree).items()):
        distribution = canonicalize_name(_DISTRIBUTIONS.get(module, module))
        if distribution not in pinned:
            problems.append(
                f"the build imports {module} ({', '.join(sorted(importers))}), which "
                f"{line.pins.name} does not pin"
            )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m intelmac_torch_builder.maint.toolchain_pins",
        description="Write or check the pinned, hashed build toolchain of each release line "
        "(patches/toolchain/<line>.txt). refresh and check ask the package index through pip.",
    )
    parser.add_argument(
        "action",
        choices=("refresh", "check", "imports"),
        help="refresh: rewrite the hashes from what pip would install on an Intel Mac; "
        "check: fail when pip would install a file that is not pinned; imports: fail when a "
        "real source tree's build imports a module that is not pinned",
    )
    parser.add_argument(
        "--tree",
        type=Path,
        help="imports: a real PyTorch source tree of the line, whose build's imports to check",
    )
    parser.add_argument("--line", action="append", help="release line (default: all)")
    parser.add_argument("--catalog", type=Path, help="release catalog (default: the repository's)")
    args = parser.parse_args(argv)
    catalog = catalog_mod.load(args.catalog)
    lines = [catalog.line(version) for version in args.line] if args.line else catalog.lines
    if args.action == "imports":
        if args.tree is None or not args.line or len(args.line) != 1:
            parser.error("imports needs --tree SRC and one --line")
        problems = import_problems(lines[0], args.tree)
        for problem in problems:
            print(f"{lines[0].version}: {problem}", file=sys.stderr)
        if not problems:
            modules = ", ".join(sorted(build_imports(args.tree)))
            print(f"{lines[0].version}: {args.tree}'s build imports {modules}: all pinned")
        return 1 if problems else 0
    failed = False
    for line in lines:
        try:
            if args.action == "refresh":
                print(f"{line.version}: wrote {refresh(line)}")
                continue
            problems = check(line)
        except BuildError as exc:
            print(f"error: {line.version}: {exc}", file=sys.stderr)
            return 1
        for problem in problems:
            print(f"{line.version}: {problem}", file=sys.stderr)
        if not problems:
            print(f"{line.version}: {line.pins.name} matches the registry for "
                  f"Python {', '.join(line.python)} on {', '.join(CHECK_PLATFORMS)}")  # fmt: skip
        failed = failed or bool(problems)
    for path in (ORCHESTRATOR_PINS, TEST_PINS) if args.action == "check" and not args.line else ():
        try:
            problems = orchestrator_problems(path)
        except BuildError as exc:
            print(f"error: {path.name}: {exc}", file=sys.stderr)
            return 1
        for problem in problems:
            print(problem, file=sys.stderr)
        if not problems:
            print(f"{path.name} matches the registry for Python "
                  f"{', '.join(ORCHESTRATOR_PYTHONS)} on {', '.join(ORCHESTRATOR_PLATFORMS)}")
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
