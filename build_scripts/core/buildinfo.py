"""Build information: what a wheel was built from and with.

It goes into the wheel as ``<dist-info>/INTELMAC_BUILD.json`` (listed in RECORD with its
hash; ``torch.backends.mps.build_info()`` reads it) and beside the wheel in the index as
``<wheel>.build.json``, which also carries the wheel's own sha256.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import shutil
import subprocess
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import BuildError
from . import _fsutil, contract

FILENAME = contract.BUILD_INFO_FILE

#: The keys the shared contract (issue 3's build_info()) promises; verify checks them.
REQUIRED_KEYS = contract.BUILD_INFO_KEYS


def _first_line(argv: list[str]) -> str | None:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (result.stdout or result.stderr).strip()
    return text.splitlines()[0] if result.returncode == 0 and text else None


def toolchain(
    python: str, *, macos: bool, libomp: Path | None, launcher: str | None
) -> dict[str, str | None]:
    """Versions of the tools that shaped the binary; None for a tool that is absent."""
    bin_dir = Path(python).parent
    tools: dict[str, str | None] = {
        "python": _first_line([python, "--version"]),
        "cc": _first_line(["cc", "--version"]),
        "cmake": _first_line([str(bin_dir / "cmake"), "--version"])
        or _first_line(["cmake", "--version"]),
        "ninja": _first_line([str(bin_dir / "ninja"), "--version"])
        or _first_line(["ninja", "--version"]),
        "setuptools": _first_line(
            [python, "-c", "import setuptools; print(setuptools.__version__)"]
        ),
        "compiler_launcher": _first_line([launcher, "--version"]) if launcher else None,
    }
    if macos:
        tools["xcode"] = _first_line(["xcodebuild", "-version"])
        tools["macos_sdk"] = _first_line(["xcrun", "--show-sdk-version"])
        tools["macos"] = _first_line(["sw_vers", "-productVersion"])
        # Homebrew's opt/libomp is a symlink into Cellar/libomp/<version>.
        tools["libomp"] = libomp.resolve().name if libomp is not None else None
    return tools


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def dist_info_dir(names: list[str]) -> str:
    tops = {name.split("/", 1)[0] for name in names if re.match(r"^[^/]+\.dist-info/", name)}
    if len(tops) != 1:
        raise BuildError(
            f"expected one .dist-info folder in the wheel, found {sorted(tops) or 'none'}"
        )
    return tops.pop()


def _member(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=time.gmtime()[:6])
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def embed(
    wheel: Path,
    destination: Path,
    info: dict[str, Any],
    missing: Mapping[str, bytes] | None = None,
) -> list[str]:
    """Copy ``wheel`` to ``destination`` with INTELMAC_BUILD.json added to its dist-info.

    ``missing``: files (path in the wheel -> contents) to add where the wheel has none of
    that name, such as ``torch/include/omp.h``. RECORD is rewritten with the new files'
    hashes; every other member is copied as it is. Returns the paths that were added.
    """
    payload = (json.dumps(info, indent=2, sort_keys=True) + "\n").encode()
    temp = destination.with_name(f".{destination.name}.tmp")
    with zipfile.ZipFile(wheel) as source:
        names = source.namelist()
        dist_info = dist_info_dir(names)
        record_name = f"{dist_info}/RECORD"
        ours = f"{dist_info}/{FILENAME}"
        rows = list(csv.reader(io.StringIO(source.read(record_name).decode())))
        rows = [row for row in rows if row and row[0] not in (ours, record_name)]
        added = {name: data for name, data in (missing or {}).items() if name not in names}
        for name, data in sorted(added.items()):
            rows.append([name, record_hash(data), str(len(data))])
        rows.append([ours, record_hash(payload), str(len(payload))])
        rows.append([record_name, "", ""])
        record = io.StringIO()
        csv.writer(record, lineterminator="\n").writerows(rows)
        destination.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(temp, "w", compression=zipfile.ZIP_DEFLATED) as out:
            for item in source.infolist():
                if item.filename in (ours, record_name):
                    continue
                with source.open(item) as src, out.open(item, "w") as dst:
                    shutil.copyfileobj(src, dst, _fsutil.CHUNK)
            for name, data in sorted(added.items()):
                out.writestr(_member(name), data)
            out.writestr(_member(ours), payload)
            out.writestr(_member(record_name), record.getvalue())
    temp.replace(destination)
    return sorted(added)


def read_embedded(wheel: Path) -> dict[str, Any] | None:
    with zipfile.ZipFile(wheel) as archive:
        name = f"{dist_info_dir(archive.namelist())}/{FILENAME}"
        try:
            data = json.loads(archive.read(name))
        except KeyError:
            return None
    return data if isinstance(data, dict) else None
