/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_replay_concurrent.c — many inserting threads and one sampling thread
 * on one memory. Every value of a step derives from its (stream, t), so each
 * sampled row is checked whole: its stacked frames, action, n-step return,
 * discount, next frames and index/generation must all agree with one step — a
 * torn or mislinked transition fails. Counts are exact once the writers join.
 * Run under ThreadSanitizer too (-DSHOAL_SANITIZE=thread). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "replay/replay.h"

enum { WRITERS = 4, STREAMS_PER = 2, STEPS = 12000, D = 64, EP = 17, BATCH = 64, CAP = 512 };
#define GAMMA 0.5

static int64_t id_of(int stream, int64_t t) { return ((int64_t)stream << 32) | t; }
static int ended(int64_t t) { return t % EP == EP - 1; }
static int terminal(int64_t t) { return ended(t) && (t / EP) % 2 == 0; }
static float reward_of(int64_t t) { return (float)(t % 13); }
static int32_t action_of(int stream, int64_t t) { return (int32_t)(t * 3 + stream); }
static void frame(int64_t id, int64_t *f) {
  for (int j = 0; j < D; j++) f[j] = id * 4 + j;
}
static void final_frame(int64_t id, int64_t *f) {
  for (int j = 0; j < D; j++) f[j] = -(id * 4 + j) - 1;
}

typedef struct shared {
  replay *r;
  atomic_int writers_left;
  atomic_llong calls; /* successful sample calls: writers keep at most 100 steps ahead */
  int64_t steps_per_stream;
} shared;

typedef struct writer {
  shared *sh;
  int which;
  int fails;
  uint64_t tails;
} writer;

static void *writer_main(void *arg) {
  writer *w = arg;
  shoal_rng rng;
  shoal_rng_seed(&rng, 100 + (uint64_t)w->which);
  int64_t t[STREAMS_PER] = {0};
  int64_t obs[48][D], fin[48][D];
  int32_t act[48];
  float rew[48];
  uint8_t te[48], tr[48];
  for (int64_t done = 0; done < STEPS;) {
    int si = (int)shoal_rng_below(&rng, STREAMS_PER);
    int stream = w->which * STREAMS_PER + si;
    int n = 1 + (int)shoal_rng_below(&rng, 40);
    if (done + n > STEPS) n = (int)(STEPS - done);
    int k = 0;
    for (int i = 0; i < n; i++) {
      int64_t tt = t[si] + i, id = id_of(stream, tt);
      frame(id, obs[i]);
      act[i] = action_of(stream, tt);
      rew[i] = reward_of(tt);
      te[i] = (uint8_t)terminal(tt);
      tr[i] = (uint8_t)(ended(tt) && !terminal(tt));
      if (ended(tt)) final_frame(id, fin[k++]);
    }
    replay_steps s = {.n = n,
                      .cols = {obs, act},
                      .reward = rew,
                      .terminated = te,
                      .truncated = tr,
                      .final_obs = fin};
    /* Interleave for sure: do not run ahead of the sampler. */
    while (done > 200 + 100 * atomic_load(&w->sh->calls)) sched_yield();
    w->fails += replay_insert(w->sh->r, stream, &s, NULL) != 0;
    w->tails += (uint64_t)k;
    t[si] += n;
    done += n;
  }
  atomic_fetch_sub(&w->sh->writers_left, 1);
  return NULL;
}

typedef struct sbuf {
  int64_t obs[BATCH][2][D], nobs[BATCH][2][D];
  int32_t act[BATCH];
  float ret[BATCH], disc[BATCH], w[BATCH];
  int32_t m[BATCH];
  int64_t idx[BATCH];
  uint64_t gen[BATCH];
} sbuf;

/* Checks one sampled row whole; returns 0 when it is one consistent step. */
static int row_ok(const sbuf *b, int i, int64_t cap) {
  int64_t id = b->obs[i][1][0] / 4;
  int stream = (int)(id >> 32);
  int64_t t = id & 0xffffffff;
  int64_t f[D], g[D];
  frame(id, f);
  if (memcmp(b->obs[i][1], f, sizeof f)) return 1;
  frame(t % EP == 0 ? id : id - 1, g); /* the first frame of an episode repeats */
  if (memcmp(b->obs[i][0], g, sizeof g)) return 2;
  if (b->act[i] != action_of(stream, t)) return 3;
  if (b->idx[i] != (int64_t)(b->gen[i] % (uint64_t)cap)) return 4;
  double R, disc;
  int64_t last; /* the step whose successor is next_obs */
  if (ended(t)) {
    R = reward_of(t);
    disc = terminal(t) ? 0 : GAMMA;
    last = t;
  } else {
    R = reward_of(t) + GAMMA * reward_of(t + 1);
    disc = ended(t + 1) && terminal(t + 1) ? 0 : GAMMA * GAMMA;
    last = t + 1;
  }
  if (b->ret[i] != (float)R || b->disc[i] != (float)disc) return 5;
  if (b->m[i] != (int)(last - t + 1)) return 6;
  frame(id_of(stream, last), f);
  if (memcmp(b->nobs[i][0], f, sizeof f)) return 7;
  if (ended(last))
    final_frame(id_of(stream, last), g);
  else
    frame(id_of(stream, last + 1), g);
  if (memcmp(b->nobs[i][1], g, sizeof g)) return 8;
  return 0;
}

/* Samples a memory that no one writes and checks every row. */
static void check_quiet(replay *r, sbuf *b, replay_batch *out, int64_t cap) {
  replay_sample_args a = {.batch = BATCH, .n_step = 2, .gamma = GAMMA, .beta = 0.4};
  shoal_rng rng;
  shoal_rng_seed(&rng, 6);
  for (int k = 0; k < 20; k++) {
    assert_int_equal(replay_sample(r, &rng, &a, out, NULL), 0);
    for (int i = 0; i < BATCH; i++) assert_int_equal(row_ok(b, i, cap), 0);
  }
}

/* save_every > 0: the sampling thread also saves the memory every that many calls
 * while the writers run; the last file is loaded afterwards and checked. */
static void run(replay_kind kind, int64_t slack, int save_every) {
  replay_config c = {.kind = kind,
                     .capacity = 4096,
                     .streams = WRITERS * STREAMS_PER,
                     .ncols = 2,
                     .obs_column = "obs",
                     .frame_stack = 2,
                     .alpha = 0.6,
                     .eps = 1e-3,
                     .writer_slack = slack};
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_I64, .ndim = 1, .shape = {D}};
  c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I32};
  shared sh = {0};
  assert_int_equal(replay_create(&c, &sh.r, NULL), 0);
  atomic_store(&sh.writers_left, WRITERS);
  writer ws[WRITERS];
  pthread_t th[WRITERS];
  for (int i = 0; i < WRITERS; i++) {
    ws[i] = (writer){.sh = &sh, .which = i};
    assert_int_equal(pthread_create(&th[i], NULL, writer_main, &ws[i]), 0);
  }
  sbuf *b = calloc(1, sizeof *b);
  replay_batch out = {.cols = {b->obs, b->act},
                      .next_obs = b->nobs,
                      .reward = b->ret,
                      .discount = b->disc,
                      .steps = b->m,
                      .weight = b->w,
                      .index = b->idx,
                      .generation = b->gen};
  replay_sample_args a = {.batch = BATCH, .n_step = 2, .gamma = GAMMA, .beta = 0.4};
  shoal_rng rng;
  shoal_rng_seed(&rng, 5);
  /* No assert may fire while the writers run (they would be left spinning): count,
   * and check after the join. */
  uint64_t sampled = 0, calls = 0, during = 0, bad = 0, saves = 0, update_fails = 0, save_fails = 0;
  char path[64];
  snprintf(path, sizeof path, "/tmp/shoal_replay_conc_%d.rpl", (int)getpid());
  float td[BATCH];
  int first_bad = 0;
  for (int final = 0; final < 50;) {
    int writing = atomic_load(&sh.writers_left) > 0;
    if (!writing) final++; /* a few more once the writers are done */
    if (replay_sample(sh.r, &rng, &a, &out, NULL) != 0) continue;
    calls++;
    atomic_fetch_add(&sh.calls, 1);
    during += (uint64_t)writing;
    sampled += BATCH;
    for (int i = 0; i < BATCH; i++) {
      int why = row_ok(b, i, c.capacity);
      if (why && !first_bad) first_bad = why;
      bad += why != 0;
      td[i] = (float)(b->gen[i] % 7);
    }
    if (kind == REPLAY_PRIORITIZED)
      update_fails += replay_update_priorities(sh.r, BATCH, b->idx, b->gen, td, NULL) != 0;
    if (save_every && writing && calls % (uint64_t)save_every == 0) {
      shoal_error err = {0};
      int rc = replay_save(sh.r, path, &err);
      if (rc) print_message("save: %s\n", err.msg);
      save_fails += rc != 0;
      saves++;
    }
  }
  uint64_t tails = 0;
  for (int i = 0; i < WRITERS; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(ws[i].fails, 0);
    tails += ws[i].tails;
  }
  assert_int_equal(update_fails, 0);
  assert_int_equal(save_fails, 0);
  if (bad) print_message("%llu bad rows, first reason %d\n", (unsigned long long)bad, first_bad);
  assert_int_equal(bad, 0);
  replay_stats st;
  replay_get_stats(sh.r, &st);
  print_message(
      "%s slack %lld: %llu sample calls, %llu while writing, %llu rejected draws, %llu "
      "writer waits, %llu stale updates\n",
      kind ? "per" : "uniform", (long long)slack, (unsigned long long)calls,
      (unsigned long long)during, (unsigned long long)st.rejected_draws,
      (unsigned long long)st.writer_waits, (unsigned long long)st.stale_updates);
  assert_true(during >= 100); /* the sampler really ran against the writers */
  assert_int_equal(st.inserted_steps, (uint64_t)WRITERS * STEPS);
  assert_int_equal(st.inserted_tails, tails);
  assert_int_equal(st.held, c.capacity);
  assert_int_equal(st.sampled, sampled);
  if (kind == REPLAY_PRIORITIZED) assert_true(st.priority_total > 0);
  check_quiet(sh.r, b, &out, c.capacity);
  if (save_every) {
    /* A file saved while four threads inserted loads into a consistent memory. */
    assert_true(saves > 0);
    replay *r2 = NULL;
    assert_int_equal(replay_create(&c, &r2, NULL), 0);
    shoal_error err = {0};
    int rc = replay_load(r2, path, &err);
    if (rc) print_message("load: %s\n", err.msg);
    assert_int_equal(rc, 0);
    check_quiet(r2, b, &out, c.capacity);
    replay_destroy(r2);
    unlink(path);
  }
  free(b);
  replay_destroy(sh.r);
}

static void test_uniform_writers_with_slack(void **state) { run(REPLAY_UNIFORM, -1, 0); }
static void test_uniform_writers_no_slack(void **state) { run(REPLAY_UNIFORM, 0, 0); }
static void test_prioritized_writers_with_slack(void **state) { run(REPLAY_PRIORITIZED, -1, 0); }
static void test_prioritized_writers_no_slack(void **state) { run(REPLAY_PRIORITIZED, 0, 0); }
static void test_save_while_writing(void **state) { run(REPLAY_PRIORITIZED, -1, 25); }

typedef struct same_stream {
  replay *r;
  atomic_int go;
  int estate, ok;
} same_stream;

static void *same_stream_main(void *arg) {
  same_stream *s = arg;
  int64_t obs[32][D] = {{0}};
  int32_t act[32] = {0};
  float rew[32] = {0};
  uint8_t z[32] = {0};
  replay_steps st = {.n = 32, .cols = {obs, act}, .reward = rew, .terminated = z};
  while (!atomic_load(&s->go)) {
  }
  for (int i = 0; i < 2000; i++) {
    int rc = replay_insert(s->r, 0, &st, NULL);
    if (rc == SHOAL_ESTATE)
      s->estate++;
    else if (rc == 0)
      s->ok++;
  }
  return NULL;
}

static void test_same_stream_from_two_threads_refused(void **state) {
  /* Two threads share stream 0: each call either succeeds or is refused as a
   * collision; no call corrupts the memory, and the counts add up. */
  replay_config c = {.kind = REPLAY_UNIFORM,
                     .capacity = 1024,
                     .streams = 1,
                     .ncols = 2,
                     .obs_column = "obs",
                     .writer_slack = 0};
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_I64, .ndim = 1, .shape = {D}};
  c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I32};
  same_stream s[2] = {{0}, {0}};
  replay *r = NULL;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  pthread_t th[2];
  for (int i = 0; i < 2; i++) {
    s[i].r = r;
    assert_int_equal(pthread_create(&th[i], NULL, same_stream_main, &s[i]), 0);
  }
  atomic_store(&s[0].go, 1);
  atomic_store(&s[1].go, 1);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  replay_stats st;
  replay_get_stats(r, &st);
  assert_int_equal(s[0].ok + s[0].estate, 2000);
  assert_int_equal(s[1].ok + s[1].estate, 2000);
  assert_int_equal(st.inserted_steps, 32u * (uint64_t)(s[0].ok + s[1].ok));
  replay_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uniform_writers_with_slack),
      cmocka_unit_test(test_uniform_writers_no_slack),
      cmocka_unit_test(test_prioritized_writers_with_slack),
      cmocka_unit_test(test_prioritized_writers_no_slack),
      cmocka_unit_test(test_save_while_writing),
      cmocka_unit_test(test_same_stream_from_two_threads_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
