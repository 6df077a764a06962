/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shoal-onpolicy-learner: the distributed IMPALA and PPO (APPO) learner. Serves
 * shoal.v1.Learner over gRPC, queues the unrolls actors push, trains, publishes
 * parameters after every update, evaluates the policy, writes snapshots and metrics
 * through the store, and prints the same JSON lines as the Ape-X learner for
 * `shoal run`.
 *
 *   shoal-onpolicy-learner --config RESOLVED.yaml --run RUN [--resume] [--set key=value ...]
 *
 * The first stdout line is {"event":"listening","port":P}; the last {"event":"done",...}.
 * SIGINT/SIGTERM: a final snapshot, the store flushed, exit 0. --resume continues from
 * the run's latest snapshot. (learner/runtime.h, learner/onpolicy.c)
 */
#include "learner/learners.h"

int main(int argc, char **argv) { return lrt_main(argc, argv, &onpolicy_learner); }
