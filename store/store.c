/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/store.c — the front of the store: the backends store_open knows, opening by
 * URI (read by uri.c), argument checks of runs, snapshots, the replay log, metrics and
 * trials before each calls its backend slot, the cache of runs known to exist, and
 * helpers every store file uses.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "store/internal.h"

/* The backends store_open knows. MongoDB is there when libmongoc was found at build
 * time (store/CMakeLists.txt compiles mongo*.c then). */
static const store__backend *const backends[] = {
    &store__file_backend,
#ifdef SHOAL_HAVE_MONGOC
    &store__mongo_backend,
#endif
};

/* ---- helpers ------------------------------------------------------------- */

static int name_chars_ok(const char *s, const char *extra) {
  if (!s || !s[0] || !isalnum((unsigned char)s[0])) return 0;
  size_t n = 0;
  for (; s[n]; n++) {
    unsigned char c = (unsigned char)s[n];
    if (n >= STORE_NAME_MAX - 1) return 0;
    if (isalnum(c) || c == '.' || c == '_' || c == '-') continue;
    if (extra && strchr(extra, c)) continue;
    return 0;
  }
  return 1;
}

int store_name_valid(const char *name) { return name_chars_ok(name, NULL); }
int store__metric_name_valid(const char *name) { return name_chars_ok(name, "/:"); }
int store__worker_valid(const char *name) { return name_chars_ok(name, ":@"); }

double store__wall_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

char *store__strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

uint32_t store__crc32(const void *bytes, size_t len) {
  uLong c = crc32(0L, Z_NULL, 0);
  const Bytef *p = bytes;
  while (len) {
    uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;
    c = crc32(c, p, n);
    p += n;
    len -= n;
  }
  return (uint32_t)c;
}

void store__put_le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
void store__put_le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
uint32_t store__get_le32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
uint64_t store__get_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

int store__grow(void **arr, size_t *cap, size_t n, size_t elem) {
  if (n < *cap) return 0;
  size_t nc = *cap ? *cap * 2 : 16;
  void *p = realloc(*arr, nc * elem);
  if (!p) return SHOAL_ENOMEM;
  *arr = p;
  *cap = nc;
  return 0;
}

const char *store_run_status_name(int status) {
  switch (status) {
    case STORE_RUN_CREATED: return "created";
    case STORE_RUN_RUNNING: return "running";
    case STORE_RUN_FINISHED: return "finished";
    case STORE_RUN_FAILED: return "failed";
    case STORE_RUN_STOPPED: return "stopped";
    default: return "unknown";
  }
}

const char *store_trial_status_name(int status) {
  switch (status) {
    case STORE_TRIAL_PENDING: return "pending";
    case STORE_TRIAL_RUNNING: return "running";
    case STORE_TRIAL_DONE: return "done";
    case STORE_TRIAL_FAILED: return "failed";
    default: return "unknown";
  }
}

void store_run_clear(store_run *run) {
  if (!run) return;
  free(run->config);
  memset(run, 0, sizeof *run);
}

void store_runs_free(store_run *runs, size_t n) {
  for (size_t i = 0; runs && i < n; i++) store_run_clear(&runs[i]);
  free(runs);
}

void store_trial_clear(store_trial *t) {
  if (!t) return;
  free(t->params);
  free(t->result);
  memset(t, 0, sizeof *t);
}

void store_trials_free(store_trial *t, size_t n) {
  for (size_t i = 0; t && i < n; i++) store_trial_clear(&t[i]);
  free(t);
}

/* ---- open / close -------------------------------------------------------- */

int store__open_backend(store **out, const store__backend *be, void *impl, const char *uri_redacted,
                        shoal_error *err) {
  store *st = calloc(1, sizeof *st);
  char *u = store__strdup(uri_redacted ? uri_redacted : "");
  if (!st || !u) {
    free(st);
    free(u);
    be->close(impl);
    return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory opening '%s'",
                           uri_redacted ? uri_redacted : "");
  }
  st->be = be;
  st->impl = impl;
  st->uri = u;
  pthread_mutex_init(&st->mu, NULL);
  *out = st;
  return 0;
}

static int open_store(store **out, const char *uri, bool lazy, shoal_error *err) {
  if (!out) return shoal_error_set(err, SHOAL_EINVAL, "store_open: out is NULL");
  uri = store__uri_or_default(uri);
  store_uri_info *u = malloc(sizeof *u);
  size_t rl = store_uri_redact(NULL, 0, uri);
  char *red = malloc(rl + 1);
  if (!u || !red) {
    free(u);
    free(red);
    return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  }
  store_uri_redact(red, rl + 1, uri);
  const store__backend *be = NULL;
  void *impl = NULL;
  int rc = store_uri_parse(uri, u, err);
  for (size_t i = 0; !rc && i < sizeof backends / sizeof backends[0] && !be; i++)
    if (strcmp(backends[i]->name, u->backend) == 0) be = backends[i];
  if (!rc && !be) /* only MongoDB can be missing */
    rc = shoal_error_set(err, SHOAL_ENOTSUP,
                         "store: '%s': this build of shoal has no MongoDB support (libmongoc "
                         "was not found at build time)",
                         red);
  if (!rc) rc = be->open(&impl, uri, u, lazy, err);
  if (!rc) rc = store__open_backend(out, be, impl, red, err);
  free(red);
  free(u);
  return rc;
}

int store_open(store **out, const char *uri, shoal_error *err) {
  return open_store(out, uri, false, err);
}

int store_open_lazy(store **out, const char *uri, shoal_error *err) {
  return open_store(out, uri, true, err);
}

void store_close(store *st) {
  if (!st) return;
  st->be->close(st->impl);
  pthread_mutex_destroy(&st->mu);
  free(st->known);
  free(st->uri);
  free(st);
}

const char *store_backend_name(const store *st) { return st->be->name; }
const char *store_uri(const store *st) { return st->uri; }

int store__unsupported(const store *st, const char *slot, shoal_error *err) {
  return shoal_error_set(err, SHOAL_ENOTSUP, "store: the %s backend has no %s (%s)", st->be->name,
                         slot, st->uri);
}

/* ---- argument checks ----------------------------------------------------- */

#define CHECK_NAME(what, s)                                                             \
  do {                                                                                  \
    if (!store_name_valid(s))                                                           \
      return shoal_error_set(err, SHOAL_EINVAL,                                         \
                             "store: invalid %s name '%.80s' (1-63 of [A-Za-z0-9._-], " \
                             "starting with a letter or digit)",                        \
                             what, (s) ? (s) : "(null)");                               \
  } while (0)

#define CHECK_PTR(p)                                                                            \
  do {                                                                                          \
    if (!(p)) return shoal_error_set(err, SHOAL_EINVAL, "store: %s: %s is NULL", __func__, #p); \
  } while (0)

static int check_run_status(int status, shoal_error *err) {
  if (status < STORE_RUN_CREATED || status > STORE_RUN_STOPPED)
    return shoal_error_set(err, SHOAL_EINVAL, "store: invalid run status %d", status);
  return 0;
}

/* Succeeds when run exists, from the cache or by asking the backend. */
static int require_run(store *st, const char *run, shoal_error *err) {
  pthread_mutex_lock(&st->mu);
  for (size_t i = 0; i < st->n_known; i++)
    if (strcmp(st->known[i], run) == 0) {
      pthread_mutex_unlock(&st->mu);
      return 0;
    }
  pthread_mutex_unlock(&st->mu);
  store_run r;
  memset(&r, 0, sizeof r);
  int rc = STORE__CALL(st, run_find, err, run, &r);
  if (rc == SHOAL_ENOENT)
    return shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' does not exist in %s", run, st->uri);
  if (rc) return rc;
  store_run_clear(&r);
  pthread_mutex_lock(&st->mu);
  if (store__grow((void **)&st->known, &st->cap_known, st->n_known, sizeof *st->known) == 0)
    snprintf(st->known[st->n_known++], STORE_NAME_MAX, "%s", run);
  pthread_mutex_unlock(&st->mu);
  return 0;
}

/* ---- runs ---------------------------------------------------------------- */

int store_run_create(store *st, const char *id, const char *config, int status, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("run", id);
  int rc = check_run_status(status, err);
  if (rc) return rc;
  return STORE__CALL(st, run_create, err, id, config ? config : "", status);
}

int store_run_find(store *st, const char *id, store_run *out, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(out);
  CHECK_NAME("run", id);
  store_run r;
  memset(&r, 0, sizeof r);
  int rc = STORE__CALL(st, run_find, err, id, &r);
  if (rc == 0) *out = r;
  return rc;
}

int store_run_list(store *st, store_run **out, size_t *n, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(out);
  CHECK_PTR(n);
  store_run *r = NULL;
  size_t k = 0;
  int rc = STORE__CALL(st, run_list, err, &r, &k);
  if (rc) return rc;
  *out = r;
  *n = k;
  return 0;
}

int store_run_set_status(store *st, const char *id, int status, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("run", id);
  int rc = check_run_status(status, err);
  if (rc) return rc;
  return STORE__CALL(st, run_set_status, err, id, status);
}

int store_run_set_config(store *st, const char *id, const char *config, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("run", id);
  CHECK_PTR(config);
  return STORE__CALL(st, run_set_config, err, id, config);
}

/* ---- the run's lease ------------------------------------------------------ */

int store_lease_take(store *st, const char *run, double ttl_s, store_lease_holder *holder,
                     shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("run", run);
  if (!(ttl_s > 0 && ttl_s < 1e6))
    return shoal_error_set(err, SHOAL_EINVAL, "store: lease of %g s", ttl_s);
  store_lease_holder h;
  memset(&h, 0, sizeof h);
  int rc = STORE__CALL(st, lease_take, err, run, ttl_s, &h);
  if (holder) *holder = h;
  return rc;
}

int store_lease_renew(store *st, const char *run, double ttl_s, bool stopping, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("run", run);
  if (!(ttl_s > 0 && ttl_s < 1e6))
    return shoal_error_set(err, SHOAL_EINVAL, "store: lease of %g s", ttl_s);
  return STORE__CALL(st, lease_renew, err, run, ttl_s, stopping);
}

int store_lease_release(store *st, const char *run, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("run", run);
  return STORE__CALL(st, lease_release, err, run);
}

/* The error of a lease another process holds. */
int store__lease_held(const char *run, const store_lease_holder *h, shoal_error *err) {
  return shoal_error_set(err, SHOAL_EEXIST,
                         "store: run '%s' is held by a learner, pid %lld on %s since %.0f s ago%s",
                         run, (long long)h->pid, h->host, store__wall_time() - h->started,
                         h->stopping ? " (stopping)" : "");
}

/* ---- snapshots ----------------------------------------------------------- */

int store_snapshot_put(store *st, const store_snapshot_meta *meta, const void *bytes, size_t len,
                       shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(meta);
  if (!bytes && len) CHECK_PTR(bytes);
  CHECK_NAME("run", meta->run);
  if (meta->version < 0)
    return shoal_error_set(err, SHOAL_EINVAL, "store: snapshot version %lld is negative",
                           (long long)meta->version);
  if (isnan(meta->wall_time) || isinf(meta->wall_time) || isinf(meta->score))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: snapshot %lld of run '%s': wall_time must be finite and "
                           "score finite or NaN",
                           (long long)meta->version, meta->run);
  int rc = require_run(st, meta->run, err);
  if (rc) return rc;
  store_snapshot_meta m = *meta;
  if (m.wall_time == 0) m.wall_time = store__wall_time();
  m.size = len;
  static const char empty = 0;
  return STORE__CALL(st, snapshot_put, err, &m, bytes ? bytes : &empty, len);
}

int store_snapshot_get(store *st, const char *run, int64_t version, store_snapshot_meta *meta,
                       void **bytes, size_t *len, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(bytes);
  CHECK_PTR(len);
  CHECK_NAME("run", run);
  if (version < STORE_BEST)
    return shoal_error_set(err, SHOAL_EINVAL, "store: invalid snapshot version %lld",
                           (long long)version);
  store_snapshot_meta m;
  memset(&m, 0, sizeof m);
  void *b = NULL;
  size_t l = 0;
  int rc = STORE__CALL(st, snapshot_get, err, run, version, &m, &b, &l);
  if (rc) return rc;
  if (meta) *meta = m;
  *bytes = b;
  *len = l;
  return 0;
}

int store_snapshot_list(store *st, const char *run, store_snapshot_meta **out, size_t *n,
                        shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(out);
  CHECK_PTR(n);
  CHECK_NAME("run", run);
  store_snapshot_meta *m = NULL;
  size_t k = 0;
  int rc = STORE__CALL(st, snapshot_list, err, run, &m, &k);
  if (rc) return rc;
  *out = m;
  *n = k;
  return 0;
}

/* ---- replay -------------------------------------------------------------- */

int store_replay_append(store *st, const char *run, uint64_t seq, const void *bytes, size_t len,
                        shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(bytes);
  CHECK_NAME("run", run);
  if (len == 0 || len > STORE_REPLAY_SEGMENT_MAX)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: replay segment %llu of run '%s' has %zu bytes (1..%zu allowed)",
                           (unsigned long long)seq, run, len, STORE_REPLAY_SEGMENT_MAX);
  if (seq > (uint64_t)INT64_MAX)
    return shoal_error_set(err, SHOAL_EINVAL, "store: replay seq %llu is above 2^63-1",
                           (unsigned long long)seq);
  int rc = require_run(st, run, err);
  if (rc) return rc;
  return STORE__CALL(st, replay_append, err, run, seq, bytes, len);
}

int store_replay_iter(store *st, const char *run, uint64_t from_seq, store_replay_fn fn, void *ctx,
                      shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(fn);
  CHECK_NAME("run", run);
  return STORE__CALL(st, replay_iter, err, run, from_seq, fn, ctx);
}

int store_replay_list(store *st, const char *run, uint64_t **seqs, size_t *n, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(seqs);
  CHECK_PTR(n);
  CHECK_NAME("run", run);
  uint64_t *s = NULL;
  size_t k = 0;
  int rc = STORE__CALL(st, replay_list, err, run, &s, &k);
  if (rc) return rc;
  *seqs = s;
  *n = k;
  return 0;
}

int store_replay_read(store *st, const char *run, uint64_t seq, void **bytes, size_t *len,
                      shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(bytes);
  CHECK_PTR(len);
  CHECK_NAME("run", run);
  void *b = NULL;
  size_t l = 0;
  int rc = STORE__CALL(st, replay_read, err, run, seq, &b, &l);
  if (rc) return rc;
  *bytes = b;
  *len = l;
  return 0;
}

int store_replay_trim(store *st, const char *run, uint64_t below, size_t *removed,
                      shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("run", run);
  size_t k = 0;
  int rc = STORE__CALL(st, replay_trim, err, run, below, &k);
  if (removed) *removed = k;
  return rc;
}

int store_local_dir(store *st, const char *run, char *out, size_t cap, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(out);
  if (run) CHECK_NAME("run", run);
  if (!st->be->local_dir)
    return shoal_error_set(err, SHOAL_ENOTSUP, "store: %s keeps no local files (%s)", st->be->name,
                           st->uri);
  return STORE__CALL(st, local_dir, err, run, out, cap);
}

/* ---- metrics ------------------------------------------------------------- */

int store_metrics_append(store *st, const store_metric *rows, size_t n, shoal_error *err) {
  CHECK_PTR(st);
  if (n == 0) return 0;
  CHECK_PTR(rows);
  for (size_t i = 0; i < n; i++) {
    if (!store_name_valid(rows[i].run))
      return shoal_error_set(err, SHOAL_EINVAL, "store: metric row %zu: invalid run name '%.80s'",
                             i, rows[i].run);
    if (!store__metric_name_valid(rows[i].name))
      return shoal_error_set(err, SHOAL_EINVAL,
                             "store: metric row %zu: invalid metric name '%.80s' (1-63 of "
                             "[A-Za-z0-9._/:-], starting with a letter or digit)",
                             i, rows[i].name);
    if (!isfinite(rows[i].time))
      return shoal_error_set(err, SHOAL_EINVAL, "store: metric row %zu ('%s'): time is not finite",
                             i, rows[i].name);
  }
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && strcmp(rows[i].run, rows[i - 1].run) == 0) continue;
    int rc = require_run(st, rows[i].run, err);
    if (rc) return rc;
  }
  return STORE__CALL(st, metrics_append, err, rows, n);
}

int store_metrics_query(store *st, const char *run, const char *name, int64_t step_min,
                        int64_t step_max, store_metric **out, size_t *n, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(out);
  CHECK_PTR(n);
  CHECK_NAME("run", run);
  if (name && !store__metric_name_valid(name))
    return shoal_error_set(err, SHOAL_EINVAL, "store: invalid metric name '%.80s'", name);
  store_metric *m = NULL;
  size_t k = 0;
  int rc = STORE__CALL(st, metrics_query, err, run, name, step_min, step_max, &m, &k);
  if (rc) return rc;
  *out = m;
  *n = k;
  return 0;
}

/* ---- trials -------------------------------------------------------------- */

#define CHECK_WORKER(w)                                                               \
  do {                                                                                \
    if (!store__worker_valid(w))                                                      \
      return shoal_error_set(err, SHOAL_EINVAL, "store: invalid worker name '%.80s'", \
                             (w) ? (w) : "(null)");                                   \
  } while (0)

int store_trial_create(store *st, const char *sweep, const char *id, const char *params,
                       shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("sweep", sweep);
  CHECK_NAME("trial", id);
  return STORE__CALL(st, trial_create, err, sweep, id, params ? params : "");
}

int store_trial_claim(store *st, const char *sweep, const char *worker, store_trial *out,
                      shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(out);
  CHECK_NAME("sweep", sweep);
  CHECK_WORKER(worker);
  store_trial t;
  memset(&t, 0, sizeof t);
  int rc = STORE__CALL(st, trial_claim, err, sweep, worker, &t);
  if (rc == 0) *out = t;
  return rc;
}

int store_trial_heartbeat(store *st, const char *sweep, const char *id, const char *worker,
                          shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("sweep", sweep);
  CHECK_NAME("trial", id);
  CHECK_WORKER(worker);
  return STORE__CALL(st, trial_heartbeat, err, sweep, id, worker);
}

int store_trial_complete(store *st, const char *sweep, const char *id, const char *worker,
                         int status, const char *result, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("sweep", sweep);
  CHECK_NAME("trial", id);
  CHECK_WORKER(worker);
  if (status != STORE_TRIAL_DONE && status != STORE_TRIAL_FAILED)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "store: trial '%s' completed with status %d (done or failed expected)",
                           id, status);
  return STORE__CALL(st, trial_complete, err, sweep, id, worker, status, result ? result : "");
}

int store_trial_release(store *st, const char *sweep, const char *id, const char *worker,
                        shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("sweep", sweep);
  CHECK_NAME("trial", id);
  CHECK_WORKER(worker);
  return STORE__CALL(st, trial_release, err, sweep, id, worker);
}

int store_trial_requeue_stale(store *st, const char *sweep, double max_age_s, size_t *n_requeued,
                              shoal_error *err) {
  CHECK_PTR(st);
  CHECK_NAME("sweep", sweep);
  if (!(max_age_s >= 0) || isinf(max_age_s))
    return shoal_error_set(err, SHOAL_EINVAL, "store: max_age_s %g must be finite and >= 0",
                           max_age_s);
  size_t n = 0;
  int rc = STORE__CALL(st, trial_requeue_stale, err, sweep, max_age_s, &n);
  if (n_requeued) *n_requeued = n;
  return rc;
}

int store_trial_get(store *st, const char *sweep, const char *id, store_trial *out,
                    shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(out);
  CHECK_NAME("sweep", sweep);
  CHECK_NAME("trial", id);
  store_trial t;
  memset(&t, 0, sizeof t);
  int rc = STORE__CALL(st, trial_get, err, sweep, id, &t);
  if (rc == 0) *out = t;
  return rc;
}

int store_trial_list(store *st, const char *sweep, store_trial **out, size_t *n, shoal_error *err) {
  CHECK_PTR(st);
  CHECK_PTR(out);
  CHECK_PTR(n);
  CHECK_NAME("sweep", sweep);
  store_trial *t = NULL;
  size_t k = 0;
  int rc = STORE__CALL(st, trial_list, err, sweep, &t, &k);
  if (rc) return rc;
  *out = t;
  *n = k;
  return 0;
}
