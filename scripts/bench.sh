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
