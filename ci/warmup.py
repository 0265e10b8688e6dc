"""The warm-up's time box and its hand-over from job to job.

A line's Python-independent compile may not fit one GitHub job (6 hours), so release.yml
runs it in up to ``budget.WARMUP_JOBS`` jobs. Each runs the compile inside a time box:

    python -m intelmac_torch_builder.ci.warmup run --minutes 200 --stage 1 \\
        --state state/warmup.json -- make build VERSION=2.14.1 PYTHON=3.14 TORCH_ONLY=1

* the command finishes in time: the state says ``finished`` (exit 0);
* the time box ends first: the command is interrupted (its process group gets SIGINT,
  then SIGTERM, then SIGKILL), the state says ``unfinished`` (exit 0): the compiler cache
  keeps every object compiled so far, and the job saves it for the next one;
* the command fails: the state says ``failed`` and the exit status is the command's.

The next job reads that state first (``next``): it continues an unfinished compile, skips
a finished one and stops on a failed one. The wheel jobs ask ``ready`` and stop at once,
with the reason, unless the warm-up finished. Each of these writes ``outcome`` and ``todo``
to ``$GITHUB_OUTPUT`` when GitHub sets it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core import _fsutil
from ..core.errors import BuildError
from . import budget

FINISHED, UNFINISHED, FAILED = "finished", "unfinished", "failed"
#: How long the interrupted command may take to stop before the next signal.
GRACE_SECONDS = 60


@dataclass(frozen=True)
class State:
    stage: int
    outcome: str
    exit_code: int
    minutes: float
    box_minutes: float

    def save(self, path: Path) -> None:
        _fsutil.write_json_atomic(path, asdict(self))

    @classmethod
    def load(cls, path: Path) -> State:
        try:
            data = json.loads(path.read_text())
            return cls(**data)
        except FileNotFoundError:
            raise BuildError(
                f"No warm-up state at {path}: the line's warm-up job did not get as far as "
                "uploading it (see that job's log). Re-run the failed jobs once it is fixed."
            ) from None
        except (json.JSONDecodeError, TypeError) as exc:
            raise BuildError(f"{path} is not a warm-up state ({exc}).") from None


def _stop(process: subprocess.Popen[bytes], grace: float) -> None:
    """Interrupt the command's whole process group (ninja and its compilers), harder each time."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run(command: Sequence[str], *, minutes: float, stage: int, state_path: Path,
        grace: float = GRACE_SECONDS) -> State:
    """Run ``command`` for at most ``minutes``; record and return how it ended."""
    if not command:
        raise BuildError("warmup run needs a command after --")
    start = time.monotonic()
    process = subprocess.Popen(list(command), start_new_session=True)
    try:
        code = process.wait(timeout=minutes * 60)
        outcome = FINISHED if code == 0 else FAILED
    except subprocess.TimeoutExpired:
        _stop(process, grace)
        code, outcome = 0, UNFINISHED
    state = State(stage, outcome, code, round((time.monotonic() - start) / 60, 2), minutes)
    state.save(state_path)
    return state


def _github_output(**values: str) -> None:
    target = os.environ.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.writelines(f"{key}={value}\n" for key, value in values.items())


def next_step(state_path: Path) -> bool:
    """Whether this continuation job has compiling to do (the earlier job left it unfinished)."""
    state = State.load(state_path)
    if state.outcome == FAILED:
        raise BuildError(
            f"The warm-up failed in job {state.stage} (exit {state.exit_code}); continuing "
            "would fail the same way. Read that job's log and its logs artifact, fix the cause, "
            "then re-run the failed jobs."
        )
    return state.outcome == UNFINISHED


def ready(state_path: Path) -> State:
    """The warm-up's state, if it finished; otherwise a BuildError that says what to do."""
    state = State.load(state_path)
    if state.outcome == FINISHED:
        return state
    if state.outcome == UNFINISHED:
        raise BuildError(
            f"The warm-up did not finish its compile in {state.stage} jobs of "
            f"{state.box_minutes:g} minutes each (budget.WARMUP_JOBS = {budget.WARMUP_JOBS}). "
            "Re-run the failed jobs: the warm-up jobs continue from the compiler cache. If it "
            "happens again, raise WARMUP_JOBS in ci/budget.py and add a warm-up job to "
            "release.yml (docs/releasing.md, 'Time')."
        )
    next_step(state_path)  # raises for a failed warm-up
    raise BuildError(f"{state_path}: unknown warm-up outcome '{state.outcome}'")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.ci.warmup",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run a command within the compile time box")
    run_parser.add_argument("--minutes", type=float, required=True)
    run_parser.add_argument("--stage", type=int, required=True)
    run_parser.add_argument("--state", type=Path, required=True)
    run_parser.add_argument("argv", nargs=argparse.REMAINDER)
    for name in ("next", "ready"):
        sub = commands.add_parser(name, help=f"read the warm-up state ({name})")
        sub.add_argument("--state", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            state = run(command, minutes=args.minutes, stage=args.stage, state_path=args.state)
            print(f"warm-up job {state.stage}: {state.outcome} after {state.minutes:g} min "
                  f"(time box {state.box_minutes:g} min)")
            if state.outcome == UNFINISHED:
                print(f"::notice title=Warm-up unfinished::job {state.stage} reached its "
                      f"{state.box_minutes:g}-minute time box; the next warm-up job continues "
                      "from the compiler cache")
            _github_output(outcome=state.outcome)
            return state.exit_code
        if args.command == "next":
            todo = next_step(args.state)
            print("the compile continues here" if todo else "the warm-up already finished")
            _github_output(todo=str(todo).lower())
            return 0
        state = ready(args.state)
        print(f"warm-up finished in job {state.stage}")
        return 0
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
