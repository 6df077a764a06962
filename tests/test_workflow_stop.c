/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_workflow_stop.c — how `shoal run` stops (a file store, on loopback, runs of
 * a few seconds): a second Ctrl-C kills the children: the run says so and exits 130,
 * not 0. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "proc_util.h"

static char g_store_set[512];

static int setup(void **state) {
  if (wf_setup("stop")) return -1;
  snprintf(g_store_set, sizeof g_store_set, "store.uri=file://%s/runs", wf_dir);
  return 0;
}
static int teardown(void **state) { return wf_teardown(); }

/* Starts `shoal run configs/<config>.yaml` as run name for at most max_seconds. */
static void start(wf_proc *p, const char *config, const char *name, const char *max_seconds) {
  static char cfg[4200], run_set[96], max_set[96];
  snprintf(cfg, sizeof cfg, "%s/configs/%s.yaml", wf_src, config);
  snprintf(run_set, sizeof run_set, "run.name=%s", name);
  snprintf(max_set, sizeof max_set, "run.max_seconds=%s", max_seconds);
  char *argv[] = {wf_shoal, "run",
                  cfg,      "--no-tensorboard",
                  "--set",  g_store_set,
                  "--set",  run_set,
                  "--set",  max_set,
                  "--set",  "run.solve_return=0",
                  "--set",  "learner.device=cpu",
                  NULL};
  wf_start(p, argv);
}

static void test_second_ctrl_c_kills_and_fails(void **state) {
  wf_proc p;
  start(&p, "cartpole-apex", "int2", "60");
  free(wf_wait_text(p.out, "     1s  steps", 60));
  /* Two signals, far enough apart to be two (the first is handled at once), well within
   * the stop the first one began. */
  kill(p.pid, SIGINT);
  usleep(20000);
  kill(p.pid, SIGINT);
  int rc = wf_wait(&p, 60);
  char *out = wf_slurp(p.out, NULL);
  printf("status %d:\n%s", rc, out);
  assert_int_equal(rc, 130);
  assert_non_null(strstr(out, "shoal: run int2 killed by a second SIGINT"));
  assert_non_null(strstr(out, "shoal run --resume int2"));
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_second_ctrl_c_kills_and_fails),
  };
  return cmocka_run_group_tests_name("workflow_stop", tests, setup, teardown);
}
