"""The series' new ``torch/backends/mps`` files as a package that runs over any real torch.

The check (``python -m torch.backends.mps --check``) ships inside the patched wheel, which
only a Mac build makes. Its files import each other relatively (``from . import _timing``),
so copied into a package of another name they run over a stock torch: the CPU torch of
``make test``, or the CUDA torch of an NVIDIA machine. ``python -m <package> --check`` then
goes through the same ``__main__.py`` and ``_device_policy.main`` as in the wheel.

    python -m tests.mps_check.overlay DEST    # prints the folder to put on PYTHONPATH
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[2] / "patches" / "src" / "torch" / "backends" / "mps"
PACKAGE = "intelmac_mps_under_test"


def make(dest: Path) -> Path:
    """Write ``dest/intelmac_mps_under_test/``; returns ``dest`` (for PYTHONPATH)."""
    package = dest / PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    for source in sorted(SOURCES.glob("*.py")):
        shutil.copy2(source, package / source.name)
    # Upstream's __init__.py is not ours to copy; the layer needs nothing from it here.
    (package / "__init__.py").write_text('"""The series\' mps files, under test."""\n')
    return dest


if __name__ == "__main__":
    print(make(Path(sys.argv[1]).resolve()))
