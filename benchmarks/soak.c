/* SPDX-License-Identifier: Apache-2.0 */
/*
 * soak: memory over a long run. `shoal run` of CartPole Ape-X (2 actors, evaluation off,
 * so it never stops early) for SOAK_S seconds (default 600), sampling the resident set
 * (VmRSS in /proc/PID/status) of the learner, each actor and the `shoal` supervisor once
 * a second. After a warm-up (the first quarter of the run, at least 20 s: the replay
 * ring fills and every buffer has been touched) a process's memory should stay flat;
 * the table shows each one's RSS at the end of warm-up, at the end, the growth and the
 * least-squares slope after warm-up.
 *
 *   make bench BENCH=soak                 # 10 minutes
 *   SOAK_S=120 build/benchmarks/soak
 *   soak --check MB                       # exit 1 if any process grew more than MB after
 *                                         # warm-up (the short CI run: tests/faults)
 *
 * BENCH lines: soak.<process>.rss_growth (MB after warm-up) and soak.<process>.rss_slope
 * (MB per hour), baseline=none. Actors are restarted by nobody here: a crash is a
 * failure.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/shoal.h"

enum { NPROC = 4, MAX_SAMPLES = 1 << 16 };
static const char *const names[NPROC] = {"learner", "actor0", "actor1", "shoal"};

/* VmRSS of pid in MB; NAN when it is gone. */
static double rss_mb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return NAN;
  double kb = NAN;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kb = atof(line + 6);
  fclose(f);
  return kb / 1024.0;
}

/* The pid of a child process of parent whose command line holds text; 0 if none. */
static pid_t find_child(pid_t parent, const char *text) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  pid_t found = 0;
  while (d && (e = readdir(d)) && !found) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    int ppid = 0;
    /* pid (comm) state ppid: comm may hold spaces, so read past the last ')'. */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    if (!rp || sscanf(rp + 1, " %*c %d", &ppid) != 1 || ppid != parent) continue;
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (k <= 0) continue;
    for (ssize_t i = 0; i < k; i++)
      if (!buf[i]) buf[i] = ' ';
    buf[k] = 0;
    if (strstr(buf, text)) found = (pid_t)pid;
  }
  if (d) closedir(d);
  return found;
}

int main(int argc, char **argv) {
  double check_mb = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--check") && i + 1 < argc)
      check_mb = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: soak [--check MB]   (SOAK_S=seconds, default 600)\n");
      return 2;
    }
  }
  const char *env = getenv("SOAK_S");
  double soak_s = env && atof(env) > 0 ? atof(env) : 600;
  double warm_s = soak_s / 4 > 20 ? soak_s / 4 : 20;
  if (warm_s > soak_s / 2) warm_s = soak_s / 2;
  const char *bin = getenv("SHOAL_BINARY_DIR"), *src = getenv("SHOAL_SOURCE_DIR");
  char shoal[4200], cfg[4200], dir[] = "/tmp/shoal-soak-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  /* Run from build/benchmarks (make bench) or with the variables ctest sets. */
  snprintf(shoal, sizeof shoal, "%s/bin/shoal", bin ? bin : "..");
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", src ? src : "../..");
  char store_set[256], secs[64], outp[300];
  snprintf(store_set, sizeof store_set, "store.uri=file://%s/runs", dir);
  snprintf(secs, sizeof secs, "run.max_seconds=%.0f", soak_s + 5);
  snprintf(outp, sizeof outp, "%s/run.txt", dir);
  char *rargv[] = {shoal,
                   "run",
                   cfg,
                   "--set",
                   store_set,
                   "--set",
                   "run.name=soak",
                   "--set",
                   "run.solve_return=0",
                   "--set",
                   "run.max_env_steps=0",
                   "--set",
                   secs,
                   "--set",
                   "learner.snapshot_every_s=10",
                   "--quiet",
                   NULL};
  fflush(stdout);
  pid_t run = fork();
  if (run == 0) {
    int fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(rargv[0], rargv);
    _exit(127);
  }
  pid_t pids[NPROC] = {0};
  pids[3] = run;
  double t0 = shoal_now_s();
  while (shoal_now_s() - t0 < 60 && (!pids[0] || !pids[1] || !pids[2])) {
    if (!pids[0]) pids[0] = find_child(run, "shoal-learner");
    if (!pids[1]) pids[1] = find_child(run, "--index 0 ");
    if (!pids[2]) pids[2] = find_child(run, "--index 1 ");
    usleep(100000);
  }
  if (!pids[0] || !pids[1] || !pids[2]) {
    fprintf(stderr, "soak: the run's processes did not all start (see %s)\n", outp);
    kill(run, SIGKILL);
    return 1;
  }
  static double t[MAX_SAMPLES], rss[NPROC][MAX_SAMPLES];
  int n = 0, rc = 0;
  double start = shoal_now_s();
  while (n < MAX_SAMPLES) {
    double now = shoal_now_s() - start;
    if (now >= soak_s) break;
    t[n] = now;
    bool gone = false;
    for (int p = 0; p < NPROC; p++) gone |= isnan(rss[p][n] = rss_mb(pids[p]));
    if (gone) {
      fprintf(stderr, "soak: a process ended early at %.0f s (see %s)\n", now, outp);
      rc = 1;
      break;
    }
    n++;
    usleep(1000000);
  }
  kill(run, SIGTERM);
  int st;
  waitpid(run, &st, 0);
  if (rc || n < 10) return 1;

  printf(
      "soak: %.0f s of `shoal run` (CartPole Ape-X, 2 actors), RSS sampled every second;\n"
      "      warm-up %.0f s, then growth and slope (least squares)\n\n",
      t[n - 1], warm_s);
  printf(
      "| process | RSS after warm-up (MB) | RSS at end (MB) | peak (MB) | growth (MB) | "
      "slope (MB/h) |\n|---|---|---|---|---|---|\n");
  int w = 0;
  while (w < n && t[w] < warm_s) w++;
  bool over = false;
  double growth[NPROC], slope[NPROC];
  for (int p = 0; p < NPROC; p++) {
    /* The median of 5 samples around each end, against a momentary spike. */
    double a = 0, b = 0, peak = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int k = 0;
    for (int i = w; i < n && i < w + 5; i++) a += rss[p][i], k++;
    a /= k;
    k = 0;
    for (int i = n - 5 > w ? n - 5 : w; i < n; i++) b += rss[p][i], k++;
    b /= k;
    int m = 0;
    for (int i = w; i < n; i++) {
      peak = rss[p][i] > peak ? rss[p][i] : peak;
      sx += t[i], sy += rss[p][i], sxx += t[i] * t[i], sxy += t[i] * rss[p][i], m++;
    }
    double den = m * sxx - sx * sx;
    slope[p] = den > 0 ? (m * sxy - sx * sy) / den * 3600.0 : 0;
    growth[p] = b - a;
    printf("| %s | %.1f | %.1f | %.1f | %+.2f | %+.1f |\n", names[p], a, b, peak, growth[p],
           slope[p]);
    if (check_mb >= 0 && growth[p] > check_mb) over = true;
  }
  printf("\n");
  for (int p = 0; p < NPROC; p++) {
    printf("BENCH name=soak.%s.rss_growth value=%.2f unit=MB baseline=none ratio=none\n", names[p],
           growth[p]);
    printf("BENCH name=soak.%s.rss_slope value=%.1f unit=MB/h baseline=none ratio=none\n", names[p],
           slope[p]);
  }
  printf("BENCH name=soak.seconds value=%.0f unit=s baseline=none ratio=none\n", t[n - 1]);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "soak: could not remove %s\n", dir);
  if (over) {
    printf("soak: FAILED: RSS grew more than %.1f MB after warm-up\n", check_mb);
    return 1;
  }
  return 0;
}
