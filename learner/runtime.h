/* SPDX-License-Identifier: Apache-2.0 */
/*
 * learner/runtime.h — the one learner runtime: everything a learner does that is not
 * its algorithm. It parses the program's arguments and loads the run's config, opens
 * the store (lazily: through an outage it trains on) and its writer, resumes from the
 * latest snapshot, serves shoal.v1.Learner (ingest goes to the algorithm), publishes
 * parameters, writes snapshots, evaluates on a thread of its own, applies live tuning,
 * reports progress and Status, and stops cleanly on SIGINT/SIGTERM or a stop rule.
 * The algorithm (learner/apex.c: prioritized replay and DQN; learner/onpolicy.c: the
 * trajectory FIFO, IMPALA and PPO) is the small table below.
 *
 *   return lrt_main(argc, argv, &apex_learner);   // a learner program's whole main
 *
 * Threads: rpc threads call on_batch (and the runtime's Status and SetHyperparams);
 * the trainer thread (the program's main thread) calls everything else in the table
 * except eval_run, which the evaluation thread calls on its own evaluator.
 *
 * stdout carries one JSON object a line: {"event":"listening",...} first, then
 * {"event":"progress",...} every learner.log_every_s, {"event":"hparam",...} on live
 * changes, and {"event":"done",...} last. Exit status 0 after a clean stop, 1 on an
 * error a restart may cure, 2 for bad arguments, RUN_EXIT_FATAL (run/run.h) for one no
 * restart cures: a config error, a config its run's snapshots do not fit, an env the
 * algorithm cannot play, an unusable snapshot, a run another learner holds.
 *
 * Under a supervisor (SHOAL_SUPERVISED=1 in the environment, cli/supervise.h) the learner
 * ignores SIGINT (the supervisor acts on a terminal's Ctrl-C), and neither a stop rule (a
 * limit, a solve) nor SIGUSR1 (the supervisor's stop has begun) ends it at once: training
 * ends, it prints {"event":"stopping","reason":...,"stop_needs_s":S}, takes the batches its
 * actors still send while the supervisor stops them, and stops on the SIGTERM that
 * follows (or by itself after 45 s). S is how long its own stop may take beyond writing
 * its snapshot: the evaluation in flight and, at a budget, a final one (the slowest
 * evaluation so far, with half again; a bound of 120 s before the first), which the
 * supervisor adds to its grace.
 */
#ifndef SHOAL_LEARNER_RUNTIME_H
#define SHOAL_LEARNER_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "rpc/rpc.h"
#include "store/store.h"

typedef struct lrt lrt;

/* The live-tunable keys every learner has (indices into the hp array an algorithm's
 * step receives); an algorithm's own keys follow them, from LRT_HP_COMMON on. */
enum { LRT_HP_PUBLISH, LRT_HP_SNAP, LRT_HP_MAX_STEPS, LRT_HP_MAX_S, LRT_HP_SOLVE, LRT_HP_COMMON };

/* What the algorithm reports for progress lines, Status and metrics. */
typedef struct lrt_figs {
  int64_t env_steps;    /* env steps taken in (the resumed run's included) */
  int64_t held;         /* items in its memory (replay transitions, FIFO unrolls) */
  int64_t held_steps;   /* env steps among them (replay: held less the episode-end tails); -1:
                           the items are not steps (unrolls) */
  uint64_t bad_batches; /* batches it refused */
  double loss;          /* the last update's loss, NAN before one */
} lrt_figs;

/* An algorithm: a learner's state behind void *a, made by the descriptor's create. */
typedef struct lrt_algo {
  const char *name;            /* "apex", "impala" or "ppo": the listening line's algo */
  const char *device;          /* "cpu" or "cuda": where it trains */
  const char *const *hp_names; /* its live-tunable keys (config names), after the runtime's */
  int hp_count;
  int hp_lr;            /* index in hp_names of the key that must stay > 0, or -1 */
  int samples_per_item; /* env steps in one rpc item (the progress line's samples_s) */
  rpc_spec spec;        /* the columns actors push (borrowed strings live in a) */
  const char *arch;     /* the network as JSON for Params.arch (owned by a), or NULL */

  /* Ingest, on rpc threads: checks a batch whole and takes it in, or refuses it
   * (SHOAL_EINVAL: the client drops it; SHOAL_EFULL: the client resends later). */
  int (*on_batch)(void *a, const rpc_batch *b, shoal_error *err);

  /* The trainer thread. step: at most one update; may wait a short while for data
   * (bounded: 100 ms) and sets *trained when an update ran. hp holds the live values
   * in effect: the runtime's LRT_HP_* then the algorithm's. A non-zero return stops
   * the learner with the error. */
  int (*step)(void *a, const double *hp, bool *trained, shoal_error *err);
  /* A live change of the algorithm's key k (0-based in hp_names) beyond its value in
   * hp; NULL when values are all it needs. */
  int (*apply_hp)(void *a, int k, double v, shoal_error *err);
  void (*figs)(void *a, lrt_figs *f);
  /* Whether an evaluation is due now (asked after every step; one due while the last
   * still runs is started when that one ends, the trainer waiting for it). */
  bool (*eval_due)(void *a, double now_s, int64_t env_steps, const double *hp, double return100,
                   uint64_t episodes);
  /* Whether this run evaluates at all under hp: then a run that ends at its budget
   * evaluates what it ends with, even before its first scheduled evaluation. NULL: only a
   * run that has evaluated does. */
  bool (*evaluates)(void *a, const double *hp);
  /* The published blob (borrowed, valid until the next step) and its layout (a new
   * array the runtime frees; layout NULL: the blob alone, for an evaluation). */
  int (*params)(void *a, const float **blob, size_t *n, rpc_param_entry **layout, int *nl,
                shoal_error *err);
  /* A snapshot's bytes (a new buffer the runtime hands to the store writer). */
  int (*snapshot)(void *a, uint8_t **buf, size_t *len, shoal_error *err);
  /* After each snapshot the runtime writes (NULL: nothing). */
  void (*after_snapshot)(void *a);
  /* --resume: the latest snapshot's bytes and meta into the algorithm's state. */
  int (*resume)(void *a, const uint8_t *buf, size_t len, const store_snapshot_meta *m,
                shoal_error *err);
  /* After resume, before the server starts: what more the algorithm opens (the replay
   * log, the store follower); resumed says --resume was given. NULL: nothing. */
  int (*start)(void *a, bool resumed, shoal_error *err);
  /* Counters beyond the runtime's for Status, into out[*k..cap). */
  void (*status)(void *a, rpc_counter *out, int *k, int cap);
  /* Extra fields of a progress line (",\"key\":value..." into buf) and metrics at it;
   * dt is the seconds since the last line. */
  void (*progress)(void *a, char *buf, size_t cap, double dt, int64_t env_steps, double t_unix);
  /* A stop rule was met and the learner waits for its actors to stop (under a
   * supervisor): batches still come in, and none may wait for training any more. NULL:
   * nothing to do. halt follows. */
  void (*drain)(void *a);
  /* The stop, before the rpc server goes: no insert may wait any more. */
  void (*halt)(void *a);
  /* The stop, after the final snapshot: what the algorithm flushes (the replay log),
   * its extra fields of the done line into buf; false when something was not kept. */
  bool (*finish)(void *a, char *buf, size_t cap);
  /* Evaluation, on the evaluation thread: an evaluator of its own (its networks and
   * envs), given the published blob of a version, returns the mean return. */
  void *(*eval_create)(void *a, shoal_error *err);
  int (*eval_run)(void *ev, const float *blob, size_t n, uint64_t seed, double *mean,
                  shoal_error *err);
  void (*eval_destroy)(void *ev);
  void (*destroy)(void *a);
} lrt_algo;

/* A learner program: its name (messages), its schema and checks, and its algorithm's
 * constructor (fills *algo and returns its state, or NULL with err set). */
typedef struct lrt_program {
  const char *prog;
  const cfg_key *(*schema)(int *n);
  int (*check)(const config *cfg, shoal_error *err);
  void *(*create)(lrt *rt, lrt_algo *algo, shoal_error *err);
} lrt_program;

/* Runs a learner program to its end; returns the exit status (a fatal error prints
 * "<prog>: what: message" and exits 1; bad arguments exit 2). */
int lrt_main(int argc, char **argv, const lrt_program *p);

/* ---- for algorithms ---- */

/* What every algorithm's state begins with: the runtime's config, run id, store and
 * writer (borrowed: the runtime owns them), and the run's actor count. */
typedef struct lrt_base {
  lrt *rt;
  config *cfg;
  const char *run;
  store *st;
  store_writer *wr;
  int actors;
} lrt_base;

/* A zeroed state of size bytes whose first member is an lrt_base, filled from rt (the
 * algorithm's create calls it; its destroy frees the state with free()). NULL with
 * SHOAL_ENOMEM. */
void *lrt_new(lrt *rt, size_t size, shoal_error *err);
/* The parameter version published last (read by ingest for staleness). */
int64_t lrt_version(lrt *rt);
/* A finished episode's return for return100 and the episode count; any thread. */
void lrt_episode(lrt *rt, double ret);
/* Prints "<prog>: what: message" and exits 1 (an error a restart may cure). */
void lrt_die(lrt *rt, const char *what, const shoal_error *err) __attribute__((noreturn));
/* The same for an error no restart cures (a config that cannot work, a snapshot that does
 * not fit): gives the run's lease back and exits RUN_EXIT_FATAL (run/run.h). */
void lrt_fatal(lrt *rt, const char *what, const shoal_error *err) __attribute__((noreturn));
/* Prints "<prog>: message" on stderr (a note; the learner goes on). */
void lrt_note(lrt *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Wall time in seconds since the epoch (metrics' time stamps). */
double lrt_unix_now(void);

#endif
