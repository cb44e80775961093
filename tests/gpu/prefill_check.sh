#!/usr/bin/env bash
# Chunked prefill over a paged KV cache from Python on a GPU (issue 34): run on the GPU machine
# with .carry carried (scripts/gpu-prepare builds .carry/paged.fab and, for sm_90a,
# .carry/paged90a.fab from tests/gpu/check-paged.yaml, .carry/bench-prefill.fab and
# .carry/bench-prefill90a.fab from bench/bench-prefill.yaml; needs torch and triton there). About 1 minute on an H100; prints the benchmark's table last and
# exits 1 if a step failed.
#   1. tests/gpu/prefill_paged_check.py: fagen.prefill_paged against the float64 reference, the
#      runtime's paged run == the contiguous varlen twin bit for bit, bad entries named,
#      torch.compile; every paged varlen kernel of both bundles.
#   2. bench/bench_prefill.py: the paged kernels (16- and 128-token pages) vs the twin (target:
#      within 5 %), sm90ws and SDPA flash / cuDNN, bf16 hd 128 causal GQA 32/8: the portable
#      kernels (sm_90 bundle), then the sm90ws ones (sm_90a bundle: its twin is the sm90ws
#      contiguous varlen forward).
set -uo pipefail
cd "$(dirname "$0")/../.."
C=${CARRY:-.carry}
OUT=${OUT:-/tmp/fagen-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FAGEN_RT_LIB=$C/libfagen_rt.so PYTHONPATH=python
for f in libfagen_rt.so paged.fab paged90a.fab bench-prefill.fab bench-prefill90a.fab; do
  [ -f "$C/$f" ] || { echo "no $C/$f: run scripts/gpu-prepare first"; exit 1; }
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0
timeout --kill-after=10 "${STEP_S:-240}" python3 tests/gpu/prefill_paged_check.py \
  --bundle "$C/paged.fab" --bundle "$C/bench-prefill.fab" --bundle "$C/paged90a.fab" \
  --bundle "$C/bench-prefill90a.fab" >"$OUT/prefill-check.log" 2>&1 || status=1
grep -E "^(ok|FAIL)|passed" "$OUT/prefill-check.log" | cut -c1-200
[ $status -eq 0 ] || tail -n 30 "$OUT/prefill-check.log"
for arch in "" 90a; do
  timeout --kill-after=10 "${STEP_S:-240}" python3 bench/bench_prefill.py --bundle \
    "$C/bench-prefill$arch.fab" --out "$OUT/bench-prefill$arch.json" ${BENCH_PREFILL_ARGS:-} \
    >"$OUT/bench-prefill$arch.log" 2>&1 || { status=1; tail -n 20 "$OUT/bench-prefill$arch.log"; }
  sed -n '/^chunked prefill/,$p' "$OUT/bench-prefill$arch.log"
done
exit $status
