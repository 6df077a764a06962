/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Replay larger than memory (replay_config.memory_limit): the columns in a mapped spill
 * file, only the newest items resident.
 *
 *   same_samples     a prioritized memory with memory_limit at a quarter of its columns
 *                    and an in-memory one, given the same inserts, priority updates and
 *                    seeds, return the same batches bit for bit (index, generation,
 *                    weights, n-step returns, stacked frames, next observations), also
 *                    after the ring has wrapped twice and the old pages were released;
 *                    n-step 1, 3, 4 and 6 with 4-frame stacks
 *   chi_square       its sampling frequencies against P(i) = p_i / sum p over 40 groups
 *                    (Pearson, 39 dof, critical 72.05 at 0.001), as test_replay_per
 *   resident         the process's resident memory grows by about the limit, not by the
 *                    columns' size
 *   bad_spill_dir    a folder that cannot hold the file: a clear error
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
// cmocka after the standard headers
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay.h"

enum { FRAME = 1024, STREAMS = 4 };

static replay *make(int64_t cap, size_t limit, const char *dir) {
  replay_config c = {.kind = REPLAY_PRIORITIZED,
                     .capacity = cap,
                     .streams = STREAMS,
                     .ncols = 2,
                     .obs_column = "obs",
                     .frame_stack = 4,
                     .alpha = 0.6,
                     .eps = 1e-6,
                     .writer_slack = 0,
                     .memory_limit = limit,
                     .spill_dir = dir};
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_U8, .ndim = 1, .shape = {FRAME}};
  c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I32};
  replay *r = NULL;
  shoal_error err = {0};
  assert_int_equal(replay_create(&c, &r, &err), 0);
  return r;
}

/* Inserts `chunks` chunks of 50 steps per stream; frames carry (stream, step) so a wrong
 * or stale read shows; episodes end every 120 steps with a final observation. */
static void fill(replay *a, replay *b, int chunks, uint64_t *t) {
  static uint8_t obs[50 * FRAME], fin[50 * FRAME];
  int32_t act[50];
  float rew[50], prio[50];
  uint8_t term[50];
  shoal_error err = {0};
  for (int c = 0; c < chunks; c++)
    for (int s = 0; s < STREAMS; s++) {
      int ends = 0;
      for (int i = 0; i < 50; i++, (*t)++) {
        memset(obs + (size_t)i * FRAME, (int)((*t * 7 + (uint64_t)s) & 0xff), FRAME);
        obs[(size_t)i * FRAME] = (uint8_t)s;
        act[i] = (int32_t)(*t % 5);
        rew[i] = (float)(*t % 3);
        prio[i] = (float)(*t % 11) * 0.1f;
        term[i] = *t % 120 == 119;
        if (term[i]) memset(fin + (size_t)ends++ * FRAME, 0xee, FRAME);
      }
      replay_steps st = {.n = 50,
                         .cols = {obs, act},
                         .reward = rew,
                         .terminated = term,
                         .final_obs = fin,
                         .priority = prio};
      assert_int_equal(replay_insert(a, s, &st, &err), 0);
      if (b) assert_int_equal(replay_insert(b, s, &st, &err), 0);
    }
}

static void test_same_samples(void **state) {
  (void)state;
  const int64_t cap = 16384; /* 16 MiB of frames; the limit keeps 4 */
  replay *spill = make(cap, (size_t)cap * (FRAME + 4) / 4, NULL);
  replay *mem = make(cap, 0, NULL);
  enum { B = 32 };
  static uint8_t oa[B * 4 * FRAME], ob[B * 4 * FRAME], na[B * 4 * FRAME], nb[B * 4 * FRAME];
  int32_t aa[B], ab[B];
  float ra[B], rb[B], da[B], db[B], wa[B], wb[B], td[B];
  int64_t ia[B], ib[B];
  uint64_t ga[B], gb[B];
  shoal_rng r1, r2;
  shoal_rng_seed(&r1, 5);
  shoal_rng_seed(&r2, 5);
  shoal_error err = {0};
  uint64_t t = 0;
  replay_sample_args args = {.batch = B, .gamma = 0.99, .beta = 0.5};
  /* n-steps under, at and past the stack's 4 frames: a cold stack and its bootstrap
   * stack share frames, meet, or have frames between them (fetch_span's three reads) */
  static const int n_steps[] = {3, 1, 4, 6};
  for (int round = 0; round < 40; round++) {
    args.n_step = n_steps[round % 4];
    fill(spill, mem, 8, &t); /* 1600 steps a round: the ring wraps about 4 times */
    for (int k = 0; k < 20; k++) {
      replay_batch x = {.cols = {oa, aa},
                        .next_obs = na,
                        .reward = ra,
                        .discount = da,
                        .weight = wa,
                        .index = ia,
                        .generation = ga};
      replay_batch y = {.cols = {ob, ab},
                        .next_obs = nb,
                        .reward = rb,
                        .discount = db,
                        .weight = wb,
                        .index = ib,
                        .generation = gb};
      assert_int_equal(replay_sample(spill, &r1, &args, &x, &err), 0);
      assert_int_equal(replay_sample(mem, &r2, &args, &y, &err), 0);
      assert_memory_equal(ia, ib, sizeof ia);
      assert_memory_equal(ga, gb, sizeof ga);
      assert_memory_equal(wa, wb, sizeof wa);
      assert_memory_equal(ra, rb, sizeof ra);
      assert_memory_equal(da, db, sizeof da);
      assert_memory_equal(aa, ab, sizeof aa);
      assert_memory_equal(oa, ob, sizeof oa);
      assert_memory_equal(na, nb, sizeof na);
      for (int i = 0; i < B; i++) td[i] = (float)((ga[i] * 13) % 17) * 0.05f;
      assert_int_equal(replay_update_priorities(spill, B, ia, ga, td, &err), 0);
      assert_int_equal(replay_update_priorities(mem, B, ib, gb, td, &err), 0);
    }
  }
  replay_stats s;
  replay_get_stats(spill, &s);
  print_message("spill: %lld of %lld items resident, %llu sweeps\n", (long long)s.resident_items,
                (long long)cap, (unsigned long long)s.spill_sweeps);
  assert_true(s.resident_items < cap / 2);
  assert_true(s.spill_sweeps > 10);
  replay_destroy(spill);
  replay_destroy(mem);
}

static void test_chi_square(void **state) {
  (void)state;
  /* 40 groups of 100 items, group g at priority (g + 1) / 40 as |td|; cold ones too. */
  const int64_t cap = 4000;
  replay_config c = {.kind = REPLAY_PRIORITIZED,
                     .capacity = cap,
                     .streams = 1,
                     .ncols = 1,
                     .alpha = 1.0,
                     .eps = 1e-6,
                     .writer_slack = 0,
                     .memory_limit = (size_t)cap * FRAME / 4};
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_U8, .ndim = 1, .shape = {FRAME}};
  replay *r = NULL;
  shoal_error err = {0};
  assert_int_equal(replay_create(&c, &r, &err), 0);
  static uint8_t obs[100 * FRAME];
  float rew[100] = {0}, pr[100];
  uint8_t term[100] = {0};
  for (int g = 0; g < 40; g++) {
    for (int i = 0; i < 100; i++) pr[i] = (float)(g + 1) / 40.0f;
    memset(obs, g, sizeof obs);
    replay_steps st = {.n = 100, .cols = {obs}, .reward = rew, .terminated = term, .priority = pr};
    assert_int_equal(replay_insert(r, 0, &st, &err), 0);
  }
  enum { DRAWS = 40000 };
  double counts[40] = {0}, total = 0;
  for (int g = 0; g < 40; g++) total += 100.0 * (g + 1) / 40.0;
  shoal_rng rng;
  shoal_rng_seed(&rng, 11);
  replay_sample_args a = {.batch = 1, .n_step = 1, .gamma = 0.9, .beta = 0};
  uint8_t o[FRAME];
  uint64_t gen;
  for (int d = 0; d < DRAWS; d++) {
    replay_batch b = {.cols = {o}, .generation = &gen};
    assert_int_equal(replay_sample(r, &rng, &a, &b, &err), 0);
    /* The frame read back is the item's (items are numbered from 1), cold or not. */
    assert_int_equal(o[0], (int)((gen - 1) / 100));
    counts[o[0]]++;
  }
  double chi2 = 0;
  for (int g = 0; g < 40; g++) {
    double e = DRAWS * 100.0 * (g + 1) / 40.0 / total;
    chi2 += (counts[g] - e) * (counts[g] - e) / e;
  }
  print_message("spill chi2 = %.2f (critical 72.05)\n", chi2);
  assert_true(chi2 < 72.05);
  replay_destroy(r);
}

/* Resident set size of this process, bytes. */
static size_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t kb = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (!strncmp(line, "VmRSS:", 6)) kb = (size_t)atol(line + 6);
  }
  if (f) fclose(f);
  return kb * 1024;
}

static void test_resident(void **state) {
  (void)state;
  const int64_t cap = 65536; /* 64 MiB of frames, 16 MiB resident */
  size_t limit = (size_t)cap * (FRAME + 4) / 4;
  size_t before = rss_bytes();
  replay *r = make(cap, limit, NULL);
  uint64_t t = 0;
  shoal_rng rng;
  shoal_rng_seed(&rng, 3);
  shoal_error err = {0};
  enum { B = 64 };
  static uint8_t o[B * 4 * FRAME];
  replay_sample_args a = {.batch = B, .n_step = 1, .gamma = 0.9, .beta = 0.4};
  for (int round = 0; round < 80; round++) {
    fill(r, NULL, 4, &t); /* 800 steps */
    replay_batch b = {.cols = {o}};
    assert_int_equal(replay_sample(r, &rng, &a, &b, &err), 0);
  }
  replay_stats s;
  replay_get_stats(r, &s);
  size_t grown = rss_bytes() - before, cols = (size_t)cap * (FRAME + 4);
  size_t meta = replay_memory_bytes(replay_get_config(r)) - limit;
  print_message(
      "resident: +%.1f MB for %.1f MB of columns (limit %.1f MB, metadata %.1f MB), "
      "%lld items held\n",
      grown / 1e6, cols / 1e6, limit / 1e6, meta / 1e6, (long long)s.held);
  assert_true(s.held > cap * 9 / 10);
  /* The limit, the metadata, what was written since the last release (an eighth of the
   * limit), and allocator slack; samples read cold items without mapping them. */
  assert_true(grown < limit + meta + limit / 8 + (size_t)(8 << 20));
  assert_true(grown < cols / 2);
  replay_destroy(r);
}

static void test_bad_spill_dir(void **state) {
  (void)state;
  replay_config c = {.kind = REPLAY_UNIFORM,
                     .capacity = 1024,
                     .streams = 1,
                     .ncols = 1,
                     .memory_limit = 4096,
                     .spill_dir = "/nonexistent/spill"};
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_U8, .ndim = 1, .shape = {FRAME}};
  replay *r = NULL;
  shoal_error err = {0};
  assert_int_equal(replay_create(&c, &r, &err), SHOAL_EIO);
  assert_null(r);
  assert_non_null(strstr(err.msg, "/nonexistent/spill"));
  /* A limit above the columns' size: an ordinary in-memory replay. */
  c.memory_limit = (size_t)1 << 30;
  assert_int_equal(replay_create(&c, &r, &err), 0);
  replay_stats s;
  replay_get_stats(r, &s);
  assert_int_equal(s.resident_items, 1024);
  replay_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_samples),
      cmocka_unit_test(test_chi_square),
      cmocka_unit_test(test_resident),
      cmocka_unit_test(test_bad_spill_dir),
  };
  return cmocka_run_group_tests_name("replay_spill", tests, NULL, NULL);
}
