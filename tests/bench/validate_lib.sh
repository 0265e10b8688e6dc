# Shared by the NVIDIA validation scripts (tests/bench/validate_cuda*.sh,
# tests/mps_check/validate_cuda.sh); sourced, not run. The caller sets PY, LOG and status=0
# (and WHEELS for preflight) before using these, or calls begin_validation, which does.

# preflight: OpInfo imports expecttest, which GPU images often lack: install it from the
# wheels in $WHEELS (offline) or else from the package index; return 1 if that fails.
preflight() {
  $PY -c 'import expecttest' 2>/dev/null && return 0
  local site
  site=$(mktemp -d)
  if [ -d "$WHEELS" ]; then
    $PY -m pip install -q --no-index --no-deps --find-links "$WHEELS" --target "$site" expecttest
  else
    $PY -m pip install -q --target "$site" expecttest
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  $PY -c 'import expecttest' 2>/dev/null && return 0
  echo "$(basename "$0"): expecttest (OpInfo imports it) is missing and could not be installed;" \
    "put its wheel in WHEELS=$WHEELS or install it into $PY's environment" >&2
  return 1
}

# step NAME EXPECTED_EXIT COMMAND...: run, log, and clear status when the exit is not the
# expected one (EXPECTED_EXIT "any": only recorded).
step() {
  local name=$1 expected=$2; shift 2
  echo "=== $name: $* ($(date -u +%FT%TZ))" | tee -a "$LOG"
  "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "=== $name exit $rc (expected $expected)" | tee -a "$LOG"
  [ "$expected" = any ] || [ "$rc" = "$expected" ] || status=1
}

# begin_validation DEFAULT_OUT [no-opinfo]: the common start of a validation run. OUT
# (DEFAULT_OUT), PY (python3) and WHEELS (.whl) unless set; the preflight (not for a run
# without the OpInfo group: no-opinfo), exit 3 when it fails; then a WORK folder, OUT with the
# LOG in it, unbuffered Python output and status=0.
begin_validation() {
  OUT=${OUT:-$1}
  PY=${PY:-python3}
  WHEELS=${WHEELS:-.whl}
  [ "${2:-}" = no-opinfo ] || preflight || exit 3
  WORK=$(mktemp -d)
  mkdir -p "$OUT"
  export PYTHONUNBUFFERED=1
  LOG="$OUT/validation-log.txt"
  status=0
}

# end_validation RUN...: pack each run's reports ($WORK/RUN/regress.json, regress.md,
# compat.json, compat.md) into $OUT/raw.tar.gz, keep clean-compat.md and planted-regress.md
# beside it, log the verdict and exit with $status.
end_validation() {
  mkdir -p "$WORK/raw"
  local run f
  for run in "$@"; do
    for f in regress.json regress.md compat.json compat.md; do
      cp "$WORK/$run/$f" "$WORK/raw/$run-$f" 2>/dev/null
    done
  done
  cp "$WORK/clean/compat.md" "$OUT/clean-compat.md" 2>/dev/null
  cp "$WORK/planted/regress.md" "$OUT/planted-regress.md" 2>/dev/null
  tar -czf "$OUT/raw.tar.gz" -C "$WORK/raw" .
  echo "=== validation exit $status" | tee -a "$LOG"
  exit $status
}
