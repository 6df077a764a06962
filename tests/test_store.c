/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_store.c — the store's suite, run once per backend:
 *   test_store file       the file backend in a fresh temporary folder (always)
 *   test_store mongodb    MongoDB: ctest's stand-in or $SHOAL_TEST_MONGO_URI (tests/mongo_test.h)
 * The same checks run on both; a few more that need the file system (a process
 * killed mid-write, a full disk, a read-only folder, damaged files) run on file only.
 * `test_store claim-worker URI SWEEP WORKER` is the child process of the two-process
 * claim test. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/file.h"
#include "store/store.h"
#include "tests/mongo_test.h"

static char g_uri[1024];   /* the store under test */
static char g_dir[512];    /* file backend: its folder */
static int g_file;         /* 1 for the file backend */
static char g_prefix[32];  /* makes names unique per test process (a shared MongoDB) */
static const char *g_self; /* argv[0], for child processes */

static void name(char *out, size_t cap, const char *what) {
  snprintf(out, cap, "%s-%s", g_prefix, what);
}

static store *open_store(void) {
  shoal_error err = {0};
  store *st = NULL;
  int rc = store_open(&st, g_uri, &err);
  if (rc) fprintf(stderr, "store_open: %s\n", err.msg);
  assert_int_equal(rc, 0);
  return st;
}

static int setup(void **state) {
  *state = open_store();
  return 0;
}

static int teardown(void **state) {
  store_close(*state);
  return 0;
}

static void fill(unsigned char *p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[i] = (unsigned char)x;
  }
}

static void make_run(store *st, const char *run) {
  shoal_error err = {0};
  int rc = store_run_create(st, run, "algo: dqn\n", STORE_RUN_RUNNING, &err);
  if (rc) fprintf(stderr, "run_create: %s\n", err.msg);
  assert_int_equal(rc, 0);
}

/* ---- URIs ----------------------------------------------------------------------- */

static void test_redact(void **state) {
  char out[256];
  store_uri_redact(out, sizeof out, "mongodb://alice:s3cr%40t@db1:27017,db2/shoal?w=1");
  assert_string_equal(out, "mongodb://alice:***@db1:27017,db2/shoal?w=1");
  store_uri_redact(out, sizeof out, "mongodb://bob@h/db?authMechanismProperties=x&password=zz&w=2");
  assert_string_equal(out, "mongodb://bob@h/db?authMechanismProperties=x&password=***&w=2");
  store_uri_redact(out, sizeof out, "mongodb://h/?secretKey=abc");
  assert_string_equal(out, "mongodb://h/?secretKey=***");
  store_uri_redact(out, sizeof out, "file:///data/runs");
  assert_string_equal(out, "file:///data/runs");
  store_uri_redact(out, sizeof out, NULL);
  assert_string_equal(out, "");
  /* Truncation keeps snprintf's contract. */
  size_t n = store_uri_redact(out, 8, "mongodb://u:p@h");
  assert_int_equal(n, strlen("mongodb://u:***@h"));
  assert_int_equal(strlen(out), 7);
}

/* store_uri_parse reads what store_open opens, and nothing is made. */
static void test_uri_parse(void **state) {
  store_uri_info u;
  shoal_error err = {0};
  assert_int_equal(store_uri_parse("file:///data/my%20runs/?sync=never", &u, &err), 0);
  assert_string_equal(u.backend, "file");
  assert_int_equal(u.has_scheme, 1);
  assert_string_equal(u.dir, "/data/my runs");
  assert_int_equal(u.sync_metrics, 0);
  assert_int_equal(store_uri_parse("file://localhost/data/runs", &u, &err), 0);
  assert_string_equal(u.dir, "/data/runs");
  assert_int_equal(u.sync_metrics, 1);
  assert_int_equal(store_uri_parse("file:rel/runs", &u, &err), 0);
  assert_string_equal(u.dir, "rel/runs");
  assert_int_equal(u.has_scheme, 1);
  assert_int_equal(store_uri_parse("plain/dir/", &u, &err), 0);
  assert_string_equal(u.backend, "file");
  assert_int_equal(u.has_scheme, 0);
  assert_string_equal(u.dir, "plain/dir");
  struct stat sb;
  assert_int_equal(stat("plain", &sb), -1); /* read, not made */
  assert_int_equal(store_uri_parse("mongodb://alice:s3cret@h/db", &u, &err), 0);
  assert_string_equal(u.backend, "mongodb");
  assert_int_equal(u.has_scheme, 1);
  assert_string_equal(u.dir, "");
  assert_int_equal(u.password_masked, 0);
  assert_int_equal(store_uri_parse("mongodb+srv://alice:***@h/db?w=1", &u, &err), 0);
  assert_int_equal(u.password_masked, 1);
  u.sync_metrics = 7;
  assert_int_equal(store_uri_parse("ftp://bob:pw@h/x", &u, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "unknown URI scheme"));
  assert_null(strstr(err.msg, "pw@"));
  assert_int_equal(u.sync_metrics, 7); /* untouched on error */
  assert_int_equal(store_uri_parse("file:x%zz", &u, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "%-escape"));
  assert_int_equal(store_uri_parse("file:x?sync=maybe", &u, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "unknown option"));
}

static void test_bad_uri_is_a_clear_error(void **state) {
  shoal_error err = {0};
  store *st = (store *)0x1;
  assert_int_equal(store_open(&st, "ftp://host/x", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "unknown URI scheme"));
  assert_ptr_equal(st, (store *)0x1);

  memset(&err, 0, sizeof err);
  assert_int_equal(store_open(&st, "file://", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "names no folder"));
  char u[700];
  snprintf(u, sizeof u, "file://%s/x?fsync=sometimes", g_file ? g_dir : "/tmp");
  assert_int_equal(store_open(&st, u, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "unknown option"));

  /* Malformed MongoDB URIs fail at open, with no server needed, and never show the
   * password, neither in the error nor in anything printed (stderr is captured). */
  char logpath[700];
  snprintf(logpath, sizeof logpath, "%s/stderr.log", g_file ? g_dir : "/tmp");
  fflush(stderr);
  int saved = dup(2), logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(saved >= 0 && logfd >= 0);
  dup2(logfd, 2);
  const char *bad[] = {"mongodb://", "mongodb://alice:hunter2@host:notaport/db",
                       "mongodb://alice:hunter2@/db", "mongodb://alice:hunter2@h/db?w=&&=x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&err, 0, sizeof err);
    int rc = store_open(&st, bad[i], &err);
    assert_true(rc == SHOAL_EINVAL || rc == SHOAL_ENOTSUP);
    assert_true(strlen(err.msg) > 10);
    assert_null(strstr(err.msg, "hunter2"));
    assert_ptr_equal(st, (store *)0x1);
  }
  /* A well-formed URI of a server that is not there: a clear error at start, in
   * bounded time (nothing listens on port 1). */
  memset(&err, 0, sizeof err);
  double t0 = shoal_now_s();
  int rc =
      store_open(&st, "mongodb://alice:hunter2@127.0.0.1:1/db?serverSelectionTimeoutMS=500", &err);
  if (rc != SHOAL_ENOTSUP) {
    assert_int_equal(rc, SHOAL_ENET);
    assert_non_null(strstr(err.msg, "cannot reach"));
    assert_non_null(strstr(err.msg, "mongodb://alice:***@127.0.0.1:1/db"));
    assert_null(strstr(err.msg, "hunter2"));
    assert_true(shoal_now_s() - t0 < 10);
  }
  /* Opened lazily (as the learner and actors do), the same server is a note on stderr
   * that names the store once, not "shoal store: store: ...". */
  bool lazy =
      store_open_lazy(&st, "mongodb://alice:hunter2@127.0.0.1:1/db?serverSelectionTimeoutMS=300",
                      &err) == 0;
  if (lazy) store_close(st);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(logfd);
  FILE *lf = fopen(logpath, "r");
  char line[1024];
  int lines = 0;
  bool noted = false;
  while (fgets(line, sizeof line, lf)) {
    assert_null(strstr(line, "hunter2"));
    assert_null(strstr(line, "store: store:"));
    noted |= strstr(line, "shoal store: cannot reach") && strstr(line, "going on without it");
    lines++;
  }
  fclose(lf);
  if (lazy) assert_true(noted);
  unlink(logpath);
  printf("checked %d lines printed while opening bad URIs: no password\n", lines);
}

/* ---- runs ---------------------------------------------------------------- */

static void test_runs_round_trip(void **state) {
  store *st = *state;
  shoal_error err = {0};
  char run[64], other[64];
  name(run, sizeof run, "runs");
  name(other, sizeof other, "runs2");
  const char *cfg = "algo: ppo\nenv: CartPole-v1\nlr: 3.0e-4\n# ünïcode ok\n";
  double t0 = (double)time(NULL) - 1;
  assert_int_equal(store_run_create(st, run, cfg, STORE_RUN_CREATED, &err), 0);
  assert_int_equal(store_run_create(st, other, NULL, STORE_RUN_RUNNING, &err), 0);
  assert_int_equal(store_run_create(st, run, "x", STORE_RUN_RUNNING, &err), SHOAL_EEXIST);

  store_run r;
  assert_int_equal(store_run_find(st, run, &r, &err), 0);
  assert_string_equal(r.id, run);
  assert_string_equal(r.config, cfg);
  assert_int_equal(r.status, STORE_RUN_CREATED);
  assert_true(r.created_time >= t0 && r.created_time < t0 + 60);
  store_run_clear(&r);

  assert_int_equal(store_run_set_status(st, run, STORE_RUN_FINISHED, &err), 0);
  assert_int_equal(store_run_find(st, run, &r, &err), 0);
  assert_int_equal(r.status, STORE_RUN_FINISHED);
  assert_true(r.updated_time >= r.created_time);
  assert_string_equal(r.config, cfg); /* the status change leaves the config alone */
  store_run_clear(&r);

  store_run *all = NULL;
  size_t n = 0;
  assert_int_equal(store_run_list(st, &all, &n, &err), 0);
  int seen = 0;
  for (size_t i = 0; i < n; i++) {
    if (i) assert_true(strcmp(all[i - 1].id, all[i].id) < 0);
    if (strcmp(all[i].id, run) == 0 || strcmp(all[i].id, other) == 0) seen++;
  }
  assert_int_equal(seen, 2);
  store_runs_free(all, n);

  char missing[64];
  name(missing, sizeof missing, "nope");
  memset(&r, 0x5a, sizeof r);
  assert_int_equal(store_run_find(st, missing, &r, &err), SHOAL_ENOENT);
  assert_int_equal(r.status, 0x5a5a5a5a); /* untouched on error */
  assert_int_equal(store_run_set_status(st, missing, STORE_RUN_FAILED, &err), SHOAL_ENOENT);
  assert_int_equal(store_run_set_status(st, run, 99, &err), SHOAL_EINVAL);
}

static void test_names_cannot_escape(void **state) {
  store *st = *state;
  shoal_error err = {0};
  const char *bad[] = {"",
                       "..",
                       "../etc",
                       "a/b",
                       ".hidden",
                       "-x",
                       "a b",
                       "a\nb",
                       "_sweeps",
                       "x\\y",
                       "0123456789012345678901234567890123456789012345678901234567890123"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(store_run_create(st, bad[i], "", STORE_RUN_RUNNING, &err), SHOAL_EINVAL);
    assert_int_equal(store_trial_create(st, bad[i], "t", "", &err), SHOAL_EINVAL);
    assert_int_equal(store_trial_create(st, "s", bad[i], "", &err), SHOAL_EINVAL);
  }
  assert_int_equal(store_run_create(st, NULL, "", STORE_RUN_RUNNING, &err), SHOAL_EINVAL);
  assert_true(store_name_valid("a.b_c-9"));
  assert_true(store_name_valid("012345678901234567890123456789012345678901234567890123456789012"));
  char run[64];
  name(run, sizeof run, "names");
  make_run(st, run);
  store_metric m = {.step = 1, .time = 1, .value = 1};
  snprintf(m.run, sizeof m.run, "%s", run);
  const char *bad_metric[] = {"a,b", "a\"b", "/x", "a b", ""};
  for (size_t i = 0; i < sizeof bad_metric / sizeof bad_metric[0]; i++) {
    snprintf(m.name, sizeof m.name, "%s", bad_metric[i]);
    assert_int_equal(store_metrics_append(st, &m, 1, &err), SHOAL_EINVAL);
  }
  snprintf(m.name, sizeof m.name, "eval/return:mean");
  assert_int_equal(store_metrics_append(st, &m, 1, &err), 0);
}

/* ---- snapshots ----------------------------------------------------------- */

static void put_snap(store *st, const char *run, int64_t v, double score, size_t len) {
  unsigned char *b = malloc(len);
  fill(b, len, (uint64_t)v);
  store_snapshot_meta m = {.version = v,
                           .env_steps = v * 1000,
                           .updates = v * 10,
                           .wall_time = 1.7e9 + (double)v + 0.25,
                           .score = score};
  snprintf(m.run, sizeof m.run, "%s", run);
  shoal_error err = {0};
  int rc = store_snapshot_put(st, &m, b, len, &err);
  if (rc) fprintf(stderr, "snapshot_put: %s\n", err.msg);
  assert_int_equal(rc, 0);
  free(b);
}

static void check_snap(store *st, const char *run, int64_t which, int64_t want_v, size_t len) {
  shoal_error err = {0};
  store_snapshot_meta m;
  void *b = NULL;
  size_t n = 0;
  int rc = store_snapshot_get(st, run, which, &m, &b, &n, &err);
  if (rc) fprintf(stderr, "snapshot_get: %s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(m.version, want_v);
  assert_int_equal(n, len);
  assert_int_equal(m.size, len);
  assert_int_equal(m.env_steps, want_v * 1000);
  assert_int_equal(m.updates, want_v * 10);
  assert_true(m.wall_time == 1.7e9 + (double)want_v + 0.25);
  assert_string_equal(m.run, run);
  unsigned char *ref = malloc(len ? len : 1);
  fill(ref, len, (uint64_t)want_v);
  assert_memory_equal(b, ref, len);
  free(ref);
  free(b);
}

static void test_snapshots_latest_best(void **state) {
  store *st = *state;
  shoal_error err = {0};
  char run[64], empty[64];
  name(run, sizeof run, "snaps");
  name(empty, sizeof empty, "snaps-empty");
  make_run(st, run);
  make_run(st, empty);
  void *b = NULL;
  size_t n = 0;
  assert_int_equal(store_snapshot_get(st, run, STORE_LATEST, NULL, &b, &n, &err), SHOAL_ENOENT);
  put_snap(st, run, 1, 1.0, 1000);
  put_snap(st, run, 2, 3.5, 2000);
  put_snap(st, run, 3, NAN, 3000);
  put_snap(st, run, 5, -2.0, 0);   /* an empty snapshot is still a snapshot */
  put_snap(st, run, 4, 3.5, 4000); /* ties the best score: the higher version wins */
  check_snap(st, run, STORE_LATEST, 5, 0);
  check_snap(st, run, STORE_BEST, 4, 4000);
  check_snap(st, run, 3, 3, 3000);
  check_snap(st, run, 1, 1, 1000);

  store_snapshot_meta *list = NULL;
  assert_int_equal(store_snapshot_list(st, run, &list, &n, &err), 0);
  assert_int_equal(n, 5);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(list[i].version, (int64_t)i + 1);
    assert_int_equal(list[i].size, (uint64_t)((i + 1) % 5) * 1000);
  }
  assert_true(isnan(list[2].score));
  assert_true(list[1].score == 3.5);
  free(list);

  /* A version is written once. */
  unsigned char x[4] = {1, 2, 3, 4};
  store_snapshot_meta m = {.version = 2, .score = 9};
  snprintf(m.run, sizeof m.run, "%s", run);
  err = (shoal_error){0};
  assert_int_equal(store_snapshot_put(st, &m, x, 4, &err), SHOAL_EEXIST);
  assert_non_null(strstr(err.msg, run));
  assert_non_null(strstr(err.msg, "snapshot 2 "));
  check_snap(st, run, 2, 2, 2000);
  m.version = -3;
  assert_int_equal(store_snapshot_put(st, &m, x, 4, &err), SHOAL_EINVAL);
  m.version = 6;
  m.score = INFINITY;
  assert_int_equal(store_snapshot_put(st, &m, x, 4, &err), SHOAL_EINVAL);

  b = (void *)0x1;
  assert_int_equal(store_snapshot_get(st, run, 17, NULL, &b, &n, &err), SHOAL_ENOENT);
  assert_ptr_equal(b, (void *)0x1);
  put_snap(st, empty, 1, NAN, 10);
  assert_int_equal(store_snapshot_get(st, empty, STORE_BEST, NULL, &b, &n, &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, "score"));

  char ghost[64];
  name(ghost, sizeof ghost, "ghost");
  snprintf(m.run, sizeof m.run, "%s", ghost);
  m.score = 1;
  assert_int_equal(store_snapshot_put(st, &m, x, 4, &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, ghost));
}

static void test_snapshot_over_16mb(void **state) {
  store *st = *state;
  char run[64];
  name(run, sizeof run, "big");
  make_run(st, run);
  size_t len = (size_t)20 * 1024 * 1024 + 12345;
  put_snap(st, run, 1, 0.5, len);
  check_snap(st, run, STORE_LATEST, 1, len);
}

/* ---- replay -------------------------------------------------------------- */

typedef struct {
  uint64_t seqs[64];
  size_t n;
  int bad;
  size_t stop_after;
} replay_ctx;

static int on_segment(void *ctx, uint64_t seq, const void *bytes, size_t len) {
  replay_ctx *c = ctx;
  size_t want = 100 + (size_t)seq * 37;
  unsigned char ref[1000];
  fill(ref, want, seq + 1000);
  if (len != want || memcmp(ref, bytes, len) != 0) c->bad++;
  c->seqs[c->n++] = seq;
  return c->stop_after && c->n == c->stop_after ? 42 : 0;
}

static void test_replay_round_trip(void **state) {
  store *st = *state;
  shoal_error err = {0};
  char run[64];
  name(run, sizeof run, "replay");
  make_run(st, run);
  replay_ctx c = {0};
  assert_int_equal(store_replay_iter(st, run, 0, on_segment, &c, &err), 0);
  assert_int_equal(c.n, 0);
  /* Appended out of order: iteration is by seq. */
  const uint64_t order[] = {3, 0, 1, 7, 2, 4, 6, 5, 9, 8, 12};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    uint64_t s = order[i];
    size_t len = 100 + (size_t)s * 37;
    unsigned char buf[1000];
    fill(buf, len, s + 1000);
    assert_int_equal(store_replay_append(st, run, s, buf, len, &err), 0);
  }
  unsigned char one = 1;
  assert_int_equal(store_replay_append(st, run, 3, &one, 1, &err), SHOAL_EEXIST);
  assert_int_equal(store_replay_append(st, run, 99, &one, 0, &err), SHOAL_EINVAL);
  assert_int_equal(store_replay_append(st, run, 99, &one, STORE_REPLAY_SEGMENT_MAX + 1, &err),
                   SHOAL_EINVAL);

  assert_int_equal(store_replay_iter(st, run, 0, on_segment, &c, &err), 0);
  assert_int_equal(c.n, 11);
  assert_int_equal(c.bad, 0);
  for (size_t i = 0; i < 10; i++) assert_int_equal(c.seqs[i], i);
  assert_int_equal(c.seqs[10], 12);

  memset(&c, 0, sizeof c);
  assert_int_equal(store_replay_iter(st, run, 6, on_segment, &c, &err), 0);
  assert_int_equal(c.n, 5); /* 6, 7, 8, 9, 12 */
  assert_int_equal(c.seqs[0], 6);

  memset(&c, 0, sizeof c);
  c.stop_after = 2;
  assert_int_equal(store_replay_iter(st, run, 0, on_segment, &c, &err), 42);
  assert_int_equal(c.n, 2);

  char ghost[64];
  name(ghost, sizeof ghost, "ghost-replay");
  assert_int_equal(store_replay_iter(st, ghost, 0, on_segment, &c, &err), SHOAL_ENOENT);
  assert_int_equal(store_replay_append(st, ghost, 0, &one, 1, &err), SHOAL_ENOENT);
}

/* List, read one, trim: what the learner's replay log needs, on either backend. */
static void test_replay_list_read_trim(void **state) {
  store *st = *state;
  shoal_error err = {0};
  char run[64];
  name(run, sizeof run, "replay-trim");
  make_run(st, run);
  uint64_t *seqs = NULL;
  size_t n = 99;
  assert_int_equal(store_replay_list(st, run, &seqs, &n, &err), 0);
  assert_int_equal(n, 0);
  assert_null(seqs);
  const uint64_t order[] = {4, 0, 2, 1, 3, 9};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    size_t len = 100 + (size_t)order[i] * 37;
    unsigned char buf[1000];
    fill(buf, len, order[i] + 1000);
    assert_int_equal(store_replay_append(st, run, order[i], buf, len, &err), 0);
  }
  assert_int_equal(store_replay_list(st, run, &seqs, &n, &err), 0);
  assert_int_equal(n, 6);
  const uint64_t want[] = {0, 1, 2, 3, 4, 9};
  for (size_t i = 0; i < n; i++) assert_int_equal(seqs[i], want[i]);
  free(seqs);

  void *bytes = NULL;
  size_t len = 0;
  assert_int_equal(store_replay_read(st, run, 3, &bytes, &len, &err), 0);
  unsigned char ref[1000];
  fill(ref, 100 + 3 * 37, 1003);
  assert_int_equal(len, 100 + 3 * 37);
  assert_memory_equal(bytes, ref, len);
  free(bytes);
  bytes = NULL;
  assert_int_equal(store_replay_read(st, run, 5, &bytes, &len, &err), SHOAL_ENOENT);
  assert_null(bytes);
  assert_non_null(strstr(err.msg, "no replay segment 5"));

  size_t removed = 0;
  assert_int_equal(store_replay_trim(st, run, 3, &removed, &err), 0);
  assert_int_equal(removed, 3);
  /* Again, and below what is gone already: nothing more, no error. */
  assert_int_equal(store_replay_trim(st, run, 3, &removed, &err), 0);
  assert_int_equal(removed, 0);
  assert_int_equal(store_replay_list(st, run, &seqs, &n, &err), 0);
  assert_int_equal(n, 3);
  assert_int_equal(seqs[0], 3);
  assert_int_equal(seqs[2], 9);
  free(seqs);
  assert_int_equal(store_replay_read(st, run, 1, &bytes, &len, &err), SHOAL_ENOENT);

  char ghost[64];
  name(ghost, sizeof ghost, "ghost-trim");
  assert_int_equal(store_replay_list(st, ghost, &seqs, &n, &err), SHOAL_ENOENT);
  if (!g_file) { /* MongoDB keeps nothing in a local folder */
    char dir[256];
    assert_int_equal(store_local_dir(st, run, dir, sizeof dir, &err), SHOAL_ENOTSUP);
    assert_non_null(strstr(err.msg, "no local files"));
  }
}

/* ---- metrics ------------------------------------------------------------- */

static void test_metrics_round_trip(void **state) {
  store *st = *state;
  shoal_error err = {0};
  char run[64];
  name(run, sizeof run, "metrics");
  make_run(st, run);
  store_metric *out = NULL;
  size_t n = 0;
  assert_int_equal(store_metrics_query(st, run, NULL, INT64_MIN, INT64_MAX, &out, &n, &err), 0);
  assert_int_equal(n, 0);
  assert_null(out);

  store_metric rows[300];
  const char *names[3] = {"loss", "eval/return", "lr"};
  for (int i = 0; i < 300; i++) {
    memset(&rows[i], 0, sizeof rows[i]);
    snprintf(rows[i].run, sizeof rows[i].run, "%s", run);
    snprintf(rows[i].name, sizeof rows[i].name, "%s", names[i % 3]);
    rows[i].step = (i / 3) * 10;
    rows[i].time = 1.7e9 + i * 0.001;
    rows[i].value = i % 3 == 0 ? 1.0 / (i + 1) : i * 0.1;
  }
  rows[30].value = NAN;
  rows[33].value = -INFINITY;
  assert_int_equal(store_metrics_append(st, rows, 150, &err), 0);
  assert_int_equal(store_metrics_append(st, rows + 150, 150, &err), 0);

  assert_int_equal(store_metrics_query(st, run, "loss", 100, 200, &out, &n, &err), 0);
  assert_int_equal(n, 11); /* steps 100, 110, ..., 200 */
  for (size_t i = 0; i < n; i++) {
    int src = (int)(30 + 3 * i);
    assert_string_equal(out[i].name, "loss");
    assert_string_equal(out[i].run, run);
    assert_int_equal(out[i].step, 100 + 10 * (int64_t)i);
    assert_true(out[i].time == rows[src].time);
    if (src == 30)
      assert_true(isnan(out[i].value));
    else if (src == 33)
      assert_true(isinf(out[i].value) && out[i].value < 0);
    else
      assert_true(out[i].value == rows[src].value); /* exact: 17 significant digits */
  }
  free(out);

  assert_int_equal(store_metrics_query(st, run, NULL, 0, 9, &out, &n, &err), 0);
  assert_int_equal(n, 3); /* step 0 of each name, in the order appended */
  assert_string_equal(out[0].name, "loss");
  assert_string_equal(out[1].name, "eval/return");
  assert_string_equal(out[2].name, "lr");
  free(out);

  /* A later row with an earlier step sorts by step. */
  store_metric late = rows[0];
  late.step = 5;
  late.value = 123;
  assert_int_equal(store_metrics_append(st, &late, 1, &err), 0);
  assert_int_equal(store_metrics_query(st, run, "loss", 0, 10, &out, &n, &err), 0);
  assert_int_equal(n, 3);
  assert_int_equal(out[0].step, 0);
  assert_int_equal(out[1].step, 5);
  assert_true(out[1].value == 123);
  assert_int_equal(out[2].step, 10);
  free(out);

  assert_int_equal(store_metrics_query(st, run, NULL, INT64_MIN, INT64_MAX, &out, &n, &err), 0);
  assert_int_equal(n, 301);
  free(out);

  char ghost[64];
  name(ghost, sizeof ghost, "ghost-metrics");
  snprintf(late.run, sizeof late.run, "%s", ghost);
  assert_int_equal(store_metrics_append(st, &late, 1, &err), SHOAL_ENOENT);
  assert_int_equal(store_metrics_query(st, ghost, NULL, 0, 1, &out, &n, &err), SHOAL_ENOENT);
  late = rows[0];
  late.time = NAN;
  assert_int_equal(store_metrics_append(st, &late, 1, &err), SHOAL_EINVAL);
}

/* ---- trials -------------------------------------------------------------- */

static void test_trials_lifecycle(void **state) {
  store *st = *state;
  shoal_error err = {0};
  char sweep[64];
  name(sweep, sizeof sweep, "sweep");
  store_trial t;
  assert_int_equal(store_trial_claim(st, sweep, "w1", &t, &err), SHOAL_ENOENT);
  for (int i = 0; i < 4; i++) {
    char id[16], params[64];
    snprintf(id, sizeof id, "t%d", i);
    snprintf(params, sizeof params, "lr: %g\n", 1e-3 * (i + 1));
    assert_int_equal(store_trial_create(st, sweep, id, params, &err), 0);
    usleep(2000); /* creation order is by time */
  }
  assert_int_equal(store_trial_create(st, sweep, "t1", "", &err), SHOAL_EEXIST);

  assert_int_equal(store_trial_claim(st, sweep, "host-a:101", &t, &err), 0);
  assert_string_equal(t.id, "t0");
  assert_string_equal(t.sweep, sweep);
  assert_string_equal(t.params, "lr: 0.001\n");
  assert_int_equal(t.status, STORE_TRIAL_RUNNING);
  assert_string_equal(t.worker, "host-a:101");
  assert_int_equal(t.attempt, 1);
  assert_true(t.heartbeat_time > 0);
  assert_null(t.result);
  store_trial_clear(&t);

  assert_int_equal(store_trial_heartbeat(st, sweep, "t0", "host-a:101", &err), 0);
  assert_int_equal(store_trial_heartbeat(st, sweep, "t0", "host-b:7", &err), SHOAL_EPERM);
  assert_int_equal(store_trial_heartbeat(st, sweep, "t1", "host-a:101", &err), SHOAL_EPERM);
  assert_int_equal(store_trial_heartbeat(st, sweep, "t9", "host-a:101", &err), SHOAL_ENOENT);
  assert_int_equal(store_trial_complete(st, sweep, "t0", "host-b:7", STORE_TRIAL_DONE, "x", &err),
                   SHOAL_EPERM);
  assert_int_equal(
      store_trial_complete(st, sweep, "t0", "host-a:101", STORE_TRIAL_RUNNING, "x", &err),
      SHOAL_EINVAL);
  assert_int_equal(store_trial_complete(st, sweep, "t0", "host-a:101", STORE_TRIAL_DONE,
                                        "return: 487.5\n", &err),
                   0);
  assert_int_equal(
      store_trial_complete(st, sweep, "t0", "host-a:101", STORE_TRIAL_DONE, "again", &err),
      SHOAL_EEXIST);
  assert_int_equal(store_trial_heartbeat(st, sweep, "t0", "host-a:101", &err), SHOAL_EPERM);
  assert_int_equal(store_trial_get(st, sweep, "t0", &t, &err), 0);
  assert_int_equal(t.status, STORE_TRIAL_DONE);
  assert_string_equal(t.result, "return: 487.5\n");
  store_trial_clear(&t);

  /* A stale claim goes back to pending; its worker then loses it. */
  assert_int_equal(store_trial_claim(st, sweep, "w-slow", &t, &err), 0);
  assert_string_equal(t.id, "t1");
  store_trial_clear(&t);
  size_t nreq = 99;
  assert_int_equal(store_trial_requeue_stale(st, sweep, 3600, &nreq, &err), 0);
  assert_int_equal(nreq, 0);
  usleep(30000);
  assert_int_equal(store_trial_requeue_stale(st, sweep, 0.01, &nreq, &err), 0);
  assert_int_equal(nreq, 1);
  assert_int_equal(store_trial_get(st, sweep, "t1", &t, &err), 0);
  assert_int_equal(t.status, STORE_TRIAL_PENDING);
  store_trial_clear(&t);
  assert_int_equal(store_trial_heartbeat(st, sweep, "t1", "w-slow", &err), SHOAL_EPERM);
  assert_int_equal(store_trial_claim(st, sweep, "w-fast", &t, &err), 0);
  assert_string_equal(t.id, "t1");
  assert_int_equal(t.attempt, 2);
  store_trial_clear(&t);
  assert_int_equal(store_trial_complete(st, sweep, "t1", "w-slow", STORE_TRIAL_DONE, "late", &err),
                   SHOAL_EPERM);
  assert_int_equal(
      store_trial_complete(st, sweep, "t1", "w-fast", STORE_TRIAL_FAILED, "diverged", &err), 0);

  /* A worker that stops hands its trial back at once: pending, the next claim a new
   * attempt; the claim is gone, and a complete trial is not handed back. */
  assert_int_equal(store_trial_claim(st, sweep, "w-quit", &t, &err), 0);
  assert_string_equal(t.id, "t2");
  store_trial_clear(&t);
  assert_int_equal(store_trial_release(st, sweep, "t2", "w-other", &err), SHOAL_EPERM);
  assert_int_equal(store_trial_release(st, sweep, "t2", "w-quit", &err), 0);
  assert_int_equal(store_trial_get(st, sweep, "t2", &t, &err), 0);
  assert_int_equal(t.status, STORE_TRIAL_PENDING);
  store_trial_clear(&t);
  assert_int_equal(store_trial_heartbeat(st, sweep, "t2", "w-quit", &err), SHOAL_EPERM);
  assert_int_equal(store_trial_release(st, sweep, "t2", "w-quit", &err), SHOAL_EPERM);
  assert_int_equal(store_trial_complete(st, sweep, "t2", "w-quit", STORE_TRIAL_DONE, "x", &err),
                   SHOAL_EPERM);
  assert_int_equal(store_trial_release(st, sweep, "t0", "host-a:101", &err), SHOAL_EEXIST);
  assert_int_equal(store_trial_claim(st, sweep, "w-next", &t, &err), 0);
  assert_string_equal(t.id, "t2");
  assert_int_equal(t.attempt, 2);
  store_trial_clear(&t);
  assert_int_equal(store_trial_release(st, sweep, "t2", "w-next", &err), 0);

  store_trial *all = NULL;
  size_t n = 0;
  assert_int_equal(store_trial_list(st, sweep, &all, &n, &err), 0);
  assert_int_equal(n, 4);
  assert_string_equal(all[0].id, "t0");
  assert_int_equal(all[0].status, STORE_TRIAL_DONE);
  assert_int_equal(all[1].status, STORE_TRIAL_FAILED);
  assert_string_equal(all[1].result, "diverged");
  assert_int_equal(all[2].status, STORE_TRIAL_PENDING);
  assert_int_equal(all[3].status, STORE_TRIAL_PENDING);
  store_trials_free(all, n);
}

/* ---- concurrency --------------------------------------------------------- */

enum { THREADS = 6, T_BATCHES = 40, T_ROWS = 10, CLAIM_TRIALS = 36 };

typedef struct {
  store *st;
  const char *run;
  const char *sweep;
  int idx;
  int failures;
  char claimed[CLAIM_TRIALS][16];
  int n_claimed;
} thread_arg;

static void *writer_thread(void *p) {
  thread_arg *a = p;
  shoal_error err = {0};
  for (int b = 0; b < T_BATCHES; b++) {
    store_metric rows[T_ROWS];
    for (int i = 0; i < T_ROWS; i++) {
      memset(&rows[i], 0, sizeof rows[i]);
      snprintf(rows[i].run, sizeof rows[i].run, "%s", a->run);
      snprintf(rows[i].name, sizeof rows[i].name, "thread%d", a->idx);
      rows[i].step = b * T_ROWS + i;
      rows[i].time = 1.7e9;
      rows[i].value = a->idx * 1e6 + b * T_ROWS + i;
    }
    if (store_metrics_append(a->st, rows, T_ROWS, &err)) a->failures++;
    if (b % 8 == 0) {
      unsigned char buf[3000];
      int64_t v = a->idx * 100 + b;
      fill(buf, sizeof buf, (uint64_t)v);
      store_snapshot_meta m = {.version = v, .score = (double)v};
      snprintf(m.run, sizeof m.run, "%s", a->run);
      if (store_snapshot_put(a->st, &m, buf, sizeof buf, &err)) a->failures++;
      if (store_replay_append(a->st, a->run, (uint64_t)v, buf, 100, &err)) a->failures++;
    }
  }
  return NULL;
}

static void test_concurrent_writers(void **state) {
  store *st = *state;
  shoal_error err = {0};
  char run[64];
  name(run, sizeof run, "concurrent");
  make_run(st, run);
  pthread_t th[THREADS];
  thread_arg args[THREADS];
  for (int i = 0; i < THREADS; i++) {
    args[i] = (thread_arg){.st = st, .run = run, .idx = i};
    pthread_create(&th[i], NULL, writer_thread, &args[i]);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(args[i].failures, 0);
  }
  store_metric *out = NULL;
  size_t n = 0;
  assert_int_equal(store_metrics_query(st, run, NULL, INT64_MIN, INT64_MAX, &out, &n, &err), 0);
  assert_int_equal(n, THREADS * T_BATCHES * T_ROWS);
  /* Each thread's rows are all there, each once, with their values. */
  int *seen = calloc(THREADS * T_BATCHES * T_ROWS, sizeof *seen);
  for (size_t i = 0; i < n; i++) {
    int t = out[i].name[6] - '0';
    int64_t s = out[i].step;
    assert_true(out[i].value == t * 1e6 + (double)s);
    seen[t * T_BATCHES * T_ROWS + s]++;
  }
  for (int i = 0; i < THREADS * T_BATCHES * T_ROWS; i++) assert_int_equal(seen[i], 1);
  free(seen);
  free(out);
  /* Every snapshot is in the index (its updates were serialized). */
  store_snapshot_meta *list = NULL;
  assert_int_equal(store_snapshot_list(st, run, &list, &n, &err), 0);
  assert_int_equal(n, THREADS * ((T_BATCHES + 7) / 8));
  free(list);
  void *b = NULL;
  store_snapshot_meta m;
  assert_int_equal(store_snapshot_get(st, run, STORE_BEST, &m, &b, &n, &err), 0);
  assert_int_equal(m.version, (THREADS - 1) * 100 + 32);
  free(b);
}

/* Writers of one snapshot version at the same time (several GridFS chunks each on
 * MongoDB, where a loser finds the version either when it looks before writing or when
 * its files document meets the unique index at the close): one copy is stored, whole;
 * every other writer gets SHOAL_EEXIST naming the run and the version. */
enum { RACERS = 6, RACE_BYTES = (3 << 20) + 5 };
typedef struct {
  store *st;
  const char *run;
  int idx, rc;
  shoal_error err;
  pthread_barrier_t *go;
} racer;

static void *snapshot_racer(void *p) {
  racer *a = p;
  store_snapshot_meta m = {.version = 7, .score = a->idx, .env_steps = a->idx};
  snprintf(m.run, sizeof m.run, "%s", a->run);
  unsigned char *b = malloc(RACE_BYTES);
  fill(b, RACE_BYTES, (uint64_t)a->idx + 1);
  pthread_barrier_wait(a->go);
  a->rc = store_snapshot_put(a->st, &m, b, RACE_BYTES, &a->err);
  free(b);
  return NULL;
}

static void test_snapshot_same_version_racing(void **state) {
  store *st = *state;
  shoal_error err = {0};
  char run[64];
  name(run, sizeof run, "snaprace");
  make_run(st, run);
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, RACERS);
  pthread_t th[RACERS];
  racer a[RACERS];
  for (int i = 0; i < RACERS; i++) {
    a[i] = (racer){.st = st, .run = run, .idx = i, .go = &go};
    assert_int_equal(pthread_create(&th[i], NULL, snapshot_racer, &a[i]), 0);
  }
  int won = -1;
  for (int i = 0; i < RACERS; i++) {
    pthread_join(th[i], NULL);
    if (a[i].rc == 0) {
      assert_int_equal(won, -1);
      won = i;
      continue;
    }
    if (a[i].rc != SHOAL_EEXIST) fail_msg("writer %d: %d %s", i, a[i].rc, a[i].err.msg);
    assert_non_null(strstr(a[i].err.msg, run));
    assert_non_null(strstr(a[i].err.msg, "snapshot 7 "));
  }
  pthread_barrier_destroy(&go);
  assert_true(won >= 0);
  void *b = NULL;
  size_t n = 0;
  store_snapshot_meta m;
  assert_int_equal(store_snapshot_get(st, run, 7, &m, &b, &n, &err), 0);
  assert_int_equal(n, RACE_BYTES);
  assert_int_equal(m.env_steps, won);
  unsigned char *want = malloc(RACE_BYTES);
  fill(want, RACE_BYTES, (uint64_t)won + 1);
  assert_memory_equal(b, want, RACE_BYTES);
  free(want);
  free(b);
  store_snapshot_meta *list = NULL;
  assert_int_equal(store_snapshot_list(st, run, &list, &n, &err), 0);
  assert_int_equal(n, 1);
  free(list);
}

static void *claim_thread(void *p) {
  thread_arg *a = p;
  shoal_error err = {0};
  char worker[32];
  snprintf(worker, sizeof worker, "thread-%d", a->idx);
  for (;;) {
    store_trial t;
    int rc = store_trial_claim(a->st, a->sweep, worker, &t, &err);
    if (rc == SHOAL_ENOENT) break;
    if (rc) {
      a->failures++;
      break;
    }
    snprintf(a->claimed[a->n_claimed++], 16, "%.15s", t.id);
    if (store_trial_complete(a->st, a->sweep, t.id, worker, STORE_TRIAL_DONE, "ok", &err))
      a->failures++;
    store_trial_clear(&t);
  }
  return NULL;
}

static void create_trials(store *st, const char *sweep, int n) {
  shoal_error err = {0};
  for (int i = 0; i < n; i++) {
    char id[16];
    snprintf(id, sizeof id, "trial%02d", i);
    assert_int_equal(store_trial_create(st, sweep, id, "p", &err), 0);
  }
}

static void test_concurrent_claims_threads(void **state) {
  store *st = *state;
  char sweep[64];
  name(sweep, sizeof sweep, "claims-threads");
  create_trials(st, sweep, CLAIM_TRIALS);
  pthread_t th[THREADS];
  thread_arg *args = calloc(THREADS, sizeof *args);
  for (int i = 0; i < THREADS; i++) {
    args[i] = (thread_arg){.st = st, .sweep = sweep, .idx = i};
    pthread_create(&th[i], NULL, claim_thread, &args[i]);
  }
  int count[CLAIM_TRIALS] = {0};
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(args[i].failures, 0);
    for (int k = 0; k < args[i].n_claimed; k++) count[atoi(args[i].claimed[k] + 5)]++;
  }
  for (int i = 0; i < CLAIM_TRIALS; i++) assert_int_equal(count[i], 1);
  free(args);
}

/* The child of the two-process test: claims until none is pending, printing each id. */
static int claim_worker_main(const char *uri, const char *sweep, const char *worker) {
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) {
    fprintf(stderr, "claim-worker: %s\n", err.msg);
    return 2;
  }
  int rc = 0;
  for (;;) {
    store_trial t;
    int r = store_trial_claim(st, sweep, worker, &t, &err);
    if (r == SHOAL_ENOENT) break;
    if (r) {
      fprintf(stderr, "claim-worker: %s\n", err.msg);
      rc = 3;
      break;
    }
    printf("%s\n", t.id);
    fflush(stdout);
    if (store_trial_complete(st, sweep, t.id, worker, STORE_TRIAL_DONE, worker, &err)) rc = 4;
    store_trial_clear(&t);
  }
  store_close(st);
  return rc;
}

static void test_concurrent_claims_processes(void **state) {
  store *st = *state;
  char sweep[64];
  name(sweep, sizeof sweep, "claims-procs");
  enum { PROCS = 3 };
  create_trials(st, sweep, CLAIM_TRIALS);
  int fds[PROCS];
  pid_t pids[PROCS];
  for (int p = 0; p < PROCS; p++) {
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      char worker[32];
      snprintf(worker, sizeof worker, "proc-%d", p);
      dup2(pfd[1], 1);
      close(pfd[0]);
      execl(g_self, g_self, "claim-worker", g_uri, sweep, worker, (char *)NULL);
      _exit(127);
    }
    close(pfd[1]);
    fds[p] = pfd[0];
    pids[p] = pid;
  }
  int count[CLAIM_TRIALS] = {0}, per_proc[PROCS] = {0};
  for (int p = 0; p < PROCS; p++) {
    FILE *f = fdopen(fds[p], "r");
    char line[64];
    while (fgets(line, sizeof line, f)) {
      int k = atoi(line + 5);
      assert_true(k >= 0 && k < CLAIM_TRIALS);
      count[k]++;
      per_proc[p]++;
    }
    fclose(f);
    int status = 0;
    waitpid(pids[p], &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  for (int i = 0; i < CLAIM_TRIALS; i++) assert_int_equal(count[i], 1);
  /* Every trial's result names the process that completed it. */
  shoal_error err = {0};
  store_trial *all = NULL;
  size_t n = 0;
  assert_int_equal(store_trial_list(st, sweep, &all, &n, &err), 0);
  assert_int_equal(n, CLAIM_TRIALS);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(all[i].status, STORE_TRIAL_DONE);
    assert_string_equal(all[i].result, all[i].worker);
  }
  store_trials_free(all, n);
}

/* ---- file backend only --------------------------------------------------- */

static int count_tmp(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) n += strncmp(de->d_name, ".tmp.", 5) == 0;
  if (d) closedir(d);
  return n;
}

/* A child writes snapshots of 4 MB in a loop and is killed with SIGKILL at a random
 * moment; every snapshot the store then lists loads whole and matches its version. */
static void test_killed_mid_write_keeps_previous(void **state) {
  store *st = *state;
  shoal_error err = {0};
  char run[64];
  name(run, sizeof run, "killed");
  make_run(st, run);
  const size_t len = (size_t)4 << 20;
  put_snap(st, run, 0, 0.0, len);
  struct timespec seed;
  clock_gettime(CLOCK_MONOTONIC, &seed);
  srand((unsigned)seed.tv_nsec);
  int64_t next = 1;
  int killed_mid_write = 0;
  char snapdir[700];
  snprintf(snapdir, sizeof snapdir, "%s/store/%s/snapshots", g_dir, run);
  for (int round = 0; round < 4; round++) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      store *cs;
      if (store_open(&cs, g_uri, NULL)) _exit(2);
      unsigned char *b = malloc(len);
      for (int64_t v = next;; v++) {
        fill(b, len, (uint64_t)v);
        store_snapshot_meta m = {.version = v,
                                 .env_steps = v * 1000,
                                 .updates = v * 10,
                                 .wall_time = 1.7e9 + (double)v + 0.25,
                                 .score = (double)v};
        snprintf(m.run, sizeof m.run, "%s", run);
        if (store_snapshot_put(cs, &m, b, len, NULL)) _exit(3);
      }
    }
    /* Wait a random time, then until a write is under way (a temporary file of a
     * snapshot or of the index exists), and kill it there. */
    usleep((useconds_t)(rand() % 100000));
    int mid_write = 0;
    for (int spin = 0; spin < 200000 && !mid_write; spin++) mid_write = count_tmp(snapdir) > 0;
    kill(pid, SIGKILL);
    killed_mid_write += mid_write;
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status)); /* killed, not failed */
    store_snapshot_meta *list = NULL;
    size_t n = 0;
    assert_int_equal(store_snapshot_list(st, run, &list, &n, &err), 0);
    assert_true(n >= 1);
    for (size_t i = 0; i < n; i++) assert_int_equal(list[i].version, (int64_t)i);
    int64_t latest = list[n - 1].version;
    free(list);
    check_snap(st, run, STORE_LATEST, latest, len);
    check_snap(st, run, 0, 0, len);
    next = latest + 1;
  }
  assert_true(killed_mid_write >= 3); /* the polling above makes it 4 but for a rare race */
  /* The next put removes what the killed writers left. (Whether the last kill left a
   * temporary file depends on where it landed; under load it may have landed just after
   * a rename, so only the sweep itself is asserted.) */
  put_snap(st, run, next, 1.0, 1000);
  assert_int_equal(count_tmp(snapdir), 0);
  check_snap(st, run, STORE_LATEST, next, 1000);
}

static int mount_tmpfs(const char *dir, const char *size) {
  char opts[64];
  snprintf(opts, sizeof opts, "size=%s", size);
  return mount("tmpfs", dir, "tmpfs", 0, opts);
}

static void test_full_disk_is_a_clear_error(void **state) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/tiny", g_dir);
  assert_int_equal(mkdir(dir, 0755), 0);
  if (mount_tmpfs(dir, "1m") != 0) {
    printf("SKIPPED: full-disk case: cannot mount a tmpfs at %s (%s)\n", dir, strerror(errno));
    skip();
  }
  char uri[700];
  snprintf(uri, sizeof uri, "file://%s", dir);
  store *st;
  shoal_error err = {0};
  assert_int_equal(store_open(&st, uri, &err), 0);
  make_run(st, "r");
  put_snap(st, "r", 1, 1.0, 100000);
  unsigned char *big = malloc(2 << 20);
  fill(big, 2 << 20, 2);
  store_snapshot_meta m = {.version = 2, .score = 2};
  snprintf(m.run, sizeof m.run, "r");
  int rc = store_snapshot_put(st, &m, big, 2 << 20, &err);
  assert_int_equal(rc, SHOAL_EIO);
  assert_non_null(strstr(err.msg, "No space left on device"));
  check_snap(st, "r", STORE_LATEST, 1, 100000);
  /* No temporary file is left to hold the space. */
  assert_int_equal(store_snapshot_put(st, &m, big, 700000, &err), 0);
  /* Metrics: an append that does not fit fails whole; the rows before stay. */
  store_metric rows[1000];
  for (int i = 0; i < 1000; i++) {
    memset(&rows[i], 0, sizeof rows[i]);
    snprintf(rows[i].run, sizeof rows[i].run, "r");
    snprintf(rows[i].name, sizeof rows[i].name, "a.rather.long.metric.name.to.fill.the.disk.up");
    rows[i].step = i;
    rows[i].time = 1.7e9;
    rows[i].value = i;
  }
  assert_int_equal(store_metrics_append(st, rows, 10, &err), 0);
  int failed = 0;
  for (int k = 0; k < 40 && !failed; k++) {
    rc = store_metrics_append(st, rows, 1000, &err);
    if (rc) {
      failed = 1;
      assert_int_equal(rc, SHOAL_EIO);
      assert_non_null(strstr(err.msg, "metrics.csv"));
    }
  }
  assert_true(failed);
  store_metric *out = NULL;
  size_t n = 0;
  assert_int_equal(store_metrics_query(st, "r", NULL, INT64_MIN, INT64_MAX, &out, &n, &err), 0);
  assert_int_equal(n % 1000, 10);
  free(out);
  free(big);
  store_close(st);
  umount2(dir, MNT_DETACH);
}

static void test_read_only_is_a_clear_error(void **state) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/ro", g_dir);
  assert_int_equal(mkdir(dir, 0755), 0);
  if (mount_tmpfs(dir, "4m") != 0) {
    printf("SKIPPED: read-only case: cannot mount a tmpfs at %s (%s)\n", dir, strerror(errno));
    skip();
  }
  char uri[700];
  snprintf(uri, sizeof uri, "file://%s", dir);
  store *st;
  shoal_error err = {0};
  assert_int_equal(store_open(&st, uri, &err), 0);
  make_run(st, "r");
  put_snap(st, "r", 1, 1.0, 1000);
  if (mount("tmpfs", dir, "tmpfs", MS_REMOUNT | MS_RDONLY, NULL) != 0) {
    store_close(st);
    umount2(dir, MNT_DETACH);
    printf("SKIPPED: read-only case: cannot remount %s read-only (%s)\n", dir, strerror(errno));
    skip();
  }
  store_snapshot_meta m = {.version = 2, .score = 2};
  snprintf(m.run, sizeof m.run, "r");
  unsigned char b[10] = {0};
  assert_int_equal(store_snapshot_put(st, &m, b, 10, &err), SHOAL_EIO);
  assert_non_null(strstr(err.msg, "Read-only file system"));
  store_metric row = {.step = 1, .time = 1, .value = 1};
  snprintf(row.run, sizeof row.run, "r");
  snprintf(row.name, sizeof row.name, "x");
  assert_int_equal(store_metrics_append(st, &row, 1, &err), SHOAL_EIO);
  assert_int_equal(store_run_create(st, "r2", "", STORE_RUN_RUNNING, &err), SHOAL_EIO);
  /* Reading still works. */
  check_snap(st, "r", STORE_LATEST, 1, 1000);
  store_close(st);
  /* Opening a read-only store works too, for reading. */
  assert_int_equal(store_open(&st, uri, &err), 0);
  check_snap(st, "r", 1, 1, 1000);
  store_close(st);
  umount2(dir, MNT_DETACH);
}

/* Entries of dir whose name starts with prefix; the inode of the last in *ino. */
static int count_named(const char *dir, const char *prefix, ino_t *ino) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (!strncmp(de->d_name, prefix, strlen(prefix))) {
      n++;
      if (ino) *ino = de->d_ino;
    }
  if (d) closedir(d);
  return n;
}

static ino_t seg_ino(const char *dir, uint64_t seq) {
  char p[1000];
  struct stat sb;
  snprintf(p, sizeof p, "%s/%020" PRIu64 ".bin", dir, seq);
  assert_int_equal(stat(p, &sb), 0);
  return sb.st_ino;
}

/* Trimmed segments become spares that the next appends write into (their inodes, cut
 * to the new length), at most 64 a process, never listed or read as segments; a clean
 * close removes them, one a killed process left is taken up by the next trim, and
 * SHOAL_STORE_SPARES=0 keeps none. */
static void test_replay_spares(void **state) {
  store *st = *state;
  shoal_error err = {0};
  char run[64], dir[900];
  name(run, sizeof run, "spares");
  make_run(st, run);
  snprintf(dir, sizeof dir, "%s/store/%s/replay", g_dir, run);
  unsigned char buf[3000], ref[3000];
  ino_t ino[80];
  for (uint64_t s = 0; s < 70; s++) {
    fill(buf, 2000 + s * 10, s);
    assert_int_equal(store_replay_append(st, run, s, buf, 2000 + s * 10, &err), 0);
    ino[s] = seg_ino(dir, s);
  }
  size_t removed = 0;
  assert_int_equal(store_replay_trim(st, run, 66, &removed, &err), 0);
  assert_int_equal(removed, 66);
  assert_int_equal(count_named(dir, ".spare.", NULL), 64); /* the rest removed */
  uint64_t *seqs = NULL;
  size_t n = 0;
  assert_int_equal(store_replay_list(st, run, &seqs, &n, &err), 0);
  assert_int_equal(n, 4);
  assert_int_equal(seqs[0], 66);
  free(seqs);
  /* A shorter segment into a longer spare: its own bytes only. */
  fill(buf, 100, 70);
  assert_int_equal(store_replay_append(st, run, 70, buf, 100, &err), 0);
  ino_t i70 = seg_ino(dir, 70);
  int found = 0;
  for (int s = 0; s < 66; s++) found |= ino[s] == i70;
  assert_true(found);
  void *got = NULL;
  size_t len = 0;
  assert_int_equal(store_replay_read(st, run, 70, &got, &len, &err), 0);
  assert_int_equal(len, 100);
  assert_memory_equal(got, buf, 100);
  free(got);
  assert_int_equal(count_named(dir, ".spare.", NULL), 63);
  assert_int_equal(count_named(dir, ".tmp.", NULL), 0);
  assert_int_equal(store_replay_read(st, run, 2, &got, &len, &err), SHOAL_ENOENT);
  store_close(st);
  *state = st = open_store();
  assert_int_equal(count_named(dir, ".spare.", NULL), 0);

  /* What a killed process leaves: a spare no store holds. */
  char orphan[1000];
  snprintf(orphan, sizeof orphan, "%s/.spare.%020d.bin", dir, 3);
  fill(ref, 3000, 99);
  assert_int_equal(shoal_file_write_atomic(orphan, ref, 3000, 0, &err), 0);
  ino_t io = 0;
  assert_int_equal(count_named(dir, ".spare.", &io), 1);
  assert_int_equal(store_replay_trim(st, run, 67, &removed, &err), 0);
  assert_int_equal(removed, 1);
  assert_int_equal(count_named(dir, ".spare.", NULL), 2);
  for (uint64_t s = 71; s < 73; s++) {
    fill(buf, 500, s);
    assert_int_equal(store_replay_append(st, run, s, buf, 500, &err), 0);
    ino[s] = seg_ino(dir, s);
  }
  assert_true((ino[71] == io && ino[72] == ino[66]) || (ino[71] == ino[66] && ino[72] == io));
  assert_int_equal(count_named(dir, ".spare.", NULL), 0);
  assert_int_equal(store_replay_list(st, run, &seqs, &n, &err), 0);
  assert_int_equal(n, 6); /* 67 68 69 70 71 72 */
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(store_replay_read(st, run, seqs[i], &got, &len, &err), 0);
    free(got);
  }
  free(seqs);

  /* None kept when told so. */
  store_close(st);
  setenv("SHOAL_STORE_SPARES", "0", 1);
  *state = st = open_store();
  unsetenv("SHOAL_STORE_SPARES");
  assert_int_equal(store_replay_trim(st, run, 69, &removed, &err), 0);
  assert_int_equal(removed, 2);
  assert_int_equal(count_named(dir, ".spare.", NULL), 0);
}

static void test_damaged_files_are_reported(void **state) {
  store *st = *state;
  shoal_error err = {0};
  char run[64], p[900];
  name(run, sizeof run, "damaged");
  make_run(st, run);
  unsigned char buf[500];
  fill(buf, sizeof buf, 1);
  assert_int_equal(store_replay_append(st, run, 1, buf, sizeof buf, &err), 0);
  assert_int_equal(store_replay_append(st, run, 2, buf, sizeof buf, &err), 0);
  /* Flip one payload byte of segment 2: the checksum catches it. */
  snprintf(p, sizeof p, "%s/store/%s/replay/%020d.bin", g_dir, run, 2);
  int fd = open(p, O_RDWR);
  assert_true(fd >= 0);
  unsigned char c;
  assert_int_equal(pread(fd, &c, 1, 100), 1);
  c ^= 0x40;
  assert_int_equal(pwrite(fd, &c, 1, 100), 1);
  close(fd);
  replay_ctx rc = {0};
  assert_int_equal(store_replay_iter(st, run, 0, on_segment, &rc, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "checksum"));
  /* Segment 1's header (version 2, CRC32C): zlib's CRC-32 in its place is a mismatch,
   * and the same header as version 1 (files written before CRC32C) reads. */
  snprintf(p, sizeof p, "%s/store/%s/replay/%020d.bin", g_dir, run, 1);
  fd = open(p, O_RDWR);
  assert_true(fd >= 0);
  unsigned char h[16];
  assert_int_equal(pread(fd, h, 16, 0), 16);
  assert_int_equal(h[8], 2);
  uint32_t z = (uint32_t)crc32(0, buf, sizeof buf);
  for (int i = 0; i < 4; i++) h[12 + i] = (unsigned char)(z >> (8 * i));
  assert_int_equal(pwrite(fd, h, 16, 0), 16);
  void *got = NULL;
  size_t got_len = 0;
  assert_int_equal(store_replay_read(st, run, 1, &got, &got_len, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "checksum"));
  h[8] = 1;
  assert_int_equal(pwrite(fd, h, 16, 0), 16);
  close(fd);
  assert_int_equal(store_replay_read(st, run, 1, &got, &got_len, &err), 0);
  assert_int_equal(got_len, sizeof buf);
  assert_memory_equal(got, buf, sizeof buf);
  free(got);
  snprintf(p, sizeof p, "%s/store/%s/replay/%020d.bin", g_dir, run, 2);
  /* A truncated segment: the length check catches it. */
  assert_int_equal(truncate(p, 200), 0);
  assert_int_equal(store_replay_iter(st, run, 2, on_segment, &rc, &err), SHOAL_EFORMAT);
  /* A file that is no segment at all. */
  fd = open(p, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, "hello, this is not a replay segment, not at all", 47), 47);
  close(fd);
  assert_int_equal(store_replay_iter(st, run, 2, on_segment, &rc, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "magic"));

  /* A torn last metrics line (a crash mid-append) is ignored, then cut by the next append. */
  store_metric row = {.step = 1, .time = 1.7e9, .value = 0.5};
  snprintf(row.run, sizeof row.run, "%s", run);
  snprintf(row.name, sizeof row.name, "loss");
  assert_int_equal(store_metrics_append(st, &row, 1, &err), 0);
  snprintf(p, sizeof p, "%s/store/%s/metrics.csv", g_dir, run);
  fd = open(p, O_WRONLY | O_APPEND);
  assert_int_equal(write(fd, "2,1.7e9,lo", 10), 10);
  close(fd);
  store_metric *out = NULL;
  size_t n = 0;
  assert_int_equal(store_metrics_query(st, run, NULL, INT64_MIN, INT64_MAX, &out, &n, &err), 0);
  assert_int_equal(n, 1);
  free(out);
  row.step = 3;
  assert_int_equal(store_metrics_append(st, &row, 1, &err), 0);
  assert_int_equal(store_metrics_query(st, run, NULL, INT64_MIN, INT64_MAX, &out, &n, &err), 0);
  assert_int_equal(n, 2);
  assert_int_equal(out[1].step, 3);
  free(out);

  /* A torn first append (not even the header line is whole) reads as no rows, and
   * the next append starts the file again. */
  char run2[64];
  name(run2, sizeof run2, "torn-header");
  make_run(st, run2);
  snprintf(p, sizeof p, "%s/store/%s/metrics.csv", g_dir, run2);
  fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_int_equal(write(fd, "# shoal-met", 11), 11);
  close(fd);
  assert_int_equal(store_metrics_query(st, run2, NULL, INT64_MIN, INT64_MAX, &out, &n, &err), 0);
  assert_int_equal(n, 0);
  snprintf(row.run, sizeof row.run, "%s", run2);
  assert_int_equal(store_metrics_append(st, &row, 1, &err), 0);
  assert_int_equal(store_metrics_query(st, run2, NULL, INT64_MIN, INT64_MAX, &out, &n, &err), 0);
  assert_int_equal(n, 1);
  free(out);
  /* Something else in metrics.csv is reported, not misread. */
  fd = open(p, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, "a,b,c\n1,2,3\n", 12), 12);
  close(fd);
  assert_int_equal(store_metrics_query(st, run2, NULL, INT64_MIN, INT64_MAX, &out, &n, &err),
                   SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "does not start with"));
  assert_int_equal(store_metrics_append(st, &row, 1, &err), SHOAL_EFORMAT);

  /* A damaged snapshot index says so. */
  snprintf(p, sizeof p, "%s/store/%s/snapshots/index.json", g_dir, run);
  fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const char *other = "{\"format\": \"other\", \"version\": 1}";
  assert_int_equal(write(fd, other, strlen(other)), (ssize_t)strlen(other));
  close(fd);
  store_snapshot_meta *list;
  assert_int_equal(store_snapshot_list(st, run, &list, &n, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "format 'other' version 1 (expected 'shoal-snapshots'"));
  fd = open(p, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, "{\"format\": ", 11), 11);
  close(fd);
  assert_int_equal(store_snapshot_list(st, run, &list, &n, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "not valid JSON"));
}

static void test_file_uri_forms(void **state) {
  shoal_error err = {0};
  char uri[800], p[800];
  store *st;
  /* Percent-escapes and a trailing slash. */
  snprintf(uri, sizeof uri, "file://%s/with%%20space/?sync=never", g_dir);
  assert_int_equal(store_open(&st, uri, &err), 0);
  assert_string_equal(store_backend_name(st), "file");
  make_run(st, "r");
  store_close(st);
  snprintf(p, sizeof p, "%s/with space/r/run.json", g_dir);
  struct stat sb;
  assert_int_equal(stat(p, &sb), 0);
  /* localhost and plain paths. */
  snprintf(uri, sizeof uri, "file://localhost%s/with%%20space", g_dir);
  assert_int_equal(store_open(&st, uri, &err), 0);
  store_run r;
  assert_int_equal(store_run_find(st, "r", &r, &err), 0);
  store_run_clear(&r);
  store_close(st);
  snprintf(uri, sizeof uri, "%s/with space", g_dir);
  assert_int_equal(store_open(&st, uri, &err), 0);
  assert_int_equal(store_run_find(st, "r", &r, &err), 0);
  store_run_clear(&r);
  store_close(st);
  /* Every form names the same folder, and the store says which: no program parses a
   * store URI itself. */
  for (int i = 0; i < 4; i++) {
    char dir[900], want[900];
    if (i == 0) snprintf(uri, sizeof uri, "file://%s/with%%20space/?sync=never", g_dir);
    if (i == 1) snprintf(uri, sizeof uri, "file://localhost%s/with%%20space", g_dir);
    if (i == 2) snprintf(uri, sizeof uri, "%s/with space", g_dir);
    if (i == 3) snprintf(uri, sizeof uri, "file:%s/with%%20space", g_dir);
    assert_int_equal(store_open(&st, uri, &err), 0);
    assert_int_equal(store_local_dir(st, "r", dir, sizeof dir, &err), 0);
    snprintf(want, sizeof want, "%s/with space/r", g_dir);
    assert_string_equal(dir, want);
    assert_int_equal(store_local_dir(st, NULL, dir, sizeof dir, &err), 0);
    snprintf(want, sizeof want, "%s/with space", g_dir);
    assert_string_equal(dir, want);
    assert_int_equal(store_local_dir(st, "r", dir, 4, &err), SHOAL_EINVAL);
    assert_int_equal(store_local_dir(st, "../x", dir, sizeof dir, &err), SHOAL_EINVAL);
    store_close(st);
  }
  /* A folder that is a file. */
  snprintf(uri, sizeof uri, "file://%s/with%%20space/r/run.json", g_dir);
  assert_int_equal(store_open(&st, uri, &err), SHOAL_EIO);
  assert_non_null(strstr(err.msg, "not a folder"));
}

/* ---- main ---------------------------------------------------------------- */

/* What a writer killed mid-way leaves (a half-built run folder, a temporary file) is
 * removed by the next writer on the same host once its process is gone; a live
 * writer's files and another host's are left alone. */
static void test_leftovers_swept(void **state) {
  store *st = *state;
  char host[256] = {0}, tag[64] = {0};
  assert_int_equal(gethostname(host, sizeof host - 1), 0);
  size_t o = 0;
  for (size_t i = 0; host[i] && o < sizeof tag - 1; i++)
    if (isalnum((unsigned char)host[i]) || host[i] == '-') tag[o++] = host[i];
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  char root[600], p[900], q[960];
  snprintf(root, sizeof root, "%s/store", g_dir);
  snprintf(p, sizeof p, "%s/.tmp.run.half.%s.%ld.7", root, tag, (long)dead);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(q, sizeof q, "%s/snapshots", p);
  assert_int_equal(mkdir(q, 0755), 0);
  snprintf(q, sizeof q, "%s/config.yaml", p);
  FILE *f = fopen(q, "w");
  fputs("x: 1\n", f);
  fclose(f);
  char live[900], other[900];
  snprintf(live, sizeof live, "%s/.tmp.run.live.%s.%ld.1", root, tag, (long)getpid());
  snprintf(other, sizeof other, "%s/.tmp.run.far.otherhost.%ld.1", root, (long)dead);
  assert_int_equal(mkdir(live, 0755), 0);
  assert_int_equal(mkdir(other, 0755), 0);
  char run[64];
  name(run, sizeof run, "after-crash");
  make_run(st, run);
  struct stat sb;
  assert_int_equal(stat(p, &sb), -1);
  assert_int_equal(stat(live, &sb), 0);
  assert_int_equal(stat(other, &sb), 0);
  rmdir(live);
  rmdir(other);
}

/* NULL or "" opens $SHOAL_STORE_URI, else ./runs. */
static void test_default_uri(void **state) {
  char cwd[1024], dir[700], uri[760];
  assert_non_null(getcwd(cwd, sizeof cwd));
  snprintf(dir, sizeof dir, "%s/default", g_dir);
  assert_int_equal(mkdir(dir, 0755), 0);
  assert_int_equal(chdir(dir), 0);
  unsetenv("SHOAL_STORE_URI");
  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, NULL, &err), 0);
  make_run(st, "r1");
  store_close(st);
  struct stat sb;
  assert_int_equal(stat("runs/r1/config.yaml", &sb), 0);
  snprintf(uri, sizeof uri, "file://%s/elsewhere", dir);
  setenv("SHOAL_STORE_URI", uri, 1);
  assert_int_equal(store_open(&st, "", &err), 0);
  assert_string_equal(store_uri(st), uri);
  make_run(st, "r2");
  store_close(st);
  unsetenv("SHOAL_STORE_URI");
  assert_int_equal(stat("elsewhere/r2/run.json", &sb), 0);
  assert_int_equal(chdir(cwd), 0);
}

static int rm_rf(const char *dir) {
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd);
}

int main(int argc, char **argv) {
  g_self = argv[0];
  if (argc == 5 && strcmp(argv[1], "claim-worker") == 0)
    return claim_worker_main(argv[2], argv[3], argv[4]);
  const char *backend = argc > 1 ? argv[1] : "file";
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(g_prefix, sizeof g_prefix, "t%ld-%ld", (long)getpid(), (long)(ts.tv_nsec % 100000));
  if (strcmp(backend, "mongodb") == 0) {
    int mrc = mongo_test_uri(g_uri, sizeof g_uri, "shoal_test_store");
    if (mrc) return mrc;
  } else if (strcmp(backend, "file") == 0) {
    g_file = 1;
    snprintf(g_dir, sizeof g_dir, "/tmp/shoal-test-store-XXXXXX");
    if (!mkdtemp(g_dir)) {
      perror("mkdtemp");
      return 1;
    }
    snprintf(g_uri, sizeof g_uri, "file://%s/store", g_dir);
  } else {
    fprintf(stderr, "usage: %s file|mongodb\n", argv[0]);
    return 2;
  }
  const struct CMUnitTest shared[] = {
      cmocka_unit_test(test_redact),
      cmocka_unit_test(test_uri_parse),
      cmocka_unit_test_setup_teardown(test_bad_uri_is_a_clear_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_runs_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_names_cannot_escape, setup, teardown),
      cmocka_unit_test_setup_teardown(test_snapshots_latest_best, setup, teardown),
      cmocka_unit_test_setup_teardown(test_snapshot_over_16mb, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replay_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replay_list_read_trim, setup, teardown),
      cmocka_unit_test_setup_teardown(test_metrics_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_trials_lifecycle, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_writers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_snapshot_same_version_racing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_claims_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_claims_processes, setup, teardown),
  };
  const struct CMUnitTest file_only[] = {
      cmocka_unit_test_setup_teardown(test_killed_mid_write_keeps_previous, setup, teardown),
      cmocka_unit_test(test_full_disk_is_a_clear_error),
      cmocka_unit_test(test_read_only_is_a_clear_error),
      cmocka_unit_test_setup_teardown(test_damaged_files_are_reported, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replay_spares, setup, teardown),
      cmocka_unit_test(test_file_uri_forms),
      cmocka_unit_test_setup_teardown(test_leftovers_swept, setup, teardown),
      cmocka_unit_test(test_default_uri),
  };
  char group[64];
  snprintf(group, sizeof group, "store (%s)", backend);
  int failed = cmocka_run_group_tests_name(group, shared, NULL, NULL);
  if (g_file) {
    failed += cmocka_run_group_tests_name("store (file only)", file_only, NULL, NULL);
    rm_rf(g_dir);
  }
  return failed ? 1 : 0;
}
