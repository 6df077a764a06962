/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/media.c — media of a run (episode recordings): argument checks and the
 * metadata document; the bytes go through the backend's media slots (file_data.c,
 * mongo_data.c).
 */
#define _GNU_SOURCE
#include <bson/bson.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/internal.h"

int store_media_name_valid(const char *name) {
  if (!name || !isalnum((unsigned char)name[0])) return 0;
  size_t n = strnlen(name, STORE_MEDIA_NAME_MAX);
  if (n >= STORE_MEDIA_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)name[i]) && !strchr("._-", name[i])) return 0;
  /* "x.json" would shadow the metadata of "x" in the file store. */
  return n < 5 || strcmp(name + n - 5, ".json") != 0;
}

void store_media_meta_init(store_media_meta *m) {
  memset(m, 0, sizeof *m);
  m->version = m->episode = m->length = m->frames = -1;
  m->ret = NAN;
}

static void meta_doc(bson_t *d, const store_media_meta *m, size_t len) {
  bson_init(d);
  BSON_APPEND_UTF8(d, "format", "shoal-media");
  BSON_APPEND_INT32(d, "version_format", 1);
  BSON_APPEND_UTF8(d, "run", m->run);
  BSON_APPEND_UTF8(d, "name", m->name);
  BSON_APPEND_UTF8(d, "content_type", m->content_type);
  BSON_APPEND_INT64(d, "version", m->version);
  BSON_APPEND_INT64(d, "episode", m->episode);
  if (isfinite(m->ret)) BSON_APPEND_DOUBLE(d, "return", m->ret);
  BSON_APPEND_INT64(d, "length", m->length);
  BSON_APPEND_INT64(d, "frames", m->frames);
  BSON_APPEND_UTF8(d, "env", m->env);
  BSON_APPEND_DOUBLE(d, "created", m->created_time > 0 ? m->created_time : store__wall_time());
  BSON_APPEND_INT64(d, "size", (int64_t)len);
}

static int64_t dint(const bson_t *d, const char *key, int64_t dflt) {
  bson_iter_t it;
  return bson_iter_init_find(&it, d, key) && BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_int64(&it)
                                                                         : dflt;
}

static void dstr(const bson_t *d, const char *key, char *out, size_t cap) {
  bson_iter_t it;
  const char *s = bson_iter_init_find(&it, d, key) && BSON_ITER_HOLDS_UTF8(&it)
                      ? bson_iter_utf8(&it, NULL)
                      : "";
  snprintf(out, cap, "%s", s);
}

static int meta_parse(const bson_t *d, store_media_meta *m, shoal_error *err) {
  store_media_meta_init(m);
  dstr(d, "run", m->run, sizeof m->run);
  dstr(d, "name", m->name, sizeof m->name);
  dstr(d, "content_type", m->content_type, sizeof m->content_type);
  dstr(d, "env", m->env, sizeof m->env);
  m->version = dint(d, "version", -1);
  m->episode = dint(d, "episode", -1);
  m->length = dint(d, "length", -1);
  m->frames = dint(d, "frames", -1);
  int64_t size = dint(d, "size", -1);
  bson_iter_t it;
  if (bson_iter_init_find(&it, d, "return") && BSON_ITER_HOLDS_NUMBER(&it))
    m->ret = bson_iter_as_double(&it);
  if (bson_iter_init_find(&it, d, "created") && BSON_ITER_HOLDS_NUMBER(&it))
    m->created_time = bson_iter_as_double(&it);
  if (!m->run[0] || !store_media_name_valid(m->name) || size < 1)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: media metadata of '%s/%s' is damaged (run, name or size)",
                           m->run, m->name);
  m->size = (uint64_t)size;
  return 0;
}

static int check_names(const char *run, const char *name, shoal_error *err) {
  if (!store_name_valid(run))
    return shoal_error_set(err, SHOAL_EINVAL, "store: bad run name '%.80s'", run ? run : "(null)");
  if (name && !store_media_name_valid(name))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: bad media name '%.140s' (1-127 of [A-Za-z0-9._-], starting "
                           "with a letter or digit, not ending in .json)",
                           name);
  return 0;
}

int store_media_put(store *st, const store_media_meta *meta, const void *bytes, size_t len,
                    shoal_error *err) {
  if (!st || !meta || !bytes || !len)
    return shoal_error_set(err, SHOAL_EINVAL, "store_media_put: NULL or empty argument");
  int rc = check_names(meta->run, meta->name, err);
  if (rc) return rc;
  store_run r;
  if ((rc = store_run_find(st, meta->run, &r, err))) return rc;
  store_run_clear(&r);
  bson_t d;
  meta_doc(&d, meta, len);
  rc = STORE__CALL(st, media_put, err, meta->run, meta->name, &d, bytes, len);
  bson_destroy(&d);
  return rc;
}

int store_media_get(store *st, const char *run, const char *name, store_media_meta *meta,
                    void **bytes, size_t *len, shoal_error *err) {
  if (!st || !bytes || !len) return shoal_error_set(err, SHOAL_EINVAL, "store_media_get: NULL");
  int rc = check_names(run, name, err);
  if (rc) return rc;
  bson_t d;
  void *b = NULL;
  size_t n = 0;
  if ((rc = STORE__CALL(st, media_get, err, run, name, &d, &b, &n))) return rc;
  store_media_meta m;
  rc = meta_parse(&d, &m, err);
  bson_destroy(&d);
  if (!rc && m.size != n)
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "store: media '%s' of run '%s' holds %zu bytes, its metadata says %llu "
                         "(damaged)",
                         name, run, n, (unsigned long long)m.size);
  if (rc) {
    free(b);
    return rc;
  }
  if (meta) *meta = m;
  *bytes = b;
  *len = n;
  return 0;
}

static int cmp_media(const void *a, const void *b) {
  return strcmp(((const store_media_meta *)a)->name, ((const store_media_meta *)b)->name);
}

int store_media_list(store *st, const char *run, store_media_meta **out, size_t *n,
                     shoal_error *err) {
  if (!st || !out || !n) return shoal_error_set(err, SHOAL_EINVAL, "store_media_list: NULL");
  int rc = check_names(run, NULL, err);
  if (rc) return rc;
  store_run r;
  if ((rc = store_run_find(st, run, &r, err))) return rc;
  store_run_clear(&r);
  bson_t **docs = NULL;
  size_t k = 0;
  if ((rc = STORE__CALL(st, media_list, err, run, &docs, &k))) return rc;
  store_media_meta *arr = k ? calloc(k, sizeof *arr) : NULL;
  if (k && !arr) rc = shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  for (size_t i = 0; i < k; i++) {
    if (!rc) rc = meta_parse(docs[i], &arr[i], err);
    bson_destroy(docs[i]);
  }
  free(docs);
  if (rc) {
    free(arr);
    return rc;
  }
  if (k) qsort(arr, k, sizeof *arr, cmp_media);
  *out = arr;
  *n = k;
  return 0;
}
