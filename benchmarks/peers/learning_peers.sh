#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# `make bench BENCH=learning_peers`: benchmarks/peers/learning_peers.py (Stable-Baselines3's
# DQN and PPO on CartPole-v1 with RL Zoo's settings) in the peers' venv
# (benchmarks/peers/setup.sh; SHOAL_PEERS_VENV, default ~/.cache/shoal-peers). Without the
# venv it says so and prints baseline=none lines. LEARNING_PEERS_SEEDS: default "1 2 3".
venv=${SHOAL_PEERS_VENV:-$HOME/.cache/shoal-peers}
src=${SHOAL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
py=${SHOAL_PYTHON:-/usr/bin/python3}
[ -x "$venv/bin/python" ] && py=$venv/bin/python
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore}"
# shellcheck disable=SC2086
exec "$py" "$src/benchmarks/peers/learning_peers.py" --seeds ${LEARNING_PEERS_SEEDS:-1 2 3} "$@"
