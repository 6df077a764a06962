/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_onpolicy_train.c — the synchronous trainer on the shipped configs:
 * CartPole-v1 solved (mean greedy return >= 475 over 100 episodes) by PPO with
 * CleanRL's ppo.py settings and by IMPALA within their step budgets; config errors.
 * With --slow (test_onpolicy_train_slow, labelled slow) it runs instead the sampled-
 * policy criterion on CartPole, Pendulum-v1 above −300 and MountainCarContinuous-v0 at
 * 90 or more (the goal reached) with PPO. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/onpolicy_train.h"

static config *load(const char *name, shoal_error *err) {
  int n;
  const cfg_key *schema = onpolicy_schema(&n);
  config *c = config_create(schema, n, err);
  assert_non_null(c);
  const char *src = getenv("SHOAL_SOURCE_DIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/configs/%s", src ? src : ".", name);
  if (config_load_file(c, path, err)) fail_msg("%s: %s", path, err->msg);
  return c;
}

/* Trains the config (with overrides) and checks it solved within its max_env_steps. */
static void solves(const char *name, const char *const *sets, double want) {
  shoal_error err = {0};
  config *c = load(name, &err);
  for (int i = 0; sets && sets[i]; i++) assert_int_equal(config_set(c, sets[i], &err), 0);
  onpolicy_train_config tc;
  assert_int_equal(onpolicy_train_from_config(c, &tc, &err), 0);
  if (!isnan(want)) tc.solve_return = want;
  onpolicy_train_result res;
  int rc = onpolicy_train_sync(&tc, &res, &err);
  if (rc) fail_msg("%s: %s", name, err.msg);
  printf(
      "%s: %s after %lld env steps (budget %lld), %.1f s; eval %.2f ± %.2f (%s), "
      "train return100 %.1f\n",
      name, res.solved ? "solved" : "NOT solved", (long long)res.env_steps,
      (long long)tc.max_env_steps, res.seconds, res.eval_return, res.eval_std,
      tc.eval_greedy ? "greedy" : "sampled", res.train_return100);
  assert_true(res.solved);
  assert_true(res.eval_return >= tc.solve_return);
  assert_true(res.solved_env_steps <= tc.max_env_steps);
  config_destroy(c);
}

static void test_cartpole_ppo(void **state) { solves("cartpole-ppo.yaml", NULL, NAN); }
static void test_cartpole_impala(void **state) { solves("cartpole-impala.yaml", NULL, NAN); }

static void test_slow_runs(void **state) {
  static const char *const sampled[] = {"run.eval_greedy=false", NULL};
  solves("cartpole-ppo.yaml", sampled, NAN);
  solves("cartpole-impala.yaml", sampled, NAN);
  /* The bar for Pendulum: above −300 (the config itself stops at −200). */
  solves("pendulum-ppo.yaml", NULL, -300);
  /* MountainCarContinuous-v0: a greedy mean of 90 or more over 20 episodes within 150k
   * steps (an episode that misses the goal scores below 0, one that reaches it ~93). */
  solves("mountaincar-continuous-ppo.yaml", NULL, 90);
}

static void test_config_errors(void **state) {
  shoal_error err = {0};
  config *c = load("cartpole-ppo.yaml", &err);
  onpolicy_train_config tc;
  assert_int_equal(config_set(c, "algo=a2c", &err), 0);
  assert_int_equal(onpolicy_train_from_config(c, &tc, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "algo"));
  assert_int_equal(config_set(c, "algo=ppo", &err), 0);
  assert_int_equal(config_set(c, "ppo.minibatches=3", &err), 0);
  assert_int_equal(onpolicy_train_from_config(c, &tc, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "minibatches"));
  assert_int_equal(config_set(c, "ppo.minibatches=4", &err), 0);
  assert_int_not_equal(config_set(c, "ppo.bogus=1", &err), 0);
  assert_int_equal(config_set(c, "env.id=NoSuchEnv-v0", &err), 0);
  assert_int_equal(onpolicy_train_from_config(c, &tc, &err), 0);
  onpolicy_train_result res;
  assert_int_equal(onpolicy_train_sync(&tc, &res, &err), SHOAL_ENOENT);
  assert_int_equal(res.env_steps, 0);
  config_destroy(c);
  /* Every shipped on-policy config loads and checks. */
  const char *names[] = {"cartpole-ppo.yaml",
                         "cartpole-impala.yaml",
                         "pendulum-ppo.yaml",
                         "mountaincar-continuous-ppo.yaml",
                         "cartpole-novel-impala-lstm.yaml",
                         "cartpole-novel-ppo-lstm.yaml",
                         "minatar-breakout-impala.yaml",
                         "minatar-asterix-impala.yaml",
                         "minatar-freeway-impala.yaml",
                         "minatar-seaquest-impala.yaml",
                         "minatar-space_invaders-impala.yaml"};
  for (int i = 0; i < (int)(sizeof names / sizeof *names); i++) {
    c = load(names[i], &err);
    assert_int_equal(onpolicy_check(c, &err), 0);
    config_destroy(c);
  }
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_errors),
      cmocka_unit_test(test_cartpole_ppo),
      cmocka_unit_test(test_cartpole_impala),
  };
  const struct CMUnitTest slow[] = {cmocka_unit_test(test_slow_runs)};
  if (argc > 1 && !strcmp(argv[1], "--slow")) return cmocka_run_group_tests(slow, NULL, NULL);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
