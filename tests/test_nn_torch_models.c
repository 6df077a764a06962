/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_nn_torch_models.c — real PyTorch checkpoints load into shoal models as they
 * are. tests/reference/nn_torch_models.py wrote, from torch 1.13, a DCGAN generator
 * saved through nn.DataParallel ("module." names), a DCGAN discriminator and a small
 * ResNet of nested modules ("encoder.layer1.0.conv1.weight"), with bias=False layers,
 * the ResNet again in F16 and BF16, and a detector whose "backbone." is the ResNet's
 * encoder. Each is built by hand in shoal under torch's names, loaded, and must give
 * torch's outputs (within 1e-5); the half-precision files must give the outputs torch
 * computes in F32 with the same rounded weights; torch loads shoal's save of the ResNet
 * back with strict names. Also: the F16/BF16 widening against
 * torch's for all 65536 bit patterns, prefix mapping and skipping, and the errors that
 * name the tensor (missing, extra, mis-shaped, a prefix that matches nothing), each
 * leaving the model as it was.
 */
#define _GNU_SOURCE /* memmem */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nn/nn.h"
#include "nn/safetensors.h" /* nn__f16_to_f32, nn__bf16_to_f32 */
#include "nn_train_fixture.h"

#define FIXDIR "nn_torch_models"

static void fixture_path(char *out, size_t cap, const char *file) {
  fx_path_in(out, cap, FIXDIR, file);
}

/* ---- the models, as torch names them ------------------------------------------------- */

/* Generator: ConvTranspose2d(8, 16, 4, 1, 0, bias=False), BatchNorm2d, ReLU, ... Tanh.
 * last_bias gives main.6 a bias the file lacks. */
static nn_model *make_generator(bool last_bias) {
  nn_model *m = nn_model_create(NN_CPU, NULL);
  assert_non_null(m);
  nn_input(m, 8, 1, 1);
  nn_conv_transpose2d_ex(m, "main.0", 16, 4, 4, 1, 0, 0, NN_NO_BIAS);
  nn_batchnorm(m, "main.1", 1e-5f, 0.1f);
  nn_activation(m, "main.2", NN_RELU, 0);
  nn_conv_transpose2d_ex(m, "main.3", 8, 4, 4, 2, 1, 0, NN_NO_BIAS);
  nn_batchnorm(m, "main.4", 1e-5f, 0.1f);
  nn_activation(m, "main.5", NN_RELU, 0);
  nn_conv_transpose2d_ex(m, "main.6", 3, 4, 4, 2, 1, 0, last_bias ? 0 : NN_NO_BIAS);
  nn_activation(m, "main.7", NN_TANH, 0);
  shoal_error err = {0};
  if (nn_model_build(m, 4, 1, &err)) fail_msg("build: %s", err.msg);
  return m;
}

/* Discriminator under prefix ("main." as torch's, or another to map to). */
static nn_model *make_discriminator(const char *p) {
  nn_model *m = nn_model_create(NN_CPU, NULL);
  assert_non_null(m);
  char n[64];
#define NAME(s) (snprintf(n, sizeof n, "%s%s", p, s), n)
  nn_input(m, 3, 16, 16);
  nn_conv2d_ex(m, NAME("0"), 4, 4, 4, 2, 1, 1, NN_NO_BIAS);
  nn_activation(m, NAME("1"), NN_LEAKY_RELU, 0.2f);
  nn_conv2d_ex(m, NAME("2"), 8, 4, 4, 2, 1, 1, NN_NO_BIAS);
  nn_batchnorm(m, NAME("3"), 1e-5f, 0.1f);
  nn_activation(m, NAME("4"), NN_LEAKY_RELU, 0.2f);
  nn_conv2d_ex(m, NAME("5"), 1, 4, 4, 1, 0, 1, NN_NO_BIAS);
  nn_activation(m, NAME("6"), NN_SIGMOID, 0);
  shoal_error err = {0};
  if (nn_model_build(m, 4, 2, &err)) fail_msg("build: %s", err.msg);
  return m;
}

typedef struct resnet_opts {
  const char *enc;   /* the encoder's prefix: "encoder." as torch's, "" or another */
  bool head;         /* the pool and head after the encoder */
  bool head1_bias;   /* head.1 with a bias (the file has none) */
  bool proj_no_bias; /* encoder.proj without its bias (the file has one) */
  int classes;       /* head.3's outputs (5 in the file) */
} resnet_opts;

/* The ResNet of nn_torch_models.py: encoder.stem (conv, bn, relu), encoder.layer1.0 (a
 * BasicBlock: relu(x + bn2(conv2(relu(bn1(conv1 x)))))), encoder.proj (1x1 conv with a
 * bias), then AvgPool2d(2) and head (flatten, Linear bias=False, relu, Linear). */
static nn_model *make_resnet(const resnet_opts *o) {
  nn_model *m = nn_model_create(NN_CPU, NULL);
  assert_non_null(m);
  char n[96];
#define ENC(s) (snprintf(n, sizeof n, "%s%s", o->enc, s), n)
  nn_input(m, 3, 8, 8);
  nn_conv2d_ex(m, ENC("stem.0"), 8, 3, 3, 1, 1, 1, NN_NO_BIAS);
  nn_batchnorm(m, ENC("stem.1"), 1e-5f, 0.1f);
  int x = nn_activation(m, ENC("stem.2"), NN_RELU, 0);
  nn_conv2d_ex(m, ENC("layer1.0.conv1"), 8, 3, 3, 1, 1, 1, NN_NO_BIAS);
  nn_batchnorm(m, ENC("layer1.0.bn1"), 1e-5f, 0.1f);
  nn_activation(m, ENC("layer1.0.relu1"), NN_RELU, 0);
  nn_conv2d_ex(m, ENC("layer1.0.conv2"), 8, 3, 3, 1, 1, 1, NN_NO_BIAS);
  int y = nn_batchnorm(m, ENC("layer1.0.bn2"), 1e-5f, 0.1f);
  nn_add(m, ENC("layer1.0.add"), x, y);
  nn_activation(m, ENC("layer1.0.relu2"), NN_RELU, 0);
  nn_conv2d_ex(m, ENC("proj"), 6, 1, 1, 1, 0, 1, o->proj_no_bias ? NN_NO_BIAS : 0);
  if (o->head) {
    nn_avgpool2d(m, "pool", 2, 2, 0);
    nn_flatten(m, "head.0");
    nn_dense_ex(m, "head.1", 16, o->head1_bias ? 0 : NN_NO_BIAS);
    nn_activation(m, "head.2", NN_RELU, 0);
    nn_dense(m, "head.3", o->classes ? o->classes : 5);
  }
  shoal_error err = {0};
  if (nn_model_build(m, 4, 3, &err)) fail_msg("build: %s", err.msg);
  nn_model_set_training(m, false);
  return m;
}

static nn_model *make_full_resnet(void) {
  resnet_opts o = {.enc = "encoder.", .head = true};
  return make_resnet(&o);
}

/* ---- helpers ---------------------------------------------------------------------------- */

static void load_ok(nn_model *m, const char *file, const nn_load_options *opt) {
  char path[1024];
  fixture_path(path, sizeof path, file);
  shoal_error err = {0};
  if (nn_model_load_ex(m, path, opt, &err)) fail_msg("load %s: %s", file, err.msg);
}

/* Forward of the fixture's input xname and comparison with yname, within tol. */
static void expect_outputs(nn_model *m, const char *xname, const char *yname, int B, double tol) {
  fx_file fx;
  assert_int_equal(fx_load_in(&fx, FIXDIR, "expected.txt"), 0);
  int nx = 0, ny = 0;
  float *x = fx_floats(&fx, xname, &nx);
  const double *yref = fx_get(&fx, yname, &ny);
  if (!x || !yref) fail_msg("fixture lacks %s or %s", xname, yname);
  int C, H, W;
  assert_int_equal(nn_node_shape(m, 0, &C, &H, &W), 0);
  assert_int_equal(nx, B * C * H * W);
  const float *y;
  shoal_error err = {0};
  if (nn_model_forward(m, x, B, &y, &err)) fail_msg("forward: %s", err.msg);
  assert_int_equal(nn_node_shape(m, nn_model_current(m), &C, &H, &W), 0);
  assert_int_equal(ny, B * C * H * W);
  double worst = 0;
  for (int i = 0; i < ny; i++) {
    double d = fabs(y[i] - yref[i]);
    if (d > worst) worst = d;
    if (d > tol)
      fail_msg("%s[%d] = %.8g, torch %.8g (|diff| %.3g > %.1g)", yname, i, y[i], yref[i], d, tol);
  }
  print_message("  %s: %d values, largest |shoal - torch| %.2g\n", yname, ny, worst);
  free(x);
  fx_free(&fx);
}

typedef struct snapshot {
  float *p, *s;
  size_t np, ns;
} snapshot;

static snapshot take(nn_model *m) {
  snapshot t;
  const float *p = nn_model_params(m, &t.np), *s = nn_model_state(m, &t.ns);
  t.p = malloc((t.np + 1) * sizeof *t.p);
  t.s = malloc((t.ns + 1) * sizeof *t.s);
  memcpy(t.p, p, t.np * sizeof *t.p);
  memcpy(t.s, s, t.ns * sizeof *t.s);
  return t;
}

static void assert_unchanged_and_free(nn_model *m, snapshot *t) {
  size_t np, ns;
  const float *p = nn_model_params(m, &np), *s = nn_model_state(m, &ns);
  assert_int_equal(np, t->np);
  assert_int_equal(ns, t->ns);
  assert_memory_equal(p, t->p, np * sizeof *p);
  assert_memory_equal(s, t->s, ns * sizeof *s);
  free(t->p), free(t->s);
}

/* A load that must fail with code and a message holding every needle (NULL-ended);
 * the model is left as it was. */
static void load_fails(nn_model *m, const char *file, const nn_load_options *opt, int code, ...) {
  char path[1024];
  fixture_path(path, sizeof path, file);
  snapshot t = take(m);
  shoal_error err = {0};
  int rc = nn_model_load_ex(m, path, opt, &err);
  if (rc != code) fail_msg("load %s: rc %d (%s), expected %d", file, rc, err.msg, code);
  va_list ap;
  va_start(ap, code);
  for (const char *needle; (needle = va_arg(ap, const char *));)
    if (!strstr(err.msg, needle))
      fail_msg("load %s: message '%s' lacks '%s'", file, err.msg, needle);
  va_end(ap);
  print_message("  refused: %s\n", err.msg);
  assert_unchanged_and_free(m, &t);
}

/* ---- loads that reproduce torch ---------------------------------------------------------- */

static void test_dcgan_generator_from_dataparallel(void **state) {
  nn_model *g = make_generator(false);
  /* bias=False: no bias tensor at all, and the names torch's Sequential gives */
  nn_tensor_info t;
  assert_int_equal(nn_model_find_tensor(g, "main.0.weight", &t), 0);
  assert_true(t.ndim == 4 && t.shape[0] == 8 && t.shape[1] == 16);
  assert_int_equal(nn_model_find_tensor(g, "main.0.bias", NULL), SHOAL_ENOENT);
  assert_int_equal(nn_model_tensor_count(g), 3 + 2 * 5);
  /* as saved, every name has DataParallel's "module." */
  load_fails(g, "dcgan_g.safetensors", NULL, SHOAL_ESHAPE, "'module.main", "is not in the model",
             NULL);
  nn_load_options o = {.from_prefix = "module."};
  load_ok(g, "dcgan_g.safetensors", &o);
  nn_model_set_training(g, false);
  expect_outputs(g, "g.x", "g.y", 2, 1e-5);
  nn_model_destroy(g);
}

static void test_dcgan_discriminator(void **state) {
  nn_model *d = make_discriminator("main.");
  load_ok(d, "dcgan_d.safetensors", NULL);
  nn_model_set_training(d, false);
  expect_outputs(d, "d.x", "d.y", 3, 1e-5);
  nn_model_destroy(d);
  /* the same file into a model named otherwise: "main." -> "disc." */
  d = make_discriminator("disc.");
  nn_load_options o = {.from_prefix = "main.", .to_prefix = "disc."};
  load_ok(d, "dcgan_d.safetensors", &o);
  nn_model_set_training(d, false);
  expect_outputs(d, "d.x", "d.y", 3, 1e-5);
  nn_model_destroy(d);
}

static void test_nested_resnet(void **state) {
  nn_model *m = make_full_resnet();
  load_ok(m, "resnet.safetensors", NULL);
  nn_tensor_info t;
  assert_int_equal(nn_model_find_tensor(m, "encoder.layer1.0.bn2.running_var", &t), 0);
  assert_false(t.trainable);
  assert_int_equal(nn_model_find_tensor(m, "encoder.proj.bias", &t), 0);
  assert_int_equal(nn_model_find_tensor(m, "head.1.bias", NULL), SHOAL_ENOENT);
  expect_outputs(m, "r.x", "r.y", 2, 1e-5);

  /* shoal's own file keeps the dotted names and the missing biases: it loads back into
   * a fresh model bit for bit */
  uint8_t *buf = NULL;
  size_t len = 0;
  shoal_error err = {0};
  assert_int_equal(nn_model_save_buffer(m, &buf, &len, &err), 0);
  assert_non_null(memmem(buf, len, "\"encoder.layer1.0.conv1.weight\"", 31));
  assert_null(memmem(buf, len, "head.1.bias", 11));
  nn_model *m2 = make_full_resnet();
  if (nn_model_load_buffer(m2, buf, len, &err)) fail_msg("reload: %s", err.msg);
  size_t n1, n2;
  const float *p1 = nn_model_params(m, &n1), *p2 = nn_model_params(m2, &n2);
  assert_int_equal(n1, n2);
  assert_memory_equal(p1, p2, n1 * sizeof *p1);
  free(buf);
  nn_model_destroy(m2);

  /* the table of the model: a layer's parameters are its own, not those of the layers
   * whose names continue its name ("encoder.layer1.0.conv1" has 8*8*3*3) */
  char desc[8192];
  nn_model_describe(m, desc, sizeof desc);
  const char *line = strstr(desc, "encoder.layer1.0.conv1 ");
  assert_non_null(line);
  const char *eol = strchr(line, '\n');
  assert_non_null(eol);
  assert_true(eol - line > 4 && !strncmp(eol - 4, " 576", 4));
  nn_model_destroy(m);
}

/* The other way: torch loads the ResNet that shoal saves into its own ResNet with
 * strict names (load_state_dict(strict=True)) and computes r.y with it. Skipped without
 * /usr/bin/python3 and torch. */
static void test_torch_loads_shoal_resnet(void **state) {
  const char *py = getenv("SHOAL_PYTHON");
  if (!py || !*py) py = "/usr/bin/python3";
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s -c 'import numpy, torch' >/dev/null 2>&1", py);
  if (access(py, X_OK) != 0 || system(cmd) != 0) {
    printf("SKIPPED: %s with numpy and torch is not available\n", py);
    skip();
  }
  nn_model *m = make_full_resnet();
  load_ok(m, "resnet.safetensors", NULL);
  char dir[] = "/tmp/shoal_torch_models_XXXXXX", path[512];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/resnet.safetensors", dir);
  shoal_error err = {0};
  if (nn_model_save(m, path, &err)) fail_msg("save: %s", err.msg);
  const char *src = getenv("SHOAL_SOURCE_DIR");
  snprintf(cmd, sizeof cmd, "%s %s/tests/reference/nn_torch_models.py check %s", py,
           src ? src : ".", path);
  int rc = system(cmd);
  unlink(path);
  rmdir(dir);
  assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
  nn_model_destroy(m);
}

/* A layer named as another layer's name continued ("blk" and "blk.fc") keeps its own
 * tensors: the last '.' of a tensor name ends the layer's name. */
static void test_names_that_continue_names(void **state) {
  nn_model *m = nn_model_create(NN_CPU, NULL);
  nn_input(m, 3, 1, 1);
  nn_dense(m, "blk", 4);
  nn_dense_ex(m, "blk.fc", 2, NN_NO_BIAS);
  shoal_error err = {0};
  assert_int_equal(nn_model_build(m, 1, 1, &err), 0);
  nn_tensor_info a, b, c;
  assert_int_equal(nn_model_find_tensor(m, "blk.weight", &a), 0);
  assert_int_equal(nn_model_find_tensor(m, "blk.bias", &b), 0);
  assert_int_equal(nn_model_find_tensor(m, "blk.fc.weight", &c), 0);
  assert_int_equal(nn_model_find_tensor(m, "blk.fc.bias", NULL), SHOAL_ENOENT);
  assert_int_equal(a.numel + b.numel + c.numel, 12 + 4 + 8);
  char desc[2048];
  nn_model_describe(m, desc, sizeof desc);
  const char *l = strstr(desc, "blk ");
  assert_non_null(l);
  assert_true(!strncmp(strchr(l, '\n') - 3, " 16", 3)); /* 12 + 4, not blk.fc's too */
  /* the same name twice is refused, with or without dots */
  assert_int_equal(nn_dense(m, "blk.fc", 2), SHOAL_ESTATE); /* built: nothing more */
  nn_model_destroy(m);
  m = nn_model_create(NN_CPU, NULL);
  nn_input(m, 3, 1, 1);
  nn_dense(m, "a.b", 2);
  assert_int_equal(nn_dense(m, "a.b", 2), SHOAL_EEXIST);
  nn_model_destroy(m);
}

/* ---- half precision --------------------------------------------------------------------- */

/* The half file loads to exactly the floats torch widens the same halves to (its F32
 * file of the rounded weights), and the model gives torch's F32 outputs with them. */
static void check_half(const char *half_file, const char *f32_file, const char *yname) {
  nn_model *a = make_full_resnet(), *b = make_full_resnet();
  load_ok(a, half_file, NULL);
  load_ok(b, f32_file, NULL);
  size_t na, nb;
  const float *pa = nn_model_params(a, &na), *pb = nn_model_params(b, &nb);
  assert_int_equal(na, nb);
  for (size_t i = 0; i < na; i++)
    if (memcmp(&pa[i], &pb[i], sizeof *pa))
      fail_msg("%s: parameter %zu = %.9g, torch widened it to %.9g", half_file, i, pa[i], pb[i]);
  const float *sa = nn_model_state(a, &na), *sb = nn_model_state(b, &nb);
  assert_int_equal(na, nb);
  assert_memory_equal(sa, sb, na * sizeof *sa);
  expect_outputs(a, "r.x", yname, 2, 1e-5);
  nn_model_destroy(a);
  nn_model_destroy(b);
}

static void test_f16_checkpoint(void **state) {
  check_half("resnet_f16.safetensors", "resnet_f16_f32.safetensors", "r.y_f16");
}

static void test_bf16_checkpoint(void **state) {
  check_half("resnet_bf16.safetensors", "resnet_bf16_f32.safetensors", "r.y_bf16");
}

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* FNV-1a over the float bits of all 65536 conversions, NaNs as 0x7fc00000 with their
 * sign: what nn_torch_models.py computed from torch's conversion. */
static uint32_t table_hash(float (*conv)(uint16_t)) {
  uint32_t h = 0x811c9dc5u;
  for (uint32_t i = 0; i < 65536; i++) {
    float f = conv((uint16_t)i);
    uint32_t u = isnan(f) ? (bits(f) & 0x80000000u) | 0x7fc00000u : bits(f);
    h = (h ^ u) * 0x01000193u;
  }
  return h;
}

static void test_half_conversion_is_torchs(void **state) {
  fx_file fx;
  assert_int_equal(fx_load_in(&fx, FIXDIR, "expected.txt"), 0);
  int n = 0;
  const double *h16 = fx_get(&fx, "f16.hash", &n), *hb = fx_get(&fx, "bf16.hash", NULL);
  assert_non_null(h16);
  assert_non_null(hb);
  assert_int_equal(n, 2);
  assert_int_equal(table_hash(nn__f16_to_f32), (uint32_t)h16[0] << 16 | (uint32_t)h16[1]);
  assert_int_equal(table_hash(nn__bf16_to_f32), (uint32_t)hb[0] << 16 | (uint32_t)hb[1]);
  fx_free(&fx);

  /* the edges, by IEEE 754's definitions */
  assert_true(nn__f16_to_f32(0x0001) == ldexpf(1, -24));    /* smallest subnormal */
  assert_true(nn__f16_to_f32(0x03ff) == ldexpf(1023, -24)); /* largest subnormal */
  assert_true(nn__f16_to_f32(0x0400) == ldexpf(1, -14));    /* smallest normal */
  assert_true(nn__f16_to_f32(0x7bff) == 65504.0f);
  assert_true(nn__f16_to_f32(0xc000) == -2.0f);
  assert_true(nn__f16_to_f32(0x3555) == 0x1.554p-2f);
  assert_true(nn__f16_to_f32(0x7c00) == INFINITY);
  assert_true(nn__f16_to_f32(0xfc00) == -INFINITY);
  assert_true(nn__f16_to_f32(0x8000) == 0.0f && signbit(nn__f16_to_f32(0x8000)));
  assert_true(nn__f16_to_f32(0x8001) == -ldexpf(1, -24));
  assert_true(isnan(nn__f16_to_f32(0x7e00)) && !signbit(nn__f16_to_f32(0x7e00)));
  assert_true(isnan(nn__f16_to_f32(0xfc01)) && signbit(nn__f16_to_f32(0xfc01)));
  assert_int_equal(bits(nn__f16_to_f32(0x7e01)), 0x7fc02000u); /* the payload moves up */
  assert_true(nn__bf16_to_f32(0x3f80) == 1.0f);
  assert_true(nn__bf16_to_f32(0x0001) == ldexpf(1, -133)); /* a float subnormal */
  assert_true(nn__bf16_to_f32(0x7f7f) == 0x1.fep127f);
  assert_true(nn__bf16_to_f32(0xff80) == -INFINITY);
  assert_true(isnan(nn__bf16_to_f32(0x7fc0)));
#ifdef __FLT16_MAX__
  /* and every non-NaN half as the compiler's own _Float16 widens it */
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    _Float16 v;
    memcpy(&v, &h, 2);
    float want = (float)v, got = nn__f16_to_f32(h);
    if (isnan(want)) {
      assert_true(isnan(got));
      continue;
    }
    if (bits(got) != bits(want)) fail_msg("f16 0x%04x: %a, _Float16 gives %a", h, got, want);
  }
#endif
}

/* A half infinity or NaN in a checkpoint is refused like a float one, naming it. */
static void test_half_inf_refused(void **state) {
  nn_model *m = nn_model_create(NN_CPU, NULL);
  nn_input(m, 2, 1, 1);
  nn_dense(m, "blk.fc", 1);
  assert_int_equal(nn_model_build(m, 1, 1, NULL), 0);
  static const char hdr[] =
      "{\"blk.fc.weight\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[0,4]},"
      "\"blk.fc.bias\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[4,6]}}";
  size_t hl = sizeof hdr - 1, pad = (8 - hl % 8) % 8;
  uint8_t buf[256];
  memset(buf, 0, sizeof buf);
  uint64_t n = hl + pad;
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
  memcpy(buf + 8, hdr, hl);
  memset(buf + 8 + hl, ' ', pad);
  uint8_t *d = buf + 8 + n;
  /* weight: 1.5 (0x3e00), -inf (0xfc00); bias: bf16 0.25 (0x3e80) */
  d[0] = 0x00, d[1] = 0x3e, d[2] = 0x00, d[3] = 0xfc, d[4] = 0x80, d[5] = 0x3e;
  size_t len = 8 + n + 6;
  snapshot t = take(m);
  shoal_error err = {0};
  assert_int_equal(nn_model_load_buffer(m, buf, len, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "'blk.fc.weight'[1] is -inf"));
  assert_unchanged_and_free(m, &t);
  /* finite: both widen exactly */
  d[3] = 0xbc; /* -1.0 */
  assert_int_equal(nn_model_load_buffer(m, buf, len, &err), 0);
  const float *p = nn_model_params(m, NULL);
  nn_tensor_info w, b;
  nn_model_find_tensor(m, "blk.fc.weight", &w);
  nn_model_find_tensor(m, "blk.fc.bias", &b);
  assert_true(p[w.offset] == 1.5f && p[w.offset + 1] == -1.0f && p[b.offset] == 0.25f);
  nn_model_destroy(m);
}

/* ---- prefixes ------------------------------------------------------------------------------ */

static void test_backbone_subtree(void **state) {
  /* the detector's "backbone." into an encoder-only model whose names lack it; the
   * detector's head (F64 and I32 tensors) is skipped */
  resnet_opts o = {.enc = ""};
  nn_model *m = make_resnet(&o);
  nn_load_options lo = {.from_prefix = "backbone.", .skip_unmatched = true};
  load_ok(m, "detector.safetensors", &lo);
  expect_outputs(m, "r.x", "r.features", 2, 1e-5);
  /* without skip_unmatched the head is an error naming it */
  lo.skip_unmatched = false;
  load_fails(m, "detector.safetensors", &lo, SHOAL_ESHAPE, "'cls_head.", "prefix 'backbone.'",
             NULL);
  nn_model_destroy(m);

  /* the full ResNet's "encoder." sub-tree, its head skipped, into "enc." */
  o.enc = "enc.";
  m = make_resnet(&o);
  nn_load_options eo = {.from_prefix = "encoder.", .to_prefix = "enc.", .skip_unmatched = true};
  load_ok(m, "resnet.safetensors", &eo);
  expect_outputs(m, "r.x", "r.features", 2, 1e-5);
  nn_model_destroy(m);
}

/* ---- errors, each naming the tensor; the model is left as it was ----------------------- */

static void test_errors_name_the_tensor(void **state) {
  /* a prefix that matches nothing */
  nn_model *m = make_full_resnet();
  nn_load_options o = {.from_prefix = "model."};
  load_fails(m, "resnet.safetensors", &o, SHOAL_ENOENT,
             "no tensor name starts with the prefix 'model.'", "resnet.safetensors", NULL);
  o.skip_unmatched = true; /* skipping does not hide it */
  load_fails(m, "resnet.safetensors", &o, SHOAL_ENOENT, "'model.'", NULL);
  /* a backbone load into the full model: the head is missing under the mapping */
  nn_load_options bo = {
      .from_prefix = "backbone.", .to_prefix = "encoder.", .skip_unmatched = true};
  load_fails(m, "detector.safetensors", &bo, SHOAL_ESHAPE, "'head.1.weight' is missing",
             "outside the prefix 'encoder.'", NULL);
  nn_model_destroy(m);

  /* a tensor the model has and the file lacks (torch's head.1 has bias=False) */
  resnet_opts ro = {.enc = "encoder.", .head = true, .head1_bias = true};
  m = make_resnet(&ro);
  load_fails(m, "resnet.safetensors", NULL, SHOAL_ESHAPE,
             "the model's tensor 'head.1.bias' is missing", NULL);
  nn_model_destroy(m);

  /* a tensor the file has and the model lacks */
  ro = (resnet_opts){.enc = "encoder.", .head = true, .proj_no_bias = true};
  m = make_resnet(&ro);
  load_fails(m, "resnet.safetensors", NULL, SHOAL_ESHAPE, "'encoder.proj.bias' is not in the model",
             NULL);
  nn_model_destroy(m);

  /* a wrong shape */
  ro = (resnet_opts){.enc = "encoder.", .head = true, .classes = 4};
  m = make_resnet(&ro);
  load_fails(m, "resnet.safetensors", NULL, SHOAL_ESHAPE,
             "'head.3.weight' has shape [5, 16] in the file, [4, 16] in the model", NULL);
  nn_model_destroy(m);

  /* through a mapping, the messages give both names */
  nn_model *g = make_generator(true);
  nn_load_options go = {.from_prefix = "module."};
  load_fails(g, "dcgan_g.safetensors", &go, SHOAL_ESHAPE,
             "the model's tensor 'main.6.bias' is missing from the file (as 'module.main.6.bias')",
             NULL);
  nn_model_destroy(g);
  nn_model *d = make_discriminator("disc.");
  nn_load_options dx = {.from_prefix = "main.", .to_prefix = "dis."};
  load_fails(d, "dcgan_d.safetensors", &dx, SHOAL_ESHAPE, "'main.", "(the model's 'dis.",
             "is not in the model", NULL);
  nn_model_destroy(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dcgan_generator_from_dataparallel),
      cmocka_unit_test(test_dcgan_discriminator),
      cmocka_unit_test(test_nested_resnet),
      cmocka_unit_test(test_torch_loads_shoal_resnet),
      cmocka_unit_test(test_names_that_continue_names),
      cmocka_unit_test(test_f16_checkpoint),
      cmocka_unit_test(test_bf16_checkpoint),
      cmocka_unit_test(test_half_conversion_is_torchs),
      cmocka_unit_test(test_half_inf_refused),
      cmocka_unit_test(test_backbone_subtree),
      cmocka_unit_test(test_errors_name_the_tensor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
