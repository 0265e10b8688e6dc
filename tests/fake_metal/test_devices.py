"""Our device-selection glue, run: each line's MPSDevice constructor and MPSDeviceSelection.mm
on the stand-in Metal, inside the test torch, through the line's patched Python layer.

For every release line (build.py says what is compiled with which headers) and for the
Macs of tests/patches_cpp/test_policy.py (Mac mini 2018, MacBook Pro 16" 2019, MacBook Pro
13" + eGPU, iMac, Mac Pro, Apple silicon, a macOS VM, and more), in every order Metal could
list their devices, with and without the opt-in and with PYTORCH_MPS_DEVICE choices:

- the device the MPSDevice constructor retains (by registry id, and its retain count);
- ``torch.backends.mps.is_available()``;
- ``devices()`` (order, flags) and ``unavailable_reason()``;
- the rescan after ``allow_intel_gpu = True``, and a switch after first use refused.

test_policy.py checks the same expectations on the portable policy alone; here they must
survive the Objective-C++ between Metal and the policy (index mapping, NSString
conversions, nil devices, retain/release, the operators' registration).

Proof that these tests can fail (docs: tests/fake_metal/README.md): break the glue in
patches/src/aten/src/ATen/mps/MPSDeviceSelection.mm, e.g.

    sed -i 's/props.low_power = \\[device isLowPower\\]/props.low_power = [device isRemovable]/' \\
        patches/src/aten/src/ATen/mps/MPSDeviceSelection.mm

and run ``pytest tests/fake_metal -k glue_is_checked`` or the whole folder: the
Intel-GPU scenarios fail (the UHD 630 is no longer seen as low-power, the eGPU is). The
test ``test_a_broken_glue_fails_these_checks`` does exactly that on a copy, every run.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..patches_cpp.test_policy import CONFIGS, M1, PRO5500M, UHD630, Config, Dev, Expect
from .conftest import Line, line_build

pytestmark = pytest.mark.upstream  # each line's wheel, and 2.6.0's source tree


def metal_device(dev: Dev) -> dict[str, Any]:
    families = ["Mac2"] if dev.mac2 else []
    if dev.apple:
        families += ["Apple1", "Apple7"]
    return {"name": dev.name, "registry_id": dev.registry_id, "low_power": dev.low_power,
            "removable": dev.removable, "headless": dev.headless, "unified_memory": dev.unified_memory,
            "recommended_working_set": dev.working_set, "families": families,
            "gpu_core_count": 8 if dev.apple else 0}


def min_macos(line: Line) -> str:
    header = next(line.build.library.parent.parent.glob("prep/tree/aten/src/ATen/mps/MPSDevice.h"))
    return re.search(r'#define INTELMAC_MPS_MIN_MACOS "([\d.]+)"', header.read_text())[1]


def configs_for(line: str) -> list[Config]:
    """The Macs as this line sees them: the same on every line, but for its probe."""
    chosen = []
    for config in CONFIGS:
        if not config.macos_ok and line == "2.15.0":
            continue  # 2.15.0 has no MPSGraph probe: no macOS is too old for it here
        chosen.append(config)
    return chosen


def scenarios(config: Config) -> Iterator[tuple[str, dict[str, str], Expect]]:
    yield "default", {}, config.default
    yield "allowed", {"PYTORCH_MPS_ALLOW_INTEL_GPU": "1"}, config.allowed
    for index, expect in config.by_index.items():
        yield f"index {index}", {"PYTORCH_MPS_DEVICE": str(index)}, expect
    yield "by name", {"PYTORCH_MPS_DEVICE": config.by_name[0]}, config.by_name[1]
    yield "ambiguous", {"PYTORCH_MPS_DEVICE": config.ambiguous[0]}, config.ambiguous[1]
    yield "out of range", {"PYTORCH_MPS_DEVICE": str(len(config.devices))}, config.out_of_range
    for text, expect in config.extra:
        yield f"name {text!r}", {"PYTORCH_MPS_DEVICE": text}, expect


STEPS = ["retained", "is_available", "devices", "reason", "retain_counts"]


def build_cases(line: Line) -> list[tuple[str, Config, Expect, dict[str, Any]]]:
    cases = []
    for config in configs_for(line.line):
        for label, env, expect in scenarios(config):
            for p, order in enumerate(itertools.permutations(config.devices)):
                metal = {"devices": [metal_device(d) for d in order], "mpsgraph": config.macos_ok}
                scenario = {"id": f"{config.name} | {label} | {p}", "metal": metal, "env": env, "steps": STEPS}
                cases.append((f"{config.name} | {label} | order {[d.name for d in order]}", config, expect, scenario))
    return cases


def steps_of(result: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    assert "fatal" not in result, f"{where}: {result['fatal']}"
    return {s["step"]: s for s in result["steps"]}


def check(line: Line, where: str, config: Config, expect: Expect, result: dict[str, Any]) -> list[str]:
    """What is wrong with one scenario's result (empty: nothing)."""
    problems: list[str] = []
    s = steps_of(result, where)
    for name in STEPS:
        if "error" in s[name]:
            problems.append(f"{name} raised {s[name]['error']}")
    if problems:
        return problems
    by_name = {d.name: d for d in config.devices}
    retained = s["retained"]["value"]
    if expect.selected is None:
        if retained != 0:
            problems.append(f"retained registry id {retained:#x}, expected none")
    else:
        wanted = expect.registry_id or by_name[expect.selected].registry_id
        if retained != wanted:
            problems.append(f"retained {retained:#x}, expected {wanted:#x} ({expect.selected})")
    if s["is_available"]["value"] != (expect.selected is not None):
        problems.append(f"is_available() = {s['is_available']['value']}")
    infos = s["devices"]["value"]
    if [(d["name"]) for d in infos] != [d.name for d in config.stable]:
        problems.append(f"devices() order {[d['name'] for d in infos]}")
    selected = [d for d in infos if d["selected"]]
    if expect.selected is None:
        if selected:
            problems.append(f"devices() marks {selected[0]['name']} selected")
        reason = s["reason"]["value"] or ""
        text = reason.replace("14.0", min_macos(line)) if not config.macos_ok else reason
        for needle in expect.reason_has:
            needle = needle.replace("14.0", min_macos(line)) if not config.macos_ok else needle
            if needle not in text:
                problems.append(f"reason lacks {needle!r}: {reason!r}")
        for needle in expect.reason_lacks:
            if needle in reason:
                problems.append(f"reason has {needle!r}")
    else:
        if len(selected) != 1 or selected[0]["name"] != expect.selected or selected[0]["skip_reason"] is not None:
            problems.append(f"devices() selected {[d['name'] for d in selected]}")
        if s["reason"]["value"] is not None:
            problems.append(f"unavailable_reason() = {s['reason']['value']!r} while available")
    for d in infos:
        if not d["selected"] and not d["skip_reason"]:
            problems.append(f"{d['name']} skipped without a reason")
    counts = s["retain_counts"]["value"]
    if counts:
        base = min(counts.values())
        extra = {rid: n - base for rid, n in counts.items() if n != base}
        wanted_extra = {} if expect.selected is None else {
            str(expect.registry_id or by_name[expect.selected].registry_id): 1}
        if len(counts) == 1 and expect.selected is not None:
            extra = {rid: n - 1 for rid, n in counts.items()}  # the configuration's own reference
        if extra != wanted_extra:
            problems.append(f"retain counts {counts}: expected one more on the retained device only")
    return problems


@pytest.fixture(scope="module")
def results(line: Line) -> dict[str, Any]:
    cases = build_cases(line)
    ran = line.run([scenario for _where, _config, _expect, scenario in cases])
    return {"cases": cases, "ran": ran}


def test_every_mac_in_every_order(line: Line, results: dict[str, Any]) -> None:
    failures = []
    for where, config, expect, scenario in results["cases"]:
        problems = check(line, where, config, expect, results["ran"][scenario["id"]])
        failures += [f"{line.line}: {where}: {p}" for p in problems]
    assert not failures, f"{len(failures)} problem(s):\n" + "\n".join(failures[:40])
    assert len(results["cases"]) > 100


def test_the_macs_of_the_issue_are_all_there(line: Line) -> None:
    names = " ".join(c.name for c in configs_for(line.line))
    for mac in ("Mac mini 2018", 'MacBook Pro 16" 2019', 'MacBook Pro 13" 2019 (Iris Plus 655) + RX 580 eGPU',
                "iMac", "Mac Pro", "Apple M1", "macOS VM"):
        assert mac in names


def _single(line: Line, devices: tuple[Dev, ...], steps: list[str], env: dict[str, str] | None = None,
            *, mpsgraph: bool = True) -> dict[str, dict[str, Any]]:
    scenario = {"id": "x", "metal": {"devices": [metal_device(d) for d in devices], "mpsgraph": mpsgraph},
                "env": env or {}, "steps": steps}
    result = line.run([scenario])["x"]
    return steps_of(result, "single") | {"__records__": {"value": result["records"]}}


def test_rescan_after_opt_in(line: Line) -> None:
    """Mac mini 2018: nothing chosen by default; allow_intel_gpu = True rescans and retains the UHD 630."""
    s = _single(line, (UHD630,), ["is_available", "retained", "set=true", "is_available", "retained", "devices"])
    availability = [v["value"] for k, v in s.items() if k == "is_available"]
    assert s["set=true"].get("error") is None
    assert s["retained"]["value"] == UHD630.registry_id  # the last "retained" step
    assert availability == [True]  # the dict keeps the last: after the rescan
    assert [d["selected"] for d in s["devices"]["value"]] == [True]
    copies = [r for r in s["__records__"]["value"] if r["kind"] == "copy_all_devices"]
    assert len(copies) >= 2  # the constructor's scan and the rescan each list the devices


def test_first_scan_then_rescan_in_order(line: Line) -> None:
    s = line.run([{"id": "a", "metal": {"devices": [metal_device(UHD630)]}, "env": {},
                   "steps": ["is_available", "retained"]},
                  {"id": "b", "metal": {"devices": [metal_device(UHD630)]}, "env": {},
                   "steps": ["is_available", "set=true", "is_available", "retained"]}])
    assert [st.get("value") for st in s["a"]["steps"][1:]] == [False, 0]
    assert [st.get("value") for st in s["b"]["steps"][1:]] == [False, None, True, UHD630.registry_id]


def test_a_switch_after_first_use_is_refused(line: Line) -> None:
    """Intel GPU in use (opted in by the environment); turning the opt-in off raises and changes nothing."""
    s = _single(line, (UHD630,), ["is_available", "set=false", "get", "retained"],
                {"PYTORCH_MPS_ALLOW_INTEL_GPU": "1"})
    assert s["is_available"]["value"] is True
    error = s["set=false"]["error"]
    assert error.startswith("RuntimeError") and "before the first use" in error
    assert s["get"]["value"] is True and s["retained"]["value"] == UHD630.registry_id


def test_allow_after_amd_chosen_is_stored_and_keeps_the_amd_gpu(line: Line) -> None:
    s = _single(line, (UHD630, PRO5500M), ["is_available", "set=true", "get", "retained"])
    assert s["set=true"].get("error") is None and s["get"]["value"] is True
    assert s["retained"]["value"] == PRO5500M.registry_id


def test_macos_vm_warns_about_the_paravirtual_device(line: Line) -> None:
    from ..patches_cpp.test_policy import PARAVIRT

    s = _single(line, (PARAVIRT,), ["is_available", "reason"])
    assert s["is_available"]["value"] is False
    assert "Mac2" in s["reason"]["value"]


def test_core_count(line: Line) -> None:
    """getCoreCount(): IORegistry's count on Apple GPUs, the name's on others (2.9.1 on)."""
    apple = _single(line, (M1,), ["is_available", "core_count"])
    amd = _single(line, (PRO5500M,), ["is_available", "core_count"])
    if not line.build.has_core_count:
        assert apple["core_count"]["value"] == -1
        return
    assert apple["core_count"]["value"] == 8
    assert amd["core_count"]["value"] > 0


def test_a_broken_glue_fails_these_checks(fake_metal_lib: Path, tmp_path_factory: pytest.TempPathFactory,
                                          tmp_path: Path) -> None:
    """isRemovable read where isLowPower is meant: the scenarios above notice."""
    from .conftest import REPO

    source = REPO / "patches" / "src" / "aten" / "src" / "ATen" / "mps" / "MPSDeviceSelection.mm"
    text = source.read_text(encoding="utf-8")
    good = "props.low_power = [device isLowPower];"
    assert good in text
    broken = tmp_path / "MPSDeviceSelection.mm"
    broken.write_text(text.replace(good, "props.low_power = [device isRemovable];"), encoding="utf-8")
    line = line_build("2.9.1", fake_metal_lib, tmp_path_factory, selection_source=broken, label="-broken")
    cases = [c for c in build_cases(line) if c[1].name.startswith(("Mac mini", 'MacBook Pro 16" 2019 +'))
             and " | default | " in c[0]]
    ran = line.run([scenario for *_rest, scenario in cases])
    failures = [p for where, config, expect, scenario in cases
                for p in check(line, where, config, expect, ran[scenario["id"]])]
    assert failures, "a glue that reads isRemovable for low-power went unnoticed"


def test_names_survive_nsstring_and_json_both_ways(line: Line) -> None:
    """Quotes, a backslash and non-ASCII in a device name: Metal's NSString to Python unchanged."""
    odd = Dev('AMD Radeon "Pro" \\ \u00c9dition \u2013 5500M', 0x100000b00, working_set=8 << 30)
    # Case folding is ASCII only: the part is spelt with the name's capital \u00c9.
    s = _single(line, (UHD630, odd), ["devices", "retained"], {"PYTORCH_MPS_DEVICE": "\u00c9dition"})
    names = [d["name"] for d in s["devices"]["value"]]
    assert odd.name in names and UHD630.name in names
    assert s["retained"]["value"] == odd.registry_id  # picked by a non-ASCII part of its name
