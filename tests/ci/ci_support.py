"""Helpers shared by the tests of ci/ (a plain module: tests/ci is not a package)."""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml
from intelmac_torch_builder.core import catalog as catalog_module

from intelmac_torch_builder.ci import cli

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
#: The one Python version the tooling jobs (lint, matrix, index) run on.
TOOLING_PYTHON = "3.11"


def venv_tool(name: str) -> Path:
    """A console script of the environment running the tests (e.g. .venv/bin/zizmor)."""
    return Path(sys.executable).parent / name


def load_workflow(path: Path) -> dict[str, Any]:
    document: dict[Any, Any] = yaml.safe_load(path.read_text())
    if True in document:  # YAML 1.1 reads `on` as True
        document["on"] = document.pop(True)
    return document


def ci_parser() -> argparse.ArgumentParser:
    """The matrix / ci-plan subcommands exactly as intelmac_torch_builder.cli registers them."""
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser


def run_cli(argv: list[str]) -> int:
    args = ci_parser().parse_args(argv)
    code: int = args.func(args)
    return code


def copy_catalog(tmp_path: Path) -> Path:
    """A private copy of patches/ (catalog and patch files) to change in a test."""
    target = tmp_path / "patches"
    shutil.copytree(catalog_module.DEFAULT_CATALOG.parent, target)
    return target / "catalog.yaml"


def edit_catalog(path: Path, edit: Any) -> None:
    document = yaml.safe_load(path.read_text())
    edit(document)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def pin_everything(document: dict[str, Any]) -> None:
    """Give unpinned lines a stand-in sha256, so that release tags may select them."""
    for line in document["lines"]:
        for entry in (line, line.get("companion") or {}):
            if entry and entry["source"]["sha256"] is None:
                entry["source"]["sha256"] = "0" * 64
                entry["source"]["pin_origin"] = "test stand-in"


def pinned_catalog(tmp_path: Path) -> Path:
    path = copy_catalog(tmp_path)
    edit_catalog(path, pin_everything)
    return path


# -- a stand-in for the patched torch: the issue-3 Python contract in pure Python ---------------

FAKE_MPS = '''
"""Stand-in for the patched torch.backends.mps on a machine with no usable GPU."""
import json, os, sys, warnings
from typing import NamedTuple, Optional

_FLAG = "PYTORCH_MPS_ALLOW_INTEL_GPU"
_KNOBS = json.loads({knobs!r})

class MPSDeviceInfo(NamedTuple):
    index: int
    name: str
    low_power: bool
    removable: bool
    headless: bool
    unified_memory: bool
    recommended_working_set_size: int
    eligible: bool
    selected: bool
    skip_reason: Optional[str]

def _initial():
    raw = os.environ.get(_FLAG, "").strip()
    if raw == "":
        return _KNOBS.get("default", False)
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    if _KNOBS.get("warn", True):
        warnings.warn(_KNOBS.get("warning", "{{flag}}={{raw!r}} is not one of 1/true/yes/on or "
                                 "0/false/no/off; using the default (False)").format(flag=_FLAG, raw=raw))
    return False

allow_intel_gpu = _initial()

def is_built():
    return True

def is_available():
    return False

def devices():
    return [MPSDeviceInfo(0, "Apple Paravirtual device", False, False, True, False, 0,
                          False, False, "does not support Metal family Mac2")]

def unavailable_reason():
    return _KNOBS.get("reason", "no eligible Metal device: Apple Paravirtual device "
                      "(does not support Metal family Mac2)")

def check(device="mps", **options):
    raise NotImplementedError("the stand-in only models the MPS API")

def build_info():
    return {{"upstream_version": "2.15.0", "wheel_version": "2.15.0+intelmac",
            "source_sha256": None, "series_fingerprint": "0" * 64, "patches": [],
            "toolchain": {{}}, "built_at": "2026-11-22T00:00:00Z"}}
'''

FAKE_MPS_MAIN = '''
import json, sys
from torch.backends import mps
if "--check" in sys.argv:
    print(json.dumps({{"status": "unavailable", "reason": mps.unavailable_reason(), "ops": []}}))
    sys.exit({check_exit})
for device in mps.devices():
    print(device)
print(mps.build_info())
reason = mps.unavailable_reason()
print("MPS is not usable: " + reason if reason else "MPS is usable")
sys.exit({exit_code})
'''

FAKE_TORCH = '''
__version__ = "2.15.0+intelmac"
from . import backends
def zeros(*shape, device=None):
    if device == "mps":
        raise RuntimeError({tensor_error!r})
    raise NotImplementedError("the stand-in only models the MPS API")
'''


def fake_torch_files(**knobs: Any) -> dict[str, str]:
    """Files of the stand-in package; knobs break one behaviour each."""
    exit_code = knobs.pop("exit_code", 1)
    check_exit = knobs.pop("check_exit", 2)
    tensor_error = knobs.pop("tensor_error", "MPS is not usable: no eligible Metal device")
    return {
        "torch/__init__.py": FAKE_TORCH.format(tensor_error=tensor_error),
        "torch/backends/__init__.py": "from . import mps\n",
        "torch/backends/mps/__init__.py": FAKE_MPS.format(knobs=json.dumps(knobs)),
        "torch/backends/mps/__main__.py": FAKE_MPS_MAIN.format(exit_code=exit_code, check_exit=check_exit),
    }


def write_fake_torch(root: Path, **knobs: Any) -> Path:
    for name, text in fake_torch_files(**knobs).items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


def build_fake_wheel(out_dir: Path, version: str = "2.15.0+intelmac", **knobs: Any) -> Path:
    """A real, installable py3-none-any wheel of the stand-in (RECORD with hashes)."""
    dist_info = f"torch-{version}.dist-info"
    files = dict(fake_torch_files(**knobs))
    files[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
    files[f"{dist_info}/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                   "Tag: py3-none-any\n")
    record_lines = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record_lines.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record_lines.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = "\n".join(record_lines) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"torch-{version}-py3-none-any.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    wheel.write_bytes(buffer.getvalue())
    return wheel
