"""tests/shared_run.py under pytest-xdist, as make test runs it: a build is made once for all
workers, and what each worker puts in a summary is printed once by the controller.

Each test runs a small suite of its own with two workers (--dist load: its tests land on both).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CONFTEST = "from tests.conftest import *  # noqa: F403  (the suite's hooks)\n"

BUILD_ONCE = '''
import time
from pathlib import Path

import pytest
from tests import shared_run

COUNT = Path({count!r})


def make(folder: Path) -> dict:
    with COUNT.open("a") as handle:
        handle.write("built\\n")
    time.sleep(1)  # long enough for the other worker to ask meanwhile
    (folder / "lib.so").write_text("x")
    return {{"library": str(folder / "lib.so")}}


@pytest.mark.parametrize("n", range(6))
def test_asks(n: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    made = shared_run.build_once(tmp_path_factory, "thing", make)
    assert Path(made["library"]).read_text() == "x"
    shared_run.summary("Workers")[shared_run.worker() or "none"] = "asked"
'''


def _suite(tmp_path: Path, count: Path) -> subprocess.CompletedProcess[str]:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_once.py").write_text(BUILD_ONCE.format(count=str(count)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "load",
         "--rootdir", str(suite), "-c", os.devnull, "--basetemp", str(tmp_path / "base"), str(suite)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    pytest.importorskip("xdist")
    tmp_path = tmp_path_factory.mktemp("shared-run")
    count = tmp_path / "count"
    return _suite(tmp_path, count), count


def test_a_build_is_made_once_for_all_workers(ran: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, count = ran
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout, done.stdout
    assert count.read_text().splitlines() == ["built"], "each worker built it"


def test_the_workers_summaries_are_printed_once(ran: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, _count = ran
    assert done.stdout.count(" Workers ") == 1, done.stdout
    lines = [line for line in done.stdout.splitlines() if line.endswith(": asked")]
    assert sorted(lines) == ["gw0: asked", "gw1: asked"], done.stdout
