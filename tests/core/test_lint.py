"""The lint step of .github/workflows/ci.yml, run inside make test so both agree."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CI_WORKFLOW = REPO / ".github" / "workflows" / "ci.yml"


def test_ruff_as_the_ci_workflow_runs_it() -> None:
    ruff = Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        pytest.skip("ruff is not installed in this environment (it is in the 'test' extra)")
    # Take the exact command from the workflow, so the two cannot drift apart.
    # ci.yml runs the ruff make's venv installed with the pinned test tools.
    match = re.search(r"^\s*(?:run: \.venv/bin/)?(ruff check [^\n]+)$", CI_WORKFLOW.read_text(),
                      re.MULTILINE)
    assert match, f"no 'ruff check' step in {CI_WORKFLOW}"
    args = match.group(1).split()[1:]
    result = subprocess.run([str(ruff), *args], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
