/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay/replay.h — replay memories for the learner: a transition memory with
 * uniform or proportional prioritized sampling (Schaul et al. 2016), n-step
 * returns and frame stacking assembled at sample time, and a trajectory FIFO
 * of fixed-length unrolls for on-policy learners (IMPALA, PPO).
 *
 * Depends on common/ and pthreads alone.
 *
 *   replay_config c = {.kind = REPLAY_PRIORITIZED, .capacity = 1 << 20, .streams = 64,
 *                      .ncols = 2, .obs_column = "obs", .alpha = 0.6, .eps = 1e-6};
 *   c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_F32, .ndim = 1, .shape = {4}};
 *   c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I64};
 *   replay *r;
 *   if (replay_create(&c, &r, &err)) return 1;
 *   // an rpc thread: N consecutive steps of one env (stream 3), columns of raw bytes
 *   replay_steps s = {.n = N, .cols = {obs, act}, .reward = rew, .terminated = term,
 *                     .truncated = trunc, .final_obs = final_obs};
 *   replay_insert(r, 3, &s, &err);
 *   // the trainer thread
 *   replay_sample_args a = {.batch = 256, .n_step = 3, .gamma = 0.99, .beta = 0.4};
 *   replay_batch b = {.cols = {obs_b, act_b}, .next_obs = nobs_b, .reward = ret,
 *                     .discount = disc, .weight = w, .index = idx, .generation = gen};
 *   replay_sample(r, &rng, &a, &b, &err);
 *   // learn on b; td_abs[i] = |TD error| of sample i
 *   replay_update_priorities(r, 256, idx, gen, td_abs, &err);
 *
 * The transition memory
 * ---------------------
 * Actors send streams: the consecutive steps of one environment, in time order. A
 * step is the observation o_t, the caller's columns (action, log-prob, ...), the
 * reward r_t and the two Gymnasium flags terminated_t / truncated_t. Each step is
 * stored once in a ring of `capacity` slots; the next observation of a step is
 * the observation of the step after it in its stream, found through a link, so no
 * next-observation column is stored. When an episode ends (terminated or
 * truncated) the caller also gives the final observation o_{t+1}; it takes one
 * slot of its own (a "tail", never sampled) so that a truncated step can
 * bootstrap from it. With frame_stack k > 1 the observation column holds ONE
 * frame per step and stacks of k frames are gathered at sample time by following
 * the links back, repeating the episode's first frame before its start (as the
 * Atari wrappers and Dopamine do): a 4-stack costs the memory of one frame.
 *
 * n-step returns are assembled at SAMPLE time from the stored rewards, so gamma
 * and n may change per call:
 *   R_t = sum_{k<m} gamma^k r_{t+k},  m = n, or fewer when the episode ends first;
 *   discount = 0 if step t+m-1 terminated, else gamma^m (a truncated episode
 *   bootstraps from its final observation); next_obs = o_{t+m}.
 * A step is sampleable once the steps its n-step return and its stacks need are
 * in the memory (its successors arrived, its predecessors not overwritten); other
 * draws are rejected and drawn again, as Dopamine does.
 *
 * Prioritized sampling: p_i = (|delta_i| + eps)^alpha, P(i) = p_i / sum_j p_j,
 * drawn stratified over a sum tree; weights w_i = (N P(i))^-beta / max_j w_j =
 * (p_min / p_i)^beta with p_min the smallest priority in the memory (a min tree),
 * as in the paper. New steps get the largest priority seen so far, or an initial
 * |delta| given by the actor (Ape-X). A sample returns each step's slot index and
 * generation (its insertion sequence number); an update whose generation no
 * longer matches the slot (overwritten since it was sampled) is ignored and
 * counted.
 *
 * Threads: any number of threads may insert at once, each into different
 * streams (one stream is used by one thread at a time; a collision is refused with
 * SHOAL_ESTATE). Inserts reserve slots with one atomic add, copy without a lock,
 * then publish each slot (a release store of its sequence number); prioritized
 * memories add one short lock per insert call for the sum tree. One thread (the
 * trainer) calls sample, update_priorities and save; they must not run
 * concurrently with each other. While that thread reads, writers never overwrite
 * what it may read: the oldest `writer_slack` items are not sampled, so writers
 * overwriting them proceed without waiting; a writer waits only if it would
 * overwrite newer items while a chunk of 32 draws is being copied (or, during
 * replay_save, items not yet written to the file). A writer that laps a slower
 * one (reserves a slot one capacity later) waits until that slot's previous item
 * is published.
 *
 * When full, the ring overwrites its oldest items. For backpressure, the optional
 * rate limiter (replay_config.samples_per_insert) holds inserts back while the
 * learner lags, and samples while the actors lag, keeping the replay ratio within
 * a band as Reverb's SampleToInsertRatio does.
 *
 * The trajectory FIFO
 * -------------------
 * A bounded queue of unrolls: T steps of the configured columns (one column may
 * carry T+1 rows, the bootstrap observation), the behaviour policy's log-probs
 * (T floats) and the policy version that acted. Pop takes B unrolls in arrival
 * order, dropping (and counting) those older than max_staleness versions. When
 * full, a push blocks (with a timeout), drops the oldest unroll, or refuses the new
 * one, by config. Many pushing threads, one popping thread.
 */
#ifndef SHOAL_REPLAY_H
#define SHOAL_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  REPLAY_MAX_COLUMNS = 16, /* columns in a spec */
  REPLAY_MAX_DIMS = 4,     /* dims of one item */
  REPLAY_NAME_MAX = 32,    /* column name, with its NUL */
};

/* Element types. Values only grow; they are written in save files. */
typedef enum replay_dtype {
  REPLAY_U8 = 0,
  REPLAY_I32 = 1,
  REPLAY_I64 = 2,
  REPLAY_F32 = 3,
  REPLAY_F64 = 4,
  REPLAY_BOOL = 5, /* one byte, 0 or 1 */
} replay_dtype;

/* Bytes of one element (1, 4, 8); 0 for an unknown dtype. Can't fail. */
size_t replay_dtype_size(replay_dtype dt);
/* "u8", "i32", "i64", "f32", "f64", "bool"; "?" for an unknown dtype. Can't fail. */
const char *replay_dtype_name(replay_dtype dt);
/* Parses a name above into *out. Returns 0 or SHOAL_EINVAL (out untouched). */
int replay_dtype_parse(const char *name, replay_dtype *out);

/* One column: a name, an element type and the shape of ONE item (ndim 0: a scalar).
 * For the observation column with frame_stack k, the shape of one frame. */
typedef struct replay_column {
  char name[REPLAY_NAME_MAX];
  replay_dtype dtype;
  int ndim;
  int64_t shape[REPLAY_MAX_DIMS];
} replay_column;

/* Bytes of one item of c (product of shape times the element size); 0 if invalid. */
size_t replay_column_bytes(const replay_column *c);

/* ---------------------------------------------------------------- transitions */

typedef enum replay_kind {
  REPLAY_UNIFORM = 0,
  REPLAY_PRIORITIZED = 1, /* proportional PER over a sum tree */
} replay_kind;

typedef struct replay_config {
  replay_kind kind;
  int64_t capacity; /* slots: steps plus one per episode end (its final obs); < 2^31 */
  int streams;      /* stream ids 0..streams-1 (actors x envs); 0 means 1 */
  int ncols;        /* 1..REPLAY_MAX_COLUMNS */
  replay_column cols[REPLAY_MAX_COLUMNS];
  const char *obs_column; /* name of the observation column, or NULL: no next-obs,
                             no final obs, no stacking (n-step still works) */
  int frame_stack;        /* k in [1, 32] (0 means 1): frames per stacked observation */
  double alpha;           /* PER priority exponent, >= 0 (0.6 in the paper) */
  double eps;             /* PER floor added to |delta|, > 0 (e.g. 1e-6) */
  int64_t writer_slack;   /* oldest items never sampled so writers need not wait;
                             < 0: capacity / 64. 0 is exact but writers may wait. */
  /* Backpressure (optional): a rate limiter as Reverb's SampleToInsertRatio. With
   * I steps inserted and S transitions sampled, d = spi * I - S must stay within
   * spi * min_size_to_sample +- spi_tolerance: an insert waits while d is above
   * that band (the learner is behind), a sample waits while d is below it or
   * fewer than min_size_to_sample steps were inserted (the actors are behind).
   * Each side checks before it adds, so one call may overshoot by its own size. */
  double samples_per_insert;  /* spi > 0 turns the limiter on; 0: off (never waits) */
  double spi_tolerance;       /* >= 0, in samples */
  int64_t min_size_to_sample; /* >= 0 */
  int64_t limit_timeout_ms;   /* longest wait of one call; < 0: forever */
  /* Larger than memory (optional): with memory_limit > 0 below the columns' bytes, the
   * columns of large items (256 bytes or more: observations) live in a file created
   * unlinked in spill_dir (NULL: $TMPDIR or /tmp) and mapped into memory; only the
   * newest memory_limit bytes' worth of items stay resident. Inserting threads release
   * the pages of older items (madvise) as the ring moves on; samples read those items
   * from the file with pread (the page cache serves them while RAM allows), so they map
   * nothing. Small columns, per-item metadata, links, rewards and priority trees stay in
   * memory: sampling, priorities and n-step returns are exactly those of an in-memory
   * replay. */
  size_t memory_limit;   /* bytes of column data kept resident; 0: all in memory */
  const char *spill_dir; /* borrowed for replay_create only */
} replay_config;

typedef struct replay replay;

/* Creates a memory; allocates and touches all its memory now (see
 * replay_memory_bytes). The config is copied (obs_column too). On error *out is
 * untouched and err says which field is wrong. Caller owns *out: replay_destroy. */
int replay_create(const replay_config *cfg, replay **out, shoal_error *err);
/* Frees r and everything it holds. r may be NULL. No other call may be running. */
void replay_destroy(replay *r);

/* Bytes the memory holds (columns, per-slot metadata, trees, stream table),
 * known at create. Can't fail. */
size_t replay_memory_bytes(const replay_config *cfg);
/* The config r was created with (borrowed, lives as long as r). */
const replay_config *replay_get_config(const replay *r);
/* Index of the column named name in the spec, or -1. */
int replay_column_index(const replay *r, const char *name);

/* N consecutive steps of one stream. All pointers are borrowed for the call. */
typedef struct replay_steps {
  int64_t n;                            /* N >= 1 */
  const void *cols[REPLAY_MAX_COLUMNS]; /* per spec column: N items, packed */
  const float *reward;                  /* (N) finite */
  const uint8_t *terminated;            /* (N) nonzero: ended in a terminal state */
  const uint8_t *truncated;             /* (N) nonzero: cut (time limit); NULL: none */
  const void *final_obs;                /* (K, frame) obs after each of the K ended steps, in order;
                                           required when K > 0 and there is an obs column */
  const float *priority; /* (N) initial |delta| (>= 0, finite) or NULL: max priority */
} replay_steps;

/* Appends the steps to stream `stream`. A step continues the stream's previous
 * step unless that one ended an episode (the first step of a stream starts one).
 * Copies everything; on error nothing is inserted. Thread-safe across streams;
 * the same stream from two threads at once gives SHOAL_ESTATE. Returns 0,
 * SHOAL_EINVAL (bad argument, N + K beyond capacity - writer_slack), SHOAL_ENAN
 * (non-finite reward or priority), SHOAL_ERANGE (stream id), SHOAL_ESTATE, and
 * with the rate limiter SHOAL_ETIMEDOUT or SHOAL_ECLOSED (replay_close). */
int replay_insert(replay *r, int stream, const replay_steps *steps, shoal_error *err);

/* One step: cols[c] one item per spec column; final_obs when the step ended an
 * episode (else ignored, may be NULL); priority < 0 means max priority. */
int replay_insert_one(replay *r, int stream, const void *const *cols, float reward, int terminated,
                      int truncated, const void *final_obs, float priority, shoal_error *err);

/* Abandons the open episode of `stream` (its actor restarted or went away): its
 * next step starts a new episode instead of continuing the old one, whose last
 * steps never get successors (they are not sampled where they would need one).
 * Not concurrent with an insert of the same stream (SHOAL_ESTATE then). Returns
 * 0, SHOAL_ERANGE or SHOAL_ESTATE. */
int replay_reset_stream(replay *r, int stream, shoal_error *err);

/* A named column of raw bytes as decoded off the wire (borrowed). shape includes
 * the leading N (or K for final_obs). */
typedef struct replay_column_data {
  const char *name;
  replay_dtype dtype;
  int ndim;
  const int64_t *shape;
  const void *data;
  size_t nbytes;
} replay_column_data;

/* replay_insert from named columns: every spec column, "reward" (f32, (N)),
 * "terminated" (u8 or bool, (N)), optional "truncated" (u8 or bool, (N)), "final_obs"
 * (the obs column's dtype, (K, frame...)) when K > 0, optional "priority" (f32, (N)).
 * Checks names, dtypes, shapes and byte counts; an unknown, missing, duplicated or
 * mismatched column is SHOAL_EINVAL / SHOAL_ESHAPE with its name in err. */
int replay_insert_columns(replay *r, int stream, const replay_column_data *cols, int ncols,
                          shoal_error *err);

typedef struct replay_sample_args {
  int batch;    /* B >= 1 */
  int n_step;   /* n >= 1 (0 means 1) */
  double gamma; /* discount in [0, 1] */
  double beta;  /* IS exponent in [0, 1]; uniform memories give weight 1 */
} replay_sample_args;

/* Caller-owned output buffers for B samples. Any pointer may be NULL (not written). */
typedef struct replay_batch {
  void *cols[REPLAY_MAX_COLUMNS]; /* per spec column: (B, item); the obs column
                                     (B, k, frame) with frame_stack k > 1 */
  void *next_obs;                 /* (B, k, frame): o_{t+m}, also when discount is 0 */
  float *reward;                  /* (B) n-step return R */
  float *discount;                /* (B) gamma^m or 0 (terminated) */
  int32_t *steps;                 /* (B) m, the rewards summed */
  float *weight;                  /* (B) IS weight (1 for uniform) */
  int64_t *index;                 /* (B) slot, for replay_update_priorities */
  uint64_t *generation;           /* (B) the slot's generation when sampled */
} replay_batch;

/* Draws B steps (with replacement) uniformly or by priority and writes their data.
 * Only the sampling thread calls it. Returns 0, SHOAL_EINVAL, SHOAL_ESTATE when
 * the memory holds no sampleable step (err says how many items it holds), and
 * with the rate limiter SHOAL_ETIMEDOUT or SHOAL_ECLOSED. */
int replay_sample(replay *r, shoal_rng *rng, const replay_sample_args *args, replay_batch *out,
                  shoal_error *err);

/* Sets p = (|td_abs| + eps)^alpha for n sampled steps; entries whose generation is
 * stale are skipped and counted (stats.stale_updates). Non-finite or negative
 * td_abs: SHOAL_ENAN / SHOAL_EINVAL and nothing is updated. On a uniform memory,
 * SHOAL_ENOTSUP. Only the sampling thread calls it. */
int replay_update_priorities(replay *r, int64_t n, const int64_t *index, const uint64_t *generation,
                             const float *td_abs, shoal_error *err);

/* The priorities p = (|delta| + eps)^alpha of the n items with sequence numbers
 * lo, lo+1, ... into p[0..n): an item the memory no longer holds (overwritten, or
 * not yet inserted) or a final-observation tail gives -1. For saving priorities
 * beside a log of the inserts (the learner's replay log). Only the sampling thread
 * calls it. Returns 0, SHOAL_EINVAL or SHOAL_ENOTSUP (uniform memory). */
int replay_priorities_get(replay *r, uint64_t lo, int64_t n, float *p, shoal_error *err);

/* Sets the priority of the items with sequence numbers lo .. lo+n-1 to p[i] as is
 * (already exponentiated, as replay_priorities_get gives them); entries < 0, items not
 * held and tails are skipped. The largest priority seen is raised to the largest one
 * set; *set (may be NULL) gets how many were set. Only the sampling thread calls it (or one thread
 * before sampling starts). Returns 0, SHOAL_EINVAL, SHOAL_ENAN (a non-finite entry: nothing set) or
 * SHOAL_ENOTSUP (uniform memory). */
int replay_priorities_set(replay *r, uint64_t lo, int64_t n, const float *p, int64_t *set,
                          shoal_error *err);

/* Linear beta annealing from beta0 at step 0 to beta1 at step `steps` (then flat),
 * as in the paper. Can't fail. */
double replay_beta_linear(double beta0, double beta1, int64_t step, int64_t steps);

typedef struct replay_stats {
  uint64_t inserted_steps; /* steps inserted since create (or load) */
  uint64_t inserted_tails; /* final observations stored */
  int64_t held;            /* items in the ring (steps and tails) */
  int64_t held_tails;      /* final-observation tails among them: held - held_tails steps */
  uint64_t sampled;        /* steps returned by replay_sample */
  uint64_t rejected_draws; /* draws redone (incomplete n-step, overwritten, in flight) */
  uint64_t stale_updates;  /* priority updates ignored: slot overwritten */
  uint64_t writer_waits;   /* inserts that waited for a sample or save to finish */
  double writer_wait_s;    /* time inserts spent in those waits, all threads */
  uint64_t limiter_waits;  /* inserts and samples the rate limiter held back */
  double priority_total;   /* sum of priorities (PER) */
  double priority_max;     /* largest priority seen (PER) */
  uint64_t next_seq;       /* the sequence number (generation) the next item gets;
                              items get consecutive numbers from 1 in insert order */
  int64_t resident_items;  /* memory_limit: items whose columns are kept resident
                              (capacity when there is no limit) */
  uint64_t spill_sweeps;   /* memory_limit: releases of older items' pages */
} replay_stats;

/* Wakes every insert and sample waiting on the rate limiter with SHOAL_ECLOSED;
 * later waits return it at once (calls that need not wait still work). For
 * shutdown. Thread-safe. */
void replay_close(replay *r);

/* A snapshot of the counters. Safe from any thread (values may be a moment old). */
void replay_get_stats(const replay *r, replay_stats *out);

/* Writes the whole memory to path atomically (path.tmp, fsync, rename, fsync dir),
 * streamed in 1 MiB pieces: magic "SHOALRPL", version, the spec (with its own
 * CRC32C), the streams' state, the items with their priorities, then a CRC32C of
 * everything before it. Inserts may continue meanwhile: the file holds what was
 * published when save began, written oldest first, and a writer that would
 * overwrite an item not yet written waits for it. Only the sampling thread calls
 * it. Returns 0 or SHOAL_EIO (err names the path and errno's reason). */
int replay_save(replay *r, const char *path, shoal_error *err);

/* Loads a file written by replay_save into r, which must be empty (just created)
 * and have the same spec (kind, capacity, streams, columns, obs column, stack,
 * alpha, eps); no other call may run meanwhile. A different spec is SHOAL_EINVAL
 * naming the first difference; bad magic, version, checksum or a truncated file
 * is SHOAL_EFORMAT; on any error r is left empty. */
int replay_load(replay *r, const char *path, shoal_error *err);

/* ---------------------------------------------------------------- trajectories */

typedef enum replay_full_policy {
  REPLAY_FULL_BLOCK = 0,       /* push waits up to push_timeout_ms, then SHOAL_ETIMEDOUT */
  REPLAY_FULL_DROP_OLDEST = 1, /* the oldest waiting unroll is dropped (counted) */
  REPLAY_FULL_DROP_NEW = 2,    /* the new unroll is refused: SHOAL_EFULL (counted) */
} replay_full_policy;

typedef struct replay_traj_config {
  int T;                                  /* steps per unroll, >= 1 */
  int ncols;                              /* 1..REPLAY_MAX_COLUMNS */
  replay_column cols[REPLAY_MAX_COLUMNS]; /* per step */
  const char *bootstrap_column;           /* this column holds T+1 rows (o_0..o_T), or NULL */
  const char *unroll_column;              /* this column holds ONE row per unroll (a recurrent
                                             core's initial state), or NULL; popped
                                             time-major it is (B, item) */
  int64_t capacity;                       /* unrolls held, >= 1 */
  int64_t max_staleness;                  /* pop drops unrolls with version < learner - this;
                                             < 0: no bound */
  replay_full_policy full;
  int64_t push_timeout_ms; /* REPLAY_FULL_BLOCK: < 0 waits forever */
} replay_traj_config;

typedef struct replay_traj replay_traj;

/* Creates a FIFO; all memory allocated now. Caller owns *out: replay_traj_destroy. */
int replay_traj_create(const replay_traj_config *cfg, replay_traj **out, shoal_error *err);
/* Frees q. No call may be running or blocked on it (replay_traj_close first). */
void replay_traj_destroy(replay_traj *q);
size_t replay_traj_memory_bytes(const replay_traj_config *cfg);
/* Rows of column c in one unroll: T, T+1 for the bootstrap column, 1 for the unroll
 * column. */
int replay_traj_rows(const replay_traj *q, int c);

/* Pushes one unroll: cols[c] holds rows(c) items of column c, logp T floats (may be
 * NULL: zeros), version the policy version that acted. Copies everything; borrows
 * for the call. Thread-safe. Returns 0, SHOAL_EINVAL, SHOAL_ENAN (non-finite logp),
 * SHOAL_EFULL (drop-new), SHOAL_ETIMEDOUT (block) or SHOAL_ECLOSED. */
int replay_traj_push(replay_traj *q, const void *const *cols, const float *logp, int64_t version,
                     shoal_error *err);

/* Caller-owned buffers for B unrolls. NULL pointers are not written. */
typedef struct replay_traj_batch {
  void *cols[REPLAY_MAX_COLUMNS]; /* (B, rows(c), item), or (rows(c), B, item) time-major */
  float *logp;                    /* (B, T), or (T, B) time-major */
  int64_t *version;               /* (B) */
  int time_major; /* nonzero: time-major layouts, as V-trace and most RNN code want */
} replay_traj_batch;

/* Pops B unrolls in arrival order. Unrolls with version < learner_version -
 * max_staleness are dropped and counted on the way. Waits up to timeout_ms (< 0:
 * forever) for B fresh unrolls; on timeout pops nothing and returns
 * SHOAL_ETIMEDOUT. B must be <= capacity. One popping thread. */
int replay_traj_pop(replay_traj *q, int B, int64_t learner_version, int64_t timeout_ms,
                    replay_traj_batch *out, shoal_error *err);

/* Wakes every blocked push and pop with SHOAL_ECLOSED; later calls get it too. */
void replay_traj_close(replay_traj *q);

typedef struct replay_traj_stats {
  uint64_t pushed;        /* unrolls accepted */
  uint64_t popped;        /* unrolls returned by pop */
  uint64_t dropped_stale; /* dropped by the staleness bound */
  uint64_t dropped_full;  /* dropped oldest or refused new because full */
  uint64_t timeouts;      /* pushes that timed out while blocked */
  int64_t held;           /* unrolls waiting */
} replay_traj_stats;
void replay_traj_get_stats(replay_traj *q, replay_traj_stats *out);

#ifdef __cplusplus
}
#endif
#endif
