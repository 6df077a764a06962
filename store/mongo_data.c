/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/mongo_data.c — datasets and media in MongoDB (libmongoc 1.x).
 *
 *   datasets        {_id: NAME, upload, manifest: {...}}          the commit point
 *   dataset_chunks  {dataset, upload, chunk, records, crc, data: binary}
 *                   unique index dataset+upload+chunk
 *   media           a GridFS bucket (media.files / media.chunks): filename "<run>/<name>",
 *                   metadata {run, name, content_type, version, episode, return, length,
 *                   frames, env, created, size}; unique index metadata.run+metadata.name
 *
 * Chunks are written under an upload id (a fresh ObjectId) and the dataset exists once
 * its datasets document is inserted; the unique _id makes two writers of one name
 * race safely (the loser removes its chunks). A chunk is one document (a chunk's
 * payload is at most STORE_DATASET_CHUNK_MAX, under the 16 MB document limit).
 */
#define _GNU_SOURCE
#include <bson/bson.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/mongo_backend.h"

enum { MEDIA_CHUNK_BYTES = 1 << 20 };

typedef struct conn {
  void *impl;
  mongoc_client_t *c;
  const char *db;
} conn;

static conn conn_begin(void *impl) {
  conn k = {impl, NULL, NULL};
  k.c = store__mongo_pop(impl, &k.db);
  return k;
}

static void conn_end(conn *k) { store__mongo_push(k->impl, k->c); }

static mongoc_collection_t *coll(conn *k, const char *name) {
  return mongoc_client_get_collection(k->c, k->db, name);
}

/* A driver or server error as a shoal error (mongo.c's mapping: a duplicate key is
 * SHOAL_EEXIST, the network SHOAL_ENET; credentials scrubbed, the URI redacted). */
static int herr(conn *k, shoal_error *err, const bson_error_t *be, const char *what) {
  return store__mongo_error(k->impl, err, be, what);
}

static int ensure_index(conn *k, const char *collection, bson_t *keys, const char *name,
                        shoal_error *err) {
  bson_t cmd, arr, ix;
  bson_init(&cmd);
  BSON_APPEND_UTF8(&cmd, "createIndexes", collection);
  BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
  BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &ix);
  BSON_APPEND_DOCUMENT(&ix, "key", keys);
  BSON_APPEND_UTF8(&ix, "name", name);
  BSON_APPEND_BOOL(&ix, "unique", true);
  bson_append_document_end(&arr, &ix);
  bson_append_array_end(&cmd, &arr);
  mongoc_database_t *db = mongoc_client_get_database(k->c, k->db);
  bson_error_t be;
  int rc = 0;
  if (!mongoc_database_write_command_with_opts(db, &cmd, NULL, NULL, &be))
    rc = herr(k, err, &be, "cannot create an index");
  mongoc_database_destroy(db);
  bson_destroy(&cmd);
  bson_destroy(keys);
  return rc;
}

/* ---- datasets ----------------------------------------------------------------------- */

typedef struct upload {
  void *impl;
  char name[STORE_NAME_MAX];
  char id[25]; /* an ObjectId in hex */
} upload;

int store__mongo_dataset_begin(void *impl, const char *name, void **out, shoal_error *err) {
  conn k = conn_begin(impl);
  int rc = ensure_index(
      &k, "dataset_chunks",
      BCON_NEW("dataset", BCON_INT32(1), "upload", BCON_INT32(1), "chunk", BCON_INT32(1)),
      "dataset_upload_chunk", err);
  conn_end(&k);
  if (rc) return rc;
  upload *u = calloc(1, sizeof *u);
  if (!u) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  bson_oid_t oid;
  bson_oid_init(&oid, NULL);
  bson_oid_to_string(&oid, u->id);
  u->impl = impl;
  snprintf(u->name, sizeof u->name, "%s", name);
  *out = u;
  return 0;
}

const char *store__mongo_dataset_upload_id(void *up) { return ((upload *)up)->id; }

int store__mongo_dataset_chunk_put(void *impl, void *up, uint32_t c, uint32_t records, uint32_t crc,
                                   const void *bytes, size_t len, shoal_error *err) {
  upload *u = up;
  conn k = conn_begin(impl);
  mongoc_collection_t *col = coll(&k, "dataset_chunks");
  bson_t doc;
  bson_init(&doc);
  BSON_APPEND_UTF8(&doc, "dataset", u->name);
  BSON_APPEND_UTF8(&doc, "upload", u->id);
  BSON_APPEND_INT64(&doc, "chunk", c);
  BSON_APPEND_INT64(&doc, "records", records);
  BSON_APPEND_INT64(&doc, "crc", crc);
  BSON_APPEND_BINARY(&doc, "data", BSON_SUBTYPE_BINARY, bytes, (uint32_t)len);
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_insert_one(col, &doc, NULL, NULL, &be)) {
    char what[160];
    snprintf(what, sizeof what, "cannot write chunk %u of dataset '%s'", c, u->name);
    rc = herr(&k, err, &be, what);
  }
  bson_destroy(&doc);
  mongoc_collection_destroy(col);
  conn_end(&k);
  return rc;
}

static void delete_chunks(conn *k, const char *name, const char *upload_id) {
  mongoc_collection_t *col = coll(k, "dataset_chunks");
  bson_t *sel = BCON_NEW("dataset", BCON_UTF8(name), "upload", BCON_UTF8(upload_id));
  bson_error_t be;
  /* Left-over chunks only cost space: no dataset document names them. */
  (void)mongoc_collection_delete_many(col, sel, NULL, NULL, &be);
  bson_destroy(sel);
  mongoc_collection_destroy(col);
}

void store__mongo_dataset_abort(void *impl, void *up) {
  upload *u = up;
  if (!u) return;
  conn k = conn_begin(impl);
  delete_chunks(&k, u->name, u->id);
  conn_end(&k);
  free(u);
}

int store__mongo_dataset_commit(void *impl, void *up, const bson_t *manifest, shoal_error *err) {
  upload *u = up;
  conn k = conn_begin(impl);
  mongoc_collection_t *col = coll(&k, "datasets");
  bson_t doc;
  bson_init(&doc);
  BSON_APPEND_UTF8(&doc, "_id", u->name);
  BSON_APPEND_UTF8(&doc, "upload", u->id);
  BSON_APPEND_DOCUMENT(&doc, "manifest", manifest);
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_insert_one(col, &doc, NULL, NULL, &be)) {
    rc = herr(&k, err, &be, "cannot commit a dataset");
    if (rc == SHOAL_EEXIST) shoal_error_set(err, rc, "store: dataset '%s' exists", u->name);
  }
  bson_destroy(&doc);
  mongoc_collection_destroy(col);
  conn_end(&k);
  if (rc)
    store__mongo_dataset_abort(impl, u);
  else
    free(u);
  return rc;
}

/* The datasets document of name into *out (bson_init'ed when *found). */
static int find_dataset(conn *k, const char *name, bson_t *out, int *found, shoal_error *err) {
  mongoc_collection_t *col = coll(k, "datasets");
  bson_t *f = BCON_NEW("_id", BCON_UTF8(name));
  bson_t *opts = BCON_NEW("limit", BCON_INT64(1));
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(col, f, opts, NULL);
  const bson_t *d;
  bson_error_t be;
  int rc = 0;
  *found = 0;
  if (mongoc_cursor_next(cur, &d)) {
    bson_copy_to(d, out);
    *found = 1;
  } else if (mongoc_cursor_error(cur, &be)) {
    rc = herr(k, err, &be, "cannot look up a dataset");
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(f);
  mongoc_collection_destroy(col);
  return rc;
}

int store__mongo_dataset_manifest_get(void *impl, const char *name, bson_t *out, shoal_error *err) {
  conn k = conn_begin(impl);
  bson_t d;
  int found;
  int rc = find_dataset(&k, name, &d, &found, err);
  if (!rc && !found) rc = shoal_error_set(err, SHOAL_ENOENT, "store: no dataset '%s'", name);
  if (!rc) {
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;
    bson_t m;
    if (bson_iter_init_find(&it, &d, "manifest") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
      bson_iter_document(&it, &len, &data);
      if (bson_init_static(&m, data, len))
        bson_copy_to(&m, out);
      else
        rc = 1;
    } else {
      rc = 1;
    }
    if (rc)
      rc = shoal_error_set(err, SHOAL_EFORMAT,
                           "store: dataset '%s': damaged manifest: its datasets document has no "
                           "manifest",
                           name);
  }
  if (found) bson_destroy(&d);
  conn_end(&k);
  return rc;
}

int store__mongo_dataset_names(void *impl, char (**names)[STORE_NAME_MAX], size_t *n,
                               shoal_error *err) {
  conn k = conn_begin(impl);
  mongoc_collection_t *col = coll(&k, "datasets");
  bson_t f;
  bson_init(&f);
  bson_t *opts = BCON_NEW("projection", "{", "_id", BCON_INT32(1), "}");
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(col, &f, opts, NULL);
  char(*arr)[STORE_NAME_MAX] = NULL;
  size_t k2 = 0, cap = 0;
  const bson_t *d;
  int rc = 0;
  while (!rc && mongoc_cursor_next(cur, &d)) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, d, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) continue;
    const char *s = bson_iter_utf8(&it, NULL);
    if (!store_name_valid(s)) continue;
    if ((rc = store__grow((void **)&arr, &cap, k2, sizeof *arr)))
      shoal_error_set(err, rc, "store: out of memory");
    else
      memcpy(arr[k2++], s, strlen(s) + 1); /* valid: < STORE_NAME_MAX */
  }
  bson_error_t be;
  if (!rc && mongoc_cursor_error(cur, &be)) rc = herr(&k, err, &be, "cannot list datasets");
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(&f);
  mongoc_collection_destroy(col);
  conn_end(&k);
  if (rc) {
    free(arr);
    return rc;
  }
  *names = arr, *n = k2;
  return 0;
}

int store__mongo_dataset_chunk_get(void *impl, const char *name, const char *upload_id, uint32_t c,
                                   void *buf, size_t cap, size_t *len, uint32_t *records,
                                   uint32_t *crc, shoal_error *err) {
  conn k = conn_begin(impl);
  mongoc_collection_t *col = coll(&k, "dataset_chunks");
  bson_t *f =
      BCON_NEW("dataset", BCON_UTF8(name), "upload", BCON_UTF8(upload_id), "chunk", BCON_INT64(c));
  bson_t *opts = BCON_NEW("limit", BCON_INT64(1));
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(col, f, opts, NULL);
  const bson_t *d;
  bson_error_t be;
  int rc = 0;
  if (mongoc_cursor_next(cur, &d)) {
    bson_iter_t it;
    bson_subtype_t st;
    uint32_t bl = 0;
    const uint8_t *bin = NULL;
    int64_t nrec = -1, ncrc = -1;
    if (bson_iter_init_find(&it, d, "records") && BSON_ITER_HOLDS_NUMBER(&it))
      nrec = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, d, "crc") && BSON_ITER_HOLDS_NUMBER(&it))
      ncrc = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, d, "data") && BSON_ITER_HOLDS_BINARY(&it))
      bson_iter_binary(&it, &st, &bl, &bin);
    if (!bin || nrec < 0 || nrec > UINT32_MAX || ncrc < 0 || ncrc > UINT32_MAX || bl > cap) {
      rc = shoal_error_set(err, SHOAL_EFORMAT,
                           "store: dataset '%s' chunk %u: a damaged dataset_chunks document (no "
                           "data, records or crc, or more bytes than the manifest allows)",
                           name, c);
    } else {
      memcpy(buf, bin, bl);
      *len = bl, *records = (uint32_t)nrec, *crc = (uint32_t)ncrc;
    }
  } else if (mongoc_cursor_error(cur, &be)) {
    char what[160];
    snprintf(what, sizeof what, "cannot read chunk %u of dataset '%s'", c, name);
    rc = herr(&k, err, &be, what);
  } else {
    rc = shoal_error_set(err, SHOAL_ENOENT, "store: dataset '%s' chunk %u is missing", name, c);
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(f);
  mongoc_collection_destroy(col);
  conn_end(&k);
  return rc;
}

int store__mongo_dataset_delete(void *impl, const char *name, shoal_error *err) {
  conn k = conn_begin(impl);
  bson_t d;
  int found;
  int rc = find_dataset(&k, name, &d, &found, err);
  if (!rc && !found) rc = shoal_error_set(err, SHOAL_ENOENT, "store: no dataset '%s'", name);
  if (!rc) {
    char up[48] = "";
    bson_iter_t it;
    if (bson_iter_init_find(&it, &d, "upload") && BSON_ITER_HOLDS_UTF8(&it))
      snprintf(up, sizeof up, "%s", bson_iter_utf8(&it, NULL));
    mongoc_collection_t *col = coll(&k, "datasets");
    bson_t *sel = BCON_NEW("_id", BCON_UTF8(name));
    bson_error_t be;
    if (!mongoc_collection_delete_one(col, sel, NULL, NULL, &be))
      rc = herr(&k, err, &be, "cannot remove a dataset");
    bson_destroy(sel);
    mongoc_collection_destroy(col);
    if (!rc) delete_chunks(&k, name, up);
  }
  if (found) bson_destroy(&d);
  conn_end(&k);
  return rc;
}

/* ---- media (GridFS) ----------------------------------------------------------------- */

static int bucket(conn *k, mongoc_gridfs_bucket_t **b, shoal_error *err) {
  mongoc_database_t *db = mongoc_client_get_database(k->c, k->db);
  bson_t *opts =
      BCON_NEW("bucketName", BCON_UTF8("media"), "chunkSizeBytes", BCON_INT32(MEDIA_CHUNK_BYTES));
  bson_error_t be;
  *b = mongoc_gridfs_bucket_new(db, opts, NULL, &be);
  bson_destroy(opts);
  mongoc_database_destroy(db);
  if (!*b) return herr(k, err, &be, "cannot open the GridFS bucket 'media'");
  return 0;
}

int store__mongo_media_put(void *impl, const char *run, const char *name, const bson_t *meta,
                           const void *bytes, size_t len, shoal_error *err) {
  conn k = conn_begin(impl);
  int rc = ensure_index(&k, "media.files",
                        BCON_NEW("metadata.run", BCON_INT32(1), "metadata.name", BCON_INT32(1)),
                        "run_name", err);
  mongoc_gridfs_bucket_t *b = NULL;
  if (!rc) rc = bucket(&k, &b, err);
  char fname[STORE_NAME_MAX + STORE_MEDIA_NAME_MAX + 2];
  snprintf(fname, sizeof fname, "%s/%s", run, name);
  bson_value_t file_id;
  int have_id = 0;
  mongoc_stream_t *s = NULL;
  bson_error_t be;
  if (!rc) {
    bson_t opts;
    bson_init(&opts);
    BSON_APPEND_DOCUMENT(&opts, "metadata", meta);
    s = mongoc_gridfs_bucket_open_upload_stream(b, fname, &opts, &file_id, &be);
    bson_destroy(&opts);
    if (!s)
      rc = herr(&k, err, &be, "cannot start a media upload");
    else
      have_id = 1;
  }
  const char *p = bytes;
  size_t left = len;
  while (!rc && left) {
    size_t n = left > (size_t)MEDIA_CHUNK_BYTES * 8 ? (size_t)MEDIA_CHUNK_BYTES * 8 : left;
    ssize_t w = mongoc_stream_write(s, (void *)p, n, 0);
    if (w <= 0) {
      if (!mongoc_gridfs_bucket_stream_error(s, &be))
        bson_set_error(&be, MONGOC_ERROR_GRIDFS, 0, "short write");
      rc = herr(&k, err, &be, "cannot upload media");
    } else {
      p += w, left -= (size_t)w;
    }
  }
  if (s) {
    if (rc) {
      mongoc_gridfs_bucket_abort_upload(s);
    } else if ((rc = store__mongo_upload_close(
                    k.impl, s, err, "cannot finish media '%s' of run '%s'", name, run))) {
      /* The files document comes last; a duplicate key there means the name exists.
       * Its chunks are then orphans: remove them. */
      mongoc_collection_t *chunks = coll(&k, "media.chunks");
      bson_t sel;
      bson_init(&sel);
      BSON_APPEND_VALUE(&sel, "files_id", &file_id);
      bson_error_t be2;
      (void)mongoc_collection_delete_many(chunks, &sel, NULL, NULL, &be2);
      bson_destroy(&sel);
      mongoc_collection_destroy(chunks);
      if (rc == SHOAL_EEXIST)
        shoal_error_set(err, rc, "store: media '%s' of run '%s' exists", name, run);
    }
    mongoc_stream_destroy(s);
  }
  if (have_id) bson_value_destroy(&file_id);
  if (b) mongoc_gridfs_bucket_destroy(b);
  conn_end(&k);
  return rc;
}

static void meta_of_files_doc(const bson_t *d, bson_t *out) {
  bson_iter_t it;
  const uint8_t *data;
  uint32_t len;
  bson_t m;
  if (bson_iter_init_find(&it, d, "metadata") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
    bson_iter_document(&it, &len, &data);
    if (bson_init_static(&m, data, len)) {
      bson_copy_to(&m, out);
      return;
    }
  }
  bson_init(out);
}

int store__mongo_media_get(void *impl, const char *run, const char *name, bson_t *meta,
                           void **bytes, size_t *len, shoal_error *err) {
  conn k = conn_begin(impl);
  mongoc_gridfs_bucket_t *b = NULL;
  int rc = bucket(&k, &b, err);
  if (rc) {
    conn_end(&k);
    return rc;
  }
  bson_t *f = BCON_NEW("metadata.run", BCON_UTF8(run), "metadata.name", BCON_UTF8(name));
  bson_t *opts = BCON_NEW("limit", BCON_INT64(1));
  mongoc_cursor_t *cur = mongoc_gridfs_bucket_find(b, f, opts);
  const bson_t *d;
  bson_error_t be;
  char *buf = NULL;
  size_t size = 0;
  int have_meta = 0;
  if (mongoc_cursor_next(cur, &d)) {
    bson_iter_t it;
    int64_t length = bson_iter_init_find(&it, d, "length") ? bson_iter_as_int64(&it) : -1;
    mongoc_stream_t *s = NULL;
    meta_of_files_doc(d, meta);
    have_meta = 1;
    if (length < 1 || !bson_iter_init_find(&it, d, "_id")) {
      rc = shoal_error_set(err, SHOAL_EFORMAT,
                           "store: media '%s' of run '%s': a damaged "
                           "media.files document",
                           name, run);
    } else if (!(buf = malloc((size_t)length))) {
      rc = shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
    } else if (!(s = mongoc_gridfs_bucket_open_download_stream(b, bson_iter_value(&it), &be))) {
      rc = herr(&k, err, &be, "cannot download media");
    }
    size = (size_t)(length > 0 ? length : 0);
    size_t got = 0;
    while (!rc && got < size) {
      ssize_t r = mongoc_stream_read(s, buf + got, size - got, 1, 0);
      if (r < 0) {
        if (!mongoc_gridfs_bucket_stream_error(s, &be))
          bson_set_error(&be, MONGOC_ERROR_GRIDFS, 0, "read failed");
        rc = herr(&k, err, &be, "cannot download media");
      } else if (r == 0) {
        rc = shoal_error_set(err, SHOAL_EFORMAT,
                             "store: media '%s' of run '%s' has %zu bytes in GridFS, its files "
                             "document says %zu",
                             name, run, got, size);
      } else {
        got += (size_t)r;
      }
    }
    if (s) mongoc_stream_destroy(s);
  } else if (mongoc_cursor_error(cur, &be)) {
    rc = herr(&k, err, &be, "cannot look up media");
  } else {
    rc = shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' has no media '%s'", run, name);
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(f);
  mongoc_gridfs_bucket_destroy(b);
  conn_end(&k);
  if (rc) {
    if (have_meta) bson_destroy(meta);
    free(buf);
    return rc;
  }
  *bytes = buf, *len = size;
  return 0;
}

int store__mongo_media_list(void *impl, const char *run, bson_t ***metas, size_t *n,
                            shoal_error *err) {
  conn k = conn_begin(impl);
  mongoc_gridfs_bucket_t *b = NULL;
  int rc = bucket(&k, &b, err);
  if (rc) {
    conn_end(&k);
    return rc;
  }
  bson_t *f = BCON_NEW("metadata.run", BCON_UTF8(run));
  mongoc_cursor_t *cur = mongoc_gridfs_bucket_find(b, f, NULL);
  bson_t **arr = NULL;
  size_t k2 = 0, cap = 0;
  const bson_t *d;
  while (!rc && mongoc_cursor_next(cur, &d)) {
    if ((rc = store__grow((void **)&arr, &cap, k2, sizeof *arr))) {
      shoal_error_set(err, rc, "store: out of memory");
      break;
    }
    bson_t m;
    meta_of_files_doc(d, &m);
    if (!(arr[k2] = bson_copy(&m)))
      rc = shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
    else
      k2++;
    bson_destroy(&m);
  }
  bson_error_t be;
  if (!rc && mongoc_cursor_error(cur, &be)) rc = herr(&k, err, &be, "cannot list media");
  mongoc_cursor_destroy(cur);
  bson_destroy(f);
  mongoc_gridfs_bucket_destroy(b);
  conn_end(&k);
  if (rc) {
    for (size_t i = 0; i < k2; i++) bson_destroy(arr[i]);
    free(arr);
    return rc;
  }
  *metas = arr, *n = k2;
  return 0;
}
