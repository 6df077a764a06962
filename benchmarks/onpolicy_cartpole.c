/* SPDX-License-Identifier: Apache-2.0 */
/* benchmarks/onpolicy_cartpole.c — How fast does shoal's synchronous PPO train
 * CartPole-v1 against CleanRL's ppo.py on PyTorch 1.13, same settings, same machine?
 *
 * Both run CleanRL's ppo.py defaults (configs/cartpole-ppo.yaml; the baseline is
 * benchmarks/onpolicy_cleanrl_torch.py through $SHOAL_PYTHON, NumPy CartPole from
 * Gymnasium's equations) for the same env steps on one thread, without evaluations.
 * Reported: env steps per second of the whole loop (acting, env, GAE, 4 epochs of
 * updates) and the mean training return of the last 100 episodes at the end, for
 * SEEDS seeds. Arguments: [STEPS (102400)] [SEEDS (2)]. */
#define _POSIX_C_SOURCE 200809L /* popen */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/onpolicy_train.h"
#include "nn/nn.h"

static int shoal_run(const char *src, long steps, int seed, double *sec, double *r100,
                     long *first) {
  shoal_error err = {0};
  int n;
  const cfg_key *schema = onpolicy_schema(&n);
  config *c = config_create(schema, n, &err);
  char path[1024];
  snprintf(path, sizeof path, "%s/configs/cartpole-ppo.yaml", src);
  onpolicy_train_config tc;
  onpolicy_train_result res;
  int rc = c ? config_load_file(c, path, &err) : -1;
  if (!rc) rc = onpolicy_train_from_config(c, &tc, &err);
  if (!rc) {
    tc.max_env_steps = steps;
    tc.seed = (uint64_t)seed;
    tc.solve_return = NAN;
    tc.report_return = 475;
    tc.eval_every_steps = (int64_t)1 << 60;
    tc.eval_episodes = 10;
    rc = onpolicy_train_sync(&tc, &res, &err);
  }
  config_destroy(c);
  if (rc) {
    fprintf(stderr, "onpolicy_cartpole: %s\n", err.msg);
    return rc;
  }
  /* seconds include one closing evaluation of 10 episodes (at most 5,000 steps). */
  *sec = res.seconds;
  *r100 = res.train_return100;
  *first = (long)res.report_steps;
  return 0;
}

static int torch_run(const char *src, long steps, int seed, double *sec, double *r100,
                     long *first) {
  const char *py = getenv("SHOAL_PYTHON");
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s %s/benchmarks/onpolicy_cleanrl_torch.py %ld %d",
           py && *py ? py : "/usr/bin/python3", src, steps, seed);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  long st = 0;
  int got = fscanf(f, "steps=%ld seconds=%lf return100=%lf first475=%ld", &st, sec, r100, first);
  int rc = pclose(f);
  return got == 4 && rc == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  long steps = argc > 1 ? atol(argv[1]) : 102400;
  int seeds = argc > 2 ? atoi(argv[2]) : 2;
  const char *src = getenv("SHOAL_SOURCE_DIR");
  if (!src) src = ".";
  nn_set_threads(1);
  printf("PPO CartPole-v1, CleanRL ppo.py settings, %ld env steps per run, 1 thread\n", steps);
  printf("%-6s %-8s %10s %12s %12s %14s\n", "seed", "impl", "seconds", "steps/s", "return100",
         "first r100>=475");
  double s_sps = 0, t_sps = 0, s_ret = 0, t_ret = 0;
  int ok = 0;
  for (int seed = 1; seed <= seeds; seed++) {
    double ss, sr, ts, tr;
    long sf, tf;
    if (shoal_run(src, steps, seed, &ss, &sr, &sf)) return 1;
    printf("%-6d %-8s %10.2f %12.0f %12.1f %14ld\n", seed, "shoal", ss, steps / ss, sr, sf);
    if (torch_run(src, steps, seed, &ts, &tr, &tf)) {
      printf("%-6d %-8s (the PyTorch baseline failed to run)\n", seed, "torch");
      continue;
    }
    printf("%-6d %-8s %10.2f %12.0f %12.1f %14ld\n", seed, "torch", ts, steps / ts, tr, tf);
    s_sps += steps / ss;
    t_sps += steps / ts;
    s_ret += sr;
    t_ret += tr;
    ok++;
  }
  if (!ok) {
    printf("BENCH name=ppo_cartpole_sps value=%.0f unit=steps/s baseline=none ratio=none\n", s_sps);
    return 0;
  }
  s_sps /= ok;
  t_sps /= ok;
  printf("BENCH name=ppo_cartpole_sps value=%.0f unit=steps/s baseline=%.0f ratio=%.2f\n", s_sps,
         t_sps, s_sps / t_sps);
  printf("BENCH name=ppo_cartpole_return100 value=%.1f unit=return baseline=%.1f ratio=%.2f\n",
         s_ret / ok, t_ret / ok, (s_ret / ok) / (t_ret / ok));
  return 0;
}
