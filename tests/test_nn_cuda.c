/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_nn_cuda.c — the CUDA backend against the CPU backend (label gpu).
 *
 * Each case builds the same model on both devices from the same seed (so the same
 * weights), runs the same inputs, and compares outputs, input gradients, parameter
 * gradients and state by the relative error max|gpu - cpu| / max|cpu|. Bounds, float32:
 *   element-wise ops, slices, views, dropout's identity paths      1e-5
 *   GEMM, convolutions, pools, norms, losses (other summation orders) 1e-4
 *   optimizer steps (5 steps of each)                                1e-4
 *   a DQN-like update (10 steps) and DCGAN-like iterations (2)        1e-3
 * Checkpoints move across devices bit for bit.
 *
 * Without a CUDA device it prints "SKIPPED: no CUDA device" and returns 77 (ctest's
 * skip). Builds with cmocka or, on the GPU machine, with tests/nn_check.h.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "tests/nn_check.h"

#define TOL_ELEM 1e-5
#define TOL_GEMM 1e-4
#define TOL_OPTIM 1e-4
#define TOL_TRAIN 1e-3

#define CHECK(call)                                          \
  do {                                                       \
    int rc_ = (call);                                        \
    if (rc_) fail_msg("%s: rc %d: %s", #call, rc_, err.msg); \
  } while (0)

typedef void (*arch_fn)(nn_model *m);

static nn_model *make(nn_device dev, arch_fn f, int C, int H, int W, int max_batch) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(dev, &err);
  if (!m) fail_msg("create: %s", err.msg);
  nn_input(m, C, H, W);
  f(m);
  CHECK(nn_model_build(m, max_batch, 7, &err));
  return m;
}

static void fill(float *x, size_t n, uint64_t seed, float scale) {
  shoal_rng r;
  shoal_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++) x[i] = scale * (float)shoal_rng_normal(&r);
}

static float *falloc(size_t n) {
  float *p = calloc(n ? n : 1, sizeof(float));
  assert_non_null(p);
  return p;
}

static double rel_err(const float *a, const float *b, size_t n) {
  double d = 0, mx = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]);
    if (!(e <= d)) d = e; /* NaN counts as the largest */
    if (fabs(b[i]) > mx) mx = fabs(b[i]);
  }
  return d / (mx > 1e-6 ? mx : 1e-6);
}

static void expect_close(const char *what, const float *gpu, const float *cpu, size_t n,
                         double tol) {
  double e = rel_err(gpu, cpu, n);
  if (!(e <= tol)) fail_msg("%s: relative error %.3g > %.3g", what, e, tol);
}

/* A device buffer holding host h. */
static float *dev_copy(nn_model *g, const float *h, size_t n) {
  shoal_error err = {0};
  float *d = nn_model_alloc(g, n, &err);
  if (!d) fail_msg("alloc: %s", err.msg);
  CHECK(nn_model_to_device(g, d, h, n, &err));
  return d;
}

static int out_F(nn_model *m) {
  int C, H, W;
  nn_node_shape(m, nn_model_current(m), &C, &H, &W);
  return C * H * W;
}

/* Forward and backward on both devices; compares y, dx, the gradients and the state. */
static void compare(const char *what, arch_fn f, int C, int H, int W, int B, bool training,
                    double tol) {
  shoal_error err = {0};
  char msg[128];
  nn_model *c = make(NN_CPU, f, C, H, W, B), *g = make(NN_CUDA, f, C, H, W, B);
  nn_model_set_training(c, training);
  nn_model_set_training(g, training);
  size_t nx = (size_t)B * C * H * W, ny = (size_t)B * out_F(c);
  float *x = falloc(nx), *dy = falloc(ny), *hy = falloc(ny), *hdx = falloc(nx);
  fill(x, nx, 1, 1.0f);
  fill(dy, ny, 2, 1.0f);
  const float *yc, *yg, *dxc, *dxg;
  CHECK(nn_model_forward(c, x, B, &yc, &err));
  float *xd = dev_copy(g, x, nx), *dyd = dev_copy(g, dy, ny);
  CHECK(nn_model_forward(g, xd, B, &yg, &err));
  CHECK(nn_model_to_host(g, hy, yg, ny, &err));
  snprintf(msg, sizeof msg, "%s: y", what);
  expect_close(msg, hy, yc, ny, tol);
  CHECK(nn_model_backward(c, dy, &dxc, &err));
  CHECK(nn_model_backward(g, dyd, &dxg, &err));
  CHECK(nn_model_to_host(g, hdx, dxg, nx, &err));
  snprintf(msg, sizeof msg, "%s: dx", what);
  expect_close(msg, hdx, dxc, nx, tol);
  size_t np = 0, ns = 0;
  const float *gc = nn_model_grads(c, &np), *gg = nn_model_grads(g, NULL);
  assert_non_null(gg);
  snprintf(msg, sizeof msg, "%s: parameter gradients", what);
  if (np) expect_close(msg, gg, gc, np, tol);
  const float *sc = nn_model_state(c, &ns), *sg = nn_model_state(g, NULL);
  assert_non_null(sg);
  snprintf(msg, sizeof msg, "%s: state", what);
  if (ns) expect_close(msg, sg, sc, ns, tol);
  nn_model_free(g, xd), nn_model_free(g, dyd);
  free(x), free(dy), free(hy), free(hdx);
  nn_model_destroy(c), nn_model_destroy(g);
}

/* ---- layers ---------------------------------------------------------------------- */

static void a_mlp(nn_model *m) {
  nn_dense(m, "fc1", 16);
  nn_activation(m, "a1", NN_RELU, 0);
  nn_dense(m, "fc2", 5);
}

static nn_act g_act;
static float g_alpha;
static void a_act(nn_model *m) {
  nn_dense(m, "fc", 12);
  nn_activation(m, "a", g_act, g_alpha);
}

static void test_dense(void **s) {
  compare("dense", a_mlp, 9, 1, 1, 33, true, TOL_GEMM);
  compare("dense b1", a_mlp, 9, 1, 1, 1, true, TOL_GEMM);
}

static void test_activations(void **s) {
  const struct {
    nn_act a;
    float alpha;
    const char *name;
  } acts[] = {{NN_RELU, 0, "relu"},
              {NN_LEAKY_RELU, 0.2f, "leaky_relu"},
              {NN_ELU, 1.0f, "elu"},
              {NN_TANH, 0, "tanh"},
              {NN_SIGMOID, 0, "sigmoid"},
              {NN_SOFTMAX, 0, "softmax"},
              {NN_LOG_SOFTMAX, 0, "log_softmax"},
              {NN_SCALE, 1.0f / 255.0f, "scale"}};
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
    g_act = acts[i].a, g_alpha = acts[i].alpha;
    compare(acts[i].name, a_act, 7, 1, 1, 19, true, TOL_GEMM);
  }
}

static void a_conv(nn_model *m) {
  nn_conv2d(m, "c1", 6, 3, 3, 2, 1, 1);
  nn_activation(m, "a1", NN_RELU, 0);
  nn_conv2d(m, "c2", 4, 3, 3, 1, 2, 2);
}

static void a_convt(nn_model *m) {
  nn_conv_transpose2d(m, "t1", 5, 4, 4, 2, 1, 0);
  nn_conv_transpose2d(m, "t2", 3, 3, 3, 2, 1, 1);
}

static void a_pool(nn_model *m) {
  nn_conv2d(m, "c", 4, 3, 3, 1, 1, 1);
  nn_maxpool2d(m, "mp", 2, 2, 0);
  nn_avgpool2d(m, "ap", 3, 1, 1);
}

/* bias=False (NN_NO_BIAS) on each kind, under PyTorch module paths: the CUDA kernels
 * skip the bias add and its gradient as the CPU's do */
static void a_no_bias(nn_model *m) {
  nn_conv2d_ex(m, "features.0", 6, 3, 3, 2, 1, 1, NN_NO_BIAS);
  nn_batchnorm(m, "features.1", 1e-5f, 0.1f);
  nn_activation(m, "features.2", NN_RELU, 0);
  nn_conv_transpose2d_ex(m, "features.3", 3, 4, 4, 2, 1, 0, NN_NO_BIAS);
  nn_flatten(m, "head.0");
  nn_dense_ex(m, "head.1", 7, NN_NO_BIAS);
}

static void test_conv(void **s) {
  compare("bias=False", a_no_bias, 3, 10, 8, 4, true, TOL_GEMM);
  compare("conv2d", a_conv, 3, 11, 9, 5, true, TOL_GEMM);
  compare("conv2d b2", a_conv, 3, 11, 9, 2, true, TOL_GEMM);
  compare("conv_transpose2d", a_convt, 4, 5, 6, 3, true, TOL_GEMM);
  compare("pools", a_pool, 2, 8, 8, 4, true, TOL_GEMM);
}

static void a_bn2d(nn_model *m) {
  nn_conv2d(m, "c", 4, 3, 3, 1, 0, 1);
  nn_batchnorm(m, "bn", 1e-5f, 0.1f);
  nn_activation(m, "a", NN_RELU, 0);
}
static void a_bn1d(nn_model *m) {
  nn_dense(m, "fc", 8);
  nn_batchnorm(m, "bn", 1e-3f, 0.3f);
}
static void a_ln(nn_model *m) {
  nn_dense(m, "fc", 10);
  nn_layernorm(m, "ln", 1e-5f);
  nn_dense(m, "out", 3);
}

static void test_norms(void **s) {
  compare("batchnorm 2d train", a_bn2d, 3, 7, 7, 6, true, TOL_GEMM);
  compare("batchnorm 2d eval", a_bn2d, 3, 7, 7, 6, false, TOL_GEMM);
  compare("batchnorm 1d train", a_bn1d, 5, 1, 1, 16, true, TOL_GEMM);
  compare("layernorm", a_ln, 6, 1, 1, 9, true, TOL_GEMM);
}

/* Two branches added and concatenated, a slice and a flatten: the graph's plumbing. */
static void a_graph(nn_model *m) {
  int h = nn_dense(m, "h", 8);
  int a = nn_activation(m, "a", NN_TANH, 0);
  nn_model_select(m, h);
  int b = nn_dense(m, "b", 8);
  int sum = nn_add(m, "sum", a, b);
  nn_concat(m, "cat", sum, h);
  nn_slice(m, "sl", 3, 9);
  nn_reshape(m, "rs", 3, 3, 1);
  nn_flatten(m, "fl");
  nn_dense(m, "out", 2);
}

/* Products: of two branches of one shape, and by one value per sample (a mask). */
static void a_mul(nn_model *m) {
  int x = nn_model_current(m);
  int h = nn_dense(m, "h", 8);
  nn_model_select(m, x);
  nn_dense(m, "g", 8);
  int g = nn_activation(m, "t", NN_TANH, 0);
  int p = nn_mul(m, "prod", h, g);
  nn_model_select(m, x);
  int k = nn_slice(m, "k", 5, 1);
  nn_mul(m, "mask", p, k);
  nn_dense(m, "out", 2);
}

static void test_graph(void **s) {
  compare("add/concat/slice/views", a_graph, 6, 1, 1, 10, true, TOL_GEMM);
  compare("mul, same shape and per sample", a_mul, 6, 1, 1, 10, true, TOL_GEMM);
}

/* Recurrent cells: LSTM input [x (4) | h (5) | c (5)], GRU [x (4) | h (5)]. */
static void a_lstm(nn_model *m) {
  nn_lstm_cell(m, "cell", 5);
  nn_dense(m, "out", 3);
}
static void a_gru(nn_model *m) {
  nn_gru_cell(m, "cell", 5);
  nn_dense(m, "out", 3);
}

static void test_rnn_cells(void **s) {
  compare("lstm_cell", a_lstm, 14, 1, 1, 7, true, TOL_GEMM);
  compare("gru_cell", a_gru, 9, 1, 1, 7, true, TOL_GEMM);
}

static void a_embed(nn_model *m) {
  nn_embedding(m, "emb", 7, 4);
  nn_dense(m, "out", 2);
}

/* Indices stored as floats: the same rows gathered, the same scatter-added gradient,
 * zeros for the indices' gradient, and an index out of range refused with its place. */
static void test_embedding(void **s) {
  shoal_error err = {0};
  int B = 5;
  nn_model *c = make(NN_CPU, a_embed, 3, 1, 1, B), *g = make(NN_CUDA, a_embed, 3, 1, 1, B);
  float x[15], dy[10], hy[10], hdx[15];
  for (int i = 0; i < 15; i++) x[i] = (float)((i * 5) % 7); /* repeats: the adds collide */
  fill(dy, 10, 3, 1.0f);
  float *xd = dev_copy(g, x, 15), *dyd = dev_copy(g, dy, 10);
  const float *yc, *yg, *dxc, *dxg;
  CHECK(nn_model_forward(c, x, B, &yc, &err));
  CHECK(nn_model_forward(g, xd, B, &yg, &err));
  CHECK(nn_model_to_host(g, hy, yg, 10, &err));
  expect_close("embedding: y", hy, yc, 10, TOL_GEMM);
  CHECK(nn_model_backward(c, dy, &dxc, &err));
  CHECK(nn_model_backward(g, dyd, &dxg, &err));
  CHECK(nn_model_to_host(g, hdx, dxg, 15, &err));
  for (int i = 0; i < 15; i++) assert_true(hdx[i] == 0.0f);
  size_t n;
  expect_close("embedding: gradients", nn_model_grads(g, NULL), nn_model_grads(c, &n), n, TOL_GEMM);
  x[5] = 7.0f; /* sample 1, position 2: one past the table */
  CHECK(nn_model_to_device(g, xd, x, 15, &err));
  assert_int_equal(nn_model_forward(g, xd, B, &yg, &err), SHOAL_ERANGE);
  assert_non_null(strstr(err.msg, "sample 1, position 2"));
  nn_model_free(g, xd), nn_model_free(g, dyd);
  nn_model_destroy(c), nn_model_destroy(g);
}

static void a_dropout(nn_model *m) { nn_dropout(m, "drop", 0.5f); }

/* Masks differ from the CPU's (another generator): their statistics and the backward's
 * use of the same mask are what must hold. */
static void test_dropout(void **s) {
  shoal_error err = {0};
  int B = 64, F = 256;
  size_t n = (size_t)B * F;
  nn_model *g = make(NN_CUDA, a_dropout, F, 1, 1, B);
  float *x = falloc(n), *y = falloc(n), *dx = falloc(n);
  for (size_t i = 0; i < n; i++) x[i] = 1.0f;
  float *xd = dev_copy(g, x, n);
  const float *yd, *dxd;
  CHECK(nn_model_forward(g, xd, B, &yd, &err));
  CHECK(nn_model_to_host(g, y, yd, n, &err));
  size_t zeros = 0;
  for (size_t i = 0; i < n; i++) {
    if (y[i] == 0.0f)
      zeros++;
    else if (y[i] != 2.0f)
      fail_msg("dropout kept %zu as %g, not 1/(1-p) = 2", i, (double)y[i]);
  }
  double frac = (double)zeros / (double)n; /* sd sqrt(.25/16384) = 0.004 */
  if (!(fabs(frac - 0.5) < 0.03)) fail_msg("dropout dropped %.3f, not about 0.5", frac);
  CHECK(nn_model_backward(g, xd, &dxd, &err)); /* dy = 1: dx is the mask */
  CHECK(nn_model_to_host(g, dx, dxd, n, &err));
  expect_close("dropout dx = mask", dx, y, n, 0);
  nn_model_set_training(g, false);
  CHECK(nn_model_forward(g, xd, B, &yd, &err));
  CHECK(nn_model_to_host(g, y, yd, n, &err));
  expect_close("dropout eval is the identity", y, x, n, 0);
  nn_model_free(g, xd);
  free(x), free(y), free(dx);
  nn_model_destroy(g);
}

/* ---- losses ------------------------------------------------------------------------ */

static void test_losses(void **s) {
  shoal_error err = {0};
  int B = 37, N = 3;
  size_t n = (size_t)B * N;
  nn_model *c = make(NN_CPU, a_mlp, N, 1, 1, B), *g = make(NN_CUDA, a_mlp, N, 1, 1, B);
  float *p = falloc(n), *t = falloc(n), *w = falloc(B), *dc = falloc(n), *dg = falloc(n);
  fill(p, n, 3, 2.0f);
  fill(t, n, 4, 2.0f);
  for (int i = 0; i < B; i++) w[i] = 0.5f + (float)(i % 5) / 4.0f;
  float *pd = dev_copy(g, p, n), *wd = dev_copy(g, w, B), *dd = nn_model_alloc(g, n, &err);
  assert_non_null(dd);
  for (int kind = NN_LOSS_MSE; kind <= NN_LOSS_CROSS_ENTROPY; kind++) {
    if (kind == NN_LOSS_BCE_LOGITS)
      for (size_t i = 0; i < n; i++) t[i] = (float)(i % 7) / 6.0f; /* targets in [0, 1] */
    if (kind == NN_LOSS_CROSS_ENTROPY) /* class probabilities, rows summing to 1 */
      for (size_t i = 0; i < n; i++) t[i] = (int)(i % N) == (int)(i / N) % N ? 0.7f : 0.15f;
    float *td = dev_copy(g, t, n);
    for (int weighted = 0; weighted < 2; weighted++) {
      float lc = 0, lg = 0;
      CHECK(nn_model_loss(c, kind, &lc, dc, p, t, weighted ? w : NULL, B, N, 0.7f, &err));
      CHECK(nn_model_loss(g, kind, &lg, dd, pd, td, weighted ? wd : NULL, B, N, 0.7f, &err));
      CHECK(nn_model_to_host(g, dg, dd, n, &err));
      expect_close("loss", &lg, &lc, 1, TOL_GEMM);
      expect_close("loss gradient", dg, dc, n, TOL_GEMM);
      /* loss == NULL: queued without a wait, the same gradient */
      CHECK(nn_model_loss(g, kind, NULL, dd, pd, td, weighted ? wd : NULL, B, N, 0.7f, &err));
      CHECK(nn_model_to_host(g, dg, dd, n, &err));
      expect_close("loss gradient (no wait)", dg, dc, n, TOL_GEMM);
    }
    nn_model_free(g, td);
  }
  /* replay priorities from the same pred and target */
  {
    float pc[37], pg[37];
    CHECK(nn_model_priorities(c, pc, p, t, B, N, 0.6f, 1e-3f, &err));
    float *td = dev_copy(g, t, n);
    CHECK(nn_model_priorities(g, pg, pd, td, B, N, 0.6f, 1e-3f, &err));
    expect_close("priorities", pg, pc, (size_t)B, TOL_ELEM);
    nn_model_free(g, td);
  }
  /* A NaN on its way to the device is refused, naming its index. */
  float nanw[37];
  for (int i = 0; i < B; i++) nanw[i] = 1.0f;
  float *nd = nn_model_alloc(g, B, &err);
  CHECK(nn_model_to_device(g, nd, nanw, B, &err));
  nanw[5] = NAN;
  assert_int_equal(nn_model_to_device(g, nd, nanw, B, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "[5]"));
  float l;
  assert_int_equal(nn_model_loss(g, NN_LOSS_HUBER, &l, NULL, pd, pd, wd, B, N, 0.0f, &err),
                   SHOAL_EINVAL); /* delta must be > 0 */
  nn_model_free(g, pd), nn_model_free(g, wd), nn_model_free(g, dd), nn_model_free(g, nd);
  free(p), free(t), free(w), free(dc), free(dg);
  nn_model_destroy(c), nn_model_destroy(g);
}

/* ---- optimizers ------------------------------------------------------------------------ */

/* steps forward/backward/step rounds on both devices with the same data. */
static void train_both(nn_model *c, nn_model *g, nn_optim *oc, nn_optim *og, int B, int steps) {
  shoal_error err = {0};
  int C, H, W;
  nn_node_shape(c, 0, &C, &H, &W);
  size_t nx = (size_t)B * C * H * W, ny = (size_t)B * out_F(c);
  float *x = falloc(nx), *dy = falloc(ny);
  float *xd = nn_model_alloc(g, nx, &err), *dyd = nn_model_alloc(g, ny, &err);
  assert_non_null(xd);
  assert_non_null(dyd);
  for (int k = 0; k < steps; k++) {
    fill(x, nx, 10 + (uint64_t)k, 1.0f);
    fill(dy, ny, 100 + (uint64_t)k, 0.1f);
    const float *y;
    CHECK(nn_model_to_device(g, xd, x, nx, &err));
    CHECK(nn_model_to_device(g, dyd, dy, ny, &err));
    nn_model_zero_grad(c), nn_model_zero_grad(g);
    CHECK(nn_model_forward(c, x, B, &y, &err));
    CHECK(nn_model_forward(g, xd, B, &y, &err));
    CHECK(nn_model_backward(c, dy, NULL, &err));
    CHECK(nn_model_backward(g, dyd, NULL, &err));
    CHECK(nn_optim_step(oc, &err));
    CHECK(nn_optim_step(og, &err));
  }
  nn_model_free(g, xd), nn_model_free(g, dyd);
  free(x), free(dy);
}

static void test_optimizers(void **s) {
  shoal_error err = {0};
  nn_optim_config cfgs[6];
  cfgs[0] = nn_optim_defaults(NN_SGD);
  cfgs[1] = nn_optim_defaults(NN_SGD);
  cfgs[1].momentum = 0.9f, cfgs[1].nesterov = true, cfgs[1].weight_decay = 1e-2f;
  cfgs[2] = nn_optim_defaults(NN_ADAM);
  cfgs[2].weight_decay = 1e-3f;
  cfgs[3] = nn_optim_defaults(NN_ADAMW);
  cfgs[4] = nn_optim_defaults(NN_RMSPROP);
  cfgs[4].centered = true, cfgs[4].momentum = 0.5f;
  cfgs[5] = nn_optim_defaults(NN_ADAM);
  cfgs[5].clip_norm = 0.05f; /* clipping active */
  for (int i = 0; i < 6; i++) {
    nn_model *c = make(NN_CPU, a_mlp, 9, 1, 1, 16), *g = make(NN_CUDA, a_mlp, 9, 1, 1, 16);
    nn_optim *oc = nn_optim_create(c, &cfgs[i], &err), *og = nn_optim_create(g, &cfgs[i], &err);
    assert_non_null(oc);
    if (!og) fail_msg("optimizer on the device: %s", err.msg);
    train_both(c, g, oc, og, 16, 5);
    size_t n;
    const float *pc = nn_model_params(c, &n), *pg = nn_model_params(g, NULL);
    char msg[64];
    snprintf(msg, sizeof msg, "optimizer %d: parameters after 5 steps", i);
    expect_close(msg, pg, pc, n, TOL_OPTIM);
    assert_int_equal(nn_optim_steps(og), 5);
    double dn = fabs(nn_optim_last_grad_norm(og) - nn_optim_last_grad_norm(oc));
    if (!(dn <= 1e-4 * nn_optim_last_grad_norm(oc))) fail_msg("grad norm differs by %g", dn);
    /* optimizer state moves across devices: the GPU's saved moments load on the CPU */
    uint8_t *buf = NULL;
    size_t len = 0;
    CHECK(nn_optim_save_buffer(og, &buf, &len, &err));
    CHECK(nn_optim_load_buffer(oc, buf, len, &err));
    free(buf);
    nn_optim_destroy(oc), nn_optim_destroy(og);
    nn_model_destroy(c), nn_model_destroy(g);
  }
}

/* A non-finite gradient skips the step on the device: ENAN, parameters kept. */
static void test_optim_nan_skips(void **s) {
  shoal_error err = {0};
  nn_model *g = make(NN_CUDA, a_mlp, 9, 1, 1, 4);
  nn_optim_config oc = nn_optim_defaults(NN_ADAM);
  nn_optim *o = nn_optim_create(g, &oc, &err);
  assert_non_null(o);
  size_t n;
  float *p = nn_model_params(g, &n);
  p[0] = NAN; /* the first weight poisons every gradient of its row */
  CHECK(nn_model_params_changed(g, &err));
  float *before = falloc(n);
  memcpy(before, p, n * sizeof(float));
  float x[36], dy[20];
  fill(x, 36, 1, 1.0f);
  fill(dy, 20, 2, 1.0f);
  float *xd = dev_copy(g, x, 36), *dyd = dev_copy(g, dy, 20);
  const float *y;
  nn_model_zero_grad(g);
  CHECK(nn_model_forward(g, xd, 4, &y, &err));
  CHECK(nn_model_backward(g, dyd, NULL, &err));
  assert_int_equal(nn_optim_step(o, &err), SHOAL_ENAN);
  assert_int_equal(nn_optim_steps(o), 0);
  const float *after = nn_model_params(g, NULL);
  assert_true(isnan(after[0]));
  assert_int_equal(memcmp(after + 1, before + 1, (n - 1) * sizeof(float)), 0);
  nn_model_free(g, xd), nn_model_free(g, dyd);
  free(before);
  nn_optim_destroy(o);
  nn_model_destroy(g);
}

/* ---- whole updates ------------------------------------------------------------------------- */

static void a_qnet(nn_model *m) {
  nn_dense(m, "fc1", 64);
  nn_activation(m, "act1", NN_RELU, 0);
  nn_dense(m, "fc2", 64);
  nn_activation(m, "act2", NN_RELU, 0);
  nn_dense(m, "out", 2);
}

/* A DQN-like update, device-agnostic code run on both: target net forward on s', the
 * TD target y = r + 0.99 max_a' Q'(s', a') put in the taken action's column (the
 * others keep Q(s, .), so they get no gradient), importance-weighted Huber, Adam with
 * clipping; 10 steps, the target synced every 5. */
static void dqn_run(nn_model *q, nn_model *tq, nn_optim *o, int B, float *params_out) {
  shoal_error err = {0};
  int A = 2;
  size_t nx = (size_t)B * 4, ny = (size_t)B * A;
  float *s = falloc(nx), *s2 = falloc(nx), *r = falloc(B), *w = falloc(B), *qs = falloc(ny);
  float *qt = falloc(ny), *tgt = falloc(ny);
  float *sd = nn_model_alloc(q, nx, &err), *s2d = nn_model_alloc(q, nx, &err);
  float *td = nn_model_alloc(q, ny, &err), *wd = nn_model_alloc(q, B, &err);
  float *dyd = nn_model_alloc(q, ny, &err);
  assert_non_null(dyd);
  CHECK(nn_model_copy(tq, q, &err));
  for (int k = 0; k < 10; k++) {
    fill(s, nx, 1000 + (uint64_t)k, 1.0f);
    fill(s2, nx, 2000 + (uint64_t)k, 1.0f);
    fill(r, B, 3000 + (uint64_t)k, 1.0f);
    for (int i = 0; i < B; i++) w[i] = 0.25f + (float)((i + k) % 4) / 4.0f;
    CHECK(nn_model_to_device(q, sd, s, nx, &err));
    CHECK(nn_model_to_device(q, s2d, s2, nx, &err));
    CHECK(nn_model_to_device(q, wd, w, B, &err));
    const float *yt, *yq;
    CHECK(nn_model_forward(tq, s2d, B, &yt, &err));
    CHECK(nn_model_to_host(tq, qt, yt, ny, &err));
    CHECK(nn_model_forward(q, sd, B, &yq, &err));
    CHECK(nn_model_to_host(q, qs, yq, ny, &err));
    memcpy(tgt, qs, ny * sizeof(float));
    for (int i = 0; i < B; i++) {
      float mx = qt[i * A] > qt[i * A + 1] ? qt[i * A] : qt[i * A + 1];
      tgt[i * A + (i % A)] = r[i] + 0.99f * mx;
    }
    CHECK(nn_model_to_device(q, td, tgt, ny, &err));
    float loss;
    CHECK(nn_model_loss(q, NN_LOSS_HUBER, &loss, dyd, yq, td, wd, B, A, 1.0f, &err));
    nn_model_zero_grad(q);
    CHECK(nn_model_backward(q, dyd, NULL, &err));
    CHECK(nn_optim_step(o, &err));
    if (k % 5 == 4) CHECK(nn_model_copy(tq, q, &err));
  }
  size_t n;
  memcpy(params_out, nn_model_params(q, &n), n * sizeof(float));
  nn_model_free(q, sd), nn_model_free(q, s2d), nn_model_free(q, td), nn_model_free(q, wd);
  nn_model_free(q, dyd);
  free(s), free(s2), free(r), free(w), free(qs), free(qt), free(tgt);
}

static void test_dqn_update(void **s) {
  shoal_error err = {0};
  int B = 64;
  nn_model *qc = make(NN_CPU, a_qnet, 4, 1, 1, B), *tc = make(NN_CPU, a_qnet, 4, 1, 1, B);
  nn_model *qg = make(NN_CUDA, a_qnet, 4, 1, 1, B), *tg = make(NN_CUDA, a_qnet, 4, 1, 1, B);
  nn_optim_config cfg = nn_optim_defaults(NN_ADAM);
  cfg.lr = 1e-3f, cfg.clip_norm = 10.0f;
  nn_optim *oc = nn_optim_create(qc, &cfg, &err), *og = nn_optim_create(qg, &cfg, &err);
  assert_non_null(oc);
  assert_non_null(og);
  size_t n;
  nn_model_params(qc, &n);
  float *pc = falloc(n), *pg = falloc(n);
  dqn_run(qc, tc, oc, B, pc);
  dqn_run(qg, tg, og, B, pg);
  expect_close("DQN update: parameters after 10 steps", pg, pc, n, TOL_TRAIN);
  free(pc), free(pg);
  nn_optim_destroy(oc), nn_optim_destroy(og);
  nn_model_destroy(qc), nn_model_destroy(tc), nn_model_destroy(qg), nn_model_destroy(tg);
}

static void a_gen(nn_model *g) {
  nn_dense(g, "fc", 4 * 4 * 8);
  nn_reshape(g, "view", 8, 4, 4);
  nn_batchnorm(g, "bn0", 1e-5f, 0.1f);
  nn_activation(g, "act0", NN_RELU, 0);
  nn_conv_transpose2d(g, "ct1", 4, 4, 4, 2, 1, 0);
  nn_batchnorm(g, "bn1", 1e-5f, 0.1f);
  nn_activation(g, "act1", NN_RELU, 0);
  nn_conv_transpose2d(g, "ct2", 1, 4, 4, 2, 1, 0);
  nn_activation(g, "tanh", NN_TANH, 0);
}

static void a_disc(nn_model *d) {
  nn_conv2d(d, "c1", 8, 4, 4, 2, 1, 1);
  nn_activation(d, "act1", NN_LEAKY_RELU, 0.2f);
  nn_conv2d(d, "c2", 16, 4, 4, 2, 1, 1);
  nn_batchnorm(d, "bn2", 1e-5f, 0.1f);
  nn_activation(d, "act2", NN_LEAKY_RELU, 0.2f);
  nn_flatten(d, "flat");
  nn_dense(d, "fc", 1);
}

/* DCGAN iterations (Radford et al. 2016's recipe): a D step on real (label 1) and
 * G(z) (label 0), then a G step through D's input gradient (label 1). */
static void gan_run(nn_model *g, nn_model *d, nn_optim *og, nn_optim *od, int B, int iters) {
  shoal_error err = {0};
  size_t nz = (size_t)B * 16, nr = (size_t)B * 256;
  float *z = falloc(nz), *real = falloc(nr), *ones = falloc(B), *zeros = falloc(B);
  for (int i = 0; i < B; i++) ones[i] = 1;
  float *zd = nn_model_alloc(g, nz, &err), *rd = nn_model_alloc(g, nr, &err);
  float *od1 = dev_copy(g, ones, B), *od0 = dev_copy(g, zeros, B);
  float *dl = nn_model_alloc(g, B, &err);
  assert_non_null(dl);
  for (int k = 0; k < iters; k++) {
    fill(z, nz, 50 + (uint64_t)k, 1.0f);
    fill(real, nr, 60 + (uint64_t)k, 0.5f);
    CHECK(nn_model_to_device(g, zd, z, nz, &err));
    CHECK(nn_model_to_device(g, rd, real, nr, &err));
    const float *fake, *logit, *dx;
    float loss;
    CHECK(nn_model_forward(g, zd, B, &fake, &err));
    nn_model_zero_grad(d);
    CHECK(nn_model_forward(d, rd, B, &logit, &err));
    CHECK(nn_model_loss(d, NN_LOSS_BCE_LOGITS, &loss, dl, logit, od1, NULL, B, 1, 0, &err));
    CHECK(nn_model_backward(d, dl, NULL, &err));
    CHECK(nn_model_forward(d, fake, B, &logit, &err));
    CHECK(nn_model_loss(d, NN_LOSS_BCE_LOGITS, &loss, dl, logit, od0, NULL, B, 1, 0, &err));
    CHECK(nn_model_backward(d, dl, NULL, &err));
    CHECK(nn_optim_step(od, &err));
    nn_model_zero_grad(g);
    CHECK(nn_model_forward(d, fake, B, &logit, &err));
    CHECK(nn_model_loss(d, NN_LOSS_BCE_LOGITS, &loss, dl, logit, od1, NULL, B, 1, 0, &err));
    CHECK(nn_model_backward(d, dl, &dx, &err));
    CHECK(nn_model_backward(g, dx, NULL, &err));
    CHECK(nn_optim_step(og, &err));
  }
  nn_model_free(g, zd), nn_model_free(g, rd), nn_model_free(g, od1), nn_model_free(g, od0);
  nn_model_free(g, dl);
  free(z), free(real), free(ones), free(zeros);
}

static void test_dcgan_iteration(void **s) {
  shoal_error err = {0};
  int B = 16;
  nn_model *gc = make(NN_CPU, a_gen, 16, 1, 1, B), *dc = make(NN_CPU, a_disc, 1, 16, 16, B);
  nn_model *gg = make(NN_CUDA, a_gen, 16, 1, 1, B), *dg = make(NN_CUDA, a_disc, 1, 16, 16, B);
  nn_optim_config cfg = nn_optim_defaults(NN_ADAM);
  cfg.lr = 2e-4f, cfg.beta1 = 0.5f;
  nn_optim *ogc = nn_optim_create(gc, &cfg, &err), *odc = nn_optim_create(dc, &cfg, &err);
  nn_optim *ogg = nn_optim_create(gg, &cfg, &err), *odg = nn_optim_create(dg, &cfg, &err);
  assert_non_null(ogg);
  assert_non_null(odg);
  gan_run(gc, dc, ogc, odc, B, 2);
  gan_run(gg, dg, ogg, odg, B, 2);
  size_t n, ns;
  expect_close("DCGAN: G parameters", nn_model_params(gg, NULL), nn_model_params(gc, &n), n,
               TOL_TRAIN);
  expect_close("DCGAN: G state", nn_model_state(gg, NULL), nn_model_state(gc, &ns), ns, TOL_TRAIN);
  expect_close("DCGAN: D parameters", nn_model_params(dg, NULL), nn_model_params(dc, &n), n,
               TOL_TRAIN);
  expect_close("DCGAN: D state", nn_model_state(dg, NULL), nn_model_state(dc, &ns), ns, TOL_TRAIN);
  nn_optim_destroy(ogc), nn_optim_destroy(odc), nn_optim_destroy(ogg), nn_optim_destroy(odg);
  nn_model_destroy(gc), nn_model_destroy(dc), nn_model_destroy(gg), nn_model_destroy(dg);
}

/* ---- checkpoints and copies across devices --------------------------------------------- */

static void test_checkpoint_cross_device(void **s) {
  shoal_error err = {0};
  nn_model *g = make(NN_CUDA, a_bn1d, 5, 1, 1, 8), *c = make(NN_CPU, a_bn1d, 5, 1, 1, 8);
  nn_optim_config cfg = nn_optim_defaults(NN_SGD);
  cfg.lr = 0.1f;
  nn_optim *og = nn_optim_create(g, &cfg, &err), *oc = nn_optim_create(c, &cfg, &err);
  assert_non_null(og);
  train_both(c, g, oc, og, 8, 1); /* g's parameters and running stats move */
  /* saved on the GPU, loaded on the CPU: the same bits */
  uint8_t *buf = NULL;
  size_t len = 0, n, ns;
  nn_model *c2 = make(NN_CPU, a_bn1d, 5, 1, 1, 8);
  CHECK(nn_model_save_buffer(g, &buf, &len, &err));
  CHECK(nn_model_load_buffer(c2, buf, len, &err));
  free(buf);
  const float *pg = nn_model_params(g, &n), *pc2 = nn_model_params(c2, NULL);
  assert_int_equal(memcmp(pg, pc2, n * sizeof(float)), 0);
  assert_int_equal(memcmp(nn_model_state(g, &ns), nn_model_state(c2, NULL), ns * sizeof(float)), 0);
  /* saved on the CPU (after a change of its own), loaded on the GPU: the device runs it */
  nn_model_params(c, NULL)[0] += 0.5f;
  CHECK(nn_model_save_buffer(c, &buf, &len, &err));
  CHECK(nn_model_load_buffer(g, buf, len, &err));
  free(buf);
  assert_int_equal(memcmp(nn_model_params(g, NULL), nn_model_params(c, NULL), n * sizeof(float)),
                   0);
  nn_model_set_training(g, false), nn_model_set_training(c, false);
  float x[40], hy[64];
  fill(x, 40, 9, 1.0f);
  float *xd = dev_copy(g, x, 40);
  const float *yc, *yg;
  CHECK(nn_model_forward(c, x, 5, &yc, &err));
  CHECK(nn_model_forward(g, xd, 5, &yg, &err));
  CHECK(nn_model_to_host(g, hy, yg, 40, &err));
  expect_close("forward after loading a CPU checkpoint", hy, yc, 40, TOL_GEMM);
  /* nn_model_copy across devices: bit for bit both ways */
  nn_model *g2 = make(NN_CUDA, a_bn1d, 5, 1, 1, 8);
  CHECK(nn_model_copy(g2, c2, &err));
  assert_int_equal(memcmp(nn_model_params(g2, NULL), nn_model_params(c2, NULL), n * 4), 0);
  CHECK(nn_model_copy(c2, g, &err));
  assert_int_equal(memcmp(nn_model_params(c2, NULL), nn_model_params(g, NULL), n * 4), 0);
  CHECK(nn_model_copy(g2, g, &err)); /* device to device */
  assert_int_equal(memcmp(nn_model_params(g2, NULL), nn_model_params(g, NULL), n * 4), 0);
  nn_model_free(g, xd);
  nn_optim_destroy(og), nn_optim_destroy(oc);
  nn_model_destroy(g), nn_model_destroy(c), nn_model_destroy(c2), nn_model_destroy(g2);
}

/* ---- refusals ----------------------------------------------------------------------------- */

static void test_refusals(void **s) {
  shoal_error err = {0};
  nn_model *g = make(NN_CUDA, a_mlp, 9, 1, 1, 4);
  const float *y;
  float *xd = nn_model_alloc(g, 9 * 8, &err);
  assert_int_equal(nn_model_forward(g, xd, 5, &y, &err), SHOAL_EINVAL); /* over max_batch */
  CHECK(nn_model_forward(g, xd, 4, &y, &err));
  /* its own output fed back as input would be overwritten mid-pass */
  assert_int_equal(nn_model_forward(g, y, 1, &y, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "own buffers"));
  /* a host array where device memory belongs is refused before any kernel reads it */
  float host_x[36] = {0};
  assert_int_equal(nn_model_forward(g, host_x, 4, &y, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "host memory"));
  const float *dx;
  nn_model *g2 = make(NN_CUDA, a_mlp, 9, 1, 1, 4);
  assert_int_equal(nn_model_backward(g2, xd, &dx, &err), SHOAL_ESTATE); /* no forward */
  nn_model_free(g, xd);
  nn_model_destroy(g), nn_model_destroy(g2);
}

int main(void) {
  shoal_error err = {0};
  if (!nn_cuda_available(&err)) {
    printf("SKIPPED: no CUDA device (%s)\n", err.msg);
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dense),
      cmocka_unit_test(test_activations),
      cmocka_unit_test(test_conv),
      cmocka_unit_test(test_norms),
      cmocka_unit_test(test_graph),
      cmocka_unit_test(test_rnn_cells),
      cmocka_unit_test(test_embedding),
      cmocka_unit_test(test_dropout),
      cmocka_unit_test(test_losses),
      cmocka_unit_test(test_optimizers),
      cmocka_unit_test(test_optim_nan_skips),
      cmocka_unit_test(test_dqn_update),
      cmocka_unit_test(test_dcgan_iteration),
      cmocka_unit_test(test_checkpoint_cross_device),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
