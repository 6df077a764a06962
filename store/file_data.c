/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/file_data.c — datasets and media in the file store.
 *
 *   DIR/_datasets/NAME/manifest.json        the manifest (written last)
 *   DIR/_datasets/NAME/chunk-<6 digits>.bin 32-byte header, then the payload:
 *        magic "SHDSCHNK", u32 version 1, u32 chunk, u32 records, u32 crc32,
 *        u64 payload bytes (little-endian)
 *   DIR/<run>/media/<name>, <name>.json     a media item and its metadata
 *
 * A dataset is written in DIR/_datasets/.tmp.<host>.<pid>.<n>.NAME/, each file fsynced,
 * and the folder renamed into place with RENAME_NOREPLACE, so a dataset appears whole
 * or not at all and two writers of one name cannot both win. Deleting renames the
 * folder out of sight (.del.<host>.<pid>.<n>.NAME) first. What a killed writer leaves
 * is removed by the next writer on the same host once that process is gone (another
 * host's folders are never touched: its pids mean nothing here). A media item is written
 * atomically and exclusively (so an existing one is never replaced) before its metadata is
 * written atomically beside it; listings read the metadata files, so an item shows once it
 * is whole.
 */
#define _GNU_SOURCE
#include <bson/bson.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "store/file_backend.h"

/* Chunk header: magic, version, chunk, records, crc32, payload bytes. */
enum { CHUNK_HEADER = 32, CHUNK_VERSION = 1 };
static const char chunk_magic[8] = {'S', 'H', 'D', 'S', 'C', 'H', 'N', 'K'};

static atomic_uint_fast64_t tmp_counter;

static int path_ok(int n, shoal_error *err) {
  if (n < 0 || n >= PATH_MAX) return shoal_error_set(err, SHOAL_EINVAL, "store: path too long");
  return 0;
}

/* Writes a then b (may be NULL) to path, which must not exist, and fsyncs it. */
static int write_new(const char *path, const void *a, size_t na, const void *b, size_t nb,
                     shoal_error *err) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return store__sys_err(err, errno, "cannot create", path);
  int e = store__write_all(fd, a, na), rc = 0;
  if (!e && b) e = store__write_all(fd, b, nb);
  if (e)
    rc = store__sys_err(err, e, "cannot write", path);
  else if (fsync(fd) != 0)
    rc = store__sys_err(err, errno, "cannot fsync", path);
  if (close(fd) != 0 && !rc) rc = store__sys_err(err, errno, "cannot close", path);
  if (rc) unlink(path);
  return rc;
}

/* Removes .tmp.<host>.<pid>.* and .del.<host>.<pid>.* folders in dir left by dead
 * processes of this host. */
static void sweep_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  const char *h = shoal_file_host_tag();
  size_t hl = strlen(h);
  struct dirent *de;
  char p[PATH_MAX];
  while ((de = readdir(d))) {
    const char *n = de->d_name;
    if (strncmp(n, ".tmp.", 5) && strncmp(n, ".del.", 5)) continue;
    if (strncmp(n + 5, h, hl) || n[5 + hl] != '.') continue;
    char *end;
    long pid = strtol(n + 6 + hl, &end, 10);
    if (pid <= 0 || *end != '.' || pid == (long)getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    if (snprintf(p, sizeof p, "%s/%s", dir, n) < (int)sizeof p) store__file_rm_flat_dir(p);
  }
  closedir(d);
}

/* Parses a JSON file into *doc (bson_init'ed on success only). */
static int json_load(const char *path, bson_t *doc, const char *what, shoal_error *err) {
  char *txt;
  size_t len;
  int rc = store__file_read(path, &txt, &len, err);
  if (rc) return rc;
  bson_error_t be;
  if (!bson_init_from_json(doc, txt, (ssize_t)len, &be))
    rc = shoal_error_set(err, SHOAL_EFORMAT, "store: %s: '%s' is not valid JSON: %s", what, path,
                         be.message);
  free(txt);
  return rc;
}

static char *json_text(const bson_t *doc, size_t *len) {
  return bson_as_relaxed_extended_json(doc, len);
}

/* ---- datasets ----------------------------------------------------------------------- */

typedef struct upload {
  char root[PATH_MAX]; /* DIR/_datasets */
  char tmp[PATH_MAX];  /* the folder being filled */
  char name[STORE_NAME_MAX];
  char id[48];
} upload;

int store__file_dataset_begin(void *impl, const char *name, void **out, shoal_error *err) {
  upload *u = calloc(1, sizeof *u);
  if (!u) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  unsigned long long c = (unsigned long long)atomic_fetch_add(&tmp_counter, 1);
  snprintf(u->name, sizeof u->name, "%s", name);
  snprintf(u->id, sizeof u->id, "%ld-%llu", (long)getpid(), c);
  int rc = path_ok(snprintf(u->root, sizeof u->root, "%s/_datasets", store__file_root(impl)), err);
  if (!rc)
    rc = path_ok(snprintf(u->tmp, sizeof u->tmp, "%s/.tmp.%s.%ld.%llu.%s", u->root,
                          shoal_file_host_tag(), (long)getpid(), c, name),
                 err);
  if (!rc) rc = store__file_mkdir(u->root, err);
  if (!rc) sweep_stale(u->root);
  if (!rc && mkdir(u->tmp, 0755) != 0)
    rc = store__sys_err(err, errno, "cannot create folder", u->tmp);
  if (rc) {
    free(u);
    return rc;
  }
  *out = u;
  return 0;
}

const char *store__file_dataset_upload_id(void *up) { return ((upload *)up)->id; }

int store__file_dataset_chunk_put(void *impl, void *up, uint32_t c, uint32_t records, uint32_t crc,
                                  const void *bytes, size_t len, shoal_error *err) {
  upload *u = up;
  char p[PATH_MAX];
  int rc = path_ok(snprintf(p, sizeof p, "%s/chunk-%06u.bin", u->tmp, c), err);
  if (rc) return rc;
  unsigned char h[CHUNK_HEADER] = {0};
  memcpy(h, chunk_magic, 8);
  store__put_le32(h + 8, CHUNK_VERSION);
  store__put_le32(h + 12, c);
  store__put_le32(h + 16, records);
  store__put_le32(h + 20, crc);
  store__put_le64(h + 24, len);
  return write_new(p, h, sizeof h, bytes, len, err);
}

void store__file_dataset_abort(void *impl, void *up) {
  upload *u = up;
  if (!u) return;
  store__file_rm_flat_dir(u->tmp);
  free(u);
}

int store__file_dataset_commit(void *impl, void *up, const bson_t *manifest, shoal_error *err) {
  upload *u = up;
  char p[PATH_MAX], dst[PATH_MAX];
  size_t len;
  char *txt = json_text(manifest, &len);
  int rc = txt ? 0 : shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  if (!rc) rc = path_ok(snprintf(p, sizeof p, "%s/manifest.json", u->tmp), err);
  if (!rc) rc = path_ok(snprintf(dst, sizeof dst, "%s/%s", u->root, u->name), err);
  if (!rc) rc = write_new(p, txt, len, "\n", 1, err);
  if (!rc) rc = store__file_fsync_dir(u->tmp, err);
  if (!rc && renameat2(AT_FDCWD, u->tmp, AT_FDCWD, dst, RENAME_NOREPLACE) != 0) {
    int e = errno;
    if (e == EEXIST || e == ENOTEMPTY)
      rc = shoal_error_set(err, SHOAL_EEXIST, "store: dataset '%s' exists ('%s')", u->name, dst);
    else
      rc = store__sys_err(err, e, "cannot rename a dataset into", dst);
  }
  if (!rc) rc = store__file_fsync_dir(u->root, err);
  bson_free(txt);
  if (rc)
    store__file_dataset_abort(impl, u);
  else
    free(u);
  return rc;
}

static int ds_dir(void *impl, const char *name, char *out, shoal_error *err) {
  return path_ok(snprintf(out, PATH_MAX, "%s/_datasets/%s", store__file_root(impl), name), err);
}

int store__file_dataset_manifest_get(void *impl, const char *name, bson_t *out, shoal_error *err) {
  char d[PATH_MAX], p[PATH_MAX];
  int rc = ds_dir(impl, name, d, err);
  if (!rc) rc = path_ok(snprintf(p, sizeof p, "%s/manifest.json", d), err);
  if (rc) return rc;
  struct stat sb;
  if (stat(d, &sb) != 0)
    return shoal_error_set(err, SHOAL_ENOENT, "store: no dataset '%s' in '%s'", name,
                           store__file_root(impl));
  if (stat(p, &sb) != 0)
    return shoal_error_set(err, SHOAL_EFORMAT, "store: dataset '%s': its manifest '%s' is missing",
                           name, p);
  char what[128];
  snprintf(what, sizeof what, "dataset '%s': damaged manifest", name);
  return json_load(p, out, what, err);
}

int store__file_dataset_names(void *impl, char (**names)[STORE_NAME_MAX], size_t *n,
                              shoal_error *err) {
  char d[PATH_MAX];
  int rc = path_ok(snprintf(d, sizeof d, "%s/_datasets", store__file_root(impl)), err);
  if (rc) return rc;
  *names = NULL, *n = 0;
  DIR *dir = opendir(d);
  if (!dir) return errno == ENOENT ? 0 : store__sys_err(err, errno, "cannot list", d);
  char(*arr)[STORE_NAME_MAX] = NULL;
  size_t k = 0, cap = 0;
  struct dirent *de;
  while (!rc && (de = readdir(dir))) {
    if (!store_name_valid(de->d_name)) continue; /* ".", "..", temporary folders */
    if ((rc = store__grow((void **)&arr, &cap, k, sizeof *arr)))
      shoal_error_set(err, rc, "store: out of memory");
    else
      memcpy(arr[k++], de->d_name, strlen(de->d_name) + 1); /* valid: < STORE_NAME_MAX */
  }
  closedir(dir);
  if (rc) {
    free(arr);
    return rc;
  }
  *names = arr, *n = k;
  return 0;
}

int store__file_dataset_chunk_get(void *impl, const char *name, const char *upload_id, uint32_t c,
                                  void *buf, size_t cap, size_t *len, uint32_t *records,
                                  uint32_t *crc, shoal_error *err) {
  char d[PATH_MAX], p[PATH_MAX];
  int rc = ds_dir(impl, name, d, err);
  if (!rc) rc = path_ok(snprintf(p, sizeof p, "%s/chunk-%06u.bin", d, c), err);
  if (rc) return rc;
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return shoal_error_set(err, e == ENOENT ? SHOAL_ENOENT : SHOAL_EIO,
                           "store: dataset '%s' chunk %u: cannot open '%s': %s", name, c, p,
                           strerror(e));
  }
  unsigned char h[CHUNK_HEADER];
  struct stat sb;
  int e = store__read_all(fd, h, sizeof h);
  if (e > 0) {
    rc = store__sys_err(err, e, "cannot read", p);
  } else if (e < 0) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "store: dataset '%s' chunk %u: '%s' is shorter than its header", name, c,
                         p);
  } else if (memcmp(h, chunk_magic, 8) != 0) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "store: dataset '%s' chunk %u: '%s' has a bad magic (not a shoal "
                         "dataset chunk)",
                         name, c, p);
  } else if (store__get_le32(h + 8) != CHUNK_VERSION) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "store: dataset '%s' chunk %u: '%s' has format version %u (this shoal "
                         "reads %d)",
                         name, c, p, store__get_le32(h + 8), CHUNK_VERSION);
  } else if (store__get_le32(h + 12) != c) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "store: dataset '%s' chunk %u: '%s' says it is chunk %u", name, c, p,
                         store__get_le32(h + 12));
  } else if (store__get_le64(h + 24) > cap || fstat(fd, &sb) != 0 ||
             (uint64_t)sb.st_size != CHUNK_HEADER + store__get_le64(h + 24)) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "store: dataset '%s' chunk %u: '%s' is %lld bytes, its header says "
                         "%llu of data (truncated or damaged)",
                         name, c, p, (long long)sb.st_size,
                         (unsigned long long)store__get_le64(h + 24));
  } else if ((e = store__read_all(fd, buf, (size_t)store__get_le64(h + 24))) != 0) {
    rc = e < 0 ? shoal_error_set(err, SHOAL_EFORMAT, "store: dataset '%s' chunk %u: '%s' shrank",
                                 name, c, p)
               : store__sys_err(err, e, "cannot read", p);
  } else {
    *len = (size_t)store__get_le64(h + 24);
    *records = store__get_le32(h + 16);
    *crc = store__get_le32(h + 20);
  }
  close(fd);
  return rc;
}

int store__file_dataset_delete(void *impl, const char *name, shoal_error *err) {
  char d[PATH_MAX], gone[PATH_MAX];
  unsigned long long c = (unsigned long long)atomic_fetch_add(&tmp_counter, 1);
  int rc = ds_dir(impl, name, d, err);
  if (!rc)
    rc = path_ok(snprintf(gone, sizeof gone, "%s/_datasets/.del.%s.%ld.%llu.%s",
                          store__file_root(impl), shoal_file_host_tag(), (long)getpid(), c, name),
                 err);
  if (rc) return rc;
  if (rename(d, gone) != 0) {
    if (errno == ENOENT)
      return shoal_error_set(err, SHOAL_ENOENT, "store: no dataset '%s' in '%s'", name,
                             store__file_root(impl));
    return store__sys_err(err, errno, "cannot remove dataset", d);
  }
  store__file_rm_flat_dir(gone);
  return 0;
}

/* ---- media -------------------------------------------------------------------------- */

int store__file_media_put(void *impl, const char *run, const char *name, const bson_t *meta,
                          const void *bytes, size_t len, shoal_error *err) {
  char dir[PATH_MAX], dst[PATH_MAX], mname[STORE_MEDIA_NAME_MAX + 8];
  int rc = path_ok(snprintf(dir, sizeof dir, "%s/%s/media", store__file_root(impl), run), err);
  if (!rc) rc = path_ok(snprintf(dst, sizeof dst, "%s/%s", dir, name), err);
  if (!rc) rc = store__file_mkdir(dir, err);
  if (!rc) rc = store__file_write_atomic(dir, name, bytes, len, NULL, 0, 1, err);
  if (rc == SHOAL_EEXIST)
    return shoal_error_set(err, SHOAL_EEXIST, "store: media '%s' of run '%s' exists", name, run);
  if (rc) return rc;
  snprintf(mname, sizeof mname, "%s.json", name);
  size_t tl;
  char *txt = json_text(meta, &tl);
  rc = txt ? store__file_write_atomic(dir, mname, txt, tl, "\n", 1, 0, err)
           : shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  bson_free(txt);
  if (rc) unlink(dst); /* without its metadata the item would block its name for good */
  return rc;
}

int store__file_media_get(void *impl, const char *run, const char *name, bson_t *meta, void **bytes,
                          size_t *len, shoal_error *err) {
  char dst[PATH_MAX], mdst[PATH_MAX];
  int rc =
      path_ok(snprintf(dst, sizeof dst, "%s/%s/media/%s", store__file_root(impl), run, name), err);
  if (!rc) rc = path_ok(snprintf(mdst, sizeof mdst, "%s.json", dst), err);
  if (rc) return rc;
  struct stat sb;
  if (stat(mdst, &sb) != 0)
    return shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' has no media '%s'", run, name);
  char what[200];
  snprintf(what, sizeof what, "media '%s' of run '%s': damaged metadata", name, run);
  if ((rc = json_load(mdst, meta, what, err))) return rc;
  char *b;
  if ((rc = store__file_read(dst, &b, len, err))) {
    bson_destroy(meta);
    return rc;
  }
  *bytes = b;
  return 0;
}

int store__file_media_list(void *impl, const char *run, bson_t ***metas, size_t *n,
                           shoal_error *err) {
  char dir[PATH_MAX], p[PATH_MAX];
  int rc = path_ok(snprintf(dir, sizeof dir, "%s/%s/media", store__file_root(impl), run), err);
  if (rc) return rc;
  *metas = NULL, *n = 0;
  DIR *d = opendir(dir);
  if (!d) {
    if (errno != ENOENT) return store__sys_err(err, errno, "cannot list", dir);
    char rd[PATH_MAX];
    struct stat sb;
    if (path_ok(snprintf(rd, sizeof rd, "%s/%s", store__file_root(impl), run), NULL) == 0 &&
        stat(rd, &sb) != 0)
      return shoal_error_set(err, SHOAL_ENOENT, "store: no run '%s'", run);
    return 0;
  }
  bson_t **arr = NULL; /* pointers: a bson_t must not move once it holds heap memory */
  size_t k = 0, cap = 0;
  struct dirent *de;
  while (!rc && (de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (de->d_name[0] == '.' || l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
    if ((rc = store__grow((void **)&arr, &cap, k, sizeof *arr))) {
      shoal_error_set(err, rc, "store: out of memory");
      break;
    }
    if ((rc = path_ok(snprintf(p, sizeof p, "%s/%s", dir, de->d_name), err))) break;
    bson_t doc;
    if ((rc = json_load(p, &doc, "media metadata", err))) break;
    if (!(arr[k] = bson_copy(&doc)))
      rc = shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
    bson_destroy(&doc);
    if (rc) break;
    k++;
  }
  closedir(d);
  if (rc) {
    for (size_t i = 0; i < k; i++) bson_destroy(arr[i]);
    free(arr);
    return rc;
  }
  *metas = arr, *n = k;
  return 0;
}
