"""Performance of the orchestrator, measured (not part of `make test`).

    .venv/bin/python tests/bench_orchestrator.py [--sizes 50,500] [--runs 5]

1. No-op rebuild: the fixture upstream is built once through `all --builder setuptools`,
   then `python -m intelmac_torch_builder all` runs again --runs times as a real command (a new
   interpreter each time, as `make build` starts one). Target: under 2 s, with no request
   reaching the server.
2. Streaming download: tarballs of each size in --sizes (MB, incompressible) are served by
   a local HTTP server and fetched by `python -m intelmac_torch_builder fetch` (download, sha256,
   safe extraction). The orchestrator's peak RSS (from wait4) should not grow with size.

Prints the measured figures; exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "orchestrator"))

from orch_fixture import (  # noqa: E402  (after the sys.path insert above)
    make_tarball,
    sha256,
    upstream_files,
    write_catalog,
    write_series,
    write_tree,
)
from orch_server import FileServer  # noqa: E402

REPO = HERE.parent
MiB = 1024 * 1024


class _Random:
    """A file-like source of incompressible bytes, so no 500 MB buffer is ever held."""

    def read(self, size: int = MiB) -> bytes:
        return os.urandom(min(size, MiB))


def _random_tarball(path: Path, megabytes: int, top: str) -> str:
    info = tarfile.TarInfo(f"{top}/payload.bin")
    info.size = megabytes * MiB
    version = f"{top.removeprefix('pytorch-v')}a0\n".encode()
    meta = tarfile.TarInfo(f"{top}/version.txt")
    meta.size = len(version)
    with tarfile.open(path, "w") as tar:
        tar.addfile(meta, io.BytesIO(version))
        tar.addfile(info, _Random())  # type: ignore[arg-type]
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(MiB):
            digest.update(chunk)
    return digest.hexdigest()


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "intelmac_torch_builder", *args]


def _run_measured(argv: list[str]) -> tuple[int, float, int]:
    """(exit code, wall seconds, peak RSS in bytes) of one child process."""
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - started
    stderr = process.stderr.read().decode() if process.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(stderr, file=sys.stderr)
    # ru_maxrss is KiB on Linux and bytes on macOS.
    peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return code, wall, peak


def bench_noop(root: Path, server: FileServer, runs: int) -> bool:
    tree = write_tree(root / "up" / "pytorch-v1.0.0", upstream_files("1.0.0"))
    tarball = make_tarball(tree, root / "pytorch-v1.0.0.tar.gz", "pytorch-v1.0.0")
    url = server.serve(tarball.name, tarball)
    patches = write_series(root / "catalog" / "fixture")
    catalog = write_catalog(
        root / "catalog",
        [{"version": "1.0.0", "url": url, "sha256": sha256(tarball), "patches": patches}],
    )
    common = [
        "--builder", "setuptools", "--catalog", str(catalog), "--work-dir", str(root / "work"),
        "--cache-dir", str(root / "cache"), "--wheels-dir", str(root / "wheels"),
    ]  # fmt: skip
    code, first, _ = _run_measured(_cli("all", *common))
    if code != 0:
        print(f"first build failed (exit {code})")
        return False
    requests_before = len(server.requests)
    times = []
    for _ in range(runs):
        code, wall, _ = _run_measured(_cli("all", *common))
        if code != 0:
            print(f"no-op run failed (exit {code})")
            return False
        times.append(wall)
    fetched = len(server.requests) - requests_before
    print("No-op rebuild (`python -m intelmac_torch_builder all`, verified wheel already in the index)")
    print(f"  first full build of the fixture: {first:.2f} s")
    print(
        f"  no-op, {runs} runs: median {statistics.median(times):.2f} s, max {max(times):.2f} s "
        f"(target < 2 s); requests to the server during no-op runs: {fetched}"
    )
    return max(times) < 2.0 and fetched == 0


def bench_streaming(root: Path, server: FileServer, sizes: list[int]) -> bool:
    lines = []
    for megabytes in sizes:
        version = f"0.{megabytes}.0"
        top = f"pytorch-v{version}"
        path = root / f"{top}.tar"
        print(f"  generating a {megabytes} MB tarball ...", flush=True)
        digest = _random_tarball(path, megabytes, top)
        lines.append(
            {
                "version": version,
                "url": server.serve(path.name, path),
                "sha256": digest,
                "patches": [],
            }
        )
    catalog = write_catalog(root / "catalog-big", lines)
    results = []
    for megabytes, line in zip(sizes, lines):
        argv = _cli(
            "fetch", "--torch", str(line["version"]), "--catalog", str(catalog),
            "--work-dir", str(root / "work-big"), "--cache-dir", str(root / "cache-big"),
        )  # fmt: skip
        code, wall, peak = _run_measured(argv)
        if code != 0:
            print(f"fetch of {megabytes} MB failed (exit {code})")
            return False
        results.append((megabytes, wall, peak))
    print("Streaming fetch (download + sha256 + safe extraction) from a local HTTP server")
    for megabytes, wall, peak in results:
        print(
            f"  {megabytes:>5} MB: {wall:6.2f} s, {megabytes / wall:7.1f} MB/s, peak RSS {peak / MiB:6.1f} MiB"
        )
    smallest, largest = results[0][2], results[-1][2]
    growth = (largest - smallest) / MiB
    ratio = results[-1][0] / results[0][0]
    print(
        f"  peak RSS grew by {growth:+.1f} MiB while the tarball grew {ratio:.0f}x (flat: within 32 MiB)"
    )
    return abs(growth) < 32


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,500", help="tarball sizes in MB, comma separated")
    parser.add_argument("--runs", type=int, default=5, help="no-op runs to time")
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    server = FileServer()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-orchestrator-") as scratch:
            root = Path(scratch)
            noop_ok = bench_noop(root, server, args.runs)
            stream_ok = bench_streaming(root, server, sizes)
    finally:
        server.close()
    print("targets met" if noop_ok and stream_ok else "TARGET MISSED")
    return 0 if noop_ok and stream_ok else 1


if __name__ == "__main__":
    sys.exit(main())
