/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/pool.c — nn's own worker threads for the work that OpenBLAS's pool does not
 * run: nn's convolution kernels (packing, micro-kernels, the NCHW writes). The caller
 * runs task 0.. with the workers; tasks are taken from an atomic counter so uneven
 * tasks balance. Workers spin briefly after a job (layers follow each other within
 * microseconds) and then sleep on a condition variable, so an idle model costs nothing.
 *
 * One job at a time: nn's layers run one after another, and a model is used by one
 * thread at a time. A job from a second thread (two models used side by side) while the
 * pool is busy runs on its caller alone.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "nn/cpu/cpu.h"

#define NN__POOL_MAX 16 /* worker threads, beyond the caller */
#define NN__POOL_SPIN 2000 /* sched_yield()s, about a millisecond */

static struct {
  pthread_mutex_t run_mu; /* one job at a time */
  pthread_mutex_t mu;
  pthread_cond_t wake;
  int started;           /* workers created */
  int want;              /* workers that take part in the current job */
  atomic_ulong gen;      /* bumped per job */
  atomic_int next;       /* next task index */
  atomic_int busy;       /* workers still in the current job */
  int n_tasks;
  void (*fn)(void *ctx, int task, int thread);
  void *ctx;
} g_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static void run_tasks(int thread) {
  for (;;) {
    int t = atomic_fetch_add(&g_pool.next, 1);
    if (t >= g_pool.n_tasks) break;
    g_pool.fn(g_pool.ctx, t, thread);
  }
}

/* The job generation when worker id was created: it takes part from the next one. */
static unsigned long g_seen0[NN__POOL_MAX + 1];

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg; /* 1.. */
  unsigned long seen = g_seen0[id];
  for (;;) {
    unsigned long g = atomic_load(&g_pool.gen);
    for (int i = 0; g == seen && i < NN__POOL_SPIN; i++) {
      sched_yield();
      g = atomic_load(&g_pool.gen);
    }
    if (g == seen) {
      pthread_mutex_lock(&g_pool.mu);
      while ((g = atomic_load(&g_pool.gen)) == seen) pthread_cond_wait(&g_pool.wake, &g_pool.mu);
      pthread_mutex_unlock(&g_pool.mu);
    }
    seen = g;
    /* Every worker acknowledges every job, taking part or not, so none can still be
     * looking at a finished job's fields when the next one is set up. */
    if (id < g_pool.want) run_tasks(id);
    atomic_fetch_sub(&g_pool.busy, 1);
  }
  return NULL;
}

/* A forked child has none of the parent's workers: it starts its own on its first job
 * (shoal's launchers fork processes that may have used nn already). */
static void pool_atfork_child(void) {
  pthread_mutex_init(&g_pool.run_mu, NULL);
  pthread_mutex_init(&g_pool.mu, NULL);
  pthread_cond_init(&g_pool.wake, NULL);
  g_pool.started = 0;
}

static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static void atfork_init(void) { pthread_atfork(NULL, NULL, pool_atfork_child); }

void nn__parallel_for(int n_tasks, void (*fn)(void *ctx, int task, int thread), void *ctx) {
  int T = nn__cpu_threads(), cap = nn__pool_max_threads();
  if (T > cap) T = cap;
  if (T > n_tasks) T = n_tasks;
  /* A job from another thread (a second model) holds the pool: run this one on the
   * caller alone (thread 0's scratch is the caller's model's own) rather than wait. */
  if (T <= 1 || pthread_mutex_trylock(&g_pool.run_mu)) {
    for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
    return;
  }
  pthread_once(&g_atfork_once, atfork_init);
  while (g_pool.started < T - 1) {
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    g_seen0[g_pool.started + 1] = atomic_load(&g_pool.gen);
    int rc = pthread_create(&th, &at, worker, (void *)(intptr_t)(g_pool.started + 1));
    pthread_attr_destroy(&at);
    if (rc) break; /* fewer threads: the caller does the rest */
    g_pool.started++;
  }
  if (T > g_pool.started + 1) T = g_pool.started + 1;
  g_pool.fn = fn, g_pool.ctx = ctx, g_pool.n_tasks = n_tasks, g_pool.want = T;
  atomic_store(&g_pool.next, 0);
  atomic_store(&g_pool.busy, g_pool.started);
  pthread_mutex_lock(&g_pool.mu);
  atomic_fetch_add(&g_pool.gen, 1);
  pthread_cond_broadcast(&g_pool.wake);
  pthread_mutex_unlock(&g_pool.mu);
  run_tasks(0);
  while (atomic_load(&g_pool.busy) > 0) sched_yield();
  pthread_mutex_unlock(&g_pool.run_mu);
}

/* One per core (at least 2, at most NN__POOL_MAX + 1), fixed at the first call: layers
 * size their per-thread scratch by it, so it must not change under a built model. */
static int g_cap;
static pthread_once_t g_cap_once = PTHREAD_ONCE_INIT;

static void cap_init(void) {
  long c = sysconf(_SC_NPROCESSORS_ONLN);
  g_cap = c < 2 ? 2 : c > NN__POOL_MAX + 1 ? NN__POOL_MAX + 1 : (int)c;
}

int nn__pool_max_threads(void) {
  pthread_once(&g_cap_once, cap_init);
  return g_cap;
}
