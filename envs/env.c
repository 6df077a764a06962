/* SPDX-License-Identifier: Apache-2.0 */
/* The registry of env kinds, action checking and the single env. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"

#define ENV_MAX_TYPES 256

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static const env_type *reg_types[ENV_MAX_TYPES];
static int reg_n;

/* Short names for the MinAtar -v1 games. */
static const struct {
  const char *alias, *id;
} aliases[] = {
    {"breakout", "MinAtar/Breakout-v1"},
    {"freeway", "MinAtar/Freeway-v1"},
    {"asterix", "MinAtar/Asterix-v1"},
    {"seaquest", "MinAtar/Seaquest-v1"},
    {"space_invaders", "MinAtar/SpaceInvaders-v1"},
};

static void reg_builtins(void) {
  static const env_type *const classic[] = {&env__cartpole,         &env__mountaincar,
                                            &env__mountaincar_cont, &env__acrobot,
                                            &env__pendulum,         &env__cartpole_novel};
  for (size_t i = 0; i < sizeof classic / sizeof classic[0]; i++) reg_types[reg_n++] = classic[i];
  for (int i = 0; i < env__minatar_ntypes; i++) reg_types[reg_n++] = env__minatar_types[i];
}

size_t env_space_bytes(const env_space *s) {
  size_t el = s->dtype == ENV_UINT8 ? 1 : 4;
  return el * (size_t)s->size;
}

static const env_type *find_locked(const char *id) {
  for (int i = 0; i < reg_n; i++)
    if (strcmp(reg_types[i]->spec.id, id) == 0) return reg_types[i];
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(aliases[i].alias, id) == 0) return find_locked(aliases[i].id);
  return NULL;
}

const env_type *env_find(const char *id) {
  if (!id) return NULL;
  if (strncmp(id, "plugin:", 7) == 0) {
    const env_type *t = NULL;
    return env__plugin_find(id, &t, NULL) ? NULL : t;
  }
  pthread_once(&reg_once, reg_builtins);
  pthread_mutex_lock(&reg_mu);
  const env_type *t = find_locked(id);
  pthread_mutex_unlock(&reg_mu);
  return t;
}

static int check_space(const env_space *s, const char *what, const char *id, shoal_error *err) {
  if (s->dtype != ENV_FLOAT32 && s->dtype != ENV_UINT8 && s->dtype != ENV_INT32)
    return shoal_error_set(err, SHOAL_EINVAL, "env_register: '%s': %s dtype %d unknown", id, what,
                           (int)s->dtype);
  if (s->n > 0) {
    if (s->dtype != ENV_INT32 || s->size != 1)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "env_register: '%s': a discrete %s space needs dtype ENV_INT32 and "
                             "size 1",
                             id, what);
    return 0;
  }
  if (s->ndim < 0 || s->ndim > ENV_MAX_DIMS)
    return shoal_error_set(err, SHOAL_EINVAL, "env_register: '%s': %s has %d dims (at most %d)", id,
                           what, s->ndim, ENV_MAX_DIMS);
  long size = 1;
  for (int i = 0; i < s->ndim; i++) {
    if (s->shape[i] < 1)
      return shoal_error_set(err, SHOAL_EINVAL, "env_register: '%s': %s shape[%d] = %d", id, what,
                             i, s->shape[i]);
    size *= s->shape[i];
  }
  if (size != s->size || size > (1 << 24))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "env_register: '%s': %s size %d does not match its shape (%ld)", id,
                           what, s->size, size);
  return 0;
}

int env_register(const env_type *t, shoal_error *err) {
  if (!t || !t->spec.id || !t->spec.id[0] || !t->reset || !t->step || t->state_size == 0)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "env_register: a type needs spec.id, state_size, reset and step");
  int rc = check_space(&t->spec.obs, "observation", t->spec.id, err);
  if (!rc) rc = check_space(&t->spec.act, "action", t->spec.id, err);
  if (rc) return rc;
  if (t->spec.obs.n > 0)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "env_register: '%s': observations must be a box (n = 0)", t->spec.id);
  if (t->spec.act.n == 0 && t->spec.act.dtype != ENV_FLOAT32)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "env_register: '%s': a box action space must be ENV_FLOAT32",
                           t->spec.id);
  if (t->render && (t->spec.render_w < 1 || t->spec.render_h < 1))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "env_register: '%s': a renderer needs render_w and render_h",
                           t->spec.id);
  pthread_once(&reg_once, reg_builtins);
  pthread_mutex_lock(&reg_mu);
  if (find_locked(t->spec.id)) {
    pthread_mutex_unlock(&reg_mu);
    return shoal_error_set(err, SHOAL_EEXIST, "env_register: '%s' is already registered",
                           t->spec.id);
  }
  if (reg_n == ENV_MAX_TYPES) {
    pthread_mutex_unlock(&reg_mu);
    return shoal_error_set(err, SHOAL_EFULL, "env_register: at most %d kinds", ENV_MAX_TYPES);
  }
  reg_types[reg_n++] = t;
  pthread_mutex_unlock(&reg_mu);
  return 0;
}

int env_list(const char **names, int cap) {
  pthread_once(&reg_once, reg_builtins);
  pthread_mutex_lock(&reg_mu);
  int n = reg_n;
  for (int i = 0; i < n && i < cap; i++) names[i] = reg_types[i]->spec.id;
  pthread_mutex_unlock(&reg_mu);
  return n;
}

/* The message for an unknown id lists what there is. */
int env__not_found(const char *where, const char *id, shoal_error *err) {
  char known[400];
  size_t len = 0;
  known[0] = 0;
  const char *names[ENV_MAX_TYPES];
  int n = env_list(names, ENV_MAX_TYPES);
  for (int i = 0; i < n && len + 1 < sizeof known; i++) {
    int k = snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", names[i]);
    if (k < 0) break;
    len += (size_t)k;
  }
  return shoal_error_set(err, SHOAL_ENOENT, "%s: no env '%s' (known: %s)", where,
                         id ? id : "(null)", known);
}

int env__lookup(const char *id, const env_type **out, const char *where, shoal_error *err) {
  if (id && strncmp(id, "plugin:", 7) == 0) {
    int rc = env__plugin_find(id, out, err);
    if (rc) {
      char inner[sizeof err->msg];
      snprintf(inner, sizeof inner, "%s", err ? err->msg : "");
      return shoal_error_set(err, rc, "%s: %s", where, inner);
    }
    return 0;
  }
  *out = env_find(id);
  return *out ? 0 : env__not_found(where, id, err);
}

/* Checks B actions against the space; on a bad one names the copy (B > 1) and the value. */
int env__check_actions(const env_spec *sp, const void *actions, int B, const char *where,
                       shoal_error *err) {
  const env_space *a = &sp->act;
  if (a->n > 0) {
    const int32_t *d = actions;
    for (int i = 0; i < B; i++) {
      if ((uint32_t)d[i] >= (uint32_t)a->n) {
        if (B > 1)
          return shoal_error_set(err, SHOAL_ERANGE,
                                 "%s: '%s': action %d of copy %d is out of range [0, %d)", where,
                                 sp->id, d[i], i, a->n);
        return shoal_error_set(err, SHOAL_ERANGE, "%s: '%s': action %d is out of range [0, %d)",
                               where, sp->id, d[i], a->n);
      }
    }
    return 0;
  }
  const float *f = actions;
  size_t total = (size_t)B * (size_t)a->size;
  for (size_t k = 0; k < total; k++) {
    if (!isfinite(f[k])) {
      int i = (int)(k / (size_t)a->size), j = (int)(k % (size_t)a->size);
      return shoal_error_set(err, SHOAL_ENAN, "%s: '%s': action[%d] of copy %d is %s", where,
                             sp->id, j, i, isnan(f[k]) ? "NaN" : "infinite");
    }
  }
  return 0;
}

/* Splits "k=v,k=v" into at most cap (key, value) pairs; SHOAL_EINVAL for a malformed
 * pair or a value that is no finite number. */
static int parse_options(const env_type *t, const char *opts, env__opt *kv, int cap, int *n,
                         const char *where, shoal_error *err) {
  *n = 0;
  const char *p = opts ? opts : "";
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    const char *eq = strchr(p, '='), *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    if (!eq || eq > end)
      return shoal_error_set(err, SHOAL_EINVAL, "%s: '%s': option '%.*s' is not key=value", where,
                             t->spec.id, (int)(end - p), p);
    char val[64];
    size_t kl = (size_t)(eq - p), vl = (size_t)(end - eq - 1);
    while (kl > 0 && p[kl - 1] == ' ') kl--;
    if (kl == 0 || kl >= sizeof kv->key || vl == 0 || vl >= sizeof val)
      return shoal_error_set(err, SHOAL_EINVAL, "%s: '%s': bad option '%.*s'", where, t->spec.id,
                             (int)(end - p), p);
    if (*n == cap)
      return shoal_error_set(err, SHOAL_EINVAL, "%s: '%s': more than %d options", where, t->spec.id,
                             cap);
    env__opt *o = &kv[(*n)++];
    memcpy(o->key, p, kl);
    o->key[kl] = 0;
    memcpy(val, eq + 1, vl);
    val[vl] = 0;
    char *stop;
    o->value = strtod(val, &stop);
    while (*stop == ' ') stop++;
    if (*stop || stop == val || !isfinite(o->value))
      return shoal_error_set(err, SHOAL_EINVAL, "%s: '%s': option %s = '%s' is not a number", where,
                             t->spec.id, o->key, val);
    p = end;
  }
  return 0;
}

/* Prefixes err's message with "where: 'id': " and returns rc. */
static int wrap(const env_type *t, int rc, const char *where, shoal_error *err) {
  char inner[sizeof err->msg];
  snprintf(inner, sizeof inner, "%s", err ? err->msg : "");
  return shoal_error_set(err, rc, "%s: '%s': %s", where, t->spec.id, inner);
}

/* Applies "k=v,k=v" to a fresh state. max_episode_steps is the framework's: it goes to
 * *max_steps. Each option goes to the kind's configure(). */
int env__apply_options(const env_type *t, void *state, const char *opts, int *max_steps,
                       const char *where, shoal_error *err) {
  if (t->init) t->init(state);
  if (!opts) return 0;
  env__opt kv[ENV__MAX_OPTS];
  int n, rc = parse_options(t, opts, kv, ENV__MAX_OPTS, &n, where, err);
  if (rc) return rc;
  for (int i = 0; i < n; i++) {
    const char *key = kv[i].key;
    double v = kv[i].value;
    if (strcmp(key, "max_episode_steps") == 0) {
      if (v < 0 || v != floor(v) || v > 1e9)
        return shoal_error_set(err, SHOAL_EINVAL, "%s: '%s': max_episode_steps = %g", where,
                               t->spec.id, v);
      *max_steps = (int)v;
      rc = 0;
    } else if (!t->configure) {
      rc = shoal_error_set(err, SHOAL_EINVAL, "takes no option '%s'", key);
    } else {
      rc = t->configure(state, key, v, err);
    }
    if (rc) return wrap(t, rc, where, err);
  }
  if (t->configure) { /* all given: the kind checks them together (key NULL) */
    rc = t->configure(state, NULL, 0.0, err);
    if (rc) return wrap(t, rc, where, err);
  }
  return 0;
}

/* Whether key is one of t->reset_options ("low,high"). */
static int is_reset_key(const env_type *t, const char *key) {
  const char *p = t->reset_options;
  size_t kl = strlen(key);
  while (p && *p) {
    const char *end = strchr(p, ',');
    size_t l = end ? (size_t)(end - p) : strlen(p);
    if (l == kl && strncmp(p, key, l) == 0) return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

int env__reset_options_parse(const env_type *t, const void *state, void *scratch, const char *opts,
                             env__opt *kv, int *n, const char *where, shoal_error *err) {
  int rc = parse_options(t, opts, kv, ENV__MAX_OPTS, n, where, err);
  if (rc) return rc;
  if (*n == 0) return 0;
  /* A reset with options starts from the options' start state and sets it into the copy
   * (env__reset_with), so it needs the state's get and set. */
  if (!t->reset_options || !t->configure || !t->get_state || !t->set_state)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: '%s' takes no reset options (got '%s')", where,
                           t->spec.id, kv[0].key);
  for (int i = 0; i < *n; i++)
    if (!is_reset_key(t, kv[i].key))
      return shoal_error_set(err, SHOAL_EINVAL,
                             "%s: '%s': '%s' is no reset option (reset takes %s; other settings "
                             "are the env's, given when it is made)",
                             where, t->spec.id, kv[i].key, t->reset_options);
  /* The values are checked together once, on a copy, before any copy resets. */
  memcpy(scratch, state, t->state_size);
  for (int i = 0; i < *n; i++)
    if ((rc = t->configure(scratch, kv[i].key, kv[i].value, err))) return wrap(t, rc, where, err);
  if ((rc = t->configure(scratch, NULL, 0.0, err))) return wrap(t, rc, where, err);
  double probe[ENV__MAX_STATE];
  if (t->get_state(scratch, probe, ENV__MAX_STATE) > ENV__MAX_STATE)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: '%s': a state of more than %d values", where,
                           t->spec.id, ENV__MAX_STATE);
  return 0;
}

void env__reset_with(const env_type *t, void *state, void *scratch, void *obs_tmp, shoal_rng *rng,
                     const env__opt *kv, int n, void *obs) {
  if (n == 0) {
    t->reset(state, rng, obs);
    return;
  }
  /* The episode starts from the options' range (scratch: the state with them applied,
   * drawing from rng as a plain reset does) ... */
  memcpy(scratch, state, t->state_size);
  for (int i = 0; i < n; i++) t->configure(scratch, kv[i].key, kv[i].value, NULL);
  t->reset(scratch, rng, obs);
  double phys[ENV__MAX_STATE];
  int ns = t->get_state(scratch, phys, ENV__MAX_STATE);
  /* ... and the copy keeps its own settings: a plain reset (from a throwaway RNG) clears
   * what a reset clears, then takes that start state. */
  shoal_rng spare = *rng;
  t->reset(state, &spare, obs_tmp);
  t->set_state(state, phys, ns);
}

struct env {
  const env_type *type; /* a registry kind, or NULL with a backend */
  env_vec *vec;         /* a backend's env: a vector of one, stepped without auto-reset */
  const env_spec *spec; /* &type->spec or the vector's */
  uint64_t seed;        /* env_seed's, for the backend's next reset */
  int seed_pending;
  shoal_rng rng;
  int max_steps; /* the time limit in force */
  int elapsed;
  int running; /* an episode is in progress */
  int reset_once;
  void *state; /* type->state_size bytes, 16-aligned */
};

int env_make(env **out, const char *id, shoal_error *err) {
  return env_make_opts(out, id, NULL, err);
}

int env_make_opts(env **out, const char *id, const char *options, shoal_error *err) {
  if (options && !options[0]) options = NULL; /* "" is env_make, as documented */
  if (env__backend_for(id)) {
    env *e = calloc(1, sizeof *e);
    if (!e) return shoal_error_set(err, SHOAL_ENOMEM, "env_make: '%s': out of memory", id);
    env_vec_config vc = {.options = options, .episode_log = 1};
    int rc = env_vec_create(&e->vec, id, 1, &vc, err);
    if (rc) {
      free(e);
      return rc;
    }
    e->spec = env_vec_spec(e->vec);
    e->seed_pending = 1; /* seeded with 0, as a built-in kind */
    *out = e;
    return 0;
  }
  const env_type *t;
  int lrc = env__lookup(id, &t, "env_make", err);
  if (lrc) return lrc;
  env *e = calloc(1, sizeof *e);
  size_t sz = (t->state_size + 15) & ~(size_t)15;
  void *st = e ? aligned_alloc(16, sz) : NULL;
  if (!st) {
    free(e);
    return shoal_error_set(err, SHOAL_ENOMEM, "env_make: '%s': out of memory", id);
  }
  memset(st, 0, sz);
  e->type = t;
  e->spec = &t->spec;
  e->state = st;
  e->max_steps = t->spec.max_episode_steps;
  int rc = env__apply_options(t, st, options, &e->max_steps, "env_make", err);
  if (rc) {
    env_destroy(e);
    return rc;
  }
  shoal_rng_seed(&e->rng, 0);
  *out = e;
  return 0;
}

void env_destroy(env *e) {
  if (!e) return;
  env_vec_destroy(e->vec);
  free(e->state);
  free(e);
}

const env_spec *env_get_spec(const env *e) { return e->spec; }

void env_seed(env *e, uint64_t seed) {
  shoal_rng_seed(&e->rng, seed);
  e->seed = seed;
  e->seed_pending = 1;
}

/* A backend's reset: seeded if env_seed came since the last one, else going on. */
static int backend_reset(env *e, void *obs, shoal_error *err) {
  uint8_t reseed = (uint8_t)e->seed_pending;
  int rc = env_vec_reset_each(e->vec, &e->seed, &reseed, NULL, obs, err);
  if (rc) return rc;
  e->seed_pending = 0;
  e->elapsed = 0;
  e->running = 1;
  e->reset_once = 1;
  return 0;
}

int env_reset(env *e, void *obs) {
  if (e->vec) return backend_reset(e, obs, NULL);
  e->type->reset(e->state, &e->rng, obs);
  e->elapsed = 0;
  e->running = 1;
  e->reset_once = 1;
  return 0;
}

int env_reset_opts(env *e, const char *options, void *obs, shoal_error *err) {
  const env_type *t = e->type;
  if (e->vec) {
    if (options && options[0])
      return shoal_error_set(err, SHOAL_EINVAL,
                             "env_reset_opts: '%s' takes no reset options (got '%s')", e->spec->id,
                             options);
    return backend_reset(e, obs, err);
  }
  if (!options || !options[0]) {
    env_reset(e, obs);
    return 0;
  }
  size_t sz = (t->state_size + 15) & ~(size_t)15;
  void *scratch = aligned_alloc(16, sz), *obs_tmp = malloc(env_space_bytes(&t->spec.obs));
  if (!scratch || !obs_tmp) {
    free(scratch), free(obs_tmp);
    return shoal_error_set(err, SHOAL_ENOMEM, "env_reset_opts: '%s': out of memory", t->spec.id);
  }
  env__opt kv[ENV__MAX_OPTS];
  int n;
  int rc = env__reset_options_parse(t, e->state, scratch, options, kv, &n, "env_reset_opts", err);
  if (!rc) {
    env__reset_with(t, e->state, scratch, obs_tmp, &e->rng, kv, n, obs);
    e->elapsed = 0;
    e->running = 1;
    e->reset_once = 1;
  }
  free(scratch), free(obs_tmp);
  return rc;
}

int env_step(env *e, const void *action, void *obs, env_result *res, shoal_error *err) {
  const env_spec *sp = e->spec;
  if (!action || !obs || !res)
    return shoal_error_set(err, SHOAL_EINVAL, "env_step: '%s': NULL action, obs or result", sp->id);
  if (!e->running)
    return shoal_error_set(err, SHOAL_ESTATE,
                           e->reset_once ? "env_step: '%s': the episode has ended; call env_reset"
                                         : "env_step: '%s': call env_reset before env_step",
                           sp->id);
  int rc = env__check_actions(sp, action, 1, "env_step", err);
  if (rc) return rc;
  double r = 0.0;
  int term = 0, trunc;
  if (e->vec) {
    uint8_t te = 0, tr = 0;
    rc = env__vec_step_one(e->vec, action, obs, &r, &te, &tr, err);
    if (rc) return rc;
    term = te;
    trunc = tr;
    e->elapsed++;
  } else {
    e->type->step(e->state, &e->rng, action, obs, &r, &term);
    e->elapsed++;
    trunc = e->max_steps > 0 && e->elapsed >= e->max_steps;
  }
  res->reward = r;
  res->terminated = term != 0;
  res->truncated = trunc;
  res->elapsed = e->elapsed;
  if (res->terminated || res->truncated) e->running = 0;
  return 0;
}

int env__state_get(const env_type *t, const void *state, double *out, int cap, const char *fn,
                   shoal_error *err) {
  if (!t->get_state)
    return shoal_error_set(err, SHOAL_ENOTSUP, "%s: '%s' has no float state", fn, t->spec.id);
  return t->get_state(state, out, cap);
}

int env__state_set(const env_type *t, void *state, bool running, const double *in, int n,
                   const char *fn, const char *reset_fn, shoal_error *err) {
  if (!t->set_state)
    return shoal_error_set(err, SHOAL_ENOTSUP, "%s: '%s' has no float state", fn, t->spec.id);
  if (!running)
    return shoal_error_set(err, SHOAL_ESTATE, "%s: '%s': call %s first", fn, t->spec.id, reset_fn);
  if (!in || n < 0)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: '%s': no values", fn, t->spec.id);
  for (int i = 0; i < n; i++)
    if (!isfinite(in[i]))
      return shoal_error_set(err, SHOAL_ENAN, "%s: '%s': value %d is not finite", fn, t->spec.id,
                             i);
  int rc = t->set_state(state, in, n);
  if (rc) {
    double probe[ENV__MAX_STATE];
    int want = t->get_state(state, probe, ENV__MAX_STATE);
    return shoal_error_set(err, rc, "%s: '%s' takes %d values, got %d", fn, t->spec.id, want, n);
  }
  return 0;
}

int env_get_state(const env *e, double *out, int cap, shoal_error *err) {
  if (e->vec) return env_vec_get_state(e->vec, 0, out, cap, err);
  return env__state_get(e->type, e->state, out, cap, "env_get_state", err);
}

int env_set_state(env *e, const double *in, int n, shoal_error *err) {
  if (e->vec) return env_vec_set_state(e->vec, 0, in, n, err);
  return env__state_set(e->type, e->state, e->running, in, n, "env_set_state", "env_reset", err);
}

int env_render(const env *e, uint8_t *rgb, shoal_error *err) {
  if (e->vec) return env_vec_render(e->vec, 0, rgb, err);
  if (!e->type->render)
    return shoal_error_set(err, SHOAL_ENOTSUP, "env_render: '%s' has no renderer",
                           e->type->spec.id);
  if (!e->reset_once)
    return shoal_error_set(err, SHOAL_ESTATE, "env_render: '%s': call env_reset first",
                           e->type->spec.id);
  e->type->render(e->state, rgb);
  return 0;
}
