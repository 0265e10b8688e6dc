"""The build stops when CMake did not configure what the catalog chose (BLAS, MKL, oneDNN).

The configure step's own record is read: the headers it generates in the tree
(build/caffe2/core/macros.h, aten/src/ATen/Config.h). Fixture trees hold headers shaped
like the real ones (their lines copied in form from 2.6.0's macros.h.in and Config.h.in).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog, features
from intelmac_torch_builder.core.errors import BuildError
from intelmac_torch_builder.core.options import Layout
from intelmac_torch_builder.platforms import macos


def configured_tree(root: Path, blas: str = "mkl", lapack: str | None = None,
                    mkl: int = 1, sequential: int = 0, mkldnn: int = 1) -> Path:
    macros = root / "build" / "caffe2" / "core" / "macros.h"
    macros.parent.mkdir(parents=True)
    macros.write_text(
        "#define CAFFE2_BUILD_STRINGS { \\\n"
        '  {"TORCH_VERSION", "2.6.0"}, \\\n'
        f'  {{"BLAS_INFO", "{blas}"}}, \\\n'
        f'  {{"LAPACK_INFO", "{lapack or blas}"}}, \\\n'
        f'  {{"USE_MKLDNN", "{"ON" if mkldnn else "OFF"}"}}, \\\n'
        "}\n"
    )
    config = root / "aten" / "src" / "ATen" / "Config.h"
    config.parent.mkdir(parents=True)
    config.write_text(
        f"#define AT_MKLDNN_ENABLED() {mkldnn}\n#define AT_MKL_ENABLED() {mkl}\n"
        f"#define AT_MKL_SEQUENTIAL() {sequential}\n#define AT_POCKETFFT_ENABLED() {1 - mkl}\n"
    )
    return root


def wanted(line_version: str = "2.6.0") -> features.Features:
    line = catalog.load().line(line_version)
    return features.of(line.build_env, line.title)


def test_a_tree_configured_as_the_catalog_says_passes(tmp_path: Path) -> None:
    tree = configured_tree(tmp_path)
    assert features.configured(tree)["BLAS_INFO"] == "mkl"
    assert features.configured_problems(tree, wanted()) == []


@pytest.mark.parametrize(("tree_args", "messages"), [
    # BLAS left to CMake: no MKL, Accelerate found instead.
    ({"blas": "accelerate", "mkl": 0}, ["BLAS_INFO='accelerate', but the catalog chose 'mkl'",
                                        "LAPACK_INFO='accelerate'",
                                        "AT_MKL_ENABLED is not 1"]),
    # MKL found, its OpenMP layer not: every BLAS call on one core.
    ({"sequential": 1}, ["AT_MKL_SEQUENTIAL is 1", "libiomp5"]),
    ({"lapack": "open"}, ["LAPACK_INFO='open'"]),
    ({"mkldnn": 0}, ["AT_MKLDNN_ENABLED is 0, but the catalog says USE_MKLDNN=1"]),
])
def test_a_tree_configured_otherwise_is_named(tmp_path: Path, tree_args: dict[str, object],
                                              messages: list[str]) -> None:
    tree = configured_tree(tmp_path, **tree_args)  # type: ignore[arg-type]
    text = "\n".join(features.configured_problems(tree, wanted()))
    for message in messages:
        assert message in text


def test_an_unconfigured_tree_is_named(tmp_path: Path) -> None:
    (problem,) = features.configured_problems(tmp_path, wanted())
    assert "build/caffe2/core/macros.h" in problem and "did not finish" in problem


@dataclasses.dataclass
class FakeOptions:
    """What check_configured reads of Options: the line and the layout."""

    line: catalog.ReleaseLine
    layout: Layout


def test_the_build_step_stops_with_the_fix(tmp_path: Path) -> None:
    line = catalog.load().line("2.9.1")
    layout = Layout(tmp_path, line.key)
    options = FakeOptions(line, layout)
    configured_tree(layout.patched_tree)
    macos.check_configured(options)  # type: ignore[arg-type]
    bad = tmp_path / "bad"
    configured_tree(Layout(bad, line.key).patched_tree, blas="accelerate", mkl=0)
    with pytest.raises(BuildError) as caught:
        macos.check_configured(FakeOptions(line, Layout(bad, line.key)))  # type: ignore[arg-type]
    message = str(caught.value)
    assert "PyTorch 2.9.1: CMake did not configure what the catalog chose" in message
    assert f"{bad}/2.9.1/blas/mkl (lib/libmkl_core.a" in message
    assert f"remove {bad}/2.9.1/patched/build" in message


def test_the_installed_headers_are_read_where_the_build_folder_has_none(tmp_path: Path) -> None:
    built = configured_tree(tmp_path / "built", blas="accelerate", mkl=0)
    installed = tmp_path / "installed" / "torch" / "include"
    (installed / "caffe2" / "core").mkdir(parents=True)
    (built / "build" / "caffe2" / "core" / "macros.h").rename(installed / "caffe2/core/macros.h")
    (built / "aten" / "src" / "ATen" / "Config.h").rename(installed / "Config.h")
    (installed / "ATen").mkdir()
    (installed / "Config.h").rename(installed / "ATen" / "Config.h")
    found = features.configured(tmp_path / "installed")
    assert found["BLAS_INFO"] == "accelerate" and found["AT_MKL_ENABLED"] == "0"
    # No Config.h anywhere: say so, never guess that MKL is missing.
    (installed / "ATen" / "Config.h").unlink()
    text = "\n".join(features.configured_problems(tmp_path / "installed", wanted()))
    assert "no ATen Config.h in" in text and "AT_MKL_ENABLED is not 1" not in text
