/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_examples_store.c — examples/classify.c trained from a dataset streamed from
 * the store (--data store://NAME) reaches the accuracy it reaches from the IDX files:
 * the same first N training and 2,000 test images, the same seed, the same number of
 * steps; only the shuffle differs (chunk order and a window of chunks against a full
 * permutation). Runs build/bin/classify (SHOAL_BINARY_DIR). Without the Fashion-MNIST
 * files it prints SKIPPED and returns 77. The Debug (sanitizer) build, about 10x slower,
 * runs only the streamed training, shorter, and checks that it learns. */
#define _GNU_SOURCE

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "data/data.h"
#include "store/store.h"

#include "tests/examples_util.h"

/* Stores the first n records of IDX images+labels as dataset name (chunks of 512). */
static void put_split(store *st, const char *name, const char *images, const char *labels, int n) {
  shoal_error err = {0};
  data_idx im, lb;
  if (data_idx_read(images, &im, &err) || data_idx_read(labels, &lb, &err)) fail_msg("%s", err.msg);
  store_dataset_field f[2] = {{"images", STORE_DTYPE_U8, 2, {28, 28}},
                              {"labels", STORE_DTYPE_U8, 0, {0}}};
  store_dataset_writer *w;
  if (store_dataset_create(st, name, f, 2, 512, images, &w, &err)) fail_msg("%s", err.msg);
  uint8_t rec[785];
  for (int r = 0; r < n; r++) {
    memcpy(rec, im.data + (size_t)r * 784, 784);
    rec[784] = lb.data[r];
    if (store_dataset_write(w, rec, 1, &err)) fail_msg("%s", err.msg);
  }
  if (store_dataset_commit(w, NULL, &err)) fail_msg("%s", err.msg);
  data_idx_free(&im), data_idx_free(&lb);
}

static void test_classify_from_store(void **state) {
  (void)state;
  const char *dir =
      getenv("SHOAL_FASHION_MNIST") ? getenv("SHOAL_FASHION_MNIST") : data_fashion_mnist_dir();
  char p[4][600];
  snprintf(p[0], sizeof p[0], "%s/train-images-idx3-ubyte.gz", dir);
  snprintf(p[1], sizeof p[1], "%s/train-labels-idx1-ubyte.gz", dir);
  snprintf(p[2], sizeof p[2], "%s/t10k-images-idx3-ubyte.gz", dir);
  snprintf(p[3], sizeof p[3], "%s/t10k-labels-idx1-ubyte.gz", dir);
  int n = SHOAL_EXAMPLES_QUICK ? 1600 : 6400, batch = SHOAL_EXAMPLES_QUICK ? 32 : 64;
  int n_test = SHOAL_EXAMPLES_QUICK ? 1000 : 2000;
  char uri[400];
  snprintf(uri, sizeof uri, "file://%s/store", g_tmp);
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) fail_msg("%s", err.msg);
  put_split(st, "fm-train", p[0], p[1], n);
  put_split(st, "fm-test", p[2], p[3], n_test);
  store_close(st);

  char args[1400];
  snprintf(args, sizeof args,
           "--epochs 1 --data store://fm-train --store '%s' --batch %d --threads 1 --seed 3 "
           "--out %s/s.safetensors",
           uri, batch, g_tmp);
  char *streamed = run("classify", args);
  assert_non_null(strstr(streamed, "streamed from the store"));
  double acc_s = field(streamed, "test_acc"), loss_s = field(streamed, "train_loss");
  free(streamed);
  if (SHOAL_EXAMPLES_QUICK) {
    assert_true(acc_s > 0.5); /* 50 steps: well above chance (0.1) */
  } else {
    snprintf(args, sizeof args,
             "--epochs 1 --limit %d --batch %d --test-limit %d --threads 1 --seed 3 "
             "--out %s/f.safetensors",
             n, batch, n_test, g_tmp);
    char *files = run("classify", args);
    double acc_f = field(files, "test_acc"), loss_f = field(files, "train_loss");
    free(files);
    printf("test accuracy: files %.4f, store %.4f; train loss: files %.4f, store %.4f\n", acc_f,
           acc_s, loss_f, loss_s);
    assert_true(acc_s > 0.72);
    assert_true(fabs(acc_s - acc_f) < 0.03);
    assert_true(fabs(loss_s - loss_f) < 0.1);
  }

  /* A missing dataset is an error naming it. */
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "'%s/classify' --data store://nope-train --store '%s' 2>&1", g_bin,
           uri);
  FILE *pp = popen(cmd, "r");
  char out[1024] = {0};
  size_t got = fread(out, 1, sizeof out - 1, pp);
  out[got] = 0;
  assert_int_equal(WEXITSTATUS(pclose(pp)), 1);
  assert_non_null(strstr(out, "no dataset 'nope-train'"));
}

int main(void) {
  const char *bin = getenv("SHOAL_BINARY_DIR");
  snprintf(g_bin, sizeof g_bin, "%s/bin", bin ? bin : ".");
  char img[600];
  const char *dir =
      getenv("SHOAL_FASHION_MNIST") ? getenv("SHOAL_FASHION_MNIST") : data_fashion_mnist_dir();
  snprintf(img, sizeof img, "%s/train-images-idx3-ubyte.gz", dir);
  if (access(img, R_OK) != 0) {
    printf("SKIPPED: Fashion-MNIST is not in %s (Debian's dataset-fashion-mnist)\n", dir);
    return 77;
  }
  snprintf(g_tmp, sizeof g_tmp, "/tmp/shoal_test_examples_store_XXXXXX");
  if (!mkdtemp(g_tmp)) return 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_classify_from_store)};
  int rc = cmocka_run_group_tests_name("examples_store", tests, NULL, NULL);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
  if (system(cmd) != 0) rc = 1;
  return rc;
}
