"""``check-upstream``: does the patch series fit a real upstream PyTorch, and does it work?

    intelmac-torch check-upstream SRC [--torch X.Y.Z] [--no-python]

SRC is either an upstream source tree (it has ``version.txt``) or an unpacked torch wheel
(``torch/`` and ``torch-*.dist-info/``). The release line comes from the tree (``2.6.0a0``
and ``2.9.1+cpu`` both name their X.Y.Z line) unless ``--torch`` says otherwise.

Two checks, in order:

1. **Fidelity.** The line's series from the catalog is applied (in a scratch copy) with
   ``patching.check_upstream``. Every hunk whose file the tree has must apply. A wheel has
   no ``.mm``/``.cpp``/CMake files; those are reported as absent, not failed. Its headers
   live under ``torch/include/``; its ``torch/_C/__init__.pyi`` is generated from the
   ``.pyi.in`` (should a series edit that), keeping the hand-written part verbatim.
2. **The Python layer.** The line's own ``torch/backends/__init__.py`` and
   ``torch/backends/mps/__init__.py`` are copied into a sandbox, patched with the series'
   Python hunks and imported under a stand-in ``torch`` package. Only the C++ entry points
   (``torch._C._mps_is_available`` and the operators ``torch.ops.intelmac.mps_*`` that
   MPSDeviceSelection.mm registers) are replaced, by test doubles that run the real policy: a small
   C-ABI shim compiled around the series' own ``MPSDevicePolicy.h`` (patch 0001), driven
   through ctypes on pretend Macs (UHD 630 only, UHD 630 + Radeon Pro 5500M, Mac Pro, M1).
   The scenarios below exercise the contract of issue 3: the default, the environment
   variables, the opt-in after a failed first scan, the late-change RuntimeError, device
   picking, ``devices()``, ``build_info()``, ``python -m torch.backends.mps`` and its
   ``--check`` (issue 18: exit 2 with the reason, ``--json``, ``check()``, and the smoke
   checks' worker processes started on the line's own files).

The shim plays the part of MPSDeviceSelection.mm (patch 0002), which only a Mac compiles: like it,
it holds one ``policy::DeviceState`` of the header (the flag, the current choice, rescans and
refusals, the one-time warnings) and adds only the pretend devices and the first-use scan.
tests/patches_py calls the same functions.
"""

from __future__ import annotations

from ...core.patching import wheel_path

from .command import (
    DESCRIPTION,
    check,
    register,
)
from .macs import (
    FAKE_MACS,
    PRO5500M,
    UHD630,
)
from .sandbox import (
    _STANDIN_C,
    Sandbox,
    make_module_sandbox,
    make_sandbox,
    sandbox_for,
)
from .scenarios import (
    SCENARIOS,
    run_scenarios,
)
from .series import (
    filter_series,
    materialise_header,
)
from .shim import (
    build_shim,
    c_parse_bool_env,
)
from .tree import (
    detect_tree,
    normalise_version,
)

__all__ = [
    "DESCRIPTION",
    "FAKE_MACS",
    "PRO5500M",
    "SCENARIOS",
    "Sandbox",
    "UHD630",
    "_STANDIN_C",
    "build_shim",
    "c_parse_bool_env",
    "check",
    "detect_tree",
    "filter_series",
    "make_module_sandbox",
    "make_sandbox",
    "materialise_header",
    "normalise_version",
    "register",
    "run_scenarios",
    "sandbox_for",
    "wheel_path",
]
