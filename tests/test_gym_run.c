/* SPDX-License-Identifier: Apache-2.0 */
/* `shoal run` on your own envs, end to end (real learner and actor processes):
 *   user    a module of the user's own (tests/gym_user_envs.py copied into a temporary
 *           folder outside the repository, the working folder of the run), registered
 *           with gymnasium.register and named gym:gym_user_envs:Corridor-v0, trained to
 *           its reward threshold by Ape-X, IMPALA and PPO; then `shoal eval` plays the
 *           stored policy, and shoal-train-sync trains it in one process;
 *   plugin  examples/plugin_env/gridrun.c compiled here with cc against the source
 *           tree's headers alone, trained by the three algorithms as plugin:PATH:NAME;
 *           and again with NoisyNet's layer compiled into the same library: the env
 *           plugin brings the layer dqn.layer names (no nn.plugins), which a plugin
 *           without it cannot;
 *   refuse  a run whose env the actors cannot make stops with the env's message and a
 *           non-zero status instead of restarting actors forever;
 *   lunar   (slow) Gymnasium's LunarLander-v3 (Box2D) with configs/lunarlander-ppo.yaml,
 *           one fixed seed, to a greedy mean return >= 200 over 100 episodes;
 *   atari   a short Pong run of each Atari config (configs/atari-pong-*.yaml, 2 actors):
 *           frames flow to the learner, updates run, an evaluation plays whole games and
 *           scores the game's own points, and `shoal eval` plays the stored policy. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "tests/proc_util.h"

static char store_uri[400];

/* Runs `shoal run CONFIG --set ...` (NULL-terminated sets) and returns its output. */
static char *run(const char *config, double timeout_s, int *rc, ...) {
  char cfg[4400];
  snprintf(cfg, sizeof cfg, "%s/configs/%s", wf_src, config);
  char *argv[40] = {wf_shoal, "run", cfg, "--set", store_uri, "--quiet"};
  int n = 6;
  va_list ap;
  va_start(ap, rc);
  for (const char *s; (s = va_arg(ap, const char *)) && n < 36;) {
    argv[n++] = "--set";
    argv[n++] = (char *)s;
  }
  va_end(ap);
  argv[n] = NULL;
  return wf_run(argv, timeout_s, rc);
}

static void expect_solved(const char *what, char *out, int rc) {
  const char *sum = strstr(out, "shoal: run ");
  fprintf(stderr, "%s: exit %d: %s", what, rc, sum ? strstr(sum, "solved") ? sum : out : out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, " solved after "));
  free(out);
}

static void train_all(const char *id, const char *solve, const char *tag, const char *shown) {
  char env_set[600], name[3][80];
  snprintf(env_set, sizeof env_set, "env.id=%s", id);
  const char *configs[3] = {"cartpole-apex.yaml", "cartpole-impala.yaml", "cartpole-ppo.yaml"};
  for (int k = 0; k < 3; k++) {
    snprintf(name[k], sizeof name[k], "run.name=%s-%d", tag, k);
    int rc;
    char *out = run(configs[k], 150, &rc, env_set, solve, name[k], "run.max_seconds=100",
                    "run.eval_episodes=20", NULL);
    expect_solved(configs[k], out, rc);
  }
  /* the stored policy plays: eval makes the env from the stored config again */
  char run_name[80];
  snprintf(run_name, sizeof run_name, "%s-0", tag);
  char *argv[] = {wf_shoal,     "eval", run_name, "--store", store_uri + strlen("store.uri="),
                  "--episodes", "5",    NULL};
  int rc;
  char *out = wf_run(argv, 60, &rc);
  fprintf(stderr, "eval: exit %d: %s", rc, out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, shown)); /* the env eval made, by its spec id */
  assert_non_null(strstr(out, "over 5 episodes"));
  free(out);
}

static void test_user_module(void **state) {
  char cmd[5000];
  snprintf(cmd, sizeof cmd, "cp '%s/tests/gym_user_envs.py' '%s/'", wf_src, wf_dir);
  assert_int_equal(system(cmd), 0);
  /* the module is found in the working folder, as `python -m` finds it */
  assert_int_equal(chdir(wf_dir), 0);
  unsetenv("PYTHONPATH");
  train_all("gym:gym_user_envs:Corridor-v0", "run.solve_return=0.9", "corridor",
            "gym:gym_user_envs:Corridor-v0");
  /* and the synchronous trainer, one process */
  char sync[4200], cfg[4400];
  snprintf(sync, sizeof sync, "%s", wf_shoal);
  char *slash = strrchr(sync, '/');
  snprintf(slash + 1, sizeof sync - (size_t)(slash + 1 - sync), "shoal-train-sync");
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-ppo.yaml", wf_src);
  char *argv[] = {
      sync, cfg, "--set", "env.id=gym:gym_user_envs:Corridor-v0", "--set", "run.solve_return=0.9",
      NULL};
  int rc;
  char *out = wf_run(argv, 120, &rc);
  fprintf(stderr, "train-sync: exit %d: %s", rc, out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "ppo gym:gym_user_envs:Corridor-v0: solved after"));
  free(out);
}

static void test_plugin(void **state) {
  char lib[400], cmd[9000];
  snprintf(lib, sizeof lib, "%s/libgridrun.so", wf_dir);
  snprintf(cmd, sizeof cmd,
           "cc -O2 -shared -fPIC -I'%s' '%s/examples/plugin_env/gridrun.c' -o '%s'", wf_src, wf_src,
           lib);
  assert_int_equal(system(cmd), 0);
  char id[500];
  snprintf(id, sizeof id, "plugin:%s:GridRun-v0", lib);
  train_all(id, "run.solve_return=0.75", "gridrun", "(GridRun-v0,");

  /* An env plugin that registers layers too (shoal_nn_plugin_init beside its env). */
  char lib2[400], cmd2[20000];
  snprintf(lib2, sizeof lib2, "%s/libgridrun_layers.so", wf_dir);
  snprintf(cmd2, sizeof cmd2,
           "cc -O2 -shared -fPIC -I'%s' '%s/examples/plugin_env/gridrun.c' "
           "'%s/examples/noisy_net/noisy_linear.c' -o '%s'",
           wf_src, wf_src, wf_src, lib2);
  assert_int_equal(system(cmd2), 0);
  char id2[600];
  snprintf(id2, sizeof id2, "env.id=plugin:%s:GridRun-v0", lib2);
  int rc;
  char *out = run("cartpole-apex-noisy.yaml", 60, &rc, id2, "nn.plugins=", "run.name=gl",
                  "run.max_env_steps=20000", "run.eval_episodes=5", NULL);
  fprintf(stderr, "env plugin with layers: exit %d: %s", rc, out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "shoal: run gl max_env_steps after"));
  free(out);
  /* the plain GridRun brings none: the learner and the actors say so and the run stops */
  snprintf(id2, sizeof id2, "env.id=%s", id);
  out = run("cartpole-apex-noisy.yaml", 60, &rc, id2, "nn.plugins=", "run.name=gl2",
            "run.max_env_steps=20000", NULL);
  fprintf(stderr, "env plugin without layers: exit %d: %s", rc, out);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "layer 'noisy_linear' is not a registered layer"));
  assert_null(strstr(out, "restarting"));
  free(out);
}

static void test_refused(void **state) {
  int rc;
  char *out = run("cartpole-impala.yaml", 60, &rc, "env.id=gym:Blackjack-v1", "run.name=bj", NULL);
  fprintf(stderr, "refused: exit %d:\n%s", rc, out);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "observation space is Tuple"));
  assert_null(strstr(out, "restarting"));
  free(out);
  /* an env that raises mid-run: the actor stops with the env's own words and the run
   * stops with it, without restarting the actor into the same error */
  char cmd[5000];
  snprintf(cmd, sizeof cmd, "cp '%s/tests/gym_user_envs.py' '%s/'", wf_src, wf_dir);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(chdir(wf_dir), 0);
  out = run("cartpole-impala.yaml", 60, &rc, "env.id=gym:gym_user_envs:Faulty-v0",
            "env.options=how=raise,at=40", "run.name=faulty", NULL);
  fprintf(stderr, "faulty: exit %d:\n%s", rc, out);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "RuntimeError: the simulator lost its licence server"));
  assert_non_null(strstr(out, "gym:gym_user_envs:Faulty-v0"));
  assert_non_null(strstr(out, "stopped after a failure"));
  free(out);
}

static void test_lunar(void **state) {
  int rc;
  char *out = run("lunarlander-ppo.yaml", 840, &rc, "run.name=lunar", NULL);
  expect_solved("lunarlander-ppo.yaml", out, rc);
}

/* The score of the run's last evaluation, from its summary line ("greedy eval -21.0" or
 * "eval -21.0"); NAN if none. */
static double last_eval(const char *out) {
  const char *sum = strstr(out, "shoal: run ");
  const char *e = sum ? strstr(sum, "eval ") : NULL;
  return e ? strtod(e + 5, NULL) : NAN;
}

static void test_atari(void **state) {
  const char *configs[3] = {"atari-pong-impala.yaml", "atari-pong-ppo.yaml",
                            "atari-pong-apex.yaml"};
  /* A few thousand steps: past Ape-X's warmup (lowered), IMPALA's first batches and two
   * of PPO's rollouts of 8 x 128 (its update, 4 epochs of the nature net, is the slowest
   * part of this test). An evaluation mid-run and the final one at the budget. */
  static const long budget[3] = {6000, 3000, 4000};
  long apex_steps = 0;
  for (int k = 0; k < 3; k++) {
    char name[80], steps_set[64], eval_set[64];
    snprintf(name, sizeof name, "run.name=pong-%d", k);
    snprintf(steps_set, sizeof steps_set, "run.max_env_steps=%ld", budget[k]);
    snprintf(eval_set, sizeof eval_set, "run.eval_every_steps=%ld", budget[k] / 2);
    int rc;
    char *out =
        k == 2 ? run(configs[k], 240, &rc, name, steps_set, "run.eval_every_s=5",
                     "run.eval_episodes=1", "learner.warmup=1000", "replay.capacity=5000", NULL)
               : run(configs[k], 240, &rc, name, steps_set, eval_set, "run.eval_episodes=1", NULL);
    const char *sum = strstr(out, "shoal: run ");
    fprintf(stderr, "%s: exit %d: %s", configs[k], rc, sum ? sum : out);
    assert_int_equal(rc, 0);
    assert_non_null(sum);
    long steps = 0, updates = 0;
    const char *p = strstr(sum, " env steps, ");
    assert_non_null(p);
    while (p > sum && p[-1] >= '0' && p[-1] <= '9') p--;
    steps = strtol(p, NULL, 10);
    updates = strtol(strstr(p, " env steps, ") + 12, NULL, 10);
    assert_true(steps >= budget[k]);
    assert_true(updates >= 1);
    if (k == 2) apex_steps = steps;
    /* a game of Pong: one side reaches 21, so the score is in [-21, 21] and whole */
    double ev = last_eval(out);
    assert_true(ev >= -21 && ev <= 21 && ev == floor(ev));
    free(out);
  }
  /* The Ape-X run's replay comes back from its log: Pong's stacks arrived as their
   * distinct frames and were logged so (each frame once); the resume rebuilds the
   * 4-frame stacks from them. */
  char more[64];
  snprintf(more, sizeof more, "run.max_env_steps=%ld", apex_steps + 2000);
  char *ra[] = {wf_shoal, "run", "--resume", "pong-2", "--store", store_uri + strlen("store.uri="),
                "--no-tensorboard", "--set", more, NULL};
  int rc;
  char *out = wf_run(ra, 240, &rc);
  const char *rb = strstr(out, "replay rebuilt from the log: ");
  fprintf(stderr, "resume: exit %d: %s", rc, rb ? rb : out);
  assert_int_equal(rc, 0);
  assert_non_null(rb);
  assert_true(atof(rb + strlen("replay rebuilt from the log: ")) >= 4000);
  assert_non_null(strstr(rb, " 0 gaps, 0 records skipped"));
  free(out);
  char *argv[] = {wf_shoal,     "eval", "pong-0", "--store", store_uri + strlen("store.uri="),
                  "--episodes", "1",    NULL};
  out = wf_run(argv, 120, &rc);
  fprintf(stderr, "eval: exit %d: %s", rc, out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "gym:ALE/Pong-v5"));
  assert_non_null(strstr(out, "over 1 episodes"));
  free(out);
}

int main(int argc, char **argv) {
  const char *bin = getenv("SHOAL_BINARY_DIR"), *src = getenv("SHOAL_SOURCE_DIR");
  if (!bin || !src) return 1;
  snprintf(wf_shoal, sizeof wf_shoal, "%s/bin/shoal", bin);
  snprintf(wf_src, sizeof wf_src, "%s", src);
  snprintf(wf_dir, sizeof wf_dir, "/tmp/shoal-gymrun-XXXXXX");
  if (!mkdtemp(wf_dir)) return 1;
  snprintf(store_uri, sizeof store_uri, "store.uri=file://%s/store", wf_dir);
  const char *which = argc > 1 ? argv[1] : "user";
  struct CMUnitTest t[1];
  if (!strcmp(which, "user"))
    t[0] = (struct CMUnitTest)cmocka_unit_test(test_user_module);
  else if (!strcmp(which, "plugin"))
    t[0] = (struct CMUnitTest)cmocka_unit_test(test_plugin);
  else if (!strcmp(which, "refuse"))
    t[0] = (struct CMUnitTest)cmocka_unit_test(test_refused);
  else if (!strcmp(which, "atari"))
    t[0] = (struct CMUnitTest)cmocka_unit_test(test_atari);
  else
    t[0] = (struct CMUnitTest)cmocka_unit_test(test_lunar);
  int rc = _cmocka_run_group_tests(which, t, 1, NULL, NULL);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", wf_dir);
  if (rc == 0 && system(cmd) != 0) rc = 1;
  return rc;
}
