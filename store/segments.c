/*
 * store/segments.c — experience segments (the format is in store.h): the canonical
 * encoding, value checks, and the two backends' storage (a folder of .seg files in
 * the file store, the `segments` collection in MongoDB).
 *
 * The encoding is the unit of everything: the file is the encoding, the MongoDB
 * document holds its columns as binaries and is turned back into it on read, and the
 * CRC is computed over it (bytes 16..end) in both cases. Columns are packed in a
 * fixed order, each padded with zeros to a multiple of 8 bytes so that every column
 * pointer into the buffer is aligned for its type.
 */
#define _GNU_SOURCE
#include <bson/bson.h>
#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "store/internal.h"

#ifdef SHOAL_HAVE_MONGOC
#include <mongoc/mongoc.h>
#endif

static const char SEG_MAGIC[8] = {'S', 'H', 'O', 'A', 'L', 'S', 'E', 'G'};
enum { SEG_VERSION = 1, SEG_FLAG_PRIORITY = 1 };
enum { MAX_ITEM_ELEMS = 1 << 24 };

/* ---- little-endian fields ------------------------------------------------ */

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

/* ---- spec and layout ----------------------------------------------------- */

size_t store_segment_dtype_size(int dtype) {
  switch (dtype) {
    case STORE_SEG_U8: return 1;
    case STORE_SEG_I32:
    case STORE_SEG_F32: return 4;
    default: return 0;
  }
}

const char *store_segment_dtype_name(int dtype) {
  switch (dtype) {
    case STORE_SEG_U8: return "u8";
    case STORE_SEG_I32: return "i32";
    case STORE_SEG_F32: return "f32";
    default: return "?";
  }
}

static int dtype_parse(const char *s, int *out) {
  for (int d = 0; d <= STORE_SEG_F32; d++)
    if (store_segment_dtype_size(d) && s && !strcmp(s, store_segment_dtype_name(d))) {
      *out = d;
      return 0;
    }
  return SHOAL_EINVAL;
}

/* Bytes of one item with dtype and shape; 0 when invalid. */
static size_t item_bytes(int dtype, int ndim, const int64_t *shape) {
  size_t es = store_segment_dtype_size(dtype);
  if (!es || ndim < 0 || ndim > STORE_SEG_MAX_DIMS) return 0;
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 1 || shape[d] > MAX_ITEM_ELEMS) return 0;
    n *= shape[d];
    if (n > MAX_ITEM_ELEMS) return 0;
  }
  for (int d = ndim; d < STORE_SEG_MAX_DIMS; d++)
    if (shape[d] != 0) return 0; /* unused dims are 0, so specs compare with memcmp-like ease */
  return (size_t)n * es;
}

static int spec_ok(const store_segment_spec *s) {
  if (s->obs_dtype != STORE_SEG_U8 && s->obs_dtype != STORE_SEG_F32) return 0;
  if (!item_bytes(s->obs_dtype, s->obs_ndim, s->obs_shape)) return 0;
  if (s->act_dtype == STORE_SEG_I32)
    return s->act_ndim == 0 && item_bytes(STORE_SEG_I32, 0, s->act_shape);
  if (s->act_dtype != STORE_SEG_F32) return 0;
  return item_bytes(s->act_dtype, s->act_ndim, s->act_shape) != 0;
}

static void spec_text(char *out, size_t cap, int dtype, int ndim, const int64_t *shape) {
  int o = snprintf(out, cap, "%s[", store_segment_dtype_name(dtype));
  for (int d = 0; d < ndim && d < STORE_SEG_MAX_DIMS && o > 0 && (size_t)o < cap; d++)
    o += snprintf(out + o, cap - (size_t)o, "%s%lld", d ? "," : "", (long long)shape[d]);
  if (o > 0 && (size_t)o < cap) snprintf(out + o, cap - (size_t)o, "]");
}

size_t store_segment_encoded_bytes(const store_segment_spec *spec, uint32_t rows, uint32_t ends,
                                   int has_priority) {
  if (!spec || !spec_ok(spec)) return 0;
  size_t ob = item_bytes(spec->obs_dtype, spec->obs_ndim, spec->obs_shape);
  size_t ab = item_bytes(spec->act_dtype, spec->act_ndim, spec->act_shape);
  size_t n = rows, k = ends;
  return STORE_SEG_HEADER + pad8(n * ob) + pad8(n * ab) + pad8(n * 4) + pad8(n) + pad8(n) +
         pad8(k * ob) + (has_priority ? pad8(n * 4) : 0);
}

/* Points seg's columns into its buffer for its spec, rows, ends and priority flag. */
static void layout(store_segment *seg) {
  const store_segment_spec *s = &seg->spec;
  size_t ob = item_bytes(s->obs_dtype, s->obs_ndim, s->obs_shape);
  size_t ab = item_bytes(s->act_dtype, s->act_ndim, s->act_shape);
  size_t n = seg->rows, k = seg->ends;
  unsigned char *p = seg->buf + STORE_SEG_HEADER;
  seg->obs = p, p += pad8(n * ob);
  seg->action = p, p += pad8(n * ab);
  seg->reward = (float *)(void *)p, p += pad8(n * 4);
  seg->terminated = p, p += pad8(n);
  seg->truncated = p, p += pad8(n);
  seg->final_obs = k ? (void *)p : NULL, p += pad8(k * ob);
  seg->priority = seg->has_priority ? (float *)(void *)p : NULL;
}

static void no_columns(store_segment *seg) {
  seg->rows = seg->ends = 0;
  seg->has_priority = 0;
  seg->len = 0;
  seg->obs = seg->action = seg->final_obs = NULL;
  seg->reward = seg->priority = NULL;
  seg->terminated = seg->truncated = NULL;
}

static int grow(store_segment *seg, size_t len, shoal_error *err) {
  if (len <= seg->cap) return 0;
  size_t nc = seg->cap ? seg->cap : 4096;
  while (nc < len) nc *= 2;
  void *p = realloc(seg->buf, nc);
  if (!p)
    return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory for a %zu-byte segment", len);
  seg->buf = p;
  seg->cap = nc;
  return 0;
}

int store_segment_reserve(store_segment *seg, const store_segment_spec *spec, uint32_t rows,
                          uint32_t ends, int has_priority, shoal_error *err) {
  if (!seg || !spec)
    return shoal_error_set(err, SHOAL_EINVAL, "store_segment_reserve: NULL argument");
  no_columns(seg);
  if (!spec_ok(spec))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: invalid segment spec (obs u8|f32 with 0-4 dims >= 1, action "
                           "i32 scalar or f32 with 0-4 dims)");
  if (rows == 0 || ends > rows)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: a segment needs 1+ rows and ends <= rows (%u, %u)", rows, ends);
  size_t len = store_segment_encoded_bytes(spec, rows, ends, has_priority);
  if (len > STORE_SEGMENT_MAX)
    return shoal_error_set(
        err, SHOAL_EFULL,
        "store: a segment of %u rows takes %zu bytes (at most %zu: use fewer rows)", rows, len,
        STORE_SEGMENT_MAX);
  int rc = grow(seg, len, err);
  if (rc) return rc;
  memset(seg->buf, 0, len); /* the padding is part of the CRC */
  seg->spec = *spec;
  seg->rows = rows;
  seg->ends = ends;
  seg->has_priority = has_priority ? 1 : 0;
  seg->len = len;
  layout(seg);
  return 0;
}

void store_segment_free(store_segment *seg) {
  if (!seg) return;
  free(seg->buf);
  memset(seg, 0, sizeof *seg);
}

/* ---- value checks -------------------------------------------------------- */

int store_segment_check(const store_segment *seg, const store_segment_limits *lim,
                        shoal_error *err) {
  if (!seg || !seg->rows)
    return shoal_error_set(err, SHOAL_EINVAL, "store_segment_check: an empty segment");
  const store_segment_spec *s = &seg->spec;
  const uint64_t q = seg->seq;
  if (lim) {
    const store_segment_spec *w = &lim->spec;
    int same = s->obs_dtype == w->obs_dtype && s->obs_ndim == w->obs_ndim &&
               s->act_dtype == w->act_dtype && s->act_ndim == w->act_ndim;
    for (int d = 0; same && d < STORE_SEG_MAX_DIMS; d++)
      same = s->obs_shape[d] == w->obs_shape[d] && s->act_shape[d] == w->act_shape[d];
    if (!same) {
      char a[96], b[96], c[96], d[96];
      spec_text(a, sizeof a, s->obs_dtype, s->obs_ndim, s->obs_shape);
      spec_text(b, sizeof b, s->act_dtype, s->act_ndim, s->act_shape);
      spec_text(c, sizeof c, w->obs_dtype, w->obs_ndim, w->obs_shape);
      spec_text(d, sizeof d, w->act_dtype, w->act_ndim, w->act_shape);
      return shoal_error_set(err, SHOAL_ESHAPE,
                             "segment %" PRIu64
                             " (source '%s'): spec obs %s action %s, the env "
                             "needs obs %s action %s",
                             q, seg->source, a, b, c, d);
    }
  }
  size_t n = seg->rows;
  uint32_t ended = 0;
  for (size_t i = 0; i < n; i++) {
    if (seg->terminated[i] > 1 || seg->truncated[i] > 1)
      return shoal_error_set(err, SHOAL_EFORMAT,
                             "segment %" PRIu64
                             " row %zu: terminated/truncated must be 0 or 1 "
                             "(got %u/%u)",
                             q, i, seg->terminated[i], seg->truncated[i]);
    ended += seg->terminated[i] | seg->truncated[i];
    if (!isfinite(seg->reward[i]))
      return shoal_error_set(err, SHOAL_ENAN, "segment %" PRIu64 " row %zu: reward is %g", q, i,
                             (double)seg->reward[i]);
    if (seg->priority && (!isfinite(seg->priority[i]) || seg->priority[i] < 0))
      return shoal_error_set(err, isfinite(seg->priority[i]) ? SHOAL_ERANGE : SHOAL_ENAN,
                             "segment %" PRIu64 " row %zu: priority %g (finite, >= 0 needed)", q, i,
                             (double)seg->priority[i]);
  }
  if (ended != seg->ends)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "segment %" PRIu64
                           ": %u rows end an episode but it holds %u final "
                           "observations",
                           q, ended, seg->ends);
  size_t obs_elems =
      item_bytes(s->obs_dtype, s->obs_ndim, s->obs_shape) / store_segment_dtype_size(s->obs_dtype);
  if (s->obs_dtype == STORE_SEG_F32) {
    const float *o = seg->obs;
    for (size_t i = 0; i < n * obs_elems; i++)
      if (!isfinite(o[i]))
        return shoal_error_set(err, SHOAL_ENAN, "segment %" PRIu64 " row %zu: obs[%zu] is %g", q,
                               i / obs_elems, i % obs_elems, (double)o[i]);
    const float *f = seg->final_obs;
    for (size_t i = 0; f && i < seg->ends * obs_elems; i++)
      if (!isfinite(f[i]))
        return shoal_error_set(err, SHOAL_ENAN,
                               "segment %" PRIu64 " final observation %zu: element %zu is %g", q,
                               i / obs_elems, i % obs_elems, (double)f[i]);
  }
  if (s->act_dtype == STORE_SEG_I32) {
    const int32_t *a = seg->action;
    for (size_t i = 0; i < n; i++)
      if (a[i] < 0 || (lim && lim->num_actions > 0 && a[i] >= lim->num_actions))
        return shoal_error_set(err, SHOAL_ERANGE,
                               "segment %" PRIu64 " row %zu: action %d outside [0, %lld)", q, i,
                               a[i], (long long)(lim ? lim->num_actions : 0));
  } else {
    size_t ae = item_bytes(s->act_dtype, s->act_ndim, s->act_shape) / 4;
    const float *a = seg->action;
    for (size_t i = 0; i < n * ae; i++) {
      size_t j = i % ae;
      if (!isfinite(a[i]))
        return shoal_error_set(err, SHOAL_ENAN, "segment %" PRIu64 " row %zu: action[%zu] is %g", q,
                               i / ae, j, (double)a[i]);
      if (lim &&
          ((lim->act_low && a[i] < lim->act_low[j]) || (lim->act_high && a[i] > lim->act_high[j])))
        return shoal_error_set(
            err, SHOAL_ERANGE, "segment %" PRIu64 " row %zu: action[%zu] = %g outside [%g, %g]", q,
            i / ae, j, (double)a[i], lim->act_low ? (double)lim->act_low[j] : -INFINITY,
            lim->act_high ? (double)lim->act_high[j] : INFINITY);
    }
  }
  return 0;
}

/* ---- the header ---------------------------------------------------------- */

static void header_write(store_segment *seg) {
  unsigned char *h = seg->buf;
  memset(h, 0, STORE_SEG_HEADER);
  memcpy(h, SEG_MAGIC, 8);
  store__put_le32(h + 8, SEG_VERSION);
  store__put_le64(h + 16, seg->seq);
  uint64_t wt;
  memcpy(&wt, &seg->wall_time, 8);
  store__put_le64(h + 24, wt);
  store__put_le32(h + 32, seg->rows);
  store__put_le32(h + 36, seg->ends);
  store__put_le32(h + 40, seg->has_priority ? SEG_FLAG_PRIORITY : 0);
  store__put_le32(h + 44, STORE_SEG_HEADER);
  memcpy(h + 48, seg->run, strnlen(seg->run, 63));
  memcpy(h + 112, seg->source, strnlen(seg->source, 63));
  const store_segment_spec *s = &seg->spec;
  store__put_le32(h + 176, (uint32_t)s->obs_dtype);
  store__put_le32(h + 180, (uint32_t)s->obs_ndim);
  store__put_le32(h + 216, (uint32_t)s->act_dtype);
  store__put_le32(h + 220, (uint32_t)s->act_ndim);
  for (int d = 0; d < STORE_SEG_MAX_DIMS; d++) {
    store__put_le64(h + 184 + 8 * d, (uint64_t)s->obs_shape[d]);
    store__put_le64(h + 224 + 8 * d, (uint64_t)s->act_shape[d]);
  }
  seg->crc = store__crc32(h + 16, seg->len - 16);
  store__put_le32(h + 12, seg->crc);
}

/* Parses the header of the len bytes in seg->buf (from `where`, for messages) and
 * lays the columns out. SHOAL_EFORMAT naming what is wrong. */
static int header_read(store_segment *seg, size_t len, const char *where, shoal_error *err) {
  const unsigned char *h = seg->buf;
  no_columns(seg);
  if (len < STORE_SEG_HEADER || memcmp(h, SEG_MAGIC, 8) != 0)
    return shoal_error_set(err, SHOAL_EFORMAT, "store: %s is not a shoal experience segment (%s)",
                           where, len < STORE_SEG_HEADER ? "shorter than its header" : "bad magic");
  if (store__get_le32(h + 8) != SEG_VERSION)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: %s has segment format version %u, expected %d", where,
                           store__get_le32(h + 8), SEG_VERSION);
  if (store__get_le32(h + 44) != STORE_SEG_HEADER)
    return shoal_error_set(err, SHOAL_EFORMAT, "store: %s: header size %u, expected %d", where,
                           store__get_le32(h + 44), STORE_SEG_HEADER);
  uint32_t crc = store__crc32(h + 16, len - 16);
  if (crc != store__get_le32(h + 12))
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: %s: CRC mismatch (stored %08x, data %08x): damaged or "
                           "truncated",
                           where, store__get_le32(h + 12), crc);
  store_segment_spec s;
  memset(&s, 0, sizeof s);
  s.obs_dtype = (int)store__get_le32(h + 176);
  s.obs_ndim = (int)store__get_le32(h + 180);
  s.act_dtype = (int)store__get_le32(h + 216);
  s.act_ndim = (int)store__get_le32(h + 220);
  for (int d = 0; d < STORE_SEG_MAX_DIMS; d++) {
    s.obs_shape[d] = (int64_t)store__get_le64(h + 184 + 8 * d);
    s.act_shape[d] = (int64_t)store__get_le64(h + 224 + 8 * d);
  }
  uint32_t rows = store__get_le32(h + 32), ends = store__get_le32(h + 36),
           flags = store__get_le32(h + 40);
  size_t want = store_segment_encoded_bytes(&s, rows, ends, flags & SEG_FLAG_PRIORITY);
  if (!spec_ok(&s) || rows == 0 || ends > rows || (flags & ~(uint32_t)SEG_FLAG_PRIORITY))
    return shoal_error_set(err, SHOAL_EFORMAT, "store: %s: invalid spec, row count or flags",
                           where);
  if (want != len)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: %s holds %zu bytes; its header (%u rows, %u ends) needs %zu",
                           where, len, rows, ends, want);
  seg->spec = s;
  seg->rows = rows;
  seg->ends = ends;
  seg->has_priority = (flags & SEG_FLAG_PRIORITY) != 0;
  seg->seq = store__get_le64(h + 16);
  uint64_t wt = store__get_le64(h + 24);
  memcpy(&seg->wall_time, &wt, 8);
  memcpy(seg->run, h + 48, 63);
  seg->run[63] = 0;
  memcpy(seg->source, h + 112, 63);
  seg->source[63] = 0;
  seg->crc = crc;
  seg->len = len;
  layout(seg);
  return 0;
}

/* ---- the file store ------------------------------------------------------ */

static atomic_uint_fast64_t tmp_counter;

static int seg_dir(store *st, const char *run, char *out, shoal_error *err) {
  int n = snprintf(out, PATH_MAX, "%s/%s/segments", store__file_root(store__impl(st)), run);
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

static int mkdir_1(const char *p, shoal_error *err) {
  if (mkdir(p, 0755) == 0 || errno == EEXIST) return 0;
  return store__sys_err(err, errno, "cannot create folder", p);
}

static int fsync_path(const char *p, shoal_error *err) {
  int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return store__sys_err(err, errno, "cannot open folder", p);
  int rc = 0;
  if (fsync(fd) != 0 && errno != EINVAL) rc = store__sys_err(err, errno, "cannot fsync folder", p);
  close(fd);
  return rc;
}

static int write_fd(int fd, const void *buf, size_t len) {
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

static int file_write(store *st, const char *run, store_segment *seg, shoal_error *err) {
  char dir[PATH_MAX], tmp[PATH_MAX + 64], dst[PATH_MAX + 64];
  int rc = seg_dir(st, run, dir, err);
  if (rc) return rc;
  if ((rc = mkdir_1(dir, err))) return rc;
  uint64_t seq;
  int hinted = hint_get(dir, &seq);
  if (!hinted && (rc = file_next_seq(dir, &seq, err))) return rc;
  /* Claim seq by link(): the first writer to link a complete file takes it; one who
   * loses writes again with the next number, so numbers appear in order. */
  for (int attempt = 0; attempt < 1000; attempt++, seq++) {
    seg->seq = seq;
    header_write(seg);
    unsigned long long c = (unsigned long long)atomic_fetch_add(&tmp_counter, 1);
    snprintf(tmp, sizeof tmp, "%s/.tmp.seg.%ld.%llu", dir, (long)getpid(), c);
    snprintf(dst, sizeof dst, "%s/%020" PRIu64 ".seg", dir, seq);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return store__sys_err(err, errno, "cannot create", tmp);
    int e = write_fd(fd, seg->buf, seg->len);
    if (e)
      rc = store__sys_err(err, e, "cannot write", tmp);
    else if (fsync(fd) != 0)
      rc = store__sys_err(err, errno, "cannot fsync", tmp);
    if (close(fd) != 0 && !rc) rc = store__sys_err(err, errno, "cannot close", tmp);
    if (!rc && link(tmp, dst) != 0)
      rc = errno == EEXIST ? SHOAL_EEXIST : store__sys_err(err, errno, "cannot link", dst);
    unlink(tmp);
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
    if (rc) return rc;
    hint_set(dir, seq + 1);
    return fsync_path(dir, err);
  }
  return shoal_error_set(err, SHOAL_EIO, "store: no free segment number in '%s' after 1000 tries",
                         dir);
}

static int file_list(store *st, const char *run, uint64_t after, uint64_t *out, size_t cap,
                     size_t *n, shoal_error *err) {
  char dir[PATH_MAX];
  int rc = seg_dir(st, run, dir, err);
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

static int file_read(store *st, const char *run, uint64_t seq, store_segment *seg,
                     shoal_error *err) {
  char dir[PATH_MAX], p[PATH_MAX + 32];
  int rc = seg_dir(st, run, dir, err);
  if (rc) return rc;
  snprintf(p, sizeof p, "%s/%020" PRIu64 ".seg", dir, seq);
  no_columns(seg);
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
  } else if (!(rc = grow(seg, (size_t)sb.st_size > 0 ? (size_t)sb.st_size : 1, err))) {
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
      rc = header_read(seg, len, where, err);
    if (!rc && seg->seq != seq)
      rc = shoal_error_set(err, SHOAL_EFORMAT, "store: '%s' says it is segment %" PRIu64, p,
                           seg->seq);
    if (rc) no_columns(seg);
  }
  close(fd);
  return rc;
}

/* ---- MongoDB ------------------------------------------------------------- */

#ifdef SHOAL_HAVE_MONGOC

typedef struct {
  void *impl;
  mongoc_client_t *c;
  mongoc_collection_t *coll;
  const char *db;
} mop;

static mop mop_begin(store *st) {
  mop o = {store__impl(st), NULL, NULL, NULL};
  o.c = store__mongo_pop(o.impl, &o.db);
  o.coll = mongoc_client_get_collection(o.c, o.db, "segments");
  return o;
}

static void mop_end(mop *o) {
  mongoc_collection_destroy(o->coll);
  store__mongo_push(o->impl, o->c);
}

static int merror(mop *o, shoal_error *err, const bson_error_t *be, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int merror(mop *o, shoal_error *err, const bson_error_t *be, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return store__mongo_error(o->impl, err, be, what);
}

static void append_spec(bson_t *parent, const char *key, int dtype, int ndim,
                        const int64_t *shape) {
  bson_t d, a;
  BSON_APPEND_DOCUMENT_BEGIN(parent, key, &d);
  BSON_APPEND_UTF8(&d, "dtype", store_segment_dtype_name(dtype));
  BSON_APPEND_ARRAY_BEGIN(&d, "shape", &a);
  for (int i = 0; i < ndim; i++) {
    char k[12];
    snprintf(k, sizeof k, "%d", i);
    BSON_APPEND_INT64(&a, k, shape[i]);
  }
  bson_append_array_end(&d, &a);
  bson_append_document_end(parent, &d);
}

static int ensure_index(mop *o, shoal_error *err) {
  bson_t *cmd = BCON_NEW("createIndexes", BCON_UTF8("segments"), "indexes", "[", "{", "key", "{",
                         "run", BCON_INT32(1), "seq", BCON_INT32(1), "}", "name", "run_seq",
                         "unique", BCON_BOOL(true), "}", "]");
  bson_error_t be;
  mongoc_database_t *dbh = mongoc_client_get_database(o->c, o->db);
  bool ok = mongoc_database_write_command_with_opts(dbh, cmd, NULL, NULL, &be);
  mongoc_database_destroy(dbh);
  bson_destroy(cmd);
  return ok ? 0 : merror(o, err, &be, "cannot create the index of 'segments'");
}

/* The highest seq of run, or -1 when it has none. */
static int mongo_max_seq(mop *o, const char *run, int64_t *out, shoal_error *err) {
  bson_t *filter = BCON_NEW("run", BCON_UTF8(run));
  bson_t *opts = BCON_NEW("sort", "{", "seq", BCON_INT32(-1), "}", "limit", BCON_INT64(1),
                          "projection", "{", "seq", BCON_INT32(1), "}");
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o->coll, filter, opts, NULL);
  const bson_t *d;
  *out = -1;
  bson_iter_t it;
  if (mongoc_cursor_next(cur, &d) && bson_iter_init_find(&it, d, "seq"))
    *out = bson_iter_as_int64(&it);
  bson_error_t be;
  int rc = 0;
  if (mongoc_cursor_error(cur, &be))
    rc = merror(o, err, &be, "cannot read segments of run '%s'", run);
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(filter);
  return rc;
}

static int mongo_write(store *st, const char *run, store_segment *seg, shoal_error *err) {
  mop o = mop_begin(st);
  int64_t max;
  int rc = mongo_max_seq(&o, run, &max, err);
  if (!rc && max < 0) rc = ensure_index(&o, err);
  const store_segment_spec *s = &seg->spec;
  size_t ob = item_bytes(s->obs_dtype, s->obs_ndim, s->obs_shape);
  size_t ab = item_bytes(s->act_dtype, s->act_ndim, s->act_shape);
  size_t n = seg->rows;
  for (int attempt = 0; !rc && attempt < 1000; attempt++) {
    seg->seq = (uint64_t)(max + 1 + attempt);
    header_write(seg);
    bson_t doc, spec;
    bson_init(&doc);
    BSON_APPEND_UTF8(&doc, "run", run);
    BSON_APPEND_INT64(&doc, "seq", (int64_t)seg->seq);
    BSON_APPEND_UTF8(&doc, "source", seg->source);
    BSON_APPEND_DOUBLE(&doc, "wall_time", seg->wall_time);
    BSON_APPEND_INT64(&doc, "rows", seg->rows);
    BSON_APPEND_INT64(&doc, "ends", seg->ends);
    BSON_APPEND_INT64(&doc, "crc", seg->crc);
    BSON_APPEND_DOCUMENT_BEGIN(&doc, "spec", &spec);
    append_spec(&spec, "obs", s->obs_dtype, s->obs_ndim, s->obs_shape);
    append_spec(&spec, "action", s->act_dtype, s->act_ndim, s->act_shape);
    bson_append_document_end(&doc, &spec);
    BSON_APPEND_BINARY(&doc, "obs", BSON_SUBTYPE_BINARY, seg->obs, (uint32_t)(n * ob));
    BSON_APPEND_BINARY(&doc, "action", BSON_SUBTYPE_BINARY, seg->action, (uint32_t)(n * ab));
    BSON_APPEND_BINARY(&doc, "reward", BSON_SUBTYPE_BINARY, (const uint8_t *)seg->reward,
                       (uint32_t)(n * 4));
    BSON_APPEND_BINARY(&doc, "terminated", BSON_SUBTYPE_BINARY, seg->terminated, (uint32_t)n);
    BSON_APPEND_BINARY(&doc, "truncated", BSON_SUBTYPE_BINARY, seg->truncated, (uint32_t)n);
    if (seg->ends)
      BSON_APPEND_BINARY(&doc, "final_obs", BSON_SUBTYPE_BINARY, seg->final_obs,
                         (uint32_t)(seg->ends * ob));
    if (seg->priority)
      BSON_APPEND_BINARY(&doc, "priority", BSON_SUBTYPE_BINARY, (const uint8_t *)seg->priority,
                         (uint32_t)(n * 4));
    bson_error_t be;
    if (!mongoc_collection_insert_one(o.coll, &doc, NULL, NULL, &be)) {
      rc = merror(&o, err, &be, "cannot write segment %" PRIu64 " of run '%s'", seg->seq, run);
      bson_destroy(&doc);
      if (rc != SHOAL_EEXIST) break;
      rc = 0; /* another writer took this number: try the next one */
      continue;
    }
    bson_destroy(&doc);
    mop_end(&o);
    return 0;
  }
  mop_end(&o);
  if (!rc) rc = shoal_error_set(err, SHOAL_EIO, "store: no free segment number for run '%s'", run);
  return rc;
}

static int mongo_list(store *st, const char *run, uint64_t after, uint64_t *out, size_t cap,
                      size_t *n, shoal_error *err) {
  mop o = mop_begin(st);
  bson_t *filter = after == STORE_SEG_FIRST ? BCON_NEW("run", BCON_UTF8(run))
                                            : BCON_NEW("run", BCON_UTF8(run), "seq", "{", "$gt",
                                                       BCON_INT64((int64_t)after), "}");
  bson_t *opts = BCON_NEW("sort", "{", "seq", BCON_INT32(1), "}", "limit", BCON_INT64((int64_t)cap),
                          "projection", "{", "seq", BCON_INT32(1), "}");
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o.coll, filter, opts, NULL);
  const bson_t *d;
  size_t k = 0;
  while (k < cap && mongoc_cursor_next(cur, &d)) {
    bson_iter_t it;
    if (bson_iter_init_find(&it, d, "seq")) out[k++] = (uint64_t)bson_iter_as_int64(&it);
  }
  bson_error_t be;
  int rc = 0;
  if (mongoc_cursor_error(cur, &be))
    rc = merror(&o, err, &be, "cannot list segments of run '%s'", run);
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(filter);
  mop_end(&o);
  if (!rc) *n = k;
  return rc;
}

/* Reads spec.<key> {dtype, shape} of d. */
static int doc_spec(const bson_t *d, const char *key, int *dtype, int *ndim, int64_t *shape) {
  bson_iter_t it, sub, arr;
  char path[32];
  snprintf(path, sizeof path, "spec.%s", key);
  if (!bson_iter_init(&it, d) || !bson_iter_find_descendant(&it, path, &sub) ||
      !BSON_ITER_HOLDS_DOCUMENT(&sub) || !bson_iter_recurse(&sub, &arr))
    return SHOAL_EFORMAT;
  const char *dt = NULL;
  int nd = 0;
  memset(shape, 0, STORE_SEG_MAX_DIMS * sizeof *shape);
  while (bson_iter_next(&arr)) {
    if (!strcmp(bson_iter_key(&arr), "dtype") && BSON_ITER_HOLDS_UTF8(&arr))
      dt = bson_iter_utf8(&arr, NULL);
    if (!strcmp(bson_iter_key(&arr), "shape") && BSON_ITER_HOLDS_ARRAY(&arr)) {
      bson_iter_t e;
      bson_iter_recurse(&arr, &e);
      while (bson_iter_next(&e)) {
        if (nd >= STORE_SEG_MAX_DIMS) return SHOAL_EFORMAT;
        shape[nd++] = bson_iter_as_int64(&e);
      }
    }
  }
  *ndim = nd;
  return dtype_parse(dt, dtype) ? SHOAL_EFORMAT : 0;
}

/* Copies binary field key of d (exactly want bytes) to dst. */
static int doc_bin(const bson_t *d, const char *key, void *dst, size_t want) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, d, key) || !BSON_ITER_HOLDS_BINARY(&it))
    return want ? SHOAL_EFORMAT : 0;
  bson_subtype_t sub;
  uint32_t len;
  const uint8_t *data;
  bson_iter_binary(&it, &sub, &len, &data);
  if (len != want) return SHOAL_EFORMAT;
  if (want) memcpy(dst, data, want);
  return 0;
}

static int mongo_read(store *st, const char *run, uint64_t seq, store_segment *seg,
                      shoal_error *err) {
  mop o = mop_begin(st);
  bson_t *filter = BCON_NEW("run", BCON_UTF8(run), "seq", BCON_INT64((int64_t)seq));
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o.coll, filter, NULL, NULL);
  const bson_t *d;
  int rc = 0, found = mongoc_cursor_next(cur, &d);
  bson_error_t be;
  no_columns(seg);
  char where[160];
  snprintf(where, sizeof where, "segment %" PRIu64 " of run '%s' (MongoDB)", seq, run);
  if (mongoc_cursor_error(cur, &be)) {
    rc = merror(&o, err, &be, "cannot read segment %" PRIu64 " of run '%s'", seq, run);
  } else if (!found) {
    rc = shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' has no segment %" PRIu64, run, seq);
  } else {
    store_segment_spec s;
    memset(&s, 0, sizeof s);
    bson_iter_t it;
    int64_t rows = -1, ends = -1, crc = -1;
    if (bson_iter_init_find(&it, d, "rows")) rows = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, d, "ends")) ends = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, d, "crc")) crc = bson_iter_as_int64(&it);
    int has_prio = bson_iter_init_find(&it, d, "priority");
    const char *src = NULL;
    if (bson_iter_init_find(&it, d, "source") && BSON_ITER_HOLDS_UTF8(&it))
      src = bson_iter_utf8(&it, NULL);
    double wt = 0;
    if (bson_iter_init_find(&it, d, "wall_time") && BSON_ITER_HOLDS_DOUBLE(&it))
      wt = bson_iter_double(&it);
    if (doc_spec(d, "obs", &s.obs_dtype, &s.obs_ndim, s.obs_shape) ||
        doc_spec(d, "action", &s.act_dtype, &s.act_ndim, s.act_shape) || rows < 1 ||
        rows > UINT32_MAX || ends < 0 || ends > rows || crc < 0 || !src ||
        !store_segment_encoded_bytes(&s, (uint32_t)rows, (uint32_t)ends, has_prio)) {
      rc = shoal_error_set(err, SHOAL_EFORMAT, "store: %s: missing or invalid fields", where);
    } else if ((rc = store_segment_reserve(seg, &s, (uint32_t)rows, (uint32_t)ends, has_prio,
                                           err))) {
      if (rc == SHOAL_EFULL)
        rc = shoal_error_set(err, SHOAL_EFORMAT, "store: %s is too large", where);
    } else {
      size_t ob = item_bytes(s.obs_dtype, s.obs_ndim, s.obs_shape);
      size_t ab = item_bytes(s.act_dtype, s.act_ndim, s.act_shape);
      size_t n = (size_t)rows, k = (size_t)ends;
      const char *bad = doc_bin(d, "obs", seg->obs, n * ob)                          ? "obs"
                        : doc_bin(d, "action", seg->action, n * ab)                  ? "action"
                        : doc_bin(d, "reward", seg->reward, n * 4)                   ? "reward"
                        : doc_bin(d, "terminated", seg->terminated, n)               ? "terminated"
                        : doc_bin(d, "truncated", seg->truncated, n)                 ? "truncated"
                        : doc_bin(d, "final_obs", seg->final_obs, k * ob)            ? "final_obs"
                        : (has_prio && doc_bin(d, "priority", seg->priority, n * 4)) ? "priority"
                                                                                     : NULL;
      if (bad) {
        rc = shoal_error_set(err, SHOAL_EFORMAT,
                             "store: %s: column '%s' is missing or has the wrong size", where, bad);
      } else {
        seg->seq = seq;
        seg->wall_time = wt;
        snprintf(seg->run, sizeof seg->run, "%s", run);
        snprintf(seg->source, sizeof seg->source, "%s", src);
        header_write(seg);
        if (seg->crc != (uint32_t)crc)
          rc = shoal_error_set(err, SHOAL_EFORMAT,
                               "store: %s: CRC mismatch (stored %08x, data %08x): damaged", where,
                               (uint32_t)crc, seg->crc);
      }
    }
    if (rc) no_columns(seg);
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(filter);
  mop_end(&o);
  return rc;
}

#endif

/* ---- the front ----------------------------------------------------------- */

static int is_file(store *st) { return strcmp(store_backend_name(st), "file") == 0; }

static int check_run(store *st, const char *run, shoal_error *err) {
  if (!store_name_valid(run))
    return shoal_error_set(err, SHOAL_EINVAL, "store: invalid run name '%.80s'",
                           run ? run : "(null)");
  store_run r;
  memset(&r, 0, sizeof r);
  int rc = store_run_find(st, run, &r, err);
  if (rc == SHOAL_ENOENT)
    return shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' does not exist in %s", run,
                           store_uri(st));
  store_run_clear(&r);
  return rc;
}

int store_segment_write(store *st, const char *run, store_segment *seg, shoal_error *err) {
  if (!st || !seg) return shoal_error_set(err, SHOAL_EINVAL, "store_segment_write: NULL argument");
  if (!store_name_valid(seg->source))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: segment source '%.80s' is not a valid name (1-63 of "
                           "[A-Za-z0-9._-], starting with a letter or digit)",
                           seg->source);
  if (!seg->rows || !seg->buf ||
      seg->len != store_segment_encoded_bytes(&seg->spec, seg->rows, seg->ends, seg->has_priority))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: the segment was not laid out by store_segment_reserve");
  int rc = check_run(st, run, err);
  if (rc) return rc;
  snprintf(seg->run, sizeof seg->run, "%s", run);
  seg->wall_time = store__wall_time();
  if (is_file(st)) return file_write(st, run, seg, err);
#ifdef SHOAL_HAVE_MONGOC
  return mongo_write(st, run, seg, err);
#else
  return shoal_error_set(err, SHOAL_ENOTSUP, "store: segments need the file or MongoDB backend");
#endif
}

int store_segment_list(store *st, const char *run, uint64_t after, uint64_t *seqs, size_t cap,
                       size_t *n, shoal_error *err) {
  if (!st || !n || (!seqs && cap))
    return shoal_error_set(err, SHOAL_EINVAL, "store_segment_list: NULL argument");
  if (!store_name_valid(run))
    return shoal_error_set(err, SHOAL_EINVAL, "store: invalid run name '%.80s'",
                           run ? run : "(null)");
  size_t k = 0;
  int rc;
  if (is_file(st)) {
    rc = file_list(st, run, after, seqs, cap, &k, err);
  } else {
#ifdef SHOAL_HAVE_MONGOC
    rc = mongo_list(st, run, after, seqs, cap, &k, err);
#else
    rc = shoal_error_set(err, SHOAL_ENOTSUP, "store: segments need the file or MongoDB backend");
#endif
  }
  /* Nothing found: say so only when the run itself is missing. */
  if (!rc && k == 0) rc = check_run(st, run, err);
  if (!rc) *n = k;
  return rc;
}

int store_segment_read(store *st, const char *run, uint64_t seq, store_segment *seg,
                       shoal_error *err) {
  if (!st || !seg) return shoal_error_set(err, SHOAL_EINVAL, "store_segment_read: NULL argument");
  if (!store_name_valid(run))
    return shoal_error_set(err, SHOAL_EINVAL, "store: invalid run name '%.80s'",
                           run ? run : "(null)");
  if (is_file(st)) return file_read(st, run, seq, seg, err);
#ifdef SHOAL_HAVE_MONGOC
  return mongo_read(st, run, seq, seg, err);
#else
  return shoal_error_set(err, SHOAL_ENOTSUP, "store: segments need the file or MongoDB backend");
#endif
}
