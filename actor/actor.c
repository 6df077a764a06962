/*
 * shoal-actor: one Ape-X actor. Steps a vector env with its local copy of the policy
 * (ε-greedy with Ape-X's per-actor ε_i), computes initial priorities for its n-step
 * transitions, streams them to the learner, and pulls fresh parameters every
 * actor.pull_steps vector steps.
 *
 *   shoal-actor --config RESOLVED.yaml --run RUN --index I --learner HOST:PORT [--set k=v ...]
 *
 * SIGINT/SIGTERM: push what is ready, flush, exit 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actor/collect.h"
#include "run/run.h"
#include "config/config.h"
#include "envs/envs.h"
#include "rpc/rpc.h"

enum { COL_OBS, COL_ACTION, COL_REWARD, COL_TERM, COL_TRUNC, COL_PRIO, COL_ENV, COL_TAIL, NCOLS };

static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }

static int idx_arg = -1;
static void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "shoal-actor %d: %s: %s\n", idx_arg, what,
          err->msg[0] ? err->msg : shoal_strerror(err->code));
  exit(1);
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* The outgoing batch: rows env by env, each env's steps then its tail rows. */
typedef struct outbox {
  int cap;
  bool u8;
  size_t F;
  void *obs;
  int32_t *action, *env;
  float *reward, *prio;
  uint8_t *term, *trunc, *tail;
} outbox;

static int build_batch(outbox *o, const collector_batch *cb, int num_envs, rpc_batch *b) {
  int row = 0, step = 0, fin = 0;
  for (int e = 0; e < num_envs; e++) {
    int first = step, ended = 0;
    while (step < cb->n && cb->env[step] == e) {
      if (o->u8)
        for (size_t j = 0; j < o->F; j++)
          ((uint8_t *)o->obs)[(size_t)row * o->F + j] = (uint8_t)cb->obs[(size_t)step * o->F + j];
      else
        memcpy((float *)o->obs + (size_t)row * o->F, cb->obs + (size_t)step * o->F,
               o->F * sizeof(float));
      o->action[row] = cb->action[step];
      o->reward[row] = cb->reward[step];
      o->term[row] = cb->terminated[step];
      o->trunc[row] = cb->truncated[step];
      o->prio[row] = cb->priority[step];
      o->env[row] = e;
      o->tail[row] = 0;
      ended += cb->terminated[step] || cb->truncated[step];
      row++, step++;
    }
    (void)first;
    for (int k = 0; k < ended; k++, fin++, row++) {
      if (o->u8)
        for (size_t j = 0; j < o->F; j++)
          ((uint8_t *)o->obs)[(size_t)row * o->F + j] =
              (uint8_t)cb->final_obs[(size_t)fin * o->F + j];
      else
        memcpy((float *)o->obs + (size_t)row * o->F, cb->final_obs + (size_t)fin * o->F,
               o->F * sizeof(float));
      o->action[row] = 0;
      o->reward[row] = 0;
      o->term[row] = o->trunc[row] = 0;
      o->prio[row] = 0;
      o->env[row] = e;
      o->tail[row] = 1;
    }
  }
  b->n = (uint32_t)row;
  size_t ob = o->F * (o->u8 ? 1 : sizeof(float));
  b->cols[COL_OBS].data = o->obs;
  b->cols[COL_OBS].bytes = (size_t)row * ob;
  b->cols[COL_ACTION].data = o->action;
  b->cols[COL_ACTION].bytes = (size_t)row * 4;
  b->cols[COL_REWARD].data = o->reward;
  b->cols[COL_REWARD].bytes = (size_t)row * 4;
  b->cols[COL_TERM].data = o->term;
  b->cols[COL_TERM].bytes = (size_t)row;
  b->cols[COL_TRUNC].data = o->trunc;
  b->cols[COL_TRUNC].bytes = (size_t)row;
  b->cols[COL_PRIO].data = o->prio;
  b->cols[COL_PRIO].bytes = (size_t)row * 4;
  b->cols[COL_ENV].data = o->env;
  b->cols[COL_ENV].bytes = (size_t)row * 4;
  b->cols[COL_TAIL].data = o->tail;
  b->cols[COL_TAIL].bytes = (size_t)row;
  return row;
}

/* Loads pulled parameters into the policy; false (with a message) if they do not fit. */
static bool take_params(dqn *q, const rpc_params *p, int64_t *have) {
  shoal_error err = {0};
  if (p->dtype != RPC_F32 || p->bytes % 4) {
    fprintf(stderr, "shoal-actor %d: params of dtype %d, %zu bytes: not float32\n", idx_arg,
            p->dtype, p->bytes);
    return false;
  }
  if (dqn_load_params(q, p->blob, p->bytes / 4, &err)) {
    fprintf(stderr, "shoal-actor %d: params version %lld refused: %s\n", idx_arg,
            (long long)p->version, err.msg);
    return false;
  }
  *have = p->version;
  return true;
}

static void usage(void) {
  fprintf(stderr,
          "usage: shoal-actor --config FILE --run RUN --index I --learner HOST:PORT "
          "[--set key=value ...]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *cfg_path = NULL, *run = NULL, *target = NULL;
  const char *sets[64];
  int nsets = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc)
      cfg_path = argv[++i];
    else if (!strcmp(argv[i], "--run") && i + 1 < argc)
      run = argv[++i];
    else if (!strcmp(argv[i], "--learner") && i + 1 < argc)
      target = argv[++i];
    else if (!strcmp(argv[i], "--index") && i + 1 < argc)
      idx_arg = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--set") && i + 1 < argc && nsets < 64)
      sets[nsets++] = argv[++i];
    else
      usage();
  }
  if (!cfg_path || !run || !target || idx_arg < 0) usage();
  shoal_error err = {0};
  int nkeys;
  const cfg_key *keys = apex_schema(&nkeys);
  config *cfg = config_create(keys, nkeys, &err);
  /* A config from the store or `shoal init --out` has its secrets redacted: they come
   * back from the environment (config_restore_secrets). */
  if (!cfg || config_load_program(cfg, cfg_path, sets, nsets, &err)) die("config", &err);
  if (apex_check(cfg, &err)) die("config", &err);
  const int actors = (int)config_int(cfg, "actors");
  if (idx_arg >= actors) {
    fprintf(stderr, "shoal-actor: --index %d but the run has %d actors\n", idx_arg, actors);
    return 2;
  }
  const int B = (int)config_int(cfg, "env.num_envs");
  const int send_steps = (int)config_int(cfg, "actor.send_steps");
  const int64_t pull_steps = config_int(cfg, "actor.pull_steps");
  const float eps = dqn_actor_epsilon(idx_arg, actors, (float)config_float(cfg, "actor.eps"),
                                      (float)config_float(cfg, "actor.eps_alpha"));
  const uint64_t seed = (uint64_t)config_int(cfg, "run.seed");
  nn_set_threads(1);

  env_vec *ev;
  if (env_vec_create(&ev, config_string(cfg, "env.id"), B, NULL, &err)) die("env", &err);
  const env_spec *sp = env_vec_spec(ev);
  if (sp->act.n <= 0) {
    fprintf(stderr, "shoal-actor: env %s: Ape-X DQN needs discrete actions\n", sp->id);
    return 1;
  }
  const bool u8 = sp->obs.dtype == ENV_UINT8;
  const size_t F = (size_t)sp->obs.size, ob = env_space_bytes(&sp->obs);
  const int A = sp->act.n;

  dqn_config dc = apex_dqn_config(cfg, sp->obs.ndim, sp->obs.shape, A);
  dc.max_batch = B;
  dqn *q = dqn_create(&dc, NN_CPU, false, &err);
  if (!q) die("network", &err);
  collector *col =
      collector_create(B, (int)F, dc.n_step, dc.gamma, send_steps + dc.n_step + 2, &err);
  if (!col) die("collector", &err);

  rpc_client_config cc = {0};
  cc.target = target;
  cc.run_id = run;
  cc.actor_id = (uint64_t)idx_arg;
  cc.token = config_string(cfg, "learner.token")[0] ? config_string(cfg, "learner.token") : NULL;
  cc.queue_batches = (int)config_int(cfg, "actor.queue_batches");
  /* A full queue blocks the actor (backpressure from the learner's rate limiter), but
   * in short waits so a stop signal is seen. */
  cc.backpressure = RPC_BLOCK;
  cc.block_timeout_s = 0.25;
  rpc_client *cl;
  if (rpc_client_create(&cc, &cl, &err)) die("rpc client", &err);

  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  /* The first parameters: the learner publishes version 0 as soon as it serves. */
  int64_t have = -1;
  for (int tries = 0; have < 0 && !stop_signal; tries++) {
    rpc_params *p = NULL;
    int rc = rpc_client_pull_params(cl, -1, &p, &err);
    if (rc == 0 && p) {
      bool ok = take_params(q, p, &have);
      rpc_params_free(p);
      if (!ok) return 1;
    } else if (rc == SHOAL_EPERM) {
      die("learner refused this actor", &err);
    } else if (tries > 600) {
      die("no parameters from the learner after 60 s", &err);
    } else {
      sleep_s(0.1);
    }
  }

  void *obs = malloc((size_t)B * ob), *next = malloc((size_t)B * ob), *fin = malloc((size_t)B * ob);
  float *obs_f = malloc((size_t)B * F * sizeof(float)),
        *fin_f = malloc((size_t)B * F * sizeof(float));
  float *trunc_f = malloc((size_t)B * F * sizeof(float));
  float *rew = malloc((size_t)B * sizeof(float)), *q_sa = malloc((size_t)B * sizeof(float));
  float *max_q = malloc((size_t)B * sizeof(float)), *fin_mq = calloc((size_t)B, sizeof(float));
  uint8_t *term = malloc((size_t)B), *trunc = malloc((size_t)B);
  int32_t *act = malloc((size_t)B * sizeof(int32_t));
  int *trunc_rows = malloc((size_t)B * sizeof(int));
  int cap_rows = 2 * B * (send_steps + dc.n_step + 2);
  outbox o = {cap_rows,
              u8,
              F,
              malloc((size_t)cap_rows * ob),
              malloc((size_t)cap_rows * 4),
              malloc((size_t)cap_rows * 4),
              malloc((size_t)cap_rows * 4),
              malloc((size_t)cap_rows * 4),
              malloc((size_t)cap_rows),
              malloc((size_t)cap_rows),
              malloc((size_t)cap_rows)};
  if (!obs || !next || !fin || !obs_f || !fin_f || !trunc_f || !rew || !q_sa || !max_q || !fin_mq ||
      !term || !trunc || !act || !trunc_rows || !o.obs || !o.action || !o.env || !o.reward ||
      !o.prio || !o.term || !o.trunc || !o.tail) {
    fprintf(stderr, "shoal-actor %d: out of memory\n", idx_arg);
    return 1;
  }
  rpc_batch b = {0};
  b.ncols = NCOLS;
  const char *names[NCOLS] = {"obs",       "action",   "reward", "terminated",
                              "truncated", "priority", "env",    "tail"};
  const int dtypes[NCOLS] = {
      u8 ? RPC_U8 : RPC_F32, RPC_I32, RPC_F32, RPC_U8, RPC_U8, RPC_F32, RPC_I32, RPC_U8};
  for (int c = 0; c < NCOLS; c++) {
    b.cols[c].name = names[c];
    b.cols[c].dtype = dtypes[c];
  }
  b.cols[COL_OBS].ndim = sp->obs.ndim;
  for (int d = 0; d < sp->obs.ndim; d++) b.cols[COL_OBS].shape[d] = sp->obs.shape[d];

  shoal_rng rng;
  shoal_rng_seed(&rng, seed * 1000003 + (uint64_t)idx_arg);
  /* Each actor's envs get their own seeds: actor i's copy j starts from seed·1e6 + i·B + j. */
  env_vec_reset(ev, seed * 1000000 + (uint64_t)idx_arg * (uint64_t)B, obs);
  env_vec_out out = {next, rew, term, trunc, fin};
  int64_t steps = 0;
  int rc_exit = 0;
  while (!stop_signal) {
    /* Act on the current observations. */
    const float *in = obs;
    if (u8) {
      for (size_t i = 0; i < (size_t)B * F; i++) obs_f[i] = ((const uint8_t *)obs)[i];
      in = obs_f;
    }
    const float *qv;
    if (dqn_act(q, in, B, eps, &rng, act, &qv, &err)) die("act", &err);
    for (int i = 0; i < B; i++) {
      const float *row = qv + (size_t)i * A;
      float m = row[0];
      for (int k = 1; k < A; k++) m = row[k] > m ? row[k] : m;
      q_sa[i] = row[act[i]];
      max_q[i] = m;
    }
    if (env_vec_step(ev, act, &out, &err)) die("env step", &err);
    /* A truncated episode bootstraps from its final observation: value it now. */
    int nt = 0;
    for (int i = 0; i < B; i++) {
      if (term[i] || trunc[i])
        for (size_t j = 0; j < F; j++)
          fin_f[(size_t)i * F + j] =
              u8 ? ((uint8_t *)fin)[(size_t)i * F + j] : ((float *)fin)[(size_t)i * F + j];
      if (trunc[i] && !term[i]) {
        memcpy(trunc_f + (size_t)nt * F, fin_f + (size_t)i * F, F * sizeof(float));
        trunc_rows[nt++] = i;
      }
    }
    if (nt) {
      const float *fq;
      if (dqn_q(q, trunc_f, nt, &fq, &err)) die("value of final observations", &err);
      for (int r = 0; r < nt; r++) {
        float m = fq[(size_t)r * A];
        for (int k = 1; k < A; k++) m = fq[(size_t)r * A + k] > m ? fq[(size_t)r * A + k] : m;
        fin_mq[trunc_rows[r]] = m;
      }
    }
    if (u8) {
      /* The collector keeps float rows; obs_f already holds this step's observations. */
      if (collector_add(col, obs_f, act, q_sa, max_q, rew, term, trunc, fin_f, fin_mq, &err))
        die("collector", &err);
    } else if (collector_add(col, obs, act, q_sa, max_q, rew, term, trunc, fin_f, fin_mq, &err)) {
      die("collector", &err);
    }
    void *t = obs;
    obs = next;
    next = t;
    out.obs = next;
    steps++;

    if (steps % send_steps == 0) {
      collector_batch cb;
      collector_flush(col, &cb);
      if (cb.n > 0) {
        build_batch(&o, &cb, B, &b);
        b.policy_version = have;
        int rc;
        while ((rc = rpc_client_push(cl, &b, &err)) == SHOAL_ETIMEDOUT && !stop_signal) {
        }
        if (rc == SHOAL_EPERM) die("learner refused this actor", &err);
        if (rc && rc != SHOAL_ETIMEDOUT && rc != SHOAL_ECLOSED) die("push", &err);
      }
    }
    if (steps % pull_steps == 0) {
      rpc_params *p = NULL;
      int rc = rpc_client_pull_params(cl, have, &p, &err);
      if (rc == 0 && p) {
        take_params(q, p, &have);
        rpc_params_free(p);
      } else if (rc == SHOAL_EPERM) {
        die("learner refused this actor", &err);
      }
      /* Other failures (learner restarting): keep acting with what we have. */
    }
  }
  rpc_client_stats st;
  if (rpc_client_close(cl, 2.0, &st, &err) && st.undelivered)
    fprintf(stderr,
            "shoal-actor %d: stopped with %llu batches not delivered (the learner had stopped or "
            "was unreachable)\n",
            idx_arg, (unsigned long long)st.undelivered);
  /* What this process sent and what the learner acknowledged, for checking against the
   * learner's counters (tests/faults). */
  fprintf(stderr,
          "shoal-actor %d: pushed %llu batches, delivered %llu, resent duplicates %llu, "
          "reconnects %llu\n",
          idx_arg, (unsigned long long)st.pushed, (unsigned long long)st.delivered,
          (unsigned long long)st.duplicates, (unsigned long long)st.reconnects);
  collector_destroy(col);
  dqn_destroy(q);
  env_vec_destroy(ev);
  config_destroy(cfg);
  free(obs), free(next), free(fin), free(obs_f), free(fin_f), free(trunc_f), free(rew);
  free(q_sa), free(max_q), free(fin_mq), free(term), free(trunc), free(act), free(trunc_rows);
  free(o.obs), free(o.action), free(o.env), free(o.reward), free(o.prio), free(o.term);
  free(o.trunc), free(o.tail);
  return rc_exit;
}
