/* SPDX-License-Identifier: Apache-2.0 */
/*
 * benchmarks/replay_ops.c — how fast the transition memory takes inserts and
 * gives samples at once: 1 or 2 inserting threads (batches of 64 steps, as the rpc
 * threads insert decoded SampleBatches) while one thread samples batches of B with
 * 3-step returns (and, prioritized, updates the sampled priorities as a learner
 * does), for CartPole-sized steps (obs 4 x f32, action i64) and Atari-sized ones
 * (one 84x84 u8 frame per step, stacks of 4 gathered at sample time, so a sample
 * copies 8 frames: obs and next obs).
 *
 * value = steps inserted + transitions sampled, per second.
 * CartPole rows: baseline = the goal, 5M/s.
 * Atari rows: ratio = bytes the memory moved per second (frames in, stacks out)
 * over what plain memcpy moves in the same pattern (the same threads: writers
 * copying 64 frames into a ring, a reader copying 8 random frames per sample) in
 * this run; baseline = the transitions/s that ratio implies for memcpy.
 *
 *   build/benchmarks/replay_ops [seconds per row, default 0.8]
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replay/replay.h"

enum { INS = 64, EPISODE = 500, STACK = 4, FRAME = 84 * 84, NSTEP = 3 };

typedef struct size_spec {
  const char *name;
  int atari;
  int64_t capacity;
} size_spec;

typedef struct writer {
  replay *r;
  int stream;
  atomic_int *stop;
  uint64_t steps;
  int atari;
  /* one insert's data, made once */
  void *obs, *act, *fin;
  float rew[INS], prio[INS];
  uint8_t term[INS];
  int prioritized;
  pthread_mutex_t *global; /* the comparison: every call under one lock */
  double rate;             /* steps/s this writer offers; 0: as fast as it can */
} writer;

static void *writer_main(void *arg) {
  writer *w = arg;
  uint64_t t = 0;
  shoal_rng rng;
  shoal_rng_seed(&rng, (uint64_t)w->stream + 1);
  double t0 = shoal_now_s();
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    if (w->rate > 0) {
      /* Paced: an actor fleet offers a bounded stream. */
      double ahead = (double)t / w->rate - (shoal_now_s() - t0);
      if (ahead > 0) {
        struct timespec ts = {0, (long)(ahead * 1e9)};
        nanosleep(&ts, NULL);
        continue;
      }
    }
    for (int i = 0; i < INS; i++) w->term[i] = (t + (uint64_t)i) % EPISODE == EPISODE - 1;
    replay_steps s = {.n = INS,
                      .cols = {w->obs, w->act},
                      .reward = w->rew,
                      .terminated = w->term,
                      .final_obs = w->fin};
    shoal_error err = {0};
    if (w->global) pthread_mutex_lock(w->global);
    int rc = replay_insert(w->r, w->stream, &s, &err);
    if (w->global) pthread_mutex_unlock(w->global);
    if (rc) {
      fprintf(stderr, "replay_ops: insert: %s\n", err.msg);
      exit(1);
    }
    t += INS;
  }
  w->steps = t;
  return NULL;
}

static void writer_init(writer *w, replay *r, int stream, atomic_int *stop, int atari) {
  memset(w, 0, sizeof *w);
  w->r = r;
  w->stream = stream;
  w->stop = stop;
  w->atari = atari;
  size_t ob = atari ? FRAME : 4 * sizeof(float);
  w->obs = malloc(INS * ob);
  w->act = malloc(INS * sizeof(int64_t));
  w->fin = malloc(ob);
  uint8_t *o = w->obs;
  for (size_t i = 0; i < INS * ob; i++) o[i] = (uint8_t)(i * 7 + (size_t)stream);
  if (!atari)
    for (int i = 0; i < INS * 4; i++) ((float *)w->obs)[i] = 0.01f * (float)i;
  memset(w->fin, 1, ob);
  for (int i = 0; i < INS; i++) {
    ((int64_t *)w->act)[i] = i % 2;
    w->rew[i] = 1.0f;
  }
}

static void writer_free(writer *w) {
  free(w->obs);
  free(w->act);
  free(w->fin);
}

/* The memcpy baseline: the same threads, the same copies, no memory. */
typedef struct copier {
  uint8_t *ring; /* capacity frames */
  int64_t cap;
  atomic_int *stop;
  uint64_t frames; /* frames copied */
  int reader;
  int B;
} copier;

static void *copier_main(void *arg) {
  copier *c = arg;
  uint8_t *src = malloc((size_t)INS * FRAME), *dst = NULL;
  memset(src, 3, (size_t)INS * FRAME);
  shoal_rng rng;
  shoal_rng_seed(&rng, 99);
  int64_t pos = 0;
  if (c->reader) dst = malloc((size_t)c->B * 2 * STACK * FRAME);
  while (!atomic_load_explicit(c->stop, memory_order_relaxed)) {
    if (c->reader) {
      for (int b = 0; b < c->B; b++) {
        int64_t at = (int64_t)shoal_rng_below(&rng, (uint64_t)(c->cap - 8));
        for (int f = 0; f < 2 * STACK; f++)
          memcpy(dst + ((size_t)b * 2 * STACK + (size_t)f) * FRAME,
                 c->ring + (size_t)(at + f % STACK + f / STACK) * FRAME, FRAME);
      }
      c->frames += (uint64_t)c->B * 2 * STACK;
    } else {
      if (pos + INS > c->cap) pos = 0;
      memcpy(c->ring + (size_t)pos * FRAME, src, (size_t)INS * FRAME);
      pos += INS;
      c->frames += INS;
    }
  }
  free(src);
  free(dst);
  return NULL;
}

/* Bytes memcpy moves with nw writer threads and one reader of batch B in about
 * secs; *elapsed gets the exact time. */
static double memcpy_bytes(uint8_t *ring, int64_t cap, int nw, int B, double secs,
                           double *elapsed) {
  atomic_int stop = 0;
  copier cs[3];
  pthread_t th[3];
  for (int i = 0; i <= nw; i++) {
    cs[i] = (copier){.ring = ring, .cap = cap, .stop = &stop, .reader = i == nw, .B = B};
    pthread_create(&th[i], NULL, copier_main, &cs[i]);
  }
  double t0 = shoal_now_s();
  while (shoal_now_s() - t0 < secs) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  atomic_store(&stop, 1);
  uint64_t frames = 0;
  for (int i = 0; i <= nw; i++) {
    pthread_join(th[i], NULL);
    frames += cs[i].frames;
  }
  *elapsed = shoal_now_s() - t0;
  return (double)frames * FRAME;
}

static replay *make_memory(const size_spec *sz, replay_kind kind) {
  replay_config c = {.kind = kind,
                     .capacity = sz->capacity,
                     .streams = 4,
                     .ncols = 2,
                     .obs_column = "obs",
                     .frame_stack = sz->atari ? STACK : 1,
                     .alpha = 0.6,
                     .eps = 1e-6,
                     .writer_slack = -1};
  if (sz->atari)
    c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_U8, .ndim = 2, .shape = {84, 84}};
  else
    c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_F32, .ndim = 1, .shape = {4}};
  c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I64};
  replay *r = NULL;
  shoal_error err = {0};
  if (replay_create(&c, &r, &err)) {
    fprintf(stderr, "replay_ops: create: %s\n", err.msg);
    exit(1);
  }
  /* Fill it, so rows measure a full ring that overwrites as it goes. */
  atomic_int stop = 0;
  writer w;
  writer_init(&w, r, 3, &stop, sz->atari);
  replay_stats st;
  do {
    replay_steps s = {.n = INS,
                      .cols = {w.obs, w.act},
                      .reward = w.rew,
                      .terminated = w.term,
                      .final_obs = w.fin};
    replay_insert(r, 3, &s, NULL);
    replay_get_stats(r, &st);
  } while (st.held < sz->capacity);
  writer_free(&w);
  return r;
}

typedef struct row_result {
  double ins, smp, secs; /* steps inserted, transitions sampled, in secs */
} row_result;

static row_result run_row(replay *r, const size_spec *sz, int prioritized, int B, int nw,
                          double secs, pthread_mutex_t *global, double rate) {
  atomic_int stop = 0;
  writer ws[2];
  pthread_t th[2];
  for (int i = 0; i < nw; i++) {
    writer_init(&ws[i], r, i, &stop, sz->atari);
    ws[i].prioritized = prioritized;
    ws[i].global = global;
    ws[i].rate = rate;
  }
  size_t ob = sz->atari ? (size_t)STACK * FRAME : 4 * sizeof(float);
  uint8_t *obs = malloc((size_t)B * ob), *nobs = malloc((size_t)B * ob);
  int64_t *act = malloc((size_t)B * sizeof(int64_t)), *idx = malloc((size_t)B * sizeof(int64_t));
  uint64_t *gen = malloc((size_t)B * sizeof(uint64_t));
  float *ret = malloc((size_t)B * 4), *disc = malloc((size_t)B * 4), *w = malloc((size_t)B * 4),
        *td = malloc((size_t)B * 4);
  replay_batch out = {.cols = {obs, act},
                      .next_obs = nobs,
                      .reward = ret,
                      .discount = disc,
                      .weight = w,
                      .index = idx,
                      .generation = gen};
  replay_sample_args a = {.batch = B, .n_step = NSTEP, .gamma = 0.99, .beta = 0.4};
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  for (int i = 0; i < B; i++) td[i] = (float)shoal_rng_uniform(&rng);
  for (int i = 0; i < nw; i++) pthread_create(&th[i], NULL, writer_main, &ws[i]);
  uint64_t sampled = 0;
  double t0 = shoal_now_s(), t;
  shoal_error err = {0};
  do {
    if (global) pthread_mutex_lock(global);
    int rc = replay_sample(r, &rng, &a, &out, &err);
    if (!rc && prioritized) rc = replay_update_priorities(r, B, idx, gen, td, &err);
    if (global) pthread_mutex_unlock(global);
    if (rc) {
      fprintf(stderr, "replay_ops: sample or update: %s\n", err.msg);
      exit(1);
    }
    sampled += (uint64_t)B;
    t = shoal_now_s() - t0;
  } while (t < secs);
  atomic_store(&stop, 1);
  uint64_t inserted = 0;
  for (int i = 0; i < nw; i++) {
    pthread_join(th[i], NULL);
    inserted += ws[i].steps;
    writer_free(&ws[i]);
  }
  t = shoal_now_s() - t0;
  free(obs);
  free(nobs);
  free(act);
  free(idx);
  free(gen);
  free(ret);
  free(disc);
  free(w);
  free(td);
  return (row_result){(double)inserted, (double)sampled, t};
}

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 0.8;
  if (!(secs > 0)) secs = 0.8;
  const size_spec sizes[] = {{"cartpole", 0, 1 << 20}, {"atari", 1, 50000}};
  const int batches[] = {32, 256, 512};
  const char *kinds[] = {"uniform", "per"};
  printf(
      "replay_ops: inserting threads (64 steps per insert) and one sampling thread (%d-step "
      "returns; per: + priority updates), %.1f s per row\n",
      NSTEP, secs);
  for (int si = 0; si < 2; si++) {
    const size_spec *sz = &sizes[si];
    uint8_t *ring = NULL;
    if (sz->atari) {
      ring = malloc((size_t)sz->capacity * FRAME);
      memset(ring, 5, (size_t)sz->capacity * FRAME);
    }
    for (int k = 0; k < 2; k++) {
      replay *r = make_memory(sz, (replay_kind)k);
      printf("\n%s %s: capacity %lld, memory %.1f MiB\n", kinds[k], sz->name,
             (long long)sz->capacity,
             (double)replay_memory_bytes(replay_get_config(r)) / (1024.0 * 1024.0));
      printf("  %-34s %12s %12s %14s %12s %7s\n", "name", "inserts/s", "samples/s", "value",
             "baseline", "ratio");
      for (int nw = 1; nw <= 2; nw++)
        for (int bi = 0; bi < 3; bi++) {
          int B = batches[bi];
          /* Alternate the memory and the memcpy baseline in slices, so both see
           * the same load on a shared machine. */
          enum { SLICES = 4 };
          row_result rr = {0};
          double mc_bytes = 0, mc_secs = 0;
          for (int sl = 0; sl < SLICES; sl++) {
            row_result x = run_row(r, sz, k, B, nw, secs / SLICES, NULL, 0);
            rr.ins += x.ins;
            rr.smp += x.smp;
            rr.secs += x.secs;
            if (sz->atari) {
              double e = 0;
              mc_bytes += memcpy_bytes(ring, sz->capacity, nw, B, secs / (2 * SLICES), &e);
              mc_secs += e;
            }
          }
          rr.ins /= rr.secs;
          rr.smp /= rr.secs;
          double value = rr.ins + rr.smp, baseline, ratio;
          char name[64];
          snprintf(name, sizeof name, "replay.%s.%s.b%d.w%d", kinds[k], sz->name, B, nw);
          if (sz->atari) {
            /* Bytes moved: a frame in per step; 8 frames out per sample. */
            double bytes = rr.ins * FRAME + rr.smp * 2.0 * STACK * FRAME;
            ratio = bytes / (mc_bytes / mc_secs);
            baseline = value / ratio;
          } else {
            baseline = 5e6;
            ratio = value / baseline;
          }
          printf("  %-34s %12.0f %12.0f %14.0f %12.0f %7.2f\n", name, rr.ins, rr.smp, value,
                 baseline, ratio);
          printf("BENCH name=%s value=%.0f unit=transitions/s baseline=%.0f ratio=%.3f\n", name,
                 value, baseline, ratio);
          fflush(stdout);
        }
      {
        /* Against one global lock (every insert and sample under one mutex, as a
         * memory without the reserve/copy/publish scheme runs): two writers offer a
         * paced stream (an actor fleet: 1M CartPole or 25k Atari steps/s each) and
         * the figure is what the learner gets, sampled transitions per second.
         * Alternated in slices. (Unpaced, the mutex starves the sampler.) */
        pthread_mutex_t global = PTHREAD_MUTEX_INITIALIZER;
        int B = sz->atari ? 32 : 256;
        double rate = sz->atari ? 25000 : 1e6;
        row_result fr = {0}, lk = {0};
        for (int sl = 0; sl < 4; sl++) {
          row_result x = run_row(r, sz, k, B, 2, secs / 4, NULL, rate);
          fr.ins += x.ins;
          fr.smp += x.smp;
          fr.secs += x.secs;
          x = run_row(r, sz, k, B, 2, secs / 4, &global, rate);
          lk.ins += x.ins;
          lk.smp += x.smp;
          lk.secs += x.secs;
        }
        char name[80];
        snprintf(name, sizeof name, "replay.%s.%s.b%d.w2.paced.lockfree_vs_global", kinds[k],
                 sz->name, B);
        double v = fr.smp / fr.secs, g = lk.smp / lk.secs;
        printf("  %-34s %12.0f %12.0f\n", "  paced writers, one global lock", lk.ins / lk.secs, g);
        printf("  %-34s %12.0f %12.0f %14.0f %12.0f %7.2f\n", "  paced writers, lock-free",
               fr.ins / fr.secs, v, v, g, v / g);
        printf("BENCH name=%s value=%.0f unit=samples/s baseline=%.0f ratio=%.3f\n", name, v, g,
               v / g);
        /* And the ingest each achieved of the 2 x rate offered. */
        double vi = fr.ins / fr.secs, gi = lk.ins / lk.secs;
        printf("BENCH name=%s.ingest value=%.0f unit=inserts/s baseline=%.0f ratio=%.3f\n", name,
               vi, gi, vi / gi);
      }
      replay_stats st;
      replay_get_stats(r, &st);
      printf("  (rejected draws %llu, writer waits %llu for %.3f s, stale updates %llu)\n",
             (unsigned long long)st.rejected_draws, (unsigned long long)st.writer_waits,
             st.writer_wait_s, (unsigned long long)st.stale_updates);
      replay_destroy(r);
    }
    free(ring);
  }
  return 0;
}
