"""``all``: every stage in order, what ``make build`` runs.

    source -> patches -> build -> repair/verify -> wheels index

A target whose verified wheels are already in the index with matching build information
returns at once, before any lock, download or hashing of the source. On a host that cannot
compile, the run fetches and patches, then stops with exit code 2 and says what is left.
"""

from __future__ import annotations

import argparse
import time

from .core import host as host_mod
from .core._log import Log, elapsed
from .core._plan import render
from .core._stage import line_lock
from .core.options import ALL_GROUPS, DIST_NAME, Options, add_arguments, resolve
from .stages import build as build_stage
from .stages import index as index_stage
from .stages import patch as patch_stage
from .stages import repair, source, verify


def dry_run(options: Options) -> str:
    host = host_mod.probe()
    return render(
        [
            source.plan(options),
            patch_stage.plan(options),
            build_stage.plan(options, host),
            repair.plan(options),
            verify.plan(options),
            index_stage.plan(options),
        ]
    )


def run_all(options: Options, log: Log) -> int:
    started = time.monotonic()
    pin = source.resolve_source(options).expected_sha256
    done = index_stage.up_to_date(options, pin)
    if done is not None:
        names = ", ".join(wheel.name for wheel in done)
        log.info(
            f"Up to date: {names} already verified in {options.wheels_dir / 'simple'}; nothing to do."
        )
        return 0
    host = host_mod.probe()
    with line_lock(options, log):
        source.fetch(options, log)
        patch_stage.patch(options, log)
        build_stage.build(options, log, host)
        repair.repair(options, log, host)
        verify.verify(options, log)
        index_stage.index(options, log)
    log.step(f"done in {elapsed(time.monotonic() - started)}")
    log.info(
        f"{DIST_NAME} {options.wheel_version} for "
        + ", ".join(python.tag for python in options.pythons)
        + f" is in {options.wheels_dir / 'simple'}"
    )
    return 0


def _main(args: argparse.Namespace) -> int:
    options = resolve(args)
    if options.dry_run:
        print(dry_run(options))
        return 0
    return run_all(options, Log.create())


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "all",
        help="every stage in order: fetch, patch, build, repair, verify, index (make build)",
        description="Run every stage in order: fetch, patch, build, repair, verify, index. "
        "This is what make build runs. A target already built, verified and indexed is a no-op.",
    )
    add_arguments(parser, ALL_GROUPS)
    parser.set_defaults(func=_main)
