"""The warm-up's time box (ci/warmup.py), run for real on small commands."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from intelmac_torch_builder.core.errors import BuildError

from intelmac_torch_builder.ci import warmup

PY = sys.executable


def test_a_command_that_finishes_in_time(tmp_path: Path) -> None:
    state = warmup.run([PY, "-c", "print('compiled')"], minutes=1, stage=1,
                       state_path=tmp_path / "s.json")
    assert (state.outcome, state.exit_code) == ("finished", 0)
    assert json.loads((tmp_path / "s.json").read_text())["outcome"] == "finished"
    assert warmup.ready(tmp_path / "s.json").stage == 1
    assert warmup.next_step(tmp_path / "s.json") is False


def test_the_time_box_interrupts_the_whole_process_group(tmp_path: Path) -> None:
    # The command starts a child (as make starts ninja and the compilers); both must stop.
    marker = tmp_path / "child-alive"
    child = (f"import time, pathlib\ntime.sleep(3)\npathlib.Path({str(marker)!r}).write_text('x')")
    parent = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {child!r}])\ntime.sleep(60)"
    start = time.monotonic()
    state = warmup.run([PY, "-c", parent], minutes=0.02, stage=2, state_path=tmp_path / "s.json",
                       grace=5)
    assert time.monotonic() - start < 20
    assert (state.outcome, state.exit_code, state.stage) == ("unfinished", 0, 2)
    time.sleep(4)
    assert not marker.exists(), "the child outlived the time box"
    assert warmup.next_step(tmp_path / "s.json") is True
    with pytest.raises(BuildError, match="did not finish its compile in 2 jobs"):
        warmup.ready(tmp_path / "s.json")


def test_a_failed_compile_stops_the_line(tmp_path: Path) -> None:
    state = warmup.run([PY, "-c", "raise SystemExit(7)"], minutes=1, stage=1,
                       state_path=tmp_path / "s.json")
    assert (state.outcome, state.exit_code) == ("failed", 7)
    with pytest.raises(BuildError, match="failed in job 1 .exit 7."):
        warmup.next_step(tmp_path / "s.json")
    with pytest.raises(BuildError, match="failed in job 1"):
        warmup.ready(tmp_path / "s.json")


def test_cli_exit_codes_and_github_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    state = tmp_path / "s.json"
    assert warmup.main(["run", "--minutes", "1", "--stage", "1", "--state", str(state), "--",
                        PY, "-c", "pass"]) == 0
    assert warmup.main(["next", "--state", str(state)]) == 0
    assert out.read_text().splitlines() == ["outcome=finished", "todo=false"]
    assert warmup.main(["ready", "--state", str(tmp_path / "missing.json")]) == 1
