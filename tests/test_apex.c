/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_apex.c — the main job end to end: `shoal run` with a learner and actor
 * processes on loopback. Budgets are in env steps; every process has a bounded time.
 *   solve:   CartPole-v1 solved (mean greedy return >= 475 over 100 episodes) within
 *            600,000 env steps (measured: about 250,000 on this machine; CleanRL's DQN
 *            reports 488.7 after 500,000), then `shoal eval` on the stored snapshot;
 *   crash:   an actor killed with SIGKILL mid-run is restarted and the run goes on;
 *   resume:  the learner killed with SIGKILL is restarted, resumes from its latest
 *            snapshot, and its version and step counters continue;
 *   (crash and resume are bounded by run.max_seconds, so the kill lands mid-run at
 *   any speed, sanitizer builds included)
 *   noisy:   the same with NoisyNet's noisy linear layers (a custom layer from the
 *            example plugin, examples/noisy_net) and epsilon 0, within 2,000,000 env
 *            steps (measured: 277k-1.0M, seeds 1-5, 8-33 s on 2 cores);
 *   config:  unknown keys, bad values, missing files, unknown layers and plugins are
 *            clear errors.
 * Run as `test_apex solve`, `test_apex noisy` (label slow) or `test_apex` (the rest). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/shoal.h"
#include "run/run.h"
#include "tests/proc_util.h"

static char config_path[4200];

static void wait_for_text(const char *path, const char *text, double timeout_s) {
  free(wf_wait_text(path, text, timeout_s));
}

static double number_after(const char *s, const char *key) {
  const char *p = strstr(s, key);
  if (!p) return NAN;
  return strtod(p + strlen(key), NULL);
}

/* A progress line's figure as shown ("30.6k", "1.2M", "812") after key. */
static double human_after(const char *s, const char *key) {
  const char *p = strstr(s, key);
  if (!p) return NAN;
  char *end;
  double v = strtod(p + strlen(key), &end);
  return *end == 'k' ? v * 1e3 : *end == 'M' ? v * 1e6 : v;
}

/* Each progress line's replay counts env steps, labelled so, and holds no more steps
 * than were taken (the episode-end observations stored beside them are not steps). */
static void check_replay_in_steps(const char *out) {
  int lines = 0;
  for (const char *l = strstr(out, "  steps "); l; l = strstr(l + 1, "  steps ")) {
    const char *eol = strchr(l, '\n');
    char line[512];
    snprintf(line, sizeof line, "%.*s", eol ? (int)(eol - l) : (int)strlen(l), l);
    const char *rep = strstr(line, "  replay ");
    if (!rep) fail_msg("no replay figure in: %s", line);
    const char *unit = strchr(rep + 9, ' ');
    if (!unit || strncmp(unit, " steps  ", 8)) fail_msg("replay without its unit in: %s", line);
    double steps = human_after(line, "steps "), held = human_after(line, "  replay ");
    if (!(held <= steps * 1.001 + 100)) fail_msg("replay above the steps taken in: %s", line);
    lines++;
  }
  assert_true(lines > 0);
}

static int setup(void **state) {
  if (wf_setup("apex")) return -1;
  snprintf(config_path, sizeof config_path, "%s/configs/cartpole-apex.yaml", wf_src);
  return 0;
}

static int teardown(void **state) { return wf_teardown(); }

/* `shoal run CONFIG` (plus one --set, or NULL) to CartPole's bar within max_steps env
 * steps, then `shoal eval` of the stored policy on 100 episodes from other seeds.
 * run gets the run's name. */
static void solve_and_eval(const char *config, const char *extra, const char *max_steps,
                           double max_s, char *run, size_t run_n) {
  char store_set[400], run_set[96], steps_set[64];
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", wf_dir);
  snprintf(run, run_n, "solve-%d-%s", getpid(), extra ? "x" : "plain");
  snprintf(run_set, sizeof run_set, "run.name=%s", run);
  snprintf(steps_set, sizeof steps_set, "run.max_env_steps=%s", max_steps);
  char *argv[] = {wf_shoal, "run",     (char *)config, "--set", store_set, "--set", run_set,
                  "--set",  steps_set, "--set",        (char *)extra,     NULL};
  if (!extra) argv[9] = NULL;
  wf_proc p;
  wf_start(&p, argv);
  int rc = wf_wait(&p, max_s);
  char *out = wf_slurp(p.out, NULL);
  printf("%s", out);
  assert_int_equal(rc, 0);
  const char *solved = strstr(out, " solved after ");
  assert_non_null(solved);
  double steps = number_after(solved, "training): ");
  assert_true(steps > 0 && steps <= atof(max_steps));
  assert_true(number_after(out, "greedy eval ") >= 475.0);
  free(out);

  char store_uri[400];
  snprintf(store_uri, sizeof store_uri, "file://%s", wf_dir);
  char *eargv[] = {wf_shoal, "eval", run, "--store", store_uri, "--episodes", "100", NULL};
  wf_start(&p, eargv);
  assert_int_equal(wf_wait(&p, 60), 0);
  out = wf_slurp(p.out, NULL);
  printf("%s", out);
  /* Another 100 episodes from other seeds: the stored policy plays well there too. */
  assert_true(number_after(out, ": return ") >= 400.0);
  free(out);
}

static void test_solves_cartpole(void **state) {
  char run[64];
  solve_and_eval(config_path, NULL, "600000", 240, run, sizeof run);
  char store_uri[400];
  snprintf(store_uri, sizeof store_uri, "file://%s", wf_dir);
  wf_proc p;
  char *out;

  /* On other env settings: a 50-step limit caps every episode of that policy. */
  char *e2[] = {wf_shoal,  "eval",    run,
                "--store", store_uri, "--episodes",
                "10",      "--set",   "env.options=max_episode_steps=50",
                NULL};
  wf_start(&p, e2);
  assert_int_equal(wf_wait(&p, 60), 0);
  out = wf_slurp(p.out, NULL);
  printf("%s", out);
  assert_non_null(strstr(out, "env.options=max_episode_steps=50 (the run trained with its own)"));
  assert_true(number_after(out, "(min ") >= 40.0);
  assert_true(number_after(out, ", max ") <= 50.0);
  free(out);
}

/* The example's layer plugin, by absolute path (the config's is relative to the
 * repository root). */
static void noisy_plugin_set(char *buf, size_t n) {
  const char *bd = getenv("SHOAL_BINARY_DIR");
  snprintf(buf, n, "nn.plugins=%s/examples/noisy_linear.so", bd ? bd : ".");
}

static void test_noisy_solves_cartpole(void **state) {
  char cfg[4200], plug[4200], run[64];
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex-noisy.yaml", wf_src);
  noisy_plugin_set(plug, sizeof plug);
  /* `shoal eval` loads the plugin again, from the run's stored config */
  solve_and_eval(cfg, plug, "2000000", 400, run, sizeof run);
}

/* Actor 1 of a run: its command line holds "--run RUN --index 1". */
static pid_t find_actor1(const char *run) {
  char words[128];
  snprintf(words, sizeof words, "--run %s --index 1 ", run);
  return wf_find_pid("shoal-actor", words);
}

static void test_actor_killed_is_restarted(void **state) {
  char store_set[400], run[64], run_set[96];
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", wf_dir);
  snprintf(run, sizeof run, "crash-%d", getpid());
  snprintf(run_set, sizeof run_set, "run.name=%s", run);
  char *argv[] = {wf_shoal,
                  "run",
                  config_path,
                  "--set",
                  store_set,
                  "--set",
                  run_set,
                  "--set",
                  "run.solve_return=0",
                  "--set",
                  "run.max_env_steps=0",
                  "--set",
                  "run.max_seconds=10",
                  NULL};
  wf_proc p;
  wf_start(&p, argv);
  wait_for_text(p.out, "steps ", 60); /* training is under way */
  pid_t actor = find_actor1(run);
  assert_true(actor > 0);
  assert_int_equal(kill(actor, SIGKILL), 0);
  int rc = wf_wait(&p, 180);
  char *out = wf_slurp(p.out, NULL);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "actor-1 (pid"));
  assert_non_null(strstr(out, "killed by signal 9; restarting"));
  assert_non_null(strstr(out, "max_seconds after"));
  assert_non_null(strstr(out, "restarts: learner 0, actors 1"));
  check_replay_in_steps(out);
  free(out);
}

static void test_learner_killed_resumes(void **state) {
  char store_set[400], run[64], run_set[96];
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", wf_dir);
  snprintf(run, sizeof run, "resume-%d", getpid());
  snprintf(run_set, sizeof run_set, "run.name=%s", run);
  char *argv[] = {wf_shoal,
                  "run",
                  config_path,
                  "--set",
                  store_set,
                  "--set",
                  run_set,
                  "--set",
                  "run.solve_return=0",
                  "--set",
                  "run.max_env_steps=0",
                  "--set",
                  "run.max_seconds=15",
                  "--set",
                  "learner.snapshot_every_s=0.5",
                  NULL};
  wf_proc p;
  wf_start(&p, argv);
  /* Wait until the policy has moved past version 10 (training is under way), then for
   * two snapshot periods, so the latest snapshot holds trained parameters. */
  double t0 = shoal_now_s();
  for (;;) {
    char *s = wf_slurp(p.out, NULL);
    const char *v = NULL;
    for (const char *q = strstr(s, "  v"); q; q = strstr(q + 1, "  v")) v = q;
    double version = v ? strtod(v + 3, NULL) : 0;
    free(s);
    if (version >= 10) break;
    if (shoal_now_s() - t0 > 120) fail_msg("the learner published no version 10 in 120 s");
    usleep(50000);
  }
  usleep(1200000);
  pid_t learner = wf_find_pid("shoal-learner", run);
  assert_true(learner > 0);
  assert_int_equal(kill(learner, SIGKILL), 0);
  int rc = wf_wait(&p, 180);
  char *out = wf_slurp(p.out, NULL);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "learner (pid"));
  const char *res = strstr(out, "shoal-learner: resumed run ");
  assert_non_null(res);
  double v_resumed = number_after(res, "at version ");
  double steps_resumed = number_after(res, ", ");
  assert_true(v_resumed > 0 && steps_resumed > 0);
  /* Adam's moments and the target network came back with the parameters. */
  const char *opt = strstr(out, "shoal-learner: resume: optimizer state restored (");
  assert_non_null(opt);
  assert_true(number_after(opt, "restored (") > 0);
  assert_non_null(strstr(out, "learner restarted on"));
  /* The final counters continue from the snapshot's. */
  const char *sum = strstr(out, "max_seconds after");
  assert_non_null(sum);
  assert_true(number_after(sum, "policy v") > v_resumed);
  assert_true(number_after(sum, "training): ") > steps_resumed);
  assert_non_null(strstr(out, "restarts: learner 1"));
  free(out);
}

static void expect_config_error(const char *what, char *const argv[], const char *message) {
  wf_proc p;
  wf_start(&p, argv);
  int rc = wf_wait(&p, 30);
  char *out = wf_slurp(p.out, NULL);
  if (rc == 0 || !strstr(out, message))
    fail_msg("%s: exit %d, output:\n%s\n(expected a failure naming '%s')", what, rc, out, message);
  free(out);
}

static void test_config_errors_are_clear(void **state) {
  char store_set[400];
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", wf_dir);
  char *a1[] = {wf_shoal, "run", config_path, "--set", "dqn.lrr=0.1", NULL};
  expect_config_error("unknown key", a1, "unknown key 'dqn.lrr'");
  char *a2[] = {wf_shoal, "run", config_path, "--set", "actors=0", NULL};
  expect_config_error("out of range", a2, "key 'actors': 0 is outside");
  char *a3[] = {wf_shoal, "run", "/nonexistent/apex.yaml", NULL};
  expect_config_error("missing file", a3, "cannot open '/nonexistent/apex.yaml'");
  char *a4[] = {wf_shoal, "run", config_path, "--set", "env.id=CartPole-v9", NULL};
  expect_config_error("unknown env", a4, "CartPole-v9");
  char *a5[] = {wf_shoal, "run", config_path, "--set", "dqn.gamma=lots", NULL};
  expect_config_error("bad value", a5, "'lots' is not a number");
  char *a6[] = {wf_shoal, "eval", "no-such-run", "--store", store_set + 10, NULL};
  expect_config_error("missing run", a6, "no-such-run");
  /* `shoal eval --set` changes the env it plays on, nothing else. */
  char *a9[] = {wf_shoal, "eval", "no-such-run", "--set", "dqn.lr=1", NULL};
  expect_config_error("eval --set", a9, "only env.* keys other than env.id");
  char *a10[] = {wf_shoal, "eval", "no-such-run", "--set", "env.id=Pendulum-v1", NULL};
  expect_config_error("eval --set env.id", a10, "only env.* keys other than env.id");
  /* A bad env option: `shoal run` names it before starting anything, and a learner
   * started by hand (as Slurm does) exits with it, not with a crash. */
  char *a11[] = {wf_shoal, "run", config_path, "--set", "env.options=bogus=1", NULL};
  expect_config_error("env option", a11, "unknown option 'bogus'");
  char learner[4200];
  snprintf(learner, sizeof learner, "%s/bin/shoal-learner", getenv("SHOAL_BINARY_DIR"));
  char *a12[] = {learner,   "--config", config_path,           "--run", "bad-opt", "--set",
                 store_set, "--set",    "env.options=bogus=1", NULL};
  int rc;
  char *out = wf_run(a12, 60, &rc);
  printf("%s", out);
  assert_int_equal(rc, RUN_EXIT_FATAL); /* no restart would cure it: supervisors stop */
  assert_non_null(strstr(out, "unknown option 'bogus'"));
  free(out);
  /* `algo: apex` is an Ape-X config (its dqn.* keys are checked, not refused as unknown);
   * an algorithm shoal does not have is named. */
  char *a7[] = {wf_shoal,    "run",   config_path,      "--set",
                "algo=apex", "--set", "dqn.gamma=lots", NULL};
  expect_config_error("algo apex", a7, "'lots' is not a number");
  char *a8[] = {wf_shoal, "run", config_path, "--set", "algo=sac", NULL};
  expect_config_error("unknown algo", a8, "sac");
  /* custom layers: an unknown kind, a plugin that is not there, one that is not a layer
   * plugin; all named before anything starts */
  char *a13[] = {wf_shoal, "run", config_path, "--set", "dqn.layer=noisy", NULL};
  expect_config_error("unknown layer", a13,
                      "dqn.layer: 'noisy' is neither dense nor a registered custom layer");
  char *a14[] = {wf_shoal, "run", config_path, "--set", "nn.plugins=/nonexistent/l.so", NULL};
  expect_config_error("missing plugin", a14, "nn.plugins: nn: layer plugin /nonexistent/l.so");
  char plug[4200];
  noisy_plugin_set(plug, sizeof plug);
  char *a15[] = {wf_shoal, "run", config_path, "--set", plug, "--set", "dqn.layer=noisy_lin",
                 NULL};
  expect_config_error("misspelt layer", a15, "(registered: noisy_linear)");
  char ppo_cfg[4200];
  snprintf(ppo_cfg, sizeof ppo_cfg, "%s/configs/cartpole-ppo.yaml", wf_src);
  char *a16[] = {wf_shoal, "run", ppo_cfg, "--set", "ac.layer=glu", NULL};
  expect_config_error("on-policy layer", a16,
                      "ac.layer: 'glu' is neither dense nor a registered custom layer");
}

/* A budget that ends before the first solve check (Ape-X makes its first once replay
 * holds its warmup): the run evaluates what it ends with all the same (its closing line
 * has the score, its last snapshot is scored); with run.solve_return=0 Ape-X makes no
 * solve checks, and no final evaluation either. */
static void short_budget(const char *solve, const char *tag, bool evaluated) {
  char store_set[400], run_set[96];
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", wf_dir);
  snprintf(run_set, sizeof run_set, "run.name=short-%s-%d", tag, (int)getpid());
  char *argv[] = {wf_shoal,
                  "run",
                  config_path,
                  "--set",
                  store_set,
                  "--set",
                  run_set,
                  "--set",
                  "run.max_env_steps=3000",
                  "--set",
                  "learner.warmup=100000",
                  "--set",
                  (char *)solve,
                  "--no-tensorboard",
                  NULL};
  wf_proc p;
  wf_start(&p, argv);
  int rc = wf_wait(&p, 60);
  char *out = wf_slurp(p.out, NULL);
  printf("%s", out);
  assert_int_equal(rc, 0);
  const char *done = strstr(out, " max_env_steps after ");
  assert_non_null(done);
  if (evaluated) {
    double e = number_after(done, "greedy eval ");
    assert_true(e >= 8 && e <= 500); /* CartPole: an episode lasts 8 to 500 steps */
  } else {
    assert_null(strstr(done, " eval "));
  }
  free(out);
}

static void test_short_budget_evaluates(void **state) {
  short_budget("run.solve_return=475", "solve", true);
  short_budget("run.solve_return=0", "nosolve", false);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "solve")) {
    const struct CMUnitTest solve[] = {cmocka_unit_test(test_solves_cartpole)};
    return cmocka_run_group_tests_name("apex_solve", solve, setup, teardown);
  }
  if (argc > 1 && !strcmp(argv[1], "noisy")) {
    const struct CMUnitTest noisy[] = {cmocka_unit_test(test_noisy_solves_cartpole)};
    return cmocka_run_group_tests_name("apex_noisy", noisy, setup, teardown);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_errors_are_clear),
      cmocka_unit_test(test_actor_killed_is_restarted),
      cmocka_unit_test(test_learner_killed_resumes),
      cmocka_unit_test(test_short_budget_evaluates),
  };
  return cmocka_run_group_tests_name("apex", tests, setup, teardown);
}
