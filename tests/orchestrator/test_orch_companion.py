"""The companion (torchvision): built after torch against our torch wheel, verified, indexed.

The fixture companion is a real setup.py project with a C extension, served over HTTP like
the fixture torch; the real catalog's companion plans are checked through --dry-run on a
fake Intel Mac.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog, companion
from intelmac_torch_builder.stages import verify
from orch_companion import VERSION as TV_VERSION
from orch_companion import add_companion, metadata, serve_companion
from orch_fixture import sha256
from orch_project import Project
from test_orch_dryrun import INTEL, commands, dry_run, exports, fake_mac, section  # noqa: F401
from test_orch_verify import _wheel_with, macho

TV_WHEEL_VERSION = f"{TV_VERSION}+intelmac"


def _only(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, found
    return found[0]


@pytest.mark.slow
def test_all_builds_torchvision_against_the_torch_it_just_built(project: Project) -> None:
    serve_companion(project)
    result = project.cli("all", "--builder", "setuptools")
    assert result.code == 0, result.text
    torch_version = f"{project.version}+intelmac"
    torch_wheel = _only(project.wheels, "torch-*.whl")
    tv_wheel = _only(project.wheels, "torchvision-*.whl")
    assert tv_wheel.name.startswith(f"torchvision-{TV_WHEEL_VERSION}-")

    # METADATA requires exactly our torch: PYTORCH_VERSION reached upstream's setup.py.
    requires = [
        line for line in metadata(tv_wheel).splitlines() if line.startswith("Requires-Dist")
    ]
    assert requires == [f"Requires-Dist: torch=={torch_version}"]

    with zipfile.ZipFile(tv_wheel) as archive:
        names = archive.namelist()
        version_py = archive.read("torchvision/version.py").decode()
        extension = next(n for n in names if n.startswith("torchvision/_C"))
        kernels = archive.read(extension)
        info = json.loads(archive.read(next(n for n in names if n.endswith("INTELMAC_BUILD.json"))))
    # setup.py imported our torch at build time (the one the torch stages just built) ...
    assert f"built_against = {torch_version!r}" in version_py
    # ... and the build information names that very wheel, by hash.
    torch_sha = hashlib.sha256(torch_wheel.read_bytes()).hexdigest()
    assert info["built_against"] == {"wheel": torch_wheel.name, "sha256": torch_sha}
    assert info["requires"] == f"torch=={torch_version}"
    assert info["upstream_version"] == TV_VERSION
    # FORCE_MPS=1 compiled the MPS kernel sources into _C.
    for marker in companion.MPS_MARKERS:
        assert marker.encode() in kernels

    # Indexed beside torch.
    root = (project.wheels / "simple" / "index.html").read_text()
    assert '<a href="torch/">torch</a>' in root and '<a href="torchvision/">torchvision</a>' in root
    page = (project.wheels / "simple" / "torchvision" / "index.html").read_text()
    assert f"#sha256={hashlib.sha256(tv_wheel.read_bytes()).hexdigest()}" in page
    assert f"torchvision=={TV_WHEEL_VERSION}" in result.text  # the install hint names the pair

    # Both are up to date now: nothing is fetched again.
    before = len(project.server.requests)
    again = project.cli("all", "--builder", "setuptools")
    assert again.code == 0, again.text
    assert again.text.count("Up to date") == 2
    assert len(project.server.requests) == before


@pytest.mark.slow
def test_torch_only_builds_no_companion(project: Project) -> None:
    serve_companion(project)
    result = project.cli("all", "--builder", "setuptools", "--torch-only")
    assert result.code == 0, result.text
    assert [wheel.name.split("-")[0] for wheel in project.wheels.glob("*.whl")] == ["torch"]
    assert not (project.work / f"torchvision-{TV_VERSION}").exists()


@pytest.mark.slow
def test_without_force_mps_the_companion_stays_out_of_the_index(project: Project) -> None:
    # What a build machine without a usable GPU produces when FORCE_MPS is not set.
    serve_companion(project, build_env={"FORCE_MPS": "0"})
    result = project.cli("all", "--builder", "setuptools")
    assert result.code == 1, result.text
    assert "MPS kernels" in result.err and "REGISTER_NMS_OP" in result.err
    assert "FORCE_MPS=1" in result.err
    assert [wheel.name.split("-")[0] for wheel in project.wheels.glob("*.whl")] == ["torch"]


@pytest.mark.slow
def test_a_companion_that_does_not_pin_our_torch_stays_out(project: Project) -> None:
    # Without PYTORCH_VERSION, METADATA says plain "torch": pip could pair it with any torch.
    serve_companion(project, build_env={"PYTORCH_VERSION": ""})
    result = project.cli("all", "--builder", "setuptools")
    assert result.code == 1, result.text
    assert "requires torch" in result.err
    assert f"expected torch=={project.version}+intelmac" in result.err
    assert not list(project.wheels.glob("torchvision-*.whl"))


def test_companion_build_needs_the_verified_torch_first(project: Project) -> None:
    serve_companion(project)
    for stage in ("fetch", "patch"):
        result = project.cli(stage, "--builder", "setuptools", "--companion", "torchvision")
        assert result.code == 0, (stage, result.text)
    assert (project.work / f"torchvision-{TV_VERSION}" / "patched" / "setup.py").is_file()
    built = project.cli("build", "--builder", "setuptools", "--companion", "torchvision")
    assert built.code == 1
    assert "run the verify stage first" in built.err
    assert f"--torch {project.version}" in built.err


def test_companion_option_on_a_line_without_one(project: Project) -> None:
    result = project.cli("fetch", "--companion", "torchvision")
    assert result.code == 1
    assert f"PyTorch {project.version} has no torchvision companion" in result.err


# --- verify's companion checks on hand-made wheels ---------------------------------------


def _expect(**changes: object) -> verify.Expectation:
    import dataclasses
    import re

    base = verify.Expectation(
        "torchvision", "0.21.0+intelmac", "intelmac", frozenset({"cp312"}),
        frozenset({"cp312"}), re.compile(".*"), "x86_64", {},
        requires="torch==2.6.0+intelmac", mps_markers=companion.MPS_MARKERS, links_torch=True,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _wheel(tmp_path: Path, members: dict[str, bytes]) -> zipfile.ZipFile:
    (tmp_path / "t.whl").unlink(missing_ok=True)
    return _wheel_with(tmp_path, members)


KERNELS = " ".join(companion.MPS_MARKERS).encode()
GOOD_EXTENSION = (
    macho([companion.TORCH_LIB_RPATH], ["@rpath/libc10.dylib", "@rpath/libtorch_cpu.dylib"])
    + KERNELS
)


@pytest.mark.parametrize(
    ("requires", "ok"),
    [
        (["torch==2.6.0+intelmac", "numpy"], True),
        (["torch (==2.6.0)"], False),  # upstream's own pin: our torch would not satisfy it
        (["torch>=2.14.0"], False),  # 0.29.x's range: pip could pair it with any torch
        (["torch"], False),
        (["torch==2.6.0+intelmac", "torch==2.6.0+intelmac; sys_platform == 'linux'"], False),
        (["numpy"], False),
    ],
)
def test_metadata_must_require_exactly_our_torch(
    tmp_path: Path, requires: list[str], ok: bool
) -> None:
    meta = "Name: torchvision\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    archive = _wheel(tmp_path, {"torchvision-0.21.0+intelmac.dist-info/METADATA": meta.encode()})
    (finding,) = verify.check_torch_requirement(
        archive, "torchvision-0.21.0+intelmac.dist-info", _expect()
    )
    assert finding.ok is ok, finding.detail


def test_mps_kernels_must_all_be_in_the_extension(tmp_path: Path) -> None:
    with_all = _wheel(tmp_path, {"torchvision/_C.so": GOOD_EXTENSION})
    assert verify.check_mps_kernels(with_all, companion.MPS_MARKERS)[0].ok
    # 0.29's stable-ABI module is _C_stable.so; a build without ps_roi_pool fails.
    partial = macho([], []) + KERNELS.replace(b"REGISTER_PS_ROI_POOL_OP", b"")
    (finding,) = verify.check_mps_kernels(
        _wheel(tmp_path, {"torchvision/_C_stable.so": partial}), companion.MPS_MARKERS
    )
    assert not finding.ok and "REGISTER_PS_ROI_POOL_OP" in finding.detail
    (missing,) = verify.check_mps_kernels(_wheel(tmp_path, {}), companion.MPS_MARKERS)
    assert not missing.ok and "no torchvision/_C" in missing.detail


def test_linkage_to_our_libtorch(tmp_path: Path) -> None:
    good = _wheel(tmp_path, {"torchvision/_C.so": GOOD_EXTENSION})
    (finding,) = verify.check_torch_linkage(good, _expect())
    assert finding.ok, finding.detail

    # Upstream's own wheel: an rpath into the build machine's conda env, none to torch/lib.
    upstream = macho(["/Users/ec2-user/runner/_work/_temp/conda_environment/lib"],
                     ["@rpath/libtorch.dylib"]) + KERNELS  # fmt: skip
    (finding,) = verify.check_torch_linkage(
        _wheel(tmp_path, {"torchvision/_C.so": upstream}), _expect()
    )
    assert not finding.ok and "no LC_RPATH @loader_path/../torch/lib" in finding.detail

    # A copy of libtorch bundled into the wheel (delocate without --exclude).
    bundled = _wheel(
        tmp_path,
        {
            "torchvision/_C.so": GOOD_EXTENSION,
            "torchvision/.dylibs/libtorch_cpu.dylib": macho([], []),
        },
    )
    (finding,) = verify.check_torch_linkage(bundled, _expect())
    assert not finding.ok and ".dylibs/libtorch_cpu.dylib" in finding.detail

    # An extension that does not link libtorch at all is not built against torch.
    (finding,) = verify.check_torch_linkage(
        _wheel(tmp_path, {"torchvision/_C.so": macho([companion.TORCH_LIB_RPATH], [])}), _expect()
    )
    assert not finding.ok and "links no libtorch" in finding.detail


# --- the real catalog's companion plans ------------------------------------------------


@pytest.mark.parametrize("version", [line.version for line in catalog.load().lines])
def test_intel_mac_plan_builds_torchvision_against_our_torch(
    fake_mac: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    version: str,
) -> None:
    line = catalog.load().line(version)
    tv = line.companion
    assert tv is not None and tv.name == "torchvision"
    python = "3.12"  # every line has it
    work = tmp_path / "work"
    out = dry_run(capsys, work, "--torch", version, "--python", python,
                  *(["--trust-on-first-use"] if tv.source.sha256 is None else []))  # fmt: skip
    companion_part = out[out.index(f"#### torchvision {tv.version}") :]
    torch_part = out[: out.index(f"#### torchvision {tv.version}")]
    assert f"torch=={version}+intelmac" in companion_part.splitlines()[0]

    build = section(companion_part, "build")
    env = exports(build)
    assert env["FORCE_MPS"] == "1"
    assert env["PYTORCH_VERSION"] == f"{version}+intelmac"
    assert env["BUILD_VERSION"] == f"{tv.version}+intelmac"
    root = work / f"torchvision-{tv.version}"
    codecs = root / "image-io"
    assert env["LDFLAGS"] == f"-Wl,-rpath,@loader_path/../torch/lib -Wl,-rpath,{codecs}/lib"
    # Image I/O: torchvision's setup.py finds the pinned codecs through its variables.
    assert env["TORCHVISION_INCLUDE"] == f"{codecs}/include"
    assert env["TORCHVISION_LIBRARY"] == f"{codecs}/lib"
    assert {env[f"TORCHVISION_USE_{name}"] for name in ("JPEG", "PNG", "WEBP")} == {"1"}
    assert any(item.startswith("# image codecs: the pinned osx-64 libjpeg-turbo, libpng, libwebp and zlib") for item in build)
    assert env["MACOSX_DEPLOYMENT_TARGET"] == line.macos_deployment_target
    assert env["_PYTHON_HOST_PLATFORM"] == f"macosx-{line.macos_deployment_target}-x86_64"
    tag = "cp" + python.replace(".", "")
    venv = root / "venvs" / tag
    steps = commands(build)
    # The line's pinned toolchain (hash-checked), the torch wheel the torch stages of this
    # same plan produce, then upstream's setup.py.
    assert steps[1] == (
        f"{venv}/bin/python -m pip install --require-hashes --only-binary=:all: --no-deps "
        f"-r {line.pins}"
    )
    assert steps[2] == (
        f"{venv}/bin/python -m pip install "
        f"'{work}/{version}/dist/{tag}/repaired/torch-{version}+intelmac-{tag}-<platform>.whl'"
    )
    assert steps[3] == (
        f'(cd {root}/patched && PATH={codecs}/bin:"$PATH" {venv}/bin/python -m pip wheel '
        f"--no-build-isolation --no-deps -v --wheel-dir {root}/dist/{tag}/raw .)"
    )
    fetch = section(companion_part, "fetch")
    assert any(tv.source.url in line_ for line_ in fetch)
    if tv.source.sha256:
        assert any(tv.source.sha256 in line_ for line_ in fetch)
    repair = " ".join(commands(section(companion_part, "repair")))
    assert "--exclude libtorch --exclude libc10" in repair
    assert "--ignore-missing-dependencies" in repair
    checks = " ".join(section(companion_part, "verify"))
    assert f"requires exactly torch=={version}+intelmac" in checks
    assert "nms, roi_align, roi_pool, ps_roi_align, ps_roi_pool" in checks
    assert "torchvision/index.html" in " ".join(section(companion_part, "index"))
    assert "FORCE_MPS" not in torch_part

    only = dry_run(capsys, tmp_path / "w2", "--torch", version, "--python", python,
                   "--torch-only", "--trust-on-first-use")  # fmt: skip
    assert "torchvision" not in only


@pytest.mark.slow
def test_a_rebuilt_torch_makes_the_companion_rebuild(project: Project) -> None:
    tarball = serve_companion(project)
    first = project.cli("all", "--builder", "setuptools")
    assert first.code == 0, first.text
    old = _only(project.wheels, "torchvision-*.whl").read_bytes()
    # A new series for torch: torch is rebuilt, so torchvision must be built again against
    # it, although its own source and series did not change.
    project.rewrite_catalog(patches=project.patches[:1])
    add_companion(project.catalog, project.server.url(tarball.name), sha256(tarball))
    old_torch = _only(project.wheels, "torch-*.whl")
    old_torch_bytes = old_torch.read_bytes()
    # The rebuilt torch has the old one's file name and other bytes: the index refuses to
    # swap them (installs pinned to the old hash would break) and changes nothing.
    refused = project.cli("all", "--builder", "setuptools")
    assert refused.code == 1, refused.text
    assert f"{old_torch} is already in the index with sha256" in refused.text
    assert "never changes bytes" in refused.text
    assert old_torch.read_bytes() == old_torch_bytes
    assert _only(project.wheels, "torchvision-*.whl").read_bytes() == old
    # The way out the message gives: remove the old wheels (nothing here pins them).
    for wheel in project.wheels.glob("*.whl"):
        wheel.unlink()
        wheel.with_name(wheel.name + ".build.json").unlink()
    second = project.cli("all", "--builder", "setuptools")
    assert second.code == 0, second.text
    assert "Up to date" not in second.text
    with zipfile.ZipFile(_only(project.wheels, "torchvision-*.whl")) as archive:
        name = next(n for n in archive.namelist() if n.endswith("INTELMAC_BUILD.json"))
        info = json.loads(archive.read(name))
    torch_wheel = _only(project.wheels, "torch-*.whl")
    assert info["built_against"]["sha256"] == hashlib.sha256(torch_wheel.read_bytes()).hexdigest()
    assert _only(project.wheels, "torchvision-*.whl").read_bytes() != old


def test_every_catalog_line_pairs_with_a_pinned_or_flagged_torchvision() -> None:
    real = catalog.load()
    pairs = {line.version: line.companion for line in real.lines}
    assert {v: c.version for v, c in pairs.items() if c} == {
        "2.6.0": "0.21.0", "2.9.1": "0.24.1", "2.14.1": "0.29.1", "2.15.0": "0.29.2",
    }  # fmt: skip
    for version, tv in pairs.items():
        assert tv is not None and tv.pairs_with == version and tv.name == "torchvision"
        assert tv.source.url == (
            f"https://github.com/pytorch/vision/archive/refs/tags/v{tv.version}.tar.gz"
        )
        assert tv.pair_evidence
        line = real.line(version)
        assert tv.python == line.python
        assert tv.macos_deployment_target == line.macos_deployment_target
        # A pin says where it comes from; no pin means trust on first use, as for torch.
        assert (tv.source.sha256 is None) == (tv.source.pin_origin == "not pinned yet")
        assert tv.key == f"torchvision-{tv.version}"
    # The pin the issue names for 0.21.0 (Spack, Termux, conda-forge).
    assert pairs["2.6.0"].source.sha256 == (  # type: ignore[union-attr]
        "0a4a967bbb7f9810f792cd0289a07fb98c8fb5d1303fae8b63e3a6b05d720058"
    )


def test_catalog_refuses_a_missing_companion_patch(tmp_path: Path) -> None:
    import yaml
    from intelmac_torch_builder.core.errors import CatalogError

    document = yaml.safe_load(catalog.DEFAULT_CATALOG.read_text())
    document["lines"][0]["companion"]["patches"] = ["torchvision/0001-missing.patch"]
    with pytest.raises(CatalogError, match="companion.patches': torchvision/0001-missing.patch"):
        catalog.parse(catalog.DEFAULT_CATALOG, document)
    document["lines"][0]["companion"]["name"] = "torchaudio"
    with pytest.raises(CatalogError, match="companion.name"):
        catalog.parse(catalog.DEFAULT_CATALOG, document)


def test_make_build_builds_both_unless_torch_only() -> None:
    import subprocess

    root = catalog.REPO_ROOT
    both = subprocess.run(["make", "-n", "build"], cwd=root, capture_output=True, text=True,
                          check=True).stdout  # fmt: skip
    alone = subprocess.run(["make", "-n", "build", "TORCH_ONLY=1"], cwd=root,
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "intelmac_torch_builder all" in both and "--torch-only" not in both
    assert "intelmac_torch_builder all --torch-only" in alone


@pytest.mark.slow
def test_an_unpinned_companion_needs_trust_on_first_use(project: Project) -> None:
    tarball = serve_companion(project)
    add_companion(project.catalog, project.server.url(tarball.name), None)
    refused = project.cli("all", "--builder", "setuptools")
    assert refused.code == 1
    assert f"torchvision {TV_VERSION} has no sha256 pin" in refused.err
    assert "--trust-on-first-use" in refused.err
    trusted = project.cli("all", "--builder", "setuptools", "--trust-on-first-use")
    assert trusted.code == 0, trusted.text
    assert "TRUST ON FIRST USE" in trusted.err
    lock = project.catalog.with_name("catalog.lock.yaml").read_text()
    assert f"torchvision-{TV_VERSION}:" in lock and sha256(tarball) in lock
