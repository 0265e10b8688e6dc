"""A tag's draft between runs (ci/draft.py): what a later run still builds, and adding to the
draft without replacing what it holds. Publishing (whole, or a subset on purpose) is
ci/release_status.py's, tested in test_ci_release_status.py."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ci_support import pinned_catalog
from intelmac_torch_builder.core import catalog as catalog_module
from intelmac_torch_builder.core.errors import BuildError

from intelmac_torch_builder.ci import draft


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> catalog_module.Catalog:
    return catalog_module.load(pinned_catalog(tmp_path_factory.mktemp("catalog")))


def wheels(version: str, vision: str, pythons: list[str], py3_none: bool = False) -> list[str]:
    names = []
    for python in pythons:
        cp = "cp" + python.replace(".", "")
        names.append(f"torch-{version}+intelmac-{cp}-{cp}-macosx_14_0_x86_64.whl")
        tag = "py3-none" if py3_none else f"{cp}-{cp}"
        names.append(f"torchvision-{vision}+intelmac-{tag}-macosx_14_0_x86_64.whl")
    return sorted(set(names))


def test_a_later_run_builds_only_the_pairs_the_draft_lacks(catalog: catalog_module.Catalog) -> None:
    pythons = list(catalog.line("2.14.1").python)
    assert draft.pending_pairs(catalog, "v2.14.1-1", []) == [("2.14.1", p) for p in pythons]
    held = wheels("2.14.1", "0.29.1", pythons[:-1])
    assert draft.pending_pairs(catalog, "v2.14.1-1", held) == [("2.14.1", pythons[-1])]
    assert draft.pending_pairs(catalog, "v2.14.1-1", wheels("2.14.1", "0.29.1", pythons)) == []
    # A torch wheel without its torchvision is not there yet.
    torch_only = [name for name in held if name.startswith("torch-")]
    assert len(draft.pending_pairs(catalog, "v2.14.1-1", torch_only)) == len(pythons)
    # A py3-none torchvision serves every Python (2.15.0's 0.29.2).
    newer = list(catalog.line("2.15.0").python)
    assert draft.pending_pairs(catalog, "v2.15.0-1", wheels("2.15.0", "0.29.2", newer, True)) == []


def test_add_never_replaces_what_the_draft_holds() -> None:
    plan = draft.plan_add({"a.whl": "1", "b.whl": "2", "c.whl": "3"},
                          {"a.whl": "1", "b.whl": "9"})
    assert plan == draft.AddPlan(upload=("c.whl",), kept=("b.whl",))


def test_sums_cover_the_drafts_wheels() -> None:
    assert draft.sums_text({"b.whl": "2" * 64, "a.whl": "1" * 64, "SHA256SUMS": "x"}) == (
        f"{'1' * 64}  a.whl\n{'2' * 64}  b.whl\n")


def test_merge_sums_keeps_each_line_and_adds_the_new_ones() -> None:
    existing = f"{'2' * 64}  b.whl\n{'1' * 64}  a.whl\n"  # not in our order: kept as it is
    merged = draft.merge_sums(existing, {"a.whl": "1" * 64, "c.whl": "3" * 64})
    assert merged == existing + f"{'3' * 64}  c.whl\n"
    with pytest.raises(BuildError, match="another sha256"):
        draft.merge_sums(existing, {"a.whl": "9" * 64})


# --- add, against a stand-in gh that keeps a release's files --------------------------------

GH = r'''#!{python}
import hashlib, json, os, shutil, sys
from pathlib import Path
state_path = Path({state!r})
state = json.loads(state_path.read_text())
args = sys.argv[1:]
with open(state_path.with_name("calls.txt"), "a") as log:
    log.write(" ".join(args) + "\n")
release = state.get("release")
if args[:1] == ["api"] and args[-1].endswith("/releases"):
    print(json.dumps([[release]] if release else [[]]))
elif args[:1] == ["api"] and "/releases/assets/" in args[-1]:
    wanted = int(args[-1].rsplit("/", 1)[1])
    asset = next(a for a in release["assets"] if a["id"] == wanted)
    sys.stdout.write(Path(asset["file"]).read_text())
elif args[:2] == ["release", "create"]:
    state["release"] = {{"tag_name": args[2], "draft": True, "assets": []}}
elif args[:2] == ["release", "upload"]:
    for name in [a for a in args[3:] if not a.startswith("--")]:
        kept = state_path.with_name("files") / Path(name).name
        kept.parent.mkdir(exist_ok=True)
        if any(a["name"] == kept.name for a in release["assets"]):
            if "--clobber" not in args:
                sys.exit(f"asset {{kept.name}} already exists")
            release["assets"] = [a for a in release["assets"] if a["name"] != kept.name]
        if os.environ.get("GH_CORRUPT") == kept.name:  # the upload arrives with other bytes
            kept.write_bytes(b"corrupt")
        else:
            shutil.copyfile(name, kept)
        digest = "sha256:" + hashlib.sha256(kept.read_bytes()).hexdigest()
        if os.environ.get("GH_NO_DIGEST") == kept.name:  # not computed yet right after upload
            digest = ""
        release["assets"].append({{"name": kept.name, "id": len(state["ids"]) + 1,
                                   "digest": digest, "file": str(kept)}})
        state["ids"].append(kept.name)
elif args[:2] == ["release", "delete-asset"]:
    release["assets"] = [a for a in release["assets"] if a["name"] != args[3]]
else:
    sys.exit("unexpected: " + " ".join(args))
state_path.write_text(json.dumps(state))
'''


def stand_in_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, draft_: bool,
                     files: dict[str, bytes], reported: dict[str, str | None] | None = None,
                     immutable: bool = False) -> Path:
    """A release holding ``files``; ``reported`` overrides the digest GitHub reports (None:
    an asset uploaded before GitHub reported digests)."""
    held = tmp_path / "gh" / "files"
    held.mkdir(parents=True)
    assets = []
    for number, (name, data) in enumerate(files.items(), 1):
        (held / name).write_bytes(data)
        digest = (reported or {}).get(name, "sha256:" + hashlib.sha256(data).hexdigest())
        assets.append({"name": name, "id": number, "digest": digest, "file": str(held / name)})
    state = tmp_path / "gh" / "state.json"
    state.write_text(json.dumps({"release": {"tag_name": "v2.15.0-1", "draft": draft_,
                                             "immutable": immutable, "assets": assets},
                                 "ids": list(files)}))
    gh = tmp_path / "gh" / "bin" / "gh"
    gh.parent.mkdir()
    gh.write_text(GH.format(python=sys.executable, state=str(state)))
    gh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{gh.parent}{os.pathsep}{os.environ['PATH']}")
    return state


def _sums(data: dict[str, bytes]) -> bytes:
    return "".join(f"{hashlib.sha256(body).hexdigest()}  {name}\n"
                   for name, body in data.items()).encode()


def _held(state: Path) -> dict[str, bytes]:
    release = json.loads(state.read_text())["release"]
    return {a["name"]: Path(a["file"]).read_bytes() for a in release["assets"]}


def _dist(tmp_path: Path, files: dict[str, bytes]) -> Path:
    dist = tmp_path / "dist"
    dist.mkdir()
    for name, data in files.items():
        (dist / name).write_bytes(data)
    return dist


def test_a_later_run_keeps_every_sha256sums_line_byte_for_byte(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The draft's SHA256SUMS names two wheels; GitHub reports no digest for the older one
    # (uploaded before it reported digests). A later run adds a third.
    first = {"a.whl": b"a", "old.whl": b"old"}
    state = stand_in_release(tmp_path, monkeypatch, True, {**first, "SHA256SUMS": _sums(first)},
                             reported={"old.whl": None})
    dist = _dist(tmp_path, {"b.whl": b"b", "a.whl": b"rebuilt"})
    assert draft.main(["add", "--tag", "v2.15.0-1", "--dir", str(dist), "--repo", "me/r"]) == 0
    held = _held(state)
    assert held["SHA256SUMS"] == _sums(first) + _sums({"b.whl": b"b"})
    assert held["a.whl"] == b"a" and held["b.whl"] == b"b"


def test_a_release_published_without_a_python_takes_only_new_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pythons = ["3.10", "3.11", "3.12", "3.13", "3.14"]
    names = wheels("2.15.0", "0.29.2", pythons, py3_none=True)
    new = [name for name in names if "cp312" in name]
    published = {name: name.encode() for name in names if name not in new}
    state = stand_in_release(tmp_path, monkeypatch, False,
                             {**published, "SHA256SUMS": _sums(published)})
    # The later run: the missing 3.12 wheel, and a torchvision rebuilt with other bytes.
    vision = next(name for name in names if name.startswith("torchvision"))
    dist = _dist(tmp_path, {new[0]: b"new", vision: b"rebuilt"})
    assert draft.main(["add", "--tag", "v2.15.0-1", "--dir", str(dist), "--repo", "me/r"]) == 0
    held = _held(state)
    assert held[new[0]] == b"new" and held[vision] == published[vision]
    assert held["SHA256SUMS"] == _sums(published) + _sums({new[0]: b"new"})
    assert json.loads(state.read_text())["release"]["draft"] is False


@pytest.mark.parametrize(("whole", "immutable", "says"), [
    (True, False, "published with every wheel"),
    (False, True, "immutable"),
])
def test_a_published_release_that_can_take_nothing_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        whole: bool, immutable: bool, says: str) -> None:
    names = wheels("2.15.0", "0.29.2", ["3.10", "3.11", "3.12", "3.13", "3.14"], py3_none=True)
    held = {name: b"x" for name in names if whole or "cp312" not in name}
    state = stand_in_release(tmp_path, monkeypatch, False, held, immutable=immutable)
    dist = _dist(tmp_path, {name: b"y" for name in names})
    assert draft.main(["add", "--tag", "v2.15.0-1", "--dir", str(dist), "--repo", "me/r"]) == 1
    out = capsys.readouterr().out
    assert says in out and "push v2.15.0-2" in out
    assert _held(state) == held


def test_a_binary_mode_sums_line_is_read_as_the_wheel_it_names() -> None:
    """``sha256sum -b`` and ``shasum -b`` write '<sha256> *<name>': that wheel is in the file,
    so no second line is added, and other bytes for it are a clash."""
    digest = hashlib.sha256(b"torch").hexdigest()
    existing = f"{digest} *torch-2.15.0-cp312-cp312-macosx_14_0_x86_64.whl\n"
    assert draft.sums_entries(existing) == {"torch-2.15.0-cp312-cp312-macosx_14_0_x86_64.whl": digest}
    assert draft.merge_sums(existing, {"torch-2.15.0-cp312-cp312-macosx_14_0_x86_64.whl": digest}) == existing
    with pytest.raises(BuildError, match="another sha256"):
        draft.merge_sums(existing, {"torch-2.15.0-cp312-cp312-macosx_14_0_x86_64.whl": "0" * 64})


def test_a_wheel_that_arrived_with_other_bytes_is_fixed_as_the_error_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A re-run never replaces a file the draft holds, so the error must say to delete the
    bad one first; doing what it says, then the re-run, leaves the right bytes."""
    state = stand_in_release(tmp_path, monkeypatch, True, {})
    dist = _dist(tmp_path, {"a.whl": b"a"})
    add = ["add", "--tag", "v2.15.0-1", "--dir", str(dist), "--repo", "me/r"]
    monkeypatch.setenv("GH_CORRUPT", "a.whl")
    assert draft.main(add) == 1
    out = capsys.readouterr().out
    advice = re.findall(r"gh release delete-asset \S+ \S+ --yes", out)
    assert advice, out
    monkeypatch.delenv("GH_CORRUPT")
    for command in advice:
        subprocess.run(command.split(), check=True)
    assert draft.main(add) == 0
    assert _held(state) == {"a.whl": b"a", "SHA256SUMS": _sums({"a.whl": b"a"})}


def test_a_digest_github_has_not_computed_yet_is_checked_from_the_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Right after an upload GitHub may report an empty digest: that is not 'other bytes'.
    The check reads the asset back and hashes it (seen failing on issue 40's main: the
    error said the wheel arrived with other bytes and told to delete it)."""
    state = stand_in_release(tmp_path, monkeypatch, True, {})
    dist = _dist(tmp_path, {"a.whl": b"a"})
    monkeypatch.setenv("GH_NO_DIGEST", "a.whl")
    assert draft.main(["add", "--tag", "v2.15.0-1", "--dir", str(dist), "--repo", "me/r"]) == 0
    assert "other bytes" not in capsys.readouterr().out
    assert _held(state)["a.whl"] == b"a"
    # Other bytes behind an empty digest are still caught.
    state.unlink()
    for folder in ("gh", "dist"):
        __import__("shutil").rmtree(tmp_path / folder)
    stand_in_release(tmp_path, monkeypatch, True, {})
    dist = _dist(tmp_path, {"a.whl": b"a"})
    monkeypatch.setenv("GH_CORRUPT", "a.whl")
    assert draft.main(["add", "--tag", "v2.15.0-1", "--dir", str(dist), "--repo", "me/r"]) == 1
    assert "arrived with other bytes" in capsys.readouterr().out
