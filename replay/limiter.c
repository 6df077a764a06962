/* SPDX-License-Identifier: Apache-2.0 */
/* The rate limiter (see replay/limiter.h). */
#define _GNU_SOURCE
#include "replay/limiter.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct replay_limiter {
  replay_limiter_config c;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* on CLOCK_MONOTONIC: a clock step neither cuts nor stretches a wait */
  double inserted, sampled;
  uint64_t waits[2]; /* [0] inserts, [1] samples */
  bool closed;
};

int replay_limiter_create(const replay_limiter_config *c, replay_limiter **out, shoal_error *err) {
  if (!(c->samples_per_insert > 0 && isfinite(c->samples_per_insert)) ||
      !(c->insert_tolerance >= 0 && isfinite(c->insert_tolerance)) ||
      !(c->sample_tolerance >= 0 && isfinite(c->sample_tolerance)) || c->min_size_to_sample < 0)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "replay: rate limiter samples_per_insert %g, tolerances %g and %g, "
                           "min_size_to_sample %lld must be finite and >= 0 (spi > 0)",
                           c->samples_per_insert, c->insert_tolerance, c->sample_tolerance,
                           (long long)c->min_size_to_sample);
  replay_limiter *l = calloc(1, sizeof *l);
  if (!l) return shoal_error_set(err, SHOAL_ENOMEM, "replay: rate limiter: out of memory");
  l->c = *c;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, &ca);
  pthread_condattr_destroy(&ca);
  *out = l;
  return 0;
}

void replay_limiter_destroy(replay_limiter *l) {
  if (!l) return;
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}

/* Whether the side may go now (called with mu held). */
static bool may_go(const replay_limiter *l, bool inserting, double amount) {
  const replay_limiter_config *c = &l->c;
  double d = c->samples_per_insert * (l->inserted - (double)c->min_size_to_sample) - l->sampled;
  if (inserting)
    return d + (c->insert_counts_own ? c->samples_per_insert * amount : 0) <= c->insert_tolerance;
  return l->inserted >= (double)c->min_size_to_sample && d >= -c->sample_tolerance;
}

static int enter(replay_limiter *l, bool inserting, double amount, int64_t ms, shoal_error *err) {
  struct timespec dl = {0};
  if (ms > 0) {
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (ms % 1000) * 1000000;
    if (dl.tv_nsec >= 1000000000) dl.tv_sec++, dl.tv_nsec -= 1000000000;
  }
  int rc = 0;
  bool waited = false;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    if (l->closed) {
      rc = shoal_error_set(err, SHOAL_ECLOSED, "replay: the rate limiter was closed");
      break;
    }
    if (may_go(l, inserting, amount)) break;
    waited = true;
    int w = ms == 0  ? ETIMEDOUT
            : ms > 0 ? pthread_cond_timedwait(&l->cv, &l->mu, &dl)
                     : pthread_cond_wait(&l->cv, &l->mu);
    if (w == ETIMEDOUT) {
      rc = shoal_error_set(err, SHOAL_ETIMEDOUT,
                           "replay: the rate limiter held this %s for %lld ms (inserted %.0f, "
                           "sampled %.0f, samples per insert %g)",
                           inserting ? "insert" : "sample", (long long)ms, l->inserted, l->sampled,
                           l->c.samples_per_insert);
      break;
    }
  }
  if (!rc) {
    *(inserting ? &l->inserted : &l->sampled) += amount;
    pthread_cond_broadcast(&l->cv);
  }
  l->waits[inserting ? 0 : 1] += waited;
  pthread_mutex_unlock(&l->mu);
  return rc;
}

int replay_limiter_insert(replay_limiter *l, double amount, int64_t timeout_ms, shoal_error *err) {
  return enter(l, true, amount, timeout_ms, err);
}

int replay_limiter_sample(replay_limiter *l, double amount, int64_t timeout_ms, shoal_error *err) {
  return enter(l, false, amount, timeout_ms, err);
}

void replay_limiter_undo(replay_limiter *l, double inserted, double sampled) {
  pthread_mutex_lock(&l->mu);
  l->inserted -= inserted;
  l->sampled -= sampled;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

void replay_limiter_set_ratio(replay_limiter *l, double spi, double insert_tolerance) {
  if (!(spi > 0 && isfinite(spi)) || !(insert_tolerance >= 0 && isfinite(insert_tolerance))) return;
  pthread_mutex_lock(&l->mu);
  double since = l->inserted - (double)l->c.min_size_to_sample;
  if (since > 0) {
    double s = l->sampled + (spi - l->c.samples_per_insert) * since;
    l->sampled = s > 0 ? s : 0;
  }
  l->c.samples_per_insert = spi;
  l->c.insert_tolerance = insert_tolerance;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

void replay_limiter_set_counts(replay_limiter *l, double inserted, double sampled) {
  pthread_mutex_lock(&l->mu);
  l->inserted = inserted;
  l->sampled = sampled;
  l->waits[0] = l->waits[1] = 0;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

void replay_limiter_close(replay_limiter *l) {
  pthread_mutex_lock(&l->mu);
  l->closed = true;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

void replay_limiter_stats_get(replay_limiter *l, replay_limiter_stats *out) {
  pthread_mutex_lock(&l->mu);
  *out = (replay_limiter_stats){l->inserted, l->sampled, l->waits[0], l->waits[1]};
  pthread_mutex_unlock(&l->mu);
}
