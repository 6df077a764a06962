/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_proto.c — shoal.proto messages round-trip through protoc-c, shoal's own
 * SampleBatch reader agrees with protoc-c's encoder (unknown fields included), survives
 * every truncation and random bytes, and the validator accepts what the spec allows and
 * rejects the rest with the right code.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <lz4.h>
#include <zstd.h>

#include "proto/shoal.pb-c.h"
#include "rpc/internal.h"

static uint8_t *pack(const ProtobufCMessage *m, size_t *n) {
  *n = protobuf_c_message_get_packed_size(m);
  uint8_t *b = malloc(*n ? *n : 1);
  assert_non_null(b);
  assert_int_equal(protobuf_c_message_pack(m, b), *n);
  return b;
}

static void test_roundtrip_messages(void **state) {
  size_t n;
  /* PushSummary */
  Shoal__V1__PushSummary ps = SHOAL__V1__PUSH_SUMMARY__INIT;
  ps.accepted_batches = 7;
  ps.accepted_samples = 448;
  ps.duplicate_batches = 2;
  ps.last_seq = 1ull << 40;
  uint8_t *b = pack(&ps.base, &n);
  Shoal__V1__PushSummary *ps2 = shoal__v1__push_summary__unpack(NULL, n, b);
  assert_non_null(ps2);
  assert_int_equal(ps2->accepted_batches, 7);
  assert_int_equal(ps2->accepted_samples, 448);
  assert_int_equal(ps2->duplicate_batches, 2);
  assert_int_equal(ps2->last_seq, 1ull << 40);
  shoal__v1__push_summary__free_unpacked(ps2, NULL);
  free(b);

  /* ParamsRequest */
  Shoal__V1__ParamsRequest pr = SHOAL__V1__PARAMS_REQUEST__INIT;
  pr.actor_id = 9;
  pr.run_id = "r1";
  pr.have_version = -1;
  b = pack(&pr.base, &n);
  Shoal__V1__ParamsRequest *pr2 = shoal__v1__params_request__unpack(NULL, n, b);
  assert_non_null(pr2);
  assert_int_equal(pr2->actor_id, 9);
  assert_string_equal(pr2->run_id, "r1");
  assert_int_equal(pr2->have_version, -1);
  shoal__v1__params_request__free_unpacked(pr2, NULL);
  free(b);

  /* Params with a layout table */
  float blob[10];
  for (int i = 0; i < 10; i++) blob[i] = (float)i * 0.5f;
  Shoal__V1__ParamEntry e[2] = {SHOAL__V1__PARAM_ENTRY__INIT, SHOAL__V1__PARAM_ENTRY__INIT};
  int64_t s0[2] = {2, 3}, s1[1] = {4};
  e[0].name = "fc.weight";
  e[0].n_shape = 2;
  e[0].shape = s0;
  e[0].offset = 0;
  e[0].numel = 6;
  e[1].name = "fc.bias";
  e[1].n_shape = 1;
  e[1].shape = s1;
  e[1].offset = 6;
  e[1].numel = 4;
  Shoal__V1__ParamEntry *ep[2] = {&e[0], &e[1]};
  Shoal__V1__Params p = SHOAL__V1__PARAMS__INIT;
  p.version = 42;
  p.dtype = SHOAL__V1__DTYPE__DTYPE_F32;
  p.blob.data = (uint8_t *)blob;
  p.blob.len = sizeof blob;
  p.n_layout = 2;
  p.layout = ep;
  p.run_id = "r1";
  b = pack(&p.base, &n);
  Shoal__V1__Params *p2 = shoal__v1__params__unpack(NULL, n, b);
  assert_non_null(p2);
  assert_int_equal(p2->version, 42);
  assert_false(p2->not_newer);
  assert_int_equal(p2->dtype, SHOAL__V1__DTYPE__DTYPE_F32);
  assert_int_equal(p2->blob.len, sizeof blob);
  assert_memory_equal(p2->blob.data, blob, sizeof blob);
  assert_int_equal(p2->n_layout, 2);
  assert_string_equal(p2->layout[1]->name, "fc.bias");
  assert_int_equal(p2->layout[0]->n_shape, 2);
  assert_int_equal(p2->layout[0]->shape[1], 3);
  assert_int_equal(p2->layout[1]->offset, 6);
  assert_int_equal(p2->layout[1]->numel, 4);
  shoal__v1__params__free_unpacked(p2, NULL);
  free(b);

  /* Status with counters */
  Shoal__V1__Counter cn = SHOAL__V1__COUNTER__INIT;
  cn.name = "loss";
  cn.value = 0.25;
  Shoal__V1__Counter *cp = &cn;
  Shoal__V1__Status st = SHOAL__V1__STATUS__INIT;
  st.run_id = "r1";
  st.policy_version = 3;
  st.batches = 10;
  st.samples = 640;
  st.bytes = 12345;
  st.rejected = 1;
  st.duplicates = 2;
  st.streams_active = 4;
  st.streams_total = 5;
  st.streams_aborted = 1;
  st.unauthenticated = 6;
  st.params_pulls = 7;
  st.uptime_s = 1.5;
  st.n_counters = 1;
  st.counters = &cp;
  b = pack(&st.base, &n);
  Shoal__V1__Status *st2 = shoal__v1__status__unpack(NULL, n, b);
  assert_non_null(st2);
  assert_int_equal(st2->samples, 640);
  assert_int_equal(st2->streams_aborted, 1);
  assert_int_equal(st2->unauthenticated, 6);
  assert_true(st2->uptime_s == 1.5);
  assert_int_equal(st2->n_counters, 1);
  assert_string_equal(st2->counters[0]->name, "loss");
  assert_true(st2->counters[0]->value == 0.25);
  shoal__v1__status__free_unpacked(st2, NULL);
  free(b);

  /* StatusRequest is empty */
  Shoal__V1__StatusRequest sr = SHOAL__V1__STATUS_REQUEST__INIT;
  b = pack(&sr.base, &n);
  assert_int_equal(n, 0);
  Shoal__V1__StatusRequest *sr2 = shoal__v1__status_request__unpack(NULL, n, b);
  assert_non_null(sr2);
  shoal__v1__status_request__free_unpacked(sr2, NULL);
  free(b);

  /* Hyperparams: a number and a text */
  Shoal__V1__Hyperparam h[2] = {SHOAL__V1__HYPERPARAM__INIT, SHOAL__V1__HYPERPARAM__INIT};
  h[0].key = "lr";
  h[0].value_case = SHOAL__V1__HYPERPARAM__VALUE_NUMBER;
  h[0].number = 3e-4;
  h[1].key = "schedule";
  h[1].value_case = SHOAL__V1__HYPERPARAM__VALUE_TEXT;
  h[1].text = "cosine";
  Shoal__V1__Hyperparam *hp[2] = {&h[0], &h[1]};
  Shoal__V1__Hyperparams hs = SHOAL__V1__HYPERPARAMS__INIT;
  hs.run_id = "r1";
  hs.n_entries = 2;
  hs.entries = hp;
  b = pack(&hs.base, &n);
  Shoal__V1__Hyperparams *hs2 = shoal__v1__hyperparams__unpack(NULL, n, b);
  assert_non_null(hs2);
  assert_int_equal(hs2->n_entries, 2);
  assert_int_equal(hs2->entries[0]->value_case, SHOAL__V1__HYPERPARAM__VALUE_NUMBER);
  assert_true(hs2->entries[0]->number == 3e-4);
  assert_int_equal(hs2->entries[1]->value_case, SHOAL__V1__HYPERPARAM__VALUE_TEXT);
  assert_string_equal(hs2->entries[1]->text, "cosine");
  shoal__v1__hyperparams__free_unpacked(hs2, NULL);
  free(b);

  Shoal__V1__HyperparamsReply hr = SHOAL__V1__HYPERPARAMS_REPLY__INIT;
  hr.applied = 2;
  hr.message = "ok";
  b = pack(&hr.base, &n);
  Shoal__V1__HyperparamsReply *hr2 = shoal__v1__hyperparams_reply__unpack(NULL, n, b);
  assert_non_null(hr2);
  assert_int_equal(hr2->applied, 2);
  assert_string_equal(hr2->message, "ok");
  shoal__v1__hyperparams_reply__free_unpacked(hr2, NULL);
  free(b);
}

/* A batch of 3 CartPole-like samples: obs f32 (4), action i32, done bool. */
typedef struct fixture {
  float obs[3 * 4];
  int32_t act[3];
  uint8_t done[3];
  int64_t shape_obs[1];
  Shoal__V1__Column col[3];
  Shoal__V1__Column *cp[3];
  Shoal__V1__SampleBatch sb;
} fixture;

static void fixture_init(fixture *f) {
  memset(f, 0, sizeof *f);
  for (int i = 0; i < 12; i++) f->obs[i] = (float)i - 5.5f;
  for (int i = 0; i < 3; i++) f->act[i] = i % 2, f->done[i] = i == 2;
  f->shape_obs[0] = 4;
  for (int i = 0; i < 3; i++) shoal__v1__column__init(&f->col[i]), f->cp[i] = &f->col[i];
  f->col[0].name = "obs";
  f->col[0].dtype = SHOAL__V1__DTYPE__DTYPE_F32;
  f->col[0].n_shape = 1;
  f->col[0].shape = f->shape_obs;
  f->col[0].data = (ProtobufCBinaryData){sizeof f->obs, (uint8_t *)f->obs};
  f->col[1].name = "action";
  f->col[1].dtype = SHOAL__V1__DTYPE__DTYPE_I32;
  f->col[1].data = (ProtobufCBinaryData){sizeof f->act, (uint8_t *)f->act};
  f->col[2].name = "done";
  f->col[2].dtype = SHOAL__V1__DTYPE__DTYPE_BOOL;
  f->col[2].data = (ProtobufCBinaryData){sizeof f->done, f->done};
  shoal__v1__sample_batch__init(&f->sb);
  f->sb.actor_id = 5;
  f->sb.incarnation = 77;
  f->sb.run_id = "run-a";
  f->sb.policy_version = -3;
  f->sb.seq = 12;
  f->sb.n = 3;
  f->sb.n_columns = 3;
  f->sb.columns = f->cp;
}

static rpc_spec cartpole_spec(void) {
  rpc_spec s = {.run_id = "run-a", .max_items = 16, .ncols = 3};
  s.cols[0] = (rpc_column_spec){.name = "obs", .dtype = RPC_F32, .ndim = 1, .shape = {4}};
  s.cols[1] = (rpc_column_spec){.name = "action", .dtype = RPC_I32};
  s.cols[2] = (rpc_column_spec){.name = "done", .dtype = RPC_BOOL};
  return s;
}

static void test_wire_reader_matches_protoc(void **state) {
  fixture f;
  fixture_init(&f);
  size_t n;
  uint8_t *b = pack(&f.sb.base, &n);
  /* Append unknown fields: a varint (field 99), a length-delimited (field 100), a
   * fixed32 (101) and a fixed64 (102): both readers must skip them. */
  uint8_t extra[] = {0x98, 0x06, 0x2a, 0xa2, 0x06, 0x03, 'x', 'y', 'z', 0xad, 0x06, 1, 2,
                     3,    4,    0xb1, 0x06, 1,    2,    3,   4,   5,   6,    7,    8};
  uint8_t *b2 = malloc(n + sizeof extra);
  memcpy(b2, b, n);
  memcpy(b2 + n, extra, sizeof extra);
  size_t n2 = n + sizeof extra;
  Shoal__V1__SampleBatch *u = shoal__v1__sample_batch__unpack(NULL, n2, b2);
  assert_non_null(u);
  assert_int_equal(u->seq, 12);
  shoal__v1__sample_batch__free_unpacked(u, NULL);

  rpc_wire_batch w;
  assert_int_equal(rpc_wire_read(b2, n2, &w, NULL), 0);
  assert_int_equal(w.actor_id, 5);
  assert_int_equal(w.incarnation, 77);
  assert_int_equal(w.policy_version, -3);
  assert_int_equal(w.seq, 12);
  assert_int_equal(w.n, 3);
  assert_int_equal(w.run_id_len, 5);
  assert_memory_equal(w.run_id, "run-a", 5);
  assert_int_equal(w.ncols, 3);
  assert_int_equal(w.cols[0].name_len, 3);
  assert_int_equal(w.cols[0].dtype, RPC_F32);
  assert_int_equal(w.cols[0].ndim, 1);
  assert_int_equal(w.cols[0].shape[0], 4);
  assert_int_equal(w.cols[0].data_len, sizeof f.obs);
  assert_memory_equal(w.cols[0].data, f.obs, sizeof f.obs);
  assert_int_equal(w.cols[1].ndim, 0);
  assert_memory_equal(w.cols[2].data, f.done, 3);

  /* The validator's dense view. */
  rpc_spec spec = cartpole_spec();
  rpc__scratch scr = {0};
  rpc_batch out;
  shoal_error err = {0};
  assert_int_equal(rpc__validate(&spec, &w, &scr, &out, &err), 0);
  assert_int_equal(out.n, 3);
  assert_memory_equal(out.cols[0].data, f.obs, sizeof f.obs);
  assert_int_equal(out.cols[1].bytes, 12);

  /* Every truncation is refused or read without reading past the end (ASan watches). */
  for (size_t k = 0; k < n; k++) {
    uint8_t *t = malloc(k ? k : 1);
    memcpy(t, b, k);
    int rc = rpc_wire_read(t, k, &w, NULL);
    if (rc == 0) {
      /* A cut between fields reads fine; it validates only when what was cut is the
       * trailing incarnation (field 7, packed after the columns), which is optional. */
      if (rpc__validate(&spec, &w, &scr, &out, NULL) == 0) assert_int_equal(w.incarnation, 0);
    } else {
      assert_int_equal(rc, SHOAL_EFORMAT);
    }
    free(t);
  }
  /* Random bytes never crash the reader or the validator. */
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  int refused = 0;
  for (int it = 0; it < 2000; it++) {
    size_t k = (size_t)shoal_rng_below(&rng, 200);
    uint8_t *t = malloc(k ? k : 1);
    for (size_t i = 0; i < k; i++) t[i] = (uint8_t)shoal_rng_next(&rng);
    if (rpc_wire_read(t, k, &w, NULL) || rpc__validate(&spec, &w, &scr, &out, NULL)) refused++;
    free(t);
  }
  assert_int_equal(refused, 2000);
  rpc__scratch_free(&scr);
  free(b);
  free(b2);
}

/* Packs f, reads it and validates it against spec; returns the validator's code. */
static int check(fixture *f, const rpc_spec *spec, shoal_error *err) {
  size_t n;
  uint8_t *b = pack(&f->sb.base, &n);
  rpc_wire_batch w;
  rpc__scratch scr = {0};
  rpc_batch out;
  int rc = rpc_wire_read(b, n, &w, err);
  if (!rc) rc = rpc__validate(spec, &w, &scr, &out, err);
  rpc__scratch_free(&scr);
  free(b);
  return rc;
}

static void test_validation_rejects(void **state) {
  rpc_spec spec = cartpole_spec();
  fixture f;
  shoal_error err;
  fixture_init(&f);
  assert_int_equal(check(&f, &spec, NULL), 0);

  fixture_init(&f); /* wrong run */
  f.sb.run_id = "run-b";
  assert_int_equal(check(&f, &spec, &err), SHOAL_EPERM);
  assert_non_null(strstr(err.msg, "run-b"));

  fixture_init(&f); /* NaN in obs */
  f.obs[7] = NAN;
  assert_int_equal(check(&f, &spec, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "element 7"));
  fixture_init(&f);
  f.obs[0] = INFINITY;
  assert_int_equal(check(&f, &spec, NULL), SHOAL_ENAN);

  fixture_init(&f); /* wrong item shape */
  f.shape_obs[0] = 3;
  assert_int_equal(check(&f, &spec, &err), SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "(3)"));

  fixture_init(&f); /* byte count not n x item size */
  f.col[0].data.len -= 4;
  assert_int_equal(check(&f, &spec, NULL), SHOAL_ESHAPE);

  fixture_init(&f); /* n disagrees with the data */
  f.sb.n = 2;
  assert_int_equal(check(&f, &spec, NULL), SHOAL_ESHAPE);

  fixture_init(&f); /* more than max_items */
  f.sb.n = 17;
  assert_int_equal(check(&f, &spec, NULL), SHOAL_ERANGE);

  fixture_init(&f); /* wrong dtype */
  f.col[1].dtype = SHOAL__V1__DTYPE__DTYPE_I64;
  assert_int_equal(check(&f, &spec, NULL), SHOAL_ESHAPE);

  fixture_init(&f); /* a column missing */
  f.sb.n_columns = 2;
  assert_int_equal(check(&f, &spec, NULL), SHOAL_ESHAPE);

  fixture_init(&f); /* a column twice */
  f.cp[2] = &f.col[1];
  assert_int_equal(check(&f, &spec, NULL), SHOAL_ESHAPE);

  fixture_init(&f); /* an unknown column name */
  f.col[2].name = "dones";
  assert_int_equal(check(&f, &spec, NULL), SHOAL_ESHAPE);

  fixture_init(&f); /* a bool that is neither 0 nor 1 */
  f.done[1] = 2;
  assert_int_equal(check(&f, &spec, NULL), SHOAL_ERANGE);

  fixture_init(&f); /* no seq */
  f.sb.seq = 0;
  assert_int_equal(check(&f, &spec, NULL), SHOAL_EINVAL);

  fixture_init(&f); /* a frame stack where the spec does not allow one */
  f.col[0].layout = SHOAL__V1__LAYOUT__LAYOUT_FRAME_STACK;
  assert_int_equal(check(&f, &spec, NULL), SHOAL_EINVAL);

  fixture_init(&f); /* bad compressed bytes */
  f.col[0].codec = SHOAL__V1__CODEC__CODEC_LZ4;
  f.col[0].raw_size = sizeof f.obs;
  assert_int_equal(check(&f, &spec, NULL), SHOAL_EFORMAT);

  /* A spec with NaN allowed takes the NaN. */
  spec.cols[0].allow_nonfinite = true;
  fixture_init(&f);
  f.obs[3] = NAN;
  assert_int_equal(check(&f, &spec, NULL), 0);
}

/* A long float column: the first element that is not finite is named, wherever it is
 * (the check runs in blocks of 64 and finds the index within a block). */
static void test_nonfinite_found_anywhere(void **state) {
  enum { ROWS = 50, OBSN = 4 * ROWS };
  rpc_spec spec = {.run_id = "run-a", .max_items = ROWS, .ncols = 1};
  spec.cols[0] = (rpc_column_spec){.name = "obs", .dtype = RPC_F32, .ndim = 1, .shape = {4}};
  static float obs[OBSN];
  int64_t shape[1] = {4};
  Shoal__V1__Column col, *cp = &col;
  shoal__v1__column__init(&col);
  col.name = "obs";
  col.dtype = SHOAL__V1__DTYPE__DTYPE_F32;
  col.n_shape = 1;
  col.shape = shape;
  col.data = (ProtobufCBinaryData){sizeof obs, (uint8_t *)obs};
  Shoal__V1__SampleBatch sb;
  shoal__v1__sample_batch__init(&sb);
  sb.run_id = "run-a";
  sb.seq = 1;
  sb.n = ROWS;
  sb.n_columns = 1;
  sb.columns = &cp;
  const int at[] = {0, 5, 63, 64, 100, 127, 128, 191, 192, OBSN - 1};
  for (size_t k = 0; k <= sizeof at / sizeof at[0]; k++) {
    for (int i = 0; i < OBSN; i++) obs[i] = (float)i * 0.5f - 7.0f;
    if (k < sizeof at / sizeof at[0]) {
      obs[at[k]] = k % 2 ? INFINITY : NAN;
      if (at[k] + 70 < OBSN) obs[at[k] + 70] = NAN; /* a later one is not named */
    }
    size_t n;
    uint8_t *b = pack(&sb.base, &n);
    rpc_wire_batch w;
    rpc__scratch scr = {0};
    rpc_batch out;
    shoal_error err = {0};
    int rc = rpc_wire_read(b, n, &w, &err);
    if (!rc) rc = rpc__validate(&spec, &w, &scr, &out, &err);
    if (k == sizeof at / sizeof at[0]) {
      assert_int_equal(rc, 0);
    } else {
      char want[64];
      snprintf(want, sizeof want, "element %d is not finite", at[k]);
      assert_int_equal(rc, SHOAL_ENAN);
      assert_non_null(strstr(err.msg, want));
    }
    rpc__scratch_free(&scr);
    free(b);
  }
}

/* Frame stacks (S=4 frames of 3x5 u8) rebuilt from deduplicated frames, plain and under
 * LZ4 and zstd, equal the stacks built directly. */
static void test_frame_stack_and_codecs(void **state) {
  enum { N = 6, S = 4, H = 3, W = 5, F = N + S - 1 };
  rpc_spec spec = {.run_id = "atari", .max_items = 8, .ncols = 1};
  spec.cols[0] = (rpc_column_spec){
      .name = "obs", .dtype = RPC_U8, .ndim = 3, .shape = {S, H, W}, .frame_stack = true};
  uint8_t frames[F * H * W], stacks[N * S * H * W];
  uint32_t index[N * S];
  for (int i = 0; i < F * H * W; i++) frames[i] = (uint8_t)(i * 7 + 3);
  /* Item i stacks frames i..i+3, as consecutive Atari steps do. */
  for (int i = 0; i < N; i++)
    for (int t = 0; t < S; t++) {
      index[i * S + t] = (uint32_t)(i + t);
      memcpy(stacks + (i * S + t) * H * W, frames + (i + t) * H * W, H * W);
    }
  uint8_t zb[4096];
  for (int codec = 0; codec <= 2; codec++) {
    int64_t shape[3] = {S, H, W};
    Shoal__V1__Column col = SHOAL__V1__COLUMN__INIT;
    Shoal__V1__Column *cp = &col;
    col.name = "obs";
    col.dtype = SHOAL__V1__DTYPE__DTYPE_U8;
    col.n_shape = 3;
    col.shape = shape;
    col.layout = SHOAL__V1__LAYOUT__LAYOUT_FRAME_STACK;
    col.frames = F;
    col.frame_index = (ProtobufCBinaryData){sizeof index, (uint8_t *)index};
    col.data = (ProtobufCBinaryData){sizeof frames, frames};
    if (codec == 1) {
      int k = LZ4_compress_default((const char *)frames, (char *)zb, sizeof frames, sizeof zb);
      assert_true(k > 0);
      col.data = (ProtobufCBinaryData){(size_t)k, zb};
    } else if (codec == 2) {
      size_t k = ZSTD_compress(zb, sizeof zb, frames, sizeof frames, 1);
      assert_false(ZSTD_isError(k));
      col.data = (ProtobufCBinaryData){k, zb};
    }
    col.codec = (Shoal__V1__Codec)codec;
    col.raw_size = codec ? sizeof frames : 0;
    Shoal__V1__SampleBatch sb = SHOAL__V1__SAMPLE_BATCH__INIT;
    sb.run_id = "atari";
    sb.seq = 1;
    sb.n = N;
    sb.n_columns = 1;
    sb.columns = &cp;
    size_t n;
    uint8_t *b = pack(&sb.base, &n);
    rpc_wire_batch w;
    rpc__scratch scr = {0};
    rpc_batch out;
    assert_int_equal(rpc_wire_read(b, n, &w, NULL), 0);
    assert_int_equal(rpc__validate(&spec, &w, &scr, &out, NULL), 0);
    assert_int_equal(out.cols[0].bytes, sizeof stacks);
    assert_memory_equal(out.cols[0].data, stacks, sizeof stacks);
    /* An index past the frames is refused. */
    index[5] = F;
    free(b);
    b = pack(&sb.base, &n);
    assert_int_equal(rpc_wire_read(b, n, &w, NULL), 0);
    assert_int_equal(rpc__validate(&spec, &w, &scr, &out, NULL), SHOAL_ERANGE);
    index[5] = 2;
    /* raw_size that disagrees with the frames is refused before decompressing. */
    if (codec) {
      col.raw_size = sizeof frames + 1;
      free(b);
      b = pack(&sb.base, &n);
      assert_int_equal(rpc_wire_read(b, n, &w, NULL), 0);
      assert_int_equal(rpc__validate(&spec, &w, &scr, &out, NULL), SHOAL_ESHAPE);
    }
    rpc__scratch_free(&scr);
    free(b);
  }
}

static void test_spec_check(void **state) {
  rpc_spec s = cartpole_spec();
  assert_int_equal(rpc_spec_check(&s, NULL), 0);
  s.cols[2].name = "obs";
  assert_int_equal(rpc_spec_check(&s, NULL), SHOAL_EINVAL);
  s = cartpole_spec();
  s.cols[0].shape[0] = 0;
  assert_int_equal(rpc_spec_check(&s, NULL), SHOAL_EINVAL);
  s = cartpole_spec();
  s.cols[1].dtype = 99;
  assert_int_equal(rpc_spec_check(&s, NULL), SHOAL_EINVAL);
  s = cartpole_spec();
  s.cols[0].frame_stack = true; /* ndim 1 cannot be a stack */
  assert_int_equal(rpc_spec_check(&s, NULL), SHOAL_EINVAL);
  s = cartpole_spec();
  /* The message limit covers the largest batch: 16 x (16 + 4 + 1) bytes plus framing. */
  assert_true(rpc__max_message_bytes(&s) >= 16 * 21);
  assert_true(rpc__max_message_bytes(&s) < 16 * 21 + 8192);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip_messages),
      cmocka_unit_test(test_wire_reader_matches_protoc),
      cmocka_unit_test(test_validation_rejects),
      cmocka_unit_test(test_nonfinite_found_anywhere),
      cmocka_unit_test(test_frame_stack_and_codecs),
      cmocka_unit_test(test_spec_check),
  };
  return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
