/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_dqn.c — Ape-X DQN's learn() and act(): targets and priorities by hand,
 * learning a bandit and a bootstrapped chain, exploration, bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run/run.h"

static dqn_config small(int obs, int A, bool dueling) {
  dqn_config c = dqn_defaults();
  c.obs_c = obs;
  c.num_actions = A;
  c.hidden[0] = 32;
  c.hidden[1] = 0;
  c.dueling = dueling;
  c.max_batch = 64;
  c.target_period = 20;
  c.lr = 5e-3f;
  c.seed = 7;
  return c;
}

/* With every weight zero, Q(s, ·) is the last layer's bias b for every s, so targets
 * and priorities can be worked by hand: y = R + d · b[argmax b], |δ| = |y − b[a]|. */
static void test_targets_and_priorities_by_hand(void **state) {
  shoal_error err = {0};
  dqn_config c = small(2, 3, false);
  dqn *d = dqn_create(&c, NN_CPU, true, &err);
  assert_non_null(d);
  size_t n;
  float *p = nn_model_params(dqn_model(d), &n);
  memset(p, 0, n * sizeof *p);
  nn_tensor_info ti;
  assert_int_equal(nn_model_find_tensor(dqn_model(d), "q.bias", &ti), 0);
  p[ti.offset + 0] = 1.0f;
  p[ti.offset + 1] = 3.0f;
  p[ti.offset + 2] = 2.0f;
  assert_int_equal(dqn_sync_target(d, &err), 0);

  float obs[4] = {0.5f, -1, 2, 0}, nobs[4] = {1, 1, -1, 0};
  int32_t act[2] = {0, 2};
  float ret[2] = {1, -1}, disc[2] = {0.5f, 0}, prio[2];
  dqn_batch b = {2, obs, act, ret, disc, nobs, NULL};
  dqn_stats st;
  assert_int_equal(dqn_learn(d, &b, prio, &st, &err), 0);
  /* Item 0: y = 1 + 0.5 · 3 = 2.5 against Q = 1; item 1: terminal, y = −1 against Q = 2. */
  assert_float_equal(prio[0], 1.5f, 1e-6);
  assert_float_equal(prio[1], 3.0f, 1e-6);
  /* Huber (δ = 1) of 1.5 and 3: 1.0 and 2.5, mean 1.75. */
  assert_float_equal(st.loss, 1.75f, 1e-6);
  assert_float_equal(st.q_mean, 1.5f, 1e-6);
  assert_int_equal(st.updates, 1);
  /* The step moves Q(s, a) toward y: b0 up, b2 down, b1 (no gradient) unchanged. */
  assert_true(p[ti.offset + 0] > 1.0f);
  assert_true(p[ti.offset + 2] < 2.0f);
  assert_float_equal(p[ti.offset + 1], 3.0f, 0);
  dqn_destroy(d);
}

/* A contextual bandit (γ irrelevant: discount 0): Q must learn r(s, a). */
static void test_learns_a_bandit(void **state) {
  for (int dueling = 0; dueling < 2; dueling++) {
    shoal_error err = {0};
    dqn_config c = small(2, 2, dueling);
    dqn *d = dqn_create(&c, NN_CPU, true, &err);
    assert_non_null(d);
    const float r[2][2] = {{1.0f, -1.0f}, {0.0f, 2.0f}};
    enum { B = 32 };
    float obs[B * 2], ret[B], disc[B], prio[B];
    int32_t act[B];
    shoal_rng rng;
    shoal_rng_seed(&rng, 3);
    for (int it = 0; it < 600; it++) {
      for (int i = 0; i < B; i++) {
        int s = (int)shoal_rng_below(&rng, 2);
        obs[2 * i] = s == 0;
        obs[2 * i + 1] = s == 1;
        act[i] = (int32_t)shoal_rng_below(&rng, 2);
        ret[i] = r[s][act[i]];
        disc[i] = 0;
      }
      dqn_batch b = {B, obs, act, ret, disc, obs, NULL};
      assert_int_equal(dqn_learn(d, &b, prio, NULL, &err), 0);
    }
    float probe[4] = {1, 0, 0, 1};
    const float *q;
    assert_int_equal(dqn_q(d, probe, 2, &q, &err), 0);
    for (int s = 0; s < 2; s++)
      for (int a = 0; a < 2; a++) assert_float_equal(q[s * 2 + a], r[s][a], 0.1);
    dqn_destroy(d);
  }
}

/* A two-step chain: s0 --(any action, r 0)--> s1 --(a1: r 1, terminal; a0: r 0,
 * terminal). With γ = 0.9 the fixed point is Q(s1) = (0, 1), Q(s0, ·) = 0.9: the
 * bootstrap through the target network must carry it back. */
static void test_bootstraps_through_the_target(void **state) {
  shoal_error err = {0};
  dqn_config c = small(2, 2, true);
  c.gamma = 0.9f;
  dqn *d = dqn_create(&c, NN_CPU, true, &err);
  enum { B = 32 };
  float obs[B * 2], nobs[B * 2], ret[B], disc[B];
  int32_t act[B];
  shoal_rng rng;
  shoal_rng_seed(&rng, 5);
  for (int it = 0; it < 1500; it++) {
    for (int i = 0; i < B; i++) {
      int s = (int)shoal_rng_below(&rng, 2);
      act[i] = (int32_t)shoal_rng_below(&rng, 2);
      obs[2 * i] = s == 0;
      obs[2 * i + 1] = s == 1;
      nobs[2 * i] = 0;
      nobs[2 * i + 1] = 1;
      ret[i] = s == 1 ? (float)act[i] : 0.0f;
      disc[i] = s == 1 ? 0.0f : 0.9f;
    }
    dqn_batch b = {B, obs, act, ret, disc, nobs, NULL};
    assert_int_equal(dqn_learn(d, &b, NULL, NULL, &err), 0);
  }
  float probe[4] = {1, 0, 0, 1};
  const float *q;
  assert_int_equal(dqn_q(d, probe, 2, &q, &err), 0);
  assert_float_equal(q[0], 0.9, 0.08);
  assert_float_equal(q[1], 0.9, 0.08);
  assert_float_equal(q[2], 0.0, 0.08);
  assert_float_equal(q[3], 1.0, 0.08);
  dqn_destroy(d);
}

static void test_act_and_exploration(void **state) {
  shoal_error err = {0};
  dqn_config c = small(3, 4, true);
  dqn *d = dqn_create(&c, NN_CPU, false, &err);
  assert_non_null(d);
  enum { B = 64 };
  float obs[B * 3];
  for (int i = 0; i < B * 3; i++) obs[i] = (float)((i * 37) % 11) / 5.0f - 1;
  int32_t a[B];
  const float *q;
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  assert_int_equal(dqn_act(d, obs, B, 0.0f, &rng, a, &q, &err), 0);
  for (int i = 0; i < B; i++)
    for (int k = 0; k < 4; k++) assert_true(q[i * 4 + a[i]] >= q[i * 4 + k]);
  /* ε = 1: uniform actions. */
  int counts[4] = {0};
  for (int it = 0; it < 100; it++) {
    assert_int_equal(dqn_act(d, obs, B, 1.0f, &rng, a, NULL, &err), 0);
    for (int i = 0; i < B; i++) counts[a[i]]++;
  }
  for (int k = 0; k < 4; k++) assert_true(abs(counts[k] - 1600) < 200);
  /* Ape-X's ε_i = 0.4^(1 + 7 i / (N − 1)). */
  assert_float_equal(dqn_actor_epsilon(0, 8, 0.4f, 7), 0.4f, 1e-7);
  assert_float_equal(dqn_actor_epsilon(7, 8, 0.4f, 7), powf(0.4f, 8), 1e-9);
  assert_float_equal(dqn_actor_epsilon(0, 1, 0.4f, 7), 0.4f, 1e-7);
  /* learn() is the learner's. */
  dqn_batch b = {1, obs, a, obs, obs, obs, NULL};
  assert_int_equal(dqn_learn(d, &b, NULL, NULL, &err), SHOAL_ESTATE);
  dqn_destroy(d);
}

static void test_bad_input(void **state) {
  shoal_error err = {0};
  dqn_config c = small(2, 2, false);
  dqn *d = dqn_create(&c, NN_CPU, true, &err);
  float obs[2] = {0, 1}, ret = 1, disc = 0.9f;
  int32_t a = 2;
  dqn_batch b = {1, obs, &a, &ret, &disc, obs, NULL};
  assert_int_equal(dqn_learn(d, &b, NULL, NULL, &err), SHOAL_ERANGE);
  assert_non_null(strstr(err.msg, "action 2"));
  a = 0;
  ret = NAN;
  assert_int_equal(dqn_learn(d, &b, NULL, NULL, &err), SHOAL_ENAN);
  ret = 1;
  obs[0] = INFINITY;
  assert_int_equal(dqn_learn(d, &b, NULL, NULL, &err), SHOAL_ENAN);
  b.B = 65;
  assert_int_equal(dqn_learn(d, &b, NULL, NULL, &err), SHOAL_EINVAL);
  float params[3] = {0};
  assert_int_equal(dqn_load_params(d, params, 3, &err), SHOAL_ESHAPE);
  dqn_destroy(d);
  c.num_actions = 0;
  assert_null(dqn_create(&c, NN_CPU, true, &err));
  c = small(2, 2, false);
  c.gamma = 1.5f;
  assert_null(dqn_create(&c, NN_CPU, true, &err));
}

/* The Ape-X config: the schema's defaults make a valid DQN; choice keys are checked. */
/* Params.arch: the description matches what build_net() builds, tensor for tensor. */
static void test_describe(void **state) {
  (void)state;
  dqn_config c = dqn_defaults();
  c.obs_c = 4;
  c.hidden[0] = 128;
  c.hidden[1] = 32;
  char *j = NULL;
  assert_int_equal(dqn_describe(&c, false, &j, NULL), 0);
  assert_string_equal(
      j,
      "{\"format\":1,\"algo\":\"apex\",\"input\":{\"shape\":[4],\"dtype\":\"f32\",\"scale\":1},"
      "\"layers\":[{\"kind\":\"flatten\"},"
      "{\"kind\":\"dense\",\"name\":\"fc1\",\"in\":4,\"out\":128,\"activation\":\"relu\"},"
      "{\"kind\":\"dense\",\"name\":\"fc2\",\"in\":128,\"out\":32,\"activation\":\"relu\"}],"
      "\"head\":{\"kind\":\"dueling\",\"in\":32,\"actions\":2,\"value\":\"value\","
      "\"advantage\":\"advantage\",\"q\":\"V + A - mean(A)\"}}");
  free(j);
  /* Every weight the description names is a tensor of the model, with its shape. */
  dqn *d = dqn_create(&c, NN_CPU, false, NULL);
  assert_non_null(d);
  nn_model *m = dqn_model(d);
  const char *names[] = {"fc1.weight", "fc2.weight", "value.weight", "advantage.weight"};
  const int64_t rows[] = {128, 32, 1, 2}, cols[] = {4, 128, 32, 32};
  for (int k = 0; k < 4; k++) {
    bool found = false;
    for (int i = 0; i < nn_model_tensor_count(m); i++) {
      nn_tensor_info ti;
      nn_model_tensor(m, i, &ti);
      if (strcmp(ti.name, names[k])) continue;
      found = true;
      assert_int_equal(ti.ndim, 2);
      assert_int_equal(ti.shape[0], rows[k]);
      assert_int_equal(ti.shape[1], cols[k]);
    }
    assert_true(found);
  }
  dqn_destroy(d);
  /* MinAtar: the conv torso on u8 planes; no dueling: one head q. */
  c = dqn_defaults();
  c.net = DQN_NET_MINATAR;
  c.obs_c = 4, c.obs_h = 10, c.obs_w = 10;
  c.num_actions = 6;
  c.dueling = false;
  assert_int_equal(dqn_describe(&c, true, &j, NULL), 0);
  assert_non_null(strstr(j, "\"shape\":[4,10,10],\"dtype\":\"u8\""));
  assert_non_null(strstr(j, "\"kind\":\"conv2d\",\"name\":\"conv1\",\"in\":4,\"out\":16"));
  assert_non_null(strstr(j, "\"name\":\"fc1\",\"in\":1024,\"out\":128"));
  assert_non_null(strstr(j, "\"head\":{\"kind\":\"q\",\"in\":128,\"actions\":6,\"q\":\"q\"}"));
  free(j);
  c.obs_c = 0;
  assert_int_equal(dqn_describe(&c, true, &j, NULL), SHOAL_EINVAL);
}

static void test_apex_config(void **state) {
  shoal_error err = {0};
  int n;
  const cfg_key *keys = apex_schema(&n);
  config *c = config_create(keys, n, &err);
  assert_non_null(c);
  assert_int_equal(apex_check(c, &err), 0);
  int shape[3] = {4, 10, 10};
  assert_int_equal(config_set(c, "dqn.net=minatar", &err), 0);
  assert_int_equal(config_set(c, "dqn.n_step=5", &err), 0);
  dqn_config dc = apex_dqn_config(c, 3, shape, 6);
  assert_int_equal(dc.net, DQN_NET_MINATAR);
  assert_int_equal(dc.obs_c, 4);
  assert_int_equal(dc.obs_w, 10);
  assert_int_equal(dc.num_actions, 6);
  assert_int_equal(dc.n_step, 5);
  dc.max_batch = 8;
  dqn *d = dqn_create(&dc, NN_CPU, true, &err);
  assert_non_null(d);
  dqn_destroy(d);
  assert_int_equal(config_set(c, "dqn.net=mpl", &err), 0);
  assert_int_equal(apex_check(c, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "'mpl' is not one of: mlp, minatar"));
  assert_int_equal(config_set(c, "dqn.net=mlp", &err), 0);
  assert_int_equal(config_set(c, "learner.device=gpu", &err), 0);
  assert_int_equal(apex_check(c, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "learner.device"));
  config_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_targets_and_priorities_by_hand),
      cmocka_unit_test(test_learns_a_bandit),
      cmocka_unit_test(test_bootstraps_through_the_target),
      cmocka_unit_test(test_act_and_exploration),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_apex_config),
      cmocka_unit_test(test_describe),
  };
  return cmocka_run_group_tests_name("dqn", tests, NULL, NULL);
}
