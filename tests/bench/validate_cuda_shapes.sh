#!/usr/bin/env bash
# The NVIDIA validation of issue 17 (docs/regression-and-benchmark.md, "Validation of the
# shapes group"): the full regression suite on cuda with its shapes group; the size-only
# kernel faults (tests/regress/_faults.py), which the shapes group must catch and the OpInfo
# group, whose samples never reach the sizes, misses; and a torchvision op whose backward
# raises together with an abort in the middle of the shapes group, which must lose no other
# row. Each claim is checked on the reports by a few lines of Python below. Every run leaves
# the regime grid out (--no-grid): no claim reads it, and tests/regress/validate_cuda_grid.sh
# validates it.
# Usage (repository root): OUT=some/dir [PY=python3] [WHEELS=.whl] tests/bench/validate_cuda_shapes.sh
# Preflight as in validate_cuda.sh (expecttest from $WHEELS). Writes at most 8 files, flat,
# into $OUT; exit 0 only when every step met its target.
set -u
. "$(dirname "$0")/validate_lib.sh"
begin_validation reports/validation-shapes
claim() {  # claim NAME REPORT PYTHON: PYTHON sees the report as `r`; an AssertionError fails it
  step "$1" 0 $PY -c "import json, sys
r = json.load(open(sys.argv[1]))
$3
print('claim holds')" "$2"
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
} 2>&1 | tee -a "$LOG"

step regress 0 $PY -m tests.regress --device cuda --no-grid --out "$WORK/regress"
claim shapes-ran "$WORK/regress/regress.json" '
s = r["shapes"]
assert r["groups"]["shapes"]["status"] == "ok", r["groups"]["shapes"]
print(len(s), "shape rows:", r["summary"]["shape_counts"], "ops:", len({x["op"] for x in s}))
assert len({x["op"] for x in s}) == 22, sorted({x["op"] for x in s})
assert {x["dtype"] for x in s} == {"float32", "float16", "bfloat16"}
print("large:", r["shapes_notes"]["large"], [(x["op"], x["case"], x["status"]) for x in s if x["large"]])
assert sum(1 for x in s if x["large"]) == 9
worst = max((x for x in s if x["err_ratio"] is not None and x["err_ratio"] < float("inf")), key=lambda x: x["err_ratio"])
print("closest to its bound:", worst["op"], worst["dtype"], worst["check"], worst["case"], worst["err_ratio"])'

step size-only-faults 0 env INTELMAC_REGRESS_KERNEL_FAULT=sum_partial_simd_tail,softmax_tail_past_1024 \
  $PY -m tests.regress --device cuda --out "$WORK/size-faults" --no-memory --no-training --no-vision --no-grid \
  --ops sum mean amax argmax softmax log_softmax logsumexp cumsum --shapes-ops sum softmax
claim size-only-faults-caught-by-shapes-missed-by-opinfo "$WORK/size-faults/regress.json" '
st = r["self_test"]
print("caught:", st["caught"], "in:", st["caught_in"])
print("fired:", st["fired"])
print("OpInfo rows of the same ops:", st["opinfo_rows"])
assert st["caught"] and not st["missed"]
assert all(v == 0 for v in st["fired"].get("parity", {}).values())
assert all(v > 0 for v in st["fired"]["shapes"].values())
for op in ("sum", "softmax"):
    rows = [x for x in r["results"] if x["op"] == op]
    assert rows and all(x["status"] == "pass" for x in rows), rows
    bad = [x for x in r["shapes"] if x["op"] == "shapes." + op and x["status"] == "fail"]
    assert bad, op
    print("shapes." + op, "fails in", sorted({x["dtype"] + " " + x["case"] for x in bad}))'

step raise-and-abort 1 env INTELMAC_REGRESS_PLANT_FAULT=torchvision.ops.roi_align:raise-backward \
  INTELMAC_REGRESS_PLANT_ABORT=shapes:softmax \
  $PY -m tests.regress --device cuda --out "$WORK/raise-abort" --no-memory --no-training --no-grid
claim nothing-else-lost "$WORK/raise-abort/regress.json" '
g = r["groups"]
print("groups:", {k: (v["status"], v.get("detail", "")) for k, v in g.items()})
assert g["parity"]["status"] == "ok" and g["shapes"]["status"] == "error" and "SIGABRT" in g["shapes"]["detail"]
res = {(x["op"], x["dtype"], x["check"]): x for x in r["results"]}
print(r["summary"]["ops_checked"], "ops have rows;", r["summary"]["counts"])
assert r["summary"]["ops_checked"] == 100
grad = res[("torchvision.ops.roi_align", "float32", "grad")]
print("roi_align grad:", grad["status"], grad["detail"])
assert grad["status"] == "error" and "planted fault" in grad["detail"]
others = [x for k, x in res.items() if k != ("torchvision.ops.roi_align", "float32", "grad")]
assert all(x["status"] == "pass" for x in others), [x for x in others if x["status"] != "pass"]
s = r["shapes"]
print("shape rows kept:", len(s), sorted({x["op"] for x in s}))
assert {x["op"] for x in s} == {"shapes.sum", "shapes.mean", "shapes.amax", "shapes.argmax", "shapes.softmax"}
flight = [x for x in s if x["op"] == "shapes.softmax"]
assert len(flight) == 1 and flight[0]["status"] == "error" and "SIGABRT" in flight[0]["detail"], flight
assert all(x["status"] == "pass" for x in s if x["op"] != "shapes.softmax")'

cp "$WORK/regress/regress.json" "$WORK/regress/regress.md" "$WORK/regress/compat.json" "$WORK/regress/compat.md" "$OUT/" 2>/dev/null
mkdir -p "$WORK/extra"
for run in size-faults raise-abort; do
  for f in regress.json regress.md compat.json compat.md; do
    cp "$WORK/$run/$f" "$WORK/extra/$run-$f" 2>/dev/null
  done
done
tar -czf "$OUT/extra.tar.gz" -C "$WORK/extra" .
echo "=== validation exit $status" | tee -a "$LOG"
exit $status
