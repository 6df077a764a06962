#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/test_install.sh — what `cmake --install` gives a user, used from outside the tree:
#   1. installs this build into a temporary prefix: the programs, libshoal.so with its
#      soname links and libshoal.a, the public headers, libshoal.pc, the CMake package;
#      libshoal.so exports the public headers' functions and nothing of shoal's internals;
#      every installed header compiles on its own with -IPREFIX/include/shoal;
#   2. examples/plugin_env/gridrun.c, copied out, compiles against PREFIX/include/shoal alone;
#   3. tests/install_user.c, copied out, built with pkg-config (libshoal.so, then libshoal.a
#      with the .pc's static_libs) and run: CartPole-v1, an nn forward, a store, and the
#      plugin by its plugin:PATH:GridRun-v0 id (a static program exports what it calls);
#   4. the same program built by a CMake project with find_package(shoal), once against
#      shoal::shoal and once against shoal::shoal_static (no libshoal.so at run time);
#   5. the installed `shoal run` starts the installed learner and actor programs (beside it)
#      and trains PPO on the plugin's env for a bounded number of steps;
#   6. the prefix moved elsewhere still works through pkg-config (paths relative to the .pc).
# Environment (set by ctest): SHOAL_SOURCE_DIR, SHOAL_BINARY_DIR, CC, CMAKE_COMMAND,
# CMAKE_GENERATOR, CMAKE_MAKE_PROGRAM, PKG_CONFIG.
set -euo pipefail
src=${SHOAL_SOURCE_DIR:?}
bld=${SHOAL_BINARY_DIR:?}
cc=${CC:-cc}
cmake=${CMAKE_COMMAND:-cmake}
pkgconfig=${PKG_CONFIG:-pkg-config}
fail() { echo "FAIL: $*" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/shoal-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
P=$work/prefix

# 1. The install.
"$cmake" --install "$bld" --prefix "$P" >"$work/install.txt" 2>&1 ||
  fail "cmake --install: $(tail "$work/install.txt")"
for p in shoal shoal-learner shoal-actor shoal-onpolicy-learner shoal-onpolicy-actor \
         shoal-train-sync; do
  [ -x "$P/bin/$p" ] || fail "bin/$p not installed"
done
for h in common/shoal.h nn/nn.h envs/envs.h store/store.h store/store_data.h \
         store/store_segments.h store/store_writer.h python/shoal_c.h; do
  [ -f "$P/include/shoal/$h" ] || fail "include/shoal/$h not installed"
done
for f in lib/libshoal.a lib/pkgconfig/libshoal.pc lib/cmake/shoal/shoalConfig.cmake \
         lib/cmake/shoal/shoalConfigVersion.cmake share/shoal/configs/cartpole-ppo.yaml; do
  [ -f "$P/$f" ] || fail "$f not installed"
done
real=$(readlink -f "$P/lib/libshoal.so")
soname=$(readelf -d "$real" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname =~ ^libshoal\.so\.[0-9]+(\.[0-9]+)?$ ]] || fail "libshoal's soname is '$soname'"
[ "$(readlink -f "$P/lib/$soname")" = "$real" ] || fail "lib/$soname does not lead to $real"
echo "ok: installed into $P; libshoal soname $soname ($(basename "$real"))"

# Exports: the public headers' functions (nn_, env_, store_, shoal_) and nothing else.
nm -D --defined-only "$real" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' >"$work/exports.txt"
others=$(grep -vE '^(nn|env|store|shoal)_' "$work/exports.txt" | head -5 || true)
[ -z "$others" ] || fail "libshoal exports more than its API: $others"
for s in env_make env_vec_step env_plugin_load nn_model_forward nn_optim_step store_open \
         store_writer_create shoal_rng_below shoal_error_set shoal_c_vec_create; do
  grep -qx "$s" "$work/exports.txt" || fail "libshoal does not export $s"
done
for s in config_create apex_schema env_classic_register; do
  ! grep -qx "$s" "$work/exports.txt" || fail "libshoal exports the internal $s"
done
echo "ok: libshoal exports $(wc -l <"$work/exports.txt") functions, all of the public API"

for h in "$P"/include/shoal/*/*.h; do
  echo "#include \"${h#"$P/include/shoal/"}\"" >"$work/one.c"
  "$cc" -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$P/include/shoal" "$work/one.c" ||
    fail "${h#"$P/"} does not compile on its own"
done
echo "ok: each installed header compiles on its own"

# 2. The plugin, out of the tree, as its comment builds it: only the installed headers
# are on its include path.
mkdir -p "$work/user"
cp "$src/examples/plugin_env/gridrun.c" "$src/tests/install_user.c" "$work/user/"
cd "$work/user"
# In a folder with a long name: a plugin's id carries its path, and an id cut short at
# some fixed length would name another file.
pdir=$work/user/plugins-folder-with-a-name-long-enough-to-pass-a-short-buffer
mkdir -p "$pdir"
"$cc" -O2 -shared -fPIC -I"$P/include/shoal" gridrun.c -o "$pdir/libgridrun.so" ||
  fail "gridrun.c against $P/include/shoal"
plugin="plugin:$pdir/libgridrun.so:GridRun-v0"
echo "ok: examples/plugin_env/gridrun.c built against $P/include/shoal"

# 3. pkg-config, the shared library.
export PKG_CONFIG_PATH=$P/lib/pkgconfig
flags=$("$pkgconfig" --cflags --libs libshoal) || fail "pkg-config libshoal"
libdir=$("$pkgconfig" --variable=libdir libshoal)
# shellcheck disable=SC2086
"$cc" -O2 -Wall -Wextra -Werror install_user.c -o user_pc $flags -Wl,-rpath,"$libdir" ||
  fail "install_user.c with pkg-config ($flags)"
# (ldd's output kept first: grep -q stopping early would fail the pipe under pipefail)
loads=$(ldd ./user_pc | grep libshoal || true)
[[ $loads == *" => $libdir/libshoal.so"* || $loads == *" => $(readlink -f "$libdir")/libshoal.so"* ]] ||
  fail "user_pc does not load the installed libshoal: $loads"
./user_pc "$work/store-pc" "$plugin" || fail "user_pc"
echo "ok: built with pkg-config ($flags) and ran"
# and against libshoal.a, with the libraries the .pc names for it
static_libs=$("$pkgconfig" --variable=static_libs libshoal)
# shellcheck disable=SC2086
"$cc" -O2 install_user.c -o user_pc_static $("$pkgconfig" --cflags libshoal) "$libdir/libshoal.a" \
  $static_libs || fail "install_user.c with libshoal.a and static_libs ($static_libs)"
if readelf -d ./user_pc_static | grep 'NEEDED.*libshoal'; then
  fail "user_pc_static needs libshoal.so"
fi
./user_pc_static "$work/store-pc-static" "$plugin" || fail "user_pc_static"
echo "ok: built with pkg-config against libshoal.a and ran"

# 4. find_package(shoal), shared and static.
mkdir -p "$work/cmake-user"
cat >"$work/cmake-user/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.16)
project(shoal_user C)
find_package(shoal 0.1 REQUIRED)
add_executable(user_shared $work/user/install_user.c)
target_link_libraries(user_shared PRIVATE shoal::shoal m)
add_executable(user_static $work/user/install_user.c)
target_link_libraries(user_static PRIVATE shoal::shoal_static m)
EOF
gen=()
[ -n "${CMAKE_GENERATOR:-}" ] && gen=(-G "$CMAKE_GENERATOR")
[ -n "${CMAKE_MAKE_PROGRAM:-}" ] && gen+=(-DCMAKE_MAKE_PROGRAM="$CMAKE_MAKE_PROGRAM")
"$cmake" -S "$work/cmake-user" -B "$work/cmake-build" "${gen[@]}" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_PREFIX_PATH="$P" >"$work/cmake.txt" 2>&1 || fail "find_package(shoal): $(cat "$work/cmake.txt")"
"$cmake" --build "$work/cmake-build" >"$work/cmake-build.txt" 2>&1 ||
  fail "the find_package build: $(tail -30 "$work/cmake-build.txt")"
"$work/cmake-build/user_shared" "$work/store-shared" "$plugin" || fail "user_shared"
if readelf -d "$work/cmake-build/user_static" | grep 'NEEDED.*libshoal'; then
  fail "user_static needs libshoal.so"
fi
"$work/cmake-build/user_static" "$work/store-static" "$plugin" || fail "user_static"
echo "ok: built with find_package(shoal), against shoal::shoal and shoal::shoal_static, and ran"

# 5. The installed shoal runs its installed siblings on the plugin's env.
"$P/bin/shoal" run "$P/share/shoal/configs/cartpole-ppo.yaml" --set run.name=installed \
  --set "store.uri=file://$work/runs" --set "env.id=$plugin" --set actors=1 \
  --set run.max_env_steps=20000 --set run.max_seconds=60 --quiet >"$work/run.txt" 2>&1 ||
  fail "installed shoal run: $(tail "$work/run.txt")"
grep "^shoal: run installed" "$work/run.txt" || fail "no summary: $(tail "$work/run.txt")"
ls "$work"/runs/installed/snapshots/*.safetensors >/dev/null 2>&1 || fail "no snapshot stored"
echo "ok: the installed shoal run trained PPO on $plugin"

# 6. A moved prefix: pkg-config's paths follow the .pc file.
mv "$P" "$work/moved"
export PKG_CONFIG_PATH=$work/moved/lib/pkgconfig
flags=$("$pkgconfig" --cflags --libs libshoal)
# shellcheck disable=SC2086
"$cc" -O2 install_user.c -o user_moved $flags -Wl,-rpath,"$("$pkgconfig" --variable=libdir libshoal)" ||
  fail "install_user.c against the moved prefix ($flags)"
./user_moved "$work/store-moved" >/dev/null || fail "user_moved"
echo "ok: the prefix moved to $work/moved still builds and runs"
