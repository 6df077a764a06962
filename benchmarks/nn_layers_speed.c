/* SPDX-License-Identifier: Apache-2.0 */
/*
 * benchmarks/nn_layers_speed.c — how fast nn's CPU layers run the models of the nn_cpu
 * benchmark, forward and backward only (no loss or optimizer: those are measured by
 * nn_cpu against PyTorch). For the conv nets it prints the achieved GFLOP/s beside
 * OpenBLAS's sgemm rate measured in the same run (the ceiling im2col + GEMM can reach).
 *
 * The figure "convs" times each conv and conv-transpose layer of those nets alone,
 * forward and backward, on every conv path the CPU runs (im2col + GEMM, and nn's own
 * kernels: portable, AVX2, AVX-512; nn/cpu/convk.c), taking the fastest of 15 calls: on
 * a shared machine the least disturbed call is the figure that repeats. The figure
 * "denses" does the same for the nets' dense layers (nn/cpu/densek.c against sgemm, the
 * gemm path, as the BENCH lines' baseline; a shape the kernels leave to sgemm shows ~1).
 * The figure "profile" prints where Nature-DQN's and MinAtar's training steps and the DCGAN
 * iteration spend their time, per layer (nn_model_profile), forward and backward.
 *
 *   nn_layers_speed [threads [figure]]   (default 1 thread; figure: mlp, act, minatar,
 *                                         nature, dcgan, convs, denses or profile, for
 *                                         profiling one)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"
#include "nn/nn.h"

static double g_min_s = 0.5; /* each figure runs at least this long */
static const char *g_only;   /* run only this figure */

static int want(const char *f) { return !g_only || !strcmp(g_only, f); }

static void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "nn_layers_speed: %s: %s\n", what, err->msg);
  exit(1);
}

static float *rnd(size_t n, float scale, uint64_t seed) {
  shoal_rng rng;
  shoal_rng_seed(&rng, seed);
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = scale * (2.0f * shoal_rng_uniformf(&rng) - 1.0f);
  return x;
}

/* A plain SGD step over the flat buffers: what every optimizer's update costs at least. */
static void sgd(nn_model *m, float lr) {
  size_t n;
  float *p = nn_model_params(m, &n), *g = nn_model_grads(m, NULL);
  for (size_t i = 0; i < n; i++) p[i] -= lr * g[i];
}

/* Runs fn until g_min_s has passed; returns calls per second. */
#define RATE(rate, body)               \
  do {                                 \
    for (int w_ = 0; w_ < 3; w_++) {   \
      body;                            \
    }                                  \
    long it_ = 0;                      \
    double t0_ = shoal_now_s(), t_;    \
    do {                               \
      for (int k_ = 0; k_ < 8; k_++) { \
        body;                          \
      }                                \
      it_ += 8;                        \
      t_ = shoal_now_s() - t0_;        \
    } while (t_ < g_min_s);            \
    rate = (double)it_ / t_;           \
  } while (0)

static nn_model *mlp(int B) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 4, 1, 1);
  nn_dense(m, "fc1", 64);
  nn_activation(m, "act1", NN_RELU, 0);
  nn_dense(m, "fc2", 64);
  nn_activation(m, "act2", NN_RELU, 0);
  nn_dense(m, "out", 2);
  if (nn_model_build(m, B, 1, &err)) die("mlp", &err);
  return m;
}

static nn_model *nature(int B) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 4, 84, 84);
  nn_conv2d(m, "conv1", 32, 8, 8, 4, 0, 1);
  nn_activation(m, "r1", NN_RELU, 0);
  nn_conv2d(m, "conv2", 64, 4, 4, 2, 0, 1);
  nn_activation(m, "r2", NN_RELU, 0);
  nn_conv2d(m, "conv3", 64, 3, 3, 1, 0, 1);
  nn_activation(m, "r3", NN_RELU, 0);
  nn_flatten(m, "flat");
  nn_dense(m, "fc1", 512);
  nn_activation(m, "r4", NN_RELU, 0);
  nn_dense(m, "out", 6);
  if (nn_model_build(m, B, 1, &err)) die("nature", &err);
  return m;
}

static nn_model *minatar(int B) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 4, 10, 10);
  nn_conv2d(m, "conv", 16, 3, 3, 1, 0, 1);
  nn_activation(m, "r1", NN_RELU, 0);
  nn_flatten(m, "flat");
  nn_dense(m, "fc", 128);
  nn_activation(m, "r2", NN_RELU, 0);
  nn_dense(m, "out", 6);
  if (nn_model_build(m, B, 1, &err)) die("minatar", &err);
  return m;
}

/* The DCGAN of nn_cpu's row (d): G 100 -> 7*7*128 BN ReLU -> convT 64 BN ReLU -> convT 1
 * tanh; D conv 64 lrelu -> conv 128 BN lrelu -> 1. */
static nn_model *dcgan_g(int B) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 100, 1, 1);
  nn_dense(m, "fc", 7 * 7 * 128);
  nn_batchnorm(m, "bn0", 1e-5f, 0.1f);
  nn_activation(m, "r0", NN_RELU, 0);
  nn_reshape(m, "rs", 128, 7, 7);
  nn_conv_transpose2d(m, "up1", 64, 4, 4, 2, 1, 0);
  nn_batchnorm(m, "bn1", 1e-5f, 0.1f);
  nn_activation(m, "r1", NN_RELU, 0);
  nn_conv_transpose2d(m, "up2", 1, 4, 4, 2, 1, 0);
  nn_activation(m, "t", NN_TANH, 0);
  if (nn_model_build(m, B, 1, &err)) die("dcgan G", &err);
  return m;
}

static nn_model *dcgan_d(int B) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 1, 28, 28);
  nn_conv2d(m, "c1", 64, 4, 4, 2, 1, 1);
  nn_activation(m, "l1", NN_LEAKY_RELU, 0.2f);
  nn_conv2d(m, "c2", 128, 4, 4, 2, 1, 1);
  nn_batchnorm(m, "bn2", 1e-5f, 0.1f);
  nn_activation(m, "l2", NN_LEAKY_RELU, 0.2f);
  nn_flatten(m, "flat");
  nn_dense(m, "out", 1);
  if (nn_model_build(m, 2 * B, 1, &err)) die("dcgan D", &err);
  return m;
}

static double sgemm_gflops(int n) {
  float *a = rnd((size_t)n * n, 1, 1), *b = rnd((size_t)n * n, 1, 2), *c = rnd((size_t)n * n, 1, 3);
  double r;
  RATE(r, nn__sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n));
  free(a), free(b), free(c);
  return r * 2.0 * n * n * n / 1e9;
}

/* A per-layer table of a model's steps (nn_model_profile): steps runs the model n times. */
static void profile_print(const char *title, nn_model *const *ms, const char *const *names, int nm,
                          void (*steps)(void *), void *ctx) {
  shoal_error err = {0};
  for (int i = 0; i < nm; i++)
    if (nn_model_profile(ms[i], true, &err)) die("profile", &err);
  steps(ctx);
  for (int i = 0; i < nm; i++) {
    nn_model_profile(ms[i], false, &err);
    char buf[8192];
    nn_model_profile_table(ms[i], buf, sizeof buf);
    printf("\n%s: %s, per layer\n%s", title, names[i], buf);
  }
}

/* n training steps of m at batch B: the target's forward when there is one, then m's
 * forward, backward and SGD. */
typedef struct train_ctx {
  nn_model *m, *target;
  int B;
  float *x, *dy;
  int n;
} train_ctx;

static void train_steps(void *vc) {
  train_ctx *c = vc;
  shoal_error err = {0};
  const float *y;
  for (int i = 0; i < c->n; i++) {
    if (c->target && nn_model_forward(c->target, c->x, c->B, &y, &err)) die("target forward", &err);
    nn_model_zero_grad(c->m);
    if (nn_model_forward(c->m, c->x, c->B, &y, &err)) die("forward", &err);
    if (nn_model_backward(c->m, c->dy, NULL, &err)) die("backward", &err);
    sgd(c->m, 1e-6f);
  }
}

/* One training step's forward and backward (plus SGD) of model m at batch B. */
static double train_rate(nn_model *m, int B, int in_f, int out_f, nn_model *target) {
  train_ctx c = {m, target, B, rnd((size_t)B * in_f, 1, 5), rnd((size_t)B * out_f, 0.01f, 6), 1};
  double r;
  RATE(r, train_steps(&c));
  free(c.x), free(c.dy);
  return r;
}

/* ---- each conv layer alone, per conv path ------------------------------------------- */

typedef struct conv_case {
  const char *name;
  int C, H, W, Co, k, s, pad, B;
  bool dx; /* its input needs a gradient (not a net's first layer) */
  bool t;  /* conv-transpose2d */
} conv_case;

static const conv_case g_convs[] = {
    {"nature c1 4x84x84 8x8/4 ->32", 4, 84, 84, 32, 8, 4, 0, 32, false},
    {"nature c2 32x20x20 4x4/2 ->64", 32, 20, 20, 64, 4, 2, 0, 32, true},
    {"nature c3 64x9x9 3x3/1 ->64", 64, 9, 9, 64, 3, 1, 0, 32, true},
    {"dcgan D c1 1x28x28 4x4/2p1 ->64", 1, 28, 28, 64, 4, 2, 1, 128, true},
    {"dcgan D c2 64x14x14 4x4/2p1 ->128", 64, 14, 14, 128, 4, 2, 1, 128, true},
    {"minatar 4x10x10 3x3/1 ->16", 4, 10, 10, 16, 3, 1, 0, 32, false},
    {"dcgan G ct1 128x7x7 4x4/2p1 ->64", 128, 7, 7, 64, 4, 2, 1, 64, true, true},
    {"dcgan G ct2 64x14x14 4x4/2p1 ->1", 64, 14, 14, 1, 4, 2, 1, 64, true, true},
    {"fmnist c2 32x14x14 3x3/1p1 ->64", 32, 14, 14, 64, 3, 1, 1, 64, true},
    {"resnet 64x28x28 3x3/1p1 ->64", 64, 28, 28, 64, 3, 1, 1, 16, true},
};

static double min_call_s(nn_model *m, const float *x, const float *dy, int B, bool dx, bool fwd) {
  shoal_error err = {0};
  const float *y, *g;
  double best = 1e30;
  for (int r = 0; r < 17; r++) {
    if (!fwd && nn_model_forward(m, x, B, &y, &err)) die("conv", &err);
    double t0 = shoal_now_s();
    if (fwd && nn_model_forward(m, x, B, &y, &err)) die("conv", &err);
    if (!fwd && nn_model_backward(m, dy, dx ? &g : NULL, &err)) die("conv back", &err);
    double t = shoal_now_s() - t0;
    if (r >= 2 && t < best) best = t; /* the first two warm the caches */
  }
  return best;
}

static void conv_table(const char *t) {
  static const char *paths[] = {"gemm", "portable", "avx2", "avx512"};
  const char *was = nn__conv_path_force(NULL);
  printf("%-34s %8s %9s %9s %8s\n", "conv layer (batch)", "path", "fwd ms", "bwd ms", "GFLOP/s");
  for (size_t c = 0; c < sizeof g_convs / sizeof g_convs[0]; c++) {
    const conv_case *k = &g_convs[c];
    shoal_error err = {0};
    nn_model *m = nn_model_create(NN_CPU, NULL);
    nn_input(m, k->C, k->H, k->W);
    if (k->t)
      nn_conv_transpose2d(m, "convt", k->Co, k->k, k->k, k->s, k->pad, 0);
    else
      nn_conv2d(m, "conv", k->Co, k->k, k->k, k->s, k->pad, 1);
    if (nn_model_build(m, k->B, 1, &err)) die("conv", &err);
    int C, H, W;
    nn_node_shape(m, nn_model_current(m), &C, &H, &W);
    float *x = rnd((size_t)k->B * k->C * k->H * k->W, 1, 31);
    float *dy = rnd((size_t)k->B * C * H * W, 0.1f, 32);
    /* multiply-adds: forward 1x, backward 2x (dW and dx) or 1x (dW only); a
     * conv-transpose's are those of the conv it is the adjoint of */
    double macs = k->t ? (double)k->B * k->C * k->H * k->W * C * k->k * k->k
                       : (double)k->B * C * H * W * k->C * k->k * k->k;
    /* a layer Winograd can run (3x3 stride 1, or a kernel 2 or 3 times its stride through
     * the space-to-depth form, nn/cpu/wino.c): each of nn's paths with it off, then on at
     * the tile size it picks (its forward and dx; GFLOP/s counts the direct sum's
     * multiply-adds) */
    int r = (k->k + k->s - 1) / k->s;
    bool wino = (r == 2 || r == 3) && r * k->s == k->k && k->pad < k->k;
    /* a conv2d whose space-to-depth input has 16 channels or more: nn's paths with the
     * forward packed (the row "-packed"), then direct over channels-last input (convk.c) */
    bool direct = !k->t && k->C * k->s * k->s >= 16;
    /* a small stride-1 conv2d without padding (MinAtar's): the AVX2 and AVX-512 paths
     * packed, then on the row kernels (convk.c) */
    bool row = !k->t && k->s == 1 && k->pad == 0 && !direct;
    int was_w = nn__wino_mode(-1), was_d = nn__direct_mode(-1), was_r = nn__row_mode(-1);
    double gf_prev = 0; /* the row before, this run: the Winograd and direct rows' baseline */
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++)
      for (int w = 0; w < (wino && p ? 2 : 1); w++)
        for (int d = (direct && p) || (row && p >= 2) ? !!w : 1; d <= 1; d++) {
          if (strcmp(nn__conv_path_force(paths[p]), paths[p])) continue; /* the CPU lacks it */
          nn__wino_mode(wino ? w : -1);
          nn__direct_mode(d);
          nn__row_mode(row && !w ? d : 0);
          double f = min_call_s(m, x, dy, k->B, k->dx, true);
          double b = min_call_s(m, x, dy, k->B, k->dx, false);
          double gf = 2 * macs * (k->dx ? 3 : 2) / (f + b) / 1e9;
          char label[32];
          bool rowp = row && p >= 2; /* a path with the row kernels */
          snprintf(label, sizeof label, "%s%s", paths[p],
                   w      ? "+wino"
                   : !d   ? "-packed"
                   : rowp ? "+row"
                          : "");
          printf("%-34s %8s %9.3f %9.3f %8.1f\n", p || w || !d ? "" : k->name, label, f * 1e3,
                 b * 1e3, gf);
          if (w || (direct && p && d) || (rowp && d))
            printf(
                "BENCH name=nn.layers.conv%zu_%s_%s.%s value=%.1f unit=GFLOP/s baseline=%.1f "
                "ratio=%.2f\n",
                c, paths[p],
                w      ? "wino"
                : rowp ? "row"
                       : "direct",
                t, gf, gf_prev, gf / gf_prev);
          else
            printf(
                "BENCH name=nn.layers.conv%zu_%s%s.%s value=%.1f unit=GFLOP/s baseline=none "
                "ratio=none\n",
                c, paths[p], d ? "" : "_packed", t, gf);
          gf_prev = gf;
        }
    nn__wino_mode(was_w);
    nn__direct_mode(was_d);
    nn__row_mode(was_r);
    free(x), free(dy);
    nn_model_destroy(m);
  }
  nn__conv_path_force(was);
}

/* ---- each dense layer alone, per path: nn's dense kernels (nn/cpu/densek.c) against
 * sgemm (the gemm path) on the shapes of the nets above ---------------------------------- */

typedef struct dense_case {
  const char *name;
  int B, in, out;
} dense_case;

static const dense_case g_denses[] = {
    {"minatar fc 1024->128, b32", 32, 1024, 128},
    {"nature fc 3136->512, b32", 32, 3136, 512},
    {"mlp fc2 64->64, b256", 256, 64, 64},
    {"dcgan G fc 100->6272, b64", 64, 100, 6272},
};

static void dense_table(const char *t) {
  static const char *paths[] = {"gemm", "avx2", "avx512"};
  const char *was = nn__conv_path_force(NULL);
  printf("%-34s %8s %9s %9s %8s\n", "dense layer (input grad)", "path", "fwd ms", "bwd ms",
         "GFLOP/s");
  for (size_t c = 0; c < sizeof g_denses / sizeof g_denses[0]; c++) {
    const dense_case *k = &g_denses[c];
    shoal_error err = {0};
    nn_model *m = nn_model_create(NN_CPU, NULL);
    nn_input(m, k->in, 1, 1);
    nn_dense(m, "fc", k->out);
    if (nn_model_build(m, k->B, 1, &err)) die("dense", &err);
    float *x = rnd((size_t)k->B * k->in, 1, 41), *dy = rnd((size_t)k->B * k->out, 0.1f, 42);
    double macs = (double)k->B * k->in * k->out, gf0 = 0;
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
      if (strcmp(nn__conv_path_force(paths[p]), paths[p])) continue; /* the CPU lacks it */
      double f = min_call_s(m, x, dy, k->B, true, true);
      double b = min_call_s(m, x, dy, k->B, true, false);
      double gf = 2 * macs * 3 / (f + b) / 1e9;
      if (!p) gf0 = gf;
      printf("%-34s %8s %9.3f %9.3f %8.1f\n", p ? "" : k->name, paths[p], f * 1e3, b * 1e3, gf);
      if (p)
        printf(
            "BENCH name=nn.layers.dense%zu_%s.%s value=%.1f unit=GFLOP/s baseline=%.1f "
            "ratio=%.2f\n",
            c, paths[p], t, gf, gf0, gf / gf0);
    }
    free(x), free(dy);
    nn_model_destroy(m);
  }
  nn__conv_path_force(was);
}

typedef struct gan_ctx {
  nn_model *g, *d;
  int B;
  float *z, *real, *dd, *both;
  int n; /* iterations a gan_iters call runs */
} gan_ctx;

static void gan_iter(gan_ctx *c) {
  shoal_error err = {0};
  const float *fake, *dout, *dx;
  int B = c->B;
  nn_model_zero_grad(c->d);
  if (nn_model_forward(c->g, c->z, B, &fake, &err)) die("G", &err);
  memcpy(c->both, c->real, (size_t)B * 784 * sizeof *c->both);
  memcpy(c->both + (size_t)B * 784, fake, (size_t)B * 784 * sizeof *c->both);
  if (nn_model_forward(c->d, c->both, 2 * B, &dout, &err)) die("D", &err);
  if (nn_model_backward(c->d, c->dd, NULL, &err)) die("D back", &err);
  sgd(c->d, 1e-6f);
  nn_model_zero_grad(c->g);
  nn_model_zero_grad(c->d);
  if (nn_model_forward(c->d, fake, B, &dout, &err)) die("D(G)", &err);
  if (nn_model_backward(c->d, c->dd, &dx, &err)) die("D(G) back", &err);
  if (nn_model_backward(c->g, dx, NULL, &err)) die("G back", &err);
  sgd(c->g, 1e-6f);
}

static void gan_iters(void *c) {
  for (int i = 0; i < ((gan_ctx *)c)->n; i++) gan_iter(c);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  if (argc > 2) g_only = argv[2], g_min_s = 3;
  nn_set_threads(threads);
  shoal_error err = {0};
  const char *t = threads == 1 ? "t1" : "t2";
  printf("nn_layers_speed: nn's CPU layers, %d thread(s); forward + backward + SGD\n", threads);
  printf("%-34s %14s %10s\n", "figure", "value", "unit");
  /* the conv nets' figures are shares of it; a figure run alone for profiling that does
   * not need it skips it (it printed 1.0 GFLOP/s and a share of 4035% before) */
  double sg = 0;
  if (want("nature") || want("dcgan")) {
    sg = sgemm_gflops(512);
    printf("%-34s %14.1f %10s\n", "OpenBLAS sgemm 512^3", sg, "GFLOP/s");
  }

  /* (a) DQN MLP 4-64-64-2 at batch 256, with a target-network forward. */
  nn_model *q = mlp(256), *qt = mlp(256);
  double r = 0;
  if (want("mlp")) r = train_rate(q, 256, 4, 2, qt);
  if (want("mlp")) printf("%-34s %14.0f %10s\n", "mlp train b256 (+target fwd)", r, "steps/s");
  if (want("mlp"))
    printf("BENCH name=nn.layers.mlp_train.%s value=%.0f unit=steps/s baseline=none ratio=none\n",
           t, r);

  /* (e) greedy action from the MLP. */
  nn_model_set_training(q, false);
  int bs[3] = {1, 16, 256};
  for (int i = 0; i < 3 && want("act"); i++) {
    int B = bs[i];
    float *x = rnd((size_t)B * 4, 1, 9);
    const float *y;
    long greedy = 0; /* the argmax is part of acting; printed so it is not optimised out */
    RATE(r, {
      if (nn_model_forward(q, x, B, &y, &err)) die("act", &err);
      for (int s = 0; s < B; s++) greedy += y[2 * s + 1] > y[2 * s];
    });
    printf("%-28s b%-4d %14.0f %10s  (%ld picks of action 1)\n", "mlp act", B, r * B, "samples/s",
           greedy);
    printf("BENCH name=nn.layers.act_b%d.%s value=%.0f unit=samples/s baseline=none ratio=none\n",
           B, t, r * B);
    free(x);
  }

  nn_model *mn = minatar(32);
  if (want("minatar")) r = train_rate(mn, 32, 400, 6, NULL);
  if (want("minatar")) printf("%-34s %14.0f %10s\n", "minatar conv train b32", r, "steps/s");
  if (want("minatar"))
    printf(
        "BENCH name=nn.layers.minatar_train.%s value=%.0f unit=steps/s baseline=none ratio=none\n",
        t, r);

  /* Nature-DQN: FLOPs of a training step ~ 3x the forward's (dx of the first layer is
   * skipped, so slightly less). */
  nn_model *na = nature(32);
  if (want("nature")) r = train_rate(na, 32, 4 * 84 * 84, 6, NULL);
  double gf = r * 3 * nn_model_flops_per_sample(na) * 32 / 1e9;
  if (want("nature"))
    printf("%-34s %14.2f %10s  %.1f GFLOP/s (%.0f%% of sgemm)\n", "nature conv train b32", r,
           "steps/s", gf, 100 * gf / sg);
  if (want("nature"))
    printf(
        "BENCH name=nn.layers.nature_gflops.%s value=%.1f unit=GFLOP/s baseline=%.1f ratio=%.2f\n",
        t, gf, sg, gf / sg);

  /* Nature-DQN greedy action at batch 1 (an actor's step). */
  if (want("nature")) {
    nn_model *n1 = nature(1);
    nn_model_set_training(n1, false);
    float *x = rnd(4 * 84 * 84, 1, 21);
    const float *y;
    RATE(r, {
      if (nn_model_forward(n1, x, 1, &y, &err)) die("nature act", &err);
    });
    printf("%-34s %14.0f %10s\n", "nature act b1", r, "samples/s");
    printf(
        "BENCH name=nn.layers.nature_act_b1.%s value=%.0f unit=samples/s baseline=none "
        "ratio=none\n",
        t, r);
    free(x);
    nn_model_destroy(n1);
  }

  /* DCGAN: one D step (real + fake, batch 2x64) and one G step through D. */
  int B = 64;
  gan_ctx gc = {dcgan_g(B),
                dcgan_d(B),
                B,
                rnd((size_t)B * 100, 1, 11),
                rnd((size_t)B * 784, 1, 12),
                rnd((size_t)2 * B, 0.01f, 13),
                malloc((size_t)2 * B * 784 * sizeof(float)),
                1};
  nn_model *g = gc.g, *d = gc.d;
  if (want("dcgan")) RATE(r, gan_iter(&gc));
  double fg = nn_model_flops_per_sample(g), fd = nn_model_flops_per_sample(d);
  gf = r * (3 * fg * B + 3 * fd * 2 * B + 3 * fd * B) / 1e9;
  if (want("dcgan"))
    printf("%-34s %14.2f %10s  %.1f GFLOP/s (%.0f%% of sgemm)\n", "dcgan D+G step b64", r, "it/s",
           gf, 100 * gf / sg);
  if (want("dcgan"))
    printf(
        "BENCH name=nn.layers.dcgan_gflops.%s value=%.1f unit=GFLOP/s baseline=%.1f ratio=%.2f\n",
        t, gf, sg, gf / sg);
  if (want("convs")) conv_table(t);
  if (want("denses")) dense_table(t);
  if (want("profile")) {
    /* where the time goes, per layer: Nature-DQN's and MinAtar's training steps and the DCGAN
     * iteration */
    train_ctx tc = {
        na, NULL, 32, rnd((size_t)32 * 4 * 84 * 84, 1, 5), rnd((size_t)32 * 6, 0.01f, 6), 20};
    profile_print("nature train b32, 20 steps", &na, (const char *const[]){"Q"}, 1, train_steps,
                  &tc);
    free(tc.x), free(tc.dy);
    train_ctx tm = {
        mn, NULL, 32, rnd((size_t)32 * 4 * 10 * 10, 1, 7), rnd((size_t)32 * 6, 0.01f, 8), 400};
    profile_print("minatar train b32, 400 steps", &mn, (const char *const[]){"Q"}, 1, train_steps,
                  &tm);
    free(tm.x), free(tm.dy);
    gc.n = 10;
    profile_print("dcgan D+G, 10 iterations", (nn_model *const[]){g, d},
                  (const char *const[]){"G", "D"}, 2, gan_iters, &gc);
  }
  free(gc.z), free(gc.real), free(gc.dd), free(gc.both);
  nn_model_destroy(q), nn_model_destroy(qt), nn_model_destroy(mn), nn_model_destroy(na);
  nn_model_destroy(g), nn_model_destroy(d);
  return 0;
}
