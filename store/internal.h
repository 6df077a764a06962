/*
 * store/internal.h — the backend vtable behind store.h and helpers shared by the
 * backends. Private to store/ (and its tests, which plug in a test backend).
 *
 * store.c checks every argument (names, versions, sizes) before calling a backend,
 * so backends may assume valid names and non-NULL pointers.
 */
#ifndef SHOAL_STORE_INTERNAL_H
#define SHOAL_STORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "store/store.h"

typedef struct store__backend {
  const char *name; /* "file", "mongodb" */
  void (*close)(void *impl);

  int (*run_create)(void *impl, const char *id, const char *config, int status, shoal_error *err);
  int (*run_find)(void *impl, const char *id, store_run *out, shoal_error *err);
  int (*run_list)(void *impl, store_run **out, size_t *n, shoal_error *err);
  int (*run_set_status)(void *impl, const char *id, int status, shoal_error *err);

  int (*snapshot_put)(void *impl, const store_snapshot_meta *meta, const void *bytes, size_t len,
                      shoal_error *err);
  int (*snapshot_get)(void *impl, const char *run, int64_t version, store_snapshot_meta *meta,
                      void **bytes, size_t *len, shoal_error *err);
  int (*snapshot_list)(void *impl, const char *run, store_snapshot_meta **out, size_t *n,
                       shoal_error *err);

  int (*replay_append)(void *impl, const char *run, uint64_t seq, const void *bytes, size_t len,
                       shoal_error *err);
  int (*replay_iter)(void *impl, const char *run, uint64_t from_seq, store_replay_fn fn, void *ctx,
                     shoal_error *err);
  int (*replay_list)(void *impl, const char *run, uint64_t **seqs, size_t *n, shoal_error *err);
  int (*replay_read)(void *impl, const char *run, uint64_t seq, void **bytes, size_t *len,
                     shoal_error *err);
  int (*replay_trim)(void *impl, const char *run, uint64_t below, size_t *removed,
                     shoal_error *err);
  /* NULL for a backend without local files. run may be NULL (the store's folder). */
  int (*local_dir)(void *impl, const char *run, char *out, size_t cap, shoal_error *err);

  int (*metrics_append)(void *impl, const store_metric *rows, size_t n, shoal_error *err);
  int (*metrics_query)(void *impl, const char *run, const char *name, int64_t step_min,
                       int64_t step_max, store_metric **out, size_t *n, shoal_error *err);

  int (*trial_create)(void *impl, const char *sweep, const char *id, const char *params,
                      shoal_error *err);
  int (*trial_claim)(void *impl, const char *sweep, const char *worker, store_trial *out,
                     shoal_error *err);
  int (*trial_heartbeat)(void *impl, const char *sweep, const char *id, const char *worker,
                         shoal_error *err);
  int (*trial_complete)(void *impl, const char *sweep, const char *id, const char *worker,
                        int status, const char *result, shoal_error *err);
  int (*trial_requeue_stale)(void *impl, const char *sweep, double max_age_s, size_t *n,
                             shoal_error *err);
  int (*trial_get)(void *impl, const char *sweep, const char *id, store_trial *out,
                   shoal_error *err);
  int (*trial_list)(void *impl, const char *sweep, store_trial **out, size_t *n, shoal_error *err);
} store__backend;

/* Wraps a backend in a store handle (takes ownership of impl: closed with the
 * handle, also on error). uri_redacted is copied. Used by store_open and by tests
 * that plug in a backend of their own. */
int store__open_backend(store **out, const store__backend *be, void *impl, const char *uri_redacted,
                        shoal_error *err);

/* Backends. Each parses its own URI (given whole, with the scheme). */
int store__file_open(void **impl, const char *uri, shoal_error *err);
extern const store__backend store__file_backend;
/* lazy: an unreachable deployment is not an error (store_open_lazy). */
int store__mongo_open(void **impl, const char *uri, bool lazy, shoal_error *err);
extern const store__backend store__mongo_backend;

/* The data hub (segments.c, dataset.c, media.c, hub_*.c) keeps its own code per
 * backend and reaches the backend's state through these. */
void *store__impl(store *st);                        /* store.c */
const char *store__file_root(void *impl);            /* file.c: the store's folder */
void *store__mongo_pop(void *impl, const char **db); /* mongo.c: a pooled client */
void store__mongo_push(void *impl, void *client);
int store__mongo_error(void *impl, shoal_error *err, const void *bson_err, const char *what);
/* Closes a GridFS upload stream (a mongoc_stream_t *) and, when the close fails, reports the
 * stream's own error (GridFS writes the files document on close: a duplicate key there, from
 * a unique index, is SHOAL_EEXIST). what (printf format) says what was being written. 0 or
 * the error; the caller still destroys the stream. */
int store__mongo_upload_close(void *impl, void *stream, shoal_error *err, const char *what, ...)
    __attribute__((format(printf, 4, 5)));

/* Helpers shared by the file-store code (file.c defines them). */
const char *store__host_tag(void); /* this host's name, [A-Za-z0-9-] only: temp names */
/* An errno as a shoal error: ENOENT/EEXIST keep their meaning, the rest is SHOAL_EIO. */
int store__sys_err(shoal_error *err, int e, const char *what, const char *path);
int store__write_all(int fd, const void *buf, size_t len); /* 0 or an errno */
int store__read_all(int fd, void *buf, size_t len);        /* 0, an errno, or -1 at an early end */
void store__put_le32(unsigned char *p, uint32_t v);
void store__put_le64(unsigned char *p, uint64_t v);
uint32_t store__get_le32(const unsigned char *p);
uint64_t store__get_le64(const unsigned char *p);
uint32_t store__crc32(const void *bytes, size_t len); /* zlib's CRC-32 (dataset.c) */

/* Helpers. */
int store__metric_name_valid(const char *name);
int store__worker_valid(const char *name);
double store__wall_time(void);      /* Unix time, seconds (CLOCK_REALTIME) */
char *store__strdup(const char *s); /* NULL for NULL; NULL on allocation failure too */

/* Growable arrays for list results. */
int store__grow(void **arr, size_t *cap, size_t n, size_t elem);

#endif
