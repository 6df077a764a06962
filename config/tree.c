/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config/tree.c — a YAML file as a tree of scalars, lists and mappings, for files a
 * schema of flat keys cannot describe (a sweep's lists and ranges). libyaml's document
 * API parses; the tree borrows the document's scalars and adds the arrays that make
 * lists and mappings plain C to walk.
 *
 * Aliases are expanded (a tree, not a graph): nesting deeper than TREE_DEPTH_MAX (a
 * recursive alias) and more than TREE_NODES_MAX nodes (an alias bomb) are refused.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config/config.h"

#define TREE_DEPTH_MAX 64
#define TREE_NODES_MAX ((size_t)1 << 20)

struct cfg_tree {
  yaml_document_t doc; /* the scalars' text lives here */
  cfg_node root;
  bool has_root; /* false for an empty document */
  size_t nodes;  /* converted so far, against TREE_NODES_MAX */
};

static void free_node(cfg_node *n) {
  for (int i = 0; i < n->n; i++) {
    free_node((cfg_node *)&n->items[i]);
    if (n->keys) free_node((cfg_node *)&n->keys[i]);
  }
  free((cfg_node *)n->items), free((cfg_node *)n->keys);
  n->items = n->keys = NULL;
  n->n = 0;
}

/* Fills out from y (out was zeroed). On error out holds what was converted so far,
 * which free_node frees. */
static int convert(cfg_tree *t, const char *path, yaml_node_t *y, int depth, cfg_node *out,
                   shoal_error *err) {
  out->line = (int)y->start_mark.line + 1;
  if (depth > TREE_DEPTH_MAX || ++t->nodes > TREE_NODES_MAX)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "%s:%d: YAML: more than %d levels or %zu nodes (a recursive alias?)",
                           path, out->line, TREE_DEPTH_MAX, TREE_NODES_MAX);
  if (y->type == YAML_SCALAR_NODE) {
    out->type = CFG_NODE_SCALAR;
    out->scalar = (const char *)y->data.scalar.value;
    return 0;
  }
  size_t n;
  if (y->type == YAML_SEQUENCE_NODE) {
    out->type = CFG_NODE_LIST;
    n = (size_t)(y->data.sequence.items.top - y->data.sequence.items.start);
  } else {
    out->type = CFG_NODE_MAP;
    n = (size_t)(y->data.mapping.pairs.top - y->data.mapping.pairs.start);
  }
  if (n == 0) return 0;
  cfg_node *items = calloc(n, sizeof *items);
  cfg_node *keys = out->type == CFG_NODE_MAP ? calloc(n, sizeof *keys) : NULL;
  out->items = items, out->keys = keys;
  if (!items || (out->type == CFG_NODE_MAP && !keys))
    return shoal_error_set(err, SHOAL_ENOMEM, "%s: out of memory reading YAML", path);
  for (size_t i = 0; i < n; i++) {
    out->n = (int)i + 1; /* free_node sees only what was started */
    int rc;
    if (out->type == CFG_NODE_LIST) {
      rc = convert(t, path, yaml_document_get_node(&t->doc, y->data.sequence.items.start[i]),
                   depth + 1, &items[i], err);
    } else {
      yaml_node_pair_t *p = &y->data.mapping.pairs.start[i];
      rc = convert(t, path, yaml_document_get_node(&t->doc, p->key), depth + 1, &keys[i], err);
      if (!rc)
        rc = convert(t, path, yaml_document_get_node(&t->doc, p->value), depth + 1, &items[i], err);
    }
    if (rc) return rc;
  }
  return 0;
}

int config_tree_load_file(cfg_tree **out, const char *path, shoal_error *err) {
  if (!out || !path) return shoal_error_set(err, SHOAL_EINVAL, "config: tree: NULL argument");
  FILE *f = fopen(path, "rb");
  if (!f) return shoal_error_set(err, SHOAL_ENOENT, "cannot open '%s': %s", path, strerror(errno));
  cfg_tree *t = calloc(1, sizeof *t);
  if (!t) {
    fclose(f);
    return shoal_error_set(err, SHOAL_ENOMEM, "%s: out of memory reading YAML", path);
  }
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) {
    free(t);
    fclose(f);
    return shoal_error_set(err, SHOAL_ENOMEM, "%s: out of memory reading YAML", path);
  }
  yaml_parser_set_input_file(&parser, f);
  int rc = 0;
  if (!yaml_parser_load(&parser, &t->doc)) {
    rc = shoal_error_set(err, SHOAL_EFORMAT, "%s:%zu: YAML: %s", path, parser.problem_mark.line + 1,
                         parser.problem ? parser.problem : "error");
    yaml_parser_delete(&parser);
    fclose(f);
    free(t);
    return rc;
  }
  yaml_parser_delete(&parser);
  fclose(f);
  yaml_node_t *root = yaml_document_get_root_node(&t->doc);
  if (root) {
    t->has_root = true;
    rc = convert(t, path, root, 0, &t->root, err);
  }
  if (rc) {
    config_tree_destroy(t);
    return rc;
  }
  *out = t;
  return 0;
}

const cfg_node *config_tree_root(const cfg_tree *t) { return t && t->has_root ? &t->root : NULL; }

void config_tree_destroy(cfg_tree *t) {
  if (!t) return;
  free_node(&t->root);
  yaml_document_delete(&t->doc);
  free(t);
}
