"""Fixtures for the orchestrator's tests: a fixture upstream served over real HTTP."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The helpers sit beside the tests under names no other test folder uses.
sys.path.insert(0, str(Path(__file__).parent))

from orch_fixture import upstream_files, write_series
from orch_project import VERSION, Project
from orch_server import FileServer


@pytest.fixture
def server() -> Iterator[FileServer]:
    running = FileServer()
    yield running
    running.close()


@pytest.fixture
def project(tmp_path: Path, server: FileServer, capsys: pytest.CaptureFixture[str]) -> Project:
    return Project.served(tmp_path, server, capsys, upstream_files(VERSION), write_series)
