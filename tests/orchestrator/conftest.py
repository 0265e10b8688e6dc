"""Fixtures for the orchestrator's tests: a fixture upstream served over real HTTP."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from orch_fixture import (
    make_tarball,
    sha256,
    upstream_files,
    write_catalog,
    write_series,
    write_tree,
)
from orch_server import FileServer

from build_scripts import cli

VERSION = "1.0.0"


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


@dataclass
class Project:
    """A fixture catalog, its upstream tarball on the server, and private folders."""

    root: Path
    server: FileServer
    capsys: pytest.CaptureFixture[str]
    catalog: Path
    tarball: Path
    url: str
    sha256: str
    patches: list[Path]
    version: str = VERSION
    extra: list[str] = field(default_factory=list)

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    @property
    def tarball_name(self) -> str:
        return self.tarball.name

    def cli(self, command: str, *args: str) -> Result:
        argv = [
            command,
            "--catalog", str(self.catalog),
            "--work-dir", str(self.work),
            "--cache-dir", str(self.cache),
            "--wheels-dir", str(self.wheels),
            "--backoff", "0",
            "--timeout", "5",
            *self.extra,
            *args,
        ]  # fmt: skip
        self.capsys.readouterr()
        code = cli.main(argv)
        captured = self.capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def rewrite_catalog(self, **line: object) -> None:
        entry: dict[str, object] = {
            "version": self.version,
            "url": self.url,
            "sha256": self.sha256,
            "patches": self.patches,
        }
        entry.update(line)
        write_catalog(self.catalog.parent, [entry])


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
