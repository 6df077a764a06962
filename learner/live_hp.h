/* SPDX-License-Identifier: Apache-2.0 */
/*
 * learner/live_hp.h — live tuning shared by both learners: the keys a person may change
 * on a running learner (SetHyperparams, `shoal set`), checked against the config schema
 * on the rpc thread and applied by the trainer between two updates.
 *
 * Threads: live_hp_request runs on rpc threads and waits (up to 5 s) for the trainer;
 * live_hp_apply and reads of hp[] run on the trainer thread, the only writer of hp[];
 * live_hp_counters (Status) takes the lock.
 */
#ifndef SHOAL_LEARNER_LIVE_HP_H
#define SHOAL_LEARNER_LIVE_HP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "rpc/rpc.h"
#include "store/store.h"

enum { LIVE_HP_MAX = 16 };

typedef struct live_hp {
  int n;
  const char *names[LIVE_HP_MAX];
  const cfg_key *schema[LIVE_HP_MAX];
  const cfg_key *keys; /* the learner's whole schema: tells an unknown key from one not live */
  int nkeys;
  double hp[LIVE_HP_MAX]; /* the values in effect */
  double pending[LIVE_HP_MAX];
  bool has[LIVE_HP_MAX];
  int positive; /* a key that must stay > 0 (a learning rate), -1: none */
  uint64_t requested, applied, changes;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  const atomic_bool *stopping; /* requests stop waiting when it is set */
} live_hp;

/* Takes the n keys' schema entries from keys and their starting values from cfg (every
 * key must be a number in the schema: a caller's bug otherwise, and the process stops).
 * Each starting value is recorded as metric "hparam/<key>" at env_steps. With resume, a
 * key whose newest stored hparam row is newer than cfg_path's modification time (a
 * learner restarted after live changes) gets that value back as a pending change,
 * unless this start gives the key with --set. The
 * names must outlive lh. Returns 0. */
int live_hp_init(live_hp *lh, const char *const *names, int n, int positive, const cfg_key *keys,
                 int nkeys, const config *cfg, const atomic_bool *stopping, store *st,
                 store_writer *wr, const char *run, const char *cfg_path, int64_t env_steps,
                 bool resume);
void live_hp_destroy(live_hp *lh);

/* SetHyperparams: all entries are checked (a live key, finite, within the schema's
 * bounds, whole for integers) before any is taken; then waits up to 5 s for the trainer
 * to apply them. Returns 0 with *applied = n, or SHOAL_EINVAL naming the entry (a key
 * the config does not have is said to be unknown, a key it has but that is not live
 * to need a restart). */
int live_hp_request(live_hp *lh, const rpc_hyperparam *h, int n, uint32_t *applied,
                    shoal_error *err);

/* The trainer's side, between two updates. For each pending change apply(user, k, v,
 * err) is called (NULL: nothing to do beyond hp[k]); when it returns 0 the value takes
 * effect, is recorded as metric "hparam/<key>" at env_steps and printed as a JSON line
 * {"event":"hparam",...} on stdout; else the change is dropped with a message. Wakes
 * the waiting requests. */
typedef int (*live_hp_apply_fn)(void *user, int k, double v, shoal_error *err);
void live_hp_apply(live_hp *lh, live_hp_apply_fn apply, void *user, store_writer *wr,
                   const char *run, int64_t env_steps, const char *prog);

/* Appends "hparam_changes" and "hparam/<key>" counters to out[*k..cap). */
void live_hp_counters(live_hp *lh, rpc_counter *out, int *k, int cap);

/* Wakes every waiting request (at shutdown). */
void live_hp_wake(live_hp *lh);

#endif
