/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_sample_batch.c — the learner's hot-path reader of untrusted bytes:
 * rpc_wire_read (SampleBatch in place) and rpc__validate (spec check, decompression,
 * frame-stack rebuild, NaN and bool checks) against a spec with every kind of column.
 * Properties: an accepted batch has exactly n items of the spec's shape in every
 * column, every byte of it readable, floats finite and bools 0/1; validating the same
 * batch again with the stream's reused scratch gives the same bytes.
 */
#include <math.h>
#include <string.h>

#include "rpc/internal.h"
#include "tests/fuzz/fuzz.h"

static const rpc_spec spec = {
    .run_id = "fuzz-run",
    .max_items = 64,
    .ncols = 6,
    .cols = {
        {.name = "obs", .dtype = RPC_F32, .ndim = 1, .shape = {4}},
        {.name = "action", .dtype = RPC_I32, .ndim = 0},
        {.name = "done", .dtype = RPC_BOOL, .ndim = 0},
        {.name = "frames", .dtype = RPC_U8, .ndim = 3, .shape = {4, 8, 8}, .frame_stack = true},
        {.name = "prio", .dtype = RPC_F16, .ndim = 1, .shape = {2}},
        {.name = "ret", .dtype = RPC_F64, .ndim = 2, .shape = {2, 3}, .allow_nonfinite = true},
    }};

static unsigned sum_bytes(const uint8_t *p, size_t n) {
  unsigned s = 0;
  for (size_t i = 0; i < n; i++) s = s * 31u + p[i];
  return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rpc_wire_batch w;
  shoal_error err = {0};
  if (rpc_wire_read(data, size, &w, &err)) {
    FUZZ_CHECK(err.msg[0]);
    return 0;
  }
  FUZZ_CHECK(w.ncols >= 0 && w.ncols <= RPC_MAX_COLUMNS);
  for (int k = 0; k < w.ncols; k++) {
    const rpc_wire_column *c = &w.cols[k];
    FUZZ_CHECK(c->ndim >= 0 && c->ndim <= RPC_MAX_DIMS);
    /* Pointers the reader hands out lie inside the message. */
    if (c->data_len) FUZZ_CHECK(c->data >= data && c->data + c->data_len <= data + size);
    if (c->name_len)
      FUZZ_CHECK((const uint8_t *)c->name >= data &&
                 (const uint8_t *)c->name + c->name_len <= data + size);
    if (c->index_len) FUZZ_CHECK(c->index >= data && c->index + c->index_len <= data + size);
  }
  rpc__scratch scratch;
  memset(&scratch, 0, sizeof scratch);
  rpc_batch b;
  int rc = rpc__validate(&spec, &w, &scratch, &b, &err);
  if (rc) {
    FUZZ_CHECK(rc < 0 && err.msg[0]);
  } else {
    FUZZ_CHECK(b.n >= 1 && b.n <= spec.max_items && b.ncols == spec.ncols);
    unsigned sums[RPC_MAX_COLUMNS];
    for (int i = 0; i < b.ncols; i++) {
      const rpc_column *c = &b.cols[i];
      size_t item = rpc_column_item_bytes(&spec.cols[i]);
      FUZZ_CHECK(c->bytes == (size_t)b.n * item && c->data);
      FUZZ_CHECK((uintptr_t)c->data % rpc_dtype_size(c->dtype) == 0);
      sums[i] = sum_bytes(c->data, c->bytes); /* every byte readable (ASan) */
      size_t cnt = c->bytes / rpc_dtype_size(c->dtype);
      if (c->dtype == RPC_F32)
        for (size_t e = 0; e < cnt; e++) FUZZ_CHECK(isfinite(((const float *)c->data)[e]));
      if (c->dtype == RPC_F16)
        for (size_t e = 0; e < cnt; e++)
          FUZZ_CHECK((((const uint16_t *)c->data)[e] & 0x7c00u) != 0x7c00u);
      if (c->dtype == RPC_BOOL)
        for (size_t e = 0; e < cnt; e++) FUZZ_CHECK(((const uint8_t *)c->data)[e] <= 1);
    }
    /* The server reuses a stream's scratch for its next message. */
    rpc_batch b2;
    FUZZ_CHECK(rpc__validate(&spec, &w, &scratch, &b2, &err) == 0);
    for (int i = 0; i < b2.ncols; i++)
      FUZZ_CHECK(b2.cols[i].bytes == b.cols[i].bytes &&
                 sum_bytes(b2.cols[i].data, b2.cols[i].bytes) == sums[i]);
  }
  rpc__scratch_free(&scratch);
  return 0;
}
