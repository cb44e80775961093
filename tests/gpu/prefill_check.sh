#!/usr/bin/env bash
# Chunked prefill over a paged KV cache from Python on a GPU (issue 34): run on the GPU machine
# with .carry carried (scripts/gpu-prepare builds .carry/paged.fab from
# tests/gpu/check-paged.yaml and .carry/bench-prefill.fab from bench/bench-prefill.yaml; needs
# torch and triton there). About 1 minute on an H100; prints the benchmark's table last and
# exits 1 if a step failed.
#   1. tests/gpu/prefill_paged_check.py: fagen.prefill_paged against the float64 reference, the
#      runtime's paged run == the contiguous varlen twin bit for bit, bad entries named,
#      torch.compile; every paged varlen kernel of both bundles.
#   2. bench/bench_prefill.py: the paged kernels (16- and 128-token pages) vs the twin (target:
#      within 5 %), sm90ws and SDPA flash / cuDNN, bf16 hd 128 causal GQA 32/8.
set -uo pipefail
cd "$(dirname "$0")/../.."
C=${CARRY:-.carry}
OUT=${OUT:-/tmp/fagen-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FAGEN_RT_LIB=$C/libfagen_rt.so PYTHONPATH=python
for f in libfagen_rt.so paged.fab bench-prefill.fab; do
  [ -f "$C/$f" ] || { echo "no $C/$f: run scripts/gpu-prepare first"; exit 1; }
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0
timeout --kill-after=10 "${STEP_S:-240}" python3 tests/gpu/prefill_paged_check.py \
  --bundle "$C/paged.fab" --bundle "$C/bench-prefill.fab" >"$OUT/prefill-check.log" 2>&1 || status=1
grep -E "^(ok|FAIL)|passed" "$OUT/prefill-check.log" | cut -c1-200
[ $status -eq 0 ] || tail -n 30 "$OUT/prefill-check.log"
timeout --kill-after=10 "${STEP_S:-240}" python3 bench/bench_prefill.py --bundle \
  "$C/bench-prefill.fab" --out "$OUT/bench-prefill.json" ${BENCH_PREFILL_ARGS:-} \
  >"$OUT/bench-prefill.log" 2>&1 || { status=1; tail -n 20 "$OUT/bench-prefill.log"; }
sed -n '/^chunked prefill/,$p' "$OUT/bench-prefill.log"
exit $status
