/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/file.c — the file backend: one folder per run, and the backend's table.
 *
 *   DIR/<run>/config.yaml                   the resolved config, as given
 *   DIR/<run>/run.json                      {"format":"shoal-run","version":1,"id","status",...}
 *   DIR/<run>/snapshots/<version>.safetensors
 *   DIR/<run>/snapshots/index.json          the snapshots that exist and their metadata
 *   DIR/<run>/replay/<seq, 20 digits>.bin   32-byte header (magic, version 2, crc32c, seq,
 *                                           length) and the segment's bytes
 *   DIR/<run>/replay/.spare.<seq>.bin       a trimmed segment kept to write a new one into
 *                                           (see FILE_SPARES and file_replay_trim)
 *   DIR/<run>/metrics.csv                   "# shoal-metrics 1", then step,time,name,value
 *   DIR/_sweeps/<sweep>/<trial>/            trial.json, claim.<k>, requeue.<k>, done.json
 *   DIR/<run>/segments/, DIR/<run>/media/, DIR/_datasets/
 *                                           experience segments (file_segments.c), media
 *                                           and datasets (file_data.c)
 *
 * Every file is written to a temporary name in its folder, fsynced, renamed (or
 * linked, when it must not exist yet) into place, and the folder fsynced, so a crash
 * leaves either the old or the new file. A run and a trial are built in a temporary
 * folder that is renamed into place, so they appear whole. The snapshot index is
 * rewritten under an flock and only after the snapshot file is in place: a crash in
 * between leaves an orphan file that the index does not name, and the previous
 * snapshots stay readable. metrics.csv is appended to under an flock with one write
 * per batch; a torn last line left by a crash is cut off by the next append.
 *
 * Trials are claimed without locks, so this also holds on NFS: attempt k of a trial
 * belongs to whoever creates claim.<k> first (link() of a written temp file fails with
 * EEXIST for everyone else). Requeueing a stale attempt creates requeue.<k> (O_EXCL),
 * after which claim.<k+1> may be made; completing creates done.json (link).
 */
#define _GNU_SOURCE
#include <bson/bson.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/crc32c.h"
#include "common/file.h"
#include "store/file_backend.h"

enum { FILE_LEASES = 8 };
/* Trimmed replay segments kept as spares, at most, a process's whole. The log trims at
 * each checkpoint what was written since the one before, and those spares take the
 * writes until the next: the disk then holds what it held before the trim, never more.
 * SHOAL_STORE_SPARES=N (0..64) sets fewer; 0 removes every trimmed segment. */
enum { FILE_SPARES = 64 };

/* Replay segments are written around the page cache (O_DIRECT, shoal_file_tmp_direct):
 * a log writes them once, at the ingest rate, and reads them only to restore or follow,
 * so the cache's copy of every byte and its write-back cost CPU for nothing. Measured on
 * ext4 (2 cores), a 4 MiB segment took 3.2 ms of CPU written through the cache and 0.8
 * ms direct. SHOAL_STORE_DIRECT=0 writes them through the cache (a follower on the same
 * machine then reads them from memory); a filesystem without direct writes (tmpfs on older
 * kernels, some network filesystems) gets them through the cache anyway. */

typedef struct file_store {
  char root[PATH_MAX];
  int sync_metrics; /* fsync metrics.csv after each append */
  int direct;       /* replay segments written around the page cache (above) */
  /* The run leases this process holds: each an open lock file under flock. */
  pthread_mutex_t lease_mu;
  struct {
    char run[STORE_NAME_MAX];
    int fd;
  } leases[FILE_LEASES];
  /* Spare files this process may write replay segments into (replay/.spare.<seq>.bin). */
  pthread_mutex_t spare_mu;
  struct {
    char run[STORE_NAME_MAX];
    uint64_t seq;
  } spares[FILE_SPARES];
  int n_spares, max_spares;
} file_store;

/* Version 2's header checks the bytes with CRC32C (the crc32 instruction); version 1's
 * CRC-32 (zlib) is still read. */
enum { REPLAY_HEADER = 32, REPLAY_VERSION = 2 };
static const char REPLAY_MAGIC[8] = {'S', 'H', 'R', 'P', 'S', 'E', 'G', 0};
#define METRICS_MAGIC "# shoal-metrics 1\n"
#define METRICS_HEADER METRICS_MAGIC "step,time,name,value\n"

static atomic_uint_fast64_t tmp_counter;

const char *store__file_root(void *impl) { return ((file_store *)impl)->root; }

/* ---- errors and paths ---------------------------------------------------- */

int store__sys_err(shoal_error *err, int e, const char *what, const char *path) {
  int code = e == ENOENT ? SHOAL_ENOENT : e == EEXIST ? SHOAL_EEXIST : SHOAL_EIO;
  return shoal_error_set(err, code, "store: %s '%s': %s", what, path, strerror(e));
}

static int path_fmt(char *out, shoal_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int path_fmt(char *out, shoal_error *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, PATH_MAX, fmt, ap);
  va_end(ap);
  if (n < 0 || n >= PATH_MAX)
    return shoal_error_set(err, SHOAL_EINVAL, "store: path too long under '%.200s'", out);
  return 0;
}

int store__file_fsync_dir(const char *dir, shoal_error *err) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return store__sys_err(err, errno, "cannot open folder", dir);
  int rc = 0;
  if (fsync(fd) != 0 && errno != EINVAL)
    rc = store__sys_err(err, errno, "cannot fsync folder", dir);
  close(fd);
  return rc;
}

int store__write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

int store__read_all(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len) {
    ssize_t r = read(fd, p, len > (1u << 30) ? (1u << 30) : len);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) return -1; /* shorter than expected */
    p += r;
    len -= (size_t)r;
  }
  return 0;
}

/* As store__file_write_atomic, written into the file spare when it is there (a trimmed
 * replay segment: shoal_file_tmp_reuse), around the page cache when direct
 * (shoal_file_tmp_direct). */
static int write_atomic(const char *dir, const char *name, const char *spare, int direct,
                        const void *a, size_t na, const void *b, size_t nb, int exclusive,
                        shoal_error *err) {
  char dst[PATH_MAX];
  int rc = path_fmt(dst, err, "%s/%s", dir, name);
  if (rc) return rc;
  shoal_file_tmp t;
  shoal_error e = {0};
  rc = shoal_file_tmp_reuse(&t, dst, spare, &e);
  if (!rc && direct) shoal_file_tmp_direct(&t);
  if (!rc) rc = shoal_file_tmp_write(&t, a, na, &e);
  if (!rc && b) rc = shoal_file_tmp_write(&t, b, nb, &e);
  if (rc)
    shoal_file_tmp_abort(&t);
  else
    rc = shoal_file_tmp_commit(&t, exclusive ? SHOAL_FILE_EXCL : SHOAL_FILE_REPLACE, &e);
  /* The helper's messages are the store's own, less the prefix. */
  if (rc) shoal_error_set(err, rc, "store: %s", e.msg);
  return rc;
}

int store__file_write_atomic(const char *dir, const char *name, const void *a, size_t na,
                             const void *b, size_t nb, int exclusive, shoal_error *err) {
  return write_atomic(dir, name, NULL, 0, a, na, b, nb, exclusive, err);
}

int store__file_read(const char *path, char **out, size_t *len, shoal_error *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return store__sys_err(err, errno, "cannot open", path);
  struct stat sb;
  int rc = 0;
  char *buf = NULL;
  if (fstat(fd, &sb) != 0) {
    rc = store__sys_err(err, errno, "cannot stat", path);
    goto done;
  }
  buf = malloc((size_t)sb.st_size + 1);
  if (!buf) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory reading '%s' (%lld bytes)", path,
                         (long long)sb.st_size);
    goto done;
  }
  int e = store__read_all(fd, buf, (size_t)sb.st_size);
  if (e) {
    rc = e < 0 ? shoal_error_set(err, SHOAL_EFORMAT, "store: '%s' shrank while being read", path)
               : store__sys_err(err, e, "cannot read", path);
    goto done;
  }
  buf[sb.st_size] = 0;
  *out = buf;
  *len = (size_t)sb.st_size;
  buf = NULL;
done:
  free(buf);
  close(fd);
  return rc;
}

static int mkdir_p(const char *path, shoal_error *err) {
  char p[PATH_MAX];
  int rc = path_fmt(p, err, "%s", path);
  if (rc) return rc;
  for (char *s = p + 1;; s++) {
    if (*s == '/' || *s == 0) {
      char c = *s;
      *s = 0;
      if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        struct stat sb;
        if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
          return store__sys_err(err, e, "cannot create folder", p);
      }
      *s = c;
      if (!c) break;
    }
  }
  struct stat sb;
  if (stat(p, &sb) != 0) return store__sys_err(err, errno, "cannot stat", p);
  if (!S_ISDIR(sb.st_mode))
    return shoal_error_set(err, SHOAL_EIO, "store: '%s' is not a folder", p);
  return 0;
}

void store__file_rm_flat_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *de;
    char p[PATH_MAX];
    while ((de = readdir(d)))
      if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
          snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < (int)sizeof p) {
        if (unlink(p) != 0 && errno == EISDIR) rmdir(p);
        rmdir(p);
      }
    closedir(d);
  }
  rmdir(dir);
}

int store__file_mkdir(const char *p, shoal_error *err) {
  if (mkdir(p, 0755) != 0 && errno != EEXIST)
    return store__sys_err(err, errno, "cannot create folder", p);
  return 0;
}

/* An flock on dir/.lock, held until unlock_file. */
static int lock_file(const char *dir, int *fd_out, shoal_error *err) {
  char p[PATH_MAX];
  int rc = path_fmt(p, err, "%s/.lock", dir);
  if (rc) return rc;
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fd = open(p, O_RDONLY | O_CLOEXEC); /* a read-only store still reads */
  if (fd < 0) return store__sys_err(err, errno, "cannot open lock", p);
  while (flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    rc = store__sys_err(err, errno, "cannot lock", p);
    close(fd);
    return rc;
  }
  *fd_out = fd;
  return 0;
}

static void unlock_file(int fd) {
  flock(fd, LOCK_UN);
  close(fd);
}

/* ---- JSON through libbson --------------------------------------------------------- */

static int json_write(const char *dir, const char *name, const bson_t *doc, int exclusive,
                      shoal_error *err) {
  size_t len = 0;
  char *js = bson_as_relaxed_extended_json(doc, &len);
  if (!js)
    return shoal_error_set(err, SHOAL_EINVAL, "store: '%s/%s': text is not valid UTF-8", dir, name);
  int rc = store__file_write_atomic(dir, name, js, len, "\n", 1, exclusive, err);
  bson_free(js);
  return rc;
}

/* Reads dir/name as JSON into doc (bson_destroy it) and checks format and version. */
static int json_read(const char *path, const char *format, bson_t *doc, shoal_error *err) {
  char *buf = NULL;
  size_t len = 0;
  int rc = store__file_read(path, &buf, &len, err);
  if (rc) return rc;
  bson_error_t be;
  if (!bson_init_from_json(doc, buf, (ssize_t)len, &be)) {
    free(buf);
    return shoal_error_set(err, SHOAL_EFORMAT, "store: '%s' is not valid JSON: %s", path,
                           be.message);
  }
  free(buf);
  bson_iter_t it;
  const char *f = NULL;
  if (bson_iter_init_find(&it, doc, "format") && BSON_ITER_HOLDS_UTF8(&it))
    f = bson_iter_utf8(&it, NULL);
  int64_t v = 0;
  if (bson_iter_init_find(&it, doc, "version")) v = bson_iter_as_int64(&it);
  if (!f || strcmp(f, format) != 0 || v != 1) {
    bson_destroy(doc);
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: '%s': format '%s' version %lld (expected '%s' version 1)", path,
                           f ? f : "(none)", (long long)v, format);
  }
  return 0;
}

static const char *jstr(const bson_t *doc, const char *key) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_UTF8(&it))
    return bson_iter_utf8(&it, NULL);
  return NULL;
}

static double jnum(const bson_iter_t *it) {
  if (BSON_ITER_HOLDS_DOUBLE(it)) return bson_iter_double(it);
  return (double)bson_iter_as_int64(it);
}

static double jdouble(const bson_t *doc, const char *key, double dflt) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, doc, key)) return jnum(&it);
  return dflt;
}

static int64_t jint(const bson_t *doc, const char *key, int64_t dflt) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, doc, key)) return bson_iter_as_int64(&it);
  return dflt;
}

static void jformat(bson_t *doc, const char *format) {
  BSON_APPEND_UTF8(doc, "format", format);
  BSON_APPEND_INT32(doc, "version", 1);
}

/* ---- open ---------------------------------------------------------------- */

static int file_open(void **impl, const char *uri, const store_uri_info *u, bool lazy,
                     shoal_error *err) {
  (void)uri, (void)lazy; /* a folder is there or not */
  file_store *fs = calloc(1, sizeof *fs);
  if (!fs) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  snprintf(fs->root, sizeof fs->root, "%s", u->dir);
  fs->sync_metrics = u->sync_metrics;
  pthread_mutex_init(&fs->lease_mu, NULL);
  pthread_mutex_init(&fs->spare_mu, NULL);
  const char *dio = getenv("SHOAL_STORE_DIRECT");
  fs->direct = !(dio && !strcmp(dio, "0"));
  const char *sp = getenv("SHOAL_STORE_SPARES");
  fs->max_spares = sp && *sp ? atoi(sp) : FILE_SPARES;
  if (fs->max_spares < 0) fs->max_spares = 0;
  if (fs->max_spares > FILE_SPARES) fs->max_spares = FILE_SPARES;
  for (int i = 0; i < FILE_LEASES; i++) fs->leases[i].fd = -1;
  int rc = mkdir_p(fs->root, err);
  if (rc) {
    pthread_mutex_destroy(&fs->lease_mu);
    pthread_mutex_destroy(&fs->spare_mu);
    free(fs);
    return rc;
  }
  *impl = fs;
  return 0;
}

static int spare_path(const file_store *fs, const char *run, uint64_t seq, char *out,
                      shoal_error *err);

static void file_close(void *impl) {
  file_store *fs = impl;
  for (int i = 0; i < FILE_LEASES; i++)
    if (fs->leases[i].fd >= 0) close(fs->leases[i].fd); /* the kernel lets go of the flock */
  /* A store closed cleanly leaves no spares behind (a crash's are taken up by the next
   * trim of their run). */
  for (int i = 0; i < fs->n_spares; i++) {
    char p[PATH_MAX];
    if (!spare_path(fs, fs->spares[i].run, fs->spares[i].seq, p, NULL)) unlink(p);
  }
  pthread_mutex_destroy(&fs->lease_mu);
  pthread_mutex_destroy(&fs->spare_mu);
  free(fs);
}

static void sweep_stale_tmp(const char *dir);

/* ---- the run's lease: ROOT/.leases/RUN.lock held with flock(2) --------------------------- */

/* The slot of run's lease in fs->leases, or -1 (called with lease_mu held). */
static int lease_slot(file_store *fs, const char *run) {
  for (int i = 0; i < FILE_LEASES; i++)
    if (fs->leases[i].fd >= 0 && !strcmp(fs->leases[i].run, run)) return i;
  return -1;
}

/* Writes who holds the lease into its lock file (a note for whoever is refused), through
 * a descriptor of its own: the lock is held on a read-only one, so that a held lease
 * does not stop the file system from being remounted read-only. */
static int lease_note(const char *path, double started, bool stopping, shoal_error *err) {
  char host[64] = "?", text[256];
  gethostname(host, sizeof host - 1);
  int n = snprintf(text, sizeof text, "host=%s pid=%ld started=%.3f stopping=%d\n", host,
                   (long)getpid(), started, stopping ? 1 : 0);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  int rc = fd < 0 || pwrite(fd, text, (size_t)n, 0) != n || ftruncate(fd, n) != 0;
  rc = rc ? store__sys_err(err, errno, "cannot write lease", path) : 0;
  if (fd >= 0) close(fd);
  return rc;
}

static void lease_read(int fd, store_lease_holder *h) {
  char text[256] = "";
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  text[n > 0 ? n : 0] = 0;
  long long pid = 0;
  int stopping = 0;
  memset(h, 0, sizeof *h);
  snprintf(h->host, sizeof h->host, "?");
  char host[64];
  if (sscanf(text, "host=%63s pid=%lld started=%lf stopping=%d", host, &pid, &h->started,
             &stopping) == 4)
    snprintf(h->host, sizeof h->host, "%s", host);
  h->pid = pid;
  h->stopping = stopping != 0;
}

static int lease_path(file_store *fs, const char *run, char *p, shoal_error *err) {
  char dir[PATH_MAX];
  int rc = path_fmt(dir, err, "%s/.leases", fs->root);
  if (!rc && mkdir(dir, 0755) != 0 && errno != EEXIST)
    rc = store__sys_err(err, errno, "cannot create folder", dir);
  return rc ? rc : path_fmt(p, err, "%s/%s.lock", dir, run);
}

static int file_lease_take(void *impl, const char *run, double ttl, store_lease_holder *holder,
                           shoal_error *err) {
  (void)ttl; /* held while this process lives */
  file_store *fs = impl;
  char p[PATH_MAX];
  int rc = lease_path(fs, run, p, err);
  if (rc) return rc;
  pthread_mutex_lock(&fs->lease_mu);
  int slot = lease_slot(fs, run), fd = -1;
  if (slot >= 0) {
    fd = fs->leases[slot].fd;
    lease_read(fd, holder);
    rc = lease_note(p, holder->started, false, err);
    goto done;
  }
  for (slot = 0; slot < FILE_LEASES && fs->leases[slot].fd >= 0;) slot++;
  if (slot == FILE_LEASES) {
    rc = shoal_error_set(err, SHOAL_EFULL, "store: this process holds %d leases already",
                         FILE_LEASES);
    goto done;
  }
  fd = open(p, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = store__sys_err(err, errno, "cannot open lease", p);
    goto done;
  }
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    rc = errno == EWOULDBLOCK ? (lease_read(fd, holder), store__lease_held(run, holder, err))
                              : store__sys_err(err, errno, "cannot lock lease", p);
    close(fd);
    goto done;
  }
  double now = store__wall_time();
  if ((rc = lease_note(p, now, false, err))) {
    close(fd);
    goto done;
  }
  snprintf(fs->leases[slot].run, sizeof fs->leases[slot].run, "%s", run);
  fs->leases[slot].fd = fd;
  lease_read(fd, holder);
done:
  pthread_mutex_unlock(&fs->lease_mu);
  return rc;
}

static int file_lease_renew(void *impl, const char *run, double ttl, bool stopping,
                            shoal_error *err) {
  (void)ttl;
  file_store *fs = impl;
  char p[PATH_MAX];
  int rc = lease_path(fs, run, p, err);
  if (rc) return rc;
  pthread_mutex_lock(&fs->lease_mu);
  int slot = lease_slot(fs, run);
  if (slot < 0) {
    rc = shoal_error_set(err, SHOAL_ESTATE, "store: run '%s': this process holds no lease", run);
  } else {
    store_lease_holder h;
    lease_read(fs->leases[slot].fd, &h);
    rc = lease_note(p, h.started, stopping, err);
  }
  pthread_mutex_unlock(&fs->lease_mu);
  return rc;
}

static int file_lease_release(void *impl, const char *run, shoal_error *err) {
  (void)err;
  file_store *fs = impl;
  pthread_mutex_lock(&fs->lease_mu);
  int slot = lease_slot(fs, run);
  if (slot >= 0) {
    /* The file stays: a taker waiting on this inode must not lock one unlinked. */
    close(fs->leases[slot].fd);
    fs->leases[slot].fd = -1;
  }
  pthread_mutex_unlock(&fs->lease_mu);
  return 0;
}

/* ---- runs ---------------------------------------------------------------- */

static int run_json_doc(bson_t *doc, const char *id, int status, double created, double updated) {
  bson_init(doc);
  jformat(doc, "shoal-run");
  BSON_APPEND_UTF8(doc, "id", id);
  BSON_APPEND_UTF8(doc, "status", store_run_status_name(status));
  BSON_APPEND_DOUBLE(doc, "created", created);
  BSON_APPEND_DOUBLE(doc, "updated", updated);
  return 0;
}

static int status_from_name(const char *s) {
  for (int i = STORE_RUN_CREATED; i <= STORE_RUN_STOPPED; i++)
    if (s && strcmp(s, store_run_status_name(i)) == 0) return i;
  return -1;
}

static int file_run_create(void *impl, const char *id, const char *config, int status,
                           shoal_error *err) {
  file_store *fs = impl;
  char tmp[PATH_MAX], dst[PATH_MAX], sub[PATH_MAX];
  unsigned long long c = (unsigned long long)atomic_fetch_add(&tmp_counter, 1);
  int rc = path_fmt(tmp, err, "%s/.tmp.run.%s.%s.%ld.%llu", fs->root, id, shoal_file_host_tag(),
                    (long)getpid(), c);
  if (!rc) rc = path_fmt(dst, err, "%s/%s", fs->root, id);
  if (rc) return rc;
  struct stat sb;
  if (stat(dst, &sb) == 0)
    return shoal_error_set(err, SHOAL_EEXIST, "store: run '%s' exists in '%s'", id, fs->root);
  sweep_stale_tmp(fs->root);
  if (mkdir(tmp, 0755) != 0) return store__sys_err(err, errno, "cannot create folder", tmp);
  double now = store__wall_time();
  bson_t doc;
  run_json_doc(&doc, id, status, now, now);
  rc = store__file_write_atomic(tmp, "config.yaml", config, strlen(config), NULL, 0, 0, err);
  if (!rc) rc = json_write(tmp, "run.json", &doc, 0, err);
  bson_destroy(&doc);
  if (!rc) rc = path_fmt(sub, err, "%s/snapshots", tmp);
  if (!rc && mkdir(sub, 0755) != 0) rc = store__sys_err(err, errno, "cannot create folder", sub);
  if (!rc) rc = path_fmt(sub, err, "%s/replay", tmp);
  if (!rc && mkdir(sub, 0755) != 0) rc = store__sys_err(err, errno, "cannot create folder", sub);
  if (!rc) rc = store__file_fsync_dir(tmp, err);
  if (!rc && rename(tmp, dst) != 0) {
    int e = errno;
    rc = (e == EEXIST || e == ENOTEMPTY)
             ? shoal_error_set(err, SHOAL_EEXIST, "store: run '%s' exists in '%s'", id, fs->root)
             : store__sys_err(err, e, "cannot rename into", dst);
  }
  if (rc) {
    char s1[PATH_MAX];
    if (snprintf(s1, sizeof s1, "%s/snapshots", tmp) < (int)sizeof s1) rmdir(s1);
    if (snprintf(s1, sizeof s1, "%s/replay", tmp) < (int)sizeof s1) rmdir(s1);
    store__file_rm_flat_dir(tmp);
    return rc;
  }
  return store__file_fsync_dir(fs->root, err);
}

static int file_run_read(file_store *fs, const char *id, store_run *out, int with_config,
                         shoal_error *err) {
  char p[PATH_MAX];
  int rc = path_fmt(p, err, "%s/%s/run.json", fs->root, id);
  if (rc) return rc;
  bson_t doc;
  rc = json_read(p, "shoal-run", &doc, err);
  if (rc == SHOAL_ENOENT)
    return shoal_error_set(err, SHOAL_ENOENT, "store: no run '%s' in '%s'", id, fs->root);
  if (rc) return rc;
  int status = status_from_name(jstr(&doc, "status"));
  store_run r;
  memset(&r, 0, sizeof r);
  snprintf(r.id, sizeof r.id, "%s", id);
  r.status = status;
  r.created_time = jdouble(&doc, "created", 0);
  r.updated_time = jdouble(&doc, "updated", 0);
  bson_destroy(&doc);
  if (status < 0) return shoal_error_set(err, SHOAL_EFORMAT, "store: '%s': unknown status", p);
  if (with_config) {
    size_t len;
    rc = path_fmt(p, err, "%s/%s/config.yaml", fs->root, id);
    if (!rc) rc = store__file_read(p, &r.config, &len, err);
    if (rc) return rc;
  }
  *out = r;
  return 0;
}

static int file_run_set_config(void *impl, const char *id, const char *config, shoal_error *err) {
  file_store *fs = impl;
  char dir[PATH_MAX];
  store_run r;
  int rc = path_fmt(dir, err, "%s/%s", fs->root, id);
  if (!rc) rc = file_run_read(fs, id, &r, 0, err); /* SHOAL_ENOENT for no run */
  return rc ? rc
            : store__file_write_atomic(dir, "config.yaml", config, strlen(config), NULL, 0, 0, err);
}

static int file_run_find(void *impl, const char *id, store_run *out, shoal_error *err) {
  return file_run_read(impl, id, out, 1, err);
}

static int cmp_run(const void *a, const void *b) {
  return strcmp(((const store_run *)a)->id, ((const store_run *)b)->id);
}

static int file_run_list(void *impl, store_run **out, size_t *n, shoal_error *err) {
  file_store *fs = impl;
  DIR *d = opendir(fs->root);
  if (!d) return store__sys_err(err, errno, "cannot list", fs->root);
  store_run *arr = NULL;
  size_t k = 0, cap = 0;
  int rc = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!store_name_valid(de->d_name)) continue;
    store_run r;
    int e = file_run_read(fs, de->d_name, &r, 1, err);
    if (e == SHOAL_ENOENT) continue; /* a folder that is not a run */
    if (e) {
      rc = e;
      break;
    }
    if ((rc = store__grow((void **)&arr, &cap, k, sizeof *arr))) {
      store_run_clear(&r);
      shoal_error_set(err, rc, "store: out of memory listing runs");
      break;
    }
    arr[k++] = r;
  }
  closedir(d);
  if (rc) {
    store_runs_free(arr, k);
    return rc;
  }
  if (k) qsort(arr, k, sizeof *arr, cmp_run);
  *out = arr;
  *n = k;
  return 0;
}

static int file_run_set_status(void *impl, const char *id, int status, shoal_error *err) {
  file_store *fs = impl;
  char dir[PATH_MAX];
  int rc = path_fmt(dir, err, "%s/%s", fs->root, id);
  if (rc) return rc;
  int lk;
  store_run r;
  rc = file_run_read(fs, id, &r, 0, err);
  if (rc) return rc;
  if ((rc = lock_file(dir, &lk, err))) return rc;
  rc = file_run_read(fs, id, &r, 0, err); /* again, under the lock */
  if (!rc) {
    bson_t doc;
    run_json_doc(&doc, id, status, r.created_time, store__wall_time());
    rc = json_write(dir, "run.json", &doc, 0, err);
    bson_destroy(&doc);
  }
  unlock_file(lk);
  return rc;
}

/* Removes the temporary files (and half-built run or trial folders) in dir left by
 * dead processes of this host (a crash mid-write), so their space comes back. Best
 * effort: failures are ignored. */
static void sweep_stale_tmp(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  const char *host = shoal_file_host_tag();
  size_t hl = strlen(host);
  struct dirent *de;
  while ((de = readdir(d))) {
    const char *n = de->d_name;
    if (strncmp(n, ".tmp.", 5) != 0) continue;
    const char *c = strrchr(n, '.'); /* .<counter> */
    const char *p = c;
    while (p > n && p[-1] != '.') p--; /* <pid> starts at p */
    if (p - n < (ptrdiff_t)(hl + 7) || strncmp(p - 1 - hl, host, hl) != 0 || p[-2 - hl] != '.')
      continue;
    char *e;
    long pid = strtol(p, &e, 10);
    if (e != c || pid <= 0 || pid == (long)getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char path[PATH_MAX], sub[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, n) >= (int)sizeof path) continue;
    if (unlink(path) != 0 && (errno == EISDIR || errno == EPERM)) {
      /* A run or trial folder being built: files and the empty snapshots/, replay/. */
      if (snprintf(sub, sizeof sub, "%s/snapshots", path) < (int)sizeof sub) rmdir(sub);
      if (snprintf(sub, sizeof sub, "%s/replay", path) < (int)sizeof sub) rmdir(sub);
      store__file_rm_flat_dir(path);
    }
  }
  closedir(d);
}

/* ---- snapshots ----------------------------------------------------------- */

static int cmp_snap(const void *a, const void *b) {
  int64_t x = ((const store_snapshot_meta *)a)->version;
  int64_t y = ((const store_snapshot_meta *)b)->version;
  return x < y ? -1 : x > y;
}

/* Reads the index of run into a new array sorted by version; a missing index is an
 * empty one. */
static int index_read(file_store *fs, const char *run, store_snapshot_meta **out, size_t *n,
                      shoal_error *err) {
  char p[PATH_MAX];
  int rc = path_fmt(p, err, "%s/%s/snapshots/index.json", fs->root, run);
  if (rc) return rc;
  bson_t doc;
  rc = json_read(p, "shoal-snapshots", &doc, err);
  if (rc == SHOAL_ENOENT) {
    *out = NULL;
    *n = 0;
    return 0;
  }
  if (rc) return rc;
  store_snapshot_meta *arr = NULL;
  size_t k = 0, cap = 0;
  bson_iter_t it, ai;
  if (bson_iter_init_find(&it, &doc, "snapshots") && BSON_ITER_HOLDS_ARRAY(&it) &&
      bson_iter_recurse(&it, &ai)) {
    while (bson_iter_next(&ai)) {
      const uint8_t *data;
      uint32_t dlen;
      bson_t e;
      if (!BSON_ITER_HOLDS_DOCUMENT(&ai)) continue;
      bson_iter_document(&ai, &dlen, &data);
      if (!bson_init_static(&e, data, dlen)) continue;
      if ((rc = store__grow((void **)&arr, &cap, k, sizeof *arr))) break;
      store_snapshot_meta m;
      memset(&m, 0, sizeof m);
      snprintf(m.run, sizeof m.run, "%s", run);
      m.version = jint(&e, "version", -1);
      m.env_steps = jint(&e, "env_steps", 0);
      m.updates = jint(&e, "updates", 0);
      m.wall_time = jdouble(&e, "wall_time", 0);
      m.score = jdouble(&e, "score", NAN);
      m.size = (uint64_t)jint(&e, "size", 0);
      if (m.version < 0) {
        rc = shoal_error_set(err, SHOAL_EFORMAT, "store: '%s': an entry has no version", p);
        break;
      }
      arr[k++] = m;
    }
  }
  bson_destroy(&doc);
  if (rc) {
    free(arr);
    return rc == SHOAL_ENOMEM ? shoal_error_set(err, rc, "store: out of memory reading '%s'", p)
                              : rc;
  }
  if (k) qsort(arr, k, sizeof *arr, cmp_snap);
  *out = arr;
  *n = k;
  return 0;
}

static int index_write(const char *dir, const store_snapshot_meta *arr, size_t n,
                       shoal_error *err) {
  bson_t doc, a;
  bson_init(&doc);
  jformat(&doc, "shoal-snapshots");
  BSON_APPEND_ARRAY_BEGIN(&doc, "snapshots", &a);
  for (size_t i = 0; i < n; i++) {
    char key[24];
    const char *k;
    bson_uint32_to_string((uint32_t)i, &k, key, sizeof key);
    bson_t e;
    bson_append_document_begin(&a, k, -1, &e);
    BSON_APPEND_INT64(&e, "version", arr[i].version);
    BSON_APPEND_INT64(&e, "env_steps", arr[i].env_steps);
    BSON_APPEND_INT64(&e, "updates", arr[i].updates);
    BSON_APPEND_DOUBLE(&e, "wall_time", arr[i].wall_time);
    BSON_APPEND_DOUBLE(&e, "score", arr[i].score);
    BSON_APPEND_INT64(&e, "size", (int64_t)arr[i].size);
    bson_append_document_end(&a, &e);
  }
  bson_append_array_end(&doc, &a);
  int rc = json_write(dir, "index.json", &doc, 0, err);
  bson_destroy(&doc);
  return rc;
}

static int file_snapshot_put(void *impl, const store_snapshot_meta *meta, const void *bytes,
                             size_t len, shoal_error *err) {
  file_store *fs = impl;
  char dir[PATH_MAX], name[64];
  int rc = path_fmt(dir, err, "%s/%s/snapshots", fs->root, meta->run);
  if (rc) return rc;
  snprintf(name, sizeof name, "%" PRId64 ".safetensors", meta->version);
  store_snapshot_meta *arr = NULL;
  size_t n = 0;
  /* Refuse an existing version before writing its bytes; checked again under the
   * lock, since another writer may race. */
  if ((rc = index_read(fs, meta->run, &arr, &n, err))) return rc;
  for (size_t i = 0; i < n; i++)
    if (arr[i].version == meta->version) {
      free(arr);
      return shoal_error_set(err, SHOAL_EEXIST, "store: run '%s' has snapshot %" PRId64 " already",
                             meta->run, meta->version);
    }
  free(arr);
  arr = NULL;
  if ((rc = mkdir_p(dir, err))) return rc;
  int lk;
  if ((rc = lock_file(dir, &lk, err))) return rc;
  sweep_stale_tmp(dir);
  if ((rc = index_read(fs, meta->run, &arr, &n, err))) goto done;
  for (size_t i = 0; i < n; i++)
    if (arr[i].version == meta->version) {
      rc = shoal_error_set(err, SHOAL_EEXIST, "store: run '%s' has snapshot %" PRId64 " already",
                           meta->run, meta->version);
      goto done;
    }
  /* Bytes first, then the index that names them. */
  if ((rc = store__file_write_atomic(dir, name, bytes, len, NULL, 0, 0, err))) goto done;
  store_snapshot_meta *grown = realloc(arr, (n + 1) * sizeof *arr);
  if (!grown) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
    goto done;
  }
  arr = grown;
  arr[n] = *meta;
  arr[n].size = len;
  n++;
  qsort(arr, n, sizeof *arr, cmp_snap);
  rc = index_write(dir, arr, n, err);
done:
  unlock_file(lk);
  free(arr);
  return rc;
}

/* Picks the entry for version (or STORE_LATEST / STORE_BEST) from a sorted index. */
static const store_snapshot_meta *snap_pick(const store_snapshot_meta *arr, size_t n,
                                            int64_t version) {
  const store_snapshot_meta *best = NULL;
  if (version == STORE_LATEST) return n ? &arr[n - 1] : NULL;
  for (size_t i = 0; i < n; i++) {
    if (version >= 0) {
      if (arr[i].version == version) return &arr[i];
    } else if (!isnan(arr[i].score) && (!best || arr[i].score >= best->score)) {
      best = &arr[i];
    }
  }
  return best;
}

static int file_snapshot_get(void *impl, const char *run, int64_t version,
                             store_snapshot_meta *meta, void **bytes, size_t *len,
                             shoal_error *err) {
  file_store *fs = impl;
  store_snapshot_meta *arr = NULL;
  size_t n = 0;
  int rc = index_read(fs, run, &arr, &n, err);
  if (rc) return rc;
  const store_snapshot_meta *m = snap_pick(arr, n, version);
  if (!m) {
    rc = version == STORE_BEST
             ? shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' has no snapshot with a score",
                               run)
         : version == STORE_LATEST
             ? shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' has no snapshot", run)
             : shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' has no snapshot %" PRId64, run,
                               version);
    free(arr);
    return rc;
  }
  char p[PATH_MAX];
  char *buf = NULL;
  size_t l = 0;
  rc = path_fmt(p, err, "%s/%s/snapshots/%" PRId64 ".safetensors", fs->root, run, m->version);
  if (!rc) rc = store__file_read(p, &buf, &l, err);
  if (!rc && l != m->size) {
    rc = shoal_error_set(err, SHOAL_EFORMAT, "store: '%s' has %zu bytes, its index says %" PRIu64,
                         p, l, m->size);
    free(buf);
  }
  if (!rc) {
    *meta = *m;
    *bytes = buf;
    *len = l;
  }
  free(arr);
  return rc;
}

static int file_snapshot_list(void *impl, const char *run, store_snapshot_meta **out, size_t *n,
                              shoal_error *err) {
  return index_read(impl, run, out, n, err);
}

/* ---- replay -------------------------------------------------------------- */

static int file_replay_append(void *impl, const char *run, uint64_t seq, const void *bytes,
                              size_t len, shoal_error *err) {
  file_store *fs = impl;
  char dir[PATH_MAX], name[40];
  int rc = path_fmt(dir, err, "%s/%s/replay", fs->root, run);
  if (rc) return rc;
  if ((rc = mkdir_p(dir, err))) return rc;
  snprintf(name, sizeof name, "%020" PRIu64 ".bin", seq);
  unsigned char h[REPLAY_HEADER];
  memcpy(h, REPLAY_MAGIC, 8);
  store__put_le32(h + 8, REPLAY_VERSION);
  store__put_le32(h + 12, shoal_crc32c(0, bytes, len));
  store__put_le64(h + 16, seq);
  store__put_le64(h + 24, len);
  char spare[PATH_MAX] = "";
  pthread_mutex_lock(&fs->spare_mu);
  for (int i = fs->n_spares; i-- > 0;)
    if (!strcmp(fs->spares[i].run, run)) {
      if (spare_path(fs, run, fs->spares[i].seq, spare, NULL)) spare[0] = 0;
      fs->spares[i] = fs->spares[--fs->n_spares];
      break;
    }
  pthread_mutex_unlock(&fs->spare_mu);
  rc =
      write_atomic(dir, name, spare[0] ? spare : NULL, fs->direct, h, sizeof h, bytes, len, 1, err);
  if (rc == SHOAL_EEXIST)
    return shoal_error_set(err, SHOAL_EEXIST,
                           "store: run '%s' has replay segment %" PRIu64 " already", run, seq);
  return rc;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int spare_path(const file_store *fs, const char *run, uint64_t seq, char *out,
                      shoal_error *err) {
  return path_fmt(out, err, "%s/%s/replay/.spare.%020" PRIu64 ".bin", fs->root, run, seq);
}

/* Reads the 20 digits at s as a seq into *v; false when they are not all digits. */
static bool seq_digits(const char *s, uint64_t *v) {
  *v = 0;
  for (int i = 0; i < 20; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    *v = *v * 10 + (uint64_t)(s[i] - '0');
  }
  return true;
}

/* Adds run's spare seq to fs's (spare_mu held, room checked). */
static void spare_add(file_store *fs, const char *run, uint64_t seq) {
  snprintf(fs->spares[fs->n_spares].run, STORE_NAME_MAX, "%s", run);
  fs->spares[fs->n_spares++].seq = seq;
}

/* Whether run's spare seq is one of fs's (spare_mu held). */
static int spare_held(const file_store *fs, const char *run, uint64_t seq) {
  for (int i = 0; i < fs->n_spares; i++)
    if (fs->spares[i].seq == seq && !strcmp(fs->spares[i].run, run)) return 1;
  return 0;
}

/* A spare named s in run's replay folder that fs does not hold, left by a process that
 * died: taken up while fs has room, else removed. Removing one another process holds
 * costs it nothing but the reuse (its rename finds no file and it creates one). */
static void spare_found(file_store *fs, const char *run, const char *dir, const char *s) {
  uint64_t seq;
  if (strlen(s) != 31 || strncmp(s, ".spare.", 7) != 0 || strcmp(s + 27, ".bin") != 0 ||
      !seq_digits(s + 7, &seq))
    return;
  pthread_mutex_lock(&fs->spare_mu);
  if (!spare_held(fs, run, seq)) {
    if (fs->n_spares < fs->max_spares) {
      spare_add(fs, run, seq);
    } else {
      char p[PATH_MAX];
      if (snprintf(p, sizeof p, "%s/%s", dir, s) < (int)sizeof p) unlink(p);
    }
  }
  pthread_mutex_unlock(&fs->spare_mu);
}

/* The seqs of run's replay segments >= from_seq, ascending, in a new array. With
 * adopt, spares the listing finds that fs does not hold are taken up (spare_found). */
static int file_replay_seqs(file_store *fs, const char *run, uint64_t from_seq, int adopt,
                            uint64_t **out, size_t *n_out, shoal_error *err) {
  char dir[PATH_MAX];
  int rc = path_fmt(dir, err, "%s/%s/replay", fs->root, run);
  if (rc) return rc;
  *out = NULL;
  *n_out = 0;
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) {
      char rp[PATH_MAX];
      struct stat sb;
      if (!path_fmt(rp, err, "%s/%s", fs->root, run) && stat(rp, &sb) == 0) return 0;
      return shoal_error_set(err, SHOAL_ENOENT, "store: no run '%s' in '%s'", run, fs->root);
    }
    return store__sys_err(err, errno, "cannot list", dir);
  }
  uint64_t *seqs = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    const char *s = de->d_name;
    if (adopt && s[0] == '.') spare_found(fs, run, dir, s);
    uint64_t v;
    if (strlen(s) != 24 || strcmp(s + 20, ".bin") != 0 || !seq_digits(s, &v) || v < from_seq)
      continue;
    if ((rc = store__grow((void **)&seqs, &cap, n, sizeof *seqs))) break;
    seqs[n++] = v;
  }
  closedir(d);
  if (rc) {
    free(seqs);
    return shoal_error_set(err, rc, "store: out of memory listing '%s'", dir);
  }
  if (n) qsort(seqs, n, sizeof *seqs, cmp_u64);
  *out = seqs;
  *n_out = n;
  return 0;
}

/* A segment that fails its checks after it was opened may have been trimmed meanwhile
 * and its file written again as a spare (file_replay_trim): a name that is gone was
 * trimmed (SHOAL_ENOENT, as if the open had come later), not damaged. Segment names
 * are never made again once trimmed. Returns rc or SHOAL_ENOENT. */
static int trimmed_while_read(const char *p, const char *run, uint64_t seq, int rc,
                              shoal_error *err) {
  if (access(p, F_OK) == 0 || errno != ENOENT) return rc;
  return shoal_error_set(err, SHOAL_ENOENT,
                         "store: replay segment %" PRIu64 " of run '%s' was trimmed while read",
                         seq, run);
}

/* Reads replay segment seq of run and checks its header; on success *buf holds the
 * file (header first) and the segment is its bytes from REPLAY_HEADER on. */
static int file_replay_load(file_store *fs, const char *run, uint64_t seq, char **buf, size_t *len,
                            shoal_error *err) {
  char p[PATH_MAX];
  int rc = path_fmt(p, err, "%s/%s/replay/%020" PRIu64 ".bin", fs->root, run, seq);
  if (rc) return rc;
  if ((rc = store__file_read(p, buf, len, err))) {
    if (rc == SHOAL_ENOENT)
      shoal_error_set(err, rc, "store: run '%s' has no replay segment %" PRIu64, run, seq);
    else if (rc == SHOAL_EFORMAT)
      rc = trimmed_while_read(p, run, seq, rc, err);
    return rc;
  }
  const unsigned char *h = (const unsigned char *)*buf;
  if (*len < REPLAY_HEADER || memcmp(h, REPLAY_MAGIC, 8) != 0) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "store: '%s' is not a shoal replay segment (bad magic)", p);
  } else if (store__get_le32(h + 8) < 1 || store__get_le32(h + 8) > REPLAY_VERSION) {
    rc = shoal_error_set(err, SHOAL_EFORMAT, "store: '%s' has format version %u, expected 1..%d", p,
                         store__get_le32(h + 8), REPLAY_VERSION);
  } else if (store__get_le64(h + 16) != seq || store__get_le64(h + 24) != *len - REPLAY_HEADER) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "store: '%s' says seq %" PRIu64 " length %" PRIu64
                         "; the file holds seq %" PRIu64 " length %zu",
                         p, store__get_le64(h + 16), store__get_le64(h + 24), seq,
                         *len - REPLAY_HEADER);
  } else if ((store__get_le32(h + 8) == 1
                  ? store__crc32(*buf + REPLAY_HEADER, *len - REPLAY_HEADER)
                  : shoal_crc32c(0, *buf + REPLAY_HEADER, *len - REPLAY_HEADER)) !=
             store__get_le32(h + 12)) {
    rc = shoal_error_set(err, SHOAL_EFORMAT, "store: '%s': checksum mismatch (damaged data)", p);
  }
  if (rc) rc = trimmed_while_read(p, run, seq, rc, err);
  if (rc) {
    free(*buf);
    *buf = NULL;
  }
  return rc;
}

static int file_replay_iter(void *impl, const char *run, uint64_t from_seq, store_replay_fn fn,
                            void *ctx, shoal_error *err) {
  uint64_t *seqs;
  size_t n;
  int rc = file_replay_seqs(impl, run, from_seq, 0, &seqs, &n, err);
  for (size_t i = 0; i < n && !rc; i++) {
    char *buf = NULL;
    size_t len = 0;
    rc = file_replay_load(impl, run, seqs[i], &buf, &len, err);
    /* Trimmed between the listing and the read: it is gone, not damaged. */
    if (rc == SHOAL_ENOENT) {
      rc = 0;
      continue;
    }
    if (!rc) rc = fn(ctx, seqs[i], buf + REPLAY_HEADER, len - REPLAY_HEADER);
    free(buf);
  }
  free(seqs);
  return rc;
}

static int file_replay_list(void *impl, const char *run, uint64_t **seqs, size_t *n,
                            shoal_error *err) {
  return file_replay_seqs(impl, run, 0, 0, seqs, n, err);
}

static int file_replay_read(void *impl, const char *run, uint64_t seq, void **bytes, size_t *len,
                            shoal_error *err) {
  char *buf;
  size_t l;
  int rc = file_replay_load(impl, run, seq, &buf, &l, err);
  if (rc) return rc;
  /* The segment without its header, in a buffer of its own size. */
  memmove(buf, buf + REPLAY_HEADER, l - REPLAY_HEADER);
  *bytes = buf;
  *len = l - REPLAY_HEADER;
  return 0;
}

/* Trimmed segments become spares while this process holds fewer than max_spares, and
 * the next appends write into them: a new file costs its inode and block allocation;
 * the rest are removed. A reader that had one open sees it trimmed (trimmed_while_read). */
static int file_replay_trim(void *impl, const char *run, uint64_t below, size_t *removed,
                            shoal_error *err) {
  file_store *fs = impl;
  uint64_t *seqs;
  size_t n, k = 0;
  int rc = file_replay_seqs(fs, run, 0, 1, &seqs, &n, err);
  for (size_t i = 0; i < n && !rc && seqs[i] < below; i++) {
    char p[PATH_MAX], sp[PATH_MAX];
    if ((rc = path_fmt(p, err, "%s/%s/replay/%020" PRIu64 ".bin", fs->root, run, seqs[i]))) break;
    int kept = 0;
    pthread_mutex_lock(&fs->spare_mu);
    if (fs->n_spares < fs->max_spares && !spare_path(fs, run, seqs[i], sp, NULL) &&
        rename(p, sp) == 0) {
      spare_add(fs, run, seqs[i]);
      kept = 1;
    }
    pthread_mutex_unlock(&fs->spare_mu);
    if (kept || unlink(p) == 0)
      k++;
    else if (errno != ENOENT) /* another trim got there first: fine */
      rc = store__sys_err(err, errno, "cannot remove", p);
  }
  free(seqs);
  *removed = k;
  return rc;
}

static int file_local_dir(void *impl, const char *run, char *out, size_t cap, shoal_error *err) {
  file_store *fs = impl;
  int n = run ? snprintf(out, cap, "%s/%s", fs->root, run) : snprintf(out, cap, "%s", fs->root);
  if (n < 0 || (size_t)n >= cap)
    return shoal_error_set(err, SHOAL_EINVAL, "store: the folder of '%s' needs %d bytes", fs->root,
                           n + 1);
  return 0;
}

/* ---- metrics ------------------------------------------------------------- */

/* Cuts a torn last line (left by a crash mid-append) off fd, which is locked. */
/* Cuts a torn last line (left by a crash mid-append) off fd, which is locked;
 * *size becomes the size after the cut. */
static int metrics_repair(int fd, off_t *size, const char *path, shoal_error *err) {
  char c;
  if (pread(fd, &c, 1, *size - 1) != 1) return store__sys_err(err, errno, "cannot read", path);
  if (c == '\n') return 0;
  char buf[4096];
  off_t end = *size, keep = 0;
  while (end > 0 && !keep) {
    off_t start = end > (off_t)sizeof buf ? end - (off_t)sizeof buf : 0;
    ssize_t r = pread(fd, buf, (size_t)(end - start), start);
    if (r != end - start) return store__sys_err(err, errno ? errno : EIO, "cannot read", path);
    for (ssize_t i = r - 1; i >= 0 && !keep; i--)
      if (buf[i] == '\n') keep = start + i + 1;
    end = start;
  }
  if (ftruncate(fd, keep) != 0) return store__sys_err(err, errno, "cannot truncate", path);
  *size = keep;
  return 0;
}

static int file_metrics_append_run(file_store *fs, const store_metric *rows, size_t n,
                                   shoal_error *err) {
  char path[PATH_MAX], dir[PATH_MAX];
  int rc = path_fmt(dir, err, "%s/%s", fs->root, rows[0].run);
  if (!rc) rc = path_fmt(path, err, "%s/metrics.csv", dir);
  if (rc) return rc;
  /* A row is at most 20 + 1 + 24 + 1 + 63 + 1 + 24 + 1 characters. */
  size_t cap = n * 160 + sizeof METRICS_HEADER;
  char *buf = malloc(cap);
  if (!buf) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory for %zu rows", n);
  int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = store__sys_err(err, errno, "cannot open", path);
    free(buf);
    return rc;
  }
  while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  struct stat sb;
  size_t o = 0;
  int created = 0;
  if (fstat(fd, &sb) != 0) {
    rc = store__sys_err(err, errno, "cannot stat", path);
    goto done;
  }
  off_t size = sb.st_size;
  if (size > 0 && (rc = metrics_repair(fd, &size, path, err))) goto done;
  if (size > 0) { /* never append to a file of another kind */
    char head[sizeof METRICS_MAGIC - 1];
    if (pread(fd, head, sizeof head, 0) != (ssize_t)sizeof head ||
        memcmp(head, METRICS_MAGIC, sizeof head) != 0) {
      rc = shoal_error_set(err, SHOAL_EFORMAT, "store: '%s' does not start with '%.17s'", path,
                           METRICS_MAGIC);
      goto done;
    }
  }
  if (size == 0) {
    memcpy(buf, METRICS_HEADER, sizeof METRICS_HEADER - 1);
    o = sizeof METRICS_HEADER - 1;
    created = 1;
  }
  for (size_t i = 0; i < n; i++)
    o += (size_t)snprintf(buf + o, cap - o, "%" PRId64 ",%.17g,%s,%.17g\n", rows[i].step,
                          rows[i].time, rows[i].name, rows[i].value);
  int e = store__write_all(fd, buf, o);
  if (e) {
    /* Leave no partial rows behind: cut back to the size before this append. */
    if (ftruncate(fd, size) != 0) {
      /* The torn rows stay; the next append cuts a torn last line, and a reader
       * stops at one. */
    }
    rc = store__sys_err(err, e, "cannot append to", path);
    goto done;
  }
  if (fs->sync_metrics && fdatasync(fd) != 0) {
    rc = store__sys_err(err, errno, "cannot fsync", path);
    goto done;
  }
  if (created) rc = store__file_fsync_dir(dir, err);
done:
  flock(fd, LOCK_UN);
  close(fd);
  free(buf);
  return rc;
}

static int file_metrics_append(void *impl, const store_metric *rows, size_t n, shoal_error *err) {
  /* Rows of one run go in one append; a batch spanning runs becomes one append each. */
  size_t i = 0;
  while (i < n) {
    size_t j = i + 1;
    while (j < n && strcmp(rows[j].run, rows[i].run) == 0) j++;
    int rc = file_metrics_append_run(impl, rows + i, j - i, err);
    if (rc) return rc;
    i = j;
  }
  return 0;
}

typedef struct {
  store_metric m;
  size_t order;
} metric_row;

static int cmp_metric(const void *a, const void *b) {
  const metric_row *x = a, *y = b;
  if (x->m.step != y->m.step) return x->m.step < y->m.step ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

static int file_metrics_query(void *impl, const char *run, const char *name, int64_t step_min,
                              int64_t step_max, store_metric **out, size_t *n, shoal_error *err) {
  file_store *fs = impl;
  char path[PATH_MAX];
  int rc = path_fmt(path, err, "%s/%s/metrics.csv", fs->root, run);
  if (rc) return rc;
  char *buf = NULL;
  size_t len = 0;
  rc = store__file_read(path, &buf, &len, err);
  if (rc == SHOAL_ENOENT) {
    store_run r;
    rc = file_run_read(fs, run, &r, 0, err);
    if (rc) return rc;
    *out = NULL;
    *n = 0;
    return 0;
  }
  if (rc) return rc;
  metric_row *arr = NULL;
  size_t k = 0, cap = 0, line = 0;
  char *p = buf, *end = buf + len;
  /* A file with no complete line is a first append that was torn: no rows yet. */
  if (len > 0 && memchr(buf, '\n', len) &&
      strncmp(buf, METRICS_MAGIC, sizeof METRICS_MAGIC - 1) != 0) {
    rc = shoal_error_set(err, SHOAL_EFORMAT, "store: '%s' does not start with '%.17s'", path,
                         METRICS_MAGIC);
    goto done;
  }
  while (p < end) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) break; /* a torn last line: not yet a row */
    *nl = 0;
    line++;
    if (line <= 2) {
      p = nl + 1;
      continue;
    }
    char *f1 = strchr(p, ','), *f2 = f1 ? strchr(f1 + 1, ',') : NULL;
    char *f3 = f2 ? strchr(f2 + 1, ',') : NULL;
    if (!f3) {
      rc = shoal_error_set(err, SHOAL_EFORMAT,
                           "store: '%s' line %zu: expected step,time,name,value", path, line);
      goto done;
    }
    *f1 = *f2 = *f3 = 0;
    char *e1, *e2, *e3;
    errno = 0;
    long long step = strtoll(p, &e1, 10);
    double t = strtod(f1 + 1, &e2);
    double v = strtod(f3 + 1, &e3);
    if (errno || *e1 || *e2 || *e3 || !store__metric_name_valid(f2 + 1)) {
      rc = shoal_error_set(err, SHOAL_EFORMAT, "store: '%s' line %zu: malformed row", path, line);
      goto done;
    }
    p = nl + 1;
    if (step < step_min || step > step_max || (name && strcmp(name, f2 + 1) != 0)) continue;
    if ((rc = store__grow((void **)&arr, &cap, k, sizeof *arr))) {
      shoal_error_set(err, rc, "store: out of memory reading '%s'", path);
      goto done;
    }
    metric_row *r = &arr[k];
    memset(r, 0, sizeof *r);
    snprintf(r->m.run, sizeof r->m.run, "%s", run);
    snprintf(r->m.name, sizeof r->m.name, "%s", f2 + 1);
    r->m.step = step;
    r->m.time = t;
    r->m.value = v;
    r->order = k++;
  }
  if (k) qsort(arr, k, sizeof *arr, cmp_metric);
  store_metric *res = NULL;
  if (k) {
    res = malloc(k * sizeof *res);
    if (!res) {
      rc = shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory reading '%s'", path);
      goto done;
    }
    for (size_t i = 0; i < k; i++) res[i] = arr[i].m;
  }
  *out = res;
  *n = k;
done:
  free(arr);
  free(buf);
  return rc;
}

/* ---- trials -------------------------------------------------------------- */

typedef struct trial_state {
  int status;
  int64_t attempt; /* highest claim; the next claim is attempt + 1 when pending */
  char worker[STORE_NAME_MAX];
  double heartbeat;
} trial_state;

static int trial_dir(file_store *fs, char *out, const char *sweep, const char *id,
                     shoal_error *err) {
  if (id) return path_fmt(out, err, "%s/_sweeps/%s/%s", fs->root, sweep, id);
  return path_fmt(out, err, "%s/_sweeps/%s", fs->root, sweep);
}

static int claim_doc_write(const char *dir, int64_t k, const char *worker, double claimed,
                           double hb, int exclusive, shoal_error *err) {
  char name[40];
  snprintf(name, sizeof name, "claim.%" PRId64, k);
  bson_t doc;
  bson_init(&doc);
  jformat(&doc, "shoal-claim");
  BSON_APPEND_UTF8(&doc, "worker", worker);
  BSON_APPEND_DOUBLE(&doc, "claimed", claimed);
  BSON_APPEND_DOUBLE(&doc, "heartbeat", hb);
  int rc = json_write(dir, name, &doc, exclusive, err);
  bson_destroy(&doc);
  return rc;
}

/* Works out the state of the trial in dir from its files. */
static int trial_state_read(const char *dir, trial_state *st, double *claimed, shoal_error *err) {
  memset(st, 0, sizeof *st);
  DIR *d = opendir(dir);
  if (!d) return store__sys_err(err, errno, "cannot list", dir);
  int64_t kmax = 0;
  int done = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, "claim.", 6) == 0) {
      char *e;
      long long k = strtoll(de->d_name + 6, &e, 10);
      if (!*e && k > kmax) kmax = k;
    } else if (strcmp(de->d_name, "done.json") == 0) {
      done = 1;
    }
  }
  closedir(d);
  st->attempt = kmax;
  char p[PATH_MAX];
  int rc = 0;
  if (kmax > 0) {
    bson_t doc;
    if ((rc = path_fmt(p, err, "%s/claim.%" PRId64, dir, kmax))) return rc;
    if ((rc = json_read(p, "shoal-claim", &doc, err))) return rc;
    snprintf(st->worker, sizeof st->worker, "%s", jstr(&doc, "worker") ? jstr(&doc, "worker") : "");
    st->heartbeat = jdouble(&doc, "heartbeat", 0);
    if (claimed) *claimed = jdouble(&doc, "claimed", 0);
    bson_destroy(&doc);
  }
  if (done) {
    bson_t doc;
    if ((rc = path_fmt(p, err, "%s/done.json", dir))) return rc;
    if ((rc = json_read(p, "shoal-trial-result", &doc, err))) return rc;
    const char *s = jstr(&doc, "status");
    st->status = s && strcmp(s, "failed") == 0 ? STORE_TRIAL_FAILED : STORE_TRIAL_DONE;
    snprintf(st->worker, sizeof st->worker, "%s", jstr(&doc, "worker") ? jstr(&doc, "worker") : "");
    bson_destroy(&doc);
    return 0;
  }
  if (kmax == 0) {
    st->status = STORE_TRIAL_PENDING;
    return 0;
  }
  struct stat sb;
  if ((rc = path_fmt(p, err, "%s/requeue.%" PRId64, dir, kmax))) return rc;
  st->status = stat(p, &sb) == 0 ? STORE_TRIAL_PENDING : STORE_TRIAL_RUNNING;
  if (st->status == STORE_TRIAL_PENDING) st->worker[0] = 0;
  return 0;
}

/* Fills *out with everything about trial id. */
static int trial_load(file_store *fs, const char *sweep, const char *id, store_trial *out,
                      shoal_error *err) {
  char dir[PATH_MAX], p[PATH_MAX];
  int rc = trial_dir(fs, dir, sweep, id, err);
  if (!rc) rc = path_fmt(p, err, "%s/trial.json", dir);
  if (rc) return rc;
  bson_t doc;
  rc = json_read(p, "shoal-trial", &doc, err);
  if (rc == SHOAL_ENOENT)
    return shoal_error_set(err, SHOAL_ENOENT, "store: sweep '%s' has no trial '%s'", sweep, id);
  if (rc) return rc;
  store_trial t;
  memset(&t, 0, sizeof t);
  snprintf(t.sweep, sizeof t.sweep, "%s", sweep);
  snprintf(t.id, sizeof t.id, "%s", id);
  t.created_time = jdouble(&doc, "created", 0);
  t.params = store__strdup(jstr(&doc, "params") ? jstr(&doc, "params") : "");
  bson_destroy(&doc);
  if (!t.params) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  trial_state s;
  if ((rc = trial_state_read(dir, &s, NULL, err))) {
    store_trial_clear(&t);
    return rc;
  }
  t.status = s.status;
  t.attempt = s.attempt;
  t.heartbeat_time = s.heartbeat;
  snprintf(t.worker, sizeof t.worker, "%s", s.worker);
  if (s.status == STORE_TRIAL_DONE || s.status == STORE_TRIAL_FAILED) {
    if ((rc = path_fmt(p, err, "%s/done.json", dir)) ||
        (rc = json_read(p, "shoal-trial-result", &doc, err))) {
      store_trial_clear(&t);
      return rc;
    }
    t.result = store__strdup(jstr(&doc, "result") ? jstr(&doc, "result") : "");
    bson_destroy(&doc);
    if (!t.result) {
      store_trial_clear(&t);
      return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
    }
  }
  *out = t;
  return 0;
}

static int file_trial_create(void *impl, const char *sweep, const char *id, const char *params,
                             shoal_error *err) {
  file_store *fs = impl;
  char sdir[PATH_MAX], tmp[PATH_MAX], dst[PATH_MAX];
  int rc = trial_dir(fs, sdir, sweep, NULL, err);
  if (!rc) rc = trial_dir(fs, dst, sweep, id, err);
  unsigned long long c = (unsigned long long)atomic_fetch_add(&tmp_counter, 1);
  if (!rc)
    rc = path_fmt(tmp, err, "%s/.tmp.%s.%s.%ld.%llu", sdir, id, shoal_file_host_tag(),
                  (long)getpid(), c);
  if (rc) return rc;
  if ((rc = mkdir_p(sdir, err))) return rc;
  sweep_stale_tmp(sdir);
  if (mkdir(tmp, 0755) != 0) return store__sys_err(err, errno, "cannot create folder", tmp);
  bson_t doc;
  bson_init(&doc);
  jformat(&doc, "shoal-trial");
  BSON_APPEND_UTF8(&doc, "sweep", sweep);
  BSON_APPEND_UTF8(&doc, "id", id);
  BSON_APPEND_UTF8(&doc, "params", params);
  BSON_APPEND_DOUBLE(&doc, "created", store__wall_time());
  rc = json_write(tmp, "trial.json", &doc, 0, err);
  bson_destroy(&doc);
  if (!rc && rename(tmp, dst) != 0) {
    int e = errno;
    rc = (e == EEXIST || e == ENOTEMPTY)
             ? shoal_error_set(err, SHOAL_EEXIST, "store: sweep '%s' has trial '%s' already", sweep,
                               id)
             : store__sys_err(err, e, "cannot rename into", dst);
  }
  if (rc) {
    store__file_rm_flat_dir(tmp);
    return rc;
  }
  return store__file_fsync_dir(sdir, err);
}

typedef struct {
  char id[STORE_NAME_MAX];
  double created;
} trial_ref;

static int cmp_trial_ref(const void *a, const void *b) {
  const trial_ref *x = a, *y = b;
  if (x->created != y->created) return x->created < y->created ? -1 : 1;
  return strcmp(x->id, y->id);
}

/* The trials of sweep in creation order. */
static int trial_refs(file_store *fs, const char *sweep, trial_ref **out, size_t *n,
                      shoal_error *err) {
  char sdir[PATH_MAX], p[PATH_MAX];
  int rc = trial_dir(fs, sdir, sweep, NULL, err);
  if (rc) return rc;
  *out = NULL;
  *n = 0;
  DIR *d = opendir(sdir);
  if (!d) return errno == ENOENT ? 0 : store__sys_err(err, errno, "cannot list", sdir);
  trial_ref *arr = NULL;
  size_t k = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!store_name_valid(de->d_name)) continue;
    bson_t doc;
    if ((rc = path_fmt(p, err, "%s/%s/trial.json", sdir, de->d_name))) break;
    rc = json_read(p, "shoal-trial", &doc, err);
    if (rc == SHOAL_ENOENT) {
      rc = 0;
      continue;
    }
    if (rc) break;
    if ((rc = store__grow((void **)&arr, &cap, k, sizeof *arr))) {
      bson_destroy(&doc);
      shoal_error_set(err, rc, "store: out of memory");
      break;
    }
    snprintf(arr[k].id, sizeof arr[k].id, "%.63s", de->d_name);
    arr[k].created = jdouble(&doc, "created", 0);
    k++;
    bson_destroy(&doc);
  }
  closedir(d);
  if (rc) {
    free(arr);
    return rc;
  }
  if (k) qsort(arr, k, sizeof *arr, cmp_trial_ref);
  *out = arr;
  *n = k;
  return 0;
}

static int file_trial_claim(void *impl, const char *sweep, const char *worker, store_trial *out,
                            shoal_error *err) {
  file_store *fs = impl;
  trial_ref *refs = NULL;
  size_t n = 0;
  int rc = trial_refs(fs, sweep, &refs, &n, err);
  if (rc) return rc;
  rc = SHOAL_ENOENT;
  for (size_t i = 0; i < n && rc == SHOAL_ENOENT; i++) {
    char dir[PATH_MAX], p[PATH_MAX];
    trial_state s;
    int e = trial_dir(fs, dir, sweep, refs[i].id, err);
    if (!e) e = trial_state_read(dir, &s, NULL, err);
    if (e) {
      rc = e;
      break;
    }
    if (s.status != STORE_TRIAL_PENDING) continue;
    double now = store__wall_time();
    e = claim_doc_write(dir, s.attempt + 1, worker, now, now, 1, err);
    if (e == SHOAL_EEXIST) continue; /* another worker won this attempt */
    if (e) {
      rc = e;
      break;
    }
    /* Completed by its previous holder while we claimed: give the attempt back. */
    struct stat sb;
    if (!path_fmt(p, err, "%s/done.json", dir) && stat(p, &sb) == 0) {
      if (!path_fmt(p, err, "%s/requeue.%" PRId64, dir, s.attempt + 1)) {
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) close(fd);
      }
      continue;
    }
    rc = trial_load(fs, sweep, refs[i].id, out, err);
  }
  free(refs);
  if (rc == SHOAL_ENOENT)
    shoal_error_set(err, SHOAL_ENOENT, "store: sweep '%s' has no pending trial", sweep);
  return rc;
}

/* Checks that worker holds the current attempt of trial id; fills dir and *s. */
static int trial_owned(file_store *fs, const char *sweep, const char *id, const char *worker,
                       char *dir, trial_state *s, double *claimed, shoal_error *err) {
  char p[PATH_MAX];
  int rc = trial_dir(fs, dir, sweep, id, err);
  if (!rc) rc = path_fmt(p, err, "%s/trial.json", dir);
  if (rc) return rc;
  struct stat sb;
  if (stat(p, &sb) != 0)
    return shoal_error_set(err, SHOAL_ENOENT, "store: sweep '%s' has no trial '%s'", sweep, id);
  if ((rc = trial_state_read(dir, s, claimed, err))) return rc;
  if (s->status == STORE_TRIAL_DONE || s->status == STORE_TRIAL_FAILED)
    return shoal_error_set(err, SHOAL_EEXIST, "store: trial '%s' of sweep '%s' is complete already",
                           id, sweep);
  if (s->status != STORE_TRIAL_RUNNING || strcmp(s->worker, worker) != 0)
    return shoal_error_set(err, SHOAL_EPERM,
                           "store: worker '%s' does not hold trial '%s' of sweep '%s' (%s%s%s)",
                           worker, id, sweep, store_trial_status_name(s->status),
                           s->worker[0] ? ", held by " : "", s->worker);
  return 0;
}

static int file_trial_heartbeat(void *impl, const char *sweep, const char *id, const char *worker,
                                shoal_error *err) {
  char dir[PATH_MAX];
  trial_state s;
  double claimed = 0;
  int rc = trial_owned(impl, sweep, id, worker, dir, &s, &claimed, err);
  if (rc == SHOAL_EEXIST) { /* a complete trial takes no heartbeat: the claim is over */
    if (err) err->code = SHOAL_EPERM;
    return SHOAL_EPERM;
  }
  if (rc) return rc;
  return claim_doc_write(dir, s.attempt, worker, claimed, store__wall_time(), 0, err);
}

static int file_trial_complete(void *impl, const char *sweep, const char *id, const char *worker,
                               int status, const char *result, shoal_error *err) {
  char dir[PATH_MAX];
  trial_state s;
  int rc = trial_owned(impl, sweep, id, worker, dir, &s, NULL, err);
  if (rc) return rc;
  bson_t doc;
  bson_init(&doc);
  jformat(&doc, "shoal-trial-result");
  BSON_APPEND_UTF8(&doc, "status", store_trial_status_name(status));
  BSON_APPEND_UTF8(&doc, "worker", worker);
  BSON_APPEND_INT64(&doc, "attempt", s.attempt);
  BSON_APPEND_UTF8(&doc, "result", result);
  BSON_APPEND_DOUBLE(&doc, "time", store__wall_time());
  rc = json_write(dir, "done.json", &doc, 1, err);
  bson_destroy(&doc);
  if (rc == SHOAL_EEXIST)
    rc = shoal_error_set(err, SHOAL_EEXIST, "store: trial '%s' of sweep '%s' is complete already",
                         id, sweep);
  return rc;
}

/* The attempt's requeue mark, as a stale claim gets: the trial reads as pending. */
static int file_trial_release(void *impl, const char *sweep, const char *id, const char *worker,
                              shoal_error *err) {
  char dir[PATH_MAX], p[PATH_MAX];
  trial_state s;
  int rc = trial_owned(impl, sweep, id, worker, dir, &s, NULL, err);
  if (!rc) rc = path_fmt(p, err, "%s/requeue.%" PRId64, dir, s.attempt);
  if (rc) return rc;
  int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return errno == EEXIST ? shoal_error_set(err, SHOAL_EPERM,
                                             "store: trial '%s' of sweep '%s' was requeued "
                                             "meanwhile: worker '%s' no longer holds it",
                                             id, sweep, worker)
                           : store__sys_err(err, errno, "cannot create", p);
  close(fd);
  return store__file_fsync_dir(dir, err);
}

static int file_trial_requeue_stale(void *impl, const char *sweep, double max_age_s, size_t *nreq,
                                    shoal_error *err) {
  file_store *fs = impl;
  trial_ref *refs = NULL;
  size_t n = 0;
  int rc = trial_refs(fs, sweep, &refs, &n, err);
  if (rc) return rc;
  double cutoff = store__wall_time() - max_age_s;
  for (size_t i = 0; i < n; i++) {
    char dir[PATH_MAX], p[PATH_MAX];
    trial_state s;
    if ((rc = trial_dir(fs, dir, sweep, refs[i].id, err))) break;
    if ((rc = trial_state_read(dir, &s, NULL, err))) break;
    if (s.status != STORE_TRIAL_RUNNING || s.heartbeat >= cutoff) continue;
    if ((rc = path_fmt(p, err, "%s/requeue.%" PRId64, dir, s.attempt))) break;
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == EEXIST) continue; /* another process requeued it */
      rc = store__sys_err(err, errno, "cannot create", p);
      break;
    }
    close(fd);
    if ((rc = store__file_fsync_dir(dir, err))) break;
    (*nreq)++;
  }
  free(refs);
  return rc;
}

static int file_trial_get(void *impl, const char *sweep, const char *id, store_trial *out,
                          shoal_error *err) {
  return trial_load(impl, sweep, id, out, err);
}

static int file_trial_list(void *impl, const char *sweep, store_trial **out, size_t *n,
                           shoal_error *err) {
  file_store *fs = impl;
  trial_ref *refs = NULL;
  size_t k = 0;
  int rc = trial_refs(fs, sweep, &refs, &k, err);
  if (rc) return rc;
  store_trial *arr = k ? calloc(k, sizeof *arr) : NULL;
  if (k && !arr) rc = shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  size_t got = 0;
  for (size_t i = 0; i < k && !rc; i++) {
    rc = trial_load(fs, sweep, refs[i].id, &arr[got], err);
    if (rc == SHOAL_ENOENT)
      rc = 0;
    else if (!rc)
      got++;
  }
  free(refs);
  if (rc) {
    store_trials_free(arr, got);
    return rc;
  }
  *out = arr;
  *n = got;
  return 0;
}

const store__backend store__file_backend = {
    .name = "file",
    .open = file_open,
    .close = file_close,
    .run_create = file_run_create,
    .run_find = file_run_find,
    .run_list = file_run_list,
    .run_set_status = file_run_set_status,
    .run_set_config = file_run_set_config,
    .lease_take = file_lease_take,
    .lease_renew = file_lease_renew,
    .lease_release = file_lease_release,
    .snapshot_put = file_snapshot_put,
    .snapshot_get = file_snapshot_get,
    .snapshot_list = file_snapshot_list,
    .replay_append = file_replay_append,
    .replay_iter = file_replay_iter,
    .replay_list = file_replay_list,
    .replay_read = file_replay_read,
    .replay_trim = file_replay_trim,
    .local_dir = file_local_dir,
    .metrics_append = file_metrics_append,
    .metrics_query = file_metrics_query,
    .trial_create = file_trial_create,
    .trial_claim = file_trial_claim,
    .trial_heartbeat = file_trial_heartbeat,
    .trial_complete = file_trial_complete,
    .trial_requeue_stale = file_trial_requeue_stale,
    .trial_release = file_trial_release,
    .trial_get = file_trial_get,
    .trial_list = file_trial_list,
    .segment_write = store__file_segment_write,
    .segment_list = store__file_segment_list,
    .segment_read = store__file_segment_read,
    .dataset_begin = store__file_dataset_begin,
    .dataset_upload_id = store__file_dataset_upload_id,
    .dataset_chunk_put = store__file_dataset_chunk_put,
    .dataset_commit = store__file_dataset_commit,
    .dataset_abort = store__file_dataset_abort,
    .dataset_manifest_get = store__file_dataset_manifest_get,
    .dataset_names = store__file_dataset_names,
    .dataset_chunk_get = store__file_dataset_chunk_get,
    .dataset_delete = store__file_dataset_delete,
    .media_put = store__file_media_put,
    .media_get = store__file_media_get,
    .media_list = store__file_media_list,
};
