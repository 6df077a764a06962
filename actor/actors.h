/* SPDX-License-Identifier: Apache-2.0 */
/*
 * actor/actors.h — the algorithms the actor runtime (actor/runtime.h) runs, one per
 * program: shoal-actor (Ape-X: actor/apex.c) and shoal-onpolicy-actor (IMPALA and PPO:
 * actor/onpolicy.c).
 */
#ifndef SHOAL_ACTOR_ACTORS_H
#define SHOAL_ACTOR_ACTORS_H

#include "actor/runtime.h"

extern const actor_algo apex_actor;
extern const actor_algo onpolicy_actor;

#endif
