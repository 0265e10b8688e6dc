"""End to end: the fixture upstream from a real HTTP server to `pip install` from our index."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from intelmac_torch_builder.core import buildinfo
from orch_project import Project

REPO = Path(__file__).resolve().parents[2]


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


@pytest.mark.slow
def test_all_from_http_to_pip_install(project: Project, tmp_path: Path) -> None:
    result = project.cli("all", "--builder", "setuptools")
    assert result.code == 0, result.text
    wheel_version = f"{project.version}+intelmac"

    # The index lists exactly our wheel, with a fragment that is the file's real sha256.
    page = (project.wheels / "simple" / "torch" / "index.html").read_text()
    wheels = sorted(project.wheels.glob("*.whl"))
    assert len(wheels) == 1
    wheel = wheels[0]
    assert wheel.name.startswith(f"torch-{wheel_version}-")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert f"#sha256={digest}" in page
    assert '<a href="torch/">torch</a>' in (project.wheels / "simple" / "index.html").read_text()

    # Build info inside the wheel (in RECORD) and beside it.
    with zipfile.ZipFile(wheel) as archive:
        dist_info = buildinfo.dist_info_dir(archive.namelist())
        inside = json.loads(archive.read(f"{dist_info}/INTELMAC_BUILD.json"))
        record = archive.read(f"{dist_info}/RECORD").decode()
    assert f"{dist_info}/INTELMAC_BUILD.json,sha256=" in record
    beside = json.loads((project.wheels / f"{wheel.name}.build.json").read_text())
    assert beside["wheel_sha256"] == digest
    assert inside["source_sha256"] == project.sha256 == beside["source_sha256"]
    assert inside["upstream_version"] == project.version
    assert inside["wheel_version"] == wheel_version
    assert inside["patches"] == [p.name for p in project.patches]
    assert inside["repair"].startswith("skipped")
    assert len(inside["series_fingerprint"]) == 64

    # The real install command, into a fresh venv, with nothing but our index.
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = _venv_python(venv)
    index_url = (project.wheels / "simple").as_uri()
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
         "--index-url", index_url, f"torch=={wheel_version}"],
        check=True,
    )  # fmt: skip
    probe = (
        "import json, torch, torch.backends.mps as mps\n"
        "from torch.backends.mps import _policy\n"
        "print(json.dumps({'version': torch.__version__, 'allow': mps.allow_intel_gpu,"
        " 'vendors': _policy.ELIGIBLE_VENDORS, 'info': mps.build_info()}))\n"
    )
    shown = subprocess.run(
        [str(python), "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path,
        env={"PYTORCH_MPS_ALLOW_INTEL_GPU": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    seen = json.loads(shown.stdout)
    assert seen["version"] == wheel_version
    assert seen["allow"] is True  # the patched module, not the upstream one
    assert "Intel" in seen["vendors"]  # the module the series adds
    assert seen["info"]["series_fingerprint"] == inside["series_fingerprint"]

    # A second `all` is a no-op: no request reaches the server. How quick it is, is measured
    # by tests/bench_orchestrator.py, not timed here.
    before = len(project.server.requests)
    again = project.cli("all", "--builder", "setuptools")
    assert again.code == 0, again.text
    assert "Up to date" in again.text
    assert len(project.server.requests) == before


def test_non_macos_host_stops_after_patching_with_exit_3(project: Project) -> None:
    if sys.platform == "darwin":
        pytest.skip("on macOS the default builder would really compile")
    result = project.cli("all")
    assert result.code == 3, result.text  # "needs a Mac", not an error (1)
    outcome = json.loads((project.work / project.version / "outcome.json").read_text())
    assert outcome == {"outcome": "needs-mac", "exit_code": 3}
    patched = project.work / project.version / "patched"
    assert (patched / "torch" / "backends" / "mps" / "_policy.py").is_file()
    assert str(patched) in result.err
    assert f"make build VERSION={project.version}" in result.err
    assert "needs macOS" in result.err
    assert "Traceback" not in result.err
    assert not list(project.wheels.glob("*.whl"))


def test_wheel_that_fails_verification_stays_out_of_the_index(project: Project) -> None:
    for stage in ("fetch", "patch", "build", "repair"):
        result = project.cli(stage, "--builder", "setuptools")
        assert result.code == 0, (stage, result.text)
    repaired = next((project.work / project.version / "dist").glob("cp*/repaired/*.whl"))
    # Tamper with one file after RECORD was written: its hash no longer matches.
    tampered = repaired.with_suffix(".tmp")
    with zipfile.ZipFile(repaired) as src, zipfile.ZipFile(tampered, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("mps/_policy.py"):
                data += b"# tampered\n"
            dst.writestr(item, data)
    tampered.replace(repaired)

    verified = project.cli("verify", "--builder", "setuptools")
    assert verified.code == 1
    assert "RECORD hashes" in verified.err and "_policy.py" in verified.err
    assert "stay out of the index" in verified.err

    indexed = project.cli("index", "--builder", "setuptools")
    assert indexed.code == 1
    assert "No verified wheel" in indexed.err
    assert not list(project.wheels.glob("*.whl"))
    page = project.wheels / "simple" / "torch" / "index.html"
    assert not page.exists() or ".whl" not in page.read_text()


def test_wrong_platform_tag_fails_verification(project: Project) -> None:
    """The expected tag is part of the target: a pure wheel is not a macOS x86_64 wheel."""
    for stage in ("fetch", "patch", "build", "repair"):
        assert project.cli(stage, "--builder", "setuptools").code == 0
    # Verify the same wheel as if the PyTorch builder had made it.
    result = project.cli("verify")
    assert result.code == 1
    assert re.search(r"tags: py3-none-any \(expected .*macosx_13_0_x86_64", result.err), result.err


def test_unknown_version_lists_supported(project: Project) -> None:
    result = project.cli("all", "--torch", "9.9.9")
    assert result.code == 1
    assert "9.9.9 is not a supported release line" in result.err
    assert f"Supported: {project.version}" in result.err


def test_malformed_catalog_names_the_field(project: Project) -> None:
    text = project.catalog.read_text().replace(
        "macos_deployment_target: '13.0'", "macos_deployment_target: thirteen"
    )
    project.catalog.write_text(text)
    result = project.cli("fetch")
    assert result.code == 1
    assert f"release line {project.version}, field 'macos_deployment_target'" in result.err
    assert "got 'thirteen' (a string), expected a string matching" in result.err
    assert str(project.catalog) in result.err


def test_python_the_line_does_not_support(project: Project) -> None:
    project.rewrite_catalog(python=["3.4"])
    # build is the first stage that makes something for a Python (fetch and patch take none).
    result = project.cli("build", "--builder", "setuptools")
    assert result.code == 1
    assert "Supported: 3.4" in result.err


def test_generic_builder_refuses_a_pytorch_tree(project: Project) -> None:
    tree = project.root / "upstream" / f"pytorch-v{project.version}"
    (tree / "aten" / "src" / "ATen").mkdir(parents=True)
    result = project.cli("all", "--builder", "setuptools", "--source", str(tree))
    assert result.code == 1
    assert "is a PyTorch tree; the setuptools builder is for small trees" in result.err


def test_stages_out_of_order_say_what_to_run(project: Project) -> None:
    for stage, hint in (("build", "run the patch stage first"), ("repair", "run the build stage first"),
                        ("verify", "run the repair stage first"), ("index", "run the verify stage first")):  # fmt: skip
        result = project.cli(stage, "--builder", "setuptools")
        assert result.code == 1, (stage, result.text)
        assert hint in result.err, (stage, result.err)


def test_the_linux_stop_says_what_happens_to_torchvision(project: Project) -> None:
    if sys.platform == "darwin":
        pytest.skip("on macOS the default builder would really compile")
    from orch_companion import serve_companion

    serve_companion(project)
    result = project.cli("all")
    assert result.code == 3, result.text
    assert "torchvision 0.1.0 is not fetched here" in result.err
    assert "the Mac run builds it right after torch" in result.err
    # Make variables where a make command is printed; no module call that needs the venv.
    # No OpenMP to find by hand: the build fetches its pinned llvm-openmp.
    assert "fetches its pinned, sha256-checked llvm-openmp itself" in result.err
    assert "LIBOMP" not in result.err and "--libomp" not in result.err
    assert "python -m intelmac_torch_builder" not in result.err
    assert not (project.work / "torchvision-0.1.0").exists()  # really not fetched
    alone = project.cli("all", "--torch-only")
    assert "TORCH_ONLY=1" in alone.err and "torchvision 0.1.0 is not built" in alone.err


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_linux_stops_dry_run_hint_runs_on_a_fresh_clone(tmp_path: Path) -> None:
    """The hint is pasted as printed: through make, which sets up its own venv (here: a venv
    stamp beside this interpreter, as on a clone whose first make command made it)."""
    from intelmac_torch_builder.core import host as host_mod
    from intelmac_torch_builder.core.options import resolve
    from intelmac_torch_builder.stages.build import unsupported_host_message

    options = resolve(argparse.Namespace(torch="2.14.1", work_dir=tmp_path / "work"))
    linux = host_mod.Host("Linux", "x86_64", None, 2, 8 * 2**30, None, None, None)
    message = unsupported_host_message(options, linux)
    hint = next(line.strip() for line in message.splitlines() if "BUILD_ARGS=--dry-run" in line)
    assert hint.startswith("make build VERSION=2.14.1 PYTHON=")
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".stamp-build").touch()
    command = f"{hint} VENV={venv} PY={sys.executable}"
    ran = subprocess.run(
        ["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "#### PyTorch 2.14.1 -> torch==2.14.1+intelmac" in ran.stdout
    assert "#### torchvision 0.29.1" in ran.stdout
