#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make demo`: the main job. Ape-X DQN learns CartPole-v1 with one learner and two
# actor processes on this machine, keeping the run in the embedded file store (./runs),
# then plays the latest snapshot greedily for 100 episodes.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/$build/bin
cd "$root"
run="demo-cartpole-$(date +%Y%m%d-%H%M%S)"
echo "shoal demo: shoal run configs/cartpole-apex.yaml (run $run, store file://runs)"
"$bin/shoal" run configs/cartpole-apex.yaml --set run.name="$run" --set store.uri=file://runs
echo
echo "shoal demo: shoal eval $run --episodes 100"
"$bin/shoal" eval "$run" --store file://runs --episodes 100
