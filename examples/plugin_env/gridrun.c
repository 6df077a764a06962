/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A C env plugin, built out of shoal's tree against its public header alone:
 *
 *   cc -O2 -shared -fPIC -I/path/to/shoal gridrun.c -o libgridrun.so
 *   shoal run configs/cartpole-ppo.yaml --set env.id=plugin:$PWD/libgridrun.so:GridRun-v0
 *
 * (-I names the folder that holds envs/envs.h and common/shoal.h: a source checkout, or
 * PREFIX/include/shoal of an installed shoal.) GridRun-v0: an agent on a 7x7 grid walks
 * to a goal drawn at each reset; the observation is the agent's and the goal's
 * coordinates scaled to [0, 1]; actions are up, down, left, right; the reward is +1 at
 * the goal and -0.02 a step, and an episode ends at the goal or after 60 steps (the time
 * limit is shoal's, from max_episode_steps). A random policy averages about -0.9.
 *
 * Everything a kind needs is here: a spec, a plain-data state (shoal lays B copies out
 * contiguously and copies them with memcpy), reset and step drawing from the RNG shoal
 * owns (so seeding works as for the built-ins), a renderer and an option.
 */
#include <stdint.h>
#include <string.h>

#include "envs/envs.h"

#define N 7

typedef struct grid_state {
  int ax, ay, gx, gy;
  double step_cost; /* option step_cost (0.02) */
} grid_state;

static const float lo[4] = {0, 0, 0, 0}, hi[4] = {1, 1, 1, 1};

static void observe(const grid_state *s, float *o) {
  o[0] = (float)s->ax / (N - 1);
  o[1] = (float)s->ay / (N - 1);
  o[2] = (float)s->gx / (N - 1);
  o[3] = (float)s->gy / (N - 1);
}

static void grid_init(void *state) { ((grid_state *)state)->step_cost = 0.02; }

static int grid_configure(void *state, const char *key, double value, shoal_error *err) {
  grid_state *s = state;
  if (!key) return 0; /* all options given: nothing to check together */
  if (strcmp(key, "step_cost") == 0) {
    if (value < 0 || value > 1)
      return shoal_error_set(err, SHOAL_EINVAL, "step_cost = %g (need 0..1)", value);
    s->step_cost = value;
    return 0;
  }
  return shoal_error_set(err, SHOAL_EINVAL, "unknown option '%s' (GridRun takes step_cost)", key);
}

static void grid_reset(void *state, shoal_rng *rng, void *obs) {
  grid_state *s = state;
  s->ax = (int)shoal_rng_below(rng, N);
  s->ay = (int)shoal_rng_below(rng, N);
  do {
    s->gx = (int)shoal_rng_below(rng, N);
    s->gy = (int)shoal_rng_below(rng, N);
  } while (s->gx == s->ax && s->gy == s->ay);
  observe(s, obs);
}

static void grid_step(void *state, shoal_rng *rng, const void *action, void *obs, double *reward,
                      int *terminated) {
  grid_state *s = state;
  static const int dx[4] = {0, 0, -1, 1}, dy[4] = {-1, 1, 0, 0};
  int a = *(const int32_t *)action; /* checked by shoal: 0..3 */
  int x = s->ax + dx[a], y = s->ay + dy[a];
  if (x >= 0 && x < N) s->ax = x;
  if (y >= 0 && y < N) s->ay = y;
  *terminated = s->ax == s->gx && s->ay == s->gy;
  *reward = *terminated ? 1.0 : -s->step_cost;
  observe(s, obs);
}

/* 10 pixels a cell: the goal green, the agent blue. */
static void grid_render(const void *state, uint8_t *rgb) {
  const grid_state *s = state;
  memset(rgb, 40, (size_t)N * 10 * N * 10 * 3);
  for (int y = 0; y < N * 10; y++)
    for (int x = 0; x < N * 10; x++) {
      uint8_t *p = rgb + ((size_t)y * N * 10 + (size_t)x) * 3;
      if (x / 10 == s->gx && y / 10 == s->gy) p[1] = 200;
      if (x / 10 == s->ax && y / 10 == s->ay) p[2] = 220;
    }
}

static const env_type gridrun = {
    .spec =
        {
            .id = "GridRun-v0",
            .obs =
                {.dtype = ENV_FLOAT32, .ndim = 1, .shape = {4}, .size = 4, .low = lo, .high = hi},
            .act = {.dtype = ENV_INT32, .ndim = 0, .size = 1, .n = 4},
            .max_episode_steps = 60,
            .reward_threshold = 0.75,
            .render_w = N * 10,
            .render_h = N * 10,
        },
    .state_size = sizeof(grid_state),
    .reset = grid_reset,
    .step = grid_step,
    .render = grid_render,
    .init = grid_init,
    .configure = grid_configure,
};

static const env_type *const types[] = {&gridrun};
ENV_PLUGIN_EXPORT("gridrun", types, 1)
