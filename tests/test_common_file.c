/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_common_file.c — atomic file writes (common/file.h): replace, must-not-exist,
 * the streamed trio, errors that name the path, and no temporary file left behind. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"

static char g_dir[64];

static int setup(void **state) {
  snprintf(g_dir, sizeof g_dir, "/tmp/shoal_file_XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static void rm_tree(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  char p[512];
  while (d && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    if (unlink(p) != 0) rm_tree(p);
  }
  if (d) closedir(d);
  rmdir(dir);
}

static int teardown(void **state) {
  rm_tree(g_dir);
  return 0;
}

static void path_in(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", g_dir, name);
}

/* Entries of g_dir whose name starts with ".tmp.". */
static int count_tmp(void) {
  DIR *d = opendir(g_dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) n += strncmp(de->d_name, ".tmp.", 5) == 0;
  if (d) closedir(d);
  return n;
}

static void assert_file_holds(const char *path, const char *text) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  char buf[256] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  assert_int_equal(n, strlen(text));
  assert_string_equal(buf, text);
}

static void test_replace_overwrites(void **state) {
  char p[256];
  path_in(p, sizeof p, "a.bin");
  shoal_error err = {0};
  assert_int_equal(shoal_file_write_atomic(p, "first", 5, SHOAL_FILE_REPLACE, &err), 0);
  assert_file_holds(p, "first");
  assert_int_equal(shoal_file_write_atomic(p, "second!", 7, SHOAL_FILE_REPLACE, &err), 0);
  assert_file_holds(p, "second!");
  assert_int_equal(shoal_file_write_atomic(p, NULL, 0, SHOAL_FILE_REPLACE, &err), 0);
  assert_file_holds(p, "");
  struct stat sb;
  assert_int_equal(stat(p, &sb), 0);
  assert_int_equal(sb.st_mode & 0600, 0600);
  assert_int_equal(count_tmp(), 0);
}

static void test_excl_refuses_an_existing_file(void **state) {
  char p[256];
  path_in(p, sizeof p, "once.json");
  shoal_error err = {0};
  assert_int_equal(shoal_file_write_atomic(p, "one", 3, SHOAL_FILE_EXCL, &err), 0);
  assert_int_equal(shoal_file_write_atomic(p, "two", 3, SHOAL_FILE_EXCL, &err), SHOAL_EEXIST);
  assert_int_equal(err.code, SHOAL_EEXIST);
  assert_non_null(strstr(err.msg, p));
  assert_non_null(strstr(err.msg, "exists"));
  assert_file_holds(p, "one");
  assert_int_equal(count_tmp(), 0);
}

/* A spare is written into from its start, cut to what was written and renamed into
 * place (the same inode); a spare that is gone is no error (a new file is made). */
static void test_reuse_writes_into_a_spare(void **state) {
  char spare[256], a[256], b[256], c[256];
  path_in(spare, sizeof spare, ".spare.1");
  path_in(a, sizeof a, "a.bin");
  path_in(b, sizeof b, "b.bin");
  path_in(c, sizeof c, "c.bin");
  shoal_error err = {0};
  assert_int_equal(shoal_file_write_atomic(spare, "an old, longer file", 19, 0, &err), 0);
  struct stat s0, s1;
  assert_int_equal(stat(spare, &s0), 0);
  shoal_file_tmp t;
  assert_int_equal(shoal_file_tmp_reuse(&t, a, spare, &err), 0);
  assert_int_equal(t.reused, 1);
  assert_int_equal(access(spare, F_OK), -1); /* taken */
  assert_int_equal(shoal_file_tmp_write(&t, "new", 3, &err), 0);
  assert_int_equal(shoal_file_tmp_write(&t, "er", 2, &err), 0);
  assert_int_equal(shoal_file_tmp_commit(&t, SHOAL_FILE_EXCL, &err), 0);
  assert_file_holds(a, "newer");
  assert_int_equal(stat(a, &s1), 0);
  assert_int_equal(s1.st_ino, s0.st_ino);
  /* The spare is gone now: a new file. */
  assert_int_equal(shoal_file_tmp_reuse(&t, b, spare, &err), 0);
  assert_int_equal(t.reused, 0);
  assert_int_equal(shoal_file_tmp_write(&t, "fresh", 5, &err), 0);
  assert_int_equal(shoal_file_tmp_commit(&t, SHOAL_FILE_EXCL, &err), 0);
  assert_file_holds(b, "fresh");
  /* No spare named: as shoal_file_tmp_open. */
  assert_int_equal(shoal_file_tmp_reuse(&t, c, NULL, &err), 0);
  assert_int_equal(t.reused, 0);
  shoal_file_tmp_abort(&t);
  assert_int_equal(access(c, F_OK), -1);
  /* A spare whose destination exists (EXCL): refused, nothing left, the spare used up. */
  assert_int_equal(shoal_file_write_atomic(spare, "0123456789", 10, 0, &err), 0);
  assert_int_equal(shoal_file_tmp_reuse(&t, a, spare, &err), 0);
  assert_int_equal(t.reused, 1);
  assert_int_equal(shoal_file_tmp_write(&t, "x", 1, &err), 0);
  assert_int_equal(shoal_file_tmp_commit(&t, SHOAL_FILE_EXCL, &err), SHOAL_EEXIST);
  assert_file_holds(a, "newer");
  assert_int_equal(access(spare, F_OK), -1);
  assert_int_equal(count_tmp(), 0);
}

/* Whether path holds exactly the n bytes of want. */
static int file_equals(const char *path, const unsigned char *want, size_t n) {
  struct stat sb;
  if (stat(path, &sb) != 0 || (size_t)sb.st_size != n) return 0;
  unsigned char *got = malloc(n + 1);
  FILE *f = fopen(path, "rb");
  size_t r = f ? fread(got, 1, n + 1, f) : 0;
  if (f) fclose(f);
  int ok = r == n && memcmp(got, want, n) == 0;
  free(got);
  return ok;
}

/* Direct writes (shoal_file_tmp_direct): pieces of any length and alignment come out as
 * the bytes written, the file cut to its length (the last block goes out padded), over a
 * stage boundary, into a longer spare, and an abort leaves nothing. On a filesystem
 * without direct writes the same bytes come out through the cache. */
static void test_direct_writes(void **state) {
  size_t n = 2 * (size_t)SHOAL_FILE_STAGE + 12345, spare_more = 5000;
  unsigned char *src = malloc(n + spare_more);
  assert_non_null(src);
  for (size_t i = 0; i < n + spare_more; i++) src[i] = (unsigned char)(i * 2654435761u >> 13);
  /* total lengths: empty, under a block, one stage and a header, past two stages */
  const size_t lens[] = {0, 100, (size_t)SHOAL_FILE_STAGE + 32, n};
  shoal_error err = {0};
  char p[256], spare[256];
  path_in(p, sizeof p, "seg.bin");
  path_in(spare, sizeof spare, ".spare.1");
  int on = -1;
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
    for (int reuse = 0; reuse < 2; reuse++) {
      if (reuse) /* a spare longer than what is written: its tail must not survive */
        assert_int_equal(shoal_file_write_atomic(spare, src, lens[k] + spare_more, 0, &err), 0);
      shoal_file_tmp t;
      assert_int_equal(shoal_file_tmp_reuse(&t, p, reuse ? spare : NULL, &err), 0);
      int d = shoal_file_tmp_direct(&t);
      if (on < 0) on = d;
      assert_int_equal(d, on); /* one filesystem: the same answer each time */
      if (d) {
        assert_true(fcntl(t.fd, F_GETFL) & O_DIRECT);
        assert_int_equal(shoal_file_tmp_direct(&t), 1);
      }
      /* a 32-byte header, then the rest in pieces of odd sizes */
      size_t off = 0, piece = 32;
      while (off < lens[k]) {
        size_t m = lens[k] - off < piece ? lens[k] - off : piece;
        assert_int_equal(shoal_file_tmp_write(&t, src + off, m, &err), 0);
        off += m;
        piece = piece * 7 + 4093;
      }
      assert_int_equal(t.len, lens[k]);
      assert_int_equal(shoal_file_tmp_commit(&t, SHOAL_FILE_REPLACE, &err), 0);
      assert_true(file_equals(p, src, lens[k]));
      assert_int_equal(access(spare, F_OK), -1);
    }
  }
  /* Asked for after a write went out through the cache: refused, the bytes intact. */
  shoal_file_tmp t;
  assert_int_equal(shoal_file_tmp_open(&t, p, &err), 0);
  assert_int_equal(shoal_file_tmp_write(&t, src, 7, &err), 0);
  assert_int_equal(shoal_file_tmp_direct(&t), 0);
  assert_int_equal(shoal_file_tmp_write(&t, src + 7, 5000, &err), 0);
  assert_int_equal(shoal_file_tmp_commit(&t, SHOAL_FILE_REPLACE, &err), 0);
  assert_true(file_equals(p, src, 5007));
  /* An abort with bytes staged: nothing left, the destination as it was. */
  assert_int_equal(shoal_file_tmp_open(&t, p, &err), 0);
  assert_int_equal(shoal_file_tmp_direct(&t), on);
  assert_int_equal(shoal_file_tmp_write(&t, src, (size_t)SHOAL_FILE_STAGE + 9, &err), 0);
  shoal_file_tmp_abort(&t);
  assert_true(file_equals(p, src, 5007));
  assert_int_equal(count_tmp(), 0);
  printf("direct writes %s on this filesystem (%s)\n", on ? "are" : "are not", g_dir);
  free(src);
}

static void test_missing_folder_names_the_path(void **state) {
  char p[256];
  path_in(p, sizeof p, "no/such/dir/x.bin");
  for (int flags = SHOAL_FILE_REPLACE; flags <= SHOAL_FILE_EXCL; flags++) {
    shoal_error err = {0};
    assert_int_equal(shoal_file_write_atomic(p, "x", 1, flags, &err), SHOAL_ENOENT);
    assert_int_equal(err.code, SHOAL_ENOENT);
    char where[256];
    snprintf(where, sizeof where, "%s/no/such/dir/", g_dir);
    assert_non_null(strstr(err.msg, where));
    assert_non_null(strstr(err.msg, "cannot create"));
    assert_non_null(strstr(err.msg, "No such file or directory"));
  }
  assert_int_equal(count_tmp(), 0);
}

/* The rename fails (a folder holds the name): SHOAL_EIO naming it, nothing left. */
static void test_failed_rename_leaves_nothing(void **state) {
  char p[256];
  path_in(p, sizeof p, "taken");
  assert_int_equal(mkdir(p, 0755), 0);
  char inside[300];
  snprintf(inside, sizeof inside, "%s/keep", p);
  FILE *f = fopen(inside, "w");
  fclose(f);
  shoal_error err = {0};
  assert_int_equal(shoal_file_write_atomic(p, "x", 1, SHOAL_FILE_REPLACE, &err), SHOAL_EIO);
  assert_non_null(strstr(err.msg, "cannot rename into"));
  assert_non_null(strstr(err.msg, p));
  assert_int_equal(count_tmp(), 0);
}

static void test_streamed_commit_and_abort(void **state) {
  char p[256];
  path_in(p, sizeof p, "streamed.log");
  shoal_error err = {0};
  shoal_file_tmp t;
  assert_int_equal(shoal_file_tmp_open(&t, p, &err), 0);
  assert_true(t.fd >= 0);
  /* The temporary file sits beside the destination, named as the header says. */
  char want[200];
  snprintf(want, sizeof want, "%s/.tmp.streamed.log.%s.%ld.", g_dir, shoal_file_host_tag(),
           (long)getpid());
  assert_memory_equal(t.tmp, want, strlen(want));
  assert_int_equal(count_tmp(), 1);
  assert_int_equal(access(p, F_OK), -1); /* nothing visible before the commit */
  assert_int_equal(shoal_file_tmp_write(&t, "ab", 2, &err), 0);
  assert_int_equal(shoal_file_tmp_write(&t, "cd", 2, &err), 0);
  assert_int_equal(shoal_file_tmp_commit(&t, SHOAL_FILE_REPLACE, &err), 0);
  assert_int_equal(t.fd, -1);
  assert_file_holds(p, "abcd");
  assert_int_equal(count_tmp(), 0);

  assert_int_equal(shoal_file_tmp_open(&t, p, &err), 0);
  assert_int_equal(shoal_file_tmp_write(&t, "zz", 2, &err), 0);
  shoal_file_tmp_abort(&t);
  shoal_file_tmp_abort(&t); /* twice: a no-op */
  assert_file_holds(p, "abcd");
  assert_int_equal(count_tmp(), 0);

  /* A commit that loses (EXCL on an existing file) removes its temporary file too. */
  assert_int_equal(shoal_file_tmp_open(&t, p, &err), 0);
  assert_int_equal(shoal_file_tmp_write(&t, "zz", 2, &err), 0);
  assert_int_equal(shoal_file_tmp_commit(&t, SHOAL_FILE_EXCL, &err), SHOAL_EEXIST);
  assert_file_holds(p, "abcd");
  assert_int_equal(count_tmp(), 0);
}

static void test_bad_paths(void **state) {
  shoal_error err = {0};
  char dir[256];
  path_in(dir, sizeof dir, "");
  assert_int_equal(shoal_file_write_atomic(dir, "x", 1, SHOAL_FILE_REPLACE, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "names no file"));
  char *longp = malloc(SHOAL_FILE_PATH_MAX + 10);
  memset(longp, 'a', SHOAL_FILE_PATH_MAX + 9);
  longp[SHOAL_FILE_PATH_MAX + 9] = 0;
  assert_int_equal(shoal_file_write_atomic(longp, "x", 1, SHOAL_FILE_REPLACE, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "too long"));
  free(longp);
  assert_int_equal(count_tmp(), 0);
}

typedef struct racer {
  const char *path;
  char text[16];
  int rc;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  r->rc = shoal_file_write_atomic(r->path, r->text, strlen(r->text), SHOAL_FILE_EXCL, NULL);
  return NULL;
}

/* Eight threads create one name: exactly one wins, the file is the winner's. */
static void test_excl_race_has_one_winner(void **state) {
  char p[256];
  path_in(p, sizeof p, "raced");
  enum { N = 8 };
  racer r[N];
  pthread_t th[N];
  for (int i = 0; i < N; i++) {
    r[i].path = p;
    snprintf(r[i].text, sizeof r[i].text, "writer %d", i);
    assert_int_equal(pthread_create(&th[i], NULL, race, &r[i]), 0);
  }
  int wins = 0, winner = -1;
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    if (r[i].rc == 0)
      wins++, winner = i;
    else
      assert_int_equal(r[i].rc, SHOAL_EEXIST);
  }
  assert_int_equal(wins, 1);
  assert_file_holds(p, r[winner].text);
  assert_int_equal(count_tmp(), 0);
}

static void test_host_tag(void **state) {
  const char *h = shoal_file_host_tag();
  assert_true(h[0] != 0);
  assert_true(strlen(h) < 64);
  for (const char *c = h; *c; c++) assert_true(isalnum((unsigned char)*c) || *c == '-');
  assert_ptr_equal(h, shoal_file_host_tag());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_replace_overwrites, setup, teardown),
      cmocka_unit_test_setup_teardown(test_excl_refuses_an_existing_file, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reuse_writes_into_a_spare, setup, teardown),
      cmocka_unit_test_setup_teardown(test_direct_writes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_folder_names_the_path, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failed_rename_leaves_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_streamed_commit_and_abort, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_paths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_excl_race_has_one_winner, setup, teardown),
      cmocka_unit_test(test_host_tag),
  };
  return cmocka_run_group_tests_name("common_file", tests, NULL, NULL);
}
