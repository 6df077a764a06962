/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay/limiter.h — the rate limiter, as Reverb's SampleToInsertRatio: it keeps the
 * samples S taken from a memory near samples_per_insert (spi) × the steps I inserted,
 * so the ratio, not the machine's speed, decides how often each step is replayed.
 * With d = spi·(I − min_size_to_sample) − S, an insert waits while d is above
 * insert_tolerance (the learner is behind) and a sample waits while d is below
 * −sample_tolerance or fewer than min_size_to_sample steps are in (the actors are
 * behind). One limiter serves the replay memories (replay_config.samples_per_insert)
 * and the Ape-X learner, whose inserts are whole batches checked before they go in.
 *
 *   replay_limiter_config c = {.samples_per_insert = 8, .insert_tolerance = 4096,
 *                              .min_size_to_sample = 1000};
 *   replay_limiter *l;
 *   replay_limiter_create(&c, &l, &err);
 *   replay_limiter_insert(l, 64, 2000, &err);   // an actor's batch: waits up to 2 s
 *   replay_limiter_sample(l, 32, 10, &err);     // the trainer: waits up to 10 ms
 *   replay_limiter_destroy(l);
 *
 * Thread-safe: any thread may call any function but destroy.
 */
#ifndef SHOAL_REPLAY_LIMITER_H
#define SHOAL_REPLAY_LIMITER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/shoal.h"

typedef struct replay_limiter_config {
  double samples_per_insert; /* spi > 0 */
  double insert_tolerance;   /* >= 0: how far (in samples) inserts may run ahead */
  double sample_tolerance;   /* >= 0: how far (in samples) samples may run ahead */
  int64_t min_size_to_sample;
  /* An insert's check counts its own steps (so a batch never takes d past the band);
   * else it checks d as it is and may overshoot by its own size. */
  bool insert_counts_own;
} replay_limiter_config;

typedef struct replay_limiter replay_limiter;

typedef struct replay_limiter_stats {
  double inserted, sampled;            /* I and S */
  uint64_t insert_waits, sample_waits; /* calls that had to wait */
} replay_limiter_stats;

/* Checks c (finite, spi > 0, tolerances >= 0, min size >= 0; SHOAL_EINVAL naming the
 * field) and makes a limiter with I = S = 0. Caller owns *out. */
int replay_limiter_create(const replay_limiter_config *c, replay_limiter **out, shoal_error *err);
void replay_limiter_destroy(replay_limiter *l); /* NULL is fine */

/* Waits until amount more inserted steps (or sampled transitions) are allowed, then
 * counts them. timeout_ms < 0 waits for ever, 0 only tries. Returns 0, SHOAL_ETIMEDOUT
 * (err says which side, I, S and spi) or SHOAL_ECLOSED after replay_limiter_close. */
int replay_limiter_insert(replay_limiter *l, double amount, int64_t timeout_ms, shoal_error *err);
int replay_limiter_sample(replay_limiter *l, double amount, int64_t timeout_ms, shoal_error *err);

/* Takes back counts the limiter let through but that did not happen (a batch found
 * to be in already, a failed sample). Can't fail. */
void replay_limiter_undo(replay_limiter *l, double inserted, double sampled);

/* A new ratio (and insert tolerance) from now on: S moves so that d stays as it was, so
 * the new ratio holds from here instead of settling the whole history in a burst (or a
 * stall). spi must be > 0 and finite (a caller's bug otherwise: ignored). */
void replay_limiter_set_ratio(replay_limiter *l, double spi, double insert_tolerance);

/* Sets I and S (a resumed learner starts level with what its memory holds; a cleared
 * memory starts at 0) and zeroes the wait counts. Can't fail. */
void replay_limiter_set_counts(replay_limiter *l, double inserted, double sampled);

/* Wakes every waiting call with SHOAL_ECLOSED; later calls get it at once. */
void replay_limiter_close(replay_limiter *l);

void replay_limiter_stats_get(replay_limiter *l, replay_limiter_stats *out);

#endif
