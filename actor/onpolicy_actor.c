/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shoal-onpolicy-actor: one IMPALA / PPO (APPO) actor. Steps a vector env of
 * env.num_envs copies with its local copy of the actor-critic policy, and every T steps
 * pushes one unroll per copy with the behaviour log-probabilities and the one policy
 * version that acted, then pulls newer parameters every actor.pull_steps unrolls.
 * (actor/runtime.h, actor/onpolicy.c)
 *
 *   shoal-onpolicy-actor --config RESOLVED.yaml --run RUN --index I --learner HOST:PORT
 *                        [--set key=value ...]
 *
 * SIGINT/SIGTERM: the unroll in progress is dropped, queued ones flushed, exit 0.
 */
#include "actor/actors.h"

int main(int argc, char **argv) { return actor_main(argc, argv, &onpolicy_actor); }
