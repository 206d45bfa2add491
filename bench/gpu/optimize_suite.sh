#!/usr/bin/env bash
# GPU suite for `cutile-diag optimize` (~8 min on one H200):
#   bench/gpu/optimize_suite.sh /path/to/TileGym            # everything
#   ONLY=gather_scale,vector_add,matmul_f32 bench/gpu/optimize_suite.sh   # a subset (split across calls)
# Writes report.md, summary.json and per-kernel perf_results.md / ledger.jsonl into $OUT.
set -euo pipefail
unset CUDA_HOME CUDA_PATH
OUT="$(realpath -m "${OUT:-$PWD/optimize-suite-out}")"
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python}"
[ -x .venv/bin/python ] && PY=.venv/bin/python
ARGS=(--out "$OUT")
[ $# -ge 1 ] && ARGS+=(--tilegym "$(realpath "$1")")
[ -n "${ONLY:-}" ] && ARGS+=(--only "$ONLY")
[ -n "${ITERATIONS:-}" ] && ARGS+=(--iterations "$ITERATIONS")
[ -n "${DEADLINE_S:-}" ] && ARGS+=(--deadline-s "$DEADLINE_S")
exec "$PY" bench/gpu/optimize_suite.py "${ARGS[@]}"
