#!/usr/bin/env bash
# NVIDIA validation of `python -m torch.backends.mps --check` (issue 18), behind
# docs/validation/*-mps-check/: the check on cuda (text, then --json), the benchmark on the
# same kernels, their device medians compared (5%), and faults planted under the check
# (tests/mps_check/plant/sitecustomize.py), which its smoke checks must name.
# The series' mps files run over the machine's stock CUDA torch as a package of another name
# (tests/mps_check/overlay.py): python -m intelmac_mps_under_test --check is the wheel's
# python -m torch.backends.mps --check.
# Usage (repository root): OUT=some/dir [PY=python3] tests/mps_check/validate_cuda.sh
# Writes at most 8 files, flat, into $OUT; exit 0 only when every step met its target.
set -u
. "$(dirname "$0")/../bench/validate_lib.sh"
OUT=${OUT:-reports/mps-check}
PY=${PY:-python3}
WORK=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LOG="$OUT/validation-log.txt"
LAYER=$($PY -m tests.mps_check.overlay "$WORK/layer") || exit 3
PKG=intelmac_mps_under_test
KERNELS="matmul_NN_1024 matmul_NN_1025 conv2d_3x3_64ch_56px small_ops_chain_64x64 train_step_small_cnn_b32"
status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0], "threads", torch.get_num_threads())'
} 2>&1 | tee -a "$LOG"
# The README's sample: the text report, as a user sees it (progress on stderr into the log).
echo "=== check-text ($(date -u +%FT%TZ))" | tee -a "$LOG"
PYTHONPATH="$LAYER" $PY -m $PKG --check --device cuda >"$OUT/check.txt" 2>>"$LOG"
rc=$?; cat "$OUT/check.txt" | tee -a "$LOG"; echo "=== check-text exit $rc (expected 0)" | tee -a "$LOG"
[ "$rc" = 0 ] || status=1
# The benchmark and the check's JSON back to back, for the comparison.
step bench 0 $PY -m tests.bench --device cuda --out "$WORK/bench" --budget 1.0 --only $KERNELS
echo "=== check-json ($(date -u +%FT%TZ))" | tee -a "$LOG"
PYTHONPATH="$LAYER" $PY -m $PKG --check --device cuda --json >"$OUT/check.json" 2>>"$LOG"
rc=$?; echo "=== check-json exit $rc (expected 0)" | tee -a "$LOG"
[ "$rc" = 0 ] || status=1
step compare 0 $PY -m tests.mps_check.compare_bench --check-json "$OUT/check.json" \
  --bench-json "$WORK/bench/bench.json" --out "$OUT/compare.json"
# Planted faults: softmax wrong, host-to-device copy wrong, conv2d raising, layer_norm
# aborting the worker. Exit 1, each named, and every other check passing.
echo "=== faults ($(date -u +%FT%TZ))" | tee -a "$LOG"
PYTHONPATH="$PWD/tests/mps_check/plant:$LAYER" INTELMAC_CHECK_FAULT_DEVICE=cuda \
  INTELMAC_CHECK_FAULT=softmax_odd_tail,copy_h2d_odd_offset,conv2d_raises,layer_norm_abort \
  $PY -m $PKG --check --device cuda --no-timings --json >"$OUT/check-faults.json" 2>>"$LOG"
rc=$?; echo "=== faults exit $rc (expected 1)" | tee -a "$LOG"
[ "$rc" = 1 ] || status=1
step faults-named 0 $PY -c 'import json, sys
r = {x["op"]: (x["status"], x["message"]) for x in json.load(open(sys.argv[1]))["ops"]}
for op, v in r.items(): print(f"{op}: {v[0]} {v[1]}")
want = {"softmax": "fail", "copy_to_device_odd_offset": "fail", "conv2d": "error", "layer_norm": "error"}
ok = all(r[op][0] == s for op, s in want.items()) and "died during this check" in r["layer_norm"][1]
ok = ok and all(v[0] == "pass" for op, v in r.items() if op not in want)
print("faults named:", ok); sys.exit(0 if ok else 1)' "$OUT/check-faults.json"
cp "$WORK/bench/bench.json" "$OUT/bench.json" 2>/dev/null
cp "$WORK/bench/bench.md" "$OUT/bench.md" 2>/dev/null
echo "=== validation exit $status" | tee -a "$LOG"
exit $status
