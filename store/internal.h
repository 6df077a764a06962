/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/internal.h — the backend table behind store.h, the store handle, and helpers
 * the front files share. Private to store/ (and its tests, which plug in a backend of
 * their own).
 *
 * Every store operation is a slot of one table per backend: the file backend is
 * file.c, file_segments.c and file_data.c; the MongoDB backend mongo.c,
 * mongo_segments.c and mongo_data.c (built with libmongoc only). store.c registers
 * them. The front (store.c, segments.c, dataset.c, media.c) checks every argument,
 * builds and checks the documents and encodings, and calls the slot, so backends may
 * assume valid names and non-NULL pointers. A NULL slot is SHOAL_ENOTSUP for that
 * operation (a test backend fills only what it is called for).
 */
#ifndef SHOAL_STORE_INTERNAL_H
#define SHOAL_STORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "store/store.h"

struct _bson_t; /* libbson's bson_t: the backends include <bson/bson.h> */

typedef struct store__backend {
  const char *name; /* "file", "mongodb": what store_backend_name says */
  /* Opens the store named by uri (given whole, with the scheme; u is what
   * store_uri_parse read from it) into a new *impl. lazy: an unreachable deployment is
   * not an error (store_open_lazy). NULL for a backend only plugged in by
   * store__open_backend. */
  int (*open)(void **impl, const char *uri, const store_uri_info *u, bool lazy, shoal_error *err);
  void (*close)(void *impl);

  /* ---- runs, snapshots, the replay log, metrics, trials: as store.h's functions */
  int (*run_create)(void *impl, const char *id, const char *config, int status, shoal_error *err);
  int (*run_find)(void *impl, const char *id, store_run *out, shoal_error *err);
  int (*run_list)(void *impl, store_run **out, size_t *n, shoal_error *err);
  int (*run_set_status)(void *impl, const char *id, int status, shoal_error *err);
  int (*run_set_config)(void *impl, const char *id, const char *config, shoal_error *err);
  int (*lease_take)(void *impl, const char *run, double ttl_s, store_lease_holder *holder,
                    shoal_error *err);
  int (*lease_renew)(void *impl, const char *run, double ttl_s, bool stopping, shoal_error *err);
  int (*lease_release)(void *impl, const char *run, shoal_error *err);

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
  int (*trial_release)(void *impl, const char *sweep, const char *id, const char *worker,
                       shoal_error *err);
  int (*trial_get)(void *impl, const char *sweep, const char *id, store_trial *out,
                   shoal_error *err);
  int (*trial_list)(void *impl, const char *sweep, store_trial **out, size_t *n, shoal_error *err);

  /* ---- experience segments (segments.c has checked the layout and stamped run,
   * source and wall_time) */
  /* Takes the next sequence number of run (into seg->seq), seals the encoding with
   * store__seg_header_write and stores it; a number another writer took meanwhile is
   * given up for the next one, so numbers become visible in order. */
  int (*segment_write)(void *impl, const char *run, store_segment *seg, shoal_error *err);
  /* At most cap seqs of run above after (STORE_SEG_FIRST: all), ascending, into seqs.
   * A run without segments, or without a folder for them, is *n = 0. */
  int (*segment_list)(void *impl, const char *run, uint64_t after, uint64_t *seqs, size_t cap,
                      size_t *n, shoal_error *err);
  /* Reads segment seq into seg (reusing its buffer) and checks it as store_segments.h says;
   * on error seg holds no columns. */
  int (*segment_read)(void *impl, const char *run, uint64_t seq, store_segment *seg,
                      shoal_error *err);

  /* ---- datasets (dataset.c builds and checks the manifest and the chunks' CRCs; the
   * backend moves bytes and documents). An upload is the backend's handle for one
   * dataset being written. */
  int (*dataset_begin)(void *impl, const char *name, void **upload, shoal_error *err);
  /* The upload's id, kept in the manifest as "upload" (borrowed). Can't fail. */
  const char *(*dataset_upload_id)(void *upload);
  /* Writes chunk c with its record count and CRC-32 beside the payload. */
  int (*dataset_chunk_put)(void *impl, void *upload, uint32_t c, uint32_t records, uint32_t crc,
                           const void *bytes, size_t len, shoal_error *err);
  /* Stores the manifest, making the dataset visible, and frees the upload (on error
   * too, after removing its chunks). SHOAL_EEXIST when the name was taken meanwhile. */
  int (*dataset_commit)(void *impl, void *upload, const struct _bson_t *manifest, shoal_error *err);
  void (*dataset_abort)(void *impl, void *upload); /* removes the upload's chunks, frees it */
  /* The manifest document into *out (bson_init'ed here; caller destroys it on success). */
  int (*dataset_manifest_get)(void *impl, const char *name, struct _bson_t *out, shoal_error *err);
  /* Names of every dataset: a new array of *n names (caller frees with free()). */
  int (*dataset_names)(void *impl, char (**names)[STORE_NAME_MAX], size_t *n, shoal_error *err);
  /* Reads chunk c into buf (cap bytes): *len its payload bytes, *records and *crc as
   * stored with it. SHOAL_EFORMAT when it exceeds cap or is damaged. */
  int (*dataset_chunk_get)(void *impl, const char *name, const char *upload, uint32_t c, void *buf,
                           size_t cap, size_t *len, uint32_t *records, uint32_t *crc,
                           shoal_error *err);
  int (*dataset_delete)(void *impl, const char *name, shoal_error *err);

  /* ---- media (media.c builds and parses meta, the metadata document) */
  int (*media_put)(void *impl, const char *run, const char *name, const struct _bson_t *meta,
                   const void *bytes, size_t len, shoal_error *err);
  /* *meta bson_init'ed on success (caller destroys it), *bytes a new buffer. */
  int (*media_get)(void *impl, const char *run, const char *name, struct _bson_t *meta,
                   void **bytes, size_t *len, shoal_error *err);
  /* Every item's metadata document of run: a new array of *n new documents (caller
   * bson_destroys each and frees the array). */
  int (*media_list)(void *impl, const char *run, struct _bson_t ***metas, size_t *n,
                    shoal_error *err);
} store__backend;

/* The backends (store.c registers them with store_open). */
extern const store__backend store__file_backend;  /* file*.c */
extern const store__backend store__mongo_backend; /* mongo*.c, with libmongoc only */

/* The handle. store.c makes and frees it; the fronts call its backend through
 * STORE__CALL. */
struct store {
  const store__backend *be;
  void *impl;
  char *uri; /* redacted */
  /* Runs are never deleted, so a run seen to exist stays known: writes to a run
   * then check it without a round trip. A small array is enough (a learner writes
   * to one run; a sweep worker to a few). */
  pthread_mutex_t mu;
  char (*known)[STORE_NAME_MAX];
  size_t n_known, cap_known;
};

/* Calls slot of st's backend with (impl, ..., err), or returns SHOAL_ENOTSUP naming
 * the backend and the slot when the backend has none. */
#define STORE__CALL(st, slot, err, ...)                            \
  ((st)->be->slot ? (st)->be->slot((st)->impl, __VA_ARGS__, (err)) \
                  : store__unsupported((st), #slot, (err)))
int store__unsupported(const store *st, const char *slot, shoal_error *err);
/* SHOAL_EEXIST naming run's holder h (the lease backends' refusal). */
int store__lease_held(const char *run, const store_lease_holder *h, shoal_error *err);

/* Wraps a backend in a store handle (takes ownership of impl: closed with the
 * handle, also on error). uri_redacted is copied. Used by store_open and by tests
 * that plug in a backend of their own. */
int store__open_backend(store **out, const store__backend *be, void *impl, const char *uri_redacted,
                        shoal_error *err);

/* ---- URIs (uri.c) */
/* uri, or for NULL or "" $SHOAL_STORE_URI when set, else "file:runs" (borrowed). */
const char *store__uri_or_default(const char *uri);
/* The authority of "scheme://AUTHORITY/...": its first character, or NULL when uri has
 * no "://". *at (may be NULL) gets the '@' that ends its user information, NULL when
 * there is none (the last '@' before the path: a password may hold one); *colon (may
 * be NULL) the ':' between user and password, NULL when none. Can't fail. */
const char *store__uri_authority(const char *uri, const char **at, const char **colon);

/* ---- helpers (store.c) */
int store__metric_name_valid(const char *name);
int store__worker_valid(const char *name);
double store__wall_time(void);      /* Unix time, seconds (CLOCK_REALTIME) */
char *store__strdup(const char *s); /* NULL for NULL; NULL on allocation failure too */
/* Grows *arr (of *cap elements of elem bytes) to hold more than n: 0 or SHOAL_ENOMEM. */
int store__grow(void **arr, size_t *cap, size_t n, size_t elem);
uint32_t store__crc32(const void *bytes, size_t len); /* zlib's CRC-32 */
void store__put_le32(unsigned char *p, uint32_t v);
void store__put_le64(unsigned char *p, uint64_t v);
uint32_t store__get_le32(const unsigned char *p);
uint64_t store__get_le64(const unsigned char *p);

/* ---- the segment encoding, for the backends (segments.c) */
/* Bytes of one item of dtype and shape; 0 when invalid. */
size_t store__seg_item_bytes(int dtype, int ndim, const int64_t *shape);
/* The STORE_SEG_* dtype named s ("u8", "i32", "f32") into *out: 0 or SHOAL_EINVAL. */
int store__seg_dtype_parse(const char *s, int *out);
/* Forgets seg's columns (rows 0), keeping its buffer. */
void store__seg_no_columns(store_segment *seg);
/* Makes seg->buf hold at least len bytes: 0 or SHOAL_ENOMEM. */
int store__seg_grow(store_segment *seg, size_t len, shoal_error *err);
/* Writes the header of seg's encoding (seq, wall_time, run, source, spec) and the
 * CRC, which it also sets in seg->crc. */
void store__seg_header_write(store_segment *seg);
/* Checks the header of the len bytes in seg->buf (where: the file or document, for
 * messages) and lays the columns out. SHOAL_EFORMAT naming what is wrong. */
int store__seg_header_read(store_segment *seg, size_t len, const char *where, shoal_error *err);

/* ---- the dataset manifest as the file backend stores it (dataset.c), for the fuzz
 * target tests/fuzz/fuzz_manifest.c */
/* Parses and checks the JSON text of dataset name's manifest (len bytes, borrowed) into
 * *out (caller clears it), untouched on error: SHOAL_EFORMAT naming the fault, or
 * SHOAL_ENOMEM. */
int store__dataset_manifest_from_json(const char *name, const char *json, size_t len,
                                      store_dataset_info *out, shoal_error *err);
/* The manifest of info as JSON text (caller frees it with free());
 * *len its length. NULL when out of memory. */
char *store__dataset_manifest_to_json(const store_dataset_info *info, size_t *len);

#endif
