/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envs/internal.h — shared by the env implementations: registration of the built-ins
 * and the macro that turns an inline step/reset pair into a tight vector-step loop.
 */
#ifndef SHOAL_ENVS_INTERNAL_H
#define SHOAL_ENVS_INTERNAL_H

#include <stdbool.h>
#include <string.h>

#include "envs/envs.h"
#include "envs/gymmath.h"

/* Built-in kinds, registered on first use of the registry. */
extern const env_type env__cartpole, env__cartpole_novel, env__mountaincar, env__mountaincar_cont,
    env__acrobot, env__pendulum;
extern const env_type *const env__minatar_types[];
extern const int env__minatar_ntypes;

/* "where: no env 'id' (known: ...)", SHOAL_ENOENT. */
int env__not_found(const char *where, const char *id, shoal_error *err);
/* Runs t->init on a fresh state, then applies "k=v,..." options (NULL: none);
 * max_episode_steps goes to *max_steps. */
int env__apply_options(const env_type *t, void *state, const char *opts, int *max_steps,
                       const char *where, shoal_error *err);
/* One parsed option "key=value". */
enum { ENV__MAX_OPTS = 16, ENV__MAX_STATE = 16 };
typedef struct env__opt {
  char key[64];
  double value;
} env__opt;
/* Parses a reset's options (Gymnasium's reset(options=...)) for kind t into kv (at most
 * ENV__MAX_OPTS; *n of them) and checks them together on scratch, a copy of state (a
 * state of the kind: its settings are the defaults the options replace). SHOAL_EINVAL
 * naming a key that is not among t->reset_options, a bad value, or any option for a
 * kind without reset options. Nothing else changes. */
int env__reset_options_parse(const env_type *t, const void *state, void *scratch, const char *opts,
                             env__opt *kv, int *n, const char *where, shoal_error *err);
/* Starts an episode of state from rng with the parsed options kv (n of them; none: a
 * plain reset) applied to this reset only, writing its first observation to obs; the
 * state keeps its settings for later resets. scratch: state_size bytes; obs_tmp: one
 * observation. Can't fail (the options were checked). */
/* env_get_state / env_set_state on one state of kind t (env_vec's copies too): fn names
 * the caller in errors; running says whether an episode was started (else SHOAL_ESTATE
 * asking for reset_fn first). set_state refuses non-finite values and a wrong count,
 * naming the count taken. */
int env__state_get(const env_type *t, const void *state, double *out, int cap, const char *fn,
                   shoal_error *err);
int env__state_set(const env_type *t, void *state, bool running, const double *in, int n,
                   const char *fn, const char *reset_fn, shoal_error *err);

void env__reset_with(const env_type *t, void *state, void *scratch, void *obs_tmp, shoal_rng *rng,
                     const env__opt *kv, int n, void *obs);
/* Checks B actions against sp->act: SHOAL_ERANGE / SHOAL_ENAN naming the copy. */
int env__check_actions(const env_spec *sp, const void *actions, int B, const char *where,
                       shoal_error *err);

/* ENV__DEFINE_VEC_STEP(name, STATE_T, step_fn, reset_fn, OBS_T, OBS_N, ACT_T, ACT_N)
 * defines `static void name(const env__batch *b, int lo, int hi)` stepping copies
 * [lo, hi) with step_fn/reset_fn inlined: time limit, return accumulation, final
 * observation and auto-reset, as env_vec_step documents. */
#define ENV__DEFINE_VEC_STEP(name, STATE_T, step_fn, reset_fn, OBS_T, OBS_N, ACT_T, ACT_N) \
  static void name(const env__batch *b, int lo, int hi) {                                  \
    char *states = (char *)b->states;                                                      \
    const size_t stride = b->state_size;                                                   \
    const ACT_T *act = (const ACT_T *)b->actions;                                          \
    OBS_T *obs = (OBS_T *)b->obs;                                                          \
    OBS_T *fin = (OBS_T *)b->final_obs;                                                    \
    const int max_steps = b->max_steps;                                                    \
    for (int i = lo; i < hi; i++) {                                                        \
      double r;                                                                            \
      int term;                                                                            \
      OBS_T *o = obs + (size_t)i * (OBS_N);                                                \
      STATE_T *st = (STATE_T *)(states + (size_t)i * stride);                              \
      step_fn(st, &b->rngs[i], act + (size_t)i * (ACT_N), o, &r, &term);                   \
      int el = ++b->elapsed[i];                                                            \
      int trunc = max_steps > 0 && el >= max_steps;                                        \
      double ret = b->ep_return[i] + r;                                                    \
      b->reward[i] = (float)r;                                                             \
      b->terminated[i] = (uint8_t)term;                                                    \
      b->truncated[i] = (uint8_t)trunc;                                                    \
      if (__builtin_expect(term | trunc, 0)) {                                             \
        if (fin) memcpy(fin + (size_t)i * (OBS_N), o, sizeof(OBS_T) * (OBS_N));            \
        b->done_return[i] = ret;                                                           \
        b->done_length[i] = el;                                                            \
        reset_fn(st, &b->rngs[i], o);                                                      \
        ret = 0.0;                                                                         \
        b->elapsed[i] = 0;                                                                 \
      }                                                                                    \
      b->ep_return[i] = ret;                                                               \
    }                                                                                      \
  }

/* Drawing into an RGB buffer (h, w, 3), for the renderers. y grows downwards. */
typedef struct env__canvas {
  uint8_t *rgb;
  int w, h;
} env__canvas;
void env__fill(env__canvas *c, uint8_t r, uint8_t g, uint8_t b);
void env__rect(env__canvas *c, int x0, int y0, int x1, int y1, const uint8_t col[3]);
/* Filled convex polygon, vertices in pixel coordinates (any winding). */
void env__poly(env__canvas *c, const double *xy, int n, const uint8_t col[3]);
void env__circle(env__canvas *c, double cx, double cy, double r, const uint8_t col[3]);
/* A line of the given width (a thin rotated rectangle). */
void env__line(env__canvas *c, double x0, double y0, double x1, double y1, double width,
               const uint8_t col[3]);

#endif
