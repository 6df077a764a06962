/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shoal-actor: one Ape-X actor. Steps a vector env with its local copy of the policy
 * (ε-greedy with Ape-X's per-actor ε_i), computes initial priorities for its n-step
 * transitions, streams them to the learner, and pulls fresh parameters every
 * actor.pull_steps vector steps. (actor/runtime.h, actor/apex.c)
 *
 *   shoal-actor --config RESOLVED.yaml --run RUN --index I --learner HOST:PORT [--set k=v ...]
 *
 * SIGINT/SIGTERM: push what is ready, flush, report, exit 0.
 */
#include "actor/actors.h"

int main(int argc, char **argv) { return actor_main(argc, argv, &apex_actor); }
