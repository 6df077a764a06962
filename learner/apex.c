/* SPDX-License-Identifier: Apache-2.0 */
/*
 * learner/apex.c — the Ape-X algorithm of the learner runtime (learner/runtime.h):
 * what actors push goes into prioritized replay (and, with replay.log, into the replay
 * log in the same order), exactly once per batch also across a learner crash; a rate
 * limiter holds the trainer to learner.replay_ratio samples per inserted transition;
 * the trainer samples, runs the double/dueling DQN update and sets new priorities.
 * With replay.source store|mixed the store follower (learner/follow.h) adds segments
 * from the store. The program is learner/learner_main.c (shoal-learner).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "learner/follow.h"
#include "learner/learners.h"
#include "learner/publish.h"
#include "learner/replay_log.h"
#include "replay/limiter.h"
#include "replay/replay.h"
#include "run/run.h"

enum {
  COL_OBS = APEX_OBS,
  COL_ACTION = APEX_ACTION,
  COL_REWARD = APEX_REWARD,
  COL_TERM = APEX_TERM,
  COL_TRUNC = APEX_TRUNC,
  COL_PRIO = APEX_PRIO,
  COL_ENV = APEX_ENV,
  COL_TAIL = APEX_TAIL,
  NCOLS = APEX_NCOLS
};

/* Live tuning: Ape-X's own keys (the runtime has publish_every, snapshot_every_s and the
 * stop rules). Bounds and types come from the config schema. Actor-side keys (actor.eps,
 * ...) are not here: actors read their config once, so those need a restart. */
enum { HP_LR, HP_RATIO, HP_TARGET, HP_BETA0, HP_BETA_STEPS, HP_EVAL_EVERY, HP_COUNT };
static const char *const hp_names[HP_COUNT] = {
    "dqn.lr",       "learner.replay_ratio", "dqn.target_period",
    "replay.beta0", "replay.beta_steps",    "run.eval_every_s"};
/* An algorithm key's place in the hp array a step receives. */
#define HP(k) (LRT_HP_COMMON + (k))

typedef struct learner {
  lrt_base b; /* first: lrt_new fills it (b.actors is 0 with replay.source store) */
  int num_envs, A;
  const env_spec *spec;
  env *spec_env;
  size_t obs_floats, obs_bytes;
  bool obs_u8;
  bool prioritized;

  replay *mem;
  dqn *q;
  rpc_server *srv;
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
  atomic_uint_fast64_t batches_inserted, resent_dropped, stream_cuts; /* since this start */

  /* The rate limiter (replay/limiter.h): the trainer samples at most replay_ratio
   * transitions per transition inserted after warm-up, and a batch waits while it would
   * put the insert side more than `tolerance` samples ahead, so the ratio, not the
   * machine's speed, decides how often each transition is replayed. */
  replay_limiter *lim;
  double ratio, tolerance;
  int64_t warmup;

  /* The trainer's buffers for one batch. */
  void *obs_b, *nobs_b;
  float *obs_f, *nobs_f, *ret, *disc, *w, *prio;
  int32_t *act;
  int64_t *idx;
  uint64_t *gen;

  int B, E;          /* transitions per update; evaluation episodes */
  int64_t group_max; /* rows one env group may have: what replay_insert takes at once */
  dqn_config dc;     /* the network's settings, for the evaluation's copy */
  char *arch;        /* dc described for the actors (Params.arch) */
  int64_t updates;   /* the runtime's count too: β anneals over it */
  int64_t env_steps_base;
  bool resumed_snapshot;   /* --resume found a snapshot (a missing log is then said) */
  _Atomic float last_loss; /* read by Status on rpc threads */
  double t_eval;           /* when the last evaluation was posted */
  int64_t eval_every_steps, next_eval_steps; /* run.eval_every_steps (0: by time) */
  double t_warm_note;                        /* when the last "still warming up" note was printed */
  shoal_rng rng;
  bool tolerance_auto; /* learner.ratio_tolerance 0: derived from the replay ratio */
  double tolerance_per_ratio;
  /* Stop: the replay log's final figures (finish). */
  const char *source;
} learner;

/* ---- ingest: rpc server threads ------------------------------------------------ */

static void count_episodes(learner *L, int stream, const float *reward, const uint8_t *term,
                           const uint8_t *trunc, int n) {
  pthread_mutex_lock(&L->ep_mu);
  for (int i = 0; i < n; i++) {
    L->stream_ret[stream] += reward[i];
    if (term[i] || trunc[i]) {
      lrt_episode(L->b.rt, L->stream_ret[stream]);
      L->stream_ret[stream] = 0;
    }
  }
  pthread_mutex_unlock(&L->ep_mu);
}

/* Room for n more inserts under the rate limiter, counted; waits up to 2 s for the
 * trainer. Returns 0 when there is room (also once the learner stops: what is in
 * flight goes in), else SHOAL_EFULL (the client resends later). */
static int wait_for_room(learner *L, uint32_t n) {
  int rc = replay_limiter_insert(L->lim, n, 2000, NULL);
  return rc == SHOAL_ETIMEDOUT ? SHOAL_EFULL : 0;
}

static int follow_wait(void *user, uint32_t n) { return wait_for_room(user, n); }

/* Whether step row i holds values the replay and the DQN take: an action of the env's,
 * flags 0 or 1, a finite reward, and (prioritized) a finite priority >= 0. Tail rows
 * carry only their observation. */
static bool step_row_ok(const learner *L, const void *const *cols, uint32_t i, shoal_error *err) {
  const int32_t a = ((const int32_t *)cols[COL_ACTION])[i];
  const uint8_t term = ((const uint8_t *)cols[COL_TERM])[i];
  const uint8_t trunc = ((const uint8_t *)cols[COL_TRUNC])[i];
  const float r = ((const float *)cols[COL_REWARD])[i], p = ((const float *)cols[COL_PRIO])[i];
  if (a < 0 || a >= L->A)
    shoal_error_set(err, SHOAL_EINVAL, "row %u: action %d outside [0, %d)", i, a, L->A);
  else if (term > 1 || trunc > 1)
    shoal_error_set(err, SHOAL_EINVAL, "row %u: terminated %u, truncated %u: each must be 0 or 1",
                    i, term, trunc);
  else if (!isfinite(r))
    shoal_error_set(err, SHOAL_EINVAL, "row %u: reward %g is not finite", i, (double)r);
  else if (L->prioritized && !(p >= 0 && isfinite(p)))
    shoal_error_set(err, SHOAL_EINVAL, "row %u: priority %g must be finite and >= 0", i, (double)p);
  else
    return true;
  return false;
}

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
  while (i < n && envi[i] == e && !tail[i]) {
    if (!step_row_ok(L, cols, i, err)) return 0;
    ended += (term[i] || trunc[i]), i++;
  }
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
  if ((int64_t)(*nsteps + *ntails) > L->group_max) {
    shoal_error_set(err, SHOAL_EINVAL, "env %d: %u rows, more than the replay takes at once (%lld)",
                    e, *nsteps + *ntails, (long long)L->group_max);
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

/* A batch's record into the replay log (called under log_mu); a failure is counted, the
 * first one said, and training goes on. */
static void log_append(learner *L, const rlog_batch *rec) {
  shoal_error le = {0};
  if (rlog_append_batch(L->log, rec, &le) && atomic_fetch_add(&L->log_errors, 1) == 0)
    lrt_note(L->b.rt, "replay log: %s (counted; training goes on)", le.msg);
}

/* Puts a checked batch of actor a into replay: the streams cut where batches are
 * missing or a new process speaks, then each env's group; the actor's seq table moves
 * to it. With the log on, the batch's record goes into the log under the same lock as
 * the inserts, so the log's item order is the replay's. Called with actor_mu[a] held,
 * and by a restore (with the log not open yet). */
static int insert_batch(learner *L, int a, uint64_t incarnation, uint64_t seq, uint32_t n,
                        const void *const *cols, uint32_t steps, const rpc_column *obs_frames,
                        shoal_error *err) {
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
    if (obs_frames) {
      /* The observations came as their distinct frames: logged so, each frame once. */
      rec.frames[COL_OBS] = obs_frames->frames;
      rec.frame_depth[COL_OBS] = (uint32_t)rpc_column_frames_of(obs_frames);
      rec.frame_data[COL_OBS] = obs_frames->frame_data;
      rec.frame_index[COL_OBS] = obs_frames->frame_index;
    }
    log_append(L, &rec);
  }
  if (L->log) pthread_mutex_unlock(&L->log_mu);
  if (!rc) {
    /* The table moves only with a batch that went in: one refused cannot make the
     * process's later batches look like resends. */
    L->incarnation[a] = incarnation;
    L->last_seq[a] = seq;
    /* Batches taken from actors by this process: those a resume restores from the log are
     * not, so that taken = inserted + resent holds for every learner process. */
    if (!L->restoring) atomic_fetch_add(&L->batches_inserted, 1);
  }
  return rc;
}

static int on_batch(void *user, const rpc_batch *b, shoal_error *err) {
  learner *L = user;
  if (b->actor_id >= (uint64_t)L->b.actors) {
    atomic_fetch_add(&L->bad_batches, 1);
    return shoal_error_set(err, SHOAL_EINVAL, "actor id %llu outside [0, %d)",
                           (unsigned long long)b->actor_id, L->b.actors);
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
    if (!have) replay_limiter_undo(L->lim, total, 0);
  } else {
    rc = insert_batch(L, a, b->incarnation, b->seq, b->n, cols, total,
                      b->cols[COL_OBS].frames ? &b->cols[COL_OBS] : NULL, err);
    if (rc) replay_limiter_undo(L->lim, total, 0);
  }
  pthread_mutex_unlock(&L->actor_mu[a]);
  return rc;
}

/* Failed store calls so far (the writer's, retries included), and whether the store
 * works now: shown in progress lines and Status. */

typedef struct log_figs {
  double written, dropped, pending_bytes, trimmed;
} log_figs;
static log_figs log_figures(learner *L) {
  log_figs f = {0};
  if (!L->log) return f;
  store_writer_stats ws;
  rlog_stats ls;
  store_writer_stats_get(L->b.wr, &ws);
  rlog_stats_get(L->log, &ls);
  f.written = (double)ws.replay_written;
  f.dropped = (double)(ls.segments_dropped + ws.replay_dropped);
  f.pending_bytes = (double)(ls.pending_bytes + ws.pending_bytes);
  f.trimmed = (double)ls.trimmed;
  return f;
}

static int apply_hp(void *a, int k, double v, shoal_error *err) {
  learner *L = a;
  if (k == HP_LR) return dqn_set_lr(L->q, (float)v, err);
  if (k == HP_TARGET) return dqn_set_target_period(L->q, (int)v, err);
  if (k == HP_RATIO) {
    /* The slack stays as it was and the new ratio holds from now on. */
    L->ratio = v;
    if (L->tolerance_auto) L->tolerance = L->tolerance_per_ratio * v;
    replay_limiter_set_ratio(L->lim, v, L->tolerance);
  }
  return 0;
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
      lrt_note(L->b.rt, "replay log: priority checkpoint: %s", p ? err.msg : "out of memory");
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

/* ---- set-up -------------------------------------------------------------------- */

static replay *make_replay(learner *L, shoal_error *err) {
  replay_config rc = {0};
  rc.kind = L->prioritized ? REPLAY_PRIORITIZED : REPLAY_UNIFORM;
  rc.capacity = config_int(L->b.cfg, "replay.capacity");
  rc.streams = L->b.actors * L->num_envs + L->store_streams;
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
  rc.alpha = config_float(L->b.cfg, "replay.alpha");
  rc.eps = config_float(L->b.cfg, "replay.eps");
  rc.writer_slack = -1;
  L->group_max = rc.capacity - rc.capacity / 64; /* capacity less the writers' slack */
  /* Larger than memory: the columns beyond the limit in a spill file, beside the run's
   * files on a file store (else in $TMPDIR). */
  rc.memory_limit = (size_t)(config_float(L->b.cfg, "replay.memory_limit_mb") * 1048576.0);
  char dir[4096];
  shoal_error derr = {0};
  struct stat sb;
  if (rc.memory_limit && L->b.st &&
      store_local_dir(L->b.st, L->b.run, dir, sizeof dir, &derr) == 0 && stat(dir, &sb) == 0)
    rc.spill_dir = dir;
  replay *r = NULL;
  return replay_create(&rc, &r, err) ? NULL : r;
}

/* ---- the store follower's rows, logged --------------------------------------- */

/* A new source takes a store stream: reset now, and the stream's next record says so. */
static int follow_reset(void *user, int stream, shoal_error *err) {
  learner *L = user;
  int rc = replay_reset_stream(L->mem, stream, err);
  if (!rc && L->fol_reset) L->fol_reset[stream - L->b.actors * L->num_envs] = 1;
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
  int32_t e = stream - L->b.actors * L->num_envs;
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
    log_append(L, &rec);
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
  int stream = L->b.actors * L->num_envs + env[0];
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
  if (b->actor >= (uint32_t)L->b.actors || batch_steps(L, b->rows, b->cols, &steps, NULL)) {
    L->restore_skipped++;
    return 0;
  }
  return insert_batch(L, (int)b->actor, b->incarnation, b->seq, b->rows, b->cols, steps, NULL, err);
}

/* --resume: the replay, its priorities and the exactly-once table from the log. */
static void restore_replay(learner *L, const char *run) {
  if (!config_bool(L->b.cfg, "replay.log")) return;
  rlog_column cols[NCOLS];
  shoal_error err = {0};
  L->restoring = true;
  const replay_config *rc = replay_get_config(L->mem);
  int e = rlog_restore(L->b.st, run, cols, log_columns(L, cols), (uint64_t)rc->capacity, L->mem,
                       restore_one, L, &L->restored, &err);
  L->restoring = false;
  if (e) lrt_die(L->b.rt, "resume: replay log", &err);
  if (!L->restored.segments) {
    /* Said only where there was something to resume (shoal run resumes every start). */
    if (L->resumed_snapshot) lrt_note(L->b.rt, "resume: the store holds no replay log for %s", run);
    return;
  }
  replay_stats rs;
  replay_get_stats(L->mem, &rs);
  /* The step counter continues from what the log holds. */
  L->env_steps_base = (int64_t)L->restored.steps_total - (int64_t)rs.inserted_steps;
  /* The rate limiter starts level with what the memory holds, so a resumed learner does
   * not replay it in one burst. */
  double level = L->ratio * ((double)rs.inserted_steps - (double)L->warmup);
  replay_limiter_set_counts(L->lim, (double)rs.inserted_steps, level > 0 ? level : 0);
  lrt_note(L->b.rt,
           "resume: replay rebuilt from the log: %lld items held from %llu segments (%llu "
           "batches, %llu priorities, %llu gaps, %llu records skipped) in %.2f s; %llu env "
           "steps logged",
           (long long)rs.held, (unsigned long long)L->restored.segments,
           (unsigned long long)L->restored.records, (unsigned long long)L->restored.priorities,
           (unsigned long long)L->restored.gaps, (unsigned long long)L->restore_skipped,
           L->restored.seconds, (unsigned long long)L->restored.steps_total);
}

static void open_log(learner *L, const char *run) {
  if (!config_bool(L->b.cfg, "replay.log")) return;
  shoal_error err = {0};
  if (L->store_streams &&
      !(L->fol_reset = calloc((size_t)L->store_streams, sizeof *L->fol_reset))) {
    shoal_error oom = {SHOAL_ENOMEM, "out of memory"};
    lrt_die(L->b.rt, "replay log", &oom);
  }
  rlog_config c = {0};
  c.st = L->b.st;
  c.wr = L->b.wr;
  c.run = run;
  c.ncols = log_columns(L, c.cols);
  c.segment_bytes = (size_t)(config_float(L->b.cfg, "replay.log_segment_mb") * 1048576.0);
  c.flush_s = config_float(L->b.cfg, "replay.log_flush_s");
  c.keep = config_bool(L->b.cfg, "replay.keep_log");
  c.next_seq = L->restored.next_seq;
  c.next_item = L->restored.next_item;
  c.steps_before = L->restored.steps_total;
  if (!L->restored.segments) {
    /* A run that has a log but was not resumed from it goes on after its last segment
     * (a store that cannot be read now starts at 0: a clash is counted by the writer). */
    uint64_t *seqs = NULL;
    size_t n = 0;
    if (store_replay_list(L->b.st, run, &seqs, &n, &err) == 0 && n) c.next_seq = seqs[n - 1] + 1;
    free(seqs);
  }
  replay_stats rs;
  replay_get_stats(L->mem, &rs);
  L->item_offset = (int64_t)c.next_item - (int64_t)rs.next_seq;
  L->log_seq_lo = L->restored.segments
                      ? (uint64_t)((int64_t)L->restored.contiguous_from - L->item_offset)
                      : rs.next_seq;
  if (rlog_open(&L->log, &c, &err)) lrt_die(L->b.rt, "replay log", &err);
}

/* ---- the trainer ---------------------------------------------------------------- */

static int64_t env_steps(learner *L) {
  replay_stats rs;
  replay_get_stats(L->mem, &rs);
  return L->env_steps_base + (int64_t)rs.inserted_steps;
}

/* The update that step() took from the limiter did not happen. */
static int untake(learner *L, int rc) {
  replay_limiter_undo(L->lim, 0, L->B);
  return rc;
}

/* One update when warm and the rate limiter allows, so results do not depend on how
 * fast this machine trains; the limiter waits for inserts up to 10 ms. */
static int step(void *a, const double *hp, bool *trained, shoal_error *err) {
  learner *L = a;
  const int B = L->B;
  if (replay_limiter_sample(L->lim, B, 10, NULL)) return 0; /* not warm, or ahead */
  replay_batch rb = {0};
  rb.cols[0] = L->obs_b;
  rb.cols[1] = L->act;
  rb.next_obs = L->nobs_b;
  rb.reward = L->ret;
  rb.discount = L->disc;
  rb.weight = L->w;
  rb.index = L->idx;
  rb.generation = L->gen;
  replay_sample_args sa = {B, L->dc.n_step, L->dc.gamma, hp[HP(HP_BETA0)]};
  sa.beta = replay_beta_linear(hp[HP(HP_BETA0)], 1.0, L->updates, (int64_t)hp[HP(HP_BETA_STEPS)]);
  int rc = replay_sample(L->mem, &L->rng, &sa, &rb, err);
  if (rc) return untake(L, rc == SHOAL_ESTATE ? 0 : rc); /* ESTATE: nothing to sample yet */
  obs_to_float(L, L->obs_b, L->obs_f, (size_t)B);
  obs_to_float(L, L->nobs_b, L->nobs_f, (size_t)B);
  dqn_batch db = {B, L->obs_f, L->act, L->ret, L->disc, L->nobs_f, L->w};
  dqn_stats ds;
  rc = dqn_learn(L->q, &db, L->prio, &ds, err);
  if (rc == SHOAL_ENAN) {
    lrt_note(L->b.rt, "update skipped: %s", err->msg);
    return untake(L, 0);
  }
  if (rc) return rc;
  L->last_loss = ds.loss;
  L->updates++;
  *trained = true;
  if (L->prioritized) return replay_update_priorities(L->mem, B, L->idx, L->gen, L->prio, err);
  return 0;
}

static void figs(void *a, lrt_figs *f) {
  learner *L = a;
  replay_stats rs;
  replay_get_stats(L->mem, &rs);
  f->env_steps = L->env_steps_base + (int64_t)rs.inserted_steps;
  f->held = rs.held;
  f->held_steps = rs.held - rs.held_tails;
  f->bad_batches = atomic_load(&L->bad_batches);
  f->loss = L->last_loss;
}

/* Once warm, when there is a threshold to reach: every run.eval_every_steps env steps
 * (what sample efficiency is measured in: a solve is seen within that many steps at
 * any speed), or every run.eval_every_s seconds when that is 0. */
static bool eval_due(void *a, double now, int64_t steps, const double *hp, double ret100,
                     uint64_t episodes) {
  learner *L = a;
  (void)ret100, (void)episodes;
  replay_stats rs;
  replay_get_stats(L->mem, &rs);
  if (hp[LRT_HP_SOLVE] == 0 || rs.held < L->warmup) return false;
  if (L->eval_every_steps > 0) {
    if (steps < L->next_eval_steps) return false;
    L->next_eval_steps = (steps / L->eval_every_steps + 1) * L->eval_every_steps;
  } else if (now - L->t_eval < hp[HP(HP_EVAL_EVERY)]) {
    return false;
  }
  L->t_eval = now;
  return true;
}

/* Ape-X evaluates only to check a solve: with run.solve_return set. */
static bool evaluates(void *a, const double *hp) {
  (void)a;
  return hp[LRT_HP_SOLVE] != 0;
}

static int params(void *a, const float **blob, size_t *n, rpc_param_entry **layout, int *nl,
                  shoal_error *err) {
  learner *L = a;
  nn_model *m = dqn_model(L->q);
  *blob = nn_model_params(m, n);
  return layout ? publish_layout(m, 0, layout, nl, err) : 0;
}

/* The model's safetensors bytes with the learner state as a trailer, so the two are
 * stored in one write and never disagree. */
static int snapshot(void *a, uint8_t **buf, size_t *len, shoal_error *err) {
  learner *L = a;
  uint8_t *st = NULL;
  size_t st_len = 0;
  int rc = nn_model_save_buffer(dqn_model(L->q), buf, len, err);
  if (!rc && (rc = dqn_state_save(L->q, &st, &st_len, err)) == 0)
    rc = algo_snapshot_append_state(buf, len, st, st_len, err);
  free(st);
  if (rc) free(*buf), *buf = NULL;
  return rc;
}

static void after_snapshot(void *a) { log_checkpoint(a); }

static int resume(void *a, const uint8_t *bytes, size_t len, const store_snapshot_meta *m,
                  shoal_error *err) {
  learner *L = a;
  size_t ml, sl;
  const uint8_t *sb;
  int rc = algo_snapshot_split(bytes, len, &ml, &sb, &sl, err);
  if (!rc) rc = nn_model_load_buffer(dqn_model(L->q), bytes, ml, err);
  if (rc) return rc;
  if (sb) {
    if ((rc = dqn_state_load(L->q, sb, sl, err))) return rc;
    lrt_note(L->b.rt, "resume: optimizer state restored (%lld updates)", (long long)m->updates);
  } else {
    lrt_note(L->b.rt,
             "resume: the snapshot holds no optimizer state (written by an older shoal): "
             "Adam restarts and the target is synced");
    if ((rc = dqn_sync_target(L->q, err))) return rc;
  }
  L->updates = m->updates;
  L->env_steps_base = m->env_steps;
  L->resumed_snapshot = true;
  return 0;
}

/* The replay rebuilt from the log (--resume), the log opened, the follower started. */
static int start(void *a, bool resumed, shoal_error *err) {
  learner *L = a;
  if (resumed) restore_replay(L, L->b.run);
  open_log(L, L->b.run);
  if (!L->store_streams) return 0;
  const char *srun = config_string(L->b.cfg, "replay.store_run");
  follow_config fc = {
      .st = L->b.st,
      .run = srun[0] ? srun : L->b.run,
      .mem = L->mem,
      .first_stream = L->b.actors * L->num_envs,
      .nstreams = L->store_streams,
      .prioritized = L->prioritized,
      .poll_s = config_float(L->b.cfg, "replay.store_poll_s"),
      .start_after = resumed ? follow_resume_after(L->b.st, L->b.run) : STORE_SEG_FIRST,
      .store_fraction =
          strcmp(L->source, "mixed") ? 0 : config_float(L->b.cfg, "replay.store_ratio"),
      .replay_log = !strcmp(config_string(L->b.cfg, "replay.store_format"), "log"),
      .insert = follow_insert,
      .reset = follow_reset,
      .wait_room = follow_wait,
      .ctx = L};
  int rc = run_segment_limits(L->spec, &fc.limits, err);
  return rc ? rc : follow_start(&L->fol, &fc, err);
}

static void status(void *a, rpc_counter *out, int *k, int cap) {
  learner *L = a;
  const log_figs lf = log_figures(L);
  struct {
    const char *name;
    double v;
  } figs[] = {{"batches_inserted", (double)atomic_load(&L->batches_inserted)},
              {"resent_dropped", (double)atomic_load(&L->resent_dropped)},
              {"stream_cuts", (double)atomic_load(&L->stream_cuts)},
              {"log_segments", lf.written},
              {"log_dropped", lf.dropped},
              {"log_pending_bytes", lf.pending_bytes},
              {"log_trimmed", lf.trimmed}};
  for (size_t i = 0; i < sizeof figs / sizeof *figs && *k < cap; i++, (*k)++) {
    snprintf(out[*k].name, sizeof out[*k].name, "%s", figs[i].name);
    out[*k].value = figs[i].v;
  }
}

static void progress(void *a, char *buf, size_t cap, double dt, int64_t steps, double t_unix) {
  learner *L = a;
  (void)dt;
  /* Training waits for learner.warmup transitions: say so (every 10 s) rather than sit at
   * zero updates without a word, e.g. following a store with fewer rows than that. */
  replay_stats rs;
  replay_get_stats(L->mem, &rs);
  double now = shoal_now_s();
  if (rs.held < L->warmup && !L->updates && now - L->t_warm_note >= 10) {
    L->t_warm_note = now;
    lrt_note(L->b.rt,
             "warming up: %lld of the %lld transitions training starts at (learner.warmup) are "
             "in replay%s",
             (long long)rs.held, (long long)L->warmup,
             L->store_streams ? "; the store has given what it holds so far" : "");
  }
  char fol_json[256];
  follow_progress_json(L->fol, fol_json, sizeof fol_json);
  log_figs lf = log_figures(L);
  replay_limiter_stats ls;
  replay_limiter_stats_get(L->lim, &ls);
  snprintf(buf, cap,
           ",\"insert_waits\":%llu,\"resent_dropped\":%llu,\"log_segments\":%.0f,"
           "\"log_dropped\":%.0f,\"log_pending_bytes\":%.0f%s",
           (unsigned long long)ls.insert_waits, (unsigned long long)atomic_load(&L->resent_dropped),
           lf.written, lf.dropped, lf.pending_bytes, fol_json);
  follow_metrics(L->fol, L->b.wr, L->b.run, steps, t_unix);
}

/* A stop rule was met; the actors stop first: what they still send goes in (and into
 * the replay log, for a resume) without waiting for updates, which have ended. */
static void drain(void *a) {
  learner *L = a;
  follow_halt(L->fol); /* the store's segments wait for the next run, as in halt */
  replay_limiter_close(L->lim);
}

/* No more batches: the follower first (before the rate limiter lets every insert
 * through), then every waiting insert released, then the follower's last counts. */
static void halt(void *a) {
  learner *L = a;
  follow_halt(L->fol);
  replay_limiter_close(L->lim);
  if (L->fol) {
    follow_finish(L->fol, L->b.wr, L->b.run,
                  env_steps(L)); /* its final counts: a JSON line, metrics */
    L->fol = NULL;
  }
}

/* The open segment and the last checkpoint to the writer (the runtime then flushes
 * it): compression only here. */
static bool finish(void *a, char *buf, size_t cap) {
  learner *L = a;
  rlog_stats ls = {0};
  int lrc = rlog_close(L->log, 10.0, &ls);
  L->log = NULL;
  store_writer_stats ws;
  store_writer_stats_get(L->b.wr, &ws);
  snprintf(buf, cap,
           ",\"batches_inserted\":%llu,\"resent_dropped\":%llu,\"log_segments\":%llu,"
           "\"log_dropped\":%llu",
           (unsigned long long)atomic_load(&L->batches_inserted),
           (unsigned long long)atomic_load(&L->resent_dropped),
           (unsigned long long)ws.replay_written,
           (unsigned long long)(ls.segments_dropped + ws.replay_dropped));
  return lrc == 0;
}

/* ---- evaluation (its own thread, its own copy of the network) ------------------- */

typedef struct apex_eval {
  dqn *q;
  op_spec s; /* the env's spaces, for the evaluation loop */
  op_eval *loop;
  shoal_rng rng;
} apex_eval;

static void *eval_create(void *a, shoal_error *err) {
  learner *L = a;
  apex_eval *e = calloc(1, sizeof *e);
  if (!e) {
    shoal_error_set(err, SHOAL_ENOMEM, "evaluation: out of memory");
    return NULL;
  }
  dqn_config dc = L->dc;
  dc.max_batch = L->E < 16 ? L->E : 16;
  snprintf(e->s.env_id, sizeof e->s.env_id, "%s", L->spec->id);
  snprintf(e->s.env_options, sizeof e->s.env_options, "%s", config_string(L->b.cfg, "env.options"));
  if (!(e->q = dqn_create(&dc, NN_CPU, false, err)) || op_spec_set_env(&e->s, L->spec, err) ||
      !(e->loop = op_eval_create(&e->s, L->E, err))) {
    dqn_destroy(e->q);
    free(e);
    return NULL;
  }
  return e;
}

/* The greedy policy (ε = 0). */
static int eval_act(void *ctx, const float *obs, int B, const uint8_t *first, void *env_act,
                    shoal_error *err) {
  apex_eval *e = ctx;
  (void)first;
  return dqn_act(e->q, obs, B, 0.0f, &e->rng, env_act, NULL, err);
}

/* Mean undiscounted return of the greedy policy over run.eval_episodes episodes. */
static int eval_run(void *ev, const float *blob, size_t n, uint64_t seed, double *mean,
                    shoal_error *err) {
  apex_eval *e = ev;
  double sd;
  shoal_rng_seed(&e->rng, seed);
  int rc = dqn_load_params(e->q, blob, n, err);
  return rc ? rc : op_eval_run_policy(e->loop, eval_act, e, NULL, seed, mean, &sd, NULL, NULL, err);
}

static void eval_destroy(void *ev) {
  apex_eval *e = ev;
  if (!e) return;
  op_eval_destroy(e->loop);
  dqn_destroy(e->q);
  free(e);
}

static void destroy(void *a) {
  learner *L = a;
  env_destroy(L->spec_env);
  dqn_destroy(L->q);
  replay_destroy(L->mem);
  free(L->stream_ret);
  free(L->incarnation);
  free(L->last_seq);
  /* A set-up that failed early (a bad env option) has no per-actor locks yet. */
  for (int i = 0; L->actor_mu && i < L->b.actors; i++) pthread_mutex_destroy(&L->actor_mu[i]);
  free(L->actor_mu);
  pthread_mutex_destroy(&L->log_mu);
  pthread_mutex_destroy(&L->ep_mu);
  replay_limiter_destroy(L->lim);
  free(L->fol_buf);
  free(L->fol_reset);
  free(L->obs_b), free(L->nobs_b), free(L->obs_f), free(L->nobs_f), free(L->ret), free(L->disc);
  free(L->w), free(L->prio), free(L->act), free(L->idx), free(L->gen);
  free(L->arch);
  free(L);
}

/* ---- set-up --------------------------------------------------------------------- */

/* The trainer's buffers for one batch of B, sized once. */
static int alloc_batch(learner *L, shoal_error *err) {
  size_t B = (size_t)L->B, ob = L->obs_bytes;
  L->obs_b = malloc(B * ob);
  L->nobs_b = malloc(B * ob);
  L->obs_f = malloc(B * L->obs_floats * sizeof(float));
  L->nobs_f = malloc(B * L->obs_floats * sizeof(float));
  L->ret = malloc(B * sizeof(float));
  L->disc = malloc(B * sizeof(float));
  L->w = malloc(B * sizeof(float));
  L->prio = malloc(B * sizeof(float));
  L->act = malloc(B * sizeof(int32_t));
  L->idx = malloc(B * sizeof(int64_t));
  L->gen = malloc(B * sizeof(uint64_t));
  size_t actors = (size_t)L->b.actors + 1;
  L->stream_ret = calloc(actors * (size_t)L->num_envs, sizeof *L->stream_ret);
  L->incarnation = calloc(actors, sizeof *L->incarnation);
  L->last_seq = calloc(actors, sizeof *L->last_seq);
  L->actor_mu = calloc(actors, sizeof *L->actor_mu);
  for (int a = 0; L->actor_mu && a < L->b.actors; a++) pthread_mutex_init(&L->actor_mu[a], NULL);
  if (!L->obs_b || !L->nobs_b || !L->obs_f || !L->nobs_f || !L->ret || !L->disc || !L->w ||
      !L->prio || !L->act || !L->idx || !L->gen || !L->stream_ret || !L->incarnation ||
      !L->last_seq || !L->actor_mu)
    return shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
  return 0;
}

/* Where the data comes from: replay.source actors, store (no actors) or mixed. */
static int read_source(learner *L, shoal_error *err) {
  L->source = config_string(L->b.cfg, "replay.source");
  if (strcmp(L->source, "actors"))
    L->store_streams = (int)config_int(L->b.cfg, "replay.store_streams");
  if (!strcmp(L->source, "store")) L->b.actors = 0;
  const char *srun = config_string(L->b.cfg, "replay.store_run");
  if (strcmp(L->source, "actors") &&
      !strcmp(config_string(L->b.cfg, "replay.store_format"), "log") &&
      (!srun[0] || !strcmp(srun, L->b.run)))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "replay.store_format log follows another learner's replay log: set "
                           "replay.store_run to that run (not this one, %s)",
                           L->b.run);
  return 0;
}

/* The network, the replay and the rate limiter from the config. */
static int build(learner *L, lrt_algo *algo, shoal_error *err) {
  int rc = env_make_opts(&L->spec_env, config_string(L->b.cfg, "env.id"),
                         config_string(L->b.cfg, "env.options"), err);
  if (rc) return rc;
  L->spec = env_get_spec(L->spec_env);
  if ((rc = apex_env_check(L->spec, err))) return rc;
  L->obs_u8 = L->spec->obs.dtype == ENV_UINT8;
  L->obs_floats = (size_t)L->spec->obs.size;
  L->obs_bytes = env_space_bytes(&L->spec->obs);
  L->A = L->spec->act.n;
  const char *dev = config_string(L->b.cfg, "learner.device");
  nn_device device = NN_CPU;
  /* apex_check accepted it: cpu, cuda or auto. */
  if (!strcmp(dev, "cuda") || (!strcmp(dev, "auto") && nn_cuda_available(NULL))) device = NN_CUDA;
  algo->device = device == NN_CUDA ? "cuda" : "cpu";
  L->B = (int)config_int(L->b.cfg, "learner.batch");
  L->E = (int)config_int(L->b.cfg, "run.eval_episodes");
  L->dc = apex_dqn_config(L->b.cfg, L->spec->obs.ndim, L->spec->obs.shape, L->spec->act.n);
  L->dc.max_batch = L->B;
  if (!(L->q = dqn_create(&L->dc, device, true, err))) return err->code;
  if ((rc = dqn_describe(&L->dc, L->obs_u8, &L->arch, err))) return rc;
  if (!(L->mem = make_replay(L, err))) return err->code;
  L->ratio = config_float(L->b.cfg, "learner.replay_ratio");
  L->warmup = config_int(L->b.cfg, "learner.warmup");
  L->tolerance = config_float(L->b.cfg, "learner.ratio_tolerance");
  L->tolerance_per_ratio =
      4.0 * L->b.actors * L->num_envs * (double)config_int(L->b.cfg, "actor.send_steps") +
      (L->store_streams ? 2.0 * FOLLOW_CHUNK : 0);
  L->tolerance_auto = L->tolerance <= 0;
  if (L->tolerance_auto) L->tolerance = L->tolerance_per_ratio * L->ratio;
  replay_limiter_config lc = {.samples_per_insert = L->ratio,
                              .insert_tolerance = L->tolerance,
                              .min_size_to_sample = L->warmup,
                              .insert_counts_own = true};
  int lrc = replay_limiter_create(&lc, &L->lim, err);
  return lrc ? lrc : alloc_batch(L, err);
}

static void *create(lrt *rt, lrt_algo *algo, shoal_error *err) {
  learner *L = lrt_new(rt, sizeof *L, err);
  if (!L) return NULL;
  L->num_envs = (int)config_int(L->b.cfg, "env.num_envs");
  L->prioritized = config_bool(L->b.cfg, "replay.prioritized");
  L->last_loss = NAN;
  L->t_eval = L->t_warm_note = shoal_now_s();
  L->eval_every_steps = config_int(L->b.cfg, "run.eval_every_steps");
  pthread_mutex_init(&L->ep_mu, NULL);
  pthread_mutex_init(&L->log_mu, NULL);
  shoal_rng_seed(&L->rng, (uint64_t)config_int(L->b.cfg, "run.seed") * 7919 + 17);
  nn_set_threads((int)config_int(L->b.cfg, "learner.threads"));
  if (read_source(L, err) || build(L, algo, err)) {
    destroy(L);
    return NULL;
  }
  *algo = (lrt_algo){.name = "apex",
                     .device = algo->device,
                     .hp_names = hp_names,
                     .hp_count = HP_COUNT,
                     .hp_lr = HP_LR,
                     .samples_per_item = 1,
                     .on_batch = on_batch,
                     .step = step,
                     .apply_hp = apply_hp,
                     .figs = figs,
                     .eval_due = eval_due,
                     .evaluates = evaluates,
                     .params = params,
                     .snapshot = snapshot,
                     .after_snapshot = after_snapshot,
                     .resume = resume,
                     .start = start,
                     .status = status,
                     .progress = progress,
                     .drain = drain,
                     .halt = halt,
                     .finish = finish,
                     .eval_create = eval_create,
                     .eval_run = eval_run,
                     .eval_destroy = eval_destroy,
                     .destroy = destroy,
                     .arch = L->arch};
  uint32_t max_items =
      (uint32_t)(2 * L->num_envs * (config_int(L->b.cfg, "actor.send_steps") + L->dc.n_step + 1));
  apex_rpc_spec(L->spec, L->b.run, max_items, &algo->spec);
  algo->spec.max_actors = (uint64_t)L->b.actors; /* 0 (store only): no bound; on_batch refuses */
  return L;
}

const lrt_program apex_learner = {"shoal-learner", apex_schema, apex_check, create};
