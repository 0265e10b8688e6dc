#!/usr/bin/env bash
# The NVIDIA validation of issue 41 (docs/regression-and-benchmark.md, "Validation of the
# regime grid"): the whole suite on cuda with the regime grid and a one-minute soak, clean,
# timed (target: under 4 minutes on an H200); then one run with a fault planted for each
# regime class of the grid (index_past_2p16_wraps, bmm_batch_past_256: size;
# amax_drops_nan: value; div_floor_as_trunc: argument; strided_read_as_contiguous: layout),
# one for each upgrade row (decode attention, -inf float16 reductions, fresh conv1d draws,
# F.linear M = 2 / torch.mv K >= 256) and a stall in the soak. That run must name every fault,
# each grid fault only by rows of its own regime class, and keep every other row as the clean
# run has it.
# Usage (repository root): OUT=some/dir [PY=python3] [DEVICE=cuda] [WHEELS=.whl]
#   [CLEAN_ARGS=...] tests/regress/validate_cuda_grid.sh
# CLEAN_ARGS narrows the clean run (the CPU self-check of this script: --no-parity ...).
# Writes a log, the clean run's compat files and raw.tar.gz into $OUT; exit 0 only when every
# step met its target.
set -u
. "$(dirname "$0")/../bench/validate_lib.sh"
begin_validation reports/validation-grid
export DEVICE=${DEVICE:-cuda}
CLEAN_ARGS=${CLEAN_ARGS:-}
SOAK_MINUTES=${SOAK_MINUTES:-1}
GRID_FAULTS=index_past_2p16_wraps,bmm_batch_past_256,amax_drops_nan,div_floor_as_trunc,strided_read_as_contiguous
UPGRADE_FAULTS=decode_attention_keys_past_1024,fp16_max_lowest_finite,conv_stale_output,gemv_drops_k_tail,soak_stall
PLANTED_ONLY="--no-parity --no-shapes --no-sampling --no-memory --no-training --no-workloads --no-patched --no-kernels"
claim() {  # claim NAME PYTHON: PYTHON sees the clean run as `r`, the planted one as `p`
  step "$1" 0 $PY -c "import json, sys
from tests.regress import _faults
r, p = (json.load(open(f)) for f in sys.argv[1:3])
$2
print('claim holds')" "$WORK/clean/regress.json" "$WORK/planted/regress.json"
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
} 2>&1 | tee -a "$LOG"

t0=$(date +%s)
# shellcheck disable=SC2086  # CLEAN_ARGS is a list of options
step clean 0 $PY -m tests.regress --device "$DEVICE" --soak "$SOAK_MINUTES" $CLEAN_ARGS --out "$WORK/clean"
echo "clean run: $(( $(date +%s) - t0 )) s wall, a soak of $SOAK_MINUTES min included" | tee -a "$LOG"
# shellcheck disable=SC2086
step planted 0 env INTELMAC_REGRESS_KERNEL_FAULT="$GRID_FAULTS,$UPGRADE_FAULTS" \
  $PY -m tests.regress --device "$DEVICE" $PLANTED_ONLY --soak 0.5 --out "$WORK/planted" \
  --grid-ops index_select bmm matmul amax div.no_rounding_mode cumsum

claim every-regime-ran '
table = r["grid_regimes"]
print("grid rows:", r["summary"]["grid_counts"], "budget:", r["grid_budget"])
print("group seconds:", {k: g.get("seconds") for k, g in r["groups"].items()})
by_class = {}
for t in table:
    by_class.setdefault(t["class"], [0, 0, 0])
    by_class[t["class"]][0] += t["declared"]
    by_class[t["class"]][1] += len(t["ran"])
    by_class[t["class"]][2] += len(t["skipped"])
    for name, why in t["skipped"].items():
        print("skipped:", t["op"], t["class"], name, "|", why[:120])
    assert not t["not_run"], (t["op"], t["class"], t["not_run"])
    assert not t["failed"], (t["op"], t["class"], t["failed"])
print("per class (declared, ran, skipped):", by_class)
print("ops:", len({t["op"] for t in table}))
unsupported = [x for x in r["grid"] if x["status"] == "unsupported"]
for x in unsupported:
    print("unsupported:", x["op"], x["dtype"], x["case"], "|", x["detail"][:100])
for x in r["soak"]:
    print("soak:", x["status"], x["steps"], "steps", x["seconds"], "s; median", x["median_step_ms"], "ms, worst", x["worst_step_ms"], "ms; by tenth", x["median_step_ms_by_tenth"])
new = ("reports.decode_attention_h128_2048", "reports.neg_inf_reductions", "reports.linear_m2_k2816", "reports.mv_k256", "reports.conv1d_499_taps_repeat")
for x in r["reports"]:
    if x["op"] in new:
        print("upgrade row:", x["op"], x["dtype"], x["status"], x["runs"], "max abs err", x["max_abs_err"], "|", x["case"][:90])
assert r["summary"]["exit_code"] == 0, r["unexpected"][:5]
assert [x["status"] for x in r["soak"]] == ["pass"]'

claim each-fault-named-in-its-class '
st = p["self_test"]
print("self-test:", st["caught"], st["missed"], "exit", p["summary"]["exit_code"], "fired", st.get("fired"))
assert st["caught"] and not st["missed"] and p["summary"]["exit_code"] == 0
for name, cls in _faults.GRID_CLASS.items():
    ops = _faults.FAULTS[name].catchers
    bad = [x for x in p["grid"] if x["op"] in ops and x["status"] == "fail"]
    for x in bad:
        print(name, "->", x["op"], x["dtype"], x["case"], "|", x["detail"][:100])
    assert bad and {x["regime_class"] for x in bad} == {cls}, (name, {x["regime_class"] for x in bad})
for name in "decode_attention_keys_past_1024 fp16_max_lowest_finite conv_stale_output gemv_drops_k_tail".split():
    for op in _faults.FAULTS[name].catchers:
        rows = [x for x in p["reports"] if x["op"] == op]
        print(name, "->", [(x["dtype"], x["status"], x["detail"][:90]) for x in rows])
        assert rows and any(x["status"] == "fail" for x in rows)
same_inputs = [x for x in p["reports"] if x["op"] in ("reports.conv1d_repeat", "reports.conv1d_255_taps_repeat")]
print("conv_stale_output on the rows that repeat the same inputs:", [(x["op"], x["status"]) for x in same_inputs])
print("soak:", [(x["status"], x["detail"]) for x in p["soak"]])
assert [x["status"] for x in p["soak"]] == ["fail"] and "stall" in p["soak"][0]["detail"]'

claim nothing-else-changed '
key = lambda x: (x["op"], x["dtype"], x.get("check", ""), x.get("case", ""))
faulted = {c for n in _faults.FAULTS for c in _faults.FAULTS[n].catchers}
for s in ("grid", "reports"):
    a, b = {key(x): x["status"] for x in r[s]}, {key(x): x["status"] for x in p[s]}
    assert set(b) <= set(a), (s, sorted(set(b) - set(a))[:5])
    other = [(k, a[k], b[k]) for k in b if k[0] not in faulted and a[k] != b[k]]
    # In a faulted op, only its own regime class may change.
    cls = {c: _faults.GRID_CLASS[n] for n in _faults.GRID_CLASS for c in _faults.FAULTS[n].catchers}
    other += [(k, a[k], b[k]) for k in b if k[0] in cls and a[k] != b[k] and not k[3].startswith(cls[k[0]] + ":")]
    print(s, len(b), "rows; changed outside the faults:", other[:5])
    assert not other'

end_validation clean planted
