/* SPDX-License-Identifier: Apache-2.0 */
/* The vector env: B copies stepped in one call, auto-reset, episode statistics and
 * optional worker threads over disjoint ranges of copies. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "envs/internal.h"

#define RECENT 100

struct env_vec {
  const env_type *type;   /* a registry kind, or NULL with a backend */
  const env__backend *be; /* a backend's env ("gym:ID"), or NULL */
  void *be_self;
  env_spec be_spec;     /* the backend's spec */
  const env_spec *spec; /* &type->spec or &be_spec */
  double *be_reward;    /* (B) the backend's float64 rewards */
  uint64_t *be_seeds;   /* (B) */
  int B;
  size_t stride;    /* bytes per state, a multiple of 16 */
  void *states;     /* (B, stride) */
  shoal_rng *rngs;  /* (B) */
  int32_t *elapsed; /* (B) */
  double *ep_return;
  double *done_return;
  int32_t *done_length;
  int max_steps;
  int was_reset;
  void *scratch; /* (stride) a state for reset options */
  void *obs_tmp; /* one observation */
  /* finished episodes, a ring */
  env_episode *log;
  int log_cap, log_head, log_count;
  uint64_t steps, episodes, dropped;
  double recent_ret[RECENT], recent_len[RECENT];
  int recent_n, recent_i;
  /* workers: thread k (1..T-1) steps chunk k, the caller chunk 0 */
  int nthreads;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  /* The hand-off (see hand_off): gen counts the steps given to the workers, pending the
   * workers still on this one; both are polled for a while before anyone sleeps. */
  _Atomic uint64_t gen;
  _Atomic int pending, stop;
  int sync_ok;
  env__batch cur;
  /* Threads that pay (env__pace): the rule's state and the steps taken in each mode */
  env__pace pace;
  uint64_t mode_steps[2];
  int force; /* SHOAL_VEC_PARALLEL: 1 always the workers, 0 never, -1 measure (default) */
};

/* The loop for kinds without their own vec_step: the same semantics through the vtable. */
static void generic_vec_step(const env__batch *b, int lo, int hi) {
  const env_type *t = b->type;
  size_t ob = env_space_bytes(&t->spec.obs), ab = env_space_bytes(&t->spec.act);
  for (int i = lo; i < hi; i++) {
    void *st = (char *)b->states + (size_t)i * b->state_size;
    char *o = (char *)b->obs + (size_t)i * ob;
    double r = 0.0;
    int term = 0;
    t->step(st, &b->rngs[i], (const char *)b->actions + (size_t)i * ab, o, &r, &term);
    term = term != 0;
    int el = ++b->elapsed[i];
    int trunc = b->max_steps > 0 && el >= b->max_steps;
    double ret = b->ep_return[i] + r;
    b->reward[i] = (float)r;
    b->terminated[i] = (uint8_t)term;
    b->truncated[i] = (uint8_t)trunc;
    if (term | trunc) {
      if (b->final_obs) memcpy((char *)b->final_obs + (size_t)i * ob, o, ob);
      b->done_return[i] = ret;
      b->done_length[i] = el;
      t->reset(st, &b->rngs[i], o);
      ret = 0.0;
      b->elapsed[i] = 0;
    }
    b->ep_return[i] = ret;
  }
}

static void run_range(env_vec *v, const env__batch *b, int lo, int hi) {
  if (lo >= hi) return;
  if (v->type->vec_step)
    v->type->vec_step(b, lo, hi);
  else
    generic_vec_step(b, lo, hi);
}

static void run_chunk(env_vec *v, const env__batch *b, int k) {
  run_range(v, b, (int)((long)v->B * k / v->nthreads), (int)((long)v->B * (k + 1) / v->nthreads));
}

/* Threads that pay: waking the workers and waiting for them costs from under a
 * microsecond (they are polling) to tens (they slept), more than a whole step of 16
 * copies of a classic-control env takes on one thread, so a vector env with workers
 * measures both ways of stepping and takes the faster (env__pace in envs/internal.h says
 * the rule). The copies are independent, so results do not depend on the mode.
 * SHOAL_VEC_PARALLEL=1 (always the workers) or 0 (never) forces one, for measuring and
 * testing. */
enum { PH_NONE, PH_WARM, PH_SAMPLE, PH_PROBE };

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double env__pace_cost(const env__pace *p, int mode) {
  double best = 0;
  for (int i = 0; i < ENV__PACE_WIN; i++) {
    double x = p->win[mode][i];
    if (x > 0 && (best == 0 || x < best)) best = x;
  }
  return best;
}

static void pace_push(env__pace *p, int mode, double ns) {
  p->win[mode][p->wi[mode]] = ns;
  p->wi[mode] = (p->wi[mode] + 1) % ENV__PACE_WIN;
}

static void pace_run(env__pace *p, int mode) {
  p->running = mode;
  p->fresh[mode] = 1;
}

static void pace_next_probe(env__pace *p, uint64_t gap) {
  p->gap = gap < ENV__PACE_GAP_MIN   ? ENV__PACE_GAP_MIN
           : gap > ENV__PACE_GAP_MAX ? ENV__PACE_GAP_MAX
                                     : gap;
  p->probe_at = p->nstep + p->gap;
}

/* Starts a run of mode for phase; untimed: its first step goes untimed. */
static void run_start(env__pace *p, int phase, int mode, int untimed) {
  p->phase = phase;
  p->run_mode = mode;
  p->run_left = ENV__PACE_RUN;
  p->run_untimed = untimed;
  p->run_sum = 0;
}

int env__pace_choose(env__pace *p, int *timed) {
  uint64_t n = p->nstep++;
  if (p->phase == PH_NONE) {
    if (p->warm_runs < ENV__PACE_WARM_RUNS) { /* 0 1 0 1 */
      run_start(p, PH_WARM, p->warm_runs & 1, 1);
      p->warm_runs++;
    } else {
      if (!p->chosen) {
        p->chosen = 1;
        pace_run(p, env__pace_cost(p, 1) < env__pace_cost(p, 0));
        p->gap = ENV__PACE_GAP_MIN;
        p->probe_at = n + ENV__PACE_GAP_MIN;
        p->sample_at = n + ENV__PACE_SAMPLE_EVERY;
      }
      if (n >= p->probe_at)
        run_start(p, PH_PROBE, !p->running, 1);
      else if (n >= p->sample_at)
        run_start(p, PH_SAMPLE, p->running, 0);
    }
  }
  if (p->phase == PH_NONE) {
    *timed = 0;
    return p->running;
  }
  *timed = !p->run_untimed;
  p->run_untimed = 0;
  return p->run_mode;
}

/* What a finished run says: ns, its mean step. */
static void run_done(env__pace *p, double ns) {
  int run = p->running, other = !run, phase = p->phase;
  p->phase = PH_NONE;
  switch (phase) {
    case PH_WARM: pace_push(p, p->run_mode, ns); return;
    case PH_PROBE:
      pace_push(p, other, ns);
      if (env__pace_cost(p, other) < env__pace_cost(p, run))
        pace_run(p, other); /* the gap is settled at its first own sample */
      else
        pace_next_probe(p, p->gap * 2);
      return;
    case PH_SAMPLE:
      p->sample_at = p->nstep + ENV__PACE_SAMPLE_EVERY - ENV__PACE_RUN;
      if (p->fresh[run]) { /* forget what the mode cost while it was not running */
        memset(p->win[run], 0, sizeof p->win[run]);
        p->wi[run] = 0;
        pace_push(p, run, ns);
        p->fresh[run] = 0;
        if (env__pace_cost(p, other) < ns) { /* the switch did not hold */
          p->running = other;
          pace_next_probe(p, p->gap * 2);
        } else {
          pace_next_probe(p, ENV__PACE_GAP_MIN);
        }
        return;
      }
      pace_push(p, run, ns);
      if (env__pace_cost(p, other) < env__pace_cost(p, run)) pace_run(p, other);
      return;
    default: return;
  }
}

void env__pace_record(env__pace *p, double ns) {
  if (p->phase == PH_NONE || p->run_left <= 0) return;
  p->run_sum += ns;
  int done = ENV__PACE_RUN - --p->run_left;
  /* A probe that has already taken twice what a whole run of the running mode takes has
   * lost: it ends there (its mean so far is more than twice the running mode's), so a
   * probe of a far slower mode costs a few of its steps, not a run of them. */
  double cost = p->run_left && p->phase == PH_PROBE ? env__pace_cost(p, p->running) : 0;
  if (p->run_left == 0 || (cost > 0 && p->run_sum > 2.0 * ENV__PACE_RUN * cost))
    run_done(p, p->run_sum / done);
}

typedef struct worker_arg {
  env_vec *v;
  int k;
} worker_arg;

/* The hand-off between the caller and its workers polls before it sleeps. A condition
 * variable alone wakes a sleeping thread in tens of microseconds (measured: Acrobot at
 * B=256, 51 us of stepping, took 72 us on two threads against 51 on one), more than a
 * step of hundreds of small envs takes; polling for SPIN_NS first hands a step over in
 * well under a microsecond while steps follow each other, and still sleeps when the
 * caller is away (its policy's forward, a learner's update). */
#define SPIN_NS 50000

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* What the two sides wait for: a worker, a step after step seen (or the stop); the
 * caller, its workers' chunks done. */
static bool new_step(const env_vec *v, uint64_t seen) {
  return atomic_load_explicit(&v->gen, memory_order_acquire) != seen ||
         atomic_load_explicit(&v->stop, memory_order_relaxed);
}
static bool chunks_done(const env_vec *v, uint64_t unused) {
  return atomic_load_explicit(&v->pending, memory_order_acquire) == 0;
}

/* Polls ready(v, arg) for at most SPIN_NS, then sleeps on cv until it holds (whoever
 * makes it hold signals cv under mu). */
static void wait_for(env_vec *v, bool (*ready)(const env_vec *, uint64_t), uint64_t arg,
                     pthread_cond_t *cv) {
  uint64_t t0 = 0;
  for (int i = 0; !ready(v, arg); i++) {
    cpu_relax();
    if ((i & 63) != 63) continue;
    uint64_t t = now_ns();
    if (!t0) {
      t0 = t;
    } else if (t - t0 > SPIN_NS) {
      pthread_mutex_lock(&v->mu);
      while (!ready(v, arg)) pthread_cond_wait(cv, &v->mu);
      pthread_mutex_unlock(&v->mu);
      return;
    }
  }
}

static void *worker(void *p) {
  shoal_thread_name("shoal-env");
  worker_arg a = *(worker_arg *)p;
  free(p);
  env_vec *v = a.v;
  uint64_t seen = 0;
  for (;;) {
    wait_for(v, new_step, seen, &v->cv_work);
    if (atomic_load(&v->stop)) break;
    seen = atomic_load_explicit(&v->gen, memory_order_acquire);
    env__batch b = v->cur; /* written before gen was published */
    run_chunk(v, &b, a.k);
    if (atomic_fetch_sub_explicit(&v->pending, 1, memory_order_acq_rel) == 1) {
      /* the caller may be asleep: it checks pending under mu before it waits */
      pthread_mutex_lock(&v->mu);
      pthread_cond_signal(&v->cv_done);
      pthread_mutex_unlock(&v->mu);
    }
  }
  return NULL;
}

/* Gives step b to the workers, runs chunk 0 on the caller and waits for the rest. */
static void hand_off(env_vec *v, const env__batch *b) {
  v->cur = *b;
  atomic_store_explicit(&v->pending, v->nthreads - 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&v->gen, 1, memory_order_release);
  /* wakes workers that went to sleep; no system call when none is waiting */
  pthread_mutex_lock(&v->mu);
  pthread_cond_broadcast(&v->cv_work);
  pthread_mutex_unlock(&v->mu);
  run_chunk(v, b, 0);
  wait_for(v, chunks_done, 0, &v->cv_done);
}

static void stop_threads(env_vec *v, int started) {
  pthread_mutex_lock(&v->mu);
  atomic_store(&v->stop, 1);
  pthread_cond_broadcast(&v->cv_work);
  pthread_mutex_unlock(&v->mu);
  for (int k = 0; k < started; k++) pthread_join(v->threads[k], NULL);
}

void env_vec_destroy(env_vec *v) {
  if (!v) return;
  if (v->be && v->be_self) v->be->destroy(v->be_self);
  free(v->be_reward);
  free(v->be_seeds);
  if (v->threads) stop_threads(v, v->nthreads - 1);
  if (v->sync_ok) {
    pthread_mutex_destroy(&v->mu);
    pthread_cond_destroy(&v->cv_work);
    pthread_cond_destroy(&v->cv_done);
  }
  free(v->threads);
  free(v->states);
  free(v->rngs);
  free(v->elapsed);
  free(v->ep_return);
  free(v->done_return);
  free(v->done_length);
  free(v->log);
  free(v->scratch);
  free(v->obs_tmp);
  free(v);
}

/* The episode log, the statistics and the counters every vector env keeps. */
static int alloc_common(env_vec *v, int B, int log_cap) {
  v->B = B;
  v->log_cap = log_cap ? log_cap : 4 * B + 64;
  v->elapsed = calloc((size_t)B, sizeof *v->elapsed);
  v->ep_return = calloc((size_t)B, sizeof *v->ep_return);
  v->done_return = calloc((size_t)B, sizeof *v->done_return);
  v->done_length = calloc((size_t)B, sizeof *v->done_length);
  v->log = calloc((size_t)v->log_cap, sizeof *v->log);
  return v->elapsed && v->ep_return && v->done_return && v->done_length && v->log;
}

/* B copies behind a backend: one thread (the backend's envs are not thread-safe data,
 * and a Python env would serialise threads on the GIL anyway). The time limit is the
 * env's own; cfg's max_episode_steps > 0 is passed to the env as that option. */
static int create_backend(env_vec **out, const env__backend *be, const char *id, int B,
                          const env_vec_config *c, shoal_error *err) {
  char opts[1024];
  const char *o = c->options ? c->options : "";
  int k = c->max_episode_steps > 0 ? snprintf(opts, sizeof opts, "%s%smax_episode_steps=%d", o,
                                              o[0] ? "," : "", c->max_episode_steps)
                                   : snprintf(opts, sizeof opts, "%s", o);
  if (k < 0 || (size_t)k >= sizeof opts)
    return shoal_error_set(err, SHOAL_EINVAL, "env_vec_create: '%s': options too long", id);
  env_vec *v = calloc(1, sizeof *v);
  if (!v || !alloc_common(v, B, c->episode_log) ||
      !(v->be_reward = calloc((size_t)B, sizeof *v->be_reward)) ||
      !(v->be_seeds = calloc((size_t)B, sizeof *v->be_seeds))) {
    env_vec_destroy(v);
    return shoal_error_set(err, SHOAL_ENOMEM, "env_vec_create: '%s' x %d: out of memory", id, B);
  }
  v->nthreads = 1;
  int rc =
      be->create(&v->be_self, id + strlen(be->prefix), B, opts, c->evaluation, &v->be_spec, err);
  if (rc) {
    env_vec_destroy(v);
    return rc;
  }
  v->be = be;
  v->spec = &v->be_spec;
  *out = v;
  return 0;
}

int env_vec_create(env_vec **out, const char *id, int B, const env_vec_config *cfg,
                   shoal_error *err) {
  env_vec_config c = {0};
  if (cfg) c = *cfg;
  if (B < 1 || B > (1 << 24))
    return shoal_error_set(err, SHOAL_EINVAL, "env_vec_create: '%s': B = %d (need 1..2^24)",
                           id ? id : "(null)", B);
  if (c.episode_log < 0)
    return shoal_error_set(err, SHOAL_EINVAL, "env_vec_create: '%s': episode_log = %d",
                           id ? id : "(null)", c.episode_log);
  const env__backend *be = env__backend_for(id);
  if (be) return create_backend(out, be, id, B, &c, err);
  const env_type *t;
  int lrc = env__lookup(id, &t, "env_vec_create", err);
  if (lrc) return lrc;
  if (c.threads < 1) c.threads = 1;
  if (c.threads > B || c.threads > 256)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "env_vec_create: '%s': %d threads for %d copies (at most B and 256)", id,
                           c.threads, B);
  env_vec *v = calloc(1, sizeof *v);
  if (!v) return shoal_error_set(err, SHOAL_ENOMEM, "env_vec_create: '%s': out of memory", id);
  v->type = t;
  v->spec = &t->spec;
  v->stride = (t->state_size + 15) & ~(size_t)15;
  v->max_steps = c.max_episode_steps == 0  ? t->spec.max_episode_steps
                 : c.max_episode_steps < 0 ? 0
                                           : c.max_episode_steps;
  int ok = alloc_common(v, B, c.episode_log);
  v->states = aligned_alloc(64, (v->stride * (size_t)B + 63) & ~(size_t)63);
  v->rngs = calloc((size_t)B, sizeof *v->rngs);
  v->scratch = aligned_alloc(16, v->stride);
  v->obs_tmp = malloc(env_space_bytes(&t->spec.obs));
  v->nthreads = c.threads;
  const char *fp = getenv("SHOAL_VEC_PARALLEL");
  v->force = fp && (fp[0] == '0' || fp[0] == '1') ? fp[0] - '0' : -1;
  if (!ok || !v->scratch || !v->obs_tmp || !v->states || !v->rngs) {
    env_vec_destroy(v);
    return shoal_error_set(err, SHOAL_ENOMEM, "env_vec_create: '%s' x %d: out of memory", id, B);
  }
  memset(v->states, 0, v->stride * (size_t)B);
  /* settings: applied to copy 0, then copied, so every copy starts alike */
  int opt_steps = v->max_steps;
  int orc = env__apply_options(t, v->states, c.options, &opt_steps, "env_vec_create", err);
  if (orc) {
    env_vec_destroy(v);
    return orc;
  }
  if (c.options && strstr(c.options, "max_episode_steps")) v->max_steps = opt_steps;
  for (int i = 1; i < B; i++)
    memcpy((char *)v->states + (size_t)i * v->stride, v->states, v->stride);
  /* A copy reset without a seed (env_vec_reset_each) draws from seed i until seeded. */
  for (int i = 0; i < B; i++) shoal_rng_seed(&v->rngs[i], (uint64_t)i);
  if (pthread_mutex_init(&v->mu, NULL) || pthread_cond_init(&v->cv_work, NULL) ||
      pthread_cond_init(&v->cv_done, NULL)) {
    env_vec_destroy(v);
    return shoal_error_set(err, SHOAL_EINTERNAL, "env_vec_create: '%s': pthread init failed", id);
  }
  v->sync_ok = 1;
  if (v->nthreads > 1) {
    v->threads = calloc((size_t)v->nthreads - 1, sizeof *v->threads);
    if (!v->threads) {
      env_vec_destroy(v);
      return shoal_error_set(err, SHOAL_ENOMEM, "env_vec_create: '%s': out of memory", id);
    }
    for (int k = 1; k < v->nthreads; k++) {
      worker_arg *a = malloc(sizeof *a);
      if (a) *a = (worker_arg){v, k};
      if (!a || pthread_create(&v->threads[k - 1], NULL, worker, a)) {
        free(a);
        stop_threads(v, k - 1);
        free(v->threads);
        v->threads = NULL;
        env_vec_destroy(v);
        return shoal_error_set(err, SHOAL_EINTERNAL,
                               "env_vec_create: '%s': could not start thread %d", id, k);
      }
    }
  }
  *out = v;
  return 0;
}

const env_spec *env_vec_spec(const env_vec *v) { return v->spec; }
int env_vec_size(const env_vec *v) { return v->B; }

int env_vec_reset(env_vec *v, uint64_t seed, void *obs, shoal_error *err) {
  if (v->be) {
    for (int i = 0; i < v->B; i++) v->be_seeds[i] = seed + (uint64_t)i;
    return env_vec_reset_each(v, v->be_seeds, NULL, NULL, obs, err);
  }
  size_t ob = env_space_bytes(&v->type->spec.obs);
  for (int i = 0; i < v->B; i++) {
    shoal_rng_seed(&v->rngs[i], seed + (uint64_t)i);
    v->type->reset((char *)v->states + (size_t)i * v->stride, &v->rngs[i],
                   (char *)obs + (size_t)i * ob);
    v->elapsed[i] = 0;
    v->ep_return[i] = 0.0;
  }
  v->was_reset = 1;
  return 0;
}

int env_vec_reset_each(env_vec *v, const uint64_t *seeds, const uint8_t *reseed,
                       const char *options, void *obs, shoal_error *err) {
  const env_type *t = v->type;
  int any = !reseed;
  for (int i = 0; reseed && i < v->B; i++) any |= reseed[i] != 0;
  if (!obs || (!seeds && any))
    return shoal_error_set(err, SHOAL_EINVAL, "env_vec_reset_each: '%s': NULL seeds or obs",
                           v->spec->id);
  if (v->be) {
    if (options && options[0])
      return shoal_error_set(err, SHOAL_EINVAL,
                             "env_vec_reset_each: '%s' takes no reset options (got '%s')",
                             v->spec->id, options);
    int rc = v->be->reset(v->be_self, seeds, reseed, obs, err);
    if (rc) return rc;
    memset(v->elapsed, 0, sizeof *v->elapsed * (size_t)v->B);
    memset(v->ep_return, 0, sizeof *v->ep_return * (size_t)v->B);
    v->was_reset = 1;
    return 0;
  }
  env__opt kv[ENV__MAX_OPTS];
  int n;
  int rc = env__reset_options_parse(t, v->states, v->scratch, options, kv, &n, "env_vec_reset_each",
                                    err);
  if (rc) return rc;
  size_t ob = env_space_bytes(&t->spec.obs);
  for (int i = 0; i < v->B; i++) {
    if (!reseed || reseed[i]) shoal_rng_seed(&v->rngs[i], seeds[i]);
    env__reset_with(t, (char *)v->states + (size_t)i * v->stride, v->scratch, v->obs_tmp,
                    &v->rngs[i], kv, n, (char *)obs + (size_t)i * ob);
    v->elapsed[i] = 0;
    v->ep_return[i] = 0.0;
  }
  v->was_reset = 1;
  return 0;
}

int env_vec_get_state(const env_vec *v, int i, double *out, int cap, shoal_error *err) {
  if (i < 0 || i >= v->B)
    return shoal_error_set(err, SHOAL_ERANGE, "env_vec_get_state: '%s': copy %d of %d", v->spec->id,
                           i, v->B);
  if (v->be) return v->be->get_state(v->be_self, i, out, cap, err);
  if (i < 0 || i >= v->B)
    return shoal_error_set(err, SHOAL_ERANGE, "env_vec_get_state: '%s': copy %d of %d",
                           v->type->spec.id, i, v->B);
  return env__state_get(v->type, (const char *)v->states + (size_t)i * v->stride, out, cap,
                        "env_vec_get_state", err);
}

int env_vec_set_state(env_vec *v, int i, const double *in, int n, shoal_error *err) {
  if (v->be)
    return shoal_error_set(err, SHOAL_ENOTSUP, "env_vec_set_state: '%s' has no float state",
                           v->spec->id);
  if (i < 0 || i >= v->B)
    return shoal_error_set(err, SHOAL_ERANGE, "env_vec_set_state: '%s': copy %d of %d",
                           v->type->spec.id, i, v->B);
  return env__state_set(v->type, (char *)v->states + (size_t)i * v->stride, v->was_reset, in, n,
                        "env_vec_set_state", "env_vec_reset", err);
}

static void log_episode(env_vec *v, int i, int length, double ret, int truncated) {
  if (v->log_count == v->log_cap) {
    v->log_head = (v->log_head + 1) % v->log_cap;
    v->log_count--;
    v->dropped++;
  }
  int at = (v->log_head + v->log_count) % v->log_cap;
  v->log[at] = (env_episode){i, length, ret, truncated};
  v->log_count++;
  v->episodes++;
  v->recent_ret[v->recent_i] = ret;
  v->recent_len[v->recent_i] = length;
  v->recent_i = (v->recent_i + 1) % RECENT;
  if (v->recent_n < RECENT) v->recent_n++;
}

static int builtin_step(env_vec *v, const void *actions, const env_vec_out *out);

/* A backend's step, then the bookkeeping the built-in loop does inline: rewards to
 * float, returns in double, lengths, and the ended copies' totals for the log. */
static int backend_step(env_vec *v, const void *actions, const env_vec_out *out, shoal_error *err) {
  int rc = v->be->step(v->be_self, actions, 1, out->obs, v->be_reward, out->terminated,
                       out->truncated, out->final_obs, err);
  if (rc) return rc;
  for (int i = 0; i < v->B; i++) {
    double r = v->be_reward[i], ret = v->ep_return[i] + r;
    int el = ++v->elapsed[i];
    out->reward[i] = (float)r;
    if (out->terminated[i] | out->truncated[i]) {
      v->done_return[i] = ret;
      v->done_length[i] = el;
      ret = 0.0;
      v->elapsed[i] = 0;
    }
    v->ep_return[i] = ret;
  }
  return 0;
}

int env_vec_step(env_vec *v, const void *actions, const env_vec_out *out, shoal_error *err) {
  const env_spec *sp = v->spec;
  if (!actions || !out || !out->obs || !out->reward || !out->terminated || !out->truncated)
    return shoal_error_set(err, SHOAL_EINVAL, "env_vec_step: '%s': NULL actions or output buffer",
                           sp->id);
  if (out->final_obs == out->obs)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "env_vec_step: '%s': final_obs and obs must be different buffers",
                           sp->id);
  if (!v->was_reset)
    return shoal_error_set(err, SHOAL_ESTATE, "env_vec_step: '%s': call env_vec_reset first",
                           sp->id);
  int rc = env__check_actions(sp, actions, v->B, "env_vec_step", err);
  if (rc) return rc;
  if (v->be) {
    if ((rc = backend_step(v, actions, out, err))) return rc;
  } else {
    rc = builtin_step(v, actions, out);
  }
  v->steps += (uint64_t)v->B;
  /* Episode bookkeeping: a scan of the flags, cheaper than sharing the log with threads. */
  const uint8_t *te = out->terminated, *tr = out->truncated;
  for (int i = 0; i < v->B; i++)
    if (__builtin_expect(te[i] | tr[i], 0))
      log_episode(v, i, v->done_length[i], v->done_return[i], tr[i] && !te[i]);
  return 0;
}

/* The built-in kinds' step: the kind's vec_step (or the generic loop) over the
 * threads' chunks. Can't fail (actions were checked). */
static int builtin_step(env_vec *v, const void *actions, const env_vec_out *out) {
  env__batch b = {
      .type = v->type,
      .states = v->states,
      .state_size = v->stride,
      .rngs = v->rngs,
      .elapsed = v->elapsed,
      .ep_return = v->ep_return,
      .done_return = v->done_return,
      .done_length = v->done_length,
      .max_steps = v->max_steps,
      .actions = actions,
      .obs = out->obs,
      .reward = out->reward,
      .terminated = out->terminated,
      .truncated = out->truncated,
      .final_obs = out->final_obs,
  };
  if (v->nthreads <= 1) {
    run_range(v, &b, 0, v->B);
    return 0;
  }
  int timed = 0, par = v->force >= 0 ? v->force : env__pace_choose(&v->pace, &timed);
  uint64_t t0 = timed ? now_ns() : 0;
  if (par) {
    hand_off(v, &b);
  } else {
    run_range(v, &b, 0, v->B);
  }
  if (timed) {
    uint64_t t1 = now_ns();
    env__pace_record(&v->pace, t1 > t0 ? (double)(t1 - t0) : 1.0);
  }
  v->mode_steps[par]++;
  return 0;
}

double env_vec_parallel_share(const env_vec *v) {
  uint64_t all = v->mode_steps[0] + v->mode_steps[1];
  return all ? (double)v->mode_steps[1] / (double)all : 0.0;
}

int env__vec_step_one(env_vec *v, const void *action, void *obs, double *reward, uint8_t *term,
                      uint8_t *trunc, shoal_error *err) {
  return v->be->step(v->be_self, action, 0, obs, reward, term, trunc, NULL, err);
}

int env_vec_episodes(env_vec *v, env_episode *out, int cap) {
  int n = 0;
  while (n < cap && v->log_count > 0) {
    out[n++] = v->log[v->log_head];
    v->log_head = (v->log_head + 1) % v->log_cap;
    v->log_count--;
  }
  return n;
}

void env_vec_get_stats(const env_vec *v, env_vec_stats *st) {
  st->steps = v->steps;
  st->episodes = v->episodes;
  st->dropped = v->dropped;
  if (v->recent_n == 0) {
    st->mean_return_100 = NAN;
    st->mean_length_100 = NAN;
    return;
  }
  double r = 0, l = 0;
  for (int k = 0; k < v->recent_n; k++) {
    r += v->recent_ret[k];
    l += v->recent_len[k];
  }
  st->mean_return_100 = r / v->recent_n;
  st->mean_length_100 = l / v->recent_n;
}

int env_vec_render(const env_vec *v, int i, uint8_t *rgb, shoal_error *err) {
  const env_spec *sp = v->spec;
  if (i < 0 || i >= v->B)
    return shoal_error_set(err, SHOAL_ERANGE, "env_vec_render: '%s': copy %d of %d", sp->id, i,
                           v->B);
  if (v->be) {
    if (!v->was_reset)
      return shoal_error_set(err, SHOAL_ESTATE, "env_vec_render: '%s': call env_vec_reset first",
                             sp->id);
    return v->be->render(v->be_self, i, rgb, err);
  }
  if (!v->type->render)
    return shoal_error_set(err, SHOAL_ENOTSUP, "env_vec_render: '%s' has no renderer", sp->id);
  if (!v->was_reset)
    return shoal_error_set(err, SHOAL_ESTATE, "env_vec_render: '%s': call env_vec_reset first",
                           sp->id);
  v->type->render((const char *)v->states + (size_t)i * v->stride, rgb);
  return 0;
}
