/* SPDX-License-Identifier: Apache-2.0 */
#define _POSIX_C_SOURCE 200809L
#include "cli/supervise.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

extern char **environ;

enum { LINE_MAX_BYTES = 64 * 1024 };

typedef enum child_state {
  CHILD_IDLE = 0, /* not started yet */
  CHILD_RUNNING = 1,
  CHILD_BACKOFF = 2, /* crashed, waiting for its restart timer */
  CHILD_DONE = 3,    /* exited for good */
} child_state;

/* One started process with its two pipes; freed when all three handles are closed,
 * which may be after the child struct moved on to a new incarnation. */
typedef struct incarnation {
  struct sup_child *child;
  uv_process_t proc;
  uv_pipe_t out, err;
  int open_handles;
  bool exited;
  char *line[2]; /* partial lines of stdout and stderr */
  size_t line_len[2];
} incarnation;

typedef struct sup_child {
  struct sup *sup;
  int index;
  char *name;
  char **argv;
  bool restart, essential, deferred;
  int stop_order, max_restarts;
  int final_status;   /* an exit with it is for good */
  int prestop_signal; /* sent when a stop begins, if others stop first */
  child_state state;
  incarnation *inc; /* the running one, or NULL */
  uv_timer_t timer; /* restart backoff */
  double delay_s;
  double stop_extra_s; /* sup_extend_grace: the time its own stop needs beyond the grace */
  uint64_t started_ns;
  sup_child_stats stats;
} sup_child;

struct sup {
  uv_loop_t loop;
  sup_child **children;
  int n, cap;
  sup_line_fn on_line;
  sup_tick_fn on_tick;
  double tick_s;
  void *ud;
  double backoff_first_s, backoff_max_s, backoff_reset_s, grace_s;
  bool handle_signals;
  uv_signal_t sigint, sigterm;
  uv_timer_t tick, grace;
  uint64_t phase_ns; /* when the stop phase whose grace runs began */
  bool stopping, failed, killed, loop_live;
  int signals;     /* SIGINT/SIGTERM received: the second one kills */
  int stop_signal; /* the signal that asked for the stop, 0 when none did */
  char **env;      /* the children's environment: this one's and SHOAL_SUPERVISED=1 */
  int stop_phase;  /* the stop_order being stopped now */
  char why[512];
};

sup *sup_create(shoal_error *err) {
  sup *s = calloc(1, sizeof *s);
  if (!s) {
    shoal_error_set(err, SHOAL_ENOMEM, "supervisor: out of memory");
    return NULL;
  }
  int rc = uv_loop_init(&s->loop);
  if (rc) {
    shoal_error_set(err, SHOAL_EINTERNAL, "supervisor: uv_loop_init: %s", uv_strerror(rc));
    free(s);
    return NULL;
  }
  s->backoff_first_s = 0.2;
  s->backoff_max_s = 10.0;
  s->backoff_reset_s = 30.0;
  s->grace_s = 10.0;
  s->handle_signals = true;
  return s;
}

static void free_child(sup_child *c) {
  if (!c) return;
  free(c->name);
  for (char **a = c->argv; a && *a; a++) free(*a);
  free(c->argv);
  free(c);
}

void sup_destroy(sup *s) {
  if (!s) return;
  /* sup_run returns once every handle is closed; one more run finishes any close
   * still pending, after which the loop must close. */
  uv_run(&s->loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&s->loop);
  SHOAL_ASSERT(rc == 0);
  for (int i = 0; i < s->n; i++) free_child(s->children[i]);
  free(s->children);
  free(s->env);
  free(s);
}

int sup_add(sup *s, const sup_child_spec *spec, shoal_error *err) {
  if (!spec->name || !spec->argv || !spec->argv[0])
    return shoal_error_set(err, SHOAL_EINVAL, "supervisor: a child needs a name and argv");
  if (s->n == s->cap) {
    int ncap = s->cap ? 2 * s->cap : 8;
    sup_child **nc = realloc(s->children, (size_t)ncap * sizeof *nc);
    if (!nc) return shoal_error_set(err, SHOAL_ENOMEM, "supervisor: out of memory");
    s->children = nc;
    s->cap = ncap;
  }
  sup_child *c = calloc(1, sizeof *c);
  int argc = 0;
  while (spec->argv[argc]) argc++;
  if (c) c->argv = calloc((size_t)argc + 1, sizeof *c->argv);
  if (!c || !c->argv || !(c->name = strdup(spec->name))) goto nomem;
  for (int i = 0; i < argc; i++)
    if (!(c->argv[i] = strdup(spec->argv[i]))) goto nomem;
  c->sup = s;
  c->index = s->n;
  c->restart = spec->restart;
  c->essential = spec->essential;
  c->stop_order = spec->stop_order;
  c->max_restarts = spec->max_restarts;
  c->final_status = spec->final_status;
  c->prestop_signal = spec->prestop_signal;
  c->deferred = spec->deferred;
  c->delay_s = s->backoff_first_s;
  s->children[s->n++] = c;
  return c->index;
nomem:
  free_child(c);
  return shoal_error_set(err, SHOAL_ENOMEM, "supervisor: out of memory");
}

void sup_set_callbacks(sup *s, sup_line_fn on_line, sup_tick_fn on_tick, double tick_s, void *ud) {
  s->on_line = on_line;
  s->on_tick = on_tick;
  s->tick_s = tick_s;
  s->ud = ud;
}

void sup_set_backoff(sup *s, double first_s, double max_s, double reset_after_s) {
  s->backoff_first_s = first_s;
  s->backoff_max_s = max_s;
  s->backoff_reset_s = reset_after_s;
  for (int i = 0; i < s->n; i++) s->children[i]->delay_s = first_s;
}

void sup_set_grace(sup *s, double grace_s) { s->grace_s = grace_s; }

/* The grace of the phase being stopped: the default plus the most any of its children
 * said its own stop needs. */
static double phase_grace_s(const sup *s, int phase) {
  double extra = 0;
  for (int i = 0; i < s->n; i++) {
    const sup_child *c = s->children[i];
    if (c->stop_order == phase && c->state == CHILD_RUNNING && c->stop_extra_s > extra)
      extra = c->stop_extra_s;
  }
  return s->grace_s + extra;
}

static void grace_cb(uv_timer_t *t);
static uint64_t ms(double s);

int sup_extend_grace(sup *s, int index, double extra_s, shoal_error *err) {
  if (index < 0 || index >= s->n)
    return shoal_error_set(err, SHOAL_ERANGE, "sup_extend_grace: no child %d", index);
  if (!(extra_s >= 0) || extra_s > 86400)
    return shoal_error_set(err, SHOAL_EINVAL, "sup_extend_grace: %g s outside [0, 86400]", extra_s);
  sup_child *c = s->children[index];
  c->stop_extra_s = extra_s;
  /* Its phase may already be stopping: the timer then runs to the new bound, counted
   * from the phase's start. */
  if (s->stopping && c->stop_order == s->stop_phase && uv_is_active((uv_handle_t *)&s->grace)) {
    double left = phase_grace_s(s, s->stop_phase) - (double)(shoal_now_ns() - s->phase_ns) * 1e-9;
    uv_timer_start(&s->grace, grace_cb, left > 0 ? ms(left) : 0, 0);
  }
  return 0;
}

void sup_set_handle_signals(sup *s, bool on) { s->handle_signals = on; }
int sup_child_count(const sup *s) { return s->n; }

int sup_child_stats_get(const sup *s, int index, sup_child_stats *out) {
  if (index < 0 || index >= s->n) return SHOAL_ERANGE;
  *out = s->children[index]->stats;
  return 0;
}

static uint64_t ms(double s) { return s <= 0 ? 0 : (uint64_t)(s * 1000.0 + 0.5); }

static void inc_handle_closed(uv_handle_t *h) {
  incarnation *inc = h->data;
  if (--inc->open_handles == 0) {
    free(inc->line[0]);
    free(inc->line[1]);
    free(inc);
  }
}

static void deliver_line(incarnation *inc, int which, const char *line) {
  sup_child *c = inc->child;
  sup *s = c->sup;
  if (which == 0) {
    if (s->on_line) s->on_line(s->ud, c->index, c->name, line);
  } else {
    fprintf(stderr, "[%s] %s\n", c->name, line);
  }
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char chunk[16384]; /* one loop thread; read_cb consumes it before the next read */
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  incarnation *inc = st->data;
  int which = (uv_pipe_t *)st == &inc->out ? 0 : 1;
  if (nread < 0) {
    /* EOF or error: deliver a last unterminated line, then close the pipe. */
    if (inc->line_len[which]) {
      inc->line[which][inc->line_len[which]] = 0;
      deliver_line(inc, which, inc->line[which]);
      inc->line_len[which] = 0;
    }
    if (!uv_is_closing((uv_handle_t *)st)) uv_close((uv_handle_t *)st, inc_handle_closed);
    return;
  }
  for (ssize_t i = 0; i < nread; i++) {
    char ch = buf->base[i];
    if (ch == '\n' || inc->line_len[which] == LINE_MAX_BYTES - 1) {
      inc->line[which][inc->line_len[which]] = 0;
      deliver_line(inc, which, inc->line[which]);
      inc->line_len[which] = 0;
      if (ch == '\n') continue;
    }
    inc->line[which][inc->line_len[which]++] = ch;
  }
}

static void start_child(sup_child *c);
static void advance_stop(sup *s);

static void restart_timer_cb(uv_timer_t *t) {
  sup_child *c = t->data;
  if (c->sup->stopping) {
    c->state = CHILD_DONE;
    advance_stop(c->sup);
    return;
  }
  start_child(c);
}

static void maybe_finish(sup *s) {
  for (int i = 0; i < s->n; i++)
    if (s->children[i]->state == CHILD_RUNNING || s->children[i]->state == CHILD_BACKOFF) return;
  /* Everyone is done: close the loop's own handles so uv_run returns. */
  if (!s->loop_live) return;
  s->loop_live = false;
  if (s->tick_s > 0) uv_close((uv_handle_t *)&s->tick, NULL);
  uv_close((uv_handle_t *)&s->grace, NULL);
  if (s->handle_signals) {
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
  }
  for (int i = 0; i < s->n; i++) uv_close((uv_handle_t *)&s->children[i]->timer, NULL);
}

static void exit_cb(uv_process_t *p, int64_t status, int term_signal) {
  incarnation *inc = p->data;
  sup_child *c = inc->child;
  sup *s = c->sup;
  inc->exited = true;
  uv_close((uv_handle_t *)p, inc_handle_closed);
  c->inc = NULL;
  c->stats.running = false;
  c->stats.pid = 0;
  c->stats.last_status = term_signal ? -1 : (int)status;
  c->stats.last_signal = term_signal;
  bool crashed = term_signal != 0 || status != 0;
  double ran_s = (double)(shoal_now_ns() - c->started_ns) * 1e-9;

  if (s->stopping) {
    c->state = CHILD_DONE;
    advance_stop(s);
    return;
  }
  const bool fatal = c->final_status && !term_signal && status == c->final_status;
  if (fatal) {
    /* It would fail the same way again: no restart, and the run fails with it. */
    c->state = CHILD_DONE;
    char why[256];
    snprintf(why, sizeof why, "%s exited with status %lld, an error no restart cures (above)",
             c->name, (long long)status);
    sup_stop(s, true, why);
    return;
  }
  if (crashed && c->restart && (c->max_restarts == 0 || c->stats.restarts < c->max_restarts)) {
    if (ran_s >= s->backoff_reset_s) c->delay_s = s->backoff_first_s;
    if (term_signal)
      fprintf(stderr, "shoal: %s (pid %lld) killed by signal %d; restarting in %.1f s\n", c->name,
              (long long)p->pid, term_signal, c->delay_s);
    else
      fprintf(stderr, "shoal: %s exited with status %lld; restarting in %.1f s\n", c->name,
              (long long)status, c->delay_s);
    c->state = CHILD_BACKOFF;
    c->stats.restarts++;
    /* Jitter of ±20% keeps crashed actors from reconnecting in lockstep. */
    double jitter = 0.8 + 0.4 * ((double)(shoal_now_ns() % 1000) / 1000.0);
    uv_timer_start(&c->timer, restart_timer_cb, ms(c->delay_s * jitter), 0);
    c->delay_s *= 2;
    if (c->delay_s > s->backoff_max_s) c->delay_s = s->backoff_max_s;
    return;
  }
  c->state = CHILD_DONE;
  if (c->essential) {
    char why[256];
    if (crashed) {
      if (term_signal)
        snprintf(why, sizeof why, "%s was killed by signal %d", c->name, term_signal);
      else
        snprintf(why, sizeof why, "%s exited with status %lld", c->name, (long long)status);
    } else {
      snprintf(why, sizeof why, "%s finished", c->name);
    }
    sup_stop(s, crashed, why);
    return;
  }
  maybe_finish(s);
}

static void start_child(sup_child *c) {
  sup *s = c->sup;
  incarnation *inc = calloc(1, sizeof *inc);
  if (inc) {
    inc->line[0] = malloc(LINE_MAX_BYTES);
    inc->line[1] = malloc(LINE_MAX_BYTES);
  }
  if (!inc || !inc->line[0] || !inc->line[1]) {
    if (inc) {
      free(inc->line[0]);
      free(inc->line[1]);
    }
    free(inc);
    c->state = CHILD_DONE;
    sup_stop(s, true, "out of memory starting a child");
    return;
  }
  inc->child = c;
  uv_pipe_init(&s->loop, &inc->out, 0);
  uv_pipe_init(&s->loop, &inc->err, 0);
  inc->out.data = inc->err.data = inc->proc.data = inc;
  inc->open_handles = 2;
  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&inc->out;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&inc->err;
  uv_process_options_t opt = {0};
  opt.exit_cb = exit_cb;
  opt.file = c->argv[0];
  opt.args = c->argv;
  opt.stdio = stdio;
  opt.stdio_count = 3;
  opt.env = s->env;
  int rc = uv_spawn(&s->loop, &inc->proc, &opt);
  if (rc) {
    fprintf(stderr, "shoal: cannot start %s (%s): %s\n", c->name, c->argv[0], uv_strerror(rc));
    /* libuv initialises the process handle even when the spawn fails: close all three. */
    inc->open_handles = 3;
    uv_close((uv_handle_t *)&inc->proc, inc_handle_closed);
    uv_close((uv_handle_t *)&inc->out, inc_handle_closed);
    uv_close((uv_handle_t *)&inc->err, inc_handle_closed);
    c->state = CHILD_DONE;
    char why[256];
    snprintf(why, sizeof why, "cannot start %s: %s", c->name, uv_strerror(rc));
    if (c->essential) sup_stop(s, true, why);
    maybe_finish(s);
    return;
  }
  inc->open_handles = 3;
  c->inc = inc;
  c->state = CHILD_RUNNING;
  c->started_ns = shoal_now_ns();
  c->stats.running = true;
  c->stats.pid = inc->proc.pid;
  uv_read_start((uv_stream_t *)&inc->out, alloc_cb, read_cb);
  uv_read_start((uv_stream_t *)&inc->err, alloc_cb, read_cb);
}

static void grace_cb(uv_timer_t *t) {
  sup *s = t->data;
  for (int i = 0; i < s->n; i++) {
    sup_child *c = s->children[i];
    if (c->state == CHILD_RUNNING && c->stop_order == s->stop_phase && c->inc) {
      fprintf(stderr, "shoal: %s did not stop within %.1f s; killing it\n", c->name,
              phase_grace_s(s, s->stop_phase));
      uv_process_kill(&c->inc->proc, SIGKILL);
    }
  }
}

/* Stops the lowest stop_order that still has running children; when it is empty,
 * moves on to the next. */
static void advance_stop(sup *s) {
  if (!s->stopping) return;
  for (;;) {
    int lowest = 0;
    bool any = false;
    for (int i = 0; i < s->n; i++) {
      sup_child *c = s->children[i];
      if (c->state == CHILD_BACKOFF) {
        uv_timer_stop(&c->timer);
        c->state = CHILD_DONE;
      }
      if (c->state == CHILD_IDLE) c->state = CHILD_DONE;
      if (c->state == CHILD_RUNNING && (!any || c->stop_order < lowest)) {
        lowest = c->stop_order;
        any = true;
      }
    }
    if (!any) {
      maybe_finish(s);
      return;
    }
    if (s->stop_phase == lowest && uv_is_active((uv_handle_t *)&s->grace)) return;
    s->stop_phase = lowest;
    for (int i = 0; i < s->n; i++) {
      sup_child *c = s->children[i];
      if (c->state == CHILD_RUNNING && c->stop_order == lowest && c->inc)
        uv_process_kill(&c->inc->proc, s->killed ? SIGKILL : SIGTERM);
    }
    s->phase_ns = shoal_now_ns();
    uv_timer_start(&s->grace, grace_cb, ms(phase_grace_s(s, lowest)), 0);
    return;
  }
}

void sup_stop(sup *s, bool failed, const char *why) {
  if (failed && !s->failed) {
    s->failed = true;
    snprintf(s->why, sizeof s->why, "%s", why ? why : "stopped after a failure");
  } else if (!s->stopping && why) {
    snprintf(s->why, sizeof s->why, "%s", why);
  }
  if (s->stopping) return;
  s->stopping = true;
  /* Those that stop later hear of the stop now (a learner stops training while its
   * actors stop). */
  int lowest = 0;
  bool any = false;
  for (int i = 0; i < s->n; i++) {
    sup_child *c = s->children[i];
    if (c->state == CHILD_RUNNING && (!any || c->stop_order < lowest))
      lowest = c->stop_order, any = true;
  }
  for (int i = 0; i < s->n; i++) {
    sup_child *c = s->children[i];
    if (c->state == CHILD_RUNNING && c->inc && c->prestop_signal && c->stop_order > lowest)
      uv_process_kill(&c->inc->proc, c->prestop_signal);
  }
  advance_stop(s);
}

int sup_set_argv(sup *s, int index, char *const *argv, shoal_error *err) {
  if (index < 0 || index >= s->n)
    return shoal_error_set(err, SHOAL_ERANGE, "supervisor: no child %d", index);
  sup_child *c = s->children[index];
  int argc = 0;
  while (argv[argc]) argc++;
  if (argc == 0) return shoal_error_set(err, SHOAL_EINVAL, "supervisor: empty argv");
  char **na = calloc((size_t)argc + 1, sizeof *na);
  if (!na) return shoal_error_set(err, SHOAL_ENOMEM, "supervisor: out of memory");
  for (int i = 0; i < argc; i++) {
    if (!(na[i] = strdup(argv[i]))) {
      for (int j = 0; j < i; j++) free(na[j]);
      free(na);
      return shoal_error_set(err, SHOAL_ENOMEM, "supervisor: out of memory");
    }
  }
  for (char **a = c->argv; *a; a++) free(*a);
  free(c->argv);
  c->argv = na;
  return 0;
}

int sup_launch(sup *s, int index, char *const *argv, shoal_error *err) {
  if (index < 0 || index >= s->n)
    return shoal_error_set(err, SHOAL_ERANGE, "supervisor: no child %d", index);
  sup_child *c = s->children[index];
  if (!c->deferred || c->state != CHILD_IDLE || s->stopping || !s->loop_live)
    return shoal_error_set(err, SHOAL_ESTATE, "supervisor: %s cannot be launched now", c->name);
  if (argv) {
    int rc = sup_set_argv(s, index, argv, err);
    if (rc) return rc;
  }
  start_child(c);
  return 0;
}

int sup_signal(sup *s, int index, int signum) {
  if (index < 0 || index >= s->n) return SHOAL_ERANGE;
  sup_child *c = s->children[index];
  if (c->state != CHILD_RUNNING || !c->inc) return SHOAL_ESTATE;
  return uv_process_kill(&c->inc->proc, signum) ? SHOAL_EINVAL : 0;
}

static void signal_cb(uv_signal_t *h, int signum) {
  sup *s = h->data;
  const char *name = signum == SIGINT ? "SIGINT" : "SIGTERM";
  if (s->signals++ == 0 && s->stopping) {
    /* A first signal while a stop is under way for another reason (a run that solved,
     * a child that failed): that stop goes on in order; only a second signal kills. */
    fprintf(stderr, "shoal: %s received; already stopping (again to kill)\n", name);
    return;
  }
  if (s->signals > 1) {
    /* A second Ctrl-C: no more waiting. */
    s->killed = true;
    fprintf(stderr, "shoal: second signal; killing all children\n");
    for (int i = 0; i < s->n; i++)
      if (s->children[i]->state == CHILD_RUNNING && s->children[i]->inc)
        uv_process_kill(&s->children[i]->inc->proc, SIGKILL);
    return;
  }
  fprintf(stderr, "shoal: %s received; stopping (again to kill)\n", name);
  s->stop_signal = signum;
  sup_stop(s, false, signum == SIGINT ? "interrupted" : "terminated");
}

static void tick_cb(uv_timer_t *t) {
  sup *s = t->data;
  if (s->on_tick) s->on_tick(s->ud);
}

bool sup_killed(const sup *s) { return s->killed; }
int sup_stop_signal(const sup *s) { return s->stop_signal; }

/* This process's environment with SHOAL_SUPERVISED=1 (replacing one it may hold). */
static int make_env(sup *s, shoal_error *err) {
  static char mark[] = "SHOAL_SUPERVISED=1";
  size_t n = 0;
  while (environ && environ[n]) n++;
  if (!(s->env = calloc(n + 2, sizeof *s->env)))
    return shoal_error_set(err, SHOAL_ENOMEM, "supervisor: out of memory");
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "SHOAL_SUPERVISED=", 17)) s->env[k++] = environ[i];
  s->env[k] = mark;
  return 0;
}

int sup_run(sup *s, shoal_error *err) {
  if (s->n == 0) return shoal_error_set(err, SHOAL_EINVAL, "supervisor: no children to run");
  int erc = make_env(s, err);
  if (erc) return erc;
  s->loop_live = true;
  uv_timer_init(&s->loop, &s->grace);
  s->grace.data = s;
  if (s->tick_s > 0) {
    uv_timer_init(&s->loop, &s->tick);
    s->tick.data = s;
    uv_timer_start(&s->tick, tick_cb, ms(s->tick_s), ms(s->tick_s));
  }
  if (s->handle_signals) {
    uv_signal_init(&s->loop, &s->sigint);
    uv_signal_init(&s->loop, &s->sigterm);
    s->sigint.data = s->sigterm.data = s;
    uv_signal_start(&s->sigint, signal_cb, SIGINT);
    uv_signal_start(&s->sigterm, signal_cb, SIGTERM);
  }
  for (int i = 0; i < s->n; i++) {
    uv_timer_init(&s->loop, &s->children[i]->timer);
    s->children[i]->timer.data = s->children[i];
  }
  for (int i = 0; i < s->n && !s->stopping; i++)
    if (!s->children[i]->deferred) start_child(s->children[i]);
  if (s->stopping) advance_stop(s);
  uv_run(&s->loop, UV_RUN_DEFAULT);
  if (s->failed) return shoal_error_set(err, SHOAL_ECLOSED, "supervisor: %s", s->why);
  return 0;
}
