/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_ppo.c — the actor-critic losses by finite differences (PPO's clipped
 * surrogate and value clipping on both sides of the clip, discrete and Gaussian; the
 * IMPALA loss), log-probabilities by hand, act() (sampling frequencies, clipping to
 * the Box), learn() on small problems and bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"

/* Central differences of a loss of out (N x od) against the analytic dout; kinks are
 * avoided by the caller's data. Each entry's difference in double. */
typedef double (*loss_fn)(const float *out, void *ctx);

static void check_grad(loss_fn f, void *ctx, float *out, const float *dout, int n) {
  const float h = 1e-3f;
  for (int k = 0; k < n; k++) {
    float keep = out[k];
    out[k] = keep + h;
    double lp = f(out, ctx);
    out[k] = keep - h;
    double lm = f(out, ctx);
    out[k] = keep;
    double num = (lp - lm) / (2.0 * h);
    double tol = 2e-4 + 2e-2 * fabs(num);
    if (fabs(num - dout[k]) > tol)
      fail_msg("entry %d: analytic %.6g, finite difference %.6g", k, dout[k], num);
  }
}

typedef struct ppo_ctx {
  ppo_loss_in in;
  float *scratch;
} ppo_ctx;

static double ppo_f(const float *out, void *c) {
  ppo_ctx *x = c;
  onpolicy_stats st;
  ppo_loss(&x->in, out, x->scratch, &st);
  return st.loss;
}

/* Random outputs, old log-probs within ±0.6 of the new ones (so some ratios leave
 * [0.8, 1.2]) but at least 0.02 from the clip edges, old values ±0.5 from the values. */
static void ppo_grad_case(int A, int D, bool clip_value) {
  enum { N = 16 };
  int P = A > 0 ? A : 2 * D, od = P + 1;
  float out[N * 9], dout[N * 9], scratch[N * 9], old_logp[N], adv[N], ret[N], old_v[N];
  int32_t act_d[N];
  float act_c[N * 4];
  shoal_rng rng;
  shoal_rng_seed(&rng, (uint64_t)(A * 10 + D + clip_value));
  for (int i = 0; i < N * od; i++) out[i] = (float)(shoal_rng_normal(&rng) * 0.7);
  int clipped = 0, vclipped = 0;
  for (int i = 0; i < N; i++) {
    float *o = out + (size_t)i * od;
    if (A > 0) act_d[i] = (int32_t)shoal_rng_below(&rng, (uint64_t)A);
    for (int j = 0; j < D; j++) act_c[i * D + j] = o[j] + (float)shoal_rng_normal(&rng);
    float lp = A > 0 ? ac_logp_discrete(o, A, act_d[i], NULL)
                     : ac_logp_gaussian(o, o + D, D, act_c + i * D, NULL);
    double log_r;
    do log_r = (shoal_rng_uniform(&rng) * 2 - 1) * 0.6;
    while (fabs(exp(log_r) - 0.8) < 0.02 || fabs(exp(log_r) - 1.2) < 0.02);
    old_logp[i] = (float)(lp - log_r);
    if (fabs(exp(log_r) - 1) > 0.2) clipped++;
    adv[i] = (float)shoal_rng_normal(&rng);
    ret[i] = (float)shoal_rng_normal(&rng);
    double dv;
    do dv = (shoal_rng_uniform(&rng) * 2 - 1) * 0.5;
    while (fabs(fabs(dv) - 0.2) < 0.02);
    old_v[i] = o[P] - (float)dv;
    if (fabs(dv) > 0.2) vclipped++;
  }
  /* both sides of the ratio clip and of the value clip */
  if (!(clipped > 1 && clipped < N - 1 && vclipped > 1 && vclipped < N - 1))
    fail_msg("case A=%d D=%d: %d of %d ratios and %d values clipped", A, D, clipped, N, vclipped);
  ppo_ctx x = {{N, A, D, A > 0 ? (const void *)act_d : (const void *)act_c, old_logp, adv, ret,
                old_v, 0.2f, 0.05f, 0.5f, clip_value},
               scratch};
  onpolicy_stats st;
  ppo_loss(&x.in, out, dout, &st);
  assert_true(st.clip_frac > 0 && st.clip_frac < 1);
  assert_true(st.approx_kl > 0);
  check_grad(ppo_f, &x, out, dout, N * od);
}

static void test_ppo_loss_gradients(void **state) {
  ppo_grad_case(3, 0, true);
  ppo_grad_case(3, 0, false);
  ppo_grad_case(0, 2, true);
  ppo_grad_case(0, 1, false);
}

/* The loss itself on one sample by hand: logits (0, 0), action 0, old log-prob log 0.25
 * (ratio 2, clipped to 1.2), A = 1: surrogate −min(2, 1.2) = −1.2; V = 1, R = 0, V_old = 0.5:
 * unclipped 0.5·1, clipped V = 0.7 → 0.5·0.49, max = 0.5; entropy log 2. */
static void test_ppo_loss_by_hand(void **state) {
  float out[3] = {0, 0, 1}, dout[3];
  int32_t a = 0;
  float old_logp = logf(0.25f), adv = 1, ret = 0, old_v = 0.5f;
  ppo_loss_in in = {1, 2, 0, &a, &old_logp, &adv, &ret, &old_v, 0.2f, 0.01f, 0.5f, true};
  onpolicy_stats st;
  ppo_loss(&in, out, dout, &st);
  assert_float_equal(st.pg_loss, -1.2f, 1e-6);
  assert_float_equal(st.value_loss, 0.5f, 1e-6);
  assert_float_equal(st.entropy, logf(2), 1e-6);
  assert_float_equal(st.loss, -1.2f - 0.01f * logf(2) + 0.25f, 1e-6);
  assert_float_equal(st.clip_frac, 1.0f, 0);
  assert_float_equal(dout[0], 0.0f, 1e-7); /* clipped: no policy gradient, entropy's 0 at p = ½ */
  assert_float_equal(dout[2], 0.5f, 1e-6);
}

typedef struct imp_ctx {
  int N, A;
  const int32_t *act;
  const float *vs, *pg;
  float *scratch;
} imp_ctx;

static double imp_f(const float *out, void *c) {
  imp_ctx *x = c;
  onpolicy_stats st;
  impala_loss(x->N, x->A, x->act, x->vs, x->pg, 0.5f, 0.03f, out, x->scratch, &st);
  return st.loss;
}

static void test_impala_loss_gradients(void **state) {
  enum { N = 12, A = 4 };
  float out[N * (A + 1)], dout[N * (A + 1)], scratch[N * (A + 1)], vs[N], pg[N];
  int32_t act[N];
  shoal_rng rng;
  shoal_rng_seed(&rng, 9);
  for (int i = 0; i < N * (A + 1); i++) out[i] = (float)shoal_rng_normal(&rng);
  for (int i = 0; i < N; i++) {
    act[i] = (int32_t)shoal_rng_below(&rng, A);
    vs[i] = (float)shoal_rng_normal(&rng);
    pg[i] = (float)shoal_rng_normal(&rng);
  }
  onpolicy_stats st;
  impala_loss(N, A, act, vs, pg, 0.5f, 0.03f, out, dout, &st);
  imp_ctx x = {N, A, act, vs, pg, scratch};
  check_grad(imp_f, &x, out, dout, N * (A + 1));
  /* Its parts by hand for sample 0. */
  float h;
  float lp = ac_logp_discrete(out, A, act[0], &h);
  impala_loss(1, A, act, vs, pg, 0.5f, 0.03f, out, dout, &st);
  double e = out[A] - vs[0];
  assert_float_equal(st.pg_loss, -pg[0] * lp, 1e-5);
  assert_float_equal(st.value_loss, 0.5 * e * e, 1e-5);
  assert_float_equal(st.loss, -pg[0] * lp + 0.25 * e * e - 0.03 * h, 1e-5);
}

static void test_logp_by_hand(void **state) {
  float z[3] = {1, 2, 3}, h;
  double lse = log(exp(1) + exp(2) + exp(3));
  assert_float_equal(ac_logp_discrete(z, 3, 1, &h), 2 - lse, 1e-6);
  double hh = 0;
  for (int k = 0; k < 3; k++) hh -= exp(z[k] - lse) * (z[k] - lse);
  assert_float_equal(h, hh, 1e-6);
  /* N(0.5, e^{-1}) at 1: −0.5 (0.5 e)² + 1 − 0.5 log 2π; entropy 0.5 + 0.5 log 2π − 1. */
  float m = 0.5f, ls = -1, a = 1;
  double want = -0.5 * pow(0.5 * exp(1.0), 2) + 1 - 0.5 * log(2 * 3.14159265358979323846);
  assert_float_equal(ac_logp_gaussian(&m, &ls, 1, &a, &h), want, 1e-5);
  assert_float_equal(h, 0.5 + 0.5 * log(2 * 3.14159265358979323846) - 1, 1e-6);
}

/* Sampling frequencies follow the softmax; greedy takes the argmax; logp matches. */
static void test_act(void **state) {
  shoal_error err = {0};
  ac_config ac = ac_defaults();
  ac.obs_c = 2;
  ac.num_actions = 3;
  ac.max_batch = 1000;
  impala_config ic = impala_defaults();
  impala *l = impala_create(&ac, &ic, NN_CPU, false, &err);
  assert_non_null(l);
  /* All weights zero and the policy bias (0, log 2, log 5): p = (1, 2, 5) / 8. */
  size_t n;
  float *p = nn_model_params(impala_model(l), &n);
  memset(p, 0, n * sizeof *p);
  nn_tensor_info ti;
  assert_int_equal(nn_model_find_tensor(impala_model(l), "policy.bias", &ti), 0);
  p[ti.offset + 1] = logf(2);
  p[ti.offset + 2] = logf(5);
  enum { B = 1000 };
  static float obs[B * 2];
  static int32_t act[B];
  static float logp[B];
  shoal_rng rng;
  shoal_rng_seed(&rng, 3);
  int count[3] = {0};
  for (int rep = 0; rep < 8; rep++) {
    assert_int_equal(impala_act(l, obs, B, &rng, false, act, logp, &err), 0);
    for (int i = 0; i < B; i++) {
      count[act[i]]++;
      assert_float_equal(logp[i], logf((act[i] == 0 ? 1 : act[i] == 1 ? 2 : 5) / 8.0f), 1e-5);
    }
  }
  /* 8000 draws: binomial sd of each share is below 0.006. */
  assert_float_equal(count[0] / 8000.0, 1 / 8.0, 0.025);
  assert_float_equal(count[1] / 8000.0, 2 / 8.0, 0.025);
  assert_float_equal(count[2] / 8000.0, 5 / 8.0, 0.025);
  assert_int_equal(impala_act(l, obs, 4, &rng, true, act, NULL, &err), 0);
  assert_int_equal(act[0], 2);
  assert_int_equal(impala_act(l, obs, B + 1, &rng, true, act, NULL, &err), SHOAL_EINVAL);
  impala_destroy(l);
}

/* Gaussian: samples around the mean with std e^{log_std}, clipped for the env. */
static void test_act_continuous(void **state) {
  shoal_error err = {0};
  ac_config ac = ac_defaults();
  ac.obs_c = 3;
  ac.num_actions = 0;
  ac.act_dim = 1;
  ac.act_low[0] = -2;
  ac.act_high[0] = 2;
  ac.log_std_init = logf(1.5f);
  ac.max_batch = 2000;
  ppo_config pc = ppo_defaults();
  ppo *p = ppo_create(&ac, &pc, NN_CPU, false, &err);
  assert_non_null(p);
  size_t n;
  float *w = nn_model_params(ppo_model(p), &n);
  nn_tensor_info mean;
  assert_int_equal(nn_model_find_tensor(ppo_model(p), "mean.weight", &mean), 0);
  memset(w + mean.offset, 0, mean.numel * sizeof *w);
  assert_int_equal(nn_model_find_tensor(ppo_model(p), "mean.bias", &mean), 0);
  w[mean.offset] = 1.0f;
  enum { B = 2000 };
  static float obs[B * 3], a[B], ea[B], logp[B], v[B];
  for (int i = 0; i < B * 3; i++) obs[i] = (float)(i % 7) - 3;
  shoal_rng rng;
  shoal_rng_seed(&rng, 4);
  assert_int_equal(ppo_act(p, obs, B, &rng, false, a, ea, logp, v, &err), 0);
  double m = 0, s2 = 0;
  int clipped = 0;
  for (int i = 0; i < B; i++) {
    m += a[i];
    s2 += (a[i] - 1.0) * (a[i] - 1.0);
    assert_true(ea[i] >= -2 && ea[i] <= 2);
    if (a[i] > 2) {
      assert_float_equal(ea[i], 2, 0);
      clipped++;
    } else if (a[i] >= -2) {
      assert_float_equal(ea[i], a[i], 0);
    }
    float ls = logf(1.5f), mu = 1;
    assert_float_equal(logp[i], ac_logp_gaussian(&mu, &ls, 1, &a[i], NULL), 1e-4);
  }
  assert_float_equal(m / B, 1.0, 0.1);
  assert_float_equal(sqrt(s2 / B), 1.5, 0.1);
  assert_true(clipped > 100); /* P(a > 2) = P(z > 2/3) ≈ 0.25 */
  assert_int_equal(ppo_act(p, obs, 1, &rng, true, a, ea, NULL, NULL, &err), 0);
  assert_float_equal(a[0], 1.0f, 1e-6);
  ppo_destroy(p);
}

/* A two-armed contextual bandit as one-step episodes: PPO and IMPALA both learn to
 * pick the arm that pays in each context, and their values learn the payoff. */
static void fill_bandit(shoal_rng *rng, int T, int B, float *obs, int32_t *act, float *rew,
                        uint8_t *term, const int32_t *acted) {
  for (int i = 0; i < T * B; i++) {
    int ctx = obs[i * 2] > 0;
    rew[i] = acted[i] == ctx ? 1.0f : 0.0f;
    term[i] = 1;
    act[i] = acted[i];
  }
  (void)rng;
}

/* A dense-like custom layer (docs/custom-layers.md), y = s (x W^T + b) with a trained
 * scalar s that starts at 1, for ac.layer: the torso's dense layers become it. */
typedef struct scaled_conf {
  int out;
} scaled_conf;

static int scaled_shape(nn_layer_shape *s, shoal_error *err) {
  const scaled_conf *c = s->config;
  int in = s->in_C * s->in_H * s->in_W;
  s->C = c->out, s->H = s->W = 1;
  s->params[0] = (nn_param_spec){"weight", 2, {c->out, in}, true, NN_INIT_TORCH_DEFAULT};
  s->params[1] = (nn_param_spec){"bias", 1, {c->out}, true, NN_INIT_TORCH_DEFAULT, 0, 0, in};
  s->params[2] = (nn_param_spec){"scale", 0, {0}, true, NN_INIT_ONES};
  s->n_params = 3;
  s->cache_per_sample = (size_t)c->out; /* x W^T + b, before the scale */
  return 0;
}

static int scaled_forward(const nn_layer_call *c, shoal_error *err) {
  float s = c->t[2][0];
  for (int n = 0; n < c->B; n++)
    for (int o = 0; o < c->F; o++) {
      float z = c->t[1][o];
      for (int i = 0; i < c->in_F; i++) z += c->x[n * c->in_F + i] * c->t[0][o * c->in_F + i];
      c->cache[n * c->F + o] = z;
      c->y[n * c->F + o] = s * z;
    }
  return 0;
}

static void scaled_backward(const nn_layer_call *c) {
  float s = c->t[2][0];
  for (int n = 0; n < c->B; n++)
    for (int o = 0; o < c->F; o++) {
      float d = c->dy[n * c->F + o];
      c->g[2][0] += d * c->cache[n * c->F + o];
      c->g[1][o] += s * d;
      for (int i = 0; i < c->in_F; i++) c->g[0][o * c->in_F + i] += s * d * c->x[n * c->in_F + i];
    }
  if (!c->dx) return;
  for (int n = 0; n < c->B; n++)
    for (int i = 0; i < c->in_F; i++) {
      float g = 0;
      for (int o = 0; o < c->F; o++) g += s * c->dy[n * c->F + o] * c->t[0][o * c->in_F + i];
      c->dx[n * c->in_F + i] = c->dx_add ? c->dx[n * c->in_F + i] + g : g;
    }
}

static int scaled_dense_config(void *config, int out, shoal_error *err) {
  ((scaled_conf *)config)->out = out;
  return 0;
}

static const nn_layer_type scaled_type = {NN_LAYER_ABI,       "scaled_linear", sizeof(scaled_conf),
                                          scaled_shape,       scaled_forward,  scaled_backward,
                                          NULL,               NULL,            scaled_dense_config};

static void test_learns_a_bandit(void **state) {
  shoal_error rerr = {0};
  assert_int_equal(nn_layer_register(&scaled_type, &rerr), 0);
  /* nn's dense torso, then the custom layer in its place (ac.layer), each algorithm */
  for (int run = 0; run < 4; run++) {
    int algo = run % 2;
    bool custom = run >= 2;
    shoal_error err = {0};
    enum { T = 8, B = 16 };
    ac_config ac = ac_defaults();
    ac.obs_c = 2;
    ac.num_actions = 2;
    if (custom) snprintf(ac.layer, sizeof ac.layer, "scaled_linear");
    ppo_config pc = ppo_defaults();
    pc.T = T;
    pc.B = B;
    pc.lr = 3e-3f;
    impala_config ic = impala_defaults();
    ic.T = T;
    ic.B = B;
    ic.lr = 3e-3f;
    ppo *p = algo == 0 ? ppo_create(&ac, &pc, NN_CPU, true, &err) : NULL;
    impala *l = algo == 1 ? impala_create(&ac, &ic, NN_CPU, true, &err) : NULL;
    assert_true(p || l);
    if (custom) { /* the torso is the custom kind, with its own init under ortho_init */
      nn_model *m = p ? ppo_model(p) : impala_model(l);
      bool is_custom = false;
      const char *kind = nn_node_kind(m, nn_model_find_node(m, "actor_fc1"), &is_custom);
      assert_true(is_custom);
      assert_string_equal(kind, "scaled_linear");
      nn_tensor_info ti;
      assert_int_equal(nn_model_find_tensor(m, "critic_fc2.scale", &ti), 0);
      size_t np;
      assert_true(nn_model_params(m, &np)[ti.offset] == 1.0f);
      nn_model_find_node(m, "policy");
      assert_int_equal(nn_model_find_tensor(m, "policy.weight", &ti), 0);
      assert_true(nn_model_params(m, &np)[ti.offset] != 0.0f);
    }
    static float obs[(T + 1) * B * 2], rew[T * B], logp[T * B];
    static int32_t act[T * B], acted[T * B];
    static uint8_t term[T * B];
    shoal_rng rng;
    shoal_rng_seed(&rng, 2);
    onpolicy_stats st;
    for (int it = 0; it < 150; it++) {
      for (int i = 0; i < (T + 1) * B; i++) {
        obs[i * 2] = shoal_rng_uniform(&rng) < 0.5 ? 1.0f : -1.0f;
        obs[i * 2 + 1] = 0.5f;
      }
      for (int t = 0; t < T; t++) {
        int rc =
            p ? ppo_act(p, obs + t * B * 2, B, &rng, false, acted + t * B, NULL, logp + t * B, NULL,
                        &err)
              : impala_act(l, obs + t * B * 2, B, &rng, false, acted + t * B, logp + t * B, &err);
        assert_int_equal(rc, 0);
      }
      fill_bandit(&rng, T, B, obs, act, rew, term, acted);
      onpolicy_batch b = {T, B, obs, act, logp, rew, term, NULL, NULL};
      int rc = p ? ppo_learn(p, &b, &st, &err) : impala_learn(l, &b, &st, &err);
      assert_int_equal(rc, 0);
    }
    float o[4] = {1, 0.5f, -1, 0.5f}, lp[2];
    int32_t g[2];
    int rc = p ? ppo_act(p, o, 2, &rng, true, g, NULL, lp, NULL, &err)
               : impala_act(l, o, 2, &rng, true, g, lp, &err);
    assert_int_equal(rc, 0);
    assert_int_equal(g[0], 1);
    assert_int_equal(g[1], 0);
    assert_true(lp[0] > logf(0.9f) && lp[1] > logf(0.9f));
    if (p) { /* the value of either context approaches the arm's payoff, 1 */
      float v[2];
      assert_int_equal(ppo_act(p, o, 2, &rng, true, g, NULL, NULL, v, &err), 0);
      assert_true(v[0] > 0.8f && v[1] > 0.8f);
    }
    ppo_destroy(p);
    impala_destroy(l);
  }
  /* a kind nobody registered is named, with what is registered */
  ac_config bad = ac_defaults();
  bad.obs_c = 2;
  bad.num_actions = 2;
  snprintf(bad.layer, sizeof bad.layer, "nope");
  ppo_config pc = ppo_defaults();
  assert_null(ppo_create(&bad, &pc, NN_CPU, true, &rerr));
  assert_non_null(strstr(rerr.msg, "layer 'nope' is not a registered layer (registered: "));
  assert_non_null(strstr(rerr.msg, "scaled_linear"));
}

/* The log-std stays state-independent through learning (its weight stays zero). */
static void test_log_std_state_independent(void **state) {
  shoal_error err = {0};
  enum { T = 8, B = 4 };
  ac_config ac = ac_defaults();
  ac.obs_c = 3;
  ac.num_actions = 0;
  ac.act_dim = 2;
  ac.act_low[0] = ac.act_low[1] = -1;
  ac.act_high[0] = ac.act_high[1] = 1;
  ppo_config pc = ppo_defaults();
  pc.T = T;
  pc.B = B;
  pc.lr = 1e-2f;
  ppo *p = ppo_create(&ac, &pc, NN_CPU, true, &err);
  assert_non_null(p);
  static float obs[(T + 1) * B * 3], act[T * B * 2], logp[T * B], rew[T * B];
  static uint8_t term[T * B], trunc[T * B];
  static float fin[T * B * 3];
  shoal_rng rng;
  shoal_rng_seed(&rng, 8);
  for (int i = 0; i < (T + 1) * B * 3; i++) obs[i] = (float)shoal_rng_normal(&rng);
  for (int i = 0; i < T * B * 3; i++) fin[i] = (float)shoal_rng_normal(&rng);
  for (int t = 0; t < T; t++)
    assert_int_equal(ppo_act(p, obs + t * B * 3, B, &rng, false, act + t * B * 2, NULL,
                             logp + t * B, NULL, &err),
                     0);
  for (int i = 0; i < T * B; i++) {
    rew[i] = -fabsf(act[i * 2]);
    trunc[i] = i % 7 == 3;
  }
  onpolicy_batch b = {T, B, obs, act, logp, rew, term, trunc, fin};
  onpolicy_stats st;
  for (int k = 0; k < 5; k++) assert_int_equal(ppo_learn(p, &b, &st, &err), 0);
  nn_tensor_info w, bias;
  assert_int_equal(nn_model_find_tensor(ppo_model(p), "log_std.weight", &w), 0);
  assert_int_equal(nn_model_find_tensor(ppo_model(p), "log_std.bias", &bias), 0);
  size_t n;
  float *prm = nn_model_params(ppo_model(p), &n);
  for (size_t i = 0; i < w.numel; i++) assert_float_equal(prm[w.offset + i], 0, 0);
  assert_true(prm[bias.offset] != 0); /* it learned */
  ppo_destroy(p);
}

/* The MinAtar torso (conv 16 3x3 -> dense 128) on (4, 10, 10) grids: IMPALA learns, with
 * truncations bootstrapped from final observations, and its loss falls on a fixed batch. */
static void test_minatar_torso(void **state) {
  shoal_error err = {0};
  enum { T = 5, B = 4, OBS = 4 * 10 * 10 };
  ac_config ac = ac_defaults();
  ac.obs_c = 4;
  ac.obs_h = ac.obs_w = 10;
  ac.num_actions = 3;
  ac.torso = AC_TORSO_MINATAR;
  ac.separate = false;
  ac.ortho_init = false;
  impala_config ic = impala_defaults();
  ic.T = T;
  ic.B = B;
  ic.optim = ONPOLICY_RMSPROP;
  ic.lr = 1e-3f;
  ic.eps = 0.01f;
  impala *l = impala_create(&ac, &ic, NN_CPU, true, &err);
  assert_non_null(l);
  assert_true(nn_model_find_node(impala_model(l), "conv1") >= 0);
  static float obs[(T + 1) * B * OBS], fin[T * B * OBS], logp[T * B], rew[T * B];
  static int32_t act[T * B];
  static uint8_t term[T * B], trunc[T * B];
  shoal_rng rng;
  shoal_rng_seed(&rng, 6);
  for (int i = 0; i < (T + 1) * B * OBS; i++) obs[i] = shoal_rng_uniform(&rng) < 0.1 ? 1.0f : 0;
  for (int i = 0; i < T * B * OBS; i++) fin[i] = shoal_rng_uniform(&rng) < 0.1 ? 1.0f : 0;
  for (int t = 0; t < T; t++)
    assert_int_equal(
        impala_act(l, obs + t * B * OBS, B, &rng, false, act + t * B, logp + t * B, &err), 0);
  for (int i = 0; i < T * B; i++) {
    rew[i] = act[i] == 1 ? 1.0f : 0.0f;
    term[i] = i == 9;
    trunc[i] = i == 13;
  }
  onpolicy_batch b = {T, B, obs, act, logp, rew, term, trunc, fin};
  onpolicy_stats first, st;
  assert_int_equal(impala_learn(l, &b, &first, &err), 0);
  assert_float_equal(first.mean_rho, 1.0f, 1e-4); /* on-policy: π = μ before the step */
  for (int k = 0; k < 30; k++) assert_int_equal(impala_learn(l, &b, &st, &err), 0);
  assert_true(st.value_loss < first.value_loss);
  assert_true(st.mean_rho != 1.0f); /* the policy moved away from the behaviour */
  impala_destroy(l);
}

/* target_kl stops the epochs early: with a huge learning rate the first epoch's KL
 * exceeds a tiny target and only its minibatches are taken. */
static void test_target_kl(void **state) {
  shoal_error err = {0};
  enum { T = 8, B = 4 };
  ac_config ac = ac_defaults();
  ac.obs_c = 2;
  ppo_config pc = ppo_defaults();
  pc.T = T;
  pc.B = B;
  pc.minibatches = 2;
  pc.epochs = 10;
  pc.lr = 0.05f;
  pc.target_kl = 1e-6f;
  ppo *p = ppo_create(&ac, &pc, NN_CPU, true, &err);
  assert_non_null(p);
  static float obs[(T + 1) * B * 2], logp[T * B], rew[T * B];
  static int32_t act[T * B];
  static uint8_t term[T * B];
  shoal_rng rng;
  shoal_rng_seed(&rng, 12);
  for (int i = 0; i < (T + 1) * B * 2; i++) obs[i] = (float)shoal_rng_normal(&rng);
  for (int t = 0; t < T; t++)
    assert_int_equal(
        ppo_act(p, obs + t * B * 2, B, &rng, false, act + t * B, NULL, logp + t * B, NULL, &err),
        0);
  for (int i = 0; i < T * B; i++) rew[i] = (float)act[i];
  onpolicy_batch b = {T, B, obs, act, logp, rew, term, NULL, NULL};
  onpolicy_stats st;
  assert_int_equal(ppo_learn(p, &b, &st, &err), 0);
  assert_int_equal(st.updates, 2); /* one epoch of 2 minibatches */
  ppo_destroy(p);
}

static void test_bad_input(void **state) {
  shoal_error err = {0};
  ac_config ac = ac_defaults();
  ac.obs_c = 2;
  ac.num_actions = 2;
  ppo_config pc = ppo_defaults();
  pc.T = 4;
  pc.B = 2;
  pc.minibatches = 3;
  assert_null(ppo_create(&ac, &pc, NN_CPU, true, &err));
  assert_non_null(strstr(err.msg, "minibatches"));
  pc.minibatches = 2;
  ac.act_dim = 1;
  assert_null(ppo_create(&ac, &pc, NN_CPU, true, &err));
  assert_non_null(strstr(err.msg, "exactly one"));
  ac.act_dim = 0;
  ppo *p = ppo_create(&ac, &pc, NN_CPU, true, &err);
  impala_config ic = impala_defaults();
  ic.T = 4;
  ic.B = 2;
  impala *l = impala_create(&ac, &ic, NN_CPU, true, &err);
  assert_non_null(p);
  assert_non_null(l);
  float obs[5 * 2 * 2] = {0}, logp[8] = {0}, rew[8] = {0};
  int32_t act[8] = {0, 1, 0, 1, 0, 1, 0, 2};
  uint8_t term[8] = {0};
  onpolicy_batch b = {4, 2, obs, act, logp, rew, term, NULL, NULL};
  onpolicy_stats st;
  assert_int_equal(ppo_learn(p, &b, &st, &err), SHOAL_ERANGE);
  assert_non_null(strstr(err.msg, "row 7"));
  assert_int_equal(impala_learn(l, &b, &st, &err), SHOAL_ERANGE);
  act[7] = 1;
  rew[3] = NAN;
  assert_int_equal(ppo_learn(p, &b, &st, &err), SHOAL_ENAN);
  assert_int_equal(impala_learn(l, &b, &st, &err), SHOAL_ENAN);
  rew[3] = 0;
  obs[19] = NAN; /* the bootstrap row */
  assert_int_equal(impala_learn(l, &b, &st, &err), SHOAL_ENAN);
  assert_int_equal(ppo_learn(p, &b, &st, &err), SHOAL_ENAN);
  obs[19] = 0;
  b.T = 5;
  assert_int_equal(impala_learn(l, &b, &st, &err), SHOAL_EINVAL);
  b.T = 4;
  assert_int_equal(impala_learn(l, &b, &st, &err), 0);
  assert_int_equal(ppo_learn(p, &b, &st, &err), 0);
  size_t n;
  float *prm = nn_model_params(ppo_model(p), &n);
  float *copy = malloc(n * sizeof *copy);
  memcpy(copy, prm, n * sizeof *copy);
  assert_int_equal(ppo_load_params(p, copy, n - 1, &err), SHOAL_ESHAPE);
  copy[3] = NAN;
  assert_int_equal(ppo_load_params(p, copy, n, &err), SHOAL_ENAN);
  free(copy);
  ppo *actor = ppo_create(&ac, &pc, NN_CPU, false, &err);
  assert_int_equal(ppo_learn(actor, &b, &st, &err), SHOAL_ESTATE);
  ppo_destroy(actor);
  ppo_destroy(p);
  impala_destroy(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ppo_loss_gradients),
      cmocka_unit_test(test_ppo_loss_by_hand),
      cmocka_unit_test(test_impala_loss_gradients),
      cmocka_unit_test(test_logp_by_hand),
      cmocka_unit_test(test_act),
      cmocka_unit_test(test_act_continuous),
      cmocka_unit_test(test_learns_a_bandit),
      cmocka_unit_test(test_log_std_state_independent),
      cmocka_unit_test(test_minatar_torso),
      cmocka_unit_test(test_target_kl),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
