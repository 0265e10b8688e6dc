"""The companion's compile (torchvision), as a plan of commands and variables.

Each Python gets a build environment holding the torch wheel this run built and verified
for it, then ``pip wheel --no-build-isolation`` runs upstream's ``setup.py`` there, so the
extension compiles against our torch's headers and links our libtorch.

- ``pytorch-macos``: a venv per Python with the line's pinned, hashed build toolchain
  (upstream's ``pyproject.toml`` asks for setuptools, torch and wheel) and our torch wheel,
  x86_64 flags, and an LC_RPATH to torch's folder beside torchvision in site-packages.
- ``setuptools`` (the tests' fixture upstream on any OS): the torch wheel is installed with
  ``pip install --target`` into a folder put on PYTHONPATH; nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

from ..core import companion
from ..core._plan import Step
from ..core.host import Host, max_jobs
from ..core.options import Options, PythonTarget
from . import macos


def venv_python(options: Options, python: PythonTarget) -> Path:
    return options.layout.venvs / python.tag / "bin" / "python"


def torch_site(options: Options, python: PythonTarget) -> Path:
    return options.layout.venvs / python.tag / "torch-site"


def build_env(options: Options, host: Host | None) -> dict[str, str]:
    env = companion.setup_env(options)
    if options.builder == "pytorch-macos":
        target = options.line.macos_deployment_target
        env.update(
            {
                "MACOSX_DEPLOYMENT_TARGET": target,
                "ARCHFLAGS": "-arch x86_64",
                "_PYTHON_HOST_PLATFORM": f"macosx-{target}-x86_64",
                # torch.utils.cpp_extension links @rpath/libtorch*.dylib; this rpath finds
                # them in the torch package installed beside torchvision.
                "LDFLAGS": f"-Wl,-rpath,{companion.TORCH_LIB_RPATH}",
            }
        )
        if host is not None:
            env["MAX_JOBS"] = str(max_jobs(host))
    env.update(options.line.build_env)  # the catalog has the last word
    return env


def _wheel_argv(interpreter: str, out: Path, offline: bool) -> tuple[str, ...]:
    return (
        interpreter, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
        *(("--no-index",) if offline else ()), "-v", "--wheel-dir", str(out), ".",
    )  # fmt: skip


def python_steps(options: Options, python: PythonTarget, torch_wheel: Path) -> list[Step]:
    """The commands that build the companion's wheel for ``python``."""
    tree = options.layout.patched_tree
    out = options.layout.raw(python)
    log_name = f"build-{python.tag}.log"
    torch = companion.torch_options(options).wheel_version
    if options.builder == "pytorch-macos":
        venv = options.layout.venvs / python.tag
        interpreter = str(venv_python(options, python))
        return [
            Step(
                f"build venv for Python {python.version}",
                (python.executable, "-m", "venv", "--clear", str(venv)),
                log_name=log_name,
            ),
            Step(
                f"the line's pinned build toolchain into the {python.tag} venv (setuptools, "
                f"wheel, ninja: upstream's build requirements besides torch; "
                f"{options.line.pins.name}, every file checked against its sha256)",
                macos.toolchain_command(options, python),
                log_name=log_name,
            ),
            Step(
                f"our torch {torch} into the {python.tag} venv (its dependencies from the index)",
                (interpreter, "-m", "pip", "install", str(torch_wheel)),
                log_name=log_name,
            ),
            Step(
                f"wheel for {python.tag} against torch {torch}, MPS kernels forced in",
                _wheel_argv(interpreter, out, offline=False),
                cwd=tree,
                log_name=log_name,
            ),
        ]
    site = torch_site(options, python)
    return [
        Step(
            f"our torch {torch} for {python.tag} into {site}",
            (
                python.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-index",
                "--upgrade",
                "--target",
                str(site),
                str(torch_wheel),
            ),
            log_name=log_name,
        ),
        Step(
            f"wheel for {python.tag} against torch {torch} (generic setuptools build)",
            _wheel_argv(python.executable, out, offline=True),
            cwd=tree,
            log_name=log_name,
            env={"PYTHONPATH": str(site)},
        ),
    ]


def notes(options: Options) -> list[str]:
    torch = companion.torch_options(options)
    return [
        f"{options.line.title} pairs with torch {torch.line.version}: {options.line.pair_evidence}",
        (
            f"built against our torch {torch.wheel_version} (the wheel this run verified); "
            f"METADATA requires {companion.torch_requirement(options)}"
        ),
        "FORCE_MPS=1: the MPS kernels ("
        + ", ".join(companion.MPS_OPS)
        + ") are compiled whether or not this machine has a usable GPU",
    ]
