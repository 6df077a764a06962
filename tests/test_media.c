/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_media.c — episode recordings: the PNG/APNG writer (envs/apng.c), media in
 * the store, and `shoal eval --render` / `shoal media ls|get` end to end; and the other
 * data-hub command, `shoal dataset put|ls|info|rm`, end to end.
 *   test_media file      the file store in a temporary folder
 *   test_media mongodb   MongoDB: ctest's stand-in or $SHOAL_TEST_MONGO_URI (tests/mongo_test.h)
 *
 * Files are read back by a decoder written here from the PNG and APNG specifications
 * (chunk CRCs, zlib, the five row filters, frame rectangles), and also by Python's PIL
 * when Debian's python3 has it (python3-pil).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "run/run.h"
#include "config/config.h"
#include "data/data.h"
#include "envs/envs.h"
#include "nn/nn.h"
#include "store/store.h"
#include "tests/mongo_test.h"

static char g_uri[600], g_dir[300], g_prefix[48], g_tmp[300];
static int g_file;

/* ---- a PNG / APNG decoder ------------------------------------------------------------ */

typedef struct decoded {
  int w, h, frames, declared; /* declared: acTL's num_frames (1 for a plain PNG) */
  uint8_t *rgb;               /* (frames, h, w, 3) the canvas after each frame */
} decoded;

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int pa(int a, int b, int c) {
  int p = a + b - c, da = abs(p - a), db = abs(p - b), dc = abs(p - c);
  return da <= db && da <= dc ? a : db <= dc ? b : c;
}

/* Inflates z (n bytes) and unfilters a (fw, fh) RGB rectangle onto canvas at (x, y). */
static void draw_frame(decoded *d, uint8_t *canvas, const uint8_t *z, size_t n, int fw, int fh,
                       int x, int y) {
  size_t rb = (size_t)fw * 3, raw_n = (rb + 1) * (size_t)fh;
  uint8_t *raw = malloc(raw_n), *rows = calloc((size_t)fh, rb);
  uLongf got = (uLongf)raw_n;
  if (uncompress(raw, &got, z, (uLong)n) != Z_OK || got != raw_n)
    fail_msg("frame data does not inflate to %zu bytes (%lu)", raw_n, (unsigned long)got);
  for (int r = 0; r < fh; r++) {
    const uint8_t *src = raw + (size_t)r * (rb + 1) + 1;
    uint8_t *cur = rows + (size_t)r * rb, *up = r ? cur - rb : NULL;
    int f = raw[(size_t)r * (rb + 1)];
    assert_true(f <= 4);
    for (size_t i = 0; i < rb; i++) {
      int a = i >= 3 ? cur[i - 3] : 0, b = up ? up[i] : 0, c = up && i >= 3 ? up[i - 3] : 0;
      int pred = f == 0 ? 0 : f == 1 ? a : f == 2 ? b : f == 3 ? (a + b) / 2 : pa(a, b, c);
      cur[i] = (uint8_t)(src[i] + pred);
    }
    memcpy(canvas + ((size_t)(y + r) * (size_t)d->w + (size_t)x) * 3, cur, rb);
  }
  free(raw), free(rows);
}

static decoded decode_png(const uint8_t *b, size_t len) {
  decoded d = {0};
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  assert_true(len > 8 && !memcmp(b, sig, 8));
  size_t o = 8, zn = 0, zcap = 1 << 16;
  uint8_t *zbuf = malloc(zcap), *canvas = NULL;
  int fw = 0, fh = 0, fx = 0, fy = 0, have_frame = 0, seen_iend = 0;
  uint32_t seq = 0;
  d.declared = 1;
  while (o + 12 <= len && !seen_iend) {
    uint32_t n = rd32(b + o);
    assert_true(o + 12 + n <= len);
    const uint8_t *type = b + o + 4, *data = b + o + 8;
    uint32_t crc = (uint32_t)crc32(0, type, 4 + n);
    if (crc != rd32(data + n)) fail_msg("chunk %.4s: bad CRC", (const char *)type);
    int is_fc = !memcmp(type, "fcTL", 4), is_end = !memcmp(type, "IEND", 4);
    /* A frame's data ends at the next fcTL or at IEND. */
    if ((is_fc || is_end) && have_frame && zn) {
      draw_frame(&d, canvas, zbuf, zn, fw, fh, fx, fy);
      d.rgb = realloc(d.rgb, (size_t)(d.frames + 1) * (size_t)d.w * (size_t)d.h * 3);
      memcpy(d.rgb + (size_t)d.frames * (size_t)d.w * (size_t)d.h * 3, canvas,
             (size_t)d.w * (size_t)d.h * 3);
      d.frames++, zn = 0, have_frame = 0;
    }
    if (!memcmp(type, "IHDR", 4)) {
      d.w = (int)rd32(data), d.h = (int)rd32(data + 4);
      assert_int_equal(data[8], 8), assert_int_equal(data[9], 2), assert_int_equal(data[12], 0);
      canvas = calloc((size_t)d.w * (size_t)d.h, 3);
      fw = d.w, fh = d.h, fx = fy = 0, have_frame = 1; /* a plain PNG's one frame */
    } else if (!memcmp(type, "acTL", 4)) {
      d.declared = (int)rd32(data);
    } else if (is_fc) {
      assert_int_equal(rd32(data), seq++);
      fw = (int)rd32(data + 4), fh = (int)rd32(data + 8);
      fx = (int)rd32(data + 12), fy = (int)rd32(data + 16);
      assert_true(fw >= 1 && fh >= 1 && fx + fw <= d.w && fy + fh <= d.h);
      assert_int_equal(data[24], 0); /* dispose NONE */
      assert_int_equal(data[25], 0); /* blend SOURCE */
      have_frame = 1;
    } else if (!memcmp(type, "IDAT", 4) || !memcmp(type, "fdAT", 4)) {
      int fd = type[0] == 'f';
      if (fd) assert_int_equal(rd32(data), seq++);
      size_t k = n - (fd ? 4 : 0);
      while (zn + k > zcap) zbuf = realloc(zbuf, zcap *= 2);
      memcpy(zbuf + zn, data + (fd ? 4 : 0), k);
      zn += k;
    }
    seen_iend = is_end;
    o += 12 + n;
  }
  assert_true(seen_iend);
  free(zbuf), free(canvas);
  return d;
}

/* ---- the writer ------------------------------------------------------------------- */

static void paint(uint8_t *rgb, int w, int h, int t) {
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      uint8_t *p = rgb + ((size_t)y * w + x) * 3;
      p[0] = (uint8_t)(x * 3 + y), p[1] = (uint8_t)(y * 5), p[2] = 200;
      if (x >= 5 + 3 * t && x < 15 + 3 * t && y >= 10 && y < 20) p[0] = 255, p[1] = 0, p[2] = 0;
    }
}

static void test_apng_writer(void **state) {
  enum { W = 61, H = 37, N = 9 };
  uint8_t *frames = malloc((size_t)N * W * H * 3);
  shoal_error err = {0};
  env_apng *a;
  assert_int_equal(env_apng_create(&a, W, H, 1, 25, &err), 0);
  for (int t = 0; t < N; t++) {
    /* frame 4 repeats frame 3: a one-pixel frame that changes nothing */
    paint(frames + (size_t)t * W * H * 3, W, H, t == 4 ? 3 : t);
    assert_int_equal(env_apng_add(a, frames + (size_t)t * W * H * 3, &err), 0);
  }
  assert_int_equal(env_apng_frames(a), N);
  uint8_t *png;
  size_t len;
  assert_int_equal(env_apng_finish(a, &png, &len, &err), 0);
  decoded d = decode_png(png, len);
  assert_int_equal(d.w, W), assert_int_equal(d.h, H);
  assert_int_equal(d.frames, N), assert_int_equal(d.declared, N);
  assert_memory_equal(d.rgb, frames, (size_t)N * W * H * 3);
  /* Later frames code only what changed: far smaller than the first. */
  assert_true(len < (size_t)W * H * 3 * 2);
  free(d.rgb), free(png);

  /* One image, and a strip laid out as env_png_strip lays it out. */
  assert_int_equal(env_png_encode(frames, W, H, &png, &len, &err), 0);
  d = decode_png(png, len);
  assert_int_equal(d.frames, 1), assert_int_equal(d.declared, 1);
  assert_memory_equal(d.rgb, frames, (size_t)W * H * 3);
  free(d.rgb), free(png);
  uint8_t *img;
  int SW, SH;
  assert_int_equal(env_strip_compose(frames, 8, W, H, 6, &img, &SW, &SH, &err), 0);
  assert_int_equal(SW, 6 * W + 7 * 2), assert_int_equal(SH, 2 * H + 3 * 2);
  char path[400];
  snprintf(path, sizeof path, "%s/strip.png", g_tmp);
  assert_int_equal(env_png_strip(path, frames, 8, W, H, 6, &err), 0);
  FILE *f = fopen(path, "rb");
  uint8_t *fb = malloc(1 << 20);
  size_t fl = fread(fb, 1, 1 << 20, f);
  fclose(f);
  d = decode_png(fb, fl); /* env_png_strip's file, read by the decoder above */
  assert_int_equal(d.w, SW), assert_int_equal(d.h, SH);
  assert_memory_equal(d.rgb, img, (size_t)SW * SH * 3);
  free(d.rgb), free(fb), free(img), free(frames);

  /* Bad arguments. */
  assert_int_equal(env_apng_create(&a, 0, 5, 1, 25, &err), SHOAL_EINVAL);
  assert_int_equal(env_apng_create(&a, 5, 5, 1, 0, &err), SHOAL_EINVAL);
  assert_int_equal(env_apng_create(&a, 5, 5, 1, 25, &err), 0);
  assert_int_equal(env_apng_set_delay(a, 2, 0, &err), SHOAL_EINVAL);
  assert_int_equal(env_apng_set_delay(a, 65536, 50, &err), SHOAL_EINVAL);
  assert_int_equal(env_apng_finish(a, &png, &len, &err), SHOAL_EINVAL);
}

/* ---- media in the store ------------------------------------------------------------- */

static void rname(char *out, size_t cap, const char *what) {
  snprintf(out, cap, "%s-%s", g_prefix, what);
}

static store *open_store(void) {
  store *st;
  shoal_error err = {0};
  if (store_open(&st, g_uri, &err)) fail_msg("store_open: %s", err.msg);
  return st;
}

static void test_media_round_trip(void **state) {
  store *st = open_store();
  shoal_error err = {0};
  char run[STORE_NAME_MAX];
  rname(run, sizeof run, "media");
  assert_int_equal(store_run_create(st, run, "x: 1\n", STORE_RUN_FINISHED, &err), 0);
  store_media_meta m;
  store_media_meta_init(&m);
  snprintf(m.run, sizeof m.run, "%s", run);
  snprintf(m.name, sizeof m.name, "v3-ep1.apng");
  snprintf(m.content_type, sizeof m.content_type, "image/apng");
  snprintf(m.env, sizeof m.env, "CartPole-v1");
  m.version = 3, m.episode = 1, m.ret = 187.5, m.length = 188, m.frames = 188;
  size_t n = 3 * 1024 * 1024 + 17; /* above GridFS's 1 MB chunk: several chunks */
  uint8_t *b = malloc(n);
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 131 + (i >> 11));
  assert_int_equal(store_media_put(st, &m, b, n, &err), 0);
  m.version = 4, snprintf(m.name, sizeof m.name, "a-strip.png"), m.ret = NAN;
  assert_int_equal(store_media_put(st, &m, "png!", 4, &err), 0);
  /* Once written, never replaced: EEXIST naming the run and the item (on MongoDB the
   * duplicate shows when GridFS writes the files document, at the stream's close). */
  err = (shoal_error){0};
  assert_int_equal(store_media_put(st, &m, "other", 5, &err), SHOAL_EEXIST);
  assert_non_null(strstr(err.msg, "a-strip.png"));
  assert_non_null(strstr(err.msg, run));

  void *got;
  size_t gl;
  store_media_meta gm;
  assert_int_equal(store_media_get(st, run, "v3-ep1.apng", &gm, &got, &gl, &err), 0);
  assert_int_equal(gl, n);
  assert_memory_equal(got, b, n);
  free(got);
  assert_string_equal(gm.run, run);
  assert_string_equal(gm.content_type, "image/apng");
  assert_string_equal(gm.env, "CartPole-v1");
  assert_int_equal(gm.version, 3), assert_int_equal(gm.episode, 1);
  assert_int_equal(gm.length, 188), assert_int_equal(gm.frames, 188);
  assert_true(gm.ret == 187.5);
  assert_int_equal(gm.size, n);
  assert_true(gm.created_time > 1.7e9);
  assert_int_equal(store_media_get(st, run, "a-strip.png", &gm, &got, &gl, &err), 0);
  assert_true(isnan(gm.ret));
  assert_memory_equal(got, "png!", 4);
  free(got);

  store_media_meta *all;
  size_t k;
  assert_int_equal(store_media_list(st, run, &all, &k, &err), 0);
  assert_int_equal(k, 2);
  assert_string_equal(all[0].name, "a-strip.png"); /* sorted by name */
  assert_string_equal(all[1].name, "v3-ep1.apng");
  assert_int_equal(all[1].size, n);
  free(all);

  /* Missing items and runs, bad names. */
  assert_int_equal(store_media_get(st, run, "nope.png", NULL, &got, &gl, &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, "nope.png"));
  assert_int_equal(store_media_list(st, "no-such-run-xyz", &all, &k, &err), SHOAL_ENOENT);
  snprintf(m.run, sizeof m.run, "no-such-run-xyz");
  assert_int_equal(store_media_put(st, &m, "x", 1, &err), SHOAL_ENOENT);
  snprintf(m.run, sizeof m.run, "%s", run);
  const char *bad[] = {"../x", "a/b", ".hidden", "x.json", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(m.name, sizeof m.name, "%s", bad[i]);
    assert_int_equal(store_media_put(st, &m, "x", 1, &err), SHOAL_EINVAL);
    assert_int_equal(store_media_get(st, run, bad[i], NULL, &got, &gl, &err), SHOAL_EINVAL);
  }

  if (g_file) { /* a damaged item (cut short) is reported, not returned */
    char p[900];
    snprintf(p, sizeof p, "%s/store/%s/media/v3-ep1.apng", g_dir, run);
    assert_int_equal(truncate(p, 1000), 0);
    assert_int_equal(store_media_get(st, run, "v3-ep1.apng", NULL, &got, &gl, &err), SHOAL_EFORMAT);
    assert_non_null(strstr(err.msg, "damaged"));
  }
  free(b);
  store_close(st);
}

/* Writers of one media name at the same time: one copy is stored, whole; every other
 * writer gets SHOAL_EEXIST naming the run and the item. */
enum { RACERS = 6, RACE_BYTES = 2 * 1024 * 1024 + 99 };
typedef struct {
  store *st;
  const char *run;
  int idx, rc;
  shoal_error err;
  pthread_barrier_t *go;
} racer;

static void *media_racer(void *p) {
  racer *a = p;
  store_media_meta m;
  store_media_meta_init(&m);
  snprintf(m.run, sizeof m.run, "%s", a->run);
  snprintf(m.name, sizeof m.name, "raced.png");
  snprintf(m.content_type, sizeof m.content_type, "image/png");
  m.episode = a->idx;
  uint8_t *b = malloc(RACE_BYTES);
  memset(b, 'a' + a->idx, RACE_BYTES);
  pthread_barrier_wait(a->go);
  a->rc = store_media_put(a->st, &m, b, RACE_BYTES, &a->err);
  free(b);
  return NULL;
}

static void test_media_same_name_racing(void **state) {
  store *st = open_store();
  shoal_error err = {0};
  char run[STORE_NAME_MAX];
  rname(run, sizeof run, "race");
  assert_int_equal(store_run_create(st, run, "x: 1\n", STORE_RUN_FINISHED, &err), 0);
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, RACERS);
  pthread_t th[RACERS];
  racer a[RACERS];
  for (int i = 0; i < RACERS; i++) {
    a[i] = (racer){.st = st, .run = run, .idx = i, .go = &go};
    assert_int_equal(pthread_create(&th[i], NULL, media_racer, &a[i]), 0);
  }
  int won = -1;
  for (int i = 0; i < RACERS; i++) {
    pthread_join(th[i], NULL);
    if (a[i].rc == 0) {
      assert_int_equal(won, -1);
      won = i;
      continue;
    }
    if (a[i].rc != SHOAL_EEXIST) fail_msg("writer %d: %d %s", i, a[i].rc, a[i].err.msg);
    assert_non_null(strstr(a[i].err.msg, "raced.png"));
    assert_non_null(strstr(a[i].err.msg, run));
  }
  pthread_barrier_destroy(&go);
  assert_true(won >= 0);
  void *got;
  size_t gl;
  store_media_meta gm;
  assert_int_equal(store_media_get(st, run, "raced.png", &gm, &got, &gl, &err), 0);
  assert_int_equal(gl, RACE_BYTES);
  assert_int_equal(gm.episode, won);
  for (size_t i = 0; i < gl; i++)
    if (((uint8_t *)got)[i] != 'a' + won) fail_msg("byte %zu is not the winner's", i);
  free(got);
  store_media_meta *all;
  size_t k;
  assert_int_equal(store_media_list(st, run, &all, &k, &err), 0);
  assert_int_equal(k, 1);
  free(all);
  store_close(st);
}

/* ---- shoal eval --render, shoal media ---------------------------------------------- */

static char *run_cmd(const char *cmd, int *status) {
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t cap = 1 << 16;
  char *out = calloc(1, cap);
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = 0;
  int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  printf("$ %s\n%s", cmd, out);
  return out;
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s: %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n + 1);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* configs/NAME loaded with schema: the config (caller destroys it) and its text in *yaml
 * (caller frees it). */
static config *load_config(const char *name, const cfg_key *keys, int nkeys, char **yaml) {
  const char *src = getenv("SHOAL_SOURCE_DIR");
  char path[600];
  snprintf(path, sizeof path, "%s/configs/%s", src ? src : ".", name);
  size_t len;
  *yaml = (char *)slurp(path, &len);
  (*yaml)[len] = 0;
  shoal_error err = {0};
  config *cfg = config_create(keys, nkeys, &err);
  if (!cfg || config_load_string(cfg, *yaml, path, &err)) fail_msg("config: %s", err.msg);
  return cfg;
}

/* Run `run` with config text yaml and one snapshot (version 5) of bytes. */
static void store_run_snapshot(store *st, const char *run, const char *yaml, const uint8_t *bytes,
                               size_t nb) {
  shoal_error err = {0};
  assert_int_equal(store_run_create(st, run, yaml, STORE_RUN_FINISHED, &err), 0);
  store_snapshot_meta m = {.version = 5, .env_steps = 1000, .score = NAN};
  snprintf(m.run, sizeof m.run, "%s", run);
  assert_int_equal(store_snapshot_put(st, &m, bytes, nb, &err), 0);
}

/* An Ape-X run of the config file's env with one snapshot: a fresh (untrained)
 * network, which fails fast, so episodes are short. */
static void make_apex_run(store *st, const char *run, const char *config_file) {
  int nkeys;
  const cfg_key *keys = apex_schema(&nkeys);
  char *yaml;
  config *cfg = load_config(config_file, keys, nkeys, &yaml);
  shoal_error err = {0};
  env *e;
  if (env_make(&e, config_string(cfg, "env.id"), &err)) fail_msg("env: %s", err.msg);
  const env_spec *sp = env_get_spec(e);
  dqn_config dc = apex_dqn_config(cfg, sp->obs.ndim, sp->obs.shape, (int)sp->act.n);
  env_destroy(e);
  dqn *q = dqn_create(&dc, NN_CPU, false, &err);
  if (!q) fail_msg("dqn: %s", err.msg);
  uint8_t *bytes;
  size_t nb;
  assert_int_equal(nn_model_save_buffer(dqn_model(q), &bytes, &nb, &err), 0);
  store_run_snapshot(st, run, yaml, bytes, nb);
  free(bytes), free(yaml);
  dqn_destroy(q);
  config_destroy(cfg);
}

/* An IMPALA run of CartPole-v1 with one snapshot of a fresh actor-critic. */
static void make_onpolicy_run(store *st, const char *run) {
  int nkeys;
  const cfg_key *keys = onpolicy_schema(&nkeys);
  char *yaml;
  config *cfg = load_config("cartpole-impala.yaml", keys, nkeys, &yaml);
  shoal_error err = {0};
  op_spec s;
  op_agent a;
  op_norm z = {0};
  if (op_spec_from_config(cfg, &s, &err) ||
      op_agent_from_config(cfg, &s, 4, false, NN_CPU, &a, &err) ||
      (s.norm_obs && op_norm_init(&z, (int)s.obs_n, &err)))
    fail_msg("agent: %s", err.msg);
  uint8_t *bytes;
  size_t nb;
  assert_int_equal(op_snapshot_encode(&a, &s, &z, &bytes, &nb, &err), 0);
  store_run_snapshot(st, run, yaml, bytes, nb);
  free(bytes), free(yaml);
  op_agent_destroy(&a);
  op_norm_free(&z);
  config_destroy(cfg);
}

/* IMPALA and PPO runs render as Ape-X runs do (one evaluation loop for both). */
static void test_eval_render_onpolicy(void **state) {
  const char *bin = getenv("SHOAL_BINARY_DIR");
  char shoal[600], cmd[4000], run[STORE_NAME_MAX];
  snprintf(shoal, sizeof shoal, "%s/bin/shoal", bin ? bin : ".");
  rname(run, sizeof run, "evalop");
  store *st = open_store();
  make_onpolicy_run(st, run);
  int status;
  snprintf(cmd, sizeof cmd,
           "'%s' eval %s --store '%s' --episodes 2 --seed 5 --render --frames 8 2>&1", shoal, run,
           g_uri);
  char *out = run_cmd(cmd, &status);
  assert_int_equal(status, 0);
  assert_non_null(strstr(out, "over 2 episodes"));
  assert_non_null(strstr(out, "stored v5-s5-ep1.apng"));
  free(out);
  shoal_error err = {0};
  store_media_meta *all;
  size_t k;
  assert_int_equal(store_media_list(st, run, &all, &k, &err), 0);
  assert_int_equal(k, 2);
  assert_true(all[1].length >= 8 && all[1].ret == (double)all[1].length);
  assert_string_equal(all[0].name, "v5-s5-ep1-strip.png");
  assert_int_equal(all[0].frames, 8); /* --frames 8: 8, evenly spaced */
  free(all);
  store_close(st);
}

static void test_eval_render_to_media(void **state) {
  const char *bin = getenv("SHOAL_BINARY_DIR");
  char shoal[600], cmd[4000], run[STORE_NAME_MAX];
  snprintf(shoal, sizeof shoal, "%s/bin/shoal", bin ? bin : ".");
  rname(run, sizeof run, "evalrec");
  store *st = open_store();
  make_apex_run(st, run, "cartpole-apex.yaml");
  int status;
  snprintf(cmd, sizeof cmd,
           "'%s' eval %s --store '%s' --episodes 3 --seed 77 --render --record 2 2>&1", shoal, run,
           g_uri);
  char *out = run_cmd(cmd, &status);
  assert_int_equal(status, 0);
  assert_non_null(strstr(out, "stored v5-s77-ep1.apng"));
  assert_non_null(strstr(out, "stored v5-s77-ep2-strip.png"));
  free(out);
  /* The same snapshot and seed again: the same episodes, already stored. */
  out = run_cmd(cmd, &status);
  assert_int_equal(status, 0);
  assert_non_null(strstr(out, "v5-s77-ep1.apng is already stored"));
  free(out);

  shoal_error err = {0};
  store_media_meta *all;
  size_t k;
  assert_int_equal(store_media_list(st, run, &all, &k, &err), 0);
  assert_int_equal(k, 4);
  store_media_meta ep1 = all[0]; /* v5-s77-ep1-strip.png < v5-s77-ep1.apng */
  assert_string_equal(all[0].name, "v5-s77-ep1-strip.png");
  assert_string_equal(all[1].name, "v5-s77-ep1.apng");
  for (size_t i = 0; i < k; i++) {
    assert_int_equal(all[i].version, 5);
    assert_string_equal(all[i].env, "CartPole-v1");
    assert_true(all[i].length >= 8 && all[i].length <= 500);
    assert_true(all[i].ret == (double)all[i].length); /* CartPole: +1 a step */
  }
  int64_t length = all[1].length, frames = all[1].frames;
  assert_int_equal(frames, length); /* every step of a 500-step-limited episode */
  assert_int_equal(all[1].episode, 1);
  free(all);

  snprintf(cmd, sizeof cmd, "'%s' media ls %s --store '%s' 2>&1", shoal, run, g_uri);
  out = run_cmd(cmd, &status);
  assert_int_equal(status, 0);
  assert_non_null(strstr(out, "v5-s77-ep2.apng"));
  assert_non_null(strstr(out, "image/apng"));
  free(out);
  char apng_path[400], strip_path[400];
  snprintf(apng_path, sizeof apng_path, "%s/ep1.apng", g_tmp);
  snprintf(strip_path, sizeof strip_path, "%s/ep1-strip.png", g_tmp);
  snprintf(cmd, sizeof cmd,
           "'%s' media get %s v5-s77-ep1.apng -o '%s' --store '%s' 2>&1 && "
           "'%s' media get %s v5-s77-ep1-strip.png --store '%s' -o '%s' 2>&1",
           shoal, run, apng_path, g_uri, shoal, run, g_uri, strip_path);
  out = run_cmd(cmd, &status);
  assert_int_equal(status, 0);
  free(out);
  snprintf(cmd, sizeof cmd, "'%s' media get %s nope.png --store '%s' -o /dev/null 2>&1", shoal, run,
           g_uri);
  out = run_cmd(cmd, &status);
  assert_int_equal(status, 1);
  assert_non_null(strstr(out, "nope.png"));
  free(out);

  /* The animation: one 600x400 frame per step; frame 0 is the initial state of copy
   * 0 after a reset with the eval's seed, and equals the strip's first cell. */
  size_t len;
  uint8_t *b = slurp(apng_path, &len);
  decoded a = decode_png(b, len);
  free(b);
  assert_int_equal(a.w, 600), assert_int_equal(a.h, 400);
  assert_int_equal(a.frames, frames), assert_int_equal(a.declared, frames);
  b = slurp(strip_path, &len);
  decoded s = decode_png(b, len);
  free(b);
  int cells = (int)ep1.frames, cols = env_strip_columns(cells), rows = (cells + cols - 1) / cols;
  assert_int_equal(cells, ep1.length < 12 ? ep1.length : 12); /* --frames' default: 12 */
  assert_int_equal(s.w, cols * 600 + (cols + 1) * 2);
  assert_int_equal(s.h, rows * 400 + (rows + 1) * 2);
  for (int y = 0; y < 400; y++)
    assert_memory_equal(a.rgb + (size_t)y * 600 * 3, s.rgb + ((size_t)(y + 2) * s.w + 2) * 3,
                        600 * 3);
  env_vec *ev;
  assert_int_equal(env_vec_create(&ev, "CartPole-v1", 3, NULL, &err), 0);
  float obs[3 * 4];
  env_vec_reset(ev, 77, obs, NULL);
  uint8_t *frame0 = malloc(600 * 400 * 3);
  assert_int_equal(env_vec_render(ev, 0, frame0, &err), 0);
  assert_memory_equal(a.rgb, frame0, 600 * 400 * 3);
  /* The frames differ: the cart and pole move. */
  assert_memory_not_equal(a.rgb, a.rgb + (size_t)(a.frames - 1) * 600 * 400 * 3, 600 * 400 * 3);
  free(frame0);
  env_vec_destroy(ev);

  /* PIL, when Debian's python3 has it (python3-pil), reads the same frame count and
   * size, and the same pixels in the first and the last frame. */
  if (system("/usr/bin/python3 -c 'import PIL' 2>/dev/null") == 0) {
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"from PIL import Image; im = Image.open('%s'); "
             "print('pil', im.n_frames, im.size[0], im.size[1]); "
             "open('%s/f0.rgb', 'wb').write(im.convert('RGB').tobytes()); "
             "im.seek(im.n_frames - 1); "
             "open('%s/fl.rgb', 'wb').write(im.convert('RGB').tobytes())\"",
             apng_path, g_tmp, g_tmp);
    out = run_cmd(cmd, &status);
    assert_int_equal(status, 0);
    char want[80];
    snprintf(want, sizeof want, "pil %d 600 400", a.frames);
    assert_non_null(strstr(out, want));
    free(out);
    for (int last = 0; last < 2; last++) {
      char fp[400];
      snprintf(fp, sizeof fp, "%s/%s.rgb", g_tmp, last ? "fl" : "f0");
      uint8_t *px = slurp(fp, &len);
      assert_int_equal(len, 600 * 400 * 3);
      assert_memory_equal(px, a.rgb + (size_t)(last ? a.frames - 1 : 0) * 600 * 400 * 3, len);
      free(px);
    }
  } else {
    printf("note: python3-pil is not installed; the APNG was checked by the decoder here\n");
  }
  free(a.rgb), free(s.rgb);
  store_close(st);
}

/* MinAtar has no step limit of its own: its short episodes keep every step too (the
 * stride once came from a 27,000-step bound, 1 frame in 27). */
static void test_eval_render_minatar(void **state) {
  const char *bin = getenv("SHOAL_BINARY_DIR");
  char shoal[600], cmd[4000], run[STORE_NAME_MAX];
  snprintf(shoal, sizeof shoal, "%s/bin/shoal", bin ? bin : ".");
  rname(run, sizeof run, "evalmb");
  store *st = open_store();
  make_apex_run(st, run, "minatar-breakout-apex.yaml");
  int status;
  snprintf(cmd, sizeof cmd,
           "'%s' eval %s --store '%s' --episodes 2 --seed 3 --render --record 2 2>&1", shoal, run,
           g_uri);
  char *out = run_cmd(cmd, &status);
  assert_int_equal(status, 0);
  free(out);
  shoal_error err = {0};
  store_media_meta *all;
  size_t k;
  assert_int_equal(store_media_list(st, run, &all, &k, &err), 0);
  assert_int_equal(k, 4);
  for (size_t i = 0; i < k; i++) {
    assert_string_equal(all[i].env, "MinAtar/Breakout-v1");
    assert_true(all[i].length >= 2 && all[i].length < 1000);
    if (strstr(all[i].name, ".apng")) assert_int_equal(all[i].frames, all[i].length);
  }
  free(all);
  store_close(st);
}

/* ---- shoal dataset ------------------------------------------------------------------ */

static void test_dataset_cli(void **state) {
  const char *bin = getenv("SHOAL_BINARY_DIR");
  const char *dir = getenv("SHOAL_FASHION_MNIST") ? getenv("SHOAL_FASHION_MNIST")
                                                  : "/usr/share/datasets/fashion-mnist";
  char shoal[600], cmd[3000], name[STORE_NAME_MAX], im[600], lb[600], trl[600];
  snprintf(shoal, sizeof shoal, "%s/bin/shoal", bin ? bin : ".");
  snprintf(im, sizeof im, "%s/t10k-images-idx3-ubyte.gz", dir);
  snprintf(lb, sizeof lb, "%s/t10k-labels-idx1-ubyte.gz", dir);
  snprintf(trl, sizeof trl, "%s/train-labels-idx1-ubyte.gz", dir);
  if (access(im, R_OK) != 0) {
    printf("SKIPPED: Fashion-MNIST is not in %s\n", dir);
    skip();
  }
  rname(name, sizeof name, "fm-test");
  int status;
  snprintf(cmd, sizeof cmd, "'%s' dataset put %s '%s' '%s' --chunk-records 1000 --store '%s' 2>&1",
           shoal, name, im, lb, g_uri);
  char *out = run_cmd(cmd, &status);
  assert_int_equal(status, 0);
  assert_non_null(strstr(out, "10000 records of 785 bytes in 10 chunks of 1000"));
  free(out);
  out = run_cmd(cmd, &status); /* once written, never replaced */
  assert_int_equal(status, 1);
  assert_non_null(strstr(out, "exists"));
  free(out);
  char other[STORE_NAME_MAX];
  rname(other, sizeof other, "mixed");
  snprintf(cmd, sizeof cmd, "'%s' dataset put %s '%s' '%s' --store '%s' 2>&1", shoal, other, im,
           trl, g_uri);
  out = run_cmd(cmd, &status); /* 10,000 images, 60,000 labels */
  assert_int_equal(status, 1);
  assert_non_null(strstr(out, "60000"));
  free(out);
  snprintf(cmd, sizeof cmd, "'%s' dataset put %s x=/etc/hostname --store '%s' 2>&1", shoal, other,
           g_uri);
  out = run_cmd(cmd, &status);
  assert_int_equal(status, 1);
  assert_non_null(strstr(out, "not an IDX file"));
  free(out);

  snprintf(cmd, sizeof cmd, "'%s' dataset ls --store '%s' 2>&1", shoal, g_uri);
  out = run_cmd(cmd, &status);
  assert_int_equal(status, 0);
  assert_non_null(strstr(out, name));
  assert_non_null(strstr(out, "images u8(28,28), labels u8()"));
  assert_null(strstr(out, other)); /* the failed puts left nothing */
  free(out);
  snprintf(cmd, sizeof cmd, "'%s' dataset info %s --verify --store '%s' 2>&1", shoal, name, g_uri);
  out = run_cmd(cmd, &status);
  assert_int_equal(status, 0);
  assert_non_null(strstr(out, "10 of 10 chunks good"));
  free(out);

  /* The records are the files' records, in order. */
  store *st = open_store();
  shoal_error err = {0};
  data_idx di, dl;
  assert_int_equal(data_idx_read(im, &di, &err), 0);
  assert_int_equal(data_idx_read(lb, &dl, &err), 0);
  store_dataset_info info;
  assert_int_equal(store_dataset_info_get(st, name, &info, &err), 0);
  uint8_t *chunk = malloc(1000 * 785);
  for (uint32_t c = 0; c < info.chunks; c++) {
    uint32_t n;
    assert_int_equal(store_dataset_chunk_read(st, &info, c, chunk, 1000 * 785, &n, &err), 0);
    assert_int_equal(n, 1000);
    for (uint32_t r = 0; r < n; r++) {
      assert_memory_equal(chunk + r * 785, di.data + (size_t)(c * 1000 + r) * 784, 784);
      assert_int_equal(chunk[r * 785 + 784], dl.data[c * 1000 + r]);
    }
  }
  free(chunk);
  store_dataset_info_clear(&info);
  data_idx_free(&di), data_idx_free(&dl);
  store_close(st);

  if (g_file) { /* a damaged chunk: --verify names it and fails */
    char p[900];
    snprintf(p, sizeof p, "%s/store/_datasets/%s/chunk-000007.bin", g_dir, name);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    fseek(f, 5000, SEEK_SET);
    fputc(0xee ^ 0x11, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' dataset info %s --verify --store '%s' 2>&1", shoal, name,
             g_uri);
    out = run_cmd(cmd, &status);
    assert_int_equal(status, 1);
    assert_non_null(strstr(out, "chunk 7 of 10"));
    assert_non_null(strstr(out, "9 of 10 chunks good"));
    free(out);
  }
  snprintf(cmd, sizeof cmd,
           "'%s' dataset rm %s --store '%s' 2>&1 && '%s' dataset info %s --store '%s' 2>&1", shoal,
           name, g_uri, shoal, name, g_uri);
  out = run_cmd(cmd, &status);
  assert_int_equal(status, 1);
  assert_non_null(strstr(out, "removed"));
  assert_non_null(strstr(out, "no dataset"));
  free(out);
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "file";
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(g_prefix, sizeof g_prefix, "t%ld-%ld", (long)getpid(), (long)(ts.tv_nsec % 100000));
  snprintf(g_tmp, sizeof g_tmp, "/tmp/shoal-test-media-XXXXXX");
  if (!mkdtemp(g_tmp)) return perror("mkdtemp"), 1;
  if (!strcmp(backend, "mongodb")) {
    int mrc = mongo_test_uri(g_uri, sizeof g_uri, "shoal_test_media");
    if (mrc) {
      rmdir(g_tmp);
      return mrc;
    }
  } else if (!strcmp(backend, "file")) {
    g_file = 1;
    snprintf(g_dir, sizeof g_dir, "%s", g_tmp);
    snprintf(g_uri, sizeof g_uri, "file://%s/store", g_dir);
  } else {
    fprintf(stderr, "usage: %s file|mongodb\n", argv[0]);
    return 2;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_apng_writer),
      cmocka_unit_test(test_media_round_trip),
      cmocka_unit_test(test_media_same_name_racing),
      cmocka_unit_test(test_eval_render_to_media),
      cmocka_unit_test(test_eval_render_onpolicy),
      cmocka_unit_test(test_eval_render_minatar),
      cmocka_unit_test(test_dataset_cli),
  };
  char group[64];
  snprintf(group, sizeof group, "media_%s", backend);
  int rc = cmocka_run_group_tests_name(group, tests, NULL, NULL);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
  if (system(cmd) != 0) rc = 1;
  return rc;
}
