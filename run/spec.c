/* SPDX-License-Identifier: Apache-2.0 */
/* What a run is built from (see run/run.h): on-policy specs, agents and wire columns,
 * and the Ape-X wire columns. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "run/run.h"

int op_spec_env_strings(const config *cfg, char *id, size_t id_cap, char *options,
                        size_t options_cap, shoal_error *err) {
  const char *v = config_string(cfg, "env.id");
  if (strlen(v) >= id_cap)
    return shoal_error_set(err, SHOAL_EINVAL, "env.id is %zu characters long; at most %zu",
                           strlen(v), id_cap - 1);
  snprintf(id, id_cap, "%s", v);
  v = config_string(cfg, "env.options");
  if (strlen(v) >= options_cap)
    return shoal_error_set(err, SHOAL_EINVAL, "env.options is %zu characters long; at most %zu",
                           strlen(v), options_cap - 1);
  snprintf(options, options_cap, "%s", v);
  return 0;
}

int op_spec_from_config(const config *cfg, op_spec *s, shoal_error *err) {
  memset(s, 0, sizeof *s);
  s->impala = !strcmp(config_string(cfg, "algo"), "impala");
  s->T = (int)config_int(cfg, s->impala ? "impala.unroll" : "ppo.steps");
  s->num_envs = (int)config_int(cfg, "env.num_envs");
  s->learn_B = (int)onpolicy_learn_batch(cfg);
  int rc = op_spec_env_strings(cfg, s->env_id, sizeof s->env_id, s->env_options,
                               sizeof s->env_options, err);
  if (rc) return rc;
  s->norm_obs = config_bool(cfg, "env.norm_obs");
  s->norm_reward = config_bool(cfg, "env.norm_reward");
  s->bootstrap_truncation = config_bool(cfg, "env.bootstrap_truncation");
  s->gamma = (float)config_float(cfg, s->impala ? "impala.gamma" : "ppo.gamma");
  s->lstm = (int)config_int(cfg, "ac.lstm");
  env *e;
  rc = env_make_opts(&e, s->env_id, s->env_options, err);
  if (rc) return rc;
  rc = op_spec_set_env(s, env_get_spec(e), err);
  env_destroy(e);
  return rc;
}

void op_agent_config_from(const config *cfg, const op_spec *s, op_agent_config *c) {
  memset(c, 0, sizeof *c);
  c->ac = onpolicy_ac_config(cfg, s->obs_ndim, s->obs_shape, s->A, s->D, s->low, s->high);
  c->impala = onpolicy_impala_config(cfg);
  c->ppo = onpolicy_ppo_config(cfg);
}

int op_agent_from_config(const config *cfg, const op_spec *s, int max_batch, bool learner,
                         nn_device device, op_agent *a, shoal_error *err) {
  op_agent_config c;
  op_agent_config_from(cfg, s, &c);
  return op_agent_create(s, &c, max_batch, learner, device, a, err);
}

int op_spec_ncols(const op_spec *s) { return OP_NCOLS + (s->lstm > 0); }

/* Observations that are stacks of image frames (Atari's (4, 84, 84) uint8) may travel
 * as their distinct frames (rpc.h's frame deduplication). Planes under 32x32 (MinAtar's
 * 10x10 channels) are not frames: their index would cost more than it saves. */
static bool frames_travel_once(bool u8, int ndim, const int *shape) {
  return u8 && ndim == 3 && shape[1] * shape[2] >= 1024;
}

void op_rpc_spec(const op_spec *s, const char *run_id, rpc_spec *out) {
  memset(out, 0, sizeof *out);
  out->run_id = run_id;
  out->max_items = (uint32_t)s->num_envs;
  out->ncols = op_spec_ncols(s);
  int odt = s->obs_u8 ? RPC_U8 : RPC_F32;
  rpc_column_spec *c = out->cols;
  c[OP_OBS] = (rpc_column_spec){.name = "obs", .dtype = odt, .ndim = 1 + s->obs_ndim};
  c[OP_FINAL] = (rpc_column_spec){.name = "final_obs", .dtype = odt, .ndim = 1 + s->obs_ndim};
  c[OP_OBS].shape[0] = s->T + 1;
  c[OP_FINAL].shape[0] = s->T;
  for (int d = 0; d < s->obs_ndim; d++)
    c[OP_OBS].shape[1 + d] = c[OP_FINAL].shape[1 + d] = s->obs_shape[d];
  c[OP_OBS].frame_stack = frames_travel_once(s->obs_u8, s->obs_ndim, s->obs_shape);
  if (s->A > 0) {
    c[OP_ACTION] = (rpc_column_spec){.name = "action", .dtype = RPC_I32, .ndim = 1};
  } else {
    c[OP_ACTION] = (rpc_column_spec){.name = "action", .dtype = RPC_F32, .ndim = 2};
    c[OP_ACTION].shape[1] = s->D;
  }
  c[OP_ACTION].shape[0] = s->T;
  c[OP_REWARD] = (rpc_column_spec){.name = "reward", .dtype = RPC_F32, .ndim = 1};
  c[OP_TERM] = (rpc_column_spec){.name = "terminated", .dtype = RPC_U8, .ndim = 1};
  c[OP_TRUNC] = (rpc_column_spec){.name = "truncated", .dtype = RPC_U8, .ndim = 1};
  c[OP_LOGP] = (rpc_column_spec){.name = "logp", .dtype = RPC_F32, .ndim = 1};
  c[OP_EPRET] = (rpc_column_spec){.name = "ep_return", .dtype = RPC_F32, .ndim = 1};
  c[OP_REWARD].shape[0] = c[OP_TERM].shape[0] = c[OP_TRUNC].shape[0] = c[OP_LOGP].shape[0] =
      c[OP_EPRET].shape[0] = s->T;
  if (s->lstm > 0) /* the rpc layer then checks its shape and that it is finite */
    c[OP_CORE0] =
        (rpc_column_spec){.name = "core0", .dtype = RPC_F32, .ndim = 1, .shape = {2 * s->lstm}};
}

void apex_rpc_spec(const env_spec *sp, const char *run_id, uint32_t max_items, rpc_spec *out) {
  memset(out, 0, sizeof *out);
  out->run_id = run_id;
  out->max_items = max_items;
  out->ncols = APEX_NCOLS;
  rpc_column_spec *c = out->cols;
  c[APEX_OBS] = (rpc_column_spec){
      .name = "obs", .dtype = sp->obs.dtype == ENV_UINT8 ? RPC_U8 : RPC_F32, .ndim = sp->obs.ndim};
  for (int d = 0; d < sp->obs.ndim; d++) c[APEX_OBS].shape[d] = sp->obs.shape[d];
  c[APEX_OBS].frame_stack =
      frames_travel_once(sp->obs.dtype == ENV_UINT8, sp->obs.ndim, sp->obs.shape);
  c[APEX_ACTION] = (rpc_column_spec){.name = "action", .dtype = RPC_I32};
  c[APEX_REWARD] = (rpc_column_spec){.name = "reward", .dtype = RPC_F32};
  c[APEX_TERM] = (rpc_column_spec){.name = "terminated", .dtype = RPC_U8};
  c[APEX_TRUNC] = (rpc_column_spec){.name = "truncated", .dtype = RPC_U8};
  c[APEX_PRIO] = (rpc_column_spec){.name = "priority", .dtype = RPC_F32};
  c[APEX_ENV] = (rpc_column_spec){.name = "env", .dtype = RPC_I32};
  c[APEX_TAIL] = (rpc_column_spec){.name = "tail", .dtype = RPC_U8};
}

int run_segment_limits(const env_spec *spec, store_segment_limits *out, shoal_error *err) {
  store_segment_limits l;
  memset(&l, 0, sizeof l);
  const env_space *o = &spec->obs, *a = &spec->act;
  if (o->dtype != ENV_FLOAT32 && o->dtype != ENV_UINT8)
    return shoal_error_set(err, SHOAL_ENOTSUP, "env %s: observations of dtype %d cannot be stored",
                           spec->id, (int)o->dtype);
  l.spec.obs_dtype = o->dtype == ENV_UINT8 ? STORE_SEG_U8 : STORE_SEG_F32;
  l.spec.obs_ndim = o->ndim;
  for (int d = 0; d < o->ndim && d < STORE_SEG_MAX_DIMS; d++) l.spec.obs_shape[d] = o->shape[d];
  if (a->n > 0) {
    l.spec.act_dtype = STORE_SEG_I32;
    l.num_actions = a->n;
  } else {
    l.spec.act_dtype = STORE_SEG_F32;
    l.spec.act_ndim = a->ndim;
    for (int d = 0; d < a->ndim && d < STORE_SEG_MAX_DIMS; d++) l.spec.act_shape[d] = a->shape[d];
    l.act_low = a->low;
    l.act_high = a->high;
  }
  *out = l;
  return 0;
}
