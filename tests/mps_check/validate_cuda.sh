#!/usr/bin/env bash
# NVIDIA validation of `python -m torch.backends.mps --check` (issue 18), behind
# docs/validation/*-paired/: the check on cuda (text, the sample in docs/mps-python-api.md); its timings
# against the benchmark's, two ways (tests/mps_check/compare_bench.py): `paired`, the two
# tools' workloads timed in turn in one process (5%), with a planted 12.5% difference it must
# measure; and `runs`, three whole runs of each tool taken in turn, as information (a
# launch-bound workload moves between runs of one tool with the host's speed); and faults
# planted under the check
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
# How steady is this host's speed? A pure-Python loop, timed in 20 ms batches for 4 s: the
# spread bounds how closely two runs of a launch-bound workload can agree (information).
step host-speed any $PY -c 'import time
loop = lambda: sum(range(20000))
t = []; end = time.perf_counter() + 4
while time.perf_counter() < end:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.02: loop(); n += 1
    t.append((time.perf_counter() - t0) / n * 1e3)
t.sort(); q = lambda p: t[int(p * (len(t) - 1))]
print(f"pure-Python loop, ms per call over {len(t)} batches: fastest {q(0):.3f}, quartiles "
      f"{q(.25):.3f} / {q(.5):.3f} / {q(.75):.3f}, slowest {q(1):.3f}")'
# The README's sample: the text report, as a user sees it (progress on stderr into the log).
echo "=== check-text ($(date -u +%FT%TZ))" | tee -a "$LOG"
PYTHONPATH="$LAYER" $PY -m $PKG --check --device cuda >"$OUT/check.txt" 2>>"$LOG"
rc=$?; cat "$OUT/check.txt" | tee -a "$LOG"; echo "=== check-text exit $rc (expected 0)" | tee -a "$LOG"
[ "$rc" = 0 ] || status=1
# The gate: each workload as the check builds it and as the benchmark does, timed in turn.
step paired 0 $PY -m tests.mps_check.compare_bench paired --device cuda --out "$OUT/paired.json"
# It can fail: 12.5% more work planted in the check's CNN step (the noisiest workload) is
# measured as such (between +7.5% and +17.5%) and fails the 5% tolerance.
step paired-planted 1 $PY -m tests.mps_check.compare_bench paired --device cuda \
  --only train_step_small_cnn_b32 --plant train_step_small_cnn_b32 --out "$WORK/planted.json"
step planted-measured 0 $PY -c 'import json, sys
r = json.load(open(sys.argv[1]))["rows"][0]
d = r["difference"]
print(f"planted 12.5%, measured {100 * d:+.1f}%")
sys.exit(0 if 0.075 <= d <= 0.175 and not r["within_tolerance"] else 1)' "$WORK/planted.json"
cp "$WORK/planted.json" "$OUT/paired-planted.json"
# Whole runs of the two tools, three of each in turn: reported, not a gate (exit recorded).
for i in 1 2 3; do
  step bench-$i 0 $PY -m tests.bench --device cuda --out "$WORK/bench$i" --budget 1.0 --only $KERNELS
  echo "=== check-json-$i ($(date -u +%FT%TZ))" | tee -a "$LOG"
  PYTHONPATH="$LAYER" $PY -m $PKG --check --device cuda --json >"$WORK/check$i.json" 2>>"$LOG"
  rc=$?; echo "=== check-json-$i exit $rc (expected 0)" | tee -a "$LOG"
  [ "$rc" = 0 ] || status=1
done
step runs any $PY -m tests.mps_check.compare_bench runs --check-json "$WORK"/check[123].json \
  --bench-json "$WORK"/bench[123]/bench.json --out "$OUT/runs.json"
cp "$WORK/check3.json" "$OUT/check.json"
cp "$WORK/bench3/bench.json" "$OUT/bench.json"
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
echo "=== validation exit $status" | tee -a "$LOG"
exit $status
