/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_cli_help.c — help a new user can find: `--help` on every command and
 * program exits 0 with its usage on stdout; `shoal config keys` lists every key of the
 * schemas themselves; a config whose algo is not shoal's is named as such, by `shoal
 * run` and by shoal-train-sync. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "run/run.h"
#include "tests/proc_util.h"

static char *run_cmd(char *const argv[], int *rc) { return wf_run(argv, 60, rc); }

static void test_every_command_has_help(void **state) {
  static const char *cmds[] = {"run",   "eval",   "init",   "config", "dataset",
                               "media", "status", "set",    "plot",   "sweep",
                               "pbt",   "worker", "tboard", "import", "envs"};
  int rc;
  char *argv[] = {wf_shoal, "--help", NULL};
  char *out = run_cmd(argv, &rc);
  assert_int_equal(rc, 0);
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    char want[64];
    snprintf(want, sizeof want, "  %s ", cmds[i]);
    if (!strstr(out, want)) fail_msg("shoal --help does not list %s:\n%s", cmds[i], out);
  }
  free(out);
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    char *a[] = {wf_shoal, (char *)cmds[i], "--help", NULL}, want[64];
    out = run_cmd(a, &rc);
    snprintf(want, sizeof want, "usage: shoal %s", cmds[i]);
    if (rc != 0 || !strstr(out, want)) /* mongoc may say a word on stderr first */
      fail_msg("shoal %s --help: status %d, output:\n%s", cmds[i], rc, out);
    free(out);
  }
  char *bad[] = {wf_shoal, "no-such-command", NULL};
  out = run_cmd(bad, &rc);
  assert_int_equal(rc, 2);
  assert_non_null(strstr(out, "no command 'no-such-command'"));
  free(out);
}

static void test_programs_have_help(void **state) {
  static const char *progs[] = {"shoal-learner", "shoal-onpolicy-learner", "shoal-actor",
                                "shoal-onpolicy-actor", "shoal-train-sync"};
  for (size_t i = 0; i < sizeof progs / sizeof *progs; i++) {
    char bin[4200];
    snprintf(bin, sizeof bin, "%s/bin/%s", getenv("SHOAL_BINARY_DIR"), progs[i]);
    char *a[] = {bin, "--help", NULL};
    int rc;
    char *out = run_cmd(a, &rc);
    if (rc != 0 || !strstr(out, "usage: "))
      fail_msg("%s --help: status %d, output:\n%s", progs[i], rc, out);
    free(out);
  }
}

/* Every key of the schema is listed, and an IMPALA listing leaves PPO's keys out; in the
 * plain listing and in the Markdown one. */
static void check_keys(const char *algo, const cfg_key *keys, int n, const char *other) {
  char *a[] = {wf_shoal, "config", "keys", (char *)algo, NULL};
  int rc;
  char *out = run_cmd(a, &rc);
  assert_int_equal(rc, 0);
  for (int i = 0; i < n; i++) {
    char want[96];
    snprintf(want, sizeof want, "\n%s ", keys[i].name);
    bool listed = strstr(out, want) != NULL;
    bool wanted = !other || strncmp(keys[i].name, other, strlen(other));
    if (listed != wanted)
      fail_msg("shoal config keys %s: %s is %slisted", algo, keys[i].name, listed ? "" : "not ");
  }
  free(out);
  /* --markdown: one table row per key, "| `name` |", under the same rule. */
  char *m[] = {wf_shoal, "config", "keys", "--markdown", (char *)algo, NULL};
  out = run_cmd(m, &rc);
  assert_int_equal(rc, 0);
  char head[64];
  snprintf(head, sizeof head, "`algo: %s`\n", algo);
  if (!strstr(out, head)) fail_msg("shoal config keys --markdown %s: no heading:\n%s", algo, out);
  for (int i = 0; i < n; i++) {
    char want[96];
    snprintf(want, sizeof want, "\n| `%s` |", keys[i].name);
    bool listed = strstr(out, want) != NULL;
    bool wanted = !other || strncmp(keys[i].name, other, strlen(other));
    if (listed != wanted)
      fail_msg("shoal config keys --markdown %s: %s is %slisted", algo, keys[i].name,
               listed ? "" : "not ");
  }
  free(out);
}

static void test_config_keys_lists_the_schemas(void **state) {
  int n;
  const cfg_key *k = apex_schema(&n);
  check_keys("apex", k, n, NULL);
  k = onpolicy_schema(&n);
  check_keys("impala", k, n, "ppo.");
  check_keys("ppo", k, n, "impala.");
}

static void test_unknown_algo_is_named(void **state) {
  char path[512];
  snprintf(path, sizeof path, "%s/sac.yaml", wf_dir);
  FILE *f = fopen(path, "w");
  fprintf(f, "algo: sac\nrun:\n  eval_every_s: 5\n");
  fclose(f);
  int rc;
  char *a[] = {wf_shoal, "run", path, NULL};
  char *out = run_cmd(a, &rc);
  assert_int_not_equal(rc, 0);
  if (!strstr(out, "algo 'sac' is not one of apex, impala, ppo")) fail_msg("shoal run: %s", out);
  free(out);
  char bin[4200], apex[4200];
  snprintf(bin, sizeof bin, "%s/bin/shoal-train-sync", getenv("SHOAL_BINARY_DIR"));
  snprintf(apex, sizeof apex, "%s/configs/cartpole-apex.yaml", wf_src);
  char *b[] = {bin, apex, NULL};
  out = run_cmd(b, &rc);
  assert_int_equal(rc, 2);
  if (!strstr(out, "algo 'apex' is not impala or ppo")) fail_msg("shoal-train-sync: %s", out);
  free(out);
}

/* Runs argv, expects exit status want_rc and each of the NULL-ended texts in the output,
 * and no "store: store:". */
static void expect_says(char *const argv[], int want_rc, ...) {
  int rc;
  char *out = run_cmd(argv, &rc);
  if (rc != want_rc) fail_msg("%s %s: status %d, not %d:\n%s", argv[1], argv[2], rc, want_rc, out);
  va_list ap;
  va_start(ap, want_rc);
  for (const char *t; (t = va_arg(ap, const char *));)
    if (!strstr(out, t)) fail_msg("%s %s: no '%s' in:\n%s", argv[1], argv[2], t, out);
  va_end(ap);
  if (strstr(out, "store: store:")) fail_msg("%s %s: a doubled prefix:\n%s", argv[1], argv[2], out);
  free(out);
}

/* A mistake is named with what to do about it, not answered with the usage alone. */
static void test_mistakes_are_named(void **state) {
  char *e0[] = {wf_shoal, "eval", "r1", "--episodes", "0", NULL};
  expect_says(e0, 2, "--episodes '0': needs a whole number from 1 to 100000", NULL);
  char *e1[] = {wf_shoal, "eval", "r1", "--episodes", "-3", NULL};
  expect_says(e1, 2, "--episodes '-3'", NULL);
  char *e2[] = {wf_shoal, "eval", "r1", "--episodes", "abc", NULL};
  expect_says(e2, 2, "--episodes 'abc'", NULL);
  char *e3[] = {wf_shoal, "eval", "r1", "--frames", "7", NULL};
  expect_says(e3, 2, "--frames 7: needs an even number", NULL);
  /* No port: gRPC would quietly try 443. */
  char *s0[] = {wf_shoal, "status", "localhost", NULL};
  expect_says(s0, 2, "'localhost' names no port", "HOST:PORT", NULL);
  char *s1[] = {wf_shoal, "set", "localhost", "dqn.lr=0.001", NULL};
  expect_says(s1, 2, "'localhost' names no port", NULL);
  char *s2[] = {wf_shoal, "set", "localhost:1", "dqn.lr", NULL};
  expect_says(s2, 2, "'dqn.lr' is not KEY=VALUE", NULL);
  char *v0[] = {wf_shoal, "run", "x.yaml", "--set", NULL};
  expect_says(v0, 2, "--set needs a value: --set KEY=VALUE", NULL);
  char *v1[] = {wf_shoal, "eval", "r1", "--set", NULL};
  expect_says(v1, 2, "--set needs a value: --set KEY=VALUE", NULL);
  char *u0[] = {wf_shoal, "eval", "r1", "--bogus", NULL};
  expect_says(u0, 2, "unknown argument '--bogus'", NULL);
  /* A store's own message is not prefixed twice. */
  char *b0[] = {wf_shoal, "eval", "r1", "--store", "bogus://x", NULL};
  expect_says(b0, 1, "store: unknown URI scheme", NULL);
  char *b1[] = {wf_shoal, "plot", "r1", "--store", "bogus://x", NULL};
  expect_says(b1, 1, "store: unknown URI scheme", NULL);

  /* A second run under a name that exists points at --resume; nothing is started. */
  char cfg[4200], store[400];
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  snprintf(store, sizeof store, "store.uri=file://%s/store", wf_dir);
  char *i0[] = {wf_shoal, "init", cfg, "--set", "run.name=twice", "--set", store, NULL};
  expect_says(i0, 0, "run twice recorded", NULL);
  char *r0[] = {wf_shoal, "run", cfg, "--set", "run.name=twice", "--set", store, NULL};
  expect_says(r0, 1, "a run named twice exists", "`shoal run --resume twice --store URI`",
              "another name", NULL);
}

static int setup(void **state) { return wf_setup("cli-help"); }
static int teardown(void **state) { return wf_teardown(); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_command_has_help),
      cmocka_unit_test(test_programs_have_help),
      cmocka_unit_test(test_config_keys_lists_the_schemas),
      cmocka_unit_test(test_unknown_algo_is_named),
      cmocka_unit_test(test_mistakes_are_named),
  };
  return cmocka_run_group_tests_name("cli_help", tests, setup, teardown);
}
