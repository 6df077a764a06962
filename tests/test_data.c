/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_data.c — data/: the IDX reader on the real Fashion-MNIST files and on bad
 * files, datasets, and the loader's batches, shuffling, normalisation, augmentation and
 * background thread. Without the Fashion-MNIST files it prints SKIPPED and returns 77. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "data/data.h"

static char g_tmp[256];

/* A path in the test's folder; four rotating buffers, so two may be used in one call. */
static const char *tmp_path(const char *name) {
  static char p[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", g_tmp, name);
  return p[k];
}

/* Writes bytes to path, gzip-compressed when gz. */
static void write_file(const char *path, const void *buf, size_t n, bool gz) {
  if (gz) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, buf, (unsigned)n), (int)n);
    assert_int_equal(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
  }
}

/* An IDX u8 header for dims (big-endian sizes), then n data bytes 0, 1, 2, ... */
static size_t make_idx(uint8_t *buf, int ndim, const uint32_t *dims, size_t n) {
  buf[0] = 0, buf[1] = 0, buf[2] = 0x08, buf[3] = (uint8_t)ndim;
  for (int i = 0; i < ndim; i++)
    for (int b = 0; b < 4; b++) buf[4 + 4 * i + b] = (uint8_t)(dims[i] >> (24 - 8 * b));
  size_t h = 4 + 4 * (size_t)ndim;
  for (size_t i = 0; i < n; i++) buf[h + i] = (uint8_t)(i % 10);
  return h + n;
}

/* ---- the real files ------------------------------------------------------------- */

static void test_fashion_mnist_real(void **state) {
  (void)state;
  shoal_error err = {0};
  data_set *train = NULL, *test = NULL;
  assert_int_equal(data_fashion_mnist_load(NULL, true, &train, &err), 0);
  assert_int_equal(data_fashion_mnist_load(NULL, false, &test, &err), 0);
  assert_int_equal(data_set_count(train), 60000);
  assert_int_equal(data_set_count(test), 10000);
  int C, H, W;
  data_set_shape(train, &C, &H, &W);
  assert_int_equal(C, 1), assert_int_equal(H, 28), assert_int_equal(W, 28);
  assert_int_equal(data_set_classes(train), 10);
  assert_int_equal(data_set_classes(test), 10);
  /* The first training and test images are both ankle boots (label 9). */
  assert_int_equal(data_set_label(train, 0), 9);
  assert_string_equal(data_fashion_mnist_class(data_set_label(train, 0)), "Ankle boot");
  assert_int_equal(data_set_label(test, 0), 9);
  assert_string_equal(data_fashion_mnist_class(0), "T-shirt/top");
  assert_string_equal(data_fashion_mnist_class(10), "?");
  /* Balanced classes: 6,000 of each in training, 1,000 in test. */
  int count[10] = {0};
  for (int i = 0; i < 60000; i++) {
    int32_t l = data_set_label(train, i);
    assert_true(l >= 0 && l <= 9);
    count[l]++;
  }
  for (int c = 0; c < 10; c++) assert_int_equal(count[c], 6000);
  /* The widely quoted normalisation constants of the training split. */
  double mean, std;
  data_set_stats(train, &mean, &std);
  assert_true(fabs(mean - 0.2860) < 5e-4);
  assert_true(fabs(std - 0.3530) < 5e-4);
  /* The first image is not blank and uses the full byte range somewhere. */
  const uint8_t *im = data_set_image(train, 0);
  int mx = 0, nz = 0;
  for (int i = 0; i < 784; i++) mx = im[i] > mx ? im[i] : mx, nz += im[i] != 0;
  assert_true(mx > 200 && nz > 100);
  data_set_destroy(train);
  data_set_destroy(test);
}

/* ---- bad files ------------------------------------------------------------------ */

static void expect_error(const char *path, int code, const char *words) {
  shoal_error err = {0};
  data_idx idx = {.ndim = -7};
  int rc = data_idx_read(path, &idx, &err);
  if (rc != code || !strstr(err.msg, path) || !strstr(err.msg, words))
    fail_msg("%s: rc %d (expected %d), message '%s' (expected the path and '%s')", path, rc, code,
             err.msg, words);
  assert_int_equal(idx.ndim, -7); /* untouched */
}

static void test_idx_bad_files(void **state) {
  (void)state;
  static uint8_t buf[4096];
  uint32_t dims[3] = {3, 4, 5};
  size_t n = make_idx(buf, 3, dims, 60);

  /* good, compressed and plain */
  for (int gz = 0; gz < 2; gz++) {
    write_file(tmp_path("good"), buf, n, gz);
    data_idx idx = {0};
    shoal_error err = {0};
    assert_int_equal(data_idx_read(tmp_path("good"), &idx, &err), 0);
    assert_int_equal(idx.ndim, 3);
    assert_int_equal(idx.dim[0], 3), assert_int_equal(idx.dim[2], 5);
    assert_int_equal(idx.count, 60);
    assert_int_equal(idx.data[59], 59 % 10);
    data_idx_free(&idx);
    assert_null(idx.data);
  }

  expect_error(tmp_path("missing.gz"), SHOAL_ENOENT, "No such file");
  write_file(tmp_path("empty"), buf, 0, false);
  expect_error(tmp_path("empty"), SHOAL_EFORMAT, "truncated");
  write_file(tmp_path("short"), buf, n - 7, true);
  expect_error(tmp_path("short"), SHOAL_EFORMAT, "truncated");
  write_file(tmp_path("hdr"), buf, 9, true);
  expect_error(tmp_path("hdr"), SHOAL_EFORMAT, "truncated in the header");
  write_file(tmp_path("long"), buf, n + 1, true);
  expect_error(tmp_path("long"), SHOAL_EFORMAT, "trailing bytes");
  uint8_t bad[sizeof buf];
  memcpy(bad, buf, n), bad[0] = 0x1f, bad[1] = 0x00;
  write_file(tmp_path("magic"), bad, n, false);
  expect_error(tmp_path("magic"), SHOAL_EFORMAT, "not an IDX file");
  memcpy(bad, buf, n), bad[2] = 0x0d; /* float32 */
  write_file(tmp_path("type"), bad, n, true);
  expect_error(tmp_path("type"), SHOAL_EFORMAT, "0x0d is not supported");
  memcpy(bad, buf, n), bad[3] = 7;
  write_file(tmp_path("ndim"), bad, n, true);
  expect_error(tmp_path("ndim"), SHOAL_EFORMAT, "7 dimensions");
  memcpy(bad, buf, n), bad[7] = 0; /* first size 0 */
  write_file(tmp_path("zero"), bad, n, true);
  expect_error(tmp_path("zero"), SHOAL_EFORMAT, "zero");

  /* A gzip stream cut short, and one with its deflate data overwritten. */
  {
    write_file(tmp_path("gz"), buf, n, true);
    FILE *f = fopen(tmp_path("gz"), "rb");
    uint8_t z[4096];
    size_t zn = fread(z, 1, sizeof z, f);
    fclose(f);
    write_file(tmp_path("gzcut"), z, zn / 2, false);
    shoal_error err = {0};
    data_idx idx = {0};
    assert_int_equal(data_idx_read(tmp_path("gzcut"), &idx, &err), SHOAL_EFORMAT);
    assert_non_null(strstr(err.msg, tmp_path("gzcut")));
    for (size_t i = 10; i < zn - 8; i++) z[i] = 0xff;
    write_file(tmp_path("gzbad"), z, zn, false);
    assert_int_equal(data_idx_read(tmp_path("gzbad"), &idx, &err), SHOAL_EFORMAT);
    assert_non_null(strstr(err.msg, tmp_path("gzbad")));
    assert_null(idx.data);
  }

  /* Images and labels that disagree. */
  size_t ln = make_idx(bad, 1, (uint32_t[]){4}, 4);
  write_file(tmp_path("labels4"), bad, ln, true);
  write_file(tmp_path("images3"), buf, n, true);
  data_set *ds = (data_set *)0x1;
  shoal_error err = {0};
  assert_int_equal(data_set_load_idx(tmp_path("images3"), tmp_path("labels4"), &ds, &err),
                   SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "3 images"));
  assert_ptr_equal(ds, (data_set *)0x1);
  /* labels given as images (1-d) */
  assert_int_equal(data_set_load_idx(tmp_path("labels4"), tmp_path("labels4"), &ds, &err),
                   SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "3-d"));
  /* a folder without the Fashion-MNIST files names the file it missed */
  assert_int_equal(data_fashion_mnist_load(g_tmp, true, &ds, &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, "train-images-idx3-ubyte.gz"));
}

/* ---- the loader ----------------------------------------------------------------- */

/* n images of 1x4x6, image i filled with bytes (i*7 + pixel) % 256; label i % 10. */
static data_set *synthetic(int n) {
  uint8_t *im = malloc((size_t)n * 24);
  int32_t *lb = malloc((size_t)n * sizeof *lb);
  for (int i = 0; i < n; i++) {
    for (int p = 0; p < 24; p++) im[i * 24 + p] = (uint8_t)((i * 7 + p) % 256);
    lb[i] = i % 10;
  }
  data_set *ds = NULL;
  assert_int_equal(data_set_create(im, lb, n, 1, 4, 6, &ds, NULL), 0);
  free(im), free(lb);
  return ds;
}

static void test_loader_batches(void **state) {
  (void)state;
  data_set *ds = synthetic(100);
  shoal_error err = {0};
  for (int prefetch = 0; prefetch <= 3; prefetch += 3) {
    data_loader_config c = data_loader_defaults();
    c.batch = 32, c.seed = 5, c.prefetch = prefetch, c.mean = 0.5f, c.std = 0.25f;
    data_loader *ld = data_loader_create(ds, &c, &err);
    assert_non_null(ld);
    assert_int_equal(data_loader_batches(ld), 4);
    int first_order[100], order[100];
    for (int e = 0; e < 3; e++) {
      int seen[100] = {0}, k = 0;
      for (int s = 0; s < 4; s++) {
        data_batch b;
        assert_int_equal(data_loader_next(ld, &b, &err), 0);
        assert_int_equal(b.epoch, e), assert_int_equal(b.step, s);
        assert_int_equal(b.n, s < 3 ? 32 : 4);
        for (int i = 0; i < b.n; i++) {
          int src = b.index[i];
          assert_true(src >= 0 && src < 100);
          seen[src]++, order[k++] = src;
          assert_int_equal(b.labels[i], src % 10);
          /* normalisation: (byte / 255 - 0.5) / 0.25 */
          for (int p = 0; p < 24; p++) {
            float want = ((float)((src * 7 + p) % 256) / 255.0f - 0.5f) / 0.25f;
            assert_true(fabsf(b.x[i * 24 + p] - want) < 1e-5f);
          }
        }
      }
      for (int i = 0; i < 100; i++) assert_int_equal(seen[i], 1); /* once per epoch */
      int moved = 0, same = 0;
      for (int i = 0; i < 100; i++) moved += order[i] != i;
      assert_true(moved > 80); /* shuffled */
      if (e == 0) memcpy(first_order, order, sizeof order);
      for (int i = 0; i < 100 && e > 0; i++) same += order[i] == first_order[i];
      assert_true(e == 0 || same < 20); /* a fresh permutation each epoch */
    }
    data_loader_destroy(ld);
  }

  /* The same seed gives the same batches with and without the thread; another seed not. */
  int32_t idx[3][64];
  for (int v = 0; v < 3; v++) {
    data_loader_config c = data_loader_defaults();
    c.batch = 64, c.seed = v == 2 ? 6 : 5, c.prefetch = v == 1 ? 2 : 0, c.drop_last = true;
    data_loader *ld = data_loader_create(ds, &c, &err);
    assert_int_equal(data_loader_batches(ld), 1);
    data_batch b;
    for (int r = 0; r < 2; r++) assert_int_equal(data_loader_next(ld, &b, &err), 0);
    assert_int_equal(b.n, 64), assert_int_equal(b.epoch, 1);
    memcpy(idx[v], b.index, sizeof idx[v]);
    data_loader_destroy(ld);
  }
  assert_memory_equal(idx[0], idx[1], sizeof idx[0]);
  assert_memory_not_equal(idx[0], idx[2], sizeof idx[0]);

  /* Without shuffling the stored order; limit takes the first samples. */
  data_loader_config c = data_loader_defaults();
  c.batch = 8, c.shuffle = false, c.limit = 20, c.prefetch = 1;
  data_loader *ld = data_loader_create(ds, &c, &err);
  assert_int_equal(data_loader_batches(ld), 3);
  for (int s = 0; s < 6; s++) {
    data_batch b;
    data_loader_next(ld, &b, &err);
    for (int i = 0; i < b.n; i++) assert_int_equal(b.index[i], (s % 3) * 8 + i);
  }
  data_loader_destroy(ld);

  /* Bad configs. */
  int bad[][4] = {{0, 0, 0, 0}, {8, -1, 0, 0}, {8, 0, 5, 0}, {8, 0, 0, -1}, {200, 0, 0, 1}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    c = data_loader_defaults();
    c.batch = bad[i][0], c.prefetch = bad[i][1], c.crop_pad = bad[i][2], c.limit = bad[i][3];
    c.drop_last = true;
    err.code = 0;
    assert_null(data_loader_create(ds, &c, &err));
    assert_int_equal(err.code, SHOAL_EINVAL);
  }
  int32_t neg[2] = {1, -1};
  uint8_t px[2 * 24] = {0};
  data_set *bad_ds = (data_set *)0x1;
  assert_int_equal(data_set_create(px, neg, 2, 1, 4, 6, &bad_ds, &err), SHOAL_EINVAL);
  assert_ptr_equal(bad_ds, (data_set *)0x1);
  /* data_normalize is the loader's formula */
  float xs[3];
  data_normalize(xs, (const uint8_t[]){0, 51, 255}, 3, 0.5f, 0.25f);
  assert_true(fabsf(xs[0] + 2) < 1e-6f && fabsf(xs[1] + 1.2f) < 1e-5f && fabsf(xs[2] - 2) < 1e-5f);
  c = data_loader_defaults(), c.std = 0;
  assert_null(data_loader_create(ds, &c, &err));
  data_set_destroy(ds);
}

/* Each augmented sample is its image shifted by (dy, dx) in [-pad, pad] with zero fill,
 * then maybe mirrored; every shift and both flips occur. */
static void test_loader_augment(void **state) {
  (void)state;
  data_set *ds = synthetic(50);
  shoal_error err = {0};
  data_loader_config c = data_loader_defaults();
  c.batch = 50, c.crop_pad = 2, c.hflip = true, c.seed = 3;
  data_loader *ld = data_loader_create(ds, &c, &err);
  int shifts[5][5] = {{0}}, flips[2] = {0};
  for (int r = 0; r < 20; r++) {
    data_batch b;
    assert_int_equal(data_loader_next(ld, &b, &err), 0);
    for (int i = 0; i < b.n; i++) {
      const uint8_t *u = data_set_image(ds, b.index[i]);
      int found = 0;
      for (int f = 0; f < 2; f++)
        for (int dy = -2; dy <= 2; dy++)
          for (int dx = -2; dx <= 2; dx++) {
            bool ok = true;
            for (int y = 0; y < 4 && ok; y++)
              for (int x = 0; x < 6 && ok; x++) {
                int sy = y + dy, sx = (f ? 5 - x : x) + dx;
                float want = sy >= 0 && sy < 4 && sx >= 0 && sx < 6 ? u[sy * 6 + sx] / 255.0f : 0;
                ok = fabsf(b.x[i * 24 + y * 6 + x] - want) < 1e-6f;
              }
            if (ok && !found) found = 1, shifts[dy + 2][dx + 2]++, flips[f]++;
          }
      assert_true(found);
    }
  }
  for (int y = 0; y < 5; y++)
    for (int x = 0; x < 5; x++) assert_true(shifts[y][x] > 0);
  assert_true(flips[0] > 300 && flips[1] > 300); /* about 500 each of 1,000 */
  data_loader_destroy(ld);
  data_set_destroy(ds);
}

/* The thread on the real training set: every sample exactly once in each of two epochs
 * of 60,000, with a slow consumer and a fast one. */
static void test_loader_thread_real(void **state) {
  (void)state;
  shoal_error err = {0};
  data_set *train = NULL;
  assert_int_equal(data_fashion_mnist_load(NULL, true, &train, &err), 0);
  data_loader_config c = data_loader_defaults();
  c.batch = 256, c.prefetch = 4, c.seed = 11, c.crop_pad = 2, c.hflip = true;
  data_loader *ld = data_loader_create(train, &c, &err);
  assert_int_equal(data_loader_batches(ld), 235);
  uint8_t *seen = calloc(60000, 1);
  long labels[10] = {0};
  for (int e = 0; e < 2; e++) {
    memset(seen, 0, 60000);
    for (long s = 0; s < 235; s++) {
      data_batch b;
      assert_int_equal(data_loader_next(ld, &b, &err), 0);
      assert_int_equal(b.epoch, e);
      for (int i = 0; i < b.n; i++) {
        assert_int_equal(b.labels[i], data_set_label(train, b.index[i]));
        seen[b.index[i]]++, labels[b.labels[i]]++;
      }
      if (e == 0 && s % 50 == 0)
        nanosleep(&(struct timespec){0, 2000000}, NULL); /* the thread runs ahead and waits */
    }
    for (int i = 0; i < 60000; i++) assert_int_equal(seen[i], 1);
  }
  for (int k = 0; k < 10; k++) assert_int_equal(labels[k], 12000);
  assert_true(data_loader_wait_s(ld) >= 0);
  free(seen);
  data_loader_destroy(ld);
  data_set_destroy(train);
}

int main(void) {
  char p[512];
  snprintf(
      p, sizeof p, "%s/train-images-idx3-ubyte.gz",
      getenv("SHOAL_FASHION_MNIST") ? getenv("SHOAL_FASHION_MNIST") : data_fashion_mnist_dir());
  if (access(p, R_OK) != 0) {
    printf("SKIPPED: the Fashion-MNIST files are missing (%s); install dataset-fashion-mnist\n", p);
    return 77;
  }
  snprintf(g_tmp, sizeof g_tmp, "/tmp/shoal_test_data_XXXXXX");
  if (!mkdtemp(g_tmp)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fashion_mnist_real), cmocka_unit_test(test_idx_bad_files),
      cmocka_unit_test(test_loader_batches),     cmocka_unit_test(test_loader_augment),
      cmocka_unit_test(test_loader_thread_real),
  };
  int rc = cmocka_run_group_tests_name("data", tests, NULL, NULL);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_tmp);
  return rc;
}
