/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/pool.c — nn's own worker threads for the work that OpenBLAS's pool does not
 * run: nn's convolution kernels (packing, micro-kernels, the NCHW writes). The caller
 * runs task 0.. with the workers; tasks are taken from an atomic counter so uneven
 * tasks balance. Workers spin briefly after a job (layers follow each other within
 * microseconds) and then sleep on a condition variable, so an idle model costs nothing.
 *
 * One job at a time: nn's layers run one after another, and a model is used by one
 * thread at a time. Jobs from two threads (two models trained side by side) are
 * serialised by a mutex rather than interleaved.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

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

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg; /* 1.. */
  unsigned long seen = 0;
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

void nn__parallel_for(int n_tasks, void (*fn)(void *ctx, int task, int thread), void *ctx) {
  int T = nn__cpu_threads();
  if (T > NN__POOL_MAX + 1) T = NN__POOL_MAX + 1;
  if (T > n_tasks) T = n_tasks;
  if (T <= 1) {
    for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
    return;
  }
  pthread_mutex_lock(&g_pool.run_mu);
  while (g_pool.started < T - 1) {
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
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

int nn__pool_max_threads(void) { return NN__POOL_MAX + 1; }
