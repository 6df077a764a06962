/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_workflow_sweep.c — hyperparameter sweeps as jobs in the store: a grid of
 * 4 tiny trials (run.max_seconds 3) and 2 workers, one killed with SIGKILL mid-trial.
 * Its trial's heartbeat lapses, the other worker requeues and completes it, the dead
 * worker's `shoal run` went with it (no orphan), and the report ranks all 4 by score.
 * Also: a sweep file with a bad key, a grid range without points, and a sweep name
 * used twice are clear errors. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "store/store.h"
#include "proc_util.h"

static char uri[400], sweep_file[400];

/* The trials run their 3 s and are scored by return100: no solve check, which with
 * CartPole's evaluation every 20k steps could end a trial before its first progress
 * line (a lucky 10-episode evaluation, and no return100 to score it by). */
static void write_sweep(const char *path, const char *name, const char *extra) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f,
          "sweep:\n  name: %s\n  base: %s/configs/cartpole-apex.yaml\n  method: grid\n"
          "  metric: return100\n"
          "set:\n  run.max_seconds: 3\n  actors: 1\n  env.num_envs: 4\n  learner.warmup: 200\n"
          "  run.eval_episodes: 10\n  run.solve_return: 0\n%s"
          "params:\n  dqn.lr: [0.001, 0.0005]\n  dqn.target_period: [100, 250]\n",
          name, wf_src, extra);
  fclose(f);
}

static int setup(void **state) {
  if (wf_setup("sweep")) return -1;
  snprintf(uri, sizeof uri, "file://%s/store", wf_dir);
  snprintf(sweep_file, sizeof sweep_file, "%s/sweep.yaml", wf_dir);
  return 0;
}
static int teardown(void **state) { return wf_teardown(); }

static void test_killed_worker_trial_completes(void **state) {
  write_sweep(sweep_file, "grid4", "");
  int rc;
  char *a1[] = {wf_shoal, "sweep", sweep_file, "--store", uri, NULL};
  char *out = wf_run(a1, 60, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "grid4: 4 trials (grid)"));
  free(out);

  /* The same sweep name again: refused, nothing added. */
  out = wf_run(a1, 60, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "exists already with 4 trials"));
  free(out);

  char *wa[] = {wf_shoal, "worker",      "--sweep", "grid4",   "--store", uri, "--name",
                "wa",     "--heartbeat", "0.5",     "--stale", "3",       NULL};
  char *wb[] = {wf_shoal, "worker",      "--sweep", "grid4",   "--store", uri, "--name",
                "wb",     "--heartbeat", "0.5",     "--stale", "3",       NULL};
  wf_proc pa, pb;
  wf_start(&pa, wa);
  out = wf_wait_text(pa.out, " as run ", 60);
  char tid[16] = "";
  const char *p = strstr(out, "trial ");
  assert_non_null(p);
  sscanf(p, "trial %15s", tid);
  free(out);
  wf_start(&pb, wb);
  usleep(1500000); /* worker A's trial is under way */
  assert_int_equal(kill(pa.pid, SIGKILL), 0);
  assert_int_equal(wf_wait(&pa, 30), 128 + SIGKILL);
  printf("killed worker wa during trial %s\n", tid);

  assert_int_equal(wf_wait(&pb, 240), 0);
  out = wf_slurp(pb.out, NULL);
  printf("%s", out);
  assert_non_null(strstr(out, "requeued 1 trial whose heartbeat lapsed"));
  free(out);

  /* Every trial is done; the killed one on its second attempt, by wb. */
  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, uri, &err), 0);
  store_trial *t;
  size_t n;
  assert_int_equal(store_trial_list(st, "grid4", &t, &n, &err), 0);
  assert_int_equal(n, 4);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(t[i].status, STORE_TRIAL_DONE);
    assert_non_null(t[i].result);
    assert_non_null(strstr(t[i].result, "\"env_steps\":"));
    if (!strcmp(t[i].id, tid)) {
      assert_int_equal(t[i].attempt, 2);
      assert_string_equal(t[i].worker, "wb");
    }
  }
  store_trials_free(t, n);
  /* The dead worker's run stopped with it (the learner recorded a clean stop) and no
   * process of it is left. */
  char run1[96];
  snprintf(run1, sizeof run1, "grid4-%s-1", tid);
  store_run r;
  assert_int_equal(store_run_find(st, run1, &r, &err), 0);
  assert_int_not_equal(r.status, STORE_RUN_RUNNING);
  store_run_clear(&r);
  store_close(st);
  assert_int_equal(wf_find_pid_in(run1, NULL, false), 0); /* orphans too */

  char *a2[] = {wf_shoal, "sweep", "--report", "grid4", "--store", uri, NULL};
  out = wf_run(a2, 30, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "4 trials: 4 done, 0 running, 0 pending, 0 failed"));
  /* Ranked by score, best first. */
  double prev = INFINITY;
  int ranked = 0;
  for (char *line = strchr(out, '\n'); line; line = strchr(line + 1, '\n')) {
    int rank;
    char id[16], status[16];
    double score;
    if (sscanf(line + 1, "%d %15s %15s %lf", &rank, id, status, &score) == 4) {
      assert_int_equal(rank, ++ranked);
      assert_true(score <= prev);
      prev = score;
    }
  }
  assert_int_equal(ranked, 4);
  free(out);
}

/* The sweep's trials as the report shows them: "N trials: D done, R running, P pending". */
static char *report(const char *name) {
  int rc;
  char *a[] = {wf_shoal, "sweep", "--report", (char *)name, "--store", uri, NULL};
  char *out = wf_run(a, 30, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  return out;
}

static wf_proc start_worker(const char *sweep, const char *name) {
  char *w[] = {wf_shoal,     "worker",      "--sweep", (char *)sweep, "--store", uri, "--name",
               (char *)name, "--heartbeat", "0.5",     "--stale",     "60",      NULL};
  wf_proc p;
  wf_start(&p, w);
  return p;
}

/* Ctrl-C (SIGINT to the worker's process group, as a terminal sends it) during a trial:
 * the run stops in order (no "second signal"), the unfinished trial is back in the
 * queue at once (not "running" until its heartbeat lapses, here 60 s), and a worker
 * started later runs it. */
static void test_ctrl_c_hands_the_trial_back(void **state) {
  char path[512];
  snprintf(path, sizeof path, "%s/long.yaml", wf_dir);
  FILE *f = fopen(path, "w");
  fprintf(f,
          "sweep:\n  name: long1\n  base: %s/configs/cartpole-apex.yaml\n  method: grid\n"
          "  metric: return100\n"
          "set:\n  run.max_seconds: 60\n  actors: 1\n  env.num_envs: 4\n  learner.warmup: 200\n"
          "  run.solve_return: 0\nparams:\n  dqn.lr: [0.001]\n",
          wf_src);
  fclose(f);
  int rc;
  char *a[] = {wf_shoal, "sweep", path, "--store", uri, NULL};
  free(wf_run(a, 60, &rc));
  assert_int_equal(rc, 0);
  wf_proc w = start_worker("long1", "wc");
  free(wf_wait_text(w.out, " as run ", 60));
  usleep(2500000); /* the trial's run is training */
  assert_int_equal(kill(-w.pid, SIGINT), 0);
  assert_int_equal(wf_wait(&w, 60), 0);
  char *out = wf_slurp(w.out, NULL);
  printf("%s", out);
  assert_null(strstr(out, "second signal"));
  assert_non_null(strstr(out, "trial t000 is back in the queue (pending)"));
  free(out);
  out = report("long1");
  assert_non_null(strstr(out, "1 trials: 0 done, 0 running, 1 pending"));
  free(out);
  /* Nothing of the stopped run is left running, and its learner recorded its stop. */
  assert_int_equal(wf_find_pid_in("long1-t000-1", NULL, false), 0);
  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, uri, &err), 0);
  store_run r;
  assert_int_equal(store_run_find(st, "long1-t000-1", &r, &err), 0);
  assert_int_not_equal(r.status, STORE_RUN_RUNNING);
  store_run_clear(&r);
  store_close(st);
}

/* Ctrl-C while the trial's run is finishing on its own (its learner has stopped, the
 * supervisor is stopping the actor): the finished trial's score is recorded as done. */
static void test_ctrl_c_as_a_trial_finishes_keeps_its_score(void **state) {
  char path[512];
  snprintf(path, sizeof path, "%s/short.yaml", wf_dir);
  FILE *f = fopen(path, "w");
  fprintf(f,
          "sweep:\n  name: short1\n  base: %s/configs/cartpole-apex.yaml\n  method: grid\n"
          "  metric: return100\n"
          "set:\n  run.max_seconds: 3\n  actors: 1\n  env.num_envs: 4\n  learner.warmup: 200\n"
          "  run.solve_return: 0\nparams:\n  dqn.lr: [0.001]\n",
          wf_src);
  fclose(f);
  int rc;
  char *a[] = {wf_shoal, "sweep", path, "--store", uri, NULL};
  free(wf_run(a, 60, &rc));
  assert_int_equal(rc, 0);
  wf_proc w = start_worker("short1", "wd");
  free(wf_wait_text(w.out, " as run ", 60));
  /* The learner exits at its 3 s; the actor then gets its stop and a moment to flush. */
  pid_t learner = 0;
  for (double t0 = shoal_now_s(); !learner && shoal_now_s() - t0 < 30; usleep(10000))
    learner = wf_find_pid("shoal-learner", "--run short1-t000-1");
  assert_true(learner > 0);
  /* Gone (a zombie's command line is empty): the supervisor is stopping the actor. */
  for (double t0 = shoal_now_s(); shoal_now_s() - t0 < 30; usleep(2000))
    if (wf_find_pid("shoal-learner", "--run short1-t000-1") == 0) break;
  assert_int_equal(kill(-w.pid, SIGINT), 0);
  assert_int_equal(wf_wait(&w, 60), 0);
  char *out = wf_slurp(w.out, NULL);
  printf("%s", out);
  assert_null(strstr(out, "second signal"));
  assert_non_null(strstr(out, "trial t000 max_seconds: score "));
  free(out);
  out = report("short1");
  assert_non_null(strstr(out, "1 trials: 1 done, 0 running, 0 pending"));
  free(out);
}

static void test_bad_sweeps_are_clear(void **state) {
  char path[512];
  int rc;
  snprintf(path, sizeof path, "%s/bad1.yaml", wf_dir);
  write_sweep(path, "bad1", "  dqn.lrr: 3\n");
  char *a[] = {wf_shoal, "sweep", path, "--store", uri, NULL};
  char *out = wf_run(a, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "unknown key 'dqn.lrr'"));
  free(out);

  snprintf(path, sizeof path, "%s/bad2.yaml", wf_dir);
  FILE *f = fopen(path, "w");
  fprintf(f,
          "sweep:\n  name: bad2\n  base: %s/configs/cartpole-apex.yaml\n"
          "params:\n  dqn.lr: {min: 0.0001, max: 0.01, log: true}\n",
          wf_src);
  fclose(f);
  out = wf_run(a, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "a grid needs a list or a range with num"));
  free(out);

  f = fopen(path, "w");
  fprintf(f, "sweep:\n  name: bad3\n  base: x.yaml\n  metod: grid\nparams:\n  dqn.lr: [1]\n");
  fclose(f);
  out = wf_run(a, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "bad2.yaml:4: sweep takes name, base"));
  free(out);

  char *b[] = {wf_shoal, "sweep", "--report", "no-such-sweep", "--store", uri, NULL};
  out = wf_run(b, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "no sweep no-such-sweep"));
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_sweeps_are_clear),
      cmocka_unit_test(test_killed_worker_trial_completes),
      cmocka_unit_test(test_ctrl_c_hands_the_trial_back),
      cmocka_unit_test(test_ctrl_c_as_a_trial_finishes_keeps_its_score),
  };
  return cmocka_run_group_tests_name("workflow_sweep", tests, setup, teardown);
}
