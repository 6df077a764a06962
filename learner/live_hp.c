/* SPDX-License-Identifier: Apache-2.0 */
/* learner/live_hp.c — live tuning shared by both learners (see live_hp.h). */
#define _GNU_SOURCE
#include "learner/live_hp.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double unix_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int index_of(const live_hp *lh, const char *key) {
  for (int k = 0; k < lh->n; k++)
    if (!strcmp(key, lh->names[k])) return k;
  return -1;
}

static void metric_name(const live_hp *lh, int k, char *out, size_t cap) {
  snprintf(out, cap, "hparam/%s", lh->names[k]);
}

int live_hp_init(live_hp *lh, const char *const *names, int n, int positive, const cfg_key *keys,
                 int nkeys, const config *cfg, const atomic_bool *stopping, store *st,
                 store_writer *wr, const char *run, const char *cfg_path, int64_t env_steps,
                 bool resume) {
  SHOAL_ASSERT(n > 0 && n <= LIVE_HP_MAX);
  memset(lh, 0, sizeof *lh);
  lh->n = n;
  lh->positive = positive;
  lh->stopping = stopping;
  lh->keys = keys, lh->nkeys = nkeys;
  pthread_mutex_init(&lh->mu, NULL);
  pthread_cond_init(&lh->cv, NULL);
  for (int k = 0; k < n; k++) {
    lh->names[k] = names[k];
    for (int j = 0; j < nkeys; j++)
      if (!strcmp(keys[j].name, names[k])) lh->schema[k] = &keys[j];
    SHOAL_ASSERT(lh->schema[k]);
    lh->hp[k] = lh->schema[k]->type == CFG_INT ? (double)config_int(cfg, names[k])
                                               : config_float(cfg, names[k]);
  }
  double t_unix = unix_now();
  struct stat sb;
  double cfg_time = cfg_path && stat(cfg_path, &sb) == 0
                        ? (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec
                        : t_unix;
  for (int k = 0; k < n; k++) {
    char name[STORE_NAME_MAX];
    metric_name(lh, k, name, sizeof name);
    /* A value given with --set on this start is what the person wants now: it wins over
     * what earlier processes recorded. */
    if (resume && st && strcmp(config_origin(cfg, names[k]), "--set")) {
      store_metric *rows = NULL;
      size_t nrows = 0;
      shoal_error err = {0};
      /* The newest row by time: a resumed learner may have counted steps from an
       * older snapshot, so the last by step need not be the last written. */
      size_t last = 0;
      int qrc = store_metrics_query(st, run, name, INT64_MIN, INT64_MAX, &rows, &nrows, &err);
      for (size_t i = 1; qrc == 0 && i < nrows; i++)
        if (rows[i].time >= rows[last].time) last = i;
      if (qrc == 0 && nrows && rows[last].time > cfg_time && rows[last].value != lh->hp[k]) {
        lh->pending[k] = rows[last].value;
        lh->has[k] = true;
        lh->requested = 1;
      }
      free(rows);
    }
    /* Recorded once at the start, so a plot of hparam/<key> begins at the first value. */
    store_writer_metric(wr, run, name, env_steps, t_unix, lh->hp[k]);
  }
  return 0;
}

void live_hp_destroy(live_hp *lh) {
  pthread_mutex_destroy(&lh->mu);
  pthread_cond_destroy(&lh->cv);
}

int live_hp_request(live_hp *lh, const rpc_hyperparam *h, int n, uint32_t *applied,
                    shoal_error *err) {
  if (n < 1) return shoal_error_set(err, SHOAL_EINVAL, "no hyperparameters given");
  for (int i = 0; i < n; i++) {
    int k = index_of(lh, h[i].key);
    if (k < 0) {
      char list[512] = "";
      for (int j = 0; j < lh->n; j++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "",
                 lh->names[j]);
      bool known = false;
      for (int j = 0; j < lh->nkeys && !known; j++) known = !strcmp(lh->keys[j].name, h[i].key);
      if (!known)
        return shoal_error_set(err, SHOAL_EINVAL,
                               "'%s' is not a config key (`shoal config keys` lists them); the "
                               "keys a running learner can change: %s",
                               h[i].key, list);
      return shoal_error_set(err, SHOAL_EINVAL,
                             "'%s' cannot be changed on a running learner (live keys: %s): "
                             "stop the run and start it again with `shoal run --resume RUN "
                             "--set %s=VALUE`",
                             h[i].key, list, h[i].key);
    }
    const cfg_key *ck = lh->schema[k];
    if (h[i].is_text || !isfinite(h[i].number))
      return shoal_error_set(err, SHOAL_EINVAL, "'%s' needs a finite number", h[i].key);
    if (h[i].number < ck->min || h[i].number > ck->max)
      return shoal_error_set(err, SHOAL_EINVAL, "'%s': %g is outside [%g, %g]", h[i].key,
                             h[i].number, ck->min, ck->max);
    if (ck->type == CFG_INT && h[i].number != floor(h[i].number))
      return shoal_error_set(err, SHOAL_EINVAL, "'%s' needs a whole number, not %g", h[i].key,
                             h[i].number);
    if (k == lh->positive && !(h[i].number > 0))
      return shoal_error_set(err, SHOAL_EINVAL, "'%s' must be positive", h[i].key);
  }
  pthread_mutex_lock(&lh->mu);
  for (int i = 0; i < n; i++) {
    int k = index_of(lh, h[i].key);
    lh->pending[k] = h[i].number;
    lh->has[k] = true;
  }
  uint64_t gen = ++lh->requested;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 5;
  /* Returns once the trainer applied them, so that when `shoal set` returns the change
   * is in effect (a trainer busy evaluating applies it right after). */
  while (lh->applied < gen && !(lh->stopping && atomic_load(lh->stopping)))
    if (pthread_cond_timedwait(&lh->cv, &lh->mu, &until) == ETIMEDOUT) break;
  pthread_mutex_unlock(&lh->mu);
  *applied = (uint32_t)n;
  return 0;
}

void live_hp_apply(live_hp *lh, live_hp_apply_fn apply, void *user, store_writer *wr,
                   const char *run, int64_t env_steps, const char *prog) {
  pthread_mutex_lock(&lh->mu);
  if (lh->applied == lh->requested) {
    pthread_mutex_unlock(&lh->mu);
    return;
  }
  for (int k = 0; k < lh->n; k++) {
    if (!lh->has[k]) continue;
    lh->has[k] = false;
    double v = lh->pending[k], old = lh->hp[k];
    shoal_error err = {0};
    if (apply && apply(user, k, v, &err)) {
      fprintf(stderr, "%s: live %s=%g not applied: %s\n", prog, lh->names[k], v, err.msg);
      continue;
    }
    lh->hp[k] = v;
    lh->changes++;
    char name[STORE_NAME_MAX];
    metric_name(lh, k, name, sizeof name);
    store_writer_metric(wr, run, name, env_steps, unix_now(), v);
    printf("{\"event\":\"hparam\",\"key\":\"%s\",\"value\":%.9g,\"old\":%.9g,\"env_steps\":%lld}\n",
           lh->names[k], v, old, (long long)env_steps);
    fflush(stdout);
  }
  lh->applied = lh->requested;
  pthread_cond_broadcast(&lh->cv);
  pthread_mutex_unlock(&lh->mu);
}

void live_hp_counters(live_hp *lh, rpc_counter *out, int *k, int cap) {
  pthread_mutex_lock(&lh->mu);
  if (*k < cap) {
    snprintf(out[*k].name, sizeof out[*k].name, "hparam_changes");
    out[(*k)++].value = (double)lh->changes;
  }
  for (int h = 0; h < lh->n && *k < cap; h++, (*k)++) {
    snprintf(out[*k].name, sizeof out[*k].name, "hparam/%s", lh->names[h]);
    out[*k].value = lh->hp[h];
  }
  pthread_mutex_unlock(&lh->mu);
}

void live_hp_wake(live_hp *lh) {
  pthread_mutex_lock(&lh->mu);
  pthread_cond_broadcast(&lh->cv);
  pthread_mutex_unlock(&lh->mu);
}
