"""What every stage subcommand shares: --dry-run, the line's lock and the stage records.

A stage module provides ``plan(options) -> Section`` and ``run(options, log)``;
``register`` turns them into a subcommand that prints the plan for ``--dry-run`` and
otherwise runs the stage while holding the release line's lock.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..core._locks import held
from ..core._log import Log
from ..core._plan import Section, render
from ..core.errors import BuildError
from ..core.options import Options, PythonTarget, add_common_arguments, resolve
from . import _fsutil


@contextmanager
def line_lock(options: Options, log: Log) -> Iterator[None]:
    """Hold the release line's lock; first, clear what killed runs of the line left behind.

    A run killed mid-extraction or mid-patching (SIGKILL, a power cut) cannot clean up its
    temporary tree (``.source.*.tmp``, ``.patched.*.tmp``, tens of MB to a GB each). Under
    the lock no other run of the line is using them, so they go.
    """
    with held(
        options.layout.lock_file, what=f"PyTorch {options.line.version}", wait=options.wait, log=log
    ):
        removed = _fsutil.remove_leftovers(options.layout.root)
        if removed:
            total = sum(size for _, size in removed) / 2**20
            names = ", ".join(path.name for path, _ in removed)
            log.warning(
                f"Removed {len(removed)} temporary item(s) left by an interrupted run of PyTorch "
                f"{options.line.version} in {options.layout.root} ({total:.1f} MiB): {names}"
            )
        yield


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help: str,
    plan: Callable[[Options], Section],
    run: Callable[[Options, Log], object],
) -> None:
    def main(args: argparse.Namespace) -> int:
        options = resolve(args)
        if options.dry_run:
            print(render([plan(options)]))
            return 0
        log = Log.create()
        with line_lock(options, log):
            run(options, log)
        return 0

    parser = subparsers.add_parser(name, help=help)
    add_common_arguments(parser)
    parser.set_defaults(func=main)


def read_record(
    options: Options, python: PythonTarget, filename: str, *, stage: str, what: str
) -> dict[str, Any]:
    """A stage's record for ``python`` whose wheel still exists, or a message naming the stage to run."""
    path = options.layout.dist(python) / filename
    data = _fsutil.read_json(path)
    if not isinstance(data, dict) or not Path(str(data.get("wheel"))).is_file():
        raise BuildError(
            f"No {what} wheel for {python.tag} in {path.parent}: run the {stage} stage first "
            f"(python -m intelmac_torch_builder {stage} --version {options.line.version})."
        )
    return data
