/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_config.c — the YAML config loader (libyaml under config/) against the
 * Ape-X schema, as `shoal run`, the learner and the actors read a config file.
 * Properties: a refused file leaves an error naming what is wrong and changes no value;
 * an accepted one dumps (config_dump) to YAML that loads back into a fresh config and
 * dumps to the same text, so the resolved config stored with a run is the run's config.
 */
#define _GNU_SOURCE /* asprintf */
#include <stdlib.h>
#include <string.h>

#include "run/run.h"
#include "config/config.h"
#include "tests/fuzz/fuzz.h"

static const cfg_key *schema;
static int nschema;
static char *defaults_dump;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  schema = apex_schema(&nschema);
  config *c = config_create(schema, nschema, NULL);
  if (!c || config_dump(c, &defaults_dump, NULL)) abort();
  config_destroy(c);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  shoal_error err = {0};
  config *c = config_create(schema, nschema, &err);
  FUZZ_CHECK(c);
  int rc = config_load_string(c, text, "fuzz.yaml", &err);
  char *dump = NULL;
  if (rc) {
    FUZZ_CHECK(rc < 0 && err.msg[0]);
    /* nothing changed */
    FUZZ_CHECK(config_dump(c, &dump, NULL) == 0);
    FUZZ_CHECK(!strcmp(dump, defaults_dump));
  } else {
    (void)apex_check(c, &err);
    FUZZ_CHECK(config_dump(c, &dump, &err) == 0);
    config *c2 = config_create(schema, nschema, NULL);
    FUZZ_CHECK(c2);
    int rc2 = config_load_string(c2, dump, "dump.yaml", &err);
    if (rc2) fprintf(stderr, "reloading the dump failed: %s\n--- dump:\n%s\n", err.msg, dump);
    FUZZ_CHECK(rc2 == 0);
    char *dump2 = NULL;
    FUZZ_CHECK(config_dump(c2, &dump2, NULL) == 0);
    if (strcmp(dump, dump2))
      fprintf(stderr, "--- dump:\n%s\n--- dump of the dump:\n%s\n", dump, dump2);
    FUZZ_CHECK(!strcmp(dump, dump2));
    free(dump2);
    config_destroy(c2);
    /* The redacted dump (what is stored with a run) loads too and holds no secret. */
    char *red = NULL;
    FUZZ_CHECK(config_dump_redacted(c, &red, &err) == 0);
    config *c3 = config_create(schema, nschema, NULL);
    FUZZ_CHECK(c3);
    rc2 = config_load_string(c3, red, "redacted.yaml", &err);
    if (rc2) fprintf(stderr, "reloading the redacted dump failed: %s\n%s\n", err.msg, red);
    FUZZ_CHECK(rc2 == 0);
    for (int i = 0; i < nschema; i++) {
      if (schema[i].type != CFG_STRING) continue;
      const char *v = config_string(c, schema[i].name), *r = config_string(c3, schema[i].name);
      if (config_key_is_secret(schema[i].name) && v[0]) {
        FUZZ_CHECK(!strcmp(r, CONFIG_REDACTED));
      } else if (!strstr(v, "://")) {
        FUZZ_CHECK(!strcmp(r, v));
      } else {
        /* a single URI: exactly its password (user info after ':') became "***" */
        const char *sch = strstr(v, "://");
        if (!strstr(sch + 3, "://") && strcmp(r, CONFIG_REDACTED)) {
          const char *auth = sch + 3, *end = auth + strcspn(auth, "/?# \t\n\"'"), *at = NULL;
          for (const char *q = auth; q < end; q++)
            if (*q == '@') at = q;
          const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
          char *want = NULL;
          if (colon) FUZZ_CHECK(asprintf(&want, "%.*s***%s", (int)(colon + 1 - v), v, at) > 0);
          FUZZ_CHECK(!strcmp(r, want ? want : v));
          free(want);
        }
      }
    }
    config_destroy(c3);
    free(red);
  }
  free(dump);
  config_destroy(c);
  free(text);
  return 0;
}
