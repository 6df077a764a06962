/* SPDX-License-Identifier: Apache-2.0 */
/*
 * learner/follow.c — the store follower (see follow.h).
 */
#define _GNU_SOURCE
#include "learner/follow.h"

#include "learner/replay_log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { LIST_MAX = 256 };

typedef struct source_slot {
  char name[STORE_NAME_MAX];
  uint64_t used; /* a tick of the last use, for least-recently-used reuse */
} source_slot;

struct follow {
  follow_config cfg;
  char run[STORE_NAME_MAX];
  pthread_t thread;
  pthread_mutex_t mu; /* guards stats and the stop flag's wait */
  pthread_cond_t cv;
  bool stop, joined;
  bool inserting; /* a segment is going in: mixed mode holds actors to their share */
  /* The store may have rows for us: from the start, and while listed segments are
   * being taken (read, then inserted); not after a listing found none, after an error,
   * or while the store is at its share. Actors are held meanwhile, so a slow store
   * still gets its share while it has rows to give. */
  bool backlog;
  follow_stats stats;
  source_slot *slots;
  uint64_t tick;
  uint64_t seqs[LIST_MAX];
  store_segment seg; /* reused for every read */
  rlog_segment lseg; /* cfg.replay_log: the log segment being taken apart */
};

static void say(follow *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(follow *f, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (f->cfg.log)
    f->cfg.log(f->cfg.ctx, msg);
  else
    fprintf(stderr, "shoal-learner: %s\n", msg);
}

static bool stopping(follow *f) {
  pthread_mutex_lock(&f->mu);
  bool s = f->stop;
  pthread_mutex_unlock(&f->mu);
  return s;
}

/* Sleeps up to s seconds, waking early on stop. */
static void nap(follow *f, double s) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  long ns = until.tv_nsec + (long)((s - (double)(long)s) * 1e9);
  until.tv_sec += (time_t)s + ns / 1000000000L;
  until.tv_nsec = ns % 1000000000L;
  pthread_mutex_lock(&f->mu);
  while (!f->stop)
    if (pthread_cond_timedwait(&f->cv, &f->mu, &until) == ETIMEDOUT) break;
  pthread_mutex_unlock(&f->mu);
}

/* The replay stream of source: its slot, or a free one, or the least recently used
 * one reset (that source's open episode is then abandoned, never joined to another's). */
static int stream_of(follow *f, const char *source, shoal_error *err) {
  int best = 0;
  f->tick++;
  for (int i = 0; i < f->cfg.nstreams; i++) {
    if (!strcmp(f->slots[i].name, source)) {
      f->slots[i].used = f->tick;
      return f->cfg.first_stream + i;
    }
    if (f->slots[i].used < f->slots[best].used) best = i;
  }
  if (f->slots[best].name[0]) {
    int rc = f->cfg.reset ? f->cfg.reset(f->cfg.ctx, f->cfg.first_stream + best, err)
                          : replay_reset_stream(f->cfg.mem, f->cfg.first_stream + best, err);
    if (rc) return rc;
  }
  snprintf(f->slots[best].name, sizeof f->slots[best].name, "%s", source);
  f->slots[best].used = f->tick;
  return f->cfg.first_stream + best;
}

static void reject(follow *f, uint64_t seq, uint64_t rows, const char *why) {
  say(f, "store segment %llu of run '%s' rejected: %s", (unsigned long long)seq, f->run, why);
  pthread_mutex_lock(&f->mu);
  f->stats.rejected_segments++;
  f->stats.rejected_rows += rows;
  f->stats.last_seq = seq;
  pthread_mutex_unlock(&f->mu);
}

/* A read that failed and is tried again on the next poll: counted, the first one said.
 * Returns rc. */
static int retry_later(follow *f, int rc, const char *what, uint64_t seq, const shoal_error *err) {
  pthread_mutex_lock(&f->mu);
  bool first = f->stats.store_errors++ == 0;
  pthread_mutex_unlock(&f->mu);
  if (first) say(f, "reading %s %llu: %s (retrying)", what, (unsigned long long)seq, err->msg);
  return rc == SHOAL_EFULL ? SHOAL_EIO : rc; /* EFULL from handle means held back */
}

/* Mixed mode: may `rows` more store rows go in now? */
static bool within_fraction(follow *f, uint32_t rows) {
  double fr = f->cfg.store_fraction;
  if (fr <= 0) return true;
  replay_stats rs;
  replay_get_stats(f->cfg.mem, &rs);
  pthread_mutex_lock(&f->mu);
  double mine = (double)f->stats.rows;
  pthread_mutex_unlock(&f->mu);
  double total = (double)rs.inserted_steps, actors = total - mine;
  if (actors < 0) actors = 0;
  /* store/(store+actors) <= f  <=>  store <= f/(1-f) * actors; one segment of slack
   * so a large segment is not held forever. */
  return mine + rows <= fr / (1 - fr) * actors + rows;
}

/* Inserts the checked segment f->seg into replay in chunks. Returns 0 or the replay's
 * error (the rest of the segment is dropped and counted by the caller). *done is the
 * rows inserted. */
static int insert_segment(follow *f, int stream, uint32_t *done, shoal_error *err) {
  store_segment *s = &f->seg;
  const store_segment_spec *sp = &s->spec;
  size_t es = store_segment_dtype_size(sp->obs_dtype), ob = es;
  for (int d = 0; d < sp->obs_ndim; d++) ob *= (size_t)sp->obs_shape[d];
  size_t ab = store_segment_dtype_size(sp->act_dtype);
  for (int d = 0; d < sp->act_ndim; d++) ab *= (size_t)sp->act_shape[d];
  uint32_t i = 0, ends_before = 0;
  *done = 0;
  while (i < s->rows) {
    uint32_t n = s->rows - i < FOLLOW_CHUNK ? s->rows - i : FOLLOW_CHUNK;
    /* A segment goes in whole, also when a stop comes meanwhile: the learner's limiter
     * lets every insert through once it is stopping, so this wait ends. */
    if (f->cfg.wait_room)
      while (f->cfg.wait_room(f->cfg.ctx, n) != 0) continue;
    replay_steps rs = {0};
    rs.n = n;
    rs.cols[0] = (const unsigned char *)s->obs + (size_t)i * ob;
    rs.cols[1] = (const unsigned char *)s->action + (size_t)i * ab;
    rs.reward = s->reward + i;
    rs.terminated = s->terminated + i;
    rs.truncated = s->truncated + i;
    uint32_t k = 0;
    for (uint32_t j = i; j < i + n; j++) k += s->terminated[j] | s->truncated[j];
    rs.final_obs = k ? (const unsigned char *)s->final_obs + (size_t)ends_before * ob : NULL;
    rs.priority = f->cfg.prioritized && s->priority ? s->priority + i : NULL;
    int rc = f->cfg.insert ? f->cfg.insert(f->cfg.ctx, stream, &rs, err)
                           : replay_insert(f->cfg.mem, stream, &rs, err);
    if (rc) return rc;
    ends_before += k;
    i += n;
    *done = i;
    pthread_mutex_lock(&f->mu);
    f->stats.rows += n;
    pthread_cond_broadcast(&f->cv); /* actors waiting for their share */
    pthread_mutex_unlock(&f->mu);
  }
  return 0;
}

/* Handles segment seq. Returns 0 when it was taken (inserted or rejected), nonzero
 * when it must be tried again later (store unreachable, held back, stopping). */
static int handle(follow *f, uint64_t seq) {
  shoal_error err = {0};
  int rc = store_segment_read(f->cfg.st, f->run, seq, &f->seg, &err);
  if (rc == SHOAL_EFORMAT || rc == SHOAL_ENOENT) {
    reject(f, seq, 0, err.msg);
    return 0;
  }
  if (rc) return retry_later(f, rc, "store segment", seq, &err);
  if ((rc = store_segment_check(&f->seg, &f->cfg.limits, &err))) {
    reject(f, seq, f->seg.rows, err.msg);
    return 0;
  }
  if (!within_fraction(f, f->seg.rows)) {
    pthread_mutex_lock(&f->mu);
    f->stats.held_back++;
    pthread_mutex_unlock(&f->mu);
    return SHOAL_EFULL;
  }
  int stream = stream_of(f, f->seg.source, &err);
  uint32_t done = 0;
  pthread_mutex_lock(&f->mu);
  f->inserting = true;
  pthread_mutex_unlock(&f->mu);
  if (stream >= 0)
    rc = insert_segment(f, stream, &done, &err);
  else
    rc = stream;
  pthread_mutex_lock(&f->mu);
  f->inserting = false;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  if (rc) {
    char why[600];
    snprintf(why, sizeof why, "replay refused row %u on: %s", done, err.msg);
    reject(f, seq, f->seg.rows - done, why);
    return 0;
  }
  pthread_mutex_lock(&f->mu);
  f->stats.segments++;
  f->stats.last_seq = seq;
  pthread_mutex_unlock(&f->mu);
  return 0;
}

/* ---- following another learner's replay log (cfg.replay_log) ------------------- */

/* The log's columns this follower reads, by name. */
enum { LC_OBS, LC_ACTION, LC_REWARD, LC_TERM, LC_TRUNC, LC_PRIO, LC_ENV, LC_TAIL, LC_N };
static const char *const lc_name[LC_N] = {"obs",       "action",   "reward", "terminated",
                                          "truncated", "priority", "env",    "tail"};

static int seg_dtype(uint32_t replay_dtype) {
  return replay_dtype == REPLAY_U8    ? STORE_SEG_U8
         : replay_dtype == REPLAY_I32 ? STORE_SEG_I32
         : replay_dtype == REPLAY_F32 ? STORE_SEG_F32
                                      : -1;
}

/* One env's group of a batch record (steps, then a final observation per ended step)
 * as an experience segment in f->seg of source "a<actor>-e<env>", checked and
 * inserted as any other. Returns 0, or nonzero when the record must be rejected. */
static int take_group(follow *f, const rlog_batch *b, const int *ci, uint32_t s0, uint32_t nsteps,
                      uint32_t ntails, size_t ob, size_t ab, shoal_error *err) {
  const rlog_segment *ls = &f->lseg;
  store_segment_spec sp = {0};
  const rlog_column *oc = &ls->cols[ci[LC_OBS]], *acol = &ls->cols[ci[LC_ACTION]];
  sp.obs_dtype = seg_dtype(oc->dtype);
  sp.obs_ndim = (int)oc->ndim;
  for (uint32_t d = 0; d < oc->ndim; d++) sp.obs_shape[d] = oc->shape[d];
  sp.act_dtype = seg_dtype(acol->dtype);
  sp.act_ndim = (int)acol->ndim;
  for (uint32_t d = 0; d < acol->ndim; d++) sp.act_shape[d] = acol->shape[d];
  int prio = ci[LC_PRIO] >= 0;
  int rc = store_segment_reserve(&f->seg, &sp, nsteps, ntails, prio, err);
  if (rc) return rc;
  store_segment *g = &f->seg;
  snprintf(g->source, sizeof g->source, "a%u-e%d", b->actor,
           ((const int32_t *)b->cols[ci[LC_ENV]])[s0]);
  memcpy(g->obs, (const unsigned char *)b->cols[ci[LC_OBS]] + (size_t)s0 * ob, nsteps * ob);
  memcpy(g->action, (const unsigned char *)b->cols[ci[LC_ACTION]] + (size_t)s0 * ab, nsteps * ab);
  memcpy(g->reward, (const float *)b->cols[ci[LC_REWARD]] + s0, nsteps * sizeof(float));
  memcpy(g->terminated, (const uint8_t *)b->cols[ci[LC_TERM]] + s0, nsteps);
  if (ci[LC_TRUNC] >= 0)
    memcpy(g->truncated, (const uint8_t *)b->cols[ci[LC_TRUNC]] + s0, nsteps);
  else
    memset(g->truncated, 0, nsteps);
  if (ntails)
    memcpy(g->final_obs, (const unsigned char *)b->cols[ci[LC_OBS]] + (size_t)(s0 + nsteps) * ob,
           ntails * ob);
  if (prio) memcpy(g->priority, (const float *)b->cols[ci[LC_PRIO]] + s0, nsteps * sizeof(float));
  if ((rc = store_segment_check(g, &f->cfg.limits, err))) return rc;
  int stream = stream_of(f, g->source, err);
  if (stream < 0) return stream;
  uint32_t done;
  return insert_segment(f, stream, &done, err);
}

/* Log segment seq: every batch record's env groups into replay (priority checkpoints
 * are the writing learner's own and are skipped). Returns as handle(). */
static int handle_log(follow *f, uint64_t seq) {
  shoal_error err = {0};
  void *bytes = NULL;
  size_t len = 0;
  int rc = store_replay_read(f->cfg.st, f->run, seq, &bytes, &len, &err);
  if (!rc) rc = rlog_decode(bytes, len, seq, &f->lseg, &err);
  free(bytes);
  if (rc == SHOAL_EFORMAT || rc == SHOAL_ENOENT) { /* damaged, or trimmed by its learner */
    reject(f, seq, 0, err.msg);
    return 0;
  }
  if (rc) return retry_later(f, rc, "log segment", seq, &err);
  rlog_segment *ls = &f->lseg;
  if (ls->flags & RLOG_SEG_PRIORITIES) {
    pthread_mutex_lock(&f->mu);
    f->stats.last_seq = seq;
    pthread_mutex_unlock(&f->mu);
    return 0;
  }
  int ci[LC_N];
  for (int k = 0; k < LC_N; k++) {
    ci[k] = -1;
    for (uint32_t c = 0; c < ls->ncols; c++)
      if (!strcmp(ls->cols[c].name, lc_name[k])) ci[k] = (int)c;
  }
  if (ci[LC_OBS] < 0 || ci[LC_ACTION] < 0 || ci[LC_REWARD] < 0 || ci[LC_TERM] < 0 ||
      ci[LC_ENV] < 0 || ci[LC_TAIL] < 0) {
    reject(f, seq, ls->steps, "not an Ape-X learner's log (columns missing)");
    return 0;
  }
  if (!within_fraction(f, (uint32_t)ls->steps)) {
    pthread_mutex_lock(&f->mu);
    f->stats.held_back++;
    pthread_mutex_unlock(&f->mu);
    return SHOAL_EFULL;
  }
  size_t ob = rlog_column_bytes(&ls->cols[ci[LC_OBS]]);
  size_t ab = rlog_column_bytes(&ls->cols[ci[LC_ACTION]]);
  pthread_mutex_lock(&f->mu);
  f->inserting = true;
  pthread_mutex_unlock(&f->mu);
  size_t pos = 0;
  rlog_record r;
  int got;
  uint64_t bad_rows = 0;
  char why[600] = "";
  while ((got = rlog_next(ls, &pos, &r, &err)) == 1) {
    if (r.kind != RLOG_REC_BATCH) continue;
    const rlog_batch *b = &r.batch;
    const int32_t *env = b->cols[ci[LC_ENV]];
    const uint8_t *tail = b->cols[ci[LC_TAIL]];
    for (uint32_t i = 0; i < b->rows;) {
      uint32_t s0 = i, nsteps = 0, ntails = 0;
      while (i < b->rows && env[i] == env[s0] && !tail[i]) nsteps++, i++;
      while (i < b->rows && env[i] == env[s0] && tail[i]) ntails++, i++;
      if (!nsteps) { /* tails without steps: malformed */
        bad_rows += ntails;
        continue;
      }
      shoal_error ge = {0};
      if (take_group(f, b, ci, s0, nsteps, ntails, ob, ab, &ge)) {
        bad_rows += nsteps;
        if (!why[0]) snprintf(why, sizeof why, "%s", ge.msg);
      }
    }
  }
  pthread_mutex_lock(&f->mu);
  f->inserting = false;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  if (got < 0 || bad_rows) {
    reject(f, seq, bad_rows, got < 0 ? err.msg : why);
    return 0;
  }
  pthread_mutex_lock(&f->mu);
  f->stats.segments++;
  f->stats.last_seq = seq;
  pthread_mutex_unlock(&f->mu);
  return 0;
}

/* The log's segments above after, at most LIST_MAX, into f->seqs. */
static int list_log(follow *f, uint64_t after, size_t *n, shoal_error *err) {
  uint64_t *all = NULL;
  size_t na = 0;
  int rc = store_replay_list(f->cfg.st, f->run, &all, &na, err);
  *n = 0;
  for (size_t i = 0; !rc && i < na && *n < LIST_MAX; i++)
    if (after == STORE_SEG_FIRST || all[i] > after) f->seqs[(*n)++] = all[i];
  free(all);
  return rc;
}

static void *loop(void *arg) {
  shoal_thread_name("shoal-follow");
  follow *f = arg;
  while (!stopping(f)) {
    pthread_mutex_lock(&f->mu);
    uint64_t after = f->stats.last_seq;
    pthread_mutex_unlock(&f->mu);
    size_t n = 0;
    shoal_error err = {0};
    int rc = f->cfg.replay_log
                 ? list_log(f, after, &n, &err)
                 : store_segment_list(f->cfg.st, f->run, after, f->seqs, LIST_MAX, &n, &err);
    if (rc) {
      pthread_mutex_lock(&f->mu);
      bool first = f->stats.store_errors++ == 0;
      f->backlog = false; /* an outage must not hold the actors */
      pthread_cond_broadcast(&f->cv);
      pthread_mutex_unlock(&f->mu);
      if (first)
        say(f, "listing store segments: %s (retrying every %.2f s)", err.msg, f->cfg.poll_s);
      nap(f, f->cfg.poll_s);
      continue;
    }
    size_t i = 0;
    int hrc = 0;
    pthread_mutex_lock(&f->mu);
    f->backlog = n > 0;
    pthread_mutex_unlock(&f->mu);
    for (; i < n && !stopping(f); i++)
      if ((hrc = f->cfg.replay_log ? handle_log(f, f->seqs[i]) : handle(f, f->seqs[i]))) break;
    /* Nothing listed, or a segment that cannot be read now: the actors go on. Held back
     * (the store at its share) keeps the backlog: the store still has rows, and the
     * actors keep to their share through follow_admit_actor's ratio meanwhile (a slow
     * listing would otherwise let them run past it). After a full list the next
     * listing says whether there is more. */
    if (n == 0 || (i < n && hrc != SHOAL_EFULL)) {
      pthread_mutex_lock(&f->mu);
      f->backlog = false;
      pthread_cond_broadcast(&f->cv);
      pthread_mutex_unlock(&f->mu);
    }
    if (i < n || n == 0) nap(f, f->cfg.poll_s); /* nothing new, or held back / failing */
  }
  return NULL;
}

int follow_start(follow **out, const follow_config *cfg, shoal_error *err) {
  if (!out || !cfg || !cfg->st || !cfg->mem || !cfg->run || !store_name_valid(cfg->run) ||
      cfg->nstreams < 1 || cfg->first_stream < 0 || !(cfg->poll_s > 0) ||
      !(cfg->store_fraction >= 0 && cfg->store_fraction < 1))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "follow: bad config (run '%s', %d streams, poll %g s, fraction %g)",
                           cfg && cfg->run ? cfg->run : "(null)", cfg ? cfg->nstreams : 0,
                           cfg ? cfg->poll_s : 0, cfg ? cfg->store_fraction : 0);
  store_run r = {0};
  int rc = store_run_find(cfg->st, cfg->run, &r, err);
  store_run_clear(&r);
  if (rc == SHOAL_ENOENT)
    return shoal_error_set(err, rc, "replay.store_run: no run '%s' in %s to follow", cfg->run,
                           store_uri(cfg->st));
  if (rc) return rc;
  follow *f = calloc(1, sizeof *f);
  if (f) f->slots = calloc((size_t)cfg->nstreams, sizeof *f->slots);
  if (!f || !f->slots) {
    if (f) free(f);
    return shoal_error_set(err, SHOAL_ENOMEM, "follow: out of memory");
  }
  f->cfg = *cfg;
  f->backlog = true; /* until a listing says otherwise */
  snprintf(f->run, sizeof f->run, "%s", cfg->run);
  f->cfg.run = f->run;
  f->stats.last_seq = cfg->start_after;
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  int e = pthread_create(&f->thread, NULL, loop, f);
  if (e) {
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f->slots);
    free(f);
    return shoal_error_set(err, SHOAL_ENOMEM, "follow: cannot start a thread: %s", strerror(e));
  }
  *out = f;
  return 0;
}

void follow_stats_get(follow *f, follow_stats *out) {
  pthread_mutex_lock(&f->mu);
  *out = f->stats;
  pthread_mutex_unlock(&f->mu);
}

void follow_stop(follow *f) {
  if (!f) return;
  pthread_mutex_lock(&f->mu);
  f->stop = true;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  if (!f->joined) pthread_join(f->thread, NULL);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
  store_segment_free(&f->seg);
  rlog_segment_free(&f->lseg);
  free(f->slots);
  free(f);
}

uint64_t follow_resume_after(store *st, const char *run_self) {
  store_metric *rows = NULL;
  size_t n = 0;
  shoal_error err = {0};
  uint64_t after = STORE_SEG_FIRST;
  if (store_metrics_query(st, run_self, "store/seq", INT64_MIN, INT64_MAX, &rows, &n, &err) == 0) {
    double best_t = -1;
    for (size_t i = 0; i < n; i++)
      if (rows[i].time >= best_t && rows[i].value >= 0) {
        best_t = rows[i].time;
        after = (uint64_t)rows[i].value;
      }
  }
  free(rows);
  return after;
}

void follow_progress_json(follow *f, char *buf, size_t cap) {
  if (!cap) return;
  buf[0] = 0;
  if (!f) return;
  follow_stats s;
  follow_stats_get(f, &s);
  snprintf(buf, cap,
           ",\"store_segments\":%llu,\"store_rows\":%llu,\"store_rejected\":%llu,"
           "\"store_rejected_rows\":%llu,\"store_seq\":%lld",
           (unsigned long long)s.segments, (unsigned long long)s.rows,
           (unsigned long long)s.rejected_segments, (unsigned long long)s.rejected_rows,
           s.last_seq == STORE_SEG_FIRST ? -1LL : (long long)s.last_seq);
}

void follow_metrics(follow *f, store_writer *w, const char *run, int64_t step, double time) {
  if (!f) return;
  follow_stats s;
  follow_stats_get(f, &s);
  store_writer_metric(w, run, "store/segments", step, time, (double)s.segments);
  store_writer_metric(w, run, "store/rows", step, time, (double)s.rows);
  store_writer_metric(w, run, "store/rejected", step, time, (double)s.rejected_segments);
  if (s.last_seq != STORE_SEG_FIRST)
    store_writer_metric(w, run, "store/seq", step, time, (double)s.last_seq);
}

void follow_finish(follow *f, store_writer *w, const char *run, int64_t step) {
  if (!f) return;
  pthread_mutex_lock(&f->mu);
  f->stop = true;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  pthread_join(f->thread, NULL);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  follow_metrics(f, w, run, step, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
  follow_stats s = f->stats;
  printf(
      "{\"event\":\"store\",\"segments\":%llu,\"rows\":%llu,\"rejected_segments\":%llu,"
      "\"rejected_rows\":%llu,\"last_seq\":%lld}\n",
      (unsigned long long)s.segments, (unsigned long long)s.rows,
      (unsigned long long)s.rejected_segments, (unsigned long long)s.rejected_rows,
      s.last_seq == STORE_SEG_FIRST ? -1LL : (long long)s.last_seq);
  fflush(stdout);
  f->joined = true;
  follow_stop(f);
}

int follow_admit_actor(follow *f, uint32_t n) {
  if (!f || f->cfg.store_fraction <= 0) return 0;
  double fr = f->cfg.store_fraction;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 2;
  int rc = 0;
  pthread_mutex_lock(&f->mu);
  while ((f->inserting || f->backlog) && !f->stop) {
    replay_stats rs;
    replay_get_stats(f->cfg.mem, &rs);
    double mine = (double)f->stats.rows, actors = (double)rs.inserted_steps - mine;
    /* actors/(store+actors) <= 1-f  <=>  actors <= (1-f)/f * store */
    if (actors <= (1 - fr) / fr * mine) break;
    if (pthread_cond_timedwait(&f->cv, &f->mu, &until) == ETIMEDOUT) {
      rc = SHOAL_EFULL;
      break;
    }
  }
  pthread_mutex_unlock(&f->mu);
  return rc;
}

void follow_halt(follow *f) {
  if (!f) return;
  pthread_mutex_lock(&f->mu);
  f->stop = true;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}
