/* SPDX-License-Identifier: Apache-2.0 */
/*
 * data/data.h — datasets for supervised and GAN work: an IDX reader (the MNIST and
 * Fashion-MNIST format, gzip-compressed or plain, through zlib), an in-memory image
 * dataset, and a loader that cuts it into shuffled, normalised, optionally augmented
 * minibatches on a background thread with a bounded prefetch, so a training loop finds
 * its next batch ready; and datasets kept in the store streamed in minibatches with
 * bounded memory (data_stream, below). Depends on common/, store/ and zlib.
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
 *     nn_model_forward(model, b.x, b.n, &y, &err);   // then the loss, backward, step
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

/* ---- datasets streamed from the store ------------------------------------------- */

/* A dataset kept in the store (store/store.h: `shoal dataset put`) read in minibatches
 * with memory bounded whatever its size: a background thread reads chunks ahead into
 * window_chunks + prefetch_chunks chunk buffers allocated at open, and nothing more is
 * held. Shuffling is two-level, as for datasets larger than memory: each epoch visits
 * the chunks in a fresh seeded order, and the records of window_chunks consecutive
 * chunks are shuffled together; every record comes exactly once per epoch. The same
 * seed gives the same batches whatever the thread's timing.
 *
 *   store *st;  store_open(&st, NULL, &err);
 *   data_stream_config sc = data_stream_defaults();
 *   sc.batch = 64;  sc.seed = 1;  sc.mean = 0.2860f;  sc.std = 0.3530f;
 *   data_stream *ds;
 *   if (data_stream_open(&ds, st, "fmnist-train", &sc, &err)) die(err.msg);
 *   for (long i = 0; i < data_stream_batches(ds); i++)
 *     data_stream_next(ds, &b, &err);       // as data_loader_next; b.index: record numbers
 *   data_stream_destroy(ds);
 *
 * The dataset needs an image field of u8 with shape (H, W) or (C, H, W) and, unless
 * label_field is "", a scalar integer label field. */
typedef struct store store;

typedef struct data_stream_config {
  int batch;               /* samples per batch, >= 1 */
  bool shuffle;            /* chunk order and records within a window (else stored order) */
  bool drop_last;          /* drop an incomplete last batch of each epoch */
  uint64_t seed;           /* the shuffle: the same seed gives the same batches */
  float mean, std;         /* x = (byte / 255 - mean) / std; std > 0 */
  int window_chunks;       /* chunks shuffled together, >= 1 */
  int prefetch_chunks;     /* chunks the thread reads ahead of the window in use, >= 0 */
  int crop_pad;            /* > 0: zero-pad by this on each side, then a random H x W crop */
  bool hflip;              /* flip each image left-right with probability 1/2 */
  const char *image_field; /* "images" */
  const char *label_field; /* "labels"; "" for none (labels are then 0) */
} data_stream_config;

/* batch 64, shuffle, keep the last batch, seed 0, mean 0, std 1, window 4, prefetch 2,
 * no augmentation (crop and flip as data_loader's, drawn from the seed in batch order),
 * fields "images" and "labels". Can't fail. */
data_stream_config data_stream_defaults(void);

typedef struct data_stream data_stream;

/* Opens dataset name of st (borrowed: it must outlive the stream) and starts the
 * reading thread. On success *out is a new stream (caller destroys it). Errors, *out
 * untouched: SHOAL_ENOENT for no such dataset, SHOAL_EINVAL for a bad config or a
 * dataset without the fields (the message names dataset and field), the store's
 * errors for a damaged manifest. A damaged chunk is reported by data_stream_next. */
int data_stream_open(data_stream **out, store *st, const char *name, const data_stream_config *cfg,
                     shoal_error *err);
/* Stops the thread and frees everything; NULL is fine. */
void data_stream_destroy(data_stream *ds);
/* Batches per epoch. */
long data_stream_batches(const data_stream *ds);
/* Records in the dataset. */
uint64_t data_stream_records(const data_stream *ds);
void data_stream_shape(const data_stream *ds, int *C, int *H, int *W); /* can't fail */
/* The next batch, as data_loader_next (b.index holds the records' numbers in the
 * dataset). Waits for the thread when it is behind. A chunk that cannot be read or
 * fails its checks is an error naming dataset and chunk (SHOAL_EFORMAT for damage);
 * the stream then only returns that error. No allocation. */
int data_stream_next(data_stream *ds, data_batch *b, shoal_error *err);
/* Seconds next() spent waiting for chunks, in total. */
double data_stream_wait_s(const data_stream *ds);
/* Bytes the stream holds (chunk buffers, the window's order, the batch), all
 * allocated at open: its memory bound. Can't fail. */
size_t data_stream_memory(const data_stream *ds);

#ifdef __cplusplus
}
#endif
#endif
