"""A tiny fixture upstream for the orchestrator's tests: a distribution named ``torch``.

It looks like a PyTorch release where the pipeline cares: a ``version.txt``, a
``setup.py`` that honours ``PYTORCH_BUILD_VERSION`` / ``PYTORCH_BUILD_NUMBER`` (and prints
ninja-style ``[n/m]`` lines), ``torch/backends/mps/__init__.py`` that the fixture series
changes, and a module the series adds. The series comes as real patch files with DEP-3
headers, listed in a fixture catalog that follows the real catalog's schema.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

SETUP_PY = '''\
"""Fixture upstream: versioned the way PyTorch's setup.py is."""
import os
from pathlib import Path

from setuptools import find_packages, setup

here = Path(__file__).parent
version = (here / "version.txt").read_text().strip()
if os.environ.get("PYTORCH_BUILD_VERSION"):
    version = os.environ["PYTORCH_BUILD_VERSION"]
    number = int(os.environ.get("PYTORCH_BUILD_NUMBER") or 0)
    if number > 0:
        version += f".post{number}"
print("[1/2] Generating torch/version.py", flush=True)
(here / "torch" / "version.py").write_text(f"__version__ = {version!r}\\n")
print("[2/2] Packaging", flush=True)
setup(name="torch", version=version, packages=find_packages(include=["torch", "torch.*"]))
'''

TORCH_INIT = "from . import backends\nfrom .version import __version__\n"
BACKENDS_INIT = "from . import mps\n"

MPS_BEFORE = '''\
"""Fixture stand-in for torch.backends.mps."""


def is_available():
    # exclude Intel GPUs
    return False
'''

MPS_AFTER = '''\
"""Fixture stand-in for torch.backends.mps."""
import json
import os
from importlib import metadata

from ._policy import ELIGIBLE_VENDORS

allow_intel_gpu = os.environ.get("PYTORCH_MPS_ALLOW_INTEL_GPU", "").lower() in ("1", "true", "yes", "on")


def is_available():
    # Intel GPUs take part once allow_intel_gpu is set
    return False


def build_info():
    text = metadata.distribution("torch").read_text("INTELMAC_BUILD.json")
    return json.loads(text) if text else None
'''

POLICY_NEW = '''\
"""Added by the fixture series: which GPU vendors may run MPS."""
ELIGIBLE_VENDORS = ("Apple", "AMD", "Intel")
'''

MPS_PATH = "torch/backends/mps/__init__.py"
POLICY_PATH = "torch/backends/mps/_policy.py"


def _header(description: str) -> str:
    return (
        f"Description: {description}\n"
        "Origin: tests/orchestrator fixture\n"
        "Forwarded: not-needed\n"
        "Applies-To: fixture\n"
        "---\n"
    )


def _diff(path: str, before: str | None, after: str) -> str:
    old = [] if before is None else before.splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    lines = [f"diff --git a/{path} b/{path}\n"]
    if before is None:
        lines.append("new file mode 100644\n")
    body = list(
        difflib.unified_diff(
            old, new, "/dev/null" if before is None else f"a/{path}", f"b/{path}", n=3
        )
    )
    # difflib writes "@@ -0,0 +1,2 @@" for a new file, as git does; strip its file-date fields.
    return "".join(
        lines
        + [line if not line.startswith(("---", "+++")) else line.rstrip() + "\n" for line in body]
    )


def upstream_files(version: str) -> dict[str, str]:
    return {
        "version.txt": f"{version}a0\n",
        "setup.py": SETUP_PY,
        "torch/__init__.py": TORCH_INIT,
        "torch/backends/__init__.py": BACKENDS_INIT,
        MPS_PATH: MPS_BEFORE,
    }


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def make_tarball(tree: Path, out: Path, top: str) -> Path:
    """``out`` holding ``tree`` under one top-level folder, as GitHub's release tarballs do."""
    with tarfile.open(out, "w:gz") as tar:
        tar.add(tree, arcname=top)
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_series(folder: Path) -> list[Path]:
    """The fixture series: 0001 changes the mps module, 0002 adds the policy module."""
    folder.mkdir(parents=True, exist_ok=True)
    first = folder / "0001-mps-fixture-opt-in.patch"
    first.write_text(
        _header("fixture opt-in flag and build_info()") + _diff(MPS_PATH, MPS_BEFORE, MPS_AFTER)
    )
    second = folder / "0002-mps-fixture-policy.patch"
    second.write_text(
        _header("fixture device policy module") + _diff(POLICY_PATH, None, POLICY_NEW)
    )
    return [first, second]


def write_conflicting_patch(folder: Path) -> Path:
    """A patch written against code upstream does not have (its context says AMD)."""
    folder.mkdir(parents=True, exist_ok=True)
    wrong_base = MPS_BEFORE.replace("# exclude Intel GPUs", "# exclude AMD GPUs")
    patch = folder / "0001-mps-fixture-stale.patch"
    patch.write_text(
        _header("written against another release") + _diff(MPS_PATH, wrong_base, MPS_AFTER)
    )
    return patch


def write_catalog(
    folder: Path,
    lines: list[dict[str, object]],
    default: str | None = None,
) -> Path:
    """A catalog in the real schema; ``lines`` give version, url, sha256 and patches."""
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    document = {
        "schema_version": 1,
        "default_version": default or str(lines[0]["version"]),
        "local_label": "intelmac",
        "lines": [
            {
                "version": line["version"],
                "source": {
                    "url": line["url"],
                    "sha256": line.get("sha256"),
                    "pin_origin": "fixture" if line.get("sha256") else "not pinned yet",
                },
                "patches": [str(Path(p).relative_to(folder)) for p in line.get("patches", [])],  # type: ignore[attr-defined]
                "python": line.get("python", [python]),
                "macos_deployment_target": line.get("macos_deployment_target", "13.0"),
                "mps_min_macos": line.get("mps_min_macos", "13.0"),
                "build_env": line.get("build_env", {}),
                **({"toolchain": line["toolchain"]} if "toolchain" in line else {}),
            }
            for line in lines
        ],
    }
    path = folder / "catalog.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    """A tarball built member by member, for the unsafe-archive tests."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def other_python() -> str | None:
    """A CPython of another minor version: on PATH, or one pyenv installed."""
    minor = sys.version_info[1]
    candidates = [shutil.which(f"python3.{m}") for m in (minor + 1, minor - 1, minor + 2)]
    pyenv = Path.home() / ".pyenv" / "versions"
    for m in (minor + 1, minor - 1, minor + 2):
        candidates += sorted(str(p) for p in pyenv.glob(f"3.{m}.*/bin/python3.{m}"))
    for found in filter(None, candidates):
        if subprocess.run([found, "-c", ""], capture_output=True, check=False).returncode == 0:
            return found
    return None
