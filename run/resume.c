/* SPDX-License-Identifier: Apache-2.0 */
/* What a resume may change in a run's config (run/run.h). */
#include <stdio.h>
#include <string.h>

#include "run/run.h"

/* The keys whose values shape what a run's snapshots and replay hold: the tensors of its
 * network, the observation statistics and the rows of its replay. Other keys (learning
 * rates, replay and optimizer settings, limits) a resumed learner rebuilds from. */
static const char *const fixed_both[] = {"algo",       "env.id",       "model.preset",
                                         "model.conv", "model.stages", "model.dense"};
static const char *const fixed_apex[] = {"dqn.net", "dqn.hidden0", "dqn.hidden1", "dqn.dueling",
                                         "dqn.layer"};
static const char *const fixed_onpolicy[] = {"ac.torso", "ac.hidden0", "ac.hidden1",  "ac.separate",
                                             "ac.lstm",  "ac.layer",   "env.norm_obs"};

/* c's value of key as text (strings quoted), for comparing and for messages. */
static void value_text(const config *c, const char *key, char *out, size_t cap) {
  int n;
  const cfg_key *keys = config_has(c, "ac.torso") ? onpolicy_schema(&n) : apex_schema(&n);
  for (int i = 0; i < n; i++) {
    if (strcmp(keys[i].name, key)) continue;
    switch (keys[i].type) {
      case CFG_INT: snprintf(out, cap, "%lld", (long long)config_int(c, key)); return;
      case CFG_FLOAT: snprintf(out, cap, "%g", config_float(c, key)); return;
      case CFG_BOOL: snprintf(out, cap, "%s", config_bool(c, key) ? "true" : "false"); return;
      default: snprintf(out, cap, "'%s'", config_string(c, key)); return;
    }
  }
  snprintf(out, cap, "?");
}

static bool same_value(const config *a, const config *b, const char *key) {
  char va[320], vb[320];
  value_text(a, key, va, sizeof va);
  value_text(b, key, vb, sizeof vb);
  return !strcmp(va, vb);
}

static int refuse(const config *was, const config *now, const char *key, const char *why,
                  shoal_error *err) {
  char va[320], vb[320];
  value_text(was, key, va, sizeof va);
  value_text(now, key, vb, sizeof vb);
  return shoal_error_set(err, SHOAL_EINVAL,
                         "%s %s -> %s: a resume cannot change it (%s); keep %s, or start a new run "
                         "(another run.name)",
                         key, va, vb, why, va);
}

static bool same_space(const env_space *a, const env_space *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim || a->n != b->n || a->size != b->size)
    return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

/* env.options may change the env's spaces (a frame stack, another grid) or not (an
 * episode limit, sticky actions): the two envs say which. */
static int check_env_options(const config *was, const config *now, shoal_error *err) {
  const char *id = config_string(now, "env.id");
  env *ea = NULL, *eb = NULL;
  shoal_error ignored = {0};
  int rc = env_make_opts(&ea, id, config_string(was, "env.options"), &ignored);
  if (rc) return 0; /* the stored options no longer make an env: nothing to compare with */
  rc = env_make_opts(&eb, id, config_string(now, "env.options"), err);
  if (rc) {
    env_destroy(ea);
    return rc;
  }
  const env_spec *sa = env_get_spec(ea), *sb = env_get_spec(eb);
  const char *what = !same_space(&sa->obs, &sb->obs)   ? "the env's observations change shape"
                     : !same_space(&sa->act, &sb->act) ? "the env's actions change"
                                                       : NULL;
  rc = what ? refuse(was, now, "env.options", what, err) : 0;
  env_destroy(ea);
  env_destroy(eb);
  return rc;
}

int run_resume_check(const config *was, const config *now, shoal_error *err) {
  const bool onpolicy = config_has(now, "ac.torso");
  for (size_t i = 0; i < sizeof fixed_both / sizeof *fixed_both; i++)
    if (!same_value(was, now, fixed_both[i]))
      return refuse(was, now, fixed_both[i],
                    i == 0 ? "its snapshots hold another algorithm's state"
                           : "its network and replay are the env's shapes",
                    err);
  const char *const *fixed = onpolicy ? fixed_onpolicy : fixed_apex;
  size_t n = onpolicy ? sizeof fixed_onpolicy / sizeof *fixed_onpolicy
                      : sizeof fixed_apex / sizeof *fixed_apex;
  for (size_t i = 0; i < n; i++)
    if (!same_value(was, now, fixed[i]))
      return refuse(was, now, fixed[i],
                    !strcmp(fixed[i], "env.norm_obs")
                        ? "its snapshots hold the observation statistics, or none"
                        : "its snapshots hold the network's tensors in their shapes",
                    err);
  if (!same_value(was, now, "env.options")) return check_env_options(was, now, err);
  return 0;
}
