/* SPDX-License-Identifier: Apache-2.0 */
/* benchmarks/store.c — what the store's safety costs.
 *
 * File backend, against a plain write of the same bytes measured in the same run:
 *   snapshot write   store_snapshot_put (temp file, write, fsync, rename, fsync folder,
 *                    index rewritten the same way)  vs  open, write, fsync, close
 *   snapshot read    store_snapshot_get (index lookup, read, size check)  vs  open, read
 *   metrics          store_metrics_append of 1000-row batches (flock, append, fdatasync)
 *                    vs  the same CSV text appended with write and fdatasync
 * Sizes 4 MB and 64 MB; the median of several repetitions, ours and the plain one
 * interleaved so that noise from other processes hits both.
 * MongoDB (when --uri mongodb://... or $SHOAL_TEST_MONGO_URI is given): the same
 * operations, with no baseline.
 *
 *   make bench BENCH=store      (or build/benchmarks/store [--dir DIR] [--uri URI] [--quick])
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "bench_store: %s: %s\n", what, err && err->msg[0] ? err->msg : "failed");
  exit(1);
}

static double plain_write(const char *path, const void *b, size_t len) {
  double t0 = shoal_now_s();
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open", NULL);
  const char *p = b;
  size_t left = len;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w <= 0) die("write", NULL);
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0) die("fsync", NULL);
  close(fd);
  return shoal_now_s() - t0;
}

static double plain_read(const char *path, size_t len) {
  double t0 = shoal_now_s();
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("open", NULL);
  struct stat sb;
  fstat(fd, &sb);
  char *b = malloc((size_t)sb.st_size);
  size_t got = 0;
  while (got < (size_t)sb.st_size) {
    ssize_t r = read(fd, b + got, (size_t)sb.st_size - got);
    if (r <= 0) die("read", NULL);
    got += (size_t)r;
  }
  close(fd);
  double t = shoal_now_s() - t0;
  if (got != len) die("short read", NULL);
  free(b);
  return t;
}

typedef struct {
  double w_ours, w_plain, r_ours, r_plain; /* MB/s */
} snap_fig;

static int64_t g_version;

static snap_fig bench_snapshots(store *st, const char *run, const char *plain_dir, size_t mb,
                                int reps, int read_reps) {
  size_t len = mb << 20;
  unsigned char *b = malloc(len);
  for (size_t i = 0; i < len; i++) b[i] = (unsigned char)(i * 2654435761u >> 13);
  double wo[64], wp[64], ro[64], rp[64];
  int64_t first = g_version + 1;
  char path[1100];
  shoal_error err = {0};
  for (int r = 0; r < reps; r++) {
    store_snapshot_meta m = {.version = ++g_version, .score = (double)r};
    snprintf(m.run, sizeof m.run, "%s", run);
    snprintf(path, sizeof path, "%s/plain-%d.bin", plain_dir, r);
    if (plain_dir[0] && r % 2) wp[r] = plain_write(path, b, len);
    double t0 = shoal_now_s();
    if (store_snapshot_put(st, &m, b, len, &err)) die("snapshot_put", &err);
    wo[r] = shoal_now_s() - t0;
    if (plain_dir[0] && r % 2 == 0) wp[r] = plain_write(path, b, len);
  }
  /* Reads alternate which goes first, so allocator and cache effects hit both. */
  for (int r = 0; r < read_reps; r++) {
    snprintf(path, sizeof path, "%s/plain-%d.bin", plain_dir, r % reps);
    if (plain_dir[0] && r % 2) rp[r] = plain_read(path, len);
    void *out;
    size_t n;
    double t0 = shoal_now_s();
    if (store_snapshot_get(st, run, first + r % reps, NULL, &out, &n, &err))
      die("snapshot_get", &err);
    ro[r] = shoal_now_s() - t0;
    if (n != len || memcmp(out, b, 64) != 0) die("snapshot_get returned other bytes", NULL);
    free(out);
    if (plain_dir[0] && r % 2 == 0) rp[r] = plain_read(path, len);
  }
  free(b);
  snap_fig f = {0};
  f.w_ours = (double)mb / median(wo, reps);
  f.r_ours = (double)mb / median(ro, read_reps);
  if (plain_dir[0]) {
    f.w_plain = (double)mb / median(wp, reps);
    f.r_plain = (double)mb / median(rp, read_reps);
  }
  return f;
}

enum { BATCH = 1000 };

/* Rows per second for `batches` appends of BATCH rows; *plain gets the baseline. */
static double bench_metrics(store *st, const char *run, const char *plain_dir, int batches,
                            double *plain) {
  store_metric *rows = calloc(BATCH, sizeof *rows);
  const char *names[4] = {"loss", "q/mean", "eval/return", "fps"};
  double ours = 0, base = 0;
  char path[1100];
  snprintf(path, sizeof path, "%s/plain-metrics.csv", plain_dir);
  int fd = plain_dir[0] ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644) : -1;
  char *text = malloc(BATCH * 160);
  shoal_error err = {0};
  for (int b = 0; b < batches; b++) {
    for (int i = 0; i < BATCH; i++) {
      snprintf(rows[i].run, sizeof rows[i].run, "%s", run);
      snprintf(rows[i].name, sizeof rows[i].name, "%s", names[i % 4]);
      rows[i].step = (int64_t)b * BATCH + i;
      rows[i].time = 1.7e9 + rows[i].step * 1e-3;
      rows[i].value = 1.0 / (1.0 + (double)rows[i].step);
    }
    double t0 = shoal_now_s();
    if (store_metrics_append(st, rows, BATCH, &err)) die("metrics_append", &err);
    ours += shoal_now_s() - t0;
    if (fd >= 0) {
      t0 = shoal_now_s();
      size_t o = 0;
      for (int i = 0; i < BATCH; i++)
        o += (size_t)snprintf(text + o, 160, "%" PRId64 ",%.17g,%s,%.17g\n", rows[i].step,
                              rows[i].time, rows[i].name, rows[i].value);
      if (write(fd, text, o) != (ssize_t)o || fdatasync(fd) != 0) die("plain metrics", NULL);
      base += shoal_now_s() - t0;
    }
  }
  if (fd >= 0) close(fd);
  free(text);
  free(rows);
  *plain = base > 0 ? (double)batches * BATCH / base : 0;
  return (double)batches * BATCH / ours;
}

static void bench_line(const char *name, double v, const char *unit, double base) {
  if (base > 0)
    printf("BENCH name=%s value=%.1f unit=%s baseline=%.1f ratio=%.3f\n", name, v, unit, base,
           v / base);
  else
    printf("BENCH name=%s value=%.1f unit=%s baseline=none ratio=none\n", name, v, unit);
}

static void run_backend(const char *label, const char *uri, const char *plain_dir, int quick) {
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) die("store_open", &err);
  char run[64];
  snprintf(run, sizeof run, "bench-%ld-%ld", (long)getpid(), (long)(shoal_now_ns() % 100000));
  if (store_run_create(st, run, "bench: true\n", STORE_RUN_RUNNING, &err)) die("run_create", &err);
  snap_fig s4 = bench_snapshots(st, run, plain_dir, 4, quick ? 3 : 9, quick ? 9 : 41);
  snap_fig s64 = bench_snapshots(st, run, plain_dir, 64, quick ? 1 : 5, quick ? 1 : 9);
  double mplain = 0;
  double m = bench_metrics(st, run, plain_dir, quick ? 5 : 40, &mplain);
  store_close(st);

  printf("\n%s store\n", label);
  printf("| figure | shoal store | plain write/read | ratio |\n|---|---|---|---|\n");
  const struct {
    const char *what;
    double v, b;
    const char *unit;
  } rows[] = {
      {"snapshot write 4 MB", s4.w_ours, s4.w_plain, "MB/s"},
      {"snapshot write 64 MB", s64.w_ours, s64.w_plain, "MB/s"},
      {"snapshot read 4 MB", s4.r_ours, s4.r_plain, "MB/s"},
      {"snapshot read 64 MB", s64.r_ours, s64.r_plain, "MB/s"},
      {"metrics append (1000-row batches)", m, mplain, "rows/s"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    if (rows[i].b > 0)
      printf("| %s | %.0f %s | %.0f %s | %.2f |\n", rows[i].what, rows[i].v, rows[i].unit,
             rows[i].b, rows[i].unit, rows[i].v / rows[i].b);
    else
      printf("| %s | %.0f %s | - | - |\n", rows[i].what, rows[i].v, rows[i].unit);
  }
  char name[96];
  snprintf(name, sizeof name, "store.%s.snapshot_write", label);
  bench_line(name, s64.w_ours, "MB/s", s64.w_plain);
  snprintf(name, sizeof name, "store.%s.snapshot_read", label);
  bench_line(name, s64.r_ours, "MB/s", s64.r_plain);
  snprintf(name, sizeof name, "store.%s.metrics", label);
  bench_line(name, m, "rows/s", mplain);
  snprintf(name, sizeof name, "store.%s.snapshot_write_4mb", label);
  bench_line(name, s4.w_ours, "MB/s", s4.w_plain);
  snprintf(name, sizeof name, "store.%s.snapshot_read_4mb", label);
  bench_line(name, s4.r_ours, "MB/s", s4.r_plain);
}

int main(int argc, char **argv) {
  const char *dir = NULL, *uri = getenv("SHOAL_TEST_MONGO_URI");
  int quick = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
      dir = argv[++i];
    else if (strcmp(argv[i], "--uri") == 0 && i + 1 < argc)
      uri = argv[++i];
    else if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else {
      fprintf(stderr, "usage: %s [--dir DIR] [--uri mongodb://...] [--quick]\n", argv[0]);
      return 2;
    }
  }
  /* On the disk a store would use (the build folder when scripts/bench.sh runs it,
   * else the working directory), not a tmpfs /tmp. */
  const char *bin = getenv("SHOAL_BINARY_DIR");
  char base[1024];
  snprintf(base, sizeof base, "%s/store-bench-XXXXXX", dir ? dir : bin && bin[0] ? bin : ".");
  if (!mkdtemp(base)) {
    perror("mkdtemp");
    return 1;
  }
  char plain[1100], uri_file[1200];
  snprintf(plain, sizeof plain, "%s/plain", base);
  mkdir(plain, 0755);
  if (base[0] == '/')
    snprintf(uri_file, sizeof uri_file, "file://%s/store", base);
  else
    snprintf(uri_file, sizeof uri_file, "file:%s/store", base);
  printf("store benchmark: file store in %s (noisy when other processes use the disk)\n", base);
  run_backend("file", uri_file, plain, quick);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  if (system(cmd) != 0) fprintf(stderr, "bench_store: could not remove %s\n", base);

  if (uri && strncmp(uri, "mongodb", 7) == 0) {
    run_backend("mongodb", uri, "", quick);
  } else {
    printf("\nmongodb: skipped (no --uri mongodb://... and SHOAL_TEST_MONGO_URI is not set)\n");
  }
  return 0;
}
