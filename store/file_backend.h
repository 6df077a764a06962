/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/file_backend.h — what the file backend's files (file.c: runs, snapshots, the
 * replay log, metrics, trials and the table; file_segments.c; file_data.c: datasets
 * and media) share. Private to them.
 */
#ifndef SHOAL_STORE_FILE_BACKEND_H
#define SHOAL_STORE_FILE_BACKEND_H

#include "store/internal.h"

/* The store's folder (borrowed from the open handle). Can't fail. */
const char *store__file_root(void *impl);

/* An errno as a shoal error: ENOENT/EEXIST keep their meaning, the rest is SHOAL_EIO.
 * The message reads "store: WHAT 'PATH': strerror". Returns the code. */
int store__sys_err(shoal_error *err, int e, const char *what, const char *path);
int store__write_all(int fd, const void *buf, size_t len); /* 0 or an errno */
int store__read_all(int fd, void *buf, size_t len);        /* 0, an errno, or -1 at an early end */

/* Writes parts a and b (b may be NULL; both borrowed) to dir/name atomically
 * (common/file.h). exclusive: the file must not exist (SHOAL_EEXIST, "store: 'PATH'
 * exists"), else it is replaced. Temporary names carry host and pid
 * (.tmp.<name>.<host>.<pid>.<n>), so a later writer on the same host can tell the
 * leftovers of a killed process from a live writer's files. */
int store__file_write_atomic(const char *dir, const char *name, const void *a, size_t na,
                             const void *b, size_t nb, int exclusive, shoal_error *err);
/* Reads path whole into a new buffer (*out, caller frees) with a NUL after the last
 * byte; *len excludes the NUL. */
int store__file_read(const char *path, char **out, size_t *len, shoal_error *err);
/* Creates folder p unless it exists (its parent must). */
int store__file_mkdir(const char *p, shoal_error *err);
/* fsyncs folder dir, so renames and links in it survive a crash. */
int store__file_fsync_dir(const char *dir, shoal_error *err);
/* Removes a folder this backend made and the plain files (and empty folders) in it:
 * the temporary folders it cleans up hold nothing deeper. Best effort; can't fail. */
void store__file_rm_flat_dir(const char *dir);

/* Slots defined by file_segments.c and file_data.c. */
int store__file_segment_write(void *impl, const char *run, store_segment *seg, shoal_error *err);
int store__file_segment_list(void *impl, const char *run, uint64_t after, uint64_t *seqs,
                             size_t cap, size_t *n, shoal_error *err);
int store__file_segment_read(void *impl, const char *run, uint64_t seq, store_segment *seg,
                             shoal_error *err);

int store__file_dataset_begin(void *impl, const char *name, void **upload, shoal_error *err);
const char *store__file_dataset_upload_id(void *upload);
int store__file_dataset_chunk_put(void *impl, void *upload, uint32_t c, uint32_t records,
                                  uint32_t crc, const void *bytes, size_t len, shoal_error *err);
int store__file_dataset_commit(void *impl, void *upload, const struct _bson_t *manifest,
                               shoal_error *err);
void store__file_dataset_abort(void *impl, void *upload);
int store__file_dataset_manifest_get(void *impl, const char *name, struct _bson_t *out,
                                     shoal_error *err);
int store__file_dataset_names(void *impl, char (**names)[STORE_NAME_MAX], size_t *n,
                              shoal_error *err);
int store__file_dataset_chunk_get(void *impl, const char *name, const char *upload, uint32_t c,
                                  void *buf, size_t cap, size_t *len, uint32_t *records,
                                  uint32_t *crc, shoal_error *err);
int store__file_dataset_delete(void *impl, const char *name, shoal_error *err);
int store__file_media_put(void *impl, const char *run, const char *name, const struct _bson_t *meta,
                          const void *bytes, size_t len, shoal_error *err);
int store__file_media_get(void *impl, const char *run, const char *name, struct _bson_t *meta,
                          void **bytes, size_t *len, shoal_error *err);
int store__file_media_list(void *impl, const char *run, struct _bson_t ***metas, size_t *n,
                           shoal_error *err);

#endif
