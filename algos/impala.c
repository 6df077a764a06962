/* SPDX-License-Identifier: Apache-2.0 */
/* IMPALA's actor and learner (Espeholt et al. 2018): softmax policy with a baseline,
 * V-trace targets, policy-gradient, baseline and entropy losses. See algos/algos.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/ac.h"
#include "algos/state.h"

struct impala {
  ac__net net;
  impala_config ic;
  bool learner;
  nn_optim *opt;
  int64_t updates;
  /* learner buffers, sized for T x B at create */
  float *value;    /* (T+1, B) V(x_t) from the current network */
  float *final_v;  /* (T, B) V(final observation) where truncated */
  float *fobs;     /* (T·B, obs) gathered final observations */
  int *fidx;       /* (T·B) their rows */
  float *log_rho;  /* (T, B) log π − log μ */
  float *discount; /* (T, B) */
  float *vs;       /* (T, B) */
  float *pg_adv;   /* (T, B) */
  float *dout;     /* ((T+1)·B, A + 1) */
};

impala_config impala_defaults(void) {
  impala_config c;
  memset(&c, 0, sizeof c);
  c.T = 20;
  c.B = 16;
  c.gamma = 0.99f;
  c.rho_bar = c.c_bar = c.pg_rho_bar = 1.0f;
  c.baseline_coef = 0.5f;
  c.entropy_coef = 0.01f;
  c.optim = ONPOLICY_ADAM;
  c.lr = 1e-3f;
  c.eps = 1e-8f;
  c.alpha = 0.99f;
  c.clip_norm = 40.0f;
  return c;
}

static int check(const ac_config *ac, const impala_config *c, shoal_error *err) {
  int rc = ac__check(ac, "impala", err);
  if (rc) return rc;
  if (ac->num_actions < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "impala: the policy is discrete (num_actions >= 1)");
  if (c->T < 1 || c->B < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "impala: T %d and B %d must be >= 1", c->T, c->B);
  if (!(c->gamma >= 0 && c->gamma <= 1))
    return shoal_error_set(err, SHOAL_EINVAL, "impala: gamma %g outside [0, 1]", c->gamma);
  if (!(c->rho_bar > 0) || !(c->c_bar > 0) || !(c->pg_rho_bar > 0))
    return shoal_error_set(err, SHOAL_EINVAL, "impala: rho_bar, c_bar, pg_rho_bar must be > 0");
  if (!(c->lr > 0) || !(c->eps > 0) || !(c->baseline_coef >= 0) || !(c->entropy_coef >= 0) ||
      !(c->clip_norm >= 0))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "impala: lr and eps must be > 0, coefficients and clip_norm >= 0");
  return 0;
}

impala *impala_create(const ac_config *ac, const impala_config *ic, nn_device device, bool learner,
                      shoal_error *err) {
  if (check(ac, ic, err)) return NULL;
  impala *l = calloc(1, sizeof *l);
  if (!l) {
    shoal_error_set(err, SHOAL_ENOMEM, "impala: out of memory");
    return NULL;
  }
  l->ic = *ic;
  l->learner = learner;
  size_t TB = (size_t)ic->T * ic->B, obs_n = (size_t)ac->obs_c * ac->obs_h * ac->obs_w;
  int max_batch = ac->max_batch;
  /* Feed-forward, one forward covers the T+1 rows of every unroll; with a core, the
   * unrolled model does and the step model only acts and bootstraps. */
  if (learner && !ac->lstm && (size_t)max_batch < TB + (size_t)ic->B)
    max_batch = (int)(TB + (size_t)ic->B);
  int U = learner && ac->lstm > 0 ? ic->T + 1 : 0;
  if (ac__create(&l->net, ac, device, max_batch, U, ic->B, err)) goto fail;
  if (learner) {
    size_t od = (size_t)l->net.out_dim;
    l->value = malloc((TB + ic->B) * sizeof *l->value);
    l->final_v = malloc(TB * sizeof *l->final_v);
    l->fobs = malloc(TB * obs_n * sizeof *l->fobs);
    l->fidx = malloc(TB * sizeof *l->fidx);
    l->log_rho = malloc(TB * sizeof *l->log_rho);
    l->discount = malloc(TB * sizeof *l->discount);
    l->vs = malloc(TB * sizeof *l->vs);
    l->pg_adv = malloc(TB * sizeof *l->pg_adv);
    l->dout = malloc((TB + ic->B) * od * sizeof *l->dout);
    if (!l->value || !l->final_v || !l->fobs || !l->fidx || !l->log_rho || !l->discount || !l->vs ||
        !l->pg_adv || !l->dout) {
      shoal_error_set(err, SHOAL_ENOMEM, "impala: out of memory");
      goto fail;
    }
    if (!(l->opt = ac__optim(&l->net, ic->optim, ic->lr, ic->eps, ic->alpha, ic->clip_norm, err)))
      goto fail;
  }
  return l;
fail:
  impala_destroy(l);
  return NULL;
}

void impala_destroy(impala *l) {
  if (!l) return;
  nn_optim_destroy(l->opt);
  ac__destroy(&l->net);
  free(l->value);
  free(l->final_v);
  free(l->fobs);
  free(l->fidx);
  free(l->log_rho);
  free(l->discount);
  free(l->vs);
  free(l->pg_adv);
  free(l->dout);
  free(l);
}

nn_model *impala_model(impala *l) { return ac__trained(&l->net); }

int impala_state_size(const impala *l) { return l->net.S; }

int impala_act_recurrent(impala *l, const float *obs, int B, float *state, const uint8_t *first,
                         shoal_rng *rng, bool greedy, int32_t *actions, float *logp,
                         shoal_error *err) {
  if (!l->net.S)
    return shoal_error_set(err, SHOAL_ESTATE,
                           "impala: the network has no LSTM core: act with impala_act");
  if (B < 1 || B > nn_model_max_batch(l->net.m))
    return shoal_error_set(err, SHOAL_EINVAL, "impala: act batch %d outside [1, %d]", B,
                           nn_model_max_batch(l->net.m));
  const float *out;
  int rc = ac__step(&l->net, obs, B, state, first, &out, err);
  if (rc) return rc;
  ac__sample(&l->net, out, B, rng, greedy, actions, logp);
  return 0;
}

int impala_act(impala *l, const float *obs, int B, shoal_rng *rng, bool greedy, int32_t *actions,
               float *logp, shoal_error *err) {
  if (l->net.S)
    return shoal_error_set(err, SHOAL_ESTATE,
                           "impala: the network has an LSTM core: act with impala_act_recurrent");
  if (B < 1 || B > nn_model_max_batch(l->net.m))
    return shoal_error_set(err, SHOAL_EINVAL, "impala: act batch %d outside [1, %d]", B,
                           nn_model_max_batch(l->net.m));
  const float *out;
  int rc = nn_model_forward(l->net.m, obs, B, &out, err);
  if (rc) return rc;
  ac__sample(&l->net, out, B, rng, greedy, actions, logp);
  return 0;
}

/* Values of the truncated steps' final observations into final_v. */
int onpolicy__final_values(ac__net *n, const onpolicy_batch *b, float *fobs, int *fidx,
                           float *scratch, float *final_v, shoal_error *err) {
  if (!b->truncated || !b->final_obs) return 0;
  int TB = b->T * b->B, k = 0;
  for (int i = 0; i < TB; i++) {
    if (!b->truncated[i] || b->terminated[i]) continue;
    memcpy(fobs + (size_t)k * n->obs_n, b->final_obs + (size_t)i * n->obs_n,
           n->obs_n * sizeof *fobs);
    fidx[k++] = i;
  }
  if (!k) return 0;
  int rc = ac__values(n, fobs, k, scratch, err);
  if (rc) return rc;
  for (int j = 0; j < k; j++) final_v[fidx[j]] = scratch[j];
  return 0;
}

/* Shared input checks of impala_learn and ppo_learn. */
int onpolicy__check_batch(const ac__net *n, const onpolicy_batch *b, int maxT, int maxB,
                          const char *who, shoal_error *err) {
  if (b->T < 1 || b->B < 1 || b->T > maxT || b->B > maxB)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: batch T %d x B %d outside [1, %d] x [1, %d]",
                           who, b->T, b->B, maxT, maxB);
  if (!b->obs || !b->action || !b->logp || !b->reward || !b->terminated)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "%s: obs, action, logp, reward and terminated "
                           "are required",
                           who);
  size_t TB = (size_t)b->T * b->B;
  int rc = ac__check_actions(n, b->action, TB, who, err);
  if (rc) return rc;
  for (size_t i = 0; i < TB; i++)
    if (!isfinite(b->logp[i]) || !isfinite(b->reward[i]))
      return shoal_error_set(err, SHOAL_ENAN, "%s: non-finite logp or reward at t=%zu, b=%zu", who,
                             i / (size_t)b->B, i % (size_t)b->B);
  return 0;
}

int impala_learn(impala *l, const onpolicy_batch *b, onpolicy_stats *stats, shoal_error *err) {
  if (!l->learner)
    return shoal_error_set(err, SHOAL_ESTATE, "impala: learn() on an actor-side impala");
  int rc = onpolicy__check_batch(&l->net, b, l->ic.T, l->ic.B, "impala", err);
  if (rc) return rc;
  int T = b->T, B = b->B, TB = T * B, A = l->net.cfg.num_actions, od = l->net.out_dim;
  bool core = l->net.S > 0;
  /* One forward over o_0 .. o_T; its activations serve the backward. With a core, the
   * unrolled model re-runs it from each unroll's core0 (its time-major rows in tm_out),
   * and the final observations bootstrap from the state their step left. */
  const float *out;
  if (core) {
    if ((rc = ac__seq_forward(&l->net, b, NULL, 0, err))) return rc;
    out = l->net.tm_out;
    if ((rc = ac__final_values_core(&l->net, b, l->final_v, err))) return rc;
  } else {
    if ((rc = onpolicy__final_values(&l->net, b, l->fobs, l->fidx, l->vs, l->final_v, err)))
      return rc;
    if ((rc = nn_model_forward(l->net.m, b->obs, TB + B, &out, err))) return rc;
  }
  const int32_t *act = b->action;
  double rho_sum = 0, clipped = 0;
  for (int i = 0; i < TB + B; i++) l->value[i] = out[(size_t)i * od + A];
  for (int i = 0; i < TB; i++) {
    float lp = ac_logp_discrete(out + (size_t)i * od, A, act[i], NULL);
    l->log_rho[i] = lp - b->logp[i];
    double r = exp((double)l->log_rho[i]);
    rho_sum += r;
    if (r > l->ic.rho_bar * (1 + 1e-4)) clipped++; /* above float noise */
    l->discount[i] = b->terminated[i] ? 0.0f : l->ic.gamma;
  }
  const uint8_t *trunc = b->final_obs ? b->truncated : NULL;
  if (!b->final_obs && b->truncated) /* no final observation: a truncation ends the return */
    for (int i = 0; i < TB; i++)
      if (b->truncated[i]) l->discount[i] = 0;
  rc = vtrace(T, B, l->log_rho, l->discount, b->reward, l->value, trunc, l->final_v, l->ic.rho_bar,
              l->ic.c_bar, l->ic.pg_rho_bar, l->vs, l->pg_adv, err);
  if (rc) return rc;
  onpolicy_stats st = {0};
  impala_loss(TB, A, act, l->vs, l->pg_adv, l->ic.baseline_coef, l->ic.entropy_coef, out, l->dout,
              &st);
  memset(l->dout + (size_t)TB * od, 0, (size_t)B * od * sizeof *l->dout);
  if (!isfinite(st.loss)) return shoal_error_set(err, SHOAL_ENAN, "impala: the loss is not finite");
  nn_model_zero_grad(ac__trained(&l->net));
  rc = core ? ac__seq_backward(&l->net, l->dout, B, err)
            : nn_model_backward(l->net.m, l->dout, NULL, err);
  if (rc) return rc;
  if ((rc = nn_optim_step(l->opt, err))) return rc;
  if ((rc = ac__sync(&l->net, err))) return rc;
  l->updates++;
  if (stats) {
    /* explained variance of v_s by V */
    double my = 0, md = 0;
    for (int i = 0; i < TB; i++) {
      my += l->vs[i];
      md += l->vs[i] - l->value[i];
    }
    my /= TB;
    md /= TB;
    double vy = 0, vd = 0;
    for (int i = 0; i < TB; i++) {
      double y = l->vs[i] - my, d = l->vs[i] - l->value[i] - md;
      vy += y * y;
      vd += d * d;
    }
    st.explained_var = vy > 0 ? (float)(1.0 - vd / vy) : NAN;
    st.grad_norm = nn_optim_last_grad_norm(l->opt);
    st.mean_rho = (float)(rho_sum / TB);
    st.clip_frac = (float)(clipped / TB);
    st.updates = l->updates;
    *stats = st;
  }
  return 0;
}

int impala_load_params(impala *l, const float *params, size_t n, shoal_error *err) {
  return ac__load_params(&l->net, params, n, "impala", err);
}

void impala_set_lr(impala *l, float lr) {
  if (l->opt) nn_optim_set_lr(l->opt, lr);
}

int impala_state_save(const impala *l, uint8_t **buf, size_t *len, shoal_error *err) {
  return algo__state_save(ALGO__STATE_IMPALA, l->opt, NULL, l->updates, NULL, buf, len, err);
}

int impala_state_load(impala *l, const uint8_t *buf, size_t len, shoal_error *err) {
  if (!l->opt) return shoal_error_set(err, SHOAL_ESTATE, "impala: learner state on an actor");
  return algo__state_load(ALGO__STATE_IMPALA, l->opt, NULL, &l->updates, NULL, buf, len, err);
}
