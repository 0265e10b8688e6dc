"""What every stage subcommand shares: its options, --dry-run and the line's lock.

A stage module provides ``plan(options) -> Section`` and ``run(options, log)``;
``register`` turns them into a subcommand that prints the plan for ``--dry-run`` and
otherwise runs the stage while holding the release line's lock.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..core._locks import held
from ..core._log import Log
from ..core._plan import Section, render
from ..core.options import OptionGroup, Options, add_arguments, resolve
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
    groups: tuple[OptionGroup, ...] = (),
) -> None:
    """Add stage subcommand ``name``; it takes the options every stage takes, and ``groups``."""
    def main(args: argparse.Namespace) -> int:
        options = resolve(args)
        if options.dry_run:
            print(render([plan(options)]))
            return 0
        log = Log.create()
        with line_lock(options, log):
            run(options, log)
        return 0

    parser = subparsers.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
    add_arguments(parser, groups)
    parser.set_defaults(func=main)

