/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_workflow_resume.c — `shoal run --resume` of a finished run (a file store, on
 * loopback, bounded runs of 2-3 s):
 *   - a --set the run's snapshots do not fit (env.id, the network's width) is refused
 *     before anything is written, naming the key; the stored config and the run's status
 *     stay as they were and `shoal eval` still plays the run;
 *   - a run already at its run.max_seconds says so and how to extend it, writing nothing;
 *   - new hyperparameters (dqn.lr, a longer limit) resume, and the summary's best is the
 *     best stored snapshot's score, not only the latest's;
 *   - errors no restart cures stop `shoal run` with their message instead of restarting
 *     the learner: a stored config the snapshots do not fit (as an older shoal could
 *     leave), and the learner and actor programs exit RUN_EXIT_FATAL on an Ape-X config
 *     for an env with a Box action space, which `shoal run` refuses up front. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "run/run.h"
#include "store/store.h"
#include "proc_util.h"

static char g_uri[400], g_cfg[4200];

static int setup(void **state) {
  if (wf_setup("resume")) return -1;
  snprintf(g_uri, sizeof g_uri, "file://%s/runs", wf_dir);
  snprintf(g_cfg, sizeof g_cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  return 0;
}
static int teardown(void **state) { return wf_teardown(); }

static double json_field(const char *s, const char *key) {
  char pat[96];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(s, pat);
  return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* The run's stored config (a new string) and status. */
static char *stored(const char *run, int *status) {
  store *st;
  shoal_error err = {0};
  assert_int_equal(store_open(&st, g_uri, &err), 0);
  store_run r = {0};
  assert_int_equal(store_run_find(st, run, &r, &err), 0);
  char *cfg = strdup(r.config);
  *status = r.status;
  store_run_clear(&r);
  store_close(st);
  return cfg;
}

/* `shoal run --resume run --set <set> ...` (at most 3 sets, NULL-ended); its output and
 * *rc. */
static char *resume(const char *run, double timeout_s, int *rc, const char *s1, const char *s2,
                    const char *s3) {
  char *argv[16] = {wf_shoal,  "run", "--resume",         (char *)run,
                    "--store", g_uri, "--no-tensorboard", "--log-json"};
  int n = 8;
  const char *sets[3] = {s1, s2, s3};
  for (int i = 0; i < 3 && sets[i]; i++) {
    argv[n++] = "--set";
    argv[n++] = (char *)sets[i];
  }
  argv[n] = NULL;
  return wf_run(argv, timeout_s, rc);
}

/* A first run of 2 s with snapshots every 0.5 s. */
static void first_run(const char *run) {
  char name[96], store_set[512];
  snprintf(name, sizeof name, "run.name=%s", run);
  snprintf(store_set, sizeof store_set, "store.uri=%s", g_uri);
  char *argv[] = {wf_shoal,
                  "run",
                  g_cfg,
                  "--no-tensorboard",
                  "--quiet",
                  "--set",
                  store_set,
                  "--set",
                  name,
                  "--set",
                  "run.max_seconds=2",
                  "--set",
                  "run.solve_return=0",
                  "--set",
                  "learner.snapshot_every_s=0.5",
                  "--set",
                  "learner.device=cpu",
                  NULL};
  int rc;
  char *out = wf_run(argv, 60, &rc);
  if (rc) fail_msg("first run: status %d:\n%s", rc, out);
  free(out);
}

static void test_incompatible_resume_is_refused_and_changes_nothing(void **state) {
  first_run("r1");
  int status0, status;
  char *cfg0 = stored("r1", &status0);
  static const struct {
    const char *set, *key;
  } bad[] = {{"env.id=MountainCar-v0", "env.id"},
             {"dqn.hidden0=32", "dqn.hidden0"},
             {"dqn.net=minatar", "dqn.net"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int rc;
    double t = shoal_now_s();
    char *out = resume("r1", 30, &rc, bad[i].set, "run.max_seconds=4", NULL);
    printf("--set %s: status %d in %.1f s:\n%s", bad[i].set, rc, shoal_now_s() - t, out);
    char want[128];
    snprintf(want, sizeof want, "resume r1: %s ", bad[i].key);
    if (rc == 0 || !strstr(out, want) || !strstr(out, "a resume cannot change it") ||
        !strstr(out, "nothing was written") || strstr(out, "restarting") ||
        strstr(out, "\"event\":\"listening\""))
      fail_msg("--set %s was not refused up front, naming %s", bad[i].set, bad[i].key);
    free(out);
    char *cfg = stored("r1", &status);
    assert_string_equal(cfg, cfg0);
    assert_int_equal(status, status0);
    free(cfg);
  }
  free(cfg0);
  /* The run still plays. */
  char *eval[] = {wf_shoal, "eval", "r1", "--store", g_uri, "--episodes", "2", NULL};
  int rc;
  char *out = wf_run(eval, 60, &rc);
  if (rc || !strstr(out, "eval r1 (CartPole-v1, snapshot v")) fail_msg("eval: %d:\n%s", rc, out);
  free(out);
}

static void test_resume_at_its_limit_says_so(void **state) {
  first_run("r2");
  int status0, status;
  char *cfg0 = stored("r2", &status0);
  int rc;
  char *out = resume("r2", 30, &rc, NULL, NULL, NULL);
  printf("%s", out);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "run.max_seconds is 2"));
  assert_non_null(strstr(out, "counts across resumes"));
  assert_non_null(strstr(out, "shoal run --resume r2 --set run.max_seconds="));
  assert_null(strstr(out, "\"event\":\"listening\"")); /* no learner started */
  free(out);
  char *cfg = stored("r2", &status);
  assert_string_equal(cfg, cfg0);
  assert_int_equal(status, status0);
  free(cfg), free(cfg0);
  /* `shoal config keys` says how the limits count. */
  char *keys[] = {wf_shoal, "config", "keys", "apex", NULL};
  out = wf_run(keys, 30, &rc);
  assert_int_equal(rc, 0);
  const char *ms = strstr(out, "run.max_seconds");
  assert_non_null(ms);
  const char *eol = strchr(ms, '\n');
  char line[512];
  snprintf(line, sizeof line, "%.*s", eol ? (int)(eol - ms) : (int)strlen(ms), ms);
  if (!strstr(line, "across resumes")) fail_msg("config keys: %s", line);
  free(out);
}

/* A snapshot with score high above any CartPole return, at a version below the latest:
 * the run's best (`eval --best`), not its latest. */
static double plant_best(const char *run) {
  store *st;
  shoal_error err = {0};
  assert_int_equal(store_open(&st, g_uri, &err), 0);
  store_snapshot_meta *metas = NULL, m;
  size_t n = 0;
  assert_int_equal(store_snapshot_list(st, run, &metas, &n, &err), 0);
  assert_true(n >= 2);
  int64_t v = -1;
  for (int64_t c = metas[n - 1].version - 1; c >= 0 && v < 0; c--) {
    bool used = false;
    for (size_t i = 0; i < n; i++) used |= metas[i].version == c;
    if (!used) v = c;
  }
  assert_true(v >= 0);
  void *bytes;
  size_t len;
  assert_int_equal(store_snapshot_get(st, run, STORE_LATEST, &m, &bytes, &len, &err), 0);
  m.version = v;
  m.score = 4321.5;
  assert_int_equal(store_snapshot_put(st, &m, bytes, len, &err), 0);
  free(bytes), free(metas);
  store_close(st);
  return m.score;
}

static void test_new_hyperparameters_resume_with_the_stored_best(void **state) {
  first_run("r3");
  double best = plant_best("r3");
  int rc;
  /* No evaluation in this process: the best can only come from the store. */
  char *out =
      resume("r3", 60, &rc, "run.max_seconds=3.5", "dqn.lr=0.0005", "run.eval_every_s=100000");
  printf("%s", out);
  if (rc) fail_msg("resume with new hyperparameters: status %d", rc);
  assert_non_null(strstr(out, "recording this config in the store"));
  const char *done = strstr(out, "\"event\":\"done\"");
  assert_non_null(done);
  if (json_field(done, "best_eval") != best)
    fail_msg("best_eval %g, the stored best %g", json_field(done, "best_eval"), best);
  free(out);
  int status;
  char *cfg = stored("r3", &status);
  assert_non_null(strstr(cfg, "lr: 0.0005"));
  free(cfg);
}

static void test_errors_no_restart_cures_stop_the_run(void **state) {
  /* Up front: Ape-X on a Box action space, as IMPALA is, and no run is recorded. */
  char store_set[512];
  snprintf(store_set, sizeof store_set, "store.uri=%s", g_uri);
  char *box[] = {wf_shoal,
                 "run",
                 g_cfg,
                 "--set",
                 store_set,
                 "--set",
                 "run.name=box1",
                 "--set",
                 "env.id=Pendulum-v1",
                 NULL};
  int rc;
  char *out = wf_run(box, 30, &rc);
  printf("%s", out);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "env Pendulum-v1 has a Box action space: Ape-X DQN needs discrete"));
  free(out);
  store *st;
  shoal_error err = {0};
  store_run r = {0};
  assert_int_equal(store_open(&st, g_uri, &err), 0);
  assert_int_equal(store_run_find(st, "box1", &r, &err), SHOAL_ENOENT);

  /* The programs themselves exit RUN_EXIT_FATAL on it (deploy/ runs them by hand). */
  char ycfg[512], learner[4200], actor[4200];
  snprintf(ycfg, sizeof ycfg, "%s/box.yaml", wf_dir);
  FILE *f = fopen(ycfg, "w");
  assert_non_null(f);
  fprintf(f, "algo: apex\nenv:\n  id: Pendulum-v1\nstore:\n  uri: %s\n", g_uri);
  fclose(f);
  snprintf(learner, sizeof learner, "%s/bin/shoal-learner", getenv("SHOAL_BINARY_DIR"));
  snprintf(actor, sizeof actor, "%s/bin/shoal-actor", getenv("SHOAL_BINARY_DIR"));
  char *largv[] = {learner, "--config", ycfg, "--run", "box2", NULL};
  out = wf_run(largv, 30, &rc);
  printf("learner: %d: %s", rc, out);
  assert_int_equal(rc, RUN_EXIT_FATAL);
  assert_non_null(strstr(out, "Ape-X DQN needs discrete actions"));
  free(out);
  char *aargv[] = {actor,     "--config", ycfg,        "--run",       "box2",
                   "--index", "0",        "--learner", "127.0.0.1:9", NULL};
  out = wf_run(aargv, 30, &rc);
  printf("actor: %d: %s", rc, out);
  assert_int_equal(rc, RUN_EXIT_FATAL);
  assert_non_null(strstr(out, "Ape-X DQN needs discrete actions"));
  free(out);

  /* A stored config its snapshots do not fit (what an older shoal recorded on a bad
   * resume): the learner fails for good and `shoal run` stops with its message. */
  first_run("r4");
  assert_int_equal(store_run_find(st, "r4", &r, &err), 0);
  char *good = strdup(r.config), *bad = strdup(r.config), *h = strstr(bad, "hidden0: 128");
  store_run_clear(&r);
  assert_non_null(h);
  memcpy(h, "hidden0: 32 ", 12);
  assert_int_equal(store_run_set_config(st, "r4", bad, &err), 0);
  double t = shoal_now_s();
  out = resume("r4", 40, &rc, "run.max_seconds=30", NULL, NULL);
  double took = shoal_now_s() - t;
  printf("damaged run: status %d in %.1f s:\n%s", rc, took, out);
  assert_int_not_equal(rc, 0);
  assert_null(strstr(out, "restarting"));
  assert_non_null(strstr(out, "resume: snapshot"));
  assert_non_null(strstr(out, "no restart cures"));
  assert_true(took < 20);
  assert_int_equal(store_run_find(st, "r4", &r, &err), 0);
  assert_int_equal(r.status, STORE_RUN_FAILED);
  assert_string_equal(r.config, bad); /* the learner recorded nothing it could not train */
  store_run_clear(&r);
  free(out);
  /* The old values back: it resumes. */
  assert_int_equal(store_run_set_config(st, "r4", good, &err), 0);
  out = resume("r4", 60, &rc, "run.max_seconds=3", NULL, NULL);
  if (rc) fail_msg("resume after the repair: %d:\n%s", rc, out);
  free(out), free(good), free(bad);
  store_close(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_incompatible_resume_is_refused_and_changes_nothing),
      cmocka_unit_test(test_resume_at_its_limit_says_so),
      cmocka_unit_test(test_new_hyperparameters_resume_with_the_stored_best),
      cmocka_unit_test(test_errors_no_restart_cures_stop_the_run),
  };
  return cmocka_run_group_tests_name("workflow_resume", tests, setup, teardown);
}
