/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli/import.c — `shoal import FILE... --run RUN`: experience from outside shoal into a
 * run's experience segments (store.h), for a learner with replay.source store|mixed.
 *
 *   shoal import FILE... --run RUN [--env ID] [--store URI] [--source NAME]
 *                [--segment-rows N] [--quiet]
 *
 * FILE is a JSON Lines file (one transition per line) or a folder of .npy column files
 * (one row per transition); both are described in docs/experience.md. Every record is
 * checked against the run's env (observation shape and dtype, action range, finite
 * numbers); a bad record is skipped with a message naming the file and line (or row)
 * and counted. Consecutive transitions whose next_obs equals the following one's obs
 * are stored as one trajectory, so n-step returns span them; elsewhere the transition
 * ends a piece (truncated, with next_obs as its final observation), so the learner
 * bootstraps from it. Exit status 0 when something was imported, 1 when nothing was
 * (or the store failed), 2 for a usage error.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/import.h"
#include "config/config.h"
#include "envs/envs.h"
#include "run/run.h"
#include "store/store.h"

enum { MAX_SHOWN = 50 };

static void bad_record(importer *im, const char *unit, uint64_t where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void bad_record(importer *im, const char *unit, uint64_t where, const char *fmt, ...) {
  im->bad++;
  im->file_bad++;
  if (im->shown++ >= MAX_SHOWN) {
    if (im->shown == MAX_SHOWN + 1)
      fprintf(stderr, "shoal import: more bad records: not shown, counted in the summary\n");
    return;
  }
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "shoal import: %s %s %" PRIu64 ": %s (skipped)\n", im->file, unit, where, msg);
}

/* ---- segments ------------------------------------------------------------------------- */

/* A run for the imported experience, made when its first segment is ready (a file with
 * no valid record makes none): the default config with this env, so a learner can
 * follow it (replay.store_run) and `shoal eval` can find its env. */
static int create_run(importer *im, shoal_error *err) {
  int nkeys;
  const cfg_key *keys = apex_schema(&nkeys);
  config *cfg = config_create(keys, nkeys, err);
  char set[160], *yaml = NULL;
  snprintf(set, sizeof set, "env.id=%s", im->create_env);
  int rc = !cfg ? SHOAL_ENOMEM : 0;
  if (!rc && !(rc = config_set(cfg, set, err)) &&
      !(rc = config_set(cfg, "replay.source=store", err)) && !(rc = config_dump(cfg, &yaml, err))) {
    rc = store_run_create(im->st, im->run, yaml, STORE_RUN_CREATED, err);
    if (rc == SHOAL_EEXIST)
      rc = 0;
    else if (!rc && !im->quiet)
      printf("shoal import: created run '%s' for %s in %s\n", im->run, im->create_env,
             store_uri(im->st));
  }
  free(yaml);
  config_destroy(cfg);
  if (!rc) im->create_env = NULL;
  return rc;
}

static int flush_segment(importer *im) {
  if (!im->n || im->store_rc) return im->store_rc;
  shoal_error err = {0};
  if (im->create_env && create_run(im, &err)) {
    fprintf(stderr, "shoal import: creating run '%s': %s\n", im->run, err.msg);
    return im->store_rc = err.code ? err.code : SHOAL_EIO;
  }
  store_segment *g = &im->seg;
  int rc = store_segment_reserve(g, &im->lim.spec, im->n, im->k, im->prio_mode == 1, &err);
  if (!rc) {
    memcpy(g->obs, im->s_obs, (size_t)im->n * im->ob);
    memcpy(g->action, im->s_act, (size_t)im->n * im->ab);
    memcpy(g->reward, im->s_rew, (size_t)im->n * 4);
    memcpy(g->terminated, im->s_term, im->n);
    memcpy(g->truncated, im->s_trunc, im->n);
    if (im->k) memcpy(g->final_obs, im->s_fin, (size_t)im->k * im->ob);
    if (g->priority) memcpy(g->priority, im->s_prio, (size_t)im->n * 4);
    snprintf(g->source, sizeof g->source, "%s", im->source);
    /* Each record was checked on the way in; this is the same check the learner makes. */
    rc = store_segment_check(g, &im->lim, &err);
    if (!rc) rc = store_segment_write(im->st, im->run, g, &err);
  }
  if (rc) {
    fprintf(stderr, "shoal import: writing a segment of %u rows to run '%s': %s\n", im->n, im->run,
            err.msg);
    im->store_rc = rc;
    return rc;
  }
  if (!im->segments) im->first_seq = g->seq;
  im->last_seq = g->seq;
  im->segments++;
  im->imported += im->n;
  im->file_imported += im->n;
  im->n = im->k = 0;
  return 0;
}

static void put_obs(const importer *im, unsigned char *dst, const float *src) {
  if (im->lim.spec.obs_dtype == STORE_SEG_F32) {
    memcpy(dst, src, im->obs_n * sizeof(float));
  } else {
    for (size_t i = 0; i < im->obs_n; i++) dst[i] = (unsigned char)src[i];
  }
}

/* Appends record r as a row; it ended (a terminal, a truncation or a cut) when ends. */
static int append_row(importer *im, const record *r, bool cut) {
  uint32_t i = im->n;
  put_obs(im, im->s_obs + (size_t)i * im->ob, r->obs);
  if (im->lim.spec.act_dtype == STORE_SEG_I32)
    memcpy(im->s_act + (size_t)i * 4, &r->action_i, 4);
  else
    memcpy(im->s_act + (size_t)i * im->ab, r->action_f, im->ab);
  im->s_rew[i] = r->reward;
  im->s_term[i] = r->terminated;
  im->s_trunc[i] = r->truncated || (cut && !r->terminated);
  im->s_prio[i] = r->has_prio ? r->prio : 0;
  if (im->s_term[i] || im->s_trunc[i]) {
    /* A terminal transition may come without next_obs: its final observation is
     * never bootstrapped from (discount 0), so zeros do. */
    if (r->has_next)
      put_obs(im, im->s_fin + (size_t)im->k * im->ob, r->next_obs);
    else
      memset(im->s_fin + (size_t)im->k * im->ob, 0, im->ob);
    im->k++;
  }
  im->n++;
  return im->n == im->seg_rows ? flush_segment(im) : 0;
}

/* Takes a valid record: decides the pending one's end by comparing its next_obs with
 * this obs, appends it, and makes this one pending. */
static int take(importer *im, record *r) {
  int rc = 0;
  if (im->have_pend) {
    bool ended = im->pend.terminated || im->pend.truncated;
    bool joins = !ended && im->pend.has_next &&
                 memcmp(im->pend.next_obs, r->obs, im->obs_n * sizeof(float)) == 0;
    rc = append_row(im, &im->pend, !joins);
  }
  /* swap buffers: r becomes pending, the old pending's buffers are reused */
  record t = im->pend;
  im->pend = *r;
  *r = t;
  im->have_pend = true;
  im->read++;
  return rc;
}

/* The end of a file: its last transition ends the piece. */
static int end_file(importer *im) {
  int rc = 0;
  if (im->have_pend) rc = append_row(im, &im->pend, true);
  im->have_pend = false;
  return rc;
}

/* ---- checks shared by both formats ----------------------------------------------------- */

/* Checks the values of r against the env; fills msg on failure. */
static bool check_record(importer *im, const record *r, char *msg, size_t cap) {
  const env_spec *sp = im->spec;
  bool u8 = im->lim.spec.obs_dtype == STORE_SEG_U8;
  for (int pass = 0; pass < 2; pass++) {
    const float *o = pass ? r->next_obs : r->obs;
    const char *name = pass ? "next_obs" : "obs";
    if (pass && !r->has_next) break;
    for (size_t i = 0; i < im->obs_n; i++) {
      if (!isfinite(o[i])) {
        snprintf(msg, cap, "%s[%zu] is %g", name, i, (double)o[i]);
        return false;
      }
      if (u8 && (o[i] < 0 || o[i] > 255 || o[i] != floorf(o[i]))) {
        snprintf(msg, cap, "%s[%zu] = %g: %s observations are integers 0..255", name, i,
                 (double)o[i], sp->id);
        return false;
      }
    }
  }
  if (!isfinite(r->reward)) {
    snprintf(msg, cap, "reward is %g", (double)r->reward);
    return false;
  }
  if (sp->act.n > 0) {
    if (r->action_i < 0 || r->action_i >= sp->act.n) {
      snprintf(msg, cap, "action %d outside [0, %d) of %s", r->action_i, sp->act.n, sp->id);
      return false;
    }
  } else {
    for (size_t i = 0; i < im->act_n; i++) {
      float a = r->action_f[i];
      if (!isfinite(a) || (sp->act.low && a < sp->act.low[i]) ||
          (sp->act.high && a > sp->act.high[i])) {
        snprintf(msg, cap, "action[%zu] = %g outside [%g, %g] of %s", i, (double)a,
                 sp->act.low ? (double)sp->act.low[i] : -INFINITY,
                 sp->act.high ? (double)sp->act.high[i] : INFINITY, sp->id);
        return false;
      }
    }
  }
  if (!r->has_next && !r->terminated) {
    snprintf(msg, cap, "next_obs is missing (needed unless terminated)");
    return false;
  }
  if (r->has_prio && (!isfinite(r->prio) || r->prio < 0)) {
    snprintf(msg, cap, "priority %g (a finite number >= 0 needed)", (double)r->prio);
    return false;
  }
  if (im->prio_mode < 0) im->prio_mode = r->has_prio;
  if (im->prio_mode != (int)r->has_prio) {
    snprintf(msg, cap, "priority %s here but %s on the first record (on every record or on none)",
             r->has_prio ? "given" : "missing", im->prio_mode ? "given" : "missing");
    return false;
  }
  return true;
}

/* ---- JSON Lines ------------------------------------------------------------------------- */

typedef struct jp {
  const char *p, *start;
  char msg[240];
} jp;

static void ws(jp *j) {
  while (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n') j->p++;
}

static bool jfail(jp *j, const char *what) {
  if (!j->msg[0])
    snprintf(j->msg, sizeof j->msg, "%s at column %ld", what, (long)(j->p - j->start) + 1);
  return false;
}

/* A number, or Python's NaN / Infinity / -Infinity (so they are reported as such). */
static bool jnum(jp *j, double *out) {
  ws(j);
  const char *s = j->p;
  if (!strncmp(s, "NaN", 3)) {
    *out = NAN;
    j->p += 3;
    return true;
  }
  if (!strncmp(s, "Infinity", 8) || !strncmp(s, "-Infinity", 9)) {
    *out = s[0] == '-' ? -INFINITY : INFINITY;
    j->p += s[0] == '-' ? 9 : 8;
    return true;
  }
  if (!(*s == '-' || (*s >= '0' && *s <= '9'))) return jfail(j, "a number expected");
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s) return jfail(j, "a number expected");
  *out = v;
  j->p = end;
  return true;
}

static bool jstr(jp *j, char *out, size_t cap) {
  ws(j);
  if (*j->p != '"') return jfail(j, "a string expected");
  j->p++;
  size_t o = 0;
  while (*j->p && *j->p != '"') {
    char c = *j->p++;
    if (c == '\\') {
      if (!*j->p) break;
      c = *j->p++;
      if (c == 'u') {
        for (int i = 0; i < 4 && *j->p; i++) j->p++;
        c = '?';
      }
    }
    if (out && o + 1 < cap) out[o++] = c;
  }
  if (*j->p != '"') return jfail(j, "an unterminated string");
  j->p++;
  if (out && cap) out[o] = 0;
  return true;
}

static bool jskip(jp *j, int depth) {
  ws(j);
  if (depth > 64) return jfail(j, "nesting too deep");
  char c = *j->p;
  if (c == '"') return jstr(j, NULL, 0);
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    j->p++;
    ws(j);
    if (*j->p == close) {
      j->p++;
      return true;
    }
    for (;;) {
      if (c == '{') {
        if (!jstr(j, NULL, 0)) return false;
        ws(j);
        if (*j->p != ':') return jfail(j, "':' expected");
        j->p++;
      }
      if (!jskip(j, depth + 1)) return false;
      ws(j);
      if (*j->p == ',') {
        j->p++;
        continue;
      }
      if (*j->p == close) {
        j->p++;
        return true;
      }
      return jfail(j, "',' or a closing bracket expected");
    }
  }
  if (!strncmp(j->p, "true", 4) || !strncmp(j->p, "null", 4)) {
    j->p += 4;
    return true;
  }
  if (!strncmp(j->p, "false", 5)) {
    j->p += 5;
    return true;
  }
  double v;
  return jnum(j, &v);
}

/* A number or a (nested, rectangular) array of numbers, flattened into out (cap
 * elements); *n the count, dims/ndim the nesting (ndim 0 for a bare number). The caller
 * zeroes dims and sets *ndim to -1: each level's length is recorded by its first array
 * and every number must sit at the same depth, so [[1,2],[3,4]] is 2x2 and [1,[2]] or
 * [[1],[2,3]] is ragged. */
static bool jarray(jp *j, float *out, size_t cap, size_t *n, int *dims, int *ndim, int depth) {
  ws(j);
  if (*j->p != '[') {
    double v;
    if (!jnum(j, &v)) return false;
    if (*n >= cap) return jfail(j, "too many numbers");
    /* Beyond float's range: keep the sign as an infinity so the check reports it. */
    out[(*n)++] = (float)(isfinite(v) && fabs(v) > FLT_MAX ? copysign(INFINITY, v) : v);
    if (*ndim < 0) *ndim = depth;
    if (*ndim != depth) return jfail(j, "a ragged array (numbers at different depths)");
    return true;
  }
  if (depth >= ENV_MAX_DIMS) return jfail(j, "arrays nested too deep");
  j->p++;
  int count = 0;
  ws(j);
  if (*j->p == ']') return jfail(j, "an empty array");
  for (;;) {
    ws(j);
    if (*j->p == '[' && depth + 1 >= ENV_MAX_DIMS) return jfail(j, "arrays nested too deep");
    if (!jarray(j, out, cap, n, dims, ndim, depth + 1)) return false;
    count++;
    ws(j);
    if (*j->p == ',') {
      j->p++;
      continue;
    }
    if (*j->p == ']') {
      j->p++;
      break;
    }
    return jfail(j, "',' or ']' expected in an array");
  }
  if (!dims[depth])
    dims[depth] = count;
  else if (dims[depth] != count)
    return jfail(j, "a ragged array (rows of different lengths)");
  return true;
}

static bool jbool(jp *j, bool *out) {
  ws(j);
  if (!strncmp(j->p, "true", 4)) {
    *out = true;
    j->p += 4;
    return true;
  }
  if (!strncmp(j->p, "false", 5)) {
    *out = false;
    j->p += 5;
    return true;
  }
  double v;
  if (!jnum(j, &v)) return false;
  if (v != 0 && v != 1) return jfail(j, "true, false, 0 or 1 expected");
  *out = v == 1;
  return true;
}

/* An observation value of key into out: the env's shape, nested or flat. */
static bool jobs(importer *im, jp *j, const char *key, float *out) {
  size_t n = 0;
  int dims[ENV_MAX_DIMS] = {0}, ndim = -1;
  if (!jarray(j, out, im->obs_n, &n, dims, &ndim, 0)) {
    if (!strncmp(j->msg, "too many", 8))
      snprintf(j->msg, sizeof j->msg, "%s has more numbers than a %s observation (%zu)", key,
               im->spec->id, im->obs_n);
    return false;
  }
  const env_space *o = &im->spec->obs;
  bool flat = ndim == 1 && n == im->obs_n;
  bool nested = ndim == o->ndim;
  for (int d = 0; nested && d < ndim; d++) nested = dims[d] == o->shape[d];
  if (!flat && !nested) {
    char want[64] = "";
    for (int d = 0; d < o->ndim; d++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", d ? "x" : "", o->shape[d]);
    snprintf(j->msg, sizeof j->msg, "%s has %zu numbers in %d dims; %s observations are %s", key, n,
             ndim, im->spec->id, want);
    return false;
  }
  return true;
}

/* Parses one line into r. false with j->msg set for a bad line. */
static bool parse_line(importer *im, jp *j, record *r) {
  bool have_obs = false, have_act = false, have_rew = false;
  r->has_next = r->terminated = r->truncated = r->has_prio = false;
  ws(j);
  if (*j->p != '{') return jfail(j, "a JSON object expected");
  j->p++;
  ws(j);
  if (*j->p == '}') return jfail(j, "an empty object");
  for (;;) {
    char key[32];
    if (!jstr(j, key, sizeof key)) return false;
    ws(j);
    if (*j->p != ':') return jfail(j, "':' expected");
    j->p++;
    bool ok = true;
    if (!strcmp(key, "obs")) {
      ok = jobs(im, j, "obs", r->obs);
      have_obs = true;
    } else if (!strcmp(key, "next_obs")) {
      ws(j);
      if (!strncmp(j->p, "null", 4)) {
        j->p += 4;
      } else {
        ok = jobs(im, j, "next_obs", r->next_obs);
        r->has_next = true;
      }
    } else if (!strcmp(key, "action")) {
      have_act = true;
      if (im->spec->act.n > 0) {
        double v;
        ok = jnum(j, &v);
        if (ok && (v != floor(v) || fabs(v) > 2e9)) {
          snprintf(j->msg, sizeof j->msg, "action %g is not an integer (%s has discrete actions)",
                   v, im->spec->id);
          ok = false;
        }
        if (ok) r->action_i = (int32_t)v;
      } else {
        size_t n = 0;
        int dims[ENV_MAX_DIMS] = {0}, nd = -1;
        ok = jarray(j, r->action_f, im->act_n, &n, dims, &nd, 0);
        if (ok && n != im->act_n) {
          snprintf(j->msg, sizeof j->msg, "action has %zu numbers, %s actions have %zu", n,
                   im->spec->id, im->act_n);
          ok = false;
        }
      }
    } else if (!strcmp(key, "reward")) {
      double v;
      ok = jnum(j, &v);
      r->reward = (float)v;
      have_rew = true;
    } else if (!strcmp(key, "terminated") || !strcmp(key, "done")) {
      ok = jbool(j, &r->terminated);
    } else if (!strcmp(key, "truncated")) {
      ok = jbool(j, &r->truncated);
    } else if (!strcmp(key, "priority")) {
      double v;
      ok = jnum(j, &v);
      r->prio = (float)v;
      r->has_prio = true;
    } else {
      ok = jskip(j, 0); /* other keys (info, episode ids, ...) are ignored */
    }
    if (!ok) {
      if (!j->msg[0]) jfail(j, "a bad value");
      char tmp[160];
      snprintf(tmp, sizeof tmp, "%.150s", j->msg);
      snprintf(j->msg, sizeof j->msg, "'%.31s': %s", key, tmp);
      return false;
    }
    ws(j);
    if (*j->p == ',') {
      j->p++;
      continue;
    }
    if (*j->p == '}') {
      j->p++;
      break;
    }
    return jfail(j, "',' or '}' expected");
  }
  ws(j);
  if (*j->p) return jfail(j, "text after the object");
  const char *missing = !have_obs ? "obs" : !have_act ? "action" : !have_rew ? "reward" : NULL;
  if (missing) {
    snprintf(j->msg, sizeof j->msg, "'%s' is missing (obs, action and reward are required)",
             missing);
    return false;
  }
  return true;
}

bool import__jsonl_line(importer *im, const char *line, record *r, char *msg, size_t cap) {
  jp j = {line, line, ""};
  if (!parse_line(im, &j, r)) {
    snprintf(msg, cap, "%s", j.msg);
    return false;
  }
  return check_record(im, r, msg, cap);
}

static int import_jsonl(importer *im, const char *path) {
  FILE *fp = fopen(path, "r");
  if (!fp) {
    fprintf(stderr, "shoal import: cannot open %s: %s\n", path, strerror(errno));
    return SHOAL_EIO;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  uint64_t lineno = 0;
  int rc = 0;
  while (!rc && (len = getline(&line, &cap, fp)) >= 0) {
    lineno++;
    if ((size_t)len != strlen(line)) {
      bad_record(im, "line", lineno, "a NUL byte in the line");
      continue;
    }
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    const char *s = line;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) continue; /* blank lines are allowed */
    char msg[300];
    if (!import__jsonl_line(im, s, &im->cur, msg, sizeof msg))
      bad_record(im, "line", lineno, "%s", msg);
    else
      rc = take(im, &im->cur);
  }
  bool io_error = ferror(fp);
  free(line);
  fclose(fp);
  if (io_error) {
    fprintf(stderr, "shoal import: reading %s failed after line %" PRIu64 "\n", path, lineno);
    if (!rc) rc = SHOAL_EIO;
  }
  if (!rc) rc = end_file(im);
  return rc;
}

/* ---- .npy column folders --------------------------------------------------------------- */

/* The header is read from a prefix of the file: magic, version, length and at most
 * 1 MiB of header text (NumPy's own headers are far smaller). */
enum { NPY_HEADER_MAX = 1 << 20, NPY_PREFIX_MAX = 12 + NPY_HEADER_MAX };

static int npy_bad(npy *out, char *msg, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int npy_bad(npy *out, char *msg, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
  memset(out, 0, sizeof *out);
  return SHOAL_EFORMAT;
}

int import__npy_header(const unsigned char *buf, size_t len, uint64_t file_size, npy *out,
                       size_t *data_off, char *msg, size_t cap) {
  memset(out, 0, sizeof *out);
  if (len > file_size) len = (size_t)file_size;
  if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
    return npy_bad(out, msg, cap, "not a .npy file (%s)", len < 10 ? "too short" : "bad magic");
  size_t hl, at;
  if (buf[6] == 1) {
    hl = (size_t)buf[8] | (size_t)buf[9] << 8;
    at = 10;
  } else if (buf[6] == 2 || buf[6] == 3) {
    if (len < 12) return npy_bad(out, msg, cap, "truncated .npy header");
    hl = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    at = 12;
  } else {
    return npy_bad(out, msg, cap, ".npy format version %d is not supported (1-3 are)", buf[6]);
  }
  if (hl > NPY_HEADER_MAX || hl > len - at) return npy_bad(out, msg, cap, "truncated .npy header");
  /* A NUL-terminated copy, so the text searches below stay inside the header. */
  char *hdr = malloc(hl + 1);
  if (!hdr) return npy_bad(out, msg, cap, "out of memory for a %zu-byte header", hl);
  memcpy(hdr, buf + at, hl);
  hdr[hl] = 0;
  int rc = 0;
  /* {'descr': '<f4', 'fortran_order': False, 'shape': (N, 4), } */
  const char *d = strstr(hdr, "'descr'"), *fo = strstr(hdr, "'fortran_order'"),
             *sh = strstr(hdr, "'shape'");
  if (!d || !fo || !sh) {
    rc = npy_bad(out, msg, cap, "the .npy header lacks descr, fortran_order or shape");
    goto done;
  }
  d = strchr(d + 7, '\'');
  if (!d || strlen(d) < 5 || !strchr("<|=", d[1]) || !strchr("fiub", d[2]) || d[4] != '\'' ||
      (d[3] != '1' && d[3] != '4' && d[3] != '8')) {
    rc = npy_bad(out, msg, cap, "dtype not supported (little-endian f4, f8, i4, i8, u1 or b1 are)");
    goto done;
  }
  out->kind = d[2];
  out->size = d[3] - '0';
  if ((out->kind == 'f' && out->size == 1) || (out->kind == 'b' && out->size != 1) ||
      (out->kind == 'u' && out->size != 1)) {
    rc = npy_bad(out, msg, cap, "dtype %.3s not supported", d + 1);
    goto done;
  }
  const char *fv = strchr(fo, ':');
  bool fortran = fv && !strncmp(fv + 1 + strspn(fv + 1, " "), "True", 4);
  const char *p = strchr(sh, '(');
  out->ndim = 0;
  out->per_row = 1;
  if (!p) {
    rc = npy_bad(out, msg, cap, "the .npy header's shape is not a tuple");
    goto done;
  }
  p++;
  while (*p && *p != ')') {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0 || out->ndim >= 8) {
      rc = npy_bad(out, msg, cap, "a bad shape in the .npy header");
      goto done;
    }
    out->shape[out->ndim++] = v;
    p = end;
  }
  if (out->ndim < 1) {
    rc = npy_bad(out, msg, cap, "a scalar; one row per transition expected");
    goto done;
  }
  if (fortran && out->ndim > 1) {
    rc = npy_bad(out, msg, cap, "Fortran order is not supported (np.ascontiguousarray)");
    goto done;
  }
  out->rows = out->shape[0];
  /* Every product checked: a header's shape must not wrap the byte count around. */
  bool over = false;
  for (int i = 1; i < out->ndim; i++)
    over |= __builtin_mul_overflow(out->per_row, (size_t)out->shape[i], &out->per_row);
  over |= __builtin_mul_overflow((size_t)out->rows, out->per_row, &out->bytes);
  over |= __builtin_mul_overflow(out->bytes, (size_t)out->size, &out->bytes);
  if (over) {
    rc = npy_bad(out, msg, cap, "a shape of more bytes than any file holds");
    goto done;
  }
  uint64_t left = file_size - (at + hl);
  if (left < out->bytes) {
    rc = npy_bad(out, msg, cap, "truncated: %llu data bytes, shape needs %zu",
                 (unsigned long long)left, out->bytes);
    goto done;
  }
  *data_off = at + hl;
done:
  free(hdr);
  return rc;
}

static int npy_load(const char *dir, const char *name, npy *out, bool required) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  memset(out, 0, sizeof *out);
  FILE *fp = fopen(path, "rb");
  if (!fp) {
    if (!required && errno == ENOENT) return 0;
    fprintf(stderr, "shoal import: %s: %s\n", path, strerror(errno));
    return SHOAL_ENOENT;
  }
  struct stat sb;
  unsigned char *head = NULL;
  size_t off = 0, got = 0;
  char msg[300];
  int rc = fstat(fileno(fp), &sb) != 0 ? SHOAL_EIO : 0;
  if (rc) {
    fprintf(stderr, "shoal import: %s: %s\n", path, strerror(errno));
    goto done;
  }
  size_t want = (uint64_t)sb.st_size < NPY_PREFIX_MAX ? (size_t)sb.st_size : NPY_PREFIX_MAX;
  head = malloc(want ? want : 1);
  if (head) got = fread(head, 1, want, fp);
  rc = head ? import__npy_header(head, got, (uint64_t)sb.st_size, out, &off, msg, sizeof msg)
            : SHOAL_ENOMEM;
  if (rc) {
    fprintf(stderr, "shoal import: %s: %s\n", path, head ? msg : "out of memory");
    goto done;
  }
  out->data = malloc(out->bytes ? out->bytes : 1);
  if (!out->data || fseek(fp, (long)off, SEEK_SET) != 0 ||
      fread(out->data, 1, out->bytes, fp) != out->bytes) {
    fprintf(stderr, "shoal import: %s: cannot read %zu bytes\n", path, out->bytes);
    rc = SHOAL_EIO;
    goto done;
  }
  out->present = true;
done:
  free(head);
  fclose(fp);
  if (rc) {
    free(out->data);
    out->data = NULL;
  }
  return rc;
}

/* Element e of row i as a double. */
static double npy_get(const npy *a, int64_t i, size_t e) {
  const unsigned char *p = a->data + ((size_t)i * a->per_row + e) * (size_t)a->size;
  switch (a->kind) {
    case 'f':
      if (a->size == 4) {
        float v;
        memcpy(&v, p, 4);
        return v;
      } else {
        double v;
        memcpy(&v, p, 8);
        return v;
      }
    case 'i':
      if (a->size == 4) {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
      } else if (a->size == 8) {
        int64_t v;
        memcpy(&v, p, 8);
        return (double)v;
      }
      return (double)(int8_t)p[0];
    default: return p[0];
  }
}

static int import_npy(importer *im, const char *dir) {
  static const char *names[] = {"obs",       "action",   "reward",  "terminated",
                                "truncated", "next_obs", "priority"};
  npy c[7];
  int rc = 0;
  memset(c, 0, sizeof c);
  for (int i = 0; i < 7 && !rc; i++) rc = npy_load(dir, names[i], &c[i], i < 3);
  int64_t N = c[0].rows;
  for (int i = 0; i < 7 && !rc; i++) {
    if (!c[i].present) continue;
    if (c[i].rows != N) {
      fprintf(stderr, "shoal import: %s/%s.npy has %lld rows, obs.npy has %lld\n", dir, names[i],
              (long long)c[i].rows, (long long)N);
      rc = SHOAL_ESHAPE;
    }
  }
  size_t want[7] = {im->obs_n, im->spec->act.n > 0 ? 1 : im->act_n, 1, 1, 1, im->obs_n, 1};
  for (int i = 0; i < 7 && !rc; i++) {
    if (c[i].present && c[i].per_row != want[i]) {
      fprintf(stderr, "shoal import: %s/%s.npy has %zu elements per row; %s needs %zu\n", dir,
              names[i], c[i].per_row, im->spec->id, want[i]);
      rc = SHOAL_ESHAPE;
    }
  }
  if (!rc && !c[5].present && !c[3].present) {
    fprintf(stderr,
            "shoal import: %s: next_obs.npy is missing (needed unless every row terminated)\n",
            dir);
    rc = SHOAL_ENOENT;
  }
  char msg[300];
  for (int64_t i = 0; !rc && i < N; i++) {
    record *r = &im->cur;
    for (size_t e = 0; e < im->obs_n; e++) r->obs[e] = (float)npy_get(&c[0], i, e);
    r->has_next = c[5].present;
    for (size_t e = 0; r->has_next && e < im->obs_n; e++)
      r->next_obs[e] = (float)npy_get(&c[5], i, e);
    bool int_ok = true;
    if (im->spec->act.n > 0) {
      double v = npy_get(&c[1], i, 0);
      int_ok = v == floor(v) && fabs(v) < 2e9;
      r->action_i = int_ok ? (int32_t)v : -1;
    } else {
      for (size_t e = 0; e < im->act_n; e++) r->action_f[e] = (float)npy_get(&c[1], i, e);
    }
    r->reward = (float)npy_get(&c[2], i, 0);
    double t = c[3].present ? npy_get(&c[3], i, 0) : 0, u = c[4].present ? npy_get(&c[4], i, 0) : 0;
    r->terminated = t != 0;
    r->truncated = u != 0;
    r->has_prio = c[6].present;
    r->prio = r->has_prio ? (float)npy_get(&c[6], i, 0) : 0;
    if (!int_ok)
      bad_record(im, "row", (uint64_t)i, "action %g is not an integer", npy_get(&c[1], i, 0));
    else if ((t != 0 && t != 1) || (u != 0 && u != 1))
      bad_record(im, "row", (uint64_t)i, "terminated/truncated must be 0 or 1 (got %g/%g)", t, u);
    else if (!check_record(im, r, msg, sizeof msg))
      bad_record(im, "row", (uint64_t)i, "%s", msg);
    else
      rc = take(im, r);
  }
  if (!rc) rc = end_file(im);
  for (int i = 0; i < 7; i++) free(c[i].data);
  return rc;
}

/* ---- the command ------------------------------------------------------------------------ */

static int usage(void) {
  cli_bad_usage("import");
  return 2;
}

/* The env of run: --env, else env.id of its stored config. */
static int run_env(store *st, const char *run, const char *env_arg, char *out, size_t cap,
                   bool *exists) {
  store_run r = {0};
  shoal_error err = {0};
  int rc = store_run_find(st, run, &r, &err);
  *exists = rc == 0;
  if (rc && rc != SHOAL_ENOENT) {
    fprintf(stderr, "shoal import: %s\n", err.msg);
    return 1;
  }
  char stored[128] = "";
  if (*exists && r.config && r.config[0]) {
    int nkeys;
    const cfg_key *keys = apex_schema(&nkeys);
    config *cfg = config_create(keys, nkeys, &err);
    if (cfg && config_load_string(cfg, r.config, run, &err) == 0)
      snprintf(stored, sizeof stored, "%s", config_string(cfg, "env.id"));
    config_destroy(cfg);
  }
  store_run_clear(&r);
  if (env_arg && stored[0] && strcmp(env_arg, stored)) {
    fprintf(stderr, "shoal import: run '%s' is for %s, not %s\n", run, stored, env_arg);
    return 1;
  }
  if (!env_arg && !stored[0]) {
    fprintf(stderr,
            *exists ? "shoal import: run '%s' names no env in its config: give --env ID\n"
                    : "shoal import: there is no run '%s' yet: give --env ID to create it\n",
            run);
    return 1;
  }
  snprintf(out, cap, "%s", env_arg ? env_arg : stored);
  return 0;
}

int cmd_import(int argc, char **argv) {
  const char *files[256], *run = NULL, *env_arg = NULL, *uri = NULL, *source = "import";
  int nfiles = 0;
  long seg_rows = 4096;
  bool quiet = false;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--run") && i + 1 < argc)
      run = argv[++i];
    else if (!strcmp(argv[i], "--env") && i + 1 < argc)
      env_arg = argv[++i];
    else if (!strcmp(argv[i], "--store") && i + 1 < argc)
      uri = argv[++i];
    else if (!strcmp(argv[i], "--source") && i + 1 < argc)
      source = argv[++i];
    else if (!strcmp(argv[i], "--segment-rows") && i + 1 < argc)
      seg_rows = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--quiet"))
      quiet = true;
    else if (argv[i][0] != '-' && nfiles < 256)
      files[nfiles++] = argv[i];
    else {
      cli_bad_arg("import", argc, argv, i);
      return usage();
    }
  }
  if (!nfiles || !run) return usage();
  if (!store_name_valid(run) || !store_name_valid(source)) {
    fprintf(stderr, "shoal import: '%s' is not a valid name (1-63 of [A-Za-z0-9._-])\n",
            store_name_valid(run) ? source : run);
    return 2;
  }
  if (seg_rows < 1 || seg_rows > 1 << 20) {
    fprintf(stderr, "shoal import: --segment-rows must be 1..1048576\n");
    return 2;
  }
  shoal_error err = {0};
  store *st = NULL;
  if (store_open(&st, uri ? uri : "file://runs", &err)) {
    fprintf(stderr, "shoal import: store: %s\n", cli_unprefix(err.msg, "store"));
    return 1;
  }
  char env_id[128];
  bool exists;
  if (run_env(st, run, env_arg, env_id, sizeof env_id, &exists)) {
    store_close(st);
    return 1;
  }
  env *e = NULL;
  if (env_make(&e, env_id, &err)) {
    fprintf(stderr, "shoal import: env: %s\n", err.msg);
    store_close(st);
    return 1;
  }
  importer im = {0};
  im.st = st;
  im.run = run;
  im.spec = env_get_spec(e);
  im.quiet = quiet;
  im.prio_mode = -1;
  snprintf(im.source, sizeof im.source, "%s", source);
  int rc = run_segment_limits(im.spec, &im.lim, &err);
  if (rc) {
    fprintf(stderr, "shoal import: %s\n", err.msg);
    env_destroy(e);
    store_close(st);
    return 1;
  }
  im.obs_n = (size_t)im.spec->obs.size;
  im.act_n = (size_t)im.spec->act.size;
  im.ob = im.obs_n * store_segment_dtype_size(im.lim.spec.obs_dtype);
  im.ab = im.spec->act.n > 0 ? 4 : im.act_n * 4;
  /* Rows per segment: as asked, but within one segment's size limit. */
  size_t per_row = 2 * im.ob + im.ab + 4 + 2 + 4;
  size_t fit = (STORE_SEGMENT_MAX - STORE_SEG_HEADER - 64) / per_row;
  im.seg_rows = (uint32_t)((size_t)seg_rows < fit ? (size_t)seg_rows : fit);
  size_t R = im.seg_rows;
  im.s_obs = malloc(R * im.ob);
  im.s_fin = malloc(R * im.ob);
  im.s_act = malloc(R * im.ab);
  im.s_rew = malloc(R * 4);
  im.s_prio = malloc(R * 4);
  im.s_term = malloc(R);
  im.s_trunc = malloc(R);
  for (int i = 0; i < 2; i++) {
    record *r = i ? &im.pend : &im.cur;
    r->obs = malloc(im.obs_n * sizeof(float));
    r->next_obs = malloc(im.obs_n * sizeof(float));
    r->action_f = malloc((im.act_n ? im.act_n : 1) * sizeof(float));
  }
  if (!im.s_obs || !im.s_fin || !im.s_act || !im.s_rew || !im.s_prio || !im.s_term || !im.s_trunc ||
      !im.cur.obs || !im.cur.next_obs || !im.cur.action_f || !im.pend.obs || !im.pend.next_obs ||
      !im.pend.action_f) {
    fprintf(stderr, "shoal import: out of memory\n");
    return 1;
  }
  if (!exists) im.create_env = env_id;
  im.t0 = shoal_now_s();
  int failed_files = 0;
  for (int f = 0; f < nfiles && !im.store_rc; f++) {
    im.file = files[f];
    im.file_read = im.file_imported = im.file_bad = 0;
    uint64_t read0 = im.read;
    struct stat sb;
    if (stat(files[f], &sb) != 0) {
      fprintf(stderr, "shoal import: %s: %s\n", files[f], strerror(errno));
      failed_files++;
      continue;
    }
    rc = S_ISDIR(sb.st_mode) ? import_npy(&im, files[f]) : import_jsonl(&im, files[f]);
    if (!rc) rc = flush_segment(&im);
    if (rc && !im.store_rc) failed_files++;
    /* The last record of a file is in a segment only after the flush: count here. */
    if (!quiet)
      printf("shoal import: %s: %" PRIu64 " records, %" PRIu64 " bad (skipped)%s\n", files[f],
             im.read - read0 + im.file_bad, im.file_bad, rc ? ", file not fully read" : "");
  }
  double dt = shoal_now_s() - im.t0;
  if (!im.store_rc) flush_segment(&im);
  printf("shoal import: run '%s': %" PRIu64 " transitions imported in %" PRIu64 " segment%s", run,
         im.imported, im.segments, im.segments == 1 ? "" : "s");
  if (im.segments) printf(" (seq %" PRIu64 "..%" PRIu64 ")", im.first_seq, im.last_seq);
  printf(", %" PRIu64 " bad records skipped, %d files failed; %.2f s (%.0f transitions/s)\n",
         im.bad, failed_files, dt, dt > 0 ? (double)im.imported / dt : 0.0);
  int status = im.imported == 0 || im.store_rc ? 1 : 0;
  if (im.imported == 0) fprintf(stderr, "shoal import: nothing was imported\n");
  for (int i = 0; i < 2; i++) {
    record *r = i ? &im.pend : &im.cur;
    free(r->obs), free(r->next_obs), free(r->action_f);
  }
  free(im.s_obs), free(im.s_fin), free(im.s_act), free(im.s_rew), free(im.s_prio);
  free(im.s_term), free(im.s_trunc);
  store_segment_free(&im.seg);
  env_destroy(e);
  store_close(st);
  return status;
}
