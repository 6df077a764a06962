/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_workflow_tboard.c — metrics as TensorBoard event files. A reader here
 * (its own bitwise CRC32C, its own protobuf decoding) parses what cli/tboard.c writes:
 * TFRecord framing with masked CRC32C of the length and of the data, the file_version
 * event first, then Event{wall_time, step, summary{value{tag, simple_value}}}. protoc
 * --decode with TensorFlow's field numbers cross-checks one record. The store mirror
 * writes each row once across syncs, and a real `shoal run` leaves event files in its
 * run folder holding exactly the run's metrics. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>

#include "cli/tboard.h"
#include "common/crc32c.h"
#include "store/store.h"
#include "proc_util.h"

static int setup(void **state) { return wf_setup("tboard"); }
static int teardown(void **state) { return wf_teardown(); }

/* ---- an independent reader ------------------------------------------------------- */

static uint32_t crc32c_bitwise(const uint8_t *p, size_t n) {
  uint32_t c = ~0u;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
  }
  return ~c;
}
static uint32_t unmask(uint32_t m) {
  uint32_t r = m - 0xa282ead8u;
  return (r >> 17) | (r << 15);
}
static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t varint(const uint8_t **p, const uint8_t *end) {
  uint64_t v = 0;
  for (int s = 0; *p < end && s < 64; s += 7) {
    uint8_t b = *(*p)++;
    v |= (uint64_t)(b & 0x7f) << s;
    if (!(b & 0x80)) return v;
  }
  fail_msg("bad varint");
  return 0;
}

typedef struct ev {
  double wall_time;
  int64_t step;
  char version[32];
  char tag[256];
  float value;
  int nvalues;
} ev;

/* Decodes an Event; unknown fields fail the test (we only write these). */
static void decode(const uint8_t *p, size_t n, ev *e) {
  memset(e, 0, sizeof *e);
  const uint8_t *end = p + n;
  while (p < end) {
    uint64_t key = varint(&p, end);
    if (key == 0x09) {
      uint64_t b = le(p, 8);
      memcpy(&e->wall_time, &b, 8);
      p += 8;
    } else if (key == 0x10) {
      e->step = (int64_t)varint(&p, end);
    } else if (key == 0x1a) {
      uint64_t l = varint(&p, end);
      snprintf(e->version, sizeof e->version, "%.*s", (int)l, p);
      p += l;
    } else if (key == 0x2a) {
      const uint8_t *send = p + varint(&p, end);
      while (p < send) {
        assert_int_equal(varint(&p, send), 0x0a); /* Summary.value */
        const uint8_t *vend = p + varint(&p, send);
        e->nvalues++;
        while (p < vend) {
          uint64_t k = varint(&p, vend);
          if (k == 0x0a) {
            uint64_t l = varint(&p, vend);
            snprintf(e->tag, sizeof e->tag, "%.*s", (int)l, p);
            p += l;
          } else {
            assert_int_equal(k, 0x15);
            uint32_t b = (uint32_t)le(p, 4);
            memcpy(&e->value, &b, 4);
            p += 4;
          }
        }
      }
    } else {
      fail_msg("unexpected field key 0x%llx", (unsigned long long)key);
    }
  }
  assert_true(p == end);
}

/* Reads every record of an event file, checking both CRCs of each. */
static ev *read_events(const char *path, size_t *count) {
  size_t len;
  uint8_t *b = (uint8_t *)wf_slurp(path, &len);
  ev *out = NULL;
  size_t n = 0, off = 0;
  while (off < len) {
    assert_true(off + 12 <= len);
    uint64_t l = le(b + off, 8);
    assert_int_equal(unmask((uint32_t)le(b + off + 8, 4)), crc32c_bitwise(b + off, 8));
    assert_true(off + 12 + l + 4 <= len);
    assert_int_equal(unmask((uint32_t)le(b + off + 12 + l, 4)), crc32c_bitwise(b + off + 12, l));
    out = realloc(out, (n + 1) * sizeof *out);
    decode(b + off + 12, l, &out[n++]);
    off += 12 + l + 4;
  }
  free(b);
  *count = n;
  return out;
}

/* The event file in dir (exactly one). */
static void find_event_file(const char *dir, char *path, size_t cap) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int found = 0;
  while ((e = readdir(d)))
    if (strstr(e->d_name, "events.out.tfevents.")) {
      snprintf(path, cap, "%s/%s", dir, e->d_name);
      found++;
    }
  closedir(d);
  assert_int_equal(found, 1);
}

/* ---- tests ----------------------------------------------------------------------- */

static void test_crc32c(void **state) {
  /* The check value of CRC-32C (RFC 3720, B.4): "123456789" -> 0xE3069283. */
  assert_int_equal(shoal_crc32c(0, "123456789", 9), 0xE3069283u);
  assert_int_equal(crc32c_bitwise((const uint8_t *)"123456789", 9), 0xE3069283u);
  uint8_t zeros[32] = {0};
  assert_int_equal(shoal_crc32c(0, zeros, 32), 0x8A9136AAu); /* RFC 3720 B.4: 32 bytes of 0 */
  uint32_t c = shoal_crc32c(0, "abc", 3);
  assert_int_equal(unmask(tb_mask_crc(c)), c);
}

static void test_writer_round_trip(void **state) {
  char dir[400];
  snprintf(dir, sizeof dir, "%s/w/nested", wf_dir);
  shoal_error err = {0};
  tb_writer *w;
  assert_int_equal(tb_writer_open(&w, dir, &err), 0);
  char longtag[201];
  memset(longtag, 'x', 200);
  longtag[200] = 0;
  struct {
    const char *tag;
    int64_t step;
    double t;
    float v;
  } in[] = {{"return100", 12000, 1.8e9 + 0.25, 187.5f},
            {"loss", 0, 1.8e9 + 1, 0.0123f},
            {"hparam/dqn.lr", 5000000000LL, 1.8e9 + 2, 1e-4f},
            {longtag, 7, 1.8e9 + 3, -3.5f},
            {"nan", 8, 1.8e9 + 4, NAN}};
  for (size_t i = 0; i < 5; i++)
    assert_int_equal(tb_writer_scalar(w, in[i].tag, in[i].step, in[i].t, in[i].v, &err), 0);
  assert_int_equal(tb_writer_scalar(w, "", 1, 1, 1, &err), SHOAL_EINVAL);
  char path[600];
  snprintf(path, sizeof path, "%s", tb_writer_path(w));
  tb_writer_close(w);
  size_t n;
  ev *e = read_events(path, &n);
  assert_int_equal(n, 6);
  assert_string_equal(e[0].version, "brain.Event:2");
  assert_true(e[0].wall_time > 1.7e9);
  for (size_t i = 0; i < 5; i++) {
    assert_int_equal(e[i + 1].nvalues, 1);
    assert_string_equal(e[i + 1].tag, in[i].tag);
    assert_true(e[i + 1].step == in[i].step);
    assert_true(e[i + 1].wall_time == in[i].t);
    if (isnan(in[i].v))
      assert_true(isnan(e[i + 1].value));
    else
      assert_true(e[i + 1].value == in[i].v);
  }
  free(e);

  /* protoc decodes the second record with TensorFlow's field numbers. */
  if (access("/usr/bin/protoc", X_OK) == 0) {
    size_t len;
    uint8_t *b = (uint8_t *)wf_slurp(path, &len);
    size_t off = 12 + le(b, 8) + 4, l = le(b + off, 8);
    char rec[600], proto[600], cmd[2400];
    snprintf(rec, sizeof rec, "%s/rec.bin", wf_dir);
    snprintf(proto, sizeof proto, "%s/event.proto", wf_dir);
    FILE *f = fopen(rec, "wb");
    fwrite(b + off + 12, 1, l, f);
    fclose(f);
    free(b);
    f = fopen(proto, "w");
    fprintf(f,
            "syntax = \"proto3\";\npackage tensorflow;\n"
            "message Summary { message Value { string tag = 1; float simple_value = 2; }\n"
            "  repeated Value value = 1; }\n"
            "message Event { double wall_time = 1; int64 step = 2;\n"
            "  oneof what { string file_version = 3; Summary summary = 5; } }\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd %s && protoc --decode=tensorflow.Event event.proto < rec.bin",
             wf_dir);
    FILE *pp = popen(cmd, "r");
    char text[2048];
    size_t got = fread(text, 1, sizeof text - 1, pp);
    text[got] = 0;
    assert_int_equal(pclose(pp), 0);
    printf("%s", text);
    assert_non_null(strstr(text, "step: 12000"));
    assert_non_null(strstr(text, "tag: \"return100\""));
    assert_non_null(strstr(text, "simple_value: 187.5"));
    assert_non_null(strstr(text, "wall_time: 1800000000.25"));
  }
}

static void test_mirror_writes_each_row_once(void **state) {
  char uri[400], dir[400];
  snprintf(uri, sizeof uri, "file://%s/store", wf_dir);
  snprintf(dir, sizeof dir, "%s/mirror", wf_dir);
  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, uri, &err), 0);
  assert_int_equal(store_run_create(st, "m1", NULL, STORE_RUN_RUNNING, &err), 0);
  store_metric rows[6];
  const char *names[] = {"sps", "loss", "sps", "loss", "hparam/dqn.lr", "sps"};
  const int64_t steps[] = {100, 100, 200, 200, 50, 150};
  const double times[] = {10, 10, 11, 11, 11, 12};
  for (int i = 0; i < 6; i++) {
    rows[i] = (store_metric){.step = steps[i], .time = 1.8e9 + times[i], .value = i + 0.5};
    snprintf(rows[i].run, sizeof rows[i].run, "m1");
    snprintf(rows[i].name, sizeof rows[i].name, "%s", names[i]);
  }
  tb_mirror *m;
  assert_int_equal(tb_mirror_create(&m, st, "m1", dir, &err), 0);
  size_t w;
  assert_int_equal(tb_mirror_sync(m, &w, &err), 0); /* nothing yet */
  assert_int_equal(w, 0);
  assert_int_equal(store_metrics_append(st, rows, 3, &err), 0); /* t=10,10,11 */
  assert_int_equal(tb_mirror_sync(m, &w, &err), 0);
  assert_int_equal(w, 3);
  /* A row at the same time as the last one written, and one at an earlier step (a
   * resumed learner) but a later time: both new. */
  assert_int_equal(store_metrics_append(st, rows + 3, 3, &err), 0);
  assert_int_equal(tb_mirror_sync(m, &w, &err), 0);
  assert_int_equal(w, 3);
  assert_int_equal(tb_mirror_sync(m, &w, &err), 0);
  assert_int_equal(w, 0);
  tb_mirror_destroy(m);
  store_close(st);
  char path[700];
  find_event_file(dir, path, sizeof path);
  size_t n;
  ev *e = read_events(path, &n);
  assert_int_equal(n, 7);
  for (int i = 0; i < 6; i++) {
    bool found = false;
    for (size_t j = 1; j < n && !found; j++)
      found = !strcmp(e[j].tag, names[i]) && e[j].step == steps[i] && e[j].value == i + 0.5f;
    assert_true(found);
  }
  free(e);
}

static void test_shoal_run_writes_events(void **state) {
  char cfg[4200], store_set[400], uri[400], tbdir[600];
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  snprintf(store_set, sizeof store_set, "store.uri=file://%s/runs", wf_dir);
  snprintf(uri, sizeof uri, "file://%s/runs", wf_dir);
  char *argv[] = {wf_shoal, "run", cfg, "--set", store_set, "--set", "run.name=tb1", "--set",
                  "run.max_seconds=8", "--set", "learner.warmup=500", "--set", "run.eval_every_s=1",
                  /* A return CartPole cannot reach: evaluations every second, and the run
                   * lasts its 8 s however fast it learns. */
                  "--set", "run.solve_return=1000", "--quiet", NULL};
  int rc;
  char *out = wf_run(argv, 120, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  free(out);

  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, uri, &err), 0);
  store_metric *rows;
  size_t nrows;
  assert_int_equal(store_metrics_query(st, "tb1", NULL, 0, INT64_MAX, &rows, &nrows, &err), 0);
  store_close(st);
  assert_true(nrows > 10);

  snprintf(tbdir, sizeof tbdir, "%s/runs/tb1/tb", wf_dir);
  char path[800];
  find_event_file(tbdir, path, sizeof path);
  size_t n;
  ev *e = read_events(path, &n);
  assert_int_equal(n, nrows + 1); /* every row once, after the file_version event */
  bool has_return = false, has_eval = false;
  for (size_t i = 0; i < nrows; i++) {
    bool found = false;
    for (size_t j = 1; j < n && !found; j++)
      found = !strcmp(e[j].tag, rows[i].name) && e[j].step == rows[i].step &&
              e[j].wall_time == rows[i].time &&
              (e[j].value == (float)rows[i].value || (isnan(e[j].value) && isnan(rows[i].value)));
    if (!found) fail_msg("row %s step %lld not in %s", rows[i].name, (long long)rows[i].step, path);
    has_return |= !strcmp(rows[i].name, "return100");
    has_eval |= !strcmp(rows[i].name, "eval_return");
  }
  assert_true(has_return && has_eval);
  free(e);
  free(rows);

  /* The export command: the same rows elsewhere; into the run folder it refuses. */
  char outdir[500];
  snprintf(outdir, sizeof outdir, "%s/export", wf_dir);
  char *a2[] = {wf_shoal, "tboard", "tb1", "--store", uri, "--out", outdir, NULL};
  out = wf_run(a2, 30, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  free(out);
  snprintf(tbdir, sizeof tbdir, "%s/tb1", outdir);
  find_event_file(tbdir, path, sizeof path);
  e = read_events(path, &n);
  assert_int_equal(n, nrows + 1);
  free(e);
  char *a3[] = {wf_shoal, "tboard", "tb1", "--store", uri, NULL};
  out = wf_run(a3, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "already has event files"));
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc32c),
      cmocka_unit_test(test_writer_round_trip),
      cmocka_unit_test(test_mirror_writes_each_row_once),
      cmocka_unit_test(test_shoal_run_writes_events),
  };
  return cmocka_run_group_tests_name("workflow_tboard", tests, setup, teardown);
}
