"""The live build line: full output to the log file, progress on the terminal."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from intelmac_torch_builder.core import _log
from intelmac_torch_builder.core.errors import BuildError

SCRIPT = "import sys\nfor i in range(1, 4):\n    print(f'[{i}/4] Building CXX object o{i}.o', flush=True)\nsys.exit(CODE)\n"


def test_output_goes_to_the_log_and_progress_to_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_log, "_QUIET_NOTE_EVERY", 0.0)  # not a terminal: a line per update
    log_file = tmp_path / "logs" / "build.log"
    _log.Log.create().run_logged(
        [sys.executable, "-c", SCRIPT.replace("CODE", "0")],
        label="wheel for cp311",
        log_file=log_file,
    )
    err = capsys.readouterr().err
    assert "wheel for cp311 · 00:00 · [3/4] 75%" in err
    assert "Building CXX object o2.o" not in err  # no wall of compiler output
    text = log_file.read_text()
    assert "[2/4] Building CXX object o2.o" in text and "# exit status 0" in text


def test_failure_shows_the_tail_and_the_log_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_file = tmp_path / "build.log"
    with pytest.raises(BuildError) as failure:
        _log.Log.create().run_logged(
            [sys.executable, "-c", SCRIPT.replace("CODE", "3")],
            label="wheel for cp311",
            log_file=log_file,
        )
    assert "wheel for cp311 failed (exit status 3)" in str(failure.value)
    assert str(log_file) in str(failure.value)
    assert "[3/4] Building CXX object o3.o" in capsys.readouterr().err
