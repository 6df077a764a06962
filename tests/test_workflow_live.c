/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_workflow_live.c — live tuning of a running learner: `shoal status` prints
 * its Status, `shoal set` changes the learning rate and target period (seen in Status
 * and recorded as hparam/<key> metrics at the env step of the change), and refuses keys
 * outside the whitelist, values outside their bounds and fractional integers, changing
 * nothing. A bounded `shoal run` (run.max_seconds) on loopback. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "envs/envs.h"
#include "store/store.h"
#include "proc_util.h"

static int setup(void **state) { return wf_setup("live"); }
static int teardown(void **state) { return wf_teardown(); }

static double json_field(const char *s, const char *key) {
  char pat[96];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(s, pat);
  return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static void test_set_changes_learning_rate(void **state) {
  char cfg[4200], store_set[400], uri[400];
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", wf_dir);
  snprintf(uri, sizeof uri, "file://%s", wf_dir);
  char *argv[] = {wf_shoal,
                  "run",
                  cfg,
                  "--set",
                  store_set,
                  "--set",
                  "run.name=live1",
                  "--set",
                  "run.solve_return=0",
                  "--set",
                  "run.max_env_steps=0",
                  "--set",
                  "run.max_seconds=120",
                  "--set",
                  "learner.warmup=500",
                  "--set",
                  "learner.snapshot_every_s=0.5",
                  "--set", /* the starting rate, whatever the config's */
                  "dqn.lr=0.0005",
                  NULL};
  wf_proc run;
  wf_start(&run, argv);
  char *out = wf_wait_text(run.out, "learner on ", 60);
  char addr[64];
  const char *p = strstr(out, "learner on ") + strlen("learner on ");
  size_t k = strcspn(p, " ");
  snprintf(addr, sizeof addr, "%.*s", (int)k, p);
  free(out);

  int rc;
  char *a1[] = {wf_shoal, "status", addr, "--interval", "0.3", NULL};
  out = wf_run(a1, 30, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "run live1"));
  assert_non_null(strstr(out, "dqn.lr=0.0005"));
  assert_non_null(strstr(out, "env steps/s"));
  free(out);

  char *a2[] = {wf_shoal, "set", addr, "dqn.lr=0.0001", "dqn.target_period=200", NULL};
  out = wf_run(a2, 30, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "dqn.lr = 0.0001"));
  free(out);

  /* `shoal set` returns once the trainer applied the change: Status shows it at once. */
  char *a3[] = {wf_shoal, "status", addr, "--json", "--interval", "0", NULL};
  out = wf_run(a3, 30, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_true(fabs(json_field(out, "hparam/dqn.lr") - 0.0001) < 1e-12);
  assert_true(json_field(out, "hparam/dqn.target_period") == 200);
  assert_true(json_field(out, "hparam_changes") == 2);
  free(out);

  /* Refusals change nothing. */
  char *a4[] = {wf_shoal, "set", addr, "actor.eps=0.1", NULL};
  out = wf_run(a4, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "'actor.eps' cannot be changed on a running learner"));
  assert_non_null(strstr(out, "--resume"));
  free(out);
  /* A key the config does not have is unknown, not "cannot be changed". */
  char *a4b[] = {wf_shoal, "set", addr, "dqn.batch=3", NULL};
  out = wf_run(a4b, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "'dqn.batch' is not a config key"));
  assert_null(strstr(out, "cannot be changed"));
  free(out);
  char *a5[] = {wf_shoal, "set", addr, "dqn.lr=0.0002", "dqn.lr=100", NULL};
  out = wf_run(a5, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "is outside"));
  free(out);
  char *a6[] = {wf_shoal, "set", addr, "dqn.target_period=2.5", NULL};
  out = wf_run(a6, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "whole number"));
  free(out);
  out = wf_run(a3, 30, &rc);
  assert_int_equal(rc, 0);
  assert_true(fabs(json_field(out, "hparam/dqn.lr") - 0.0001) < 1e-12);
  assert_true(json_field(out, "hparam_changes") == 2);
  free(out);

  /* A learner that crashes is restarted by `shoal run` with the run's config file; it
   * takes the live changes back from the store. */
  pid_t learner = wf_find_pid("shoal-learner", "live1");
  assert_true(learner > 0);
  assert_int_equal(kill(learner, SIGKILL), 0);
  free(wf_wait_text(run.out, "learner restarted on", 60));
  double t0 = shoal_now_s();
  for (;;) {
    out = wf_run(a3, 30, &rc);
    bool up = rc == 0 && json_field(out, "hparam_changes") >= 2;
    if (up) {
      printf("%s", out);
      assert_true(fabs(json_field(out, "hparam/dqn.lr") - 0.0001) < 1e-12);
      assert_true(json_field(out, "hparam/dqn.target_period") == 200);
    }
    free(out);
    if (up) break;
    assert_true(shoal_now_s() - t0 < 60);
    usleep(200000);
  }

  /* The run is bounded by time only as a backstop (120 s): a loaded machine must not
   * end it before the kill above. Stop it as a person would, with SIGTERM. */
  assert_int_equal(kill(run.pid, SIGTERM), 0);
  assert_int_equal(wf_wait(&run, 120), 0);
  out = wf_slurp(run.out, NULL);
  printf("%s", out);
  assert_non_null(strstr(out, "live change: dqn.lr 0.0005 -> 0.0001"));
  assert_non_null(strstr(out, "restarts: learner 1"));
  free(out);

  /* The metrics: the starting value, then the change at a later env step. */
  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, uri, &err), 0);
  store_metric *rows;
  size_t n;
  assert_int_equal(store_metrics_query(st, "live1", "hparam/dqn.lr", 0, INT64_MAX, &rows, &n, &err),
                   0);
  /* start 0.0005, change 0.0001; after the restart: the config's value, then the
   * change again at the resumed step. */
  assert_int_equal(n, 4);
  size_t first = 0, change = 0, newest = 0;
  for (size_t i = 0; i < n; i++) {
    if (rows[i].time < rows[first].time) first = i;
    if (rows[i].time >= rows[newest].time) newest = i;
  }
  for (size_t i = 0; i < n; i++)
    if (i != first && (change == first || rows[i].time < rows[change].time)) change = i;
  assert_true(fabs(rows[first].value - 0.0005) < 1e-12);
  assert_true(fabs(rows[change].value - 0.0001) < 1e-12);
  assert_true(rows[change].step > rows[first].step);
  assert_true(fabs(rows[newest].value - 0.0001) < 1e-12);
  free(rows);
  store_close(st);
}

/* `shoal eval --render`: frames of the first greedy episode of the run trained above,
 * as one PNG strip (CartPole frames are 600x400, env_strip_columns a row, 2-pixel
 * borders: a short episode, as under ThreadSanitizer's slow training, lays 8 out 4 by 2). */
static void test_eval_render_strip(void **state) {
  char uri[400], png[400];
  snprintf(uri, sizeof uri, "file://%s", wf_dir);
  snprintf(png, sizeof png, "%s/strip.png", wf_dir);
  char *a[] = {wf_shoal, "eval", "live1", "--store", uri, "--episodes", "3", "--render", png, NULL};
  int rc;
  char *out = wf_run(a, 60, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  const char *p = strstr(out, "eval live1: ");
  assert_non_null(p);
  int frames = atoi(p + strlen("eval live1: "));
  assert_true(frames >= 6 && frames <= 12);
  free(out);
  size_t len;
  unsigned char *b = (unsigned char *)wf_slurp(png, &len);
  assert_true(len > 24);
  assert_memory_equal(b, "\x89PNG\r\n\x1a\n", 8);
  uint32_t w = (uint32_t)b[16] << 24 | (uint32_t)b[17] << 16 | (uint32_t)b[18] << 8 | b[19];
  uint32_t h = (uint32_t)b[20] << 24 | (uint32_t)b[21] << 16 | (uint32_t)b[22] << 8 | b[23];
  free(b);
  const int cols = env_strip_columns(frames), rows = (frames + cols - 1) / cols;
  assert_true(cols >= 4 && cols <= 6);
  assert_int_equal(w, cols * 600 + (cols + 1) * 2);
  assert_int_equal(h, rows * 400 + (rows + 1) * 2);
}

static void test_unreachable_learner_is_an_error(void **state) {
  int rc;
  char *a[] = {wf_shoal, "status", "127.0.0.1:1", "--interval", "0", NULL};
  char *out = wf_run(a, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "shoal status: "));
  free(out);
  char *b[] = {wf_shoal, "set", "127.0.0.1:1", NULL};
  out = wf_run(b, 30, &rc);
  assert_int_equal(rc, 2); /* no key=value: usage */
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unreachable_learner_is_an_error),
      cmocka_unit_test(test_set_changes_learning_rate),
      cmocka_unit_test(test_eval_render_strip),
  };
  return cmocka_run_group_tests_name("workflow_live", tests, setup, teardown);
}
