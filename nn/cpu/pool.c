/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/pool.c — nn's worker threads, the only ones nn runs: nn's convolution kernels
 * (packing, micro-kernels, the NCHW writes), the optimizer's chunks and the blocks of big
 * matrix products (OpenBLAS stays on one thread, nn/cpu/gemm.c). The caller
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

#define NN__POOL_MAX 16    /* worker threads, beyond the caller */
#define NN__POOL_SPIN 2000 /* sched_yield()s, about a millisecond */

/* Tasks are claimed from one word, (job << 32) | next task, by compare-and-swap: a worker
 * that wakes late, after its job is over, finds a newer job number there and claims
 * nothing, so the caller waits only for tasks in flight, never for a worker the
 * scheduler has not run yet (on a loaded machine that wait was a time slice per job). */
static struct {
  pthread_mutex_t run_mu; /* one job at a time */
  pthread_mutex_t mu;
  pthread_cond_t wake;
  int started;           /* workers created */
  atomic_ulong gen;      /* the current job's number, for waking workers */
  _Atomic uint64_t word; /* (job number << 32) | next task index */
  atomic_int done;       /* tasks of the current job finished */
  _Atomic int n_tasks;
  void (*_Atomic fn)(void *ctx, int task, int thread);
  void *_Atomic ctx;
  _Atomic uint32_t fjob; /* the job fn, ctx and n_tasks belong to; 0 while they change */
} g_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

/* Runs tasks of job number job until none are left or the job is over.
 *
 * fn, ctx and n_tasks are read as a seqlock on fjob: a worker that read word while job
 * was current may read them after the caller has begun the next job. A task index t it
 * read in job's word could then be tested against the next job's n_tasks and claimed by
 * a compare-and-swap that lands before the next job's word is stored: a task of the next
 * job run twice (a dW panel added twice) and a `done` counted for it, so the caller could
 * return before the task that really ran it had finished. Once fjob shows the fields are
 * job's, a successful claim of t < n_tasks proves the job was still open (task t was
 * unclaimed), so the caller cannot have changed them yet. */
static void run_tasks(uint32_t job, int thread) {
  for (;;) {
    uint64_t w = atomic_load(&g_pool.word);
    if ((uint32_t)(w >> 32) != job) return;
    if (atomic_load_explicit(&g_pool.fjob, memory_order_acquire) != job) {
      sched_yield(); /* the caller is publishing the next job */
      continue;
    }
    void (*fn)(void *, int, int) = atomic_load_explicit(&g_pool.fn, memory_order_relaxed);
    void *ctx = atomic_load_explicit(&g_pool.ctx, memory_order_relaxed);
    int n = atomic_load_explicit(&g_pool.n_tasks, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&g_pool.fjob, memory_order_relaxed) != job) continue;
    int t = (int)(uint32_t)w;
    if (t >= n) return;
    if (!atomic_compare_exchange_weak(&g_pool.word, &w, w + 1)) continue;
    fn(ctx, t, thread);
    atomic_fetch_add(&g_pool.done, 1);
  }
}

/* The job number when worker id was created: it takes part from the next one. */
static unsigned long g_seen0[NN__POOL_MAX + 1];

static void *worker(void *arg) {
  shoal_thread_name("shoal-nn");
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
    run_tasks((uint32_t)g, id);
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
  /* Workers beyond T (threads lowered since) may take tasks too: every thread index
   * below nn__pool_max_threads() has its scratch. */
  uint32_t job = (uint32_t)atomic_load(&g_pool.gen) + 1;
  if (!job) job = 1; /* 0 marks fjob's fields as changing */
  atomic_store_explicit(&g_pool.fjob, 0, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&g_pool.fn, fn, memory_order_relaxed);
  atomic_store_explicit(&g_pool.ctx, ctx, memory_order_relaxed);
  atomic_store_explicit(&g_pool.n_tasks, n_tasks, memory_order_relaxed);
  atomic_store_explicit(&g_pool.fjob, job, memory_order_release);
  atomic_store(&g_pool.done, 0);
  atomic_store(&g_pool.word, (uint64_t)job << 32); /* publishes the fields above */
  pthread_mutex_lock(&g_pool.mu);
  atomic_store(&g_pool.gen, job);
  pthread_cond_broadcast(&g_pool.wake);
  pthread_mutex_unlock(&g_pool.mu);
  run_tasks(job, 0);
  while (atomic_load(&g_pool.done) < n_tasks) sched_yield();
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
