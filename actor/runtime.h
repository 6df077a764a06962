/* SPDX-License-Identifier: Apache-2.0 */
/*
 * actor/runtime.h — the one actor runtime: everything an actor process does that is not
 * its algorithm. It reads the program's arguments, loads and checks the run's config,
 * makes the vector env, connects to the learner (a full send queue blocks the actor, in
 * short waits so a signal is seen), waits for the first parameters, then steps the env
 * with the algorithm's actions, pushes each batch the algorithm hands back, pulls newer
 * parameters every actor.pull_steps, and on SIGINT/SIGTERM flushes and reports what
 * became of its batches. The algorithm (actor/apex.c: Ape-X's ε-greedy DQN with initial
 * priorities; actor/onpolicy.c: IMPALA and PPO unrolls) is the small table below.
 *
 *   return actor_main(argc, argv, &apex_actor);   // an actor program's whole main
 *
 * The command line: PROGRAM --config RESOLVED.yaml --run RUN --index I --learner
 * HOST:PORT [--set k=v ...] (--help: the usage on stdout).
 *
 * Seeds: copy j of actor i's vector env starts from run.seed·1e6 + i·B + j; each
 * algorithm seeds its own RNG from run.seed and i.
 *
 * stderr: "PROGRAM I: what: message" for a fatal error (exit 1, or RUN_EXIT_FATAL of
 * run/run.h for one no restart cures: the config, an env it cannot make or play; bad
 * arguments exit 2);
 * after a stop, one line saying how it stopped and what became of the batches still
 * held, then the counters (tests/faults read them); under a supervisor (SHOAL_SUPERVISED=1,
 * cli/supervise.h: SIGINT is then left to the supervisor) only when a batch was left
 * undelivered:
 *   PROGRAM I: pushed P batches, delivered D, resent duplicates R, reconnects C, rotations T
 */
#ifndef SHOAL_ACTOR_RUNTIME_H
#define SHOAL_ACTOR_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "envs/envs.h"
#include "rpc/rpc.h"

/* What the runtime gives an algorithm's create; all borrowed for the runtime's life. */
typedef struct actor_setup {
  const config *cfg;   /* resolved and checked by the algorithm's schema and check */
  const env_spec *env; /* the spaces of the vector env the runtime steps */
  const char *run_id;
  int index;     /* this actor, 0 <= index < actors */
  int actors;    /* actors in the run */
  int num_envs;  /* B: env copies stepped as one vector env (env.num_envs) */
  uint64_t seed; /* run.seed */
} actor_setup;

/* An algorithm: an actor's state behind void *a, made by create. Every function but
 * create and destroy returns 0 or a negative SHOAL_E... code with err set; a failure
 * stops the actor. */
typedef struct actor_algo {
  const char *prog; /* the program's name, at the start of its messages: "shoal-actor" */
  const cfg_key *(*schema)(int *n);
  /* Checks what the schema cannot (choice keys). */
  int (*check)(const config *cfg, shoal_error *err);
  /* What actor.pull_steps counts: pushed batches when true, else vector steps. */
  bool pull_per_batch;

  /* Builds the network and buffers for setup (sized once: acting allocates nothing).
   * *out gets the state; err's message names what failed ("network: ..."). */
  int (*create)(const actor_setup *setup, void **out, shoal_error *err);
  /* Takes published parameters: n floats of blob, borrowed for the call. A refusal
   * (SHOAL_EINVAL, parameters of another shape) leaves the old ones in place. */
  int (*load_params)(void *a, const float *blob, size_t n, shoal_error *err);
  /* Chooses the B copies' actions for obs (B observations in the env's dtype, borrowed);
   * *actions points into a's buffer (int32, or B x act.size floats for a Box), valid
   * until the next call. */
  int (*act)(void *a, const void *obs, const void **actions, shoal_error *err);
  /* Records the step those actions took from obs: out holds the next observations,
   * rewards, ends and (where an episode ended) final observations. *batch gets a
   * finished batch to push (a's, valid until the next call; the runtime sets its
   * policy_version) or NULL. */
  int (*observe)(void *a, const void *obs, const env_vec_out *out, rpc_batch **batch,
                 shoal_error *err);
  void (*destroy)(void *a); /* a may be NULL */
} actor_algo;

/* Runs an actor program to its end: arguments, config, env, network, learner, the loop,
 * the stop. Returns the exit status: 0 after a stop by SIGINT/SIGTERM, 1 after a fatal
 * error (printed as "prog I: what: message"), RUN_EXIT_FATAL after one no restart cures
 * (the config, the env), 2 for bad arguments (usage printed).
 * Installs handlers for SIGINT and SIGTERM: one runtime per process. */
int actor_main(int argc, char **argv, const actor_algo *algo);

/* ---- for algorithms ---- */

/* Gives b the columns of spec in its order (name, dtype, shape; names point where
 * spec's do), with no data yet. Can't fail. */
void actor_batch_columns(rpc_batch *b, const rpc_spec *spec);

/* Puts "what: " before err's message (the code's name when it has none) and returns
 * rc, so that `return actor_fail(err, rc, "network")` reports where a create failed. */
int actor_fail(shoal_error *err, int rc, const char *what);

#endif
