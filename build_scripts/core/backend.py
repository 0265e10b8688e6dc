"""The PEP 517 build backend of a line: how its wheel is built, and what must be true first.

PyTorch changed backends: up to 2.13 its ``pyproject.toml`` names setuptools (``setup.py``
drives CMake); from 2.14 it names scikit-build-core (upstream issue 189758 removed
``setup.py``). The official wheels' ``WHEEL`` files say so: ``Generator: setuptools
(79.0.1)`` in 2.9.1, ``scikit-build-core 1.1.0`` in 2.14.1, ``1.1.1`` in 2.15.0. The
catalog records each line's backend, and everything here follows from it:

- the wheel command. pip runs the backend in the build venv (``--no-build-isolation``:
  the pinned toolchain is the build environment, so pip installs nothing, and
  ``--no-index`` makes sure of it). 2.6.0 predates pip builds and runs ``setup.py
  bdist_wheel``, as its own wheel script did;
- where the CMake tree lives: ``build/`` in the source tree for both. scikit-build-core
  would otherwise pick its own folder (or a temporary one); ``build-dir=build`` keeps one
  tree that every Python of a run reuses;
- ``problems``: the preflight's check that the tree declares the backend the catalog
  expects and that the build venv can import it, before hours of compiling.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.version import Version

from .errors import BuildError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]

Name = Literal["setuptools", "scikit-build-core"]
NAMES: tuple[Name, ...] = ("setuptools", "scikit-build-core")
#: The CMake build tree, relative to the source tree, for every backend.
BUILD_DIR = "build"
#: From 2.9 upstream documents pip (not setup.py commands) as the way to build; older
#: setuptools lines, 2.6 among them, build their wheels with ``setup.py bdist_wheel``.
PIP_WHEEL_FROM = Version("2.9")


@dataclass(frozen=True)
class Backend:
    name: Name
    module: str  # what pyproject.toml's build-backend names (the part before any ':')
    distribution: str  # the package the toolchain must pin for it

    @property
    def cmake_driven(self) -> bool:
        """The backend itself configures CMake (and caches facts about itself in build/)."""
        return self.name == "scikit-build-core"


BACKENDS = {
    "setuptools": Backend("setuptools", "setuptools.build_meta", "setuptools"),
    "scikit-build-core": Backend(
        "scikit-build-core", "scikit_build_core.build", "scikit-build-core"
    ),
}


def get(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise BuildError(f"unknown build backend {name!r}; known: {', '.join(BACKENDS)}") from None


def wheel_command(
    backend: Backend, interpreter: str, out: Path, *, line_version: str | None = None
) -> tuple[str, ...]:
    """The command that builds one wheel of the tree in the current directory into ``out``.

    ``line_version``: a PyTorch line's version (setuptools lines before 2.9 build with
    ``setup.py bdist_wheel``); None for the generic builders, which always use pip.
    """
    if (
        backend.name == "setuptools"
        and line_version is not None
        and Version(line_version) < PIP_WHEEL_FROM
    ):
        return (interpreter, "setup.py", "bdist_wheel", "--dist-dir", str(out))
    argv = [
        interpreter, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
        "-v", "--wheel-dir", str(out),
    ]  # fmt: skip
    if backend.name == "scikit-build-core":
        # One CMake tree in build/ for every Python (reused, see retarget_skbuild_info), and
        # the compile's output in the log rather than only a summary.
        argv += [f"--config-settings=build-dir={BUILD_DIR}", "--config-settings=build.verbose=true"]
    return (*argv, ".")


#: The only target of scikit-build-core's configure-only run: every CMake Ninja build has it,
#: and right after a configure it is up to date, so ``cmake --build --target build.ninja``
#: compiles nothing. scikit-build-core has no configure-only wheel setting (its
#: ``exit_after_config`` serves only ``sdist.cmake``), so the fail-fast run names this target.
CONFIGURE_ONLY_TARGET = "build.ninja"
#: An install component no project declares: the configure-only run installs nothing (the
#: default install would ask for files it did not build).
NO_COMPONENT = "intelmac-configure-only"


def configure_only_command(backend: Backend, interpreter: str, out: Path) -> tuple[str, ...]:
    """A scikit-build-core ``pip wheel`` that configures ``build/`` and compiles nothing.

    The same command as the wheel's (so the same configure, and ``.skbuild-info.json`` the
    full build accepts without clearing the cache) with ``build.targets`` and
    ``install.components`` narrowed; the wheel it leaves in ``out`` is a throwaway.
    """
    if not backend.cmake_driven:
        raise BuildError(f"{backend.name} has no configure-only pip wheel: use setup.py build --cmake-only")
    *argv, source = wheel_command(backend, interpreter, out)
    return (
        *argv,
        f"--config-settings=build.targets={CONFIGURE_ONLY_TARGET}",
        f"--config-settings=install.components={NO_COMPONENT}",
        source,
    )


def declared(tree: Path) -> str | None:
    """The module ``tree``'s pyproject.toml names as its build backend (None: no pyproject,
    which pip treats as setuptools' legacy backend)."""
    path = tree / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except tomllib.TOMLDecodeError as exc:
        raise BuildError(f"{path} is not valid TOML: {exc}") from None
    value = data.get("build-system", {}).get("build-backend")
    return str(value) if value is not None else None


def problems(backend: Backend, tree: Path, interpreter: str | None, fix: str) -> list[str]:
    """Why ``tree`` cannot be built with ``backend`` from ``interpreter`` (empty: it can).

    ``interpreter`` None: only the tree is judged (the build venv does not exist yet).
    ``fix``: how to put the pinned toolchain in place, for the import error.
    """
    found: list[str] = []
    module = declared(tree)
    effective = (module or "setuptools.build_meta").split(":")[0]
    if effective != backend.module:
        said = f"names {module!r}" if module else "has no pyproject.toml build-backend (setuptools)"
        found.append(
            f"{tree}/pyproject.toml {said}, but the catalog builds this line with "
            f"{backend.name} ({backend.module}). Set the line's build_backend in "
            "patches/catalog.yaml to the one the release uses (its official wheel's WHEEL "
            "file says which: 'Generator: ...'), with its pins in the line's toolchain file."
        )
    if interpreter is not None:
        result = subprocess.run(
            [interpreter, "-c", f"import {backend.module}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
            found.append(
                f"the build backend {backend.module} does not import in {interpreter}: {last}. "
                f"pip builds without isolation, so {backend.distribution} (and its "
                f"dependencies) must be in the pinned toolchain: {fix}"
            )
    return found


def retarget_skbuild_info(build_dir: Path, interpreter: str) -> bool:
    """Point scikit-build-core's record of the build tree at ``interpreter``'s backend.

    scikit-build-core deletes ``CMakeCache.txt`` and ``CMakeFiles/`` when the backend that
    configured the tree was imported from another folder (``skbuild_path`` in
    ``.skbuild-info.json``), which every new build venv is: the next Python would configure
    from scratch. The cache itself is retargeted by the CMake cache rewrite; this rewrites
    the record so that the backend keeps it. Returns whether a record was there.
    """
    info = build_dir / ".skbuild-info.json"
    if not info.is_file():
        return False
    code = (
        "import json, pathlib, sys, scikit_build_core\n"
        "here = pathlib.Path(scikit_build_core.__file__).parent.resolve()\n"
        "print(json.dumps({'skbuild_path': str(here),\n"
        "                  'skbuild_version': scikit_build_core.__version__,\n"
        "                  'python_executable': sys.executable}))\n"
    )
    result = subprocess.run([interpreter, "-c", code], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(
            f"scikit-build-core does not import in {interpreter}: "
            f"{result.stderr.strip() or result.stdout.strip()}"
        )
    data = json.loads(info.read_text(encoding="utf-8"))
    data.update(json.loads(result.stdout))
    info.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return True
