/*
 * store/store.h — the experiment store: runs, parameter snapshots, replay segments,
 * metrics and sweep trials, behind one interface opened by URI.
 *
 *   file:///abs/dir, file://localhost/abs/dir, file://rel/dir, file:rel/dir or a
 *   plain path (%XX escapes allowed)
 *       the embedded default: one folder per run under DIR, every write atomic
 *       (temporary file, fsync, rename, fsync of the folder); the folder is made if
 *       missing. Option ?sync=always (default: each metrics append is fdatasynced)
 *       or ?sync=never (left to the OS). Layout: see store/file.c. Several processes
 *       may share the folder.
 *   mongodb://[user:password@]host[:port][,host...]/[database][?options]
 *       libmongoc with a connection pool, retryable writes and write concern
 *       majority unless the URI says otherwise (w=1, ...). Database "shoal" when the
 *       URI names none. A password may also come from $SHOAL_STORE_PASSWORD when the
 *       URI names a user without one. Credentials are never printed: every message
 *       shows the URI through store_uri_redact().
 *   NULL or "": $SHOAL_STORE_URI when set, else the folder ./runs.
 *
 *   shoal_error err = {0};
 *   store *st;
 *   if (store_open(&st, "file:///data/runs", &err)) { fprintf(stderr, "%s\n", err.msg); ... }
 *   store_run_create(st, "cartpole-1", yaml_text, STORE_RUN_RUNNING, &err);
 *   store_snapshot_meta m = {.version = 7, .env_steps = 70000, .score = 181.5};
 *   snprintf(m.run, sizeof m.run, "cartpole-1");
 *   store_snapshot_put(st, &m, bytes, nbytes, &err);           // safetensors bytes
 *   void *buf; size_t len;
 *   store_snapshot_get(st, "cartpole-1", STORE_LATEST, &m, &buf, &len, &err); free(buf);
 *   store_close(st);
 *
 * Snapshots and replay segments are opaque bytes to the store. All functions are
 * thread-safe on one store handle; several processes (or machines, with MongoDB) may
 * share one store. Names (run, sweep, trial ids) are 1-63 characters of
 * [A-Za-z0-9._-] starting with a letter or digit; metric names may also hold '/' and
 * ':'. Anything else is refused with SHOAL_EINVAL, so no name can escape the folder.
 *
 * For the training path use store_writer (below): a thread with a bounded queue so
 * the trainer never waits on disk or network.
 */
#ifndef SHOAL_STORE_H
#define SHOAL_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { STORE_NAME_MAX = 64 }; /* buffer size of a name: 63 characters and the NUL */

/* Largest replay segment: what one MongoDB document holds with room for its fields. */
#define STORE_REPLAY_SEGMENT_MAX ((size_t)15 * 1024 * 1024)

typedef struct store store;

/* Opens the store named by uri (see the top of this file). On success *out is a new
 * handle the caller closes with store_close(). On error *out is untouched and err
 * says why: SHOAL_EINVAL for a malformed URI or an unknown scheme, SHOAL_ENOTSUP for
 * mongodb:// in a build without libmongoc, SHOAL_EIO when the folder cannot be made,
 * SHOAL_ENET when the MongoDB deployment cannot be reached. */
int store_open(store **out, const char *uri, shoal_error *err);

/* As store_open, except that a MongoDB deployment that cannot be reached now is not
 * an error: the handle is returned (a line on stderr says so), every call fails with
 * SHOAL_ENET until the deployment answers, and the first call that reaches it makes
 * the indexes. For programs that must keep working through a store outage (the
 * learner, behind store_writer). Other errors are as store_open's. */
int store_open_lazy(store **out, const char *uri, shoal_error *err);

/* Closes the handle and frees it. NULL is a no-op. */
void store_close(store *st);

/* "file" or "mongodb". Can't fail. */
const char *store_backend_name(const store *st);

/* The URI the store was opened with, credentials masked. Borrowed, valid until close. */
const char *store_uri(const store *st);

/* Writes uri into out (cap bytes, always NUL-terminated when cap > 0) with the
 * password of a user:password@ part and the values of options named like
 * password, secret or token replaced by "***". Returns the length of the full
 * redacted text (as snprintf). Can't fail; NULL uri gives "". */
size_t store_uri_redact(char *out, size_t cap, const char *uri);

/* What a store URI names, read as store_open reads it. */
typedef struct store_uri_info {
  const char *backend; /* "file" or "mongodb" (static) */
  int has_scheme;      /* 1 for file:... and mongodb://...; 0 for a plain path */
  char dir[4096];      /* file: the folder, %XX escapes decoded, no trailing '/'; else "" */
  int sync_metrics;    /* file: 1 (?sync=always, the default) or 0 (?sync=never) */
  int password_masked; /* the password of a user:password@ part reads "***" (redacted) */
} store_uri_info;

/* The one reader of store URIs: fills *out with what uri (NULL or "": as store_open)
 * names, opening and touching nothing. SHOAL_EINVAL for an unknown scheme, and for a
 * file URI without a folder, with a bad %-escape or an unknown option; *out is then
 * untouched. A MongoDB URI's hosts and options are libmongoc's to read (store_open
 * reports what it refuses). No program reads a store URI by itself: it asks this, or
 * store_local_dir for the folders of an open store. */
int store_uri_parse(const char *uri, store_uri_info *out, shoal_error *err);

/* Returns 1 when name is a valid run, sweep or trial id, else 0. Can't fail. */
int store_name_valid(const char *name);

/* ---- runs ---------------------------------------------------------------- */

typedef enum store_run_status {
  STORE_RUN_CREATED = 0,
  STORE_RUN_RUNNING = 1,
  STORE_RUN_FINISHED = 2,
  STORE_RUN_FAILED = 3,
  STORE_RUN_STOPPED = 4,
} store_run_status;

/* "created", "running", ...; "unknown" for other values. Can't fail. */
const char *store_run_status_name(int status);

typedef struct store_run {
  char id[STORE_NAME_MAX];
  int status;          /* store_run_status */
  double created_time; /* Unix time, seconds */
  double updated_time; /* Unix time of the last status change */
  char *config;        /* the resolved config text; owned, freed by store_run_clear() */
} store_run;

/* Frees run->config and zeroes the struct. NULL is a no-op. */
void store_run_clear(store_run *run);
/* Clears n runs and frees the array. */
void store_runs_free(store_run *runs, size_t n);

/* Creates run id with its resolved config text (borrowed; may be NULL for none) and
 * status. SHOAL_EEXIST when the run exists already (its data is left alone). */
int store_run_create(store *st, const char *id, const char *config, int status, shoal_error *err);

/* Fills *out (caller clears it with store_run_clear) with run id, its config
 * included. SHOAL_ENOENT when there is no such run; *out is then untouched. */
int store_run_find(store *st, const char *id, store_run *out, shoal_error *err);

/* Lists every run, sorted by id, configs included. On success *out is a new array
 * of *n runs (caller frees it with store_runs_free); *out is NULL when n is 0. */
int store_run_list(store *st, store_run **out, size_t *n, shoal_error *err);

/* Sets the status of run id. SHOAL_ENOENT when there is no such run. */
int store_run_set_status(store *st, const char *id, int status, shoal_error *err);

/* ---- snapshots ----------------------------------------------------------- */

enum {
  STORE_LATEST = -1, /* the snapshot with the highest version */
  STORE_BEST = -2,   /* the snapshot with the highest finite score (ties: higher version) */
};

typedef struct store_snapshot_meta {
  char run[STORE_NAME_MAX];
  int64_t version;   /* >= 0; each version is written once */
  int64_t env_steps; /* environment steps taken when it was made */
  int64_t updates;   /* learner updates when it was made */
  double wall_time;  /* Unix time it was made (0: the store fills in now) */
  double score;      /* an evaluation score, NaN when there is none */
  uint64_t size;     /* bytes; filled in by put, get and list */
} store_snapshot_meta;

/* Stores len bytes (borrowed for the call) as snapshot meta->version of meta->run.
 * The run must exist (SHOAL_ENOENT); SHOAL_EEXIST when it has that version already
 * (a snapshot, once written, never changes). Either the whole snapshot becomes visible or
 * none of it does: a crash mid-write leaves the previous snapshots readable. Sizes
 * above MongoDB's 16 MB document limit work (GridFS). */
int store_snapshot_put(store *st, const store_snapshot_meta *meta, const void *bytes, size_t len,
                       shoal_error *err);

/* Reads snapshot version (>= 0, STORE_LATEST or STORE_BEST) of run. On success
 * *bytes is a new buffer of *len bytes (caller frees it with free()) and *meta, when
 * not NULL, is filled in. SHOAL_ENOENT when there is no such snapshot (or, for
 * STORE_BEST, none with a score); SHOAL_EFORMAT when the stored data is damaged.
 * Outputs are untouched on error. */
int store_snapshot_get(store *st, const char *run, int64_t version, store_snapshot_meta *meta,
                       void **bytes, size_t *len, shoal_error *err);

/* Lists the snapshots of run by ascending version. *out is a new array of *n
 * entries (caller frees it with free()), NULL when n is 0. */
int store_snapshot_list(store *st, const char *run, store_snapshot_meta **out, size_t *n,
                        shoal_error *err);

/* ---- replay segments ----------------------------------------------------- */

/* Appends segment seq of run: len bytes (borrowed; 1..STORE_REPLAY_SEGMENT_MAX) of
 * raw column batches. SHOAL_EEXIST when the run has a segment seq already. */
int store_replay_append(store *st, const char *run, uint64_t seq, const void *bytes, size_t len,
                        shoal_error *err);

/* Called for each segment by store_replay_iter; bytes are borrowed for the call.
 * Return 0 to go on, anything else to stop (store_replay_iter then returns it). */
typedef int (*store_replay_fn)(void *ctx, uint64_t seq, const void *bytes, size_t len);

/* Calls fn for every segment of run with seq >= from_seq, by ascending seq. Returns 0
 * after the last one, fn's nonzero value when it stopped, or an error (SHOAL_EFORMAT
 * for a damaged segment: a bad magic, version, length or checksum). */
int store_replay_iter(store *st, const char *run, uint64_t from_seq, store_replay_fn fn, void *ctx,
                      shoal_error *err);

/* Lists the sequence numbers of run's replay segments, ascending: *seqs is a new
 * array of *n entries (caller frees it with free()), NULL when n is 0. A run without
 * segments gives n = 0; a missing run SHOAL_ENOENT. */
int store_replay_list(store *st, const char *run, uint64_t **seqs, size_t *n, shoal_error *err);

/* Reads replay segment seq of run, checked as by store_replay_iter: *bytes is a new
 * buffer of *len bytes (caller frees it with free()). SHOAL_ENOENT when there is no
 * such segment, SHOAL_EFORMAT when it is damaged. Outputs untouched on error. */
int store_replay_read(store *st, const char *run, uint64_t seq, void **bytes, size_t *len,
                      shoal_error *err);

/* Deletes run's replay segments with seq < below (a replay log's retention).
 * *removed (may be NULL) is how many went. Segments already gone are no error, so
 * concurrent trims are safe. */
int store_replay_trim(store *st, const char *run, uint64_t below, size_t *removed,
                      shoal_error *err);

/* The one way to ask where a store keeps local files: writes the folder of run (or,
 * run NULL, of the whole store) into out (cap bytes). SHOAL_ENOTSUP for a store with
 * no local folder (MongoDB), SHOAL_EINVAL when cap is too small. The folder may not
 * exist yet. No program parses a store URI by itself. */
int store_local_dir(store *st, const char *run, char *out, size_t cap, shoal_error *err);

/* ---- experience segments (store/segments.c) ------------------------------ */

/* Experience written by other systems (a deployed policy's logs, `shoal import`) or
 * by shoal itself, for a learner with replay.source store|mixed to train from. A
 * segment holds N transitions of one source in the columns of an Ape-X SampleBatch:
 *
 *   obs         (N, obs...)  u8 or f32    o_t
 *   action      (N, act...)  i32 or f32   a_t (i32 scalar: discrete; f32: a box)
 *   reward      (N)          f32          r_t, finite
 *   terminated  (N)          u8 0|1       the episode ended in a terminal state
 *   truncated   (N)          u8 0|1       the episode (or this piece of it) was cut
 *   final_obs   (K, obs...)  as obs       o_{t+1} of each of the K rows that ended
 *                                         (terminated or truncated), in row order;
 *                                         absent when K = 0
 *   priority    (N)          f32 >= 0     optional initial |TD| for prioritized replay
 *
 * Rows are in time order: the next observation of row i is obs[i+1] unless row i
 * ended, and then it is its final_obs entry. The segments of one source, by seq,
 * form one stream: a segment whose last row did not end continues in that source's
 * next segment. Each run's segments have sequence numbers 0, 1, 2, ... assigned by
 * store_segment_write in the order they become visible (a writer that loses a race
 * takes the next number), so a reader that has seen seq s has seen every seq < s.
 *
 * Every segment carries a CRC-32 (zlib's polynomial) of its canonical encoding: the
 * file below from byte 16 on. In the file store it is that file,
 * DIR/<run>/segments/<seq, 20 digits>.seg, written atomically (temp file, fsync,
 * link, fsync of the folder):
 *
 *   0   "SHOALSEG"  8 bytes      48  run     64 bytes, NUL-padded
 *   8   version 1   u32          112 source  64 bytes, NUL-padded
 *   12  crc32       u32          176 obs dtype u32, ndim u32, shape 4 x i64
 *   16  seq         u64          216 action dtype u32, ndim u32, shape 4 x i64
 *   24  wall_time   f64 (Unix s) 256 the columns' bytes in the order above, packed
 *   32  rows N      u32
 *   36  ends K      u32          little-endian; dtypes 0 = u8, 1 = i32, 3 = f32 (as
 *   40  flags       u32          replay/rpc); flags bit 0: a priority column follows
 *   44  header size u32 (256)
 *
 * In MongoDB it is a document of collection `segments` (unique index run+seq):
 *   {run, seq, source, wall_time, rows, ends, crc,
 *    spec: {obs: {dtype: "f32", shape: [4]}, action: {dtype: "i32", shape: []}},
 *    obs, action, reward, terminated, truncated, final_obs, [priority]: binary}
 * whose crc is that of the same canonical encoding, so a segment copied between
 * stores keeps it. Readers check magic, version, sizes and CRC (SHOAL_EFORMAT) and
 * never hand out a damaged segment. */

enum {
  STORE_SEG_U8 = 0,
  STORE_SEG_I32 = 1,
  STORE_SEG_F32 = 3,
  STORE_SEG_MAX_DIMS = 4,
  STORE_SEG_HEADER = 256,
};

/* Largest encoded segment, header included: what a MongoDB document holds. */
#define STORE_SEGMENT_MAX ((size_t)15 * 1024 * 1024)

typedef struct store_segment_spec {
  int obs_dtype; /* STORE_SEG_U8 or STORE_SEG_F32 */
  int obs_ndim;  /* 0..4 */
  int64_t obs_shape[STORE_SEG_MAX_DIMS];
  int act_dtype; /* STORE_SEG_I32 (ndim 0: a discrete action) or STORE_SEG_F32 */
  int act_ndim;
  int64_t act_shape[STORE_SEG_MAX_DIMS];
} store_segment_spec;

/* One segment. The column pointers point into buf, which the segment owns; reuse one
 * segment for many reads so a follower allocates only when a segment is larger than
 * any before. Zero-initialise before first use; free with store_segment_free. */
typedef struct store_segment {
  char run[STORE_NAME_MAX];
  char source[STORE_NAME_MAX]; /* who wrote it: a name as for runs */
  uint64_t seq;                /* set by store_segment_write and by reads */
  double wall_time;            /* Unix time it was written (set by write) */
  uint32_t rows;               /* N */
  uint32_t ends;               /* K: rows with terminated or truncated set */
  int has_priority;
  uint32_t crc; /* set by write and by reads */
  store_segment_spec spec;
  void *obs;           /* (N, obs...) */
  void *action;        /* (N, act...) */
  float *reward;       /* (N) */
  uint8_t *terminated; /* (N) */
  uint8_t *truncated;  /* (N) */
  void *final_obs;     /* (K, obs...); NULL when K = 0 */
  float *priority;     /* (N) or NULL */
  unsigned char *buf;  /* owned: the canonical encoding, header first */
  size_t len, cap;     /* bytes used and allocated */
} store_segment;

/* Bytes of dtype (1 or 4); 0 for an unknown one. "u8", "i32", "f32" or "?". */
size_t store_segment_dtype_size(int dtype);
const char *store_segment_dtype_name(int dtype);

/* Bytes of the canonical encoding of a segment with this spec, N rows, K ends and
 * optionally a priority column; 0 when the spec is invalid. Can't fail otherwise. */
size_t store_segment_encoded_bytes(const store_segment_spec *spec, uint32_t rows, uint32_t ends,
                                   int has_priority);

/* Lays seg out for N rows and K ends with spec (copied): sizes seg->buf (growing it
 * only when too small), sets rows, ends, has_priority and the column pointers, which
 * the caller then fills. run, source and seq are left as they are. SHOAL_EINVAL for a
 * bad spec, SHOAL_EFULL when the encoding would exceed STORE_SEGMENT_MAX, SHOAL_ENOMEM.
 * On error seg keeps its buffer but has no columns (rows = 0). */
int store_segment_reserve(store_segment *seg, const store_segment_spec *spec, uint32_t rows,
                          uint32_t ends, int has_priority, shoal_error *err);

/* Frees seg's buffer and zeroes it. NULL is a no-op. */
void store_segment_free(store_segment *seg);

/* What a segment must satisfy to enter a learner's replay: the env's spaces. */
typedef struct store_segment_limits {
  store_segment_spec spec; /* must match exactly */
  int64_t num_actions;     /* discrete: actions are 0..num_actions-1; 0 for a box */
  const float *act_low;    /* box: (act size) bounds or NULL (any finite value) */
  const float *act_high;
} store_segment_limits;

/* Checks seg's contents: the spec equals lim's (SHOAL_ESHAPE), the flags are 0 or 1
 * and K is the number of ended rows (SHOAL_EFORMAT), every float is finite
 * (SHOAL_ENAN: obs, final_obs, reward, box actions, priority), discrete actions are in
 * range and box actions in their bounds (SHOAL_ERANGE), priorities are >= 0
 * (SHOAL_ERANGE). err names the segment, the column and the first bad row. lim may
 * be NULL: everything but the spec match and the action bounds is checked. */
int store_segment_check(const store_segment *seg, const store_segment_limits *lim,
                        shoal_error *err);

/* Appends seg to run's segments: checks its layout (not its values: see
 * store_segment_check), stamps run, wall_time and the CRC, takes the next sequence
 * number (written into seg->seq) and writes it atomically. The run must exist
 * (SHOAL_ENOENT); seg->source must be a valid name (SHOAL_EINVAL). Thread- and
 * process-safe: concurrent writers get distinct, consecutive numbers. */
int store_segment_write(store *st, const char *run, store_segment *seg, shoal_error *err);

/* Lists the sequence numbers of run's segments above after (all: pass
 * STORE_SEG_FIRST) in ascending order, at most cap of them, into seqs; *n is how many.
 * A run without segments gives *n = 0; a missing run SHOAL_ENOENT. */
#define STORE_SEG_FIRST UINT64_MAX /* "after nothing": as after = -1 */
int store_segment_list(store *st, const char *run, uint64_t after, uint64_t *seqs, size_t cap,
                       size_t *n, shoal_error *err);

/* Reads segment seq of run into seg (reusing its buffer) and checks its magic,
 * version, sizes, spec and CRC. SHOAL_ENOENT when there is no such segment,
 * SHOAL_EFORMAT when it is damaged (err names the file or document and what is
 * wrong; seg then holds no columns). Values are not checked: store_segment_check. */
int store_segment_read(store *st, const char *run, uint64_t seq, store_segment *seg,
                       shoal_error *err);

/* ---- metrics ------------------------------------------------------------- */

typedef struct store_metric {
  char run[STORE_NAME_MAX];
  char name[STORE_NAME_MAX]; /* "loss", "eval/return", ... */
  int64_t step;              /* the x axis: env steps or updates, as the caller chooses */
  double time;               /* Unix time of the measurement */
  double value;              /* any double, NaN and infinities included */
} store_metric;

/* Appends n rows (borrowed). Each row's run must exist. All rows are checked before
 * any is written; a file store writes them in one append. */
int store_metrics_append(store *st, const store_metric *rows, size_t n, shoal_error *err);

/* Rows of run with step_min <= step <= step_max and, when name is not NULL, that
 * name, ordered by step and then by the order they were appended. *out is a new array
 * of *n rows (caller frees it with free()), NULL when n is 0. */
int store_metrics_query(store *st, const char *run, const char *name, int64_t step_min,
                        int64_t step_max, store_metric **out, size_t *n, shoal_error *err);

/* ---- trials (hyperparameter sweeps) -------------------------------------- */

typedef enum store_trial_status {
  STORE_TRIAL_PENDING = 0,
  STORE_TRIAL_RUNNING = 1,
  STORE_TRIAL_DONE = 2,
  STORE_TRIAL_FAILED = 3,
} store_trial_status;

const char *store_trial_status_name(int status); /* can't fail */

typedef struct store_trial {
  char sweep[STORE_NAME_MAX];
  char id[STORE_NAME_MAX];
  int status;                  /* store_trial_status */
  char worker[STORE_NAME_MAX]; /* the claiming worker while running or after; "" if none */
  int64_t attempt;             /* how many times it was claimed */
  double created_time;         /* Unix time */
  double heartbeat_time;       /* Unix time of the last claim or heartbeat; 0 if none */
  char *params;                /* the trial's parameters (text); owned */
  char *result;                /* the result text once complete; owned, NULL before */
} store_trial;

/* Frees params and result and zeroes the struct. NULL is a no-op. */
void store_trial_clear(store_trial *t);
void store_trials_free(store_trial *t, size_t n);

/* Adds trial id with params (borrowed text) to sweep, pending. SHOAL_EEXIST if the
 * sweep has it already. */
int store_trial_create(store *st, const char *sweep, const char *id, const char *params,
                       shoal_error *err);

/* Atomically claims one pending trial of sweep for worker (a name as for runs, ':'
 * and '@' also allowed): whatever number of threads, processes or machines call it
 * at once, each trial goes to exactly one of them. Oldest trials first. On success
 * *out (caller clears it) is the claimed trial, running. SHOAL_ENOENT when no trial
 * is pending. */
int store_trial_claim(store *st, const char *sweep, const char *worker, store_trial *out,
                      shoal_error *err);

/* Records that worker is still on trial id. SHOAL_EPERM when worker does not hold
 * the claim (it was requeued as stale, or another worker has it), SHOAL_ENOENT when
 * there is no such trial. */
int store_trial_heartbeat(store *st, const char *sweep, const char *id, const char *worker,
                          shoal_error *err);

/* Completes trial id held by worker with result (borrowed text, may be NULL) and
 * status STORE_TRIAL_DONE or STORE_TRIAL_FAILED. SHOAL_EPERM when worker does not
 * hold the claim; SHOAL_EEXIST when the trial was completed already. */
int store_trial_complete(store *st, const char *sweep, const char *id, const char *worker,
                         int status, const char *result, shoal_error *err);

/* Puts back to pending every running trial of sweep whose last heartbeat is older
 * than max_age_s seconds, so another worker may claim it; its worker's later
 * heartbeat or complete then fails with SHOAL_EPERM. *n_requeued (may be NULL) is
 * how many were put back. */
int store_trial_requeue_stale(store *st, const char *sweep, double max_age_s, size_t *n_requeued,
                              shoal_error *err);

/* Fills *out (caller clears it) with trial id. SHOAL_ENOENT when missing. */
int store_trial_get(store *st, const char *sweep, const char *id, store_trial *out,
                    shoal_error *err);

/* Lists the trials of sweep by creation order. *out is a new array (caller frees it
 * with store_trials_free), NULL when n is 0. */
int store_trial_list(store *st, const char *sweep, store_trial **out, size_t *n, shoal_error *err);

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

/* ==== the data hub: streamed datasets and media (store/dataset.c, store/media.c) ==== */

/* A dataset is N records of fixed-size fields (an image, a label, ...) kept in chunks
 * of chunk_records records, record-major (record i of a chunk at i * record_bytes,
 * its fields one after another in little-endian byte order), with a manifest: record
 * count, field names, dtypes and per-record shapes, chunk size, and a CRC-32 per
 * chunk. A dataset appears whole or not at all, and never changes once written.
 *   file:    DIR/_datasets/NAME/manifest.json and chunk-<6 digits>.bin (32-byte header:
 *            magic "SHDSCHNK", version, chunk, records, crc32, payload bytes), built in a
 *            temporary folder renamed into place ("_": no run can be named so)
 *   mongodb: collection datasets {_id: NAME, upload, manifest: {...}} inserted last;
 *            collection dataset_chunks {dataset, upload, chunk, records, crc, data}
 * Reading checks every chunk against the manifest (size, records, CRC) and names the
 * dataset and chunk in the error.
 *
 *   store_dataset_field f[2] = {{"images", STORE_DTYPE_U8, 3, {1, 28, 28}},
 *                               {"labels", STORE_DTYPE_I32, 0, {0}}};
 *   store_dataset_writer *w;
 *   store_dataset_create(st, "fmnist-train", f, 2, 1024, "idx files", &w, &err);
 *   store_dataset_write(w, records, n, &err);            // as often as needed
 *   store_dataset_commit(w, NULL, &err);                 // or store_dataset_abort(w)
 * data/data.h's data_stream reads it back in shuffled batches with bounded memory. */

typedef enum store_dtype {
  STORE_DTYPE_U8 = 1,
  STORE_DTYPE_I8 = 2,
  STORE_DTYPE_I16 = 3,
  STORE_DTYPE_I32 = 4,
  STORE_DTYPE_I64 = 5,
  STORE_DTYPE_F32 = 6,
  STORE_DTYPE_F64 = 7,
} store_dtype;

/* "u8", "i8", "i16", "i32", "i64", "f32", "f64"; NULL for other values. Can't fail. */
const char *store_dtype_name(int dtype);
/* Bytes per element; 0 for an unknown dtype. Can't fail. */
size_t store_dtype_size(int dtype);
/* The dtype named s, or 0 when none. Can't fail. */
int store_dtype_parse(const char *s);

enum {
  STORE_DATASET_FIELDS_MAX = 8,
  STORE_DATASET_NDIM_MAX = 4,
  STORE_FIELD_NAME_MAX = 32, /* buffer size: 31 characters of [A-Za-z0-9._-] and the NUL */
};
/* Largest chunk payload: one MongoDB document with room for its fields. */
#define STORE_DATASET_CHUNK_MAX ((size_t)15 * 1024 * 1024)

typedef struct store_dataset_field {
  char name[STORE_FIELD_NAME_MAX];
  int dtype;                             /* store_dtype */
  int ndim;                              /* 0 (a scalar) .. STORE_DATASET_NDIM_MAX */
  int64_t shape[STORE_DATASET_NDIM_MAX]; /* per record, each >= 1 */
  size_t bytes;                          /* filled in: elements * dtype size */
  size_t offset;                         /* filled in: where the field starts in a record */
} store_dataset_field;

typedef struct store_dataset_info {
  char name[STORE_NAME_MAX];
  uint64_t records;       /* N */
  uint32_t chunk_records; /* records per chunk; the last chunk may hold fewer */
  uint32_t chunks;        /* ceil(N / chunk_records) */
  int nfields;
  store_dataset_field fields[STORE_DATASET_FIELDS_MAX];
  size_t record_bytes; /* sum of the fields' bytes */
  double created_time; /* Unix time of the commit */
  char source[256];    /* free text given at create (where the data came from) */
  uint32_t *crc;       /* (chunks) CRC-32 of each chunk's payload; owned */
  char upload[48];     /* the backend's id of the write that made it (MongoDB's chunks) */
} store_dataset_info;

/* Frees info->crc and zeroes *info. NULL is a no-op. */
void store_dataset_info_clear(store_dataset_info *info);
/* Clears n infos and frees the array. */
void store_dataset_infos_free(store_dataset_info *infos, size_t n);
/* The field called name in info, or NULL. Borrowed. Can't fail. */
const store_dataset_field *store_dataset_field_find(const store_dataset_info *info,
                                                    const char *name);

typedef struct store_dataset_writer store_dataset_writer;

/* Starts dataset name (a name as for runs) with nfields fields (copied; their bytes
 * and offset are computed here) and chunk_records records per chunk (>= 1, with
 * chunk_records * record_bytes <= STORE_DATASET_CHUNK_MAX). source (may be NULL) is
 * kept in the manifest. Nothing is visible until store_dataset_commit. On success *out
 * is a new writer holding one chunk of memory. SHOAL_EEXIST when the dataset exists,
 * SHOAL_EINVAL for bad fields (the message names the field). st is borrowed: it must
 * outlive the writer. */
int store_dataset_create(store *st, const char *name, const store_dataset_field *fields,
                         int nfields, uint32_t chunk_records, const char *source,
                         store_dataset_writer **out, shoal_error *err);

/* Appends n whole records (borrowed; n * record_bytes bytes, record-major). Each full
 * chunk is written out at once, so memory stays at one chunk. On error the writer can
 * only be aborted. */
int store_dataset_write(store_dataset_writer *w, const void *records, size_t n, shoal_error *err);

/* Writes the last chunk and the manifest, making the dataset visible whole, and frees
 * the writer (also on error, after removing what it wrote). *info (may be NULL; caller
 * clears it) gets the manifest. SHOAL_EINVAL for an empty dataset; SHOAL_EEXIST when
 * another writer committed the name first. */
int store_dataset_commit(store_dataset_writer *w, store_dataset_info *info, shoal_error *err);

/* Removes what the writer wrote and frees it. NULL is a no-op. */
void store_dataset_abort(store_dataset_writer *w);

/* Reads the manifest of dataset name into *out (caller clears it). SHOAL_ENOENT when
 * there is no such dataset, SHOAL_EFORMAT for a damaged manifest (the message names
 * the dataset and the fault). */
int store_dataset_info_get(store *st, const char *name, store_dataset_info *out, shoal_error *err);

/* Every dataset, sorted by name. *out is a new array (caller frees it with
 * store_dataset_infos_free), NULL when n is 0. A damaged manifest fails the call. */
int store_dataset_list(store *st, store_dataset_info **out, size_t *n, shoal_error *err);

/* Reads chunk c of the dataset described by info (from store_dataset_info_get) into
 * buf (cap bytes, at least info->chunk_records * info->record_bytes; borrowed) and
 * checks it against the manifest: its length, record count and CRC-32. *records gets
 * the chunk's record count. SHOAL_EFORMAT for a damaged chunk and SHOAL_ENOENT for a
 * missing one, the message naming dataset and chunk; buf's contents are then
 * unspecified. Allocates nothing on the file store (libmongoc allocates a document
 * per read on MongoDB). */
int store_dataset_chunk_read(store *st, const store_dataset_info *info, uint32_t c, void *buf,
                             size_t cap, uint32_t *records, shoal_error *err);

/* Removes dataset name (its manifest first, so readers see it gone, then the chunks).
 * SHOAL_ENOENT when there is no such dataset. */
int store_dataset_delete(store *st, const char *name, shoal_error *err);

/* ---- media: episode recordings and other blobs of a run ---- */

/* Kept per run, never changed once written:
 *   file:    DIR/<run>/media/<name> and <name>.json (the metadata, written second, so a
 *            listing shows only whole items)
 *   mongodb: GridFS bucket media (media.files / media.chunks), filename "<run>/<name>",
 *            the metadata below under metadata; unique index metadata.run+metadata.name.
 * Names are 1-127 characters of [A-Za-z0-9._-] starting with a letter or digit. */
enum { STORE_MEDIA_NAME_MAX = 128 };

typedef struct store_media_meta {
  char run[STORE_NAME_MAX];
  char name[STORE_MEDIA_NAME_MAX];
  char content_type[64]; /* "image/png", "image/apng", "image/gif", ... */
  int64_t version;       /* the snapshot version it shows; -1 when none */
  int64_t episode;       /* the episode's number, 1-based; -1 when none */
  double ret;            /* the episode's return; NaN when none */
  int64_t length;        /* the episode's length in steps; -1 when none */
  int64_t frames;        /* frames in the recording; -1 when not known */
  char env[64];          /* the environment id; "" when none */
  double created_time;   /* Unix time it was stored (put fills it in when 0) */
  uint64_t size;         /* bytes; filled in by put, get and list */
} store_media_meta;

/* Fills *m with "none" values (-1, NaN, "") for the optional fields. Can't fail. */
void store_media_meta_init(store_media_meta *m);

/* Stores len bytes (borrowed; >= 1) as item meta->name of run meta->run, with the
 * metadata. The run must exist (SHOAL_ENOENT); SHOAL_EEXIST when it has that name. */
int store_media_put(store *st, const store_media_meta *meta, const void *bytes, size_t len,
                    shoal_error *err);

/* Reads item name of run: *bytes is a new buffer of *len bytes (caller frees it with
 * free()); *meta (may be NULL) gets its metadata. SHOAL_ENOENT when missing;
 * SHOAL_EFORMAT when its size disagrees with the metadata. Outputs untouched on error. */
int store_media_get(store *st, const char *run, const char *name, store_media_meta *meta,
                    void **bytes, size_t *len, shoal_error *err);

/* The items of run, sorted by name. *out is a new array (caller frees it with free()),
 * NULL when n is 0. */
int store_media_list(store *st, const char *run, store_media_meta **out, size_t *n,
                     shoal_error *err);

/* Returns 1 when name is a valid media name, else 0. Can't fail. */
int store_media_name_valid(const char *name);

/* ==== end of the data hub ==== */

#ifdef __cplusplus
}
#endif
#endif
