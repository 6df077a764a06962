/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/mongo_backend.h — what the MongoDB backend's files (mongo.c: the connection
 * pool, errors, runs, snapshots, the replay log, metrics, trials and the table;
 * mongo_segments.c; mongo_data.c: datasets and media) share. Private to them; built
 * only with libmongoc.
 */
#ifndef SHOAL_STORE_MONGO_BACKEND_H
#define SHOAL_STORE_MONGO_BACKEND_H

#include <bson/bson.h>
#include <mongoc/mongoc.h>

#include "store/internal.h"

/* A pooled client of the store and, in *db (may be NULL), its database's name
 * (borrowed). Give it back with store__mongo_push. Can't fail. */
mongoc_client_t *store__mongo_pop(void *impl, const char **db);
void store__mongo_push(void *impl, mongoc_client_t *client);

/* A driver or server error as a shoal error: a duplicate key is SHOAL_EEXIST, refused
 * credentials SHOAL_EPERM, the network SHOAL_ENET, the rest SHOAL_EIO; the message
 * says what (was being done), with credentials scrubbed and the URI redacted.
 * Returns the code. */
int store__mongo_error(void *impl, shoal_error *err, const bson_error_t *be, const char *what);

/* Closes a GridFS upload stream and, when the close fails, reports the stream's own
 * error (GridFS writes the files document on close: a duplicate key there, from a
 * unique index, is SHOAL_EEXIST). what (printf format) says what was being written. 0
 * or the error; the caller still destroys the stream. */
int store__mongo_upload_close(void *impl, mongoc_stream_t *stream, shoal_error *err,
                              const char *what, ...) __attribute__((format(printf, 4, 5)));

/* Slots defined by mongo_segments.c and mongo_data.c. */
int store__mongo_segment_write(void *impl, const char *run, store_segment *seg, shoal_error *err);
int store__mongo_segment_list(void *impl, const char *run, uint64_t after, uint64_t *seqs,
                              size_t cap, size_t *n, shoal_error *err);
int store__mongo_segment_read(void *impl, const char *run, uint64_t seq, store_segment *seg,
                              shoal_error *err);

int store__mongo_dataset_begin(void *impl, const char *name, void **upload, shoal_error *err);
const char *store__mongo_dataset_upload_id(void *upload);
int store__mongo_dataset_chunk_put(void *impl, void *upload, uint32_t c, uint32_t records,
                                   uint32_t crc, const void *bytes, size_t len, shoal_error *err);
int store__mongo_dataset_commit(void *impl, void *upload, const bson_t *manifest, shoal_error *err);
void store__mongo_dataset_abort(void *impl, void *upload);
int store__mongo_dataset_manifest_get(void *impl, const char *name, bson_t *out, shoal_error *err);
int store__mongo_dataset_names(void *impl, char (**names)[STORE_NAME_MAX], size_t *n,
                               shoal_error *err);
int store__mongo_dataset_chunk_get(void *impl, const char *name, const char *upload, uint32_t c,
                                   void *buf, size_t cap, size_t *len, uint32_t *records,
                                   uint32_t *crc, shoal_error *err);
int store__mongo_dataset_delete(void *impl, const char *name, shoal_error *err);
int store__mongo_media_put(void *impl, const char *run, const char *name, const bson_t *meta,
                           const void *bytes, size_t len, shoal_error *err);
int store__mongo_media_get(void *impl, const char *run, const char *name, bson_t *meta,
                           void **bytes, size_t *len, shoal_error *err);
int store__mongo_media_list(void *impl, const char *run, bson_t ***metas, size_t *n,
                            shoal_error *err);

#endif
