"""The whole suite's hooks: the summaries that tests fill in (tests/shared_run.py), printed
once at the end of the run; under pytest-xdist each worker sends its own to the controller."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .shared_run import SUMMARIES, merge, worker

_OUTPUT_KEY = "intelmac_summaries"


def pytest_sessionfinish(session: pytest.Session) -> None:
    if worker() is not None and hasattr(session.config, "workeroutput"):
        session.config.workeroutput[_OUTPUT_KEY] = json.dumps(SUMMARIES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist's controller: a worker finished; take its summaries."""
    sent = getattr(node, "workeroutput", {}).get(_OUTPUT_KEY)
    if sent:
        merge(json.loads(sent))


def _order(key: str) -> tuple[int, tuple[int, ...], str]:
    """Release lines in version order (2.6.0 before 2.14.1); anything else after them."""
    try:
        return (0, tuple(int(part) for part in key.split(".")), "")
    except ValueError:
        return (1, (), key)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for title, lines in SUMMARIES.items():
        if lines:
            terminalreporter.section(title)
            for key in sorted(lines, key=_order):
                terminalreporter.write_line(f"{key}: {lines[key]}")
