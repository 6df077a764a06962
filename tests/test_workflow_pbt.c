/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_workflow_pbt.c — population-based training on the store (`shoal sweep` with
 * a pbt: section, `shoal worker`), end to end, on one backend:
 *
 *   test_workflow_pbt file       a file:// store in a temporary folder
 *   test_workflow_pbt mongodb    ctest's MongoDB stand-in, or $SHOAL_TEST_MONGO_URI
 *
 * A population of 4 PPO members on CartPole, 3 rounds of 8192 env steps, one of them
 * drawn with a learning rate of 1e-7 (it cannot learn, so it ranks last and exploits):
 * every round is done, the lineage is in the store and in the report, the exploiting
 * member's copy is the leader's snapshot byte for byte and its next round resumed from
 * it, the explored values moved as the rules say. On the file store also: a worker
 * killed mid-round, whose member another worker takes over from its last snapshot. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/stat.h>
#include <unistd.h>

#include <math.h>

#include "mongo_test.h"
#include "proc_util.h"
#include "store/store.h"

static char uri[1024];
static bool file_backend;

static void write_pbt(const char *path, const char *name, int rounds, int64_t ready,
                      const char *extra) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  /* seed 1 draws 1e-7 for the last member only (`shoal sweep --dry-run`) */
  fprintf(f,
          "pbt:\n  name: %s\n  base: %s/configs/cartpole-ppo.yaml\n  population: 4\n"
          "  rounds: %d\n  ready_steps: %lld\n  seed: 1\n"
          "set:\n  actors: 1\n  run.solve_return: 0\n%s"
          "params:\n  ppo.lr: [\"0.0000001\", \"0.001\"]\n"
          "  ppo.entropy_coef: {min: 0.001, max: 0.1, log: true}\n",
          name, wf_src, rounds, (long long)ready, extra);
  fclose(f);
}

static const char *line_of(const char *text, const char *tag, char *out, size_t cap) {
  out[0] = 0;
  const char *p = strstr(text, tag);
  if (p) snprintf(out, cap, "%.*s", (int)strcspn(p + strlen(tag), "\n"), p + strlen(tag));
  return out;
}

static void test_population_exploits_through_the_store(void **state) {
  char path[512];
  snprintf(path, sizeof path, "%s/pbt.yaml", wf_dir);
  write_pbt(path, "pop", 3, 8192, "");
  int rc;
  char *a[] = {wf_shoal, "sweep", path, "--store", uri, "--workers", "1", NULL};
  char *out = wf_run(a, 240, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "a population of 4 members, 3 rounds of 8192 env steps"));
  assert_non_null(strstr(out, "12 trials: 12 done, 0 running, 0 pending, 0 failed"));
  assert_non_null(strstr(out, "lineage (exploits):"));
  assert_null(strstr(out, "(none yet)"));
  free(out);

  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, uri, &err), 0);
  store_trial *t;
  size_t n;
  assert_int_equal(store_trial_list(st, "pop", &t, &n, &err), 0);
  assert_int_equal(n, 12);
  int exploits = 0;
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(t[i].status, STORE_TRIAL_DONE);
    char copy[512], explored[1024], member_run[64], from[128], params[512];
    if (!line_of(t[i].params, "# pbt-copy: ", copy, sizeof copy)[0]) continue;
    exploits++;
    int leader, lround, member, round;
    double version, score, own;
    assert_int_equal(sscanf(copy, "member=%d run=%127s version=%lf score=%lf round=%d own=%lf",
                            &leader, from, &version, &score, &lround, &own),
                     6);
    assert_int_equal(sscanf(t[i].id, "m%d-r%d", &member, &round), 2);
    printf("%s: member %d copies %s v%.0f (%.2f against its own %.2f)\n", t[i].id, member, from,
           version, score, own);
    assert_true(score > own);
    assert_int_not_equal(leader, member);
    /* The copy: the leader's snapshot, byte for byte, is a snapshot of the member's run,
     * the one its round began from. */
    snprintf(member_run, sizeof member_run, "pop-m%02d", member);
    void *lb = NULL, *mb = NULL;
    size_t ll = 0, ml = 0;
    store_snapshot_meta lm, mm;
    assert_int_equal(store_snapshot_get(st, from, (int64_t)version, &lm, &lb, &ll, &err), 0);
    store_snapshot_meta *metas = NULL;
    size_t nm = 0;
    assert_int_equal(store_snapshot_list(st, member_run, &metas, &nm, &err), 0);
    bool found = false;
    for (size_t k = 0; k < nm && !found; k++) {
      assert_int_equal(store_snapshot_get(st, member_run, metas[k].version, &mm, &mb, &ml, &err),
                       0);
      found = ml == ll && !memcmp(mb, lb, ll) && isnan(mm.score);
      free(mb);
    }
    free(metas);
    free(lb);
    assert_true(found);
    /* the explored values: the leader's entropy weight x0.8 or x1.25, or a fresh draw,
     * inside its range; the learning rate one of the list's */
    line_of(t[i].params, "# pbt-explore: ", explored, sizeof explored);
    line_of(t[i].params, "# params: ", params, sizeof params);
    printf("  explored: %s\n  params: %s\n", explored, params);
    const char *e = strstr(explored, "ppo.entropy_coef ");
    assert_non_null(e);
    double before, after;
    char how[16];
    assert_int_equal(sscanf(e, "ppo.entropy_coef %lf->%lf (%15[^)])", &before, &after, how), 3);
    if (!strcmp(how, "x0.8"))
      assert_true(fabs(after - fmax(before * 0.8, 0.001)) < 1e-5 * after);
    else if (!strcmp(how, "x1.25"))
      assert_true(fabs(after - fmin(before * 1.25, 0.1)) < 1e-5 * after);
    else
      assert_string_equal(how, "resampled");
    assert_true(after >= 0.001 && after <= 0.1);
    assert_true(strstr(params, "ppo.lr=0.0000001") || strstr(params, "ppo.lr=0.001"));
  }
  /* the member that cannot learn ranked last at its first ready time and copied */
  assert_true(exploits >= 1);
  store_trials_free(t, n);
  store_close(st);

  /* the report's members and lineage */
  char *r[] = {wf_shoal, "sweep", "--report", "pop", "--store", uri, NULL};
  out = wf_run(r, 30, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "population: 4 members, 3 rounds of 8192 env steps"));
  for (int m = 0; m < 4; m++) {
    char row[16];
    snprintf(row, sizeof row, "\nm%02d    3 ", m);
    assert_non_null(strstr(out, row));
  }
  assert_non_null(strstr(out, "@v"));
  free(out);

  /* the members' learning rates, round by round, drawn in one command (where gnuplot is) */
  if (access("/usr/bin/gnuplot", X_OK) == 0) {
    char png[600];
    snprintf(png, sizeof png, "%s/pop-lr.png", wf_dir);
    char *p[] = {wf_shoal, "plot",   "--sweep", "pop", "--store", uri, "--metric", "hparam/ppo.lr",
                 "--out",  png,      NULL};
    out = wf_run(p, 60, &rc);
    printf("%s", out);
    assert_int_equal(rc, 0);
    for (int m = 0; m < 4; m++) { /* every member's run is on it */
      char run[32];
      snprintf(run, sizeof run, "pop-m%02d", m);
      assert_non_null(strstr(out, run));
    }
    struct stat sb;
    assert_int_equal(stat(png, &sb), 0);
    assert_true(sb.st_size > 1000);
    free(out);
  }
}

/* A worker killed in the middle of a round: its trial's heartbeat lapses, the other
 * worker requeues it and resumes the member's run from its last snapshot; the
 * population finishes. */
static void test_killed_worker_member_taken_over(void **state) {
  char path[512];
  snprintf(path, sizeof path, "%s/kill.yaml", wf_dir);
  /* rounds of several seconds (CartPole PPO makes about 100k steps a second here),
   * snapshots every second */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const int64_t ready = 200000; /* the sanitizers' cost: rounds of about 15 s */
#else
  const int64_t ready = 400000;
#endif
  write_pbt(path, "popk", 2, ready, "  learner.snapshot_every_s: 1\n");
  int rc;
  char *a[] = {wf_shoal, "sweep", path, "--store", uri, NULL};
  free(wf_run(a, 60, &rc));
  assert_int_equal(rc, 0);
  char *wa[] = {wf_shoal, "worker",      "--sweep", "popk",    "--store", uri, "--name",
                "wa",     "--heartbeat", "0.5",     "--stale", "3",       NULL};
  char *wb[] = {wf_shoal, "worker",      "--sweep", "popk",    "--store", uri, "--name",
                "wb",     "--heartbeat", "0.5",     "--stale", "3",       NULL};
  wf_proc pa, pb;
  wf_start(&pa, wa);
  free(wf_wait_text(pa.out, " as run ", 60));
  usleep(3000000); /* the member's first round is training and has snapshots */
  assert_int_equal(kill(pa.pid, SIGKILL), 0);
  assert_int_equal(wf_wait(&pa, 30), 128 + SIGKILL);
  /* the round it was in: its last " as run " line */
  char *out = wf_slurp(pa.out, NULL), tid[32] = "";
  for (const char *p = strstr(out, "trial "); p; p = strstr(p + 1, "trial "))
    if (strstr(p, " as run ") && strcspn(p, "\n") > (size_t)(strstr(p, " as run ") - p))
      sscanf(p, "trial %31s", tid);
  free(out);
  assert_true(tid[0]);
  printf("killed worker wa during trial %s\n", tid);
  wf_start(&pb, wb);
  assert_int_equal(wf_wait(&pb, 500), 0);
  out = wf_slurp(pb.out, NULL);
  printf("%s", out);
  assert_non_null(strstr(out, "requeued 1 trial whose heartbeat lapsed"));
  free(out);
  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, uri, &err), 0);
  store_trial *t;
  size_t n;
  assert_int_equal(store_trial_list(st, "popk", &t, &n, &err), 0);
  assert_int_equal(n, 8);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(t[i].status, STORE_TRIAL_DONE);
    if (!strcmp(t[i].id, tid)) {
      assert_int_equal(t[i].attempt, 2);
      assert_string_equal(t[i].worker, "wb");
    }
  }
  store_trials_free(t, n);
  store_close(st);
}

/* A round trained but not recorded: its worker died after the member's run reached the
 * round's step limit. Played here by a worker that claims the round and vanishes while
 * the round's run, started as a worker starts it, trains to its end. The next worker
 * requeues the round, finds its training in the run (`shoal run --resume` would refuse:
 * nothing left to train), records it from the store, and the population goes on. */
static void test_round_trained_but_not_recorded(void **state) {
  char path[512];
  snprintf(path, sizeof path, "%s/ghost.yaml", wf_dir);
  write_pbt(path, "popg", 2, 8192, "");
  int rc;
  char *a[] = {wf_shoal, "sweep", path, "--store", uri, NULL};
  free(wf_run(a, 60, &rc));
  assert_int_equal(rc, 0);
  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, uri, &err), 0);
  store_trial t = {0};
  assert_int_equal(store_trial_claim(st, "popg", "ghost", &t, &err), 0);
  assert_string_equal(t.id, "m00-r000");
  char cfg[600];
  snprintf(cfg, sizeof cfg, "%s/ghost-m00.yaml", wf_dir);
  FILE *f = fopen(cfg, "w");
  assert_non_null(f);
  fputs(t.params, f);
  fclose(f);
  store_trial_clear(&t);
  char set_store[1100];
  snprintf(set_store, sizeof set_store, "store.uri=%s", uri);
  /* The ghost's run trained past the round's limit (8192), but its newest snapshot is
   * from 4096 steps: it was killed after its metrics said 8192 and before its final
   * snapshot. `shoal run --resume` counts the steps its metrics show, so the round must
   * be recorded from the store, not resumed (that is refused: nothing left to train). */
  char *r[] = {wf_shoal, "run",   cfg,     "--set", "run.name=popg-m00",
               "--set",  set_store, "--set", "run.max_env_steps=4096", "--quiet", NULL};
  char *out = wf_run(r, 120, &rc);
  assert_int_equal(rc, 0);
  free(out);
  store_metric past = {.step = 8192, .time = 1.8e9, .value = 2.0};
  snprintf(past.run, sizeof past.run, "popg-m00");
  snprintf(past.name, sizeof past.name, "train_seconds");
  assert_int_equal(store_metrics_append(st, &past, 1, &err), 0);
  store_close(st);
  sleep(4); /* the ghost's heartbeat (at the claim) is older than --stale */
  char *wb[] = {wf_shoal, "worker", "--sweep", "popg", "--store", uri, "--name", "wb",
                "--heartbeat", "0.5", "--stale", "3", NULL};
  out = wf_run(wb, 300, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "requeued 1 trial whose heartbeat lapsed"));
  assert_non_null(strstr(out, "trial m00-r000: run popg-m00 already has its"));
  assert_non_null(strstr(out, "8 trials run, 0 failed"));
  free(out);
  assert_int_equal(store_open(&st, uri, &err), 0);
  store_trial *all;
  size_t n;
  assert_int_equal(store_trial_list(st, "popg", &all, &n, &err), 0);
  assert_int_equal(n, 8);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(all[i].status, STORE_TRIAL_DONE);
    if (!strcmp(all[i].id, "m00-r000")) {
      assert_non_null(strstr(all[i].result, "\"reason\":\"trained before\""));
      assert_null(strstr(all[i].result, "\"score\":null"));
    }
  }
  store_trials_free(all, n);
  store_close(st);
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "file";
  if (argc > 2) cmocka_set_test_filter(argv[2]); /* one test (ctest runs each apart) */
  if (wf_setup("pbt")) return 1;
  if (!strcmp(backend, "mongodb")) {
    int mrc = mongo_test_uri(uri, sizeof uri, "shoal_test_pbt");
    if (mrc) {
      wf_teardown();
      return mrc;
    }
  } else {
    file_backend = true;
    snprintf(uri, sizeof uri, "file://%s/store", wf_dir);
  }
  /* The takeover runs on the file store only, and outside the sanitizer builds (label
   * slow): the trials' requeue it rests on is tested on both stores (test_store) and
   * under the sanitizers (test_workflow_sweep), and the suite's time is bounded. */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_population_exploits_through_the_store),
      cmocka_unit_test(test_round_trained_but_not_recorded),
      cmocka_unit_test(test_killed_worker_member_taken_over),
  };
  const struct CMUnitTest mongo[] = {
      cmocka_unit_test(test_population_exploits_through_the_store),
  };
  int rc = file_backend ? cmocka_run_group_tests_name("pbt_file", tests, NULL, NULL)
                        : cmocka_run_group_tests_name("pbt_mongodb", mongo, NULL, NULL);
  wf_teardown();
  return rc;
}
