/* SPDX-License-Identifier: Apache-2.0 */
/* Classic control against Gymnasium: reference trajectories written by
 * tests/reference/gym_classic.py (NumPy float64, Gymnasium's equations), first steps
 * worked from the published equations, time limits, seeding, action checks and long
 * random rollouts. Compiled with -ffp-contract=off -fno-builtin-pow like the library, so
 * the expected values here are computed as NumPy computes them. */
#define _DEFAULT_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "envs/envs.h"
#include "envs/gymmath.h" /* private: env__sq is checked against pow directly */

static const char *classic_ids[] = {"CartPole-v1", "MountainCar-v0", "MountainCarContinuous-v0",
                                    "Acrobot-v1", "Pendulum-v1"};

static env *make(const char *id) {
  env *e = NULL;
  shoal_error err = {0};
  int rc = env_make(&e, id, &err);
  if (rc) fprintf(stderr, "env_make(%s): %s\n", id, err.msg);
  assert_int_equal(rc, 0);
  return e;
}

/* ---- reference trajectories ------------------------------------------------------------ */

static char *read_token(char **p) {
  while (**p == ' ') (*p)++;
  if (!**p || **p == '\n') return NULL;
  char *s = *p;
  while (**p && **p != ' ' && **p != '\n') (*p)++;
  if (**p) *(*p)++ = 0;
  return s;
}

static double num(char **p) {
  char *t = read_token(p);
  assert_non_null(t);
  return strtod(t, NULL);
}

typedef struct ref_counts {
  long steps, state_exact, obs_exact, flags_ok, onestep_ok, pow_sensitive;
} ref_counts;

/* Runs every episode of one env from the fixture. Whole trajectories must agree bit for
 * bit (same libm as the fixture's NumPy); and each single step started from the
 * reference state must agree to 1e-12 (a check that holds even on another libm). */
static void run_env(FILE *f, const char *id, int episodes, ref_counts *c) {
  env *e = make(id), *e1 = make(id);
  const env_spec *sp = env_get_spec(e);
  int obs_n = sp->obs.size;
  float obs[8], obs1[8];
  char line[4096];
  for (int ep = 0; ep < episodes; ep++) {
    assert_non_null(fgets(line, sizeof line, f));
    assert_int_equal(strncmp(line, "ep ", 3), 0);
    char *p = line + 3;
    int n = (int)num(&p);
    double start[4];
    int ns = 0;
    char *t;
    while ((t = read_token(&p))) start[ns++] = strtod(t, NULL);
    env_reset(e, obs);
    env_reset(e1, obs1);
    shoal_error err = {0};
    assert_int_equal(env_set_state(e, start, ns, &err), 0);
    double prev[4];
    memcpy(prev, start, sizeof prev);
    for (int k = 0; k < n; k++) {
      assert_non_null(fgets(line, sizeof line, f));
      p = line;
      char *at = read_token(&p);
      int32_t ai = 0;
      float af = 0;
      const void *act;
      if (sp->act.n > 0) {
        ai = (int32_t)strtol(at, NULL, 10);
        act = &ai;
      } else {
        af = (float)strtod(at, NULL);
        act = &af;
      }
      double reward = num(&p);
      int term = (int)num(&p);
      double st[4];
      for (int j = 0; j < ns; j++) st[j] = num(&p);
      assert_string_equal(read_token(&p), "|");
      float ob[8];
      for (int j = 0; j < obs_n; j++) ob[j] = (float)num(&p);

      env_result r;
      assert_int_equal(env_step(e, act, obs, &r, &err), 0);
      double got[4];
      assert_int_equal(env_get_state(e, got, 4, &err), ns);
      int exact = 1;
      for (int j = 0; j < ns; j++) exact &= memcmp(&got[j], &st[j], sizeof(double)) == 0;
      c->state_exact += exact;
      c->obs_exact += memcmp(obs, ob, sizeof(float) * (size_t)obs_n) == 0;
      int trunc = sp->max_episode_steps > 0 && k + 1 >= sp->max_episode_steps;
      c->flags_ok += r.reward == reward && r.terminated == term && r.truncated == trunc;
      if (!exact && c->state_exact == c->steps)
        for (int j = 0; j < ns; j++)
          fprintf(stderr, "%s ep %d step %d: state[%d]: got %a, want %a\n", id, ep, k, j, got[j],
                  st[j]);

      /* one step from the reference's previous state */
      if (r.terminated || r.truncated) env_reset(e1, obs1);
      env_reset(e1, obs1);
      assert_int_equal(env_set_state(e1, prev, ns, &err), 0);
      env_result r1;
      assert_int_equal(env_step(e1, act, obs1, &r1, &err), 0);
      double got1[4];
      env_get_state(e1, got1, 4, &err);
      int ok = r1.terminated == term && fabs(r1.reward - reward) <= 1e-12 * fmax(1, fabs(reward));
      for (int j = 0; j < ns; j++) ok &= fabs(got1[j] - st[j]) <= 1e-12 * fmax(1, fabs(st[j]));
      c->onestep_ok += ok;
      memcpy(prev, st, sizeof prev);
      c->steps++;
    }
  }
  env_destroy(e);
  env_destroy(e1);
}

static void test_reference_trajectories(void **unused) {
  const char *src = getenv("SHOAL_SOURCE_DIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/reference/classic_ref.txt", src ? src : ".");
  FILE *f = fopen(path, "r");
  if (!f) fprintf(stderr, "cannot open %s\n", path);
  assert_non_null(f);
  char line[4096];
  assert_non_null(fgets(line, sizeof line, f));
  assert_int_equal(strncmp(line, "shoal-envs-classic-ref 1 ", 25), 0);
  int envs_seen = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "end", 3) == 0) break;
    char id[128];
    int episodes;
    assert_int_equal(sscanf(line, "env %127s %d", id, &episodes), 2);
    ref_counts c = {0};
    run_env(f, id, episodes, &c);
    fprintf(stderr,
            "%-26s %5ld steps: state bit-exact %ld, obs exact %ld, flags+reward %ld, "
            "one-step 1e-12 %ld\n",
            id, c.steps, c.state_exact, c.obs_exact, c.flags_ok, c.onestep_ok);
    assert_true(c.steps > 100);
    assert_int_equal(c.state_exact, c.steps);
    assert_int_equal(c.obs_exact, c.steps);
    assert_int_equal(c.flags_ok, c.steps);
    assert_int_equal(c.onestep_ok, c.steps);
    envs_seen++;
  }
  fclose(f);
  assert_int_equal(envs_seen, 5);
}

/* ---- first steps from the published equations ------------------------------------------ */

static void test_cartpole_first_step(void **unused) {
  env *e = make("CartPole-v1");
  float obs[4];
  env_reset(e, obs);
  double s0[4] = {0.01, -0.02, 0.03, 0.04};
  shoal_error err = {0};
  assert_int_equal(env_set_state(e, s0, 4, &err), 0);
  /* Florian (2007), Gymnasium's form: force = +10 for action 1 */
  double g = 9.8, mc = 1.0, mp = 0.1, M = mp + mc, l = 0.5, pml = mp * l, tau = 0.02;
  double th = s0[2], thd = s0[3], ct = cos(th), st = sin(th);
  double temp = (10.0 + pml * (thd * thd) * st) / M;
  double thacc = (g * st - ct * temp) / (l * (4.0 / 3.0 - mp * (ct * ct) / M));
  double xacc = temp - pml * thacc * ct / M;
  double want[4] = {s0[0] + tau * s0[1], s0[1] + tau * xacc, th + tau * thd, thd + tau * thacc};
  int32_t a = 1;
  env_result r;
  assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
  double got[4];
  env_get_state(e, got, 4, &err);
  for (int j = 0; j < 4; j++) {
    assert_true(fabs(got[j] - want[j]) <= 1e-15);
    assert_true(obs[j] == (float)want[j]);
  }
  assert_true(r.reward == 1.0 && !r.terminated && !r.truncated && r.elapsed == 1);
  /* pole past 12 degrees terminates, with reward 1 on that step */
  double edge[4] = {0, 0, 12 * 2 * M_PI / 360 - 1e-4, 1.0};
  env_set_state(e, edge, 4, &err);
  assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
  assert_true(r.terminated && r.reward == 1.0);
  assert_int_equal(env_step(e, &a, obs, &r, &err), SHOAL_ESTATE);
  assert_non_null(strstr(err.msg, "env_reset"));
  env_destroy(e);
}

/* CartPoleNoVel-v1 is CartPole-v1 step for step, seed for seed, with the cart and pole
 * velocities zeroed in every observation (reset, step and the vector env's final
 * observation) and the same rewards, ends and time limit. */
static void test_cartpole_novel(void **unused) {
  env *a = make("CartPole-v1"), *b = make("CartPoleNoVel-v1");
  assert_int_equal(env_get_spec(b)->max_episode_steps, 500);
  env_seed(a, 9);
  env_seed(b, 9);
  float oa[4], ob[4];
  env_reset(a, oa);
  env_reset(b, ob);
  shoal_error err = {0};
  int episodes = 0;
  for (int t = 0; t < 600; t++) {
    assert_true(ob[0] == oa[0] && ob[2] == oa[2] && ob[1] == 0.0f && ob[3] == 0.0f);
    assert_true(oa[1] != 0.0f || oa[3] != 0.0f);
    int32_t act = (int32_t)((t * 7) % 3 == 0);
    env_result ra, rb;
    assert_int_equal(env_step(a, &act, oa, &ra, &err), 0);
    assert_int_equal(env_step(b, &act, ob, &rb, &err), 0);
    assert_true(ra.reward == rb.reward && ra.terminated == rb.terminated &&
                ra.truncated == rb.truncated);
    if (ra.terminated || ra.truncated) {
      episodes++;
      env_reset(a, oa);
      env_reset(b, ob);
    }
  }
  assert_true(episodes >= 5);
  env_destroy(a);
  env_destroy(b);
  env_vec *v = NULL;
  assert_int_equal(env_vec_create(&v, "CartPoleNoVel-v1", 3, NULL, &err), 0);
  float vo[12], fin[12], rew[3];
  uint8_t term[3], trunc[3];
  int32_t acts[3] = {0, 0, 0};
  env_vec_reset(v, 1, vo, NULL);
  env_vec_out out = {vo, rew, term, trunc, fin};
  int ended = 0;
  for (int t = 0; t < 100; t++) {
    assert_int_equal(env_vec_step(v, acts, &out, &err), 0);
    for (int i = 0; i < 3; i++) {
      assert_true(vo[4 * i + 1] == 0.0f && vo[4 * i + 3] == 0.0f);
      if (term[i]) {
        ended++;
        assert_true(fin[4 * i + 1] == 0.0f && fin[4 * i + 3] == 0.0f);
      }
    }
  }
  assert_true(ended > 0);
  env_vec_destroy(v);
}

static void test_mountaincar_first_step(void **unused) {
  env *e = make("MountainCar-v0");
  float obs[2];
  env_reset(e, obs);
  assert_true(obs[0] >= -0.6f && obs[0] <= -0.4f && obs[1] == 0.0f);
  double s0[2] = {-0.5, 0.01};
  shoal_error err = {0};
  env_set_state(e, s0, 2, &err);
  /* v' = v + (a - 1) * 0.001 - 0.0025 cos(3 p); p' = p + v' */
  double v = s0[1] + ((2 - 1) * 0.001 + cos(3 * s0[0]) * (-0.0025)), p = s0[0] + v;
  int32_t a = 2;
  env_result r;
  assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
  double got[2];
  env_get_state(e, got, 2, &err);
  assert_true(got[0] == p && got[1] == v && r.reward == -1.0 && !r.terminated);
  /* the left wall is inelastic */
  double wall[2] = {-1.19, -0.05};
  env_set_state(e, wall, 2, &err);
  a = 0;
  env_step(e, &a, obs, &r, &err);
  env_get_state(e, got, 2, &err);
  assert_true(got[0] == -1.2 && got[1] == 0.0);
  /* goal at 0.5 with non-negative velocity */
  double goal[2] = {0.49, 0.02};
  env_set_state(e, goal, 2, &err);
  a = 2;
  env_step(e, &a, obs, &r, &err);
  assert_true(r.terminated);
  env_destroy(e);
}

static void test_mountaincar_continuous(void **unused) {
  env *e = make("MountainCarContinuous-v0");
  float obs[2];
  env_reset(e, obs);
  double s0[2] = {-0.5, 0.0};
  shoal_error err = {0};
  env_set_state(e, s0, 2, &err);
  /* force clipped to [-1, 1]; reward -0.1 * a^2 with the unclipped a; float32 state */
  float a = 3.0f;
  env_result r;
  assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
  double v = 0.0 + (1.0 * 0.0015 - 0.0025 * cos(3 * -0.5)), p = -0.5 + v;
  double got[2];
  env_get_state(e, got, 2, &err);
  assert_true(got[0] == (double)(float)p && got[1] == (double)(float)v);
  assert_true(r.reward == 0.0 - 9.0 * 0.1);
  double goal[2] = {0.44, 0.02};
  env_set_state(e, goal, 2, &err);
  a = 0.5f;
  env_step(e, &a, obs, &r, &err);
  assert_true(r.terminated && r.reward == 100.0 - 0.25 * 0.1);
  env_destroy(e);
}

/* NumPy's x**2 on float64 is libm pow (this file is built with -fno-builtin-pow). */
static double pw2(double x) { return pow(x, 2.0); }

static void acrobot_deriv(const double *y, double a, double *dy) {
  double m1 = 1, m2 = 1, l1 = 1, lc1 = 0.5, lc2 = 0.5, I1 = 1, I2 = 1, g = 9.8;
  double t1 = y[0], t2 = y[1], dt1 = y[2], dt2 = y[3];
  double d1 = m1 * pw2(lc1) + m2 * (pw2(l1) + pw2(lc2) + 2 * l1 * lc2 * cos(t2)) + I1 + I2;
  double d2 = m2 * (pw2(lc2) + l1 * lc2 * cos(t2)) + I2;
  double phi2 = m2 * lc2 * g * cos(t1 + t2 - M_PI / 2.0);
  double phi1 = -m2 * l1 * lc2 * pw2(dt2) * sin(t2) - 2 * m2 * l1 * lc2 * dt2 * dt1 * sin(t2) +
                (m1 * lc1 + m2 * l1) * g * cos(t1 - M_PI / 2) + phi2;
  double dd2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * pw2(dt1) * sin(t2) - phi2) /
               (m2 * pw2(lc2) + I2 - pw2(d2) / d1);
  dy[0] = dt1;
  dy[1] = dt2;
  dy[2] = -(d2 * dd2 + phi1) / d1;
  dy[3] = dd2;
}

static void test_acrobot_first_step(void **unused) {
  env *e = make("Acrobot-v1");
  float obs[6];
  env_reset(e, obs);
  double s0[4] = {0.05, -0.03, 0.08, -0.02};
  shoal_error err = {0};
  env_set_state(e, s0, 4, &err);
  /* one RK4 step of dt = 0.2 with torque +1 (action 2), book dynamics */
  double k1[4], k2[4], k3[4], k4[4], y[4], want[4];
  acrobot_deriv(s0, 1.0, k1);
  for (int j = 0; j < 4; j++) y[j] = s0[j] + 0.1 * k1[j];
  acrobot_deriv(y, 1.0, k2);
  for (int j = 0; j < 4; j++) y[j] = s0[j] + 0.1 * k2[j];
  acrobot_deriv(y, 1.0, k3);
  for (int j = 0; j < 4; j++) y[j] = s0[j] + 0.2 * k3[j];
  acrobot_deriv(y, 1.0, k4);
  for (int j = 0; j < 4; j++) want[j] = s0[j] + 0.2 / 6.0 * (k1[j] + 2 * k2[j] + 2 * k3[j] + k4[j]);
  int32_t a = 2;
  env_result r;
  assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
  double got[4];
  env_get_state(e, got, 4, &err);
  for (int j = 0; j < 4; j++) assert_true(fabs(got[j] - want[j]) <= 1e-15);
  assert_true(obs[0] == (float)cos(want[0]) && obs[3] == (float)sin(want[1]));
  assert_true(r.reward == -1.0 && !r.terminated);
  /* the tip above the bar (-cos t1 - cos(t1 + t2) > 1) terminates with reward 0 */
  double up[4] = {M_PI - 0.01, 0.0, 0.0, 0.0};
  env_set_state(e, up, 4, &err);
  a = 1;
  env_step(e, &a, obs, &r, &err);
  assert_true(r.terminated && r.reward == 0.0);
  env_destroy(e);
}

static void test_pendulum_first_step(void **unused) {
  env *e = make("Pendulum-v1");
  float obs[3];
  env_reset(e, obs);
  double s0[2] = {3.0, -0.5};
  shoal_error err = {0};
  env_set_state(e, s0, 2, &err);
  float u = 1.5f;
  double ud = 1.5;
  /* cost = norm(th)^2 + 0.1 thdot^2 + 0.001 u^2; thdot' = thdot + (3g/(2l) sin th + 3/(ml^2) u) dt
   */
  double nth = fmod(3.0 + M_PI, 2 * M_PI) - M_PI;
  double cost = pw2(nth) + 0.1 * pw2(-0.5) + 0.001 * pw2(ud);
  double thd = -0.5 + (3 * 10.0 / (2 * 1.0) * sin(3.0) + 3.0 / (1.0 * pw2(1.0)) * ud) * 0.05;
  double th = 3.0 + thd * 0.05;
  env_result r;
  assert_int_equal(env_step(e, &u, obs, &r, &err), 0);
  double got[2];
  env_get_state(e, got, 2, &err);
  assert_true(got[0] == th && got[1] == thd && r.reward == -cost);
  assert_true(obs[0] == (float)cos(th) && obs[1] == (float)sin(th) && obs[2] == (float)thd);
  /* torque clipped to 2 (reward uses the clipped torque) */
  double s1[2] = {0.3, 0.1};
  env_set_state(e, s1, 2, &err);
  float big = 7.0f, two = 2.0f;
  env_result r2;
  env_step(e, &big, obs, &r, &err);
  env_get_state(e, got, 2, &err);
  env_set_state(e, s1, 2, &err);
  float obs2[3];
  env_step(e, &two, obs2, &r2, &err);
  double got2[2];
  env_get_state(e, got2, 2, &err);
  assert_true(got[0] == got2[0] && got[1] == got2[1] && r.reward == r2.reward);
  /* angular velocity clipped to 8 */
  double fast[2] = {0.0, 7.99};
  env_set_state(e, fast, 2, &err);
  env_step(e, &two, obs, &r, &err);
  assert_true(obs[2] == 8.0f);
  env_destroy(e);
}

/* env__sq must be libm's pow(x, 2.0) exactly (what NumPy's x**2 computes), also where
 * that differs from the correctly rounded x*x. */
static void test_numpy_square(void **unused) {
  shoal_rng rng;
  shoal_rng_seed(&rng, 11);
  long differ = 0;
  for (int i = 0; i < 2000000; i++) {
    double x = ldexp(shoal_rng_uniform(&rng) + 0.5, (int)shoal_rng_below(&rng, 40) - 20);
    if (i & 1) x = -x;
    double p = pow(x, 2.0);
    assert_true(env__sq(x) == p);
    differ += x * x != p;
  }
  assert_true(differ > 100); /* ~0.08% of inputs: the case the helper exists for */
  assert_true(env__sq(7.2249061795510094) == pow(7.2249061795510094, 2.0));
  assert_true(env__sq(0.0) == 0.0 && env__sq(-3.0) == 9.0 && isinf(env__sq(1e300)));
  /* NumPy's float %: the result takes the divisor's sign */
  assert_true(env__np_mod(-1.0, 2 * M_PI) == -1.0 + 2 * M_PI);
  assert_true(env__np_mod(7.0, 2 * M_PI) == fmod(7.0, 2 * M_PI));
  assert_true(env__np_mod(-0.0, 2.0) == 0.0 && !signbit(env__np_mod(-0.0, 2.0)));
}

/* ---- time limits, seeding, action checks ------------------------------------------------ */

static void test_time_limits(void **unused) {
  struct {
    const char *id;
    int limit;
    int32_t a;
    float u;
  } cases[] = {{"MountainCar-v0", 200, 1, 0},
               {"MountainCarContinuous-v0", 999, 0, 0.0f},
               {"Acrobot-v1", 500, 1, 0},
               {"Pendulum-v1", 200, 0, 0.0f}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    env *e = make(cases[c].id);
    const env_spec *sp = env_get_spec(e);
    assert_int_equal(sp->max_episode_steps, cases[c].limit);
    float obs[8];
    env_seed(e, 3);
    env_reset(e, obs);
    const void *act = sp->act.n ? (const void *)&cases[c].a : (const void *)&cases[c].u;
    env_result r;
    shoal_error err = {0};
    for (int t = 1; t <= cases[c].limit; t++) {
      assert_int_equal(env_step(e, act, obs, &r, &err), 0);
      assert_false(r.terminated);
      assert_int_equal(r.truncated, t == cases[c].limit);
      assert_int_equal(r.elapsed, t);
    }
    assert_int_equal(env_step(e, act, obs, &r, &err), SHOAL_ESTATE);
    env_destroy(e);
  }
  /* CartPole: a balancing controller reaches the 500-step limit */
  env *e = make("CartPole-v1");
  float obs[4];
  int reached = 0;
  for (int ep = 0; ep < 20 && !reached; ep++) {
    env_seed(e, (uint64_t)ep);
    env_reset(e, obs);
    env_result r;
    shoal_error err = {0};
    for (int t = 1;; t++) {
      int32_t a = obs[2] + 0.5f * obs[3] + 0.01f * obs[0] + 0.1f * obs[1] > 0;
      assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
      assert_int_equal(r.truncated, t == 500);
      if (r.terminated || r.truncated) {
        reached = r.truncated && !r.terminated && t == 500;
        break;
      }
    }
  }
  assert_true(reached);
  env_destroy(e);
}

static void test_seeding(void **unused) {
  for (size_t k = 0; k < 5; k++) {
    env *a = make(classic_ids[k]), *b = make(classic_ids[k]);
    const env_spec *sp = env_get_spec(a);
    float oa[8], ob[8];
    env_seed(a, 77);
    env_seed(b, 77);
    env_reset(a, oa);
    env_reset(b, ob);
    assert_memory_equal(oa, ob, sizeof(float) * (size_t)sp->obs.size);
    env_seed(b, 78);
    env_reset(b, ob);
    assert_memory_not_equal(oa, ob, sizeof(float) * (size_t)sp->obs.size);
    env_seed(b, 77);
    env_reset(b, ob);
    for (int t = 0; t < 50; t++) {
      int32_t ai = t % (sp->act.n ? sp->act.n : 1);
      float af = (float)sin(t);
      const void *act = sp->act.n ? (const void *)&ai : (const void *)&af;
      env_result ra, rb;
      shoal_error err = {0};
      assert_int_equal(env_step(a, act, oa, &ra, &err), 0);
      assert_int_equal(env_step(b, act, ob, &rb, &err), 0);
      assert_memory_equal(oa, ob, sizeof(float) * (size_t)sp->obs.size);
      assert_true(ra.reward == rb.reward && ra.terminated == rb.terminated);
      if (ra.terminated || ra.truncated) break;
    }
    env_destroy(a);
    env_destroy(b);
  }
}

static void test_action_checks(void **unused) {
  env *e = make("CartPole-v1");
  float obs[4], before[4];
  env_reset(e, obs);
  memcpy(before, obs, sizeof obs);
  shoal_error err = {0};
  env_result r;
  int32_t bad[] = {-1, 2, 1000};
  for (int k = 0; k < 3; k++) {
    assert_int_equal(env_step(e, &bad[k], obs, &r, &err), SHOAL_ERANGE);
    assert_non_null(strstr(err.msg, "out of range [0, 2)"));
    assert_non_null(strstr(err.msg, "CartPole-v1"));
  }
  assert_memory_equal(obs, before, sizeof obs); /* nothing changed */
  int32_t ok = 0;
  assert_int_equal(env_step(e, &ok, obs, &r, &err), 0);
  assert_int_equal(r.elapsed, 1);
  env_destroy(e);

  const char *box[] = {"Pendulum-v1", "MountainCarContinuous-v0"};
  for (int k = 0; k < 2; k++) {
    e = make(box[k]);
    env_reset(e, obs);
    float nan = NAN, inf = INFINITY;
    assert_int_equal(env_step(e, &nan, obs, &r, &err), SHOAL_ENAN);
    assert_non_null(strstr(err.msg, "NaN"));
    assert_int_equal(env_step(e, &inf, obs, &r, &err), SHOAL_ENAN);
    assert_non_null(strstr(err.msg, "infinite"));
    env_destroy(e);
  }
  /* before any reset */
  e = make("Acrobot-v1");
  assert_int_equal(env_step(e, &ok, obs, &r, &err), SHOAL_ESTATE);
  assert_int_equal(env_get_state(e, (double[4]){0}, 4, &err), 4);
  assert_int_equal(env_set_state(e, (double[4]){0}, 4, &err), SHOAL_ESTATE);
  float o6[6];
  env_reset(e, o6);
  assert_int_equal(env_set_state(e, (double[3]){0}, 3, &err), SHOAL_ESHAPE);
  assert_int_equal(env_set_state(e, (double[4]){0, NAN, 0, 0}, 4, &err), SHOAL_ENAN);
  env_destroy(e);
}

/* Random actions for 20,000 steps per env: observations finite and inside the spec. */
static void test_long_rollouts(void **unused) {
  shoal_rng rng;
  shoal_rng_seed(&rng, 5);
  for (size_t k = 0; k < 5; k++) {
    env *e = make(classic_ids[k]);
    const env_spec *sp = env_get_spec(e);
    float obs[8];
    env_reset(e, obs);
    long episodes = 0;
    for (int t = 0; t < 20000; t++) {
      int32_t ai = (int32_t)shoal_rng_below(&rng, sp->act.n ? (uint64_t)sp->act.n : 1);
      float af = (float)(shoal_rng_uniform(&rng) * 6 - 3);
      env_result r;
      shoal_error err = {0};
      assert_int_equal(env_step(e, sp->act.n ? (void *)&ai : (void *)&af, obs, &r, &err), 0);
      assert_true(isfinite(r.reward));
      for (int j = 0; j < sp->obs.size; j++) {
        assert_true(isfinite(obs[j]));
        assert_true(obs[j] >= sp->obs.low[j] && obs[j] <= sp->obs.high[j]);
      }
      if (r.terminated || r.truncated) {
        env_reset(e, obs);
        episodes++;
      }
    }
    assert_true(episodes > 0);
    env_destroy(e);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_trajectories),
      cmocka_unit_test(test_cartpole_first_step),
      cmocka_unit_test(test_cartpole_novel),
      cmocka_unit_test(test_mountaincar_first_step),
      cmocka_unit_test(test_mountaincar_continuous),
      cmocka_unit_test(test_acrobot_first_step),
      cmocka_unit_test(test_pendulum_first_step),
      cmocka_unit_test(test_numpy_square),
      cmocka_unit_test(test_time_limits),
      cmocka_unit_test(test_seeding),
      cmocka_unit_test(test_action_checks),
      cmocka_unit_test(test_long_rollouts),
  };
  return cmocka_run_group_tests_name("envs_classic", tests, NULL, NULL);
}
