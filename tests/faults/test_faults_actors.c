/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Actor faults with the real programs.
 *
 *   run_kills           `shoal run` of CartPole Ape-X with 3 actors; the test kills
 *                       actors with SIGKILL at random times for as long as the run
 *                       lasts (dozens of kills); the supervisor restarts each, the
 *                       learner's counters show no rejected, corrupt or doubly
 *                       inserted batch, and the run still solves CartPole (label slow).
 *   before_learner      an actor started before its learner exists retries with
 *                       backoff and starts delivering once the learner is up; then the
 *                       learner is killed and restarted on the same run and port, and
 *                       the same actor process reconnects on its own.
 *
 *   run_learner_kill    `shoal run` of CartPole Ape-X on a file store: once the replay is
 *                       full, its learner is killed with SIGKILL; the supervisor restarts
 *                       it, and it rebuilds the whole replay (size, priorities) from the
 *                       replay log with the step counter continuing; the run then goes on
 *                       with no rejected or bad batch and stops cleanly.
 *   run_learner_kill_mongo  the same on MongoDB (the tests' stand-in server, or
 *                       $SHOAL_TEST_MONGO_URI).
 *
 * Prints FAULTS lines for docs/reliability.md's table. `test_faults_actors run_kills` runs one.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
// cmocka after the standard headers
#include <cmocka.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include "tests/proc_util.h"
#include "tests/faults/faults_util.h"
#include "tests/mongo_test.h"

static char apex_cfg[4200];

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* A loopback port nobody listens on now. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

static void test_run_kills(void **state) {
  (void)state;
  char store_set[400];
  snprintf(store_set, sizeof store_set, "store.uri=file://%s/runs", wf_dir);
  /* The goal is out of reach until the test has killed two dozen actors; then it is
   * set to solved-CartPole live (`shoal set`), and the kills go on until the run ends. */
  char *argv[] = {wf_shoal,
                  "run",
                  apex_cfg,
                  "--set",
                  store_set,
                  "--set",
                  "run.name=kills",
                  "--set",
                  "actors=3",
                  "--set",
                  "run.solve_return=1e9",
                  "--set",
                  "run.max_env_steps=3000000",
                  "--no-tensorboard",
                  NULL};
  wf_proc p;
  double t0 = shoal_now_s();
  int port = fu_run_start(&p, argv);
  shoal_rng rng;
  shoal_rng_seed(&rng, (uint64_t)time(NULL));
  int kills = 0, status_rc = -1;
  pid_t killed[3] = {0};
  bool goal_set = false;
  char *last = NULL;
  double t_status = 0;
  for (;;) {
    int st;
    if (waitpid(p.pid, &st, WNOHANG) == p.pid) {
      status_rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    if (shoal_now_s() - t0 > 400) {
      kill(-p.pid, SIGKILL);
      waitpid(p.pid, &st, 0);
      fail_msg("the run did not finish within 400 s (%d kills)", kills);
    }
    sleep_s(0.1 + 0.3 * shoal_rng_uniform(&rng));
    int k = (int)shoal_rng_below(&rng, 3);
    char want[64];
    snprintf(want, sizeof want, "--index %d --learner", k);
    pid_t victim = fu_find_child(p.pid, want);
    /* Each process once: a killed one lingers (a zombie) until the supervisor reaps it. */
    if (victim > 0 && victim != killed[k] && kill(victim, SIGKILL) == 0) {
      killed[k] = victim;
      kills++;
    }
    if (kills >= 24 && !goal_set) {
      char addr[64];
      snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
      char *sargv[] = {wf_shoal, "set", addr, "run.solve_return=475", NULL};
      int src;
      char *so = wf_run(sargv, 30, &src);
      if (src) fail_msg("shoal set: %s", so);
      free(so);
      goal_set = true;
    }
    if (shoal_now_s() - t_status > 2) {
      char *s = fu_status(port);
      if (s) free(last), last = s;
      t_status = shoal_now_s();
    }
  }
  char *out = wf_slurp(p.out, NULL);
  double wall = shoal_now_s() - t0;
  const char *sum = strstr(out, "restarts: learner ");
  assert_non_null(sum);
  int learner_restarts = -1, actor_restarts = -1;
  sscanf(sum, "restarts: learner %d, actors %d", &learner_restarts, &actor_restarts);
  assert_non_null(last);
  double batches = fu_json(last, "batches"), inserted = fu_json(last, "batches_inserted"),
         resent = fu_json(last, "resent_dropped");
  printf(
      "FAULTS run_kills kills=%d actor_restarts=%d wall_s=%.1f solved=%s rejected=%.0f "
      "bad_batches=%.0f batches=%.0f inserted=%.0f resent_dropped=%.0f rpc_duplicates=%.0f "
      "stream_cuts=%.0f\n",
      kills, actor_restarts, wall, strstr(out, " solved after ") ? "yes" : "no",
      fu_json(last, "rejected"), fu_json(last, "bad_batches"), batches, inserted, resent,
      fu_json(last, "duplicates"), fu_json(last, "stream_cuts"));
  if (status_rc != 0 || !strstr(out, " solved after ")) printf("%s", out);
  assert_int_equal(status_rc, 0);
  assert_non_null(strstr(out, " solved after "));
  assert_true(kills >= 24);
  /* Each kill was a restart (one may land as the run stops). */
  assert_int_equal(learner_restarts, 0);
  assert_true(actor_restarts >= kills - 1 && actor_restarts <= kills);
  /* The learner took every batch it accepted exactly once, and none was bad. */
  assert_true(fu_json(last, "rejected") == 0 && fu_json(last, "bad_batches") == 0);
  /* Exactly: the stop's own figures, taken when no batch was in flight (a Status taken
   * while one is can find it inserted and not yet counted as taken). */
  const char *acct = strstr(out, "; batches: ");
  assert_non_null(acct);
  double fb = -1, fi = -2, fr = -3;
  assert_int_equal(sscanf(acct, "; batches: %lf taken, %lf inserted, %lf resends dropped", &fb, &fi,
                          &fr),
                   3);
  printf("FAULTS run_kills final: batches=%.0f inserted=%.0f resent_dropped=%.0f\n", fb, fi, fr);
  assert_true(fb > 0 && fb == fi + fr);
  /* Every kill started a new incarnation: its streams were cut, not joined. */
  assert_true(fu_json(last, "stream_cuts") >= 3);
  free(last);
  free(out);
}

static void test_before_learner(void **state) {
  (void)state;
  char cfg[600], store_set[600];
  snprintf(cfg, sizeof cfg, "%s/early.yaml", wf_dir);
  snprintf(store_set, sizeof store_set, "store.uri=file://%s/runs-early", wf_dir);
  {
    char *argv[] = {wf_shoal,
                    "init",
                    apex_cfg,
                    "--set",
                    "run.name=early",
                    "--set",
                    store_set,
                    "--set",
                    "actors=1",
                    "--set",
                    "run.solve_return=0",
                    "--set",
                    "learner.snapshot_every_s=1",
                    "--out",
                    cfg,
                    NULL};
    int rc;
    char *o = wf_run(argv, 60, &rc);
    if (rc) fail_msg("shoal init: %s", o);
    free(o);
  }
  int port = free_port();
  char addr[64], actor_bin[4200];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  snprintf(actor_bin, sizeof actor_bin, "%s/bin/shoal-actor", getenv("SHOAL_BINARY_DIR"));
  char *aargv[] = {actor_bin, "--config", cfg,         "--run", "early",
                   "--index", "0",        "--learner", addr,    NULL};
  wf_proc actor, L;
  fu_start(&actor, aargv);
  sleep_s(2.0); /* nobody listens: the actor retries */
  int st;
  assert_int_equal(waitpid(actor.pid, &st, WNOHANG), 0);

  double t_up = shoal_now_s(), t_first = 0;
  assert_int_equal(fu_learner_start(&L, cfg, "early", port, false), port);
  while (shoal_now_s() - t_up < 30 && !t_first) {
    char *s = fu_status(port);
    if (s && fu_json(s, "batches") > 0) t_first = shoal_now_s();
    free(s);
    if (!t_first) sleep_s(0.05);
  }
  assert_true(t_first > 0);
  sleep_s(2.5); /* a snapshot and a replay save */

  /* The learner dies; the actor keeps running and reconnects to its successor. */
  kill(L.pid, SIGKILL);
  assert_int_equal(wf_wait(&L, 10), 128 + SIGKILL);
  sleep_s(1.5);
  assert_int_equal(waitpid(actor.pid, &st, WNOHANG), 0);
  double t_restart = shoal_now_s(), t_back = 0;
  assert_int_equal(fu_learner_start(&L, cfg, "early", port, true), port);
  while (shoal_now_s() - t_restart < 30 && !t_back) {
    char *s = fu_status(port);
    if (s && fu_json(s, "batches") > 0) t_back = shoal_now_s();
    free(s);
    if (!t_back) sleep_s(0.05);
  }
  assert_true(t_back > 0);
  kill(actor.pid, SIGTERM);
  assert_int_equal(wf_wait(&actor, 30), 0);
  kill(L.pid, SIGTERM);
  assert_int_equal(wf_wait(&L, 60), 0);
  char *aout = wf_slurp(actor.out, NULL);
  const char *sum = strstr(aout, "reconnects ");
  assert_non_null(sum);
  long reconnects = atol(sum + strlen("reconnects "));
  printf(
      "FAULTS before_learner first_batch_s=%.2f (after the learner came up) "
      "reconnect_s=%.2f (after its restart) actor_reconnects=%ld\n",
      t_first - t_up, t_back - t_restart, reconnects);
  /* The client's backoff is capped at 2 s (with jitter): it is back within a few. */
  assert_true(t_first - t_up < 10);
  assert_true(t_back - t_restart < 10);
  assert_true(reconnects >= 1);
  free(aout);
}

static int setup(void **state) {
  (void)state;
  if (wf_setup("faults-actors")) return -1;
  snprintf(apex_cfg, sizeof apex_cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  return 0;
}
static int teardown(void **state) {
  (void)state;
  return wf_teardown();
}

/* A number after key in text (0 when absent). */
static double after_text(const char *text, const char *key) {
  const char *k = strstr(text, key);
  return k ? atof(k + strlen(key)) : 0;
}

static void run_learner_kill(const char *uri, const char *label) {
  char store_set[1200];
  snprintf(store_set, sizeof store_set, "store.uri=%s", uri);
  enum { CAP = 50000 };
  char *argv[] = {wf_shoal,
                  "run",
                  apex_cfg,
                  "--set",
                  store_set,
                  "--set",
                  "run.name=lkill",
                  "--set",
                  "run.solve_return=0",
                  "--set",
                  "run.max_env_steps=100000000",
                  "--set",
                  "replay.capacity=50000",
                  "--set",
                  "learner.snapshot_every_s=1",
                  "--no-tensorboard",
                  NULL};
  wf_proc p;
  int port = fu_run_start(&p, argv);
  /* The replay full and a priority checkpoint or two written. */
  char *before = NULL;
  for (double t0 = shoal_now_s(); shoal_now_s() - t0 < 90;) {
    free(before);
    before = fu_status(port);
    if (before && fu_json(before, "replay_held") >= CAP && fu_json(before, "updates") > 2000 &&
        fu_json(before, "uptime_s") > 3)
      break;
    sleep_s(0.2);
  }
  assert_non_null(before);
  assert_true(fu_json(before, "replay_held") >= CAP);
  pid_t victim = fu_find_child(p.pid, "shoal-learner");
  assert_true(victim > 0);
  double t_kill = shoal_now_s();
  kill(victim, SIGKILL);
  char *out = wf_wait_text(p.out, "learner restarted on", 60);
  double t_back = shoal_now_s() - t_kill;
  const char *r = strstr(out, "replay rebuilt from the log:");
  assert_non_null(r);
  double held = after_text(r, "log: "), prios = after_text(r, "batches, ");
  double logged_steps = after_text(r, "s; ");
  const char *res = strstr(out, "resumed run lkill at version ");
  assert_non_null(res);
  free(out);
  sleep_s(2.0);
  char *after = fu_status(port);
  assert_non_null(after);
  kill(p.pid, SIGTERM);
  assert_int_equal(wf_wait(&p, 90), 0);
  out = wf_slurp(p.out, NULL);
  printf(
      "FAULTS run_learner_kill store=%s held_before=%.0f rebuilt=%.0f priorities=%.0f "
      "env_steps %.0f (before the kill) -> %.0f logged -> %.0f (2 s after) back_s=%.2f "
      "resent_dropped=%.0f\n",
      label, fu_json(before, "replay_held"), held, prios, fu_json(before, "env_steps"),
      logged_steps, fu_json(after, "env_steps"), t_back, fu_json(after, "resent_dropped"));
  /* What the log held came back: all of the replay, or everything logged when the
   * store lagged (on the stand-in segments can wait), with the checkpoint's priorities
   * on much of it. */
  assert_true(held == CAP || held >= 0.95 * logged_steps);
  assert_true(prios > held / 4);
  /* The step counter continues from what the log held, and that is behind the kill by
   * at most what waited for the store at the last look (~35 bytes a CartPole row) plus
   * log_flush_s and the time from that look to the kill (1.5 s of ingest). */
  double sps = fu_json(before, "env_steps") / fu_json(before, "uptime_s");
  double bound = fu_json(before, "log_pending_bytes") / 35 + 1.5 * sps + 2000;
  printf("FAULTS run_learner_kill store=%s lost_steps=%.0f bound=%.0f\n", label,
         fu_json(before, "env_steps") - logged_steps, bound);
  assert_true(fu_json(before, "env_steps") - logged_steps <= bound);
  assert_true(fu_json(after, "env_steps") > logged_steps);
  assert_true(fu_json(after, "replay_held") >= CAP);
  assert_true(fu_json(after, "bad_batches") == 0 && fu_json(after, "rejected") == 0);
  /* The summary counts the one restart (it is printed when the learner's last line came
   * through; under a loaded sanitizer build the stop may outlast that). */
  const char *sum = strstr(out, "restarts: learner ");
  if (!sum || atoi(sum + strlen("restarts: learner ")) != 1) {
    size_t ol = strlen(out);
    fprintf(stderr, "shoal run output (end):\n%s\n", out + (ol > 4000 ? ol - 4000 : 0));
  }
  if (sum) assert_int_equal(atoi(sum + strlen("restarts: learner ")), 1);
  free(out), free(before), free(after);
}

static void test_run_learner_kill(void **state) {
  (void)state;
  char uri[700];
  snprintf(uri, sizeof uri, "file://%s/runs", wf_dir);
  run_learner_kill(uri, "file");
}

static void test_run_learner_kill_mongo(void **state) {
  (void)state;
  char uri[1024];
  int rc = mongo_test_uri(uri, sizeof uri, "shoal_test_run_learner_kill");
  if (rc == 77) skip();
  assert_int_equal(rc, 0);
  run_learner_kill(uri, "mongodb (stand-in)");
}

int main(int argc, char **argv) {
  const struct CMUnitTest all[] = {
      cmocka_unit_test_teardown(test_run_kills, fu_kill_all),
      cmocka_unit_test_teardown(test_before_learner, fu_kill_all),
      cmocka_unit_test_teardown(test_run_learner_kill, fu_kill_all),
      cmocka_unit_test_teardown(test_run_learner_kill_mongo, fu_kill_all),
  };
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  return cmocka_run_group_tests_name("faults_actors", all, setup, teardown);
}
