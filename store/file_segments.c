/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/file_segments.c — experience segments in the file store (the format is in
 * store_segments.h): DIR/<run>/segments/<seq, 20 digits>.seg, each the segment's canonical
 * encoding, written atomically.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "store/file_backend.h"

static int seg_dir(void *impl, const char *run, char *out, shoal_error *err) {
  int n = snprintf(out, PATH_MAX, "%s/%s/segments", store__file_root(impl), run);
  if (n < 0 || n >= PATH_MAX)
    return shoal_error_set(err, SHOAL_EINVAL, "store: path of run '%s' segments too long", run);
  return 0;
}

static int parse_seq_name(const char *s, uint64_t *out) {
  if (strlen(s) != 24 || strcmp(s + 20, ".seg") != 0) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 20; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  *out = v;
  return 1;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Every seq in dir above after (all when after is STORE_SEG_FIRST), sorted; *out is
 * malloc'd (NULL when none). A missing folder is no segments. */
static int file_seqs(const char *dir, uint64_t after, uint64_t **out, size_t *n, shoal_error *err) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : store__sys_err(err, errno, "cannot list", dir);
  uint64_t *v = NULL;
  size_t k = 0, cap = 0;
  struct dirent *de;
  int rc = 0;
  while ((de = readdir(d))) {
    uint64_t s;
    if (!parse_seq_name(de->d_name, &s)) continue;
    if (after != STORE_SEG_FIRST && s <= after) continue;
    if ((rc = store__grow((void **)&v, &cap, k, sizeof *v))) break;
    v[k++] = s;
  }
  closedir(d);
  if (rc) {
    free(v);
    return shoal_error_set(err, rc, "store: out of memory listing '%s'", dir);
  }
  if (k) qsort(v, k, sizeof *v, cmp_u64);
  *out = v;
  *n = k;
  return 0;
}

/* The number after the last segment this process wrote to a folder, so a long import
 * does not list a growing folder for every segment. Only a hint: the number is still
 * claimed by link(), and a miss (another writer took it) lists the folder again. */
enum { HINTS = 8 };
static pthread_mutex_t hint_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  char dir[PATH_MAX];
  uint64_t next;
} hints[HINTS];
static unsigned hint_clock;

static int hint_get(const char *dir, uint64_t *next) {
  int found = 0;
  pthread_mutex_lock(&hint_mu);
  for (int i = 0; i < HINTS && !found; i++)
    if (!strcmp(hints[i].dir, dir)) *next = hints[i].next, found = 1;
  pthread_mutex_unlock(&hint_mu);
  return found;
}

static void hint_set(const char *dir, uint64_t next) {
  pthread_mutex_lock(&hint_mu);
  int slot = -1;
  for (int i = 0; i < HINTS && slot < 0; i++)
    if (!strcmp(hints[i].dir, dir)) slot = i;
  if (slot < 0) slot = (int)(hint_clock++ % HINTS);
  snprintf(hints[slot].dir, sizeof hints[slot].dir, "%s", dir);
  hints[slot].next = next;
  pthread_mutex_unlock(&hint_mu);
}

static int file_next_seq(const char *dir, uint64_t *out, shoal_error *err) {
  uint64_t *seqs;
  size_t n;
  int rc = file_seqs(dir, STORE_SEG_FIRST, &seqs, &n, err);
  if (rc) return rc;
  *out = n ? seqs[n - 1] + 1 : 0;
  free(seqs);
  return 0;
}

int store__file_segment_write(void *impl, const char *run, store_segment *seg, shoal_error *err) {
  char dir[PATH_MAX], dst[PATH_MAX + 64];
  int rc = seg_dir(impl, run, dir, err);
  if (rc) return rc;
  if ((rc = store__file_mkdir(dir, err))) return rc;
  uint64_t seq;
  int hinted = hint_get(dir, &seq);
  if (!hinted && (rc = file_next_seq(dir, &seq, err))) return rc;
  /* Claim seq by an exclusive atomic write (link()): the first writer to link a complete
   * file takes it; one who loses writes again with the next number, so numbers appear
   * in order. */
  for (int attempt = 0; attempt < 1000; attempt++, seq++) {
    seg->seq = seq;
    store__seg_header_write(seg);
    snprintf(dst, sizeof dst, "%s/%020" PRIu64 ".seg", dir, seq);
    shoal_error e = {0};
    rc = shoal_file_write_atomic(dst, seg->buf, seg->len, SHOAL_FILE_EXCL, &e);
    if (rc == SHOAL_EEXIST) {
      /* Taken by another writer: from the folder's end (the loop adds one). */
      rc = 0;
      if (hinted) {
        hinted = 0;
        if ((rc = file_next_seq(dir, &seq, err))) return rc;
        seq--;
      }
      continue;
    }
    if (rc) return shoal_error_set(err, rc, "store: %s", e.msg);
    hint_set(dir, seq + 1);
    return 0;
  }
  return shoal_error_set(err, SHOAL_EIO, "store: no free segment number in '%s' after 1000 tries",
                         dir);
}

int store__file_segment_list(void *impl, const char *run, uint64_t after, uint64_t *out, size_t cap,
                             size_t *n, shoal_error *err) {
  char dir[PATH_MAX];
  int rc = seg_dir(impl, run, dir, err);
  if (rc) return rc;
  uint64_t *v;
  size_t k;
  if ((rc = file_seqs(dir, after, &v, &k, err))) return rc;
  if (k > cap) k = cap;
  if (k) memcpy(out, v, k * sizeof *v);
  free(v);
  *n = k;
  return 0;
}

int store__file_segment_read(void *impl, const char *run, uint64_t seq, store_segment *seg,
                             shoal_error *err) {
  char dir[PATH_MAX], p[PATH_MAX + 32];
  int rc = seg_dir(impl, run, dir, err);
  if (rc) return rc;
  snprintf(p, sizeof p, "%s/%020" PRIu64 ".seg", dir, seq);
  store__seg_no_columns(seg);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? shoal_error_set(err, SHOAL_ENOENT,
                                             "store: run '%s' has no segment %" PRIu64, run, seq)
                           : store__sys_err(err, errno, "cannot open", p);
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    rc = store__sys_err(err, errno, "cannot stat", p);
  } else if ((size_t)sb.st_size > STORE_SEGMENT_MAX) {
    rc = shoal_error_set(err, SHOAL_EFORMAT, "store: '%s' has %lld bytes, above the %zu-byte limit",
                         p, (long long)sb.st_size, STORE_SEGMENT_MAX);
  } else if (!(rc = store__seg_grow(seg, (size_t)sb.st_size > 0 ? (size_t)sb.st_size : 1, err))) {
    size_t len = (size_t)sb.st_size, got = 0;
    while (got < len) {
      ssize_t r = read(fd, seg->buf + got, len - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    char where[PATH_MAX + 48];
    snprintf(where, sizeof where, "'%s'", p);
    if (got != len)
      rc = shoal_error_set(err, SHOAL_EFORMAT, "store: '%s' shrank while being read", p);
    else
      rc = store__seg_header_read(seg, len, where, err);
    if (!rc && seg->seq != seq)
      rc = shoal_error_set(err, SHOAL_EFORMAT, "store: '%s' says it is segment %" PRIu64, p,
                           seg->seq);
    if (rc) store__seg_no_columns(seg);
  }
  close(fd);
  return rc;
}
