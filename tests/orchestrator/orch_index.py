"""Package indexes over real HTTP for the install tests: ours, and a stand-in default index.

``serve_index`` puts a folder laid out as the index stage writes it (wheels beside
``simple/<project>/index.html``) on a FileServer. ``make_wheel`` writes the small pure
wheels the stand-in for the user's default index holds: the same base versions as ours,
without the local label, the way the registry carries torch and torchvision.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile
from pathlib import Path

from intelmac_torch_builder.stages import index as index_stage
from orch_server import FileServer
from packaging.utils import canonicalize_name


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    folder: Path, name: str, version: str, requires: list[str], files: dict[str, str],
    tag: str = "py3-none-any",
) -> Path:
    """A ``tag`` wheel (pure ``py3-none-any`` by default) with these files and Requires-Dist."""
    dist_info = f"{name}-{version}.dist-info"
    members = {path: text.encode() for path, text in files.items()}
    members[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    ).encode()
    members[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: orch_index\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()
    )
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in members.items():
        writer.writerow([path, _digest(data), len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    members[f"{dist_info}/RECORD"] = record.getvalue().encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in members.items():
            archive.writestr(path, data)
    return wheel


def write_simple(folder: Path) -> None:
    """A PEP 503 index over the wheels in ``folder``, in the index stage's own page format."""
    projects: dict[str, list[tuple[str, str, str]]] = {}
    for wheel in sorted(folder.glob("*.whl")):
        project = canonicalize_name(wheel.name.split("-")[0])
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        projects.setdefault(project, []).append((f"../../{wheel.name}", wheel.name, digest))
    for project, files in projects.items():
        page = folder / "simple" / project / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(index_stage.project_page(project, files))
    (folder / "simple" / "index.html").write_text(index_stage.root_page(sorted(projects)))


def serve_index(server: FileServer, folder: Path) -> str:
    """Serve ``folder``'s wheels and simple/ pages; returns the index URL (…/simple/)."""
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        relative = path.relative_to(folder).as_posix()
        server.serve(relative, path)
        if path.name == "index.html":
            # pip and uv ask for the folder URL, with its trailing slash.
            server.serve(relative[: -len("index.html")], path)
    return server.url("simple/")
