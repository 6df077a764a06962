/* SPDX-License-Identifier: Apache-2.0 */
/* benchmarks/import.c — how fast outside experience gets into a learner.
 *
 * On a file store in a fresh folder, with CartPole-v1 transitions played through envs/:
 *   import   `shoal import FILE.jsonl` (a process: parse, check against the env, join
 *            trajectories, write segments with fsync)  vs  reading the same JSON Lines
 *            bytes with read() and counting lines (the floor any importer pays)
 *   follow   the learner's store follower (learner/follow.c) taking every segment into
 *            a replay memory: list, read, CRC, value checks, insert  vs  reading the
 *            same segment files' bytes with read()
 * Rows per second; the median of several repetitions, ours and the baseline
 * interleaved so that noise from other processes hits both. The files are in the page
 * cache for both sides (the baseline reads first).
 *
 *   make bench BENCH=import      (or build/benchmarks/import [--rows N] [--reps K])
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "envs/envs.h"
#include "learner/follow.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench_import: %s: %s\n", what, msg ? msg : "failed");
  exit(1);
}

/* Writes about rows CartPole transitions (whole episodes, ε-greedy scripted policy). */
static int write_jsonl(const char *path, int rows) {
  shoal_error err = {0};
  env *e = NULL;
  if (env_make(&e, "CartPole-v1", &err)) die("env", err.msg);
  env_seed(e, 1);
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  FILE *f = fopen(path, "w");
  if (!f) die("fopen", path);
  int n = 0;
  while (n < rows) {
    float obs[4], next[4];
    env_reset(e, obs);
    for (;;) {
      int a = shoal_rng_uniform(&rng) < 0.7 ? (obs[2] + 0.5f * obs[3] > 0)
                                            : (int)(shoal_rng_next(&rng) % 2);
      env_result r;
      if (env_step(e, &a, next, &r, &err)) die("step", err.msg);
      fprintf(f,
              "{\"obs\": [%.9g, %.9g, %.9g, %.9g], \"action\": %d, \"reward\": %.9g, "
              "\"next_obs\": [%.9g, %.9g, %.9g, %.9g], \"terminated\": %s, \"truncated\": %s}\n",
              obs[0], obs[1], obs[2], obs[3], a, r.reward, next[0], next[1], next[2], next[3],
              r.terminated ? "true" : "false", r.truncated && !r.terminated ? "true" : "false");
      memcpy(obs, next, sizeof obs);
      n++;
      if (r.terminated || r.truncated) break;
    }
  }
  fclose(f);
  env_destroy(e);
  return n;
}

/* read() of path whole into buf; returns the newlines seen. */
static size_t read_count(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("open", path);
  size_t lines = 0;
  ssize_t r;
  while ((r = read(fd, buf, cap)) > 0)
    for (ssize_t i = 0; i < r; i++) lines += buf[i] == '\n';
  close(fd);
  return lines;
}

static double time_import(const char *shoal, const char *file, const char *uri, const char *run) {
  double t0 = shoal_now_s();
  pid_t p = fork();
  if (p == 0) {
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 1);
    execl(shoal, shoal, "import", file, "--run", run, "--env", "CartPole-v1", "--store", uri,
          "--quiet", (char *)NULL);
    _exit(127);
  }
  int st;
  waitpid(p, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("shoal import", file);
  return shoal_now_s() - t0;
}

static replay *make_replay(int64_t capacity) {
  replay_config c = {0};
  c.kind = REPLAY_PRIORITIZED; /* as the Ape-X learner's */
  c.capacity = capacity;
  c.streams = 16;
  c.ncols = 2;
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_F32, .ndim = 1, .shape = {4}};
  c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I32};
  c.obs_column = "obs";
  c.frame_stack = 1;
  c.alpha = 0.6;
  c.eps = 1e-6;
  c.writer_slack = -1;
  replay *r = NULL;
  shoal_error err = {0};
  if (replay_create(&c, &r, &err)) die("replay", err.msg);
  return r;
}

static double time_follow(store *st, const char *run, uint64_t rows) {
  replay *mem = make_replay((int64_t)rows * 2 + 1024);
  follow_config fc = {0};
  fc.st = st;
  fc.run = run;
  fc.mem = mem;
  fc.nstreams = 16;
  fc.limits = (store_segment_limits){.spec = {.obs_dtype = STORE_SEG_F32,
                                              .obs_ndim = 1,
                                              .obs_shape = {4},
                                              .act_dtype = STORE_SEG_I32},
                                     .num_actions = 2};
  fc.prioritized = true;
  fc.poll_s = 0.001;
  fc.start_after = STORE_SEG_FIRST;
  follow *f;
  shoal_error err = {0};
  double t0 = shoal_now_s();
  if (follow_start(&f, &fc, &err)) die("follow", err.msg);
  follow_stats s;
  for (;;) {
    follow_stats_get(f, &s);
    if (s.rows + s.rejected_rows >= rows) break;
    if (shoal_now_s() - t0 > 120) die("follow", "did not take every row within 120 s");
    usleep(200);
  }
  double dt = shoal_now_s() - t0;
  follow_stop(f);
  if (s.rows != rows || s.rejected_segments) die("follow", "rows lost or rejected");
  replay_destroy(mem);
  return dt;
}

/* read() of every .seg file of dir; returns the bytes. */
static size_t read_segments(const char *dir, char *buf, size_t cap) {
  DIR *d = opendir(dir);
  if (!d) die("opendir", dir);
  struct dirent *e;
  size_t total = 0;
  char p[PATH_MAX + 300];
  while ((e = readdir(d))) {
    if (!strstr(e->d_name, ".seg")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    int fd = open(p, O_RDONLY);
    if (fd < 0) die("open", p);
    ssize_t r;
    while ((r = read(fd, buf, cap)) > 0) total += (size_t)r;
    close(fd);
  }
  closedir(d);
  return total;
}

int main(int argc, char **argv) {
  int rows = 300000, reps = 5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rows") && i + 1 < argc)
      rows = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
  }
  if (reps < 1 || reps > 50 || rows < 1000) die("arguments", "--rows >= 1000, --reps 1..50");
  char exe[PATH_MAX], shoal[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) die("readlink", "/proc/self/exe");
  exe[n] = 0;
  *strrchr(exe, '/') = 0;
  snprintf(shoal, sizeof shoal, "%s/../bin/shoal", exe);
  if (access(shoal, X_OK)) die("no shoal program at", shoal);

  char dir[] = "/tmp/shoal-bench-import-XXXXXX";
  if (!mkdtemp(dir)) die("mkdtemp", dir);
  char file[256], uri[256];
  snprintf(file, sizeof file, "%s/cartpole.jsonl", dir);
  snprintf(uri, sizeof uri, "file://%s/store", dir);
  int N = write_jsonl(file, rows);
  struct stat sb;
  stat(file, &sb);
  size_t cap = 1 << 20;
  char *buf = malloc(cap);

  double imp[50], base[50], fol[50], fbase[50];
  char run[64], segdir[512];
  store *st = NULL;
  shoal_error err = {0};
  for (int r = 0; r < reps; r++) {
    double t0 = shoal_now_s();
    size_t lines = read_count(file, buf, cap);
    base[r] = shoal_now_s() - t0;
    if (lines != (size_t)N) die("baseline", "line count");
    snprintf(run, sizeof run, "bench-%d", r);
    imp[r] = time_import(shoal, file, uri, run);
  }
  if (store_open(&st, uri, &err)) die("store", err.msg);
  for (int r = 0; r < reps; r++) {
    snprintf(run, sizeof run, "bench-%d", r);
    snprintf(segdir, sizeof segdir, "%s/store/%s/segments", dir, run);
    double t0 = shoal_now_s();
    size_t bytes = read_segments(segdir, buf, cap);
    fbase[r] = shoal_now_s() - t0;
    if (!bytes) die("baseline", "no segment bytes");
    fol[r] = time_follow(st, run, (uint64_t)N);
  }
  store_close(st);
  double mi = median(imp, reps), mb = median(base, reps), mf = median(fol, reps),
         mfb = median(fbase, reps);
  printf(
      "outside experience, file store, %d CartPole-v1 transitions (%.1f MB of JSON Lines), "
      "median of %d\n",
      N, (double)sb.st_size / 1e6, reps);
  printf("| path | shoal | baseline (same bytes, read()) | ratio |\n|---|---|---|---|\n");
  printf(
      "| shoal import (parse, check, segments, fsync) | %.0f rows/s (%.2f s) | %.0f rows/s (%.3f "
      "s) "
      "| %.3f |\n",
      N / mi, mi, N / mb, mb, mb / mi);
  printf(
      "| follow into PER replay (list, read, CRC, check, insert) | %.0f rows/s (%.3f s) | %.0f "
      "rows/s (%.3f s) | %.3f |\n",
      N / mf, mf, N / mfb, mfb, mfb / mf);
  printf("BENCH name=import_jsonl value=%.0f unit=rows/s baseline=%.0f ratio=%.3f\n", N / mi,
         N / mb, mb / mi);
  printf("BENCH name=follow_segments value=%.0f unit=rows/s baseline=%.0f ratio=%.3f\n", N / mf,
         N / mfb, mfb / mf);
  free(buf);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : 1;
}
