"""Two builds of one target: the second waits for the lock, or refuses with --no-wait."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from intelmac_torch_builder import cli
from orch_project import Project

HOLDER = """
import sys
from pathlib import Path
from intelmac_torch_builder.core._locks import held
from intelmac_torch_builder.core._log import Log
with held(Path(sys.argv[1]), what="the test", wait=False, log=Log.create()):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def other_build(project: Project) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the lock of the fixture line, until its stdin closes."""
    lock = project.work / "locks" / f"{project.version}.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    yield holder
    if holder.poll() is None:
        holder.kill()
    holder.wait()


def test_no_wait_refuses_clearly(project: Project, other_build: subprocess.Popen[str]) -> None:
    result = project.cli("fetch", "--no-wait")
    assert result.code == 1
    assert (
        f"Another build of PyTorch {project.version} is running (pid {other_build.pid}"
        in result.err
    )
    assert "locks/1.0.0.lock" in result.err
    assert project.server.requests == []  # refused before doing anything


def test_second_build_waits_for_the_first(
    project: Project, other_build: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]
) -> None:
    codes: list[int] = []
    argv = [
        "fetch", "--catalog", str(project.catalog), "--work-dir", str(project.work),
        "--cache-dir", str(project.cache),
    ]  # fmt: skip
    waiter = threading.Thread(target=lambda: codes.append(cli.main(argv)))
    waiter.start()
    err = ""
    deadline = time.monotonic() + 60  # generous: the suite runs on busy machines
    while "Waiting for the other build" not in err:
        assert time.monotonic() < deadline, f"the second build never said it waits:\n{err}"
        time.sleep(0.05)
        err += capsys.readouterr().err
    assert waiter.is_alive()  # still queued behind the other build
    assert project.server.requests == []
    assert other_build.stdin is not None
    other_build.stdin.close()  # the other build finishes
    waiter.join(timeout=30)
    assert codes == [0]
    err += capsys.readouterr().err
    assert "Waiting for the other build of PyTorch 1.0.0" in err
    assert (project.work / project.version / "source" / "setup.py").is_file()


def test_lock_is_per_release_line(
    project: Project, tmp_path: Path, other_build: subprocess.Popen[str]
) -> None:
    """Another line's lock does not block this one."""
    other_build.stdin.close()  # type: ignore[union-attr]
    other_build.wait()
    lock = project.work / "locks" / "9.9.9.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert project.cli("fetch", "--no-wait").code == 0
    finally:
        holder.kill()
        holder.wait()


def test_no_wait_refusal_leaves_the_holders_outcome(
    project: Project, other_build: subprocess.Popen[str]
) -> None:
    """`make build` readers trust outcome.json: a refused run must not write over the record
    of the build that holds the lock (and is still running)."""
    outcome = project.work / project.version / "outcome.json"
    outcome.parent.mkdir(parents=True, exist_ok=True)
    outcome.write_text('{"outcome": "built", "exit_code": 0}\n')
    result = project.cli("all", "--no-wait", "--builder", "setuptools")
    assert result.code == 1
    assert "Another build of PyTorch" in result.err
    assert outcome.read_text() == '{"outcome": "built", "exit_code": 0}\n'
