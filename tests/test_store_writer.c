/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_store_writer.c — the writer thread: the trainer is never blocked by a
 * slow or failing store, metrics coalesce, snapshots keep the newest, replay is
 * bounded, errors are counted and logged once, and close reports what was lost.
 *
 * Most cases put the writer in front of a scripted backend (store/internal.h) whose
 * calls can be made slow or failing on demand; the last runs it against a real file
 * store on a full tmpfs. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/internal.h"

/* ---- a scripted backend -------------------------------------------------- */

typedef struct script {
  pthread_mutex_t mu;
  double delay_s; /* every write call sleeps this long */
  int fail_rc;    /* every write call fails with this, while fail_calls > 0 */
  int fail_calls; /* -1: forever */
  size_t rows;    /* metric rows written */
  int64_t snap_versions[64];
  size_t n_snaps;
  uint64_t replay_seqs[256];
  size_t n_replay;
  int run_status;
  int calls;
} script;

static void sleep_s(double s) {
  if (s <= 0) return;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static int scripted_call(script *s, shoal_error *err) {
  pthread_mutex_lock(&s->mu);
  double d = s->delay_s;
  int rc = 0;
  s->calls++;
  if (s->fail_calls != 0) {
    rc = s->fail_rc;
    if (s->fail_calls > 0) s->fail_calls--;
  }
  pthread_mutex_unlock(&s->mu);
  sleep_s(d);
  if (rc)
    shoal_error_set(err, rc, "scripted failure at mongodb://trainer:***@db/x (%s)",
                    shoal_strerror(rc));
  return rc;
}

static void sc_close(void *impl) {}
static int sc_run_find(void *impl, const char *id, store_run *out, shoal_error *err) {
  if (strcmp(id, "missing") == 0) return shoal_error_set(err, SHOAL_ENOENT, "no run");
  memset(out, 0, sizeof *out);
  snprintf(out->id, sizeof out->id, "%s", id);
  return 0;
}
static int sc_run_set_status(void *impl, const char *id, int status, shoal_error *err) {
  script *s = impl;
  int rc = scripted_call(s, err);
  if (!rc) s->run_status = status;
  return rc;
}
static int sc_metrics(void *impl, const store_metric *rows, size_t n, shoal_error *err) {
  script *s = impl;
  int rc = scripted_call(s, err);
  if (!rc) {
    pthread_mutex_lock(&s->mu);
    s->rows += n;
    pthread_mutex_unlock(&s->mu);
  }
  return rc;
}
static int sc_snap(void *impl, const store_snapshot_meta *m, const void *b, size_t len,
                   shoal_error *err) {
  script *s = impl;
  int rc = scripted_call(s, err);
  if (!rc) {
    pthread_mutex_lock(&s->mu);
    s->snap_versions[s->n_snaps++] = m->version;
    pthread_mutex_unlock(&s->mu);
  }
  return rc;
}
static int sc_replay(void *impl, const char *run, uint64_t seq, const void *b, size_t len,
                     shoal_error *err) {
  script *s = impl;
  int rc = scripted_call(s, err);
  if (!rc) {
    pthread_mutex_lock(&s->mu);
    s->replay_seqs[s->n_replay++] = seq;
    pthread_mutex_unlock(&s->mu);
  }
  return rc;
}

static const store__backend scripted = {
    .name = "scripted",
    .close = sc_close,
    .run_find = sc_run_find,
    .run_set_status = sc_run_set_status,
    .metrics_append = sc_metrics,
    .snapshot_put = sc_snap,
    .replay_append = sc_replay,
};

typedef struct fixture {
  script s;
  store *st;
  char log[64][300];
  int n_log;
  pthread_mutex_t log_mu;
} fixture;

static void capture_log(void *ctx, const char *msg) {
  fixture *f = ctx;
  pthread_mutex_lock(&f->log_mu);
  if (f->n_log < 64) snprintf(f->log[f->n_log++], sizeof f->log[0], "%s", msg);
  pthread_mutex_unlock(&f->log_mu);
}

static int count_log(fixture *f, const char *needle) {
  int n = 0;
  pthread_mutex_lock(&f->log_mu);
  for (int i = 0; i < f->n_log; i++) n += strstr(f->log[i], needle) != NULL;
  pthread_mutex_unlock(&f->log_mu);
  return n;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  pthread_mutex_init(&f->s.mu, NULL);
  pthread_mutex_init(&f->log_mu, NULL);
  shoal_error err = {0};
  if (store__open_backend(&f->st, &scripted, &f->s, "scripted://", &err)) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  store_close(f->st);
  pthread_mutex_destroy(&f->s.mu);
  pthread_mutex_destroy(&f->log_mu);
  free(f);
  return 0;
}

static store_writer *make_writer(fixture *f, size_t rows, size_t bytes) {
  store_writer_opts o = {
      .queue_rows = rows, .max_pending_bytes = bytes, .log = capture_log, .log_ctx = f};
  store_writer *w = NULL;
  shoal_error err = {0};
  assert_int_equal(store_writer_create(&w, f->st, &o, &err), 0);
  return w;
}

static void set_script(fixture *f, double delay, int fail_rc, int fail_calls) {
  pthread_mutex_lock(&f->s.mu);
  f->s.delay_s = delay;
  f->s.fail_rc = fail_rc;
  f->s.fail_calls = fail_calls;
  pthread_mutex_unlock(&f->s.mu);
}

/* ---- cases --------------------------------------------------------------- */

/* The store takes 250 ms per call; 20000 metric calls, several snapshots and replay
 * segments still return at once, and the queue coalesces instead of growing. */
static void test_trainer_never_blocks(void **state) {
  fixture *f = *state;
  set_script(f, 0.25, 0, 0);
  store_writer *w = make_writer(f, 256, 1 << 20);
  double worst = 0, t_start = shoal_now_s();
  const char *names[4] = {"loss", "q/mean", "eps", "fps"};
  for (int i = 0; i < 20000; i++) {
    double t0 = shoal_now_s();
    int rc = store_writer_metric(w, "run1", names[i % 4], i, 1.7e9 + i, i * 0.5);
    double dt = shoal_now_s() - t0;
    if (dt > worst) worst = dt;
    assert_true(rc == 0);
    if (i % 5000 == 0) {
      store_snapshot_meta m = {.version = i, .score = 1};
      snprintf(m.run, sizeof m.run, "run1");
      t0 = shoal_now_s();
      assert_int_equal(store_writer_snapshot(w, &m, calloc(1, 1000), 1000), 0);
      assert_int_equal(store_writer_replay(w, "run1", (uint64_t)i, calloc(1, 1000), 1000), 0);
      dt = shoal_now_s() - t0;
      if (dt > worst) worst = dt;
    }
  }
  double total = shoal_now_s() - t_start;
  /* One store call takes 250 ms; no enqueue waits for one (the margin is for a
   * loaded machine that preempts the test). */
  assert_true(worst < 0.1);
  assert_true(total < 1.0);
  store_writer_stats s;
  store_writer_stats_get(w, &s);
  assert_true(s.metrics_coalesced > 10000);
  assert_int_equal(s.metrics_dropped, 0); /* every series had a queued row to replace */
  assert_true(s.pending_metrics <= 2 * 256);
  assert_true(s.snapshots_superseded >= 2);
  assert_int_equal(store_writer_flush(w, 10, &s), 0);
  /* The newest value of every series reached the store. */
  assert_int_equal(s.pending_metrics, 0);
  assert_true(s.metrics_written + s.metrics_coalesced == 20000);
  assert_int_equal(f->s.snap_versions[f->s.n_snaps - 1], 15000);
  assert_int_equal(store_writer_close(w, 1, &s), 0);
  assert_int_equal(f->s.n_replay, 4);
}

/* The store fails 3 times with an I/O error, then recovers: nothing is lost, the
 * failure is logged once (not 3 times) with the recovery, and counted. */
static void test_errors_retried_counted_logged_once(void **state) {
  fixture *f = *state;
  set_script(f, 0, SHOAL_EIO, 3);
  store_writer *w = make_writer(f, 1000, 0);
  for (int i = 0; i < 100; i++) assert_int_equal(store_writer_metric(w, "r", "loss", i, 1, i), 0);
  store_writer_stats s;
  assert_int_equal(store_writer_flush(w, 10, &s), 0);
  assert_int_equal(s.metrics_written, 100);
  assert_int_equal(s.metrics_dropped, 0);
  assert_int_equal(s.errors[STORE_KIND_METRICS], 3);
  assert_int_equal(s.last_error, SHOAL_EIO);
  assert_int_equal(s.healthy, 1);
  assert_int_equal(f->s.rows, 100);
  assert_int_equal(count_log(f, "metrics write failed"), 1);
  assert_int_equal(count_log(f, "recovered"), 1);
  /* Credentials in a backend message stay masked in the log. */
  assert_int_equal(count_log(f, "trainer:***@"), 1);
  assert_int_equal(store_writer_close(w, 1, &s), 0);
}

/* A permanent error (the run does not exist) drops the item, counted, not retried. */
static void test_permanent_error_drops(void **state) {
  fixture *f = *state;
  store_writer *w = make_writer(f, 100, 0);
  assert_int_equal(store_writer_metric(w, "missing", "loss", 1, 1, 1), 0);
  store_snapshot_meta m = {.version = 1};
  snprintf(m.run, sizeof m.run, "missing");
  assert_int_equal(store_writer_snapshot(w, &m, malloc(10), 10), 0);
  store_writer_stats s;
  assert_int_equal(store_writer_flush(w, 5, &s), 0);
  assert_int_equal(s.metrics_dropped, 1);
  assert_int_equal(s.snapshots_dropped, 1);
  assert_int_equal(s.errors[STORE_KIND_METRICS], 1);
  assert_int_equal(s.errors[STORE_KIND_SNAPSHOT], 1);
  assert_int_equal(s.last_error, SHOAL_ENOENT);
  assert_int_equal(count_log(f, "dropped"), 2);
  /* Bad arguments are refused at once and the bytes freed (ASan checks the leak). */
  assert_int_equal(store_writer_metric(w, "../x", "loss", 1, 1, 1), SHOAL_EINVAL);
  assert_int_equal(store_writer_metric(w, "r", "a,b", 1, 1, 1), SHOAL_EINVAL);
  assert_int_equal(store_writer_replay(w, "r", 1, malloc(4), 0), SHOAL_EINVAL);
  m.version = -1;
  assert_int_equal(store_writer_snapshot(w, &m, malloc(4), 4), SHOAL_EINVAL);
  assert_int_equal(store_writer_close(w, 1, NULL), 0);
}

/* While the store is down, only the newest queued snapshot of a run is kept, and
 * replay is bounded by bytes. */
static void test_snapshot_newest_and_replay_bound(void **state) {
  fixture *f = *state;
  set_script(f, 0, SHOAL_ENET, -1);
  store_writer *w = make_writer(f, 100, 10000);
  for (int v = 1; v <= 6; v++) {
    store_snapshot_meta m = {.version = v};
    snprintf(m.run, sizeof m.run, "r");
    assert_int_equal(store_writer_snapshot(w, &m, malloc(1000), 1000), 0);
    usleep(20000);
  }
  /* Past the bound the oldest waiting segments make room (one may be in flight). */
  for (int i = 0; i < 20; i++)
    assert_int_equal(store_writer_replay(w, "r", (uint64_t)i, malloc(1000), 1000), 0);
  assert_int_equal(store_writer_replay(w, "r", 99, malloc(20000), 20000), SHOAL_EFULL);
  store_writer_stats s;
  store_writer_stats_get(w, &s);
  assert_int_equal(s.pending_snapshots, 1 + (s.snapshots_superseded < 5));
  assert_true(s.snapshots_superseded >= 4);
  assert_true(s.replay_dropped >= 10 && s.replay_dropped <= 11);
  assert_true(s.errors[STORE_KIND_SNAPSHOT] >= 1);
  assert_int_equal(s.healthy, 0);
  /* The store comes back: the newest snapshot and the queued segments are written. */
  set_script(f, 0, 0, 0);
  assert_int_equal(store_writer_flush(w, 10, &s), 0);
  assert_int_equal(f->s.snap_versions[f->s.n_snaps - 1], 6);
  assert_int_equal(s.snapshots_written, 1);
  /* The oversized one is counted too. */
  assert_int_equal(s.replay_written, 20 - (s.replay_dropped - 1));
  assert_int_equal(f->s.n_replay, s.replay_written);
  /* The newest, in order (after the one in flight when the queue filled, if any). */
  size_t nr = f->s.n_replay;
  for (size_t i = 1; i < nr; i++) assert_true(f->s.replay_seqs[i] > f->s.replay_seqs[i - 1]);
  for (size_t i = 0; i < 9; i++) assert_int_equal(f->s.replay_seqs[nr - 9 + i], 11 + i);
  assert_int_equal(count_log(f, "replay queue full"), 1);
  assert_int_equal(store_writer_close(w, 1, NULL), 0);
}

/* A queue that is full of one metric drops rows of another, counted, logged once. */
static void test_metrics_full_drops_new_series(void **state) {
  fixture *f = *state;
  set_script(f, 0, SHOAL_EIO, -1);
  store_writer *w = make_writer(f, 10, 0);
  store_writer_stats s;
  /* One row in flight and failing first: the writer then keeps that buffer for its retries
   * and never swaps again, so the second buffer is the whole queue. Without the wait the
   * writer could swap only after every "a" row was queued, and "b" would find an empty
   * buffer (a slow thread under TSan did). */
  assert_int_equal(store_writer_metric(w, "r", "a", 0, 1, 0), 0);
  double t0 = shoal_now_s();
  for (;;) {
    store_writer_stats_get(w, &s);
    if (s.errors[STORE_KIND_METRICS] > 0 || shoal_now_s() - t0 > 10) break;
    usleep(1000);
  }
  assert_true(s.errors[STORE_KIND_METRICS] >= 1);
  int dropped = 0;
  for (int i = 1; i < 40; i++) dropped += store_writer_metric(w, "r", "a", i, 1, i) == SHOAL_EFULL;
  assert_int_equal(dropped, 0);
  for (int i = 0; i < 5; i++) dropped += store_writer_metric(w, "r", "b", i, 1, i) == SHOAL_EFULL;
  store_writer_stats_get(w, &s);
  assert_int_equal(dropped, 5);
  assert_int_equal(s.metrics_dropped, 5);
  assert_int_equal(s.metrics_coalesced, 29);
  assert_int_equal(count_log(f, "metrics queue full"), 1);
  store_writer_close(w, 0.2, NULL);
}

/* Closing while the store is down: a bounded wait, then a report of what was lost. */
static void test_close_reports_unwritten(void **state) {
  fixture *f = *state;
  set_script(f, 0, SHOAL_EIO, -1);
  store_writer *w = make_writer(f, 1000, 0);
  for (int i = 0; i < 50; i++) assert_int_equal(store_writer_metric(w, "r", "loss", i, 1, i), 0);
  assert_int_equal(store_writer_replay(w, "r", 1, malloc(100), 100), 0);
  assert_int_equal(store_writer_run_status(w, "r", STORE_RUN_FINISHED), 0);
  store_writer_stats s;
  assert_int_equal(store_writer_flush(w, 0.3, &s), SHOAL_ETIMEDOUT);
  assert_int_equal(s.pending_metrics, 50);
  double t0 = shoal_now_s();
  assert_int_equal(store_writer_close(w, 0.3, &s), SHOAL_EIO);
  assert_true(shoal_now_s() - t0 < 3.0);
  assert_int_equal(s.metrics_dropped, 50);
  assert_int_equal(s.replay_dropped, 1);
  assert_int_equal(s.runs_dropped, 1);
  assert_int_equal(s.metrics_written, 0);
  assert_int_equal(count_log(f, "closed with unwritten data: 50 metric rows"), 1);
  /* A writer after close is gone; a new one works. */
  w = make_writer(f, 10, 0);
  set_script(f, 0, 0, 0);
  assert_int_equal(store_writer_run_status(w, "r", STORE_RUN_STOPPED), 0);
  assert_int_equal(store_writer_close(w, 5, &s), 0);
  assert_int_equal(f->s.run_status, STORE_RUN_STOPPED);
  assert_int_equal(s.runs_written, 1);
}

/* Many trainer threads at once. */
typedef struct {
  store_writer *w;
  int idx;
  int bad;
} th_arg;

static void *producer(void *p) {
  th_arg *a = p;
  char name[16];
  snprintf(name, sizeof name, "m%d", a->idx);
  for (int i = 0; i < 5000; i++)
    if (store_writer_metric(a->w, "r", name, i, 1, i) != 0) a->bad++;
  return NULL;
}

static void test_many_producers(void **state) {
  fixture *f = *state;
  set_script(f, 0.001, 0, 0);
  store_writer *w = make_writer(f, 100000, 0);
  pthread_t th[4];
  th_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (th_arg){.w = w, .idx = i};
    pthread_create(&th[i], NULL, producer, &a[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(a[i].bad, 0);
  }
  store_writer_stats s;
  assert_int_equal(store_writer_close(w, 10, &s), 0);
  assert_int_equal(s.metrics_written, 20000);
  assert_int_equal(f->s.rows, 20000);
}

/* The real file store on a full disk: the trainer goes on, errors are counted. */
static void test_file_store_full_disk(void **state) {
  char dir[] = "/tmp/shoal-test-writer-XXXXXX";
  assert_non_null(mkdtemp(dir));
  if (mount("tmpfs", dir, "tmpfs", 0, "size=512k") != 0) {
    printf("SKIPPED: full-disk case: cannot mount a tmpfs at %s (%s)\n", dir, strerror(errno));
    rmdir(dir);
    skip();
  }
  char uri[128];
  snprintf(uri, sizeof uri, "file://%s", dir);
  store *st;
  shoal_error err = {0};
  assert_int_equal(store_open(&st, uri, &err), 0);
  assert_int_equal(store_run_create(st, "r", "", STORE_RUN_RUNNING, &err), 0);
  fixture *f = *state;
  store_writer_opts o = {.log = capture_log, .log_ctx = f};
  store_writer *w;
  assert_int_equal(store_writer_create(&w, st, &o, &err), 0);
  double worst = 0;
  for (int v = 1; v <= 5; v++) {
    store_snapshot_meta m = {.version = v};
    snprintf(m.run, sizeof m.run, "r");
    double t0 = shoal_now_s();
    assert_int_equal(store_writer_snapshot(w, &m, calloc(1, 1 << 20), 1 << 20), 0);
    for (int i = 0; i < 100; i++) store_writer_metric(w, "r", "loss", v * 100 + i, 1, i);
    double dt = shoal_now_s() - t0;
    if (dt > worst) worst = dt;
    usleep(50000);
  }
  assert_true(worst < 0.1);
  store_writer_stats s;
  store_writer_stats_get(w, &s);
  assert_true(s.errors[STORE_KIND_SNAPSHOT] >= 1);
  assert_int_equal(s.last_error, SHOAL_EIO);
  if (!strstr(s.last_error_msg, "No space left on device"))
    fprintf(stderr, "last error: %s\n", s.last_error_msg);
  assert_non_null(strstr(s.last_error_msg, "No space left on device"));
  assert_true(s.metrics_written >= 100);
  assert_int_equal(count_log(f, "snapshot write failed"), 1);
  assert_int_equal(store_writer_close(w, 0.5, &s), SHOAL_EIO);
  assert_true(s.snapshots_dropped >= 1);
  store_close(st);
  umount2(dir, MNT_DETACH);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_trainer_never_blocks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors_retried_counted_logged_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_permanent_error_drops, setup, teardown),
      cmocka_unit_test_setup_teardown(test_snapshot_newest_and_replay_bound, setup, teardown),
      cmocka_unit_test_setup_teardown(test_metrics_full_drops_new_series, setup, teardown),
      cmocka_unit_test_setup_teardown(test_close_reports_unwritten, setup, teardown),
      cmocka_unit_test_setup_teardown(test_many_producers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_file_store_full_disk, setup, teardown),
  };
  return cmocka_run_group_tests_name("store writer", tests, NULL, NULL);
}
