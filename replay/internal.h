/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay/internal.h — the transition memory's layout, shared by memory.c (insert,
 * sample, priorities) and save.c (save, load). Not a public header.
 */
#ifndef SHOAL_REPLAY_INTERNAL_H
#define SHOAL_REPLAY_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "replay/limiter.h"
#include "replay/replay.h"

enum {
  REPLAY__MAX_STACK = 32, /* frame_stack limit */
  REPLAY__CHUNK = 32,     /* draws resolved together by replay_sample */
  REPLAY__FAN = 8,        /* sum tree fan-out: 8 doubles, one cache line */
  REPLAY__MAX_LEVELS = 12 /* 8^11 > 2^31 leaves */
};

/* A candidate step resolved by replay_sample: the items of its stacked frames and
 * of its bootstrap observation's, its n-step return. */
typedef struct replay__resolved {
  uint64_t frames[REPLAY__MAX_STACK];  /* (k) oldest first */
  uint64_t nframes[REPLAY__MAX_STACK]; /* (k) of the bootstrap item */
  uint64_t boot;                       /* o_{t+m}'s item, 0 without obs */
  double ret, disc;
  int m;
} replay__resolved;

/* Slot flags. */
enum {
  REPLAY__TAIL = 1,  /* a final observation, not a step: never sampled */
  REPLAY__TERM = 2,  /* the step terminated its episode */
  REPLAY__TRUNC = 4, /* the step was truncated (bootstraps) */
};

/* Per slot, in one 32-byte record so that following links touches one cache line
 * per step (consecutive steps of a stream sit in consecutive slots). A slot holds
 * the item with sequence number s at s % cap. */
typedef struct replay__meta {
  _Atomic uint64_t seq;  /* 0 while empty or being written; published (release) last */
  _Atomic uint64_t link; /* (owner seq mod 2^32) << 32 | distance to the successor;
                            distance 0 while the successor has not arrived */
  uint64_t prev;         /* the previous step of the episode, 0 at its start */
  float reward;
  uint8_t flags; /* REPLAY__ */
} replay__meta;

/* The stream table: one entry per stream id, on its own cache line. `last` is the
 * sequence number of the stream's latest step when its episode is still open, 0
 * when the next step starts an episode. */
typedef struct replay__stream {
  _Atomic uint64_t last;
  atomic_int busy; /* 1 while an insert of this stream runs */
  char pad[64 - sizeof(uint64_t) - sizeof(int)];
} replay__stream;

struct replay {
  replay_config cfg;
  char obs_name[REPLAY_NAME_MAX];   /* cfg.obs_column points here */
  int obs;                          /* index of the obs column, or -1 */
  int k;                            /* frame stack */
  int64_t cap;                      /* slots */
  int64_t slack;                    /* writer_slack resolved */
  size_t item[REPLAY_MAX_COLUMNS];  /* bytes of one item per column */
  uint8_t *col[REPLAY_MAX_COLUMNS]; /* (cap, item) per column */

  replay__meta *meta; /* (cap) */

  _Atomic uint64_t head; /* next sequence number to reserve; starts at 1 */
  /* The reader's pin: while a sample or save reads, items with seq >= pin must not
   * be overwritten; UINT64_MAX when no reader. */
  _Atomic uint64_t pin;
  /* Writers that wait for the pin sleep on pin_epoch (a futex), which the reader
   * bumps, waking them, whenever it releases or raises the pin. */
  _Atomic uint32_t pin_epoch;
  atomic_int pin_waiters;

  replay__stream *streams;   /* (cfg.streams) */
  replay__resolved *scratch; /* (REPLAY__CHUNK) the sampling thread's */

  /* Prioritized: a sum tree and a min tree with fan-out 8, so a node's children
   * share one cache line and a million leaves are 7 levels deep (a binary tree
   * is 20). Level 0 is the root, level depth-1 the cap leaves; node x of level l
   * has children 8x..8x+7 of level l+1. Under tree_lock. Empty slots and tails:
   * sum 0, min +inf. */
  pthread_mutex_t tree_lock;
  int depth;
  int64_t lv_n[REPLAY__MAX_LEVELS]; /* nodes per level */
  double *lsum[REPLAY__MAX_LEVELS]; /* per level, into sum */
  double *lmin[REPLAY__MAX_LEVELS]; /* per level, into mn */
  double *sum;                      /* all levels' sums (NULL: uniform) */
  double *mn;                       /* all levels' minima */
  double max_p;                     /* largest priority seen, starts at 1 */

  _Atomic uint64_t n_steps, n_tails, n_sampled, n_rejected, n_stale, n_waits, wait_ns;
  _Atomic int64_t n_tails_held; /* tails in the ring: added by inserts, less those overwritten */

  /* memory_limit: the columns in one mapped file (spill_len bytes at spill_base), of
   * which the newest `hot` items stay resident; the sampling thread releases the pages
   * of older items once the head has moved `sweep_every` items on (whichever inserting
   * thread sees it first). */
  int spill_fd;
  uint8_t *spill_base;
  size_t spill_len;
  int64_t hot, sweep_every;
  _Atomic uint64_t swept_at, n_sweeps;
  uint8_t *gather_buf; /* the sampling thread's: the frames between a cold stack and its
                        * bootstrap stack, read past in the same call (fetch_span) */

  replay_limiter *lim; /* the rate limiter (cfg.samples_per_insert > 0), else NULL */
};

static inline int64_t replay__slot(const struct replay *r, uint64_t s) {
  return (int64_t)(s % (uint64_t)r->cap);
}

/* Resolves the first sequence number a reader may touch given head h. */
static inline uint64_t replay__low(const struct replay *r, uint64_t h, int64_t slack) {
  int64_t lo = (int64_t)h + slack - r->cap;
  return lo < 1 ? 1 : (uint64_t)lo;
}

/* Pins items from the current head minus capacity (plus slack) so writers do not
 * overwrite them; returns [*lo, *hi) the readable sequence numbers. */
void replay__pin(struct replay *r, int64_t slack, uint64_t *lo, uint64_t *hi);
void replay__unpin(struct replay *r);
/* After the pin was raised or released: wakes writers waiting for it. */
void replay__pin_moved(struct replay *r);

/* Sets the priorities of slots [a, b) (no wrap) from pr (sum-tree values, 0 for
 * none) and fixes the trees. Caller holds tree_lock. */
void replay__tree_set(struct replay *r, int64_t a, int64_t b, const double *pr);
/* Recomputes every inner node from the leaves (after a load). */
void replay__tree_rebuild(struct replay *r);
static inline double *replay__leaves(const struct replay *r) { return r->lsum[r->depth - 1]; }
static inline double *replay__leaves_min(const struct replay *r) { return r->lmin[r->depth - 1]; }
/* Empties the memory (after a failed load). No other call may run. */
void replay__clear(struct replay *r);

#endif
