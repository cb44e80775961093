#!/bin/sh
# cache-key.sh FAGEN SPEC WORKDIR: prints "compiled" or "cached" for builds that must miss or hit
# the compile cache: the same nvcc twice (hit), NVCC_APPEND_FLAGS or NVCC_PREPEND_FLAGS set
# (miss; then hit), and another nvcc of the same version at another path (miss).
set -e
fagen=$1 spec=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work/other-cuda/bin"
cp "$here/fake-cuda/bin/nvcc" "$work/other-cuda/bin/nvcc"
build() {
  label=$1
  shift
  out=$(env "$@" "$fagen" build "$spec" -o "$work/out.fab" --cache-dir "$work/cache" 2>&1)
  case "$out" in
  *"(1 compiled, 0 cached"*) echo "$label: compiled" ;;
  *"(0 compiled, 1 cached"*) echo "$label: cached" ;;
  *) echo "$label: unexpected output: $out"; exit 1 ;;
  esac
}
build first CUDA_HOME="$here/fake-cuda"
build again CUDA_HOME="$here/fake-cuda"
build append CUDA_HOME="$here/fake-cuda" NVCC_APPEND_FLAGS=-lineinfo
build append-again CUDA_HOME="$here/fake-cuda" NVCC_APPEND_FLAGS=-lineinfo
build prepend CUDA_HOME="$here/fake-cuda" NVCC_PREPEND_FLAGS=-lineinfo
build other-nvcc CUDA_HOME="$work/other-cuda"
build plain-again CUDA_HOME="$here/fake-cuda"
