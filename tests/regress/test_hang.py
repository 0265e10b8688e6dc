"""Hang safety (issue 25): a check that never returns is a `hang` row naming its op, dtype and
input; the group's finished rows, its later checks and every other group survive; the run
ends by itself. Ctrl-C, SIGTERM and SIGHUP: tests/regress/test_stops.py."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # OpInfo's common_utils imports it

from tests.regress import _compat, _stream  # noqa: E402  (after importorskip)
from tests.regress.test_cpu_subset import ROOT, run_suite  # noqa: E402

NARROW = (
    "--quick", "--ops", "argmax", "sum", "add", "--shapes-ops", "argmax", "sum",
    "--no-reports", "--no-sampling", "--no-memory", "--no-training", "--no-workloads", "--no-grid",
    "--no-patched", "--dtypes", "float32",
)  # fmt: skip
# The reports and sampling groups are left out: some of their checks take longer than the
# 8 s deadline below on a loaded 2-core runner, and would be hangs of their own.


@pytest.mark.slow
def test_a_planted_hang_is_a_row_and_the_run_goes_on(tmp_path: Path) -> None:
    code, report, log = run_suite(
        tmp_path, *NARROW, "--check-timeout", "8", env={"INTELMAC_REGRESS_PLANT_HANG": "argmax"}
    )
    assert code == 0, log  # the planted hang was reported, and nothing else failed
    st = report["self_test"]
    assert st["caught"] is True and st["planted"][-1] == {"op": "argmax", "relative": 0.0, "mode": "hang"}
    # Parity: argmax hung in its first sample; the ops after it in the same group still ran.
    by_op = {(r["op"], r["check"]): r for r in report["results"]}
    hung = by_op[("argmax", "forward")]
    assert hung["status"] == "hang" and hung["dtype"] == "float32", hung
    assert "no result within 8 s" in hung["detail"] and "input float32[" in hung["detail"], hung
    assert by_op[("sum", "forward")]["status"] == "pass"
    assert by_op[("add", "forward")]["status"] == "pass"
    assert report["groups"]["parity"]["status"] == "hang"
    assert report["groups"]["parity"]["hangs"] == ["argmax"]
    # Shapes, a group of its own process: argmax hung earlier in the run, so its argmax rows
    # are not run (issue 34: a hang costs one timeout); the other ops' rows pass.
    shapes = report["shapes"]
    argmax = [r for r in shapes if r["op"] == "shapes.argmax"]
    assert argmax and {r["status"] for r in argmax} == {"skip"}, argmax
    assert all(r["detail"].startswith("not run: hung earlier in this run") for r in argmax)
    assert {r["status"] for r in shapes if r["op"] == "shapes.sum"} == {"pass"}
    compat = json.loads((tmp_path / "compat.json").read_text())
    _compat.validate(compat)
    assert {(e["group"], e["op"]) for e in compat["ops"] if e["status"] == "hang"} == {("parity", "argmax")}
    assert "hang" in (tmp_path / "compat.md").read_text()

    # Without the plant nothing hangs; with a plant that never fires the self-test says so.
    code, report, log = run_suite(
        tmp_path / "missed", "--quick", "--ops", "add", "--no-shapes", "--no-memory",
        "--no-training", "--no-workloads", "--no-grid", "--no-patched", "--dtypes", "float32",
        env={"INTELMAC_REGRESS_PLANT_HANG": "argmax"},
    )  # fmt: skip
    assert code == 3 and report["self_test"]["missed"] == ["hang:argmax"], log


def test_a_group_started_again_skips_the_checks_begun(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    first = _stream.RowStream(path, "shapes")
    assert first.begin("shapes", {"op": "shapes.sum", "dtype": "int32", "case": "4 x 33"})
    first.at("sample 0: input int32[4, 33]")
    first.close()
    got = _stream.read(path)
    assert got.at == "sample 0: input int32[4, 33]" and got.in_flight is not None
    again = _stream.RowStream(path, "shapes", frozenset(got.begun))
    assert not again.begin("shapes", {"op": "shapes.sum", "dtype": "int32", "case": "4 x 33"})
    assert again.begin("shapes", {"op": "shapes.sum", "dtype": "int64", "case": "4 x 33"})


def test_the_watch_sees_checks_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    watch = _stream.Watch(path)
    assert not watch.grew() and not watch.in_check
    s = _stream.RowStream(path, "parity")
    s.meta("samples", 2)
    assert watch.grew() and not watch.in_check
    s.begin("results", {"op": "argmax", "dtype": "int32"})
    assert watch.grew() and watch.in_check
    assert not watch.grew()  # nothing new: the deadline runs
    s.row("results", {"op": "argmax", "dtype": "int32", "status": "pass"})
    assert watch.grew() and not watch.in_check
    s.close()


@pytest.mark.slow
def test_a_group_process_ends_with_its_parent(tmp_path: Path) -> None:
    """A group's process has a session of its own; when the suite's process is killed, a
    check that never returns must not keep it alive."""
    out = tmp_path / "group.jsonl"
    worker = [sys.executable, "-m", "tests.regress", "--device", "cpu", "--ops", "argmax",
              "--dtypes", "float32", "--samples", "1", "--no-vision", "--worker", "parity",
              "--worker-out", str(out)]  # fmt: skip
    starter = (
        "import subprocess, sys; "
        f"p = subprocess.Popen({worker!r}, start_new_session=True); print(p.pid, flush=True); p.wait()"
    )
    env = dict(os.environ, INTELMAC_REGRESS_PLANT_HANG="argmax")
    parent = subprocess.Popen([sys.executable, "-c", starter], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 120
    while '"begin"' not in (out.read_text() if out.exists() else ""):
        assert time.monotonic() < deadline, "the worker never began its check"
        time.sleep(0.5)
    time.sleep(1)  # in the planted hang now
    parent.kill()
    parent.wait()

    def alive() -> bool:
        try:
            state = Path(f"/proc/{child}/status").read_text()
        except FileNotFoundError:
            return False
        return "\nState:\tZ" not in state

    deadline = time.monotonic() + 60  # generous: the suite runs on busy machines
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive():
        os.kill(child, signal.SIGKILL)
        pytest.fail("the group's process outlived its parent")


def test_only_the_hang_the_plant_made_is_counted_as_caught() -> None:
    """A real hang in a run with a planted one stays a failure; a plant that never fired is
    missed even when something else hung."""
    regress_main = importlib.import_module("tests.regress.__main__")
    plant = {"op": "argmax", "check": "forward", "dtype": "float32", "status": "hang",
             "at": "sample 0: input float32[4, 33]"}  # fmt: skip
    real = {"op": "set-up: dtype probe bfloat16", "check": "set-up", "dtype": "-", "status": "hang",
            "group": "shapes", "detail": "no output within 8 s"}  # fmt: skip
    wrong = {"op": "sum", "check": "forward", "dtype": "float32", "status": "fail"}
    record, left = regress_main._planted_hang(
        "argmax", None, [plant, real, wrong], {("argmax", plant["at"])})
    assert record["caught"] is True
    assert record["caught_in"] == ["hang: argmax float32 sample 0: input float32[4, 33]"]
    assert left == [real, wrong]
    record, left = regress_main._planted_hang("argmax", None, [real], set())
    assert record["caught"] is False and record["missed"] == ["hang:argmax"]
    assert left == [real]
