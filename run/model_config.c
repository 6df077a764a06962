/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run/model_config.c — the config's `model` section, which every algorithm reads: a
 * preset (`mlp`, `minatar`, `nature`, `impala`) and the keys that override its parts
 * (conv rows, residual stages, dense widths, activation, input scale), made into the
 * algos_model the networks are built from (algos/torso.c).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/run.h"

/* Parses "[1, 2, 3]" (depth 1) or "[[1, 2, 3], [4, 5, 6, 7]]" (depth 2, rows of
 * row_min..row_max numbers) into vals (row-major, rows padded with 0 to row_max),
 * *nrows rows of at most max_rows. Returns NULL or what is wrong, in why. */
static const char *parse_rows(const char *s, int depth, int row_min, int row_max, int max_rows,
                              int *vals, int *nrows, char *why, size_t cap) {
  const char *p = s;
#define SKIP() \
  while (isspace((unsigned char)*p)) p++
  SKIP();
  if (*p++ != '[') return snprintf(why, cap, "'%s' is not a [list]", s), why;
  int n = 0;
  SKIP();
  while (*p && *p != ']') {
    if (n == max_rows) return snprintf(why, cap, "more than %d entries", max_rows), why;
    int k = 0, width = depth == 2 ? row_max : 1;
    bool inner = depth == 2;
    if (inner) {
      if (*p++ != '[')
        return snprintf(why, cap, "entry %d is not a [row] of %d to %d numbers", n + 1, row_min,
                        row_max),
               why;
      SKIP();
    }
    for (;;) {
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p || v < 0 || v > 1 << 24)
        return snprintf(why, cap, "entry %d: '%.16s' is not a whole number in [0, 2^24]", n + 1, p),
               why;
      if (k == width)
        return snprintf(why, cap, "row %d has more than %d numbers", n + 1, row_max), why;
      vals[n * width + k++] = (int)v;
      p = end;
      SKIP();
      if (!inner || *p == ']') break;
      if (*p++ != ',') return snprintf(why, cap, "row %d: expected ',' or ']'", n + 1), why;
      SKIP();
    }
    if (inner) {
      if (*p++ != ']') return snprintf(why, cap, "row %d is not closed by ']'", n + 1), why;
      if (k < row_min)
        return snprintf(why, cap, "row %d has %d numbers, not %d to %d", n + 1, k, row_min,
                        row_max),
               why;
      for (; k < width; k++) vals[n * width + k] = 0;
      SKIP();
    }
    n++;
    if (*p == ',') {
      p++;
      SKIP();
      if (*p == ']') return snprintf(why, cap, "a ',' before ']'"), why;
    } else if (*p != ']') {
      return snprintf(why, cap, "expected ',' or ']' after entry %d", n), why;
    }
  }
  if (*p++ != ']') return snprintf(why, cap, "the list is not closed by ']'"), why;
  SKIP();
  if (*p) return snprintf(why, cap, "text after the list's ']'"), why;
#undef SKIP
  *nrows = n;
  return NULL;
}

int run_model_from_config(const config *cfg, const char *preset_key, const int hidden[2], bool tanh,
                          algos_model *md, shoal_error *err) {
  const char *preset = config_string(cfg, "model.preset");
  const char *own = config_string(cfg, preset_key);
  /* The older key at its default (mlp) says nothing: a resolved config, as `shoal run`
   * hands its programs, holds every key with a file origin. */
  if (preset[0] && strcmp(own, "mlp") && strcmp(preset, own))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "config: model.preset = %s (from %s) and %s = %s (from %s) name two "
                           "networks: give one",
                           preset, config_origin(cfg, "model.preset"), preset_key, own,
                           config_origin(cfg, preset_key));
  if (!preset[0]) preset = own;
  if (algos_model_preset(preset, hidden, tanh, md))
    return shoal_error_set(
        err, SHOAL_EINVAL,
        "config: model.preset '%s' (from %s): not mlp, minatar, nature or "
        "impala",
        preset,
        config_origin(cfg, config_string(cfg, "model.preset")[0] ? "model.preset" : preset_key));
  char why[160];
  const char *text = config_string(cfg, "model.conv");
  if (text[0]) {
    int vals[ALGOS_MAX_CONV * 4];
    memset(md->conv, 0, sizeof md->conv); /* the preset's rows go whole */
    const char *bad = parse_rows(text, 2, 3, 4, ALGOS_MAX_CONV, vals, &md->nconv, why, sizeof why);
    if (bad)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "config: model.conv (from %s): %s; rows are [channels, kernel, "
                             "stride] or [channels, kernel, stride, padding]",
                             config_origin(cfg, "model.conv"), bad);
    for (int i = 0; i < md->nconv; i++)
      md->conv[i] = (algos_conv){vals[4 * i], vals[4 * i + 1], vals[4 * i + 2], vals[4 * i + 3]};
  }
  static const struct {
    const char *key;
    int max;
  } flat[2] = {{"model.stages", ALGOS_MAX_STAGES}, {"model.dense", ALGOS_MAX_DENSE}};
  for (int f = 0; f < 2; f++) {
    text = config_string(cfg, flat[f].key);
    if (!text[0]) continue;
    int *vals = f ? md->dense : md->stages, *n = f ? &md->ndense : &md->nstages;
    memset(vals, 0, (size_t)flat[f].max * sizeof *vals);
    const char *bad = parse_rows(text, 1, 1, 1, flat[f].max, vals, n, why, sizeof why);
    if (bad)
      return shoal_error_set(err, SHOAL_EINVAL, "config: %s (from %s): %s", flat[f].key,
                             config_origin(cfg, flat[f].key), bad);
  }
  const char *act = config_string(cfg, "model.activation");
  if (act[0]) {
    if (strcmp(act, "relu") && strcmp(act, "tanh"))
      return shoal_error_set(err, SHOAL_EINVAL,
                             "config: model.activation '%s' (from %s): not relu or tanh", act,
                             config_origin(cfg, "model.activation"));
    md->tanh = !strcmp(act, "tanh");
  }
  double scale = config_float(cfg, "model.input_scale");
  if (scale > 0) md->input_scale = (float)scale;
  return 0;
}
