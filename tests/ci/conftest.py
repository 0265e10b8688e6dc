"""Makes tests/ci/ci_support.py importable: pytest runs with --import-mode=importlib,
which does not put test folders on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
