/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shoal-learner: the Ape-X learner. Serves shoal.v1.Learner over gRPC, inserts what
 * actors push into prioritized replay, trains the DQN, publishes parameters, writes
 * snapshots, the replay log and metrics through the store, evaluates the greedy policy,
 * and prints one JSON progress line a second on stdout for `shoal run`.
 *
 *   shoal-learner --config RESOLVED.yaml --run RUN [--resume] [--set key=value ...]
 *
 * The first stdout line is {"event":"listening","port":P}; the last is
 * {"event":"done",...}. SIGINT/SIGTERM stop it cleanly: a final snapshot, the replay
 * log flushed, the store flushed; exit status 0. (learner/runtime.h, learner/apex.c)
 */
#include "learner/learners.h"

int main(int argc, char **argv) { return lrt_main(argc, argv, &apex_learner); }
