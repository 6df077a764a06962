/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_collect.c — the actor's sample builder: n-step initial priorities
 * against hand-worked episodes, env-major layout, final observations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "actor/collect.h"

/* One env, n = 2, γ = 0.5. Steps (obs, a, r, Q(s,a), maxQ(s)):
 *   t0: obs 10, r 1, Q 0.5, maxQ 1
 *   t1: obs 11, r 2, Q 0.25, maxQ 2
 *   t2: obs 12, r 3, Q 1, maxQ 4  -> terminated (final obs 13)
 *   t3: obs 20, r 1, Q 0, maxQ 8   (new episode)
 * Priorities: t0: |1 + 0.5*2 + 0.25*maxQ(t2)=4 -> 1+1+1 - 0.5| = 2.5
 *             t1: |2 + 0.5*3 (terminated, no bootstrap) - 0.25| = 3.25
 *             t2: |3 - 1| = 2
 *             t3: unknown until t5 or its episode ends. */
static void test_nstep_priorities_hand_worked(void **state) {
  shoal_error err = {0};
  collector *c = collector_create(1, 1, 2, 0.5f, 8, &err);
  assert_non_null(c);
  float obs[] = {10, 11, 12, 20}, r[] = {1, 2, 3, 1}, q[] = {0.5f, 0.25f, 1, 0},
        mq[] = {1, 2, 4, 8};
  uint8_t term[] = {0, 0, 1, 0}, trunc[] = {0, 0, 0, 0};
  int32_t a[] = {1, 0, 1, 1};
  float fin = 13, fmq = 0;
  collector_batch b;
  for (int t = 0; t < 4; t++) {
    assert_int_equal(collector_add(c, &obs[t], &a[t], &q[t], &mq[t], &r[t], &term[t], &trunc[t],
                                   &fin, &fmq, &err),
                     0);
    if (t == 1) {
      collector_flush(c, &b);
      assert_int_equal(b.n, 0); /* t0 needs maxQ of t2 */
    }
  }
  collector_flush(c, &b);
  assert_int_equal(b.n, 3);
  assert_int_equal(b.k, 1);
  assert_float_equal(b.priority[0], 2.5f, 1e-6);
  assert_float_equal(b.priority[1], 3.25f, 1e-6);
  assert_float_equal(b.priority[2], 2.0f, 1e-6);
  assert_float_equal(b.obs[2], 12, 0);
  assert_float_equal(b.final_obs[0], 13, 0);
  assert_int_equal(b.terminated[2], 1);
  assert_int_equal(b.action[1], 0);
  assert_int_equal(collector_pending(c), 1);
  collector_destroy(c);
}

/* Truncation bootstraps from the final observation's max Q. n = 3, γ = 0.9:
 * t0 r 1, t1 r 1 truncated with maxQ(final) = 10, Q(s0,a0) = 2, Q(s1,a1) = 3:
 *   t0: 1 + 0.9*1 + 0.81*10 - 2 = 8.0;  t1: 1 + 0.9*10 - 3 = 7.0 */
static void test_truncation_bootstraps(void **state) {
  shoal_error err = {0};
  collector *c = collector_create(1, 2, 3, 0.9f, 8, &err);
  float obs[2][2] = {{1, 2}, {3, 4}}, fin[2] = {5, 6};
  float r = 1, q0 = 2, q1 = 3, mq = 0, fmq = 10;
  int32_t a = 0;
  uint8_t z = 0, one = 1;
  assert_int_equal(collector_add(c, obs[0], &a, &q0, &mq, &r, &z, &z, fin, &fmq, &err), 0);
  assert_int_equal(collector_add(c, obs[1], &a, &q1, &mq, &r, &z, &one, fin, &fmq, &err), 0);
  collector_batch b;
  collector_flush(c, &b);
  assert_int_equal(b.n, 2);
  assert_int_equal(b.k, 1);
  assert_float_equal(b.priority[0], 8.0f, 1e-5);
  assert_float_equal(b.priority[1], 7.0f, 1e-5);
  assert_float_equal(b.final_obs[1], 6, 0);
  assert_int_equal(b.truncated[1], 1);
  collector_destroy(c);
}

/* Two envs: the batch is env-major and each env's steps stay in time order. */
static void test_env_major_layout_and_full(void **state) {
  shoal_error err = {0};
  collector *c = collector_create(2, 1, 1, 0.99f, 4, &err);
  uint8_t z[2] = {0, 0};
  int32_t a[2] = {0, 1};
  float q[2] = {0, 0}, r[2] = {1, 1};
  for (int t = 0; t < 4; t++) {
    float obs[2] = {(float)(100 + t), (float)(200 + t)}, mq[2] = {0, 0};
    assert_int_equal(collector_add(c, obs, a, q, mq, r, z, z, NULL, NULL, &err), 0);
  }
  /* Full: cap 4 steps per env. */
  float obs[2] = {0, 0};
  assert_int_equal(collector_add(c, obs, a, q, q, r, z, z, NULL, NULL, &err), SHOAL_EFULL);
  collector_batch b;
  collector_flush(c, &b);
  assert_int_equal(b.n, 6); /* the last step of each env waits for its successor */
  for (int i = 0; i < 3; i++) {
    assert_int_equal(b.env[i], 0);
    assert_float_equal(b.obs[i], 100 + i, 0);
    assert_int_equal(b.env[3 + i], 1);
    assert_float_equal(b.obs[3 + i], 200 + i, 0);
  }
  assert_int_equal(collector_pending(c), 2);
  assert_null(collector_create(0, 1, 1, 0.9f, 4, &err));
  assert_null(collector_create(1, 1, 4, 0.9f, 4, &err));
  collector_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nstep_priorities_hand_worked),
      cmocka_unit_test(test_truncation_bootstraps),
      cmocka_unit_test(test_env_major_layout_and_full),
  };
  return cmocka_run_group_tests_name("collect", tests, NULL, NULL);
}
