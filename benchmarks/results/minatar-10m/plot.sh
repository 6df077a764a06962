#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# benchmarks/results/minatar-10m/plot.sh GAME SEED... — the curves of this folder: each
# run's return100 rows (GAME-ALGO-seedS.csv; ALGO from the environment, default impala) go
# into a scratch file store under a run recorded with `shoal init`, and `shoal plot` draws
# the seeds of a game together (GAME-ALGO.png). The runs themselves:
#   IMPALA: build/bin/shoal-train-sync configs/minatar-GAME-impala.yaml
#     --set env.id=MinAtar/<Game>-v0 --set run.max_env_steps=10000000 --set run.seed=S
#     (it keeps nothing in a store: the rows are cut from its progress lines)
#   ALGO=apex: build/bin/shoal run configs/minatar-GAME-apex.yaml --set env.id=MinAtar/<Game>-v0
#     --set run.max_env_steps=10000000 --set run.seed=S (the rows: its store's return100
#     metric, the mean over its actors' last 100 episodes, ε-greedy; with
#     --set run.solve_return=100000, a bar no run reaches, it also evaluates the greedy
#     policy every run.eval_every_s: GAME-apex-seedS-eval.csv, drawn as GAME-apex-eval.png)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${SHOAL_BINARY_DIR:-$root/build}/bin
g=$1; shift
algo=${ALGO:-impala}
case $algo in
  impala) what="IMPALA (synchronous)" ;;
  apex) what="Ape-X DQN (shoal run, 2 actors, eps-greedy)" ;;
  *) echo "plot.sh: ALGO is impala or apex, not '$algo'" >&2; exit 2 ;;
esac
st=$(mktemp -d); trap 'rm -rf "$st"' EXIT
runs=() evals=()
for s in "$@"; do
  run=minatar-$g-$algo-seed$s
  "$bin/shoal" init "$root/configs/minatar-$g-$algo.yaml" --set "run.name=$run" \
    --set "store.uri=file://$st" --set "run.seed=$s" >/dev/null
  ev="$here/$g-$algo-seed$s-eval.csv" # Ape-X's greedy evaluations during training, if run
  { printf '# shoal-metrics 1\nstep,time,name,value\n'
    # the wall time of a row is not kept in the csv: one second per 10k steps stands in
    awk -F, 'NR > 1 {printf "%s,%.3f,return100,%s\n", $1, 1.7e9 + $1 / 1e4, $2}' \
      "$here/$g-$algo-seed$s.csv"
    [ ! -f "$ev" ] || awk -F, 'NR > 1 {printf "%s,%.3f,eval_return,%s\n", $1, 1.7e9 + $1 / 1e4, $2}' "$ev"
  } >"$st/$run/metrics.csv"
  runs+=("$run")
  [ ! -f "$ev" ] || evals+=("$run")
done
"$bin/shoal" plot "${runs[@]}" --store "file://$st" --metric return100 \
  --out "$here/$g-$algo.png" --title "MinAtar $g-v0, $what, 10M frames: return100"
if [ ${#evals[@]} -gt 0 ]; then
  "$bin/shoal" plot "${evals[@]}" --store "file://$st" --metric eval_return \
    --out "$here/$g-$algo-eval.png" \
    --title "MinAtar $g-v0, Ape-X DQN, 10M frames: greedy evaluation (32 episodes)"
fi
