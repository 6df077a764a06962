/* SPDX-License-Identifier: Apache-2.0 */
/*
 * actor/runtime.c — the one actor runtime (actor/runtime.h): arguments, config, env,
 * the learner connection, the act/step/push/pull loop, and the stop.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actor/runtime.h"
#include "run/run.h"

enum { MAX_SETS = 64 };

static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }
/* Started by `shoal run`'s supervisor (cli/supervise.h), which stops the actors in
 * order and reports the run's batch accounting itself. */
static bool supervised;

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

typedef struct actor_rt {
  const actor_algo *algo;
  const char *cfg_path, *run, *target; /* borrowed from argv */
  const char *sets[MAX_SETS];
  int nsets;
  int index, actors, B;
  config *cfg;
  env_vec *ev;
  void *a; /* the algorithm's state */
  rpc_client *cl;
  int64_t have; /* the parameter version acting; -1 before the first */
  /* actor.max_lag (on-policy runs; -1: no bound), the updates each push makes
   * (actors x B / the learner's unrolls per update), the first version acted with, and
   * the version a wait gave up at (-1: none) */
  int64_t max_lag;
  double updates_per_push;
  int64_t v_first, gave_up_at;
  void *obs, *next, *fin; /* (B, obs...) in the env's dtype */
  float *reward;          /* (B) */
  uint8_t *term, *trunc;  /* (B) */
  bool fatal;             /* the error will be the same on every restart */
} actor_rt;

int actor_fail(shoal_error *err, int rc, const char *what) {
  if (!err) return rc;
  char msg[sizeof err->msg];
  snprintf(msg, sizeof msg, "%s", err->msg[0] ? err->msg : shoal_strerror(rc));
  shoal_error_set(err, rc, "%s: %s", what, msg);
  return rc;
}

void actor_batch_columns(rpc_batch *b, const rpc_spec *spec) {
  b->ncols = spec->ncols;
  for (int c = 0; c < spec->ncols; c++) {
    b->cols[c].name = spec->cols[c].name;
    b->cols[c].dtype = spec->cols[c].dtype;
    b->cols[c].ndim = spec->cols[c].ndim;
    memcpy(b->cols[c].shape, spec->cols[c].shape, sizeof b->cols[c].shape);
  }
}

static int parse_args(actor_rt *rt, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc)
      rt->cfg_path = argv[++i];
    else if (!strcmp(argv[i], "--run") && i + 1 < argc)
      rt->run = argv[++i];
    else if (!strcmp(argv[i], "--learner") && i + 1 < argc)
      rt->target = argv[++i];
    else if (!strcmp(argv[i], "--index") && i + 1 < argc)
      rt->index = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--set") && i + 1 < argc && rt->nsets < MAX_SETS)
      rt->sets[rt->nsets++] = argv[++i];
    else
      return SHOAL_EINVAL;
  }
  return rt->cfg_path && rt->run && rt->target && rt->index >= 0 ? 0 : SHOAL_EINVAL;
}

static int load_config(actor_rt *rt, shoal_error *err) {
  int n;
  const cfg_key *keys = rt->algo->schema(&n);
  rt->cfg = config_create(keys, n, err);
  /* A config from the store or `shoal init --out` has its secrets redacted: they come
   * back from the environment (config_restore_secrets). */
  int rc = rt->cfg ? config_load_program(rt->cfg, rt->cfg_path, rt->sets, rt->nsets, err)
                   : (err->code ? err->code : SHOAL_ENOMEM);
  if (!rc) rc = rt->algo->check(rt->cfg, err);
  rt->fatal = rc != 0;
  if (rc) return actor_fail(err, rc, "config");
  rt->actors = (int)config_int(rt->cfg, "actors");
  rt->B = (int)config_int(rt->cfg, "env.num_envs");
  return 0;
}

/* The env, the algorithm, the learner connection and the step buffers. */
static int build(actor_rt *rt, shoal_error *err) {
  const config *cfg = rt->cfg;
  env_vec_config vc = {0};
  if (config_has(cfg, "env.options") && config_string(cfg, "env.options")[0])
    vc.options = config_string(cfg, "env.options");
  /* An env the config names wrongly, or one the algorithm cannot play, fails the same
   * way on every restart; memory and the like may not. */
  int rc = env_vec_create(&rt->ev, config_string(cfg, "env.id"), rt->B, &vc, err);
  rt->fatal = rc == SHOAL_EINVAL || rc == SHOAL_ENOENT || rc == SHOAL_ENOTSUP;
  if (rc) return actor_fail(err, rc, "env");
  const env_spec *sp = env_vec_spec(rt->ev);
  actor_setup su = {
      cfg, sp, rt->run, rt->index, rt->actors, rt->B, (uint64_t)config_int(cfg, "run.seed")};
  rc = rt->algo->create(&su, &rt->a, err);
  rt->fatal = rc == SHOAL_EINVAL || rc == SHOAL_ENOENT || rc == SHOAL_ENOTSUP;
  if (rc) return rc;

  rpc_client_config cc = {0};
  cc.target = rt->target;
  cc.run_id = rt->run;
  cc.actor_id = (uint64_t)rt->index;
  cc.token = config_string(cfg, "learner.token")[0] ? config_string(cfg, "learner.token") : NULL;
  cc.queue_batches = (int)config_int(cfg, "actor.queue_batches");
  rt->max_lag = config_has(cfg, "actor.max_lag") ? config_int(cfg, "actor.max_lag") : -1;
  if (rt->max_lag >= 0)
    rt->updates_per_push = (double)rt->actors * rt->B / (double)onpolicy_learn_batch(cfg);
  /* A full queue blocks the actor: that is the learner's rate limiter holding it back,
   * and on-policy data must not pile up while the learner is behind, or it arrives too
   * stale to use. Short waits, so a stop signal is seen. */
  cc.backpressure = RPC_BLOCK;
  cc.block_timeout_s = 0.25;
  if ((rc = rpc_client_create(&cc, &rt->cl, err))) return actor_fail(err, rc, "rpc client");

  size_t bytes = (size_t)rt->B * env_space_bytes(&sp->obs);
  rt->obs = malloc(bytes);
  rt->next = malloc(bytes);
  rt->fin = malloc(bytes);
  rt->reward = malloc((size_t)rt->B * sizeof(float));
  rt->term = malloc((size_t)rt->B);
  rt->trunc = malloc((size_t)rt->B);
  if (!rt->obs || !rt->next || !rt->fin || !rt->reward || !rt->term || !rt->trunc)
    return shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
  return 0;
}

/* Takes pulled parameters; SHOAL_EINVAL (the old ones stay) when they do not fit. */
static int take_params(actor_rt *rt, const rpc_params *p, shoal_error *err) {
  if (p->dtype != RPC_F32 || p->bytes % 4)
    return shoal_error_set(err, SHOAL_EINVAL, "params of dtype %s, %zu bytes: not F32",
                           rpc_dtype_name(p->dtype), p->bytes);
  shoal_error e = {0};
  int rc = rt->algo->load_params(rt->a, p->blob, p->bytes / 4, &e);
  if (rc)
    return shoal_error_set(err, rc, "params version %lld refused: %s", (long long)p->version,
                           e.msg[0] ? e.msg : shoal_strerror(rc));
  rt->have = p->version;
  return 0;
}

/* The first parameters: the learner publishes version 0 as soon as it serves. */
static int first_params(actor_rt *rt, shoal_error *err) {
  for (int tries = 0; rt->have < 0 && !stop_signal; tries++) {
    rpc_params *p = NULL;
    int rc = rpc_client_pull_params(rt->cl, -1, &p, err);
    if (rc == 0 && p) {
      rc = take_params(rt, p, err);
      rpc_params_free(p);
      if (rc) return rc;
      rt->v_first = rt->have;
    } else if (rc == SHOAL_EPERM) {
      return actor_fail(err, rc, "learner refused this actor");
    } else if (tries > 600) {
      return actor_fail(err, rc ? rc : SHOAL_ETIMEDOUT,
                        "no parameters from the learner after 60 s");
    } else {
      sleep_s(0.1);
    }
  }
  return 0;
}

/* Newer parameters if the learner has them. Only a refusal for good is an error: other
 * failures (a learner restarting) and parameters that do not fit leave the actor acting
 * with what it has. */
static int pull(actor_rt *rt, shoal_error *err) {
  rpc_params *p = NULL;
  int rc = rpc_client_pull_params(rt->cl, rt->have, &p, err);
  if (rc == 0 && p) {
    shoal_error e = {0};
    if (take_params(rt, p, &e)) fprintf(stderr, "%s %d: %s\n", rt->algo->prog, rt->index, e.msg);
    rpc_params_free(p);
  } else if (rc == SHOAL_EPERM) {
    return actor_fail(err, rc, "learner refused this actor");
  }
  return 0;
}

static int push(actor_rt *rt, rpc_batch *b, shoal_error *err) {
  b->policy_version = rt->have;
  int rc;
  while ((rc = rpc_client_push(rt->cl, b, err)) == SHOAL_ETIMEDOUT && !stop_signal) {
  }
  if (rc == SHOAL_EPERM) return actor_fail(err, rc, "learner refused this actor");
  if (rc && rc != SHOAL_ETIMEDOUT && rc != SHOAL_ECLOSED) return actor_fail(err, rc, "push");
  return 0;
}

/* actor.max_lag = L >= 0: before its next unroll the actor waits until the learner has
 * trained all but L of the unrolls pushed before it. The learner's version counts its
 * updates; k pushes of B unrolls by each of N actors make k·N·B/learn_B of them, so
 * after its k-th push the actor waits for version >= v_first + (k - L)·N·B/learn_B
 * (v_first: the version it began with). L = 0 is CleanRL's synchronous loop (each unroll
 * acted by the policy that trained on all before it); L = 1 lets the next unroll run
 * while the learner trains on the last, at a policy lag of one update with one actor.
 * Counting, unlike "wait for any newer version", never settles into lockstep when L = 1,
 * and cannot wait forever on a healthy learner: the actor furthest behind always has its
 * update made. A learner that makes none for WAIT_GIVE_UP_S (restarted without its
 * snapshot, so its versions start again; stopping) lets the actor act on: it waits again
 * once the version passes the one it gave up on. */
#define WAIT_GIVE_UP_S 30.0
static int wait_for_updates(actor_rt *rt, int64_t pushes, shoal_error *err) {
  const double due = (double)(pushes - rt->max_lag) * rt->updates_per_push;
  if (due <= 0) return 0;
  const int64_t need = rt->v_first + (int64_t)due;
  if (rt->gave_up_at >= 0) {
    if (rt->have <= rt->gave_up_at) return 0;
    rt->gave_up_at = -1; /* updates come again */
  }
  for (double waited = 0; rt->have < need && !stop_signal; waited += 0.002) {
    if (waited >= WAIT_GIVE_UP_S) {
      fprintf(stderr,
              "%s %d: parameters still at version %lld after %.0f s waiting for %lld "
              "(actor.max_lag): acting on without waiting until a newer one comes\n",
              rt->algo->prog, rt->index, (long long)rt->have, WAIT_GIVE_UP_S, (long long)need);
      rt->gave_up_at = rt->have;
      return 0;
    }
    int rc = pull(rt, err);
    if (rc) return rc;
    if (rt->have < need) sleep_s(0.002);
  }
  return 0;
}

/* Acts, steps, pushes and pulls until a stop signal. */
static int loop(actor_rt *rt, shoal_error *err) {
  const actor_algo *al = rt->algo;
  const int64_t pull_every = config_int(rt->cfg, "actor.pull_steps");
  /* Actor i's copy j starts from seed·1e6 + i·B + j: every copy of the run differs. */
  uint64_t seed = (uint64_t)config_int(rt->cfg, "run.seed");
  int rc =
      env_vec_reset(rt->ev, seed * 1000000 + (uint64_t)rt->index * (uint64_t)rt->B, rt->obs, err);
  /* An env that raised or returned a NaN does it again after a restart: stop the run. */
  rt->fatal = rc == SHOAL_EENV;
  if (rc) return actor_fail(err, rc, "env reset");
  env_vec_out out = {rt->next, rt->reward, rt->term, rt->trunc, rt->fin};
  int64_t steps = 0, batches = 0;
  while (!rc && !stop_signal) {
    const void *actions;
    rpc_batch *b = NULL;
    if ((rc = al->act(rt->a, rt->obs, &actions, err))) break;
    if ((rc = env_vec_step(rt->ev, actions, &out, err))) {
      rt->fatal = rc == SHOAL_EENV;
      return actor_fail(err, rc, "env step");
    }
    if ((rc = al->observe(rt->a, rt->obs, &out, &b, err))) break;
    void *t = rt->obs;
    rt->obs = rt->next;
    rt->next = out.obs = t;
    steps++;
    if (b) {
      rc = push(rt, b, err);
      batches++;
      if (!rc && rt->max_lag >= 0) rc = wait_for_updates(rt, batches, err);
    }
    if (!rc && (al->pull_per_batch ? b && batches % pull_every == 0 : steps % pull_every == 0))
      rc = pull(rt, err);
  }
  return rc;
}

/* How the actor stopped and what became of the batches it still held, then the
 * counters. A learner that finished first or one that holds the actor back (its rate
 * limiter) is a normal end; only one that broke or was never reached is not. */
static void report(const actor_rt *rt, const rpc_client_stats *st) {
  const char *prog = rt->algo->prog;
  /* Under a supervisor an orderly stop is the normal case: said only when a batch was
   * left behind. */
  if (supervised && st->undelivered == 0) return;
  const char *how = stop_signal == SIGINT    ? "SIGINT"
                    : stop_signal == SIGTERM ? "SIGTERM"
                                             : "signal";
  unsigned long long held = st->undelivered;
  const char *noun = held == 1 ? "batch" : "batches", *verb = held == 1 ? "was" : "were";
  if (!st->pushed)
    fprintf(stderr, "%s %d: stopped (%s) before any batch was pushed\n", prog, rt->index, how);
  else if (!held)
    fprintf(stderr, "%s %d: stopped (%s), every batch delivered\n", prog, rt->index, how);
  else if (st->learner == RPC_LEARNER_UP)
    fprintf(stderr, "%s %d: stopped (%s): %llu %s still queued at the stop %s not sent\n", prog,
            rt->index, how, held, noun, verb);
  else if (st->learner == RPC_LEARNER_STOPPED)
    fprintf(stderr,
            "%s %d: stopped (%s) after the learner had stopped: %llu %s still queued at the stop "
            "%s not sent\n",
            prog, rt->index, how, held, noun, verb);
  else
    fprintf(stderr, "%s %d: stopped (%s) with %llu %s not delivered (the learner %s)\n", prog,
            rt->index, how, held, noun,
            st->learner == RPC_LEARNER_NEVER ? "was never reached" : "was unreachable");
  /* What this process sent and what the learner acknowledged, for checking against the
   * learner's counters (tests/faults). */
  fprintf(stderr,
          "%s %d: pushed %llu batches, delivered %llu, resent duplicates %llu, reconnects %llu, "
          "rotations %llu\n",
          prog, rt->index, (unsigned long long)st->pushed, (unsigned long long)st->delivered,
          (unsigned long long)st->duplicates, (unsigned long long)st->reconnects,
          (unsigned long long)st->rotations);
}

static int run(actor_rt *rt, shoal_error *err) {
  int rc = first_params(rt, err);
  if (!rc) rc = loop(rt, err);
  if (rc) return rc;
  /* Stopped: what is queued gets two seconds to reach the learner. */
  rpc_client_stats st;
  rpc_client_close(rt->cl, 2.0, &st, NULL);
  rt->cl = NULL;
  report(rt, &st);
  return 0;
}

static void teardown(actor_rt *rt) {
  rpc_client_close(rt->cl, 0, NULL, NULL); /* after a fatal error: nothing is flushed */
  if (rt->a) rt->algo->destroy(rt->a);
  env_vec_destroy(rt->ev);
  config_destroy(rt->cfg);
  free(rt->obs), free(rt->next), free(rt->fin), free(rt->reward), free(rt->term), free(rt->trunc);
}

int actor_main(int argc, char **argv, const actor_algo *algo) {
  actor_rt rt = {.algo = algo, .index = -1, .have = -1, .gave_up_at = -1};
  bool help = false;
  for (int i = 1; i < argc; i++) help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
  if (help || parse_args(&rt, argc, argv)) {
    fprintf(help ? stdout : stderr,
            "usage: %s --config FILE --run RUN --index I --learner HOST:PORT "
            "[--set key=value ...]\n"
            "  Steps the run's env and streams what it plays to the learner (`shoal run` starts\n"
            "  it; deploy/README.md runs it by hand). FILE: a resolved config (`shoal init\n"
            "  --out`); its keys: shoal config keys. I: 0 .. actors-1.\n",
            algo->prog);
    return help ? 0 : 2;
  }
  /* From here a stop signal ends the run cleanly, even one that comes while it starts. */
  const char *sv = getenv("SHOAL_SUPERVISED");
  supervised = sv && !strcmp(sv, "1");
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  /* Under a supervisor a terminal's Ctrl-C is its to act on: it stops the actors (by
   * SIGTERM) before the learner. */
  if (supervised)
    signal(SIGINT, SIG_IGN);
  else
    sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  shoal_error err = {0};
  int status = 1;
  int rc = load_config(&rt, &err);
  if (!rc && rt.index >= rt.actors) {
    fprintf(stderr, "%s: --index %d but the run has %d actors\n", algo->prog, rt.index, rt.actors);
    status = 2;
  } else {
    if (!rc) rc = build(&rt, &err);
    if (!rc) rc = run(&rt, &err);
    if (rc) fprintf(stderr, "%s %d: %s\n", algo->prog, rt.index, err.msg);
    status = !rc ? 0 : rt.fatal ? RUN_EXIT_FATAL : 1;
  }
  teardown(&rt);
  return status;
}
