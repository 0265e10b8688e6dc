"""The warm-up's time box and its hand-over from job to job.

A line's Python-independent compile may not fit one GitHub job (6 hours), so release.yml
runs it in up to ``budget.WARMUP_JOBS`` jobs. Each runs the compile inside a time box:

    python -m intelmac_torch_builder.ci.warmup run --minutes 200 --stage 1 \\
        --state state/warmup.json --version 2.14.1 --python 3.14 --fetch-args ""

runs the fetch and patch stages and the build stage's ``--shared-only`` mode (the libraries
every Python shares, configured with the line's newest Python; nothing that links a Python,
no wheel, no repair, no verify: no one Python's own part is the gate), or the command given
after ``--``:

* the command finishes in time: the state says ``finished`` (exit 0);
* the time box ends first: the command is interrupted (its process group gets SIGINT,
  then SIGTERM, then SIGKILL), the state says ``unfinished``: the compiler cache keeps
  every object compiled so far, and the job hands it on. Exit 0 while a later warm-up job
  can continue; in the last one (``WARMUP_JOBS``) exit 1, saying which button continues it;
* the command fails: the state says ``failed`` and the exit status is the command's.

The next job reads that state first (``next``): it continues an unfinished compile, skips
a finished one and stops on a failed one; a job that finds no state (the first attempt's
first job, or a job whose runner was lost before it saved one) starts from the actions
cache (``fresh``). On a re-run, the job that recorded a failure tries again. The wheel jobs
ask ``ready`` and stop at once, with the reason, unless the warm-up finished; the torchvision
job asks ``pick`` which Python's torch wheel to build against. Each writes its outputs to
``$GITHUB_OUTPUT`` when GitHub sets it.
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
from dataclasses import asdict, dataclass, replace
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
    # The artifact holding the compiler cache this state describes: the job's own hand-over
    # (finished, unfinished), or the one it had started from (failed; '' when none).
    artifact: str = ""

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


def shared_compile(version: str, python: str, fetch_args: str = "") -> list[list[str]]:
    """The stages that compile what every Python of the line shares: fetch, patch, and the
    build stage's shared libraries alone (``--shared-only``: CMake configured with
    ``python``, then ``failfast.SHARED_TARGETS``; nothing that links a Python, no wheel)."""
    tool = [sys.executable, "-m", "intelmac_torch_builder"]
    return [[*tool, "fetch", "--torch", version, *fetch_args.split()],
            [*tool, "patch", "--torch", version],
            [*tool, "build", "--torch", version, "--python", python, "--shared-only"]]


def run_all(commands: Sequence[Sequence[str]], *, minutes: float, stage: int,
            state_path: Path, grace: float = GRACE_SECONDS) -> State:
    """Run ``commands`` one after another, all within one time box of ``minutes``."""
    start = time.monotonic()
    state = State(stage, FINISHED, 0, 0.0, minutes)
    for command in commands:
        left = minutes - (time.monotonic() - start) / 60
        state = run(command, minutes=max(left, 0.0), stage=stage, state_path=state_path,
                    grace=grace)
        if state.outcome != FINISHED:
            break
    state = State(stage, state.outcome, state.exit_code,
                  round((time.monotonic() - start) / 60, 2), minutes)
    state.save(state_path)
    return state


def unfinished_message(state: State) -> str:
    """What the last warm-up job says when the compile is still unfinished."""
    return (f"The warm-up did not finish its compile in {state.stage} jobs of "
            f"{state.box_minutes:g} minutes each. Press 'Re-run failed jobs': warm-up job "
            f"{state.stage} continues from this run's compiler cache (artifact, kept 30 days). "
            "After 30 days, run the workflow on the tag (Use workflow from → Tags): its "
            "warm-up compiles again from nothing (a tag restores no saved cache). If it "
            "happens again, raise WARMUP_JOBS in ci/budget.py and add a warm-up job "
            "(docs/releasing.md, 'Time').")


def _github_output(**values: str) -> None:
    target = os.environ.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.writelines(f"{key}={value}\n" for key, value in values.items())


@dataclass(frozen=True)
class Next:
    todo: bool  # this job compiles
    fresh: bool  # from the actions cache (no earlier job's artifact to continue from)


def next_step(state_path: Path, stage: int | None = None) -> Next:
    """What warm-up job ``stage`` does, from the state the earlier jobs (or attempts) left."""
    if not state_path.exists():
        # The first job of a run, or an earlier job lost before it saved its state.
        return Next(todo=True, fresh=True)
    state = State.load(state_path)
    if state.outcome == FAILED:
        if stage is not None and state.stage >= stage:
            return Next(todo=True, fresh=False)  # a re-run of the job that failed: try again
        raise BuildError(
            f"The warm-up failed in job {state.stage} (exit {state.exit_code}); continuing "
            "would fail the same way. Read that job's log and its logs artifact. A passing "
            "cause (a lost runner, a full disk): press 'Re-run failed jobs'. A broken patch: "
            "fix it on main and push the next build number's tag."
        )
    return Next(todo=state.outcome == UNFINISHED, fresh=False)


def ready(state_path: Path) -> State:
    """The warm-up's state, if it finished; otherwise a BuildError that says what to do."""
    state = State.load(state_path)
    if state.outcome == FINISHED:
        return state
    if state.outcome == UNFINISHED and state.stage < budget.WARMUP_JOBS:
        # The last job left no state: its runner was lost, or it was cancelled.
        lost = state.stage + 1
        raise BuildError(
            f"The warm-up did not finish its compile in {state.stage} jobs, and warm-up job "
            f"{lost} did not record how it ended (its runner was lost, or it was cancelled). "
            f"Press 'Re-run failed jobs': warm-up job {lost} continues from job "
            f"{state.stage}'s compiler cache (artifact, kept 30 days).")
    if state.outcome == UNFINISHED:
        raise BuildError(unfinished_message(state))
    next_step(state_path)  # raises for a failed warm-up
    raise BuildError(f"{state_path}: unknown warm-up outcome '{state.outcome}'")


def pick(wheels: Path, candidates: Sequence[str]) -> str:
    """The newest of ``candidates`` (Pythons, oldest first) whose torch wheel is in ``wheels``."""
    for python in reversed(candidates):
        tag = "cp" + python.replace(".", "")
        if any(wheels.glob(f"torch-*-{tag}-{tag}-*.whl")):
            return python
    raise BuildError(
        f"No torch wheel for Python {', '.join(candidates)} is in {wheels}: every wheel job "
        "of the line failed, and torchvision is built against one. Read the wheel jobs' "
        "errors; press 'Re-run failed jobs' once their cause is gone.")


def _artifact(state_path: Path) -> str:
    """The artifact to continue from ('' with no state: start from the actions cache)."""
    return State.load(state_path).artifact if state_path.exists() else ""


def _run_command(args: argparse.Namespace) -> int:
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if command:
        commands = [command]
    elif args.version and args.python:
        commands = shared_compile(args.version, args.python, args.fetch_args)
    else:
        raise BuildError("warmup run needs --version and --python, or a command after --")
    state = run_all(commands, minutes=args.minutes, stage=args.stage, state_path=args.state)
    # Each job hands its cache on under a name of its own (job and attempt), so a hand-over
    # that fails replaces nothing: the state names the one to continue from.
    handed = args.artifact if state.outcome in (FINISHED, UNFINISHED) else args.continued
    state = replace(state, artifact=handed or "")
    state.save(args.state)
    print(f"warm-up job {state.stage}: {state.outcome} after {state.minutes:g} min "
          f"(time box {state.box_minutes:g} min)")
    _github_output(outcome=state.outcome)
    if state.outcome == UNFINISHED and state.stage >= budget.WARMUP_JOBS:
        print(f"::error title=Warm-up unfinished::{unfinished_message(state)}")
        return 1
    if state.outcome == UNFINISHED:
        print(f"::notice title=Warm-up unfinished::job {state.stage} reached its "
              f"{state.box_minutes:g}-minute time box; the next warm-up job continues "
              "from the compiler cache")
    return state.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.ci.warmup",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run a command within the compile time box")
    run_parser.add_argument("--minutes", type=float, required=True)
    run_parser.add_argument("--stage", type=int, required=True)
    run_parser.add_argument("--state", type=Path, required=True)
    run_parser.add_argument("--version", help="the line (with --python): its shared compile")
    run_parser.add_argument("--python", help="the Python the shared compile configures with")
    run_parser.add_argument("--fetch-args", default="", help="extra arguments of the fetch stage")
    run_parser.add_argument("--artifact", default="",
                            help="the artifact this job hands its compiler cache on as")
    run_parser.add_argument("--continued", default="",
                            help="the artifact whose compiler cache this job started from")
    run_parser.add_argument("argv", nargs=argparse.REMAINDER)
    for name in ("next", "ready"):
        sub = commands.add_parser(name, help=f"read the warm-up state ({name})")
        sub.add_argument("--state", type=Path, required=True)
        if name == "next":
            sub.add_argument("--stage", type=int, help="this warm-up job's number")
    pick_parser = commands.add_parser("pick", help="the Python torchvision is built with")
    pick_parser.add_argument("--wheels", type=Path, required=True)
    pick_parser.add_argument("--candidates", required=True, help="Pythons, space-separated")
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return _run_command(args)
        if args.command == "next":
            step = next_step(args.state, args.stage)
            print("the compile continues here" if step.todo else "the warm-up already finished")
            _github_output(todo=str(step.todo).lower(), fresh=str(step.fresh).lower(),
                           artifact=_artifact(args.state))
            return 0
        if args.command == "pick":
            python = pick(args.wheels, args.candidates.split())
            print(f"torchvision is built with Python {python}")
            _github_output(python=python)
            return 0
        state = ready(args.state)
        print(f"warm-up finished in job {state.stage}")
        _github_output(artifact=state.artifact)
        return 0
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
