/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_replay_traj.c — the trajectory FIFO: contents and order, the
 * bootstrap row, the staleness bound (also when stale unrolls sit behind fresh
 * ones in a full queue), the three full policies, timeouts, close, and many
 * pushers with one popper (exact counts, whole unrolls, per-pusher order), and the
 * one-row-per-unroll column (a recurrent core's initial state) in both layouts. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "replay/replay.h"

enum { T = 5, D = 3 };

/* Columns: obs f32 (D) with T+1 rows (bootstrap), action i32, T rows. */
static replay_traj_config traj_config(int64_t cap, int64_t stale, replay_full_policy full,
                                      int64_t timeout_ms) {
  replay_traj_config c = {.T = T,
                          .ncols = 2,
                          .bootstrap_column = "obs",
                          .capacity = cap,
                          .max_staleness = stale,
                          .full = full,
                          .push_timeout_ms = timeout_ms};
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_F32, .ndim = 1, .shape = {D}};
  c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I32};
  return c;
}

/* An unroll whose every value derives from id. */
typedef struct unroll {
  float obs[T + 1][D];
  int32_t act[T];
  float logp[T];
} unroll;

static void make(unroll *u, int id) {
  for (int t = 0; t <= T; t++)
    for (int d = 0; d < D; d++) u->obs[t][d] = (float)(id * 100 + t * 10 + d);
  for (int t = 0; t < T; t++) {
    u->act[t] = id * 7 + t;
    u->logp[t] = -0.01f * (float)(id + t);
  }
}

static int push(replay_traj *q, int id, int64_t version) {
  unroll u;
  make(&u, id);
  const void *cols[2] = {u.obs, u.act};
  return replay_traj_push(q, cols, u.logp, version, NULL);
}

/* Checks row b of a popped batch is unroll id; returns id. */
static int check_row(const float *obs, const int32_t *act, const float *logp, int b) {
  int id = (int)(obs[(size_t)b * (T + 1) * D] / 100.0f + 0.5f);
  unroll u;
  make(&u, id);
  assert_memory_equal(obs + (size_t)b * (T + 1) * D, u.obs, sizeof u.obs);
  assert_memory_equal(act + (size_t)b * T, u.act, sizeof u.act);
  assert_memory_equal(logp + (size_t)b * T, u.logp, sizeof u.logp);
  return id;
}

typedef struct outbuf {
  float obs[64][T + 1][D];
  int32_t act[64][T];
  float logp[64][T];
  int64_t ver[64];
  replay_traj_batch b;
} outbuf;

static void outbuf_init(outbuf *o) {
  memset(o, 0, sizeof *o);
  o->b = (replay_traj_batch){.cols = {o->obs, o->act}, .logp = &o->logp[0][0], .version = o->ver};
}

static void test_order_contents_and_bootstrap_row(void **state) {
  replay_traj *q = NULL;
  replay_traj_config c = traj_config(8, -1, REPLAY_FULL_BLOCK, -1);
  assert_int_equal(replay_traj_create(&c, &q, NULL), 0);
  assert_int_equal(replay_traj_rows(q, 0), T + 1);
  assert_int_equal(replay_traj_rows(q, 1), T);
  assert_true(replay_traj_memory_bytes(&c) >= 8 * (sizeof(unroll) + 8));
  for (int i = 1; i <= 5; i++) assert_int_equal(push(q, i, i), 0);
  outbuf *o = malloc(sizeof *o);
  outbuf_init(o);
  assert_int_equal(replay_traj_pop(q, 3, 0, 0, &o->b, NULL), 0);
  for (int b = 0; b < 3; b++) {
    assert_int_equal(check_row(&o->obs[0][0][0], &o->act[0][0], &o->logp[0][0], b), b + 1);
    assert_int_equal(o->ver[b], b + 1);
  }
  shoal_error err = {0};
  /* Time-major: (rows, B, item). */
  for (int i = 6; i <= 7; i++) assert_int_equal(push(q, i, i), 0);
  float tobs[T + 1][2][D];
  int32_t tact[T][2];
  float tlogp[T][2];
  replay_traj_batch tb = {.cols = {tobs, tact}, .logp = &tlogp[0][0], .time_major = 1};
  assert_int_equal(replay_traj_pop(q, 2, 0, 0, &tb, NULL), 0);
  for (int b = 0; b < 2; b++) {
    unroll u;
    make(&u, 4 + b);
    for (int t = 0; t <= T; t++) assert_memory_equal(tobs[t][b], u.obs[t], sizeof u.obs[t]);
    for (int t = 0; t < T; t++) {
      assert_int_equal(tact[t][b], u.act[t]);
      assert_float_equal(tlogp[t][b], u.logp[t], 0);
    }
  }
  assert_int_equal(replay_traj_pop(q, 3, 0, 10, &o->b, &err), SHOAL_ETIMEDOUT);
  assert_int_equal(replay_traj_pop(q, 2, 0, 0, &o->b, NULL), 0);
  assert_int_equal(o->ver[0], 6);
  assert_int_equal(o->ver[1], 7);
  replay_traj_stats st;
  replay_traj_get_stats(q, &st);
  assert_int_equal(st.pushed, 7);
  assert_int_equal(st.popped, 7);
  assert_int_equal(st.held, 0);
  /* Bad input. */
  float bad[T] = {0, NAN};
  unroll u;
  make(&u, 1);
  const void *cols[2] = {u.obs, u.act};
  assert_int_equal(replay_traj_push(q, cols, bad, 1, &err), SHOAL_ENAN);
  const void *nul[2] = {u.obs, NULL};
  assert_int_equal(replay_traj_push(q, nul, NULL, 1, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "action"));
  assert_int_equal(replay_traj_pop(q, 9, 0, 0, &o->b, &err), SHOAL_EINVAL);
  free(o);
  replay_traj_destroy(q);
}

static void test_staleness_bound_drops_and_counts(void **state) {
  replay_traj *q = NULL;
  replay_traj_config c = traj_config(8, 2, REPLAY_FULL_BLOCK, -1);
  assert_int_equal(replay_traj_create(&c, &q, NULL), 0);
  for (int v = 1; v <= 6; v++) assert_int_equal(push(q, v, v), 0);
  outbuf *o = malloc(sizeof *o);
  outbuf_init(o);
  /* Learner at version 6, bound 2: versions 1..3 are too old. */
  assert_int_equal(replay_traj_pop(q, 2, 6, 0, &o->b, NULL), 0);
  assert_int_equal(o->ver[0], 4);
  assert_int_equal(o->ver[1], 5);
  replay_traj_stats st;
  replay_traj_get_stats(q, &st);
  assert_int_equal(st.dropped_stale, 3);
  /* A stale unroll behind a fresh one is dropped when the pop passes it. */
  assert_int_equal(push(q, 7, 1), 0);
  assert_int_equal(push(q, 8, 8), 0);
  assert_int_equal(replay_traj_pop(q, 2, 8, 0, &o->b, NULL), 0);
  assert_int_equal(o->ver[0], 6);
  assert_int_equal(o->ver[1], 8);
  assert_int_equal(check_row(&o->obs[0][0][0], &o->act[0][0], &o->logp[0][0], 1), 8);
  replay_traj_get_stats(q, &st);
  assert_int_equal(st.dropped_stale, 4);
  assert_int_equal(st.held, 0);
  free(o);
  replay_traj_destroy(q);
}

typedef struct late_push {
  replay_traj *q;
  int id, rc;
  int64_t version, delay_ms;
} late_push;

static void *late_push_main(void *arg) {
  late_push *p = arg;
  usleep((useconds_t)(p->delay_ms * 1000));
  p->rc = push(p->q, p->id, p->version);
  return NULL;
}

static void test_full_of_stale_behind_fresh_does_not_deadlock(void **state) {
  /* Capacity 4 holding versions 10, 1, 10, 10 and a pop of 4 at learner 10 (bound 2):
   * the stale unroll is compacted away, which lets a blocked pusher in. */
  replay_traj *q = NULL;
  replay_traj_config c = traj_config(4, 2, REPLAY_FULL_BLOCK, -1);
  assert_int_equal(replay_traj_create(&c, &q, NULL), 0);
  assert_int_equal(push(q, 1, 10), 0);
  assert_int_equal(push(q, 2, 1), 0);
  assert_int_equal(push(q, 3, 10), 0);
  assert_int_equal(push(q, 4, 10), 0);
  late_push lp = {.q = q, .id = 5, .version = 11, .delay_ms = 20};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, late_push_main, &lp), 0);
  outbuf *o = malloc(sizeof *o);
  outbuf_init(o);
  assert_int_equal(replay_traj_pop(q, 4, 10, 5000, &o->b, NULL), 0);
  pthread_join(th, NULL);
  assert_int_equal(lp.rc, 0);
  int want[4] = {1, 3, 4, 5};
  for (int b = 0; b < 4; b++)
    assert_int_equal(check_row(&o->obs[0][0][0], &o->act[0][0], &o->logp[0][0], b), want[b]);
  replay_traj_stats st;
  replay_traj_get_stats(q, &st);
  assert_int_equal(st.dropped_stale, 1);
  free(o);
  replay_traj_destroy(q);
}

static void test_full_policies(void **state) {
  outbuf *o = malloc(sizeof *o);
  outbuf_init(o);
  replay_traj_stats st;
  shoal_error err = {0};
  /* Drop new. */
  replay_traj *q = NULL;
  replay_traj_config c = traj_config(2, -1, REPLAY_FULL_DROP_NEW, -1);
  assert_int_equal(replay_traj_create(&c, &q, NULL), 0);
  assert_int_equal(push(q, 1, 1), 0);
  assert_int_equal(push(q, 2, 2), 0);
  assert_int_equal(push(q, 3, 3), SHOAL_EFULL);
  assert_int_equal(replay_traj_pop(q, 2, 0, 0, &o->b, NULL), 0);
  assert_int_equal(o->ver[0] * 10 + o->ver[1], 12);
  replay_traj_get_stats(q, &st);
  assert_int_equal(st.dropped_full, 1);
  replay_traj_destroy(q);
  /* Drop oldest. */
  c = traj_config(2, -1, REPLAY_FULL_DROP_OLDEST, -1);
  assert_int_equal(replay_traj_create(&c, &q, NULL), 0);
  for (int i = 1; i <= 3; i++) assert_int_equal(push(q, i, i), 0);
  assert_int_equal(replay_traj_pop(q, 2, 0, 0, &o->b, NULL), 0);
  assert_int_equal(o->ver[0] * 10 + o->ver[1], 23);
  assert_int_equal(check_row(&o->obs[0][0][0], &o->act[0][0], &o->logp[0][0], 0), 2);
  replay_traj_get_stats(q, &st);
  assert_int_equal(st.dropped_full, 1);
  replay_traj_destroy(q);
  /* Block with a timeout. */
  c = traj_config(2, -1, REPLAY_FULL_BLOCK, 50);
  assert_int_equal(replay_traj_create(&c, &q, NULL), 0);
  assert_int_equal(push(q, 1, 1), 0);
  assert_int_equal(push(q, 2, 2), 0);
  double t0 = shoal_now_s();
  unroll u;
  make(&u, 3);
  const void *cols[2] = {u.obs, u.act};
  assert_int_equal(replay_traj_push(q, cols, u.logp, 3, &err), SHOAL_ETIMEDOUT);
  assert_true(shoal_now_s() - t0 >= 0.045);
  replay_traj_get_stats(q, &st);
  assert_int_equal(st.timeouts, 1);
  /* A blocked push goes through once a pop frees room. */
  late_push lp = {.q = q, .id = 4, .version = 4, .delay_ms = 0};
  pthread_t th;
  replay_traj_destroy(q);
  c = traj_config(2, -1, REPLAY_FULL_BLOCK, -1);
  assert_int_equal(replay_traj_create(&c, &q, NULL), 0);
  lp.q = q;
  assert_int_equal(push(q, 1, 1), 0);
  assert_int_equal(push(q, 2, 2), 0);
  assert_int_equal(pthread_create(&th, NULL, late_push_main, &lp), 0);
  usleep(20000);
  assert_int_equal(replay_traj_pop(q, 1, 0, 0, &o->b, NULL), 0);
  pthread_join(th, NULL);
  assert_int_equal(lp.rc, 0);
  assert_int_equal(replay_traj_pop(q, 2, 0, 1000, &o->b, NULL), 0);
  assert_int_equal(o->ver[0] * 10 + o->ver[1], 24);
  replay_traj_destroy(q);
  free(o);
}

typedef struct blocked_pop {
  replay_traj *q;
  int rc;
} blocked_pop;

static void *blocked_pop_main(void *arg) {
  blocked_pop *p = arg;
  outbuf *o = malloc(sizeof *o);
  outbuf_init(o);
  p->rc = replay_traj_pop(p->q, 1, 0, -1, &o->b, NULL);
  free(o);
  return NULL;
}

static void test_close_wakes_blocked_pop(void **state) {
  replay_traj *q = NULL;
  replay_traj_config c = traj_config(4, -1, REPLAY_FULL_BLOCK, -1);
  assert_int_equal(replay_traj_create(&c, &q, NULL), 0);
  blocked_pop bp = {.q = q, .rc = 1};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, blocked_pop_main, &bp), 0);
  usleep(20000);
  replay_traj_close(q);
  pthread_join(th, NULL);
  assert_int_equal(bp.rc, SHOAL_ECLOSED);
  assert_int_equal(push(q, 1, 1), SHOAL_ECLOSED);
  replay_traj_destroy(q);
}

enum { PUSHERS = 4, PER_PUSHER = 400 };

typedef struct pusher {
  replay_traj *q;
  int which, fails;
} pusher;

static void *pusher_main(void *arg) {
  pusher *p = arg;
  for (int i = 0; i < PER_PUSHER; i++) {
    int id = p->which * 10000 + i;
    p->fails += push(p->q, id, i) != 0;
  }
  return NULL;
}

static void test_many_pushers_one_popper(void **state) {
  replay_traj *q = NULL;
  replay_traj_config c = traj_config(16, -1, REPLAY_FULL_BLOCK, -1);
  assert_int_equal(replay_traj_create(&c, &q, NULL), 0);
  pusher ps[PUSHERS];
  pthread_t th[PUSHERS];
  for (int i = 0; i < PUSHERS; i++) {
    ps[i] = (pusher){.q = q, .which = i};
    assert_int_equal(pthread_create(&th[i], NULL, pusher_main, &ps[i]), 0);
  }
  outbuf *o = malloc(sizeof *o);
  outbuf_init(o);
  int next[PUSHERS] = {0}, got = 0;
  while (got < PUSHERS * PER_PUSHER) {
    int B = 4;
    assert_int_equal(replay_traj_pop(q, B, 0, 10000, &o->b, NULL), 0);
    for (int b = 0; b < B; b++) {
      int id = check_row(&o->obs[0][0][0], &o->act[0][0], &o->logp[0][0], b);
      int w = id / 10000, i = id % 10000;
      assert_true(w >= 0 && w < PUSHERS);
      assert_int_equal(i, next[w]); /* each pusher's unrolls arrive in its order */
      assert_int_equal(o->ver[b], i);
      next[w]++;
    }
    got += B;
  }
  for (int i = 0; i < PUSHERS; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(ps[i].fails, 0);
    assert_int_equal(next[i], PER_PUSHER);
  }
  replay_traj_stats st;
  replay_traj_get_stats(q, &st);
  assert_int_equal(st.pushed, PUSHERS * PER_PUSHER);
  assert_int_equal(st.popped, PUSHERS * PER_PUSHER);
  assert_int_equal(st.held, 0);
  free(o);
  replay_traj_destroy(q);
}

/* A per-unroll column (an LSTM's initial (h, c)) beside the step columns: one row per
 * unroll, (B, item) in both layouts, dropped with its stale unroll. */
static void test_unroll_column(void **state) {
  enum { S = 4 };
  replay_traj_config c = traj_config(4, 1, REPLAY_FULL_BLOCK, -1);
  c.ncols = 3;
  c.cols[2] = (replay_column){.name = "core0", .dtype = REPLAY_F32, .ndim = 1, .shape = {S}};
  c.unroll_column = "core0";
  /* the memory estimate counts one row of it */
  replay_traj_config c2 = c;
  c2.unroll_column = NULL;
  assert_int_equal(replay_traj_memory_bytes(&c2) - replay_traj_memory_bytes(&c),
                   (size_t)4 * (T - 1) * S * sizeof(float));
  replay_traj *q;
  assert_int_equal(replay_traj_create(&c, &q, NULL), 0);
  assert_int_equal(replay_traj_rows(q, 0), T + 1);
  assert_int_equal(replay_traj_rows(q, 1), T);
  assert_int_equal(replay_traj_rows(q, 2), 1);
  /* versions 0, 5, 5, 5: at learner version 5 the first is stale (bound 1) */
  for (int id = 0; id < 4; id++) {
    unroll u;
    make(&u, id);
    float core[S];
    for (int k = 0; k < S; k++) core[k] = (float)(id * 10 + k);
    const void *cols[3] = {u.obs, u.act, core};
    assert_int_equal(replay_traj_push(q, cols, u.logp, id ? 5 : 0, NULL), 0);
  }
  float obs[T + 1][2][D], core0[2][S], lp[T][2];
  int32_t act[T][2];
  int64_t ver[2];
  replay_traj_batch b = {{obs, act, core0}, &lp[0][0], ver, 1};
  assert_int_equal(replay_traj_pop(q, 2, 5, 0, &b, NULL), 0);
  for (int i = 0; i < 2; i++) {
    int id = (int)(obs[0][i][0] / 100.0f + 0.5f);
    assert_int_equal(id, i + 1);
    assert_int_equal(act[T - 1][i], id * 7 + T - 1);
    for (int k = 0; k < S; k++) assert_true(core0[i][k] == (float)(id * 10 + k));
  }
  /* batch-major: the same (B, item) */
  float obs_b[1][T + 1][D], core_b[1][S];
  replay_traj_batch bb = {{obs_b, NULL, core_b}, NULL, NULL, 0};
  assert_int_equal(replay_traj_pop(q, 1, 5, 0, &bb, NULL), 0);
  for (int k = 0; k < S; k++) assert_true(core_b[0][k] == (float)(30 + k));
  replay_traj_destroy(q);
  /* a name that is not a column, or the bootstrap column too: refused */
  shoal_error err = {0};
  c.unroll_column = "h0";
  assert_int_equal(replay_traj_create(&c, &q, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "h0"));
  c.unroll_column = "obs";
  assert_int_equal(replay_traj_create(&c, &q, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "both"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_contents_and_bootstrap_row),
      cmocka_unit_test(test_staleness_bound_drops_and_counts),
      cmocka_unit_test(test_full_of_stale_behind_fresh_does_not_deadlock),
      cmocka_unit_test(test_full_policies),
      cmocka_unit_test(test_close_wakes_blocked_pop),
      cmocka_unit_test(test_many_pushers_one_popper),
      cmocka_unit_test(test_unroll_column),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
