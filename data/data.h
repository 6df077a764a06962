/*
 * data/data.h — datasets for supervised and GAN work: an IDX reader (the MNIST and
 * Fashion-MNIST format, gzip-compressed or plain, through zlib), an in-memory image
 * dataset, and a loader that cuts it into shuffled, normalised, optionally augmented
 * minibatches on a background thread with a bounded prefetch, so a training loop finds
 * its next batch ready. Depends on common/ and zlib.
 *
 *   shoal_error err = {0};
 *   data_set *train;
 *   if (data_fashion_mnist_load(NULL, true, &train, &err)) die(err.msg);
 *   data_loader_config lc = data_loader_defaults();
 *   lc.batch = 64;  lc.seed = 1;  lc.mean = 0.2860f;  lc.std = 0.3530f;
 *   lc.crop_pad = 2;  lc.hflip = true;                 // augmentation
 *   data_loader *ld = data_loader_create(train, &lc, &err);
 *   data_batch b;
 *   for (long i = 0; i < data_loader_batches(ld); i++) {   // one epoch
 *     data_loader_next(ld, &b, &err);        // b.x (b.n, C, H, W), b.labels (b.n)
 *     ... nn_model_forward(model, b.x, b.n, &y, &err) ...
 *   }
 *   data_loader_destroy(ld);  data_set_destroy(train);
 *
 * Errors: functions return 0 or a negative SHOAL_E... code and fill the optional
 * shoal_error with a message naming the file and what is wrong with it.
 */
#ifndef SHOAL_DATA_H
#define SHOAL_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- IDX files ------------------------------------------------------------------ */

/* An IDX array (http://yann.lecun.com/exdb/mnist/): magic 0x00 0x00 <type> <ndim>,
 * ndim big-endian u32 sizes, then the data. shoal reads type 0x08 (unsigned byte),
 * the type of every MNIST-family file. */
typedef struct data_idx {
  int ndim;        /* 1..4 */
  uint32_t dim[4]; /* sizes, outermost first: (N, H, W) for images, (N) for labels */
  size_t count;    /* product of the sizes */
  uint8_t *data;   /* (count) bytes; owned, freed by data_idx_free */
} data_idx;

/* Reads an IDX file, gzip-compressed (by content, whatever the name) or not, into *out.
 * Caller frees with data_idx_free. Errors, with *out untouched: a missing or unreadable
 * file (SHOAL_ENOENT / SHOAL_EIO), a bad magic, an unsupported type or ndim, a
 * truncated file, trailing bytes or a corrupt gzip stream (SHOAL_EFORMAT); the message
 * names the file and what was found. */
int data_idx_read(const char *path, data_idx *out, shoal_error *err);
void data_idx_free(data_idx *idx); /* zeroes *idx; NULL or an empty one is fine */

/* ---- datasets ------------------------------------------------------------------- */

/* N images of (C, H, W) bytes with int32 class labels, in memory. */
typedef struct data_set data_set;

/* Reads an images file (N, H, W) and a labels file (N) in IDX format into a dataset of
 * C = 1 images. The counts must agree and labels be below 256. Caller owns *out (freed
 * by data_set_destroy); on error *out is untouched and the message names the file. */
int data_set_load_idx(const char *images_path, const char *labels_path, data_set **out,
                      shoal_error *err);
/* Fashion-MNIST's training (60,000) or test (10,000) split from dir, which holds
 * {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz. dir NULL: $SHOAL_FASHION_MNIST,
 * else data_fashion_mnist_dir(). */
int data_fashion_mnist_load(const char *dir, bool train, data_set **out, shoal_error *err);
/* Debian's dataset-fashion-mnist folder: "/usr/share/datasets/fashion-mnist". */
const char *data_fashion_mnist_dir(void);
/* The name of Fashion-MNIST class c ("T-shirt/top", ..., "Ankle boot"); "?" when c is
 * outside 0..9. Can't fail. */
const char *data_fashion_mnist_class(int c);

/* A dataset from caller's arrays (copied): images (n, C, H, W) bytes, labels (n) (NULL:
 * all 0). SHOAL_EINVAL for a non-positive size or a negative label. */
int data_set_create(const uint8_t *images, const int32_t *labels, int n, int C, int H, int W,
                    data_set **out, shoal_error *err);
void data_set_destroy(data_set *ds); /* NULL is fine */
int data_set_count(const data_set *ds);
void data_set_shape(const data_set *ds, int *C, int *H, int *W); /* can't fail */
/* Number of classes: the largest label + 1. */
int data_set_classes(const data_set *ds);
/* Sample i's bytes (C*H*W) and label; i must be in range (asserted). Borrowed. */
const uint8_t *data_set_image(const data_set *ds, int i);
int32_t data_set_label(const data_set *ds, int i);
/* Mean and standard deviation of all pixels scaled to [0, 1] (for normalisation; over
 * the training split of Fashion-MNIST: 0.2860, 0.3530). Can't fail. */
void data_set_stats(const data_set *ds, double *mean, double *std);

/* ---- minibatches ---------------------------------------------------------------- */

typedef struct data_loader_config {
  int batch;       /* samples per batch, >= 1 */
  bool shuffle;    /* a fresh permutation each epoch (else the stored order) */
  bool drop_last;  /* drop an incomplete last batch (else it comes with fewer samples) */
  uint64_t seed;   /* shuffling and augmentation: the same seed gives the same batches */
  float mean, std; /* x = (byte / 255 - mean) / std; std > 0 */
  int crop_pad;    /* > 0: zero-pad by this on each side, then a random H x W crop */
  bool hflip;      /* flip each image left-right with probability 1/2 */
  int limit;       /* > 0: use only the first `limit` samples */
  int prefetch;    /* batches a background thread prepares ahead; 0: made in next() */
} data_loader_config;

/* batch 64, shuffle, keep the last batch, seed 0, mean 0, std 1 (x in [0, 1]), no
 * augmentation, all samples, prefetch 2. Can't fail. */
data_loader_config data_loader_defaults(void);

typedef struct data_batch {
  const float *x;        /* (n, C, H, W); owned by the loader, valid until the next call */
  const int32_t *labels; /* (n) */
  const int32_t *index;  /* (n) the samples' indices in the dataset */
  int n;
  long epoch; /* 0-based */
  long step;  /* batch number within the epoch, 0-based */
} data_batch;

typedef struct data_loader data_loader;

/* A loader over ds (borrowed: it must outlive the loader, unchanged). With prefetch >
 * 0 it starts a thread that fills prefetch + 1 buffers allocated here, so batches cost
 * no allocation afterwards. Epochs follow one another without end; the batches of one
 * epoch hold every sample (of the first `limit`) exactly once (drop_last aside). Caller
 * owns the result; NULL on error (bad config, out of memory, no thread). */
data_loader *data_loader_create(const data_set *ds, const data_loader_config *cfg,
                                shoal_error *err);
/* Stops the thread and frees the buffers; NULL is fine. */
void data_loader_destroy(data_loader *ld);
/* Batches per epoch. */
long data_loader_batches(const data_loader *ld);
/* The next batch into *b; its arrays stay valid until the next call (or destroy).
 * Waits for the background thread when it is behind. Returns 0. */
int data_loader_next(data_loader *ld, data_batch *b, shoal_error *err);
/* Seconds next() spent waiting for the thread, in total (0 without a thread): how
 * often the trainer was starved. */
double data_loader_wait_s(const data_loader *ld);

/* Normalises n bytes into floats as the loader does: (byte / 255 - mean) / std. */
void data_normalize(float *x, const uint8_t *u, size_t n, float mean, float std);

#ifdef __cplusplus
}
#endif
#endif
