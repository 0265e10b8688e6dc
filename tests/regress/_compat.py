"""compat.json and compat.md: the small report a user shares after a run (issue 17).

regress.json is the full record; compat.json keeps what a maintainer needs to know whether
the wheel works on a GPU: the GPU's name and family, low-power and unified memory, macOS,
torch and the patch series' fingerprint, and per group, op and dtype the status with the
first message. It holds no host name, user name, path or command line: messages are cut
short and home directories in them replaced (`scrub`). compat.schema.json describes it;
``python -m tests.regress.known_from_reports`` turns such reports into known_failures.yaml
entries per GPU family.
"""

from __future__ import annotations

import getpass
import json
import platform
import re
from pathlib import Path
from typing import Any

FORMAT = "intelmac-torch-compat/1"
SCHEMA_FILE = Path(__file__).with_name("compat.schema.json")
# Worst first: the status of an (op, dtype) is the worst of its rows.
ORDER = ("hang", "gpu-error", "error", "fail", "unsupported", "fallback", "pass", "skip")
MESSAGE_LIMIT = 240
_HOME = re.compile(r"(/Users|/home|/var/folders|/private/var/folders|C:\\Users)[/\\][^/\\\s'\"]+")


def scrub(text: str) -> str:
    """A message without home directories, the user's or the host's name; cut short."""
    text = _HOME.sub("~", str(text))
    host = platform.node()
    names = [(host, "<host>"), (host.split(".")[0], "<host>"), (_user(), "<user>")]
    # Longest first: a host name often contains the user's ("alices-imac").
    for name, stand_in in sorted(names, key=lambda pair: -len(pair[0])):
        if name and len(name) > 2:
            text = text.replace(name, stand_in)
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001  # no user name to hide
        return ""


def _selected_metal_device(device: dict[str, Any]) -> dict[str, Any]:
    for d in device.get("details", {}).get("metal_devices", []) or []:
        if d.get("selected"):
            return dict(d)
    return {}


def _gpu(report: dict[str, Any]) -> dict[str, Any]:
    dev = report["device"]
    metal = _selected_metal_device(dev)
    details = dev.get("details", {})
    low_power = metal.get("low_power")
    unified = metal.get("unified_memory")
    if dev["type"] == "cuda":
        low_power, unified = None, details.get("integrated")
    limits = details.get("gpu_limits") or {}

    def number(key: str) -> int | None:
        value = limits.get(key)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    families = limits.get("families")
    return {
        "name": dev["name"],
        "family": dev["family"],
        "device_type": dev["type"],
        "name_source": dev.get("name_source", ""),
        "low_power": low_power,
        "unified_memory": unified,
        # What public reports show matters (issue 25): Metal's GPU families, the SIMD width
        # a pipeline runs with, the threadgroup limits.
        "limits": {
            "metal_families": [str(f) for f in families] if isinstance(families, list) else None,
            "thread_execution_width": number("thread_execution_width"),
            "max_threads_per_threadgroup": number("max_threads_per_threadgroup"),
            "max_threadgroup_memory_bytes": number("max_threadgroup_memory_bytes"),
            "source": str(limits.get("source", "none")),
        },
    }


def _torch(report: dict[str, Any]) -> dict[str, Any]:
    tv = report["torch"]
    info = tv.get("build_info") if isinstance(tv.get("build_info"), dict) else {}
    return {
        "version": tv["version"],
        "patched": bool(tv.get("patched_mps_api")),
        "wheel_version": info.get("wheel_version"),
        "series_fingerprint": info.get("series_fingerprint"),
    }


def _rows(report: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """(group, op, dtype, check, status, message) for every row of every group."""
    out = []
    for r in report.get("results", []):
        out.append(("parity", r["op"], r["dtype"], r["check"], r.get("raw_status", r["status"]), r.get("detail", "")))
    for group in ("shapes", "grid", "reports", "sampling", "kernels", "workloads", "soak"):
        for r in report.get(group, []):
            where = f"{r['check']} [{r['case']}]"
            out.append((group, r["op"], r["dtype"], r["check"], r.get("raw_status", r["status"]),
                        f"{where}: {r.get('detail', '')}"))  # fmt: skip
    for m in report.get("memory", []):
        check, _, dtype = m["name"].partition(":")
        out.append(("memory", f"memory.{check}", dtype or "-", "memory", m["status"],
                    f"{m['name']}: {m.get('detail', '')}"))  # fmt: skip
    for t in report.get("training", []):
        out.append(("training", t["model"], "float32", "training", t["status"], t.get("detail", "")))
    for c in report.get("patched_checks", []):
        out.append(("patched", c["name"], "-", "patched", c["status"], c.get("detail", "")))
    for name, g in report.get("groups", {}).items():
        if g.get("status") == "error":
            out.append(("group", f"group {name}", "-", "group", "error", g.get("detail", "")))
        # Hangs that no check's row holds (__main__.run_group): in set-up, between checks,
        # in start-up.
        for h in g.get("setup_hangs", []):
            out.append(("group", f"set-up: {h['step']}", "-", "set-up", "hang", h.get("detail", "")))
        if g.get("between_checks") or g.get("startup_hang"):
            where = "between checks" if g.get("between_checks") else "start-up"
            out.append(("group", f"group {name}", "-", where, "hang", g.get("detail", "")))
    return out


def build(report: dict[str, Any]) -> dict[str, Any]:
    """compat.json's content from the full report (regress.json's dict)."""
    entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    for group, op, dtype, check, status, message in _rows(report):
        if status in ("xfail", "xpass"):  # memory/training have no known lookup; parity's raw status is used
            status = "fail" if status == "xfail" else "pass"
        key = (group, op, dtype)
        entry = entries.setdefault(
            key,
            {"group": group, "op": op, "dtype": dtype, "status": "skip", "rows": 0,
             "failed_checks": [], "message": None},
        )  # fmt: skip
        entry["rows"] += 1
        status = status if status in ORDER else "error"
        if ORDER.index(status) < ORDER.index(entry["status"]):
            entry["status"] = status
        if status in ("hang", "gpu-error", "error", "fail", "unsupported"):
            if check not in entry["failed_checks"]:
                entry["failed_checks"].append(check)
            if entry["message"] is None:
                entry["message"] = scrub(message) or status
    counts: dict[str, int] = {}
    for entry in entries.values():
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    summ = report.get("summary", {})
    return {
        "format": FORMAT,
        "gpu": _gpu(report),
        "macos": report.get("host", {}).get("macos") or None,
        "torch": _torch(report),
        "run": {
            "date": str(report.get("started_at", ""))[:10],
            "quick": bool(report.get("options", {}).get("quick")),
            "self_test": bool(report.get("options", {}).get("self_test")),
            "exit_code": int(summ.get("exit_code", 1)),
            "groups": {k: v for k, v in summ.get("groups", {}).items()},
        },
        "counts": counts,
        "ops": list(entries.values()),
        "workloads": _workload_verdicts(report.get("workloads", [])),
    }


# What compat.json says of a workload (tests/regress/_workloads.py), by its row's status.
VERDICTS = {
    "pass": "works", "fail": "gives wrong results", "error": "does not run", "hang": "hangs",
    "gpu-error": "fails with a GPU error",
    "unsupported": "not checked (dtype unsupported)", "skip": "not checked", "fallback": "works (CPU fallback)",
}  # fmt: skip


def _workload_verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One verdict per workload row, the sentence a user reads: "LLM generation (float16)
    works on this GPU"; a row that did not pass keeps its first message."""
    out = []
    for r in rows:
        status = r.get("raw_status", r["status"])
        status = {"xfail": "fail", "xpass": "pass"}.get(status, status)
        status = status if status in ORDER else "error"
        verdict = VERDICTS[status]
        name = r.get("workload") or r["op"]
        out.append({
            "workload": name, "op": r["op"], "dtype": r["dtype"], "status": status, "verdict": verdict,
            "sentence": f"{name} ({r['dtype']}) {verdict} on this GPU",
            "message": None if status == "pass" else (scrub(r.get("detail", "")) or None),
        })  # fmt: skip
    return out


def validate(compat: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when `compat` does not follow compat.schema.json."""
    import jsonschema  # the project's dependency; the suite itself runs without it

    jsonschema.validate(compat, json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def _yes(value: Any) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def markdown(compat: dict[str, Any], limit: int = 12) -> str:
    """One screen to paste into the issue form: who ran what, counts, the first failures."""
    gpu, tv, run = compat["gpu"], compat["torch"], compat["run"]
    lim = gpu.get("limits") or dict.fromkeys(
        ("metal_families", "thread_execution_width", "max_threads_per_threadgroup", "max_threadgroup_memory_bytes")
    )  # reports written before issue 25 have none
    groups = ", ".join(f"{k} {v}" for k, v in run["groups"].items())
    lines = [
        f"### Compatibility report: {gpu['name']} (`{gpu['device_type']}`, family `{gpu['family']}`)",
        "",
        f"- macOS {compat['macos'] or '-'}; low-power {_yes(gpu['low_power'])}; "
        f"unified memory {_yes(gpu['unified_memory'])}",
        f"- Metal families {', '.join(lim['metal_families']) if lim['metal_families'] else '-'}; "
        f"threadExecutionWidth {lim['thread_execution_width'] or '-'}; threadgroup: "
        f"{lim['max_threads_per_threadgroup'] or '-'} threads, "
        f"{lim['max_threadgroup_memory_bytes'] or '-'} bytes",
        f"- torch {tv['version']} (patched: {'yes' if tv['patched'] else 'no'}; series "
        f"{tv['series_fingerprint'] or '-'})",
        f"- run {run['date']}, {'--quick' if run['quick'] else 'full'}"
        f"{', self-test' if run['self_test'] else ''}; exit {run['exit_code']}; groups: {groups}",
        "",
        "| group | pass | fail | error | unsupported | other |",
        "|---|---|---|---|---|---|",
    ]
    by_group: dict[str, dict[str, int]] = {}
    for e in compat["ops"]:
        g = by_group.setdefault(e["group"], {})
        g[e["status"]] = g.get(e["status"], 0) + 1
    for group, c in by_group.items():
        other = sum(v for k, v in c.items() if k not in ("pass", "fail", "error", "unsupported"))
        lines.append(
            f"| {group} | {c.get('pass', 0)} | {c.get('fail', 0)} | {c.get('error', 0)} | "
            f"{c.get('unsupported', 0)} | {other} |"
        )
    if compat.get("workloads"):
        lines += ["", "Workloads:"] + [f"- {w['sentence']}" for w in compat["workloads"]]
    bad = [e for e in compat["ops"] if e["status"] in ("hang", "gpu-error", "error", "fail")]
    lines += ["", f"Counted per op and dtype. Failing or erroring: {len(bad)}."]
    for e in bad[:limit]:
        lines.append(f"- `{e['group']}` {e['op']} {e['dtype']}: **{e['status']}**: {e['message']}")
    if len(bad) > limit:
        lines.append(f"- ... and {len(bad) - limit} more in compat.json")
    lines.append("")
    return "\n".join(lines)
