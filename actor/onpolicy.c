/* SPDX-License-Identifier: Apache-2.0 */
/*
 * actor/onpolicy.c — the IMPALA / PPO (APPO) actor's algorithm for the actor runtime
 * (actor/runtime.h). It acts with its local copy of the actor-critic policy and every
 * T steps hands over one unroll per env copy (run/run.h names the columns, OP_*) with
 * the behaviour log-probabilities; the runtime sends it with the one policy version
 * that acted, and pulls newer parameters every actor.pull_steps unrolls. Parameters
 * change only between unrolls, so an unroll's version is exact. When a stop comes
 * inside an unroll, that unroll is dropped.
 *
 * Observations go out raw; the learner owns the observation normaliser and publishes
 * it with the parameters (env.norm_obs). Rewards are scaled here when env.norm_reward
 * is on (Gymnasium's NormalizeReward, per actor as CleanRL wraps each env copy), and
 * the raw episode returns travel in ep_return for the learner's return100.
 *
 * With an LSTM core (ac.lstm) the actor carries each copy's (h, c) across unrolls and
 * parameter pulls, resets it where an episode begins, and sends the state each unroll
 * started from in the core0 column, from which the learner re-runs the core.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "actor/actors.h"
#include "run/run.h"

typedef struct onpolicy {
  op_spec s;
  op_agent ag;
  op_norm z;       /* the learner's observation normaliser, from the published params */
  op_norm ret_rms; /* NormalizeReward: the discounted return's running variance */
  shoal_rng rng;
  int t;            /* the step within the unroll being filled */
  size_t ab;        /* bytes of one copy's action */
  float *cur_f;     /* (B, obs) the observations acted on, as (normalised) floats */
  void *act;        /* (B) sampled actions: int32, or (B, D) unclipped floats */
  void *env_act;    /* the same clipped to the Box: what the env steps with */
  float *logp;      /* (B) */
  double *ep_ret;   /* (B) the raw return of each copy's episode so far */
  double *disc_ret; /* (B) its discounted return, for NormalizeReward */
  float *disc_f;    /* (B) */
  float *core;      /* (B, S) the LSTM core's (h, c) per copy; S = 2·lstm */
  uint8_t *first;   /* (B) the observation begins an episode (resets the core) */
  /* The unroll: columns item-major, copy i's T (or T+1) rows together. */
  uint8_t *c_obs, *c_fin, *c_act, *c_term, *c_trunc;
  float *c_rew, *c_logp, *c_epret, *c_core0;
  /* Image-frame stacks travel as their distinct frames (rpc.h): frames and index. */
  bool dedup;
  size_t fb, planes; /* bytes of one frame, frames in all of c_obs */
  uint8_t *o_frames;
  uint32_t *o_index;
  rpc_batch b;
} onpolicy;

static void onpolicy_destroy(void *self) {
  onpolicy *o = self;
  if (!o) return;
  op_agent_destroy(&o->ag);
  op_norm_free(&o->z);
  op_norm_free(&o->ret_rms);
  free(o->cur_f), free(o->act), free(o->env_act), free(o->logp), free(o->ep_ret);
  free(o->disc_ret), free(o->disc_f), free(o->core), free(o->first), free(o->c_obs);
  free(o->c_fin), free(o->c_act), free(o->c_term), free(o->c_trunc), free(o->c_rew);
  free(o->c_logp), free(o->c_epret), free(o->c_core0), free(o->o_frames), free(o->o_index);
  free(o);
}

static int onpolicy_create(const actor_setup *su, void **out, shoal_error *err) {
  onpolicy *o = calloc(1, sizeof *o);
  if (!o) return shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
  op_spec *s = &o->s;
  int rc = op_spec_from_config(su->cfg, s, err);
  if (rc) {
    actor_fail(err, rc, "config");
    goto fail;
  }
  nn_set_threads(1); /* one process per core: actors scale by processes */
  if ((rc = op_agent_from_config(su->cfg, s, s->num_envs, false, NN_CPU, &o->ag, err))) {
    actor_fail(err, rc, "network");
    goto fail;
  }
  if ((s->norm_obs && (rc = op_norm_init(&o->z, (int)s->obs_n, err))) ||
      (rc = op_norm_init(&o->ret_rms, 1, err))) {
    actor_fail(err, rc, "normaliser");
    goto fail;
  }
  shoal_rng_seed(&o->rng, su->seed * 1000003 + (uint64_t)su->index * 7 + 1);
  const size_t B = (size_t)s->num_envs, T = (size_t)s->T, ob = s->obs_bytes, F = s->obs_n;
  const size_t S = (size_t)o->ag.S;
  o->ab = s->A > 0 ? sizeof(int32_t) : (size_t)s->D * sizeof(float);
  o->cur_f = malloc(B * F * sizeof(float));
  o->act = malloc(B * o->ab);
  o->env_act = malloc(B * o->ab);
  o->logp = malloc(B * sizeof(float));
  o->ep_ret = calloc(B, sizeof(double));
  o->disc_ret = calloc(B, sizeof(double));
  o->disc_f = malloc(B * sizeof(float));
  o->core = calloc(B * (S ? S : 1), sizeof(float));
  o->first = malloc(B);
  o->c_obs = malloc(B * (T + 1) * ob);
  o->c_fin = calloc(B * T, ob);
  o->c_act = malloc(B * T * o->ab);
  o->c_term = malloc(B * T);
  o->c_trunc = malloc(B * T);
  o->c_rew = malloc(B * T * sizeof(float));
  o->c_logp = malloc(B * T * sizeof(float));
  o->c_epret = malloc(B * T * sizeof(float));
  o->c_core0 = calloc(B * (S ? S : 1), sizeof(float));
  if (!o->cur_f || !o->act || !o->env_act || !o->logp || !o->ep_ret || !o->disc_ret || !o->disc_f ||
      !o->core || !o->first || !o->c_obs || !o->c_fin || !o->c_act || !o->c_term || !o->c_trunc ||
      !o->c_rew || !o->c_logp || !o->c_epret || !o->c_core0) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
    goto fail;
  }
  memset(o->first, 1, B);
  rpc_spec spec;
  op_rpc_spec(s, su->run_id, &spec);
  actor_batch_columns(&o->b, &spec);
  void *data[OP_NCOLS + 1] = {o->c_obs, o->c_act,  o->c_rew,   o->c_term, o->c_trunc,
                              o->c_fin, o->c_logp, o->c_epret, o->c_core0};
  o->b.n = (uint32_t)B;
  for (int c = 0; c < spec.ncols; c++) {
    o->b.cols[c].data = data[c];
    o->b.cols[c].bytes = B * rpc_column_item_bytes(&spec.cols[c]);
  }
  /* Final observations are zero except where an episode ended: they compress to little. */
  o->b.cols[OP_FINAL].codec = RPC_CODEC_LZ4;
  if ((o->dedup = spec.cols[OP_OBS].frame_stack)) {
    o->fb = (size_t)s->obs_shape[1] * (size_t)s->obs_shape[2];
    o->planes = B * (T + 1) * (size_t)s->obs_shape[0];
    o->o_frames = malloc(o->planes * o->fb);
    o->o_index = malloc(o->planes * sizeof *o->o_index);
    if (!o->o_frames || !o->o_index) {
      rc = shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
      goto fail;
    }
    o->b.cols[OP_OBS].data = o->o_frames;
    o->b.cols[OP_OBS].frame_index = o->o_index;
    o->b.cols[OP_OBS].frame_planes = true;
  }
  *out = o;
  return 0;
fail:
  onpolicy_destroy(o);
  return rc;
}

static int onpolicy_load_params(void *self, const float *blob, size_t n, shoal_error *err) {
  onpolicy *o = self;
  return op_params_unpack(&o->ag, &o->s, blob, n, &o->z, err);
}

static int onpolicy_act(void *self, const void *obs, const void **actions, shoal_error *err) {
  onpolicy *o = self;
  const op_spec *s = &o->s;
  const size_t B = (size_t)s->num_envs, T = (size_t)s->T, ob = s->obs_bytes, S = (size_t)o->ag.S;
  if (o->t == 0) {
    memset(o->c_fin, 0, B * T * ob);
    /* The state this unroll starts from, as reset for its first observation. */
    for (size_t i = 0; i < B && S; i++) {
      if (o->first[i])
        memset(o->c_core0 + i * S, 0, S * sizeof(float));
      else
        memcpy(o->c_core0 + i * S, o->core + i * S, S * sizeof(float));
    }
  }
  for (size_t i = 0; i < B; i++)
    memcpy(o->c_obs + (i * (T + 1) + (size_t)o->t) * ob, (const uint8_t *)obs + i * ob, ob);
  op_obs_to_float(s, obs, o->cur_f, B, s->norm_obs ? &o->z : NULL);
  int rc =
      S ? op_agent_act_recurrent(&o->ag, o->cur_f, (int)B, o->core, o->first, &o->rng, false,
                                 o->act, o->env_act, o->logp, err)
        : op_agent_act(&o->ag, o->cur_f, (int)B, &o->rng, false, o->act, o->env_act, o->logp, err);
  if (rc) return actor_fail(err, rc, "act");
  *actions = o->env_act;
  return 0;
}

static int onpolicy_observe(void *self, const void *obs, const env_vec_out *out, rpc_batch **batch,
                            shoal_error *err) {
  (void)obs;
  (void)err;
  onpolicy *o = self;
  const op_spec *s = &o->s;
  const size_t B = (size_t)s->num_envs, T = (size_t)s->T, ob = s->obs_bytes;
  const float *rew = out->reward;
  const uint8_t *term = out->terminated, *trunc = out->truncated;
  for (size_t i = 0; i < B; i++) o->first[i] = term[i] | trunc[i];
  if (s->norm_reward) {
    /* Gymnasium 1.x NormalizeReward: scale by the std of the discounted return. */
    for (size_t i = 0; i < B; i++) {
      o->disc_ret[i] = o->disc_ret[i] * s->gamma * (1 - term[i]) + rew[i];
      o->disc_f[i] = (float)o->disc_ret[i];
    }
    op_norm_update(&o->ret_rms, o->disc_f, B);
  }
  double scale = s->norm_reward ? sqrt(o->ret_rms.var[0] + 1e-8) : 1.0;
  for (size_t i = 0; i < B; i++) {
    size_t k = i * T + (size_t)o->t;
    memcpy(o->c_act + k * o->ab, (uint8_t *)o->act + i * o->ab, o->ab);
    o->c_logp[k] = o->logp[i];
    o->ep_ret[i] += rew[i];
    o->c_rew[k] = s->norm_reward ? (float)fmin(fmax(rew[i] / scale, -10.0), 10.0) : rew[i];
    o->c_term[k] = term[i];
    o->c_trunc[k] = trunc[i];
    o->c_epret[k] = 0;
    if (term[i] || trunc[i]) {
      memcpy(o->c_fin + k * ob, (const uint8_t *)out->final_obs + i * ob, ob);
      o->c_epret[k] = (float)o->ep_ret[i];
      o->ep_ret[i] = 0;
      o->disc_ret[i] = 0;
    }
  }
  *batch = NULL;
  if (++o->t == s->T) {
    /* Row T: the observation the unroll bootstraps from. */
    for (size_t i = 0; i < B; i++)
      memcpy(o->c_obs + (i * (T + 1) + T) * ob, (const uint8_t *)out->obs + i * ob, ob);
    if (o->dedup) {
      /* each new frame once: a step's stack repeats its predecessor's but one frame */
      rpc_column *c = &o->b.cols[OP_OBS];
      c->frames = rpc_frames_dedup(o->c_obs, o->planes, o->fb, (size_t)s->obs_shape[0],
                                   o->o_frames, o->o_index);
      c->bytes = (size_t)c->frames * o->fb;
    }
    o->t = 0;
    *batch = &o->b;
  }
  return 0;
}

const actor_algo onpolicy_actor = {
    .prog = "shoal-onpolicy-actor",
    .schema = onpolicy_schema,
    .check = onpolicy_check,
    .pull_per_batch = true,
    .create = onpolicy_create,
    .load_params = onpolicy_load_params,
    .act = onpolicy_act,
    .observe = onpolicy_observe,
    .destroy = onpolicy_destroy,
};
