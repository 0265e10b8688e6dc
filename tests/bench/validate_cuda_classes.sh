#!/usr/bin/env bash
# The NVIDIA validation of issue 25 (docs/regression-and-benchmark.md, "Validation of the
# bug classes"): the full regression suite on cuda, clean, for its cost and its new rows; then
# one full run with a fault planted for each new class: an int32 argmax that returns zeros
# past 1024 elements (tests/regress/_faults.py, int_argmax_past_threadgroup), a multinomial
# that returns -2^63 (multinomial_int_min), and a hang in the first topk of each group's
# process (INTELMAC_REGRESS_PLANT_HANG), with a 20 s --check-timeout, and a NaN in the
# reports group's F.linear of pytorch 178697's shape (INTELMAC_REGRESS_PLANT_FAULT). That run
# must name each fault, end by itself, and keep every other row of the clean run. Both runs
# leave the regime grid out (--no-grid): no claim reads it, and tests/regress/validate_cuda_grid.sh
# validates it.
# Usage (repository root): OUT=some/dir [PY=python3] [WHEELS=.whl] tests/bench/validate_cuda_classes.sh
# Writes a log, the clean run's compat files and raw.tar.gz into $OUT; exit 0 only when
# every step met its target.
set -u
. "$(dirname "$0")/validate_lib.sh"
begin_validation reports/validation-classes
claim() {  # claim NAME PYTHON: PYTHON sees the clean run as `r` and the planted one as `p`
  step "$1" 0 $PY -c "import json, sys
r = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else None
$2
print('claim holds')" "$WORK/clean/regress.json" "$WORK/planted/regress.json"
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
} 2>&1 | tee -a "$LOG"

step clean 0 $PY -m tests.regress --device cuda --no-grid --out "$WORK/clean"
step planted 0 env INTELMAC_REGRESS_KERNEL_FAULT=int_argmax_past_threadgroup,multinomial_int_min \
  INTELMAC_REGRESS_PLANT_HANG=topk INTELMAC_REGRESS_PLANT_FAULT=reports.linear_320_to_1280:nan $PY -m tests.regress --device cuda --no-grid --out "$WORK/planted" --check-timeout 20

claim cost-and-new-rows '
import datetime as dt
t = lambda x: dt.datetime.fromisoformat(x)
print("clean run:", (t(r["finished_at"]) - t(r["started_at"])).total_seconds(), "s; groups:",
      {k: g.get("seconds") for k, g in r["groups"].items()})
ints = [x for x in r["results"] if x["dtype"] in ("int32", "int64", "uint8", "bool")]
sints = [x for x in r["shapes"] if x["dtype"] in ("int32", "int64", "uint8", "bool")]
print("integer parity rows:", len(ints), "integer shapes rows:", len(sints), "sampling rows:", len(r["sampling"]),
      "reports rows:", len(r["reports"]))
print("kernels:", [(x["op"], x["status"], x["detail"]) for x in r["kernels"]])
assert ints and sints and r["sampling"] and r["groups"]["sampling"]["status"] == "ok"
assert [x["status"] for x in r["kernels"]] == ["skip"] and "needs mps" in r["kernels"][0]["detail"]
for name, rows in (("parity", ints), ("shapes", sints), ("sampling", r["sampling"]), ("reports", r["reports"])):
    bad = [(x["op"], x["dtype"], x["status"], x["detail"][:120]) for x in rows if x["status"] not in ("pass", "skip")]
    print(name, "not passing:", bad)
    assert not bad'

claim each-fault-named '
st = p["self_test"]
print("self-test:", st["caught"], st["missed"], "caught in:", st["caught_in"][:12])
print("fired:", st.get("fired"))
assert st["caught"] and not st["missed"] and p["summary"]["exit_code"] == 0
argmax = [x for x in p["shapes"] if x["op"] == "shapes.argmax" and x["status"] == "fail"]
print("shapes.argmax fails in", sorted({x["dtype"] + " " + x["case"] for x in argmax}))
assert argmax and {x["dtype"] for x in argmax} <= {"int32", "uint8"}
assert all(x["status"] in ("pass", "skip") for x in p["results"] if x["op"] == "argmax")  # OpInfo misses it
multi = [x for x in p["sampling"] if x["op"] == "sampling.multinomial" and x["check"] == "distribution"]
print("multinomial:", [(x["dtype"], x["status"], x["detail"][:90]) for x in multi])
assert multi and all(x["status"] == "fail" and "out of range" in x["detail"] for x in multi)
lin = [x for x in p["reports"] if x["op"] == "reports.linear_320_to_1280"]
print("reports.linear_320_to_1280:", [(x["dtype"], x["status"], x["detail"][:90]) for x in lin])
assert lin and all(x["status"] == "fail" and "NaN" in x["detail"] for x in lin)
hangs = [(s, x) for s in ("results", "shapes", "reports", "sampling", "memory", "training") for x in p[s] if x["status"] == "hang"]
for s, x in hangs:
    print("hang:", s, x["op"], x["dtype"], x.get("case", ""), "|", x["detail"])
assert {x["op"] for _, x in hangs} == {"topk", "shapes.topk"}
print("groups:", {k: (g["status"], g.get("hangs"), g.get("seconds")) for k, g in p["groups"].items()})
assert p["groups"]["parity"]["status"] == "hang" and p["groups"]["shapes"]["status"] == "hang"'

claim nothing-else-lost '
key = lambda x: (x.get("op", x.get("model")), x.get("dtype", ""), x.get("case", ""))
for s in ("results", "shapes", "reports", "sampling", "memory", "training"):
    a, b = {key(x) for x in r[s]}, {key(x) for x in p[s]}
    print(s, len(r[s]), "rows clean,", len(p[s]), "planted; (op, dtype, case) only in the clean run:", sorted(a - b)[:5])
    assert a == b, (s, sorted(a ^ b)[:10])
faulted = {"shapes.argmax", "sampling.multinomial", "topk", "shapes.topk", "reports.linear_320_to_1280"}
other = [(x["op"], x["dtype"], x["status"]) for s in ("results", "shapes", "reports", "sampling") for x in p[s]
         if x["op"] not in faulted and x["status"] != next(y["status"] for y in r[s] if key(y) == key(x) and y["check"] == x["check"])]
print("rows whose status differs from the clean run outside the faulted ops:", other[:10])
assert not other'

end_validation clean planted
