/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/make_seeds.c — writes the binary seed corpora under tests/fuzz/corpus/
 * (sample_batch, params, requests, safetensors, segment, learner_state, replay_load,
 * op_snapshot) with
 * protobuf-c's encoder and shoal's own writers (nn's checkpoints, store's segments, the
 * learner state, replay_save), so the seeds are real encodings: valid messages of every
 * shape the decoders take (dense, frame-stacked, LZ4, zstd; params; checkpoints of the
 * fuzzed model and optimizer) and the hostile ones the malicious-client test sends (huge
 * and negative shapes, shape products that overflow, NaN, wrong run). Run it from the
 * repository root after changing proto/shoal.proto or one of those formats:
 *
 *   build/tests/fuzz_make_seeds tests/fuzz/corpus
 *
 * The YAML seeds (corpus/config) are written by hand and copied from configs/; so are the
 * JSON Lines, .npy and manifest seeds (corpus/jsonl, npy, manifest).
 */
#define _GNU_SOURCE
#include <lz4.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "algos/agent.h"
#include "algos/algos.h"
#include "learner/replay_log.h"
#include "nn/nn.h"
#include "proto/shoal.pb-c.h"
#include "replay/replay.h"
#include "store/internal.h"
#include "store/store_segments.h"
#include "tests/fuzz/targets.h"

static const char *root;

static void put(const char *target, const char *name, const uint8_t *prefix, size_t nprefix,
                const ProtobufCMessage *m) {
  size_t n = m ? protobuf_c_message_get_packed_size(m) : 0;
  uint8_t *buf = malloc(nprefix + n + 1);
  memcpy(buf, prefix, nprefix);
  if (m) protobuf_c_message_pack(m, buf + nprefix);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, nprefix + n, f) != nprefix + n) {
    fprintf(stderr, "make_seeds: cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
  free(buf);
}

static void put_raw(const char *target, const char *name, const uint8_t *p, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) {
    fprintf(stderr, "make_seeds: cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

/* ---- SampleBatch, for the spec of fuzz_sample_batch.c ------------------------ */

enum { N = 3 };
static float obs[N * 4];
static int32_t act[N];
static uint8_t done[N], frames[N * 4 * 64], frame5[5 * 64];
static uint16_t prio[N * 2];
static double ret[N * 6];
static int64_t sh_obs[] = {4}, sh_frames[] = {4, 8, 8}, sh_prio[] = {2}, sh_ret[] = {2, 3};
static uint32_t fidx[N * 4];

typedef struct batch {
  Shoal__V1__SampleBatch b;
  Shoal__V1__Column c[6];
  Shoal__V1__Column *cp[6];
} batch;

static void col(Shoal__V1__Column *c, const char *name, int dtype, int64_t *shape, size_t nshape,
                const void *data, size_t bytes) {
  shoal__v1__column__init(c);
  c->name = (char *)name;
  c->dtype = (Shoal__V1__DType)dtype;
  c->n_shape = nshape;
  c->shape = shape;
  c->data.data = (uint8_t *)data;
  c->data.len = bytes;
}

static void batch_init(batch *x) {
  for (int i = 0; i < N * 4; i++) obs[i] = 0.25f * (float)i;
  for (int i = 0; i < N; i++) act[i] = i % 2, done[i] = i == N - 1;
  for (int i = 0; i < N * 4 * 64; i++) frames[i] = (uint8_t)(i * 7);
  for (int i = 0; i < 5 * 64; i++) frame5[i] = (uint8_t)(i * 3);
  for (int i = 0; i < N * 2; i++) prio[i] = 0x3c00; /* 1.0 in binary16 */
  for (int i = 0; i < N * 6; i++) ret[i] = (double)i - 2.5;
  for (int i = 0; i < N * 4; i++) fidx[i] = (uint32_t)((i / 4) + (i % 4)) % 5;
  shoal__v1__sample_batch__init(&x->b);
  x->b.actor_id = 3;
  x->b.run_id = (char *)"fuzz-run";
  x->b.policy_version = 17;
  x->b.seq = 5;
  x->b.n = N;
  x->b.incarnation = 0x1234567890ull;
  col(&x->c[0], "obs", 7, sh_obs, 1, obs, sizeof obs);
  col(&x->c[1], "action", 4, NULL, 0, act, sizeof act);
  col(&x->c[2], "done", 9, NULL, 0, done, sizeof done);
  col(&x->c[3], "frames", 1, sh_frames, 3, frames, sizeof frames);
  col(&x->c[4], "prio", 6, sh_prio, 1, prio, sizeof prio);
  col(&x->c[5], "ret", 8, sh_ret, 2, ret, sizeof ret);
  for (int i = 0; i < 6; i++) x->cp[i] = &x->c[i];
  x->b.n_columns = 6;
  x->b.columns = x->cp;
}

static void sample_batches(void) {
  const char *t = "sample_batch";
  batch x;
  batch_init(&x);
  put(t, "valid-dense", NULL, 0, &x.b.base);

  /* frames deduplicated: 5 frames, 12 indices */
  batch_init(&x);
  x.c[3].layout = SHOAL__V1__LAYOUT__LAYOUT_FRAME_STACK;
  x.c[3].frames = 5;
  x.c[3].data.data = frame5;
  x.c[3].data.len = sizeof frame5;
  x.c[3].frame_index.data = (uint8_t *)fidx;
  x.c[3].frame_index.len = sizeof fidx;
  put(t, "valid-frame-stack", NULL, 0, &x.b.base);

  /* obs LZ4, frames zstd */
  batch_init(&x);
  char lz[1024];
  int nlz = LZ4_compress_default((const char *)obs, lz, sizeof obs, sizeof lz);
  x.c[0].codec = SHOAL__V1__CODEC__CODEC_LZ4;
  x.c[0].raw_size = sizeof obs;
  x.c[0].data.data = (uint8_t *)lz;
  x.c[0].data.len = (size_t)nlz;
  static uint8_t zs[2048];
  size_t nzs = ZSTD_compress(zs, sizeof zs, frames, sizeof frames, 3);
  x.c[3].codec = SHOAL__V1__CODEC__CODEC_ZSTD;
  x.c[3].raw_size = sizeof frames;
  x.c[3].data.data = zs;
  x.c[3].data.len = nzs;
  put(t, "valid-compressed", NULL, 0, &x.b.base);

  /* frame stack whose frames are zstd-compressed */
  batch_init(&x);
  size_t nzs5 = ZSTD_compress(zs, sizeof zs, frame5, sizeof frame5, 1);
  x.c[3].layout = SHOAL__V1__LAYOUT__LAYOUT_FRAME_STACK;
  x.c[3].frames = 5;
  x.c[3].codec = SHOAL__V1__CODEC__CODEC_ZSTD;
  x.c[3].raw_size = sizeof frame5;
  x.c[3].data.data = zs;
  x.c[3].data.len = nzs5;
  x.c[3].frame_index.data = (uint8_t *)fidx;
  x.c[3].frame_index.len = sizeof fidx;
  put(t, "valid-frame-stack-zstd", NULL, 0, &x.b.base);

  /* hostile */
  batch_init(&x);
  obs[5] = NAN;
  put(t, "nan-obs", NULL, 0, &x.b.base);
  batch_init(&x);
  x.b.run_id = (char *)"other-run";
  put(t, "wrong-run", NULL, 0, &x.b.base);
  batch_init(&x);
  x.b.n = 0xffffffffu;
  put(t, "huge-n", NULL, 0, &x.b.base);
  batch_init(&x);
  int64_t huge[] = {INT64_C(1) << 62, 4};
  x.c[0].shape = huge;
  x.c[0].n_shape = 2;
  put(t, "huge-shape", NULL, 0, &x.b.base);
  batch_init(&x);
  int64_t neg[] = {-4};
  x.c[0].shape = neg;
  put(t, "negative-shape", NULL, 0, &x.b.base);
  batch_init(&x);
  int64_t ovf[] = {INT64_C(1) << 32, INT64_C(1) << 32, 16};
  x.c[3].shape = ovf;
  put(t, "overflow-shape", NULL, 0, &x.b.base);
  batch_init(&x);
  x.c[3].layout = SHOAL__V1__LAYOUT__LAYOUT_FRAME_STACK;
  x.c[3].frames = 0xffffffffu;
  x.c[3].data.data = frame5;
  x.c[3].data.len = sizeof frame5;
  x.c[3].frame_index.data = (uint8_t *)fidx;
  x.c[3].frame_index.len = sizeof fidx;
  put(t, "huge-frames", NULL, 0, &x.b.base);
  batch_init(&x);
  x.c[0].codec = SHOAL__V1__CODEC__CODEC_LZ4;
  x.c[0].raw_size = UINT64_C(1) << 40;
  put(t, "huge-raw-size", NULL, 0, &x.b.base);
  batch_init(&x);
  done[0] = 2;
  put(t, "bad-bool", NULL, 0, &x.b.base);
  /* a shape sent one value per field (unpacked) is valid protobuf */
  static const uint8_t unpacked[] = {0x28, 0x01, 0x12, 0x08, 'f',  'u',  'z',  'z',  '-',
                                     'r',  'u',  'n',  0x20, 0x01, 0x32, 0x0f, 0x0a, 0x03,
                                     'o',  'b',  's',  0x10, 0x07, 0x18, 0x04, 0x22, 0x04,
                                     0,    0,    0,    0,    0x58, 0x01};
  put_raw(t, "unpacked-shape-unknown-field", unpacked, sizeof unpacked);
}

/* ---- Params ---------------------------------------------------------------- */

static void params(void) {
  const char *t = "params";
  static float blob[2 * 3 + 3];
  for (int i = 0; i < 9; i++) blob[i] = (float)i;
  int64_t sw[] = {2, 3}, sb[] = {3};
  Shoal__V1__ParamEntry e[2], *ep[2] = {&e[0], &e[1]};
  shoal__v1__param_entry__init(&e[0]);
  e[0].name = (char *)"fc.weight";
  e[0].n_shape = 2;
  e[0].shape = sw;
  e[0].offset = 0;
  e[0].numel = 6;
  shoal__v1__param_entry__init(&e[1]);
  e[1].name = (char *)"fc.bias";
  e[1].n_shape = 1;
  e[1].shape = sb;
  e[1].offset = 6;
  e[1].numel = 3;
  Shoal__V1__Params m = SHOAL__V1__PARAMS__INIT;
  m.version = 9;
  m.dtype = SHOAL__V1__DTYPE__DTYPE_F32;
  m.blob.data = (uint8_t *)blob;
  m.blob.len = sizeof blob;
  m.n_layout = 2;
  m.layout = ep;
  m.run_id = (char *)"fuzz-run";
  put(t, "valid", NULL, 0, &m.base);
  Shoal__V1__Params same = SHOAL__V1__PARAMS__INIT;
  same.version = 9;
  same.not_newer = 1;
  put(t, "not-newer", NULL, 0, &same.base);
  e[1].offset = UINT64_MAX - 1;
  put(t, "offset-overflow", NULL, 0, &m.base);
  e[1].offset = 6;
  e[1].numel = 300;
  sb[0] = 300;
  put(t, "past-blob", NULL, 0, &m.base);
  sb[0] = 3;
  e[1].numel = 3;
  int64_t ovf[] = {INT64_C(1) << 32, INT64_C(1) << 32};
  e[0].shape = ovf;
  put(t, "shape-overflow", NULL, 0, &m.base);
  e[0].shape = sw;
  m.dtype = 99;
  put(t, "bad-dtype", NULL, 0, &m.base);
}

/* ---- requests: first byte 0 ParamsRequest, 1 Hyperparams, 2 Status ---------- */

static void requests(void) {
  const char *t = "requests";
  uint8_t k0 = 0, k1 = 1, k2 = 2;
  Shoal__V1__ParamsRequest pr = SHOAL__V1__PARAMS_REQUEST__INIT;
  pr.actor_id = 2;
  pr.run_id = (char *)"fuzz-run";
  pr.have_version = -1;
  put(t, "params-request", &k0, 1, &pr.base);
  pr.run_id = (char *)"other";
  put(t, "params-request-wrong-run", &k0, 1, &pr.base);

  Shoal__V1__Hyperparam h[2], *hp[2] = {&h[0], &h[1]};
  shoal__v1__hyperparam__init(&h[0]);
  h[0].key = (char *)"dqn.lr";
  h[0].value_case = SHOAL__V1__HYPERPARAM__VALUE_NUMBER;
  h[0].number = 3e-4;
  shoal__v1__hyperparam__init(&h[1]);
  h[1].key = (char *)"note";
  h[1].value_case = SHOAL__V1__HYPERPARAM__VALUE_TEXT;
  h[1].text = (char *)"hello";
  Shoal__V1__Hyperparams hy = SHOAL__V1__HYPERPARAMS__INIT;
  hy.run_id = (char *)"";
  hy.n_entries = 2;
  hy.entries = hp;
  put(t, "hyperparams", &k1, 1, &hy.base);

  Shoal__V1__Counter c = SHOAL__V1__COUNTER__INIT;
  c.name = (char *)"replay_size";
  c.value = 1234;
  Shoal__V1__Counter *cp[1] = {&c};
  Shoal__V1__Status st = SHOAL__V1__STATUS__INIT;
  st.run_id = (char *)"fuzz-run";
  st.policy_version = 4;
  st.batches = 10;
  st.uptime_s = 1.5;
  st.n_counters = 1;
  st.counters = cp;
  put(t, "status", &k2, 1, &st.base);
}

/* ---- safetensors: first byte even = model, odd = optimizer ------------------ */

static void safetensors(void) {
  const char *t = "safetensors";
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  if (!m || nn_input(m, 4, 1, 1) < 0 || nn_dense(m, "fc1", 3) < 0 ||
      nn_batchnorm(m, "bn", 1e-5f, 0.1f) < 0 || nn_activation(m, "act", NN_RELU, 0) < 0 ||
      nn_dense(m, "out", 2) < 0 || nn_model_build(m, 4, 7, &err)) {
    fprintf(stderr, "make_seeds: model: %s\n", err.msg);
    exit(1);
  }
  nn_optim_config oc = nn_optim_defaults(NN_ADAM);
  nn_optim *o = nn_optim_create(m, &oc, &err);
  uint8_t *buf;
  size_t len;
  if (nn_model_save_buffer(m, &buf, &len, &err)) exit(1);
  uint8_t *p = malloc(len + 1);
  p[0] = 0;
  memcpy(p + 1, buf, len);
  put_raw(t, "model", p, len + 1);
  free(p);
  free(buf);
  if (nn_optim_save_buffer(o, &buf, &len, &err)) exit(1);
  p = malloc(len + 1);
  p[0] = 1;
  memcpy(p + 1, buf, len);
  put_raw(t, "optimizer", p, len + 1);
  free(p);
  free(buf);
  nn_optim_destroy(o);
  nn_model_destroy(m);
}

/* ---- experience segments, for fuzz_segment.c (byte 0: 1 = restamp the CRC) ------ */

static void put_seg(const char *name, uint8_t flags, const store_segment *g, size_t len) {
  uint8_t *b = malloc(len + 1);
  b[0] = flags;
  memcpy(b + 1, g->buf, len);
  put_raw("segment", name, b, len + 1);
  free(b);
}

static void segments(void) {
  shoal_error err = {0};
  store_segment g;
  memset(&g, 0, sizeof g);
  /* CartPole's: obs f32 [4], a discrete action, 5 rows, 2 ends, priorities. */
  store_segment_spec cp = {STORE_SEG_F32, 1, {4}, STORE_SEG_I32, 0, {0}};
  if (store_segment_reserve(&g, &cp, 5, 2, 1, &err)) exit(1);
  for (int i = 0; i < 5; i++) {
    for (int e = 0; e < 4; e++) ((float *)g.obs)[i * 4 + e] = 0.1f * (float)(i + e);
    ((int32_t *)g.action)[i] = i & 1;
    g.reward[i] = 1;
    g.terminated[i] = i == 2;
    g.truncated[i] = i == 4;
    g.priority[i] = 0.5f;
  }
  for (int e = 0; e < 8; e++) ((float *)g.final_obs)[e] = (float)e;
  snprintf(g.run, sizeof g.run, "cartpole");
  snprintf(g.source, sizeof g.source, "import");
  g.seq = 7;
  g.wall_time = 1.7e9;
  store__seg_header_write(&g);
  put_seg("valid-cartpole", 0, &g, g.len);
  put_seg("truncated-restamped", 1, &g, g.len - 9);
  g.buf[300] ^= 0x40;
  put_seg("bad-crc", 0, &g, g.len);
  g.reward[1] = NAN;
  put_seg("nan-reward-restamped", 1, &g, g.len);
  /* MinAtar's: obs u8 [10,10,4], no ends, no priorities. */
  store_segment_spec ma = {STORE_SEG_U8, 3, {10, 10, 4}, STORE_SEG_I32, 0, {0}};
  if (store_segment_reserve(&g, &ma, 2, 0, 0, &err)) exit(1);
  memset(g.obs, 1, 2 * 400);
  ((int32_t *)g.action)[0] = 3, ((int32_t *)g.action)[1] = 5;
  g.reward[0] = g.reward[1] = 0;
  g.terminated[0] = g.terminated[1] = g.truncated[0] = g.truncated[1] = 0;
  store__seg_header_write(&g);
  put_seg("valid-minatar", 0, &g, g.len);
  /* A box action: Pendulum's obs f32 [3], action f32 [1]. */
  store_segment_spec pe = {STORE_SEG_F32, 1, {3}, STORE_SEG_F32, 1, {1}};
  if (store_segment_reserve(&g, &pe, 1, 1, 0, &err)) exit(1);
  memset(g.obs, 0, 12);
  memset(g.final_obs, 0, 12);
  ((float *)g.action)[0] = -2;
  g.reward[0] = -1;
  g.terminated[0] = 0, g.truncated[0] = 1;
  store__seg_header_write(&g);
  put_seg("valid-box", 0, &g, g.len);
  store__put_le32(g.buf + 32, 0xffffffffu); /* rows */
  put_seg("huge-rows-restamped", 1, &g, g.len);
  store_segment_free(&g);
}

/* ---- learner states, for fuzz_learner_state.c (the model of its Initialize) -------- */

static void learner_states(void) {
  shoal_error err = {0};
  dqn_config dc = fuzz_dqn_config();
  dqn *d = dqn_create(&dc, NN_CPU, true, &err);
  uint8_t *st = NULL, *snap = NULL;
  size_t sl = 0, nl = 0;
  if (!d || dqn_state_save(d, &st, &sl, &err) ||
      nn_model_save_buffer(dqn_model(d), &snap, &nl, &err) ||
      algo_snapshot_append_state(&snap, &nl, st, sl, &err)) {
    fprintf(stderr, "make_seeds: learner state: %s\n", err.msg);
    exit(1);
  }
  uint8_t *b = malloc((nl > sl ? nl : sl) + 1);
  b[0] = 0;
  memcpy(b + 1, st, sl);
  put_raw("learner_state", "valid-state", b, sl + 1);
  b[0] = 1;
  memset(b + 1 + 16, 0xff, 8); /* updates: -1 */
  put_raw("learner_state", "negative-updates-restamped", b, sl + 1);
  b[0] = 1;
  memcpy(b + 1, st, sl);
  b[1 + 12] = 3; /* written by ppo */
  put_raw("learner_state", "foreign-kind-restamped", b, sl + 1);
  b[0] = 2;
  memcpy(b + 1, snap, nl);
  put_raw("learner_state", "valid-snapshot", b, nl + 1);
  memset(b + 1 + nl - 16, 0xff, 8); /* a trailer longer than the snapshot */
  put_raw("learner_state", "snapshot-huge-trailer", b, nl + 1);
  put_raw("learner_state", "snapshot-without-state", b, nl - sl - 16 + 1);
  free(b);
  free(st);
  free(snap);
  dqn_destroy(d);
}

/* ---- replay memory files, for fuzz_replay_load.c (its spec; byte 0: bit 0
 * prioritized, bit 1 restamp the CRCs) ------------------------------------------ */

static void put_file(const char *name, uint8_t flags, const char *path, long cut) {
  FILE *f = fopen(path, "rb");
  if (!f) exit(1);
  uint8_t b[1 << 16];
  size_t n = fread(b + 1, 1, sizeof b - 1, f);
  fclose(f);
  b[0] = flags;
  if (cut) n = cut > 0 ? (size_t)cut : n + (size_t)cut;
  put_raw("replay_load", name, b, n + 1);
}

static void replay_files(void) {
  for (int prio = 0; prio < 2; prio++) {
    replay_config c = fuzz_replay_config(prio);
    replay *r;
    shoal_error err = {0};
    if (replay_create(&c, &r, &err)) exit(1);
    /* Two streams, an episode that ends on each, then the ring laps (8 slots). */
    for (int t = 0; t < 7; t++) {
      for (int s = 0; s < 2; s++) {
        float o[2] = {(float)t, (float)s}, fin[2] = {-1, -1};
        int64_t a = t & 1;
        const void *cols[2] = {o, &a};
        int term = s == 0 && t == 3, trunc = s == 1 && t == 5;
        if (replay_insert_one(r, s, cols, 0.5f * (float)t, term, trunc, term || trunc ? fin : NULL,
                              prio ? 0.25f * (float)(t + 1) : -1, &err))
          exit(1);
      }
    }
    const char *path = "/tmp/fuzz_make_seeds.rpl";
    if (replay_save(r, path, &err)) exit(1);
    replay_destroy(r);
    put_file(prio ? "valid-prioritized" : "valid-uniform", (uint8_t)prio, path, 0);
    put_file(prio ? "truncated-prioritized-restamped" : "truncated-uniform", (uint8_t)(prio | 2),
             path, -21);
    if (!prio) put_file("header-only", 0, path, 128);
    remove(path);
  }
}

/* ---- on-policy snapshots, for fuzz_op_snapshot.c (its agents; byte 0: bit 0 resume, bit 1
 * IMPALA) */

static void op_snapshots_of(bool impala) {
  const char *pre = impala ? "impala-" : "";
  char name[64];
  shoal_error err = {0};
  op_spec s;
  op_agent_config c;
  fuzz_op_config(impala, &s, &c);
  op_agent a;
  op_norm z;
  uint8_t *snap = NULL;
  size_t n = 0;
  const float x[12] = {1, 2, 3, 4, -1, 0, 0.5f, 2, 0, 0, 0, 1};
  if (op_agent_create(&s, &c, 4, true, NN_CPU, &a, &err) || op_norm_init(&z, 4, &err)) exit(1);
  op_norm_update(&z, x, 3);
  if (op_snapshot_encode(&a, &s, &z, &snap, &n, &err)) exit(1);
  uint8_t *b = malloc(n + 1);
  for (int resume = 0; resume < 2; resume++) {
    b[0] = (uint8_t)(resume | (impala ? 2 : 0));
    memcpy(b + 1, snap, n);
    snprintf(name, sizeof name, "%s%s", pre, resume ? "valid-resume" : "valid-decode");
    put_raw("op_snapshot", name, b, n + 1);
  }
  b[0] =
      impala ? 2 : 0; /* the damaged ones through op_snapshot_decode, which must change nothing */
  double nan = NAN, neg = -1;
  memcpy(b + 1 + n - 24, &nan, 8); /* the count */
  snprintf(name, sizeof name, "%snan-count", pre);
  put_raw("op_snapshot", name, b, n + 1);
  memcpy(b + 1, snap, n);
  memcpy(b + 1 + n - 24 - 8, &neg, 8); /* the last variance */
  snprintf(name, sizeof name, "%snegative-var", pre);
  put_raw("op_snapshot", name, b, n + 1);
  memcpy(b + 1, snap, n);
  b[1 + n - 16] = 5; /* obs_n */
  snprintf(name, sizeof name, "%swrong-obs-n", pre);
  put_raw("op_snapshot", name, b, n + 1);
  memcpy(b + 1, snap, n);
  memset(b + 1, 0xff, 8); /* the safetensors header length: the statistics must not load */
  snprintf(name, sizeof name, "%sbad-model-good-stats", pre);
  put_raw("op_snapshot", name, b, n + 1);
  memcpy(b + 1, snap, n);
  snprintf(name, sizeof name, "%struncated", pre);
  put_raw("op_snapshot", name, b, n / 2 + 1);
  free(b);
  free(snap);
  op_norm_free(&z);
  op_agent_destroy(&a);
}

static void op_snapshots(void) {
  op_snapshots_of(false);
  op_snapshots_of(true);
}

/* ---- replay log segments, for fuzz_rlog.c (byte 0: 1 = restamp a raw body's CRC) ----- */

/* A log of two columns (obs: stacks of 4 frames of 8 bytes; action), written through a
 * real file store in a temporary folder: a dense batch, a framed one (kind 3) and a
 * priority checkpoint; raw (codec none) and zstd. */
static void rlog_seeds(void) {
  for (int raw = 1; raw >= 0; raw--) {
    char dir[] = "/tmp/shoal-seeds-rlog-XXXXXX", uri[64];
    if (!mkdtemp(dir)) exit(1);
    snprintf(uri, sizeof uri, "file://%s", dir);
    shoal_error err = {0};
    store *st;
    store_writer *wr;
    if (store_open(&st, uri, &err) || store_run_create(st, "seeds", NULL, 1, &err) ||
        store_writer_create(&wr, st, NULL, &err)) {
      fprintf(stderr, "make_seeds: rlog store: %s\n", err.msg);
      exit(1);
    }
    rlog_config c = {.st = st, .wr = wr, .run = "seeds", .ncols = 2, .raw = raw, .flush_s = 60};
    snprintf(c.cols[0].name, sizeof c.cols[0].name, "obs");
    c.cols[0].dtype = REPLAY_U8;
    c.cols[0].ndim = 3;
    c.cols[0].shape[0] = 4, c.cols[0].shape[1] = 2, c.cols[0].shape[2] = 4;
    snprintf(c.cols[1].name, sizeof c.cols[1].name, "action");
    c.cols[1].dtype = REPLAY_I32;
    rlog *l;
    if (rlog_open(&l, &c, &err)) exit(1);
    enum { ROWS = 6 };
    uint8_t frames[ROWS * 8], dense[ROWS * 32];
    uint32_t index[ROWS * 4];
    int32_t act[ROWS];
    for (int f = 0; f < ROWS; f++) {
      for (int k = 0; k < 8; k++) frames[f * 8 + k] = (uint8_t)(f * 16 + k);
      act[f] = f % 3;
    }
    for (int i = 0; i < ROWS; i++)
      for (int j = 0; j < 4; j++) {
        int f = i + j >= 3 ? i + j - 3 : 0;
        index[i * 4 + j] = (uint32_t)f;
        memcpy(dense + (i * 4 + j) * 8, frames + f * 8, 8);
      }
    rlog_batch b = {.actor = 1,
                    .incarnation = 9,
                    .seq = 1,
                    .rows = ROWS,
                    .steps = ROWS - 1,
                    .items = ROWS,
                    .cols = {dense, act}};
    if (rlog_append_batch(l, &b, &err)) exit(1);
    b.seq = 2;
    b.frames[0] = ROWS, b.frame_depth[0] = 4, b.frame_data[0] = frames, b.frame_index[0] = index;
    if (rlog_append_batch(l, &b, &err)) exit(1);
    float p[4] = {0.5f, 1, -1, 2};
    if (rlog_append_priorities(l, 3, 4, p, &err) || rlog_close(l, 10, NULL) ||
        store_writer_close(wr, 10, NULL)) {
      fprintf(stderr, "make_seeds: rlog: %s\n", err.msg);
      exit(1);
    }
    for (uint64_t q = 0; q < 2; q++) {
      void *bytes;
      size_t len;
      if (store_replay_read(st, "seeds", q, &bytes, &len, &err)) exit(1);
      uint8_t *o = malloc(len + 1);
      o[0] = 0;
      memcpy(o + 1, bytes, len);
      char name[64];
      snprintf(name, sizeof name, "%s-%s", raw ? "raw" : "zstd", q ? "priorities" : "batches");
      put_raw("rlog", name, o, len + 1);
      if (raw && !q) {
        /* the framed record's first index past its frames, the CRC restamped */
        size_t hl = RLOG_HEADER + 2 * RLOG_COL_SPEC;
        size_t rec0 = 40 + ROWS * 32 + ((ROWS * 4 + 7) & ~(size_t)7);
        o[0] = 1;
        o[1 + hl + rec0 + 40 + 8 + 8 + ROWS * 8] = 0xff;
        put_raw("rlog", "raw-bad-index-restamped", o, len + 1);
      }
      free(o);
      free(bytes);
    }
    store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s tests/fuzz/corpus\n", argv[0]);
    return 2;
  }
  root = argv[1];
  sample_batches();
  params();
  requests();
  safetensors();
  segments();
  learner_states();
  replay_files();
  op_snapshots();
  rlog_seeds();
  return 0;
}
