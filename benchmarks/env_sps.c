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

/* Steps/s per CPU-second of B copies on `threads` threads; *wall_sps the wall-clock rate
 * and *share the share of steps its workers took (env_vec_parallel_share). */
static double bench_vec_t(const char *id, int B, int threads, double *wall_sps, double *share) {
  env_vec *v;
  shoal_error err = {0};
  env_vec_config vc = {.threads = threads};
  if (env_vec_create(&v, id, B, &vc, &err)) {
    fprintf(stderr, "env_sps: %s\n", err.msg);
    exit(1);
  }
  const env_spec *sp = env_vec_spec(v);
  size_t ab = env_space_bytes(&sp->act) * (size_t)B, ob = env_space_bytes(&sp->obs) * (size_t)B;
  char *acts = malloc(ab * NACT);
  void *obs = malloc(ob), *fin = malloc(ob);
  float *rew = malloc(sizeof(float) * (size_t)B);
  uint8_t *term = malloc((size_t)B), *trunc = malloc((size_t)B);
  shoal_rng rng;
  shoal_rng_seed(&rng, 2);
  fill_actions(sp, acts, (size_t)B * NACT, &rng);
  env_vec_reset(v, 1, obs, NULL);
  env_vec_out out = {obs, rew, term, trunc, fin};
  int iters = B >= 256 ? 16 : B >= 16 ? 256 : 4096;
  long steps = 0;
  double t0 = cpu_s(), w0 = shoal_now_s(), t;
  do {
    for (int k = 0; k < iters; k++) {
      if (env_vec_step(v, acts + (size_t)(k % NACT) * ab, &out, &err)) {
        fprintf(stderr, "env_sps: %s\n", err.msg);
        exit(1);
      }
    }
    steps += (long)iters * B;
    t = cpu_s() - t0;
  } while (t < budget_s);
  double wall = steps / (shoal_now_s() - w0);
  if (wall_sps) *wall_sps = wall;
  if (share) *share = env_vec_parallel_share(v);
  if (threads <= 1) {
    wall_rate_sum += wall;
    cpu_rate_sum += steps / t;
  }
  free(acts);
  free(obs);
  free(fin);
  free(rew);
  free(term);
  free(trunc);
  env_vec_destroy(v);
  return steps / t;
}

static double bench_vec(const char *id, int B) { return bench_vec_t(id, B, 1, NULL, NULL); }

/* Two threads against one, wall clock, in one run: the vector env takes its workers only
 * where they pay, so the ratio should not fall below 1 (noise aside) and should approach
 * 2 where the copies' work is large. */
static void bench_threads(const char *const *ids, int n) {
  static const int TB[] = {16, 256, 4096};
  printf("\nthreads: wall-clock steps/s, 2 threads against 1 (the best of 3 alternations)\n");
  printf("%-26s %6s %12s %12s %7s %8s\n", "env", "B", "1 thread", "2 threads", "ratio", "workers");
  char lines[64][200];
  int nl = 0;
  for (int i = 0; i < n; i++)
    for (size_t b = 0; b < sizeof TB / sizeof TB[0]; b++) {
      double one = 0, two = 0, share = 0;
      for (int rep = 0; rep < 3; rep++) {
        double w1, w2, sh;
        bench_vec_t(ids[i], TB[b], 1, &w1, NULL);
        bench_vec_t(ids[i], TB[b], 2, &w2, &sh);
        if (w1 > one) one = w1;
        if (w2 > two) two = w2, share = sh;
      }
      printf("%-26s %6d %12.0f %12.0f %7.2f %7.0f%%\n", ids[i], TB[b], one, two, two / one,
             100 * share);
      fflush(stdout);
      if (nl < 64)
        snprintf(lines[nl++], sizeof lines[0],
                 "BENCH name=env_threads.%s.b%d value=%.0f unit=steps/s baseline=%.0f "
                 "ratio=%.2f",
                 ids[i], TB[b], two, one, two / one);
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
