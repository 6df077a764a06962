#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# benchmarks/gpu/bundle.sh — shoal's programs for the GPU machine, which has CUDA, cuDNN and
# PyTorch but none of the Debian libraries they link (gRPC, protobuf-c, libmongoc, libuv,
# libyaml, OpenBLAS, ...). Builds shoal, the learner and actor programs and bench_ingest with
# CUDA (SHOAL_CUDA=ON), then gathers them with every shared library ldd finds that the GPU
# machine lacks into one folder:
#
#   OUT/bin/      the programs, stripped, RUNPATH $ORIGIN/../lib
#   OUT/lib/      their libraries, stripped, RUNPATH $ORIGIN (so they find each other)
#   OUT/configs/  the repository's configs (check.sh trains from them)
#   OUT/MANIFEST  what is in, what was left out, the glibc and libstdc++ versions needed
#
# and packs it as OUT.tar.xz, the file to carry (the folder itself is 97 MiB, mostly
# OpenBLAS's kernels for every CPU and ICU's data, which libmongoc links; xz takes it to
# 21 MiB). Left out, as the GPU machine has them: the CUDA runtime, cuBLAS(Lt),
# cuDNN (found there through LD_LIBRARY_PATH, see check.sh), glibc (libc, libm, libpthread,
# libdl, librt, libresolv, libutil, ld-linux) and libstdc++/libgcc_s.
#
#   benchmarks/gpu/bundle.sh [--cpu] [--from BUILD] [--out DIR] [--no-archive]
#     --cpu         build with SHOAL_CUDA=OFF (the same bundle without the CUDA backend)
#     --from BUILD  gather from a build already made (BUILD/bin, BUILD/benchmarks) instead
#     --out DIR     the folder (default build-bundle/shoal; DIR.tar.xz beside it)
#     --no-archive  the folder only
# The CUDA build of these targets took 2.5 minutes on 2 cores here.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cuda=ON from="" out="" archive=1
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) cuda=OFF ;;
    --from) from=$2; shift ;;
    --out) out=$2; shift ;;
    --no-archive) archive=0 ;;
    *) echo "usage: bundle.sh [--cpu] [--from BUILD] [--out DIR] [--no-archive]" >&2; exit 2 ;;
  esac
  shift
done
out=${out:-$root/build-bundle/shoal}
programs=(shoal shoal-learner shoal-actor shoal-onpolicy-learner shoal-onpolicy-actor)
for tool in ldd patchelf strip; do
  command -v "$tool" >/dev/null ||
    { echo "bundle.sh: $tool not found (patchelf and strip come with make deps)" >&2; exit 1; }
done

if [ -z "$from" ]; then
  from=$root/build-bundle/build-$([ $cuda = ON ] && echo cuda || echo cpu)
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  echo "== bundle.sh: building in $from (SHOAL_CUDA=$cuda, Release)"
  mkdir -p "$root/build-bundle"
  cmake -S "$root" -B "$from" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSHOAL_CUDA=$cuda \
    -DSHOAL_TESTS=OFF -DSHOAL_BENCHMARKS=ON >"$root/build-bundle/cmake-$cuda.log" 2>&1 ||
    { tail -n 30 "$root/build-bundle/cmake-$cuda.log"; exit 1; }
  grep -E "^-- nn:" "$root/build-bundle/cmake-$cuda.log" || true
  cmake --build "$from" -j "${BUNDLE_JOBS:-$(nproc)}" --target "${programs[@]}" bench_ingest
fi
srcs=()
for p in "${programs[@]}"; do srcs+=("$from/bin/$p"); done
srcs+=("$from/benchmarks/ingest")
for s in "${srcs[@]}"; do
  [ -x "$s" ] || { echo "bundle.sh: $s is missing (build it first)" >&2; exit 1; }
done

# What the GPU machine has, by soname: glibc, the C++ runtime, CUDA and cuDNN.
have='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*)\.so'
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
declare -A libs=() left=()
for s in "${srcs[@]}"; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [[ $name =~ $have ]]; then
      left[$name]=$path
    elif [ "$path" = "not" ]; then
      echo "bundle.sh: $s needs $name, which ldd cannot find here" >&2
      exit 1
    else
      libs[$name]=$path
    fi
  done < <(ldd "$s")
done
for s in "${srcs[@]}"; do
  b=$(basename "$s")
  [ "$b" = ingest ] && b=bench_ingest
  cp -L "$s" "$out/bin/$b"
  strip --strip-unneeded "$out/bin/$b"
  patchelf --set-rpath '$ORIGIN/../lib' "$out/bin/$b"
done
for name in "${!libs[@]}"; do
  cp -L "${libs[$name]}" "$out/lib/$name"
  chmod u+w "$out/lib/$name"
  strip --strip-unneeded "$out/lib/$name"
  patchelf --set-rpath '$ORIGIN' "$out/lib/$name"
done
cp -r "$root/configs" "$out/configs"

# Every dependency resolves inside the bundle or among what the GPU machine has.
for f in "$out"/bin/* "$out"/lib/*; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [[ $name =~ $have ]] && continue
    if [ "$(dirname "$(realpath "$path")")" != "$(realpath "$out/lib")" ]; then
      echo "bundle.sh: $f: $name resolves to $path, outside the bundle" >&2
      exit 1
    fi
  done < <(ldd "$f")
done

# The newest glibc and libstdc++ symbol versions any file wants: the GPU machine's must be
# at least these.
need() {
  objdump -T "$out"/bin/* "$out"/lib/* 2>/dev/null | grep -o "$1_[0-9][0-9.]*" | sort -Vu | tail -n 1
}
{
  echo "shoal bundle: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)," \
       "SHOAL_CUDA=$cuda, made $(date -u +%FT%TZ) on $(uname -n)"
  echo "needs at least: $(need GLIBC), $(need GLIBCXX) (from the host: glibc, libstdc++)"
  echo "programs:"
  for f in "$out"/bin/*; do echo "  bin/$(basename "$f") $(stat -c %s "$f")"; done
  echo "libraries in the bundle:"
  for name in $(printf '%s\n' "${!libs[@]}" | sort); do
    echo "  lib/$name $(stat -c %s "$out/lib/$name") (from ${libs[$name]})"
  done
  echo "left out (the GPU machine has them):"
  for name in $(printf '%s\n' "${!left[@]}" | sort); do echo "  $name (here ${left[$name]})"; done
} >"$out/MANIFEST"
sed -n 1,2p "$out/MANIFEST"
echo "bundle.sh: $out: ${#srcs[@]} programs, ${#libs[@]} libraries," \
     "$(du -sm "$out" | cut -f 1) MiB ($(du -sb "$out" | cut -f 1) bytes)"
if [ $archive = 1 ]; then
  XZ_OPT=${XZ_OPT:--6 -T0} tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
  echo "bundle.sh: $out.tar.xz: $(du -sm "$out.tar.xz" | cut -f 1) MiB" \
       "($(stat -c %s "$out.tar.xz") bytes), the file to carry"
fi
