/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_workflow_plot.c — `shoal plot` from a file store's run folders: curves of
 * several runs, their mean with a min-max band, wall time on x, live changes marked;
 * the PNG has the asked size (read from its IHDR header); a missing metric or run is a
 * clear error; a --csv file's curve (another system's) drawn beside the runs. Runs and metrics are
 * written through store.h, so values are known. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <sys/stat.h>

#include "store/store.h"
#include "proc_util.h"

static char uri[400];

static int setup(void **state) {
  if (wf_setup("plot")) return -1;
  snprintf(uri, sizeof uri, "file://%s/runs", wf_dir);
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) return -1;
  /* Three seeds of a curve that rises to 500, and one live change in the first. */
  for (int r = 0; r < 3; r++) {
    char run[32];
    snprintf(run, sizeof run, "seed-%d", r);
    if (store_run_create(st, run, "run: {}\n", STORE_RUN_FINISHED, &err)) return -1;
    store_metric rows[64];
    int n = 0;
    for (int i = 0; i < 50; i++, n++) {
      rows[n] = (store_metric){.step = 10000 * (i + 1) + 1000 * r,
                               .time = 1.8e9 + i * 2.0 + r,
                               .value = 500.0 * (1 - exp(-i / (10.0 + r)))};
      snprintf(rows[n].run, sizeof rows[n].run, "%s", run);
      snprintf(rows[n].name, sizeof rows[n].name, "return100");
    }
    for (int i = 0; i < (r == 0 ? 2 : 1); i++, n++) {
      rows[n] =
          (store_metric){.step = i ? 250000 : 0, .time = 1.8e9 + i * 50, .value = i ? 1e-4 : 5e-4};
      snprintf(rows[n].run, sizeof rows[n].run, "%s", run);
      snprintf(rows[n].name, sizeof rows[n].name, "hparam/dqn.lr");
    }
    if (store_metrics_append(st, rows, (size_t)n, &err)) return -1;
  }
  store_close(st);
  return 0;
}

static int teardown(void **state) { return wf_teardown(); }

/* Width and height from a PNG's IHDR chunk, after checking the signature. */
static void png_size(const char *path, uint32_t *w, uint32_t *h) {
  size_t len;
  unsigned char *b = (unsigned char *)wf_slurp(path, &len);
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  assert_true(len > 33);
  assert_memory_equal(b, sig, 8);
  assert_memory_equal(b + 12, "IHDR", 4);
  *w = (uint32_t)b[16] << 24 | (uint32_t)b[17] << 16 | (uint32_t)b[18] << 8 | b[19];
  *h = (uint32_t)b[20] << 24 | (uint32_t)b[21] << 16 | (uint32_t)b[22] << 8 | b[23];
  free(b);
}

static void plot_ok(char *const argv[], const char *png, uint32_t w, uint32_t h) {
  int rc;
  char *out = wf_run(argv, 60, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, png));
  free(out);
  uint32_t pw, ph;
  png_size(png, &pw, &ph);
  assert_int_equal(pw, w);
  assert_int_equal(ph, h);
}

static void test_runs_overlaid(void **state) {
  char png[400];
  snprintf(png, sizeof png, "%s/overlaid.png", wf_dir);
  char *a[] = {wf_shoal, "plot", "seed-0", "seed-1", "seed-2", "--store", uri, "--out", png, NULL};
  plot_ok(a, png, 900, 540);
}

static void test_mean_band_and_size(void **state) {
  char png[400];
  snprintf(png, sizeof png, "%s/mean.png", wf_dir);
  char *a[] = {wf_shoal, "plot",   "seed-0",  "seed-1", "seed-2", "--store", uri,
               "--mean", "--size", "640x400", "--out",  png,      NULL};
  plot_ok(a, png, 640, 400);
}

static void test_time_axis_and_hparam_metric(void **state) {
  char png[400];
  snprintf(png, sizeof png, "%s/time.png", wf_dir);
  char *a[] = {wf_shoal, "plot", "seed-0", "--store", uri, "--x", "time", "--out", png, NULL};
  plot_ok(a, png, 900, 540);
  snprintf(png, sizeof png, "%s/lr.png", wf_dir);
  char *b[] = {wf_shoal,        "plot",  "seed-0", "--store", uri,       "--metric",
               "hparam/dqn.lr", "--out", png,      "--size",  "300x200", NULL};
  plot_ok(b, png, 300, 200);
}

static void test_errors_are_clear(void **state) {
  int rc;
  char png[400];
  snprintf(png, sizeof png, "%s/none.png", wf_dir);
  char *a[] = {wf_shoal,   "plot",        "seed-0", "--store", uri,
               "--metric", "eval_return", "--out",  png,       NULL};
  char *out = wf_run(a, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "run seed-0 has no finite values of metric 'eval_return'"));
  assert_non_null(strstr(out, "it has: "));
  assert_non_null(strstr(out, "return100"));
  free(out);
  struct stat sb;
  assert_int_not_equal(stat(png, &sb), 0); /* nothing written */
  char *b[] = {wf_shoal, "plot", "no-such-run", "--store", uri, "--out", png, NULL};
  out = wf_run(b, 30, &rc);
  assert_int_equal(rc, 1);
  free(out);
  /* Text reaches gnuplot's script only where it cannot end its quotes. */
  char *d[] = {wf_shoal, "plot", "seed-0", "--store", uri, "--title", "x\"; system(\"id\")",
               "--out",  png,    NULL};
  out = wf_run(d, 30, &rc);
  assert_int_equal(rc, 2);
  assert_non_null(strstr(out, "holds a quote"));
  free(out);
  char *c[] = {wf_shoal, "plot", "seed-0", "--store", uri, "--x", "updates", NULL};
  out = wf_run(c, 30, &rc);
  assert_int_equal(rc, 2);
  assert_non_null(strstr(out, "--x takes steps or time"));
  free(out);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

/* A peer's curve from a CSV beside a run: its finite rows are drawn (the points count
 * says so), by step or by time; a file without the columns, with a bad number, or
 * missing, and --mean with --csv, are refused with what and where. */
static void test_csv_curve_beside_runs(void **state) {
  char csv[400], png[400];
  snprintf(csv, sizeof csv, "%s/cleanrl pong.csv", wf_dir);
  write_file(csv,
             "step,time,return100,games\n"
             "1000,1800000000.5,nan,0\n"
             "2000,1800000010,-21,1\n"
             "4000,1800000020, -20.5 ,2\n"
             "8000,1800000040,-19,3\n"
             "16000,1800000080,-15.25,4\n");
  snprintf(png, sizeof png, "%s/csv.png", wf_dir);
  int rc;
  char *a[] = {wf_shoal, "plot", "seed-0", "--csv", csv, "--store", uri, "--out", png, NULL};
  char *out = wf_run(a, 60, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "return100 of 1 run and 1 --csv curve (54 points)"));
  free(out);
  char *b[] = {wf_shoal, "plot", "--csv", csv, "--x", "time", "--out", png, NULL};
  plot_ok(b, png, 900, 540); /* a CSV alone needs no store */

  char bad[400];
  snprintf(bad, sizeof bad, "%s/nocol.csv", wf_dir);
  write_file(bad, "step,time,score\n1,2,3\n");
  char *c[] = {wf_shoal, "plot", "--csv", bad, "--out", png, NULL};
  out = wf_run(c, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out,
                         "nocol.csv: its header has no 'return100' column (it has: "
                         "step,time,score)"));
  free(out);
  write_file(bad, "step,return100\n1,2\n2,x3\n");
  out = wf_run(c, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "nocol.csv:3: 'step' and 'return100' need numbers"));
  free(out);
  snprintf(bad, sizeof bad, "%s/missing.csv", wf_dir);
  out = wf_run(c, 30, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "missing.csv: No such file"));
  free(out);
  char *d[] = {wf_shoal, "plot", "seed-0", "seed-1", "--mean", "--csv", csv, "--store", uri, NULL};
  out = wf_run(d, 30, &rc);
  assert_int_equal(rc, 2);
  assert_non_null(strstr(out, "a --csv curve cannot join it"));
  free(out);
}

int main(void) {
  if (access("/usr/bin/gnuplot", X_OK) != 0 && !getenv("SHOAL_GNUPLOT")) {
    printf("SKIPPED: no gnuplot (Debian: gnuplot-nox)\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runs_overlaid),
      cmocka_unit_test(test_mean_band_and_size),
      cmocka_unit_test(test_time_axis_and_hparam_metric),
      cmocka_unit_test(test_errors_are_clear),
      cmocka_unit_test(test_csv_curve_beside_runs),
  };
  return cmocka_run_group_tests_name("workflow_plot", tests, setup, teardown);
}
