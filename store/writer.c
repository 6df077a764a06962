/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/writer.c — the writer thread: a bounded queue in front of a store so the
 * trainer never waits on disk or network (see store_writer.h for the policy).
 *
 * Metrics live in two arrays of queue_rows rows: producers append to the active
 * one; the thread swaps it with the empty in-flight one (O(1) under the lock) and
 * writes the in-flight rows as one batch. While a batch is retried, the active array
 * fills and then coalesces. Snapshots, replay segments and run-status changes are
 * lists; the thread takes one of each in flight at a time and keeps it until it is
 * written, dropped, or (a snapshot) superseded by a newer one of the same run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/internal.h"

typedef struct snap_item {
  store_snapshot_meta meta;
  void *bytes;
  size_t len;
  int failed; /* an earlier try failed: it may have been stored all the same */
  struct snap_item *next;
} snap_item;

typedef struct replay_item {
  char run[STORE_NAME_MAX];
  uint64_t seq;
  void *bytes;
  size_t len;
  int failed;
  struct replay_item *next;
} replay_item;

typedef struct run_item {
  char run[STORE_NAME_MAX];
  int status;
  struct run_item *next;
} run_item;

struct store_writer {
  store *st;
  store_writer_opts opts;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv_work; /* something was queued, or close was asked */
  pthread_cond_t cv_idle; /* the thread finished a round */

  store_metric *rows[2]; /* active (producers) and in flight (the thread) */
  uint64_t *hash[2];     /* hash of run and name per row, to find a row to coalesce */
  size_t n_rows[2];
  int active;

  snap_item *snaps, *snap_inflight;
  replay_item *replay_head, *replay_tail, *replay_inflight;
  run_item *runs, *run_inflight;
  size_t n_snaps, n_replay, n_runs;
  size_t snap_bytes, replay_bytes;

  int closing; /* no more enqueues */
  int stop;    /* the thread leaves after its current round */
  int logged[STORE_KIND_COUNT], logged_full[STORE_KIND_COUNT];
  store_writer_stats stats;
};

static const char *kind_name[STORE_KIND_COUNT] = {"metrics", "snapshot", "replay", "run status"};

static void default_log(void *ctx, const char *msg) { fprintf(stderr, "shoal store: %s\n", msg); }

static void wlog(store_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wlog(store_writer *w, const char *fmt, ...) {
  char buf[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  w->opts.log(w->opts.log_ctx, buf);
}

static uint64_t key_hash(const char *run, const char *name) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = run; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  h = (h ^ 0xff) * 1099511628211ull;
  for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

static int retryable(int rc) {
  return rc == SHOAL_EIO || rc == SHOAL_ENET || rc == SHOAL_ETIMEDOUT || rc == SHOAL_ENOMEM;
}

static void update_pending(store_writer *w) {
  store_writer_stats *s = &w->stats;
  s->pending_metrics = w->n_rows[0] + w->n_rows[1];
  s->pending_snapshots = w->n_snaps + (w->snap_inflight != NULL);
  s->pending_replay = w->n_replay + (w->replay_inflight != NULL);
  s->pending_runs = w->n_runs + (w->run_inflight != NULL);
  s->pending_bytes = w->snap_bytes + w->replay_bytes;
}

static int all_done(store_writer *w) {
  update_pending(w);
  const store_writer_stats *s = &w->stats;
  return !s->pending_metrics && !s->pending_snapshots && !s->pending_replay && !s->pending_runs;
}

/* Records the outcome of one store call of kind k (under the lock). */
static void outcome(store_writer *w, int kind, int rc, const shoal_error *e) {
  store_writer_stats *s = &w->stats;
  if (rc == 0) {
    if (w->logged[kind])
      wlog(w, "%s writes recovered (%llu failed calls so far)", kind_name[kind],
           (unsigned long long)s->errors[kind]);
    w->logged[kind] = 0;
    /* Healthy once no kind is failing: small metric rows may go through a nearly full
     * disk while segments and snapshots do not. */
    s->healthy = 1;
    for (int k = 0; k < STORE_KIND_COUNT; k++)
      if (w->logged[k]) s->healthy = 0;
    return;
  }
  s->errors[kind]++;
  s->last_error = rc;
  snprintf(s->last_error_msg, sizeof s->last_error_msg, "%.255s",
           e->msg[0] ? e->msg : shoal_strerror(rc));
  s->healthy = 0;
  if (!w->logged[kind]) {
    wlog(w, "%s write failed (%s; %llu failed so far; %s): %s", kind_name[kind], shoal_strerror(rc),
         (unsigned long long)s->errors[kind],
         retryable(rc) ? "will retry, further failures are counted, not logged" : "dropped",
         s->last_error_msg);
    w->logged[kind] = 1;
  }
}

static void note_full(store_writer *w, int kind, const char *what) {
  if (w->logged_full[kind]) return;
  w->logged_full[kind] = 1;
  wlog(w, "%s queue full: %s (counted in the writer's stats; logged once)", kind_name[kind], what);
}

/* ---- the thread ---------------------------------------------------------- */

static double now_s(void) { return store__wall_time(); }

/* Whether kind k has something to write (in flight or queued). Under the lock. */
static int has_work(store_writer *w, int k) {
  switch (k) {
    case STORE_KIND_METRICS: return w->n_rows[0] + w->n_rows[1] > 0;
    case STORE_KIND_SNAPSHOT: return w->snap_inflight || w->snaps;
    case STORE_KIND_REPLAY: return w->replay_inflight || w->replay_head;
    default: return w->run_inflight || w->runs;
  }
}

/* Each kind retries on its own clock, so a failing snapshot does not hold up metrics. */
static void *writer_main(void *arg) {
  shoal_thread_name("shoal-store-wr");
  store_writer *w = arg;
  double backoff[STORE_KIND_COUNT] = {0}, next_try[STORE_KIND_COUNT] = {0};
  pthread_mutex_lock(&w->mu);
  for (;;) {
    if (w->stop) break;
    double now = now_s(), wake = 0;
    int ready[STORE_KIND_COUNT], any_ready = 0, any_work = 0;
    for (int k = 0; k < STORE_KIND_COUNT; k++) {
      int work = has_work(w, k);
      ready[k] = work && now >= next_try[k];
      any_ready |= ready[k];
      any_work |= work;
      if (work && !ready[k] && (wake == 0 || next_try[k] < wake)) wake = next_try[k];
    }
    if (!any_ready) {
      pthread_cond_broadcast(&w->cv_idle);
      if (!any_work) {
        pthread_cond_wait(&w->cv_work, &w->mu);
      } else {
        struct timespec ts = {(time_t)wake, (long)((wake - (double)(time_t)wake) * 1e9)};
        pthread_cond_timedwait(&w->cv_work, &w->mu, &ts);
      }
      continue;
    }

    /* Fill the in-flight slots of the kinds that are due. */
    int fi = 1 - w->active;
    if (ready[STORE_KIND_METRICS] && w->n_rows[fi] == 0) {
      w->active = fi;
      fi = 1 - fi;
    }
    if (ready[STORE_KIND_SNAPSHOT]) {
      if (!w->snap_inflight) {
        w->snap_inflight = w->snaps;
        w->snaps = w->snaps->next;
        w->snap_inflight->next = NULL;
        w->n_snaps--;
      } else {
        for (snap_item *q = w->snaps, *prev = NULL; q; prev = q, q = q->next)
          if (strcmp(q->meta.run, w->snap_inflight->meta.run) == 0) {
            /* Retrying an old snapshot while a newer one of its run waits: take the newer. */
            w->snap_bytes -= w->snap_inflight->len;
            free(w->snap_inflight->bytes);
            free(w->snap_inflight);
            w->stats.snapshots_superseded++;
            if (prev)
              prev->next = q->next;
            else
              w->snaps = q->next;
            q->next = NULL;
            w->n_snaps--;
            w->snap_inflight = q;
            break;
          }
      }
    }
    if (ready[STORE_KIND_REPLAY] && !w->replay_inflight) {
      w->replay_inflight = w->replay_head;
      w->replay_head = w->replay_head->next;
      if (!w->replay_head) w->replay_tail = NULL;
      w->replay_inflight->next = NULL;
      w->n_replay--;
    }
    if (ready[STORE_KIND_RUN] && !w->run_inflight) {
      w->run_inflight = w->runs;
      w->runs = w->runs->next;
      w->run_inflight->next = NULL;
      w->n_runs--;
    }
    store_metric *rows = w->rows[fi];
    size_t nrows = ready[STORE_KIND_METRICS] ? w->n_rows[fi] : 0;
    snap_item *sn = ready[STORE_KIND_SNAPSHOT] ? w->snap_inflight : NULL;
    replay_item *rp = ready[STORE_KIND_REPLAY] ? w->replay_inflight : NULL;
    run_item *ru = ready[STORE_KIND_RUN] ? w->run_inflight : NULL;
    pthread_mutex_unlock(&w->mu);

    /* The store calls, without the lock. */
    shoal_error e[STORE_KIND_COUNT];
    memset(e, 0, sizeof e);
    int rc[STORE_KIND_COUNT] = {0};
    if (nrows) rc[0] = store_metrics_append(w->st, rows, nrows, &e[0]);
    if (sn) rc[1] = store_snapshot_put(w->st, &sn->meta, sn->bytes, sn->len, &e[1]);
    if (rp) rc[2] = store_replay_append(w->st, rp->run, rp->seq, rp->bytes, rp->len, &e[2]);
    if (ru) rc[3] = store_run_set_status(w->st, ru->run, ru->status, &e[3]);
    /* A write that timed out may have landed anyway (the server got it, the answer was
     * lost): its retry then finds it there. Snapshots and segments never change once
     * written, so that is success, not a clash. */
    if (sn && sn->failed && rc[1] == SHOAL_EEXIST) rc[1] = 0;
    if (rp && rp->failed && rc[2] == SHOAL_EEXIST) rc[2] = 0;

    pthread_mutex_lock(&w->mu);
    int did[STORE_KIND_COUNT] = {nrows > 0, sn != NULL, rp != NULL, ru != NULL};
    for (int k = 0; k < STORE_KIND_COUNT; k++) {
      if (!did[k]) continue;
      outcome(w, k, rc[k], &e[k]);
      int finished = rc[k] == 0 || !retryable(rc[k]);
      if (!finished && sn && k == STORE_KIND_SNAPSHOT) sn->failed = 1;
      if (!finished && rp && k == STORE_KIND_REPLAY) rp->failed = 1;
      if (!finished) {
        backoff[k] = backoff[k] == 0 ? 0.1 : (backoff[k] * 2 > 2.0 ? 2.0 : backoff[k] * 2);
        next_try[k] = now_s() + backoff[k];
        continue;
      }
      backoff[k] = next_try[k] = 0;
      switch (k) {
        case STORE_KIND_METRICS:
          if (rc[k] == 0)
            w->stats.metrics_written += nrows;
          else
            w->stats.metrics_dropped += nrows;
          w->n_rows[fi] = 0;
          break;
        case STORE_KIND_SNAPSHOT:
          if (rc[k] == 0)
            w->stats.snapshots_written++;
          else
            w->stats.snapshots_dropped++;
          w->snap_bytes -= sn->len;
          free(sn->bytes);
          free(sn);
          w->snap_inflight = NULL;
          break;
        case STORE_KIND_REPLAY:
          if (rc[k] == 0)
            w->stats.replay_written++;
          else
            w->stats.replay_dropped++;
          w->replay_bytes -= rp->len;
          free(rp->bytes);
          free(rp);
          w->replay_inflight = NULL;
          break;
        default:
          if (rc[k] == 0)
            w->stats.runs_written++;
          else
            w->stats.runs_dropped++;
          free(ru);
          w->run_inflight = NULL;
          break;
      }
    }
    update_pending(w);
    pthread_cond_broadcast(&w->cv_idle);
  }
  pthread_cond_broadcast(&w->cv_idle);
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* ---- create / enqueue ---------------------------------------------------- */

int store_writer_create(store_writer **out, store *st, const store_writer_opts *opts,
                        shoal_error *err) {
  if (!out || !st) return shoal_error_set(err, SHOAL_EINVAL, "store_writer_create: NULL argument");
  store_writer *w = calloc(1, sizeof *w);
  if (!w) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  if (opts) w->opts = *opts;
  if (!w->opts.queue_rows) w->opts.queue_rows = 65536;
  if (!w->opts.max_pending_bytes) w->opts.max_pending_bytes = (size_t)256 << 20;
  if (!w->opts.log) w->opts.log = default_log;
  w->st = st;
  w->stats.healthy = 1;
  for (int i = 0; i < 2; i++) {
    w->rows[i] = calloc(w->opts.queue_rows, sizeof *w->rows[i]);
    w->hash[i] = calloc(w->opts.queue_rows, sizeof *w->hash[i]);
  }
  if (!w->rows[0] || !w->rows[1] || !w->hash[0] || !w->hash[1]) {
    for (int i = 0; i < 2; i++) {
      free(w->rows[i]);
      free(w->hash[i]);
    }
    free(w);
    return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory for a queue of %zu rows",
                           opts ? opts->queue_rows : 0);
  }
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv_work, NULL);
  pthread_cond_init(&w->cv_idle, NULL);
  int e = pthread_create(&w->thread, NULL, writer_main, w);
  if (e) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv_work);
    pthread_cond_destroy(&w->cv_idle);
    for (int i = 0; i < 2; i++) {
      free(w->rows[i]);
      free(w->hash[i]);
    }
    free(w);
    return shoal_error_set(err, SHOAL_ENOMEM, "store: cannot start the writer thread: %s",
                           strerror(e));
  }
  *out = w;
  return 0;
}

int store_writer_metric(store_writer *w, const char *run, const char *name, int64_t step,
                        double time, double value) {
  if (!w || !store_name_valid(run) || !store__metric_name_valid(name) || !isfinite(time))
    return SHOAL_EINVAL;
  uint64_t h = key_hash(run, name);
  pthread_mutex_lock(&w->mu);
  int rc = 0;
  if (w->closing) {
    rc = SHOAL_ECLOSED;
    goto done;
  }
  int a = w->active;
  store_metric *m = NULL;
  if (w->n_rows[a] < w->opts.queue_rows) {
    m = &w->rows[a][w->n_rows[a]];
    w->hash[a][w->n_rows[a]++] = h;
    snprintf(m->run, sizeof m->run, "%s", run);
    snprintf(m->name, sizeof m->name, "%s", name);
  } else {
    for (size_t i = w->n_rows[a]; i-- > 0;)
      if (w->hash[a][i] == h && strcmp(w->rows[a][i].name, name) == 0 &&
          strcmp(w->rows[a][i].run, run) == 0) {
        m = &w->rows[a][i];
        break;
      }
    if (m) {
      w->stats.metrics_coalesced++;
      note_full(w, STORE_KIND_METRICS, "newer rows replace queued rows of the same metric");
    } else {
      w->stats.metrics_dropped++;
      note_full(w, STORE_KIND_METRICS, "rows of metrics with no queued row are dropped");
      rc = SHOAL_EFULL;
      goto done;
    }
  }
  m->step = step;
  m->time = time;
  m->value = value;
  update_pending(w);
  pthread_cond_signal(&w->cv_work);
done:
  pthread_mutex_unlock(&w->mu);
  return rc;
}

int store_writer_snapshot(store_writer *w, const store_snapshot_meta *meta, void *bytes,
                          size_t len) {
  if (!w || !meta || (!bytes && len) || !store_name_valid(meta->run) || meta->version < 0) {
    free(bytes);
    return SHOAL_EINVAL;
  }
  snap_item *it = calloc(1, sizeof *it);
  if (!it) {
    free(bytes);
    return SHOAL_ENOMEM;
  }
  it->meta = *meta;
  if (it->meta.wall_time == 0) it->meta.wall_time = store__wall_time();
  it->bytes = bytes;
  it->len = len;
  pthread_mutex_lock(&w->mu);
  if (w->closing) {
    pthread_mutex_unlock(&w->mu);
    free(bytes);
    free(it);
    return SHOAL_ECLOSED;
  }
  snap_item **pp = &w->snaps;
  while (*pp && strcmp((*pp)->meta.run, meta->run) != 0) pp = &(*pp)->next;
  if (*pp) {
    snap_item *old = *pp;
    it->next = old->next;
    *pp = it;
    w->snap_bytes -= old->len;
    free(old->bytes);
    free(old);
    w->stats.snapshots_superseded++;
  } else {
    *pp = it;
    w->n_snaps++;
  }
  w->snap_bytes += len;
  update_pending(w);
  pthread_cond_signal(&w->cv_work);
  pthread_mutex_unlock(&w->mu);
  return 0;
}

int store_writer_replay(store_writer *w, const char *run, uint64_t seq, void *bytes, size_t len) {
  if (!w || !bytes || !len || len > STORE_REPLAY_SEGMENT_MAX || !store_name_valid(run)) {
    free(bytes);
    return SHOAL_EINVAL;
  }
  replay_item *it = calloc(1, sizeof *it);
  if (!it) {
    free(bytes);
    return SHOAL_ENOMEM;
  }
  snprintf(it->run, sizeof it->run, "%s", run);
  it->seq = seq;
  it->bytes = bytes;
  it->len = len;
  pthread_mutex_lock(&w->mu);
  int rc = 0;
  if (w->closing) {
    rc = SHOAL_ECLOSED;
  } else if (len > w->opts.max_pending_bytes) {
    w->stats.replay_dropped++;
    note_full(w, STORE_KIND_REPLAY, "a segment larger than max_pending_bytes is dropped");
    rc = SHOAL_EFULL;
  } else {
    /* Past the bound the oldest waiting segments go: a replay restored from the store
     * wants the newest data. The one being written stays. */
    while (w->replay_bytes + len > w->opts.max_pending_bytes && w->replay_head) {
      replay_item *old = w->replay_head;
      w->replay_head = old->next;
      if (!w->replay_head) w->replay_tail = NULL;
      w->n_replay--;
      w->replay_bytes -= old->len;
      w->stats.replay_dropped++;
      free(old->bytes);
      free(old);
      note_full(w, STORE_KIND_REPLAY, "the oldest waiting segments are dropped");
    }
  }
  if (rc) {
    pthread_mutex_unlock(&w->mu);
    free(bytes);
    free(it);
    return rc;
  }
  if (w->replay_tail)
    w->replay_tail->next = it;
  else
    w->replay_head = it;
  w->replay_tail = it;
  w->n_replay++;
  w->replay_bytes += len;
  update_pending(w);
  pthread_cond_signal(&w->cv_work);
  pthread_mutex_unlock(&w->mu);
  return 0;
}

int store_writer_run_status(store_writer *w, const char *run, int status) {
  if (!w || !store_name_valid(run) || status < STORE_RUN_CREATED || status > STORE_RUN_STOPPED)
    return SHOAL_EINVAL;
  pthread_mutex_lock(&w->mu);
  if (w->closing) {
    pthread_mutex_unlock(&w->mu);
    return SHOAL_ECLOSED;
  }
  run_item **pp = &w->runs;
  while (*pp && strcmp((*pp)->run, run) != 0) pp = &(*pp)->next;
  if (*pp) {
    (*pp)->status = status; /* the newest status of a run is the one that matters */
  } else {
    run_item *it = calloc(1, sizeof *it);
    if (!it) {
      pthread_mutex_unlock(&w->mu);
      return SHOAL_ENOMEM;
    }
    snprintf(it->run, sizeof it->run, "%s", run);
    it->status = status;
    *pp = it;
    w->n_runs++;
  }
  update_pending(w);
  pthread_cond_signal(&w->cv_work);
  pthread_mutex_unlock(&w->mu);
  return 0;
}

void store_writer_stats_get(store_writer *w, store_writer_stats *out) {
  pthread_mutex_lock(&w->mu);
  update_pending(w);
  *out = w->stats;
  pthread_mutex_unlock(&w->mu);
}

/* Waits (under the lock) until everything is written or the deadline passes. */
static int wait_idle(store_writer *w, double timeout_s) {
  double deadline = store__wall_time() + (timeout_s > 0 ? timeout_s : 0);
  while (!all_done(w)) {
    double now = store__wall_time();
    if (now >= deadline) return SHOAL_ETIMEDOUT;
    double t = now + (deadline - now < 0.05 ? deadline - now : 0.05);
    struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
    pthread_cond_timedwait(&w->cv_idle, &w->mu, &ts);
  }
  return 0;
}

int store_writer_flush(store_writer *w, double timeout_s, store_writer_stats *out) {
  if (!w) return SHOAL_EINVAL;
  pthread_mutex_lock(&w->mu);
  pthread_cond_signal(&w->cv_work);
  int rc = wait_idle(w, timeout_s);
  if (out) *out = w->stats;
  pthread_mutex_unlock(&w->mu);
  return rc;
}

int store_writer_close(store_writer *w, double timeout_s, store_writer_stats *out) {
  if (!w) return 0;
  pthread_mutex_lock(&w->mu);
  w->closing = 1;
  pthread_cond_signal(&w->cv_work);
  wait_idle(w, timeout_s);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv_work);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);

  /* Whatever is left was not written. */
  store_writer_stats *s = &w->stats;
  size_t lost_rows = w->n_rows[0] + w->n_rows[1], lost_snaps = 0, lost_replay = 0, lost_runs = 0;
  s->metrics_dropped += lost_rows;
  w->n_rows[0] = w->n_rows[1] = 0;
  if (w->snap_inflight) w->snap_inflight->next = w->snaps, w->snaps = w->snap_inflight;
  for (snap_item *q = w->snaps, *n; q; q = n) {
    n = q->next;
    free(q->bytes);
    free(q);
    lost_snaps++;
  }
  if (w->replay_inflight) {
    w->replay_inflight->next = w->replay_head;
    w->replay_head = w->replay_inflight;
  }
  for (replay_item *q = w->replay_head, *n; q; q = n) {
    n = q->next;
    free(q->bytes);
    free(q);
    lost_replay++;
  }
  if (w->run_inflight) w->run_inflight->next = w->runs, w->runs = w->run_inflight;
  for (run_item *q = w->runs, *n; q; q = n) {
    n = q->next;
    free(q);
    lost_runs++;
  }
  s->snapshots_dropped += lost_snaps;
  s->replay_dropped += lost_replay;
  s->runs_dropped += lost_runs;
  w->snaps = w->snap_inflight = NULL;
  w->replay_head = w->replay_tail = w->replay_inflight = NULL;
  w->runs = w->run_inflight = NULL;
  w->n_snaps = w->n_replay = w->n_runs = 0;
  w->snap_bytes = w->replay_bytes = 0;
  update_pending(w);
  int rc = 0;
  if (lost_rows || lost_snaps || lost_replay || lost_runs) {
    wlog(w,
         "closed with unwritten data: %zu metric rows, %zu snapshots, %zu replay segments, "
         "%zu run status changes (last error: %s)",
         lost_rows, lost_snaps, lost_replay, lost_runs,
         s->last_error_msg[0] ? s->last_error_msg : "none");
    rc = SHOAL_EIO;
  }
  uint64_t errs = 0;
  for (int k = 0; k < STORE_KIND_COUNT; k++) errs += s->errors[k];
  if (errs)
    wlog(w,
         "writer closed after %llu failed store calls (metrics %llu, snapshot %llu, replay "
         "%llu, run %llu)",
         (unsigned long long)errs, (unsigned long long)s->errors[0],
         (unsigned long long)s->errors[1], (unsigned long long)s->errors[2],
         (unsigned long long)s->errors[3]);
  if (out) *out = *s;
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv_work);
  pthread_cond_destroy(&w->cv_idle);
  for (int i = 0; i < 2; i++) {
    free(w->rows[i]);
    free(w->hash[i]);
  }
  free(w);
  return rc;
}
