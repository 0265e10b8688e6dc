#!/usr/bin/env bash
# The NVIDIA validation run behind the figures in docs/regression-and-benchmark.md:
# full regression suite on cuda, the self-test (planted fault), the full benchmark with the
# bf16 8192^3 matmul, and the independent CUDA-event check of the matmul figures.
# Usage (repository root): OUT=some/dir tests/bench/validate_cuda.sh   [PY=python3]
# Writes at most 8 files, flat, into $OUT; exit 0 only when every step met its target.
set -u
OUT=${OUT:-reports/validation}
PY=${PY:-python3}
WORK=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LOG="$OUT/validation-log.txt"
status=0
step() {  # step NAME EXPECTED_EXIT COMMAND...
  local name=$1 expected=$2; shift 2
  echo "=== $name: $* ($(date -u +%FT%TZ))" | tee -a "$LOG"
  "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "=== $name exit $rc (expected $expected)" | tee -a "$LOG"
  [ "$rc" = "$expected" ] || status=1
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  $PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
} 2>&1 | tee -a "$LOG"
step regress 0 $PY -m tests.regress --device cuda --out "$WORK/regress"
# The planted fault must be caught: the suite exits 1 and says so in the JSON.
step self-test 1 $PY -m tests.regress --device cuda --out "$WORK/selftest" --self-test --quick --no-training
step bench 0 $PY -m tests.bench --device cuda --out "$WORK/bench" --matmul-bf16 8192
step independent-matmul 0 $PY -m tests.bench.independent_matmul --bench-json "$WORK/bench/bench.json" --out "$WORK/bench"
cp "$WORK/regress/regress.json" "$WORK/regress/regress.md" "$OUT/" 2>/dev/null
cp "$WORK/selftest/regress.json" "$OUT/selftest.json" 2>/dev/null
cp "$WORK/bench/bench.json" "$WORK/bench/bench.md" "$WORK/bench/bench.png" "$WORK/bench/independent_matmul.json" "$OUT/" 2>/dev/null
echo "=== validation exit $status" | tee -a "$LOG"
exit $status
