"""A fixture companion upstream: a distribution named ``torchvision`` with a compiled ``_C``.

Its ``setup.py`` reads the variables upstream torchvision's does: ``BUILD_VERSION`` (the
version), ``PYTORCH_VERSION`` (``torch==<it>`` in METADATA, plain ``torch`` without it) and
``FORCE_MPS`` (the MPS kernel sources go into ``_C`` only when it is 1; upstream also takes
them when ``torch.backends.mps.is_available()``, which the fixture torch never is). It
imports torch at build time, as upstream does, and records the version it found, so a test
can see which torch the build ran against. ``_C`` is a real C extension: the kernels' source
sits in it as a string, as torchvision embeds its Metal shaders.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import yaml
from orch_fixture import make_tarball, sha256, write_tree

SETUP_PY = '''\
"""Fixture companion: versioned and configured the way torchvision's setup.py is."""
import os
from pathlib import Path

import torch  # the build environment's torch: the one this build is made against
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    # Some interpreters (pyenv's) put an rpath to their own lib folder into every
    # extension's link line; verify rightly refuses that as a build-machine path.
    def build_extensions(self):
        linker = self.compiler.linker_so
        self.compiler.linker_so = [arg for arg in linker if not arg.startswith("-Wl,-rpath")]
        super().build_extensions()

here = Path(__file__).parent
version = os.environ.get("BUILD_VERSION") or (here / "version.txt").read_text().strip()
torch_dep = "torch"
if os.environ.get("PYTORCH_VERSION"):
    torch_dep += "==" + os.environ["PYTORCH_VERSION"]
macros = [("WITH_MPS", "1")] if os.environ.get("FORCE_MPS", "0") == "1" else []
print(f"FORCE_MPS = {bool(macros)}, built against torch {torch.__version__}", flush=True)
(here / "torchvision" / "version.py").write_text(
    f"__version__ = {version!r}\\nbuilt_against = {torch.__version__!r}\\n"
)
setup(
    name="torchvision",
    version=version,
    packages=["torchvision"],
    install_requires=[torch_dep],
    ext_modules=[Extension("torchvision._C", ["torchvision/csrc/vision.c"], define_macros=macros)],
    cmdclass={"build_ext": BuildExt},
)
'''

VISION_C = """\
#include <Python.h>

#ifdef WITH_MPS
/* Stands in for the Metal source torchvision compiles into _C from ops/mps/*.mm. */
static const char mps_kernels[] =
    "REGISTER_NMS_OP REGISTER_ROI_ALIGN_OP REGISTER_ROI_POOL_OP "
    "REGISTER_PS_ROI_ALIGN_OP REGISTER_PS_ROI_POOL_OP";
#else
static const char mps_kernels[] = "";
#endif

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__C(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "mps_kernels", mps_kernels) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
"""

INIT = "import torch\nfrom . import _C\nfrom .version import __version__, built_against\n"

VERSION = "0.1.0"


def companion_files(version: str = VERSION) -> dict[str, str]:
    return {
        "version.txt": f"{version}a0\n",
        "setup.py": SETUP_PY,
        "torchvision/__init__.py": INIT,
        "torchvision/csrc/vision.c": VISION_C,
    }


def make_companion_tarball(root: Path, version: str = VERSION) -> Path:
    """``vision-X.Y.Z.tar.gz`` with top folder ``vision-X.Y.Z/``, as GitHub's tag archives."""
    tree = write_tree(root / "upstream" / f"vision-{version}", companion_files(version))
    return make_tarball(tree, root / f"vision-{version}.tar.gz", f"vision-{version}")


def add_companion(
    catalog: Path,
    url: str,
    digest: str | None,
    version: str = VERSION,
    build_env: dict[str, str] | None = None,
) -> None:
    """Give every line of a fixture catalog this torchvision companion."""
    document: dict[str, Any] = yaml.safe_load(catalog.read_text())
    for line in document["lines"]:
        line["companion"] = {
            "name": "torchvision",
            "version": version,
            "pair_evidence": "fixture: the companion's setup.py pins the torch it is built against",
            "wheel_tags": ["py3-none"],
            "source": {
                "url": url,
                "sha256": digest,
                "pin_origin": "fixture" if digest else "not pinned yet",
            },
            "patches": [],
            "build_env": build_env or {},
        }
    catalog.write_text(yaml.safe_dump(document, sort_keys=False))


def serve_companion(project: Any, **kwargs: Any) -> Path:
    """Serve the fixture companion's tarball and name it in ``project``'s catalog."""
    tarball = make_companion_tarball(project.root)
    url = project.server.serve(tarball.name, tarball)
    add_companion(project.catalog, url, sha256(tarball), **kwargs)
    return tarball


def metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode()
