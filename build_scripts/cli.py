"""The one command-line entry point: ``python -m build_scripts <stage> ...``.

Each stage module contributes its own subcommand through ``register(subparsers)``, which
adds a parser and sets ``func`` on it. ``func(args)`` returns the exit code.
A ``BuildError`` is printed as the user-facing message it is, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .errors import BuildError

# In pipeline order; each module defines register(subparsers).
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "build_scripts.source",
    "build_scripts.patch_stage",
    "build_scripts.build",
    "build_scripts.repair",
    "build_scripts.verify",
    "build_scripts.index",
    "build_scripts.pipeline",
    "build_scripts.upstream_check",
    "ci.cli",
)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m build_scripts",
        description="Build patched PyTorch wheels with MPS on Intel Macs: "
        "source -> patches -> build -> repair/verify -> wheels index.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code
