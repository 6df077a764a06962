/* SPDX-License-Identifier: Apache-2.0 */
/*
 * data/data.c — the IDX reader, the in-memory dataset and the minibatch loader.
 *
 * The loader's background thread and the trainer share a ring of prefetch + 1 batch
 * buffers: the trainer holds the one it was last given, the thread fills the others
 * in order, so in-use slots are always contiguous in the ring and no buffer is
 * allocated after create. The shuffle and augmentation draws happen in one thread in
 * batch order, so a seed gives the same batches with or without the thread.
 */
#define _POSIX_C_SOURCE 200809L

#include "data/data.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- IDX ------------------------------------------------------------------------ */

/* Reads exactly n bytes; returns the count read (< n at end of file) or -1 (error). */
static long gz_read_full(gzFile f, uint8_t *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t want = n - got > (1u << 30) ? (1u << 30) : n - got;
    int r = gzread(f, buf + got, (unsigned)want);
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (long)got;
}

static int gz_fail(gzFile f, const char *path, const char *what, shoal_error *err) {
  int zerr = 0;
  const char *m = gzerror(f, &zerr);
  return shoal_error_set(err, SHOAL_EFORMAT, "data: %s: %s: corrupt gzip stream (%s)", path, what,
                         m && *m ? m : "zlib error");
}

int data_idx_read(const char *path, data_idx *out, shoal_error *err) {
  if (!path || !out) return shoal_error_set(err, SHOAL_EINVAL, "data_idx_read: NULL argument");
  FILE *probe = fopen(path, "rb");
  if (!probe) {
    int e = errno;
    return shoal_error_set(err, e == ENOENT ? SHOAL_ENOENT : SHOAL_EIO, "data: %s: cannot open: %s",
                           path, strerror(e));
  }
  fclose(probe);
  gzFile f = gzopen(path, "rb");
  if (!f) return shoal_error_set(err, SHOAL_EIO, "data: %s: cannot open with zlib", path);
  int rc = 0;
  uint8_t *data = NULL;
  uint8_t hdr[4 + 4 * 4];
  long got = gz_read_full(f, hdr, 4);
  if (got < 0) {
    rc = gz_fail(f, path, "header", err);
    goto done;
  }
  if (got < 4) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "data: %s: truncated: %ld bytes, shorter than the 4-byte IDX magic", path,
                         got);
    goto done;
  }
  if (hdr[0] != 0 || hdr[1] != 0) {
    rc =
        shoal_error_set(err, SHOAL_EFORMAT,
                        "data: %s: not an IDX file: magic starts 0x%02x 0x%02x, expected 0x00 0x00",
                        path, hdr[0], hdr[1]);
    goto done;
  }
  if (hdr[2] != 0x08) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "data: %s: IDX element type 0x%02x is not supported (only 0x08, "
                         "unsigned byte)",
                         path, hdr[2]);
    goto done;
  }
  int ndim = hdr[3];
  if (ndim < 1 || ndim > 4) {
    rc = shoal_error_set(err, SHOAL_EFORMAT, "data: %s: IDX with %d dimensions (1 to 4 supported)",
                         path, ndim);
    goto done;
  }
  got = gz_read_full(f, hdr + 4, (size_t)ndim * 4);
  if (got < 0) {
    rc = gz_fail(f, path, "header", err);
    goto done;
  }
  if (got < ndim * 4) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "data: %s: truncated in the header (%d sizes expected)", path, ndim);
    goto done;
  }
  data_idx r = {.ndim = ndim, .count = 1};
  for (int i = 0; i < ndim; i++) {
    const uint8_t *p = hdr + 4 + 4 * i;
    r.dim[i] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    if (r.dim[i] == 0 || r.count > (size_t)INT_MAX / r.dim[i]) {
      rc = shoal_error_set(err, SHOAL_EFORMAT, "data: %s: IDX size %u of dimension %d is %s", path,
                           r.dim[i], i, r.dim[i] == 0 ? "zero" : "too large");
      goto done;
    }
    r.count *= r.dim[i];
  }
  data = malloc(r.count);
  if (!data) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "data: %s: out of memory for %zu bytes", path, r.count);
    goto done;
  }
  got = gz_read_full(f, data, r.count);
  if (got < 0) {
    rc = gz_fail(f, path, "data", err);
    goto done;
  }
  if ((size_t)got < r.count) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "data: %s: truncated: the header promises %zu data bytes, the file "
                         "has %ld",
                         path, r.count, got);
    goto done;
  }
  uint8_t extra;
  got = gz_read_full(f, &extra, 1);
  if (got != 0) {
    rc = got < 0 ? gz_fail(f, path, "after the data", err)
                 : shoal_error_set(err, SHOAL_EFORMAT,
                                   "data: %s: trailing bytes after the %zu data bytes the header "
                                   "promises",
                                   path, r.count);
    goto done;
  }
  r.data = data;
  data = NULL;
  *out = r;
done:
  free(data);
  gzclose(f);
  return rc;
}

void data_idx_free(data_idx *idx) {
  if (!idx) return;
  free(idx->data);
  memset(idx, 0, sizeof *idx);
}

/* ---- datasets ------------------------------------------------------------------- */

struct data_set {
  int n, C, H, W;
  uint8_t *images; /* (n, C, H, W) */
  int32_t *labels; /* (n) */
  int classes;
};

int data_set_create(const uint8_t *images, const int32_t *labels, int n, int C, int H, int W,
                    data_set **out, shoal_error *err) {
  if (!images || !out || n < 1 || C < 1 || H < 1 || W < 1 || (size_t)C * H * W > (1u << 24))
    return shoal_error_set(err, SHOAL_EINVAL, "data_set_create: bad arguments (n %d, %dx%dx%d)", n,
                           C, H, W);
  for (int i = 0; labels && i < n; i++)
    if (labels[i] < 0)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "data_set_create: label %d of sample %d is negative", labels[i], i);
  size_t per = (size_t)C * H * W;
  data_set *ds = calloc(1, sizeof *ds);
  if (ds) ds->images = malloc((size_t)n * per), ds->labels = calloc((size_t)n, sizeof(int32_t));
  if (!ds || !ds->images || !ds->labels) {
    data_set_destroy(ds);
    return shoal_error_set(err, SHOAL_ENOMEM, "data_set_create: out of memory for %d samples", n);
  }
  ds->n = n, ds->C = C, ds->H = H, ds->W = W;
  memcpy(ds->images, images, (size_t)n * per);
  if (labels) memcpy(ds->labels, labels, (size_t)n * sizeof(int32_t));
  for (int i = 0; i < n; i++)
    if (ds->labels[i] + 1 > ds->classes) ds->classes = ds->labels[i] + 1;
  *out = ds;
  return 0;
}

int data_set_load_idx(const char *images_path, const char *labels_path, data_set **out,
                      shoal_error *err) {
  if (!images_path || !labels_path || !out)
    return shoal_error_set(err, SHOAL_EINVAL, "data_set_load_idx: NULL argument");
  data_idx im = {0}, lb = {0};
  data_set *ds = NULL;
  int32_t *labels = NULL;
  int rc = data_idx_read(images_path, &im, err);
  if (rc) goto done;
  rc = data_idx_read(labels_path, &lb, err);
  if (rc) goto done;
  if (im.ndim != 3) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "data: %s: images must be 3-d (N, H, W), the file has %d dimensions",
                         images_path, im.ndim);
    goto done;
  }
  if (lb.ndim != 1) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "data: %s: labels must be 1-d (N), the file has %d dimensions",
                         labels_path, lb.ndim);
    goto done;
  }
  if (im.dim[0] != lb.dim[0]) {
    rc = shoal_error_set(err, SHOAL_ESHAPE, "data: %s has %u images but %s has %u labels",
                         images_path, im.dim[0], labels_path, lb.dim[0]);
    goto done;
  }
  labels = malloc(lb.count * sizeof *labels);
  if (!labels) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "data: out of memory for labels");
    goto done;
  }
  for (size_t i = 0; i < lb.count; i++) labels[i] = lb.data[i];
  rc =
      data_set_create(im.data, labels, (int)im.dim[0], 1, (int)im.dim[1], (int)im.dim[2], &ds, err);
  if (!rc) *out = ds;
done:
  free(labels);
  data_idx_free(&im);
  data_idx_free(&lb);
  return rc;
}

const char *data_fashion_mnist_dir(void) { return "/usr/share/datasets/fashion-mnist"; }

const char *data_fashion_mnist_class(int c) {
  static const char *names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                  "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return c >= 0 && c < 10 ? names[c] : "?";
}

int data_fashion_mnist_load(const char *dir, bool train, data_set **out, shoal_error *err) {
  if (!dir) dir = getenv("SHOAL_FASHION_MNIST");
  if (!dir || !*dir) dir = data_fashion_mnist_dir();
  const char *split = train ? "train" : "t10k";
  char im[4096], lb[4096];
  snprintf(im, sizeof im, "%s/%s-images-idx3-ubyte.gz", dir, split);
  snprintf(lb, sizeof lb, "%s/%s-labels-idx1-ubyte.gz", dir, split);
  data_set *ds = NULL;
  int rc = data_set_load_idx(im, lb, &ds, err);
  if (rc) return rc;
  if (ds->H != 28 || ds->W != 28 || ds->classes > 10) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "data: %s: Fashion-MNIST images are 28x28 with labels 0-9; found %dx%d "
                         "and labels up to %d",
                         im, ds->H, ds->W, ds->classes - 1);
    data_set_destroy(ds);
    return rc;
  }
  *out = ds;
  return 0;
}

void data_set_destroy(data_set *ds) {
  if (!ds) return;
  free(ds->images);
  free(ds->labels);
  free(ds);
}

int data_set_count(const data_set *ds) { return ds->n; }

void data_set_shape(const data_set *ds, int *C, int *H, int *W) {
  if (C) *C = ds->C;
  if (H) *H = ds->H;
  if (W) *W = ds->W;
}

int data_set_classes(const data_set *ds) { return ds->classes; }

const uint8_t *data_set_image(const data_set *ds, int i) {
  SHOAL_ASSERT(i >= 0 && i < ds->n);
  return ds->images + (size_t)i * ds->C * ds->H * ds->W;
}

int32_t data_set_label(const data_set *ds, int i) {
  SHOAL_ASSERT(i >= 0 && i < ds->n);
  return ds->labels[i];
}

void data_set_stats(const data_set *ds, double *mean, double *std) {
  size_t n = (size_t)ds->n * ds->C * ds->H * ds->W;
  double hist[256] = {0}, s = 0, s2 = 0;
  for (size_t i = 0; i < n; i++) hist[ds->images[i]] += 1;
  for (int v = 0; v < 256; v++) s += hist[v] * v / 255.0, s2 += hist[v] * (v / 255.0) * (v / 255.0);
  double m = s / (double)n;
  if (mean) *mean = m;
  if (std) *std = sqrt(fmax(s2 / (double)n - m * m, 0));
}

void data_normalize(float *x, const uint8_t *u, size_t n, float mean, float std) {
  for (size_t i = 0; i < n; i++) x[i] = ((float)u[i] / 255.0f - mean) / std;
}

/* ---- the loader ----------------------------------------------------------------- */

typedef struct slot {
  float *x;
  int32_t *labels, *index;
  int n;
  long epoch, step;
} slot;

struct data_loader {
  const data_set *ds;
  data_loader_config cfg;
  int N;            /* samples used (limit applied) */
  long batches;     /* per epoch */
  int S;            /* slots */
  slot *slots;      /* (S) */
  int32_t *perm;    /* (N) this epoch's order */
  float lut[256];   /* byte -> normalised value */
  shoal_rng rng;    /* producer's: shuffles and augmentation draws */
  long epoch, step; /* producer's position */
  /* shared with the thread, under mu */
  pthread_mutex_t mu;
  pthread_cond_t can_fill, can_take;
  int rd, ready, held;
  bool stop, threaded;
  pthread_t thread;
  double wait_s;
};

data_loader_config data_loader_defaults(void) {
  return (data_loader_config){.batch = 64, .shuffle = true, .mean = 0, .std = 1, .prefetch = 2};
}

/* Writes sample `src` into dst (C, H, W) with the configured crop and flip. */
static void put_sample(data_loader *ld, float *dst, int src) {
  const data_set *ds = ld->ds;
  int C = ds->C, H = ds->H, W = ds->W, pad = ld->cfg.crop_pad;
  const uint8_t *u = data_set_image(ds, src);
  int oy = 0, ox = 0;
  bool flip = false;
  if (pad > 0) {
    oy = (int)shoal_rng_below(&ld->rng, (uint64_t)(2 * pad + 1)) - pad;
    ox = (int)shoal_rng_below(&ld->rng, (uint64_t)(2 * pad + 1)) - pad;
  }
  if (ld->cfg.hflip) flip = shoal_rng_next(&ld->rng) >> 63;
  if (!oy && !ox && !flip) {
    for (size_t i = 0, n = (size_t)C * H * W; i < n; i++) dst[i] = ld->lut[u[i]];
    return;
  }
  /* Output pixel (y, x) reads the source at (y + oy, x' + ox), x' = W-1-x when flipped
   * (the flip applies to the crop, as torchvision's RandomCrop then RandomHorizontalFlip);
   * outside the source is the zero padding, i.e. byte 0 normalised. */
  for (int c = 0; c < C; c++)
    for (int y = 0; y < H; y++) {
      int sy = y + oy;
      float *row = dst + ((size_t)c * H + y) * W;
      for (int x = 0; x < W; x++) {
        int sx = (flip ? W - 1 - x : x) + ox;
        row[x] = sy >= 0 && sy < H && sx >= 0 && sx < W ? ld->lut[u[((size_t)c * H + sy) * W + sx]]
                                                        : ld->lut[0];
      }
    }
}

static void fill_slot(data_loader *ld, slot *s) {
  if (ld->step == 0 && ld->cfg.shuffle)
    for (int i = ld->N - 1; i > 0; i--) { /* Fisher-Yates */
      int j = (int)shoal_rng_below(&ld->rng, (uint64_t)i + 1);
      int32_t t = ld->perm[i];
      ld->perm[i] = ld->perm[j], ld->perm[j] = t;
    }
  long start = ld->step * ld->cfg.batch;
  int n = (int)(ld->N - start < ld->cfg.batch ? ld->N - start : ld->cfg.batch);
  size_t per = (size_t)ld->ds->C * ld->ds->H * ld->ds->W;
  for (int i = 0; i < n; i++) {
    int src = ld->perm[start + i];
    s->index[i] = src;
    s->labels[i] = data_set_label(ld->ds, src);
    put_sample(ld, s->x + (size_t)i * per, src);
  }
  s->n = n, s->epoch = ld->epoch, s->step = ld->step;
  if (++ld->step == ld->batches) ld->step = 0, ld->epoch++;
}

static void *loader_main(void *arg) {
  shoal_thread_name("shoal-data-load");
  data_loader *ld = arg;
  pthread_mutex_lock(&ld->mu);
  for (;;) {
    while (!ld->stop && ld->ready + ld->held >= ld->S) pthread_cond_wait(&ld->can_fill, &ld->mu);
    if (ld->stop) break;
    int w = (ld->rd + ld->ready) % ld->S; /* first free slot after the ready ones */
    pthread_mutex_unlock(&ld->mu);
    fill_slot(ld, &ld->slots[w]);
    pthread_mutex_lock(&ld->mu);
    ld->ready++;
    pthread_cond_signal(&ld->can_take);
  }
  pthread_mutex_unlock(&ld->mu);
  return NULL;
}

data_loader *data_loader_create(const data_set *ds, const data_loader_config *cfg,
                                shoal_error *err) {
  if (!ds || !cfg) {
    shoal_error_set(err, SHOAL_EINVAL, "data_loader_create: NULL argument");
    return NULL;
  }
  int N = cfg->limit > 0 && cfg->limit < ds->n ? cfg->limit : ds->n;
  if (cfg->batch < 1 || !(cfg->std > 0) || !isfinite(cfg->mean) || !isfinite(cfg->std) ||
      cfg->crop_pad < 0 || cfg->crop_pad > ds->H || cfg->crop_pad > ds->W || cfg->limit < 0 ||
      cfg->prefetch < 0 || cfg->prefetch > 64 || (cfg->drop_last && cfg->batch > N)) {
    shoal_error_set(
        err, SHOAL_EINVAL,
        "data_loader_create: bad config (batch %d of %d samples%s, std %g, crop_pad %d, "
        "limit %d, prefetch %d)",
        cfg->batch, N, cfg->drop_last ? " with drop_last" : "", (double)cfg->std, cfg->crop_pad,
        cfg->limit, cfg->prefetch);
    return NULL;
  }
  data_loader *ld = calloc(1, sizeof *ld);
  if (!ld) goto oom;
  ld->ds = ds, ld->cfg = *cfg, ld->N = N, ld->held = 0;
  ld->batches = cfg->drop_last ? N / cfg->batch : (N + cfg->batch - 1) / cfg->batch;
  ld->S = cfg->prefetch + 1;
  for (int v = 0; v < 256; v++) ld->lut[v] = ((float)v / 255.0f - cfg->mean) / cfg->std;
  shoal_rng_seed(&ld->rng, cfg->seed);
  ld->perm = malloc((size_t)N * sizeof *ld->perm);
  ld->slots = calloc((size_t)ld->S, sizeof *ld->slots);
  if (!ld->perm || !ld->slots) goto oom;
  for (int i = 0; i < N; i++) ld->perm[i] = i;
  size_t per = (size_t)ds->C * ds->H * ds->W;
  for (int i = 0; i < ld->S; i++) {
    slot *s = &ld->slots[i];
    s->x = malloc((size_t)cfg->batch * per * sizeof(float));
    s->labels = malloc((size_t)cfg->batch * sizeof(int32_t));
    s->index = malloc((size_t)cfg->batch * sizeof(int32_t));
    if (!s->x || !s->labels || !s->index) goto oom;
  }
  pthread_mutex_init(&ld->mu, NULL);
  pthread_cond_init(&ld->can_fill, NULL);
  pthread_cond_init(&ld->can_take, NULL);
  if (cfg->prefetch > 0) {
    int e = pthread_create(&ld->thread, NULL, loader_main, ld);
    if (e) {
      shoal_error_set(err, SHOAL_ENOMEM, "data_loader_create: cannot start the thread: %s",
                      strerror(e));
      data_loader_destroy(ld);
      return NULL;
    }
    ld->threaded = true;
  }
  return ld;
oom:
  shoal_error_set(err, SHOAL_ENOMEM, "data_loader_create: out of memory");
  if (ld) {
    for (int i = 0; ld->slots && i < ld->S; i++)
      free(ld->slots[i].x), free(ld->slots[i].labels), free(ld->slots[i].index);
    free(ld->slots), free(ld->perm), free(ld);
  }
  return NULL;
}

void data_loader_destroy(data_loader *ld) {
  if (!ld) return;
  if (ld->threaded) {
    pthread_mutex_lock(&ld->mu);
    ld->stop = true;
    pthread_cond_broadcast(&ld->can_fill);
    pthread_mutex_unlock(&ld->mu);
    pthread_join(ld->thread, NULL);
  }
  pthread_mutex_destroy(&ld->mu);
  pthread_cond_destroy(&ld->can_fill);
  pthread_cond_destroy(&ld->can_take);
  for (int i = 0; i < ld->S; i++)
    free(ld->slots[i].x), free(ld->slots[i].labels), free(ld->slots[i].index);
  free(ld->slots), free(ld->perm), free(ld);
}

long data_loader_batches(const data_loader *ld) { return ld->batches; }

double data_loader_wait_s(const data_loader *ld) { return ld->wait_s; }

int data_loader_next(data_loader *ld, data_batch *b, shoal_error *err) {
  if (!ld || !b) return shoal_error_set(err, SHOAL_EINVAL, "data_loader_next: NULL argument");
  slot *s;
  if (!ld->threaded) {
    s = &ld->slots[0];
    fill_slot(ld, s);
  } else {
    pthread_mutex_lock(&ld->mu);
    if (ld->held) { /* the caller is done with the batch it was given last */
      ld->held = 0;
      pthread_cond_signal(&ld->can_fill);
    }
    if (!ld->ready) {
      double t0 = shoal_now_s();
      while (!ld->ready) pthread_cond_wait(&ld->can_take, &ld->mu);
      ld->wait_s += shoal_now_s() - t0;
    }
    s = &ld->slots[ld->rd];
    ld->rd = (ld->rd + 1) % ld->S;
    ld->ready--, ld->held = 1;
    pthread_mutex_unlock(&ld->mu);
  }
  *b = (data_batch){.x = s->x,
                    .labels = s->labels,
                    .index = s->index,
                    .n = s->n,
                    .epoch = s->epoch,
                    .step = s->step};
  return 0;
}
