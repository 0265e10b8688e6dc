"""The index stage's last step: pip resolves the install command it prints from the index
alone, to the versions built, whatever the user's pip configuration caps or adds."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import pytest
from orch_index import make_wheel, write_simple

from intelmac_torch_builder.core.options import Options, PythonTarget, resolve
from intelmac_torch_builder.stages import index as index_stage

PYTHON = PythonTarget("3.12", sys.executable, True)


def _vision(wheels: Path) -> Options:
    """The real catalog's 2.14.1 companion (a macOS x86_64 line), with its index in ``wheels``."""
    options = resolve(argparse.Namespace(torch="2.14.1", builder="pytorch-macos", wheels_dir=wheels))
    vision = dataclasses.replace(options, pythons=(PYTHON,)).companion()
    assert vision is not None
    return vision


@pytest.mark.parametrize(("wheels", "problem"), [
    ({"torch": [], "torchvision": ["torch==2.14.1+intelmac"]}, None),
    # torchvision built against another torch (PYTORCH_VERSION unset).
    ({"torch": [], "torchvision": ["torch==2.14.0"]}, "requires torch==2.14.0, but torch 2.14.1+intelmac"),
    ({"torch": []}, "pip cannot resolve torch==2.14.1+intelmac torchvision==0.29.1+intelmac"),
])  # fmt: skip
def test_the_printed_install_command_resolves_from_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wheels: dict[str, list[str]], problem: str | None
) -> None:
    versions = {"torch": "2.14.1+intelmac", "torchvision": "0.29.1+intelmac"}
    for name, requires in wheels.items():
        make_wheel(tmp_path / "wheels", name, versions[name], requires, {f"{name}/__init__.py": ""})
    write_simple(tmp_path / "wheels")
    # The user's own settings play no part: a cap on torch, an index that is not there.
    caps = tmp_path / "caps.txt"
    caps.write_text("torch<=2.0\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(caps))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "http://127.0.0.1:9/simple")
    problems = index_stage.resolution_problems(_vision(tmp_path / "wheels"), PYTHON)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems
