"""The dress rehearsal (make rehearse) passes on every catalogued line's official wheels.

repair, verify, index and pip's resolution of the install command run, as ``make build`` runs
them, on upstream's own torch (macOS arm64) and torchvision wheels of each line, shaped as our
build leaves its wheels: repair() (the Mach-O checks, delocate, relocate) and verify() run
on them as pipeline.py calls them, and on upstream's last x86_64 torch (2.2.2) the repair
and verify's series-independent checks run with x86_64 required.
The wheels come from the cache that ``make upstream-material`` (and ``make rehearse``) fill:
this test never reaches the network (``--offline``). Without them it skips, and under CI=true
or INTELMAC_REQUIRE_WHEELS=1 (.ci/run) it fails instead. CI runs the rehearsal once: the test
reads ``make rehearse``'s result (build/rehearse/result.json) when its inputs' fingerprint is
still the same (code, patches, the official wheels' hashes), and runs it itself otherwise.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog
from intelmac_torch_builder.core._log import Log
from intelmac_torch_builder.core.errors import BuildError
from intelmac_torch_builder.maint import mac_tools, official_wheels, rehearse


def _wanted() -> list[tuple[str, str, str]]:
    lines = catalog.load().lines
    wanted = [("torch", rehearse.X86_TORCH, "x86_64")]
    for line in lines:
        wanted.append(("torch", line.version, "arm64"))
        if line.companion is not None:
            wanted.append((line.companion.name, line.companion.version, "arm64"))
    return wanted


@functools.cache
def _missing() -> list[str]:
    missing = []
    for project, version, arch in _wanted():
        try:
            official_wheels.fetch(project, version, arch, Log.create(), offline=True)
        except BuildError:
            missing.append(f"{project} {version} {arch}")
    return missing


@functools.cache
def _tools_missing() -> str:
    """Why the rehearsal's Mach-O tools are not here ('' when they are)."""
    try:
        for name in mac_tools.LLVM_NAMES.values():
            mac_tools.llvm_tool(name)
    except BuildError as exc:
        return str(exc)
    if importlib.util.find_spec("delocate") is None:
        return "delocate is not installed (make .venv/.stamp installs the pinned one)"
    return ""


#: Where ``make rehearse`` (.ci/run) leaves its result, which this test reuses while fresh.
MAKE_WORK = Path(__file__).resolve().parents[2] / "build" / "rehearse"


def _verdict_lines(tmp_path: Path) -> tuple[list[str], int, int]:
    """The rehearsal's verdict lines, exit status and peak scratch bytes: ``make rehearse``'s
    result when it ran on these very inputs (CI runs the rehearsal once), else a run here."""
    versions = list(catalog.load().versions)
    cache = official_wheels.default_cache()
    result = rehearse.fresh_result(MAKE_WORK, versions, cache)
    if result is None:
        work = tmp_path / "rehearse"
        ran = subprocess.run(
            [sys.executable, "-m", "intelmac_torch_builder", "rehearse", "--offline", "--work-dir", str(work)],
            capture_output=True, text=True, timeout=3000, check=False,
        )  # fmt: skip
        result = rehearse.fresh_result(work, versions, cache)
        assert result is not None, ran.stdout + ran.stderr[-4000:]
    return result["verdicts"], result["exit_code"], result["peak_bytes"]


def test_the_rehearsal_passes_on_every_line(tmp_path: Path) -> None:
    missing = _missing()
    why = ""
    if missing:
        why = (f"the official wheels the rehearsal runs on are not cached ({', '.join(missing)}): "
               "make upstream-material fetches them")  # fmt: skip
    else:
        why = _tools_missing()
    if why:
        if os.environ.get("CI") == "true" or os.environ.get("INTELMAC_REQUIRE_WHEELS") == "1":
            pytest.fail("CI=true: " + why)
        pytest.skip(why)
    lines, code, peak = _verdict_lines(tmp_path)
    out = "\n".join(lines)
    assert code == 0, out
    rows = [ROW.match(row) for row in lines]
    verdicts = {(m["subject"], m["stage"], m["check"]): m["status"] for m in rows if m}
    assert "FAIL" not in verdicts.values(), out
    assert peak <= rehearse.PEAK_LIMIT, f"peak scratch {peak / 1000**3:.2f} GB, above 3 GB"
    for line in catalog.load().lines:
        subjects = [f"torch {line.version}"]
        if line.companion is not None:
            subjects.append(f"{line.companion.name} {line.companion.version}")
        for subject in subjects:
            # Each stage ran on each wheel, and each said what it could not check.
            # delocate, relocate and the repair's Mach-O checks ran for real (repair()), and
            # every edited binary was signed again.
            for stage, check in (("fetch", "official wheel"), ("build", "shaped as built"),
                                 ("repair", "Mach-O checks, delocate, relocate"), ("repair", "signing"),
                                 ("verify", "patched code"), ("verify", "RECORD hashes"),
                                 ("verify", "library paths"), ("verify", "tags"), ("verify", "build info"),
                                 ("index", "index and install"), ("index", "no-op rebuild")):  # fmt: skip
                assert verdicts.get((subject, stage, check)) == "ok", (subject, stage, check, out)
            repaired = next(row for row in lines if ROW.match(row) and row.split()[1:4] == [*subject.split(), "repair"])
            assert "--require-archs arm64" in repaired and "arm64 required and tagged" in repaired, repaired
        assert verdicts.get((f"torch {line.version}", "verify", "OpenMP layout")) == "ok", out
        assert verdicts.get((f"torch {line.version}", "verify", "compiled patch")) == "n/a", out
        if line.companion is not None:
            subject = f"{line.companion.name} {line.companion.version}"
            for check in ("image codecs", "MPS kernels", "links our libtorch", "requires torch"):
                assert verdicts.get((subject, "verify", check)) == "ok", (subject, check, out)
    # Only the compiled patch cannot run on upstream's binaries; the output names the tools.
    assert all(status != "n/a" or key[2] == "compiled patch" for key, status in verdicts.items()), out
    assert all(name in out for name in ("delocate-wheel", "llvm-otool", "llvm-install-name-tool", "llvm-lipo")), out
    # delocate, relocate, the Mach-O checks and the signing ran for real on the x86_64 wheel.
    x86 = f"torch {rehearse.X86_TORCH} x86_64"
    for check in ("Mach-O checks, delocate, relocate", "signing"):
        assert verdicts.get((x86, "repair", check)) == "ok", (check, out)
    for check in ("RECORD hashes", "library paths", "OpenMP layout"):
        assert any(key[0] == x86 and key[2].startswith(f"{check} (x86_64") and status == "ok"
                   for key, status in verdicts.items()), (check, out)  # fmt: skip


#: One verdict line of the rehearsal: status, subject, stage, check: detail.
ROW = re.compile(r"^(?P<status>ok|n/a|FAIL)\s+(?P<subject>\S+ \S+(?: x86_64)?)\s+(?P<stage>\w+)\s+"
                 r"(?P<check>[^:]+): (?P<detail>.*)$")  # fmt: skip
