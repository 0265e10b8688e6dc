"""The macOS x86_64 compile of PyTorch, as a plan of commands and variables.

Everything here is computed from an ``Options`` and a ``Host`` value, so ``--dry-run``
prints it on any machine and the tests check it against a fake Intel or Apple-silicon Mac.
Only executing the plan needs a Mac.

Several Pythons in one run: the first compiles everything; each later one gets its own
build venv, the CMake cache's Python paths are rewritten to it (what conda-forge does for
lines whose tools/setup_helpers/cmake.py never re-runs CMake once a cache exists, which
would link every later wheel against the first interpreter) and ninja rebuilds only what
includes Python.h.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from ..core import host as host_mod
from ..core import preflight as preflight_mod
from ..core import toolchain
from ..core._plan import Computed, Step
from ..core.errors import BuildError
from ..core.host import MAX_JOBS_SHELL, Host, max_jobs
from ..core.options import Options, PythonTarget

#: From 2.9 upstream documents pip (not setup.py commands) as the way to build; older
#: lines, 2.6 among them, build their wheels with ``setup.py bdist_wheel``.
PIP_WHEEL_FROM = Version("2.9")
#: Lines whose setup.py can configure CMake alone (``setup.py build --cmake-only``: read in
#: 2.6.0's setup.py, and kept by later ones), so that the series' own sources compile first
#: (core/failfast.py). 2.14 and 2.15 move to scikit-build-core (issue 28), which configures
#: inside ``pip wheel``: they compile in CMake's order.
FAILFAST_BEFORE = Version("2.14")


def is_cross_build(host: Host) -> bool:
    return host.machine != "x86_64"


def build_env(options: Options, host: Host) -> dict[str, str]:
    """The variables PyTorch's setup.py reads (it passes BUILD_*, USE_* and CMAKE_* to CMake)."""
    line = options.line
    env = {
        "USE_MPS": "1",
        "USE_CUDA": "0",
        "BUILD_TEST": "0",
        "MACOSX_DEPLOYMENT_TARGET": line.macos_deployment_target,
        "PYTORCH_BUILD_VERSION": options.wheel_version,
        # 0: the version stays exactly <version>+<label> (a number > 0 appends .postN).
        "PYTORCH_BUILD_NUMBER": "0",
        "MAX_JOBS": str(max_jobs(host)),
    }
    launcher = host.ccache or host.sccache
    if launcher:
        env["CMAKE_C_COMPILER_LAUNCHER"] = launcher
        env["CMAKE_CXX_COMPILER_LAUNCHER"] = launcher
    libomp = options.libomp_prefix(host.libomp_prefix)
    if libomp is not None:
        prefix = str(libomp)
        # CMake's FindOpenMP looks under OpenMP_ROOT; Apple clang has no OpenMP headers of
        # its own, so omp.h must also be on the compiler's include path for the sources
        # that include it outside CMake's OpenMP flags.
        env["OpenMP_ROOT"] = prefix
        env["CMAKE_PREFIX_PATH"] = prefix
        env["CPATH"] = f"{prefix}/include"
    # x86_64 is the one target, pinned for CMake (libtorch), for setuptools' own compile of
    # the extension stubs (ARCHFLAGS replaces sysconfig's -arch flags) and for the wheel's
    # platform tag. Needed for a cross build from arm64, and just as much natively with a
    # universal2 interpreter (python.org's installers), which would otherwise tag an
    # x86_64-only wheel macosx_*_universal2 and try to link an arm64 slice of _C.
    env["CMAKE_OSX_ARCHITECTURES"] = "x86_64"
    env["ARCHFLAGS"] = "-arch x86_64"
    env["_PYTHON_HOST_PLATFORM"] = f"macosx-{line.macos_deployment_target}-x86_64"
    env.update(line.build_env)  # the catalog has the last word
    return env


def computed_env(options: Options, host: Host) -> dict[str, Computed]:
    """How the plan shows the variables that depend on the Mac it runs on."""
    out = {
        "MAX_JOBS": Computed(
            MAX_JOBS_SHELL,
            "sized at build time from the Mac's cores and memory: one job per core, at most "
            f"one per 2 GiB (here: {max_jobs(host)} on {host.description})",
        )
    }
    env = build_env(options, host)
    found_here = f"found on the machine that planned ({host.description}); set it to yours"
    for key in ("OpenMP_ROOT", "CMAKE_PREFIX_PATH", "CPATH", "CMAKE_C_COMPILER_LAUNCHER",
                "CMAKE_CXX_COMPILER_LAUNCHER"):  # fmt: skip
        if key in env and key not in options.line.build_env:
            given = options.libomp is not None and "COMPILER_LAUNCHER" not in key
            out[key] = Computed(shlex.quote(env[key]), "from --libomp" if given else found_here)
    return out


def venv_python(options: Options, python: PythonTarget) -> Path:
    return options.layout.venvs / python.tag / "bin" / "python"


def toolchain_command(options: Options, python: PythonTarget) -> tuple[str, ...]:
    return (
        str(venv_python(options, python)), "-m", "pip", "install", *toolchain.INSTALL_OPTIONS,
        "-r", str(options.line.pins),
    )  # fmt: skip


def toolchain_notes(options: Options) -> list[str]:
    """The pinned toolchain as the plan shows it: per Python, each pin and its files' hashes."""
    chain = toolchain.load(options.line.pins)
    heading = (
        f"pinned build toolchain: {chain.path} (sha256 {chain.sha256}); pip installs it with "
        "--require-hashes and refuses any file whose sha256 is not listed:"
    )
    out = [heading]
    for python in options.pythons:
        for pin in chain.for_python(python.version):
            files = [
                f"{item.filename} sha256:{item.sha256}"
                for item in pin.files
                if item.python_tag == python.tag
            ]
            for what in files or ["(no file recorded)"]:
                out.append(f"  {python.tag} {pin.name}=={pin.version}  {what}")
    return out


def wheel_command(options: Options, python: PythonTarget) -> tuple[str, ...]:
    interpreter = str(venv_python(options, python))
    out = str(options.layout.raw(python))
    if Version(options.line.version) >= PIP_WHEEL_FROM:
        return (
            interpreter,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-v",
            "--wheel-dir",
            out,
            ".",
        )
    return (interpreter, "setup.py", "bdist_wheel", "--dist-dir", out)


@dataclass(frozen=True)
class PythonPaths:
    """Where one interpreter keeps what CMake caches about it."""

    version: str  # "3.12"
    full_version: str  # "3.12.4"
    executable: str
    paths: dict[str, str]  # sysconfig paths, prefixes, numpy's include dir

    @classmethod
    def probe(cls, interpreter: Path) -> PythonPaths:
        code = (
            "import json, sys, sysconfig\n"
            "p = dict(sysconfig.get_paths())\n"
            "p.update(prefix=sys.prefix, base_prefix=sys.base_prefix, libdir=sysconfig.get_config_var('LIBDIR') or '')\n"
            "try:\n import numpy; p['numpy'] = numpy.get_include()\nexcept ImportError: pass\n"
            "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], 'full': '%d.%d.%d' % sys.version_info[:3],\n"
            "                  'executable': sys.executable, 'paths': p}))\n"
        )
        result = subprocess.run(
            [str(interpreter), "-c", code], capture_output=True, text=True, check=True
        )
        data = json.loads(result.stdout)
        return cls(
            data["version"],
            data["full"],
            data["executable"],
            {k: v for k, v in data["paths"].items() if v},
        )


def rewrite_cmake_cache(text: str, old: PythonPaths, new: PythonPaths) -> tuple[str, int]:
    """Point a CMakeCache.txt written for ``old`` at ``new``; returns (text, entries changed).

    Only entries about Python change: those whose name mentions Python or NumPy, and those
    whose value holds one of ``old``'s paths. Paths are swapped longest first in one pass,
    then version spellings (python3.11, cpython-311, 3;11, 3.11) inside those entries.
    """
    mapping = {old.executable: new.executable}
    for key, value in old.paths.items():
        if key in new.paths and value != new.paths[key]:
            mapping[value] = new.paths[key]
    mapping = {k: v for k, v in mapping.items() if k and k != v}
    paths = (
        re.compile("|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True)))
        if mapping
        else None
    )
    old_nodot, new_nodot = old.version.replace(".", ""), new.version.replace(".", "")
    major, old_minor = old.version.split(".")
    new_minor = new.version.split(".")[1]
    spellings = {
        old.full_version: new.full_version,
        old.full_version.replace(".", ";"): new.full_version.replace(".", ";"),
        f"python{old.version}": f"python{new.version}",
        f"cpython-{old_nodot}": f"cpython-{new_nodot}",
        f"cp{old_nodot}": f"cp{new_nodot}",
        f"{major};{old_minor}": f"{major};{new_minor}",
    }
    versions = re.compile(
        "|".join(re.escape(k) for k in spellings)
        + rf"|(?<![\d.]){re.escape(old.version)}(?=$|[;/ -])"
    )
    changed = 0
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        match = re.match(r"^([^#/][^:=]*)(:[A-Z_]+)?=(.*?)(\r?\n)?$", line)
        if not match:
            out.append(line)
            continue
        key, kind, value, end = match[1], match[2] or "", match[3], match[4] or ""
        about_python = re.search(r"python|numpy", key, re.IGNORECASE) is not None
        touches_paths = paths is not None and paths.search(value) is not None
        if not (about_python or touches_paths):
            out.append(line)
            continue
        new_value = paths.sub(lambda m: mapping[m[0]], value) if paths is not None else value
        new_value = versions.sub(lambda m: spellings.get(m[0], new.version), new_value)
        if new_value != value:
            changed += 1
        out.append(f"{key}{kind}={new_value}{end}")
    return "".join(out), changed


def _clean_python_outputs(tree: Path) -> None:
    """Remove what one interpreter's wheel build leaves that the next must not pick up.

    The CMake/ninja tree in build/ stays (that is the point); setuptools' own per-Python
    staging folders and extension modules built in place go.
    """
    build = tree / "build"
    for pattern in ("lib.*", "bdist.*"):
        for path in build.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)
    for pattern in ("torch/_C*.so", "torch/_dl*.so", "functorch/_C*.so"):
        for path in tree.glob(pattern):
            path.unlink()


def _retarget_cache(options: Options, previous: PythonTarget, python: PythonTarget) -> None:
    tree = options.layout.patched_tree
    cache = tree / "build" / "CMakeCache.txt"
    if not cache.is_file():
        raise BuildError(f"{cache} is missing: the first Python's build did not configure CMake.")
    old = PythonPaths.probe(venv_python(options, previous))
    new = PythonPaths.probe(venv_python(options, python))
    text, _ = rewrite_cmake_cache(cache.read_text(encoding="utf-8"), old, new)
    cache.write_text(text, encoding="utf-8")
    _clean_python_outputs(tree)


def python_steps(options: Options, index: int) -> list[Step]:
    """The commands that build the wheel of ``options.pythons[index]``."""
    python = options.pythons[index]
    tree = options.layout.patched_tree
    venv = options.layout.venvs / python.tag
    log_name = f"build-{python.tag}.log"
    steps = [
        Step(
            f"build venv for Python {python.version}",
            (python.executable, "-m", "venv", str(venv)),
            log_name=log_name,
        ),
        Step(
            f"the line's pinned build toolchain into the {python.tag} venv "
            f"({options.line.pins.name}, every file checked against its sha256)",
            toolchain_command(options, python),
            log_name=log_name,
        ),
        Step(
            "preflight: Xcode, macOS SDK, Metal compiler, libomp's minimum macOS, cmake, ninja, "
            "free disk and the interpreter's architecture, before any compiling",
            action=lambda: preflight(options, host_mod.probe(), python),
        ),
    ]
    if index > 0:
        previous = options.pythons[index - 1]
        steps.append(
            Step(
                f"keep build/; rewrite build/CMakeCache.txt's Python paths {previous.tag} -> {python.tag}; "
                "drop the previous Python's extension modules",
                action=lambda: _retarget_cache(options, previous, python),
            )
        )
    if index == 0 and Version(options.line.version) < FAILFAST_BEFORE:
        steps += _failfast_steps(options, python, log_name)
    what = (
        "compiles everything"
        if index == 0
        else f"reuses the build tree of {options.pythons[0].tag}"
    )
    steps.append(
        Step(
            f"wheel for {python.tag} ({what}); the venv's bin/ first on PATH, so setup.py's "
            "cmake and ninja are the pinned ones",
            wheel_command(options, python),
            cwd=tree,
            log_name=log_name,
            path_prepend=venv / "bin",
        )
    )
    return steps


def _failfast_steps(options: Options, python: PythonTarget, log_name: str) -> list[Step]:
    """Configure CMake alone, then compile the series' own sources before everything else."""
    tree = options.layout.patched_tree
    bin_dir = options.layout.venvs / python.tag / "bin"
    return [
        Step(
            "configure CMake alone (setup.py build --cmake-only); the wheel build reuses it",
            (str(venv_python(options, python)), "setup.py", "build", "--cmake-only"),
            cwd=tree,
            log_name=log_name,
            path_prepend=bin_dir,
        ),
        Step(
            "fail fast: compile the sources the series touches or creates before the rest",
            (sys.executable, "-m", "intelmac_torch_builder.core.failfast", "--tree", str(tree),
             "--build-dir", str(tree / "build"), *map(str, options.line.patches)),
            cwd=tree,
            log_name=log_name,
            path_prepend=bin_dir,
        ),
    ]


def notes(options: Options, host: Host) -> list[str]:
    out = [f"host: {host.description}"]
    if is_cross_build(host):
        out.append(
            "BEST-EFFORT CROSS BUILD from an arm64 host to x86_64 (CMAKE_OSX_ARCHITECTURES, "
            "ARCHFLAGS, _PYTHON_HOST_PLATFORM); the release path is a native build on an Intel Mac"
        )
    else:
        out.append("native x86_64 build")
    if options.libomp_prefix(host.libomp_prefix) is None:
        out.append(
            f"libomp NOT FOUND: pass one built for macOS {options.line.macos_deployment_target} "
            "or older with --libomp PREFIX (conda-forge's llvm-openmp for osx-64), or "
            "`brew install libomp` (x86_64 Homebrew in /usr/local) when this Mac runs that macOS"
        )
    if not (host.ccache or host.sccache):
        out.append("no ccache or sccache found: rebuilds start from scratch")
    return out


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _tool_version(path: Path) -> str | None:
    text = host_mod.command_output(str(path), "--version")
    return text.splitlines()[0] if text else None


def probe_facts(options: Options, host: Host, python: PythonTarget | None) -> preflight_mod.Facts:
    """The facts ``preflight.check`` judges, probed on this Mac (``python``: its venv's tools)."""
    xcode = host_mod.command_output("xcodebuild", "-version")
    match = re.search(r"Xcode\s+(\d+(?:\.\d+)*)", xcode or "")
    libomp = options.libomp_prefix(host.libomp_prefix)
    dylib = libomp / "lib" / "libomp.dylib" if libomp is not None else None
    metal = host_mod.command_output("xcrun", "--sdk", "macosx", "metal", "--version")
    interpreters = {}
    for target in options.pythons:
        machine = host_mod.command_output(
            target.executable, "-c", "import platform; print(platform.machine())"
        )
        if machine:
            interpreters[target.version] = machine
    bin_dir = venv_python(options, python).parent if python is not None else None
    return preflight_mod.Facts(
        xcode=match[1] if match else None,
        sdk=host_mod.command_output("xcrun", "--sdk", "macosx", "--show-sdk-version"),
        metal=metal is not None,
        libomp=dylib if dylib is not None and dylib.is_file() else None,
        free_bytes=shutil.disk_usage(_existing(options.work_dir)).free,
        interpreters=interpreters,
        cmake=_tool_version(bin_dir / "cmake") if bin_dir else None,
        ninja=_tool_version(bin_dir / "ninja") if bin_dir else None,
        cross_build=is_cross_build(host),
    )


def preflight(options: Options, host: Host, python: PythonTarget | None = None) -> None:
    """What must be true before hours of compiling start.

    Without ``python``: before anything is installed (cmake and ninja are not judged yet).
    With it: after its venv got the pinned toolchain, right before its compile.
    """
    libomp = options.libomp_prefix(host.libomp_prefix)
    if libomp is None:
        raise BuildError(
            "libomp is not installed: PyTorch's CPU kernels need OpenMP, which Apple clang lacks.\n"
            "Install it with `brew install libomp` (on an Apple-silicon Mac, in the x86_64 "
            "Homebrew under /usr/local: `arch -x86_64 /usr/local/bin/brew install libomp`), "
            "or pass another build of it with --libomp PREFIX."
        )
    if not (libomp / "include" / "omp.h").is_file():
        raise BuildError(f"--libomp {libomp}: no include/omp.h there.")
    for target in options.pythons:
        if not target.found:
            raise BuildError(
                f"Python {target.version} is not on PATH (looked for {target.executable}).\n"
                f"Install it (python.org installer, or `brew install python@{target.version}`) "
                "or pass its path with --python."
            )
    if not (options.layout.patched_tree / "setup.py").is_file():
        raise BuildError(
            f"{options.layout.patched_tree} has no setup.py: run the patch stage first."
        )
    pinned = None
    if python is not None:
        pinned = toolchain.load(options.line.pins).versions(python.version)
    facts = probe_facts(options, host, python)
    # Free disk once per build: before anything is installed (no ``python`` yet).
    preflight_mod.enforce(
        options.line, facts, [target.version for target in options.pythons], pinned=pinned,
        check_disk=python is None,
    )
