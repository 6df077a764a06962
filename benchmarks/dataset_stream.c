/* SPDX-License-Identifier: Apache-2.0 */
/*
 * benchmarks/dataset_stream.c — how fast does a dataset stream from the store, against
 * reading the IDX files directly, in the same run?
 *
 *   store     data_stream over Fashion-MNIST's 60,000 training images kept in a file
 *             store (chunks of 1,335 records, about 1 MB; window 4, prefetch 2): open,
 *             then one epoch of shuffled, normalised batches of 64
 *   idx files data_fashion_mnist_load (gunzip and parse both files) and data_loader's
 *             epoch of shuffled, normalised batches of 64: what classify does from files
 *   in memory data_loader's epoch alone once the files are loaded (no I/O at all)
 *
 * Records per second over 3 repetitions (the best), as seen by the trainer (batches
 * handed to it). With $SHOAL_TEST_MONGO_URI set, the same stream from MongoDB too. The
 * store is written once in a temporary folder (the page cache then holds it, as it
 * holds the IDX files).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data/data.h"
#include "store/store.h"

static void die(const char *what, const shoal_error *e) {
  fprintf(stderr, "dataset_stream: %s: %s\n", what, e->msg);
  exit(1);
}

static void put_train(store *st, const char *name, const char *dir) {
  shoal_error err = {0};
  data_idx im, lb;
  char ip[600], lp[600];
  snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte.gz", dir);
  snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte.gz", dir);
  if (data_idx_read(ip, &im, &err) || data_idx_read(lp, &lb, &err)) die("idx", &err);
  store_dataset_field f[2] = {{"images", STORE_DTYPE_U8, 2, {28, 28}},
                              {"labels", STORE_DTYPE_U8, 0, {0}}};
  store_dataset_writer *w;
  if (store_dataset_create(st, name, f, 2, 1335, "benchmark", &w, &err)) die("create", &err);
  uint8_t *rec = malloc(785 * 1000);
  for (uint32_t r = 0; r < im.dim[0]; r += 1000) {
    uint32_t k = im.dim[0] - r < 1000 ? im.dim[0] - r : 1000;
    for (uint32_t j = 0; j < k; j++) {
      memcpy(rec + j * 785, im.data + (size_t)(r + j) * 784, 784);
      rec[j * 785 + 784] = lb.data[r + j];
    }
    if (store_dataset_write(w, rec, k, &err)) die("write", &err);
  }
  if (store_dataset_commit(w, NULL, &err)) die("commit", &err);
  free(rec);
  data_idx_free(&im), data_idx_free(&lb);
}

/* One epoch from the store, open included; returns records/s. */
static double run_store(store *st, const char *name, size_t *memory) {
  shoal_error err = {0};
  double t0 = shoal_now_s();
  data_stream_config c = data_stream_defaults();
  c.batch = 64, c.seed = 1, c.mean = 0.2860f, c.std = 0.3530f;
  data_stream *ds;
  if (data_stream_open(&ds, st, name, &c, &err)) die("open", &err);
  uint64_t n = 0;
  for (long i = 0; i < data_stream_batches(ds); i++) {
    data_batch b;
    if (data_stream_next(ds, &b, &err)) die("next", &err);
    n += (uint64_t)b.n;
  }
  double dt = shoal_now_s() - t0;
  *memory = data_stream_memory(ds);
  data_stream_destroy(ds);
  return (double)n / dt;
}

/* Loads the files (when ds is NULL) and runs one loader epoch; records/s. */
static double run_files(const char *dir, const data_set *keep) {
  shoal_error err = {0};
  double t0 = shoal_now_s();
  data_set *ds = (data_set *)keep;
  if (!ds && data_fashion_mnist_load(dir, true, &ds, &err)) die("load", &err);
  data_loader_config lc = data_loader_defaults();
  lc.batch = 64, lc.seed = 1, lc.mean = 0.2860f, lc.std = 0.3530f;
  data_loader *ld = data_loader_create(ds, &lc, &err);
  if (!ld) die("loader", &err);
  uint64_t n = 0;
  for (long i = 0; i < data_loader_batches(ld); i++) {
    data_batch b;
    if (data_loader_next(ld, &b, &err)) die("next", &err);
    n += (uint64_t)b.n;
  }
  double dt = shoal_now_s() - t0;
  data_loader_destroy(ld);
  if (!keep) data_set_destroy(ds);
  return (double)n / dt;
}

int main(void) {
  const char *dir =
      getenv("SHOAL_FASHION_MNIST") ? getenv("SHOAL_FASHION_MNIST") : data_fashion_mnist_dir();
  char probe[600];
  snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte.gz", dir);
  if (access(probe, R_OK) != 0) {
    printf("dataset_stream: Fashion-MNIST is not in %s; nothing to measure\n", dir);
    return 0;
  }
  char tmp[] = "/tmp/shoal-bench-dataset-XXXXXX", uri[200];
  if (!mkdtemp(tmp)) return 1;
  snprintf(uri, sizeof uri, "file://%s/store", tmp);
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) die("store", &err);
  put_train(st, "fmnist-train", dir);

  store *mst = NULL;
  const char *muri = getenv("SHOAL_TEST_MONGO_URI");
  char mname[64];
  snprintf(mname, sizeof mname, "bench-%ld", (long)getpid());
  if (muri && muri[0]) {
    if (store_open(&mst, muri, &err)) die("mongodb store", &err);
    put_train(mst, mname, dir);
  }

  double best_store = 0, best_files = 0, best_mem = 0, best_mongo = 0;
  size_t memory = 0;
  data_set *loaded;
  if (data_fashion_mnist_load(dir, true, &loaded, &err)) die("load", &err);
  for (int rep = 0; rep < 3; rep++) {
    double a = run_store(st, "fmnist-train", &memory), b = run_files(dir, NULL),
           c = run_files(dir, loaded);
    if (a > best_store) best_store = a;
    if (b > best_files) best_files = b;
    if (c > best_mem) best_mem = c;
    if (mst) {
      size_t m2;
      double d = run_store(mst, mname, &m2);
      if (d > best_mongo) best_mongo = d;
    }
  }
  data_set_destroy(loaded);

  printf(
      "Fashion-MNIST train (60,000 images, 47.1 MB), one epoch of shuffled batches of 64, "
      "best of 3\n");
  printf("| source | records/s | vs idx files |\n|---|---|---|\n");
  printf(
      "| store (file://), data_stream, window 4 + prefetch 2 chunks (%.2f MB held) | %.0f | "
      "%.2f |\n",
      (double)memory / 1e6, best_store, best_store / best_files);
  if (mst)
    printf("| store (mongodb://), data_stream | %.0f | %.2f |\n", best_mongo,
           best_mongo / best_files);
  printf("| idx files: load (gunzip) + data_loader epoch | %.0f | 1.00 |\n", best_files);
  printf("| in memory: data_loader epoch only (all 47 MB held) | %.0f | %.2f |\n", best_mem,
         best_mem / best_files);
  printf("BENCH name=dataset_stream_store value=%.0f unit=records/s baseline=%.0f ratio=%.3f\n",
         best_store, best_files, best_store / best_files);
  if (mst)
    printf(
        "BENCH name=dataset_stream_mongodb value=%.0f unit=records/s baseline=%.0f "
        "ratio=%.3f\n",
        best_mongo, best_files, best_mongo / best_files);
  printf(
      "BENCH name=dataset_stream_vs_memory value=%.0f unit=records/s baseline=%.0f "
      "ratio=%.3f\n",
      best_store, best_mem, best_store / best_mem);
  printf("BENCH name=dataset_stream_memory value=%.2f unit=MB baseline=47.10 ratio=%.2f\n",
         (double)memory / 1e6, 47.1e6 / (double)memory);
  if (mst) store_dataset_delete(mst, mname, NULL), store_close(mst);
  store_close(st);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  return system(cmd) == 0 ? 0 : 1;
}
