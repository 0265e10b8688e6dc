"""A fixture upstream built the way PyTorch 2.14 and later are: scikit-build-core and CMake.

Like the setuptools fixture (``orch_fixture``), a distribution named ``torch`` that the
fixture series patches; unlike it, no ``setup.py``. Its ``pyproject.toml`` names
scikit-build-core, an in-tree metadata provider reads the version from
``PYTORCH_BUILD_VERSION`` (as upstream's does), and ``CMakeLists.txt`` builds a C extension,
``torch._C``, from two parts:

- ``fixture_core``, a static library that does not include Python.h. Its object must
  survive a second Python's build untouched: that is what reusing the build tree buys;
- ``_C``, the module, which includes Python.h and is rebuilt for each Python.

``cmake/EnvVarForwarding.cmake`` turns every ``USE_*``, ``BUILD_*`` and ``CMAKE_*``
variable of the environment into a CMake cache variable, as upstream's file of that name
does, and ``_C.config()`` reports what reached the compile.
"""

from __future__ import annotations

from pathlib import Path

from orch_fixture import _diff, _header, write_series
from orch_fixture import upstream_files as setuptools_files

PYPROJECT = """\
[build-system]
requires = ["scikit-build-core>=0.10"]
build-backend = "scikit_build_core.build"

[project]
name = "torch"
dynamic = ["version"]
requires-python = ">=3.9"

[tool.scikit-build]
experimental = true
wheel.packages = ["torch"]
metadata.version.provider = "fixture_version"
metadata.version.provider-path = "tools"
"""

VERSION_PROVIDER = '''\
"""Fixture metadata provider: the version the way PyTorch's provider computes it."""
import os
from pathlib import Path


def dynamic_metadata(field, settings=None):
    if field != "version":
        raise ValueError(f"only the version is dynamic, not {field}")
    version = os.environ.get("PYTORCH_BUILD_VERSION")
    if not version:
        return Path("version.txt").read_text().strip()
    number = int(os.environ.get("PYTORCH_BUILD_NUMBER") or 0)
    return f"{version}.post{number}" if number > 0 else version
'''

ENV_FORWARDING = """\
# Every USE_*, BUILD_* and CMAKE_* variable of the environment becomes a cache variable,
# unless the command line set it.
execute_process(COMMAND "${CMAKE_COMMAND}" -E environment OUTPUT_VARIABLE _fixture_env)
string(REPLACE "\\n" ";" _fixture_env "${_fixture_env}")
foreach(_entry IN LISTS _fixture_env)
  if(_entry MATCHES "^((USE|BUILD|CMAKE)_[A-Za-z0-9_]*)=(.*)$")
    set(_name "${CMAKE_MATCH_1}")
    if(NOT DEFINED ${_name} OR "${${_name}}" STREQUAL "")
      set(${_name} "${CMAKE_MATCH_3}" CACHE STRING "from the environment" FORCE)
    endif()
  endif()
endforeach()
"""

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.18)
project(${SKBUILD_PROJECT_NAME} LANGUAGES C)
include(cmake/EnvVarForwarding.cmake)
find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)

# Set by the first configure of this tree only: a later Python's build that keeps the
# cache keeps it.
if(NOT DEFINED FIXTURE_CONFIGURE_ID)
  string(RANDOM LENGTH 16 _id)
  set(FIXTURE_CONFIGURE_ID "${_id}" CACHE STRING "the first configure of this tree")
endif()

add_library(fixture_core STATIC src/core.c)
set_target_properties(fixture_core PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_definitions(fixture_core PRIVATE
  FIXTURE_USE_MPS="${USE_MPS}" FIXTURE_BUILD_TEST="${BUILD_TEST}"
  FIXTURE_CONFIGURE_ID="${FIXTURE_CONFIGURE_ID}")

python_add_library(_C MODULE src/module.c WITH_SOABI)
target_link_libraries(_C PRIVATE fixture_core)
target_compile_definitions(_C PRIVATE FIXTURE_VERSION="${SKBUILD_PROJECT_VERSION_FULL}")
install(TARGETS _C DESTINATION torch)
"""

CORE_C = """\
/* No Python.h here: this object is built once for every Python of a run. */
#ifdef FIXTURE_FROM_CMAKE_C_FLAGS
#define FIXTURE_C_FLAGS "forwarded"
#else
#define FIXTURE_C_FLAGS "missing"
#endif

const char *fixture_config(void) {
  return "USE_MPS=" FIXTURE_USE_MPS ";BUILD_TEST=" FIXTURE_BUILD_TEST
         ";CMAKE_C_FLAGS=" FIXTURE_C_FLAGS ";configure=" FIXTURE_CONFIGURE_ID;
}
"""

MODULE_C = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>

const char *fixture_config(void);

static PyObject *config(PyObject *self, PyObject *args) {
  return PyUnicode_FromString(fixture_config());
}

static PyObject *built_for(PyObject *self, PyObject *args) {
  return PyUnicode_FromString(PY_VERSION);
}

static PyObject *version(PyObject *self, PyObject *args) {
  return PyUnicode_FromString(FIXTURE_VERSION);
}

static PyMethodDef methods[] = {
  {"config", config, METH_NOARGS, "what reached the compile"},
  {"built_for", built_for, METH_NOARGS, "the Python.h this module was compiled with"},
  {"version", version, METH_NOARGS, "the version CMake was given"},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
"""


def upstream_files(version: str) -> dict[str, str]:
    files = {name: text for name, text in setuptools_files(version).items() if name != "setup.py"}
    files["torch/version.py"] = "from ._C import version as _v\n__version__ = _v()\n"
    files["torch/__init__.py"] = "from . import backends\nfrom .version import __version__\n"
    files.update(
        {
            "pyproject.toml": PYPROJECT,
            "tools/fixture_version.py": VERSION_PROVIDER,
            "cmake/EnvVarForwarding.cmake": ENV_FORWARDING,
            "CMakeLists.txt": CMAKELISTS,
            "src/core.c": CORE_C,
            "src/module.c": MODULE_C,
        }
    )
    return files


#: What the series' C patch adds to ``src/module.c``: the fail-fast step compiles it first.
SERIES_C = "static const char *fixture_series = \"patched\";\n"
#: The same patch with a mistake in its C, which the fail-fast step must catch.
BROKEN_SERIES_C = "static const char *fixture_series = \"patched\"  /* missing ';' */\n"


def write_skbuild_series(folder: Path, *, broken: bool = False) -> list[Path]:
    """The fixture series, plus 0003 changing a translation unit (``src/module.c``)."""
    patches = write_series(folder)
    added = BROKEN_SERIES_C if broken else SERIES_C
    after = MODULE_C.replace("const char *fixture_config(void);\n",
                             "const char *fixture_config(void);\n" + added)
    third = folder / "0003-fixture-series-c-source.patch"
    third.write_text(_header("a C source the series changes") + _diff("src/module.c", MODULE_C, after))
    return [*patches, third]
