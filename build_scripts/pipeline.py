"""``all``: every stage in order, what ``make build`` runs.

    source -> patches -> build -> repair/verify -> wheels index

then the same stages again for the line's companion (torchvision), built against the torch
wheel just verified and indexed beside it (``--torch-only`` skips it).

A target whose verified wheels are already in the index with matching build information
returns at once, before any lock, download or hashing of the source. On a host that cannot
compile, the run fetches and patches, then stops with exit code 3 and says what is left.
"""

from __future__ import annotations

import argparse
import time

from .core import _fsutil
from .core import host as host_mod
from .core._log import Log, elapsed
from .core._plan import render
from .core._stage import line_lock
from .core.errors import BuildError, LockBusyError, UnsupportedHostError
from .core.options import ALL_GROUPS, Options, add_arguments, resolve
from .stages import build as build_stage
from .stages import index as index_stage
from .stages import patch as patch_stage
from .stages import repair, source, verify


def targets(options: Options) -> list[Options]:
    """What ``all`` builds, in order: torch, then its companion unless --torch-only."""
    if options.companion_of is not None:  # --companion: that one alone
        return [options]
    companion = options.companion() if options.build_companions else None
    return [options] + ([companion] if companion is not None else [])


def dry_run(options: Options) -> str:
    host = host_mod.probe()
    out = []
    for target in targets(options):
        header = f"#### {target.line.title} -> {target.line.name}=={target.wheel_version}"
        if target.companion_of is not None:
            header += f" (companion, built against torch=={target.companion_of.wheel_version})"
        out.append(header + "\n")
        out.append(
            render(
                [
                    source.plan(target),
                    patch_stage.plan(target),
                    build_stage.plan(target, host),
                    repair.plan(target),
                    verify.plan(target),
                    index_stage.plan(target),
                ]
            )
        )
    return "\n".join(out)


def _build_one(options: Options, log: Log) -> bool:
    """Every stage for one target; False when it was already up to date."""
    pin = source.resolve_source(options).expected_sha256
    done = index_stage.up_to_date(options, pin)
    if done is not None:
        names = ", ".join(wheel.name for wheel in done)
        log.info(
            f"Up to date: {names} already verified in {options.wheels_dir / 'simple'}; nothing to do."
        )
        return False
    host = host_mod.probe()
    with line_lock(options, log):
        source.fetch(options, log)
        patch_stage.patch(options, log)
        build_stage.build(options, log, host, repatch=patch_stage.patch)
        repair.repair(options, log, host)
        verify.verify(options, log)
        index_stage.index(options, log)
    return True


def run_all(options: Options, log: Log) -> int:
    started = time.monotonic()
    built = [target for target in targets(options) if _build_one(target, log)]
    if not built:
        return 0
    log.step(f"done in {elapsed(time.monotonic() - started)}")
    for target in built:
        log.info(
            f"{target.line.name} {target.wheel_version} for "
            + ", ".join(python.tag for python in target.pythons)
            + f" is in {target.wheels_dir / 'simple'}"
        )
    return 0


OUTCOME = "outcome.json"


def _main(args: argparse.Namespace) -> int:
    options = resolve(args)
    if options.dry_run:
        print(dry_run(options))
        return 0
    # `make build` can only exit 0 or 2 (GNU make's own codes), so the outcome is also left
    # where a script finds it: built, needs-mac (patched; the compile needs a Mac) or error.
    outcome = options.layout.root / OUTCOME
    try:
        code = run_all(options, Log.create())
    except LockBusyError:
        raise  # the record is the lock holder's, and it is still running
    except BuildError as exc:
        kind = "needs-mac" if isinstance(exc, UnsupportedHostError) else "error"
        _fsutil.write_json_atomic(outcome, {"outcome": kind, "exit_code": exc.exit_code})
        raise
    _fsutil.write_json_atomic(outcome, {"outcome": "built", "exit_code": code})
    return code


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The stage subcommands in pipeline order, then ``all``.

    Registered here, the one module that knows every stage, so that the build stage can
    re-apply a changed series through the patch stage without importing it.
    """
    source.register(subparsers)
    patch_stage.register(subparsers)
    build_stage.register(subparsers, repatch=patch_stage.patch)
    repair.register(subparsers)
    verify.register(subparsers)
    index_stage.register(subparsers)
    parser = subparsers.add_parser(
        "all",
        help="every stage in order: fetch, patch, build, repair, verify, index (make build)",
        description="Run every stage in order: fetch, patch, build, repair, verify, index. "
        "This is what make build runs. A target already built, verified and indexed is a no-op.",
    )
    add_arguments(parser, ALL_GROUPS)
    parser.set_defaults(func=_main)
