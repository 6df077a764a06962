/* SPDX-License-Identifier: Apache-2.0 */
/*
 * learner/learners.h — the learner programs the runtime runs (learner/runtime.h):
 * shoal-learner (Ape-X: learner/apex.c) and shoal-onpolicy-learner (IMPALA and PPO:
 * learner/onpolicy.c).
 */
#ifndef SHOAL_LEARNER_LEARNERS_H
#define SHOAL_LEARNER_LEARNERS_H

#include "learner/runtime.h"

extern const lrt_program apex_learner;
extern const lrt_program onpolicy_learner;

#endif
