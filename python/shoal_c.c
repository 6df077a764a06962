/* SPDX-License-Identifier: Apache-2.0 */
/*
 * python/shoal_c.c — libshoal.so's stable C API (shoal_c.h) over envs/, algos/, nn/ and
 * store/. Policies are built from a run's resolved config exactly as `shoal eval`
 * (cli/shoal.c) and the actor (actor/apex.c) build theirs, so they act the same.
 */
#define _GNU_SOURCE
#include "python/shoal_c.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "common/shoal.h"
#include "config/config.h"
#include "envs/envs.h"
#include "nn/nn.h"
#include "store/store.h"
#ifdef SHOAL_C_ONPOLICY
#include "run/run.h"
#endif

/* The largest batch one network call takes; larger ones run in chunks, so the policy's
 * buffers are sized once at load. */
enum { POLICY_CHUNK = 256 };

static _Thread_local shoal_error last_err;

/* Records err as the thread's last error and returns its code. */
static int keep(const shoal_error *err, int rc) {
  last_err = *err;
  last_err.code = rc;
  if (!last_err.msg[0]) snprintf(last_err.msg, sizeof last_err.msg, "%s", shoal_strerror(rc));
  return rc;
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  shoal_error_vset(&last_err, code, fmt, ap);
  va_end(ap);
  return code;
}

static void ok(void) {
  last_err.code = 0;
  last_err.msg[0] = 0;
}

int shoal_c_abi_version(void) { return SHOAL_C_ABI; }
const char *shoal_c_last_error(void) { return last_err.msg; }
int shoal_c_last_error_code(void) { return last_err.code; }

int shoal_c_env_list(const char **names, int cap) { return env_list(names, cap < 0 ? 0 : cap); }

static void space_out(const env_space *s, shoal_c_space *o) {
  memset(o, 0, sizeof *o);
  o->dtype = (int32_t)s->dtype;
  o->ndim = s->ndim;
  for (int i = 0; i < s->ndim && i < 4; i++) o->shape[i] = s->shape[i];
  o->size = s->size;
  o->n = s->n;
  o->low = s->low;
  o->high = s->high;
}

static void spec_out(const env_spec *sp, int B, int max_steps, shoal_c_spec *o) {
  memset(o, 0, sizeof *o);
  o->id = sp->id;
  space_out(&sp->obs, &o->obs);
  space_out(&sp->act, &o->act);
  o->max_episode_steps = max_steps;
  o->num_envs = B;
  o->render_w = sp->render_w;
  o->render_h = sp->render_h;
  o->reward_threshold = sp->reward_threshold;
}

/* SHOAL_ENOENT listing the known ids. */
static int unknown_env(const char *id) {
  const char *names[64];
  int n = env_list(names, 64);
  char list[400] = "";
  size_t at = 0;
  for (int i = 0; i < n && i < 64 && at < sizeof list; i++)
    at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", names[i]);
  return fail(SHOAL_ENOENT, "unknown env '%s' (known: %s)", id ? id : "(null)", list);
}

/* A gym: env's spec lives with an env: one is kept per id for the process's life (the
 * spec's strings and bounds are handed out as static). */
static int gym_spec(const char *id, const env_spec **sp) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static env *kept[32];
  static int nkept;
  int rc = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nkept && !*sp; i++)
    if (!strcmp(env_get_spec(kept[i])->id, id)) *sp = env_get_spec(kept[i]);
  if (!*sp) {
    shoal_error err = {0};
    env *e = NULL;
    if (nkept == 32)
      rc = fail(SHOAL_EFULL, "shoal_c_env_spec: specs of at most 32 gym: envs");
    else if ((rc = env_make(&e, id, &err)))
      rc = keep(&err, rc);
    else
      *sp = env_get_spec(kept[nkept++] = e);
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

int shoal_c_env_spec(const char *id, shoal_c_spec *out) {
  if (!out) return fail(SHOAL_EINVAL, "shoal_c_env_spec: out is NULL");
  if (id && !strncmp(id, "gym:", 4)) {
    const env_spec *sp = NULL;
    int rc = gym_spec(id, &sp);
    if (rc) return rc;
    spec_out(sp, 0, sp->max_episode_steps, out);
    ok();
    return 0;
  }
  const env_type *t = id ? env_find(id) : NULL;
  if (!t) return unknown_env(id);
  spec_out(&t->spec, 0, t->spec.max_episode_steps, out);
  ok();
  return 0;
}

/* ---- Vector envs ----------------------------------------------------------------- */

struct shoal_c_vec {
  env_vec *v;
  int B, max_steps;
  /* Bound buffers (shoal_c_vec_bind). */
  const void *actions;
  env_vec_out out;
  uint8_t *done;
};

int shoal_c_vec_create(shoal_c_vec **out, const char *id, int B, int threads, int max_episode_steps,
                       const char *options) {
  if (!out) return fail(SHOAL_EINVAL, "shoal_c_vec_create: out is NULL");
  if (!id || (strncmp(id, "gym:", 4) && !env_find(id))) return unknown_env(id);
  shoal_error err = {0};
  shoal_c_vec *h = calloc(1, sizeof *h);
  if (!h) return fail(SHOAL_ENOMEM, "shoal_c_vec_create: out of memory");
  env_vec_config cfg = {.threads = threads,
                        .max_episode_steps = max_episode_steps,
                        .options = options && options[0] ? options : NULL};
  int rc = env_vec_create(&h->v, id, B, &cfg, &err);
  if (rc) {
    free(h);
    return keep(&err, rc);
  }
  h->B = B;
  const env_spec *sp = env_vec_spec(h->v);
  h->max_steps = max_episode_steps > 0   ? max_episode_steps
                 : max_episode_steps < 0 ? 0
                                         : sp->max_episode_steps;
  *out = h;
  ok();
  return 0;
}

void shoal_c_vec_destroy(shoal_c_vec *v) {
  if (!v) return;
  env_vec_destroy(v->v);
  free(v);
}

int shoal_c_vec_spec(const shoal_c_vec *v, shoal_c_spec *out) {
  if (!v || !out) return fail(SHOAL_EINVAL, "shoal_c_vec_spec: NULL argument");
  spec_out(env_vec_spec(v->v), v->B, v->max_steps, out);
  ok();
  return 0;
}

int shoal_c_vec_reset(shoal_c_vec *v, uint64_t seed, void *obs) {
  if (!v) return fail(SHOAL_EINVAL, "shoal_c_vec_reset: NULL env");
  if (!obs) obs = v->out.obs;
  if (!obs) return fail(SHOAL_EINVAL, "shoal_c_vec_reset: no obs buffer given or bound");
  shoal_error err = {0};
  if (env_vec_reset(v->v, seed, obs, &err)) return fail(err.code, "%s", err.msg);
  ok();
  return 0;
}

int shoal_c_vec_reset_each(shoal_c_vec *v, const uint64_t *seeds, const uint8_t *reseed,
                           const char *options, void *obs) {
  if (!v) return fail(SHOAL_EINVAL, "shoal_c_vec_reset_each: NULL env");
  if (!obs) obs = v->out.obs;
  if (!obs) return fail(SHOAL_EINVAL, "shoal_c_vec_reset_each: no obs buffer given or bound");
  shoal_error err = {0};
  int rc = env_vec_reset_each(v->v, seeds, reseed, options, obs, &err);
  if (rc) return keep(&err, rc);
  ok();
  return 0;
}

int shoal_c_vec_get_state(const shoal_c_vec *v, int i, double *out, int cap) {
  if (!v || (!out && cap > 0)) return fail(SHOAL_EINVAL, "shoal_c_vec_get_state: NULL argument");
  shoal_error err = {0};
  int rc = env_vec_get_state(v->v, i, out, cap < 0 ? 0 : cap, &err);
  if (rc < 0) return keep(&err, rc);
  ok();
  return rc;
}

int shoal_c_vec_set_state(shoal_c_vec *v, int i, const double *in, int n) {
  if (!v) return fail(SHOAL_EINVAL, "shoal_c_vec_set_state: NULL env");
  shoal_error err = {0};
  int rc = env_vec_set_state(v->v, i, in, n, &err);
  if (rc) return keep(&err, rc);
  ok();
  return 0;
}

/* Counts the copies that ended and fills done when given. */
static int count_ended(int B, const uint8_t *term, const uint8_t *trunc, uint8_t *done) {
  int n = 0;
  if (done) {
    for (int i = 0; i < B; i++) {
      done[i] = (uint8_t)(term[i] | trunc[i]);
      n += done[i];
    }
  } else {
    for (int i = 0; i < B; i++) n += (term[i] | trunc[i]) != 0;
  }
  return n;
}

int shoal_c_vec_step_into(shoal_c_vec *v, const void *actions, void *obs, float *reward,
                          uint8_t *terminated, uint8_t *truncated, void *final_obs) {
  if (!v) return fail(SHOAL_EINVAL, "shoal_c_vec_step: NULL env");
  if (!actions) return fail(SHOAL_EINVAL, "shoal_c_vec_step: actions is NULL");
  shoal_error err = {0};
  env_vec_out o = {obs, reward, terminated, truncated, final_obs};
  int rc = env_vec_step(v->v, actions, &o, &err);
  if (rc) return keep(&err, rc);
  return count_ended(v->B, terminated, truncated, NULL);
}

int shoal_c_vec_bind(shoal_c_vec *v, const void *actions, void *obs, float *reward,
                     uint8_t *terminated, uint8_t *truncated, void *final_obs, uint8_t *done) {
  if (!v) return fail(SHOAL_EINVAL, "shoal_c_vec_bind: NULL env");
  if (!actions || !obs || !reward || !terminated || !truncated)
    return fail(SHOAL_EINVAL,
                "shoal_c_vec_bind: actions, obs, reward, terminated and truncated "
                "buffers are required");
  if (final_obs && final_obs == obs)
    return fail(SHOAL_EINVAL, "shoal_c_vec_bind: final_obs must not be the obs buffer");
  v->actions = actions;
  v->out = (env_vec_out){obs, reward, terminated, truncated, final_obs};
  v->done = done;
  ok();
  return 0;
}

int shoal_c_vec_step(shoal_c_vec *v) {
  if (!v) return fail(SHOAL_EINVAL, "shoal_c_vec_step: NULL env");
  if (!v->actions) return fail(SHOAL_ESTATE, "shoal_c_vec_step: no buffers bound");
  shoal_error err = {0};
  int rc = env_vec_step(v->v, v->actions, &v->out, &err);
  if (rc) return keep(&err, rc);
  return count_ended(v->B, v->out.terminated, v->out.truncated, v->done);
}

int shoal_c_vec_episodes(shoal_c_vec *v, int32_t *index, int32_t *length, double *ret,
                         uint8_t *truncated, int cap) {
  if (!v) return fail(SHOAL_EINVAL, "shoal_c_vec_episodes: NULL env");
  env_episode ep[64];
  int got = 0;
  while (got < cap) {
    int want = cap - got < 64 ? cap - got : 64;
    int n = env_vec_episodes(v->v, ep, want);
    for (int i = 0; i < n; i++, got++) {
      if (index) index[got] = ep[i].index;
      if (length) length[got] = ep[i].length;
      if (ret) ret[got] = ep[i].ret;
      if (truncated) truncated[got] = (uint8_t)ep[i].truncated;
    }
    if (n < want) break;
  }
  ok();
  return got;
}

int shoal_c_vec_stats(const shoal_c_vec *v, shoal_c_stats *out) {
  if (!v || !out) return fail(SHOAL_EINVAL, "shoal_c_vec_stats: NULL argument");
  env_vec_stats st;
  env_vec_get_stats(v->v, &st);
  *out = (shoal_c_stats){st.steps, st.episodes, st.dropped, st.mean_return_100, st.mean_length_100};
  ok();
  return 0;
}

int shoal_c_vec_render(const shoal_c_vec *v, int i, uint8_t *rgb) {
  if (!v || !rgb) return fail(SHOAL_EINVAL, "shoal_c_vec_render: NULL argument");
  shoal_error err = {0};
  int rc = env_vec_render(v->v, i, rgb, &err);
  if (rc) return keep(&err, rc);
  ok();
  return 0;
}

/* ---- Trained policies ------------------------------------------------------------ */

struct shoal_c_policy {
  dqn *q; /* Ape-X DQN; NULL for an on-policy run */
  const env_type *env;
  int F, A, D;  /* observation elements, discrete actions, Box dims */
  float *obs_f; /* (POLICY_CHUNK, F): converted (and normalised) observations */
  shoal_rng rng;
  shoal_c_policy_info info;
#ifdef SHOAL_C_ONPOLICY
  bool onpolicy;
  op_spec s;
  op_agent a;
  op_norm z;    /* when s.norm_obs */
  float *raw;   /* (POLICY_CHUNK, D): Box samples before clipping */
  float *clip;  /* (POLICY_CHUNK, D): the same clipped to the Box */
  float *logp;  /* (POLICY_CHUNK) */
  int32_t *act; /* (POLICY_CHUNK) */
#endif
};

void shoal_c_policy_destroy(shoal_c_policy *p) {
  if (!p) return;
  dqn_destroy(p->q);
#ifdef SHOAL_C_ONPOLICY
  op_agent_destroy(&p->a);
  op_norm_free(&p->z);
  free(p->raw);
  free(p->clip);
  free(p->logp);
  free(p->act);
#endif
  free(p->obs_f);
  free(p);
}

/* A run is on-policy when its config's `algo:` says impala or ppo (the rule `shoal run`
 * applies: algos/algos.h). */
static bool yaml_is_onpolicy(const char *yaml) { return algo_yaml_is_onpolicy(yaml, NULL, 0); }

static void info_meta(shoal_c_policy *p, const store_snapshot_meta *meta) {
  p->info.version = meta ? meta->version : -1;
  p->info.env_steps = meta ? meta->env_steps : -1;
  p->info.updates = meta ? meta->updates : -1;
  p->info.score = meta ? meta->score : NAN;
}

#ifdef SHOAL_C_ONPOLICY
/* IMPALA / PPO: the actor-critic built as shoal-onpolicy-actor and `shoal eval` build
 * it (algos/agent.c), the snapshot's parameters and observation
 * normaliser loaded (its learner state skipped). */
static int policy_build_onpolicy(shoal_c_policy **out, const char *yaml, const char *origin,
                                 const uint8_t *bytes, size_t len,
                                 const store_snapshot_meta *meta) {
  shoal_error err = {0};
  int nkeys, rc;
  const cfg_key *keys = onpolicy_schema(&nkeys);
  config *cfg = config_create(keys, nkeys, &err);
  if (!cfg) return keep(&err, err.code ? err.code : SHOAL_ENOMEM);
  shoal_c_policy *p = calloc(1, sizeof *p);
  if (!p) {
    config_destroy(cfg);
    return fail(SHOAL_ENOMEM, "policy: out of memory");
  }
  p->onpolicy = true;
  if ((rc = config_load_string(cfg, yaml, origin, &err)) || (rc = onpolicy_check(cfg, &err)) ||
      (rc = op_spec_from_config(cfg, &p->s, &err)) ||
      (rc = op_agent_from_config(cfg, &p->s, POLICY_CHUNK, false, NN_CPU, &p->a, &err)) ||
      (p->s.norm_obs && (rc = op_norm_init(&p->z, (int)p->s.obs_n, &err))) ||
      (rc = op_snapshot_decode(&p->a, &p->s, p->s.norm_obs ? &p->z : NULL, bytes, len, &err))) {
    config_destroy(cfg);
    shoal_c_policy_destroy(p);
    return keep(&err, rc ? rc : SHOAL_ENOMEM);
  }
  config_destroy(cfg);
  const env_type *t = env_find(p->s.env_id);
  if (!t) {
    shoal_c_policy_destroy(p);
    return unknown_env(p->s.env_id);
  }
  p->env = t;
  p->F = (int)p->s.obs_n;
  p->A = p->s.A;
  p->D = p->s.D;
  size_t C = POLICY_CHUNK, D = p->D > 0 ? (size_t)p->D : 1;
  p->obs_f = malloc(C * (size_t)p->F * sizeof(float));
  p->raw = malloc(C * D * sizeof(float));
  p->clip = malloc(C * D * sizeof(float));
  p->logp = malloc(C * sizeof(float));
  p->act = malloc(C * sizeof(int32_t));
  if (!p->obs_f || !p->raw || !p->clip || !p->logp || !p->act) {
    shoal_c_policy_destroy(p);
    return fail(SHOAL_ENOMEM, "policy: out of memory");
  }
  shoal_rng_seed(&p->rng, 0);
  p->info.env_id = t->spec.id;
  space_out(&t->spec.obs, &p->info.obs);
  space_out(&t->spec.act, &p->info.act);
  p->info.num_actions = p->A;
  p->info.net = -1;
  p->info.algo = p->s.impala ? SHOAL_C_IMPALA : SHOAL_C_PPO;
  p->info.act_dim = p->D;
  p->info.norm_obs = p->s.norm_obs;
  p->info.state_size = p->a.S; /* the caller carries the (h, c) of each env */
  info_meta(p, meta);
  *out = p;
  ok();
  return 0;
}
#endif

/* Builds the network from the run's config text and loads the snapshot bytes into it:
 * the dqn_config is filled in as cmd_eval and the actor fill theirs. */
static int policy_build(shoal_c_policy **out, const char *yaml, const char *origin,
                        const uint8_t *bytes, size_t len, const store_snapshot_meta *meta) {
  if (yaml_is_onpolicy(yaml)) {
#ifdef SHOAL_C_ONPOLICY
    return policy_build_onpolicy(out, yaml, origin, bytes, len, meta);
#else
    return fail(SHOAL_ENOTSUP,
                "policy: %s is an IMPALA/PPO run (algo:), and this libshoal was "
                "built without the on-policy programs (learner/)",
                origin);
#endif
  }
  shoal_error err = {0};
  int nkeys, rc;
  const cfg_key *keys = apex_schema(&nkeys);
  config *cfg = config_create(keys, nkeys, &err);
  if (!cfg) return keep(&err, err.code ? err.code : SHOAL_ENOMEM);
  if ((rc = config_load_string(cfg, yaml, origin, &err))) {
    config_destroy(cfg);
    return keep(&err, rc);
  }
  const char *id = config_string(cfg, "env.id");
  const env_type *t = env_find(id);
  if (!t) {
    rc = unknown_env(id);
    config_destroy(cfg);
    return rc;
  }
  const env_spec *sp = &t->spec;
  if (sp->act.n <= 0) {
    config_destroy(cfg);
    return fail(SHOAL_ENOTSUP, "policy: env '%s' has continuous actions; DQN needs discrete ones",
                sp->id);
  }
  dqn_config dc = apex_dqn_config(cfg, sp->obs.ndim, sp->obs.shape, sp->act.n);
  dc.max_batch = POLICY_CHUNK;
  config_destroy(cfg);

  shoal_c_policy *p = calloc(1, sizeof *p);
  if (!p) return fail(SHOAL_ENOMEM, "policy: out of memory");
  p->env = t;
  p->F = sp->obs.size;
  p->A = sp->act.n;
  p->q = dqn_create(&dc, NN_CPU, false, &err);
  if (!p->q) {
    shoal_c_policy_destroy(p);
    return keep(&err, err.code ? err.code : SHOAL_ENOMEM);
  }
  /* A learner's snapshot ends in its optimizer state (algo_snapshot_append_state). */
  size_t ml, sl;
  const uint8_t *sb;
  if ((rc = algo_snapshot_split(bytes, len, &ml, &sb, &sl, &err)) ||
      (rc = nn_model_load_buffer(dqn_model(p->q), bytes, ml, &err))) {
    shoal_c_policy_destroy(p);
    return keep(&err, rc);
  }
  p->obs_f = malloc((size_t)POLICY_CHUNK * (size_t)p->F * sizeof(float));
  if (!p->obs_f) {
    shoal_c_policy_destroy(p);
    return fail(SHOAL_ENOMEM, "policy: out of memory");
  }
  shoal_rng_seed(&p->rng, 0);
  p->info.env_id = sp->id;
  space_out(&sp->obs, &p->info.obs);
  p->info.num_actions = p->A;
  p->info.net = (int32_t)dc.net;
  p->info.algo = SHOAL_C_DQN;
  space_out(&sp->act, &p->info.act);
  info_meta(p, meta);
  *out = p;
  ok();
  return 0;
}

int shoal_c_is_store_uri(const char *target) {
  store_uri_info u;
  return target && target[0] && store_uri_parse(target, &u, NULL) == 0 && u.has_scheme;
}

int shoal_c_policy_load_store(shoal_c_policy **out, const char *uri, const char *run,
                              int64_t which) {
  if (!out || !run) return fail(SHOAL_EINVAL, "policy: out and run are required");
  if (which < SHOAL_C_BEST)
    return fail(SHOAL_EINVAL, "policy: snapshot %lld: a version >= 0, LATEST or BEST",
                (long long)which);
  shoal_error err = {0};
  store *st;
  int rc = store_open(&st, uri, &err);
  if (rc) return keep(&err, rc);
  store_run r = {0};
  if ((rc = store_run_find(st, run, &r, &err))) {
    store_close(st);
    return keep(&err, rc);
  }
  store_snapshot_meta meta;
  void *bytes = NULL;
  size_t len = 0;
  rc = store_snapshot_get(st, run, which, &meta, &bytes, &len, &err);
  store_close(st);
  if (rc) {
    store_run_clear(&r);
    return keep(&err, rc);
  }
  char origin[128];
  snprintf(origin, sizeof origin, "run %s", run);
  rc = policy_build(out, r.config ? r.config : "", origin, bytes, len, &meta);
  free(bytes);
  store_run_clear(&r);
  return rc;
}

/* Reads a whole file into a new buffer (caller frees it); NUL-terminated. */
static int slurp(const char *path, char **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail(SHOAL_ENOENT, "cannot open '%s': %s", path, strerror(errno));
  char *b = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 65536 + 1 > cap) {
      cap = cap ? 2 * cap : 1 << 17;
      char *nb = realloc(b, cap);
      if (!nb) {
        free(b), fclose(f);
        return fail(SHOAL_ENOMEM, "reading '%s': out of memory", path);
      }
      b = nb;
    }
    size_t got = fread(b + n, 1, 65536, f);
    n += got;
    if (got < 65536) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(b);
    return fail(SHOAL_EIO, "reading '%s' failed", path);
  }
  b[n] = 0;
  *buf = b;
  *len = n;
  return 0;
}

int shoal_c_policy_load_file(shoal_c_policy **out, const char *snapshot_path,
                             const char *config_path) {
  if (!out || !snapshot_path) return fail(SHOAL_EINVAL, "policy: out and path are required");
  char guess[PATH_MAX];
  if (!config_path || !config_path[0]) {
    /* The file store's layout: <run>/snapshots/<v>.safetensors, <run>/config.yaml. */
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", snapshot_path);
    char *dir = dirname(tmp); /* <run>/snapshots */
    snprintf(guess, sizeof guess, "%s/../config.yaml", dir);
    FILE *f = fopen(guess, "rb");
    if (!f)
      return fail(SHOAL_ENOENT,
                  "policy: no config for '%s': '%s' does not exist (pass the run's config)",
                  snapshot_path, guess);
    fclose(f);
    config_path = guess;
  }
  char *yaml, *bytes;
  size_t ylen, blen;
  int rc = slurp(config_path, &yaml, &ylen);
  if (rc) return rc;
  if ((rc = slurp(snapshot_path, &bytes, &blen))) {
    free(yaml);
    return rc;
  }
  rc = policy_build(out, yaml, config_path, (const uint8_t *)bytes, blen, NULL);
  if (rc) {
    /* Say which file the network's tensors came from. */
    char msg[sizeof last_err.msg];
    memcpy(msg, last_err.msg, sizeof msg);
    size_t at = (size_t)snprintf(last_err.msg, sizeof last_err.msg, "%.200s: ", snapshot_path);
    if (at < sizeof last_err.msg) memcpy(last_err.msg + at, msg, sizeof msg - at - 1);
    last_err.msg[sizeof last_err.msg - 1] = 0;
  }
  free(yaml);
  free(bytes);
  return rc;
}

int shoal_c_policy_info_get(const shoal_c_policy *p, shoal_c_policy_info *out) {
  if (!p || !out) return fail(SHOAL_EINVAL, "shoal_c_policy_info_get: NULL argument");
  *out = p->info;
  ok();
  return 0;
}

int shoal_c_policy_act(shoal_c_policy *p, const void *obs, int obs_dtype, int B, int32_t *actions,
                       float *q) {
  if (!p || !obs || !actions) return fail(SHOAL_EINVAL, "policy act: NULL argument");
  if (B < 1) return fail(SHOAL_EINVAL, "policy act: batch %d, need >= 1", B);
  if (obs_dtype != SHOAL_C_FLOAT32 && obs_dtype != SHOAL_C_UINT8)
    return fail(SHOAL_EINVAL, "policy act: observation dtype %d: float32 (1) or uint8 (2)",
                obs_dtype);
  const size_t F = (size_t)p->F;
  if (obs_dtype == SHOAL_C_FLOAT32) {
    const float *o = obs;
    for (size_t i = 0; i < (size_t)B * F; i++)
      if (!isfinite(o[i]))
        return fail(SHOAL_ENAN, "policy act: observation %zu, element %zu is %g", i / F, i % F,
                    (double)o[i]);
  }
  if (!p->q) {
    if (q) return fail(SHOAL_ENOTSUP, "policy act: an actor-critic policy has no Q-values");
    if (p->D > 0)
      return fail(SHOAL_ENOTSUP,
                  "policy act: %s has continuous actions: use "
                  "shoal_c_policy_sample",
                  p->info.env_id);
    return shoal_c_policy_sample(p, obs, obs_dtype, B, 1, actions, NULL, NULL);
  }
  shoal_error err = {0};
  for (int lo = 0; lo < B; lo += POLICY_CHUNK) {
    int n = B - lo < POLICY_CHUNK ? B - lo : POLICY_CHUNK;
    const float *x;
    if (obs_dtype == SHOAL_C_UINT8) {
      const uint8_t *u = (const uint8_t *)obs + (size_t)lo * F;
      for (size_t i = 0; i < (size_t)n * F; i++) p->obs_f[i] = u[i];
      x = p->obs_f;
    } else {
      x = (const float *)obs + (size_t)lo * F;
    }
    const float *qv;
    int rc = dqn_act(p->q, x, n, 0.0f, &p->rng, actions + lo, q ? &qv : NULL, &err);
    if (rc) return keep(&err, rc);
    if (q) memcpy(q + (size_t)lo * (size_t)p->A, qv, (size_t)n * (size_t)p->A * sizeof(float));
  }
  ok();
  return 0;
}

int shoal_c_policy_seed(shoal_c_policy *p, uint64_t seed) {
  if (!p) return fail(SHOAL_EINVAL, "policy seed: NULL policy");
  shoal_rng_seed(&p->rng, seed);
  ok();
  return 0;
}

/* Both samplers: state and first for a recurrent policy, NULL otherwise. */
static int policy_sample(shoal_c_policy *p, const void *obs, int obs_dtype, int B, float *state,
                         const uint8_t *first, int greedy, void *actions, float *raw, float *logp) {
  if (!p || !obs || !actions) return fail(SHOAL_EINVAL, "policy sample: NULL argument");
  if (B < 1) return fail(SHOAL_EINVAL, "policy sample: batch %d, need >= 1", B);
  if (obs_dtype != SHOAL_C_FLOAT32 && obs_dtype != SHOAL_C_UINT8)
    return fail(SHOAL_EINVAL, "policy sample: observation dtype %d: float32 (1) or uint8 (2)",
                obs_dtype);
#ifdef SHOAL_C_ONPOLICY
  if (p->onpolicy) {
    const size_t F = (size_t)p->F, D = (size_t)p->D, S = (size_t)p->a.S;
    if (S > 0 && !state)
      return fail(SHOAL_ESTATE,
                  "policy sample: %s's network has an LSTM core (%zu state floats per env): "
                  "act with shoal_c_policy_sample_recurrent and each env's state",
                  p->info.env_id, S);
    if (S == 0 && state)
      return fail(SHOAL_ESTATE, "policy sample: %s's network has no recurrent state",
                  p->info.env_id);
    if (obs_dtype == SHOAL_C_FLOAT32) {
      const float *o = obs;
      for (size_t i = 0; i < (size_t)B * F; i++)
        if (!isfinite(o[i]))
          return fail(SHOAL_ENAN, "policy sample: observation %zu, element %zu is %g", i / F, i % F,
                      (double)o[i]);
    }
    if (state)
      for (size_t i = 0; i < (size_t)B * S; i++)
        if (!isfinite(state[i]))
          return fail(SHOAL_ENAN, "policy sample: the state of env %zu, element %zu is %g", i / S,
                      i % S, (double)state[i]);
    shoal_error err = {0};
    for (int lo = 0; lo < B; lo += POLICY_CHUNK) {
      int n = B - lo < POLICY_CHUNK ? B - lo : POLICY_CHUNK;
      /* As the actor: raw observations to float, then the learner's normaliser. */
      if (obs_dtype == SHOAL_C_UINT8) {
        const uint8_t *u = (const uint8_t *)obs + (size_t)lo * F;
        for (size_t i = 0; i < (size_t)n * F; i++) p->obs_f[i] = u[i];
      } else {
        memcpy(p->obs_f, (const float *)obs + (size_t)lo * F, (size_t)n * F * sizeof(float));
      }
      if (p->s.norm_obs) op_norm_apply(&p->z, p->obs_f, (size_t)n);
      void *a_out = D > 0 ? (void *)p->raw : (void *)p->act;
      void *env_out = D > 0 ? (void *)p->clip : NULL;
      int rc = state ? op_agent_act_recurrent(&p->a, p->obs_f, n, state + (size_t)lo * S,
                                              first ? first + lo : NULL, &p->rng, greedy != 0,
                                              a_out, env_out, p->logp, &err)
                     : op_agent_act(&p->a, p->obs_f, n, &p->rng, greedy != 0, a_out, env_out,
                                    p->logp, &err);
      if (rc) return keep(&err, rc);
      if (D > 0) {
        memcpy((float *)actions + (size_t)lo * D, p->clip, (size_t)n * D * sizeof(float));
        if (raw) memcpy(raw + (size_t)lo * D, p->raw, (size_t)n * D * sizeof(float));
      } else {
        memcpy((int32_t *)actions + lo, p->act, (size_t)n * sizeof(int32_t));
      }
      if (logp) memcpy(logp + lo, p->logp, (size_t)n * sizeof(float));
    }
    ok();
    return 0;
  }
#endif
  (void)greedy, (void)raw, (void)logp, (void)state, (void)first;
  return fail(SHOAL_ENOTSUP,
              "policy sample: %s is an Ape-X DQN policy (greedy only: use "
              "shoal_c_policy_act)",
              p->info.env_id);
}

int shoal_c_policy_sample(shoal_c_policy *p, const void *obs, int obs_dtype, int B, int greedy,
                          void *actions, float *raw, float *logp) {
  return policy_sample(p, obs, obs_dtype, B, NULL, NULL, greedy, actions, raw, logp);
}

int shoal_c_policy_sample_recurrent(shoal_c_policy *p, const void *obs, int obs_dtype, int B,
                                    float *state, const uint8_t *first, int greedy, void *actions,
                                    float *raw, float *logp) {
  if (!state) return fail(SHOAL_EINVAL, "policy sample: NULL state");
  if (p && p->info.state_size == 0)
    return fail(SHOAL_ESTATE, "policy sample: %s's network has no recurrent state (no LSTM core)",
                p->info.env_id);
  return policy_sample(p, obs, obs_dtype, B, state, first, greedy, actions, raw, logp);
}
