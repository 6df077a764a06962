/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_jsonl.c — `shoal import`'s JSON Lines reader (cli/import.c,
 * import__jsonl_line: one transition per line, checked against the run's env). The
 * first byte picks the env (CartPole-v1: f32 obs, discrete actions; Pendulum-v1: a box
 * action; MinAtar/Breakout-v1: u8 obs of 10x10x4); the rest is the file, split into
 * lines as the importer splits them.
 *
 * Properties: a refused line has a message; an accepted record satisfies the env
 * (finite observations, u8 ones integers 0..255, actions in range, next_obs unless
 * terminated, a finite priority >= 0 on every record or on none); written back as a
 * JSON line (floats with 9 significant digits) it parses to the same record, bit for bit.
 */
#include <math.h>
#include <string.h>

#include "cli/import.h"
#include "run/run.h"
#include "tests/fuzz/fuzz.h"

enum { NENVS = 3 };
static const char *ids[NENVS] = {"CartPole-v1", "Pendulum-v1", "MinAtar/Breakout-v1"};
static env *envs[NENVS]; /* kept for the process's life: ims[i].spec is theirs */
static importer ims[NENVS];
static record recs[NENVS][2];
static char *text; /* the re-encoded line */
static size_t text_cap;

static void alloc_record(const importer *im, record *r) {
  r->obs = malloc(im->obs_n * sizeof(float));
  r->next_obs = malloc(im->obs_n * sizeof(float));
  r->action_f = malloc((im->act_n ? im->act_n : 1) * sizeof(float));
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  for (int i = 0; i < NENVS; i++) {
    shoal_error err = {0};
    importer *im = &ims[i];
    if (env_make(&envs[i], ids[i], &err) ||
        run_segment_limits(env_get_spec(envs[i]), &im->lim, &err)) {
      fprintf(stderr, "fuzz_jsonl: %s: %s\n", ids[i], err.msg);
      abort();
    }
    im->spec = env_get_spec(envs[i]);
    im->obs_n = (size_t)im->spec->obs.size;
    im->act_n = (size_t)im->spec->act.size;
    alloc_record(im, &recs[i][0]);
    alloc_record(im, &recs[i][1]);
  }
  text_cap = 1 << 16;
  text = malloc(text_cap);
  return 0;
}

static size_t put_floats(char *o, size_t at, const float *v, size_t n) {
  at += (size_t)sprintf(o + at, "[");
  for (size_t i = 0; i < n; i++)
    at += (size_t)sprintf(o + at, "%s%.9g", i ? "," : "", (double)v[i]);
  return at + (size_t)sprintf(o + at, "]");
}

static void encode(const importer *im, const record *r) {
  /* 16 characters per number at most ("-1.23456789e+38,"), plus the keys. */
  size_t need = (2 * im->obs_n + im->act_n) * 17 + 256;
  if (need > text_cap) {
    text = realloc(text, need);
    text_cap = need;
  }
  size_t at = (size_t)sprintf(text, "{\"obs\":");
  at = put_floats(text, at, r->obs, im->obs_n);
  if (im->spec->act.n > 0)
    at += (size_t)sprintf(text + at, ",\"action\":%d", r->action_i);
  else
    at = put_floats(text, at + (size_t)sprintf(text + at, ",\"action\":"), r->action_f, im->act_n);
  at += (size_t)sprintf(text + at, ",\"reward\":%.9g,\"terminated\":%s,\"truncated\":%s",
                        (double)r->reward, r->terminated ? "true" : "false",
                        r->truncated ? "true" : "false");
  if (r->has_next)
    at =
        put_floats(text, at + (size_t)sprintf(text + at, ",\"next_obs\":"), r->next_obs, im->obs_n);
  if (r->has_prio) at += (size_t)sprintf(text + at, ",\"priority\":%.9g", (double)r->prio);
  sprintf(text + at, "}");
}

static void check_record(const importer *im, const record *r) {
  const env_spec *sp = im->spec;
  bool u8 = im->lim.spec.obs_dtype == STORE_SEG_U8;
  for (int pass = 0; pass < 1 + r->has_next; pass++) {
    const float *o = pass ? r->next_obs : r->obs;
    for (size_t i = 0; i < im->obs_n; i++) {
      FUZZ_CHECK(isfinite(o[i]));
      if (u8) FUZZ_CHECK(o[i] >= 0 && o[i] <= 255 && o[i] == floorf(o[i]));
    }
  }
  FUZZ_CHECK(isfinite(r->reward));
  if (sp->act.n > 0) {
    FUZZ_CHECK(r->action_i >= 0 && r->action_i < sp->act.n);
  } else {
    for (size_t i = 0; i < im->act_n; i++) {
      FUZZ_CHECK(isfinite(r->action_f[i]));
      if (sp->act.low) FUZZ_CHECK(r->action_f[i] >= sp->act.low[i]);
      if (sp->act.high) FUZZ_CHECK(r->action_f[i] <= sp->act.high[i]);
    }
  }
  FUZZ_CHECK(r->has_next || r->terminated);
  FUZZ_CHECK(im->prio_mode == (int)r->has_prio);
  if (r->has_prio) FUZZ_CHECK(isfinite(r->prio) && r->prio >= 0);
}

static void same_record(const importer *im, const record *a, const record *b) {
  FUZZ_CHECK(!memcmp(a->obs, b->obs, im->obs_n * sizeof(float)));
  FUZZ_CHECK(a->has_next == b->has_next);
  if (a->has_next) FUZZ_CHECK(!memcmp(a->next_obs, b->next_obs, im->obs_n * sizeof(float)));
  if (im->spec->act.n > 0)
    FUZZ_CHECK(a->action_i == b->action_i);
  else
    FUZZ_CHECK(!memcmp(a->action_f, b->action_f, im->act_n * sizeof(float)));
  FUZZ_CHECK(!memcmp(&a->reward, &b->reward, sizeof a->reward));
  FUZZ_CHECK(a->terminated == b->terminated && a->truncated == b->truncated);
  FUZZ_CHECK(a->has_prio == b->has_prio);
  if (a->has_prio) FUZZ_CHECK(!memcmp(&a->prio, &b->prio, sizeof a->prio));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int k = data[0] % NENVS;
  importer *im = &ims[k];
  im->prio_mode = -1;
  const char *p = (const char *)data + 1, *end = (const char *)data + size;
  char *line = malloc(size);
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
    memcpy(line, p, n);
    line[n] = 0;
    p += n + 1;
    /* As import_jsonl: a line with a NUL is refused before parsing; \r\n endings. */
    if (strlen(line) != n) continue;
    while (n > 0 && line[n - 1] == '\r') line[--n] = 0;
    const char *s = line;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) continue;
    char msg[300] = "";
    if (!import__jsonl_line(im, s, &recs[k][0], msg, sizeof msg)) {
      FUZZ_CHECK(msg[0]);
      continue;
    }
    check_record(im, &recs[k][0]);
    encode(im, &recs[k][0]);
    if (!import__jsonl_line(im, text, &recs[k][1], msg, sizeof msg))
      fprintf(stderr, "re-encoded line refused: %s\n%s\n", msg, text);
    FUZZ_CHECK(!msg[0]);
    same_record(im, &recs[k][0], &recs[k][1]);
  }
  free(line);
  return 0;
}
