#!/usr/bin/env bash
# The Python package on a GPU, in one call: tests/gpu/python_check.py (fagen.attention against
# SDPA and the float32 reference, dropout, determinism, torch.compile, a kernel on demand), then
# examples/train_gpt.py eager and compiled (fagen vs SDPA loss curves, tokens/s).
# Prepare here: scripts/gpu-prepare (or just: the fagen CLI, libfagen_rt.so and
#   fagen build tests/gpu/python-check.yaml -o .carry/python.fab), carry .carry; needs torch.
set -uo pipefail
cd "$(dirname "$0")/../.."
C=${CARRY:-.carry}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python FAGEN_RT_LIB=$C/libfagen_rt.so
export FAGEN_CACHE_DIR=${FAGEN_CACHE_DIR:-/tmp/fagen-cache}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0
python3 tests/gpu/python_check.py --bundle "$C/python.fab" --cli "$C/fagen" || status=1
python3 examples/train_gpt.py --bundle "$C/python.fab" --steps "${STEPS:-300}" || status=1
python3 examples/train_gpt.py --bundle "$C/python.fab" --steps "${STEPS:-300}" --compile || status=1
exit $status
