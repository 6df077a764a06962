#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# benchmarks/pbt.sh — `make bench BENCH=pbt`: population-based training (`shoal pbt`)
# against a random search of the same size over the same ranges, at the same env frames,
# on one MinAtar game with IMPALA (configs/minatar-breakout-impala.yaml), for several
# seeds. Both run as store jobs with one local worker on this machine's cores, one
# member or trial at a time (a `shoal run` of 2 actors and a learner uses them all).
#
# Settings (environment variables):
#   PBT_GAME        MinAtar game, default breakout (configs/minatar-<game>-impala.yaml)
#   PBT_POPULATION  members = random-search trials, default 4
#   PBT_ROUNDS      ready intervals per member, default 5
#   PBT_READY       env steps per interval, default 200000 (1M frames a member: MinAtar
#                   has no frame skip)
#   PBT_SEEDS       default "1 2 3": each seed draws both searches' starting values
#                   and seeds their runs
#
# Explored: impala.lr in [1e-4, 3e-3] and impala.entropy_coef in [1e-3, 5e-2], both
# log-uniform; PBT perturbs by x0.8 / x1.25 (resampling with probability 0.25) and the
# bottom 25% copies the top 25% at each ready time. Score: the mean return of the last
# 100 training episodes at each member's (trial's) end. Printed per seed: the best and
# the median member of each search; the BENCH lines take the median over seeds of the
# best member (PBT against the search: ratio > 1 when PBT's is higher), and the cost of
# an exploit (seconds and bytes of the snapshot copied through the store).
set -uo pipefail
root=${SHOAL_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${SHOAL_BINARY_DIR:-$root/build}/bin
game=${PBT_GAME:-breakout}
pop=${PBT_POPULATION:-4}
rounds=${PBT_ROUNDS:-5}
ready=${PBT_READY:-200000}
seeds=${PBT_SEEDS:-1 2 3}
base=$root/configs/minatar-$game-impala.yaml
[ -f "$base" ] || { echo "pbt bench: no $base" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/shoal-bench-pbt-XXXXXX")
trap 'rm -rf "$work"' EXIT
store=file://$work/store
total=$((rounds * ready))

params='params:
  impala.lr: {min: 0.0001, max: 0.003, log: true}
  impala.entropy_coef: {min: 0.001, max: 0.05, log: true}'
sets="set:
  run.solve_return: 0
  run.eval_every_steps: 100000000"

# best and median of the scores on stdin (one a line)
stats() { sort -g | awk '{v[NR]=$1} END {if (NR==0) {print "nan nan"; exit}
  m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; print v[NR], m}'; }

echo "PBT against random search: MinAtar $game, IMPALA, $pop members x $total env steps each"
echo "(PBT: $rounds rounds of $ready), seeds: $seeds; scored by return100 at the end"
printf '%-5s %-14s %8s %8s %9s\n' seed search best median wall_s
pbt_best=() rs_best=()
for seed in $seeds; do
  cat >"$work/pbt-$seed.yaml" <<EOF
pbt:
  name: bpbt$seed
  base: $base
  population: $pop
  rounds: $rounds
  ready_steps: $ready
  seed: $seed
$sets
  run.seed: $seed
$params
EOF
  cat >"$work/rs-$seed.yaml" <<EOF
sweep:
  name: brs$seed
  base: $base
  method: random
  trials: $pop
  seed: $seed
  metric: return100
$sets
  run.seed: $seed
  run.max_env_steps: $total
$params
EOF
  t0=$(date +%s.%N)
  "$bin/shoal" pbt "$work/pbt-$seed.yaml" --store "$store" --workers 1 >"$work/pbt-$seed.log" 2>&1 ||
    { echo "pbt bench: shoal pbt failed (seed $seed):" >&2; tail -20 "$work/pbt-$seed.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  "$bin/shoal" sweep "$work/rs-$seed.yaml" --store "$store" --workers 1 >"$work/rs-$seed.log" 2>&1 ||
    { echo "pbt bench: shoal sweep failed (seed $seed):" >&2; tail -20 "$work/rs-$seed.log" >&2; exit 1; }
  t2=$(date +%s.%N)
  # the members' last rounds, and the search's trials, from the reports
  read -r pb pm < <(awk '/^population:/ {on=1; next} on && /^m[0-9][0-9] / {print $3} /^lineage/ {on=0}' \
    "$work/pbt-$seed.log" | stats)
  read -r rb rm < <(awk '$2 ~ /^t[0-9]+$/ && $3 == "done" {print $4}' "$work/rs-$seed.log" | stats)
  printf '%-5s %-14s %8.2f %8.2f %9.0f\n' "$seed" pbt "$pb" "$pm" "$(echo "$t1 - $t0" | bc)"
  printf '%-5s %-14s %8.2f %8.2f %9.0f\n' "$seed" "random search" "$rb" "$rm" "$(echo "$t2 - $t1" | bc)"
  pbt_best+=("$pb") rs_best+=("$rb")
  grep -h "copies member" "$work/pbt-$seed.log" | sed 's/^shoal worker [^:]*: /  /'
done
med() { printf '%s\n' "$@" | stats | awk '{print $2}'; }
pm=$(med "${pbt_best[@]}") rm=$(med "${rs_best[@]}")
ratio=$(awk -v a="$pm" -v b="$rm" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "none"}')
echo "median over seeds of the best member: PBT $pm, random search $rm"
echo "BENCH name=pbt_best_return value=$pm unit=return100 baseline=$rm ratio=$ratio"
# the exploits' cost: "pbt: RUN vN copied to RUN as vM: B bytes in S s"
cat "$work"/pbt-*.log | awk '/ copied to .* bytes in / {n++; b+=$(NF-4); s+=$(NF-1)}
  END {if (n) printf "exploits: %d, %.0f bytes and %.3f s a copy (store get and put, file store)\n", n, b/n, s/n;
       else print "exploits: none"}'
