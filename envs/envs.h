/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envs/envs.h — environments in C with Gymnasium's semantics, and a vector env that
 * steps B copies in one call.
 *
 * Built in: Gymnasium 1.x classic control, computed exactly as Gymnasium's float64 NumPy
 * code computes it (CartPole-v1, MountainCar-v0, MountainCarContinuous-v0, Acrobot-v1,
 * Pendulum-v1), and MinAtar's five games (MinAtar/Breakout-v1, Freeway, Asterix,
 * Seaquest, SpaceInvaders; -v1 has the minimal action set, -v0 all six actions, as
 * MinAtar registers them with Gymnasium). Short aliases: "breakout", "freeway", ... are
 * the -v1 games. A partially observed task for recurrent policies: CartPoleNoVel-v1
 * (RL Baselines3 Zoo's), CartPole-v1 whose observation has the two velocities zeroed.
 *
 * One env:
 *
 *   env *e;
 *   shoal_error err = {0};
 *   if (env_make(&e, "CartPole-v1", &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
 *   const env_spec *sp = env_get_spec(e);       // obs (4,) float32, 2 discrete actions
 *   float obs[4];
 *   env_seed(e, 42);
 *   env_reset(e, obs);
 *   for (;;) {
 *     int32_t a = policy(obs);
 *     env_result r;
 *     if (env_step(e, &a, obs, &r, &err)) break;    // bad action: SHOAL_ERANGE / SHOAL_ENAN
 *     if (r.terminated || r.truncated) env_reset(e, obs);
 *   }
 *   env_destroy(e);
 *
 * A vector env (auto-reset in the same step; see env_vec_step):
 *
 *   env_vec *v;
 *   env_vec_create(&v, "CartPole-v1", 256, NULL, &err);
 *   float obs[256 * 4], final_obs[256 * 4], rew[256];
 *   uint8_t term[256], trunc[256];
 *   int32_t act[256];
 *   env_vec_reset(v, 1234, obs, &err);              // copy i is seeded with 1234 + i
 *   env_vec_out out = {obs, rew, term, trunc, final_obs};
 *   for (int t = 0; t < 1000; t++) {
 *     choose_actions(obs, act);                     // the policy's, one per copy
 *     env_vec_step(v, act, &out, &err);
 *   }
 *
 * Your own env, three ways, each reaching every program through its id (env.id):
 *  - "gym:ID": any Gymnasium env, ID as gymnasium.make takes it ("LunarLander-v3", or
 *    "mymodule:MyEnv-v0" for an env your module registers with gymnasium.register),
 *    stepped by an embedded CPython (envs/gym.c). Options "k=v,..." are gymnasium.make's
 *    keyword arguments. Box observations (float32, float64 converted once, uint8) and
 *    Discrete or Box actions; other spaces are refused when the env is made.
 *  - "plugin:PATH.so[:NAME]": a shared library built against this header alone that
 *    exports env_types through ENV_PLUGIN_EXPORT (below; envs/plugin.c loads it).
 *  - In-tree: fill an env_type and call env_register() before env_make().
 *
 * Observations are written in the spec's dtype: float32 for classic control (as
 * Gymnasium returns them), uint8 0/1 channels-first (C, 10, 10) for MinAtar. Actions
 * are int32 for discrete spaces and float32 arrays for boxes. Settings (Pendulum's g,
 * MinAtar's sticky actions, time limits, ...) are options: env_make_opts.
 *
 * Exactness: classic-control states, observations, rewards and flags equal Gymnasium's
 * bit for bit where NumPy's float64 sin/cos are libm's (NumPy 1.24 on x86-64 without
 * AVX-512; tests/reference/gym_classic.py); where NumPy uses Intel SVML (AVX-512) they
 * agree to ~1e-15 per step. The MinAtar games play step for step like MinAtar's Python
 * code given the same random draws (tests/reference/minatar_ref.py).
 */
#ifndef SHOAL_ENVS_H
#define SHOAL_ENVS_H

#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Spaces and specs ------------------------------------------------------------- */

typedef enum env_dtype {
  ENV_FLOAT32 = 1, /* float */
  ENV_UINT8 = 2,   /* uint8_t */
  ENV_INT32 = 3,   /* int32_t: discrete actions */
} env_dtype;

#define ENV_MAX_DIMS 4

/* A Box (bounded array) or a Discrete space. For Discrete, dtype is ENV_INT32, ndim 0,
 * size 1 and n the number of actions; low/high are NULL. For a Box, n is 0 and low/high
 * point at size bounds (static storage of the env type; may be +-INFINITY). */
typedef struct env_space {
  env_dtype dtype;
  int ndim;
  int shape[ENV_MAX_DIMS];
  int size;          /* elements: the product of shape (1 for Discrete) */
  int n;             /* Discrete: number of actions; 0 for a Box */
  const float *low;  /* (size) or NULL */
  const float *high; /* (size) or NULL */
} env_space;

typedef struct env_spec {
  const char *id;          /* registered name, "CartPole-v1" */
  env_space obs;           /* observation space */
  env_space act;           /* action space */
  int max_episode_steps;   /* Gymnasium's registered time limit; 0: none */
  double reward_threshold; /* Gymnasium's "solved" threshold; NAN if none */
  int render_w, render_h;  /* env_render() frame size in pixels; 0 if not renderable */
} env_spec;

/* Bytes of one observation / one action (size * dtype size). Can't fail. */
size_t env_space_bytes(const env_space *s);

/* ---- Writing an env: the vtable ---------------------------------------------------- */

struct env__batch; /* below: the arrays of one vector step */

/* An env kind. The framework owns the state memory (state_size bytes, 16-aligned,
 * zero-filled once at creation) and the per-copy RNG, so the vector env can lay B
 * copies out contiguously and step them without allocating. The state must be plain
 * data (it is copied with memcpy). Actions reach step() already checked against
 * spec.act: discrete ones in range, box values finite; clipping box values to their
 * bounds is the kind's business (the built-ins clip as Gymnasium's envs do). */
typedef struct env_type {
  env_spec spec;
  size_t state_size;
  /* Starts an episode: draws the start state from rng and writes the first observation
   * to obs (spec.obs dtype and size). Can't fail. */
  void (*reset)(void *state, shoal_rng *rng, void *obs);
  /* One transition. Writes the next observation, the reward and whether the episode
   * terminated (the MDP ended; the time limit is applied by the framework). Can't fail. */
  void (*step)(void *state, shoal_rng *rng, const void *action, void *obs, double *reward,
               int *terminated);
  /* Optional (NULL: not renderable): draws the state into rgb, (render_h, render_w, 3). */
  void (*render)(const void *state, uint8_t *rgb);
  /* Optional: reads / writes the physical state as doubles (classic control: Gymnasium's
   * env.unwrapped.state). Return the number of values, or a negative code. */
  int (*get_state)(const void *state, double *out, int cap);
  int (*set_state)(void *state, const double *in, int n);
  /* Optional, for speed: steps copies [lo, hi) of a vector env with auto-reset. The
   * built-in envs provide it; NULL uses step/reset one copy at a time. */
  void (*vec_step)(const struct env__batch *b, int lo, int hi);
  /* Optional: writes the defaults of the kind's settings into a fresh (zeroed) state,
   * once at creation, before options are applied. Settings must survive reset(). */
  void (*init)(void *state);
  /* Optional: applies one option "key=value" of env_make_opts (value parsed as a number).
   * Returns 0, or SHOAL_EINVAL for an unknown key or a bad value, saying which. Called
   * once more with key NULL after the last option, to check the settings together. */
  int (*configure)(void *state, const char *key, double value, shoal_error *err);
  /* Optional: the keys of configure() that a reset takes for itself, comma-separated
   * ("low,high"), as Gymnasium's reset(options=...): env_reset_opts and
   * env_vec_reset_each apply them to that one reset (the kind needs get_state and
   * set_state). NULL: the kind takes no reset options. */
  const char *reset_options;
} env_type;

/* Registers a kind under type->spec.id. Borrows type: it must stay valid (static) for
 * as long as envs of that kind exist. SHOAL_EEXIST if the id is taken, SHOAL_EINVAL for
 * an incomplete type. Thread-safe. */
int env_register(const env_type *type, shoal_error *err);

/* Writes up to cap registered ids (static strings) to names, in registration order,
 * built-ins first. Returns the total number registered (may exceed cap). Can't fail. */
int env_list(const char **names, int cap);

/* The registered kind for id, or NULL. */
const env_type *env_find(const char *id);

/* ---- Plugins: env kinds in a shared library ------------------------------------------ */

/* The plugin ABI. A plugin is a shared library that exports one function, the entry
 * point ENV_PLUGIN_ENTRY, returning a table of its env kinds; the loader refuses a table
 * whose abi or env_type_size differ from its own. ABI 1 guarantees: the layout of
 * env_type, env_spec, env_space and env__batch as declared in this header, the
 * semantics of their members as documented here, and the shoal_rng functions of
 * common/shoal.h (which a plugin calls: the program that loads it exports them). Any
 * change to these makes a new ABI number; shoal loads plugins of its own ABI only.
 *
 *   // mygrid.c: cc -shared -fPIC -I<shoal include dir> mygrid.c -o libmygrid.so
 *   static const env_type grid = {.spec = {...}, .state_size = sizeof(grid_state),
 *                                 .reset = grid_reset, .step = grid_step};
 *   static const env_type *const types[] = {&grid};
 *   ENV_PLUGIN_EXPORT("mygrid", types, 1)
 *
 * and env.id: plugin:/abs/path/libmygrid.so:MyGrid-v0 in a config. */
#define ENV_PLUGIN_ABI 1
#define ENV_PLUGIN_ENTRY "shoal_env_plugin"

typedef struct env_plugin {
  uint32_t abi;                 /* ENV_PLUGIN_ABI the plugin was built with */
  uint32_t env_type_size;       /* sizeof(env_type) as the plugin saw it */
  const char *name;             /* for messages */
  int ntypes;                   /* >= 1 */
  const env_type *const *types; /* static: registered and borrowed for the process's life */
} env_plugin;

typedef const env_plugin *(*env_plugin_entry_fn)(void);

/* Defines the entry point; use once, at file scope, in the plugin. */
#ifdef __cplusplus
#define ENV__PLUGIN_LINKAGE extern "C"
#else
#define ENV__PLUGIN_LINKAGE
#endif
#define ENV_PLUGIN_EXPORT(NAME, TYPES, N)                                                        \
  ENV__PLUGIN_LINKAGE __attribute__((visibility("default"))) const env_plugin *shoal_env_plugin( \
      void) {                                                                                    \
    static const env_plugin p = {ENV_PLUGIN_ABI, (uint32_t)sizeof(env_type), NAME, N, TYPES};    \
    return &p;                                                                                   \
  }

/* Loads the plugin at path (once per process) and registers every kind it exports,
 * after which their ids work in env_make and env_vec_create as built-ins do ("plugin:
 * PATH:NAME" ids load it on first use, so most callers need not call this). Errors, with
 * the path and what is wrong: SHOAL_ENOENT (no file), SHOAL_EINVAL (not a library, no
 * entry point, another ABI, an invalid spec), SHOAL_EEXIST (an id that a built-in or
 * another plugin has). */
int env_plugin_load(const char *path, shoal_error *err);

/* Every id Gymnasium has registered, sorted, in *ids (n of them; caller frees each
 * string and the array with free()). Starts the embedded Python if need be. SHOAL_ENOENT
 * when Python or Gymnasium cannot be loaded, saying which and what to do. */
int env_gym_registered(char ***ids, int *n, shoal_error *err);

/* ---- One env ------------------------------------------------------------------------ */

typedef struct env env;

/* Outcome of one env_step. */
typedef struct env_result {
  double reward;  /* as Gymnasium computes it (float64) */
  int terminated; /* the MDP ended (pole fell, goal reached, game over) */
  int truncated;  /* the time limit was reached (TimeLimit); may be set with terminated */
  int elapsed;    /* steps in this episode so far, this one included */
} env_result;

/* Creates an env of the registered kind id, seeded with 0 and not yet reset. Caller owns
 * *out (env_destroy). SHOAL_ENOENT (the message lists the known ids) or SHOAL_ENOMEM. */
int env_make(env **out, const char *id, shoal_error *err);

/* env_make with options: "key=value" pairs separated by commas, values numbers, like
 * Gymnasium's make kwargs and reset options. Every kind takes max_episode_steps (0: none).
 *   CartPole-v1,
 *   CartPoleNoVel-v1          sutton_barto_reward (0/1), low, high (reset bounds, +-0.05)
 *   MountainCar-v0,
 *   MountainCarContinuous-v0  goal_velocity (0), low, high (reset bounds, -0.6, -0.4)
 *   Acrobot-v1                nips (0/1: the NeurIPS paper's dynamics), low, high (+-0.1)
 *   Pendulum-v1               g (10.0), x_init (pi), y_init (1.0)
 *   MinAtar games             sticky_action_prob (0.1), difficulty_ramping (0/1, 1)
 * NULL or "" is env_make. SHOAL_EINVAL names a bad or unknown key. */
int env_make_opts(env **out, const char *id, const char *options, shoal_error *err);
void env_destroy(env *e); /* NULL is fine */

const env_spec *env_get_spec(const env *e); /* borrowed, valid while e lives */

/* Re-seeds the env's RNG (Gymnasium's reset(seed=...)); the next reset draws from it. */
void env_seed(env *e, uint64_t seed);

/* Starts an episode and writes the first observation to obs (spec.obs). Returns 0; a
 * built-in kind can't fail, a "gym:" env can (SHOAL_EENV; env_reset_opts with options
 * NULL says why). */
int env_reset(env *e, void *obs);

/* env_reset with options for this reset only, as Gymnasium's reset(options=...): "k=v,..."
 * of the kind's reset options (classic control: low, high; Pendulum: x_init, y_init;
 * the bounds the start state is drawn from). Later resets use the env's own settings
 * (env_make_opts's, else the defaults). NULL or "": env_reset. SHOAL_EINVAL naming a key
 * that is no reset option or a bad value (low > high), with nothing changed. */
int env_reset_opts(env *e, const char *options, void *obs, shoal_error *err);

/* One step with action (spec.act: one int32, or size floats). Writes the observation and
 * *res. Errors, with nothing changed: SHOAL_ERANGE for a discrete action out of range,
 * SHOAL_ENAN for a NaN or infinite continuous action, SHOAL_ESTATE when no episode is
 * running (before the first reset, or after the episode ended). Box actions outside
 * the bounds are clipped as Gymnasium's env clips them. */
int env_step(env *e, const void *action, void *obs, env_result *res, shoal_error *err);

/* Physical state as doubles (classic control only; SHOAL_ENOTSUP otherwise).
 * env_get_state returns the number of values written (at most cap). env_set_state sets
 * the state of a running episode as Gymnasium's `env.unwrapped.state = ...` does. */
int env_get_state(const env *e, double *out, int cap, shoal_error *err);
int env_set_state(env *e, const double *in, int n, shoal_error *err);

/* Draws the current state into rgb (render_h, render_w, 3), caller-owned.
 * SHOAL_ENOTSUP if the kind has no renderer, SHOAL_ESTATE before the first reset. */
int env_render(const env *e, uint8_t *rgb, shoal_error *err);

/* ---- Vector env ---------------------------------------------------------------------- */

typedef struct env_vec env_vec;

typedef struct env_vec_config {
  int threads;           /* threads stepping disjoint copies; <= 1: the caller's thread */
  int max_episode_steps; /* 0: the spec's time limit; > 0 overrides; < 0: no limit */
  int episode_log;       /* finished episodes kept for env_vec_episodes (0: 4*B + 64) */
  const char *options;   /* as env_make_opts, applied to every copy; NULL: none */
  int evaluation;        /* the copies score a policy: envs whose training settings change
                            the task (Atari's life loss as a terminal, reward clipping)
                            play the game itself; 0: training */
} env_vec_config;

/* Where env_vec_step writes; all caller-owned, each with B rows.
 * obs: the next observations; for a copy whose episode ended in this step, the first
 *   observation of its new episode (auto-reset happens within the same step).
 * final_obs (may be NULL): for those copies, the last observation of the finished
 *   episode, for bootstrapping a truncated one; other rows are left untouched. It must
 *   not be the obs buffer.
 * Unlike this, Gymnasium's vector envs (autoreset_mode NEXT_STEP, its default) return the
 * final observation in `obs` and reset on the next call to step, ignoring that action. */
typedef struct env_vec_out {
  void *obs;           /* (B, obs...) spec.obs dtype */
  float *reward;       /* (B) */
  uint8_t *terminated; /* (B) 0/1 */
  uint8_t *truncated;  /* (B) 0/1 */
  void *final_obs;     /* (B, obs...) or NULL */
} env_vec_out;

/* A finished episode. */
typedef struct env_episode {
  int index;     /* which copy */
  int length;    /* steps */
  double ret;    /* undiscounted return */
  int truncated; /* ended by the time limit (and not terminated) */
} env_episode;

typedef struct env_vec_stats {
  uint64_t steps;         /* env steps taken, all copies */
  uint64_t episodes;      /* episodes finished */
  uint64_t dropped;       /* finished episodes overwritten in the log before being read */
  double mean_return_100; /* over the last min(100, episodes) finished episodes; NAN if none */
  double mean_length_100;
} env_vec_stats;

/* Creates B copies of kind id. cfg may be NULL (defaults). Allocates everything here
 * (states, RNGs, threads); steps allocate nothing. Caller owns *out (env_vec_destroy).
 * SHOAL_ENOENT, SHOAL_EINVAL (B < 1, threads > B), SHOAL_ENOMEM, SHOAL_EINTERNAL (thread). */
int env_vec_create(env_vec **out, const char *id, int B, const env_vec_config *cfg,
                   shoal_error *err);
void env_vec_destroy(env_vec *v); /* joins the threads; NULL is fine */

const env_spec *env_vec_spec(const env_vec *v);
int env_vec_size(const env_vec *v); /* B */

/* Seeds copy i with seed + i, resets every copy and writes the first observations
 * (B rows) to obs. Clears episode returns (not the statistics). Returns 0; a built-in
 * kind can't fail, a backend's env can (SHOAL_EENV: it raised or returned a NaN). */
int env_vec_reset(env_vec *v, uint64_t seed, void *obs, shoal_error *err);

/* As env_vec_reset with a seed per copy and reset options: copy i is seeded with
 * seeds[i] when reseed is NULL or reseed[i] != 0, else its RNG goes on from where it is
 * (a copy never seeded starts as if seeded with i); seeds may be NULL when reseed marks
 * no copy. options as env_reset_opts, for every copy (this reset only). SHOAL_EINVAL
 * for bad options, with nothing changed. */
int env_vec_reset_each(env_vec *v, const uint64_t *seeds, const uint8_t *reseed,
                       const char *options, void *obs, shoal_error *err);

/* Copy i's physical state as doubles, as env_get_state (classic control: Gymnasium's
 * env.unwrapped.state; SHOAL_ENOTSUP for kinds without one, SHOAL_ERANGE for a bad i).
 * env_vec_set_state sets it as env_set_state does (SHOAL_ESTATE before the first
 * reset); the copy's next step starts from it, the last observation is not rewritten. */
int env_vec_get_state(const env_vec *v, int i, double *out, int cap, shoal_error *err);
int env_vec_set_state(env_vec *v, int i, const double *in, int n, shoal_error *err);

/* Steps all B copies with actions (B int32, or B x act.size floats) and writes out.
 * Copies whose episode ends are reset in this step (see env_vec_out) and their
 * (return, length) are logged. Errors, with no copy stepped: SHOAL_ERANGE / SHOAL_ENAN
 * naming the first bad copy, SHOAL_ESTATE before env_vec_reset, SHOAL_EINVAL for a
 * NULL buffer (final_obs excepted). */
int env_vec_step(env_vec *v, const void *actions, const env_vec_out *out, shoal_error *err);

/* Moves up to cap finished episodes, oldest first, into out and returns how many. */
int env_vec_episodes(env_vec *v, env_episode *out, int cap);

void env_vec_get_stats(const env_vec *v, env_vec_stats *st); /* can't fail */

/* The share of vector steps so far that ran on the worker threads (0 with one thread).
 * A vector env with threads measures stepping on the caller's thread alone against
 * stepping with its workers and takes the faster as it goes (env__pace in
 * envs/internal.h says the rule), so a second thread does not slow small batches of
 * fast envs. After a step on the workers they poll for up to 50 us for the next one
 * before they sleep: a core's worth of CPU for that long, paid only by vector envs
 * given threads. Can't fail. */
double env_vec_parallel_share(const env_vec *v);

/* Renders copy i (see env_render). */
int env_vec_render(const env_vec *v, int i, uint8_t *rgb, shoal_error *err);

/* ---- Images (envs/apng.c) ----------------------------------------------------------- */

/* Writes an RGB image (h, w, 3) as an 8-bit PNG (env_png_encode's bytes). SHOAL_EIO
 * with the path on failure, and no file is left behind. */
int env_png_write(const char *path, const uint8_t *rgb, int w, int h, shoal_error *err);

/* Writes n frames (n, h, w, 3) side by side, cols per row (cols <= 0: all in one row),
 * separated by a 2-pixel grey border, as one PNG. */
int env_png_strip(const char *path, const uint8_t *frames, int n, int w, int h, int cols,
                  shoal_error *err);

/* ---- Images in memory and animations (envs/apng.c) ---------------------------------- */

/* Encodes an RGB image (h, w, 3) as an 8-bit PNG in memory: *png is a new buffer of
 * *len bytes (caller frees it with free()). SHOAL_EINVAL for a bad size. */
int env_png_encode(const uint8_t *rgb, int w, int h, uint8_t **png, size_t *len, shoal_error *err);

/* Columns for a strip of n frames: as many as leave no cell empty, 6 at most (12
 * frames: 6 x 2; 8: 4 x 2; 10: 5 x 2), else 6. Can't fail. */
int env_strip_columns(int n);

/* Lays n frames (n, h, w, 3) out as env_png_strip does (cols per row, 2-pixel grey
 * borders) into a new (*H, *W, 3) image *img (caller frees it with free()). */
int env_strip_compose(const uint8_t *frames, int n, int w, int h, int cols, uint8_t **img, int *W,
                      int *H, shoal_error *err);

/* An animated PNG built frame by frame in memory: each frame is compressed when added
 * (only the rectangle that changed since the previous one), so memory holds one raw
 * frame and the compressed animation. A frame is shown delay_num / delay_den seconds
 * (env_apng_set_delay changes it for the frames added after); the animation loops.
 *   env_apng *a;  env_apng_create(&a, w, h, 1, 50, &err);      // 50 frames a second
 *   env_apng_add(a, rgb, &err);  ...                             // (h, w, 3) each
 *   env_apng_finish(a, &bytes, &len, &err);                      // frees a */
typedef struct env_apng env_apng;
int env_apng_create(env_apng **out, int w, int h, int delay_num, int delay_den, shoal_error *err);
/* Adds a frame (borrowed). SHOAL_ENOMEM when out of memory (a can then be destroyed). */
int env_apng_add(env_apng *a, const uint8_t *rgb, shoal_error *err);
uint32_t env_apng_frames(const env_apng *a); /* frames added so far; can't fail */
/* Shows the frames added from now on delay_num / delay_den seconds each (those added
 * before keep theirs). SHOAL_EINVAL for a delay out of APNG's range (0..65535 / 1..65535). */
int env_apng_set_delay(env_apng *a, int delay_num, int delay_den, shoal_error *err);
/* Finishes the file: *png is a new buffer of *len bytes (caller frees it with free()).
 * Frees a, on error too. SHOAL_EINVAL when no frame was added. */
int env_apng_finish(env_apng *a, uint8_t **png, size_t *len, shoal_error *err);
void env_apng_destroy(env_apng *a); /* NULL is fine */

/* ---- For env_type.vec_step implementations ------------------------------------------ */

/* One vector step's arrays, shared by all threads; copy i owns index i of each. */
typedef struct env__batch {
  const env_type *type; /* the kind (used by the generic loop) */
  void *states;         /* (B, state_size rounded up to 16) */
  size_t state_size;    /* stride of states in bytes */
  shoal_rng *rngs;      /* (B) */
  int32_t *elapsed;     /* (B) steps in the current episode */
  double *ep_return;    /* (B) return of the current episode */
  double *done_return;  /* (B) written where an episode ended in this step */
  int32_t *done_length; /* (B) */
  int max_steps;        /* time limit, 0 none */
  const void *actions;
  void *obs;
  float *reward;
  uint8_t *terminated;
  uint8_t *truncated;
  void *final_obs; /* may be NULL */
} env__batch;

#ifdef __cplusplus
}
#endif
#endif
