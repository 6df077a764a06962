/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_nn_checkpoint.c — safetensors checkpoints: round trips through a file and
 * a buffer, batch-norm state, PyTorch interoperability (a file that
 * tests/reference/nn_train.py wrote from a torch model loads into the same shoal model
 * and gives torch's outputs; Python reads shoal's file when /usr/bin/python3 is there),
 * and bad files: wrong shape, missing and extra tensors, truncation, garbage headers,
 * overlapping offsets, NaN data. Every failed load must leave the model unchanged.
 */
#define _GNU_SOURCE /* memmem */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nn/nn.h"
#include "nn_train_fixture.h"

static char DIR_[256];

static int setup(void **state) {
  snprintf(DIR_, sizeof DIR_, "/tmp/shoal_ckpt_XXXXXX");
  return mkdtemp(DIR_) ? 0 : -1;
}

static int teardown(void **state) {
  DIR *d = opendir(DIR_);
  if (d) {
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
      if (e->d_name[0] != '.') {
        snprintf(p, sizeof p, "%s/%s", DIR_, e->d_name);
        unlink(p);
      }
    closedir(d);
  }
  rmdir(DIR_);
  return 0;
}

static void path_in_dir(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", DIR_, name);
}

/* The model of tests/reference/nn_train.py's Net: dense 6 -> 8, batch norm, relu,
 * dense 3. hidden lets a test build a mis-shaped twin; with_bn a model lacking bn1. */
static nn_model *make_net(int hidden, bool with_bn, uint64_t seed) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  if (!m) fail_msg("create: %s", err.msg);
  nn_input(m, 6, 1, 1);
  nn_dense(m, "fc1", hidden);
  if (with_bn) nn_batchnorm(m, "bn1", 1e-5f, 0.1f);
  nn_activation(m, "act", NN_RELU, 0);
  nn_dense(m, "out", 3);
  if (nn_model_build(m, 16, seed, &err)) fail_msg("build: %s", err.msg);
  return m;
}

/* A few training-mode forwards so the running statistics are not their initial 0/1. */
static void move_running_stats(nn_model *m) {
  float x[16 * 6];
  shoal_rng r;
  shoal_rng_seed(&r, 77);
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 16 * 6; i++) x[i] = (float)(2 * shoal_rng_normal(&r) + 1);
    const float *y;
    assert_int_equal(nn_model_forward(m, x, 16, &y, NULL), 0);
  }
}

typedef struct snapshot {
  float *p, *s;
  size_t np, ns;
} snapshot;

static snapshot snap(nn_model *m) {
  snapshot t;
  const float *p = nn_model_params(m, &t.np), *s = nn_model_state(m, &t.ns);
  t.p = malloc((t.np + 1) * sizeof(float));
  t.s = malloc((t.ns + 1) * sizeof(float));
  assert_non_null(t.p);
  assert_non_null(t.s);
  memcpy(t.p, p, t.np * sizeof(float));
  if (t.ns) memcpy(t.s, s, t.ns * sizeof(float));
  return t;
}

static void assert_unchanged(nn_model *m, snapshot *t) {
  size_t np, ns;
  const float *p = nn_model_params(m, &np), *s = nn_model_state(m, &ns);
  assert_int_equal(np, t->np);
  assert_int_equal(ns, t->ns);
  assert_memory_equal(p, t->p, np * sizeof(float));
  if (ns) assert_memory_equal(s, t->s, ns * sizeof(float));
  free(t->p);
  free(t->s);
}

static void assert_same_tensors(nn_model *a, nn_model *b) {
  size_t na, nb, sa, sb;
  const float *pa = nn_model_params(a, &na), *pb = nn_model_params(b, &nb);
  const float *ta = nn_model_state(a, &sa), *tb = nn_model_state(b, &sb);
  assert_int_equal(na, nb);
  assert_int_equal(sa, sb);
  assert_memory_equal(pa, pb, na * sizeof(float));
  if (sa) assert_memory_equal(ta, tb, sa * sizeof(float));
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static void write_file(const char *path, const uint8_t *buf, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, len, f), len);
  fclose(f);
}

static int count_files(void) {
  DIR *d = opendir(DIR_);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* ---- round trips ------------------------------------------------------------------------ */

static void test_round_trip_file_with_batchnorm_state(void **state) {
  nn_model *a = make_net(8, true, 1), *b = make_net(8, true, 2);
  move_running_stats(a);
  char path[512];
  path_in_dir(path, sizeof path, "a.safetensors");
  shoal_error err = {0};
  assert_int_equal(nn_model_save(a, path, &err), 0);
  assert_int_equal(count_files(), 1); /* the temporary file was renamed, not left */
  /* the layout: u64 N, N % 8 == 0, '{', every tensor named as torch names it */
  size_t len;
  uint8_t *buf = read_file(path, &len);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
  assert_int_equal(n % 8, 0);
  assert_true(8 + n <= len);
  assert_int_equal(buf[8], '{');
  char *h = strndup((const char *)buf + 8, n);
  const char *names[] = {"fc1.weight",
                         "fc1.bias",
                         "bn1.weight",
                         "bn1.bias",
                         "bn1.running_mean",
                         "bn1.running_var",
                         "bn1.num_batches_tracked",
                         "out.weight",
                         "out.bias"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\"", names[i]);
    if (!strstr(h, key)) fail_msg("header lacks %s: %s", key, h);
  }
  assert_non_null(strstr(h, "\"bn1.num_batches_tracked\":{\"dtype\":\"F32\",\"shape\":[]"));
  assert_non_null(strstr(h, "\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[8,6]"));
  free(h);
  free(buf);

  assert_int_equal(nn_model_load(b, path, &err), 0);
  assert_same_tensors(a, b);
  size_t ns;
  const float *st = nn_model_state(b, &ns);
  bool moved = false;
  for (size_t i = 0; i < ns; i++) moved |= st[i] != 0.0f && st[i] != 1.0f;
  assert_true(moved); /* the running statistics did travel */
  /* saving again over the same path replaces it atomically */
  assert_int_equal(nn_model_save(b, path, &err), 0);
  assert_int_equal(count_files(), 1);
  unlink(path);
  nn_model_destroy(a);
  nn_model_destroy(b);
}

static void test_round_trip_buffer(void **state) {
  nn_model *a = make_net(8, true, 3), *b = make_net(8, true, 4);
  move_running_stats(a);
  uint8_t *buf = NULL;
  size_t len = 0;
  shoal_error err = {0};
  assert_int_equal(nn_model_save_buffer(a, &buf, &len, &err), 0);
  size_t np, ns;
  nn_model_params(a, &np);
  nn_model_state(a, &ns);
  assert_true(len > (np + ns) * 4 + 8);
  assert_int_equal(nn_model_load_buffer(b, buf, len, &err), 0);
  assert_same_tensors(a, b);
  /* the same forward afterwards, in evaluation mode */
  nn_model_set_training(a, false);
  nn_model_set_training(b, false);
  float x[2 * 6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 1, 2, 3, -4, 5, -6};
  const float *ya, *yb;
  float keep[6];
  assert_int_equal(nn_model_forward(a, x, 2, &ya, NULL), 0);
  memcpy(keep, ya, sizeof keep);
  assert_int_equal(nn_model_forward(b, x, 2, &yb, NULL), 0);
  assert_memory_equal(keep, yb, sizeof keep);
  free(buf);
  nn_model_destroy(a);
  nn_model_destroy(b);
}

/* ---- PyTorch interoperability ------------------------------------------------------------ */

static void load_torch_file(const char *file) {
  fx_file fx;
  assert_int_equal(fx_load(&fx, "checkpoint.txt"), 0);
  char path[1024];
  fx_path(path, sizeof path, file);
  nn_model *m = make_net(8, true, 5);
  shoal_error err = {0};
  if (nn_model_load(m, path, &err)) fail_msg("load %s: %s", path, err.msg);
  /* every tensor holds torch's values */
  for (int i = 0; i < nn_model_tensor_count(m); i++) {
    nn_tensor_info t;
    assert_int_equal(nn_model_tensor(m, i, &t), 0);
    char key[96];
    snprintf(key, sizeof key, "ck.%s", t.name);
    int n = 0;
    const double *ref = fx_get(&fx, key, &n);
    if (!ref) fail_msg("fixture lacks %s", key);
    assert_int_equal(n, t.numel);
    size_t cnt;
    const float *base = t.trainable ? nn_model_params(m, &cnt) : nn_model_state(m, &cnt);
    for (int j = 0; j < n; j++)
      if (base[t.offset + j] != (float)ref[j])
        fail_msg("%s[%d] = %g, torch %g", t.name, j, base[t.offset + j], ref[j]);
  }
  /* and the model computes what torch computed with them (evaluation mode) */
  nn_model_set_training(m, false);
  float *x = fx_floats(&fx, "ck.x", NULL);
  int ny = 0;
  const double *yref = fx_get(&fx, "ck.y", &ny);
  assert_non_null(x);
  assert_int_equal(ny, 4 * 3);
  const float *y;
  assert_int_equal(nn_model_forward(m, x, 4, &y, &err), 0);
  for (int i = 0; i < ny; i++)
    if (fabs(y[i] - yref[i]) > 1e-5 + 1e-5 * fabs(yref[i]))
      fail_msg("y[%d] = %.7g, torch %.7g", i, y[i], yref[i]);
  free(x);
  fx_free(&fx);
  nn_model_destroy(m);
}

static void test_loads_torch_written_file(void **state) {
  /* F32 throughout, tensors in another order than shoal's, with __metadata__ */
  load_torch_file("torch_net.safetensors");
  /* as torch itself stores it: num_batches_tracked as an I64 scalar */
  load_torch_file("torch_net_i64.safetensors");
}

/* A conv model from torch: 4-D weights, batch norm 2-d, and a transposed convolution
 * (torch's weight layout (in, out, kh, kw)); the outputs must match torch's. */
static void test_loads_torch_conv_model(void **state) {
  fx_file fx;
  assert_int_equal(fx_load(&fx, "checkpoint.txt"), 0);
  nn_model *m = nn_model_create(NN_CPU, NULL);
  nn_input(m, 1, 6, 6);
  nn_conv2d(m, "conv", 4, 3, 3, 1, 1, 1);
  nn_batchnorm(m, "bn", 1e-5f, 0.1f);
  nn_activation(m, "act", NN_RELU, 0);
  nn_conv_transpose2d(m, "convt", 2, 4, 4, 2, 1, 0);
  nn_dense(m, "fc", 3);
  shoal_error err = {0};
  if (nn_model_build(m, 2, 9, &err)) fail_msg("build: %s", err.msg);
  char path[1024];
  fx_path(path, sizeof path, "torch_convnet.safetensors");
  if (nn_model_load(m, path, &err)) fail_msg("load: %s", err.msg);
  nn_tensor_info t;
  assert_int_equal(nn_model_find_tensor(m, "convt.weight", &t), 0);
  assert_int_equal(t.ndim, 4);
  assert_true(t.shape[0] == 4 && t.shape[1] == 2 && t.shape[2] == 4 && t.shape[3] == 4);
  nn_model_set_training(m, false);
  float *x = fx_floats(&fx, "cv.x", NULL);
  int ny = 0;
  const double *yref = fx_get(&fx, "cv.y", &ny);
  assert_non_null(x);
  assert_int_equal(ny, 2 * 3);
  const float *y;
  assert_int_equal(nn_model_forward(m, x, 2, &y, &err), 0);
  for (int i = 0; i < ny; i++)
    if (fabs(y[i] - yref[i]) > 1e-5 + 1e-4 * fabs(yref[i]))
      fail_msg("y[%d] = %.7g, torch %.7g", i, y[i], yref[i]);
  free(x);
  fx_free(&fx);
  nn_model_destroy(m);
}

/* Python (json + numpy, the format by its spec) reads shoal's file, compares every
 * value with a dump, and loads it into torch's Net. Skipped without /usr/bin/python3. */
static void test_python_reads_shoal_file(void **state) {
  const char *py = getenv("SHOAL_PYTHON");
  if (!py || !*py) py = "/usr/bin/python3";
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s -c 'import numpy, torch' >/dev/null 2>&1", py);
  if (access(py, X_OK) != 0 || system(cmd) != 0) {
    printf(
        "SKIPPED: %s with numpy and torch is not available; the reverse direction is "
        "covered by the committed torch_net.safetensors\n",
        py);
    skip();
  }
  nn_model *m = make_net(8, true, 6);
  move_running_stats(m);
  char path[512], dump[512], script[1024];
  path_in_dir(path, sizeof path, "shoal.safetensors");
  path_in_dir(dump, sizeof dump, "shoal.txt");
  assert_int_equal(nn_model_save(m, path, NULL), 0);
  FILE *f = fopen(dump, "w");
  assert_non_null(f);
  for (int i = 0; i < nn_model_tensor_count(m); i++) {
    nn_tensor_info t;
    nn_model_tensor(m, i, &t);
    size_t cnt;
    const float *base = t.trainable ? nn_model_params(m, &cnt) : nn_model_state(m, &cnt);
    fprintf(f, "%s %zu", t.name, t.numel);
    for (size_t j = 0; j < t.numel; j++) fprintf(f, " %.9g", base[t.offset + j]);
    fprintf(f, "\n");
  }
  fclose(f);
  const char *src = getenv("SHOAL_SOURCE_DIR");
  snprintf(script, sizeof script, "%s/tests/reference/nn_train.py", src ? src : ".");
  snprintf(cmd, sizeof cmd, "%s %s check %s %s", py, script, path, dump);
  int rc = system(cmd);
  assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
  unlink(path);
  unlink(dump);
  nn_model_destroy(m);
}

/* ---- bad files ---------------------------------------------------------------------------- */

static void test_wrong_shape_names_tensor_and_file(void **state) {
  nn_model *wide = make_net(7, true, 1), *m = make_net(8, true, 2);
  char path[512];
  path_in_dir(path, sizeof path, "wide.safetensors");
  assert_int_equal(nn_model_save(wide, path, NULL), 0);
  snapshot s = snap(m);
  shoal_error err = {0};
  assert_int_equal(nn_model_load(m, path, &err), SHOAL_ESHAPE);
  assert_int_equal(err.code, SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "fc1.weight"));
  assert_non_null(strstr(err.msg, "[7, 6]"));
  assert_non_null(strstr(err.msg, "[8, 6]"));
  assert_non_null(strstr(err.msg, path));
  assert_unchanged(m, &s);
  unlink(path);
  nn_model_destroy(wide);
  nn_model_destroy(m);
}

static void test_missing_and_extra_tensors(void **state) {
  nn_model *plain = make_net(8, false, 1), *bn = make_net(8, true, 2);
  uint8_t *buf;
  size_t len;
  shoal_error err = {0};
  /* a file without bn1 into a model with it: missing */
  assert_int_equal(nn_model_save_buffer(plain, &buf, &len, NULL), 0);
  snapshot s = snap(bn);
  assert_int_equal(nn_model_load_buffer(bn, buf, len, &err), SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "'bn1.weight' is missing"));
  assert_unchanged(bn, &s);
  free(buf);
  /* a file with bn1 into a model without it: extra */
  assert_int_equal(nn_model_save_buffer(bn, &buf, &len, NULL), 0);
  s = snap(plain);
  assert_int_equal(nn_model_load_buffer(plain, buf, len, &err), SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "bn1."));
  assert_non_null(strstr(err.msg, "not in the model"));
  assert_unchanged(plain, &s);
  free(buf);
  nn_model_destroy(plain);
  nn_model_destroy(bn);
}

static void test_truncated_file(void **state) {
  nn_model *a = make_net(8, true, 1), *m = make_net(8, true, 2);
  uint8_t *buf;
  size_t len;
  assert_int_equal(nn_model_save_buffer(a, &buf, &len, NULL), 0);
  char path[512];
  path_in_dir(path, sizeof path, "cut.safetensors");
  snapshot s = snap(m);
  shoal_error err = {0};
  /* cut in the data: the last tensor in the file (out.bias... or the state) is named */
  write_file(path, buf, len - 6);
  assert_int_equal(nn_model_load(m, path, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "truncated"));
  assert_non_null(strstr(err.msg, path));
  assert_non_null(strstr(err.msg, "tensor '"));
  /* cut in the header, and before the length */
  size_t cuts[] = {40, 8, 5, 0};
  for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
    write_file(path, buf, cuts[i]);
    int rc = nn_model_load(m, path, &err);
    assert_int_equal(rc, SHOAL_EFORMAT);
    assert_non_null(strstr(err.msg, path));
  }
  /* every prefix of the buffer fails cleanly */
  for (size_t n = 0; n < len; n += 7)
    assert_int_not_equal(nn_model_load_buffer(m, buf, n, NULL), 0);
  assert_unchanged(m, &s);
  unlink(path);
  free(buf);
  nn_model_destroy(a);
  nn_model_destroy(m);
}

/* A tiny model (dense 2 -> 1: fc.weight (1, 2), fc.bias (1), 12 bytes) and files
 * made by hand around it. */
static nn_model *make_tiny(void) {
  nn_model *m = nn_model_create(NN_CPU, NULL);
  nn_input(m, 2, 1, 1);
  nn_dense(m, "fc", 1);
  assert_int_equal(nn_model_build(m, 1, 1, NULL), 0);
  return m;
}

static size_t craft(uint8_t *out, const char *header, const float *data, size_t nfloats) {
  size_t n = strlen(header);
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(out + 8, header, n);
  if (nfloats) memcpy(out + 8 + n, data, nfloats * 4);
  return 8 + n + nfloats * 4;
}

static void expect_load(nn_model *m, const char *header, const float *data, size_t nf, int code,
                        const char *needle) {
  uint8_t buf[1024];
  size_t len = craft(buf, header, data, nf);
  shoal_error err = {0};
  int rc = nn_model_load_buffer(m, buf, len, &err);
  if (rc != code) fail_msg("header %s: rc %d (%s), expected %d", header, rc, err.msg, code);
  if (needle && !strstr(err.msg, needle))
    fail_msg("header %s: message '%s' lacks '%s'", header, err.msg, needle);
}

#define W_OK_ "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]}"
#define B_OK_ "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}"

static void test_crafted_headers(void **state) {
  nn_model *m = make_tiny();
  const float d[3] = {1.5f, -2.5f, 0.25f};
  snapshot s;
  /* well-formed variants load: metadata, spaces, escapes, another key order */
  expect_load(m, "{" W_OK_ "," B_OK_ "}", d, 3, 0, NULL);
  size_t n;
  const float *p = nn_model_params(m, &n);
  assert_true(p[0] == 1.5f && p[1] == -2.5f && p[2] == 0.25f);
  expect_load(m,
              " {\"__metadata__\" : {\"k\": \"v \\\"q\\\" \\u00e9\\ud83d\\ude00\"}, " B_OK_
              " ,\n\t" W_OK_ "}    ",
              (const float[]){1.5f, -2.5f, 0.25f}, 3, SHOAL_EFORMAT, "not a JSON object");
  expect_load(m,
              "{\"__metadata__\" : {\"k\": \"v \\\"q\\\" \\u00e9\\ud83d\\ude00\"}, "
              "\"fc.bias\":{\"data_offsets\":[0,4],\"shape\":[1],\"dtype\":\"F32\"} ,\n\t"
              "\"f\\u0063.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[4,12]}}  ",
              (const float[]){7.0f, 8.0f, 9.0f}, 3, 0, NULL);
  p = nn_model_params(m, &n);
  assert_true(p[0] == 8.0f && p[1] == 9.0f && p[2] == 7.0f);
  expect_load(m, "{" W_OK_ "," B_OK_ "}", d, 3, 0, NULL);

  s = snap(m);
  struct {
    const char *h;
    int code;
    const char *needle;
  } bad[] = {
      {"{" W_OK_ "," B_OK_ ",}", SHOAL_EFORMAT, "malformed header"},
      {"{" W_OK_ "," B_OK_ "} x", SHOAL_EFORMAT, "after the header"},
      {"{" W_OK_ "," B_OK_, SHOAL_EFORMAT, "expected '}'"},
      {"{" W_OK_ "," B_OK_ "," B_OK_ "}", SHOAL_EFORMAT, "appears twice"},
      {"{" W_OK_ "}", SHOAL_ESHAPE, "'fc.bias' is missing"},
      {"{\"fc.weight\":{\"dtype\":\"I32\",\"shape\":[1,2],\"data_offsets\":[0,8]}," B_OK_ "}",
       SHOAL_EFORMAT, "parameter 'fc.weight' is I32; expected F32, F16 or BF16"},
      {"{\"fc.weight\":{\"dtype\":\"F12\",\"shape\":[1,2],\"data_offsets\":[0,8]}," B_OK_ "}",
       SHOAL_EFORMAT, "dtype F12, which safetensors does not define"},
      {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[0,8]}," B_OK_ "}",
       SHOAL_ESHAPE, "[2, 1] in the file, [1, 2]"},
      {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,-2],\"data_offsets\":[0,8]}," B_OK_ "}",
       SHOAL_EFORMAT, "non-negative integer"},
      {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,2.0],\"data_offsets\":[0,8]}," B_OK_ "}",
       SHOAL_EFORMAT, "integer"},
      {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8,12]}," B_OK_ "}",
       SHOAL_EFORMAT, "malformed"},
      {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,2]}," B_OK_ "}", SHOAL_EFORMAT,
       "lacks data_offsets"},
      {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8],\"x\":1}," B_OK_
       "}",
       SHOAL_EFORMAT, "unexpected or repeated key 'x'"},
      {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[4,12]}," B_OK_ "}",
       SHOAL_EFORMAT, "overlaps"},
      {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]},"
       "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
       SHOAL_EFORMAT, "truncated"},
      {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[4,12]},"
       "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
       SHOAL_EFORMAT, "truncated"},
      {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,12]}," B_OK_ "}",
       SHOAL_EFORMAT, "do not hold 2 values"},
      {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,99999999999999999999]"
       "},"
       "}",
       SHOAL_EFORMAT, "overflows"},
      {"{\"fc.weight\":{\"dtype\":\"I64\",\"shape\":[1,2],\"data_offsets\":[0,16]}," B_OK_ "}",
       SHOAL_EFORMAT, "parameter 'fc.weight' is I64"},
      {"{\"__metadata__\":{\"k\":1}," W_OK_ "," B_OK_ "}", SHOAL_EFORMAT, "must be strings"},
      {"{\"__metadata__\":{},\"__metadata__\":{}," W_OK_ "," B_OK_ "}", SHOAL_EFORMAT,
       "repeated __metadata__"},
      {"{\"fc.\\x\":{}}", SHOAL_EFORMAT, "bad escape"},
      {"{\"fc.\\ud800\":{}}", SHOAL_EFORMAT, "lone surrogate"},
      {"{\"fc.\xff\":{}}", SHOAL_EFORMAT, "invalid UTF-8"},
      {"{\"fc.\x01\":{}}", SHOAL_EFORMAT, "control character"},
      {"{\"fc.weight\"", SHOAL_EFORMAT, "expected ':'"},
      {"[1,2]", SHOAL_EFORMAT, "not a JSON object"},
      {"{\"conv.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]}," B_OK_ "}",
       SHOAL_ESHAPE, "'conv.weight' is not in the model"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    expect_load(m, bad[i].h, d, 3, bad[i].code, bad[i].needle);
  /* a gap between tensors, and bytes after the last one */
  expect_load(m,
              "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]},"
              "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
              (const float[]){1, 2, 3, 4}, 4, SHOAL_EFORMAT, "gap of 4 bytes");
  expect_load(m, "{" W_OK_ "," B_OK_ "}", (const float[]){1, 2, 3, 4}, 4, SHOAL_EFORMAT,
              "4 bytes after");
  /* NaN or infinity in the data */
  expect_load(m, "{" W_OK_ "," B_OK_ "}", (const float[]){1, NAN, 3}, 3, SHOAL_ENAN,
              "'fc.weight'[1]");
  expect_load(m, "{" W_OK_ "," B_OK_ "}", (const float[]){1, 2, -INFINITY}, 3, SHOAL_ENAN,
              "'fc.bias'[0]");
  assert_unchanged(m, &s);

  /* a header length larger than the buffer, and one beyond the 100 MB limit */
  uint8_t buf[64];
  size_t len = craft(buf,
                     "{"
                     "}",
                     NULL, 0);
  buf[0] = 200;
  shoal_error err = {0};
  assert_int_equal(nn_model_load_buffer(m, buf, len, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "header length 200"));
  memset(buf, 0xff, 8);
  assert_int_equal(nn_model_load_buffer(m, buf, len, &err), SHOAL_EFORMAT);
  /* random bytes */
  shoal_rng r;
  shoal_rng_seed(&r, 3);
  uint8_t junk[256];
  for (int k = 0; k < 200; k++) {
    size_t jl = 8 + shoal_rng_below(&r, 240);
    for (size_t i = 0; i < jl; i++) junk[i] = (uint8_t)shoal_rng_next(&r);
    uint64_t hl = shoal_rng_below(&r, jl - 7);
    for (int i = 0; i < 8; i++) junk[i] = (uint8_t)(hl >> (8 * i));
    if (hl > 0) junk[8] = '{';
    assert_int_not_equal(nn_model_load_buffer(m, junk, jl, NULL), 0);
  }
  s = snap(m);
  assert_true(s.p[0] == 1.5f && s.p[1] == -2.5f && s.p[2] == 0.25f);
  free(s.p);
  free(s.s);
  nn_model_destroy(m);
}

/* Random byte mutations of a valid file: each load either succeeds or fails with a
 * message and leaves the model as it was; never a crash (run under ASan in CI). */
static void test_mutated_files(void **state) {
  nn_model *a = make_net(8, true, 1), *m = make_net(8, true, 2);
  uint8_t *good, *buf;
  size_t len;
  assert_int_equal(nn_model_save_buffer(a, &good, &len, NULL), 0);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | good[i];
  buf = malloc(len);
  assert_non_null(buf);
  shoal_rng r;
  shoal_rng_seed(&r, 99);
  int ok = 0, failed = 0;
  for (int k = 0; k < 600; k++) {
    memcpy(buf, good, len);
    int flips = 1 + (int)shoal_rng_below(&r, 3);
    for (int f = 0; f < flips; f++) {
      /* mostly the header, where the structure is */
      size_t at = shoal_rng_below(&r, 4) ? shoal_rng_below(&r, 8 + hlen) : shoal_rng_below(&r, len);
      buf[at] = (uint8_t)shoal_rng_next(&r);
    }
    snapshot s = snap(m);
    shoal_error err = {0};
    int rc = nn_model_load_buffer(m, buf, len, &err);
    if (rc) {
      failed++;
      assert_true(err.msg[0] != 0);
      assert_unchanged(m, &s);
    } else {
      ok++;
      free(s.p);
      free(s.s);
    }
  }
  assert_true(failed > 300); /* most header mutations break something */
  assert_true(ok > 0);       /* data mutations (finite values) load */
  free(buf);
  free(good);
  nn_model_destroy(a);
  nn_model_destroy(m);
}

static void test_files_and_arguments(void **state) {
  nn_model *m = make_tiny();
  shoal_error err = {0};
  char path[512];
  path_in_dir(path, sizeof path, "none.safetensors");
  assert_int_equal(nn_model_load(m, path, &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, path));
  path_in_dir(path, sizeof path, "no/such/dir/x.safetensors");
  assert_int_equal(nn_model_save(m, path, &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, path));
  assert_int_equal(count_files(), 0);                        /* no temporary file left behind */
  assert_int_equal(nn_model_load(m, DIR_, &err), SHOAL_EIO); /* a folder */
  /* an unbuilt model */
  nn_model *u = nn_model_create(NN_CPU, NULL);
  uint8_t *buf;
  size_t len;
  assert_int_equal(nn_model_save_buffer(u, &buf, &len, &err), SHOAL_ESTATE);
  nn_model_destroy(u);
  assert_int_equal(nn_model_save_buffer(NULL, &buf, &len, &err), SHOAL_EINVAL);
  assert_int_equal(nn_model_load_buffer(m, NULL, 0, &err), SHOAL_EINVAL);
  nn_model_destroy(m);
}

/* ---- optimizer state ------------------------------------------------------------------------ */

/* Sets a fixed pseudo-gradient (the same for every model of this shape) and steps. */
static void fake_step(nn_model *m, nn_optim *o, int t) {
  size_t n;
  float *g = nn_model_grads(m, &n);
  for (size_t i = 0; i < n; i++) g[i] = sinf(0.37f * (float)i + (float)t);
  assert_int_equal(nn_optim_step(o, NULL), 0);
}

static void test_optimizer_state_round_trip(void **state) {
  nn_optim_kind kinds[4] = {NN_SGD, NN_ADAM, NN_ADAMW, NN_RMSPROP};
  for (int k = 0; k < 4; k++) {
    nn_optim_config c = nn_optim_defaults(kinds[k]);
    c.momentum = kinds[k] == NN_SGD || kinds[k] == NN_RMSPROP ? 0.9f : 0.0f;
    c.centered = kinds[k] == NN_RMSPROP;
    nn_model *a = make_net(8, true, 1), *b = make_net(8, true, 2);
    nn_optim *oa = nn_optim_create(a, &c, NULL), *ob = nn_optim_create(b, &c, NULL);
    assert_non_null(oa);
    assert_non_null(ob);
    for (int t = 0; t < 5; t++) fake_step(a, oa, t);
    char mp[512], op[512];
    path_in_dir(mp, sizeof mp, "model.safetensors");
    path_in_dir(op, sizeof op, "optim.safetensors");
    shoal_error err = {0};
    assert_int_equal(nn_model_save(a, mp, &err), 0);
    assert_int_equal(nn_optim_save(oa, op, &err), 0);
    assert_int_equal(nn_model_load(b, mp, &err), 0);
    if (nn_optim_load(ob, op, &err)) fail_msg("optim load: %s", err.msg);
    assert_int_equal(nn_optim_steps(ob), 5);
    /* resumed training is the same training */
    for (int t = 5; t < 8; t++) {
      fake_step(a, oa, t);
      fake_step(b, ob, t);
    }
    assert_same_tensors(a, b);
    unlink(mp);
    unlink(op);
    nn_optim_destroy(oa);
    nn_optim_destroy(ob);
    nn_model_destroy(a);
    nn_model_destroy(b);
  }
}

static void test_optimizer_state_mismatch(void **state) {
  nn_model *a = make_net(8, true, 1), *wide = make_net(7, true, 1);
  nn_optim_config ac = nn_optim_defaults(NN_ADAM), rc = nn_optim_defaults(NN_RMSPROP);
  nn_optim *adam = nn_optim_create(a, &ac, NULL), *rms = nn_optim_create(a, &rc, NULL);
  nn_optim *adam_wide = nn_optim_create(wide, &ac, NULL);
  for (int t = 0; t < 3; t++) fake_step(a, adam, t);
  for (int t = 0; t < 2; t++) fake_step(a, rms, t);
  uint8_t *buf;
  size_t len;
  shoal_error err = {0};
  assert_int_equal(nn_optim_save_buffer(adam, &buf, &len, &err), 0);
  assert_non_null(memmem(buf, len, "\"kind\":\"adam\"", 13));
  /* another kind: its tensors have other names */
  assert_int_equal(nn_optim_load_buffer(rms, buf, len, &err), SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "'exp_avg' is not in the optimizer"));
  assert_int_equal(nn_optim_steps(rms), 2);
  /* another model size */
  assert_int_equal(nn_optim_load_buffer(adam_wide, buf, len, &err), SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "has shape"));
  assert_int_equal(nn_optim_steps(adam_wide), 0);
  /* a negative step count (the last 8 bytes: step is written last) */
  memset(buf + len - 8, 0xff, 8);
  nn_optim *fresh = nn_optim_create(a, &ac, NULL);
  assert_int_equal(nn_optim_load_buffer(fresh, buf, len, &err), SHOAL_ERANGE);
  assert_non_null(strstr(err.msg, "'step'"));
  assert_int_equal(nn_optim_steps(fresh), 0);
  free(buf);
  /* a model checkpoint is not an optimizer checkpoint */
  assert_int_equal(nn_model_save_buffer(a, &buf, &len, NULL), 0);
  assert_int_equal(nn_optim_load_buffer(fresh, buf, len, &err), SHOAL_ESHAPE);
  free(buf);
  nn_optim_destroy(fresh);
  nn_optim_destroy(adam);
  nn_optim_destroy(rms);
  nn_optim_destroy(adam_wide);
  nn_model_destroy(a);
  nn_model_destroy(wide);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_file_with_batchnorm_state),
      cmocka_unit_test(test_round_trip_buffer),
      cmocka_unit_test(test_loads_torch_written_file),
      cmocka_unit_test(test_loads_torch_conv_model),
      cmocka_unit_test(test_python_reads_shoal_file),
      cmocka_unit_test(test_wrong_shape_names_tensor_and_file),
      cmocka_unit_test(test_missing_and_extra_tensors),
      cmocka_unit_test(test_truncated_file),
      cmocka_unit_test(test_crafted_headers),
      cmocka_unit_test(test_mutated_files),
      cmocka_unit_test(test_files_and_arguments),
      cmocka_unit_test(test_optimizer_state_round_trip),
      cmocka_unit_test(test_optimizer_state_mismatch),
  };
  return cmocka_run_group_tests_name("nn_checkpoint", tests, setup, teardown);
}
