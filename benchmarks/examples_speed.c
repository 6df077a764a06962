/* SPDX-License-Identifier: Apache-2.0 */
/*
 * benchmarks/examples_speed.c — the examples' training speed against the same models in
 * PyTorch 1.13, measured in the same run (benchmarks/examples_speed_torch.py through
 * $SHOAL_PYTHON, default /usr/bin/python3):
 *
 *   classify_epoch  examples/classify.c's CNN (conv32 BN pool conv64 BN pool 256 dropout 10),
 *                   b64, Adam, real Fashion-MNIST minibatches from data_loader (shuffled,
 *                   prefetched on its thread): seconds per epoch of 938 steps, from the
 *                   median step rate of time-bounded windows (lower is better; ratio =
 *                   torch / shoal, so > 1 still means shoal is better)
 *   dcgan           examples/dcgan.c's step (D on real and G(z), G through D), b64, real
 *                   minibatches: iterations/s
 *
 * Windows of shoal and torch alternate (torch in a child process serving one window per
 * request), so load from other processes on the shared machine falls on both alike.
 * Threads as benchmarks/nn_cpu: nn_set_threads(n) for shoal; torch.set_num_threads(n)
 * with OpenBLAS at 1 and OMP_WAIT_POLICY=PASSIVE for torch.
 *
 *   examples_speed [--threads 1,2] [--window 3] [--repeats 3] [--no-torch]
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/data.h"
#include "nn/nn.h"
#include "benchmarks/torch_child.h"

static double g_window = 3;
static int g_repeats = 3;

static _Noreturn void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "examples_speed: %s: %s\n", what, err && err->msg[0] ? err->msg : "failed");
  exit(1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ---- the two training steps ------------------------------------------------------------- */

typedef struct bench_ctx {
  nn_model *m, *g, *d;
  nn_optim *om, *og, *od;
  data_loader *ld;
  float *dl, *z, *ones, *zeros;
  shoal_rng rng;
} bench_ctx;

static void classify_step(bench_ctx *c) {
  shoal_error err = {0};
  data_batch b;
  const float *y;
  float loss;
  nn_model_zero_grad(c->m);
  if (data_loader_next(c->ld, &b, &err) || nn_model_forward(c->m, b.x, b.n, &y, &err) ||
      nn_cross_entropy_loss(&loss, c->dl, y, b.labels, NULL, b.n, 10, &err) ||
      nn_model_backward(c->m, c->dl, NULL, &err) || nn_optim_step(c->om, &err))
    die("classify step", &err);
}

static void dcgan_step(bench_ctx *c) {
  shoal_error err = {0};
  data_batch b;
  const float *fake, *logit, *dx;
  float l;
  for (int i = 0; i < 64 * 100; i++) c->z[i] = (float)shoal_rng_normal(&c->rng);
  nn_model_zero_grad(c->d);
  if (data_loader_next(c->ld, &b, &err) || nn_model_forward(c->g, c->z, 64, &fake, &err) ||
      nn_model_forward(c->d, b.x, 64, &logit, &err) ||
      nn_bce_with_logits_loss(&l, c->dl, logit, c->ones, NULL, 64, 1, &err) ||
      nn_model_backward(c->d, c->dl, NULL, &err) ||
      nn_model_forward(c->d, fake, 64, &logit, &err) ||
      nn_bce_with_logits_loss(&l, c->dl, logit, c->zeros, NULL, 64, 1, &err) ||
      nn_model_backward(c->d, c->dl, NULL, &err) || nn_optim_step(c->od, &err))
    die("D step", &err);
  nn_model_zero_grad(c->g);
  if (nn_model_forward(c->d, fake, 64, &logit, &err) ||
      nn_bce_with_logits_loss(&l, c->dl, logit, c->ones, NULL, 64, 1, &err) ||
      nn_model_backward(c->d, c->dl, &dx, &err) || nn_model_backward(c->g, dx, NULL, &err) ||
      nn_optim_step(c->og, &err))
    die("G step", &err);
}

static nn_model *built(nn_model *m) {
  shoal_error err = {0};
  if (nn_model_build(m, 64, 0, &err)) die("build", &err);
  return m;
}

static void setup(bench_ctx *c, const data_set *train, bool gan) {
  memset(c, 0, sizeof *c);
  shoal_error err = {0};
  data_loader_config lc = data_loader_defaults();
  lc.batch = 64, lc.drop_last = true;
  lc.mean = gan ? 0.5f : 0.2860f, lc.std = gan ? 0.5f : 0.3530f;
  c->ld = data_loader_create(train, &lc, &err);
  if (!c->ld) die("loader", &err);
  nn_optim_config oc = nn_optim_defaults(NN_ADAM);
  if (!gan) {
    nn_model *m = nn_model_create(NN_CPU, NULL);
    nn_input(m, 1, 28, 28);
    nn_conv2d(m, "conv1", 32, 3, 3, 1, 1, 1), nn_batchnorm(m, "bn1", 1e-5f, 0.1f);
    nn_activation(m, "relu1", NN_RELU, 0), nn_maxpool2d(m, "pool1", 2, 2, 0);
    nn_conv2d(m, "conv2", 64, 3, 3, 1, 1, 1), nn_batchnorm(m, "bn2", 1e-5f, 0.1f);
    nn_activation(m, "relu2", NN_RELU, 0), nn_maxpool2d(m, "pool2", 2, 2, 0);
    nn_dense(m, "fc1", 256), nn_activation(m, "relu3", NN_RELU, 0);
    nn_dropout(m, "drop", 0.3f), nn_dense(m, "fc2", 10);
    c->m = built(m);
    c->om = nn_optim_create(c->m, &oc, &err);
    if (!c->om) die("optim", &err);
  } else {
    nn_model *g = nn_model_create(NN_CPU, NULL), *d = nn_model_create(NN_CPU, NULL);
    nn_input(g, 100, 1, 1);
    nn_dense(g, "fc", 7 * 7 * 128), nn_reshape(g, "view", 128, 7, 7);
    nn_batchnorm(g, "bn0", 1e-5f, 0.1f), nn_activation(g, "relu0", NN_RELU, 0);
    nn_conv_transpose2d(g, "ct1", 64, 4, 4, 2, 1, 0);
    nn_batchnorm(g, "bn1", 1e-5f, 0.1f), nn_activation(g, "relu1", NN_RELU, 0);
    nn_conv_transpose2d(g, "ct2", 1, 4, 4, 2, 1, 0), nn_activation(g, "tanh", NN_TANH, 0);
    nn_input(d, 1, 28, 28);
    nn_conv2d(d, "c1", 64, 4, 4, 2, 1, 1), nn_activation(d, "lrelu1", NN_LEAKY_RELU, 0.2f);
    nn_conv2d(d, "c2", 128, 4, 4, 2, 1, 1), nn_batchnorm(d, "bn2", 1e-5f, 0.1f);
    nn_activation(d, "lrelu2", NN_LEAKY_RELU, 0.2f), nn_dense(d, "fc", 1);
    c->g = built(g), c->d = built(d);
    oc.lr = 2e-4f, oc.beta1 = 0.5f;
    c->og = nn_optim_create(c->g, &oc, &err);
    c->od = c->og ? nn_optim_create(c->d, &oc, &err) : NULL;
    if (!c->od) die("optim", &err);
  }
  c->dl = malloc(64 * 10 * sizeof(float));
  c->z = malloc(64 * 100 * sizeof(float));
  c->ones = malloc(64 * sizeof(float));
  c->zeros = calloc(64, sizeof(float));
  if (!c->dl || !c->z || !c->ones || !c->zeros) die("alloc", NULL);
  for (int i = 0; i < 64; i++) c->ones[i] = 1;
  shoal_rng_seed(&c->rng, 0);
}

static void teardown(bench_ctx *c) {
  nn_optim_destroy(c->om), nn_optim_destroy(c->og), nn_optim_destroy(c->od);
  nn_model_destroy(c->m), nn_model_destroy(c->g), nn_model_destroy(c->d);
  data_loader_destroy(c->ld);
  free(c->dl), free(c->z), free(c->ones), free(c->zeros);
}

static double window_rate(bench_ctx *c, bool gan) {
  int n = 0;
  double t0 = shoal_now_s(), dt;
  do {
    gan ? dcgan_step(c) : classify_step(c);
    n++;
    dt = shoal_now_s() - t0;
  } while (dt < g_window || n < 2);
  return n / dt;
}

/* Median steps/s of shoal and torch over alternating windows. */
static void timed_pair(const data_set *train, bool gan, torch_proc *tp, double *s, double *t) {
  bench_ctx c;
  setup(&c, train, gan);
  gan ? dcgan_step(&c) : classify_step(&c); /* warm-up */
  double rs[16], rt[16];
  int k = g_repeats < 16 ? g_repeats : 16;
  for (int r = 0; r < k; r++) {
    rs[r] = window_rate(&c, gan);
    rt[r] = tp->in ? torch_window(tp, gan ? "dcgan" : "classify", g_window) : NAN;
  }
  teardown(&c);
  qsort(rs, (size_t)k, sizeof *rs, cmp_double);
  qsort(rt, (size_t)k, sizeof *rt, cmp_double);
  *s = rs[k / 2], *t = rt[k / 2];
  for (int r = 0; r < k; r++)
    if (!isfinite(rt[r])) *t = NAN;
}

static double loadavg(void) {
  double l = NAN;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = NAN;
    fclose(f);
  }
  return l;
}

int main(int argc, char **argv) {
  const char *threads_arg = "1,2";
  bool with_torch = true;
  signal(SIGPIPE, SIG_IGN);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads_arg = argv[++i];
    else if (!strcmp(argv[i], "--window") && i + 1 < argc)
      g_window = atof(argv[++i]);
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
      g_repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-torch"))
      with_torch = false;
    else {
      fprintf(stderr,
              "usage: examples_speed [--threads 1,2] [--window S] [--repeats N] "
              "[--no-torch]\n");
      return 2;
    }
  }
  if (!(g_window > 0) || g_repeats < 1) die("bad --window or --repeats", NULL);
  shoal_error err = {0};
  data_set *train;
  if (data_fashion_mnist_load(NULL, true, &train, &err)) die("Fashion-MNIST", &err);
  long steps = data_set_count(train) / 64 + (data_set_count(train) % 64 != 0);
  char lines[16][256];
  int nl = 0;
  printf("%-16s %4s %12s %12s %8s  %s\n", "row", "thr", "shoal", "torch", "ratio", "unit");
  char buf[256];
  snprintf(buf, sizeof buf, "%s", threads_arg);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    int th = atoi(tok);
    if (th < 1) die("bad --threads", NULL);
    nn_set_threads(th);
    torch_proc tp = {0};
    if (with_torch) torch_start(&tp, "examples_speed", "examples_speed_torch.py", NULL, th);
    double cs, ct, gs, gt;
    timed_pair(train, false, &tp, &cs, &ct);
    timed_pair(train, true, &tp, &gs, &gt);
    torch_stop(&tp);
    double es = steps / cs, et = steps / ct; /* seconds per epoch */
    printf("%-16s t%-3d %12.2f %12.2f %8.2f  s/epoch (%ld steps of 64)\n", "classify_epoch", th, es,
           et, et / es, steps);
    printf("%-16s t%-3d %12.3f %12.3f %8.2f  it/s\n", "dcgan", th, gs, gt, gs / gt);
    fflush(stdout);
    if (nl < 15)
      snprintf(lines[nl++], sizeof lines[0],
               "BENCH name=examples.classify_epoch.t%d value=%.4g unit=s baseline=%.4g ratio=%.3f",
               th, es, et, et / es);
    if (nl < 15)
      snprintf(lines[nl++], sizeof lines[0],
               "BENCH name=examples.dcgan.t%d value=%.4g unit=it/s baseline=%.4g ratio=%.3f", th,
               gs, gt, gs / gt);
  }
  printf(
      "load average at the end: %.2f (the machine is shared: above ~0.5, read the figures "
      "as noisy)\n\n",
      loadavg());
  for (int i = 0; i < nl; i++) {
    /* a missing baseline prints as none, as the other benchmarks do */
    char *b = strstr(lines[i], "baseline=nan");
    if (b) snprintf(b, sizeof lines[0] - (size_t)(b - lines[i]), "baseline=none ratio=none");
    printf("%s\n", lines[i]);
  }
  data_set_destroy(train);
  return 0;
}
