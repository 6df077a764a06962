/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_store_dataset.c — datasets in the store and data_stream reading them back.
 *   test_store_dataset file      the file store in a temporary folder
 *   test_store_dataset mongodb   MongoDB: ctest's stand-in or $SHOAL_TEST_MONGO_URI
 *
 * Round trip (every record back exactly once per epoch, bytes and labels intact, the
 * shuffle seeded, windows of at most window_chunks chunks), the writer's checks,
 * damaged chunks and manifests rejected with the dataset and chunk named (file store:
 * the test damages the files itself), and all 70,000 Fashion-MNIST images streamed
 * by a child process whose peak resident memory grows far less than the dataset's
 * 55 MB.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "data/data.h"
#include "store/store.h"
#include "tests/mongo_test.h"

static char g_uri[600], g_dir[300], g_prefix[48], g_self[600];
static int g_file;

static void dname(char *out, size_t cap, const char *what) {
  snprintf(out, cap, "%s-%s", g_prefix, what);
}

static int setup(void **state) {
  store *st;
  shoal_error err = {0};
  if (store_open(&st, g_uri, &err)) {
    fprintf(stderr, "store_open %s: %s\n", g_uri, err.msg);
    return -1;
  }
  *state = st;
  return 0;
}

static int teardown(void **state) {
  store_close(*state);
  return 0;
}

/* A synthetic dataset: record r has id r (i32), a 1x4x4 image whose byte k is
 * (r * 7 + k) mod 256, and label r mod 10 (i32). */
enum { IMG = 16, REC = 4 + IMG + 4 };

static void make_record(uint8_t *p, uint32_t r) {
  memcpy(p, &r, 4); /* little-endian on every machine shoal builds for */
  for (int k = 0; k < IMG; k++) p[4 + k] = (uint8_t)(r * 7 + (uint32_t)k);
  int32_t l = (int32_t)(r % 10);
  memcpy(p + 4 + IMG, &l, 4);
}

static void put_synthetic(store *st, const char *name, uint32_t n, uint32_t chunk) {
  store_dataset_field f[3] = {{"id", STORE_DTYPE_I32, 0, {0}},
                              {"images", STORE_DTYPE_U8, 3, {1, 4, 4}},
                              {"labels", STORE_DTYPE_I32, 0, {0}}};
  shoal_error err = {0};
  store_dataset_writer *w;
  assert_int_equal(store_dataset_create(st, name, f, 3, chunk, "synthetic", &w, &err), 0);
  uint8_t buf[REC * 10];
  /* In uneven pieces, so writes straddle chunk boundaries. */
  for (uint32_t r = 0; r < n;) {
    uint32_t k = (r % 3) + 1 + r % 7;
    if (k > 10) k = 10;
    if (r + k > n) k = n - r;
    for (uint32_t j = 0; j < k; j++) make_record(buf + j * REC, r + j);
    if (store_dataset_write(w, buf, k, &err)) fail_msg("write: %s", err.msg);
    r += k;
  }
  store_dataset_info info;
  if (store_dataset_commit(w, &info, &err)) fail_msg("commit: %s", err.msg);
  assert_int_equal(info.records, n);
  assert_int_equal(info.chunks, (n + chunk - 1) / chunk);
  assert_int_equal(info.record_bytes, REC);
  store_dataset_info_clear(&info);
}

/* Streams `epochs` epochs and returns the record order (epochs * n indices). Checks
 * each record's bytes and label against make_record. */
static int32_t *stream_order(store *st, const char *name, uint32_t n, int batch, uint64_t seed,
                             int window, int prefetch, int shuffle, int epochs) {
  data_stream_config c = data_stream_defaults();
  c.batch = batch, c.seed = seed, c.window_chunks = window, c.prefetch_chunks = prefetch;
  c.shuffle = shuffle;
  data_stream *ds;
  shoal_error err = {0};
  if (data_stream_open(&ds, st, name, &c, &err)) fail_msg("open: %s", err.msg);
  int C, H, W;
  data_stream_shape(ds, &C, &H, &W);
  assert_int_equal(C, 1), assert_int_equal(H, 4), assert_int_equal(W, 4);
  assert_int_equal(data_stream_records(ds), n);
  long nb = data_stream_batches(ds);
  assert_int_equal(nb, (long)((n + (uint32_t)batch - 1) / (uint32_t)batch));
  int32_t *order = malloc(sizeof(int32_t) * n * (size_t)epochs);
  size_t k = 0;
  for (int e = 0; e < epochs; e++) {
    for (long i = 0; i < nb; i++) {
      data_batch b;
      if (data_stream_next(ds, &b, &err)) fail_msg("next: %s", err.msg);
      assert_int_equal(b.epoch, e);
      assert_int_equal(b.step, i);
      assert_int_equal(b.n, i + 1 < nb ? batch : (int)(n - (uint32_t)(nb - 1) * (uint32_t)batch));
      for (int j = 0; j < b.n; j++) {
        uint32_t r = (uint32_t)b.index[j];
        assert_true(r < n);
        assert_int_equal(b.labels[j], (int32_t)(r % 10));
        for (int q = 0; q < IMG; q++) {
          float want = (float)(uint8_t)(r * 7 + (uint32_t)q) / 255.0f;
          if (b.x[j * IMG + q] != want)
            fail_msg("record %u byte %d: %g, want %g", r, q, (double)b.x[j * IMG + q],
                     (double)want);
        }
        order[k++] = (int32_t)r;
      }
    }
  }
  data_stream_destroy(ds);
  return order;
}

/* Each record exactly once per epoch. */
static void assert_permutation(const int32_t *order, uint32_t n) {
  uint8_t *seen = calloc(n, 1);
  for (uint32_t i = 0; i < n; i++) {
    assert_true(order[i] >= 0 && (uint32_t)order[i] < n);
    if (seen[order[i]]) fail_msg("record %d came twice in one epoch", order[i]);
    seen[order[i]] = 1;
  }
  free(seen);
}

/* The order splits into consecutive groups each holding all the records of at most
 * `window` chunks: the window bound. Returns the number of groups. */
static int assert_windows(const int32_t *order, uint32_t n, uint32_t chunk, int window) {
  uint32_t nchunks = (n + chunk - 1) / chunk;
  uint32_t *left = malloc(nchunks * sizeof *left);
  for (uint32_t c = 0; c < nchunks; c++) left[c] = c + 1 < nchunks ? chunk : n - c * chunk;
  int open = 0, in_group = 0, groups = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t c = (uint32_t)order[i] / chunk;
    if (left[c] == (c + 1 < nchunks ? chunk : n - c * chunk)) { /* first record of chunk c */
      in_group++, open++;
      if (in_group > window)
        fail_msg("position %u: a window holds records of %d chunks (bound %d)", i, in_group,
                 window);
    }
    if (--left[c] == 0 && --open == 0) in_group = 0, groups++;
  }
  free(left);
  return groups;
}

static void test_round_trip(void **state) {
  store *st = *state;
  char name[80];
  dname(name, sizeof name, "synth");
  const uint32_t n = 1000, chunk = 37; /* 28 chunks, the last of 1 record */
  put_synthetic(st, name, n, chunk);

  /* Stored order without shuffling. */
  int32_t *plain = stream_order(st, name, n, 64, 1, 3, 2, 0, 1);
  for (uint32_t i = 0; i < n; i++) assert_int_equal(plain[i], (int32_t)i);
  free(plain);

  int32_t *a = stream_order(st, name, n, 32, 1, 3, 2, 1, 3);
  int32_t *a2 = stream_order(st, name, n, 50, 1, 3, 0, 1, 3); /* other batch, no read-ahead */
  int32_t *b = stream_order(st, name, n, 32, 2, 3, 2, 1, 1);
  for (int e = 0; e < 3; e++) {
    assert_permutation(a + (size_t)e * n, n);
    int groups = assert_windows(a + (size_t)e * n, n, chunk, 3);
    assert_true(groups >= 28 / 3);
  }
  assert_permutation(b, n);
  assert_windows(b, n, chunk, 3);
  /* The same seed gives the same order whatever the batch size or read-ahead; epochs and
   * seeds differ; records are mixed across the chunks of a window. */
  assert_memory_equal(a, a2, sizeof(int32_t) * n * 3);
  assert_memory_not_equal(a, a + n, sizeof(int32_t) * n);
  assert_memory_not_equal(a, b, sizeof(int32_t) * n);
  int chunks_in_first_32 = 0;
  uint8_t hit[28] = {0};
  for (int i = 0; i < 32; i++)
    if (!hit[a[i] / (int32_t)chunk]++) chunks_in_first_32++;
  assert_true(chunks_in_first_32 >= 2);
  free(a), free(a2), free(b);

  /* window 1: chunk-order shuffle only; each chunk's records together. */
  int32_t *w1 = stream_order(st, name, n, 16, 5, 1, 1, 1, 1);
  assert_permutation(w1, n);
  assert_int_equal(assert_windows(w1, n, chunk, 1), 28);
  free(w1);

  /* drop_last: 1000 / 64 = 15 whole batches, the tail of 40 skipped; the next epoch
   * still starts whole. */
  data_stream_config c = data_stream_defaults();
  c.batch = 64, c.drop_last = true, c.seed = 3;
  data_stream *ds;
  shoal_error err = {0};
  assert_int_equal(data_stream_open(&ds, st, name, &c, &err), 0);
  assert_int_equal(data_stream_batches(ds), 15);
  for (int e = 0; e < 2; e++)
    for (int i = 0; i < 15; i++) {
      data_batch bt;
      assert_int_equal(data_stream_next(ds, &bt, &err), 0);
      assert_int_equal(bt.n, 64);
      assert_int_equal(bt.epoch, e);
    }
  /* The stream's memory: (window + prefetch) chunks plus the window's order and one
   * batch, nothing that grows with the dataset. */
  size_t bound = (size_t)(4 + 2) * chunk * REC + (size_t)4 * chunk * 4 +
                 (size_t)64 * (IMG * 4 + 8) + 28 * 4 + 4096;
  assert_true(data_stream_memory(ds) <= bound);
  data_stream_destroy(ds);

  /* Listing and info. */
  store_dataset_info *all;
  size_t k;
  assert_int_equal(store_dataset_list(st, &all, &k, &err), 0);
  int found = 0;
  for (size_t i = 0; i < k; i++)
    if (!strcmp(all[i].name, name)) {
      found = 1;
      assert_int_equal(all[i].records, n);
      assert_int_equal(all[i].nfields, 3);
      assert_string_equal(all[i].fields[1].name, "images");
      assert_int_equal(all[i].fields[1].offset, 4);
      assert_string_equal(all[i].source, "synthetic");
    }
  assert_true(found);
  store_dataset_infos_free(all, k);

  /* Deleting removes it. */
  assert_int_equal(store_dataset_delete(st, name, &err), 0);
  store_dataset_info info;
  assert_int_equal(store_dataset_info_get(st, name, &info, &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, name));
  assert_int_equal(store_dataset_delete(st, name, &err), SHOAL_ENOENT);
}

/* crop_pad and hflip: each image is one of the (2p+1)^2 shifted crops of the zero-padded
 * source, flipped or not, the draws seeded; the labels and indices are untouched. */
static void test_augment(void **state) {
  store *st = *state;
  char name[80];
  dname(name, sizeof name, "aug");
  const uint32_t n = 300;
  put_synthetic(st, name, n, 37);
  data_stream_config c = data_stream_defaults();
  c.batch = 50, c.seed = 9, c.crop_pad = 1, c.hflip = true;
  shoal_error err = {0};
  data_stream *ds;
  assert_int_equal(data_stream_open(&ds, st, name, &c, &err), 0);
  int used[3][3][2] = {{{0}}};
  for (long i = 0; i < data_stream_batches(ds); i++) {
    data_batch b;
    assert_int_equal(data_stream_next(ds, &b, &err), 0);
    for (int j = 0; j < b.n; j++) {
      uint32_t r = (uint32_t)b.index[j];
      assert_int_equal(b.labels[j], (int32_t)(r % 10));
      int matched = 0;
      for (int oy = -1; oy <= 1 && !matched; oy++)
        for (int ox = -1; ox <= 1 && !matched; ox++)
          for (int fl = 0; fl < 2 && !matched; fl++) {
            int ok = 1;
            for (int y = 0; y < 4 && ok; y++)
              for (int x = 0; x < 4 && ok; x++) {
                int sy = y + oy, sx = (fl ? 3 - x : x) + ox;
                float want = sy >= 0 && sy < 4 && sx >= 0 && sx < 4
                                 ? (float)(uint8_t)(r * 7 + (uint32_t)(sy * 4 + sx)) / 255.0f
                                 : 0.0f;
                ok = b.x[j * IMG + y * 4 + x] == want;
              }
            if (ok) matched = 1, used[oy + 1][ox + 1][fl]++;
          }
      if (!matched) fail_msg("record %u is no crop or flip of its image", r);
    }
  }
  data_stream_destroy(ds);
  int kinds = 0;
  for (int a = 0; a < 3; a++)
    for (int b2 = 0; b2 < 3; b2++)
      for (int f = 0; f < 2; f++) kinds += used[a][b2][f] > 0;
  assert_true(kinds >= 12); /* 18 transforms, 300 draws */
  c.crop_pad = 5;           /* wider than the 4x4 image */
  assert_int_equal(data_stream_open(&ds, st, name, &c, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "crop_pad"));
  assert_int_equal(store_dataset_delete(st, name, &err), 0);
}

/* The writer refuses bad fields, names and sizes, a name taken, and an empty dataset;
 * an aborted or failed write leaves nothing visible. */
static void test_writer_checks(void **state) {
  store *st = *state;
  shoal_error err = {0};
  store_dataset_writer *w = NULL;
  char name[80];
  dname(name, sizeof name, "checks");
  store_dataset_field ok[1] = {{"x", STORE_DTYPE_F32, 1, {3}}};
  store_dataset_field bad_dt[1] = {{"x", 99, 0, {0}}};
  store_dataset_field bad_shape[1] = {{"x", STORE_DTYPE_U8, 2, {3, 0}}};
  store_dataset_field twice[2] = {{"x", STORE_DTYPE_U8, 0, {0}}, {"x", STORE_DTYPE_U8, 0, {0}}};
  store_dataset_field bad_name[1] = {{"../x", STORE_DTYPE_U8, 0, {0}}};
  assert_int_equal(store_dataset_create(st, name, bad_dt, 1, 10, NULL, &w, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "dtype"));
  assert_int_equal(store_dataset_create(st, name, bad_shape, 1, 10, NULL, &w, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "dimension 1"));
  assert_int_equal(store_dataset_create(st, name, twice, 2, 10, NULL, &w, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "twice"));
  assert_int_equal(store_dataset_create(st, name, bad_name, 1, 10, NULL, &w, &err), SHOAL_EINVAL);
  assert_int_equal(store_dataset_create(st, "../escape", ok, 1, 10, NULL, &w, &err), SHOAL_EINVAL);
  assert_int_equal(store_dataset_create(st, name, ok, 1, 0, NULL, &w, &err), SHOAL_EINVAL);
  assert_int_equal(store_dataset_create(st, name, ok, 1, 2000000, NULL, &w, &err), SHOAL_EINVAL);
  assert_null(w);

  /* Empty: refused at commit, nothing left. */
  assert_int_equal(store_dataset_create(st, name, ok, 1, 10, NULL, &w, &err), 0);
  assert_int_equal(store_dataset_commit(w, NULL, &err), SHOAL_EINVAL);
  store_dataset_info info;
  assert_int_equal(store_dataset_info_get(st, name, &info, &err), SHOAL_ENOENT);

  /* Aborted after some chunks: nothing visible. */
  float v[3 * 25] = {0};
  assert_int_equal(store_dataset_create(st, name, ok, 1, 10, NULL, &w, &err), 0);
  assert_int_equal(store_dataset_write(w, v, 25, &err), 0);
  store_dataset_abort(w);
  assert_int_equal(store_dataset_info_get(st, name, &info, &err), SHOAL_ENOENT);

  /* Written, then the name is taken, also for a writer started before the commit. */
  store_dataset_writer *w2;
  assert_int_equal(store_dataset_create(st, name, ok, 1, 10, NULL, &w, &err), 0);
  assert_int_equal(store_dataset_create(st, name, ok, 1, 10, NULL, &w2, &err), 0);
  assert_int_equal(store_dataset_write(w, v, 25, &err), 0);
  assert_int_equal(store_dataset_write(w2, v, 5, &err), 0);
  assert_int_equal(store_dataset_commit(w, NULL, &err), 0);
  assert_int_equal(store_dataset_commit(w2, NULL, &err), SHOAL_EEXIST);
  assert_non_null(strstr(err.msg, name));
  assert_int_equal(store_dataset_create(st, name, ok, 1, 10, NULL, &w, &err), SHOAL_EEXIST);
  assert_int_equal(store_dataset_info_get(st, name, &info, &err), 0);
  assert_int_equal(info.records, 25);
  assert_int_equal(info.chunks, 3);
  store_dataset_info_clear(&info);

  /* A stream needs an image field of u8 and integer labels. */
  data_stream_config c = data_stream_defaults();
  data_stream *ds;
  assert_int_equal(data_stream_open(&ds, st, name, &c, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "images"));
  assert_int_equal(store_dataset_delete(st, name, &err), 0);

  if (g_file) { /* no temporary folder left behind by the aborts and the lost race */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s/store/_datasets' | grep '^\\.')\"", g_dir);
    assert_int_equal(system(cmd), 0);
  }
}

/* ---- damage (file store: the test edits the files) ---- */

static void file_path(char *out, size_t cap, const char *name, const char *file) {
  snprintf(out, cap, "%s/store/_datasets/%s/%s", g_dir, name, file);
}

static void flip_byte(const char *path, long off) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, off, SEEK_SET), 0);
  int c = fgetc(f);
  assert_int_equal(fseek(f, off, SEEK_SET), 0);
  fputc(c ^ 0x5a, f);
  fclose(f);
}

/* Reading chunk c gives code and a message naming the dataset and "chunk c"; so does
 * a stream over it (when c is the first damaged chunk). */
static void expect_chunk_error(store *st, const char *name, uint32_t c, int code, const char *words,
                               int stream) {
  shoal_error err = {0};
  store_dataset_info info;
  assert_int_equal(store_dataset_info_get(st, name, &info, &err), 0);
  uint8_t *buf = malloc(info.chunk_records * info.record_bytes);
  assert_int_equal(store_dataset_chunk_read(st, &info, c, buf,
                                            info.chunk_records * info.record_bytes, NULL, &err),
                   code);
  char want[100];
  snprintf(want, sizeof want, "chunk %u", c);
  if (!strstr(err.msg, name) || !strstr(err.msg, want) || !strstr(err.msg, words))
    fail_msg("message lacks '%s', '%s' or '%s': %s", name, want, words, err.msg);
  free(buf);
  store_dataset_info_clear(&info);
  if (!stream) return;
  data_stream_config sc = data_stream_defaults();
  sc.shuffle = false, sc.batch = 100;
  data_stream *ds;
  assert_int_equal(data_stream_open(&ds, st, name, &sc, &err), 0);
  int rc = 0;
  data_batch b;
  for (int i = 0; i < 10 && !rc; i++) rc = data_stream_next(ds, &b, &err);
  assert_int_equal(rc, code);
  assert_non_null(strstr(err.msg, want));
  assert_int_equal(data_stream_next(ds, &b, &err), code); /* it stays failed */
  data_stream_destroy(ds);
}

static void test_damage_rejected(void **state) {
  store *st = *state;
  char name[80], p[900], q[900];
  shoal_error err = {0};
  dname(name, sizeof name, "damage");
  put_synthetic(st, name, 200, 37); /* 6 chunks */

  /* A flipped payload byte: the CRC names it. */
  file_path(p, sizeof p, name, "chunk-000002.bin");
  flip_byte(p, 32 + 100);
  expect_chunk_error(st, name, 2, SHOAL_EFORMAT, "CRC-32", 1);
  flip_byte(p, 32 + 100);
  /* A bad magic, a truncated chunk, a chunk in the wrong place, a missing chunk. */
  flip_byte(p, 1);
  expect_chunk_error(st, name, 2, SHOAL_EFORMAT, "magic", 1);
  flip_byte(p, 1);
  assert_int_equal(truncate(p, 32 + 50), 0);
  expect_chunk_error(st, name, 2, SHOAL_EFORMAT, "truncated", 1);
  file_path(q, sizeof q, name, "chunk-000003.bin");
  assert_int_equal(rename(q, p), 0);
  expect_chunk_error(st, name, 2, SHOAL_EFORMAT, "says it is chunk 3", 1);
  expect_chunk_error(st, name, 3, SHOAL_ENOENT, "cannot open", 0);

  /* Manifests: not JSON, a CRC missing, counts that disagree, a newer version. */
  char m[900];
  file_path(m, sizeof m, name, "manifest.json");
  char *orig;
  {
    FILE *f = fopen(m, "rb");
    assert_non_null(f);
    orig = calloc(1, 1 << 16);
    size_t len = fread(orig, 1, (1 << 16) - 1, f);
    fclose(f);
    assert_true(len > 100);
  }
  struct {
    const char *from, *to, *words;
  } cases[] = {
      {"\"format\"", "\"form", "not valid JSON"},
      {"\"records\" : 200", "\"records\" : 2000", "disagree"},
      {"\"version\" : 1", "\"version\" : 7", "version 7"},
      {"\"crc\" : [ ", "\"crc\" : [ 1, ", "one CRC per chunk"},
      {"\"record_bytes\" : 24", "\"record_bytes\" : 25", "record_bytes"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *at = strstr(orig, cases[i].from);
    if (!at) fail_msg("manifest lacks %s: %s", cases[i].from, orig);
    FILE *f = fopen(m, "wb");
    fwrite(orig, 1, (size_t)(at - orig), f);
    fputs(cases[i].to, f);
    fputs(at + strlen(cases[i].from), f);
    fclose(f);
    store_dataset_info info;
    assert_int_equal(store_dataset_info_get(st, name, &info, &err), SHOAL_EFORMAT);
    if (!strstr(err.msg, name) || !strstr(err.msg, cases[i].words))
      fail_msg("case %zu: message lacks '%s': %s", i, cases[i].words, err.msg);
    data_stream *ds;
    data_stream_config sc = data_stream_defaults();
    assert_int_equal(data_stream_open(&ds, st, name, &sc, &err), SHOAL_EFORMAT);
    /* A listing fails loudly rather than hide the dataset. */
    store_dataset_info *all;
    size_t k;
    assert_int_equal(store_dataset_list(st, &all, &k, &err), SHOAL_EFORMAT);
  }
  remove(m);
  store_dataset_info info;
  assert_int_equal(store_dataset_info_get(st, name, &info, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "manifest"));
  free(orig);
  assert_int_equal(store_dataset_delete(st, name, &err), 0);
}

/* What a killed writer leaves (a half-written dataset folder) is removed by the next
 * writer on the same host once its process is gone; other hosts' folders stay. */
static void test_leftovers_swept(void **state) {
  store *st = *state;
  char h[256] = {0}, tag[64] = {0};
  assert_int_equal(gethostname(h, sizeof h - 1), 0);
  size_t o = 0;
  for (size_t i = 0; h[i] && o < sizeof tag - 1; i++)
    if (isalnum((unsigned char)h[i]) || h[i] == '-') tag[o++] = h[i];
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  char root[400], half[700], other[700], f[800];
  snprintf(root, sizeof root, "%s/store/_datasets", g_dir);
  mkdir(root, 0755);
  snprintf(half, sizeof half, "%s/.tmp.%s.%ld.3.half", root, tag, (long)dead);
  snprintf(other, sizeof other, "%s/.tmp.otherhost.%ld.3.far", root, (long)dead);
  assert_int_equal(mkdir(half, 0755), 0);
  assert_int_equal(mkdir(other, 0755), 0);
  snprintf(f, sizeof f, "%s/chunk-000000.bin", half);
  FILE *fp = fopen(f, "w");
  fputs("partial", fp);
  fclose(fp);
  char name[80];
  dname(name, sizeof name, "after-crash");
  put_synthetic(st, name, 10, 4);
  struct stat sb;
  assert_int_equal(stat(half, &sb), -1);
  assert_int_equal(stat(other, &sb), 0);
  rmdir(other);
}

/* ---- bounded memory over all of Fashion-MNIST ---- */

static long status_kb(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t kl = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, kl)) v = atol(line + kl);
  if (f) fclose(f);
  return v;
}

/* The child: opens the store, streams one epoch and prints what it measured. */
static int stream_child(const char *uri, const char *name) {
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
  long rss0 = status_kb("VmRSS:");
  data_stream_config c = data_stream_defaults();
  c.batch = 64, c.seed = 7, c.window_chunks = 2, c.prefetch_chunks = 1;
  c.mean = 0.2860f, c.std = 0.3530f;
  data_stream *ds;
  if (data_stream_open(&ds, st, name, &c, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
  uint64_t n = 0, hist[10] = {0};
  double t0 = shoal_now_s();
  for (long i = 0; i < data_stream_batches(ds); i++) {
    data_batch b;
    if (data_stream_next(ds, &b, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    for (int j = 0; j < b.n; j++) hist[b.labels[j] % 10]++;
    n += (uint64_t)b.n;
  }
  double dt = shoal_now_s() - t0;
  long hwm = status_kb("VmHWM:");
  printf("records %llu memory %zu rss0_kb %ld hwm_kb %ld seconds %.3f", (unsigned long long)n,
         data_stream_memory(ds), rss0, hwm, dt);
  for (int k = 0; k < 10; k++) printf(" h%d %llu", k, (unsigned long long)hist[k]);
  printf("\n");
  data_stream_destroy(ds);
  store_close(st);
  return 0;
}

static double num_after(const char *s, const char *key) {
  const char *p = strstr(s, key);
  return p ? atof(p + strlen(key)) : -1;
}

static void test_fashion_mnist_bounded_memory(void **state) {
  store *st = *state;
  const char *dir =
      getenv("SHOAL_FASHION_MNIST") ? getenv("SHOAL_FASHION_MNIST") : data_fashion_mnist_dir();
  char ip[2][600], lp[2][600];
  const char *split[2] = {"train", "t10k"};
  for (int s = 0; s < 2; s++) {
    snprintf(ip[s], sizeof ip[s], "%s/%s-images-idx3-ubyte.gz", dir, split[s]);
    snprintf(lp[s], sizeof lp[s], "%s/%s-labels-idx1-ubyte.gz", dir, split[s]);
  }
  if (access(ip[0], R_OK) != 0) {
    printf("SKIPPED: Fashion-MNIST is not in %s (Debian's dataset-fashion-mnist)\n", dir);
    skip();
  }
  /* All 70,000 images, both splits one after the other, in chunks of 1,335 records
   * (about 1 MB). */
  char name[80];
  dname(name, sizeof name, "fmnist-all");
  store_dataset_field f[2] = {{"images", STORE_DTYPE_U8, 2, {28, 28}},
                              {"labels", STORE_DTYPE_U8, 0, {0}}};
  shoal_error err = {0};
  store_dataset_writer *w;
  assert_int_equal(store_dataset_create(st, name, f, 2, 1335, "fashion-mnist", &w, &err), 0);
  uint8_t *rec = malloc(785 * 1000);
  for (int s = 0; s < 2; s++) {
    data_idx im, lb;
    if (data_idx_read(ip[s], &im, &err) || data_idx_read(lp[s], &lb, &err)) fail_msg("%s", err.msg);
    for (uint32_t r = 0; r < im.dim[0];) {
      uint32_t k = im.dim[0] - r < 1000 ? im.dim[0] - r : 1000;
      for (uint32_t j = 0; j < k; j++) {
        memcpy(rec + j * 785, im.data + (size_t)(r + j) * 784, 784);
        rec[j * 785 + 784] = lb.data[r + j];
      }
      assert_int_equal(store_dataset_write(w, rec, k, &err), 0);
      r += k;
    }
    data_idx_free(&im), data_idx_free(&lb);
  }
  free(rec);
  store_dataset_info info;
  assert_int_equal(store_dataset_commit(w, &info, &err), 0);
  assert_int_equal(info.records, 70000);
  size_t data_bytes = (size_t)info.records * info.record_bytes; /* 54.95 MB */
  store_dataset_info_clear(&info);

  /* Under AddressSanitizer the child keeps freed blocks in ASan's quarantine (256 MB by
   * default): with MongoDB, libmongoc allocates each ~1 MB chunk's reply and frees it, and
   * the quarantine would hold ~130 MB of them resident. A 1 MB quarantine measures what
   * the stream holds (no effect without ASan). */
  char cmd[1400];
  snprintf(cmd, sizeof cmd,
           "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1\" '%s' stream-child "
           "'%s' '%s'",
           g_self, g_uri, name);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char out[1024] = {0};
  size_t got = fread(out, 1, sizeof out - 1, p);
  out[got] = 0;
  assert_int_equal(pclose(p), 0);
  printf("child: %s", out);
  assert_int_equal((long)num_after(out, "records "), 70000);
  /* Fashion-MNIST has 7,000 images of each class. */
  for (int k = 0; k < 10; k++) {
    char key[8];
    snprintf(key, sizeof key, " h%d ", k);
    assert_int_equal((long)num_after(out, key), 7000);
  }
  double mem = num_after(out, "memory "), rss0 = num_after(out, "rss0_kb "),
         hwm = num_after(out, "hwm_kb ");
  /* The stream's own accounting: 3 chunks of 1.05 MB and small arrays, under 4 MB. */
  assert_true(mem > 0 && mem < 4e6);
  assert_true(mem < (double)data_bytes / 12);
  /* Peak resident memory while streaming grew by less than 12 MB (the bound plus the
   * allocator's and the sanitizer's overheads), against 55 MB of data. */
  double grew = (hwm - rss0) * 1024;
  printf("dataset %.1f MB, stream accounting %.2f MB, peak RSS growth %.2f MB\n",
         (double)data_bytes / 1e6, mem / 1e6, grew / 1e6);
  assert_true(rss0 > 0 && hwm > 0);
  assert_true(grew < 12e6);
  assert_int_equal(store_dataset_delete(st, name, &err), 0);
}

int main(int argc, char **argv) {
  snprintf(g_self, sizeof g_self, "%s", argv[0]);
  if (argc == 4 && !strcmp(argv[1], "stream-child")) return stream_child(argv[2], argv[3]);
  const char *backend = argc > 1 ? argv[1] : "file";
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(g_prefix, sizeof g_prefix, "t%ld-%ld", (long)getpid(), (long)(ts.tv_nsec % 100000));
  if (!strcmp(backend, "mongodb")) {
    int mrc = mongo_test_uri(g_uri, sizeof g_uri, "shoal_test_dataset");
    if (mrc) return mrc;
  } else if (!strcmp(backend, "file")) {
    g_file = 1;
    snprintf(g_dir, sizeof g_dir, "/tmp/shoal-test-dataset-XXXXXX");
    if (!mkdtemp(g_dir)) return perror("mkdtemp"), 1;
    snprintf(g_uri, sizeof g_uri, "file://%s/store", g_dir);
  } else {
    fprintf(stderr, "usage: %s file|mongodb\n", argv[0]);
    return 2;
  }
  const struct CMUnitTest shared[] = {
      cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_writer_checks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_augment, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fashion_mnist_bounded_memory, setup, teardown),
  };
  const struct CMUnitTest file_only[] = {
      cmocka_unit_test_setup_teardown(test_damage_rejected, setup, teardown),
      cmocka_unit_test_setup_teardown(test_leftovers_swept, setup, teardown),
  };
  char group[64];
  snprintf(group, sizeof group, "dataset_%s", backend);
  int rc = cmocka_run_group_tests_name(group, shared, NULL, NULL);
  if (g_file) {
    rc |= cmocka_run_group_tests_name("dataset_file_damage", file_only, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) rc = 1;
  }
  return rc;
}
