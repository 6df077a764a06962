/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_nn_custom.c — custom layers written against nn/nn.h alone, as a user
 * writes them: a GLU and a wrong GLU defined here, NoisyNet's noisy linear layer from the
 * example plugin (examples/noisy_net, loaded by path as a user loads it), a Swish
 * activation and a log-cosh loss. They must match PyTorch (tests/reference/nn_custom.py:
 * the same layers as torch.nn.Modules), pass the gradient checker (which must catch the
 * wrong one), train, save, load and copy inside a graph with nn's own layers, show in
 * describe and profile, and be refused with a message where a table, a name, a plugin or
 * a backend is wrong.
 */
#define _GNU_SOURCE /* getline, mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "examples/noisy_net/noisy_linear.h"
#include "nn/nn.h"
#include "tests/nn_fixture.h"

/* ---- a GLU, as a user writes one: (2n) -> (n), y = a * sigmoid(b) --------------------- */

static int glu_shape(nn_layer_shape *s, shoal_error *err) {
  int F = s->in_C * s->in_H * s->in_W;
  if (F % 2)
    return shoal_error_set(err, SHOAL_ESHAPE, "glu needs an even width, the input has %d", F);
  s->C = F / 2, s->H = 1, s->W = 1;
  s->flops = 4.0 * F;
  return 0;
}

static float sigm(float v) { return 1.0f / (1.0f + expf(-v)); }

static int glu_forward(const nn_layer_call *c, shoal_error *err) {
  for (int n = 0; n < c->B; n++) {
    const float *x = c->x + (size_t)n * c->in_F;
    float *y = c->y + (size_t)n * c->F;
    for (int j = 0; j < c->F; j++) y[j] = x[j] * sigm(x[c->F + j]);
  }
  return 0;
}

static void glu_backward_common(const nn_layer_call *c, bool wrong) {
  if (!c->dx) return;
  for (int n = 0; n < c->B; n++) {
    const float *x = c->x + (size_t)n * c->in_F, *dy = c->dy + (size_t)n * c->F;
    float *dx = c->dx + (size_t)n * c->in_F;
    for (int j = 0; j < c->F; j++) {
      float s = sigm(x[c->F + j]);
      float da = dy[j] * s;
      /* the wrong one forgets the sigmoid's derivative */
      float db = dy[j] * x[j] * (wrong ? s : s * (1.0f - s));
      dx[j] = c->dx_add ? dx[j] + da : da;
      dx[c->F + j] = c->dx_add ? dx[c->F + j] + db : db;
    }
  }
}
static void glu_backward(const nn_layer_call *c) { glu_backward_common(c, false); }
static void glu_backward_wrong(const nn_layer_call *c) { glu_backward_common(c, true); }

static const nn_layer_type glu = {NN_LAYER_ABI, "glu", 0, glu_shape, glu_forward, glu_backward};
static const nn_layer_type glu_wrong = {NN_LAYER_ABI, "glu_wrong", 0, glu_shape, glu_forward,
                                        glu_backward_wrong};

/* ---- Swish with a slope: f(x) = x sigmoid(a x) ------------------------------------------ */

static float swish_f(float x, float a) { return x * sigm(a * x); }
static float swish_df(float x, float y, float a) {
  float s = sigm(a * x);
  return s + a * x * s * (1.0f - s);
}
static const nn_activation_type swish = {NN_LAYER_ABI, "swish", swish_f, swish_df};

/* ---- the plugin --------------------------------------------------------------------- */

static const nn_layer_type *noisy_type(void) {
  const char *path = getenv("SHOAL_TEST_LAYER_PLUGIN");
  if (!path || access(path, R_OK)) {
    print_message("SKIPPED: the example's layer plugin (SHOAL_TEST_LAYER_PLUGIN=%s) is not built\n",
                  path ? path : "");
    skip();
  }
  shoal_error err = {0};
  if (nn_layer_plugin_load(path, &err)) fail_msg("%s", err.msg);
  const nn_layer_type *t = nn_layer_find("noisy_linear");
  assert_non_null(t);
  return t;
}

/* Fixture array <what>.<name> (param, grad) and the model's tensor <name>, whose
 * sizes must agree. */
static fx_arr *ref_of(nn_model *m, fixture *fx, const char *what, const char *name,
                      nn_tensor_info *ti) {
  char key[200];
  snprintf(key, sizeof key, "%s.%s", what, name);
  fx_arr *a = fx_get(fx, key);
  if (!a) fail_msg("the fixture has no %s", key);
  assert_int_equal(nn_model_find_tensor(m, name, ti), 0);
  assert_int_equal(ti->numel, a->n);
  return a;
}

/* Writes fixture array param.<name> into the model's tensor <name>. */
static void put_tensor(nn_model *m, fixture *fx, const char *name) {
  nn_tensor_info ti;
  fx_arr *a = ref_of(m, fx, "param", name, &ti);
  size_t n;
  float *buf = ti.trainable ? nn_model_params(m, &n) : nn_model_state(m, &n);
  memcpy(buf + ti.offset, a->v, a->n * sizeof(float));
}

static void check_grad(nn_model *m, fixture *fx, const char *case_, const char *name) {
  nn_tensor_info ti;
  fx_arr *a = ref_of(m, fx, "grad", name, &ti);
  size_t n;
  assert_close(case_, name, nn_model_grads(m, &n) + ti.offset, a);
}

/* ---- against PyTorch ------------------------------------------------------------------- */

static void test_glu_matches_torch(void **state) {
  shoal_error err = {0};
  fixture *fx = fx_load("custom_glu");
  fx_arr *x = fx_get(fx, "x"), *dy = fx_get(fx, "dy");
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 8, 1, 1);
  assert_true(nn_custom(m, "gate", &glu, NULL) > 0);
  if (nn_model_build(m, 3, 1, &err)) fail_msg("%s", err.msg);
  const float *y, *dx;
  assert_int_equal(nn_model_forward(m, x->v, 3, &y, &err), 0);
  assert_close("glu", "y", y, fx_get(fx, "y"));
  assert_int_equal(nn_model_backward(m, dy->v, &dx, &err), 0);
  assert_close("glu", "dx", dx, fx_get(fx, "dx"));
  nn_model_destroy(m);
  fx_free(fx);
}

static void noisy_against_torch(const char *case_, bool training) {
  const nn_layer_type *t = noisy_type();
  shoal_error err = {0};
  fixture *fx = fx_load(case_);
  fx_arr *x = fx_get(fx, "x"), *dy = fx_get(fx, "dy");
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 5, 1, 1);
  noisy_config nc = {.out_features = 4, .sigma0 = 0.5f, .fixed = 1};
  assert_true(nn_custom(m, "noisy", t, &nc) > 0);
  if (nn_model_build(m, 3, 7, &err)) fail_msg("%s", err.msg);
  static const char *const names[] = {"noisy.weight_mu", "noisy.weight_sigma", "noisy.bias_mu",
                                      "noisy.bias_sigma", "noisy.eps_in", "noisy.eps_out"};
  for (int i = 0; i < 6; i++) put_tensor(m, fx, names[i]);
  nn_model_set_training(m, training);
  const float *y, *dx;
  assert_int_equal(nn_model_forward(m, x->v, 3, &y, &err), 0);
  assert_close(case_, "y", y, fx_get(fx, "y"));
  nn_model_zero_grad(m);
  assert_int_equal(nn_model_backward(m, dy->v, &dx, &err), 0);
  assert_close(case_, "dx", dx, fx_get(fx, "dx"));
  for (int i = 0; i < 4; i++) check_grad(m, fx, case_, names[i]);
  /* backward adds: a second one doubles every gradient */
  assert_int_equal(nn_model_backward(m, dy->v, NULL, &err), 0);
  nn_tensor_info ti;
  nn_model_find_tensor(m, "noisy.bias_mu", &ti);
  fx_arr *gb = fx_get(fx, "grad.noisy.bias_mu");
  size_t n;
  const float *g = nn_model_grads(m, &n) + ti.offset;
  for (size_t i = 0; i < gb->n; i++) assert_true(fabs(g[i] - 2 * gb->v[i]) < 1e-4);
  nn_model_destroy(m);
  fx_free(fx);
}

static void test_noisy_matches_torch_training(void **state) {
  noisy_against_torch("custom_noisy_train", true);
}
static void test_noisy_matches_torch_eval(void **state) {
  noisy_against_torch("custom_noisy_eval", false);
}

/* ---- the gradient checker ---------------------------------------------------------------- */

static void fill(float *x, size_t n, uint64_t seed) {
  shoal_rng r;
  shoal_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++) x[i] = (float)shoal_rng_normal(&r);
}

static int check(nn_model *m, int in, int B, nn_gradcheck_report *rep, shoal_error *err) {
  float *x = malloc((size_t)B * in * sizeof *x);
  fill(x, (size_t)B * in, 5);
  nn_gradcheck_options o = {.per_tensor = -1};
  int rc = nn_check_gradients(m, x, B, &o, rep, err);
  free(x);
  return rc;
}

static void test_gradcheck_passes_right_layers(void **state) {
  const nn_layer_type *t = noisy_type();
  shoal_error err = {0};
  nn_gradcheck_report rep;
  /* dense -> glu -> swish -> noisy (drawing fresh noise every forward in training mode:
   * the checker replays the same draws) -> noisy shared (tied weights) */
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 6, 1, 1);
  nn_dense(m, "fc", 8);
  assert_true(nn_custom(m, "gate", &glu, NULL) > 0);
  assert_true(nn_custom_activation(m, "act", &swish, 1.5f) > 0);
  noisy_config nc = {.out_features = 4, .sigma0 = 0.5f};
  int nz = nn_custom(m, "noisy", t, &nc);
  assert_true(nz > 0);
  assert_true(nn_shared(m, "noisy_again", nz) > 0);
  if (nn_model_build(m, 4, 3, &err)) fail_msg("%s", err.msg);
  int rc = check(m, 6, 4, &rep, &err);
  print_message("  right layers: %d gradients, worst %.3g at %s\n", rep.checked, rep.worst,
                rep.worst_where);
  if (rc) fail_msg("%s", err.msg);
  assert_true(rep.checked > 100);
  assert_int_equal(rep.failed, 0);
  /* the noise was drawn: training-mode outputs differ between two forwards */
  float x[6] = {1, -1, 0.5f, 2, 0, -0.3f}, y1[4];
  const float *y;
  assert_int_equal(nn_model_forward(m, x, 1, &y, &err), 0);
  memcpy(y1, y, sizeof y1);
  assert_int_equal(nn_model_forward(m, x, 1, &y, &err), 0);
  assert_true(memcmp(y1, y, sizeof y1) != 0);
  nn_model_destroy(m);
}

static void test_gradcheck_catches_a_wrong_backward(void **state) {
  shoal_error err = {0};
  nn_gradcheck_report rep;
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 6, 1, 1);
  nn_dense(m, "fc", 8);
  nn_custom(m, "gate", &glu_wrong, NULL);
  nn_dense(m, "out", 3);
  if (nn_model_build(m, 4, 3, &err)) fail_msg("%s", err.msg);
  size_t np;
  float before = nn_model_params(m, &np)[0];
  assert_int_equal(check(m, 6, 4, &rep, &err), SHOAL_ERANGE);
  print_message("  wrong glu: %s\n", err.msg);
  assert_true(rep.failed > 0);
  assert_non_null(strstr(err.msg, "differ from finite differences"));
  /* the checker leaves the model as it found it */
  assert_true(nn_model_params(m, &np)[0] == before);
  nn_model_destroy(m);
}

/* ---- inside a model: train, save, load, copy, describe, profile --------------------------- */

/* input 6 -> fc 8 -> { glu (4), noisy (4) } -> add -> swish -> noisy head (2) */
static nn_model *graph(const nn_layer_type *t, uint64_t seed) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 6, 1, 1);
  int fc = nn_dense(m, "fc", 8);
  int a = nn_custom(m, "gate", &glu, NULL);
  nn_model_select(m, fc);
  noisy_config nc = {.out_features = 4, .sigma0 = 0.5f};
  int b = nn_custom(m, "branch", t, &nc);
  nn_add(m, "sum", a, b);
  nn_custom_activation(m, "act", &swish, 1.0f);
  nc.out_features = 2;
  nn_custom(m, "head", t, &nc);
  if (nn_model_build(m, 64, seed, &err)) fail_msg("%s", err.msg);
  return m;
}

static double eval_loss(nn_model *m, const float *x, const float *tgt, int B) {
  shoal_error err = {0};
  bool tr = nn_model_training(m);
  nn_model_set_training(m, false);
  const float *y;
  float loss;
  assert_int_equal(nn_model_forward(m, x, B, &y, &err), 0);
  assert_int_equal(nn_mse_loss(&loss, NULL, y, tgt, NULL, B, 2, &err), 0);
  nn_model_set_training(m, tr);
  return loss;
}

static void test_trains_saves_loads_copies(void **state) {
  const nn_layer_type *t = noisy_type();
  shoal_error err = {0};
  nn_model *m = graph(t, 11);
  enum { B = 64 };
  float x[B * 6], tgt[B * 2], dy[B * 2];
  fill(x, sizeof x / sizeof *x, 21);
  for (int i = 0; i < B; i++) { /* a smooth target of the inputs */
    tgt[2 * i] = sinf(x[6 * i]) + 0.5f * x[6 * i + 1];
    tgt[2 * i + 1] = x[6 * i + 2] * x[6 * i + 3] * 0.5f;
  }
  nn_optim_config oc = nn_optim_defaults(NN_ADAM);
  oc.lr = 1e-2f;
  oc.clip_norm = 1.0f;
  nn_optim *opt = nn_optim_create(m, &oc, &err);
  assert_non_null(opt);
  assert_int_equal(nn_model_profile(m, true, &err), 0);
  double l0 = eval_loss(m, x, tgt, B);
  for (int s = 0; s < 300; s++) {
    const float *y;
    float loss;
    nn_model_zero_grad(m);
    assert_int_equal(nn_model_forward(m, x, B, &y, &err), 0);
    assert_int_equal(nn_mse_loss(&loss, dy, y, tgt, NULL, B, 2, &err), 0);
    assert_int_equal(nn_model_backward(m, dy, NULL, &err), 0);
    assert_int_equal(nn_optim_step(opt, &err), 0);
  }
  double l1 = eval_loss(m, x, tgt, B);
  print_message("  mse of the mean network: %.4f before, %.4f after 300 Adam steps\n", l0, l1);
  assert_true(l1 < 0.3 * l0);
  assert_true(nn_optim_last_grad_norm(opt) > 0);

  /* every sigma was trained, not only the mean */
  nn_tensor_info ti;
  size_t n;
  assert_int_equal(nn_model_find_tensor(m, "head.weight_sigma", &ti), 0);
  assert_true(ti.trainable);
  assert_int_equal(ti.fan_in, 4);
  const float *ws = nn_model_params(m, &n) + ti.offset;
  bool moved = false;
  for (size_t i = 0; i < ti.numel; i++) moved |= fabsf(ws[i] - 0.5f / 2.0f) > 1e-4f;
  assert_true(moved);
  assert_int_equal(nn_model_find_tensor(m, "head.eps_out", &ti), 0);
  assert_false(ti.trainable);

  /* describe and profile name the custom kinds */
  char buf[4096];
  nn_model_describe(m, buf, sizeof buf);
  assert_non_null(strstr(buf, "noisy_linear"));
  assert_non_null(strstr(buf, "glu"));
  assert_non_null(strstr(buf, "swish"));
  nn_model_profile_table(m, buf, sizeof buf);
  assert_non_null(strstr(buf, "noisy_linear"));
  assert_non_null(strstr(buf, "head"));

  /* save and load into a fresh model (another init seed): the same outputs, bit for bit */
  char dir[] = "/tmp/shoal_nn_custom_XXXXXX", path[256];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/m.safetensors", dir);
  if (nn_model_save(m, path, &err)) fail_msg("%s", err.msg);
  nn_model *m2 = graph(t, 99);
  if (nn_model_load(m2, path, &err)) fail_msg("%s", err.msg);
  nn_model *m3 = graph(t, 98);
  if (nn_model_copy(m3, m, &err)) fail_msg("%s", err.msg);
  nn_model_set_training(m, false);
  nn_model_set_training(m2, false);
  nn_model_set_training(m3, false);
  const float *y;
  float ya[B * 2];
  assert_int_equal(nn_model_forward(m, x, B, &y, &err), 0);
  memcpy(ya, y, sizeof ya);
  assert_int_equal(nn_model_forward(m2, x, B, &y, &err), 0);
  assert_memory_equal(ya, y, sizeof ya);
  assert_int_equal(nn_model_forward(m3, x, B, &y, &err), 0);
  assert_memory_equal(ya, y, sizeof ya);
  /* and the optimizer's state with it */
  snprintf(path, sizeof path, "%s/o.safetensors", dir);
  if (nn_optim_save(opt, path, &err)) fail_msg("%s", err.msg);
  nn_optim *o2 = nn_optim_create(m2, &oc, &err);
  if (nn_optim_load(o2, path, &err)) fail_msg("%s", err.msg);
  assert_int_equal(nn_optim_steps(o2), 300);
  unlink(path);
  snprintf(path, sizeof path, "%s/m.safetensors", dir);
  unlink(path);
  rmdir(dir);
  nn_optim_destroy(o2);
  nn_optim_destroy(opt);
  nn_model_destroy(m3);
  nn_model_destroy(m2);
  nn_model_destroy(m);
}

/* ---- refusals ------------------------------------------------------------------------------ */

static int shape_two(nn_layer_shape *s, shoal_error *err) {
  s->C = 2, s->H = 1, s->W = 1;
  const nn_param_spec *cfg = s->config;
  s->params[0] = cfg[0];
  s->params[1] = cfg[1];
  s->n_params = 2;
  return 0;
}

/* nn_custom(type, config) on a model of input 5 returns code, and build then fails saying
 * want. */
static void refused(const nn_layer_type *type, const void *config, int code, const char *want) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 5, 1, 1);
  assert_int_equal(nn_custom(m, "t", type, config), code);
  assert_true(nn_model_build(m, 4, 1, &err) < 0);
  print_message("  refused: %s\n", err.msg);
  if (!strstr(err.msg, want)) fail_msg("'%s' does not say '%s'", err.msg, want);
  nn_model_destroy(m);
}

static void test_bad_tables_names_and_shapes_are_refused(void **state) {
  nn_layer_type bad = glu;
  bad.abi = 99;
  refused(&bad, NULL, SHOAL_EINVAL, "its type is for layer abi 99, this nn has 1");
  bad = glu;
  bad.backward = NULL;
  refused(&bad, NULL, SHOAL_EINVAL, "its custom layer type has no backward function");
  /* the shape function's own message, with the layer's name: 5 is odd */
  refused(&glu, NULL, SHOAL_ESHAPE, "layer 't' (glu): glu needs an even width, the input has 5");
  /* tensors: a dotted name, two of one name, a zero dimension */
  nn_layer_type two = {NN_LAYER_ABI, "two", 2 * sizeof(nn_param_spec), shape_two, glu_forward,
                       glu_backward};
  nn_param_spec sp[2] = {{"w.x", 1, {2}, true}, {"b", 1, {2}, true}};
  refused(&two, sp, SHOAL_EINVAL, "'w.x'");
  sp[0].name = "b";
  refused(&two, sp, SHOAL_EINVAL, "two tensors are named 'b'");
  sp[0] = (nn_param_spec){"w", 2, {2, 0}, true};
  refused(&two, sp, SHOAL_EINVAL, "bad shape");
  /* a config the type needs and was not given */
  refused(&two, NULL, SHOAL_EINVAL, "needs a config");
  /* a custom activation without its derivative */
  nn_activation_type half = swish;
  half.df = NULL;
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 5, 1, 1);
  assert_int_equal(nn_custom_activation(m, "a", &half, 1), SHOAL_EINVAL);
  assert_int_equal(nn_model_build(m, 4, 1, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "a custom activation needs"));
  nn_model_destroy(m);
}

static void test_registry_and_plugins(void **state) {
  const nn_layer_type *t = noisy_type();
  shoal_error err = {0};
  /* the same table again is fine; another under its kind is not */
  assert_int_equal(nn_layer_register(t, &err), 0);
  nn_layer_type other = *t;
  assert_int_equal(nn_layer_register(&other, &err), SHOAL_EEXIST);
  assert_non_null(strstr(err.msg, "noisy_linear"));
  nn_layer_type dash = glu;
  dash.kind = "my-layer";
  assert_int_equal(nn_layer_register(&dash, &err), SHOAL_EINVAL);
  assert_int_equal(nn_layer_register(&glu, &err), 0);
  assert_true(nn_layer_find("glu") == &glu);
  assert_null(nn_layer_find("no_such_layer"));
  char kinds[256];
  nn_layer_kinds(kinds, sizeof kinds);
  assert_non_null(strstr(kinds, "noisy_linear"));
  assert_non_null(strstr(kinds, "glu"));
  /* loading the plugin again does nothing */
  assert_int_equal(nn_layer_plugin_load(getenv("SHOAL_TEST_LAYER_PLUGIN"), &err), 0);
  /* a missing file; a library that is not a layer plugin (an env plugin) */
  assert_int_equal(nn_layer_plugin_load("/nonexistent/layers.so", &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, "/nonexistent/layers.so"));
  const char *pd = getenv("SHOAL_TEST_PLUGIN_DIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/libgridrun.so", pd ? pd : "");
  if (pd) {
    assert_int_equal(nn_layer_plugin_load(path, &err), SHOAL_EINVAL);
    assert_non_null(strstr(err.msg, "shoal_nn_plugin_init"));
    print_message("  %s\n", err.msg);
  }
  assert_int_equal(nn_layer_plugins_load("", &err), 0);
  /* configs' dense kinds: nn's own, a custom one with dense_config, one without, none */
  const nn_layer_type *dk = t;
  assert_int_equal(nn_layer_dense_kind("dense", NULL, &dk, &err), 0);
  assert_null(dk);
  assert_int_equal(nn_layer_dense_kind("noisy_linear", "", &dk, &err), 0);
  assert_true(dk == t);
  assert_int_equal(nn_layer_dense_kind("glu", NULL, &dk, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "layer 'glu' has no dense_config"));
  assert_int_equal(nn_layer_dense_kind("nope", NULL, &dk, &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, "(registered: "));
  nn_model *m = nn_model_create(NN_CPU, &err);
  nn_input(m, 5, 1, 1);
  assert_true(nn_dense_as(m, "a", 3, NULL) > 0);
  assert_true(nn_dense_as(m, "b", 2, t) > 0);
  assert_int_equal(nn_model_build(m, 2, 1, &err), 0);
  assert_int_equal(nn_model_find_tensor(m, "b.weight_sigma", &(nn_tensor_info){0}), 0);
  bool custom;
  assert_string_equal(nn_node_kind(m, 1, &custom), "dense");
  assert_false(custom);
  assert_string_equal(nn_node_kind(m, 2, &custom), "noisy_linear");
  assert_true(custom);
  assert_null(nn_node_kind(m, 9, &custom));
  nn_model_destroy(m);
}

/* Where a backend lacks the layer: a CUDA model refuses the GLU (no CUDA functions). */
static void test_cuda_without_cuda_functions_is_refused(void **state) {
  shoal_error err = {0};
  if (!nn_cuda_available(&err)) {
    print_message("SKIPPED: %s (a CUDA model must refuse a layer with no forward_cuda)\n",
                  err.msg);
    skip();
  }
  nn_model *m = nn_model_create(NN_CUDA, &err);
  assert_non_null(m);
  nn_input(m, 8, 1, 1);
  assert_true(nn_custom(m, "gate", &glu, NULL) > 0);
  assert_int_equal(nn_model_build(m, 4, 1, &err), SHOAL_ENOTSUP);
  assert_non_null(strstr(err.msg, "no forward_cuda"));
  nn_model_destroy(m);
}

/* ---- a loss of one's own ---------------------------------------------------------------- */

static double logcosh_l(float p, float t, float k) { return log(cosh((double)k * (p - t))) / k; }
static float logcosh_dl(float p, float t, float k) { return tanhf(k * (p - t)); }
static const nn_loss_type logcosh = {NN_LAYER_ABI, "log_cosh", logcosh_l, logcosh_dl};

static void test_custom_loss(void **state) {
  shoal_error err = {0};
  enum { B = 3, N = 4 };
  float p[B * N], t[B * N], w[B] = {1, 0.5f, 2}, d[B * N], loss;
  fill(p, B * N, 1);
  fill(t, B * N, 2);
  assert_int_equal(nn_custom_loss(&logcosh, &loss, d, p, t, w, B, N, 2.0f, &err), 0);
  double want = 0;
  for (int i = 0; i < B; i++)
    for (int j = 0; j < N; j++) want += w[i] * log(cosh(2.0 * (p[i * N + j] - t[i * N + j]))) / 2;
  want /= B * N;
  assert_true(fabs(loss - want) < 1e-6 * (1 + fabs(want)));
  /* its gradient against a central difference of the loss */
  for (int k = 0; k < B * N; k++) {
    float keep = p[k], lp, lm;
    p[k] = keep + 1e-2f;
    nn_custom_loss(&logcosh, &lp, NULL, p, t, w, B, N, 2.0f, &err);
    p[k] = keep - 1e-2f;
    nn_custom_loss(&logcosh, &lm, NULL, p, t, w, B, N, 2.0f, &err);
    p[k] = keep;
    assert_true(fabs(d[k] - (lp - lm) / 2e-2) < 1e-3);
  }
  p[5] = NAN;
  assert_int_equal(nn_custom_loss(&logcosh, &loss, d, p, t, w, B, N, 2.0f, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "log_cosh: prediction[5]"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_glu_matches_torch),
      cmocka_unit_test(test_noisy_matches_torch_training),
      cmocka_unit_test(test_noisy_matches_torch_eval),
      cmocka_unit_test(test_gradcheck_passes_right_layers),
      cmocka_unit_test(test_gradcheck_catches_a_wrong_backward),
      cmocka_unit_test(test_trains_saves_loads_copies),
      cmocka_unit_test(test_bad_tables_names_and_shapes_are_refused),
      cmocka_unit_test(test_registry_and_plugins),
      cmocka_unit_test(test_cuda_without_cuda_functions_is_refused),
      cmocka_unit_test(test_custom_loss),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
