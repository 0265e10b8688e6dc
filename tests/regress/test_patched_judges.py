"""The patched-build checks' judges, fed with what a probe on a Mac would report.

The probes themselves need macOS and the patched wheel; the decisions are pure functions and
are tested here against a well-behaved fake Mac (Mac mini 2018: UHD 630 only), a MacBook Pro
16" (UHD 630 + Radeon Pro 5500M), a Mac with no usable GPU, and deliberately broken ones.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest

pytest.importorskip("torch")

from tests.regress import _patched

TRUTHY = {"1", "true", "yes", "on"}
FALSY = {"0", "false", "no", "off", ""}


def _device(index: int, name: str, low_power: bool, eligible: bool = True) -> dict[str, Any]:
    return {
        "index": index,
        "name": name,
        "low_power": low_power,
        "removable": False,
        "headless": False,
        "unified_memory": low_power,
        "recommended_working_set_size": 1 << 30,
        "eligible": eligible,
        "selected": False,
        "skip_reason": None,
    }


class FakeMac:
    """Follows issue 3's policy for a list of Metal devices."""

    def __init__(self, devices: list[dict[str, Any]], *, broken: str = "") -> None:
        self.devices = devices
        self.broken = broken

    def _select(self, allow: bool, pick: str | None) -> tuple[list[dict[str, Any]], str | None]:
        devs = [dict(d) for d in self.devices]
        chosen = None
        if pick is not None:
            matches = [
                d
                for d in devs
                if (pick.isdigit() and d["index"] == int(pick))
                or (not pick.isdigit() and pick.lower() in d["name"].lower())
            ]
            if len(matches) == 1 and matches[0]["eligible"]:
                chosen = matches[0]
        else:
            discrete = [d for d in devs if d["eligible"] and not d["low_power"]]
            low = [d for d in devs if d["eligible"] and d["low_power"]]
            chosen = (
                discrete[0]
                if discrete
                else (low[0] if low and (allow or self.broken == "intel-default") else None)
            )
        for d in devs:
            d["selected"] = d is chosen
            if d is not chosen:
                d["skip_reason"] = "not chosen" if self.broken != "no-skip-reason" else None
        reason = (
            None
            if chosen
            else "no usable device among: " + ", ".join(d["name"] for d in devs)
            if devs
            else "no Metal devices"
        )
        return devs, reason

    def probe(self, env: dict[str, str], set_flag: bool | None) -> dict[str, Any]:
        raw = env.get(_patched.ENV_ALLOW)
        warnings = []
        allow = False
        if raw is not None and raw.lower() in TRUTHY:
            allow = True
        elif raw is not None and raw.lower() not in FALSY:
            warnings.append(
                f"{_patched.ENV_ALLOW}={raw!r} is not one of 1/true/yes/on/0/false/no/off"
            )
            if self.broken == "double-warning":
                warnings.append(f"{_patched.ENV_ALLOW} again {raw}")
        flag_at_import = allow
        first = None
        if set_flag is not None:
            first = self._select(allow, env.get(_patched.ENV_DEVICE))[1] is None
            allow = set_flag
        devs, reason = self._select(allow, env.get(_patched.ENV_DEVICE))
        return {
            "flag_at_import": flag_at_import,
            "flag": allow,
            "flag_type": "bool",
            "first_available": first,
            "available": reason is None,
            "reason": reason,
            "devices": devs,
            "warnings": warnings,
            "build_info": {k: "x" for k in _patched.BUILD_INFO_KEYS},
            "version": "2.15.0+intelmac",
        }

    def main(self, env: dict[str, str]) -> tuple[int, str]:
        obs = self.probe(env, None)
        code = 0 if obs["available"] else 1
        if self.broken == "main-exit":
            code = 0
        return code, "Metal devices:\n" + "\n".join(d["name"] for d in obs["devices"])


MAC_MINI = [_device(0, "Intel(R) UHD Graphics 630", True)]
MBP16 = [_device(0, "Intel(R) UHD Graphics 630", True), _device(1, "AMD Radeon Pro 5500M", False)]


@pytest.mark.parametrize(
    "devices", [MAC_MINI, MBP16, []], ids=["mac-mini-2018", "mbp16-2019", "no-gpu"]
)
def test_well_behaved_mac_passes(devices: list[dict[str, Any]]) -> None:
    mac = FakeMac(devices)
    results = _patched.run_checks(mac.probe, mac.main)
    failed = [r for r in results if r.status == "fail"]
    assert not failed, failed
    names = {r.name for r in results}
    assert f"env {_patched.ENV_ALLOW}=maybe" in names and "allow_intel_gpu policy" in names
    assert sum(r.name.startswith(f"{_patched.ENV_DEVICE} by index") for r in results) == len(
        devices
    )


@pytest.mark.parametrize(
    ("broken", "failing_check"),
    [
        ("intel-default", "allow_intel_gpu policy"),
        ("no-skip-reason", "devices() report (default)"),
        ("double-warning", f"env {_patched.ENV_ALLOW}=maybe"),
        ("main-exit", "python -m torch.backends.mps (default)"),
    ],
)
def test_broken_mac_is_caught(broken: str, failing_check: str) -> None:
    mac = FakeMac(MAC_MINI, broken=broken)
    results = {r.name: r for r in _patched.run_checks(mac.probe, mac.main)}
    assert results[failing_check].status == "fail", results[failing_check]


def test_probe_error_is_a_failure() -> None:
    results = _patched.judge_env_values({"1": {"probe_error": "ImportError: no torch"}})
    assert results[0].status == "fail" and "ImportError" in results[0].detail


def test_skip_reason_off_macos() -> None:
    import sys

    if sys.platform != "darwin":
        assert "macOS" in (_patched.skip_reason() or "")


def test_contract_loads_from_a_checkout_without_the_builder_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `python -m tests.regress` runs from a checkout in any environment with torch (a GPU
    # machine, a Mac's own venv); the builder package need not be installed there.
    from intelmac_torch_builder.core import contract as installed

    for name in [n for n in sys.modules if n.partition(".")[0] == "intelmac_torch_builder"]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it now fails
    spec = importlib.util.spec_from_file_location("_patched_uninstalled", _patched.__file__)
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, fresh)  # its dataclasses look it up
    spec.loader.exec_module(fresh)
    assert fresh.contract is not installed
    assert fresh.ENV_ALLOW == installed.ALLOW_ENV
    assert fresh.DEVICE_FIELDS == installed.DEVICE_INFO_FIELDS
