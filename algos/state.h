/* SPDX-License-Identifier: Apache-2.0 */
/* algos/state.h — private: the learner-state blob every algorithm writes (see
 * dqn_state_save in algos.h). */
#ifndef SHOAL_ALGOS_STATE_H
#define SHOAL_ALGOS_STATE_H

#include "algos/algos.h"

enum { ALGO__STATE_DQN = 1, ALGO__STATE_IMPALA = 2, ALGO__STATE_PPO = 3 };

/* Serialises the optimizer (required), a target network (may be NULL), the update
 * count and an RNG (may be NULL) into a new buffer (caller frees *buf). */
int algo__state_save(int kind, const nn_optim *opt, const nn_model *target, int64_t updates,
                     const shoal_rng *rng, uint8_t **buf, size_t *len, shoal_error *err);
/* Restores what algo__state_save wrote into the same objects; checks the magic,
 * version, kind, checksum and every tensor first, and changes nothing on error. */
int algo__state_load(int kind, nn_optim *opt, nn_model *target, int64_t *updates, shoal_rng *rng,
                     const uint8_t *buf, size_t len, shoal_error *err);

#endif
