/* SPDX-License-Identifier: Apache-2.0 */
/* benchmarks/onpolicy_dist — IMPALA on the distributed runtime against the synchronous
 * trainer, both measured in this run on the same config (configs/cartpole-impala.yaml):
 *
 *   onpolicy_dist [--seeds N] [--seconds S] [--actors A]
 *
 * Rows:
 *   onpolicy_dist.impala.sps       env steps/s the learner trains on: median over the
 *                                  progress lines of `shoal run` (updates/s x T x B) with
 *                                  A actors; baseline: shoal-train-sync (one process acting
 *                                  and learning in turn) on the same config and steps
 *   onpolicy_dist.impala.delivered env steps/s the actors deliver (staleness drops included)
 *   onpolicy_dist.impala.ups       learner updates/s (one learn() on T 20 x B 16); baseline:
 *                                  the sync trainer's learn() calls/s
 *   onpolicy_dist.appo.sps / .ups  the same for configs/cartpole-ppo.yaml (APPO against
 *                                  synchronous PPO, CleanRL ppo.py's settings), with the
 *                                  measured policy lag
 *   onpolicy_dist.impala.solve_s   median wall seconds to solve CartPole-v1 (greedy mean
 *                                  >= 475 over 100 episodes) over N seeds; baseline: the
 *                                  sync trainer's median on the same seeds
 *   onpolicy_dist.impala.solve_steps median env steps to solve (sync as baseline)
 * ratio > 1: the distributed run is better (faster, or fewer steps). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/shoal.h"

static char bin_dir[4096], src_dir[4096], store_dir[128];

/* Runs argv to completion (bounded), stdout into a string; stderr is dropped. */
static char *run_cmd(char **argv, double timeout_s) {
  char out[256];
  snprintf(out, sizeof out, "%s/out-%ld.txt", store_dir, random());
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(fd, 1);
    dup2(devnull, 2);
    setpgid(0, 0);
    execv(argv[0], argv);
    _exit(127);
  }
  double t0 = shoal_now_s();
  int st;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (shoal_now_s() - t0 > timeout_s) {
      kill(-pid, SIGKILL);
      waitpid(pid, &st, 0);
      break;
    }
    usleep(20000);
  }
  FILE *f = fopen(out, "rb");
  if (!f) return strdup("");
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)len + 1);
  s[fread(s, 1, (size_t)len, f)] = 0;
  fclose(f);
  unlink(out);
  return s;
}

static double num(const char *line, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = line ? strstr(line, pat) : NULL;
  return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static double after(const char *s, const char *key) {
  const char *p = s ? strstr(s, key) : NULL;
  return p ? strtod(p + strlen(key), NULL) : NAN;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  if (n == 0) return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double progress_median(const char *out, const char *key, double skip) {
  static double v[8192];
  int n = 0;
  for (const char *l = out; l && *l && n < 8192;) {
    const char *e = strchr(l, '\n');
    const char *p = strstr(l, "\"event\":\"progress\"");
    if (p && (!e || p < e) && num(l, "t") >= skip) {
      double x = num(l, key);
      if (isfinite(x)) v[n++] = x;
    }
    l = e ? e + 1 : NULL;
  }
  return median(v, n);
}

/* `shoal run CFG --log-json` with sets; returns stdout. */
static char *dist_run(const char *cfg, char **sets, int nsets, double timeout_s) {
  char shoal[4200], store_set[256];
  snprintf(shoal, sizeof shoal, "%s/bin/shoal", bin_dir);
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", store_dir);
  char *argv[64];
  int n = 0;
  argv[n++] = shoal;
  argv[n++] = "run";
  argv[n++] = (char *)cfg;
  argv[n++] = "--log-json";
  argv[n++] = "--no-tensorboard";
  argv[n++] = "--set";
  argv[n++] = store_set;
  for (int i = 0; i < nsets; i++) argv[n++] = "--set", argv[n++] = sets[i];
  argv[n] = NULL;
  return run_cmd(argv, timeout_s);
}

/* shoal-train-sync CFG --quiet with sets; returns stdout (its summary line). */
static char *sync_run(const char *cfg, char **sets, int nsets, double timeout_s) {
  char prog[4200];
  snprintf(prog, sizeof prog, "%s/bin/shoal-train-sync", bin_dir);
  char *argv[64];
  int n = 0;
  argv[n++] = prog;
  argv[n++] = (char *)cfg;
  argv[n++] = "--quiet";
  for (int i = 0; i < nsets; i++) argv[n++] = "--set", argv[n++] = sets[i];
  argv[n] = NULL;
  return run_cmd(argv, timeout_s);
}

static void bench(const char *name, double v, const char *unit, double base) {
  printf("BENCH name=%s value=%.6g unit=%s baseline=%.6g ratio=%.3f\n", name, v, unit, base,
         v / base);
}

/* Throughput of one algorithm: distributed (trained and delivered steps/s, updates/s,
 * lag) and synchronous over about the same number of trained steps. */
static void throughput(const char *tag, const char *cfg, int TB, double seconds, int actors) {
  char secs[64], actors_set[32];
  snprintf(secs, sizeof secs, "run.max_seconds=%g", seconds);
  snprintf(actors_set, sizeof actors_set, "actors=%d", actors);
  char *sets[] = {"run.solve_return=0", "run.max_env_steps=0", secs, actors_set,
                  "run.eval_every_steps=1000000000000"};
  char *out = dist_run(cfg, sets, 5, seconds + 90);
  double ups = progress_median(out, "ups", 2), sps = progress_median(out, "sps", 2);
  double lag = progress_median(out, "lag_mean", 2), lag_max = progress_median(out, "lag_max", 2);
  const char *done = strstr(out, "\"event\":\"done\"");
  double trained_total = num(done, "updates") * TB;
  free(out);
  double trained = ups * TB;
  /* The baseline trains on as many steps as the distributed run did (at least 20
   * updates) and evaluates once, at its end, on 16 episodes: a small share of its time. */
  if (!(trained_total > 20.0 * TB)) trained_total = 20.0 * TB;
  char steps_set[64];
  snprintf(steps_set, sizeof steps_set, "run.max_env_steps=%.0f", trained_total);
  char *ssets[] = {"run.solve_return=0", steps_set, "run.eval_episodes=16",
                   "run.eval_every_steps=1000000000000"};
  char *sout = sync_run(cfg, ssets, 4, seconds * 20 + 120);
  double s_steps = after(sout, "after "), s_secs = after(sout, "updates, ");
  free(sout);
  /* An update is one learn() on a batch of T x B steps on both sides (the sync summary
   * counts PPO's optimizer steps, epochs x minibatches per learn()). */
  double s_sps = s_steps / s_secs, s_ups = s_steps / TB / s_secs;
  printf("%-38s %12.0f %12.0f %8.2f  %d actors; lag mean %.1f, max %.0f versions\n",
         "trained env steps/s", trained, s_sps, trained / s_sps, actors, lag, lag_max);
  printf("%-38s %12.1f %12.1f %8.2f\n", "learner updates/s", ups, s_ups, ups / s_ups);
  printf("%-38s %12.0f %12s %8s  (staleness drops included)\n", "env steps/s delivered by actors",
         sps, "-", "-");
  char name[96];
  snprintf(name, sizeof name, "onpolicy_dist.%s.sps", tag);
  bench(name, trained, "steps/s", s_sps);
  snprintf(name, sizeof name, "onpolicy_dist.%s.ups", tag);
  bench(name, ups, "updates/s", s_ups);
  printf("BENCH name=onpolicy_dist.%s.delivered value=%.0f unit=steps/s baseline=none ratio=none\n",
         tag, sps);
  printf("BENCH name=onpolicy_dist.%s.lag_mean value=%.2f unit=versions baseline=none ratio=none\n",
         tag, lag);
  fflush(stdout);
}

int main(int argc, char **argv) {
  int seeds = 3, actors = 2;
  double seconds = 10;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seeds") && i + 1 < argc)
      seeds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--actors") && i + 1 < argc)
      actors = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: onpolicy_dist [--seeds N] [--seconds S] [--actors A]\n");
      return 2;
    }
  }
  const char *bin = getenv("SHOAL_BINARY_DIR"), *src = getenv("SHOAL_SOURCE_DIR");
  if (!bin || !src) {
    fprintf(stderr, "onpolicy_dist: run it through `make bench BENCH=onpolicy_dist`\n");
    return 2;
  }
  snprintf(bin_dir, sizeof bin_dir, "%s", bin);
  snprintf(src_dir, sizeof src_dir, "%s", src);
  snprintf(store_dir, sizeof store_dir, "/tmp/shoal-bench-onpolicy-XXXXXX");
  if (!mkdtemp(store_dir)) return 1;
  srandom((unsigned)getpid());
  char impala_cfg[4200], ppo_cfg[4200];
  snprintf(impala_cfg, sizeof impala_cfg, "%s/configs/cartpole-impala.yaml", src_dir);
  snprintf(ppo_cfg, sizeof ppo_cfg, "%s/configs/cartpole-ppo.yaml", src_dir);

  printf("onpolicy_dist: CartPole-v1, %g s per throughput run, %d solve seeds, %d actors\n",
         seconds, seeds, actors);
  printf("%-38s %12s %12s %8s\n", "IMPALA (T 20, B 16)", "distributed", "sync", "ratio");
  throughput("impala", impala_cfg, 20 * 16, seconds, actors);
  printf("%-38s %12s %12s %8s\n", "APPO vs PPO (T 128, B 4, 4x4 minibatch)", "distributed", "sync",
         "ratio");
  throughput("appo", ppo_cfg, 128 * 4, seconds, actors);

  double d_s[64], d_st[64], s_s[64], s_st[64];
  int nd = 0, ns = 0;
  for (int k = 0; k < seeds && k < 64; k++) {
    char seed_set[32], actors_set[32];
    snprintf(seed_set, sizeof seed_set, "run.seed=%d", k + 1);
    snprintf(actors_set, sizeof actors_set, "actors=%d", actors);
    char *sets[] = {seed_set, actors_set, "run.max_env_steps=2000000"};
    double t0 = shoal_now_s();
    char *out = dist_run(impala_cfg, sets, 3, 400);
    double wall = shoal_now_s() - t0;
    const char *done = strstr(out, "\"event\":\"done\"");
    bool ok = done && strstr(done, "\"reason\":\"solved\"");
    double steps = num(done, "env_steps");
    if (ok) d_s[nd] = wall, d_st[nd++] = steps;
    free(out);
    char *ssets[] = {seed_set, "run.max_env_steps=2000000"};
    t0 = shoal_now_s();
    out = sync_run(impala_cfg, ssets, 2, 400);
    double swall = shoal_now_s() - t0;
    bool sok = strstr(out, ": solved after ") != NULL;
    double ssteps = after(out, ": solved after ");
    if (sok) s_s[ns] = swall, s_st[ns++] = ssteps;
    free(out);
    printf(
        "  seed %d: distributed %s in %.1f s, %.0f env steps; sync %s in %.1f s, %.0f env steps\n",
        k + 1, ok ? "solved" : "NOT solved", wall, steps, sok ? "solved" : "NOT solved", swall,
        sok ? ssteps : NAN);
    fflush(stdout);
  }
  double dm = median(d_s, nd), sm = median(s_s, ns), dst = median(d_st, nd), sst = median(s_st, ns);
  printf("%-38s %12.1f %12.1f %8.2f  solved %d/%d distributed, %d/%d sync\n",
         "IMPALA wall s to solve (median)", dm, sm, sm / dm, nd, seeds, ns, seeds);
  printf("%-38s %12.0f %12.0f %8.2f\n", "IMPALA env steps to solve (median)", dst, sst, sst / dst);
  printf("BENCH name=onpolicy_dist.impala.solve_s value=%.1f unit=s baseline=%.1f ratio=%.3f\n", dm,
         sm, sm / dm);
  printf(
      "BENCH name=onpolicy_dist.impala.solve_steps value=%.0f unit=steps baseline=%.0f "
      "ratio=%.3f\n",
      dst, sst, sst / dst);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", store_dir);
  return system(cmd) == 0 && nd == seeds ? 0 : 1;
}
