/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/segments.c — experience segments (the format is in store_segments.h): the canonical
 * encoding, value checks, and the front that checks arguments and calls the backend's
 * segment slots (file_segments.c: a folder of .seg files; mongo_segments.c: the
 * `segments` collection).
 *
 * The encoding is the unit of everything: the file is the encoding, the MongoDB
 * document holds its columns as binaries and is turned back into it on read, and the
 * CRC is computed over it (bytes 16..end) in both cases. Columns are packed in a
 * fixed order, each padded with zeros to a multiple of 8 bytes so that every column
 * pointer into the buffer is aligned for its type.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/internal.h"

static const char SEG_MAGIC[8] = {'S', 'H', 'O', 'A', 'L', 'S', 'E', 'G'};
enum { SEG_VERSION = 1, SEG_FLAG_PRIORITY = 1 };
enum { MAX_ITEM_ELEMS = 1 << 24 };

/* ---- little-endian fields ------------------------------------------------ */

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

/* ---- spec and layout ----------------------------------------------------- */

size_t store_segment_dtype_size(int dtype) {
  switch (dtype) {
    case STORE_SEG_U8: return 1;
    case STORE_SEG_I32:
    case STORE_SEG_F32: return 4;
    default: return 0;
  }
}

const char *store_segment_dtype_name(int dtype) {
  switch (dtype) {
    case STORE_SEG_U8: return "u8";
    case STORE_SEG_I32: return "i32";
    case STORE_SEG_F32: return "f32";
    default: return "?";
  }
}

int store__seg_dtype_parse(const char *s, int *out) {
  for (int d = 0; d <= STORE_SEG_F32; d++)
    if (store_segment_dtype_size(d) && s && !strcmp(s, store_segment_dtype_name(d))) {
      *out = d;
      return 0;
    }
  return SHOAL_EINVAL;
}

size_t store__seg_item_bytes(int dtype, int ndim, const int64_t *shape) {
  size_t es = store_segment_dtype_size(dtype);
  if (!es || ndim < 0 || ndim > STORE_SEG_MAX_DIMS) return 0;
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 1 || shape[d] > MAX_ITEM_ELEMS) return 0;
    n *= shape[d];
    if (n > MAX_ITEM_ELEMS) return 0;
  }
  for (int d = ndim; d < STORE_SEG_MAX_DIMS; d++)
    if (shape[d] != 0) return 0; /* unused dims are 0, so specs compare with memcmp-like ease */
  return (size_t)n * es;
}

static int spec_ok(const store_segment_spec *s) {
  if (s->obs_dtype != STORE_SEG_U8 && s->obs_dtype != STORE_SEG_F32) return 0;
  if (!store__seg_item_bytes(s->obs_dtype, s->obs_ndim, s->obs_shape)) return 0;
  if (s->act_dtype == STORE_SEG_I32)
    return s->act_ndim == 0 && store__seg_item_bytes(STORE_SEG_I32, 0, s->act_shape);
  if (s->act_dtype != STORE_SEG_F32) return 0;
  return store__seg_item_bytes(s->act_dtype, s->act_ndim, s->act_shape) != 0;
}

static void spec_text(char *out, size_t cap, int dtype, int ndim, const int64_t *shape) {
  int o = snprintf(out, cap, "%s[", store_segment_dtype_name(dtype));
  for (int d = 0; d < ndim && d < STORE_SEG_MAX_DIMS && o > 0 && (size_t)o < cap; d++)
    o += snprintf(out + o, cap - (size_t)o, "%s%lld", d ? "," : "", (long long)shape[d]);
  if (o > 0 && (size_t)o < cap) snprintf(out + o, cap - (size_t)o, "]");
}

size_t store_segment_encoded_bytes(const store_segment_spec *spec, uint32_t rows, uint32_t ends,
                                   int has_priority) {
  if (!spec || !spec_ok(spec)) return 0;
  size_t ob = store__seg_item_bytes(spec->obs_dtype, spec->obs_ndim, spec->obs_shape);
  size_t ab = store__seg_item_bytes(spec->act_dtype, spec->act_ndim, spec->act_shape);
  size_t n = rows, k = ends;
  return STORE_SEG_HEADER + pad8(n * ob) + pad8(n * ab) + pad8(n * 4) + pad8(n) + pad8(n) +
         pad8(k * ob) + (has_priority ? pad8(n * 4) : 0);
}

/* Points seg's columns into its buffer for its spec, rows, ends and priority flag. */
static void layout(store_segment *seg) {
  const store_segment_spec *s = &seg->spec;
  size_t ob = store__seg_item_bytes(s->obs_dtype, s->obs_ndim, s->obs_shape);
  size_t ab = store__seg_item_bytes(s->act_dtype, s->act_ndim, s->act_shape);
  size_t n = seg->rows, k = seg->ends;
  unsigned char *p = seg->buf + STORE_SEG_HEADER;
  seg->obs = p, p += pad8(n * ob);
  seg->action = p, p += pad8(n * ab);
  seg->reward = (float *)(void *)p, p += pad8(n * 4);
  seg->terminated = p, p += pad8(n);
  seg->truncated = p, p += pad8(n);
  seg->final_obs = k ? (void *)p : NULL, p += pad8(k * ob);
  seg->priority = seg->has_priority ? (float *)(void *)p : NULL;
}

void store__seg_no_columns(store_segment *seg) {
  seg->rows = seg->ends = 0;
  seg->has_priority = 0;
  seg->len = 0;
  seg->obs = seg->action = seg->final_obs = NULL;
  seg->reward = seg->priority = NULL;
  seg->terminated = seg->truncated = NULL;
}

int store__seg_grow(store_segment *seg, size_t len, shoal_error *err) {
  if (len <= seg->cap) return 0;
  size_t nc = seg->cap ? seg->cap : 4096;
  while (nc < len) nc *= 2;
  void *p = realloc(seg->buf, nc);
  if (!p)
    return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory for a %zu-byte segment", len);
  seg->buf = p;
  seg->cap = nc;
  return 0;
}

int store_segment_reserve(store_segment *seg, const store_segment_spec *spec, uint32_t rows,
                          uint32_t ends, int has_priority, shoal_error *err) {
  if (!seg || !spec)
    return shoal_error_set(err, SHOAL_EINVAL, "store_segment_reserve: NULL argument");
  store__seg_no_columns(seg);
  if (!spec_ok(spec))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: invalid segment spec (obs u8|f32 with 0-4 dims >= 1, action "
                           "i32 scalar or f32 with 0-4 dims)");
  if (rows == 0 || ends > rows)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: a segment needs 1+ rows and ends <= rows (%u, %u)", rows, ends);
  size_t len = store_segment_encoded_bytes(spec, rows, ends, has_priority);
  if (len > STORE_SEGMENT_MAX)
    return shoal_error_set(
        err, SHOAL_EFULL,
        "store: a segment of %u rows takes %zu bytes (at most %zu: use fewer rows)", rows, len,
        STORE_SEGMENT_MAX);
  int rc = store__seg_grow(seg, len, err);
  if (rc) return rc;
  memset(seg->buf, 0, len); /* the padding is part of the CRC */
  seg->spec = *spec;
  seg->rows = rows;
  seg->ends = ends;
  seg->has_priority = has_priority ? 1 : 0;
  seg->len = len;
  layout(seg);
  return 0;
}

void store_segment_free(store_segment *seg) {
  if (!seg) return;
  free(seg->buf);
  memset(seg, 0, sizeof *seg);
}

/* ---- value checks -------------------------------------------------------- */

int store_segment_check(const store_segment *seg, const store_segment_limits *lim,
                        shoal_error *err) {
  if (!seg || !seg->rows)
    return shoal_error_set(err, SHOAL_EINVAL, "store_segment_check: an empty segment");
  const store_segment_spec *s = &seg->spec;
  const uint64_t q = seg->seq;
  if (lim) {
    const store_segment_spec *w = &lim->spec;
    int same = s->obs_dtype == w->obs_dtype && s->obs_ndim == w->obs_ndim &&
               s->act_dtype == w->act_dtype && s->act_ndim == w->act_ndim;
    for (int d = 0; same && d < STORE_SEG_MAX_DIMS; d++)
      same = s->obs_shape[d] == w->obs_shape[d] && s->act_shape[d] == w->act_shape[d];
    if (!same) {
      char a[96], b[96], c[96], d[96];
      spec_text(a, sizeof a, s->obs_dtype, s->obs_ndim, s->obs_shape);
      spec_text(b, sizeof b, s->act_dtype, s->act_ndim, s->act_shape);
      spec_text(c, sizeof c, w->obs_dtype, w->obs_ndim, w->obs_shape);
      spec_text(d, sizeof d, w->act_dtype, w->act_ndim, w->act_shape);
      return shoal_error_set(err, SHOAL_ESHAPE,
                             "segment %" PRIu64
                             " (source '%s'): spec obs %s action %s, the env "
                             "needs obs %s action %s",
                             q, seg->source, a, b, c, d);
    }
  }
  size_t n = seg->rows;
  uint32_t ended = 0;
  for (size_t i = 0; i < n; i++) {
    if (seg->terminated[i] > 1 || seg->truncated[i] > 1)
      return shoal_error_set(err, SHOAL_EFORMAT,
                             "segment %" PRIu64
                             " row %zu: terminated/truncated must be 0 or 1 "
                             "(got %u/%u)",
                             q, i, seg->terminated[i], seg->truncated[i]);
    ended += seg->terminated[i] | seg->truncated[i];
    if (!isfinite(seg->reward[i]))
      return shoal_error_set(err, SHOAL_ENAN, "segment %" PRIu64 " row %zu: reward is %g", q, i,
                             (double)seg->reward[i]);
    if (seg->priority && (!isfinite(seg->priority[i]) || seg->priority[i] < 0))
      return shoal_error_set(err, isfinite(seg->priority[i]) ? SHOAL_ERANGE : SHOAL_ENAN,
                             "segment %" PRIu64 " row %zu: priority %g (finite, >= 0 needed)", q, i,
                             (double)seg->priority[i]);
  }
  if (ended != seg->ends)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "segment %" PRIu64
                           ": %u rows end an episode but it holds %u final "
                           "observations",
                           q, ended, seg->ends);
  size_t obs_elems = store__seg_item_bytes(s->obs_dtype, s->obs_ndim, s->obs_shape) /
                     store_segment_dtype_size(s->obs_dtype);
  if (s->obs_dtype == STORE_SEG_F32) {
    const float *o = seg->obs;
    for (size_t i = 0; i < n * obs_elems; i++)
      if (!isfinite(o[i]))
        return shoal_error_set(err, SHOAL_ENAN, "segment %" PRIu64 " row %zu: obs[%zu] is %g", q,
                               i / obs_elems, i % obs_elems, (double)o[i]);
    const float *f = seg->final_obs;
    for (size_t i = 0; f && i < seg->ends * obs_elems; i++)
      if (!isfinite(f[i]))
        return shoal_error_set(err, SHOAL_ENAN,
                               "segment %" PRIu64 " final observation %zu: element %zu is %g", q,
                               i / obs_elems, i % obs_elems, (double)f[i]);
  }
  if (s->act_dtype == STORE_SEG_I32) {
    const int32_t *a = seg->action;
    for (size_t i = 0; i < n; i++)
      if (a[i] < 0 || (lim && lim->num_actions > 0 && a[i] >= lim->num_actions))
        return shoal_error_set(err, SHOAL_ERANGE,
                               "segment %" PRIu64 " row %zu: action %d outside [0, %lld)", q, i,
                               a[i], (long long)(lim ? lim->num_actions : 0));
  } else {
    size_t ae = store__seg_item_bytes(s->act_dtype, s->act_ndim, s->act_shape) / 4;
    const float *a = seg->action;
    for (size_t i = 0; i < n * ae; i++) {
      size_t j = i % ae;
      if (!isfinite(a[i]))
        return shoal_error_set(err, SHOAL_ENAN, "segment %" PRIu64 " row %zu: action[%zu] is %g", q,
                               i / ae, j, (double)a[i]);
      if (lim &&
          ((lim->act_low && a[i] < lim->act_low[j]) || (lim->act_high && a[i] > lim->act_high[j])))
        return shoal_error_set(
            err, SHOAL_ERANGE, "segment %" PRIu64 " row %zu: action[%zu] = %g outside [%g, %g]", q,
            i / ae, j, (double)a[i], lim->act_low ? (double)lim->act_low[j] : -INFINITY,
            lim->act_high ? (double)lim->act_high[j] : INFINITY);
    }
  }
  return 0;
}

/* ---- the header ---------------------------------------------------------- */

void store__seg_header_write(store_segment *seg) {
  unsigned char *h = seg->buf;
  memset(h, 0, STORE_SEG_HEADER);
  memcpy(h, SEG_MAGIC, 8);
  store__put_le32(h + 8, SEG_VERSION);
  store__put_le64(h + 16, seg->seq);
  uint64_t wt;
  memcpy(&wt, &seg->wall_time, 8);
  store__put_le64(h + 24, wt);
  store__put_le32(h + 32, seg->rows);
  store__put_le32(h + 36, seg->ends);
  store__put_le32(h + 40, seg->has_priority ? SEG_FLAG_PRIORITY : 0);
  store__put_le32(h + 44, STORE_SEG_HEADER);
  memcpy(h + 48, seg->run, strnlen(seg->run, 63));
  memcpy(h + 112, seg->source, strnlen(seg->source, 63));
  const store_segment_spec *s = &seg->spec;
  store__put_le32(h + 176, (uint32_t)s->obs_dtype);
  store__put_le32(h + 180, (uint32_t)s->obs_ndim);
  store__put_le32(h + 216, (uint32_t)s->act_dtype);
  store__put_le32(h + 220, (uint32_t)s->act_ndim);
  for (int d = 0; d < STORE_SEG_MAX_DIMS; d++) {
    store__put_le64(h + 184 + 8 * d, (uint64_t)s->obs_shape[d]);
    store__put_le64(h + 224 + 8 * d, (uint64_t)s->act_shape[d]);
  }
  seg->crc = store__crc32(h + 16, seg->len - 16);
  store__put_le32(h + 12, seg->crc);
}

/* A 64-byte name field as store__seg_header_write leaves it: a name (or nothing), then
 * NULs to the end. Anything else would decode to a name that re-encodes to other bytes
 * (a CRC that no longer matches), or put control characters into messages. */
static int name_field_ok(const unsigned char *f) {
  size_t n = strnlen((const char *)f, 64);
  if (n == 64) return 0;
  for (size_t i = n; i < 64; i++)
    if (f[i]) return 0;
  return n == 0 || store_name_valid((const char *)f);
}

int store__seg_header_read(store_segment *seg, size_t len, const char *where, shoal_error *err) {
  const unsigned char *h = seg->buf;
  store__seg_no_columns(seg);
  if (len < STORE_SEG_HEADER || memcmp(h, SEG_MAGIC, 8) != 0)
    return shoal_error_set(err, SHOAL_EFORMAT, "store: %s is not a shoal experience segment (%s)",
                           where, len < STORE_SEG_HEADER ? "shorter than its header" : "bad magic");
  if (store__get_le32(h + 8) != SEG_VERSION)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: %s has segment format version %u, expected %d", where,
                           store__get_le32(h + 8), SEG_VERSION);
  if (store__get_le32(h + 44) != STORE_SEG_HEADER)
    return shoal_error_set(err, SHOAL_EFORMAT, "store: %s: header size %u, expected %d", where,
                           store__get_le32(h + 44), STORE_SEG_HEADER);
  uint32_t crc = store__crc32(h + 16, len - 16);
  if (crc != store__get_le32(h + 12))
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: %s: CRC mismatch (stored %08x, data %08x): damaged or "
                           "truncated",
                           where, store__get_le32(h + 12), crc);
  store_segment_spec s;
  memset(&s, 0, sizeof s);
  s.obs_dtype = (int)store__get_le32(h + 176);
  s.obs_ndim = (int)store__get_le32(h + 180);
  s.act_dtype = (int)store__get_le32(h + 216);
  s.act_ndim = (int)store__get_le32(h + 220);
  for (int d = 0; d < STORE_SEG_MAX_DIMS; d++) {
    s.obs_shape[d] = (int64_t)store__get_le64(h + 184 + 8 * d);
    s.act_shape[d] = (int64_t)store__get_le64(h + 224 + 8 * d);
  }
  uint32_t rows = store__get_le32(h + 32), ends = store__get_le32(h + 36),
           flags = store__get_le32(h + 40);
  size_t want = store_segment_encoded_bytes(&s, rows, ends, flags & SEG_FLAG_PRIORITY);
  if (!spec_ok(&s) || rows == 0 || ends > rows || (flags & ~(uint32_t)SEG_FLAG_PRIORITY))
    return shoal_error_set(err, SHOAL_EFORMAT, "store: %s: invalid spec, row count or flags",
                           where);
  if (!name_field_ok(h + 48) || !name_field_ok(h + 112))
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: %s: its run or source is not a NUL-padded name", where);
  if (want != len)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: %s holds %zu bytes; its header (%u rows, %u ends) needs %zu",
                           where, len, rows, ends, want);
  seg->spec = s;
  seg->rows = rows;
  seg->ends = ends;
  seg->has_priority = (flags & SEG_FLAG_PRIORITY) != 0;
  seg->seq = store__get_le64(h + 16);
  uint64_t wt = store__get_le64(h + 24);
  memcpy(&seg->wall_time, &wt, 8);
  memcpy(seg->run, h + 48, 63);
  seg->run[63] = 0;
  memcpy(seg->source, h + 112, 63);
  seg->source[63] = 0;
  seg->crc = crc;
  seg->len = len;
  layout(seg);
  return 0;
}

/* ---- the front ----------------------------------------------------------- */

static int check_run(store *st, const char *run, shoal_error *err) {
  if (!store_name_valid(run))
    return shoal_error_set(err, SHOAL_EINVAL, "store: invalid run name '%.80s'",
                           run ? run : "(null)");
  store_run r;
  memset(&r, 0, sizeof r);
  int rc = store_run_find(st, run, &r, err);
  if (rc == SHOAL_ENOENT)
    return shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' does not exist in %s", run,
                           store_uri(st));
  store_run_clear(&r);
  return rc;
}

int store_segment_write(store *st, const char *run, store_segment *seg, shoal_error *err) {
  if (!st || !seg) return shoal_error_set(err, SHOAL_EINVAL, "store_segment_write: NULL argument");
  if (!store_name_valid(seg->source))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: segment source '%.80s' is not a valid name (1-63 of "
                           "[A-Za-z0-9._-], starting with a letter or digit)",
                           seg->source);
  if (!seg->rows || !seg->buf ||
      seg->len != store_segment_encoded_bytes(&seg->spec, seg->rows, seg->ends, seg->has_priority))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: the segment was not laid out by store_segment_reserve");
  int rc = check_run(st, run, err);
  if (rc) return rc;
  snprintf(seg->run, sizeof seg->run, "%s", run);
  seg->wall_time = store__wall_time();
  return STORE__CALL(st, segment_write, err, run, seg);
}

int store_segment_list(store *st, const char *run, uint64_t after, uint64_t *seqs, size_t cap,
                       size_t *n, shoal_error *err) {
  if (!st || !n || (!seqs && cap))
    return shoal_error_set(err, SHOAL_EINVAL, "store_segment_list: NULL argument");
  if (!store_name_valid(run))
    return shoal_error_set(err, SHOAL_EINVAL, "store: invalid run name '%.80s'",
                           run ? run : "(null)");
  size_t k = 0;
  int rc = STORE__CALL(st, segment_list, err, run, after, seqs, cap, &k);
  /* Nothing found: say so only when the run itself is missing. */
  if (!rc && k == 0) rc = check_run(st, run, err);
  if (!rc) *n = k;
  return rc;
}

int store_segment_read(store *st, const char *run, uint64_t seq, store_segment *seg,
                       shoal_error *err) {
  if (!st || !seg) return shoal_error_set(err, SHOAL_EINVAL, "store_segment_read: NULL argument");
  if (!store_name_valid(run))
    return shoal_error_set(err, SHOAL_EINVAL, "store: invalid run name '%.80s'",
                           run ? run : "(null)");
  return STORE__CALL(st, segment_read, err, run, seq, seg);
}
