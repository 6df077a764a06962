/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_onpolicy_dist.c — IMPALA and PPO (APPO) on the distributed runtime: real
 * learner and actor processes on loopback, bounded in env steps and time.
 *   solve (label slow, `test_onpolicy_dist solve`):
 *     impala:   `shoal run configs/cartpole-impala.yaml` solves CartPole-v1 (mean greedy
 *               return >= 475 over 100 episodes) within 1,000,000 env steps, and
 *               `shoal eval` of the stored snapshot plays well on other seeds;
 *     ppo:      `shoal run configs/cartpole-ppo.yaml` with replay.max_staleness 8 solves
 *               it within 500,000 env steps, with a measured policy lag > 0 and <= 8;
 *     pendulum: `shoal run configs/pendulum-ppo.yaml` reaches a greedy mean above −300
 *               within 400,000 env steps (Gaussian policy, normalised observations).
 *   lstm (`test_onpolicy_dist lstm`; label slow in the sanitizer build):
 *     `shoal run configs/cartpole-novel-impala-lstm.yaml` (IMPALA with an LSTM core on
 *     CartPoleNoVel-v1, velocities hidden) reaches a greedy mean >= 90 within 400,000
 *     env steps, where the same run with ac.lstm 0 stays below 70 (the sync trainer's
 *     figures: ~45 without the core, 180-480 with it), and `shoal eval` of its snapshot
 *     (the state carried per episode) plays >= 90 on other seeds.
 *   the rest (`test_onpolicy_dist`):
 *     stale:    a learner started alone (after `shoal init`) trains on unrolls pushed by
 *               this test; one older than replay.max_staleness versions is dropped and
 *               counted, and trains nothing; the learning rate is tuned live;
 *     malformed: wrong T, a missing logp column, NaN, an action out of range, a positive
 *               discrete log-prob, a bad flag and a wrong unroll count are each rejected,
 *               and the learner serves on (a good batch after them trains);
 *     core0:    a learner of a run with an LSTM core trains on unrolls that carry their
 *               initial (h, c) in core0, and rejects one without it, with a wrong
 *               shape, a NaN or an h outside [−1, 1] while it serves on; `shoal eval`
 *               plays its snapshot;
 *     resume:   the learner killed with SIGKILL mid-run is restarted by `shoal run`,
 *               resumes from its snapshot, and its version and step counters continue;
 *     config:   the schema's errors and algo/env mismatches are named. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/shoal.h"
#include "rpc/rpc.h"
#include "tests/proc_util.h"

static char impala_cfg[4200], ppo_cfg[4200], pendulum_cfg[4200], novel_lstm_cfg[4200];

static double number_after(const char *s, const char *key) {
  const char *p = s ? strstr(s, key) : NULL;
  if (!p) return NAN;
  return strtod(p + strlen(key), NULL);
}

static int setup(void **state) {
  if (wf_setup("onpolicy")) return -1;
  snprintf(impala_cfg, sizeof impala_cfg, "%s/configs/cartpole-impala.yaml", wf_src);
  snprintf(ppo_cfg, sizeof ppo_cfg, "%s/configs/cartpole-ppo.yaml", wf_src);
  snprintf(pendulum_cfg, sizeof pendulum_cfg, "%s/configs/pendulum-ppo.yaml", wf_src);
  snprintf(novel_lstm_cfg, sizeof novel_lstm_cfg, "%s/configs/cartpole-novel-impala-lstm.yaml",
           wf_src);
  return 0;
}

static int teardown(void **state) { return wf_teardown(); }

/* `shoal run CONFIG --log-json` with the store in the test's folder; returns the output
 * and points *done at its done line. */
static char *run_json(const char *cfg, const char *run, const char *const *sets, int nsets,
                      double timeout_s, const char **done) {
  char store_set[400], run_set[96];
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", wf_dir);
  snprintf(run_set, sizeof run_set, "run.name=%s", run);
  char *argv[64];
  int n = 0;
  argv[n++] = wf_shoal;
  argv[n++] = "run";
  argv[n++] = (char *)cfg;
  argv[n++] = "--log-json";
  argv[n++] = "--no-tensorboard";
  argv[n++] = "--set";
  argv[n++] = store_set;
  argv[n++] = "--set";
  argv[n++] = run_set;
  for (int i = 0; i < nsets; i++) argv[n++] = "--set", argv[n++] = (char *)sets[i];
  argv[n] = NULL;
  int rc;
  char *out = wf_run(argv, timeout_s, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  *done = strstr(out, "{\"event\":\"done\"");
  assert_non_null(*done);
  return out;
}

static double eval_run_n(const char *run, const char *episodes, bool best) {
  char store_uri[400];
  snprintf(store_uri, sizeof store_uri, "file://%s", wf_dir);
  char *argv[] = {wf_shoal,  "eval",       (char *)run,      "--store",
                  store_uri, "--episodes", (char *)episodes, best ? "--best" : NULL,
                  NULL};
  int rc;
  char *out = wf_run(argv, 120, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  double r = number_after(out, ": return ");
  free(out);
  return r;
}

static double eval_run(const char *run) { return eval_run_n(run, "100", false); }
static double eval_run_best(const char *run) { return eval_run_n(run, "100", true); }

static void test_impala_solves_cartpole(void **state) {
  /* One seed, no retry: the config (rewards scaled, env.norm_reward) solved 40 of 40
   * seeds on each OpenBLAS kernel set with two busy loops beside it (docs/benchmarks.md, "Learning:
   * CartPole and the classic control tasks"). */
  const char *sets[] = {"run.max_env_steps=1000000", "run.seed=1"};
  const char *done = NULL, *run = "impala-solve";
  char *out = run_json(impala_cfg, run, sets, 2, 300, &done);
  printf("%s\n", done);
  assert_non_null(strstr(done, "\"reason\":\"solved\""));
  assert_true(number_after(done, "\"eval\":") >= 475.0);
  double steps = number_after(done, "\"env_steps\":");
  assert_true(steps > 0 && steps <= 1000000 + 2 * 16 * 20 * 4);
  /* V-trace saw actor data from older versions: the lag is measured and within the
   * config's bound (replay.max_staleness 2). */
  assert_true(number_after(done, "\"lag_max\":") <= 2);
  free(out);
  /* The stored snapshot is the policy evaluated last (solved, or the final one). */
  assert_true(eval_run(run) >= 0.9 * number_after(done, "\"eval\":") - 50.0);
}

static void test_ppo_solves_cartpole_with_lag(void **state) {
  const char *sets[] = {"replay.max_staleness=8"};
  const char *done;
  char *out = run_json(ppo_cfg, "ppo-solve", sets, 1, 300, &done);
  assert_non_null(strstr(done, "\"reason\":\"solved\""));
  assert_true(number_after(done, "\"eval\":") >= 475.0);
  assert_true(number_after(done, "\"env_steps\":") <= 500000 + 2 * 4 * 128 * 4);
  /* APPO: the actors run ahead of the learner, so the unrolls trained on are some
   * versions old; the staleness bound caps it. */
  double lag_mean = number_after(done, "\"lag_mean\":"),
         lag_max = number_after(done, "\"lag_max\":");
  printf("policy lag: mean %.2f, max %.0f\n", lag_mean, lag_max);
  assert_true(lag_mean > 0);
  assert_true(lag_max >= 1 && lag_max <= 8);
  /* Progress lines carry it too. */
  assert_non_null(strstr(out, "\"lag_mean\":"));
  free(out);
  assert_true(eval_run("ppo-solve") >= 400.0);
}

static void test_ppo_pendulum(void **state) {
  const char *sets[] = {"run.max_env_steps=400000"};
  const char *done;
  char *out = run_json(pendulum_cfg, "pendulum", sets, 1, 400, &done);
  assert_true(number_after(done, "\"best_eval\":") > -300.0);
  free(out);
  /* The snapshot carries the observation statistics: evaluation on other seeds agrees. */
  assert_true(eval_run("pendulum") > -400.0);
}

/* IMPALA with an LSTM core on the distributed runtime: the core is what lets the policy
 * tell which way the pole moves; the same run without it cannot. */
static void test_impala_lstm_beats_feedforward(void **state) {
  const char *done;
  const char *ff_sets[] = {"ac.lstm=0"};
  char *out = run_json(novel_lstm_cfg, "novel-ff", ff_sets, 1, 300, &done);
  double ff = number_after(done, "\"best_eval\":");
  free(out);
  out = run_json(novel_lstm_cfg, "novel-lstm", NULL, 0, 600, &done);
  double lstm = number_after(done, "\"best_eval\":");
  assert_true(number_after(done, "\"env_steps\":") <= 400000 + 2 * 8 * 16 * 4);
  assert_true(number_after(done, "\"bad_batches\":") == 0);
  free(out);
  printf("CartPoleNoVel-v1, 400k env steps, greedy best eval: LSTM %.1f, feed-forward %.1f\n", lstm,
         ff);
  assert_true(ff < 70.0);
  assert_true(lstm >= 90.0);
  /* `shoal eval` carries the state through each episode, reset at its start: the best
   * snapshot, the policy the run learned (the last one, evaluated at the budget, may have
   * collapsed: one run's fell from a best of 433 to 11 in its last 40k steps). */
  double e = eval_run_best("novel-lstm");
  printf("shoal eval (100 episodes): %.1f\n", e);
  assert_true(e >= 90.0);
}

/* ---- a learner on its own, fed by this test ---- */

enum { T = 5, N = 4, OBS = 4, LH = 4 }; /* LH: the LSTM core's size in the core0 runs */

typedef struct ubatch {
  float obs[N][T + 2][OBS]; /* room for a wrong T */
  int32_t action[N][T];
  float reward[N][T];
  uint8_t term[N][T], trunc[N][T];
  float final_obs[N][T][OBS];
  float logp[N][T];
  float ep_return[N][T];
  float core0[N][2 * LH + 1]; /* room for a wrong shape */
  rpc_batch b;
} ubatch;

static void make_ubatch(ubatch *u, int64_t version) {
  memset(u, 0, sizeof *u);
  shoal_rng rng;
  shoal_rng_seed(&rng, (uint64_t)version + 7);
  for (int i = 0; i < N; i++) {
    for (int t = 0; t <= T; t++)
      for (int j = 0; j < OBS; j++)
        u->obs[i][t][j] = 0.1f * ((float)shoal_rng_uniform(&rng) - 0.5f);
    for (int t = 0; t < T; t++) {
      u->action[i][t] = (int32_t)(shoal_rng_next(&rng) & 1);
      u->reward[i][t] = 1;
      u->logp[i][t] = logf(0.5f);
    }
  }
  u->term[0][T - 1] = 1;
  u->ep_return[0][T - 1] = 5;
  rpc_batch *b = &u->b;
  b->n = N;
  b->ncols = 8;
  b->policy_version = version;
  struct {
    const char *name;
    int dtype, ndim;
    int64_t s0, s1;
    const void *data;
    size_t bytes;
  } cols[8] = {
      {"obs", RPC_F32, 2, T + 1, OBS, u->obs, sizeof(float) * N * (T + 1) * OBS},
      {"action", RPC_I32, 1, T, 0, u->action, sizeof u->action},
      {"reward", RPC_F32, 1, T, 0, u->reward, sizeof u->reward},
      {"terminated", RPC_U8, 1, T, 0, u->term, sizeof u->term},
      {"truncated", RPC_U8, 1, T, 0, u->trunc, sizeof u->trunc},
      {"final_obs", RPC_F32, 2, T, OBS, u->final_obs, sizeof u->final_obs},
      {"logp", RPC_F32, 1, T, 0, u->logp, sizeof u->logp},
      {"ep_return", RPC_F32, 1, T, 0, u->ep_return, sizeof u->ep_return},
  };
  /* The obs rows are packed item by item: (T+1) rows per unroll. */
  float packed[N][T + 1][OBS];
  for (int i = 0; i < N; i++) memcpy(packed[i], u->obs[i], sizeof packed[i]);
  memcpy(u->obs, packed, sizeof packed);
  for (int c = 0; c < 8; c++) {
    b->cols[c] = (rpc_column){.name = cols[c].name,
                              .dtype = cols[c].dtype,
                              .ndim = cols[c].ndim,
                              .shape = {cols[c].s0, cols[c].s1},
                              .data = cols[c].data,
                              .bytes = cols[c].bytes};
  }
}

/* Adds the core0 column with (h, c) per unroll of k floats: h in [−1, 1], c wider, and
 * zero for unroll 1, as an actor sends it where an unroll begins an episode. */
static void with_core0(ubatch *u, int k) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j < k; j++)
      u->core0[i][j] = i == 1 ? 0 : (j < LH ? 0.9f : 2.5f) * (j % 2 ? -1.0f : 1.0f);
  float packed[N * (2 * LH + 1)];
  for (int i = 0; i < N; i++) memcpy(packed + i * k, u->core0[i], (size_t)k * sizeof(float));
  memcpy(u->core0, packed, sizeof packed);
  u->b.cols[8] = (rpc_column){.name = "core0",
                              .dtype = RPC_F32,
                              .ndim = 1,
                              .shape = {k},
                              .data = u->core0,
                              .bytes = sizeof(float) * N * (size_t)k};
  u->b.ncols = 9;
}

static double counter(rpc_client *c, const char *name) {
  rpc_status st;
  shoal_error err = {0};
  if (rpc_client_status(c, &st, &err)) fail_msg("status: %s", err.msg);
  for (int i = 0; i < st.ncounters; i++)
    if (!strcmp(st.counters[i].name, name)) return st.counters[i].value;
  fail_msg("no counter '%s' in the learner's status", name);
  return NAN;
}

static void wait_counter(rpc_client *c, const char *name, double want, double timeout_s) {
  double t0 = shoal_now_s(), v = NAN;
  while (shoal_now_s() - t0 < timeout_s) {
    v = counter(c, name);
    if (v == want) return;
    usleep(20000);
  }
  fail_msg("counter %s is %g, waited %.0f s for %g", name, v, timeout_s, want);
}

static void push_ok(rpc_client *c, ubatch *u) {
  shoal_error err = {0};
  assert_int_equal(rpc_client_push(c, &u->b, &err), 0);
  assert_int_equal(rpc_client_flush(c, 20.0, &err), 0);
}

typedef struct lone {
  wf_proc p;
  rpc_client *c;
  char run[64];
} lone;

/* `shoal init` + shoal-onpolicy-learner with a small IMPALA config (T 5, 4 envs, one
 * update per batch of 4 unrolls, staleness bound 2), and a client as actor 0. */
static void lone_start(lone *l, const char *name, const char *extra_yaml) {
  char cfg[4400], resolved[4400], store_set[400], run_set[96];
  snprintf(cfg, sizeof cfg, "%s/%s.yaml", wf_dir, name);
  snprintf(resolved, sizeof resolved, "%s/%s-resolved.yaml", wf_dir, name);
  snprintf(l->run, sizeof l->run, "%s-%d", name, getpid());
  FILE *f = fopen(cfg, "w");
  assert_non_null(f);
  fprintf(f,
          "algo: impala\n"
          "run: {seed: 3, max_env_steps: 0, solve_return: 0, eval_episodes: 2, "
          "eval_every_steps: 1000000000}\n"
          "env: {id: CartPole-v1, num_envs: %d}\n"
          "actors: 1\n"
          "replay: {capacity: 8, max_staleness: 2}\n"
          "impala: {unroll: %d, batch: %d}\n%s",
          N, T, N, extra_yaml);
  fclose(f);
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", wf_dir);
  snprintf(run_set, sizeof run_set, "run.name=%s", l->run);
  char *iargv[] = {wf_shoal, "init",  cfg,     "--set",  store_set,
                   "--set",  run_set, "--out", resolved, NULL};
  int rc;
  char *out = wf_run(iargv, 30, &rc);
  assert_int_equal(rc, 0);
  free(out);
  char learner_bin[4200];
  snprintf(learner_bin, sizeof learner_bin, "%s", wf_shoal);
  snprintf(strrchr(learner_bin, '/'), 32, "/shoal-onpolicy-learner");
  char *largv[] = {learner_bin, "--config", resolved, "--run", l->run, NULL};
  wf_start(&l->p, largv);
  char *s = wf_wait_text(l->p.out, "\"port\":", 60);
  int port = (int)number_after(s, "\"port\":");
  free(s);
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  rpc_client_config cc = {.target = target, .run_id = l->run, .actor_id = 0, .queue_batches = 8};
  shoal_error err = {0};
  assert_int_equal(rpc_client_create(&cc, &l->c, &err), 0);
}

static char *lone_stop(lone *l) {
  rpc_client_close(l->c, 1.0, NULL, NULL);
  kill(l->p.pid, SIGTERM);
  assert_int_equal(wf_wait(&l->p, 60), 0);
  char *out = wf_slurp(l->p.out, NULL);
  printf("%s", out);
  return out;
}

static void test_stale_unrolls_dropped(void **state) {
  lone l;
  lone_start(&l, "stale", "");
  ubatch *u = malloc(sizeof *u);
  /* Three updates: versions 0 -> 3. */
  for (int v = 0; v < 3; v++) {
    make_ubatch(u, v);
    push_ok(l.c, u);
    wait_counter(l.c, "updates", v + 1, 30);
  }
  assert_true(counter(l.c, "dropped_stale") == 0);
  /* Version 0 is now 3 versions old, past the bound of 2: dropped and counted. */
  make_ubatch(u, 0);
  push_ok(l.c, u);
  wait_counter(l.c, "dropped_stale", N, 10);
  usleep(300000);
  assert_true(counter(l.c, "updates") == 3);
  /* Version 1 (2 old) is within the bound: it trains. */
  make_ubatch(u, 1);
  push_ok(l.c, u);
  wait_counter(l.c, "updates", 4, 30);
  assert_true(counter(l.c, "env_steps") == 5 * N * T);
  assert_true(counter(l.c, "episodes") == 5);
  /* Live tuning: the learning rate changes between two updates; other keys are named. */
  shoal_error err = {0};
  uint32_t applied = 0;
  rpc_hyperparam h = {.key = "impala.lr", .number = 5e-4};
  assert_int_equal(rpc_client_set_hyperparams(l.c, &h, 1, &applied, &err), 0);
  assert_int_equal((int)applied, 1);
  assert_true(fabs(counter(l.c, "hparam/impala.lr") - 5e-4) < 1e-12);
  rpc_hyperparam bad = {.key = "impala.gamma", .number = 0.5};
  assert_int_equal(rpc_client_set_hyperparams(l.c, &bad, 1, &applied, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "live keys"));
  free(u);
  char *out = lone_stop(&l);
  const char *done = strstr(out, "{\"event\":\"done\"");
  assert_non_null(done);
  assert_true(number_after(done, "\"dropped_stale\":") == N);
  assert_true(number_after(done, "\"version\":") == 4);
  free(out);
}

static void test_malformed_rejected(void **state) {
  lone l;
  lone_start(&l, "bad", "");
  ubatch *u = malloc(sizeof *u);
  shoal_error err = {0};
  int bad = 0;
  /* 1. wrong T: obs with T+2 rows */
  make_ubatch(u, 0);
  u->b.cols[0].shape[0] = T + 2;
  u->b.cols[0].bytes = sizeof(float) * N * (T + 2) * OBS;
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  /* 2. no logp column */
  make_ubatch(u, 0);
  u->b.cols[6] = u->b.cols[7];
  u->b.ncols = 7;
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  /* 3. a NaN reward */
  make_ubatch(u, 0);
  u->reward[2][3] = NAN;
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  /* 4. an action outside CartPole's two */
  make_ubatch(u, 0);
  u->action[1][2] = 2;
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  /* 5. a discrete log-probability above 0 */
  make_ubatch(u, 0);
  u->logp[3][0] = 0.5f;
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  /* 6. a flag that is not 0/1 */
  make_ubatch(u, 0);
  u->trunc[0][0] = 2;
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  /* 7. three unrolls where the run's actors step four env copies */
  make_ubatch(u, 0);
  u->b.n = N - 1;
  for (int c = 0; c < 8; c++) u->b.cols[c].bytes = u->b.cols[c].bytes / N * (N - 1);
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  /* 8. a version below 0 */
  make_ubatch(u, -1);
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  assert_int_equal(rpc_client_flush(l.c, 20.0, &err), 0);
  rpc_client_stats cs;
  rpc_client_stats_get(l.c, &cs);
  assert_int_equal((int)cs.rejected, bad);
  rpc_status st;
  assert_int_equal(rpc_client_status(l.c, &st, &err), 0);
  assert_true(st.server.rejected == (uint64_t)bad);
  assert_true(counter(l.c, "updates") == 0);
  assert_true(counter(l.c, "env_steps") == 0);
  /* Still serving: a good batch trains. */
  make_ubatch(u, 0);
  push_ok(l.c, u);
  wait_counter(l.c, "updates", 1, 30);
  free(u);
  char *out = lone_stop(&l);
  assert_non_null(strstr(out, "\"reason\":\"signal\""));
  free(out);
}

static void test_lstm_core0(void **state) {
  lone l;
  char extra[128];
  snprintf(extra, sizeof extra, "ac: {separate: false, hidden0: 16, hidden1: 0, lstm: %d}\n", LH);
  lone_start(&l, "core0", extra);
  ubatch *u = malloc(sizeof *u);
  shoal_error err = {0};
  int bad = 0;
  /* 1. no core0 column: the run's network needs one */
  make_ubatch(u, 0);
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  /* 2. core0 of 2·LH + 1 floats */
  make_ubatch(u, 0);
  with_core0(u, 2 * LH + 1);
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  /* 3. a NaN in c */
  make_ubatch(u, 0);
  with_core0(u, 2 * LH);
  ((float *)u->core0)[2 * 2 * LH + LH + 1] = NAN; /* packed: unroll 2's c[1] */
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  /* 4. an h no LSTM can hold (h = o · tanh(c) lies in [−1, 1]) */
  make_ubatch(u, 0);
  with_core0(u, 2 * LH);
  ((float *)u->core0)[3 * 2 * LH + 2] = 1.5f;
  assert_int_equal(rpc_client_push(l.c, &u->b, &err), 0), bad++;
  assert_int_equal(rpc_client_flush(l.c, 20.0, &err), 0);
  rpc_client_stats cs;
  rpc_client_stats_get(l.c, &cs);
  assert_int_equal((int)cs.rejected, bad);
  assert_true(counter(l.c, "updates") == 0);
  assert_true(counter(l.c, "env_steps") == 0);
  /* Still serving: unrolls with their core0 train, twice. */
  for (int v = 0; v < 2; v++) {
    make_ubatch(u, v);
    with_core0(u, 2 * LH);
    push_ok(l.c, u);
    wait_counter(l.c, "updates", v + 1, 30);
  }
  assert_true(counter(l.c, "env_steps") == 2 * N * T);
  assert_true(counter(l.c, "bad_batches") == 1); /* the h check is the learner's own */
  free(u);
  char *out = lone_stop(&l);
  assert_non_null(strstr(out, "\"reason\":\"signal\""));
  free(out);
  /* The final snapshot of the recurrent network plays under `shoal eval`. */
  double r = eval_run_n(l.run, "3", false);
  assert_true(r >= 8 && r <= 500);
}

/* The closing line gives the wall time the command took (not the learner's training
 * time alone, a small part of a short on-policy run), then the training time, labelled;
 * the progress line names an on-policy learner's queue as unrolls. The budget ends before
 * the first scheduled evaluation: the run evaluates what it ends with all the same. */
static void test_run_reports_its_wall_time(void **state) {
  char store_set[400], run_set[96];
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", wf_dir);
  snprintf(run_set, sizeof run_set, "run.name=wall-%d", (int)getpid());
  char *argv[] = {wf_shoal,
                  "run",
                  ppo_cfg,
                  "--set",
                  store_set,
                  "--set",
                  run_set,
                  "--set",
                  "run.solve_return=0",
                  "--set",
                  "run.max_env_steps=20000",
                  "--set",
                  "run.eval_every_steps=1000000",
                  "--no-tensorboard",
                  NULL};
  wf_proc p;
  double t0 = shoal_now_s();
  wf_start(&p, argv);
  int rc = wf_wait(&p, 120);
  double took = shoal_now_s() - t0;
  char *out = wf_slurp(p.out, NULL);
  printf("%s", out);
  assert_int_equal(rc, 0);
  const char *done = strstr(out, "max_env_steps after ");
  assert_non_null(done);
  double said = number_after(done, "after "), trained = number_after(done, " s (");
  assert_non_null(strstr(done, " s of it training): "));
  /* what the command's clock leaves out (exec before it starts, teardown after the line)
   * is a few tenths of a second on a loaded machine; the learner's own time alone would
   * leave out its whole start (processes, store, first parameters), the most of a short run */
  if (!(said >= took - 0.75 && said <= took + 0.5))
    fail_msg("the command took %.1f s and says %.1f s", took, said);
  assert_true(trained > 0 && trained <= said);
  assert_non_null(strstr(out, " unrolls  return100 "));
  double e = number_after(done, "greedy eval ");
  assert_true(e >= 8 && e <= 500);
  free(out);
}

static void test_learner_killed_resumes(void **state) {
  char store_set[400], run_set[96];
  snprintf(store_set, sizeof store_set, "store.uri=file://%s", wf_dir);
  /* The pid in the name: the kill below finds the learner by its command line, and
   * other builds on this machine may run this test at the same time. */
  char run[32];
  snprintf(run, sizeof run, "resume-%d", (int)getpid());
  snprintf(run_set, sizeof run_set, "run.name=%s", run);
  char *argv[] = {wf_shoal,
                  "run",
                  ppo_cfg,
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
  pid_t learner = wf_find_pid("shoal-onpolicy-learner", run);
  assert_true(learner > 0);
  assert_int_equal(kill(learner, SIGKILL), 0);
  int rc = wf_wait(&p, 180);
  char *out = wf_slurp(p.out, NULL);
  printf("%s", out);
  assert_int_equal(rc, 0);
  const char *res = strstr(out, "shoal-onpolicy-learner: resumed run ");
  assert_non_null(res);
  double v_resumed = number_after(res, "at version ");
  double steps_resumed = number_after(res, ", ");
  assert_true(v_resumed >= 10 && steps_resumed > 0);
  /* The optimizer's moments and step count came back with the parameters. */
  const char *opt = strstr(out, "shoal-onpolicy-learner: resume: optimizer state restored (");
  assert_non_null(opt);
  assert_true(number_after(opt, "restored (") > 0);
  assert_non_null(strstr(out, "learner restarted on"));
  const char *sum = strstr(out, "max_seconds after");
  assert_non_null(sum);
  assert_true(number_after(sum, "policy v") > v_resumed);
  assert_true(number_after(sum, "training): ") > steps_resumed);
  assert_non_null(strstr(out, "restarts: learner 1"));
  free(out);
}

static void expect_error(const char *what, char *const argv[], const char *message) {
  int rc;
  char *out = wf_run(argv, 30, &rc);
  if (rc == 0 || !strstr(out, message))
    fail_msg("%s: exit %d, output:\n%s\n(expected a failure naming '%s')", what, rc, out, message);
  free(out);
}

static void test_config_errors(void **state) {
  char *a1[] = {wf_shoal, "run", impala_cfg, "--set", "impala.lrr=0.1", NULL};
  expect_error("unknown key", a1, "unknown key 'impala.lrr'");
  char *a2[] = {wf_shoal, "run", impala_cfg, "--set", "env.id=Pendulum-v1", NULL};
  expect_error("box env for impala", a2, "IMPALA here is discrete");
  char *a3[] = {wf_shoal, "run", ppo_cfg, "--set", "algo=sarsa", NULL};
  expect_error("unknown algo", a3, "sarsa");
  char *a4[] = {wf_shoal, "run", ppo_cfg, "--set", "ppo.minibatches=7", NULL};
  expect_error("minibatches", a4, "ppo.minibatches");
}

/* actor.max_lag: with one actor, 0 is CleanRL's synchronous loop (every unroll acted by
 * the policy that trained on all before it: lag 0), 1 lets the next unroll run while the
 * learner trains (lag at most 1); the run still stops in order, its actors waiting. */
static void test_actor_max_lag(void **state) {
  for (int L = 0; L <= 1; L++) {
    char lag_set[48], run[32];
    snprintf(lag_set, sizeof lag_set, "actor.max_lag=%d", L);
    snprintf(run, sizeof run, "ppo-max-lag-%d", L);
    const char *sets[] = {lag_set, "actors=1", "run.max_env_steps=30000", "run.solve_return=0"};
    const char *done;
    char *out = run_json(ppo_cfg, run, sets, 4, 120, &done);
    double lag_mean = number_after(done, "\"lag_mean\":"),
           lag_max = number_after(done, "\"lag_max\":");
    printf("max_lag %d: policy lag mean %.3f, max %.0f\n", L, lag_mean, lag_max);
    assert_true(number_after(done, "\"updates\":") >= 50);
    assert_true(lag_max <= L);
    if (L == 0) assert_true(lag_mean == 0);
    free(out);
  }
  char *a[] = {
      wf_shoal, "run", ppo_cfg, "--set", "actor.max_lag=2", "--set", "replay.max_staleness=1",
      NULL};
  expect_error("max_lag above max_staleness", a, "replay.max_staleness = 1 (from --set) below");
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "solve")) {
    const struct CMUnitTest solve[] = {
        cmocka_unit_test(test_impala_solves_cartpole),
        cmocka_unit_test(test_ppo_solves_cartpole_with_lag),
        cmocka_unit_test(test_ppo_pendulum),
    };
    return cmocka_run_group_tests_name("onpolicy_dist_solve", solve, setup, teardown);
  }
  if (argc > 1 && !strcmp(argv[1], "lstm")) {
    const struct CMUnitTest lstm[] = {cmocka_unit_test(test_impala_lstm_beats_feedforward)};
    return cmocka_run_group_tests_name("onpolicy_dist_lstm", lstm, setup, teardown);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_errors),
      cmocka_unit_test(test_stale_unrolls_dropped),
      cmocka_unit_test(test_malformed_rejected),
      cmocka_unit_test(test_lstm_core0),
      cmocka_unit_test(test_learner_killed_resumes),
      cmocka_unit_test(test_run_reports_its_wall_time),
      cmocka_unit_test(test_actor_max_lag),
  };
  return cmocka_run_group_tests_name("onpolicy_dist", tests, setup, teardown);
}
