"""Checks of the patched wheel's Python API (issue 3's shared contract).

They run only on macOS with a torch that has `torch.backends.mps.allow_intel_gpu`, and they
must also pass on a Mac with no usable GPU (a CI VM): every expectation below is stated
relative to what the device report says, never as "there is a GPU".

Each check is split in two: `observe` runs a fresh Python with a given environment (the
flag and the device choice are read once per process, so each case needs its own process)
and returns what it saw; the `judge_*` functions are pure and decide from observations.
The judges are tested on Linux with recorded observations (tests/regress/test_patched_judges.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


def _load_contract() -> Any:
    """The patched API's names (build_scripts/core/contract.py), installed or not.

    `make regress` installs the builder, but the suite also runs straight from a checkout
    (`python -m tests.regress` in any environment that has torch), so fall back to the file.
    """
    try:
        from intelmac_torch_builder.core import contract as installed
    except ImportError:
        pass
    else:
        return installed
    path = Path(__file__).resolve().parents[2] / "build_scripts" / "core" / "contract.py"
    spec = importlib.util.spec_from_file_location("_intelmac_contract", path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


contract = _load_contract()

# The contract's names come from the one place that defines them for every checker.
ENV_ALLOW = contract.ALLOW_ENV
ENV_DEVICE = contract.DEVICE_ENV
DEVICE_FIELDS = contract.DEVICE_INFO_FIELDS
BUILD_INFO_KEYS = contract.BUILD_INFO_KEYS

# What a fresh interpreter reports. `set_flag` sets allow_intel_gpu after import, before any MPS use.
_PROBE = r"""
import json, sys, warnings
set_flag = json.loads(sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    mps = torch.backends.mps
    flag_at_import = mps.allow_intel_gpu
    first_available = None
    if set_flag is not None:
        first_available = bool(mps.is_available())
        mps.allow_intel_gpu = set_flag
    flag = mps.allow_intel_gpu
    available = bool(mps.is_available())
    reason = mps.unavailable_reason()
    devices = [d._asdict() for d in mps.devices()]
    info = mps.build_info()
print(json.dumps({
    "flag_at_import": flag_at_import, "flag": flag, "flag_type": type(flag).__name__,
    "first_available": first_available, "available": available, "reason": reason,
    "devices": devices, "build_info": info, "version": torch.__version__,
    "warnings": [str(w.message) for w in caught],
}, default=str))
"""

Observation = dict[str, Any]
Probe = Callable[[dict[str, str], "bool | None"], Observation]
MainRunner = Callable[[dict[str, str]], tuple[int, str]]


@dataclass
class CheckResult:
    name: str
    status: str  # pass / fail / skip
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (ENV_ALLOW, ENV_DEVICE)}
    env.update(extra)
    return env


def subprocess_probe(env: dict[str, str], set_flag: bool | None = None) -> Observation:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(set_flag)],
        env=_clean_env(env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        return {"probe_error": proc.stderr.strip()[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def subprocess_main(env: dict[str, str]) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "torch.backends.mps"],
        env=_clean_env(env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def skip_reason() -> str | None:
    if sys.platform != "darwin":
        return f"patched-build checks need macOS (this is {sys.platform})"
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not hasattr(mps, "allow_intel_gpu"):
        return "this torch has no torch.backends.mps.allow_intel_gpu (not the patched wheel)"
    return None


# --- judges: pure functions of observations ------------------------------------------------


def _errors(obs: Observation) -> str | None:
    return f"probe failed: {obs['probe_error']}" if "probe_error" in obs else None


def judge_env_values(observations: dict[str, Observation]) -> list[CheckResult]:
    """`observations` maps an env value ("<unset>" for no variable) to its probe."""
    out: list[CheckResult] = []
    truthy = ("1", "true", "TRUE", "yes", "On")
    falsy = ("0", "false", "No", "OFF")
    for value, obs in observations.items():
        name = f"env {ENV_ALLOW}={value}"
        if (err := _errors(obs)) is not None:
            out.append(CheckResult(name, "fail", err))
            continue
        env_warnings = [w for w in obs["warnings"] if ENV_ALLOW in w]
        if value in truthy or value in falsy or value in ("<unset>", ""):
            expected = value in truthy
            ok = (
                obs["flag_at_import"] is expected
                and obs["flag_type"] == "bool"
                and not env_warnings
            )
            detail = (
                f"allow_intel_gpu={obs['flag_at_import']!r} ({obs['flag_type']}), "
                f"{len(env_warnings)} warning(s) naming the variable; expected {expected} and none"
            )
        else:
            ok = (
                obs["flag_at_import"] is False
                and len(env_warnings) == 1
                and value in env_warnings[0]
            )
            detail = (
                f"allow_intel_gpu={obs['flag_at_import']!r}, warnings naming the variable: "
                f"{env_warnings!r}; expected False and exactly one warning naming {value!r}"
            )
        out.append(CheckResult(name, "pass" if ok else "fail", detail))
    return out


def judge_device_report(obs: Observation, label: str) -> CheckResult:
    name = f"devices() report ({label})"
    if (err := _errors(obs)) is not None:
        return CheckResult(name, "fail", err)
    problems: list[str] = []
    devices = obs["devices"]
    for pos, dev in enumerate(devices):
        missing = [f for f in DEVICE_FIELDS if f not in dev]
        if missing:
            problems.append(f"device {pos} lacks {missing}")
            continue
        if dev["index"] != pos:
            problems.append(f"device {pos} has index {dev['index']}")
        if dev["selected"] and not dev["eligible"]:
            problems.append(f"{dev['name']} selected but not eligible")
        if not dev["selected"] and not (isinstance(dev["skip_reason"], str) and dev["skip_reason"]):
            problems.append(f"{dev['name']} not selected and has no skip_reason")
    selected = [d for d in devices if d.get("selected")]
    if len(selected) > 1:
        problems.append(f"{len(selected)} devices selected")
    if obs["available"] != (len(selected) == 1):
        problems.append(f"is_available()={obs['available']} but {len(selected)} device(s) selected")
    if obs["available"] != (obs["reason"] is None):
        problems.append(
            f"is_available()={obs['available']} but unavailable_reason()={obs['reason']!r}"
        )
    if not obs["available"] and not devices and not obs["reason"]:
        problems.append("no devices and no reason")
    summary = (
        ", ".join(f"{d.get('name')}{'*' if d.get('selected') else ''}" for d in devices)
        or "no Metal devices"
    )
    return CheckResult(name, "fail" if problems else "pass", "; ".join(problems) or summary)


def judge_intel_policy(denied: Observation, allowed: Observation) -> CheckResult:
    """Default: never a low-power GPU. Allowed: a discrete GPU still wins; otherwise an eligible
    low-power one is used."""
    name = "allow_intel_gpu policy"
    for obs in (denied, allowed):
        if (err := _errors(obs)) is not None:
            return CheckResult(name, "fail", err)
    sel_denied = [d for d in denied["devices"] if d["selected"]]
    sel_allowed = [d for d in allowed["devices"] if d["selected"]]
    if sel_denied and sel_denied[0]["low_power"]:
        return CheckResult(
            name, "fail", f"{sel_denied[0]['name']} (low power) selected without opt-in"
        )
    if sel_denied and [d["name"] for d in sel_allowed] != [sel_denied[0]["name"]]:
        return CheckResult(
            name, "fail", "opting in changed the choice although a non-low-power GPU was usable"
        )
    if not sel_denied:
        eligible_low = [d for d in allowed["devices"] if d["low_power"] and d["eligible"]]
        if eligible_low and not sel_allowed:
            return CheckResult(
                name,
                "fail",
                "an eligible low-power GPU exists but none was selected after opting in",
            )
        if not eligible_low and sel_allowed:
            return CheckResult(
                name, "fail", "a device was selected after opting in although none is eligible"
            )
    chosen = sel_allowed[0]["name"] if sel_allowed else "none"
    return CheckResult(
        name,
        "pass",
        f"default: {sel_denied[0]['name'] if sel_denied else 'none'}; opted in: {chosen}",
    )


def judge_flag_after_import(set_later: Observation, from_env: Observation) -> CheckResult:
    """is_available() (maybe False), then allow_intel_gpu = True, then is_available() must give
    what the environment variable gives."""
    name = "allow_intel_gpu set after import"
    for obs in (set_later, from_env):
        if (err := _errors(obs)) is not None:
            return CheckResult(name, "fail", err)
    ok = set_later["flag"] is True and set_later["available"] == from_env["available"]
    return CheckResult(
        name,
        "pass" if ok else "fail",
        f"first is_available()={set_later['first_available']}, after setting the flag "
        f"{set_later['available']}; with {ENV_ALLOW}=1 {from_env['available']}",
    )


def judge_pick(obs: Observation, wanted: dict[str, Any], how: str) -> CheckResult:
    name = f"{ENV_DEVICE} by {how}"
    if (err := _errors(obs)) is not None:
        return CheckResult(name, "fail", err)
    selected = [d for d in obs["devices"] if d["selected"]]
    target = next((d for d in obs["devices"] if d["name"] == wanted["name"]), None)
    if target is not None and target["eligible"]:
        ok = [d["name"] for d in selected] == [wanted["name"]]
        return CheckResult(
            name,
            "pass" if ok else "fail",
            f"picked {wanted['name']!r}; selected {[d['name'] for d in selected]}",
        )
    ok = not selected and bool(obs["reason"])
    return CheckResult(
        name,
        "pass" if ok else "fail",
        f"{wanted['name']!r} is not eligible ({target and target['skip_reason']}); "
        f"available={obs['available']}, reason={obs['reason']!r}",
    )


def judge_no_match(obs: Observation, value: str) -> CheckResult:
    name = f"{ENV_DEVICE}={value} (no match)"
    if (err := _errors(obs)) is not None:
        return CheckResult(name, "fail", err)
    reason = obs["reason"] or ""
    missing = [d["name"] for d in obs["devices"] if d["name"] not in reason]
    ok = not obs["available"] and bool(reason) and not missing
    return CheckResult(
        name,
        "pass" if ok else "fail",
        f"available={obs['available']}, reason={reason!r}"
        + (f"; the reason does not list {missing}" if missing else ""),
    )


def judge_main(code: int, output: str, obs: Observation) -> CheckResult:
    name = "python -m torch.backends.mps"
    if (err := _errors(obs)) is not None:
        return CheckResult(name, "fail", err)
    expected = 0 if obs["available"] else 1
    missing = [d["name"] for d in obs["devices"] if d["name"] not in output]
    ok = code == expected and not missing and bool(output.strip())
    return CheckResult(
        name,
        "pass" if ok else "fail",
        f"exit {code} (expected {expected})"
        + (f"; output does not name {missing}" if missing else ""),
    )


def judge_build_info(obs: Observation) -> CheckResult:
    name = "build_info()"
    if (err := _errors(obs)) is not None:
        return CheckResult(name, "fail", err)
    info = obs["build_info"]
    if info is None:
        return CheckResult(
            name, "skip", "build_info() is None: this wheel was not built by the orchestrator"
        )
    missing = [k for k in BUILD_INFO_KEYS if k not in info]
    return CheckResult(
        name,
        "fail" if missing else "pass",
        f"missing keys {missing}" if missing else f"wheel {info.get('wheel_version')}",
    )


def run_checks(
    probe: Probe = subprocess_probe, main: MainRunner = subprocess_main
) -> list[CheckResult]:
    """All patched-build checks, through `probe`/`main` (subprocesses on a Mac, fakes in tests)."""
    env_cases = (
        "<unset>",
        "",
        "1",
        "true",
        "TRUE",
        "yes",
        "On",
        "0",
        "false",
        "No",
        "OFF",
        "maybe",
    )
    env_obs = {v: probe({} if v == "<unset>" else {ENV_ALLOW: v}, None) for v in env_cases}
    results = judge_env_values(env_obs)
    denied, allowed = env_obs["<unset>"], env_obs["1"]
    results.append(judge_device_report(denied, "default"))
    results.append(judge_device_report(allowed, f"{ENV_ALLOW}=1"))
    results.append(judge_intel_policy(denied, allowed))
    results.append(judge_flag_after_import(probe({}, True), allowed))
    for dev in allowed.get("devices", []):
        results.append(
            judge_pick(probe({ENV_DEVICE: str(dev["index"])}, None), dev, f"index {dev['index']}")
        )
        names = [d["name"].lower() for d in allowed["devices"]]
        if (
            names.count(dev["name"].lower()) == 1
        ):  # identical twins (Vega II Duo) can't be named apart
            results.append(
                judge_pick(
                    probe({ENV_DEVICE: dev["name"].upper()}, None),
                    dev,
                    f"name {dev['name'].upper()!r}",
                )
            )
    no_match = "no-such-gpu-0xdead"
    results.append(judge_no_match(probe({ENV_DEVICE: no_match}, None), no_match))
    for env, obs in (({}, denied), ({ENV_ALLOW: "1"}, allowed)):
        code, output = main(env)
        check = judge_main(code, output, obs)
        check.name += f" ({'default' if not env else ENV_ALLOW + '=1'})"
        results.append(check)
    results.append(judge_build_info(denied))
    return results
