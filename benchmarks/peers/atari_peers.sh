#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# `make bench BENCH=atari_peers`: benchmarks/peers/atari_peers.py with the peers' venv
# (EnvPool; benchmarks/peers/setup.sh; SHOAL_PEERS_VENV, default ~/.cache/shoal-peers).
# shoal's side is build/benchmarks/atari_sps, Gymnasium's runs in the environments' venv
# (ale-py and OpenCV; scripts/pyenv.sh; SHOAL_ENV_VENV, default ~/.cache/shoal-env).
# Without the peers' venv it runs on Debian's python3 and EnvPool is reported missing.
# Needs SHOAL_SOURCE_DIR and SHOAL_BINARY_DIR (set by the wrapper in build/benchmarks).
venv=${SHOAL_PEERS_VENV:-$HOME/.cache/shoal-peers}
src=${SHOAL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${SHOAL_BINARY_DIR:-$src/build}
if [ -x "$venv/bin/python" ]; then
  py=$venv/bin/python
else
  py=${SHOAL_PYTHON:-/usr/bin/python3}
  echo "atari_peers: no peers venv at $venv (make peers): EnvPool is missing"
fi
export SHOAL_ATARI_SPS="${SHOAL_ATARI_SPS:-$bin/benchmarks/atari_sps}"
export SHOAL_ENV_VENV="${SHOAL_ENV_VENV:-$HOME/.cache/shoal-env}"
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore}"
exec "$py" "$src/benchmarks/peers/atari_peers.py" "$@"
