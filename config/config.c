/* SPDX-License-Identifier: Apache-2.0 */
#define _POSIX_C_SOURCE 200809L
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef union cfg_value {
  int64_t i;
  double f;
  bool b;
  char *s;
} cfg_value;

typedef struct cfg_entry {
  const cfg_key *key;
  bool given; /* a file or --set gave it (or it has a default) */
  cfg_value v;
  char origin[192];
} cfg_entry;

struct config {
  const cfg_key *schema;
  int n;
  cfg_entry *e;
};

/* A parsed leaf waiting to be applied: files are applied only when every leaf is good. */
typedef struct cfg_pending {
  cfg_entry *entry;
  cfg_value v;
  char origin[192];
} cfg_pending;

static const char *type_name(cfg_type t) {
  switch (t) {
    case CFG_INT: return "an integer";
    case CFG_FLOAT: return "a number";
    case CFG_BOOL: return "true or false";
    case CFG_STRING: return "a string";
  }
  return "?";
}

static cfg_entry *find(const config *c, const char *name) {
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->e[i].key->name, name) == 0) return &c->e[i];
  return NULL;
}

/* Parses text as the key's type into *out (a string is strdup'ed). On error writes why. */
static int parse_value(const cfg_key *k, const char *text, cfg_value *out, char *why,
                       size_t whylen) {
  char *end = NULL;
  switch (k->type) {
    case CFG_INT: {
      /* Integers may be written as 100000, 1_000_000 or 1e6 (configs often do), but
       * the value must be integral. */
      char buf[64];
      size_t j = 0;
      for (const char *p = text; *p && j + 1 < sizeof buf; p++)
        if (*p != '_') buf[j++] = *p;
      buf[j] = 0;
      errno = 0;
      long long v = strtoll(buf, &end, 10);
      if (j == 0 || errno || *end) {
        errno = 0;
        double d = strtod(buf, &end);
        if (j == 0 || errno || *end || !isfinite(d) || d != floor(d) || fabs(d) > 9.0e15) {
          snprintf(why, whylen, "'%s' is not %s", text, type_name(k->type));
          return SHOAL_EINVAL;
        }
        v = (long long)d;
      }
      if (k->min <= k->max && ((double)v < k->min || (double)v > k->max)) {
        snprintf(why, whylen, "%lld is outside [%.17g, %.17g]", v, k->min, k->max);
        return SHOAL_ERANGE;
      }
      out->i = v;
      return 0;
    }
    case CFG_FLOAT: {
      errno = 0;
      double d = strtod(text, &end);
      if (!*text || errno || *end || !isfinite(d)) {
        snprintf(why, whylen, "'%s' is not %s", text, type_name(k->type));
        return SHOAL_EINVAL;
      }
      if (k->min <= k->max && (d < k->min || d > k->max)) {
        snprintf(why, whylen, "%.17g is outside [%.17g, %.17g]", d, k->min, k->max);
        return SHOAL_ERANGE;
      }
      out->f = d;
      return 0;
    }
    case CFG_BOOL: {
      static const char *yes[] = {"true", "True", "TRUE", "yes", "Yes", "on", "On", "1"};
      static const char *no[] = {"false", "False", "FALSE", "no", "No", "off", "Off", "0"};
      for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        if (strcmp(text, yes[i]) == 0) return out->b = true, 0;
        if (strcmp(text, no[i]) == 0) return out->b = false, 0;
      }
      snprintf(why, whylen, "'%s' is not %s", text, type_name(k->type));
      return SHOAL_EINVAL;
    }
    case CFG_STRING:
      out->s = strdup(text);
      if (!out->s) {
        snprintf(why, whylen, "out of memory");
        return SHOAL_ENOMEM;
      }
      return 0;
  }
  snprintf(why, whylen, "unknown type");
  return SHOAL_EINTERNAL;
}

static void free_value(const cfg_key *k, cfg_value *v) {
  if (k->type == CFG_STRING) {
    free(v->s);
    v->s = NULL;
  }
}

config *config_create(const cfg_key *schema, int n, shoal_error *err) {
  config *c = calloc(1, sizeof *c);
  if (!c || !(c->e = calloc(n > 0 ? (size_t)n : 1, sizeof *c->e))) {
    free(c);
    shoal_error_set(err, SHOAL_ENOMEM, "config: out of memory");
    return NULL;
  }
  c->schema = schema;
  c->n = n;
  for (int i = 0; i < n; i++) {
    cfg_entry *e = &c->e[i];
    e->key = &schema[i];
    for (int j = 0; j < i; j++) {
      if (strcmp(schema[j].name, schema[i].name) == 0) {
        shoal_error_set(err, SHOAL_EINVAL, "config: key '%s' is in the schema twice",
                        schema[i].name);
        config_destroy(c);
        return NULL;
      }
    }
    snprintf(e->origin, sizeof e->origin, "default");
    if (schema[i].def) {
      char why[256];
      if (parse_value(e->key, schema[i].def, &e->v, why, sizeof why)) {
        shoal_error_set(err, SHOAL_EINVAL, "config: default of '%s': %s", schema[i].name, why);
        config_destroy(c);
        return NULL;
      }
      e->given = true;
    }
  }
  return c;
}

void config_destroy(config *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) free_value(c->e[i].key, &c->e[i].v);
  free(c->e);
  free(c);
}

static void apply(cfg_entry *e, cfg_value *v, const char *origin) {
  free_value(e->key, &e->v);
  e->v = *v;
  if (e->key->type == CFG_STRING) v->s = NULL; /* ownership moved */
  e->given = true;
  snprintf(e->origin, sizeof e->origin, "%s", origin);
}

enum { MAX_DEPTH = 16, MAX_KEY = 256 };

/* Parses text as e's value into a new pending entry (applied when the whole file has
 * parsed). SHOAL_EINVAL naming the key when given twice or when the value does not parse. */
static int add_pending(cfg_entry *e, const char *s, const char *origin, size_t line,
                       cfg_pending **pendp, int *npendp, int *capp, shoal_error *err) {
  cfg_pending *pend = *pendp;
  int npend = *npendp, cappend = *capp;
  const char *key = e->key->name;
  for (int i = 0; i < npend; i++)
    if (pend[i].entry == e)
      return shoal_error_set(err, SHOAL_EINVAL, "config: %s:%zu: key '%s' given twice", origin,
                             line, key);
  if (npend == cappend) {
    int ncap = cappend ? 2 * cappend : 16;
    cfg_pending *np = realloc(pend, (size_t)ncap * sizeof *np);
    if (!np) return shoal_error_set(err, SHOAL_ENOMEM, "config: out of memory");
    *pendp = pend = np;
    *capp = ncap;
  }
  cfg_pending *p = &pend[npend];
  char why[256];
  int prc = parse_value(e->key, s, &p->v, why, sizeof why);
  if (prc)
    return shoal_error_set(err, prc, "config: %s:%zu: key '%s': %s (expected %s)", origin, line,
                           key, why, type_name(e->key->type));
  p->entry = e;
  snprintf(p->origin, sizeof p->origin, "%s:%zu", origin, line);
  *npendp = npend + 1;
  return 0;
}

int config_load_string(config *c, const char *text, const char *origin, shoal_error *err) {
  if (!origin) origin = "<string>";
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser))
    return shoal_error_set(err, SHOAL_ENOMEM, "config: %s: cannot start the YAML parser", origin);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, strlen(text));

  int rc = 0;
  cfg_pending *pend = NULL;
  int npend = 0, cappend = 0;
  /* The path of mapping keys down to the current mapping, and whether the mapping at
   * each depth expects a key (true) or a value (false) next. */
  char path[MAX_DEPTH][MAX_KEY];
  bool want_key[MAX_DEPTH + 1];
  int depth = -1; /* -1: outside the top-level mapping */
  bool done = false;
  /* A mapping under a map key (cfg_key.map) is gathered as "k=v,k=v" into mtext, and
   * goes in as that key's text when it ends. */
  cfg_entry *ment = NULL;
  char mtext[1024], mkey[MAX_KEY];
  size_t mlen = 0, mline = 0;
  bool mwant_key = true;
  /* A sequence under a list key (cfg_key.list) is gathered as its flow text into ltext,
   * two levels deep at most, and goes in as that key's text when it ends. */
  cfg_entry *lent = NULL;
  char ltext[1024];
  size_t llen = 0, lline = 0;
  int ldepth = 0;

  while (!done) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&parser, &ev)) {
      rc = shoal_error_set(err, SHOAL_EFORMAT, "config: %s:%zu: YAML syntax error: %s", origin,
                           parser.problem_mark.line + 1,
                           parser.problem ? parser.problem : "unknown");
      break;
    }
    size_t line = ev.start_mark.line + 1;
    if (lent) {
      const char *s = ev.type == YAML_SCALAR_EVENT ? (const char *)ev.data.scalar.value : NULL;
      const char *piece = NULL;
      if (ev.type == YAML_SEQUENCE_START_EVENT && ldepth < 2)
        piece = "[", ldepth++;
      else if (ev.type == YAML_SEQUENCE_END_EVENT)
        piece = "]", ldepth--;
      else if (s && !strpbrk(s, ",[]"))
        piece = s;
      if (!piece) {
        rc = shoal_error_set(err, SHOAL_EINVAL,
                             "config: %s:%zu: key '%s': its list takes scalars or lists of "
                             "scalars (without ',', '[' or ']')",
                             origin, line, lent->key->name);
      } else {
        if (*piece == ']' && llen > 0 && ltext[llen - 1] == ',') llen--; /* the last comma */
        /* items and closed inner lists are followed by a comma; "[" is not */
        int w = snprintf(ltext + llen, sizeof ltext - llen, "%s%s", piece,
                         *piece != '[' && ldepth > 0 ? "," : "");
        if (w < 0 || (size_t)w >= sizeof ltext - llen)
          rc = shoal_error_set(err, SHOAL_EINVAL,
                               "config: %s:%zu: key '%s': the list is too long (1023 bytes of "
                               "text)",
                               origin, line, lent->key->name);
        else
          llen += (size_t)w;
        if (!rc && ldepth == 0) {
          rc = add_pending(lent, ltext, origin, lline, &pend, &npend, &cappend, err);
          lent = NULL;
        }
      }
      yaml_event_delete(&ev);
      if (rc) break;
      continue;
    }
    if (ment) {
      const char *s = ev.type == YAML_SCALAR_EVENT ? (const char *)ev.data.scalar.value : NULL;
      if (ev.type == YAML_MAPPING_END_EVENT) {
        while (mlen > 0 && mtext[mlen - 1] == ',') mtext[--mlen] = 0;
        rc = add_pending(ment, mtext, origin, mline, &pend, &npend, &cappend, err);
        ment = NULL;
      } else if (!s) {
        rc = shoal_error_set(err, SHOAL_EINVAL,
                             "config: %s:%zu: key '%s': its mapping takes scalars only", origin,
                             line, ment->key->name);
      } else if (mwant_key) {
        snprintf(mkey, sizeof mkey, "%s", s);
        mwant_key = false;
      } else {
        mwant_key = true;
        int w = strpbrk(s, ",=") || strpbrk(mkey, ",=")
                    ? -1
                    : snprintf(mtext + mlen, sizeof mtext - mlen, "%s=%s,", mkey, s);
        if (w < 0 || (size_t)w >= sizeof mtext - mlen)
          rc = shoal_error_set(err, SHOAL_EINVAL, "config: %s:%zu: key '%s.%s': %s", origin, line,
                               ment->key->name, mkey,
                               w < 0 ? "a key or value with ',' or '=' cannot be passed on"
                                     : "the mapping is too long (1023 bytes of k=v,...)");
        else
          mlen += (size_t)w;
      }
      yaml_event_delete(&ev);
      if (rc) break;
      continue;
    }
    switch (ev.type) {
      case YAML_STREAM_END_EVENT: done = true; break;
      case YAML_MAPPING_START_EVENT:
        if (depth >= 0 && !want_key[depth] && (ment = find(c, path[depth])) && ment->key->map) {
          want_key[depth] = true; /* the mapping is the key's whole value */
          mlen = 0, mtext[0] = 0, mwant_key = true, mline = line;
          break;
        }
        ment = NULL;
        if (depth >= 0 && want_key[depth]) {
          rc = shoal_error_set(err, SHOAL_EFORMAT, "config: %s:%zu: a mapping cannot be a key",
                               origin, line);
        } else if (depth + 1 >= MAX_DEPTH) {
          rc = shoal_error_set(err, SHOAL_EFORMAT, "config: %s:%zu: nested too deeply", origin,
                               line);
        } else {
          if (depth >= 0) want_key[depth] = true; /* this mapping is that key's value */
          depth++;
          want_key[depth] = true;
        }
        break;
      case YAML_MAPPING_END_EVENT: depth--; break;
      case YAML_SEQUENCE_START_EVENT:
        if (depth >= 0 && !want_key[depth] && (lent = find(c, path[depth])) && lent->key->list) {
          want_key[depth] = true; /* the sequence is the key's whole value */
          snprintf(ltext, sizeof ltext, "[");
          llen = 1, ldepth = 1, lline = line;
          break;
        }
        lent = NULL;
        rc = shoal_error_set(err, SHOAL_EINVAL, "config: %s:%zu: key '%s': lists are not allowed",
                             origin, line, depth >= 0 ? path[depth] : "");
        break;
      case YAML_ALIAS_EVENT:
        rc = shoal_error_set(err, SHOAL_EINVAL, "config: %s:%zu: aliases are not allowed", origin,
                             line);
        break;
      case YAML_SCALAR_EVENT: {
        const char *s = (const char *)ev.data.scalar.value;
        if (depth < 0) {
          rc = shoal_error_set(err, SHOAL_EFORMAT,
                               "config: %s:%zu: expected a mapping of keys, found '%s'", origin,
                               line, s);
        } else if (want_key[depth]) {
          const char *parent = depth > 0 ? path[depth - 1] : "";
          int w = snprintf(path[depth], MAX_KEY, "%s%s%s", parent, depth > 0 ? "." : "", s);
          if (w < 0 || w >= MAX_KEY)
            rc = shoal_error_set(err, SHOAL_EINVAL, "config: %s:%zu: key too long", origin, line);
          want_key[depth] = false;
        } else {
          want_key[depth] = true;
          const char *key = path[depth];
          cfg_entry *e = find(c, key);
          if (!e) {
            rc = shoal_error_set(err, SHOAL_EINVAL, "config: %s:%zu: unknown key '%s'", origin,
                                 line, key);
            break;
          }
          rc = add_pending(e, s, origin, line, &pend, &npend, &cappend, err);
        }
        break;
      }
      default: break;
    }
    yaml_event_delete(&ev);
    if (rc) break;
  }
  yaml_parser_delete(&parser);

  for (int i = 0; i < npend; i++) {
    if (!rc)
      apply(pend[i].entry, &pend[i].v, pend[i].origin);
    else
      free_value(pend[i].entry->key, &pend[i].v);
  }
  free(pend);
  return rc;
}

int config_load_file(config *c, const char *path, shoal_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return shoal_error_set(err, SHOAL_ENOENT, "config: cannot open '%s': %s", path,
                           strerror(errno));
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int rc = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? 2 * cap : 8192;
      if (cap > (64u << 20)) {
        rc = shoal_error_set(err, SHOAL_EINVAL, "config: '%s' is larger than 64 MiB", path);
        break;
      }
      char *nb = realloc(buf, cap);
      if (!nb) {
        rc = shoal_error_set(err, SHOAL_ENOMEM, "config: out of memory reading '%s'", path);
        break;
      }
      buf = nb;
    }
    size_t got = fread(buf + len, 1, cap - len - 1, f);
    len += got;
    if (got == 0) {
      if (ferror(f)) rc = shoal_error_set(err, SHOAL_EIO, "config: error reading '%s'", path);
      break;
    }
  }
  fclose(f);
  if (!rc) {
    buf[len] = 0;
    if (strlen(buf) != len)
      rc = shoal_error_set(err, SHOAL_EFORMAT, "config: '%s' contains a NUL byte", path);
    else
      rc = config_load_string(c, buf, path, err);
  }
  free(buf);
  return rc;
}

int config_set_from_env(config *c, const char *key, const char *var, shoal_error *err) {
  const char *val = getenv(var);
  if (!val || !val[0]) return 0;
  cfg_entry *e = find(c, key);
  if (!e) return shoal_error_set(err, SHOAL_EINVAL, "config: $%s: unknown key '%s'", var, key);
  cfg_value v;
  char why[256];
  int rc = parse_value(e->key, val, &v, why, sizeof why);
  if (rc)
    return shoal_error_set(err, rc, "config: $%s for key '%s': %s (expected %s)", var, key, why,
                           type_name(e->key->type));
  char origin[64]; /* names the variable, never its value */
  snprintf(origin, sizeof origin, "$%s", var);
  apply(e, &v, origin);
  return 0;
}

int config_set(config *c, const char *assignment, shoal_error *err) {
  const char *eq = strchr(assignment, '=');
  if (!eq || eq == assignment)
    return shoal_error_set(err, SHOAL_EINVAL, "config: --set '%s': expected key=value", assignment);
  char key[MAX_KEY];
  size_t kl = (size_t)(eq - assignment);
  if (kl >= sizeof key) return shoal_error_set(err, SHOAL_EINVAL, "config: --set: key too long");
  memcpy(key, assignment, kl);
  key[kl] = 0;
  cfg_entry *e = find(c, key);
  if (!e) return shoal_error_set(err, SHOAL_EINVAL, "config: --set: unknown key '%s'", key);
  /* Parse the value as YAML would, so quoting works the same as in a file. */
  const char *val = eq + 1;
  char *unq = NULL;
  size_t vl = strlen(val);
  if (vl >= 2 && (val[0] == '"' || val[0] == '\'') && val[vl - 1] == val[0]) {
    unq = strndup(val + 1, vl - 2);
    if (!unq) return shoal_error_set(err, SHOAL_ENOMEM, "config: out of memory");
    val = unq;
  }
  cfg_value v;
  char why[256];
  int rc = parse_value(e->key, val, &v, why, sizeof why);
  if (rc)
    shoal_error_set(err, rc, "config: --set key '%s': %s (expected %s)", key, why,
                    type_name(e->key->type));
  else
    apply(e, &v, "--set");
  free(unq);
  return rc;
}

int config_check_choice(const config *c, const char *key, const char *const *choices, int n,
                        shoal_error *err) {
  const char *v = config_string(c, key);
  for (int i = 0; i < n; i++)
    if (!strcmp(v, choices[i])) return 0;
  char list[256] = "";
  for (int i = 0; i < n; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", choices[i]);
  return shoal_error_set(err, SHOAL_EINVAL, "config: key '%s' (from %s): '%s' is not one of: %s",
                         key, config_origin(c, key), v, list);
}

int config_check(const config *c, shoal_error *err) {
  for (int i = 0; i < c->n; i++)
    if (!c->e[i].given)
      return shoal_error_set(err, SHOAL_EINVAL, "config: required key '%s' is not set (%s)",
                             c->e[i].key->name, c->e[i].key->help ? c->e[i].key->help : "");
  return 0;
}

static const cfg_entry *get(const config *c, const char *key, cfg_type t) {
  const cfg_entry *e = find(c, key);
  if (!e || e->key->type != t) {
    fprintf(stderr, "config: key '%s' read as %s: %s\n", key, type_name(t),
            e ? "wrong type" : "not in the schema");
    SHOAL_ASSERT(!"config key read with the wrong name or type");
  }
  return e;
}

int64_t config_int(const config *c, const char *key) { return get(c, key, CFG_INT)->v.i; }
double config_float(const config *c, const char *key) { return get(c, key, CFG_FLOAT)->v.f; }
bool config_bool(const config *c, const char *key) { return get(c, key, CFG_BOOL)->v.b; }
const char *config_string(const config *c, const char *key) {
  const char *s = get(c, key, CFG_STRING)->v.s;
  return s ? s : "";
}
bool config_has(const config *c, const char *key) { return find(c, key) != NULL; }

/* A value as text, for a message. */
static void value_text(const cfg_entry *e, char *out, size_t cap) {
  switch (e->key->type) {
    case CFG_INT: snprintf(out, cap, "%lld", (long long)e->v.i); break;
    case CFG_FLOAT: shoal_fmt_double(e->v.f, out, cap); break;
    case CFG_BOOL: snprintf(out, cap, "%s", e->v.b ? "true" : "false"); break;
    default: snprintf(out, cap, "'%s'", e->v.s ? e->v.s : ""); break;
  }
}

int config_diff(const config *a, const config *b, const char *const *skip, int nskip, char *out,
                size_t cap) {
  int n = 0;
  size_t used = 0;
  if (cap) out[0] = 0;
  for (int i = 0; i < a->n; i++) {
    const cfg_entry *x = &a->e[i], *y = find(b, x->key->name);
    bool skipped = !y || y->key->type != x->key->type;
    for (int k = 0; k < nskip && !skipped; k++) skipped = !strcmp(skip[k], x->key->name);
    if (skipped) continue;
    bool same = x->key->type == CFG_INT     ? x->v.i == y->v.i
                : x->key->type == CFG_FLOAT ? x->v.f == y->v.f
                : x->key->type == CFG_BOOL  ? x->v.b == y->v.b
                                            : !strcmp(x->v.s ? x->v.s : "", y->v.s ? y->v.s : "");
    if (same) continue;
    char va[96], vb[96];
    value_text(x, va, sizeof va);
    value_text(y, vb, sizeof vb);
    int w = snprintf(out + used, used < cap ? cap - used : 0, "%s%s: %s -> %s", n ? "; " : "",
                     x->key->name, va, vb);
    if (w > 0 && used + (size_t)w < cap) used += (size_t)w;
    n++;
  }
  return n;
}
const char *config_origin(const config *c, const char *key) {
  const cfg_entry *e = find(c, key);
  return e ? e->origin : "unknown";
}

/* Dotted names compared segment by segment, so keys sharing a prefix sort together. */
static int cmp_names(const void *a, const void *b) {
  const char *x = (*(const cfg_entry *const *)a)->key->name;
  const char *y = (*(const cfg_entry *const *)b)->key->name;
  for (;; x++, y++) {
    int cx = *x == '.' ? 1 : (unsigned char)*x, cy = *y == '.' ? 1 : (unsigned char)*y;
    if (cx != cy || !cx) return cx - cy;
  }
}

typedef struct strbuf {
  char *p;
  size_t len, cap;
  int rc;
} strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
  if (b->rc) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (w < 0) {
      b->rc = SHOAL_EINTERNAL;
      return;
    }
    if ((size_t)w < b->cap - b->len) {
      b->len += (size_t)w;
      return;
    }
    size_t ncap = (b->cap + (size_t)w + 1) * 2;
    char *np = realloc(b->p, ncap);
    if (!np) {
      b->rc = SHOAL_ENOMEM;
      return;
    }
    b->p = np;
    b->cap = ncap;
  }
}

/* The code point of the UTF-8 sequence at p (n bytes), or -1 when it is not one. */
static long utf8_at(const unsigned char *p, int *n) {
  int len = p[0] < 0x80             ? 1
            : (p[0] & 0xe0) == 0xc0 ? 2
            : (p[0] & 0xf0) == 0xe0 ? 3
            : (p[0] & 0xf8) == 0xf0 ? 4
                                    : 0;
  if (!len) return -1;
  long cp = len == 1 ? p[0] : p[0] & (0x7f >> len);
  for (int i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80) return -1;
    cp = (cp << 6) | (p[i] & 0x3f);
  }
  *n = len;
  return cp;
}

/* A string as a YAML double-quoted scalar that reads back as the same bytes: quotes and
 * backslashes escaped, and every character YAML would refuse (control characters) or
 * fold (its line breaks NEL, LS, PS; tab and CR) written as an escape. Bytes that are not
 * UTF-8 cannot come from YAML or --set (libyaml checks), but are escaped all the same. */
static void dump_quoted(strbuf *b, const char *s) {
  sb_printf(b, "\"");
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    int n = 1;
    long cp = utf8_at(p, &n);
    if (cp < 0) {
      sb_printf(b, "\\x%02x", *p);
      n = 1;
    } else if (cp == '"' || cp == '\\') {
      sb_printf(b, "\\%c", (int)cp);
    } else if (cp == '\n') {
      sb_printf(b, "\\n");
    } else if (cp == '\t') {
      sb_printf(b, "\\t");
    } else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 ||
               cp == 0x2029 || cp == 0xfeff || cp == 0xfffe || cp == 0xffff ||
               (cp >= 0xd800 && cp <= 0xdfff)) {
      sb_printf(b, cp <= 0xff ? "\\x%02lx" : "\\u%04lx", cp);
    } else {
      sb_printf(b, "%.*s", n, (const char *)p);
    }
    p += n;
  }
  sb_printf(b, "\"\n");
}

static bool has_word(const char *s, const char *w) {
  size_t n = strlen(s), wl = strlen(w);
  for (size_t i = 0; i + wl <= n; i++) {
    size_t k = 0;
    while (k < wl && tolower((unsigned char)s[i + k]) == w[k]) k++;
    if (k == wl) return true;
  }
  return false;
}

bool config_key_is_secret(const char *key) {
  const char *seg = strrchr(key, '.');
  seg = seg ? seg + 1 : key;
  static const char *words[] = {"token", "password", "secret", "credential"};
  for (size_t w = 0; w < sizeof words / sizeof *words; w++)
    if (has_word(seg, words[w])) return true;
  return false;
}

/* s with the password of every "scheme://user:pass@" replaced by "***". *changed says
 * whether there was one; NULL on no memory (the caller then writes CONFIG_REDACTED). */
static char *redact_userinfo(const char *s, bool *changed) {
  *changed = false;
  size_t len = strlen(s);
  /* "***" may be longer than a 1- or 2-character password */
  char *out = malloc(len + 1 + 3 * (len / 3 + 1));
  if (!out) {
    *changed = true;
    return NULL;
  }
  size_t o = 0;
  const char *p = s;
  for (;;) {
    const char *sch = strstr(p, "://");
    if (!sch) break;
    const char *auth = sch + 3, *auth_end = auth + strcspn(auth, "/?# \t\n\"'");
    /* The user info ends at the last '@' of the authority (passwords may hold '@'). */
    const char *at = NULL;
    for (const char *q = auth; q < auth_end; q++)
      if (*q == '@') at = q;
    const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
    size_t keep = (size_t)((colon ? colon + 1 : auth) - p);
    memcpy(out + o, p, keep);
    o += keep;
    if (colon) {
      memcpy(out + o, "***", 3);
      o += 3;
      *changed = true;
      p = at;
    } else {
      p = auth;
    }
  }
  memcpy(out + o, p, strlen(p) + 1);
  return out;
}

static int dump(const config *c, char **yaml, bool redact, shoal_error *err);

int config_dump(const config *c, char **yaml, shoal_error *err) {
  return dump(c, yaml, false, err);
}

int config_dump_redacted(const config *c, char **yaml, shoal_error *err) {
  return dump(c, yaml, true, err);
}

static int dump(const config *c, char **yaml, bool redact, shoal_error *err) {
  const cfg_entry **order = malloc((c->n > 0 ? (size_t)c->n : 1) * sizeof *order);
  strbuf b = {malloc(1024), 0, 1024, 0};
  if (!order || !b.p) {
    free(order);
    free(b.p);
    return shoal_error_set(err, SHOAL_ENOMEM, "config: out of memory");
  }
  b.p[0] = 0;
  for (int i = 0; i < c->n; i++) order[i] = &c->e[i];
  qsort(order, (size_t)c->n, sizeof *order, cmp_names);
  const char *prev = "";
  for (int i = 0; i < c->n; i++) {
    const cfg_entry *e = order[i];
    const char *name = e->key->name;
    /* Segments shared with the previous key are already open; open the rest. */
    int shared = 0;
    size_t common = 0;
    for (size_t j = 0;; j++) {
      if (name[j] == '.' && prev[j] == '.') {
        shared++;
        common = j + 1;
      }
      if (!name[j] || name[j] != prev[j]) break;
    }
    int level = shared;
    const char *seg = name + common;
    for (const char *dot; (dot = strchr(seg, '.')); seg = dot + 1, level++)
      sb_printf(&b, "%*s%.*s:\n", 2 * level, "", (int)(dot - seg), seg);
    sb_printf(&b, "%*s%s: ", 2 * level, "", seg);
    if (!e->given) {
      sb_printf(&b, "null  # required, not set\n");
    } else {
      switch (e->key->type) {
        case CFG_INT: sb_printf(&b, "%lld\n", (long long)e->v.i); break;
        case CFG_FLOAT: {
          char num[32];
          sb_printf(&b, "%s\n", shoal_fmt_double(e->v.f, num, sizeof num));
          break;
        }
        case CFG_BOOL: sb_printf(&b, "%s\n", e->v.b ? "true" : "false"); break;
        case CFG_STRING: {
          const char *v = e->v.s ? e->v.s : "";
          char *r = NULL;
          bool changed = false;
          if (redact && v[0] && config_key_is_secret(name))
            v = CONFIG_REDACTED;
          else if (redact && (r = redact_userinfo(v, &changed), changed))
            v = r ? r : CONFIG_REDACTED;
          dump_quoted(&b, v);
          free(r);
          break;
        }
      }
    }
    prev = name;
  }
  free(order);
  if (b.rc) {
    free(b.p);
    return shoal_error_set(err, b.rc, "config: out of memory");
  }
  *yaml = b.p;
  return 0;
}

int config_restore_secrets(config *c, const char *where, shoal_error *err) {
  bool has_token = find(c, "learner.token") != NULL, has_uri = find(c, "store.uri") != NULL;
  /* $SHOAL_TOKEN, when set, is the token: it fills an empty or redacted one, and one
   * that says otherwise is an error (never a learner silently without the token the
   * person meant it to have). */
  const char *env_token = getenv("SHOAL_TOKEN");
  if (has_token && env_token && env_token[0]) {
    const char *t = config_string(c, "learner.token");
    if (t[0] && strcmp(t, CONFIG_REDACTED) && strcmp(t, env_token))
      return shoal_error_set(err, SHOAL_EINVAL,
                             "learner.token in %s and $SHOAL_TOKEN differ: give one of them",
                             where);
    if (config_set_from_env(c, "learner.token", "SHOAL_TOKEN", err)) return SHOAL_EINVAL;
  }
  if (has_uri && strstr(config_string(c, "store.uri"), ":***@") &&
      config_set_from_env(c, "store.uri", "SHOAL_STORE_URI", err))
    return SHOAL_EINVAL;
  if ((has_token && !strcmp(config_string(c, "learner.token"), CONFIG_REDACTED)) ||
      (has_uri && strstr(config_string(c, "store.uri"), ":***@")))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "learner.token or the store URI's password is redacted in %s: give "
                           "them with $SHOAL_TOKEN / $SHOAL_STORE_URI or --set "
                           "learner.token=TOKEN / --set store.uri=URI",
                           where);
  return 0;
}

int config_load_program(config *c, const char *path, const char *const *sets, int nsets,
                        shoal_error *err) {
  int rc = config_load_file(c, path, err);
  for (int i = 0; i < nsets && !rc; i++) rc = config_set(c, sets[i], err);
  return rc ? rc : config_restore_secrets(c, path, err);
}
