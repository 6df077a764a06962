/* SPDX-License-Identifier: Apache-2.0 */
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
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>

#include "nn/cpu/cpu.h"  /* nn__parallel_for */
#include "nn/internal.h" /* nn__sgemm, to check both GEMM paths */
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
  int index_max;  /* X_INDEX: indices in [0, index_max) */
  bool check_x;   /* false: the input carries no gradient (indices) */
  bool keep_init; /* true: PyTorch's init as built (deep stacks), else jittered by +-0.5 */
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

static double g_worst; /* the largest |analytic - numeric| / tolerance of a check */

static bool close_enough(double a, double n) {
  double r = fabs(a - n) / (GC_ATOL + GC_RTOL * fmax(fabs(a), fabs(n)));
  if (r > g_worst) g_worst = r;
  return r <= 1.0;
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
  if (!c->keep_init)
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
  g_worst = 0;
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
  print_message("  %s: %d entries, worst error %.2f of the tolerance\n", c->what, checked, g_worst);
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
/* bias=False: y = W x alone (a DCGAN's and a ResNet's convolutions, under module paths) */
static void add_dense_nb(nn_model *m) { nn_dense_ex(m, "head.1", 5, NN_NO_BIAS); }
static void add_conv_nb(nn_model *m) {
  nn_conv2d_ex(m, "features.0", 3, 3, 2, 2, 1, 2, NN_NO_BIAS);
}
static void add_convt_nb(nn_model *m) {
  nn_conv_transpose2d_ex(m, "main.0", 3, 3, 3, 2, 1, 1, NN_NO_BIAS);
}
/* conv (no bias) -> batch norm -> relu -> conv-transpose (no bias) -> dense (no bias),
 * B = 4 so conv2d runs in groups */
static void add_nb_stack(nn_model *m) {
  nn_conv2d_ex(m, "enc.conv", 4, 3, 3, 1, 1, 1, NN_NO_BIAS);
  nn_batchnorm(m, "enc.bn", 1e-5f, 0.1f);
  nn_activation(m, "enc.act", NN_TANH, 0);
  nn_conv_transpose2d_ex(m, "dec.up", 2, 4, 4, 2, 1, 0, NN_NO_BIAS);
  nn_flatten(m, "dec.flat");
  nn_dense_ex(m, "dec.fc", 3, NN_NO_BIAS);
}
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

/* [x1 x2 x3 | h0 | c0] (x_t: I features, hidden Hd) -> LSTM cell over 3 steps with
 * tied weights -> [h2 c2 | h3 c3]. */
static void add_unrolled_lstm(nn_model *m, int I, int Hd) {
  int in = nn_model_current(m);
  int st = nn_slice(m, "s0", 3 * I, 2 * Hd);
  int cell = -1, outs[3];
  char name[32];
  for (int t = 0; t < 3; t++) {
    nn_model_select(m, in);
    snprintf(name, sizeof name, "x%d", t + 1);
    int xt = nn_slice(m, name, t * I, I);
    snprintf(name, sizeof name, "cat%d", t + 1);
    nn_concat(m, name, xt, st);
    if (t == 0)
      st = cell = nn_lstm_cell(m, "cell", Hd);
    else {
      snprintf(name, sizeof name, "cell_t%d", t + 1);
      st = nn_shared(m, name, cell);
    }
    outs[t] = st;
  }
  nn_concat(m, "out", outs[1], outs[2]);
}
static void add_unrolled_small(nn_model *m) { add_unrolled_lstm(m, 2, 3); }

/* fa(x) ⊙ tanh(fb(x)): the product of two branches of one shape. */
static void add_mul(nn_model *m) {
  int x = nn_model_current(m);
  int a = nn_dense(m, "fa", 4);
  nn_model_select(m, x);
  nn_dense(m, "fb", 4);
  int b = nn_activation(m, "t", NN_TANH, 0);
  nn_mul(m, "prod", a, b);
}
/* x[:, :4] ⊙ x[:, 4] (one value per sample, broadcast), then a dense layer. */
static void add_mul_bcast(nn_model *m) {
  int x = nn_model_current(m);
  int a = nn_slice(m, "a", 0, 4);
  nn_model_select(m, x);
  int b = nn_slice(m, "b", 4, 1);
  nn_mul(m, "prod", a, b);
  nn_dense(m, "fc", 3);
}
static void add_mul_same(nn_model *m) { /* one node read by both inputs: d(a²) = 2a */
  int a = nn_dense(m, "fc", 4);
  nn_mul(m, "sq", a, a);
}
/* [x1 x2 x3 | h0 | c0 | m1 m2 m3] -> 3 LSTM steps, the state multiplied by m_t before
 * step t (an episode start resets it) -> [h1 c1 | h2 c2 | h3 c3]. */
static void add_masked_lstm(nn_model *m) {
  int in = nn_model_current(m);
  int st = nn_slice(m, "s0", 6, 6);
  int cell = -1, outs[3];
  char name[32];
  for (int t = 0; t < 3; t++) {
    nn_model_select(m, in);
    snprintf(name, sizeof name, "m%d", t + 1);
    int mt = nn_slice(m, name, 12 + t, 1);
    snprintf(name, sizeof name, "reset%d", t + 1);
    st = nn_mul(m, name, st, mt);
    nn_model_select(m, in);
    snprintf(name, sizeof name, "x%d", t + 1);
    int xt = nn_slice(m, name, 2 * t, 2);
    snprintf(name, sizeof name, "cat%d", t + 1);
    nn_concat(m, name, xt, st);
    if (t == 0)
      st = cell = nn_lstm_cell(m, "cell", 3);
    else {
      snprintf(name, sizeof name, "cell_t%d", t + 1);
      st = nn_shared(m, name, cell);
    }
    outs[t] = st;
  }
  int o12 = nn_concat(m, "o12", outs[0], outs[1]);
  nn_concat(m, "out", o12, outs[2]);
}

/* K*P = 144*576 floats per sample: conv2d runs 4 samples as a group of 3 and one of 1. */
static void add_grouped_conv(nn_model *m) { nn_conv2d(m, "conv", 4, 3, 3, 1, 1, 1); }

static void add_big_conv(nn_model *m) {
  nn_conv2d(m, "conv", 16, 3, 3, 1, 1, 1);
  nn_activation(m, "t", NN_TANH, 0);
  nn_conv_transpose2d(m, "up", 4, 4, 4, 2, 1, 0);
  nn_flatten(m, "flat");
  nn_dense(m, "fc", 64);
  nn_activation(m, "s", NN_SIGMOID, 0);
  nn_dense(m, "fc2", 64);
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
GC(dense_nb, "dense bias=False", 4, 1, 1, 3, add_dense_nb, true, 1e-2f, X_UNIFORM, 0, true)
GC(conv_nb, "conv2d bias=False s2 p1 d2", 2, 7, 6, 2, add_conv_nb, true, 1e-2f, X_UNIFORM, 0, true)
GC(convt_nb, "conv_transpose2d bias=False", 2, 3, 4, 2, add_convt_nb, true, 1e-2f, X_UNIFORM, 0,
   true)
GC(nb_stack, "conv-bn-convT-dense bias=False", 2, 4, 4, 4, add_nb_stack, true, 1e-2f, X_UNIFORM, 0,
   true)
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
GC(big, "conv-convT-dense through BLAS", 8, 10, 10, 3, add_big_conv, true, 1e-2f, X_UNIFORM, 0,
   true, true)
GC(unrolled, "lstm cell unrolled x3, tied weights", 12, 1, 1, 2, add_unrolled_small, true, 1e-2f,
   X_UNIFORM, 0, true)
GC(grouped, "conv2d in sample groups (3 + 1)", 16, 24, 24, 4, add_grouped_conv, true, 1e-2f,
   X_UNIFORM, 0, true, true)
GC(add_same, "add(a, a)", 3, 1, 1, 2, add_twice, true, 1e-2f, X_UNIFORM, 0, true)
GC(mul, "mul of two branches", 5, 1, 1, 3, add_mul, true, 1e-2f, X_UNIFORM, 0, true)
GC(mul_bcast, "mul by one value per sample", 5, 1, 1, 3, add_mul_bcast, true, 1e-2f, X_UNIFORM, 0,
   true)
GC(mul_same, "mul(a, a)", 3, 1, 1, 2, add_mul_same, true, 1e-2f, X_UNIFORM, 0, true)
GC(lstm_masked, "lstm x3, state reset by a mask", 15, 1, 1, 2, add_masked_lstm, true, 1e-2f,
   X_UNIFORM, 0, true)

/* ---- values against PyTorch ------------------------------------------------------ */
#include "tests/nn_fixture.h"

static void value_check(const char *name, int C, int H, int W, int B, add_layers_fn add,
                        bool training) {
  shoal_error err = {0};
  fixture *fx = fx_load(name);
  nn_model *m = nn_model_create(NN_CPU, &err);
  assert_non_null(m);
  nn_input(m, C, H, W);
  add(m);
  if (nn_model_build(m, B + 2, 3, &err)) fail_msg("%s: build: %s", name, err.msg);
  nn_model_set_training(m, training);
  size_t np, ns;
  float *params = nn_model_params(m, &np), *state = nn_model_state(m, &ns);
  char key[160];
  for (int t = 0; t < nn_model_tensor_count(m); t++) {
    nn_tensor_info ti;
    nn_model_tensor(m, t, &ti);
    snprintf(key, sizeof key, "param.%s", ti.name);
    fx_arr *a = fx_get(fx, key);
    if (!a) fail_msg("%s: the fixture has no %s", name, key);
    /* The layout must be PyTorch's, dimension by dimension. */
    assert_int_equal(a->ndim, ti.ndim);
    for (int i = 0; i < ti.ndim; i++) assert_int_equal(a->shape[i], ti.shape[i]);
    memcpy((ti.trainable ? params : state) + ti.offset, a->v, ti.numel * sizeof(float));
  }
  fx_arr *x = fx_get(fx, "x"), *y = fx_get(fx, "y"), *dy = fx_get(fx, "dy"), *dx = fx_get(fx, "dx");
  assert_non_null(x), assert_non_null(y), assert_non_null(dy);
  const float *out, *din;
  nn_model_zero_grad(m);
  if (nn_model_forward(m, x->v, B, &out, &err)) fail_msg("%s: forward: %s", name, err.msg);
  assert_close(name, "y", out, y);
  if (nn_model_backward(m, dy->v, dx ? &din : NULL, &err))
    fail_msg("%s: backward: %s", name, err.msg);
  if (dx) assert_close(name, "dx", din, dx);
  float *grads = nn_model_grads(m, NULL);
  for (int t = 0; t < nn_model_tensor_count(m); t++) {
    nn_tensor_info ti;
    nn_model_tensor(m, t, &ti);
    snprintf(key, sizeof key, "%s.%s", ti.trainable ? "grad" : "state", ti.name);
    fx_arr *a = fx_get(fx, key);
    if (!a) fail_msg("%s: the fixture has no %s", name, key);
    assert_close(name, key, (ti.trainable ? grads : state) + ti.offset, a);
  }
  for (int i = 0; i < fx->n; i++)
    if (!fx->a[i].used)
      fail_msg("%s: fixture array %s matches nothing in the model", name, fx->a[i].name);
  fx_free(fx);
  nn_model_destroy(m);
}

static void add_fx_dense(nn_model *m) { nn_dense(m, "fc", 4); }
static void add_fx_conv(nn_model *m) { nn_conv2d(m, "conv", 4, 3, 2, 2, 1, 2); }
static void add_fx_conv_b1(nn_model *m) { nn_conv2d(m, "conv", 3, 3, 3, 1, 1, 1); }
static void add_fx_convt(nn_model *m) { nn_conv_transpose2d(m, "convt", 2, 3, 3, 2, 1, 1); }
static void add_fx_convt_b1(nn_model *m) { nn_conv_transpose2d(m, "convt", 2, 4, 4, 2, 1, 0); }
static void add_fx_maxpool(nn_model *m) { nn_maxpool2d(m, "pool", 3, 2, 1); }
static void add_fx_avgpool(nn_model *m) { nn_avgpool2d(m, "pool", 3, 2, 1); }
static void add_fx_bn2d(nn_model *m) { nn_batchnorm(m, "bn", 1e-5f, 0.1f); }
static void add_fx_bn1d(nn_model *m) { nn_batchnorm(m, "bn", 1e-3f, 0.3f); }
static void add_fx_ln(nn_model *m) { nn_layernorm(m, "ln", 1e-5f); }
static void add_fx_ln1d(nn_model *m) { nn_layernorm(m, "ln", 1e-4f); }
static void add_fx_emb(nn_model *m) { nn_embedding(m, "emb", 10, 4); }
static void add_fx_lstm(nn_model *m) { nn_lstm_cell(m, "lstm", 4); }
static void add_fx_gru(nn_model *m) { nn_gru_cell(m, "gru", 4); }
static void add_fx_res(nn_model *m) {
  int x = nn_model_current(m);
  nn_conv2d(m, "c1", 3, 3, 3, 1, 1, 1);
  nn_batchnorm(m, "bn1", 1e-5f, 0.1f);
  nn_activation(m, "r1", NN_RELU, 0);
  int h = nn_conv2d(m, "c2", 3, 3, 3, 1, 1, 1);
  nn_add(m, "sum", h, x);
  nn_activation(m, "r2", NN_RELU, 0);
  nn_flatten(m, "flat");
  nn_dense(m, "fc", 2);
}
static void add_fx_slice_concat(nn_model *m) {
  int x = nn_model_current(m);
  int a = nn_slice(m, "sl", 1, 3);
  nn_model_select(m, x);
  int b = nn_conv2d(m, "cv", 2, 1, 1, 1, 0, 1);
  nn_concat(m, "cat", a, b);
  nn_activation(m, "t", NN_TANH, 0);
  nn_reshape(m, "rs", 10, 2, 1);
  nn_dense(m, "fc", 3);
}
static nn_act g_act;
static float g_alpha;
static void add_fx_act(nn_model *m) { nn_activation(m, "a", g_act, g_alpha); }

static void test_torch_dense(void **s) { value_check("dense", 5, 1, 1, 3, add_fx_dense, true); }
static void test_torch_conv2d(void **s) { value_check("conv2d", 3, 7, 6, 2, add_fx_conv, true); }
static void test_torch_conv2d_b1(void **s) {
  value_check("conv2d_b1", 2, 5, 5, 1, add_fx_conv_b1, true);
}
static void test_torch_convt2d(void **s) { value_check("convt2d", 3, 4, 5, 2, add_fx_convt, true); }
static void test_torch_convt2d_b1(void **s) {
  value_check("convt2d_b1", 4, 3, 3, 1, add_fx_convt_b1, true);
}
static void test_torch_maxpool(void **s) {
  value_check("maxpool2d", 2, 5, 6, 2, add_fx_maxpool, true);
}
static void test_torch_avgpool(void **s) {
  value_check("avgpool2d", 2, 5, 6, 2, add_fx_avgpool, true);
}
/* Training: batch statistics, and the running mean/var (unbiased) and
 * num_batches_tracked after the step. Eval: running statistics, state unchanged. */
static void test_torch_bn2d_train(void **s) {
  value_check("bn2d_train", 3, 4, 5, 4, add_fx_bn2d, true);
}
static void test_torch_bn2d_eval(void **s) {
  value_check("bn2d_eval", 3, 4, 5, 4, add_fx_bn2d, false);
}
static void test_torch_bn1d_train(void **s) {
  value_check("bn1d_train", 6, 1, 1, 5, add_fx_bn1d, true);
}
static void test_torch_bn1d_eval(void **s) {
  value_check("bn1d_eval", 6, 1, 1, 5, add_fx_bn1d, false);
}
static void test_torch_layernorm(void **s) {
  value_check("layernorm", 2, 3, 4, 3, add_fx_ln, true);
  value_check("layernorm1d", 7, 1, 1, 3, add_fx_ln1d, true);
}
static void test_torch_embedding(void **s) {
  value_check("embedding", 3, 1, 1, 4, add_fx_emb, true);
}
static void test_torch_activations(void **s) {
  static const struct {
    const char *name;
    nn_act act;
    float alpha;
  } acts[] = {{"act_relu", NN_RELU, 0},
              {"act_leaky_relu", NN_LEAKY_RELU, 0.1f},
              {"act_elu", NN_ELU, 0.7f},
              {"act_tanh", NN_TANH, 0},
              {"act_sigmoid", NN_SIGMOID, 0},
              {"act_softmax", NN_SOFTMAX, 0},
              {"act_log_softmax", NN_LOG_SOFTMAX, 0}};
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
    g_act = acts[i].act;
    g_alpha = acts[i].alpha;
    value_check(acts[i].name, 2, 2, 3, 3, add_fx_act, true);
  }
}
static void test_torch_lstm(void **s) { value_check("lstm_cell", 13, 1, 1, 3, add_fx_lstm, true); }
static void test_torch_lstm_unrolled(void **s) {
  value_check("lstm_unrolled", 12, 1, 1, 2, add_unrolled_small, true);
}
static void test_torch_gru(void **s) { value_check("gru_cell", 9, 1, 1, 3, add_fx_gru, true); }
static void test_torch_resblock(void **s) { value_check("resblock", 3, 5, 5, 2, add_fx_res, true); }
static void test_torch_slice_concat(void **s) {
  value_check("slice_concat", 6, 2, 2, 2, add_fx_slice_concat, true);
}
static void test_torch_mul(void **s) { value_check("mul", 5, 1, 1, 3, add_mul, true); }
static void test_torch_lstm_masked(void **s) {
  value_check("lstm_masked", 15, 1, 1, 2, add_masked_lstm, true);
}

/* ---- training/eval behaviour ------------------------------------------------------- */

/* Inverted dropout: in training each value is kept with probability 1-p and scaled
 * by 1/(1-p); in eval it is the identity; backward uses the forward's mask. */
static void test_dropout_statistics(void **s) {
  shoal_error err = {0};
  const int B = 64, F = 1000;
  const float p = 0.3f;
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, F, 1, 1);
  nn_dropout(m, "drop", p);
  assert_int_equal(nn_model_build(m, B, 5, &err), 0);
  float *x = malloc((size_t)B * F * sizeof *x), *ones = malloc((size_t)B * F * sizeof *ones);
  for (int i = 0; i < B * F; i++) x[i] = 1.0f + (float)(i % 7), ones[i] = 1.0f;
  const float *y, *dx;
  assert_int_equal(nn_model_forward(m, x, B, &y, &err), 0);
  long dropped = 0;
  for (int i = 0; i < B * F; i++) {
    if (y[i] == 0.0f)
      dropped++;
    else
      assert_float_equal(y[i], x[i] / (1.0f - p), 1e-5f * x[i]);
  }
  /* 64000 Bernoulli(0.3) draws: the rate is within 0.3 +- 0.009 (5 sigma). */
  double rate = (double)dropped / (B * F);
  assert_true(fabs(rate - p) < 0.009);
  assert_int_equal(nn_model_backward(m, ones, &dx, &err), 0);
  for (int i = 0; i < B * F; i++) assert_float_equal(dx[i], y[i] / x[i], 1e-6f);
  /* A second forward draws a different mask. */
  float *y1 = malloc((size_t)B * F * sizeof *y1);
  memcpy(y1, y, (size_t)B * F * sizeof *y1);
  assert_int_equal(nn_model_forward(m, x, B, &y, &err), 0);
  assert_memory_not_equal(y, y1, (size_t)B * F * sizeof *y1);
  /* Eval: identity. */
  nn_model_set_training(m, false);
  assert_false(nn_model_training(m));
  assert_int_equal(nn_model_forward(m, x, B, &y, &err), 0);
  assert_memory_equal(y, x, (size_t)B * F * sizeof *x);
  free(x), free(ones), free(y1);
  nn_model_destroy(m);
}

/* Batch norm in eval mode uses and keeps the running statistics; in training it
 * moves them and counts batches. */
static void test_batchnorm_modes(void **s) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 2, 1, 1);
  nn_batchnorm(m, "bn", 1e-5f, 0.1f);
  assert_int_equal(nn_model_build(m, 4, 1, &err), 0);
  nn_tensor_info rm, rv, nb;
  assert_int_equal(nn_model_find_tensor(m, "bn.running_mean", &rm), 0);
  assert_int_equal(nn_model_find_tensor(m, "bn.running_var", &rv), 0);
  assert_int_equal(nn_model_find_tensor(m, "bn.num_batches_tracked", &nb), 0);
  assert_int_equal(nb.ndim, 0);
  assert_int_equal(nb.numel, 1);
  float *st = nn_model_state(m, NULL);
  float x[8] = {1, 10, 2, 20, 3, 30, 4, 40};
  const float *y;
  nn_model_set_training(m, false);
  assert_int_equal(nn_model_forward(m, x, 4, &y, &err), 0);
  for (int i = 0; i < 8; i++) assert_float_equal(y[i], x[i] / sqrtf(1 + 1e-5f), 1e-5f);
  assert_float_equal(st[nb.offset], 0.0f, 0);
  assert_float_equal(st[rm.offset], 0.0f, 0);
  nn_model_set_training(m, true);
  assert_int_equal(nn_model_forward(m, x, 4, &y, &err), 0);
  assert_float_equal(st[nb.offset], 1.0f, 0);
  assert_float_equal(st[rm.offset], 0.1f * 2.5f, 1e-6f); /* mean of 1..4 */
  assert_float_equal(st[rm.offset + 1], 0.1f * 25.0f, 1e-5f);
  assert_float_equal(st[rv.offset], 0.9f + 0.1f * (5.0f / 3.0f), 1e-6f); /* unbiased var */
  /* One value per channel cannot be normalised in training, as PyTorch says. */
  assert_int_equal(nn_model_forward(m, x, 1, &y, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "'bn'"));
  nn_model_destroy(m);
}

/* ---- the model: tensors, init, copy, graph ------------------------------------------- */

static void test_tensor_table_and_init(void **s) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 4, 9, 9);
  nn_conv2d(m, "conv", 16, 3, 3, 1, 0, 1);
  nn_batchnorm(m, "bn", 1e-5f, 0.1f);
  nn_conv_transpose2d(m, "up", 8, 4, 4, 2, 1, 0);
  nn_flatten(m, "flat");
  nn_dense(m, "fc", 300);
  nn_embedding(m, "emb", 50, 20);
  static const char *names[] = {"conv.weight",     "conv.bias",      "bn.weight",
                                "bn.bias",         "up.weight",      "up.bias",
                                "fc.weight",       "fc.bias",        "emb.weight",
                                "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"};
  assert_int_equal(nn_model_tensor_count(m), 12);
  for (int i = 0; i < 12; i++) { /* the same table before build as after */
    nn_tensor_info ti;
    assert_int_equal(nn_model_tensor(m, i, &ti), 0);
    assert_string_equal(ti.name, names[i]);
  }
  assert_int_equal(nn_model_build(m, 2, 42, &err), 0);
  size_t np, ns, off = 0;
  float *p = nn_model_params(m, &np);
  nn_model_state(m, &ns);
  for (int i = 0; i < 12; i++) {
    nn_tensor_info ti;
    assert_int_equal(nn_model_tensor(m, i, &ti), 0);
    assert_string_equal(ti.name, names[i]);
    assert_int_equal(ti.trainable, i < 9);
    if (i == 9) off = 0;
    assert_int_equal(ti.offset, off); /* contiguous, in order */
    off += ti.numel;
  }
  assert_int_equal(off, ns);
  assert_int_equal(nn_model_tensor(m, 12, &(nn_tensor_info){0}), SHOAL_ERANGE);
  assert_int_equal(nn_model_find_tensor(m, "fc.nope", NULL), SHOAL_ENOENT);
  nn_tensor_info w;
  /* conv (out, in, kh, kw), fan_in = in*kh*kw; init U(-1/sqrt(fan_in), +) */
  nn_model_find_tensor(m, "conv.weight", &w);
  assert_int_equal(w.ndim, 4);
  assert_int_equal(w.shape[0], 16), assert_int_equal(w.shape[1], 4);
  assert_int_equal(w.fan_in, 36), assert_int_equal(w.fan_out, 144);
  /* conv-transpose (in, out, kh, kw); PyTorch's fan_in = out*kh*kw */
  nn_model_find_tensor(m, "up.weight", &w);
  assert_int_equal(w.shape[0], 16), assert_int_equal(w.shape[1], 8);
  assert_int_equal(w.fan_in, 128), assert_int_equal(w.fan_out, 256);
  double bound = 1.0 / sqrt(128.0), mx = 0;
  for (size_t i = 0; i < w.numel; i++) mx = fmax(mx, fabs(p[w.offset + i]));
  assert_true(mx <= bound && mx > 0.95 * bound);
  nn_model_find_tensor(m, "fc.weight", &w);
  assert_int_equal(w.shape[0], 300), assert_int_equal(w.shape[1], 8 * 14 * 14);
  /* U(-b, b) has variance b^2/3 */
  double b2 = 1.0 / (8 * 14 * 14), var = 0;
  for (size_t i = 0; i < w.numel; i++) var += (double)p[w.offset + i] * p[w.offset + i];
  var /= (double)w.numel;
  assert_true(fabs(var / (b2 / 3) - 1) < 0.02);
  nn_model_find_tensor(m, "bn.weight", &w);
  for (size_t i = 0; i < w.numel; i++) assert_float_equal(p[w.offset + i], 1.0f, 0);
  /* embedding N(0, 1) */
  nn_model_find_tensor(m, "emb.weight", &w);
  double mean = 0, sq = 0;
  for (size_t i = 0; i < w.numel; i++)
    mean += p[w.offset + i], sq += p[w.offset + i] * p[w.offset + i];
  mean /= (double)w.numel, sq /= (double)w.numel;
  assert_true(fabs(mean) < 0.1 && fabs(sq - 1) < 0.15);
  /* Same seed, same parameters; another seed, others. */
  nn_model *m2 = nn_model_create(NN_CPU, &err);
  nn_input(m2, 4, 9, 9);
  nn_conv2d(m2, "conv", 16, 3, 3, 1, 0, 1);
  assert_int_equal(nn_model_build(m2, 1, 42, &err), 0);
  assert_memory_equal(nn_model_params(m2, NULL), p, 16 * 36 * sizeof(float));
  nn_model_destroy(m2);
  /* FLOPs: 2 * multiply-adds */
  double f = 2.0 * 16 * 7 * 7 * 36 + 2.0 * 16 * 7 * 7 * 8 * 16 + 2.0 * 1568 * 300;
  assert_float_equal(nn_model_flops_per_sample(m), f, 1);
  nn_model_destroy(m);
}

static nn_model *mlp(int in, int hidden, int out, int max_batch, uint64_t seed) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, in, 1, 1);
  nn_dense(m, "fc1", hidden);
  nn_activation(m, "act1", NN_RELU, 0);
  nn_dense(m, "out", out);
  if (nn_model_build(m, max_batch, seed, &err)) fail_msg("%s", err.msg);
  return m;
}

static void test_copy_for_target_networks(void **s) {
  shoal_error err = {0};
  nn_model *a = mlp(4, 8, 2, 4, 1), *b = mlp(4, 8, 2, 2, 2), *c = mlp(4, 9, 2, 2, 2);
  size_t n;
  float *pa = nn_model_params(a, &n);
  assert_memory_not_equal(pa, nn_model_params(b, NULL), n * sizeof(float));
  assert_int_equal(nn_model_copy(b, a, &err), 0);
  assert_memory_equal(pa, nn_model_params(b, NULL), n * sizeof(float));
  float x[4] = {0.1f, -0.2f, 0.3f, 0.4f};
  const float *ya, *yb;
  float y0[2];
  nn_model_forward(a, x, 1, &ya, &err);
  memcpy(y0, ya, sizeof y0);
  nn_model_forward(b, x, 1, &yb, &err);
  assert_memory_equal(y0, yb, sizeof y0);
  assert_int_equal(nn_model_copy(c, a, &err), SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "fc1.weight"));
  nn_model_destroy(a), nn_model_destroy(b), nn_model_destroy(c);
}

/* Forward at B < max_batch and B = max_batch give each sample the same output. */
static void test_batch_sizes_agree(void **s) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 3, 8, 8);
  nn_conv2d(m, "c", 4, 3, 3, 2, 1, 1);
  nn_activation(m, "r", NN_RELU, 0);
  nn_conv_transpose2d(m, "t", 2, 4, 4, 2, 1, 0);
  nn_flatten(m, "f");
  nn_dense(m, "d", 5);
  assert_int_equal(nn_model_build(m, 5, 3, &err), 0);
  float x[5 * 192];
  shoal_rng rng;
  shoal_rng_seed(&rng, 3);
  for (int i = 0; i < 5 * 192; i++) x[i] = shoal_rng_uniformf(&rng) - 0.5f;
  const float *y;
  float all[25];
  assert_int_equal(nn_model_forward(m, x, 5, &y, &err), 0);
  memcpy(all, y, sizeof all);
  for (int b = 0; b < 5; b++) {
    assert_int_equal(nn_model_forward(m, x + b * 192, 1, &y, &err), 0);
    for (int j = 0; j < 5; j++) assert_float_equal(y[j], all[b * 5 + j], 1e-5f);
  }
  nn_model_destroy(m);
}

/* ---- bad input ----------------------------------------------------------------------- */

static void test_bad_shapes_name_the_layer(void **s) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  assert_true(nn_dense(m, "fc0", 3) < 0); /* no input yet */
  assert_non_null(strstr(nn_model_error(m), "nn_input"));
  assert_int_equal(nn_input(m, 3, 5, 5), 0);
  assert_int_equal(nn_input(m, 3, 5, 5), SHOAL_ESTATE);
  assert_int_equal(nn_conv2d(m, "big", 4, 7, 7, 1, 0, 1), SHOAL_ESHAPE);
  assert_non_null(strstr(nn_model_error(m), "layer 'big'"));
  assert_int_equal(nn_conv2d(m, "c", 4, 3, 3, 1, 0, 1), 1); /* the failed layer was not added */
  assert_int_equal(nn_dense(m, "c", 3), SHOAL_EEXIST);      /* duplicate name */
  assert_non_null(strstr(nn_model_error(m), "'c'"));
  assert_int_equal(nn_reshape(m, "rs", 5, 5, 5), SHOAL_ESHAPE);
  assert_non_null(strstr(nn_model_error(m), "layer 'rs'"));
  assert_int_equal(nn_slice(m, "sl", 3, 2), SHOAL_ERANGE);
  assert_int_equal(nn_lstm_cell(m, "lstm", 100), SHOAL_ESHAPE);
  assert_non_null(strstr(nn_model_error(m), "layer 'lstm'"));
  int d = nn_dense(m, "d", 6);
  assert_int_equal(nn_add(m, "sum", d, 1), SHOAL_ESHAPE);
  assert_non_null(strstr(nn_model_error(m), "layer 'sum'"));
  assert_int_equal(nn_concat(m, "cat", d, 99), SHOAL_ERANGE);
  assert_int_equal(nn_mul(m, "prod", d, 1), SHOAL_ESHAPE); /* (6) by (3, 5, 5) */
  assert_non_null(strstr(nn_model_error(m), "one value per sample"));
  assert_int_equal(nn_conv_transpose2d(m, "ct", 2, 3, 3, 2, 0, 2), SHOAL_EINVAL);
  assert_int_equal(nn_model_select(m, 42), SHOAL_ERANGE);
  assert_int_equal(nn_model_set_output(m, 42), SHOAL_ERANGE);
  assert_int_equal(nn_dropout(m, "dp", 1.5f), SHOAL_EINVAL);
  /* Build reports the first failure, naming its layer. */
  assert_int_not_equal(nn_model_build(m, 4, 1, &err), 0);
  assert_non_null(strstr(err.msg, "nn_input"));
  nn_model_destroy(m);

  m = nn_model_create(NN_CPU, &err);
  nn_input(m, 4, 1, 1);
  nn_dense(m, "fc1", 2);
  assert_int_equal(nn_model_build(m, 0, 1, &err), SHOAL_EINVAL);
  assert_int_equal(nn_model_build(m, 8, 1, &err), 0);
  assert_int_equal(nn_dense(m, "late", 2), SHOAL_ESTATE); /* after build */
  assert_non_null(strstr(nn_model_error(m), "already built"));
  assert_int_equal(nn_model_build(m, 8, 1, &err), SHOAL_ESTATE);
  nn_model_destroy(m);
}

static void test_bad_forward_input(void **s) {
  shoal_error err = {0};
  nn_model *m = mlp(4, 8, 2, 8, 1);
  float x[9 * 4] = {0};
  const float *y;
  assert_int_equal(nn_model_backward(m, x, NULL, &err), SHOAL_ESTATE); /* no forward */
  assert_int_equal(nn_model_forward(m, x, 9, &y, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "batch 9"));
  assert_int_equal(nn_model_forward(m, x, 0, &y, &err), SHOAL_EINVAL);
  x[6] = NAN;
  assert_int_equal(nn_model_forward(m, x, 2, &y, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "input x[6]"));
  x[6] = INFINITY;
  assert_int_equal(nn_model_forward(m, x, 2, &y, &err), SHOAL_ENAN);
  /* The model's own output fed back as input would be overwritten mid-pass. */
  nn_model *sq = mlp(2, 3, 2, 2, 1);
  float x2[2] = {0.5f, -0.5f};
  const float *y2;
  assert_int_equal(nn_model_forward(sq, x2, 1, &y2, &err), 0);
  assert_int_equal(nn_model_forward(sq, y2, 1, &y2, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "own buffers"));
  nn_model_destroy(sq);
  /* A failed forward leaves nothing to go back through. */
  assert_int_equal(nn_model_backward(m, x, NULL, &err), SHOAL_ESTATE);
  nn_model_destroy(m);

  m = nn_model_create(NN_CPU, &err);
  nn_input(m, 2, 1, 1);
  nn_embedding(m, "emb", 5, 3);
  assert_int_equal(nn_model_build(m, 2, 1, &err), 0);
  float idx[4] = {0, 4, 5, 1};
  assert_int_equal(nn_model_forward(m, idx, 2, &y, &err), SHOAL_ERANGE);
  assert_non_null(strstr(err.msg, "layer 'emb'"));
  idx[2] = -1;
  assert_int_equal(nn_model_forward(m, idx, 2, &y, &err), SHOAL_ERANGE);
  idx[2] = 1.5f;
  assert_int_equal(nn_model_forward(m, idx, 2, &y, &err), SHOAL_ERANGE);
  idx[2] = 2;
  assert_int_equal(nn_model_forward(m, idx, 2, &y, &err), 0);
  nn_model_destroy(m);
}

static void test_shared_layers(void **s) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 12, 1, 1);
  add_unrolled_small(m);
  assert_int_equal(nn_model_build(m, 2, 1, &err), 0);
  /* One set of tensors for the three steps. */
  assert_int_equal(nn_model_tensor_count(m), 4);
  assert_int_equal(nn_model_find_tensor(m, "cell_t2.weight_ih", NULL), SHOAL_ENOENT);
  nn_model_destroy(m);
  m = nn_model_create(NN_CPU, &err);
  nn_input(m, 4, 1, 1);
  int a = nn_dense(m, "a", 4);
  assert_int_equal(nn_shared(m, "a2", a), 2); /* (4) -> (4) again: fine */
  nn_dense(m, "b", 3);
  assert_int_equal(nn_shared(m, "a3", a), SHOAL_ESHAPE); /* (3) is not a's input (4) */
  assert_non_null(strstr(nn_model_error(m), "layer 'a3'"));
  assert_int_equal(nn_shared(m, "z", 99), SHOAL_ERANGE);
  int c = nn_add(m, "sum", a, a);
  nn_model_select(m, a);
  assert_int_equal(nn_shared(m, "sum2", c), SHOAL_EINVAL);
  nn_model_destroy(m);
}

/* D(G(z)) as two models: D's input gradient drives G's backward, and G's parameter
 * gradients match finite differences of the composed loss. */
static double dg_loss(nn_model *g, nn_model *d, const float *z, const float *r) {
  shoal_error err = {0};
  const float *x, *y;
  if (nn_model_forward(g, z, 3, &x, &err) || nn_model_forward(d, x, 3, &y, &err))
    fail_msg("%s", err.msg);
  double L = 0;
  for (int i = 0; i < 3; i++) L += (double)y[i] * r[i];
  return L;
}

static void test_two_models_chain(void **s) {
  shoal_error err = {0};
  nn_model *g = nn_model_create(NN_CPU, &err), *d = nn_model_create(NN_CPU, &err);
  nn_input(g, 3, 1, 1);
  nn_dense(g, "fc", 8);
  nn_batchnorm(g, "bn", 1e-5f, 0.1f);
  nn_activation(g, "t", NN_TANH, 0);
  nn_reshape(g, "rs", 2, 2, 2);
  nn_conv_transpose2d(g, "up", 1, 2, 2, 2, 0, 0);
  nn_input(d, 1, 4, 4);
  nn_conv2d(d, "c", 2, 3, 3, 1, 0, 1);
  nn_activation(d, "l", NN_LEAKY_RELU, 0.2f);
  nn_dense(d, "out", 1);
  assert_int_equal(nn_model_build(g, 3, 1, &err), 0);
  assert_int_equal(nn_model_build(d, 3, 2, &err), 0);
  float z[9] = {0.3f, -1, 0.5f, 1.2f, 0.1f, -0.4f, -0.8f, 0.9f, 0.2f}, r[3] = {1, -0.5f, 0.7f};
  const float *x, *y, *dx;
  nn_model_zero_grad(g);
  nn_model_zero_grad(d);
  assert_int_equal(nn_model_forward(g, z, 3, &x, &err), 0);
  assert_int_equal(nn_model_forward(d, x, 3, &y, &err), 0);
  assert_int_equal(nn_model_backward(d, r, &dx, &err), 0);
  assert_int_equal(nn_model_backward(g, dx, NULL, &err), 0);
  size_t np;
  float *p = nn_model_params(g, &np), *gr = nn_model_grads(g, NULL);
  float *ga = malloc(np * sizeof *ga);
  memcpy(ga, gr, np * sizeof *ga);
  const float eps = 1e-2f;
  for (size_t i = 0; i < np; i++) {
    float v = p[i];
    p[i] = v + eps;
    double lp = dg_loss(g, d, z, r);
    p[i] = v - eps;
    double lm = dg_loss(g, d, z, r);
    p[i] = v;
    double num = (lp - lm) / (2.0 * eps);
    if (!close_enough(ga[i], num)) fail_msg("G param %zu: %g, numeric %g", i, ga[i], num);
  }
  free(ga);
  nn_model_destroy(g);
  nn_model_destroy(d);
}

/* NN_SCALE: y = alpha x exactly (uint8 pixels times 1/255 as the float product), and its
 * gradient alpha dy into the input's gradient, written or added; finite differences agree. */
static void test_activation_scale(void **s) {
  enum { B = 2, F = 300 };
  float x[B * F], dy[B * F];
  for (int i = 0; i < B * F; i++) x[i] = (float)(i % 256), dy[i] = (float)(i % 7) - 3.0f;
  const float alpha = 1.0f / 255.0f;
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  assert_int_equal(nn_input(m, 3, 10, 10), 0);
  assert_int_equal(nn_activation(m, "scale", NN_SCALE, alpha), 1);
  assert_int_equal(nn_conv2d(m, "conv", 2, 3, 3, 1, 1, 1), 2);
  assert_int_equal(nn_model_build(m, B, 3, &err), 0);
  const float *y, *dx;
  nn_model *s1 = nn_model_create(NN_CPU, &err);
  nn_input(s1, F, 1, 1);
  nn_activation(s1, "scale", NN_SCALE, alpha);
  assert_int_equal(nn_model_build(s1, B, 1, &err), 0);
  assert_int_equal(nn_model_forward(s1, x, B, &y, &err), 0);
  for (int i = 0; i < B * F; i++) assert_true(y[i] == alpha * x[i]);
  assert_int_equal(nn_model_backward(s1, dy, &dx, &err), 0);
  for (int i = 0; i < B * F; i++) assert_true(dx[i] == alpha * dy[i]);
  nn_model_destroy(s1);
  /* inside a network: the conv's gradients through the scale, and the input's */
  nn_gradcheck_options o = {.per_tensor = -1, .eps = 0.5f};
  nn_gradcheck_report rep;
  assert_int_equal(nn_check_gradients(m, x, B, &o, &rep, &err), 0);
  assert_true(rep.checked > 0);
  /* an alpha that is not finite is refused */
  nn_model *bad = nn_model_create(NN_CPU, &err);
  nn_input(bad, 4, 1, 1);
  assert_true(nn_activation(bad, "s", NN_SCALE, INFINITY) < 0);
  nn_model_destroy(bad);
  nn_model_destroy(m);
}

/* tanh, the sigmoid and softmax (nn's own vectorised e^x, nn/cpu/cpu.h) within 4 ulp of
 * libm's double tanh and exp, over a sweep from -100 to 100 with the branch points (|x| = 0.5
 * for tanh, 0, underflow) and tiny values; softmax of a logit 200 below the max is 0. */
static void test_activation_accuracy(void **s) {
  enum { F = 4096 };
  static float x[F];
  for (int i = 0; i < F; i++) x[i] = -100.0f + 200.0f * (float)i / (F - 1);
  const float special[] = {0.0f,        -0.0f,       1e-20f, -1e-20f, 1e-4f, 0.5f, -0.5f,
                           0.49999997f, 0.50000006f, -87.5f, 87.5f,   9.0f,  -3.0f};
  memcpy(x, special, sizeof special);
  shoal_error err = {0};
  const nn_act acts[] = {NN_TANH, NN_SIGMOID};
  for (int a = 0; a < 2; a++) {
    nn_model *m = nn_model_create(NN_CPU, &err);
    nn_input(m, F, 1, 1);
    nn_activation(m, "a", acts[a], 0);
    assert_int_equal(nn_model_build(m, 1, 1, &err), 0);
    const float *y;
    assert_int_equal(nn_model_forward(m, x, 1, &y, &err), 0);
    for (int i = 0; i < F; i++) {
      double ref = a == 0 ? tanh((double)x[i]) : 1.0 / (1.0 + exp(-(double)x[i]));
      float r = (float)ref;
      double ulp = nextafterf(fabsf(r), INFINITY) - fabsf(r);
      if (fabs(y[i] - ref) > 4 * ulp + 1e-37) {
        fprintf(stderr, "%s(%.9g) = %.9g, want %.9g\n", a ? "sigmoid" : "tanh", x[i], y[i], ref);
        fail();
      }
    }
    nn_model_destroy(m);
  }
  /* softmax over 3 logits, one far below: e^(x - max) underflows to 0 as in libm */
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 3, 1, 1);
  nn_activation(m, "sm", NN_SOFTMAX, 0);
  assert_int_equal(nn_model_build(m, 1, 1, &err), 0);
  const float z[3] = {1.0f, 2.0f, -198.0f};
  const float *y;
  assert_int_equal(nn_model_forward(m, z, 1, &y, &err), 0);
  double e1 = exp(-1.0), sum = 1.0 + e1;
  assert_float_equal(y[0], e1 / sum, 1e-7);
  assert_float_equal(y[1], 1.0 / sum, 1e-7);
  assert_true(y[2] == 0.0f);
  nn_model_destroy(m);
}

/* Batch norm over 300 features (blocks of channels per task, the last one partial) against
 * its equations computed here in double: output, running statistics, and the gradients of
 * gamma, beta and x, at 1 and 2 threads. */
static void test_batchnorm_features(void **s) {
  enum { B = 5, C = 300 };
  shoal_error err = {0};
  for (int th = 1; th <= 2; th++) {
    nn_set_threads(th);
    nn_model *m = nn_model_create(NN_CPU, &err);
    nn_input(m, C, 1, 1);
    nn_activation(m, "a", NN_TANH, 0); /* so the norm's input needs a gradient */
    nn_batchnorm(m, "bn", 1e-3f, 0.3f);
    assert_int_equal(nn_model_build(m, B, 1, &err), 0);
    size_t np, ns;
    float *p = nn_model_params(m, &np), *st = nn_model_state(m, &ns);
    assert_int_equal(np, 2 * C);
    for (int c = 0; c < C; c++)
      p[c] = 0.5f + 0.01f * (float)(c % 7), p[C + c] = 0.1f * (float)(c % 3);
    static float x[B * C], dy[B * C], h[B * C];
    for (int i = 0; i < B * C; i++)
      x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f, dy[i] = (float)((i * 11) % 23) / 11.0f - 1.0f;
    for (int i = 0; i < B * C; i++) h[i] = tanhf(x[i]);
    const float *y, *dx;
    nn_model_zero_grad(m);
    assert_int_equal(nn_model_forward(m, x, B, &y, &err), 0);
    assert_int_equal(nn_model_backward(m, dy, &dx, &err), 0);
    const float *g = nn_model_grads(m, NULL);
    for (int c = 0; c < C; c++) {
      double mu = 0, var = 0, sdy = 0, sdyx = 0;
      for (int b = 0; b < B; b++) mu += h[b * C + c];
      mu /= B;
      for (int b = 0; b < B; b++) var += (h[b * C + c] - mu) * (h[b * C + c] - mu);
      var /= B;
      double rs = 1.0 / sqrt(var + 1e-3);
      for (int b = 0; b < B; b++) {
        double xh = (h[b * C + c] - mu) * rs;
        assert_float_equal(y[b * C + c], p[c] * xh + p[C + c], 1e-5);
        sdy += dy[b * C + c], sdyx += dy[b * C + c] * xh;
      }
      assert_float_equal(g[c], sdyx, 1e-4);
      assert_float_equal(g[C + c], sdy, 1e-4);
      assert_float_equal(st[c], 0.3 * mu, 1e-6);                          /* running mean from 0 */
      assert_float_equal(st[C + c], 0.7 + 0.3 * var * B / (B - 1), 1e-5); /* from 1 */
      for (int b = 0; b < B; b++) {
        double xh = (h[b * C + c] - mu) * rs, dth = 1.0 - (double)h[b * C + c] * h[b * C + c];
        double want = p[c] * rs / B * (B * dy[b * C + c] - sdy - xh * sdyx) * dth;
        assert_float_equal(dx[b * C + c], want, 1e-4);
      }
    }
    nn_model_destroy(m);
  }
  nn_set_threads(1);
}

/* Two threads (OpenBLAS's pool and nn's own, which runs the conv kernels and batch norm's
 * channels) give the same results as one, to float rounding: outputs, parameter gradients
 * and the input's. The second conv is strided and padded and its input gets a gradient
 * (dx on both threads). */
static void test_threads(void **s) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 8, 16, 16);
  nn_conv2d(m, "c", 32, 3, 3, 1, 1, 1);
  nn_batchnorm(m, "bn", 1e-5f, 0.1f); /* one task per channel */
  nn_conv2d(m, "c2", 12, 4, 4, 2, 1, 1);
  nn_flatten(m, "f");
  nn_dense(m, "d", 64);
  assert_int_equal(nn_model_build(m, 16, 1, &err), 0);
  size_t nx = 16 * 8 * 16 * 16, np;
  float *x = malloc(nx * sizeof *x), y1[16 * 64], dy[16 * 64];
  for (size_t i = 0; i < nx; i++) x[i] = (float)(i % 17) * 0.05f - 0.4f;
  for (int i = 0; i < 16 * 64; i++) dy[i] = (float)(i % 13) * 0.1f - 0.6f;
  nn_model_params(m, &np);
  float *g1 = malloc(np * sizeof *g1), *dx1 = malloc(nx * sizeof *dx1);
  const float *y, *dx;
  nn_set_threads(1);
  assert_int_equal(nn_model_forward(m, x, 16, &y, &err), 0);
  memcpy(y1, y, sizeof y1);
  nn_model_zero_grad(m);
  assert_int_equal(nn_model_backward(m, dy, &dx, &err), 0);
  memcpy(g1, nn_model_grads(m, NULL), np * sizeof *g1);
  memcpy(dx1, dx, nx * sizeof *dx1);
  nn_set_threads(2);
  assert_int_equal(nn_model_forward(m, x, 16, &y, &err), 0);
  for (int i = 0; i < 16 * 64; i++) assert_float_equal(y[i], y1[i], 1e-4f * (1 + fabsf(y1[i])));
  nn_model_zero_grad(m);
  assert_int_equal(nn_model_backward(m, dy, &dx, &err), 0);
  const float *g2 = nn_model_grads(m, NULL);
  for (size_t i = 0; i < np; i++) assert_float_equal(g2[i], g1[i], 1e-4f * (1 + fabsf(g1[i])));
  for (size_t i = 0; i < nx; i++) assert_float_equal(dx[i], dx1[i], 1e-4f * (1 + fabsf(dx1[i])));
  nn_set_threads(1);
  free(x), free(g1), free(dx1);
  nn_model_destroy(m);
}

/* Every conv path this CPU runs (nn__conv_path_force: nn's own kernels, portable,
 * AVX2, AVX-512) against im2col + GEMM, which the PyTorch and finite-difference checks
 * above pin down: outputs, dW, db and dx on the Nature-DQN and DCGAN geometries (strides
 * 4 and 2, padding, space-to-depth with kh not a multiple of the stride), a 3x2 kernel
 * with stride 3 and padding 2, conv-transposes with and without output padding, and
 * batches whose columns end mid-panel, at 1 and 2 threads; stride-1 layers also with the
 * row kernels on (part vectors, tiles and tap groups, a fused ReLU) and off. */
typedef struct conv_geo {
  int C, H, W, Co, kh, kw, s, pad, B;
  int t, opad; /* conv-transpose2d (square kernels), its output padding */
  int relu;    /* a ReLU after the conv (fused into its output) */
} conv_geo;

/* got agrees with the gemm path's ref to 1e-4 relative, or the test fails naming it. */
static void agree(const char *kind, size_t gi, const char *path, int t, const char *what,
                  const float *got, const float *ref, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (fabsf(got[i] - ref[i]) > 1e-4f * (1 + fabsf(ref[i])))
      fail_msg("%s %zu, %s, %d threads: %s[%zu] %g vs gemm %g", kind, gi, path, t, what, i, got[i],
               ref[i]);
}

/* Runs built model m forward and backward at batch B on fixed inputs and copies out its
 * output, parameter gradients and input gradient; checks that a second forward and
 * backward add the same gradients again; destroys m. */
static void fwd_bwd_into(nn_model *m, int B, float *y, float *g, float *dx, size_t ny, size_t np,
                         size_t nx) {
  shoal_error err = {0};
  float *x = malloc(nx * sizeof *x), *dy = malloc(ny * sizeof *dy);
  for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 7919) % 101) * 0.02f - 1.0f;
  for (size_t i = 0; i < ny; i++) dy[i] = (float)((i * 104729) % 97) * 0.02f - 0.95f;
  const float *yo, *dxo;
  assert_int_equal(nn_model_forward(m, x, B, &yo, &err), 0);
  memcpy(y, yo, ny * sizeof *y);
  nn_model_zero_grad(m);
  assert_int_equal(nn_model_backward(m, dy, &dxo, &err), 0);
  size_t have;
  memcpy(g, nn_model_grads(m, &have), np * sizeof *g);
  assert_int_equal(have, np);
  memcpy(dx, dxo, nx * sizeof *dx);
  /* A second pass adds to the gradients (a GAN's two batches, accumulation): a path that
   * stored its dW instead of adding it would leave them as they were. */
  assert_int_equal(nn_model_forward(m, x, B, &yo, &err), 0);
  assert_int_equal(nn_model_backward(m, dy, &dxo, &err), 0);
  const float *g2 = nn_model_grads(m, &have);
  for (size_t i = 0; i < np; i++)
    if (fabsf(g2[i] - 2 * g[i]) > 1e-5f * (1 + fabsf(2 * g[i])))
      fail_msg("grad[%zu] after a second backward %g, twice the first %g", i, g2[i], 2 * g[i]);
  free(x), free(dy);
  nn_model_destroy(m);
}

typedef void (*path_run_fn)(const void *geo, const char *path, int threads, float *y, float *g,
                            float *dx, size_t ny, size_t np, size_t nx);

/* Geometry gi run on every kernel path the CPU has, at 1 and 2 threads, agrees with the gemm
 * path: outputs, parameter gradients and input gradients. */
static void paths_agree(const char *kind, size_t gi, path_run_fn run, const void *geo, size_t ny,
                        size_t np, size_t nx) {
  static const char *paths[] = {"portable", "avx2", "avx512"};
  float *y0 = malloc(ny * 4), *g0 = malloc(np * 4), *d0 = malloc(nx * 4);
  float *y1 = malloc(ny * 4), *g1 = malloc(np * 4), *d1 = malloc(nx * 4);
  run(geo, "gemm", 1, y0, g0, d0, ny, np, nx);
  for (size_t p = 0; p < 3; p++)
    for (int t = 1; t <= 2; t++) {
      if (strcmp(nn__conv_path_force(paths[p]), paths[p])) continue; /* the CPU lacks it */
      run(geo, paths[p], t, y1, g1, d1, ny, np, nx);
      agree(kind, gi, paths[p], t, "y", y1, y0, ny);
      agree(kind, gi, paths[p], t, "grad", g1, g0, np);
      agree(kind, gi, paths[p], t, "dx", d1, d0, nx);
    }
  free(y0), free(g0), free(d0), free(y1), free(g1), free(d1);
}

static void conv_run(const void *geo, const char *path, int threads, float *y, float *g, float *dx,
                     size_t ny, size_t np, size_t nx) {
  const conv_geo *c = geo;
  shoal_error err = {0};
  assert_non_null(nn__conv_path_force(path));
  nn_set_threads(threads);
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, c->C, c->H, c->W);
  nn_activation(m, "a", NN_TANH, 0); /* so the conv's input needs a gradient */
  if (c->t)
    nn_conv_transpose2d(m, "convt", c->Co, c->kh, c->kw, c->s, c->pad, c->opad);
  else
    nn_conv2d(m, "conv", c->Co, c->kh, c->kw, c->s, c->pad, 1);
  if (c->relu) nn_activation(m, "r", NN_RELU, 0);
  assert_int_equal(nn_model_build(m, c->B + 1, 7, &err), 0); /* B below max_batch */
  fwd_bwd_into(m, c->B, y, g, dx, ny, np, nx);
}

/* Conv geometries the paths must agree on: C, H, W, C_out, kh, kw, stride, pad, batch,
 * (conv-transpose, output padding, a ReLU after). */
static const conv_geo geos[] = {
    {4, 84, 84, 32, 8, 8, 4, 0, 3}, /* Nature-DQN */
    {32, 20, 20, 64, 4, 4, 2, 0, 5},
    {64, 9, 9, 64, 3, 3, 1, 0, 3},
    {1, 28, 28, 64, 4, 4, 2, 1, 3}, /* DCGAN D */
    {16, 14, 14, 24, 4, 4, 2, 1, 2},
    {5, 13, 11, 7, 3, 2, 3, 2, 3},        /* odd: stride 3, padding 2, 3x2, 7 channels */
    {4, 10, 10, 16, 3, 3, 1, 0, 5},       /* MinAtar */
    {128, 7, 7, 64, 4, 4, 2, 1, 3, 1, 0}, /* DCGAN G's first conv-transpose */
    {6, 5, 4, 5, 3, 3, 2, 1, 3, 1, 1},    /* output padding */
    {8, 6, 6, 4, 3, 3, 1, 0, 2, 1, 0},    /* stride 1 */
    {3, 4, 5, 40, 4, 4, 3, 2, 2, 1, 2},   /* stride 3, padding 2 */
    {32, 14, 14, 64, 3, 3, 1, 1, 3},      /* 3x3 stride 1 (Winograd): Fashion-MNIST's */
    {17, 7, 9, 18, 3, 3, 1, 2, 2},        /* odd sizes, padding 2, a channel tail */
    {16, 3, 4, 16, 3, 3, 1, 0, 40},       /* one tile a sample, tasks ending mid-block */
    {8, 9, 9, 12, 3, 3, 2, 1, 3},         /* 3x3 stride 2: zero taps in the s2d kernel */
    {6, 10, 12, 8, 4, 4, 2, 1, 3},        /* 24 s2d channels: a part panel in the direct dx */
    {3, 18, 22, 20, 8, 8, 4, 3, 2},     /* 8x8/4 with padding 3: Winograd over 48 s2d channels */
    {5, 12, 13, 9, 6, 6, 2, 2, 2},      /* 6x6/2: a 3x3 kernel over the s2d form */
    {7, 5, 6, 10, 6, 6, 2, 1, 2, 1, 1}, /* its conv-transpose, output padding 1 */
    {9, 6, 5, 6, 4, 4, 2, 1, 3, 1, 1},  /* a 4x4/2 conv-transpose with output padding */
    {2, 23, 21, 6, 10, 10, 5, 3, 2},    /* 10x10/5: five column phases in Winograd's xh */
    {4, 10, 10, 16, 3, 3, 1, 0, 5, 0, 0, 1}, /* MinAtar's with its ReLU: the row kernels */
    {3, 13, 11, 7, 3, 2, 1, 0, 3, 0, 0, 1},  /* rows: part vectors, tiles and tap groups */
    {2, 5, 9, 5, 2, 3, 1, 0, 2},             /* rows of 7: every vector a part one */
};

/* The layer of conv_run (a conv2d or a conv-transpose2d, named "conv"), built. */
static nn_model *conv_model(const conv_geo *c) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, c->C, c->H, c->W);
  nn_activation(m, "a", NN_TANH, 0);
  if (c->t)
    nn_conv_transpose2d(m, "conv", c->Co, c->kh, c->kw, c->s, c->pad, c->opad);
  else
    nn_conv2d(m, "conv", c->Co, c->kh, c->kw, c->s, c->pad, 1);
  if (c->relu) nn_activation(m, "r", NN_RELU, 0);
  assert_int_equal(nn_model_build(m, c->B + 1, 7, &err), 0);
  return m;
}

/* The layer of conv_run, its kernel paths pinned (nn__node.kp: what a plan of
 * nn/cpu/plan.c sets), then run forward and backward. */
static void conv_run_pinned(const conv_geo *c, const signed char kp[3], float *y, float *g,
                            float *dx, size_t ny, size_t np, size_t nx) {
  nn_model *m = conv_model(c);
  int id = nn_model_find_node(m, "conv");
  assert_true(id >= 0);
  memcpy(m->nodes[id].kp, kp, 3);
  int was = nn__plan_mode(0); /* timing on would replace the pinned paths with its own */
  fwd_bwd_into(m, c->B, y, g, dx, ny, np, nx);
  nn__plan_mode(was);
}

/* Under ThreadSanitizer the combinations run with two threads only: TSan is there for the
 * pool's threads, the one-thread arithmetic is checked by the other builds, and both
 * counts took 145 s there on the AVX2 kind, past the test's 120 s. */
#ifdef __SANITIZE_THREAD__
#define PLAN_T0 2
#define PLAN_ONE_ISA 1 /* and on the best ISA the CPU has only (80 -> 65 s there) */
#else
#define PLAN_T0 1
#define PLAN_ONE_ISA 0
#endif

/* Every path a plan can choose, in every combination a plan can hold (the forward; dW with
 * dx, or both on im2col + GEMM), on each ISA the CPU has, agrees with the gemm path, for
 * conv2d and conv-transpose2d layers. Plans make pairs the fixed rules never run
 * (Winograd's dW with the packed dx: that pair once read tap offsets Winograd had
 * overwritten). */
static void test_conv_planned_paths_agree(void **s) {
  if (getenv("SHOAL_NN_CONV_PATH") || getenv("SHOAL_NN_WINOGRAD")) {
    printf("  (in test_nn_layers itself: it runs every instruction set)\n");
    return;
  }
  static const char *isas[] = {"portable", "avx2", "avx512"};
  static const int fwds[] = {NN__KP_GEMM, NN__KP_PACKED, NN__KP_DIRECT,
                             NN__KP_ROW,  NN__KP_WINO,   NN__KP_DXD};
  static const int dws[] = {NN__KP_PACKED, NN__KP_ROW, NN__KP_WINO};
  static const int dxs[] = {NN__KP_PACKED, NN__KP_DXD, NN__KP_WINO};
  const char *was = nn__conv_path_force(NULL);
  int combos = 0, tcombos = 0;
  for (size_t gi = 0; gi < sizeof geos / sizeof geos[0]; gi++) {
    const conv_geo *c = &geos[gi];
    int Ho = (c->H + 2 * c->pad - c->kh) / c->s + 1, Wo = (c->W + 2 * c->pad - c->kw) / c->s + 1;
    if (c->t)
      Ho = (c->H - 1) * c->s - 2 * c->pad + c->kh + c->opad,
      Wo = (c->W - 1) * c->s - 2 * c->pad + c->kw + c->opad;
    size_t ny = (size_t)c->B * c->Co * Ho * Wo, nx = (size_t)c->B * c->C * c->H * c->W;
    size_t np = (size_t)c->Co * c->C * c->kh * c->kw + c->Co;
    float *y0 = malloc(ny * 4), *g0 = malloc(np * 4), *d0 = malloc(nx * 4);
    float *y1 = malloc(ny * 4), *g1 = malloc(np * 4), *d1 = malloc(nx * 4);
    nn__conv_path_force("gemm");
    conv_run(c, "gemm", 1, y0, g0, d0, ny, np, nx);
    for (size_t ii = 0; ii < 3; ii++) {
      if (PLAN_ONE_ISA && ii + 1 < 3 && !strcmp(nn__conv_path_force(isas[ii + 1]), isas[ii + 1]))
        continue;                                                    /* a better one follows */
      if (strcmp(nn__conv_path_force(isas[ii]), isas[ii])) continue; /* the CPU lacks it */
      nn_model *q = conv_model(c); /* to ask nn__convk_can with, at this geometry */
      const nn__node *n = &q->nodes[nn_model_find_node(q, "conv")];
      for (int t = PLAN_T0; t <= 2; t++) {
        nn_set_threads(t);
        for (size_t f = 0; f < sizeof fwds / sizeof *fwds; f++) {
          if (!nn__convk_can(q, n, NN__PH_FWD, fwds[f])) continue;
          for (size_t w = 0; w <= sizeof dws / sizeof *dws; w++) /* the last: GEMM for both */
            for (size_t x = 0; x < sizeof dxs / sizeof *dxs; x++) {
              bool gemm = w == sizeof dws / sizeof *dws;
              if (gemm ? x > 0
                       : !nn__convk_can(q, n, NN__PH_DW, dws[w]) ||
                             !nn__convk_can(q, n, NN__PH_DX, dxs[x]))
                continue;
              signed char kp[3] = {(signed char)fwds[f],
                                   (signed char)(gemm ? NN__KP_GEMM : dws[w]),
                                   (signed char)(gemm ? NN__KP_GEMM : dxs[x])};
              conv_run_pinned(c, kp, y1, g1, d1, ny, np, nx);
              char what[96];
              snprintf(what, sizeof what, "plan %s/%s/%s", nn__kpath_name(kp[0]),
                       nn__kpath_name(kp[1]), nn__kpath_name(kp[2]));
              agree(what, gi, isas[ii], t, "y", y1, y0, ny);
              agree(what, gi, isas[ii], t, "grad", g1, g0, np);
              agree(what, gi, isas[ii], t, "dx", d1, d0, nx);
              combos++;
              tcombos += c->t;
            }
        }
      }
      nn_model_destroy(q);
    }
    free(y0), free(g0), free(d0), free(y1), free(g1), free(d1);
  }
  printf("  %d planned path combinations agree with gemm (%d of them conv-transpose)\n", combos,
         tcombos);
  assert_true(combos > (PLAN_T0 == 1 ? 50 : 25));
  assert_true(tcombos > (PLAN_T0 == 1 ? 20 : 10));
  nn__conv_path_force(was);
  nn_set_threads(1);
}

/* Paths chosen by timing (nn/cpu/plan.c): a plan in the file is used as it is (every process
 * on a machine runs the same paths), one naming a path that cannot run the layer is timed
 * again, a layer timed here is added to the file, and nn_model_kernels says what ran. Runs
 * first, before the tests that switch the rules' paths by hand. */
static char plan_file[256];

static nn_model *plan_model(int C, int H, int Co, int k, int s, int pad, int B) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, C, H, H);
  nn_conv2d(m, "conv", Co, k, k, s, pad, 1);
  nn_activation(m, "r", NN_RELU, 0);
  assert_int_equal(nn_model_build(m, B, 3, &err), 0);
  size_t nx = (size_t)B * C * H * H;
  float *x = calloc(nx, sizeof *x), *dy = NULL;
  for (size_t i = 0; i < nx; i++) x[i] = (float)(i % 13) * 0.1f;
  const float *y, *dx;
  assert_int_equal(nn_model_forward(m, x, B, &y, &err), 0);
  int oc, oh, ow;
  nn_node_shape(m, nn_model_find_node(m, "r"), &oc, &oh, &ow);
  size_t ny = (size_t)B * oc * oh * ow;
  dy = calloc(ny, sizeof *dy);
  for (size_t i = 0; i < ny; i++) dy[i] = (float)(i % 7) * 0.1f;
  nn_model_zero_grad(m);
  assert_int_equal(nn_model_backward(m, dy, &dx, &err), 0);
  free(x), free(dy);
  return m;
}

/* A plan file's whole text (the caller frees it) */
static char *read_whole(const char *path) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  assert_true(getdelim(&text, &len, 0, f) > 0);
  fclose(f);
  return text;
}

/* plan_model's paths as nn_model_kernels writes them, into text; the model destroyed */
static void kernels_of(int C, int H, int Co, int k, int st, int pad, int B, char *text,
                       size_t cap) {
  nn_model *m = plan_model(C, H, Co, k, st, pad, B);
  nn_model_kernels(m, text, cap);
  printf("  %s", text);
  nn_model_destroy(m);
}

static void test_conv_plans(void **s) {
  if (!nn__plan_on()) {
    printf("  SKIPPED: the kernel paths are forced here (SHOAL_NN_PLAN, _ROW, _DIRECT, _WINOGRAD)\n");
    return;
  }
  assert_string_equal(nn__plan_file(), plan_file);
  FILE *f = fopen(plan_file, "w");
  assert_non_null(f);
  const char *isa = nn__conv_path_name(nn__conv_path_get());
  /* MinAtar's layer at batch 5, pinned to im2col + GEMM; a padded 3x3 layer "on rows" (the
   * row kernels take no padding) */
  fprintf(f, "# a test's plans\nconv2d:4x10x10>16:k3x3:s1:p0:d1:B5:%s:fwd gemm - -\n", isa);
  fprintf(f, "conv2d:4x10x10>16:k3x3:s1:p0:d1:B5:%s:bwd - gemm gemm\n", isa);
  fprintf(f, "conv2d:8x9x9>8:k3x3:s1:p1:d1:B3:%s:fwd row - -\n", isa);
  fclose(f);
  char text[1024];
  kernels_of(4, 10, 16, 3, 1, 0, 5, text, sizeof text);
  assert_non_null(strstr(text, "conv: batch 5: forward gemm, dW gemm, dx gemm"));

  kernels_of(8, 9, 8, 3, 1, 1, 3, text, sizeof text);
  assert_null(strstr(text, "forward row"));
  assert_null(strstr(text, "forward -"));

  /* not in the file: timed, kept, written; a second model of the shape runs the same */
  char first[1024];
  kernels_of(4, 10, 16, 3, 1, 0, 4, first, sizeof first);
  assert_non_null(strstr(first, "conv: batch 4: forward "));
  assert_null(strstr(first, " -"));
  kernels_of(4, 10, 16, 3, 1, 0, 4, text, sizeof text);
  assert_string_equal(text, first);

  char *file = read_whole(plan_file);
  char key[128];
  snprintf(key, sizeof key, "conv2d:4x10x10>16:k3x3:s1:p0:d1:B4:%s:fwd ", isa);
  assert_non_null(strstr(file, key));
  snprintf(key, sizeof key, "conv2d:4x10x10>16:k3x3:s1:p0:d1:B4:%s:bwd - ", isa);
  assert_non_null(strstr(file, key));
  snprintf(key, sizeof key, "conv2d:8x9x9>8:k3x3:s1:p1:d1:B3:%s:fwd ", isa);
  const char *a = strstr(file, key), *b = a ? strstr(a + 1, key) : NULL;
  assert_non_null(b); /* the row line, then the one timed again */
  free(file);
}

/* A dense layer's plans, as a conv's: the file's plan used as it is, one naming a path that
 * cannot run the product timed again, a new one timed and written, and nn_model_kernels
 * lists them. */
static nn_model *dense_plan_model(int in, int out, int B) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, in, 1, 1);
  nn_activation(m, "a", NN_TANH, 0); /* the dense's input needs a gradient: dx runs */
  nn_dense(m, "d", out);
  assert_int_equal(nn_model_build(m, B, 3, &err), 0);
  float *x = calloc((size_t)B * in, sizeof *x), *dy = calloc((size_t)B * out, sizeof *dy);
  for (int i = 0; i < B * in; i++) x[i] = (float)(i % 13) * 0.1f;
  for (int i = 0; i < B * out; i++) dy[i] = (float)(i % 7) * 0.1f;
  const float *y, *dx;
  assert_int_equal(nn_model_forward(m, x, B, &y, &err), 0);
  nn_model_zero_grad(m);
  assert_int_equal(nn_model_backward(m, dy, &dx, &err), 0);
  free(x), free(dy);
  return m;
}

static void dense_kernels_of(int in, int out, int B, char *text, size_t cap) {
  nn_model *m = dense_plan_model(in, out, B);
  nn_model_kernels(m, text, cap);
  printf("  %s", text);
  nn_model_destroy(m);
}

static void test_dense_plans(void **s) {
  if (!nn__plan_on()) {
    printf(
        "  SKIPPED: the kernel paths are forced here (SHOAL_NN_PLAN, _ROW, _DIRECT, _WINOGRAD)\n");
    return;
  }
  const char *isa = nn__conv_path_name(nn__conv_path_get());
  FILE *f = fopen(plan_file, "a");
  assert_non_null(f);
  /* pinned to sgemm; a forward "on wtiles" for the backward (no such form: timed again) */
  fprintf(f, "dense:96>40:B6:%s:fwd gemm - -\ndense:96>40:B6:%s:bwd - gemm gemm\n", isa, isa);
  fprintf(f, "dense:50>30:B7:%s:bwd - wtiles gemm\n", isa);
  fclose(f);
  char text[1024], first[1024];
  dense_kernels_of(96, 40, 6, text, sizeof text);
  assert_string_equal(text, "d: batch 6: forward gemm, dW gemm, dx gemm\n");

  dense_kernels_of(50, 30, 7, text, sizeof text);
  assert_null(strstr(text, "dW wtiles"));
  assert_null(strstr(text, " -"));

  /* not in the file: timed, kept, written; a second model of the shape runs the same */
  dense_kernels_of(64, 48, 5, first, sizeof first);
  assert_non_null(strstr(first, "d: batch 5: forward "));
  assert_null(strstr(first, " -"));
  dense_kernels_of(64, 48, 5, text, sizeof text);
  assert_string_equal(text, first);

  char *file = read_whole(plan_file);
  char key[128];
  snprintf(key, sizeof key, "dense:64>48:B5:%s:fwd ", isa);
  assert_non_null(strstr(file, key));
  snprintf(key, sizeof key, "dense:64>48:B5:%s:bwd - ", isa);
  assert_non_null(strstr(file, key));
  snprintf(key, sizeof key, "dense:50>30:B7:%s:bwd ", isa);
  const char *a = strstr(file, key), *b = a ? strstr(a + 1, key) : NULL;
  assert_non_null(b); /* the wtiles line, then the one timed again */
  free(file);
}

static void test_conv_paths_agree(void **s) {
  const char *was = nn__conv_path_force(NULL);
  int was_w = nn__wino_mode(-1), was_d = nn__direct_mode(-1), was_r = nn__row_mode(-1);
  for (size_t gi = 0; gi < sizeof geos / sizeof geos[0]; gi++) {
    const conv_geo *c = &geos[gi];
    int Ho = (c->H + 2 * c->pad - c->kh) / c->s + 1, Wo = (c->W + 2 * c->pad - c->kw) / c->s + 1;
    if (c->t)
      Ho = (c->H - 1) * c->s - 2 * c->pad + c->kh + c->opad,
      Wo = (c->W - 1) * c->s - 2 * c->pad + c->kw + c->opad;
    size_t ny = (size_t)c->B * c->Co * Ho * Wo, nx = (size_t)c->B * c->C * c->H * c->W;
    size_t np = (size_t)c->Co * c->C * c->kh * c->kw + c->Co;
    /* Winograd (nn/cpu/wino.c) off, chosen, and at each tile size m it has for the layer:
     * 3x3 stride 1, and kernels 2 or 3 times their stride (the space-to-depth form) */
    int r = (c->kh + c->s - 1) / c->s;
    bool w = c->kh == c->kw && (r == 2 || r == 3) && r * c->s == c->kh && c->pad < c->kh;
    /* and the direct forward and dx over channels-last s2d tensors, or the packed ones
     * (convk.c), where the space-to-depth form has 16 channels or more (a conv-transpose's
     * is that of its output, the input of the conv it is the adjoint of) */
    bool d = (c->t ? c->Co : c->C) * c->s * c->s >= 16;
    for (int mode = w ? 0 : -1; mode <= (w ? 5 : -1); mode++)
      for (int dm = d && mode <= 0 ? 0 : 1; dm <= 1; dm++) {
        nn__wino_mode(mode);
        nn__direct_mode(dm);
        char kind[48];
        snprintf(kind, sizeof kind,
                 mode > 0 ? "geometry (winograd %d)"
                 : dm     ? "geometry"
                          : "geometry (packed)",
                 mode);
        paths_agree(kind, gi, conv_run, c, ny, np, nx);
      }
    /* the row kernels (stride 1, no padding) on every such layer, and off */
    if (!c->t && c->s == 1 && c->pad == 0) {
      nn__wino_mode(0);
      nn__direct_mode(0);
      nn__row_mode(2);
      paths_agree("geometry (row)", gi, conv_run, c, ny, np, nx);
      nn__row_mode(0);
      paths_agree("geometry (no row)", gi, conv_run, c, ny, np, nx);
      nn__row_mode(was_r);
    }
  }
  nn__wino_mode(was_w);
  nn__direct_mode(was_d);
  nn__conv_path_force(was);
  nn_set_threads(1);
}

/* nn's thread pool runs each task of a job exactly once, and returns only when all have
 * finished: jobs of uneven sizes back to back, as a training step's layers are. A worker
 * late from one job once claimed a task of the next before it was published (a dW panel
 * added twice, or a layer's output read before a task had written it). */
typedef struct pool_probe {
  atomic_int ran[16];
  atomic_int finished;
} pool_probe;

static void pool_probe_task(void *ctx, int task, int thread) {
  pool_probe *p = ctx;
  atomic_fetch_add(&p->ran[task], 1);
  for (volatile int i = 0; i < (task % 3) * 50; i++) {
  }
  atomic_fetch_add(&p->finished, 1);
}

static void test_pool_each_task_once(void **s) {
  nn_set_threads(2);
  pool_probe p;
  for (int job = 0; job < 50000; job++) {
    int n = 1 + (job * 7 + job / 3) % 9; /* 1..9 tasks, growing and shrinking */
    for (int t = 0; t < 16; t++) atomic_store(&p.ran[t], 0);
    atomic_store(&p.finished, 0);
    nn__parallel_for(n, pool_probe_task, &p);
    if (atomic_load(&p.finished) != n)
      fail_msg("job %d: returned with %d of %d tasks finished", job, atomic_load(&p.finished), n);
    for (int t = 0; t < 16; t++)
      if (atomic_load(&p.ran[t]) != (t < n))
        fail_msg("job %d of %d tasks: task %d ran %d times", job, n, t, atomic_load(&p.ran[t]));
  }
  nn_set_threads(1);
}

/* Dense layers on nn's own kernels (nn/cpu/densek.c) against the gemm path, at shapes
 * that take them (shapes they leave to sgemm would compare sgemm with itself): partial
 * panels and row tiles, no bias, and an input read by two layers (dx added, not stored). */
typedef struct dense_geo {
  int B, in, out;
  unsigned flags;
  bool relu; /* a ReLU after d1: fused into its forward */
} dense_geo;

static void dense_run(const void *geo, const char *path, int threads, float *y, float *g, float *dx,
                      size_t ny, size_t np, size_t nx) {
  const dense_geo *d = geo;
  shoal_error err = {0};
  assert_non_null(nn__conv_path_force(path));
  nn_set_threads(threads);
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, d->in, 1, 1);
  int a = nn_activation(m, "a", NN_TANH, 0); /* so the dense's input needs a gradient */
  int d1 = nn_dense_ex(m, "d1", d->out, d->flags);
  if (d->relu) d1 = nn_activation(m, "r", NN_RELU, 0);
  nn_model_select(m, a);
  int d2 = nn_dense_ex(m, "d2", d->out, 0);
  nn_add(m, "sum", d1, d2);
  assert_int_equal(nn_model_build(m, d->B + 3, 7, &err), 0); /* B below max_batch */
  fwd_bwd_into(m, d->B, y, g, dx, ny, np, nx);
}

static const dense_geo dense_geos[] = {
    {32, 1024, 128, 0, true},   /* MinAtar's: y^T = W x^T */
    {24, 2500, 40, 0, true},    /* rows 10 KB apart (AVX2 only: AVX-512 leaves it to sgemm) */
    {37, 275, 150, NN_NO_BIAS}, /* partial panels and row tiles */
    {70, 333, 109, NN_NO_BIAS}, /* batch above the width: the backward only */
    {20, 400, 90, 0},           /* a batch under one panel */
    /* under 32K weights (the AVX2 path's 6x16 tiles) */
    {256, 4, 64, 0, true},          /* the DQN MLP's first layer: dW^T = x^T dy */
    {37, 64, 64, NN_NO_BIAS, true}, /* a part row tile */
    {50, 30, 21, 0, true},          /* part panels: masked loads and stores */
    {13, 20, 2, 0},                 /* under 8 outputs: the forward on sgemm */
    {300, 150, 100, 0, true},       /* split over the threads */
    /* one output or one input: the y^T and dW^T tiles have a column stride of 1, and the
     * bias is still per output (the planner's tiles once read it per batch row) */
    {40, 32, 1, 0, true},
    {40, 1, 24, 0},
};

/* The fixed rules (densek.c) on each instruction set */
static void test_dense_paths_agree(void **s) {
  const char *was = nn__conv_path_force(NULL);
  int was_plan = nn__plan_mode(0);
  for (size_t gi = 0; gi < sizeof dense_geos / sizeof dense_geos[0]; gi++) {
    const dense_geo *d = &dense_geos[gi];
    size_t ny = (size_t)d->B * d->out, nx = (size_t)d->B * d->in;
    size_t np = 2 * (size_t)d->out * d->in + d->out + (d->flags & NN_NO_BIAS ? 0 : d->out);
    paths_agree("dense", gi, dense_run, d, ny, np, nx);
  }
  nn__plan_mode(was_plan);
  nn__conv_path_force(was);
  nn_set_threads(1);
}

/* dense_run's model with the paths of both dense layers pinned (timing off) */
static void dense_run_pinned(const dense_geo *d, const signed char kp[3], float *y, float *g,
                             float *dx, size_t ny, size_t np, size_t nx) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, d->in, 1, 1);
  int a = nn_activation(m, "a", NN_TANH, 0);
  int d1 = nn_dense_ex(m, "d1", d->out, d->flags);
  if (d->relu) d1 = nn_activation(m, "r", NN_RELU, 0);
  nn_model_select(m, a);
  int d2 = nn_dense_ex(m, "d2", d->out, 0);
  nn_add(m, "sum", d1, d2);
  assert_int_equal(nn_model_build(m, d->B + 3, 7, &err), 0);
  memcpy(m->nodes[nn_model_find_node(m, "d1")].kp, kp, 3);
  memcpy(m->nodes[nn_model_find_node(m, "d2")].kp, kp, 3);
  int was = nn__plan_mode(0);
  fwd_bwd_into(m, d->B, y, g, dx, ny, np, nx);
  nn__plan_mode(was);
}

/* Every path a plan can choose for each of a dense layer's products (nn__densek_can), in
 * every combination, on each ISA the CPU has, agrees with the gemm path: shapes the rules
 * leave to sgemm included (a plan may put them on the tiles). */
static void test_dense_planned_paths_agree(void **s) {
  static const char *isas[] = {"portable", "avx2", "avx512"};
  static const int paths[] = {NN__KP_GEMM, NN__KP_TILES, NN__KP_WTILES};
  const char *was = nn__conv_path_force(NULL);
  int combos = 0, tiles = 0;
  for (size_t gi = 0; gi < sizeof dense_geos / sizeof dense_geos[0]; gi++) {
    const dense_geo *d = &dense_geos[gi];
    size_t ny = (size_t)d->B * d->out, nx = (size_t)d->B * d->in;
    size_t np = 2 * (size_t)d->out * d->in + d->out + (d->flags & NN_NO_BIAS ? 0 : d->out);
    float *y0 = malloc(ny * 4), *g0 = malloc(np * 4), *d0 = malloc(nx * 4);
    float *y1 = malloc(ny * 4), *g1 = malloc(np * 4), *d1 = malloc(nx * 4);
    int was_plan = nn__plan_mode(0);
    dense_run(d, "gemm", 1, y0, g0, d0, ny, np, nx);
    nn__plan_mode(was_plan);
    for (size_t ii = 0; ii < 3; ii++) {
      if (PLAN_ONE_ISA && ii + 1 < 3 && !strcmp(nn__conv_path_force(isas[ii + 1]), isas[ii + 1]))
        continue;                                                    /* a better one follows */
      if (strcmp(nn__conv_path_force(isas[ii]), isas[ii])) continue; /* the CPU lacks it */
      for (int t = PLAN_T0; t <= 2; t++) {
        nn_set_threads(t);
        for (int f = 0; f < 3; f++)
          for (int w = 0; w < 3; w++)
            for (int x = 0; x < 3; x++) {
              signed char kp[3] = {(signed char)paths[f], (signed char)paths[w],
                                   (signed char)paths[x]};
              bool can = true;
              for (int ph = 0; ph < 3; ph++)
                can = can &&
                      (kp[ph] == NN__KP_GEMM || nn__densek_can(ph, kp[ph], d->B, d->in, d->out));
              if (!can) continue;
              dense_run_pinned(d, kp, y1, g1, d1, ny, np, nx);
              char what[96];
              snprintf(what, sizeof what, "dense plan %s/%s/%s", nn__kpath_name(kp[0]),
                       nn__kpath_name(kp[1]), nn__kpath_name(kp[2]));
              agree(what, gi, isas[ii], t, "y", y1, y0, ny);
              agree(what, gi, isas[ii], t, "grad", g1, g0, np);
              agree(what, gi, isas[ii], t, "dx", d1, d0, nx);
              combos++;
              tiles += kp[0] != NN__KP_GEMM || kp[1] != NN__KP_GEMM || kp[2] != NN__KP_GEMM;
            }
      }
    }
    free(y0), free(g0), free(d0), free(y1), free(g1), free(d1);
  }
  printf("  %d planned dense path combinations agree with gemm (%d on nn's tiles)\n", combos,
         tiles);
#ifdef NN__X86
  assert_true(tiles >= 30); /* every x86 CPU here has AVX2: its tiles were run */
#endif
  nn__conv_path_force(was);
  nn_set_threads(1);
}

/* The dense kernels' scratch is per thread: threads that run a forward and exit (a
 * learner's evaluation threads) must get the right outputs and leave nothing behind (under
 * AddressSanitizer, LeakSanitizer fails the test at exit if a thread's buffers leaked). */
typedef struct dense_thr {
  nn_model *m;
  const float *x;
  float y[8 * 64];
  int rc;
} dense_thr;

static void *dense_thread(void *arg) {
  dense_thr *t = arg;
  shoal_error err = {0};
  const float *y;
  t->rc = nn_model_forward(t->m, t->x, 8, &y, &err);
  if (!t->rc) memcpy(t->y, y, sizeof t->y);
  return NULL;
}

static void test_dense_scratch_thread_exit(void **s) {
  const char *was = nn__conv_path_force(NULL);
  nn__conv_path_force("avx2"); /* the kernels with per-thread scratch, where the CPU has them */
  shoal_error err = {0};
  float x[8 * 48];
  for (int i = 0; i < 8 * 48; i++) x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
  float y0[8 * 64];
  for (int k = 0; k < 4; k++) {
    dense_thr t[3];
    for (int i = 0; i < 3; i++) {
      nn_model *m = nn_model_create(NN_CPU, &err);
      nn_input(m, 48, 1, 1);
      nn_dense(m, "fc", 64);
      nn_activation(m, "r", NN_RELU, 0);
      assert_int_equal(nn_model_build(m, 8, 11, &err), 0);
      t[i] = (dense_thr){.m = m, .x = x, .rc = -1};
    }
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
      assert_int_equal(pthread_create(&th[i], NULL, dense_thread, &t[i]), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    const float *y;
    assert_int_equal(nn_model_forward(t[0].m, x, 8, &y, &err), 0);
    if (!k) memcpy(y0, y, sizeof y0);
    for (int i = 0; i < 3; i++) {
      assert_int_equal(t[i].rc, 0);
      for (int j = 0; j < 8 * 64; j++) assert_float_equal(t[i].y[j], y0[j], 0); /* same seed */
      nn_model_destroy(t[i].m);
    }
  }
  nn__conv_path_force(was);
}

/* Two heads; the output is the first: the second head is not computed and gets no
 * gradient. */
static void test_set_output(void **s) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 3, 1, 1);
  int trunk = nn_dense(m, "trunk", 4);
  int h1 = nn_dense(m, "head1", 2);
  nn_model_select(m, trunk);
  nn_dense(m, "head2", 5);
  assert_int_equal(nn_model_set_output(m, h1), 0);
  assert_int_equal(nn_model_build(m, 2, 1, &err), 0);
  float x[3] = {1, 2, 3}, dy[2] = {1, 1};
  const float *y;
  nn_model_zero_grad(m);
  assert_int_equal(nn_model_forward(m, x, 1, &y, &err), 0);
  assert_int_equal(nn_model_backward(m, dy, NULL, &err), 0);
  nn_tensor_info t1, t2;
  nn_model_find_tensor(m, "head1.bias", &t1);
  nn_model_find_tensor(m, "head2.bias", &t2);
  float *g = nn_model_grads(m, NULL);
  assert_float_equal(g[t1.offset], 1.0f, 0);
  for (int i = 0; i < 5; i++) assert_float_equal(g[t2.offset + i], 0.0f, 0);
  assert_float_equal(nn_model_flops_per_sample(m), 2.0 * (3 * 4 + 4 * 2), 0);
  nn_model_destroy(m);
}

/* NN_NO_BIAS: the weight is the layer's one tensor, and the output is what the same
 * layer with a zero bias computes; its gradient is the same weight gradient. */
static void test_no_bias_layers(void **s) {
  shoal_error err = {0};
  for (int kind = 0; kind < 3; kind++) {
    nn_model *m[2];
    for (int with = 0; with < 2; with++) {
      m[with] = nn_model_create(NN_CPU, &err);
      nn_input(m[with], 2, 5, 4);
      unsigned fl = with ? 0 : NN_NO_BIAS;
      int rc = kind == 0   ? nn_dense_ex(m[with], "l.0", 3, fl)
               : kind == 1 ? nn_conv2d_ex(m[with], "l.0", 3, 3, 3, 1, 1, 1, fl)
                           : nn_conv_transpose2d_ex(m[with], "l.0", 3, 3, 3, 2, 1, 1, fl);
      assert_true(rc > 0);
      assert_int_equal(nn_model_build(m[with], 2, 5, &err), 0);
    }
    assert_int_equal(nn_model_tensor_count(m[0]), 1);
    assert_int_equal(nn_model_tensor_count(m[1]), 2);
    assert_int_equal(nn_model_find_tensor(m[0], "l.0.bias", NULL), SHOAL_ENOENT);
    nn_tensor_info w0, w1, b1;
    assert_int_equal(nn_model_find_tensor(m[0], "l.0.weight", &w0), 0);
    assert_int_equal(nn_model_find_tensor(m[1], "l.0.weight", &w1), 0);
    assert_int_equal(nn_model_find_tensor(m[1], "l.0.bias", &b1), 0);
    size_t n0, n1;
    float *p0 = nn_model_params(m[0], &n0), *p1 = nn_model_params(m[1], &n1);
    assert_int_equal(n0, w0.numel);
    assert_int_equal(n1, w1.numel + b1.numel);
    memcpy(p1 + w1.offset, p0 + w0.offset, w0.numel * sizeof *p0);
    memset(p1 + b1.offset, 0, b1.numel * sizeof *p1);
    float x[2 * 40], dy[2 * 3 * 10 * 8];
    for (int i = 0; i < 80; i++) x[i] = sinf(0.7f * (float)i);
    for (int i = 0; i < (int)(sizeof dy / sizeof *dy); i++) dy[i] = cosf(0.3f * (float)i);
    const float *y[2];
    int C, H, W;
    nn_node_shape(m[0], 1, &C, &H, &W);
    size_t ny = (size_t)2 * C * H * W;
    for (int k = 0; k < 2; k++) {
      nn_model_zero_grad(m[k]);
      assert_int_equal(nn_model_forward(m[k], x, 2, &y[k], &err), 0);
      assert_int_equal(nn_model_backward(m[k], dy, NULL, &err), 0);
    }
    for (size_t i = 0; i < ny; i++) assert_float_equal(y[0][i], y[1][i], 1e-6);
    const float *g0 = nn_model_grads(m[0], NULL), *g1 = nn_model_grads(m[1], NULL);
    for (size_t i = 0; i < w0.numel; i++)
      assert_float_equal(g0[w0.offset + i], g1[w1.offset + i], 1e-5);
    nn_model_destroy(m[0]);
    nn_model_destroy(m[1]);
  }
  /* an unknown flag is the caller's mistake, said so */
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 2, 1, 1);
  assert_int_equal(nn_dense_ex(m, "fc", 2, 0x10), SHOAL_EINVAL);
  assert_non_null(strstr(nn_model_error(m), "unknown flags 0x10"));
  nn_model_destroy(m);
}

static void test_describe_and_find(void **s) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 4, 10, 10);
  nn_conv2d(m, "conv", 16, 3, 3, 1, 0, 1);
  nn_flatten(m, "flat");
  int fc = nn_dense(m, "fc", 6);
  /* module paths are names; empty parts, quotes and backslashes are not */
  assert_int_equal(nn_dense(m, "bad..name", 2), SHOAL_EINVAL);
  assert_non_null(strstr(nn_model_error(m), "non-empty part"));
  assert_int_equal(nn_dense(m, ".lead", 2), SHOAL_EINVAL);
  assert_int_equal(nn_dense(m, "trail.", 2), SHOAL_EINVAL);
  assert_int_equal(nn_dense(m, "q\"uote", 2), SHOAL_EINVAL);
  assert_int_equal(nn_model_find_node(m, "fc"), fc);
  assert_int_equal(nn_model_find_node(m, "input"), 0);
  assert_int_equal(nn_model_find_node(m, "nope"), SHOAL_ENOENT);
  char buf[2048];
  size_t need = nn_model_describe(m, buf, sizeof buf);
  assert_int_equal(need, strlen(buf));
  assert_non_null(strstr(buf, "conv2d"));
  assert_non_null(strstr(buf, "(16, 8, 8)"));
  assert_non_null(strstr(buf, "6150"));            /* fc: 1024*6 + 6 */
  assert_non_null(strstr(buf, "6742 parameters")); /* + conv 16*4*9 + 16 */
  char small[16];
  assert_int_equal(nn_model_describe(m, small, sizeof small), need);
  assert_int_equal(strlen(small), sizeof small - 1);
  assert_int_equal(nn_model_describe(m, NULL, 0), need);
  nn_model_destroy(m);
}

/* nn_model_profile counts each layer's calls and time while on, only then, and lists the
 * layers heaviest first with their share; a device model is refused. */
static void test_profile(void **s) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 8, 24, 24);
  nn_conv2d(m, "big_conv", 64, 3, 3, 1, 1, 1); /* ~60x the FLOPs of the dense below */
  nn_activation(m, "act", NN_TANH, 0);
  nn_flatten(m, "flat");
  nn_dense(m, "small_fc", 2);
  assert_int_equal(nn_model_build(m, 4, 1, &err), 0);
  float x[4 * 8 * 24 * 24], dy[8] = {1, -1, 0.5f, 2, 0, 1, 1, -2};
  for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)(i % 13) / 13.0f;
  const float *y;
  assert_int_equal(nn_model_forward(m, x, 4, &y, &err), 0); /* not counted: profile is off */
  assert_int_equal(nn_model_profile(m, true, &err), 0);
  for (int r = 0; r < 3; r++) {
    assert_int_equal(nn_model_forward(m, x, 4, &y, &err), 0);
    assert_int_equal(nn_model_backward(m, dy, NULL, &err), 0);
  }
  assert_int_equal(nn_model_profile(m, false, &err), 0);
  assert_int_equal(nn_model_forward(m, x, 4, &y, &err), 0); /* off again: not counted */
  char buf[4096];
  size_t need = nn_model_profile_table(m, buf, sizeof buf);
  assert_int_equal(need, strlen(buf));
  assert_int_equal(nn_model_profile_table(m, NULL, 0), need);
  /* header, then the conv first: 3 forwards and 3 backwards */
  const char *conv = strstr(buf, "big_conv"), *fc = strstr(buf, "small_fc");
  assert_non_null(conv);
  assert_non_null(fc);
  assert_true(conv < fc);
  long long nf = -1, nb = -1;
  double fms = -1, bms = -1;
  assert_int_equal(sscanf(conv, "big_conv %lld %lf %lld %lf", &nf, &fms, &nb, &bms), 4);
  assert_int_equal(nf, 3);
  assert_int_equal(nb, 3);
  assert_true(fms > 0 && bms > 0);
  assert_non_null(strstr(buf, "total "));
  /* the input node never runs a kernel: no line */
  assert_null(strstr(buf, "input"));
  /* switching on again starts from zero */
  assert_int_equal(nn_model_profile(m, true, &err), 0);
  nn_model_profile_table(m, buf, sizeof buf);
  assert_null(strstr(buf, "big_conv"));
  nn_model_destroy(m);
  assert_int_equal(nn_model_profile(NULL, true, &err), SHOAL_EINVAL);
  if (nn_cuda_available(NULL)) {
    nn_model *g = nn_model_create(NN_CUDA, &err);
    assert_non_null(g);
    assert_int_equal(nn_model_profile(g, true, &err), SHOAL_ENOTSUP);
    nn_model_destroy(g);
  }
}

/* Without the backend, or with it but no device, a CUDA model is refused with the
 * reason (a machine with a device runs tests/test_nn_cuda.c instead). */
static void test_no_cuda_backend(void **s) {
  shoal_error err = {0};
  if (nn_cuda_available(NULL)) skip();
  assert_false(nn_cuda_available(&err));
  const char *why =
      strstr(err.msg, "without the CUDA backend") ? "without the CUDA backend" : "no CUDA device";
  assert_non_null(strstr(err.msg, why));
  memset(&err, 0, sizeof err);
  assert_null(nn_model_create(NN_CUDA, &err));
  assert_int_equal(err.code, SHOAL_ENOTSUP);
  assert_non_null(strstr(err.msg, why));
}

/* Gradients accumulate across backward calls until zero_grad. */
static void test_gradients_accumulate(void **s) {
  shoal_error err = {0};
  nn_model *m = mlp(3, 5, 2, 2, 9);
  float x[6] = {0.5f, -1, 2, 1, 0.3f, -0.7f}, dy[4] = {1, -1, 0.5f, 2};
  const float *y;
  size_t n;
  float *g = nn_model_grads(m, &n);
  nn_model_zero_grad(m);
  nn_model_forward(m, x, 2, &y, &err);
  nn_model_backward(m, dy, NULL, &err);
  float *g1 = malloc(n * sizeof *g1);
  memcpy(g1, g, n * sizeof *g1);
  nn_model_forward(m, x, 2, &y, &err);
  nn_model_backward(m, dy, NULL, &err);
  for (size_t i = 0; i < n; i++) assert_float_equal(g[i], 2 * g1[i], 1e-6f);
  nn_model_zero_grad(m);
  for (size_t i = 0; i < n; i++) assert_float_equal(g[i], 0, 0);
  free(g1);
  nn_model_destroy(m);
}

/* ---- GEMM: OpenBLAS for big products, nn's loops for small ones ------------------- */

/* C = 0.75 op(A) op(B) + beta C on strided views, at `threads` (nn_set_threads): the
 * values of a double-precision reference, C's padding untouched; past one thread also
 * one thread's single call, to rounding (a narrower block may take another OpenBLAS
 * kernel). */
static void gemm_case(bool ta, bool tb, int M, int N, int K, float beta, int threads) {
  int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1; /* strided views */
  int ar = ta ? K : M, br = tb ? N : K;
  float *A = malloc((size_t)ar * lda * sizeof *A), *Bm = malloc((size_t)br * ldb * sizeof *Bm);
  float *C = malloc((size_t)M * ldc * sizeof *C), *C0 = malloc((size_t)M * ldc * sizeof *C0);
  shoal_rng rng;
  shoal_rng_seed(&rng, (uint64_t)(M * 131 + N * 7 + K));
  for (int i = 0; i < ar * lda; i++) A[i] = shoal_rng_uniformf(&rng) - 0.5f;
  for (int i = 0; i < br * ldb; i++) Bm[i] = shoal_rng_uniformf(&rng) - 0.5f;
  for (int i = 0; i < M * ldc; i++) C[i] = C0[i] = shoal_rng_uniformf(&rng) - 0.5f;
  nn_set_threads(threads);
  nn__sgemm(ta, tb, M, N, K, 0.75f, A, lda, Bm, ldb, beta, C, ldc);
  nn_set_threads(1);
  if (threads > 1) {
    float *C1 = malloc((size_t)M * ldc * sizeof *C1);
    memcpy(C1, C0, (size_t)M * ldc * sizeof *C1);
    nn__sgemm(ta, tb, M, N, K, 0.75f, A, lda, Bm, ldb, beta, C1, ldc);
    for (int i = 0; i < M * ldc; i++)
      if (fabsf(C1[i] - C[i]) > 1e-5f * (1 + fabsf(C1[i])))
        fail_msg("gemm ta=%d tb=%d %dx%dx%d at %d threads: [%d] %g against one call's %g", ta, tb,
                 M, N, K, threads, i, C[i], C1[i]);
    free(C1);
  }
  for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++)
        s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) *
             (tb ? Bm[j * ldb + k] : Bm[k * ldb + j]);
      double want = 0.75 * s + beta * C0[i * ldc + j];
      if (fabs(C[i * ldc + j] - want) > 1e-4 * (1 + sqrt((double)K)))
        fail_msg("gemm ta=%d tb=%d %dx%dx%d: C[%d,%d] = %g, want %g", ta, tb, M, N, K, i, j,
                 C[i * ldc + j], want);
    }
    /* Padding columns of C are left alone. */
    assert_true(C[i * ldc + N] == C0[i * ldc + N]);
  }
  free(A), free(Bm), free(C), free(C0);
}

static void test_gemm_paths(void **s) {
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    gemm_case(ta, tb, 3, 5, 4, 0.0f, 1); /* nn's loops */
    gemm_case(ta, tb, 7, 9, 13, 1.0f, 1);
    gemm_case(ta, tb, 1, 64, 64, 0.5f, 1);
    gemm_case(ta, tb, 40, 70, 50, 0.0f, 1); /* OpenBLAS when built with it */
    gemm_case(ta, tb, 64, 33, 129, 1.0f, 1);
    gemm_case(ta, tb, 1, 300, 200, 0.0f, 1); /* sgemv, a row */
    gemm_case(ta, tb, 300, 1, 200, 1.0f, 1); /* sgemv, a column */
  }
}

/* With threads, a big product is split into row or column blocks of C over nn's pool,
 * one OpenBLAS call each (gemm_case at 2 threads: both splits, every transpose, beta 0
 * and 1). */
static void test_gemm_split_threads(void **s) {
  (void)s;
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    gemm_case(ta, tb, 200, 96, 80, 0.0f, 2); /* rows */
    gemm_case(ta, tb, 40, 520, 64, 1.0f, 2); /* columns */
    gemm_case(ta, tb, 130, 129, 70, 1.0f, 2);
    gemm_case(ta, tb, 130, 129, 70, 0.0f, 2);
  }
}

int main(void) {
  /* the timing's plans in a file of this run's (unless one is named) */
  if (!getenv("SHOAL_NN_PLAN_FILE")) {
    snprintf(plan_file, sizeof plan_file, "/tmp/shoal-test-nn-plans-%d.txt", (int)getpid());
    setenv("SHOAL_NN_PLAN_FILE", plan_file, 1);
  } else {
    snprintf(plan_file, sizeof plan_file, "%s", getenv("SHOAL_NN_PLAN_FILE"));
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_plans),
      cmocka_unit_test(test_dense_plans),
      cmocka_unit_test(test_grad_dense),
      cmocka_unit_test(test_grad_mlp),
      cmocka_unit_test(test_grad_conv),
      cmocka_unit_test(test_grad_conv1),
      cmocka_unit_test(test_grad_convt),
      cmocka_unit_test(test_grad_convt2),
      cmocka_unit_test(test_grad_dense_nb),
      cmocka_unit_test(test_grad_conv_nb),
      cmocka_unit_test(test_grad_convt_nb),
      cmocka_unit_test(test_grad_nb_stack),
      cmocka_unit_test(test_no_bias_layers),
      cmocka_unit_test(test_grad_maxpool),
      cmocka_unit_test(test_grad_avgpool),
      cmocka_unit_test(test_grad_bn2d_train),
      cmocka_unit_test(test_grad_bn2d_eval),
      cmocka_unit_test(test_grad_bn1d_train),
      cmocka_unit_test(test_grad_ln),
      cmocka_unit_test(test_grad_dropout_eval),
      cmocka_unit_test(test_grad_flatten),
      cmocka_unit_test(test_grad_reshape),
      cmocka_unit_test(test_grad_embedding),
      cmocka_unit_test(test_grad_relu),
      cmocka_unit_test(test_grad_leaky),
      cmocka_unit_test(test_grad_elu),
      cmocka_unit_test(test_grad_tanh),
      cmocka_unit_test(test_grad_sigmoid),
      cmocka_unit_test(test_grad_softmax),
      cmocka_unit_test(test_grad_logsoftmax),
      cmocka_unit_test(test_grad_lstm),
      cmocka_unit_test(test_grad_gru),
      cmocka_unit_test(test_grad_slice),
      cmocka_unit_test(test_grad_residual),
      cmocka_unit_test(test_grad_concat),
      cmocka_unit_test(test_grad_add_same),
      cmocka_unit_test(test_grad_mul),
      cmocka_unit_test(test_grad_mul_bcast),
      cmocka_unit_test(test_grad_mul_same),
      cmocka_unit_test(test_grad_lstm_masked),
      cmocka_unit_test(test_grad_grouped),
      cmocka_unit_test(test_grad_unrolled),
      cmocka_unit_test(test_grad_big),
      cmocka_unit_test(test_gemm_paths),
      cmocka_unit_test(test_gemm_split_threads),
      cmocka_unit_test(test_torch_dense),
      cmocka_unit_test(test_torch_conv2d),
      cmocka_unit_test(test_torch_conv2d_b1),
      cmocka_unit_test(test_torch_convt2d),
      cmocka_unit_test(test_torch_convt2d_b1),
      cmocka_unit_test(test_torch_maxpool),
      cmocka_unit_test(test_torch_avgpool),
      cmocka_unit_test(test_torch_bn2d_train),
      cmocka_unit_test(test_torch_bn2d_eval),
      cmocka_unit_test(test_torch_bn1d_train),
      cmocka_unit_test(test_torch_bn1d_eval),
      cmocka_unit_test(test_torch_layernorm),
      cmocka_unit_test(test_torch_embedding),
      cmocka_unit_test(test_torch_activations),
      cmocka_unit_test(test_torch_lstm),
      cmocka_unit_test(test_torch_lstm_unrolled),
      cmocka_unit_test(test_torch_gru),
      cmocka_unit_test(test_torch_resblock),
      cmocka_unit_test(test_torch_slice_concat),
      cmocka_unit_test(test_torch_mul),
      cmocka_unit_test(test_torch_lstm_masked),
      cmocka_unit_test(test_dropout_statistics),
      cmocka_unit_test(test_batchnorm_modes),
      cmocka_unit_test(test_tensor_table_and_init),
      cmocka_unit_test(test_copy_for_target_networks),
      cmocka_unit_test(test_batch_sizes_agree),
      cmocka_unit_test(test_bad_shapes_name_the_layer),
      cmocka_unit_test(test_bad_forward_input),
      cmocka_unit_test(test_shared_layers),
      cmocka_unit_test(test_two_models_chain),
      cmocka_unit_test(test_activation_accuracy),
      cmocka_unit_test(test_activation_scale),
      cmocka_unit_test(test_batchnorm_features),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_conv_paths_agree),
      cmocka_unit_test(test_conv_planned_paths_agree),
      cmocka_unit_test(test_dense_paths_agree),
      cmocka_unit_test(test_dense_planned_paths_agree),
      cmocka_unit_test(test_dense_scratch_thread_exit),
      cmocka_unit_test(test_set_output),
      cmocka_unit_test(test_describe_and_find),
      cmocka_unit_test(test_profile),
      cmocka_unit_test(test_pool_each_task_once),
      cmocka_unit_test(test_no_cuda_backend),
      cmocka_unit_test(test_gradients_accumulate),
  };
  return cmocka_run_group_tests_name("nn_layers", tests, NULL, NULL);
}
