/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/targets.h — the objects some fuzz targets decode into, defined once for the
 * target and for make_seeds.c, whose seeds must be encodings of exactly these (a model of
 * another shape would be refused on its first byte and fuzz nothing).
 */
#ifndef SHOAL_TESTS_FUZZ_TARGETS_H
#define SHOAL_TESTS_FUZZ_TARGETS_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "algos/agent.h"
#include "algos/algos.h"
#include "replay/replay.h"

/* fuzz_learner_state.c: a DQN learner on 3 inputs, 2 actions, one hidden layer of 4. */
static inline dqn_config fuzz_dqn_config(void) {
  dqn_config dc = dqn_defaults();
  dc.obs_c = 3, dc.obs_h = 1, dc.obs_w = 1;
  dc.num_actions = 2;
  dc.hidden[0] = 4, dc.hidden[1] = 0;
  dc.max_batch = 4;
  return dc;
}

/* fuzz_replay_load.c: 8 slots of 2 streams, obs (2) float and an int64 action;
 * prioritized with a frame stack of 2, or uniform without. */
static inline replay_config fuzz_replay_config(bool prioritized) {
  replay_config c = {.kind = prioritized ? REPLAY_PRIORITIZED : REPLAY_UNIFORM,
                     .capacity = 8,
                     .streams = 2,
                     .ncols = 2,
                     .obs_column = "obs",
                     .frame_stack = prioritized ? 2 : 1,
                     .alpha = 0.6,
                     .eps = 1e-6,
                     .writer_slack = 0};
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_F32, .ndim = 1, .shape = {2}};
  c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I64};
  return c;
}

/* fuzz_op_snapshot.c: a PPO or IMPALA learner on CartPole's spaces (MLP 8), norm_obs,
 * unrolls of 4. */
static inline void fuzz_op_config(bool impala, op_spec *s, op_agent_config *c) {
  memset(s, 0, sizeof *s);
  s->T = 4, s->num_envs = 1, s->learn_B = 1;
  snprintf(s->env_id, sizeof s->env_id, "CartPole-v1");
  s->obs_ndim = 1, s->obs_shape[0] = 4, s->obs_n = 4, s->obs_bytes = 16;
  s->A = 2;
  s->norm_obs = true;
  s->gamma = 0.99f;
  s->impala = impala;
  memset(c, 0, sizeof *c);
  c->ac = ac_defaults();
  c->ac.obs_c = 4, c->ac.obs_h = 1, c->ac.obs_w = 1, c->ac.num_actions = 2;
  c->ac.hidden[0] = 8, c->ac.hidden[1] = 0;
  c->ppo = ppo_defaults();
  c->ppo.T = 4;
  c->impala = impala_defaults();
  c->impala.T = 4;
}

#endif
