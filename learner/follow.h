/* SPDX-License-Identifier: Apache-2.0 */
/*
 * learner/follow.h — the store follower of a learner with replay.source store|mixed:
 * a thread that polls the store for experience segments (store.h) by sequence
 * number, checks each against the env's spaces, and inserts its rows into replay.
 *
 *   follow_config fc = {.st = st, .run = "logs", .mem = mem, .first_stream = A * E,
 *                       .nstreams = 16, .limits = lim, .poll_s = 0.2,
 *                       .start_after = STORE_SEG_FIRST, .wait_room = fn, .ctx = L};
 *   follow *f;
 *   if (follow_start(&f, &fc, &err)) return err.code;
 *   follow_stats fs;
 *   follow_stats_get(f, &fs);   // in progress lines
 *   follow_stop(f);
 *
 * With replay_log set it follows another learner's replay log instead (one format for
 * a learner's experience: docs/replay-log.md).
 *
 * Each segment is taken exactly once, in sequence order: the follower keeps the last
 * sequence number it handled and lists only those above it. A damaged segment (CRC,
 * truncation) or one that fails the checks (spec, NaN, action range) is skipped,
 * counted and reported through log with the run, seq and reason; a store that cannot
 * be reached is retried every poll without skipping anything. The segments of one
 * source form one replay stream (continuing episodes across segments); sources get
 * streams first_stream .. first_stream+nstreams-1, the least recently used one being
 * reset and reused when there are more sources than streams.
 *
 * Mixed mode (store_fraction f in (0, 1)): the follower holds a segment back while
 * store rows are above f of all inserted rows, and actors are held back (through
 * follow_admit_actor) while listed segments are being taken and they are above 1 - f,
 * so with segments waiting f of what replay receives comes from the store (within a
 * segment), however slow the store; with fewer, less.
 */
#ifndef SHOAL_LEARNER_FOLLOW_H
#define SHOAL_LEARNER_FOLLOW_H

#include <stdbool.h>
#include <stdint.h>

#include "envs/envs.h"
#include "replay/replay.h"
#include "store/store.h"

enum { FOLLOW_CHUNK = 256 }; /* rows per replay insert (and per rate-limiter wait) */

typedef struct follow_config {
  store *st;                   /* borrowed; must outlive the follower */
  const char *run;             /* whose segments (copied) */
  replay *mem;                 /* borrowed */
  int first_stream, nstreams;  /* replay streams reserved for store sources */
  store_segment_limits limits; /* the env's spaces (bound arrays borrowed) */
  bool prioritized;            /* pass a segment's priority column to replay */
  double poll_s;               /* seconds between polls when nothing is new */
  uint64_t start_after;        /* the last seq already taken, or STORE_SEG_FIRST */
  double store_fraction;       /* mixed: f in (0, 1); 0: no cap (store only) */
  /* Follow the run's replay log (learner/replay_log.h: what another Ape-X learner
   * accepted) instead of its experience segments: each batch record's env groups go in
   * as segments of source "a<actor>-e<env>", checked as any other; priority
   * checkpoints are skipped. start_after is then a log segment seq. */
  bool replay_log;
  /* The learner's rate limiter: 0 when n rows may be inserted now, nonzero to be asked
   * again (it may wait a while itself). It must return 0 once its owner is shutting
   * down, as a segment is always inserted whole. NULL: never waits. */
  int (*wait_room)(void *ctx, uint32_t n);
  void (*log)(void *ctx, const char *msg); /* NULL: stderr */
  /* How rows go into replay, and how a stream is reset for a new source: NULL for
   * replay_insert / replay_reset_stream on mem. The learner's own record them in its
   * replay log, so a resumed learner gets the store's rows back too. */
  int (*insert)(void *ctx, int stream, const replay_steps *st, shoal_error *err);
  int (*reset)(void *ctx, int stream, shoal_error *err);
  void *ctx;
} follow_config;

typedef struct follow_stats {
  uint64_t segments;          /* segments inserted */
  uint64_t rows;              /* rows inserted */
  uint64_t rejected_segments; /* damaged or failing the checks, skipped */
  uint64_t rejected_rows;     /* rows of those (when the header could be read) */
  uint64_t store_errors;      /* failed polls (store unreachable, I/O), retried */
  uint64_t last_seq;          /* the last seq taken (STORE_SEG_FIRST: none yet) */
  uint64_t held_back;         /* polls on which mixed mode held a segment back */
} follow_stats;

typedef struct follow follow;

/* Starts the thread. On success *out is the follower (caller stops it with
 * follow_stop). SHOAL_EINVAL for a bad config. */
int follow_start(follow **out, const follow_config *cfg, shoal_error *err);

/* Copies the counters. Thread-safe; can't fail. */
void follow_stats_get(follow *f, follow_stats *out);

/* Stops the thread (a segment being inserted goes in whole; one held back is left for
 * the next start), joins it and frees f. NULL is a no-op. */
void follow_stop(follow *f);

/* The last seq a previous learner of run_self took, from its metric "store/seq" (the
 * learner writes it with each progress line), for a resumed learner; STORE_SEG_FIRST
 * when there is none. Can't fail: a store error gives STORE_SEG_FIRST. */
uint64_t follow_resume_after(store *st, const char *run_self);

/* Mixed mode, on an rpc thread before n actor rows go in: while the follower is
 * taking listed segments and the actors are past their share (1 - f of inserted rows),
 * waits up to 2 s for the store's rows. Returns 0 (go on) or SHOAL_EFULL (the actor
 * resends later). f NULL or not mixed: 0 at once. */
int follow_admit_actor(follow *f, uint32_t n);

/* Tells the thread to stop taking segments and to insert nothing more, without waiting
 * for it (the learner calls it before it releases its rate limiter to shut down). */
void follow_halt(follow *f);

/* Stops f (follow_stop), then prints its final counts as one JSON line on stdout,
 * {"event":"store","segments":S,"rows":R,"rejected_segments":J,"rejected_rows":JR,
 * "last_seq":Q}, and queues its metrics on w at step. f NULL: nothing. */
void follow_finish(follow *f, store_writer *w, const char *run, int64_t step);

/* Writes ,"store_segments":S,"store_rows":R,"store_rejected":J,"store_seq":Q for a
 * progress line into buf (cap bytes); "" when f is NULL. Can't fail. */
void follow_progress_json(follow *f, char *buf, size_t cap);

/* Queues the metrics store/segments, store/rows, store/rejected and store/seq (what a
 * resumed learner continues after) of run at step. f NULL: nothing. */
void follow_metrics(follow *f, store_writer *w, const char *run, int64_t step, double time);

#endif
