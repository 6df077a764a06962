/* shoal-train-sync: trains PPO or IMPALA synchronously in one process from an on-policy
 * config (configs/NAME-ppo.yaml, NAME-impala.yaml), for comparison with CleanRL.
 *
 *   shoal-train-sync configs/cartpole-ppo.yaml [--set key=value ...] [--quiet]
 *
 * Prints progress lines, then one summary line; exits 0 when the run ended solved (or
 * had no solve threshold), 1 when it did not solve, 2 on an error. */
#include <stdio.h>
#include <string.h>

#include "run/onpolicy_train.h"

int main(int argc, char **argv) {
  shoal_error err = {0};
  if (argc < 2 || !strcmp(argv[1], "--help")) {
    fprintf(stderr, "usage: %s CONFIG.yaml [--set key=value ...] [--quiet]\n", argv[0]);
    int n;
    const cfg_key *k = onpolicy_schema(&n);
    for (int i = 0; i < n; i++)
      fprintf(stderr, "  %-28s %-10s %s\n", k[i].name, k[i].def, k[i].help);
    return 2;
  }
  int n;
  const cfg_key *schema = onpolicy_schema(&n);
  config *cfg = config_create(schema, n, &err);
  if (!cfg || config_load_file(cfg, argv[1], &err)) goto fail;
  bool quiet = false;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--quiet")) {
      quiet = true;
    } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
      if (config_set(cfg, argv[++i], &err)) goto fail;
    } else {
      shoal_error_set(&err, SHOAL_EINVAL, "unknown argument '%s'", argv[i]);
      goto fail;
    }
  }
  onpolicy_train_config tc;
  if (onpolicy_train_from_config(cfg, &tc, &err)) goto fail;
  tc.log = quiet ? NULL : stdout;
  onpolicy_train_result res;
  int rc = onpolicy_train_sync(&tc, &res, &err);
  if (rc) goto fail;
  printf(
      "%s %s: %s after %lld env steps, %lld updates, %.1f s; eval %.2f ± %.2f over %d "
      "episodes (%s); train return100 %.1f\n",
      tc.use_impala ? "impala" : "ppo", tc.env_id, res.solved ? "solved" : "stopped",
      (long long)(res.solved ? res.solved_env_steps : res.env_steps), (long long)res.updates,
      res.seconds, res.eval_return, res.eval_std, tc.eval_episodes,
      tc.eval_greedy ? "greedy" : "sampled", res.train_return100);
  config_destroy(cfg);
  return res.solved || tc.solve_return != tc.solve_return ? 0 : 1;
fail:
  fprintf(stderr, "shoal-train-sync: %s\n", err.msg[0] ? err.msg : "failed");
  config_destroy(cfg);
  return 2;
}
