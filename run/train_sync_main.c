/* SPDX-License-Identifier: Apache-2.0 */
/* shoal-train-sync: trains PPO or IMPALA synchronously in one process from an on-policy
 * config (configs/NAME-ppo.yaml, NAME-impala.yaml), for comparison with CleanRL.
 *
 *   shoal-train-sync configs/cartpole-ppo.yaml [--set key=value ...] [--quiet]
 *
 * Prints progress lines, then one summary line; exits 0 when the run ended solved (or
 * had no solve threshold), 1 when it did not solve, 2 on an error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/onpolicy_train.h"

/* The first 64 KiB of a config file as text; NULL when it cannot be read (the loader
 * then says why). */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  char *buf = f ? malloc(65537) : NULL;
  size_t n = buf ? fread(buf, 1, 65536, f) : 0;
  if (f) fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

int main(int argc, char **argv) {
  shoal_error err = {0};
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    bool help = argc >= 2;
    fprintf(help ? stdout : stderr,
            "usage: %s CONFIG.yaml [--set key=value ...] [--quiet]\n"
            "  Trains an IMPALA or PPO config (algo: impala|ppo) in this one process, with\n"
            "  one vector env (CleanRL's loop), and prints progress and the final evaluation.\n"
            "  It keeps nothing in a store: distributed training, snapshots and metrics are\n"
            "  `shoal run`'s. The keys: shoal config keys impala|ppo (the run, env, ac,\n"
            "  impala/ppo and train keys are read; actors, learner.listen and store.uri not).\n",
            argv[0]);
    return help ? 0 : 2;
  }
  /* An Ape-X config (or a typo in algo) is named before its keys are checked. */
  char *text = read_text(argv[1]);
  char algo[64];
  if (text && (!algo_yaml_known(text, NULL, 0, algo, sizeof algo) ||
               !algo_yaml_is_onpolicy(text, NULL, 0))) {
    fprintf(stderr,
            "%s: %s: algo '%s' is not impala or ppo (this program trains those; Ape-X "
            "configs run with `shoal run`)\n",
            argv[0], argv[1], algo[0] ? algo : "apex");
    free(text);
    return 2;
  }
  free(text);
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
