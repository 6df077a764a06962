/* SPDX-License-Identifier: Apache-2.0 */
/* benchmarks/train_sps — the main job's speed: a CartPole Ape-X run (`shoal run
 * configs/cartpole-apex.yaml`) with 1, 2 and 4 actors, timed from its JSON progress
 * lines, and the wall time to solve CartPole-v1 (mean greedy return >= 475 over 100
 * episodes) over several seeds.
 *
 *   train_sps [--seeds N] [--seconds S]
 *
 * Rows:
 *   train.cartpole_apex.sps.n<N>   env steps/s consumed, median over the run's progress
 *                                  lines after warm-up, N actors (training on, the rate
 *                                  limiter holding 8 samples per inserted step)
 *   train.cartpole_apex.ingest.n<N> the same actors with training off (no rate limit):
 *                                  what the actors and the rpc path can deliver
 *   train.cartpole_apex.solve_s    median wall seconds to solve over the seeds
 * No peer can run here (CleanRL publishes steps, not wall time), so baseline=none; the
 * goals are printed beside the figures. */
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

static char shoal_bin[4096], config_path[4096], store_dir[128];

/* Runs shoal with argv (after "run CONFIG"), --log-json, and returns its stdout. */
static char *run_shoal(char **extra, int nextra, double timeout_s) {
  char out[256];
  snprintf(out, sizeof out, "%s/out-%ld.json", store_dir, random());
  char *argv[64];
  int n = 0;
  argv[n++] = shoal_bin;
  argv[n++] = "run";
  argv[n++] = config_path;
  argv[n++] = "--log-json";
  for (int i = 0; i < nextra; i++) argv[n++] = extra[i];
  argv[n] = NULL;
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
    usleep(50000);
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
  const char *p = strstr(line, pat);
  return p ? strtod(p + strlen(pat), NULL) : NAN;
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

/* Median of a key over the progress lines after the first `skip` seconds. */
static double progress_median(const char *out, const char *key, double skip) {
  double v[4096];
  int n = 0;
  for (const char *l = out; l && *l && n < 4096;) {
    const char *e = strchr(l, '\n');
    if (strstr(l, "\"event\":\"progress\"") && (!e || strstr(l, "\"event\":\"progress\"") < e) &&
        num(l, "t") >= skip) {
      double x = num(l, key);
      if (isfinite(x)) v[n++] = x;
    }
    l = e ? e + 1 : NULL;
  }
  return median(v, n);
}

int main(int argc, char **argv) {
  int seeds = 5;
  double seconds = 12;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seeds") && i + 1 < argc)
      seeds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
  }
  const char *bin = getenv("SHOAL_BINARY_DIR"), *src = getenv("SHOAL_SOURCE_DIR");
  if (!bin || !src) {
    fprintf(stderr, "train_sps: run it through `make bench BENCH=train_sps`\n");
    return 2;
  }
  snprintf(shoal_bin, sizeof shoal_bin, "%s/bin/shoal", bin);
  snprintf(config_path, sizeof config_path, "%s/configs/cartpole-apex.yaml", src);
  snprintf(store_dir, sizeof store_dir, "/tmp/shoal-bench-train-XXXXXX");
  if (!mkdtemp(store_dir)) return 1;
  srandom((unsigned)getpid());
  char store_set[256], secs_set[64];
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", store_dir);
  snprintf(secs_set, sizeof secs_set, "run.max_seconds=%g", seconds);

  printf("train_sps: CartPole-v1 Ape-X, %g s per throughput run, %d solve seeds\n", seconds, seeds);
  printf("%-34s %12s %12s  %s\n", "figure", "value", "unit", "note");
  const int ns[] = {1, 2, 4};
  for (int k = 0; k < 3; k++) {
    char actors_set[32];
    snprintf(actors_set, sizeof actors_set, "actors=%d", ns[k]);
    char *train[] = {"--set", store_set,
                     "--set", actors_set,
                     "--set", "run.solve_return=0",
                     "--set", "run.max_env_steps=0",
                     "--set", secs_set};
    char *out = run_shoal(train, 10, seconds + 60);
    double sps = progress_median(out, "sps", 3), ups = progress_median(out, "ups", 3);
    free(out);
    /* Training off: warm-up never reached, so nothing limits the actors. */
    char *ingest[] = {"--set", store_set,
                      "--set", actors_set,
                      "--set", "run.solve_return=0",
                      "--set", "run.max_env_steps=0",
                      "--set", secs_set,
                      "--set", "learner.warmup=1000000000000",
                      "--set", "replay.capacity=1000000"};
    out = run_shoal(ingest, 14, seconds + 60);
    double isps = progress_median(out, "sps", 3);
    free(out);
    printf("%-34s %12.0f %12s  %.0f updates/s, training on\n", "env steps/s", sps, "steps/s", ups);
    printf(
        "BENCH name=train.cartpole_apex.sps.n%d value=%.0f unit=steps/s baseline=none ratio=none\n",
        ns[k], sps);
    printf(
        "BENCH name=train.cartpole_apex.updates.n%d value=%.1f unit=updates/s baseline=none "
        "ratio=none\n",
        ns[k], ups);
    printf("%-34s %12.0f %12s  %d actors, training off\n", "env steps/s delivered", isps, "steps/s",
           ns[k]);
    printf(
        "BENCH name=train.cartpole_apex.ingest.n%d value=%.0f unit=steps/s baseline=none "
        "ratio=none\n",
        ns[k], isps);
    fflush(stdout);
  }
  double solve_s[64], solve_steps[64];
  int solved = 0;
  for (int s = 0; s < seeds && s < 64; s++) {
    char seed_set[32];
    snprintf(seed_set, sizeof seed_set, "run.seed=%d", s + 1);
    char *solve[] = {"--set", store_set, "--set", seed_set, "--set", "run.max_env_steps=1000000"};
    double t0 = shoal_now_s();
    char *out = run_shoal(solve, 6, 300);
    double wall = shoal_now_s() - t0;
    const char *done = strstr(out, "\"event\":\"done\"");
    bool ok = done && strstr(done, "\"reason\":\"solved\"");
    double steps = done ? num(done, "env_steps") : NAN;
    printf("  seed %d: %s in %.1f s, %.0f env steps\n", s + 1, ok ? "solved" : "NOT solved", wall,
           steps);
    if (ok) {
      solve_s[solved] = wall;
      solve_steps[solved] = steps;
      solved++;
    }
    free(out);
  }
  double ms = median(solve_s, solved), mst = median(solve_steps, solved);
  printf(
      "%-34s %12.1f %12s  %d/%d seeds solved; median %.0f env steps (goal < 60 s; CleanRL "
      "DQN: 488.7 after 500,000 steps)\n",
      "wall time to solve (median)", ms, "s", solved, seeds, mst);
  printf("BENCH name=train.cartpole_apex.solve_s value=%.1f unit=s baseline=none ratio=none\n", ms);
  printf(
      "BENCH name=train.cartpole_apex.solve_steps value=%.0f unit=steps baseline=500000 "
      "ratio=%.2f\n",
      mst, 500000.0 / mst);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", store_dir);
  return system(cmd) == 0 && solved == seeds ? 0 : 1;
}
