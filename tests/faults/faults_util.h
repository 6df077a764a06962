/* tests/faults/faults_util.h — what the fault tests share: a learner run with
 * fault_pushers as its actors, Status read through `shoal status --json`, and the
 * saved replay read back row by row. Include after cmocka.h and tests/proc_util.h. */
#ifndef SHOAL_TEST_FAULTS_UTIL_H
#define SHOAL_TEST_FAULTS_UTIL_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "tests/faults/faults_log.h"

/* Processes a test started, killed (with their process groups) by fu_kill_all in
 * each test's teardown, so a failed test leaves nothing running. */
static pid_t fu_pids[512];
static int fu_npids;

static inline void fu_start(wf_proc *p, char *const argv[]) {
  wf_start(p, argv);
  if (fu_npids < 512) fu_pids[fu_npids++] = p->pid;
}

static inline void fu_track(pid_t pid) {
  if (fu_npids < 512) fu_pids[fu_npids++] = pid;
}

static inline int fu_kill_all(void **state) {
  (void)state;
  for (int i = 0; i < fu_npids; i++) {
    if (waitpid(fu_pids[i], NULL, WNOHANG) != 0) continue; /* reaped or not ours */
    kill(-fu_pids[i], SIGKILL);
    kill(fu_pids[i], SIGKILL);
    waitpid(fu_pids[i], NULL, 0);
  }
  fu_npids = 0;
  return 0;
}

/* The pid of a child of parent whose command line holds text; 0 if none. Only the
 * test's own processes: other programs on the machine may run the same binaries. */
static inline pid_t fu_find_child(pid_t parent, const char *text) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  pid_t found = 0;
  while (d && (e = readdir(d)) && !found) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = 0;
    char *rp = strrchr(buf, ')'), state = 0;
    int ppid = 0;
    /* pid (comm) state ppid; a zombie ('Z') is already dead. */
    if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2 || ppid != parent || state == 'Z')
      continue;
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    for (ssize_t i = 0; i < n; i++)
      if (!buf[i]) buf[i] = ' ';
    buf[n] = 0;
    if (strstr(buf, text)) found = (pid_t)pid;
  }
  if (d) closedir(d);
  return found;
}

/* Writes a resolved config for a learner fed by `actors` fault_pushers (4 envs of
 * CartPole-shaped rows each), training on what arrives without evaluating, keeping
 * everything (capacity above what a test pushes) in a file store under dir/runs.
 * extra: more YAML lines (top-level keys not already set here), may be "". */
static inline void fu_write_config(const char *path, const char *store_uri, int actors,
                                   double snapshot_s, const char *extra) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f,
          "run:\n  seed: 3\n  solve_return: 0\n  eval_episodes: 4\n"
          "env:\n  id: CartPole-v1\n  num_envs: 4\n"
          "actors: %d\n"
          "actor:\n  send_steps: 8\n"
          "learner:\n  listen: 127.0.0.1:0\n  batch: 32\n  warmup: 500\n  replay_ratio: 0.25\n"
          "  publish_every: 5\n  snapshot_every_s: %g\n  log_every_s: 0.5\n  threads: 1\n"
          "replay:\n  capacity: 1000000\n  prioritized: false\n"
          "dqn:\n  net: mlp\n  hidden0: 16\n  hidden1: 16\n  lr: 0.00001\n"
          "store:\n  uri: %s\n%s",
          actors, snapshot_s, store_uri, extra);
  assert_int_equal(fclose(f), 0);
}

/* Records run in cfg's store (`shoal init`), as a deployment does before starting
 * the learner. */
static inline void fu_init(const char *cfg, const char *run) {
  char set[128];
  snprintf(set, sizeof set, "run.name=%s", run);
  char *argv[] = {wf_shoal, "init", (char *)cfg, "--set", set, NULL};
  int rc;
  char *out = wf_run(argv, 60, &rc);
  if (rc) fail_msg("shoal init: %s", out);
  free(out);
}

/* Starts shoal-learner on cfg for run (port 0: any; else that port), waits for its
 * listening line and returns the port. */
static inline int fu_learner_start(wf_proc *p, const char *cfg, const char *run, int port,
                                   bool resume) {
  char bin[4200], listen[64];
  snprintf(bin, sizeof bin, "%s/bin/shoal-learner", getenv("SHOAL_BINARY_DIR"));
  snprintf(listen, sizeof listen, "learner.listen=127.0.0.1:%d", port);
  char *argv[] = {bin,         "--config", (char *)cfg, "--run",
                  (char *)run, "--set",    listen,      resume ? "--resume" : NULL,
                  NULL};
  fu_start(p, argv);
  char *out = wf_wait_text(p->out, "\"event\":\"listening\"", 60);
  const char *q = strstr(out, "\"port\":");
  int got = q ? atoi(q + 7) : 0;
  free(out);
  assert_true(got > 0);
  return got;
}

/* A number from a JSON line ("key":value); NAN when absent. */
static inline double fu_json(const char *line, const char *key) {
  char pat[96];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p) return NAN;
  p += strlen(pat);
  if (!strncmp(p, "null", 4)) return NAN;
  return strtod(p, NULL);
}

/* The learner's Status as one JSON line (`shoal status --interval 0 --json`); caller
 * frees. NULL when the learner did not answer. */
static inline char *fu_status(int port) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  char *argv[] = {wf_shoal, "status", addr, "--interval", "0", "--json", NULL};
  /* A probe: on a loaded machine a busy learner may miss one call's deadline. */
  for (int tries = 0; tries < 3; tries++) {
    int rc;
    char *out = wf_run(argv, 30, &rc);
    if (!rc && strstr(out, "\"run\":")) return out;
    free(out);
  }
  return NULL;
}

/* The pusher's log, mapped read-only (it keeps its values after the pusher is gone). */
static inline fault_log *fu_log_map(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return NULL;
  struct stat sb;
  if (fstat(fd, &sb) || (size_t)sb.st_size < sizeof(fault_log)) {
    close(fd);
    return NULL;
  }
  fault_log *lg = mmap(NULL, sizeof *lg, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  return lg == MAP_FAILED ? NULL : lg;
}

/* Starts a fault_pusher for actor a, generation g, logging to dir/log-a-g. */
static inline void fu_pusher_start(wf_proc *p, int port, const char *run, int a, int g, double rate,
                                   char *log_path, size_t log_cap) {
  char bin[4200], addr[64], as[16], gs[16], rs[32];
  snprintf(bin, sizeof bin, "%s/tests/fault_pusher", getenv("SHOAL_BINARY_DIR"));
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  snprintf(as, sizeof as, "%d", a);
  snprintf(gs, sizeof gs, "%d", g);
  snprintf(rs, sizeof rs, "%g", rate);
  snprintf(log_path, log_cap, "%s/log-%d-%d", wf_dir, a, g);
  char *argv[] = {bin,     "--learner", addr,     "--run", (char *)run, "--actor", as,
                  "--gen", gs,          "--rate", rs,      "--log",     log_path,  NULL};
  fu_start(p, argv);
}

/* ---- the saved replay, read back (replay/save.c's format, uniform memory) ---------- */

typedef struct fu_row {
  float obs[4];
} fu_row;

/* Reads the step rows (not final-observation tails) of a replay file saved by a
 * uniform CartPole memory (obs f32[4], action i32). Returns their count; *rows gets a
 * malloc'd array. Fails the test on a file it cannot read. */
static inline size_t fu_replay_rows(const char *path, fu_row **rows) {
  size_t len;
  char *s = wf_slurp(path, &len);
  const uint8_t *b = (const uint8_t *)s;
  assert_true(len > 16);
  assert_memory_equal(b, "SHOALRPL", 8);
  size_t o = 16;
  uint32_t kind, streams, ncols;
  memcpy(&kind, b + o, 4), o += 4;
  o += 8; /* capacity */
  memcpy(&streams, b + o, 4), o += 4;
  memcpy(&ncols, b + o, 4), o += 4;
  assert_int_equal(kind, 0); /* uniform: no per-item priority */
  assert_int_equal(ncols, 2);
  o += (size_t)ncols * (32 + 4 + 4 + 32) + 32 + 4 + 8 + 8 + 4; /* cols, obs name, k, α, ε, crc */
  uint64_t hi, lo;
  memcpy(&hi, b + o, 8), o += 8;
  memcpy(&lo, b + o, 8), o += 8;
  o += 8 + 8 + 8 + (size_t)streams * 8; /* max priority, steps, tails, stream heads */
  *rows = malloc((size_t)(hi - lo + 1) * sizeof **rows);
  size_t n = 0;
  for (uint64_t k = lo; k < hi; k++) {
    assert_true(o + 29 <= len);
    uint8_t flags = b[o + 28];
    o += 29;         /* seq, prev, link, reward, flags */
    if (flags & 1) { /* a tail: the obs only */
      o += 16;
      continue;
    }
    memcpy((*rows)[n].obs, b + o, 16);
    n++;
    o += 16 + 4;
  }
  assert_true(o + 12 <= len);
  assert_memory_equal(b + o, "SHOALEND", 8);
  free(s);
  return n;
}

#endif
