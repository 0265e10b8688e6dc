"""Fixtures for the orchestrator's tests: a fixture upstream served over real HTTP."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The helpers sit beside the tests under names no other test folder uses.
sys.path.insert(0, str(Path(__file__).parent))

from orch_fixture import (
    make_tarball,
    sha256,
    upstream_files,
    write_catalog,
    write_series,
    write_tree,
)
from orch_project import VERSION, Project
from orch_server import FileServer


@pytest.fixture
def server() -> Iterator[FileServer]:
    running = FileServer()
    yield running
    running.close()


@pytest.fixture
def project(tmp_path: Path, server: FileServer, capsys: pytest.CaptureFixture[str]) -> Project:
    tree = write_tree(tmp_path / "upstream" / f"pytorch-v{VERSION}", upstream_files(VERSION))
    tarball = make_tarball(tree, tmp_path / f"pytorch-v{VERSION}.tar.gz", f"pytorch-v{VERSION}")
    url = server.serve(tarball.name, tarball)
    catalog_dir = tmp_path / "catalog"
    patches = write_series(catalog_dir / "fixture")
    digest = sha256(tarball)
    catalog = write_catalog(
        catalog_dir, [{"version": VERSION, "url": url, "sha256": digest, "patches": patches}]
    )
    return Project(tmp_path, server, capsys, catalog, tarball, url, digest, patches)
