/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_config.c — YAML configs against a schema, overrides, errors, dump. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"

static const cfg_key schema[] = {
    {"env.id", CFG_STRING, "CartPole-v1", 0, -1, "environment name"},
    {"actors", CFG_INT, "2", 1, 256, "actor processes"},
    {"optim.lr", CFG_FLOAT, "1e-3", 0, 1, "learning rate"},
    {"optim.clip", CFG_FLOAT, "10", 0, -1, "gradient clip"},
    {"replay.capacity", CFG_INT, "100000", 1, 1e9, "transitions"},
    {"replay.prioritized", CFG_BOOL, "true", 0, -1, "PER"},
    {"run.name", CFG_STRING, NULL, 0, -1, "required name"},
};
enum { NKEYS = sizeof schema / sizeof *schema };

static void test_defaults_and_file_values(void **state) {
  shoal_error err = {0};
  config *c = config_create(schema, NKEYS, &err);
  assert_non_null(c);
  assert_int_equal(config_int(c, "actors"), 2);
  assert_float_equal(config_float(c, "optim.lr"), 1e-3, 0);
  assert_string_equal(config_origin(c, "actors"), "default");
  /* run.name is required and has no default. */
  assert_int_equal(config_check(c, &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "run.name"));

  const char *yaml =
      "run:\n  name: demo\nenv:\n  id: MountainCar-v0\nactors: 4\n"
      "optim: {lr: 2.5e-4}\nreplay:\n  capacity: 1_000_000\n  prioritized: no\n";
  assert_int_equal(config_load_string(c, yaml, "t.yaml", &err), 0);
  assert_int_equal(config_check(c, &err), 0);
  assert_string_equal(config_string(c, "env.id"), "MountainCar-v0");
  assert_int_equal(config_int(c, "actors"), 4);
  assert_float_equal(config_float(c, "optim.lr"), 2.5e-4, 0);
  assert_float_equal(config_float(c, "optim.clip"), 10, 0);
  assert_int_equal(config_int(c, "replay.capacity"), 1000000);
  assert_false(config_bool(c, "replay.prioritized"));
  assert_string_equal(config_origin(c, "actors"), "t.yaml:5");
  config_destroy(c);
}

static void test_overrides(void **state) {
  shoal_error err = {0};
  config *c = config_create(schema, NKEYS, &err);
  assert_int_equal(config_set(c, "actors=8", &err), 0);
  assert_int_equal(config_set(c, "replay.capacity=1e6", &err), 0);
  assert_int_equal(config_set(c, "env.id=\"Acrobot-v1\"", &err), 0);
  assert_int_equal(config_int(c, "actors"), 8);
  assert_int_equal(config_int(c, "replay.capacity"), 1000000);
  assert_string_equal(config_string(c, "env.id"), "Acrobot-v1");
  assert_string_equal(config_origin(c, "actors"), "--set");

  assert_int_equal(config_set(c, "actorz=8", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "unknown key 'actorz'"));
  assert_int_equal(config_set(c, "actors=0", &err), SHOAL_ERANGE);
  assert_non_null(strstr(err.msg, "actors"));
  assert_int_equal(config_set(c, "actors=2.5", &err), SHOAL_EINVAL);
  assert_int_equal(config_set(c, "optim.lr=fast", &err), SHOAL_EINVAL);
  assert_int_equal(config_set(c, "optim.lr=nan", &err), SHOAL_EINVAL);
  assert_int_equal(config_set(c, "noequals", &err), SHOAL_EINVAL);
  assert_int_equal(config_int(c, "actors"), 8); /* failed sets changed nothing */
  config_destroy(c);
}

static void test_file_errors_name_key_and_line_and_change_nothing(void **state) {
  shoal_error err = {0};
  config *c = config_create(schema, NKEYS, &err);
  /* A good key before a bad one must not be applied. */
  assert_int_equal(config_load_string(c, "actors: 5\noptim:\n  lrr: 0.1\n", "x.yaml", &err),
                   SHOAL_EINVAL);
  assert_string_equal(err.msg, "config: x.yaml:3: unknown key 'optim.lrr'");
  assert_int_equal(config_int(c, "actors"), 2);

  assert_int_equal(config_load_string(c, "actors: many\n", "x.yaml", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "x.yaml:1: key 'actors'"));
  assert_int_equal(config_load_string(c, "actors: 1000\n", "x.yaml", &err), SHOAL_ERANGE);
  assert_int_equal(config_load_string(c, "actors: [1, 2]\n", "x.yaml", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "lists"));
  assert_int_equal(config_load_string(c, "actors: 1\nactors: 2\n", "x.yaml", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "twice"));
  assert_int_equal(config_load_string(c, "actors: \"unterminated\n", "x.yaml", &err),
                   SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "YAML syntax error"));
  assert_int_equal(config_load_string(c, "just a scalar\n", "x.yaml", &err), SHOAL_EFORMAT);
  assert_int_equal(config_load_file(c, "/nonexistent/shoal.yaml", &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, "/nonexistent/shoal.yaml"));
  assert_int_equal(config_int(c, "actors"), 2);
  /* An empty file is a valid, empty config. */
  assert_int_equal(config_load_string(c, "", "empty.yaml", &err), 0);
  config_destroy(c);
}

static void test_bad_schema(void **state) {
  shoal_error err = {0};
  const cfg_key dup[] = {{"a", CFG_INT, "1", 0, -1, ""}, {"a", CFG_INT, "2", 0, -1, ""}};
  assert_null(config_create(dup, 2, &err));
  assert_non_null(strstr(err.msg, "twice"));
  const cfg_key bad[] = {{"a", CFG_INT, "one", 0, -1, ""}};
  assert_null(config_create(bad, 1, &err));
  assert_non_null(strstr(err.msg, "default of 'a'"));
}

static void test_dump_round_trips_through_a_file(void **state) {
  shoal_error err = {0};
  config *c = config_create(schema, NKEYS, &err);
  assert_int_equal(config_set(c, "run.name=with \"quotes\" and \\", &err), 0);
  assert_int_equal(config_set(c, "optim.lr=3e-4", &err), 0);
  assert_int_equal(config_set(c, "optim.clip=0.30000000000000004", &err), 0);
  char *yaml = NULL;
  assert_int_equal(config_dump(c, &yaml, &err), 0);
  /* Nested, sorted, one header per group; a number as the shortest decimal that reads
   * back exactly (3e-4 is not 0.00029999999999999997; 0.1 + 0.2 needs its 17 digits). */
  assert_non_null(strstr(yaml, "optim:\n  clip: 0.30000000000000004\n  lr: 0.0003\n"));
  assert_non_null(strstr(yaml, "replay:\n  capacity: 100000\n  prioritized: true\n"));

  char path[] = "/tmp/shoal_cfg_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t)strlen(yaml));
  close(fd);
  config *d = config_create(schema, NKEYS, &err);
  assert_int_equal(config_load_file(d, path, &err), 0);
  unlink(path);
  assert_string_equal(config_string(d, "run.name"), "with \"quotes\" and \\");
  assert_true(config_float(d, "optim.lr") == 3e-4);
  assert_true(config_float(d, "optim.clip") == 0.1 + 0.2);
  char *yaml2 = NULL;
  assert_int_equal(config_dump(d, &yaml2, &err), 0);
  assert_string_equal(yaml, yaml2);
  free(yaml);
  free(yaml2);
  config_destroy(c);
  config_destroy(d);
}

static void test_choice_keys(void **state) {
  shoal_error err = {0};
  config *c = config_create(schema, NKEYS, &err);
  static const char *const envs[] = {"CartPole-v1", "Acrobot-v1"};
  assert_int_equal(config_check_choice(c, "env.id", envs, 2, &err), 0);
  assert_int_equal(config_set(c, "env.id=Pong", &err), 0);
  assert_int_equal(config_check_choice(c, "env.id", envs, 2, &err), SHOAL_EINVAL);
  assert_string_equal(err.msg,
                      "config: key 'env.id' (from --set): 'Pong' is not one of: CartPole-v1, "
                      "Acrobot-v1");
  config_destroy(c);
}

/* Writes text to a new temporary file; path gets its name. */
static void write_temp(char *path, const char *text) {
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
}

/* A map key (cfg_key.map) takes a YAML mapping of scalars as its text "k=v,k=v", and
 * its plain text as before; a nested mapping, a list, or a ',' or '=' in a key or value
 * is refused naming the key, and nothing changes. */
static void test_map_keys(void **state) {
  static const cfg_key ms[] = {
      {"env.id", CFG_STRING, "CartPole-v1", 0, -1, "environment"},
      {"env.options", CFG_STRING, "", 0, -1, "settings", true},
      {"actors", CFG_INT, "2", 1, 256, "actors"},
  };
  shoal_error err = {0};
  config *c = config_create(ms, 3, &err);
  assert_non_null(c);
  assert_int_equal(config_load_string(c,
                                      "env:\n  id: gym:LunarLander-v3\n  options:\n"
                                      "    continuous: true\n    gravity: -9.5\nactors: 3\n",
                                      "m.yaml", &err),
                   0);
  assert_string_equal(config_string(c, "env.options"), "continuous=true,gravity=-9.5");
  assert_int_equal(config_int(c, "actors"), 3);
  assert_int_equal(config_load_string(c, "env: {options: {}}\n", "e.yaml", &err), 0);
  assert_string_equal(config_string(c, "env.options"), "");
  assert_int_equal(config_load_string(c, "env: {options: 'a=1,b=2'}\n", "t.yaml", &err), 0);
  assert_string_equal(config_string(c, "env.options"), "a=1,b=2");
  const char *bad[] = {"env: {options: {a: {b: 1}}}\n", "env: {options: {a: [1, 2]}}\n",
                       "env: {options: {a: 'x,y'}}\n", "env: {options: {a=b: 1}}\n"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(config_load_string(c, bad[i], "bad.yaml", &err), SHOAL_EINVAL);
    assert_non_null(strstr(err.msg, "env.options"));
    assert_string_equal(config_string(c, "env.options"), "a=1,b=2");
  }
  /* a mapping under a key that is no map key is still an unknown key */
  assert_int_equal(config_load_string(c, "env: {id: {a: 1}}\n", "id.yaml", &err), SHOAL_EINVAL);
  config_destroy(c);
}

/* A list key takes a YAML sequence (of scalars, or of sequences of scalars) as its flow
 * text; the same text as a scalar is the same value, and a dump reads back. */
static void test_list_keys(void **state) {
  static const cfg_key ls[] = {
      {"model.conv", CFG_STRING, "", 0, -1, "rows", false, true},
      {"model.dense", CFG_STRING, "", 0, -1, "widths", false, true},
      {"actors", CFG_INT, "2", 1, 256, "actors"},
  };
  shoal_error err = {0};
  config *c = config_create(ls, 3, &err);
  assert_non_null(c);
  assert_int_equal(config_load_string(c,
                                      "model:\n  conv:\n    - [32, 8, 4]\n    - [64, 4, 2, 1]\n"
                                      "  dense: [512, 256]\nactors: 3\n",
                                      "l.yaml", &err),
                   0);
  assert_string_equal(config_string(c, "model.conv"), "[[32,8,4],[64,4,2,1]]");
  assert_string_equal(config_string(c, "model.dense"), "[512,256]");
  assert_int_equal(config_int(c, "actors"), 3);
  assert_string_equal(config_origin(c, "model.conv"), "l.yaml:3");
  /* empty lists, and the text as a scalar */
  assert_int_equal(config_load_string(c, "model: {conv: [], dense: '[8]'}\n", "e.yaml", &err), 0);
  assert_string_equal(config_string(c, "model.conv"), "[]");
  assert_string_equal(config_string(c, "model.dense"), "[8]");
  assert_int_equal(config_load_string(c, "model: {conv: [[], [1]]}\n", "e.yaml", &err), 0);
  assert_string_equal(config_string(c, "model.conv"), "[[],[1]]");
  /* dumped and read back: the same values */
  assert_int_equal(
      config_load_string(c, "model: {conv: [[16, 3, 1]], dense: [64, 32]}\n", "d", &err), 0);
  char *yaml = NULL;
  assert_int_equal(config_dump(c, &yaml, &err), 0);
  config *back = config_create(ls, 3, &err);
  assert_int_equal(config_load_string(back, yaml, "dump", &err), 0);
  assert_string_equal(config_string(back, "model.conv"), "[[16,3,1]]");
  assert_string_equal(config_string(back, "model.dense"), "[64,32]");
  free(yaml);
  config_destroy(back);
  /* deeper lists, mappings in lists and separators in items are refused, naming the key;
   * nothing changes */
  const char *bad[] = {"model: {conv: [[[1]]]}\n", "model: {conv: [{a: 1}]}\n",
                       "model: {conv: ['1,2']}\n", "model: {conv: ['[1']}\n"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(config_load_string(c, bad[i], "bad.yaml", &err), SHOAL_EINVAL);
    assert_non_null(strstr(err.msg, "model.conv"));
    assert_string_equal(config_string(c, "model.conv"), "[[16,3,1]]");
  }
  /* a list under a key that is no list key is still refused */
  assert_int_equal(config_load_string(c, "actors: [1, 2]\n", "a.yaml", &err), SHOAL_EINVAL);
  assert_non_null(strstr(err.msg, "lists are not allowed"));
  config_destroy(c);
}

static void test_tree_of_any_yaml(void **state) {
  shoal_error err = {0};
  char path[] = "/tmp/shoal_tree_XXXXXX";
  write_temp(path,
             "sweep:\n"
             "  name: lr\n"
             "params:\n"
             "  dqn.lr: [0.001, 0.0005]\n"
             "  dqn.period: {min: 100, max: 1000}\n"
             "  base: &b here\n"
             "  again: *b\n");
  cfg_tree *t = NULL;
  assert_int_equal(config_tree_load_file(&t, path, &err), 0);
  const cfg_node *root = config_tree_root(t);
  assert_non_null(root);
  assert_int_equal(root->type, CFG_NODE_MAP);
  assert_int_equal(root->n, 2);
  assert_string_equal(root->keys[0].scalar, "sweep");
  assert_int_equal(root->keys[1].line, 3);
  const cfg_node *params = &root->items[1];
  assert_int_equal(params->type, CFG_NODE_MAP);
  assert_int_equal(params->n, 4);
  const cfg_node *lr = &params->items[0];
  assert_int_equal(lr->type, CFG_NODE_LIST);
  assert_int_equal(lr->n, 2);
  assert_null(lr->keys);
  assert_string_equal(lr->items[1].scalar, "0.0005");
  assert_int_equal(lr->items[1].line, 4);
  const cfg_node *range = &params->items[1];
  assert_int_equal(range->type, CFG_NODE_MAP);
  assert_string_equal(range->keys[1].scalar, "max");
  assert_string_equal(range->items[1].scalar, "1000");
  assert_null(range->scalar);
  assert_string_equal(params->items[3].scalar, "here"); /* the alias, expanded */
  config_tree_destroy(t);
  unlink(path);

  /* An empty file has no root; a syntax error and a recursive alias name file and line. */
  char empty[] = "/tmp/shoal_tree_XXXXXX";
  write_temp(empty, "");
  assert_int_equal(config_tree_load_file(&t, empty, &err), 0);
  assert_null(config_tree_root(t));
  config_tree_destroy(t);
  unlink(empty);
  char bad[] = "/tmp/shoal_tree_XXXXXX";
  write_temp(bad, "a: [1, 2\nb: 3\n");
  t = NULL;
  assert_int_equal(config_tree_load_file(&t, bad, &err), SHOAL_EFORMAT);
  assert_null(t);
  assert_non_null(strstr(err.msg, bad));
  assert_non_null(strstr(err.msg, ": YAML: "));
  unlink(bad);
  char loop[] = "/tmp/shoal_tree_XXXXXX";
  write_temp(loop, "a: &x [1, *x]\n");
  assert_int_equal(config_tree_load_file(&t, loop, &err), SHOAL_EFORMAT);
  assert_null(t);
  assert_non_null(strstr(err.msg, "recursive alias"));
  unlink(loop);
  assert_int_equal(config_tree_load_file(&t, "/nonexistent/sweep.yaml", &err), SHOAL_ENOENT);
  assert_non_null(strstr(err.msg, "/nonexistent/sweep.yaml"));
  config_tree_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_and_file_values),
      cmocka_unit_test(test_overrides),
      cmocka_unit_test(test_file_errors_name_key_and_line_and_change_nothing),
      cmocka_unit_test(test_bad_schema),
      cmocka_unit_test(test_dump_round_trips_through_a_file),
      cmocka_unit_test(test_choice_keys),
      cmocka_unit_test(test_tree_of_any_yaml),
      cmocka_unit_test(test_map_keys),
      cmocka_unit_test(test_list_keys),
  };
  return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
