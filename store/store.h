/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/store.h — the experiment store: runs, parameter snapshots, replay segments,
 * metrics and sweep trials, behind one interface opened by URI. The URIs it takes:
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
 *   if (store_open(&st, "file:///data/runs", &err)) return err.code;
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
 * For the training path use store_writer (store_writer.h): a thread with a bounded
 * queue so the trainer never waits on disk or network. Experience segments are in
 * store_segments.h, datasets and media in store_data.h; this header includes both.
 */
#ifndef SHOAL_STORE_H
#define SHOAL_STORE_H

#include <stdbool.h>
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

/* Replaces run id's config text (a learner that trains with other values than the
 * stored ones records them, so the store shows what trained). SHOAL_ENOENT when there
 * is no such run. */
int store_run_set_config(store *st, const char *id, const char *config, shoal_error *err);

/* ---- the run's lease: one learner per run ---------------------------------
 * A learner takes its run's lease before it writes anything and gives it back when it
 * ends. The holder is a process (host name and pid). On the file store the lease is a
 * lock file in the run's folder held with flock(2) for as long as the process lives
 * (the kernel lets go of it when the process dies, SIGKILL included). On MongoDB it is
 * a document of the `leases` collection, taken with an insert (or findAndModify over
 * a lapsed one) and renewed by store_lease_renew before `expires`; a holder that stops
 * renewing loses it at `expires`, and one on this host whose pid is gone loses it at
 * once. */
typedef struct store_lease_holder {
  char host[64];
  int64_t pid;
  double started; /* Unix time the holder took the lease */
  double expires; /* MongoDB: Unix time it lapses unless renewed; file: 0 (while alive) */
  bool stopping;  /* the holder is writing its last snapshot and will let go */
} store_lease_holder;

/* Takes run's lease for this process, for ttl_s seconds (MongoDB; > 0). A lease this
 * process holds already is taken again. SHOAL_EEXIST when another live process holds
 * it: *holder (may be NULL) then says who, and err names it. */
int store_lease_take(store *st, const char *run, double ttl_s, store_lease_holder *holder,
                     shoal_error *err);
/* Renews this process's lease on run for ttl_s more seconds and records whether it is
 * stopping. SHOAL_ESTATE when it no longer holds it (another process took it over). */
int store_lease_renew(store *st, const char *run, double ttl_s, bool stopping, shoal_error *err);
/* Gives run's lease back (when this process holds it; else nothing happens). */
int store_lease_release(store *st, const char *run, shoal_error *err);

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

/* Hands trial id, held by worker, back to the queue now (pending, to be claimed again
 * as a new attempt): a worker stopped before the trial finished. SHOAL_EPERM when
 * worker does not hold the claim; SHOAL_EEXIST when the trial was completed already. */
int store_trial_release(store *st, const char *sweep, const char *id, const char *worker,
                        shoal_error *err);

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

#ifdef __cplusplus
}
#endif

/* The topics below are part of the store too; store.h includes them so every caller
 * keeps one include. A file that uses one topic alone may include just its header. */
#include "store/store_data.h"
#include "store/store_segments.h"
#include "store/store_writer.h"

#endif
