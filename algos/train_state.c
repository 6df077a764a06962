/* SPDX-License-Identifier: Apache-2.0 */
/* The learner state that a parameter snapshot alone does not hold — optimizer moments
 * and step count, DQN's target network, the update count that times its syncs, PPO's
 * shuffling RNG — and the snapshot trailer that carries it, so a resumed learner
 * continues exactly where it stopped. See algos.h (algo_snapshot_*, *_state_*). */
#include <stdlib.h>
#include <string.h>

#include "algos/state.h"

/* Blob: magic, then fixed little-endian fields, then the optimizer's and the target's
 * safetensors bytes. All platforms shoal builds on are little-endian (as the
 * safetensors reader assumes). */
static const char state_magic[8] = {'S', 'H', 'O', 'A', 'L', 'L', 'S', 'T'};
static const char trailer_magic[8] = {'S', 'H', 'O', 'A', 'L', 'O', 'P', 'T'};
enum { STATE_VERSION = 1, HDR = 8 + 4 + 4 + 8 + 4 + 4 + 32 + 8 + 8 + 8 };
enum { HAS_RNG = 1, HAS_TARGET = 2 };

static const char *kind_name(int kind) {
  return kind == ALGO__STATE_DQN ? "dqn" : kind == ALGO__STATE_IMPALA ? "impala" : "ppo";
}

/* FNV-1a, 64-bit: enough to tell a damaged blob from a good one (not an attacker). */
static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

static uint8_t *put(uint8_t *p, const void *v, size_t n) {
  memcpy(p, v, n);
  return p + n;
}

int algo__state_save(int kind, const nn_optim *opt, const nn_model *target, int64_t updates,
                     const shoal_rng *rng, uint8_t **buf, size_t *len, shoal_error *err) {
  if (!opt)
    return shoal_error_set(err, SHOAL_ESTATE, "%s: learner state: no optimizer (an actor's copy)",
                           kind_name(kind));
  uint8_t *ob = NULL, *tb = NULL;
  size_t ol = 0, tl = 0;
  int rc = nn_optim_save_buffer(opt, &ob, &ol, err);
  if (!rc && target) rc = nn_model_save_buffer(target, &tb, &tl, err);
  uint8_t *b = rc ? NULL : malloc(HDR + ol + tl);
  if (!rc && !b) rc = shoal_error_set(err, SHOAL_ENOMEM, "learner state: out of memory");
  if (!rc) {
    uint32_t version = STATE_VERSION, k = (uint32_t)kind;
    uint32_t flags = (rng ? HAS_RNG : 0) | (target ? HAS_TARGET : 0), pad = 0;
    uint64_t s[4] = {0}, o64 = ol, t64 = tl;
    if (rng) memcpy(s, rng->s, sizeof s);
    uint8_t *p = put(b, state_magic, 8);
    p = put(p, &version, 4);
    p = put(p, &k, 4);
    p = put(p, &updates, 8);
    p = put(p, &flags, 4);
    p = put(p, &pad, 4);
    p = put(p, s, 32);
    p = put(p, &o64, 8);
    p = put(p, &t64, 8);
    uint8_t *sum_at = p;
    p += 8;
    p = put(p, ob, ol);
    if (tl) put(p, tb, tl);
    /* The checksum covers every byte but itself. */
    uint64_t h = fnv1a(b, (size_t)(sum_at - b)) ^ fnv1a(sum_at + 8, ol + tl);
    memcpy(sum_at, &h, 8);
    *buf = b;
    *len = HDR + ol + tl;
  }
  free(ob);
  free(tb);
  return rc;
}

int algo__state_load(int kind, nn_optim *opt, nn_model *target, int64_t *updates, shoal_rng *rng,
                     const uint8_t *buf, size_t len, shoal_error *err) {
  const char *who = kind_name(kind);
  if (!opt) return shoal_error_set(err, SHOAL_ESTATE, "%s: learner state: no optimizer", who);
  if (len < HDR || memcmp(buf, state_magic, 8))
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: learner state: no state header (%zu bytes)",
                           who, len);
  uint32_t version, k, flags;
  int64_t upd;
  uint64_t s[4], ol, tl, sum;
  const uint8_t *p = buf + 8;
  memcpy(&version, p, 4), p += 4;
  memcpy(&k, p, 4), p += 4;
  memcpy(&upd, p, 8), p += 8;
  memcpy(&flags, p, 4), p += 8; /* and its padding */
  memcpy(s, p, 32), p += 32;
  memcpy(&ol, p, 8), p += 8;
  memcpy(&tl, p, 8), p += 8;
  memcpy(&sum, p, 8), p += 8;
  if (version != STATE_VERSION)
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: learner state version %u, this build reads %d",
                           who, version, STATE_VERSION);
  if (k != (uint32_t)kind)
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: learner state was written by %s", who,
                           k >= 1 && k <= 3 ? kind_name((int)k) : "an unknown algorithm");
  if (ol > len - HDR || tl > len - HDR - ol || HDR + ol + tl != len)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "%s: learner state: sections of %llu + %llu bytes in %zu", who,
                           (unsigned long long)ol, (unsigned long long)tl, len - HDR);
  if ((fnv1a(buf, HDR - 8) ^ fnv1a(buf + HDR, ol + tl)) != sum)
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: learner state damaged (checksum)", who);
  if (upd < 0)
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: learner state: %lld updates", who,
                           (long long)upd);
  if (!!(flags & HAS_TARGET) != !!target)
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: learner state %s a target network", who,
                           target ? "lacks" : "has");
  if ((flags & HAS_RNG) && !rng)
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: learner state has an RNG this learner lacks",
                           who);
  /* The optimizer first, with its old state kept so a bad target undoes it. */
  uint8_t *old = NULL;
  size_t old_len = 0;
  int rc = target ? nn_optim_save_buffer(opt, &old, &old_len, err) : 0;
  if (!rc) rc = nn_optim_load_buffer(opt, buf + HDR, (size_t)ol, err);
  if (!rc && target && (rc = nn_model_load_buffer(target, buf + HDR + ol, (size_t)tl, err))) {
    shoal_error e2 = {0};
    nn_optim_load_buffer(opt, old, old_len, &e2);
  }
  free(old);
  if (rc) return rc;
  *updates = upd;
  if (rng && (flags & HAS_RNG)) memcpy(rng->s, s, sizeof s);
  return 0;
}

int algo_snapshot_append_state(uint8_t **buf, size_t *len, const uint8_t *state, size_t state_len,
                               shoal_error *err) {
  size_t extra = state_len + 8 + sizeof trailer_magic;
  uint8_t *b = realloc(*buf, *len + extra);
  if (!b) return shoal_error_set(err, SHOAL_ENOMEM, "snapshot: out of memory");
  uint64_t n = state_len;
  uint8_t *p = put(b + *len, state, state_len);
  p = put(p, &n, 8);
  put(p, trailer_magic, sizeof trailer_magic);
  *buf = b;
  *len += extra;
  return 0;
}

int algo_snapshot_split(const uint8_t *buf, size_t len, size_t *model_len, const uint8_t **state,
                        size_t *state_len, shoal_error *err) {
  if (len < 16 || memcmp(buf + len - 8, trailer_magic, 8)) {
    *model_len = len;
    *state = NULL;
    *state_len = 0;
    return 0;
  }
  uint64_t n;
  memcpy(&n, buf + len - 16, 8);
  if (n > len - 16)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "snapshot: learner-state trailer of %llu bytes in a %zu-byte snapshot",
                           (unsigned long long)n, len);
  *model_len = len - 16 - (size_t)n;
  *state = buf + *model_len;
  *state_len = (size_t)n;
  return 0;
}
