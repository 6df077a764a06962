/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config/config.h — experiment configs: YAML files (libyaml) checked against a schema
 * of typed keys, with `--set key=value` overrides, so that unknown keys and bad values
 * are errors naming the key and where it came from, and the resolved config can be
 * written back as YAML and stored with the run. Other YAML files (sweeps) load as a
 * plain tree (config_tree_load_file, at the end); config/ is the one part with libyaml.
 *
 * Nested YAML mappings flatten to dotted keys: `replay: {capacity: 100000}` is
 * "replay.capacity".
 *
 *   static const cfg_key schema[] = {
 *     {"env.id", CFG_STRING, "CartPole-v1", 0, -1, "environment name"},
 *     {"actors", CFG_INT, "2", 1, 256, "actor processes"},
 *     {"optim.lr", CFG_FLOAT, "1e-3", 0, 1, "learning rate"},
 *   };
 *   config *c = config_create(schema, 3, &err);
 *   if (config_load_file(c, "configs/cartpole-apex.yaml", &err) ||
 *       config_set(c, "actors=4", &err)) die(err.msg);
 *   int64_t actors = config_int(c, "actors");
 */
#ifndef SHOAL_CONFIG_H
#define SHOAL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/shoal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cfg_type { CFG_INT = 0, CFG_FLOAT = 1, CFG_BOOL = 2, CFG_STRING = 3 } cfg_type;

/* One key of a schema. Numbers are checked against [min, max] unless min > max. */
typedef struct cfg_key {
  const char *name; /* dotted name, e.g. "replay.capacity" */
  cfg_type type;
  const char *def;  /* default, written as in YAML; NULL: the key is required */
  double min, max;  /* bounds for CFG_INT and CFG_FLOAT */
  const char *help; /* one line for `shoal run --help-config` */
  bool map;         /* CFG_STRING only: a YAML mapping of scalars under the key is taken as
                       its text "k=v,k=v" (env.options: an env's settings) */
  bool list;        /* CFG_STRING only: a YAML sequence of scalars, or of sequences of
                       scalars, under the key is taken as its flow text "[[32,8,4],[64,4,2]]"
                       (model.conv: rows); the same text as a scalar is the same value */
} cfg_key;

typedef struct config config;

/* Creates a config holding every key's default. Borrows schema, which must outlive
 * the config. Caller owns the result; NULL on error (a default that does not parse as
 * its type, a duplicate key). */
config *config_create(const cfg_key *schema, int n, shoal_error *err);
void config_destroy(config *c); /* NULL is fine */

/* Reads a YAML file of nested mappings with scalar leaves. On error (unreadable file,
 * YAML syntax, an unknown key, a bad value) the message names the file, line and key,
 * and no value of the config changes. */
int config_load_file(config *c, const char *path, shoal_error *err);
/* The same for YAML text; origin names it in messages ("<string>" when NULL). */
int config_load_string(config *c, const char *text, const char *origin, shoal_error *err);
/* Applies one "key=value" override (the value parsed as a YAML scalar). */
int config_set(config *c, const char *assignment, shoal_error *err);
/* When environment variable var is set and not empty, key takes its text as it is (not
 * parsed as YAML), with origin "$var". Secrets come this way: the environment of a
 * process is readable by its user only, unlike a file or a command line. Returns 0 (also
 * when var is unset) or SHOAL_EINVAL (unknown key, a value that does not fit). */
int config_set_from_env(config *c, const char *key, const char *var, shoal_error *err);
/* Checks that every required key was given. */
int config_check(const config *c, shoal_error *err);

/* The keys whose values differ between a and b (configs of one schema), leaving out the
 * nskip keys named in skip: returns how many, and writes "key: a's -> b's; ..." into out
 * (cap bytes, cut short when full). Can't fail. */
int config_diff(const config *a, const config *b, const char *const *skip, int nskip, char *out,
                size_t cap);

/* Typed reads. The key must exist in the schema with that type: asking for an
 * unknown key or the wrong type is a bug in the caller and stops the process. */
int64_t config_int(const config *c, const char *key);
double config_float(const config *c, const char *key);
bool config_bool(const config *c, const char *key);
const char *config_string(const config *c, const char *key); /* owned by c */
/* Where the value came from: "default", "FILE:LINE" or "--set". Owned by c. */
const char *config_origin(const config *c, const char *key);
/* True when key is in the schema. */
bool config_has(const config *c, const char *key);

/* Checks that string key holds one of n choices; SHOAL_EINVAL naming the key, where
 * its value came from, and the choices. (The schema types no enums: callers check
 * their choice keys with this after loading.) */
int config_check_choice(const config *c, const char *key, const char *const *choices, int n,
                        shoal_error *err);

/* Writes the resolved config as nested YAML. Caller frees *yaml with free(). */
int config_dump(const config *c, char **yaml, shoal_error *err);

/* The value secrets take in config_dump_redacted's output. */
#define CONFIG_REDACTED "<redacted>"
/* True when key names a secret: its last segment holds "token", "password", "secret"
 * or "credential" (any case). */
bool config_key_is_secret(const char *key);
/* config_dump for what is stored or shown: a secret key's non-empty value becomes
 * CONFIG_REDACTED, and the password of any URI with user info ("scheme://user:pass@")
 * becomes "***". Loading the result gives those literal values back, so a program
 * that needs the secrets must get them again (--set, --store). */
int config_dump_redacted(const config *c, char **yaml, shoal_error *err);
/* For the programs that read a config from the store or `shoal init --out`: a redacted
 * learner.token is taken from $SHOAL_TOKEN and a redacted store.uri from
 * $SHOAL_STORE_URI (the environment is readable by this user only, unlike a file or a
 * command line); a placeholder never becomes the real secret. Returns 0, or
 * SHOAL_EINVAL naming `where` when a redacted value stays without a replacement. */
int config_restore_secrets(config *c, const char *where, shoal_error *err);
/* What the learner and actor programs do with their --config FILE and --set overrides:
 * config_load_file, each config_set in order, then config_restore_secrets. Returns 0
 * or the first error. */
int config_load_program(config *c, const char *path, const char *const *sets, int nsets,
                        shoal_error *err);

/* ---- Any YAML file as a tree (config/tree.c) ----------------------------------------
 * For files that are not a schema's flat keys (a sweep's lists and ranges), so that
 * only config/ includes libyaml:
 *   cfg_tree *t;
 *   if (config_tree_load_file(&t, "sweep.yaml", &err)) die(err.msg);
 *   const cfg_node *root = config_tree_root(t);            // NULL: an empty file
 *   for (int i = 0; root && root->type == CFG_NODE_MAP && i < root->n; i++)
 *     printf("line %d: %s\n", root->keys[i].line, root->keys[i].scalar);
 *   config_tree_destroy(t);
 */
typedef enum cfg_node_type {
  CFG_NODE_SCALAR = 0,
  CFG_NODE_LIST = 1,
  CFG_NODE_MAP = 2
} cfg_node_type;

/* One node. Everything it points to is owned by its tree. */
typedef struct cfg_node {
  cfg_node_type type;
  int line;                     /* where the node starts in the file, from 1 */
  const char *scalar;           /* CFG_NODE_SCALAR: its text as written; else NULL */
  int n;                        /* CFG_NODE_LIST: items; CFG_NODE_MAP: pairs; else 0 */
  const struct cfg_node *items; /* a list's n items, or a mapping's n values */
  const struct cfg_node *keys;  /* a mapping's n keys (keys[i] maps to items[i]); else NULL */
} cfg_node;

typedef struct cfg_tree cfg_tree;

/* Reads the first YAML document of path. Aliases are expanded. Caller owns *out
 * (config_tree_destroy). Errors, *out untouched: SHOAL_ENOENT (cannot open, with the
 * system's reason), SHOAL_EFORMAT ("PATH:LINE: YAML: what"; also for a recursive alias),
 * SHOAL_ENOMEM. */
int config_tree_load_file(cfg_tree **out, const char *path, shoal_error *err);
/* The document's root, owned by t; NULL for an empty document. Can't fail. */
const cfg_node *config_tree_root(const cfg_tree *t);
void config_tree_destroy(cfg_tree *t); /* NULL is fine */

#ifdef __cplusplus
}
#endif
#endif
