/* SPDX-License-Identifier: Apache-2.0 */
/* TensorBoard event files: TFRecord framing and hand-encoded Event protobufs. See
 * cli/tboard.h for the format. */
#define _GNU_SOURCE
#include "cli/tboard.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"

/* ---- TFRecord framing ---------------------------------------------------------- */

uint32_t tb_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---- protobuf encoding ------------------------------------------------------- */

static size_t put_varint(uint8_t *o, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    o[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  o[n++] = (uint8_t)v;
  return n;
}

static size_t put_le(uint8_t *o, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) o[i] = (uint8_t)(v >> (8 * i));
  return (size_t)bytes;
}

/* An Event: wall_time (field 1, fixed64), step (2, varint), then either file_version
 * (3, bytes) or summary (5) { value (1) { tag (1), simple_value (2, fixed32) } }. Writes
 * into o (room for 64 + strlen bytes) and returns the length. */
static size_t encode_event(uint8_t *o, double wall_time, int64_t step, const char *version,
                           const char *tag, float value) {
  size_t n = 0;
  uint64_t wt;
  memcpy(&wt, &wall_time, 8);
  o[n++] = 0x09;
  n += put_le(o + n, wt, 8);
  if (step != 0) {
    o[n++] = 0x10;
    n += put_varint(o + n, (uint64_t)step); /* int64: negative values take 10 bytes */
  }
  if (version) {
    size_t vl = strlen(version);
    o[n++] = 0x1a;
    n += put_varint(o + n, vl);
    memcpy(o + n, version, vl);
    return n + vl;
  }
  size_t tl = strlen(tag);
  size_t vlen = 1 + (tl < 128 ? 1 : 2) + tl + 1 + 4; /* Value */
  size_t slen = 1 + (vlen < 128 ? 1 : 2) + vlen;     /* Summary */
  o[n++] = 0x2a;
  n += put_varint(o + n, slen);
  o[n++] = 0x0a;
  n += put_varint(o + n, vlen);
  o[n++] = 0x0a;
  n += put_varint(o + n, tl);
  memcpy(o + n, tag, tl);
  n += tl;
  uint32_t fv;
  memcpy(&fv, &value, 4);
  o[n++] = 0x15;
  n += put_le(o + n, fv, 4);
  return n;
}

/* ---- the writer -------------------------------------------------------------- */

struct tb_writer {
  FILE *f;
  char path[4096];
};

static int mkdirs(const char *dir, shoal_error *err) {
  char p[4096];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0755) && errno != EEXIST)
      return shoal_error_set(err, SHOAL_EIO, "tensorboard: cannot make %s: %s", p, strerror(errno));
    *s = '/';
  }
  if (mkdir(p, 0755) && errno != EEXIST)
    return shoal_error_set(err, SHOAL_EIO, "tensorboard: cannot make %s: %s", p, strerror(errno));
  return 0;
}

static int write_record(tb_writer *w, const uint8_t *data, size_t n, shoal_error *err) {
  uint8_t head[12];
  put_le(head, n, 8);
  put_le(head + 8, tb_mask_crc(shoal_crc32c(0, head, 8)), 4);
  uint8_t foot[4];
  put_le(foot, tb_mask_crc(shoal_crc32c(0, data, n)), 4);
  if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data, 1, n, w->f) != n ||
      fwrite(foot, 1, 4, w->f) != 4)
    return shoal_error_set(err, SHOAL_EIO, "tensorboard: writing %s: %s", w->path, strerror(errno));
  return 0;
}

static double now_unix(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tb_writer_open(tb_writer **out, const char *dir, shoal_error *err) {
  int rc = mkdirs(dir, err);
  if (rc) return rc;
  tb_writer *w = calloc(1, sizeof *w);
  if (!w) return shoal_error_set(err, SHOAL_ENOMEM, "tensorboard: out of memory");
  char host[64] = "localhost";
  gethostname(host, sizeof host - 1);
  double t = now_unix();
  /* TensorBoard finds files by "tfevents" in the name; the pid keeps two writers of one
   * second apart. */
  snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)t, host,
           (int)getpid());
  w->f = fopen(w->path, "wbx");
  if (!w->f) {
    rc = shoal_error_set(err, SHOAL_EIO, "tensorboard: cannot create %s: %s", w->path,
                         strerror(errno));
    free(w);
    return rc;
  }
  uint8_t buf[128];
  size_t n = encode_event(buf, t, 0, "brain.Event:2", NULL, 0);
  if ((rc = write_record(w, buf, n, err)) || (rc = tb_writer_flush(w, err))) {
    tb_writer_close(w);
    return rc;
  }
  *out = w;
  return 0;
}

const char *tb_writer_path(const tb_writer *w) { return w->path; }

int tb_writer_scalar(tb_writer *w, const char *tag, int64_t step, double wall_time, float value,
                     shoal_error *err) {
  size_t tl = tag ? strlen(tag) : 0;
  if (tl == 0 || tl > 255)
    return shoal_error_set(err, SHOAL_EINVAL, "tensorboard: tag of %zu bytes (1..255)", tl);
  uint8_t buf[400];
  size_t n = encode_event(buf, wall_time, step, NULL, tag, value);
  return write_record(w, buf, n, err);
}

int tb_writer_flush(tb_writer *w, shoal_error *err) {
  if (fflush(w->f))
    return shoal_error_set(err, SHOAL_EIO, "tensorboard: writing %s: %s", w->path, strerror(errno));
  return 0;
}

void tb_writer_close(tb_writer *w) {
  if (!w) return;
  fclose(w->f);
  free(w);
}

/* ---- mirroring a run's metrics ------------------------------------------------ */

enum { SEEN_MAX = 256 };

struct tb_mirror {
  store *st;
  const char *run;
  tb_writer *w;
  double last_time; /* the newest row time written */
  int nseen;        /* names written at exactly last_time */
  char seen[SEEN_MAX][STORE_NAME_MAX];
};

int tb_mirror_create(tb_mirror **out, store *st, const char *run, const char *dir,
                     shoal_error *err) {
  tb_mirror *m = calloc(1, sizeof *m);
  if (!m) return shoal_error_set(err, SHOAL_ENOMEM, "tensorboard: out of memory");
  int rc = tb_writer_open(&m->w, dir, err);
  if (rc) {
    free(m);
    return rc;
  }
  m->st = st;
  m->run = run;
  m->last_time = -INFINITY;
  *out = m;
  return 0;
}

const char *tb_mirror_path(const tb_mirror *m) { return m->w->path; }

int tb_mirror_skip_existing(tb_mirror *m, shoal_error *err) {
  store_metric *rows = NULL;
  size_t n = 0;
  int rc = store_metrics_query(m->st, m->run, NULL, INT64_MIN, INT64_MAX, &rows, &n, err);
  if (rc == SHOAL_ENOENT) return 0;
  if (rc) return rc;
  for (size_t i = 0; i < n; i++) {
    if (rows[i].time > m->last_time) {
      m->last_time = rows[i].time;
      m->nseen = 0;
    }
    if (rows[i].time == m->last_time && m->nseen < SEEN_MAX)
      snprintf(m->seen[m->nseen++], STORE_NAME_MAX, "%s", rows[i].name);
  }
  free(rows);
  return 0;
}

static bool seen(const tb_mirror *m, const char *name) {
  for (int i = 0; i < m->nseen; i++)
    if (!strcmp(m->seen[i], name)) return true;
  return false;
}

static int by_time(const void *a, const void *b) {
  const store_metric *x = *(store_metric *const *)a, *y = *(store_metric *const *)b;
  return x->time < y->time ? -1 : x->time > y->time;
}

int tb_mirror_sync(tb_mirror *m, size_t *written, shoal_error *err) {
  store_metric *rows = NULL;
  size_t n = 0, k = 0;
  int rc = store_metrics_query(m->st, m->run, NULL, INT64_MIN, INT64_MAX, &rows, &n, err);
  if (rc == SHOAL_ENOENT) rc = 0, n = 0; /* no metrics yet */
  if (rc) return rc;
  store_metric **fresh = n ? malloc(n * sizeof *fresh) : NULL;
  if (n && !fresh) {
    free(rows);
    return shoal_error_set(err, SHOAL_ENOMEM, "tensorboard: out of memory");
  }
  for (size_t i = 0; i < n; i++)
    if (rows[i].time > m->last_time || (rows[i].time == m->last_time && !seen(m, rows[i].name)))
      fresh[k++] = &rows[i];
  if (k > 1) qsort(fresh, k, sizeof *fresh, by_time);
  for (size_t i = 0; i < k && !rc; i++) {
    const store_metric *r = fresh[i];
    rc = tb_writer_scalar(m->w, r->name, r->step, r->time, (float)r->value, err);
    if (rc) break;
    if (r->time > m->last_time) {
      m->last_time = r->time;
      m->nseen = 0;
    }
    if (m->nseen < SEEN_MAX) snprintf(m->seen[m->nseen++], STORE_NAME_MAX, "%s", r->name);
  }
  if (!rc) rc = tb_writer_flush(m->w, err);
  if (written) *written = rc ? 0 : k;
  free(fresh);
  free(rows);
  return rc;
}

void tb_mirror_destroy(tb_mirror *m) {
  if (!m) return;
  tb_writer_close(m->w);
  free(m);
}
