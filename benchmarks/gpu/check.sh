#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# benchmarks/gpu/check.sh — the GPU machine's one script (DEVELOPERS.md, section GPU):
# builds nn alone with the CUDA backend, runs the GPU tests, then times shoal's CUDA
# backend against PyTorch eager on the same card and prints BENCH lines
# gpu.<mlp|nature|dcgan>.b<B> with the ratio over PyTorch (> 1: shoal is faster).
#
# That machine has CUDA, nvcc, PyTorch and cuDNN as the pip package nvidia-cudnn-cu13,
# but none of the Debian libraries (no cmocka, OpenBLAS or libyaml): nn builds by
# itself (SHOAL_ONLY_NN) and its GPU tests with tests/nn_check.h. Whole run: a few
# minutes (the build about one, tests under one, the timings about two).
#
#   benchmarks/gpu/check.sh [BUILD_DIR]     (default build-gpu; OUT=dir keeps the logs)
# Environment: SHOAL_PYTHON (python3 with torch), SHOAL_CUDNN_ROOT (else found through
# the Python package), CUDAToolkit_ROOT, BENCH_WINDOW (seconds per window, default 1).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build-gpu}
py=${SHOAL_PYTHON:-python3}
out=${OUT:-$root/$build}
window=${BENCH_WINDOW:-1.0}
cd "$root"
mkdir -p "$out"

# cuDNN: an explicit root, else the folder holding cudnn.h in the pip packages
# (nvidia-cudnn-cu13: .../site-packages/nvidia/cudnn/{include,lib}), else the toolkit's.
cudnn=${SHOAL_CUDNN_ROOT:-}
if [ -z "$cudnn" ]; then
  for d in $("$py" -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null || true); do
    h=$(find "$d" -name cudnn.h -path '*include*' 2>/dev/null | head -n 1)
    if [ -n "$h" ]; then
      cudnn=$(dirname "$(dirname "$h")")
      break
    fi
  done
fi
echo "== check.sh: $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
echo "== nvcc: $(command -v nvcc || echo 'not on PATH') $(nvcc --version 2>/dev/null | tail -n 1)"
echo "== cuDNN root: ${cudnn:-not found (relying on the toolkit folders)}"
[ -n "$cudnn" ] && ls "$cudnn"/lib* 2>/dev/null | head -n 20
cmake_args=(-DSHOAL_ONLY_NN=ON -DSHOAL_CUDA=ON -DCMAKE_BUILD_TYPE=Release)
if [ -n "$cudnn" ]; then
  cmake_args+=(-DSHOAL_CUDNN_ROOT="$cudnn")
  # cuDNN 9 loads its engine libraries (libcudnn_cnn.so.9, ...) by name at run time.
  export LD_LIBRARY_PATH="$cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)

echo "== build"
t0=$(date +%s)
cmake -S . -B "$build" "${gen[@]}" "${cmake_args[@]}" >"$out/cmake.log" 2>&1 ||
  { cat "$out/cmake.log"; exit 1; }
grep -E "^-- nn:" "$out/cmake.log" || true
cmake --build "$build" -j "$(nproc)" 2>&1 | tail -n 5
echo "   built in $(($(date +%s) - t0)) s"

echo "== GPU tests"
status=0
(cd "$build" && ctest -L gpu --output-on-failure --timeout 300) || status=$?

echo "== PyTorch eager on the same card"
torch_out="$out/torch_gpu.txt"
"$py" "$root/benchmarks/gpu/torch_gpu.py" --window "$window" | tee "$torch_out" || status=$?

echo "== shoal"
"$build/benchmarks/nn_gpu" --window "$window" --torch "$torch_out" || status=$?
exit $status
