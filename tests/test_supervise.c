/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_supervise.c — the `shoal run` supervisor with real child processes
 * (/bin/sh scripts): lines, restarts with backoff, ordered stop, grace kill. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cli/supervise.h"

typedef struct seen {
  char lines[64][64];
  int n;
  int ticks;
  sup *s;
  int stop_after_ticks;
} seen;

static void on_line(void *ud, int index, const char *name, const char *line) {
  seen *w = ud;
  if (w->n < 64) snprintf(w->lines[w->n++], 64, "%s:%s", name, line);
}

static void on_tick(void *ud) {
  seen *w = ud;
  if (++w->ticks == w->stop_after_ticks) sup_stop(w->s, false, "test stop");
}

static int add_sh(sup *s, const char *name, const char *script, bool restart, bool essential,
                  int order, int max_restarts) {
  char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
  sup_child_spec spec = {name, argv, restart, essential, order, max_restarts};
  shoal_error err = {0};
  int idx = sup_add(s, &spec, &err);
  assert_true(idx >= 0);
  return idx;
}

static sup *make(seen *w, double tick_s) {
  shoal_error err = {0};
  sup *s = sup_create(&err);
  assert_non_null(s);
  memset(w, 0, sizeof *w);
  w->s = s;
  sup_set_callbacks(s, on_line, on_tick, tick_s, w);
  sup_set_handle_signals(s, false);
  sup_set_backoff(s, 0.01, 0.05, 30);
  return s;
}

static void test_lines_in_order_and_clean_finish(void **state) {
  seen w;
  sup *s = make(&w, 0);
  add_sh(s, "a", "echo one; echo two; printf 'three'", false, true, 0, 0);
  shoal_error err = {0};
  assert_int_equal(sup_run(s, &err), 0);
  assert_int_equal(w.n, 3);
  assert_string_equal(w.lines[0], "a:one");
  assert_string_equal(w.lines[1], "a:two");
  assert_string_equal(w.lines[2], "a:three"); /* a last line without newline counts */
  sup_child_stats st;
  assert_int_equal(sup_child_stats_get(s, 0, &st), 0);
  assert_int_equal(st.last_status, 0);
  assert_int_equal(st.restarts, 0);
  sup_destroy(s);
}

static void test_crash_restarts_with_limit_then_fails(void **state) {
  seen w;
  sup *s = make(&w, 0);
  add_sh(s, "crashy", "echo up; exit 3", true, true, 0, 3);
  shoal_error err = {0};
  assert_int_equal(sup_run(s, &err), SHOAL_ECLOSED);
  assert_non_null(strstr(err.msg, "crashy exited with status 3"));
  sup_child_stats st;
  sup_child_stats_get(s, 0, &st);
  assert_int_equal(st.restarts, 3);
  assert_int_equal(w.n, 4); /* started once and restarted three times */
  sup_destroy(s);
}

/* A child that exits with its final_status would fail the same way again: it is not
 * restarted, and the run stops as failed even when it is not essential (an actor whose
 * config cannot work), the others stopped with it. */
static void test_final_status_is_not_restarted_and_fails_the_run(void **state) {
  seen w;
  sup *s = make(&w, 0.1);
  w.stop_after_ticks = 50; /* bounded: a run that goes on is stopped after 5 s */
  const char *loop = "trap 'echo term; exit 0' TERM; echo start; while :; do sleep 0.02; done";
  int learner = add_sh(s, "learner", loop, true, true, 1, 0);
  char *argv[] = {"/bin/sh", "-c", "echo up; sleep 0.2; exit 3", NULL};
  sup_child_spec spec = {"actor", argv, true, false, 0, 0, false, 3};
  shoal_error err = {0};
  int actor = sup_add(s, &spec, &err);
  assert_true(actor >= 0);
  uint64_t t0 = shoal_now_ns();
  assert_int_equal(sup_run(s, &err), SHOAL_ECLOSED);
  assert_true((double)(shoal_now_ns() - t0) * 1e-9 < 5.0);
  assert_non_null(strstr(err.msg, "actor exited with status 3"));
  assert_non_null(strstr(err.msg, "no restart cures"));
  sup_child_stats st;
  sup_child_stats_get(s, actor, &st);
  assert_int_equal(st.restarts, 0);
  assert_int_equal(st.last_status, 3);
  sup_child_stats_get(s, learner, &st);
  assert_int_equal(st.restarts, 0);
  assert_int_equal(st.last_status, 0); /* stopped by the supervisor's SIGTERM, cleanly */
  sup_destroy(s);
}

/* Children learn that a supervisor stops them (SHOAL_SUPERVISED=1), whatever this
 * process's environment says. */
static void test_children_know_they_are_supervised(void **state) {
  seen w;
  sup *s = make(&w, 0);
  setenv("SHOAL_SUPERVISED", "0", 1);
  add_sh(s, "a", "echo \"sv=$SHOAL_SUPERVISED\"", false, true, 0, 0);
  shoal_error err = {0};
  assert_int_equal(sup_run(s, &err), 0);
  unsetenv("SHOAL_SUPERVISED");
  assert_int_equal(w.n, 1);
  assert_string_equal(w.lines[0], "a:sv=1");
  sup_destroy(s);
}

/* When a stop begins, a child that stops after others gets its prestop_signal (a learner
 * ends its training while its actors stop), then SIGTERM in its turn; the first to stop
 * gets none. */
static void test_prestop_signal_goes_to_those_that_stop_later(void **state) {
  seen w;
  sup *s = make(&w, 0.1);
  w.stop_after_ticks = 3;
  const char *loop =
      "trap 'echo usr1' USR1; trap 'echo term; exit 0' TERM; echo start; "
      "while :; do sleep 0.02; done";
  char *argv[] = {"/bin/sh", "-c", (char *)loop, NULL};
  sup_child_spec actor = {"actor", argv, true, false, 0, 0, false, 0, SIGUSR1};
  sup_child_spec learner = {"learner", argv, true, true, 1, 0, false, 0, SIGUSR1};
  shoal_error err = {0};
  assert_true(sup_add(s, &actor, &err) >= 0);
  assert_true(sup_add(s, &learner, &err) >= 0);
  assert_int_equal(sup_run(s, &err), 0);
  int learner_usr1 = -1, learner_term = -1, actor_usr1 = -1, actor_term = -1;
  for (int i = 0; i < w.n; i++) {
    if (!strcmp(w.lines[i], "learner:usr1")) learner_usr1 = i;
    if (!strcmp(w.lines[i], "learner:term")) learner_term = i;
    if (!strcmp(w.lines[i], "actor:usr1")) actor_usr1 = i;
    if (!strcmp(w.lines[i], "actor:term")) actor_term = i;
  }
  assert_true(learner_usr1 >= 0);
  assert_true(learner_term > learner_usr1);
  assert_true(learner_term > actor_term);
  assert_true(actor_term >= 0);
  assert_int_equal(actor_usr1, -1);
  sup_destroy(s);
}

typedef struct killer {
  seen w;
  int actor;
  int ticks;
} killer;

static void kill_tick(void *ud) {
  killer *k = ud;
  k->ticks++;
  if (k->ticks == 3) assert_int_equal(sup_signal(k->w.s, k->actor, SIGKILL), 0);
  if (k->ticks == 10) sup_stop(k->w.s, false, "test stop");
}

static void kill_line(void *ud, int index, const char *name, const char *line) {
  killer *k = ud;
  on_line(&k->w, index, name, line);
}

static void test_restart_after_kill_and_ordered_stop(void **state) {
  killer k;
  memset(&k, 0, sizeof k);
  shoal_error err = {0};
  sup *s = sup_create(&err);
  k.w.s = s;
  sup_set_callbacks(s, kill_line, kill_tick, 0.1, &k);
  sup_set_handle_signals(s, false);
  sup_set_backoff(s, 0.01, 0.05, 30);
  const char *loop = "trap 'echo term; exit 0' TERM; echo start; while :; do sleep 0.02; done";
  k.actor = add_sh(s, "actor", loop, true, false, 0, 0);
  add_sh(s, "learner", loop, false, true, 1, 0);
  assert_int_equal(sup_run(s, &err), 0);
  sup_child_stats st;
  sup_child_stats_get(s, k.actor, &st);
  assert_int_equal(st.restarts, 1);
  int actor_starts = 0, actor_term = -1, learner_term = -1;
  for (int i = 0; i < k.w.n; i++) {
    if (!strcmp(k.w.lines[i], "actor:start")) actor_starts++;
    if (!strcmp(k.w.lines[i], "actor:term")) actor_term = i;
    if (!strcmp(k.w.lines[i], "learner:term")) learner_term = i;
  }
  assert_int_equal(actor_starts, 2);
  assert_true(actor_term >= 0);
  assert_true(learner_term > actor_term); /* actors stop before the learner */
  sup_destroy(s);
}

static void test_grace_then_sigkill(void **state) {
  seen w;
  sup *s = make(&w, 0.1);
  w.stop_after_ticks = 2;
  add_sh(s, "stubborn", "trap '' TERM; while :; do sleep 0.02; done", false, true, 0, 0);
  sup_set_grace(s, 0.3);
  shoal_error err = {0};
  uint64_t t0 = shoal_now_ns();
  assert_int_equal(sup_run(s, &err), 0);
  double took = (double)(shoal_now_ns() - t0) * 1e-9;
  sup_child_stats st;
  sup_child_stats_get(s, 0, &st);
  assert_int_equal(st.last_signal, SIGKILL);
  assert_true(took >= 0.45 && took < 5.0);
  sup_destroy(s);
}

/* A stop under way (sup_stop: a run that solved) when the first SIGTERM arrives goes on
 * in order: the child finishes its own stop. Only a second signal kills. */
typedef struct signaller {
  seen w;
  int signals; /* SIGTERMs raised after the stop, one a tick */
} signaller;

static void signal_tick(void *ud) {
  signaller *g = ud;
  int t = ++g->w.ticks;
  if (t == 2) sup_stop(g->w.s, false, "solved");
  if (t >= 3 && t < 3 + g->signals) raise(SIGTERM);
}

/* A "learner" whose stop takes sleep_s once it gets SIGTERM, then says bye. */
static void add_slow_stopper(sup *s, const char *sleep_s) {
  char script[200];
  snprintf(script, sizeof script,
           "trap 'echo term; sleep %s; echo bye; exit 0' TERM; echo start; "
           "while :; do sleep 0.02; done",
           sleep_s);
  add_sh(s, "learner", script, false, true, 0, 0);
}

/* That it finished its stop (status 0, bye said), or was killed before. */
static void assert_stop_ended(sup *s, const seen *w, bool killed) {
  sup_child_stats st;
  sup_child_stats_get(s, 0, &st);
  bool bye = false;
  for (int i = 0; i < w->n; i++) bye |= !strcmp(w->lines[i], "learner:bye");
  if (killed) {
    assert_int_equal(st.last_signal, SIGKILL);
    assert_false(bye);
  } else {
    assert_int_equal(st.last_signal, 0);
    assert_int_equal(st.last_status, 0);
    assert_true(bye);
  }
}

/* A supervisor whose ticks (every 0.1 s) run tick with ud, which begins with its seen. */
static sup *make_ticking(seen *w, sup_tick_fn tick, void *ud, double grace_s) {
  shoal_error err = {0};
  sup *s = sup_create(&err);
  assert_non_null(s);
  w->s = s;
  sup_set_callbacks(s, on_line, tick, 0.1, ud);
  sup_set_grace(s, grace_s);
  return s;
}

static void test_signal_during_a_stop(void **state) {
  for (int signals = 1; signals <= 2; signals++) {
    signaller g;
    memset(&g, 0, sizeof g);
    g.signals = signals;
    shoal_error err = {0};
    sup *s = make_ticking(&g.w, signal_tick, &g, 10);
    /* Takes 0.6 s to stop once told: the signals arrive meanwhile. */
    add_slow_stopper(s, "0.6");
    assert_int_equal(sup_run(s, &err), 0);
    assert_stop_ended(s, &g.w, signals == 2);
    sup_destroy(s);
  }
}

/* A child whose stop takes longer than the grace (a learner playing its final
 * evaluation) says so, and is waited for: told before its phase stops (as `shoal run`
 * does on the learner's {"event":"stopping","stop_needs_s":...}) or while it stops.
 * Without it the grace kills it. */
typedef struct extender {
  seen w;
  int when; /* 0: never, 1: before the stop, 2: once its phase stops */
} extender;

static void extend_tick(void *ud) {
  extender *x = ud;
  int t = ++x->w.ticks;
  shoal_error err = {0};
  if (t == 2 && x->when == 1) assert_int_equal(sup_extend_grace(x->w.s, 0, 2.0, &err), 0);
  if (t == 2) sup_stop(x->w.s, false, "budget");
  if (t == 4 && x->when == 2) assert_int_equal(sup_extend_grace(x->w.s, 0, 2.0, &err), 0);
}

static void test_extended_grace_waits_for_a_long_stop(void **state) {
  for (int when = 0; when <= 2; when++) {
    extender x;
    memset(&x, 0, sizeof x);
    x.when = when;
    shoal_error err = {0};
    sup *s = make_ticking(&x.w, extend_tick, &x, 0.5);
    sup_set_handle_signals(s, false);
    add_slow_stopper(s, "1.2");
    assert_int_equal(sup_run(s, &err), 0);
    assert_stop_ended(s, &x.w, when == 0);
    assert_int_equal(sup_extend_grace(s, 3, 1.0, &err), SHOAL_ERANGE);
    assert_int_equal(sup_extend_grace(s, 0, -1.0, &err), SHOAL_EINVAL);
    sup_destroy(s);
  }
}

static void test_missing_program_is_a_clear_error(void **state) {
  shoal_error err = {0};
  sup *s = sup_create(&err);
  sup_set_handle_signals(s, false);
  char *argv[] = {"/nonexistent/shoal-learner", NULL};
  sup_child_spec spec = {"learner", argv, false, true, 0, 0};
  assert_true(sup_add(s, &spec, &err) >= 0);
  assert_int_equal(sup_run(s, &err), SHOAL_ECLOSED);
  assert_non_null(strstr(err.msg, "cannot start learner"));
  sup_destroy(s);
  s = sup_create(&err);
  assert_int_equal(sup_run(s, &err), SHOAL_EINVAL);
  sup_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lines_in_order_and_clean_finish),
      cmocka_unit_test(test_crash_restarts_with_limit_then_fails),
      cmocka_unit_test(test_restart_after_kill_and_ordered_stop),
      cmocka_unit_test(test_grace_then_sigkill),
      cmocka_unit_test(test_signal_during_a_stop),
      cmocka_unit_test(test_extended_grace_waits_for_a_long_stop),
      cmocka_unit_test(test_missing_program_is_a_clear_error),
      cmocka_unit_test(test_final_status_is_not_restarted_and_fails_the_run),
      cmocka_unit_test(test_children_know_they_are_supervised),
      cmocka_unit_test(test_prestop_signal_goes_to_those_that_stop_later),
  };
  return cmocka_run_group_tests_name("supervise", tests, NULL, NULL);
}
