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
# When the bundle of benchmarks/gpu/bundle.sh is present (build-bundle/shoal, or the
# carried build-bundle/shoal.tar.xz, or SHOAL_BUNDLE), it then also runs shoal's programs
# from it: CartPole Ape-X and MinAtar Breakout IMPALA with the learner on the GPU
# (learner.device: cuda) and actors on the CPU cores, each beside the same run with the
# learner on the CPU (learner.device: cpu), printing BENCH lines gpu.run.<row>.<cuda|cpu>
# (env steps/s, updates/s, best greedy return), and bench_ingest's Atari-sized rows.
#
#   benchmarks/gpu/check.sh [BUILD_DIR]     (default build-gpu; OUT=dir keeps the logs)
# Environment: SHOAL_PYTHON (python3 with torch), SHOAL_CUDNN_ROOT (else found through
# the Python package), CUDAToolkit_ROOT, BENCH_WINDOW (seconds per window, default 1),
# CHECK_PARTS ("nn bundle", the default, or either alone), SHOAL_BUNDLE (a bundle folder
# or .tar.xz), CHECK_ACTORS (actor processes per run; default from the CPU count),
# CHECK_SECONDS_CARTPOLE (60) and CHECK_SECONDS_MINATAR (90): each run's time limit.
# Without a GPU it runs what needs none (the bundle's libraries, the CPU-learner rows)
# and exits 3 saying the GPU rows did not run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build-gpu}
py=${SHOAL_PYTHON:-python3}
case $build in /*) out=${OUT:-$build} ;; *) out=${OUT:-$root/$build} ;; esac
window=${BENCH_WINDOW:-1.0}
parts=${CHECK_PARTS:-nn bundle}
cd "$root"
mkdir -p "$out"
gpu=0
nvidia-smi -L 2>/dev/null | grep -q "^GPU " && gpu=1

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
[ $gpu = 1 ] || echo "== no GPU here (nvidia-smi lists none): only the parts that need none run"
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

status=0
nn_part() {
  echo "== build"
  t0=$(date +%s)
  cmake -S . -B "$build" "${gen[@]}" "${cmake_args[@]}" >"$out/cmake.log" 2>&1 ||
    { cat "$out/cmake.log"; exit 1; }
  grep -E "^-- nn:" "$out/cmake.log" || true
  cmake --build "$build" -j "$(nproc)" 2>&1 | tail -n 5
  echo "   built in $(($(date +%s) - t0)) s"

  echo "== GPU tests"
  (cd "$build" && ctest -L gpu --output-on-failure --timeout 300) || status=$?
  if [ $gpu = 0 ]; then
    echo "   (no GPU: the timings against PyTorch need one)"
    return
  fi

  echo "== PyTorch eager on the same card"
  torch_out="$out/torch_gpu.txt"
  "$py" "$root/benchmarks/gpu/torch_gpu.py" --window "$window" | tee "$torch_out" || status=$?

  echo "== shoal"
  "$build/benchmarks/nn_gpu" --window "$window" --torch "$torch_out" || status=$?
}

# The bundle's libraries leave CUDA, cuBLAS and cuDNN to this machine: their folders go on
# LD_LIBRARY_PATH (the toolkit's, and the pip packages' nvidia/*/lib).
cuda_library_path() {
  local dirs=() d
  [ -n "$cudnn" ] && dirs+=("$cudnn/lib")
  for d in ${CUDAToolkit_ROOT:+$CUDAToolkit_ROOT/lib64} \
           $(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")")/lib64 \
           /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [ -d "$d" ] && dirs+=("$d")
  done
  for d in $("$py" -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null || true); do
    for l in "$d"/*/lib; do [ -d "$l" ] && dirs+=("$l"); done
  done
  printf '%s\n' "${dirs[@]}" | awk '!seen[$0]++' | paste -sd:
}

# One training run from the bundle: NAME CONFIG DEVICE SECONDS. Prints the learner's device
# line, the summary and a BENCH line; returns non-zero when the run failed.
bundle_run() {
  local name=$1 cfg=$2 device=$3 secs=$4 log="$out/run-$1-$3.log" line
  echo "-- $name, learner.device=$device, $actors actors, at most $secs s"
  if ! "$bundle/bin/shoal" run "$bundle/configs/$cfg" --set "run.name=check-$name-$device-$$" \
      --set "store.uri=file://$out/runs" --set "learner.device=$device" --set "actors=$actors" \
      --set "run.max_seconds=$secs" >"$log" 2>&1; then
    tail -n 15 "$log"
    echo "   FAILED: $name on $device (log $log)"
    return 1
  fi
  grep -m 1 "learner on" "$log" || true
  line=$(grep "^shoal: run check-$name" "$log" | tail -n 1)
  echo "   $line"
  # "... after S s: N env steps, U updates, policy vP, greedy|sampled eval E (best B); ..."
  awk -v name="$name" -v dev="$device" '{
      for (i = 1; i <= NF; i++) {
        if ($i == "after") s = $(i + 1)
        if ($i == "env" && $(i + 1) == "steps,") n = $(i - 1)
        if ($i == "updates,") u = $(i - 1)
        if ($i == "(best") { b = $(i + 1); sub(/\).*/, "", b) }
      }
      if (s > 0) printf "BENCH name=gpu.run.%s.%s seconds=%.1f env_steps_per_s=%.0f updates_per_s=%.1f best_return=%s\n", name, dev, s, n / s, u / s, b
    }' <<<"$line"
}

bundle_part() {
  bundle=${SHOAL_BUNDLE:-}
  if [ -z "$bundle" ]; then
    for c in "$root/build-bundle/shoal" "$root/build-bundle/shoal.tar.xz"; do
      [ -e "$c" ] && { bundle=$c; break; }
    done
  fi
  if [ -z "$bundle" ]; then
    echo "== bundle: none (benchmarks/gpu/bundle.sh makes build-bundle/shoal.tar.xz): skipped"
    return
  fi
  if [ ! -e "$bundle" ]; then
    echo "check.sh: SHOAL_BUNDLE=$bundle: no such bundle folder or archive" >&2
    return 2
  fi
  if [ -f "$bundle" ]; then
    echo "== bundle: unpacking $bundle"
    rm -rf "$out/bundle" && mkdir -p "$out/bundle"
    tar -C "$out/bundle" -xJf "$bundle"
    bundle=$(dirname "$(find "$out/bundle" -name MANIFEST | head -n 1)")
  fi
  if [ ! -f "$bundle/MANIFEST" ]; then
    echo "check.sh: $bundle has no MANIFEST: not a bundle made by benchmarks/gpu/bundle.sh" >&2
    return 2
  fi
  echo "== bundle: $bundle"
  sed -n 1,2p "$bundle/MANIFEST"
  echo "   this machine: $(ldd --version 2>&1 | head -n 1)"
  export LD_LIBRARY_PATH
  LD_LIBRARY_PATH=$(cuda_library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "   LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  local p missing=0
  for p in "$bundle"/bin/*; do
    if ldd "$p" | grep "not found"; then
      echo "   $(basename "$p"): libraries not found (above)"
      missing=1
    fi
  done
  if [ $missing = 1 ]; then
    status=1
    return
  fi
  local n
  n=$(nproc)
  actors=${CHECK_ACTORS:-$((n > 10 ? 8 : n > 3 ? n - 2 : 1))}
  local devices=(cpu)
  [ $gpu = 1 ] && devices=(cuda cpu)
  local d
  for d in "${devices[@]}"; do
    bundle_run cartpole-apex cartpole-apex.yaml "$d" "${CHECK_SECONDS_CARTPOLE:-60}" || status=1
  done
  for d in "${devices[@]}"; do
    bundle_run breakout-impala minatar-breakout-impala.yaml "$d" "${CHECK_SECONDS_MINATAR:-90}" ||
      status=1
  done
  # bench_ingest's learner decodes and inserts into replay (host memory): the same path a
  # GPU learner ingests through before its batches go to the device.
  echo "-- ingest of Atari-sized samples (bench_ingest, atari and atari_full)"
  for sc in atari atari_full; do
    SHOAL_INGEST_ONLY=$sc "$bundle/bin/bench_ingest" 2>&1 | grep -E "^\| $sc " || status=1
  done
}

for part in $parts; do
  case $part in
    nn) nn_part ;;
    bundle) bundle_part ;;
    *) echo "check.sh: unknown part $part (CHECK_PARTS: nn bundle)" >&2; exit 2 ;;
  esac
done
if [ $gpu = 0 ]; then
  echo "check.sh: no GPU on this machine: the GPU rows did not run (status 3); the rest ended with status $status"
  exit 3
fi
exit $status
