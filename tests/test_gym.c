/* SPDX-License-Identifier: Apache-2.0 */
/* Your own env: the gym: bridge against Gymnasium itself, and C plugins.
 *  - exactness: gym:CartPole-v1 (Gymnasium's Python env through the embedded
 *    interpreter) and shoal's built-in CartPole-v1, started from the same state, give the
 *    same observations, rewards and flags bit for bit for the same actions; likewise
 *    Acrobot, Pendulum, MountainCar and MountainCarContinuous. NumPy's AVX-512 loops are
 *    switched off (as tests/reference/gym_classic.py does): with them NumPy's float64
 *    sin/cos are Intel SVML's, which differ from libm's in the last bit.
 *  - the vector env over gym: auto-reset, final observations and the episode log;
 *  - every refusal, with its message: spaces, unknown ids, an env that raises, a NaN
 *    reward, an observation outside its space, and plugins (missing file, no entry
 *    point, another ABI, an invalid spec, a built-in's id).
 * The user envs come from tests/gym_user_envs.py, copied to a temporary folder on
 * PYTHONPATH, as a user's own module would be. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "envs/envs.h"

static char user_dir[256];

static void expect_fail(const char *id, const char *options, int code, const char *want1,
                        const char *want2) {
  env *e = NULL;
  shoal_error err = {0};
  int rc = env_make_opts(&e, id, options, &err);
  if (rc != code || !strstr(err.msg, want1) || (want2 && !strstr(err.msg, want2)))
    fprintf(stderr, "%s: rc %d, message: %s\n", id, rc, err.msg);
  assert_int_equal(rc, code);
  assert_non_null(strstr(err.msg, want1));
  if (want2) assert_non_null(strstr(err.msg, want2));
  assert_null(e);
}

/* ---- exactness ------------------------------------------------------------------------- */

static void exact_one(const char *id, int episodes, int max_steps) {
  char gid[64];
  snprintf(gid, sizeof gid, "gym:%s", id);
  env *g = NULL, *c = NULL;
  shoal_error err = {0};
  if (env_make(&g, gid, &err)) fail_msg("%s: %s", gid, err.msg);
  assert_int_equal(env_make(&c, id, &err), 0);
  const env_spec *gs = env_get_spec(g), *cs = env_get_spec(c);
  assert_int_equal(gs->obs.size, cs->obs.size);
  assert_int_equal(gs->act.n, cs->act.n);
  assert_int_equal(gs->act.size, cs->act.size);
  assert_int_equal(gs->max_episode_steps, cs->max_episode_steps);
  int n = cs->obs.size;
  float go[8], co[8];
  union {
    int32_t d;
    float f[4];
  } act;
  shoal_rng rng;
  shoal_rng_seed(&rng, 7);
  long steps = 0, ends = 0;
  for (int ep = 0; ep < episodes; ep++) {
    env_seed(g, 1000 + (uint64_t)ep);
    assert_int_equal(env_reset_opts(g, NULL, go, &err), 0);
    double st[16];
    int ns = env_get_state(g, st, 16, &err);
    if (ns < 1) fail_msg("%s: get_state: %s", gid, err.msg);
    env_reset(c, co);
    assert_int_equal(env_set_state(c, st, ns, &err), 0);
    for (int t = 0; t < max_steps; t++) {
      if (cs->act.n) {
        act.d = (int32_t)shoal_rng_below(&rng, (uint64_t)cs->act.n);
      } else {
        for (int k = 0; k < cs->act.size; k++)
          act.f[k] = cs->act.low[k] + shoal_rng_uniformf(&rng) * (cs->act.high[k] - cs->act.low[k]);
      }
      env_result gr, cr;
      if (env_step(g, &act, go, &gr, &err)) fail_msg("%s: %s", gid, err.msg);
      assert_int_equal(env_step(c, &act, co, &cr, &err), 0);
      steps++;
      if (memcmp(go, co, sizeof(float) * (size_t)n) != 0 || gr.reward != cr.reward ||
          gr.terminated != cr.terminated || gr.truncated != cr.truncated) {
        for (int k = 0; k < n; k++) fprintf(stderr, "  obs[%d] %.9g %.9g\n", k, go[k], co[k]);
        fail_msg("%s: episode %d step %d differs: reward %.17g / %.17g, flags %d%d / %d%d", id, ep,
                 t, gr.reward, cr.reward, gr.terminated, gr.truncated, cr.terminated, cr.truncated);
      }
      if (gr.terminated || gr.truncated) {
        ends++;
        break;
      }
    }
  }
  fprintf(stderr, "%s: %ld steps, %ld episode ends, bit for bit\n", id, steps, ends);
  assert_true(steps > 1000);
  assert_true(ends > 0);
  env_destroy(g);
  env_destroy(c);
}

static void test_exact_classic(void **state) {
  exact_one("CartPole-v1", 80, 500);
  exact_one("Acrobot-v1", 6, 500);
  exact_one("Pendulum-v1", 6, 200);
  exact_one("MountainCar-v0", 6, 200);
  exact_one("MountainCarContinuous-v0", 4, 999);
}

/* ---- the vector env over gym: ----------------------------------------------------------- */

/* Copy i of a vector equals a single env seeded alike, through auto-resets: the vector's
 * final observation is the single env's last, its next observation the new episode's
 * first (Gymnasium's SAME_STEP autoreset), and the episode log has the returns. */
static void test_vec_semantics(void **state) {
  enum { B = 3, T = 400 };
  shoal_error err = {0};
  env_vec *v = NULL;
  if (env_vec_create(&v, "gym:CartPole-v1", B, NULL, &err)) fail_msg("%s", err.msg);
  env *one = NULL;
  assert_int_equal(env_make(&one, "gym:CartPole-v1", &err), 0);
  float obs[B * 4], fin[B * 4], rew[B], o1[4];
  uint8_t te[B], tr[B];
  int32_t a[B];
  assert_int_equal(env_vec_reset(v, 50, obs, &err), 0);
  env_seed(one, 51); /* copy 1 is seeded with 50 + 1 */
  assert_int_equal(env_reset(one, o1), 0);
  assert_memory_equal(o1, obs + 4, sizeof o1);
  env_vec_out out = {obs, rew, te, tr, fin};
  int ended = 0;
  double ret = 0;
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < B; i++) a[i] = (t * 7 + i * 3) % 5 < 2;
    if (env_vec_step(v, a, &out, &err)) fail_msg("%s", err.msg);
    env_result r;
    assert_int_equal(env_step(one, &a[1], o1, &r, &err), 0);
    ret += r.reward;
    assert_true(rew[1] == (float)r.reward);
    assert_int_equal(te[1], r.terminated);
    assert_int_equal(tr[1], r.truncated);
    if (r.terminated || r.truncated) {
      assert_memory_equal(fin + 4, o1, sizeof o1);
      assert_int_equal(env_reset(one, o1), 0); /* goes on from its generator, as the copy */
      ended++;
    }
    assert_memory_equal(obs + 4, o1, sizeof o1);
  }
  assert_true(ended >= 3);
  env_vec_stats st;
  env_vec_get_stats(v, &st);
  assert_int_equal(st.steps, (uint64_t)B * T);
  assert_true(st.episodes >= (uint64_t)ended);
  env_episode eps[256];
  int ne = env_vec_episodes(v, eps, 256);
  double first_ret = NAN;
  for (int k = 0; k < ne; k++)
    if (eps[k].index == 1) {
      first_ret = eps[k].ret;
      break;
    }
  assert_true(first_ret >= 8 && first_ret <= 500);
  env_vec_destroy(v);
  env_destroy(one);
}

/* ---- refusals ----------------------------------------------------------------------------- */

static void test_refused_spaces_and_ids(void **state) {
  expect_fail("gym:Blackjack-v1", NULL, SHOAL_EINVAL, "observation space is Tuple",
              "FlattenObservation");
  expect_fail("gym:gym_user_envs:DictObs-v0", NULL, SHOAL_EINVAL, "observation space is Dict",
              NULL);
  expect_fail("gym:gym_user_envs:MultiBinaryAct-v0", NULL, SHOAL_EINVAL,
              "action space is MultiBinary", NULL);
  expect_fail("gym:NoSuchEnv-v0", NULL, SHOAL_EINVAL, "gym:NoSuchEnv-v0", "doesn't exist");
  expect_fail("gym:no_such_module_xyz:Foo-v0", NULL, SHOAL_EINVAL, "No module named",
              "no_such_module_xyz");
  expect_fail("gym:CartPole-v1", "no_such_kwarg=3", SHOAL_EINVAL, "no_such_kwarg", NULL);
}

/* ALE games (envs/atari.c; their frames against Gymnasium's are test_atari_exact.py's):
 * the spec, the training settings that an evaluation env drops (rewards past 1 reach it
 * unclipped; a training env clips them), single envs, and options refused by name. */
static void test_atari(void **state) {
  (void)state;
  shoal_error err = {0};
  env_vec *train = NULL, *eval = NULL;
  env_vec_config tc = {.options = "repeat_action_probability=0"};
  env_vec_config ec = {.options = "repeat_action_probability=0,reward_clip=1", .evaluation = 1};
  if (env_vec_create(&train, "gym:ALE/SpaceInvaders-v5", 2, &tc, &err) ||
      env_vec_create(&eval, "gym:ALE/SpaceInvaders-v5", 2, &ec, &err))
    fail_msg("%s", err.msg);
  const env_spec *sp = env_vec_spec(train);
  assert_int_equal(sp->obs.dtype, ENV_UINT8);
  assert_int_equal(sp->obs.ndim, 3);
  assert_int_equal(sp->obs.shape[0], 4);
  assert_int_equal(sp->obs.shape[1], 84);
  assert_int_equal(sp->obs.shape[2], 84);
  assert_int_equal(sp->act.n, 6);
  assert_string_equal(sp->id, "gym:ALE/SpaceInvaders-v5");
  enum { B = 2, OB = 4 * 84 * 84 };
  static uint8_t o1[B * OB], o2[B * OB], f1[B * OB], f2[B * OB];
  float r1[B], r2[B];
  uint8_t te1[B], tr1[B], te2[B], tr2[B];
  assert_int_equal(env_vec_reset(train, 3, o1, &err), 0);
  assert_int_equal(env_vec_reset(eval, 3, o2, &err), 0);
  assert_memory_equal(o1, o2, sizeof o1);
  env_vec_out out1 = {o1, r1, te1, tr1, f1}, out2 = {o2, r2, te2, tr2, f2};
  shoal_rng rng;
  shoal_rng_seed(&rng, 9);
  int big = 0, ended = 0;
  for (int t = 0; t < 2000 && !ended; t++) {
    int32_t a[B];
    for (int i = 0; i < B; i++) a[i] = (int32_t)shoal_rng_below(&rng, 6);
    if (env_vec_step(train, a, &out1, &err) || env_vec_step(eval, a, &out2, &err))
      fail_msg("%s", err.msg);
    for (int i = 0; i < B; i++) {
      /* the same game until a life is lost: then training ends an episode, not the game */
      assert_true(r1[i] == (float)((r2[i] > 0) - (r2[i] < 0)));
      big += r2[i] > 1;
      ended |= te1[i] != te2[i];
    }
  }
  assert_true(big > 0);
  assert_true(ended); /* a life lost: terminated in training, not in evaluation */
  env_vec_destroy(train);
  env_vec_destroy(eval);
  /* a single env: reset, steps, and a lost life that a reset continues */
  env *e = NULL;
  if (env_make_opts(&e, "gym:ALE/Breakout-v5", "repeat_action_probability=0", &err))
    fail_msg("%s", err.msg);
  static uint8_t ob[OB];
  env_seed(e, 4);
  assert_int_equal(env_reset(e, ob), 0);
  env_result res = {0};
  int t = 0;
  for (; t < 3000 && !res.terminated; t++) {
    int32_t a = t % 20 == 0 ? 1 : (int32_t)shoal_rng_below(&rng, 4);
    if (env_step(e, &a, ob, &res, &err)) fail_msg("%s", err.msg);
  }
  assert_true(res.terminated);
  static uint8_t last[OB];
  memcpy(last, ob, OB);
  assert_int_equal(env_reset(e, ob), 0);
  assert_memory_equal(ob, last, OB); /* the same screen: the game went on */
  env_destroy(e);
  expect_fail("gym:ALE/Pong-v5", "frameskip=4", SHOAL_EINVAL, "frame_skip", NULL);
  expect_fail("gym:ALE/Pong-v5", "frame_stack=0", SHOAL_EINVAL, "frame_stack=0", "[1, 16]");
  expect_fail("gym:ALE/Pong-v5", "screen_size=400", SHOAL_EINVAL, "screen_size 400", "210");
  expect_fail("gym:ALE/NoSuchGame-v5", NULL, SHOAL_EINVAL, "NoSuchGame", NULL);
}

/* An env that fails mid-run: the step returns SHOAL_EENV naming the env, the copy, the
 * step and the Python error's last line; nothing is written over the caller's rows. */
static void faulty(const char *how, const char *want) {
  char opts[64];
  snprintf(opts, sizeof opts, "how=%s,at=4", how);
  env_vec_config vc = {.options = opts};
  env_vec *v = NULL;
  shoal_error err = {0};
  if (env_vec_create(&v, "gym:gym_user_envs:Faulty-v0", 2, &vc, &err)) fail_msg("%s", err.msg);
  float obs[12], fin[12], rew[2];
  uint8_t te[2], tr[2];
  int32_t a[2] = {0, 0};
  assert_int_equal(env_vec_reset(v, 1, obs, &err), 0);
  env_vec_out out = {obs, rew, te, tr, fin};
  int rc = 0, t;
  for (t = 0; t < 10 && !rc; t++) rc = env_vec_step(v, a, &out, &err);
  fprintf(stderr, "%s: %s\n", how, err.msg);
  assert_int_equal(rc, SHOAL_EENV);
  assert_int_equal(t, 4);
  assert_non_null(strstr(err.msg, "gym:gym_user_envs:Faulty-v0"));
  assert_non_null(strstr(err.msg, "copy 0"));
  assert_non_null(strstr(err.msg, "vector step 4"));
  assert_non_null(strstr(err.msg, want));
  env_vec_destroy(v);
}

static void test_env_failures(void **state) {
  faulty("raise", "RuntimeError: the simulator lost its licence server");
  faulty("nan", "NaN reward");
  faulty("outside", "outside its declared space");
}

static void test_plugins(void **state) {
  const char *dir = getenv("SHOAL_TEST_PLUGIN_DIR");
  assert_non_null(dir);
  char id[512];
  snprintf(id, sizeof id, "plugin:%s/libgridrun.so:GridRun-v0", dir);
  env *e = NULL;
  shoal_error err = {0};
  if (env_make_opts(&e, id, "step_cost=0.05", &err)) fail_msg("%s", err.msg);
  assert_string_equal(env_get_spec(e)->id, "GridRun-v0");
  float o[4];
  env_seed(e, 3);
  env_reset(e, o);
  int32_t a = 3;
  env_result r;
  assert_int_equal(env_step(e, &a, o, &r, &err), 0);
  assert_true(r.reward == -0.05 || r.reward == 1.0);
  a = 4;
  assert_int_equal(env_step(e, &a, o, &r, &err), SHOAL_ERANGE);
  env_destroy(e);
  /* the name may be left out when the plugin has one env; loading twice is fine */
  snprintf(id, sizeof id, "plugin:%s/libgridrun.so", dir);
  assert_int_equal(env_make(&e, id, &err), 0);
  env_destroy(e);
  assert_int_equal(env_make(&e, "GridRun-v0", &err), 0); /* registered now */
  env_destroy(e);
  expect_fail("plugin:/nonexistent/libnope.so:X-v0", NULL, SHOAL_ENOENT, "/nonexistent/libnope.so",
              "no such file");
  snprintf(id, sizeof id, "plugin:%s/libgridrun.so:Other-v0", dir);
  expect_fail(id, NULL, SHOAL_ENOENT, "exports no env 'Other-v0'", NULL);
  snprintf(id, sizeof id, "plugin:%s/libbad_plugin1.so", dir);
  expect_fail(id, NULL, SHOAL_EINVAL, "ABI 99", "rebuild it");
  snprintf(id, sizeof id, "plugin:%s/libbad_plugin2.so", dir);
  expect_fail(id, NULL, SHOAL_EINVAL, "no entry point 'shoal_env_plugin'", NULL);
  snprintf(id, sizeof id, "plugin:%s/libbad_plugin3.so", dir);
  expect_fail(id, NULL, SHOAL_EINVAL, "invalid env 'BadPlugin-v0'", "does not match its shape");
  snprintf(id, sizeof id, "plugin:%s/libbad_plugin4.so", dir);
  expect_fail(id, NULL, SHOAL_EEXIST, "'CartPole-v1' clashes", NULL);
  /* the clash changed nothing: CartPole-v1 is still the built-in */
  assert_int_equal(env_make(&e, "CartPole-v1", &err), 0);
  assert_true(env_get_spec(e)->render_w > 0);
  env_destroy(e);
}

int main(void) {
  /* NumPy's float64 sin/cos as libm's (see the top); set before Python starts */
  setenv("NPY_DISABLE_CPU_FEATURES",
         "AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR", 1);
  const char *src = getenv("SHOAL_SOURCE_DIR");
  if (!src) {
    fprintf(stderr, "SHOAL_SOURCE_DIR is not set (ctest sets it)\n");
    return 1;
  }
  snprintf(user_dir, sizeof user_dir, "/tmp/shoal-gym-XXXXXX");
  if (!mkdtemp(user_dir)) return 1;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "cp '%s/tests/gym_user_envs.py' '%s/'", src, user_dir);
  if (system(cmd) != 0) return 1;
  setenv("PYTHONPATH", user_dir, 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exact_classic),
      cmocka_unit_test(test_vec_semantics),
      cmocka_unit_test(test_refused_spaces_and_ids),
      cmocka_unit_test(test_env_failures),
      cmocka_unit_test(test_plugins),
      cmocka_unit_test(test_atari),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", user_dir);
  if (system(cmd) != 0) rc = 1;
  return rc;
}
