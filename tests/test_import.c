/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_import.c — outside experience end to end: `shoal import` of
 * JSON Lines and .npy columns into a run's experience segments, bad records counted
 * and named, a learner training from the store only (replay.source store, no actors),
 * and a learner following segments that another process appends while it runs.
 *   test_import file       a file store in a fresh folder
 *   test_import mongodb    MongoDB: ctest's stand-in or $SHOAL_TEST_MONGO_URI (tests/mongo_test.h)
 * The experience is CartPole-v1 played through envs/ by an ε-greedy scripted policy.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <math.h>
#include <sys/stat.h>
#include <time.h>

#include "envs/envs.h"
#include "store/store.h"
#include "tests/mongo_test.h"
#include "tests/proc_util.h"

static char g_uri[1024], g_prefix[32];
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

/* CartPole transitions: whole episodes, the pole pushed toward its fall (a policy that
 * lasts ~200 steps) with probability 0.7, else a random push. */
typedef struct tr {
  float obs[4], next[4];
  int action;
  float reward;
  int term, trunc;
} tr;

static tr *play(int min_rows, uint64_t seed, int *n_out, int *episodes, int *terminals) {
  shoal_error err = {0};
  env *e = NULL;
  assert_int_equal(env_make(&e, "CartPole-v1", &err), 0);
  env_seed(e, seed);
  shoal_rng rng;
  shoal_rng_seed(&rng, seed);
  int cap = min_rows + 600, n = 0;
  tr *t = calloc((size_t)cap, sizeof *t);
  *episodes = *terminals = 0;
  while (n < min_rows) {
    float obs[4];
    env_reset(e, obs);
    for (;;) {
      assert_true(n < cap);
      tr *x = &t[n++];
      memcpy(x->obs, obs, sizeof obs);
      x->action = shoal_rng_uniform(&rng) < 0.7 ? (obs[2] + 0.5f * obs[3] > 0)
                                                : (int)(shoal_rng_next(&rng) % 2);
      env_result r;
      assert_int_equal(env_step(e, &x->action, obs, &r, &err), 0);
      memcpy(x->next, obs, sizeof obs);
      x->reward = (float)r.reward;
      x->term = r.terminated;
      x->trunc = r.truncated && !r.terminated;
      if (r.terminated || r.truncated) {
        ++*episodes;
        *terminals += r.terminated != 0;
        break;
      }
    }
  }
  env_destroy(e);
  *n_out = n;
  return t;
}

static void write_line(FILE *f, const tr *x) {
  fprintf(f,
          "{\"obs\": [%.9g, %.9g, %.9g, %.9g], \"action\": %d, \"reward\": %.9g, "
          "\"next_obs\": [%.9g, %.9g, %.9g, %.9g], \"terminated\": %s, \"truncated\": %s, "
          "\"info\": {\"policy\": \"scripted\", \"tags\": [1, \"a\"]}}\n",
          x->obs[0], x->obs[1], x->obs[2], x->obs[3], x->action, x->reward, x->next[0], x->next[1],
          x->next[2], x->next[3], x->term ? "true" : "false", x->trunc ? "true" : "false");
}

/* Bad lines put between good ones (so the trajectory around them stays whole), each
 * with a word its message must contain. */
static const struct {
  const char *line, *why;
} BAD[] = {
    {"{\"obs\": [0.1, 0.2, 0.3, 0.4], \"action\": 1, \"reward\": NaN, \"next_obs\": [0, 0, 0, "
     "0]}",
     "reward is nan"},
    {"{\"obs\": [0.1, 0.2, 0.3], \"action\": 1, \"reward\": 1, \"next_obs\": [0, 0, 0, 0]}",
     "obs has 3 numbers"},
    {"{\"obs\": [0.1, 0.2, 0.3, 0.4], \"action\": 2, \"reward\": 1, \"next_obs\": [0, 0, 0, 0]}",
     "action 2 outside [0, 2)"},
    {"{\"obs\": [0.1, 0.2, 0.3, 0.4], \"action\": 1, \"reward\": 1, \"next_obs\": [0, 0, 0,",
     "column"},
    {"{\"obs\": [0.1, 0.2, 0.3, 0.4], \"reward\": 1, \"next_obs\": [0, 0, 0, 0]}",
     "'action' is missing"},
    {"{\"obs\": [0.1, Infinity, 0.3, 0.4], \"action\": 0, \"reward\": 1, \"next_obs\": [0, 0, 0, "
     "0]}",
     "obs[1] is inf"},
    {"{\"obs\": [0.1, 0.2, 0.3, 0.4], \"action\": 0.5, \"reward\": 1, \"next_obs\": [0, 0, 0, "
     "0]}",
     "not an integer"},
    {"[1, 2, 3]", "a JSON object expected"},
};
enum { NBAD = sizeof BAD / sizeof BAD[0] };

/* Writes t as JSON Lines with the bad lines after good lines 10, 20, ...; bad_at[i]
 * gets the 1-based line number of bad line i. */
static void write_jsonl(const char *path, const tr *t, int n, int *bad_at) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  int line = 0, b = 0;
  for (int i = 0; i < n; i++) {
    write_line(f, &t[i]), line++;
    if (i % 10 == 9 && b < NBAD) {
      fprintf(f, "%s\n", BAD[b].line);
      bad_at[b++] = ++line;
    }
  }
  assert_int_equal(b, NBAD);
  fclose(f);
}

static char *run_import_rows(const char *file, const char *run, const char *env, int *rc,
                             const char *seg_rows) {
  char *argv[] = {wf_shoal,    "import", (char *)file,     "--run",          (char *)run,
                  "--store",   g_uri,    "--segment-rows", (char *)seg_rows, env ? "--env" : NULL,
                  (char *)env, NULL};
  return wf_run(argv, 120, rc);
}

static char *run_import(const char *file, const char *run, const char *env, int *rc) {
  return run_import_rows(file, run, env, rc, "4096");
}

/* All rows of run's segments, concatenated, with each segment checked. */
typedef struct all_rows {
  int n, ends, terms, segments;
  float *obs;
  int *action;
} all_rows;

static all_rows read_all(store *st, const char *run) {
  all_rows a = {0};
  shoal_error err = {0};
  uint64_t seqs[4096];
  size_t n = 0;
  assert_int_equal(store_segment_list(st, run, STORE_SEG_FIRST, seqs, 4096, &n, &err), 0);
  store_segment s = {0};
  store_segment_limits lim = {.spec = {.obs_dtype = STORE_SEG_F32,
                                       .obs_ndim = 1,
                                       .obs_shape = {4},
                                       .act_dtype = STORE_SEG_I32},
                              .num_actions = 2};
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(store_segment_read(st, run, seqs[i], &s, &err), 0);
    if (store_segment_check(&s, &lim, &err)) fail_msg("segment %zu: %s", i, err.msg);
    a.obs = realloc(a.obs, (size_t)(a.n + (int)s.rows) * 16);
    a.action = realloc(a.action, (size_t)(a.n + (int)s.rows) * sizeof(int));
    memcpy(a.obs + 4 * a.n, s.obs, s.rows * 16);
    for (uint32_t r = 0; r < s.rows; r++) {
      a.action[a.n + (int)r] = ((int32_t *)s.action)[r];
      a.terms += s.terminated[r];
    }
    a.n += (int)s.rows;
    a.ends += (int)s.ends;
    a.segments++;
  }
  store_segment_free(&s);
  return a;
}

static void test_import_jsonl(void **state) {
  (void)state;
  int n, eps, terms, bad_at[NBAD];
  tr *t = play(3000, 7, &n, &eps, &terms);
  char path[512], run[STORE_NAME_MAX];
  snprintf(path, sizeof path, "%s/cartpole.jsonl", wf_dir);
  write_jsonl(path, t, n, bad_at);
  run_name(run, "jsonl");
  int rc;
  char *out = run_import(path, run, "CartPole-v1", &rc);
  if (rc != 0) fail_msg("shoal import: %d\n%s", rc, out);
  /* Every bad line named by file and line, with its reason; and the summary. */
  for (int b = 0; b < NBAD; b++) {
    char want[600];
    snprintf(want, sizeof want, "%s line %d: ", path, bad_at[b]);
    char *at = strstr(out, want);
    if (!at) fail_msg("no message for bad line %d in:\n%s", bad_at[b], out);
    char *eol = strchr(at, '\n');
    if (eol) *eol = 0;
    if (!strstr(at, BAD[b].why)) fail_msg("line %d: '%s' lacks '%s'", bad_at[b], at, BAD[b].why);
    if (eol) *eol = '\n';
  }
  char summary[256];
  snprintf(summary, sizeof summary, "%d transitions imported", n);
  assert_non_null(strstr(out, summary));
  snprintf(summary, sizeof summary, "%d bad records skipped", NBAD);
  assert_non_null(strstr(out, summary));
  free(out);

  /* The segments hold the good lines, in order, as whole episodes. */
  store *st = open_store();
  all_rows a = read_all(st, run);
  assert_int_equal(a.n, n);
  assert_int_equal(a.ends, eps); /* trajectories joined across lines, cut only at episode ends */
  assert_int_equal(a.terms, terms);
  assert_true(a.segments >= 1);
  for (int i = 0; i < n; i++) {
    assert_memory_equal(a.obs + 4 * i, t[i].obs, 16);
    assert_int_equal(a.action[i], t[i].action);
  }
  free(a.obs), free(a.action);

  /* A second import appends after the first: sequence numbers go on. */
  out = run_import(path, run, NULL, &rc);
  assert_int_equal(rc, 0);
  free(out);
  a = read_all(st, run);
  assert_int_equal(a.n, 2 * n);
  free(a.obs), free(a.action);
  store_close(st);
  free(t);
}

static void test_import_refusals(void **state) {
  (void)state;
  char path[512], run[STORE_NAME_MAX];
  run_name(run, "refuse");
  snprintf(path, sizeof path, "%s/bad.jsonl", wf_dir);
  FILE *f = fopen(path, "w");
  for (int b = 0; b < NBAD; b++) fprintf(f, "%s\n", BAD[b].line);
  fclose(f);
  int rc;
  char *out = run_import(path, run, "CartPole-v1", &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "nothing was imported"));
  char want[64];
  snprintf(want, sizeof want, "%d bad records skipped", NBAD);
  assert_non_null(strstr(out, want));
  free(out);
  /* No valid record, no run: the run is made with its first segment. */
  store *st = open_store();
  store_run r;
  shoal_error err = {0};
  assert_int_equal(store_run_find(st, run, &r, &err), SHOAL_ENOENT);
  store_close(st);
  /* Good records make it (for the refusals below, which need a run). */
  int n, eps, terms, bad_at[NBAD];
  tr *t = play(100, 5, &n, &eps, &terms);
  char good[600];
  snprintf(good, sizeof good, "%s/good.jsonl", wf_dir);
  write_jsonl(good, t, n, bad_at);
  free(t);
  out = run_import(good, run, "CartPole-v1", &rc);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "created run"));
  free(out);
  /* A missing file; the wrong env for an existing run; a run without --env. */
  char missing[600];
  snprintf(missing, sizeof missing, "%s/none.jsonl", wf_dir);
  out = run_import(missing, run, NULL, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "No such file"));
  free(out);
  out = run_import(path, run, "Acrobot-v1", &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "is for CartPole-v1, not Acrobot-v1"));
  free(out);
  char fresh[STORE_NAME_MAX];
  run_name(fresh, "noenv");
  out = run_import(path, fresh, NULL, &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "give --env"));
  free(out);
}

/* A .npy file (format version 1) of rows x per_row elements of descr. */
static void write_npy(const char *dir, const char *name, const char *descr, int rows, int per_row,
                      const void *data, size_t esize, long cut_to) {
  char path[700], hdr[256];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  int hl = per_row > 1
               ? snprintf(hdr, sizeof hdr,
                          "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }", descr,
                          rows, per_row)
               : snprintf(hdr, sizeof hdr,
                          "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }", descr, rows);
  int total = 10 + hl + 1, pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  unsigned short len = (unsigned short)(hl + pad + 1);
  fputc(len & 0xff, f), fputc(len >> 8, f);
  fwrite(hdr, 1, (size_t)hl, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(data, esize, (size_t)rows * (size_t)per_row, f);
  fclose(f);
  if (cut_to >= 0) assert_int_equal(truncate(path, cut_to), 0);
}

static void test_import_npy(void **state) {
  (void)state;
  int n, eps, terms;
  tr *t = play(500, 11, &n, &eps, &terms);
  float *obs = malloc((size_t)n * 16), *next = malloc((size_t)n * 16), *rew = malloc((size_t)n * 4);
  int64_t *act = malloc((size_t)n * 8);
  uint8_t *term = malloc((size_t)n), *trunc = malloc((size_t)n);
  for (int i = 0; i < n; i++) {
    memcpy(obs + 4 * i, t[i].obs, 16);
    memcpy(next + 4 * i, t[i].next, 16);
    rew[i] = t[i].reward;
    act[i] = t[i].action;
    term[i] = (uint8_t)t[i].term;
    trunc[i] = (uint8_t)t[i].trunc;
  }
  const int bad_row = 123;
  obs[4 * bad_row + 2] = NAN;
  char dir[600], run[STORE_NAME_MAX];
  snprintf(dir, sizeof dir, "%s/cols", wf_dir);
  mkdir(dir, 0755);
  write_npy(dir, "obs", "<f4", n, 4, obs, 4, -1);
  write_npy(dir, "next_obs", "<f4", n, 4, next, 4, -1);
  write_npy(dir, "reward", "<f4", n, 1, rew, 4, -1);
  write_npy(dir, "action", "<i8", n, 1, act, 8, -1);
  write_npy(dir, "terminated", "|b1", n, 1, term, 1, -1);
  write_npy(dir, "truncated", "|u1", n, 1, trunc, 1, -1);
  run_name(run, "npy");
  int rc;
  char *out = run_import(dir, run, "CartPole-v1", &rc);
  if (rc) fail_msg("import: %s", out);
  char want[700];
  snprintf(want, sizeof want, "%s row %d: obs[2] is nan", dir, bad_row);
  if (!strstr(out, want)) fail_msg("no '%s' in:\n%s", want, out);
  snprintf(want, sizeof want, "%d transitions imported", n - 1);
  assert_non_null(strstr(out, want));
  free(out);
  store *st = open_store();
  all_rows a = read_all(st, run);
  assert_int_equal(a.n, n - 1);
  /* The bad row cut its episode in two: one more end than episodes. */
  assert_int_equal(a.ends, eps + 1);
  free(a.obs), free(a.action);
  store_close(st);

  /* A truncated column file: refused whole, nothing imported. */
  write_npy(dir, "reward", "<f4", n, 1, rew, 4, 200);
  char run2[STORE_NAME_MAX];
  run_name(run2, "npytrunc");
  out = run_import(dir, run2, "CartPole-v1", &rc);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "reward.npy: truncated"));
  free(out);
  free(obs), free(next), free(rew), free(act), free(term), free(trunc), free(t);
}

/* The learner's JSON line of event ev in out (a copy), or NULL. */
static char *event_line(const char *out, const char *ev) {
  char key[64];
  snprintf(key, sizeof key, "{\"event\":\"%s\"", ev);
  const char *p = strstr(out, key);
  if (!p) return NULL;
  const char *e = strchr(p, '\n');
  return strndup(p, e ? (size_t)(e - p) : strlen(p));
}

static double jnum(const char *line, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = line ? strstr(line, k) : NULL;
  return p ? strtod(p + strlen(k), NULL) : NAN;
}

/* A nested array of shape (ndim dims) as JSON, its numbers 0/1 by position and salt. */
static void nested(FILE *f, const int *shape, int ndim, int *idx, int salt) {
  fputc('[', f);
  for (int k = 0; k < shape[0]; k++) {
    if (k) fputs(", ", f);
    if (ndim > 1)
      nested(f, shape + 1, ndim - 1, idx, salt);
    else
      fprintf(f, "%d", (*idx)++ * 7 % 3 == salt % 3);
  }
  fputc(']', f);
}

static void nested_obs(FILE *f, const env_space *o, int salt) {
  int idx = 0;
  nested(f, o->shape, o->ndim, &idx, salt);
}

/* Nested observation arrays are read to the env's shape (MinAtar's C x 10 x 10), a
 * ragged one is named, and a .npy header whose shape would overflow the byte count is
 * refused (it once wrapped around to a 1-byte buffer). */
static void test_import_nested_and_overflow(void **state) {
  (void)state;
  env *e;
  shoal_error err = {0};
  assert_int_equal(env_make(&e, "MinAtar/Breakout-v1", &err), 0);
  const env_space *o = &env_get_spec(e)->obs;
  assert_int_equal(o->ndim, 3);
  char path[700], run[STORE_NAME_MAX];
  snprintf(path, sizeof path, "%s/nested.jsonl", wf_dir);
  FILE *f = fopen(path, "w");
  for (int r = 0; r < 3; r++) {
    fputs("{\"obs\": ", f);
    nested_obs(f, o, r);
    fputs(", \"action\": 1, \"reward\": 0, \"next_obs\": ", f);
    nested_obs(f, o, r + 1);
    fputs(", \"terminated\": false}\n", f);
  }
  /* Ragged: rows of one plane of different lengths. */
  fputs("{\"obs\": [[0, 1], [0]], \"action\": 1, \"reward\": 0, \"next_obs\": [[0]]}\n", f);
  fclose(f);
  env_destroy(e);
  run_name(run, "nested");
  int rc;
  char *out = run_import(path, run, "MinAtar/Breakout-v1", &rc);
  if (rc || !strstr(out, "3 transitions imported") || !strstr(out, "ragged"))
    fail_msg("nested import: status %d:\n%s", rc, out);
  free(out);

  char dir[600];
  snprintf(dir, sizeof dir, "%s/huge", wf_dir);
  mkdir(dir, 0755);
  float small[8] = {0};
  write_npy(dir, "reward", "<f4", 2, 1, small, 4, -1);
  /* obs.npy claiming (2^62, 4) float32 rows: 2^66 bytes, which wraps a 64-bit size. */
  snprintf(path, sizeof path, "%s/obs.npy", dir);
  f = fopen(path, "wb");
  const char *hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }";
  int hl = (int)strlen(hdr), pad = (64 - (10 + hl + 1) % 64) % 64;
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  unsigned short len = (unsigned short)(hl + pad + 1);
  fputc(len & 0xff, f), fputc(len >> 8, f);
  fwrite(hdr, 1, (size_t)hl, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(small, 4, 8, f);
  fclose(f);
  run_name(run, "huge");
  out = run_import(dir, run, "CartPole-v1", &rc);
  if (rc == 0 || !strstr(out, "more bytes than any file holds"))
    fail_msg("overflowing .npy: status %d:\n%s", rc, out);
  free(out);
}

static void test_train_from_store(void **state) {
  (void)state;
  int n, eps, terms, bad_at[NBAD];
  tr *t = play(6000, 3, &n, &eps, &terms);
  char path[512], run[STORE_NAME_MAX], learn[STORE_NAME_MAX];
  snprintf(path, sizeof path, "%s/train.jsonl", wf_dir);
  write_jsonl(path, t, n, bad_at);
  run_name(run, "logs");
  run_name(learn, "offline");
  int rc;
  char *out = run_import(path, run, "CartPole-v1", &rc);
  if (rc) fail_msg("import: %s", out);
  free(out);

  char cfg[4200], sets[8][160];
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  snprintf(sets[0], sizeof sets[0], "replay.source=store");
  snprintf(sets[1], sizeof sets[1], "replay.store_run=%s", run);
  snprintf(sets[2], sizeof sets[2], "run.max_env_steps=%d", n);
  snprintf(sets[3], sizeof sets[3], "run.solve_return=0");
  snprintf(sets[4], sizeof sets[4], "learner.warmup=1000");
  snprintf(sets[5], sizeof sets[5], "learner.batch=64");
  snprintf(sets[6], sizeof sets[6], "run.name=%s", learn);
  snprintf(sets[7], sizeof sets[7], "learner.device=cpu");
  char *argv[] = {wf_shoal, "run",   cfg,     "--store", g_uri,   "--log-json", "--no-tensorboard",
                  "--set",  sets[0], "--set", sets[1],   "--set", sets[2],      "--set",
                  sets[3],  "--set", sets[4], "--set",   sets[5], "--set",      sets[6],
                  "--set",  sets[7], NULL};
  out = wf_run(argv, 240, &rc);
  if (rc) fail_msg("shoal run: %d\n%s", rc, out);
  char *sl = event_line(out, "store"), *dl = event_line(out, "done");
  if (!sl || !dl) fail_msg("no store/done lines in:\n%s", out);
  /* Every imported row went into replay once, and nothing else did. */
  assert_int_equal((int)jnum(sl, "rows"), n);
  assert_int_equal((int)jnum(sl, "rejected_segments"), 0);
  assert_int_equal((int)jnum(dl, "env_steps"), n);
  double updates = jnum(dl, "updates");
  /* replay_ratio 8 over n - warmup rows of batch 64: about 8 (n - 1000) / 64. */
  if (!(updates >= 300)) fail_msg("only %.0f updates:\n%s", updates, out);
  if (getenv("SHOAL_TEST_VERBOSE")) printf("%s", out);
  assert_null(strstr(out, "[actor-")); /* no actor was started */
  assert_int_equal(wf_find_pid("shoal-actor", learn), 0);
  free(sl), free(dl), free(out), free(t);
}

/* Mixed: two actors and the store, 30% of inserted rows from the store (segments of 250
 * rows, the follower's granularity). */
static void test_mixed_with_actors(void **state) {
  (void)state;
  int n, eps, terms, bad_at[NBAD];
  tr *t = play(8000, 9, &n, &eps, &terms);
  char path[512], run[STORE_NAME_MAX], learn[STORE_NAME_MAX];
  snprintf(path, sizeof path, "%s/mixed.jsonl", wf_dir);
  write_jsonl(path, t, n, bad_at);
  run_name(run, "mixlogs");
  run_name(learn, "mixed");
  int rc;
  char *out = run_import_rows(path, run, "CartPole-v1", &rc, "250");
  if (rc) fail_msg("import: %s", out);
  free(out);
  const int total = 20000;
  char cfg[4200], sets[9][160];
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  snprintf(sets[0], sizeof sets[0], "replay.source=mixed");
  snprintf(sets[1], sizeof sets[1], "replay.store_run=%s", run);
  snprintf(sets[2], sizeof sets[2], "run.max_env_steps=%d", total);
  snprintf(sets[3], sizeof sets[3], "run.solve_return=0");
  snprintf(sets[4], sizeof sets[4], "replay.store_ratio=0.3");
  snprintf(sets[5], sizeof sets[5], "replay.store_poll_s=0.02");
  snprintf(sets[6], sizeof sets[6], "run.name=%s", learn);
  snprintf(sets[7], sizeof sets[7], "env.num_envs=8");
  snprintf(sets[8], sizeof sets[8], "learner.device=cpu");
  char *argv[] = {wf_shoal, "run",   cfg,     "--store", g_uri,   "--log-json", "--no-tensorboard",
                  "--set",  sets[0], "--set", sets[1],   "--set", sets[2],      "--set",
                  sets[3],  "--set", sets[4], "--set",   sets[5], "--set",      sets[6],
                  "--set",  sets[7], "--set", sets[8],   NULL};
  out = wf_run(argv, 240, &rc);
  if (rc) fail_msg("shoal run: %d\n%s", rc, out);
  char *sl = event_line(out, "store"), *dl = event_line(out, "done");
  if (!sl || !dl) fail_msg("no store/done lines in:\n%s", out);
  double rows = jnum(sl, "rows"), steps = jnum(dl, "env_steps");
  /* The share up to the stop at max_env_steps: actor batches in flight when the learner
   * stops still go in (they are in env_steps), the store's stop at once. */
  double frac = rows / total;
  printf(
      "mixed 0.3 with 2 actors: %.0f store rows of %d inserted by the stop (%.3f); %.0f in all\n",
      rows, total, frac, steps);
  /* 0.3 of what replay received, within a segment (250 rows) either way. */
  if (frac < 0.27 || frac > 0.33) fail_msg("store fraction %.3f, wanted 0.3:\n%s", frac, out);
  assert_true(steps - rows > 0.6 * total); /* the actors ran and inserted their share */
  free(sl), free(dl), free(out), free(t);
}

/* A learner stopped part-way and resumed: every row exactly once over the two (the
 * follower takes segments whole; the resumed one continues after the last recorded), and
 * the resumed learner's replay rebuilt from its replay log, the store's rows included. */
static void test_resume_exactly_once(void **state) {
  (void)state;
  int n, eps, terms, bad_at[NBAD];
  tr *t = play(4000, 13, &n, &eps, &terms);
  char path[512], run[STORE_NAME_MAX], learn[STORE_NAME_MAX];
  snprintf(path, sizeof path, "%s/resume.jsonl", wf_dir);
  write_jsonl(path, t, n, bad_at);
  run_name(run, "reslogs");
  run_name(learn, "resumed");
  int rc;
  char *out = run_import_rows(path, run, "CartPole-v1", &rc, "250");
  if (rc) fail_msg("import: %s", out);
  free(out);
  char cfg[4200], sets[6][160];
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  snprintf(sets[0], sizeof sets[0], "replay.source=store");
  snprintf(sets[1], sizeof sets[1], "replay.store_run=%s", run);
  snprintf(sets[2], sizeof sets[2], "run.max_env_steps=%d", n / 2);
  snprintf(sets[3], sizeof sets[3], "run.solve_return=0");
  snprintf(sets[4], sizeof sets[4], "run.name=%s", learn);
  snprintf(sets[5], sizeof sets[5], "learner.device=cpu");
  char *a1[] = {wf_shoal, "run",   cfg,     "--store", g_uri,   "--log-json", "--no-tensorboard",
                "--set",  sets[0], "--set", sets[1],   "--set", sets[2],      "--set",
                sets[3],  "--set", sets[4], "--set",   sets[5], NULL};
  out = wf_run(a1, 240, &rc);
  if (rc) fail_msg("shoal run: %d\n%s", rc, out);
  char *sl = event_line(out, "store");
  if (!sl) fail_msg("no store line in:\n%s", out);
  double rows1 = jnum(sl, "rows"), seq1 = jnum(sl, "last_seq");
  free(sl), free(out);
  assert_true(rows1 >= n / 2 && rows1 < n);
  char more[64];
  snprintf(more, sizeof more, "run.max_env_steps=%d", n);
  char *a2[] = {wf_shoal,           "run",   "--resume", learn, "--store", g_uri, "--log-json",
                "--no-tensorboard", "--set", more,       NULL};
  out = wf_run(a2, 240, &rc);
  if (rc) fail_msg("shoal run --resume: %d\n%s", rc, out);
  sl = event_line(out, "store");
  char *dl = event_line(out, "done");
  if (!sl || !dl) fail_msg("no store/done lines in:\n%s", out);
  double rows2 = jnum(sl, "rows");
  /* The resumed learner's replay came back from its log, the store's rows included. */
  const char *rb = strstr(out, "replay rebuilt from the log: ");
  if (!rb) fail_msg("no rebuilt replay in:\n%s", out);
  double held = atof(rb + strlen("replay rebuilt from the log: "));
  printf("resume: %.0f rows (to seq %.0f), then %.0f rows: %.0f of %d; %.0f items rebuilt\n", rows1,
         seq1, rows2, rows1 + rows2, n, held);
  assert_true(held >= rows1);
  assert_int_equal((int)(rows1 + rows2), n);
  assert_int_equal((int)jnum(dl, "env_steps"), n);
  free(sl), free(dl), free(out), free(t);
}

/* A process appending segments while a learner follows: 20 good segments of 250 rows,
 * one with a NaN reward, one with the wrong observation shape and (file store) one
 * damaged on disk. */
enum { F_GOOD = 20, F_ROWS = 250, F_SPEC_ROWS = 100 };

static int appender(const char *run, const char *scratch) {
  shoal_error err = {0};
  store *st = NULL;
  if (store_open(&st, g_uri, &err)) return 10;
  int n, eps, terms;
  tr *t = play(F_GOOD * F_ROWS, 5, &n, &eps, &terms);
  store_segment s = {0};
  int row = 0;
  uint64_t last = 0;
  for (int g = 0; g < F_GOOD; g++) {
    uint32_t k = 0;
    for (int i = row; i < row + F_ROWS; i++)
      k += (t[i].term || t[i].trunc || i == row + F_ROWS - 1);
    if (store_segment_reserve(&s,
                              &(store_segment_spec){.obs_dtype = STORE_SEG_F32,
                                                    .obs_ndim = 1,
                                                    .obs_shape = {4},
                                                    .act_dtype = STORE_SEG_I32},
                              F_ROWS, k, 0, &err))
      return 11;
    uint32_t e = 0;
    for (int i = 0; i < F_ROWS; i++) {
      const tr *x = &t[row + i];
      memcpy((float *)s.obs + 4 * i, x->obs, 16);
      ((int32_t *)s.action)[i] = x->action;
      s.reward[i] = x->reward;
      s.terminated[i] = (uint8_t)x->term;
      s.truncated[i] = (uint8_t)(x->trunc || (!x->term && i == F_ROWS - 1));
      if (s.terminated[i] || s.truncated[i]) memcpy((float *)s.final_obs + 4 * e++, x->next, 16);
    }
    snprintf(s.source, sizeof s.source, "deployed-%d", g % 3);
    if (store_segment_write(st, run, &s, &err)) return 12;
    last = s.seq;
    row += F_ROWS;
    if (g == 6) { /* NaN reward: a valid segment that fails the checks */
      s.reward[17] = NAN;
      if (store_segment_write(st, run, &s, &err)) return 13;
      last = s.seq;
    }
    if (g == 11) { /* CartPole's rows with Acrobot's observation shape */
      store_segment_spec bad = {
          .obs_dtype = STORE_SEG_F32, .obs_ndim = 1, .obs_shape = {6}, .act_dtype = STORE_SEG_I32};
      store_segment b = {0};
      if (store_segment_reserve(&b, &bad, F_SPEC_ROWS, 0, 0, &err)) return 14;
      snprintf(b.source, sizeof b.source, "other");
      if (store_segment_write(st, run, &b, &err)) return 15;
      last = b.seq;
      store_segment_free(&b);
    }
    if (g == 15 && g_file) {
      /* A damaged file with the next number: written elsewhere, one byte flipped, then
       * linked into place whole. */
      if (store_segment_write(st, scratch, &s, &err)) return 16;
      char src[1400], tmp[1400], dst[1400];
      snprintf(src, sizeof src, "%s/%s/segments/%020" PRIu64 ".seg", g_uri + 7, scratch, s.seq);
      snprintf(tmp, sizeof tmp, "%s/%s/dmg.tmp", g_uri + 7, scratch);
      snprintf(dst, sizeof dst, "%s/%s/segments/%020" PRIu64 ".seg", g_uri + 7, run, last + 1);
      size_t len;
      char *b = wf_slurp(src, &len);
      b[400] ^= 0x40;
      FILE *f = fopen(tmp, "wb");
      fwrite(b, 1, len, f);
      fclose(f);
      free(b);
      if (link(tmp, dst)) return 17;
      unlink(tmp);
      last++;
    }
    usleep(60000);
  }
  store_segment_free(&s);
  store_close(st);
  free(t);
  return 0;
}

static void test_follow_appending(void **state) {
  (void)state;
  char run[STORE_NAME_MAX], scratch[STORE_NAME_MAX], learn[STORE_NAME_MAX];
  run_name(run, "live");
  run_name(scratch, "scratch");
  run_name(learn, "follower");
  store *st = open_store();
  shoal_error err = {0};
  assert_int_equal(store_run_create(st, run, "env:\n  id: CartPole-v1\n", STORE_RUN_CREATED, &err),
                   0);
  assert_int_equal(store_run_create(st, scratch, "", STORE_RUN_CREATED, &err), 0);

  char cfg[4200], sets[9][160];
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  snprintf(sets[0], sizeof sets[0], "replay.source=store");
  snprintf(sets[1], sizeof sets[1], "replay.store_run=%s", run);
  snprintf(sets[2], sizeof sets[2], "run.max_env_steps=%d", F_GOOD * F_ROWS);
  snprintf(sets[3], sizeof sets[3], "run.solve_return=0");
  snprintf(sets[4], sizeof sets[4], "learner.warmup=500");
  snprintf(sets[5], sizeof sets[5], "replay.store_poll_s=0.05");
  snprintf(sets[6], sizeof sets[6], "run.name=%s", learn);
  snprintf(sets[7], sizeof sets[7], "learner.log_every_s=0.2");
  snprintf(sets[8], sizeof sets[8], "learner.device=cpu");
  char *argv[] = {wf_shoal, "run",   cfg,     "--store", g_uri,   "--log-json", "--no-tensorboard",
                  "--set",  sets[0], "--set", sets[1],   "--set", sets[2],      "--set",
                  sets[3],  "--set", sets[4], "--set",   sets[5], "--set",      sets[6],
                  "--set",  sets[7], "--set", sets[8],   NULL};
  wf_proc p;
  wf_start(&p, argv);
  free(wf_wait_text(p.out, "\"event\":\"listening\"", 60));
  pid_t w = fork();
  assert_true(w >= 0);
  if (w == 0) _exit(appender(run, scratch));
  int status;
  assert_int_equal(waitpid(w, &status, 0), w);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  int rc = wf_wait(&p, 180);
  char *out = wf_slurp(p.out, NULL);
  if (rc) fail_msg("shoal run: %d\n%s", rc, out);
  char *sl = event_line(out, "store"), *dl = event_line(out, "done");
  if (!sl || !dl) fail_msg("no store/done lines in:\n%s", out);
  int bad = 2 + g_file;
  /* Every good row exactly once; each bad segment rejected and counted. */
  assert_int_equal((int)jnum(sl, "rows"), F_GOOD * F_ROWS);
  assert_int_equal((int)jnum(sl, "segments"), F_GOOD);
  assert_int_equal((int)jnum(sl, "rejected_segments"), bad);
  assert_int_equal((int)jnum(sl, "rejected_rows"), F_ROWS + F_SPEC_ROWS);
  assert_int_equal((int)jnum(sl, "last_seq"), F_GOOD + bad - 1);
  assert_int_equal((int)jnum(dl, "env_steps"), F_GOOD * F_ROWS);
  assert_non_null(strstr(out, "reward is nan"));
  assert_non_null(strstr(out, "spec obs f32[6] action i32[], the env needs obs f32[4]"));
  if (g_file) assert_non_null(strstr(out, "CRC mismatch"));
  /* It followed: progress lines saw the rows arrive in several steps. */
  int distinct = 0;
  double prev = -1;
  for (const char *q = strstr(out, "\"store_rows\":"); q; q = strstr(q + 1, "\"store_rows\":")) {
    double v = strtod(q + 13, NULL);
    if (v != prev) distinct++, prev = v;
  }
  if (distinct < 3) fail_msg("store_rows took only %d values:\n%s", distinct, out);
  free(sl), free(dl), free(out);
  store_close(st);
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "file";
  if (wf_setup("import")) return 1;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(g_prefix, sizeof g_prefix, "imp%ld-%ld", (long)getpid(), (long)(ts.tv_nsec % 100000));
  if (strcmp(backend, "mongodb") == 0) {
    int mrc = mongo_test_uri(g_uri, sizeof g_uri, "shoal_test_import");
    if (mrc) {
      wf_teardown();
      return mrc;
    }
  } else {
    g_file = 1;
    snprintf(g_uri, sizeof g_uri, "file://%s/store", wf_dir);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_import_jsonl),
      cmocka_unit_test(test_import_refusals),
      cmocka_unit_test(test_import_npy),
      cmocka_unit_test(test_train_from_store),
      cmocka_unit_test(test_import_nested_and_overflow),
      cmocka_unit_test(test_follow_appending),
      cmocka_unit_test(test_mixed_with_actors),
      cmocka_unit_test(test_resume_exactly_once),
  };
  int rc = cmocka_run_group_tests_name("import", tests, NULL, NULL);
  if (rc == 0) wf_teardown();
  return rc;
}
