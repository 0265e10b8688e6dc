"""Issue 35, finding 3, on 2.9.1: tensor.pin_memory() for MPS on a GPU without unified memory.

2.9.1's MPSHooks::getPinnedMemoryAllocator returns upstream's shared allocator, null on an
AMD GPU (test_pinned_memory_lines.py reads that from the binary), and its MPSHooks.mm cannot
be dated. Every path to pinned memory in the 2.9.1 binary (at::_pin_memory,
GetCPUAllocatorMaybePinned) calls the inline at::Context::getPinnedMemoryAllocator, which
patch 0012 checks in the exact ATen/Context.h. Here that function, cut from the wheel's
Context.h with the series applied, runs in context_pinned_driver.cpp against stand-in hooks.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog, patching

from . import objc_lines

LINE = "2.9.1"
CONTEXT_H = "aten/src/ATen/Context.h"
WHEEL_CONTEXT_H = "torch/include/ATen/Context.h"
SIGNATURE = "  Allocator* getPinnedMemoryAllocator("
DRIVER = Path(__file__).resolve().parent / "context_pinned_driver.cpp"
REPO = Path(__file__).resolve().parents[2]
#: The hunks that refuse a null MPS pinned allocator, per line: (patch, file it changes).
REFUSALS = {
    "2.6.0": ("2.6.0/0012-mps-pinned-memory-and-streams.patch", "aten/src/ATen/mps/MPSHooks.mm"),
    "2.9.1": ("2.9.1/0012-mps-pinned-memory-and-streams.patch", CONTEXT_H),
}


def patched_member(context_h: str) -> str:
    """The inline Context::getPinnedMemoryAllocator, verbatim: from its signature line to the
    first line that closes a member at its indentation."""
    return "\n".join(objc_lines.definition(context_h, SIGNATURE, "  }", CONTEXT_H)) + "\n"


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """context_pinned_driver.cpp around the Context.h member as 2.9.1's series leaves it."""
    objc_lines.require_wheel(LINE)
    gxx = shutil.which("g++")
    if gxx is None:
        objc_lines.skip_or_fail("g++ is not installed: apt-get install -y g++")
    work = tmp_path_factory.mktemp("context-pinned")
    tree = work / "tree"
    (tree / CONTEXT_H).parent.mkdir(parents=True)
    shutil.copyfile(objc_lines.wheel_root(LINE) / WHEEL_CONTEXT_H, tree / CONTEXT_H)
    series = [p for p in catalog.load().line(LINE).patches
              if any(change.path == CONTEXT_H for change in patching.file_changes(p))]
    patching.apply_series(tree, series)
    (work / "context_pinned_memory.inc").write_text(
        patched_member((tree / CONTEXT_H).read_text(encoding="utf-8")), encoding="utf-8")
    exe = work / "context_pinned_driver"
    subprocess.run([gxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-O0", f"-I{work}", "-o", str(exe),
                    str(DRIVER)], check=True, capture_output=True, text=True)
    return exe


def _run(driver: Path, *args: str) -> str:
    return subprocess.run([str(driver), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.upstream
@pytest.mark.parametrize("asked", [(), ("mps",)], ids=["current-accelerator", "pin_memory-mps"])
def test_mps_without_pinned_allocator_refuses_clearly(driver: Path, asked: tuple[str, ...]) -> None:
    """An AMD GPU: the hooks' pinned allocator is null. Upstream returned it (a Storage on a
    null allocator: a crash); the patched member raises why and what to do."""
    out = _run(driver, "mps", "null", *asked)
    assert out.startswith("error: "), out
    assert "no unified memory" in out and "no pinned memory" in out, out
    assert "Drop the pin_memory() call" in out and "pin_memory=False" in out, out


@pytest.mark.upstream
def test_mps_with_pinned_allocator_gets_it(driver: Path) -> None:
    """An Intel or Apple GPU: the shared allocator comes back as upstream returned it."""
    assert _run(driver, "mps", "allocator") == "allocator"


@pytest.mark.upstream
@pytest.mark.parametrize("accelerator, asked", [("cuda", ()), ("mps", ("cuda",)), ("none", ())])
def test_other_devices_keep_upstreams_answer(driver: Path, accelerator: str, asked: tuple[str, ...]) -> None:
    """Another device's null pinned allocator passes through unchanged (upstream's behaviour;
    its own callers decide), even when MPS is the current accelerator."""
    assert _run(driver, accelerator, "null", *asked) == "null"


def refusal_message(patch: Path, path: str) -> str:
    """The message of the TORCH_CHECK that ``patch`` adds to ``path``, its literals joined."""
    import unidiff

    added = [line.value for patched in unidiff.PatchSet(patch.read_text(encoding="utf-8"))
             if patched.path.removeprefix("b/") == path for hunk in patched for line in hunk if line.is_added]
    text = "\n".join(added)
    if "TORCH_CHECK(" not in text:
        raise ValueError(f"{patch.name}: no TORCH_CHECK added to {path}")
    # The literals up to the statement's end: a ");" outside them (the message holds one).
    literals: list[str] = []
    for token in re.finditer(r'"((?:[^"\\]|\\.)*)"|\);', text[text.index("TORCH_CHECK("):]):
        if token.group(1) is None:
            break
        literals.append(token.group(1))
    return "".join(literals)


def test_both_lines_refuse_with_the_same_message() -> None:
    """2.6.0 (MPSHooks.mm) and 2.9.1 (Context.h) say the same thing to the same user."""
    messages = {line: refusal_message(REPO / "patches" / patch, path) for line, (patch, path) in REFUSALS.items()}
    assert "no unified memory" in messages["2.6.0"], messages
    assert messages["2.9.1"] == messages["2.6.0"], messages
