/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_pbt.c — population-based training's arithmetic (cli/pbt.c): truncation
 * selection picks the bottom quarter to copy the top quarter, explored values move by
 * x0.8 / x1.25 within their bounds or are drawn afresh at the resample rate, list values
 * move to a neighbour, and the settings survive the trial header they travel in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/pbt.h"

static pbt_param range(const char *key, double lo, double hi, bool lg, bool integer) {
  pbt_param p = {.range = true, .min = lo, .max = hi, .log = lg, .integer = integer};
  snprintf(p.key, sizeof p.key, "%s", key);
  return p;
}

static void test_choose_leader(void **state) {
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  /* 8 members: the bottom 2 copy one of the top 2 */
  const double s[8] = {5, 9, 1, 7, 3, 8, 2, 6};
  int picked[8] = {0};
  for (int k = 0; k < 400; k++)
    for (int self = 0; self < 8; self++) {
      int l = pbt_choose_leader(s, 8, self, 0.25, false, &rng);
      if (self == 2 || self == 6) {
        assert_true(l == 1 || l == 5);
        picked[l]++;
      } else {
        assert_int_equal(l, -1);
      }
    }
  /* both of the top two are drawn, about evenly */
  assert_true(picked[1] > 300 && picked[5] > 300);
  /* minimising: the roles swap */
  assert_int_equal(pbt_choose_leader(s, 8, 1, 0.25, true, &rng) >= 0, 1);
  int l = pbt_choose_leader(s, 8, 1, 0.25, true, &rng);
  assert_true(l == 2 || l == 6);
  /* until every member has a score nobody copies: the last of two scored is not the
   * last of the population */
  const double partial[4] = {NAN, 4, NAN, 2};
  assert_int_equal(pbt_choose_leader(partial, 4, 3, 0.25, false, &rng), -1);
  assert_int_equal(pbt_choose_leader(partial, 4, 0, 0.25, false, &rng), -1);
  const double full[4] = {3, 4, 5, 2};
  assert_int_equal(pbt_choose_leader(full, 4, 3, 0.25, false, &rng), 2);
  /* a tie with the leader copies nothing */
  const double tie[4] = {3, 3, 3, 3};
  for (int self = 0; self < 4; self++)
    assert_int_equal(pbt_choose_leader(tie, 4, self, 0.25, false, &rng), -1);
  /* two members at truncation 0.25: the worse copies the better */
  const double two[2] = {1, 2};
  assert_int_equal(pbt_choose_leader(two, 2, 0, 0.25, false, &rng), 1);
  assert_int_equal(pbt_choose_leader(two, 2, 1, 0.25, false, &rng), -1);
}

static void test_explore_range(void **state) {
  shoal_rng rng;
  shoal_rng_seed(&rng, 2);
  pbt_param lr = range("impala.lr", 1e-4, 1e-2, true, false);
  int down = 0, up = 0, fresh = 0;
  for (int k = 0; k < 2000; k++) {
    char out[64], how[16];
    pbt_explore(&lr, "0.001", 0.25, &rng, out, sizeof out, how, sizeof how);
    double x = atof(out);
    assert_true(x >= 1e-4 && x <= 1e-2);
    if (!strcmp(how, "x0.8")) {
      assert_true(fabs(x - 0.0008) < 1e-12);
      down++;
    } else if (!strcmp(how, "x1.25")) {
      assert_true(fabs(x - 0.00125) < 1e-12);
      up++;
    } else {
      assert_string_equal(how, "resampled");
      fresh++;
    }
  }
  /* resample 0.25: about 500 draws; the rest split evenly */
  assert_true(fresh > 400 && fresh < 600);
  assert_true(down > 600 && up > 600);
  /* at the bounds the value is clipped, not pushed out */
  for (int k = 0; k < 50; k++) {
    char out[64], how[16];
    pbt_explore(&lr, "0.01", 0, &rng, out, sizeof out, how, sizeof how);
    assert_true(atof(out) <= 1e-2 && atof(out) >= 0.008 - 1e-12);
    pbt_explore(&lr, "0.0001", 0, &rng, out, sizeof out, how, sizeof how);
    assert_true(atof(out) >= 1e-4 && atof(out) <= 0.000125 + 1e-12);
  }
  /* an integer range rounds; a value that is no number is drawn afresh */
  pbt_param n = range("impala.unroll", 5, 40, false, true);
  char out[64], how[16];
  pbt_explore(&n, "10", 0, &rng, out, sizeof out, how, sizeof how);
  assert_true(!strcmp(out, "8") || !strcmp(out, "13"));
  pbt_explore(&n, "ten", 0, &rng, out, sizeof out, how, sizeof how);
  assert_string_equal(how, "resampled");
  assert_true(atoi(out) >= 5 && atoi(out) <= 40);
  /* draws stay in the range, log ranges spread over the decades */
  int low_decade = 0;
  for (int k = 0; k < 1000; k++) {
    pbt_draw(&lr, &rng, out, sizeof out);
    double x = atof(out);
    assert_true(x >= 1e-4 && x <= 1e-2);
    low_decade += x < 1e-3;
  }
  assert_true(low_decade > 400 && low_decade < 600);
}

static void test_explore_list(void **state) {
  shoal_rng rng;
  shoal_rng_seed(&rng, 3);
  pbt_param p = {.range = false, .nchoices = 3};
  snprintf(p.key, sizeof p.key, "ppo.clip");
  snprintf(p.choices[0], sizeof p.choices[0], "0.1");
  snprintf(p.choices[1], sizeof p.choices[1], "0.2");
  snprintf(p.choices[2], sizeof p.choices[2], "0.3");
  int seen[3] = {0};
  for (int k = 0; k < 300; k++) {
    char out[64], how[16];
    pbt_explore(&p, "0.2", 0, &rng, out, sizeof out, how, sizeof how);
    assert_true(!strcmp(out, "0.1") || !strcmp(out, "0.3"));
    seen[!strcmp(out, "0.3") ? 2 : 0]++;
    pbt_explore(&p, "0.3", 0, &rng, out, sizeof out, how, sizeof how);
    assert_true(!strcmp(out, "0.2") || !strcmp(out, "0.3")); /* clipped at the end */
    pbt_explore(&p, "0.7", 0, &rng, out, sizeof out, how, sizeof how);
    assert_string_equal(how, "resampled"); /* not a choice */
  }
  assert_true(seen[0] > 100 && seen[2] > 100);
}

static void test_spec_round_trip(void **state) {
  pbt_spec s = {.population = 8,
                .rounds = 12,
                .ready = 250000,
                .truncation = 0.25,
                .resample = 0.1,
                .seed = 7,
                .nparams = 2};
  s.params[0] = range("impala.lr", 1e-4, 3e-3, true, false);
  s.params[1] = (pbt_param){.range = false, .nchoices = 2};
  snprintf(s.params[1].key, sizeof s.params[1].key, "impala.batch");
  snprintf(s.params[1].choices[0], sizeof s.params[1].choices[0], "16");
  snprintf(s.params[1].choices[1], sizeof s.params[1].choices[1], "32");
  char text[4096];
  int w = snprintf(text, sizeof text, "# shoal-trial 1\n# pbt: member=3 round=2\n");
  assert_true(pbt_spec_format(&s, text + w, sizeof text - (size_t)w) > 0);
  strcat(text, "algo: impala\n");
  pbt_spec b;
  shoal_error err = {0};
  assert_int_equal(pbt_spec_parse(text, &b, &err), 0);
  assert_int_equal(b.population, 8);
  assert_int_equal(b.rounds, 12);
  assert_int_equal(b.ready, 250000);
  assert_true(b.truncation == 0.25 && b.resample == 0.1 && b.seed == 7);
  assert_int_equal(b.nparams, 2);
  assert_true(b.params[0].range && b.params[0].log && b.params[0].min == 1e-4);
  assert_true(b.params[0].max == 3e-3);
  assert_false(b.params[1].range);
  assert_int_equal(b.params[1].nchoices, 2);
  assert_string_equal(b.params[1].choices[1], "32");
  /* too small a buffer, and damaged or missing lines, are said */
  char tiny[40];
  assert_int_equal(pbt_spec_format(&s, tiny, sizeof tiny), -1);
  assert_int_equal(pbt_spec_parse("algo: impala\n", &b, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "pbt-spec"));
  char bad[4096];
  snprintf(bad, sizeof bad, "%s", text);
  char *r = strstr(bad, " range ");
  memcpy(r, " rangx ", 7);
  assert_int_equal(pbt_spec_parse(bad, &b, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "damaged"));
  snprintf(bad, sizeof bad, "%s", text);
  memcpy(strstr(bad, "truncation=0.25"), "truncation=0.95", 15);
  assert_int_equal(pbt_spec_parse(bad, &b, &err), SHOAL_EFORMAT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_choose_leader),
      cmocka_unit_test(test_explore_range),
      cmocka_unit_test(test_explore_list),
      cmocka_unit_test(test_spec_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
