"""The real torchvision 0.21.0 source through the orchestrator's own source stage.

``.ci/run`` gets the real ``vision/archive/refs/tags/v0.21.0.tar.gz`` (byte-identical to
GitHub's, which is what Spack, Termux and conda-forge pin) from
``../shared/tools/upstream-tarball pytorch-vision 0.21.0`` and names it in
``INTELMAC_VISION_TARBALL``. The test serves it from a local HTTP server, fetches it with the
``fetch`` stage against the catalog's pin, extracts it, then checks the macOS plan against
what that real ``setup.py`` reads and builds. Without the variable, it skips.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from intelmac_torch_builder import cli
from intelmac_torch_builder.core import catalog, companion, toolchain
from intelmac_torch_builder.maint import upstream_material
from orch_server import FileServer
from test_orch_dryrun import INTEL, commands, dry_run, exports, fake_mac, section  # noqa: F401

# Where make upstream-material leaves it, unless the variable names another copy.
TARBALL = os.environ.get("INTELMAC_VISION_TARBALL") or str(
    upstream_material.default_cache() / "torchvision-v0.21.0.tar.gz"
)


@pytest.mark.upstream
def test_real_torchvision_0_21_0_source_and_its_macos_plan(
    fake_mac: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if not Path(TARBALL).is_file():
        pytest.skip(
            "no torchvision 0.21.0 release archive: make upstream-material fetches it (or set "
            "INTELMAC_VISION_TARBALL to a copy)"
        )
    line = catalog.load().line("2.6.0")
    tv = line.companion
    assert tv is not None and tv.version == "0.21.0" and tv.source.sha256
    server = FileServer()
    try:
        url = server.serve("pytorch/vision/archive/refs/tags/v0.21.0.tar.gz", Path(TARBALL))
        work = tmp_path / "work"
        folders = ["--work-dir", str(work), "--cache-dir", str(tmp_path / "cache")]
        capsys.readouterr()
        code = cli.main(
            ["fetch", "--torch", "2.6.0", "--companion", "torchvision", "--source", url,
             "--timeout", "30", *folders]
        )  # fmt: skip
        err = capsys.readouterr().err
        assert code == 0, err
    finally:
        server.close()
    # Checked against the catalog's published pin, not merely downloaded.
    assert f"sha256 OK: {tv.source.sha256}" in err
    tree = work / "torchvision-0.21.0" / "source"
    assert (tree / "version.txt").read_text().strip() == "0.21.0"

    # Every MPS op this project checks has its kernel source, and the Metal source that
    # verify looks for in _C.so registers each of them.
    mps = tree / "torchvision" / "csrc" / "ops" / "mps"
    for op in companion.MPS_OPS:
        assert (mps / f"{op}_kernel.mm").is_file(), op
    metal = "".join(path.read_text() for path in mps.glob("*.h"))
    for marker in companion.MPS_MARKERS:
        assert f"#define {marker}(" in metal, marker

    # The variables the plan sets are the ones upstream's setup.py reads.
    setup_py = (tree / "setup.py").read_text()
    read = set(re.findall(r'os\.getenv\("([A-Z_]+)"', setup_py))
    plan = dry_run(capsys, work, "--torch", "2.6.0", "--companion", "torchvision",
                   "--python", "3.12")  # fmt: skip
    build = section(plan, "build")
    env = exports(build)
    setup_vars = {"FORCE_MPS", "PYTORCH_VERSION", "BUILD_VERSION", *tv.build_env}
    assert setup_vars <= read, setup_vars - read
    assert env["FORCE_MPS"] == "1" and env["PYTORCH_VERSION"] == "2.6.0+intelmac"
    assert "torch.backends.mps.is_available() or FORCE_MPS" in setup_py

    # Upstream's build requirements are all in the build venv: torch as our wheel, the rest
    # from the line's pinned toolchain, which the plan installs (hash-checked) first.
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    requires = tomllib.loads((tree / "pyproject.toml").read_text())["build-system"]["requires"]
    installs = [step for step in commands(build) if " -m pip install " in step]
    assert f"-r {line.pins}" in installs[0] and "--require-hashes" in installs[0]
    pinned = toolchain.load(line.pins).versions("3.12")
    for requirement in requires:
        name = re.split(r"[<>=!~ ;\[]", requirement, maxsplit=1)[0]
        if name == "torch":
            assert "/torch-2.6.0+intelmac-" in installs[1], installs
        else:
            assert name in pinned, (requirement, sorted(pinned))
    # And the plan goes on to repair, verify and index it.
    for stage in ("repair", "verify", "index"):
        assert section(plan, stage)
