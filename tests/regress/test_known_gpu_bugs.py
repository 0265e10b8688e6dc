"""The survey of public Intel/AMD Metal bug reports (known_gpu_bugs.yaml) against the suite.

Every report must name rows the suite's normal run writes (enumerated from the groups' own
tables, tests/regress/_rows.py), or say why none can; rows of the classes another branch of
issue 25 adds may be named before they exist, marked pending, and only while they do not
exist. The `reports` group's every case must come from a report, and a fault planted in one
of its rows must be reported by a run on the CPU.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
jsonschema = pytest.importorskip("jsonschema")

from tests.regress import _reports, _rows, known_gpu_bugs  # noqa: E402  (after importorskip)
from tests.regress._device import _FAMILY_PATTERNS, family_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PENDING_CLASSES = {"integers", "sampling", "kernels", "hang"}


@pytest.fixture(scope="module")
def survey() -> dict[str, Any]:
    return known_gpu_bugs.load()


@pytest.fixture(scope="module")
def suite_rows() -> set[tuple[str, str, str]]:
    return _rows.suite_rows()


def row_problems(survey: dict[str, Any], suite_rows: set[tuple[str, str, str]]) -> list[str]:
    """What is wrong with the survey's row references (empty when nothing)."""
    problems = []
    for report in survey["reports"]:
        pending = [r for r in report["rows"] if r.get("pending")]
        if bool(pending) != bool(report.get("pending_rows")):
            problems.append(f"{report['id']}: pending_rows must be true exactly when a row is pending")
        for row in report["rows"]:
            key = (row["group"], row["op"], row["dtype"])
            exists = key in suite_rows
            if row.get("pending"):
                if row["pending"] not in PENDING_CLASSES:
                    problems.append(f"{report['id']}: {key} pending class {row['pending']!r} is not one of issue 25's")
                elif exists:
                    problems.append(f"{report['id']}: {key} exists in the suite now: drop `pending` (and pending_rows)")
            elif not exists:
                problems.append(
                    f"{report['id']}: {key} is not a row of the suite's normal run "
                    "(tests/regress/_rows.py); name an existing row or add one"
                )
    return problems


def test_survey_follows_its_schema_and_has_45_reports(survey: dict[str, Any]) -> None:
    assert len(survey["reports"]) >= 45  # issue 34
    ids = [r["id"] for r in survey["reports"] + survey["not_gpu_bugs"]]
    assert len(ids) == len(set(ids)), "duplicate ids"


def test_schema_rejects_an_entry_without_rows_or_reason(survey: dict[str, Any]) -> None:
    schema = json.loads(known_gpu_bugs.SCHEMA_FILE.read_text(encoding="utf-8"))
    bad = copy.deepcopy(survey)
    entry = next(r for r in bad["reports"] if r["rows"])
    entry["rows"] = []
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = copy.deepcopy(survey)
    bad["reports"][0]["certainty"] = "sure"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def coverage_problems(survey: dict[str, Any]) -> list[str]:
    """A report is `missed` exactly when it names no row; `covered` and `partial` say which."""
    problems = []
    for r in survey["reports"]:
        if (r["coverage"] == "missed") != (not r["rows"]):
            problems.append(f"{r['id']}: coverage {r['coverage']} with {len(r['rows'])} row(s)")
        if r["coverage"] in ("covered", "partial") and not r.get("coverage_why"):
            problems.append(f"{r['id']}: say in coverage_why what runs the trigger, or what differs from it")
    return problems


def test_every_report_is_covered_partial_or_missed(survey: dict[str, Any]) -> None:
    assert coverage_problems(survey) == []
    marks = {r["coverage"] for r in survey["reports"]}
    assert marks == {"covered", "partial", "missed"}
    bad = copy.deepcopy(survey)
    bad["reports"][0]["coverage"] = "missed"  # pytorch 178697 has rows
    assert coverage_problems(bad) == ["pytorch-178697: coverage missed with 8 row(s)"]


def test_families_are_family_of_the_named_gpu(survey: dict[str, Any]) -> None:
    schema = json.loads(known_gpu_bugs.SCHEMA_FILE.read_text(encoding="utf-8"))
    assert set(schema["$defs"]["family"]["enum"]) == {f for f, _ in _FAMILY_PATTERNS} | {"unknown"}
    for entry in survey["reports"] + survey["not_gpu_bugs"]:
        if entry["gpu"].startswith("unknown"):
            assert entry["family"] == "unknown", entry["id"]
        else:
            assert family_of(entry["gpu"], "mps") == entry["family"], entry["id"]


def test_every_report_names_existing_rows_or_says_why_not(
    survey: dict[str, Any], suite_rows: set[tuple[str, str, str]]
) -> None:
    assert row_problems(survey, suite_rows) == []
    assert sum(1 for r in survey["reports"] if r["rows"]) >= 15


def test_row_check_fails_on_a_row_the_suite_does_not_have(
    survey: dict[str, Any], suite_rows: set[tuple[str, str, str]]
) -> None:
    bad = copy.deepcopy(survey)
    report = next(r for r in bad["reports"] if r["id"] == "pytorch-178697")
    report["rows"].append({"group": "parity", "op": "nn.functional.linear", "dtype": "float64"})
    assert any("float64" in p for p in row_problems(bad, suite_rows))
    # A pending row of a class outside issue 25's four, or one that exists already, is wrong.
    report["rows"][-1] = {"group": "parity", "op": "nn.functional.linear", "dtype": "float32", "pending": "integers"}
    report["pending_rows"] = True
    assert any("exists in the suite now" in p for p in row_problems(bad, suite_rows))


def test_suite_rows_come_from_the_groups(suite_rows: set[tuple[str, str, str]]) -> None:
    groups = {g for g, _, _ in suite_rows}
    assert groups == {"parity", "shapes", "grid", "reports", "sampling", "memory", "training", "kernels", "workloads", "soak"}
    assert ("parity", "argmax", "int32") in suite_rows and ("sampling", "sampling.multinomial", "float32") in suite_rows
    assert ("parity", "nn.functional.linear", "float16") in suite_rows
    assert ("shapes", "shapes.softmax", "bfloat16") in suite_rows
    assert ("memory", "memory.copy_h2d_offset", "int8") in suite_rows
    assert ("training", "small_cnn", "float32") in suite_rows
    assert ("training", "mnist_cnn_batch128", "float32") in suite_rows
    assert ("workloads", "workloads.llm_generation", "float16") in suite_rows
    assert ("sampling", "sampling.categorical_sample", "float32") in suite_rows
    assert {(op, d) for g, op, d in suite_rows if g == "reports"} == set(_reports.rows())


def test_every_reports_case_comes_from_a_report(survey: dict[str, Any]) -> None:
    named = {row["op"] for r in survey["reports"] for row in r["rows"] if row["group"] == "reports"}
    assert {c.op for c in _reports.CASES} <= named


def test_page_is_made_from_the_survey(survey: dict[str, Any]) -> None:
    page = known_gpu_bugs.PAGE_FILE.read_text(encoding="utf-8")
    assert page == known_gpu_bugs.render(survey), f"run {known_gpu_bugs.WRITE_COMMAND}"
    for report in survey["reports"] + survey["not_gpu_bugs"]:
        assert report["link"] in page


@pytest.mark.slow
def test_a_fault_planted_in_a_reports_row_is_named(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "INTELMAC_REGRESS_PLANT_FAULT"}
    env["INTELMAC_REGRESS_PLANT_FAULT"] = "reports.sd_cross_attention,reports.cast_half_to_uint8"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.regress", "--device", "cpu", "--out", str(tmp_path),
         "--no-parity", "--no-shapes", "--no-memory", "--no-training", "--no-workloads", "--no-grid", "--no-patched"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log  # 0 with a planted fault: caught, and nothing else failed
    report = json.loads((tmp_path / "regress.json").read_text())
    assert report["self_test"]["caught"] and report["self_test"]["missed"] == []
    failed = {(r["op"], r["dtype"]) for r in report["reports"] if r["status"] == "fail"}
    assert ("reports.sd_cross_attention", "float32") in failed
    assert ("reports.cast_half_to_uint8", "float16") in failed  # an integer output, too
    assert {op for op, _ in failed} == {"reports.sd_cross_attention", "reports.cast_half_to_uint8"}
    assert {(r["op"], r["dtype"]) for r in report["reports"]} == set(_reports.rows())
    assert report["groups"]["reports"]["status"] == "ok"
    md = (tmp_path / "regress.md").read_text()
    assert "## Public reports" in md and "| reports.sd_cross_attention | float32 | FAIL |" in md
    compat = json.loads((tmp_path / "compat.json").read_text())
    assert any(e["group"] == "reports" and e["op"] == "reports.sd_cross_attention" for e in compat["ops"])
