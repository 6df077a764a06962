/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/mongo_standin/test_mongo_standin.c — the MongoDB server the tests of the MongoDB
 * backend run against, seen through libmongoc as store/ uses it: ctest's stand-in
 * (standin.py) or, with $SHOAL_TEST_MONGO_URI, a real server (tests/mongo_test.h).
 *   cursors      more documents than one batch holds (getMore), batchSize, limit, skip,
 *                sort, projection, a cursor given up early (killCursors), an unknown one
 *   errors       the server's codes: duplicate key 11000 with keyPattern / keyValue,
 *                unknown command 59, namespace not found 26, cursor not found 43
 *   types        $inc keeps int64 fields int64 and int32 fields int32
 *   findAndModify  upsert with new, a sort, remove, lastErrorObject
 *   retry        a fail point drops the connection under shoal's next insert: the write is
 *                retried once (a second drop fails it with SHOAL_ENET) and stored once
 * The fail point needs a server with test commands (the stand-in has them); a real server
 * without them skips that part, saying so.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/mongo_test.h"

#ifndef SHOAL_TEST_MONGOC
#error "test_mongo_standin needs libmongoc (SHOAL_TEST_MONGOC)"
#endif

static char g_uri[1024], g_db[128], g_coll[64], g_dups[64], g_counters[64];
static int g_standin; /* the stand-in (not a real server named by SHOAL_TEST_MONGO_URI) */

static mongoc_client_t *client(void) {
  mongoc_client_t *c = mongoc_client_new(g_uri);
  assert_non_null(c);
  mongoc_client_set_error_api(c, MONGOC_ERROR_API_VERSION_2);
  return c;
}

static int64_t count(mongoc_collection_t *coll, const char *json) {
  bson_error_t be;
  bson_t *f = bson_new_from_json((const uint8_t *)json, -1, &be);
  assert_non_null(f);
  int64_t n = mongoc_collection_count_documents(coll, f, NULL, NULL, NULL, &be);
  if (n < 0) fail_msg("count %s: %s", json, be.message);
  bson_destroy(f);
  return n;
}

/* Reads the cursor to its end: the documents' "i" into out (up to cap), the count. */
static int drain(mongoc_cursor_t *cur, int *out, int cap) {
  const bson_t *d;
  int n = 0;
  while (mongoc_cursor_next(cur, &d)) {
    bson_iter_t it;
    if (n < cap && bson_iter_init_find(&it, d, "i")) out[n] = (int)bson_iter_as_int64(&it);
    n++;
  }
  bson_error_t be;
  if (mongoc_cursor_error(cur, &be)) fail_msg("cursor: %s", be.message);
  mongoc_cursor_destroy(cur);
  return n;
}

static mongoc_cursor_t *find(mongoc_collection_t *coll, const char *filter, const char *opts) {
  bson_error_t be;
  bson_t *f = bson_new_from_json((const uint8_t *)filter, -1, &be);
  bson_t *o = opts ? bson_new_from_json((const uint8_t *)opts, -1, &be) : NULL;
  assert_non_null(f);
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, f, o, NULL);
  bson_destroy(f);
  if (o) bson_destroy(o);
  return cur;
}

static void test_cursors(void **state) {
  mongoc_client_t *c = client();
  mongoc_collection_t *coll = mongoc_client_get_collection(c, g_db, g_coll);
  enum { N = 250 };
  bson_t *docs[N];
  for (int i = 0; i < N; i++) docs[i] = BCON_NEW("i", BCON_INT32(i), "pad", BCON_UTF8("x"));
  bson_error_t be;
  if (!mongoc_collection_insert_many(coll, (const bson_t **)docs, N, NULL, NULL, &be))
    fail_msg("insert_many: %s", be.message);
  for (int i = 0; i < N; i++) bson_destroy(docs[i]);

  int got[N];
  assert_int_equal(drain(find(coll, "{}", "{\"sort\": {\"i\": 1}}"), got, N), N); /* > 101 */
  for (int i = 0; i < N; i++) assert_int_equal(got[i], i);
  assert_int_equal(drain(find(coll, "{}", "{\"batchSize\": 7, \"limit\": 50}"), got, N), 50);
  assert_int_equal(
      drain(find(coll, "{\"i\": {\"$gte\": 100}}",
                 "{\"sort\": {\"i\": -1}, \"skip\": 10, \"limit\": 3, \"projection\": {\"i\": 1}}"),
            got, N),
      3);
  assert_int_equal(got[0], N - 11);
  assert_int_equal(got[2], N - 13);
  assert_int_equal(drain(find(coll, "{}", "{\"limit\": 5, \"singleBatch\": true}"), got, N), 5);
  assert_int_equal(count(coll, "{\"i\": {\"$lt\": 17}}"), 17);

  /* The projection keeps only what it names. */
  mongoc_cursor_t *cur = find(coll, "{\"i\": 3}", "{\"projection\": {\"_id\": 0, \"i\": 1}}");
  const bson_t *d;
  assert_true(mongoc_cursor_next(cur, &d));
  assert_int_equal(bson_count_keys(d), 1);
  mongoc_cursor_destroy(cur);

  /* A cursor given up after a few documents (killCursors), then one the server never had. */
  cur = find(coll, "{}", "{\"batchSize\": 2}");
  for (int i = 0; i < 3; i++) assert_true(mongoc_cursor_next(cur, &d));
  assert_true(mongoc_cursor_get_id(cur) != 0);
  mongoc_cursor_destroy(cur);
  char cmd[256], reply[1024];
  snprintf(cmd, sizeof cmd,
           "{\"getMore\": {\"$numberLong\": \"123456789\"}, \"collection\": \"%s\"}", g_coll);
  assert_int_equal(mongo_test_command(g_uri, g_db, cmd, reply, sizeof reply), -1);
  if (!strstr(reply, ".43)")) fail_msg("getMore of an unknown cursor: %s", reply);

  mongoc_collection_destroy(coll);
  mongoc_client_destroy(c);
}

static void test_errors(void **state) {
  mongoc_client_t *c = client();
  mongoc_collection_t *coll = mongoc_client_get_collection(c, g_db, g_dups);
  char cmd[512], reply[1024];
  snprintf(cmd, sizeof cmd,
           "{\"createIndexes\": \"%s\", \"indexes\": [{\"key\": {\"run\": 1, \"seq\": 1}, "
           "\"name\": \"run_seq\", \"unique\": true}]}",
           g_dups);
  if (mongo_test_command(g_uri, g_db, cmd, reply, sizeof reply)) fail_msg("%s", reply);
  bson_t *doc = BCON_NEW("run", BCON_UTF8("r"), "seq", BCON_INT64(4));
  bson_error_t be;
  bson_t r;
  assert_true(mongoc_collection_insert_one(coll, doc, NULL, NULL, &be));
  bson_destroy(doc);
  doc = BCON_NEW("run", BCON_UTF8("r"), "seq", BCON_INT64(4));
  assert_false(mongoc_collection_insert_one(coll, doc, NULL, &r, &be));
  assert_int_equal(be.code, 11000);
  assert_int_equal(be.domain, MONGOC_ERROR_SERVER);
  char *js = bson_as_relaxed_extended_json(&r, NULL);
  if (!strstr(js, "\"writeErrors\"") || !strstr(js, "\"keyPattern\"") ||
      !strstr(js, "\"keyValue\"") || !strstr(js, "run_seq"))
    fail_msg("duplicate key reply: %s", js);
  bson_free(js);
  bson_destroy(&r);
  bson_destroy(doc);
  assert_int_equal(count(coll, "{}"), 1);

  assert_int_equal(mongo_test_command(g_uri, g_db, "{\"noSuchCommand\": 1}", reply, sizeof reply),
                   -1);
  if (!strstr(reply, ".59)")) fail_msg("unknown command: %s", reply);
  /* Servers before 7.0 refuse to drop a collection that is not there (7.0 says ok). */
  int rc = mongo_test_command(g_uri, g_db, "{\"drop\": \"never_made\"}", reply, sizeof reply);
  if (g_standin || rc) {
    assert_int_equal(rc, -1);
    if (!strstr(reply, ".26)")) fail_msg("drop of a missing collection: %s", reply);
  }
  assert_int_equal(
      mongo_test_command(g_uri, g_db, "{\"listIndexes\": \"never_made\"}", reply, sizeof reply),
      -1);
  if (!strstr(reply, ".26)")) fail_msg("listIndexes of a missing collection: %s", reply);
  mongoc_collection_destroy(coll);
  mongoc_client_destroy(c);
}

static void test_types_and_find_and_modify(void **state) {
  mongoc_client_t *c = client();
  mongoc_collection_t *coll = mongoc_client_get_collection(c, g_db, g_counters);
  bson_t *doc = BCON_NEW("_id", BCON_UTF8("a"), "big", BCON_INT64(1), "small", BCON_INT32(1));
  bson_error_t be;
  assert_true(mongoc_collection_insert_one(coll, doc, NULL, NULL, &be));
  bson_destroy(doc);
  bson_t *sel = BCON_NEW("_id", BCON_UTF8("a"));
  bson_t *upd = BCON_NEW("$inc", "{", "big", BCON_INT32(2), "small", BCON_INT32(2), "fresh",
                         BCON_INT64(5), "}");
  assert_true(mongoc_collection_update_one(coll, sel, upd, NULL, NULL, &be));
  bson_destroy(upd);
  mongoc_cursor_t *cur = mongoc_collection_find_with_opts(coll, sel, NULL, NULL);
  const bson_t *d;
  assert_true(mongoc_cursor_next(cur, &d));
  bson_iter_t it;
  assert_true(bson_iter_init_find(&it, d, "big") && BSON_ITER_HOLDS_INT64(&it));
  assert_int_equal(bson_iter_int64(&it), 3);
  assert_true(bson_iter_init_find(&it, d, "small") && BSON_ITER_HOLDS_INT32(&it));
  assert_int_equal(bson_iter_int32(&it), 3);
  assert_true(bson_iter_init_find(&it, d, "fresh") && BSON_ITER_HOLDS_INT64(&it));
  mongoc_cursor_destroy(cur);
  bson_destroy(sel);

  /* findAndModify: an upsert returning the new document, then a sorted update and remove. */
  mongoc_find_and_modify_opts_t *fm = mongoc_find_and_modify_opts_new();
  upd = BCON_NEW("$set", "{", "state", BCON_UTF8("queued"), "}", "$inc", "{", "n", BCON_INT64(1),
                 "}");
  mongoc_find_and_modify_opts_set_update(fm, upd);
  mongoc_find_and_modify_opts_set_flags(
      fm, MONGOC_FIND_AND_MODIFY_UPSERT | MONGOC_FIND_AND_MODIFY_RETURN_NEW);
  sel = BCON_NEW("_id", BCON_UTF8("b"));
  bson_t reply;
  if (!mongoc_collection_find_and_modify_with_opts(coll, sel, fm, &reply, &be))
    fail_msg("findAndModify: %s", be.message);
  char *js = bson_as_relaxed_extended_json(&reply, NULL);
  if (!strstr(js, "\"upserted\" : \"b\"") || !strstr(js, "\"state\" : \"queued\""))
    fail_msg("findAndModify upsert: %s", js);
  bson_free(js);
  bson_destroy(&reply);
  bson_destroy(sel);
  bson_destroy(upd);
  mongoc_find_and_modify_opts_destroy(fm);

  fm = mongoc_find_and_modify_opts_new();
  bson_t *sort = BCON_NEW("_id", BCON_INT32(-1));
  mongoc_find_and_modify_opts_set_sort(fm, sort);
  mongoc_find_and_modify_opts_set_flags(fm, MONGOC_FIND_AND_MODIFY_REMOVE);
  bson_t empty;
  bson_init(&empty);
  assert_true(mongoc_collection_find_and_modify_with_opts(coll, &empty, fm, &reply, &be));
  js = bson_as_relaxed_extended_json(&reply, NULL);
  if (!strstr(js, "\"_id\" : \"b\"")) fail_msg("findAndModify remove (sorted): %s", js);
  bson_free(js);
  bson_destroy(&reply);
  assert_int_equal(count(coll, "{}"), 1);
  bson_destroy(&empty);
  bson_destroy(sort);
  mongoc_find_and_modify_opts_destroy(fm);
  mongoc_collection_destroy(coll);
  mongoc_client_destroy(c);
}

/* Sets failCommand for this test's connections (appname) on insert: times drops. */
static int fail_inserts(const char *app, int times) {
  char cmd[512], reply[512];
  snprintf(cmd, sizeof cmd,
           "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": %d}, \"data\": "
           "{\"failCommands\": [\"insert\"], \"closeConnection\": true, \"appName\": \"%s\"}}",
           times, app);
  int rc = mongo_test_command(g_uri, "admin", cmd, reply, sizeof reply);
  if (rc) printf("configureFailPoint: %s\n", reply);
  return rc;
}

static void test_retry_once_stored_once(void **state) {
  char app[64], uri[1200];
  snprintf(app, sizeof app, "retry-%d", (int)getpid());
  snprintf(uri, sizeof uri, "%s%sappname=%s", g_uri, strchr(g_uri, '?') ? "&" : "?", app);
  if (fail_inserts(app, 1)) {
    if (g_standin) fail_msg("the stand-in refused configureFailPoint");
    printf("(this server has no test commands: the retry is not checked here)\n");
    return;
  }
  store *st = NULL;
  shoal_error err = {0};
  /* store_open makes its indexes (no insert): the fail point waits for the run's insert. */
  if (store_open(&st, uri, &err)) fail_msg("store_open: %s", err.msg);
  char run[64];
  snprintf(run, sizeof run, "retried-%d", (int)getpid());
  if (store_run_create(st, run, "x: 1\n", STORE_RUN_CREATED, &err))
    fail_msg("a write after one dropped connection: %s", err.msg);
  store_metric rows[20];
  memset(rows, 0, sizeof rows);
  for (int i = 0; i < 20; i++) {
    snprintf(rows[i].run, sizeof rows[i].run, "%s", run);
    snprintf(rows[i].name, sizeof rows[i].name, "loss");
    rows[i].step = i, rows[i].time = 1.7e9, rows[i].value = i;
  }
  assert_int_equal(fail_inserts(app, 1), 0);
  if (store_metrics_append(st, rows, 20, &err))
    fail_msg("metrics after one dropped connection: %s", err.msg);
  store_metric *out = NULL;
  size_t n = 0;
  assert_int_equal(store_metrics_query(st, run, "loss", INT64_MIN, INT64_MAX, &out, &n, &err), 0);
  assert_int_equal(n, 20); /* stored once */
  free(out);
  store_run *runs = NULL;
  size_t k = 0, mine = 0;
  assert_int_equal(store_run_list(st, &runs, &k, &err), 0);
  for (size_t i = 0; i < k; i++) mine += strcmp(runs[i].id, run) == 0;
  store_runs_free(runs, k);
  assert_int_equal(mine, 1);

  /* Two drops in a row: one retry only, then the error (the network's). */
  assert_int_equal(fail_inserts(app, 2), 0);
  char run2[80];
  snprintf(run2, sizeof run2, "%s-b", run);
  err = (shoal_error){0};
  assert_int_equal(store_run_create(st, run2, "x: 1\n", STORE_RUN_CREATED, &err), SHOAL_ENET);
  printf("after two dropped connections: %s\n", err.msg);
  store_run r;
  assert_int_equal(store_run_find(st, run2, &r, &err), SHOAL_ENOENT);
  store_close(st);
}

int main(int argc, char **argv) {
  g_standin = !(getenv("SHOAL_TEST_MONGO_URI") && getenv("SHOAL_TEST_MONGO_URI")[0]);
  int rc = mongo_test_uri(g_uri, sizeof g_uri, "shoal_test_standin");
  if (rc) return rc;
  mongo_test_db(g_uri, g_db, sizeof g_db);
  snprintf(g_coll, sizeof g_coll, "standin_%d", (int)getpid());
  snprintf(g_dups, sizeof g_dups, "dups_%d", (int)getpid());
  snprintf(g_counters, sizeof g_counters, "counters_%d", (int)getpid());
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cursors),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_types_and_find_and_modify),
      cmocka_unit_test(test_retry_once_stored_once),
  };
  rc = cmocka_run_group_tests_name("mongo_standin", tests, NULL, NULL);
  if (!g_standin) { /* a real server: remove what this test made */
    const char *made[] = {g_coll, g_dups, g_counters};
    for (int i = 0; i < 3; i++) {
      char cmd[128];
      snprintf(cmd, sizeof cmd, "{\"drop\": \"%s\"}", made[i]);
      mongo_test_command(g_uri, g_db, cmd, NULL, 0);
    }
  }
  return rc;
}
