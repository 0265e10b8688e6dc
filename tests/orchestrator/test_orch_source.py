"""The source stage against a real local HTTP server: resume, retries, pins, safe extraction."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from intelmac_torch_builder.stages import source
from orch_fixture import tar_bytes
from orch_project import Project


def _cached(project: Project) -> Path:
    return project.cache / "downloads" / project.tarball_name


def _leftovers(folder: Path) -> list[str]:
    """Temporary folders the stages create beside their destinations."""
    return sorted(p.name for p in folder.glob(".*.tmp")) if folder.is_dir() else []


def test_download_checks_and_extracts(project: Project) -> None:
    result = project.cli("fetch")
    assert result.code == 0, result.text
    assert _cached(project).read_bytes() == project.tarball.read_bytes()
    assert not list(_cached(project).parent.glob("*.part*"))
    tree = project.work / project.version / "source"
    assert (tree / "setup.py").is_file()  # the top-level pytorch-vX folder became the tree
    assert f"sha256 OK: {project.sha256}" in result.err
    # Second run: nothing downloaded again.
    before = project.server.count(project.tarball_name)
    assert project.cli("fetch").code == 0
    assert project.server.count(project.tarball_name) == before


def test_file_url_mirror_is_checked_against_the_pin(project: Project) -> None:
    project.rewrite_catalog(url=project.tarball.as_uri())
    result = project.cli("fetch")
    assert result.code == 0, result.text
    assert f"sha256 OK: {project.sha256}" in result.err
    assert project.server.requests == []


def test_interrupted_download_resumes_with_range(project: Project) -> None:
    size = project.tarball.stat().st_size
    project.server.cut(project.tarball_name, size // 2)
    result = project.cli("fetch")
    assert result.code == 0, result.text
    ranges = [
        header for path, header in project.server.requests if path.endswith(project.tarball_name)
    ]
    assert ranges[0] is None
    assert ranges[1] == f"bytes={size // 2}-"  # resumed where the cut left off
    assert _cached(project).read_bytes() == project.tarball.read_bytes()
    assert "Resuming" in result.err


def test_part_file_from_an_earlier_run_is_resumed(project: Project) -> None:
    data = project.tarball.read_bytes()
    part = _cached(project).with_name(project.tarball_name + ".part")
    part.parent.mkdir(parents=True)
    half = len(data) // 2
    part.write_bytes(data[:half])
    part.with_name(part.name + ".json").write_text(json.dumps({"url": project.url}))
    assert project.cli("fetch").code == 0
    assert project.server.requests[-1][1] == f"bytes={half}-"
    assert _cached(project).read_bytes() == data


def test_server_errors_are_retried_then_succeed(project: Project) -> None:
    project.server.fail(project.tarball_name, 500, 503)
    result = project.cli("fetch", "--retries", "3")
    assert result.code == 0, result.text
    assert project.server.count(project.tarball_name) == 3
    assert "HTTP 500" in result.err and "retry 1/3" in result.err


def test_persistent_500_ends_in_a_clear_error(project: Project) -> None:
    project.server.fail(project.tarball_name, *[500] * 5)
    result = project.cli("fetch", "--retries", "2")
    assert result.code == 1
    assert project.server.count(project.tarball_name) == 3
    assert "Download failed after 3 attempts: HTTP 500" in result.err
    assert "Traceback" not in result.err


def test_404_is_retried_then_says_the_file_is_not_there(project: Project) -> None:
    project.rewrite_catalog(url=project.server.url("missing.tar.gz"))
    result = project.cli("fetch", "--retries", "1")
    assert result.code == 1
    assert project.server.count("missing.tar.gz") == 2
    assert "HTTP 404" in result.err and "The file is not there" in result.err


def test_timeouts_are_retried_then_fail_clearly(project: Project) -> None:
    for _ in range(2):
        project.server.stall(project.tarball_name, 1.5)
    result = project.cli("fetch", "--retries", "1", "--timeout", "0.3")
    assert result.code == 1
    assert project.server.count(project.tarball_name) == 2
    assert "Download failed after 2 attempts" in result.err
    assert "timed out" in result.err


def test_checksum_mismatch_shows_both_hashes_and_deletes_the_file(project: Project) -> None:
    wrong = "0" * 64
    project.rewrite_catalog(sha256=wrong)
    result = project.cli("fetch")
    assert result.code == 1
    assert f"expected {wrong}" in result.err
    assert f"actual   {project.sha256}" in result.err
    assert "It was deleted" in result.err
    assert not list(
        (project.cache / "downloads").iterdir() if (project.cache / "downloads").exists() else []
    )
    assert not (project.work / project.version / "source").exists()


def test_unpinned_line_needs_trust_on_first_use_and_records_the_pin(project: Project) -> None:
    project.rewrite_catalog(sha256=None)
    refused = project.cli("fetch")
    assert refused.code == 1
    assert "--trust-on-first-use" in refused.err
    assert project.server.count(project.tarball_name) == 0

    trusted = project.cli("fetch", "--trust-on-first-use")
    assert trusted.code == 0, trusted.text
    assert "TRUST ON FIRST USE" in trusted.err and project.sha256 in trusted.err
    lock = project.catalog.with_name("catalog.lock.yaml")
    pins = yaml.safe_load(lock.read_text())["pins"]
    assert pins[project.version]["sha256"] == project.sha256

    # Later runs hold the server to the recorded pin, flag or not.
    shutil.rmtree(project.cache)
    project.tarball.write_bytes(project.tarball.read_bytes() + b"\0" * 512)
    changed = project.cli("fetch")
    assert changed.code == 1
    assert f"expected {project.sha256}" in changed.err
    assert "recorded by trust on first use" in changed.err


def test_catalog_pin_and_recorded_pin_disagree(project: Project) -> None:
    lock = project.catalog.with_name("catalog.lock.yaml")
    lock.write_text(yaml.safe_dump({"pins": {project.version: {"sha256": "1" * 64}}}))
    result = project.cli("fetch")
    assert result.code == 1
    assert "Two different sha256 pins" in result.err


UNSAFE = {
    "absolute": (tarfile.TarInfo("/tmp/evil"), b"x", "absolute path"),
    "traversal": (tarfile.TarInfo("pytorch-v1.0.0/../../evil"), b"x", "climbs out"),
    "symlink": (None, None, "outside the tree"),
    "absolute-symlink": (None, None, "absolute path"),
    "hardlink": (None, None, "outside the tree"),
    "device": (None, None, "device"),
}


def _unsafe_member(case: str) -> tuple[tarfile.TarInfo, bytes | None]:
    info, data, _ = UNSAFE[case]
    if info is not None:
        return info, data
    info = tarfile.TarInfo("pytorch-v1.0.0/link")
    if case == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, "../../etc/passwd"
    elif case == "absolute-symlink":
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    elif case == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, "../outside"
    else:
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info, None


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_tarballs_are_refused(project: Project, case: str) -> None:
    good = tarfile.TarInfo("pytorch-v1.0.0/setup.py")
    bad_archive = project.root / "bad.tar.gz"
    bad_archive.write_bytes(tar_bytes([(good, b"print()\n"), _unsafe_member(case)]))
    result = project.cli("fetch", "--source", str(bad_archive))
    assert result.code == 1
    assert "Refusing to extract bad.tar.gz" in result.err
    assert UNSAFE[case][2] in result.err
    version_dir = project.work / project.version
    assert not (version_dir / "source").exists()
    assert _leftovers(version_dir) == []
    assert not (project.root / "evil").exists()


def test_links_inside_the_tree_are_fine(project: Project) -> None:
    link = tarfile.TarInfo("pytorch-v1.0.0/docs/setup-link.py")
    link.type, link.linkname = tarfile.SYMTYPE, "../setup.py"
    archive = project.root / "ok.tar.gz"
    archive.write_bytes(
        tar_bytes([(tarfile.TarInfo("pytorch-v1.0.0/setup.py"), b"print()\n"), (link, None)])
    )
    assert project.cli("fetch", "--source", str(archive)).code == 0
    tree = project.work / project.version / "source"
    assert os.readlink(tree / "docs" / "setup-link.py") == "../setup.py"


def test_local_tarball_with_wrong_sha256_is_kept_and_refused(project: Project) -> None:
    # Not the release tarball's name: only --sha256 checks it.
    copy = project.root / "my-copy.tar.gz"
    shutil.copyfile(project.tarball, copy)
    result = project.cli("fetch", "--source", str(copy), "--sha256", "2" * 64)
    assert result.code == 1
    assert "expected " + "2" * 64 in result.err and "left where it is" in result.err
    assert copy.exists()
    ok = project.cli("fetch", "--source", str(copy), "--sha256", project.sha256)
    assert ok.code == 0, ok.text
    assert project.server.requests == []  # offline: the server was never asked


def test_a_local_tarball_is_hashed_again_only_when_it_changes(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """A no-op `make build` from a local tarball reads its hash from the work dir's note;
    a changed tarball (new content, or only a rewrite) is hashed and checked again."""
    copy = project.root / "my-copy.tar.gz"
    shutil.copyfile(project.tarball, copy)
    assert project.cli("fetch", "--source", str(copy), "--sha256", project.sha256).code == 0
    note = project.work / project.version / source.LOCAL_TARBALL_NOTE
    assert json.loads(note.read_text())["sha256"] == project.sha256
    hashed: list[Path] = []
    real = source._fsutil.sha256_file
    monkeypatch.setattr(source._fsutil, "sha256_file", lambda path: hashed.append(path) or real(path))
    again = project.cli("fetch", "--source", str(copy), "--sha256", project.sha256)
    assert again.code == 0 and "Source tree up to date" in again.err, again.text
    assert hashed == []
    # The same bytes written again (as a copy over it would): hashed, and still the same tree.
    copy.write_bytes(copy.read_bytes())
    again = project.cli("fetch", "--source", str(copy), "--sha256", project.sha256)
    assert again.code == 0 and "Source tree up to date" in again.err, again.text
    assert hashed == [copy]
    # Other content under the old pin: refused; with its own pin: extracted afresh.
    copy.write_bytes(tar_bytes([(tarfile.TarInfo("pytorch-v1.0.0/setup.py"), b"print('changed')\n")]))
    refused = project.cli("fetch", "--source", str(copy), "--sha256", project.sha256)
    assert refused.code == 1 and f"expected {project.sha256}" in refused.err, refused.text
    changed = hashlib.sha256(copy.read_bytes()).hexdigest()
    again = project.cli("fetch", "--source", str(copy), "--sha256", changed)
    assert again.code == 0 and "Source tree up to date" not in again.err, again.text
    assert (project.work / project.version / "source" / "setup.py").read_text() == "print('changed')\n"


def test_local_release_tarball_is_checked_against_the_catalog_pin(project: Project) -> None:
    # A file named like the release tarball, given without SHA256, with other content.
    elsewhere = project.root / "downloads-elsewhere" / project.tarball_name
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(
        tar_bytes([(tarfile.TarInfo("pytorch-v1.0.0/setup.py"), b"print('not the release')\n")])
    )
    actual = hashlib.sha256(elsewhere.read_bytes()).hexdigest()
    result = project.cli("fetch", "--source", str(elsewhere))
    assert result.code == 1, result.text
    assert f"expected {project.sha256}" in result.err and f"actual   {actual}" in result.err
    assert "catalog" in result.err and "left where it is" in result.err
    assert elsewhere.exists()
    assert not (project.work / project.version / "source").exists()
    # The real release tarball, from a local folder: checked against the pin, no warning.
    ok = project.cli("fetch", "--source", str(project.tarball))
    assert ok.code == 0, ok.text
    assert f"sha256 OK: {project.sha256}" in ok.err
    assert "not checked against any pin" not in ok.err
    assert project.server.requests == []


def test_other_local_tarball_without_sha256_gets_the_warning(project: Project) -> None:
    copy = project.root / "my-copy.tar.gz"
    shutil.copyfile(project.tarball, copy)
    result = project.cli("fetch", "--source", str(copy))
    assert result.code == 0, result.text
    assert "my-copy.tar.gz is not checked against any pin" in result.err


def test_missing_source_path_says_no_such_file(project: Project) -> None:
    missing = project.root / "nowhere" / "pytorch-v1.0.0.tar.gz"
    result = project.cli("fetch", "--source", str(missing))
    assert result.code == 1
    assert f"no such file or directory ({missing})" in result.err
    assert "Traceback" not in result.err


def test_truncated_local_tarball_says_incomplete_and_stays(project: Project) -> None:
    data = project.tarball.read_bytes()
    truncated = project.root / "half.tar.gz"
    truncated.write_bytes(data[: len(data) // 2])
    result = project.cli("fetch", "--source", str(truncated))
    assert result.code == 1, result.text
    assert f"{truncated} is incomplete" in result.err
    assert "Download it again" in result.err and "left where it is" in result.err
    assert "Refusing to extract" not in result.err
    assert truncated.exists()
    assert _leftovers(project.work / project.version) == []


def test_truncated_download_is_removed_from_the_cache(project: Project) -> None:
    data = project.tarball.read_bytes()
    truncated = project.root / "mirror" / project.tarball_name
    truncated.parent.mkdir()
    truncated.write_bytes(data[: len(data) // 2])
    digest = hashlib.sha256(truncated.read_bytes()).hexdigest()
    project.rewrite_catalog(url=truncated.as_uri(), sha256=None)
    result = project.cli("fetch", "--sha256", digest)
    assert result.code == 1, result.text
    assert "is incomplete" in result.err and "run again to download it again" in result.err
    assert not _cached(project).exists()


def test_local_directory_source(project: Project) -> None:
    tree = project.root / "upstream" / f"pytorch-v{project.version}"
    result = project.cli("fetch", "--source", str(tree))
    assert result.code == 0, result.text
    assert (project.work / project.version / "source" / "setup.py").read_text() == (
        tree / "setup.py"
    ).read_text()
    record = json.loads((project.work / project.version / "source.json").read_text())
    assert record["kind"] == "directory" and record["sha256"] is None


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always", *args],
        cwd=cwd, check=True, capture_output=True,
    )  # fmt: skip


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_source_is_a_shallow_clone_of_the_tag_with_submodules(project: Project) -> None:
    sub = project.root / "third_party_repo"
    sub.mkdir()
    (sub / "vendored.h").write_text("// third party\n")
    _git("init", "-q", "-b", "main", ".", cwd=sub)
    _git("add", ".", cwd=sub)
    _git("commit", "-q", "-m", "third party", cwd=sub)

    repo = project.root / "upstream" / f"pytorch-v{project.version}"
    _git("init", "-q", "-b", "main", ".", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("commit", "-q", "-m", "old", cwd=repo)
    _git("submodule", "add", "-q", sub.as_uri(), "third_party/vendored", cwd=repo)
    _git("commit", "-q", "-m", "release", cwd=repo)
    _git("tag", f"v{project.version}", cwd=repo)

    result = project.cli("fetch", "--source", f"git+{repo.as_uri()}")
    assert result.code == 0, result.text
    tree = project.work / project.version / "source"
    assert (tree / "third_party" / "vendored" / "vendored.h").is_file()
    depth = subprocess.run(
        ["git", "-C", str(tree), "rev-list", "--count", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert depth.stdout.strip() == "1"  # shallow: only the tagged commit
    record = json.loads((project.work / project.version / "source.json").read_text())
    assert record["kind"] == "git" and len(record["commit"]) == 40


def test_dry_run_fetch_touches_nothing(project: Project) -> None:
    result = project.cli("fetch", "--dry-run")
    assert result.code == 0
    assert f"download {project.url}" in result.out
    assert project.server.requests == []
    assert not project.work.exists() and not project.cache.exists()


def test_check_member_unit() -> None:
    archive = Path("x.tar")
    safe = tarfile.TarInfo("a/b/c")
    source.check_member(safe, archive)
    link = tarfile.TarInfo("a/b/l")
    link.type, link.linkname = tarfile.SYMTYPE, "../../c"  # a/c: still inside
    source.check_member(link, archive)
    link.linkname = "../../../c"
    with pytest.raises(source.UnsafeArchive):
        source.check_member(link, archive)


def test_one_attempt_reads_attempt(project: Project) -> None:
    project.server.fail(project.tarball_name, 500)
    result = project.cli("fetch", "--retries", "0")
    assert result.code == 1
    assert "Download failed after 1 attempt: HTTP 500" in result.err


def test_a_refused_connection_says_so(project: Project) -> None:
    # A port nobody listens on: bound, then closed again.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    project.rewrite_catalog(url=f"http://127.0.0.1:{port}/{project.tarball_name}")
    result = project.cli("fetch", "--retries", "0")
    assert result.code == 1
    assert f"connection refused by 127.0.0.1:{port}" in result.err, result.err


def test_a_failed_dns_lookup_says_so(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    # The one name this test makes unresolvable; every other lookup goes to the real resolver
    # (and nothing leaves 127.0.0.1: the name is never looked up for real).
    real = socket.getaddrinfo

    def lookup(host: object, *args: object, **kwargs: object) -> object:
        if host == "mirror.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    project.rewrite_catalog(url=f"http://mirror.invalid/{project.tarball_name}")
    result = project.cli("fetch", "--retries", "0")
    assert result.code == 1
    assert "DNS lookup of mirror.invalid failed" in result.err, result.err


def test_a_timeout_says_how_long_it_waited(project: Project) -> None:
    project.server.stall(project.tarball_name, 1.5)
    result = project.cli("fetch", "--retries", "0", "--timeout", "0.3")
    assert result.code == 1
    assert "timed out: no answer within 0.3 s" in result.err, result.err


def test_a_corrupt_cached_download_goes_with_its_hash_note(project: Project) -> None:
    assert project.cli("fetch").code == 0
    cached = _cached(project)
    note = cached.with_name(cached.name + ".sha256.json")
    assert note.is_file()
    cached.write_bytes(b"not the release")  # size and mtime change: the note is stale
    project.server.fail(project.tarball_name, 500)
    result = project.cli("fetch", "--retries", "0")
    assert result.code == 1
    assert "downloading again" in result.err
    assert not cached.exists() and not note.exists()
