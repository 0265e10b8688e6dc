"""Apple's Mach-O tools on Linux, played by LLVM's, for the rehearsal (make rehearse).

delocate and the repair stage call ``otool``, ``install_name_tool``, ``lipo`` and ``codesign``
by name (delocate/tools.py). LLVM ships the first three for Mach-O files: ``llvm-otool``,
``llvm-install-name-tool`` and ``llvm-lipo`` (Debian's ``llvm-14`` package and later, as
``llvm-otool-14`` and so on). ``folder`` holds a script under each Apple name that runs
LLVM's tool; ``llvm-otool`` lacks otool's ``-m`` (archive member names, which no dylib has),
so the script drops it.

There is no ``codesign`` on Linux. The stand-in signs nothing: it records each call, and
``install_name_tool`` records each file it edits, so that ``unsigned_edits`` can say whether
every binary delocate or the repair edited was signed again afterwards (macOS on Apple
silicon refuses to load an arm64 binary whose signature an edit broke).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import BuildError

#: Apple's name -> LLVM's (Debian adds the version: llvm-otool-14).
LLVM_NAMES = {
    "otool": "llvm-otool",
    "install_name_tool": "llvm-install-name-tool",
    "lipo": "llvm-lipo",
}
#: The Debian package that has all three (bookworm: llvm-14, the default; also 15, 16, 19).
LLVM_PACKAGE = "llvm-14"
#: What the stand-ins write, one call a line: "edit<TAB>file", "sign<TAB>file", "verify<TAB>file".
CALLS = "calls.log"


@functools.cache
def llvm_tool(name: str) -> str:
    """The path of LLVM's ``name`` (unversioned, else the newest llvm-N's)."""
    for candidate in (name, *(f"{name}-{version}" for version in range(30, 13, -1))):
        found = shutil.which(candidate)
        if found:
            return found
    raise BuildError(
        f"no {name}: the rehearsal runs delocate with LLVM's Mach-O tools in the roles of "
        f"otool, install_name_tool and lipo (apt-get install {LLVM_PACKAGE})"
    )


def _script(body: str) -> str:
    return "#!/bin/sh\n# written by the rehearsal (maint/mac_tools.py)\n" + body


def write(folder: Path) -> Path:
    """Write the stand-ins into ``folder`` (emptied first); ``folder``."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    calls = folder / CALLS
    calls.touch()
    log = f"'{calls}'"
    last = 'eval "file=\\${$#}"\n'
    scripts = {
        # llvm-otool has no -m: drop it, keep every other argument in order.
        "otool": "for arg; do shift; [ \"$arg\" = -m ] || set -- \"$@\" \"$arg\"; done\n"
        f"exec '{llvm_tool(LLVM_NAMES['otool'])}' \"$@\"\n",
        "install_name_tool": last + f"printf 'edit\\t%s\\n' \"$file\" >> {log}\n"
        f"exec '{llvm_tool(LLVM_NAMES['install_name_tool'])}' \"$@\"\n",
        "lipo": f"exec '{llvm_tool(LLVM_NAMES['lipo'])}' \"$@\"\n",
        # codesign --force --sign - FILE (delocate's ad-hoc signature) / codesign --verify FILE
        "codesign": last + "case \" $* \" in *' --verify '*) what=verify ;; *) what=sign ;; esac\n"
        f"printf '%s\\t%s\\n' \"$what\" \"$file\" >> {log}\n",
    }
    for name, body in scripts.items():
        path = folder / name
        path.write_text(_script(body), encoding="utf-8")
        path.chmod(0o755)
    return folder


@contextlib.contextmanager
def on_path(folder: Path) -> Iterator[None]:
    """The stand-ins first on PATH (for delocate's subprocesses and the repair's own calls)."""
    before = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join(part for part in (str(folder), before) if part)
    try:
        yield
    finally:
        os.environ["PATH"] = before


@dataclass(frozen=True)
class Signing:
    edited: tuple[str, ...]  # files install_name_tool edited (each once, in order)
    signed: int  # codesign --sign calls
    unsigned: tuple[str, ...]  # edited, and not signed after their last edit


def signing(folder: Path) -> Signing:
    """What the recorded calls say: was every edited file signed after its last edit?"""
    pending: dict[str, bool] = {}
    edited: list[str] = []
    signed = 0
    for line in (folder / CALLS).read_text(encoding="utf-8").splitlines():
        what, _, path = line.partition("\t")
        if what == "edit":
            if path not in pending:
                edited.append(path)
            pending[path] = True
        elif what == "sign":
            signed += 1
            pending[path] = False
    return Signing(tuple(edited), signed, tuple(path for path in edited if pending[path]))


def forget(folder: Path) -> None:
    """Start a new record (the next stage's calls only)."""
    (folder / CALLS).write_text("", encoding="utf-8")


def delocate_pins(pins: Path) -> str:
    """The blocks of ``pins`` (patches/toolchain/orchestrator.txt) that are pinned for a Mac
    only (delocate and what it imports), without that marker: the same versions and sha256s,
    for ``pip install --require-hashes`` on Linux, where the rehearsal runs delocate."""
    blocks = re.split(r"\n(?=\S)", pins.read_text(encoding="utf-8"))
    out = []
    for block in blocks:
        head, _, rest = block.partition("\n")
        requirement, _, marker = head.partition(" ; ")
        if "sys_platform == 'darwin'" in marker and "==" in requirement:
            hashes = [line for line in rest.splitlines() if line.strip().startswith("--hash=")]
            out.append(" \\\n".join([requirement.strip(), *(line.rstrip(" \\") for line in hashes)]))
    if not any(block.startswith("delocate==") for block in out):
        raise BuildError(f"{pins} pins no delocate for a Mac (sys_platform == 'darwin')")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m intelmac_torch_builder.maint.mac_tools delocate-pins``: print them."""
    import argparse

    from .toolchain_pins import ORCHESTRATOR_PINS

    parser = argparse.ArgumentParser(prog="python -m intelmac_torch_builder.maint.mac_tools")
    parser.add_argument("what", choices=["delocate-pins"])
    parser.parse_args(argv)
    print(delocate_pins(ORCHESTRATOR_PINS), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
