/*
 * tests/test_nn_layers.c — every layer of nn on the CPU: finite-difference gradient
 * checks, values and gradients against PyTorch fixtures (tests/reference/nn_layers.py),
 * the graph blocks, training/eval behaviour and bad input.
 *
 * Gradient checks: the loss is L = sum_i y_i r_i (r random, fixed), so dL/dy = r;
 * each input and parameter entry (every one for small tensors, a spread sample of 48
 * for large ones) is moved by +-eps and (L+ - L-) / (2 eps), computed from float
 * forwards summed in double, is compared with backward's value. With eps = 1e-2 for
 * smooth layers (truncation error ~eps^2) and float rounding of ~1e-6 in L, a value
 * passes when |analytic - numeric| <= 1e-3 + 2e-3 * max(|analytic|, |numeric|).
 * Layers with kinks (relu, max-pool) get inputs kept away from the kink by more
 * than eps.
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

#define GC_ATOL 1e-3
#define GC_RTOL 2e-3
#define GC_SAMPLES 48

typedef void (*add_layers_fn)(nn_model *m);

typedef struct gc_case {
  const char *what;
  int C, H, W, B;
  add_layers_fn add;
  bool training;
  float eps;
  enum { X_UNIFORM, X_DISTINCT, X_INDEX } xkind;
  int index_max; /* X_INDEX: indices in [0, index_max) */
  bool check_x;  /* false: the input carries no gradient (indices) */
} gc_case;

static double loss_of(nn_model *m, const float *x, int B, const float *r, size_t ny) {
  const float *y;
  shoal_error err = {0};
  int rc = nn_model_forward(m, x, B, &y, &err);
  if (rc) fail_msg("forward: %s", err.msg);
  double L = 0;
  for (size_t i = 0; i < ny; i++) L += (double)y[i] * r[i];
  return L;
}

static void fill_x(const gc_case *c, float *x, size_t n, shoal_rng *rng) {
  if (c->xkind == X_UNIFORM) {
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * shoal_rng_uniformf(rng) - 1.0f;
  } else if (c->xkind == X_DISTINCT) {
    /* A shuffled ladder: all values distinct by 0.05 and at least 0.025 from 0, so no
     * max-pool window ties and no relu input near its kink, within eps. */
    for (size_t i = 0; i < n; i++) x[i] = ((float)i - (float)n / 2 + 0.5f) * 0.05f;
    for (size_t i = n - 1; i > 0; i--) {
      size_t j = shoal_rng_below(rng, i + 1);
      float t = x[i];
      x[i] = x[j];
      x[j] = t;
    }
  } else {
    for (size_t i = 0; i < n; i++) x[i] = (float)shoal_rng_below(rng, (uint64_t)c->index_max);
  }
}

static bool close_enough(double a, double n) {
  return fabs(a - n) <= GC_ATOL + GC_RTOL * fmax(fabs(a), fabs(n));
}

static void gradcheck(const gc_case *c) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  assert_non_null(m);
  assert_int_equal(nn_input(m, c->C, c->H, c->W), 0);
  c->add(m);
  int rc = nn_model_build(m, c->B, 7, &err);
  if (rc) fail_msg("%s: build: %s", c->what, err.msg);
  nn_model_set_training(m, c->training);
  int oc, oh, ow;
  nn_node_shape(m, nn_model_current(m), &oc, &oh, &ow);
  size_t nx = (size_t)c->B * c->C * c->H * c->W, ny = (size_t)c->B * oc * oh * ow;
  float *x = malloc(nx * sizeof *x), *r = malloc(ny * sizeof *r);
  shoal_rng rng;
  shoal_rng_seed(&rng, 11);
  fill_x(c, x, nx, &rng);
  for (size_t i = 0; i < ny; i++) r[i] = 2.0f * shoal_rng_uniformf(&rng) - 1.0f;
  /* Parameters away from the defaults (batch norm's ones/zeros would hide errors). */
  size_t np;
  float *p = nn_model_params(m, &np);
  for (size_t i = 0; i < np; i++) p[i] += 0.5f * (2.0f * shoal_rng_uniformf(&rng) - 1.0f);

  nn_model_zero_grad(m);
  const float *y, *dx;
  assert_int_equal(nn_model_forward(m, x, c->B, &y, &err), 0);
  assert_int_equal(nn_model_backward(m, r, &dx, &err), 0);
  float *dx_a = malloc(nx * sizeof *dx_a);
  memcpy(dx_a, dx, nx * sizeof *dx_a);
  float *g = malloc((np ? np : 1) * sizeof *g);
  memcpy(g, nn_model_grads(m, NULL), np * sizeof *g);

  int bad = 0, checked = 0;
  float eps = c->eps;
  if (c->check_x) {
    size_t step = nx > GC_SAMPLES ? nx / GC_SAMPLES : 1;
    for (size_t i = 0; i < nx; i += step) {
      float v = x[i];
      x[i] = v + eps;
      double lp = loss_of(m, x, c->B, r, ny);
      x[i] = v - eps;
      double lm = loss_of(m, x, c->B, r, ny);
      x[i] = v;
      double num = (lp - lm) / (2.0 * eps);
      checked++;
      if (!close_enough(dx_a[i], num)) {
        if (bad++ < 5) print_error("%s: dx[%zu] = %g, numeric %g\n", c->what, i, dx_a[i], num);
      }
    }
  } else {
    for (size_t i = 0; i < nx; i++) assert_true(dx_a[i] == 0.0f);
  }
  for (int t = 0; t < nn_model_tensor_count(m); t++) {
    nn_tensor_info ti;
    assert_int_equal(nn_model_tensor(m, t, &ti), 0);
    if (!ti.trainable) continue;
    size_t step = ti.numel > GC_SAMPLES ? ti.numel / GC_SAMPLES : 1;
    for (size_t k = 0; k < ti.numel; k += step) {
      size_t i = ti.offset + k;
      float v = p[i];
      p[i] = v + eps;
      double lp = loss_of(m, x, c->B, r, ny);
      p[i] = v - eps;
      double lm = loss_of(m, x, c->B, r, ny);
      p[i] = v;
      double num = (lp - lm) / (2.0 * eps);
      checked++;
      if (!close_enough(g[i], num)) {
        if (bad++ < 5)
          print_error("%s: d %s[%zu] = %g, numeric %g\n", c->what, ti.name, k, g[i], num);
      }
    }
  }
  assert_true(checked > 0);
  if (bad)
    fail_msg("%s: %d of %d gradient entries differ from finite differences", c->what, bad, checked);
  free(x), free(r), free(dx_a), free(g);
  nn_model_destroy(m);
}

/* ---- the layers under check ------------------------------------------------------ */

static void add_dense(nn_model *m) { nn_dense(m, "fc", 5); }
static void add_mlp(nn_model *m) {
  nn_dense(m, "fc1", 6);
  nn_activation(m, "t", NN_TANH, 0);
  nn_dense(m, "fc2", 3);
}
static void add_conv(nn_model *m) { nn_conv2d(m, "conv", 3, 3, 2, 2, 1, 2); }
static void add_conv1(nn_model *m) { nn_conv2d(m, "conv", 4, 3, 3, 1, 1, 1); }
static void add_convt(nn_model *m) { nn_conv_transpose2d(m, "convt", 3, 3, 3, 2, 1, 1); }
static void add_convt2(nn_model *m) { nn_conv_transpose2d(m, "convt", 2, 4, 4, 2, 1, 0); }
static void add_maxpool(nn_model *m) { nn_maxpool2d(m, "pool", 3, 2, 1); }
static void add_avgpool(nn_model *m) { nn_avgpool2d(m, "pool", 3, 2, 1); }
static void add_bn(nn_model *m) { nn_batchnorm(m, "bn", 1e-5f, 0.1f); }
static void add_ln(nn_model *m) { nn_layernorm(m, "ln", 1e-5f); }
static void add_dropout(nn_model *m) { nn_dropout(m, "drop", 0.5f); }
static void add_flatten(nn_model *m) {
  nn_flatten(m, "flat");
  nn_dense(m, "fc", 3);
}
static void add_reshape(nn_model *m) {
  nn_reshape(m, "rs", 2, 3, 2);
  nn_conv2d(m, "conv", 2, 2, 2, 1, 0, 1);
}
static void add_embedding(nn_model *m) { nn_embedding(m, "emb", 7, 3); }
static void add_relu(nn_model *m) { nn_activation(m, "a", NN_RELU, 0); }
static void add_leaky(nn_model *m) { nn_activation(m, "a", NN_LEAKY_RELU, 0.1f); }
static void add_elu(nn_model *m) { nn_activation(m, "a", NN_ELU, 0.7f); }
static void add_tanh(nn_model *m) { nn_activation(m, "a", NN_TANH, 0); }
static void add_sigmoid(nn_model *m) { nn_activation(m, "a", NN_SIGMOID, 0); }
static void add_softmax(nn_model *m) { nn_activation(m, "a", NN_SOFTMAX, 0); }
static void add_logsoftmax(nn_model *m) { nn_activation(m, "a", NN_LOG_SOFTMAX, 0); }
static void add_lstm(nn_model *m) { nn_lstm_cell(m, "lstm", 4); }
static void add_gru(nn_model *m) { nn_gru_cell(m, "gru", 4); }
static void add_slice(nn_model *m) {
  nn_slice(m, "sl", 1, 3);
  nn_dense(m, "fc", 2);
}
static void add_residual(nn_model *m) {
  int x = nn_model_current(m);
  nn_conv2d(m, "c1", 3, 3, 3, 1, 1, 1);
  nn_batchnorm(m, "bn1", 1e-5f, 0.1f);
  nn_activation(m, "r1", NN_TANH, 0);
  int y = nn_conv2d(m, "c2", 3, 3, 3, 1, 1, 1);
  nn_add(m, "sum", y, x);
  nn_activation(m, "r2", NN_SIGMOID, 0);
}
static void add_concat(nn_model *m) {
  int x = nn_model_current(m);
  int a = nn_dense(m, "fa", 3);
  nn_model_select(m, x);
  int b = nn_dense(m, "fb", 2);
  nn_concat(m, "cat", a, b);
  nn_activation(m, "t", NN_TANH, 0);
}
static void add_twice(nn_model *m) { /* one node read by both inputs of add */
  int a = nn_dense(m, "fc", 4);
  nn_add(m, "dbl", a, a);
}

#define GC(fn, ...)                          \
  static void test_grad_##fn(void **state) { \
    gc_case c = {__VA_ARGS__};               \
    gradcheck(&c);                           \
  }

GC(dense, "dense", 4, 1, 1, 3, add_dense, true, 1e-2f, X_UNIFORM, 0, true)
GC(mlp, "dense-tanh-dense", 4, 1, 1, 3, add_mlp, true, 1e-2f, X_UNIFORM, 0, true)
GC(conv, "conv2d s2 p1 d2 3x2", 2, 7, 6, 2, add_conv, true, 1e-2f, X_UNIFORM, 0, true)
GC(conv1, "conv2d s1 p1", 2, 5, 5, 2, add_conv1, true, 1e-2f, X_UNIFORM, 0, true)
GC(convt, "conv_transpose2d s2 p1 op1", 2, 3, 4, 2, add_convt, true, 1e-2f, X_UNIFORM, 0, true)
GC(convt2, "conv_transpose2d 4x4 s2 p1", 3, 3, 3, 1, add_convt2, true, 1e-2f, X_UNIFORM, 0, true)
GC(maxpool, "maxpool2d", 2, 5, 6, 2, add_maxpool, true, 1e-2f, X_DISTINCT, 0, true)
GC(avgpool, "avgpool2d", 2, 5, 6, 2, add_avgpool, true, 1e-2f, X_UNIFORM, 0, true)
GC(bn2d_train, "batchnorm2d train", 3, 2, 3, 4, add_bn, true, 1e-2f, X_UNIFORM, 0, true)
GC(bn2d_eval, "batchnorm2d eval", 3, 2, 3, 4, add_bn, false, 1e-2f, X_UNIFORM, 0, true)
GC(bn1d_train, "batchnorm1d train", 5, 1, 1, 6, add_bn, true, 1e-2f, X_UNIFORM, 0, true)
GC(ln, "layernorm", 2, 2, 3, 3, add_ln, true, 1e-2f, X_UNIFORM, 0, true)
GC(dropout_eval, "dropout eval", 3, 2, 2, 2, add_dropout, false, 1e-2f, X_UNIFORM, 0, true)
GC(flatten, "flatten-dense", 2, 3, 2, 2, add_flatten, true, 1e-2f, X_UNIFORM, 0, true)
GC(reshape, "reshape-conv", 12, 1, 1, 2, add_reshape, true, 1e-2f, X_UNIFORM, 0, true)
GC(embedding, "embedding", 3, 1, 1, 4, add_embedding, true, 1e-2f, X_INDEX, 7, false)
GC(relu, "relu", 3, 2, 2, 2, add_relu, true, 1e-2f, X_DISTINCT, 0, true)
GC(leaky, "leaky relu", 3, 2, 2, 2, add_leaky, true, 1e-2f, X_DISTINCT, 0, true)
GC(elu, "elu", 3, 2, 2, 2, add_elu, true, 1e-2f, X_DISTINCT, 0, true)
GC(tanh, "tanh", 3, 2, 2, 2, add_tanh, true, 1e-2f, X_UNIFORM, 0, true)
GC(sigmoid, "sigmoid", 3, 2, 2, 2, add_sigmoid, true, 1e-2f, X_UNIFORM, 0, true)
GC(softmax, "softmax", 3, 2, 2, 2, add_softmax, true, 1e-2f, X_UNIFORM, 0, true)
GC(logsoftmax, "log-softmax", 3, 2, 2, 2, add_logsoftmax, true, 1e-2f, X_UNIFORM, 0, true)
GC(lstm, "lstm cell", 3 + 8, 1, 1, 3, add_lstm, true, 1e-2f, X_UNIFORM, 0, true)
GC(gru, "gru cell", 3 + 4, 1, 1, 3, add_gru, true, 1e-2f, X_UNIFORM, 0, true)
GC(slice, "slice-dense", 5, 2, 1, 2, add_slice, true, 1e-2f, X_UNIFORM, 0, true)
GC(residual, "residual block", 3, 4, 4, 2, add_residual, true, 1e-2f, X_UNIFORM, 0, true)
GC(concat, "concat of two branches", 4, 1, 1, 3, add_concat, true, 1e-2f, X_UNIFORM, 0, true)
GC(add_same, "add(a, a)", 3, 1, 1, 2, add_twice, true, 1e-2f, X_UNIFORM, 0, true)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grad_dense),        cmocka_unit_test(test_grad_mlp),
      cmocka_unit_test(test_grad_conv),         cmocka_unit_test(test_grad_conv1),
      cmocka_unit_test(test_grad_convt),        cmocka_unit_test(test_grad_convt2),
      cmocka_unit_test(test_grad_maxpool),      cmocka_unit_test(test_grad_avgpool),
      cmocka_unit_test(test_grad_bn2d_train),   cmocka_unit_test(test_grad_bn2d_eval),
      cmocka_unit_test(test_grad_bn1d_train),   cmocka_unit_test(test_grad_ln),
      cmocka_unit_test(test_grad_dropout_eval), cmocka_unit_test(test_grad_flatten),
      cmocka_unit_test(test_grad_reshape),      cmocka_unit_test(test_grad_embedding),
      cmocka_unit_test(test_grad_relu),         cmocka_unit_test(test_grad_leaky),
      cmocka_unit_test(test_grad_elu),          cmocka_unit_test(test_grad_tanh),
      cmocka_unit_test(test_grad_sigmoid),      cmocka_unit_test(test_grad_softmax),
      cmocka_unit_test(test_grad_logsoftmax),   cmocka_unit_test(test_grad_lstm),
      cmocka_unit_test(test_grad_gru),          cmocka_unit_test(test_grad_slice),
      cmocka_unit_test(test_grad_residual),     cmocka_unit_test(test_grad_concat),
      cmocka_unit_test(test_grad_add_same),
  };
  return cmocka_run_group_tests_name("nn_layers", tests, NULL, NULL);
}
