/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_replay_per.c — proportional prioritized replay (Schaul et al. 2016):
 * sampling frequencies against P(i) = p_i / sum p (chi-square, fixed seed),
 * importance weights against (N P(i))^-beta / max_j (N P(j))^-beta, max priority
 * for new steps, priority updates, stale updates ignored, bad updates refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "replay/replay.h"

#define ALPHA 0.6
#define EPS 1e-3

static replay_config per_config(int64_t cap) {
  replay_config c = {.kind = REPLAY_PRIORITIZED,
                     .capacity = cap,
                     .streams = 2,
                     .ncols = 1,
                     .obs_column = "obs",
                     .alpha = ALPHA,
                     .eps = EPS,
                     .writer_slack = 0};
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_I64};
  return c;
}

static double prio(double td) { return pow(td + EPS, ALPHA); }

/* n steps with ids first..first+n-1 in one episode, terminated at the end when
 * `end` (final obs -1), with initial |delta| td (NULL: max priority). */
static void put(replay *r, int n, int64_t first, const float *td, int end) {
  assert_true(n <= 128);
  int64_t ids[128], fin[1] = {-1};
  float rew[128] = {0};
  uint8_t te[128] = {0};
  for (int i = 0; i < n; i++) ids[i] = first + i;
  te[n - 1] = (uint8_t)end;
  replay_steps s = {
      .n = n, .cols = {ids}, .reward = rew, .terminated = te, .final_obs = fin, .priority = td};
  shoal_error err = {0};
  int rc = replay_insert(r, 0, &s, &err);
  if (rc) print_message("insert: %s\n", err.msg);
  assert_int_equal(rc, 0);
}

static void test_frequencies_match_priorities(void **state) {
  enum { N = 40, B = 500, CALLS = 400 };
  replay *r = NULL;
  replay_config c = per_config(64);
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  float td[N];
  double p[N], total = 0;
  for (int i = 0; i < N; i++) {
    td[i] = 0.5f + 0.5f * (float)(i % 8) + (i == 7 ? 20.0f : 0.0f);
    p[i] = prio(td[i]);
    total += p[i];
  }
  put(r, N, 0, td, 1);
  replay_stats st;
  replay_get_stats(r, &st);
  assert_true(fabs(st.priority_total - total) < 1e-9 * total);

  int64_t ids[B];
  float w[B];
  replay_batch b = {.cols = {ids}, .weight = w};
  replay_sample_args a = {.batch = B, .n_step = 1, .gamma = 0.99, .beta = 0.7};
  shoal_rng rng;
  shoal_rng_seed(&rng, 12345);
  double counts[N] = {0};
  /* IS weights from the paper's formula, N = the steps in the memory. */
  double wmax = 0;
  for (int i = 0; i < N; i++) wmax = fmax(wmax, pow(N * p[i] / total, -0.7));
  for (int k = 0; k < CALLS; k++) {
    assert_int_equal(replay_sample(r, &rng, &a, &b, NULL), 0);
    for (int j = 0; j < B; j++) {
      assert_true(ids[j] >= 0 && ids[j] < N);
      counts[ids[j]]++;
      double want = pow(N * p[ids[j]] / total, -0.7) / wmax;
      assert_float_equal(w[j], want, 1e-5 * want);
    }
  }
  /* Stratified batches: each of the B strata holds total/B of the mass, so the
   * counts sit much closer to their expectation than independent draws would. */
  double draws = (double)B * CALLS;
  for (int i = 0; i < N; i++) {
    double e = draws * p[i] / total;
    assert_true(fabs(counts[i] - e) < 0.02 * e + 30);
  }
  /* Independent draws (batch 1): Pearson's chi-square with 39 degrees of freedom,
   * whose 0.999 quantile is 72.05. */
  enum { DRAWS = 100000 };
  memset(counts, 0, sizeof counts);
  a.batch = 1;
  for (int k = 0; k < DRAWS; k++) {
    assert_int_equal(replay_sample(r, &rng, &a, &b, NULL), 0);
    counts[ids[0]]++;
  }
  double chi2 = 0, chi2_uniform = 0;
  for (int i = 0; i < N; i++) {
    double e = (double)DRAWS * p[i] / total, eu = (double)DRAWS / N;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    chi2_uniform += (counts[i] - eu) * (counts[i] - eu) / eu;
  }
  print_message("chi2 = %.2f (critical 72.05), against uniform %.0f\n", chi2, chi2_uniform);
  assert_true(chi2 < 72.05);
  assert_true(chi2_uniform > 1000); /* the test can tell priorities from uniform */
  replay_destroy(r);
}

static void test_new_steps_get_max_priority(void **state) {
  replay *r = NULL;
  replay_config c = per_config(64);
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  replay_stats st;
  put(r, 3, 0, NULL, 0); /* an empty memory's max priority is 1 */
  replay_get_stats(r, &st);
  assert_float_equal(st.priority_total, 3.0, 1e-12);
  float td[2] = {3, 0.25f};
  put(r, 2, 3, td, 0);
  put(r, 4, 5, NULL, 1); /* 4 steps at max = prio(3); the tail has no priority */
  replay_get_stats(r, &st);
  double want = 3 + prio(3) + prio(0.25) + 4 * prio(3);
  assert_float_equal(st.priority_total, want, 1e-9);
  assert_float_equal(st.priority_max, prio(3), 1e-12);
  replay_destroy(r);
}

static void test_updates_and_stale_updates(void **state) {
  enum { B = 8 };
  replay *r = NULL;
  replay_config c = per_config(16);
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  double model[64] = {0}; /* priority per sequence number */
  put(r, 10, 0, NULL, 1); /* seq 1..10 steps at priority 1, seq 11 the tail */
  for (int s = 1; s <= 10; s++) model[s] = 1;
  int64_t ids[B], idx[B];
  uint64_t gen[B];
  replay_batch b = {.cols = {ids}, .index = idx, .generation = gen};
  replay_sample_args a = {.batch = B, .n_step = 1, .gamma = 0.9, .beta = 0.4};
  shoal_rng rng;
  shoal_rng_seed(&rng, 9);
  assert_int_equal(replay_sample(r, &rng, &a, &b, NULL), 0);
  float td[B];
  double maxp = 1;
  for (int i = 0; i < B; i++) {
    assert_int_equal(gen[i], (uint64_t)ids[i] + 1); /* ids 0.. were seq 1.. */
    td[i] = 0.1f * (float)(i + 1);
    model[gen[i]] = prio(td[i]);
  }
  for (int s = 1; s <= 10; s++) maxp = fmax(maxp, model[s]);
  assert_int_equal(replay_update_priorities(r, B, idx, gen, td, NULL), 0);
  replay_stats st;
  replay_get_stats(r, &st);
  double want = 0;
  for (int s = 1; s <= 11; s++) want += model[s];
  assert_float_equal(st.priority_total, want, 1e-9);
  assert_int_equal(st.stale_updates, 0);

  /* 10 more steps: seq 12..21; the ring holds 6..21, so seq 1..5 were overwritten. */
  put(r, 10, 100, NULL, 0);
  for (int s = 12; s <= 21; s++) model[s] = maxp;
  int stale = 0;
  float td2[B];
  for (int i = 0; i < B; i++) {
    td2[i] = 5.0f;
    if (gen[i] <= 5)
      stale++;
    else
      model[gen[i]] = prio(5);
  }
  assert_true(stale > 0 && stale < B); /* the seed makes both cases occur */
  assert_int_equal(replay_update_priorities(r, B, idx, gen, td2, NULL), 0);
  replay_get_stats(r, &st);
  assert_int_equal(st.stale_updates, (uint64_t)stale);
  want = 0;
  for (int s = 6; s <= 21; s++) want += model[s];
  assert_float_equal(st.priority_total, want, 1e-9);

  /* Non-finite or negative |delta|: refused, nothing changes. */
  shoal_error err = {0};
  td2[3] = NAN;
  assert_int_equal(replay_update_priorities(r, B, idx, gen, td2, &err), SHOAL_ENAN);
  td2[3] = -1;
  assert_int_equal(replay_update_priorities(r, B, idx, gen, td2, &err), SHOAL_EINVAL);
  idx[0] = 16;
  td2[3] = 1;
  assert_int_equal(replay_update_priorities(r, B, idx, gen, td2, &err), SHOAL_ERANGE);
  replay_get_stats(r, &st);
  assert_float_equal(st.priority_total, want, 1e-9);
  assert_int_equal(st.stale_updates, (uint64_t)stale);
  replay_destroy(r);
}

static void test_weights_use_min_priority_over_memory(void **state) {
  /* Two steps with p 1 and 4^... : w = (p_min / p_i)^beta, checked for both. */
  enum { B = 64 };
  replay *r = NULL;
  replay_config c = per_config(8);
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  float td[2] = {1, 9};
  put(r, 2, 0, td, 1);
  int64_t ids[B];
  float w[B];
  replay_batch b = {.cols = {ids}, .weight = w};
  replay_sample_args a = {.batch = B, .n_step = 1, .gamma = 1, .beta = 1};
  shoal_rng rng;
  shoal_rng_seed(&rng, 2);
  assert_int_equal(replay_sample(r, &rng, &a, &b, NULL), 0);
  int seen[2] = {0};
  for (int i = 0; i < B; i++) {
    seen[ids[i]]++;
    double want = ids[i] == 0 ? 1.0 : prio(1) / prio(9);
    assert_float_equal(w[i], want, 1e-6);
  }
  assert_true(seen[0] > 0 && seen[1] > seen[0]);
  replay_destroy(r);
}

static void test_deep_tree_with_ragged_levels(void **state) {
  /* Capacity 1000: levels of 1000, 125, 16, 2 and 1 nodes, none a full power of 8.
   * 990 steps in 15 inserts of 66 (the ring wraps once), then updates, and the
   * frequencies of 10 buckets of ids against their priority mass. */
  enum { CAP = 1000, N = 990, DRAWS = 60000 };
  replay *r = NULL;
  replay_config c = per_config(CAP);
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  static double p[1200];
  float td[66];
  shoal_rng rng;
  shoal_rng_seed(&rng, 31);
  for (int k = 0; k < 18; k++) { /* 18 * 66 = 1188 steps: the first 188 are overwritten */
    for (int i = 0; i < 66; i++) {
      td[i] = (float)(shoal_rng_uniform(&rng) * 4);
      p[k * 66 + i] = prio(td[i]);
    }
    put(r, 66, k * 66, td, k == 17);
  }
  /* Held: seq 190..1189, the steps with ids 189..1187 and the tail. */
  double total = 0;
  for (int id = 1188 - 999; id < 1188; id++) total += p[id];
  replay_stats st;
  replay_get_stats(r, &st);
  if (fabs(st.priority_total - total) >= 1e-9 * total)
    print_message("total %.12g, expected %.12g, held %lld\n", st.priority_total, total,
                  (long long)st.held);
  assert_true(fabs(st.priority_total - total) < 1e-9 * total);
  /* Frequencies by bucket of 100 ids. */
  int64_t ids[1];
  replay_batch b = {.cols = {ids}};
  replay_sample_args a = {.batch = 1, .n_step = 1, .gamma = 1, .beta = 0};
  double counts[10] = {0}, mass[10] = {0};
  int first = 1188 - 999;
  for (int id = first; id < 1188; id++) mass[(id - first) / 100] += p[id] / total;
  for (int k = 0; k < DRAWS; k++) {
    assert_int_equal(replay_sample(r, &rng, &a, &b, NULL), 0);
    assert_true(ids[0] >= first && ids[0] < 1188);
    counts[(ids[0] - first) / 100]++;
  }
  double chi2 = 0;
  for (int i = 0; i < 10; i++) {
    double e = DRAWS * mass[i];
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  print_message("deep tree chi2 = %.2f (9 dof, critical 27.88)\n", chi2);
  assert_true(chi2 < 27.88);
  replay_destroy(r);
}

static void test_uniform_frequencies(void **state) {
  enum { N = 40, DRAWS = 100000 };
  replay *r = NULL;
  replay_config c = per_config(64);
  c.kind = REPLAY_UNIFORM;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  put(r, N, 0, NULL, 1);
  int64_t ids[1];
  float w[1];
  replay_batch b = {.cols = {ids}, .weight = w};
  replay_sample_args a = {.batch = 1, .n_step = 1, .gamma = 1};
  shoal_rng rng;
  shoal_rng_seed(&rng, 77);
  double counts[N] = {0};
  for (int k = 0; k < DRAWS; k++) {
    assert_int_equal(replay_sample(r, &rng, &a, &b, NULL), 0);
    assert_true(ids[0] >= 0 && ids[0] < N);
    assert_float_equal(w[0], 1.0f, 0);
    counts[ids[0]]++;
  }
  double chi2 = 0, e = (double)DRAWS / N;
  for (int i = 0; i < N; i++) chi2 += (counts[i] - e) * (counts[i] - e) / e;
  print_message("uniform chi2 = %.2f (critical 72.05)\n", chi2);
  assert_true(chi2 < 72.05);
  replay_destroy(r);
}

static void test_uniform_refuses_updates_and_beta_schedule(void **state) {
  replay *r = NULL;
  replay_config c = per_config(8);
  c.kind = REPLAY_UNIFORM;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  int64_t idx[1] = {0};
  uint64_t gen[1] = {1};
  float td[1] = {1};
  assert_int_equal(replay_update_priorities(r, 1, idx, gen, td, NULL), SHOAL_ENOTSUP);
  replay_destroy(r);
  assert_float_equal(replay_beta_linear(0.4, 1.0, 0, 100), 0.4, 1e-12);
  assert_float_equal(replay_beta_linear(0.4, 1.0, 50, 100), 0.7, 1e-12);
  assert_float_equal(replay_beta_linear(0.4, 1.0, 500, 100), 1.0, 1e-12);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_frequencies_match_priorities),
      cmocka_unit_test(test_new_steps_get_max_priority),
      cmocka_unit_test(test_updates_and_stale_updates),
      cmocka_unit_test(test_weights_use_min_priority_over_memory),
      cmocka_unit_test(test_deep_tree_with_ragged_levels),
      cmocka_unit_test(test_uniform_frequencies),
      cmocka_unit_test(test_uniform_refuses_updates_and_beta_schedule),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
