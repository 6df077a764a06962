#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/test_gpu_bundle.sh — benchmarks/gpu/bundle.sh's bundle runs where none of the Debian
# libraries are. The bundle is gathered from this build (bundle.sh --from: a CUDA build when
# nvcc and cuDNN were found, as on the machines that make the real one; the CUDA build of
# its own is made by hand), then run under bubblewrap with /usr/lib/x86_64-linux-gnu
# replaced by an empty folder except glibc and libstdc++/libgcc_s, the libraries the GPU
# machine has (and CUDA's folder left as it is, on LD_LIBRARY_PATH as there). There:
#   - this build's own shoal cannot start (the Debian libraries are gone indeed);
#   - every program of the bundle starts (ldd finds all it needs, --help runs);
#   - `shoal run` of CartPole Ape-X (bounded steps) trains on the CPU and stores the run:
#     snapshots, metrics, a best greedy return well above a random policy's (~22);
#   - an IMPALA CartPole run (the on-policy programs) runs and stores its run;
#   - bench_ingest measures one Atari-sized case.
# Needs bwrap (Debian's bubblewrap) and user or root namespaces: else SKIPPED (77).
set -euo pipefail
src=${SHOAL_SOURCE_DIR:?}
bld=${SHOAL_BINARY_DIR:?}
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v bwrap >/dev/null || { echo "SKIPPED: no bwrap (Debian's bubblewrap)"; exit 77; }
bwrap --ro-bind / / /bin/true 2>/dev/null ||
  { echo "SKIPPED: bwrap cannot make a namespace here (not root, no user namespaces)"; exit 77; }

work=$(mktemp -d /tmp/shoal-bundle-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$src/benchmarks/gpu/bundle.sh" --from "$bld" --out "$work/shoal" --no-archive
b=$work/shoal

# The sandbox: the machine as it is, but /usr/lib/x86_64-linux-gnu holds only what the GPU
# machine has too; /tmp is empty but for the work folder (and this checkout and build,
# when they are under /tmp).
L=/usr/lib/x86_64-linux-gnu
box=(bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs "$L")
for n in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 \
         libresolv.so.2 libutil.so.1 libstdc++.so.6 libgcc_s.so.1; do
  [ -e "$L/$n" ] && box+=(--ro-bind "$(realpath "$L/$n")" "$L/$n")
done
# CUDA's libraries, where this build found them (the GPU machine has its own).
cuda_dirs=$(sed -n '/^left out/,$ s/^ *lib\(cudart\|cublas\|cudnn\)[^ ]* (here \(.*\)\/[^/]*)$/\2/p' \
            "$b/MANIFEST" | sort -u | paste -sd:)
box+=(--tmpfs /tmp)
# A checkout or build under /tmp (a clone in /tmp/x) would vanish under that tmpfs, and
# step 1 runs this build's own shoal: bind them back, read-only, before the work folder.
# Both the path as named and where it resolves to, as either may be the one under /tmp.
for d in "$src" "$bld"; do
  real=$(realpath "$d")
  case $real/ in /tmp/*) box+=(--ro-bind "$real" "$real") ;; esac
  case $d/ in /tmp/*) [ "$d" = "$real" ] || box+=(--ro-bind "$real" "$d") ;; esac
done
box+=(--bind "$work" "$work" --chdir "$work" --unsetenv LD_PRELOAD
      --setenv LD_LIBRARY_PATH "$cuda_dirs")
echo "sandbox: $L emptied but for glibc and libstdc++; LD_LIBRARY_PATH='$cuda_dirs'"

# 1. The build's own program cannot start there.
if "${box[@]}" "$bld/bin/shoal" --help >"$work/own.txt" 2>&1; then
  fail "this build's shoal started in the sandbox: the Debian libraries are not hidden"
fi
grep -q "error while loading shared libraries" "$work/own.txt" ||
  fail "this build's shoal failed otherwise: $(cat "$work/own.txt")"
echo "ok: this build's shoal cannot start there: $(head -c 200 "$work/own.txt")"

# 2. Every bundled program finds its libraries there: in the bundle, or among those the GPU
# machine has (ld.so --list, as ldd is a bash script and bash's libtinfo is hidden too).
have='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*)\.so'
for p in "$b"/bin/*; do
  "${box[@]}" /lib64/ld-linux-x86-64.so.2 --list "$p" >"$work/ldd.txt" 2>&1 ||
    fail "$(basename "$p") misses libraries in the sandbox: $(cat "$work/ldd.txt")"
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    case $(realpath "$path") in
      "$(realpath "$b")"/lib/*) ;;
      *) [[ $name =~ $have ]] || fail "$(basename "$p"): $name resolves to $path, outside the bundle" ;;
    esac
  done <"$work/ldd.txt"
done
for p in shoal shoal-learner shoal-actor shoal-onpolicy-learner shoal-onpolicy-actor; do
  "${box[@]}" "$b/bin/$p" --help >"$work/help.txt" 2>&1 ||
    fail "$p --help in the sandbox: $(cat "$work/help.txt")"
done
echo "ok: the bundle's programs start in the sandbox"

# 3. CartPole Ape-X trains and is stored.
"${box[@]}" "$b/bin/shoal" run "$b/configs/cartpole-apex.yaml" --set run.name=bundle-apex \
  --set "store.uri=file://$work/runs" --set run.max_env_steps=150000 --set actors=1 \
  --set run.max_seconds=120 --quiet >"$work/apex.txt" 2>&1 || fail "shoal run: $(tail "$work/apex.txt")"
line=$(grep "^shoal: run bundle-apex" "$work/apex.txt") || fail "no summary: $(tail "$work/apex.txt")"
echo "$line"
steps=$(sed -n 's/.*: \([0-9]*\) env steps.*/\1/p' <<<"$line")
best=$(sed -n 's/.*(best \([0-9.]*\)).*/\1/p' <<<"$line")
[ "${steps:-0}" -gt 0 ] || fail "no env steps"
awk -v b="${best:-0}" 'BEGIN { exit !(b >= 100) }' ||
  fail "best greedy return ${best:-none} after $steps steps: it did not learn"
r=$work/runs/bundle-apex
[ -s "$r/run.json" ] && [ -s "$r/metrics.csv" ] || fail "run not stored: $(ls "$r")"
ls "$r"/snapshots/*.safetensors >/dev/null 2>&1 || fail "no snapshot in $r/snapshots"
echo "ok: Ape-X CartPole trained in the sandbox (best $best) and is stored"

# 4. The on-policy programs: IMPALA CartPole runs and is stored.
"${box[@]}" "$b/bin/shoal" run "$b/configs/cartpole-impala.yaml" --set run.name=bundle-impala \
  --set "store.uri=file://$work/runs" --set run.max_env_steps=100000 --set actors=1 \
  --set run.max_seconds=120 --quiet >"$work/impala.txt" 2>&1 ||
  fail "shoal run impala: $(tail "$work/impala.txt")"
grep "^shoal: run bundle-impala" "$work/impala.txt" || fail "no summary: $(tail "$work/impala.txt")"
ls "$work"/runs/bundle-impala/snapshots/*.safetensors >/dev/null 2>&1 || fail "impala: no snapshot"
echo "ok: IMPALA CartPole ran in the sandbox and is stored"

# 5. The ingest benchmark, one Atari-sized case.
"${box[@]}" env SHOAL_INGEST_ONLY=atari SHOAL_INGEST_N=1 "$b/bin/bench_ingest" >"$work/ingest.txt" 2>&1 ||
  fail "bench_ingest: $(tail "$work/ingest.txt")"
grep -E "^\| atari \| 1 \| [0-9]+" "$work/ingest.txt" || fail "bench_ingest: $(cat "$work/ingest.txt")"
echo "ok: bench_ingest ran in the sandbox"
echo "bundle: $(du -sm "$b" | cut -f 1) MiB uncompressed; $(sed -n 2p "$b/MANIFEST")"
