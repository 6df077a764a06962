/* SPDX-License-Identifier: Apache-2.0 */
/* The learner runtime (see learner/runtime.h). */
#define _GNU_SOURCE
#include "learner/runtime.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "learner/live_hp.h"
#include "run/run.h"

enum { RETURNS_KEPT = 100, MAX_SETS = 64 };

/* How long a learner under a supervisor waits, after a stop rule, for the SIGTERM that
 * follows its actors' stop (theirs takes at most the supervisor's grace, 30 s). */
static const double AWAIT_STOP_S = 45;
/* What a run's first evaluation may take, said before any has run (stop_needs_s): a bound
 * the supervisor waits up to, not a wait (the learner exits when it is done). */
static const double FIRST_EVAL_BOUND_S = 120;

static const char *const common_hp[LRT_HP_COMMON] = {
    "learner.publish_every", "learner.snapshot_every_s", "run.max_env_steps", "run.max_seconds",
    "run.solve_return"};

/* The evaluation thread's mailbox: the trainer posts a version's blob and that
 * version's snapshot, the thread posts the mean back; the snapshot is stored with it. */
typedef struct eval_box {
  pthread_t th;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  void *ev;
  float *blob;
  size_t n, cap;
  uint64_t seed;
  int64_t version, env_steps, updates;
  uint8_t *snap; /* the evaluated version's snapshot, written with its score */
  size_t snap_len;
  store_snapshot_meta meta;
  bool pending, busy, done, quit;
  double t_busy;    /* when the evaluation in progress began */
  double slowest_s; /* the longest evaluation so far, for the stop's bound */
  double mean;
  int rc;
  shoal_error err;
} eval_box;

struct lrt {
  const lrt_program *p;
  lrt_algo algo;
  void *a;
  config *cfg;
  const char *run, *cfg_path;
  bool resume;
  char record_why[1400]; /* the run's stored config differs: why this one is recorded */
  int actors;
  store *st;
  store_writer *wr;
  rpc_server *srv;
  live_hp live;
  const char *hp_names[LIVE_HP_MAX];
  atomic_bool stopping;

  atomic_int_fast64_t version;
  int64_t version_updates; /* rt->updates when version last changed */
  /* Written by the trainer, read by Status on rpc threads: atomic. */
  _Atomic int64_t updates;
  _Atomic double eval_return;
  int64_t last_snapshot_version, snapshots;
  int64_t eval_version; /* the version the last collected evaluation played */
  int64_t evals;        /* evaluations collected by this learner */
  double best_eval;

  pthread_mutex_t ep_mu;
  double returns[RETURNS_KEPT];
  uint64_t episodes;

  eval_box eval;

  /* The run's lease (store.h): one learner per run. The lease thread renews it; a
   * learner that loses it to another stops. */
  pthread_t lease_th;
  bool lease_started;
  double lease_s;
  atomic_bool lease_stop, lease_lost;
  pthread_mutex_t lease_mu;
  pthread_cond_t lease_cv;
};

static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }
/* SIGUSR1 from a supervisor: its stop has begun (the actors are being stopped). */
static volatile sig_atomic_t stop_begun = 0;
static void on_stop_begun(int sig) { stop_begun = sig; }
/* Started by `shoal run`'s supervisor (cli/supervise.h): it stops this learner, after
 * the actors. */
static bool supervised;

void *lrt_new(lrt *rt, size_t size, shoal_error *err) {
  lrt_base *b = calloc(1, size < sizeof *b ? sizeof *b : size);
  if (!b) {
    shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
    return NULL;
  }
  *b = (lrt_base){rt, rt->cfg, rt->run, rt->st, rt->wr, rt->actors};
  return b;
}
int64_t lrt_version(lrt *rt) { return atomic_load(&rt->version); }

void lrt_die(lrt *rt, const char *what, const shoal_error *err) {
  fprintf(stderr, "%s: %s: %s\n", rt->p->prog, what,
          err->msg[0] ? err->msg : shoal_strerror(err->code));
  exit(1);
}

static void lease_release(lrt *rt);

void lrt_fatal(lrt *rt, const char *what, const shoal_error *err) {
  fprintf(stderr, "%s: %s: %s\n", rt->p->prog, what,
          err->msg[0] ? err->msg : shoal_strerror(err->code));
  /* The run is left to the next learner at once, not after the lease runs out. */
  if (rt->st) lease_release(rt);
  exit(RUN_EXIT_FATAL);
}

void lrt_note(lrt *rt, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", rt->p->prog);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

double lrt_unix_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void lrt_episode(lrt *rt, double ret) {
  pthread_mutex_lock(&rt->ep_mu);
  rt->returns[rt->episodes++ % RETURNS_KEPT] = ret;
  pthread_mutex_unlock(&rt->ep_mu);
}

/* The mean of the last 100 episodes' returns (NAN before one) and the episode count. */
static double return100(lrt *rt, uint64_t *episodes) {
  pthread_mutex_lock(&rt->ep_mu);
  uint64_t n = rt->episodes;
  double s = 0;
  int k = n < RETURNS_KEPT ? (int)n : RETURNS_KEPT;
  for (int i = 0; i < k; i++) s += rt->returns[i];
  pthread_mutex_unlock(&rt->ep_mu);
  *episodes = n;
  return k ? s / k : NAN;
}

static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stdout, fmt, ap);
  va_end(ap);
  fputc('\n', stdout);
  fflush(stdout);
}

/* A number for a JSON line: NaN and infinities become null. */
static const char *jnum(char *buf, size_t cap, double v) {
  if (!isfinite(v)) return "null";
  snprintf(buf, cap, "%.3f", v);
  return buf;
}

/* ---- rpc callbacks ------------------------------------------------------------- */

static int on_batch(void *user, const rpc_batch *b, shoal_error *err) {
  lrt *rt = user;
  return rt->algo.on_batch(rt->a, b, err);
}

/* Failed store calls so far (the writer's, retries included), and whether the store
 * works now. */
static uint64_t store_errors(lrt *rt, int *healthy) {
  store_writer_stats ws;
  store_writer_stats_get(rt->wr, &ws);
  uint64_t n = 0;
  for (int k = 0; k < STORE_KIND_COUNT; k++) n += ws.errors[k];
  *healthy = ws.healthy;
  return n;
}

static void on_status(void *user, rpc_counter *out, int *n) {
  lrt *rt = user;
  int healthy;
  const uint64_t store_errs = store_errors(rt, &healthy);
  lrt_figs f;
  rt->algo.figs(rt->a, &f);
  uint64_t episodes;
  return100(rt, &episodes);
  struct {
    const char *name;
    double v;
  } figs[] = {{"env_steps", (double)f.env_steps},   {"updates", (double)rt->updates},
              {"replay_held", (double)f.held},      {"episodes", (double)episodes},
              {"eval_return", rt->eval_return},     {"bad_batches", (double)f.bad_batches},
              {"store_errors", (double)store_errs}, {"store_healthy", (double)healthy}};
  int k = 0;
  for (size_t i = 0; i < sizeof figs / sizeof *figs && k < *n; i++, k++) {
    snprintf(out[k].name, sizeof out[k].name, "%s", figs[i].name);
    out[k].value = figs[i].v;
  }
  if (rt->algo.status) rt->algo.status(rt->a, out, &k, *n);
  live_hp_counters(&rt->live, out, &k, *n);
  *n = k;
}

static int on_hyperparams(void *user, const rpc_hyperparam *h, int n, uint32_t *applied,
                          shoal_error *err) {
  lrt *rt = user;
  return live_hp_request(&rt->live, h, n, applied, err);
}

/* A live change: the runtime's keys need nothing beyond their value. */
static int apply_hp(void *user, int k, double v, shoal_error *err) {
  lrt *rt = user;
  if (k < LRT_HP_COMMON || !rt->algo.apply_hp) return 0;
  return rt->algo.apply_hp(rt->a, k - LRT_HP_COMMON, v, err);
}

/* ---- parameters and snapshots --------------------------------------------------- */

static void publish(lrt *rt) {
  const float *blob;
  size_t n;
  rpc_param_entry *layout = NULL;
  int nl = 0;
  shoal_error err = {0};
  if (rt->algo.params(rt->a, &blob, &n, &layout, &nl, &err) ||
      rpc_server_set_params(rt->srv, atomic_load(&rt->version), RPC_F32, blob, n * sizeof *blob,
                            layout, nl, &err))
    lrt_die(rt, "publishing parameters", &err);
  free(layout);
}

/* Gives the current parameters a version of their own when updates were made since the
 * last one (publish_every > 1 leaves some unpublished), and publishes it while the
 * server runs: whatever is evaluated or stored under a version is what actors got under
 * it. Returns the version. */
static int64_t version_current(lrt *rt) {
  if (rt->updates != rt->version_updates) {
    rt->version_updates = rt->updates;
    atomic_fetch_add(&rt->version, 1);
    if (rt->srv) publish(rt);
  }
  return atomic_load(&rt->version);
}

static void fill_meta(lrt *rt, store_snapshot_meta *m, int64_t version, int64_t env_steps,
                      int64_t updates, double score) {
  memset(m, 0, sizeof *m);
  snprintf(m->run, sizeof m->run, "%s", rt->run);
  m->version = version;
  m->env_steps = env_steps;
  m->updates = updates;
  m->wall_time = lrt_unix_now();
  m->score = score;
}

/* The current parameters and learner state into the store, once per version, with the
 * score of their own evaluation if they had one (another version's would mislead
 * `shoal eval --best` and a resume). */
static void snapshot(lrt *rt, int64_t env_steps) {
  int64_t v = version_current(rt);
  const double score = v == rt->eval_version ? rt->eval_return : NAN;
  if (v <= rt->last_snapshot_version) return;
  uint8_t *buf = NULL;
  size_t len = 0;
  shoal_error err = {0};
  if (rt->algo.snapshot(rt->a, &buf, &len, &err)) {
    lrt_note(rt, "snapshot: %s", err.msg);
    return;
  }
  rt->last_snapshot_version = v;
  store_snapshot_meta meta;
  fill_meta(rt, &meta, v, env_steps, rt->updates, score);
  /* The writer takes the buffer; a full queue keeps only the newest snapshot. */
  store_writer_snapshot(rt->wr, &meta, buf, len);
  rt->snapshots++;
  if (rt->algo.after_snapshot) rt->algo.after_snapshot(rt->a);
}

static void resume(lrt *rt) {
  store_snapshot_meta meta;
  void *bytes;
  size_t len;
  shoal_error err = {0};
  int rc = store_snapshot_get(rt->st, rt->run, STORE_LATEST, &meta, &bytes, &len, &err);
  if (rc == SHOAL_ENOENT) return;
  if (rc) lrt_die(rt, "resume: latest snapshot", &err);
  /* A snapshot that does not fit the network (or is damaged) fails again on every
   * restart. */
  if (rt->algo.resume(rt->a, bytes, len, &meta, &err)) lrt_fatal(rt, "resume: snapshot", &err);
  free(bytes);
  atomic_store(&rt->version, meta.version);
  rt->updates = rt->version_updates = meta.updates;
  rt->last_snapshot_version = meta.version;
  if (isfinite(meta.score)) rt->eval_return = rt->best_eval = meta.score;
  /* The run's best is its best snapshot's score (`shoal eval --best`), which may be an
   * older one's than the latest. */
  store_snapshot_meta *metas = NULL;
  size_t n = 0;
  if (store_snapshot_list(rt->st, rt->run, &metas, &n, &err) == 0) {
    for (size_t i = 0; i < n; i++)
      if (isfinite(metas[i].score) && metas[i].score > rt->best_eval)
        rt->best_eval = metas[i].score;
    free(metas);
  }
  rt->eval_version = meta.version;
  lrt_note(rt, "resumed run %s at version %lld, %lld env steps", rt->run, (long long)meta.version,
           (long long)meta.env_steps);
}

/* ---- evaluation, on its own thread ---------------------------------------------- */

static void *eval_main(void *arg) {
  shoal_thread_name("shoal-eval");
  lrt *rt = arg;
  eval_box *e = &rt->eval;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    while (!e->pending && !e->quit) pthread_cond_wait(&e->cv, &e->mu);
    if (e->quit) break;
    e->pending = false;
    e->busy = true;
    e->t_busy = shoal_now_s();
    pthread_mutex_unlock(&e->mu);
    /* The blob is the thread's while busy: the trainer posts no other. */
    double mean = NAN;
    shoal_error err = {0};
    int rc = rt->algo.eval_run(e->ev, e->blob, e->n, e->seed, &mean, &err);
    pthread_mutex_lock(&e->mu);
    const double took = shoal_now_s() - e->t_busy;
    if (took > e->slowest_s) e->slowest_s = took;
    e->mean = mean;
    e->rc = rc;
    e->err = err;
    e->busy = false;
    e->done = true;
    pthread_cond_broadcast(&e->cv); /* a trainer waiting for it (eval_wait) */
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

static void eval_start(lrt *rt) {
  eval_box *e = &rt->eval;
  shoal_error err = {0};
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  if (!(e->ev = rt->algo.eval_create(rt->a, &err))) lrt_die(rt, "evaluation", &err);
  if (pthread_create(&e->th, NULL, eval_main, rt)) {
    shoal_error_set(&err, SHOAL_ENOMEM, "cannot start the evaluation thread");
    lrt_die(rt, "evaluation", &err);
  }
  e->started = true;
}

/* Whether the evaluation thread is free for the next version. */
static bool eval_idle(lrt *rt) {
  eval_box *e = &rt->eval;
  pthread_mutex_lock(&e->mu);
  bool idle = !e->pending && !e->busy && !e->done;
  pthread_mutex_unlock(&e->mu);
  return idle;
}

/* Waits for the evaluation in progress to end (its result is then collected). */
static void eval_wait(lrt *rt) {
  eval_box *e = &rt->eval;
  pthread_mutex_lock(&e->mu);
  while (e->pending || e->busy) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

/* Posts the current version for evaluation (the thread is idle). */
static void eval_post(lrt *rt, int64_t env_steps, uint64_t seed) {
  eval_box *e = &rt->eval;
  const float *blob;
  size_t n;
  shoal_error err = {0};
  if (rt->algo.params(rt->a, &blob, &n, NULL, NULL, &err))
    lrt_die(rt, "evaluation parameters", &err);
  if (n > e->cap) {
    float *b = realloc(e->blob, n * sizeof *b);
    if (!b) {
      shoal_error_set(&err, SHOAL_ENOMEM, "out of memory");
      lrt_die(rt, "evaluation parameters", &err);
    }
    e->blob = b;
    e->cap = n;
  }
  memcpy(e->blob, blob, n * sizeof *blob);
  free(e->snap);
  e->snap = NULL;
  const int64_t v = version_current(rt);
  if (rt->algo.snapshot(rt->a, &e->snap, &e->snap_len, &err)) {
    lrt_note(rt, "snapshot: %s", err.msg);
    e->snap = NULL;
  }
  pthread_mutex_lock(&e->mu);
  e->n = n;
  e->seed = seed;
  e->version = v;
  e->env_steps = env_steps;
  e->updates = rt->updates;
  e->pending = true;
  pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

/* A finished evaluation: recorded, and its snapshot stored with the score. Returns
 * true when it reached run.solve_return (solve != 0). */
static bool eval_collect(lrt *rt, double solve) {
  eval_box *e = &rt->eval;
  pthread_mutex_lock(&e->mu);
  bool done = e->done;
  e->done = false;
  pthread_mutex_unlock(&e->mu);
  if (!done) return false;
  if (e->rc) lrt_die(rt, "evaluation", &e->err);
  double m = e->mean;
  rt->eval_return = m;
  if (m > rt->best_eval) rt->best_eval = m;
  store_writer_metric(rt->wr, rt->run, "eval_return", e->env_steps, lrt_unix_now(), m);
  if (e->snap && e->version > rt->last_snapshot_version) {
    store_snapshot_meta meta;
    fill_meta(rt, &meta, e->version, e->env_steps, e->updates, m);
    store_writer_snapshot(rt->wr, &meta, e->snap, e->snap_len); /* takes the buffer */
    e->snap = NULL;
    rt->last_snapshot_version = e->version;
    rt->snapshots++;
    if (rt->algo.after_snapshot) rt->algo.after_snapshot(rt->a);
  }
  rt->eval_version = e->version;
  rt->evals++;
  return solve != 0 && m >= solve;
}

static void eval_stop(lrt *rt) {
  eval_box *e = &rt->eval;
  if (!e->started) return;
  pthread_mutex_lock(&e->mu);
  e->quit = true;
  pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
  pthread_join(e->th, NULL);
  rt->algo.eval_destroy(e->ev);
  free(e->blob);
  free(e->snap);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
}

/* ---- the run's lease ----------------------------------------------------------- */

/* Takes the run's lease before anything is written: a learner that holds it already is
 * named and this one exits; one that is stopping (its last snapshot on the way) is
 * waited for, so a resume starts from that snapshot. A store that cannot be reached
 * now leaves the lease to the lease thread. */
static void lease_take(lrt *rt) {
  rt->lease_s = config_float(rt->cfg, "learner.lease_s");
  double t0 = shoal_now_s(), said = -1;
  for (;;) {
    store_lease_holder h;
    shoal_error err = {0};
    int rc = store_lease_take(rt->st, rt->run, rt->lease_s, &h, &err);
    if (rc == 0) return;
    if (rc != SHOAL_EEXIST) {
      lrt_note(rt, "the run's lease cannot be taken now (%s): training goes on", err.msg);
      return;
    }
    /* A holder that is stopping is waited for; one that may be about to (a restart
     * under `shoal run` races its predecessor's stop) gets a few seconds. */
    double waited = shoal_now_s() - t0;
    if (!(h.stopping ? waited < 180 : waited < 3)) {
      fprintf(stderr,
              "%s: run %s is being trained by another learner (pid %lld on %s, for %.0f s): one "
              "learner per run; stop it first (or wait for it to end)\n",
              rt->p->prog, rt->run, (long long)h.pid, h.host, lrt_unix_now() - h.started);
      exit(RUN_EXIT_FATAL);
    }
    if (h.stopping && said < 0) {
      lrt_note(rt, "waiting for the learner of run %s (pid %lld on %s) to finish stopping", rt->run,
               (long long)h.pid, h.host);
      said = waited;
    }
    struct timespec ts = {0, 250000000};
    nanosleep(&ts, NULL);
  }
}

static void *lease_main(void *arg) {
  shoal_thread_name("shoal-lease");
  lrt *rt = arg;
  pthread_mutex_lock(&rt->lease_mu);
  while (!atomic_load(&rt->lease_stop)) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double d = rt->lease_s / 3;
    until.tv_sec += (time_t)d;
    until.tv_nsec += (long)((d - (double)(time_t)d) * 1e9);
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&rt->lease_cv, &rt->lease_mu, &until);
    if (atomic_load(&rt->lease_stop)) break;
    pthread_mutex_unlock(&rt->lease_mu);
    shoal_error err = {0};
    int rc = store_lease_renew(rt->st, rt->run, rt->lease_s, false, &err);
    if (rc == SHOAL_ESTATE) {
      /* Not held: never taken (the store was away at the start), or taken over. */
      store_lease_holder h;
      rc = store_lease_take(rt->st, rt->run, rt->lease_s, &h, &err);
      if (rc == SHOAL_EEXIST) {
        lrt_note(rt, "%s: this learner stops", err.msg);
        atomic_store(&rt->lease_lost, true);
      }
    }
    pthread_mutex_lock(&rt->lease_mu);
  }
  pthread_mutex_unlock(&rt->lease_mu);
  return NULL;
}

static void lease_start(lrt *rt) {
  pthread_mutex_init(&rt->lease_mu, NULL);
  pthread_cond_init(&rt->lease_cv, NULL);
  rt->lease_started = pthread_create(&rt->lease_th, NULL, lease_main, rt) == 0;
}

/* The stop: the lease says stopping (a resume waits for the final snapshot); after the
 * store's flush, give it back. */
static void lease_stopping(lrt *rt) {
  shoal_error err = {0};
  store_lease_renew(rt->st, rt->run, rt->lease_s, true, &err);
}

/* Stops the lease thread and, when this learner still holds it, gives the lease back. */
static void lease_release(lrt *rt) {
  if (rt->lease_started) {
    pthread_mutex_lock(&rt->lease_mu);
    atomic_store(&rt->lease_stop, true);
    pthread_cond_signal(&rt->lease_cv);
    pthread_mutex_unlock(&rt->lease_mu);
    pthread_join(rt->lease_th, NULL);
  }
  shoal_error err = {0};
  if (!atomic_load(&rt->lease_lost)) store_lease_release(rt->st, rt->run, &err);
}

/* ---- set-up ------------------------------------------------------------------- */

/* The usage on stderr (exit 2), or on stdout for --help (exit 0). */
static void usage(const lrt_program *p, bool help) {
  fprintf(help ? stdout : stderr,
          "usage: %s --config FILE --run RUN [--resume] [--set key=value ...]\n"
          "  Serves the run's actors and trains (`shoal run` starts it; deploy/README.md runs\n"
          "  it by hand). FILE: a resolved config (`shoal init --out`); its keys: shoal config\n"
          "  keys. --resume continues from the run's latest snapshot and replay log.\n",
          p->prog);
  exit(help ? 0 : 2);
}

static void load_config(lrt *rt, int argc, char **argv) {
  const char *sets[MAX_SETS];
  int nsets = 0, nkeys;
  shoal_error err = {0};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc)
      rt->cfg_path = argv[++i];
    else if (!strcmp(argv[i], "--run") && i + 1 < argc)
      rt->run = argv[++i];
    else if (!strcmp(argv[i], "--resume"))
      rt->resume = true;
    else if (!strcmp(argv[i], "--set") && i + 1 < argc && nsets < MAX_SETS)
      sets[nsets++] = argv[++i];
    else
      usage(rt->p, !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"));
  }
  if (!rt->cfg_path || !rt->run) usage(rt->p, false);
  const cfg_key *keys = rt->p->schema(&nkeys);
  if (!(rt->cfg = config_create(keys, nkeys, &err))) lrt_die(rt, "config", &err);
  /* A config from the store or `shoal init --out` has its secrets redacted: they come
   * back from the environment (config_restore_secrets). */
  if (config_load_program(rt->cfg, rt->cfg_path, sets, nsets, &err) || rt->p->check(rt->cfg, &err))
    lrt_fatal(rt, "config", &err);
  rt->actors = (int)config_int(rt->cfg, "actors");
}

static void start_live(lrt *rt) {
  int n = 0, nk;
  for (; n < LRT_HP_COMMON; n++) rt->hp_names[n] = common_hp[n];
  for (int i = 0; i < rt->algo.hp_count && n < LIVE_HP_MAX; i++)
    rt->hp_names[n++] = rt->algo.hp_names[i];
  const cfg_key *schema = rt->p->schema(&nk);
  lrt_figs f;
  rt->algo.figs(rt->a, &f);
  live_hp_init(&rt->live, rt->hp_names, n,
               rt->algo.hp_lr >= 0 ? LRT_HP_COMMON + rt->algo.hp_lr : -1, schema, nk, rt->cfg,
               &rt->stopping, rt->st, rt->wr, rt->run, rt->cfg_path, f.env_steps, rt->resume);
}

/* Whether addr ("host:port") is a loopback address only this machine reaches. */
static bool loopback(const char *addr) {
  static const char *const lo[] = {"127.", "localhost:", "[::1]:", "ipv4:127.", "ipv6:[::1]:"};
  for (size_t i = 0; i < sizeof lo / sizeof *lo; i++)
    if (!strncmp(addr, lo[i], strlen(lo[i]))) return true;
  return false;
}

static void start_server(lrt *rt) {
  rpc_server_config sc = {0};
  shoal_error err = {0};
  const char *listen = config_string(rt->cfg, "learner.listen");
  if (!config_string(rt->cfg, "learner.token")[0] && !loopback(listen) &&
      !config_bool(rt->cfg, "learner.insecure")) {
    shoal_error_set(&err, SHOAL_EPERM,
                    "learner.listen %s reaches beyond this machine and there is no token: set "
                    "learner.token (or $SHOAL_TOKEN), listen on 127.0.0.1, or say "
                    "learner.insecure: true",
                    listen);
    lrt_die(rt, "rpc server", &err);
  }
  sc.listen = config_string(rt->cfg, "learner.listen");
  sc.token =
      config_string(rt->cfg, "learner.token")[0] ? config_string(rt->cfg, "learner.token") : NULL;
  /* An insert may wait in the callback (a rate limiter, a full FIFO), and an actor can
   * have two calls in at once (a resend on a new stream while its old one still waits):
   * two threads per actor plus two keep Status, SetHyperparams and pulls answered. */
  sc.threads = rt->actors * 2 + 2 < 16 ? rt->actors * 2 + 2 : 16;
  sc.on_batch = on_batch;
  sc.on_status = on_status;
  sc.on_hyperparams = on_hyperparams;
  sc.user = rt;
  if (rpc_server_create(&sc, &rt->algo.spec, &rt->srv, &err)) lrt_die(rt, "rpc server", &err);
  if (rt->algo.arch && rpc_server_set_arch(rt->srv, rt->algo.arch, &err))
    lrt_die(rt, "rpc server", &err);
}

/* Keys that say where and how a learner runs, not what it trains: they may differ
 * from the stored config without a word. */
static const char *const placement_keys[] = {
    "run.name",         "store.uri",       "learner.listen",      "learner.token",
    "learner.insecure", "learner.threads", "learner.log_every_s", "learner.lease_s",
    "learner.device"};

/* The store shows what trains: a learner whose training values differ from its run's
 * stored config records its own (and says which changed), once its snapshot has loaded
 * (record_config), so that a config the run cannot take is never stored. */
static void check_stored_config(lrt *rt, const char *stored) {
  int nkeys;
  shoal_error err = {0};
  const cfg_key *keys = rt->p->schema(&nkeys);
  config *old = config_create(keys, nkeys, &err);
  if (!old || config_load_string(old, stored ? stored : "", rt->run, &err)) {
    snprintf(rt->record_why, sizeof rt->record_why,
             "the run's stored config does not load (%s): recording this one", err.msg);
  } else if (run_resume_check(old, rt->cfg, &err)) {
    /* Refused before the store holds a config its snapshots do not fit. */
    config_destroy(old);
    char what[128];
    snprintf(what, sizeof what, "config of run %s", rt->run);
    lrt_fatal(rt, what, &err);
  } else {
    char diff[1024];
    int n = config_diff(old, rt->cfg, placement_keys,
                        (int)(sizeof placement_keys / sizeof *placement_keys), diff, sizeof diff);
    config_destroy(old);
    if (!n) return;
    snprintf(rt->record_why, sizeof rt->record_why,
             "run %s trains with %d value%s its stored config does not hold (%s): recording "
             "this config in the store",
             rt->run, n, n > 1 ? "s" : "", diff);
  }
}

/* What check_stored_config found to record, after the resume. */
static void record_config(lrt *rt) {
  if (!rt->record_why[0]) return;
  lrt_note(rt, "%s", rt->record_why);
  char *yaml = NULL;
  shoal_error err = {0};
  if (config_dump_redacted(rt->cfg, &yaml, &err) ||
      store_run_set_config(rt->st, rt->run, yaml, &err))
    lrt_note(rt, "cannot record the run's config: %s", err.msg);
  free(yaml);
}

/* A learner started without `shoal init` (or `shoal run`) records its run itself, with
 * its resolved config (secrets redacted), so that nothing it writes is refused for a
 * missing run; a run that is there gets this learner's config when the values differ.
 * A store that cannot be reached now is left to the writer's retries. */
static void record_run(lrt *rt) {
  store_run r;
  shoal_error err = {0};
  int rc = store_run_find(rt->st, rt->run, &r, &err);
  if (rc == 0) {
    check_stored_config(rt, r.config);
    store_run_clear(&r);
    return;
  }
  if (rc != SHOAL_ENOENT) return;
  char *yaml = NULL;
  if (config_dump_redacted(rt->cfg, &yaml, &err)) lrt_die(rt, "config", &err);
  rc = store_run_create(rt->st, rt->run, yaml, STORE_RUN_RUNNING, &err);
  free(yaml);
  if (rc == 0)
    lrt_note(rt, "run %s was not in the store: recorded it with this config", rt->run);
  else if (rc != SHOAL_EEXIST)
    lrt_note(rt, "run %s is not in the store and cannot be recorded now: %s", rt->run, err.msg);
}

static void set_up(lrt *rt, int argc, char **argv) {
  shoal_error err = {0};
  /* gRPC allocates a buffer per large message; glibc's default thresholds hand those
   * back to the kernel, which then zeroes fresh pages for every message (about 15% of
   * ingest in benchmarks/ingest). Keep them in the heap. */
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  load_config(rt, argc, argv);
  pthread_mutex_init(&rt->ep_mu, NULL);
  rt->eval_return = NAN;
  rt->best_eval = -INFINITY;
  rt->last_snapshot_version = -1;
  /* Through an outage of the store the learner trains on; the writer counts errors. */
  if (store_open_lazy(&rt->st, config_string(rt->cfg, "store.uri"), &err))
    lrt_die(rt, "store", &err);
  lease_take(rt);
  if (store_writer_create(&rt->wr, rt->st, NULL, &err)) lrt_die(rt, "store writer", &err);
  lease_start(rt);
  record_run(rt);
  /* What the config asks for that cannot be built (an env it cannot play, a bad value)
   * fails the same way on every restart; other failures (memory, a device) may pass. */
  if (!(rt->a = rt->p->create(rt, &rt->algo, &err))) {
    if (err.code == SHOAL_EINVAL || err.code == SHOAL_ENOENT || err.code == SHOAL_ENOTSUP)
      lrt_fatal(rt, "learner", &err);
    lrt_die(rt, "learner", &err);
  }
  if (rt->resume) resume(rt);
  record_config(rt);
  if (rt->algo.start && rt->algo.start(rt->a, rt->resume, &err)) lrt_die(rt, "start", &err);
  start_live(rt);
  start_server(rt);
  publish(rt);
  eval_start(rt);
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  if (!supervised) sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  emit("{\"event\":\"listening\",\"port\":%d,\"run\":\"%s\",\"device\":\"%s\",\"algo\":\"%s\"}",
       rpc_server_port(rt->srv), rt->run, rt->algo.device, rt->algo.name);
}

/* ---- the trainer loop -------------------------------------------------------- */

typedef struct window {
  double t;
  int64_t steps, updates;
  uint64_t samples;
} window;

static void progress(lrt *rt, double t0, double now, window *w, const lrt_figs *f) {
  double dt = now - w->t;
  uint64_t neps;
  double ret100 = return100(rt, &neps);
  rpc_server_stats ss;
  rpc_server_stats_get(rt->srv, &ss);
  int healthy;
  uint64_t store_errs = store_errors(rt, &healthy);
  double sps = (double)(f->env_steps - w->steps) / dt;
  double ups = (double)(rt->updates - w->updates) / dt;
  double samples_s = (double)(ss.samples - w->samples) * rt->algo.samples_per_item / dt;
  double t_unix = lrt_unix_now();
  char j1[32], j2[32], j3[32], extra[1024] = "";
  if (rt->algo.progress) rt->algo.progress(rt->a, extra, sizeof extra, dt, f->env_steps, t_unix);
  emit(
      "{\"event\":\"progress\",\"t\":%.2f,\"env_steps\":%lld,\"sps\":%.1f,"
      "\"samples_s\":%.1f,\"updates\":%lld,\"ups\":%.1f,\"replay\":%lld,\"replay_steps\":%lld,"
      "\"episodes\":%llu,\"return100\":%s,\"eval\":%s,\"version\":%lld,"
      "\"loss\":%s,\"rejected\":%llu,\"store_errors\":%llu,\"store_ok\":%s%s}",
      now - t0, (long long)f->env_steps, sps, samples_s, (long long)rt->updates, ups,
      (long long)f->held, (long long)f->held_steps, (unsigned long long)neps,
      jnum(j1, sizeof j1, ret100), jnum(j2, sizeof j2, rt->eval_return),
      (long long)atomic_load(&rt->version), jnum(j3, sizeof j3, f->loss),
      (unsigned long long)ss.rejected, /* the server counts every refused batch, as Status */
      (unsigned long long)store_errs, healthy ? "true" : "false", extra);
  store_writer_metric(rt->wr, rt->run, "sps", f->env_steps, t_unix, sps);
  store_writer_metric(rt->wr, rt->run, "updates_s", f->env_steps, t_unix, ups);
  store_writer_metric(rt->wr, rt->run, "train_seconds", f->env_steps, t_unix, now - t0);
  if (neps) store_writer_metric(rt->wr, rt->run, "return100", f->env_steps, t_unix, ret100);
  if (isfinite(f->loss))
    store_writer_metric(rt->wr, rt->run, "loss", f->env_steps, t_unix, f->loss);
  *w = (window){now, f->env_steps, rt->updates, ss.samples};
}

/* Seconds the run trained before this process (a resumed or restarted learner): the
 * last "train_seconds" metric, so run.max_seconds bounds the run, not each process. */
static double seconds_before(lrt *rt) {
  store_metric *rows = NULL;
  size_t n = 0;
  shoal_error err = {0};
  if (store_metrics_query(rt->st, rt->run, "train_seconds", INT64_MIN, INT64_MAX, &rows, &n, &err))
    return 0;
  double s = 0;
  for (size_t i = 0; i < n; i++) s = rows[i].value > s ? rows[i].value : s;
  free(rows);
  return s;
}

/* Trains until a stop rule or a signal; returns the reason. t0 is when the run's
 * training time began (earlier than now for a resumed run); wp is the log window. */
static const char *train_loop(lrt *rt, double t0, window *wp) {
  const double log_every = config_float(rt->cfg, "learner.log_every_s");
  double t_snap = t0;
  uint64_t eval_seed = 1000003;
  shoal_error err = {0};
  for (;;) {
    if (stop_signal || stop_begun) return "signal";
    if (atomic_load(&rt->lease_lost)) return "lease_lost";
    lrt_figs f;
    rt->algo.figs(rt->a, &f);
    live_hp_apply(&rt->live, apply_hp, rt, rt->wr, rt->run, f.env_steps, rt->p->prog);
    const double *hp = rt->live.hp;
    double now = shoal_now_s();
    if (hp[LRT_HP_MAX_STEPS] > 0 && f.env_steps >= (int64_t)hp[LRT_HP_MAX_STEPS])
      return "max_env_steps";
    if (hp[LRT_HP_MAX_S] > 0 && now - t0 >= hp[LRT_HP_MAX_S]) return "max_seconds";
    bool trained = false;
    if (rt->algo.step(rt->a, hp, &trained, &err)) lrt_die(rt, "learn", &err);
    if (trained && ++rt->updates % (int64_t)hp[LRT_HP_PUBLISH] == 0) version_current(rt);
    if (eval_collect(rt, hp[LRT_HP_SOLVE])) return "solved";
    now = shoal_now_s();
    uint64_t neps;
    double ret100 = return100(rt, &neps);
    rt->algo.figs(rt->a, &f);
    /* An evaluation due while the last still runs waits for it: evaluations keep their
     * schedule (every so many steps trained) instead of thinning out as training speeds
     * up, and training pauses no longer than one evaluation. */
    if (rt->algo.eval_due(rt->a, now, f.env_steps, hp, ret100, neps)) {
      if (!eval_idle(rt)) {
        eval_wait(rt);
        if (eval_collect(rt, hp[LRT_HP_SOLVE])) return "solved";
      }
      eval_post(rt, f.env_steps, eval_seed++);
    }
    if (now - t_snap >= hp[LRT_HP_SNAP]) {
      /* The evaluation in flight is stored first: snapshots go into the store in
       * version order, so a solving evaluation's snapshot is never skipped as older. */
      if (!eval_idle(rt)) {
        eval_wait(rt);
        if (eval_collect(rt, hp[LRT_HP_SOLVE])) return "solved";
      }
      t_snap = now;
      snapshot(rt, f.env_steps);
    }
    if (now - wp->t >= log_every) progress(rt, t0, now, wp, &f);
  }
}

static const char *train(lrt *rt, double t0) {
  lrt_figs f;
  rt->algo.figs(rt->a, &f);
  /* A resumed run already at a limit stops at once: said plainly, with the way on. */
  const double *hp = rt->live.hp, before = shoal_now_s() - t0;
  if (hp[LRT_HP_MAX_S] > 0 && before >= hp[LRT_HP_MAX_S])
    lrt_note(rt,
             "run %s has trained %.1f s, its run.max_seconds is %g (the limit counts across "
             "resumes): nothing left to train; raise run.max_seconds to train longer",
             rt->run, before, hp[LRT_HP_MAX_S]);
  else if (hp[LRT_HP_MAX_STEPS] > 0 && f.env_steps >= (int64_t)hp[LRT_HP_MAX_STEPS])
    lrt_note(rt,
             "run %s has taken %lld env steps, its run.max_env_steps is %.0f (the limit counts "
             "across resumes): nothing left to train; raise run.max_env_steps to train longer",
             rt->run, (long long)f.env_steps, hp[LRT_HP_MAX_STEPS]);
  /* The first window starts from where the run is, not from 0 (no false rate). */
  window w = {shoal_now_s(), f.env_steps, rt->updates, 0};
  const char *reason = train_loop(rt, t0, &w);
  /* The last window is logged too, so a run that ends within its first log interval (a
   * quick solve) still has its rates and its progress line. Not after losing the lease:
   * the run is another learner's then. */
  rt->algo.figs(rt->a, &f);
  const double now = shoal_now_s();
  if (strcmp(reason, "lease_lost") && f.env_steps > w.steps && now - w.t > 1e-3)
    progress(rt, t0, now, &w, &f);
  return reason;
}

/* Whether a stop reason is a budget (the run then evaluates what it ends with). */
static bool budget_reason(const char *reason) {
  return !strcmp(reason, "max_env_steps") || !strcmp(reason, "max_seconds");
}

/* Whether a run that ends at its budget evaluates what it ends with: one that evaluates
 * at all, whether or not its first scheduled evaluation came (a short budget ends before
 * it, and its last snapshot then had no score). */
static bool final_eval(lrt *rt) {
  return rt->evals > 0 || (rt->algo.evaluates && rt->algo.evaluates(rt->a, rt->live.hp));
}

/* How long the stop's evaluations may take (stop): the one in flight, and at a budget a
 * final one, each bounded by the slowest evaluation so far with half as much again (a
 * better policy plays longer games), so that a supervisor waits for them; before any has
 * run, by FIRST_EVAL_BOUND_S. 0 when none will run. */
static double stop_needs_s(lrt *rt, const char *reason) {
  eval_box *e = &rt->eval;
  if (!e->started) return 0;
  pthread_mutex_lock(&e->mu);
  double one = e->slowest_s > 0 ? 1.5 * e->slowest_s : FIRST_EVAL_BOUND_S;
  bool running = e->busy || e->pending, unread = e->done;
  pthread_mutex_unlock(&e->mu);
  double s = running ? one : 0;
  if (budget_reason(reason) && (final_eval(rt) || running || unread)) s += one;
  return s;
}

/* Under a supervisor a stop rule ends training but not yet the learner: the actors stop
 * first, so that what they still hold reaches it instead of being dropped. It says so
 * ({"event":"stopping"}: the supervisor then stops the actors, then this learner by
 * SIGTERM) and meanwhile takes their batches without waiting for training. Bounded: a
 * supervisor that does not answer leaves the learner to stop by itself. */
static void await_stop(lrt *rt, const char *reason) {
  emit("{\"event\":\"stopping\",\"reason\":\"%s\",\"stop_needs_s\":%.1f}", reason,
       stop_needs_s(rt, reason));
  if (rt->algo.drain) rt->algo.drain(rt->a);
  const double t = shoal_now_s();
  while (!stop_signal && !atomic_load(&rt->lease_lost) && shoal_now_s() - t < AWAIT_STOP_S) {
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
  }
}

/* Stop taking batches, keep what was learned, say how it ended: "t" is the run's
 * training time (to t_end, when training ended), "stop_s" how long the stop took. */
static int stop(lrt *rt, const char *reason, double t0, double t_end) {
  atomic_store(&rt->stopping, true);
  if (!atomic_load(&rt->lease_lost)) lease_stopping(rt);
  live_hp_wake(&rt->live);
  rt->algo.halt(rt->a);
  rpc_server_stats fin; /* exact now that no batch is in flight */
  rpc_server_close(rt->srv, 1.0, &fin);
  rt->srv = NULL;
  lrt_figs f;
  rt->algo.figs(rt->a, &f);
  /* A run that ends at its budget, and evaluates, evaluates what it ends with: the last
   * snapshot's score is then its own, not that of a version some updates before. */
  const bool owner = !atomic_load(&rt->lease_lost);
  const bool budget = budget_reason(reason);
  /* An evaluation in flight when the budget ran out played a version trained within it:
   * if that one reaches the bar, the run solved within its budget. */
  if (owner && budget && rt->eval.started) {
    eval_wait(rt); /* the one in flight first, so snapshots keep version order */
    if (eval_collect(rt, rt->live.hp[LRT_HP_SOLVE])) reason = "solved";
  }
  const bool solved = !strcmp(reason, "solved");
  if (owner && budget && !solved && final_eval(rt)) {
    eval_post(rt, f.env_steps, 999999937);
    eval_wait(rt);
    eval_collect(rt, 0);
  }
  eval_stop(rt);
  /* The evaluated snapshot of a solved run is its last (the policy that solved, not the
   * few updates made while it was evaluated); otherwise the final state. A learner that
   * lost the run's lease to another writes nothing more to the run. */
  if (owner && !solved) snapshot(rt, f.env_steps);
  char extra[1024] = "";
  bool kept = rt->algo.finish(rt->a, extra, sizeof extra);
  if (owner)
    store_writer_run_status(rt->wr, rt->run,
                            !strcmp(reason, "signal") ? STORE_RUN_STOPPED : STORE_RUN_FINISHED);
  /* A store that is failing now gets one more try, not 30 s of them: the stop must
   * not hang on an outage (what is not written is counted and reported). */
  int healthy;
  store_errors(rt, &healthy);
  store_writer_stats ws;
  int wrc = store_writer_close(rt->wr, healthy ? 30.0 : 3.0, &ws);
  /* store_ok: everything the learner handed the writer is in the store (failed calls
   * that a retry then wrote do not count against it). */
  const bool lost = ws.metrics_dropped || ws.snapshots_dropped || ws.replay_dropped ||
                    ws.runs_dropped || ws.pending_metrics || ws.pending_snapshots ||
                    ws.pending_replay || ws.pending_runs;
  if (lost)
    lrt_note(rt,
             "the store did not take everything: %llu metric rows, %llu snapshots, %llu "
             "replay segments and %llu run updates dropped or left unwritten (last error: %s)",
             (unsigned long long)(ws.metrics_dropped + ws.pending_metrics),
             (unsigned long long)(ws.snapshots_dropped + ws.pending_snapshots),
             (unsigned long long)(ws.replay_dropped + ws.pending_replay),
             (unsigned long long)(ws.runs_dropped + ws.pending_runs),
             ws.last_error_msg[0] ? ws.last_error_msg : "none");
  rt->algo.figs(rt->a, &f);
  char j1[32], j2[32];
  emit(
      "{\"event\":\"done\",\"reason\":\"%s\",\"t\":%.2f,\"env_steps\":%lld,\"updates\":%lld,"
      "\"version\":%lld,\"eval\":%s,\"best_eval\":%s,\"store_ok\":%s,\"bad_batches\":%llu,"
      "\"batches\":%llu,\"rejected\":%llu,\"stop_s\":%.2f%s}",
      reason, t_end - t0, (long long)f.env_steps, (long long)rt->updates,
      (long long)(solved ? rt->eval_version : atomic_load(&rt->version)),
      jnum(j1, sizeof j1, rt->eval_return), jnum(j2, sizeof j2, rt->best_eval),
      wrc == 0 && kept && !lost ? "true" : "false", (unsigned long long)f.bad_batches,
      (unsigned long long)fin.batches, (unsigned long long)fin.rejected, shoal_now_s() - t_end,
      extra);
  return 0;
}

int lrt_main(int argc, char **argv, const lrt_program *p) {
  static lrt rt; /* the signal handler and rpc threads outlive no frame of main's */
  rt.p = p;
  const char *sv = getenv("SHOAL_SUPERVISED");
  supervised = sv && !strcmp(sv, "1");
  /* A terminal's Ctrl-C reaches this process too; the supervisor acts on it (from the
   * start: a Ctrl-C while this learner sets up is the supervisor's as well), and says
   * when its stop begins by SIGUSR1. */
  if (supervised) {
    signal(SIGINT, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_begun;
    sa.sa_flags = SA_RESTART; /* the threads' calls go on: training ends at its next step */
    sigaction(SIGUSR1, &sa, NULL);
  }
  set_up(&rt, argc, argv);
  double t0 = shoal_now_s() - (rt.resume ? seconds_before(&rt) : 0);
  const char *reason = train(&rt, t0);
  const double t_end = shoal_now_s();
  /* A SIGTERM ends it at once; a stop rule or the supervisor's SIGUSR1 waits for it. */
  if (supervised && !stop_signal && strcmp(reason, "lease_lost")) await_stop(&rt, reason);
  int rc = stop(&rt, reason, t0, t_end);
  lease_release(&rt);
  store_close(rt.st);
  rt.algo.destroy(rt.a);
  live_hp_destroy(&rt.live);
  config_destroy(rt.cfg);
  pthread_mutex_destroy(&rt.ep_mu);
  return rc;
}
