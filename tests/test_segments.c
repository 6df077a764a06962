/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_segments.c — experience segments in the store (store/segments.c):
 *   test_segments file       the file backend in a fresh temporary folder
 *   test_segments mongodb    MongoDB: ctest's stand-in or $SHOAL_TEST_MONGO_URI (mongo_test.h)
 * Round trips, sequence numbers under concurrent writers (processes), damaged
 * segments (bad CRC, truncated, bad magic) and the value checks (NaN, action range,
 * spec, flags).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/mongo_test.h"

static char g_uri[1024], g_dir[512], g_prefix[32];
static int g_file;

static void run_name(char *out, const char *tag) {
  snprintf(out, STORE_NAME_MAX, "%s-%s", g_prefix, tag);
}

static store *open_store(void) {
  shoal_error err = {0};
  store *st = NULL;
  if (store_open(&st, g_uri, &err)) fail_msg("store_open: %s", err.msg);
  return st;
}

static const store_segment_spec CARTPOLE = {
    .obs_dtype = STORE_SEG_F32, .obs_ndim = 1, .obs_shape = {4}, .act_dtype = STORE_SEG_I32};

/* N rows of a made-up episode piece: row i has obs (i, i+.5, -i, k), action i%2,
 * reward 1; rows at multiples of 7 and the last one end (terminated when even). */
static void fill(store_segment *seg, uint32_t n, int prio, float k) {
  uint32_t ends = 0;
  for (uint32_t i = 0; i < n; i++) ends += (i % 7 == 6 || i == n - 1);
  shoal_error err = {0};
  assert_int_equal(store_segment_reserve(seg, &CARTPOLE, n, ends, prio, &err), 0);
  float *o = seg->obs, *f = seg->final_obs;
  int32_t *a = seg->action;
  uint32_t e = 0;
  for (uint32_t i = 0; i < n; i++) {
    o[4 * i] = (float)i, o[4 * i + 1] = (float)i + 0.5f, o[4 * i + 2] = -(float)i, o[4 * i + 3] = k;
    a[i] = (int32_t)(i % 2);
    seg->reward[i] = 1.0f;
    int end = (i % 7 == 6 || i == n - 1);
    seg->terminated[i] = (uint8_t)(end && i % 2 == 0);
    seg->truncated[i] = (uint8_t)(end && i % 2 == 1);
    if (end) {
      for (int j = 0; j < 4; j++) f[4 * e + j] = 100.0f + (float)i + (float)j;
      e++;
    }
    if (prio) seg->priority[i] = 0.25f * (float)i;
  }
  snprintf(seg->source, sizeof seg->source, "test-src");
}

static void make_run(store *st, const char *run) {
  shoal_error err = {0};
  int rc = store_run_create(st, run, "env.id: CartPole-v1\n", STORE_RUN_CREATED, &err);
  if (rc && rc != SHOAL_EEXIST) fail_msg("run_create: %s", err.msg);
}

static void test_round_trip(void **state) {
  (void)state;
  store *st = open_store();
  char run[STORE_NAME_MAX];
  run_name(run, "rt");
  make_run(st, run);
  shoal_error err = {0};
  uint64_t seqs[8];
  size_t n = 99;
  assert_int_equal(store_segment_list(st, run, STORE_SEG_FIRST, seqs, 8, &n, &err), 0);
  assert_int_equal(n, 0);

  store_segment w = {0}, r = {0};
  uint32_t rows[3] = {5, 64, 1};
  for (int s = 0; s < 3; s++) {
    fill(&w, rows[s], s == 1, (float)s);
    assert_int_equal(store_segment_check(&w, NULL, &err), 0);
    assert_int_equal(store_segment_write(st, run, &w, &err), 0);
    assert_int_equal(w.seq, (uint64_t)s);
  }
  assert_int_equal(store_segment_list(st, run, STORE_SEG_FIRST, seqs, 8, &n, &err), 0);
  assert_int_equal(n, 3);
  for (int s = 0; s < 3; s++) assert_int_equal(seqs[s], (uint64_t)s);
  assert_int_equal(store_segment_list(st, run, 0, seqs, 8, &n, &err), 0);
  assert_int_equal(n, 2);
  assert_int_equal(seqs[0], 1);
  assert_int_equal(store_segment_list(st, run, 0, seqs, 1, &n, &err), 0);
  assert_int_equal(n, 1);
  assert_int_equal(store_segment_list(st, run, 2, seqs, 8, &n, &err), 0);
  assert_int_equal(n, 0);

  for (int s = 0; s < 3; s++) {
    store_segment want = {0};
    fill(&want, rows[s], s == 1, (float)s);
    assert_int_equal(store_segment_read(st, run, (uint64_t)s, &r, &err), 0);
    assert_int_equal(r.seq, (uint64_t)s);
    assert_int_equal(r.rows, rows[s]);
    assert_int_equal(r.ends, want.ends);
    assert_int_equal(r.has_priority, s == 1);
    assert_string_equal(r.source, "test-src");
    assert_string_equal(r.run, run);
    assert_true(r.wall_time > 1.6e9);
    assert_memory_equal(&r.spec, &CARTPOLE, sizeof CARTPOLE);
    assert_memory_equal(r.obs, want.obs, rows[s] * 16);
    assert_memory_equal(r.action, want.action, rows[s] * 4);
    assert_memory_equal(r.reward, want.reward, rows[s] * 4);
    assert_memory_equal(r.terminated, want.terminated, rows[s]);
    assert_memory_equal(r.truncated, want.truncated, rows[s]);
    assert_memory_equal(r.final_obs, want.final_obs, want.ends * 16);
    if (s == 1)
      assert_memory_equal(r.priority, want.priority, rows[s] * 4);
    else
      assert_null(r.priority);
    store_segment_free(&want);
  }
  assert_int_equal(store_segment_read(st, run, 3, &r, &err), SHOAL_ENOENT);
  assert_null(r.obs);

  /* A run that does not exist, a bad source name, a segment never laid out. */
  char ghost[STORE_NAME_MAX];
  run_name(ghost, "ghost");
  assert_int_equal(store_segment_write(st, ghost, &w, &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, ghost));
  assert_int_equal(store_segment_list(st, ghost, STORE_SEG_FIRST, seqs, 8, &n, &err), SHOAL_ENOENT);
  snprintf(w.source, sizeof w.source, "../x");
  assert_int_equal(store_segment_write(st, run, &w, &err), SHOAL_EINVAL);
  store_segment blank = {0};
  snprintf(blank.source, sizeof blank.source, "x");
  assert_int_equal(store_segment_write(st, run, &blank, &err), SHOAL_EINVAL);
  /* Too large for one document. */
  assert_int_equal(store_segment_reserve(&blank, &CARTPOLE, 1u << 20, 0, 0, &err), SHOAL_EFULL);
  store_segment_spec bad = CARTPOLE;
  bad.obs_shape[0] = 0;
  assert_int_equal(store_segment_reserve(&blank, &bad, 4, 0, 0, &err), SHOAL_EINVAL);
  store_segment_free(&blank);
  store_segment_free(&w);
  store_segment_free(&r);
  store_close(st);
}

static int writer_child(const char *run, int k, int count) {
  shoal_error err = {0};
  store *st = NULL;
  if (store_open(&st, g_uri, &err)) return 1;
  store_segment w = {0};
  int bad = 0;
  for (int i = 0; i < count; i++) {
    uint32_t n = 3;
    if (store_segment_reserve(&w, &CARTPOLE, n, 1, 0, &err)) return 1;
    float *o = w.obs;
    for (uint32_t j = 0; j < 4 * n; j++) o[j] = (float)(k * 1000 + i); /* who and which */
    memset(w.final_obs, 0, 16);
    w.truncated[n - 1] = 1;
    snprintf(w.source, sizeof w.source, "writer-%d", k);
    if (store_segment_write(st, run, &w, &err)) {
      fprintf(stderr, "writer %d: %s\n", k, err.msg);
      bad++;
    }
  }
  store_segment_free(&w);
  store_close(st);
  return bad ? 1 : 0;
}

/* Two processes writing at once: every segment gets its own number, the numbers are
 * 0..N-1 without gaps, and each segment reads back whole. */
static void test_concurrent_writers(void **state) {
  (void)state;
  store *st = open_store();
  char run[STORE_NAME_MAX];
  run_name(run, "conc");
  make_run(st, run);
  enum { WRITERS = 3, EACH = 15 };
  pid_t pids[WRITERS];
  for (int k = 0; k < WRITERS; k++) {
    pids[k] = fork();
    assert_true(pids[k] >= 0);
    if (pids[k] == 0) _exit(writer_child(run, k, EACH));
  }
  for (int k = 0; k < WRITERS; k++) {
    int status = 0;
    assert_int_equal(waitpid(pids[k], &status, 0), pids[k]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  uint64_t seqs[WRITERS * EACH + 4];
  size_t n = 0;
  shoal_error err = {0};
  assert_int_equal(store_segment_list(st, run, STORE_SEG_FIRST, seqs, WRITERS * EACH + 4, &n, &err),
                   0);
  assert_int_equal(n, WRITERS * EACH);
  int seen[WRITERS][EACH];
  memset(seen, 0, sizeof seen);
  store_segment r = {0};
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(seqs[i], (uint64_t)i);
    assert_int_equal(store_segment_read(st, run, seqs[i], &r, &err), 0);
    int v = (int)((float *)r.obs)[0], k = v / 1000, j = v % 1000;
    assert_true(k >= 0 && k < WRITERS && j >= 0 && j < EACH);
    seen[k][j]++;
  }
  for (int k = 0; k < WRITERS; k++)
    for (int j = 0; j < EACH; j++) assert_int_equal(seen[k][j], 1);
  store_segment_free(&r);
  store_close(st);
}

/* Damaged files (the file backend, where the test can reach the bytes). */
static void damage(const char *run, uint64_t seq, long off, int truncate_to) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s/segments/%020" PRIu64 ".seg", g_dir, run, seq);
  int fd = open(p, O_RDWR);
  assert_true(fd >= 0);
  if (truncate_to >= 0) {
    assert_int_equal(ftruncate(fd, truncate_to), 0);
  } else {
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
  }
  close(fd);
}

#ifdef SHOAL_TEST_MONGOC
/* MongoDB: runs update u on segment seq of run (through libmongoc, beside the store). */
static void damage_doc(const char *run, int seq, const char *u) {
  char db[128], cmd[2048], reply[1024];
  mongo_test_db(g_uri, db, sizeof db);
  snprintf(cmd, sizeof cmd,
           "{\"update\": \"segments\", \"updates\": [{\"q\": {\"run\": \"%s\", \"seq\": "
           "{\"$numberLong\": \"%d\"}}, \"u\": %s}]}",
           run, seq, u);
  if (mongo_test_command(g_uri, db, cmd, reply, sizeof reply)) fail_msg("%s: %s", cmd, reply);
  if (!strstr(reply, "\"nModified\" : 1")) fail_msg("%s: %s", cmd, reply);
}

/* The documents of five segments damaged in place: each read is refused with
 * SHOAL_EFORMAT naming the segment, and the numbers stay taken. */
static void damaged_mongo(void) {
  store *st = open_store();
  char run[STORE_NAME_MAX];
  run_name(run, "dmg");
  make_run(st, run);
  shoal_error err = {0};
  store_segment w = {0}, r = {0};
  for (int s = 0; s < 5; s++) {
    fill(&w, 20, 0, (float)s);
    assert_int_equal(store_segment_write(st, run, &w, &err), 0);
  }
  char zeros[512]; /* 320 zero bytes in base64: obs of 20 rows of 4 floats, all zero */
  memset(zeros, 'A', 424);
  zeros[424] = 0;
  char u[1024];
  snprintf(u, sizeof u,
           "{\"$set\": {\"obs\": {\"$binary\": {\"base64\": \"%sAAA=\", \"subType\": \"00\"}}}}",
           zeros);
  damage_doc(run, 0, u);                            /* data changed, same size */
  damage_doc(run, 1, "{\"$set\": {\"rows\": 19}}"); /* the row count */
  damage_doc(run, 2,
             "{\"$set\": {\"obs\": {\"$binary\": {\"base64\": \"AAAA\", "
             "\"subType\": \"00\"}}}}");                           /* a column cut short */
  damage_doc(run, 3, "{\"$unset\": {\"crc\": \"\"}}");             /* the CRC gone */
  damage_doc(run, 4, "{\"$set\": {\"spec.obs.dtype\": \"f99\"}}"); /* an unknown dtype */
  const char *want[5] = {"CRC mismatch", "column 'obs' is missing or has the wrong size",
                         "column 'obs' is missing or has the wrong size",
                         "missing or invalid fields", "missing or invalid fields"};
  for (int s = 0; s < 5; s++) {
    err = (shoal_error){0};
    assert_int_equal(store_segment_read(st, run, (uint64_t)s, &r, &err), SHOAL_EFORMAT);
    if (!strstr(err.msg, want[s])) fail_msg("segment %d: '%s' lacks '%s'", s, err.msg, want[s]);
    char where[160];
    snprintf(where, sizeof where, "segment %d of run '%s'", s, run);
    assert_non_null(strstr(err.msg, where));
    assert_null(r.obs);
    assert_int_equal(r.rows, 0);
  }
  fill(&w, 3, 0, 9);
  assert_int_equal(store_segment_write(st, run, &w, &err), 0);
  assert_int_equal(w.seq, 5);
  assert_int_equal(store_segment_read(st, run, 5, &r, &err), 0);
  store_segment_free(&w);
  store_segment_free(&r);
  store_close(st);
}
#endif

static void test_damaged(void **state) {
  (void)state;
  if (!g_file) {
#ifdef SHOAL_TEST_MONGOC
    damaged_mongo();
    return;
#else
    printf("(damaged documents: needs the test built with libmongoc)\n");
    skip();
#endif
  }
  store *st = open_store();
  char run[STORE_NAME_MAX];
  run_name(run, "dmg");
  make_run(st, run);
  shoal_error err = {0};
  store_segment w = {0}, r = {0};
  for (int s = 0; s < 5; s++) {
    fill(&w, 20, 0, (float)s);
    assert_int_equal(store_segment_write(st, run, &w, &err), 0);
  }
  damage(run, 0, 300, -1); /* a byte of obs */
  damage(run, 1, 32, -1);  /* the row count in the header */
  damage(run, 2, 0, 100);  /* truncated inside the header */
  damage(run, 3, 0, 400);  /* truncated inside the data */
  damage(run, 4, 0, -1);   /* the magic */
  const char *want[5] = {"CRC mismatch", "CRC mismatch", "shorter than its header", "CRC mismatch",
                         "bad magic"};
  for (int s = 0; s < 5; s++) {
    err = (shoal_error){0};
    assert_int_equal(store_segment_read(st, run, (uint64_t)s, &r, &err), SHOAL_EFORMAT);
    assert_non_null(strstr(err.msg, want[s]));
    assert_non_null(strstr(err.msg, ".seg"));
    assert_null(r.obs);
    assert_int_equal(r.rows, 0);
  }
  /* The damaged ones still hold their numbers: the next write takes 5. */
  fill(&w, 3, 0, 9);
  assert_int_equal(store_segment_write(st, run, &w, &err), 0);
  assert_int_equal(w.seq, 5);
  assert_int_equal(store_segment_read(st, run, 5, &r, &err), 0);
  store_segment_free(&w);
  store_segment_free(&r);
  store_close(st);
}

static void test_check(void **state) {
  (void)state;
  shoal_error err = {0};
  store_segment s = {0};
  store_segment_limits lim = {.spec = CARTPOLE, .num_actions = 2};
  fill(&s, 10, 1, 0);
  assert_int_equal(store_segment_check(&s, &lim, &err), 0);

  s.reward[3] = NAN;
  assert_int_equal(store_segment_check(&s, &lim, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "row 3"));
  assert_non_null(strstr(err.msg, "reward"));
  fill(&s, 10, 1, 0);
  ((float *)s.obs)[4 * 5 + 2] = INFINITY;
  assert_int_equal(store_segment_check(&s, &lim, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "row 5: obs[2]"));
  fill(&s, 10, 1, 0);
  ((float *)s.final_obs)[1] = NAN;
  assert_int_equal(store_segment_check(&s, &lim, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "final observation 0"));
  fill(&s, 10, 1, 0);
  ((int32_t *)s.action)[4] = 2;
  assert_int_equal(store_segment_check(&s, &lim, &err), SHOAL_ERANGE);
  assert_non_null(strstr(err.msg, "row 4: action 2 outside [0, 2)"));
  fill(&s, 10, 1, 0);
  ((int32_t *)s.action)[4] = -1;
  assert_int_equal(store_segment_check(&s, NULL, &err), SHOAL_ERANGE);
  fill(&s, 10, 1, 0);
  s.priority[2] = -1;
  assert_int_equal(store_segment_check(&s, &lim, &err), SHOAL_ERANGE);
  fill(&s, 10, 1, 0);
  s.terminated[1] = 2;
  assert_int_equal(store_segment_check(&s, &lim, &err), SHOAL_EFORMAT);
  fill(&s, 10, 1, 0);
  s.terminated[1] = 1; /* one more ended row than final observations */
  assert_int_equal(store_segment_check(&s, &lim, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "final observations"));
  fill(&s, 10, 1, 0);
  store_segment_limits other = lim;
  other.spec.obs_shape[0] = 6; /* Acrobot's observation */
  assert_int_equal(store_segment_check(&s, &other, &err), SHOAL_ESHAPE);
  assert_non_null(strstr(err.msg, "obs f32[4]"));
  assert_non_null(strstr(err.msg, "obs f32[6]"));

  /* A box action: bounds and NaN. */
  store_segment_spec box = {.obs_dtype = STORE_SEG_F32,
                            .obs_ndim = 1,
                            .obs_shape = {3},
                            .act_dtype = STORE_SEG_F32,
                            .act_ndim = 1,
                            .act_shape = {1}};
  static const float lo[1] = {-2}, hi[1] = {2};
  store_segment_limits pend = {.spec = box, .act_low = lo, .act_high = hi};
  assert_int_equal(store_segment_reserve(&s, &box, 2, 0, 0, &err), 0);
  ((float *)s.action)[0] = 1.5f;
  ((float *)s.action)[1] = 2.5f;
  assert_int_equal(store_segment_check(&s, &pend, &err), SHOAL_ERANGE);
  ((float *)s.action)[1] = NAN;
  assert_int_equal(store_segment_check(&s, &pend, &err), SHOAL_ENAN);
  ((float *)s.action)[1] = -2.0f;
  assert_int_equal(store_segment_check(&s, &pend, &err), 0);
  store_segment_free(&s);
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "file";
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(g_prefix, sizeof g_prefix, "seg%ld-%ld", (long)getpid(), (long)(ts.tv_nsec % 100000));
  if (strcmp(backend, "mongodb") == 0) {
    int mrc = mongo_test_uri(g_uri, sizeof g_uri, "shoal_test_segments");
    if (mrc) return mrc;
  } else {
    g_file = 1;
    snprintf(g_dir, sizeof g_dir, "/tmp/shoal-test-seg-XXXXXX");
    if (!mkdtemp(g_dir)) {
      perror("mkdtemp");
      return 1;
    }
    snprintf(g_uri, sizeof g_uri, "file://%s", g_dir);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_concurrent_writers),
      cmocka_unit_test(test_damaged),
      cmocka_unit_test(test_check),
  };
  int rc = cmocka_run_group_tests_name("segments", tests, NULL, NULL);
  if (g_file && rc == 0) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  }
  return rc;
}
