/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the gym: bridge costs. Env steps/s of gym:CartPole-v1 and gym:LunarLander-v3
 * stepped through shoal's vector env (env_vec_step with the checks an actor gets: actions,
 * NaN rewards, observation bounds, episode log) against the same Gymnasium envs stepped
 * by plain Python: gymnasium.make_vec(id, B, vectorization_mode="sync") with random
 * actions from action_space.sample(), in the venv the bridge uses, in the same run.
 * Both sides alternate three times and the best of each is kept. ratio = shoal / Python
 * (> 1: the bridge is cheaper than Gymnasium's own vector loop; goal >= 0.9).
 *   bench_gym_bridge [--seconds S]   (S per measurement, default 2)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/shoal.h"
#include "envs/envs.h"

#ifndef SHOAL_DEFAULT_PYTHON
#define SHOAL_DEFAULT_PYTHON ""
#endif

static double shoal_sps(const char *id, int B, double secs) {
  shoal_error err = {0};
  env_vec *v;
  if (env_vec_create(&v, id, B, NULL, &err)) {
    fprintf(stderr, "bench_gym_bridge: %s\n", err.msg);
    exit(1);
  }
  const env_spec *sp = env_vec_spec(v);
  size_t ob = env_space_bytes(&sp->obs);
  char *obs = malloc(ob * (size_t)B), *fin = malloc(ob * (size_t)B);
  float *rew = malloc(sizeof(float) * (size_t)B);
  uint8_t *te = malloc((size_t)B), *tr = malloc((size_t)B);
  int32_t *a = malloc(sizeof(int32_t) * (size_t)B);
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  if (env_vec_reset(v, 1, obs, &err)) exit(1);
  env_vec_out out = {obs, rew, te, tr, fin};
  long steps = 0;
  double t0 = shoal_now_s(), t;
  do {
    for (int k = 0; k < 64; k++) {
      for (int i = 0; i < B; i++) a[i] = (int32_t)shoal_rng_below(&rng, (uint64_t)sp->act.n);
      if (env_vec_step(v, a, &out, &err)) {
        fprintf(stderr, "bench_gym_bridge: %s\n", err.msg);
        exit(1);
      }
    }
    steps += 64L * B;
  } while ((t = shoal_now_s() - t0) < secs);
  env_vec_destroy(v);
  free(obs), free(fin), free(rew), free(te), free(tr), free(a);
  return steps / t;
}

static double python_sps(const char *id, int B, double secs) {
  const char *py = getenv("SHOAL_ENV_PYTHON");
  if (!py || !py[0]) py = SHOAL_DEFAULT_PYTHON;
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "%s -c 'import time, gymnasium as g\n"
           "e = g.make_vec(\"%s\", num_envs=%d, vectorization_mode=\"sync\")\n"
           "e.reset(seed=1); e.action_space.seed(1); n = 0; t0 = time.perf_counter()\n"
           "while True:\n"
           "    for _ in range(64): e.step(e.action_space.sample())\n"
           "    n += 64 * %d; t = time.perf_counter() - t0\n"
           "    if t >= %g: break\n"
           "print(n / t)'",
           py, id + 4, B, B, secs);
  FILE *f = popen(cmd, "r");
  double sps = 0;
  if (!f || fscanf(f, "%lf", &sps) != 1) {
    fprintf(stderr, "bench_gym_bridge: the Python baseline failed (%s)\n", py);
    exit(1);
  }
  pclose(f);
  return sps;
}

int main(int argc, char **argv) {
  double secs = 2.0;
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--seconds")) secs = atof(argv[++i]);
  const char *ids[] = {"gym:CartPole-v1", "gym:LunarLander-v3"};
  const int Bs[] = {8, 8};
  printf("gym: bridge cost: env steps/s, best of 3 alternations of %.0f s, one thread\n", secs);
  printf("%-22s %4s %14s %14s %7s\n", "env", "B", "shoal bridge", "Python sync", "ratio");
  for (int k = 0; k < 2; k++) {
    double s = 0, p = 0;
    for (int rep = 0; rep < 3; rep++) {
      double a = shoal_sps(ids[k], Bs[k], secs), b = python_sps(ids[k], Bs[k], secs);
      if (a > s) s = a;
      if (b > p) p = b;
    }
    printf("%-22s %4d %14.0f %14.0f %7.2f\n", ids[k], Bs[k], s, p, s / p);
    printf("BENCH name=gym_bridge_%s_b%d value=%.0f unit=steps/s baseline=%.0f ratio=%.3f\n",
           ids[k] + 4, Bs[k], s, p, s / p);
  }
  return 0;
}
