"""Pinned memory for MPS per line, read from each official arm64 libtorch_cpu.dylib (issue 35,
finding 3): what tensor.pin_memory() and torch.empty(..., pin_memory=True) reach.

- 2.6.0 and 2.9.1: MPSHooks::getPinnedMemoryAllocator is upstream's shared allocator
  (getIMPSAllocator(true)), null without unified memory (an AMD GPU). 2.6.0's exact
  MPSHooks.mm gets a check from patch 0012 (run in tests/fake_metal/test_whole_allocator.py).
  2.9.1's binary holds no assert line of MPSHooks.mm, so no candidate source of it can be
  dated, and the series leaves it alone: docs/mps-device-policy.md (finding 3) says what
  users do there. The test pins the facts that statement rests on.
- torch.empty(..., pin_memory=True) asks MPS only from 2.9.1 (GetCPUAllocatorMaybePinned
  asks the accelerator's hooks); 2.6.0's knows no MPS and refuses on every Mac.
- 2.14.1 and 2.15.0 have a pinned allocator of their own (getMPSPinnedAllocator).

The scan of branches is macos_sites' (seconds, not a full disassembly).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from intelmac_torch_builder.core import catalog

from . import macos_sites
from .test_metal4_gate import _wheel

pytestmark = pytest.mark.upstream

PIN_HOOK = "__ZNK2at3mps8MPSHooks24getPinnedMemoryAllocatorEv"
MAYBE_PINNED = "__ZN2at6detail12_GLOBAL__N_126GetCPUAllocatorMaybePinnedEb"
GET_IMPS_ALLOCATOR = "__ZN2at3mps16getIMPSAllocatorEb"
#: What getPinnedMemoryAllocator calls, per line.
PIN_ALLOCATOR = {
    "2.6.0": "at::mps::getIMPSAllocator(bool)",
    "2.9.1": "at::mps::getIMPSAllocator(bool)",
    "2.14.1": "at::mps::getMPSPinnedAllocator()",
    "2.15.0": "at::mps::getMPSPinnedAllocator()",
}
#: Where torch.empty(..., pin_memory=True) meets the accelerator's hooks (None: it never does).
EMPTY_REACHES_MPS = {
    "2.6.0": None,
    "2.9.1": "at::Context::getPinnedMemoryAllocator(std::__1::optional<c10::DeviceType>)",
    "2.14.1": "at::Context::getAcceleratorHooksInterface(std::__1::optional<c10::DeviceType>)",
    "2.15.0": "at::Context::getAcceleratorHooksInterface(std::__1::optional<c10::DeviceType>)",
}
#: `csel x0, xzr, x8, eq`: getIMPSAllocator(true) returns null when the shared allocator's
#: m_has_unified_memory is false (read with llvm-objdump in the 2.9.1 binary).
CSEL_NULL = 0x9A8803E0
NO_ALLOCATOR = b"Need to provide pin_memory allocator to use pin memory."


def _dylib(line: str) -> Path:
    return _wheel(line) / "torch" / "lib" / "libtorch_cpu.dylib"


def _words_of(dylib: Path, mangled: str) -> list[int]:
    addresses, names = macos_sites._symbols(dylib)
    position = names.index(mangled)
    start, end = int(addresses[position]), int(addresses[position + 1])
    vmaddr = macos_sites.text_section(dylib)[0]
    words, _index, _dest = macos_sites._branches(dylib)
    return words[(start - vmaddr) // 4 : (end - vmaddr) // 4].tolist()


@pytest.mark.parametrize("line", list(PIN_ALLOCATOR))
def test_pin_memory_asks_the_shared_allocator_before_2_14_1(line: str) -> None:
    assert macos_sites.callees(_dylib(line), PIN_HOOK) == [PIN_ALLOCATOR[line]], line


@pytest.mark.parametrize("line", ["2.6.0", "2.9.1"])
def test_the_shared_allocator_is_null_without_unified_memory(line: str) -> None:
    assert CSEL_NULL in _words_of(_dylib(line), GET_IMPS_ALLOCATOR), line


@pytest.mark.parametrize("line", list(EMPTY_REACHES_MPS))
def test_torch_empty_pin_memory_asks_mps_from_2_9_1(line: str) -> None:
    dylib = _dylib(line)
    reached = EMPTY_REACHES_MPS[line]
    callees = macos_sites.callees(dylib, MAYBE_PINNED)
    if reached is None:
        assert not [c for c in callees if c.startswith("at::Context::")], callees
        assert NO_ALLOCATOR in dylib.read_bytes()
    else:
        assert reached in callees, callees


def test_2_9_1_mps_hooks_cannot_be_dated_so_the_series_leaves_it() -> None:
    """No assert line of MPSHooks.mm in the 2.9.1 binary dates a candidate of that file
    (the rule for hunks in files no wheel contains), and 2.9.1's series has no hunk there."""
    assert b'aten/src/ATen/mps/MPSHooks.mm":' not in _dylib("2.9.1").read_bytes()
    series = catalog.load().line("2.9.1").patches
    assert not [p.name for p in series if "a/aten/src/ATen/mps/MPSHooks.mm" in p.read_text(encoding="utf-8")]
    assert [p.name for p in catalog.load().line("2.6.0").patches
            if "a/aten/src/ATen/mps/MPSHooks.mm" in p.read_text(encoding="utf-8")] == [
        "0012-mps-pinned-memory-and-streams.patch"]
