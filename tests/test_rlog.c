/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The learner's replay log (learner/replay_log.h) on a file store, or on MongoDB with
 * `test_replay_log mongodb` ($SHOAL_TEST_MONGO_URI, else the tests' stand-in server):
 *
 *   round_trip        batches and a priority checkpoint written through a store_writer
 *                     come back record for record, numbered gaplessly, items and steps
 *                     counted across segments; segments seal on size and on age; the
 *                     log's thread is named shoal-rlog while it runs
 *   restore           a prioritized replay rebuilt from the newest segments that fill
 *                     its capacity, with the checkpoint's priorities on exactly the
 *                     items it names, and the counters the learner continues from
 *   retention         segments replay no longer holds are deleted (the newest
 *                     checkpoint kept); keep_log keeps them all
 *   damaged           a flipped byte, a truncated segment, another env's columns:
 *                     clear errors naming the segment
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
// cmocka after the standard headers
#include <cmocka.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "learner/replay_log.h"
#include "tests/mongo_test.h"

static char g_uri[1024], g_dir[256];
static int g_file, g_runs;

enum { OBS = 4, NC = 3 }; /* columns: obs f32[4], action i32, stream i32 */

static void cols_spec(rlog_column *c) {
  memset(c, 0, NC * sizeof *c);
  snprintf(c[0].name, sizeof c[0].name, "obs");
  c[0].dtype = REPLAY_F32;
  c[0].ndim = 1;
  c[0].shape[0] = OBS;
  snprintf(c[1].name, sizeof c[1].name, "action");
  c[1].dtype = REPLAY_I32;
  snprintf(c[2].name, sizeof c[2].name, "stream");
  c[2].dtype = REPLAY_I32;
}

typedef struct env {
  store *st;
  store_writer *wr;
  char run[64];
} env;

static int setup(void **state) {
  env *e = calloc(1, sizeof *e);
  shoal_error err = {0};
  assert_int_equal(store_open(&e->st, g_uri, &err), 0);
  assert_int_equal(store_writer_create(&e->wr, e->st, NULL, &err), 0);
  snprintf(e->run, sizeof e->run, "rlog-%d-%d", (int)getpid(), g_runs++);
  assert_int_equal(store_run_create(e->st, e->run, NULL, STORE_RUN_RUNNING, &err), 0);
  *state = e;
  return 0;
}

static int teardown(void **state) {
  env *e = *state;
  store_writer_close(e->wr, 10, NULL);
  store_close(e->st);
  free(e);
  return 0;
}

/* Batch b: rows rows whose obs encode (b, row), actions b, all in stream b % 3. */
static void make_batch(uint32_t b, uint32_t rows, float *obs, int32_t *act, int32_t *stream,
                       rlog_batch *out) {
  for (uint32_t i = 0; i < rows; i++) {
    for (int k = 0; k < OBS; k++) obs[i * OBS + k] = (float)b * 1000.0f + (float)i + 0.25f * k;
    act[i] = (int32_t)b;
    stream[i] = (int32_t)(b % 3);
  }
  memset(out, 0, sizeof *out);
  out->actor = b % 3;
  out->incarnation = 77;
  out->seq = b + 1;
  out->rows = rows;
  out->steps = rows;
  out->items = rows;
  out->cols[0] = obs;
  out->cols[1] = act;
  out->cols[2] = stream;
}

static rlog *open_log(env *e, size_t seg_bytes, double flush_s, int keep) {
  rlog_config c = {.st = e->st, .wr = e->wr, .run = e->run, .ncols = NC};
  cols_spec(c.cols);
  c.segment_bytes = seg_bytes;
  c.flush_s = flush_s;
  c.keep = keep;
  rlog *l = NULL;
  shoal_error err = {0};
  assert_int_equal(rlog_open(&l, &c, &err), 0);
  return l;
}

static void append_n(rlog *l, uint32_t from, uint32_t n, uint32_t rows) {
  float obs[64 * OBS];
  int32_t act[64], stream[64];
  shoal_error err = {0};
  for (uint32_t b = from; b < from + n; b++) {
    rlog_batch rec;
    make_batch(b, rows, obs, act, stream, &rec);
    assert_int_equal(rlog_append_batch(l, &rec, &err), 0);
  }
}

/* Every record of the run's log, checked against make_batch; returns batches seen. */
static uint32_t check_log(env *e, uint32_t rows, uint64_t *segments, uint64_t *ckpts) {
  shoal_error err = {0};
  uint64_t *seqs;
  size_t n;
  assert_int_equal(store_replay_list(e->st, e->run, &seqs, &n, &err), 0);
  rlog_segment seg = {0};
  uint32_t next = UINT32_MAX, seen = 0;
  uint64_t item = UINT64_MAX;
  *segments = *ckpts = 0;
  for (size_t i = 0; i < n; i++) {
    void *bytes;
    size_t len;
    assert_int_equal(store_replay_read(e->st, e->run, seqs[i], &bytes, &len, &err), 0);
    assert_int_equal(rlog_decode(bytes, len, seqs[i], &seg, &err), 0);
    free(bytes);
    if (i) assert_int_equal(seqs[i], seqs[i - 1] + 1); /* gapless */
    if (seg.flags & RLOG_SEG_PRIORITIES) {
      (*ckpts)++;
      continue;
    }
    (*segments)++;
    assert_int_equal(seg.codec, RLOG_CODEC_ZSTD);
    if (item != UINT64_MAX) assert_int_equal(seg.first_item, item);
    item = seg.first_item + seg.items;
    assert_int_equal(seg.steps_before, seg.first_item);
    size_t pos = 0;
    rlog_record r;
    uint64_t items = 0;
    while (rlog_next(&seg, &pos, &r, &err) == 1) {
      assert_int_equal(r.kind, RLOG_REC_BATCH);
      uint32_t b = (uint32_t)r.batch.seq - 1;
      if (next != UINT32_MAX) assert_int_equal(b, next);
      next = b + 1;
      float obs[64 * OBS];
      int32_t act[64], stream[64];
      rlog_batch want;
      make_batch(b, rows, obs, act, stream, &want);
      assert_int_equal(r.batch.actor, want.actor);
      assert_int_equal(r.batch.incarnation, 77);
      assert_int_equal(r.batch.rows, rows);
      assert_memory_equal(r.batch.cols[0], obs, rows * OBS * sizeof(float));
      assert_memory_equal(r.batch.cols[1], act, rows * sizeof(int32_t));
      assert_memory_equal(r.batch.cols[2], stream, rows * sizeof(int32_t));
      items += r.batch.items;
      seen++;
    }
    assert_int_equal(items, seg.items);
  }
  rlog_segment_free(&seg);
  free(seqs);
  return seen;
}

/* Whether a thread of this process is named name (/proc/self/task/<tid>/comm) */
static bool thread_named_now(const char *name) {
  DIR *d = opendir("/proc/self/task");
  assert_non_null(d);
  bool found = false;
  struct dirent *de;
  while (!found && (de = readdir(d))) {
    char path[300], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue; /* . and .., or a thread gone meanwhile */
    if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
    fclose(f);
    found = !strcmp(comm, name);
  }
  closedir(d);
  return found;
}

/* Whether a thread named name is there (want true) or gone (want false) within a second:
 * a thread names itself once it runs, after its creator returned; and a joined thread
 * stays in /proc/self/task a moment after pthread_join returns (the kernel wakes the
 * joiner before it releases the task). */
static bool thread_named_within(const char *name, bool want) {
  for (int i = 0; i < 1000; i++) {
    if (thread_named_now(name) == want) return true;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return false;
}

static void test_round_trip(void **state) {
  env *e = *state;
  shoal_error err = {0};
  /* 20 rows x 24 bytes + 40 = 520 bytes a record: 4 KiB segments hold 7. */
  rlog *l = open_log(e, 4096, 30.0, 1);
  /* the log's and the store writer's threads say what they are (a profile shows them) */
  assert_true(thread_named_within("shoal-rlog", true));
  assert_true(thread_named_within("shoal-store-wr", true));
  append_n(l, 0, 100, 20);
  float p[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, -1};
  assert_int_equal(rlog_append_priorities(l, 5, 10, p, &err), 0);
  rlog_stats ls;
  assert_int_equal(rlog_close(l, 10, &ls), 0);
  assert_true(thread_named_within("shoal-rlog", false)); /* joined */
  assert_int_equal(store_writer_flush(e->wr, 10, NULL), 0);
  assert_int_equal(ls.records, 100);
  assert_int_equal(ls.next_item, 2000);
  assert_int_equal(ls.steps, 2000);
  assert_int_equal(ls.segments_dropped, 0);
  uint64_t segs, ckpts;
  assert_int_equal(check_log(e, 20, &segs, &ckpts), 100);
  assert_int_equal(ckpts, 1);
  assert_int_equal(segs, (100 + 6) / 7);
  assert_int_equal(ls.segments_sealed, segs + ckpts);

  /* Age seals too: one batch, flush_s 0.1, the segment appears without a close. */
  char run2[80];
  snprintf(run2, sizeof run2, "%s-age", e->run);
  assert_int_equal(store_run_create(e->st, run2, NULL, STORE_RUN_RUNNING, &err), 0);
  rlog_config c = {.st = e->st, .wr = e->wr, .run = run2, .ncols = NC, .flush_s = 0.1};
  cols_spec(c.cols);
  assert_int_equal(rlog_open(&l, &c, &err), 0);
  append_n(l, 0, 1, 5);
  uint64_t *seqs = NULL;
  size_t n = 0;
  double t0 = shoal_now_s();
  while (n == 0 && shoal_now_s() - t0 < 5) {
    usleep(20000);
    free(seqs);
    assert_int_equal(store_replay_list(e->st, run2, &seqs, &n, &err), 0);
  }
  free(seqs);
  double took = shoal_now_s() - t0;
  printf("RLOG age_seal_s=%.3f (flush_s 0.1)\n", took);
  assert_int_equal(n, 1);
  assert_true(took < 2.0);
  assert_int_equal(rlog_close(l, 10, NULL), 0);
}

/* Inserts a record as one stream's steps (no episode ends). */
typedef struct ins {
  replay *r;
  uint64_t records;
} ins;
static int insert_rec(void *ctx, const rlog_batch *b, shoal_error *err) {
  ins *c = ctx;
  replay_steps s = {0};
  float rew[64] = {0};
  uint8_t term[64] = {0};
  s.n = b->rows;
  s.cols[0] = b->cols[0];
  s.cols[1] = b->cols[1];
  s.reward = rew;
  s.terminated = term;
  c->records++;
  return replay_insert(c->r, ((const int32_t *)b->cols[2])[0], &s, err);
}

static replay *make_mem(int64_t cap) {
  replay_config rc = {.kind = REPLAY_PRIORITIZED,
                      .capacity = cap,
                      .streams = 3,
                      .ncols = 2,
                      .obs_column = "obs",
                      .alpha = 0.6,
                      .eps = 1e-6,
                      .writer_slack = 0};
  rc.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_F32, .ndim = 1, .shape = {OBS}};
  rc.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I32};
  replay *r = NULL;
  shoal_error err = {0};
  assert_int_equal(replay_create(&rc, &r, &err), 0);
  return r;
}

static void test_restore(void **state) {
  env *e = *state;
  shoal_error err = {0};
  rlog_column cols[NC];
  cols_spec(cols);
  /* A learner's memory: 300 batches of 10, logged; a checkpoint of the 1000 newest
   * items' priorities (item i gets 0.001 * i), then 20 more batches. */
  rlog *l = open_log(e, 2048, 30.0, 1);
  replay *src = make_mem(1000);
  ins c = {src, 0};
  for (uint32_t b = 0; b < 300; b++) {
    float obs[10 * OBS];
    int32_t act[10], stream[10];
    rlog_batch rec;
    make_batch(b, 10, obs, act, stream, &rec);
    assert_int_equal(insert_rec(&c, &rec, &err), 0);
    assert_int_equal(rlog_append_batch(l, &rec, &err), 0);
  }
  float *p = malloc(1000 * sizeof *p);
  for (int i = 0; i < 1000; i++) p[i] = 0.001f * (float)(2000 + i);
  assert_int_equal(rlog_append_priorities(l, 2000, 1000, p, &err), 0);
  free(p);
  append_n(l, 300, 20, 10);
  assert_int_equal(rlog_close(l, 10, NULL), 0);
  assert_int_equal(store_writer_flush(e->wr, 10, NULL), 0);
  replay_destroy(src);

  /* Rebuilt into a memory of 1000: the newest 1000+ items, the checkpoint's
   * priorities on the ones it names; 3000..3199 came after it and keep what they were
   * inserted with (here no initial priority: the largest seen before the checkpoint was
   * applied, 1). */
  replay *r = make_mem(1000);
  ins d = {r, 0};
  rlog_restore_info info;
  assert_int_equal(rlog_restore(e->st, e->run, cols, NC, 1000, r, insert_rec, &d, &info, &err), 0);
  replay_stats rs;
  replay_get_stats(r, &rs);
  printf("RLOG restore segments=%llu records=%llu items=%llu priorities=%llu gaps=%llu %.3f s\n",
         (unsigned long long)info.segments, (unsigned long long)info.records,
         (unsigned long long)info.items, (unsigned long long)info.priorities,
         (unsigned long long)info.gaps, info.seconds);
  assert_int_equal(rs.held, 1000);
  assert_true(info.items >= 1000 && info.items < 1000 + 2048 / 28);
  assert_int_equal(info.next_item, 3200);
  assert_int_equal(info.steps_total, 3200);
  assert_int_equal(info.gaps, 0);
  assert_int_equal(info.records, d.records);
  assert_int_equal((int64_t)info.next_item - (int64_t)rs.next_seq, info.item_offset);
  /* Items 2200..2999 are held and named by the checkpoint. */
  assert_int_equal(info.priorities, 800);
  float got[1000];
  uint64_t lo = rs.next_seq - 1000; /* replay seq of item 2200 */
  assert_int_equal(replay_priorities_get(r, lo, 1000, got, &err), 0);
  for (int i = 0; i < 800; i++) assert_float_equal(got[i], 0.001f * (float)(2200 + i), 1e-6);
  for (int i = 800; i < 1000; i++) assert_float_equal(got[i], 1.0f, 1e-6);
  assert_float_equal(rs.priority_max, 2.999, 1e-5);
  /* The items themselves: item 2200 is batch 220's first row. */
  replay_destroy(r);

  /* A run without a log restores nothing. */
  char empty[80];
  snprintf(empty, sizeof empty, "%s-empty", e->run);
  assert_int_equal(store_run_create(e->st, empty, NULL, STORE_RUN_RUNNING, &err), 0);
  r = make_mem(1000);
  d = (ins){r, 0};
  assert_int_equal(rlog_restore(e->st, empty, cols, NC, 1000, r, insert_rec, &d, &info, &err), 0);
  assert_int_equal(info.segments, 0);
  assert_int_equal(d.records, 0);
  replay_destroy(r);
}

static void test_retention(void **state) {
  env *e = *state;
  shoal_error err = {0};
  rlog *l = open_log(e, 2048, 30.0, 0);
  append_n(l, 0, 200, 10); /* items 0..1999, ~7 records a segment */
  float p[100];
  for (int i = 0; i < 100; i++) p[i] = 1;
  assert_int_equal(rlog_append_priorities(l, 1900, 100, p, &err), 0);
  append_n(l, 200, 10, 10);
  /* The memory holds items from 1500 on: the cut is made once the segments are in the
   * store (one that misses segments still queued in the writer is made again). */
  rlog_retain(l, 1500);
  rlog_stats ls;
  for (double t0 = shoal_now_s(); shoal_now_s() - t0 < 10;) {
    rlog_stats_get(l, &ls);
    if (ls.trimmed >= 20) break; /* 7 records a segment: 1470 is in segment 21 */
    usleep(10000);
  }
  assert_int_equal(rlog_close(l, 10, &ls), 0);
  assert_int_equal(store_writer_flush(e->wr, 10, NULL), 0);
  uint64_t *seqs;
  size_t n;
  assert_int_equal(store_replay_list(e->st, e->run, &seqs, &n, &err), 0);
  assert_true(ls.trimmed > 0);
  /* What is left starts at the segment holding item 1500 (or before it). */
  void *bytes;
  size_t len;
  rlog_segment seg = {0};
  assert_int_equal(store_replay_read(e->st, e->run, seqs[0], &bytes, &len, &err), 0);
  assert_int_equal(rlog_peek(bytes, len, seqs[0], &seg, &err), 0);
  free(bytes);
  printf("RLOG retention trimmed=%llu kept=%zu first_item=%llu\n", (unsigned long long)ls.trimmed,
         n, (unsigned long long)seg.first_item);
  assert_true(seg.first_item <= 1500);
  assert_true(seg.first_item + seg.items > 1500);
  assert_int_equal(seqs[0], ls.trimmed);
  int have_ckpt = 0;
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(store_replay_read(e->st, e->run, seqs[i], &bytes, &len, &err), 0);
    assert_int_equal(rlog_peek(bytes, len, seqs[i], &seg, &err), 0);
    have_ckpt |= (seg.flags & RLOG_SEG_PRIORITIES) != 0;
    free(bytes);
  }
  assert_true(have_ckpt);
  free(seqs);

  /* keep_log: nothing goes. */
  char run2[80];
  snprintf(run2, sizeof run2, "%s-keep", e->run);
  assert_int_equal(store_run_create(e->st, run2, NULL, STORE_RUN_RUNNING, &err), 0);
  rlog_config c = {
      .st = e->st, .wr = e->wr, .run = run2, .ncols = NC, .segment_bytes = 2048, .keep = 1};
  cols_spec(c.cols);
  assert_int_equal(rlog_open(&l, &c, &err), 0);
  append_n(l, 0, 200, 10);
  rlog_retain(l, 1500);
  usleep(200000);
  assert_int_equal(rlog_close(l, 10, &ls), 0);
  assert_int_equal(ls.trimmed, 0);
  assert_int_equal(store_writer_flush(e->wr, 10, NULL), 0);
  assert_int_equal(store_replay_list(e->st, run2, &seqs, &n, &err), 0);
  assert_int_equal(n, ls.segments_sealed);
  assert_int_equal(seqs[0], 0);
  free(seqs);
}

static void test_damaged(void **state) {
  env *e = *state;
  shoal_error err = {0};
  rlog *l = open_log(e, 2048, 30.0, 1);
  append_n(l, 0, 30, 10);
  assert_int_equal(rlog_close(l, 10, NULL), 0);
  assert_int_equal(store_writer_flush(e->wr, 10, NULL), 0);
  void *bytes;
  size_t len;
  assert_int_equal(store_replay_read(e->st, e->run, 1, &bytes, &len, &err), 0);
  unsigned char *b = bytes;
  rlog_segment seg = {0};
  /* Another env's columns: refused by restore, naming the column. */
  rlog_column other[NC];
  cols_spec(other);
  other[0].shape[0] = 8;
  replay *r = make_mem(1000);
  ins d = {r, 0};
  rlog_restore_info info;
  assert_int_equal(rlog_restore(e->st, e->run, other, NC, 1000, r, insert_rec, &d, &info, &err),
                   SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "column 0 is 'obs'"));
  replay_destroy(r);
  /* A flipped byte in the compressed body: the decompressor or the CRC says so. */
  b[len - 5] ^= 0x40;
  assert_int_equal(rlog_decode(bytes, len, 1, &seg, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "replay log segment 1"));
  b[len - 5] ^= 0x40;
  /* Truncated, bad magic, newer version. */
  assert_int_equal(rlog_decode(bytes, len - 7, 1, &seg, &err), SHOAL_EFORMAT);
  assert_int_equal(rlog_decode(bytes, 40, 1, &seg, &err), SHOAL_EFORMAT);
  b[0] = 'X';
  assert_int_equal(rlog_decode(bytes, len, 1, &seg, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "bad magic"));
  b[0] = 'S';
  b[8] = 9;
  assert_int_equal(rlog_decode(bytes, len, 1, &seg, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "format version 9"));
  b[8] = 2;
  assert_int_equal(rlog_decode(bytes, len, 1, &seg, &err), 0);
  /* The body's CRC32C is checked: zlib's CRC-32 under version 2 is a mismatch; the
   * same under version 1 (segments written before CRC32C) decodes. */
  unsigned char crc2[4];
  memcpy(crc2, b + 24, 4);
  uint32_t z = (uint32_t)crc32(0, seg.body, (uInt)seg.body_len);
  for (int i = 0; i < 4; i++) b[24 + i] = (unsigned char)(z >> (8 * i));
  assert_int_equal(rlog_decode(bytes, len, 1, &seg, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "checksum mismatch"));
  b[8] = 1;
  assert_int_equal(rlog_decode(bytes, len, 1, &seg, &err), 0);
  memcpy(b + 24, crc2, 4);
  assert_int_equal(rlog_decode(bytes, len, 1, &seg, &err), SHOAL_EFORMAT);
  b[8] = 2;
  assert_int_equal(rlog_decode(bytes, len, 1, &seg, &err), 0);
  /* A record that claims more rows than the body holds. */
  seg.body[24] = 0xff;
  size_t pos = 0;
  rlog_record rec;
  assert_int_equal(rlog_next(&seg, &pos, &rec, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "malformed"));
  rlog_segment_free(&seg);
  free(bytes);
  /* On the file store, a damaged file fails the restore with the store's words. */
  if (g_file) {
    char path[700];
    snprintf(path, sizeof path, "%s/store/%s/replay/%020d.bin", g_dir, e->run, 2);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 100, SEEK_SET);
    fputc(0x55, f);
    fclose(f);
    rlog_column cols[NC];
    cols_spec(cols);
    r = make_mem(1000);
    d = (ins){r, 0};
    assert_int_equal(rlog_restore(e->st, e->run, cols, NC, 1000, r, insert_rec, &d, &info, &err),
                     SHOAL_EFORMAT);
    assert_non_null(strstr(err.msg, "checksum mismatch"));
    replay_destroy(r);
  }
}

/* Stacks of D frames of FB bytes: frame t of the stream is FB bytes of (t * 7 + k), and
 * row i's stack is frames i-3 .. i, the first frame repeated before the start (as an
 * Atari env's reset fills its stack). */
enum { D = 4, FB = 8, FROWS = 24 };

static void stack_rows(uint32_t t0, uint32_t rows, uint8_t *dense, uint8_t *frames,
                       uint32_t *index) {
  for (uint32_t f = 0; f < rows; f++)
    for (int k = 0; k < FB; k++) frames[f * FB + k] = (uint8_t)((t0 + f) * 7 + (uint32_t)k);
  for (uint32_t i = 0; i < rows; i++)
    for (uint32_t j = 0; j < D; j++) {
      uint32_t f = i + j >= D - 1 ? i + j - (D - 1) : 0;
      index[i * D + j] = f;
      memcpy(dense + (i * D + j) * FB, frames + f * FB, FB);
    }
}

static void test_framed_columns(void **state) {
  env *e = *state;
  shoal_error err = {0};
  rlog_config c = {.st = e->st, .wr = e->wr, .run = e->run, .ncols = 2, .flush_s = 30.0};
  snprintf(c.cols[0].name, sizeof c.cols[0].name, "obs");
  c.cols[0].dtype = REPLAY_U8;
  c.cols[0].ndim = 3;
  c.cols[0].shape[0] = D;
  c.cols[0].shape[1] = 2;
  c.cols[0].shape[2] = FB / 2;
  snprintf(c.cols[1].name, sizeof c.cols[1].name, "action");
  c.cols[1].dtype = REPLAY_I32;
  rlog *l = NULL;
  assert_int_equal(rlog_open(&l, &c, &err), 0);
  uint8_t dense[6][FROWS * D * FB], frames[6][FROWS * FB];
  uint32_t index[6][FROWS * D];
  int32_t act[FROWS] = {0};
  /* Six batches, framed and dense in turn: a reader sees the same rows. */
  for (uint32_t b = 0; b < 6; b++) {
    stack_rows(b * 100, FROWS, dense[b], frames[b], index[b]);
    rlog_batch rec = {.actor = 1,
                      .incarnation = 5,
                      .seq = b + 1,
                      .rows = FROWS,
                      .steps = FROWS,
                      .items = FROWS,
                      .cols = {dense[b], act}};
    if (b % 2 == 0) {
      rec.frames[0] = FROWS;
      rec.frame_depth[0] = D;
      rec.frame_data[0] = frames[b];
      rec.frame_index[0] = index[b];
    }
    assert_int_equal(rlog_append_batch(l, &rec, &err), 0);
  }
  /* Frames that do not describe the rows are refused, counted, and the numbering goes
   * on past them: an index out of range, a depth that does not divide a row. */
  uint64_t before = rlog_next_item(l);
  rlog_batch bad = {.actor = 1,
                    .incarnation = 5,
                    .seq = 7,
                    .rows = FROWS,
                    .steps = FROWS,
                    .items = FROWS,
                    .cols = {dense[0], act}};
  bad.frames[0] = 3;
  bad.frame_depth[0] = D;
  bad.frame_data[0] = frames[0];
  bad.frame_index[0] = index[0];
  assert_int_equal(rlog_append_batch(l, &bad, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "frames"));
  bad.frames[0] = FROWS;
  bad.frame_depth[0] = 3;
  assert_int_equal(rlog_append_batch(l, &bad, &err), SHOAL_EINVAL);
  assert_int_equal(rlog_next_item(l), before + 2 * FROWS);
  /* frames given for no rows at all */
  bad.rows = 0, bad.steps = 0, bad.items = 0;
  bad.frames[0] = 1;
  bad.frame_depth[0] = D;
  assert_int_equal(rlog_append_batch(l, &bad, &err), SHOAL_EINVAL);
  rlog_stats ls;
  assert_int_equal(rlog_close(l, 10, &ls), 0);
  assert_int_equal(store_writer_flush(e->wr, 10, NULL), 0);
  assert_int_equal(ls.records, 6);
  assert_int_equal(ls.segments_dropped, 3);
  /* Three framed records keep FROWS frames each where dense ones keep FROWS * D. */
  size_t dense_rec = 40 + FROWS * D * FB + FROWS * 4;
  size_t framed_rec = 40 + 8 + 8 + FROWS * FB + FROWS * D * 4 + FROWS * 4;
  assert_int_equal(ls.bytes_raw, 3 * dense_rec + 3 * framed_rec);

  void *bytes;
  size_t len;
  assert_int_equal(store_replay_read(e->st, e->run, 0, &bytes, &len, &err), 0);
  rlog_segment seg = {0};
  assert_int_equal(rlog_decode(bytes, len, 0, &seg, &err), 0);
  free(bytes);
  size_t pos = 0;
  rlog_record r;
  for (uint32_t b = 0; b < 6; b++) {
    assert_int_equal(rlog_next(&seg, &pos, &r, &err), 1);
    assert_int_equal(r.kind, RLOG_REC_BATCH);
    assert_int_equal(r.batch.seq, b + 1);
    assert_int_equal(r.batch.rows, FROWS);
    assert_memory_equal(r.batch.cols[0], dense[b], sizeof dense[b]);
    assert_memory_equal(r.batch.cols[1], act, sizeof act);
  }
  assert_int_equal(rlog_next(&seg, &pos, &r, &err), 0);
  /* An index past the record's frames, a depth of 0, a mask naming a column the
   * segment lacks: each a malformed record, not a read past the body. */
  unsigned char *rec0 = seg.body;
  size_t ix = 40 + 8 + 8 + FROWS * FB;
  uint32_t keep;
  memcpy(&keep, rec0 + ix + 4 * 5, 4);
  uint32_t big = FROWS;
  memcpy(rec0 + ix + 4 * 5, &big, 4);
  pos = 0;
  assert_int_equal(rlog_next(&seg, &pos, &r, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "malformed"));
  memcpy(rec0 + ix + 4 * 5, &keep, 4);
  uint32_t zero = 0, mask = 1u << 5;
  memcpy(&keep, rec0 + 40 + 8 + 4, 4);
  memcpy(rec0 + 40 + 8 + 4, &zero, 4);
  pos = 0;
  assert_int_equal(rlog_next(&seg, &pos, &r, &err), SHOAL_EFORMAT);
  memcpy(rec0 + 40 + 8 + 4, &keep, 4);
  memcpy(&keep, rec0 + 40, 4);
  memcpy(rec0 + 40, &mask, 4);
  pos = 0;
  assert_int_equal(rlog_next(&seg, &pos, &r, &err), SHOAL_EFORMAT);
  memcpy(rec0 + 40, &keep, 4);
  pos = 0;
  assert_int_equal(rlog_next(&seg, &pos, &r, &err), 1);
  assert_memory_equal(r.batch.cols[0], dense[0], sizeof dense[0]);
  rlog_segment_free(&seg);
}

/* Segments zstd would not shrink by a sixteenth (random bytes) are stored raw, and so
 * are the next 8 untried; then zstd is tried again and compressible data is compressed.
 * Every record reads back. */
static void test_incompressible_stored_raw(void **state) {
  env *e = *state;
  shoal_error err = {0};
  enum { ROWS = 100, RANDOM = 10, SMOOTH = 12 }; /* 2440-byte records: one a segment */
  rlog *l = open_log(e, 4096, 30.0, 1);
  static float obs[RANDOM + SMOOTH][ROWS * OBS];
  static int32_t act[RANDOM + SMOOTH][ROWS], stream[RANDOM + SMOOTH][ROWS];
  uint64_t x = 0x2545F4914F6CDD1Dull;
  for (uint32_t b = 0; b < RANDOM + SMOOTH; b++) {
    rlog_batch rec;
    make_batch(b, ROWS, obs[b], act[b], stream[b], &rec);
    if (b < RANDOM)
      for (int i = 0; i < ROWS * (OBS + 2); i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t bits = (uint32_t)(x >> 32);
        if (i < ROWS * OBS)
          memcpy(&obs[b][i], &bits, 4);
        else if (i < ROWS * (OBS + 1))
          act[b][i - ROWS * OBS] = (int32_t)bits;
        else
          stream[b][i - ROWS * (OBS + 1)] = (int32_t)bits;
      }
    assert_int_equal(rlog_append_batch(l, &rec, &err), 0);
  }
  assert_int_equal(rlog_close(l, 10, NULL), 0);
  assert_int_equal(store_writer_flush(e->wr, 10, NULL), 0);
  rlog_segment seg = {0};
  for (uint32_t q = 0; q < RANDOM + SMOOTH; q++) {
    void *bytes;
    size_t len;
    assert_int_equal(store_replay_read(e->st, e->run, q, &bytes, &len, &err), 0);
    assert_int_equal(rlog_decode(bytes, len, q, &seg, &err), 0);
    free(bytes);
    /* random: raw; the 8 after the last random one: raw untried; then zstd again */
    assert_int_equal(seg.codec, q < RANDOM + 8 ? RLOG_CODEC_NONE : RLOG_CODEC_ZSTD);
    size_t pos = 0;
    rlog_record r;
    assert_int_equal(rlog_next(&seg, &pos, &r, &err), 1);
    assert_int_equal(r.batch.seq, q + 1);
    assert_memory_equal(r.batch.cols[0], obs[q], sizeof obs[q]);
    assert_int_equal(rlog_next(&seg, &pos, &r, &err), 0);
  }
  rlog_segment_free(&seg);
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "file";
  if (!strcmp(backend, "mongodb")) {
    int mrc = mongo_test_uri(g_uri, sizeof g_uri, "shoal_test_replay_log");
    if (mrc) return mrc;
  } else {
    g_file = 1;
    snprintf(g_dir, sizeof g_dir, "/tmp/shoal-test-rlog-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    snprintf(g_uri, sizeof g_uri, "file://%s/store", g_dir);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_restore, setup, teardown),
      cmocka_unit_test_setup_teardown(test_retention, setup, teardown),
      cmocka_unit_test_setup_teardown(test_damaged, setup, teardown),
      cmocka_unit_test_setup_teardown(test_framed_columns, setup, teardown),
      cmocka_unit_test_setup_teardown(test_incompressible_stored_raw, setup, teardown),
  };
  char name[64];
  snprintf(name, sizeof name, "replay_log (%s)", backend);
  int rc = cmocka_run_group_tests_name(name, tests, NULL, NULL);
  if (g_file) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) rc = rc ? rc : 1;
  }
  return rc;
}
