"""Upstream's own wheels of a release, fetched once, resumable and checked against the index's hash.

Which file and which sha256: pip resolves the requirement for the wheel's platform
(``pip install --dry-run --report``, which reads the index's metadata and never downloads the
wheel) and reports the file's URL with the sha256 the index publishes for it. The download
then goes through the project's own resumable helper (core/_download.py) into a ``.part``
file, whose hash must match before it is moved into place; a cached wheel is hashed again at
each use. The resolved URL and hash are kept beside the wheel, so a later run needs no
network at all (``offline=True`` refuses to reach for it: ``make test`` stays hermetic).

pip runs with the user's own configuration (their index, extra indexes, certificates) except
for one setting: ``PIP_CONSTRAINT`` points at an empty file, so that a site-wide constraints
file capping torch or torchvision cannot hide the release asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core import _download, _fsutil
from ..core._locks import held
from ..core._log import Log
from ..core.errors import BuildError
from ..core.options import FetchSettings

#: The CPython whose wheels are taken: every release from 2.2 to 2.15 has macOS wheels for it.
PYTHON = "3.12"
#: pip platform tags per architecture, newest first (each release has one of them).
PLATFORMS = {
    "arm64": ("macosx_15_0_arm64", "macosx_14_0_arm64", "macosx_13_0_arm64", "macosx_11_0_arm64"),
    "x86_64": ("macosx_11_0_x86_64", "macosx_10_15_x86_64", "macosx_10_9_x86_64"),
}  # fmt: skip


@dataclass(frozen=True)
class OfficialWheel:
    project: str
    version: str
    arch: str
    filename: str
    url: str
    sha256: str  # as the index publishes it


def default_cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pytorch-upstream" / "official-wheels"


def _resolved_path(cache: Path, project: str, version: str, arch: str) -> Path:
    return cache / f"{project}-{version}-{arch}.json"


def pip_environment() -> dict[str, str]:
    """pip's environment: the user's settings, with any constraints file replaced by an empty one."""
    return dict(os.environ, PIP_CONSTRAINT=os.devnull)


def resolve(project: str, version: str, arch: str) -> OfficialWheel:
    """Ask pip, as this user configured it, which file upstream published and its sha256."""
    platforms = [arg for tag in PLATFORMS[arch] for arg in ("--platform", tag)]
    with tempfile.TemporaryDirectory(prefix="official-wheel-") as folder:
        report = Path(folder) / "report.json"
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
             "--no-deps", "--only-binary=:all:", "--python-version", PYTHON,
             "--implementation", "cp", *platforms, "--target", str(Path(folder) / "target"),
             "--report", str(report), f"{project}=={version}"],
            env=pip_environment(), capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
        if result.returncode != 0 or not report.is_file():
            raise BuildError(
                f"pip found no official {project} {version} wheel for macOS {arch} "
                f"(CPython {PYTHON}):\n{result.stderr.strip()[-2000:]}\n"
                "Check the network and pip's index settings (pip config list)."
            )
        installs = json.loads(report.read_text()).get("install") or []
    info = installs[0]["download_info"] if installs else {}
    sha256 = (info.get("archive_info") or {}).get("hashes", {}).get("sha256")
    url = info.get("url", "")
    if not sha256 or not url.endswith(".whl"):
        raise BuildError(
            f"the index gave {url or 'no file'} for {project} {version} without a published "
            "sha256; the rehearsal only takes wheels it can check. Use an index that publishes "
            "hashes (PEP 503 #sha256= fragments)."
        )
    return OfficialWheel(project, version, arch, url.rsplit("/", 1)[-1], url, sha256)


def _cached(cache: Path, project: str, version: str, arch: str) -> OfficialWheel | None:
    data = _fsutil.read_json(_resolved_path(cache, project, version, arch))
    try:
        return OfficialWheel(**data) if isinstance(data, dict) else None
    except TypeError:
        return None


def fetch(
    project: str,
    version: str,
    arch: str,
    log: Log,
    *,
    cache: Path | None = None,
    settings: FetchSettings = FetchSettings(),
    offline: bool = False,
) -> tuple[Path, OfficialWheel]:
    """The official wheel's path in ``cache`` (downloaded first when it is not there yet), and
    where it came from."""
    cache = cache or default_cache()
    with held(cache / "locks" / f"{project}-{version}-{arch}.lock",
              what=f"the official {project} {version} wheel", wait=True, log=log):  # fmt: skip
        wheel = _cached(cache, project, version, arch)
        if wheel is None:
            if offline:
                raise BuildError(
                    f"the official {project} {version} macOS {arch} wheel is not in {cache}: "
                    "fetch it once with `make rehearse` (it needs the package index)."
                )
            wheel = resolve(project, version, arch)
        path = cache / wheel.filename
        if path.is_file() and _fsutil.sha256_file(path) == wheel.sha256:
            _fsutil.write_json_atomic(_resolved_path(cache, project, version, arch), asdict(wheel))
            return path, wheel
        if offline:
            raise BuildError(
                f"{path} is missing or does not hash to the index's {wheel.sha256}: fetch it "
                "again with `make rehearse` (it needs the package index)."
            )
        path.unlink(missing_ok=True)
        _download.download(wheel.url, path, settings, log)
        part = path.with_name(path.name + ".part")
        got = _fsutil.sha256_file(part)
        if got != wheel.sha256:
            part.unlink()
            raise BuildError(
                f"{wheel.url} hashed to {got}, but the index publishes {wheel.sha256}; the "
                "download was discarded. Run again; if it persists, the mirror serves another file."
            )
        part.replace(path)
        path.with_name(path.name + ".part.json").unlink(missing_ok=True)
        _fsutil.write_json_atomic(_resolved_path(cache, project, version, arch), asdict(wheel))
        log.info(f"{wheel.filename}: sha256 {wheel.sha256} as the index publishes it")
        return path, wheel
