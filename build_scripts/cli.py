"""The one command-line entry point: ``intelmac-torch <command> ...``.

Each stage module contributes its own subcommand through ``register(subparsers)``, which
adds a parser with only the options that stage reads and sets ``func`` on it.
``func(args)`` returns the exit code. A ``BuildError`` is printed as the user-facing
message it is, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from . import __version__
from .core.errors import BuildError, UnsupportedHostError

#: The name usage lines give when the package runs as ``python -m intelmac_torch_builder``.
MODULE_PROG = "python -m intelmac_torch_builder"

# Each module defines register(subparsers); pipeline adds the stages in order, then `all`.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "intelmac_torch_builder.pipeline",
    "intelmac_torch_builder.maint.check_upstream",
    "intelmac_torch_builder.maint.rehearse",
    "intelmac_torch_builder.ci.cli",
    "intelmac_torch_builder.core.native_deps",
)

#: The module that registers each command. A run imports that module alone (importing them
#: all is most of a no-op `make build`'s time); a command not listed, or no command (--help),
#: gets them all. tests/core/test_cli.py checks this against what each module registers.
COMMAND_MODULES: dict[str, str] = {
    **dict.fromkeys(
        ("fetch", "patch", "build", "repair", "verify", "index", "all"), SUBCOMMAND_MODULES[0]
    ),
    "check-upstream": SUBCOMMAND_MODULES[1],
    "rehearse": SUBCOMMAND_MODULES[2],
    **dict.fromkeys(("matrix", "ci-plan"), SUBCOMMAND_MODULES[3]),
    "native": SUBCOMMAND_MODULES[4],
}


class _Parser(argparse.ArgumentParser):
    """Says where the release line option went when an old ``--version X.Y.Z`` comes in."""

    def error(self, message: str) -> NoReturn:
        if "unrecognized arguments: --version" in message:
            message += (
                "\n--version prints this tool's version; choose the release line with "
                "--torch X.Y.Z (make build takes VERSION=X.Y.Z)"
            )
        super().error(message)


def make_parser(prog: str | None = None, command: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``prog`` is what usage lines call the program (default: argv[0]'s name).
    With a known ``command``, only the module that registers it is imported (COMMAND_MODULES)."""
    parser = _Parser(
        prog=prog or Path(sys.argv[0]).name,
        description="Build patched PyTorch wheels with MPS on Intel Macs: "
        "source -> patches -> build -> repair/verify -> wheels index.",
        epilog="Run '%(prog)s COMMAND --help' for a command's own options.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}",
        help="print this tool's version and exit",
    )  # fmt: skip
    subparsers = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    modules = (COMMAND_MODULES[command],) if command in COMMAND_MODULES else SUBCOMMAND_MODULES
    for name in modules:
        importlib.import_module(name).register(subparsers)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parse_args``, except that an unknown option after a command gets that command's
    usage: argparse's own message shows the top-level usage, which lists no option at all."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        action.choices[args.command].error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word, unless that is an option (--help, --version)."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    args = _parse(make_parser(prog, _command(sys.argv[1:] if argv is None else argv)), argv)
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
