/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/faults/test_faults_input.c — bad input to a real shoal-learner (Ape-X, CartPole)
 * from a client that speaks the protocol correctly but sends values no actor of the
 * run can produce. For each case the learner refuses the batch whole, its replay and
 * exactly-once table are unchanged, and it goes on serving and training:
 *  - an action outside the env's action space (once stopped the learner when sampled),
 *  - a negative priority in the second env group (once left the first group inserted),
 *  - terminated = 2, and a reward of the wrong sign of infinity is the rpc layer's,
 *  - a restarted actor whose first batch is refused: its next batches (seq 2, 3, ...)
 *    go in, not dropped as resends of the old process's seqs.
 * Security defaults: a learner that would listen beyond loopback without a token
 * refuses to start (unless learner.insecure says so), and a token in the config that
 * $SHOAL_TOKEN contradicts is an error, not a silent choice.
 * The stored config is the truth: `shoal init` of an existing run with other values is
 * refused, naming them, and a learner that trains with other values records them.
 * run.max_seconds bounds the run across resumes.
 * And a learner started without `shoal init` records its run itself, so its writes are
 * not refused, and its final line's store_ok is true only because everything landed.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <time.h>

#include "rpc/rpc.h"
#include "tests/proc_util.h"
#include "tests/faults/faults_util.h"

static const char *RUN = "input1";
enum { ENVS = 2, STEPS = 8, ROWS = ENVS * STEPS };

/* One batch of 2 envs x 8 steps, no episode ends: the columns of an Ape-X batch. */
typedef struct batch {
  float obs[ROWS * 4], reward[ROWS], prio[ROWS];
  int32_t action[ROWS], env[ROWS];
  uint8_t term[ROWS], trunc[ROWS], tail[ROWS];
  rpc_batch b;
} batch;

static void batch_fill(batch *x) {
  memset(x, 0, sizeof *x);
  for (int r = 0; r < ROWS; r++) {
    for (int j = 0; j < 4; j++) x->obs[r * 4 + j] = 0.01f * (float)(r + j);
    x->reward[r] = 1;
    x->prio[r] = 1;
    x->action[r] = r % 2;
    x->env[r] = r / STEPS;
  }
  static const char *names[8] = {"obs",       "action",   "reward", "terminated",
                                 "truncated", "priority", "env",    "tail"};
  static const int dtypes[8] = {RPC_F32, RPC_I32, RPC_F32, RPC_U8,
                                RPC_U8,  RPC_F32, RPC_I32, RPC_U8};
  const void *data[8] = {x->obs, x->action, x->reward, x->term, x->trunc, x->prio, x->env, x->tail};
  const size_t row[8] = {16, 4, 4, 1, 1, 4, 4, 1};
  x->b.n = ROWS;
  x->b.ncols = 8;
  for (int c = 0; c < 8; c++)
    x->b.cols[c] =
        (rpc_column){.name = names[c], .dtype = dtypes[c], .data = data[c], .bytes = row[c] * ROWS};
  x->b.cols[0].ndim = 1;
  x->b.cols[0].shape[0] = 4;
}

static rpc_client *client(int port, int actor) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  rpc_client_config cc = {.target = addr,
                          .run_id = RUN,
                          .actor_id = (uint64_t)actor,
                          .queue_batches = 64,
                          .backpressure = RPC_BLOCK,
                          .block_timeout_s = 5};
  rpc_client *c = NULL;
  shoal_error err = {0};
  if (rpc_client_create(&cc, &c, &err)) fail_msg("client: %s", err.msg);
  return c;
}

static void push(rpc_client *c, batch *x) {
  shoal_error err = {0};
  if (rpc_client_push(c, &x->b, &err)) fail_msg("push: %s", err.msg);
}

/* Closes c once everything it pushed is answered; returns its counters. */
static rpc_client_stats finish(rpc_client *c) {
  rpc_client_stats st;
  for (int i = 0; i < 200; i++) {
    rpc_client_stats_get(c, &st);
    if (!st.pending) break;
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
  }
  shoal_error err = {0};
  rpc_client_close(c, 5.0, &st, &err);
  return st;
}

/* A Status counter of the learner on port. */
static double status(int port, const char *key) {
  char *s = fu_status(port);
  if (!s) fail_msg("the learner did not answer Status");
  double v = fu_json(s, key);
  free(s);
  return v;
}

static void test_bad_batches_change_nothing(void **state) {
  char cfg[512], uri[400];
  snprintf(uri, sizeof uri, "file://%s/runs", wf_dir);
  snprintf(cfg, sizeof cfg, "%s/input.yaml", wf_dir);
  fu_write_config(cfg, uri, 2, 30, "");
  fu_init(cfg, RUN);
  /* Prioritized replay, so priorities are checked, and warm-up low enough to train. */
  char bin[4200];
  snprintf(bin, sizeof bin, "%s/bin/shoal-learner", getenv("SHOAL_BINARY_DIR"));
  char *argv[] = {bin,
                  "--config",
                  cfg,
                  "--run",
                  (char *)RUN,
                  "--set",
                  "replay.prioritized=true",
                  "--set",
                  "learner.warmup=64",
                  "--set",
                  "learner.replay_ratio=1",
                  NULL};
  wf_proc learner;
  fu_start(&learner, argv);
  char *out = wf_wait_text(learner.out, "\"event\":\"listening\"", 60);
  int port = atoi(strstr(out, "\"port\":") + 7);
  free(out);

  /* Actor 0's first process: 5 good batches. */
  batch x;
  rpc_client *c = client(port, 0);
  batch_fill(&x);
  for (int i = 0; i < 5; i++) push(c, &x);
  rpc_client_stats st = finish(c);
  assert_int_equal(st.delivered, 5);
  assert_int_equal(status(port, "batches_inserted"), 5);
  assert_int_equal(status(port, "replay_held"), 5 * ROWS);

  /* Actor 0 restarted: its first batch is refused (a negative priority in env 1's
   * group, after a good env 0 group); then seqs 2..5 are good and must all go in. */
  c = client(port, 0);
  batch_fill(&x);
  x.prio[STEPS + 3] = -1;
  push(c, &x);
  batch_fill(&x);
  for (int i = 0; i < 4; i++) push(c, &x);
  st = finish(c);
  assert_int_equal(st.rejected, 1);
  assert_int_equal(st.delivered, 4);
  assert_int_equal(status(port, "batches_inserted"), 9);
  assert_int_equal(status(port, "resent_dropped"), 0);
  assert_int_equal(status(port, "replay_held"), 9 * ROWS);

  /* Actor 1: an action outside CartPole's two, terminated = 2: each refused whole. */
  c = client(port, 1);
  batch_fill(&x);
  x.action[5] = 5;
  push(c, &x);
  batch_fill(&x);
  x.term[2] = 2;
  push(c, &x);
  batch_fill(&x);
  for (int i = 0; i < 3; i++) push(c, &x);
  st = finish(c);
  assert_int_equal(st.rejected, 2);
  assert_int_equal(st.delivered, 3);
  assert_int_equal(status(port, "replay_held"), 12 * ROWS);
  assert_true(status(port, "bad_batches") >= 3);

  /* Still training and serving: updates go on past warm-up, and a clean stop. */
  double u0 = status(port, "updates");
  c = client(port, 1);
  for (int i = 0; i < 20; i++) push(c, &x);
  finish(c);
  double u1 = 0;
  for (int i = 0; i < 100 && u1 <= u0; i++) {
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    u1 = status(port, "updates");
  }
  assert_true(u1 > u0);
  kill(learner.pid, SIGTERM);
  assert_int_equal(wf_wait(&learner, 60), 0);
  char *log = wf_slurp(learner.out, NULL);
  assert_non_null(strstr(log, "\"event\":\"done\""));
  free(log);
}

static void test_learner_records_its_run(void **state) {
  char cfg[512], uri[400], path[700];
  snprintf(uri, sizeof uri, "file://%s/runs2", wf_dir);
  snprintf(cfg, sizeof cfg, "%s/noinit.yaml", wf_dir);
  fu_write_config(cfg, uri, 1, 0.5, "");
  wf_proc learner;
  int port = fu_learner_start(&learner, cfg, RUN, 0, false);
  batch x;
  batch_fill(&x);
  rpc_client *c = client(port, 0);
  for (int i = 0; i < 3; i++) push(c, &x);
  assert_int_equal(finish(c).delivered, 3);
  kill(learner.pid, SIGTERM);
  assert_int_equal(wf_wait(&learner, 60), 0);
  char *out = wf_slurp(learner.out, NULL); /* stdout and stderr */
  assert_non_null(strstr(out, "was not in the store: recorded it"));
  assert_non_null(strstr(out, "\"store_ok\":true"));
  snprintf(path, sizeof path, "%s/runs2/%s/config.yaml", wf_dir, RUN);
  char *yaml = wf_slurp(path, NULL);
  assert_non_null(yaml);
  assert_non_null(strstr(yaml, "CartPole-v1"));
  free(yaml), free(out);
}

/* Runs shoal-learner on cfg with --set set and set2 for half a second; returns its
 * exit status and output. */
static int learner_once(const char *cfg, const char *set, const char *set2, char **out) {
  char bin[4200];
  snprintf(bin, sizeof bin, "%s/bin/shoal-learner", getenv("SHOAL_BINARY_DIR"));
  char *argv[] = {bin,         "--config", (char *)cfg,  "--run", (char *)RUN,           "--set",
                  (char *)set, "--set",    (char *)set2, "--set", "run.max_seconds=0.5", NULL};
  int rc;
  *out = wf_run(argv, 60, &rc);
  return rc;
}

static void test_security_defaults(void **state) {
  char cfg[512], uri[400], *out;
  snprintf(uri, sizeof uri, "file://%s/runs3", wf_dir);
  snprintf(cfg, sizeof cfg, "%s/sec.yaml", wf_dir);
  fu_write_config(cfg, uri, 1, 30, "");
  unsetenv("SHOAL_TOKEN");
  const char *any = "learner.listen=0.0.0.0:0";
  assert_int_not_equal(learner_once(cfg, any, "learner.insecure=false", &out), 0);
  assert_non_null(strstr(out, "there is no token"));
  free(out);
  /* Said explicitly, it serves (and stops at max_seconds). */
  assert_int_equal(learner_once(cfg, any, "learner.insecure=true", &out), 0);
  assert_non_null(strstr(out, "\"event\":\"done\""));
  free(out);
  /* A token from the environment is used; one the config contradicts is refused. */
  setenv("SHOAL_TOKEN", "tok-env", 1);
  assert_int_equal(learner_once(cfg, any, "learner.insecure=false", &out), 0);
  free(out);
  assert_int_not_equal(learner_once(cfg, any, "learner.token=tok-other", &out), 0);
  assert_non_null(strstr(out, "$SHOAL_TOKEN differ"));
  free(out);
  unsetenv("SHOAL_TOKEN");
}

static void test_stored_config_is_the_truth(void **state) {
  char cfg[512], uri[400], set[128], path[700];
  snprintf(uri, sizeof uri, "file://%s/runs4", wf_dir);
  snprintf(cfg, sizeof cfg, "%s/truth.yaml", wf_dir);
  fu_write_config(cfg, uri, 1, 30, "");
  fu_init(cfg, "truth1");
  snprintf(set, sizeof set, "run.name=truth1");
  char *again[] = {wf_shoal, "init", cfg, "--set", set, "--set", "dqn.lr=0.01", NULL};
  int rc;
  char *out = wf_run(again, 60, &rc);
  if (rc == 0 || !strstr(out, "with another config (dqn.lr: 1e-05 -> 0.01)"))
    fail_msg("shoal init with another lr: status %d:\n%s", rc, out);
  free(out);
  char *same[] = {wf_shoal, "init", cfg, "--set", set, NULL};
  out = wf_run(same, 60, &rc);
  assert_int_equal(rc, 0);
  free(out);
  /* A learner given another lr records it: the store shows what trains. */
  char bin[4200];
  snprintf(bin, sizeof bin, "%s/bin/shoal-learner", getenv("SHOAL_BINARY_DIR"));
  char *learner[] = {bin,           "--config", cfg,
                     "--run",       "truth1",   "--set",
                     "dqn.lr=0.02", "--set",    "run.max_seconds=0.5",
                     NULL};
  out = wf_run(learner, 60, &rc);
  assert_int_equal(rc, 0);
  if (!strstr(out, "trains with 2 values its stored config does not hold") ||
      !strstr(out, "dqn.lr: 1e-05 -> 0.02") || !strstr(out, "run.max_seconds: 0 -> 0.5"))
    fail_msg("learner: %s", out);
  free(out);
  snprintf(path, sizeof path, "%s/runs4/truth1/config.yaml", wf_dir);
  char *yaml = wf_slurp(path, NULL);
  if (!strstr(yaml, "lr: 0.02")) fail_msg("stored config:\n%s", yaml);
  free(yaml);
}

/* run.max_seconds bounds the run, not each learner process: a resumed learner trains
 * for what is left, and its final line counts the run's training time. */
static void test_max_seconds_spans_resumes(void **state) {
  char cfg[512], uri[400];
  snprintf(uri, sizeof uri, "file://%s/runs5", wf_dir);
  snprintf(cfg, sizeof cfg, "%s/time.yaml", wf_dir);
  fu_write_config(cfg, uri, 1, 30, "");
  fu_init(cfg, "time1");
  char bin[4200];
  snprintf(bin, sizeof bin, "%s/bin/shoal-learner", getenv("SHOAL_BINARY_DIR"));
  char *first[] = {bin,
                   "--config",
                   cfg,
                   "--run",
                   "time1",
                   "--set",
                   "run.max_seconds=2",
                   "--set",
                   "learner.log_every_s=0.2",
                   NULL};
  int rc;
  double t = shoal_now_s();
  char *out = wf_run(first, 60, &rc);
  double first_s = shoal_now_s() - t;
  assert_int_equal(rc, 0);
  free(out);
  char *second[] = {bin,     "--config",
                    cfg,     "--run",
                    "time1", "--resume",
                    "--set", "run.max_seconds=3",
                    "--set", "learner.log_every_s=0.2",
                    NULL};
  t = shoal_now_s();
  out = wf_run(second, 60, &rc);
  double second_s = shoal_now_s() - t;
  assert_int_equal(rc, 0);
  const char *done = strstr(out, "\"event\":\"done\"");
  assert_non_null(done);
  double trained = fu_json(done, "t");
  if (!(trained >= 3.0 && trained < 4.5) || !(second_s < first_s))
    fail_msg("resumed: run trained %.2f s in all, this process %.2f s (the first %.2f s):\n%s",
             trained, second_s, first_s, out);
  free(out);
}

static int setup(void **state) {
  (void)state;
  return wf_setup("faults-input");
}
static int teardown(void **state) {
  (void)state;
  return wf_teardown();
}

int main(void) {
  const struct CMUnitTest all[] = {
      cmocka_unit_test_teardown(test_bad_batches_change_nothing, fu_kill_all),
      cmocka_unit_test_teardown(test_learner_records_its_run, fu_kill_all),
      cmocka_unit_test_teardown(test_security_defaults, fu_kill_all),
      cmocka_unit_test_teardown(test_stored_config_is_the_truth, fu_kill_all),
      cmocka_unit_test_teardown(test_max_seconds_spans_resumes, fu_kill_all),
  };
  return cmocka_run_group_tests_name("faults_input", all, setup, teardown);
}
