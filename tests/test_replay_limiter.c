/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_replay_limiter.c — the rate limiter on its own (replay/limiter.h), as the
 * Ape-X learner drives it: batches that count their own steps, a sample side without
 * tolerance, a live ratio change that keeps the slack, counts set on resume, undo, and
 * a close that wakes a waiting insert. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "replay/limiter.h"

static replay_limiter *make(double spi, double ins_tol, double smp_tol, int64_t min, bool own) {
  replay_limiter_config c = {spi, ins_tol, smp_tol, min, own};
  replay_limiter *l = NULL;
  assert_int_equal(replay_limiter_create(&c, &l, NULL), 0);
  return l;
}

static void test_batches_count_their_own_steps(void **state) {
  /* spi 2, insert tolerance 40, warm-up 10: d = 2(I - 10) - S; a batch of 5 adds 10. */
  replay_limiter *l = make(2, 40, 0, 10, true);
  for (int i = 0; i < 6; i++) assert_int_equal(replay_limiter_insert(l, 5, 0, NULL), 0);
  /* I = 30: d = 40, and a 7th batch would make it 50 > 40. */
  shoal_error err = {0};
  assert_int_equal(replay_limiter_insert(l, 5, 0, &err), SHOAL_ETIMEDOUT);
  assert_non_null(strstr(err.msg, "insert"));
  /* Without counting its own, the same state lets one more batch overshoot. */
  replay_limiter *o = make(2, 40, 0, 10, false);
  for (int i = 0; i < 7; i++) assert_int_equal(replay_limiter_insert(o, 5, 0, NULL), 0);
  assert_int_equal(replay_limiter_insert(o, 5, 0, NULL), SHOAL_ETIMEDOUT);
  replay_limiter_destroy(o);
  replay_limiter_stats st;
  replay_limiter_stats_get(l, &st);
  assert_true(st.inserted == 30 && st.insert_waits == 1);
  replay_limiter_destroy(l);
}

static void test_samples_hold_to_the_ratio(void **state) {
  replay_limiter *l = make(2, 1000, 0, 10, true);
  assert_int_equal(replay_limiter_insert(l, 8, 0, NULL), 0);
  assert_int_equal(replay_limiter_sample(l, 4, 0, NULL), SHOAL_ETIMEDOUT); /* I < warm-up */
  assert_int_equal(replay_limiter_insert(l, 8, 0, NULL), 0);               /* d = 12 */
  assert_int_equal(replay_limiter_sample(l, 8, 0, NULL), 0);               /* d = 4 */
  assert_int_equal(replay_limiter_sample(l, 8, 0, NULL), 0);               /* d = -4 */
  assert_int_equal(replay_limiter_sample(l, 8, 0, NULL), SHOAL_ETIMEDOUT);
  replay_limiter_undo(l, 0, 8); /* the last update did not happen: d = 4 */
  assert_int_equal(replay_limiter_sample(l, 1, 0, NULL), 0);
  replay_limiter_destroy(l);
}

static void test_new_ratio_keeps_the_slack(void **state) {
  /* 110 inserted, warm-up 10, 150 sampled at spi 2: d = 50. At spi 4, d stays 50. */
  replay_limiter *l = make(2, 1e9, 0, 10, true);
  replay_limiter_set_counts(l, 110, 150);
  replay_limiter_set_ratio(l, 4, 1e9);
  replay_limiter_stats st;
  replay_limiter_stats_get(l, &st);
  assert_true(st.sampled == 350);                             /* 4 · 100 − 50 */
  assert_int_equal(replay_limiter_sample(l, 51, 0, NULL), 0); /* d = 50 >= 0: then -1 */
  assert_int_equal(replay_limiter_sample(l, 1, 0, NULL), SHOAL_ETIMEDOUT);
  replay_limiter_destroy(l);
}

static void *insert_main(void *arg) {
  replay_limiter *l = arg;
  return (void *)(intptr_t)replay_limiter_insert(l, 1, -1, NULL);
}

static void test_close_wakes_a_waiting_insert(void **state) {
  replay_limiter *l = make(1, 0, 0, 0, true);
  assert_int_equal(replay_limiter_insert(l, 1, 0, NULL), SHOAL_ETIMEDOUT); /* d would be 1 */
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, insert_main, l), 0);
  replay_limiter_close(l);
  void *rc;
  pthread_join(th, &rc);
  assert_int_equal((int)(intptr_t)rc, SHOAL_ECLOSED);
  assert_int_equal(replay_limiter_sample(l, 1, 0, NULL), SHOAL_ECLOSED);
  replay_limiter_destroy(l);
}

static void test_bad_config_is_named(void **state) {
  replay_limiter_config c = {.samples_per_insert = 0};
  replay_limiter *l = NULL;
  shoal_error err = {0};
  assert_int_equal(replay_limiter_create(&c, &l, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "samples_per_insert"));
  assert_null(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batches_count_their_own_steps),
      cmocka_unit_test(test_samples_hold_to_the_ratio),
      cmocka_unit_test(test_new_ratio_keeps_the_slack),
      cmocka_unit_test(test_close_wakes_a_waiting_insert),
      cmocka_unit_test(test_bad_config_is_named),
  };
  return cmocka_run_group_tests_name("replay_limiter", tests, NULL, NULL);
}
