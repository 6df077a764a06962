/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli/supervise.h — the process supervisor behind `shoal run` (libuv): starts child
 * programs, restarts a crashed one with exponential backoff, hands each line a child
 * writes on stdout to a callback (the learner's progress lines), prefixes what children
 * write on stderr with their name, and stops everything in order on request or on
 * SIGINT/SIGTERM: the lowest stop_order first (actors), then the next (the learner,
 * which writes its final snapshot), with SIGKILL after a grace period.
 *
 * Exit statuses: a child spec names its final_status, the status with which its program
 * says "I would fail the same way however often I am restarted" (shoal's learners and
 * actors: RUN_EXIT_FATAL of run/run.h, after printing why). Such an exit is never
 * restarted and stops the whole run as failed, whichever child it was. Any other
 * non-zero status or a signal is a crash, restarted when the spec says so.
 *
 * Children run with SHOAL_SUPERVISED=1 in their environment. A terminal's Ctrl-C goes
 * to its whole foreground process group, children included: a shoal program that sees
 * SHOAL_SUPERVISED ignores SIGINT and leaves the stop to the supervisor, which then stops
 * the children in stop_order with SIGTERM. A child with a prestop_signal gets it when the
 * stop begins and others stop before it: `shoal run`'s learner (SIGUSR1) then ends its
 * training but still takes what the actors send until its own SIGTERM. (A learner under
 * `shoal run` also announces a stop rule and waits for that SIGTERM, so that the actors
 * stop first: learner/runtime.h.)
 *
 *   sup *s = sup_create(&err);
 *   sup_add(s, &(sup_child_spec){"learner", learner_argv, .essential = true, .stop_order = 1},
 *           &err);
 *   sup_add(s, &(sup_child_spec){"actor-0", actor_argv, .restart = true}, &err);
 *   sup_set_callbacks(s, on_line, on_tick, 1.0, ud);
 *   int rc = sup_run(s, &err);     // returns when every child has exited for good
 *   sup_destroy(s);
 */
#ifndef SHOAL_CLI_SUPERVISE_H
#define SHOAL_CLI_SUPERVISE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/shoal.h"

typedef struct sup sup;

typedef struct sup_child_spec {
  const char *name;   /* copied */
  char *const *argv;  /* NULL-terminated; argv[0] is the program (PATH is searched); copied */
  bool restart;       /* restart after an abnormal exit (signal or non-zero status) */
  bool essential;     /* when it exits for good, the supervisor stops the rest */
  int stop_order;     /* lower stops first */
  int max_restarts;   /* 0: unlimited */
  bool deferred;      /* not started by sup_run: sup_launch starts it */
  int final_status;   /* non-zero: an exit with this status is for good: never restarted,
                       * and the run stops as failed (see the top of this file) */
  int prestop_signal; /* non-zero: sent when a stop begins if others stop before this child
                       * (a learner: stop training, keep taking what the actors send) */
} sup_child_spec;

/* on_line: a complete line (without its newline) that child `index` wrote on stdout;
 * borrowed for the call. on_tick: every tick_s seconds while the loop runs. Either may
 * be NULL. */
typedef void (*sup_line_fn)(void *ud, int index, const char *name, const char *line);
typedef void (*sup_tick_fn)(void *ud);

typedef struct sup_child_stats {
  int restarts;    /* times restarted after a crash */
  int last_status; /* exit status of the last exit, -1 when it died by a signal */
  int last_signal; /* the signal of the last exit, 0 if none */
  bool running;
  int64_t pid; /* of the running incarnation, 0 when none */
} sup_child_stats;

/* Creates a supervisor with its own libuv loop. Caller owns it; NULL on error. */
sup *sup_create(shoal_error *err);
/* Frees it; only after sup_run returned (or without running it). */
void sup_destroy(sup *s);
/* Adds a child, started when sup_run starts. Returns its index or a negative code. */
int sup_add(sup *s, const sup_child_spec *spec, shoal_error *err);
void sup_set_callbacks(sup *s, sup_line_fn on_line, sup_tick_fn on_tick, double tick_s, void *ud);
/* Restart backoff: first delay, cap, and the run time after which the delay resets. */
void sup_set_backoff(sup *s, double first_s, double max_s, double reset_after_s);
/* Grace period between SIGTERM and SIGKILL when stopping. Default 10 s. */
void sup_set_grace(sup *s, double grace_s);
/* Child index's stop needs extra_s seconds more than the grace (a learner whose stop
 * plays a final evaluation says how long that takes): its stop phase waits for the
 * grace plus the most any child in it asked for. Callable from the callbacks, also while
 * that phase is stopping (the bound then counts from the phase's start). 0 or
 * SHOAL_ERANGE (no such child), SHOAL_EINVAL (extra_s not in [0, 86400]). */
int sup_extend_grace(sup *s, int index, double extra_s, shoal_error *err);
/* Handles SIGINT and SIGTERM sent to this process by stopping the children (default
 * on). A second signal kills them at once (SIGKILL): sup_killed then says so. A stop
 * under way for another reason when the first arrives (sup_stop, an essential child's
 * exit) is not a signal's and goes on in order. */
void sup_set_handle_signals(sup *s, bool on);

/* Starts the children and runs until every child has exited for good. Returns 0 when
 * every essential child exited with status 0 (or the stop was requested; a stop by
 * signal may still have killed them: sup_killed), else SHOAL_ECLOSED, with err saying
 * which child failed and how; SHOAL_ENOMEM when it cannot start. */
int sup_run(sup *s, shoal_error *err);
/* After sup_run: whether a second signal killed the children (SIGKILL) instead of
 * letting them stop: what they would have written at their stop is missing. */
bool sup_killed(const sup *s);
/* After sup_run: the signal (SIGINT, SIGTERM) that asked for the stop, 0 when none did. */
int sup_stop_signal(const sup *s);
/* Asks for an orderly stop; callable from the callbacks (and thus from the loop's
 * thread only). failed marks the run as failed (sup_run then returns an error). */
void sup_stop(sup *s, bool failed, const char *why);
/* Starts a deferred child, from a callback once the loop runs (e.g. actors once the
 * learner says where it listens). argv, when not NULL, replaces the child's (copied).
 * SHOAL_ESTATE when it is not a deferred child that has not started, or when stopping. */
int sup_launch(sup *s, int index, char *const *argv, shoal_error *err);
/* Replaces the argv used for a child's later starts and restarts (copied). */
int sup_set_argv(sup *s, int index, char *const *argv, shoal_error *err);
/* Sends a signal to a running child (tests use it to crash actors). */
int sup_signal(sup *s, int index, int signum);
/* Current figures of child index. */
int sup_child_stats_get(const sup *s, int index, sup_child_stats *out);
int sup_child_count(const sup *s);

#endif
