/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_agent.c — the parts the distributed IMPALA / PPO programs share
 * (algos/agent.h, run/run.h): the run's shape from a config, the unroll columns, the
 * observation normaliser against Gymnasium's RunningMeanStd (two-pass moments), the
 * published parameter blob and snapshots with the normaliser's trailer (round trips,
 * damage named, a run that needs statistics refusing a snapshot without them), and a
 * network with an LSTM core: the core0 column, and evaluation carrying its state per
 * env copy from a reset at each episode start, as a hand-run episode does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/run.h"

static config *make_cfg(const char *yaml) {
  int n;
  const cfg_key *keys = onpolicy_schema(&n);
  shoal_error err = {0};
  config *c = config_create(keys, n, &err);
  assert_non_null(c);
  if (config_load_string(c, yaml, "test", &err) || onpolicy_check(c, &err))
    fail_msg("config: %s", err.msg);
  return c;
}

/* The model section: a preset written out as rows is the preset (the same torso), keys
 * override parts of it, and in both schemas the errors name the key. */
static void test_model_section(void **state) {
  int obs[3] = {4, 84, 84};
  config *c = make_cfg("algo: ppo\nac: {torso: nature}\n");
  ac_config preset = onpolicy_ac_config(c, 3, obs, 6, 0, NULL, NULL);
  config_destroy(c);
  c = make_cfg(
      "algo: ppo\nmodel:\n  conv: [[32, 8, 4], [64, 4, 2], [64, 3, 1]]\n"
      "  dense: [512]\n  input_scale: 0.00392156862745098\n  activation: relu\n");
  ac_config rows = onpolicy_ac_config(c, 3, obs, 6, 0, NULL, NULL);
  config_destroy(c);
  assert_true(preset.model_set && rows.model_set);
  assert_memory_equal(&preset.model, &rows.model, sizeof rows.model);
  /* a resolved config, dumped and read back as `shoal run` hands it to its programs
   * (every key then has a file origin), still names one network */
  c = make_cfg("algo: ppo\nmodel: {preset: nature}\n");
  char *yaml = NULL;
  shoal_error derr = {0};
  assert_int_equal(config_dump(c, &yaml, &derr), 0);
  config_destroy(c);
  c = make_cfg(yaml);
  free(yaml);
  ac_config dumped = onpolicy_ac_config(c, 3, obs, 6, 0, NULL, NULL);
  config_destroy(c);
  assert_memory_equal(&preset.model, &dumped.model, sizeof dumped.model);
  assert_int_equal(dumped.torso, AC_TORSO_NATURE);
  /* overrides on a preset: impala's stages, narrower, with a wider dense layer */
  c = make_cfg("algo: impala\nmodel: {preset: impala, stages: [8, 16], dense: [384]}\n");
  ac_config o = onpolicy_ac_config(c, 3, obs, 6, 0, NULL, NULL);
  config_destroy(c);
  assert_int_equal(o.model.nstages, 2);
  assert_int_equal(o.model.stages[1], 16);
  assert_int_equal(o.model.ndense, 1);
  assert_int_equal(o.model.dense[0], 384);
  assert_true(o.model.input_scale == 1.0f / 255.0f);
  /* mlp keeps ac.hidden* and ac.tanh unless the section says otherwise */
  c = make_cfg("algo: ppo\nac: {hidden0: 32, hidden1: 0}\nmodel: {activation: relu}\n");
  ac_config m = onpolicy_ac_config(c, 1, obs, 2, 0, NULL, NULL);
  config_destroy(c);
  assert_int_equal(m.model.ndense, 1);
  assert_int_equal(m.model.dense[0], 32);
  assert_false(m.model.tanh);
  /* Ape-X reads the same section */
  int n;
  shoal_error err = {0};
  const cfg_key *ak = apex_schema(&n);
  c = config_create(ak, n, &err);
  assert_int_equal(
      config_load_string(c, "algo: apex\nmodel: {preset: minatar, dense: [256]}\n", "a", &err), 0);
  assert_int_equal(apex_check(c, &err), 0);
  int mobs[3] = {4, 10, 10};
  dqn_config dc = apex_dqn_config(c, 3, mobs, 3);
  assert_true(dc.model_set);
  assert_int_equal(dc.model.nconv, 1);
  assert_int_equal(dc.model.conv[0].channels, 16);
  assert_int_equal(dc.model.dense[0], 256);
  /* errors name the key and where it came from */
  const struct {
    const char *yaml, *msg;
  } bad[] = {
      {"model: {preset: nature}\ndqn: {net: minatar}\n",
       "model.preset = nature (from a:1) and dqn.net = minatar (from a:2)"},
      {"model: {preset: resnet}\n", "model.preset 'resnet'"},
      {"model: {conv: [[16, 3]]}\n", "model.conv (from a:1): row 1 has 2 numbers"},
      {"model: {conv: '[[16, 3, x]]'}\n", "is not a whole number"},
      {"model: {dense: [1, 2, 3, 4, 5, 6, 7, 8, 9]}\n", "model.dense (from a:1): more than 8"},
      {"model: {activation: gelu}\n", "model.activation 'gelu'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    config_destroy(c);
    c = config_create(ak, n, &err);
    int rc = config_load_string(c, bad[i].yaml, "a", &err);
    if (!rc) rc = apex_check(c, &err);
    assert_int_equal(rc, SHOAL_EINVAL);
    if (!strstr(err.msg, bad[i].msg)) fail_msg("%s: %s", bad[i].yaml, err.msg);
  }
  config_destroy(c);
}

static void test_spec_and_columns(void **state) {
  config *c = make_cfg(
      "algo: impala\nenv: {id: MinAtar/Breakout-v1, num_envs: 8}\n"
      "impala: {unroll: 10, batch: 12}\nac: {torso: minatar}\n");
  op_spec s;
  shoal_error err = {0};
  assert_int_equal(op_spec_from_config(c, &s, &err), 0);
  assert_true(s.impala && s.obs_u8);
  assert_int_equal(s.T, 10);
  assert_int_equal(s.learn_B, 12);
  assert_int_equal(s.A, 3);
  rpc_spec rs;
  op_rpc_spec(&s, "r", &rs);
  assert_int_equal(rs.ncols, OP_NCOLS);
  assert_int_equal((int)rs.max_items, 8);
  assert_int_equal(rs.cols[OP_OBS].dtype, RPC_U8);
  assert_int_equal(rs.cols[OP_OBS].ndim, 4);
  assert_int_equal((int)rs.cols[OP_OBS].shape[0], 11); /* T + 1 */
  assert_int_equal((int)rs.cols[OP_FINAL].shape[0], 10);
  assert_int_equal((int)rs.cols[OP_OBS].shape[1], s.obs_shape[0]);
  assert_string_equal(rs.cols[OP_LOGP].name, "logp");
  assert_int_equal(rpc_spec_check(&rs, &err), 0);
  config_destroy(c);
  /* IMPALA here is discrete: a Box env is named as the problem. */
  c = make_cfg("algo: impala\nenv: {id: Pendulum-v1}\n");
  assert_int_equal(op_spec_from_config(c, &s, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "Box"));
  config_destroy(c);
}

static void test_norm_matches_two_pass(void **state) {
  op_norm z;
  assert_int_equal(op_norm_init(&z, 2, NULL), 0);
  enum { R = 300 };
  static float x[R][2];
  shoal_rng rng;
  shoal_rng_seed(&rng, 5);
  for (int i = 0; i < R; i++) {
    x[i][0] = (float)(3 + 2 * shoal_rng_normal(&rng));
    x[i][1] = (float)(-1 + 0.5 * shoal_rng_normal(&rng));
  }
  /* Three batches merged, as three learner updates would. */
  op_norm_update(&z, &x[0][0], 100);
  op_norm_update(&z, &x[100][0], 50);
  op_norm_update(&z, &x[150][0], 150);
  /* RunningMeanStd from mean 0, var 1, count 1e-4: the prior weighs 1e-4 of a sample. */
  for (int j = 0; j < 2; j++) {
    double m = 0, v = 0;
    for (int i = 0; i < R; i++) m += x[i][j];
    m /= R;
    for (int i = 0; i < R; i++) v += (x[i][j] - m) * (x[i][j] - m);
    v /= R;
    assert_true(fabs(z.mean[j] - m) < 1e-5 * (1 + fabs(m)));
    assert_true(fabs(z.var[j] - v) < 1e-4 * (1 + v));
  }
  assert_true(fabs(z.count - (R + 1e-4)) < 1e-9);
  float y[2] = {(float)z.mean[0], (float)(z.mean[1] + 100 * sqrt(z.var[1]))};
  op_norm_apply(&z, y, 1);
  assert_true(fabsf(y[0]) < 1e-5f);
  assert_true(y[1] == 10.0f); /* clipped at ±10 */
  op_norm_free(&z);
}

static void test_params_and_snapshots(void **state) {
  config *c = make_cfg(
      "algo: ppo\nenv: {id: Pendulum-v1, num_envs: 2, norm_obs: true}\n"
      "ppo: {steps: 8, minibatches: 2}\n");
  op_spec s;
  shoal_error err = {0};
  assert_int_equal(op_spec_from_config(c, &s, &err), 0);
  assert_int_equal(s.D, 1);
  op_agent a, b;
  assert_int_equal(op_agent_from_config(c, &s, 4, true, NN_CPU, &a, &err), 0);
  assert_int_equal(op_agent_from_config(c, &s, 4, false, NN_CPU, &b, &err), 0);
  size_t np;
  float *pa = nn_model_params(op_agent_model(&a), &np);
  for (size_t i = 0; i < np; i++) pa[i] = 0.001f * (float)(i % 97);
  op_norm za, zb;
  assert_int_equal(op_norm_init(&za, (int)s.obs_n, NULL), 0);
  assert_int_equal(op_norm_init(&zb, (int)s.obs_n, NULL), 0);
  float rows[6] = {1, 0, 2, 0.5f, -0.5f, 4};
  op_norm_update(&za, rows, 2);

  /* The published blob: parameters then the statistics. */
  size_t n = op_params_floats(&a, &s);
  assert_int_equal(n, np + 2 * s.obs_n + 1);
  float *blob = malloc(n * sizeof *blob);
  op_params_pack(&a, &s, &za, blob);
  assert_int_equal(op_params_unpack(&b, &s, blob, n - 1, &zb, &err), SHOAL_ESHAPE);
  assert_int_equal(op_params_unpack(&b, &s, blob, n, &zb, &err), 0);
  const float *pb = nn_model_params(op_agent_model(&b), &np);
  assert_memory_equal(pa, pb, np * sizeof *pa);
  for (size_t j = 0; j < s.obs_n; j++) assert_true(fabs(zb.mean[j] - za.mean[j]) < 1e-6);

  /* Snapshots: model safetensors + the normaliser's trailer (doubles, exact). */
  uint8_t *buf;
  size_t len;
  assert_int_equal(op_snapshot_encode(&a, &s, &za, &buf, &len, &err), 0);
  op_agent_destroy(&b);
  assert_int_equal(op_agent_from_config(c, &s, 4, false, NN_CPU, &b, &err), 0);
  op_norm zc;
  assert_int_equal(op_norm_init(&zc, (int)s.obs_n, NULL), 0);
  assert_int_equal(op_snapshot_decode(&b, &s, &zc, buf, len, &err), 0);
  pb = nn_model_params(op_agent_model(&b), &np);
  assert_memory_equal(pa, pb, np * sizeof *pa);
  assert_memory_equal(za.mean, zc.mean, s.obs_n * sizeof(double));
  assert_memory_equal(za.var, zc.var, s.obs_n * sizeof(double));
  assert_true(za.count == zc.count);
  /* A learner's agent resumes with the learner state too (its optimizer, bit for bit);
   * an actor's agent cannot resume; a snapshot without the state (an actor's, or an
   * older learner's) resumes with restored false. */
  op_agent r;
  assert_int_equal(op_agent_from_config(c, &s, 4, true, NN_CPU, &r, &err), 0);
  bool restored = false;
  assert_int_equal(op_snapshot_resume(&r, &s, &zc, buf, len, &restored, &err), 0);
  assert_true(restored);
  uint8_t *sa, *sr;
  size_t la, lr;
  assert_int_equal(
      a.p ? ppo_state_save(a.p, &sa, &la, &err) : impala_state_save(a.l, &sa, &la, &err), 0);
  assert_int_equal(
      r.p ? ppo_state_save(r.p, &sr, &lr, &err) : impala_state_save(r.l, &sr, &lr, &err), 0);
  assert_int_equal(la, lr);
  assert_memory_equal(sa, sr, la);
  free(sa), free(sr);
  assert_int_equal(op_snapshot_resume(&b, &s, &zc, buf, len, &restored, &err), SHOAL_ESTATE);
  uint8_t *nostate;
  size_t nl;
  assert_int_equal(op_snapshot_encode(&b, &s, &za, &nostate, &nl, &err), 0);
  assert_true(nl < len);
  assert_int_equal(op_snapshot_resume(&r, &s, &zc, nostate, nl, &restored, &err), 0);
  assert_false(restored);
  free(nostate);
  op_agent_destroy(&r);
  /* A damaged trailer is named; a negative variance is damage too. */
  size_t off_var = len - 16 - 8 - s.obs_n * 8;
  double neg = -1;
  uint8_t *bad = malloc(len);
  memcpy(bad, buf, len);
  memcpy(bad + off_var, &neg, 8);
  assert_int_equal(op_snapshot_decode(&b, &s, &zc, bad, len, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "normaliser"));
  uint64_t wrong_n = s.obs_n + 1;
  memcpy(bad, buf, len);
  memcpy(bad + len - 16, &wrong_n, 8);
  assert_int_equal(op_snapshot_decode(&b, &s, &zc, bad, len, &err), SHOAL_EFORMAT);
  /* The model's safetensors alone: a run that normalises needs the statistics. */
  uint8_t *plain;
  size_t plen;
  assert_int_equal(nn_model_save_buffer(op_agent_model(&a), &plain, &plen, &err), 0);
  assert_int_equal(op_snapshot_decode(&b, &s, &zc, plain, plen, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "no statistics"));
  free(plain), free(bad), free(buf), free(blob);
  op_norm_free(&za), op_norm_free(&zb), op_norm_free(&zc);
  op_agent_destroy(&a);
  op_agent_destroy(&b);
  config_destroy(c);
}

static void test_eval_greedy(void **state) {
  /* An untrained CartPole policy plays 10 episodes split over 10 copies: the mean lies
   * within CartPole's bounds and min <= mean <= max. */
  config *c = make_cfg("algo: ppo\nenv: {id: CartPole-v1}\n");
  op_spec s;
  shoal_error err = {0};
  assert_int_equal(op_spec_from_config(c, &s, &err), 0);
  op_agent a;
  assert_int_equal(op_agent_from_config(c, &s, 16, false, NN_CPU, &a, &err), 0);
  op_eval *e = op_eval_create(&s, 10, &err);
  assert_non_null(e);
  double m, sd, lo, hi;
  assert_int_equal(op_eval_run(e, &a, NULL, true, 9, &m, &sd, &lo, &hi, &err), 0);
  assert_true(lo >= 8 && hi <= 500 && lo <= m && m <= hi && sd >= 0);
  double m2, sd2;
  assert_int_equal(op_eval_run(e, &a, NULL, true, 9, &m2, &sd2, NULL, NULL, &err), 0);
  assert_true(m == m2); /* same seed, same episodes */
  op_eval_destroy(e);
  op_agent_destroy(&a);
  config_destroy(c);
}

/* One greedy episode of CartPoleNoVel-v1 (seed 9) with a's core, the state carried
 * from zeros (carry) or reset before every step; returns its return. */
static double play_by_hand(op_agent *a, bool carry) {
  shoal_error err = {0};
  env_vec *ev;
  env_vec_config vc = {0};
  assert_int_equal(env_vec_create(&ev, "CartPoleNoVel-v1", 1, &vc, &err), 0);
  float obs[4], fin[4], rew, st[64] = {0};
  uint8_t term = 0, trunc = 0, first = 1;
  int32_t act;
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  env_vec_reset(ev, 9, obs, NULL);
  env_vec_out out = {obs, &rew, &term, &trunc, fin};
  double ret = 0;
  while (!term && !trunc) {
    assert_int_equal(
        op_agent_act_recurrent(a, obs, 1, st, &first, &rng, true, &act, NULL, NULL, &err), 0);
    first = !carry;
    assert_int_equal(env_vec_step(ev, &act, &out, &err), 0);
    ret += rew;
  }
  env_vec_destroy(ev);
  return ret;
}

static void test_lstm_columns_and_eval(void **state) {
  config *c = make_cfg(
      "algo: impala\nenv: {id: CartPoleNoVel-v1, num_envs: 3}\nimpala: {unroll: 7}\n"
      "ac: {separate: false, hidden0: 16, hidden1: 0, lstm: 6}\n");
  op_spec s;
  shoal_error err = {0};
  assert_int_equal(op_spec_from_config(c, &s, &err), 0);
  assert_int_equal(s.lstm, 6);
  rpc_spec rs;
  op_rpc_spec(&s, "r", &rs);
  assert_int_equal(rs.ncols, OP_NCOLS + 1);
  assert_int_equal(op_spec_ncols(&s), OP_NCOLS + 1);
  assert_string_equal(rs.cols[OP_CORE0].name, "core0");
  assert_int_equal(rs.cols[OP_CORE0].dtype, RPC_F32);
  assert_int_equal(rs.cols[OP_CORE0].ndim, 1);
  assert_int_equal((int)rs.cols[OP_CORE0].shape[0], 12); /* (h, c) */
  assert_false(rs.cols[OP_CORE0].allow_nonfinite);
  assert_int_equal(rpc_spec_check(&rs, &err), 0);

  op_agent a;
  assert_int_equal(op_agent_from_config(c, &s, 16, false, NN_CPU, &a, &err), 0);
  assert_int_equal(a.S, 12);
  /* the stateless call is refused for a recurrent network */
  float o1[4] = {0};
  int32_t a1;
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  assert_int_equal(op_agent_act(&a, o1, 1, &rng, true, &a1, NULL, NULL, &err), SHOAL_ESTATE);
  /* Random parameters of a larger scale than the init's (its policy head is 0.01 x),
   * drawn until carrying the state changes the greedy play of the seed-9 episode from
   * resetting it every step: then the comparison below can tell the two apart. */
  size_t np = op_params_floats(&a, &s);
  float *blob = malloc(np * sizeof *blob);
  assert_non_null(blob);
  double ret = 0, ret_nostate = 0;
  for (int draw = 0; draw < 50 && ret == ret_nostate; draw++) {
    for (size_t i = 0; i < np; i++) blob[i] = 2.0f * (2 * shoal_rng_uniformf(&rng) - 1);
    assert_int_equal(op_params_unpack(&a, &s, blob, np, NULL, &err), 0);
    ret = play_by_hand(&a, true);
    ret_nostate = play_by_hand(&a, false);
  }
  free(blob);
  printf("hand-run return %g (the state reset every step: %g)\n", ret, ret_nostate);
  assert_true(ret != ret_nostate);
  op_eval *e = op_eval_create(&s, 1, &err);
  assert_non_null(e);
  double m, sd;
  assert_int_equal(op_eval_run(e, &a, NULL, true, 9, &m, &sd, NULL, NULL, &err), 0);
  assert_true(m == ret);
  /* again: the state left by the last run is reset, not carried into the next */
  assert_int_equal(op_eval_run(e, &a, NULL, true, 9, &m, &sd, NULL, NULL, &err), 0);
  assert_true(m == ret);
  op_eval_destroy(e);
  /* a feed-forward agent cannot evaluate for a run with a core, nor the other way */
  config *cf = make_cfg("algo: impala\nenv: {id: CartPoleNoVel-v1}\n");
  op_spec sf;
  assert_int_equal(op_spec_from_config(cf, &sf, &err), 0);
  op_agent af;
  assert_int_equal(op_agent_from_config(cf, &sf, 16, false, NN_CPU, &af, &err), 0);
  assert_int_equal(af.S, 0);
  e = op_eval_create(&s, 2, &err);
  assert_int_equal(op_eval_run(e, &af, NULL, true, 9, &m, &sd, NULL, NULL, &err), SHOAL_ESTATE);
  assert_non_null(strstr(err.msg, "recurrent state"));
  op_eval_destroy(e);
  op_agent_destroy(&af);
  config_destroy(cf);
  op_agent_destroy(&a);
  config_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spec_and_columns),      cmocka_unit_test(test_norm_matches_two_pass),
      cmocka_unit_test(test_params_and_snapshots),  cmocka_unit_test(test_eval_greedy),
      cmocka_unit_test(test_lstm_columns_and_eval), cmocka_unit_test(test_model_section),
  };
  return cmocka_run_group_tests_name("agent", tests, NULL, NULL);
}
