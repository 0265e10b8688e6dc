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

from ..core import companion, image_io, native_deps
from ..core._log import Log
from ..core._plan import Step
from ..core.host import Host, max_jobs
from ..core.options import Options, PythonTarget
from . import macos


def venv_python(options: Options, python: PythonTarget) -> Path:
    return options.layout.venvs / python.tag / "bin" / "python"


def torch_site(options: Options, python: PythonTarget) -> Path:
    return options.layout.venvs / python.tag / "torch-site"


def image_prefix(options: Options) -> Path:
    """The one prefix holding the pinned image codecs torchvision compiles against."""
    return options.layout.root / "image-io"


def prepare_codecs(options: Options) -> None:
    # The native packages' shared cache ($INTELMAC_CACHE), as for llvm-openmp.
    image_io.prepare(
        image_prefix(options), options.line.macos_deployment_target,
        native_deps.default_cache(), Log.create(),
    )  # fmt: skip


def build_env(options: Options, host: Host | None) -> dict[str, str]:
    env = companion.setup_env(options)
    if options.builder == "pytorch-macos":
        target = options.line.macos_deployment_target
        codecs = image_prefix(options)
        env.update(
            {
                "MACOSX_DEPLOYMENT_TARGET": target,
                "ARCHFLAGS": "-arch x86_64",
                "_PYTHON_HOST_PLATFORM": f"macosx-{target}-x86_64",
                # torch.utils.cpp_extension links @rpath/libtorch*.dylib; the first rpath
                # finds them in the torch package installed beside torchvision. The second
                # lets delocate resolve the codecs' @rpath install names at repair time
                # (it then bundles them and drops this build-machine rpath).
                "LDFLAGS": f"-Wl,-rpath,{companion.TORCH_LIB_RPATH} -Wl,-rpath,{codecs}/lib",
                # setup.py finds jpeglib.h and webp/decode.h here, libpng through the
                # libpng-config the build writes into {codecs}/bin (first on PATH).
                "TORCHVISION_INCLUDE": f"{codecs}/include",
                "TORCHVISION_LIBRARY": f"{codecs}/lib",
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
                "image codecs: the pinned osx-64 libjpeg-turbo, libpng, libwebp and zlib "
                f"(patches/toolchain/native.yaml, sha256-checked) into {image_prefix(options)}, "
                f"with a libpng-config; each header present, each dylib x86_64 for macOS "
                f"{options.line.macos_deployment_target} or older",
                action=lambda: prepare_codecs(options),
            ),
            Step(
                f"wheel for {python.tag} against torch {torch}, MPS kernels forced in, "
                "JPEG/PNG/WebP image I/O built in",
                _wheel_argv(interpreter, out, offline=False),
                cwd=tree,
                log_name=log_name,
                path_prepend=image_prefix(options) / "bin",
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
