/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_replay_save.c — save and load: a round trip gives a memory that
 * samples bit for bit like the original and continues its streams; another spec,
 * a corrupt, truncated or foreign file is refused with a clear error and leaves
 * the memory empty; the write is atomic. Also CRC32C's check value. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replay/internal.h"
#include "replay/replay.h"

enum { H = 3, W = 4, B = 32 };

static char dir[64];
static char path[128];

static int setup(void **state) {
  static int n;
  snprintf(dir, sizeof dir, "/tmp/shoal_replay_%d_%d", (int)getpid(), n++);
  if (mkdir(dir, 0700)) return -1;
  snprintf(path, sizeof path, "%s/mem.rpl", dir);
  return 0;
}

static int teardown(void **state) {
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static replay_config spec(void) {
  replay_config c = {.kind = REPLAY_PRIORITIZED,
                     .capacity = 50,
                     .streams = 3,
                     .ncols = 2,
                     .obs_column = "frame",
                     .frame_stack = 2,
                     .alpha = 0.5,
                     .eps = 0.01,
                     .writer_slack = 0};
  c.cols[0] = (replay_column){.name = "frame", .dtype = REPLAY_U8, .ndim = 2, .shape = {H, W}};
  c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I32};
  return c;
}

/* n steps on a stream; ids from first; every 7th id ends its episode (alternately
 * terminated and truncated) with final frame id + 100. */
static void fill(replay *r, int stream, int first, int n) {
  uint8_t fr[16][H * W], fin[16][H * W];
  int32_t act[16];
  float rew[16], pr[16];
  uint8_t te[16] = {0}, tr[16] = {0};
  int k = 0;
  for (int i = 0; i < n; i++) {
    int id = first + i;
    memset(fr[i], id & 0xff, H * W);
    act[i] = id;
    rew[i] = 0.5f * (float)id;
    pr[i] = (float)(id % 5);
    if (id % 7 == 6) {
      (id % 14 == 6 ? te : tr)[i] = 1;
      memset(fin[k++], (id + 100) & 0xff, H * W);
    }
  }
  replay_steps s = {.n = n,
                    .cols = {fr, act},
                    .reward = rew,
                    .terminated = te,
                    .truncated = tr,
                    .final_obs = fin,
                    .priority = pr};
  assert_int_equal(replay_insert(r, stream, &s, NULL), 0);
}

typedef struct out {
  uint8_t obs[B][2][H * W], nobs[B][2][H * W];
  int32_t act[B];
  float ret[B], disc[B], w[B];
  int64_t idx[B];
  uint64_t gen[B];
} out;

static void sample(replay *r, uint64_t seed, out *o) {
  memset(o, 0, sizeof *o);
  replay_batch b = {.cols = {o->obs, o->act},
                    .next_obs = o->nobs,
                    .reward = o->ret,
                    .discount = o->disc,
                    .weight = o->w,
                    .index = o->idx,
                    .generation = o->gen};
  replay_sample_args a = {.batch = B, .n_step = 3, .gamma = 0.9, .beta = 0.5};
  shoal_rng rng;
  shoal_rng_seed(&rng, seed);
  shoal_error err = {0};
  int rc = replay_sample(r, &rng, &a, &b, &err);
  if (rc) print_message("sample: %s\n", err.msg);
  assert_int_equal(rc, 0);
}

/* A memory with three streams, wrapped, with updated priorities. */
static replay *build(void) {
  replay *r = NULL;
  replay_config c = spec();
  assert_int_equal(replay_create(&c, &r, NULL), 0);
  for (int round = 0; round < 4; round++)
    for (int s = 0; s < 3; s++) fill(r, s, 1000 * s + 10 * round, 10);
  out o;
  sample(r, 1, &o);
  float td[B];
  for (int i = 0; i < B; i++) td[i] = 0.1f * (float)i;
  assert_int_equal(replay_update_priorities(r, B, o.idx, o.gen, td, NULL), 0);
  return r;
}

static void assert_same_stats(replay *a, replay *b) {
  replay_stats x, y;
  replay_get_stats(a, &x);
  replay_get_stats(b, &y);
  assert_int_equal(x.inserted_steps, y.inserted_steps);
  assert_int_equal(x.inserted_tails, y.inserted_tails);
  assert_int_equal(x.held, y.held);
  assert_int_equal(x.held_tails, y.held_tails);
  assert_float_equal(x.priority_total, y.priority_total, 1e-9);
  assert_float_equal(x.priority_max, y.priority_max, 0);
}

static void test_round_trip_samples_identically(void **state) {
  replay *a = build();
  shoal_error err = {0};
  int rc = replay_save(a, path, &err);
  if (rc) print_message("save: %s\n", err.msg);
  assert_int_equal(rc, 0);
  char tmp[160];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  assert_int_equal(access(tmp, F_OK), -1); /* renamed away */
  replay *b = NULL;
  replay_config c = spec();
  assert_int_equal(replay_create(&c, &b, NULL), 0);
  rc = replay_load(b, path, &err);
  if (rc) print_message("load: %s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_same_stats(a, b);
  out *x = malloc(sizeof *x), *y = malloc(sizeof *y);
  for (uint64_t seed = 10; seed < 15; seed++) {
    sample(a, seed, x);
    sample(b, seed, y);
    assert_memory_equal(x, y, sizeof *x);
  }
  /* Streams continue across the restart: one more step on each, same results. */
  for (int s = 0; s < 3; s++) {
    fill(a, s, 1000 * s + 40, 3);
    fill(b, s, 1000 * s + 40, 3);
  }
  sample(a, 99, x);
  sample(b, 99, y);
  assert_memory_equal(x, y, sizeof *x);
  assert_same_stats(a, b);
  /* Loading into a memory that holds data is refused. */
  assert_int_equal(replay_load(b, path, &err), SHOAL_ESTATE);
  /* Saving again replaces the file atomically. */
  assert_int_equal(replay_save(b, path, &err), 0);
  free(x);
  free(y);
  replay_destroy(a);
  replay_destroy(b);
}

static void expect_refused(replay_config c, int code, const char *words) {
  replay *b = NULL;
  assert_int_equal(replay_create(&c, &b, NULL), 0);
  shoal_error err = {0};
  assert_int_equal(replay_load(b, path, &err), code);
  if (!strstr(err.msg, words)) print_message("message: %s\n", err.msg);
  assert_non_null(strstr(err.msg, words));
  replay_stats st;
  replay_get_stats(b, &st);
  assert_true(code ? st.held == 0 && st.inserted_steps == 0 : st.held > 0);
  /* Still usable. */
  fill(b, 0, 1, 5);
  replay_destroy(b);
}

static void test_other_spec_refused(void **state) {
  replay *a = build();
  assert_int_equal(replay_save(a, path, NULL), 0);
  replay_destroy(a);
  replay_config c = spec();
  c.capacity = 60;
  expect_refused(c, SHOAL_EINVAL, "capacity 50");
  c = spec();
  c.cols[0].shape[1] = 5;
  expect_refused(c, SHOAL_EINVAL, "shape (3,4), this memory has (3,5)");
  c = spec();
  c.cols[1].dtype = REPLAY_I64;
  expect_refused(c, SHOAL_EINVAL, "'action' is i32, this memory has i64");
  c = spec();
  c.frame_stack = 4;
  expect_refused(c, SHOAL_EINVAL, "frame_stack 2");
  c = spec();
  c.kind = REPLAY_UNIFORM;
  expect_refused(c, SHOAL_EINVAL, "prioritized");
  c = spec();
  c.alpha = 0.6;
  expect_refused(c, SHOAL_EINVAL, "alpha");
}

static long file_size(void) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return (long)st.st_size;
}

static void patch(long at, uint8_t x) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  fseek(f, at, SEEK_SET);
  int c = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(c ^ x, f);
  fclose(f);
}

static void test_corrupt_truncated_and_foreign_files_refused(void **state) {
  replay *a = build();
  assert_int_equal(replay_save(a, path, NULL), 0);
  replay_destroy(a);
  long size = file_size();
  /* A flipped bit among the items. */
  patch(size / 2, 0x10);
  expect_refused(spec(), SHOAL_EFORMAT, "corrupt");
  patch(size / 2, 0x10);
  expect_refused(spec(), 0, ""); /* restored: loads */
  /* A flipped bit in a frame: only the checksum can tell. */
  patch(size - 20, 0x04);
  expect_refused(spec(), SHOAL_EFORMAT, "fails its checksum");
  patch(size - 20, 0x04);
  /* A flipped bit in the spec reads as corruption, not as another spec. */
  patch(20, 0x01);
  expect_refused(spec(), SHOAL_EFORMAT, "header checksum");
  patch(20, 0x01);
  /* Truncated. */
  assert_int_equal(truncate(path, size - 3), 0);
  expect_refused(spec(), SHOAL_EFORMAT, "truncated");
  assert_int_equal(truncate(path, size / 3), 0);
  expect_refused(spec(), SHOAL_EFORMAT, "truncated");
  /* Not a replay file at all. */
  FILE *f = fopen(path, "wb");
  fputs("{\"not\": \"a replay file\"}\n", f);
  fclose(f);
  expect_refused(spec(), SHOAL_EFORMAT, "not a replay file");
  /* Missing. */
  unlink(path);
  expect_refused(spec(), SHOAL_ENOENT, "mem.rpl");
}

static void test_trailing_bytes_and_bad_dir(void **state) {
  replay *a = build();
  assert_int_equal(replay_save(a, path, NULL), 0);
  FILE *f = fopen(path, "ab");
  fputc('x', f);
  fclose(f);
  expect_refused(spec(), SHOAL_EFORMAT, "after its end");
  shoal_error err = {0};
  char bad[160];
  snprintf(bad, sizeof bad, "%s/no/such/dir/mem.rpl", dir);
  assert_int_equal(replay_save(a, bad, &err), SHOAL_EIO);
  assert_non_null(strstr(err.msg, "no/such/dir"));
  replay_destroy(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_round_trip_samples_identically, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_spec_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_truncated_and_foreign_files_refused, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_trailing_bytes_and_bad_dir, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
