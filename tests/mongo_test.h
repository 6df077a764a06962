/* SPDX-License-Identifier: Apache-2.0 */
/* tests/mongo_test.h — where the tests of the MongoDB backend find their server.
 *
 *   $SHOAL_TEST_MONGO_URI set: a real server, used as given (the tests' names carry a
 *     per-process prefix, so they can share its database); nothing is dropped.
 *   else $SHOAL_TEST_MONGO_URI_FILE (set by ctest): the file holds the URI of the
 *     stand-in that ctest's fixture mongo_standin started (tests/mongo_standin: mockupdb +
 *     mongomock, in memory). Each test gets a database of its own there, dropped at exit.
 *   neither (a test binary run by hand): SKIPPED, 77.
 *
 * Tests built with SHOAL_TEST_MONGOC (every test given ARGS mongodb in CMake) link
 * libmongoc to run commands of their own (fail points, damaging a document). */
#ifndef SHOAL_TEST_MONGO_H
#define SHOAL_TEST_MONGO_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SHOAL_TEST_MONGOC
#include <mongoc/mongoc.h>
#endif

static char mongo_test_standin_uri[1024]; /* set when the URI is the stand-in's */
static pid_t mongo_test_pid;

#ifdef SHOAL_TEST_MONGOC
/* Runs cmd (extended JSON) on database db of uri; the reply as relaxed JSON into reply
 * (may be NULL). 0, or -1 with the error in reply. */
static inline int mongo_test_command(const char *uri, const char *db, const char *json, char *reply,
                                     size_t cap) {
  mongoc_init();
  bson_error_t be;
  int rc = -1;
  bson_t *cmd = bson_new_from_json((const uint8_t *)json, -1, &be);
  mongoc_client_t *c = cmd ? mongoc_client_new(uri) : NULL;
  bson_t r;
  bson_init(&r);
  if (c) {
    mongoc_client_set_error_api(c, MONGOC_ERROR_API_VERSION_2);
    rc = mongoc_client_command_simple(c, db, cmd, NULL, &r, &be) ? 0 : -1;
  } else if (cmd) {
    snprintf(be.message, sizeof be.message, "bad URI %.400s", uri);
  }
  if (reply) {
    if (rc == 0) {
      char *s = bson_as_relaxed_extended_json(&r, NULL);
      snprintf(reply, cap, "%s", s ? s : "");
      bson_free(s);
    } else {
      snprintf(reply, cap, "%s (%u.%u)", be.message, be.domain, be.code);
    }
  }
  bson_destroy(&r);
  if (c) mongoc_client_destroy(c);
  if (cmd) bson_destroy(cmd);
  return rc;
}

/* The database a URI names ("shoal" when none, as store/mongo.c). */
static inline void mongo_test_db(const char *uri, char *out, size_t cap) {
  mongoc_uri_t *u = mongoc_uri_new(uri);
  const char *db = u ? mongoc_uri_get_database(u) : NULL;
  snprintf(out, cap, "%s", db && db[0] ? db : "shoal");
  if (u) mongoc_uri_destroy(u);
}

static inline void mongo_test_drop(void) {
  if (!mongo_test_standin_uri[0] || getpid() != mongo_test_pid) return; /* not in children */
  char db[128], reply[512];
  mongo_test_db(mongo_test_standin_uri, db, sizeof db);
  if (mongo_test_command(mongo_test_standin_uri, db, "{\"dropDatabase\": 1}", reply, sizeof reply))
    fprintf(stderr, "mongo_test: could not drop %s: %s\n", db, reply);
}
#endif

/* The URI for this test into out: 0; 77 after printing SKIPPED (no server named and no
 * stand-in: run outside ctest); 1 when ctest's stand-in should be there but is not. db:
 * the database to use on the stand-in. */
static inline int mongo_test_uri(char *out, size_t cap, const char *db) {
  const char *u = getenv("SHOAL_TEST_MONGO_URI");
  if (u && u[0]) {
    snprintf(out, cap, "%s", u);
    return 0;
  }
  const char *f = getenv("SHOAL_TEST_MONGO_URI_FILE");
  if (!f || !f[0]) {
    printf(
        "SKIPPED: no MongoDB server: run this test with ctest (its fixture mongo_standin starts "
        "the stand-in, tests/mongo_standin) or export "
        "SHOAL_TEST_MONGO_URI=mongodb://host:27017/shoal_test\n");
    return 77;
  }
  char line[512] = "";
  FILE *fp = fopen(f, "r");
  if (!fp || !fgets(line, sizeof line, fp)) {
    fprintf(stderr,
            "mongo_test: %s is missing: the MongoDB stand-in did not start (see "
            "mongo_standin/standin.log in the build folder and ctest's mongo_standin_start)\n",
            f);
    if (fp) fclose(fp);
    return 1;
  }
  fclose(fp);
  line[strcspn(line, "\r\n")] = 0;
  /* mongodb://host:port/DB?options: put db in place of DB */
  const char *hosts = strstr(line, "://");
  const char *slash = hosts ? strchr(hosts + 3, '/') : NULL;
  if (!slash) {
    fprintf(stderr, "mongo_test: %s: not a mongodb:// URI with a database: '%s'\n", f, line);
    return 1;
  }
  const char *q = strchr(slash, '?');
  snprintf(out, cap, "%.*s/%s%s", (int)(slash - line), line, db, q ? q : "");
  snprintf(mongo_test_standin_uri, sizeof mongo_test_standin_uri, "%s", out);
  mongo_test_pid = getpid();
#ifdef SHOAL_TEST_MONGOC
  atexit(mongo_test_drop);
  mongo_test_drop(); /* a database left by an earlier run of this test */
#endif
  return 0;
}

#endif
