/* SPDX-License-Identifier: Apache-2.0 */
/* env_sps: environment steps per second on one core, for every built-in env: a single env
 * (env_step, resets included) and the vector env at B = 1, 16, 256 (one thread). Rates
 * are per second of this process's CPU time (steps/s per core), so that other work on a
 * shared machine does not count against them; the wall-clock rate is printed too.
 * Gymnasium's single-process figures measured once on this kind of machine
 * (docs/benchmarks.md, reference figures: CartPole-v1 88,200 and Pendulum-v1 29,000 steps/s,
 * env.step only) are printed beside as the baseline; benchmarks/peers/env_peers.py measures
 * Gymnasium, EnvPool and PufferLib beside shoal in one run (the peers' venv, make peers).
 * Random actions, drawn up front. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "envs/envs.h"

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall_rate_sum, cpu_rate_sum; /* for the wall/cpu ratio printed at the end */

#define NACT 64 /* action batches cycled through */

static double budget_s = 0.25; /* seconds per measurement */

static double baseline_of(const char *id) {
  if (strcmp(id, "CartPole-v1") == 0) return 88200;
  if (strcmp(id, "Pendulum-v1") == 0) return 29000;
  return 0;
}

static void fill_actions(const env_spec *sp, void *buf, size_t n, shoal_rng *rng) {
  if (sp->act.n > 0) {
    int32_t *a = buf;
    for (size_t i = 0; i < n; i++) a[i] = (int32_t)shoal_rng_below(rng, (uint64_t)sp->act.n);
  } else {
    float *a = buf;
    for (size_t i = 0; i < n * (size_t)sp->act.size; i++) {
      int j = (int)(i % (size_t)sp->act.size);
      float lo = sp->act.low[j], hi = sp->act.high[j];
      a[i] = lo + (hi - lo) * shoal_rng_uniformf(rng);
    }
  }
}

static double bench_raw(const char *id) {
  env *e;
  shoal_error err = {0};
  if (env_make(&e, id, &err)) {
    fprintf(stderr, "env_sps: %s\n", err.msg);
    exit(1);
  }
  const env_spec *sp = env_get_spec(e);
  size_t ab = env_space_bytes(&sp->act);
  char *acts = malloc(ab * 4096);
  uint8_t *obs = malloc(env_space_bytes(&sp->obs));
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  fill_actions(sp, acts, 4096, &rng);
  env_seed(e, 1);
  env_reset(e, obs);
  long steps = 0;
  double t0 = cpu_s(), w0 = shoal_now_s(), t;
  do {
    for (int k = 0; k < 4096; k++) {
      env_result r;
      env_step(e, acts + (size_t)k * ab, obs, &r, NULL);
      if (r.terminated || r.truncated) env_reset(e, obs);
    }
    steps += 4096;
    t = cpu_s() - t0;
  } while (t < budget_s);
  wall_rate_sum += steps / (shoal_now_s() - w0);
  cpu_rate_sum += steps / t;
  free(acts);
  free(obs);
  env_destroy(e);
  return steps / t;
}

/* A vector env with its random actions and outputs, stepped in windows. */
typedef struct vec_run {
  env_vec *v;
  char *acts;
  size_t ab;
  void *obs, *fin;
  float *rew;
  uint8_t *term, *trunc;
  int B;
  long k;
} vec_run;

static void vec_run_open(vec_run *r, const char *id, int B, int threads) {
  memset(r, 0, sizeof *r);
  shoal_error err = {0};
  env_vec_config vc = {.threads = threads};
  if (env_vec_create(&r->v, id, B, &vc, &err)) {
    fprintf(stderr, "env_sps: %s\n", err.msg);
    exit(1);
  }
  const env_spec *sp = env_vec_spec(r->v);
  r->B = B;
  r->ab = env_space_bytes(&sp->act) * (size_t)B;
  size_t ob = env_space_bytes(&sp->obs) * (size_t)B;
  r->acts = malloc(r->ab * NACT);
  r->obs = malloc(ob), r->fin = malloc(ob);
  r->rew = malloc(sizeof(float) * (size_t)B);
  r->term = malloc((size_t)B), r->trunc = malloc((size_t)B);
  if (!r->acts || !r->obs || !r->fin || !r->rew || !r->term || !r->trunc) {
    fprintf(stderr, "env_sps: out of memory\n");
    exit(1);
  }
  shoal_rng rng;
  shoal_rng_seed(&rng, 2);
  fill_actions(sp, r->acts, (size_t)B * NACT, &rng);
  env_vec_reset(r->v, 1, r->obs, NULL);
}

/* n steps, cycling through the action batches. */
static void vec_run_steps(vec_run *r, int n) {
  shoal_error err = {0};
  env_vec_out out = {r->obs, r->rew, r->term, r->trunc, r->fin};
  for (int i = 0; i < n; i++, r->k++)
    if (env_vec_step(r->v, r->acts + (size_t)(r->k % NACT) * r->ab, &out, &err)) {
      fprintf(stderr, "env_sps: %s\n", err.msg);
      exit(1);
    }
}

/* Steps for about secs of wall clock; the rate in steps/s. */
static double vec_run_window(vec_run *r, double secs) {
  int iters = r->B >= 256 ? 4 : r->B >= 16 ? 64 : 1024;
  long steps = 0;
  double w0 = shoal_now_s(), w;
  do {
    vec_run_steps(r, iters);
    steps += (long)iters * r->B;
    w = shoal_now_s() - w0;
  } while (w < secs);
  return steps / w;
}

static void vec_run_close(vec_run *r) {
  env_vec_destroy(r->v);
  free(r->acts), free(r->obs), free(r->fin), free(r->rew), free(r->term), free(r->trunc);
}

/* Steps/s per CPU-second of B copies on one thread. */
static double bench_vec(const char *id, int B) {
  vec_run r;
  vec_run_open(&r, id, B, 1);
  int iters = B >= 256 ? 16 : B >= 16 ? 256 : 4096;
  long steps = 0;
  double t0 = cpu_s(), w0 = shoal_now_s(), t;
  do {
    vec_run_steps(&r, iters);
    steps += (long)iters * B;
    t = cpu_s() - t0;
  } while (t < budget_s);
  wall_rate_sum += steps / (shoal_now_s() - w0);
  cpu_rate_sum += steps / t;
  vec_run_close(&r);
  return steps / t;
}

static int cmp_ratio(const void *a, const void *b) {
  double x = ((const double *)a)[0], y = ((const double *)b)[0];
  return (x > y) - (x < y);
}

/* Two threads against one, wall clock, in one run: the vector env takes its workers only
 * where they pay, so the ratio should not fall below 1 (noise aside) and should approach
 * 2 where the copies' work is large. The two vector envs are made once and step in
 * alternating windows of 50 ms, 15 rounds, the order swapped every round; the figure is
 * the round whose ratio is the median, with the lowest and highest round's ratio. On these
 * shared VMs a core's speed changes for seconds at a time: a pair of adjacent windows
 * sees the same machine, where one long window of each (as before) set a slow spell of
 * one against a fast one of the other. */
static void bench_threads(const char *const *ids, int n) {
  static const int TB[] = {16, 256, 4096};
  enum { ROUNDS = 15 };
  const double win = 0.05;
  printf(
      "\nthreads: wall-clock steps/s, 2 threads against 1 (windows of %.0f ms alternating, %d "
      "rounds: the median round, and the range of the rounds' ratios)\n",
      win * 1e3, ROUNDS);
  printf("%-26s %6s %12s %12s %7s %13s %8s\n", "env", "B", "1 thread", "2 threads", "ratio",
         "rounds", "workers");
  char lines[64][200];
  int nl = 0;
  for (int i = 0; i < n; i++)
    for (size_t b = 0; b < sizeof TB / sizeof TB[0]; b++) {
      vec_run r1, r2;
      vec_run_open(&r1, ids[i], TB[b], 1);
      vec_run_open(&r2, ids[i], TB[b], 2);
      vec_run_window(&r1, win), vec_run_window(&r2, win); /* warm-up, the rule's too */
      double rd[ROUNDS][3];                               /* ratio, one, two */
      for (int k = 0; k < ROUNDS; k++) {
        double one, two;
        if (k & 1) {
          two = vec_run_window(&r2, win), one = vec_run_window(&r1, win);
        } else {
          one = vec_run_window(&r1, win), two = vec_run_window(&r2, win);
        }
        rd[k][0] = two / one, rd[k][1] = one, rd[k][2] = two;
      }
      qsort(rd, ROUNDS, sizeof rd[0], cmp_ratio);
      const double *m = rd[ROUNDS / 2];
      double share = env_vec_parallel_share(r2.v);
      vec_run_close(&r1), vec_run_close(&r2);
      char range[32];
      snprintf(range, sizeof range, "%.2f-%.2f", rd[0][0], rd[ROUNDS - 1][0]);
      printf("%-26s %6d %12.0f %12.0f %7.2f %13s %7.0f%%\n", ids[i], TB[b], m[1], m[2], m[0], range,
             100 * share);
      fflush(stdout);
      if (nl < 64)
        snprintf(lines[nl++], sizeof lines[0],
                 "BENCH name=env_threads.%s.b%d value=%.0f unit=steps/s baseline=%.0f "
                 "ratio=%.2f",
                 ids[i], TB[b], m[2], m[1], m[0]);
    }
  for (int k = 0; k < nl; k++) printf("%s\n", lines[k]);
}

static void bench_line(const char *id, const char *suffix, double sps) {
  double base = baseline_of(id);
  if (base > 0)
    printf("BENCH name=env.%s.%s value=%.0f unit=steps/s baseline=%.0f ratio=%.1f\n", id, suffix,
           sps, base, sps / base);
  else
    printf("BENCH name=env.%s.%s value=%.0f unit=steps/s baseline=none ratio=none\n", id, suffix,
           sps);
}

int main(int argc, char **argv) {
  if (argc > 1) budget_s = atof(argv[1]);
  if (argc > 2 && !strcmp(argv[2], "threads")) { /* the threads table alone */
    static const char *tids[] = {"CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MinAtar/Breakout-v1"};
    bench_threads(tids, 4);
    return 0;
  }
  static const char *ids[] = {"CartPole-v1",
                              "MountainCar-v0",
                              "MountainCarContinuous-v0",
                              "Acrobot-v1",
                              "Pendulum-v1",
                              "MinAtar/Breakout-v1",
                              "MinAtar/Freeway-v1",
                              "MinAtar/Asterix-v1",
                              "MinAtar/Seaquest-v1",
                              "MinAtar/SpaceInvaders-v1"};
  const int n = (int)(sizeof ids / sizeof ids[0]);
  static const int Bs[3] = {1, 16, 256};
  double res[10][4];
  printf(
      "env_sps: steps per CPU-second on one core (%.2f s per figure; the machine is shared,\n"
      "read +-20%%)\n\n",
      budget_s);
  printf("%-26s %12s %12s %12s %12s %10s %9s\n", "env", "raw", "B=1", "B=16", "B=256", "Gymnasium",
         "x(B=256)");
  for (int i = 0; i < n; i++) {
    res[i][0] = bench_raw(ids[i]);
    for (int b = 0; b < 3; b++) res[i][b + 1] = bench_vec(ids[i], Bs[b]);
    double base = baseline_of(ids[i]);
    char bs[32] = "-", rs[32] = "-";
    if (base > 0) {
      snprintf(bs, sizeof bs, "%.0f", base);
      snprintf(rs, sizeof rs, "%.0f", res[i][3] / base);
    }
    printf("%-26s %12.0f %12.0f %12.0f %12.0f %10s %9s\n", ids[i], res[i][0], res[i][1], res[i][2],
           res[i][3], bs, rs);
    fflush(stdout);
  }
  printf("\nwall-clock rates were %.0f%% of the CPU-time rates (less: other load here)\n\n",
         100.0 * wall_rate_sum / cpu_rate_sum);
  if (!getenv("SHOAL_ENV_SPS_NO_THREADS")) bench_threads(ids, n);
  for (int i = 0; i < n; i++) {
    bench_line(ids[i], "raw", res[i][0]);
    for (int b = 0; b < 3; b++) {
      char sfx[16];
      snprintf(sfx, sizeof sfx, "b%d", Bs[b]);
      bench_line(ids[i], sfx, res[i][b + 1]);
    }
  }
  return 0;
}
