/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/dataset.c — datasets in the store: argument checks, the streaming writer, the
 * manifest (built and checked here, stored by the backend's dataset slots: file_data.c,
 * mongo_data.c) and the checked chunk read. The layout on each backend is described in
 * store_data.h.
 *
 * The manifest is the commit point: chunks are written first, under an upload id, and
 * the dataset exists once its manifest does. Readers trust nothing they read: the
 * manifest is checked for consistency (counts, sizes, one CRC per chunk) and each
 * chunk against it.
 */
#define _GNU_SOURCE
#include <bson/bson.h>
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/internal.h"

/* ---- dtypes and fields ----------------------------------------------------------- */

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {{NULL, 0},  {"u8", 1},  {"i8", 1},  {"i16", 2},
              {"i32", 4}, {"i64", 8}, {"f32", 4}, {"f64", 8}};
enum { N_DTYPES = sizeof dtypes / sizeof dtypes[0] };

const char *store_dtype_name(int dtype) {
  return dtype > 0 && dtype < N_DTYPES ? dtypes[dtype].name : NULL;
}
size_t store_dtype_size(int dtype) {
  return dtype > 0 && dtype < N_DTYPES ? dtypes[dtype].size : 0;
}
int store_dtype_parse(const char *s) {
  for (int i = 1; s && i < N_DTYPES; i++)
    if (strcmp(s, dtypes[i].name) == 0) return i;
  return 0;
}

static int field_name_ok(const char *s) {
  size_t n = strnlen(s, STORE_FIELD_NAME_MAX);
  if (n == 0 || n >= STORE_FIELD_NAME_MAX || !isalnum((unsigned char)s[0])) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i])) return 0;
  return 1;
}

void store_dataset_info_clear(store_dataset_info *info) {
  if (!info) return;
  free(info->crc);
  memset(info, 0, sizeof *info);
}

void store_dataset_infos_free(store_dataset_info *infos, size_t n) {
  for (size_t i = 0; infos && i < n; i++) store_dataset_info_clear(&infos[i]);
  free(infos);
}

const store_dataset_field *store_dataset_field_find(const store_dataset_info *info,
                                                    const char *name) {
  for (int i = 0; info && name && i < info->nfields; i++)
    if (strcmp(info->fields[i].name, name) == 0) return &info->fields[i];
  return NULL;
}

/* Checks the fields and fills in bytes, offset and the record size. what names the
 * dataset in messages. */
static int fields_layout(const char *what, store_dataset_field *f, int nfields,
                         size_t *record_bytes, shoal_error *err) {
  if (nfields < 1 || nfields > STORE_DATASET_FIELDS_MAX)
    return shoal_error_set(err, SHOAL_EINVAL, "store: dataset '%s': %d fields (1..%d allowed)",
                           what, nfields, STORE_DATASET_FIELDS_MAX);
  size_t off = 0;
  for (int i = 0; i < nfields; i++) {
    if (!field_name_ok(f[i].name))
      return shoal_error_set(err, SHOAL_EINVAL,
                             "store: dataset '%s': field %d has a bad name '%.40s' (1-31 of "
                             "[A-Za-z0-9._-], starting with a letter or digit)",
                             what, i, f[i].name);
    for (int j = 0; j < i; j++)
      if (strcmp(f[i].name, f[j].name) == 0)
        return shoal_error_set(err, SHOAL_EINVAL, "store: dataset '%s': field '%s' given twice",
                               what, f[i].name);
    size_t es = store_dtype_size(f[i].dtype);
    if (!es)
      return shoal_error_set(err, SHOAL_EINVAL, "store: dataset '%s': field '%s' has dtype %d",
                             what, f[i].name, f[i].dtype);
    if (f[i].ndim < 0 || f[i].ndim > STORE_DATASET_NDIM_MAX)
      return shoal_error_set(err, SHOAL_EINVAL, "store: dataset '%s': field '%s' has ndim %d", what,
                             f[i].name, f[i].ndim);
    size_t n = 1;
    for (int d = 0; d < f[i].ndim; d++) {
      if (f[i].shape[d] < 1 || f[i].shape[d] > (int64_t)STORE_DATASET_CHUNK_MAX ||
          n * (size_t)f[i].shape[d] > STORE_DATASET_CHUNK_MAX)
        return shoal_error_set(err, SHOAL_EINVAL,
                               "store: dataset '%s': field '%s' has a bad size %" PRId64
                               " in dimension %d",
                               what, f[i].name, f[i].shape[d], d);
      n *= (size_t)f[i].shape[d];
    }
    for (int d = f[i].ndim; d < STORE_DATASET_NDIM_MAX; d++) f[i].shape[d] = 0;
    f[i].bytes = n * es;
    f[i].offset = off;
    off += f[i].bytes;
    if (off > STORE_DATASET_CHUNK_MAX)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "store: dataset '%s': a record of %zu bytes is "
                             "larger than a chunk may be",
                             what, off);
  }
  *record_bytes = off;
  return 0;
}

static uint32_t chunk_records_of(const store_dataset_info *info, uint32_t c) {
  uint64_t first = (uint64_t)c * info->chunk_records;
  uint64_t left = info->records - first;
  return left < info->chunk_records ? (uint32_t)left : info->chunk_records;
}

/* ---- the manifest ---------------------------------------------------------------- */

static void manifest_build(bson_t *doc, const store_dataset_info *info) {
  bson_init(doc);
  BSON_APPEND_UTF8(doc, "format", "shoal-dataset");
  BSON_APPEND_INT32(doc, "version", 1);
  BSON_APPEND_UTF8(doc, "name", info->name);
  BSON_APPEND_UTF8(doc, "upload", info->upload);
  BSON_APPEND_INT64(doc, "records", (int64_t)info->records);
  BSON_APPEND_INT64(doc, "chunk_records", info->chunk_records);
  BSON_APPEND_INT64(doc, "chunks", info->chunks);
  BSON_APPEND_INT64(doc, "record_bytes", (int64_t)info->record_bytes);
  BSON_APPEND_DOUBLE(doc, "created", info->created_time);
  BSON_APPEND_UTF8(doc, "source", info->source);
  bson_t arr, fd, sh;
  BSON_APPEND_ARRAY_BEGIN(doc, "fields", &arr);
  for (int i = 0; i < info->nfields; i++) {
    char k[16];
    const char *key;
    bson_uint32_to_string((uint32_t)i, &key, k, sizeof k);
    const store_dataset_field *f = &info->fields[i];
    BSON_APPEND_DOCUMENT_BEGIN(&arr, key, &fd);
    BSON_APPEND_UTF8(&fd, "name", f->name);
    BSON_APPEND_UTF8(&fd, "dtype", store_dtype_name(f->dtype));
    BSON_APPEND_ARRAY_BEGIN(&fd, "shape", &sh);
    for (int d = 0; d < f->ndim; d++) {
      char kk[16];
      const char *dk;
      bson_uint32_to_string((uint32_t)d, &dk, kk, sizeof kk);
      BSON_APPEND_INT64(&sh, dk, f->shape[d]);
    }
    bson_append_array_end(&fd, &sh);
    bson_append_document_end(&arr, &fd);
  }
  bson_append_array_end(doc, &arr);
  BSON_APPEND_ARRAY_BEGIN(doc, "crc", &arr);
  for (uint32_t c = 0; c < info->chunks; c++) {
    char k[16];
    const char *key;
    bson_uint32_to_string(c, &key, k, sizeof k);
    BSON_APPEND_INT64(&arr, key, info->crc[c]);
  }
  bson_append_array_end(doc, &arr);
}

static int bad_manifest(shoal_error *err, const char *name, const char *what) {
  return shoal_error_set(err, SHOAL_EFORMAT, "store: dataset '%s': damaged manifest: %s", name,
                         what);
}

/* The integer at it: an int32, an int64, or a double with an integral value in int64's
 * range (JSON numbers may come back as doubles); 0 for anything else, so no value is
 * silently truncated or converted out of range (undefined in C). */
static int iter_int_at(const bson_iter_t *it, int64_t *out) {
  if (BSON_ITER_HOLDS_INT32(it) || BSON_ITER_HOLDS_INT64(it)) {
    *out = bson_iter_as_int64(it);
    return 1;
  }
  if (BSON_ITER_HOLDS_DOUBLE(it)) {
    double v = bson_iter_double(it);
    if (!(v >= -0x1p63 && v < 0x1p63) || v != floor(v)) return 0;
    *out = (int64_t)v;
    return 1;
  }
  return 0;
}

static int iter_int(const bson_t *d, const char *key, int64_t *out) {
  bson_iter_t it;
  return bson_iter_init_find(&it, d, key) && iter_int_at(&it, out);
}

static const char *iter_str(const bson_t *d, const char *key) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, d, key) && BSON_ITER_HOLDS_UTF8(&it))
    return bson_iter_utf8(&it, NULL);
  return NULL;
}

static int sub_doc(const bson_t *d, const char *key, int array, bson_t *out) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, d, key)) return 0;
  const uint8_t *data;
  uint32_t len;
  if (array && BSON_ITER_HOLDS_ARRAY(&it))
    bson_iter_array(&it, &len, &data);
  else if (!array && BSON_ITER_HOLDS_DOCUMENT(&it))
    bson_iter_document(&it, &len, &data);
  else
    return 0;
  return bson_init_static(out, data, len);
}

static int manifest_parse(const char *name, const bson_t *doc, store_dataset_info *out,
                          shoal_error *err) {
  store_dataset_info info;
  memset(&info, 0, sizeof info);
  const char *fmt = iter_str(doc, "format"), *nm = iter_str(doc, "name");
  int64_t version = 0, records, chunk_records, chunks, record_bytes;
  if (!fmt || strcmp(fmt, "shoal-dataset"))
    return bad_manifest(err, name, "format is not \"shoal-dataset\"");
  if (!iter_int(doc, "version", &version) || version != 1) {
    char m[96];
    snprintf(m, sizeof m, "version %" PRId64 " (this shoal reads version 1)", version);
    return bad_manifest(err, name, m);
  }
  if (!nm || strcmp(nm, name)) return bad_manifest(err, name, "it names another dataset");
  if (!iter_int(doc, "records", &records) || !iter_int(doc, "chunk_records", &chunk_records) ||
      !iter_int(doc, "chunks", &chunks) || !iter_int(doc, "record_bytes", &record_bytes))
    return bad_manifest(err, name, "records, chunk_records, chunks or record_bytes missing");
  if (records < 1 || chunk_records < 1 || chunk_records > UINT32_MAX || chunks < 1 ||
      chunks > UINT32_MAX ||
      chunks != (records - 1) / chunk_records + 1) /* ceil, without overflow */
    return bad_manifest(err, name, "record and chunk counts disagree");
  snprintf(info.name, sizeof info.name, "%s", name);
  const char *up = iter_str(doc, "upload"), *src = iter_str(doc, "source");
  snprintf(info.upload, sizeof info.upload, "%s", up ? up : "");
  snprintf(info.source, sizeof info.source, "%s", src ? src : "");
  bson_iter_t it;
  if (bson_iter_init_find(&it, doc, "created") && BSON_ITER_HOLDS_NUMBER(&it))
    info.created_time = bson_iter_as_double(&it);
  info.records = (uint64_t)records;
  info.chunk_records = (uint32_t)chunk_records;
  info.chunks = (uint32_t)chunks;

  bson_t fields;
  if (!sub_doc(doc, "fields", 1, &fields)) return bad_manifest(err, name, "no fields array");
  bson_iter_t fi;
  bson_iter_init(&fi, &fields);
  while (bson_iter_next(&fi)) {
    if (info.nfields == STORE_DATASET_FIELDS_MAX || !BSON_ITER_HOLDS_DOCUMENT(&fi))
      return bad_manifest(err, name, "too many fields, or a field that is not a document");
    const uint8_t *data;
    uint32_t len;
    bson_t fd, sh;
    bson_iter_document(&fi, &len, &data);
    if (!bson_init_static(&fd, data, len)) return bad_manifest(err, name, "a corrupt field");
    store_dataset_field *f = &info.fields[info.nfields++];
    const char *fname = iter_str(&fd, "name"), *dt = iter_str(&fd, "dtype");
    if (!fname || !dt) return bad_manifest(err, name, "a field without name or dtype");
    snprintf(f->name, sizeof f->name, "%s", fname);
    if (!(f->dtype = store_dtype_parse(dt))) return bad_manifest(err, name, "an unknown dtype");
    if (!sub_doc(&fd, "shape", 1, &sh)) return bad_manifest(err, name, "a field without shape");
    bson_iter_t si;
    bson_iter_init(&si, &sh);
    while (bson_iter_next(&si)) {
      int64_t v;
      if (f->ndim == STORE_DATASET_NDIM_MAX || !iter_int_at(&si, &v))
        return bad_manifest(err, name, "a bad shape");
      f->shape[f->ndim++] = v;
    }
  }
  shoal_error ferr = {0};
  if (fields_layout(name, info.fields, info.nfields, &info.record_bytes, &ferr))
    return bad_manifest(err, name, ferr.msg);
  if ((int64_t)info.record_bytes != record_bytes)
    return bad_manifest(err, name, "record_bytes disagrees with the fields");
  if ((uint64_t)info.chunk_records * info.record_bytes > STORE_DATASET_CHUNK_MAX)
    return bad_manifest(err, name, "chunks larger than the limit");

  bson_t crcs;
  if (!sub_doc(doc, "crc", 1, &crcs)) return bad_manifest(err, name, "no crc array");
  if (bson_count_keys(&crcs) != info.chunks)
    return bad_manifest(err, name, "the crc array does not hold one CRC per chunk");
  info.crc = malloc(info.chunks * sizeof *info.crc);
  if (!info.crc) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  bson_iter_t ci;
  bson_iter_init(&ci, &crcs);
  for (uint32_t c = 0; bson_iter_next(&ci); c++) {
    int64_t v = -1;
    if (!iter_int_at(&ci, &v) || v < 0 || v > UINT32_MAX) {
      free(info.crc);
      return bad_manifest(err, name, "a CRC that is not a 32-bit number");
    }
    info.crc[c] = (uint32_t)v;
  }
  *out = info;
  return 0;
}

/* ---- writing --------------------------------------------------------------------- */

struct store_dataset_writer {
  store *st; /* borrowed */
  void *upload;
  store_dataset_info info; /* records and chunks grow as chunks are written */
  uint8_t *buf;            /* (chunk_records * record_bytes) */
  uint32_t fill;           /* records in buf */
  uint32_t crc_cap;
  int failed;
};

int store_dataset_create(store *st, const char *name, const store_dataset_field *fields,
                         int nfields, uint32_t chunk_records, const char *source,
                         store_dataset_writer **out, shoal_error *err) {
  if (!st || !out || !fields)
    return shoal_error_set(err, SHOAL_EINVAL, "store_dataset_create: NULL argument");
  if (!store_name_valid(name))
    return shoal_error_set(err, SHOAL_EINVAL, "store: bad dataset name '%.80s'",
                           name ? name : "(null)");
  store_dataset_field f[STORE_DATASET_FIELDS_MAX];
  size_t rb;
  if (nfields >= 1 && nfields <= STORE_DATASET_FIELDS_MAX) memcpy(f, fields, nfields * sizeof *f);
  int rc = fields_layout(name, f, nfields, &rb, err);
  if (rc) return rc;
  if (chunk_records < 1 || (uint64_t)chunk_records * rb > STORE_DATASET_CHUNK_MAX)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: dataset '%s': %u records of %zu bytes per chunk: a chunk must "
                           "hold 1 or more records and at most %zu bytes",
                           name, chunk_records, rb, STORE_DATASET_CHUNK_MAX);
  store_dataset_info probe;
  rc = store_dataset_info_get(st, name, &probe, NULL);
  if (rc == 0 || rc == SHOAL_EFORMAT) {
    if (!rc) store_dataset_info_clear(&probe);
    return shoal_error_set(err, SHOAL_EEXIST, "store: dataset '%s' exists in %s", name,
                           store_uri(st));
  }
  store_dataset_writer *w = calloc(1, sizeof *w);
  if (!w) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  w->st = st;
  snprintf(w->info.name, sizeof w->info.name, "%s", name);
  snprintf(w->info.source, sizeof w->info.source, "%s", source ? source : "");
  memcpy(w->info.fields, f, sizeof f);
  w->info.nfields = nfields;
  w->info.record_bytes = rb;
  w->info.chunk_records = chunk_records;
  w->buf = malloc((size_t)chunk_records * rb);
  if (!w->buf) {
    free(w);
    return shoal_error_set(err, SHOAL_ENOMEM, "store: dataset '%s': out of memory for a chunk",
                           name);
  }
  if ((rc = STORE__CALL(st, dataset_begin, err, name, &w->upload))) {
    free(w->buf);
    free(w);
    return rc;
  }
  snprintf(w->info.upload, sizeof w->info.upload, "%s", st->be->dataset_upload_id(w->upload));
  *out = w;
  return 0;
}

static int flush_chunk(store_dataset_writer *w, shoal_error *err) {
  if (!w->fill) return 0;
  if (w->info.chunks == w->crc_cap) {
    uint32_t nc = w->crc_cap ? w->crc_cap * 2 : 64;
    uint32_t *p = realloc(w->info.crc, nc * sizeof *p);
    if (!p) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
    w->info.crc = p, w->crc_cap = nc;
  }
  size_t len = (size_t)w->fill * w->info.record_bytes;
  uint32_t crc = store__crc32(w->buf, len);
  int rc = STORE__CALL(w->st, dataset_chunk_put, err, w->upload, w->info.chunks, w->fill, crc,
                       w->buf, len);
  if (rc) return rc;
  w->info.crc[w->info.chunks++] = crc;
  w->info.records += w->fill;
  w->fill = 0;
  return 0;
}

int store_dataset_write(store_dataset_writer *w, const void *records, size_t n, shoal_error *err) {
  if (!w || (!records && n))
    return shoal_error_set(err, SHOAL_EINVAL, "store_dataset_write: NULL argument");
  if (w->failed)
    return shoal_error_set(err, SHOAL_ESTATE, "store: dataset '%s': an earlier write failed",
                           w->info.name);
  if (w->info.chunks >= UINT32_MAX - 1)
    return shoal_error_set(err, SHOAL_ERANGE, "store: dataset '%s': too many chunks", w->info.name);
  const uint8_t *p = records;
  while (n) {
    size_t take = w->info.chunk_records - w->fill;
    if (take > n) take = n;
    memcpy(w->buf + (size_t)w->fill * w->info.record_bytes, p, take * w->info.record_bytes);
    w->fill += (uint32_t)take;
    p += take * w->info.record_bytes;
    n -= take;
    if (w->fill == w->info.chunk_records) {
      int rc = flush_chunk(w, err);
      if (rc) {
        w->failed = 1;
        return rc;
      }
    }
  }
  return 0;
}

static void writer_free(store_dataset_writer *w) {
  free(w->buf);
  free(w->info.crc);
  free(w);
}

void store_dataset_abort(store_dataset_writer *w) {
  if (!w) return;
  w->st->be->dataset_abort(w->st->impl, w->upload);
  writer_free(w);
}

int store_dataset_commit(store_dataset_writer *w, store_dataset_info *info, shoal_error *err) {
  if (!w) return shoal_error_set(err, SHOAL_EINVAL, "store_dataset_commit: NULL writer");
  int rc = w->failed ? shoal_error_set(err, SHOAL_ESTATE,
                                       "store: dataset '%s': an earlier write failed", w->info.name)
                     : flush_chunk(w, err);
  if (!rc && w->info.records == 0)
    rc = shoal_error_set(err, SHOAL_EINVAL, "store: dataset '%s' has no records", w->info.name);
  if (rc) {
    store_dataset_abort(w);
    return rc;
  }
  w->info.created_time = store__wall_time();
  bson_t doc;
  manifest_build(&doc, &w->info);
  /* frees the upload, also on error */
  rc = STORE__CALL(w->st, dataset_commit, err, w->upload, &doc);
  bson_destroy(&doc);
  if (!rc && info) {
    *info = w->info;
    w->info.crc = NULL;
  }
  free(w->buf);
  free(w->info.crc);
  free(w);
  return rc;
}

/* ---- reading --------------------------------------------------------------------- */

int store_dataset_info_get(store *st, const char *name, store_dataset_info *out, shoal_error *err) {
  if (!st || !out) return shoal_error_set(err, SHOAL_EINVAL, "store_dataset_info_get: NULL");
  if (!store_name_valid(name))
    return shoal_error_set(err, SHOAL_EINVAL, "store: bad dataset name '%.80s'",
                           name ? name : "(null)");
  bson_t doc;
  int rc = STORE__CALL(st, dataset_manifest_get, err, name, &doc);
  if (rc) return rc;
  rc = manifest_parse(name, &doc, out, err);
  bson_destroy(&doc);
  return rc;
}

/* The file backend's path (manifest.json through libbson's JSON reader and writer) on a
 * buffer, for tests/fuzz/fuzz_manifest.c, which must not include libbson itself. */
int store__dataset_manifest_from_json(const char *name, const char *json, size_t len,
                                      store_dataset_info *out, shoal_error *err) {
  bson_t doc;
  bson_error_t be;
  if (!bson_init_from_json(&doc, json, (ssize_t)len, &be))
    return shoal_error_set(err, SHOAL_EFORMAT, "store: dataset '%s': damaged manifest: %s", name,
                           be.message);
  int rc = manifest_parse(name, &doc, out, err);
  bson_destroy(&doc);
  return rc;
}

char *store__dataset_manifest_to_json(const store_dataset_info *info, size_t *len) {
  bson_t doc;
  manifest_build(&doc, info);
  size_t n = 0;
  char *txt = bson_as_relaxed_extended_json(&doc, &n);
  bson_destroy(&doc);
  char *out = txt ? malloc(n + 1) : NULL; /* the caller's free(), not bson_free() */
  if (out) memcpy(out, txt, n + 1), *len = n;
  bson_free(txt);
  return out;
}

static int cmp_info(const void *a, const void *b) {
  return strcmp(((const store_dataset_info *)a)->name, ((const store_dataset_info *)b)->name);
}

int store_dataset_list(store *st, store_dataset_info **out, size_t *n, shoal_error *err) {
  if (!st || !out || !n) return shoal_error_set(err, SHOAL_EINVAL, "store_dataset_list: NULL");
  char(*names)[STORE_NAME_MAX] = NULL;
  size_t k = 0;
  int rc = STORE__CALL(st, dataset_names, err, &names, &k);
  if (rc) return rc;
  store_dataset_info *arr = k ? calloc(k, sizeof *arr) : NULL;
  if (k && !arr) rc = shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  size_t got = 0;
  for (size_t i = 0; !rc && i < k; i++) {
    rc = store_dataset_info_get(st, names[i], &arr[got], err);
    if (rc == SHOAL_ENOENT)
      rc = 0; /* removed since the listing */
    else if (!rc)
      got++;
  }
  free(names);
  if (rc) {
    store_dataset_infos_free(arr, got);
    return rc;
  }
  if (got) qsort(arr, got, sizeof *arr, cmp_info);
  if (!got) {
    free(arr);
    arr = NULL;
  }
  *out = arr;
  *n = got;
  return 0;
}

int store_dataset_chunk_read(store *st, const store_dataset_info *info, uint32_t c, void *buf,
                             size_t cap, uint32_t *records, shoal_error *err) {
  if (!st || !info || !buf)
    return shoal_error_set(err, SHOAL_EINVAL, "store_dataset_chunk_read: NULL argument");
  if (c >= info->chunks || !info->crc)
    return shoal_error_set(err, SHOAL_ERANGE, "store: dataset '%s' has no chunk %u (%u chunks)",
                           info->name, c, info->chunks);
  uint32_t want_n = chunk_records_of(info, c);
  size_t want_len = (size_t)want_n * info->record_bytes;
  if (cap < want_len)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: dataset '%s' chunk %u: %zu bytes do not fit a %zu-byte buffer",
                           info->name, c, want_len, cap);
  size_t len = 0;
  uint32_t n = 0, crc = 0;
  int rc = STORE__CALL(st, dataset_chunk_get, err, info->name, info->upload, c, buf, cap, &len, &n,
                       &crc);
  if (rc) return rc;
  if (n != want_n || len != want_len)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: dataset '%s' chunk %u of %u: holds %u records in %zu bytes, "
                           "the manifest says %u in %zu (damaged or from another dataset)",
                           info->name, c, info->chunks, n, len, want_n, want_len);
  uint32_t got = store__crc32(buf, len);
  if (crc != info->crc[c] || got != info->crc[c])
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: dataset '%s' chunk %u of %u: CRC-32 of the data is 0x%08x, "
                           "stored with it 0x%08x, the manifest says 0x%08x (damaged)",
                           info->name, c, info->chunks, got, crc, info->crc[c]);
  if (records) *records = n;
  return 0;
}

int store_dataset_delete(store *st, const char *name, shoal_error *err) {
  if (!st) return shoal_error_set(err, SHOAL_EINVAL, "store_dataset_delete: NULL store");
  if (!store_name_valid(name))
    return shoal_error_set(err, SHOAL_EINVAL, "store: bad dataset name '%.80s'",
                           name ? name : "(null)");
  return STORE__CALL(st, dataset_delete, err, name);
}
