"""The scenarios: the opt-in and device-choice contract, run against a sandbox."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...core.contract import (
    ACCEPTED_FALSE,
    ACCEPTED_TRUE,
    ALLOW_ENV,
    DEVICE_ENV,
    DEVICE_INFO_FIELDS,
)
from .macs import FAKE_MACS, PRO5500M, UHD630
from .sandbox import ProbeRecord, Sandbox, ScenarioFailure


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ScenarioFailure(message)


def _only(records: Sequence[ProbeRecord], step: str) -> ProbeRecord:
    found = [r for r in records if r.step == step]
    _expect(len(found) == 1, f"expected one '{step}' record, got {len(found)}")
    return found[0]


def _no_error(record: ProbeRecord) -> ProbeRecord:
    _expect(record.error is None, f"step '{record.step}' failed: {record.error}")
    return record


def _all_warnings(records: Sequence[ProbeRecord]) -> list[str]:
    return [w for r in records for w in r.warnings]


def _index_of(sandbox: Sandbox, mac: str, name_part: str) -> int:
    """The index devices() gives a device, asked of the patched layer itself."""
    (record,) = [r for r in sandbox.probe(mac, ["devices"]) if r.step == "devices"]
    matches = [
        d["index"] for d in _no_error(record).value if name_part.lower() in d["name"].lower()
    ]
    _expect(
        len(matches) == 1,
        f"devices() on {mac} lists {len(matches)} devices named like '{name_part}'",
    )
    return int(matches[0])


def scenario_default_is_off(sandbox: Sandbox) -> None:
    """Intel-only Mac, no environment: the flag is False and MPS says why it is unavailable."""
    records = sandbox.probe("mac-mini-2018", ["get", "is_available", "reason"])
    _expect(
        _no_error(_only(records, "get")).value is False, "allow_intel_gpu must default to False"
    )
    _expect(
        _no_error(_only(records, "is_available")).value is False,
        "an Intel-only Mac must not use MPS without the opt-in",
    )
    reason = _no_error(_only(records, "reason")).value
    _expect(
        isinstance(reason, str) and "Intel(R) UHD Graphics 630" in reason and ALLOW_ENV in reason,
        f"unavailable_reason() must name the Intel GPU and {ALLOW_ENV}, got {reason!r}",
    )
    _expect(
        not _all_warnings(records), f"no warning expected by default, got {_all_warnings(records)}"
    )


def scenario_env_spellings(sandbox: Sandbox) -> None:
    """Every accepted spelling, in any case; empty means unset; all without a warning."""
    # Each word once, in turn lower, upper and mixed case (one process per value).
    styles = (str.lower, str.upper, str.capitalize)
    cases = [(styles[i % 3](word), True) for i, word in enumerate(ACCEPTED_TRUE)]
    cases += [(styles[(i + 1) % 3](word), False) for i, word in enumerate(ACCEPTED_FALSE)]
    cases += [("", False), (" on ", True), ("oFf", False)]
    for raw, expected in dict(cases).items():
        records = sandbox.probe("mac-mini-2018", ["get"], {ALLOW_ENV: raw})
        value = _no_error(_only(records, "get")).value
        _expect(
            value is expected,
            f"{ALLOW_ENV}={raw!r} must give allow_intel_gpu={expected}, got {value!r}",
        )
        _expect(
            not _all_warnings(records),
            f"{ALLOW_ENV}={raw!r} must not warn, got {_all_warnings(records)}",
        )


def scenario_env_invalid_warns_once(sandbox: Sandbox) -> None:
    """An unknown value, blanks alone included: one warning naming variable, value and accepted values."""
    for raw in ("maybe", "   "):
        records = sandbox.probe(
            "mac-mini-2018", ["get", "is_available", "get", "reason"], {ALLOW_ENV: raw}
        )
        _expect(_no_error(_only(records, "import")).error is None, "import failed")
        values = [r.value for r in records if r.step == "get"]
        _expect(
            values == [False, False],
            f"{raw!r}: an invalid value must leave the default (False), got {values}",
        )
        found = _all_warnings(records)
        _expect(len(found) == 1, f"{raw!r}: expected exactly one warning, got {found}")
        text = found[0]
        missing = [
            part
            for part in (ALLOW_ENV, f"'{raw}'", *ACCEPTED_TRUE, *ACCEPTED_FALSE)
            if part not in text
        ]
        _expect(
            not missing,
            f"the warning must name the variable, the value and the accepted values; "
            f"{missing} missing from {text!r}",
        )


def scenario_opt_in_after_failed_scan(sandbox: Sandbox) -> None:
    """is_available() False, then allow_intel_gpu = True, then is_available() True."""
    records = sandbox.probe(
        "mac-mini-2018",
        ["is_available", "set=true", "get", "is_available", "reason", "devices", "is_available"],
    )
    available = [r.value for r in records if r.step == "is_available"]
    _expect(
        all(r.error is None for r in records),
        f"no step may fail: {[r.error for r in records if r.error]}",
    )
    _expect(
        available == [False, True, True],
        f"expected is_available() False, True, True; got {available}",
    )
    _expect(_only(records, "get").value is True, "the flag must read back True")
    _expect(
        _only(records, "reason").value is None,
        "unavailable_reason() must be None once MPS is usable",
    )
    selected = [d["name"] for d in _only(records, "devices").value if d["selected"]]
    _expect(selected == [UHD630["name"]], f"the Intel GPU must be selected, got {selected}")
    intel_notes = [w for w in _all_warnings(records) if UHD630["name"] in w]
    _expect(
        len(intel_notes) == 1,
        f"the Intel performance note must come exactly once, got {intel_notes}",
    )
    _expect(
        "CPU" in intel_notes[0] and "benchmark" in intel_notes[0],
        f"the Intel note must compare with the CPU and point to the benchmark: {intel_notes[0]!r}",
    )


def scenario_set_before_first_use(sandbox: Sandbox) -> None:
    """Set right after import, before any MPS use: it decides the first scan."""
    records = sandbox.probe("mac-mini-2018", ["set=true", "is_available", "get"])
    _expect(
        all(r.error is None for r in records),
        f"no step may fail: {[r.error for r in records if r.error]}",
    )
    _expect(
        _only(records, "is_available").value is True,
        "allow_intel_gpu = True before first use must make the Intel GPU usable",
    )
    dual = sandbox.probe("macbook-pro-16-2019", ["set=true", "devices"])
    selected = [d["name"] for d in _no_error(_only(dual, "devices")).value if d["selected"]]
    _expect(
        selected == [PRO5500M["name"]],
        f"the opt-in must not move a dual-GPU Mac off its Radeon, got {selected}",
    )


def scenario_late_change_raises(sandbox: Sandbox) -> None:
    """A device in use and a flag change that would switch it: RuntimeError, flag unchanged."""
    records = sandbox.probe(
        "mac-mini-2018", ["is_available", "set=false", "get", "is_available"], {ALLOW_ENV: "1"}
    )
    first, second = [r for r in records if r.step == "is_available"]
    _expect(first.value is True, f"{ALLOW_ENV}=1 must make the Intel GPU usable, got {first.value}")
    change = _only(records, "set=false")
    _expect(
        change.error is not None and change.error.startswith("RuntimeError"),
        f"switching off after first use must raise RuntimeError, got {change.error!r}",
    )
    _expect(
        ALLOW_ENV in (change.error or "") and "before" in (change.error or ""),
        f"the error must say to set {ALLOW_ENV} or the flag before first use: {change.error!r}",
    )
    _expect(_only(records, "get").value is True, "a refused change must leave the flag as it was")
    _expect(second.value is True, "a refused change must leave MPS usable")


def scenario_unchanged_choice_is_noop(sandbox: Sandbox) -> None:
    """Discrete GPU in use: toggling the flag does not change the choice, so nothing happens."""
    records = sandbox.probe(
        "macbook-pro-16-2019",
        ["is_available", "set=true", "get", "set=false", "get", "is_available", "devices"],
    )
    _expect(
        all(r.error is None for r in records),
        f"no step may fail: {[r.error for r in records if r.error]}",
    )
    _expect(
        [r.value for r in records if r.step == "get"] == [True, False],
        "the flag must follow each set",
    )
    _expect(
        [r.value for r in records if r.step == "is_available"] == [True, True],
        "MPS must stay usable",
    )
    selected = [d["name"] for d in _only(records, "devices").value if d["selected"]]
    _expect(selected == [PRO5500M["name"]], f"the Radeon must stay selected, got {selected}")


def scenario_pick_by_index(sandbox: Sandbox) -> None:
    """PYTORCH_MPS_DEVICE=<index of the Intel GPU in devices()> picks it: an explicit opt-in."""
    index = _index_of(sandbox, "macbook-pro-16-2019", "UHD")
    records = sandbox.probe(
        "macbook-pro-16-2019", ["get", "is_available", "devices"], {DEVICE_ENV: str(index)}
    )
    _expect(
        _only(records, "is_available").value is True,
        "picking a device by index must make MPS usable",
    )
    selected = [d for d in _only(records, "devices").value if d["selected"]]
    _expect(
        [d["index"] for d in selected] == [index],
        f"device {index} must be selected, got {selected}",
    )


def scenario_pick_by_name(sandbox: Sandbox) -> None:
    """PYTORCH_MPS_DEVICE=<part of a name>, any case."""
    for part, expected in (("uhd graphics", UHD630["name"]), ("RADEON", PRO5500M["name"])):
        records = sandbox.probe(
            "macbook-pro-16-2019", ["is_available", "devices"], {DEVICE_ENV: part}
        )
        selected = [d["name"] for d in _no_error(_only(records, "devices")).value if d["selected"]]
        _expect(
            selected == [expected], f"{DEVICE_ENV}={part!r} must select {expected}, got {selected}"
        )


def scenario_pick_ambiguous_or_unknown(sandbox: Sandbox) -> None:
    """A name matching several devices, or none, or an index out of range: unavailable, devices listed."""
    cases = (
        ("mac-pro-2019", "vega"),
        ("macbook-pro-16-2019", "nvidia"),
        ("macbook-pro-16-2019", "7"),
    )
    for mac, value in cases:
        records = sandbox.probe(mac, ["is_available", "reason", "devices"], {DEVICE_ENV: value})
        _expect(
            _only(records, "is_available").value is False,
            f"{DEVICE_ENV}={value!r} on {mac} must leave MPS off",
        )
        reason = _only(records, "reason").value or ""
        names = {d["name"] for d in _only(records, "devices").value}
        _expect(
            DEVICE_ENV in reason and all(name in reason for name in names),
            f"the reason must name {DEVICE_ENV} and list the devices {sorted(names)}: {reason!r}",
        )


def scenario_devices_fields(sandbox: Sandbox) -> None:
    """devices(): MPSDeviceInfo NamedTuples with the contract's fields, a stable index order."""
    records = sandbox.probe("macbook-pro-16-2019", ["devices", "exports"])
    record = _no_error(_only(records, "devices"))
    _expect(
        record.extra.get("types") == ["MPSDeviceInfo"],
        f"devices() must hold MPSDeviceInfo, got {record.extra}",
    )
    _expect(
        tuple(record.extra.get("fields", ())) == DEVICE_INFO_FIELDS,
        f"MPSDeviceInfo fields must be {DEVICE_INFO_FIELDS}, got {record.extra.get('fields')}",
    )
    infos = record.value
    _expect(
        len(infos) == len(FAKE_MACS["macbook-pro-16-2019"]),
        f"one entry per Metal device, got {infos}",
    )
    _expect(
        [d["index"] for d in infos] == list(range(len(infos))),
        "index must be the position in devices()",
    )
    by_name = {d["name"]: d for d in infos}
    for fake in FAKE_MACS["macbook-pro-16-2019"]:
        info = by_name[fake["name"]]
        for key, fake_key in (
            ("low_power", "low_power"),
            ("removable", "removable"),
            ("headless", "headless"),
            ("unified_memory", "unified_memory"),
            ("recommended_working_set_size", "working_set"),
        ):
            _expect(
                info[key] == fake[fake_key],
                f"{fake['name']}: {key} is {info[key]!r}, Metal said {fake[fake_key]!r}",
            )
    selected = [d for d in infos if d["selected"]]
    _expect(
        len(selected) == 1 and selected[0]["skip_reason"] is None and selected[0]["eligible"],
        f"exactly one eligible selected device without a skip reason, got {selected}",
    )
    skipped = [d for d in infos if not d["selected"]]
    _expect(
        all(isinstance(d["skip_reason"], str) and d["skip_reason"] for d in skipped),
        f"every other device must say why it was skipped: {skipped}",
    )
    exports = _no_error(_only(records, "exports")).value
    missing = {"MPSDeviceInfo", "build_info", "devices", "unavailable_reason"} - set(exports)
    _expect(not missing, f"__all__ lacks {sorted(missing)}")


def scenario_apple_silicon_unchanged(sandbox: Sandbox) -> None:
    """On Apple silicon the flag changes nothing: the M1 is used either way."""
    for env in ({}, {ALLOW_ENV: "0"}, {ALLOW_ENV: "1"}):
        records = sandbox.probe(
            "apple-m1", ["is_available", "set=true", "set=false", "devices"], env
        )
        _expect(
            all(r.error is None for r in records),
            f"{env}: no step may fail: {[r.error for r in records]}",
        )
        _expect(_only(records, "is_available").value is True, f"{env}: the M1 must be usable")
        _expect(
            not _all_warnings(records),
            f"{env}: no warning on Apple silicon, got {_all_warnings(records)}",
        )


def scenario_not_built_with_mps(sandbox: Sandbox) -> None:
    """A torch built without MPS: devices() is empty, the reason says so, the flag is stored."""
    records = sandbox.probe(
        "macbook-pro-16-2019",
        ["get", "set=true", "get", "devices", "reason", "is_available"],
        {ALLOW_ENV: "0"},
        has_mps=False,
    )
    _expect(
        all(r.error is None for r in records),
        f"no step may fail: {[r.error for r in records if r.error]}",
    )
    _expect(
        [r.value for r in records if r.step == "get"] == [False, True], "the flag must be stored"
    )
    _expect(_only(records, "devices").value == [], "devices() must be empty without MPS")
    _expect(
        _only(records, "reason").value == "PyTorch was built without MPS",
        f"unexpected reason {_only(records, 'reason').value!r}",
    )
    _expect(
        _only(records, "is_available").value is False, "is_available() must be False without MPS"
    )
    invalid = sandbox.probe("mac-mini-2018", ["get", "get"], {ALLOW_ENV: "2"}, has_mps=False)
    found = _all_warnings(invalid)
    _expect(
        len(found) == 1 and ALLOW_ENV in found[0] and "'2'" in found[0],
        f"without MPS an invalid value must still warn once, got {found}",
    )


def scenario_type_and_frozen_flags(sandbox: Sandbox) -> None:
    """Only True/False are accepted; torch.backends.disable_global_flags() freezes the flag too."""
    records = sandbox.probe("mac-mini-2018", ['set="1"', "get"])
    _expect(
        (_only(records, 'set="1"').error or "").startswith("TypeError"), "a string must be refused"
    )
    _expect(_only(records, "get").value is False, "a refused value must not change the flag")
    if "disable_global_flags" in (sandbox.root / "torch/backends/__init__.py").read_text(
        encoding="utf-8"
    ):
        frozen = sandbox.probe("mac-mini-2018", ["freeze_then_set", "get"])
        _expect(
            (_only(frozen, "freeze_then_set").error or "").startswith("RuntimeError"),
            "after disable_global_flags() setting the flag must raise, like the other backend flags",
        )
        _expect(_only(frozen, "get").value is False, "a frozen flag must keep its value")


def scenario_build_info(sandbox: Sandbox) -> None:
    """build_info(): the dist-info's INTELMAC_BUILD.json as a dict, or None without it."""
    absent = sandbox.probe("apple-m1", ["build_info"])
    _expect(
        _no_error(_only(absent, "build_info")).value is None,
        "build_info() must be None without the file",
    )
    data = {
        "upstream_version": sandbox.torch_version,
        "wheel_version": "probe+intelmac",
        "series_fingerprint": "0" * 64,
        "patches": ["0001-x.patch"],
        "toolchain": {"xcode": "16.4"},
        "source_sha256": "1" * 64,
        "built_at": "2026-11-22T00:00:00Z",
    }
    with sandbox.build_info_file(json.dumps(data)):
        present = sandbox.probe("apple-m1", ["build_info"])
    _expect(
        _no_error(_only(present, "build_info")).value == data,
        "build_info() must return the file's content",
    )


def scenario_main_report(sandbox: Sandbox) -> None:
    """python -m torch.backends.mps: the table, the flag and env state, build info; exit 0/1."""
    off = sandbox.run_main("mac-mini-2018")
    _expect(
        off.returncode == 1,
        f"exit status must be 1 when MPS is unusable, got {off.returncode}: {off.stderr}",
    )
    for part in (
        "low-power",
        "unified memory",
        "working set",
        "skip reason",
        UHD630["name"],
        ALLOW_ENV,
        DEVICE_ENV,
        "allow_intel_gpu",
        sandbox.torch_version,
        "build info",
    ):
        _expect(part in off.stdout, f"the report must show {part!r}:\n{off.stdout}")
    on = sandbox.run_main("mac-mini-2018", env={ALLOW_ENV: "yes"})
    _expect(
        on.returncode == 0,
        f"exit status must be 0 when MPS is usable, got {on.returncode}: {on.stderr}",
    )
    as_json = sandbox.run_main("macbook-pro-16-2019", ["--json"])
    _expect(
        as_json.returncode == 0,
        f"--json on a usable Mac must exit 0, got {as_json.returncode}: {as_json.stderr}",
    )
    data = json.loads(as_json.stdout)
    _expect(
        data["usable"] is True and len(data["devices"]) == 2 and data["allow_intel_gpu"] is False,
        f"unexpected --json report: {data}",
    )
    without = sandbox.run_main("mac-mini-2018", has_mps=False)
    _expect(
        without.returncode == 1 and "built without MPS" in without.stdout,
        f"without MPS the report must say so and exit 1:\n{without.stdout}{without.stderr}",
    )


def scenario_check_command(sandbox: Sandbox) -> None:
    """python -m torch.backends.mps --check and torch.backends.mps.check() on the line's files.

    Unavailable: exit 2 with the device report's reason, the GPU named in --json. Usable:
    the smoke checks and timings run in child processes on the line's own patched files;
    the stand-in torch has no tensors, so each check is an error with its message (exit 1),
    never a crash of the command. The real checks run over a real torch in tests/mps_check.
    """
    off = sandbox.run_main("mac-mini-2018", ["--check"])
    _expect(
        off.returncode == 2,
        f"--check must exit 2 when MPS is unavailable, got {off.returncode}:\n{off.stdout}{off.stderr}",
    )
    _expect(
        "unavailable:" in off.stdout and UHD630["name"] in off.stdout and ALLOW_ENV in off.stdout,
        f"--check must give the device report's reason (the Intel GPU and {ALLOW_ENV}):\n{off.stdout}",
    )
    as_json = sandbox.run_main("mac-mini-2018", ["--check", "--json"])
    data = json.loads(as_json.stdout or "null") or {}
    gpu = data.get("gpu") or {}
    _expect(
        as_json.returncode == 2 and data.get("status") == "unavailable"
        and gpu.get("name") == UHD630["name"] and gpu.get("family") == "intel-gen9"
        and gpu.get("low_power") is True and data.get("ops") == []
        and {"macos", "torch"} <= set(data),
        f"--check --json on an unusable Mac: unexpected {as_json.returncode}, {data}",
    )  # fmt: skip
    without = sandbox.run_main("mac-mini-2018", ["--check"], has_mps=False)
    _expect(
        without.returncode == 2 and "built without MPS" in without.stdout,
        f"--check without MPS must exit 2 and say so:\n{without.stdout}{without.stderr}",
    )
    on = sandbox.run_main("mac-mini-2018", ["--check", "--json"], {ALLOW_ENV: "1"})
    data = json.loads(on.stdout or "null") or {}
    results = data.get("ops") or []
    _expect(
        on.returncode == 1 and len(results) == 9
        and all(r["status"] == "error" and r["message"] for r in results)
        and not any("died" in r["message"] for r in results),
        f"--check with the opt-in must run every smoke check in a worker and report each "
        f"(errors under the stand-in torch), exit 1; got {on.returncode}:\n{on.stdout}{on.stderr[-2000:]}",
    )  # fmt: skip
    _expect(
        "allow_intel_gpu is True" in str(data.get("selection"))
        and [t["verdict"].split(":")[0] for t in data.get("timings", [])][:2] == ["matmul 1024", "matmul 1025"],
        f"--check must say why the device was chosen and judge each workload: {data}",
    )  # fmt: skip
    records = sandbox.probe("mac-mini-2018", ["check"])
    value = _no_error(_only(records, "check")).value
    _expect(
        value["type"] == "CheckResult" and value["exit_status"] == 2 and value["exported"]
        and UHD630["name"] in (value["reason"] or ""),
        f"torch.backends.mps.check() must return a CheckResult (exit_status 2 here): {value}",
    )  # fmt: skip


Scenario = Callable[[Sandbox], None]

SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_default_is_off,
        scenario_env_spellings,
        scenario_env_invalid_warns_once,
        scenario_opt_in_after_failed_scan,
        scenario_set_before_first_use,
        scenario_late_change_raises,
        scenario_unchanged_choice_is_noop,
        scenario_pick_by_index,
        scenario_pick_by_name,
        scenario_pick_ambiguous_or_unknown,
        scenario_devices_fields,
        scenario_apple_silicon_unchanged,
        scenario_not_built_with_mps,
        scenario_type_and_frozen_flags,
        scenario_build_info,
        scenario_main_report,
        scenario_check_command,
    )
}


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    failure: str | None  # None: passed

    @property
    def ok(self) -> bool:
        return self.failure is None


def run_scenarios(sandbox: Sandbox, names: Sequence[str] | None = None) -> list[ScenarioResult]:
    results = []
    for name in names or list(SCENARIOS):
        try:
            SCENARIOS[name](sandbox)
        except ScenarioFailure as failure:
            results.append(ScenarioResult(name, str(failure)))
        else:
            results.append(ScenarioResult(name, None))
    return results
