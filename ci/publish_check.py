"""Before hours of building: can this tag's run publish at all?

The ``matrix`` job runs this on a tag push, so a repository that is not set up for
publishing fails in the first minutes, with the fix, instead of after the build:

* GitHub Pages must be enabled with "GitHub Actions" as its source (``build_type``
  ``workflow``), or ``pages`` cannot deploy;
* the ``github-pages`` environment must let this tag deploy: its deployment policy must
  be off (any ref), or list a tag pattern that matches it. Protected branches only, the
  default, refuses every tag;
* no published release of the tag may hold every wheel already: its assets are never
  replaced, since installs pinned to their hashes would break; the fix is the next build
  number. One a maintainer published without some Pythons on purpose takes them from a
  later run, under new names (``ci/draft.py``, ``refusal``).

The judgements are pure functions of the REST API's JSON (tested here); ``main`` asks
``gh api`` for it.

    python -m intelmac_torch_builder.ci.publish_check --tag v2.14.1-1
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..core import catalog as catalog_module
from ..core.errors import BuildError
from . import draft, matrix
from ._gh import Unreadable, gh_json

ENVIRONMENT = "github-pages"
SETTINGS = "Settings → Environments → github-pages → Deployment branches and tags"


def pages_problem(pages: Mapping[str, Any] | None) -> str | None:
    """``GET /repos/{repo}/pages`` (None: 404, Pages is off)."""
    if pages is None:
        return ("GitHub Pages is not enabled. Settings → Pages → Build and deployment → "
                "Source: GitHub Actions.")
    if pages.get("build_type") != "workflow":
        return (f"GitHub Pages deploys from a branch (build_type {pages.get('build_type')!r}), "
                "so the pages job's deployment would be refused. Settings → Pages → Build and "
                "deployment → Source: GitHub Actions.")
    return None


def environment_problem(environment: Mapping[str, Any] | None,
                        policies: Sequence[Mapping[str, Any]], tag: str) -> str | None:
    """``GET .../environments/github-pages`` and its ``deployment-branch-policies``."""
    if environment is None:
        # GitHub creates it on the first deployment, with no policy: any ref may deploy.
        return None
    policy = environment.get("deployment_branch_policy")
    if not policy:
        return None
    if policy.get("protected_branches"):
        return (f"The {ENVIRONMENT} environment allows protected branches only, so a tag "
                f"cannot deploy the index. {SETTINGS}: choose 'Selected branches and tags' "
                "and add the tag patterns v* and release-*.")
    patterns = [str(rule.get("name", "")) for rule in policies if rule.get("type") == "tag"]
    if any(fnmatch.fnmatchcase(tag, pattern) for pattern in patterns):
        return None
    shown = ", ".join(patterns) or "none"
    return (f"The {ENVIRONMENT} environment's tag rules ({shown}) do not match {tag}, so "
            f"the pages job would be refused. {SETTINGS}: add the tag patterns v* and "
            "release-*.")


def release_problem(tag: str) -> str | None:
    """A published release that can take nothing more (a draft, or none, is finished)."""
    return draft.refusal(catalog_module.load(), tag, draft.read_release("{owner}/{repo}", tag))


def _environment(tag: str) -> str | None:
    base = f"repos/{{owner}}/{{repo}}/environments/{ENVIRONMENT}"
    policies = gh_json("api", f"{base}/deployment-branch-policies") or {}
    return environment_problem(gh_json("api", base), policies.get("branch_policies", []), tag)


def problems(tag: str) -> tuple[list[str], list[str]]:
    """(what stops publishing, what could not be read and needs a look by hand)."""
    checks = {
        "GitHub Pages": lambda: pages_problem(gh_json("api", "repos/{owner}/{repo}/pages")),
        f"the {ENVIRONMENT} environment": lambda: _environment(tag),
        f"release {tag}": lambda: release_problem(tag),
    }
    found, unread = [], []
    for what, check in checks.items():
        try:
            problem = check()
        except Unreadable as exc:
            # A token that may not read a setting is no reason to stop a release.
            unread.append(f"{what} could not be read ({exc}); check it by hand "
                          "(docs/releasing.md, 'One-time repository setup').")
            continue
        if problem:
            found.append(problem)
    return found, unread


def cold_lines(versions: Sequence[str], keys: Sequence[str]) -> list[str]:
    """Of the lines ``versions``, those with no compiler-cache entry on the default branch
    (``keys``: that branch's entries), whose warm-up therefore starts cold."""
    return [version for version in versions
            if not any(key.startswith(f"ccache-{version}-") for key in keys)]


def cold_message(catalog: catalog_module.Catalog, version: str) -> str:
    """Why a line has no entry, and what that costs."""
    refreshed = [line.version for line in matrix.refresh_lines(catalog)]
    why = (f"the scheduled refresh keeps {', '.join(refreshed)} warm, and has not saved one: "
           "GitHub disables a scheduled workflow after 60 days without repository activity "
           "(Actions → release → Enable workflow), and evicts an entry unused for 7 days"
           if version in refreshed else
           f"the repository's 10 GB of cache holds only the refreshed lines "
           f"({', '.join(refreshed)})")
    return (f"No compiler cache for {version} on the default branch ({why}). The warm-up "
            "starts cold: more warm-up jobs, and maybe a press of 'Re-run failed jobs' "
            "(docs/releasing.md, 'Compiler cache').")


def _default_branch_cache_keys() -> list[str]:
    """The keys of the default branch's actions-cache entries (needs actions: read)."""
    branch = (gh_json("api", "repos/{owner}/{repo}") or {}).get("default_branch") or "main"
    found = gh_json("api", "repos/{owner}/{repo}/actions/caches?ref=refs/heads/"
                    f"{branch}&per_page=100") or {}
    return [str(entry.get("key", "")) for entry in found.get("actions_caches", [])]


def _warn_cold(lines: str) -> None:
    """Warn, never fail: a cold line only takes longer."""
    try:
        catalog = catalog_module.load()
        versions = [line.version for line in matrix.select_lines(catalog, lines=lines or "all")]
        cold = cold_lines(versions, _default_branch_cache_keys())
    except BuildError as exc:
        print(f"::warning title=Not checked::the default branch's compiler caches could not "
              f"be listed ({exc}).")
        return
    for version in cold:
        print(f"::warning title=Cold compiler cache::{cold_message(catalog, version)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.ci.publish_check",
                                     description="Check that a tag's run can publish.")
    parser.add_argument("--tag")
    parser.add_argument("--cold", metavar="LINES",
                        help="instead: warn for each of these lines (comma-separated, or 'all') "
                        "that has no compiler-cache entry on the default branch")
    args = parser.parse_args(argv)
    if args.cold is not None:
        _warn_cold(args.cold)
        return 0
    if not args.tag:
        parser.error("give --tag, or --cold LINES")
    try:
        found, unread = problems(args.tag)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for note in unread:
        print(f"::warning title=Not checked::{note}")
    for problem in found:
        print(f"::error title=Cannot publish {args.tag}::{problem}")
    if not found:
        print(f"{args.tag}: Pages, the {ENVIRONMENT} environment and the release are ready")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
