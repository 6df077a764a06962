#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the benchmarks built in BUILD/benchmarks: all of them, or the one named.
# Each prints its table and `BENCH name=... value=... unit=... baseline=... ratio=...` lines.
set -euo pipefail
build=${1:-build}
only=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
export SHOAL_SOURCE_DIR=$root SHOAL_BINARY_DIR=$root/$build
# Debian's Python with torch is the reference; a pyenv or venv python3 first on PATH lacks it.
export SHOAL_PYTHON=${SHOAL_PYTHON:-/usr/bin/python3}
dir=$root/$build/benchmarks
[ -d "$dir" ] || { echo "bench: no benchmarks built in $dir" >&2; exit 1; }

# One line naming the machine and the tree measured, so that a pasted table says which
# kind its figures come from: the kinds differ (AVX-512 or not, OpenBLAS's kernels).
machine_line() {
  local cpu=/proc/cpuinfo model fam mod isa mem forced=""
  model=$(awk -F'\t*: ' '$1 == "model name" {print $2; exit}' $cpu 2>/dev/null || true)
  fam=$(awk -F'\t*: ' '$1 == "cpu family" {print $2; exit}' $cpu 2>/dev/null || true)
  mod=$(awk -F'\t*: ' '$1 == "model" {print $2; exit}' $cpu 2>/dev/null || true)
  if grep -qw avx512f $cpu 2>/dev/null; then
    isa="AVX-512"
  elif grep -qw avx2 $cpu 2>/dev/null; then
    isa="AVX2, no AVX-512"
  else
    isa="no AVX2"
  fi
  mem=$(awk '$1 == "MemTotal:" {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null || true)
  [ -z "${OPENBLAS_CORETYPE:-}" ] || forced+=" OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
  [ -z "${SHOAL_NN_CONV_PATH:-}" ] || forced+=" SHOAL_NN_CONV_PATH=$SHOAL_NN_CONV_PATH"
  printf '== machine: %s (family %s, model %s), %s cores, %s, %s, Linux %s, %s, shoal %s%s\n' \
    "${model:-unknown CPU}" "${fam:-?}" "${mod:-?}" "$(nproc)" "$isa" "${mem:-? GiB}" \
    "$(uname -r)" "$(date -u '+%Y-%m-%d %H:%M UTC')" \
    "$(git -C "$root" describe --always --dirty --abbrev=7 2>/dev/null || echo '(not a git checkout)')" \
    "${forced:+ (forced:$forced)}"
}
machine_line
ran=0
for b in "$dir"/*; do
  [ -f "$b" ] && [ -x "$b" ] || continue
  name=$(basename "$b")
  [ -z "$only" ] || [ "$name" = "$only" ] || continue
  echo "== bench $name"
  "$b"
  ran=$((ran + 1))
done
if [ "$ran" -eq 0 ]; then
  echo "bench: no benchmark named '${only}' in $dir (have: $(ls "$dir" | tr '\n' ' '))" >&2
  exit 1
fi
