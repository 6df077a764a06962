/*
 * store/hub.h — the data hub's backend table (datasets and media), private to store/.
 * dataset.c and media.c check arguments, build and parse the manifest and metadata
 * documents and verify chunks; hub_file.c and hub_mongo.c only move bytes and
 * documents. Kept apart from internal.h's store__backend so the hub grows on its own.
 */
#ifndef SHOAL_STORE_HUB_H
#define SHOAL_STORE_HUB_H

#include <bson/bson.h>

#include "store/internal.h"

typedef struct store__hub {
  /* Datasets. An upload is a backend's handle for one dataset being written. */
  int (*ds_begin)(void *impl, const char *name, void **upload, shoal_error *err);
  /* The upload's id, kept in the manifest as "upload" (borrowed). */
  const char *(*ds_upload_id)(void *upload);
  /* Writes chunk c with its record count and CRC-32 beside the payload (the file
   * backend in a STORE__CHUNK_HEADER header, MongoDB as document fields). */
  int (*ds_chunk_put)(void *impl, void *upload, uint32_t c, uint32_t records, uint32_t crc,
                      const void *bytes, size_t len, shoal_error *err);
  /* Stores the manifest, making the dataset visible, and frees the upload (on error
   * too, after removing its chunks). SHOAL_EEXIST when the name was taken meanwhile. */
  int (*ds_commit)(void *impl, void *upload, const bson_t *manifest, shoal_error *err);
  void (*ds_abort)(void *impl, void *upload); /* removes the upload's chunks, frees it */
  /* The manifest document into *out (bson_init'ed here; caller destroys it on success). */
  int (*ds_manifest_get)(void *impl, const char *name, bson_t *out, shoal_error *err);
  /* Names of every dataset: a new array of *n names (caller frees with free()). */
  int (*ds_names)(void *impl, char (**names)[STORE_NAME_MAX], size_t *n, shoal_error *err);
  /* Reads chunk c into buf (cap bytes): *len its payload bytes, *records and *crc as
   * stored with it. SHOAL_EFORMAT when it exceeds cap or is damaged. */
  int (*ds_chunk_get)(void *impl, const char *name, const char *upload, uint32_t c, void *buf,
                      size_t cap, size_t *len, uint32_t *records, uint32_t *crc, shoal_error *err);
  int (*ds_delete)(void *impl, const char *name, shoal_error *err);

  /* Media: meta is the metadata document. */
  int (*media_put)(void *impl, const char *run, const char *name, const bson_t *meta,
                   const void *bytes, size_t len, shoal_error *err);
  int (*media_get)(void *impl, const char *run, const char *name, bson_t *meta, void **bytes,
                   size_t *len, shoal_error *err);
  /* Every item's metadata document of run: a new array of *n new documents (caller
   * bson_destroys each and frees the array). */
  int (*media_list)(void *impl, const char *run, bson_t ***metas, size_t *n, shoal_error *err);
} store__hub;

extern const store__hub store__hub_file;
extern const store__hub store__hub_mongo; /* every call SHOAL_ENOTSUP without libmongoc */

/* The hub table and backend handle of st. */
const store__hub *store__hub_of(store *st, void **impl);

/* Chunk header, shared so both backends check the same fields. */
enum { STORE__CHUNK_HEADER = 32, STORE__CHUNK_VERSION = 1 };
extern const char store__chunk_magic[8]; /* "SHDSCHNK" */
uint32_t store__crc32(const void *bytes, size_t len);

#endif
