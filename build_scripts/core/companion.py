"""What a companion build (torchvision) must be, as the build and verify stages name it.

A companion is built after torch, for the same Pythons, against the torch wheel this run
just built and verified, installed into the companion's build environment. Three variables
make upstream's ``setup.py`` produce the wheel we want (torchvision 0.21.0's, checked against
the real source; later releases read the same names):

- ``FORCE_MPS=1``: compile ``torchvision/csrc/ops/mps/*.mm``. Without it ``setup.py`` compiles
  them only when ``torch.backends.mps.is_available()`` at build time, so a build machine
  without a usable GPU (a hosted runner, an Intel-only Mac without the opt-in) would
  silently ship a torchvision without its MPS ops.
- ``PYTORCH_VERSION=<our torch version>``: METADATA then requires exactly that torch.
- ``BUILD_VERSION=<version>+<label>``: the wheel's version (otherwise version.txt's, plus a
  git hash when there is one).
"""

from __future__ import annotations

from .options import Options

#: The ops torchvision implements for MPS (``torchvision/csrc/ops/mps``) that this project
#: checks in the wheel, in CI and in the regression suite.
MPS_OPS = ("nms", "roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool")

#: torchvision embeds its Metal shader source in the extension module, and that source
#: registers each op's kernels with one macro per op (``REGISTER_NMS_OP`` ...). Seen in
#: the official 0.21.0, 0.24.1, 0.29.1 and 0.29.2 macOS wheels; absent from their Linux
#: wheels, which compile no MPS sources.
MPS_MARKERS = tuple(f"REGISTER_{op.upper()}_OP" for op in MPS_OPS)

#: The extension module the kernels are in: ``_C.so`` up to 0.28, ``_C_stable.so`` (built
#: against torch's stable ABI) from 0.29.
EXTENSION_PREFIX = "torchvision/_C"

#: Where a companion's extension finds libtorch: torch's own folder beside it in
#: site-packages. The wheel must not carry a copy of torch's libraries.
TORCH_LIB_RPATH = "@loader_path/../torch/lib"
TORCH_LIBRARIES = ("libtorch", "libc10", "libshm")


def torch_options(options: Options) -> Options:
    """The torch build ``options`` (a companion's) is built against."""
    if options.companion_of is None:
        raise ValueError(f"{options.line.title} is not a companion")
    return options.companion_of


def torch_requirement(options: Options) -> str:
    """The one requirement on torch the companion's METADATA must carry."""
    return f"torch=={torch_options(options).wheel_version}"


def setup_env(options: Options) -> dict[str, str]:
    """The variables upstream's setup.py reads, on any host."""
    return {
        "FORCE_MPS": "1",
        "PYTORCH_VERSION": torch_options(options).wheel_version,
        "BUILD_VERSION": options.wheel_version,
    }
