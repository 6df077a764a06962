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

/* ---- Threads that pay (envs/vec.c) --------------------------------------------------- */

/* Whether a vector env with workers steps its copies on the caller's thread alone (mode 0)
 * or with its workers (mode 1), chosen step by step from timed samples of both: the
 * break-even depends on the env, B, the machine and its load, so no constant serves.
 *
 * - A sample is a run of ENV__PACE_RUN consecutive steps in one mode, their mean time.
 *   A caller's loop has a period of its own (a block of actions drawn, an update every
 *   few steps): when its pause outlasts the workers' polling they fall asleep, and the
 *   step after the pause pays their wake-up. A run as long as such a period holds that
 *   cost in its share; one step timed at a fixed interval lines up with the pause, or
 *   misses it, every time (measured: Pendulum B=256 from Python pausing every 16 steps,
 *   two threads at 1.00-1.02 of one timed step by step, 1.21-1.27 timed in runs).
 * - Each mode's cost is the least of its last ENV__PACE_WIN samples. Noise only adds time
 *   (a preempted thread, an interrupt), so the least sample is the least disturbed one
 *   and a stray slow run does not flip the choice; a lasting change fills the window
 *   within ENV__PACE_WIN samples.
 * - The first steps alternate the modes, a run of each twice; each run starts with one
 *   untimed step (it wakes workers that slept through the other mode's steps).
 * - Then the cheaper mode runs, sampled once every ENV__PACE_SAMPLE_EVERY steps. A mode
 *   that starts running forgets its earlier samples at its first own one: they may be
 *   stale (taken before the machine got busy), and a switch made on a stale cost is
 *   undone at once.
 * - Now and then a run goes the other way (a probe, after its untimed step) so that a
 *   change of the machine or the env is seen. The gap between probes doubles (up to
 *   ENV__PACE_GAP_MAX steps) each time a probe does not change the choice for good, and
 *   falls back to ENV__PACE_GAP_MIN when it does. A probe ends early once it has taken
 *   twice what a run of the running mode takes: probing a far slower mode costs a few
 *   of its steps.
 *
 * Pure: the caller times the steps it is told to and passes the nanoseconds, so the rule
 * is tested with made-up times (tests/test_envs.c). Zero-initialised is ready. */
enum {
  ENV__PACE_WIN = 8,
  ENV__PACE_RUN = 32, /* steps of a sample: a caller's period up to 32 steps is inside */
  ENV__PACE_WARM_RUNS = 4,
  ENV__PACE_SAMPLE_EVERY = 128,
  ENV__PACE_GAP_MIN = 1024,
  ENV__PACE_GAP_MAX = 65536
};
typedef struct env__pace {
  double win[2][ENV__PACE_WIN]; /* each mode's latest samples (ns a step), a ring; 0: none */
  int wi[2];                    /* next slot of each ring */
  int fresh[2];                 /* became the running mode and has no sample of its own yet */
  int running;                  /* the mode chosen outside runs of the other */
  int chosen;                   /* the warm-up runs are done and running was chosen */
  int warm_runs;                /* warm-up runs started */
  int phase;                    /* what the current run is for (envs/vec.c); 0: none */
  int run_mode, run_left, run_untimed; /* the current run: its mode, timed steps to go,
                                          whether its untimed first step is still to come */
  double run_sum;                      /* ns of the run's timed steps so far */
  uint64_t nstep;               /* steps chosen so far */
  uint64_t probe_at, gap;       /* the next probe's first step; the current gap */
  uint64_t sample_at;           /* the next sample's first step */
} env__pace;

/* The mode (0 or 1) of the next step; *timed: whether to time it and pass the time to
 * env__pace_record. Can't fail. */
int env__pace_choose(env__pace *p, int *timed);
/* The time of the step env__pace_choose said to time, in nanoseconds (> 0). */
void env__pace_record(env__pace *p, double ns);
/* A mode's cost as the rule sees it (ns a step; 0 before any sample). */
double env__pace_cost(const env__pace *p, int mode);

/* ---- Backends: envs that are not env_types ------------------------------------------- */

/* An env whose state is not plain data (a Python object) steps through a backend that
 * owns its B copies as a whole; env_vec and the single env (a backend vector of one)
 * keep the episode bookkeeping, action checks and API in front of it. The backend owns
 * the spec it fills (ids, bounds) for its lifetime. Every function may fail (the env's
 * own code runs behind it): SHOAL_EENV with the copy and the env's own message. */
typedef struct env__backend {
  const char *prefix; /* the id prefix that selects it: "gym:" */
  /* Makes B copies of id (the prefix stripped) with options ("k=v,...": the env's own
   * constructor arguments). *self is the backend's, freed by destroy. evaluation: the
   * copies score a policy rather than train it (env_vec_config's); a backend whose
   * training settings change the task (Atari's life loss and reward clipping) plays the
   * game itself then. */
  int (*create)(void **self, const char *id, int B, const char *options, int evaluation,
                env_spec *spec, shoal_error *err);
  void (*destroy)(void *self);
  /* Resets every copy: copy i seeded with seeds[i] where seeds is not NULL and reseed is
   * NULL or reseed[i] != 0, else going on from its own generator. Writes B observations. */
  int (*reset)(void *self, const uint64_t *seeds, const uint8_t *reseed, void *obs,
               shoal_error *err);
  /* Steps every copy with actions (checked against the spec). autoreset: a copy whose
   * episode ends is reset in this step, its last observation to final_obs (if not NULL);
   * else the copy is left ended. The time limit is the backend's (the env's own). */
  int (*step)(void *self, const void *actions, int autoreset, void *obs, double *reward,
              uint8_t *terminated, uint8_t *truncated, void *final_obs, shoal_error *err);
  /* Copy i's frame (spec render_h, render_w, 3). */
  int (*render)(void *self, int i, uint8_t *rgb, shoal_error *err);
  /* Copy i's physical state as doubles (Gymnasium's env.unwrapped.state): the number of
   * values (at most cap written), or SHOAL_ENOTSUP when the env has none. */
  int (*get_state)(void *self, int i, double *out, int cap, shoal_error *err);
} env__backend;

/* A registry kind by id, plugin ids ("plugin:PATH[:NAME]") loaded on the way: 0 and
 * *out, or SHOAL_ENOENT (listing the known ids) / the plugin's error, prefixed by where. */
int env__lookup(const char *id, const env_type **out, const char *where, shoal_error *err);

/* One step of a backend vector of one without auto-reset (the single env's step): the
 * episode ends in place and the next call must be a reset. */
int env__vec_step_one(env_vec *v, const void *action, void *obs, double *reward, uint8_t *term,
                      uint8_t *trunc, shoal_error *err);

/* The backend whose prefix id starts with, or NULL (a registry id). Can't fail. */
const env__backend *env__backend_for(const char *id);
extern const env__backend env__gym_backend;
/* ALE games ("gym:ALE/Pong-v5"): ale-py's emulator, the DQN papers' preprocessing in C
 * (envs/atari.c). */
extern const env__backend env__atari_backend;

/* Loads the plugin a "plugin:PATH[:NAME]" id names (once per path) and returns the
 * registered kind it selects in *out. SHOAL_ENOENT, SHOAL_EINVAL, SHOAL_EEXIST with
 * the path and what is wrong. */
int env__plugin_find(const char *id, const env_type **out, shoal_error *err);

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
