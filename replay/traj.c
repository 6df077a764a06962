/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay/traj.c — the trajectory FIFO for on-policy learners: a ring of
 * `capacity` unroll slots. A push reserves the slot after the last under the lock,
 * copies without it, then marks the slot ready; pop takes ready slots in arrival
 * order, so a slow pusher holds back only the unrolls queued after it. Pops copy
 * out without the lock too (the slots are marked as being read).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replay/replay.h"

enum { SLOT_FREE = 0, SLOT_WRITING = 1, SLOT_READY = 2, SLOT_READING = 3 };

struct replay_traj {
  replay_traj_config cfg;
  char boot_name[REPLAY_NAME_MAX], unroll_name[REPLAY_NAME_MAX];
  int boot;   /* index of the T+1-row column, or -1 */
  int unroll; /* index of the one-row column, or -1 */
  size_t item[REPLAY_MAX_COLUMNS];
  size_t rows_bytes[REPLAY_MAX_COLUMNS]; /* bytes of one unroll of column c */
  uint8_t *col[REPLAY_MAX_COLUMNS];      /* (capacity, rows, item) */
  float *logp;                           /* (capacity, T) */
  int64_t *version;                      /* (capacity) */
  uint8_t *state;                        /* (capacity) SLOT_ */

  pthread_mutex_t mu;
  pthread_cond_t not_full;  /* a slot was freed */
  pthread_cond_t not_empty; /* a slot became ready */
  int64_t head;             /* oldest slot in use */
  int64_t count;            /* slots in use, any state but free */
  int closed;
  replay_traj_stats st;
};

static int traj_check(const replay_traj_config *c, shoal_error *err) {
  if (!c) return shoal_error_set(err, SHOAL_EINVAL, "replay_traj: config is NULL");
  if (c->T < 1 || c->T > (1 << 20))
    return shoal_error_set(err, SHOAL_EINVAL, "replay_traj: T = %d outside [1, 2^20]", c->T);
  if (c->capacity < 1 || c->capacity > ((int64_t)1 << 31))
    return shoal_error_set(err, SHOAL_EINVAL, "replay_traj: capacity %lld outside [1, 2^31]",
                           (long long)c->capacity);
  if (c->ncols < 1 || c->ncols > REPLAY_MAX_COLUMNS)
    return shoal_error_set(err, SHOAL_EINVAL, "replay_traj: ncols %d outside [1, %d]", c->ncols,
                           REPLAY_MAX_COLUMNS);
  if (c->full != REPLAY_FULL_BLOCK && c->full != REPLAY_FULL_DROP_OLDEST &&
      c->full != REPLAY_FULL_DROP_NEW)
    return shoal_error_set(err, SHOAL_EINVAL, "replay_traj: unknown full policy %d", (int)c->full);
  int boot_found = !c->bootstrap_column, unroll_found = !c->unroll_column;
  if (c->bootstrap_column && c->unroll_column && !strcmp(c->bootstrap_column, c->unroll_column))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "replay_traj: '%s' cannot be both the bootstrap and the unroll column",
                           c->unroll_column);
  for (int i = 0; i < c->ncols; i++) {
    const replay_column *col = &c->cols[i];
    size_t len = strnlen(col->name, REPLAY_NAME_MAX);
    if (len == 0 || len == REPLAY_NAME_MAX)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "replay_traj: column %d has an empty or unterminated name", i);
    if (replay_column_bytes(col) == 0)
      return shoal_error_set(err, SHOAL_EINVAL, "replay_traj: column '%s' has a bad dtype or shape",
                             col->name);
    for (int j = 0; j < i; j++)
      if (strcmp(c->cols[j].name, col->name) == 0)
        return shoal_error_set(err, SHOAL_EINVAL, "replay_traj: column name '%s' appears twice",
                               col->name);
    if (c->bootstrap_column && strcmp(c->bootstrap_column, col->name) == 0) boot_found = 1;
    if (c->unroll_column && strcmp(c->unroll_column, col->name) == 0) unroll_found = 1;
  }
  if (!unroll_found)
    return shoal_error_set(err, SHOAL_EINVAL, "replay_traj: unroll_column '%s' is not a column",
                           c->unroll_column);
  if (!boot_found)
    return shoal_error_set(err, SHOAL_EINVAL, "replay_traj: bootstrap_column '%s' is not a column",
                           c->bootstrap_column);
  return 0;
}

size_t replay_traj_memory_bytes(const replay_traj_config *c) {
  if (traj_check(c, NULL)) return 0;
  size_t n = 0, cap = (size_t)c->capacity;
  for (int i = 0; i < c->ncols; i++) {
    size_t rows =
        (size_t)c->T + (c->bootstrap_column && !strcmp(c->bootstrap_column, c->cols[i].name));
    if (c->unroll_column && !strcmp(c->unroll_column, c->cols[i].name)) rows = 1;
    n += cap * rows * replay_column_bytes(&c->cols[i]);
  }
  return n + cap * ((size_t)c->T * sizeof(float) + sizeof(int64_t) + 1) +
         sizeof(struct replay_traj);
}

int replay_traj_create(const replay_traj_config *cfg, replay_traj **out, shoal_error *err) {
  int rc = traj_check(cfg, err);
  if (rc) return rc;
  if (!out) return shoal_error_set(err, SHOAL_EINVAL, "replay_traj_create: out is NULL");
  replay_traj *q = calloc(1, sizeof *q);
  if (!q) return shoal_error_set(err, SHOAL_ENOMEM, "replay_traj: out of memory");
  q->cfg = *cfg;
  q->boot = q->unroll = -1;
  if (cfg->bootstrap_column) {
    memcpy(q->boot_name, cfg->bootstrap_column,
           strnlen(cfg->bootstrap_column, REPLAY_NAME_MAX - 1));
    q->cfg.bootstrap_column = q->boot_name;
  }
  if (cfg->unroll_column) {
    memcpy(q->unroll_name, cfg->unroll_column, strnlen(cfg->unroll_column, REPLAY_NAME_MAX - 1));
    q->cfg.unroll_column = q->unroll_name;
  }
  size_t cap = (size_t)cfg->capacity;
  int ok = 1;
  for (int i = 0; i < cfg->ncols; i++) {
    if (cfg->bootstrap_column && !strcmp(cfg->cols[i].name, q->boot_name)) q->boot = i;
    if (cfg->unroll_column && !strcmp(cfg->cols[i].name, q->unroll_name)) q->unroll = i;
    q->item[i] = replay_column_bytes(&cfg->cols[i]);
    q->rows_bytes[i] = q->item[i] * (size_t)replay_traj_rows(q, i);
    ok &= (q->col[i] = calloc(cap, q->rows_bytes[i])) != NULL;
  }
  ok &= (q->logp = calloc(cap * (size_t)cfg->T, sizeof(float))) != NULL;
  ok &= (q->version = calloc(cap, sizeof(int64_t))) != NULL;
  ok &= (q->state = calloc(cap, 1)) != NULL;
  if (ok) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->not_full, &ca);
    pthread_cond_init(&q->not_empty, &ca);
    pthread_condattr_destroy(&ca);
  } else {
    for (int i = 0; i < REPLAY_MAX_COLUMNS; i++) free(q->col[i]);
    free(q->logp);
    free(q->version);
    free(q->state);
    free(q);
    return shoal_error_set(err, SHOAL_ENOMEM, "replay_traj: out of memory for %zu bytes",
                           replay_traj_memory_bytes(cfg));
  }
  *out = q;
  return 0;
}

void replay_traj_destroy(replay_traj *q) {
  if (!q) return;
  for (int i = 0; i < REPLAY_MAX_COLUMNS; i++) free(q->col[i]);
  free(q->logp);
  free(q->version);
  free(q->state);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->not_full);
  pthread_cond_destroy(&q->not_empty);
  free(q);
}

int replay_traj_rows(const replay_traj *q, int c) {
  return c == q->unroll ? 1 : q->cfg.T + (c == q->boot);
}

static struct timespec deadline_after(int64_t ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (ms % 1000) * 1000000;
  if (t.tv_nsec >= 1000000000) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000;
  }
  return t;
}

/* Waits on cv until signalled or the deadline (NULL: forever). Returns ETIMEDOUT or 0. */
static int wait_on(pthread_cond_t *cv, pthread_mutex_t *mu, const struct timespec *dl) {
  if (!dl) return pthread_cond_wait(cv, mu);
  return pthread_cond_timedwait(cv, mu, dl);
}

int replay_traj_push(replay_traj *q, const void *const *cols, const float *logp, int64_t version,
                     shoal_error *err) {
  if (!q || !cols) return shoal_error_set(err, SHOAL_EINVAL, "replay_traj_push: NULL argument");
  for (int c = 0; c < q->cfg.ncols; c++)
    if (!cols[c])
      return shoal_error_set(err, SHOAL_EINVAL, "replay_traj_push: column '%s' is NULL",
                             q->cfg.cols[c].name);
  if (logp)
    for (int t = 0; t < q->cfg.T; t++)
      if (!isfinite(logp[t]))
        return shoal_error_set(err, SHOAL_ENAN, "replay_traj_push: logp[%d] = %g", t,
                               (double)logp[t]);
  struct timespec dl;
  int timed = q->cfg.full == REPLAY_FULL_BLOCK && q->cfg.push_timeout_ms >= 0;
  if (timed) dl = deadline_after(q->cfg.push_timeout_ms);
  int64_t cap = q->cfg.capacity, slot;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    if (q->closed) {
      pthread_mutex_unlock(&q->mu);
      return shoal_error_set(err, SHOAL_ECLOSED, "replay_traj_push: the queue is closed");
    }
    if (q->count < cap) break;
    if (q->cfg.full == REPLAY_FULL_DROP_NEW) {
      q->st.dropped_full++;
      pthread_mutex_unlock(&q->mu);
      return shoal_error_set(err, SHOAL_EFULL,
                             "replay_traj_push: %lld unrolls waiting, the new one is dropped",
                             (long long)cap);
    }
    if (q->cfg.full == REPLAY_FULL_DROP_OLDEST && q->state[q->head] == SLOT_READY) {
      q->state[q->head] = SLOT_FREE;
      q->head = (q->head + 1) % cap;
      q->count--;
      q->st.dropped_full++;
      continue;
    }
    /* Block, or the oldest is still being written or read: wait for a free slot. */
    if (wait_on(&q->not_full, &q->mu, timed ? &dl : NULL) == ETIMEDOUT && q->count >= cap) {
      q->st.timeouts++;
      pthread_mutex_unlock(&q->mu);
      return shoal_error_set(err, SHOAL_ETIMEDOUT,
                             "replay_traj_push: full for %lld ms (%lld unrolls waiting)",
                             (long long)q->cfg.push_timeout_ms, (long long)cap);
    }
  }
  slot = (q->head + q->count) % cap;
  q->state[slot] = SLOT_WRITING;
  q->count++;
  pthread_mutex_unlock(&q->mu);

  for (int c = 0; c < q->cfg.ncols; c++)
    memcpy(q->col[c] + (size_t)slot * q->rows_bytes[c], cols[c], q->rows_bytes[c]);
  float *lp = q->logp + (size_t)slot * (size_t)q->cfg.T;
  if (logp)
    memcpy(lp, logp, (size_t)q->cfg.T * sizeof(float));
  else
    memset(lp, 0, (size_t)q->cfg.T * sizeof(float));
  q->version[slot] = version;

  pthread_mutex_lock(&q->mu);
  q->state[slot] = SLOT_READY;
  q->st.pushed++;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
  return 0;
}

static void move_slot(replay_traj *q, int64_t dst, int64_t src) {
  for (int c = 0; c < q->cfg.ncols; c++)
    memcpy(q->col[c] + (size_t)dst * q->rows_bytes[c], q->col[c] + (size_t)src * q->rows_bytes[c],
           q->rows_bytes[c]);
  size_t T = (size_t)q->cfg.T;
  memcpy(q->logp + (size_t)dst * T, q->logp + (size_t)src * T, T * sizeof(float));
  q->version[dst] = q->version[src];
}

/* The queue is full of ready unrolls yet fewer than B are fresh: the stale ones sit
 * behind fresh ones, so no pop can pass them and no push can come. Packs the fresh
 * unrolls towards the tail and frees the rest (rare; copies under the lock).
 * Returns how many it dropped. */
static int64_t compact(replay_traj *q, int64_t oldest_ok) {
  int64_t cap = q->cfg.capacity, dst = q->count - 1;
  for (int64_t src = q->count - 1; src >= 0; src--) {
    int64_t s = (q->head + src) % cap;
    if (q->version[s] < oldest_ok) continue;
    if (dst != src) move_slot(q, (q->head + dst) % cap, s);
    dst--;
  }
  int64_t dropped = dst + 1;
  for (int64_t i = 0; i < dropped; i++) q->state[(q->head + i) % cap] = SLOT_FREE;
  q->head = (q->head + dropped) % cap;
  q->count -= dropped;
  q->st.dropped_stale += (uint64_t)dropped;
  if (dropped) pthread_cond_broadcast(&q->not_full);
  return dropped;
}

int replay_traj_pop(replay_traj *q, int B, int64_t learner_version, int64_t timeout_ms,
                    replay_traj_batch *out, shoal_error *err) {
  if (!q || !out) return shoal_error_set(err, SHOAL_EINVAL, "replay_traj_pop: NULL argument");
  int64_t cap = q->cfg.capacity;
  if (B < 1 || B > cap)
    return shoal_error_set(err, SHOAL_EINVAL, "replay_traj_pop: B = %d outside [1, %lld]", B,
                           (long long)cap);
  struct timespec dl;
  if (timeout_ms >= 0) dl = deadline_after(timeout_ms);
  int64_t oldest_ok =
      q->cfg.max_staleness >= 0 ? learner_version - q->cfg.max_staleness : INT64_MIN;
  int64_t window = 0; /* slots from head covered by this pop */
  pthread_mutex_lock(&q->mu);
  for (;;) {
    if (q->closed) {
      pthread_mutex_unlock(&q->mu);
      return shoal_error_set(err, SHOAL_ECLOSED, "replay_traj_pop: the queue is closed");
    }
    /* Drop stale unrolls at the head first, so they free room for pushers. */
    int dropped = 0;
    while (q->count > 0 && q->state[q->head] == SLOT_READY && q->version[q->head] < oldest_ok) {
      q->state[q->head] = SLOT_FREE;
      q->head = (q->head + 1) % cap;
      q->count--;
      q->st.dropped_stale++;
      dropped = 1;
    }
    if (dropped) pthread_cond_broadcast(&q->not_full);
    int64_t fresh = 0;
    window = 0;
    while (window < q->count && fresh < B) {
      int64_t s = (q->head + window) % cap;
      if (q->state[s] != SLOT_READY) break;
      fresh += q->version[s] >= oldest_ok;
      window++;
    }
    if (fresh == B) break;
    if (window == cap && compact(q, oldest_ok)) continue;
    if (wait_on(&q->not_empty, &q->mu, timeout_ms >= 0 ? &dl : NULL) == ETIMEDOUT) {
      pthread_mutex_unlock(&q->mu);
      return shoal_error_set(err, SHOAL_ETIMEDOUT,
                             "replay_traj_pop: %d unrolls not ready within %lld ms", B,
                             (long long)timeout_ms);
    }
  }
  for (int64_t w = 0; w < window; w++) q->state[(q->head + w) % cap] = SLOT_READING;
  pthread_mutex_unlock(&q->mu);

  int T = q->cfg.T, b = 0;
  uint64_t stale = 0;
  for (int64_t w = 0; w < window; w++) {
    int64_t s = (q->head + w) % cap;
    if (q->version[s] < oldest_ok) {
      stale++;
      continue;
    }
    for (int c = 0; c < q->cfg.ncols; c++) {
      if (!out->cols[c]) continue;
      const uint8_t *src = q->col[c] + (size_t)s * q->rows_bytes[c];
      uint8_t *dst = out->cols[c];
      if (!out->time_major) {
        memcpy(dst + (size_t)b * q->rows_bytes[c], src, q->rows_bytes[c]);
      } else {
        size_t isz = q->item[c], rows = q->rows_bytes[c] / isz;
        for (size_t t = 0; t < rows; t++)
          memcpy(dst + (t * (size_t)B + (size_t)b) * isz, src + t * isz, isz);
      }
    }
    if (out->logp) {
      const float *lp = q->logp + (size_t)s * (size_t)T;
      if (!out->time_major)
        memcpy(out->logp + (size_t)b * (size_t)T, lp, (size_t)T * sizeof(float));
      else
        for (int t = 0; t < T; t++) out->logp[(size_t)t * (size_t)B + (size_t)b] = lp[t];
    }
    if (out->version) out->version[b] = q->version[s];
    b++;
  }
  SHOAL_ASSERT(b == B);

  pthread_mutex_lock(&q->mu);
  for (int64_t w = 0; w < window; w++) q->state[(q->head + w) % cap] = SLOT_FREE;
  q->head = (q->head + window) % cap;
  q->count -= window;
  q->st.popped += (uint64_t)B;
  q->st.dropped_stale += stale;
  pthread_cond_broadcast(&q->not_full);
  pthread_mutex_unlock(&q->mu);
  return 0;
}

void replay_traj_close(replay_traj *q) {
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  q->closed = 1;
  pthread_cond_broadcast(&q->not_full);
  pthread_cond_broadcast(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

void replay_traj_get_stats(replay_traj *q, replay_traj_stats *out) {
  pthread_mutex_lock(&q->mu);
  *out = q->st;
  out->held = q->count;
  pthread_mutex_unlock(&q->mu);
}
