/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_replay_limit.c — backpressure by the rate limiter (samples per
 * insert within a band, as Reverb's SampleToInsertRatio): inserts wait when the
 * learner lags, samples wait when the actors lag or before min_size_to_sample,
 * exact sequences worked by hand, a writer and a sampler held to the ratio, and
 * replay_close waking a blocked call. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay/replay.h"

/* No obs column, so every step is sampleable at once (n = 1). */
static replay *make(double spi, double tol, int64_t min_size, int64_t timeout_ms) {
  replay_config c = {.kind = REPLAY_UNIFORM,
                     .capacity = 100000,
                     .streams = 2,
                     .ncols = 1,
                     .writer_slack = 0,
                     .samples_per_insert = spi,
                     .spi_tolerance = tol,
                     .min_size_to_sample = min_size,
                     .limit_timeout_ms = timeout_ms};
  c.cols[0] = (replay_column){.name = "x", .dtype = REPLAY_I64};
  replay *r = NULL;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  return r;
}

static int insert(replay *r, int n) {
  int64_t x[64] = {0};
  float rew[64] = {0};
  uint8_t te[64] = {0};
  replay_steps s = {.n = n, .cols = {x}, .reward = rew, .terminated = te};
  return replay_insert(r, 0, &s, NULL);
}

static int sample(replay *r, int B, shoal_error *err) {
  int64_t x[64];
  replay_batch b = {.cols = {x}};
  replay_sample_args a = {.batch = B, .n_step = 1, .gamma = 1};
  static shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  return replay_sample(r, &rng, &a, &b, err);
}

static void test_inserts_wait_for_the_learner(void **state) {
  /* spi 2, tolerance 20, min size 10: d = 2I - S, inserts go while d <= 20 + 20. */
  replay *r = make(2, 20, 10, 30);
  for (int i = 0; i < 5; i++) assert_int_equal(insert(r, 5), 0); /* d = 0,10,..,40: go */
  double t0 = shoal_now_s();
  assert_int_equal(insert(r, 5), SHOAL_ETIMEDOUT); /* d = 50 */
  assert_true(shoal_now_s() - t0 >= 0.025);
  shoal_error err = {0};
  assert_int_equal(sample(r, 16, &err), 0); /* d = 50 >= 0: S = 16, d = 34 */
  assert_int_equal(insert(r, 5), 0);        /* 34 <= 40: I = 30, d = 44 */
  assert_int_equal(insert(r, 5), SHOAL_ETIMEDOUT);
  replay_stats st;
  replay_get_stats(r, &st);
  assert_int_equal(st.inserted_steps, 30);
  assert_int_equal(st.limiter_waits, 2);
  replay_destroy(r);
}

static void test_samples_wait_for_the_actors(void **state) {
  /* spi 2, tolerance 20, min size 10: samples go once I >= 10 and while d >= 0. */
  replay *r = make(2, 20, 10, 20);
  shoal_error err = {0};
  assert_int_equal(insert(r, 5), 0);
  assert_int_equal(sample(r, 8, &err), SHOAL_ETIMEDOUT); /* I = 5 < 10 */
  assert_int_equal(insert(r, 5), 0);                     /* I = 10, d = 20 */
  assert_int_equal(sample(r, 8, &err), 0);               /* d = 12 */
  assert_int_equal(sample(r, 8, &err), 0);               /* d = 4 */
  assert_int_equal(sample(r, 8, &err), 0);               /* d = -4 */
  assert_int_equal(sample(r, 8, &err), SHOAL_ETIMEDOUT);
  assert_non_null(strstr(err.msg, "rate limiter"));
  assert_int_equal(insert(r, 2), 0); /* d = 0 */
  assert_int_equal(sample(r, 8, &err), 0);
  replay_stats st;
  replay_get_stats(r, &st);
  assert_int_equal(st.sampled, 32);
  replay_destroy(r);
}

typedef struct pair {
  replay *r;
  atomic_int done;
  int64_t sampled, calls;
  int last_rc, write_fails;
} pair;

enum { TOTAL = 20000, BATCH_IN = 10, BATCH_OUT = 32 };

static void *writer_main(void *arg) {
  pair *p = arg;
  for (int i = 0; i < TOTAL / BATCH_IN; i++) p->write_fails += insert(p->r, BATCH_IN) != 0;
  atomic_store(&p->done, 1);
  return NULL;
}

static void *sampler_main(void *arg) {
  pair *p = arg;
  for (;;) {
    int rc = sample(p->r, BATCH_OUT, NULL);
    if (rc) {
      p->last_rc = rc;
      break;
    }
    p->sampled += BATCH_OUT;
    p->calls++;
  }
  return NULL;
}

static void test_writer_and_sampler_held_to_the_ratio(void **state) {
  /* spi 1, tolerance 100, min size 1000, no timeouts: when the writer is done
   * (I = 20000) the sampler can have taken at most d >= 900 - 32 short of it, and
   * the writer could only finish if S had reached I - 10 - 1100. replay_close
   * then wakes the sampler blocked at the lower edge. */
  pair p = {.r = make(1, 100, 1000, -1)};
  pthread_t w, s;
  assert_int_equal(pthread_create(&s, NULL, sampler_main, &p), 0);
  assert_int_equal(pthread_create(&w, NULL, writer_main, &p), 0);
  pthread_join(w, NULL);
  assert_int_equal(p.write_fails, 0);
  usleep(50000); /* let the sampler drain to the band's lower edge */
  replay_close(p.r);
  pthread_join(s, NULL);
  assert_int_equal(p.last_rc, SHOAL_ECLOSED);
  print_message("sampled %lld of %d inserted\n", (long long)p.sampled, TOTAL);
  assert_true(p.sampled >= TOTAL - 1000 - 100 - BATCH_IN);
  assert_true(p.sampled <= TOTAL - 1000 + 100 + BATCH_OUT);
  replay_stats st;
  replay_get_stats(p.r, &st);
  assert_int_equal(st.inserted_steps, TOTAL);
  assert_int_equal(st.sampled, (uint64_t)p.sampled);
  assert_true(st.limiter_waits > 0);
  /* Closed: a call that would wait returns at once. */
  assert_int_equal(sample(p.r, BATCH_OUT, NULL), SHOAL_ECLOSED);
  replay_destroy(p.r);
}

static void test_bad_limiter_config(void **state) {
  replay_config c = {.kind = REPLAY_UNIFORM, .capacity = 100, .ncols = 1, .samples_per_insert = -1};
  c.cols[0] = (replay_column){.name = "x", .dtype = REPLAY_I64};
  replay *r = NULL;
  shoal_error err = {0};
  assert_int_equal(replay_create(&c, &r, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "samples_per_insert"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_inserts_wait_for_the_learner),
      cmocka_unit_test(test_samples_wait_for_the_actors),
      cmocka_unit_test(test_writer_and_sampler_held_to_the_ratio),
      cmocka_unit_test(test_bad_limiter_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
