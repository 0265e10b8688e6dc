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


from ..core import backend as backend_mod
from ..core import failfast, features, native_deps, toolchain
from ..core import host as host_mod
from ..core import preflight as preflight_mod
from ..core._log import Log
from ..core._plan import Computed, Step
from ..core.errors import BuildError
from ..core.host import MAX_JOBS_SHELL, Host, max_jobs
from ..core.options import Options, PythonTarget

def is_cross_build(host: Host) -> bool:
    return host.machine != "x86_64"


#: The pinned OpenMP (patches/toolchain/native.yaml) the build uses unless --libomp says
#: otherwise. Homebrew's libomp targets the host's macOS, which delocate refuses for a wheel
#: that targets an older one.
OPENMP_PACKAGE = "llvm-openmp"


def libomp_prefix(options: Options) -> Path:
    """Where the build's OpenMP lives: --libomp, else the pinned llvm-openmp's prefix."""
    if options.libomp is not None:
        return options.libomp
    return native_deps.default_cache() / native_deps.load()[OPENMP_PACKAGE].prefix_name()


def ensure_libomp(options: Options, log: Log) -> Path:
    """Fetch and check the pinned llvm-openmp (nothing to do with --libomp); its prefix.

    Runs before the preflight, so a download whose sha256 differs stops the build before
    any compiling, naming the expected and the found hash (``native_deps.ensure``).
    """
    if options.libomp is not None:
        return options.libomp
    package = native_deps.load()[OPENMP_PACKAGE]
    return native_deps.ensure(package, native_deps.default_cache(), log)


def libomp_steps(options: Options) -> list[Step]:
    """The plan's OpenMP steps: fetch the pinned llvm-openmp, give its dylib an absolute id.

    The id: conda-forge's libomp.dylib says @rpath/libomp.dylib; the one in upstream's
    2.14.1 and 2.15.0 wheels says /opt/llvm-openmp/lib/libomp.dylib, its absolute install
    path. With an absolute id, libtorch records the file it was linked against, and
    setup.py's libomp embedding (2.6.0) and delocate find it without an rpath.
    """
    if options.libomp is not None:
        return []
    package = native_deps.load()[OPENMP_PACKAGE]
    prefix = libomp_prefix(options)
    dylib = str(prefix / "lib" / "libomp.dylib")
    return [
        Step(
            f"the pinned {package.name} {package.version} (sha256 {package.sha256[:12]}...; "
            "a file that differs stops the build here)",
            (
                sys.executable,
                "-m",
                "intelmac_torch_builder",
                "native",
                "fetch",
                package.name,
                "--cache",
                str(prefix.parent),
            ),  # fmt: skip
        ),
        Step(
            "its libomp.dylib's install id: its own absolute path",
            ("install_name_tool", "-id", dylib, dylib),
        ),
    ]
def blas_prefix(options: Options) -> Path | None:
    """Where the line's pinned BLAS files (MKL) are installed; None for the OS's own BLAS."""
    chain = options.line.toolchain
    if chain is None or chain.blas is None:
        return None
    return options.layout.root / "blas" / chain.blas.stem


def blas_command(options: Options, python: PythonTarget, prefix: Path) -> tuple[str, ...]:
    blas = options.line.toolchain.blas if options.line.toolchain else None
    assert blas is not None
    return (
        str(venv_python(options, python)), "-m", "pip", "install", *toolchain.INSTALL_OPTIONS,
        "--ignore-installed", "--prefix", str(prefix), "-r", str(blas),
    )  # fmt: skip


def check_configured(options: Options) -> None:
    """Stop when CMake did not configure what the catalog chose (BLAS, MKL threading, oneDNN).

    Runs right after CMake configures alone, before anything compiles: CMakeCache.txt holds
    the BLAS request, MKL's threading and FBGEMM's outcome; the headers configure writes
    (macros.h, ATen's Config.h) hold BLAS_INFO, LAPACK_INFO and AT_MKL_*. With BLAS set by
    hand PyTorch's CMake already refuses a missing MKL; this also catches a sequential MKL or
    another BLAS winning, hours before a wrong wheel would be built.
    """
    tree = options.layout.patched_tree
    wanted = features.of(options.line.build_env, options.line.title)
    problems = features.cache_problems(tree, wanted) + features.configured_problems(tree, wanted)
    if problems:
        prefix = blas_prefix(options)
        hint = (
            f"The pinned MKL should be under {prefix} (lib/libmkl_core.a, include/mkl.h; "
            f"installed from {options.line.toolchain.blas if options.line.toolchain else ''}) "
            "and libiomp5 in the llvm-openmp prefix; "
            if prefix is not None
            else ""
        )
        raise BuildError(
            f"{options.line.title}: CMake did not configure what the catalog chose:\n  "
            + "\n  ".join(problems)
            + f"\n{hint}search the build log for 'BLAS' and 'MKL' to see what CMake found, fix "
            "it, then rebuild (the build folder keeps the wrong choice: remove "
            f"{tree / 'build'})."
        )


def build_env(options: Options, host: Host) -> dict[str, str]:
    """The variables PyTorch's build reads.

    Up to 2.13 setup.py hands every BUILD_*, USE_* and CMAKE_* variable to CMake; from 2.14
    (scikit-build-core) CMake reads them itself (cmake/EnvVarForwarding.cmake), and the
    version metadata comes from PYTORCH_BUILD_VERSION either way.
    """
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
    if backend_mod.get(line.build_backend).cmake_driven:
        # setup.py turned MAX_JOBS into ninja's -j; with scikit-build-core, `cmake --build`
        # reads CMake's own variable, so set it to the same number whatever the line's
        # pyproject does with MAX_JOBS.
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = env["MAX_JOBS"]
    launcher = host.ccache or host.sccache
    if launcher:
        env["CMAKE_C_COMPILER_LAUNCHER"] = launcher
        env["CMAKE_CXX_COMPILER_LAUNCHER"] = launcher
    prefix = str(libomp_prefix(options))
    # CMake's FindOpenMP looks under OpenMP_ROOT; Apple clang has no OpenMP headers of its
    # own, so omp.h must also be on the compiler's include path for the sources that
    # include it outside CMake's OpenMP flags.
    env["OpenMP_ROOT"] = prefix
    env["CMAKE_PREFIX_PATH"] = prefix
    env["CPATH"] = f"{prefix}/include"
    mkl = blas_prefix(options)
    if mkl is not None:
        # FindMKL searches INTEL_MKL_DIR's include/ and lib/ (PyTorch passes the variable
        # to CMake); its OpenMP threading layer finds libiomp5, llvm-openmp's alias of
        # libomp, through CMAKE_PREFIX_PATH above: one OpenMP runtime for MKL and PyTorch.
        # (The MKL prefix stays off CMAKE_PREFIX_PATH, whose list separator differs between
        # setup.py's -D and CMake's own reading of the environment.)
        env["INTEL_MKL_DIR"] = str(mkl)
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
    if "CMAKE_BUILD_PARALLEL_LEVEL" in env:
        out["CMAKE_BUILD_PARALLEL_LEVEL"] = Computed(
            MAX_JOBS_SHELL, "the same number as MAX_JOBS, for scikit-build-core's `cmake --build`"
        )
    found_here = f"found on the machine that planned ({host.description}); set it to yours"
    pinned = f"the pinned {OPENMP_PACKAGE} in the native cache (fetched by the build)"
    for key in ("OpenMP_ROOT", "CMAKE_PREFIX_PATH", "CPATH", "CMAKE_C_COMPILER_LAUNCHER",
                "CMAKE_CXX_COMPILER_LAUNCHER"):  # fmt: skip
        if key in env and key not in options.line.build_env:
            if "COMPILER_LAUNCHER" in key:
                note = found_here
            else:
                note = "from --libomp" if options.libomp is not None else pinned
            out[key] = Computed(shlex.quote(env[key]), note)
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
    return backend_mod.wheel_command(
        backend_mod.get(options.line.build_backend),
        str(venv_python(options, python)),
        options.layout.raw(python),
        line_version=options.line.version,
    )


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
    staging folders and extension modules built in place go (scikit-build-core stages in
    a folder of its own, so for it there is nothing of the kind).
    """
    build = tree / backend_mod.BUILD_DIR
    for pattern in ("lib.*", "bdist.*"):
        for path in build.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)
    for pattern in ("torch/_C*.so", "torch/_dl*.so", "functorch/_C*.so"):
        for path in tree.glob(pattern):
            path.unlink()


def retarget_build_tree(tree: Path, backend_name: str, previous: Path, interpreter: Path) -> None:
    """Make ``tree``'s CMake tree, configured for ``previous``, build for ``interpreter``."""
    build = tree / backend_mod.BUILD_DIR
    cache = build / "CMakeCache.txt"
    if not cache.is_file():
        raise BuildError(f"{cache} is missing: the first Python's build did not configure CMake.")
    old = PythonPaths.probe(previous)
    new = PythonPaths.probe(interpreter)
    text, _ = rewrite_cmake_cache(cache.read_text(encoding="utf-8"), old, new)
    cache.write_text(text, encoding="utf-8")
    if backend_mod.get(backend_name).cmake_driven:
        backend_mod.retarget_skbuild_info(build, str(interpreter))
    _clean_python_outputs(tree)


def _retarget_cache(options: Options, previous: PythonTarget, python: PythonTarget) -> None:
    retarget_build_tree(
        options.layout.patched_tree,
        options.line.build_backend,
        venv_python(options, previous),
        venv_python(options, python),
    )


def python_steps(options: Options, index: int) -> list[Step]:
    """The commands that build the wheel of ``options.pythons[index]``."""
    python = options.pythons[index]
    tree = options.layout.patched_tree
    venv = options.layout.venvs / python.tag
    log_name = f"build-{python.tag}.log"
    steps = (libomp_steps(options) if index == 0 else []) + [
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
            f"preflight: the build backend ({options.line.build_backend}) imports, Xcode, macOS "
            "SDK, Metal compiler, libomp's minimum macOS, cmake, ninja, free disk and the "
            "interpreter's architecture, before any compiling",
            action=lambda: preflight(options, host_mod.probe(), python),
        ),
    ]
    mkl = blas_prefix(options)
    if index == 0 and mkl is not None:
        steps.append(
            Step(
                f"the line's pinned BLAS ({options.line.build_env.get('BLAS')}, every file "
                f"checked against its sha256) into {mkl}, once for all its Pythons",
                blas_command(options, python, mkl),
                log_name=log_name,
            )
        )
    if index > 0:
        previous = options.pythons[index - 1]
        skbuild = (
            "and scikit-build-core's build/.skbuild-info.json (else it would drop the cache); "
            if backend_mod.get(options.line.build_backend).cmake_driven
            else ""
        )
        steps.append(
            Step(
                f"keep build/; rewrite build/CMakeCache.txt's Python paths {previous.tag} -> {python.tag} "
                f"{skbuild}; drop the previous Python's extension modules".replace(" ;", ";"),
                action=lambda: _retarget_cache(options, previous, python),
            )
        )
    if index == 0:
        # The configure step first, then the configure result against the catalog, then the
        # fail-fast compile: a wrong BLAS stops the build before anything compiles.
        configure, *compile_first = _failfast_steps(options, python, log_name)
        steps += [configure, _configured_step(options), *compile_first]
    if options.shared_only:
        steps.append(
            Step(
                "compile what every Python shares and nothing that links Python (the "
                f"libraries {', '.join(failfast.SHARED_TARGETS)}; not torch_python or _C), "
                "and make no wheel: each Python's wheel job compiles its own part",
                (sys.executable, "-m", "intelmac_torch_builder.core.failfast", "--shared",
                 "--tree", str(tree), "--build-dir", str(tree / backend_mod.BUILD_DIR)),
                cwd=tree,
                log_name=log_name,
                path_prepend=venv / "bin",
            )
        )
        return steps
    what = (
        "compiles everything"
        if index == 0
        else f"reuses the build tree of {options.pythons[0].tag}"
    )
    steps.append(
        Step(
            f"wheel for {python.tag} ({what}, {options.line.build_backend}); the venv's bin/ "
            "first on PATH, so the cmake and ninja the build runs are the pinned ones",
            wheel_command(options, python),
            cwd=tree,
            log_name=log_name,
            path_prepend=venv / "bin",
        )
    )
    return steps


def _configured_step(options: Options) -> Step:
    return Step(
        "check CMake's configure result against the catalog before anything compiles "
        "(CMakeCache.txt: BLAS, MKL_THREADING, USE_FBGEMM; macros.h: BLAS_INFO, LAPACK_INFO; "
        "ATen/Config.h: AT_MKL_ENABLED, AT_MKL_SEQUENTIAL, AT_MKLDNN_ENABLED)",
        action=lambda: check_configured(options),
    )


def _failfast_steps(options: Options, python: PythonTarget, log_name: str) -> list[Step]:
    """Configure CMake alone, then compile the series' own sources before everything else."""
    return failfast.steps(
        options.line.build_backend, str(venv_python(options, python)), options.layout.patched_tree,
        options.line.patches, log_name, options.layout.venvs / python.tag / "bin",
    )


def notes(options: Options, host: Host) -> list[str]:
    out = [f"host: {host.description}"]
    if is_cross_build(host):
        out.append(
            "BEST-EFFORT CROSS BUILD from an arm64 host to x86_64 (CMAKE_OSX_ARCHITECTURES, "
            "ARCHFLAGS, _PYTHON_HOST_PLATFORM); the release path is a native build on an Intel Mac"
        )
    else:
        out.append("native x86_64 build")
    if options.libomp is None:
        package = native_deps.load()[OPENMP_PACKAGE]
        out.append(
            f"OpenMP: the pinned {package.name} {package.version} (macOS {package.min_macos}+, "
            f"sha256 {package.sha256}), fetched and checked before the preflight into "
            f"{libomp_prefix(options)}; --libomp PREFIX takes another"
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
    libomp = libomp_prefix(options)
    dylib = libomp / "lib" / "libomp.dylib"
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
        libomp=dylib if dylib.is_file() else None,
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
    libomp = libomp_prefix(options)
    if not (libomp / "include" / "omp.h").is_file():
        where = (
            f"--libomp {libomp}"
            if options.libomp is not None
            else f"the pinned {OPENMP_PACKAGE} in {libomp}"
        )
        raise BuildError(
            f"{where}: no include/omp.h there. PyTorch's CPU kernels need OpenMP, which Apple "
            f"clang lacks. Without --libomp the build fetches the pinned {OPENMP_PACKAGE} "
            "(python -m intelmac_torch_builder native fetch llvm-openmp)."
        )
    for target in options.pythons:
        if not target.found:
            raise BuildError(
                f"Python {target.version} is not on PATH (looked for {target.executable}).\n"
                f"Install it (python.org installer, or `brew install python@{target.version}`) "
                "or pass its path with --python."
            )
    tree = options.layout.patched_tree
    if not any((tree / name).is_file() for name in ("setup.py", "pyproject.toml")):
        raise BuildError(f"{tree} has no setup.py or pyproject.toml: run the patch stage first.")
    backend = backend_mod.get(options.line.build_backend)
    interpreter = str(venv_python(options, python)) if python is not None else None
    found = backend_mod.problems(
        backend,
        tree,
        interpreter,
        shlex.join(toolchain_command(options, python)) if python is not None else "",
    )
    if found:
        raise preflight_mod.PreflightError(
            f"Not starting the compile of PyTorch {options.line.version}: its build backend "
            "cannot run.\n" + "\n".join(f"  - {problem}" for problem in found)
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
