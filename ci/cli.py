"""The ``matrix`` and ``ci-plan`` subcommands of ``python -m intelmac_torch_builder``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..core import catalog as catalog_module
from ..core.errors import BuildError
from . import _args
from . import matrix as matrix_module
from . import plan as plan_module


def _load(args: argparse.Namespace) -> catalog_module.Catalog:
    return catalog_module.load(Path(args.catalog) if args.catalog else None)


def run_matrix(args: argparse.Namespace) -> int:
    catalog = _load(args)
    lines = matrix_module.select_lines(catalog, tag=args.tag or None, lines=args.lines,
                                       pythons=args.pythons, refresh=args.event == "schedule")
    if args.kind == "all":
        document: dict[str, Any] = matrix_module.all_matrices(
            catalog, lines, args.tag or None, matrix_module.read_draft(args.draft))
    else:
        document = matrix_module.matrix(catalog, args.kind, lines)
    if args.github_output:
        _write_github_output(document if args.kind == "all" else {args.kind: document})
    indent = None if args.compact else 2
    print(json.dumps(document, indent=indent, sort_keys=True))
    return 0


def _write_github_output(outputs: dict[str, Any]) -> None:
    """Append ``name=<compact json>`` lines to $GITHUB_OUTPUT, one job output per kind."""
    target = os.environ.get("GITHUB_OUTPUT")
    if not target:
        raise SystemExit("error: --github-output needs $GITHUB_OUTPUT (set by GitHub Actions)")
    with open(target, "a", encoding="utf-8") as handle:
        # Compact JSON has no newlines, so the simple name=value form is safe.
        handle.writelines(
            f"{name}={json.dumps(value, separators=(',', ':'), sort_keys=True)}\n"
            for name, value in outputs.items()
        )


def run_plan(args: argparse.Namespace) -> int:
    catalog = _load(args)
    workflow = Path(args.workflow) if args.workflow else plan_module.RELEASE_WORKFLOW
    variables: dict[str, str] = {}
    for item in args.var:
        name, separator, value = item.partition("=")
        if not separator:
            raise BuildError(f"--var needs NAME=VALUE, got '{item}'")
        variables[name] = value
    plan = plan_module.make_plan(workflow, catalog, tag=args.tag or None, lines=args.lines,
                                 pythons=args.pythons, repository=args.repo,
                                 variables=variables, event=args.event or None)
    text = plan_module.render(plan)
    sys.stdout.write(text)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = _args.selection_arguments()
    parser = subparsers.add_parser(
        "matrix", parents=[common],
        help="print the release CI matrix (JSON) generated from the catalog",
        description="Print the GitHub Actions matrix generated from the release catalog. "
        "The workflows read it with fromJSON; there is no other list of versions.",
    )
    _args.add_matrix_arguments(parser)
    parser.set_defaults(func=run_matrix)

    plan = subparsers.add_parser(
        "ci-plan", parents=[common],
        help="print the release workflow's job graph and each job's commands",
        description="Read .github/workflows/release.yml, expand its matrices from the catalog "
        "and print every job with the exact commands it runs for a tag.",
    )
    plan.add_argument("--workflow", metavar="PATH",
                      help="workflow file to read (default: .github/workflows/release.yml)")
    plan.add_argument("--repo", metavar="OWNER/NAME", default=plan_module.DEFAULT_REPOSITORY,
                      help="repository name to show in URLs (default: OWNER/REPO)")
    plan.add_argument("--var", metavar="NAME=VALUE", action="append", default=[],
                      help="a repository variable, e.g. HAS_INTEL_GPU_RUNNER=true; repeat for several")
    plan.set_defaults(func=run_plan)
