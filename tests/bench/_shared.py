"""The wheel's own timing rules and workloads, loaded from the series' sources.

``python -m torch.backends.mps --check`` ships in the patched wheel (patch 0003) with
``torch/backends/mps/_timing.py`` and ``_workloads.py``. Those files are the one copy: the
benchmark loads them from ``patches/src/`` by path, so it runs the same on a stock torch
(Linux CI, an NVIDIA machine) as on the patched wheel, and its figures for a kernel the
check also times are the same measurement of the same work.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SOURCES = Path(__file__).resolve().parents[2] / "patches" / "src" / "torch" / "backends" / "mps"


def load(name: str) -> ModuleType:
    """``patches/src/torch/backends/mps/<name>.py`` as the module ``intelmac_mps_<name>``."""
    module_name = f"intelmac_mps{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, SOURCES / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {SOURCES / f'{name}.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
