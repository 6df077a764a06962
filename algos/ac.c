/* The actor-critic network of IMPALA and PPO, the policy distributions and the two
 * losses with their hand-written gradients w.r.t. the network's outputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/ac.h"

#define LOG_2PI 1.8378770664093453

ac_config ac_defaults(void) {
  ac_config c;
  memset(&c, 0, sizeof c);
  c.obs_c = c.obs_h = c.obs_w = 1;
  c.num_actions = 2;
  c.torso = AC_TORSO_MLP;
  c.hidden[0] = 64;
  c.hidden[1] = 64;
  c.tanh = true;
  c.separate = true;
  c.ortho_init = true;
  c.log_std_init = 0;
  c.max_batch = 256;
  c.seed = 1;
  return c;
}

int ac__check(const ac_config *c, const char *who, shoal_error *err) {
  if (c->obs_c < 1 || c->obs_h < 1 || c->obs_w < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: observation shape %dx%dx%d is not positive", who,
                           c->obs_c, c->obs_h, c->obs_w);
  if ((c->num_actions > 0) == (c->act_dim > 0) || c->num_actions < 0 || c->act_dim < 0)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "%s: exactly one of num_actions (%d) and act_dim (%d) must be "
                           "positive",
                           who, c->num_actions, c->act_dim);
  if (c->act_dim > AC_MAX_ACT_DIM)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: act_dim %d > %d", who, c->act_dim,
                           AC_MAX_ACT_DIM);
  for (int j = 0; j < c->act_dim; j++)
    if (isnan(c->act_low[j]) || isnan(c->act_high[j]) || c->act_low[j] > c->act_high[j])
      return shoal_error_set(err, SHOAL_EINVAL, "%s: action bounds [%g, %g] of dim %d are bad", who,
                             c->act_low[j], c->act_high[j], j);
  if (c->max_batch < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: max_batch %d < 1", who, c->max_batch);
  if (c->torso == AC_TORSO_MINATAR && (c->obs_h < 3 || c->obs_w < 3))
    return shoal_error_set(err, SHOAL_EINVAL, "%s: the minatar torso needs H, W >= 3, got %dx%d",
                           who, c->obs_h, c->obs_w);
  if (c->torso != AC_TORSO_MLP && c->torso != AC_TORSO_MINATAR)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: unknown torso %d", who, (int)c->torso);
  if (!isfinite(c->log_std_init))
    return shoal_error_set(err, SHOAL_EINVAL, "%s: log_std_init is not finite", who);
  return 0;
}

/* One torso from the input node; names prefixed ("actor_", "critic_" or ""). */
static int torso(const ac_config *c, nn_model *m, const char *prefix) {
  char name[48];
  int rc;
  if (c->torso == AC_TORSO_MINATAR) {
    snprintf(name, sizeof name, "%sconv1", prefix);
    if ((rc = nn_conv2d(m, name, 16, 3, 3, 1, 0, 1)) < 0) return rc;
    snprintf(name, sizeof name, "%sconv1_relu", prefix);
    if ((rc = nn_activation(m, name, NN_RELU, 0)) < 0) return rc;
    snprintf(name, sizeof name, "%sfc1", prefix);
    if ((rc = nn_dense(m, name, 128)) < 0) return rc;
    snprintf(name, sizeof name, "%sfc1_relu", prefix);
    return nn_activation(m, name, NN_RELU, 0);
  }
  rc = nn_model_current(m);
  for (int i = 0; i < 2 && c->hidden[i] > 0; i++) {
    snprintf(name, sizeof name, "%sfc%d", prefix, i + 1);
    if ((rc = nn_dense(m, name, c->hidden[i])) < 0) return rc;
    snprintf(name, sizeof name, "%sfc%d_act", prefix, i + 1);
    if ((rc = nn_activation(m, name, c->tanh ? NN_TANH : NN_RELU, 0)) < 0) return rc;
  }
  return rc;
}

/* CleanRL's layer_init: orthogonal weights with gain √2 (torso), 0.01 (policy head) or
 * 1 (value head), zero biases. */
static int ortho_init(ac__net *n, shoal_error *err) {
  size_t np;
  float *p = nn_model_params(n->m, &np);
  shoal_rng rng;
  shoal_rng_seed(&rng, n->cfg.seed ^ 0x6f7274686fULL);
  int count = nn_model_tensor_count(n->m);
  for (int i = 0; i < count; i++) {
    nn_tensor_info ti;
    nn_model_tensor(n->m, i, &ti);
    if (!ti.trainable) continue;
    size_t len = strlen(ti.name);
    bool weight = len > 7 && !strcmp(ti.name + len - 7, ".weight");
    if (!strncmp(ti.name, "log_std.", 8)) continue;
    if (!weight) {
      nn_init_zeros(p + ti.offset, ti.numel);
      continue;
    }
    float gain = sqrtf(2.0f);
    if (!strcmp(ti.name, "policy.weight") || !strcmp(ti.name, "mean.weight")) gain = 0.01f;
    if (!strcmp(ti.name, "value.weight")) gain = 1.0f;
    int rows = ti.shape[0], cols = (int)(ti.numel / (size_t)ti.shape[0]);
    int rc = nn_init_orthogonal(p + ti.offset, rows, cols, gain, &rng);
    if (rc) return shoal_error_set(err, rc, "ac: orthogonal init of %s failed", ti.name);
  }
  return 0;
}

int ac__create(ac__net *n, const ac_config *c, nn_device device, int max_batch, shoal_error *err) {
  n->cfg = *c;
  n->P = c->num_actions > 0 ? c->num_actions : 2 * c->act_dim;
  n->out_dim = n->P + 1;
  n->obs_n = (size_t)c->obs_c * c->obs_h * c->obs_w;
  if (!(n->m = nn_model_create(device, err))) return err ? err->code : SHOAL_ENOMEM;
  nn_model *m = n->m;
  int rc = nn_input(m, c->obs_c, c->obs_h, c->obs_w);
  int pol = -1, val = -1;
  if (rc >= 0) rc = torso(c, m, c->separate ? "actor_" : "");
  int trunk = rc;
  if (rc >= 0) {
    if (c->num_actions > 0) {
      pol = nn_dense(m, "policy", c->num_actions);
    } else {
      int mean = nn_dense(m, "mean", c->act_dim);
      /* The log-std: a dense layer from the input whose weight stays zero, so its
       * output is its bias for every observation. */
      int ls = mean >= 0 ? nn_model_select(m, 0) : mean;
      if (ls >= 0) ls = nn_dense(m, "log_std", c->act_dim);
      pol = ls >= 0 ? nn_concat(m, "policy_out", mean, ls) : ls;
    }
    rc = pol;
  }
  if (rc >= 0) rc = nn_model_select(m, c->separate ? 0 : trunk);
  if (rc >= 0 && c->separate) rc = torso(c, m, "critic_");
  if (rc >= 0) rc = val = nn_dense(m, "value", 1);
  if (rc >= 0) rc = nn_concat(m, "out", pol, val);
  if (rc < 0) return shoal_error_set(err, rc, "ac: building the network: %s", nn_model_error(m));
  if ((rc = nn_model_build(m, max_batch, c->seed, err))) return rc;
  if (c->ortho_init && (rc = ortho_init(n, err))) return rc;
  if (c->act_dim > 0) {
    nn_tensor_info w, b;
    nn_model_find_tensor(m, "log_std.weight", &w);
    nn_model_find_tensor(m, "log_std.bias", &b);
    size_t np;
    float *p = nn_model_params(m, &np);
    nn_init_zeros(p + w.offset, w.numel);
    for (size_t j = 0; j < b.numel; j++) p[b.offset + j] = c->log_std_init;
    n->ls_off = w.offset;
    n->ls_n = w.numel;
  }
  return 0;
}

void ac__destroy(ac__net *n) {
  nn_model_destroy(n->m);
  n->m = NULL;
}

int ac__values(ac__net *n, const float *obs, int B, float *value, shoal_error *err) {
  int chunk = nn_model_max_batch(n->m);
  for (int i = 0; i < B; i += chunk) {
    int k = B - i < chunk ? B - i : chunk;
    const float *out;
    int rc = nn_model_forward(n->m, obs + (size_t)i * n->obs_n, k, &out, err);
    if (rc) return rc;
    for (int j = 0; j < k; j++) value[i + j] = out[(size_t)j * n->out_dim + n->P];
  }
  return 0;
}

void ac__fix_grads(ac__net *n) {
  if (!n->ls_n) return;
  size_t ng;
  float *g = nn_model_grads(n->m, &ng);
  memset(g + n->ls_off, 0, n->ls_n * sizeof *g);
}

/* log-softmax pieces of one row: the max and log Σ exp(z − max). */
static double lse(const float *z, int A) {
  float mx = z[0];
  for (int k = 1; k < A; k++)
    if (z[k] > mx) mx = z[k];
  double s = 0;
  for (int k = 0; k < A; k++) s += exp((double)z[k] - mx);
  return mx + log(s);
}

float ac_logp_discrete(const float *z, int A, int32_t a, float *entropy) {
  double l = lse(z, A);
  if (entropy) {
    double h = 0;
    for (int k = 0; k < A; k++) {
      double lp = z[k] - l;
      h -= exp(lp) * lp;
    }
    *entropy = (float)h;
  }
  return (float)(z[a] - l);
}

float ac_logp_gaussian(const float *mean, const float *log_std, int D, const float *a,
                       float *entropy) {
  double lp = 0, h = 0;
  for (int j = 0; j < D; j++) {
    double d = ((double)a[j] - mean[j]) * exp(-(double)log_std[j]);
    lp += -0.5 * d * d - log_std[j] - 0.5 * LOG_2PI;
    h += 0.5 + 0.5 * LOG_2PI + log_std[j];
  }
  if (entropy) *entropy = (float)h;
  return (float)lp;
}

void ac__sample(const ac__net *n, const float *out, int B, shoal_rng *rng, bool greedy,
                void *actions, float *logp) {
  const ac_config *c = &n->cfg;
  for (int i = 0; i < B; i++) {
    const float *o = out + (size_t)i * n->out_dim;
    if (c->num_actions > 0) {
      int A = c->num_actions, a = 0;
      if (greedy) {
        for (int k = 1; k < A; k++)
          if (o[k] > o[a]) a = k;
      } else {
        /* Inverse CDF of the softmax; the last action takes any rounding remainder. */
        double l = lse(o, A), u = shoal_rng_uniform(rng), cum = 0;
        for (a = 0; a < A - 1; a++) {
          cum += exp((double)o[a] - l);
          if (u < cum) break;
        }
      }
      ((int32_t *)actions)[i] = a;
      if (logp) logp[i] = ac_logp_discrete(o, A, a, NULL);
    } else {
      int D = c->act_dim;
      float *a = (float *)actions + (size_t)i * D;
      for (int j = 0; j < D; j++)
        a[j] = greedy ? o[j] : o[j] + expf(o[D + j]) * (float)shoal_rng_normal(rng);
      if (logp) logp[i] = ac_logp_gaussian(o, o + D, D, a, NULL);
    }
  }
}

int ac__check_actions(const ac__net *n, const void *actions, size_t B, const char *who,
                      shoal_error *err) {
  if (n->cfg.num_actions > 0) {
    const int32_t *a = actions;
    for (size_t i = 0; i < B; i++)
      if (a[i] < 0 || a[i] >= n->cfg.num_actions)
        return shoal_error_set(err, SHOAL_ERANGE, "%s: action %d at row %zu not in [0, %d)", who,
                               (int)a[i], i, n->cfg.num_actions);
  } else {
    const float *a = actions;
    for (size_t i = 0; i < B * (size_t)n->cfg.act_dim; i++)
      if (!isfinite(a[i]))
        return shoal_error_set(err, SHOAL_ENAN, "%s: non-finite action at row %zu", who,
                               i / (size_t)n->cfg.act_dim);
  }
  return 0;
}

int ac__load_params(ac__net *n, const float *params, size_t count, const char *who,
                    shoal_error *err) {
  size_t have;
  float *p = nn_model_params(n->m, &have);
  if (count != have)
    return shoal_error_set(err, SHOAL_ESHAPE, "%s: %zu parameters received, the network has %zu",
                           who, count, have);
  for (size_t i = 0; i < count; i++)
    if (!isfinite(params[i]))
      return shoal_error_set(err, SHOAL_ENAN, "%s: parameter %zu is not finite", who, i);
  memcpy(p, params, count * sizeof *p);
  return 0;
}

nn_optim *ac__optim(ac__net *n, onpolicy_optim kind, float lr, float eps, float alpha, float clip,
                    shoal_error *err) {
  nn_optim_config oc = nn_optim_defaults(kind == ONPOLICY_RMSPROP ? NN_RMSPROP : NN_ADAM);
  oc.lr = lr;
  oc.eps = eps;
  if (kind == ONPOLICY_RMSPROP) oc.alpha = alpha;
  oc.clip_norm = clip;
  return nn_optim_create(n->m, &oc, err);
}

/* ---- losses ---- */

void ppo_loss(const ppo_loss_in *in, const float *out, float *dout, onpolicy_stats *stats) {
  int N = in->N, A = in->A, D = in->D;
  int P = A > 0 ? A : 2 * D, od = P + 1;
  double pg_sum = 0, v_sum = 0, h_sum = 0, kl_sum = 0, clipped = 0;
  double inv = 1.0 / N;
  for (int i = 0; i < N; i++) {
    const float *o = out + (size_t)i * od;
    float *g = dout + (size_t)i * od;
    float h;
    float lp = A > 0 ? ac_logp_discrete(o, A, ((const int32_t *)in->action)[i], &h)
                     : ac_logp_gaussian(o, o + D, D, (const float *)in->action + (size_t)i * D, &h);
    double log_r = (double)lp - in->old_logp[i], r = exp(log_r);
    double adv = in->adv[i];
    double rc = fmin(fmax(r, 1.0 - in->clip), 1.0 + in->clip);
    double un = -adv * r, cl = -adv * rc;
    /* max(un, cl): the gradient flows through r only when the unclipped term is the
     * larger (when they tie, r is inside the clip range and both slopes agree). */
    double dlogp = (un >= cl ? -adv * r : 0.0) * inv;
    pg_sum += un >= cl ? un : cl;
    kl_sum += (r - 1.0) - log_r;
    if (fabs(r - 1.0) > in->clip) clipped++;
    h_sum += h;
    double dh = -(double)in->entropy_coef * inv; /* d loss / d H_i */
    if (A > 0) {
      double l = lse(o, A);
      int32_t a = ((const int32_t *)in->action)[i];
      for (int k = 0; k < A; k++) {
        double lpk = o[k] - l, p = exp(lpk);
        /* d log π(a) / d z_k = [k = a] − p_k; d H / d z_k = −p_k (log p_k + H). */
        g[k] = (float)(dlogp * ((k == a) - p) + dh * (-p * (lpk + h)));
      }
    } else {
      const float *a = (const float *)in->action + (size_t)i * D;
      for (int j = 0; j < D; j++) {
        double is2 = exp(-2.0 * o[D + j]), d = (double)a[j] - o[j];
        /* d log π / d μ = (a − μ) / σ², d log π / d log σ = (a − μ)² / σ² − 1, d H / d log σ = 1 */
        g[j] = (float)(dlogp * d * is2);
        g[D + j] = (float)(dlogp * (d * d * is2 - 1.0) + dh);
      }
    }
    double v = o[P], R = in->ret[i], dv;
    double eu = v - R;
    if (in->clip_value) {
      double vo = in->old_value[i];
      double vc = vo + fmin(fmax(v - vo, -(double)in->clip), (double)in->clip);
      double ec = vc - R;
      if (eu * eu >= ec * ec) {
        v_sum += 0.5 * eu * eu;
        dv = eu;
      } else {
        v_sum += 0.5 * ec * ec;
        dv = fabs(v - vo) < in->clip ? ec : 0.0;
      }
    } else {
      v_sum += 0.5 * eu * eu;
      dv = eu;
    }
    g[P] = (float)(in->value_coef * dv * inv);
  }
  if (stats) {
    stats->pg_loss = (float)(pg_sum * inv);
    stats->value_loss = (float)(v_sum * inv);
    stats->entropy = (float)(h_sum * inv);
    stats->loss = (float)((pg_sum - in->entropy_coef * h_sum + in->value_coef * v_sum) * inv);
    stats->approx_kl = (float)(kl_sum * inv);
    stats->clip_frac = (float)(clipped * inv);
  }
}

void impala_loss(int N, int A, const int32_t *action, const float *vs, const float *pg_adv,
                 float baseline_coef, float entropy_coef, const float *out, float *dout,
                 onpolicy_stats *stats) {
  int od = A + 1;
  double inv = 1.0 / N, pg_sum = 0, v_sum = 0, h_sum = 0;
  for (int i = 0; i < N; i++) {
    const float *o = out + (size_t)i * od;
    float *g = dout + (size_t)i * od;
    float h;
    float lp = ac_logp_discrete(o, A, action[i], &h);
    pg_sum += -(double)pg_adv[i] * lp;
    h_sum += h;
    double l = lse(o, A), dlogp = -(double)pg_adv[i] * inv, dh = -(double)entropy_coef * inv;
    for (int k = 0; k < A; k++) {
      double lpk = o[k] - l, p = exp(lpk);
      g[k] = (float)(dlogp * ((k == action[i]) - p) + dh * (-p * (lpk + h)));
    }
    double e = (double)o[A] - vs[i];
    v_sum += 0.5 * e * e;
    g[A] = (float)(baseline_coef * e * inv);
  }
  if (stats) {
    stats->pg_loss = (float)(pg_sum * inv);
    stats->value_loss = (float)(v_sum * inv);
    stats->entropy = (float)(h_sum * inv);
    stats->loss = (float)((pg_sum + baseline_coef * v_sum - entropy_coef * h_sum) * inv);
  }
}
