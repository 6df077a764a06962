/* SPDX-License-Identifier: Apache-2.0 */
/*
 * learner/replay_log.c — the replay log (replay_log.h; format in docs/replay-log.md).
 *
 * Writers copy records into the open segment under one mutex. The log's thread seals
 * a segment when it is full or old, compresses it outside the lock and hands it to the
 * store writer; it also deletes what retention no longer needs. Sealing takes the
 * next sequence number, so the numbers the log writes are gapless; a segment dropped
 * on the way (a store outage longer than the queues) leaves a gap a restore sees.
 */
#define _GNU_SOURCE
#include "learner/replay_log.h"

#include "common/crc32c.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>
#include <zstd.h>

static const char MAGIC[8] = {'S', 'H', 'O', 'A', 'L', 'L', 'O', 'G'};
/* Version 2 checks the raw body with CRC32C (the crc32 instruction: a fifth of zlib's
 * CRC-32 time at the ingest ceiling); version 1's CRC-32 (zlib) is still read. */
enum { VERSION = 2, REC_HEADER = 40, PRIO_HEADER = 24 };
/* A batch record whose framed columns keep each frame once (version 2). */
enum { REC_BATCH_FRAMES = 3 };
/* The rows a framed record may rebuild: frames are at most this many times smaller than
 * the rows they stand for (a malformed record cannot ask for more). */
#define FRAMED_ROWS_MAX ((size_t)64 * SEG_MAX)
#define SEG_MAX ((size_t)12 << 20)
#define CKPT_MAX_ITEMS ((uint64_t)3 << 20) /* one checkpoint segment: 12 MiB of floats */

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

size_t rlog_column_bytes(const rlog_column *c) {
  size_t e = replay_dtype_size((replay_dtype)c->dtype);
  if (!e || c->ndim > 4) return 0;
  for (uint32_t d = 0; d < c->ndim; d++) {
    if (c->shape[d] < 1) return 0;
    e *= (size_t)c->shape[d];
  }
  return e;
}

/* ---- writing ------------------------------------------------------------------ */

/* A sealed segment waiting for the thread: its raw body and header fields. */
typedef struct sealed {
  struct sealed *next;
  uint64_t seq, first_item, items, steps_before, steps;
  uint32_t records, flags;
  unsigned char *body;
  size_t len, cap;
} sealed;

/* Segments this log wrote, for retention. */
typedef struct seg_ref {
  uint64_t seq, first_item;
  int ckpt;
} seg_ref;

struct rlog {
  rlog_config cfg;
  char run[STORE_NAME_MAX];
  size_t row_bytes[RLOG_MAX_COLS];

  pthread_mutex_t mu;
  pthread_cond_t cv, idle_cv;
  pthread_t thread;
  int stop, busy;

  /* The open segment. Sealing hands its buffer over (no copy under the lock); the
   * thread gives one buffer back as the spare once it has compressed it. */
  unsigned char *buf, *spare;
  size_t len, cap, spare_cap;
  ZSTD_CCtx *zc; /* the thread's */
  int raw_next;  /* the thread's: segments still to store raw without trying zstd */
  uint32_t records;
  uint64_t first_item, items, steps_before, steps;
  double opened; /* monotonic time of its first record */

  uint64_t next_seq, next_item, steps_total;
  sealed *q_head, *q_tail;
  size_t q_bytes;

  seg_ref *refs;
  size_t nrefs, refs_cap;
  uint64_t ckpt_seq; /* newest checkpoint's seq, UINT64_MAX: none */
  uint64_t retain_item, trimmed_below;
  int retain_dirty, trim_pending;

  rlog_stats st;
};

static int grow_from(unsigned char **buf, size_t *cap, size_t need, size_t first) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : first;
  while (c < need) c *= 2;
  unsigned char *b = realloc(*buf, c);
  if (!b) return SHOAL_ENOMEM;
  *buf = b;
  *cap = c;
  return 0;
}
static int grow(unsigned char **buf, size_t *cap, size_t need) {
  return grow_from(buf, cap, need, 1 << 16);
}

/* Moves the open segment (if any) to the queue. Under mu. */
static void seal_locked(rlog *l) {
  if (!l->records) return;
  sealed *s = calloc(1, sizeof *s);
  if (!s || l->q_bytes + l->len > l->cfg.max_pending_bytes) {
    /* Out of memory, or the store has been away for long (or is slower than ingest):
     * this segment is lost, the older waiting ones being on their way. Counted and
     * numbered, so a restore sees the gap. */
    free(s);
    l->st.segments_dropped++;
  } else {
    *s = (sealed){NULL,       l->next_seq, l->first_item, l->items, l->steps_before, l->steps,
                  l->records, 0,           l->buf,        l->len,   l->cap};
    l->buf = l->spare;
    l->cap = l->spare_cap;
    l->spare = NULL;
    l->spare_cap = 0;
    if (l->q_tail)
      l->q_tail->next = s;
    else
      l->q_head = s;
    l->q_tail = s;
    l->q_bytes += s->len;
  }
  l->next_seq++;
  l->len = 0;
  l->records = 0;
  l->first_item = l->next_item;
  l->items = 0;
  l->steps_before = l->steps_total;
  l->steps = 0;
  pthread_cond_signal(&l->cv);
}

static int remember(rlog *l, uint64_t seq, uint64_t first_item, int ckpt) {
  if (l->nrefs == l->refs_cap) {
    size_t c = l->refs_cap ? 2 * l->refs_cap : 64;
    seg_ref *r = realloc(l->refs, c * sizeof *r);
    if (!r) return SHOAL_ENOMEM;
    l->refs = r;
    l->refs_cap = c;
  }
  l->refs[l->nrefs++] = (seg_ref){seq, first_item, ckpt};
  return 0;
}

/* Incompressible bodies (random bytes, noisy floats) are stored raw: compressing one
 * that saves less than a sixteenth costs the CPU a full pass for nothing, and at the
 * ingest ceiling that CPU is the actors'. After such a segment the next RAW_RUN are
 * stored raw untried, then zstd is tried again. */
enum { RAW_RUN = 8 };

/* Header + column specs + body, compressed, for the store. NULL on failure. */
static unsigned char *encode(rlog *l, const sealed *s, size_t *out_len) {
  size_t hl = RLOG_HEADER + (size_t)l->cfg.ncols * RLOG_COL_SPEC;
  int try_zstd = !l->cfg.raw && !l->raw_next;
  if (l->raw_next) l->raw_next--;
  size_t bound = try_zstd ? ZSTD_compressBound(s->len) : s->len;
  unsigned char *o = malloc(hl + bound);
  if (!o) return NULL;
  size_t blen = s->len;
  int codec = RLOG_CODEC_NONE;
  if (try_zstd) {
    blen = ZSTD_compressCCtx(l->zc, o + hl, bound, s->body, s->len, l->cfg.level);
    if (ZSTD_isError(blen)) {
      free(o);
      return NULL;
    }
    codec = RLOG_CODEC_ZSTD;
    if (blen > s->len - s->len / 16) {
      l->raw_next = RAW_RUN;
      codec = RLOG_CODEC_NONE;
      blen = s->len;
    }
  }
  if (codec == RLOG_CODEC_NONE) memcpy(o + hl, s->body, s->len);
  memcpy(o, MAGIC, 8);
  put32(o + 8, VERSION);
  put32(o + 12, (uint32_t)codec);
  put64(o + 16, s->len);
  put32(o + 24, shoal_crc32c(0, s->body, s->len));
  put32(o + 28, s->records);
  put64(o + 32, s->first_item);
  put64(o + 40, s->items);
  put64(o + 48, s->steps_before);
  put64(o + 56, s->steps);
  double w = wall_now();
  memcpy(o + 64, &w, 8);
  put32(o + 72, (uint32_t)l->cfg.ncols);
  put32(o + 76, s->flags);
  for (int c = 0; c < l->cfg.ncols; c++) {
    unsigned char *p = o + RLOG_HEADER + (size_t)c * RLOG_COL_SPEC;
    memset(p, 0, RLOG_COL_SPEC);
    memcpy(p, l->cfg.cols[c].name, strnlen(l->cfg.cols[c].name, RLOG_COL_NAME - 1));
    put32(p + 16, l->cfg.cols[c].dtype);
    put32(p + 20, l->cfg.cols[c].ndim);
    for (int d = 0; d < 4; d++) put64(p + 24 + 8 * d, (uint64_t)l->cfg.cols[c].shape[d]);
  }
  *out_len = hl + blen;
  return o;
}

static double mono_now(void) { return shoal_now_s(); }

static void *log_thread(void *arg) {
  shoal_thread_name("shoal-rlog");
  rlog *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    /* Seal an old open segment; wait for work. */
    double now = mono_now();
    if (l->records && now - l->opened >= l->cfg.flush_s) seal_locked(l);
    if (!l->q_head && !l->retain_dirty) {
      if (l->stop) break;
      pthread_cond_broadcast(&l->idle_cv);
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      double wait = l->records ? l->cfg.flush_s - (now - l->opened) : l->cfg.flush_s;
      if (wait < 0.001) wait = 0.001;
      long ns = until.tv_nsec + (long)(wait * 1e9);
      until.tv_sec += ns / 1000000000L;
      until.tv_nsec = ns % 1000000000L;
      if (pthread_cond_timedwait(&l->cv, &l->mu, &until) == ETIMEDOUT && l->trim_pending)
        l->retain_dirty = 1; /* a cut that missed unwritten segments, tried again */
      continue;
    }
    if (l->q_head) {
      sealed *s = l->q_head;
      l->q_head = s->next;
      if (!l->q_head) l->q_tail = NULL;
      l->busy = 1;
      pthread_mutex_unlock(&l->mu);
      size_t len = 0;
      unsigned char *bytes = encode(l, s, &len);
      /* The writer owns bytes from here, on error too. */
      int rc = bytes ? store_writer_replay(l->cfg.wr, l->run, s->seq, bytes, len) : SHOAL_ENOMEM;
      pthread_mutex_lock(&l->mu);
      l->busy = 0;
      l->q_bytes -= s->len;
      if (rc) {
        l->st.segments_dropped++;
      } else {
        l->st.segments_sealed++;
        l->st.bytes_raw += s->len;
        l->st.bytes_stored += len;
        remember(l, s->seq, s->first_item, (s->flags & RLOG_SEG_PRIORITIES) != 0);
        if (s->flags & RLOG_SEG_PRIORITIES) l->ckpt_seq = s->seq;
        /* A cut that found segments not yet written is tried again. */
        if (l->trim_pending) l->retain_dirty = 1;
      }
      if (!l->spare && s->cap) {
        l->spare = s->body;
        l->spare_cap = s->cap;
      } else {
        free(s->body);
      }
      free(s);
      continue;
    }
    /* Retention: the newest segment this log wrote whose items start at or before
     * the oldest item held marks where the log must start; the newest checkpoint
     * stays too. */
    l->retain_dirty = 0;
    if (l->cfg.keep) continue;
    uint64_t below = 0;
    for (size_t i = 0; i < l->nrefs; i++)
      if (!l->refs[i].ckpt && l->refs[i].first_item <= l->retain_item) below = l->refs[i].seq;
    if (l->ckpt_seq != UINT64_MAX && l->ckpt_seq < below) below = l->ckpt_seq;
    size_t want = 0;
    for (size_t i = 0; i < l->nrefs; i++) want += l->refs[i].seq < below;
    if (below <= l->trimmed_below && !l->trim_pending) continue;
    l->busy = 1;
    pthread_mutex_unlock(&l->mu);
    /* Segments still queued in the writer are newer than any cut: the writer writes
     * in order, so a cut never races a segment it removes. */
    shoal_error e = {0};
    size_t removed = 0;
    int rc = store_replay_trim(l->cfg.st, l->run, below, &removed, &e);
    pthread_mutex_lock(&l->mu);
    l->busy = 0;
    if (rc) {
      l->st.trim_errors++;
      l->trim_pending = 1;
    } else {
      l->trimmed_below = below;
      l->st.trimmed += removed;
      /* Segments handed to the writer but not yet in the store were not there to cut:
       * the cut is made again after the next segment is written. */
      l->trim_pending = removed < want;
      if (!l->trim_pending) {
        size_t k = 0;
        for (size_t i = 0; i < l->nrefs; i++)
          if (l->refs[i].seq >= below) l->refs[k++] = l->refs[i];
        l->nrefs = k;
      }
    }
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

int rlog_open(rlog **out, const rlog_config *cfg, shoal_error *err) {
  if (!out || !cfg || !cfg->wr || !cfg->st || !cfg->run || !store_name_valid(cfg->run))
    return shoal_error_set(err, SHOAL_EINVAL, "replay log: bad argument");
  if (cfg->ncols < 1 || cfg->ncols > RLOG_MAX_COLS)
    return shoal_error_set(err, SHOAL_EINVAL, "replay log: %d columns (1..%d)", cfg->ncols,
                           RLOG_MAX_COLS);
  if (cfg->segment_bytes > SEG_MAX)
    return shoal_error_set(err, SHOAL_EINVAL, "replay log: segments of %zu bytes (at most %zu)",
                           cfg->segment_bytes, SEG_MAX);
  rlog *l = calloc(1, sizeof *l);
  if (!l) return shoal_error_set(err, SHOAL_ENOMEM, "replay log: out of memory");
  l->cfg = *cfg;
  snprintf(l->run, sizeof l->run, "%s", cfg->run);
  l->cfg.run = l->run;
  if (!l->cfg.segment_bytes) l->cfg.segment_bytes = (size_t)4 << 20;
  if (l->cfg.flush_s <= 0) l->cfg.flush_s = 1.0;
  /* zstd's fast mode: about twice level 1's speed, for a little less compression. */
  if (!l->cfg.level) l->cfg.level = -3;
  if (!l->cfg.max_pending_bytes) l->cfg.max_pending_bytes = (size_t)256 << 20;
  for (int c = 0; c < cfg->ncols; c++) {
    l->row_bytes[c] = rlog_column_bytes(&cfg->cols[c]);
    if (!l->row_bytes[c] || !cfg->cols[c].name[0]) {
      free(l);
      return shoal_error_set(err, SHOAL_EINVAL, "replay log: column %d ('%.15s') has a bad spec", c,
                             cfg->cols[c].name);
    }
  }
  l->next_seq = cfg->next_seq;
  l->next_item = l->first_item = cfg->next_item;
  l->steps_total = l->steps_before = cfg->steps_before;
  l->ckpt_seq = UINT64_MAX;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  pthread_cond_init(&l->idle_cv, NULL);
  l->zc = ZSTD_createCCtx();
  if (!l->zc || pthread_create(&l->thread, NULL, log_thread, l)) {
    pthread_mutex_destroy(&l->mu);
    ZSTD_freeCCtx(l->zc);
    free(l);
    return shoal_error_set(err, SHOAL_EIO, "replay log: cannot start its thread");
  }
  *out = l;
  return 0;
}

/* Bytes of column c's part of a record: dense rows, or (framed) a frames/depth pair,
 * the frames and the indices. 0 when a framed column is malformed. */
static size_t part_bytes(const rlog *l, const rlog_batch *b, int c) {
  size_t rb = l->row_bytes[c], rows = b->rows;
  if (!b->frames[c]) return pad8(rows * rb);
  size_t d = b->frame_depth[c];
  if (!d || rb % d || !b->frame_data[c] || !b->frame_index[c] || b->frames[c] > rows * d) return 0;
  for (size_t e = 0; e < rows * d; e++)
    if (b->frame_index[c][e] >= b->frames[c]) return 0;
  return 8 + pad8((size_t)b->frames[c] * (rb / d)) + pad8(rows * d * 4);
}

int rlog_append_batch(rlog *l, const rlog_batch *b, shoal_error *err) {
  size_t need = REC_HEADER;
  uint32_t framed = 0;
  int bad = -1;
  for (int c = 0; c < l->cfg.ncols; c++) {
    size_t n = part_bytes(l, b, c);
    if (!n && b->frames[c]) bad = c; /* a framed part is never empty */
    if (b->frames[c]) framed |= 1u << c;
    need += n;
  }
  if (framed) need += 8; /* the mask of framed columns */
  pthread_mutex_lock(&l->mu);
  int rc = 0;
  if (need > SEG_MAX || bad >= 0) {
    /* Cannot be logged: still counted in items, so the numbering stays the replay's. */
    l->st.segments_dropped++;
    l->next_item += b->items;
    l->steps_total += b->steps;
    pthread_mutex_unlock(&l->mu);
    if (bad >= 0)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "replay log: column %d's frames do not describe its %u rows", bad,
                             b->rows);
    return shoal_error_set(err, SHOAL_EINVAL,
                           "replay log: a batch of %zu bytes exceeds a segment (%zu)", need,
                           SEG_MAX);
  }
  if (l->records && l->len + need > l->cfg.segment_bytes) seal_locked(l);
  if ((rc = grow_from(&l->buf, &l->cap, l->len + need, l->cfg.segment_bytes + need))) {
    pthread_mutex_unlock(&l->mu);
    return shoal_error_set(err, rc, "replay log: out of memory");
  }
  if (!l->records) l->opened = mono_now();
  unsigned char *p = l->buf + l->len;
  put32(p, framed ? REC_BATCH_FRAMES : RLOG_REC_BATCH);
  put32(p + 4, b->actor);
  put64(p + 8, b->incarnation);
  put64(p + 16, b->seq);
  put32(p + 24, b->rows);
  put32(p + 28, b->steps);
  put64(p + 32, b->items);
  size_t o = REC_HEADER;
  if (framed) {
    put32(p + o, framed);
    put32(p + o + 4, 0);
    o += 8;
  }
  for (int c = 0; c < l->cfg.ncols; c++) {
    if (framed & (1u << c)) {
      size_t d = b->frame_depth[c], n = (size_t)b->frames[c] * (l->row_bytes[c] / d);
      size_t ni = (size_t)b->rows * d * 4;
      put32(p + o, b->frames[c]);
      put32(p + o + 4, (uint32_t)d);
      o += 8;
      memcpy(p + o, b->frame_data[c], n);
      memset(p + o + n, 0, pad8(n) - n);
      o += pad8(n);
      for (size_t e = 0; e < ni / 4; e++) put32(p + o + 4 * e, b->frame_index[c][e]);
      memset(p + o + ni, 0, pad8(ni) - ni);
      o += pad8(ni);
      continue;
    }
    size_t n = (size_t)b->rows * l->row_bytes[c];
    memcpy(p + o, b->cols[c], n);
    memset(p + o + n, 0, pad8(n) - n);
    o += pad8(n);
  }
  l->len += o;
  l->records++;
  l->items += b->items;
  l->steps += b->steps;
  l->next_item += b->items;
  l->steps_total += b->steps;
  l->st.records++;
  pthread_mutex_unlock(&l->mu);
  return 0;
}

int rlog_append_priorities(rlog *l, uint64_t first_item, uint64_t n, const float *p,
                           shoal_error *err) {
  /* The newest items when there are more than one segment holds. */
  if (n > CKPT_MAX_ITEMS) {
    p += n - CKPT_MAX_ITEMS;
    first_item += n - CKPT_MAX_ITEMS;
    n = CKPT_MAX_ITEMS;
  }
  size_t len = PRIO_HEADER + pad8((size_t)n * 4);
  sealed *s = calloc(1, sizeof *s);
  unsigned char *body = s ? malloc(len) : NULL;
  if (!body) {
    free(s);
    return shoal_error_set(err, SHOAL_ENOMEM, "replay log: out of memory");
  }
  put32(body, RLOG_REC_PRIORITIES);
  put32(body + 4, 0);
  put64(body + 8, first_item);
  put64(body + 16, n);
  memcpy(body + PRIO_HEADER, p, (size_t)n * 4);
  memset(body + PRIO_HEADER + n * 4, 0, len - PRIO_HEADER - n * 4);
  pthread_mutex_lock(&l->mu);
  /* Its own segment, after the data it describes. */
  seal_locked(l);
  if (l->q_bytes + len > l->cfg.max_pending_bytes) {
    l->st.segments_dropped++;
    l->next_seq++;
    free(body);
    free(s);
  } else {
    *s = (sealed){NULL, l->next_seq++, first_item, n, l->steps_total, 0, 1, RLOG_SEG_PRIORITIES,
                  body, len,           0};
    if (l->q_tail)
      l->q_tail->next = s;
    else
      l->q_head = s;
    l->q_tail = s;
    l->q_bytes += len;
    l->st.priority_records++;
    pthread_cond_signal(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  return 0;
}

void rlog_retain(rlog *l, uint64_t oldest_item) {
  pthread_mutex_lock(&l->mu);
  if (oldest_item > l->retain_item) {
    l->retain_item = oldest_item;
    l->retain_dirty = 1;
    pthread_cond_signal(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
}

uint64_t rlog_next_item(rlog *l) {
  pthread_mutex_lock(&l->mu);
  uint64_t v = l->next_item;
  pthread_mutex_unlock(&l->mu);
  return v;
}

void rlog_stats_get(rlog *l, rlog_stats *out) {
  pthread_mutex_lock(&l->mu);
  *out = l->st;
  out->pending_bytes = l->q_bytes + l->len;
  out->next_item = l->next_item;
  out->steps = l->steps_total;
  pthread_mutex_unlock(&l->mu);
}

int rlog_close(rlog *l, double timeout_s, rlog_stats *out) {
  if (!l) return 0;
  pthread_mutex_lock(&l->mu);
  seal_locked(l);
  double until = mono_now() + timeout_s;
  while ((l->q_head || l->busy) && mono_now() < until) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&l->idle_cv, &l->mu, &ts);
  }
  int rc = 0;
  /* What is left is lost: counted. */
  for (sealed *s = l->q_head, *n; s; s = n) {
    n = s->next;
    l->st.segments_dropped++;
    l->q_bytes -= s->len;
    free(s->body);
    free(s);
    rc = SHOAL_ETIMEDOUT;
  }
  l->q_head = l->q_tail = NULL;
  l->stop = 1;
  l->retain_dirty = 0;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&l->mu);
  pthread_join(l->thread, NULL);
  if (out) rlog_stats_get(l, out);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  pthread_cond_destroy(&l->idle_cv);
  free(l->buf);
  free(l->spare);
  ZSTD_freeCCtx(l->zc);
  free(l->refs);
  free(l);
  return rc;
}

/* ---- reading ------------------------------------------------------------------ */

int rlog_peek(const void *bytes, size_t len, uint64_t seq, rlog_segment *s, shoal_error *err) {
  const unsigned char *b = bytes;
  if (len < RLOG_HEADER || memcmp(b, MAGIC, 8))
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "replay log segment %llu: not a replay log segment (%zu bytes, bad "
                           "magic)",
                           (unsigned long long)seq, len);
  if (get32(b + 8) < 1 || get32(b + 8) > VERSION)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "replay log segment %llu: format version %u, this build reads 1..%d",
                           (unsigned long long)seq, get32(b + 8), VERSION);
  s->seq = seq;
  s->codec = get32(b + 12);
  s->records = get32(b + 28);
  s->first_item = get64(b + 32);
  s->items = get64(b + 40);
  s->steps_before = get64(b + 48);
  s->steps = get64(b + 56);
  memcpy(&s->wall_time, b + 64, 8);
  s->ncols = get32(b + 72);
  s->flags = get32(b + 76);
  if (s->codec > RLOG_CODEC_ZSTD || s->ncols < 1 || s->ncols > RLOG_MAX_COLS ||
      len < RLOG_HEADER + (size_t)s->ncols * RLOG_COL_SPEC || get64(b + 16) > SEG_MAX)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "replay log segment %llu: bad header (codec %u, %u columns, body %llu "
                           "bytes, segment %zu bytes)",
                           (unsigned long long)seq, s->codec, s->ncols,
                           (unsigned long long)get64(b + 16), len);
  for (uint32_t c = 0; c < s->ncols; c++) {
    const unsigned char *p = b + RLOG_HEADER + (size_t)c * RLOG_COL_SPEC;
    rlog_column *col = &s->cols[c];
    memcpy(col->name, p, RLOG_COL_NAME);
    col->name[RLOG_COL_NAME - 1] = 0;
    col->dtype = get32(p + 16);
    col->ndim = get32(p + 20);
    for (int d = 0; d < 4; d++) col->shape[d] = (int64_t)get64(p + 24 + 8 * d);
    if (!rlog_column_bytes(col))
      return shoal_error_set(err, SHOAL_EFORMAT, "replay log segment %llu: column %u is malformed",
                             (unsigned long long)seq, c);
  }
  return 0;
}

int rlog_decode(const void *bytes, size_t len, uint64_t seq, rlog_segment *s, shoal_error *err) {
  int rc = rlog_peek(bytes, len, seq, s, err);
  if (rc) return rc;
  const unsigned char *b = bytes;
  size_t raw = (size_t)get64(b + 16), hl = RLOG_HEADER + (size_t)s->ncols * RLOG_COL_SPEC;
  if (grow(&s->body, &s->body_cap, raw ? raw : 1))
    return shoal_error_set(err, SHOAL_ENOMEM, "replay log segment %llu: out of memory",
                           (unsigned long long)seq);
  if (s->codec == RLOG_CODEC_ZSTD) {
    size_t got = ZSTD_decompress(s->body, raw, b + hl, len - hl);
    if (ZSTD_isError(got) || got != raw)
      return shoal_error_set(err, SHOAL_EFORMAT,
                             "replay log segment %llu: the body does not decompress to %zu bytes "
                             "(%s)",
                             (unsigned long long)seq, raw,
                             ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size");
  } else {
    if (len - hl != raw)
      return shoal_error_set(err, SHOAL_EFORMAT,
                             "replay log segment %llu: body of %zu bytes, header says %zu",
                             (unsigned long long)seq, len - hl, raw);
    memcpy(s->body, b + hl, raw);
  }
  uint32_t crc =
      get32(b + 8) == 1 ? (uint32_t)crc32(0, s->body, (uInt)raw) : shoal_crc32c(0, s->body, raw);
  if (crc != get32(b + 24))
    return shoal_error_set(err, SHOAL_EFORMAT, "replay log segment %llu: checksum mismatch",
                           (unsigned long long)seq);
  s->body_len = raw;
  return 0;
}

int rlog_next(rlog_segment *s, size_t *pos, rlog_record *r, shoal_error *err) {
  size_t o = *pos;
  if (o >= s->body_len) return 0;
  const unsigned char *p = s->body + o;
  size_t left = s->body_len - o;
  memset(r, 0, sizeof *r);
  if (left < 8) goto bad;
  r->kind = get32(p);
  if (r->kind == RLOG_REC_PRIORITIES) {
    if (left < PRIO_HEADER) goto bad;
    r->first_item = get64(p + 8);
    r->n = get64(p + 16);
    if (r->n > (left - PRIO_HEADER) / 4) goto bad;
    r->p = (const float *)(p + PRIO_HEADER);
    *pos = o + PRIO_HEADER + pad8((size_t)r->n * 4);
    return 1;
  }
  if ((r->kind != RLOG_REC_BATCH && r->kind != REC_BATCH_FRAMES) || left < REC_HEADER) goto bad;
  rlog_batch *b = &r->batch;
  b->actor = get32(p + 4);
  b->incarnation = get64(p + 8);
  b->seq = get64(p + 16);
  b->rows = get32(p + 24);
  b->steps = get32(p + 28);
  b->items = get64(p + 32);
  size_t q = REC_HEADER;
  uint32_t framed = 0;
  if (r->kind == REC_BATCH_FRAMES) {
    if (left - q < 8) goto bad;
    framed = get32(p + q);
    if (!framed || (s->ncols < 32 && framed >> s->ncols)) goto bad;
    q += 8;
    /* Room for every framed column's rows, rebuilt. */
    size_t total = 0;
    for (uint32_t c = 0; c < s->ncols; c++)
      if (framed & (1u << c)) {
        size_t rb = rlog_column_bytes(&s->cols[c]);
        if (b->rows > FRAMED_ROWS_MAX / rb || total > FRAMED_ROWS_MAX - (size_t)b->rows * rb)
          goto bad;
        total += (size_t)b->rows * rb;
      }
    if (total > s->rows_cap) {
      unsigned char *nb = realloc(s->rows, total);
      if (!nb)
        return shoal_error_set(err, SHOAL_ENOMEM,
                               "replay log segment %llu: out of memory for %zu bytes of rows",
                               (unsigned long long)s->seq, total);
      s->rows = nb;
      s->rows_cap = total;
    }
    r->kind = RLOG_REC_BATCH;
  }
  size_t at = 0; /* where the next rebuilt column goes in s->rows */
  for (uint32_t c = 0; c < s->ncols; c++) {
    size_t rb = rlog_column_bytes(&s->cols[c]);
    if (!(framed & (1u << c))) {
      size_t n = (size_t)b->rows * rb;
      if (n > left - q || pad8(n) > left - q) goto bad;
      b->cols[c] = p + q;
      q += pad8(n);
      continue;
    }
    if (left - q < 8) goto bad;
    size_t nf = get32(p + q), d = get32(p + q + 4);
    q += 8;
    if (!nf || !d || rb % d || nf > (size_t)b->rows * d) goto bad;
    size_t fb = rb / d, n = nf * fb, ni = (size_t)b->rows * d;
    if (n > left - q || pad8(n) > left - q) goto bad;
    const unsigned char *fr = p + q;
    q += pad8(n);
    if (ni > (left - q) / 4 || pad8(ni * 4) > left - q) goto bad;
    const unsigned char *ix = p + q;
    q += pad8(ni * 4);
    unsigned char *dst = s->rows + at;
    for (size_t e = 0; e < ni; e++) {
      uint32_t f = get32(ix + 4 * e);
      if (f >= nf) goto bad;
      memcpy(dst + e * fb, fr + (size_t)f * fb, fb);
    }
    b->cols[c] = dst;
    at += (size_t)b->rows * rb;
  }
  *pos = o + q;
  return 1;
bad:
  shoal_error_set(err, SHOAL_EFORMAT, "replay log segment %llu: record at byte %zu is malformed",
                  (unsigned long long)s->seq, o);
  return SHOAL_EFORMAT; /* negative, as every shoal error */
}

void rlog_segment_free(rlog_segment *s) {
  if (!s) return;
  free(s->body);
  free(s->rows);
  memset(s, 0, sizeof *s);
}

/* ---- restore ------------------------------------------------------------------ */

typedef struct held_seg {
  uint64_t seq;
  void *bytes;
  size_t len;
  rlog_segment head;
} held_seg;

static int same_cols(const rlog_segment *s, const rlog_column *cols, int ncols, shoal_error *err) {
  if ((int)s->ncols != ncols)
    return shoal_error_set(err, SHOAL_ESHAPE,
                           "replay log segment %llu has %u columns, this learner takes %d",
                           (unsigned long long)s->seq, s->ncols, ncols);
  for (int c = 0; c < ncols; c++) {
    const rlog_column *a = &s->cols[c], *b = &cols[c];
    int same =
        !strncmp(a->name, b->name, RLOG_COL_NAME) && a->dtype == b->dtype && a->ndim == b->ndim;
    for (uint32_t d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (!same)
      return shoal_error_set(err, SHOAL_ESHAPE,
                             "replay log segment %llu: column %d is '%s' %s with %u dims, this "
                             "learner takes '%s' %s with %u dims (another env or config?)",
                             (unsigned long long)s->seq, c, a->name,
                             replay_dtype_name((replay_dtype)a->dtype), a->ndim, b->name,
                             replay_dtype_name((replay_dtype)b->dtype), b->ndim);
  }
  return 0;
}

int rlog_restore(store *st, const char *run, const rlog_column *cols, int ncols,
                 uint64_t want_items, replay *mem, rlog_batch_fn fn, void *ctx,
                 rlog_restore_info *info, shoal_error *err) {
  double t0 = shoal_now_s();
  memset(info, 0, sizeof *info);
  uint64_t *seqs = NULL;
  size_t n = 0;
  int rc = store_replay_list(st, run, &seqs, &n, err);
  if (rc) return rc;
  if (!n) {
    free(seqs);
    info->seconds = shoal_now_s() - t0;
    info->item_offset = 0;
    return 0;
  }
  /* Newest first: data segments until they fill the memory, and the newest priority
   * checkpoint (which may lie further back). */
  held_seg *keep = calloc(n, sizeof *keep);
  held_seg ckpt = {0};
  size_t nkeep = 0;
  uint64_t items = 0;
  int have_ckpt = 0;
  /* A uniform memory has no priorities to look for. */
  int want_ckpt = mem && replay_get_config(mem)->kind == REPLAY_PRIORITIZED;
  if (!keep) rc = shoal_error_set(err, SHOAL_ENOMEM, "replay log: out of memory");
  for (size_t i = n; i-- > 0 && !rc;) {
    if (items >= want_items && (have_ckpt || !want_ckpt)) break;
    void *bytes = NULL;
    size_t len = 0;
    rc = store_replay_read(st, run, seqs[i], &bytes, &len, err);
    if (rc == SHOAL_ENOENT) { /* trimmed meanwhile */
      rc = 0;
      continue;
    }
    if (rc) break;
    rlog_segment h = {0};
    if ((rc = rlog_peek(bytes, len, seqs[i], &h, err))) {
      free(bytes);
      break;
    }
    if (h.flags & RLOG_SEG_PRIORITIES) {
      if (!have_ckpt && want_ckpt) {
        ckpt = (held_seg){seqs[i], bytes, len, h};
        have_ckpt = 1;
      } else {
        free(bytes);
      }
      continue;
    }
    if (items >= want_items) { /* only looking for a checkpoint */
      free(bytes);
      continue;
    }
    keep[nkeep++] = (held_seg){seqs[i], bytes, len, h};
    items += h.items;
  }
  info->next_seq = seqs[n - 1] + 1;
  free(seqs);

  /* Oldest first into the memory. */
  rlog_segment seg = {0};
  uint64_t *gen0 = calloc(nkeep + 1, sizeof *gen0); /* replay seq of each one's first item */
  int *mapped = calloc(nkeep + 1, sizeof *mapped);
  if (!rc && (!gen0 || !mapped))
    rc = shoal_error_set(err, SHOAL_ENOMEM, "replay log: out of memory");
  uint64_t expect = 0;
  for (size_t k = nkeep; k-- > 0 && !rc;) {
    held_seg *h = &keep[k];
    if ((rc = same_cols(&h->head, cols, ncols, err))) break;
    if ((rc = rlog_decode(h->bytes, h->len, h->seq, &seg, err))) break;
    if (k + 1 < nkeep && h->head.first_item != expect) info->gaps++;
    if (k + 1 == nkeep || h->head.first_item != expect) info->contiguous_from = h->head.first_item;
    expect = h->head.first_item + h->head.items;
    replay_stats rs0 = {0};
    if (mem) replay_get_stats(mem, &rs0);
    gen0[k] = rs0.next_seq;
    size_t pos = 0;
    rlog_record r;
    int got;
    while ((got = rlog_next(&seg, &pos, &r, err)) == 1) {
      if (r.kind != RLOG_REC_BATCH) continue;
      if ((rc = fn(ctx, &r.batch, err))) break;
      info->records++;
    }
    if (got < 0) rc = got;
    if (rc) break;
    replay_stats rs1 = {0};
    if (mem) replay_get_stats(mem, &rs1);
    mapped[k] = mem && rs1.next_seq - rs0.next_seq == h->head.items;
    info->segments++;
    info->items += h->head.items;
    info->next_item = h->head.first_item + h->head.items;
    info->steps_total = h->head.steps_before + h->head.steps;
  }
  /* The checkpoint's priorities onto the items restored. */
  if (!rc && have_ckpt) {
    if ((rc = rlog_decode(ckpt.bytes, ckpt.len, ckpt.seq, &seg, err)) == 0) {
      size_t pos = 0;
      rlog_record r;
      int got;
      while ((got = rlog_next(&seg, &pos, &r, err)) == 1) {
        if (r.kind != RLOG_REC_PRIORITIES) continue;
        for (size_t k = 0; k < nkeep && !rc; k++) {
          if (!mapped[k]) continue;
          uint64_t a = keep[k].head.first_item, b = a + keep[k].head.items;
          uint64_t lo = r.first_item > a ? r.first_item : a;
          uint64_t hi = r.first_item + r.n < b ? r.first_item + r.n : b;
          if (lo >= hi) continue;
          /* Checkpoint entries are floats at any alignment in the body: copy. */
          float *tmp = malloc((size_t)(hi - lo) * sizeof *tmp);
          if (!tmp) {
            rc = shoal_error_set(err, SHOAL_ENOMEM, "replay log: out of memory");
            break;
          }
          memcpy(tmp, r.p + (lo - r.first_item), (size_t)(hi - lo) * sizeof *tmp);
          for (uint64_t i = 0; i < hi - lo; i++)
            if (!isfinite(tmp[i])) tmp[i] = -1; /* damaged entries keep the logged priority */
          int64_t set = 0;
          rc = replay_priorities_set(mem, gen0[k] + (lo - a), (int64_t)(hi - lo), tmp, &set, err);
          info->priorities += (uint64_t)set;
          free(tmp);
        }
      }
      if (got < 0 && !rc) rc = got;
    }
  }
  if (!rc && nkeep) {
    replay_stats rs = {0};
    if (mem) replay_get_stats(mem, &rs);
    info->item_offset = (int64_t)info->next_item - (int64_t)rs.next_seq;
  }
  rlog_segment_free(&seg);
  for (size_t k = 0; k < nkeep; k++) free(keep[k].bytes);
  free(keep);
  free(ckpt.bytes);
  free(gen0);
  free(mapped);
  info->seconds = shoal_now_s() - t0;
  return rc;
}
