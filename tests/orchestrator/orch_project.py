"""The fixture project the orchestrator's tests drive: folders, catalog, server, CLI runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from intelmac_torch_builder import cli
from orch_fixture import write_catalog
from orch_server import FileServer

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

    def argv(self, command: str, *args: str) -> list[str]:
        """The CLI's arguments for ``command`` on this project's catalog and folders."""
        return [
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

    def cli(self, command: str, *args: str) -> Result:
        argv = self.argv(command, *args)
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
