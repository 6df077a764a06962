/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/faults/test_faults_lease.c — one learner per run, enforced by the run's lease in
 * the store, on the file store and on MongoDB (the tests' stand-in, or
 * $SHOAL_TEST_MONGO_URI):
 *  - a second learner on a running run is refused, naming the first (its pid), and
 *    `shoal run --resume` of that run ends at once with the refusal (no restarts),
 *  - a learner started while the run's learner is stopping waits for it and resumes
 *    from its final snapshot (the version the first says it ended at),
 *  - after a learner is killed with SIGKILL, a --resume takes the run over.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <time.h>

#include "tests/mongo_test.h"
#include "tests/proc_util.h"
#include "tests/faults/faults_util.h"

/* Runs the whole story on the store at uri, run id run. */
static void one_learner_per_run(const char *uri, const char *run) {
  char cfg[512];
  snprintf(cfg, sizeof cfg, "%s/%s.yaml", wf_dir, run);
  fu_write_config(cfg, uri, 1, 30, "");
  fu_init(cfg, run);
  wf_proc a, c;
  fu_learner_start(&a, cfg, run, 0, false);

  /* A second learner: refused at once, naming the first. */
  char bin[4200], want[128];
  snprintf(bin, sizeof bin, "%s/bin/shoal-learner", getenv("SHOAL_BINARY_DIR"));
  char *argv[] = {bin, "--config", cfg, "--run", (char *)run, "--resume", NULL};
  int rc;
  char *out = wf_run(argv, 60, &rc);
  snprintf(want, sizeof want, "being trained by another learner (pid %d", (int)a.pid);
  if (rc == 0 || !strstr(out, want)) fail_msg("second learner: status %d:\n%s", rc, out);
  free(out);
  char *rargv[] = {wf_shoal, "run", "--resume", (char *)run, "--store", (char *)uri, NULL};
  out = wf_run(rargv, 60, &rc);
  if (rc == 0 || !strstr(out, want) || strstr(out, "restarting"))
    fail_msg("shoal run --resume of a held run: status %d:\n%s", rc, out);
  free(out);

  /* Stop the first and start the next at once: it waits, then resumes from the first's
   * final snapshot. */
  kill(a.pid, SIGTERM);
  wf_proc b;
  fu_learner_start(&b, cfg, run, 0, true);
  assert_int_equal(wf_wait(&a, 60), 0);
  char *a_out = wf_slurp(a.out, NULL), *done = strstr(a_out, "\"event\":\"done\"");
  assert_non_null(done);
  long long version = (long long)fu_json(done, "version");
  char *b_out = wf_wait_text(b.out, "resumed run", 30);
  snprintf(want, sizeof want, "resumed run %s at version %lld,", run, version);
  if (!strstr(b_out, want)) fail_msg("wanted '%s' in:\n%s", want, b_out);
  free(a_out), free(b_out);

  /* Killed: the next --resume takes the run over. */
  kill(b.pid, SIGKILL);
  wf_wait(&b, 30);
  fu_learner_start(&c, cfg, run, 0, true);
  kill(c.pid, SIGTERM);
  assert_int_equal(wf_wait(&c, 60), 0);
  out = wf_slurp(c.out, NULL);
  assert_non_null(strstr(out, "\"event\":\"done\""));
  free(out);
}

static void test_lease_file(void **state) {
  char uri[400];
  snprintf(uri, sizeof uri, "file://%s/runs", wf_dir);
  one_learner_per_run(uri, "lease1");
}

static void test_lease_mongo(void **state) {
  char uri[1024];
  int rc = mongo_test_uri(uri, sizeof uri, "shoal_test_faults_lease");
  if (rc == 77) skip();
  assert_int_equal(rc, 0);
  one_learner_per_run(uri, "lease2");
}

static int setup(void **state) { return wf_setup("faults-lease"); }
static int teardown(void **state) { return wf_teardown(); }

int main(int argc, char **argv) {
  const struct CMUnitTest all[] = {
      cmocka_unit_test_teardown(test_lease_file, fu_kill_all),
      cmocka_unit_test_teardown(test_lease_mongo, fu_kill_all),
  };
  /* The MongoDB case is a ctest of its own, beside the store server the tests start. */
  if (argc > 1)
    cmocka_set_test_filter(argv[1]);
  else
    cmocka_set_skip_filter("*_mongo");
  return cmocka_run_group_tests_name("faults_lease", all, setup, teardown);
}
