/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_workflow_stop.c — how `shoal run` stops (a file store, on loopback, runs of
 * a few seconds):
 *   - at its limit: the actors stop before the learner, which still takes what they
 *     hold, so nothing is dropped and nothing is said about it (Ape-X and IMPALA);
 *   - a terminal's Ctrl-C (SIGINT to the whole process group): the actors are stopped by
 *     the supervisor (SIGTERM) while the learner still serves them, then the learner,
 *     and the summary follows with status 0;
 *   - a second Ctrl-C kills the children: the run says so and exits 130, not 0. */
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

/* Starts `shoal run configs/<config>.yaml` as run name for at most max_seconds (with
 * --log-json when json). */
static void start(wf_proc *p, const char *config, const char *name, const char *max_seconds,
                  bool json) {
  static char cfg[4200], run_set[96], max_set[96];
  snprintf(cfg, sizeof cfg, "%s/configs/%s.yaml", wf_src, config);
  snprintf(run_set, sizeof run_set, "run.name=%s", name);
  snprintf(max_set, sizeof max_set, "run.max_seconds=%s", max_seconds);
  char *argv[] = {wf_shoal,
                  "run",
                  cfg,
                  "--no-tensorboard",
                  "--set",
                  g_store_set,
                  "--set",
                  run_set,
                  "--set",
                  max_set,
                  "--set",
                  "run.solve_return=0",
                  "--set",
                  "learner.device=cpu",
                  json ? "--log-json" : NULL,
                  NULL};
  wf_start(p, argv);
}

/* Whether pid has exited (gone, or a zombie its parent has not reaped yet). */
static bool exited(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return true;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *rp = strrchr(buf, ')');
  return !rp || rp[2] == 'Z' || rp[2] == 'X';
}

/* What an actor says at a stop when it left batches behind or met a learner gone. */
static void assert_no_drop(const char *out) {
  static const char *const said[] = {"still queued", "not sent", "not delivered",
                                     "after the learner had stopped", "unreachable"};
  for (size_t i = 0; i < sizeof said / sizeof *said; i++)
    if (strstr(out, said[i])) fail_msg("an actor said '%s':\n%s", said[i], out);
}

static void test_stop_at_a_limit_drops_nothing(void **state) {
  static const char *const configs[] = {"cartpole-apex", "cartpole-impala"};
  for (int i = 0; i < 2; i++) {
    char name[32];
    snprintf(name, sizeof name, "lim%d", i);
    wf_proc p;
    start(&p, configs[i], name, "2", false);
    int rc = wf_wait(&p, 60);
    char *out = wf_slurp(p.out, NULL);
    printf("%s: status %d:\n%s", configs[i], rc, out);
    assert_int_equal(rc, 0);
    char want[96];
    snprintf(want, sizeof want, "shoal: run %s max_seconds after ", name);
    assert_non_null(strstr(out, want));
    assert_no_drop(out);
    assert_null(strstr(out, "[actor-")); /* a normal stop: nothing from the actors */
    free(out);
  }
}

static void test_terminal_ctrl_c_stops_actors_first(void **state) {
  wf_proc p;
  start(&p, "cartpole-apex", "int1", "60", true);
  free(wf_wait_text(p.out, "\"event\":\"progress\"", 60));
  pid_t learner = wf_find_pid("shoal-learner", "--run int1 "),
        actor[2] = {wf_find_pid("shoal-actor", "--index 0 "),
                    wf_find_pid("shoal-actor", "--index 1 ")};
  assert_true(learner > 0 && actor[0] > 0 && actor[1] > 0);
  kill(-p.pid, SIGINT); /* as a terminal does: the whole foreground process group */
  /* Which exits first, every 1 ms: the actors, while the learner still serves them. */
  bool learner_first = false;
  double t0 = shoal_now_s();
  while (!exited(learner) && shoal_now_s() - t0 < 60) {
    usleep(1000);
  }
  learner_first = !exited(actor[0]) || !exited(actor[1]);
  int rc = wf_wait(&p, 60);
  char *out = wf_slurp(p.out, NULL);
  printf("status %d:\n%s", rc, out);
  assert_int_equal(rc, 0);
  assert_false(learner_first);
  assert_non_null(strstr(out, "shoal: SIGINT received; stopping"));
  /* The learner heard of the stop from the supervisor, not from the terminal. */
  assert_non_null(strstr(out, "{\"event\":\"stopping\",\"reason\":\"signal\","));
  assert_non_null(strstr(out, "\"event\":\"done\",\"reason\":\"signal\""));
  /* None met a learner gone or left a batch behind. */
  assert_no_drop(out);
  free(out);
}

static void test_second_ctrl_c_kills_and_fails(void **state) {
  wf_proc p;
  start(&p, "cartpole-apex", "int2", "60", false);
  free(wf_wait_text(p.out, "     1s  steps", 60));
  /* The first signal begins the stop; another every 20 ms until one is taken as the
   * second (two sent while the first is pending would count once), well within the
   * stop. Until it is reaped, the process's pid stays its own. */
  kill(p.pid, SIGINT);
  for (int i = 0; i < 500; i++) {
    usleep(20000);
    char *now = wf_slurp(p.out, NULL);
    bool seen = strstr(now, "second signal") != NULL;
    free(now);
    if (seen) break;
    kill(p.pid, SIGINT);
  }
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
      cmocka_unit_test(test_stop_at_a_limit_drops_nothing),
      cmocka_unit_test(test_terminal_ctrl_c_stops_actors_first),
      cmocka_unit_test(test_second_ctrl_c_kills_and_fails),
  };
  return cmocka_run_group_tests_name("workflow_stop", tests, setup, teardown);
}
