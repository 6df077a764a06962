#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Python package shoal (python/shoal and libshoal.so from BUILD/lib) into
# PREFIX: a virtual environment (PREFIX/bin/python exists; e.g. made with
# `/usr/bin/python3 -m venv --system-site-packages PREFIX` so Debian's numpy is seen) or
# an install prefix (into PREFIX/lib/python3.X/site-packages; add that to PYTHONPATH).
# Usage: python/install.sh BUILD PREFIX   (what `make python PREFIX=...` runs)
set -euo pipefail
build=${1:-build}
prefix=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$prefix" ]; then
  echo "usage: make python PREFIX=<virtual environment or install prefix>" >&2
  exit 2
fi
case $build in /*) ;; *) build=$root/$build ;; esac
lib=$build/lib/libshoal.so
[ -f "$lib" ] || { echo "python/install.sh: $lib is not built" >&2; exit 1; }
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
if [ -x "$prefix/bin/python" ]; then
  py=$prefix/bin/python
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  kind="virtual environment"
else
  py=${SHOAL_PYTHON:-/usr/bin/python3}
  site=$("$py" -c 'import sys, sysconfig
print(sysconfig.get_paths(scheme="posix_prefix", vars={"base": sys.argv[1], "platbase": sys.argv[1]})["purelib"])' "$prefix")
  kind="prefix"
fi
dest=$site/shoal
rm -rf "$dest"
mkdir -p "$dest"
install -m 0644 "$root"/python/shoal/*.py "$dest"/
install -m 0755 "$lib" "$dest"/libshoal.so
echo "installed shoal into $kind $prefix: $dest"
# Check that it imports with that interpreter (numpy comes from Debian's python3-numpy).
if ! PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" SHOAL_LIB= "$py" -c \
    'import shoal; shoal.make_vec("CartPole-v1", 2).reset(seed=0)'; then
  echo "python/install.sh: 'import shoal' failed with $py; a venv needs numpy:" \
       "make it with /usr/bin/python3 -m venv --system-site-packages" >&2
  exit 1
fi
# The import was checked with $py only: another python3 (pyenv, conda) may lack numpy or
# be another version, so the hint names the interpreter.
if [ "$kind" = prefix ]; then
  echo "use it with: PYTHONPATH=$site${PYTHONPATH:+:\$PYTHONPATH} $py" \
       "(the import was checked with $py; another python3 needs numpy and the same version)"
else
  echo "use it with: $py (the import was checked with it)"
fi
exit 0
