/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/safetensors.h — private: the safetensors reader and writer behind nn_model_save/load
 * and nn_optim_save/load, over a table of named tensors.
 */
#ifndef SHOAL_NN_SAFETENSORS_H
#define SHOAL_NN_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"
#include "nn/nn.h"

/* One tensor to write or to fill. Exactly one of f32 and i64 is set. */
typedef struct nn__st_tensor {
  const char *name;
  int ndim; /* 0..4; 0 is a scalar (numel 1) */
  int shape[4];
  size_t numel;
  float *f32;     /* F32 data: the source when saving, the destination when loading */
  int64_t *i64;   /* I64 data: counts (a step count), so >= 0 on load */
  bool i64_ok;    /* f32 tensors: also accept I64 within +-2^24 (torch's integer state) */
  bool half_ok;   /* f32 tensors: also accept F16 and BF16, widened exactly */
  bool trainable; /* only for messages: a parameter rather than state */
} nn__st_tensor;

/* Serialises the tensors in order, with __metadata__ from the n_meta key/value pairs
 * (meta[2i], meta[2i+1]). Caller frees *out. */
int nn__st_save_buffer(const nn__st_tensor *t, int count, const char *const *meta, int n_meta,
                       uint8_t **out, size_t *len, shoal_error *err);
/* Writes the buffer to path atomically (temporary file beside it, fsync, rename). */
int nn__st_write_file(const char *path, const uint8_t *buf, size_t len, shoal_error *err);
/* Reads a whole file; caller frees *out. */
int nn__st_read_file(const char *path, uint8_t **out, size_t *len, shoal_error *err);
/* Validates buf against the table (every tensor present once, no other, same shape, a
 * dtype that fits, offsets tiling the data, finite values) and only then fills every
 * destination. owner ("model", "optimizer") and src (the file, or "buffer") name
 * things in messages. opt (NULL: names as they are, nothing skipped) maps the file's
 * names as nn_model_load_ex documents. On error nothing is written. */
int nn__st_load_buffer(const nn__st_tensor *t, int count, const char *owner, const uint8_t *buf,
                       size_t len, const char *src, const nn_load_options *opt, shoal_error *err);

/* IEEE 754 binary16 bits -> float, exactly: every half is a float (subnormals become
 * normal floats; infinities stay infinite; a NaN stays a NaN with its sign and its
 * payload in the float mantissa's top bits). Can't fail. */
float nn__f16_to_f32(uint16_t h);
/* bfloat16 bits -> float, exactly (bfloat16 is a float's top 16 bits). Can't fail. */
float nn__bf16_to_f32(uint16_t h);

#endif
