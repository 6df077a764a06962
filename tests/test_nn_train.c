/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_nn_train.c — losses, optimizers, gradient clipping, schedules and
 * initialisers. Reference values come from PyTorch 1.13 through the fixtures that
 * tests/reference/nn_train.py writes; gradients are also checked by central differences.
 * Two end-to-end tests train small models (spirals, a sine) to a stated accuracy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "nn_train_fixture.h"

static fx_file LOSSES, OPTIM;

static int setup(void **state) {
  if (fx_load(&LOSSES, "losses.txt") || fx_load(&OPTIM, "optim.txt")) return -1;
  return 0;
}
static int teardown(void **state) {
  fx_free(&LOSSES);
  fx_free(&OPTIM);
  return 0;
}

/* |a - b| <= atol + rtol |b|, with the name and index in the failure message. */
static void assert_close(const char *what, int i, double a, double b, double atol, double rtol) {
  if (!(fabs(a - b) <= atol + rtol * fabs(b)))
    fail_msg("%s[%d]: got %.9g, expected %.9g (diff %.3g)", what, i, a, b, fabs(a - b));
}

static const double *need(const fx_file *fx, const char *name, int n_expected) {
  int n = -1;
  const double *v = fx_get(fx, name, &n);
  if (!v) fail_msg("fixture has no '%s'", name);
  if (n_expected >= 0 && n != n_expected)
    fail_msg("fixture '%s' has %d values, expected %d", name, n, n_expected);
  return v;
}

/* ---- losses against PyTorch ------------------------------------------------------ */

enum { B = 6, N = 5, C = 4 };

typedef int (*float_loss_fn)(float *, float *, const float *, const float *, const float *, int,
                             int, shoal_error *);

static int huber1(float *l, float *d, const float *p, const float *t, const float *w, int b, int n,
                  shoal_error *e) {
  return nn_huber_loss(l, d, p, t, w, b, n, 1.0f, e);
}
static int huber05(float *l, float *d, const float *p, const float *t, const float *w, int b, int n,
                   shoal_error *e) {
  return nn_huber_loss(l, d, p, t, w, b, n, 0.5f, e);
}

static void check_against_torch(const char *name, float_loss_fn fn, const char *xname,
                                const char *tname, int b, int n) {
  float *x = fx_floats(&LOSSES, xname, NULL), *t = fx_floats(&LOSSES, tname, NULL);
  float *w = fx_floats(&LOSSES, "reg.w", NULL);
  assert_non_null(x);
  assert_non_null(t);
  float grad[64];
  for (int weighted = 0; weighted < 2; weighted++) {
    char key[64];
    float loss = -1;
    shoal_error err = {0};
    assert_int_equal(fn(&loss, grad, x, t, weighted ? w : NULL, b, n, &err), 0);
    snprintf(key, sizeof key, "%s%s.loss", name, weighted ? ".w" : "");
    assert_close(key, 0, loss, need(&LOSSES, key, 1)[0], 1e-7, 1e-6);
    snprintf(key, sizeof key, "%s%s.grad", name, weighted ? ".w" : "");
    const double *g = need(&LOSSES, key, b * n);
    for (int i = 0; i < b * n; i++) assert_close(key, i, grad[i], g[i], 1e-8, 1e-5);
  }
  free(x);
  free(t);
  free(w);
}

static void test_losses_match_torch(void **state) {
  check_against_torch("mse", nn_mse_loss, "reg.pred", "reg.target", B, N);
  check_against_torch("huber1", huber1, "reg.pred", "reg.target", B, N);
  check_against_torch("huber05", huber05, "reg.pred", "reg.target", B, N);
  check_against_torch("bce", nn_bce_with_logits_loss, "bce.logits", "bce.target", B, N);
  check_against_torch("ces", nn_cross_entropy_soft_loss, "ce.logits", "ce.probs", B, C);
}

static void test_cross_entropy_matches_torch(void **state) {
  float *x = fx_floats(&LOSSES, "ce.logits", NULL), *w = fx_floats(&LOSSES, "reg.w", NULL);
  const double *lab = need(&LOSSES, "ce.labels", B);
  int32_t labels[B];
  for (int i = 0; i < B; i++) labels[i] = (int32_t)lab[i];
  float grad[B * C];
  for (int weighted = 0; weighted < 2; weighted++) {
    float loss;
    assert_int_equal(nn_cross_entropy_loss(&loss, grad, x, labels, weighted ? w : NULL, B, C, NULL),
                     0);
    const char *lk = weighted ? "ce.w.loss" : "ce.loss", *gk = weighted ? "ce.w.grad" : "ce.grad";
    assert_close(lk, 0, loss, need(&LOSSES, lk, 1)[0], 1e-7, 1e-6);
    const double *g = need(&LOSSES, gk, B * C);
    for (int i = 0; i < B * C; i++) assert_close(gk, i, grad[i], g[i], 1e-8, 1e-5);
  }
  free(x);
  free(w);
}

/* ---- losses: central differences ---------------------------------------------------- */

typedef struct fd_case {
  const char *name;
  int kind; /* 0 mse, 1 huber, 2 bce, 3 ce soft, 4 ce labels */
} fd_case;

static int eval_loss(int kind, float *loss, float *grad, const float *x, const float *t,
                     const int32_t *lab, const float *w, int b, int n) {
  switch (kind) {
    case 0: return nn_mse_loss(loss, grad, x, t, w, b, n, NULL);
    case 1: return nn_huber_loss(loss, grad, x, t, w, b, n, 0.7f, NULL);
    case 2: return nn_bce_with_logits_loss(loss, grad, x, t, w, b, n, NULL);
    case 3: return nn_cross_entropy_soft_loss(loss, grad, x, t, w, b, n, NULL);
    default: return nn_cross_entropy_loss(loss, grad, x, lab, w, b, n, NULL);
  }
}

static void test_losses_finite_differences(void **state) {
  enum { b = 4, n = 5 };
  const char *names[] = {"mse", "huber", "bce", "ce_soft", "ce"};
  shoal_rng rng;
  shoal_rng_seed(&rng, 11);
  for (int kind = 0; kind < 5; kind++)
    for (int weighted = 0; weighted < 2; weighted++) {
      float x[b * n], t[b * n], w[b], grad[b * n];
      int32_t lab[b];
      for (int i = 0; i < b * n; i++) {
        x[i] = (float)(2 * shoal_rng_normal(&rng));
        t[i] = kind == 2 ? shoal_rng_uniformf(&rng) : (float)shoal_rng_normal(&rng);
        /* keep Huber's residuals away from its kink at |d| = 0.7 */
        if (kind == 1 && fabsf(fabsf(x[i] - t[i]) - 0.7f) < 0.05f) x[i] += 0.2f;
      }
      if (kind == 3) /* soft targets: rows of probabilities */
        for (int i = 0; i < b; i++) {
          float s = 0;
          for (int j = 0; j < n; j++) s += t[i * n + j] = shoal_rng_uniformf(&rng) + 0.1f;
          for (int j = 0; j < n; j++) t[i * n + j] /= s;
        }
      for (int i = 0; i < b; i++) {
        w[i] = 0.5f + shoal_rng_uniformf(&rng);
        lab[i] = (int32_t)shoal_rng_below(&rng, n);
      }
      const float *wp = weighted ? w : NULL;
      float loss;
      assert_int_equal(eval_loss(kind, &loss, grad, x, t, lab, wp, b, n), 0);
      const float h = 5e-3f;
      for (int i = 0; i < b * n; i++) {
        float xi = x[i], lp, lm;
        x[i] = xi + h;
        assert_int_equal(eval_loss(kind, &lp, NULL, x, t, lab, wp, b, n), 0);
        x[i] = xi - h;
        assert_int_equal(eval_loss(kind, &lm, NULL, x, t, lab, wp, b, n), 0);
        x[i] = xi;
        double fd = ((double)lp - lm) / (2.0 * ((double)(xi + h) - xi));
        char what[64];
        snprintf(what, sizeof what, "%s%s d/dx", names[kind], weighted ? " weighted" : "");
        assert_close(what, i, grad[i], fd, 2e-4, 1e-2);
      }
    }
}

static void test_losses_are_stable_for_large_logits(void **state) {
  float x[4] = {1000.0f, -1000.0f, 88.0f, -88.0f}, t[4] = {0.0f, 1.0f, 1.0f, 0.0f}, g[4], loss;
  assert_int_equal(nn_bce_with_logits_loss(&loss, g, x, t, NULL, 1, 4, NULL), 0);
  /* two terms of 1000 (confidently wrong) and two of ~exp(-88) */
  assert_close("bce", 0, loss, 500.0, 1e-3, 1e-6);
  assert_close("bce grad", 0, g[0], 0.25, 1e-7, 0);
  assert_close("bce grad", 1, g[1], -0.25, 1e-7, 0);
  assert_close("bce grad", 2, g[2], 0.0, 1e-7, 0);
  float logits[3] = {1000.0f, 999.0f, -1000.0f};
  int32_t lab = 1;
  assert_int_equal(nn_cross_entropy_loss(&loss, g, logits, &lab, NULL, 1, 3, NULL), 0);
  /* logsumexp = 1000 + log(1 + e^-1); minus 999 */
  assert_close("ce", 0, loss, 1.0 + log1p(exp(-1.0)), 1e-5, 1e-6);
  assert_close("ce grad", 1, g[1], 1.0 / (1.0 + exp(1.0)) - 1.0, 1e-6, 1e-5);
}

static void test_losses_reject_bad_input(void **state) {
  float p[4] = {1, 2, 3, 4}, t[4] = {0, 0, 0, 0}, w[2] = {1, 1}, g[4] = {7, 7, 7, 7};
  float loss = 42.0f;
  shoal_error err = {0};
  p[3] = NAN;
  assert_int_equal(nn_mse_loss(&loss, g, p, t, NULL, 2, 2, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "prediction[3]"));
  p[3] = 4;
  t[1] = INFINITY;
  assert_int_equal(nn_huber_loss(&loss, g, p, t, NULL, 2, 2, 1.0f, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "target[1]"));
  t[1] = 0;
  w[1] = NAN;
  assert_int_equal(nn_bce_with_logits_loss(&loss, g, p, t, w, 2, 2, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "weight[1]"));
  w[1] = 1;
  /* finite inputs whose loss overflows float */
  float big[2] = {3e38f, -3e38f}, zero[2] = {-3e38f, 3e38f};
  assert_int_equal(nn_mse_loss(&loss, g, big, zero, NULL, 1, 2, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "loss"));
  int32_t lab[2] = {0, 2};
  assert_int_equal(nn_cross_entropy_loss(&loss, g, p, lab, NULL, 2, 2, &err), SHOAL_ERANGE);
  assert_non_null(strstr(err.msg, "label[1] = 2"));
  lab[1] = -1;
  assert_int_equal(nn_cross_entropy_loss(&loss, g, p, lab, NULL, 2, 2, &err), SHOAL_ERANGE);
  assert_int_equal(nn_mse_loss(&loss, g, p, t, NULL, 0, 2, &err), SHOAL_EINVAL);
  assert_int_equal(nn_mse_loss(&loss, g, NULL, t, NULL, 2, 2, &err), SHOAL_EINVAL);
  assert_int_equal(nn_huber_loss(&loss, g, p, t, NULL, 2, 2, 0.0f, &err), SHOAL_EINVAL);
  /* nothing written on error */
  assert_true(loss == 42.0f);
  for (int i = 0; i < 4; i++) assert_true(g[i] == 7.0f);
  /* dpred NULL: loss only */
  assert_int_equal(nn_mse_loss(&loss, NULL, p, t, NULL, 2, 2, &err), 0);
  assert_close("mse", 0, loss, (1 + 4 + 9 + 16) / 4.0, 0, 1e-7);
}

/* ---- optimizers against PyTorch ------------------------------------------------------ */

enum { NP = 27, STEPS = 10 };

static void run_optimizer(const char *name, nn_optim_config cfg) {
  float p[NP], g[NP];
  const double *p0 = need(&OPTIM, "opt.p0", NP);
  for (int i = 0; i < NP; i++) p[i] = (float)p0[i];
  shoal_error err = {0};
  nn_optim *o = nn_optim_create_buffers(p, g, NP, &cfg, &err);
  if (!o) fail_msg("%s: %s", name, err.msg);
  for (int t = 0; t < STEPS; t++) {
    char key[64];
    snprintf(key, sizeof key, "opt.g%d", t);
    const double *gt = need(&OPTIM, key, NP);
    for (int i = 0; i < NP; i++) g[i] = (float)gt[i];
    assert_int_equal(nn_optim_step(o, &err), 0);
    if (cfg.clip_norm > 0) {
      snprintf(key, sizeof key, "%s.norm%d", name, t);
      assert_close(key, t, nn_optim_last_grad_norm(o), need(&OPTIM, key, 1)[0], 0, 1e-6);
    }
    snprintf(key, sizeof key, "%s.p%d", name, t);
    const double *ref = need(&OPTIM, key, NP);
    for (int i = 0; i < NP; i++) assert_close(key, i, p[i], ref[i], 1e-7, 1e-6);
  }
  assert_int_equal(nn_optim_steps(o), STEPS);
  nn_optim_destroy(o);
}

static void test_optimizers_match_torch(void **state) {
  nn_optim_config c = nn_optim_defaults(NN_SGD);
  c.lr = 0.1f;
  run_optimizer("sgd", c);
  c.lr = 0.05f, c.momentum = 0.9f, c.weight_decay = 0.01f;
  run_optimizer("sgd_mom", c);
  c = nn_optim_defaults(NN_SGD);
  c.lr = 0.05f, c.momentum = 0.8f, c.dampening = 0.3f;
  run_optimizer("sgd_damp", c);
  c = nn_optim_defaults(NN_SGD);
  c.lr = 0.05f, c.momentum = 0.9f, c.nesterov = true, c.weight_decay = 0.001f;
  run_optimizer("sgd_nesterov", c);
  c = nn_optim_defaults(NN_SGD);
  c.lr = 0.1f, c.momentum = 0.9f, c.clip_norm = 0.5f;
  run_optimizer("sgd_clip", c);

  c = nn_optim_defaults(NN_ADAM);
  c.lr = 0.01f;
  run_optimizer("adam", c);
  c.clip_norm = 1.5f;
  run_optimizer("adam_clip", c);
  c = nn_optim_defaults(NN_ADAM);
  c.lr = 0.01f, c.beta1 = 0.8f, c.beta2 = 0.99f, c.eps = 1e-6f, c.weight_decay = 0.05f;
  run_optimizer("adam_wd", c);
  c = nn_optim_defaults(NN_ADAMW);
  c.lr = 0.01f, c.weight_decay = 0.1f;
  run_optimizer("adamw", c);

  c = nn_optim_defaults(NN_RMSPROP);
  run_optimizer("rmsprop", c);
  c.lr = 0.005f, c.alpha = 0.9f, c.eps = 1e-6f, c.weight_decay = 0.01f, c.momentum = 0.5f;
  c.centered = true;
  run_optimizer("rmsprop_full", c);
}

static void test_optimizer_defaults_are_torchs(void **state) {
  nn_optim_config a = nn_optim_defaults(NN_ADAM), w = nn_optim_defaults(NN_ADAMW);
  nn_optim_config r = nn_optim_defaults(NN_RMSPROP), s = nn_optim_defaults(NN_SGD);
  assert_true(a.lr == 1e-3f && a.beta1 == 0.9f && a.beta2 == 0.999f && a.eps == 1e-8f);
  assert_true(a.weight_decay == 0 && a.clip_norm == 0);
  assert_true(w.weight_decay == 0.01f && w.lr == 1e-3f);
  assert_true(r.lr == 0.01f && r.alpha == 0.99f && r.eps == 1e-8f && !r.centered);
  assert_true(s.lr == 0.01f && s.momentum == 0 && s.dampening == 0 && !s.nesterov);
}

/* A buffer of several chunks (nn/optim.c walks 32768 elements at a time, on nn's threads
 * when there are two): one thread and two give the same bits, the norm is the buffer's,
 * and a NaN in the last, partial chunk is found. */
static void test_optimizer_large_buffer_threads(void **state) {
  (void)state;
  enum { N = 200003 };
  float *p[2], *g[2];
  for (int r = 0; r < 2; r++) {
    p[r] = malloc(N * sizeof(float));
    g[r] = malloc(N * sizeof(float));
    assert_non_null(p[r]);
    assert_non_null(g[r]);
  }
  const nn_optim_kind kinds[] = {NN_ADAM, NN_ADAMW, NN_SGD, NN_RMSPROP};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    nn_optim_config c = nn_optim_defaults(kinds[k]);
    c.clip_norm = 1.0f;
    c.weight_decay = 0.01f;
    nn_optim *o[2];
    for (int r = 0; r < 2; r++) {
      for (int i = 0; i < N; i++) p[r][i] = 0.001f * (float)(i % 977) - 0.4f;
      o[r] = nn_optim_create_buffers(p[r], g[r], N, &c, NULL);
      assert_non_null(o[r]);
    }
    for (int t = 0; t < 3; t++) {
      double ss = 0;
      for (int r = 0; r < 2; r++) {
        nn_set_threads(r + 1);
        for (int i = 0; i < N; i++) g[r][i] = 0.01f * (float)((i * 7 + t * 13) % 101 - 50);
        if (r == 0)
          for (int i = 0; i < N; i++) ss += (double)g[0][i] * g[0][i];
        assert_int_equal(nn_optim_step(o[r], NULL), 0);
      }
      assert_close("norm", t, nn_optim_last_grad_norm(o[0]), sqrt(ss), 0, 1e-6);
      assert_true(nn_optim_last_grad_norm(o[0]) == nn_optim_last_grad_norm(o[1]));
      assert_memory_equal(p[0], p[1], N * sizeof(float));
    }
    g[1][N - 1] = NAN;
    shoal_error err = {0};
    assert_int_equal(nn_optim_step(o[1], &err), SHOAL_ENAN);
    assert_non_null(strstr(err.msg, "gradient[200002]"));
    for (int r = 0; r < 2; r++) nn_optim_destroy(o[r]);
  }
  nn_set_threads(1);
  for (int r = 0; r < 2; r++) free(p[r]), free(g[r]);
}

static void test_optimizer_skips_non_finite_gradient(void **state) {
  float p[NP], g[NP], q[NP], h[NP];
  for (int kind = NN_SGD; kind <= NN_RMSPROP; kind++) {
    nn_optim_config c = nn_optim_defaults((nn_optim_kind)kind);
    c.momentum = kind == NN_SGD || kind == NN_RMSPROP ? 0.9f : 0.0f;
    c.clip_norm = 1.0f;
    for (int i = 0; i < NP; i++) p[i] = q[i] = 0.1f * i, g[i] = h[i] = 0.3f - 0.02f * i;
    nn_optim *o = nn_optim_create_buffers(p, g, NP, &c, NULL);
    nn_optim *ref = nn_optim_create_buffers(q, h, NP, &c, NULL);
    assert_non_null(o);
    assert_non_null(ref);
    g[5] = NAN;
    shoal_error err = {0};
    assert_int_equal(nn_optim_step(o, &err), SHOAL_ENAN);
    assert_non_null(strstr(err.msg, "gradient[5]"));
    assert_int_equal(nn_optim_steps(o), 0);
    for (int i = 0; i < NP; i++) assert_true(p[i] == 0.1f * i);
    g[5] = INFINITY;
    assert_int_equal(nn_optim_step(o, NULL), SHOAL_ENAN);
    /* after the skipped steps, the optimizer behaves as if they never happened */
    g[5] = h[5];
    assert_int_equal(nn_optim_step(o, NULL), 0);
    assert_int_equal(nn_optim_step(ref, NULL), 0);
    assert_memory_equal(p, q, sizeof p);
    nn_optim_destroy(o);
    nn_optim_destroy(ref);
  }
}

static void test_optimizer_rejects_bad_config(void **state) {
  float p[2] = {0}, g[2] = {0};
  shoal_error err = {0};
  nn_optim_config c = nn_optim_defaults(NN_SGD);
  c.lr = -1;
  assert_null(nn_optim_create_buffers(p, g, 2, &c, &err));
  assert_int_equal(err.code, SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "lr"));
  c = nn_optim_defaults(NN_SGD);
  c.nesterov = true;
  assert_null(nn_optim_create_buffers(p, g, 2, &c, &err));
  assert_non_null(strstr(err.msg, "nesterov"));
  c = nn_optim_defaults(NN_ADAM);
  c.beta2 = 1.0f;
  assert_null(nn_optim_create_buffers(p, g, 2, &c, &err));
  assert_non_null(strstr(err.msg, "betas"));
  c = nn_optim_defaults(NN_RMSPROP);
  c.eps = NAN;
  assert_null(nn_optim_create_buffers(p, g, 2, &c, &err));
  c = nn_optim_defaults(NN_ADAM);
  c.clip_norm = -1;
  assert_null(nn_optim_create_buffers(p, g, 2, &c, &err));
  assert_null(nn_optim_create_buffers(p, g, 0, &c, &err));
  assert_null(nn_optim_create(NULL, &c, &err));
  nn_optim_destroy(NULL);
}

static void test_set_lr_and_reset(void **state) {
  float p[2] = {1, 2}, g[2] = {0.5f, -0.5f};
  nn_optim_config c = nn_optim_defaults(NN_SGD);
  nn_optim *o = nn_optim_create_buffers(p, g, 2, &c, NULL);
  assert_non_null(o);
  assert_true(nn_optim_lr(o) == 0.01f);
  nn_optim_set_lr(o, 2.0f);
  assert_int_equal(nn_optim_step(o, NULL), 0);
  assert_true(p[0] == 0.0f && p[1] == 3.0f);
  nn_optim_set_lr(o, NAN);
  shoal_error err = {0};
  assert_int_equal(nn_optim_step(o, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "lr"));
  assert_true(p[0] == 0.0f && p[1] == 3.0f);
  nn_optim_destroy(o);
  /* Adam's first step moves each parameter by lr (m / sqrt(v) = sign g), and again
   * after a reset, whatever came before */
  c = nn_optim_defaults(NN_ADAM);
  c.lr = 0.1f;
  p[0] = 0, p[1] = 0;
  o = nn_optim_create_buffers(p, g, 2, &c, NULL);
  assert_int_equal(nn_optim_step(o, NULL), 0);
  assert_close("adam step 1", 0, p[0], -0.1, 1e-6, 0);
  assert_close("adam step 1", 1, p[1], 0.1, 1e-6, 0);
  g[0] = 100, g[1] = -0.001f;
  assert_int_equal(nn_optim_step(o, NULL), 0);
  nn_optim_reset(o);
  assert_int_equal(nn_optim_steps(o), 0);
  float p0 = p[0], p1 = p[1];
  assert_int_equal(nn_optim_step(o, NULL), 0);
  assert_close("adam after reset", 0, p[0], p0 - 0.1, 1e-6, 0);
  assert_close("adam after reset", 1, p[1], p1 + 0.1, 1e-6, 0);
  nn_optim_destroy(o);
}

static void test_clip_grad_norm(void **state) {
  float g[2] = {3, 4};
  float n = nn_clip_grad_norm(g, 2, 1.0f);
  assert_true(n == 5.0f);
  /* torch scales by max / (norm + 1e-6) */
  assert_close("clipped", 0, g[0], 3.0 / (5.0 + 1e-6), 1e-7, 0);
  assert_close("clipped", 1, g[1], 4.0 / (5.0 + 1e-6), 1e-7, 0);
  float h[3] = {0.1f, 0.2f, -0.2f};
  n = nn_clip_grad_norm(h, 3, 1.0f);
  assert_close("norm", 0, n, 0.3, 1e-7, 0);
  assert_true(h[0] == 0.1f && h[1] == 0.2f && h[2] == -0.2f); /* below max: untouched */
  /* a large buffer: the norm is summed in double, so 1e6 ones give exactly 1000 */
  enum { M = 1000000 };
  float *big = malloc(M * sizeof *big);
  assert_non_null(big);
  for (int i = 0; i < M; i++) big[i] = 1.0f;
  assert_true(nn_clip_grad_norm(big, M, 1e9f) == 1000.0f);
  big[17] = NAN;
  assert_true(isnan(nn_clip_grad_norm(big, M, 1.0f)));
  assert_true(big[0] == 1.0f); /* non-finite: left alone */
  free(big);
}

/* ---- schedules -------------------------------------------------------------------- */

static void test_schedules(void **state) {
  nn_schedule c = {NN_SCHED_CONSTANT, 0.5f, 0.1f, 100, 0};
  assert_true(nn_schedule_value(&c, 0) == 0.5f);
  assert_true(nn_schedule_value(&c, 1000) == 0.5f);
  nn_schedule l = {NN_SCHED_LINEAR, 1.0f, 0.1f, 100, 0};
  assert_close("linear", 0, nn_schedule_value(&l, 0), 1.0, 0, 1e-7);
  assert_close("linear", 50, nn_schedule_value(&l, 50), 0.55, 0, 1e-7);
  assert_close("linear", 90, nn_schedule_value(&l, 90), 0.19, 0, 1e-6);
  assert_close("linear", 100, nn_schedule_value(&l, 100), 0.1, 0, 1e-7);
  assert_close("linear", 500, nn_schedule_value(&l, 500), 0.1, 0, 1e-7);
  assert_close("linear", -5, nn_schedule_value(&l, -5), 1.0, 0, 1e-7);
  nn_schedule k = {NN_SCHED_COSINE, 1.0f, 0.0f, 100, 0};
  assert_close("cosine", 0, nn_schedule_value(&k, 0), 1.0, 0, 1e-7);
  assert_close("cosine", 25, nn_schedule_value(&k, 25), 0.5 + 0.5 * sqrt(0.5), 0, 1e-6);
  assert_close("cosine", 50, nn_schedule_value(&k, 50), 0.5, 0, 1e-6);
  assert_close("cosine", 75, nn_schedule_value(&k, 75), 0.5 - 0.5 * sqrt(0.5), 0, 1e-6);
  assert_close("cosine", 100, nn_schedule_value(&k, 100), 0.0, 1e-9, 0);
  /* warm-up 10 of 110 steps: 0, 0.1, ... up to step 10, then the cosine over 100 */
  nn_schedule wk = {NN_SCHED_COSINE, 2.0f, 0.0f, 110, 10};
  assert_true(nn_schedule_value(&wk, 0) == 0.0f);
  assert_close("warmup", 5, nn_schedule_value(&wk, 5), 1.0, 0, 1e-7);
  assert_close("warmup", 10, nn_schedule_value(&wk, 10), 2.0, 0, 1e-7);
  assert_close("warmup", 60, nn_schedule_value(&wk, 60), 1.0, 0, 1e-6);
  assert_close("warmup", 110, nn_schedule_value(&wk, 110), 0.0, 1e-9, 0);
  nn_schedule wc = {NN_SCHED_CONSTANT, 3.0f, 0.0f, 0, 4};
  assert_close("warmup const", 1, nn_schedule_value(&wc, 1), 0.75, 0, 1e-7);
  assert_true(nn_schedule_value(&wc, 4) == 3.0f);
  /* epsilon-greedy as DQN uses it: 1.0 -> 0.05 over 10000 steps */
  nn_schedule eg = {NN_SCHED_LINEAR, 1.0f, 0.05f, 10000, 0};
  assert_close("eps", 2500, nn_schedule_value(&eg, 2500), 1.0 - 0.95 * 0.25, 0, 1e-6);
  nn_schedule zero = {NN_SCHED_LINEAR, 1.0f, 0.25f, 0, 0};
  assert_true(nn_schedule_value(&zero, 0) == 0.25f);
}

/* ---- initialisers -------------------------------------------------------------------- */

enum { NS = 200000 };

/* Mean and variance within 5 standard errors of the expected (a false alarm has a
 * probability below 1e-6 per check); var4 is E[x^4] - var^2, the variance of x^2. */
static void check_moments(const char *what, const float *w, size_t n, double var, double var4) {
  double s = 0, s2 = 0;
  for (size_t i = 0; i < n; i++) s += w[i], s2 += (double)w[i] * w[i];
  double mean = s / n, m2 = s2 / n;
  if (fabs(mean) > 5 * sqrt(var / n)) fail_msg("%s: mean %g, sd %g", what, mean, sqrt(var));
  if (fabs(m2 - var) > 5 * sqrt(var4 / n)) fail_msg("%s: variance %g, expected %g", what, m2, var);
}

static void test_init_uniform_family(void **state) {
  float *w = malloc(NS * sizeof *w);
  assert_non_null(w);
  shoal_rng rng;
  shoal_rng_seed(&rng, 5);
  /* xavier uniform: a = gain sqrt(6 / (fan_in + fan_out)) */
  double a = 1.5 * sqrt(6.0 / (100 + 200));
  nn_init_xavier_uniform(w, NS, 100, 200, 1.5f, &rng);
  double lo = 0, hi = 0;
  for (int i = 0; i < NS; i++) {
    assert_true(w[i] >= -(float)a && w[i] < (float)a);
    lo = fmin(lo, w[i]), hi = fmax(hi, w[i]);
  }
  assert_true(lo < -0.99 * a && hi > 0.99 * a); /* the whole interval is used */
  check_moments("xavier_uniform", w, NS, a * a / 3, 4 * a * a * a * a / 45);
  a = sqrt(6.0 / 50);
  nn_init_kaiming_uniform(w, NS, 50, &rng);
  for (int i = 0; i < NS; i++) assert_true(fabs(w[i]) <= a);
  check_moments("kaiming_uniform", w, NS, a * a / 3, 4 * a * a * a * a / 45);
  nn_init_uniform(w, NS, 2.0f, 3.0f, &rng);
  double s = 0;
  for (int i = 0; i < NS; i++) {
    assert_true(w[i] >= 2.0f && w[i] < 3.0f);
    s += w[i];
  }
  assert_true(fabs(s / NS - 2.5) < 5 * sqrt(1.0 / 12 / NS));
  nn_init_zeros(w, NS);
  for (int i = 0; i < NS; i++) assert_true(w[i] == 0.0f);
  free(w);
}

static void test_init_normal_family(void **state) {
  float *w = malloc(NS * sizeof *w);
  assert_non_null(w);
  shoal_rng rng;
  shoal_rng_seed(&rng, 6);
  double sd = 2.0 * sqrt(2.0 / (30 + 70));
  nn_init_xavier_normal(w, NS, 30, 70, 2.0f, &rng);
  check_moments("xavier_normal", w, NS, sd * sd, 2 * sd * sd * sd * sd);
  sd = sqrt(2.0 / 64);
  nn_init_kaiming_normal(w, NS, 64, &rng);
  check_moments("kaiming_normal", w, NS, sd * sd, 2 * sd * sd * sd * sd);
  int beyond3 = 0; /* normal, not uniform: 0.27% beyond 3 sd */
  for (int i = 0; i < NS; i++) beyond3 += fabs(w[i]) > 3 * sd;
  assert_true(beyond3 > 0.0027 * NS * 0.7 && beyond3 < 0.0027 * NS * 1.3);
  free(w);
}

static void test_init_is_seeded(void **state) {
  float a[64], b[64], c[64];
  shoal_rng r1, r2, r3;
  shoal_rng_seed(&r1, 9);
  shoal_rng_seed(&r2, 9);
  shoal_rng_seed(&r3, 10);
  nn_init_kaiming_uniform(a, 64, 8, &r1);
  nn_init_kaiming_uniform(b, 64, 8, &r2);
  nn_init_kaiming_uniform(c, 64, 8, &r3);
  assert_memory_equal(a, b, sizeof a);
  assert_memory_not_equal(a, c, sizeof a);
  assert_int_equal(nn_init_orthogonal(a, 8, 8, 1.0f, &r1), 0);
  assert_int_equal(nn_init_orthogonal(b, 8, 8, 1.0f, &r2), 0);
  assert_memory_equal(a, b, sizeof a);
}

/* W W^T = gain^2 I when rows <= cols; W^T W = gain^2 I when rows > cols. */
static void check_orthogonal(int rows, int cols, float gain, uint64_t seed) {
  float *w = malloc((size_t)rows * cols * sizeof *w);
  assert_non_null(w);
  shoal_rng rng;
  shoal_rng_seed(&rng, seed);
  assert_int_equal(nn_init_orthogonal(w, rows, cols, gain, &rng), 0);
  int k = rows <= cols ? rows : cols;
  double worst = 0;
  for (int i = 0; i < k; i++)
    for (int j = 0; j < k; j++) {
      double d = 0;
      if (rows <= cols)
        for (int c = 0; c < cols; c++) d += (double)w[i * cols + c] * w[j * cols + c];
      else
        for (int r = 0; r < rows; r++) d += (double)w[r * cols + i] * w[r * cols + j];
      double want = i == j ? (double)gain * gain : 0.0;
      worst = fmax(worst, fabs(d - want));
    }
  if (worst > 1e-5 * gain * gain)
    fail_msg("orthogonal %dx%d gain %g: |W W^T - g^2 I| = %g", rows, cols, gain, worst);
  free(w);
}

static void test_init_orthogonal(void **state) {
  check_orthogonal(16, 16, 1.0f, 1);
  check_orthogonal(8, 64, sqrtf(2.0f), 2); /* rows <= cols: orthonormal rows */
  check_orthogonal(100, 7, 0.01f, 3);      /* rows > cols: orthonormal columns */
  check_orthogonal(1, 5, 1.0f, 4);
  check_orthogonal(512, 256, 1.0f, 5);
  float w[4];
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  assert_int_equal(nn_init_orthogonal(w, 0, 4, 1.0f, &rng), SHOAL_EINVAL);
  /* entries of a random orthogonal matrix are spread, not a permutation matrix */
  float q[64 * 64];
  assert_int_equal(nn_init_orthogonal(q, 64, 64, 1.0f, &rng), 0);
  int tiny = 0;
  for (int i = 0; i < 64 * 64; i++) tiny += fabsf(q[i]) < 1e-4f;
  assert_true(tiny < 64);
}

/* ---- end to end: a model, a loss and an optimizer learn ------------------------------- */

/* Two interleaved spirals (a classic non-linear 2-class problem), 2 x 100 points. */
static void spirals(float *x, int32_t *y, float *t, int n_per_class) {
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < n_per_class; i++) {
      double r = 0.2 + 0.8 * i / n_per_class,
             a = 1.75 * 3.14159265 * i / n_per_class + c * 3.14159265;
      int k = c * n_per_class + i;
      x[2 * k] = (float)(r * cos(a));
      x[2 * k + 1] = (float)(r * sin(a));
      y[k] = c;
      t[k] = (float)c;
    }
}

static nn_model *spiral_net(int out, uint64_t seed) {
  nn_model *m = nn_model_create(NN_CPU, NULL);
  assert_non_null(m);
  nn_input(m, 2, 1, 1);
  nn_dense(m, "fc1", 64);
  nn_activation(m, "act1", NN_TANH, 0);
  nn_dense(m, "fc2", 64);
  nn_activation(m, "act2", NN_TANH, 0);
  nn_dense(m, "out", out);
  shoal_error err = {0};
  if (nn_model_build(m, 200, seed, &err)) fail_msg("build: %s", err.msg);
  return m;
}

static void test_training_converges(void **state) {
  enum { NPC = 100, NB = 2 * NPC, STEPS_E2E = 600 };
  static float x[2 * NB], t[NB], dy[2 * NB];
  static int32_t y[NB];
  spirals(x, y, t, NPC);
  nn_optim_kind kinds[3] = {NN_ADAM, NN_ADAMW, NN_RMSPROP};
  for (int k = 0; k < 3; k++)
    for (int bce = 0; bce < 2; bce++) {
      nn_model *m = spiral_net(bce ? 1 : 2, 7);
      nn_optim_config c = nn_optim_defaults(kinds[k]);
      c.lr = kinds[k] == NN_RMSPROP ? 3e-3f : 1e-2f;
      c.clip_norm = 5.0f;
      shoal_error err = {0};
      nn_optim *o = nn_optim_create(m, &c, &err);
      if (!o) fail_msg("optim: %s", err.msg);
      float first = 0, loss = 0;
      for (int s = 0; s < STEPS_E2E; s++) {
        const float *out;
        assert_int_equal(nn_model_forward(m, x, NB, &out, &err), 0);
        int rc = bce ? nn_bce_with_logits_loss(&loss, dy, out, t, NULL, NB, 1, &err)
                     : nn_cross_entropy_loss(&loss, dy, out, y, NULL, NB, 2, &err);
        if (rc) fail_msg("loss: %s", err.msg);
        if (s == 0) first = loss;
        nn_model_zero_grad(m);
        assert_int_equal(nn_model_backward(m, dy, NULL, &err), 0);
        assert_int_equal(nn_optim_step(o, &err), 0);
      }
      const float *out;
      assert_int_equal(nn_model_forward(m, x, NB, &out, &err), 0);
      int correct = 0;
      for (int i = 0; i < NB; i++) {
        int pred = bce ? out[i] > 0 : out[2 * i + 1] > out[2 * i];
        correct += pred == y[i];
      }
      if (correct < 0.97 * NB || !(loss < 0.2f * first))
        fail_msg("kind %d %s: %d/%d correct, loss %g -> %g", kinds[k], bce ? "bce" : "ce", correct,
                 NB, first, loss);
      nn_optim_destroy(o);
      nn_model_destroy(m);
    }
}

/* Regression with MSE and Huber under SGD with Nesterov momentum and a cosine schedule. */
static void test_regression_with_schedule(void **state) {
  enum { NR = 128 };
  static float x[NR], yv[NR], dy[NR];
  for (int i = 0; i < NR; i++) {
    x[i] = -3.0f + 6.0f * i / (NR - 1);
    yv[i] = sinf(x[i]);
  }
  for (int huber = 0; huber < 2; huber++) {
    nn_model *m = nn_model_create(NN_CPU, NULL);
    nn_input(m, 1, 1, 1);
    nn_dense(m, "fc1", 32);
    nn_activation(m, "act1", NN_TANH, 0);
    nn_dense(m, "out", 1);
    assert_int_equal(nn_model_build(m, NR, 3, NULL), 0);
    nn_optim_config c = nn_optim_defaults(NN_SGD);
    c.momentum = 0.9f, c.nesterov = true, c.clip_norm = 1.0f;
    nn_optim *o = nn_optim_create(m, &c, NULL);
    assert_non_null(o);
    nn_schedule sched = {NN_SCHED_COSINE, 0.05f, 0.001f, 3000, 100};
    float loss = 0, first = 0;
    for (int s = 0; s < 3000; s++) {
      nn_optim_set_lr(o, nn_schedule_value(&sched, s));
      const float *out;
      assert_int_equal(nn_model_forward(m, x, NR, &out, NULL), 0);
      int rc = huber ? nn_huber_loss(&loss, dy, out, yv, NULL, NR, 1, 1.0f, NULL)
                     : nn_mse_loss(&loss, dy, out, yv, NULL, NR, 1, NULL);
      assert_int_equal(rc, 0);
      if (s == 0) first = loss;
      nn_model_zero_grad(m);
      assert_int_equal(nn_model_backward(m, dy, NULL, NULL), 0);
      assert_int_equal(nn_optim_step(o, NULL), 0);
    }
    if (!(loss < 2e-3f && loss < 0.01f * first))
      fail_msg("%s: loss %g -> %g", huber ? "huber" : "mse", first, loss);
    assert_true(fabsf(nn_optim_lr(o) - 0.001f) < 1e-4f);
    nn_optim_destroy(o);
    nn_model_destroy(m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_losses_match_torch),
      cmocka_unit_test(test_cross_entropy_matches_torch),
      cmocka_unit_test(test_losses_finite_differences),
      cmocka_unit_test(test_losses_are_stable_for_large_logits),
      cmocka_unit_test(test_losses_reject_bad_input),
      cmocka_unit_test(test_optimizers_match_torch),
      cmocka_unit_test(test_optimizer_defaults_are_torchs),
      cmocka_unit_test(test_optimizer_large_buffer_threads),
      cmocka_unit_test(test_optimizer_skips_non_finite_gradient),
      cmocka_unit_test(test_optimizer_rejects_bad_config),
      cmocka_unit_test(test_set_lr_and_reset),
      cmocka_unit_test(test_clip_grad_norm),
      cmocka_unit_test(test_schedules),
      cmocka_unit_test(test_init_uniform_family),
      cmocka_unit_test(test_init_normal_family),
      cmocka_unit_test(test_init_is_seeded),
      cmocka_unit_test(test_init_orthogonal),
      cmocka_unit_test(test_training_converges),
      cmocka_unit_test(test_regression_with_schedule),
  };
  return cmocka_run_group_tests_name("nn_train", tests, setup, teardown);
}
