/* SPDX-License-Identifier: Apache-2.0 */
/* Plugins that must be refused (tests/test_gym.c): built once per BAD_KIND.
 *   1 another ABI version    2 no entry point    3 an invalid spec    4 a built-in's id */
#include <stdint.h>

#include "envs/envs.h"

static void r(void *st, shoal_rng *rng, void *obs) { ((float *)obs)[0] = 0; }
static void s(void *st, shoal_rng *rng, const void *a, void *obs, double *rew, int *term) {
  ((float *)obs)[0] = 0, *rew = 0, *term = 1;
}

static const env_type t = {
    .spec = {.id = BAD_KIND == 4 ? "CartPole-v1" : "BadPlugin-v0",
             /* kind 3: size 5 does not match the shape (4,) */
             .obs = {.dtype = ENV_FLOAT32, .ndim = 1, .shape = {4}, .size = BAD_KIND == 3 ? 5 : 4},
             .act = {.dtype = ENV_INT32, .ndim = 0, .size = 1, .n = 2}},
    .state_size = 8,
    .reset = r,
    .step = s,
};
static const env_type *const types[] = {&t};

#if BAD_KIND == 1
__attribute__((visibility("default"))) const env_plugin *shoal_env_plugin(void) {
  static const env_plugin p = {ENV_PLUGIN_ABI + 98, sizeof(env_type), "future", 1, types};
  return &p;
}
#elif BAD_KIND == 2
__attribute__((visibility("default"))) const env_type *const *not_the_entry(void) { return types; }
#else
ENV_PLUGIN_EXPORT("bad", types, 1)
#endif
