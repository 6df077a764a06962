/* SPDX-License-Identifier: Apache-2.0 */
/*
 * learner/onpolicy.c — the IMPALA and PPO (APPO) algorithm of the learner runtime
 * (learner/runtime.h). Checks every unroll batch actors push (columns in run/run.h) and
 * queues its unrolls in the trajectory FIFO with the staleness bound; the trainer pops
 * time-major batches of unrolls and runs impala_learn (V-trace corrects the actors'
 * lag) or ppo_learn (APPO: the clipped ratio against the behaviour log-probs, as Sample
 * Factory runs PPO on asynchronous actors), and measures the policy lag (learner version
 * − the version that acted) of every unroll it trains on. The learner owns the
 * observation normaliser and publishes it with the parameters. A snapshot carries the
 * parameters, the observation statistics and the learner state (optimizer moments and
 * step, PPO's shuffling RNG), so --resume continues exactly.
 *
 * With an LSTM core (ac.lstm) every unroll brings the (h, c) its first step started
 * from (the core0 column); it waits in the FIFO's one-row unroll column and becomes
 * onpolicy_batch.core0, from which learn() re-runs the core over the unroll.
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/learners.h"
#include "learner/publish.h"
#include "replay/replay.h"
#include "run/run.h"

/* Live tuning: the run's learning rate (impala.lr or ppo.lr; with anneal_lr the
 * schedule goes on from the new value) and the evaluation period, applied by the
 * trainer between two updates. */
enum { HP_LR, HP_EVAL_EVERY, HP_COUNT };
#define HP(k) (LRT_HP_COMMON + (k))

typedef struct learner {
  lrt_base b; /* first: lrt_new fills it */
  const char *hp_names[HP_COUNT];
  op_spec s;
  int64_t max_staleness;

  op_agent ag;
  op_norm norm; /* observation statistics (env.norm_obs); the trainer's only */
  replay_traj *q;
  float *pub; /* the published blob */

  /* ingest (rpc threads) */
  atomic_int_fast64_t steps_in; /* env steps delivered (queued or dropped as stale) */
  atomic_uint_fast64_t bad_batches, stale_ingest, unrolls_in;
  /* After a stop rule, while the actors stop (drain): unrolls taken and dropped, as no
   * update will use them (on-policy data is not kept across a stop). */
  atomic_bool draining;
  atomic_uint_fast64_t dropped_at_stop;

  /* the trainer: time-major buffers sized once */
  void *obs_raw, *fin_raw, *act;
  float *obs_f, *fin_f, *rew, *logp, *core0;
  uint8_t *term, *trunc;
  int64_t *ver;
  replay_traj_batch qb;
  bool anneal, eval_greedy, popped;
  float lr_set;
  int E;
  int64_t env_steps_base, updates, steps_trained, last_eval_steps, next_eval;
  uint64_t skipped;
  onpolicy_stats last;
  _Atomic double loss; /* last.loss, for Status on rpc threads */
  /* Policy lag of the unrolls trained on, over the current log window and the run. */
  double lag_sum, lag_n, lag_sum_run, lag_n_run, lag_mean_last;
  int64_t lag_max, lag_max_run, lag_min_run, lag_max_last;
} learner;

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
  if (b->actor_id >= (uint64_t)L->b.actors)
    return bad(L, err, "actor id %llu outside [0, %d)", (unsigned long long)b->actor_id,
               L->b.actors);
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
  int64_t now = lrt_version(L->b.rt);
  atomic_fetch_add(&L->steps_in, (int64_t)NT);
  /* Returns count whatever happens to the data: the episodes were played. */
  for (size_t k = 0; k < NT; k++)
    if (term[k] || trunc[k]) lrt_episode(L->b.rt, epret[k]);
  if (atomic_load(&L->draining)) {
    atomic_fetch_add(&L->dropped_at_stop, b->n);
    return 0;
  }
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

/* ---- the trainer ---------------------------------------------------------------- */

static void count_lag(learner *L, int64_t v_now) {
  for (int i = 0; i < L->s.learn_B; i++) {
    int64_t lag = v_now - L->ver[i];
    if (lag < 0) lag = 0; /* parameters from before a restart without a snapshot */
    L->lag_sum += (double)lag, L->lag_n++;
    L->lag_sum_run += (double)lag, L->lag_n_run++;
    if (lag > L->lag_max) L->lag_max = lag;
    if (lag > L->lag_max_run) L->lag_max_run = lag;
    if (lag < L->lag_min_run) L->lag_min_run = lag;
  }
}

/* The popped batch as floats: normalised (and the statistics updated) with norm_obs. */
static void batch_to_float(learner *L) {
  const op_spec *s = &L->s;
  const size_t TB = (size_t)s->T * (size_t)s->learn_B, B = (size_t)s->learn_B;
  if (s->norm_obs) {
    op_obs_to_float(s, L->obs_raw, L->obs_f, TB, NULL);
    op_norm_update(&L->norm, L->obs_f, TB);
    op_norm_apply(&L->norm, L->obs_f, TB);
    /* The bootstrap row belongs to the actor's next unroll: normalised, not counted. */
    op_obs_to_float(s, (uint8_t *)L->obs_raw + TB * s->obs_bytes, L->obs_f + TB * s->obs_n, B,
                    &L->norm);
  } else {
    op_obs_to_float(s, L->obs_raw, L->obs_f, TB + B, NULL);
  }
  if (s->bootstrap_truncation)
    op_obs_to_float(s, L->fin_raw, L->fin_f, TB, s->norm_obs ? &L->norm : NULL);
}

/* One update from the next batch of unrolls (waits up to 100 ms for it). */
static int step(void *a, const double *hp, bool *trained, shoal_error *err) {
  learner *L = a;
  const op_spec *s = &L->s;
  const int64_t v_now = lrt_version(L->b.rt);
  L->popped = false;
  int rc = replay_traj_pop(L->q, s->learn_B, v_now, 100, &L->qb, err);
  if (rc == SHOAL_ETIMEDOUT) return 0;
  if (rc) return rc;
  L->popped = true;
  count_lag(L, v_now);
  batch_to_float(L);
  const float lr0 = (float)hp[HP(HP_LR)];
  const int64_t max_steps = (int64_t)hp[LRT_HP_MAX_STEPS];
  if (L->anneal && max_steps > 0) {
    float frac = 1.0f - (float)L->steps_trained / (float)max_steps;
    op_agent_set_lr(&L->ag, lr0 * (frac > 1e-3f ? frac : 1e-3f));
  } else if (lr0 != L->lr_set) {
    op_agent_set_lr(&L->ag, lr0);
    L->lr_set = lr0;
  }
  onpolicy_batch b = {s->T,    s->learn_B, L->obs_f,
                      L->act,  L->logp,    L->rew,
                      L->term, L->trunc,   s->bootstrap_truncation ? L->fin_f : NULL,
                      L->core0};
  rc = op_agent_learn(&L->ag, &b, &L->last, err);
  L->loss = L->last.loss;
  L->steps_trained += (int64_t)s->T * s->learn_B;
  if (rc == SHOAL_ENAN) {
    L->skipped++;
    lrt_note(L->b.rt, "update skipped: %s", err->msg);
    return 0;
  }
  if (rc) return rc;
  L->updates++;
  *trained = true;
  return 0;
}

static void figs(void *a, lrt_figs *f) {
  learner *L = a;
  replay_traj_stats qs;
  replay_traj_get_stats(L->q, &qs);
  f->env_steps = L->env_steps_base + atomic_load(&L->steps_in);
  f->held = qs.held;
  f->held_steps = -1;
  f->bad_batches = atomic_load(&L->bad_batches);
  f->loss = L->loss;
}

/* On schedule (run.eval_every_steps trained), or early once training returns say the
 * threshold may be reached (at most four times per period); only after an update. */
static bool eval_due(void *a, double now, int64_t steps, const double *hp, double ret100,
                     uint64_t episodes) {
  learner *L = a;
  (void)now, (void)steps;
  const int64_t every = (int64_t)hp[HP(HP_EVAL_EVERY)];
  const double solve = hp[LRT_HP_SOLVE];
  if (!L->popped) return false;
  bool due = L->steps_trained >= L->next_eval;
  if (solve != 0 && episodes >= 100 && ret100 >= solve &&
      L->steps_trained - L->last_eval_steps >= every / 4)
    due = true;
  if (!due) return false;
  while (L->next_eval <= L->steps_trained) L->next_eval += every;
  L->last_eval_steps = L->steps_trained;
  return true;
}

/* On schedule always (run.eval_every_steps is at least 1). */
static bool evaluates(void *a, const double *hp) {
  (void)a, (void)hp;
  return true;
}

/* The model's parameters, then (norm_obs) the observation normaliser's two entries. */
static int params(void *a, const float **blob, size_t *n, rpc_param_entry **layout, int *nl,
                  shoal_error *err) {
  learner *L = a;
  nn_model *m = op_agent_model(&L->ag);
  op_params_pack(&L->ag, &L->s, &L->norm, L->pub);
  *blob = L->pub;
  *n = op_params_floats(&L->ag, &L->s);
  if (!layout) return 0;
  size_t np;
  nn_model_params(m, &np);
  int rc = publish_layout(m, 2, layout, nl, err);
  if (rc || !L->s.norm_obs) return rc;
  const int64_t on = (int64_t)L->s.obs_n;
  (*layout)[(*nl)++] = (rpc_param_entry){
      .name = "obs_norm.mean_var", .ndim = 1, .shape = {2 * on}, .offset = np, .numel = 2 * on};
  (*layout)[(*nl)++] =
      (rpc_param_entry){.name = "obs_norm.count", .ndim = 0, .offset = np + 2 * on, .numel = 1};
  return 0;
}

static int snapshot(void *a, uint8_t **buf, size_t *len, shoal_error *err) {
  learner *L = a;
  return op_snapshot_encode(&L->ag, &L->s, &L->norm, buf, len, err);
}

static int resume(void *a, const uint8_t *bytes, size_t len, const store_snapshot_meta *m,
                  shoal_error *err) {
  learner *L = a;
  bool restored = false;
  int rc = op_snapshot_resume(&L->ag, &L->s, &L->norm, bytes, len, &restored, err);
  if (rc) return rc;
  if (restored)
    lrt_note(L->b.rt, "resume: optimizer state restored (%lld updates)", (long long)m->updates);
  else
    lrt_note(L->b.rt,
             "resume: the snapshot holds no optimizer state (written by an older shoal): "
             "the optimizer restarts");
  L->updates = m->updates;
  L->env_steps_base = m->env_steps;
  L->steps_trained = L->last_eval_steps = m->env_steps;
  return 0;
}

static void status(void *a, rpc_counter *out, int *k, int cap) {
  learner *L = a;
  replay_traj_stats qs;
  replay_traj_get_stats(L->q, &qs);
  if (*k >= cap) return;
  snprintf(out[*k].name, sizeof out[*k].name, "dropped_stale");
  out[(*k)++].value = (double)(qs.dropped_stale + atomic_load(&L->stale_ingest));
}

static void progress(void *a, char *buf, size_t cap, double dt, int64_t steps, double t_unix) {
  learner *L = a;
  (void)dt;
  replay_traj_stats qs;
  replay_traj_get_stats(L->q, &qs);
  if (L->lag_n > 0) L->lag_mean_last = L->lag_sum / L->lag_n, L->lag_max_last = L->lag_max;
  char j[32];
  const uint64_t stale = qs.dropped_stale + atomic_load(&L->stale_ingest);
  snprintf(
      buf, cap,
      ",\"insert_waits\":0,\"lag_mean\":%s,\"lag_max\":%lld,\"dropped_stale\":%llu,"
      "\"entropy\":%.4f,\"approx_kl\":%.5f,\"clip_frac\":%.4f,\"mean_rho\":%.4f,"
      "\"skipped\":%llu",
      isfinite(L->lag_mean_last) ? (snprintf(j, sizeof j, "%.3f", L->lag_mean_last), j) : "null",
      (long long)L->lag_max_last, (unsigned long long)stale, L->last.entropy, L->last.approx_kl,
      L->last.clip_frac, L->last.mean_rho, (unsigned long long)L->skipped);
  if (isfinite(L->last.loss))
    store_writer_metric(L->b.wr, L->b.run, "entropy", steps, t_unix, L->last.entropy);
  if (L->lag_n > 0) {
    store_writer_metric(L->b.wr, L->b.run, "policy_lag_mean", steps, t_unix, L->lag_mean_last);
    store_writer_metric(L->b.wr, L->b.run, "policy_lag_max", steps, t_unix,
                        (double)L->lag_max_last);
  }
  store_writer_metric(L->b.wr, L->b.run, "dropped_stale", steps, t_unix, (double)stale);
  L->lag_sum = L->lag_n = 0;
  L->lag_max = 0;
}

/* No more batches: inserts blocked on a full FIFO wake with SHOAL_ECLOSED. */
static void drain(void *a) {
  learner *L = a;
  atomic_store(&L->draining, true);
  replay_traj_close(L->q); /* a push waiting for room is answered: its resend is taken */
}

static void halt(void *a) {
  learner *L = a;
  replay_traj_close(L->q);
}

static bool finish(void *a, char *buf, size_t cap) {
  learner *L = a;
  replay_traj_stats qs;
  replay_traj_get_stats(L->q, &qs);
  char j[32] = "null";
  if (L->lag_n_run > 0) snprintf(j, sizeof j, "%.3f", L->lag_sum_run / L->lag_n_run);
  snprintf(buf, cap,
           ",\"lag_mean\":%s,\"lag_max\":%lld,\"lag_min\":%lld,\"dropped_stale\":%llu,"
           "\"dropped_at_stop\":%llu",
           j, (long long)L->lag_max_run, (long long)(L->lag_n_run > 0 ? L->lag_min_run : 0),
           (unsigned long long)(qs.dropped_stale + atomic_load(&L->stale_ingest)),
           (unsigned long long)atomic_load(&L->dropped_at_stop));
  return true;
}

/* ---- evaluation (its own thread, its own copy of the policy) -------------------- */

typedef struct op_evaluator {
  const learner *L;
  op_agent ag;
  op_norm norm;
  op_eval *loop;
} op_evaluator;

static void eval_destroy(void *ev) {
  op_evaluator *e = ev;
  if (!e) return;
  op_eval_destroy(e->loop);
  op_agent_destroy(&e->ag);
  op_norm_free(&e->norm);
  free(e);
}

static void *eval_create(void *a, shoal_error *err) {
  learner *L = a;
  op_evaluator *e = calloc(1, sizeof *e);
  if (!e) {
    shoal_error_set(err, SHOAL_ENOMEM, "evaluation: out of memory");
    return NULL;
  }
  e->L = L;
  if (op_agent_from_config(L->b.cfg, &L->s, L->E, false, NN_CPU, &e->ag, err) ||
      op_norm_init(&e->norm, (int)L->s.obs_n, err) ||
      !(e->loop = op_eval_create(&L->s, (int)config_int(L->b.cfg, "run.eval_episodes"), err))) {
    eval_destroy(e);
    return NULL;
  }
  return e;
}

/* The published blob (parameters and observation statistics) played by the policy. */
static int eval_run(void *ev, const float *blob, size_t n, uint64_t seed, double *mean,
                    shoal_error *err) {
  op_evaluator *e = ev;
  const learner *L = e->L;
  double sd;
  int rc = op_params_unpack(&e->ag, &L->s, blob, n, &e->norm, err);
  return rc ? rc
            : op_eval_run(e->loop, &e->ag, L->s.norm_obs ? &e->norm : NULL, L->eval_greedy, seed,
                          mean, &sd, NULL, NULL, err);
}

static void destroy(void *a) {
  learner *L = a;
  op_agent_destroy(&L->ag);
  op_norm_free(&L->norm);
  replay_traj_destroy(L->q);
  free(L->pub);
  free(L->obs_raw), free(L->fin_raw), free(L->obs_f), free(L->fin_f), free(L->act);
  free(L->rew), free(L->logp), free(L->term), free(L->trunc), free(L->ver), free(L->core0);
  free(L);
}

/* ---- set-up --------------------------------------------------------------------- */

/* The FIFO: per step obs (with the bootstrap row), action, reward, the two flags and
 * the final observation. A full FIFO blocks the rpc thread that inserts, which holds
 * that actor's stream: backpressure down to the actor's bounded queue. */
static int make_fifo(learner *L, shoal_error *err) {
  const op_spec *s = &L->s;
  const int B = s->learn_B;
  /* The FIFO and the actors' queues are where unrolls wait, so they set the policy lag.
   * By default the FIFO holds one update's batch (or one actor's, if larger): while the
   * learner trains on it the next actors' batches wait in their rpc calls. */
  int64_t capacity = config_int(L->b.cfg, "replay.capacity");
  if (capacity == 0) capacity = B > s->num_envs ? B : s->num_envs;
  if (capacity < B || capacity < s->num_envs)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "replay.capacity %lld holds fewer unrolls than an update (%d) or an "
                           "actor's batch (env.num_envs %d)",
                           (long long)capacity, B, s->num_envs);
  replay_traj_config qc = {0};
  qc.T = s->T;
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
  qc.max_staleness = L->max_staleness;
  qc.full = REPLAY_FULL_BLOCK;
  qc.push_timeout_ms = -1;
  return replay_traj_create(&qc, &L->q, err);
}

/* The trainer's time-major buffers, sized once. */
static int alloc_batch(learner *L, shoal_error *err) {
  const op_spec *s = &L->s;
  const size_t Tz = (size_t)s->T, Bz = (size_t)s->learn_B, F = s->obs_n, ob = s->obs_bytes;
  const size_t ab = s->A > 0 ? sizeof(int32_t) : (size_t)s->D * sizeof(float);
  const size_t S = 2 * (size_t)s->lstm;
  L->obs_raw = malloc((Tz + 1) * Bz * ob);
  L->fin_raw = malloc(Tz * Bz * ob);
  L->obs_f = malloc((Tz + 1) * Bz * F * sizeof(float));
  L->fin_f = malloc(Tz * Bz * F * sizeof(float));
  L->act = malloc(Tz * Bz * ab);
  L->rew = malloc(Tz * Bz * sizeof(float));
  L->logp = malloc(Tz * Bz * sizeof(float));
  L->term = malloc(Tz * Bz);
  L->trunc = malloc(Tz * Bz);
  L->ver = malloc(Bz * sizeof(int64_t));
  L->core0 = S ? malloc(Bz * S * sizeof(float)) : NULL;
  L->pub = malloc(op_params_floats(&L->ag, s) * sizeof(float));
  if (!L->obs_raw || !L->fin_raw || !L->obs_f || !L->fin_f || !L->act || !L->rew || !L->logp ||
      !L->term || !L->trunc || !L->ver || (S && !L->core0) || !L->pub)
    return shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
  L->qb = (replay_traj_batch){
      {L->obs_raw, L->act, L->rew, L->term, L->trunc, L->fin_raw, L->core0}, L->logp, L->ver, 1};
  return 0;
}

static void *create(lrt *rt, lrt_algo *algo, shoal_error *err) {
  learner *L = lrt_new(rt, sizeof *L, err);
  if (!L) return NULL;
  L->max_staleness = config_int(L->b.cfg, "replay.max_staleness");
  L->last.loss = NAN;
  L->loss = NAN;
  L->lag_mean_last = NAN;
  L->lag_min_run = INT64_MAX;
  nn_set_threads((int)config_int(L->b.cfg, "learner.threads"));
  /* The actor-critic's learn() runs on host arrays; CUDA only when asked for. */
  nn_device device = strcmp(config_string(L->b.cfg, "learner.device"), "cuda") ? NN_CPU : NN_CUDA;
  int rc = op_spec_from_config(L->b.cfg, &L->s, err);
  const op_spec *s = &L->s;
  const int episodes = (int)config_int(L->b.cfg, "run.eval_episodes");
  L->E = episodes < 16 ? episodes : 16;
  if (!rc) rc = make_fifo(L, err);
  if (!rc) rc = op_agent_from_config(L->b.cfg, s, s->num_envs, true, device, &L->ag, err);
  if (!rc) rc = op_norm_init(&L->norm, (int)s->obs_n, err);
  if (!rc) rc = alloc_batch(L, err);
  if (rc) {
    destroy(L);
    return NULL;
  }
  L->anneal = config_bool(L->b.cfg, s->impala ? "impala.anneal_lr" : "ppo.anneal_lr");
  L->eval_greedy = config_bool(L->b.cfg, "run.eval_greedy");
  L->hp_names[HP_LR] = s->impala ? "impala.lr" : "ppo.lr";
  L->hp_names[HP_EVAL_EVERY] = "run.eval_every_steps";
  L->lr_set = (float)config_float(L->b.cfg, L->hp_names[HP_LR]);
  L->next_eval = (int64_t)config_int(L->b.cfg, "run.eval_every_steps");
  *algo = (lrt_algo){.name = s->impala ? "impala" : "ppo",
                     .device = device == NN_CUDA ? "cuda" : "cpu",
                     .hp_names = L->hp_names,
                     .hp_count = HP_COUNT,
                     .hp_lr = HP_LR,
                     .samples_per_item = s->T,
                     .on_batch = on_batch,
                     .step = step,
                     .figs = figs,
                     .eval_due = eval_due,
                     .evaluates = evaluates,
                     .params = params,
                     .snapshot = snapshot,
                     .resume = resume,
                     .status = status,
                     .progress = progress,
                     .drain = drain,
                     .halt = halt,
                     .finish = finish,
                     .eval_create = eval_create,
                     .eval_run = eval_run,
                     .eval_destroy = eval_destroy,
                     .destroy = destroy};
  op_rpc_spec(s, L->b.run, &algo->spec);
  algo->spec.max_actors = (uint64_t)L->b.actors;
  return L;
}

const lrt_program onpolicy_learner = {"shoal-onpolicy-learner", onpolicy_schema, onpolicy_check,
                                      create};
