/* SPDX-License-Identifier: Apache-2.0 */
/*
 * benchmarks/gpu/nn_gpu.c — training steps/s of nn's CUDA backend, the shoal half of
 * benchmarks/gpu/check.sh (benchmarks/gpu/torch_gpu.py times the same steps in PyTorch
 * on the same card; check.sh prints the ratios).
 *
 *   mlp     DQN MLP 4-64-64-2, b256 and b4096
 *   nature  Nature-DQN 4x84x84 (conv32 8x8/4, conv64 4x4/2, conv64 3x3/1, fc512, 6),
 *           b32 and b256
 *     each a DQN-shaped step: target-net forward on s', online forward on s, Huber
 *     against a (B, A) target, backward, gradient clipping at 10, Adam. The TD target's
 *     max and gather are left out of both sides (they are the algorithm's, not nn's).
 *   dcgan   the 28x28 DCGAN of benchmarks/nn_cpu.c, b64 and b512: a D step on real and
 *           G(z), a G step through D (BCE with logits, Adam lr 2e-4, beta1 0.5)
 *
 * Batches stay on the device (uploaded once), as they would be in PyTorch's loop.
 * Prints a table, one "RESULT <net> <B> <steps/s>" line per row and one BENCH line
 * gpu.<net>.b<B>, with PyTorch's figure as the baseline when --torch names a file of
 * torch_gpu.py's RESULT lines measured on the same card (check.sh does this), else
 * baseline=none. Without a CUDA device it prints SKIPPED and exits 0.
 *
 *   nn_gpu [--window 1.0] [--repeats 3] [--rows mlp,nature,dcgan] [--torch FILE]
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"

static double g_window = 1.0;
static int g_repeats = 3;

static void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "nn_gpu: %s: %s\n", what, err && err->msg[0] ? err->msg : "failed");
  exit(1);
}

static float *dev_random(nn_model *m, size_t n, uint64_t seed, float scale) {
  shoal_error err = {0};
  float *h = malloc(n * sizeof(float));
  if (!h) die("alloc", NULL);
  shoal_rng r;
  shoal_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++) h[i] = scale * (float)shoal_rng_normal(&r);
  float *d = nn_model_alloc(m, n, &err);
  if (!d) die("device alloc", &err);
  if (nn_model_to_device(m, d, h, n, &err)) die("upload", &err);
  free(h);
  return d;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median over repeats of steps/s in windows of g_window seconds, after a warm-up. */
static double rate(void (*step)(void *), void *ctx, nn_model *m) {
  shoal_error err = {0};
  for (int i = 0; i < 20; i++) step(ctx);
  if (nn_model_sync(m, &err)) die("sync", &err);
  double r[16];
  int k = g_repeats < 16 ? g_repeats : 16;
  for (int j = 0; j < k; j++) {
    long n = 0;
    double t0 = shoal_now_s(), dt;
    do {
      step(ctx);
      n++;
      dt = shoal_now_s() - t0;
    } while (dt < g_window || n < 3);
    if (nn_model_sync(m, &err)) die("sync", &err);
    r[j] = (double)n / (shoal_now_s() - t0);
  }
  qsort(r, (size_t)k, sizeof r[0], cmp_double);
  return r[k / 2];
}

static nn_model *finish(nn_model *m, int B, const char *what) {
  shoal_error err = {0};
  if (nn_model_build(m, B, 1, &err)) die(what, &err);
  return m;
}

static nn_model *make_mlp(int B) {
  nn_model *m = nn_model_create(NN_CUDA, NULL);
  if (!m) die("create", NULL);
  nn_input(m, 4, 1, 1);
  nn_dense(m, "fc1", 64);
  nn_activation(m, "act1", NN_RELU, 0);
  nn_dense(m, "fc2", 64);
  nn_activation(m, "act2", NN_RELU, 0);
  nn_dense(m, "out", 2);
  return finish(m, B, "mlp");
}

static nn_model *make_nature(int B) {
  nn_model *m = nn_model_create(NN_CUDA, NULL);
  if (!m) die("create", NULL);
  nn_input(m, 4, 84, 84);
  nn_conv2d(m, "conv1", 32, 8, 8, 4, 0, 1);
  nn_activation(m, "act1", NN_RELU, 0);
  nn_conv2d(m, "conv2", 64, 4, 4, 2, 0, 1);
  nn_activation(m, "act2", NN_RELU, 0);
  nn_conv2d(m, "conv3", 64, 3, 3, 1, 0, 1);
  nn_activation(m, "act3", NN_RELU, 0);
  nn_dense(m, "fc", 512);
  nn_activation(m, "act4", NN_RELU, 0);
  nn_dense(m, "out", 6);
  return finish(m, B, "nature");
}

typedef struct dqn {
  nn_model *q, *target;
  nn_optim *opt;
  int B, A;
  float *s, *s2, *y, *dy; /* device */
} dqn;

static void dqn_init(dqn *d, nn_model *(*make)(int), int B) {
  shoal_error err = {0};
  memset(d, 0, sizeof *d);
  d->q = make(B);
  d->target = make(B);
  if (nn_model_copy(d->target, d->q, &err)) die("target copy", &err);
  nn_model_set_training(d->target, false);
  nn_optim_config oc = nn_optim_defaults(NN_ADAM);
  oc.lr = 1e-4f, oc.clip_norm = 10.0f;
  d->opt = nn_optim_create(d->q, &oc, &err);
  if (!d->opt) die("optimizer", &err);
  int C, H, W;
  nn_node_shape(d->q, 0, &C, &H, &W);
  size_t in = (size_t)C * H * W;
  nn_node_shape(d->q, nn_model_current(d->q), &C, &H, &W);
  d->A = C * H * W;
  d->B = B;
  d->s = dev_random(d->q, (size_t)B * in, 1, 1.0f);
  d->s2 = dev_random(d->q, (size_t)B * in, 2, 1.0f);
  d->y = dev_random(d->q, (size_t)B * d->A, 3, 1.0f);
  d->dy = dev_random(d->q, (size_t)B * d->A, 4, 0.0f);
}

static void dqn_free(dqn *d) {
  nn_model_free(d->q, d->s), nn_model_free(d->q, d->s2), nn_model_free(d->q, d->y);
  nn_model_free(d->q, d->dy);
  nn_optim_destroy(d->opt);
  nn_model_destroy(d->q), nn_model_destroy(d->target);
}

static void dqn_step(void *ctx) {
  dqn *d = ctx;
  shoal_error err = {0};
  const float *yt, *yq;
  if (nn_model_forward(d->target, d->s2, d->B, &yt, &err)) die("target forward", &err);
  if (nn_model_forward(d->q, d->s, d->B, &yq, &err)) die("forward", &err);
  if (nn_model_loss(d->q, NN_LOSS_HUBER, NULL, d->dy, yq, d->y, NULL, d->B, d->A, 1.0f, &err))
    die("loss", &err);
  nn_model_zero_grad(d->q);
  if (nn_model_backward(d->q, d->dy, NULL, &err)) die("backward", &err);
  if (nn_optim_step(d->opt, &err)) die("adam", &err);
}

typedef struct gan {
  nn_model *g, *d;
  nn_optim *og, *od;
  int B;
  float *z, *real, *ones, *zeros, *dl; /* device */
} gan;

static void gan_init(gan *t, int B) {
  shoal_error err = {0};
  memset(t, 0, sizeof *t);
  nn_model *g = nn_model_create(NN_CUDA, &err);
  if (!g) die("create", &err);
  nn_input(g, 100, 1, 1);
  nn_dense(g, "fc", 7 * 7 * 128);
  nn_reshape(g, "view", 128, 7, 7);
  nn_batchnorm(g, "bn0", 1e-5f, 0.1f);
  nn_activation(g, "act0", NN_RELU, 0);
  nn_conv_transpose2d(g, "ct1", 64, 4, 4, 2, 1, 0);
  nn_batchnorm(g, "bn1", 1e-5f, 0.1f);
  nn_activation(g, "act1", NN_RELU, 0);
  nn_conv_transpose2d(g, "ct2", 1, 4, 4, 2, 1, 0);
  nn_activation(g, "tanh", NN_TANH, 0);
  t->g = finish(g, B, "generator");
  nn_model *d = nn_model_create(NN_CUDA, &err);
  if (!d) die("create", &err);
  nn_input(d, 1, 28, 28);
  nn_conv2d(d, "c1", 64, 4, 4, 2, 1, 1);
  nn_activation(d, "act1", NN_LEAKY_RELU, 0.2f);
  nn_conv2d(d, "c2", 128, 4, 4, 2, 1, 1);
  nn_batchnorm(d, "bn2", 1e-5f, 0.1f);
  nn_activation(d, "act2", NN_LEAKY_RELU, 0.2f);
  nn_dense(d, "fc", 1);
  t->d = finish(d, B, "discriminator");
  nn_optim_config oc = nn_optim_defaults(NN_ADAM);
  oc.lr = 2e-4f, oc.beta1 = 0.5f;
  t->og = nn_optim_create(t->g, &oc, &err);
  t->od = nn_optim_create(t->d, &oc, &err);
  if (!t->og || !t->od) die("optimizer", &err);
  t->B = B;
  t->z = dev_random(t->g, (size_t)B * 100, 5, 1.0f);
  t->real = dev_random(t->g, (size_t)B * 784, 6, 0.5f);
  t->zeros = dev_random(t->g, (size_t)B, 7, 0.0f);
  t->dl = dev_random(t->g, (size_t)B, 8, 0.0f);
  float *h = malloc((size_t)B * sizeof(float));
  if (!h) die("alloc", NULL);
  for (int i = 0; i < B; i++) h[i] = 1.0f;
  t->ones = nn_model_alloc(t->g, (size_t)B, &err);
  if (!t->ones || nn_model_to_device(t->g, t->ones, h, (size_t)B, &err)) die("upload", &err);
  free(h);
}

static void gan_free(gan *t) {
  nn_model_free(t->g, t->z), nn_model_free(t->g, t->real), nn_model_free(t->g, t->zeros);
  nn_model_free(t->g, t->dl), nn_model_free(t->g, t->ones);
  nn_optim_destroy(t->og), nn_optim_destroy(t->od);
  nn_model_destroy(t->g), nn_model_destroy(t->d);
}

static void gan_step(void *ctx) {
  gan *t = ctx;
  shoal_error err = {0};
  const float *fake, *logit, *dx;
  int B = t->B;
  if (nn_model_forward(t->g, t->z, B, &fake, &err)) die("G forward", &err);
  nn_model_zero_grad(t->d);
  if (nn_model_forward(t->d, t->real, B, &logit, &err)) die("D forward", &err);
  if (nn_model_loss(t->d, NN_LOSS_BCE_LOGITS, NULL, t->dl, logit, t->ones, NULL, B, 1, 0, &err))
    die("bce", &err);
  if (nn_model_backward(t->d, t->dl, NULL, &err)) die("D backward", &err);
  if (nn_model_forward(t->d, fake, B, &logit, &err)) die("D forward", &err);
  if (nn_model_loss(t->d, NN_LOSS_BCE_LOGITS, NULL, t->dl, logit, t->zeros, NULL, B, 1, 0, &err))
    die("bce", &err);
  if (nn_model_backward(t->d, t->dl, NULL, &err)) die("D backward", &err);
  if (nn_optim_step(t->od, &err)) die("D adam", &err);
  nn_model_zero_grad(t->g);
  if (nn_model_forward(t->d, fake, B, &logit, &err)) die("D forward", &err);
  if (nn_model_loss(t->d, NN_LOSS_BCE_LOGITS, NULL, t->dl, logit, t->ones, NULL, B, 1, 0, &err))
    die("bce", &err);
  if (nn_model_backward(t->d, t->dl, &dx, &err)) die("D backward", &err);
  if (nn_model_backward(t->g, dx, NULL, &err)) die("G backward", &err);
  if (nn_optim_step(t->og, &err)) die("G adam", &err);
}

/* PyTorch's steps/s for (net, B) from a file of RESULT lines; 0 when absent. */
static double torch_rate(const char *path, const char *net, int B) {
  if (!path) return 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[256], n[32];
  int b;
  double r, found = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "RESULT %31s %d %lf", n, &b, &r) == 3 && !strcmp(n, net) && b == B) found = r;
  fclose(f);
  return found;
}

static bool has_row(const char *rows, const char *r) {
  size_t n = strlen(r);
  for (const char *p = rows; (p = strstr(p, r)); p += n)
    if ((p == rows || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return true;
  return false;
}

int main(int argc, char **argv) {
  const char *rows = "mlp,nature,dcgan", *torch = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--window") && i + 1 < argc)
      g_window = atof(argv[++i]);
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
      g_repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
      rows = argv[++i];
    else if (!strcmp(argv[i], "--torch") && i + 1 < argc)
      torch = argv[++i];
    else {
      fprintf(stderr,
              "usage: nn_gpu [--window 1.0] [--repeats 3] [--rows mlp,nature,dcgan] "
              "[--torch FILE]\n");
      return 2;
    }
  }
  shoal_error err = {0};
  if (!nn_cuda_available(&err)) {
    printf("SKIPPED: no CUDA device (%s)\n", err.msg);
    return 0;
  }
  printf("%-8s %6s %12s %12s %8s\n", "net", "batch", "shoal", "pytorch", "ratio");
  struct {
    const char *net;
    int B;
  } cases[] = {{"mlp", 256},    {"mlp", 4096}, {"nature", 32},
               {"nature", 256}, {"dcgan", 64}, {"dcgan", 512}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (!has_row(rows, cases[i].net)) continue;
    double r;
    if (!strcmp(cases[i].net, "dcgan")) {
      gan t;
      gan_init(&t, cases[i].B);
      r = rate(gan_step, &t, t.g);
      gan_free(&t);
    } else {
      dqn d;
      dqn_init(&d, !strcmp(cases[i].net, "mlp") ? make_mlp : make_nature, cases[i].B);
      r = rate(dqn_step, &d, d.q);
      dqn_free(&d);
    }
    double t = torch_rate(torch, cases[i].net, cases[i].B);
    printf("%-8s %6d %12.1f %12.1f %8.2f\n", cases[i].net, cases[i].B, r, t, t > 0 ? r / t : 0);
    printf("RESULT %s %d %.3f\n", cases[i].net, cases[i].B, r);
    if (t > 0)
      printf("BENCH name=gpu.%s.b%d value=%.1f unit=steps/s baseline=%.1f ratio=%.3f\n",
             cases[i].net, cases[i].B, r, t, r / t);
    else
      printf("BENCH name=gpu.%s.b%d value=%.1f unit=steps/s baseline=none ratio=none\n",
             cases[i].net, cases[i].B, r);
    fflush(stdout);
  }
  return 0;
}
