"""Issue 17: the suite's first run on an Intel or AMD GPU must see the sizes where kernels go
wrong, lose nothing when a check raises or the process aborts, and leave a report to share.

Faults are planted the way tests/regress/_faults.py and _parity.PlantedFault plant them on
the GPU; here the device is the CPU, with --quick-sized shapes."""

from __future__ import annotations

import gzip
import importlib.resources
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # OpInfo's common_utils imports it

from tests.regress import _compat, _known, _memory, _shapes, _stream, _training  # noqa: E402
from tests.regress import known_from_reports  # noqa: E402
from tests.regress._device import _FAMILY_PATTERNS  # noqa: E402
from tests.regress._parity import Tolerance  # noqa: E402
from tests.regress.test_cpu_subset import run_suite  # noqa: E402
from tests.vision_standin import stand_in  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SIZE_FAULTS = "sum_partial_simd_tail,softmax_tail_past_1024"


@pytest.fixture(scope="module")
def size_fault_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str, Path]:
    out = tmp_path_factory.mktemp("size-faults")
    code, report, log = run_suite(
        out, "--quick", "--no-memory", "--no-training", "--no-workloads", "--no-grid", "--ops", "sum", "softmax",
        "--shapes-ops", "sum", "softmax",
        env={"INTELMAC_REGRESS_KERNEL_FAULT": SIZE_FAULTS},
    )  # fmt: skip
    return code, report, log, out


@pytest.mark.slow
def test_size_only_faults_are_caught_by_shapes_and_missed_by_opinfo(size_fault_run: Any) -> None:
    code, report, log, _ = size_fault_run
    assert code == 0, log  # caught, nothing else failed
    st = report["self_test"]
    assert st["caught"] is True and not st["missed"], st
    # Installed in both groups; OpInfo's samples never reach 1025, so it never fired there.
    assert st["fired"]["parity"] == {"sum_partial_simd_tail": 0, "softmax_tail_past_1024": 0}, st
    assert all(v > 0 for v in st["fired"]["shapes"].values()), st
    assert all(r["status"] == "pass" for r in report["results"]), report["results"]
    failing = {(r["op"], r["n"]) for r in report["shapes"] if r["status"] == "fail"}
    assert ("shapes.sum", 1025) in failing and ("shapes.softmax", 1025) in failing, failing
    # Below the size the kernels are right: 31 and 33 pass.
    assert not {n for _, n in failing} & {31, 33}, failing


@pytest.mark.slow
def test_without_the_shapes_group_the_size_only_fault_goes_unseen(tmp_path: Path) -> None:
    code, report, log = run_suite(
        tmp_path, "--quick", "--no-memory", "--no-training", "--no-workloads", "--no-grid", "--no-shapes",
        "--ops", "sum", "softmax", env={"INTELMAC_REGRESS_KERNEL_FAULT": SIZE_FAULTS},
    )  # fmt: skip
    assert code == 3, log  # a planted fault not caught: the OpInfo group alone misses it
    assert report["self_test"]["missed"] == ["shapes.sum", "shapes.softmax"]


@pytest.mark.slow
def test_raising_checks_become_their_rows_errors_and_lose_nothing(tmp_path: Path) -> None:
    # A forward that raises (mul), a backward that raises (add) and a torchvision op whose
    # backward raises (roi_align): each is its own row's error, with the message.
    site = stand_in(tmp_path / "site")
    code, report, log = run_suite(
        tmp_path / "out", "--ops", "add", "mul", "abs", "--dtypes", "float32", "--samples", "2",
        "--no-shapes", "--no-memory", "--no-training", "--no-workloads", "--no-grid",
        env={
            "PYTHONPATH": str(site),
            "INTELMAC_REGRESS_PLANT_FAULT": "mul:raise,add:raise-backward,"
            "torchvision.ops.roi_align:raise-backward",
        },
    )  # fmt: skip
    assert code == 0, log  # the three planted faults caught, nothing else failed
    rows = {(r["op"], r["check"]): r for r in report["results"]}
    assert rows[("mul", "forward")]["status"] == "error"
    assert "planted fault: mul raised" in rows[("mul", "forward")]["detail"]
    assert rows[("add", "forward")]["status"] == "pass"
    assert rows[("add", "grad")]["status"] == "error"
    assert "planted fault: the backward of add raised" in rows[("add", "grad")]["detail"]
    roi = rows[("torchvision.ops.roi_align", "grad")]
    assert roi["status"] == "error" and "the backward of torchvision.ops.roi_align" in roi["detail"]
    assert rows[("torchvision.ops.roi_align", "forward")]["status"] == "pass"
    for op in ("nms", "roi_pool", "ps_roi_align", "ps_roi_pool"):
        assert rows[(f"torchvision.ops.{op}", "forward")]["status"] == "pass", op
    assert rows[("abs", "forward")]["status"] == "pass" and rows[("abs", "grad")]["status"] == "pass"
    assert report["groups"]["parity"]["status"] == "ok"
    assert report["summary"]["ops_checked"] == 8  # add, mul, abs and torchvision's five


@pytest.mark.slow
def test_abort_in_the_middle_of_the_shapes_group_keeps_the_finished_rows(tmp_path: Path) -> None:
    code, report, log = run_suite(
        tmp_path, "--quick", "--no-memory", "--no-training", "--no-workloads", "--no-grid", "--ops", "add", "--dtypes", "float32",
        "--shapes-ops", "sum", "softmax", "layer_norm",
        env={"INTELMAC_REGRESS_PLANT_ABORT": "shapes:softmax"},
    )  # fmt: skip
    assert code == 1, log
    group = report["groups"]["shapes"]
    assert group["status"] == "error" and "SIGABRT" in group["detail"], group
    shapes = report["shapes"]
    sums = [r for r in shapes if r["op"] == "shapes.sum"]
    assert sums and all(r["status"] == "pass" for r in sums), sums  # finished before: kept
    flight = [r for r in shapes if r["op"] == "shapes.softmax"]
    assert len(flight) == 1 and flight[0]["status"] == "error", flight
    assert "SIGABRT during this check" in flight[0]["detail"]
    assert not [r for r in shapes if r["op"] == "shapes.layer_norm"]  # not started: lost
    assert group["rows_kept"] == len(sums)
    assert report["groups"]["parity"]["status"] == "ok"
    assert {r["status"] for r in report["results"]} == {"pass"}
    compat = json.loads((tmp_path / "compat.json").read_text())
    by_op = {(e["group"], e["op"]): e for e in compat["ops"]}
    assert by_op[("shapes", "shapes.softmax")]["status"] == "error"
    assert by_op[("group", "group shapes")]["status"] == "error"
    assert "## Groups that did not finish" in (tmp_path / "regress.md").read_text()


# --- each group's own code: an exception is a row -------------------------------------------


class Rows:
    def __init__(self) -> None:
        self.rows: list[tuple[str, dict[str, Any]]] = []
        self.begun: list[dict[str, Any]] = []

    def begin(self, section: str, row: dict[str, Any]) -> bool:
        self.begun.append(row)
        return True

    def row(self, section: str, row: dict[str, Any]) -> None:
        self.rows.append((section, row))

    def meta(self, key: str, value: Any) -> None:
        pass


def test_a_shapes_case_that_raises_is_its_rows_error() -> None:
    def boom(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("threadgroup memory exceeded")

    case = _shapes.Case(
        "sum", "reduction", "4 x 33", 33, lambda g, t: (torch.randn(4, 33, generator=g).to(t),),
        boom, ("acc",), lambda x: x.abs().sum(-1),
    )  # fmt: skip
    rows = _shapes.run_case(case, "cpu", "float32", _shapes.load_tolerance(), seed=0)
    assert [r["status"] for r in rows] == ["error"]
    assert "RuntimeError: threadgroup memory exceeded" in rows[0]["detail"]


def test_a_memory_family_that_cannot_be_set_up_is_a_row() -> None:
    def broken(device: str) -> Any:
        raise RuntimeError("device went away")
        yield  # a generator, like the real families

    out: list[_memory.Check] = []
    _memory._collect(out, "copy", lambda: broken("cpu"))
    assert [c.name for c in out] == ["copy:setup"]
    with pytest.raises(RuntimeError, match="device went away"):
        out[0].run()


def test_a_training_model_that_raises_is_its_rows_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def bad_model() -> Any:
        raise RuntimeError("conv2d: no MPS kernel")

    good = _training.MODELS["small_cnn"]
    monkeypatch.setitem(_training.MODELS, "small_cnn", (bad_model, good[1], good[2]))
    stream = Rows()
    results = _training.run("cpu", 2, Tolerance(1e-3, 2e-3), stream=stream,
                            models=("small_cnn", "small_transformer_encoder"))  # fmt: skip
    assert results[0].status == "error" and "conv2d: no MPS kernel" in results[0].detail
    assert results[1].model == "small_transformer_encoder"  # the next model still ran
    assert [s for s, _ in stream.rows] == ["training", "training"]
    assert len(stream.begun) == 2


def test_the_stream_keeps_finished_rows_and_names_the_check_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    s = _stream.RowStream(path, "shapes")
    s.begin("shapes", {"op": "shapes.sum", "status": "error"})
    s.row("shapes", {"op": "shapes.sum", "status": "pass"})
    s.begin("shapes", {"op": "shapes.softmax", "status": "error"})
    s.close()
    with path.open("a") as fh:
        fh.write('{"section": "shapes", "row": {"op": "cut sho')  # the process died mid-line
    got = _stream.read(path)
    assert got.rows == 1 and got.sections["shapes"][0]["op"] == "shapes.sum"
    assert got.in_flight == ("shapes", {"op": "shapes.softmax", "status": "error"})
    assert not got.done


# --- tolerances ------------------------------------------------------------------------------


def test_the_shapes_tolerance_grows_with_the_reduction_length_and_catches_a_dropped_element() -> None:
    tol = _shapes.load_tolerance()
    assert tol.factor("sum", "float32", 4097) == pytest.approx(tol.factor("sum", "float32", 1025) * math.sqrt(4097 / 1025))
    # float16 sums accumulate in float32 (torch's contract); cumsum may scan in float16.
    assert tol.factor("sum", "float16", 1025) == tol.factor("sum", "float32", 1025)
    assert tol.factor("cumsum", "float16", 1025) > 1000 * tol.factor("cumsum", "float32", 1025)
    x = torch.randn(4, 1025, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ref, scale = x.sum(-1), x.abs().sum(-1)
    factor = tol.factor("sum", "float32", 1025)
    assert _shapes.judge_acc(x.float().sum(-1), ref, scale, "float32", factor, tol).ok
    dropped = x[:, :1024].float().sum(-1)  # the last partial SIMD group (one element) left out
    assert not _shapes.judge_acc(dropped, ref, scale, "float32", factor, tol).ok


# --- the report to share ---------------------------------------------------------------------


@pytest.mark.slow
def test_compat_json_follows_its_schema_and_names_what_failed(size_fault_run: Any) -> None:
    _, report, _, out = size_fault_run
    compat = json.loads((out / "compat.json").read_text())
    _compat.validate(compat)
    assert compat["gpu"]["family"] == "cpu" and compat["torch"]["version"] == torch.__version__
    failing = {(e["group"], e["op"], e["dtype"]): e for e in compat["ops"] if e["status"] == "fail"}
    assert ("shapes", "shapes.sum", "float32") in failing
    assert "outside the bound" in failing[("shapes", "shapes.sum", "float32")]["message"]
    assert all(e["status"] == "pass" for e in compat["ops"] if e["group"] == "parity")
    md = (out / "compat.md").read_text()
    assert len(md.splitlines()) <= 40 and "shapes.sum float32: **fail**" in md
    text = json.dumps(compat)
    assert str(out) not in text and "argv" not in text


def _report_with(detail: str, n: int = 1) -> dict[str, Any]:
    rows = [{"op": f"op{i}", "family": "x", "dtype": "float32", "check": "forward", "status": "fail",
             "raw_status": "fail", "detail": detail} for i in range(n)]  # fmt: skip
    return {
        "device": {"type": "mps", "name": "AMD Radeon Pro 5500M", "family": "amd-rdna1",
                   "name_source": "torch.backends.mps.devices()",
                   "details": {"metal_devices": [{"name": "AMD Radeon Pro 5500M", "selected": True,
                                                  "low_power": False, "unified_memory": False}],
                               "gpu_limits": {"families": ["Mac2", "Common3", "Metal3"],
                                              "thread_execution_width": 64,
                                              "max_threads_per_threadgroup": 1024,
                                              "max_threadgroup_memory_bytes": 65536,
                                              "source": "torch.ops.intelmac.mps_gpu_limits"}}},
        "torch": {"version": "2.14.1+intelmac", "patched_mps_api": True,
                  "build_info": {"wheel_version": "2.14.1+intelmac", "series_fingerprint": "abc123"}},
        "host": {"macos": "14.7.1", "platform": "macOS-14.7.1-x86_64", "cpu": "Intel Core i9"},
        "started_at": "2026-11-23T10:00:00+00:00",
        "options": {"quick": False, "self_test": False, "argv": ["--out", "/Users/alice/r"]},
        "summary": {"exit_code": 1, "groups": {"parity": "ok"}},
        "results": rows, "groups": {"parity": {"status": "ok"}},
    }  # fmt: skip


def test_compat_json_carries_no_personal_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_compat, "_user", lambda: "alice")
    monkeypatch.setattr(_compat.platform, "node", lambda: "alices-imac.local")
    compat = _compat.build(_report_with(
        "RuntimeError: failed to load /Users/alice/lib/foo.metallib on alices-imac.local as alice " + "x" * 400
    ))  # fmt: skip
    _compat.validate(compat)
    text = json.dumps(compat)
    assert "alice" not in text and "/Users" not in text and "Intel Core i9" not in text, text
    message = compat["ops"][0]["message"]
    assert message.startswith("RuntimeError: failed to load ~/lib/foo.metallib on <host>")
    assert len(message) <= _compat.MESSAGE_LIMIT
    assert compat["gpu"] == {"name": "AMD Radeon Pro 5500M", "family": "amd-rdna1", "device_type": "mps",
                             "name_source": "torch.backends.mps.devices()", "low_power": False,
                             "unified_memory": False,
                             "limits": {"metal_families": ["Mac2", "Common3", "Metal3"],
                                        "thread_execution_width": 64, "max_threads_per_threadgroup": 1024,
                                        "max_threadgroup_memory_bytes": 65536,
                                        "source": "torch.ops.intelmac.mps_gpu_limits"}}  # fmt: skip
    assert compat["torch"]["series_fingerprint"] == "abc123" and compat["macos"] == "14.7.1"


def test_compat_md_fits_one_screen() -> None:
    md = _compat.markdown(_compat.build(_report_with("wrong", n=80)))
    assert len(md.splitlines()) <= 30, md
    assert "and 68 more in compat.json" in md


# --- known failures from reports ---------------------------------------------------------------


def test_known_failures_take_entries_from_reports(tmp_path: Path, size_fault_run: Any) -> None:
    _, _, _, out = size_fault_run
    # The run's report stands for a GPU whose sum and softmax are wrong past 1024: a real
    # report, not a self-test (self-test reports are left out, their failures are planted).
    compat = json.loads((out / "compat.json").read_text())
    assert known_from_reports.entries([compat], {}, 0) == {}
    compat["run"]["self_test"] = False
    report = tmp_path / "compat.json"
    report.write_text(json.dumps(compat))
    known = tmp_path / "known.yaml"
    known.write_text(_known.KNOWN_FILE.read_text())
    before = _known.load(known)
    assert known_from_reports.main([str(report), "--known", str(known), "--issue", "4242", "--write"]) == 0
    after = _known.load(known)
    for family, entries in before.items():  # nothing else changed
        assert [e.id for e in after[family][: len(entries)]] == [e.id for e in entries], family
    hit = _known.lookup(after, "cpu", "shapes.sum", "float32", "forward")
    assert hit is not None and hit.issue == 4242 and "outside the bound" in hit.reason
    assert _known.lookup(after, "cpu", "shapes.softmax", "float16", "forward") is not None
    assert _known.lookup(after, "cpu", "sum", "float32", "forward") is None  # OpInfo's sum passed
    assert known.read_text().startswith(_known.KNOWN_FILE.read_text().splitlines()[0])  # comments kept
    # A second pass finds nothing new.
    assert known_from_reports.entries([compat], after, 0) == {}


def test_merge_into_empty_existing_and_new_families() -> None:
    text = _known.KNOWN_FILE.read_text()
    entry = {"id": "report-x", "ops": ["shapes.sum"], "dtypes": ["float16"], "checks": ["forward"],
             "issue": 0, "reason": "r", "note": "n"}  # fmt: skip
    merged = known_from_reports.merge_text(text, {"apple": [entry], "amd-rdna1": [entry], "intel-other": [entry]})
    table = yaml.safe_load(merged)["families"]
    before = yaml.safe_load(text)["families"]["amd-rdna1"]
    assert [e["id"] for e in table["apple"]] == ["report-x"]
    assert table["amd-rdna1"][-1]["id"] == "report-x" and len(table["amd-rdna1"]) == len(before) + 1
    assert [e["id"] for e in table["amd-rdna1"][:-1]] == [e["id"] for e in before]
    assert [e["id"] for e in table["intel-other"]] == ["report-x"]


def test_known_from_reports_refuses_a_file_that_is_not_a_report(tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "regress.json"
    bad.write_text('{"tool": "tests.regress"}')
    assert known_from_reports.main([str(bad)]) == 2
    assert "not a compat.json of this suite" in capsys.readouterr().err


# --- the issue form ----------------------------------------------------------------------------


def test_issue_form_is_a_valid_github_issue_form() -> None:
    import jsonschema

    form = yaml.safe_load((ROOT / ".github" / "ISSUE_TEMPLATE" / "gpu-report.yml").read_text())
    schema_file = importlib.resources.files("check_jsonschema") / "builtin_schemas" / "vendor" / "github-issue-forms.json"
    jsonschema.validate(form, json.loads(schema_file.read_text()))
    ids = [item["id"] for item in form["body"] if "id" in item]
    assert len(ids) == len(set(ids))
    family = next(item for item in form["body"] if item.get("id") == "family")
    known_families = {f for f, _ in _FAMILY_PATTERNS} - {"apple-virtual", "nvidia"}
    assert known_families <= set(family["attributes"]["options"]), known_families
    text = json.dumps(form)
    assert "python -m tests.regress --device mps" in text and "compat.json" in text


def test_committed_validation_reports_follow_the_schema() -> None:
    # Committed raw reports are gzip-compressed (docs/validation/README.md); plain ones count too.
    validation = ROOT / "docs" / "validation"
    found = sorted([*validation.glob("*/*compat.json"), *validation.glob("*/*compat.json.gz")])
    assert found, "no committed compat.json"
    for path in found:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        compat = json.loads(raw)
        _compat.validate(compat)
        assert len(_compat.markdown(compat).splitlines()) <= 40, path
