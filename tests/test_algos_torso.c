/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_algos_torso.c — the Atari presets of algos/torso.c against PyTorch 1.13
 * (tests/reference/nn_atari_nets.py builds the same `nature` and `impala` torsos as
 * torch modules, under the same tensor names): from the same weights and frames, the
 * outputs and every parameter's gradient of sum(y * r) agree within 2e-5 + 1e-4 |ref|
 * (each output; each gradient's sum, sum of |g| and 32 entries spread over it). Then
 * DQN and the actor-critic built from the presets: the scale is their first layer, the
 * MLP and MinAtar nets are unchanged, and observations too small are refused by name.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/ac.h"
#include "algos/algos.h"

static char fixture[4096];

static bool close_to(double got, double want) {
  return fabs(got - want) <= 2e-5 + 1e-4 * fabs(want);
}

/* Reads the fixture's section for net, builds the torso, checks it. */
static void check_net(const char *net) {
  FILE *f = fopen(fixture, "r");
  if (!f) fail_msg("no fixture %s: run tests/reference/nn_atari_nets.py", fixture);
  char *line = NULL;
  size_t cap = 0;
  int B = 0, F = 0;
  bool in = false;
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  assert_non_null(m);
  assert_int_equal(nn_input(m, 4, 84, 84), 0);
  assert_true(algos_image_torso(m, !strcmp(net, "impala"), "", NULL) > 0);
  if (nn_model_build(m, 2, 1, &err)) fail_msg("%s", err.msg);
  size_t np;
  float *params = nn_model_params(m, &np);
  /* the frames of the reference, bytes as floats */
  static float x[2 * 4 * 84 * 84];
  for (int b = 0; b < 2; b++)
    for (int c = 0; c < 4; c++)
      for (int h = 0; h < 84; h++)
        for (int w = 0; w < 84; w++)
          x[((b * 4 + c) * 84 + h) * 84 + w] =
              (float)((37 * b + 11 * c + 3 * h + 7 * w + (h * w) % 13) % 256);
  float *want_y = NULL;
  int k = 0, grads = 0;
  const float *y = NULL;
  while (getline(&line, &cap, f) > 0) {
    char name[128];
    if (!strncmp(line, "net ", 4)) {
      char which[32];
      if (in) break; /* the next net's section */
      in = sscanf(line, "net %31s %d %d", which, &B, &F) == 3 && !strcmp(which, net);
      continue;
    }
    if (!in) continue;
    if (!strncmp(line, "y ", 2)) {
      int n = 0, off = 0, used;
      sscanf(line, "y %d%n", &n, &off);
      assert_int_equal(n, B * F);
      want_y = malloc(sizeof *want_y * (size_t)n);
      for (int i = 0; i < n; i++, off += used) sscanf(line + off, "%f%n", &want_y[i], &used);
    } else if (!strncmp(line, "param ", 6)) {
      size_t n;
      double s;
      assert_int_equal(sscanf(line, "param %127s %zu %lf", name, &n, &s), 3);
      nn_tensor_info ti;
      if (nn_model_find_tensor(m, name, &ti)) fail_msg("%s: no tensor %s", net, name);
      assert_int_equal((int)ti.numel, (int)n);
      for (size_t j = 0; j < n; j++)
        params[ti.offset + j] = (float)(s * sin(0.7071 * (double)j + 1.618 * k));
      k++;
    } else if (!strncmp(line, "grad ", 5)) {
      if (!y) {
        /* every parameter is set: forward, and backward from dy = r */
        assert_int_equal(nn_model_params_changed(m, &err), 0);
        nn_model_set_training(m, true);
        if (nn_model_forward(m, x, B, &y, &err)) fail_msg("%s", err.msg);
        int bad = 0;
        for (int i = 0; i < B * F; i++)
          if (!close_to(y[i], want_y[i]) && bad++ < 5)
            fprintf(stderr, "%s: y[%d] = %.7g, torch %.7g\n", net, i, y[i], want_y[i]);
        assert_int_equal(bad, 0);
        float *dy = malloc(sizeof *dy * (size_t)(B * F));
        for (int i = 0; i < B * F; i++) dy[i] = (float)sin(0.3 * i);
        size_t ng;
        float *g = nn_model_grads(m, &ng);
        memset(g, 0, ng * sizeof *g);
        const float *dx;
        if (nn_model_backward(m, dy, &dx, &err)) fail_msg("%s", err.msg);
        free(dy);
      }
      double sum, sabs, v[32];
      int off = 0;
      assert_int_equal(sscanf(line, "grad %127s %lf %lf%n", name, &sum, &sabs, &off), 3);
      for (int i = 0, used; i < 32; i++, off += used) sscanf(line + off, "%lf%n", &v[i], &used);
      nn_tensor_info ti;
      assert_int_equal(nn_model_find_tensor(m, name, &ti), 0);
      size_t ng;
      const float *g = nn_model_grads(m, &ng) + ti.offset;
      double s = 0, a = 0;
      for (size_t j = 0; j < ti.numel; j++) s += g[j], a += fabs(g[j]);
      /* sums of many terms: against the size of the terms, not of the sum */
      if (fabs(s - sum) > 1e-4 * sabs + 1e-6 || !close_to(a, sabs))
        fail_msg("%s: %s: gradient sum %.7g (|.| %.7g), torch %.7g (%.7g)", net, name, s, a, sum,
                 sabs);
      for (int i = 0; i < 32; i++) {
        size_t j = (size_t)i * ti.numel / 32;
        if (!close_to(g[j], v[i]))
          fail_msg("%s: %s: gradient[%zu] = %.7g, torch %.7g", net, name, j, g[j], v[i]);
      }
      grads++;
    }
  }
  free(line);
  fclose(f);
  free(want_y);
  assert_non_null(y);
  fprintf(stderr, "%s: %d outputs and %d gradients match torch\n", net, B * F, grads);
  assert_int_equal(grads, nn_model_tensor_count(m));
  nn_model_destroy(m);
}

static void test_nature_matches_torch(void **state) { check_net("nature"); }
static void test_impala_matches_torch(void **state) { check_net("impala"); }

/* Output of a DQN / actor-critic for one fixed batch: a checksum of the network's
 * function, so a preset changing what mlp or minatar build shows. */
static void test_presets_in_the_algorithms(void **state) {
  shoal_error err = {0};
  dqn_config dc = dqn_defaults();
  dc.obs_c = 4, dc.obs_h = 84, dc.obs_w = 84, dc.num_actions = 6, dc.net = DQN_NET_NATURE;
  dc.max_batch = 2;
  dqn *d = dqn_create(&dc, NN_CPU, false, &err);
  if (!d) fail_msg("%s", err.msg);
  char *arch = NULL;
  assert_int_equal(dqn_describe(&dc, true, &arch, &err), 0);
  assert_non_null(strstr(arch, "\"scale\":0.00392156862745098"));
  assert_non_null(strstr(arch, "\"name\":\"conv3\",\"in\":64,\"out\":64"));
  assert_non_null(strstr(arch, "\"name\":\"fc1\",\"in\":3136,\"out\":512"));
  free(arch);
  dqn_destroy(d);
  dc.net = DQN_NET_IMPALA;
  if (!(d = dqn_create(&dc, NN_CPU, false, &err))) fail_msg("%s", err.msg);
  dqn_destroy(d);
  /* too small for the preset: refused, naming the layer */
  dc.obs_c = 4, dc.obs_h = dc.obs_w = 10, dc.net = DQN_NET_NATURE;
  assert_null(dqn_create(&dc, NN_CPU, false, &err));
  assert_non_null(
      strstr(err.msg, "dqn: model conv2 (64 4x4 stride 2 padding 0) does not fit its 1x1"));
  ac_config ac = ac_defaults();
  ac.obs_c = 4, ac.obs_h = ac.obs_w = 84, ac.num_actions = 6, ac.torso = AC_TORSO_IMPALA;
  ac.separate = false;
  ac__net n = {0};
  if (ac__create(&n, &ac, NN_CPU, 2, 0, 0, &err)) fail_msg("%s", err.msg);
  nn_tensor_info ti;
  assert_int_equal(nn_model_find_tensor(ac__trained(&n), "stage2.res1.conv1.weight", &ti), 0);
  assert_int_equal(ti.shape[0], 32);
  ac__destroy(&n);
  /* with an LSTM core: nature repeats per step; impala's residual additions cannot */
  ac.lstm = 32;
  assert_int_equal(ac__check(&ac, "impala", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "cannot feed an LSTM core"));
  ac.torso = AC_TORSO_NATURE;
  assert_int_equal(ac__check(&ac, "nature", &err), 0);
  ac__net r = {0};
  if (ac__create(&r, &ac, NN_CPU, 2, 4, 2, &err)) fail_msg("%s", err.msg);
  ac__destroy(&r);
  /* a vector observation cannot feed convolutions */
  ac.lstm = 0, ac.torso = AC_TORSO_IMPALA;
  ac.obs_h = ac.obs_w = 1;
  assert_int_equal(ac__check(&ac, "impala", &err), 0); /* 4x1x1 is an image of one pixel */
  ac.torso = AC_TORSO_MINATAR;
  assert_int_equal(ac__check(&ac, "minatar", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "minatar: model conv1 (16 3x3 stride 1 padding 0) does not fit"));
}

/* A checksum of every parameter: position-weighted, so a permutation shows too. */
static double checksum(nn_model *m) {
  size_t n;
  const float *p = nn_model_params(m, &n);
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)p[i] * (double)(i % 7 + 1);
  return s;
}

/* The parameters a DQN or actor-critic network starts from (seed 1): a checksum. */
static double dqn_sum(dqn_net net, int c, int h, int w, const algos_model *md) {
  shoal_error err = {0};
  dqn_config dc = dqn_defaults();
  dc.obs_c = c, dc.obs_h = h, dc.obs_w = w, dc.num_actions = 6, dc.net = net;
  dc.max_batch = 2, dc.seed = 1;
  if (md) dc.model_set = true, dc.model = *md;
  dqn *d = dqn_create(&dc, NN_CPU, false, &err);
  if (!d) fail_msg("%s", err.msg);
  double s = checksum(dqn_model(d));
  dqn_destroy(d);
  return s;
}

static double ac_sum(ac_torso torso, bool tanh, bool separate, int c, int h, int w,
                     const algos_model *md) {
  shoal_error err = {0};
  ac_config ac = ac_defaults();
  ac.obs_c = c, ac.obs_h = h, ac.obs_w = w, ac.num_actions = 6, ac.seed = 1;
  ac.torso = torso, ac.tanh = tanh, ac.separate = separate;
  if (md) ac.model_set = true, ac.model = *md;
  ac__net n = {0};
  if (ac__create(&n, &ac, NN_CPU, 2, 0, 0, &err)) fail_msg("%s", err.msg);
  double s = checksum(ac__trained(&n));
  ac__destroy(&n);
  return s;
}

/* The networks configs had before the presets and before the model section (each
 * built now from an algos_model), from the same seeds: the same parameters. The sums
 * were taken from the code before the model section (6d7e61a). */
static void test_old_nets_unchanged(void **state) {
  static const double want[] = {
      -45.046173610942787, -130.81819525631593, 21.145431086421013,  -67.126279449321856,
      -146.36748572077079, -30.176497107368171, -294.23211424058633, -59.336941827578855,
  };
  const double got[] = {
      dqn_sum(DQN_NET_MINATAR, 4, 10, 10, NULL),
      ac_sum(AC_TORSO_MLP, true, true, 4, 1, 1, NULL),
      dqn_sum(DQN_NET_MLP, 4, 1, 1, NULL),
      ac_sum(AC_TORSO_MLP, false, false, 4, 1, 1, NULL),
      ac_sum(AC_TORSO_MINATAR, false, true, 4, 10, 10, NULL),
      dqn_sum(DQN_NET_NATURE, 4, 84, 84, NULL),
      ac_sum(AC_TORSO_NATURE, false, false, 4, 84, 84, NULL),
      ac_sum(AC_TORSO_IMPALA, false, false, 4, 84, 84, NULL),
  };
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    fprintf(stderr, "net %zu: checksum %.17g (want %.17g)\n", i, got[i], want[i]);
    assert_true(got[i] == want[i]);
  }
}

/* A model written out as rows is its preset, layer for layer: the same parameters; rows
 * of another shape build what they say. */
static void test_model_rows(void **state) {
  algos_model nature = {.input_scale = 1.0f / 255.0f, .nconv = 3, .ndense = 1};
  nature.conv[0] = (algos_conv){32, 8, 4, 0};
  nature.conv[1] = (algos_conv){64, 4, 2, 0};
  nature.conv[2] = (algos_conv){64, 3, 1, 0};
  nature.dense[0] = 512;
  assert_true(dqn_sum(DQN_NET_MLP, 4, 84, 84, &nature) == dqn_sum(DQN_NET_NATURE, 4, 84, 84, NULL));
  assert_true(ac_sum(AC_TORSO_MLP, true, false, 4, 84, 84, &nature) ==
              ac_sum(AC_TORSO_NATURE, false, false, 4, 84, 84, NULL));
  algos_model mlp = {.input_scale = 1.0f, .ndense = 2, .dense = {64, 64}, .tanh = true};
  assert_true(ac_sum(AC_TORSO_MINATAR, false, true, 4, 1, 1, &mlp) ==
              ac_sum(AC_TORSO_MLP, true, true, 4, 1, 1, NULL));

  /* a stack no preset has: conv 16 5x5/2 padding 2, conv 8 3x3/1, a stage of 8, two
   * tanh layers */
  algos_model md = {.input_scale = 0.5f, .nconv = 2, .nstages = 1, .ndense = 2, .tanh = true};
  md.conv[0] = (algos_conv){16, 5, 2, 2};
  md.conv[1] = (algos_conv){8, 3, 1, 0};
  md.stages[0] = 8;
  md.dense[0] = 48, md.dense[1] = 24;
  shoal_error err = {0};
  int features = 0;
  assert_int_equal(algos_model_check(&md, 3, 21, 17, "t", &features, &err), 0);
  assert_int_equal(features, 24);
  dqn_config dc = dqn_defaults();
  dc.obs_c = 3, dc.obs_h = 21, dc.obs_w = 17, dc.num_actions = 5, dc.max_batch = 4;
  dc.model_set = true, dc.model = md;
  dqn *d = dqn_create(&dc, NN_CPU, false, &err);
  if (!d) fail_msg("%s", err.msg);
  nn_model *m = dqn_model(d);
  nn_tensor_info ti;
  /* 21x17 -> (21 + 4 - 5)/2 + 1 = 11 x 9 -> 9 x 7 -> pooled 5 x 4 */
  assert_int_equal(nn_model_find_tensor(m, "conv1.weight", &ti), 0);
  assert_int_equal(ti.shape[0], 16);
  assert_int_equal(ti.numel, 16 * 3 * 5 * 5);
  assert_int_equal(nn_model_find_tensor(m, "conv2.weight", &ti), 0);
  assert_int_equal(ti.numel, 8 * 16 * 3 * 3);
  assert_int_equal(nn_model_find_tensor(m, "stage0.res1.conv1.weight", &ti), 0);
  assert_int_equal(nn_model_find_tensor(m, "fc1.weight", &ti), 0);
  assert_int_equal(ti.numel, 48 * 8 * 5 * 4);
  assert_int_equal(nn_model_find_tensor(m, "fc2.weight", &ti), 0);
  assert_int_equal(ti.numel, 24 * 48);
  /* the layers run: finite values for a batch */
  float obs[2 * 3 * 21 * 17];
  const float *q = NULL;
  for (size_t i = 0; i < sizeof obs / sizeof *obs; i++) obs[i] = (float)(i % 11);
  shoal_rng rng;
  shoal_rng_seed(&rng, 3);
  int32_t a[2];
  assert_int_equal(dqn_act(d, obs, 2, 0.0f, &rng, a, &q, &err), 0);
  for (int i = 0; i < 10; i++) assert_true(isfinite(q[i]));
  char *arch = NULL;
  assert_int_equal(dqn_describe(&dc, false, &arch, &err), 0);
  fprintf(stderr, "%s\n", arch);
  assert_non_null(strstr(arch, "\"scale\":0.5}"));
  assert_non_null(strstr(arch,
                         "\"name\":\"conv1\",\"in\":3,\"out\":16,\"kernel\":[5,5],"
                         "\"stride\":2,\"padding\":2,\"activation\":\"tanh\""));
  assert_non_null(strstr(arch, "\"channels\":[8],\"out\":[8,5,4]"));
  assert_non_null(strstr(arch, "\"name\":\"fc2\",\"in\":48,\"out\":24"));
  free(arch);
  dqn_destroy(d);

  /* what does not fit is refused, naming the layer */
  md.conv[1] = (algos_conv){8, 12, 1, 0};
  assert_int_equal(algos_model_check(&md, 3, 21, 17, "dqn", NULL, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "conv2 (8 12x12 stride 1 padding 0) does not fit its 11x9"));
  md.conv[1] = (algos_conv){8, 3, 1, 3};
  assert_int_equal(algos_model_check(&md, 3, 21, 17, "dqn", NULL, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "padding in [0, kernel)"));
  md.conv[1] = (algos_conv){8, 3, 1, 0};
  assert_int_equal(algos_model_check(&md, 3, 1, 1, "dqn", NULL, &err), SHOAL_EINVAL);
  md.nconv = md.nstages = 0, md.dense[0] = 0;
  assert_int_equal(algos_model_check(&md, 3, 1, 1, "dqn", NULL, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "fc1 has 0 units"));
}

int main(void) {
  const char *src = getenv("SHOAL_SOURCE_DIR");
  snprintf(fixture, sizeof fixture, "%s/tests/reference/nn_atari_nets.txt", src ? src : ".");
  nn_set_threads(1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nature_matches_torch),
      cmocka_unit_test(test_impala_matches_torch),
      cmocka_unit_test(test_presets_in_the_algorithms),
      cmocka_unit_test(test_old_nets_unchanged),
      cmocka_unit_test(test_model_rows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
