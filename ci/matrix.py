"""The release matrix, generated from the catalog.

The workflows read this JSON through ``fromJSON``; there is no second list of versions in
YAML. Every entry is derived from ``intelmac_torch_builder.core.catalog``, so a Python version that a
torch line does not support can never appear.

Kinds (one per consumer in the workflows):

* ``build``  - one entry per torch line, for the warm-up jobs: they compile the line's
  Python-independent bulk once, into a compiler cache, in as many time-boxed jobs as it
  takes (``budget.WARMUP_JOBS`` at most).
* ``wheel``  - one entry per (line, Python) pair: build, repair and verify that Python's
  torch wheel from the warm cache.
* ``vision`` - the line's torchvision, in a job of its own after torch: one entry per
  (line, Python) where the official wheels are per Python, else one per line built against
  whichever Python's torch wheel finished (the catalog's ``wheel_tags`` say which).
* ``test``   - one entry per (line, Python) pair: install the wheel, and the companion's
  wheel beside it, into a fresh venv.
* ``verify`` - one entry per line: fetch the catalogued tarball and apply its series.
* ``regress`` - one entry per line, on the self-hosted Intel Mac, newest Python of the line.

On a tag, ``--draft`` narrows them to the (line, Python) pairs the tag's draft release
lacks (ci/draft.py), so that a later run adds only those; ``pending`` says whether any is left.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..core import features, preflight
from ..core.catalog import Catalog, ReleaseLine
from ..core.errors import BuildError
from . import budget, draft
from .tags import versions_for_tag

#: GitHub's x86_64 macOS image (macos-13 was retired in Dec 2025; this one lives to Aug 2027).
BUILD_RUNNER = "macos-15-intel"
#: Labels a self-hosted Intel Mac with a Metal GPU registers with (docs/releasing.md).
GPU_RUNNER_LABELS: tuple[str, ...] = ("self-hosted", "macOS", "X64", "intel-gpu")
#: Xcode for a line whose catalog entry names none; community x86_64 builders use 16.4.
XCODE_VERSION = "16.4"
#: Linux runner for the jobs that need no Mac (patch verification, lint, tests).
LINUX_RUNNER = "ubuntu-24.04"

KINDS: tuple[str, ...] = ("build", "wheel", "vision", "test", "verify", "regress")

def refuse_unpinned(catalog: Catalog, tag: str, versions: Sequence[str]) -> None:
    """A release ships only wheels built from a tarball whose sha256 was pinned in advance.

    Trust-on-first-use is fine for checking that patches apply and for trial builds
    (workflow_dispatch), not for what users install.
    """
    unpinned = []
    for version in versions:
        line = catalog.line(version)
        unpinned += [version] if line.source.sha256 is None else []
        if line.companion is not None and line.companion.source.sha256 is None:
            unpinned.append(f"{version}'s {line.companion.title}")
    if unpinned:
        raise BuildError(
            f"{tag} would release {', '.join(unpinned)}, whose source tarball has no sha256 pin "
            f"in {catalog.path}.\n"
            "Pin it first: compare the hash that verify-patches printed (trust on first use) "
            "with an independent one, e.g. the asset digest GitHub shows for the tarball on "
            "PyTorch's release page, then set source.sha256 and source.pin_origin "
            "(docs/releasing.md, 'Unpinned sources')."
        )


def _listed(text: str | None) -> list[str]:
    """A comma or space separated list; empty for none, '' or 'all'."""
    if not text or text.strip() in ("", "all"):
        return []
    return [part.strip() for part in re.split(r"[,\s]+", text.strip()) if part.strip()]


def _narrow_pythons(line: ReleaseLine, pythons: str | None) -> ReleaseLine:
    """The line with only the Pythons asked for (each must be one the line supports)."""
    wanted = _listed(pythons)
    if not wanted:
        return line
    unknown = [python for python in wanted if python not in line.python]
    if unknown:
        raise BuildError(
            f"PyTorch {line.version} is not built for Python {', '.join(unknown)}; its Pythons "
            f"are {', '.join(line.python)} (patches/catalog.yaml)."
        )
    return dataclasses.replace(line, python=tuple(p for p in line.python if p in wanted))


def refresh_lines(catalog: Catalog) -> tuple[ReleaseLine, ...]:
    """The lines the scheduled refresh keeps warm: as many as the repository's cache holds,
    the default line first, then the newest."""
    order = [catalog.line(catalog.default_version)] + [
        line for line in catalog.lines if line.version != catalog.default_version]
    return tuple(order[:budget.cache_lines_that_fit()])


def select_lines(catalog: Catalog, *, tag: str | None = None, lines: str | None = None,
                 pythons: str | None = None, refresh: bool = False) -> tuple[ReleaseLine, ...]:
    """The catalog's lines, narrowed by a tag or by a comma list ('all' or empty: every line),
    and their Pythons by another ('all' or empty: every one)."""
    if tag and lines and lines.strip() not in ("", "all"):
        raise BuildError("Give either --tag or --lines, not both.")
    if tag and _listed(pythons):
        raise BuildError("A release tag builds every Python of its lines; --pythons is for "
                         "workflow_dispatch runs (the canary).")
    if refresh:
        return refresh_lines(catalog)
    if tag:
        wanted: Sequence[str] = versions_for_tag(catalog, tag).versions
        refuse_unpinned(catalog, tag, wanted)
    else:
        wanted = _listed(lines) or catalog.versions
    return tuple(_narrow_pythons(catalog.line(version), pythons)
                 for version in dict.fromkeys(wanted))


def platform_tag(deployment_target: str) -> str:
    """The wheel platform tag of an x86_64 build for ``deployment_target``: 14.0 -> macosx_14_0_x86_64."""
    major, _, minor = deployment_target.partition(".")
    return f"macosx_{major}_{minor or '0'}_x86_64"


def _line_fields(catalog: Catalog, line: ReleaseLine) -> dict[str, Any]:
    fingerprint = line.series_fingerprint
    return {
        "version": line.version,
        "wheel_version": catalog.wheel_version(line),
        "runner": BUILD_RUNNER,
        "fingerprint": fingerprint,
        # Cache keys are limited to 512 characters; 16 hex digits identify a series well enough.
        "fingerprint_short": fingerprint[:16],
        "deployment_target": line.macos_deployment_target,
        # The wheel must carry it: a bundled library built for a newer macOS (Homebrew's
        # libomp on the runner's macOS) would make delocate raise the tag silently.
        "platform_tag": platform_tag(line.macos_deployment_target),
        "mps_min_macos": line.mps_min_macos,
        # What the torch wheel must carry (ci/wheel_checks.py --expect-features), from the
        # same build_env the build uses.
        "expect_features": features.of(line.build_env, line.title).spec(),
        **_companion_fields(catalog, line),
    }


def _companion_fields(catalog: Catalog, line: ReleaseLine) -> dict[str, Any]:
    """The companion built with the line (empty strings for a line without one)."""
    companion = line.companion
    return {
        "companion": companion.name if companion else "",
        "companion_version": companion.version if companion else "",
        "companion_wheel_version": catalog.wheel_version(companion) if companion else "",
    }


def _all_pinned(line: ReleaseLine) -> bool:
    return line.source.sha256 is not None and (
        line.companion is None or line.companion.source.sha256 is not None
    )


def _fetch_fields(line: ReleaseLine) -> dict[str, Any]:
    pinned = _all_pinned(line)
    return {
        # Only a workflow_dispatch trial build can reach an unpinned line (tags refuse it).
        "pinned": pinned,
        "fetch_args": "" if pinned else "--trust-on-first-use",
        # The catalog's choice within the line's range (the preflight accepts the whole range).
        "xcode": line.xcode.runner if line.xcode is not None else XCODE_VERSION,
        # The artifacts that hand the warm compiler cache from job to job within a run.
        "ccache_artifact": f"ccache-{line.version}",
        "state_artifact": f"warmup-state-{line.version}",
        "ccache_maxsize": budget.ccache_maxsize(),
        # The preflight's free-disk need (docs/releasing.md, "Disk"); the runner's clean-up
        # step frees it.
        "min_free_gib": preflight.min_free_gib(),
    }


def build_entry(catalog: Catalog, line: ReleaseLine) -> dict[str, Any]:
    """A warm-up job: the line's newest Python, torch alone, within the compile time box."""
    return {
        **_line_fields(catalog, line),
        **_fetch_fields(line),
        "python": line.python[-1],
        "compile_minutes": budget.compile_minutes(),
        "logs_artifact": f"logs-warmup-{line.version}",
    }


def wheel_entries(catalog: Catalog, line: ReleaseLine) -> list[dict[str, Any]]:
    """One job per Python: that torch wheel from the warm cache, repaired and verified."""
    return [{**_line_fields(catalog, line), **_fetch_fields(line), "python": python,
             "artifact": f"wheels-{line.version}-{python}",
             # The verify stage's record and wheel, which the torchvision job builds against.
             "record_artifact": f"torch-build-{line.version}-{python}",
             "logs_artifact": f"logs-{line.version}-{python}"}
            for python in line.python]


def _vision_artifact(line: ReleaseLine, python: str) -> str:
    if line.companion is None:
        return ""
    return f"vision-{line.version}-{python}" if line.companion.per_python else f"vision-{line.version}"


def vision_entries(catalog: Catalog, line: ReleaseLine) -> list[dict[str, Any]]:
    """The line's torchvision, after torch: per Python, or once against any finished torch."""
    companion = line.companion
    if companion is None:
        return []
    groups = [(python,) for python in line.python] if companion.per_python else [line.python]
    return [{**_line_fields(catalog, line), **_fetch_fields(line),
             "label": f"Python {pythons[0]}" if len(pythons) == 1 else "py3-none",
             "candidates": " ".join(pythons),
             "python_versions": "\n".join(pythons),
             "torch_pattern": (f"wheels-{line.version}-{pythons[0]}" if len(pythons) == 1
                               else f"wheels-{line.version}-*"),
             "record_pattern": (f"torch-build-{line.version}-{pythons[0]}" if len(pythons) == 1
                                else f"torch-build-{line.version}-*"),
             "artifact": _vision_artifact(line, pythons[0]),
             "logs_artifact": f"logs-vision-{line.version}-{pythons[0] if len(pythons) == 1 else 'all'}"}
            for pythons in groups]


def test_entries(catalog: Catalog, line: ReleaseLine) -> list[dict[str, Any]]:
    return [{**_line_fields(catalog, line), "python": python,
             "artifact": f"wheels-{line.version}-{python}",
             "vision_artifact": _vision_artifact(line, python),
             "tested_artifact": f"tested-{line.version}-{python}"}
            for python in line.python]


def verify_entry(catalog: Catalog, line: ReleaseLine) -> dict[str, Any]:
    pinned = line.source.sha256 is not None
    return {
        "version": line.version,
        "runner": LINUX_RUNNER,
        "fingerprint_short": line.series_fingerprint[:16],
        "pinned": pinned,
        # Unpinned lines can only be fetched with trust-on-first-use; the job says so loudly.
        "fetch_args": "" if pinned else "--trust-on-first-use",
        "patches": len(line.patches),
    }


def regress_entry(catalog: Catalog, line: ReleaseLine) -> dict[str, Any]:
    return {
        **_line_fields(catalog, line),
        "python": line.python[-1],
        "artifact": f"wheels-{line.version}-{line.python[-1]}",
        "vision_artifact": _vision_artifact(line, line.python[-1]),
        "runs_on": list(GPU_RUNNER_LABELS),
    }


def matrix(catalog: Catalog, kind: str, lines: Iterable[ReleaseLine]) -> dict[str, Any]:
    """The ``strategy.matrix`` object of one kind: ``{"include": [...]}``."""
    include: list[dict[str, Any]] = []
    for line in lines:
        if kind == "build":
            include.append(build_entry(catalog, line))
        elif kind == "wheel":
            include.extend(wheel_entries(catalog, line))
        elif kind == "vision":
            include.extend(vision_entries(catalog, line))
        elif kind == "test":
            include.extend(test_entries(catalog, line))
        elif kind == "verify":
            include.append(verify_entry(catalog, line))
        elif kind == "regress":
            include.append(regress_entry(catalog, line))
        else:
            raise BuildError(f"Unknown matrix kind '{kind}'; use one of {', '.join(KINDS)}.")
    if not include and kind != "vision":
        # GitHub rejects an empty matrix with an unhelpful message; say it here instead.
        raise BuildError("The selection matches no release line; nothing to build.")
    return {"include": include}


def read_draft(path: Path | None) -> list[str]:
    """The asset names ``ci.draft assets`` wrote (no file: no draft, as off a tag)."""
    if path is None or not path.is_file():
        return []
    try:
        return list(json.loads(path.read_text())["assets"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise BuildError(f"{path} is not what ci.draft assets writes ({exc}).") from None


def pending_lines(catalog: Catalog, lines: Sequence[ReleaseLine], tag: str,
                  assets: Sequence[str]) -> tuple[ReleaseLine, ...]:
    """The lines narrowed to the Pythons whose wheels the tag's draft lacks (lines with none
    dropped)."""
    left = draft.pending_pairs(catalog, tag, assets)
    narrowed = []
    for line in lines:
        pythons = tuple(python for python in line.python if (line.version, python) in left)
        if pythons:
            narrowed.append(dataclasses.replace(line, python=pythons))
    return tuple(narrowed)


def all_matrices(catalog: Catalog, lines: Sequence[ReleaseLine], tag: str | None = None,
                 assets: Sequence[str] = ()) -> dict[str, Any]:
    """Every kind at once, plus the selected versions, for one job output per kind; with the
    tag's draft's ``assets``, only the pairs it lacks, and ``pending`` false when it lacks none."""
    left = pending_lines(catalog, lines, tag, assets) if tag and assets else tuple(lines)
    result: dict[str, Any] = ({kind: matrix(catalog, kind, left) for kind in KINDS} if left
                              else {kind: {"include": []} for kind in KINDS})
    result["versions"] = [line.version for line in lines]
    result["pending"] = bool(left)
    return result
