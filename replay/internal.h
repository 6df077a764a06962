/*
 * replay/internal.h — the transition memory's layout, shared by memory.c (insert,
 * sample, priorities) and save.c (save, load). Not a public header.
 */
#ifndef SHOAL_REPLAY_INTERNAL_H
#define SHOAL_REPLAY_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "replay/replay.h"

/* Slot flags. */
enum {
  REPLAY__TAIL = 1,  /* a final observation, not a step: never sampled */
  REPLAY__TERM = 2,  /* the step terminated its episode */
  REPLAY__TRUNC = 4, /* the step was truncated (bootstraps) */
};

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

  /* Per slot. A slot holds the item with sequence number s at s % cap. seq is 0
   * while empty or being written, and is published (release) after the data. */
  _Atomic uint64_t *seq;  /* (cap) */
  uint64_t *prev;         /* (cap) the previous step of the episode, 0 at its start */
  _Atomic uint64_t *link; /* (cap) (owner seq mod 2^32) << 32 | distance to successor;
                             distance 0 while the successor has not arrived */
  float *reward;          /* (cap) */
  uint8_t *flags;         /* (cap) REPLAY__ */

  _Atomic uint64_t head; /* next sequence number to reserve; starts at 1 */
  /* The reader's pin: while a sample or save reads, items with seq >= pin must not
   * be overwritten; UINT64_MAX when no reader. */
  _Atomic uint64_t pin;

  replay__stream *streams; /* (cfg.streams) */

  /* Prioritized: a sum tree and a min tree over P >= cap leaves, heap order (root 1,
   * leaves P..2P-1), under tree_lock. Empty slots and tails: sum 0, min +inf. */
  pthread_mutex_t tree_lock;
  int64_t P;
  double *sum;  /* (2P) */
  double *mn;   /* (2P) */
  double max_p; /* largest priority seen, starts at 1 */

  _Atomic uint64_t n_steps, n_tails, n_sampled, n_rejected, n_stale, n_waits;
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

/* Sets the priorities of slots [a, b) (no wrap) from pr (sum-tree values, 0 for
 * none) and fixes the trees. Caller holds tree_lock. */
void replay__tree_set(struct replay *r, int64_t a, int64_t b, const double *pr);
/* Empties the memory (after a failed load). No other call may run. */
void replay__clear(struct replay *r);

/* CRC32C (Castagnoli), as in iSCSI and ext4: crc = replay__crc32c(crc, buf, n),
 * starting from 0. Uses SSE4.2 when the CPU has it. */
uint32_t replay__crc32c(uint32_t crc, const void *buf, size_t n);
uint32_t replay__crc32c_soft(uint32_t crc, const void *buf, size_t n); /* tables only */

#endif
