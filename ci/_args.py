"""The options of ``matrix``, shared by its subcommand and by ``ci-plan``.

``ci-plan`` parses the ``matrix`` command lines it finds in the release workflow with the
same parser the subcommand uses, so a workflow step the CLI would reject fails the plan too.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import matrix as matrix_module


def selection_arguments() -> argparse.ArgumentParser:
    """--catalog, --tag and --lines: which release lines a matrix or a plan covers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--catalog", metavar="PATH",
                        help="release catalog to read (default: patches/catalog.yaml)")
    common.add_argument("--tag", metavar="TAG",
                        help="release tag: v<line>-<build> (one line) or release-YYYYMMDD (all)")
    common.add_argument("--lines", metavar="LIST", default=None,
                        help="comma-separated torch lines, or 'all' (as the workflow_dispatch "
                        "input gives them)")
    common.add_argument("--pythons", metavar="LIST", default=None,
                        help="comma-separated Pythons to build of each selected line, or 'all' "
                        "(one line and one Python: the canary)")
    common.add_argument("--event", metavar="NAME", default="",
                        help="the GitHub event (github.event_name); 'schedule' is the compiler "
                        "cache refresh: the lines whose cache fits the repository's, default "
                        "line first")
    return common


def add_matrix_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", choices=(*matrix_module.KINDS, "all"), default="build",
                        help="which job's matrix (default: build); 'all' prints every kind")
    parser.add_argument("--compact", action="store_true", help="print the JSON on one line")
    parser.add_argument("--draft", metavar="PATH", type=Path, default=None,
                        help="what the tag's draft release holds (ci.draft assets); only the "
                        "(line, Python) pairs it lacks are built. No such file: no draft")
    parser.add_argument("--github-output", action="store_true",
                        help="also write each kind as a job output to $GITHUB_OUTPUT")


def matrix_parser(prog: str) -> argparse.ArgumentParser:
    """A parser of the ``matrix`` subcommand's own arguments (what follows ``matrix``)."""
    parser = argparse.ArgumentParser(prog=f"{prog} matrix", parents=[selection_arguments()])
    add_matrix_arguments(parser)
    return parser
