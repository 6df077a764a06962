/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_follow.c — the learner's store follower (learner/follow.c) on a file
 * store, driven directly: mixed mode keeps the stated fraction of inserted rows from
 * the store while an "actor" thread inserts the rest; more sources than streams;
 * a segment whose source continues an episode into its next segment; resume after the
 * last recorded seq; another learner's replay log followed as experience (its batch
 * records taken apart into env groups, episode ends kept, a bad record rejected).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/follow.h"
#include "learner/replay_log.h"

static char g_dir[128], g_uri[160];

static const store_segment_spec SPEC = {
    .obs_dtype = STORE_SEG_F32, .obs_ndim = 1, .obs_shape = {4}, .act_dtype = STORE_SEG_I32};

static store *open_store(const char *run) {
  shoal_error err = {0};
  store *st = NULL;
  if (store_open(&st, g_uri, &err)) fail_msg("store_open: %s", err.msg);
  int rc = store_run_create(st, run, "", STORE_RUN_CREATED, &err);
  if (rc && rc != SHOAL_EEXIST) fail_msg("run: %s", err.msg);
  return st;
}

static replay *make_replay(int streams, int64_t capacity) {
  replay_config c = {0};
  c.kind = REPLAY_UNIFORM;
  c.capacity = capacity;
  c.streams = streams;
  c.ncols = 2;
  c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_F32, .ndim = 1, .shape = {4}};
  c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I32};
  c.obs_column = "obs";
  c.frame_stack = 1;
  c.writer_slack = -1;
  replay *r = NULL;
  shoal_error err = {0};
  if (replay_create(&c, &r, &err)) fail_msg("replay: %s", err.msg);
  return r;
}

/* Writes count segments of rows rows from source src; when open_end the last row of
 * each does not end its episode (the source's next segment continues it). */
static void write_segments(store *st, const char *run, const char *src, int count, uint32_t rows,
                           bool open_end) {
  shoal_error err = {0};
  store_segment s = {0};
  for (int g = 0; g < count; g++) {
    uint32_t ends = open_end ? 1 : 2;
    assert_int_equal(store_segment_reserve(&s, &SPEC, rows, ends, 0, &err), 0);
    for (uint32_t i = 0; i < rows; i++) {
      for (int j = 0; j < 4; j++) ((float *)s.obs)[4 * i + j] = 0.01f * (float)(i + j);
      ((int32_t *)s.action)[i] = (int32_t)(i % 2);
      s.reward[i] = 1;
    }
    s.terminated[rows / 2] = 1; /* one episode ends mid-segment */
    if (!open_end) s.truncated[rows - 1] = 1;
    memset(s.final_obs, 0, ends * 16);
    snprintf(s.source, sizeof s.source, "%s", src);
    assert_int_equal(store_segment_write(st, run, &s, &err), 0);
  }
  store_segment_free(&s);
}

static follow_config base_config(store *st, const char *run, replay *mem, int first, int n) {
  follow_config fc = {0};
  fc.st = st;
  fc.run = run;
  fc.mem = mem;
  fc.first_stream = first;
  fc.nstreams = n;
  fc.limits = (store_segment_limits){.spec = SPEC, .num_actions = 2};
  fc.poll_s = 0.01;
  fc.start_after = STORE_SEG_FIRST;
  return fc;
}

static follow_stats wait_rows(follow *f, uint64_t rows, double timeout_s) {
  follow_stats s;
  double t0 = shoal_now_s();
  do {
    follow_stats_get(f, &s);
    if (s.rows + s.rejected_rows >= rows) break;
    usleep(5000);
  } while (shoal_now_s() - t0 < timeout_s);
  return s;
}

typedef struct actor_arg {
  replay *mem;
  int streams;
  int chunks;
} actor_arg;

static void *actor(void *p) {
  actor_arg *a = p;
  float obs[4 * 250] = {0}, fin[4] = {0};
  int32_t act[250] = {0};
  float rew[250];
  uint8_t term[250] = {0};
  for (int i = 0; i < 250; i++) rew[i] = 1;
  term[249] = 1;
  shoal_error err = {0};
  for (int c = 0; c < a->chunks; c++) {
    replay_steps s = {
        .n = 250, .cols = {obs, act}, .reward = rew, .terminated = term, .final_obs = fin};
    if (replay_insert(a->mem, c % a->streams, &s, &err)) fail_msg("actor insert: %s", err.msg);
    usleep(3000);
  }
  return NULL;
}

static void test_mixed_fraction(void **state) {
  (void)state;
  const char *run = "mixed";
  store *st = open_store(run);
  write_segments(st, run, "logs", 60, 250, false); /* 15,000 rows waiting */
  replay *mem = make_replay(8, 1 << 16);
  follow_config fc = base_config(st, run, mem, 4, 4);
  fc.store_fraction = 0.25;
  follow *f;
  shoal_error err = {0};
  assert_int_equal(follow_start(&f, &fc, &err), 0);
  actor_arg a = {mem, 4, 48}; /* 12,000 actor rows */
  pthread_t t;
  pthread_create(&t, NULL, actor, &a);
  pthread_join(t, NULL);
  usleep(200000); /* let the follower catch up to its share */
  follow_stats s;
  follow_stats_get(f, &s);
  follow_stop(f);
  double frac = (double)s.rows / (double)(s.rows + 12000);
  printf("mixed 0.25: store rows %llu of %llu inserted (%.3f), held back %llu times\n",
         (unsigned long long)s.rows, (unsigned long long)(s.rows + 12000), frac,
         (unsigned long long)s.held_back);
  /* f = 0.25 of all inserted rows, within one segment (250 rows) of slack. */
  if (frac < 0.24 || frac > 0.25 + 250.0 / 16000)
    fail_msg("store fraction %.3f (rows %llu), wanted 0.25", frac, (unsigned long long)s.rows);
  assert_true(s.held_back > 0);
  assert_int_equal(s.rejected_segments, 0);
  replay_stats rs;
  replay_get_stats(mem, &rs);
  assert_int_equal(rs.inserted_steps, s.rows + 12000);
  replay_destroy(mem);
  store_close(st);
}

static void test_sources_share_streams(void **state) {
  (void)state;
  const char *run = "sources";
  store *st = open_store(run);
  /* Interleaved sources, each continuing its episodes across its segments. */
  for (int g = 0; g < 4; g++) {
    write_segments(st, run, "a", 1, 100, true);
    write_segments(st, run, "b", 1, 100, true);
    write_segments(st, run, "c", 1, 100, true);
  }
  replay *mem = make_replay(2, 1 << 14);
  follow_config fc = base_config(st, run, mem, 0, 2); /* 3 sources, 2 streams */
  follow *f;
  shoal_error err = {0};
  assert_int_equal(follow_start(&f, &fc, &err), 0);
  follow_stats s = wait_rows(f, 1200, 20);
  follow_stop(f);
  assert_int_equal(s.rows, 1200);
  assert_int_equal(s.segments, 12);
  assert_int_equal(s.rejected_segments, 0);
  assert_int_equal(s.last_seq, 11);
  replay_stats rs;
  replay_get_stats(mem, &rs);
  assert_int_equal(rs.inserted_steps, 1200);
  assert_int_equal(rs.inserted_tails, 12); /* one final obs per segment: the mid episode end */
  replay_destroy(mem);

  /* Started again after seq 7: only 8..11 come in. */
  mem = make_replay(2, 1 << 14);
  fc = base_config(st, run, mem, 0, 2);
  fc.start_after = 7;
  assert_int_equal(follow_start(&f, &fc, &err), 0);
  s = wait_rows(f, 400, 20);
  usleep(50000);
  follow_stats_get(f, &s);
  follow_stop(f);
  assert_int_equal(s.rows, 400);
  assert_int_equal(s.segments, 4);
  replay_destroy(mem);

  /* The resume point comes from the learner's store/seq metric (the newest row). */
  assert_int_equal(follow_resume_after(st, run), STORE_SEG_FIRST);
  store_metric m[2] = {{.step = 10, .time = 100, .value = 3}, {.step = 5, .time = 200, .value = 9}};
  for (int i = 0; i < 2; i++) {
    snprintf(m[i].run, sizeof m[i].run, "%s", run);
    snprintf(m[i].name, sizeof m[i].name, "store/seq");
  }
  assert_int_equal(store_metrics_append(st, m, 2, &err), 0);
  assert_int_equal(follow_resume_after(st, run), 9);
  store_close(st);
}

/* An Ape-X learner's log (the wire columns), read by a follower: 2 actors x 2 envs, 8
 * steps per env per batch, env 1 ending an episode in every batch (its final obs as a
 * tail row after its steps). */
static void write_log(store *st, const char *run, int batches, int bad_batch) {
  shoal_error err = {0};
  store_writer *wr;
  assert_int_equal(store_writer_create(&wr, st, NULL, &err), 0);
  rlog_config c = {.st = st, .wr = wr, .run = run, .ncols = 8, .segment_bytes = 4096, .keep = 1};
  const char *names[8] = {"obs",       "action",   "reward", "terminated",
                          "truncated", "priority", "env",    "tail"};
  const uint32_t dt[8] = {REPLAY_F32, REPLAY_I32, REPLAY_F32, REPLAY_U8,
                          REPLAY_U8,  REPLAY_F32, REPLAY_I32, REPLAY_U8};
  for (int i = 0; i < 8; i++) {
    snprintf(c.cols[i].name, sizeof c.cols[i].name, "%s", names[i]);
    c.cols[i].dtype = dt[i];
  }
  c.cols[0].ndim = 1;
  c.cols[0].shape[0] = 4;
  rlog *l;
  assert_int_equal(rlog_open(&l, &c, &err), 0);
  enum { ROWS = 17 }; /* env 0: 8 steps; env 1: 8 steps and 1 tail */
  float obs[ROWS * 4], rew[ROWS], prio[ROWS];
  int32_t act[ROWS], env[ROWS];
  uint8_t term[ROWS], trunc[ROWS], tail[ROWS];
  for (int b = 0; b < batches; b++) {
    memset(term, 0, sizeof term), memset(trunc, 0, sizeof trunc), memset(tail, 0, sizeof tail);
    for (int i = 0; i < ROWS; i++) {
      for (int k = 0; k < 4; k++) obs[4 * i + k] = 0.01f * (float)(b + i + k);
      act[i] = i % 2;
      rew[i] = 1;
      prio[i] = 0.5f;
      env[i] = i < 8 ? 0 : 1;
    }
    term[15] = 1;
    tail[16] = 1;
    if (b == bad_batch) act[3] = 7; /* outside the env's 2 actions */
    rlog_batch rec = {.actor = (uint32_t)(b % 2),
                      .incarnation = 1,
                      .seq = (uint64_t)(b / 2 + 1),
                      .rows = ROWS,
                      .steps = 16,
                      .items = ROWS,
                      .cols = {obs, act, rew, term, trunc, prio, env, tail}};
    assert_int_equal(rlog_append_batch(l, &rec, &err), 0);
  }
  float p[4] = {1, 2, 3, 4};
  assert_int_equal(rlog_append_priorities(l, 0, 4, p, &err), 0);
  assert_int_equal(rlog_close(l, 10, NULL), 0);
  assert_int_equal(store_writer_close(wr, 10, NULL), 0);
}

static void test_follow_replay_log(void **state) {
  (void)state;
  const char *run = "logged";
  store *st = open_store(run);
  write_log(st, run, 40, 13);
  replay *mem = make_replay(8, 1 << 14);
  follow_config fc = base_config(st, run, mem, 0, 8);
  fc.replay_log = true;
  follow *f;
  shoal_error err = {0};
  assert_int_equal(follow_start(&f, &fc, &err), 0);
  /* 40 batches of 16 steps; batch 13's env 0 group (8 steps) fails the action check. */
  follow_stats s = wait_rows(f, 40 * 16, 20);
  usleep(100000);
  follow_stats_get(f, &s);
  follow_stop(f);
  uint64_t *seqs;
  size_t n;
  assert_int_equal(store_replay_list(st, run, &seqs, &n, &err), 0);
  assert_int_equal(s.rows, 40 * 16 - 8);
  assert_int_equal(s.rejected_rows, 8);
  assert_int_equal(s.rejected_segments, 1);
  assert_int_equal(s.segments + s.rejected_segments, n - 1); /* the checkpoint is skipped */
  assert_int_equal(s.last_seq, seqs[n - 1]);
  replay_stats rs;
  replay_get_stats(mem, &rs);
  assert_int_equal(rs.inserted_steps, 40 * 16 - 8);
  assert_int_equal(rs.inserted_tails, 40); /* every env 1 episode end kept its final obs */

  /* Started after the second-to-last segment: only the last comes in. */
  replay_destroy(mem);
  mem = make_replay(8, 1 << 14);
  fc = base_config(st, run, mem, 0, 8);
  fc.replay_log = true;
  fc.start_after = seqs[n - 3];
  assert_int_equal(follow_start(&f, &fc, &err), 0);
  usleep(300000);
  follow_stats_get(f, &s);
  follow_stop(f);
  assert_int_equal(s.segments, 1);
  assert_int_equal(s.last_seq, seqs[n - 1]);
  free(seqs);
  replay_destroy(mem);
  store_close(st);
}

static void test_bad_config(void **state) {
  (void)state;
  store *st = open_store("cfg");
  replay *mem = make_replay(2, 1024);
  follow *f = NULL;
  shoal_error err = {0};
  follow_config fc = base_config(st, "nosuchrun", mem, 0, 2);
  assert_int_equal(follow_start(&f, &fc, &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, "nosuchrun"));
  fc = base_config(st, "cfg", mem, 0, 2);
  fc.store_fraction = 1.0;
  assert_int_equal(follow_start(&f, &fc, &err), SHOAL_EINVAL);
  fc = base_config(st, "cfg", mem, 0, 0);
  assert_int_equal(follow_start(&f, &fc, &err), SHOAL_EINVAL);
  assert_null(f);
  replay_destroy(mem);
  store_close(st);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/shoal-test-follow-XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  snprintf(g_uri, sizeof g_uri, "file://%s", g_dir);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mixed_fraction),
      cmocka_unit_test(test_sources_share_streams),
      cmocka_unit_test(test_follow_replay_log),
      cmocka_unit_test(test_bad_config),
  };
  int rc = cmocka_run_group_tests_name("follow", tests, NULL, NULL);
  if (rc == 0) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) return 1;
  }
  return rc;
}
