/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shoal plot RUN... [--store URI] [--metric NAME] [--x steps|time] [--mean]
 *                   [--out FILE.png] [--size WxH] [--title TEXT] [--csv FILE]...
 *
 * Learning curves from the store's metrics, drawn by gnuplot (Debian gnuplot-nox) as a
 * PNG: one line per run, or with --mean the mean across the runs with a band from
 * their minimum to their maximum (runs are resampled onto a common x grid over the
 * range they all cover, linearly). x is env steps (the metrics' step) or wall time
 * since each run's first row. Live changes (hparam/<key> rows whose value differs from
 * the key's previous one) are drawn as dashed vertical lines labelled key=value, so a curve shows
 * when a person changed the run. $SHOAL_GNUPLOT names another gnuplot.
 *
 * --csv FILE draws a curve that is not a run of the store beside the runs: another
 * system's, say (benchmarks/peers/cleanrl_ppo_atari.py --csv writes one). FILE is
 * comma-separated with a header row naming its columns; it needs the metric's column
 * and, for the x axis, `step` or `time` (seconds; the first row's time is 0). Its
 * title is the file's name without `.csv`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "store/store.h"

extern char **environ;

enum { GRID = 256, MAX_RUNS = 64 };

typedef struct series {
  const char *run;
  double *x, *y;
  size_t n;
  /* live changes: x, key, value */
  size_t nchanges;
  double *cx;
  char (*ckey)[STORE_NAME_MAX];
  double *cv;
  char label[256]; /* a --csv curve's title (run points to it) */
} series;

static void series_free(series *s) {
  free(s->x), free(s->y), free(s->cx), free(s->ckey), free(s->cv);
}

/* Reads run's rows of metric into s (x by the chosen axis), plus its live changes. */
static int load_series(store *st, const char *run, const char *metric, bool by_time, series *s,
                       shoal_error *err) {
  store_metric *rows = NULL;
  size_t n = 0;
  int rc = store_metrics_query(st, run, NULL, 0, INT64_MAX, &rows, &n, err);
  if (rc) return rc;
  memset(s, 0, sizeof *s);
  s->run = run;
  s->x = malloc((n + 1) * sizeof *s->x);
  s->y = malloc((n + 1) * sizeof *s->y);
  s->cx = malloc((n + 1) * sizeof *s->cx);
  s->ckey = malloc((n + 1) * sizeof *s->ckey);
  s->cv = malloc((n + 1) * sizeof *s->cv);
  if (!s->x || !s->y || !s->cx || !s->ckey || !s->cv) {
    free(rows);
    series_free(s);
    return shoal_error_set(err, SHOAL_ENOMEM, "plot: out of memory");
  }
  double t0 = INFINITY;
  for (size_t i = 0; i < n; i++) t0 = rows[i].time < t0 ? rows[i].time : t0;
  /* hparam/<key>: the first row of each key is the starting value, later ones changes. */
  char seen[64][STORE_NAME_MAX];
  double seen_v[64];
  int nseen = 0;
  double x_end = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    double x = by_time ? rows[i].time - t0 : (double)rows[i].step;
    x_end = fmax(x_end, x);
    if (!strcmp(rows[i].name, metric) && isfinite(rows[i].value)) {
      s->x[s->n] = x;
      s->y[s->n++] = rows[i].value;
    }
    if (strncmp(rows[i].name, "hparam/", 7) || !strcmp(rows[i].name, metric)) continue;
    /* A change is a value that differs from the key's previous one (a restarted
     * learner records its starting values again; those are not changes). */
    int j = 0;
    while (j < nseen && strcmp(seen[j], rows[i].name)) j++;
    if (j == nseen) {
      if (nseen < 64) {
        snprintf(seen[nseen], STORE_NAME_MAX, "%s", rows[i].name);
        seen_v[nseen++] = rows[i].value;
      }
      continue;
    }
    if (rows[i].value == seen_v[j]) continue;
    seen_v[j] = rows[i].value;
    s->cx[s->nchanges] = x;
    snprintf(s->ckey[s->nchanges], STORE_NAME_MAX, "%s", rows[i].name + 7);
    s->cv[s->nchanges++] = rows[i].value;
  }
  /* A setting holds until it changes: carry its last value to the run's last x, so a
   * change near the end still shows as a step. */
  if (s->n && !strncmp(metric, "hparam/", 7) && s->x[s->n - 1] < x_end) {
    s->x[s->n] = x_end;
    s->y[s->n] = s->y[s->n - 1];
    s->n++;
  }
  if (s->n == 0) {
    /* Say what the run does have. */
    char names[1024] = "";
    for (size_t i = 0; i < n; i++) {
      char pat[STORE_NAME_MAX + 2];
      snprintf(pat, sizeof pat, "%s,", rows[i].name);
      if (!strstr(names, pat) && strlen(names) + strlen(pat) + 1 < sizeof names) strcat(names, pat);
    }
    if (names[0]) names[strlen(names) - 1] = 0;
    free(rows);
    series_free(s);
    return shoal_error_set(err, SHOAL_ENOENT, "run %s has no finite values of metric '%s'%s%s%s",
                           run, metric, names[0] ? " (it has: " : " (it has no metrics yet", names,
                           ")");
  }
  free(rows);
  return 0;
}

/* Splits line (modified) at commas into at most max fields, trimming spaces and a
 * trailing newline. Returns the count. */
static int csv_fields(char *line, char **field, int max) {
  int n = 0;
  line[strcspn(line, "\r\n")] = 0;
  for (char *p = line; n < max;) {
    while (*p == ' ') p++;
    field[n++] = p;
    char *c = strchr(p, ',');
    char *end = c ? c : p + strlen(p);
    while (end > p && end[-1] == ' ') end--;
    if (!c) {
      *end = 0;
      break;
    }
    *end = 0;
    p = c + 1;
  }
  return n;
}

/* Reads a --csv file's metric column against its step or time column into s. */
static int load_csv(const char *path, const char *metric, bool by_time, series *s,
                    shoal_error *err) {
  memset(s, 0, sizeof *s);
  FILE *f = fopen(path, "r");
  if (!f) return shoal_error_set(err, SHOAL_ENOENT, "--csv %s: %s", path, strerror(errno));
  const char *base = strrchr(path, '/');
  snprintf(s->label, sizeof s->label, "%s", base ? base + 1 : path);
  size_t ll = strlen(s->label);
  if (ll > 4 && !strcmp(s->label + ll - 4, ".csv")) s->label[ll - 4] = 0;
  s->run = s->label;
  enum { MAXF = 64 };
  char line[4096], *field[MAXF];
  int xcol = -1, ycol = -1, nf = 0;
  if (!fgets(line, sizeof line, f)) {
    fclose(f);
    return shoal_error_set(err, SHOAL_EINVAL, "--csv %s: empty (it needs a header row)", path);
  }
  char header[4096];
  snprintf(header, sizeof header, "%s", line);
  header[strcspn(header, "\r\n")] = 0;
  nf = csv_fields(line, field, MAXF);
  const char *xname = by_time ? "time" : "step";
  for (int i = 0; i < nf; i++) {
    if (!strcmp(field[i], xname)) xcol = i;
    if (!strcmp(field[i], metric)) ycol = i;
  }
  if (xcol < 0 || ycol < 0) {
    fclose(f);
    return shoal_error_set(err, SHOAL_EINVAL,
                           "--csv %s: its header has no '%s' column (it has: %s)", path,
                           xcol < 0 ? xname : metric, header);
  }
  size_t cap = 0;
  double t0 = NAN;
  for (int ln = 2; fgets(line, sizeof line, f); ln++) {
    if (line[0] == '\n' || line[0] == '\r' || line[0] == 0) continue;
    int n = csv_fields(line, field, MAXF);
    char *ex = NULL, *ey = NULL;
    double x = xcol < n ? strtod(field[xcol], &ex) : NAN;
    double y = ycol < n ? strtod(field[ycol], &ey) : NAN;
    if (xcol >= n || ycol >= n || ex == field[xcol] || *ex || ey == field[ycol] || *ey ||
        !isfinite(x)) {
      fclose(f);
      series_free(s);
      memset(s, 0, sizeof *s);
      return shoal_error_set(err, SHOAL_EINVAL, "--csv %s:%d: '%s' and '%s' need numbers", path, ln,
                             xname, metric);
    }
    if (by_time) { /* the first row is time 0, whether it has a value or not */
      if (isnan(t0)) t0 = x;
      x -= t0;
    }
    if (!isfinite(y)) continue; /* no value yet (a mean before its first game) */
    if (s->n == cap) {
      cap = cap ? 2 * cap : 256;
      double *nx = realloc(s->x, cap * sizeof *nx);
      if (nx) s->x = nx;
      double *ny = nx ? realloc(s->y, cap * sizeof *ny) : NULL;
      if (ny) s->y = ny;
      if (!nx || !ny) {
        fclose(f);
        series_free(s);
        memset(s, 0, sizeof *s);
        return shoal_error_set(err, SHOAL_ENOMEM, "plot: out of memory");
      }
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
  }
  bool read_failed = ferror(f) != 0;
  fclose(f);
  if (read_failed || s->n == 0) {
    series_free(s);
    memset(s, 0, sizeof *s);
    return shoal_error_set(err, SHOAL_EINVAL, "--csv %s: %s", path,
                           read_failed ? "read failed" : "no finite values of the metric");
  }
  return 0;
}

/* y of s at x by linear interpolation (x within s's range). */
static double interp(const series *s, double x) {
  if (x <= s->x[0]) return s->y[0];
  for (size_t i = 1; i < s->n; i++) {
    if (x <= s->x[i]) {
      double dx = s->x[i] - s->x[i - 1];
      if (dx <= 0) return s->y[i];
      double f = (x - s->x[i - 1]) / dx;
      return s->y[i - 1] + f * (s->y[i] - s->y[i - 1]);
    }
  }
  return s->y[s->n - 1];
}

/* Runs gnuplot on script; its stderr goes to ours. Returns its exit status or -1. */
static int run_gnuplot(const char *script) {
  const char *gp = getenv("SHOAL_GNUPLOT");
  if (!gp || !gp[0]) gp = "gnuplot";
  char *argv[] = {(char *)gp, (char *)script, NULL};
  pid_t pid;
  if (posix_spawnp(&pid, gp, NULL, NULL, argv, environ) != 0) return -1;
  int st;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool gnuplot_has_pngcairo(const char *tmpdir) {
  char path[512];
  snprintf(path, sizeof path, "%s/probe.gp", tmpdir);
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fprintf(f, "set terminal pngcairo\n");
  fclose(f);
  /* A missing terminal is an error in gnuplot, and a non-zero exit. */
  int fd = dup(2), null = open("/dev/null", O_WRONLY);
  dup2(null, 2);
  int rc = run_gnuplot(path);
  dup2(fd, 2);
  close(fd), close(null);
  unlink(path);
  return rc == 0;
}

int cmd_plot(int argc, char **argv) {
  const char *uri = NULL, *metric = "return100", *out = NULL, *title = NULL;
  const char *runs[MAX_RUNS], *sweep = NULL, *csvs[MAX_RUNS];
  char sweep_runs[MAX_RUNS][STORE_NAME_MAX];
  int nruns = 0, ncsv = 0, width = 900, height = 540;
  bool by_time = false, mean = false;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--store") && i + 1 < argc)
      uri = argv[++i];
    else if (!strcmp(argv[i], "--metric") && i + 1 < argc)
      metric = argv[++i];
    else if (!strcmp(argv[i], "--out") && i + 1 < argc)
      out = argv[++i];
    else if (!strcmp(argv[i], "--title") && i + 1 < argc)
      title = argv[++i];
    else if (!strcmp(argv[i], "--x") && i + 1 < argc) {
      const char *x = argv[++i];
      if (!strcmp(x, "time"))
        by_time = true;
      else if (strcmp(x, "steps")) {
        fprintf(stderr, "shoal plot: --x takes steps or time, not '%s'\n", x);
        return 2;
      }
    } else if (!strcmp(argv[i], "--size") && i + 1 < argc) {
      if (sscanf(argv[++i], "%dx%d", &width, &height) != 2 || width < 64 || height < 64 ||
          width > 10000 || height > 10000) {
        fprintf(stderr, "shoal plot: --size takes WxH in pixels (64..10000), not '%s'\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--mean"))
      mean = true;
    else if (!strcmp(argv[i], "--sweep") && i + 1 < argc)
      sweep = argv[++i];
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc && ncsv < MAX_RUNS)
      csvs[ncsv++] = argv[++i];
    else if (argv[i][0] != '-' && nruns < MAX_RUNS)
      runs[nruns++] = argv[i];
    else {
      cli_bad_arg("plot", argc, argv, i);
      return 2;
    }
  }
  shoal_error err = {0};
  store *st = NULL;
  if (mean && ncsv) {
    fprintf(stderr, "shoal plot: --mean averages the store's runs; a --csv curve cannot join it\n");
    return 2;
  }
  if ((nruns > 0 || sweep) && store_open(&st, uri, &err)) {
    fprintf(stderr, "shoal plot: store: %s\n", cli_unprefix(err.msg, "store"));
    return 1;
  }
  if (sweep) { /* the runs of its finished trials (a population's: its members' runs) */
    store_trial *t = NULL;
    size_t n = 0;
    if (store_trial_list(st, sweep, &t, &n, &err) || n == 0) {
      fprintf(stderr, "shoal plot: sweep %s: %s\n", sweep, n ? err.msg : "no trials in the store");
      store_close(st);
      return 1;
    }
    int added = 0;
    for (size_t i = 0; i < n && nruns < MAX_RUNS; i++) {
      char run[STORE_NAME_MAX];
      if (!t[i].result || !json_str(t[i].result, "run", run, sizeof run) || !run[0]) continue;
      bool seen = false;
      for (int r = 0; r < nruns && !seen; r++) seen = !strcmp(runs[r], run);
      if (seen) continue;
      snprintf(sweep_runs[added], sizeof sweep_runs[added], "%s", run);
      runs[nruns++] = sweep_runs[added++];
    }
    store_trials_free(t, n);
    if (added) {
      printf("shoal plot: sweep %s:", sweep);
      for (int r = nruns - added; r < nruns; r++) printf(" %s", runs[r]);
      printf("\n");
    }
    if (!added) {
      fprintf(stderr, "shoal plot: sweep %s has no finished trial yet\n", sweep);
      store_close(st);
      return 1;
    }
  }
  if (nruns == 0 && ncsv == 0) {
    cli_bad_usage("plot");
    return 2;
  }
  if (nruns + ncsv > MAX_RUNS) {
    fprintf(stderr, "shoal plot: at most %d curves\n", MAX_RUNS);
    store_close(st);
    return 2;
  }
  char out_buf[512];
  if (!out) {
    const char *first = sweep ? sweep : nruns ? runs[0] : csvs[0];
    const char *slash = strrchr(first, '/');
    snprintf(out_buf, sizeof out_buf, "%s-%s.png", nruns || !slash ? first : slash + 1, metric);
    for (char *p = out_buf; *p; p++)
      if (*p == '/' || *p == ':') *p = '_';
    out = out_buf;
  }
  /* Text that goes into the gnuplot script inside double quotes: no way out of them. */
  const char *texts[] = {out, title ? title : "", metric};
  const char *what[] = {"--out", "--title", "--metric"};
  for (int t = 0; t < 3; t++)
    if (strpbrk(texts[t], "\"\\\n\r`")) {
      fprintf(stderr, "shoal plot: %s '%s' holds a quote, backslash, backtick or newline\n",
              what[t], texts[t]);
      store_close(st);
      return 2;
    }

  series ser[MAX_RUNS];
  int loaded = 0, rc = 1;
  for (int r = 0; r < nruns; r++) {
    if (load_series(st, runs[r], metric, by_time, &ser[r], &err)) {
      fprintf(stderr, "shoal plot: %s\n", err.msg);
      goto done;
    }
    loaded++;
  }
  for (int c = 0; c < ncsv; c++) {
    if (load_csv(csvs[c], metric, by_time, &ser[nruns + c], &err)) {
      fprintf(stderr, "shoal plot: %s\n", err.msg);
      goto done;
    }
    loaded++;
    if (strpbrk(ser[nruns + c].label, "\"\\\n\r`")) {
      fprintf(stderr, "shoal plot: --csv '%s': its name holds a quote, backslash or backtick\n",
              csvs[c]);
      rc = 2;
      goto done;
    }
  }
  int nser = nruns + ncsv; /* the curves: the runs', then the --csv files' */

  char tmpdir[] = "/tmp/shoal-plot-XXXXXX";
  if (!mkdtemp(tmpdir)) {
    fprintf(stderr, "shoal plot: cannot make a temporary folder: %s\n", strerror(errno));
    goto done;
  }
  bool cairo = gnuplot_has_pngcairo(tmpdir);
  char script[600];
  snprintf(script, sizeof script, "%s/plot.gp", tmpdir);
  FILE *f = fopen(script, "w");
  if (!f) {
    fprintf(stderr, "shoal plot: %s: %s\n", script, strerror(errno));
    rmdir(tmpdir);
    goto done;
  }
  bool minutes = false;
  if (by_time) {
    double span = 0;
    for (int r = 0; r < nser; r++) span = fmax(span, ser[r].x[ser[r].n - 1]);
    minutes = span > 600;
  }
  double xs = minutes ? 1.0 / 60 : 1.0;
  if (cairo)
    fprintf(f, "set terminal pngcairo size %d,%d noenhanced font 'sans,10'\n", width, height);
  else
    fprintf(f, "set terminal png size %d,%d noenhanced\n", width, height);
  fprintf(f, "set output \"%s\"\n", out);
  fprintf(f, "set title \"%s\"\n",
          title ? title : (mean ? "mean and min-max across runs" : "learning curves"));
  fprintf(f, "set xlabel \"%s\"\nset ylabel \"%s\"\n",
          by_time ? (minutes ? "wall time (min)" : "wall time (s)") : "env steps", metric);
  fprintf(f, "set grid\nset key top left\n");
  if (!by_time) fprintf(f, "set format x \"%%.1s%%c\"\n"); /* 250k, 1.5M */
  bool steps = !strncmp(metric, "hparam/", 7);
  /* Data as inline datablocks, one per series. */
  if (mean) {
    double lo = -INFINITY, hi = INFINITY;
    for (int r = 0; r < nruns; r++) {
      lo = fmax(lo, ser[r].x[0]);
      hi = fmin(hi, ser[r].x[ser[r].n - 1]);
    }
    if (!(hi > lo)) {
      fprintf(stderr, "shoal plot: --mean: the runs' x ranges do not overlap\n");
      fclose(f);
      unlink(script), rmdir(tmpdir);
      goto done;
    }
    /* The mean needs every run at each x: say where the longer runs were cut. */
    double full_lo = INFINITY, full_hi = -INFINITY;
    for (int r = 0; r < nruns; r++) {
      full_lo = fmin(full_lo, ser[r].x[0]);
      full_hi = fmax(full_hi, ser[r].x[ser[r].n - 1]);
    }
    if (full_lo < lo || full_hi > hi)
      fprintf(stderr,
              "shoal plot: --mean: the mean covers %s %.4g..%.4g, where every run has points "
              "(the runs span %.4g..%.4g)\n",
              by_time ? "seconds" : "steps", lo, hi, full_lo, full_hi);
    fprintf(f, "$band << EOD\n");
    for (int g = 0; g < GRID; g++) {
      double x = lo + (hi - lo) * g / (GRID - 1), sum = 0, mn = INFINITY, mx = -INFINITY;
      for (int r = 0; r < nruns; r++) {
        double y = interp(&ser[r], x);
        sum += y, mn = fmin(mn, y), mx = fmax(mx, y);
      }
      fprintf(f, "%.9g %.9g %.9g %.9g\n", x * xs, sum / nruns, mn, mx);
    }
    fprintf(f, "EOD\n");
  } else {
    for (int r = 0; r < nser; r++) {
      fprintf(f, "$run%d << EOD\n", r);
      for (size_t i = 0; i < ser[r].n; i++)
        fprintf(f, "%.9g %.9g\n", ser[r].x[i] * xs, ser[r].y[i]);
      fprintf(f, "EOD\n");
    }
  }
  /* Live changes as labelled vertical lines (a few runs at most, or it is clutter). */
  int arrow = 1;
  if (nser <= 4)
    for (int r = 0; r < nruns; r++)
      for (size_t c = 0; c < ser[r].nchanges && arrow < 200; arrow++) {
        /* Changes made together (one `shoal set`) share a line and a label. */
        double x = ser[r].cx[c];
        char text[512] = "";
        if (nser > 1) snprintf(text, sizeof text, "%s: ", ser[r].run);
        size_t head = strlen(text);
        for (; c < ser[r].nchanges && ser[r].cx[c] == x; c++)
          snprintf(text + strlen(text), sizeof text - strlen(text), "%s%s=%g",
                   strlen(text) > head ? ", " : "", ser[r].ckey[c], ser[r].cv[c]);
        fprintf(f,
                "set arrow %d from %.9g, graph 0 to %.9g, graph 1 nohead dt 2 lc rgb '#888888'\n",
                arrow, x * xs, x * xs);
        fprintf(f, "set label %d \"%s\" at %.9g, graph 0.03 rotate by 90 left font ',8'\n", arrow,
                text, x * xs);
      }
  if (mean) {
    fprintf(f,
            "plot $band using 1:3:4 with filledcurves fs transparent solid 0.25 noborder "
            "lc rgb '#1f77b4' title \"min-max of %d runs\", \\\n"
            "     $band using 1:2 with lines lw 2 lc rgb '#1f77b4' title \"mean\"\n",
            nruns);
  } else {
    fprintf(f, "plot ");
    for (int r = 0; r < nser; r++)
      fprintf(f, "%s$run%d using 1:2 with %s lw 2 title \"%s\"", r ? ", \\\n     " : "", r,
              steps ? "steps" : "lines", ser[r].run);
    fprintf(f, "\n");
  }
  bool write_failed = ferror(f) != 0;
  if (fclose(f) || write_failed) {
    fprintf(stderr, "shoal plot: writing %s failed\n", script);
    unlink(script), rmdir(tmpdir);
    goto done;
  }
  int gr = run_gnuplot(script);
  unlink(script);
  rmdir(tmpdir);
  if (gr < 0) {
    fprintf(stderr,
            "shoal plot: cannot run gnuplot (Debian: apt-get install gnuplot-nox; or set "
            "$SHOAL_GNUPLOT)\n");
    goto done;
  }
  struct stat sb;
  if (gr != 0 || stat(out, &sb) != 0 || sb.st_size == 0) {
    fprintf(stderr, "shoal plot: gnuplot failed (exit %d) to write %s\n", gr, out);
    goto done;
  }
  size_t points = 0;
  for (int r = 0; r < nser; r++) points += ser[r].n;
  printf("shoal plot: %s: %s of %d run%s", out, metric, nruns, nruns == 1 ? "" : "s");
  if (ncsv) printf(" and %d --csv curve%s", ncsv, ncsv == 1 ? "" : "s");
  printf(" (%zu points)%s, %dx%d\n", points, mean ? ", mean and min-max" : "", width, height);
  rc = 0;
done:
  for (int r = 0; r < loaded; r++) series_free(&ser[r]);
  store_close(st);
  return rc;
}
