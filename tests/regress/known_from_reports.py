"""Known-failure entries from shared compat.json reports, per GPU family.

    python -m tests.regress.known_from_reports REPORT.json [REPORT.json ...]
        [--known tests/regress/known_failures.yaml] [--issue N] [--write]

Reads each compat.json (checked against compat.schema.json; self-test runs are left out:
their failures are planted), takes the op parity, shapes and reports rows that fail, error or are unsupported on the reporter's GPU family and that the
known-failures file does not list yet, and makes one entry per family and op: the dtypes and
checks seen, the first message as the reason, and a note naming the reports' GPUs, macOS and
torch versions. Without --write it prints the entries as YAML; with --write it adds them to
the file under each family (comments and the order of the file are kept) and loads the
result again to prove it valid. `issue` is the upstream pytorch/pytorch issue (--issue), or
0 while none is filed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from . import _compat, _known

GROUPS = ("parity", "shapes", "reports", "sampling", "kernels")
FAILING = ("fail", "error", "unsupported", "hang")


def load_report(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable JSON file ({exc})") from None
    try:
        _compat.validate(data)
    except Exception as exc:  # noqa: BLE001  # jsonschema.ValidationError: say where
        first = str(exc).splitlines()[0]
        raise ValueError(
            f"{path}: not a compat.json of this suite ({first}); attach the compat.json that "
            "python -m tests.regress wrote"
        ) from None
    return data


def _slug(op: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", op.lower()).strip("-")


def entries(
    reports: list[dict[str, Any]], table: dict[str, list[_known.KnownFailure]], issue: int
) -> dict[str, list[dict[str, Any]]]:
    """New entries by family: failing rows that no entry of the family matches yet."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for report in reports:
        if report["run"]["self_test"]:
            continue  # planted faults fail on purpose: they say nothing about the GPU
        family = report["gpu"]["family"]
        for row in report["ops"]:
            if row["group"] not in GROUPS or row["status"] not in FAILING or row["op"] == "*":
                continue
            checks = [c for c in row["failed_checks"] if c in ("forward", "grad")] or ["forward"]
            todo = [c for c in checks
                    if _known.lookup(table, family, row["op"], row["dtype"], c, report.get("macos")) is None]
            if not todo:
                continue
            entry = found.setdefault(
                (family, row["op"]),
                {"op": row["op"], "dtypes": [], "checks": [], "reason": row["message"] or row["status"],
                 "gpus": [], "macos": [], "torch": []},
            )  # fmt: skip
            for key, values in (("dtypes", [row["dtype"]]), ("checks", todo),
                                ("gpus", [report["gpu"]["name"]]),
                                ("macos", [report["macos"] or "?"]),
                                ("torch", [report["torch"]["version"]])):  # fmt: skip
                entry[key] += [v for v in values if v not in entry[key]]
    out: dict[str, list[dict[str, Any]]] = {}
    for (family, op), e in found.items():
        out.setdefault(family, []).append({
            "id": f"report-{_slug(op)}",
            "ops": [op],
            "dtypes": e["dtypes"],
            "checks": e["checks"],
            "issue": issue,
            "reason": e["reason"],
            "note": (
                f"From shared report(s): {', '.join(e['gpus'])}; macOS {', '.join(e['macos'])}; "
                f"torch {', '.join(e['torch'])}."
                + ("" if issue else " issue 0: no upstream issue filed yet.")
            ),
        })  # fmt: skip
    return out


def render(family_entries: list[dict[str, Any]]) -> str:
    text = yaml.safe_dump(family_entries, sort_keys=False, default_flow_style=None, width=100)
    return "".join(f"    {line}\n" for line in text.splitlines())


def merge_text(text: str, new: dict[str, list[dict[str, Any]]]) -> str:
    """known_failures.yaml's text with `new` added under each family (kept as written)."""
    lines = text.splitlines()
    for family, family_entries in new.items():
        block = render(family_entries).splitlines()
        head = next((i for i, line in enumerate(lines) if re.match(rf"^  {re.escape(family)}:", line)), None)
        if head is None:
            lines += [f"  {family}:", *block]
            continue
        if lines[head].rstrip().endswith("[]"):
            lines[head] = f"  {family}:"
        end = head + 1
        while end < len(lines) and not re.match(r"^  \S", lines[end]) and not re.match(r"^\S", lines[end]):
            end += 1
        body = [line for line in lines[head + 1 : end] if line.strip() != "[]"]
        while body and not body[-1].strip():
            body.pop()
        lines[head + 1 : end] = body + block
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.regress.known_from_reports", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
    p.add_argument("--known", type=Path, default=_known.KNOWN_FILE, help="the known-failures file")
    p.add_argument("--issue", type=int, default=0, help="the upstream pytorch/pytorch issue (default 0: none yet)")
    p.add_argument("--write", action="store_true", help="add the entries to --known (else print them)")
    args = p.parse_args(argv)
    try:
        reports = [load_report(path) for path in args.reports]
        table = _known.load(args.known)
    except (ValueError, OSError) as exc:
        print(f"known_from_reports: {exc}", file=sys.stderr)
        return 2
    new = entries(reports, table, args.issue)
    if not new:
        print("known_from_reports: nothing new: every failing row is listed already (or none failed)")
        return 0
    if not args.write:
        for family, family_entries in new.items():
            print(f"  {family}:\n{render(family_entries)}", end="")
        return 0
    before = args.known.read_text(encoding="utf-8")
    args.known.write_text(merge_text(before, new), encoding="utf-8")
    try:
        _known.load(args.known)
    except (ValueError, yaml.YAMLError) as exc:
        args.known.write_text(before, encoding="utf-8")
        print(f"known_from_reports: the merged file did not load ({exc}); {args.known} left as it was",
              file=sys.stderr)  # fmt: skip
        return 1
    count = sum(len(v) for v in new.values())
    print(f"known_from_reports: added {count} entr{'y' if count == 1 else 'ies'} to {args.known} "
          f"({', '.join(f'{k}: {len(v)}' for k, v in new.items())})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
