/* SPDX-License-Identifier: Apache-2.0 */
/*
 * benchmarks/replay_log.c — what the learner's replay log (learner/replay_log.h) costs,
 * on the file store, each figure beside its baseline measured in the same run:
 *
 *   ingest_ceiling.<sc>  benchmarks/ingest's learner (gRPC decode, checks, replay insert)
 *                   fed by 2 actor processes as fast as loopback goes, with the log (one
 *                   lock around insert + record, the log's thread compressing, the store
 *                   writer writing segments) vs without. samples/s; goal >= 0.9. On 2
 *                   cores the log's copy, compression and writes compete with the actors
 *                   for the CPU: this is its worst case. Scenarios: cartpole and atari
 *                   (random bytes: incompressible frames, one new frame per sample), and
 *                   pong: real Pong frames in 4-frame stacks that travel deduplicated, as
 *                   shoal's Ape-X actors send them, logged each frame once.
 *   ingest_run.cartpole  `shoal run` of configs/cartpole-apex.yaml (learner training, 2
 *                   actors) for a fixed time, replay.log true vs false. env steps/s.
 *   segment_write   store_replay_append of 4 MiB segments (temp file written direct,
 *                   fsync, link, fsync of the folder; SHOAL_STORE_DIRECT=0: through the
 *                   page cache) vs open/write/fsync/close of the same bytes. MB/s;
 *                   goal >= 0.8. segment_write_retained: the same with a trim after
 *                   each append (the 8 newest kept), the store writing into the trimmed
 *                   files (spares), vs the plain write, and .spares_vs_new_files vs a
 *                   store that keeps no spares (SHOAL_STORE_SPARES=0).
 *   restore.<sc>    rlog_restore of a memory's worth of transitions (1M CartPole-sized,
 *                   100k Atari-sized: 84x84 u8 frames) into a new memory (list, read,
 *                   decompress, check, insert) vs reading the same transitions'
 *                   uncompressed bytes from a plain file in the page cache.
 *                   transitions/s.
 *   sample_memory_limit.atari  prioritized sampling (b32, n-step 3, frame stack 4) of
 *                   Atari-sized transitions from a replay with memory_limit at a quarter
 *                   of its columns vs all in memory. transitions/s; goal >= 0.5.
 *   mongodb.*       the segment write and the restore against a MongoDB server:
 *                   $SHOAL_TEST_MONGO_URI, else the tests' stand-in (tests/mongo_standin,
 *                   started here). baseline=none: the stand-in is Python, one command at a
 *                   time, and says nothing about MongoDB's speed.
 * Scenarios: cartpole (obs 4 x f32, batches of 32 envs x 64 steps), atari (obs one
 * 84x84 u8 frame, batches of 2 envs x 32 steps).
 *
 *   make bench BENCH=replay_log   (or build/benchmarks/replay_log [--quick]
 *                                  [--only ingest|segment_write|restore|memory_limit|mongodb])
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "learner/replay_log.h"

enum { SC_CARTPOLE, SC_ATARI, SC_COUNT };
static const char *sc_name[SC_COUNT] = {"cartpole", "atari"};
static const int sc_envs[SC_COUNT] = {32, 2}, sc_steps[SC_COUNT] = {64, 32};
static const int64_t sc_restore[SC_COUNT] = {1000000, 100000};
enum { NCOL = 5 };

static int quick;
static char g_dir[256];

static void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "bench_replay_log: %s: %s\n", what, err && err->msg[0] ? err->msg : "failed");
  exit(1);
}

static size_t obs_bytes(int sc) { return sc == SC_CARTPOLE ? 16 : 84 * 84; }

static void spec(int sc, rlog_column *c) {
  memset(c, 0, NCOL * sizeof *c);
  const char *names[NCOL] = {"obs", "action", "reward", "terminated", "env"};
  const uint32_t dt[NCOL] = {REPLAY_F32, REPLAY_I32, REPLAY_F32, REPLAY_U8, REPLAY_I32};
  for (int i = 0; i < NCOL; i++) {
    snprintf(c[i].name, sizeof c[i].name, "%s", names[i]);
    c[i].dtype = dt[i];
  }
  if (sc == SC_CARTPOLE) {
    c[0].ndim = 1;
    c[0].shape[0] = 4;
  } else {
    c[0].dtype = REPLAY_U8;
    c[0].ndim = 2;
    c[0].shape[0] = c[0].shape[1] = 84;
  }
}

static replay *make_mem(int sc, int64_t cap, int streams) {
  replay_config rc = {.kind = REPLAY_UNIFORM,
                      .capacity = cap,
                      .streams = streams,
                      .ncols = 2,
                      .obs_column = "obs",
                      .alpha = 0.6,
                      .eps = 1e-6,
                      .writer_slack = -1};
  rc.cols[0] = (replay_column){.name = "obs", .dtype = sc == SC_CARTPOLE ? REPLAY_F32 : REPLAY_U8};
  rc.cols[0].ndim = sc == SC_CARTPOLE ? 1 : 2;
  rc.cols[0].shape[0] = sc == SC_CARTPOLE ? 4 : 84;
  rc.cols[0].shape[1] = 84;
  rc.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I32};
  replay *r;
  shoal_error err = {0};
  if (replay_create(&rc, &r, &err)) die("replay", &err);
  return r;
}

/* One batch: envs groups of steps rows, no episode ends (a continuing stream). */
typedef struct batch {
  int rows;
  void *cols[NCOL];
} batch;

static void make_batch(int sc, batch *b, uint64_t seed) {
  int envs = sc_envs[sc], steps = sc_steps[sc];
  b->rows = envs * steps;
  size_t ob = obs_bytes(sc);
  unsigned char *obs = malloc((size_t)b->rows * ob);
  /* Atari-like frames: large flat areas and a few moving objects, so they compress as
   * real frames do; CartPole: random floats. */
  shoal_rng rng;
  shoal_rng_seed(&rng, seed);
  for (int i = 0; i < b->rows; i++) {
    unsigned char *o = obs + (size_t)i * ob;
    if (sc == SC_CARTPOLE) {
      float *f = (float *)o;
      for (int k = 0; k < 4; k++) f[k] = (float)shoal_rng_uniform(&rng) - 0.5f;
    } else {
      memset(o, 0, ob);
      for (int y = 0; y < 84; y++) o[y * 84] = o[y * 84 + 83] = 142;
      for (int k = 0; k < 6; k++) {
        int x = (int)(shoal_rng_next(&rng) % 78), y = (int)(shoal_rng_next(&rng) % 78);
        for (int dy = 0; dy < 6; dy++) memset(o + (y + dy) * 84 + x, 200 + k * 5, 6);
      }
    }
  }
  int32_t *act = malloc((size_t)b->rows * 4), *env = malloc((size_t)b->rows * 4);
  float *rew = malloc((size_t)b->rows * 4);
  uint8_t *term = calloc((size_t)b->rows, 1);
  for (int i = 0; i < b->rows; i++) {
    act[i] = (int32_t)(shoal_rng_next(&rng) % 4);
    rew[i] = (float)(shoal_rng_next(&rng) % 2);
    env[i] = i / steps;
  }
  b->cols[0] = obs, b->cols[1] = act, b->cols[2] = rew, b->cols[3] = term, b->cols[4] = env;
}

static void free_batch(batch *b) {
  for (int c = 0; c < NCOL; c++) free(b->cols[c]);
}

/* The learner's insert of one batch: each env's group into its stream. */
static int insert(replay *r, int sc, int first_stream, const void *const *cols, int rows,
                  shoal_error *err) {
  int steps = sc_steps[sc];
  for (int g = 0; g < rows / steps; g++) {
    replay_steps s = {0};
    s.n = steps;
    s.cols[0] = (const unsigned char *)cols[0] + (size_t)g * steps * obs_bytes(sc);
    s.cols[1] = (const int32_t *)cols[1] + g * steps;
    s.reward = (const float *)cols[2] + g * steps;
    s.terminated = (const uint8_t *)cols[3] + g * steps;
    int rc = replay_insert(r, first_stream + g, &s, err);
    if (rc) return rc;
  }
  return 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void bench_line(const char *name, double v, const char *unit, double base) {
  printf("BENCH name=replay_log.%s value=%.1f unit=%s baseline=%.1f ratio=%.3f\n", name, v, unit,
         base, base > 0 ? v / base : 0);
}

/* Runs cmd (a shell command line) and returns the number that follows key in its
 * output (the last line that has it), or -1. */
static double run_and_find(const char *cmd, const char *key) {
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[4096];
  double v = -1;
  while (fgets(line, sizeof line, p)) {
    const char *k = strstr(line, key);
    if (k) v = atof(k + strlen(key));
  }
  pclose(p);
  return v;
}

/* The transport ceiling: benchmarks/ingest's learner (decode, check, insert) with 2
 * actor processes, log off and on. samples/s. */
static double ceiling(const char *bindir, const char *sc, int log) {
  char cmd[1200], key[64];
  snprintf(cmd, sizeof cmd,
           "SHOAL_INGEST_LOG=%d SHOAL_INGEST_ONLY=%s SHOAL_INGEST_N=2 %s/benchmarks/ingest 2>&1",
           log, sc, bindir);
  snprintf(key, sizeof key, "| %s | 2 | ", sc);
  return run_and_find(cmd, key);
}

/* The real thing: `shoal run` (shoal-learner training Ape-X on CartPole with 2
 * shoal-actor processes) for secs, log off and on. env steps/s. */
static double real_run(const char *bindir, const char *srcdir, int log, double secs, int k) {
  char cmd[2400];
  snprintf(
      cmd, sizeof cmd,
      "cd %s && %s/bin/shoal run %s/configs/cartpole-apex.yaml --set run.name=rlog-bench-%d-%d "
      "--set run.solve_return=0 --set run.max_seconds=%g --set replay.log=%s "
      "--set store.uri=file://%s/runs --no-tensorboard 2>&1",
      g_dir, bindir, srcdir, log, k, secs, log ? "true" : "false", g_dir);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[4096];
  double steps = -1, t = -1;
  while (fgets(line, sizeof line, p)) {
    const char *a = strstr(line, " after "), *e = strstr(line, " env steps");
    if (!strstr(line, "shoal: run ") || !a || !e) continue;
    t = atof(a + 7);
    /* "... after T s (U s of it training): N env steps": N is the number before e. */
    const char *c = e;
    while (c > a && c[-1] >= '0' && c[-1] <= '9') c--;
    if (c < e) steps = atof(c);
  }
  pclose(p);
  return t > 0 && steps > 0 ? steps / t : -1;
}

static void bench_ingest(void) {
  const char *bindir = getenv("SHOAL_BINARY_DIR"), *srcdir = getenv("SHOAL_SOURCE_DIR");
  if (!bindir || !srcdir) {
    printf(
        "\ningest: SHOAL_BINARY_DIR / SHOAL_SOURCE_DIR not set (make bench sets them): "
        "skipped\n");
    return;
  }
  int reps = quick ? 1 : 3;
  printf("\n%-34s %16s %16s %7s\n", "ingest (median of interleaved runs)", "log off", "log on",
         "ratio");
  const char *scs[3] = {"cartpole", "atari", "pong"};
  for (int i = 0; i < 3; i++) {
    double on[3], off[3];
    for (int k = 0; k < reps; k++) {
      off[k] = ceiling(bindir, scs[i], 0);
      on[k] = ceiling(bindir, scs[i], 1);
    }
    double mon = median(on, reps), moff = median(off, reps);
    char label[80], n[64];
    if (mon <= 0 || moff <= 0) { /* pong needs ale-py from the environments' venv */
      printf("%-34s skipped: benchmarks/ingest gave no figure (make deps installs ale-py)\n",
             scs[i]);
      continue;
    }
    snprintf(label, sizeof label, "%s, gRPC ceiling (samples/s)", scs[i]);
    printf("%-34s %16.0f %16.0f %7.3f\n", label, moff, mon, mon / moff);
    snprintf(n, sizeof n, "ingest_ceiling.%s", scs[i]);
    bench_line(n, mon, "samples/s", moff);
  }
  double on[3], off[3];
  for (int k = 0; k < reps; k++) {
    off[k] = real_run(bindir, srcdir, 0, quick ? 4 : 8, k);
    on[k] = real_run(bindir, srcdir, 1, quick ? 4 : 8, k);
  }
  double mon = median(on, reps), moff = median(off, reps);
  printf("%-34s %16.0f %16.0f %7.3f\n", "cartpole, shoal run (env steps/s)", moff, mon, mon / moff);
  bench_line("ingest_run.cartpole", mon, "steps/s", moff);
}

static double plain_write(const char *path, const void *b, size_t len) {
  double t0 = shoal_now_s();
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || write(fd, b, len) != (ssize_t)len || fsync(fd)) die("plain write", NULL);
  close(fd);
  return shoal_now_s() - t0;
}

static void bench_segment_write(void) {
  shoal_error err = {0};
  store *st;
  char uri[400];
  snprintf(uri, sizeof uri, "file://%s/store", g_dir);
  if (store_open(&st, uri, &err) || store_run_create(st, "segwrite", NULL, 1, &err))
    die("store", &err);
  size_t len = (size_t)4 << 20;
  unsigned char *buf = malloc(len);
  for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
  int reps = quick ? 5 : 15;
  double ours[15], plain[15];
  char path[400];
  snprintf(path, sizeof path, "%s/plain.bin", g_dir);
  for (int k = 0; k < reps; k++) {
    double t0 = shoal_now_s();
    if (store_replay_append(st, "segwrite", (uint64_t)k, buf, len, &err)) die("append", &err);
    ours[k] = (double)len / 1048576.0 / (shoal_now_s() - t0);
    plain[k] = (double)len / 1048576.0 / plain_write(path, buf, len);
  }
  double mo = median(ours, reps), mp = median(plain, reps);
  printf("\n%-22s %12s %12s %7s\n", "segment write (4 MiB)", "store MB/s", "plain MB/s", "ratio");
  printf("%-22s %12.1f %12.1f %7.3f\n", "file store", mo, mp, mo / mp);
  bench_line("segment_write", mo, "MB/s", mp);
  store_close(st);

  /* With retention, as a learner's log runs: the 8 newest kept, each append followed by
   * a trim, into spares (the trimmed files) and, in a second store told to keep none
   * (SHOAL_STORE_SPARES=0), into new files; the three alternate. */
  store *sp[2];
  const char *spare_runs[2] = {"retained", "retained0"};
  for (int i = 0; i < 2; i++) {
    if (i) setenv("SHOAL_STORE_SPARES", "0", 1);
    if (store_open(&sp[i], uri, &err) || store_run_create(sp[i], spare_runs[i], NULL, 1, &err))
      die("store", &err);
    unsetenv("SHOAL_STORE_SPARES");
  }
  double with[15], none[15];
  for (int k = 0; k < reps + 8; k++) {
    double *out[2] = {with, none};
    for (int i = 0; i < 2; i++) {
      size_t removed;
      double t0 = shoal_now_s();
      if (store_replay_append(sp[i], spare_runs[i], (uint64_t)k, buf, len, &err) ||
          (k >= 8 && store_replay_trim(sp[i], spare_runs[i], (uint64_t)k - 7, &removed, &err)))
        die("append", &err);
      if (k >= 8) out[i][k - 8] = (double)len / 1048576.0 / (shoal_now_s() - t0);
    }
    double tp = plain_write(path, buf, len);
    if (k >= 8) plain[k - 8] = (double)len / 1048576.0 / tp;
  }
  double mw = median(with, reps), mn = median(none, reps);
  mp = median(plain, reps);
  printf("%-22s %12.1f %12.1f %7.3f\n", "  + trim, spares", mw, mp, mw / mp);
  printf("%-22s %12.1f %12.1f %7.3f\n", "  + trim, new files", mn, mp, mn / mp);
  bench_line("segment_write_retained", mw, "MB/s", mp);
  bench_line("segment_write_retained.spares_vs_new_files", mw, "MB/s", mn);
  for (int i = 0; i < 2; i++) store_close(sp[i]);
  free(buf);
}

typedef struct rctx {
  replay *r;
  int sc;
} rctx;
static int restore_one(void *ctx, const rlog_batch *b, shoal_error *err) {
  rctx *c = ctx;
  return insert(c->r, c->sc, (int)b->actor * sc_envs[c->sc], b->cols, (int)b->rows, err);
}

static void bench_restore_at(const char *base_uri, int mongo) {
  printf("\n%-10s %12s %14s %16s %7s %10s\n", "restore", "transitions", "restore (t/s)",
         "raw read (t/s)", "ratio", "stored MB");
  for (int sc = 0; sc < SC_COUNT; sc++) {
    /* The stand-in holds everything in Python objects: a tenth of the transitions. */
    int64_t want = quick || mongo ? sc_restore[sc] / 10 : sc_restore[sc];
    shoal_error err = {0};
    store *st;
    store_writer *wr;
    char uri[1200], run[64];
    snprintf(uri, sizeof uri, "%s", base_uri);
    snprintf(run, sizeof run, "restore-%s-%d", sc_name[sc], (int)getpid());
    if (store_open(&st, uri, &err) || store_run_create(st, run, NULL, 1, &err) ||
        store_writer_create(&wr, st, &(store_writer_opts){.max_pending_bytes = (size_t)1 << 30},
                            &err))
      die("store", &err);
    rlog_config c = {.st = st,
                     .wr = wr,
                     .run = run,
                     .ncols = NCOL,
                     .keep = 1,
                     .max_pending_bytes = (size_t)1 << 30};
    spec(sc, c.cols);
    rlog *l;
    if (rlog_open(&l, &c, &err)) die("log", &err);
    for (int64_t n = 0, seq = 1; n < want; n += sc_envs[sc] * sc_steps[sc], seq++) {
      /* Every batch its own data, so compression sees what a run's log holds. */
      batch b;
      make_batch(sc, &b, (uint64_t)seq);
      rlog_batch rec = {.actor = 0,
                        .incarnation = 1,
                        .seq = (uint64_t)seq,
                        .rows = (uint32_t)b.rows,
                        .steps = (uint32_t)b.rows,
                        .items = (uint64_t)b.rows};
      for (int k = 0; k < NCOL; k++) rec.cols[k] = b.cols[k];
      if (rlog_append_batch(l, &rec, &err)) die("log", &err);
      free_batch(&b);
    }
    rlog_stats ls;
    if (rlog_close(l, 300, &ls) || store_writer_close(wr, 300, NULL)) die("log close", NULL);
    /* The baseline: reading the same transitions uncompressed (the raw bytes the log
     * holds) from a plain file in the page cache, as a whole-memory save would be read. */
    char path[400];
    snprintf(path, sizeof path, "%s/raw-%s.bin", g_dir, sc_name[sc]);
    unsigned char *raw = malloc(ls.bytes_raw);
    memset(raw, 1, ls.bytes_raw);
    plain_write(path, raw, ls.bytes_raw);
    double t0 = shoal_now_s();
    int fd = open(path, O_RDONLY);
    size_t got = 0;
    while (fd >= 0 && got < ls.bytes_raw) {
      ssize_t r = read(fd, raw + got, ls.bytes_raw - got);
      if (r <= 0) break;
      got += (size_t)r;
    }
    double t_read = shoal_now_s() - t0;
    if (fd >= 0) close(fd);
    free(raw);
    unlink(path);
    size_t bytes = ls.bytes_stored;
    rctx rc = {make_mem(sc, want, sc_envs[sc]), sc};
    rlog_column cols[NCOL];
    spec(sc, cols);
    rlog_restore_info info;
    t0 = shoal_now_s();
    if (rlog_restore(st, run, cols, NCOL, (uint64_t)want, rc.r, restore_one, &rc, &info, &err))
      die("restore", &err);
    double t_restore = shoal_now_s() - t0;
    replay_stats rs;
    replay_get_stats(rc.r, &rs);
    double v = (double)rs.held / t_restore, base = (double)rs.held / t_read;
    if (mongo)
      printf("%-10s %12lld %14.0f %16s %7s %10.1f\n", sc_name[sc], (long long)rs.held, v, "-", "-",
             (double)bytes / 1048576.0);
    else
      printf("%-10s %12lld %14.0f %16.0f %7.3f %10.1f\n", sc_name[sc], (long long)rs.held, v, base,
             v / base, (double)bytes / 1048576.0);
    char nm[64];
    snprintf(nm, sizeof nm, "%srestore.%s", mongo ? "mongodb." : "", sc_name[sc]);
    if (mongo)
      printf("BENCH name=replay_log.%s value=%.1f unit=transitions/s baseline=none ratio=none\n",
             nm, v);
    else
      bench_line(nm, v, "transitions/s", base);
    replay_destroy(rc.r);
    store_close(st);
  }
}

/* Sampling with replay.memory_limit at a quarter of the columns vs all in memory:
 * Atari-sized (84x84 u8 frames, frame_stack 4, n-step 3), PER, batch 32. The cold
 * three quarters are read back from the spill file through the page cache (this machine
 * has the RAM to keep it cached; from disk it would be slower). */
static void bench_restore(void) {
  char uri[400];
  snprintf(uri, sizeof uri, "file://%s/store?sync=never", g_dir);
  bench_restore_at(uri, 0);
}

static replay *atari_mem(int64_t cap, size_t limit) {
  replay_config rc = {.kind = REPLAY_PRIORITIZED,
                      .capacity = cap,
                      .streams = 8,
                      .ncols = 2,
                      .obs_column = "obs",
                      .frame_stack = 4,
                      .alpha = 0.6,
                      .eps = 1e-6,
                      .writer_slack = -1,
                      .memory_limit = limit,
                      .spill_dir = g_dir};
  rc.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_U8, .ndim = 2, .shape = {84, 84}};
  rc.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I32};
  replay *r;
  shoal_error err = {0};
  if (replay_create(&rc, &r, &err)) die("replay", &err);
  batch b;
  make_batch(SC_ATARI, &b, 5);
  for (int64_t n = 0; n < cap + cap / 4; n += b.rows)
    for (int g = 0; g < sc_envs[SC_ATARI]; g++) {
      replay_steps st = {.n = sc_steps[SC_ATARI]};
      st.cols[0] = (unsigned char *)b.cols[0] + (size_t)g * sc_steps[SC_ATARI] * 84 * 84;
      st.cols[1] = (int32_t *)b.cols[1] + g * sc_steps[SC_ATARI];
      st.reward = (float *)b.cols[2] + g * sc_steps[SC_ATARI];
      st.terminated = (uint8_t *)b.cols[3] + g * sc_steps[SC_ATARI];
      if (replay_insert(r, (int)((n / b.rows) % 4) * 2 + g, &st, &err)) die("insert", &err);
    }
  free_batch(&b);
  return r;
}

static double sample_rate(replay *r, double secs) {
  enum { B = 32 };
  static uint8_t obs[B * 4 * 84 * 84], nobs[B * 4 * 84 * 84];
  int32_t act[B];
  float ret[B], disc[B], w[B], td[B];
  int64_t idx[B];
  uint64_t gen[B];
  shoal_rng rng;
  shoal_rng_seed(&rng, 9);
  shoal_error err = {0};
  replay_sample_args a = {.batch = B, .n_step = 3, .gamma = 0.99, .beta = 0.4};
  double t0 = shoal_now_s();
  long n = 0;
  while (shoal_now_s() - t0 < secs) {
    replay_batch b = {.cols = {obs, act},
                      .next_obs = nobs,
                      .reward = ret,
                      .discount = disc,
                      .weight = w,
                      .index = idx,
                      .generation = gen};
    if (replay_sample(r, &rng, &a, &b, &err)) die("sample", &err);
    for (int i = 0; i < B; i++) td[i] = (float)(gen[i] % 7) * 0.1f;
    if (replay_update_priorities(r, B, idx, gen, td, &err)) die("priorities", &err);
    n += B;
  }
  return (double)n / (shoal_now_s() - t0);
}

static void bench_memory_limit(void) {
  int64_t cap = quick ? 20000 : 50000;
  size_t cols = (size_t)cap * (84 * 84 + 4);
  replay *mem = atari_mem(cap, 0), *spill = atari_mem(cap, cols / 4);
  int reps = quick ? 1 : 3;
  double a[3], b[3];
  for (int k = 0; k < reps; k++) {
    a[k] = sample_rate(mem, quick ? 0.5 : 1.5);
    b[k] = sample_rate(spill, quick ? 0.5 : 1.5);
  }
  double ma = median(a, reps), mb = median(b, reps);
  printf("\n%-40s %14s %14s %7s\n", "sampling b32, Atari-sized, PER, n-step 3", "in memory",
         "limit 1/4", "ratio");
  printf("%-40s %14.0f %14.0f %7.3f\n", "transitions/s", ma, mb, mb / ma);
  bench_line("sample_memory_limit.atari", mb, "transitions/s", ma);
  replay_destroy(mem);
  replay_destroy(spill);
}

/* The MongoDB rows: a server named by $SHOAL_TEST_MONGO_URI, else the stand-in started
 * here (0 when neither can be had: the rows are skipped, and say so). */
static void bench_mongodb(void) {
  const char *given = getenv("SHOAL_TEST_MONGO_URI"), *src = getenv("SHOAL_SOURCE_DIR");
  char uri[1200], cmd[2000], portf[400];
  int standin = !(given && given[0]);
  if (!standin) {
    snprintf(uri, sizeof uri, "%s", given);
  } else {
    snprintf(portf, sizeof portf, "%s/standin.port", g_dir);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/mongo_standin/standin.py --port 0 --replset shoal "
             "--port-file %s "
             "--pid-file %s/standin.pid --parent-pid %d --background --log %s/standin.log",
             src ? src : ".", portf, g_dir, (int)getpid(), g_dir);
    FILE *pf = NULL;
    if (system(cmd) != 0 || !(pf = fopen(portf, "r"))) {
      printf(
          "\nmongodb: no server (SHOAL_TEST_MONGO_URI unset, the stand-in did not start): "
          "skipped\n");
      return;
    }
    int port = 0;
    if (fscanf(pf, "%d", &port) != 1) port = 0;
    fclose(pf);
    snprintf(uri, sizeof uri, "mongodb://127.0.0.1:%d/shoal_bench_rlog?replicaSet=shoal", port);
  }
  printf("\nMongoDB (%s): the same restore; no baseline%s\n",
         standin ? "the tests' stand-in server, NOT MongoDB" : "SHOAL_TEST_MONGO_URI",
         standin ? ": the stand-in is Python, one command at a time, and its speed says nothing "
                   "of MongoDB's"
                 : "");
  bench_restore_at(uri, 1);
  if (standin) {
    snprintf(cmd, sizeof cmd, "kill $(cat %s/standin.pid) 2>/dev/null", g_dir);
    if (system(cmd)) fprintf(stderr, "bench_replay_log: could not stop the stand-in\n");
  }
}

int main(int argc, char **argv) {
  const char *only = NULL; /* one group of rows, for a change that concerns it alone */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      quick = 1;
    } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
    } else {
      fprintf(stderr, "replay_log: unknown argument '%s' (--quick, --only GROUP)\n", argv[i]);
      return 2;
    }
  }
  static const struct {
    const char *name;
    void (*run)(void);
  } groups[] = {{"ingest", bench_ingest},
                {"segment_write", bench_segment_write},
                {"restore", bench_restore},
                {"memory_limit", bench_memory_limit},
                {"mongodb", bench_mongodb}};
  const size_t ng = sizeof groups / sizeof groups[0];
  bool known = !only;
  for (size_t g = 0; g < ng; g++) known = known || !strcmp(only, groups[g].name);
  if (!known) {
    fprintf(stderr,
            "replay_log: --only %s: no such group (ingest, segment_write, restore, "
            "memory_limit, mongodb)\n",
            only);
    return 2;
  }
  snprintf(g_dir, sizeof g_dir, "/tmp/shoal-bench-rlog-XXXXXX");
  if (!mkdtemp(g_dir)) die("mkdtemp", NULL);
  printf("replay log benchmark (file store in %s; this machine: %ld cores)\n", g_dir,
         sysconf(_SC_NPROCESSORS_ONLN));
  for (size_t g = 0; g < ng; g++)
    if (!only || !strcmp(only, groups[g].name)) groups[g].run();
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd)) fprintf(stderr, "bench_replay_log: could not remove %s\n", g_dir);
  return 0;
}
