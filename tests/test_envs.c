/* SPDX-License-Identifier: Apache-2.0 */
/* The env API: registry and names, a user-registered kind, specs, and the vector env
 * (auto-reset in the same step, final observations, statistics, seeding per copy,
 * threads, errors that change nothing). */
#define _DEFAULT_SOURCE
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "envs/envs.h"
#include "envs/internal.h" /* env__pace: the threads rule with made-up times */

/* ---- a user's env in a few lines: walk from 0 to `goal` on a line ------------------- */

typedef struct walk_state {
  int pos, goal;
} walk_state;

static const float walk_low[2] = {-100, 0}, walk_high[2] = {100, 10};

static void walk_reset(void *st, shoal_rng *rng, void *obs) {
  walk_state *s = st;
  s->pos = 0;
  s->goal = 3 + (int)shoal_rng_below(rng, 3); /* 3..5 */
  float *o = obs;
  o[0] = (float)s->pos;
  o[1] = (float)s->goal;
}

static void walk_step(void *st, shoal_rng *rng, const void *action, void *obs, double *reward,
                      int *terminated) {
  walk_state *s = st;
  int a = *(const int32_t *)action;
  s->pos += a == 1 ? 1 : -1;
  *terminated = s->pos >= s->goal;
  *reward = *terminated ? 1.0 : -0.1;
  float *o = obs;
  o[0] = (float)s->pos;
  o[1] = (float)s->goal;
}

static const env_type walk_type = {
    .spec = {.id = "test/Walk-v0",
             .obs = {ENV_FLOAT32, 1, {2}, 2, 0, walk_low, walk_high},
             .act = {ENV_INT32, 0, {0}, 1, 2, NULL, NULL},
             .max_episode_steps = 8,
             .reward_threshold = NAN},
    .state_size = sizeof(walk_state),
    .reset = walk_reset,
    .step = walk_step,
};

static void test_registry(void **unused) {
  const char *names[64];
  int n = env_list(names, 64);
  assert_true(n >= 15);
  const char *want[] = {"CartPole-v1",
                        "MountainCar-v0",
                        "MountainCarContinuous-v0",
                        "Acrobot-v1",
                        "Pendulum-v1",
                        "MinAtar/Breakout-v1",
                        "MinAtar/Freeway-v1",
                        "MinAtar/Asterix-v1",
                        "MinAtar/Seaquest-v1",
                        "MinAtar/SpaceInvaders-v1",
                        "MinAtar/Breakout-v0"};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    int found = 0;
    for (int i = 0; i < n && i < 64; i++) found |= strcmp(names[i], want[k]) == 0;
    assert_true(found);
  }
  /* aliases */
  assert_ptr_equal(env_find("breakout"), env_find("MinAtar/Breakout-v1"));
  assert_ptr_equal(env_find("space_invaders"), env_find("MinAtar/SpaceInvaders-v1"));
  assert_null(env_find("CartPole-v9"));
  env *e = NULL;
  shoal_error err = {0};
  assert_int_equal(env_make(&e, "CartPole-v9", &err), SHOAL_ENOENT);
  assert_null(e);
  assert_non_null(strstr(err.msg, "CartPole-v9"));
  assert_non_null(strstr(err.msg, "CartPole-v1")); /* lists the known ids */

  /* specs as Gymnasium's */
  const env_spec *cp = &env_find("CartPole-v1")->spec;
  assert_int_equal(cp->obs.dtype, ENV_FLOAT32);
  assert_int_equal(cp->obs.size, 4);
  assert_int_equal(cp->act.n, 2);
  assert_int_equal(cp->max_episode_steps, 500);
  assert_true(cp->obs.high[0] == 4.8f && isinf(cp->obs.high[1]) && cp->obs.high[1] > 0 &&
              isinf(cp->obs.low[3]) && cp->obs.low[3] < 0);
  const env_spec *pd = &env_find("Pendulum-v1")->spec;
  assert_int_equal(pd->act.n, 0);
  assert_int_equal(pd->act.size, 1);
  assert_true(pd->act.low[0] == -2.0f && pd->act.high[0] == 2.0f);
  const env_spec *sq = &env_find("MinAtar/Seaquest-v1")->spec;
  assert_int_equal(sq->obs.dtype, ENV_UINT8);
  assert_int_equal(sq->obs.ndim, 3);
  assert_int_equal(sq->obs.shape[0], 10);
  assert_int_equal(sq->obs.shape[1], 10);
  assert_int_equal(sq->obs.size, 1000);
  assert_int_equal(env_find("MinAtar/Breakout-v1")->spec.act.n, 3);
  assert_int_equal(env_find("MinAtar/Breakout-v0")->spec.act.n, 6);
  assert_int_equal(env_find("MinAtar/SpaceInvaders-v1")->spec.act.n, 4);
  assert_int_equal(env_find("MinAtar/Asterix-v1")->spec.act.n, 5);
  assert_int_equal(env_find("MinAtar/Freeway-v1")->spec.act.n, 3);
  assert_int_equal(env_space_bytes(&sq->obs), 1000);
  assert_int_equal(env_space_bytes(&cp->obs), 16);
}

static void test_register_user_env(void **unused) {
  shoal_error err = {0};
  assert_int_equal(env_register(&walk_type, &err), 0);
  assert_int_equal(env_register(&walk_type, &err), SHOAL_EEXIST);
  assert_non_null(strstr(err.msg, "test/Walk-v0"));
  env_type bad = walk_type;
  bad.spec.id = "test/Bad-v0";
  bad.step = NULL;
  assert_int_equal(env_register(&bad, &err), SHOAL_EINVAL);
  bad = walk_type;
  bad.spec.id = "test/Bad-v1";
  bad.spec.obs.size = 3; /* does not match the shape */
  assert_int_equal(env_register(&bad, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "size"));

  env *e;
  assert_int_equal(env_make(&e, "test/Walk-v0", &err), 0);
  float obs[2];
  env_seed(e, 9);
  env_reset(e, obs);
  int goal = (int)obs[1];
  env_result r;
  int32_t right = 1;
  for (int t = 1; t <= goal; t++) {
    assert_int_equal(env_step(e, &right, obs, &r, &err), 0);
    assert_int_equal(r.terminated, t == goal);
  }
  assert_true(r.reward == 1.0);
  /* no state accessors and no renderer: clear errors */
  double st[2];
  assert_int_equal(env_get_state(e, st, 2, &err), SHOAL_ENOTSUP);
  uint8_t px[3];
  assert_int_equal(env_render(e, px, &err), SHOAL_ENOTSUP);
  env_destroy(e);
}

/* ---- vector env ------------------------------------------------------------------------- */

typedef struct bufs {
  float *obs, *fin, *rew;
  uint8_t *term, *trunc;
  env_vec_out out;
} bufs;

static bufs make_bufs(int B, int obs_n) {
  bufs b;
  b.obs = calloc((size_t)B * (size_t)obs_n, sizeof(float));
  b.fin = calloc((size_t)B * (size_t)obs_n, sizeof(float));
  b.rew = calloc((size_t)B, sizeof(float));
  b.term = calloc((size_t)B, 1);
  b.trunc = calloc((size_t)B, 1);
  b.out = (env_vec_out){b.obs, b.rew, b.term, b.trunc, b.fin};
  return b;
}
static void free_bufs(bufs *b) {
  free(b->obs);
  free(b->fin);
  free(b->rew);
  free(b->term);
  free(b->trunc);
}

/* Copy i of a vector env follows exactly the single env seeded with seed + i, with the
 * auto-reset in the same step: on a done step obs holds the new episode's first
 * observation and final_obs the finished one's last. Done for a built-in (its own
 * vec_step) and for the user kind (the generic loop), with 1 and 3 threads. */
static void check_vec_matches_single(const char *id, int threads) {
  const int B = 7, T = 700;
  shoal_error err = {0};
  env_vec *v;
  env_vec_config cfg = {.threads = threads};
  assert_int_equal(env_vec_create(&v, id, B, &cfg, &err), 0);
  const env_spec *sp = env_vec_spec(v);
  int on = sp->obs.size;
  bufs b = make_bufs(B, on);
  env *single[7];
  float sobs[7][8];
  for (int i = 0; i < B; i++) {
    assert_int_equal(env_make(&single[i], id, &err), 0);
    env_seed(single[i], 100 + (uint64_t)i);
    env_reset(single[i], sobs[i]);
  }
  env_vec_reset(v, 100, b.obs, NULL);
  for (int i = 0; i < B; i++) assert_memory_equal(b.obs + i * on, sobs[i], sizeof(float) * on);
  shoal_rng rng;
  shoal_rng_seed(&rng, 3);
  int32_t acts[7];
  int episodes = 0;
  double returns[7] = {0};
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < B; i++) acts[i] = (int32_t)shoal_rng_below(&rng, (uint64_t)sp->act.n);
    assert_int_equal(env_vec_step(v, acts, &b.out, &err), 0);
    for (int i = 0; i < B; i++) {
      env_result r;
      assert_int_equal(env_step(single[i], &acts[i], sobs[i], &r, &err), 0);
      assert_true(b.rew[i] == (float)r.reward);
      assert_int_equal(b.term[i], r.terminated);
      assert_int_equal(b.trunc[i], r.truncated);
      returns[i] += r.reward;
      if (r.terminated || r.truncated) {
        assert_memory_equal(b.fin + i * on, sobs[i], sizeof(float) * on); /* final obs */
        env_reset(single[i], sobs[i]);
        episodes++;
        env_episode ep;
        assert_int_equal(env_vec_episodes(v, &ep, 1), 1);
        assert_int_equal(ep.index, i);
        assert_int_equal(ep.length, r.elapsed);
        assert_true(fabs(ep.ret - returns[i]) < 1e-9);
        assert_int_equal(ep.truncated, r.truncated && !r.terminated);
        returns[i] = 0;
      }
      assert_memory_equal(b.obs + i * on, sobs[i], sizeof(float) * on); /* new first obs */
    }
  }
  assert_true(episodes > 5);
  env_vec_stats st;
  env_vec_get_stats(v, &st);
  assert_int_equal(st.steps, (uint64_t)B * T);
  assert_int_equal(st.episodes, (uint64_t)episodes);
  assert_int_equal(st.dropped, 0);
  assert_true(isfinite(st.mean_return_100) && st.mean_length_100 >= 1);
  for (int i = 0; i < B; i++) env_destroy(single[i]);
  free_bufs(&b);
  env_vec_destroy(v);
}

static void test_vec_autoreset(void **unused) {
  shoal_error err = {0};
  env_register(&walk_type, &err); /* may already be there */
  check_vec_matches_single("CartPole-v1", 1);
  check_vec_matches_single("Acrobot-v1", 1);
  check_vec_matches_single("test/Walk-v0", 1);
  check_vec_matches_single("CartPole-v1", 3);
  check_vec_matches_single("test/Walk-v0", 3);
}

static void test_vec_uint8_and_threads(void **unused) {
  /* MinAtar copies with threads give the same bytes as without */
  const int B = 16;
  shoal_error err = {0};
  env_vec *v1, *v4;
  env_vec_config c4 = {.threads = 4};
  assert_int_equal(env_vec_create(&v1, "MinAtar/Seaquest-v1", B, NULL, &err), 0);
  /* the workers on every step (the measured choice would mostly skip them here) */
  setenv("SHOAL_VEC_PARALLEL", "1", 1);
  assert_int_equal(env_vec_create(&v4, "MinAtar/Seaquest-v1", B, &c4, &err), 0);
  unsetenv("SHOAL_VEC_PARALLEL");
  size_t ob = 1000 * (size_t)B;
  uint8_t *o1 = malloc(ob), *o4 = malloc(ob), *f1 = malloc(ob), *f4 = malloc(ob);
  float r1[16], r4[16];
  uint8_t t1[16], t4[16], u1[16], u4[16];
  env_vec_out out1 = {o1, r1, t1, u1, f1}, out4 = {o4, r4, t4, u4, f4};
  env_vec_reset(v1, 5, o1, NULL);
  env_vec_reset(v4, 5, o4, NULL);
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  int32_t a[16];
  for (int t = 0; t < 2000; t++) {
    for (int i = 0; i < B; i++) a[i] = (int32_t)shoal_rng_below(&rng, 6);
    assert_int_equal(env_vec_step(v1, a, &out1, &err), 0);
    assert_int_equal(env_vec_step(v4, a, &out4, &err), 0);
    assert_memory_equal(o1, o4, ob);
    assert_memory_equal(r1, r4, sizeof r1);
    assert_memory_equal(t1, t4, sizeof t1);
    for (size_t k = 0; k < ob; k++) assert_true(o1[k] <= 1);
  }
  assert_true(env_vec_parallel_share(v4) == 1.0);
  assert_true(env_vec_parallel_share(v1) == 0.0);
  free(o1);
  free(o4);
  free(f1);
  free(f4);
  env_vec_destroy(v1);
  env_vec_destroy(v4);
}

/* Threads that pay: 4 CartPole copies take about a hundred nanoseconds, far less than
 * waking a worker, so a vector env with 2 threads measures that and steps on the
 * caller's thread, trying the workers now and then (the warm-up and the probes), with
 * the same results as one thread. */
static void test_vec_threads_only_where_they_pay(void **unused) {
  enum { B = 4, T = 4000 };
  shoal_error err = {0};
  env_vec *v1, *v2;
  env_vec_config c2 = {.threads = 2};
  assert_int_equal(env_vec_create(&v1, "CartPole-v1", B, NULL, &err), 0);
  assert_int_equal(env_vec_create(&v2, "CartPole-v1", B, &c2, &err), 0);
  float o1[B * 4], o2[B * 4], f1[B * 4], f2[B * 4], r1[B], r2[B];
  uint8_t t1[B], t2[B], u1[B], u2[B];
  env_vec_out out1 = {o1, r1, t1, u1, f1}, out2 = {o2, r2, t2, u2, f2};
  env_vec_reset(v1, 3, o1, NULL);
  env_vec_reset(v2, 3, o2, NULL);
  int32_t a[B];
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < B; i++) a[i] = (t * 5 + i) % 3 == 0;
    assert_int_equal(env_vec_step(v1, a, &out1, &err), 0);
    assert_int_equal(env_vec_step(v2, a, &out2, &err), 0);
    assert_memory_equal(o1, o2, sizeof o1);
    assert_memory_equal(r1, r2, sizeof r1);
  }
  double share = env_vec_parallel_share(v2);
  fprintf(stderr, "4 CartPole copies, 2 threads: %.1f%% of steps on the workers\n", 100 * share);
  assert_true(share > 0.0); /* tried */
#ifndef __SANITIZE_THREAD__
  assert_true(share < 0.05); /* and left */
#else
  /* Under ThreadSanitizer every env step costs ~10x more while the workers' hand-off
   * stays a poll, so the two modes come near break-even and either may win: this build
   * checks what it is for, that both modes step the same copies without a race. */
#endif
  env_vec_destroy(v1);
  env_vec_destroy(v2);
}

/* The threads rule (env__pace) driven by a simulated clock: cost(mode, step) is what a
 * step in that mode takes; returns the steps the workers took in [from, to). */
typedef double (*pace_cost_fn)(int mode, long step);
static long pace_run_sim(env__pace *p, pace_cost_fn cost, long from, long to) {
  long par = 0;
  for (long n = from; n < to; n++) {
    int timed = 0, mode = env__pace_choose(p, &timed);
    assert_true(mode == 0 || mode == 1);
    if (timed) env__pace_record(p, cost(mode, n));
    par += mode;
  }
  return par;
}

/* The workers halve a 40 us step, but one step in 500 of theirs is a preempted 1 ms:
 * the least of the recent runs ignores those. */
static double cost_par_noisy(int mode, long n) { return mode ? (n % 500 == 0 ? 1e6 : 2e4) : 4e4; }
/* Small envs: 1 us alone, 20 us with the hand-off. */
static double cost_serial_wins(int mode, long n) { return mode ? 2e4 : 1e3; }
/* The workers win until step 3000, when another process takes the second core. */
static double cost_core_taken(int mode, long n) { return mode ? (n < 3000 ? 5e3 : 1e5) : 1e4; }
/* The workers lose until step 3000, when the env's steps grow (B or the env's phase). */
static double cost_work_grows(int mode, long n) {
  return n < 3000 ? (mode ? 2e4 : 1e4) : (mode ? 5e4 : 1e5);
}
/* The workers halve a 20 us step, but the caller pauses every g_pause_every steps and
 * they fall asleep: the step after a pause costs 60 us with them. */
static long g_pause_every;
static double cost_caller_pauses(int mode, long n) {
  return mode ? (n % g_pause_every == 0 ? 6e4 : 1e4) : 2e4;
}
/* As above, but waking them costs 500 us: one thread wins. */
static double cost_wake_dear(int mode, long n) {
  return mode ? (n % g_pause_every == 0 ? 5e5 : 1e4) : 2e4;
}

static void test_vec_pace_rule(void **unused) {
  env__pace p;
  /* stray slow steps do not flip the choice */
  memset(&p, 0, sizeof p);
  long par = pace_run_sim(&p, cost_par_noisy, 0, 20000);
  assert_true(par > 20000 * 95 / 100);
  assert_true(env__pace_cost(&p, 1) == 2e4 && env__pace_cost(&p, 0) == 4e4);

  /* where the workers lose, the probes thin out: at most one run in the last
   * ENV__PACE_GAP_MAX steps */
  memset(&p, 0, sizeof p);
  par = pace_run_sim(&p, cost_serial_wins, 0, 300000);
  assert_true(par < 20 * ENV__PACE_RUN);
  assert_true(pace_run_sim(&p, cost_serial_wins, 300000, 300000 + ENV__PACE_GAP_MAX) <=
              ENV__PACE_RUN + 1);
  assert_true(p.gap == ENV__PACE_GAP_MAX);
  /* and each probe ends early: 20x slower, it stops past 2 x 32 x 1 us */
  memset(&p, 0, sizeof p);
  pace_run_sim(&p, cost_serial_wins, 0, 4 * (ENV__PACE_RUN + 1)); /* the warm-up */
  /* probes at about 1.2k, 3.2k, 7.3k and 15.5k steps: each an untimed step and 4 timed */
  assert_true(pace_run_sim(&p, cost_serial_wins, 4 * (ENV__PACE_RUN + 1), 20000) <= 4 * 5);

  /* a core taken: back to one thread once the window's samples are new (8 samples,
   * ENV__PACE_SAMPLE_EVERY steps apart), then probes that stay rare */
  enum { WINDOW_STEPS = ENV__PACE_SAMPLE_EVERY * (ENV__PACE_WIN + 1) + 2 * ENV__PACE_RUN };
  memset(&p, 0, sizeof p);
  assert_true(pace_run_sim(&p, cost_core_taken, 0, 3000) > 2800);
  pace_run_sim(&p, cost_core_taken, 3000, 3000 + WINDOW_STEPS);
  long late = pace_run_sim(&p, cost_core_taken, 3000 + WINDOW_STEPS, 60000);
  assert_true(late < 8 * (ENV__PACE_RUN + 1));

  /* a caller that pauses every 16 steps (and every 15, 32): the workers stay, though the
   * step after each pause pays their wake-up; where that wake-up costs more than they
   * save, one thread */
  for (int k = 0; k < 3; k++) {
    g_pause_every = (long[]){16, 15, 32}[k];
    memset(&p, 0, sizeof p);
    assert_true(pace_run_sim(&p, cost_caller_pauses, 0, 20000) > 20000 * 90 / 100);
    memset(&p, 0, sizeof p);
    assert_true(pace_run_sim(&p, cost_wake_dear, 0, 20000) < 20000 * 5 / 100);
  }

  /* work that grows: taken up at a probe, within the gap reached by then */
  memset(&p, 0, sizeof p);
  assert_true(pace_run_sim(&p, cost_work_grows, 0, 3000) < 5 * (ENV__PACE_RUN + 1));
  enum { GROWN = 3000 + 2 * 4096 };
  pace_run_sim(&p, cost_work_grows, 3000, GROWN);
  assert_true(pace_run_sim(&p, cost_work_grows, GROWN, 30000) > (30000 - GROWN) * 95 / 100);
}

static void test_vec_errors(void **unused) {
  shoal_error err = {0};
  env_vec *v = NULL;
  assert_int_equal(env_vec_create(&v, "Nope-v0", 4, NULL, &err), SHOAL_ENOENT);
  assert_int_equal(env_vec_create(&v, "CartPole-v1", 0, NULL, &err), SHOAL_EINVAL);
  env_vec_config many = {.threads = 9};
  assert_int_equal(env_vec_create(&v, "CartPole-v1", 4, &many, &err), SHOAL_EINVAL);
  assert_null(v);
  env_vec_config lim = {.max_episode_steps = 3};
  assert_int_equal(env_vec_create(&v, "CartPole-v1", 4, &lim, &err), 0);
  bufs b = make_bufs(4, 4);
  int32_t acts[4] = {0, 1, 0, 1};
  assert_int_equal(env_vec_step(v, acts, &b.out, &err), SHOAL_ESTATE);
  env_vec_reset(v, 1, b.obs, NULL);
  float before[16];
  memcpy(before, b.obs, sizeof before);
  int32_t bad[4] = {0, 1, 2, 0};
  assert_int_equal(env_vec_step(v, bad, &b.out, &err), SHOAL_ERANGE);
  assert_non_null(strstr(err.msg, "copy 2"));
  assert_memory_equal(b.obs, before, sizeof before); /* nothing stepped */
  env_vec_stats st;
  env_vec_get_stats(v, &st);
  assert_int_equal(st.steps, 0);
  assert_true(isnan(st.mean_return_100));
  env_vec_out nobuf = b.out;
  nobuf.reward = NULL;
  assert_int_equal(env_vec_step(v, acts, &nobuf, &err), SHOAL_EINVAL);
  nobuf = b.out;
  nobuf.final_obs = nobuf.obs;
  assert_int_equal(env_vec_step(v, acts, &nobuf, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "final_obs"));
  /* the overridden time limit: truncated at step 3 */
  for (int t = 1; t <= 3; t++) {
    assert_int_equal(env_vec_step(v, acts, &b.out, &err), 0);
    for (int i = 0; i < 4; i++) {
      assert_int_equal(b.term[i], 0); /* a pole does not fall within 3 steps of a reset */
      assert_int_equal(b.trunc[i], t == 3);
    }
  }
  uint8_t rgb[600 * 400 * 3];
  assert_int_equal(env_vec_render(v, 4, rgb, &err), SHOAL_ERANGE);
  assert_int_equal(env_vec_render(v, 3, rgb, &err), 0);
  free_bufs(&b);
  env_vec_destroy(v);

  /* a NaN continuous action names the copy */
  assert_int_equal(env_vec_create(&v, "Pendulum-v1", 3, NULL, &err), 0);
  b = make_bufs(3, 3);
  env_vec_reset(v, 1, b.obs, NULL);
  float u[3] = {0.5f, NAN, 1.0f};
  assert_int_equal(env_vec_step(v, u, &b.out, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "copy 1"));
  u[1] = 9.0f; /* out of bounds: clipped, as Gymnasium */
  assert_int_equal(env_vec_step(v, u, &b.out, &err), 0);
  free_bufs(&b);
  env_vec_destroy(v);
}

static void test_episode_log_overflow(void **unused) {
  shoal_error err = {0};
  env_vec *v;
  env_vec_config c = {.max_episode_steps = 1, .episode_log = 5};
  assert_int_equal(env_vec_create(&v, "Pendulum-v1", 4, &c, &err), 0);
  bufs b = make_bufs(4, 3);
  env_vec_reset(v, 1, b.obs, NULL);
  float u[4] = {0};
  for (int t = 0; t < 3; t++) assert_int_equal(env_vec_step(v, u, &b.out, &err), 0);
  env_vec_stats st;
  env_vec_get_stats(v, &st);
  assert_int_equal(st.episodes, 12);
  assert_int_equal(st.dropped, 7);
  env_episode eps[16];
  assert_int_equal(env_vec_episodes(v, eps, 16), 5);
  assert_int_equal(eps[4].index, 3); /* the newest kept */
  assert_int_equal(eps[0].length, 1);
  assert_int_equal(env_vec_episodes(v, eps, 16), 0);
  free_bufs(&b);
  env_vec_destroy(v);
}

/* Options as Gymnasium's make kwargs and reset options. */
static void test_options(void **unused) {
  shoal_error err = {0};
  env *e;
  /* Pendulum's gravity */
  assert_int_equal(env_make_opts(&e, "Pendulum-v1", "g=9.81", &err), 0);
  float obs[8];
  env_reset(e, obs);
  double s0[2] = {0.5, 0.0};
  env_set_state(e, s0, 2, &err);
  float u = 0.0f;
  env_result r;
  assert_int_equal(env_step(e, &u, obs, &r, &err), 0);
  double got[4];
  env_get_state(e, got, 2, &err);
  assert_true(got[1] == 0.0 + (3 * 9.81 / (2 * 1.0) * sin(0.5) + 3.0 / (1.0 * 1.0) * 0.0) * 0.05);
  env_destroy(e);

  /* CartPole: Sutton & Barto's reward and wider reset bounds */
  assert_int_equal(
      env_make_opts(&e, "CartPole-v1", "sutton_barto_reward=1, low=-0.2,high=0.2", &err), 0);
  int wide = 0;
  for (uint64_t seed = 0; seed < 20; seed++) {
    env_seed(e, seed);
    env_reset(e, obs);
    for (int j = 0; j < 4; j++) {
      assert_true(obs[j] >= -0.2f && obs[j] <= 0.2f);
      wide |= fabsf(obs[j]) > 0.05f;
    }
  }
  assert_true(wide);
  env_reset(e, obs);
  int32_t right = 1;
  do {
    assert_int_equal(env_step(e, &right, obs, &r, &err), 0);
    assert_true(r.reward == (r.terminated ? -1.0 : 0.0));
  } while (!r.terminated && !r.truncated);
  env_destroy(e);

  /* Acrobot with the paper's dynamics moves differently from the book's */
  env *book, *nips;
  assert_int_equal(env_make(&book, "Acrobot-v1", &err), 0);
  assert_int_equal(env_make_opts(&nips, "Acrobot-v1", "nips=1", &err), 0);
  env_reset(book, obs);
  env_reset(nips, obs);
  double a0[4] = {0.3, 0.2, 1.0, -2.0};
  env_set_state(book, a0, 4, &err);
  env_set_state(nips, a0, 4, &err);
  int32_t a = 2;
  env_step(book, &a, obs, &r, &err);
  env_step(nips, &a, obs, &r, &err);
  double sb[4], sn[4];
  env_get_state(book, sb, 4, &err);
  env_get_state(nips, sn, 4, &err);
  assert_true(sb[3] != sn[3]);
  env_destroy(book);
  env_destroy(nips);

  /* the time limit */
  assert_int_equal(env_make_opts(&e, "Pendulum-v1", "max_episode_steps=7", &err), 0);
  env_reset(e, obs);
  for (int t = 1; t <= 7; t++) {
    assert_int_equal(env_step(e, &u, obs, &r, &err), 0);
    assert_int_equal(r.truncated, t == 7);
  }
  env_destroy(e);

  /* MinAtar without sticky actions: an action always runs (Breakout's paddle shows it) */
  assert_int_equal(
      env_make_opts(&e, "MinAtar/Breakout-v1", "sticky_action_prob=0,difficulty_ramping=0", &err),
      0);
  uint8_t mo[400];
  env_reset(e, mo);
  for (int t = 0; t < 2000; t++) {
    int before = -1, after = -1;
    for (int x = 0; x < 10; x++)
      if (mo[90 + x]) before = x;
    int32_t act = t % 2 ? 1 : 2; /* alternate left and right */
    assert_int_equal(env_step(e, &act, mo, &r, &err), 0);
    for (int x = 0; x < 10; x++)
      if (mo[90 + x]) after = x;
    if (act == 1) assert_int_equal(after, before > 0 ? before - 1 : 0);
    if (act == 2) assert_int_equal(after, before < 9 ? before + 1 : 9);
    if (r.terminated) env_reset(e, mo);
  }
  env_destroy(e);

  /* the vector env takes the same options */
  env_vec *v;
  env_vec_config cfg = {.options = "max_episode_steps=5,goal_velocity=0.01"};
  assert_int_equal(env_vec_create(&v, "MountainCar-v0", 3, &cfg, &err), 0);
  float vo[6], vr[3];
  uint8_t vt[3], vu[3];
  env_vec_out out = {vo, vr, vt, vu, NULL};
  env_vec_reset(v, 1, vo, NULL);
  int32_t va[3] = {0, 1, 2};
  for (int t = 1; t <= 5; t++) {
    assert_int_equal(env_vec_step(v, va, &out, &err), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(vu[i], t == 5);
  }
  env_vec_destroy(v);

  /* bad options say what is wrong */
  e = NULL;
  assert_int_equal(env_make_opts(&e, "Pendulum-v1", "gravity=3", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "unknown option 'gravity'"));
  assert_non_null(strstr(err.msg, "Pendulum-v1"));
  assert_int_equal(env_make_opts(&e, "Pendulum-v1", "g=abc", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "not a number"));
  assert_int_equal(env_make_opts(&e, "Pendulum-v1", "g", &err), SHOAL_EINVAL);
  assert_int_equal(env_make_opts(&e, "CartPole-v1", "low=0.3", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "must not exceed"));
  assert_int_equal(env_make_opts(&e, "CartPole-v1", "sutton_barto_reward=2", &err), SHOAL_EINVAL);
  assert_int_equal(env_make_opts(&e, "MinAtar/Seaquest-v1", "sticky_action_prob=1.5", &err),
                   SHOAL_EINVAL);
  assert_int_equal(env_make_opts(&e, "CartPole-v1", "max_episode_steps=-1", &err), SHOAL_EINVAL);
  assert_null(e);
  cfg.options = "nope=1";
  assert_int_equal(env_vec_create(&v, "Acrobot-v1", 2, &cfg, &err), SHOAL_EINVAL);
  /* a kind without options refuses them */
  env_register(&walk_type, &err);
  assert_int_equal(env_make_opts(&e, "test/Walk-v0", "x=1", &err), SHOAL_EINVAL);
  assert_int_equal(env_make_opts(&e, "test/Walk-v0", "max_episode_steps=3", &err), 0);
  env_destroy(e);
}

/* Reset options (Gymnasium's reset(options=...)) apply to one reset; seeds per copy. */
static void test_reset_options_and_seeds(void **unused) {
  shoal_error err = {0};
  env *e, *wide;
  float o1[4], o2[4];
  /* One env: the options' start equals an env made with them, from the same draws. */
  assert_int_equal(env_make(&e, "CartPole-v1", &err), 0);
  assert_int_equal(env_make_opts(&wide, "CartPole-v1", "low=-0.3,high=0.3", &err), 0);
  env_seed(e, 9);
  env_seed(wide, 9);
  assert_int_equal(env_reset_opts(e, "low=-0.3,high=0.3", o1, &err), 0);
  env_reset(wide, o2);
  assert_memory_equal(o1, o2, sizeof o1);
  double st[4];
  assert_int_equal(env_get_state(e, st, 4, &err), 4);
  for (int j = 0; j < 4; j++) assert_true((float)st[j] == o1[j]);
  /* ... and the next reset is the env's own again. */
  env_seed(e, 9);
  env_reset(e, o1);
  for (int j = 0; j < 4; j++) assert_true(fabsf(o1[j]) <= 0.05f);
  assert_int_equal(env_reset_opts(e, "high=-1", o1, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "must not exceed"));
  assert_int_equal(env_reset_opts(e, "sutton_barto_reward=1", o1, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "no reset option"));
  env_destroy(e);
  env_destroy(wide);
  assert_int_equal(env_make(&e, "MinAtar/Breakout-v1", &err), 0);
  uint8_t mo[400];
  assert_int_equal(env_reset_opts(e, "low=1", mo, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "takes no reset options"));
  assert_int_equal(env_reset_opts(e, "", mo, &err), 0);
  env_destroy(e);

  /* A vector env: seeds per copy, options for all copies, state per copy. */
  env_vec *v, *one;
  assert_int_equal(env_vec_create(&v, "Pendulum-v1", 3, NULL, &err), 0);
  assert_int_equal(env_vec_create(&one, "Pendulum-v1", 1, NULL, &err), 0);
  float obs[9], ref[3];
  uint64_t seeds[3] = {40, 7, 1000};
  assert_int_equal(env_vec_reset_each(v, seeds, NULL, "x_init=0.2,y_init=0.1", obs, &err), 0);
  for (int i = 0; i < 3; i++) {
    double s[2];
    assert_int_equal(env_vec_get_state(v, i, s, 2, &err), 2);
    assert_true(fabs(s[0]) <= 0.2 && fabs(s[1]) <= 0.1);
    assert_int_equal(env_vec_reset_each(one, &seeds[i], NULL, "x_init=0.2,y_init=0.1", ref, &err),
                     0);
    assert_memory_equal(obs + 3 * i, ref, sizeof ref);
  }
  /* reseed 0: copy 1 goes on from its RNG (seed 7's second draw). */
  uint8_t reseed[3] = {1, 0, 1};
  assert_int_equal(env_vec_reset_each(v, seeds, reseed, NULL, obs, &err), 0);
  env_vec_reset(one, 7, ref, NULL);
  float again[3];
  uint8_t no = 0;
  assert_int_equal(env_vec_reset_each(one, NULL, &no, NULL, again, &err), 0);
  assert_memory_equal(obs + 3, again, sizeof again);
  assert_int_equal(env_vec_reset_each(v, seeds, NULL, "g=3", obs, &err), SHOAL_EINVAL);
  assert_int_equal(env_vec_reset_each(v, NULL, NULL, NULL, obs, &err), SHOAL_EINVAL);
  /* state per copy */
  double set[3] = {1.0, -2.0, 0.0}, got[2];
  assert_int_equal(env_vec_set_state(v, 2, set, 2, &err), 0);
  assert_int_equal(env_vec_get_state(v, 2, got, 2, &err), 2);
  assert_true(got[0] == 1.0 && got[1] == -2.0);
  assert_int_equal(env_vec_set_state(v, 3, set, 2, &err), SHOAL_ERANGE);
  assert_int_equal(env_vec_set_state(v, 0, set, 3, &err), SHOAL_ESHAPE);
  set[0] = NAN;
  assert_int_equal(env_vec_set_state(v, 0, set, 2, &err), SHOAL_ENAN);
  env_vec_destroy(v);
  env_vec_destroy(one);
  assert_int_equal(env_vec_create(&v, "MinAtar/Breakout-v1", 1, NULL, &err), 0);
  assert_int_equal(env_vec_get_state(v, 0, got, 2, &err), SHOAL_ENOTSUP);
  env_vec_destroy(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry),
      cmocka_unit_test(test_register_user_env),
      cmocka_unit_test(test_vec_autoreset),
      cmocka_unit_test(test_vec_uint8_and_threads),
      cmocka_unit_test(test_vec_threads_only_where_they_pay),
      cmocka_unit_test(test_vec_pace_rule),
      cmocka_unit_test(test_vec_errors),
      cmocka_unit_test(test_episode_log_overflow),
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_reset_options_and_seeds),
  };
  return cmocka_run_group_tests_name("envs", tests, NULL, NULL);
}
