/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/store_writer.h — the writer thread in front of a store (store/writer.c), so the
 * trainer never waits on disk or network. Part of store.h, which includes it.
 */
#ifndef SHOAL_STORE_WRITER_H
#define SHOAL_STORE_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the writer thread --------------------------------------------------- */

/* A thread with a bounded queue in front of a store, so the trainer never waits on
 * disk or network. Calls that enqueue take a mutex for a few copies and never block
 * on the store. When the store is slow or down:
 *  - metrics: the queue holds at most queue_rows rows; when it is full, a new row
 *    replaces the newest queued row of the same run and name (counted as
 *    coalesced), or is dropped when no such row is queued (counted as dropped);
 *  - snapshots: only the newest queued snapshot of each run is kept (older ones are
 *    counted as superseded);
 *  - replay segments: at most max_pending_bytes are queued; past that the oldest
 *    waiting segments are dropped to make room for the new one (counted);
 *  - a failed write is retried with backoff (100 ms doubling to 2 s) while it can
 *    succeed later (I/O, network, timeout); other errors drop the item.
 * Every failure is counted by kind (metrics, snapshot, replay, run) and the first of
 * each kind, and the first after a recovery, is logged with the running count. */
typedef struct store_writer store_writer;

typedef void (*store_log_fn)(void *ctx, const char *msg);

typedef struct store_writer_opts {
  size_t queue_rows;        /* metric rows held; 0 = 65536 */
  size_t max_pending_bytes; /* replay bytes held; 0 = 256 MiB */
  store_log_fn log;         /* where messages go; NULL = stderr */
  void *log_ctx;
} store_writer_opts;

enum {
  STORE_KIND_METRICS = 0,
  STORE_KIND_SNAPSHOT,
  STORE_KIND_REPLAY,
  STORE_KIND_RUN,
  STORE_KIND_COUNT
};

typedef struct store_writer_stats {
  uint64_t metrics_written, metrics_coalesced, metrics_dropped;
  uint64_t snapshots_written, snapshots_superseded, snapshots_dropped;
  uint64_t replay_written, replay_dropped;
  uint64_t runs_written, runs_dropped;
  uint64_t errors[STORE_KIND_COUNT]; /* failed store calls, retries included */
  size_t pending_metrics, pending_snapshots, pending_replay, pending_runs;
  size_t pending_bytes;     /* snapshot and replay bytes waiting */
  int last_error;           /* SHOAL_E... of the last failure, 0 if none */
  char last_error_msg[256]; /* its message (credentials masked) */
  int healthy;              /* 1 when no kind's last store call failed */
} store_writer_stats;

/* Starts the writer thread in front of st (borrowed: it must outlive the writer).
 * opts may be NULL for the defaults. On success *out is a new writer. */
int store_writer_create(store_writer **out, store *st, const store_writer_opts *opts,
                        shoal_error *err);

/* Queues one metric row (copied). Never blocks on the store. Returns 0 when queued
 * or coalesced, SHOAL_EFULL when dropped, SHOAL_EINVAL for a bad row, SHOAL_ECLOSED
 * after close. */
int store_writer_metric(store_writer *w, const char *run, const char *name, int64_t step,
                        double time, double value);

/* Queues a snapshot. Takes ownership of bytes (malloc'd; the writer frees it with
 * free(), on error too). A queued snapshot of the same run not yet being written is
 * replaced. Returns 0, SHOAL_EINVAL or SHOAL_ECLOSED. */
int store_writer_snapshot(store_writer *w, const store_snapshot_meta *meta, void *bytes,
                          size_t len);

/* Queues replay segment seq of run. Takes ownership of bytes as above. When the queue
 * would hold more than max_pending_bytes, the oldest waiting segments are dropped
 * (counted in replay_dropped). Returns 0, SHOAL_EFULL (the segment alone is larger
 * than max_pending_bytes: dropped), SHOAL_EINVAL or SHOAL_ECLOSED. */
int store_writer_replay(store_writer *w, const char *run, uint64_t seq, void *bytes, size_t len);

/* Queues a status change of run (run creation is done directly, at start). */
int store_writer_run_status(store_writer *w, const char *run, int status);

/* Copies the counters into *out. Can't fail. */
void store_writer_stats_get(store_writer *w, store_writer_stats *out);

/* Waits up to timeout_s seconds for everything queued so far to be written. Returns
 * 0 when the queue is empty, SHOAL_ETIMEDOUT otherwise. *out (may be NULL) gets the
 * stats as of the return. */
int store_writer_flush(store_writer *w, double timeout_s, store_writer_stats *out);

/* Flushes for up to timeout_s, stops the thread, logs and counts as dropped whatever
 * was not written, fills *out (may be NULL) and frees the writer. Returns 0 when
 * everything was written, SHOAL_EIO otherwise. NULL is a no-op returning 0. */
int store_writer_close(store_writer *w, double timeout_s, store_writer_stats *out);

#ifdef __cplusplus
}
#endif
#endif
