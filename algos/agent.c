/* SPDX-License-Identifier: Apache-2.0 */
/* The on-policy agent, normaliser, snapshots and evaluation (see algos/agent.h). */
#include "algos/agent.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char trailer_magic[8] = {'S', 'H', 'O', 'A', 'L', 'N', 'R', 'M'};

int op_agent_create(const op_spec *s, const op_agent_config *c, int max_batch, bool learner,
                    nn_device device, op_agent *a, shoal_error *err) {
  memset(a, 0, sizeof *a);
  ac_config ac = c->ac;
  ac.max_batch = max_batch;
  if (s->impala) {
    impala_config ic = c->impala;
    ic.B = s->learn_B;
    if (!(a->l = impala_create(&ac, &ic, device, learner, err))) return err ? err->code : -1;
  } else {
    ppo_config pc = c->ppo;
    pc.B = s->learn_B;
    if (!(a->p = ppo_create(&ac, &pc, device, learner, err))) return err ? err->code : -1;
  }
  a->max_batch = max_batch;
  a->learner = learner;
  a->S = a->p ? ppo_state_size(a->p) : impala_state_size(a->l);
  return 0;
}

void op_agent_destroy(op_agent *a) {
  ppo_destroy(a->p);
  impala_destroy(a->l);
  memset(a, 0, sizeof *a);
}

nn_model *op_agent_model(op_agent *a) { return a->p ? ppo_model(a->p) : impala_model(a->l); }

int op_agent_act(op_agent *a, const float *obs, int B, shoal_rng *rng, bool greedy, void *act,
                 void *env_act, float *logp, shoal_error *err) {
  if (a->p) return ppo_act(a->p, obs, B, rng, greedy, act, env_act, logp, NULL, err);
  int rc = impala_act(a->l, obs, B, rng, greedy, act, logp, err);
  if (!rc && env_act) memcpy(env_act, act, (size_t)B * sizeof(int32_t));
  return rc;
}

int op_agent_act_recurrent(op_agent *a, const float *obs, int B, float *state, const uint8_t *first,
                           shoal_rng *rng, bool greedy, void *act, void *env_act, float *logp,
                           shoal_error *err) {
  if (a->p)
    return ppo_act_recurrent(a->p, obs, B, state, first, rng, greedy, act, env_act, logp, NULL,
                             err);
  int rc = impala_act_recurrent(a->l, obs, B, state, first, rng, greedy, act, logp, err);
  if (!rc && env_act) memcpy(env_act, act, (size_t)B * sizeof(int32_t));
  return rc;
}

int op_agent_learn(op_agent *a, const onpolicy_batch *b, onpolicy_stats *st, shoal_error *err) {
  return a->p ? ppo_learn(a->p, b, st, err) : impala_learn(a->l, b, st, err);
}

void op_agent_set_lr(op_agent *a, float lr) {
  if (a->p)
    ppo_set_lr(a->p, lr);
  else
    impala_set_lr(a->l, lr);
}

/* ---- normaliser ---- */

int op_norm_init(op_norm *z, int n, shoal_error *err) {
  z->n = n;
  z->mean = calloc((size_t)n, sizeof *z->mean);
  z->var = malloc((size_t)n * sizeof *z->var);
  if (!z->mean || !z->var) {
    op_norm_free(z);
    return shoal_error_set(err, SHOAL_ENOMEM, "observation normaliser: out of memory");
  }
  for (int j = 0; j < n; j++) z->var[j] = 1;
  z->count = 1e-4;
  return 0;
}

void op_norm_free(op_norm *z) {
  free(z->mean);
  free(z->var);
  z->mean = z->var = NULL;
}

/* Chan et al.'s merge of a batch's moments (mean m, variance v of rows) into column j. */
static void norm_merge(op_norm *z, int j, double m, double v, size_t rows) {
  double delta = m - z->mean[j], tot = z->count + (double)rows;
  z->mean[j] += delta * (double)rows / tot;
  double m2 =
      z->var[j] * z->count + v * (double)rows + delta * delta * z->count * (double)rows / tot;
  z->var[j] = m2 / tot;
}

/* The moments of rows of x (floats) or xd (doubles), merged column by column. */
static void norm_update(op_norm *z, const float *x, const double *xd, size_t rows) {
  if (!rows) return;
  const size_t n = (size_t)z->n;
  for (size_t j = 0; j < n; j++) {
    double m = 0, v = 0;
    for (size_t i = 0; i < rows; i++) m += xd ? xd[i * n + j] : x[i * n + j];
    m /= (double)rows;
    for (size_t i = 0; i < rows; i++) {
      double d = (xd ? xd[i * n + j] : x[i * n + j]) - m;
      v += d * d;
    }
    norm_merge(z, (int)j, m, v / (double)rows, rows);
  }
  z->count += (double)rows;
}

void op_norm_update(op_norm *z, const float *x, size_t rows) { norm_update(z, x, NULL, rows); }

void op_norm_update_f64(op_norm *z, const double *x, size_t rows) { norm_update(z, NULL, x, rows); }

/* ---- the run's spaces ---- */

int op_spec_set_env(op_spec *s, const env_spec *sp, shoal_error *err) {
  if (sp->obs.ndim < 1 || sp->obs.ndim > 3 ||
      (sp->obs.dtype != ENV_FLOAT32 && sp->obs.dtype != ENV_UINT8))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "env %s: observations must be 1- to 3-d float32 or uint8 for the "
                           "actor-critic",
                           s->env_id);
  s->obs_ndim = sp->obs.ndim;
  for (int d = 0; d < 3; d++) s->obs_shape[d] = d < sp->obs.ndim ? sp->obs.shape[d] : 1;
  s->obs_u8 = sp->obs.dtype == ENV_UINT8;
  s->obs_n = (size_t)sp->obs.size;
  s->obs_bytes = env_space_bytes(&sp->obs);
  if (sp->act.n > 0) {
    s->A = sp->act.n;
    return 0;
  }
  if (s->impala)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "env %s has a Box action space: IMPALA here is discrete; use algo: ppo",
                           s->env_id);
  if (sp->act.size > AC_MAX_ACT_DIM)
    return shoal_error_set(err, SHOAL_EINVAL, "env %s: %d action dims > %d", s->env_id,
                           sp->act.size, AC_MAX_ACT_DIM);
  s->D = sp->act.size;
  for (int j = 0; j < s->D; j++) {
    s->low[j] = sp->act.low ? sp->act.low[j] : -INFINITY;
    s->high[j] = sp->act.high ? sp->act.high[j] : INFINITY;
  }
  return 0;
}

void op_norm_apply(const op_norm *z, float *x, size_t rows) {
  for (size_t i = 0; i < rows; i++)
    for (int j = 0; j < z->n; j++) {
      float *v = x + i * (size_t)z->n + (size_t)j;
      double q = (*v - z->mean[j]) / sqrt(z->var[j] + 1e-8);
      *v = (float)fmin(fmax(q, -10.0), 10.0);
    }
}

void op_obs_to_float(const op_spec *s, const void *raw, float *dst, size_t rows, const op_norm *z) {
  size_t n = rows * s->obs_n;
  if (s->obs_u8)
    for (size_t i = 0; i < n; i++) dst[i] = ((const uint8_t *)raw)[i];
  else
    memcpy(dst, raw, n * sizeof *dst);
  if (z) op_norm_apply(z, dst, rows);
}

/* ---- parameters and snapshots ---- */

size_t op_params_floats(op_agent *a, const op_spec *s) {
  size_t n;
  nn_model_params(op_agent_model(a), &n);
  return n + (s->norm_obs ? 2 * s->obs_n + 1 : 0);
}

void op_params_pack(op_agent *a, const op_spec *s, const op_norm *z, float *out) {
  size_t n;
  const float *p = nn_model_params(op_agent_model(a), &n);
  memcpy(out, p, n * sizeof *p);
  if (!s->norm_obs) return;
  for (size_t j = 0; j < s->obs_n; j++) {
    out[n + j] = (float)z->mean[j];
    out[n + s->obs_n + j] = (float)z->var[j];
  }
  out[n + 2 * s->obs_n] = (float)z->count;
}

int op_params_unpack(op_agent *a, const op_spec *s, const float *blob, size_t n, op_norm *z,
                     shoal_error *err) {
  size_t np;
  nn_model_params(op_agent_model(a), &np);
  size_t want = np + (s->norm_obs ? 2 * s->obs_n + 1 : 0);
  if (n != want)
    return shoal_error_set(err, SHOAL_ESHAPE, "params of %zu floats, the network needs %zu", n,
                           want);
  for (size_t j = np; j < n; j++)
    if (!isfinite(blob[j]))
      return shoal_error_set(err, SHOAL_ENAN, "observation statistics are not finite");
  int rc = a->p ? ppo_load_params(a->p, blob, np, err) : impala_load_params(a->l, blob, np, err);
  if (rc || !s->norm_obs) return rc;
  for (size_t j = 0; j < s->obs_n; j++) {
    z->mean[j] = blob[np + j];
    z->var[j] = blob[np + s->obs_n + j];
  }
  z->count = blob[np + 2 * s->obs_n];
  return 0;
}

int op_snapshot_encode(op_agent *a, const op_spec *s, const op_norm *z, uint8_t **buf, size_t *len,
                       shoal_error *err) {
  uint8_t *m;
  size_t ml;
  int rc = nn_model_save_buffer(op_agent_model(a), &m, &ml, err);
  if (!rc && a->learner) {
    /* The learner state (optimizer, update count, PPO's RNG) before the normaliser
     * trailer, which stays last as older readers expect. */
    uint8_t *st = NULL;
    size_t sl = 0;
    rc = a->p ? ppo_state_save(a->p, &st, &sl, err) : impala_state_save(a->l, &st, &sl, err);
    if (!rc) rc = algo_snapshot_append_state(&m, &ml, st, sl, err);
    free(st);
    if (rc) free(m);
  }
  if (rc || !s->norm_obs) {
    if (!rc) *buf = m, *len = ml;
    return rc;
  }
  size_t extra = (2 * s->obs_n + 1) * sizeof(double) + sizeof(uint64_t) + sizeof trailer_magic;
  uint8_t *b = realloc(m, ml + extra);
  if (!b) {
    free(m);
    return shoal_error_set(err, SHOAL_ENOMEM, "snapshot: out of memory");
  }
  uint8_t *p = b + ml;
  memcpy(p, z->mean, s->obs_n * sizeof(double)), p += s->obs_n * sizeof(double);
  memcpy(p, z->var, s->obs_n * sizeof(double)), p += s->obs_n * sizeof(double);
  memcpy(p, &z->count, sizeof(double)), p += sizeof(double);
  uint64_t n = s->obs_n;
  memcpy(p, &n, sizeof n), p += sizeof n;
  memcpy(p, trailer_magic, sizeof trailer_magic);
  *buf = b;
  *len = ml + extra;
  return 0;
}

static int decode(op_agent *a, const op_spec *s, op_norm *z, const uint8_t *buf, size_t len,
                  bool *restored, shoal_error *err) {
  size_t ml = len;
  const uint8_t *stats = NULL; /* the checked normaliser trailer, copied once the model loads */
  double count = 0;
  if (len >= 16 && !memcmp(buf + len - 8, trailer_magic, 8)) {
    uint64_t n;
    memcpy(&n, buf + len - 16, sizeof n);
    size_t extra = (2 * (size_t)n + 1) * sizeof(double) + 16;
    if (n != s->obs_n || extra > len)
      return shoal_error_set(err, SHOAL_EFORMAT,
                             "snapshot: normaliser trailer of %llu observation elements, the env "
                             "has %zu",
                             (unsigned long long)n, s->obs_n);
    ml = len - extra;
    if (z && z->mean) {
      const uint8_t *p = buf + ml;
      memcpy(&count, p + 2 * n * sizeof(double), sizeof count);
      for (size_t j = 0; j < 2 * n; j++) {
        double v;
        memcpy(&v, p + j * sizeof v, sizeof v);
        if (!isfinite(v) || (j >= n && v < 0))
          return shoal_error_set(err, SHOAL_EFORMAT, "snapshot: normaliser statistics damaged");
      }
      if (!(count > 0) || !isfinite(count))
        return shoal_error_set(err, SHOAL_EFORMAT, "snapshot: normaliser count damaged");
      stats = p;
    }
  } else if (s->norm_obs && z) {
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "snapshot: the run normalises observations but the snapshot holds no "
                           "statistics");
  }
  const uint8_t *st;
  size_t sl;
  int rc = algo_snapshot_split(buf, ml, &ml, &st, &sl, err);
  if (!rc) rc = nn_model_load_buffer(op_agent_model(a), buf, ml, err);
  /* The statistics only with the model they were saved with: a snapshot whose model is
   * refused leaves z as it was. */
  if (!rc && stats) {
    memcpy(z->mean, stats, s->obs_n * sizeof(double));
    memcpy(z->var, stats + s->obs_n * sizeof(double), s->obs_n * sizeof(double));
    z->count = count;
  }
  if (rc || !restored) return rc;
  *restored = false;
  if (!st) return 0;
  rc = a->p ? ppo_state_load(a->p, st, sl, err) : impala_state_load(a->l, st, sl, err);
  if (!rc) *restored = true;
  return rc;
}

int op_snapshot_decode(op_agent *a, const op_spec *s, op_norm *z, const uint8_t *buf, size_t len,
                       shoal_error *err) {
  return decode(a, s, z, buf, len, NULL, err);
}

int op_snapshot_resume(op_agent *a, const op_spec *s, op_norm *z, const uint8_t *buf, size_t len,
                       bool *restored, shoal_error *err) {
  if (!a->learner)
    return shoal_error_set(err, SHOAL_ESTATE, "snapshot: resuming needs a learner's agent");
  return decode(a, s, z, buf, len, restored, err);
}

/* ---- evaluation ---- */

struct op_eval {
  const op_spec *s;
  env_vec *ev;
  int E, episodes;
  void *raw, *fin;
  float *obs, *rew;
  void *act, *env_act;
  uint8_t *term, *trunc;
  int *done;
  double *ret, *returns;
  int S;             /* recurrent state floats per env (2·lstm), 0 without a core */
  float *state;      /* (E, S) */
  uint8_t *first;    /* (E) the observation begins an episode */
  double *first_ret; /* (E) each copy's first episode: its return and length */
  int64_t *first_len;
  op_eval_watch_fn watch;
  void *watch_ctx;
};

void op_eval_watch(op_eval *e, op_eval_watch_fn fn, void *ctx) {
  e->watch = fn;
  e->watch_ctx = ctx;
}

int op_eval_copies(const op_eval *e) { return e->E; }
env_vec *op_eval_env(op_eval *e) { return e->ev; }

bool op_eval_first_episode(const op_eval *e, int copy, double *ret, int64_t *len) {
  if (copy < 0 || copy >= e->E || e->first_len[copy] < 0) return false;
  *ret = e->first_ret[copy];
  *len = e->first_len[copy];
  return true;
}

op_eval *op_eval_create(const op_spec *s, int episodes, shoal_error *err) {
  op_eval *e = calloc(1, sizeof *e);
  if (!e) {
    shoal_error_set(err, SHOAL_ENOMEM, "evaluation: out of memory");
    return NULL;
  }
  e->s = s;
  e->episodes = episodes;
  e->E = episodes < 16 ? episodes : 16;
  env_vec_config vc = {0};
  vc.options = s->env_options[0] ? s->env_options : NULL;
  vc.evaluation = 1; /* the game's own score: no life-loss terminals, no clipped rewards */
  if (env_vec_create(&e->ev, s->env_id, e->E, &vc, err)) {
    free(e);
    return NULL;
  }
  size_t E = (size_t)e->E, ab = s->A > 0 ? sizeof(int32_t) : (size_t)s->D * sizeof(float);
  e->raw = malloc(E * s->obs_bytes);
  e->fin = malloc(E * s->obs_bytes);
  e->obs = malloc(E * s->obs_n * sizeof(float));
  e->rew = malloc(E * sizeof(float));
  e->act = malloc(E * ab);
  e->env_act = malloc(E * ab);
  e->term = malloc(E);
  e->trunc = malloc(E);
  e->done = malloc(E * sizeof(int));
  e->ret = malloc(E * sizeof(double));
  e->returns = malloc((size_t)episodes * sizeof(double));
  e->S = 2 * s->lstm;
  e->state = calloc(E * (size_t)(e->S ? e->S : 1), sizeof(float));
  e->first = malloc(E);
  e->first_ret = calloc(E, sizeof *e->first_ret);
  e->first_len = calloc(E, sizeof *e->first_len);
  if (!e->first_ret || !e->first_len || !e->raw || !e->fin || !e->obs || !e->rew || !e->act ||
      !e->env_act || !e->term || !e->trunc || !e->done || !e->ret || !e->returns || !e->state ||
      !e->first) {
    op_eval_destroy(e);
    shoal_error_set(err, SHOAL_ENOMEM, "evaluation: out of memory");
    return NULL;
  }
  return e;
}

void op_eval_destroy(op_eval *e) {
  if (!e) return;
  env_vec_destroy(e->ev);
  free(e->raw), free(e->fin), free(e->obs), free(e->rew), free(e->act), free(e->env_act);
  free(e->term), free(e->trunc), free(e->done), free(e->ret), free(e->returns);
  free(e->state), free(e->first), free(e->first_ret), free(e->first_len);
  free(e);
}

/* The agent as an evaluation policy: its recurrent state per env copy lives in e. */
typedef struct agent_policy {
  op_eval *e;
  op_agent *a;
  bool greedy;
  shoal_rng rng;
} agent_policy;

static int agent_policy_act(void *ctx, const float *obs, int B, const uint8_t *first, void *env_act,
                            shoal_error *err) {
  agent_policy *p = ctx;
  op_eval *e = p->e;
  return e->S ? op_agent_act_recurrent(p->a, obs, B, e->state, first, &p->rng, p->greedy, e->act,
                                       env_act, NULL, err)
              : op_agent_act(p->a, obs, B, &p->rng, p->greedy, e->act, env_act, NULL, err);
}

int op_eval_run(op_eval *e, op_agent *a, const op_norm *z, bool greedy, uint64_t seed, double *mean,
                double *sd, double *min, double *max, shoal_error *err) {
  if (a->S != e->S)
    return shoal_error_set(err, SHOAL_ESTATE,
                           "evaluation: the network's recurrent state is %d floats, the run's "
                           "%d",
                           a->S, e->S);
  agent_policy p = {.e = e, .a = a, .greedy = greedy};
  shoal_rng_seed(&p.rng, seed ^ 0x9e3779b97f4a7c15ull);
  return op_eval_run_policy(e, agent_policy_act, &p, z, seed, mean, sd, min, max, err);
}

int op_eval_run_policy(op_eval *e, op_eval_act_fn act, void *ctx, const op_norm *z, uint64_t seed,
                       double *mean, double *sd, double *min, double *max, shoal_error *err) {
  int E = e->E, total = e->episodes, got = 0;
  int rrc = env_vec_reset(e->ev, seed, e->raw, err);
  if (rrc) return rrc;
  memset(e->first, 1, (size_t)E); /* every copy starts an episode: its state is reset */
  for (int i = 0; i < E; i++) e->done[i] = 0, e->ret[i] = 0, e->first_len[i] = -1;
  env_vec_out out = {e->raw, e->rew, e->term, e->trunc, e->fin};
  /* Envs without a time limit (none registered now) still end. */
  int64_t cap = (int64_t)27000 * ((total + E - 1) / E), t = 0;
  while (got < total && t < cap) {
    int rc = e->watch ? e->watch(e->watch_ctx, t, e->ev, e->done, err) : 0;
    if (rc) return rc;
    t++;
    op_obs_to_float(e->s, e->raw, e->obs, (size_t)E, z);
    rc = act(ctx, e->obs, E, e->first, e->env_act, err);
    if (!rc) rc = env_vec_step(e->ev, e->env_act, &out, err);
    if (rc) return rc;
    for (int i = 0; i < E; i++) {
      e->ret[i] += e->rew[i];
      e->first[i] = e->term[i] | e->trunc[i]; /* the env autoresets: a new episode next */
      if (!e->term[i] && !e->trunc[i]) continue;
      if (e->first_len[i] < 0) e->first_ret[i] = e->ret[i], e->first_len[i] = t;
      int quota = total / E + (i < total % E);
      if (e->done[i] < quota) e->returns[got++] = e->ret[i], e->done[i]++;
      e->ret[i] = 0;
    }
  }
  if (got == 0) return shoal_error_set(err, SHOAL_ETIMEDOUT, "evaluation: no episode ended");
  double m = 0, v = 0, lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < got; i++) {
    m += e->returns[i];
    lo = fmin(lo, e->returns[i]);
    hi = fmax(hi, e->returns[i]);
  }
  m /= got;
  for (int i = 0; i < got; i++) v += (e->returns[i] - m) * (e->returns[i] - m);
  *mean = m;
  *sd = sqrt(v / got);
  if (min) *min = lo;
  if (max) *max = hi;
  return 0;
}
