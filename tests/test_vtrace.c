/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_vtrace.c — V-trace and GAE against hand-worked examples, against a
 * literal evaluation of Espeholt et al.'s eq. 1, the on-policy limit (n-step returns)
 * and bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "algos/algos.h"

/* Two sequences (B = 2, time-major), worked by hand in the comments.
 * b=0: γ_t = [0.9, 0, 0.9] (terminates at t=1), r = [1, 2, 3], V = [0.5, 1, 0.2 | 0.4],
 *      π/μ = [2, 0.5, 1] so ρ = c = [1, 0.5, 1]:
 *      t=2: δ = 3 + 0.9·0.4 − 0.2 = 3.16, v = 3.36, A^pg = 3.16
 *      t=1: δ = 0.5·(2 − 1) = 0.5, v = 1.5 (γ = 0 cuts), A^pg = 0.5
 *      t=0: δ = 1 + 0.9·1 − 0.5 = 1.4, v − V = 1.4 + 0.9·1·0.5 = 1.85, v = 2.35,
 *           A^pg = 1 + 0.9·1.5 − 0.5 = 1.85
 * b=1: γ = 0.9 throughout, r = [0, 1, 0], V = [1, 2, 3 | 4], π/μ = [0.5, 2, 0.25]:
 *      t=2: δ = 0.25·(3.6 − 3) = 0.15, v = 3.15, A^pg = 0.15
 *      t=1: δ = 1 + 2.7 − 2 = 1.7, v − V = 1.7 + 0.9·0.15 = 1.835, v = 3.835,
 *           A^pg = 1 + 0.9·3.15 − 2 = 1.835
 *      t=0: δ = 0.5·(1.8 − 1) = 0.4, v − V = 0.4 + 0.9·0.5·1.835 = 1.22575,
 *           A^pg = 0.5·(0.9·3.835 − 1) = 1.22575 */
static void test_vtrace_by_hand(void **state) {
  float log_rho[6] = {logf(2), logf(0.5f), logf(0.5f), logf(2), logf(1), logf(0.25f)};
  float disc[6] = {0.9f, 0.9f, 0, 0.9f, 0.9f, 0.9f};
  float rew[6] = {1, 0, 2, 1, 3, 0};
  float val[8] = {0.5f, 1, 1, 2, 0.2f, 3, 0.4f, 4};
  float vs[6], pg[6];
  shoal_error err = {0};
  assert_int_equal(vtrace(3, 2, log_rho, disc, rew, val, NULL, NULL, 1, 1, 1, vs, pg, &err), 0);
  const float want_vs[6] = {2.35f, 2.22575f, 1.5f, 3.835f, 3.36f, 3.15f};
  const float want_pg[6] = {1.85f, 1.22575f, 0.5f, 1.835f, 3.16f, 0.15f};
  for (int i = 0; i < 6; i++) {
    assert_float_equal(vs[i], want_vs[i], 1e-5);
    assert_float_equal(pg[i], want_pg[i], 1e-5);
  }
  /* Truncation at t=0 of b=0 with V(final) = 2: the trace is cut there and the step
   * bootstraps from 2: δ = 1 + 0.9·2 − 0.5 = 2.3 = v − V = A^pg. Later steps unchanged. */
  uint8_t trunc[6] = {1, 0, 0, 0, 0, 0};
  float fin[6] = {2, 0, 0, 0, 0, 0};
  assert_int_equal(vtrace(3, 2, log_rho, disc, rew, val, trunc, fin, 1, 1, 1, vs, pg, &err), 0);
  assert_float_equal(vs[0], 2.8f, 1e-5);
  assert_float_equal(pg[0], 2.3f, 1e-5);
  assert_float_equal(vs[1], 2.22575f, 1e-5);
  assert_float_equal(vs[2], 1.5f, 1e-5);
  /* ρ̄ above the ratios: ρ = π/μ unclipped; t=2 of b=0 with ρ̄ = 3 is unchanged (ratio 1)
   * but t=0 of b=0 (ratio 2) doubles its δ: 2 · 1.4 + 0.9 · 1 · 0.5 = 3.25. */
  assert_int_equal(vtrace(3, 2, log_rho, disc, rew, val, NULL, NULL, 3, 1, 3, vs, pg, &err), 0);
  assert_float_equal(vs[0] - val[0], 3.25f, 1e-5);
  assert_float_equal(pg[0], 2 * 1.85f, 1e-5);
}

/* Eq. 1 literally: v_s = V(x_s) + Σ_{t=s}^{T−1} (Π_{i<t} γ_i c_i) δ_t, over random data
 * with terminations inside the unroll and ratios on both sides of the bars. */
static void test_vtrace_matches_eq1(void **state) {
  enum { T = 7, B = 3 };
  shoal_rng rng;
  shoal_rng_seed(&rng, 11);
  float log_rho[T * B], disc[T * B], rew[T * B], val[(T + 1) * B], vs[T * B], pg[T * B];
  for (int i = 0; i < T * B; i++) {
    log_rho[i] = (float)(shoal_rng_uniform(&rng) * 2 - 1);
    disc[i] = shoal_rng_uniform(&rng) < 0.15 ? 0.0f : 0.95f;
    rew[i] = (float)shoal_rng_normal(&rng);
  }
  for (int i = 0; i < (T + 1) * B; i++) val[i] = (float)shoal_rng_normal(&rng);
  const float rho_bar = 1.2f, c_bar = 0.9f, pg_bar = 1.1f;
  shoal_error err = {0};
  assert_int_equal(
      vtrace(T, B, log_rho, disc, rew, val, NULL, NULL, rho_bar, c_bar, pg_bar, vs, pg, &err), 0);
  double ref_vs[T + 1][B];
  for (int b = 0; b < B; b++) {
    for (int s = 0; s < T; s++) {
      double sum = 0, coef = 1;
      for (int t = s; t < T; t++) {
        int i = t * B + b;
        double ratio = exp(log_rho[i]);
        double delta = fmin(rho_bar, ratio) * (rew[i] + disc[i] * val[i + B] - val[i]);
        sum += coef * delta;
        coef *= disc[i] * fmin(c_bar, ratio);
      }
      ref_vs[s][b] = val[s * B + b] + sum;
      assert_float_equal(vs[s * B + b], ref_vs[s][b], 1e-4);
    }
    ref_vs[T][b] = val[T * B + b];
    for (int s = 0; s < T; s++) {
      int i = s * B + b;
      double ratio = exp(log_rho[i]);
      double want = fmin(pg_bar, ratio) * (rew[i] + disc[i] * ref_vs[s + 1][b] - val[i]);
      assert_float_equal(pg[i], want, 1e-4);
    }
  }
}

/* On-policy (π = μ, ρ̄ = c̄ = 1): v_s is the n-step return bootstrapped from V(x_T),
 * cut at terminations, and equals GAE(λ = 1)'s return. */
static void test_vtrace_on_policy_limit(void **state) {
  enum { T = 9, B = 2 };
  shoal_rng rng;
  shoal_rng_seed(&rng, 5);
  float log_rho[T * B] = {0}, disc[T * B], rew[T * B], val[(T + 1) * B], vs[T * B], pg[T * B];
  float adv[T * B], ret[T * B];
  for (int i = 0; i < T * B; i++) {
    disc[i] = (i == 4 * B) ? 0.0f : 0.99f; /* b=0 terminates at t=4 */
    rew[i] = (float)(shoal_rng_uniform(&rng) * 2);
  }
  for (int i = 0; i < (T + 1) * B; i++) val[i] = (float)shoal_rng_normal(&rng);
  shoal_error err = {0};
  assert_int_equal(vtrace(T, B, log_rho, disc, rew, val, NULL, NULL, 1, 1, 1, vs, pg, &err), 0);
  assert_int_equal(gae(T, B, disc, rew, val, NULL, NULL, 1.0f, adv, ret, &err), 0);
  for (int b = 0; b < B; b++)
    for (int s = 0; s < T; s++) {
      double g = 0, coef = 1;
      int t = s;
      for (; t < T; t++) {
        g += coef * rew[t * B + b];
        coef *= disc[t * B + b];
        if (coef == 0) break;
      }
      if (t == T) g += coef * val[T * B + b]; /* bootstrap only if no termination */
      assert_float_equal(vs[s * B + b], g, 1e-4);
      assert_float_equal(ret[s * B + b], g, 1e-4);
      assert_float_equal(adv[s * B + b], g - val[s * B + b], 1e-4);
    }
}

/* GAE(λ = 0.8, γ = 0.9), T = 3, r = 1, V = [1, 2, 3 | 4], truncated at t=0 with V(final)
 * = 5, terminated at t=2:
 *   t=2: δ = 1 − 3 = −2, A = −2
 *   t=1: δ = 1 + 0.9·3 − 2 = 1.7, A = 1.7 + 0.9·0.8·(−2) = 0.26
 *   t=0: cut, δ = 1 + 0.9·5 − 1 = 4.5, A = 4.5
 * Without the truncation, t=0: δ = 1 + 1.8 − 1 = 1.8, A = 1.8 + 0.72·0.26 = 1.9872. */
static void test_gae_by_hand(void **state) {
  float disc[3] = {0.9f, 0.9f, 0}, rew[3] = {1, 1, 1}, val[4] = {1, 2, 3, 4};
  uint8_t trunc[3] = {1, 0, 0};
  float fin[3] = {5, 0, 0}, adv[3], ret[3];
  shoal_error err = {0};
  assert_int_equal(gae(3, 1, disc, rew, val, trunc, fin, 0.8f, adv, ret, &err), 0);
  assert_float_equal(adv[2], -2.0f, 1e-6);
  assert_float_equal(adv[1], 0.26f, 1e-6);
  assert_float_equal(adv[0], 4.5f, 1e-6);
  assert_float_equal(ret[0], 5.5f, 1e-6);
  assert_float_equal(ret[1], 2.26f, 1e-6);
  assert_float_equal(ret[2], 1.0f, 1e-6);
  assert_int_equal(gae(3, 1, disc, rew, val, NULL, NULL, 0.8f, adv, NULL, &err), 0);
  assert_float_equal(adv[0], 1.9872f, 1e-5);
  /* λ = 0: one-step TD errors. */
  assert_int_equal(gae(3, 1, disc, rew, val, NULL, NULL, 0.0f, adv, ret, &err), 0);
  assert_float_equal(adv[0], 1.8f, 1e-6);
  assert_float_equal(adv[1], 1.7f, 1e-6);
}

static void test_bad_input(void **state) {
  float log_rho[2] = {0, 0}, disc[2] = {0.9f, 0.9f}, rew[2] = {1, NAN}, val[3] = {0, 0, 0};
  float vs[2], pg[2], adv[2];
  shoal_error err = {0};
  assert_int_equal(vtrace(2, 1, log_rho, disc, rew, val, NULL, NULL, 1, 1, 1, vs, pg, &err),
                   SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "t=1"));
  assert_int_equal(gae(2, 1, disc, rew, val, NULL, NULL, 0.9f, adv, NULL, &err), SHOAL_ENAN);
  rew[1] = 0;
  assert_int_equal(vtrace(0, 1, log_rho, disc, rew, val, NULL, NULL, 1, 1, 1, vs, pg, &err),
                   SHOAL_EINVAL);
  assert_int_equal(vtrace(2, 1, log_rho, disc, rew, val, NULL, NULL, 0, 1, 1, vs, pg, &err),
                   SHOAL_EINVAL);
  assert_int_equal(gae(2, 1, disc, rew, val, NULL, NULL, 1.5f, adv, NULL, &err), SHOAL_EINVAL);
  uint8_t trunc[2] = {1, 0};
  assert_int_equal(gae(2, 1, disc, rew, val, trunc, NULL, 0.9f, adv, NULL, &err), SHOAL_EINVAL);
  val[2] = INFINITY;
  assert_int_equal(gae(2, 1, disc, rew, val, NULL, NULL, 0.9f, adv, NULL, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "bootstrap"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vtrace_by_hand),
      cmocka_unit_test(test_vtrace_matches_eq1),
      cmocka_unit_test(test_vtrace_on_policy_limit),
      cmocka_unit_test(test_gae_by_hand),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
