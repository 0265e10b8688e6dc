"""The dress rehearsal (make rehearse) passes on every catalogued line's official wheels.

repair, verify, index and pip's resolution of the install command run, as ``make build`` runs
them, on upstream's own torch (macOS arm64) and torchvision wheels of each line, shaped as our
build leaves its wheels, and verify's Mach-O checks on upstream's last x86_64 torch (2.2.2).
The wheels come from the cache that ``make upstream-material`` (and ``make rehearse``) fill:
this test never reaches the network (``--offline``). Without them it skips, and under CI=true
or INTELMAC_REQUIRE_WHEELS=1 (.ci/run) it fails instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from intelmac_torch_builder.core import catalog
from intelmac_torch_builder.core._log import Log
from intelmac_torch_builder.core.errors import BuildError
from intelmac_torch_builder.maint import official_wheels, rehearse


def _wanted() -> list[tuple[str, str, str]]:
    lines = catalog.load().lines
    wanted = [("torch", rehearse.X86_TORCH, "x86_64")]
    for line in lines:
        wanted.append(("torch", line.version, "arm64"))
        if line.companion is not None:
            wanted.append((line.companion.name, line.companion.version, "arm64"))
    return wanted


def _missing() -> list[str]:
    missing = []
    for project, version, arch in _wanted():
        try:
            official_wheels.fetch(project, version, arch, Log.create(), offline=True)
        except BuildError:
            missing.append(f"{project} {version} {arch}")
    return missing


def _llvm_missing() -> bool:
    try:
        rehearse.install_name_tool()
    except BuildError:
        return True
    return False


def test_the_rehearsal_passes_on_every_line(tmp_path: Path) -> None:
    missing = _missing()
    why = ""
    if missing:
        why = (f"the official wheels the rehearsal runs on are not cached ({', '.join(missing)}): "
               "make upstream-material fetches them")  # fmt: skip
    elif _llvm_missing():
        why = "the rehearsal edits LC_RPATHs with LLVM's install_name_tool: apt-get install llvm"
    if why:
        if os.environ.get("CI") == "true" or os.environ.get("INTELMAC_REQUIRE_WHEELS") == "1":
            pytest.fail("CI=true: " + why)
        pytest.skip(why)
    ran = subprocess.run(
        [sys.executable, "-m", "intelmac_torch_builder", "rehearse", "--offline",
         "--work-dir", str(tmp_path / "rehearse")],
        capture_output=True, text=True, timeout=3000, check=False,
    )  # fmt: skip
    out = ran.stdout
    assert ran.returncode == 0, out + ran.stderr[-4000:]
    rows = [ROW.match(row) for row in out.splitlines()]
    verdicts = {(m["subject"], m["stage"], m["check"]): m["status"] for m in rows if m}
    assert "FAIL" not in verdicts.values(), out
    for line in catalog.load().lines:
        subjects = [f"torch {line.version}"]
        if line.companion is not None:
            subjects.append(f"{line.companion.name} {line.companion.version}")
        for subject in subjects:
            # Each stage ran on each wheel, and each said what it could not check.
            for stage, check in (("build", "shaped as built"), ("repair", "build information"),
                                 ("verify", "patched code"), ("verify", "RECORD hashes"),
                                 ("verify", "library paths"), ("index", "index and install"),
                                 ("index", "no-op rebuild")):  # fmt: skip
                assert verdicts.get((subject, stage, check)) == "ok", (subject, stage, check, out)
            assert verdicts.get((subject, "repair", "delocate")) == "n/a", out
        if line.companion is not None:
            subject = f"{line.companion.name} {line.companion.version}"
            for check in ("image codecs", "MPS kernels", "links our libtorch", "requires torch"):
                assert verdicts.get((subject, "verify", check)) == "ok", (subject, check, out)
    x86 = f"torch {rehearse.X86_TORCH} x86_64"
    assert any(key[0] == x86 and key[2].startswith("library paths (x86_64") and status == "ok"
               for key, status in verdicts.items()), out  # fmt: skip


#: One verdict line of the rehearsal: status, subject, stage, check: detail.
ROW = re.compile(r"^(?P<status>ok|n/a|FAIL)\s+(?P<subject>\S+ \S+(?: x86_64)?)\s+(?P<stage>\w+)\s+"
                 r"(?P<check>[^:]+): (?P<detail>.*)$")  # fmt: skip
