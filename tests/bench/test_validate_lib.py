"""The shell functions the NVIDIA validation scripts share (validate_lib.sh), run with bash."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LIB = Path(__file__).resolve().parent / "validate_lib.sh"


def _bash(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f'set -u; . "{LIB}"; {script}'], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", **env}, check=False)


def test_begin_validation_sets_up_the_run(tmp_path: Path) -> None:
    done = _bash('begin_validation out/default; echo "$OUT|$PY|$WHEELS|$LOG|$status|$PYTHONUNBUFFERED"; '
                 'test -d "$WORK" && test -d "$OUT"', tmp_path, PY=sys.executable)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"out/default|{sys.executable}|.whl|out/default/validation-log.txt|0|1"


def test_begin_validation_stops_with_3_when_the_preflight_fails(tmp_path: Path) -> None:
    # a Python without expecttest and no wheels to install it from, offline: exit 3, with the reason
    (tmp_path / "wheels").mkdir()
    done = _bash("begin_validation out; echo reached", tmp_path, PY="/bin/false", WHEELS=str(tmp_path / "wheels"))
    assert done.returncode == 3 and "reached" not in done.stdout
    assert "expecttest (OpInfo imports it) is missing" in done.stderr
    assert not (tmp_path / "out").exists()


def test_begin_validation_without_opinfo_needs_no_expecttest(tmp_path: Path) -> None:
    # A run without the parity group (validate_cuda_workloads.sh) starts on a Python that lacks it.
    (tmp_path / "wheels").mkdir()
    done = _bash("begin_validation out no-opinfo; echo reached", tmp_path, PY="/bin/false", WHEELS=str(tmp_path / "wheels"))
    assert done.returncode == 0 and "reached" in done.stdout, done.stderr


def test_end_validation_packs_the_runs_and_exits_with_the_status(tmp_path: Path) -> None:
    script = ('begin_validation out no-opinfo; for r in clean planted; do mkdir -p "$WORK/$r"; '
              'for f in regress.json regress.md compat.json compat.md; do echo "$r $f" > "$WORK/$r/$f"; done; done; '
              'status=1; end_validation clean planted; echo not-reached')
    done = _bash(script, tmp_path, PY=sys.executable)
    assert done.returncode == 1 and "not-reached" not in done.stdout
    out = tmp_path / "out"
    assert (out / "clean-compat.md").read_text() == "clean compat.md\n"
    assert (out / "planted-regress.md").read_text() == "planted regress.md\n"
    listing = subprocess.run(["tar", "-tzf", str(out / "raw.tar.gz")], capture_output=True, text=True, check=True).stdout
    assert {"./clean-regress.json", "./planted-compat.md"} <= set(listing.split())
    assert "=== validation exit 1" in (out / "validation-log.txt").read_text()
