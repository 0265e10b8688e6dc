#!/usr/bin/env bash
# The NVIDIA validation run behind the figures in docs/regression-and-benchmark.md:
# full regression suite on cuda, the self-test, kernel faults planted in the OpInfo group and
# in the memory group (tests/regress/_faults.py), the full benchmark with the bf16 8192^3
# matmul, the benchmark again with TF32 matmuls switched on, and the independent CUDA-event
# check of the matmul figures.
# Usage (repository root): OUT=some/dir [PY=python3] [WHEELS=.whl] tests/bench/validate_cuda.sh [--preflight]
# OpInfo imports expecttest, which GPU images often lack: the preflight installs it from the
# wheels in $WHEELS (offline) or else from the package index, and stops (exit 3) if it cannot.
# --preflight stops after that. Writes at most 8 files, flat, into $OUT; exit 0 only when
# every step met its target.
set -u
. "$(dirname "$0")/validate_lib.sh"
OUT=${OUT:-reports/validation}
PY=${PY:-python3}
WHEELS=${WHEELS:-.whl}

preflight || exit 3
if [ "${1:-}" = "--preflight" ]; then
  echo "validate_cuda.sh: preflight ok (expecttest importable)"
  exit 0
fi

WORK=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LOG="$OUT/validation-log.txt"
status=0
caught() {  # caught NAME REPORT: the report's planted faults were all caught
  step "$1 caught" 0 $PY -c 'import json, sys
st = json.load(open(sys.argv[1]))["self_test"]
print("planted:", [p["op"] for p in st["planted"]], "caught:", st["caught"], "in:", st["caught_in"][:12])
sys.exit(0 if st["caught"] else 1)' "$2"
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  $PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
} 2>&1 | tee -a "$LOG"
step regress 0 $PY -m tests.regress --device cuda --out "$WORK/regress"
# Planted faults must be caught: exit 0 means caught and nothing else failed, 3 missed. The
# fault runs leave the regime grid out (--no-grid): it is not what they check, and
# tests/regress/validate_cuda_grid.sh plants faults in it.
step self-test 0 $PY -m tests.regress --device cuda --out "$WORK/selftest" --self-test --quick --no-training --no-memory --no-grid
caught self-test "$WORK/selftest/regress.json"
step kernel-fault-opinfo any env INTELMAC_REGRESS_KERNEL_FAULT=softmax_odd_tail $PY -m tests.regress --device cuda --out "$WORK/kernel-softmax" --no-memory --no-training --no-grid
caught kernel-fault-opinfo "$WORK/kernel-softmax/regress.json"
step kernel-fault-memory any env INTELMAC_REGRESS_KERNEL_FAULT=copy_h2d_odd_offset $PY -m tests.regress --device cuda --out "$WORK/kernel-copy" --no-parity --no-training --no-grid
caught kernel-fault-memory "$WORK/kernel-copy/regress.json"
step bench 0 $PY -m tests.bench --device cuda --out "$WORK/bench" --matmul-bf16 8192
step bench-tf32 0 $PY -m tests.bench --device cuda --out "$WORK/bench-tf32" --no-cpu \
  --float32-matmul-precision high --only matmul_NN_1024 matmul_NN_1025 matmul_NN_4096 conv2d train
step independent-matmul 0 $PY -m tests.bench.independent_matmul --bench-json "$WORK/bench/bench.json" --out "$WORK/bench"
cp "$WORK/regress/regress.json" "$WORK/regress/regress.md" "$OUT/" 2>/dev/null
cp "$WORK/bench/bench.json" "$WORK/bench/bench.md" "$WORK/bench/bench.png" "$WORK/bench/independent_matmul.json" "$OUT/" 2>/dev/null
# The fault runs and the TF32 run, in one archive (the device tool returns 8 files at most).
mkdir -p "$WORK/extra"
for run in selftest kernel-softmax kernel-copy; do
  cp "$WORK/$run/regress.json" "$WORK/extra/$run.json" 2>/dev/null
  cp "$WORK/$run/regress.md" "$WORK/extra/$run.md" 2>/dev/null
done
for f in bench.json bench.md bench.png; do cp "$WORK/bench-tf32/$f" "$WORK/extra/tf32-$f" 2>/dev/null; done
tar -czf "$OUT/extra.tar.gz" -C "$WORK/extra" .
echo "=== validation exit $status" | tee -a "$LOG"
exit $status
