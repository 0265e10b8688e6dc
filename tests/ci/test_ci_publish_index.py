"""ci/publish_index.py: the Pages index that pip installs from, linking to release assets."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ci_support import build_fake_wheel
from pytest_httpserver import HTTPServer
from werkzeug.wrappers import Request, Response


def sums_line(path: Path) -> str:
    return f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n"


def publish(releases: Path, out: Path, base: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "intelmac_torch_builder.ci.publish_index", "build", "--releases", str(releases),
                           "--download-base", base, "--out", str(out)],
                          capture_output=True, text=True, timeout=60, check=False)


def serve(httpserver: HTTPServer, site: Path, assets: Path) -> None:
    """/simple/... from the built site, /download/<tag>/<file> from the release assets."""

    def handler(request: Request) -> Response:
        path = request.path
        if path.startswith("/download/"):
            target = assets / path.removeprefix("/download/")
        else:
            target = site / path.lstrip("/")
            if path.endswith("/"):
                target = target / "index.html"
        if not target.is_file():
            return Response("not found", status=404)
        kind = "text/html" if target.suffix == ".html" else "application/octet-stream"
        return Response(target.read_bytes(), content_type=kind)

    httpserver.expect_request(re.compile(".*")).respond_with_handler(handler)


def pip_download(index: str, dest: Path, requirement: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # only our index, whatever this machine's pip config says
    return subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--index-url",
                           index, "--dest", str(dest), requirement], capture_output=True,
                          text=True, timeout=300, check=False, env=env)


@pytest.fixture()
def releases(tmp_path: Path) -> tuple[Path, Path]:
    """Two releases: v2.15.0-1, then v2.15.0-2 re-releasing a changed wheel of the same name."""
    assets = tmp_path / "assets"
    old = build_fake_wheel(assets / "v2.15.0-1", default=True)
    new = build_fake_wheel(assets / "v2.15.0-2")
    assert old.name == new.name and old.read_bytes() != new.read_bytes()
    other = build_fake_wheel(assets / "v2.14.1-1", version="2.14.1+intelmac")
    sums = tmp_path / "releases"
    for wheel in (old, new, other):
        folder = sums / wheel.parent.name
        folder.mkdir(parents=True)
        (folder / "SHA256SUMS").write_text(sums_line(wheel))
    (sums / "ORDER").write_text("v2.14.1-1\nv2.15.0-1\nv2.15.0-2\n")
    return sums, assets


def test_index_links_each_wheel_once_with_its_hash(tmp_path: Path,
                                                   releases: tuple[Path, Path]) -> None:
    sums, assets = releases
    result = publish(sums, tmp_path / "site", "https://github.com/me/repo/releases/download")
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "site" / "simple" / "torch" / "index.html").read_text()
    new = assets / "v2.15.0-2" / "torch-2.15.0+intelmac-py3-none-any.whl"
    digest = hashlib.sha256(new.read_bytes()).hexdigest()
    assert ('href="https://github.com/me/repo/releases/download/v2.15.0-2/'
            f'torch-2.15.0%2Bintelmac-py3-none-any.whl#sha256={digest}"') in page
    assert page.count("torch-2.15.0+intelmac-py3-none-any.whl</a>") == 1
    assert "v2.15.0-1/" not in page  # replaced by the re-release
    assert "torch-2.14.1+intelmac" in page  # older releases stay installable
    assert "replaced by the one of v2.15.0-2" in result.stderr
    assert '<a href="torch/">torch</a>' in (tmp_path / "site" / "simple" / "index.html").read_text()


def test_pip_installs_from_the_index_and_checks_the_hash(tmp_path: Path, httpserver: HTTPServer,
                                                         releases: tuple[Path, Path]) -> None:
    sums, assets = releases
    assert publish(sums, tmp_path / "site", httpserver.url_for("/download")).returncode == 0
    serve(httpserver, tmp_path / "site", assets)
    result = pip_download(httpserver.url_for("/simple"), tmp_path / "got", "torch==2.15.0+intelmac")
    assert result.returncode == 0, result.stdout + result.stderr
    (got,) = (tmp_path / "got").iterdir()
    assert got.read_bytes() == (assets / "v2.15.0-2" / got.name).read_bytes()


def test_pip_refuses_a_wheel_that_does_not_match_the_index(tmp_path: Path, httpserver: HTTPServer,
                                                           releases: tuple[Path, Path]) -> None:
    sums, assets = releases
    assert publish(sums, tmp_path / "site", httpserver.url_for("/download")).returncode == 0
    tampered = assets / "v2.15.0-2" / "torch-2.15.0+intelmac-py3-none-any.whl"
    tampered.write_bytes(tampered.read_bytes() + b"\0")
    serve(httpserver, tmp_path / "site", assets)
    result = pip_download(httpserver.url_for("/simple"), tmp_path / "got", "torch==2.15.0+intelmac")
    assert result.returncode != 0 and "hash" in (result.stdout + result.stderr).lower()


@pytest.mark.parametrize(("tag", "line", "message"), [
    ("v2.15.0-1", "abc  torch-2.15.0+intelmac-py3-none-any.whl\n", "not a sha256sum line"),
    ("v2.15.0-1", f"{'0' * 64}  ../../evil.whl\n", "not a torch or torchvision wheel file name"),
    ("v2.15.0-1", f"{'0' * 64}  numpy-2.0-py3-none-any.whl\n",
     "not a torch or torchvision wheel file name"),
    ("../escape", f"{'0' * 64}  torch-2.15.0+intelmac-py3-none-any.whl\n", "not a release tag"),
])
def test_bad_input_is_refused(tmp_path: Path, tag: str, line: str, message: str) -> None:
    sums = tmp_path / "releases"
    (sums / "x").mkdir(parents=True)
    (sums / "x" / "SHA256SUMS").write_text(line)
    (sums / "ORDER").write_text(f"{tag}\n")
    if tag == "v2.15.0-1":
        (sums / "x").rename(sums / tag)
    result = publish(sums, tmp_path / "site", "https://example.invalid/d")
    assert result.returncode == 1 and message in result.stderr
    assert not (tmp_path / "site").exists()


def test_collect_downloads_every_published_release_oldest_first(tmp_path: Path) -> None:
    # A stand-in for the gh CLI: the release list and the SHA256SUMS of each release.
    fake = tmp_path / "bin" / "gh"
    fake.parent.mkdir()
    listing = [
        {"tagName": "v2.15.0-2", "isDraft": False, "publishedAt": "2026-11-20T00:00:00Z"},
        {"tagName": "draft-1", "isDraft": True, "publishedAt": "2026-11-21T00:00:00Z"},
        {"tagName": "v2.15.0-1", "isDraft": False, "publishedAt": "2026-11-01T00:00:00Z"},
        {"tagName": "some-other-tag", "isDraft": False, "publishedAt": "2026-10-01T00:00:00Z"},
    ]
    fake.write_text(f"""#!{sys.executable}
import json, pathlib, sys
args = sys.argv[1:]
if args[:2] == ["release", "list"]:
    print(json.dumps({listing!r}))
elif args[:2] == ["release", "download"]:
    folder = pathlib.Path(args[args.index("--dir") + 1])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SHA256SUMS").write_text("sums of " + args[2])
else:
    sys.exit("unexpected: " + " ".join(args))
""")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}", "GH_REPO": "me/repo"}
    result = subprocess.run([sys.executable, "-m", "intelmac_torch_builder.ci.publish_index", "collect", "--out", str(tmp_path / "r")],
                            capture_output=True, text=True, timeout=60, check=False, env=env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r" / "ORDER").read_text() == "v2.15.0-1\nv2.15.0-2\n"
    assert (tmp_path / "r" / "v2.15.0-2" / "SHA256SUMS").read_text() == "sums of v2.15.0-2"


def test_torchvision_wheels_get_their_own_page_beside_torch(tmp_path: Path,
                                                            httpserver: HTTPServer) -> None:
    # Stand-in for the torchvision wheel a release carries beside torch: only its name and
    # bytes matter to the index.
    assets = tmp_path / "assets" / "v2.14.1-1"
    torch_wheel = build_fake_wheel(assets, version="2.14.1+intelmac")
    vision = assets / "torchvision-0.29.1+intelmac-cp312-cp312-macosx_14_0_x86_64.whl"
    vision.write_bytes(b"stand-in wheel bytes")
    sums = tmp_path / "releases" / "v2.14.1-1"
    sums.mkdir(parents=True)
    (sums / "SHA256SUMS").write_text(sums_line(torch_wheel) + sums_line(vision))
    result = publish(tmp_path / "releases", tmp_path / "site", httpserver.url_for("/download"))
    assert result.returncode == 0, result.stderr
    simple = tmp_path / "site" / "simple"
    root = (simple / "index.html").read_text()
    assert '<a href="torch/">torch</a>' in root and '<a href="torchvision/">torchvision</a>' in root
    assert "torchvision" not in (simple / "torch" / "index.html").read_text()
    page = (simple / "torchvision" / "index.html").read_text()
    assert f"#sha256={hashlib.sha256(vision.read_bytes()).hexdigest()}" in page
    front = (tmp_path / "site" / "index.html").read_text()
    assert "torchvision==0.29.1+intelmac" in front and "--extra-index-url" in front
    assert "--index-url" not in front.replace("--extra-index-url", "")  # only our index named
    serve(httpserver, tmp_path / "site", tmp_path / "assets")
    got = pip_download(httpserver.url_for("/simple"), tmp_path / "got", "torch==2.14.1+intelmac")
    assert got.returncode == 0, got.stdout + got.stderr
