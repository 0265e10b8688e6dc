"""The process-wide state of the MPS device policy (MPSDevicePolicy.h's DeviceState).

MPSDeviceSelection.mm (patch 0002) keeps one DeviceState for the process and calls it; so does the
check-upstream shim. Here policy_driver.cpp runs scripted sequences of the calls they make
(scan, allow_intel_gpu, set_allow_intel_gpu, with the environment set in between) and
reports what the state says after each. The expectations are the behaviour issue 3 asks
for, written out; nothing here re-implements the state machine.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from intelmac_torch_builder.core.contract import DEVICE_INFO_FIELDS

from .test_policy import M1, PARAVIRT, PRO5500M, UHD630, Dev

ALLOW = "PYTORCH_MPS_ALLOW_INTEL_GPU"
DEVICE = "PYTORCH_MPS_DEVICE"


def run_state(
    driver: Path,
    devices: tuple[Dev, ...],
    steps: list[tuple[str, ...]],
    *,
    macos_ok: bool = True,
) -> list[dict[str, Any]]:
    """One fresh DeviceState on ``devices`` (in Metal's order); a record per step."""
    lines = ["\t".join(["state", "s", "1" if macos_ok else "0", "14.0"])]
    lines += [d.line() for d in devices]
    lines += ["\t".join(["do", *step]) for step in steps]
    lines.append("done")
    done = subprocess.run(
        [str(driver)],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    (result,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["op"] for r in result["steps"]] == [s[0] for s in steps]
    return list(result["steps"])


def selected(record: dict[str, Any]) -> str | None:
    return record["selection"]["selected"]


def status_of(record: dict[str, Any], name: str) -> dict[str, Any]:
    (status,) = [d for d in record["selection"]["devices"] if d["name"] == name]
    return status


def all_warnings(records: list[dict[str, Any]]) -> list[str]:
    return [w for r in records for w in r["warnings"]]


def setenv(name: str, value: str | None) -> tuple[str, ...]:
    return ("setenv", name, "!" if value is None else f"={value}")


def test_a_bad_environment_value_is_read_once_with_one_warning(driver: Path) -> None:
    steps = [
        setenv(ALLOW, "maybe"),
        ("get",),
        ("get",),
        ("scan",),
        setenv(ALLOW, "1"),
        ("get",),
        ("scan",),
    ]
    records = run_state(driver, (UHD630,), steps)
    gets = [r["value"] for r in records if r["op"] == "get"]
    assert gets == [False, False, False], (
        "the default applies, and a later change of the variable is not read"
    )
    assert all(selected(r) is None for r in records if r["op"] == "scan")
    warnings = all_warnings(records)
    assert len(warnings) == 1, warnings
    assert records[1]["warnings"] == warnings  # raised by the first read
    assert f"{ALLOW}='maybe'" in warnings[0]
    for accepted in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        assert accepted in warnings[0]


@pytest.mark.parametrize(
    ("raw", "expected"), [("1", True), ("Yes", True), ("off", False), ("", False), (None, False)]
)
def test_a_valid_environment_value_sets_the_flag_quietly(
    driver: Path, raw: str | None, expected: bool
) -> None:
    records = run_state(driver, (UHD630,), [setenv(ALLOW, raw), ("get",), ("scan",)])
    assert records[1]["value"] is expected
    assert selected(records[2]) == (UHD630.name if expected else None)
    assert not [w for w in all_warnings(records) if ALLOW in w]


def test_allowing_after_a_scan_that_chose_nothing_rescans(driver: Path) -> None:
    """is_available() False, then allow_intel_gpu = True, then is_available() True."""
    records = run_state(driver, (UHD630,), [("scan",), ("set", "1"), ("scan",), ("get",)])
    first, change, rescan, get = records
    assert first["value"] is None and first["scanned"] is True
    assert "only an Intel GPU (Intel(R) UHD Graphics 630) was found" in first["selection"]["reason"]
    assert change["change"] == "rescan" and change["error"] == ""
    assert selected(change) is None  # the caller runs the scan, with fresh device facts
    assert rescan["value"] == UHD630.name and selected(rescan) == UHD630.name
    assert rescan["selection"]["reason"] == ""
    assert get["value"] is True


def test_disallowing_the_intel_gpu_in_use_is_refused(driver: Path) -> None:
    records = run_state(
        driver, (UHD630,), [setenv(ALLOW, "1"), ("scan",), ("set", "0"), ("get",), ("set", "0")]
    )
    _, scan, refused, get, again = records
    assert selected(scan) == UHD630.name
    for record in (refused, again):
        assert record["change"] == "refused"
        error = record["error"]
        assert (
            f"The MPS device is already in use ('{UHD630.name}'); "
            "torch.backends.mps.allow_intel_gpu = False would select no device" in error
        )
        assert ALLOW in error and "before the first use of MPS" in error
        assert DEVICE not in error, "the refusal names what changed: the flag, not the device variable"
        assert selected(record) == UHD630.name, "the device in use stays"
    assert get["value"] is True, "a refused value is not kept"


@pytest.mark.parametrize(
    ("label", "devices", "env", "in_use"),
    [
        ("MacBook Pro 16 2019, the Radeon in use", (UHD630, PRO5500M), {}, PRO5500M.name),
        (
            "MacBook Pro 16 2019, the Intel GPU picked by name",
            (UHD630, PRO5500M),
            {DEVICE: "uhd"},
            UHD630.name,
        ),
        ("Apple M1", (M1,), {}, M1.name),
    ],
)
def test_a_change_that_keeps_the_device_is_accepted_quietly(
    driver: Path, label: str, devices: tuple[Dev, ...], env: dict[str, str], in_use: str
) -> None:
    steps = [setenv(k, v) for k, v in env.items()]
    steps += [("scan",), ("set", "1"), ("get",), ("set", "0"), ("get",)]
    records = run_state(driver, devices, steps)[len(env) :]
    scan, allow, get_true, disallow, get_false = records
    assert selected(scan) == in_use
    for record in (allow, disallow):
        assert record["change"] == "stored" and record["error"] == "", label
        assert selected(record) == in_use, label
    assert get_true["value"] is True and get_false["value"] is False
    low_power_warnings = [w for w in all_warnings(records) if "integrated GPU" in w]
    assert len(low_power_warnings) == (1 if in_use == UHD630.name else 0)


def test_the_report_follows_an_accepted_change(driver: Path) -> None:
    """After allow_intel_gpu = True on a dGPU + iGPU Mac, devices() shows the iGPU as eligible."""
    records = run_state(driver, (UHD630, PRO5500M), [("scan",), ("set", "1"), ("set", "0")])
    before, allowed, disallowed = (status_of(r, UHD630.name) for r in records)
    assert not before["eligible"] and "not used unless allowed" in before["skip_reason"]
    assert allowed["eligible"] and f"ranked after [0] {PRO5500M.name}" in allowed["skip_reason"]
    assert disallowed == before


def test_before_the_first_scan_the_value_is_only_stored(driver: Path) -> None:
    records = run_state(driver, (UHD630,), [setenv(ALLOW, "0"), ("set", "1"), ("get",), ("scan",)])
    _, stored, get, scan = records
    assert stored["change"] == "stored" and stored["scanned"] is False
    assert stored["selection"]["devices"] == [], "nothing is scanned by setting the flag"
    assert get["value"] is True, "the value set wins over the environment"
    assert scan["value"] == UHD630.name


def test_one_low_power_warning_per_process_across_rescans(driver: Path) -> None:
    steps = [("scan",), ("set", "1"), ("scan",), ("scan",), ("set", "1"), ("scan",)]
    records = run_state(driver, (UHD630,), steps)
    assert [selected(r) for r in records if r["op"] == "scan"] == [
        None,
        UHD630.name,
        UHD630.name,
        UHD630.name,
    ]
    warnings = all_warnings(records)
    assert len(warnings) == 1 and records[2]["warnings"] == warnings, warnings
    assert (
        UHD630.name in warnings[0]
        and "slower than the CPU" in warnings[0]
        and "bench" in warnings[0]
    )


def test_upstreams_skipping_warning_comes_with_the_first_scan_only(driver: Path) -> None:
    records = run_state(driver, (PARAVIRT,), [("scan",), ("set", "1"), ("scan",)])
    first, change, rescan = records
    assert first["warnings"] == [f"Skipping device {PARAVIRT.name} that does not support Metal 2.0"]
    assert change["change"] == "rescan"
    assert rescan["value"] is None and rescan["warnings"] == []


def test_a_scan_on_a_too_old_macos_does_not_count(driver: Path) -> None:
    """Upstream's macOS probe failed: the report explains it, and no change can help."""
    records = run_state(
        driver, (PARAVIRT, UHD630, PRO5500M), [("scan",), ("set", "1"), ("get",)], macos_ok=False
    )
    scan, change, get = records
    assert scan["value"] is None and scan["scanned"] is False
    assert "needs macOS 14.0 or newer" in scan["selection"]["reason"]
    assert len(scan["selection"]["devices"]) == 3
    assert scan["warnings"] == [], "upstream does not look at the devices on a too old macOS"
    assert change["change"] == "stored"
    assert get["value"] is True


# Found by an independent harness of real Mac configurations (issue 8): the environment is
# read once, at the first scan, and kept; a refusal names what actually changed.


def test_the_device_variable_changed_after_the_first_scan_is_ignored(driver: Path) -> None:
    """On the AMD GPU, PYTORCH_MPS_DEVICE changes, then the flag is set to its current value."""
    records = run_state(
        driver,
        (UHD630, PRO5500M),
        [("scan",), setenv(DEVICE, "uhd"), ("set", "0"), ("get",), ("set", "1"), ("set", "0")],
    )
    scan, _, same_value, get, allow, disallow = records
    assert selected(scan) == PRO5500M.name
    for record in (same_value, allow, disallow):
        assert record["change"] == "stored" and record["error"] == "", record
        assert selected(record) == PRO5500M.name
    assert get["value"] is False


def test_setting_the_current_value_is_never_refused(driver: Path) -> None:
    records = run_state(driver, (UHD630,), [setenv(ALLOW, "1"), ("scan",), ("set", "1"), ("get",)])
    _, scan, again, get = records
    assert selected(scan) == UHD630.name
    assert again["change"] == "stored" and again["error"] == ""
    assert get["value"] is True


def test_a_rescan_uses_the_device_variable_as_first_read(driver: Path) -> None:
    """Intel-only Mac: nothing chosen, PYTORCH_MPS_DEVICE set later, then the opt-in."""
    records = run_state(
        driver, (UHD630,), [("scan",), setenv(DEVICE, "nvidia"), ("set", "1"), ("scan",)]
    )
    first, _, allow, rescan = records
    assert selected(first) is None
    assert allow["change"] == "rescan"
    assert selected(rescan) == UHD630.name, "the later PYTORCH_MPS_DEVICE='nvidia' must not count"


def test_both_variables_are_read_together_once(driver: Path) -> None:
    """A blank flag value warns once, at the first question, however often it is asked."""
    records = run_state(
        driver, (UHD630,), [setenv(ALLOW, "   "), ("get",), ("scan",), ("get",), setenv(ALLOW, "1"), ("get",)]
    )
    found = all_warnings(records)
    assert len(found) == 1 and f"{ALLOW}='   '" in found[0], found
    assert [r["value"] for r in records if r["op"] == "get"] == [False, False, False]


def test_the_report_json_carries_every_status_field(driver: Path) -> None:
    """report_json() is what torch.backends.mps.devices() reads: valid JSON, every field."""
    odd = Dev('Odd "quoted" \\ name', 0x100000900, working_set=3)
    records = run_state(driver, (UHD630, odd), [("scan",), ("report",)])
    scan, report = records
    assert [d["name"] for d in report["value"]] == [d["name"] for d in scan["selection"]["devices"]]
    for entry, status in zip(report["value"], scan["selection"]["devices"]):
        assert entry["index"] == status["index"] and entry["selected"] == status["selected"]
        assert entry["eligible"] == status["eligible"]
        assert entry["skip_reason"] == (status["skip_reason"] or None)
    chosen = [d for d in report["value"] if d["selected"]]
    assert [d["name"] for d in chosen] == [odd.name] and chosen[0]["recommended_working_set_size"] == 3
    assert tuple(report["value"][0]) == DEVICE_INFO_FIELDS


# Every line, 2.14.1 and 2.15.0 included: the allocator patches (0008, 0009) make AMD GPUs
# usable, so a dual-GPU MacBook Pro runs on its AMD GPU, and naming it picks it.


def test_dual_gpu_macbook_pro_keeps_the_amd_gpu(driver: Path) -> None:
    records = run_state(driver, (UHD630, PRO5500M), [("scan",), ("report",), ("set", "1")])
    scan, report, allow = records
    assert selected(scan) == PRO5500M.name and status_of(scan, PRO5500M.name)["eligible"]
    (amd,) = [d for d in report["value"] if d["name"] == PRO5500M.name]
    assert amd["eligible"] and amd["selected"] and not amd["skip_reason"]
    assert allow["change"] == "stored" and selected(allow) == PRO5500M.name


def test_naming_the_amd_gpu_picks_it(driver: Path) -> None:
    records = run_state(driver, (UHD630, PRO5500M), [setenv(DEVICE, "5500M"), ("scan",)])
    assert selected(records[1]) == PRO5500M.name


def test_a_blank_device_variable_warns_once_and_picks_nothing(driver: Path) -> None:
    """PYTORCH_MPS_DEVICE of blanks only: warned about once, as a blank flag is; the default choice stands."""
    records = run_state(driver, (UHD630, PRO5500M), [setenv(DEVICE, "  "), ("scan",), ("scan",)])
    found = all_warnings(records)
    assert len(found) == 1 and f"{DEVICE}='  '" in found[0], found
    assert selected(records[-1]) == PRO5500M.name
