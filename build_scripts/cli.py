"""The one command-line entry point: ``python -m intelmac_torch_builder <stage> ...``.

Each stage module contributes its own subcommand through ``register(subparsers)``, which
adds a parser and sets ``func`` on it. ``func(args)`` returns the exit code.
A ``BuildError`` is printed as the user-facing message it is, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .core.errors import BuildError, UnsupportedHostError

# In pipeline order; each module defines register(subparsers).
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "intelmac_torch_builder.stages.source",
    "intelmac_torch_builder.stages.patch",
    "intelmac_torch_builder.stages.build",
    "intelmac_torch_builder.stages.repair",
    "intelmac_torch_builder.stages.verify",
    "intelmac_torch_builder.stages.index",
    "intelmac_torch_builder.pipeline",
    "intelmac_torch_builder.maint.upstream_check",
    "intelmac_torch_builder.ci.cli",
)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m intelmac_torch_builder",
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
        # "Patched; finish on a Mac" is an expected stop, not a failure.
        label = "stopped" if isinstance(exc, UnsupportedHostError) else "error"
        print(f"{label}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code
