/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/mongo_segments.c — experience segments in MongoDB (the document layout is in
 * store_segments.h): collection segments, unique index run+seq, one document per segment
 * holding its columns as binaries and the CRC of its canonical encoding.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/mongo_backend.h"

typedef struct {
  void *impl;
  mongoc_client_t *c;
  mongoc_collection_t *coll;
  const char *db;
} mop;

static mop mop_begin(void *impl) {
  mop o = {impl, NULL, NULL, NULL};
  o.c = store__mongo_pop(o.impl, &o.db);
  o.coll = mongoc_client_get_collection(o.c, o.db, "segments");
  return o;
}

static void mop_end(mop *o) {
  mongoc_collection_destroy(o->coll);
  store__mongo_push(o->impl, o->c);
}

static int merror(mop *o, shoal_error *err, const bson_error_t *be, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int merror(mop *o, shoal_error *err, const bson_error_t *be, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return store__mongo_error(o->impl, err, be, what);
}

static void append_spec(bson_t *parent, const char *key, int dtype, int ndim,
                        const int64_t *shape) {
  bson_t d, a;
  BSON_APPEND_DOCUMENT_BEGIN(parent, key, &d);
  BSON_APPEND_UTF8(&d, "dtype", store_segment_dtype_name(dtype));
  BSON_APPEND_ARRAY_BEGIN(&d, "shape", &a);
  for (int i = 0; i < ndim; i++) {
    char k[12];
    snprintf(k, sizeof k, "%d", i);
    BSON_APPEND_INT64(&a, k, shape[i]);
  }
  bson_append_array_end(&d, &a);
  bson_append_document_end(parent, &d);
}

static int ensure_index(mop *o, shoal_error *err) {
  bson_t *cmd = BCON_NEW("createIndexes", BCON_UTF8("segments"), "indexes", "[", "{", "key", "{",
                         "run", BCON_INT32(1), "seq", BCON_INT32(1), "}", "name", "run_seq",
                         "unique", BCON_BOOL(true), "}", "]");
  bson_error_t be;
  mongoc_database_t *dbh = mongoc_client_get_database(o->c, o->db);
  bool ok = mongoc_database_write_command_with_opts(dbh, cmd, NULL, NULL, &be);
  mongoc_database_destroy(dbh);
  bson_destroy(cmd);
  return ok ? 0 : merror(o, err, &be, "cannot create the index of 'segments'");
}

/* The highest seq of run, or -1 when it has none. */
static int mongo_max_seq(mop *o, const char *run, int64_t *out, shoal_error *err) {
  bson_t *filter = BCON_NEW("run", BCON_UTF8(run));
  bson_t *opts = BCON_NEW("sort", "{", "seq", BCON_INT32(-1), "}", "limit", BCON_INT64(1),
                          "projection", "{", "seq", BCON_INT32(1), "}");
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o->coll, filter, opts, NULL);
  const bson_t *d;
  *out = -1;
  bson_iter_t it;
  if (mongoc_cursor_next(cur, &d) && bson_iter_init_find(&it, d, "seq"))
    *out = bson_iter_as_int64(&it);
  bson_error_t be;
  int rc = 0;
  if (mongoc_cursor_error(cur, &be))
    rc = merror(o, err, &be, "cannot read segments of run '%s'", run);
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(filter);
  return rc;
}

int store__mongo_segment_write(void *impl, const char *run, store_segment *seg, shoal_error *err) {
  mop o = mop_begin(impl);
  int64_t max;
  int rc = mongo_max_seq(&o, run, &max, err);
  if (!rc && max < 0) rc = ensure_index(&o, err);
  const store_segment_spec *s = &seg->spec;
  size_t ob = store__seg_item_bytes(s->obs_dtype, s->obs_ndim, s->obs_shape);
  size_t ab = store__seg_item_bytes(s->act_dtype, s->act_ndim, s->act_shape);
  size_t n = seg->rows;
  for (int attempt = 0; !rc && attempt < 1000; attempt++) {
    seg->seq = (uint64_t)(max + 1 + attempt);
    store__seg_header_write(seg);
    bson_t doc, spec;
    bson_init(&doc);
    BSON_APPEND_UTF8(&doc, "run", run);
    BSON_APPEND_INT64(&doc, "seq", (int64_t)seg->seq);
    BSON_APPEND_UTF8(&doc, "source", seg->source);
    BSON_APPEND_DOUBLE(&doc, "wall_time", seg->wall_time);
    BSON_APPEND_INT64(&doc, "rows", seg->rows);
    BSON_APPEND_INT64(&doc, "ends", seg->ends);
    BSON_APPEND_INT64(&doc, "crc", seg->crc);
    BSON_APPEND_DOCUMENT_BEGIN(&doc, "spec", &spec);
    append_spec(&spec, "obs", s->obs_dtype, s->obs_ndim, s->obs_shape);
    append_spec(&spec, "action", s->act_dtype, s->act_ndim, s->act_shape);
    bson_append_document_end(&doc, &spec);
    BSON_APPEND_BINARY(&doc, "obs", BSON_SUBTYPE_BINARY, seg->obs, (uint32_t)(n * ob));
    BSON_APPEND_BINARY(&doc, "action", BSON_SUBTYPE_BINARY, seg->action, (uint32_t)(n * ab));
    BSON_APPEND_BINARY(&doc, "reward", BSON_SUBTYPE_BINARY, (const uint8_t *)seg->reward,
                       (uint32_t)(n * 4));
    BSON_APPEND_BINARY(&doc, "terminated", BSON_SUBTYPE_BINARY, seg->terminated, (uint32_t)n);
    BSON_APPEND_BINARY(&doc, "truncated", BSON_SUBTYPE_BINARY, seg->truncated, (uint32_t)n);
    if (seg->ends)
      BSON_APPEND_BINARY(&doc, "final_obs", BSON_SUBTYPE_BINARY, seg->final_obs,
                         (uint32_t)(seg->ends * ob));
    if (seg->priority)
      BSON_APPEND_BINARY(&doc, "priority", BSON_SUBTYPE_BINARY, (const uint8_t *)seg->priority,
                         (uint32_t)(n * 4));
    bson_error_t be;
    if (!mongoc_collection_insert_one(o.coll, &doc, NULL, NULL, &be)) {
      rc = merror(&o, err, &be, "cannot write segment %" PRIu64 " of run '%s'", seg->seq, run);
      bson_destroy(&doc);
      if (rc != SHOAL_EEXIST) break;
      rc = 0; /* another writer took this number: try the next one */
      continue;
    }
    bson_destroy(&doc);
    mop_end(&o);
    return 0;
  }
  mop_end(&o);
  if (!rc) rc = shoal_error_set(err, SHOAL_EIO, "store: no free segment number for run '%s'", run);
  return rc;
}

int store__mongo_segment_list(void *impl, const char *run, uint64_t after, uint64_t *out,
                              size_t cap, size_t *n, shoal_error *err) {
  mop o = mop_begin(impl);
  bson_t *filter = after == STORE_SEG_FIRST ? BCON_NEW("run", BCON_UTF8(run))
                                            : BCON_NEW("run", BCON_UTF8(run), "seq", "{", "$gt",
                                                       BCON_INT64((int64_t)after), "}");
  bson_t *opts = BCON_NEW("sort", "{", "seq", BCON_INT32(1), "}", "limit", BCON_INT64((int64_t)cap),
                          "projection", "{", "seq", BCON_INT32(1), "}");
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o.coll, filter, opts, NULL);
  const bson_t *d;
  size_t k = 0;
  while (k < cap && mongoc_cursor_next(cur, &d)) {
    bson_iter_t it;
    if (bson_iter_init_find(&it, d, "seq")) out[k++] = (uint64_t)bson_iter_as_int64(&it);
  }
  bson_error_t be;
  int rc = 0;
  if (mongoc_cursor_error(cur, &be))
    rc = merror(&o, err, &be, "cannot list segments of run '%s'", run);
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(filter);
  mop_end(&o);
  if (!rc) *n = k;
  return rc;
}

/* Reads spec.<key> {dtype, shape} of d. */
static int doc_spec(const bson_t *d, const char *key, int *dtype, int *ndim, int64_t *shape) {
  bson_iter_t it, sub, arr;
  char path[32];
  snprintf(path, sizeof path, "spec.%s", key);
  if (!bson_iter_init(&it, d) || !bson_iter_find_descendant(&it, path, &sub) ||
      !BSON_ITER_HOLDS_DOCUMENT(&sub) || !bson_iter_recurse(&sub, &arr))
    return SHOAL_EFORMAT;
  const char *dt = NULL;
  int nd = 0;
  memset(shape, 0, STORE_SEG_MAX_DIMS * sizeof *shape);
  while (bson_iter_next(&arr)) {
    if (!strcmp(bson_iter_key(&arr), "dtype") && BSON_ITER_HOLDS_UTF8(&arr))
      dt = bson_iter_utf8(&arr, NULL);
    if (!strcmp(bson_iter_key(&arr), "shape") && BSON_ITER_HOLDS_ARRAY(&arr)) {
      bson_iter_t e;
      bson_iter_recurse(&arr, &e);
      while (bson_iter_next(&e)) {
        if (nd >= STORE_SEG_MAX_DIMS) return SHOAL_EFORMAT;
        shape[nd++] = bson_iter_as_int64(&e);
      }
    }
  }
  *ndim = nd;
  return store__seg_dtype_parse(dt, dtype) ? SHOAL_EFORMAT : 0;
}

/* Copies binary field key of d (exactly want bytes) to dst. */
static int doc_bin(const bson_t *d, const char *key, void *dst, size_t want) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, d, key) || !BSON_ITER_HOLDS_BINARY(&it))
    return want ? SHOAL_EFORMAT : 0;
  bson_subtype_t sub;
  uint32_t len;
  const uint8_t *data;
  bson_iter_binary(&it, &sub, &len, &data);
  if (len != want) return SHOAL_EFORMAT;
  if (want) memcpy(dst, data, want);
  return 0;
}

int store__mongo_segment_read(void *impl, const char *run, uint64_t seq, store_segment *seg,
                              shoal_error *err) {
  mop o = mop_begin(impl);
  bson_t *filter = BCON_NEW("run", BCON_UTF8(run), "seq", BCON_INT64((int64_t)seq));
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o.coll, filter, NULL, NULL);
  const bson_t *d;
  int rc = 0, found = mongoc_cursor_next(cur, &d);
  bson_error_t be;
  store__seg_no_columns(seg);
  char where[160];
  snprintf(where, sizeof where, "segment %" PRIu64 " of run '%s' (MongoDB)", seq, run);
  if (mongoc_cursor_error(cur, &be)) {
    rc = merror(&o, err, &be, "cannot read segment %" PRIu64 " of run '%s'", seq, run);
  } else if (!found) {
    rc = shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' has no segment %" PRIu64, run, seq);
  } else {
    store_segment_spec s;
    memset(&s, 0, sizeof s);
    bson_iter_t it;
    int64_t rows = -1, ends = -1, crc = -1;
    if (bson_iter_init_find(&it, d, "rows")) rows = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, d, "ends")) ends = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, d, "crc")) crc = bson_iter_as_int64(&it);
    int has_prio = bson_iter_init_find(&it, d, "priority");
    const char *src = NULL;
    if (bson_iter_init_find(&it, d, "source") && BSON_ITER_HOLDS_UTF8(&it))
      src = bson_iter_utf8(&it, NULL);
    double wt = 0;
    if (bson_iter_init_find(&it, d, "wall_time") && BSON_ITER_HOLDS_DOUBLE(&it))
      wt = bson_iter_double(&it);
    if (doc_spec(d, "obs", &s.obs_dtype, &s.obs_ndim, s.obs_shape) ||
        doc_spec(d, "action", &s.act_dtype, &s.act_ndim, s.act_shape) || rows < 1 ||
        rows > UINT32_MAX || ends < 0 || ends > rows || crc < 0 || !src ||
        !store_segment_encoded_bytes(&s, (uint32_t)rows, (uint32_t)ends, has_prio)) {
      rc = shoal_error_set(err, SHOAL_EFORMAT, "store: %s: missing or invalid fields", where);
    } else if ((rc = store_segment_reserve(seg, &s, (uint32_t)rows, (uint32_t)ends, has_prio,
                                           err))) {
      if (rc == SHOAL_EFULL)
        rc = shoal_error_set(err, SHOAL_EFORMAT, "store: %s is too large", where);
    } else {
      size_t ob = store__seg_item_bytes(s.obs_dtype, s.obs_ndim, s.obs_shape);
      size_t ab = store__seg_item_bytes(s.act_dtype, s.act_ndim, s.act_shape);
      size_t n = (size_t)rows, k = (size_t)ends;
      const char *bad = doc_bin(d, "obs", seg->obs, n * ob)                          ? "obs"
                        : doc_bin(d, "action", seg->action, n * ab)                  ? "action"
                        : doc_bin(d, "reward", seg->reward, n * 4)                   ? "reward"
                        : doc_bin(d, "terminated", seg->terminated, n)               ? "terminated"
                        : doc_bin(d, "truncated", seg->truncated, n)                 ? "truncated"
                        : doc_bin(d, "final_obs", seg->final_obs, k * ob)            ? "final_obs"
                        : (has_prio && doc_bin(d, "priority", seg->priority, n * 4)) ? "priority"
                                                                                     : NULL;
      if (bad) {
        rc = shoal_error_set(err, SHOAL_EFORMAT,
                             "store: %s: column '%s' is missing or has the wrong size", where, bad);
      } else {
        seg->seq = seq;
        seg->wall_time = wt;
        snprintf(seg->run, sizeof seg->run, "%s", run);
        snprintf(seg->source, sizeof seg->source, "%s", src);
        store__seg_header_write(seg);
        if (seg->crc != (uint32_t)crc)
          rc = shoal_error_set(err, SHOAL_EFORMAT,
                               "store: %s: CRC mismatch (stored %08x, data %08x): damaged", where,
                               (uint32_t)crc, seg->crc);
      }
    }
    if (rc) store__seg_no_columns(seg);
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(filter);
  mop_end(&o);
  return rc;
}
