/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/mongo.c — the MongoDB backend (libmongoc 1.x) and its table.
 *
 * Database from the URI ("shoal" when it names none). Collections:
 *   runs       {_id: run, config, status, created, updated}
 *   metrics    {run, step, time, name, value}            index run+step, run+name+step
 *   replay     {run, seq, len, data: binary}             unique index run+seq
 *   trials     {_id: "sweep/id", sweep, id, params, status, worker, attempt, created,
 *               heartbeat, result}                        index sweep+status+created
 *   snapshots  a GridFS bucket (snapshots.files / snapshots.chunks): files named
 *              "<run>/<version>.safetensors" with metadata {run, version, env_steps,
 *              updates, wall_time, score (when finite), size}; unique index
 *              metadata.run+metadata.version. GridFS writes the files document after
 *              the last chunk, so a crash mid-upload leaves only orphan chunks and the
 *              previous snapshots readable; chunks make snapshots above 16 MB work.
 *   segments, datasets, dataset_chunks, media: mongo_segments.c and mongo_data.c
 *
 * One mongoc_client_pool for the store; each operation pops a client and pushes it
 * back, so the handle is thread-safe. Writes are retryable and use write concern
 * majority (10 s wtimeout) unless the URI sets w; server selection times out after
 * 5 s unless the URI says otherwise, so a store that is down fails fast at open.
 * Trials are claimed with findAndModify, which is atomic on one document.
 */
#define _GNU_SOURCE
#include <bson/bson.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <signal.h>

#include "store/mongo_backend.h"

#include "common/crc32c.h"

typedef struct mongo_store {
  mongoc_client_pool_t *pool;
  char db[128];
  char *password; /* to scrub it from any server or driver message */
  char uri[512];  /* redacted, for messages */
  /* Opened lazily while the deployment was unreachable: the indexes are made by the
   * first call that finds it back (see op_begin). */
  atomic_bool ready;
} mongo_store;

/* Server error codes (src/mongo/base/error_codes.yml in the server). */
enum { UNAUTHORIZED = 13, AUTHENTICATION_FAILED = 18, DUPLICATE_KEY = 11000 };
enum { CHUNK_BYTES = 1 << 20, IO_TIMEOUT_MS = 0 };

/* ---- errors -------------------------------------------------------------- */

/* Copies msg into out with every occurrence of secret replaced by "***". */
static void scrub(char *out, size_t cap, const char *msg, const char *secret) {
  size_t sl = secret ? strlen(secret) : 0, o = 0;
  for (const char *p = msg; *p && o + 1 < cap;) {
    if (sl && strncmp(p, secret, sl) == 0) {
      for (const char *r = "***"; *r && o + 1 < cap; r++) out[o++] = *r;
      p += sl;
    } else {
      out[o++] = *p++;
    }
  }
  out[o] = 0;
}

static int merr(mongo_store *ms, shoal_error *err, const bson_error_t *be, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int merr(mongo_store *ms, shoal_error *err, const bson_error_t *be, const char *fmt, ...) {
  int code = SHOAL_EIO;
  if (be->code == DUPLICATE_KEY) {
    code = SHOAL_EEXIST;
  } else if ((be->domain == MONGOC_ERROR_CLIENT && be->code == MONGOC_ERROR_CLIENT_AUTHENTICATE) ||
             (be->domain == MONGOC_ERROR_SERVER &&
              (be->code == UNAUTHORIZED || be->code == AUTHENTICATION_FAILED))) {
    code = SHOAL_EPERM; /* retrying will not help */
  } else if (be->domain == MONGOC_ERROR_SERVER_SELECTION || be->domain == MONGOC_ERROR_STREAM ||
             be->domain == MONGOC_ERROR_CLIENT) {
    code = SHOAL_ENET;
  }
  char what[256], msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  scrub(msg, sizeof msg, be->message, ms ? ms->password : NULL);
  return shoal_error_set(err, code, "store: %s in '%s': %s (mongodb error %u.%u)", what,
                         ms ? ms->uri : "mongodb", msg, be->domain, be->code);
}

/* Passwords of the stores opened so far, masked in whatever libmongoc logs. */
static pthread_mutex_t secrets_mu = PTHREAD_MUTEX_INITIALIZER;
static char secrets[8][256];
static int n_secrets;

static void remember_secret(const char *pw) {
  if (!pw || !pw[0]) return;
  pthread_mutex_lock(&secrets_mu);
  int known = 0;
  for (int i = 0; i < n_secrets; i++) known |= strcmp(secrets[i], pw) == 0;
  if (!known) snprintf(secrets[n_secrets < 8 ? n_secrets++ : 7], sizeof secrets[0], "%s", pw);
  pthread_mutex_unlock(&secrets_mu);
}

/* libmongoc logs warnings itself; drop the chatter and mask URIs and passwords in
 * what is kept. */
static void log_handler(mongoc_log_level_t level, const char *domain, const char *message,
                        void *ud) {
  if (level > MONGOC_LOG_LEVEL_WARNING) return;
  char masked[1024];
  pthread_mutex_lock(&secrets_mu);
  snprintf(masked, sizeof masked, "%s", message);
  for (int i = 0; i < n_secrets; i++) {
    char tmp[1024];
    scrub(tmp, sizeof tmp, masked, secrets[i]);
    memcpy(masked, tmp, sizeof masked);
  }
  pthread_mutex_unlock(&secrets_mu);
  message = masked;
  char buf[1024];
  const char *u = strstr(message, "mongodb");
  if (u) {
    size_t pre = (size_t)(u - message);
    if (pre > 300) pre = 300;
    int n = snprintf(buf, sizeof buf, "%.*s", (int)pre, message);
    store_uri_redact(buf + n, sizeof buf - (size_t)n, u);
  } else {
    snprintf(buf, sizeof buf, "%s", message);
  }
  fprintf(stderr, "shoal store: libmongoc %s: %s\n", domain, buf);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init_mongoc(void) {
  mongoc_init();
  mongoc_log_set_handler(log_handler, NULL);
}

/* ---- open / close -------------------------------------------------------- */

static int create_indexes(mongo_store *ms, mongoc_client_t *c, const char *coll, const bson_t *idx,
                          shoal_error *err) {
  bson_t cmd;
  bson_init(&cmd);
  BSON_APPEND_UTF8(&cmd, "createIndexes", coll);
  BSON_APPEND_ARRAY(&cmd, "indexes", idx);
  bson_error_t be;
  mongoc_database_t *db = mongoc_client_get_database(c, ms->db);
  bool ok = mongoc_database_write_command_with_opts(db, &cmd, NULL, NULL, &be);
  mongoc_database_destroy(db);
  bson_destroy(&cmd);
  if (!ok) return merr(ms, err, &be, "cannot create the indexes of '%s'", coll);
  return 0;
}

static int setup(mongo_store *ms, shoal_error *err) {
  mongoc_client_t *c = mongoc_client_pool_pop(ms->pool);
  bson_error_t be;
  bson_t *ping = BCON_NEW("ping", BCON_INT32(1));
  int rc = 0;
  if (!mongoc_client_command_simple(c, "admin", ping, NULL, NULL, &be)) {
    rc = merr(ms, err, &be, "cannot reach the MongoDB deployment");
    if (rc != SHOAL_EPERM) { /* refused credentials stay EPERM; the rest is the network */
      rc = SHOAL_ENET;
      if (err) err->code = rc;
    }
  }
  bson_destroy(ping);
  struct {
    const char *coll;
    bson_t *idx;
  } ix[] = {
      {"metrics",
       BCON_NEW("0", "{", "key", "{", "run", BCON_INT32(1), "step", BCON_INT32(1), "}", "name",
                "run_step", "}", "1", "{", "key", "{", "run", BCON_INT32(1), "name", BCON_INT32(1),
                "step", BCON_INT32(1), "}", "name", "run_name_step", "}")},
      {"replay", BCON_NEW("0", "{", "key", "{", "run", BCON_INT32(1), "seq", BCON_INT32(1), "}",
                          "name", "run_seq", "unique", BCON_BOOL(true), "}")},
      {"trials", BCON_NEW("0", "{", "key", "{", "sweep", BCON_INT32(1), "status", BCON_INT32(1),
                          "created", BCON_INT32(1), "}", "name", "sweep_status", "}")},
      {"snapshots.files",
       BCON_NEW("0", "{", "key", "{", "metadata.run", BCON_INT32(1), "metadata.version",
                BCON_INT32(1), "}", "name", "run_version", "unique", BCON_BOOL(true), "}", "1", "{",
                "key", "{", "metadata.run", BCON_INT32(1), "metadata.score", BCON_INT32(-1), "}",
                "name", "run_score", "}")},
  };
  for (size_t i = 0; i < sizeof ix / sizeof ix[0]; i++) {
    if (!rc) rc = create_indexes(ms, c, ix[i].coll, ix[i].idx, err);
    bson_destroy(ix[i].idx);
  }
  mongoc_client_pool_push(ms->pool, c);
  return rc;
}

static void mongo_close(void *impl) {
  mongo_store *ms = impl;
  if (!ms) return;
  if (ms->pool) mongoc_client_pool_destroy(ms->pool);
  if (ms->password) {
    memset(ms->password, 0, strlen(ms->password));
    free(ms->password);
  }
  free(ms);
}

static int mongo_open(void **impl, const char *uri_str, const store_uri_info *u, bool lazy,
                      shoal_error *err) {
  (void)u; /* libmongoc reads the URI */
  pthread_once(&init_once, init_mongoc);
  mongo_store *ms = calloc(1, sizeof *ms);
  if (!ms) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  store_uri_redact(ms->uri, sizeof ms->uri, uri_str);
  /* The password as written in the URI, to scrub it even from parse errors. */
  const char *s = strstr(uri_str, "://"), *at = s ? strchr(s + 3, '@') : NULL;
  const char *colon = s && at ? memchr(s + 3, ':', (size_t)(at - s - 3)) : NULL;
  if (colon && at > colon + 1) ms->password = strndup(colon + 1, (size_t)(at - colon - 1));
  remember_secret(ms->password);

  bson_error_t be;
  mongoc_uri_t *uri = mongoc_uri_new_with_error(uri_str, &be);
  int rc = 0;
  if (!uri) {
    char msg[400];
    scrub(msg, sizeof msg, be.message, ms->password);
    rc = shoal_error_set(err, SHOAL_EINVAL, "store: invalid MongoDB URI '%s': %s", ms->uri, msg);
    goto fail;
  }
  if (mongoc_uri_get_username(uri) && !mongoc_uri_get_password(uri)) {
    const char *pw = getenv("SHOAL_STORE_PASSWORD");
    if (pw && pw[0]) {
      mongoc_uri_set_password(uri, pw);
      free(ms->password);
      ms->password = strdup(pw);
      remember_secret(pw);
    }
  }
  const mongoc_write_concern_t *wc = mongoc_uri_get_write_concern(uri);
  if (!wc || mongoc_write_concern_get_w(wc) == MONGOC_WRITE_CONCERN_W_DEFAULT) {
    mongoc_write_concern_t *w2 = wc ? mongoc_write_concern_copy(wc) : mongoc_write_concern_new();
    mongoc_write_concern_set_w(w2, MONGOC_WRITE_CONCERN_W_MAJORITY);
    if (!mongoc_uri_has_option(uri, MONGOC_URI_WTIMEOUTMS))
      mongoc_write_concern_set_wtimeout_int64(w2, 10000);
    mongoc_uri_set_write_concern(uri, w2);
    mongoc_write_concern_destroy(w2);
  }
  if (!mongoc_uri_has_option(uri, MONGOC_URI_RETRYWRITES))
    mongoc_uri_set_option_as_bool(uri, MONGOC_URI_RETRYWRITES, true);
  if (!mongoc_uri_has_option(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS))
    mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, 5000);
  const char *db = mongoc_uri_get_database(uri);
  snprintf(ms->db, sizeof ms->db, "%s", db && db[0] ? db : "shoal");

  ms->pool = mongoc_client_pool_new_with_error(uri, &be);
  mongoc_uri_destroy(uri);
  if (!ms->pool) {
    char msg[400];
    scrub(msg, sizeof msg, be.message, ms->password);
    rc = shoal_error_set(err, SHOAL_EINVAL, "store: cannot use MongoDB URI '%s': %s", ms->uri, msg);
    goto fail;
  }
  mongoc_client_pool_set_error_api(ms->pool, MONGOC_ERROR_API_VERSION_2);
  mongoc_client_pool_set_appname(ms->pool, "shoal");
  rc = setup(ms, err);
  if (rc == SHOAL_ENET && lazy) {
    /* Unreachable now, maybe not later: every call fails with SHOAL_ENET until the
     * deployment answers (after serverSelectionTimeoutMS each). */
    const char *m = err && err->msg[0] ? err->msg : "MongoDB unreachable";
    if (!strncmp(m, "store: ", 7)) m += 7; /* "shoal store: " says it already */
    fprintf(stderr, "shoal store: %s; going on without it until it answers\n", m);
    rc = 0;
  } else if (rc) {
    goto fail;
  } else {
    atomic_store(&ms->ready, true);
  }
  *impl = ms;
  return 0;
fail:
  mongo_close(ms);
  return rc;
}

/* ---- for mongo_segments.c and mongo_data.c ------------------------------- */

mongoc_client_t *store__mongo_pop(void *impl, const char **db) {
  mongo_store *ms = impl;
  if (db) *db = ms->db;
  return mongoc_client_pool_pop(ms->pool);
}
void store__mongo_push(void *impl, mongoc_client_t *client) {
  mongoc_client_pool_push(((mongo_store *)impl)->pool, client);
}
int store__mongo_error(void *impl, shoal_error *err, const bson_error_t *be, const char *what) {
  return merr(impl, err, be, "%s", what);
}
int store__mongo_upload_close(void *impl, mongoc_stream_t *s, shoal_error *err, const char *what,
                              ...) {
  bson_error_t be;
  memset(&be, 0, sizeof be);
  /* The stream's error is read whether or not the close succeeded: after a failed close it
   * holds the reason (the files document's insert), which must not be skipped. */
  bool closed = mongoc_stream_close(s) == 0;
  bool failed = mongoc_gridfs_bucket_stream_error(s, &be);
  if (closed && !failed) return 0;
  if (!failed) bson_set_error(&be, MONGOC_ERROR_GRIDFS, 0, "the upload could not be finished");
  char msg[256];
  va_list ap;
  va_start(ap, what);
  vsnprintf(msg, sizeof msg, what, ap);
  va_end(ap);
  return merr(impl, err, &be, "%s", msg);
}

/* ---- helpers ------------------------------------------------------------- */

typedef struct {
  mongo_store *ms;
  mongoc_client_t *c;
  mongoc_collection_t *coll;
} op;

static op op_begin(mongo_store *ms, const char *coll) {
  /* A lazily opened store makes its indexes once the deployment answers; until then
   * the call goes ahead and fails on its own with the network error. */
  if (!atomic_load(&ms->ready) && setup(ms, NULL) == 0) atomic_store(&ms->ready, true);
  op o = {ms, mongoc_client_pool_pop(ms->pool), NULL};
  if (coll) o.coll = mongoc_client_get_collection(o.c, ms->db, coll);
  return o;
}

static void op_end(op *o) {
  if (o->coll) mongoc_collection_destroy(o->coll);
  mongoc_client_pool_push(o->ms->pool, o->c);
}

static const char *dstr(const bson_t *d, const char *key) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, d, key) && BSON_ITER_HOLDS_UTF8(&it))
    return bson_iter_utf8(&it, NULL);
  return NULL;
}

static double ddouble(const bson_t *d, const char *key, double dflt) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, d, key)) return dflt;
  if (BSON_ITER_HOLDS_DOUBLE(&it)) return bson_iter_double(&it);
  if (BSON_ITER_HOLDS_INT32(&it) || BSON_ITER_HOLDS_INT64(&it))
    return (double)bson_iter_as_int64(&it);
  return dflt;
}

static int64_t dint(const bson_t *d, const char *key, int64_t dflt) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, d, key)) return dflt;
  return bson_iter_as_int64(&it);
}

static int64_t reply_count(const bson_t *reply, const char *key) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, reply, key)) return bson_iter_as_int64(&it);
  return 0;
}

/* Finds one document of coll matching filter; *found is 0 when none. */
static int find_one(op *o, const bson_t *filter, const bson_t *opts, bson_t *out, int *found,
                    shoal_error *err) {
  bson_t def;
  bson_init(&def);
  BSON_APPEND_INT64(&def, "limit", 1);
  mongoc_cursor_t *cur =
      mongoc_collection_find_with_opts(o->coll, filter, opts ? opts : &def, NULL);
  const bson_t *d;
  *found = 0;
  if (mongoc_cursor_next(cur, &d)) {
    bson_copy_to(d, out);
    *found = 1;
  }
  bson_error_t be;
  int rc = 0;
  if (mongoc_cursor_error(cur, &be)) {
    if (*found) bson_destroy(out);
    *found = 0;
    rc = merr(o->ms, err, &be, "find in '%s'", mongoc_collection_get_name(o->coll));
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(&def);
  return rc;
}

/* ---- runs ---------------------------------------------------------------- */

static int run_from_doc(const bson_t *d, store_run *r, shoal_error *err) {
  memset(r, 0, sizeof *r);
  const char *id = dstr(d, "_id"), *st = dstr(d, "status"), *cfg = dstr(d, "config");
  snprintf(r->id, sizeof r->id, "%s", id ? id : "");
  r->status = -1;
  for (int i = STORE_RUN_CREATED; i <= STORE_RUN_STOPPED; i++)
    if (st && strcmp(st, store_run_status_name(i)) == 0) r->status = i;
  if (!id || r->status < 0)
    return shoal_error_set(err, SHOAL_EFORMAT, "store: a document in 'runs' lacks _id or status");
  r->created_time = ddouble(d, "created", 0);
  r->updated_time = ddouble(d, "updated", 0);
  r->config = store__strdup(cfg ? cfg : "");
  if (!r->config) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  return 0;
}

static int mongo_run_create(void *impl, const char *id, const char *config, int status,
                            shoal_error *err) {
  op o = op_begin(impl, "runs");
  double now = store__wall_time();
  bson_t *doc = BCON_NEW("_id", BCON_UTF8(id), "config", BCON_UTF8(config), "status",
                         BCON_UTF8(store_run_status_name(status)), "created", BCON_DOUBLE(now),
                         "updated", BCON_DOUBLE(now));
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_insert_one(o.coll, doc, NULL, NULL, &be)) {
    rc = merr(impl, err, &be, "cannot create run '%s'", id);
    if (rc == SHOAL_EEXIST) shoal_error_set(err, rc, "store: run '%s' exists", id);
  }
  bson_destroy(doc);
  op_end(&o);
  return rc;
}

static int mongo_run_find(void *impl, const char *id, store_run *out, shoal_error *err) {
  op o = op_begin(impl, "runs");
  bson_t *f = BCON_NEW("_id", BCON_UTF8(id));
  bson_t d;
  int found = 0;
  int rc = find_one(&o, f, NULL, &d, &found, err);
  if (!rc && !found) rc = shoal_error_set(err, SHOAL_ENOENT, "store: no run '%s'", id);
  if (!rc) {
    rc = run_from_doc(&d, out, err);
    if (rc) store_run_clear(out);
  }
  if (found) bson_destroy(&d);
  bson_destroy(f);
  op_end(&o);
  return rc;
}

static int mongo_run_list(void *impl, store_run **out, size_t *n, shoal_error *err) {
  op o = op_begin(impl, "runs");
  bson_t f;
  bson_init(&f);
  bson_t *opts = BCON_NEW("sort", "{", "_id", BCON_INT32(1), "}");
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o.coll, &f, opts, NULL);
  store_run *arr = NULL;
  size_t k = 0, cap = 0;
  const bson_t *d;
  int rc = 0;
  while (!rc && mongoc_cursor_next(cur, &d)) {
    if ((rc = store__grow((void **)&arr, &cap, k, sizeof *arr))) {
      shoal_error_set(err, rc, "store: out of memory listing runs");
      break;
    }
    if ((rc = run_from_doc(d, &arr[k], err)))
      store_run_clear(&arr[k]);
    else
      k++;
  }
  bson_error_t be;
  if (!rc && mongoc_cursor_error(cur, &be)) rc = merr(impl, err, &be, "cannot list runs");
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(&f);
  op_end(&o);
  if (rc) {
    store_runs_free(arr, k);
    return rc;
  }
  *out = arr;
  *n = k;
  return 0;
}

/* Applies update upd (taken: destroyed here) to run id's document. */
static int run_update(void *impl, const char *id, bson_t *upd, shoal_error *err) {
  op o = op_begin(impl, "runs");
  bson_t *sel = BCON_NEW("_id", BCON_UTF8(id));
  bson_t reply;
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_update_one(o.coll, sel, upd, NULL, &reply, &be))
    rc = merr(impl, err, &be, "cannot update run '%s'", id);
  else if (reply_count(&reply, "matchedCount") == 0)
    rc = shoal_error_set(err, SHOAL_ENOENT, "store: no run '%s'", id);
  bson_destroy(&reply);
  bson_destroy(upd);
  bson_destroy(sel);
  op_end(&o);
  return rc;
}

static int mongo_run_set_status(void *impl, const char *id, int status, shoal_error *err) {
  return run_update(impl, id,
                    BCON_NEW("$set", "{", "status", BCON_UTF8(store_run_status_name(status)),
                             "updated", BCON_DOUBLE(store__wall_time()), "}"),
                    err);
}

static int mongo_run_set_config(void *impl, const char *id, const char *config, shoal_error *err) {
  return run_update(impl, id, BCON_NEW("$set", "{", "config", BCON_UTF8(config), "}"), err);
}

/* ---- the run's lease (store.h): a document of `leases` per run ------------------------------ */

static void lease_me(store_lease_holder *me) {
  memset(me, 0, sizeof *me);
  if (gethostname(me->host, sizeof me->host - 1)) snprintf(me->host, sizeof me->host, "?");
  me->pid = (int64_t)getpid();
}

static void lease_from_doc(const bson_t *d, store_lease_holder *h) {
  memset(h, 0, sizeof *h);
  const char *host = dstr(d, "host");
  snprintf(h->host, sizeof h->host, "%s", host ? host : "?");
  h->pid = dint(d, "pid", 0);
  h->started = ddouble(d, "started", 0);
  h->expires = ddouble(d, "expires", 0);
  bson_iter_t it;
  h->stopping = bson_iter_init_find(&it, d, "stopping") && bson_iter_as_bool(&it);
}

/* Whether h no longer holds: lapsed, or a process of this host that is gone. */
static bool lease_lapsed(const store_lease_holder *h, const store_lease_holder *me, double now) {
  if (h->expires < now) return true;
  return !strcmp(h->host, me->host) && h->pid > 0 && kill((pid_t)h->pid, 0) != 0 && errno == ESRCH;
}

/* Sets the lease document selected by sel to me for ttl; *matched says whether one was. */
static int lease_set(op *o, const bson_t *sel, const store_lease_holder *me, double ttl,
                     bool stopping, bool fresh, int *matched, shoal_error *err) {
  double now = store__wall_time();
  bson_t *upd = fresh ? BCON_NEW("$set", "{", "host", BCON_UTF8(me->host), "pid",
                                 BCON_INT64(me->pid), "started", BCON_DOUBLE(now), "expires",
                                 BCON_DOUBLE(now + ttl), "stopping", BCON_BOOL(stopping), "}")
                      : BCON_NEW("$set", "{", "expires", BCON_DOUBLE(now + ttl), "stopping",
                                 BCON_BOOL(stopping), "}");
  bson_t reply;
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_update_one(o->coll, sel, upd, NULL, &reply, &be))
    rc = merr(o->ms, err, &be, "cannot update a lease");
  else
    *matched = reply_count(&reply, "matchedCount") > 0;
  bson_destroy(&reply);
  bson_destroy(upd);
  return rc;
}

static int mongo_lease_take(void *impl, const char *run, double ttl, store_lease_holder *holder,
                            shoal_error *err) {
  op o = op_begin(impl, "leases");
  store_lease_holder me;
  lease_me(&me);
  double now = store__wall_time();
  bson_t *doc = BCON_NEW("_id", BCON_UTF8(run), "host", BCON_UTF8(me.host), "pid",
                         BCON_INT64(me.pid), "started", BCON_DOUBLE(now), "expires",
                         BCON_DOUBLE(now + ttl), "stopping", BCON_BOOL(false));
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_insert_one(o.coll, doc, NULL, NULL, &be)) {
    shoal_error ierr = {0};
    rc = merr(impl, &ierr, &be, "cannot take the lease of run '%s'", run);
    if (rc != SHOAL_EEXIST) {
      if (err) *err = ierr;
    } else {
      /* Held: by this process already, by one that lapsed, or by a live one. */
      bson_t *f = BCON_NEW("_id", BCON_UTF8(run));
      bson_t d;
      int found = 0, matched = 0;
      rc = find_one(&o, f, NULL, &d, &found, err);
      if (!rc && found) {
        lease_from_doc(&d, holder);
        bson_destroy(&d);
        bool mine = !strcmp(holder->host, me.host) && holder->pid == me.pid;
        if (mine || lease_lapsed(holder, &me, store__wall_time())) {
          /* Only that holder's document: of two takers, one wins. */
          bson_t *sel = BCON_NEW("_id", BCON_UTF8(run), "host", BCON_UTF8(holder->host), "pid",
                                 BCON_INT64(holder->pid), "started", BCON_DOUBLE(holder->started));
          rc = lease_set(&o, sel, &me, ttl, false, !mine, &matched, err);
          bson_destroy(sel);
          if (!rc && !matched)
            rc = shoal_error_set(err, SHOAL_EEXIST,
                                 "store: run '%s': another learner took the lease meanwhile", run);
        } else {
          rc = store__lease_held(run, holder, err);
        }
      } else if (!rc) {
        rc =
            shoal_error_set(err, SHOAL_EEXIST, "store: run '%s': its lease changed meanwhile", run);
      }
      bson_destroy(f);
    }
  }
  if (!rc) *holder = me;
  bson_destroy(doc);
  op_end(&o);
  return rc;
}

static int mongo_lease_renew(void *impl, const char *run, double ttl, bool stopping,
                             shoal_error *err) {
  op o = op_begin(impl, "leases");
  store_lease_holder me;
  lease_me(&me);
  bson_t *sel =
      BCON_NEW("_id", BCON_UTF8(run), "host", BCON_UTF8(me.host), "pid", BCON_INT64(me.pid));
  int matched = 0;
  int rc = lease_set(&o, sel, &me, ttl, stopping, false, &matched, err);
  if (!rc && !matched)
    rc = shoal_error_set(err, SHOAL_ESTATE,
                         "store: run '%s': this learner no longer holds its lease", run);
  bson_destroy(sel);
  op_end(&o);
  return rc;
}

static int mongo_lease_release(void *impl, const char *run, shoal_error *err) {
  op o = op_begin(impl, "leases");
  store_lease_holder me;
  lease_me(&me);
  bson_t *sel =
      BCON_NEW("_id", BCON_UTF8(run), "host", BCON_UTF8(me.host), "pid", BCON_INT64(me.pid));
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_delete_one(o.coll, sel, NULL, NULL, &be))
    rc = merr(impl, err, &be, "cannot release the lease of run '%s'", run);
  bson_destroy(sel);
  op_end(&o);
  return rc;
}

/* ---- snapshots (GridFS) ---------------------------------------------------------------------- */

static int bucket_open(op *o, mongoc_gridfs_bucket_t **b, shoal_error *err) {
  mongoc_database_t *db = mongoc_client_get_database(o->c, o->ms->db);
  bson_t *opts =
      BCON_NEW("bucketName", BCON_UTF8("snapshots"), "chunkSizeBytes", BCON_INT32(CHUNK_BYTES));
  bson_error_t be;
  *b = mongoc_gridfs_bucket_new(db, opts, NULL, &be);
  bson_destroy(opts);
  mongoc_database_destroy(db);
  if (!*b) return merr(o->ms, err, &be, "cannot open the GridFS bucket 'snapshots'");
  return 0;
}

static void meta_from_files_doc(const bson_t *d, store_snapshot_meta *m) {
  memset(m, 0, sizeof *m);
  m->score = NAN;
  m->size = (uint64_t)dint(d, "length", 0);
  bson_iter_t it, md;
  if (bson_iter_init_find(&it, d, "metadata") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
    const uint8_t *data;
    uint32_t len;
    bson_t meta;
    bson_iter_document(&it, &len, &data);
    if (bson_init_static(&meta, data, len)) {
      const char *run = dstr(&meta, "run");
      snprintf(m->run, sizeof m->run, "%s", run ? run : "");
      m->version = dint(&meta, "version", -1);
      m->env_steps = dint(&meta, "env_steps", 0);
      m->updates = dint(&meta, "updates", 0);
      m->wall_time = ddouble(&meta, "wall_time", 0);
      m->score = ddouble(&meta, "score", NAN);
    }
  }
  (void)md;
}

static int mongo_snapshot_put(void *impl, const store_snapshot_meta *meta, const void *bytes,
                              size_t len, shoal_error *err) {
  mongo_store *ms = impl;
  op o = op_begin(ms, NULL);
  mongoc_gridfs_bucket_t *b = NULL;
  int rc = bucket_open(&o, &b, err);
  if (rc) {
    op_end(&o);
    return rc;
  }
  bson_t *filter =
      BCON_NEW("metadata.run", BCON_UTF8(meta->run), "metadata.version", BCON_INT64(meta->version));
  bson_t *fopts = BCON_NEW("limit", BCON_INT64(1));
  mongoc_cursor_t *cur = mongoc_gridfs_bucket_find(b, filter, fopts);
  const bson_t *d;
  bson_error_t be;
  if (mongoc_cursor_next(cur, &d))
    rc = shoal_error_set(err, SHOAL_EEXIST, "store: run '%s' has snapshot %" PRId64 " already",
                         meta->run, meta->version);
  else if (mongoc_cursor_error(cur, &be))
    rc = merr(ms, err, &be, "cannot look up snapshot %" PRId64 " of run '%s'", meta->version,
              meta->run);
  mongoc_cursor_destroy(cur);
  bson_destroy(fopts);
  bson_destroy(filter);

  bson_value_t file_id;
  mongoc_stream_t *s = NULL;
  int have_id = 0;
  if (!rc) {
    char fname[STORE_NAME_MAX + 40];
    snprintf(fname, sizeof fname, "%s/%" PRId64 ".safetensors", meta->run, meta->version);
    bson_t opts, md;
    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "metadata", &md);
    BSON_APPEND_UTF8(&md, "run", meta->run);
    BSON_APPEND_INT64(&md, "version", meta->version);
    BSON_APPEND_INT64(&md, "env_steps", meta->env_steps);
    BSON_APPEND_INT64(&md, "updates", meta->updates);
    BSON_APPEND_DOUBLE(&md, "wall_time", meta->wall_time);
    if (!isnan(meta->score)) BSON_APPEND_DOUBLE(&md, "score", meta->score);
    BSON_APPEND_INT64(&md, "size", (int64_t)len);
    bson_append_document_end(&opts, &md);
    s = mongoc_gridfs_bucket_open_upload_stream(b, fname, &opts, &file_id, &be);
    bson_destroy(&opts);
    if (!s)
      rc = merr(ms, err, &be, "cannot start the upload of '%s'", fname);
    else
      have_id = 1;
  }
  const char *p = bytes;
  size_t left = len;
  while (!rc && left) {
    size_t n = left > (size_t)CHUNK_BYTES * 8 ? (size_t)CHUNK_BYTES * 8 : left;
    ssize_t w = mongoc_stream_write(s, (void *)p, n, IO_TIMEOUT_MS);
    if (w <= 0) {
      if (!mongoc_gridfs_bucket_stream_error(s, &be))
        bson_set_error(&be, MONGOC_ERROR_GRIDFS, 0, "short write");
      rc = merr(ms, err, &be, "cannot upload snapshot %" PRId64 " of run '%s'", meta->version,
                meta->run);
      break;
    }
    p += w;
    left -= (size_t)w;
  }
  if (s) {
    if (rc) {
      mongoc_gridfs_bucket_abort_upload(s);
    } else if ((rc = store__mongo_upload_close(ms, s, err,
                                               "cannot finish snapshot %" PRId64 " of run '%s'",
                                               meta->version, meta->run))) {
      /* The files document is written on close; a duplicate key here means another
       * writer put the same version at the same time, and its copy stands. */
      /* No files document names the chunks written: remove them (delete_by_id
       * would stop at the missing files document). */
      if (have_id) {
        mongoc_collection_t *chunks = mongoc_client_get_collection(o.c, ms->db, "snapshots.chunks");
        bson_t sel;
        bson_init(&sel);
        BSON_APPEND_VALUE(&sel, "files_id", &file_id);
        bson_error_t be2;
        if (!mongoc_collection_delete_many(chunks, &sel, NULL, NULL, &be2)) {
          /* Orphan chunks only cost space; the error above is the one to report. */
        }
        bson_destroy(&sel);
        mongoc_collection_destroy(chunks);
      }
      if (rc == SHOAL_EEXIST)
        shoal_error_set(err, rc, "store: run '%s' has snapshot %" PRId64 " already", meta->run,
                        meta->version);
    }
    mongoc_stream_destroy(s);
  }
  if (have_id) bson_value_destroy(&file_id);
  mongoc_gridfs_bucket_destroy(b);
  op_end(&o);
  return rc;
}

static int mongo_snapshot_get(void *impl, const char *run, int64_t version,
                              store_snapshot_meta *meta, void **bytes, size_t *len,
                              shoal_error *err) {
  mongo_store *ms = impl;
  op o = op_begin(ms, NULL);
  mongoc_gridfs_bucket_t *b = NULL;
  int rc = bucket_open(&o, &b, err);
  if (rc) {
    op_end(&o);
    return rc;
  }
  bson_t *filter, *opts;
  if (version >= 0) {
    filter = BCON_NEW("metadata.run", BCON_UTF8(run), "metadata.version", BCON_INT64(version));
    opts = BCON_NEW("limit", BCON_INT64(1));
  } else if (version == STORE_LATEST) {
    filter = BCON_NEW("metadata.run", BCON_UTF8(run));
    opts = BCON_NEW("sort", "{", "metadata.version", BCON_INT32(-1), "}", "limit", BCON_INT64(1));
  } else {
    filter = BCON_NEW("metadata.run", BCON_UTF8(run), "metadata.score", "{", "$exists",
                      BCON_BOOL(true), "}");
    opts = BCON_NEW("sort", "{", "metadata.score", BCON_INT32(-1), "metadata.version",
                    BCON_INT32(-1), "}", "limit", BCON_INT64(1));
  }
  mongoc_cursor_t *cur = mongoc_gridfs_bucket_find(b, filter, opts);
  const bson_t *d;
  bson_error_t be;
  char *buf = NULL;
  store_snapshot_meta m;
  if (mongoc_cursor_next(cur, &d)) {
    meta_from_files_doc(d, &m);
    bson_iter_t it;
    mongoc_stream_t *s = NULL;
    if (!bson_iter_init_find(&it, d, "_id")) {
      rc = shoal_error_set(err, SHOAL_EFORMAT, "store: a snapshots.files document has no _id");
    } else if (!(buf = malloc(m.size ? m.size : 1))) {
      rc = shoal_error_set(err, SHOAL_ENOMEM,
                           "store: out of memory for a %" PRIu64 "-byte snapshot", m.size);
    } else if (!(s = mongoc_gridfs_bucket_open_download_stream(b, bson_iter_value(&it), &be))) {
      rc = merr(ms, err, &be, "cannot download snapshot %" PRId64 " of run '%s'", m.version, run);
    }
    size_t got = 0;
    while (!rc && got < m.size) {
      ssize_t r = mongoc_stream_read(s, buf + got, m.size - got, 1, IO_TIMEOUT_MS);
      if (r < 0) {
        if (!mongoc_gridfs_bucket_stream_error(s, &be))
          bson_set_error(&be, MONGOC_ERROR_GRIDFS, 0, "read failed");
        rc = merr(ms, err, &be, "cannot download snapshot %" PRId64 " of run '%s'", m.version, run);
      } else if (r == 0) {
        rc = shoal_error_set(err, SHOAL_EFORMAT,
                             "store: snapshot %" PRId64
                             " of run '%s' has %zu "
                             "bytes in GridFS, its files document says %" PRIu64,
                             m.version, run, got, m.size);
      }
      if (r > 0) got += (size_t)r;
    }
    if (s) mongoc_stream_destroy(s);
  } else if (mongoc_cursor_error(cur, &be)) {
    rc = merr(ms, err, &be, "cannot look up snapshots of run '%s'", run);
  } else {
    rc = version == STORE_BEST
             ? shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' has no snapshot with a score",
                               run)
         : version == STORE_LATEST
             ? shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' has no snapshot", run)
             : shoal_error_set(err, SHOAL_ENOENT, "store: run '%s' has no snapshot %" PRId64, run,
                               version);
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(filter);
  mongoc_gridfs_bucket_destroy(b);
  op_end(&o);
  if (rc) {
    free(buf);
    return rc;
  }
  *meta = m;
  *bytes = buf;
  *len = m.size;
  return 0;
}

static int mongo_snapshot_list(void *impl, const char *run, store_snapshot_meta **out, size_t *n,
                               shoal_error *err) {
  mongo_store *ms = impl;
  op o = op_begin(ms, NULL);
  mongoc_gridfs_bucket_t *b = NULL;
  int rc = bucket_open(&o, &b, err);
  if (rc) {
    op_end(&o);
    return rc;
  }
  bson_t *filter = BCON_NEW("metadata.run", BCON_UTF8(run));
  bson_t *opts = BCON_NEW("sort", "{", "metadata.version", BCON_INT32(1), "}");
  mongoc_cursor_t *cur = mongoc_gridfs_bucket_find(b, filter, opts);
  store_snapshot_meta *arr = NULL;
  size_t k = 0, cap = 0;
  const bson_t *d;
  while (!rc && mongoc_cursor_next(cur, &d)) {
    if ((rc = store__grow((void **)&arr, &cap, k, sizeof *arr))) {
      shoal_error_set(err, rc, "store: out of memory");
      break;
    }
    meta_from_files_doc(d, &arr[k++]);
  }
  bson_error_t be;
  if (!rc && mongoc_cursor_error(cur, &be))
    rc = merr(ms, err, &be, "cannot list snapshots of run '%s'", run);
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(filter);
  mongoc_gridfs_bucket_destroy(b);
  op_end(&o);
  if (rc) {
    free(arr);
    return rc;
  }
  *out = arr;
  *n = k;
  return 0;
}

/* ---- replay -------------------------------------------------------------- */

static int mongo_replay_append(void *impl, const char *run, uint64_t seq, const void *bytes,
                               size_t len, shoal_error *err) {
  op o = op_begin(impl, "replay");
  bson_t doc;
  bson_init(&doc);
  BSON_APPEND_UTF8(&doc, "run", run);
  BSON_APPEND_INT64(&doc, "seq", (int64_t)seq);
  BSON_APPEND_INT64(&doc, "len", (int64_t)len);
  BSON_APPEND_BINARY(&doc, "data", BSON_SUBTYPE_BINARY, bytes, (uint32_t)len);
  /* CRC32C (the crc32 instruction); documents written before it carry "crc", zlib's
   * CRC-32, and are still checked by it. */
  BSON_APPEND_INT64(&doc, "crc32c", (int64_t)shoal_crc32c(0, bytes, len));
  BSON_APPEND_DOUBLE(&doc, "created", store__wall_time());
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_insert_one(o.coll, &doc, NULL, NULL, &be)) {
    rc = merr(impl, err, &be, "cannot append replay segment %" PRIu64 " of run '%s'", seq, run);
    if (rc == SHOAL_EEXIST)
      shoal_error_set(err, rc, "store: run '%s' has replay segment %" PRIu64 " already", run, seq);
  }
  bson_destroy(&doc);
  op_end(&o);
  return rc;
}

static int mongo_run_exists(void *impl, const char *run, shoal_error *err) {
  store_run r;
  int rc = mongo_run_find(impl, run, &r, err);
  if (!rc) store_run_clear(&r);
  return rc;
}

/* Checks one replay document: its length and, when it has one, its CRC32C (or a
 * CRC-32 from before). */
static int mongo_replay_doc(const bson_t *d, const char *run, uint64_t *seq_out,
                            const uint8_t **data_out, uint32_t *len_out, shoal_error *err) {
  bson_iter_t it;
  bson_subtype_t sub;
  uint32_t blen = 0;
  const uint8_t *data = NULL;
  int64_t seq = dint(d, "seq", -1), want = dint(d, "len", -1), crc = dint(d, "crc", -1),
          crc32c = dint(d, "crc32c", -1);
  if (bson_iter_init_find(&it, d, "data") && BSON_ITER_HOLDS_BINARY(&it))
    bson_iter_binary(&it, &sub, &blen, &data);
  if (!data || seq < 0 || want != (int64_t)blen)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: replay segment %" PRId64
                           " of run '%s' is damaged (%u bytes of data, len says %" PRId64 ")",
                           seq, run, blen, want);
  if (crc32c >= 0 ? (uint32_t)crc32c != shoal_crc32c(0, data, blen)
                  : crc >= 0 && (uint32_t)crc != store__crc32(data, blen))
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: replay segment %" PRId64
                           " of run '%s': checksum mismatch (damaged data)",
                           seq, run);
  *seq_out = (uint64_t)seq;
  *data_out = data;
  *len_out = blen;
  return 0;
}

static int mongo_replay_iter(void *impl, const char *run, uint64_t from_seq, store_replay_fn fn,
                             void *ctx, shoal_error *err) {
  int rc = mongo_run_exists(impl, run, err);
  if (rc) return rc;
  op o = op_begin(impl, "replay");
  bson_t *filter =
      BCON_NEW("run", BCON_UTF8(run), "seq", "{", "$gte", BCON_INT64((int64_t)from_seq), "}");
  bson_t *opts = BCON_NEW("sort", "{", "seq", BCON_INT32(1), "}");
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o.coll, filter, opts, NULL);
  const bson_t *d;
  while (!rc && mongoc_cursor_next(cur, &d)) {
    uint64_t seq;
    const uint8_t *data;
    uint32_t blen;
    rc = mongo_replay_doc(d, run, &seq, &data, &blen, err);
    if (!rc) rc = fn(ctx, seq, data, blen);
  }
  bson_error_t be;
  if (!rc && mongoc_cursor_error(cur, &be))
    rc = merr(impl, err, &be, "cannot read replay segments of run '%s'", run);
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(filter);
  op_end(&o);
  return rc;
}

static int mongo_replay_list(void *impl, const char *run, uint64_t **seqs, size_t *n_out,
                             shoal_error *err) {
  int rc = mongo_run_exists(impl, run, err);
  if (rc) return rc;
  op o = op_begin(impl, "replay");
  bson_t *filter = BCON_NEW("run", BCON_UTF8(run));
  bson_t *opts = BCON_NEW("sort", "{", "seq", BCON_INT32(1), "}", "projection", "{", "seq",
                          BCON_INT32(1), "_id", BCON_INT32(0), "}");
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o.coll, filter, opts, NULL);
  const bson_t *d;
  uint64_t *v = NULL;
  size_t n = 0, cap = 0;
  while (!rc && mongoc_cursor_next(cur, &d)) {
    int64_t seq = dint(d, "seq", -1);
    if (seq < 0) continue;
    if ((rc = store__grow((void **)&v, &cap, n, sizeof *v)))
      shoal_error_set(err, rc, "store: out of memory listing replay segments of '%s'", run);
    else
      v[n++] = (uint64_t)seq;
  }
  bson_error_t be;
  if (!rc && mongoc_cursor_error(cur, &be))
    rc = merr(impl, err, &be, "cannot list replay segments of run '%s'", run);
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(filter);
  op_end(&o);
  if (rc) {
    free(v);
    return rc;
  }
  *seqs = v;
  *n_out = n;
  return 0;
}

static int mongo_replay_read(void *impl, const char *run, uint64_t seq, void **bytes, size_t *len,
                             shoal_error *err) {
  op o = op_begin(impl, "replay");
  bson_t *filter = BCON_NEW("run", BCON_UTF8(run), "seq", BCON_INT64((int64_t)seq));
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o.coll, filter, NULL, NULL);
  const bson_t *d;
  int rc = SHOAL_ENOENT;
  if (mongoc_cursor_next(cur, &d)) {
    uint64_t s;
    const uint8_t *data;
    uint32_t blen;
    rc = mongo_replay_doc(d, run, &s, &data, &blen, err);
    if (!rc) {
      void *b = malloc(blen ? blen : 1);
      if (!b) {
        rc = shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory reading replay segment");
      } else {
        memcpy(b, data, blen);
        *bytes = b;
        *len = blen;
      }
    }
  }
  bson_error_t be;
  if (rc == SHOAL_ENOENT) {
    if (mongoc_cursor_error(cur, &be))
      rc = merr(impl, err, &be, "cannot read replay segment %" PRIu64 " of run '%s'", seq, run);
    else
      shoal_error_set(err, rc, "store: run '%s' has no replay segment %" PRIu64, run, seq);
  }
  mongoc_cursor_destroy(cur);
  bson_destroy(filter);
  op_end(&o);
  return rc;
}

static int mongo_replay_trim(void *impl, const char *run, uint64_t below, size_t *removed,
                             shoal_error *err) {
  op o = op_begin(impl, "replay");
  bson_t *sel = BCON_NEW("run", BCON_UTF8(run), "seq", "{", "$lt", BCON_INT64((int64_t)below), "}");
  bson_t reply;
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_delete_many(o.coll, sel, NULL, &reply, &be))
    rc = merr(impl, err, &be, "cannot trim replay segments of run '%s'", run);
  else
    *removed = (size_t)reply_count(&reply, "deletedCount");
  bson_destroy(&reply);
  bson_destroy(sel);
  op_end(&o);
  return rc;
}

/* ---- metrics ------------------------------------------------------------- */

static int mongo_metrics_append(void *impl, const store_metric *rows, size_t n, shoal_error *err) {
  bson_t *docs = malloc(n * sizeof *docs);
  const bson_t **ptrs = malloc(n * sizeof *ptrs);
  if (!docs || !ptrs) {
    free(docs);
    free(ptrs);
    return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory for %zu metric rows", n);
  }
  for (size_t i = 0; i < n; i++) {
    bson_init(&docs[i]);
    BSON_APPEND_UTF8(&docs[i], "run", rows[i].run);
    BSON_APPEND_INT64(&docs[i], "step", rows[i].step);
    BSON_APPEND_DOUBLE(&docs[i], "time", rows[i].time);
    BSON_APPEND_UTF8(&docs[i], "name", rows[i].name);
    BSON_APPEND_DOUBLE(&docs[i], "value", rows[i].value);
    ptrs[i] = &docs[i];
  }
  op o = op_begin(impl, "metrics");
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_insert_many(o.coll, ptrs, n, NULL, NULL, &be))
    rc = merr(impl, err, &be, "cannot append %zu metric rows", n);
  op_end(&o);
  for (size_t i = 0; i < n; i++) bson_destroy(&docs[i]);
  free(docs);
  free(ptrs);
  return rc;
}

static int mongo_metrics_query(void *impl, const char *run, const char *name, int64_t step_min,
                               int64_t step_max, store_metric **out, size_t *n, shoal_error *err) {
  int rc = mongo_run_exists(impl, run, err);
  if (rc) return rc;
  op o = op_begin(impl, "metrics");
  bson_t filter, range;
  bson_init(&filter);
  BSON_APPEND_UTF8(&filter, "run", run);
  if (name) BSON_APPEND_UTF8(&filter, "name", name);
  BSON_APPEND_DOCUMENT_BEGIN(&filter, "step", &range);
  BSON_APPEND_INT64(&range, "$gte", step_min);
  BSON_APPEND_INT64(&range, "$lte", step_max);
  bson_append_document_end(&filter, &range);
  /* ObjectIds grow in insertion order within a writer: the tie-break for equal steps. */
  bson_t *opts = BCON_NEW("sort", "{", "step", BCON_INT32(1), "_id", BCON_INT32(1), "}");
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o.coll, &filter, opts, NULL);
  store_metric *arr = NULL;
  size_t k = 0, cap = 0;
  const bson_t *d;
  while (!rc && mongoc_cursor_next(cur, &d)) {
    if ((rc = store__grow((void **)&arr, &cap, k, sizeof *arr))) {
      shoal_error_set(err, rc, "store: out of memory");
      break;
    }
    store_metric *m = &arr[k++];
    memset(m, 0, sizeof *m);
    const char *nm = dstr(d, "name");
    snprintf(m->run, sizeof m->run, "%s", run);
    snprintf(m->name, sizeof m->name, "%s", nm ? nm : "");
    m->step = dint(d, "step", 0);
    m->time = ddouble(d, "time", 0);
    m->value = ddouble(d, "value", NAN);
  }
  bson_error_t be;
  if (!rc && mongoc_cursor_error(cur, &be))
    rc = merr(impl, err, &be, "cannot query metrics of run '%s'", run);
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(&filter);
  op_end(&o);
  if (rc) {
    free(arr);
    return rc;
  }
  *out = arr;
  *n = k;
  return 0;
}

/* ---- trials -------------------------------------------------------------- */

static int trial_status_from(const char *s) {
  for (int i = STORE_TRIAL_PENDING; i <= STORE_TRIAL_FAILED; i++)
    if (s && strcmp(s, store_trial_status_name(i)) == 0) return i;
  return -1;
}

static int trial_from_doc(const bson_t *d, store_trial *t, shoal_error *err) {
  memset(t, 0, sizeof *t);
  const char *sw = dstr(d, "sweep"), *id = dstr(d, "id"), *w = dstr(d, "worker");
  const char *params = dstr(d, "params"), *result = dstr(d, "result");
  t->status = trial_status_from(dstr(d, "status"));
  if (!sw || !id || t->status < 0)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "store: a document in 'trials' lacks sweep, id or "
                           "status");
  snprintf(t->sweep, sizeof t->sweep, "%s", sw);
  snprintf(t->id, sizeof t->id, "%s", id);
  snprintf(t->worker, sizeof t->worker, "%s", w ? w : "");
  t->attempt = dint(d, "attempt", 0);
  t->created_time = ddouble(d, "created", 0);
  t->heartbeat_time = ddouble(d, "heartbeat", 0);
  t->params = store__strdup(params ? params : "");
  if (result) t->result = store__strdup(result);
  if (!t->params || (result && !t->result)) {
    store_trial_clear(t);
    return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  }
  return 0;
}

static void trial_key(char *out, const char *sweep, const char *id) {
  snprintf(out, 2 * STORE_NAME_MAX + 2, "%s/%s", sweep, id);
}

static int mongo_trial_create(void *impl, const char *sweep, const char *id, const char *params,
                              shoal_error *err) {
  char key[2 * STORE_NAME_MAX + 2];
  trial_key(key, sweep, id);
  op o = op_begin(impl, "trials");
  bson_t *doc = BCON_NEW("_id", BCON_UTF8(key), "sweep", BCON_UTF8(sweep), "id", BCON_UTF8(id),
                         "params", BCON_UTF8(params), "status", BCON_UTF8("pending"), "worker",
                         BCON_UTF8(""), "attempt", BCON_INT64(0), "created",
                         BCON_DOUBLE(store__wall_time()), "heartbeat", BCON_DOUBLE(0));
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_insert_one(o.coll, doc, NULL, NULL, &be)) {
    rc = merr(impl, err, &be, "cannot create trial '%s' of sweep '%s'", id, sweep);
    if (rc == SHOAL_EEXIST)
      shoal_error_set(err, rc, "store: sweep '%s' has trial '%s' already", sweep, id);
  }
  bson_destroy(doc);
  op_end(&o);
  return rc;
}

static int mongo_trial_claim(void *impl, const char *sweep, const char *worker, store_trial *out,
                             shoal_error *err) {
  op o = op_begin(impl, "trials");
  double now = store__wall_time();
  bson_t *query = BCON_NEW("sweep", BCON_UTF8(sweep), "status", BCON_UTF8("pending"));
  bson_t *sort = BCON_NEW("created", BCON_INT32(1), "id", BCON_INT32(1));
  bson_t *update = BCON_NEW("$set", "{", "status", BCON_UTF8("running"), "worker",
                            BCON_UTF8(worker), "heartbeat", BCON_DOUBLE(now), "claimed",
                            BCON_DOUBLE(now), "}", "$inc", "{", "attempt", BCON_INT64(1), "}");
  mongoc_find_and_modify_opts_t *fam = mongoc_find_and_modify_opts_new();
  mongoc_find_and_modify_opts_set_sort(fam, sort);
  mongoc_find_and_modify_opts_set_update(fam, update);
  mongoc_find_and_modify_opts_set_flags(fam, MONGOC_FIND_AND_MODIFY_RETURN_NEW);
  bson_t reply;
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_find_and_modify_with_opts(o.coll, query, fam, &reply, &be)) {
    rc = merr(impl, err, &be, "cannot claim a trial of sweep '%s'", sweep);
  } else {
    bson_iter_t it;
    if (bson_iter_init_find(&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
      const uint8_t *data;
      uint32_t len;
      bson_t d;
      bson_iter_document(&it, &len, &data);
      if (bson_init_static(&d, data, len))
        rc = trial_from_doc(&d, out, err);
      else
        rc = shoal_error_set(err, SHOAL_EFORMAT, "store: findAndModify returned bad BSON");
    } else {
      rc = shoal_error_set(err, SHOAL_ENOENT, "store: sweep '%s' has no pending trial", sweep);
    }
  }
  bson_destroy(&reply);
  mongoc_find_and_modify_opts_destroy(fam);
  bson_destroy(update);
  bson_destroy(sort);
  bson_destroy(query);
  op_end(&o);
  return rc;
}

static int mongo_trial_get(void *impl, const char *sweep, const char *id, store_trial *out,
                           shoal_error *err) {
  char key[2 * STORE_NAME_MAX + 2];
  trial_key(key, sweep, id);
  op o = op_begin(impl, "trials");
  bson_t *f = BCON_NEW("_id", BCON_UTF8(key));
  bson_t d;
  int found = 0;
  int rc = find_one(&o, f, NULL, &d, &found, err);
  if (!rc && !found)
    rc = shoal_error_set(err, SHOAL_ENOENT, "store: sweep '%s' has no trial '%s'", sweep, id);
  if (!rc) rc = trial_from_doc(&d, out, err);
  if (found) bson_destroy(&d);
  bson_destroy(f);
  op_end(&o);
  return rc;
}

/* Explains why an update on a held trial matched nothing, as the file backend does. */
static int trial_not_held(void *impl, const char *sweep, const char *id, const char *worker,
                          int completing, shoal_error *err) {
  store_trial t;
  int rc = mongo_trial_get(impl, sweep, id, &t, err);
  if (rc) return rc;
  if (t.status == STORE_TRIAL_DONE || t.status == STORE_TRIAL_FAILED)
    rc = shoal_error_set(err, completing ? SHOAL_EEXIST : SHOAL_EPERM,
                         "store: trial '%s' of sweep '%s' is complete already", id, sweep);
  else
    rc = shoal_error_set(err, SHOAL_EPERM,
                         "store: worker '%s' does not hold trial '%s' of sweep '%s' (%s%s%s)",
                         worker, id, sweep, store_trial_status_name(t.status),
                         t.worker[0] ? ", held by " : "", t.worker);
  store_trial_clear(&t);
  return rc;
}

static int held_update(void *impl, const char *sweep, const char *id, const char *worker,
                       bson_t *set, int completing, shoal_error *err) {
  char key[2 * STORE_NAME_MAX + 2];
  trial_key(key, sweep, id);
  op o = op_begin(impl, "trials");
  bson_t *sel =
      BCON_NEW("_id", BCON_UTF8(key), "status", BCON_UTF8("running"), "worker", BCON_UTF8(worker));
  bson_t upd;
  bson_init(&upd);
  BSON_APPEND_DOCUMENT(&upd, "$set", set);
  bson_t reply;
  bson_error_t be;
  int rc = 0, matched = 0;
  if (!mongoc_collection_update_one(o.coll, sel, &upd, NULL, &reply, &be))
    rc = merr(impl, err, &be, "cannot update trial '%s' of sweep '%s'", id, sweep);
  else
    matched = reply_count(&reply, "matchedCount") > 0;
  bson_destroy(&reply);
  bson_destroy(&upd);
  bson_destroy(sel);
  op_end(&o);
  if (!rc && !matched) rc = trial_not_held(impl, sweep, id, worker, completing, err);
  return rc;
}

static int mongo_trial_heartbeat(void *impl, const char *sweep, const char *id, const char *worker,
                                 shoal_error *err) {
  bson_t *set = BCON_NEW("heartbeat", BCON_DOUBLE(store__wall_time()));
  int rc = held_update(impl, sweep, id, worker, set, 0, err);
  bson_destroy(set);
  return rc;
}

static int mongo_trial_complete(void *impl, const char *sweep, const char *id, const char *worker,
                                int status, const char *result, shoal_error *err) {
  bson_t *set = BCON_NEW("status", BCON_UTF8(store_trial_status_name(status)), "result",
                         BCON_UTF8(result), "finished", BCON_DOUBLE(store__wall_time()));
  int rc = held_update(impl, sweep, id, worker, set, 1, err);
  bson_destroy(set);
  return rc;
}

static int mongo_trial_release(void *impl, const char *sweep, const char *id, const char *worker,
                               shoal_error *err) {
  bson_t *set = BCON_NEW("status", BCON_UTF8("pending"), "worker", BCON_UTF8(""));
  int rc = held_update(impl, sweep, id, worker, set, 1, err);
  bson_destroy(set);
  return rc;
}

static int mongo_trial_requeue_stale(void *impl, const char *sweep, double max_age_s, size_t *n,
                                     shoal_error *err) {
  op o = op_begin(impl, "trials");
  bson_t *sel = BCON_NEW("sweep", BCON_UTF8(sweep), "status", BCON_UTF8("running"), "heartbeat",
                         "{", "$lt", BCON_DOUBLE(store__wall_time() - max_age_s), "}");
  bson_t *upd = BCON_NEW("$set", "{", "status", BCON_UTF8("pending"), "worker", BCON_UTF8(""), "}");
  bson_t reply;
  bson_error_t be;
  int rc = 0;
  if (!mongoc_collection_update_many(o.coll, sel, upd, NULL, &reply, &be))
    rc = merr(impl, err, &be, "cannot requeue stale trials of sweep '%s'", sweep);
  else
    *n = (size_t)reply_count(&reply, "modifiedCount");
  bson_destroy(&reply);
  bson_destroy(upd);
  bson_destroy(sel);
  op_end(&o);
  return rc;
}

static int mongo_trial_list(void *impl, const char *sweep, store_trial **out, size_t *n,
                            shoal_error *err) {
  op o = op_begin(impl, "trials");
  bson_t *filter = BCON_NEW("sweep", BCON_UTF8(sweep));
  bson_t *opts = BCON_NEW("sort", "{", "created", BCON_INT32(1), "id", BCON_INT32(1), "}");
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(o.coll, filter, opts, NULL);
  store_trial *arr = NULL;
  size_t k = 0, cap = 0;
  const bson_t *d;
  int rc = 0;
  while (!rc && mongoc_cursor_next(cur, &d)) {
    if ((rc = store__grow((void **)&arr, &cap, k, sizeof *arr))) {
      shoal_error_set(err, rc, "store: out of memory");
      break;
    }
    if (!(rc = trial_from_doc(d, &arr[k], err))) k++;
  }
  bson_error_t be;
  if (!rc && mongoc_cursor_error(cur, &be))
    rc = merr(impl, err, &be, "cannot list trials of sweep '%s'", sweep);
  mongoc_cursor_destroy(cur);
  bson_destroy(opts);
  bson_destroy(filter);
  op_end(&o);
  if (rc) {
    store_trials_free(arr, k);
    return rc;
  }
  *out = arr;
  *n = k;
  return 0;
}

const store__backend store__mongo_backend = {
    .name = "mongodb",
    .open = mongo_open,
    .close = mongo_close,
    .run_create = mongo_run_create,
    .run_find = mongo_run_find,
    .run_list = mongo_run_list,
    .run_set_status = mongo_run_set_status,
    .snapshot_put = mongo_snapshot_put,
    .snapshot_get = mongo_snapshot_get,
    .snapshot_list = mongo_snapshot_list,
    .replay_append = mongo_replay_append,
    .replay_iter = mongo_replay_iter,
    .replay_list = mongo_replay_list,
    .replay_read = mongo_replay_read,
    .replay_trim = mongo_replay_trim,
    .metrics_append = mongo_metrics_append,
    .metrics_query = mongo_metrics_query,
    .trial_create = mongo_trial_create,
    .trial_claim = mongo_trial_claim,
    .run_set_config = mongo_run_set_config,
    .lease_take = mongo_lease_take,
    .lease_renew = mongo_lease_renew,
    .lease_release = mongo_lease_release,
    .trial_heartbeat = mongo_trial_heartbeat,
    .trial_complete = mongo_trial_complete,
    .trial_requeue_stale = mongo_trial_requeue_stale,
    .trial_release = mongo_trial_release,
    .trial_get = mongo_trial_get,
    .trial_list = mongo_trial_list,
    .segment_write = store__mongo_segment_write,
    .segment_list = store__mongo_segment_list,
    .segment_read = store__mongo_segment_read,
    .dataset_begin = store__mongo_dataset_begin,
    .dataset_upload_id = store__mongo_dataset_upload_id,
    .dataset_chunk_put = store__mongo_dataset_chunk_put,
    .dataset_commit = store__mongo_dataset_commit,
    .dataset_abort = store__mongo_dataset_abort,
    .dataset_manifest_get = store__mongo_dataset_manifest_get,
    .dataset_names = store__mongo_dataset_names,
    .dataset_chunk_get = store__mongo_dataset_chunk_get,
    .dataset_delete = store__mongo_dataset_delete,
    .media_put = store__mongo_media_put,
    .media_get = store__mongo_media_get,
    .media_list = store__mongo_media_list,
};
