/* SPDX-License-Identifier: Apache-2.0 */
/*
 * learner/replay_log.h — the learner's replay log: every batch the learner accepts,
 * as it was inserted, kept in the store as replay segments (store_replay_append), so
 * that a restarted learner rebuilds its replay, priorities and exactly-once table
 * from the store on either backend, and the run's experience can outlive it.
 * Format: docs/replay-log.md.
 *
 *   rlog_config c = {.st = st, .wr = wr, .run = "cartpole-1", .ncols = 8};  // and cols
 *   rlog *log;
 *   rlog_open(&log, &c, &err);
 *   // an rpc thread, right after the batch went into replay (serialised with the
 *   // other inserts, so the log's item order is the replay's):
 *   rlog_append_batch(log, &rec, &err);
 *   // the trainer thread, now and then:
 *   rlog_append_priorities(log, first_item, n, p, &err);
 *   rlog_retain(log, oldest_item_held);
 *   rlog_close(log, 30.0, &stats);
 *
 * Appending copies the record into the open segment and never waits on the store: a
 * thread of the log seals a segment once it holds segment_bytes or is flush_s old,
 * compresses it (zstd) and hands it to the store_writer, whose bounded queue rides
 * out a slow or absent store. What a crash loses is what was not yet written: the
 * open segment (at most flush_s of batches) and what waits in the writer's queue.
 *
 * Items are numbered across the whole run (item numbers, "G"): every step and every
 * final observation a batch put into replay takes the next number, so a priority
 * checkpoint names items by number and a restore maps them onto the new memory.
 */
#ifndef SHOAL_LEARNER_REPLAY_LOG_H
#define SHOAL_LEARNER_REPLAY_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"
#include "replay/replay.h"
#include "store/store.h"

enum {
  RLOG_MAX_COLS = 12,
  RLOG_COL_NAME = 16, /* column name buffer, NUL included */
  RLOG_HEADER = 80,   /* fixed part of a segment header; column specs follow */
  RLOG_COL_SPEC = 56, /* bytes of one column spec in the header */
};

/* Codecs of a segment body, as stored. */
enum { RLOG_CODEC_NONE = 0, RLOG_CODEC_ZSTD = 1 };

/* One column of the logged batches: its name, dtype (replay_dtype values) and the
 * shape of one row's item. */
typedef struct rlog_column {
  char name[RLOG_COL_NAME];
  uint32_t dtype;
  uint32_t ndim;
  int64_t shape[4];
} rlog_column;

/* Bytes of one row of c; 0 for a bad spec. Can't fail. */
size_t rlog_column_bytes(const rlog_column *c);

/* The actor id of records that hold rows a learner took from the store (its follower):
 * env is then the store stream, incarnation 1 marks a stream reset before the rows. */
#define RLOG_ACTOR_STORE UINT32_MAX

/* A batch as the learner took it: rows of every column, and who sent it. */
typedef struct rlog_batch {
  uint32_t actor;
  uint64_t incarnation, seq;       /* the actor's, for exactly-once */
  uint32_t rows;                   /* rows of each column */
  uint32_t steps;                  /* env steps among them (the rest are final observations) */
  uint64_t items;                  /* replay items the batch took (steps + final observations) */
  const void *cols[RLOG_MAX_COLS]; /* borrowed; rows x the column's row bytes each */
  /* Optional, appending only: a column whose rows are stacks of frames (Atari's
   * 4x84x84) may also be given as its distinct frames, as rpc's frame deduplication
   * delivers them: frames[c] > 0 frames of (row bytes / frame_depth[c]) bytes each at
   * frame_data[c], and frame_index[c] with rows x frame_depth[c] indices into them. The
   * record then keeps each frame once; a reader gets dense rows in cols either way. */
  uint32_t frames[RLOG_MAX_COLS];
  uint32_t frame_depth[RLOG_MAX_COLS];
  const void *frame_data[RLOG_MAX_COLS];
  const uint32_t *frame_index[RLOG_MAX_COLS];
} rlog_batch;

typedef struct rlog_config {
  store *st;        /* borrowed: for trims (appends go through wr) */
  store_writer *wr; /* borrowed: writes the segments */
  const char *run;  /* copied */
  int ncols;        /* 1..RLOG_MAX_COLS */
  rlog_column cols[RLOG_MAX_COLS];
  size_t segment_bytes;     /* raw bytes that seal a segment; 0 = 4 MiB (at most 12 MiB) */
  double flush_s;           /* a segment is sealed at most this old; 0 = 1 s */
  int raw;                  /* 1: bodies stored uncompressed (default: zstd, but a body
                               zstd would not shrink by a sixteenth is stored raw, and
                               so are the next 8 untried) */
  int level;                /* zstd level; 0 = -3 (zstd's fast mode) */
  int keep;                 /* 1: never trim (replay.keep_log) */
  size_t max_pending_bytes; /* sealed raw segments waiting to be compressed; 0 = 256 MiB */
  /* Where the log goes on (from rlog_restore's info; zeros for a new run). */
  uint64_t next_seq, next_item, steps_before;
} rlog_config;

typedef struct rlog_stats {
  uint64_t records, priority_records;
  uint64_t segments_sealed;  /* handed to the store writer */
  uint64_t segments_dropped; /* over max_pending_bytes here, or refused by the writer */
  uint64_t bytes_raw, bytes_stored;
  uint64_t trimmed; /* segments deleted by retention */
  uint64_t trim_errors;
  size_t pending_bytes; /* raw bytes not yet handed to the writer */
  uint64_t next_item;   /* the item number the next logged item gets */
  uint64_t steps;       /* env steps logged, across restarts */
} rlog_stats;

typedef struct rlog rlog;

/* Starts the log's thread. On success *out is a new log (rlog_close frees it). err
 * names a bad column or setting (SHOAL_EINVAL). */
int rlog_open(rlog **out, const rlog_config *cfg, shoal_error *err);

/* Appends one batch record (copied; framed columns as their frames and indices).
 * Thread-safe; call it in the order the batches' items went into replay. Never waits
 * on the store. Returns 0, SHOAL_EINVAL (more bytes than a segment can hold, or a
 * framed column whose depth does not divide its rows or whose index is out of range:
 * not logged, counted as dropped) or SHOAL_ENOMEM. */
int rlog_append_batch(rlog *l, const rlog_batch *b, shoal_error *err);

/* A priority checkpoint: p[i] (as replay_priorities_get gives them, -1: none) of the
 * items numbered first_item + i, copied into segments of their own. Returns 0 or
 * SHOAL_ENOMEM. */
int rlog_append_priorities(rlog *l, uint64_t first_item, uint64_t n, const float *p,
                           shoal_error *err);

/* The item number of the oldest item replay still holds: segments holding only
 * older items (and older priority checkpoints than the newest) are deleted from the
 * store by the log's thread, unless the log keeps everything. Can't fail. */
void rlog_retain(rlog *l, uint64_t oldest_item);

/* The item number the next appended item gets. Can't fail. */
uint64_t rlog_next_item(rlog *l);

void rlog_stats_get(rlog *l, rlog_stats *out);

/* Seals the open segment, waits up to timeout_s for every segment to reach the
 * store writer (the writer's own flush is the caller's), stops the thread and frees
 * the log. Returns 0, or SHOAL_ETIMEDOUT when segments were left (counted as
 * dropped). NULL is a no-op. */
int rlog_close(rlog *l, double timeout_s, rlog_stats *out);

/* ---- reading ----------------------------------------------------------------- */

/* A decoded segment (rlog_decode). Reuse one for many; free with rlog_segment_free. */
typedef struct rlog_segment {
  uint64_t seq;
  uint32_t codec, records, ncols, flags;
  uint64_t first_item, items, steps_before, steps;
  double wall_time;
  rlog_column cols[RLOG_MAX_COLS];
  unsigned char *body; /* owned: the raw body */
  size_t body_len, body_cap;
  unsigned char *rows; /* owned: the dense rows rlog_next rebuilt from frames */
  size_t rows_cap;
} rlog_segment;

enum { RLOG_SEG_PRIORITIES = 1 }; /* flags: the segment is a priority checkpoint */

/* One record of a segment (pointers into the segment's body, or for columns stored
 * as frames into its rows buffer, valid until the next rlog_next on it). */
typedef struct rlog_record {
  uint32_t kind; /* RLOG_REC_BATCH or RLOG_REC_PRIORITIES */
  rlog_batch batch;
  uint64_t first_item, n; /* priorities */
  const float *p;
} rlog_record;

/* Record kinds as rlog_next reports them. A batch stored with framed columns (kind 3
 * in the body) is reported as RLOG_REC_BATCH with its rows rebuilt. */
enum { RLOG_REC_BATCH = 1, RLOG_REC_PRIORITIES = 2 };

/* Reads the fixed header of bytes (a stored segment) without decompressing: seq is
 * the store's. SHOAL_EFORMAT for a bad magic, version or size. */
int rlog_peek(const void *bytes, size_t len, uint64_t seq, rlog_segment *out, shoal_error *err);

/* Decodes a stored segment into seg (reusing its body buffer): header, column specs,
 * the body decompressed and checked against its CRC-32. SHOAL_EFORMAT (err names
 * the segment and the fault), SHOAL_ENOMEM. */
int rlog_decode(const void *bytes, size_t len, uint64_t seq, rlog_segment *seg, shoal_error *err);

/* The record at *pos of seg's body; *pos moves past it. Returns 1 with *rec filled,
 * 0 at the end, SHOAL_EFORMAT (< 0) with err set for a record that does not fit, or
 * SHOAL_ENOMEM (rebuilding a framed column's rows). */
int rlog_next(rlog_segment *seg, size_t *pos, rlog_record *rec, shoal_error *err);

void rlog_segment_free(rlog_segment *seg);

/* ---- restore ----------------------------------------------------------------- */

/* Called for each batch record to restore, oldest first: insert it into replay as
 * when it arrived, setting the exactly-once table. Return 0 to go on, or an error
 * code (restore stops). */
typedef int (*rlog_batch_fn)(void *ctx, const rlog_batch *b, shoal_error *err);

typedef struct rlog_restore_info {
  uint64_t segments, records, items, skipped_segments;
  uint64_t gaps;       /* missing segments (dropped in an outage) among those read */
  uint64_t priorities; /* priorities set from the newest checkpoint */
  uint64_t next_seq;   /* where the log goes on: rlog_config.next_seq ... */
  uint64_t next_item;
  uint64_t steps_total; /* env steps logged: the run's step count */
  /* Items mapped onto the new memory: replay seq = item - item_offset for items
   * numbered >= contiguous_from (after the last gap among the restored ones). */
  uint64_t contiguous_from;
  int64_t item_offset;
  double seconds;
} rlog_restore_info;

/* Rebuilds a replay from run's log: reads the newest segments whose items fill
 * want_items (the replay's capacity), checks that their columns equal cols (ncols of
 * them: SHOAL_ESHAPE otherwise), calls fn for each batch record in order, then sets
 * the priorities of the newest checkpoint on mem (when mem is prioritized; NULL: no
 * priorities). A run without a log restores nothing and returns 0. Damaged segments
 * are SHOAL_EFORMAT. *info is filled in. */
int rlog_restore(store *st, const char *run, const rlog_column *cols, int ncols,
                 uint64_t want_items, replay *mem, rlog_batch_fn fn, void *ctx,
                 rlog_restore_info *info, shoal_error *err);

#endif
