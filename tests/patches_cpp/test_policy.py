"""The MPS device policy (patch 0001's MPSDevicePolicy.h) against real Mac configurations.

The header is taken from the patch itself (applied into a scratch tree with the project's
own patch applier), compiled with g++ -std=c++17 -Wall -Wextra -Werror together with
policy_driver.cpp (the ``driver`` fixture of conftest.py), and asked about every configuration below in every order of its devices.
The expected outcomes are written out here, from the policy of issue 3; nothing is computed
by a second implementation of the policy.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

GIB = 1024**3


@dataclass(frozen=True)
class Dev:
    name: str
    registry_id: int
    low_power: bool = False
    removable: bool = False
    headless: bool = False
    unified_memory: bool = False
    working_set: int = 4 * GIB
    mac2: bool = True
    apple: bool = False

    def line(self) -> str:
        flags = [self.low_power, self.removable, self.headless, self.unified_memory]
        cells = ["dev", self.name, *("1" if f else "0" for f in flags), str(self.working_set),
                 str(self.registry_id), "1" if self.mac2 else "0", "1" if self.apple else "0"]
        return "\t".join(cells)


# Device names as Metal reports them on these Macs.
UHD630 = Dev("Intel(R) UHD Graphics 630", 0x100000101, low_power=True, unified_memory=True, working_set=1536 * 1024**2)
IRIS_ICL = Dev("Intel(R) Iris(TM) Plus Graphics", 0x100000102, low_power=True, unified_memory=True, working_set=1536 * 1024**2)
IRIS655 = Dev("Intel(R) Iris(TM) Plus Graphics 655", 0x100000103, low_power=True, unified_memory=True, working_set=1536 * 1024**2)
PRO5500M = Dev("AMD Radeon Pro 5500M", 0x100000201, working_set=8 * GIB)
PRO560X = Dev("AMD Radeon Pro 560X", 0x100000202, working_set=4 * GIB)
PRO5700XT = Dev("AMD Radeon Pro 5700 XT", 0x100000203, working_set=16 * GIB)
VEGA_A = Dev("AMD Radeon Pro Vega II", 0x100000400, working_set=32 * GIB)
VEGA_B = Dev("AMD Radeon Pro Vega II", 0x100000300, headless=True, working_set=32 * GIB)
RX580_EGPU = Dev("AMD Radeon RX 580", 0x100000500, removable=True, headless=True, working_set=8 * GIB)
PARAVIRT = Dev("Apple Paravirtual device", 0x100000600, mac2=False, working_set=1 * GIB)
M1 = Dev("Apple M1", 0x100000700, unified_memory=True, apple=True, working_set=11 * GIB)


@dataclass(frozen=True)
class Expect:
    """``selected``: the name of the chosen device (None: MPS unavailable)."""

    selected: str | None
    reason_has: tuple[str, ...] = ()
    registry_id: int | None = None  # when names alone do not tell devices apart
    reason_lacks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Config:
    name: str
    devices: tuple[Dev, ...]
    stable: tuple[Dev, ...]  # the order devices() must list them in
    default: Expect
    allowed: Expect
    by_index: dict[int, Expect]
    by_name: tuple[str, Expect]
    ambiguous: tuple[str, Expect]  # a name part shared by several devices, where there are several
    out_of_range: Expect
    macos_ok: bool = True
    extra: tuple[tuple[str, Expect], ...] = field(default_factory=tuple)


def only_intel(name: str) -> Expect:
    return Expect(None, (f"only an Intel GPU ({name}) was found", "PYTORCH_MPS_ALLOW_INTEL_GPU=1",
                         "torch.backends.mps.allow_intel_gpu = True"))


def out_of_range(index: int, *names: str) -> Expect:
    # The reason also says how to pick by name: a number is an index first.
    return Expect(None, (f"PYTORCH_MPS_DEVICE='{index}' is out of range", "pick by name", *names))


def ambiguous(text: str, *names: str) -> Expect:
    return Expect(None, (f"PYTORCH_MPS_DEVICE='{text}' is ambiguous", *names))


OPT_IN = ("PYTORCH_MPS_ALLOW_INTEL_GPU=1", "torch.backends.mps.allow_intel_gpu = True")


CONFIGS = [
    Config("Mac mini 2018 (UHD 630 only)", (UHD630,), (UHD630,),
           default=only_intel(UHD630.name), allowed=Expect(UHD630.name),
           by_index={0: Expect(UHD630.name)},  # picking it explicitly is an opt-in
           by_name=("uhd", Expect(UHD630.name)),
           ambiguous=("graphics", Expect(UHD630.name)),  # one device: nothing to be ambiguous about
           out_of_range=out_of_range(1, "[0] Intel(R) UHD Graphics 630")),
    Config("MacBook Air 2020 (Iris Plus only)", (IRIS_ICL,), (IRIS_ICL,),
           default=only_intel(IRIS_ICL.name), allowed=Expect(IRIS_ICL.name),
           by_index={0: Expect(IRIS_ICL.name)},
           by_name=("IRIS", Expect(IRIS_ICL.name)),
           ambiguous=("intel", Expect(IRIS_ICL.name)),
           out_of_range=out_of_range(1, IRIS_ICL.name)),
    Config('MacBook Pro 16" 2019 (UHD 630 + Radeon Pro 5500M)', (UHD630, PRO5500M), (PRO5500M, UHD630),
           default=Expect(PRO5500M.name), allowed=Expect(PRO5500M.name),
           by_index={0: Expect(PRO5500M.name), 1: Expect(UHD630.name)},
           by_name=("uhd graphics", Expect(UHD630.name)),
           ambiguous=("a", ambiguous("a", "[0] AMD Radeon Pro 5500M", "[1] Intel(R) UHD Graphics 630")),
           out_of_range=out_of_range(2, "[0] AMD Radeon Pro 5500M", "[1] Intel(R) UHD Graphics 630"),
           extra=(("5500m", Expect(PRO5500M.name)),
                  ("nvidia", Expect(None, ("PYTORCH_MPS_DEVICE='nvidia' matches no Metal device name",
                                           "[0] AMD Radeon Pro 5500M", "[1] Intel(R) UHD Graphics 630"))))),
    Config('MacBook Pro 15" 2018 (UHD 630 + Radeon Pro 560X)', (UHD630, PRO560X), (PRO560X, UHD630),
           default=Expect(PRO560X.name), allowed=Expect(PRO560X.name),
           by_index={0: Expect(PRO560X.name), 1: Expect(UHD630.name)},
           by_name=("560X", Expect(PRO560X.name)),
           ambiguous=("r", ambiguous("r", PRO560X.name, UHD630.name)),
           out_of_range=out_of_range(2, PRO560X.name)),
    Config("iMac 2020 (Radeon Pro 5700 XT)", (PRO5700XT,), (PRO5700XT,),
           default=Expect(PRO5700XT.name), allowed=Expect(PRO5700XT.name),
           by_index={0: Expect(PRO5700XT.name)},
           by_name=("5700 xt", Expect(PRO5700XT.name)),
           ambiguous=("radeon", Expect(PRO5700XT.name)),
           out_of_range=out_of_range(1, PRO5700XT.name),
           # Not an index here, but a whole word of the name: it picks by name.
           extra=(("5700", Expect(PRO5700XT.name)),)),
    Config("Mac Pro 2019 (two Radeon Pro Vega II)", (VEGA_A, VEGA_B), (VEGA_B, VEGA_A),
           # Identical names: the lower IORegistry id ranks first, whatever Metal's order.
           default=Expect(VEGA_B.name, registry_id=VEGA_B.registry_id),
           allowed=Expect(VEGA_B.name, registry_id=VEGA_B.registry_id),
           by_index={0: Expect(VEGA_B.name, registry_id=VEGA_B.registry_id),
                     1: Expect(VEGA_A.name, registry_id=VEGA_A.registry_id)},
           by_name=("AMD Radeon Pro Vega II", ambiguous("AMD Radeon Pro Vega II", "[0] AMD Radeon Pro Vega II",
                                                        "[1] AMD Radeon Pro Vega II")),
           ambiguous=("vega", ambiguous("vega", "[0] AMD Radeon Pro Vega II", "[1] AMD Radeon Pro Vega II")),
           out_of_range=out_of_range(2, "[1] AMD Radeon Pro Vega II")),
    Config('MacBook Pro 13" 2019 (Iris Plus 655) + RX 580 eGPU', (IRIS655, RX580_EGPU), (RX580_EGPU, IRIS655),
           default=Expect(RX580_EGPU.name), allowed=Expect(RX580_EGPU.name),
           by_index={0: Expect(RX580_EGPU.name), 1: Expect(IRIS655.name)},
           by_name=("rx 580", Expect(RX580_EGPU.name)),
           ambiguous=("r", ambiguous("r", RX580_EGPU.name, IRIS655.name)),
           out_of_range=out_of_range(2, RX580_EGPU.name, IRIS655.name),
           # A name that is a number (the harness's case): "580" is no index here, and a word
           # of one name. "655" is a word of the Intel GPU's name: picking it is an opt-in.
           extra=(("580", Expect(RX580_EGPU.name)), ("655", Expect(IRIS655.name)),
                  ("58", out_of_range(58, RX580_EGPU.name, IRIS655.name)))),
    Config('MacBook Pro 16" 2019 + RX 580 eGPU', (UHD630, PRO5500M, RX580_EGPU), (RX580_EGPU, PRO5500M, UHD630),
           default=Expect(RX580_EGPU.name), allowed=Expect(RX580_EGPU.name),
           by_index={0: Expect(RX580_EGPU.name), 1: Expect(PRO5500M.name), 2: Expect(UHD630.name)},
           by_name=("Radeon Pro", Expect(PRO5500M.name)),
           ambiguous=("amd", ambiguous("amd", RX580_EGPU.name, PRO5500M.name)),
           # "3" is a digit of "630" but no word of any name: still an index out of range.
           out_of_range=out_of_range(3, RX580_EGPU.name, PRO5500M.name, UHD630.name),
           extra=(("580", Expect(RX580_EGPU.name)), ("630", Expect(UHD630.name)),
                  ("5500", out_of_range(5500, RX580_EGPU.name, PRO5500M.name, UHD630.name)))),
    Config("macOS VM (Apple Paravirtual device only)", (PARAVIRT,), (PARAVIRT,),
           default=Expect(None, ("no Metal device supports GPU family Mac2", PARAVIRT.name)),
           allowed=Expect(None, ("Mac2",)),
           by_index={0: Expect(None, ("picks [0] Apple Paravirtual device", "Mac2"))},
           by_name=("paravirtual", Expect(None, ("Mac2",))),
           ambiguous=("a", Expect(None, ("Mac2",))),
           out_of_range=out_of_range(1, PARAVIRT.name)),
    Config("no Metal device", (), (),
           default=Expect(None, ("no Metal device was found",)),
           allowed=Expect(None, ("no Metal device was found",)),
           # With nothing to choose from, that is the reason, whatever PYTORCH_MPS_DEVICE says.
           by_index={},
           by_name=("amd", Expect(None, ("no Metal device was found",))),
           ambiguous=("a", Expect(None, ("no Metal device was found",))),
           out_of_range=Expect(None, ("no Metal device was found",))),
    # Apple silicon: upstream's rule, the options have no effect.
    Config("Apple M1", (M1,), (M1,),
           default=Expect(M1.name), allowed=Expect(M1.name),
           by_index={0: Expect(M1.name)},
           by_name=("nvidia", Expect(M1.name)),
           ambiguous=("a", Expect(M1.name)),
           out_of_range=Expect(M1.name)),
    Config('MacBook Pro 16" 2019 on a macOS too old for this line', (UHD630, PRO5500M), (PRO5500M, UHD630),
           default=Expect(None, ("needs macOS 14.0 or newer", "sw_vers")),
           allowed=Expect(None, ("needs macOS 14.0 or newer",)),
           by_index={0: Expect(None, ("needs macOS 14.0",)), 1: Expect(None, ("needs macOS 14.0",))},
           by_name=("5500", Expect(None, ("needs macOS 14.0",))),
           ambiguous=("a", Expect(None, ("needs macOS 14.0",))),
           out_of_range=Expect(None, ("needs macOS 14.0",)),
           macos_ok=False),
]



def _scenarios(config: Config) -> Iterator[tuple[str, bool, str | None, Expect]]:
    """(label, allow_intel_gpu, PYTORCH_MPS_DEVICE or None, expectation)."""
    yield "default", False, None, config.default
    yield "allowed", True, None, config.allowed
    for index, expect in config.by_index.items():
        yield f"index {index}", False, str(index), expect
    yield "by name", False, config.by_name[0], config.by_name[1]
    yield "ambiguous name", False, config.ambiguous[0], config.ambiguous[1]
    yield "out-of-range index", False, str(len(config.devices)), config.out_of_range
    for text, expect in config.extra:
        yield f"name {text!r}", False, text, expect


def _field(value: str | None) -> str:
    return "!" if value is None else f"={value}"


def run_driver(exe: Path, lines: list[str]) -> dict[str, dict[str, Any]]:
    done = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True,
                          check=True, timeout=60)
    results = [json.loads(line) for line in done.stdout.splitlines()]
    return {r["id"]: r for r in results}


@pytest.fixture(scope="module")
def policy_results(driver: Path) -> dict[str, dict[str, Any]]:
    lines: list[str] = []
    for c, config in enumerate(CONFIGS):
        for s, (_label, allow, selector, _expect) in enumerate(_scenarios(config)):
            for p, devices in enumerate(itertools.permutations(config.devices)):
                lines.append("\t".join(["case", f"{c}/{s}/{p}", "1" if allow else "0", _field(selector),
                                        "1" if config.macos_ok else "0", "14.0"]))
                lines += [d.line() for d in devices]
                lines.append("end")
    return run_driver(driver, lines)


def _cases() -> Iterator[Any]:
    for c, config in enumerate(CONFIGS):
        for s, (label, allow, selector, expect) in enumerate(_scenarios(config)):
            yield pytest.param(c, s, config, allow, selector, expect, id=f"{config.name} | {label}")


@pytest.mark.parametrize(("c", "s", "config", "allow", "selector", "expect"), list(_cases()))
def test_policy_on_real_macs(policy_results: dict[str, dict[str, Any]], c: int, s: int, config: Config,
                             allow: bool, selector: str | None, expect: Expect) -> None:
    permutations = list(itertools.permutations(config.devices))
    seen = [policy_results[f"{c}/{s}/{p}"]["result"] for p in range(len(permutations))]
    for devices, result in zip(permutations, seen):
        order = f"in Metal order {[d.name for d in devices]}"
        listed = [(d["name"], d["registry_id"]) for d in result["devices"]]
        assert listed == [(d.name, d.registry_id) for d in config.stable], f"stable order {order}"
        assert [d["index"] for d in result["devices"]] == list(range(len(devices)))
        # source_index points back at the very device Metal gave in that position.
        for d in result["devices"]:
            assert devices[d["source_index"]].registry_id == d["registry_id"]
        assert result["selected"] == expect.selected, f"{order}: {result['reason']}"
        if expect.registry_id is not None:
            assert result["selected_registry_id"] == expect.registry_id, order
        flags = [d for d in result["devices"] if d["selected"]]
        if expect.selected is None:
            assert flags == [] and result["reason"], order
            for needle in expect.reason_has:
                assert needle in result["reason"], f"{order}: {needle!r} not in {result['reason']!r}"
            for needle in expect.reason_lacks:
                assert needle not in result["reason"], f"{order}: {needle!r} in {result['reason']!r}"
            assert "macOS 14.0+" not in result["reason"]
        else:
            assert result["reason"] == "", order
            assert len(flags) == 1 and flags[0]["eligible"] and flags[0]["skip_reason"] == ""
            assert flags[0]["index"] == result["selected_index"]
        for d in result["devices"]:
            if not d["selected"]:
                assert d["skip_reason"], f"{order}: {d['name']} has no skip reason"
    # Rule 4: nothing but source positions may depend on Metal's order.
    def strip(result: dict[str, Any]) -> dict[str, Any]:
        return {**result, "devices": [{k: v for k, v in d.items() if k != "source_index"} for d in result["devices"]]}
    assert all(strip(r) == strip(seen[0]) for r in seen)


def test_intel_gpu_is_skipped_by_default_with_a_reason(policy_results: dict[str, dict[str, Any]]) -> None:
    c = next(i for i, cfg in enumerate(CONFIGS) if cfg.name.startswith('MacBook Pro 16" 2019 (UHD'))
    uhd = next(d for d in policy_results[f"{c}/0/0"]["result"]["devices"] if d["name"] == UHD630.name)
    assert not uhd["eligible"] and "PYTORCH_MPS_ALLOW_INTEL_GPU=1" in uhd["skip_reason"]
    allowed = next(d for d in policy_results[f"{c}/1/0"]["result"]["devices"] if d["name"] == UHD630.name)
    assert allowed["eligible"] and "ranked after [0] AMD Radeon Pro 5500M" in allowed["skip_reason"]


def test_unified_memory_never_decides(driver: Path) -> None:
    """No line requires unified memory any more (the allocator patches 0008/0009 keep memory
    where Metal allows it): flipping every device's unified memory changes no result."""
    def results(flip: bool) -> list[dict[str, Any]]:
        lines: list[str] = []
        for c, config in enumerate(CONFIGS):
            for s, (_label, allow, selector, _expect) in enumerate(_scenarios(config)):
                lines.append("\t".join(["case", f"{c}/{s}", "1" if allow else "0", _field(selector),
                                        "1" if config.macos_ok else "0", "14.0"]))
                lines += [replace(d, unified_memory=d.unified_memory != flip).line() for d in config.devices]
                lines.append("end")
        found = run_driver(driver, lines)
        for result in found.values():
            for status in result["result"]["devices"]:
                status.pop("unified_memory", None)
        return [found[key] for key in sorted(found)]
    amd = [cfg for cfg in CONFIGS if any(d.mac2 and not d.unified_memory and not d.low_power for d in cfg.devices)]
    assert len(amd) >= 4, "the configurations lost their AMD GPUs"
    assert results(True) == results(False)


LATE = [
    # (config devices, first allow/selector, later allow/selector, same choice?)
    ("MBP16 allow after AMD chosen", (UHD630, PRO5500M), (False, None), (True, None), True),
    ("Mac mini disallow after Intel chosen", (UHD630,), (True, None), (False, None), False),
    ("Mac mini allow after nothing chosen", (UHD630,), (False, None), (True, None), False),
    ("MBP16 picking the Intel GPU later", (UHD630, PRO5500M), (False, None), (False, "uhd"), False),
    ("M1 allow changes nothing", (M1,), (False, None), (True, None), True),
    ("Mac Pro same device by index", (VEGA_A, VEGA_B), (False, None), (True, "0"), True),
]


@pytest.mark.parametrize(("label", "devices", "first", "later", "same"), LATE, ids=[x[0] for x in LATE])
def test_late_flag_change(driver: Path, label: str, devices: tuple[Dev, ...], first: tuple[bool, str | None],
                          later: tuple[bool, str | None], same: bool) -> None:
    lines = ["\t".join(["case", label, "1" if first[0] else "0", _field(first[1]), "1", "14.0"])]
    lines += [d.line() for d in devices]
    lines += ["\t".join(["later", "1" if later[0] else "0", _field(later[1])]), "end"]
    result = run_driver(driver, lines)[label]
    assert result["same_choice"] is same
    if not same:
        error = result["late_error"]
        assert "PYTORCH_MPS_ALLOW_INTEL_GPU" in error and "torch.backends.mps.allow_intel_gpu" in error
        assert "before the first use" in error


def test_low_power_warning_points_to_the_benchmark(driver: Path) -> None:
    lines = ["\t".join(["case", "w", "1", "!", "1", "14.0"]), UHD630.line(), "end",
             "\t".join(["case", "n", "1", "!", "1", "14.0"]), UHD630.line(), PRO5500M.line(), "end"]
    results = run_driver(driver, lines)
    warning = results["w"]["warning"]
    assert UHD630.name in warning and "slower than the CPU" in warning and "bench" in warning
    assert "warning" not in results["n"]  # a discrete GPU was chosen: nothing to warn about


ENV_BOOL = [
    ("1", True), ("true", True), ("TRUE", True), ("Yes", True), ("on", True), ("ON", True), (" 1 ", True),
    ("0", False), ("false", False), ("No", False), ("OFF", False), ("off", False), ("FaLsE", False),
    ("", None), (None, None),
    # Only empty means unset: blanks alone are a mistake, warned about like any other.
    ("   ", "warn"), (" ", "warn"),
    ("2", "warn"), ("maybe", "warn"), ("enable", "warn"), ("tru", "warn"), ("y", "warn"), ("-1", "warn"),
]


@pytest.mark.parametrize(("raw", "expected"), ENV_BOOL, ids=[repr(r) for r, _ in ENV_BOOL])
def test_parse_bool_env(driver: Path, raw: str | None, expected: bool | str | None) -> None:
    result = run_driver(driver, ["\t".join(["envbool", "x", "PYTORCH_MPS_ALLOW_INTEL_GPU", _field(raw)])])["x"]
    if expected == "warn":
        assert result["value"] is None
        warning = result["warning"]
        assert f"PYTORCH_MPS_ALLOW_INTEL_GPU='{raw}'" in warning
        for accepted in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            assert accepted in warning
    else:
        assert result["value"] is expected and result["warning"] == ""


SELECTORS = [
    ("0", "index", 0), (" 2 ", "index", 2), ("uhd", "name", None), ("Radeon Pro", "name", None),
    ("", "none", None), (None, "none", None), ("-1", "name", None),
    ("99999999999999999999999", "index", None),  # parses, and is simply out of range
    # Leading zeros go before the size check: 22 digits, but index 1.
    ("0000000000000000000001", "index", 1), ("000", "index", 0), (" 0002 ", "index", 2),
    ("1000000000000000000", "index", None),  # 19 significant digits: saturated, out of range
]


@pytest.mark.parametrize(("raw", "kind", "index"), SELECTORS, ids=[repr(r) for r, _, _ in SELECTORS])
def test_parse_device_selector(driver: Path, raw: str | None, kind: str, index: int | None) -> None:
    result = run_driver(driver, ["\t".join(["selector", "x", _field(raw)])])["x"]
    assert result["kind"] == kind
    if index is not None:
        assert result["index"] == index
    if kind == "name":
        assert result["text"] == raw.strip()  # type: ignore[union-attr]
    assert result["warning"] == ""


@pytest.mark.parametrize("raw", ["   ", " ", " \f "], ids=repr)
def test_a_blank_device_selector_warns_like_a_blank_allow_variable(driver: Path, raw: str) -> None:
    result = run_driver(driver, ["\t".join(["selector", "x", _field(raw)])])["x"]
    assert result["kind"] == "none"
    assert f"PYTORCH_MPS_DEVICE='{raw}'" in result["warning"] and "using the default choice" in result["warning"]


def test_a_device_index_with_leading_zeros_picks_that_index(driver: Path) -> None:
    lines = ["\t".join(["case", "z", "0", _field("0000000000000000000001"), "1", "14.0"]),
             UHD630.line(), PRO5500M.line(), "end"]
    assert run_driver(driver, lines)["z"]["result"]["selected"] == UHD630.name  # [1] in devices()


ACCENTED = "Radeon Pro \u00e9dition"  # a made-up name with a two-byte UTF-8 character


@pytest.mark.parametrize(("selector", "expected"), [
    ("\u00e9dition", ACCENTED),      # the whole character matches
    ("pro \u00e9", ACCENTED),
    ("pro \xc3", None),              # only the first byte of "\u00e9": no match
    ("\xa9dition", None),            # only its second byte, then the rest
])
def test_a_name_match_is_never_half_a_utf8_character(driver: Path, selector: str, expected: str | None) -> None:
    dev = Dev(ACCENTED, 0x100000a00)
    raw = selector.encode("latin-1") if any(0x80 <= ord(c) < 0x100 for c in selector) and "\u00e9" not in selector \
        else selector.encode("utf-8")
    lines = [b"\t".join([b"case", b"u", b"0", b"=" + raw, b"1", b"14.0"]), dev.line().encode("utf-8"), b"end"]
    done = subprocess.run([str(driver)], input=b"\n".join(lines) + b"\n", capture_output=True, check=True,
                          timeout=60)
    result = json.loads(done.stdout.decode("utf-8", "replace").splitlines()[0])["result"]
    assert result["selected"] == expected, result["reason"]
    if expected is None:
        assert "matches no Metal device name" in result["reason"]


CORES = [
    ("Intel(R) UHD Graphics 630", True, 3), ("Intel(R) Iris(TM) Plus Graphics 655", True, 6),
    ("Intel(R) Iris(TM) Plus Graphics", True, 8), ("AMD Radeon Pro 5500M", False, 24),
    ("AMD Radeon Pro 560X", False, 16), ("AMD Radeon Pro 5700 XT", False, 40),
    ("AMD Radeon Pro Vega II", False, 64), ("AMD Radeon RX 580", False, 36),
    ("Some Future iGPU", True, 3), ("Some Future dGPU", False, 8),
]


@pytest.mark.parametrize(("name", "low_power", "cores"), CORES, ids=[c[0] for c in CORES])
def test_fallback_core_count(driver: Path, name: str, low_power: bool, cores: int) -> None:
    result = run_driver(driver, ["\t".join(["core", "x", name, "1" if low_power else "0"])])["x"]
    assert result["cores"] == cores


def test_metal4_only_on_apple_gpus(driver: Path) -> None:
    results = run_driver(driver, ["metal4\tapple\t1", "metal4\tother\t0"])
    assert results["apple"]["metal4"] is True and results["other"]["metal4"] is False


def test_a_full_name_picks_its_device_even_inside_a_longer_name(driver: Path) -> None:
    """Mac Pro 2019 with a Vega II and a Vega II Duo: the full shorter name is not ambiguous."""
    duo = Dev("AMD Radeon Pro Vega II Duo", 0x100000800, working_set=32 * GIB)
    for selector, expected in (("amd radeon pro vega ii", VEGA_A.name), ("duo", duo.name), ("vega", None)):
        for p, devices in enumerate(itertools.permutations((VEGA_A, duo))):
            lines = ["\t".join(["case", "x", "0", _field(selector), "1", "14.0"])]
            lines += [d.line() for d in devices] + ["end"]
            result = run_driver(driver, lines)["x"]["result"]
            assert result["selected"] == expected, (selector, p, result["reason"])


FULL_NAME_RULE = "full name picks that device even when it is also part of a longer name"


def test_the_docs_state_the_full_name_rule_the_code_follows() -> None:
    """test_a_full_name_picks_its_device_even_inside_a_longer_name checks the code; the docs say the same."""
    repo = Path(__file__).resolve().parents[2]
    for doc in ("docs/mps-python-api.md", "docs/mps-device-policy.md"):
        text = " ".join((repo / doc).read_text(encoding="utf-8").split())
        assert FULL_NAME_RULE in text, doc
    header = repo / "patches/src/aten/src/ATen/mps/MPSDevicePolicy.h"
    assert "full name picks that device even when it is" in " ".join(header.read_text().replace("//", "").split())

