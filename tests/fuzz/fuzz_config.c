/*
 * tests/fuzz/fuzz_config.c — the YAML config loader (libyaml under config/) against the
 * Ape-X schema, as `shoal run`, the learner and the actors read a config file.
 * Properties: a refused file leaves an error naming what is wrong and changes no value;
 * an accepted one dumps (config_dump) to YAML that loads back into a fresh config and
 * dumps to the same text, so the resolved config stored with a run is the run's config.
 */
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
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
  }
  free(dump);
  config_destroy(c);
  free(text);
  return 0;
}
