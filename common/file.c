/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common/file.c — atomic file writes (common/file.h): temporary file, fsync, rename or
 * link, fsync of the folder.
 */
#define _GNU_SOURCE
#include "common/file.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_uint_fast64_t tmp_counter;

static char host_tag[64];
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void host_init(void) {
  char h[256] = {0};
  if (gethostname(h, sizeof h - 1) != 0) h[0] = 0;
  size_t o = 0;
  for (size_t i = 0; h[i] && o < sizeof host_tag - 1; i++)
    if (isalnum((unsigned char)h[i]) || h[i] == '-') host_tag[o++] = h[i];
  if (!o) snprintf(host_tag, sizeof host_tag, "host");
}

const char *shoal_file_host_tag(void) {
  pthread_once(&host_once, host_init);
  return host_tag;
}

static int sys_err(shoal_error *err, int e, const char *what, const char *path) {
  int code = e == ENOENT ? SHOAL_ENOENT : e == EEXIST ? SHOAL_EEXIST : SHOAL_EIO;
  return shoal_error_set(err, code, "%s '%s': %s", what, path, strerror(e));
}

/* The folder of path into dir (cap bytes): "." for a bare name, "/" for "/name". */
static void dir_of(const char *path, char *dir, size_t cap) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, cap, ".");
  else if (slash == path)
    snprintf(dir, cap, "/");
  else
    snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

/* fsyncs the folder so a rename or link in it survives a crash. Filesystems that
 * cannot fsync a folder say EINVAL: nothing more can be done there. */
static int fsync_dir(const char *dir, shoal_error *err) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sys_err(err, errno, "cannot open folder", dir);
  int rc = 0;
  if (fsync(fd) != 0 && errno != EINVAL) rc = sys_err(err, errno, "cannot fsync folder", dir);
  close(fd);
  return rc;
}

/* Names t's temporary file for path; creates nothing. */
static int tmp_name(shoal_file_tmp *t, const char *path, shoal_error *err) {
  t->fd = -1;
  t->reused = t->direct = 0;
  t->stage = NULL;
  t->staged = 0;
  t->len = 0;
  t->path[0] = t->tmp[0] = 0;
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  if (!base[0]) return shoal_error_set(err, SHOAL_EINVAL, "'%.200s' names no file", path);
  unsigned long long c = (unsigned long long)atomic_fetch_add(&tmp_counter, 1);
  int np = snprintf(t->path, sizeof t->path, "%s", path);
  /* The name is cut so the temporary name stays within NAME_MAX (255) for any name
   * the destination may have. */
  int nt = snprintf(t->tmp, sizeof t->tmp, "%.*s.tmp.%.100s.%s.%ld.%llu", (int)(base - path), path,
                    base, shoal_file_host_tag(), (long)getpid(), c);
  if (np < 0 || (size_t)np >= sizeof t->path || nt < 0 || (size_t)nt >= sizeof t->tmp)
    return shoal_error_set(err, SHOAL_EINVAL, "path '%.200s...' is too long", path);
  return 0;
}

/* Creates t's temporary file, named by tmp_name. */
static int tmp_create(shoal_file_tmp *t, shoal_error *err) {
  t->fd = open(t->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (t->fd < 0) return sys_err(err, errno, "cannot create", t->tmp);
  return 0;
}

int shoal_file_tmp_open(shoal_file_tmp *t, const char *path, shoal_error *err) {
  if (!t || !path) return shoal_error_set(err, SHOAL_EINVAL, "shoal_file_tmp_open: NULL argument");
  int rc = tmp_name(t, path, err);
  return rc ? rc : tmp_create(t, err);
}

int shoal_file_tmp_reuse(shoal_file_tmp *t, const char *path, const char *spare, shoal_error *err) {
  if (!t || !path) return shoal_error_set(err, SHOAL_EINVAL, "shoal_file_tmp_reuse: NULL argument");
  if (!spare) return shoal_file_tmp_open(t, path, err);
  int rc = tmp_name(t, path, err);
  if (rc) return rc;
  /* rename() takes the spare whole or not at all: of several takers one gets it. The
   * folder is fsynced before a byte is overwritten, so no name the file had before
   * (the spare's, the one it had before it became a spare) can come back after a crash
   * over bytes that are no longer its own. */
  if (rename(spare, t->tmp) == 0) {
    char dir[SHOAL_FILE_PATH_MAX];
    dir_of(t->tmp, dir, sizeof dir);
    t->fd = open(t->tmp, O_WRONLY | O_CLOEXEC);
    if (t->fd >= 0 && (rc = fsync_dir(dir, err)) == 0) {
      t->reused = 1;
      return 0;
    }
    if (t->fd >= 0) close(t->fd);
    t->fd = -1;
    unlink(t->tmp);
    if (rc) return rc;
  }
  return tmp_create(t, err);
}

/* Direct writes: offsets, lengths and the buffer aligned to DIRECT_ALIGN, which covers
 * the logical blocks of 512-byte and 4 KiB disks. Staging buffers are kept for the next
 * file (a fresh 4 MiB allocation costs a thousand page faults and their zeroing, a
 * tenth of what a direct segment write costs): a few, shared by the process's threads. */
enum { DIRECT_ALIGN = 4096, STAGES_KEPT = 2 };
static pthread_mutex_t stage_mu = PTHREAD_MUTEX_INITIALIZER;
static char *stages[STAGES_KEPT];
static int nstages;

static char *stage_get(void) {
  char *s = NULL;
  pthread_mutex_lock(&stage_mu);
  if (nstages) s = stages[--nstages];
  pthread_mutex_unlock(&stage_mu);
  if (!s && posix_memalign((void **)&s, DIRECT_ALIGN, SHOAL_FILE_STAGE) != 0) s = NULL;
  return s;
}

static void stage_put(char *s) {
  if (!s) return;
  pthread_mutex_lock(&stage_mu);
  if (nstages < STAGES_KEPT) {
    stages[nstages++] = s;
    s = NULL;
  }
  pthread_mutex_unlock(&stage_mu);
  free(s);
}

/* Leaves direct writes: the file is written through the cache from its current end. */
static void direct_off(shoal_file_tmp *t) {
  int fl = fcntl(t->fd, F_GETFL);
  if (fl >= 0) fcntl(t->fd, F_SETFL, fl & ~O_DIRECT);
  t->direct = 0;
  stage_put(t->stage);
  t->stage = NULL;
  t->staged = 0;
}

int shoal_file_tmp_direct(shoal_file_tmp *t) {
  if (!t || t->fd < 0 || t->direct) return t && t->direct;
  if (t->len) return 0; /* bytes went out through the cache: offsets are no longer aligned */
  int fl = fcntl(t->fd, F_GETFL);
  if (fl < 0 || fcntl(t->fd, F_SETFL, fl | O_DIRECT) != 0) return 0; /* EINVAL: none here */
  if (!(t->stage = stage_get())) {
    fcntl(t->fd, F_SETFL, fl);
    return 0;
  }
  t->direct = 1;
  t->staged = 0;
  return 1;
}

/* Writes len bytes of p in full through t->fd. */
static int write_full(shoal_file_tmp *t, const char *p, size_t len, shoal_error *err) {
  while (len) {
    /* Linux writes at most 0x7ffff000 bytes per call. */
    ssize_t w = write(t->fd, p, len > (1u << 30) ? (1u << 30) : len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return sys_err(err, w < 0 ? errno : EIO, "cannot write", t->tmp);
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Writes t's staged bytes, n of them, padded with zeros to n_out (a multiple of
 * DIRECT_ALIGN, n_out - n < DIRECT_ALIGN). A filesystem that refuses the direct write
 * (EINVAL: its blocks are larger than DIRECT_ALIGN) gets the n bytes through the cache,
 * and t stays there. */
static int stage_flush(shoal_file_tmp *t, size_t n, size_t n_out, shoal_error *err) {
  memset(t->stage + n, 0, n_out - n);
  for (;;) {
    ssize_t w = write(t->fd, t->stage, n_out);
    if (w < 0 && errno == EINTR) continue;
    if (w == (ssize_t)n_out) break;
    if (w < 0 && errno == EINVAL && t->len == t->staged) { /* nothing went out direct yet */
      char *s = t->stage;
      t->stage = NULL; /* kept from direct_off's stage_put until its bytes are out */
      direct_off(t);
      int rc = write_full(t, s, n, err);
      stage_put(s);
      return rc;
    }
    /* A short direct write leaves the offset unaligned: nothing more can go out direct. */
    return sys_err(err, w < 0 ? errno : EIO, "cannot write", t->tmp);
  }
  t->staged = 0;
  return 0;
}

int shoal_file_tmp_write(shoal_file_tmp *t, const void *buf, size_t len, shoal_error *err) {
  const char *p = buf;
  if (!t->direct) {
    int rc = write_full(t, p, len, err);
    if (!rc) t->len += len;
    return rc;
  }
  while (len) {
    size_t n = SHOAL_FILE_STAGE - t->staged;
    if (n > len) n = len;
    memcpy(t->stage + t->staged, p, n);
    t->staged += n;
    t->len += n;
    p += n;
    len -= n;
    if (t->staged == SHOAL_FILE_STAGE) {
      int rc = stage_flush(t, SHOAL_FILE_STAGE, SHOAL_FILE_STAGE, err);
      if (rc) return rc;
      if (!t->direct) return shoal_file_tmp_write(t, p, len, err);
    }
  }
  return 0;
}

int shoal_file_tmp_commit(shoal_file_tmp *t, int flags, shoal_error *err) {
  int rc = 0;
  if (t->fd < 0) return shoal_error_set(err, SHOAL_ESTATE, "'%s' is not open", t->tmp);
  int padded = 0;
  if (t->direct && t->staged) { /* the last block goes out whole, padded; cut below */
    size_t n = t->staged;
    rc = stage_flush(t, n, (n + DIRECT_ALIGN - 1) & ~(size_t)(DIRECT_ALIGN - 1), err);
    padded = !rc && t->direct;
  }
  if (t->direct) direct_off(t);
  /* A spare longer than what was written keeps its old tail otherwise. (Not direct, the
   * caller may have written through t->fd itself: its offset says where the bytes end.) */
  if (!rc && (t->reused || padded)) {
    off_t end = padded ? (off_t)t->len : lseek(t->fd, 0, SEEK_CUR);
    if (end < 0 || ftruncate(t->fd, end) != 0) rc = sys_err(err, errno, "cannot truncate", t->tmp);
  }
  if (!rc && fsync(t->fd) != 0) rc = sys_err(err, errno, "cannot fsync", t->tmp);
  if (close(t->fd) != 0 && !rc) rc = sys_err(err, errno, "cannot close", t->tmp);
  t->fd = -1;
  if (!rc && flags == SHOAL_FILE_EXCL) {
    if (link(t->tmp, t->path) != 0)
      rc = errno == EEXIST ? shoal_error_set(err, SHOAL_EEXIST, "'%s' exists", t->path)
                           : sys_err(err, errno, "cannot link", t->path);
    unlink(t->tmp); /* the link holds the file now, or it failed */
  } else if (!rc && rename(t->tmp, t->path) != 0) {
    rc = sys_err(err, errno, "cannot rename into", t->path);
  }
  if (rc) {
    unlink(t->tmp);
    return rc;
  }
  char dir[SHOAL_FILE_PATH_MAX];
  dir_of(t->path, dir, sizeof dir);
  return fsync_dir(dir, err);
}

void shoal_file_tmp_abort(shoal_file_tmp *t) {
  if (!t || t->fd < 0) return;
  if (t->direct) direct_off(t);
  close(t->fd);
  t->fd = -1;
  unlink(t->tmp);
}

int shoal_file_write_atomic(const char *path, const void *buf, size_t len, int flags,
                            shoal_error *err) {
  if (!buf && len)
    return shoal_error_set(err, SHOAL_EINVAL, "shoal_file_write_atomic: NULL buffer");
  shoal_file_tmp t;
  int rc = shoal_file_tmp_open(&t, path, err);
  if (rc) return rc;
  if ((rc = shoal_file_tmp_write(&t, buf, len, err))) {
    shoal_file_tmp_abort(&t);
    return rc;
  }
  return shoal_file_tmp_commit(&t, flags, err);
}
