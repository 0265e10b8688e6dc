"""The warm-up's time box (ci/warmup.py), run for real on small commands."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from intelmac_torch_builder.core.errors import BuildError

from intelmac_torch_builder.ci import budget, warmup

PY = sys.executable
#: A command's first line: SIGINT stops it, as it stops a compiler. A shell starts a background
#: job (`make test &`) with SIGINT ignored and its children inherit that; the time box's
#: SIGINT would then do nothing, and each test would wait for the grace period and SIGTERM.
SIGINT_STOPS = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def test_a_command_that_finishes_in_time(tmp_path: Path) -> None:
    state = warmup.run([PY, "-c", "print('compiled')"], minutes=1, stage=1,
                       state_path=tmp_path / "s.json")
    assert (state.outcome, state.exit_code) == ("finished", 0)
    assert json.loads((tmp_path / "s.json").read_text())["outcome"] == "finished"
    assert warmup.ready(tmp_path / "s.json").stage == 1
    assert warmup.next_step(tmp_path / "s.json", 2) == warmup.Next(todo=False, fresh=False)


#: How long a test waits for a process to start or to end before it fails: generous, so that a
#: busy machine (both cores taken by other work) is never mistaken for a fault.
DEADLINE_S = 60.0


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting for its reaper has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    proc = Path("/proc")
    if not proc.is_dir():  # macOS: kill's answer stands (launchd reaps an orphan at once)
        return True
    try:  # Linux: the state is the first field after the command's name in parentheses
        state = (proc / str(pid) / "stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _wait(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` (polled), failing with ``what`` after DEADLINE_S."""
    end = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"{what} (waited {DEADLINE_S:g} s)")
        time.sleep(0.05)


def test_the_time_box_interrupts_the_whole_process_group(tmp_path: Path) -> None:
    # The command starts a child (as make starts ninja and the compilers); both must stop.
    # The child must be running when the box ends, or the test proves nothing: on a busy
    # machine the command can take longer than a short box to start it (and a child forked
    # just as the interrupt comes misses it), so each try doubles the box until the child
    # had started inside it. A try whose child came late has that child killed here.
    grace = 5.0
    for box_s in (1.2, 2.4, 4.8, 9.6, 19.2, 38.4):
        attempt = tmp_path / f"box-{box_s:g}s"
        attempt.mkdir()
        child_pid, marker = attempt / "child.pid", attempt / "child-alive"
        child = (f"{SIGINT_STOPS}import os, pathlib, time\npathlib.Path({str(child_pid)!r}).write_text(str(os.getpid()))\n"
                 f"time.sleep(120)\npathlib.Path({str(marker)!r}).write_text('x')")
        parent = (f"{SIGINT_STOPS}import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {child!r}])\n"
                  "time.sleep(600)")
        started, start = time.time(), time.monotonic()
        state = warmup.run([PY, "-c", parent], minutes=box_s / 60, stage=2,
                           state_path=attempt / "s.json", grace=grace)
        elapsed = time.monotonic() - start
        if child_pid.exists() and child_pid.stat().st_mtime < started + box_s:
            break
        time.sleep(1)  # a child forked as the box ended has written its pid by now
        if child_pid.exists() and _running(pid := int(child_pid.read_text())):
            os.kill(pid, signal.SIGKILL)
    else:
        pytest.fail(f"the command never started its child within a {box_s:g} s time box")
    # The box, then at most a grace period per signal (SIGINT, SIGTERM, SIGKILL), and slack.
    assert elapsed < box_s + 3 * grace + 10
    assert (state.outcome, state.exit_code, state.stage) == ("unfinished", 0, 2)
    pid = int(child_pid.read_text())
    _wait(lambda: not _running(pid), f"the child (pid {pid}) outlived the time box")
    assert not marker.exists(), "the child outlived the time box"
    assert warmup.next_step(attempt / "s.json", 3) == warmup.Next(todo=True, fresh=False)
    with pytest.raises(BuildError, match="did not finish its compile in 2 jobs.*Press 'Re-run failed jobs'"):
        warmup.ready(attempt / "s.json")


def test_a_failed_compile_stops_the_line(tmp_path: Path) -> None:
    state = warmup.run([PY, "-c", "raise SystemExit(7)"], minutes=1, stage=1,
                       state_path=tmp_path / "s.json")
    assert (state.outcome, state.exit_code) == ("failed", 7)
    with pytest.raises(BuildError, match="failed in job 1 .exit 7."):
        warmup.next_step(tmp_path / "s.json", 2)
    # A re-run of the job that failed (a lost runner, a full disk) tries again.
    assert warmup.next_step(tmp_path / "s.json", 1) == warmup.Next(todo=True, fresh=False)
    with pytest.raises(BuildError, match="failed in job 1"):
        warmup.ready(tmp_path / "s.json")


def test_cli_exit_codes_and_github_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    state = tmp_path / "s.json"
    assert warmup.main(["run", "--minutes", "1", "--stage", "1", "--state", str(state),
                        "--artifact", "ccache-2.14.1-warmup-1", "--", PY, "-c", "pass"]) == 0
    assert warmup.main(["next", "--stage", "2", "--state", str(state)]) == 0
    assert warmup.main(["ready", "--state", str(state)]) == 0
    # The next jobs continue from the artifact the job that finished handed on.
    assert out.read_text().splitlines() == ["outcome=finished", "todo=false", "fresh=false",
                                            "artifact=ccache-2.14.1-warmup-1",
                                            "artifact=ccache-2.14.1-warmup-1"]
    # A failed compile names the artifact it had started from: a re-run continues from it.
    assert warmup.main(["run", "--minutes", "1", "--stage", "2", "--state", str(state),
                        "--artifact", "ccache-2.14.1-warmup-2-1", "--continued",
                        "ccache-2.14.1-warmup-1", "--", PY, "-c", "raise SystemExit(3)"]) == 3
    assert warmup.State.load(state).artifact == "ccache-2.14.1-warmup-1"
    assert warmup.main(["ready", "--state", str(tmp_path / "missing.json")]) == 1


def test_no_state_starts_afresh_from_the_actions_cache(tmp_path: Path) -> None:
    # The first job of a run, or a job after one whose runner was lost before it saved one.
    assert warmup.next_step(tmp_path / "none.json", 1) == warmup.Next(todo=True, fresh=True)
    assert warmup.next_step(tmp_path / "none.json", 3) == warmup.Next(todo=True, fresh=True)


def test_the_last_job_fails_when_the_compile_is_unfinished(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # So that "Re-run failed jobs" runs it (and the wheel jobs) again; earlier jobs hand on.
    slow = [PY, "-c", SIGINT_STOPS + "import time; time.sleep(30)"]
    state = tmp_path / "s.json"
    for stage, code in ((budget.WARMUP_JOBS - 1, 0), (budget.WARMUP_JOBS, 1)):
        assert warmup.main(["run", "--minutes", "0.01", "--stage", str(stage), "--state",
                            str(state), "--", *slow]) == code
    out = capsys.readouterr().out
    assert "::error title=Warm-up unfinished::" in out and "Press 'Re-run failed jobs'" in out
    # The re-run of that job continues from the artifact the failed attempt uploaded.
    assert warmup.next_step(state, budget.WARMUP_JOBS) == warmup.Next(todo=True, fresh=False)


def test_the_shared_compile_runs_no_packaging_stage() -> None:
    commands = warmup.shared_compile("2.14.1", "3.14", "--trust-on-first-use")
    assert [command[3] for command in commands] == ["fetch", "patch", "build"]
    # The build stage compiles what every Python shares, nothing that links one (N3).
    assert commands[-1][4:] == ["--torch", "2.14.1", "--python", "3.14", "--shared-only"]


def test_several_commands_share_one_time_box(tmp_path: Path) -> None:
    marker = tmp_path / "third-ran"
    commands = [[PY, "-c", "pass"], [PY, "-c", SIGINT_STOPS + "import time; time.sleep(30)"],
                [PY, "-c", f"open({str(marker)!r}, 'w')"]]
    state = warmup.run_all(commands, minutes=0.02, stage=1, state_path=tmp_path / "s.json",
                           grace=5)
    assert state.outcome == "unfinished" and not marker.exists()


def test_pick_takes_the_newest_python_whose_torch_wheel_finished(tmp_path: Path) -> None:
    (tmp_path / "torch-2.14.1+intelmac-cp312-cp312-macosx_14_0_x86_64.whl").write_text("")
    (tmp_path / "torch-2.14.1+intelmac-cp311-cp311-macosx_14_0_x86_64.whl").write_text("")
    assert warmup.pick(tmp_path, ["3.11", "3.12", "3.13"]) == "3.12"
    with pytest.raises(BuildError, match="No torch wheel for Python 3.13"):
        warmup.pick(tmp_path, ["3.13"])
