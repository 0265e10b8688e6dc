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

from intelmac_torch_builder.ci import wheel_names


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


def pip_download(index: str, dest: Path, *requirement: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # only our index, whatever this machine's pip config says
    return subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--index-url",
                           index, "--dest", str(dest), *requirement], capture_output=True,
                          text=True, timeout=300, check=False, env=env)


def write_sums(sums: Path, order: list[str], *wheels: Path) -> None:
    """releases/<tag>/SHA256SUMS for wheels under assets/<tag>/, and ORDER."""
    for wheel in wheels:
        folder = sums / wheel.parent.name
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "SHA256SUMS").open("a") as handle:
            handle.write(sums_line(wheel))
    (sums / "ORDER").write_text("".join(f"{tag}\n" for tag in order))


@pytest.fixture()
def releases(tmp_path: Path) -> tuple[Path, Path]:
    """v2.14.1-1, v2.15.0-1, then v2.15.0-2: a rebuild of the same version with other bytes,
    named with its build number by ci/wheel_names.py as the attest job does."""
    assets = tmp_path / "assets"
    old = build_fake_wheel(assets / "v2.15.0-1", default=True)
    new = build_fake_wheel(assets / "v2.15.0-2")
    assert old.name == new.name and old.read_bytes() != new.read_bytes()
    assert wheel_names.main(["--tag", "v2.15.0-2", str(new.parent)]) == 0
    assert wheel_names.main(["--tag", "v2.15.0-1", str(old.parent)]) == 0  # the first: as built
    (new,) = new.parent.glob("*.whl")
    assert new.name == "torch-2.15.0+intelmac-2-py3-none-any.whl" and old.is_file()
    other = build_fake_wheel(assets / "v2.14.1-1", version="2.14.1+intelmac")
    write_sums(tmp_path / "releases", ["v2.14.1-1", "v2.15.0-1", "v2.15.0-2"], old, new, other)
    return tmp_path / "releases", assets


def test_index_links_each_build_under_its_own_name_with_its_hash(
        tmp_path: Path, releases: tuple[Path, Path]) -> None:
    sums, assets = releases
    result = publish(sums, tmp_path / "site", "https://github.com/me/repo/releases/download")
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "site" / "simple" / "torch" / "index.html").read_text()
    for tag, name in (("v2.15.0-1", "torch-2.15.0+intelmac-py3-none-any.whl"),
                      ("v2.15.0-2", "torch-2.15.0+intelmac-2-py3-none-any.whl")):
        digest = hashlib.sha256((assets / tag / name).read_bytes()).hexdigest()
        assert (f'href="https://github.com/me/repo/releases/download/{tag}/'
                f'{name.replace("+", "%2B")}#sha256={digest}"') in page
        assert page.count(f"{name}</a>") == 1
    assert "torch-2.14.1+intelmac" in page  # older releases stay installable
    assert '<a href="torch/">torch</a>' in (tmp_path / "site" / "simple" / "index.html").read_text()


def test_the_index_refuses_a_published_name_with_other_bytes(tmp_path: Path) -> None:
    """A -2 rebuild uploaded under the -1 wheel's name would break every hash-pinned install."""
    assets = tmp_path / "assets"
    old = build_fake_wheel(assets / "v2.15.0-1", default=True)
    new = build_fake_wheel(assets / "v2.15.0-2")
    write_sums(tmp_path / "releases", ["v2.15.0-1", "v2.15.0-2"], old, new)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("the index deployed before")
    result = publish(tmp_path / "releases", tmp_path / "site", "https://example.invalid/d")
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("torch-2.15.0+intelmac-py3-none-any.whl is published by v2.15.0-1 with sha256 "
            f"{hashlib.sha256(old.read_bytes()).hexdigest()} and again by v2.15.0-2") in result.stderr
    assert "never changes bytes" in result.stderr and "ci/wheel_names.py" in result.stderr
    assert (tmp_path / "site" / "index.html").read_text() == "the index deployed before"


def test_the_same_file_in_two_releases_is_indexed_once_from_the_first(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    wheel = build_fake_wheel(assets / "v2.15.0-1")
    again = assets / "v2.15.0-2" / wheel.name
    again.parent.mkdir()
    again.write_bytes(wheel.read_bytes())
    write_sums(tmp_path / "releases", ["v2.15.0-1", "v2.15.0-2"], wheel, again)
    result = publish(tmp_path / "releases", tmp_path / "site", "https://example.invalid/d")
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "site" / "simple" / "torch" / "index.html").read_text()
    assert page.count(f"{wheel.name}</a>") == 1 and "/v2.15.0-1/" in page


def test_pip_installs_from_the_index_and_checks_the_hash(tmp_path: Path, httpserver: HTTPServer,
                                                         releases: tuple[Path, Path]) -> None:
    sums, assets = releases
    assert publish(sums, tmp_path / "site", httpserver.url_for("/download")).returncode == 0
    serve(httpserver, tmp_path / "site", assets)
    result = pip_download(httpserver.url_for("/simple"), tmp_path / "got", "torch==2.15.0+intelmac")
    assert result.returncode == 0, result.stdout + result.stderr
    (got,) = (tmp_path / "got").iterdir()
    # Of one version's files, pip takes the highest build number: the rebuild.
    assert got.name == "torch-2.15.0+intelmac-2-py3-none-any.whl"
    assert got.read_bytes() == (assets / "v2.15.0-2" / got.name).read_bytes()


def test_an_install_pinned_to_the_first_build_s_hash_still_gets_it(
        tmp_path: Path, httpserver: HTTPServer, releases: tuple[Path, Path]) -> None:
    sums, assets = releases
    assert publish(sums, tmp_path / "site", httpserver.url_for("/download")).returncode == 0
    serve(httpserver, tmp_path / "site", assets)
    first = assets / "v2.15.0-1" / "torch-2.15.0+intelmac-py3-none-any.whl"
    pinned = tmp_path / "requirements.txt"
    pinned.write_text("torch==2.15.0+intelmac --hash=sha256:"
                      f"{hashlib.sha256(first.read_bytes()).hexdigest()}\n")
    result = pip_download(httpserver.url_for("/simple"), tmp_path / "got", "--require-hashes",
                          "-r", str(pinned))
    assert result.returncode == 0, result.stdout + result.stderr
    (got,) = (tmp_path / "got").iterdir()
    assert got.read_bytes() == first.read_bytes()


def test_pip_refuses_a_wheel_that_does_not_match_the_index(tmp_path: Path, httpserver: HTTPServer,
                                                           releases: tuple[Path, Path]) -> None:
    sums, assets = releases
    assert publish(sums, tmp_path / "site", httpserver.url_for("/download")).returncode == 0
    tampered = assets / "v2.15.0-2" / "torch-2.15.0+intelmac-2-py3-none-any.whl"
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


LISTING = [
    {"tagName": "v2.15.0-2", "isDraft": False, "publishedAt": "2026-11-20T00:00:00Z"},
    {"tagName": "draft-1", "isDraft": True, "publishedAt": "2026-11-21T00:00:00Z"},
    {"tagName": "v2.15.0-1", "isDraft": False, "publishedAt": "2026-11-01T00:00:00Z"},
    {"tagName": "some-other-tag", "isDraft": False, "publishedAt": "2026-10-01T00:00:00Z"},
]


def collect(tmp_path: Path, base: str) -> subprocess.CompletedProcess[str]:
    """collect with a stand-in for the gh CLI that lists LISTING; the SHA256SUMS come over HTTP."""
    fake = tmp_path / "bin" / "gh"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f"""#!{sys.executable}
import json, sys
if sys.argv[1:3] == ["release", "list"]:
    print(json.dumps({LISTING!r}))
else:
    sys.exit("unexpected: " + " ".join(sys.argv[1:]))
""")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}", "GH_REPO": "me/repo"}
    return subprocess.run([sys.executable, "-m", "intelmac_torch_builder.ci.publish_index", "collect",
                           "--out", str(tmp_path / "r"), "--download-base", base,
                           "--retries", "3", "--backoff", "0.1"],
                          capture_output=True, text=True, timeout=120, check=False, env=env)


def flaky_sums(httpserver: HTTPServer, failures: dict[str, int]) -> list[str]:
    """Serve /download/<tag>/SHA256SUMS; each tag first answers 503 failures[tag] times."""
    seen: list[str] = []

    def handler(request: Request) -> Response:
        tag = request.path.split("/")[2]
        seen.append(tag)
        if failures.get(tag, 0) > 0:
            failures[tag] -= 1
            return Response("busy", status=503)
        return Response(f"sums of {tag}\n", content_type="application/octet-stream")

    httpserver.expect_request(re.compile("/download/.*/SHA256SUMS")).respond_with_handler(handler)
    return seen


def test_collect_downloads_every_published_release_oldest_first(tmp_path: Path,
                                                                 httpserver: HTTPServer) -> None:
    flaky_sums(httpserver, {})
    result = collect(tmp_path, httpserver.url_for("/download"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r" / "ORDER").read_text() == "v2.15.0-1\nv2.15.0-2\n"
    assert (tmp_path / "r" / "v2.15.0-2" / "SHA256SUMS").read_text() == "sums of v2.15.0-2\n"
    assert sorted(path.name for path in (tmp_path / "r" / "v2.15.0-2").iterdir()) == ["SHA256SUMS"]


def test_collect_retries_a_transient_failure(tmp_path: Path, httpserver: HTTPServer) -> None:
    seen = flaky_sums(httpserver, {"v2.15.0-1": 2})
    result = collect(tmp_path, httpserver.url_for("/download"))
    assert result.returncode == 0, result.stderr
    assert seen.count("v2.15.0-1") == 3  # two 503s, then the file
    assert "HTTP 503" in result.stderr and "retry 1/3" in result.stderr
    assert (tmp_path / "r" / "v2.15.0-1" / "SHA256SUMS").read_text() == "sums of v2.15.0-1\n"
    assert (tmp_path / "r" / "ORDER").read_text() == "v2.15.0-1\nv2.15.0-2\n"


def test_collect_fails_loudly_when_a_release_s_sums_never_come(tmp_path: Path,
                                                              httpserver: HTTPServer) -> None:
    """The index must not be rebuilt without a published release: no ORDER, exit 1."""
    seen = flaky_sums(httpserver, {"v2.15.0-2": 100})
    result = collect(tmp_path, httpserver.url_for("/download"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert seen.count("v2.15.0-2") == 4  # the first try and 3 retries, then it gives up
    assert "release v2.15.0-2 is published, but its SHA256SUMS could not be read" in result.stderr
    assert "Re-run the pages job" in result.stderr
    assert not (tmp_path / "r" / "ORDER").exists()
    built = publish(tmp_path / "r", tmp_path / "site", "https://example.invalid/d")
    assert built.returncode == 1 and not (tmp_path / "site").exists()


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
