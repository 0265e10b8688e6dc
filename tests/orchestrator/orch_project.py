"""The fixture project the orchestrator's tests drive: folders, catalog, server, CLI runner."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from intelmac_torch_builder import cli
from orch_fixture import make_tarball, sha256, write_catalog, write_tree
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


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in cli.make_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _taken_by(command: str, argv: list[str]) -> list[str]:
    """``argv`` less the options that ``command`` does not take but another command does."""
    commands = _subcommands()
    known = {
        option: action
        for parser in commands.values()
        for option, action in parser._option_string_actions.items()
    }
    taken = commands[command]._option_string_actions
    kept: list[str] = []
    words = iter(argv)
    for word in words:
        action = known.get(word)
        value = [next(words)] if action is not None and action.nargs != 0 else []
        if action is None or word in taken:
            kept += [word, *value]
    return kept


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

    @classmethod
    def served(
        cls,
        root: Path,
        server: FileServer,
        capsys: pytest.CaptureFixture[str],
        files: Mapping[str, str],
        write_patches: Callable[[Path], list[Path]],
        **line: object,
    ) -> Project:
        """The upstream tree ``files`` as a tarball on ``server``, the series ``write_patches``
        writes, and a catalog of that one line (``line``: its other fields, e.g. build_env)."""
        tree = write_tree(root / "upstream" / f"pytorch-v{VERSION}", files)
        tarball = make_tarball(tree, root / f"pytorch-v{VERSION}.tar.gz", f"pytorch-v{VERSION}")
        url = server.serve(tarball.name, tarball)
        catalog_dir = root / "catalog"
        patches = write_patches(catalog_dir / "fixture")
        digest = sha256(tarball)
        entry = {"version": VERSION, "url": url, "sha256": digest, "patches": patches, **line}
        catalog = write_catalog(catalog_dir, [entry])
        return cls(root, server, capsys, catalog, tarball, url, digest, patches)

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
        """The CLI's arguments for ``command`` with the project's catalog, folders and ``args``.

        Like one set of make flags given to every stage, the project's options (and ``args``)
        go to each command only where it takes them: ``patch`` has no ``--cache-dir``. An
        option no command takes still goes through, so a misspelt one fails the test.
        """
        return [command, *_taken_by(command, [
            "--catalog", str(self.catalog),
            "--work-dir", str(self.work),
            "--cache-dir", str(self.cache),
            "--wheels-dir", str(self.wheels),
            "--backoff", "0",
            "--timeout", "5",
            *self.extra,
            *args,
        ])]  # fmt: skip

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
