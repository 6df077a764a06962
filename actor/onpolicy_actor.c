/*
 * shoal-onpolicy-actor: one IMPALA / PPO (APPO) actor. Steps a vector env of
 * env.num_envs copies with its local copy of the actor-critic policy, and every T
 * steps pushes one unroll per copy (run/run.h names the columns) with
 * the behaviour log-probabilities and the one policy version that acted, then pulls
 * newer parameters every actor.pull_steps unrolls. Parameters change only between
 * unrolls, so an unroll's version is exact.
 *
 *   shoal-onpolicy-actor --config RESOLVED.yaml --run RUN --index I --learner HOST:PORT
 *                        [--set key=value ...]
 *
 * Observations go out raw; the learner owns the observation normaliser and publishes
 * it with the parameters (env.norm_obs). Rewards are scaled here when env.norm_reward
 * is on (Gymnasium's NormalizeReward, per actor as CleanRL wraps each env copy), and
 * the raw episode returns travel in ep_return for the learner's return100.
 *
 * With an LSTM core (ac.lstm) the actor carries each copy's (h, c) across unrolls and
 * parameter pulls, resets it where an episode begins, and sends the state each unroll
 * started from in the core0 column, from which the learner re-runs the core.
 *
 * SIGINT/SIGTERM: the unroll in progress is dropped, queued ones flushed, exit 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "run/run.h"

static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }

static int idx_arg = -1;
static void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "shoal-onpolicy-actor %d: %s: %s\n", idx_arg, what,
          err->msg[0] ? err->msg : shoal_strerror(err->code));
  exit(1);
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static void usage(void) {
  fprintf(stderr,
          "usage: shoal-onpolicy-actor --config FILE --run RUN --index I --learner HOST:PORT "
          "[--set key=value ...]\n");
  exit(2);
}

/* Takes pulled parameters; false (with a message) when they do not fit. */
static bool take_params(op_agent *a, const op_spec *s, op_norm *z, const rpc_params *p,
                        int64_t *have) {
  shoal_error err = {0};
  if (p->dtype != RPC_F32 || p->bytes % 4) {
    fprintf(stderr, "shoal-onpolicy-actor %d: params of dtype %d, %zu bytes: not float32\n",
            idx_arg, p->dtype, p->bytes);
    return false;
  }
  if (op_params_unpack(a, s, p->blob, p->bytes / 4, z, &err)) {
    fprintf(stderr, "shoal-onpolicy-actor %d: params version %lld refused: %s\n", idx_arg,
            (long long)p->version, err.msg);
    return false;
  }
  *have = p->version;
  return true;
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
  const cfg_key *keys = onpolicy_schema(&nkeys);
  config *cfg = config_create(keys, nkeys, &err);
  /* A config from the store or `shoal init --out` has its secrets redacted: they come
   * back from the environment (config_restore_secrets). */
  if (!cfg || config_load_program(cfg, cfg_path, sets, nsets, &err)) die("config", &err);
  if (onpolicy_check(cfg, &err)) die("config", &err);
  const int actors = (int)config_int(cfg, "actors");
  if (idx_arg >= actors) {
    fprintf(stderr, "shoal-onpolicy-actor: --index %d but the run has %d actors\n", idx_arg,
            actors);
    return 2;
  }
  op_spec s;
  if (op_spec_from_config(cfg, &s, &err)) die("config", &err);
  const int B = s.num_envs, T = s.T;
  const int64_t pull_every = config_int(cfg, "actor.pull_steps");
  const uint64_t seed = (uint64_t)config_int(cfg, "run.seed");
  nn_set_threads(1);

  env_vec *ev;
  env_vec_config vc = {0};
  vc.options = s.env_options[0] ? s.env_options : NULL;
  if (env_vec_create(&ev, s.env_id, B, &vc, &err)) die("env", &err);
  op_agent ag;
  if (op_agent_from_config(cfg, &s, B, false, NN_CPU, &ag, &err)) die("network", &err);
  op_norm z = {0};
  if (s.norm_obs && op_norm_init(&z, (int)s.obs_n, &err)) die("normaliser", &err);

  rpc_client_config cc = {0};
  cc.target = target;
  cc.run_id = run;
  cc.actor_id = (uint64_t)idx_arg;
  cc.token = config_string(cfg, "learner.token")[0] ? config_string(cfg, "learner.token") : NULL;
  cc.queue_batches = (int)config_int(cfg, "actor.queue_batches");
  /* A full queue blocks the actor: on-policy data must not pile up while the learner
   * is behind, or it arrives too stale to use. Short waits, so a signal is seen. */
  cc.backpressure = RPC_BLOCK;
  cc.block_timeout_s = 0.25;
  rpc_client *cl;
  if (rpc_client_create(&cc, &cl, &err)) die("rpc client", &err);

  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  int64_t have = -1;
  for (int tries = 0; have < 0 && !stop_signal; tries++) {
    rpc_params *p = NULL;
    int rc = rpc_client_pull_params(cl, -1, &p, &err);
    if (rc == 0 && p) {
      bool ok = take_params(&ag, &s, &z, p, &have);
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

  /* Buffers, sized once. Columns are item-major: env i's T (or T+1) rows together. */
  const size_t ob = s.obs_bytes, F = s.obs_n;
  const size_t ab = s.A > 0 ? sizeof(int32_t) : (size_t)s.D * sizeof(float);
  const size_t Bz = (size_t)B, Tz = (size_t)T;
  void *cur = malloc(Bz * ob), *fin = malloc(Bz * ob);
  float *cur_f = malloc(Bz * F * sizeof(float));
  void *act = malloc(Bz * ab), *env_act = malloc(Bz * ab);
  float *logp = malloc(Bz * sizeof(float)), *rew = malloc(Bz * sizeof(float));
  uint8_t *term = malloc(Bz), *trunc = malloc(Bz);
  double *ep_ret = calloc(Bz, sizeof(double)), *disc_ret = calloc(Bz, sizeof(double));
  uint8_t *c_obs = malloc(Bz * (Tz + 1) * ob), *c_fin = calloc(Bz * Tz, ob);
  uint8_t *c_act = malloc(Bz * Tz * ab);
  float *c_rew = malloc(Bz * Tz * sizeof(float)), *c_logp = malloc(Bz * Tz * sizeof(float));
  float *c_epret = malloc(Bz * Tz * sizeof(float));
  uint8_t *c_term = malloc(Bz * Tz), *c_trunc = malloc(Bz * Tz);
  op_norm ret_rms = {0}; /* NormalizeReward: the discounted return's running variance */
  if (op_norm_init(&ret_rms, 1, &err)) die("normaliser", &err);
  float *disc_f = malloc(Bz * sizeof(float));
  /* LSTM core: S floats of (h, c) per copy; first: the observation begins an episode */
  const size_t S = (size_t)ag.S;
  float *core = calloc(Bz * (S ? S : 1), sizeof(float));
  float *c_core0 = calloc(Bz * (S ? S : 1), sizeof(float));
  uint8_t *first = malloc(Bz);
  if (!core || !c_core0 || !first) {
    fprintf(stderr, "shoal-onpolicy-actor %d: out of memory\n", idx_arg);
    return 1;
  }
  memset(first, 1, Bz);
  if (!cur || !fin || !cur_f || !act || !env_act || !logp || !rew || !term || !trunc || !ep_ret ||
      !disc_ret || !c_obs || !c_fin || !c_act || !c_rew || !c_logp || !c_epret || !c_term ||
      !c_trunc || !disc_f) {
    fprintf(stderr, "shoal-onpolicy-actor %d: out of memory\n", idx_arg);
    return 1;
  }
  rpc_spec spec;
  op_rpc_spec(&s, run, &spec);
  rpc_batch b = {0};
  b.n = (uint32_t)B;
  b.ncols = spec.ncols;
  void *data[OP_NCOLS + 1] = {c_obs, c_act,  c_rew,   c_term, c_trunc,
                              c_fin, c_logp, c_epret, c_core0};
  for (int c = 0; c < spec.ncols; c++) {
    b.cols[c].name = spec.cols[c].name;
    b.cols[c].dtype = spec.cols[c].dtype;
    b.cols[c].ndim = spec.cols[c].ndim;
    memcpy(b.cols[c].shape, spec.cols[c].shape, sizeof b.cols[c].shape);
    b.cols[c].data = data[c];
    b.cols[c].bytes = Bz * rpc_column_item_bytes(&spec.cols[c]);
  }
  /* Final observations are zero except where an episode ended: they compress to little. */
  b.cols[OP_FINAL].codec = RPC_CODEC_LZ4;

  shoal_rng rng;
  shoal_rng_seed(&rng, seed * 1000003 + (uint64_t)idx_arg * 7 + 1);
  /* Actor i's copy j starts from seed·1e6 + i·B + j, as the Ape-X actor seeds them. */
  env_vec_reset(ev, seed * 1000000 + (uint64_t)idx_arg * Bz, cur);
  env_vec_out out = {cur, rew, term, trunc, fin};
  int64_t unrolls = 0;
  while (!stop_signal) {
    memset(c_fin, 0, Bz * Tz * ob);
    /* The state this unroll starts from, as reset for its first observation. */
    for (size_t i = 0; i < Bz && S; i++) {
      if (first[i])
        memset(c_core0 + i * S, 0, S * sizeof(float));
      else
        memcpy(c_core0 + i * S, core + i * S, S * sizeof(float));
    }
    for (int t = 0; t < T && !stop_signal; t++) {
      for (size_t i = 0; i < Bz; i++)
        memcpy(c_obs + (i * (Tz + 1) + (size_t)t) * ob, (uint8_t *)cur + i * ob, ob);
      op_obs_to_float(&s, cur, cur_f, Bz, s.norm_obs ? &z : NULL);
      int arc = S ? op_agent_act_recurrent(&ag, cur_f, B, core, first, &rng, false, act, env_act,
                                           logp, &err)
                  : op_agent_act(&ag, cur_f, B, &rng, false, act, env_act, logp, &err);
      if (arc) die("act", &err);
      if (env_vec_step(ev, env_act, &out, &err)) die("env step", &err);
      for (size_t i = 0; i < Bz; i++) first[i] = term[i] | trunc[i];
      if (s.norm_reward) {
        /* Gymnasium 1.x NormalizeReward: scale by the std of the discounted return. */
        for (size_t i = 0; i < Bz; i++) {
          disc_ret[i] = disc_ret[i] * s.gamma * (1 - term[i]) + rew[i];
          disc_f[i] = (float)disc_ret[i];
        }
        op_norm_update(&ret_rms, disc_f, Bz);
      }
      double scale = s.norm_reward ? sqrt(ret_rms.var[0] + 1e-8) : 1.0;
      for (size_t i = 0; i < Bz; i++) {
        size_t k = i * Tz + (size_t)t;
        memcpy(c_act + k * ab, (uint8_t *)act + i * ab, ab);
        c_logp[k] = logp[i];
        ep_ret[i] += rew[i];
        c_rew[k] = s.norm_reward ? (float)fmin(fmax(rew[i] / scale, -10.0), 10.0) : rew[i];
        c_term[k] = term[i];
        c_trunc[k] = trunc[i];
        c_epret[k] = 0;
        if (term[i] || trunc[i]) {
          memcpy(c_fin + k * ob, (uint8_t *)fin + i * ob, ob);
          c_epret[k] = (float)ep_ret[i];
          ep_ret[i] = 0;
          disc_ret[i] = 0;
        }
      }
    }
    if (stop_signal) break;
    for (size_t i = 0; i < Bz; i++)
      memcpy(c_obs + (i * (Tz + 1) + Tz) * ob, (uint8_t *)cur + i * ob, ob);
    b.policy_version = have;
    int rc;
    while ((rc = rpc_client_push(cl, &b, &err)) == SHOAL_ETIMEDOUT && !stop_signal) {
    }
    if (rc == SHOAL_EPERM) die("learner refused this actor", &err);
    if (rc && rc != SHOAL_ETIMEDOUT && rc != SHOAL_ECLOSED) die("push", &err);
    unrolls++;
    if (unrolls % pull_every == 0) {
      rpc_params *p = NULL;
      rc = rpc_client_pull_params(cl, have, &p, &err);
      if (rc == 0 && p) {
        take_params(&ag, &s, &z, p, &have);
        rpc_params_free(p);
      } else if (rc == SHOAL_EPERM) {
        die("learner refused this actor", &err);
      }
      /* Other failures (a learner restarting): act on with what we have. */
    }
  }
  rpc_client_stats st;
  if (rpc_client_close(cl, 2.0, &st, &err) && st.undelivered)
    fprintf(stderr,
            "shoal-onpolicy-actor %d: stopped with %llu unroll batches not delivered (the "
            "learner had stopped or was unreachable)\n",
            idx_arg, (unsigned long long)st.undelivered);
  op_agent_destroy(&ag);
  op_norm_free(&z);
  op_norm_free(&ret_rms);
  env_vec_destroy(ev);
  config_destroy(cfg);
  free(cur), free(fin), free(cur_f), free(act), free(env_act), free(logp), free(rew);
  free(term), free(trunc), free(ep_ret), free(disc_ret), free(c_obs), free(c_fin), free(c_act);
  free(c_rew), free(c_logp), free(c_epret), free(c_term), free(c_trunc), free(disc_f);
  free(core), free(c_core0), free(first);
  return 0;
}
