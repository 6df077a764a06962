/* SPDX-License-Identifier: Apache-2.0 */
/*
 * actor/apex.c — the Ape-X actor's algorithm for the actor runtime (actor/runtime.h).
 * It acts ε-greedily with its local DQN, with Ape-X's per-actor ε_i (Horgan et al.
 * 2018: ε_i = ε^(1 + α·i/(N−1))), keeps each env's steps in the n-step collector
 * (actor/collect.h) until their initial priority is known, and every actor.send_steps
 * vector steps hands over one batch in the columns run/run.h names (APEX_*): env by
 * env, that env's steps in time order, then one tail row per step that ended an
 * episode, holding its final observation.
 */
#include <stdlib.h>
#include <string.h>

#include "actor/actors.h"
#include "actor/collect.h"
#include "run/run.h"

typedef struct apex {
  dqn *q;
  collector *col;
  shoal_rng rng;
  float eps; /* this actor's ε_i */
  int B, A;  /* env copies, actions */
  size_t F;  /* elements of one observation */
  bool u8;   /* uint8 observations (MinAtar): the network and collector take floats */
  int send_steps;
  int64_t steps; /* vector steps taken */
  /* One vector step's scratch, B rows each. */
  float *obs_f;   /* (B, F) the observations acted on, as floats */
  float *fin_f;   /* (B, F) final observations of ended episodes, as floats */
  float *trunc_f; /* (B, F) those of truncated ones, packed, for their values */
  int *trunc_rows;
  float *q_sa, *max_q; /* Q(s, a) and max_a Q(s, ·) at acting time */
  float *fin_mq;       /* max_a Q(final obs) where truncated */
  int32_t *act;
  /* The outgoing batch, rows sized for two flushes' worth of steps and their tails. */
  int cap_rows;
  void *o_obs;
  int32_t *o_action, *o_env;
  float *o_reward, *o_prio;
  uint8_t *o_term, *o_trunc, *o_tail;
  size_t item_bytes[APEX_NCOLS];
  /* Image-frame stacks travel as their distinct frames (rpc.h): rows env by env in time
   * order, so a row's stack is its predecessor's moved on by one frame. */
  bool dedup;
  size_t fb, depth; /* bytes of one frame, frames in a stack */
  uint8_t *o_frames;
  uint32_t *o_index;
  rpc_batch b;
} apex;

static void apex_destroy(void *self) {
  apex *x = self;
  if (!x) return;
  collector_destroy(x->col);
  dqn_destroy(x->q);
  free(x->obs_f), free(x->fin_f), free(x->trunc_f), free(x->trunc_rows), free(x->q_sa);
  free(x->max_q), free(x->fin_mq), free(x->act);
  free(x->o_obs), free(x->o_action), free(x->o_env), free(x->o_reward), free(x->o_prio);
  free(x->o_term), free(x->o_trunc), free(x->o_tail), free(x->o_frames), free(x->o_index);
  free(x);
}

static int apex_create(const actor_setup *su, void **out, shoal_error *err) {
  const env_spec *sp = su->env;
  int rc = apex_env_check(sp, err);
  if (rc) return rc;
  apex *x = calloc(1, sizeof *x);
  if (!x) return shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
  x->B = su->num_envs;
  x->A = sp->act.n;
  x->F = (size_t)sp->obs.size;
  x->u8 = sp->obs.dtype == ENV_UINT8;
  x->send_steps = (int)config_int(su->cfg, "actor.send_steps");
  x->eps = dqn_actor_epsilon(su->index, su->actors, (float)config_float(su->cfg, "actor.eps"),
                             (float)config_float(su->cfg, "actor.eps_alpha"));
  shoal_rng_seed(&x->rng, su->seed * 1000003 + (uint64_t)su->index);
  nn_set_threads(1); /* one process per core: actors scale by processes */

  dqn_config dc = apex_dqn_config(su->cfg, sp->obs.ndim, sp->obs.shape, x->A);
  dc.max_batch = x->B;
  rc = 0;
  if (!(x->q = dqn_create(&dc, NN_CPU, false, err))) {
    rc = actor_fail(err, err->code ? err->code : SHOAL_ENOMEM, "network");
    goto fail;
  }
  dqn_set_explore(x->q, su->seed * 1000003 + (uint64_t)su->index + 7919);
  x->col =
      collector_create(x->B, (int)x->F, dc.n_step, dc.gamma, x->send_steps + dc.n_step + 2, err);
  if (!x->col) {
    rc = actor_fail(err, err->code ? err->code : SHOAL_ENOMEM, "collector");
    goto fail;
  }
  size_t B = (size_t)x->B, F = x->F, ob = env_space_bytes(&sp->obs);
  x->obs_f = malloc(B * F * sizeof(float));
  x->fin_f = malloc(B * F * sizeof(float));
  x->trunc_f = malloc(B * F * sizeof(float));
  x->trunc_rows = malloc(B * sizeof(int));
  x->q_sa = malloc(B * sizeof(float));
  x->max_q = malloc(B * sizeof(float));
  x->fin_mq = calloc(B, sizeof(float));
  x->act = malloc(B * sizeof(int32_t));
  x->cap_rows = 2 * x->B * (x->send_steps + dc.n_step + 2);
  size_t R = (size_t)x->cap_rows;
  x->o_obs = malloc(R * ob);
  x->o_action = malloc(R * 4);
  x->o_env = malloc(R * 4);
  x->o_reward = malloc(R * 4);
  x->o_prio = malloc(R * 4);
  x->o_term = malloc(R);
  x->o_trunc = malloc(R);
  x->o_tail = malloc(R);
  if (!x->obs_f || !x->fin_f || !x->trunc_f || !x->trunc_rows || !x->q_sa || !x->max_q ||
      !x->fin_mq || !x->act || !x->o_obs || !x->o_action || !x->o_env || !x->o_reward ||
      !x->o_prio || !x->o_term || !x->o_trunc || !x->o_tail) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
    goto fail;
  }
  rpc_spec spec;
  apex_rpc_spec(sp, su->run_id, (uint32_t)x->cap_rows, &spec);
  actor_batch_columns(&x->b, &spec);
  void *data[APEX_NCOLS] = {x->o_obs,   x->o_action, x->o_reward, x->o_term,
                            x->o_trunc, x->o_prio,   x->o_env,    x->o_tail};
  for (int c = 0; c < APEX_NCOLS; c++) {
    x->b.cols[c].data = data[c];
    x->item_bytes[c] = rpc_column_item_bytes(&spec.cols[c]);
  }
  if ((x->dedup = spec.cols[APEX_OBS].frame_stack)) {
    x->depth = (size_t)sp->obs.shape[0];
    x->fb = (size_t)sp->obs.shape[1] * (size_t)sp->obs.shape[2];
    x->o_frames = malloc(R * ob);
    x->o_index = malloc(R * x->depth * sizeof *x->o_index);
    if (!x->o_frames || !x->o_index) {
      rc = shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
      goto fail;
    }
    x->b.cols[APEX_OBS].data = x->o_frames;
    x->b.cols[APEX_OBS].frame_index = x->o_index;
  }
  *out = x;
  return 0;
fail:
  apex_destroy(x);
  return rc;
}

static int apex_load_params(void *self, const float *blob, size_t n, shoal_error *err) {
  apex *x = self;
  return dqn_load_params(x->q, blob, n, err);
}

static int apex_act(void *self, const void *obs, const void **actions, shoal_error *err) {
  apex *x = self;
  const float *in = obs;
  if (x->u8) {
    for (size_t i = 0; i < (size_t)x->B * x->F; i++) x->obs_f[i] = ((const uint8_t *)obs)[i];
    in = x->obs_f;
  }
  const float *qv;
  int rc = dqn_act(x->q, in, x->B, x->eps, &x->rng, x->act, &qv, err);
  if (rc) return actor_fail(err, rc, "act");
  for (int i = 0; i < x->B; i++) {
    const float *row = qv + (size_t)i * x->A;
    float m = row[0];
    for (int k = 1; k < x->A; k++) m = row[k] > m ? row[k] : m;
    x->q_sa[i] = row[x->act[i]];
    x->max_q[i] = m;
  }
  *actions = x->act;
  return 0;
}

/* Row `row` of the batch's obs column from a float observation. */
static void put_obs(apex *x, int row, const float *src) {
  if (x->u8)
    for (size_t j = 0; j < x->F; j++)
      ((uint8_t *)x->o_obs)[(size_t)row * x->F + j] = (uint8_t)src[j];
  else
    memcpy((float *)x->o_obs + (size_t)row * x->F, src, x->F * sizeof(float));
}

/* Lays out the collector's steps as the batch: rows env by env, each env's steps then
 * its tail rows (one per ended step, holding the final observation). */
static void build_batch(apex *x, const collector_batch *cb) {
  int row = 0, step = 0, fin = 0;
  for (int e = 0; e < x->B; e++) {
    int ended = 0;
    for (; step < cb->n && cb->env[step] == e; row++, step++) {
      put_obs(x, row, cb->obs + (size_t)step * x->F);
      x->o_action[row] = cb->action[step];
      x->o_reward[row] = cb->reward[step];
      x->o_term[row] = cb->terminated[step];
      x->o_trunc[row] = cb->truncated[step];
      x->o_prio[row] = cb->priority[step];
      x->o_env[row] = e;
      x->o_tail[row] = 0;
      ended += cb->terminated[step] || cb->truncated[step];
    }
    for (int k = 0; k < ended; k++, fin++, row++) {
      put_obs(x, row, cb->final_obs + (size_t)fin * x->F);
      x->o_action[row] = 0;
      x->o_reward[row] = 0;
      x->o_term[row] = x->o_trunc[row] = 0;
      x->o_prio[row] = 0;
      x->o_env[row] = e;
      x->o_tail[row] = 1;
    }
  }
  x->b.n = (uint32_t)row;
  for (int c = 0; c < APEX_NCOLS; c++) x->b.cols[c].bytes = (size_t)row * x->item_bytes[c];
  if (x->dedup) {
    rpc_column *c = &x->b.cols[APEX_OBS];
    c->frames = rpc_frames_dedup(x->o_obs, (size_t)row * x->depth, x->fb, x->depth, x->o_frames,
                                 x->o_index);
    c->bytes = (size_t)c->frames * x->fb;
  }
}

static int apex_observe(void *self, const void *obs, const env_vec_out *out, rpc_batch **batch,
                        shoal_error *err) {
  apex *x = self;
  const size_t F = x->F;
  const uint8_t *term = out->terminated, *trunc = out->truncated;
  /* A truncated episode bootstraps from its final observation: value it now. */
  int nt = 0;
  for (int i = 0; i < x->B; i++) {
    if (term[i] || trunc[i])
      for (size_t j = 0; j < F; j++)
        x->fin_f[(size_t)i * F + j] = x->u8 ? ((const uint8_t *)out->final_obs)[(size_t)i * F + j]
                                            : ((const float *)out->final_obs)[(size_t)i * F + j];
    if (trunc[i] && !term[i]) {
      memcpy(x->trunc_f + (size_t)nt * F, x->fin_f + (size_t)i * F, F * sizeof(float));
      x->trunc_rows[nt++] = i;
    }
  }
  if (nt) {
    const float *fq;
    int rc = dqn_q(x->q, x->trunc_f, nt, &fq, err);
    if (rc) return actor_fail(err, rc, "value of final observations");
    for (int r = 0; r < nt; r++) {
      const float *row = fq + (size_t)r * x->A;
      float m = row[0];
      for (int k = 1; k < x->A; k++) m = row[k] > m ? row[k] : m;
      x->fin_mq[x->trunc_rows[r]] = m;
    }
  }
  /* The collector keeps float rows; with uint8 observations obs_f holds this step's. */
  int rc = collector_add(x->col, x->u8 ? x->obs_f : obs, x->act, x->q_sa, x->max_q, out->reward,
                         term, trunc, x->fin_f, x->fin_mq, err);
  if (rc) return actor_fail(err, rc, "collector");
  *batch = NULL;
  if (++x->steps % x->send_steps == 0) {
    collector_batch cb;
    collector_flush(x->col, &cb);
    if (cb.n > 0) {
      build_batch(x, &cb);
      *batch = &x->b;
    }
  }
  return 0;
}

const actor_algo apex_actor = {
    .prog = "shoal-actor",
    .schema = apex_schema,
    .check = apex_check,
    .pull_per_batch = false,
    .create = apex_create,
    .load_params = apex_load_params,
    .act = apex_act,
    .observe = apex_observe,
    .destroy = apex_destroy,
};
