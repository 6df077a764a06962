/*
 * shoal-learner: the Ape-X learner. Serves shoal.v1.Learner over gRPC, inserts what
 * actors push into prioritized replay, trains the DQN, publishes parameters, writes
 * snapshots and metrics through the store, evaluates the greedy policy, and prints one
 * JSON progress line a second on stdout for `shoal run`.
 *
 *   shoal-learner --config RESOLVED.yaml --run RUN [--resume] [--set key=value ...]
 *
 * The first stdout line is {"event":"listening","port":P}; the last is
 * {"event":"done",...}. SIGINT/SIGTERM stop it cleanly: a final snapshot, the replay
 * saved (file stores), the store flushed; exit status 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "run/run.h"
#include "config/config.h"
#include "envs/envs.h"
#include "learner/follow.h"
#include "learner/live_hp.h"
#include "learner/publish.h"
#include "learner/replay_log.h"
#include "replay/replay.h"
#include "rpc/rpc.h"
#include "store/store.h"

/* The columns of an Ape-X SampleBatch, in the spec's order. Rows are grouped by env:
 * that env's steps in time order, then one "tail" row per step that ended an episode,
 * holding its final observation (other columns of a tail row are ignored). */
enum { COL_OBS, COL_ACTION, COL_REWARD, COL_TERM, COL_TRUNC, COL_PRIO, COL_ENV, COL_TAIL, NCOLS };

enum { RETURNS_KEPT = 100 };

/* Live tuning (SetHyperparams, `shoal set`): the keys a person may change on a running
 * learner. Bounds and types come from the config schema. Actor-side keys (actor.eps,
 * ...) are not here: actors read their config once, so those need a restart. */
enum {
  HP_LR,
  HP_RATIO,
  HP_TARGET,
  HP_BETA0,
  HP_BETA_STEPS,
  HP_PUBLISH,
  HP_SNAP,
  HP_EVAL_EVERY,
  HP_MAX_STEPS,
  HP_MAX_S,
  HP_SOLVE,
  HP_COUNT
};
static const char *const hp_names[HP_COUNT] = {"dqn.lr",
                                               "learner.replay_ratio",
                                               "dqn.target_period",
                                               "replay.beta0",
                                               "replay.beta_steps",
                                               "learner.publish_every",
                                               "learner.snapshot_every_s",
                                               "run.eval_every_s",
                                               "run.max_env_steps",
                                               "run.max_seconds",
                                               "run.solve_return"};

typedef struct learner {
  config *cfg;
  const char *run;
  int actors, num_envs, A;
  const env_spec *spec;
  env *spec_env;
  size_t obs_floats, obs_bytes;
  bool obs_u8;
  bool prioritized;

  replay *mem;
  dqn *q;
  rpc_server *srv;
  store *st;
  store_writer *wr;
  rlog *log; /* the replay log (learner/replay_log.h); NULL when replay.log is off */
  /* Inserts and their log records go in one at a time, so the log's item order is the
   * replay's and an item's log number is its replay seq + item_offset. */
  pthread_mutex_t log_mu;
  int64_t item_offset;
  uint64_t log_seq_lo;             /* replay seqs below this one have no log number (a gap) */
  atomic_uint_fast64_t log_errors; /* failed appends, first one printed */
  rlog_restore_info restored;      /* what --resume rebuilt from the log */
  /* The follower's rows as log records (its thread only, under log_mu). */
  unsigned char *fol_buf;
  size_t fol_cap;
  uint8_t *fol_reset;       /* per store stream: reset since its last record */
  bool restoring;           /* restore_replay is inserting: no episode counts */
  uint64_t restore_skipped; /* records of actors beyond this config's */
  follow *fol;              /* replay.source store|mixed: segments from the store (follow.c) */
  int store_streams;        /* replay streams after the actors' for store sources */

  /* Episode returns, from the rewards and flags of each replay stream. */
  pthread_mutex_t ep_mu;
  double *stream_ret;
  uint64_t *incarnation; /* per actor: the process whose episodes its streams hold */
  double returns[RETURNS_KEPT];
  uint64_t episodes;
  atomic_uint_fast64_t bad_batches;

  /* Exactly-once ingest, also across a learner crash. Per actor: the last seq inserted
   * into replay for its incarnation. One batch of an actor is inserted at a time
   * (actor_mu), so a batch resent on a new stream while the old stream's copy is still
   * being inserted is seen as the duplicate it is. Each batch's record in the replay
   * log names its actor, incarnation and seq, so a resumed learner rebuilds this table
   * from the same log as its replay: it drops resent batches the log holds and takes
   * the rest. */
  pthread_mutex_t *actor_mu;
  uint64_t *last_seq;
  atomic_uint_fast64_t batches_inserted, resent_dropped, stream_cuts;

  /* The rate limiter (as Reverb's SampleToInsertRatio): the trainer samples at most
   * replay_ratio transitions per transition inserted after warm-up, and inserts wait
   * while the insert side is more than `tolerance` samples ahead, so the ratio, not
   * the machine's speed, decides how often each transition is replayed. */
  pthread_mutex_t rl_mu;
  pthread_cond_t rl_cv;
  atomic_int_fast64_t sampled;
  double ratio, tolerance;
  int64_t warmup;
  atomic_bool stopping;
  atomic_uint_fast64_t insert_waits;

  /* The trainer's buffers for one batch. */
  void *obs_b, *nobs_b;
  float *obs_f, *nobs_f, *ret, *disc, *w, *prio;
  int32_t *act;
  int64_t *idx;
  uint64_t *gen;

  int64_t version, updates, env_steps_base, snapshots;
  int64_t last_snapshot_version; /* each version is stored once */
  double eval_return, best_eval;

  live_hp live;        /* live tuning: live.hp holds the values in effect (learner/live_hp.h) */
  bool tolerance_auto; /* learner.ratio_tolerance 0: derived from the replay ratio */
  double tolerance_per_ratio;
} learner;

static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }

static void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "shoal-learner: %s: %s\n", what,
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

/* A number for a JSON line: NaN and infinities become null. */
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

static void count_episodes(learner *L, int stream, const float *reward, const uint8_t *term,
                           const uint8_t *trunc, int n) {
  pthread_mutex_lock(&L->ep_mu);
  for (int i = 0; i < n; i++) {
    L->stream_ret[stream] += reward[i];
    if (term[i] || trunc[i]) {
      L->returns[L->episodes % RETURNS_KEPT] = L->stream_ret[stream];
      L->episodes++;
      L->stream_ret[stream] = 0;
    }
  }
  pthread_mutex_unlock(&L->ep_mu);
}

/* Room for n more inserts under the rate limiter; waits up to 2 s for the trainer.
 * Returns 0 when there is room, else SHOAL_EFULL (the client resends later). */
static int wait_for_room(learner *L, uint32_t n) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 2;
  int rc = 0;
  pthread_mutex_lock(&L->rl_mu);
  for (;;) {
    replay_stats rs;
    replay_get_stats(L->mem, &rs);
    double ahead = L->ratio * ((double)rs.inserted_steps + n - (double)L->warmup) -
                   (double)atomic_load(&L->sampled);
    if (ahead <= L->tolerance || atomic_load(&L->stopping)) break;
    atomic_fetch_add(&L->insert_waits, 1);
    if (pthread_cond_timedwait(&L->rl_cv, &L->rl_mu, &until) == ETIMEDOUT) {
      rc = SHOAL_EFULL;
      break;
    }
  }
  pthread_mutex_unlock(&L->rl_mu);
  return rc;
}

static int follow_wait(void *user, uint32_t n) { return wait_for_room(user, n); }

/* The rows of env e's group starting at row i: nsteps steps, then ntails tail rows
 * (one per step that ended an episode). Returns the row after the group, or 0 with err
 * set when the group is malformed. */
static uint32_t env_group(const learner *L, uint32_t n, const void *const *cols, uint32_t i,
                          uint32_t *nsteps, uint32_t *ntails, shoal_error *err) {
  const uint8_t *term = cols[COL_TERM], *trunc = cols[COL_TRUNC];
  const int32_t *envi = cols[COL_ENV];
  const uint8_t *tail = cols[COL_TAIL];
  int e = envi[i];
  if (e < 0 || e >= L->num_envs) {
    shoal_error_set(err, SHOAL_EINVAL, "row %u: env %d outside [0, %d)", i, e, L->num_envs);
    return 0;
  }
  uint32_t s0 = i, ended = 0;
  while (i < n && envi[i] == e && !tail[i]) ended += (term[i] || trunc[i]), i++;
  uint32_t t0 = i;
  while (i < n && envi[i] == e && tail[i]) i++;
  *nsteps = t0 - s0;
  *ntails = i - t0;
  if (*ntails != ended || *nsteps == 0) {
    shoal_error_set(err, SHOAL_EINVAL,
                    "env %d: %u steps ended an episode but %u final observations follow", e, ended,
                    *ntails);
    return 0;
  }
  return i;
}

/* Checks the env groups of a batch's n rows; *steps gets the env steps among them. */
static int batch_steps(const learner *L, uint32_t n, const void *const *cols, uint32_t *steps,
                       shoal_error *err) {
  uint32_t total = 0, nsteps, ntails;
  for (uint32_t i = 0; i < n;) {
    i = env_group(L, n, cols, i, &nsteps, &ntails, err);
    if (!i) return err && err->code ? err->code : SHOAL_EINVAL;
    total += nsteps;
  }
  *steps = total;
  return 0;
}

/* Puts a checked batch of actor a into replay: the streams cut where batches are
 * missing or a new process speaks, then each env's group; the actor's seq table moves
 * to it. With the log on, the batch's record goes into the log under the same lock as
 * the inserts, so the log's item order is the replay's. Called with actor_mu[a] held,
 * and by a restore (with the log not open yet). */
static int insert_batch(learner *L, int a, uint64_t incarnation, uint64_t seq, uint32_t n,
                        const void *const *cols, uint32_t steps, shoal_error *err) {
  const uint8_t *obs = cols[COL_OBS];
  const int32_t *action = cols[COL_ACTION];
  const float *reward = cols[COL_REWARD];
  const uint8_t *term = cols[COL_TERM], *trunc = cols[COL_TRUNC];
  const float *prio = cols[COL_PRIO];
  const int32_t *envi = cols[COL_ENV];
  const uint8_t *tail = cols[COL_TAIL];
  int rc = 0;
  /* A new process (incarnation), or batches missing in between (lost with a learner
   * crash, refused as invalid, dropped by the client): the streams' episodes are cut
   * there, never joined across the gap. */
  if (L->incarnation[a] != incarnation || seq != L->last_seq[a] + 1) {
    atomic_fetch_add(&L->stream_cuts, 1);
    for (int e = 0; e < L->num_envs && !rc; e++) {
      int stream = a * L->num_envs + e;
      rc = replay_reset_stream(L->mem, stream, err);
      pthread_mutex_lock(&L->ep_mu);
      L->stream_ret[stream] = 0;
      pthread_mutex_unlock(&L->ep_mu);
    }
    L->incarnation[a] = incarnation;
  }
  if (L->log) pthread_mutex_lock(&L->log_mu);
  for (uint32_t i = 0; i < n && !rc;) {
    uint32_t s0 = i, e = (uint32_t)envi[i], nsteps = 0, ntails = 0;
    while (i < n && (uint32_t)envi[i] == e && !tail[i]) nsteps++, i++;
    while (i < n && (uint32_t)envi[i] == e && tail[i]) ntails++, i++;
    uint32_t t0 = s0 + nsteps;
    int stream = a * L->num_envs + (int)e;
    replay_steps rs = {0};
    rs.n = nsteps;
    rs.cols[0] = obs + (size_t)s0 * L->obs_bytes;
    rs.cols[1] = action + s0;
    rs.reward = reward + s0;
    rs.terminated = term + s0;
    rs.truncated = trunc + s0;
    rs.final_obs = ntails ? obs + (size_t)t0 * L->obs_bytes : NULL;
    rs.priority = L->prioritized ? prio + s0 : NULL;
    rc = replay_insert(L->mem, stream, &rs, err);
    if (rc) {
      atomic_fetch_add(&L->bad_batches, 1);
      if (L->log && s0) {
        /* Part of the batch went in without a record: the log's numbering follows the
         * replay again from the next item, and priorities before it are not logged. */
        replay_stats now;
        replay_get_stats(L->mem, &now);
        L->item_offset = (int64_t)rlog_next_item(L->log) - (int64_t)now.next_seq;
        L->log_seq_lo = now.next_seq;
      }
      break;
    }
    if (!L->restoring) count_episodes(L, stream, reward + s0, term + s0, trunc + s0, (int)nsteps);
  }
  if (!rc && L->log) {
    rlog_batch rec = {.actor = (uint32_t)a,
                      .incarnation = incarnation,
                      .seq = seq,
                      .rows = n,
                      .steps = steps,
                      .items = n};
    for (int c = 0; c < NCOLS; c++) rec.cols[c] = cols[c];
    shoal_error le = {0};
    if (rlog_append_batch(L->log, &rec, &le) && atomic_fetch_add(&L->log_errors, 1) == 0)
      fprintf(stderr, "shoal-learner: replay log: %s (counted; training goes on)\n", le.msg);
  }
  if (L->log) pthread_mutex_unlock(&L->log_mu);
  if (!rc) {
    L->last_seq[a] = seq;
    atomic_fetch_add(&L->batches_inserted, 1);
  }
  return rc;
}

static int on_batch(void *user, const rpc_batch *b, shoal_error *err) {
  learner *L = user;
  if (b->actor_id >= (uint64_t)L->actors) {
    atomic_fetch_add(&L->bad_batches, 1);
    return shoal_error_set(err, SHOAL_EINVAL, "actor id %llu outside [0, %d)",
                           (unsigned long long)b->actor_id, L->actors);
  }
  /* The whole batch is checked, and room made for all of it, before anything goes
   * in: a batch is inserted whole or not at all, so its resend cannot repeat a part. */
  const void *cols[NCOLS];
  for (int c = 0; c < NCOLS; c++) cols[c] = b->cols[c].data;
  uint32_t total = 0;
  if (batch_steps(L, b->n, cols, &total, err)) {
    atomic_fetch_add(&L->bad_batches, 1);
    return err ? err->code : SHOAL_EINVAL;
  }
  const int a = (int)b->actor_id;
  int rc = 0;
  /* The rate limiter's wait holds no lock: another stream of the same actor (a resend
   * after a reconnect) is then told at once that its batch is already in. */
  pthread_mutex_lock(&L->actor_mu[a]);
  bool have = L->incarnation[a] == b->incarnation && b->seq <= L->last_seq[a];
  pthread_mutex_unlock(&L->actor_mu[a]);
  if (!have && follow_admit_actor(L->fol, total))
    return shoal_error_set(err, SHOAL_EFULL, "the learner waits for store rows (store_ratio)");
  if (!have && wait_for_room(L, total))
    return shoal_error_set(err, SHOAL_EFULL, "the learner is behind the replay ratio");
  pthread_mutex_lock(&L->actor_mu[a]);
  if (L->incarnation[a] == b->incarnation && b->seq <= L->last_seq[a]) {
    /* Already in replay: resent after a reconnect, or after this learner resumed from a
     * log that holds it. Accept (the client stops resending) without inserting. */
    atomic_fetch_add(&L->resent_dropped, 1);
  } else {
    rc = insert_batch(L, a, b->incarnation, b->seq, b->n, cols, total, err);
  }
  pthread_mutex_unlock(&L->actor_mu[a]);
  return rc;
}

/* Failed store calls so far (the writer's, retries included), and whether the store
 * works now: shown in progress lines and Status. */
static uint64_t store_errors(learner *L, int *healthy) {
  store_writer_stats ws;
  store_writer_stats_get(L->wr, &ws);
  uint64_t n = 0;
  for (int k = 0; k < STORE_KIND_COUNT; k++) n += ws.errors[k];
  *healthy = ws.healthy;
  return n;
}

/* The replay log's figures: segments in the store, dropped (queues full through an
 * outage), and raw bytes not yet in the store (what a crash now would lose). */
typedef struct log_figs {
  double written, dropped, pending_bytes, trimmed;
} log_figs;
static log_figs log_figures(learner *L) {
  log_figs f = {0};
  if (!L->log) return f;
  store_writer_stats ws;
  rlog_stats ls;
  store_writer_stats_get(L->wr, &ws);
  rlog_stats_get(L->log, &ls);
  f.written = (double)ws.replay_written;
  f.dropped = (double)(ls.segments_dropped + ws.replay_dropped);
  f.pending_bytes = (double)(ls.pending_bytes + ws.pending_bytes);
  f.trimmed = (double)ls.trimmed;
  return f;
}

static void on_status(void *user, rpc_counter *out, int *n) {
  learner *L = user;
  int healthy;
  /* Before the table: its initialisers are evaluated in no set order. */
  const uint64_t store_errs = store_errors(L, &healthy);
  const log_figs lf = log_figures(L);
  replay_stats rs;
  replay_get_stats(L->mem, &rs);
  int k = 0;
  struct {
    const char *name;
    double v;
  } figs[] = {{"env_steps", (double)(L->env_steps_base + (int64_t)rs.inserted_steps)},
              {"updates", (double)L->updates},
              {"replay_held", (double)rs.held},
              {"episodes", (double)L->episodes},
              {"eval_return", L->eval_return},
              {"bad_batches", (double)atomic_load(&L->bad_batches)},
              {"batches_inserted", (double)atomic_load(&L->batches_inserted)},
              {"resent_dropped", (double)atomic_load(&L->resent_dropped)},
              {"stream_cuts", (double)atomic_load(&L->stream_cuts)},
              {"store_errors", (double)store_errs},
              {"store_healthy", (double)healthy},
              {"log_segments", lf.written},
              {"log_dropped", lf.dropped},
              {"log_pending_bytes", lf.pending_bytes},
              {"log_trimmed", lf.trimmed}};
  for (size_t i = 0; i < sizeof figs / sizeof *figs && k < *n; i++, k++) {
    snprintf(out[k].name, sizeof out[k].name, "%s", figs[i].name);
    out[k].value = figs[i].v;
  }
  live_hp_counters(&L->live, out, &k, *n);
  *n = k;
}

/* ---- live tuning ---------------------------------------------------------------- */

/* SetHyperparams, on an rpc thread (learner/live_hp.c). */
static int on_hyperparams(void *user, const rpc_hyperparam *h, int n, uint32_t *applied,
                          shoal_error *err) {
  learner *L = user;
  return live_hp_request(&L->live, h, n, applied, err);
}

/* What a live change does beyond L->live.hp[k], on the trainer thread. */
static int apply_hparam(void *user, int k, double v, shoal_error *err) {
  learner *L = user;
  if (k == HP_LR) return dqn_set_lr(L->q, (float)v, err);
  if (k == HP_TARGET) return dqn_set_target_period(L->q, (int)v, err);
  if (k == HP_RATIO) {
    /* The limiter compares samples taken with ratio × inserts since warm-up; move
     * the sample count so the slack stays as it was and the new ratio holds from now
     * on, instead of a burst (or a stall) that settles the whole history. */
    pthread_mutex_lock(&L->rl_mu);
    replay_stats rs;
    replay_get_stats(L->mem, &rs);
    double since = (double)rs.inserted_steps - (double)L->warmup;
    if (since > 0) {
      int64_t sampled = atomic_load(&L->sampled) + (int64_t)((v - L->ratio) * since);
      atomic_store(&L->sampled, sampled > 0 ? sampled : 0);
    }
    L->ratio = v;
    if (L->tolerance_auto) L->tolerance = L->tolerance_per_ratio * v;
    pthread_cond_broadcast(&L->rl_cv);
    pthread_mutex_unlock(&L->rl_mu);
  }
  return 0;
}

/* ---- parameters, snapshots, evaluation ------------------------------------------ */

static void publish(learner *L) {
  nn_model *m = dqn_model(L->q);
  size_t n;
  const float *p = nn_model_params(m, &n);
  rpc_param_entry *layout = NULL;
  int nl = 0;
  shoal_error err = {0};
  if (publish_layout(m, 0, &layout, &nl, &err) ||
      rpc_server_set_params(L->srv, L->version, RPC_F32, p, n * sizeof *p, layout, nl, &err))
    die("publishing parameters", &err);
  free(layout);
}

static void snapshot(learner *L, int64_t env_steps, double score) {
  if (L->version <= L->last_snapshot_version) return;
  L->last_snapshot_version = L->version;
  uint8_t *buf = NULL;
  size_t len;
  shoal_error err = {0};
  uint8_t *st = NULL;
  size_t st_len = 0;
  /* The learner state rides in the same store write, so the two never disagree. */
  int rc = nn_model_save_buffer(dqn_model(L->q), &buf, &len, &err);
  if (!rc && (rc = dqn_state_save(L->q, &st, &st_len, &err)) == 0)
    rc = algo_snapshot_append_state(&buf, &len, st, st_len, &err);
  free(st);
  if (rc) {
    free(buf);
    fprintf(stderr, "shoal-learner: snapshot: %s\n", err.msg);
    return;
  }
  store_snapshot_meta meta = {0};
  snprintf(meta.run, sizeof meta.run, "%s", L->run);
  meta.version = L->version;
  meta.env_steps = env_steps;
  meta.updates = L->updates;
  meta.wall_time = unix_now();
  meta.score = score;
  /* The writer takes the buffer; a full queue keeps only the newest snapshot. */
  store_writer_snapshot(L->wr, &meta, buf, len);
  L->snapshots++;
}

/* A priority checkpoint into the log, and what retention may cut: on the trainer
 * thread (it alone changes priorities), at each snapshot. The range is read under
 * log_mu so that every item in it has its record in the log before the checkpoint. */
static void log_checkpoint(learner *L) {
  if (!L->log) return;
  pthread_mutex_lock(&L->log_mu);
  replay_stats rs;
  replay_get_stats(L->mem, &rs);
  int64_t off = L->item_offset;
  uint64_t lo = rs.next_seq - (uint64_t)rs.held, hi = rs.next_seq;
  if (lo < L->log_seq_lo) lo = L->log_seq_lo;
  pthread_mutex_unlock(&L->log_mu);
  if (lo < hi) rlog_retain(L->log, (uint64_t)((int64_t)lo + off));
  if (!L->prioritized || lo >= hi) return;
  shoal_error err = {0};
  float *p = malloc((size_t)(hi - lo) * sizeof *p);
  if (!p || replay_priorities_get(L->mem, lo, (int64_t)(hi - lo), p, &err) ||
      rlog_append_priorities(L->log, (uint64_t)((int64_t)lo + off), hi - lo, p, &err)) {
    if (atomic_fetch_add(&L->log_errors, 1) == 0)
      fprintf(stderr, "shoal-learner: replay log: priority checkpoint: %s\n",
              p ? err.msg : "out of memory");
  }
  free(p);
}

static void obs_to_float(const learner *L, const void *src, float *dst, size_t rows) {
  if (!L->obs_u8) {
    memcpy(dst, src, rows * L->obs_floats * sizeof *dst);
    return;
  }
  const uint8_t *s = src;
  for (size_t i = 0; i < rows * L->obs_floats; i++) dst[i] = (float)s[i];
}

/* Mean undiscounted return of the greedy policy over one episode in each of E copies
 * of the env (an episode is cut after max_steps, for envs without a time limit). */
static double evaluate(learner *L, env_vec *ev, int E, uint64_t seed, void *obs, float *obs_f,
                       void *fin, float *rew, uint8_t *term, uint8_t *trunc, int32_t *act,
                       double *ret, uint8_t *done) {
  shoal_error err = {0};
  env_vec_reset(ev, seed, obs);
  memset(ret, 0, (size_t)E * sizeof *ret);
  memset(done, 0, (size_t)E);
  int left = E, max_steps = L->spec->max_episode_steps > 0 ? L->spec->max_episode_steps : 27000;
  env_vec_out out = {obs, rew, term, trunc, fin};
  shoal_rng rng;
  shoal_rng_seed(&rng, seed);
  for (int t = 0; t < max_steps && left > 0; t++) {
    obs_to_float(L, obs, obs_f, (size_t)E);
    for (int off = 0; off < E; off += dqn_get_config(L->q)->max_batch) {
      int nb =
          E - off < dqn_get_config(L->q)->max_batch ? E - off : dqn_get_config(L->q)->max_batch;
      if (dqn_act(L->q, obs_f + (size_t)off * L->obs_floats, nb, 0.0f, &rng, act + off, NULL, &err))
        die("evaluation", &err);
    }
    if (env_vec_step(ev, act, &out, &err)) die("evaluation step", &err);
    for (int i = 0; i < E; i++) {
      if (done[i]) continue;
      ret[i] += rew[i];
      if (term[i] || trunc[i]) done[i] = 1, left--;
    }
  }
  double sum = 0;
  for (int i = 0; i < E; i++) sum += ret[i];
  return sum / E;
}

/* ---- set-up -------------------------------------------------------------------- */

static replay *make_replay(learner *L, shoal_error *err) {
  replay_config rc = {0};
  rc.kind = L->prioritized ? REPLAY_PRIORITIZED : REPLAY_UNIFORM;
  rc.capacity = config_int(L->cfg, "replay.capacity");
  rc.streams = L->actors * L->num_envs + L->store_streams;
  rc.ncols = 2;
  snprintf(rc.cols[0].name, sizeof rc.cols[0].name, "obs");
  rc.cols[0].dtype = L->obs_u8 ? REPLAY_U8 : REPLAY_F32;
  rc.cols[0].ndim = L->spec->obs.ndim;
  for (int d = 0; d < L->spec->obs.ndim; d++) rc.cols[0].shape[d] = L->spec->obs.shape[d];
  snprintf(rc.cols[1].name, sizeof rc.cols[1].name, "action");
  rc.cols[1].dtype = REPLAY_I32;
  rc.cols[1].ndim = 0;
  rc.obs_column = "obs";
  rc.frame_stack = 1;
  rc.alpha = config_float(L->cfg, "replay.alpha");
  rc.eps = config_float(L->cfg, "replay.eps");
  rc.writer_slack = -1;
  /* Larger than memory: the columns beyond the limit in a spill file, beside the run's
   * files on a file store (else in $TMPDIR). */
  rc.memory_limit = (size_t)(config_float(L->cfg, "replay.memory_limit_mb") * 1048576.0);
  char dir[4096];
  shoal_error derr = {0};
  struct stat sb;
  if (rc.memory_limit && L->st && store_local_dir(L->st, L->run, dir, sizeof dir, &derr) == 0 &&
      stat(dir, &sb) == 0)
    rc.spill_dir = dir;
  replay *r = NULL;
  return replay_create(&rc, &r, err) ? NULL : r;
}

static void fill_spec(const learner *L, rpc_spec *sp, uint32_t max_items) {
  memset(sp, 0, sizeof *sp);
  sp->run_id = L->run;
  sp->max_items = max_items;
  sp->ncols = NCOLS;
  rpc_column_spec *c = sp->cols;
  c[COL_OBS] = (rpc_column_spec){
      .name = "obs", .dtype = L->obs_u8 ? RPC_U8 : RPC_F32, .ndim = L->spec->obs.ndim};
  for (int d = 0; d < L->spec->obs.ndim; d++) c[COL_OBS].shape[d] = L->spec->obs.shape[d];
  c[COL_ACTION] = (rpc_column_spec){.name = "action", .dtype = RPC_I32};
  c[COL_REWARD] = (rpc_column_spec){.name = "reward", .dtype = RPC_F32};
  c[COL_TERM] = (rpc_column_spec){.name = "terminated", .dtype = RPC_U8};
  c[COL_TRUNC] = (rpc_column_spec){.name = "truncated", .dtype = RPC_U8};
  c[COL_PRIO] = (rpc_column_spec){.name = "priority", .dtype = RPC_F32};
  c[COL_ENV] = (rpc_column_spec){.name = "env", .dtype = RPC_I32};
  c[COL_TAIL] = (rpc_column_spec){.name = "tail", .dtype = RPC_U8};
}

/* ---- the store follower's rows, logged --------------------------------------- */

/* A new source takes a store stream: reset now, and the stream's next record says so. */
static int follow_reset(void *user, int stream, shoal_error *err) {
  learner *L = user;
  int rc = replay_reset_stream(L->mem, stream, err);
  if (!rc && L->fol_reset) L->fol_reset[stream - L->actors * L->num_envs] = 1;
  return rc;
}

/* The follower's insert: into replay and, in the wire layout (its steps, then a tail row
 * per ended step), into the log under the same lock as the actors' batches. */
static int follow_insert(void *user, int stream, const replay_steps *st, shoal_error *err) {
  learner *L = user;
  if (!L->log) return replay_insert(L->mem, stream, st, err);
  uint32_t n = (uint32_t)st->n, k = 0;
  for (uint32_t i = 0; i < n; i++)
    k += (st->terminated && st->terminated[i]) || (st->truncated && st->truncated[i]);
  uint32_t rows = n + k;
  size_t ob = L->obs_bytes;
  /* The wire columns one after another, each at an 8-byte boundary. */
  const size_t row[NCOLS] = {ob, 4, 4, 1, 1, 4, 4, 1};
  size_t off[NCOLS], need = 0;
  for (int c = 0; c < NCOLS; c++) {
    off[c] = need;
    need += ((size_t)rows * row[c] + 7) & ~(size_t)7;
  }
  if (need > L->fol_cap) {
    unsigned char *b = realloc(L->fol_buf, need);
    if (!b) return shoal_error_set(err, SHOAL_ENOMEM, "replay log: out of memory");
    L->fol_buf = b;
    L->fol_cap = need;
  }
  unsigned char *obs = L->fol_buf + off[COL_OBS], *act = L->fol_buf + off[COL_ACTION];
  unsigned char *rew = L->fol_buf + off[COL_REWARD], *term = L->fol_buf + off[COL_TERM];
  unsigned char *trunc = L->fol_buf + off[COL_TRUNC], *prio = L->fol_buf + off[COL_PRIO];
  unsigned char *env = L->fol_buf + off[COL_ENV], *tail = L->fol_buf + off[COL_TAIL];
  memcpy(obs, st->cols[0], (size_t)n * ob);
  if (k) memcpy(obs + (size_t)n * ob, st->final_obs, (size_t)k * ob);
  memset(act, 0, (size_t)rows * 4), memcpy(act, st->cols[1], (size_t)n * 4);
  memset(rew, 0, (size_t)rows * 4), memcpy(rew, st->reward, (size_t)n * 4);
  memset(term, 0, rows), memset(trunc, 0, rows), memset(tail, 0, rows);
  if (st->terminated) memcpy(term, st->terminated, n);
  if (st->truncated) memcpy(trunc, st->truncated, n);
  memset(tail + n, 1, k);
  float *pr = (float *)(void *)prio;
  for (uint32_t i = 0; i < rows; i++) pr[i] = i < n && st->priority ? st->priority[i] : 0;
  int32_t e = stream - L->actors * L->num_envs;
  for (uint32_t i = 0; i < rows; i++) memcpy(env + 4 * (size_t)i, &e, 4);
  pthread_mutex_lock(&L->log_mu);
  int rc = replay_insert(L->mem, stream, st, err);
  if (!rc) {
    rlog_batch rec = {.actor = RLOG_ACTOR_STORE,
                      .incarnation = L->fol_reset && L->fol_reset[e],
                      .rows = rows,
                      .steps = n,
                      .items = rows};
    const void *cols[NCOLS] = {obs, act, rew, term, trunc, prio, env, tail};
    for (int c = 0; c < NCOLS; c++) rec.cols[c] = cols[c];
    shoal_error le = {0};
    if (rlog_append_batch(L->log, &rec, &le) && atomic_fetch_add(&L->log_errors, 1) == 0)
      fprintf(stderr, "shoal-learner: replay log: %s (counted; training goes on)\n", le.msg);
    if (L->fol_reset) L->fol_reset[e] = 0;
  }
  pthread_mutex_unlock(&L->log_mu);
  return rc;
}

/* ---- the replay log: resume and open ------------------------------------------ */

/* The wire columns as the log records them. */
static int log_columns(const learner *L, rlog_column *c) {
  static const struct {
    const char *name;
    replay_dtype dt;
  } wire[NCOLS] = {{"obs", REPLAY_U8},        {"action", REPLAY_I32},   {"reward", REPLAY_F32},
                   {"terminated", REPLAY_U8}, {"truncated", REPLAY_U8}, {"priority", REPLAY_F32},
                   {"env", REPLAY_I32},       {"tail", REPLAY_U8}};
  for (int i = 0; i < NCOLS; i++) {
    memset(&c[i], 0, sizeof c[i]);
    snprintf(c[i].name, sizeof c[i].name, "%s", wire[i].name);
    c[i].dtype = (uint32_t)wire[i].dt;
  }
  c[COL_OBS].dtype = L->obs_u8 ? REPLAY_U8 : REPLAY_F32;
  c[COL_OBS].ndim = (uint32_t)L->spec->obs.ndim;
  for (int d = 0; d < L->spec->obs.ndim; d++) c[COL_OBS].shape[d] = L->spec->obs.shape[d];
  return NCOLS;
}

/* A logged store record back into its store stream (one env group: steps, then tails). */
static int restore_store_rows(learner *L, const rlog_batch *b, shoal_error *err) {
  const int32_t *env = b->cols[COL_ENV];
  const uint8_t *tail = b->cols[COL_TAIL];
  uint32_t n = 0;
  while (n < b->rows && !tail[n]) n++;
  if (!n || env[0] < 0 || env[0] >= L->store_streams) {
    L->restore_skipped++;
    return 0;
  }
  int stream = L->actors * L->num_envs + env[0];
  if (b->incarnation) {
    int rc = replay_reset_stream(L->mem, stream, err);
    if (rc) return rc;
  }
  replay_steps rs = {0};
  rs.n = n;
  rs.cols[0] = b->cols[COL_OBS];
  rs.cols[1] = b->cols[COL_ACTION];
  rs.reward = b->cols[COL_REWARD];
  rs.terminated = b->cols[COL_TERM];
  rs.truncated = b->cols[COL_TRUNC];
  rs.final_obs = b->rows > n ? (const uint8_t *)b->cols[COL_OBS] + (size_t)n * L->obs_bytes : NULL;
  rs.priority = L->prioritized ? b->cols[COL_PRIO] : NULL;
  return replay_insert(L->mem, stream, &rs, err);
}

static int restore_one(void *ctx, const rlog_batch *b, shoal_error *err) {
  learner *L = ctx;
  if (b->actor == RLOG_ACTOR_STORE) return restore_store_rows(L, b, err);
  uint32_t steps;
  /* A record of an actor this config no longer has (fewer actors after a change), or
   * one that does not fit this learner's envs, is left out and counted. */
  if (b->actor >= (uint32_t)L->actors || batch_steps(L, b->rows, b->cols, &steps, NULL)) {
    L->restore_skipped++;
    return 0;
  }
  return insert_batch(L, (int)b->actor, b->incarnation, b->seq, b->rows, b->cols, steps, err);
}

/* --resume: the replay, its priorities and the exactly-once table from the log. */
static void restore_replay(learner *L, const char *run) {
  if (!config_bool(L->cfg, "replay.log")) return;
  rlog_column cols[NCOLS];
  shoal_error err = {0};
  L->restoring = true;
  const replay_config *rc = replay_get_config(L->mem);
  int e = rlog_restore(L->st, run, cols, log_columns(L, cols), (uint64_t)rc->capacity, L->mem,
                       restore_one, L, &L->restored, &err);
  L->restoring = false;
  if (e) die("resume: replay log", &err);
  if (!L->restored.segments) {
    /* Said only where there was something to resume (shoal run resumes every start). */
    if (L->last_snapshot_version >= 0)
      fprintf(stderr, "shoal-learner: resume: the store holds no replay log for %s\n", run);
    return;
  }
  replay_stats rs;
  replay_get_stats(L->mem, &rs);
  /* The step counter continues from what the log holds. */
  L->env_steps_base = (int64_t)L->restored.steps_total - (int64_t)rs.inserted_steps;
  /* The rate limiter starts level with what the memory holds, so a resumed learner does
   * not replay it in one burst. */
  double level = L->ratio * ((double)rs.inserted_steps - (double)L->warmup);
  atomic_store(&L->sampled, level > 0 ? (int64_t)level : 0);
  fprintf(stderr,
          "shoal-learner: resume: replay rebuilt from the log: %lld items held from %llu "
          "segments (%llu batches, %llu priorities, %llu gaps, %llu records skipped) in "
          "%.2f s; %llu env steps logged\n",
          (long long)rs.held, (unsigned long long)L->restored.segments,
          (unsigned long long)L->restored.records, (unsigned long long)L->restored.priorities,
          (unsigned long long)L->restored.gaps, (unsigned long long)L->restore_skipped,
          L->restored.seconds, (unsigned long long)L->restored.steps_total);
}

static void open_log(learner *L, const char *run) {
  if (!config_bool(L->cfg, "replay.log")) return;
  shoal_error err = {0};
  if (L->store_streams &&
      !(L->fol_reset = calloc((size_t)L->store_streams, sizeof *L->fol_reset))) {
    fprintf(stderr, "shoal-learner: out of memory\n");
    exit(1);
  }
  rlog_config c = {0};
  c.st = L->st;
  c.wr = L->wr;
  c.run = run;
  c.ncols = log_columns(L, c.cols);
  c.segment_bytes = (size_t)(config_float(L->cfg, "replay.log_segment_mb") * 1048576.0);
  c.flush_s = config_float(L->cfg, "replay.log_flush_s");
  c.keep = config_bool(L->cfg, "replay.keep_log");
  c.next_seq = L->restored.next_seq;
  c.next_item = L->restored.next_item;
  c.steps_before = L->restored.steps_total;
  if (!L->restored.segments) {
    /* A run that has a log but was not resumed from it goes on after its last segment
     * (a store that cannot be read now starts at 0: a clash is counted by the writer). */
    uint64_t *seqs = NULL;
    size_t n = 0;
    if (store_replay_list(L->st, run, &seqs, &n, &err) == 0 && n) c.next_seq = seqs[n - 1] + 1;
    free(seqs);
  }
  replay_stats rs;
  replay_get_stats(L->mem, &rs);
  L->item_offset = (int64_t)c.next_item - (int64_t)rs.next_seq;
  L->log_seq_lo = L->restored.segments
                      ? (uint64_t)((int64_t)L->restored.contiguous_from - L->item_offset)
                      : rs.next_seq;
  if (rlog_open(&L->log, &c, &err)) die("replay log", &err);
}

static void usage(void) {
  fprintf(stderr,
          "usage: shoal-learner --config FILE --run RUN [--resume] [--set key=value ...]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *cfg_path = NULL, *run = NULL;
  bool resume = false;
  shoal_error err = {0};
  int nkeys;
  const cfg_key *keys = apex_schema(&nkeys);
  learner L = {0};
  /* gRPC allocates a buffer per large message; glibc's default thresholds hand those
   * back to the kernel, which then zeroes fresh pages for every message (about 15% of
   * ingest in benchmarks/ingest). Keep them in the heap. */
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
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
  if (apex_check(L.cfg, &err)) die("config", &err);
  L.run = run;
  L.actors = (int)config_int(L.cfg, "actors");
  /* replay.source: actors, store (no actors at all) or mixed. */
  const char *source = config_string(L.cfg, "replay.source");
  if (strcmp(source, "actors")) L.store_streams = (int)config_int(L.cfg, "replay.store_streams");
  if (!strcmp(source, "store")) L.actors = 0;
  if (strcmp(source, "actors") && !strcmp(config_string(L.cfg, "replay.store_format"), "log") &&
      (!config_string(L.cfg, "replay.store_run")[0] ||
       !strcmp(config_string(L.cfg, "replay.store_run"), run))) {
    fprintf(stderr,
            "shoal-learner: config: replay.store_format log follows another learner's replay "
            "log: set replay.store_run to that run (not this one, %s)\n",
            run);
    return 1;
  }
  L.num_envs = (int)config_int(L.cfg, "env.num_envs");
  L.prioritized = config_bool(L.cfg, "replay.prioritized");
  nn_set_threads((int)config_int(L.cfg, "learner.threads"));

  if (env_make(&L.spec_env, config_string(L.cfg, "env.id"), &err)) die("env", &err);
  L.spec = env_get_spec(L.spec_env);
  if (L.spec->act.n <= 0) {
    fprintf(stderr, "shoal-learner: env %s: Ape-X DQN needs discrete actions\n", L.spec->id);
    return 1;
  }
  L.obs_u8 = L.spec->obs.dtype == ENV_UINT8;
  L.obs_floats = (size_t)L.spec->obs.size;
  L.obs_bytes = env_space_bytes(&L.spec->obs);
  L.A = L.spec->act.n;

  const char *dev = config_string(L.cfg, "learner.device");
  nn_device device = NN_CPU;
  /* apex_check accepted it: cpu, cuda or auto. */
  if (!strcmp(dev, "cuda") || (!strcmp(dev, "auto") && nn_cuda_available(NULL))) device = NN_CUDA;
  int B = (int)config_int(L.cfg, "learner.batch");
  int E = (int)config_int(L.cfg, "run.eval_episodes");
  dqn_config dc = apex_dqn_config(L.cfg, L.spec->obs.ndim, L.spec->obs.shape, L.spec->act.n);
  dc.max_batch = B > E ? B : E;
  if (!(L.q = dqn_create(&dc, device, true, &err))) die("network", &err);
  /* Through an outage of the store the learner trains on; the writer counts errors. */
  if (store_open_lazy(&L.st, config_string(L.cfg, "store.uri"), &err)) die("store", &err);
  if (store_writer_create(&L.wr, L.st, NULL, &err)) die("store writer", &err);
  if (!(L.mem = make_replay(&L, &err))) die("replay", &err);
  pthread_mutex_init(&L.ep_mu, NULL);
  pthread_mutex_init(&L.rl_mu, NULL);
  pthread_cond_init(&L.rl_cv, NULL);
  L.ratio = config_float(L.cfg, "learner.replay_ratio");
  L.warmup = config_int(L.cfg, "learner.warmup");
  L.tolerance = config_float(L.cfg, "learner.ratio_tolerance");
  L.tolerance_per_ratio =
      4.0 * L.actors * L.num_envs * (double)config_int(L.cfg, "actor.send_steps") +
      (L.store_streams ? 2.0 * FOLLOW_CHUNK : 0);
  L.tolerance_auto = L.tolerance <= 0;
  if (L.tolerance_auto) L.tolerance = L.tolerance_per_ratio * L.ratio;
  L.stream_ret = calloc((size_t)L.actors * L.num_envs + 1, sizeof *L.stream_ret);
  L.incarnation = calloc((size_t)L.actors + 1, sizeof *L.incarnation);
  L.last_seq = calloc((size_t)L.actors + 1, sizeof *L.last_seq);
  L.actor_mu = calloc((size_t)L.actors + 1, sizeof *L.actor_mu);
  for (int a = 0; L.actor_mu && a < L.actors; a++) pthread_mutex_init(&L.actor_mu[a], NULL);
  pthread_mutex_init(&L.log_mu, NULL);
  if (!L.stream_ret || !L.incarnation || !L.last_seq || !L.actor_mu) {
    fprintf(stderr, "shoal-learner: out of memory\n");
    return 1;
  }
  L.eval_return = NAN;
  L.last_snapshot_version = -1;
  L.best_eval = -INFINITY;

  /* Resume: the latest snapshot's parameters and counters, and the saved replay. */
  if (resume) {
    store_snapshot_meta meta;
    void *bytes;
    size_t len;
    int rc = store_snapshot_get(L.st, run, STORE_LATEST, &meta, &bytes, &len, &err);
    if (rc == 0) {
      size_t ml, sl;
      const uint8_t *sb;
      if (algo_snapshot_split(bytes, len, &ml, &sb, &sl, &err) ||
          nn_model_load_buffer(dqn_model(L.q), bytes, ml, &err))
        die("resume: snapshot", &err);
      if (sb) {
        if (dqn_state_load(L.q, sb, sl, &err)) die("resume: learner state", &err);
        fprintf(stderr, "shoal-learner: resume: optimizer state restored (%lld updates)\n",
                (long long)meta.updates);
      } else {
        fprintf(stderr,
                "shoal-learner: resume: the snapshot holds no optimizer state "
                "(written by an older shoal): Adam restarts and the target is synced\n");
        if (dqn_sync_target(L.q, &err)) die("resume", &err);
      }
      free(bytes);
      L.version = meta.version;
      L.updates = meta.updates;
      L.env_steps_base = meta.env_steps;
      L.last_snapshot_version = meta.version;
      fprintf(stderr, "shoal-learner: resumed run %s at version %lld, %lld env steps\n", run,
              (long long)meta.version, (long long)meta.env_steps);
    } else if (rc != SHOAL_ENOENT) {
      die("resume: latest snapshot", &err);
    }
    restore_replay(&L, run);
  }
  open_log(&L, run);

  rpc_server_config sc = {0};
  sc.listen = config_string(L.cfg, "learner.listen");
  sc.token =
      config_string(L.cfg, "learner.token")[0] ? config_string(L.cfg, "learner.token") : NULL;
  /* An insert may wait up to 2 s in the callback (the rate limiter), and an actor can
   * have two calls in at once (a resend on a new stream while its old one still waits):
   * two threads per actor plus two keep Status, SetHyperparams and pulls answered. */
  sc.threads = L.actors * 2 + 2 < 16 ? L.actors * 2 + 2 : 16;
  sc.on_batch = on_batch;
  sc.on_status = on_status;
  sc.on_hyperparams = on_hyperparams;
  sc.user = &L;
  {
    replay_stats rs0;
    replay_get_stats(L.mem, &rs0);
    int nk;
    const cfg_key *schema = apex_schema(&nk);
    live_hp_init(&L.live, hp_names, HP_COUNT, HP_LR, schema, nk, L.cfg, &L.stopping, L.st, L.wr,
                 run, cfg_path, L.env_steps_base + (int64_t)rs0.inserted_steps, resume);
  }
  rpc_spec spec;
  uint32_t max_items =
      (uint32_t)(2 * L.num_envs * (config_int(L.cfg, "actor.send_steps") + dc.n_step + 1));
  fill_spec(&L, &spec, max_items);
  if (rpc_server_create(&sc, &spec, &L.srv, &err)) die("rpc server", &err);
  publish(&L);
  if (L.store_streams) {
    const char *srun = config_string(L.cfg, "replay.store_run");
    follow_config fc = {
        .st = L.st,
        .run = srun[0] ? srun : run,
        .mem = L.mem,
        .first_stream = L.actors * L.num_envs,
        .nstreams = L.store_streams,
        .prioritized = L.prioritized,
        .poll_s = config_float(L.cfg, "replay.store_poll_s"),
        .start_after = resume ? follow_resume_after(L.st, run) : STORE_SEG_FIRST,
        .store_fraction = strcmp(source, "mixed") ? 0 : config_float(L.cfg, "replay.store_ratio"),
        .replay_log = !strcmp(config_string(L.cfg, "replay.store_format"), "log"),
        .insert = follow_insert,
        .reset = follow_reset,
        .wait_room = follow_wait,
        .ctx = &L};
    if (follow_limits_from_env(L.spec, &fc.limits, &err) || follow_start(&L.fol, &fc, &err))
      die("store follower", &err);
  }

  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  emit("{\"event\":\"listening\",\"port\":%d,\"run\":\"%s\",\"device\":\"%s\"}",
       rpc_server_port(L.srv), run, device == NN_CUDA ? "cuda" : "cpu");

  /* Trainer buffers, sized once. */
  size_t ob = L.obs_bytes;
  L.obs_b = malloc((size_t)B * ob);
  L.nobs_b = malloc((size_t)B * ob);
  L.obs_f = malloc((size_t)B * L.obs_floats * sizeof(float));
  L.nobs_f = malloc((size_t)B * L.obs_floats * sizeof(float));
  L.ret = malloc((size_t)B * sizeof(float));
  L.disc = malloc((size_t)B * sizeof(float));
  L.w = malloc((size_t)B * sizeof(float));
  L.prio = malloc((size_t)B * sizeof(float));
  L.act = malloc((size_t)B * sizeof(int32_t));
  L.idx = malloc((size_t)B * sizeof(int64_t));
  L.gen = malloc((size_t)B * sizeof(uint64_t));
  /* Evaluation buffers and env. */
  env_vec *ev = NULL;
  if (env_vec_create(&ev, L.spec->id, E, NULL, &err)) die("evaluation env", &err);
  void *e_obs = malloc((size_t)E * ob), *e_fin = malloc((size_t)E * ob);
  float *e_obsf = malloc((size_t)E * L.obs_floats * sizeof(float)), *e_rew = malloc((size_t)E * 4);
  uint8_t *e_term = malloc((size_t)E), *e_trunc = malloc((size_t)E), *e_done = malloc((size_t)E);
  int32_t *e_act = malloc((size_t)E * sizeof(int32_t));
  double *e_ret = malloc((size_t)E * sizeof(double));
  if (!L.obs_b || !L.nobs_b || !L.obs_f || !L.nobs_f || !L.ret || !L.disc || !L.w || !L.prio ||
      !L.act || !L.idx || !L.gen || !e_obs || !e_fin || !e_obsf || !e_rew || !e_term || !e_trunc ||
      !e_done || !e_act || !e_ret) {
    fprintf(stderr, "shoal-learner: out of memory\n");
    return 1;
  }

  const int64_t warmup = config_int(L.cfg, "learner.warmup");
  const double log_every = config_float(L.cfg, "learner.log_every_s");
  /* The live-tunable settings are read from L.live.hp each time (live_hp_apply). */
  replay_sample_args sa_args = {B, dc.n_step, dc.gamma, L.live.hp[HP_BETA0]};
  shoal_rng rng;
  shoal_rng_seed(&rng, (uint64_t)config_int(L.cfg, "run.seed") * 7919 + 17);

  double t0 = shoal_now_s(), t_log = t0, t_snap = t0, t_eval = t0;
  int64_t steps_at_log = 0, updates_at_log = L.updates;
  uint64_t samples_at_log = 0;
  float last_loss = NAN;
  const char *reason = "signal";
  uint64_t eval_seed = 1000003;
  for (;;) {
    if (stop_signal) break;
    double now = shoal_now_s();
    replay_stats rs;
    replay_get_stats(L.mem, &rs);
    int64_t env_steps = L.env_steps_base + (int64_t)rs.inserted_steps;
    live_hp_apply(&L.live, apply_hparam, &L, L.wr, run, env_steps, "shoal-learner");
    const int64_t max_steps = (int64_t)L.live.hp[HP_MAX_STEPS],
                  publish_every = (int64_t)L.live.hp[HP_PUBLISH];
    const double max_s = L.live.hp[HP_MAX_S], solve = L.live.hp[HP_SOLVE], ratio = L.ratio;
    if (max_steps > 0 && env_steps >= max_steps) {
      reason = "max_env_steps";
      break;
    }
    if (max_s > 0 && now - t0 >= max_s) {
      reason = "max_seconds";
      break;
    }
    /* Train when warm and the sampled/inserted ratio allows (Reverb's rate limiter),
     * so results do not depend on how fast this machine trains. */
    bool trained = false;
    if (rs.held >= warmup &&
        (double)atomic_load(&L.sampled) + B <= ratio * ((double)rs.inserted_steps - warmup) + B) {
      replay_batch rb = {0};
      rb.cols[0] = L.obs_b;
      rb.cols[1] = L.act;
      rb.next_obs = L.nobs_b;
      rb.reward = L.ret;
      rb.discount = L.disc;
      rb.weight = L.w;
      rb.index = L.idx;
      rb.generation = L.gen;
      sa_args.beta = replay_beta_linear(L.live.hp[HP_BETA0], 1.0, L.updates,
                                        (int64_t)L.live.hp[HP_BETA_STEPS]);
      int rc = replay_sample(L.mem, &rng, &sa_args, &rb, &err);
      if (rc == 0) {
        obs_to_float(&L, L.obs_b, L.obs_f, (size_t)B);
        obs_to_float(&L, L.nobs_b, L.nobs_f, (size_t)B);
        dqn_batch db = {B, L.obs_f, L.act, L.ret, L.disc, L.nobs_f, L.w};
        dqn_stats ds;
        rc = dqn_learn(L.q, &db, L.prio, &ds, &err);
        if (rc == SHOAL_ENAN) {
          fprintf(stderr, "shoal-learner: update skipped: %s\n", err.msg);
        } else if (rc) {
          die("learn", &err);
        } else {
          last_loss = ds.loss;
          L.updates++;
          trained = true;
          atomic_fetch_add(&L.sampled, B);
          pthread_mutex_lock(&L.rl_mu);
          pthread_cond_broadcast(&L.rl_cv);
          pthread_mutex_unlock(&L.rl_mu);
          if (L.prioritized && replay_update_priorities(L.mem, B, L.idx, L.gen, L.prio, &err))
            die("priorities", &err);
          if (L.updates % publish_every == 0) {
            L.version++;
            publish(&L);
          }
        }
      } else if (rc != SHOAL_ESTATE) {
        die("sample", &err);
      }
    }
    if (!trained) {
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
    now = shoal_now_s();
    if (solve != 0 && rs.held >= warmup && now - t_eval >= L.live.hp[HP_EVAL_EVERY]) {
      t_eval = now;
      L.eval_return = evaluate(&L, ev, E, eval_seed++, e_obs, e_obsf, e_fin, e_rew, e_term, e_trunc,
                               e_act, e_ret, e_done);
      store_writer_metric(L.wr, run, "eval_return", env_steps, unix_now(), L.eval_return);
      if (L.eval_return > L.best_eval) L.best_eval = L.eval_return;
      if (L.eval_return >= solve) {
        reason = "solved";
        break;
      }
    }
    if (now - t_snap >= L.live.hp[HP_SNAP]) {
      t_snap = now;
      snapshot(&L, env_steps, L.eval_return);
      log_checkpoint(&L);
    }
    if (now - t_log >= log_every) {
      double dt = now - t_log;
      double ret100 = NAN;
      pthread_mutex_lock(&L.ep_mu);
      uint64_t neps = L.episodes;
      if (neps) {
        int k = neps < RETURNS_KEPT ? (int)neps : RETURNS_KEPT;
        double s = 0;
        for (int i = 0; i < k; i++) s += L.returns[i];
        ret100 = s / k;
      }
      pthread_mutex_unlock(&L.ep_mu);
      rpc_server_stats ss;
      rpc_server_stats_get(L.srv, &ss);
      char j1[32], j2[32], j3[32], fol_json[256];
      follow_progress_json(L.fol, fol_json, sizeof fol_json);
      int healthy;
      uint64_t store_errs = store_errors(&L, &healthy);
      log_figs lf = log_figures(&L);
      double sps = (double)(env_steps - steps_at_log) / dt;
      double ups = (double)(L.updates - updates_at_log) / dt;
      double samples_s = (double)(ss.samples - samples_at_log) / dt;
      emit(
          "{\"event\":\"progress\",\"t\":%.2f,\"env_steps\":%lld,\"sps\":%.1f,"
          "\"samples_s\":%.1f,\"updates\":%lld,\"ups\":%.1f,\"replay\":%lld,"
          "\"episodes\":%llu,\"return100\":%s,\"eval\":%s,\"version\":%lld,"
          "\"loss\":%s,\"rejected\":%llu,\"insert_waits\":%llu,\"resent_dropped\":%llu,"
          "\"store_errors\":%llu,\"store_ok\":%s,\"log_segments\":%.0f,\"log_dropped\":%.0f,"
          "\"log_pending_bytes\":%.0f%s}",
          now - t0, (long long)env_steps, sps, samples_s, (long long)L.updates, ups,
          (long long)rs.held, (unsigned long long)neps, jnum(j1, sizeof j1, ret100),
          jnum(j2, sizeof j2, L.eval_return), (long long)L.version, jnum(j3, sizeof j3, last_loss),
          (unsigned long long)(ss.rejected + L.bad_batches),
          (unsigned long long)atomic_load(&L.insert_waits),
          (unsigned long long)atomic_load(&L.resent_dropped), (unsigned long long)store_errs,
          healthy ? "true" : "false", lf.written, lf.dropped, lf.pending_bytes, fol_json);
      double t_unix = unix_now();
      follow_metrics(L.fol, L.wr, run, env_steps, t_unix);
      store_writer_metric(L.wr, run, "sps", env_steps, t_unix, sps);
      store_writer_metric(L.wr, run, "updates_s", env_steps, t_unix, ups);
      if (neps) store_writer_metric(L.wr, run, "return100", env_steps, t_unix, ret100);
      if (!isnan(last_loss)) store_writer_metric(L.wr, run, "loss", env_steps, t_unix, last_loss);
      t_log = now;
      steps_at_log = env_steps;
      updates_at_log = L.updates;
      samples_at_log = ss.samples;
    }
  }

  /* Stop: stop taking batches, then keep what was learned. */
  replay_stats rs;
  replay_get_stats(L.mem, &rs);
  int64_t env_steps = L.env_steps_base + (int64_t)rs.inserted_steps;
  follow_halt(L.fol); /* before the rate limiter lets every insert through */
  atomic_store(&L.stopping, true);
  live_hp_wake(&L.live);
  pthread_mutex_lock(&L.rl_mu);
  pthread_cond_broadcast(&L.rl_cv);
  pthread_mutex_unlock(&L.rl_mu);
  if (L.fol) {
    follow_finish(L.fol, L.wr, run, env_steps); /* its final counts: a JSON line, metrics */
    L.fol = NULL;
    replay_get_stats(L.mem, &rs); /* with the segment that was going in, whole */
    env_steps = L.env_steps_base + (int64_t)rs.inserted_steps;
  }
  rpc_server_destroy(L.srv, 1.0);
  L.srv = NULL;
  L.version++;
  snapshot(&L, env_steps, L.eval_return);
  log_checkpoint(&L);
  /* The open segment and the checkpoint to the writer; then the writer's flush below. */
  rlog_stats ls = {0};
  int lrc = rlog_close(L.log, 10.0, &ls); /* compression only: the writer's flush follows */
  L.log = NULL;
  store_writer_run_status(L.wr, run,
                          !strcmp(reason, "signal") ? STORE_RUN_STOPPED : STORE_RUN_FINISHED);
  store_writer_stats ws;
  /* A store that is failing now gets one more try, not 30 s of them: the stop must
   * not hang on an outage (what is not written is counted and reported). */
  int store_healthy_now;
  store_errors(&L, &store_healthy_now);
  int wrc = store_writer_close(L.wr, store_healthy_now ? 30.0 : 3.0, &ws);
  char j1[32], j2[32];
  emit(
      "{\"event\":\"done\",\"reason\":\"%s\",\"t\":%.2f,\"env_steps\":%lld,\"updates\":%lld,"
      "\"version\":%lld,\"eval\":%s,\"best_eval\":%s,\"store_ok\":%s,\"log_segments\":%llu,"
      "\"log_dropped\":%llu}",
      reason, shoal_now_s() - t0, (long long)env_steps, (long long)L.updates, (long long)L.version,
      jnum(j1, sizeof j1, L.eval_return), jnum(j2, sizeof j2, L.best_eval),
      wrc == 0 && lrc == 0 ? "true" : "false", (unsigned long long)ws.replay_written,
      (unsigned long long)(ls.segments_dropped + ws.replay_dropped));
  store_close(L.st);
  env_vec_destroy(ev);
  env_destroy(L.spec_env);
  dqn_destroy(L.q);
  replay_destroy(L.mem);
  config_destroy(L.cfg);
  free(L.stream_ret);
  free(L.incarnation);
  free(L.last_seq);
  for (int a = 0; a < L.actors; a++) pthread_mutex_destroy(&L.actor_mu[a]);
  live_hp_destroy(&L.live);
  free(L.actor_mu);
  pthread_mutex_destroy(&L.log_mu);
  free(L.fol_buf);
  free(L.fol_reset);
  free(L.obs_b), free(L.nobs_b), free(L.obs_f), free(L.nobs_f), free(L.ret), free(L.disc);
  free(L.w), free(L.prio), free(L.act), free(L.idx), free(L.gen);
  free(e_obs), free(e_fin), free(e_obsf), free(e_rew), free(e_term), free(e_trunc);
  free(e_done), free(e_act), free(e_ret);
  return 0;
}
