/* SPDX-License-Identifier: Apache-2.0 */
/*
 * benchmarks/nn_cpu.c — training and acting speed of nn on the CPU against PyTorch 1.13,
 * measured in the same run (benchmarks/nn_cpu_torch.py through $SHOAL_PYTHON, default
 * /usr/bin/python3), and against PyTorch 2 (the same script through the peers' venv of
 * benchmarks/peers/setup.sh, torch2_python in torch_child.h; BENCH lines
 * nn.<row>.t<T>.torch2, baseline=none without the venv), at 1 and 2 threads:
 *
 *   (a) DQN MLP 4-64-64-2, b256: target forward, Q(s, a), Huber, backward, Adam
 *   (b) MinAtar conv net 4x10x10 -> conv16 3x3 -> dense 128 -> 6, b32, the same step
 *   (c) Nature-DQN 4x84x84 (conv32 8x8/4, conv64 4x4/2, conv64 3x3/1, dense 512, 6), b32;
 *       and the IMPALA deep net on the same frames (algos/torso.c's `impala`: three stages
 *       of conv, max-pool and two residual blocks, dense 256, 6), b32, the same DQN step
 *   (d) DCGAN 28x28 (docs/benchmarks.md, reference figures), b64: one D step (real and fake), one
 *       G step through D
 *   (e) greedy action from the MLP at b1, b16, b256 (samples/s)
 *
 * For (c) and (d) it prints the achieved GFLOP/s (nominal: a training step counts 3x
 * the forward multiply-adds of the trained model, 1x for a forward only) beside
 * the sgemm rate on 1024x1024 measured in windows between those rows': OpenBLAS's
 * sgemm on one thread, split in column blocks over nn's threads past one (as nn runs
 * every big product; OpenBLAS's own pool would keep spinning into shoal's windows).
 * For (b) it prints the ceiling at that rate: the steps/s if every product of the step
 * ran at it and nothing else took time, and its ratio to PyTorch (what no kernel can
 * pass on the machine), and shoal's share of it.
 *
 * Threads: shoal uses nn_set_threads(n) (OpenBLAS on one thread, nn's pool); torch runs with
 * torch.set_num_threads(n), OpenBLAS at 1 thread (one pool each, as the baselines note
 * advises) and OMP_WAIT_POLICY=PASSIVE (see torch_start). Each figure is the median of several
 * time-bounded windows; shoal's and torch's windows alternate (torch in a child process serving one
 * window per request), so that load from other processes on a shared machine falls on both alike.
 * PyTorch 2 runs in a second child the same way, its windows alternating with the other two.
 *
 *   (f) plan: the DQN rows' steps (MLP at b256, the conv nets at b32) with kernel paths
 *       chosen by timing (nn/cpu/plan.c, the default) against convk.c's and densek.c's fixed
 *       rules, and the path each conv and dense layer took
 *
 *   nn_cpu [--threads 1,2] [--window 0.3] [--repeats 5]
 *          [--rows mlp,minatar,nature,impala,dcgan,act,plan] [--no-torch] [--no-torch2]
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "algos/algos.h" /* algos_image_torso: the impala row is the configs' net */
#include "benchmarks/torch_child.h"
#include "nn/internal.h" /* nn__sgemm: the ceiling, as nn runs a product */
#include "nn/nn.h"

static double g_window = 0.3;
static int g_repeats = 5;

static void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "nn_cpu: %s: %s\n", what, err && err->msg[0] ? err->msg : "failed");
  exit(1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Calls/s over one window of at least g_window seconds (and 2 calls). */
static double window_rate(void (*fn)(void *), void *ctx) {
  int n = 0;
  double t0 = shoal_now_s(), dt;
  do {
    fn(ctx);
    n++;
    dt = shoal_now_s() - t0;
  } while (dt < g_window || n < 2);
  return n / dt;
}

static void fill_normal(float *x, size_t n, shoal_rng *r) {
  for (size_t i = 0; i < n; i++) x[i] = (float)shoal_rng_normal(r);
}

/* ---- (a)-(c): a DQN learner step ------------------------------------------------------- */

typedef nn_model *(*make_fn)(int B);

typedef struct dqn {
  nn_model *q, *target;
  nn_optim *opt;
  int B, A, in;
  float *s, *s2, *r, *done, *y, *pred, *dpred, *dy;
  int *a;
} dqn;

static nn_model *finish(nn_model *m, int B, const char *what) {
  shoal_error err = {0};
  if (nn_model_build(m, B, 1, &err)) die(what, &err);
  return m;
}

static nn_model *make_mlp(int B) {
  nn_model *m = nn_model_create(NN_CPU, NULL);
  nn_input(m, 4, 1, 1);
  nn_dense(m, "fc1", 64);
  nn_activation(m, "act1", NN_RELU, 0);
  nn_dense(m, "fc2", 64);
  nn_activation(m, "act2", NN_RELU, 0);
  nn_dense(m, "out", 2);
  return finish(m, B, "mlp");
}

static nn_model *make_minatar(int B) {
  nn_model *m = nn_model_create(NN_CPU, NULL);
  nn_input(m, 4, 10, 10);
  nn_conv2d(m, "conv", 16, 3, 3, 1, 0, 1);
  nn_activation(m, "act1", NN_RELU, 0);
  nn_dense(m, "fc", 128);
  nn_activation(m, "act2", NN_RELU, 0);
  nn_dense(m, "out", 6);
  return finish(m, B, "minatar");
}

static nn_model *make_nature(int B) {
  nn_model *m = nn_model_create(NN_CPU, NULL);
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

static nn_model *make_impala(int B) {
  nn_model *m = nn_model_create(NN_CPU, NULL);
  nn_input(m, 4, 84, 84);
  algos_image_torso(m, true, "", NULL);
  nn_dense(m, "out", 6);
  return finish(m, B, "impala");
}

static void dqn_init(dqn *d, make_fn make, int B) {
  memset(d, 0, sizeof *d);
  shoal_error err = {0};
  d->q = make(B);
  d->target = make(B);
  if (nn_model_copy(d->target, d->q, &err)) die("target copy", &err);
  nn_optim_config oc = nn_optim_defaults(NN_ADAM);
  oc.lr = 1e-4f;
  d->opt = nn_optim_create(d->q, &oc, &err);
  if (!d->opt) die("optimizer", &err);
  int C, H, W;
  nn_node_shape(d->q, 0, &C, &H, &W);
  d->in = C * H * W;
  nn_node_shape(d->q, nn_model_current(d->q), &C, &H, &W);
  d->A = C * H * W;
  d->B = B;
  size_t nx = (size_t)B * d->in;
  d->s = malloc(nx * sizeof(float));
  d->s2 = malloc(nx * sizeof(float));
  d->r = malloc(B * sizeof(float));
  d->done = malloc(B * sizeof(float));
  d->y = malloc(B * sizeof(float));
  d->pred = malloc(B * sizeof(float));
  d->dpred = malloc(B * sizeof(float));
  d->dy = malloc((size_t)B * d->A * sizeof(float));
  d->a = malloc(B * sizeof(int));
  if (!d->s || !d->s2 || !d->r || !d->done || !d->y || !d->pred || !d->dpred || !d->dy || !d->a)
    die("alloc", NULL);
  shoal_rng rng;
  shoal_rng_seed(&rng, 0);
  fill_normal(d->s, nx, &rng);
  fill_normal(d->s2, nx, &rng);
  fill_normal(d->r, B, &rng);
  for (int i = 0; i < B; i++) {
    d->done[i] = shoal_rng_uniform(&rng) < 0.1 ? 1.0f : 0.0f;
    d->a[i] = (int)shoal_rng_below(&rng, (uint64_t)d->A);
  }
}

static void dqn_free(dqn *d) {
  nn_optim_destroy(d->opt);
  nn_model_destroy(d->q);
  nn_model_destroy(d->target);
  free(d->s), free(d->s2), free(d->r), free(d->done), free(d->y), free(d->pred);
  free(d->dpred), free(d->dy), free(d->a);
}

/* y = r + 0.99 (1 - done) max_a' Q_target(s', a'); loss = Huber(Q(s, a), y); Adam. */
static void dqn_step(void *ctx) {
  dqn *d = ctx;
  shoal_error err = {0};
  const float *yt, *yq;
  int B = d->B, A = d->A;
  if (nn_model_forward(d->target, d->s2, B, &yt, &err)) die("target forward", &err);
  for (int i = 0; i < B; i++) {
    float mx = yt[i * A];
    for (int j = 1; j < A; j++) mx = yt[i * A + j] > mx ? yt[i * A + j] : mx;
    d->y[i] = d->r[i] + 0.99f * (1.0f - d->done[i]) * mx;
  }
  if (nn_model_forward(d->q, d->s, B, &yq, &err)) die("forward", &err);
  for (int i = 0; i < B; i++) d->pred[i] = yq[i * A + d->a[i]];
  float loss;
  if (nn_huber_loss(&loss, d->dpred, d->pred, d->y, NULL, B, 1, 1.0f, &err)) die("loss", &err);
  memset(d->dy, 0, (size_t)B * A * sizeof(float));
  for (int i = 0; i < B; i++) d->dy[i * A + d->a[i]] = d->dpred[i];
  nn_model_zero_grad(d->q);
  if (nn_model_backward(d->q, d->dy, NULL, &err)) die("backward", &err);
  if (nn_optim_step(d->opt, &err)) die("adam", &err);
}

/* ---- (d): DCGAN ---------------------------------------------------------------------------- */

typedef struct gan {
  nn_model *g, *d;
  nn_optim *og, *od;
  int B;
  float *z, *real, *ones, *zeros, *dl;
} gan;

static void gan_init(gan *t, int B) {
  memset(t, 0, sizeof *t);
  shoal_error err = {0};
  nn_model *g = nn_model_create(NN_CPU, NULL);
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
  nn_model *d = nn_model_create(NN_CPU, NULL);
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
  t->z = malloc((size_t)B * 100 * sizeof(float));
  t->real = malloc((size_t)B * 784 * sizeof(float));
  t->ones = malloc(B * sizeof(float));
  t->zeros = malloc(B * sizeof(float));
  t->dl = malloc(B * sizeof(float));
  if (!t->z || !t->real || !t->ones || !t->zeros || !t->dl) die("alloc", NULL);
  shoal_rng rng;
  shoal_rng_seed(&rng, 0);
  fill_normal(t->z, (size_t)B * 100, &rng);
  for (int i = 0; i < B * 784; i++) t->real[i] = 2 * shoal_rng_uniformf(&rng) - 1;
  for (int i = 0; i < B; i++) t->ones[i] = 1, t->zeros[i] = 0;
}

static void gan_free(gan *t) {
  nn_optim_destroy(t->og), nn_optim_destroy(t->od);
  nn_model_destroy(t->g), nn_model_destroy(t->d);
  free(t->z), free(t->real), free(t->ones), free(t->zeros), free(t->dl);
}

static void gan_step(void *ctx) {
  gan *t = ctx;
  shoal_error err = {0};
  const float *fake, *logit, *dx;
  float loss;
  int B = t->B;
  if (nn_model_forward(t->g, t->z, B, &fake, &err)) die("G forward", &err);
  /* D step: real -> 1, G(z) -> 0, gradients of both summed, then Adam */
  nn_model_zero_grad(t->d);
  if (nn_model_forward(t->d, t->real, B, &logit, &err)) die("D forward", &err);
  if (nn_bce_with_logits_loss(&loss, t->dl, logit, t->ones, NULL, B, 1, &err)) die("bce", &err);
  if (nn_model_backward(t->d, t->dl, NULL, &err)) die("D backward", &err);
  if (nn_model_forward(t->d, fake, B, &logit, &err)) die("D forward", &err);
  if (nn_bce_with_logits_loss(&loss, t->dl, logit, t->zeros, NULL, B, 1, &err)) die("bce", &err);
  if (nn_model_backward(t->d, t->dl, NULL, &err)) die("D backward", &err);
  if (nn_optim_step(t->od, &err)) die("D adam", &err);
  /* G step: D(G(z)) -> 1, through D's input gradient into G */
  nn_model_zero_grad(t->g);
  if (nn_model_forward(t->d, fake, B, &logit, &err)) die("D forward", &err);
  if (nn_bce_with_logits_loss(&loss, t->dl, logit, t->ones, NULL, B, 1, &err)) die("bce", &err);
  if (nn_model_backward(t->d, t->dl, &dx, &err)) die("D backward", &err);
  if (nn_model_backward(t->g, dx, NULL, &err)) die("G backward", &err);
  if (nn_optim_step(t->og, &err)) die("G adam", &err);
}

/* ---- (e): greedy action ------------------------------------------------------------------- */

typedef struct actor {
  nn_model *q;
  int B;
  float *x;
  int *act;
} actor;

static void act_step(void *ctx) {
  actor *a = ctx;
  const float *y;
  shoal_error err = {0};
  if (nn_model_forward(a->q, a->x, a->B, &y, &err)) die("act forward", &err);
  for (int i = 0; i < a->B; i++) a->act[i] = y[2 * i + 1] > y[2 * i] ? 1 : 0;
}

/* ---- sgemm ceiling ------------------------------------------------------------------------ */

typedef struct gemm {
  int n;
  float *a, *b, *c;
} gemm;

#ifdef SHOAL_HAVE_OPENBLAS
static void gemm_step(void *ctx) {
  gemm *g = ctx;
  nn__sgemm(false, false, g->n, g->n, g->n, 1.0f, g->a, g->n, g->b, g->n, 0.0f, g->c, g->n);
}

static void gemm_init(gemm *g) {
  g->n = 1024;
  size_t nn2 = (size_t)g->n * g->n;
  g->a = malloc(nn2 * sizeof(float)), g->b = malloc(nn2 * sizeof(float));
  g->c = malloc(nn2 * sizeof(float));
  if (!g->a || !g->b || !g->c) die("alloc", NULL);
  shoal_rng r;
  shoal_rng_seed(&r, 1);
  fill_normal(g->a, nn2, &r);
  fill_normal(g->b, nn2, &r);
}

static void gemm_free(gemm *g) { free(g->a), free(g->b), free(g->c); }
static double gemm_gflops(const gemm *g, double calls_per_s) {
  return calls_per_s * 2.0 * g->n * g->n * g->n / 1e9;
}
#endif

typedef struct pair {
  double shoal, torch; /* calls/s, medians */
  double torch2;       /* PyTorch 2's calls/s, median, or NAN */
  double sgemm;        /* GFLOP/s of nn__sgemm 1024 in windows between them, or NAN */
} pair;

/* Alternates windows of shoal, of torch and (when g is given) of sgemm, so that load
 * from other processes on the shared machine falls on all alike; the median of each. */
static pair timed_pair(void (*fn)(void *), void *ctx, torch_proc *tp, torch_proc *tp2,
                       const char *row, gemm *g) {
  fn(ctx); /* warm-up; the torch side warms up on its first request */
  double rs[64], rt[64], rg[64], r2[64];
  int k = g_repeats < 64 ? g_repeats : 64;
  for (int r = 0; r < k; r++) {
    rs[r] = window_rate(fn, ctx);
    rt[r] = tp ? torch_window(tp, row, g_window) : NAN;
    r2[r] = tp2 ? torch_window(tp2, row, g_window) : NAN;
    rg[r] = NAN;
#ifdef SHOAL_HAVE_OPENBLAS
    if (g) rg[r] = gemm_gflops(g, window_rate(gemm_step, g));
#endif
  }
  qsort(rs, (size_t)k, sizeof *rs, cmp_double);
  qsort(rt, (size_t)k, sizeof *rt, cmp_double);
  qsort(rg, (size_t)k, sizeof *rg, cmp_double);
  qsort(r2, (size_t)k, sizeof *r2, cmp_double);
  pair p = {rs[k / 2], rt[k / 2], r2[k / 2], rg[k / 2]};
  for (int r = 0; r < k; r++) {
    if (!isfinite(rt[r])) p.torch = NAN;
    if (!isfinite(r2[r])) p.torch2 = NAN;
    if (!isfinite(rg[r])) p.sgemm = NAN;
  }
  return p;
}

/* Kernel paths chosen by timing (nn/cpu/plan.c) against the fixed rules (convk.c, densek.c),
 * on the same row's step: a model that timed its paths and one built with the timing off,
 * their windows alternating; the median of each. Prints the paths each layer took. */
typedef struct plan_pair {
  double plan, rules;
  char kernels[1024];
} plan_pair;

/* A row's training step for plan_vs_rules: a DQN over make's net, or (make NULL) DCGAN. */
typedef struct trainer {
  dqn d;
  gan g;
  bool is_gan;
} trainer;

static void trainer_init(trainer *t, nn_model *(*make)(int), int B) {
  memset(t, 0, sizeof *t);
  t->is_gan = !make;
  if (t->is_gan)
    gan_init(&t->g, B);
  else
    dqn_init(&t->d, make, B);
}

static void trainer_step(void *ctx) {
  trainer *t = ctx;
  if (t->is_gan)
    gan_step(&t->g);
  else
    dqn_step(&t->d);
}

static void trainer_free(trainer *t) {
  if (t->is_gan)
    gan_free(&t->g);
  else
    dqn_free(&t->d);
}

/* The paths of the trainer's layers (DCGAN's two nets, each named: both have an "fc"). */
static void trainer_kernels(const trainer *t, char *buf, size_t n) {
  if (!t->is_gan) {
    nn_model_kernels(t->d.q, buf, n);
    return;
  }
  char g[512] = "", d[512] = "";
  nn_model_kernels(t->g.g, g, sizeof g);
  nn_model_kernels(t->g.d, d, sizeof d);
  snprintf(buf, n, "generator:\n%sdiscriminator:\n%s", g, d);
}

static plan_pair plan_vs_rules(nn_model *(*make)(int), int B) {
  plan_pair p = {NAN, NAN, ""};
  if (nn__plan_mode(-1) != 1) return p; /* SHOAL_NN_PLAN=rules or a path forced */
  trainer a, b;
  trainer_init(&a, make, B);
  trainer_step(&a); /* times the paths: the first step at this batch */
  trainer_kernels(&a, p.kernels, sizeof p.kernels);
  nn__plan_mode(0);
  trainer_init(&b, make, B);
  trainer_step(&a), trainer_step(&b);
  double ra[64], rb[64];
  int k = g_repeats < 64 ? g_repeats : 64;
  for (int r = 0; r < k; r++)
    ra[r] = window_rate(trainer_step, &a), rb[r] = window_rate(trainer_step, &b);
  nn__plan_mode(1);
  qsort(ra, (size_t)k, sizeof *ra, cmp_double);
  qsort(rb, (size_t)k, sizeof *rb, cmp_double);
  p.plan = ra[k / 2], p.rules = rb[k / 2];
  trainer_free(&a), trainer_free(&b);
  return p;
}

/* ---- output ------------------------------------------------------------------------------- */

static void row(const char *name, int threads, double shoal, double torch, double torch2,
                const char *unit) {
  printf("%-16s t%d %14.5g %14.5g %8.2f %14.5g %8.2f  %s\n", name, threads, shoal, torch,
         shoal / torch, torch2, shoal / torch2, unit);
}

typedef struct bench_line {
  char text[256];
} bench_line;

static bench_line g_lines[96];
static int g_nlines;

/* peer: NULL for PyTorch 1.13 (nn.<name>.t<T>), "torch2" for PyTorch 2. */
static void bench_peer(const char *name, const char *peer, int threads, double value,
                       const char *unit, double baseline) {
  if (g_nlines == 96) return;
  char b[32], r[32];
  if (isfinite(baseline) && baseline > 0) {
    snprintf(b, sizeof b, "%.5g", baseline);
    snprintf(r, sizeof r, "%.3f", value / baseline);
  } else {
    snprintf(b, sizeof b, "none");
    snprintf(r, sizeof r, "none");
  }
  snprintf(g_lines[g_nlines++].text, sizeof g_lines[0].text,
           "BENCH name=nn.%s.t%d%s%s value=%.5g unit=%s baseline=%s ratio=%s", name, threads,
           peer ? "." : "", peer ? peer : "", value, unit, b, r);
}

static void bench(const char *name, int threads, double value, const char *unit, double baseline) {
  bench_peer(name, NULL, threads, value, unit, baseline);
}

/* The row against PyTorch 1.13 and against PyTorch 2. */
static void bench2(const char *name, int threads, const pair *p, const char *unit) {
  bench(name, threads, p->shoal, unit, p->torch);
  bench_peer(name, "torch2", threads, p->shoal, unit, p->torch2);
}

/* The 1-minute load average, so a reader can tell a quiet run from a busy one. */
static double loadavg(void) {
  double l = NAN;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = NAN;
    fclose(f);
  }
  return l;
}

static bool has_row(const char *rows, const char *r) {
  char buf[256];
  snprintf(buf, sizeof buf, ",%s,", rows);
  char key[64];
  snprintf(key, sizeof key, ",%s,", r);
  return strstr(buf, key) != NULL;
}

int main(int argc, char **argv) {
  const char *threads_arg = "1,2", *rows = "mlp,minatar,nature,impala,dcgan,act,plan";
  bool with_torch = true, with_torch2 = true;
  signal(SIGPIPE, SIG_IGN); /* a dead torch process is reported, not fatal */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads_arg = argv[++i];
    else if (!strcmp(argv[i], "--window") && i + 1 < argc)
      g_window = atof(argv[++i]);
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
      g_repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
      rows = argv[++i];
    else if (!strcmp(argv[i], "--no-torch"))
      with_torch = false;
    else if (!strcmp(argv[i], "--no-torch2"))
      with_torch2 = false;
    else {
      fprintf(stderr,
              "usage: nn_cpu [--threads 1,2] [--window s] [--repeats n] [--rows "
              "mlp,minatar,nature,impala,dcgan,act,plan] [--no-torch] [--no-torch2]\n");
      return 2;
    }
  }
  if (!(g_window > 0) || g_repeats < 1) {
    fprintf(stderr, "nn_cpu: --window must be > 0 and --repeats >= 1\n");
    return 2;
  }
  printf(
      "nn_cpu: shoal nn vs PyTorch (same run), median of %d windows of %.2f s; load average "
      "%.2f\n",
      g_repeats, g_window, loadavg());
  char py2buf[1024], v1[64] = "-", v2[64] = "-";
  const char *py2 = with_torch2 ? torch2_python(py2buf, sizeof py2buf) : NULL;
  if (with_torch) {
    const char *py1 = getenv("SHOAL_PYTHON");
    torch_version(py1 && *py1 ? py1 : "/usr/bin/python3", v1, sizeof v1);
  }
  if (py2) torch_version(py2, v2, sizeof v2);
  printf("pytorch: %s; torch2: %s (%s)\n", v1, v2,
         py2           ? py2
         : with_torch2 ? "no peers venv: make peers"
                       : "--no-torch2");
  printf("%-16s %2s %14s %14s %8s %14s %8s  %s\n", "row", "th", "shoal", "pytorch", "ratio",
         "torch2", "ratio2", "unit");

  char tbuf[64];
  snprintf(tbuf, sizeof tbuf, "%s", threads_arg);
  for (char *save = NULL, *tok = strtok_r(tbuf, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    int th = atoi(tok);
    if (th < 1) continue;
    nn_set_threads(th);
    torch_proc tproc, *tp = NULL;
    if (with_torch && torch_start(&tproc, "nn_cpu", "nn_cpu_torch.py", "--serve", th)) tp = &tproc;
    torch_proc tproc2, *tp2 = NULL;
    if (py2 && torch_start_with(&tproc2, "nn_cpu", py2, "nn_cpu_torch.py", "--serve", th))
      tp2 = &tproc2;
    gemm *gp = NULL;
#ifdef SHOAL_HAVE_OPENBLAS
    gemm gm;
    if (has_row(rows, "minatar") || has_row(rows, "nature") || has_row(rows, "impala") ||
        has_row(rows, "dcgan")) {
      gemm_init(&gm);
      gp = &gm;
    }
#endif
    pair mlp = {NAN, NAN, NAN, NAN}, minatar = mlp, nature = mlp, impala = mlp, dcgan = mlp,
         act[3] = {mlp, mlp, mlp};
    double minatar_flops = 0, nature_flops = 0, impala_flops = 0, dcgan_flops = 0;
    if (has_row(rows, "mlp")) {
      dqn d;
      dqn_init(&d, make_mlp, 256);
      mlp = timed_pair(dqn_step, &d, tp, tp2, "mlp_train", NULL);
      dqn_free(&d);
    }
    if (has_row(rows, "minatar")) {
      dqn d;
      dqn_init(&d, make_minatar, 32);
      minatar = timed_pair(dqn_step, &d, tp, tp2, "minatar_train", gp);
      /* The products a step needs, counted exactly: as Nature-DQN's, less the input
       * gradient of the first conv, which nothing computes (16x8x8 outputs, 4x3x3 taps) */
      minatar_flops = 32.0 * (4.0 * nn_model_flops_per_sample(d.q) - 2.0 * 16 * 64 * 36);
      dqn_free(&d);
    }
    if (has_row(rows, "nature")) {
      dqn d;
      dqn_init(&d, make_nature, 32);
      nature = timed_pair(dqn_step, &d, tp, tp2, "nature_train", gp);
      /* trained q: forward + backward = 3x forward; target: forward only */
      nature_flops = 32.0 * 4.0 * nn_model_flops_per_sample(d.q);
      dqn_free(&d);
    }
    if (has_row(rows, "impala")) {
      dqn d;
      dqn_init(&d, make_impala, 32);
      impala = timed_pair(dqn_step, &d, tp, tp2, "impala_train", gp);
      impala_flops = 32.0 * 4.0 * nn_model_flops_per_sample(d.q);
      dqn_free(&d);
    }
    if (has_row(rows, "dcgan")) {
      gan t;
      gan_init(&t, 64);
      dcgan = timed_pair(gan_step, &t, tp, tp2, "dcgan_train", gp);
      /* G: forward + backward (3x); D: three forwards and three backwards (9x) */
      dcgan_flops =
          64.0 * (3.0 * nn_model_flops_per_sample(t.g) + 9.0 * nn_model_flops_per_sample(t.d));
      gan_free(&t);
    }
    if (has_row(rows, "act")) {
      int bs[3] = {1, 16, 256};
      const char *tnames[3] = {"act_b1", "act_b16", "act_b256"};
      for (int k = 0; k < 3; k++) {
        actor a = {make_mlp(bs[k]), bs[k], NULL, NULL};
        nn_model_set_training(a.q, false);
        a.x = malloc((size_t)bs[k] * 4 * sizeof(float));
        a.act = malloc((size_t)bs[k] * sizeof(int));
        if (!a.x || !a.act) die("alloc", NULL);
        shoal_rng r;
        shoal_rng_seed(&r, 3);
        fill_normal(a.x, (size_t)bs[k] * 4, &r);
        act[k] = timed_pair(act_step, &a, tp, tp2, tnames[k], NULL);
        act[k].shoal *= bs[k], act[k].torch *= bs[k], act[k].torch2 *= bs[k]; /* samples/s */
        free(a.x), free(a.act);
        nn_model_destroy(a.q);
      }
    }
    enum { NPLAN = 5 };
    plan_pair plans[NPLAN];
    for (int k = 0; k < NPLAN; k++) plans[k] = (plan_pair){NAN, NAN, ""};
    static const char *plan_rows[NPLAN] = {"mlp", "minatar", "nature", "impala", "dcgan"};
    static const char *plan_unit[NPLAN] = {"steps/s", "steps/s", "steps/s", "steps/s", "it/s"};
    static const int plan_b[NPLAN] = {256, 32, 32, 32, 64}; /* as the rows' own steps */
    nn_model *(*plan_make[NPLAN])(int) = {make_mlp, make_minatar, make_nature, make_impala,
                                          NULL}; /* NULL: DCGAN (trainer_init) */
    for (int k = 0; k < NPLAN && has_row(rows, "plan"); k++)
      if (has_row(rows, plan_rows[k])) plans[k] = plan_vs_rules(plan_make[k], plan_b[k]);
    if (tp) torch_stop(tp);
    if (tp2) torch_stop(tp2);
#ifdef SHOAL_HAVE_OPENBLAS
    if (gp) gemm_free(gp);
#endif

    if (has_row(rows, "mlp")) {
      row("mlp_train", th, mlp.shoal, mlp.torch, mlp.torch2, "steps/s");
      bench2("mlp_train", th, &mlp, "steps/s");
    }
    if (has_row(rows, "minatar")) {
      row("minatar_train", th, minatar.shoal, minatar.torch, minatar.torch2, "steps/s");
      bench2("minatar_train", th, &minatar, "steps/s");
      /* The ceiling: every product at sgemm 1024's rate and nothing else (Adam, the loss,
       * the activations) taking any time; its ratio to PyTorch bounds what any kernel can
       * reach on this machine. */
      double ceil = minatar.sgemm * 1e9 / minatar_flops;
      printf("%-16s t%d %14.5g %14.5g %8.2f %14.5g %8.2f  %s\n", "  ceiling", th, ceil,
             minatar.torch, ceil / minatar.torch, minatar.torch2, ceil / minatar.torch2,
             "steps/s, every product at the sgemm 1024 rate, nothing else");
      printf("%-16s t%d %14.5g %14s %8.2f  of the ceiling\n", "  shoal", th, minatar.shoal, "",
             minatar.shoal / ceil);
      bench("minatar_train.ceiling", th, ceil, "steps/s", minatar.torch);
    }
    if (has_row(rows, "nature")) {
      row("nature_train", th, nature.shoal, nature.torch, nature.torch2, "steps/s");
      bench2("nature_train", th, &nature, "steps/s");
      double gs = nature.shoal * nature_flops / 1e9, gt = nature.torch * nature_flops / 1e9;
      row("  GFLOP/s", th, gs, gt, nature.torch2 * nature_flops / 1e9, "GFLOP/s");
      printf("%-16s t%d %14.5g %14s %8.2f  GFLOP/s, shoal / sgemm 1024\n", "  sgemm", th,
             nature.sgemm, "", gs / nature.sgemm);
      bench("nature_train.gflops", th, gs, "GFLOP/s", nature.sgemm);
    }
    if (has_row(rows, "impala")) {
      row("impala_train", th, impala.shoal, impala.torch, impala.torch2, "steps/s");
      bench2("impala_train", th, &impala, "steps/s");
      double gs = impala.shoal * impala_flops / 1e9;
      row("  GFLOP/s", th, gs, impala.torch * impala_flops / 1e9,
          impala.torch2 * impala_flops / 1e9, "GFLOP/s");
      bench("impala_train.gflops", th, gs, "GFLOP/s", impala.sgemm);
    }
    if (has_row(rows, "dcgan")) {
      row("dcgan_train", th, dcgan.shoal, dcgan.torch, dcgan.torch2, "it/s");
      bench2("dcgan_train", th, &dcgan, "it/s");
      double gs = dcgan.shoal * dcgan_flops / 1e9, gt = dcgan.torch * dcgan_flops / 1e9;
      row("  GFLOP/s", th, gs, gt, dcgan.torch2 * dcgan_flops / 1e9, "GFLOP/s");
      printf("%-16s t%d %14.5g %14s %8.2f  GFLOP/s, shoal / sgemm 1024\n", "  sgemm", th,
             dcgan.sgemm, "", gs / dcgan.sgemm);
      bench("dcgan_train.gflops", th, gs, "GFLOP/s", dcgan.sgemm);
    }
    if (has_row(rows, "act")) {
      const char *names[3] = {"act_b1", "act_b16", "act_b256"};
      for (int k = 0; k < 3; k++) {
        row(names[k], th, act[k].shoal, act[k].torch, act[k].torch2, "samples/s");
        bench2(names[k], th, &act[k], "samples/s");
      }
    }
    for (int k = 0; k < NPLAN; k++) {
      if (!isfinite(plans[k].plan)) continue;
      char name[48];
      snprintf(name, sizeof name, "%s_plan", plan_rows[k]);
      printf("%-16s t%d %14.5g %14.5g %8.2f  %s, paths timed / the fixed rules\n", name, th,
             plans[k].plan, plans[k].rules, plans[k].plan / plans[k].rules, plan_unit[k]);
      for (char *ks = NULL, *l = strtok_r(plans[k].kernels, "\n", &ks); l;
           l = strtok_r(NULL, "\n", &ks))
        printf("%-16s    %s\n", "", l);
      snprintf(name, sizeof name, "%s_train.plan", plan_rows[k]);
      bench(name, th, plans[k].plan, plan_unit[k], plans[k].rules);
    }
    double sg = isfinite(nature.sgemm)  ? nature.sgemm
                : isfinite(dcgan.sgemm) ? dcgan.sgemm
                                        : minatar.sgemm;
    if (isfinite(sg)) bench("sgemm1024", th, sg, "GFLOP/s", NAN);
    fflush(stdout);
  }
  printf(
      "load average at the end: %.2f (the machine is shared: above ~0.5, read the figures "
      "as noisy)\n\n",
      loadavg());
  for (int i = 0; i < g_nlines; i++) printf("%s\n", g_lines[i].text);
  return 0;
}
