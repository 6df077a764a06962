/* SPDX-License-Identifier: Apache-2.0 */
/* tests/faults/faults_util.h — what the fault tests share: a learner run with
 * fault_pushers as its actors, Status read through `shoal status --json`, and the
 * learner's replay log read back row by row. Include after cmocka.h and
 * tests/proc_util.h. */
#ifndef SHOAL_TEST_FAULTS_UTIL_H
#define SHOAL_TEST_FAULTS_UTIL_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "learner/replay_log.h"
#include "store/store.h"
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
    /* A server a test froze (SIGSTOP) and did not thaw, failing first: thawed, so that it
     * sees its parent gone and exits (a stopped process watches nothing). SIGCONT is
     * harmless to any other process that took the pid. */
    kill(fu_pids[i], SIGCONT);
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
          "replay:\n  capacity: 1000000\n  prioritized: false\n  log_flush_s: 0.5\n"
          "dqn:\n  net: mlp\n  hidden0: 16\n  hidden1: 16\n  lr: 0.00001\n"
          "store:\n  uri: %s\n%s",
          actors, snapshot_s, store_uri, extra);
  assert_int_equal(fclose(f), 0);
}

/* Starts `shoal run` (argv) and returns the port its learner listens on, from the line
 * `shoal run` prints once the learner is up. */
static inline int fu_run_start(wf_proc *p, char *const argv[]) {
  fu_start(p, argv);
  const char *key = "learner on 127.0.0.1:";
  char *out = wf_wait_text(p->out, key, 60);
  int port = atoi(strstr(out, key) + strlen(key));
  free(out);
  return port;
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

/* ---- the replay log, read back (learner/replay_log.h) ------------------------------ */

typedef struct fu_row {
  float obs[4];
} fu_row;

/* Reads the step rows (not final-observation tails) of every batch in run's replay
 * log in the store at uri (CartPole: obs f32[4] first, "tail" last). Returns their
 * count; *rows gets a malloc'd array. Fails the test on a log it cannot read. */
static inline size_t fu_log_rows(const char *uri, const char *run, fu_row **rows) {
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) fail_msg("store %s: %s", uri, err.msg);
  uint64_t *seqs = NULL;
  size_t nseg = 0, n = 0, cap = 1024;
  if (store_replay_list(st, run, &seqs, &nseg, &err)) fail_msg("replay log: %s", err.msg);
  *rows = malloc(cap * sizeof **rows);
  rlog_segment seg = {0};
  for (size_t i = 0; i < nseg; i++) {
    void *bytes;
    size_t len;
    if (store_replay_read(st, run, seqs[i], &bytes, &len, &err) ||
        rlog_decode(bytes, len, seqs[i], &seg, &err))
      fail_msg("replay log segment %zu: %s", (size_t)seqs[i], err.msg);
    free(bytes);
    size_t pos = 0;
    rlog_record r;
    int got;
    while ((got = rlog_next(&seg, &pos, &r, &err)) == 1) {
      if (r.kind != RLOG_REC_BATCH) continue;
      assert_int_equal(seg.cols[0].ndim, 1);
      assert_int_equal(seg.cols[0].shape[0], 4);
      const float *obs = r.batch.cols[0];
      const uint8_t *tail = r.batch.cols[seg.ncols - 1];
      for (uint32_t k = 0; k < r.batch.rows; k++) {
        if (tail[k]) continue;
        if (n == cap) *rows = realloc(*rows, (cap *= 2) * sizeof **rows);
        memcpy((*rows)[n++].obs, obs + 4 * (size_t)k, 16);
      }
    }
    if (got < 0) fail_msg("%s", err.msg);
  }
  rlog_segment_free(&seg);
  free(seqs);
  store_close(st);
  return n;
}

#endif
