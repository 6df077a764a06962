#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# benchmarks/learning.sh — `make bench BENCH=learning`: every config a test or the README
# relies on to learn, trained from several seeds on both OpenBLAS kernel sets, to show it
# learns on every seed and machine and not on one lucky trajectory.
#
# Each case is one config as its test runs it (the same program, overrides and step
# budget). Per case: how many of the runs reached the bar, the median and worst env steps
# and wall time to reach it, and the median greedy return at the end (`shoal eval`, 100
# episodes on other seeds, for distributed runs; the trainer's final evaluation for the
# synchronous ones). BENCH lines: the solved fraction (goal 1.0) and, where one is
# published, the median steps to solve against the reference's (ratio = reference /
# shoal: > 1 means fewer steps):
#   CartPole-v1 DQN: CleanRL's dqn.py restated on torch 1.13 and run on one of these
#     machines reached a greedy mean >= 475 over 100 episodes at a median of 240k env
#     steps (210k-280k, 5 seeds; docs/benchmarks.md) — its default budget is 500k;
#   CartPole-v1 PPO: CleanRL's ppo.py budget of 500k steps;
#   Pendulum-v1 PPO: RL Zoo's PPO at 100k steps (−172 ± 104);
#   LunarLander-v3 PPO: RL Zoo's budget of 1M steps for its LunarLander PPO.
#
# Settings (environment variables):
#   LEARNING_SEEDS      default "1 2 3 4 5"
#   LEARNING_CORETYPES  default "native Haswell": native lets OpenBLAS and shoal pick their
#                       kernels for this CPU; Haswell forces OpenBLAS's AVX2 kernels
#                       (OPENBLAS_CORETYPE) and shoal's own AVX2 ones (SHOAL_NN_CONV_PATH=avx2:
#                       nn's conv kernels, and no AVX-512 dense kernels), what a machine
#                       without AVX-512 runs; nn/optim.c's target_clones take their AVX2
#                       clone on both kinds. So this covers both kinds of machine.
#   LEARNING_CASES      default: every case below, by name
#   LEARNING_PEERS      default "cleanrl_dqn cleanrl_ppo sb3_dqn sb3_ppo"; "none" skips them:
#                       the peers run by benchmarks/peers/learning_peers.py in the peers' venv
#                       ($SHOAL_PEERS_VENV, default ~/.cache/shoal-peers; benchmarks/peers/
#                       setup.sh makes it), after shoal's cases, on the env of the shoal
#                       case they pair with and to its bar (greedy mean over 100 episodes;
#                       CartPole-v1 >= 475, LunarLander-v3 >= 200): CleanRL's dqn.py and
#                       ppo.py restated on Gymnasium + torch 2, SB3's DQN and PPO with RL
#                       Zoo's hyperparameters. Only the listed peers that pair with a case in
#                       LEARNING_CASES run. The LunarLander peers (cleanrl_ppo_lunar,
#                       sb3_ppo_lunar: 1M-step budgets, 8-20 minutes a run on a loaded
#                       2-core machine) are not in the default list; run them with
#                         LEARNING_CASES="ppo-lunarlander" LEARNING_PEERS="sb3_ppo_lunar
#                         cleanrl_ppo_lunar" LEARNING_PEER_SEEDS="1 2" bash benchmarks/learning.sh
#                       Without the venv their rows print baseline=none.
#   LEARNING_PEER_SEEDS default "1 2 3"
#   LEARNING_PEER_JOBS  peer runs at once, default 1
#   LEARNING_PEER_BUDGET env steps per peer run for a quick check (default: each peer's own)
#   LEARNING_PEER_EVAL_EVERY  default: each peer's own, the grid shoal's configs for its env
#                       evaluate on (CartPole 20000, LunarLander 65536)
# Peer BENCH lines set each shoal case beside each peer of its family on its env (CartPole
# DQN: Ape-X; CartPole PPO and IMPALA: the on-policy peers; LunarLander PPO: the LunarLander
# PPO peers):
#   BENCH name=learning.<case>.vs_<peer>.steps value=<shoal median env steps to the bar>
#         unit=env_steps baseline=<peer's median> ratio=<peer / shoal: > 1, shoal fewer>
#   BENCH name=learning.<case>.vs_<peer>.seconds  the same for wall seconds (the peers'
#         evaluation time taken out; shoal's includes its own evaluations)
set -uo pipefail
root=${SHOAL_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
build=${SHOAL_BINARY_DIR:-$root/build}
bin=$build/bin
seeds=${LEARNING_SEEDS:-1 2 3 4 5}
coretypes=${LEARNING_CORETYPES:-native Haswell}
work=$(mktemp -d /tmp/shoal-learning.XXXXXX)
trap 'rm -rf "$work"' EXIT
export PATH=$bin:$PATH

# name | program (sync: shoal-train-sync; dist: shoal run) | config | overrides | bar
# (solved: the config's own run.solve_return; best>=X: best greedy evaluation at least X)
# | reference median steps (none: no published figure; @CASE: that case's median in this
# run, ε-greedy Ape-X for NoisyNet's). @BUILD@ in an override is the build folder (the
# NoisyNet case's layer plugin).
cases=(
  "apex-cartpole|dist|cartpole-apex.yaml|run.max_env_steps=600000|solved|240000"
  "apex-noisy-cartpole|dist|cartpole-apex-noisy.yaml|run.max_env_steps=2000000 nn.plugins=@BUILD@/examples/noisy_linear.so|solved|@apex-cartpole"
  "impala-cartpole|dist|cartpole-impala.yaml|run.max_env_steps=1000000|solved|500000"
  "ppo-cartpole-lag8|dist|cartpole-ppo.yaml|replay.max_staleness=8|solved|500000"
  "impala-lstm-novel|dist|cartpole-novel-impala-lstm.yaml||best>=90|none"
  "ppo-pendulum|dist|pendulum-ppo.yaml|run.max_env_steps=400000|best>=-300|100000"
  "sync-ppo-cartpole|sync|cartpole-ppo.yaml||solved|500000"
  "sync-impala-cartpole|sync|cartpole-impala.yaml||solved|500000"
  "sync-ppo-cartpole-sampled|sync|cartpole-ppo.yaml|run.eval_greedy=false|solved|500000"
  "sync-impala-cartpole-sampled|sync|cartpole-impala.yaml|run.eval_greedy=false|solved|500000"
  "sync-ppo-pendulum|sync|pendulum-ppo.yaml||solved|100000"
  "sync-ppo-mountaincar|sync|mountaincar-continuous-ppo.yaml||solved|none"
  "ppo-lunarlander|dist|lunarlander-ppo.yaml||solved|1000000"
)
only=${LEARNING_CASES:-}

num() { # the number after $2 in $1
  printf '%s\n' "$1" | sed -n "s/.*$2 *\(-\{0,1\}[0-9.][0-9.]*\).*/\1/p" | head -1
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
worst() { sort -g | tail -1; }

printf '%-30s %-7s %7s %12s %12s %9s %9s %10s\n' case kernels solved "med steps" "worst steps" \
  "med s" "worst s" "greedy"
benches=()
for c in "${cases[@]}"; do
  IFS='|' read -r name mode cfg sets bar ref <<<"$c"
  if [ -n "$only" ] && ! printf ' %s ' "$only" | grep -q " $name "; then continue; fi
  all_ok=0 all_n=0
  : >"$work/$name.steps" ; : >"$work/$name.secs"
  for ct in $coretypes; do
    ok=0 n=0
    : >"$work/steps" ; : >"$work/secs" ; : >"$work/ret"
    for s in $seeds; do
      n=$((n + 1))
      args=(--set "run.seed=$s")
      for kv in $sets; do args+=(--set "${kv//@BUILD@/$build}"); done
      if [ "$ct" = Haswell ]; then
        export OPENBLAS_CORETYPE=Haswell SHOAL_NN_CONV_PATH=avx2
      else
        unset OPENBLAS_CORETYPE SHOAL_NN_CONV_PATH
      fi
      log=$work/$name.$ct.$s.log
      if [ "$mode" = sync ]; then
        "$bin/shoal-train-sync" "$root/configs/$cfg" "${args[@]}" >"$log" 2>&1
        line=$(tail -1 "$log")
        steps=$(num "$line" "after")
        secs=$(num "$line" "updates,")
        ret=$(num "$line" "; eval")
        best=$ret
        reached=$(printf '%s' "$line" | grep -q ": solved after" && echo 1 || echo 0)
      else
        rm -rf "$work/store"
        shoal run "$root/configs/$cfg" --store "file://$work/store" --no-tensorboard \
          --set "run.name=r$s" "${args[@]}" >"$log" 2>&1
        line=$(grep '^shoal: run' "$log" | tail -1)
        secs=$(num "$line" "after")
        steps=$(num "$line" "training):")  # "after W s (T s of it training): N env steps"
        best=$(num "$line" "(best")
        reached=$(printf '%s' "$line" | grep -q " solved after " && echo 1 || echo 0)
        ret=$(shoal eval "r$s" --store "file://$work/store" --episodes 100 2>&1 | tail -1)
        ret=$(num "$ret" ": return")
      fi
      case $bar in
        best\>=*) reached=$(awk -v b="${best:-nan}" -v t="${bar#best>=}" 'BEGIN {print (b + 0 == b && b >= t) ? 1 : 0}') ;;
      esac
      if [ "$reached" = 1 ]; then
        ok=$((ok + 1))
        echo "$steps" >>"$work/steps"
        echo "$steps" >>"$work/$name.steps"
        echo "$secs" >>"$work/secs"
        echo "$secs" >>"$work/$name.secs"
      else
        echo "  $name $ct seed $s: not reached: $line" >&2
      fi
      echo "${ret:-nan}" >>"$work/ret"
    done
    unset OPENBLAS_CORETYPE SHOAL_NN_CONV_PATH
    printf '%-30s %-7s %7s %12s %12s %9s %9s %10s\n' "$name" "$ct" "$ok/$n" \
      "$(median <"$work/steps")" "$(worst <"$work/steps")" "$(median <"$work/secs")" \
      "$(worst <"$work/secs")" "$(median <"$work/ret")"
    all_ok=$((all_ok + ok)) all_n=$((all_n + n))
  done
  frac=$(awk -v a=$all_ok -v b=$all_n 'BEGIN {printf "%.2f", b ? a / b : 0}')
  benches+=("BENCH name=learning.$name.solved value=$frac unit=fraction baseline=none ratio=none")
  med=$(median <"$work/$name.steps")
  # @CASE: the baseline is that case's median in this run (when it ran and solved)
  if [ "${ref#@}" != "$ref" ]; then
    base=$work/${ref#@}.steps
    ref=none
    [ -s "$base" ] && ref=$(median <"$base")
  fi
  if [ "$ref" != none ] && [ "$med" != nan ]; then
    ratio=$(awk -v r="$ref" -v m="$med" 'BEGIN {printf "%.2f", r / m}')
    benches+=("BENCH name=learning.$name.median_steps value=$med unit=env_steps baseline=$ref ratio=$ratio")
  else
    benches+=("BENCH name=learning.$name.median_steps value=$med unit=env_steps baseline=none ratio=none")
  fi
done
echo "(distributed cases run 2 actors beside the learner on this machine: their steps"
echo " include unrolls dropped as stale, and their wall times depend on its load)"

# The peers, in the same run, and each shoal case beside those of its family.
peers=${LEARNING_PEERS-cleanrl_dqn cleanrl_ppo sb3_dqn sb3_ppo}
venv=${SHOAL_PEERS_VENV:-$HOME/.cache/shoal-peers}
pairs=(
  "apex-cartpole|cleanrl_dqn sb3_dqn"
  "impala-cartpole|cleanrl_ppo sb3_ppo"
  "ppo-cartpole-lag8|cleanrl_ppo sb3_ppo"
  "sync-ppo-cartpole|cleanrl_ppo sb3_ppo"
  "sync-impala-cartpole|cleanrl_ppo sb3_ppo"
  "ppo-lunarlander|cleanrl_ppo_lunar sb3_ppo_lunar"
)
# only the listed peers some case that ran pairs with (a LunarLander peer costs minutes
# that a CartPole-only run has no use for); a name no pair knows goes through, for
# learning_peers.py to refuse
why="" paired=0 wanted=" " known=" "
for pr in "${pairs[@]}"; do
  known="$known${pr#*|} "
  [ -f "$work/${pr%%|*}.steps" ] || continue
  paired=1
  wanted="$wanted${pr#*|} "
done
run_peers=""
for p in $peers; do
  if [[ $wanted == *" $p "* || $known != *" $p "* ]]; then run_peers="$run_peers $p"; fi
done
run_peers=${run_peers# }
if [ -z "$peers" ] || [ "$peers" = none ]; then
  why="LEARNING_PEERS=none"
elif [ $paired = 0 ]; then
  why="no case of theirs in LEARNING_CASES"
elif [ -z "$run_peers" ]; then
  why="none of LEARNING_PEERS pairs with a case in LEARNING_CASES"
elif [ ! -x "$venv/bin/python" ]; then
  why="no peers venv at $venv (benchmarks/peers/setup.sh makes it)"
else
  echo "peers (benchmarks/peers/learning_peers.py, each on its env to its bar):"
  # shellcheck disable=SC2086
  PYTHONWARNINGS=ignore nice "$venv/bin/python" "$root/benchmarks/peers/learning_peers.py" \
    --peers "$run_peers" --seeds "${LEARNING_PEER_SEEDS:-1 2 3}" >"$work/peers.out" 2>&1
  rc=$?
  grep -v '^PEER ' "$work/peers.out"
  [ $rc = 0 ] || why="learning_peers.py failed (exit $rc)"
fi
[ -z "$why" ] || echo "peers: none run: $why"
peer_val() { # peer key -> the value from its PEER line, or nothing
  [ -f "$work/peers.out" ] || return 0
  sed -n "s/^PEER name=$1 .*[ ]$2=\([^ ]*\).*/\1/p" "$work/peers.out" | head -1
}
for pr in "${pairs[@]}"; do
  IFS='|' read -r name fam <<<"$pr"
  [ -f "$work/$name.steps" ] || continue
  for peer in $fam; do
    for what in steps:med_steps:env_steps secs:med_s:s; do
      IFS=: read -r file key unit <<<"$what"
      label=$([ "$file" = steps ] && echo steps || echo seconds)
      mine=$(median <"$work/$name.$file")
      theirs=$(peer_val "$peer" "$key")
      if [ -n "$theirs" ] && [ "$theirs" != nan ] && [ "$mine" != nan ]; then
        ratio=$(awk -v p="$theirs" -v m="$mine" 'BEGIN {printf "%.2f", p / m}')
        benches+=("BENCH name=learning.$name.vs_$peer.$label value=$mine unit=$unit baseline=$theirs ratio=$ratio")
      else
        [ -n "$why" ] || why="$peer: not in LEARNING_PEERS, or reached the bar on no seed"
        benches+=("BENCH name=learning.$name.vs_$peer.$label value=$mine unit=$unit baseline=none ratio=none")
      fi
    done
  done
done
[ -z "$why" ] || [ $paired = 0 ] || echo "(peer rows with baseline=none: $why)"
printf '%s\n' "${benches[@]}"
