/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/install_user.c — a user's program, built by tests/test_install.sh out of the tree
 * against an installed shoal only (-IPREFIX/include/shoal and libshoal, through pkg-config
 * and through find_package(shoal)). It checks what it gets back, not only that it links:
 *   - CartPole-v1: the spec (4 float32 observations, 2 actions), a seeded reset inside
 *     Gymnasium's bounds, +1 a step until the pole falls (always pushing right ends the
 *     episode in under 100 steps), the same episode again from the same seed;
 *   - nn: a dense layer whose parameters are set by hand computes W x + b;
 *   - store: a run created in a file:// store is found again;
 *   - with an argument plugin:PATH:GridRun-v0, examples/plugin_env's env built against the
 *     installed headers alone is loaded by id and stepped.
 * Prints "ok: ..." lines; exits 1 with a message on the first failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/shoal.h"
#include "envs/envs.h"
#include "nn/nn.h"
#include "store/store.h"

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "install_user: FAIL: " __VA_ARGS__); \
      fputc('\n', stderr);                                 \
      exit(1);                                             \
    }                                                      \
  } while (0)

/* Steps e with action 1 from a reset seeded with seed until the episode ends; returns its
 * length and leaves the first observation in first. */
static int push_right(env *e, uint64_t seed, float first[4]) {
  shoal_error err = {0};
  float obs[4];
  env_seed(e, seed);
  env_reset(e, obs);
  memcpy(first, obs, sizeof obs);
  for (int t = 1; t <= 500; t++) {
    int32_t a = 1;
    env_result r;
    CHECK(env_step(e, &a, obs, &r, &err) == 0, "env_step: %s", err.msg);
    CHECK(r.reward == 1.0, "CartPole's reward %g, not 1", r.reward);
    if (r.terminated || r.truncated) return t;
  }
  return -1;
}

static void check_cartpole(void) {
  shoal_error err = {0};
  env *e;
  CHECK(env_make(&e, "CartPole-v1", &err) == 0, "env_make: %s", err.msg);
  const env_spec *sp = env_get_spec(e);
  CHECK(sp->obs.ndim == 1 && sp->obs.shape[0] == 4 && sp->obs.dtype == ENV_FLOAT32,
        "CartPole's observation space is not (4,) float32");
  CHECK(sp->act.n == 2, "CartPole has %d actions, not 2", sp->act.n);
  float a[4], b[4];
  int len = push_right(e, 42, a);
  for (int i = 0; i < 4; i++) CHECK(fabsf(a[i]) <= 0.05f, "reset obs[%d] = %g", i, a[i]);
  CHECK(len > 0 && len < 100, "pushing right lasted %d steps", len);
  int again = push_right(e, 42, b);
  CHECK(again == len && !memcmp(a, b, sizeof a), "seed 42 gave another episode");
  env_destroy(e);
  printf("ok: CartPole-v1 pushed right: %d steps, the same again from seed 42\n", len);
}

static void check_nn(void) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  CHECK(m, "nn_model_create: %s", err.msg);
  CHECK(nn_input(m, 4, 1, 1) >= 0, "nn_input");
  CHECK(nn_dense(m, "fc", 2) >= 0, "nn_dense");
  CHECK(nn_model_build(m, 8, 7, &err) == 0, "nn_model_build: %s", err.msg);
  nn_tensor_info w, bias;
  CHECK(nn_model_find_tensor(m, "fc.weight", &w) == 0 && w.shape[0] == 2 && w.shape[1] == 4,
        "no fc.weight of shape (2, 4)");
  CHECK(nn_model_find_tensor(m, "fc.bias", &bias) == 0 && bias.numel == 2, "no fc.bias (2)");
  size_t n;
  float *p = nn_model_params(m, &n);
  CHECK(p && n == 10, "%zu parameters, not 10", n);
  for (int i = 0; i < 8; i++) p[w.offset + i] = 0.5f * (float)(i + 1); /* W = [[.5 1 1.5 2] ...] */
  p[bias.offset] = -1.0f;
  p[bias.offset + 1] = 0.25f;
  CHECK(nn_model_params_changed(m, &err) == 0, "nn_model_params_changed: %s", err.msg);
  const float x[4] = {1, 2, 3, 4};
  const float *y;
  CHECK(nn_model_forward(m, x, 1, &y, &err) == 0, "nn_model_forward: %s", err.msg);
  /* row 0: .5+2+4.5+8 - 1 = 14; row 1: 2.5+6+10.5+16 + .25 = 35.25 */
  CHECK(fabsf(y[0] - 14.0f) < 1e-5f && fabsf(y[1] - 35.25f) < 1e-5f,
        "dense forward gave (%g, %g), not (14, 35.25)", y[0], y[1]);
  nn_model_destroy(m);
  printf("ok: nn dense forward (%g, %g)\n", y[0], y[1]);
}

static void check_store(const char *dir) {
  shoal_error err = {0};
  char uri[4200];
  snprintf(uri, sizeof uri, "file://%s", dir);
  store *st;
  CHECK(store_open(&st, uri, &err) == 0, "store_open %s: %s", uri, err.msg);
  CHECK(store_run_create(st, "user-1", "algo: apex\n", STORE_RUN_RUNNING, &err) == 0,
        "store_run_create: %s", err.msg);
  store_run r;
  CHECK(store_run_find(st, "user-1", &r, &err) == 0, "store_run_find: %s", err.msg);
  CHECK(r.status == STORE_RUN_RUNNING && r.config && strstr(r.config, "apex"),
        "run user-1 came back with status %d, config %s", r.status, r.config ? r.config : "none");
  store_run_clear(&r);
  store_close(st);
  printf("ok: store %s keeps run user-1\n", uri);
}

static void check_plugin(const char *id) {
  shoal_error err = {0};
  env *e;
  CHECK(env_make(&e, id, &err) == 0, "env_make %s: %s", id, err.msg);
  const env_spec *sp = env_get_spec(e);
  CHECK(sp->obs.shape[0] == 4 && sp->act.n == 4, "GridRun's spec: obs %d, %d actions",
        sp->obs.shape[0], sp->act.n);
  float obs[4];
  env_seed(e, 3);
  env_reset(e, obs);
  double ret = 0;
  int t = 0;
  for (; t < 200; t++) {
    int32_t a = t % 4;
    env_result r;
    CHECK(env_step(e, &a, obs, &r, &err) == 0, "GridRun step: %s", err.msg);
    for (int i = 0; i < 4; i++) CHECK(obs[i] >= 0 && obs[i] <= 1, "GridRun obs %g", obs[i]);
    ret += r.reward;
    if (r.terminated || r.truncated) break;
  }
  /* An episode ends at the goal (+1) or at the 60-step limit. */
  CHECK(t < 60, "GridRun ran %d steps without its time limit", t + 1);
  CHECK(ret <= 1.0 && ret > -2.0, "GridRun's return %g", ret);
  env_destroy(e);
  printf("ok: %s: an episode of %d steps, return %.2f\n", id, t + 1, ret);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: install_user STORE_DIR [plugin:PATH:GridRun-v0]\n");
    return 2;
  }
  check_cartpole();
  check_nn();
  check_store(argv[1]);
  if (argc > 2) check_plugin(argv[2]);
  return 0;
}
