#!/usr/bin/env bash
# The NVIDIA validation of issue 34 (docs/regression-and-benchmark.md, "Validation of the
# workloads and the trigger rows"): the groups that hold its rows (reports, sampling,
# training, workloads) on cuda, clean, full and --quick, for their cost and verdicts; then one
# full run with a fault planted in every new row: a NaN in each reports row and workload's
# device output and in mnist_cnn_batch128's logits (INTELMAC_REGRESS_PLANT_FAULT; integer
# outputs get an element off by one), and a multinomial that returns -2^63
# (INTELMAC_REGRESS_KERNEL_FAULT=multinomial_int_min) for the one-sample rows. That run must
# name each fault and keep every other row as the clean run has it.
# Usage (repository root): OUT=some/dir [PY=python3] [DEVICE=cuda] tests/bench/validate_cuda_workloads.sh
# Writes a log, the clean run's compat files and raw.tar.gz into $OUT; exit 0 only when
# every step met its target. No OpInfo group runs: expecttest is not needed.
set -u
. "$(dirname "$0")/validate_lib.sh"
begin_validation reports/validation-workloads no-opinfo
export DEVICE=${DEVICE:-cuda}  # cpu checks the script itself (every row compares the CPU with itself)
GROUPS_ONLY="--no-parity --no-shapes --no-grid --no-memory --no-patched --no-kernels"
REPORT_ROWS=reports.mm_repeat,reports.conv1d_repeat,reports.conv1d_499_taps_repeat,reports.conv1d_255_taps_repeat,reports.weight_int8pack_mm_decode,reports.weight_int4pack_mm_decode,reports.int64_add_2p32,reports.int64_arith_high_word
WORKLOAD_ROWS=workloads.llm_prompt,workloads.llm_generation,workloads.llm_generation_int8,workloads.diffusion_unet_block,workloads.speech_encoder,workloads.vision_training
PLANT=$(echo "$REPORT_ROWS,$WORKLOAD_ROWS,mnist_cnn_batch128" | sed 's/,/:nan,/g'):nan
claim() {  # claim NAME PYTHON: PYTHON sees the clean run as `r`, the planted one as `p`, --quick as `q`
  step "$1" 0 $PY -c "import json, sys
r, p, q = (json.load(open(f)) for f in sys.argv[1:4])
reports, workloads = '$REPORT_ROWS'.split(','), '$WORKLOAD_ROWS'.split(',')
one = ('sampling.multinomial_one_sample', 'sampling.categorical_sample')
$2
print('claim holds')" "$WORK/clean/regress.json" "$WORK/planted/regress.json" "$WORK/quick/regress.json"
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
} 2>&1 | tee -a "$LOG"

step clean 0 $PY -m tests.regress --device "$DEVICE" $GROUPS_ONLY --out "$WORK/clean"
step quick 0 $PY -m tests.regress --device "$DEVICE" --quick $GROUPS_ONLY --out "$WORK/quick"
step planted 0 env INTELMAC_REGRESS_PLANT_FAULT="$PLANT" INTELMAC_REGRESS_KERNEL_FAULT=multinomial_int_min \
  $PY -m tests.regress --device "$DEVICE" $GROUPS_ONLY --out "$WORK/planted"

claim clean-rows-and-cost '
for run, name in ((r, "full"), (q, "--quick")):
    rows = [x for x in run["reports"] if x["op"] in reports] + [x for x in run["sampling"] if x["op"] in one]
    rows += [dict(x, op=x["model"], dtype="float32") for x in run["training"] if x["model"] == "mnist_cnn_batch128"]
    for x in rows:
        print(name, x["op"], x["dtype"], x.get("check", ""), x["status"], x.get("runs", ""), x.get("case", "")[:70], "|", str(x.get("detail", ""))[:110])
    assert {x["op"] for x in rows} >= set(reports) | set(one) | {"mnist_cnn_batch128"}
    assert all(x["status"] == "pass" or (x["status"] == "skip" and x["detail"]) for x in rows)
    for x in run["workloads"]:
        print(name, x["op"], x["dtype"], x["status"], "%.1f s" % x["seconds"], "max abs err %.3g" % x["max_abs_err"], "|", x["detail"][:120])
    assert {x["op"] for x in run["workloads"]} == set(workloads)
    assert all(x["status"] == "pass" for x in run["workloads"])
    print(name, "group seconds:", {k: g.get("seconds") for k, g in run["groups"].items()})
    assert run["summary"]["exit_code"] == 0
print("full run: first step of mnist_cnn_batch128 repeated:", [x["case"] for x in r["training"] if x["model"] == "mnist_cnn_batch128"])
c = json.load(open(sys.argv[1].replace("regress.json", "compat.json")))
for w in c["workloads"]:
    print("compat:", w["sentence"])
import os  # the time target is a GPU'"'"'s: on the CPU both sides are the CPU
assert os.environ["DEVICE"] == "cpu" or r["groups"]["workloads"]["seconds"] <= 90, "the workloads group took longer than about 60 s"'

claim each-fault-named '
st = p["self_test"]
print("self-test:", st["caught"], st["missed"], "exit", p["summary"]["exit_code"])
assert st["caught"] and not st["missed"] and p["summary"]["exit_code"] == 0
clean = {(x["op"], x["dtype"], x["check"]): x["status"] for x in r["reports"] + r["sampling"] + r["workloads"]}
for x in p["reports"] + p["workloads"] + p["sampling"]:
    if x["op"] in reports + workloads + list(one):
        print("planted:", x["op"], x["dtype"], x["check"], x["status"], "|", x["detail"][:110])
        want = "skip" if clean[(x["op"], x["dtype"], x["check"])] == "skip" else "fail"
        assert x["status"] == want or (x["op"] in one and x["check"] == "seed"), x
mnist = [x for x in p["training"] if x["model"] == "mnist_cnn_batch128"]
print("planted: mnist_cnn_batch128", [(x["status"], x["detail"]) for x in mnist])
assert mnist and mnist[0]["status"] == "fail"'

claim nothing-else-changed '
key = lambda x: (x.get("op", x.get("model")), x.get("dtype", ""), x.get("check", ""), x.get("case", ""))
faulted = set(reports) | set(workloads) | set(one) | {"sampling.multinomial", "mnist_cnn_batch128"}
for s in ("reports", "sampling", "training", "workloads"):
    a, b = {key(x): x["status"] for x in r[s]}, {key(x): x["status"] for x in p[s]}
    assert set(a) == set(b), (s, sorted(set(a) ^ set(b))[:5])
    other = [(k, a[k], b[k]) for k in a if k[0] not in faulted and a[k] != b[k]]
    print(s, len(a), "rows; outside the faulted ones, status changed:", other[:5])
    assert not other'

end_validation clean quick planted
