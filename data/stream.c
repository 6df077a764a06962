/* SPDX-License-Identifier: Apache-2.0 */
/*
 * data/stream.c — minibatches of a dataset kept in the store, with memory bounded.
 *
 * Loads are numbered L = 0, 1, ... over all epochs: load L reads chunk perm_e[L mod C]
 * of epoch e = L / C (C chunks; perm_e a seeded permutation, or the identity without
 * shuffling) into slot L mod S, S = window + prefetch. The reading thread may run S
 * loads ahead of what the trainer has released; the trainer takes a window of up to
 * `window` consecutive loads of one epoch, shuffles the references to all their
 * records, hands them out, and releases the window's slots when it moves on. So
 * memory is S chunks whatever the dataset's size, every record comes once per epoch,
 * and the random draws depend only on the seed and the load numbers, not on timing.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "store/store.h"

struct data_stream {
  store *st;
  store_dataset_info info;
  data_stream_config cfg;
  int C, H, W;
  size_t img_off, img_bytes, lab_off;
  int lab_dtype; /* 0: no labels */
  uint32_t nchunks, chunk_records;
  int S, window;
  size_t chunk_bytes;
  uint8_t *slots;       /* (S, chunk_bytes) */
  uint32_t *slot_n;     /* (S) records in each slot */
  uint32_t *slot_chunk; /* (S) which chunk each slot holds */

  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
  int started;
  int stop;
  uint64_t loaded;   /* loads finished by the thread */
  uint64_t released; /* loads the trainer is done with */
  int fail;          /* the thread's error code, 0 while fine */
  shoal_error fail_err;
  uint32_t *perm; /* (C) the thread's chunk order for its current epoch */
  uint64_t perm_epoch;

  /* The trainer's side. */
  uint64_t next_load; /* first load of the next window */
  uint64_t win_first;
  int win_n;
  uint32_t *order; /* (window * chunk_records) j * chunk_records + i: record i of window slot j */
  size_t order_n, order_pos;
  uint64_t ep_done; /* records handed out (or skipped) this epoch */
  long epoch, step;
  float *x;
  int32_t *labels, *index;
  float lut[256]; /* byte -> normalised value */
  shoal_rng aug;  /* crop and flip draws, in batch order */
  double wait_s;
  size_t memory;
};

data_stream_config data_stream_defaults(void) {
  data_stream_config c = {0};
  c.batch = 64;
  c.shuffle = true;
  c.std = 1.0f;
  c.window_chunks = 4;
  c.prefetch_chunks = 2;
  c.image_field = "images";
  c.label_field = "labels";
  return c;
}

/* splitmix64: decorrelates the seeds of the per-epoch and per-window generators. */
static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void chunk_order(data_stream *ds, uint64_t epoch) {
  for (uint32_t i = 0; i < ds->nchunks; i++) ds->perm[i] = i;
  if (ds->cfg.shuffle) {
    shoal_rng r;
    shoal_rng_seed(&r, mix(ds->cfg.seed, epoch * 2));
    for (uint32_t i = ds->nchunks; i > 1; i--) {
      uint32_t j = (uint32_t)shoal_rng_below(&r, i), t = ds->perm[i - 1];
      ds->perm[i - 1] = ds->perm[j], ds->perm[j] = t;
    }
  }
  ds->perm_epoch = epoch;
}

static void *reader(void *arg) {
  shoal_thread_name("shoal-data-read");
  data_stream *ds = arg;
  int have_perm = 0;
  for (;;) {
    pthread_mutex_lock(&ds->mu);
    while (!ds->stop && ds->loaded - ds->released >= (uint64_t)ds->S)
      pthread_cond_wait(&ds->cv, &ds->mu);
    uint64_t L = ds->loaded;
    int stop = ds->stop;
    pthread_mutex_unlock(&ds->mu);
    if (stop) break;
    uint64_t e = L / ds->nchunks;
    if (!have_perm || e != ds->perm_epoch) chunk_order(ds, e), have_perm = 1;
    uint32_t chunk = ds->perm[L % ds->nchunks];
    size_t s = (size_t)(L % (uint64_t)ds->S);
    uint32_t n = 0;
    shoal_error err = {0};
    /* Slot s is free: the trainer released load L - S before loaded - released < S held. */
    int rc = store_dataset_chunk_read(ds->st, &ds->info, chunk, ds->slots + s * ds->chunk_bytes,
                                      ds->chunk_bytes, &n, &err);
    pthread_mutex_lock(&ds->mu);
    if (rc) {
      ds->fail = rc;
      ds->fail_err = err;
    } else {
      ds->slot_n[s] = n;
      ds->slot_chunk[s] = chunk;
      ds->loaded = L + 1;
    }
    pthread_cond_broadcast(&ds->cv);
    pthread_mutex_unlock(&ds->mu);
    if (rc) break;
  }
  return NULL;
}

static int is_int_dtype(int dt) {
  return dt == STORE_DTYPE_U8 || dt == STORE_DTYPE_I8 || dt == STORE_DTYPE_I16 ||
         dt == STORE_DTYPE_I32 || dt == STORE_DTYPE_I64;
}

static void *track(data_stream *ds, size_t n) {
  ds->memory += n;
  return calloc(1, n ? n : 1);
}

int data_stream_open(data_stream **out, store *st, const char *name, const data_stream_config *cfg,
                     shoal_error *err) {
  if (!out || !st || !name || !cfg)
    return shoal_error_set(err, SHOAL_EINVAL, "data_stream_open: NULL argument");
  if (cfg->batch < 1 || !(cfg->std > 0) || cfg->window_chunks < 1 || cfg->prefetch_chunks < 0 ||
      cfg->window_chunks > 4096 || cfg->prefetch_chunks > 4096 || cfg->crop_pad < 0)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "data: dataset '%s': bad stream config (batch %d >= 1, std %g > 0, "
                           "window %d >= 1, prefetch %d >= 0)",
                           name, cfg->batch, (double)cfg->std, cfg->window_chunks,
                           cfg->prefetch_chunks);
  data_stream *ds = calloc(1, sizeof *ds);
  if (!ds) return shoal_error_set(err, SHOAL_ENOMEM, "data: out of memory");
  ds->st = st;
  ds->cfg = *cfg;
  ds->memory = sizeof *ds;
  int rc = store_dataset_info_get(st, name, &ds->info, err);
  if (rc) {
    free(ds);
    return rc;
  }
  const char *imf = cfg->image_field ? cfg->image_field : "images";
  const char *lbf = cfg->label_field ? cfg->label_field : "labels";
  const store_dataset_field *fi = store_dataset_field_find(&ds->info, imf);
  const store_dataset_field *fl = lbf[0] ? store_dataset_field_find(&ds->info, lbf) : NULL;
  if (!fi || fi->dtype != STORE_DTYPE_U8 || fi->ndim < 2 || fi->ndim > 3) {
    rc = shoal_error_set(err, SHOAL_EINVAL,
                         "data: dataset '%s' has no image field '%s' of u8 with shape (H, W) or "
                         "(C, H, W)",
                         name, imf);
  } else if (lbf[0] && (!fl || !is_int_dtype(fl->dtype) || fl->ndim != 0)) {
    rc = shoal_error_set(err, SHOAL_EINVAL,
                         "data: dataset '%s' has no scalar integer label field '%s'", name, lbf);
  } else if (ds->info.records > INT32_MAX) {
    rc = shoal_error_set(err, SHOAL_EINVAL, "data: dataset '%s': more than 2^31 records", name);
  } else if (cfg->crop_pad > fi->shape[fi->ndim - 1] || cfg->crop_pad > fi->shape[fi->ndim - 2]) {
    rc = shoal_error_set(err, SHOAL_EINVAL, "data: dataset '%s': crop_pad %d exceeds the image",
                         name, cfg->crop_pad);
  }
  if (rc) {
    store_dataset_info_clear(&ds->info);
    free(ds);
    return rc;
  }
  ds->C = fi->ndim == 3 ? (int)fi->shape[0] : 1;
  ds->H = (int)fi->shape[fi->ndim - 2];
  ds->W = (int)fi->shape[fi->ndim - 1];
  ds->img_off = fi->offset, ds->img_bytes = fi->bytes;
  if (fl) ds->lab_off = fl->offset, ds->lab_dtype = fl->dtype;
  for (int v = 0; v < 256; v++) ds->lut[v] = ((float)v / 255.0f - cfg->mean) / cfg->std;
  shoal_rng_seed(&ds->aug, mix(cfg->seed, UINT64_MAX));
  ds->nchunks = ds->info.chunks;
  ds->chunk_records = ds->info.chunk_records;
  ds->window = cfg->window_chunks < (int)ds->nchunks ? cfg->window_chunks : (int)ds->nchunks;
  ds->S = ds->window + cfg->prefetch_chunks;
  ds->chunk_bytes = (size_t)ds->chunk_records * ds->info.record_bytes;
  ds->slots = track(ds, (size_t)ds->S * ds->chunk_bytes);
  ds->slot_n = track(ds, (size_t)ds->S * sizeof *ds->slot_n);
  ds->slot_chunk = track(ds, (size_t)ds->S * sizeof *ds->slot_chunk);
  ds->perm = track(ds, (size_t)ds->nchunks * sizeof *ds->perm);
  ds->order = track(ds, (size_t)ds->window * ds->chunk_records * sizeof *ds->order);
  ds->x = track(ds, (size_t)cfg->batch * ds->img_bytes * sizeof(float));
  ds->labels = track(ds, (size_t)cfg->batch * sizeof(int32_t));
  ds->index = track(ds, (size_t)cfg->batch * sizeof(int32_t));
  if (!ds->slots || !ds->slot_n || !ds->slot_chunk || !ds->perm || !ds->order || !ds->x ||
      !ds->labels || !ds->index) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "data: dataset '%s': out of memory for %zu bytes", name,
                         ds->memory);
    goto fail;
  }
  pthread_mutex_init(&ds->mu, NULL);
  pthread_cond_init(&ds->cv, NULL);
  if (pthread_create(&ds->th, NULL, reader, ds) != 0) {
    pthread_cond_destroy(&ds->cv);
    pthread_mutex_destroy(&ds->mu);
    rc = shoal_error_set(err, SHOAL_EIO, "data: dataset '%s': cannot start a thread", name);
    goto fail;
  }
  ds->started = 1;
  *out = ds;
  return 0;
fail:
  data_stream_destroy(ds);
  return rc;
}

void data_stream_destroy(data_stream *ds) {
  if (!ds) return;
  if (ds->started) {
    pthread_mutex_lock(&ds->mu);
    ds->stop = 1;
    pthread_cond_broadcast(&ds->cv);
    pthread_mutex_unlock(&ds->mu);
    pthread_join(ds->th, NULL);
    pthread_cond_destroy(&ds->cv);
    pthread_mutex_destroy(&ds->mu);
  }
  free(ds->slots), free(ds->slot_n), free(ds->slot_chunk), free(ds->perm), free(ds->order);
  free(ds->x), free(ds->labels), free(ds->index);
  store_dataset_info_clear(&ds->info);
  free(ds);
}

long data_stream_batches(const data_stream *ds) {
  uint64_t n = ds->info.records, b = (uint64_t)ds->cfg.batch;
  return (long)(ds->cfg.drop_last ? n / b : (n + b - 1) / b);
}
uint64_t data_stream_records(const data_stream *ds) { return ds->info.records; }
void data_stream_shape(const data_stream *ds, int *C, int *H, int *W) {
  *C = ds->C, *H = ds->H, *W = ds->W;
}
double data_stream_wait_s(const data_stream *ds) { return ds->wait_s; }
size_t data_stream_memory(const data_stream *ds) { return ds->memory; }

/* Releases the window in use and takes the next one: waits for its loads, then lays
 * out (and shuffles) references to its records. */
static int next_window(data_stream *ds, shoal_error *err) {
  uint64_t pos = ds->next_load % ds->nchunks;
  int wn = ds->window;
  if (pos + (uint64_t)wn > ds->nchunks)
    wn = (int)(ds->nchunks - pos); /* windows stay in one epoch */
  uint64_t need = ds->next_load + (uint64_t)wn;
  pthread_mutex_lock(&ds->mu);
  if (ds->win_n) {
    ds->released = ds->win_first + (uint64_t)ds->win_n;
    pthread_cond_broadcast(&ds->cv);
  }
  double t0 = 0;
  while (ds->loaded < need && !ds->fail) {
    if (t0 == 0) t0 = shoal_now_s();
    pthread_cond_wait(&ds->cv, &ds->mu);
  }
  int fail = ds->loaded < need ? ds->fail : 0;
  if (fail) shoal_error_set(err, fail, "%s", ds->fail_err.msg);
  pthread_mutex_unlock(&ds->mu);
  if (t0 > 0) ds->wait_s += shoal_now_s() - t0;
  ds->win_n = 0;
  if (fail) return fail;
  size_t k = 0;
  for (int j = 0; j < wn; j++) {
    size_t s = (size_t)((ds->next_load + (uint64_t)j) % (uint64_t)ds->S);
    for (uint32_t i = 0; i < ds->slot_n[s]; i++)
      ds->order[k++] = (uint32_t)j * ds->chunk_records + i;
  }
  if (ds->cfg.shuffle) {
    shoal_rng r;
    shoal_rng_seed(&r, mix(ds->cfg.seed, ds->next_load * 2 + 1));
    for (size_t i = k; i > 1; i--) {
      size_t j = (size_t)shoal_rng_below(&r, i);
      uint32_t t = ds->order[i - 1];
      ds->order[i - 1] = ds->order[j], ds->order[j] = t;
    }
  }
  ds->win_first = ds->next_load;
  ds->win_n = wn;
  ds->next_load = need;
  ds->order_n = k, ds->order_pos = 0;
  return 0;
}

/* Writes one image (C, H, W) into dst, normalised, with the configured crop and flip:
 * output pixel (y, x) reads the source at (y + oy, x' + ox), x' = W-1-x when flipped,
 * and the zero padding outside it (as data_loader and torchvision's RandomCrop then
 * RandomHorizontalFlip). */
static void put_image(data_stream *ds, float *dst, const uint8_t *u) {
  int C = ds->C, H = ds->H, W = ds->W, pad = ds->cfg.crop_pad, oy = 0, ox = 0, flip = 0;
  if (pad > 0) {
    oy = (int)shoal_rng_below(&ds->aug, (uint64_t)(2 * pad + 1)) - pad;
    ox = (int)shoal_rng_below(&ds->aug, (uint64_t)(2 * pad + 1)) - pad;
  }
  if (ds->cfg.hflip) flip = (int)(shoal_rng_next(&ds->aug) >> 63);
  if (!oy && !ox && !flip) {
    for (size_t i = 0, n = (size_t)C * H * W; i < n; i++) dst[i] = ds->lut[u[i]];
    return;
  }
  for (int c = 0; c < C; c++)
    for (int y = 0; y < H; y++) {
      int sy = y + oy;
      float *row = dst + ((size_t)c * H + y) * W;
      for (int x = 0; x < W; x++) {
        int sx = (flip ? W - 1 - x : x) + ox;
        row[x] = sy >= 0 && sy < H && sx >= 0 && sx < W ? ds->lut[u[((size_t)c * H + sy) * W + sx]]
                                                        : ds->lut[0];
      }
    }
}

static int32_t label_at(const uint8_t *p, int dt) {
  switch (dt) {
    case STORE_DTYPE_U8: return p[0];
    case STORE_DTYPE_I8: return (int8_t)p[0];
    case STORE_DTYPE_I16: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
    case STORE_DTYPE_I32:
      return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                       (uint32_t)p[3] << 24);
    case STORE_DTYPE_I64: {
      uint64_t v = 0;
      for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
      return (int32_t)(int64_t)v;
    }
    default: return 0;
  }
}

int data_stream_next(data_stream *ds, data_batch *b, shoal_error *err) {
  if (!ds || !b) return shoal_error_set(err, SHOAL_EINVAL, "data_stream_next: NULL argument");
  uint64_t N = ds->info.records;
  uint64_t want =
      N - ds->ep_done < (uint64_t)ds->cfg.batch ? N - ds->ep_done : (uint64_t)ds->cfg.batch;
  if (want < (uint64_t)ds->cfg.batch && ds->cfg.drop_last) {
    /* The epoch's tail is short of a batch: pass over it (its chunks are still read,
     * so the next epoch starts where it should). */
    while (ds->ep_done < N) {
      if (ds->order_pos == ds->order_n) {
        int rc = next_window(ds, err);
        if (rc) return rc;
      }
      size_t take = ds->order_n - ds->order_pos;
      if (take > N - ds->ep_done) take = (size_t)(N - ds->ep_done);
      ds->order_pos += take, ds->ep_done += take;
    }
    ds->epoch++, ds->step = 0, ds->ep_done = 0;
    want = N < (uint64_t)ds->cfg.batch ? N : (uint64_t)ds->cfg.batch;
  }
  size_t img = ds->img_bytes, rb = ds->info.record_bytes;
  for (uint64_t k = 0; k < want; k++) {
    if (ds->order_pos == ds->order_n) {
      int rc = next_window(ds, err);
      if (rc) return rc;
    }
    uint32_t ref = ds->order[ds->order_pos++];
    uint32_t j = ref / ds->chunk_records, i = ref % ds->chunk_records;
    size_t s = (size_t)((ds->win_first + j) % (uint64_t)ds->S);
    const uint8_t *rec = ds->slots + s * ds->chunk_bytes + (size_t)i * rb;
    put_image(ds, ds->x + k * img, rec + ds->img_off);
    ds->labels[k] = ds->lab_dtype ? label_at(rec + ds->lab_off, ds->lab_dtype) : 0;
    ds->index[k] = (int32_t)((uint64_t)ds->slot_chunk[s] * ds->chunk_records + i);
  }
  b->x = ds->x, b->labels = ds->labels, b->index = ds->index;
  b->n = (int)want;
  b->epoch = ds->epoch, b->step = ds->step++;
  ds->ep_done += want;
  if (ds->ep_done == N) ds->epoch++, ds->step = 0, ds->ep_done = 0;
  return 0;
}
