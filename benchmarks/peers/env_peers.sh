#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# `make bench BENCH=env_peers`: benchmarks/peers/env_peers.py with the peers' venv
# (benchmarks/peers/setup.sh; SHOAL_PEERS_VENV, default ~/.cache/shoal-peers). Without the
# venv it runs on Debian's python3 and prints shoal's figures with baseline=none.
# Needs SHOAL_SOURCE_DIR and SHOAL_BINARY_DIR (set by the wrapper in build/benchmarks).
venv=${SHOAL_PEERS_VENV:-$HOME/.cache/shoal-peers}
src=${SHOAL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${SHOAL_BINARY_DIR:-$src/build}
if [ -x "$venv/bin/python" ]; then
  py=$venv/bin/python
else
  py=${SHOAL_PYTHON:-/usr/bin/python3}
  echo "env_peers: no peers venv at $venv (make peers): peers are missing, shoal alone"
fi
export SHOAL_LIB="${SHOAL_LIB:-$bin/lib/libshoal.so}"
export PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore}"
exec "$py" "$src/benchmarks/peers/env_peers.py" "$@"
