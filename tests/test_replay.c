/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_replay.c — the transition memory: spec checks, n-step returns against
 * hand-computed episodes (termination, truncation, a successor arriving in a later
 * insert, wrap-around), frame stacks at episode starts, the named-column insert. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "replay/replay.h"

/* A CartPole-sized spec: obs f32 (D), action i64. Each step's obs[0] is its id. */
static replay_config small_config(replay_kind kind, int64_t cap, int D, int k) {
  replay_config c = {.kind = kind,
                     .capacity = cap,
                     .streams = 4,
                     .ncols = 2,
                     .obs_column = "obs",
                     .frame_stack = k,
                     .alpha = 0.6,
                     .eps = 1e-6,
                     .writer_slack = 0};
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_F32, .ndim = 1, .shape = {D}};
  c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I64};
  return c;
}

/* Inserts steps with ids ids[i] (obs = id, action = 10*id), rewards, flags, and
 * final obs ids for ended steps. */
static int put(replay *r, int stream, int n, const float *ids, const float *rew,
               const uint8_t *term, const uint8_t *trunc, const float *finals) {
  float obs[64];
  int64_t act[64];
  for (int i = 0; i < n; i++) {
    obs[i] = ids[i];
    act[i] = (int64_t)(10 * ids[i]);
  }
  replay_steps s = {.n = n,
                    .cols = {obs, act},
                    .reward = rew,
                    .terminated = term,
                    .truncated = trunc,
                    .final_obs = finals};
  shoal_error err = {0};
  int rc = replay_insert(r, stream, &s, &err);
  if (rc) print_message("insert: %s\n", err.msg);
  return rc;
}

typedef struct expect {
  float id, ret, disc, next;
  int m;
} expect;

/* Samples many batches and checks every row against the table; returns how many
 * distinct table rows were seen. A row not in the table fails the test. */
static int check_samples(replay *r, int n, double gamma, const expect *tab, int ntab,
                         uint64_t seed) {
  enum { B = 64 };
  float obs[B], nobs[B], ret[B], disc[B], w[B];
  int64_t act[B], idx[B];
  uint64_t gen[B];
  int32_t m[B];
  int seen[64] = {0};
  shoal_rng rng;
  shoal_rng_seed(&rng, seed);
  replay_sample_args a = {.batch = B, .n_step = n, .gamma = gamma, .beta = 0.5};
  replay_batch b = {.cols = {obs, act},
                    .next_obs = nobs,
                    .reward = ret,
                    .discount = disc,
                    .steps = m,
                    .weight = w,
                    .index = idx,
                    .generation = gen};
  for (int rep = 0; rep < 20; rep++) {
    shoal_error err = {0};
    int rc = replay_sample(r, &rng, &a, &b, &err);
    if (rc) print_message("sample: %s\n", err.msg);
    assert_int_equal(rc, 0);
    for (int i = 0; i < B; i++) {
      int found = -1;
      for (int t = 0; t < ntab; t++)
        if (tab[t].id == obs[i]) found = t;
      if (found < 0) print_message("unexpected sample id %g\n", (double)obs[i]);
      assert_true(found >= 0);
      const expect *e = &tab[found];
      assert_int_equal(act[i], (int64_t)(10 * e->id));
      assert_float_equal(ret[i], e->ret, 1e-5);
      assert_float_equal(disc[i], e->disc, 1e-6);
      assert_float_equal(nobs[i], e->next, 0);
      assert_int_equal(m[i], e->m);
      /* The generation is the insertion sequence number; the index its slot. */
      assert_int_equal(idx[i], (int64_t)(gen[i] % (uint64_t)replay_get_config(r)->capacity));
      seen[found] = 1;
    }
  }
  int distinct = 0;
  for (int t = 0; t < ntab; t++) distinct += seen[t];
  return distinct;
}

static void test_config_rejected_with_reason(void **state) {
  replay *r = NULL;
  shoal_error err = {0};
  replay_config c = small_config(REPLAY_UNIFORM, 100, 4, 1);
  c.capacity = 1;
  assert_int_equal(replay_create(&c, &r, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "capacity"));
  c = small_config(REPLAY_UNIFORM, 100, 4, 1);
  c.obs_column = "pixels";
  assert_int_equal(replay_create(&c, &r, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "pixels"));
  c = small_config(REPLAY_UNIFORM, 100, 4, 1);
  c.cols[1].dtype = (replay_dtype)42;
  assert_int_equal(replay_create(&c, &r, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "action"));
  c = small_config(REPLAY_PRIORITIZED, 100, 4, 1);
  c.eps = 0;
  assert_int_equal(replay_create(&c, &r, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "eps"));
  c = small_config(REPLAY_UNIFORM, 100, 4, 1);
  strcpy(c.cols[1].name, "obs");
  assert_int_equal(replay_create(&c, &r, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "twice"));
  assert_null(r);
}

static void test_memory_bytes_known_up_front(void **state) {
  /* Atari-sized: one 84x84 u8 frame per slot, however many are stacked. */
  replay_config c = small_config(REPLAY_PRIORITIZED, 1000, 1, 4);
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_U8, .ndim = 2, .shape = {84, 84}};
  size_t bytes = replay_memory_bytes(&c);
  size_t frames = 1000u * 84 * 84, actions = 1000u * 8;
  assert_true(bytes >= frames + actions);
  assert_true(bytes < frames + actions + 1000u * 64 + 4 * 1024 * 8 + 4 * 64 + 4096);
}

static void test_nstep_termination_truncation_and_late_successor(void **state) {
  replay_config c = small_config(REPLAY_UNIFORM, 64, 1, 1);
  replay *r = NULL;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  /* Episode A: ids 1,2,3 (rewards 1,2,3), terminated after 3, final obs 100.
   * Episode B: ids 11,12 (rewards 10,20), truncated after 12, final obs 200.
   * Episode C: ids 21..25 (reward 1 each), still running. */
  float ids[] = {1, 2, 3, 11, 12, 21, 22, 23, 24, 25};
  float rew[] = {1, 2, 3, 10, 20, 1, 1, 1, 1, 1};
  uint8_t term[10] = {0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
  uint8_t trunc[10] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
  float finals[] = {100, 200};
  assert_int_equal(put(r, 0, 10, ids, rew, term, trunc, finals), 0);
  /* n = 3, gamma = 0.5 worked by hand:
   *   1: 1 + .5*2 + .25*3 = 2.75, terminated within 3 steps: discount 0, next 100
   *   2: 2 + .5*3 = 3.5 (m 2), discount 0;  3: 3 (m 1), discount 0
   *  11: 10 + .5*20 = 20 (m 2), truncated: discount .25, next 200
   *  12: 20 (m 1), discount .5, next 200
   *  21: 1 + .5 + .25 = 1.75, discount .125, next 24;  22: same, next 25
   *  23..25 need ids 26..28, not yet inserted: never sampled. */
  expect tab[] = {{1, 2.75f, 0, 100, 3},    {2, 3.5f, 0, 100, 2},   {3, 3, 0, 100, 1},
                  {11, 20, 0.25f, 200, 2},  {12, 20, 0.5f, 200, 1}, {21, 1.75f, .125f, 24, 3},
                  {22, 1.75f, .125f, 25, 3}};
  assert_int_equal(check_samples(r, 3, 0.5, tab, 7, 1), 7);
  /* id 26 arrives in a later insert: 23 becomes sampleable, linked across calls. */
  float id26[] = {26}, r26[] = {1};
  uint8_t z[1] = {0};
  assert_int_equal(put(r, 0, 1, id26, r26, z, z, NULL), 0);
  expect tab2[] = {{1, 2.75f, 0, 100, 3},     {2, 3.5f, 0, 100, 2},     {3, 3, 0, 100, 1},
                   {11, 20, 0.25f, 200, 2},   {12, 20, 0.5f, 200, 1},   {21, 1.75f, .125f, 24, 3},
                   {22, 1.75f, .125f, 25, 3}, {23, 1.75f, .125f, 26, 3}};
  assert_int_equal(check_samples(r, 3, 0.5, tab2, 8, 2), 8);
  /* n = 1 on the same memory: one-step targets, every step with a successor. */
  expect tab1[] = {{1, 1, 0.9f, 2, 1},    {2, 2, 0.9f, 3, 1},     {3, 3, 0, 100, 1},
                   {11, 10, 0.9f, 12, 1}, {12, 20, 0.9f, 200, 1}, {21, 1, 0.9f, 22, 1},
                   {22, 1, 0.9f, 23, 1},  {23, 1, 0.9f, 24, 1},   {24, 1, 0.9f, 25, 1},
                   {25, 1, 0.9f, 26, 1}};
  assert_int_equal(check_samples(r, 1, 0.9, tab1, 10, 3), 10);
  replay_stats st;
  replay_get_stats(r, &st);
  assert_int_equal(st.inserted_steps, 11);
  assert_int_equal(st.inserted_tails, 2);
  assert_int_equal(st.held, 13);
  assert_int_equal(st.held_tails, 2);
  replay_destroy(r);
}

/* The tails held are counted as the ring laps: held - held_tails is the env steps the
 * memory holds, never more than were inserted (the learner's progress line shows it). */
static void test_held_tails_counted_across_laps(void **state) {
  for (int kind = 0; kind < 2; kind++) {
    replay_config c = small_config(kind ? REPLAY_PRIORITIZED : REPLAY_UNIFORM, 64, 1, 1);
    replay *r = NULL;
    assert_int_equal(replay_create(&c, &r, NULL), 0);
    /* Episodes of 1..4 steps, each with its tail: the ring laps several times. */
    int items = 0, kinds[600]; /* kinds[i]: 1 for a tail at item i */
    for (int e = 0; items < 500; e++) {
      int n = 1 + e % 4;
      float ids[4] = {1, 2, 3, 4}, rew[4] = {0}, fin[1] = {9};
      uint8_t term[4] = {0}, none[4] = {0};
      term[n - 1] = 1;
      assert_int_equal(put(r, 0, n, ids, rew, term, none, fin), 0);
      for (int i = 0; i < n; i++) kinds[items++] = 0;
      kinds[items++] = 1;
      replay_stats st;
      replay_get_stats(r, &st);
      int held = items < 64 ? items : 64, want = 0;
      for (int i = items - held; i < items; i++) want += kinds[i];
      assert_int_equal(st.held, held);
      assert_int_equal(st.held_tails, want);
    }
    replay_destroy(r);
  }
}

static void test_streams_interleaved_keep_their_own_links(void **state) {
  replay_config c = small_config(REPLAY_UNIFORM, 64, 1, 1);
  replay *r = NULL;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  uint8_t z[2] = {0, 0};
  float one[2] = {1, 1};
  /* Stream 0: 1,2 | 3,4 ; stream 1: 101,102 | 103 interleaved between them. */
  float a1[] = {1, 2}, b1[] = {101, 102}, a2[] = {3, 4}, b2[] = {103};
  assert_int_equal(put(r, 0, 2, a1, one, z, z, NULL), 0);
  assert_int_equal(put(r, 1, 2, b1, one, z, z, NULL), 0);
  assert_int_equal(put(r, 0, 2, a2, one, z, z, NULL), 0);
  assert_int_equal(put(r, 1, 1, b2, one, z, z, NULL), 0);
  expect tab[] = {{1, 1.5f, .25f, 3, 2}, {2, 1.5f, .25f, 4, 2}, {101, 1.5f, .25f, 103, 2}};
  assert_int_equal(check_samples(r, 2, 0.5, tab, 3, 4), 3);
  /* Stream 1's actor restarts: 201, 202, 203 start a new episode, so 102 and 103
   * never get successors and 201's stack would not reach back into 103. */
  assert_int_equal(replay_reset_stream(r, 1, NULL), 0);
  assert_int_equal(replay_reset_stream(r, 9, NULL), SHOAL_ERANGE);
  float b3[] = {201, 202, 203}, one3[] = {1, 1, 1};
  uint8_t z3[3] = {0};
  assert_int_equal(put(r, 1, 3, b3, one3, z3, z3, NULL), 0);
  expect tab2[] = {{1, 1.5f, .25f, 3, 2},
                   {2, 1.5f, .25f, 4, 2},
                   {101, 1.5f, .25f, 103, 2},
                   {201, 1.5f, .25f, 203, 2}};
  assert_int_equal(check_samples(r, 2, 0.5, tab2, 4, 5), 4);
  replay_destroy(r);
}

static void test_wraparound_overwrites_oldest(void **state) {
  /* Capacity 8: after 13 steps of one open episode the ring holds ids 6..13; id 6..11
   * have a 2-step successor, 12 and 13 do not; 5 is gone, so nothing links to it. */
  replay_config c = small_config(REPLAY_UNIFORM, 8, 1, 1);
  replay *r = NULL;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  uint8_t z[8] = {0};
  for (int i = 1; i <= 13; i++) {
    float id[] = {(float)i}, rw[] = {(float)i};
    assert_int_equal(put(r, 0, 1, id, rw, z, z, NULL), 0);
  }
  expect tab[6];
  for (int i = 6; i <= 11; i++)
    tab[i - 6] = (expect){(float)i, (float)i + 0.5f * (float)(i + 1), 0.25f, (float)(i + 2), 2};
  assert_int_equal(check_samples(r, 2, 0.5, tab, 6, 5), 6);
  /* An insert of 5 steps with an episode end wraps the ring's end in one call. */
  float ids[] = {14, 15, 16, 17, 18}, rw[] = {1, 1, 1, 1, 1}, fin[] = {300};
  uint8_t te[] = {0, 0, 1, 0, 0};
  assert_int_equal(put(r, 0, 5, ids, rw, te, z, fin), 0);
  /* Held now: 12..18 plus the tail 300 (8 items); 11 gone. */
  expect tab2[] = {{12, 12 + 0.5f * 13, 0.25f, 14, 2},
                   {13, 13 + 0.5f, 0.25f, 15, 2},
                   {14, 1.5f, 0.25f, 16, 2},
                   {15, 1.5f, 0, 300, 2},
                   {16, 1, 0, 300, 1}};
  assert_int_equal(check_samples(r, 2, 0.5, tab2, 5, 6), 5);
  /* An episode end in the ring's last slot: its final observation takes slot 0 and the
   * next episode goes on from slot 1 (seqs 20..25: ids 19..22, the tail 400, id 23). */
  float ids3[] = {19, 20, 21, 22, 23}, fin3[] = {400};
  uint8_t te3[] = {0, 0, 0, 1, 0};
  assert_int_equal(put(r, 0, 5, ids3, rw, te3, z, fin3), 0);
  expect tab3[] = {{17, 1.5f, 0.25f, 19, 2}, {18, 1.5f, 0.25f, 20, 2}, {19, 1.5f, 0.25f, 21, 2},
                   {20, 1.5f, 0.25f, 22, 2}, {21, 1.5f, 0, 400, 2},    {22, 1, 0, 400, 1}};
  assert_int_equal(check_samples(r, 2, 0.5, tab3, 6, 7), 6);
  replay_destroy(r);
}

static void test_frame_stack_repeats_first_frame(void **state) {
  replay_config c = small_config(REPLAY_UNIFORM, 64, 1, 3);
  replay *r = NULL;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  float ids[] = {1, 2, 3, 11, 12, 13}, rw[] = {0, 0, 0, 0, 0, 0}, fin[] = {4};
  uint8_t te[] = {0, 0, 1, 0, 0, 0}, z[6] = {0};
  assert_int_equal(put(r, 0, 6, ids, rw, te, z, fin), 0);
  enum { B = 128 };
  float obs[B][3], nobs[B][3];
  int64_t act[B];
  replay_batch b = {.cols = {obs, act}, .next_obs = nobs};
  replay_sample_args a = {.batch = B, .n_step = 1, .gamma = 0.9};
  shoal_rng rng;
  shoal_rng_seed(&rng, 7);
  assert_int_equal(replay_sample(r, &rng, &a, &b, NULL), 0);
  /* Expected stacks (oldest first) and the next stacks, worked by hand. */
  const float want[5][2][3] = {{{1, 1, 1}, {1, 1, 2}},
                               {{1, 1, 2}, {1, 2, 3}},
                               {{1, 2, 3}, {2, 3, 4}},
                               {{11, 11, 11}, {11, 11, 12}},
                               {{11, 11, 12}, {11, 12, 13}}};
  const float last[5] = {1, 2, 3, 11, 12};
  int seen[5] = {0};
  for (int i = 0; i < B; i++) {
    int t = -1;
    for (int j = 0; j < 5; j++)
      if (obs[i][2] == last[j]) t = j;
    assert_true(t >= 0);
    seen[t]++;
    for (int f = 0; f < 3; f++) {
      assert_float_equal(obs[i][f], want[t][0][f], 0);
      assert_float_equal(nobs[i][f], want[t][1][f], 0);
    }
  }
  for (int j = 0; j < 5; j++) assert_true(seen[j] > 0);
  replay_destroy(r);
}

static void test_frame_stack_rejects_overwritten_history(void **state) {
  /* Capacity 6, stack 3, one open episode 1..10: 5..10 held; 5 and 6 would need
   * frames 3 and 4, which are gone, so only 7, 8, 9 (with successors) are sampled. */
  replay_config c = small_config(REPLAY_UNIFORM, 6, 1, 3);
  replay *r = NULL;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  uint8_t z[1] = {0};
  for (int i = 1; i <= 10; i++) {
    float id[] = {(float)i}, rw[] = {0};
    assert_int_equal(put(r, 0, 1, id, rw, z, z, NULL), 0);
  }
  enum { B = 64 };
  float obs[B][3];
  replay_batch b = {.cols = {obs, NULL}};
  replay_sample_args a = {.batch = B, .n_step = 1, .gamma = 1};
  shoal_rng rng;
  shoal_rng_seed(&rng, 8);
  assert_int_equal(replay_sample(r, &rng, &a, &b, NULL), 0);
  for (int i = 0; i < B; i++) {
    assert_true(obs[i][2] >= 7 && obs[i][2] <= 9);
    assert_float_equal(obs[i][0], obs[i][2] - 2, 0);
  }
  replay_destroy(r);
}

static void test_insert_errors_insert_nothing(void **state) {
  replay_config c = small_config(REPLAY_PRIORITIZED, 16, 1, 1);
  replay *r = NULL;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  shoal_error err = {0};
  float ids[] = {1, 2}, rw[] = {0, NAN}, fin[] = {9};
  uint8_t te[] = {0, 1}, z[2] = {0};
  assert_int_equal(put(r, 0, 2, ids, rw, z, z, NULL), SHOAL_ENAN);
  rw[1] = 0;
  float obs[2] = {1, 2};
  int64_t act[2] = {0};
  replay_steps s = {.n = 2, .cols = {obs, act}, .reward = rw, .terminated = te};
  assert_int_equal(replay_insert(r, 0, &s, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "final_obs"));
  assert_int_equal(replay_insert(r, 4, &s, &err), SHOAL_ERANGE);
  float pr[2] = {1, -1};
  s.final_obs = fin;
  s.priority = pr;
  assert_int_equal(replay_insert(r, 0, &s, &err), SHOAL_EINVAL);
  s.n = 16;
  assert_int_equal(replay_insert(r, 0, &s, &err), SHOAL_EINVAL);
  replay_stats st;
  replay_get_stats(r, &st);
  assert_int_equal(st.inserted_steps, 0);
  assert_int_equal(st.held, 0);
  float o[64];
  replay_batch b = {.cols = {o, NULL}};
  replay_sample_args a = {.batch = 2, .n_step = 1, .gamma = 1, .beta = 0};
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  assert_int_equal(replay_sample(r, &rng, &a, &b, &err), SHOAL_ESTATE);
  (void)ids;
  replay_destroy(r);
}

static void test_insert_columns_checks_names_and_shapes(void **state) {
  replay_config c = small_config(REPLAY_UNIFORM, 32, 2, 1);
  replay *r = NULL;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  float obs[3][2] = {{1, 0}, {2, 0}, {3, 0}}, fin[1][2] = {{4, 0}}, rw[3] = {1, 1, 1};
  int64_t act[3] = {10, 20, 30};
  uint8_t te[3] = {0, 0, 1};
  int64_t s_obs[] = {3, 2}, s_n[] = {3}, s_fin[] = {1, 2};
  replay_column_data cols[] = {
      {"obs", REPLAY_F32, 2, s_obs, obs, sizeof obs},
      {"action", REPLAY_I64, 1, s_n, act, sizeof act},
      {"reward", REPLAY_F32, 1, s_n, rw, sizeof rw},
      {"terminated", REPLAY_BOOL, 1, s_n, te, sizeof te},
      {"final_obs", REPLAY_F32, 2, s_fin, fin, sizeof fin},
  };
  shoal_error err = {0};
  assert_int_equal(replay_insert_columns(r, 0, cols, 5, &err), 0);
  cols[1].dtype = REPLAY_I32;
  assert_int_equal(replay_insert_columns(r, 0, cols, 5, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "action"));
  cols[1].dtype = REPLAY_I64;
  int64_t bad_obs[] = {3, 3};
  cols[0].shape = bad_obs;
  assert_int_equal(replay_insert_columns(r, 0, cols, 5, &err), SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "obs"));
  cols[0].shape = s_obs;
  cols[2].nbytes = 8;
  assert_int_equal(replay_insert_columns(r, 0, cols, 5, &err), SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "reward"));
  cols[2].nbytes = sizeof rw;
  assert_int_equal(replay_insert_columns(r, 0, cols, 4, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "final_obs"));
  cols[4].name = "extra";
  assert_int_equal(replay_insert_columns(r, 0, cols, 5, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "extra"));
  replay_stats st;
  replay_get_stats(r, &st);
  assert_int_equal(st.inserted_steps, 3);
  assert_int_equal(st.inserted_tails, 1);
  /* The accepted insert samples back as written: 3 terminated with final obs 4. */
  enum { B = 32 };
  float o[B][2], no[B][2], ret[B], disc[B];
  int64_t a[B];
  replay_batch b = {.cols = {o, a}, .next_obs = no, .reward = ret, .discount = disc};
  replay_sample_args args = {.batch = B, .n_step = 1, .gamma = 0.9};
  shoal_rng rng;
  shoal_rng_seed(&rng, 3);
  assert_int_equal(replay_sample(r, &rng, &args, &b, NULL), 0);
  for (int i = 0; i < B; i++) {
    assert_int_equal(a[i], (int64_t)(10 * o[i][0]));
    assert_float_equal(no[i][0], o[i][0] + 1, 0);
    assert_float_equal(disc[i], o[i][0] == 3 ? 0.0f : 0.9f, 1e-7);
  }
  replay_destroy(r);
}

static void test_insert_one_and_no_obs_column(void **state) {
  /* One step at a time; then a spec without an obs column, where n-step returns
   * still stop at episode ends and truncation still bootstraps (no next obs). */
  replay_config c = small_config(REPLAY_PRIORITIZED, 16, 1, 1);
  replay *r = NULL;
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  for (int i = 1; i <= 3; i++) {
    float o = (float)i, fin = 50;
    int64_t a = 10 * i;
    const void *cols[2] = {&o, &a};
    assert_int_equal(replay_insert_one(r, 1, cols, (float)i, i == 3, 0, &fin, 2.0f, NULL), 0);
  }
  float nan_prio = NAN, o = 4;
  int64_t a4 = 40;
  const void *cols4[2] = {&o, &a4};
  assert_int_equal(replay_insert_one(r, 1, cols4, 0, 0, 0, NULL, nan_prio, NULL), SHOAL_ENAN);
  expect tab[] = {
      {1, 1 + 0.5f * 2 + 0.25f * 3, 0, 50, 3}, {2, 2 + 0.5f * 3, 0, 50, 2}, {3, 3, 0, 50, 1}};
  assert_int_equal(check_samples(r, 3, 0.5, tab, 3, 11), 3);
  replay_destroy(r);

  replay_config c2 = small_config(REPLAY_UNIFORM, 16, 1, 1);
  c2.obs_column = NULL;
  assert_int_equal(replay_create(&c2, &r, NULL), 0);
  float ids[] = {1, 2, 3, 4, 5}, rew[] = {1, 2, 3, 4, 5};
  uint8_t te[] = {0, 1, 0, 0, 0}, tr[] = {0, 0, 0, 1, 0};
  assert_int_equal(put(r, 0, 5, ids, rew, te, tr, NULL), 0); /* no final obs needed */
  enum { B = 64 };
  float obs[B], ret[B], disc[B];
  int64_t act[B];
  int32_t m[B];
  replay_batch b = {.cols = {obs, act}, .reward = ret, .discount = disc, .steps = m};
  replay_sample_args a = {.batch = B, .n_step = 2, .gamma = 0.5};
  shoal_rng rng;
  shoal_rng_seed(&rng, 12);
  assert_int_equal(replay_sample(r, &rng, &a, &b, NULL), 0);
  for (int i = 0; i < B; i++) {
    /* 1: 1 + .5*2, terminated: 0.  2: 2, 0.  3: 3 + .5*4 truncated: .25.  4: 4, .5.
     * 5: needs its successor (n = 2): never drawn. */
    const float want_ret[] = {0, 2, 2, 5, 4}, want_disc[] = {0, 0, 0, 0.25f, 0.5f};
    int id = (int)obs[i];
    assert_true(id >= 1 && id <= 4);
    assert_float_equal(ret[i], want_ret[id], 1e-6);
    assert_float_equal(disc[i], want_disc[id], 1e-7);
    assert_int_equal(m[i], id == 1 || id == 3 ? 2 : 1);
  }
  replay_stats st;
  replay_get_stats(r, &st);
  assert_int_equal(st.inserted_tails, 0);
  replay_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_rejected_with_reason),
      cmocka_unit_test(test_memory_bytes_known_up_front),
      cmocka_unit_test(test_nstep_termination_truncation_and_late_successor),
      cmocka_unit_test(test_held_tails_counted_across_laps),
      cmocka_unit_test(test_streams_interleaved_keep_their_own_links),
      cmocka_unit_test(test_wraparound_overwrites_oldest),
      cmocka_unit_test(test_frame_stack_repeats_first_frame),
      cmocka_unit_test(test_frame_stack_rejects_overwritten_history),
      cmocka_unit_test(test_insert_errors_insert_nothing),
      cmocka_unit_test(test_insert_columns_checks_names_and_shapes),
      cmocka_unit_test(test_insert_one_and_no_obs_column),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
