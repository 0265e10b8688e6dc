"""The documented install commands (README, docs/install.md), end to end: pip and uv, our index
as an extra index.

Two real HTTP servers on 127.0.0.1: ours, serving the index the pipeline just wrote (the
fixture torch and the fixture torchvision that requires it exactly), and a stand-in for the
user's default index holding what the registry holds: the same base versions without our
label, a newer torch, and torchvisions that pin those torches. The installers run with their
configuration files and PIP_*/UV_* variables cleared, so nothing else is reached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from intelmac_torch_builder.core import companion
from orch_companion import VERSION as TV_VERSION
from orch_companion import serve_companion
from orch_index import make_wheel, serve_index, write_simple
from orch_project import Project
from orch_server import FileServer

PROBE = (
    "import json, torch, torchvision\n"
    "print(json.dumps({'torch': torch.__version__, 'torchvision': torchvision.__version__,\n"
    "  'built_against': getattr(torchvision, 'built_against', None),\n"
    "  'kernels': getattr(getattr(torchvision, '_C', None), 'mps_kernels', '')}))\n"
)


def _registry_stand_in(folder: Path, torch_version: str) -> None:
    """torch X and a newer torch, each with the torchvision that pins it, as upstream ships."""
    major, minor, _ = torch_version.split(".")
    newer = f"{major}.{int(minor) + 1}.0"
    for torch, vision in ((torch_version, TV_VERSION), (newer, "0.2.0")):
        make_wheel(folder, "torch", torch, [], {"torch/__init__.py": f"__version__ = {torch!r}\n"})
        make_wheel(
            folder, "torchvision", vision, [f"torch=={torch}"],
            {"torchvision/__init__.py": f"import torch\n__version__ = {vision!r}\n"},
        )  # fmt: skip
    write_simple(folder)


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["PIP_CONFIG_FILE"] = os.devnull  # no site-wide extra indexes or find-links
    return env


def _install(tool: str, venv: Path, index: str, ours: str, args: list[str]) -> dict[str, str]:
    python = venv / "bin" / "python"
    if tool == "pip":
        argv = [str(python), "-m", "pip", "install", "-q", "--no-cache-dir",
                "--disable-pip-version-check"]  # fmt: skip
    else:
        uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"
        argv = [uv, "pip", "install", "--no-config", "--no-cache", "--python", str(python)]
    done = subprocess.run(
        [*argv, "--index-url", index, "--extra-index-url", ours, *args],
        check=False, capture_output=True, text=True, env=_clean_env(), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    shown = subprocess.run(
        [str(python), "-c", PROBE], capture_output=True, text=True, cwd=venv, check=True
    )
    seen: dict[str, str] = json.loads(shown.stdout)
    return seen


@pytest.mark.slow
def test_pip_and_uv_install_the_pair_from_our_extra_index(
    project: Project, tmp_path: Path
) -> None:
    if shutil.which("uv", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("uv is not installed in this environment (it is in the 'test' extra)")
    serve_companion(project)
    built = project.cli("all", "--builder", "setuptools")
    assert built.code == 0, built.text
    torch, vision = f"{project.version}+intelmac", f"{TV_VERSION}+intelmac"
    pinned = [f"torch=={torch}", f"torchvision=={vision}"]
    ours_pair = {"torch": torch, "torchvision": vision}
    newer = {"torch": "1.1.0", "torchvision": "0.2.0"}

    default_dir = tmp_path / "registry"
    _registry_stand_in(default_dir, project.version)
    ours_server, default_server = FileServer(), FileServer()
    try:
        ours = serve_index(ours_server, project.wheels)
        index = serve_index(default_server, default_dir)
        cases = [
            # The documented commands: exact pins, our index as an extra index.
            ("pip", [], pinned, ours_pair),
            ("uv", [], pinned, ours_pair),
            # uv's default strategy (first-index) reads --extra-index-url before the default
            # index and takes a package only from the first index that has it: ours.
            ("uv", [], ["torch", "torchvision"], ours_pair),
            # Why the pins: pip (and uv's unsafe-best-match) take the newest version from
            # any index, and the default index has a newer torch with its own torchvision.
            ("pip", [], ["torch", "torchvision"], newer),
            ("uv", ["--index-strategy", "unsafe-best-match"], ["torch", "torchvision"], newer),
            ("uv", ["--index-strategy", "unsafe-best-match"], pinned, ours_pair),
        ]
        for number, (tool, flags, requirements, expected) in enumerate(cases):
            venv = tmp_path / f"venv{number}"
            venv_args = [] if tool == "pip" else ["--without-pip"]
            subprocess.run([sys.executable, "-m", "venv", *venv_args, str(venv)], check=True)
            seen = _install(tool, venv, index, ours, [*flags, *requirements])
            case = (tool, flags, requirements)
            assert {k: seen[k] for k in expected} == expected, (case, seen)
            if expected == ours_pair:
                # Our torchvision, built against our torch, with its MPS kernels.
                assert seen["built_against"] == torch, (case, seen)
                assert all(marker in seen["kernels"] for marker in companion.MPS_MARKERS)
    finally:
        ours_server.close()
        default_server.close()
