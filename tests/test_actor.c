/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_actor.c — the actor programs (actor/runtime.h) against a learner stand-in:
 * an rpc server in this process with the run's wire columns, serving version-0
 * parameters built from the same config. It checks what the actors push (Ape-X's rows
 * env by env with tail rows after ended steps; on-policy unrolls of T + 1 observations,
 * with the LSTM core's state) and how they report a stop: a clean one, one after the
 * learner stopped on purpose, one before any learner answered.
 *
 * Each run prints "ACTOR <name> digest=..." over the first batches' bytes: the envs,
 * the RNGs and version-0 parameters are seeded, so the digest stays the same from one
 * build of the actors to the next unless what they send changed (compare by hand; the
 * BLAS kernels of another machine may change the Q-values, so it is not asserted).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "proc_util.h"
#include "run/run.h"

#define RUN "actor-test"
enum { DIGEST_BATCHES = 20 };

typedef struct sink {
  pthread_mutex_t mu;
  bool apex;
  int T;            /* on-policy: unroll length */
  uint64_t batches; /* accepted */
  uint64_t digest;  /* FNV-1a over the first DIGEST_BATCHES batches */
  uint64_t bad;     /* batches that break the layout */
  int64_t max_version;
} sink;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* Ape-X: rows env by env; within an env its steps, then one tail row per ended step. */
static bool apex_layout_ok(const rpc_batch *b) {
  const int32_t *env = b->cols[APEX_ENV].data;
  const uint8_t *term = b->cols[APEX_TERM].data, *trunc = b->cols[APEX_TRUNC].data;
  const uint8_t *tail = b->cols[APEX_TAIL].data;
  int ended = 0, tails = 0;
  for (uint32_t i = 0; i < b->n; i++) {
    if (i && env[i] < env[i - 1]) return false;
    if (i && env[i] != env[i - 1]) {
      if (ended != tails) return false;
      ended = tails = 0;
    }
    if (tail[i]) {
      tails++;
    } else {
      if (tails) return false; /* a step after the env's tails */
      ended += term[i] || trunc[i];
    }
  }
  return ended == tails;
}

static int on_batch(void *user, const rpc_batch *b, shoal_error *err) {
  (void)err;
  sink *s = user;
  pthread_mutex_lock(&s->mu);
  bool ok = s->apex ? apex_layout_ok(b) : b->cols[OP_OBS].ndim >= 2;
  if (!s->apex) ok = ok && b->cols[OP_OBS].shape[0] == s->T + 1;
  s->bad += !ok;
  if (s->batches < DIGEST_BATCHES) {
    s->digest = fnv(s->digest, &b->n, sizeof b->n);
    s->digest = fnv(s->digest, &b->policy_version, sizeof b->policy_version);
    for (int c = 0; c < b->ncols; c++)
      s->digest = fnv(s->digest, b->cols[c].data, b->cols[c].bytes);
  }
  if (b->policy_version > s->max_version) s->max_version = b->policy_version;
  s->batches++;
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static uint64_t batches(sink *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t n = s->batches;
  pthread_mutex_unlock(&s->mu);
  return n;
}

/* A learner stand-in for the run of config path (with sets): its spec, version-0
 * parameters as the learner would publish them. */
static rpc_server *stand_in(const char *path, const char **sets, int nsets, sink *s) {
  shoal_error err = {0};
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  char *text = wf_slurp(path, NULL);
  s->apex = !algo_yaml_is_onpolicy(text, sets, nsets);
  free(text);
  int n;
  const cfg_key *keys = s->apex ? apex_schema(&n) : onpolicy_schema(&n);
  config *cfg = config_create(keys, n, &err);
  assert_non_null(cfg);
  if (config_load_program(cfg, path, sets, nsets, &err)) fail_msg("config: %s", err.msg);
  rpc_spec spec;
  float *blob = NULL;
  size_t floats = 0;
  if (s->apex) {
    env *e;
    assert_int_equal(env_make(&e, config_string(cfg, "env.id"), &err), 0);
    const env_spec *sp = env_get_spec(e);
    dqn_config dc = apex_dqn_config(cfg, sp->obs.ndim, sp->obs.shape, sp->act.n);
    dqn *q = dqn_create(&dc, NN_CPU, false, &err);
    assert_non_null(q);
    const float *p = nn_model_params(dqn_model(q), &floats);
    blob = malloc(floats * sizeof(float));
    memcpy(blob, p, floats * sizeof(float));
    apex_rpc_spec(sp, RUN, 1u << 16, &spec);
    dqn_destroy(q);
    env_destroy(e);
  } else {
    op_spec os;
    assert_int_equal(op_spec_from_config(cfg, &os, &err), 0);
    op_agent ag;
    assert_int_equal(op_agent_from_config(cfg, &os, os.num_envs, false, NN_CPU, &ag, &err), 0);
    op_norm z = {0};
    if (os.norm_obs) assert_int_equal(op_norm_init(&z, (int)os.obs_n, &err), 0);
    floats = op_params_floats(&ag, &os);
    blob = malloc(floats * sizeof(float));
    op_params_pack(&ag, &os, &z, blob);
    op_rpc_spec(&os, RUN, &spec);
    s->T = os.T;
    op_norm_free(&z);
    op_agent_destroy(&ag);
  }
  rpc_server_config sc = {.threads = 2, .on_batch = on_batch, .user = s};
  rpc_server *srv = NULL;
  int rc = rpc_server_create(&sc, &spec, &srv, &err);
  if (rc) fail_msg("server: %s", err.msg);
  assert_int_equal(rpc_server_set_params(srv, 0, RPC_F32, blob, floats * 4, NULL, 0, &err), 0);
  free(blob);
  config_destroy(cfg);
  return srv;
}

static void start_actor(wf_proc *p, const char *prog, const char *path, int port, const char **sets,
                        int nsets) {
  static char bin[4200], addr[64];
  snprintf(bin, sizeof bin, "%s/bin/%s", getenv("SHOAL_BINARY_DIR"), prog);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  char *argv[32] = {bin, "--config", (char *)path, "--run", RUN, "--index", "0", "--learner", addr};
  int k = 9;
  for (int i = 0; i < nsets; i++) {
    argv[k++] = "--set";
    argv[k++] = (char *)sets[i];
  }
  argv[k] = NULL;
  wf_start(p, argv);
}

static void wait_batches(sink *s, uint64_t n, const wf_proc *p) {
  double t0 = shoal_now_s();
  while (batches(s) < n) {
    if (shoal_now_s() - t0 > 30) {
      char *out = wf_slurp(p->out, NULL);
      fail_msg("%llu batches after 30 s; the actor said:\n%s", (unsigned long long)batches(s), out);
    }
    usleep(20000);
  }
}

/* Runs prog on config until it has pushed DIGEST_BATCHES, stops it with SIGTERM while
 * the learner serves, and checks its report. */
static void clean_stop(const char *name, const char *prog, const char *config, const char **sets,
                       int nsets) {
  char path[4200];
  snprintf(path, sizeof path, "%s/configs/%s", wf_src, config);
  sink s;
  rpc_server *srv = stand_in(path, sets, nsets, &s);
  wf_proc p;
  start_actor(&p, prog, path, rpc_server_port(srv), sets, nsets);
  wait_batches(&s, DIGEST_BATCHES, &p);
  kill(p.pid, SIGTERM);
  assert_int_equal(wf_wait(&p, 30), 0);
  char *out = wf_slurp(p.out, NULL);
  printf("ACTOR %s digest=%016llx\n%s", name, (unsigned long long)s.digest, out);
  char want[128];
  snprintf(want, sizeof want, "%s 0: stopped (SIGTERM), every batch delivered", prog);
  assert_non_null(strstr(out, want));
  /* The counters line tests/faults read (a first connect may fail on a loaded machine). */
  assert_non_null(strstr(out, ", resent duplicates 0, reconnects "));
  rpc_server_destroy(srv, 1.0);
  assert_int_equal(s.bad, 0);
  assert_int_equal(s.max_version, 0);
  free(out);
}

static void test_apex_clean_stop(void **state) {
  (void)state;
  const char *sets[] = {"actors=1", "env.num_envs=4"};
  clean_stop("apex", "shoal-actor", "cartpole-apex.yaml", sets, 2);
}

/* PPO with an LSTM core and the observation normaliser from the published parameters,
 * rewards normalised by the actor. */
static void test_onpolicy_clean_stop(void **state) {
  (void)state;
  const char *sets[] = {"actors=1", "env.norm_reward=true"};
  clean_stop("ppo-lstm", "shoal-onpolicy-actor", "cartpole-novel-ppo-lstm.yaml", sets, 2);
}

/* uint8 observations: the batch carries them as uint8, the network sees floats. */
static void test_apex_minatar_clean_stop(void **state) {
  (void)state;
  const char *sets[] = {"actors=1", "env.num_envs=4"};
  clean_stop("apex-minatar", "shoal-actor", "minatar-breakout-apex.yaml", sets, 2);
}

/* IMPALA, and PPO on a Box (clipped actions to the env, sampled ones to the learner). */
static void test_impala_clean_stop(void **state) {
  (void)state;
  const char *sets[] = {"actors=1", "env.num_envs=4"};
  clean_stop("impala", "shoal-onpolicy-actor", "cartpole-impala.yaml", sets, 2);
}

static void test_ppo_box_clean_stop(void **state) {
  (void)state;
  const char *sets[] = {"actors=1", "ppo.steps=16"};
  clean_stop("ppo-box", "shoal-onpolicy-actor", "pendulum-ppo.yaml", sets, 2);
}

/* The learner finishes first (a drain) and the actor is stopped after: a normal end,
 * reported as such, with no reconnects. */
static void test_learner_stopped_first(void **state) {
  (void)state;
  char path[4200];
  snprintf(path, sizeof path, "%s/configs/cartpole-apex.yaml", wf_src);
  const char *sets[] = {"actors=1", "env.num_envs=4"};
  sink s;
  rpc_server *srv = stand_in(path, sets, 2, &s);
  wf_proc p;
  start_actor(&p, "shoal-actor", path, rpc_server_port(srv), sets, 2);
  wait_batches(&s, DIGEST_BATCHES, &p);
  rpc_server_destroy(srv, 1.0);
  usleep(500000); /* the actor goes on acting and queueing */
  kill(p.pid, SIGTERM);
  assert_int_equal(wf_wait(&p, 30), 0);
  char *out = wf_slurp(p.out, NULL);
  printf("%s", out);
  assert_non_null(strstr(out, "shoal-actor 0: stopped (SIGTERM) after the learner had stopped: "));
  assert_non_null(strstr(out, " still queued at the stop "));
  free(out);
}

/* Nobody answers: the actor waits for its first parameters and stops cleanly. The
 * test knows it is waiting once it knocks on the port (its handlers are in place by
 * then); the port then closes. */
static void test_stop_before_a_learner(void **state) {
  (void)state;
  char path[4200];
  snprintf(path, sizeof path, "%s/configs/cartpole-apex.yaml", wf_src);
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(ls, 4), 0);
  assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &len), 0);
  const char *sets[] = {"actors=1"};
  wf_proc p;
  start_actor(&p, "shoal-actor", path, ntohs(sa.sin_port), sets, 1);
  struct pollfd pfd = {ls, POLLIN, 0};
  assert_int_equal(poll(&pfd, 1, 30000), 1);
  close(accept(ls, NULL, NULL));
  close(ls);
  kill(p.pid, SIGTERM);
  assert_int_equal(wf_wait(&p, 30), 0);
  char *out = wf_slurp(p.out, NULL);
  printf("%s", out);
  assert_non_null(strstr(out, "shoal-actor 0: stopped (SIGTERM) before any batch was pushed"));
  assert_non_null(strstr(out, "shoal-actor 0: pushed 0 batches, delivered 0"));
  free(out);
}

/* Arguments and the index are checked before anything starts. */
static void test_arguments(void **state) {
  (void)state;
  char bin[4200], path[4200];
  snprintf(bin, sizeof bin, "%s/bin/shoal-onpolicy-actor", getenv("SHOAL_BINARY_DIR"));
  snprintf(path, sizeof path, "%s/configs/cartpole-ppo.yaml", wf_src);
  int rc;
  char *argv1[] = {bin, "--config", path, NULL};
  char *out = wf_run(argv1, 10, &rc);
  assert_int_equal(rc, 2);
  assert_non_null(strstr(out, "usage: shoal-onpolicy-actor --config FILE"));
  free(out);
  char *argv2[] = {bin,       "--config", path,        "--run",       RUN,
                   "--index", "5",        "--learner", "127.0.0.1:1", NULL};
  out = wf_run(argv2, 10, &rc);
  assert_int_equal(rc, 2);
  assert_non_null(strstr(out, "shoal-onpolicy-actor: --index 5 but the run has 2 actors"));
  free(out);
  char *argv3[] = {bin, "--config",  path,          "--run", RUN,           "--index",
                   "0", "--learner", "127.0.0.1:1", "--set", "ppo.steps=0", NULL};
  out = wf_run(argv3, 10, &rc);
  assert_int_equal(rc, RUN_EXIT_FATAL); /* a config error: no restart would cure it */
  assert_non_null(strstr(out, "shoal-onpolicy-actor 0: config: "));
  free(out);
}

static int setup(void **state) {
  (void)state;
  return wf_setup("actor");
}

static int teardown(void **state) {
  (void)state;
  return wf_teardown();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_arguments),
      cmocka_unit_test(test_apex_clean_stop),
      cmocka_unit_test(test_onpolicy_clean_stop),
      cmocka_unit_test(test_apex_minatar_clean_stop),
      cmocka_unit_test(test_impala_clean_stop),
      cmocka_unit_test(test_ppo_box_clean_stop),
      cmocka_unit_test(test_learner_stopped_first),
      cmocka_unit_test(test_stop_before_a_learner),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
