/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/store_data.h — the data hub: streamed datasets (store/dataset.c, read back by
 * data/data.h's data_stream) and media of runs (store/media.c). Part of store.h, which
 * includes it.
 */
#ifndef SHOAL_STORE_DATA_H
#define SHOAL_STORE_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== the data hub: streamed datasets and media (store/dataset.c, store/media.c) ==== */

/* A dataset is N records of fixed-size fields (an image, a label, ...) kept in chunks
 * of chunk_records records, record-major (record i of a chunk at i * record_bytes,
 * its fields one after another in little-endian byte order), with a manifest: record
 * count, field names, dtypes and per-record shapes, chunk size, and a CRC-32 per
 * chunk. A dataset appears whole or not at all, and never changes once written.
 *   file:    DIR/_datasets/NAME/manifest.json and chunk-<6 digits>.bin (32-byte header:
 *            magic "SHDSCHNK", version, chunk, records, crc32, payload bytes), built in a
 *            temporary folder renamed into place ("_": no run can be named so)
 *   mongodb: collection datasets {_id: NAME, upload, manifest: {...}} inserted last;
 *            collection dataset_chunks {dataset, upload, chunk, records, crc, data}
 * Reading checks every chunk against the manifest (size, records, CRC) and names the
 * dataset and chunk in the error.
 *
 *   store_dataset_field f[2] = {{"images", STORE_DTYPE_U8, 3, {1, 28, 28}},
 *                               {"labels", STORE_DTYPE_I32, 0, {0}}};
 *   store_dataset_writer *w;
 *   store_dataset_create(st, "fmnist-train", f, 2, 1024, "idx files", &w, &err);
 *   store_dataset_write(w, records, n, &err);            // as often as needed
 *   store_dataset_commit(w, NULL, &err);                 // or store_dataset_abort(w)
 * data/data.h's data_stream reads it back in shuffled batches with bounded memory. */

typedef enum store_dtype {
  STORE_DTYPE_U8 = 1,
  STORE_DTYPE_I8 = 2,
  STORE_DTYPE_I16 = 3,
  STORE_DTYPE_I32 = 4,
  STORE_DTYPE_I64 = 5,
  STORE_DTYPE_F32 = 6,
  STORE_DTYPE_F64 = 7,
} store_dtype;

/* "u8", "i8", "i16", "i32", "i64", "f32", "f64"; NULL for other values. Can't fail. */
const char *store_dtype_name(int dtype);
/* Bytes per element; 0 for an unknown dtype. Can't fail. */
size_t store_dtype_size(int dtype);
/* The dtype named s, or 0 when none. Can't fail. */
int store_dtype_parse(const char *s);

enum {
  STORE_DATASET_FIELDS_MAX = 8,
  STORE_DATASET_NDIM_MAX = 4,
  STORE_FIELD_NAME_MAX = 32, /* buffer size: 31 characters of [A-Za-z0-9._-] and the NUL */
};
/* Largest chunk payload: one MongoDB document with room for its fields. */
#define STORE_DATASET_CHUNK_MAX ((size_t)15 * 1024 * 1024)

typedef struct store_dataset_field {
  char name[STORE_FIELD_NAME_MAX];
  int dtype;                             /* store_dtype */
  int ndim;                              /* 0 (a scalar) .. STORE_DATASET_NDIM_MAX */
  int64_t shape[STORE_DATASET_NDIM_MAX]; /* per record, each >= 1 */
  size_t bytes;                          /* filled in: elements * dtype size */
  size_t offset;                         /* filled in: where the field starts in a record */
} store_dataset_field;

typedef struct store_dataset_info {
  char name[STORE_NAME_MAX];
  uint64_t records;       /* N */
  uint32_t chunk_records; /* records per chunk; the last chunk may hold fewer */
  uint32_t chunks;        /* ceil(N / chunk_records) */
  int nfields;
  store_dataset_field fields[STORE_DATASET_FIELDS_MAX];
  size_t record_bytes; /* sum of the fields' bytes */
  double created_time; /* Unix time of the commit */
  char source[256];    /* free text given at create (where the data came from) */
  uint32_t *crc;       /* (chunks) CRC-32 of each chunk's payload; owned */
  char upload[48];     /* the backend's id of the write that made it (MongoDB's chunks) */
} store_dataset_info;

/* Frees info->crc and zeroes *info. NULL is a no-op. */
void store_dataset_info_clear(store_dataset_info *info);
/* Clears n infos and frees the array. */
void store_dataset_infos_free(store_dataset_info *infos, size_t n);
/* The field called name in info, or NULL. Borrowed. Can't fail. */
const store_dataset_field *store_dataset_field_find(const store_dataset_info *info,
                                                    const char *name);

typedef struct store_dataset_writer store_dataset_writer;

/* Starts dataset name (a name as for runs) with nfields fields (copied; their bytes
 * and offset are computed here) and chunk_records records per chunk (>= 1, with
 * chunk_records * record_bytes <= STORE_DATASET_CHUNK_MAX). source (may be NULL) is
 * kept in the manifest. Nothing is visible until store_dataset_commit. On success *out
 * is a new writer holding one chunk of memory. SHOAL_EEXIST when the dataset exists,
 * SHOAL_EINVAL for bad fields (the message names the field). st is borrowed: it must
 * outlive the writer. */
int store_dataset_create(store *st, const char *name, const store_dataset_field *fields,
                         int nfields, uint32_t chunk_records, const char *source,
                         store_dataset_writer **out, shoal_error *err);

/* Appends n whole records (borrowed; n * record_bytes bytes, record-major). Each full
 * chunk is written out at once, so memory stays at one chunk. On error the writer can
 * only be aborted. */
int store_dataset_write(store_dataset_writer *w, const void *records, size_t n, shoal_error *err);

/* Writes the last chunk and the manifest, making the dataset visible whole, and frees
 * the writer (also on error, after removing what it wrote). *info (may be NULL; caller
 * clears it) gets the manifest. SHOAL_EINVAL for an empty dataset; SHOAL_EEXIST when
 * another writer committed the name first. */
int store_dataset_commit(store_dataset_writer *w, store_dataset_info *info, shoal_error *err);

/* Removes what the writer wrote and frees it. NULL is a no-op. */
void store_dataset_abort(store_dataset_writer *w);

/* Reads the manifest of dataset name into *out (caller clears it). SHOAL_ENOENT when
 * there is no such dataset, SHOAL_EFORMAT for a damaged manifest (the message names
 * the dataset and the fault). */
int store_dataset_info_get(store *st, const char *name, store_dataset_info *out, shoal_error *err);

/* Every dataset, sorted by name. *out is a new array (caller frees it with
 * store_dataset_infos_free), NULL when n is 0. A damaged manifest fails the call. */
int store_dataset_list(store *st, store_dataset_info **out, size_t *n, shoal_error *err);

/* Reads chunk c of the dataset described by info (from store_dataset_info_get) into
 * buf (cap bytes, at least info->chunk_records * info->record_bytes; borrowed) and
 * checks it against the manifest: its length, record count and CRC-32. *records gets
 * the chunk's record count. SHOAL_EFORMAT for a damaged chunk and SHOAL_ENOENT for a
 * missing one, the message naming dataset and chunk; buf's contents are then
 * unspecified. Allocates nothing on the file store (libmongoc allocates a document
 * per read on MongoDB). */
int store_dataset_chunk_read(store *st, const store_dataset_info *info, uint32_t c, void *buf,
                             size_t cap, uint32_t *records, shoal_error *err);

/* Removes dataset name (its manifest first, so readers see it gone, then the chunks).
 * SHOAL_ENOENT when there is no such dataset. */
int store_dataset_delete(store *st, const char *name, shoal_error *err);

/* ---- media: episode recordings and other blobs of a run ---- */

/* Kept per run, never changed once written:
 *   file:    DIR/<run>/media/<name> and <name>.json (the metadata, written second, so a
 *            listing shows only whole items)
 *   mongodb: GridFS bucket media (media.files / media.chunks), filename "<run>/<name>",
 *            the metadata below under metadata; unique index metadata.run+metadata.name.
 * Names are 1-127 characters of [A-Za-z0-9._-] starting with a letter or digit. */
enum { STORE_MEDIA_NAME_MAX = 128 };

typedef struct store_media_meta {
  char run[STORE_NAME_MAX];
  char name[STORE_MEDIA_NAME_MAX];
  char content_type[64]; /* "image/png", "image/apng", "image/gif", ... */
  int64_t version;       /* the snapshot version it shows; -1 when none */
  int64_t episode;       /* the episode's number, 1-based; -1 when none */
  double ret;            /* the episode's return; NaN when none */
  int64_t length;        /* the episode's length in steps; -1 when none */
  int64_t frames;        /* frames in the recording; -1 when not known */
  char env[64];          /* the environment id; "" when none */
  double created_time;   /* Unix time it was stored (put fills it in when 0) */
  uint64_t size;         /* bytes; filled in by put, get and list */
} store_media_meta;

/* Fills *m with "none" values (-1, NaN, "") for the optional fields. Can't fail. */
void store_media_meta_init(store_media_meta *m);

/* Stores len bytes (borrowed; >= 1) as item meta->name of run meta->run, with the
 * metadata. The run must exist (SHOAL_ENOENT); SHOAL_EEXIST when it has that name. */
int store_media_put(store *st, const store_media_meta *meta, const void *bytes, size_t len,
                    shoal_error *err);

/* Reads item name of run: *bytes is a new buffer of *len bytes (caller frees it with
 * free()); *meta (may be NULL) gets its metadata. SHOAL_ENOENT when missing;
 * SHOAL_EFORMAT when its size disagrees with the metadata. Outputs untouched on error. */
int store_media_get(store *st, const char *run, const char *name, store_media_meta *meta,
                    void **bytes, size_t *len, shoal_error *err);

/* The items of run, sorted by name. *out is a new array (caller frees it with free()),
 * NULL when n is 0. */
int store_media_list(store *st, const char *run, store_media_meta **out, size_t *n,
                     shoal_error *err);

/* Returns 1 when name is a valid media name, else 0. Can't fail. */
int store_media_name_valid(const char *name);

#ifdef __cplusplus
}
#endif
#endif
