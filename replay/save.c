/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay/save.c — save and load the transition memory, streamed through a 1 MiB
 * buffer. The file (host byte order, checked by a byte-order mark):
 *
 *   "SHOALRPL" u32 version=1 u32 0x01020304
 *   spec:  u32 kind, u64 capacity, u32 streams, u32 ncols,
 *          ncols x (char name[32], u32 dtype, u32 ndim, i64 shape[4]),
 *          char obs_column[32] (all zero: none), u32 frame_stack, f64 alpha, f64 eps,
 *          u32 crc32c(the bytes before it)
 *   state: u64 head, u64 lo, f64 max_priority, u64 steps, u64 tails,
 *          streams x u64 last
 *   items: for s in [lo, head): u64 s, u64 prev, u64 link, f32 reward, u8 flags,
 *          f64 priority (prioritized only), then each column's item (a tail: the obs
 *          column only)
 *   "SHOALEND" u32 crc32c(all bytes before it)
 *
 * Written atomically (common/file.h: a temporary file beside path, fsynced, renamed over
 * path, and the folder fsynced), so a crash leaves the old file or the new one, never a
 * torn one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/file.h"
#include "replay/internal.h"

enum { IO_BUF = 1 << 20, FILE_VERSION = 1, BOM = 0x01020304 };
static const char MAGIC[8] = {'S', 'H', 'O', 'A', 'L', 'R', 'P', 'L'};
static const char END_MAGIC[8] = {'S', 'H', 'O', 'A', 'L', 'E', 'N', 'D'};

typedef struct io {
  int fd;
  uint8_t *buf;
  size_t len, pos; /* reader: bytes in buf, next to consume; writer: len used */
  uint32_t crc;
  uint64_t offset; /* bytes consumed or produced so far */
  const char *path;
  shoal_error *err;
  int rc;
} io;

/* ---------------------------------------------------------------- writer */

static void w_flush(io *w) {
  if (w->rc || !w->len) return;
  w->crc = shoal_crc32c(w->crc, w->buf, w->len);
  size_t off = 0;
  while (off < w->len) {
    ssize_t k = write(w->fd, w->buf + off, w->len - off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      w->rc = shoal_error_set(w->err, SHOAL_EIO, "replay_save: writing '%s': %s", w->path,
                              k < 0 ? strerror(errno) : "no progress");
      return;
    }
    off += (size_t)k;
  }
  w->len = 0;
}

static void w_put(io *w, const void *p, size_t n) {
  const uint8_t *s = p;
  while (n && !w->rc) {
    size_t k = IO_BUF - w->len < n ? IO_BUF - w->len : n;
    memcpy(w->buf + w->len, s, k);
    w->len += k;
    s += k;
    n -= k;
    w->offset += k;
    if (w->len == IO_BUF) w_flush(w);
  }
}

static void w_u32(io *w, uint32_t v) { w_put(w, &v, 4); }
static void w_u64(io *w, uint64_t v) { w_put(w, &v, 8); }
static void w_f64(io *w, double v) { w_put(w, &v, 8); }

/* ---------------------------------------------------------------- reader */

static int r_get(io *rd, void *p, size_t n) {
  uint8_t *d = p;
  size_t want = n;
  while (n && !rd->rc) {
    if (rd->pos == rd->len) {
      ssize_t k;
      do k = read(rd->fd, rd->buf, IO_BUF);
      while (k < 0 && errno == EINTR);
      if (k < 0) {
        rd->rc = shoal_error_set(rd->err, SHOAL_EIO, "replay_load: reading '%s': %s", rd->path,
                                 strerror(errno));
        break;
      }
      if (k == 0) {
        rd->rc =
            shoal_error_set(rd->err, SHOAL_EFORMAT, "replay_load: '%s' is truncated at byte %llu",
                            rd->path, (unsigned long long)rd->offset);
        break;
      }
      rd->len = (size_t)k;
      rd->pos = 0;
    }
    size_t k = rd->len - rd->pos < n ? rd->len - rd->pos : n;
    memcpy(d, rd->buf + rd->pos, k);
    rd->pos += k;
    d += k;
    n -= k;
    rd->offset += k;
  }
  if (!rd->rc) rd->crc = shoal_crc32c(rd->crc, p, want);
  return rd->rc;
}

static uint32_t r_u32(io *rd) {
  uint32_t v = 0;
  r_get(rd, &v, 4);
  return v;
}
static uint64_t r_u64(io *rd) {
  uint64_t v = 0;
  r_get(rd, &v, 8);
  return v;
}
static double r_f64(io *rd) {
  double v = 0;
  r_get(rd, &v, 8);
  return v;
}

/* ---------------------------------------------------------------- save */

static void put_spec(io *w, const struct replay *r) {
  w_u32(w, (uint32_t)r->cfg.kind);
  w_u64(w, (uint64_t)r->cap);
  w_u32(w, (uint32_t)r->cfg.streams);
  w_u32(w, (uint32_t)r->cfg.ncols);
  for (int c = 0; c < r->cfg.ncols; c++) {
    const replay_column *col = &r->cfg.cols[c];
    char name[REPLAY_NAME_MAX] = {0};
    memcpy(name, col->name, strnlen(col->name, REPLAY_NAME_MAX - 1));
    w_put(w, name, sizeof name);
    w_u32(w, (uint32_t)col->dtype);
    w_u32(w, (uint32_t)col->ndim);
    for (int d = 0; d < REPLAY_MAX_DIMS; d++)
      w_u64(w, (uint64_t)(d < col->ndim ? col->shape[d] : 0));
  }
  char obs[REPLAY_NAME_MAX] = {0};
  if (r->obs >= 0) memcpy(obs, r->obs_name, strnlen(r->obs_name, REPLAY_NAME_MAX - 1));
  w_put(w, obs, sizeof obs);
  w_u32(w, (uint32_t)r->k);
  w_f64(w, r->cfg.alpha);
  w_f64(w, r->cfg.eps);
}

int replay_save(replay *r, const char *path, shoal_error *err) {
  if (!r || !path) return shoal_error_set(err, SHOAL_EINVAL, "replay_save: NULL argument");
  io w = {.fd = -1, .path = path, .err = err};
  w.buf = malloc(IO_BUF);
  shoal_file_tmp *tmp = malloc(sizeof *tmp);
  if (!tmp || !w.buf) {
    free(tmp);
    free(w.buf);
    return shoal_error_set(err, SHOAL_ENOMEM, "replay_save: out of memory");
  }
  shoal_error fe = {0};
  if (shoal_file_tmp_open(tmp, path, &fe)) {
    int rc = shoal_error_set(err, SHOAL_EIO, "replay_save: %s", fe.msg);
    free(tmp);
    free(w.buf);
    return rc;
  }
  w.fd = tmp->fd;
  /* Pin everything held (no slack): writers that would overwrite it wait. */
  uint64_t lo, hi;
  replay__pin(r, 0, &lo, &hi);
  /* Writers that reserved before hi are not pinned; wait until they publish. */
  for (uint64_t s = lo; s < hi; s++)
    while (atomic_load_explicit(&r->meta[replay__slot(r, s)].seq, memory_order_acquire) != s)
      sched_yield();

  w_put(&w, MAGIC, 8);
  w_u32(&w, FILE_VERSION);
  w_u32(&w, BOM);
  put_spec(&w, r);
  w_flush(&w);
  w_u32(&w, w.crc);
  double max_p = 0;
  if (r->sum) {
    pthread_mutex_lock(&r->tree_lock);
    max_p = r->max_p;
    pthread_mutex_unlock(&r->tree_lock);
  }
  w_u64(&w, hi);
  w_u64(&w, lo);
  w_f64(&w, max_p);
  w_u64(&w, atomic_load(&r->n_steps));
  w_u64(&w, atomic_load(&r->n_tails));
  for (int i = 0; i < r->cfg.streams; i++) {
    uint64_t last = atomic_load(&r->streams[i].last);
    w_u64(&w, last >= lo && last < hi ? last : 0); /* a step not saved: restart its episode */
  }
  for (uint64_t s = lo; s < hi && !w.rc; s++) {
    /* Items are written oldest first: let writers overwrite what is already out. */
    if ((s & 4095) == 0) {
      atomic_store(&r->pin, s);
      replay__pin_moved(r);
    }
    int64_t slot = replay__slot(r, s);
    w_u64(&w, s);
    w_u64(&w, r->meta[slot].prev);
    w_u64(&w, atomic_load_explicit(&r->meta[slot].link, memory_order_acquire));
    w_put(&w, &r->meta[slot].reward, sizeof(float));
    w_put(&w, &r->meta[slot].flags, 1);
    if (r->sum) {
      /* The sampling thread is the only one changing a held slot's priority. */
      pthread_mutex_lock(&r->tree_lock);
      double p = replay__leaves(r)[slot];
      pthread_mutex_unlock(&r->tree_lock);
      w_f64(&w, p);
    }
    for (int c = 0; c < r->cfg.ncols; c++) {
      if ((r->meta[slot].flags & REPLAY__TAIL) && c != r->obs) continue;
      w_put(&w, r->col[c] + (size_t)slot * r->item[c], r->item[c]);
    }
  }
  replay__unpin(r);
  w_put(&w, END_MAGIC, 8);
  w_flush(&w);
  if (!w.rc) {
    uint32_t crc = w.crc;
    w_put(&w, &crc, 4);
    w.crc = 0;
    w_flush(&w);
  }
  if (w.rc)
    shoal_file_tmp_abort(tmp);
  else if (shoal_file_tmp_commit(tmp, SHOAL_FILE_REPLACE, &fe))
    w.rc = shoal_error_set(err, SHOAL_EIO, "replay_save: %s", fe.msg);
  free(tmp);
  free(w.buf);
  return w.rc;
}

/* ---------------------------------------------------------------- load */

/* The spec as a file states it. */
typedef struct filespec {
  uint32_t kind, streams, ncols, k;
  uint64_t cap;
  replay_column cols[REPLAY_MAX_COLUMNS];
  char obs[REPLAY_NAME_MAX];
  double alpha, eps;
} filespec;

static int read_spec(io *rd, filespec *f) {
  f->kind = r_u32(rd);
  f->cap = r_u64(rd);
  f->streams = r_u32(rd);
  f->ncols = r_u32(rd);
  if (rd->rc) return rd->rc;
  if (f->ncols < 1 || f->ncols > REPLAY_MAX_COLUMNS)
    return rd->rc = shoal_error_set(rd->err, SHOAL_EFORMAT, "replay_load: '%s' has %u columns",
                                    rd->path, f->ncols);
  for (uint32_t c = 0; c < f->ncols; c++) {
    replay_column *col = &f->cols[c];
    r_get(rd, col->name, REPLAY_NAME_MAX);
    col->name[REPLAY_NAME_MAX - 1] = 0;
    col->dtype = (replay_dtype)r_u32(rd);
    col->ndim = (int)r_u32(rd);
    for (int d = 0; d < REPLAY_MAX_DIMS; d++) col->shape[d] = (int64_t)r_u64(rd);
  }
  r_get(rd, f->obs, REPLAY_NAME_MAX);
  f->obs[REPLAY_NAME_MAX - 1] = 0;
  f->k = r_u32(rd);
  f->alpha = r_f64(rd);
  f->eps = r_f64(rd);
  return rd->rc;
}

static void shape_str(char *b, size_t n, const replay_column *c) {
  b[0] = 0;
  for (int d = 0; d < c->ndim && d < REPLAY_MAX_DIMS; d++)
    snprintf(b + strlen(b), n - strlen(b), "%s%lld", d ? "," : "", (long long)c->shape[d]);
}

/* Compares the file's spec with r's; says the first difference. */
static int compare_spec(io *rd, const filespec *f, const struct replay *r) {
  const char *p = rd->path;
  shoal_error *e = rd->err;
  const char *kinds[] = {"uniform", "prioritized"};
  if (f->kind != (uint32_t)r->cfg.kind)
    return shoal_error_set(e, SHOAL_EINVAL, "replay_load: '%s' holds a %s memory, this one is %s",
                           p, f->kind < 2 ? kinds[f->kind] : "unknown", kinds[r->cfg.kind]);
  if (f->cap != (uint64_t)r->cap)
    return shoal_error_set(e, SHOAL_EINVAL,
                           "replay_load: '%s' has capacity %llu, this memory has %lld", p,
                           (unsigned long long)f->cap, (long long)r->cap);
  if (f->streams != (uint32_t)r->cfg.streams)
    return shoal_error_set(e, SHOAL_EINVAL, "replay_load: '%s' has %u streams, this memory has %d",
                           p, f->streams, r->cfg.streams);
  if (f->ncols != (uint32_t)r->cfg.ncols)
    return shoal_error_set(e, SHOAL_EINVAL, "replay_load: '%s' has %u columns, this memory has %d",
                           p, f->ncols, r->cfg.ncols);
  for (int c = 0; c < r->cfg.ncols; c++) {
    const replay_column *a = &f->cols[c], *b = &r->cfg.cols[c];
    if (strcmp(a->name, b->name))
      return shoal_error_set(e, SHOAL_EINVAL,
                             "replay_load: '%s' column %d is '%s', this memory has '%s'", p, c,
                             a->name, b->name);
    if (a->dtype != b->dtype)
      return shoal_error_set(e, SHOAL_EINVAL,
                             "replay_load: '%s' column '%s' is %s, this memory has %s", p, a->name,
                             replay_dtype_name(a->dtype), replay_dtype_name(b->dtype));
    int same = a->ndim == b->ndim;
    for (int d = 0; same && d < b->ndim; d++) same = a->shape[d] == b->shape[d];
    if (!same) {
      char sa[96], sb[96];
      shape_str(sa, sizeof sa, a);
      shape_str(sb, sizeof sb, b);
      return shoal_error_set(e, SHOAL_EINVAL,
                             "replay_load: '%s' column '%s' has shape (%s), this memory has (%s)",
                             p, a->name, sa, sb);
    }
  }
  const char *mine = r->obs >= 0 ? r->obs_name : "";
  if (strcmp(f->obs, mine))
    return shoal_error_set(e, SHOAL_EINVAL,
                           "replay_load: '%s' has obs column '%s', this memory has '%s'", p, f->obs,
                           mine);
  if (f->k != (uint32_t)r->k)
    return shoal_error_set(
        e, SHOAL_EINVAL, "replay_load: '%s' has frame_stack %u, this memory has %d", p, f->k, r->k);
  if (f->alpha != r->cfg.alpha || f->eps != r->cfg.eps)
    return shoal_error_set(e, SHOAL_EINVAL,
                           "replay_load: '%s' has alpha %g eps %g, this memory has alpha %g eps %g",
                           p, f->alpha, f->eps, r->cfg.alpha, r->cfg.eps);
  return 0;
}

static int load_body(io *rd, struct replay *r) {
  char magic[8];
  if (r_get(rd, magic, 8)) return rd->rc;
  if (memcmp(magic, MAGIC, 8))
    return rd->rc = shoal_error_set(
               rd->err, SHOAL_EFORMAT,
               "replay_load: '%s' is not a replay file (magic %02x%02x%02x%02x...)", rd->path,
               (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]);
  uint32_t version = r_u32(rd), bom = r_u32(rd);
  if (rd->rc) return rd->rc;
  if (version != FILE_VERSION)
    return rd->rc = shoal_error_set(rd->err, SHOAL_EFORMAT,
                                    "replay_load: '%s' has version %u, this build reads %d",
                                    rd->path, version, FILE_VERSION);
  if (bom != BOM)
    return rd->rc =
               shoal_error_set(rd->err, SHOAL_EFORMAT,
                               "replay_load: '%s' was written with another byte order", rd->path);
  filespec f;
  if (read_spec(rd, &f)) return rd->rc;
  /* The header has its own checksum, so a corrupt spec reads as corrupt, not as
   * another spec. */
  uint32_t hwant = rd->crc, hgot = r_u32(rd);
  if (rd->rc) return rd->rc;
  if (hgot != hwant)
    return rd->rc = shoal_error_set(rd->err, SHOAL_EFORMAT,
                                    "replay_load: '%s' fails its header checksum: the file is "
                                    "corrupt",
                                    rd->path);
  if (compare_spec(rd, &f, r)) return rd->rc = SHOAL_EINVAL;
  uint64_t head = r_u64(rd), lo = r_u64(rd);
  double max_p = r_f64(rd);
  uint64_t steps = r_u64(rd), tails = r_u64(rd);
  if (rd->rc) return rd->rc;
  /* A save writes every item a reader may touch, [replay__low(head), head): a file that
   * starts later leaves slots a later save would wait on forever (found by fuzz_replay_load) */
  if (lo < 1 || head < lo || head - lo > (uint64_t)r->cap || lo != replay__low(r, head, 0) ||
      (r->sum && !(max_p > 0)))
    return rd->rc = shoal_error_set(rd->err, SHOAL_EFORMAT,
                                    "replay_load: '%s' has a bad state (items %llu..%llu)",
                                    rd->path, (unsigned long long)lo, (unsigned long long)head);
  for (int i = 0; i < r->cfg.streams; i++) {
    uint64_t last = r_u64(rd);
    atomic_store(&r->streams[i].last, last);
  }
  int64_t held_tails = 0;
  for (uint64_t s = lo; s < head && !rd->rc; s++) {
    int64_t slot = replay__slot(r, s);
    uint64_t fs = r_u64(rd), prev = r_u64(rd), link = r_u64(rd);
    float rew = 0;
    uint8_t flags = 0;
    double p = 0;
    r_get(rd, &rew, sizeof rew);
    r_get(rd, &flags, 1);
    if (r->sum) p = r_f64(rd);
    if (rd->rc) break;
    if (fs != s || prev >= s || flags > 7 || !isfinite(rew) || !(p >= 0 && isfinite(p)))
      return rd->rc =
                 shoal_error_set(rd->err, SHOAL_EFORMAT,
                                 "replay_load: '%s' item %llu is malformed: the file is corrupt",
                                 rd->path, (unsigned long long)s);
    r->meta[slot].prev = prev;
    atomic_store_explicit(&r->meta[slot].link, link, memory_order_relaxed);
    r->meta[slot].reward = rew;
    r->meta[slot].flags = flags;
    held_tails += (flags & REPLAY__TAIL) != 0;
    if (r->sum) {
      replay__leaves(r)[slot] = p;
      replay__leaves_min(r)[slot] = p > 0 ? p : INFINITY;
    }
    for (int c = 0; c < r->cfg.ncols && !rd->rc; c++) {
      if ((flags & REPLAY__TAIL) && c != r->obs) continue;
      r_get(rd, r->col[c] + (size_t)slot * r->item[c], r->item[c]);
    }
    atomic_store_explicit(&r->meta[slot].seq, s, memory_order_relaxed);
  }
  if (rd->rc) return rd->rc;
  char end[8];
  if (r_get(rd, end, 8)) return rd->rc;
  uint32_t want = rd->crc, got = 0;
  if (r_get(rd, &got, 4)) return rd->rc;
  if (memcmp(end, END_MAGIC, 8) || got != want)
    return rd->rc = shoal_error_set(rd->err, SHOAL_EFORMAT,
                                    "replay_load: '%s' fails its checksum (crc32c %08x, file says "
                                    "%08x): the file is corrupt",
                                    rd->path, want, got);
  uint8_t extra;
  ssize_t k = rd->pos < rd->len ? 1 : read(rd->fd, &extra, 1);
  if (k != 0)
    return rd->rc = shoal_error_set(rd->err, SHOAL_EFORMAT,
                                    "replay_load: '%s' has bytes after its end", rd->path);
  for (int i = 0; i < r->cfg.streams; i++) {
    uint64_t last = atomic_load(&r->streams[i].last);
    if (last && (last < lo || last >= head)) atomic_store(&r->streams[i].last, 0);
  }
  if (r->sum) {
    replay__tree_rebuild(r);
    r->max_p = max_p;
  }
  atomic_store(&r->n_steps, steps);
  atomic_store(&r->n_tails, tails);
  atomic_store(&r->n_tails_held, held_tails);
  atomic_store(&r->head, head);
  return 0;
}

int replay_load(replay *r, const char *path, shoal_error *err) {
  if (!r || !path) return shoal_error_set(err, SHOAL_EINVAL, "replay_load: NULL argument");
  if (atomic_load(&r->head) != 1)
    return shoal_error_set(err, SHOAL_ESTATE,
                           "replay_load: the memory is not empty; load into a new one");
  io rd = {.path = path, .err = err};
  rd.fd = open(path, O_RDONLY | O_CLOEXEC);
  if (rd.fd < 0)
    return shoal_error_set(err, errno == ENOENT ? SHOAL_ENOENT : SHOAL_EIO,
                           "replay_load: opening '%s': %s", path, strerror(errno));
  rd.buf = malloc(IO_BUF);
  if (!rd.buf) {
    close(rd.fd);
    return shoal_error_set(err, SHOAL_ENOMEM, "replay_load: out of memory");
  }
  int rc = load_body(&rd, r);
  close(rd.fd);
  free(rd.buf);
  if (rc) replay__clear(r);
  return rc;
}
