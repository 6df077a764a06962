/*
 * shoal-onpolicy-learner: the distributed IMPALA and PPO (APPO) learner. Serves
 * shoal.v1.Learner over gRPC; checks every unroll batch actors push (columns in
 * run/run.h) and queues its unrolls in the trajectory FIFO with the
 * staleness bound; a trainer loop pops time-major batches of unrolls and runs
 * impala_learn (V-trace corrects the actors' lag) or ppo_learn (APPO: the clipped ratio
 * against the behaviour log-probs, as Sample Factory runs PPO on asynchronous actors),
 * publishes parameters after every update, measures the policy lag (learner version −
 * the version that acted) of every unroll it trains on, evaluates the policy, writes
 * snapshots and metrics through the store, and prints the same JSON lines as the Ape-X
 * learner for `shoal run`.
 *
 *   shoal-onpolicy-learner --config RESOLVED.yaml --run RUN [--resume] [--set key=value ...]
 *
 * The first stdout line is {"event":"listening","port":P}; the last {"event":"done",...}.
 * SIGINT/SIGTERM: a final snapshot, the store flushed, exit 0. --resume continues from
 * the run's latest snapshot: parameters, observation statistics, the learner state
 * (optimizer moments and step, PPO's shuffling RNG; a snapshot from before it was kept
 * restarts the optimizer, with a note), version, update and env-step counters.
 *
 * With an LSTM core (ac.lstm) every unroll brings the (h, c) its first step started
 * from (the core0 column); it waits in the FIFO's one-row unroll column and becomes
 * onpolicy_batch.core0, from which learn() re-runs the core over the unroll.
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "learner/live_hp.h"
#include "run/run.h"
#include "learner/publish.h"
#include "replay/replay.h"
#include "store/store.h"

enum { RETURNS_KEPT = 100 };

/* Live tuning (SetHyperparams, `shoal set`): keys a person may change on a running
 * learner, applied by the trainer between two updates. HP_LR is impala.lr or ppo.lr
 * (the run's algorithm); with anneal_lr the schedule goes on from the new value. */
enum { HP_LR, HP_PUBLISH, HP_SNAP, HP_EVAL_EVERY, HP_MAX_STEPS, HP_MAX_S, HP_SOLVE, HP_COUNT };
static const char *hp_names[HP_COUNT] = {"ppo.lr",
                                         "learner.publish_every",
                                         "learner.snapshot_every_s",
                                         "run.eval_every_steps",
                                         "run.max_env_steps",
                                         "run.max_seconds",
                                         "run.solve_return"};

typedef struct learner {
  config *cfg;
  const char *run;
  op_spec s;
  int actors;
  int64_t max_staleness;

  op_agent ag;
  op_norm norm; /* observation statistics (env.norm_obs); the trainer's only */
  replay_traj *q;
  rpc_server *srv;
  store *st;
  store_writer *wr;
  float *pub; /* the published blob */

  /* ingest (rpc threads) */
  atomic_int_fast64_t version;  /* read by ingest for the staleness check */
  atomic_int_fast64_t steps_in; /* env steps delivered (queued or dropped as stale) */
  atomic_uint_fast64_t bad_batches, stale_ingest, unrolls_in;
  pthread_mutex_t ep_mu;
  double returns[RETURNS_KEPT];
  uint64_t episodes;

  live_hp live; /* live tuning: live.hp holds the values in effect (learner/live_hp.h) */
  atomic_bool stopping;

  int64_t env_steps_base, updates, steps_trained;
  int64_t last_snapshot_version;
  double eval_return, best_eval;
} learner;

static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }

static void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "shoal-onpolicy-learner: %s: %s\n", what,
          err->msg[0] ? err->msg : shoal_strerror(err->code));
  exit(1);
}

static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stdout, fmt, ap);
  va_end(ap);
  fputc('\n', stdout);
  fflush(stdout);
}

static const char *jnum(char *buf, size_t cap, double v) {
  if (!isfinite(v)) return "null";
  snprintf(buf, cap, "%.3f", v);
  return buf;
}

static double unix_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- ingest: rpc server threads ------------------------------------------------ */

static int bad(learner *L, shoal_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(learner *L, shoal_error *err, const char *fmt, ...) {
  atomic_fetch_add(&L->bad_batches, 1);
  va_list ap;
  va_start(ap, fmt);
  int rc = shoal_error_vset(err, SHOAL_EINVAL, fmt, ap);
  va_end(ap);
  return rc;
}

/* The rpc layer has checked names, dtypes, shapes (so T), byte counts and that floats
 * are finite; what is left are the values only the run knows. The whole batch is
 * checked before any unroll of it is queued. */
static int on_batch(void *user, const rpc_batch *b, shoal_error *err) {
  learner *L = user;
  const op_spec *s = &L->s;
  const int T = s->T;
  if (b->actor_id >= (uint64_t)L->actors)
    return bad(L, err, "actor id %llu outside [0, %d)", (unsigned long long)b->actor_id, L->actors);
  if (b->n != (uint32_t)s->num_envs)
    return bad(L, err, "%u unrolls in the batch, the run's actors step %d env copies", b->n,
               s->num_envs);
  if (b->policy_version < 0)
    return bad(L, err, "policy version %lld: an unroll must name the parameters that acted",
               (long long)b->policy_version);
  size_t NT = (size_t)b->n * (size_t)T;
  const uint8_t *term = b->cols[OP_TERM].data, *trunc = b->cols[OP_TRUNC].data;
  const float *logp = b->cols[OP_LOGP].data, *epret = b->cols[OP_EPRET].data;
  for (size_t k = 0; k < NT; k++) {
    if (term[k] > 1 || trunc[k] > 1)
      return bad(L, err, "unroll %zu step %zu: terminated/truncated must be 0 or 1", k / T, k % T);
    /* A discrete policy's log-probability is at most 0 (a density's may be positive). */
    if (s->A > 0 && logp[k] > 1e-4f)
      return bad(L, err, "unroll %zu step %zu: log-probability %g > 0", k / T, k % T,
                 (double)logp[k]);
  }
  if (s->lstm > 0) {
    /* The rpc layer checked its shape and that it is finite; h = o · tanh(c) lies in
     * [−1, 1], so a larger h was not produced by this network. */
    const float *core0 = b->cols[OP_CORE0].data;
    for (uint32_t i = 0; i < b->n; i++)
      for (int k = 0; k < s->lstm; k++)
        if (fabsf(core0[(size_t)i * 2 * (size_t)s->lstm + (size_t)k]) > 1.0f + 1e-5f)
          return bad(L, err, "unroll %u: core0 h[%d] = %g outside [-1, 1]", i, k,
                     (double)core0[(size_t)i * 2 * (size_t)s->lstm + (size_t)k]);
  }
  if (s->A > 0) {
    const int32_t *a = b->cols[OP_ACTION].data;
    for (size_t k = 0; k < NT; k++)
      if (a[k] < 0 || a[k] >= s->A)
        return bad(L, err, "unroll %zu step %zu: action %d outside [0, %d)", k / T, k % T, a[k],
                   s->A);
  }
  int64_t now = atomic_load(&L->version);
  atomic_fetch_add(&L->steps_in, (int64_t)NT);
  /* Returns count whatever happens to the data: the episodes were played. */
  pthread_mutex_lock(&L->ep_mu);
  for (size_t k = 0; k < NT; k++)
    if (term[k] || trunc[k]) L->returns[L->episodes++ % RETURNS_KEPT] = epret[k];
  pthread_mutex_unlock(&L->ep_mu);
  if (L->max_staleness >= 0 && now - b->policy_version > L->max_staleness) {
    atomic_fetch_add(&L->stale_ingest, b->n);
    return 0;
  }
  for (uint32_t i = 0; i < b->n; i++) {
    const void *cols[5];
    int c = 0;
    static const int which[5] = {OP_OBS, OP_ACTION, OP_REWARD, OP_TERM, OP_TRUNC};
    for (; c < 5; c++)
      cols[c] =
          (const uint8_t *)b->cols[which[c]].data + (size_t)i * (b->cols[which[c]].bytes / b->n);
    const void *all[7] = {
        cols[0],
        cols[1],
        cols[2],
        cols[3],
        cols[4],
        (const uint8_t *)b->cols[OP_FINAL].data + (size_t)i * (b->cols[OP_FINAL].bytes / b->n),
        s->lstm > 0
            ? (const uint8_t *)b->cols[OP_CORE0].data + (size_t)i * (b->cols[OP_CORE0].bytes / b->n)
            : NULL};
    int rc = replay_traj_push(L->q, all, logp + (size_t)i * T, b->policy_version, err);
    if (rc == SHOAL_ECLOSED) return shoal_error_set(err, SHOAL_EFULL, "the learner is stopping");
    if (rc) return rc;
    atomic_fetch_add(&L->unrolls_in, 1);
  }
  return 0;
}

static void on_status(void *user, rpc_counter *out, int *n) {
  learner *L = user;
  replay_traj_stats qs;
  replay_traj_get_stats(L->q, &qs);
  struct {
    const char *name;
    double v;
  } figs[] = {{"env_steps", (double)(L->env_steps_base + atomic_load(&L->steps_in))},
              {"updates", (double)L->updates},
              {"replay_held", (double)qs.held},
              {"episodes", (double)L->episodes},
              {"eval_return", L->eval_return},
              {"bad_batches", (double)atomic_load(&L->bad_batches)},
              {"dropped_stale", (double)(qs.dropped_stale + atomic_load(&L->stale_ingest))}};
  int k = 0;
  for (size_t i = 0; i < sizeof figs / sizeof *figs && k < *n; i++, k++) {
    snprintf(out[k].name, sizeof out[k].name, "%s", figs[i].name);
    out[k].value = figs[i].v;
  }
  live_hp_counters(&L->live, out, &k, *n);
  *n = k;
}

/* ---- live tuning ---------------------------------------------------------------- */

/* SetHyperparams, on an rpc thread (learner/live_hp.c). The trainer reads
 * L->live.hp between updates; a new lr takes effect there (the schedule goes on from it). */
static int on_hyperparams(void *user, const rpc_hyperparam *h, int n, uint32_t *applied,
                          shoal_error *err) {
  learner *L = user;
  return live_hp_request(&L->live, h, n, applied, err);
}

/* ---- parameters, snapshots ------------------------------------------------------ */

static void publish(learner *L) {
  nn_model *m = op_agent_model(&L->ag);
  op_params_pack(&L->ag, &L->s, &L->norm, L->pub);
  size_t n = op_params_floats(&L->ag, &L->s);
  size_t np;
  nn_model_params(m, &np);
  rpc_param_entry *layout = NULL;
  int nl = 0;
  shoal_error err = {0};
  /* The observation normaliser's two entries follow the model's tensors. */
  if (publish_layout(m, 2, &layout, &nl, &err)) die("publishing parameters", &err);
  if (L->s.norm_obs) {
    layout[nl++] = (rpc_param_entry){.name = "obs_norm.mean_var",
                                     .ndim = 1,
                                     .shape = {(int64_t)(2 * L->s.obs_n)},
                                     .offset = np,
                                     .numel = 2 * L->s.obs_n};
    layout[nl++] = (rpc_param_entry){
        .name = "obs_norm.count", .ndim = 0, .offset = np + 2 * L->s.obs_n, .numel = 1};
  }
  if (rpc_server_set_params(L->srv, atomic_load(&L->version), RPC_F32, L->pub, n * sizeof(float),
                            layout, nl, &err))
    die("publishing parameters", &err);
  free(layout);
}

static void snapshot(learner *L, int64_t env_steps, double score) {
  int64_t v = atomic_load(&L->version);
  if (v <= L->last_snapshot_version) return;
  uint8_t *buf;
  size_t len;
  shoal_error err = {0};
  if (op_snapshot_encode(&L->ag, &L->s, &L->norm, &buf, &len, &err)) {
    fprintf(stderr, "shoal-onpolicy-learner: snapshot: %s\n", err.msg);
    return;
  }
  L->last_snapshot_version = v;
  store_snapshot_meta meta = {0};
  snprintf(meta.run, sizeof meta.run, "%s", L->run);
  meta.version = v;
  meta.env_steps = env_steps;
  meta.updates = L->updates;
  meta.wall_time = unix_now();
  meta.score = score;
  store_writer_snapshot(L->wr, &meta, buf, len); /* takes buf */
}

static void usage(void) {
  fprintf(stderr,
          "usage: shoal-onpolicy-learner --config FILE --run RUN [--resume] "
          "[--set key=value ...]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *cfg_path = NULL, *run = NULL;
  bool resume = false;
  shoal_error err = {0};
  int nkeys;
  const cfg_key *keys = onpolicy_schema(&nkeys);
  static learner L;
  if (!(L.cfg = config_create(keys, nkeys, &err))) die("config", &err);
  const char *sets[64];
  int nsets = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc)
      cfg_path = argv[++i];
    else if (!strcmp(argv[i], "--run") && i + 1 < argc)
      run = argv[++i];
    else if (!strcmp(argv[i], "--resume"))
      resume = true;
    else if (!strcmp(argv[i], "--set") && i + 1 < argc && nsets < 64)
      sets[nsets++] = argv[++i];
    else
      usage();
  }
  if (!cfg_path || !run) usage();
  /* A config from the store or `shoal init --out` has its secrets redacted: they come
   * back from the environment (config_restore_secrets). */
  if (config_load_program(L.cfg, cfg_path, sets, nsets, &err)) die("config", &err);
  if (onpolicy_check(L.cfg, &err)) die("config", &err);
  L.run = run;
  L.actors = (int)config_int(L.cfg, "actors");
  L.max_staleness = config_int(L.cfg, "replay.max_staleness");
  if (op_spec_from_config(L.cfg, &L.s, &err)) die("config", &err);
  const op_spec *s = &L.s;
  const int T = s->T, B = s->learn_B;
  /* The FIFO and the actors' queues are where unrolls wait, so they set the policy lag.
   * By default the FIFO holds one update's batch (or one actor's, if larger): while the
   * learner trains on it the next actors' batches wait in their rpc calls. */
  int64_t capacity = config_int(L.cfg, "replay.capacity");
  if (capacity == 0) capacity = B > s->num_envs ? B : s->num_envs;
  if (capacity < B || capacity < s->num_envs) {
    fprintf(stderr,
            "shoal-onpolicy-learner: replay.capacity %lld holds fewer unrolls than an update "
            "(%d) or an actor's batch (env.num_envs %d)\n",
            (long long)capacity, B, s->num_envs);
    return 1;
  }
  nn_set_threads((int)config_int(L.cfg, "learner.threads"));
  /* The actor-critic's learn() runs on host arrays; CUDA only when asked for. */
  nn_device device = strcmp(config_string(L.cfg, "learner.device"), "cuda") ? NN_CPU : NN_CUDA;
  const int episodes = (int)config_int(L.cfg, "run.eval_episodes");
  int E = episodes < 16 ? episodes : 16;
  if (op_agent_from_config(L.cfg, s, s->num_envs > E ? s->num_envs : E, true, device, &L.ag, &err))
    die("network", &err);
  if (op_norm_init(&L.norm, (int)s->obs_n, &err)) die("normaliser", &err);
  if (!(L.pub = malloc(op_params_floats(&L.ag, s) * sizeof(float)))) {
    fprintf(stderr, "shoal-onpolicy-learner: out of memory\n");
    return 1;
  }
  op_eval *ev = op_eval_create(s, episodes, &err);
  if (!ev) die("evaluation env", &err);

  /* The FIFO: per step obs (with the bootstrap row), action, reward, the two flags and
   * the final observation. A full FIFO blocks the rpc thread that inserts, which holds
   * that actor's stream: backpressure down to the actor's bounded queue. */
  replay_traj_config qc = {0};
  qc.T = T;
  qc.ncols = 6;
  replay_dtype odt = s->obs_u8 ? REPLAY_U8 : REPLAY_F32;
  qc.cols[0] = (replay_column){.name = "obs", .dtype = odt, .ndim = s->obs_ndim};
  qc.cols[5] = (replay_column){.name = "final_obs", .dtype = odt, .ndim = s->obs_ndim};
  for (int d = 0; d < s->obs_ndim; d++) qc.cols[0].shape[d] = qc.cols[5].shape[d] = s->obs_shape[d];
  qc.cols[1] =
      s->A > 0 ? (replay_column){.name = "action", .dtype = REPLAY_I32}
               : (replay_column){.name = "action", .dtype = REPLAY_F32, .ndim = 1, .shape = {s->D}};
  qc.cols[2] = (replay_column){.name = "reward", .dtype = REPLAY_F32};
  qc.cols[3] = (replay_column){.name = "terminated", .dtype = REPLAY_U8};
  qc.cols[4] = (replay_column){.name = "truncated", .dtype = REPLAY_U8};
  qc.bootstrap_column = "obs";
  if (s->lstm > 0) { /* the (h, c) each unroll started from: one row per unroll */
    qc.cols[qc.ncols++] = (replay_column){
        .name = "core0", .dtype = REPLAY_F32, .ndim = 1, .shape = {2 * (int64_t)s->lstm}};
    qc.unroll_column = "core0";
  }
  qc.capacity = capacity;
  qc.max_staleness = L.max_staleness;
  qc.full = REPLAY_FULL_BLOCK;
  qc.push_timeout_ms = -1;
  if (replay_traj_create(&qc, &L.q, &err)) die("trajectory FIFO", &err);

  pthread_mutex_init(&L.ep_mu, NULL);
  L.eval_return = NAN;
  L.best_eval = -INFINITY;
  L.last_snapshot_version = -1;
  if (store_open(&L.st, config_string(L.cfg, "store.uri"), &err)) die("store", &err);
  if (store_writer_create(&L.wr, L.st, NULL, &err)) die("store writer", &err);
  if (resume) {
    store_snapshot_meta meta;
    void *bytes;
    size_t len;
    int rc = store_snapshot_get(L.st, run, STORE_LATEST, &meta, &bytes, &len, &err);
    if (rc == 0) {
      bool restored = false;
      if (op_snapshot_resume(&L.ag, s, &L.norm, bytes, len, &restored, &err))
        die("resume: snapshot", &err);
      free(bytes);
      if (restored)
        fprintf(stderr, "shoal-onpolicy-learner: resume: optimizer state restored (%lld updates)\n",
                (long long)meta.updates);
      else
        fprintf(stderr,
                "shoal-onpolicy-learner: resume: the snapshot holds no optimizer state "
                "(written by an older shoal): the optimizer restarts\n");
      atomic_store(&L.version, meta.version);
      L.updates = meta.updates;
      L.env_steps_base = meta.env_steps;
      L.steps_trained = meta.env_steps;
      L.last_snapshot_version = meta.version;
      if (isfinite(meta.score)) L.eval_return = L.best_eval = meta.score;
      fprintf(stderr, "shoal-onpolicy-learner: resumed run %s at version %lld, %lld env steps\n",
              run, (long long)meta.version, (long long)meta.env_steps);
    } else if (rc != SHOAL_ENOENT) {
      die("resume: latest snapshot", &err);
    }
  }

  rpc_server_config sc = {0};
  sc.listen = config_string(L.cfg, "learner.listen");
  sc.token =
      config_string(L.cfg, "learner.token")[0] ? config_string(L.cfg, "learner.token") : NULL;
  /* An insert may wait in the callback (a full FIFO), and an actor can
   * have two calls in at once (a resend on a new stream while its old one still waits):
   * two threads per actor plus two keep Status, SetHyperparams and pulls answered. */
  sc.threads = L.actors * 2 + 2 < 16 ? L.actors * 2 + 2 : 16;
  sc.on_batch = on_batch;
  sc.on_status = on_status;
  sc.on_hyperparams = on_hyperparams;
  sc.user = &L;
  if (L.s.impala) hp_names[HP_LR] = "impala.lr";
  int nk;
  const cfg_key *schema = onpolicy_schema(&nk);
  live_hp_init(&L.live, hp_names, HP_COUNT, HP_LR, schema, nk, L.cfg, &L.stopping, L.st, L.wr, run,
               cfg_path, L.env_steps_base, resume);
  rpc_spec spec;
  op_rpc_spec(s, run, &spec);
  if (rpc_server_create(&sc, &spec, &L.srv, &err)) die("rpc server", &err);
  publish(&L);

  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  emit("{\"event\":\"listening\",\"port\":%d,\"run\":\"%s\",\"device\":\"%s\",\"algo\":\"%s\"}",
       rpc_server_port(L.srv), run, device == NN_CUDA ? "cuda" : "cpu",
       s->impala ? "impala" : "ppo");

  /* Trainer buffers, time-major, sized once. */
  const size_t Tz = (size_t)T, Bz = (size_t)B, F = s->obs_n, ob = s->obs_bytes;
  const size_t ab = s->A > 0 ? sizeof(int32_t) : (size_t)s->D * sizeof(float);
  void *obs_raw = malloc((Tz + 1) * Bz * ob), *fin_raw = malloc(Tz * Bz * ob);
  float *obs_f = malloc((Tz + 1) * Bz * F * sizeof(float));
  float *fin_f = malloc(Tz * Bz * F * sizeof(float));
  void *act = malloc(Tz * Bz * ab);
  float *rew = malloc(Tz * Bz * sizeof(float)), *logp = malloc(Tz * Bz * sizeof(float));
  uint8_t *term = malloc(Tz * Bz), *trunc = malloc(Tz * Bz);
  int64_t *ver = malloc(Bz * sizeof(int64_t));
  const size_t S = 2 * (size_t)s->lstm;
  float *core0 = S ? malloc(Bz * S * sizeof(float)) : NULL;
  if (!obs_raw || !fin_raw || !obs_f || !fin_f || !act || !rew || !logp || !term || !trunc ||
      !ver || (S && !core0)) {
    fprintf(stderr, "shoal-onpolicy-learner: out of memory\n");
    return 1;
  }
  replay_traj_batch qb = {{obs_raw, act, rew, term, trunc, fin_raw, core0}, logp, ver, 1};

  const bool anneal = config_bool(L.cfg, s->impala ? "impala.anneal_lr" : "ppo.anneal_lr");
  const bool eval_greedy = config_bool(L.cfg, "run.eval_greedy");
  const double log_every = config_float(L.cfg, "learner.log_every_s");
  float lr_set = (float)L.live.hp[HP_LR];

  double t0 = shoal_now_s(), t_log = t0, t_snap = t0;
  int64_t steps_at_log = 0, updates_at_log = L.updates, last_eval_steps = L.steps_trained;
  int64_t next_eval = L.steps_trained + (int64_t)L.live.hp[HP_EVAL_EVERY];
  uint64_t samples_at_log = 0, skipped = 0;
  onpolicy_stats last = {0};
  last.loss = NAN;
  /* Policy lag of the unrolls trained on, over the current log window and the run. */
  double lag_sum = 0, lag_n = 0;
  int64_t lag_max = 0, lag_max_run = 0, lag_min_run = INT64_MAX;
  double lag_sum_run = 0, lag_n_run = 0, lag_mean_last = NAN;
  int64_t lag_max_last = 0;
  uint64_t eval_seed = 1000003;
  const char *reason = "signal";
  for (;;) {
    if (stop_signal) break;
    int64_t env_steps = L.env_steps_base + atomic_load(&L.steps_in);
    live_hp_apply(&L.live, NULL, NULL, L.wr, run, env_steps, "shoal-onpolicy-learner");
    /* The live-tunable settings, read from L.hp each time. */
    const int64_t max_steps = (int64_t)L.live.hp[HP_MAX_STEPS],
                  eval_every = (int64_t)L.live.hp[HP_EVAL_EVERY];
    const int64_t publish_every = (int64_t)L.live.hp[HP_PUBLISH];
    const double max_s = L.live.hp[HP_MAX_S], solve = L.live.hp[HP_SOLVE],
                 snap_every = L.live.hp[HP_SNAP];
    const float lr0 = (float)L.live.hp[HP_LR];
    double now = shoal_now_s();
    if (max_steps > 0 && env_steps >= max_steps) {
      reason = "max_env_steps";
      break;
    }
    if (max_s > 0 && now - t0 >= max_s) {
      reason = "max_seconds";
      break;
    }
    int64_t v_now = atomic_load(&L.version);
    int rc = replay_traj_pop(L.q, B, v_now, 100, &qb, &err);
    if (rc == 0) {
      for (int i = 0; i < B; i++) {
        int64_t lag = v_now - ver[i];
        if (lag < 0) lag = 0; /* parameters from before a restart without a snapshot */
        lag_sum += (double)lag, lag_n++;
        lag_sum_run += (double)lag, lag_n_run++;
        if (lag > lag_max) lag_max = lag;
        if (lag > lag_max_run) lag_max_run = lag;
        if (lag < lag_min_run) lag_min_run = lag;
      }
      if (s->norm_obs) {
        op_obs_to_float(s, obs_raw, obs_f, Tz * Bz, NULL);
        op_norm_update(&L.norm, obs_f, Tz * Bz);
        op_norm_apply(&L.norm, obs_f, Tz * Bz);
        /* The bootstrap row belongs to the actor's next unroll: normalised, not counted. */
        op_obs_to_float(s, (uint8_t *)obs_raw + Tz * Bz * ob, obs_f + Tz * Bz * F, Bz, &L.norm);
      } else {
        op_obs_to_float(s, obs_raw, obs_f, (Tz + 1) * Bz, NULL);
      }
      if (s->bootstrap_truncation)
        op_obs_to_float(s, fin_raw, fin_f, Tz * Bz, s->norm_obs ? &L.norm : NULL);
      if (anneal && max_steps > 0) {
        float frac = 1.0f - (float)L.steps_trained / (float)max_steps;
        op_agent_set_lr(&L.ag, lr0 * (frac > 1e-3f ? frac : 1e-3f));
      } else if (lr0 != lr_set) {
        op_agent_set_lr(&L.ag, lr0);
        lr_set = lr0;
      }
      onpolicy_batch ob_ = {
          T, B, obs_f, act, logp, rew, term, trunc, s->bootstrap_truncation ? fin_f : NULL, core0};
      rc = op_agent_learn(&L.ag, &ob_, &last, &err);
      L.steps_trained += (int64_t)(Tz * Bz);
      if (rc == SHOAL_ENAN) {
        skipped++;
        fprintf(stderr, "shoal-onpolicy-learner: update skipped: %s\n", err.msg);
      } else if (rc) {
        die("learn", &err);
      } else {
        L.updates++;
        if (L.updates % publish_every == 0) {
          atomic_fetch_add(&L.version, 1);
          publish(&L);
        }
      }
    } else if (rc != SHOAL_ETIMEDOUT) {
      die("trajectory FIFO", &err);
    }

    now = shoal_now_s();
    env_steps = L.env_steps_base + atomic_load(&L.steps_in);
    double ret100 = NAN;
    pthread_mutex_lock(&L.ep_mu);
    uint64_t neps = L.episodes;
    if (neps) {
      int k = neps < RETURNS_KEPT ? (int)neps : RETURNS_KEPT;
      double sum = 0;
      for (int i = 0; i < k; i++) sum += L.returns[i];
      ret100 = sum / k;
    }
    pthread_mutex_unlock(&L.ep_mu);
    /* Evaluate on schedule, or early once training returns say the threshold may be
     * reached (at most four times per schedule period). */
    bool due = rc == 0 && L.steps_trained >= next_eval;
    if (rc == 0 && solve != 0 && neps >= RETURNS_KEPT && ret100 >= solve &&
        L.steps_trained - last_eval_steps >= eval_every / 4)
      due = true;
    if (due) {
      while (next_eval <= L.steps_trained) next_eval += eval_every;
      last_eval_steps = L.steps_trained;
      double m, sd;
      if (op_eval_run(ev, &L.ag, s->norm_obs ? &L.norm : NULL, eval_greedy, eval_seed++, &m, &sd,
                      NULL, NULL, &err))
        die("evaluation", &err);
      L.eval_return = m;
      if (m > L.best_eval) L.best_eval = m;
      store_writer_metric(L.wr, run, "eval_return", env_steps, unix_now(), m);
      snapshot(&L, env_steps, m);
      if (solve != 0 && m >= solve) {
        reason = "solved";
        break;
      }
    }
    if (now - t_snap >= snap_every) {
      t_snap = now;
      snapshot(&L, env_steps, L.eval_return);
    }
    if (now - t_log >= log_every) {
      double dt = now - t_log;
      rpc_server_stats ss;
      rpc_server_stats_get(L.srv, &ss);
      replay_traj_stats qs;
      replay_traj_get_stats(L.q, &qs);
      if (lag_n > 0) lag_mean_last = lag_sum / lag_n, lag_max_last = lag_max;
      char j1[32], j2[32], j3[32], j4[32];
      double sps = (double)(env_steps - steps_at_log) / dt;
      double ups = (double)(L.updates - updates_at_log) / dt;
      double samples_s = (double)(ss.samples - samples_at_log) * T / dt;
      uint64_t stale = qs.dropped_stale + atomic_load(&L.stale_ingest);
      emit(
          "{\"event\":\"progress\",\"t\":%.2f,\"env_steps\":%lld,\"sps\":%.1f,"
          "\"samples_s\":%.1f,\"updates\":%lld,\"ups\":%.1f,\"replay\":%lld,"
          "\"episodes\":%llu,\"return100\":%s,\"eval\":%s,\"version\":%lld,"
          "\"loss\":%s,\"rejected\":%llu,\"insert_waits\":0,\"lag_mean\":%s,\"lag_max\":%lld,"
          "\"dropped_stale\":%llu,\"entropy\":%.4f,\"approx_kl\":%.5f,\"clip_frac\":%.4f,"
          "\"mean_rho\":%.4f,\"skipped\":%llu}",
          now - t0, (long long)env_steps, sps, samples_s, (long long)L.updates, ups,
          (long long)qs.held, (unsigned long long)neps, jnum(j1, sizeof j1, ret100),
          jnum(j2, sizeof j2, L.eval_return), (long long)atomic_load(&L.version),
          jnum(j3, sizeof j3, last.loss),
          (unsigned long long)(ss.rejected + atomic_load(&L.bad_batches)),
          jnum(j4, sizeof j4, lag_mean_last), (long long)lag_max_last, (unsigned long long)stale,
          last.entropy, last.approx_kl, last.clip_frac, last.mean_rho, (unsigned long long)skipped);
      double tu = unix_now();
      store_writer_metric(L.wr, run, "sps", env_steps, tu, sps);
      store_writer_metric(L.wr, run, "updates_s", env_steps, tu, ups);
      if (neps) store_writer_metric(L.wr, run, "return100", env_steps, tu, ret100);
      if (isfinite(last.loss)) {
        store_writer_metric(L.wr, run, "loss", env_steps, tu, last.loss);
        store_writer_metric(L.wr, run, "entropy", env_steps, tu, last.entropy);
      }
      if (lag_n > 0) {
        store_writer_metric(L.wr, run, "policy_lag_mean", env_steps, tu, lag_mean_last);
        store_writer_metric(L.wr, run, "policy_lag_max", env_steps, tu, (double)lag_max_last);
      }
      store_writer_metric(L.wr, run, "dropped_stale", env_steps, tu, (double)stale);
      t_log = now;
      steps_at_log = env_steps;
      updates_at_log = L.updates;
      samples_at_log = ss.samples;
      lag_sum = lag_n = 0;
      lag_max = 0;
    }
  }

  /* Stop: no more batches (blocked inserts wake with ECLOSED), then keep what was learned. */
  int64_t env_steps = L.env_steps_base + atomic_load(&L.steps_in);
  atomic_store(&L.stopping, true);
  live_hp_wake(&L.live);
  replay_traj_close(L.q);
  rpc_server_destroy(L.srv, 1.0);
  L.srv = NULL;
  snapshot(&L, env_steps, L.eval_return);
  store_writer_run_status(L.wr, run,
                          !strcmp(reason, "signal") ? STORE_RUN_STOPPED : STORE_RUN_FINISHED);
  store_writer_stats ws;
  int wrc = store_writer_close(L.wr, 30.0, &ws);
  replay_traj_stats qs;
  replay_traj_get_stats(L.q, &qs);
  char j1[32], j2[32], j3[32];
  emit(
      "{\"event\":\"done\",\"reason\":\"%s\",\"t\":%.2f,\"env_steps\":%lld,\"updates\":%lld,"
      "\"version\":%lld,\"eval\":%s,\"best_eval\":%s,\"store_ok\":%s,\"lag_mean\":%s,"
      "\"lag_max\":%lld,\"lag_min\":%lld,\"dropped_stale\":%llu,\"bad_batches\":%llu}",
      reason, shoal_now_s() - t0, (long long)env_steps, (long long)L.updates,
      (long long)atomic_load(&L.version), jnum(j1, sizeof j1, L.eval_return),
      jnum(j2, sizeof j2, L.best_eval), wrc == 0 ? "true" : "false",
      jnum(j3, sizeof j3, lag_n_run > 0 ? lag_sum_run / lag_n_run : NAN), (long long)lag_max_run,
      (long long)(lag_n_run > 0 ? lag_min_run : 0),
      (unsigned long long)(qs.dropped_stale + atomic_load(&L.stale_ingest)),
      (unsigned long long)atomic_load(&L.bad_batches));
  store_close(L.st);
  op_eval_destroy(ev);
  op_agent_destroy(&L.ag);
  live_hp_destroy(&L.live);
  op_norm_free(&L.norm);
  replay_traj_destroy(L.q);
  config_destroy(L.cfg);
  free(L.pub);
  free(obs_raw), free(fin_raw), free(obs_f), free(fin_f), free(act), free(rew), free(logp);
  free(term), free(trunc), free(ver), free(core0);
  return 0;
}
