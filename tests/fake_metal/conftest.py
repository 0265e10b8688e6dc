"""Session fixtures: the stand-in Metal and each line's library, compiled once per session.

Without what the stand-in needs (build.missing()), every test here is skipped with a line
that says how to get it; under CI=true that is a failure instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from intelmac_torch_builder.core import catalog, patching

from .. import shared_run
from ..patches_cpp import objc_lines
from . import build

REPO = Path(__file__).resolve().parents[2]
LINES = [line.version for line in catalog.load().lines]
#: What each line's build did in this run, for the summary tests/conftest.py prints.
OUTCOMES = shared_run.summary("Objective-C++ run against the stand-in Metal (tests/fake_metal)")


def require_toolchain() -> None:
    lacking = build.missing()
    if lacking:
        why = f"the stand-in Metal needs {', '.join(lacking)}: {build.HOW_TO_GET}"
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true: " + why)
        pytest.skip(why)


@pytest.fixture(scope="session")
def fake_metal_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_toolchain()
    return Path(shared_run.build_once(tmp_path_factory, "fake-metal",
                                      lambda work: str(build.fake_metal_library(work))))


def torch_lib_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        why = "the test torch is not installed (make test installs it; see the Makefile's TEST_TORCH)"
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true: " + why)
        pytest.skip(why)
    return Path(spec.origin).parent / "lib"


def _python_layer(line: str, series: Sequence[Path], dest: Path) -> Path:
    """The line's own torch/backends/mps (from its wheel) with the series' Python hunks applied."""
    from intelmac_torch_builder.maint.check_upstream.series import filter_series, is_python_layer

    wheel = objc_lines.wheel_root(line)
    root = dest / "layer"
    only = filter_series(series, lambda path: path.startswith("torch/backends/mps/") and is_python_layer(path),
                         dest / "python-patches")
    for patch in only:
        for change in patching.file_changes(patch):
            if not change.is_new:
                target = root / change.path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text((wheel / change.path).read_text(encoding="utf-8"), encoding="utf-8")
    patching.apply_series(root, only)
    return root / "torch" / "backends" / "mps"


#: Upstream Python files (exact in every wheel) that the series hooks outside torch/backends/mps.
UPSTREAM_PYTHON = ("torch/utils/data/dataloader.py", "torch/mps/streams.py",
                   # the whole package: its __init__.py (hooked on 2.15.0) imports its siblings
                   *(f"torch/accelerator/{name}.py" for name in ("__init__", "_utils", "graphs", "memory", "random")))


def _upstream_python(line: str, series: Sequence[Path], dest: Path) -> Path:
    """The line's own UPSTREAM_PYTHON files that its wheel has, from the wheel, with the
    series' hunks on them applied (patch 0012 where the line has it)."""
    from intelmac_torch_builder.maint.check_upstream.series import filter_series

    wheel = objc_lines.wheel_root(line)
    present = [path for path in UPSTREAM_PYTHON if (wheel / path).is_file()]
    root = dest / "upstream"
    for path in present:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text((wheel / path).read_text(encoding="utf-8"), encoding="utf-8")
    patching.apply_series(root, filter_series(series, lambda path: path in present, dest / "upstream-patches"))
    return root


@dataclass(frozen=True)
class Line:
    line: str
    build: build.LineBuild
    build_json: Path
    python_layer: Path

    def run(self, scenarios: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each scenario in its own forked process (runner.py); results by id."""
        text = "".join(json.dumps(s) + "\n" for s in scenarios)
        done = subprocess.run([sys.executable, "-m", "tests.fake_metal.runner", str(self.build_json)],
                              input=text, capture_output=True, text=True, cwd=REPO, timeout=1800, check=False)
        assert done.returncode == 0, f"{self.line}: runner failed\n{done.stderr[-6000:]}"
        results = [json.loads(raw) for raw in done.stdout.splitlines() if raw.startswith("{")]
        return {r["id"]: r for r in results}


def line_build(line: str, fake_lib: Path, factory: pytest.TempPathFactory,
               selection_source: Path | None = None, label: str = "") -> Line:
    """The line's library (build.py), compiled once per run and label (shared_run.build_once)."""
    require_toolchain()
    if not objc_lines.has_wheel(line):
        why = f"no unpacked upstream {line} wheel: make upstream-material fetches it"
        if os.environ.get(objc_lines.REQUIRE_ENV) == "1":
            pytest.fail(why)
        OUTCOMES.setdefault(line, "skipped: " + why)
        pytest.skip(why)
    made = shared_run.build_once(factory, f"line-{line}{label}",
                                 lambda work: _build_line(line, fake_lib, work, selection_source))
    lb = build.LineBuild(line, Path(made["library"]), made["headers"], Path(made["device_source"]),
                         made["has_core_count"])
    if not label:
        OUTCOMES[line] = f"ran against the stand-in Metal (headers: {lb.headers})"
    return Line(line, lb, Path(made["build_json"]), Path(made["python_layer"]))


def _build_line(line: str, fake_lib: Path, work: Path, selection_source: Path | None) -> dict[str, Any]:
    """line_build's compile, in ``work``; what it made, as JSON for the other workers."""
    series = list(catalog.load().line(line).patches)
    lt = objc_lines.prepare(line, series, work / "prep")
    exact_260 = exact_device_source()
    if line == "2.6.0":
        device_text = build.rewrite_subscripting(patched_260_device(series, work / "device"))
    else:
        patch = next(p for p in series if any(c.path == "aten/src/ATen/mps/MPSDevice.mm"
                                              for c in patching.file_changes(p)))
        device_text = build.device_source(line, patch.read_text(encoding="utf-8"), exact_260)
    abi_include = objc_lines.wheel_root(build.ABI_LINE) / "torch" / "include"
    lb = build.line_library(line, lt.tree, lt.wheel_include, abi_include, objc_lines.cxx_standard(line),
                            device_text, fake_lib, torch_lib_dir(), work / "build",
                            selection_source=selection_source)
    layer = _python_layer(line, series, work / "python")
    upstream = _upstream_python(line, series, work / "python")
    build_json = work / "build.json"
    build_json.write_text(json.dumps({"library": str(lb.library), "fake_metal": str(fake_lib),
                                      "python_layer": str(layer), "upstream_python": str(upstream)}),
                          encoding="utf-8")
    return {"library": str(lb.library), "headers": lb.headers, "device_source": str(lb.device_source),
            "has_core_count": lb.has_core_count, "build_json": str(build_json), "python_layer": str(layer)}


def exact_260_file(path: str) -> str:
    """A file of 2.6.0's real source tree, from the upstream cache the other tests read."""
    source = objc_lines.UPSTREAM_CACHE / "pytorch-v2.6.0" / path
    if not source.is_file():
        why = "no upstream 2.6.0 source tree: make upstream-material fetches it"
        if os.environ.get(objc_lines.REQUIRE_ENV) == "1":
            pytest.fail(why)
        pytest.skip(why)
    return source.read_text(encoding="utf-8")


def exact_device_source() -> str:
    """2.6.0's MPSDevice.mm from the real source tree."""
    return exact_260_file("aten/src/ATen/mps/MPSDevice.mm")


def patched_260_file(path: str, series: Sequence[Path], work: Path) -> str:
    """2.6.0's exact file at `path` with the series' hunks on it applied."""
    return patched_text(path, exact_260_file(path), series, work)


def patched_text(path: str, text: str, series: Sequence[Path], work: Path) -> str:
    """`text`, as the file at `path`, with the series' hunks on that file applied."""
    from intelmac_torch_builder.maint.check_upstream.series import filter_series

    target = work / "tree" / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    patching.apply_series(work / "tree", filter_series(series, lambda p: p == path, work / "patches"))
    return target.read_text(encoding="utf-8")


def patched_260_device(series: Sequence[Path], work: Path) -> str:
    """2.6.0's exact MPSDevice.mm with the series' hunks on it applied."""
    return patched_260_file("aten/src/ATen/mps/MPSDevice.mm", series, work)


@pytest.fixture(scope="session", params=LINES)
def line(request: pytest.FixtureRequest, fake_metal_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Line:
    return line_build(request.param, fake_metal_lib, tmp_path_factory)


def iter_records(result: dict[str, Any], kind: str) -> Iterator[dict[str, Any]]:
    return (r for r in result.get("records", []) if r["kind"] == kind)
