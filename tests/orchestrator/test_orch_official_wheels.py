"""Upstream's own wheels for the rehearsal (maint/official_wheels.py), from a package index on
127.0.0.1 named in the user's own pip configuration, beside a constraints file capping torch."""

from __future__ import annotations

import os
import random
import string
from pathlib import Path

import pytest
from orch_index import make_wheel, serve_index, write_simple
from orch_server import FileServer

from intelmac_torch_builder.core._log import Log
from intelmac_torch_builder.core.errors import BuildError
from intelmac_torch_builder.core.options import FetchSettings
from intelmac_torch_builder.maint import official_wheels

FAST = FetchSettings(retries=3, timeout=10.0, backoff=0.01)


@pytest.fixture
def index(tmp_path: Path, server: FileServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """torch 2.0.0 on a served index, which the user's pip.conf names, capped at torch<=1.0."""
    folder = tmp_path / "index"
    filler = "".join(random.Random(7).choices(string.ascii_letters, k=300_000))
    make_wheel(folder, "torch", "2.0.0", [], {"torch/__init__.py": "# upstream\n", "torch/big.py": filler})
    write_simple(folder)
    url = serve_index(server, folder)
    caps = tmp_path / "constraints.txt"
    caps.write_text("torch<=1.0\n")
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nindex-url = {url}\nconstraint = {caps}\n")
    for key in [key for key in os.environ if key.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    return folder


def test_fetched_past_the_cap_from_the_users_index_resumed_and_cached(
    index: Path, server: FileServer, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    name = "torch-2.0.0-py3-none-any.whl"
    server.cut(name, 50_000)  # the first body breaks off: the retry resumes with Range
    path, wheel = official_wheels.fetch("torch", "2.0.0", "arm64", Log.create(), cache=cache, settings=FAST)
    assert path == cache / name and path.read_bytes() == (index / name).read_bytes()
    assert wheel.url == server.url(name) and wheel.sha256 in (index / "simple/torch/index.html").read_text()
    assert any(path_ == f"/{name}" and (rng or "").startswith("bytes=") for path_, rng in server.requests)
    assert sorted(p.name for p in cache.iterdir() if p.is_file()) == ["torch-2.0.0-arm64.json", name]
    # A second run, offline too, finds it in the cache and asks nothing.
    before = len(server.requests)
    again, _ = official_wheels.fetch("torch", "2.0.0", "arm64", Log.create(), cache=cache, offline=True)
    assert again == path and len(server.requests) == before


def test_a_changed_cached_wheel_is_fetched_again_or_refused_offline(
    index: Path, server: FileServer, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    path, wheel = official_wheels.fetch("torch", "2.0.0", "arm64", Log.create(), cache=cache, settings=FAST)
    path.write_bytes(b"not the wheel")
    with pytest.raises(BuildError, match="does not hash to the index's"):
        official_wheels.fetch("torch", "2.0.0", "arm64", Log.create(), cache=cache, offline=True)
    again, _ = official_wheels.fetch("torch", "2.0.0", "arm64", Log.create(), cache=cache, settings=FAST)
    assert official_wheels._fsutil.sha256_file(again) == wheel.sha256


def test_a_download_that_does_not_match_the_published_hash_is_discarded(
    index: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    path, _ = official_wheels.fetch("torch", "2.0.0", "arm64", Log.create(), cache=cache, settings=FAST)
    path.unlink()  # fetched again from the resolution kept beside it, without pip this time
    (index / "torch-2.0.0-py3-none-any.whl").write_bytes(b"served, but not what the page hashes")
    with pytest.raises(BuildError, match="but the index publishes"):
        official_wheels.fetch("torch", "2.0.0", "arm64", Log.create(), cache=cache, settings=FAST)
    assert not [p for p in cache.iterdir() if p.suffix in (".whl", ".part")]


def test_not_cached_offline_says_how_to_fetch(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="make rehearse"):
        official_wheels.fetch("torch", "9.9.9", "arm64", Log.create(), cache=tmp_path, offline=True)
