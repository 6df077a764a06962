#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/test_pip_install.sh — the Python package as pip builds and installs it, without the
# network:
#   1. the PEP 517 build of pyproject.toml (scikit-build-core over this repository's CMake)
#      makes a wheel with pip of the environments' venv, whose pinned scikit-build-core
#      (scripts/pyenv.sh) serves with --no-build-isolation; the wheel holds the package and
#      shoal/libshoal.so, and nothing of the C install (no programs, headers);
#   2. a fresh venv made as docs/install.md says (/usr/bin/python3 -m venv
#      --system-site-packages, so Debian's numpy serves) installs the wheel with --no-index;
#   3. from outside the checkout, with SHOAL_LIB and PYTHONPATH unset, that venv's python
#      imports shoal from the venv, loads the venv's libshoal.so, reports the CMake
#      project's version, and steps CartPole-v1 through make_vec: seeded resets repeat,
#      rewards are 1, and always pushing right ends every copy's episode in under 100 steps.
# The CMake build of the wheel is kept in BUILD/python-wheel, so a second run rebuilds only
# what changed. CUDA is left out (SHOAL_CUDA=OFF): its kernels would double the build, and
# the package's use of the library is the same on the CPU.
# Environment (set by ctest): SHOAL_SOURCE_DIR, SHOAL_BINARY_DIR, SHOAL_ENV_VENV.
set -euo pipefail
src=${SHOAL_SOURCE_DIR:?}
bld=${SHOAL_BINARY_DIR:?}
envpy=${SHOAL_ENV_VENV:?}/bin/python
fail() { echo "FAIL: $*" >&2; exit 1; }
"$envpy" -c 'import scikit_build_core' 2>/dev/null ||
  fail "$envpy has no scikit_build_core: make deps (scripts/pyenv.sh) installs the pinned one"

work=$(mktemp -d "${TMPDIR:-/tmp}/shoal-pip-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 1. The wheel.
start=$(date +%s)
"$envpy" -m pip wheel --disable-pip-version-check --no-build-isolation --no-deps --no-index \
  -w "$work/wheels" --config-settings=build-dir="$bld/python-wheel" \
  --config-settings=cmake.define.SHOAL_CUDA=OFF "$src" >"$work/wheel.txt" 2>&1 ||
  fail "pip wheel: $(tail -40 "$work/wheel.txt")"
whl=$(ls "$work"/wheels/shoal-*.whl)
echo "ok: built $(basename "$whl") in $(($(date +%s) - start)) s"
/usr/bin/python3 - "$whl" <<'EOF' || fail "the wheel's contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = {"shoal/__init__.py", "shoal/_lib.py", "shoal/vector.py", "shoal/libshoal.so"}
missing = need - set(names)
assert not missing, f"missing {sorted(missing)}"
stray = [n for n in names if not n.startswith(("shoal/", "shoal-"))]
assert not stray, f"files outside the package: {stray}"
print("ok: the wheel holds", len(names), "files: the package and shoal/libshoal.so")
EOF

# 2. A fresh venv, as a user makes one.
/usr/bin/python3 -m venv --system-site-packages "$work/venv" || fail "python3 -m venv"
"$work/venv/bin/python" -m pip install --disable-pip-version-check --no-index "$whl" \
  >"$work/install.txt" 2>&1 || fail "pip install: $(tail -20 "$work/install.txt")"
echo "ok: installed into a fresh venv"

# 3. The installed package, away from the checkout (python/ must not be what imports).
version=$(sed -n 's/^project(shoal VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
cd "$work"
env -u SHOAL_LIB -u PYTHONPATH "$work/venv/bin/python" - "$work/venv" "$version" <<'EOF' ||
import os, sys
from importlib import metadata
import numpy as np
import shoal
from shoal import _lib
venv, version = os.path.realpath(sys.argv[1]), sys.argv[2]
here = os.path.realpath(shoal.__file__)
assert here.startswith(venv + os.sep), f"shoal imported from {here}, not the venv"
lib = os.path.realpath(_lib._find())
assert lib == os.path.join(os.path.dirname(here), "libshoal.so"), f"library {lib}"
assert metadata.version("shoal") == version == shoal.__version__, \
    (metadata.version("shoal"), version, shoal.__version__)
env = shoal.make_vec("CartPole-v1", num_envs=8)
obs, _ = env.reset(seed=5)
again, _ = env.reset(seed=5)
assert obs.shape == (8, 4) and obs.dtype == np.float32 and np.array_equal(obs, again)
assert np.all(np.abs(obs) <= 0.05), obs
right = np.ones(8, dtype=np.int32)
ended = np.zeros(8, dtype=bool)
for t in range(100):
    obs, rew, term, trunc, _ = env.step(right)
    assert np.all(rew == 1.0), rew
    ended |= term | trunc
    if ended.all():
        break
assert ended.all(), f"pushing right for 100 steps left copies {np.flatnonzero(~ended)} going"
print(f"ok: shoal {version} from {here} steps CartPole-v1 ({t + 1} steps until every copy fell)")
EOF
  fail "the installed package"
