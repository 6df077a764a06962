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
  t->reused = 0;
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

int shoal_file_tmp_write(shoal_file_tmp *t, const void *buf, size_t len, shoal_error *err) {
  const char *p = buf;
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

int shoal_file_tmp_commit(shoal_file_tmp *t, int flags, shoal_error *err) {
  int rc = 0;
  if (t->fd < 0) return shoal_error_set(err, SHOAL_ESTATE, "'%s' is not open", t->tmp);
  if (t->reused) { /* a spare longer than what was written keeps its old tail otherwise */
    off_t end = lseek(t->fd, 0, SEEK_CUR);
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
