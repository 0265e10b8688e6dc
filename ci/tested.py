"""Which built wheels passed their test: verdicts that select, never files that are signed.

The test-wheel job installs packages that are not pinned with hashes (the test extras, the
wheel's own dependencies). Any of them could change a file beside it, so nothing that job
holds is signed or published. It hands on only a verdict: the sha256 of each wheel it
tested and passed. The signing job (``attest``) takes the wheels from the jobs that built
them, which install only hash-pinned packages, and keeps a wheel only when a verdict names
it with the same sha256:

    python ci/tested.py record --dir dist --out verdict/tested-2.15.0-3.12.sha256   # test-wheel
    python3 ci/tested.py select --verdicts verdicts dist                             # attest

``select`` removes from ``dist`` each wheel no verdict names (its test failed or did not
run), and fails, removing nothing, when verdicts name a wheel only with other bytes than
its build job made: something changed the wheel after it was built. Standard library only, so
that the signing job runs it without installing anything.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


class VerdictError(ValueError):
    """A verdict that cannot be trusted or read; the message says what to do."""


def digests(folder: Path) -> dict[str, str]:
    """sha256 of each wheel in ``folder``, by file name."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.glob("*.whl"))}


def verdict_text(tested: Mapping[str, str]) -> str:
    """A verdict as ``sha256sum`` writes it: ``<sha256>  <name>`` a line."""
    return "".join(f"{tested[name]}  {name}\n" for name in sorted(tested))


def parse_verdict(text: str, source: str) -> list[tuple[str, str]]:
    """(name, sha256) pairs of one verdict file."""
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name.endswith(".whl") or "/" in name:
            raise VerdictError(f"{source}:{number}: expected '<sha256>  <wheel name>', got "
                               f"{line!r}; re-run the test-wheel job that wrote it")
        pairs.append((name, digest.lower()))
    return pairs


@dataclass(frozen=True)
class Selection:
    keep: tuple[str, ...]  # built, and tested with these very bytes
    untested: tuple[str, ...]  # built, named by no verdict: left out of the release
    changed: tuple[str, ...]  # a verdict names it with other bytes than were built


def select(built: Mapping[str, str], tested: Iterable[tuple[str, str]]) -> Selection:
    """Which of the ``built`` wheels (name -> sha256) the verdicts' (name, sha256) pass."""
    seen: dict[str, set[str]] = {}
    for name, digest in tested:
        seen.setdefault(name, set()).add(digest)
    # A verdict naming other bytes beside one that names the built bytes is an earlier
    # attempt's: a re-run rebuilt the wheel (a py3-none torchvision, rebuilt with a failed
    # Python) and a test passed the new bytes. Those bytes are what is signed.
    keep = tuple(name for name in sorted(built) if built[name] in seen.get(name, ()))
    untested = tuple(name for name in sorted(built) if name not in seen)
    changed = tuple(name for name in sorted(built)
                    if name in seen and built[name] not in seen[name])
    return Selection(keep, untested, changed)


def changed_message(changed: Sequence[str]) -> str:
    return (f"{', '.join(changed)}: the bytes tested are not the bytes the build job made: "
            "something in a test job changed the wheel, or its build job ran again after the "
            "test passed and the new test failed. Nothing is signed. Read the test jobs' logs "
            "(which packages they installed) first; then 'Re-run failed jobs' tests the wheel "
            "as built again, or a new run of the tag (Use workflow from → Tags) rebuilds and "
            "retests what the draft lacks.")


def _cmd_select(verdicts: Path, folder: Path) -> int:
    tested = []
    for path in sorted(verdicts.rglob("*.sha256")):
        tested += parse_verdict(path.read_text(encoding="utf-8"), str(path))
    chosen = select(digests(folder), tested)
    if chosen.changed:
        raise VerdictError(changed_message(chosen.changed))
    for name in chosen.untested:
        (folder / name).unlink()
        print(f"left out (no passing test): {name}")
    for name in chosen.keep:
        print(f"tested: {name}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python ci/tested.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    record = commands.add_parser("record", help="write the verdict of the wheels in --dir")
    record.add_argument("--dir", type=Path, required=True)
    record.add_argument("--out", type=Path, required=True)
    choose = commands.add_parser("select", help="keep in FOLDER only the wheels a verdict passed")
    choose.add_argument("--verdicts", type=Path, required=True)
    choose.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "record":
            found = digests(args.dir)
            if not found:
                raise VerdictError(f"no wheel in {args.dir}: nothing was tested")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(verdict_text(found), encoding="utf-8")
            print(verdict_text(found), end="")
            return 0
        return _cmd_select(args.verdicts, args.folder)
    except (VerdictError, OSError) as exc:
        print(f"::error title=Tested wheels::{exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
