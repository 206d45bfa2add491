#!/usr/bin/env bash
# The project's GPU-marked tests on the GPU machine (#32), in one call under a wall cap:
#   bench/gpu/gpu_tests.sh [--dry-run] [CAP_S]     (CAP_S default 360: ~6 min; up to 570 in one call)
# writes $OUT/gpu_tests.txt (pytest's log), then bench/gpu/gpu_tests_md.py turns it into
# $OUT/gpu_tests.md + $OUT/gpu_tests.json (date, GPU, driver, versions, command, pass/fail counts),
# for bench/results/acceptance-h200-s8/.  --dry-run: the same steps here (no GPU: every test skips).
set -u
dry=""
if [ "${1:-}" = "--dry-run" ]; then dry=1; shift; fi
cap=${1:-${GPU_TESTS_CAP_S:-360}}
OUT=${OUT:-/tmp/gpu_tests_out}
mkdir -p "$OUT"
[ -n "$dry" ] || source .device/setup.sh
# tileiras loads libnvvm from $CUDA_HOME when it is set (an older toolkit there breaks compiles);
# the tests' children import cutile_diag from this checkout
unset CUDA_HOME CUDA_PATH
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
cmd="$PY -m pytest -m gpu -q -p no:cacheprovider -rfE --durations=15"
t0=$SECONDS
timeout -k 10 "$cap" $cmd >"$OUT/gpu_tests.txt" 2>&1
rc=$?
wall=$((SECONDS - t0))
echo "== gpu tests rc=$rc in $wall s (cap $cap s)"
"$PY" bench/gpu/gpu_tests_md.py "$OUT/gpu_tests.txt" --rc "$rc" --wall-s "$wall" --cap-s "$cap" \
  --command "timeout -k 10 $cap python -m pytest -m gpu -q -p no:cacheprovider -rfE --durations=15" --out "$OUT" ${dry:+--dry-run}
tail -n 12 "$OUT/gpu_tests.txt"
exit $rc
