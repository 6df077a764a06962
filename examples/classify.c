/* SPDX-License-Identifier: Apache-2.0 */
/*
 * examples/classify.c — a CNN on Fashion-MNIST with shoal's layer library and data loader.
 *
 *   classify [--epochs 3] [--batch 64] [--lr 1e-3] [--augment] [--threads 2] [--seed 0]
 *            [--out classify.safetensors] [--data DIR|store://NAME] [--test-data store://NAME]
 *            [--store URI] [--limit N] [--test-limit N]
 *
 * --data store://NAME trains on dataset NAME of the store (`shoal dataset put`; the store
 * from --store, else $SHOAL_STORE_URI, else ./runs), streamed in batches with bounded
 * memory (data_stream: chunk-order shuffle and a shuffle over a window of chunks). The
 * test set is --test-data, or NAME with its "-train" ending replaced by "-test".
 *
 * The net: conv32 3x3 BN ReLU, maxpool 2, conv64 3x3 BN ReLU, maxpool 2, dense 256 ReLU,
 * dropout 0.3, dense 10 (the baselines' conv32-pool-conv64-pool-128-10 with batch norm, a
 * wider head and dropout). Adam with a cosine learning-rate decay to lr/100 over the run.
 * --augment adds a random 28x28 crop of the image zero-padded by 2 and a horizontal flip.
 * After each epoch it prints the training loss, the test loss and accuracy, and saves a
 * safetensors checkpoint (dcgan.c scores its samples with it; PyTorch loads it too).
 * Inputs are normalised with the training split's mean and std (0.2860, 0.3530).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "nn/nn.h"
#include "store/store.h"

static _Noreturn void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "classify: %s: %s\n", what, err && err->msg[0] ? err->msg : "failed");
  exit(1);
}

/* The classifier; dcgan.c builds the same layers to load its checkpoint. */
static nn_model *make_classifier(int max_batch, uint64_t seed, shoal_error *err) {
  nn_model *m = nn_model_create(NN_CPU, err);
  if (!m) return NULL;
  nn_input(m, 1, 28, 28);
  nn_conv2d(m, "conv1", 32, 3, 3, 1, 1, 1);
  nn_batchnorm(m, "bn1", 1e-5f, 0.1f);
  nn_activation(m, "relu1", NN_RELU, 0);
  nn_maxpool2d(m, "pool1", 2, 2, 0);
  nn_conv2d(m, "conv2", 64, 3, 3, 1, 1, 1);
  nn_batchnorm(m, "bn2", 1e-5f, 0.1f);
  nn_activation(m, "relu2", NN_RELU, 0);
  nn_maxpool2d(m, "pool2", 2, 2, 0);
  nn_dense(m, "fc1", 256);
  nn_activation(m, "relu3", NN_RELU, 0);
  nn_dropout(m, "drop", 0.3f);
  nn_dense(m, "fc2", 10);
  if (nn_model_build(m, max_batch, seed, err)) {
    nn_model_destroy(m);
    return NULL;
  }
  return m;
}

/* Batches from files (data_loader) or from the store (data_stream). */
typedef struct source {
  data_loader *ld;
  data_stream *ds;
} source;

static long src_batches(const source *s) {
  return s->ds ? data_stream_batches(s->ds) : data_loader_batches(s->ld);
}
static int src_next(source *s, data_batch *b, shoal_error *err) {
  return s->ds ? data_stream_next(s->ds, b, err) : data_loader_next(s->ld, b, err);
}
static double src_wait(const source *s) {
  return s->ds ? data_stream_wait_s(s->ds) : data_loader_wait_s(s->ld);
}

/* Test loss and accuracy over the whole source's epoch, in evaluation mode. */
static void evaluate(nn_model *m, source *ld, double *loss, double *acc) {
  shoal_error err = {0};
  double sum = 0;
  long correct = 0, n = 0;
  nn_model_set_training(m, false);
  for (long i = 0; i < src_batches(ld); i++) {
    data_batch b;
    const float *y;
    float l;
    if (src_next(ld, &b, &err) || nn_model_forward(m, b.x, b.n, &y, &err) ||
        nn_cross_entropy_loss(&l, NULL, y, b.labels, NULL, b.n, 10, &err))
      die("evaluate", &err);
    sum += (double)l * b.n;
    for (int k = 0; k < b.n; k++) {
      int best = 0;
      for (int c = 1; c < 10; c++)
        if (y[k * 10 + c] > y[k * 10 + best]) best = c;
      correct += best == b.labels[k];
    }
    n += b.n;
  }
  nn_model_set_training(m, true);
  *loss = sum / (double)n, *acc = (double)correct / (double)n;
}

static void progress(long i, long n, double loss, double t) {
  int w = 30, done = (int)(w * (i + 1) / n);
  fprintf(stderr, "\r  [%.*s%*s] %5ld/%ld loss %.4f %.1fs", done,
          "==============================", w - done, "", i + 1, n, loss, t);
  if (i + 1 == n) fputc('\n', stderr);
}

int main(int argc, char **argv) {
  int epochs = 3, batch = 64, threads = 2, limit = 0, test_limit = 0;
  float lr = 1e-3f;
  bool augment = false;
  uint64_t seed = 0;
  const char *out = "classify.safetensors", *dir = NULL, *test_dir = NULL, *uri = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--augment"))
      augment = true;
    else if (!v)
      goto usage;
    else if (!strcmp(a, "--epochs"))
      epochs = atoi(v), i++;
    else if (!strcmp(a, "--batch"))
      batch = atoi(v), i++;
    else if (!strcmp(a, "--lr"))
      lr = strtof(v, NULL), i++;
    else if (!strcmp(a, "--threads"))
      threads = atoi(v), i++;
    else if (!strcmp(a, "--seed"))
      seed = strtoull(v, NULL, 10), i++;
    else if (!strcmp(a, "--out"))
      out = v, i++;
    else if (!strcmp(a, "--data"))
      dir = v, i++;
    else if (!strcmp(a, "--test-data"))
      test_dir = v, i++;
    else if (!strcmp(a, "--store"))
      uri = v, i++;
    else if (!strcmp(a, "--limit"))
      limit = atoi(v), i++;
    else if (!strcmp(a, "--test-limit"))
      test_limit = atoi(v), i++;
    else
      goto usage;
  }
  if (epochs < 1 || batch < 1 || !(lr > 0) || threads < 1 || limit < 0 || test_limit < 0) {
  usage:
    fprintf(stderr,
            "usage: classify [--epochs N] [--batch N] [--lr X] [--augment] [--threads N] "
            "[--seed N] [--out FILE] [--data DIR|store://NAME] [--test-data store://NAME] "
            "[--store URI] [--limit N] [--test-limit N]\n");
    return 2;
  }
  nn_set_threads(threads);
  shoal_error err = {0};
  data_set *train = NULL, *test = NULL;
  store *st = NULL;
  source tl = {0}, vl = {0};
  data_loader_config lc = data_loader_defaults();
  lc.batch = batch, lc.seed = seed, lc.mean = 0.2860f, lc.std = 0.3530f, lc.limit = limit;
  int n_train, n_test;
  if (dir && !strncmp(dir, "store://", 8)) {
    char test_name[80];
    const char *name = dir + 8;
    size_t nl = strlen(name);
    if (test_dir && strncmp(test_dir, "store://", 8)) {
      fprintf(stderr, "classify: --test-data takes store://NAME\n");
      return 2;
    }
    if (test_dir)
      snprintf(test_name, sizeof test_name, "%s", test_dir + 8);
    else if (nl > 6 && !strcmp(name + nl - 6, "-train"))
      snprintf(test_name, sizeof test_name, "%.*s-test", (int)(nl - 6), name);
    else {
      fprintf(stderr, "classify: --data %s: name the test set with --test-data store://NAME\n",
              dir);
      return 2;
    }
    if (limit || test_limit) {
      fprintf(stderr,
              "classify: --limit and --test-limit work on files only (a dataset in the "
              "store is used whole)\n");
      return 2;
    }
    if (store_open(&st, uri, &err)) die("store", &err);
    data_stream_config sc = data_stream_defaults();
    sc.batch = batch, sc.seed = seed, sc.mean = lc.mean, sc.std = lc.std;
    if (augment) sc.crop_pad = 2, sc.hflip = true;
    if (data_stream_open(&tl.ds, st, name, &sc, &err)) die("training set", &err);
    sc.shuffle = false, sc.crop_pad = 0, sc.hflip = false;
    if (data_stream_open(&vl.ds, st, test_name, &sc, &err)) die("test set", &err);
    int C, H, W;
    for (int k = 0; k < 2; k++) {
      data_stream_shape(k ? vl.ds : tl.ds, &C, &H, &W);
      if (C != 1 || H != 28 || W != 28) {
        fprintf(stderr, "classify: dataset %s holds %dx%dx%d images; the net takes 1x28x28\n",
                k ? test_name : name, C, H, W);
        return 1;
      }
    }
    n_train = (int)data_stream_records(tl.ds), n_test = (int)data_stream_records(vl.ds);
  } else {
    if (data_fashion_mnist_load(dir, true, &train, &err)) die("training set", &err);
    if (data_fashion_mnist_load(test_dir ? test_dir : dir, false, &test, &err))
      die("test set", &err);
    if (augment) lc.crop_pad = 2, lc.hflip = true;
    tl.ld = data_loader_create(train, &lc, &err);
    lc.shuffle = false, lc.crop_pad = 0, lc.hflip = false, lc.limit = test_limit;
    vl.ld = tl.ld ? data_loader_create(test, &lc, &err) : NULL;
    if (!vl.ld) die("loader", &err);
    n_train = limit && limit < data_set_count(train) ? limit : data_set_count(train);
    n_test = data_set_count(test);
  }
  nn_model *m = make_classifier(batch, seed, &err);
  if (!m) die("model", &err);
  nn_optim_config oc = nn_optim_defaults(NN_ADAM);
  oc.lr = lr;
  nn_optim *opt = nn_optim_create(m, &oc, &err);
  if (!opt) die("optimizer", &err);
  long per_epoch = src_batches(&tl), total = per_epoch * epochs;
  nn_schedule sched = {NN_SCHED_COSINE, lr, lr / 100, total, 0};
  float *dlogits = malloc((size_t)batch * 10 * sizeof(float));
  if (!dlogits) die("alloc", NULL);
  bool tty = isatty(2);
  printf("classify: %d train / %d test images%s, %ld steps of %d per epoch, %d epochs, lr %g%s\n",
         n_train, n_test, st ? " streamed from the store" : "", per_epoch, batch, epochs,
         (double)lr, augment ? ", augmented" : "");

  for (int e = 0; e < epochs; e++) {
    double t0 = shoal_now_s(), sum = 0;
    long correct = 0, seen = 0;
    for (long i = 0; i < per_epoch; i++) {
      data_batch b;
      const float *y;
      float loss;
      nn_optim_set_lr(opt, nn_schedule_value(&sched, e * per_epoch + i));
      nn_model_zero_grad(m);
      if (src_next(&tl, &b, &err) || nn_model_forward(m, b.x, b.n, &y, &err) ||
          nn_cross_entropy_loss(&loss, dlogits, y, b.labels, NULL, b.n, 10, &err) ||
          nn_model_backward(m, dlogits, NULL, &err) || nn_optim_step(opt, &err))
        die("training step", &err);
      sum += (double)loss * b.n, seen += b.n;
      for (int k = 0; k < b.n; k++) {
        int best = 0;
        for (int c = 1; c < 10; c++)
          if (y[k * 10 + c] > y[k * 10 + best]) best = c;
        correct += best == b.labels[k];
      }
      if (tty && (i % 20 == 0 || i + 1 == per_epoch))
        progress(i, per_epoch, sum / (double)seen, shoal_now_s() - t0);
    }
    double train_s = shoal_now_s() - t0, test_loss, test_acc;
    evaluate(m, &vl, &test_loss, &test_acc);
    printf(
        "epoch %d/%d train_loss %.4f train_acc %.4f test_loss %.4f test_acc %.4f time %.1fs "
        "(loader wait %.2fs)\n",
        e + 1, epochs, sum / (double)seen, (double)correct / (double)seen, test_loss, test_acc,
        train_s, src_wait(&tl));
    fflush(stdout);
    if (nn_model_save(m, out, &err)) die("checkpoint", &err);
  }
  printf("saved %s\n", out);
  free(dlogits);
  nn_optim_destroy(opt);
  nn_model_destroy(m);
  data_loader_destroy(vl.ld);
  data_loader_destroy(tl.ld);
  data_stream_destroy(vl.ds);
  data_stream_destroy(tl.ds);
  store_close(st);
  data_set_destroy(test);
  data_set_destroy(train);
  return 0;
}
