/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ALE games: "gym:ALE/<Game>-v5" (every game ale-py registers), with the preprocessing of
 * the DQN and IMPALA papers as Gymnasium's AtariPreprocessing and FrameStackObservation
 * define it, bit for bit:
 *
 *   no-op starts   after a reset, 1..noop_max NOOPs drawn from the env's generator
 *   frame skip     frame_skip emulator frames per step, rewards summed, the observation
 *                  the max of the last two frames' grayscale screens
 *   resize         to screen_size x screen_size by OpenCV's INTER_AREA, the same float
 *                  arithmetic in the same order, rounded as OpenCV rounds
 *   stack          the last frame_stack frames, oldest first, (K, 84, 84) uint8; a reset
 *                  fills the stack with its first frame
 *
 * and, while training only (env_vec_config.evaluation 0):
 *
 *   episodic_life  a lost life ends the episode (terminated) without resetting the game:
 *                  the next episode starts from the same screen and stack, as EnvPool's
 *                  episodic_life and SB3's EpisodicLifeEnv do. (Gymnasium's
 *                  terminal_on_life_loss resets the whole game instead.)
 *   reward_clip    the reward is its sign, -1, 0 or 1
 *
 * Evaluation plays the game itself: the game's own score and its real end. Sticky actions
 * (repeat_action_probability, v5's 0.25), full_action_space, mode, difficulty and the
 * frame limit (max_num_frames_per_episode) are the emulator's: they go to gymnasium.make
 * as they are.
 *
 * Where the work runs: the emulator is ale-py's C++ (its Python binding), called from C
 * through CPython's API with bound methods fetched once, so no Python code runs per
 * frame; the max-pool, resize and stack run here over buffers the emulator draws into.
 * Python code runs once per reset (Gymnasium's seeding and no-op draw).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "envs/pyembed.h"

enum { ATARI_MAX_STACK = 16, ATARI_MAX_SCREEN = 512 };

/* GCC vectorises only cheap loops at -O2; these per-frame loops pay for it. Clang
 * vectorises at -O2 already and has no such attribute. */
#if defined(__GNUC__) && !defined(__clang__)
#define ATARI_VECTORISE __attribute__((optimize("tree-vectorize")))
#else
#define ATARI_VECTORISE
#endif

/* shoal's own settings; every other option is gymnasium.make's */
typedef struct atari_opts {
  int noop_max, frame_skip, screen, stack, episodic_life, reward_clip, max_steps;
} atari_opts;

/* One term of OpenCV's area-interpolation table: destination di gets source si times
 * alpha. */
typedef struct area_tab {
  int di, si;
  float alpha;
} area_tab;

typedef struct atari_copy {
  PyObject *act, *lives, *game_over, *game_truncated, *gray, *rgb; /* bound methods */
  PyObject *actions;  /* tuple of the game's ale_py.Action values */
  PyObject *scr[2];   /* NumPy views of buf[0], buf[1] */
  PyObject *rgb_view; /* NumPy view of the render buffer */
  uint8_t *buf[2];    /* the last two grayscale screens (h, w); buf[0] the newer */
  uint8_t *stack;     /* (K, S, S), oldest frame first */
  int nlives;         /* lives at the last check */
  int elapsed;        /* steps since the game was reset (the time limit's count) */
  int continue_next;  /* the episode ended with a life, not the game: reset continues */
} atari_copy;

typedef struct atari_vec {
  PyObject *vec; /* bridge.Atari */
  PyObject *one; /* 1.0, the paddle strength AtariEnv passes */
  PyObject *kw_with_truncation;
  int B, h, w;
  atari_opts o;
  char id[256];
  env_spec spec;
  float *olow, *ohigh;
  atari_copy *c;
  area_tab *ytab; /* the vertical terms, in OpenCV's order */
  int ny;
  int kx;       /* horizontal terms per destination column, padded to the most */
  int *xi;      /* (kx, S) source columns: term k of column dx at k * S + dx */
  float *xa;    /* (kx, S) their weights; 0 for padding */
  float *rows;  /* (h, S) every source row's horizontal pass */
  float *srcf;  /* (w) a source row as floats */
  float *sum;   /* (S) */
  uint8_t *rgb; /* render scratch (h, w, 3) */
  size_t frame; /* S * S */
  uint64_t steps;
} atari_vec;

/* ---- OpenCV's INTER_AREA, for a shrinking resize of one channel ----------------------
 * computeResizeAreaTab's table: each destination cell covers `scale` source cells; the
 * partly covered ones at its edges get their covered fraction. Weights are float, the
 * sums float, accumulated per source row then down the rows, as ResizeArea_Invoker. */
static int area_table(int ssize, int dsize, double scale, area_tab *tab) {
  int k = 0;
  for (int dx = 0; dx < dsize; dx++) {
    double f1 = dx * scale, f2 = f1 + scale;
    double cell = fmin(scale, ssize - f1);
    int s1 = (int)ceil(f1), s2 = (int)floor(f2);
    if (s2 > ssize - 1) s2 = ssize - 1;
    if (s1 > s2) s1 = s2;
    if (s1 - f1 > 1e-3) tab[k++] = (area_tab){dx, s1 - 1, (float)((s1 - f1) / cell)};
    for (int sx = s1; sx < s2; sx++) tab[k++] = (area_tab){dx, sx, (float)(1.0 / cell)};
    if (f2 - s2 > 1e-3)
      tab[k++] = (area_tab){dx, s2, (float)(fmin(fmin(f2 - s2, 1.0), cell) / cell)};
  }
  return k;
}

/* OpenCV's saturate_cast<uchar>(float): round to nearest, ties to even, then clamp. The
 * rounding is 1.5·2^23's: adding it leaves no fraction bits, so the sum is rounded to an
 * integer by the FPU's own ties-to-even, exact for |v| < 2^22 (a resized pixel is in
 * [0, 255]); unlike lrintf it is no library call and vectorises. */
static inline uint8_t sat_u8(float v) {
  const float magic = 12582912.0f;
  float r = (v + magic) - magic;
  return (uint8_t)(r < 0.0f ? 0.0f : r > 255.0f ? 255.0f : r);
}

/* src (h, w) -> dst (S, S), the same roundings in the same order as OpenCV: a column's
 * horizontal sum adds its terms left to right from 0 (a padding term adds +0, which
 * changes no sum of non-negative terms), a row's vertical sum its rows top to bottom; each
 * product and sum rounded on its own (this file is compiled without FP contraction).
 * OpenCV recomputes a source row's horizontal pass for each destination row it feeds;
 * here each is computed once (copied where a row repeats the one above), and the loops
 * run over whole rows, so they vectorise. */
ATARI_VECTORISE static void area_resize(atari_vec *a, const uint8_t *src, uint8_t *dst) {
  const int S = a->o.screen, K = a->kx, W = a->w;
  float *f = a->srcf;
  for (int y = 0; y < a->h; y++) {
    const uint8_t *s = src + (size_t)y * (size_t)W;
    float *r = a->rows + (size_t)y * (size_t)S;
    if (y > 0 && !memcmp(s, s - W, (size_t)W)) {
      /* a row like the one above (an Atari screen has many): the same sums */
      memcpy(r, r - S, sizeof *r * (size_t)S);
      continue;
    }
    for (int x = 0; x < W; x++) f[x] = (float)s[x];
    for (int dx = 0; dx < S; dx++) r[dx] = 0.0f;
    /* term k of every column, k ascending: each column's sum in the table's order */
    for (int k = 0; k < K; k++) {
      const int *xi = a->xi + (size_t)k * (size_t)S;
      const float *xa = a->xa + (size_t)k * (size_t)S;
      for (int dx = 0; dx < S; dx++) r[dx] += f[xi[dx]] * xa[dx];
    }
  }
  float *sum = a->sum;
  for (int j = 0; j < a->ny; j++) {
    const float beta = a->ytab[j].alpha;
    const float *r = a->rows + (size_t)a->ytab[j].si * (size_t)S;
    const int first = j == 0 || a->ytab[j - 1].di != a->ytab[j].di;
    if (first)
      for (int i = 0; i < S; i++) sum[i] = beta * r[i];
    else
      for (int i = 0; i < S; i++) sum[i] += beta * r[i];
    if (j == a->ny - 1 || a->ytab[j + 1].di != a->ytab[j].di) {
      uint8_t *d = dst + (size_t)a->ytab[j].di * (size_t)S;
      for (int i = 0; i < S; i++) d[i] = sat_u8(sum[i]);
    }
  }
}

/* The horizontal table as K terms per destination column, in the table's order. */
static int column_terms(atari_vec *a, const area_tab *tab, int n) {
  const int S = a->o.screen;
  int K = 0;
  for (int k = 0, c = 0; k < n; k++) {
    c = k > 0 && tab[k - 1].di == tab[k].di ? c + 1 : 1;
    if (c > K) K = c;
  }
  a->kx = K;
  a->xi = malloc(sizeof *a->xi * (size_t)S * (size_t)K);
  a->xa = malloc(sizeof *a->xa * (size_t)S * (size_t)K);
  if (!a->xi || !a->xa) return -1;
  for (int dx = 0, k = 0; dx < S; dx++) {
    int c = 0;
    for (; k < n && tab[k].di == dx; k++, c++) {
      a->xi[c * S + dx] = tab[k].si;
      a->xa[c * S + dx] = tab[k].alpha;
    }
    for (int last = c ? a->xi[(c - 1) * S + dx] : 0; c < K; c++)
      a->xi[c * S + dx] = last, a->xa[c * S + dx] = 0.0f;
  }
  return 0;
}

/* ---- Options -------------------------------------------------------------------------- */

static int own_key(atari_opts *o, const char *key, const char *val, const char *id,
                   shoal_error *err, int *taken) {
  static const struct {
    const char *key;
    size_t off;
    int lo, hi;
  } keys[] = {
      {"noop_max", offsetof(atari_opts, noop_max), 0, 1000},
      {"frame_skip", offsetof(atari_opts, frame_skip), 1, 64},
      {"screen_size", offsetof(atari_opts, screen), 8, ATARI_MAX_SCREEN},
      {"frame_stack", offsetof(atari_opts, stack), 1, ATARI_MAX_STACK},
      {"episodic_life", offsetof(atari_opts, episodic_life), 0, 1},
      {"reward_clip", offsetof(atari_opts, reward_clip), 0, 1},
      {"max_episode_steps", offsetof(atari_opts, max_steps), 0, 1 << 30},
  };
  *taken = 0;
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    if (strcmp(key, keys[i].key) != 0) continue;
    *taken = 1;
    char *end;
    double v = strtod(val, &end);
    if (!strcmp(val, "true") || !strcmp(val, "True")) v = 1, end = (char *)val + strlen(val);
    if (!strcmp(val, "false") || !strcmp(val, "False")) v = 0, end = (char *)val + strlen(val);
    if (end == val || *end || v != floor(v) || v < keys[i].lo || v > keys[i].hi)
      return shoal_error_set(err, SHOAL_EINVAL, "gym:%s: option %s=%s: need an integer in [%d, %d]",
                             id, key, val, keys[i].lo, keys[i].hi);
    *(int *)((char *)o + keys[i].off) = (int)v;
    return 0;
  }
  return 0;
}

/* Splits "k=v,..." into shoal's settings (o) and gymnasium.make's (rest). */
static int split_options(const char *options, atari_opts *o, char *rest, size_t cap, const char *id,
                         shoal_error *err) {
  char buf[1024];
  if (snprintf(buf, sizeof buf, "%s", options ? options : "") >= (int)sizeof buf)
    return shoal_error_set(err, SHOAL_EINVAL, "gym:%s: options too long", id);
  size_t k = 0;
  rest[0] = 0;
  char *save = NULL;
  for (char *part = strtok_r(buf, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
    while (*part == ' ') part++;
    if (!*part) continue;
    char *eq = strchr(part, '=');
    if (!eq)
      return shoal_error_set(err, SHOAL_EINVAL, "gym:%s: option '%s' is not key=value", id, part);
    *eq = 0;
    char *key = part, *val = eq + 1;
    for (char *e = key + strlen(key); e > key && e[-1] == ' '; e--) e[-1] = 0;
    while (*val == ' ') val++;
    int taken, rc = own_key(o, key, val, id, err, &taken);
    if (rc) return rc;
    if (taken) continue;
    int n = snprintf(rest + k, cap - k, "%s%s=%s", k ? "," : "", key, val);
    if (n < 0 || (size_t)n >= cap - k)
      return shoal_error_set(err, SHOAL_EINVAL, "gym:%s: options too long", id);
    k += (size_t)n;
  }
  return 0;
}

/* ---- Calls into the emulator (GIL held) ------------------------------------------------ */

static int call_failed(atari_vec *a, int i, const char *what, shoal_error *err) {
  char line[300];
  env__py_error_line(line, sizeof line);
  return shoal_error_set(err, SHOAL_EENV, "env '%s': copy %d: %s (vector step %llu): %s", a->id, i,
                         what, (unsigned long long)a->steps, line);
}

/* ale.act(action, 1.0): the frame's reward, or an error. */
static int ale_act(atari_vec *a, int i, PyObject *action, long *reward, shoal_error *err) {
  PyObject *args[2] = {action, a->one};
  PyObject *r = PyObject_Vectorcall(a->c[i].act, args, 2, NULL);
  if (!r) return call_failed(a, i, "ale.act", err);
  *reward = PyLong_AsLong(r);
  Py_DECREF(r);
  if (*reward == -1 && PyErr_Occurred()) return call_failed(a, i, "ale.act", err);
  return 0;
}

/* A method returning a bool or an int: 0/1 or the int in *out. */
static int ale_int(atari_vec *a, int i, PyObject *fn, PyObject *const *args, size_t nargs,
                   PyObject *kwnames, const char *what, int *out, shoal_error *err) {
  PyObject *r = PyObject_Vectorcall(fn, args, nargs, kwnames);
  if (!r) return call_failed(a, i, what, err);
  long v = PyLong_AsLong(r); /* a bool is an int */
  Py_DECREF(r);
  if (v == -1 && PyErr_Occurred()) return call_failed(a, i, what, err);
  *out = (int)v;
  return 0;
}

static int ale_game_over(atari_vec *a, int i, int *out, shoal_error *err) {
  PyObject *args[1] = {Py_False}; /* with_truncation=False, as AtariEnv.step asks */
  return ale_int(a, i, a->c[i].game_over, args, 0, a->kw_with_truncation, "ale.game_over", out,
                 err);
}

static int ale_truncated(atari_vec *a, int i, int *out, shoal_error *err) {
  return ale_int(a, i, a->c[i].game_truncated, NULL, 0, NULL, "ale.game_truncated", out, err);
}

static int ale_lives(atari_vec *a, int i, int *out, shoal_error *err) {
  return ale_int(a, i, a->c[i].lives, NULL, 0, NULL, "ale.lives", out, err);
}

static int ale_grab(atari_vec *a, int i, int which, shoal_error *err) {
  PyObject *args[1] = {a->c[i].scr[which]};
  PyObject *r = PyObject_Vectorcall(a->c[i].gray, args, 1, NULL);
  if (!r) return call_failed(a, i, "ale.getScreenGrayscale", err);
  Py_DECREF(r);
  return 0;
}

/* ---- The preprocessing ------------------------------------------------------------------ */

/* AtariPreprocessing._get_obs: buf[0] = max(buf[0], buf[1]) in place (so it carries into
 * a later step that ends before both are grabbed again), resized onto the stack. */
ATARI_VECTORISE static void push_frame(atari_vec *a, atari_copy *c, int fill) {
  const size_t n = (size_t)a->h * (size_t)a->w, F = a->frame;
  const int K = a->o.stack;
  uint8_t *b0 = c->buf[0];
  const uint8_t *b1 = c->buf[1];
  if (a->o.frame_skip > 1)
    for (size_t k = 0; k < n; k++) b0[k] = b0[k] > b1[k] ? b0[k] : b1[k];
  uint8_t *last = c->stack + (size_t)(K - 1) * F;
  if (fill) {
    area_resize(a, b0, last);
    for (int k = 0; k < K - 1; k++) memcpy(c->stack + (size_t)k * F, last, F);
  } else {
    memmove(c->stack, c->stack + F, (size_t)(K - 1) * F);
    area_resize(a, b0, last);
  }
}

/* AtariPreprocessing.reset + FrameStackObservation.reset for copy i. seed: a Python int
 * or None. */
static int reset_copy(atari_vec *a, int i, PyObject *seed, shoal_error *err) {
  atari_copy *c = &a->c[i];
  PyObject *r = PyObject_CallMethod(a->vec, "reset", "iOi", i, seed, 1);
  if (!r) return call_failed(a, i, "reset", err);
  long noops = PyLong_AsLong(r);
  Py_DECREF(r);
  if (noops < 0) return call_failed(a, i, "reset", err);
  PyObject *noop = PyTuple_GET_ITEM(c->actions, 0);
  int rc;
  for (long k = 0; k < noops; k++) {
    long rew;
    int over, trunc;
    if ((rc = ale_act(a, i, noop, &rew, err)) || (rc = ale_game_over(a, i, &over, err)) ||
        (rc = ale_truncated(a, i, &trunc, err)))
      return rc;
    if (over || trunc) {
      /* as the wrapper: reset again with the same seed, the no-ops go on */
      if (!(r = PyObject_CallMethod(a->vec, "reset", "iOi", i, seed, 0)))
        return call_failed(a, i, "reset", err);
      Py_DECREF(r);
    }
  }
  if ((rc = ale_lives(a, i, &c->nlives, err)) || (rc = ale_grab(a, i, 0, err))) return rc;
  memset(c->buf[1], 0, (size_t)a->h * (size_t)a->w);
  push_frame(a, c, 1);
  c->elapsed = 0;
  c->continue_next = 0;
  return 0;
}

/* One step of copy i: AtariPreprocessing.step, then the stack. *game_ended: the game
 * itself ended (not a life). */
static int step_copy(atari_vec *a, int i, int action, double *reward, int *term, int *trunc,
                     int *game_ended, shoal_error *err) {
  atari_copy *c = &a->c[i];
  PyObject *aobj = PyTuple_GET_ITEM(c->actions, action);
  const int skip = a->o.frame_skip;
  long total = 0;
  int over = 0, tr = 0, lost = 0, rc;
  for (int t = 0; t < skip; t++) {
    long r;
    if ((rc = ale_act(a, i, aobj, &r, err)) || (rc = ale_game_over(a, i, &over, err)) ||
        (rc = ale_truncated(a, i, &tr, err)))
      return rc;
    total += r;
    if (a->o.episodic_life) {
      int nl;
      if ((rc = ale_lives(a, i, &nl, err))) return rc;
      lost |= nl < c->nlives;
      c->nlives = nl;
    }
    if (over || lost || tr) break;
    if (t == skip - 2) {
      if ((rc = ale_grab(a, i, 1, err))) return rc;
    } else if (t == skip - 1) {
      if ((rc = ale_grab(a, i, 0, err))) return rc;
    }
  }
  push_frame(a, c, 0);
  c->elapsed++;
  int limit = a->o.max_steps > 0 && c->elapsed >= a->o.max_steps;
  *reward = a->o.reward_clip ? (double)((total > 0) - (total < 0)) : (double)total;
  *term = over || lost;
  *trunc = tr || limit;
  *game_ended = over || tr || limit;
  return 0;
}

/* ---- The backend ----------------------------------------------------------------------- */

static void atari_destroy(void *p) {
  atari_vec *a = p;
  if (!a) return;
  if (a->vec || a->one || a->kw_with_truncation || a->c) {
    PyGILState_STATE st = PyGILState_Ensure();
    for (int i = 0; a->c && i < a->B; i++) {
      atari_copy *c = &a->c[i];
      Py_XDECREF(c->act), Py_XDECREF(c->lives), Py_XDECREF(c->game_over);
      Py_XDECREF(c->game_truncated), Py_XDECREF(c->gray), Py_XDECREF(c->rgb);
      Py_XDECREF(c->actions), Py_XDECREF(c->scr[0]), Py_XDECREF(c->scr[1]);
      Py_XDECREF(c->rgb_view);
    }
    if (a->vec) {
      PyObject *r = PyObject_CallMethod(a->vec, "close", NULL);
      if (!r) PyErr_Clear();
      Py_XDECREF(r);
    }
    Py_XDECREF(a->vec), Py_XDECREF(a->one), Py_XDECREF(a->kw_with_truncation);
    PyGILState_Release(st);
  }
  for (int i = 0; a->c && i < a->B; i++)
    free(a->c[i].buf[0]), free(a->c[i].buf[1]), free(a->c[i].stack);
  free(a->c), free(a->ytab), free(a->xi), free(a->xa), free(a->rows), free(a->srcf);
  free(a->sum), free(a->rgb);
  free(a->olow), free(a->ohigh);
  free(a);
}

/* A NumPy (shape) view of n bytes at p, through the bridge. */
static PyObject *view(atari_vec *a, void *p, size_t n, PyObject *shape) {
  PyObject *mv = PyMemoryView_FromMemory(p, (Py_ssize_t)n, PyBUF_WRITE);
  PyObject *v = mv ? PyObject_CallMethod(a->vec, "screen", "OO", mv, shape) : NULL;
  Py_XDECREF(mv);
  return v;
}

/* Copy i's emulator methods and screen views (GIL held). */
static int take_parts(atari_vec *a, int i, shoal_error *err) {
  atari_copy *c = &a->c[i];
  PyObject *t = PyObject_CallMethod(a->vec, "parts", "i", i);
  int h, w;
  if (!t || !PyArg_ParseTuple(t, "OOOOOOO(ii)", &c->act, &c->lives, &c->game_over,
                              &c->game_truncated, &c->gray, &c->rgb, &c->actions, &h, &w)) {
    Py_XDECREF(t);
    return call_failed(a, i, "reading the emulator", err);
  }
  Py_INCREF(c->act), Py_INCREF(c->lives), Py_INCREF(c->game_over), Py_INCREF(c->game_truncated);
  Py_INCREF(c->gray), Py_INCREF(c->rgb), Py_INCREF(c->actions);
  Py_DECREF(t);
  if (!PyTuple_Check(c->actions) || PyTuple_GET_SIZE(c->actions) < 1)
    return shoal_error_set(err, SHOAL_EINTERNAL, "gym:%s: no action set", a->id + 4);
  if (i == 0) {
    a->h = h, a->w = w;
  } else if (h != a->h || w != a->w || PyTuple_GET_SIZE(c->actions) != a->spec.act.n) {
    return shoal_error_set(err, SHOAL_EINTERNAL, "gym:%s: copies differ", a->id + 4);
  }
  const size_t n = (size_t)h * (size_t)w;
  c->buf[0] = calloc(n, 1);
  c->buf[1] = calloc(n, 1);
  c->stack = calloc((size_t)a->o.stack, a->frame);
  if (!c->buf[0] || !c->buf[1] || !c->stack)
    return shoal_error_set(err, SHOAL_ENOMEM, "gym:%s: out of memory", a->id + 4);
  PyObject *shape = Py_BuildValue("(ii)", h, w);
  c->scr[0] = shape ? view(a, c->buf[0], n, shape) : NULL;
  c->scr[1] = shape ? view(a, c->buf[1], n, shape) : NULL;
  Py_XDECREF(shape);
  if (!c->scr[0] || !c->scr[1]) return call_failed(a, i, "screen views", err);
  return 0;
}

static int atari_create(void **self, const char *id, int B, const char *options, int evaluation,
                        env_spec *spec, shoal_error *err) {
  char game[240];
  if (snprintf(game, sizeof game, "ALE/%s", id) >= (int)sizeof game)
    return shoal_error_set(err, SHOAL_EINVAL, "gym:ALE/...: id too long");
  PyObject *bridge;
  int rc = env__py_bridge(game, &bridge, err);
  if (rc) return rc;
  atari_vec *a = calloc(1, sizeof *a);
  if (!a) return shoal_error_set(err, SHOAL_ENOMEM, "gym:%s: out of memory", game);
  a->B = B;
  snprintf(a->id, sizeof a->id, "gym:%s", game);
  /* DQN's (Mnih et al. 2015) and EnvPool's defaults */
  a->o = (atari_opts){.noop_max = 30,
                      .frame_skip = 4,
                      .screen = 84,
                      .stack = 4,
                      .episodic_life = 1,
                      .reward_clip = 1};
  char rest[1024];
  if ((rc = split_options(options, &a->o, rest, sizeof rest, game, err))) {
    atari_destroy(a);
    return rc;
  }
  if (evaluation) a->o.episodic_life = a->o.reward_clip = 0;
  const int S = a->o.screen, K = a->o.stack;
  a->frame = (size_t)S * (size_t)S;
  PyGILState_STATE st = PyGILState_Ensure();
  a->one = PyFloat_FromDouble(1.0);
  a->kw_with_truncation = Py_BuildValue("(s)", "with_truncation");
  a->vec = PyObject_CallMethod(bridge, "Atari", "sisi", game, B, rest, a->o.noop_max);
  if (!a->vec) {
    char line[300];
    env__py_error_line(line, sizeof line);
    rc = shoal_error_set(err, SHOAL_EINVAL, "%s: %s", a->id, line);
  } else if (!a->one || !a->kw_with_truncation) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "%s: out of memory", a->id);
  }
  if (!rc && !(a->c = calloc((size_t)B, sizeof *a->c)))
    rc = shoal_error_set(err, SHOAL_ENOMEM, "%s: out of memory", a->id);
  for (int i = 0; !rc && i < B; i++) {
    if (i == 0 && (rc = take_parts(a, 0, err))) break;
    if (i == 0) {
      a->spec.act = (env_space){
          .dtype = ENV_INT32, .ndim = 0, .size = 1, .n = (int)PyTuple_GET_SIZE(a->c[0].actions)};
      continue;
    }
    rc = take_parts(a, i, err);
  }
  int max_steps = 0;
  double thr = NAN;
  if (!rc) {
    PyObject *m = PyObject_GetAttrString(a->vec, "max_episode_steps");
    PyObject *t = PyObject_GetAttrString(a->vec, "reward_threshold");
    max_steps = m ? (int)PyLong_AsLong(m) : 0;
    thr = t ? PyFloat_AsDouble(t) : NAN;
    Py_XDECREF(m), Py_XDECREF(t);
    if (PyErr_Occurred()) PyErr_Clear();
  }
  PyGILState_Release(st);
  if (!rc && (S > a->h || S > a->w))
    rc = shoal_error_set(err, SHOAL_EINVAL, "%s: screen_size %d is larger than the screen %dx%d",
                         a->id, S, a->w, a->h);
  if (!rc) {
    a->ytab = malloc(sizeof *a->ytab * (size_t)(2 * a->h + 2));
    a->rows = malloc(sizeof *a->rows * (size_t)a->h * (size_t)S);
    a->sum = malloc(sizeof *a->sum * (size_t)S);
    a->srcf = malloc(sizeof *a->srcf * (size_t)a->w);
    a->rgb = malloc((size_t)a->h * (size_t)a->w * 3);
    a->olow = calloc((size_t)K * a->frame, sizeof *a->olow);
    a->ohigh = malloc(sizeof *a->ohigh * (size_t)K * a->frame);
    area_tab *xtab = malloc(sizeof *xtab * (size_t)(2 * a->w + 2));
    if (!xtab || !a->ytab || !a->rows || !a->sum || !a->srcf || !a->rgb || !a->olow || !a->ohigh ||
        column_terms(a, xtab, area_table(a->w, S, 1.0 / ((double)S / a->w), xtab)))
      rc = shoal_error_set(err, SHOAL_ENOMEM, "%s: out of memory", a->id);
    free(xtab);
  }
  if (rc) {
    atari_destroy(a);
    return rc;
  }
  /* OpenCV's scale is the source size over the destination's, as a double (the
   * horizontal table became column_terms above) */
  a->ny = area_table(a->h, S, 1.0 / ((double)S / a->h), a->ytab);
  for (size_t k = 0; k < (size_t)K * a->frame; k++) a->ohigh[k] = 255.0f;
  if (!a->o.max_steps) a->o.max_steps = max_steps;
  a->spec.id = a->id;
  a->spec.obs = (env_space){.dtype = ENV_UINT8,
                            .ndim = 3,
                            .shape = {K, S, S},
                            .size = K * S * S,
                            .low = a->olow,
                            .high = a->ohigh};
  a->spec.max_episode_steps = a->o.max_steps;
  a->spec.reward_threshold = thr;
  a->spec.render_h = a->h;
  a->spec.render_w = a->w;
  *spec = a->spec;
  *self = a;
  return 0;
}

static int atari_reset(void *self, const uint64_t *seeds, const uint8_t *reseed, void *obs,
                       shoal_error *err) {
  atari_vec *a = self;
  PyGILState_STATE st = PyGILState_Ensure();
  int rc = 0;
  for (int i = 0; !rc && i < a->B; i++) {
    int seeded = seeds && (!reseed || reseed[i]);
    if (!seeded && a->c[i].continue_next) {
      /* an episode that ended with a life: the game goes on */
      a->c[i].continue_next = 0;
      continue;
    }
    PyObject *s = seeded ? PyLong_FromUnsignedLongLong(seeds[i]) : Py_NewRef(Py_None);
    rc = s ? reset_copy(a, i, s, err) : shoal_error_set(err, SHOAL_ENOMEM, "%s: reset", a->id);
    Py_XDECREF(s);
  }
  PyGILState_Release(st);
  if (rc) return rc;
  const size_t ob = (size_t)a->o.stack * a->frame;
  for (int i = 0; i < a->B; i++) memcpy((uint8_t *)obs + (size_t)i * ob, a->c[i].stack, ob);
  return 0;
}

static int atari_step(void *self, const void *actions, int autoreset, void *obs, double *reward,
                      uint8_t *terminated, uint8_t *truncated, void *final_obs, shoal_error *err) {
  atari_vec *a = self;
  const int32_t *act = actions;
  const size_t ob = (size_t)a->o.stack * a->frame;
  a->steps++;
  PyGILState_STATE st = PyGILState_Ensure();
  int rc = 0;
  for (int i = 0; !rc && i < a->B; i++) {
    atari_copy *c = &a->c[i];
    int term, trunc, game_ended;
    if ((rc = step_copy(a, i, act[i], &reward[i], &term, &trunc, &game_ended, err))) break;
    terminated[i] = (uint8_t)term;
    truncated[i] = (uint8_t)trunc;
    if (!(term | trunc)) {
      memcpy((uint8_t *)obs + (size_t)i * ob, c->stack, ob);
      continue;
    }
    if (!autoreset) {
      c->continue_next = !game_ended;
      memcpy((uint8_t *)obs + (size_t)i * ob, c->stack, ob);
      continue;
    }
    if (final_obs) memcpy((uint8_t *)final_obs + (size_t)i * ob, c->stack, ob);
    if (game_ended) {
      PyObject *none = Py_NewRef(Py_None);
      rc = reset_copy(a, i, none, err);
      Py_DECREF(none);
    }
    memcpy((uint8_t *)obs + (size_t)i * ob, c->stack, ob);
  }
  PyGILState_Release(st);
  return rc;
}

static int atari_render(void *self, int i, uint8_t *rgb, shoal_error *err) {
  atari_vec *a = self;
  PyGILState_STATE st = PyGILState_Ensure();
  atari_copy *c = &a->c[i];
  int rc = 0;
  if (!c->rgb_view) {
    PyObject *shape = Py_BuildValue("(iii)", a->h, a->w, 3);
    c->rgb_view = shape ? view(a, a->rgb, (size_t)a->h * (size_t)a->w * 3, shape) : NULL;
    Py_XDECREF(shape);
  }
  PyObject *args[1] = {c->rgb_view};
  PyObject *r = c->rgb_view ? PyObject_Vectorcall(c->rgb, args, 1, NULL) : NULL;
  if (!r)
    rc = call_failed(a, i, "ale.getScreenRGB", err);
  else
    memcpy(rgb, a->rgb, (size_t)a->h * (size_t)a->w * 3);
  Py_XDECREF(r);
  PyGILState_Release(st);
  return rc;
}

static int atari_get_state(void *self, int i, double *out, int cap, shoal_error *err) {
  (void)i, (void)out, (void)cap;
  atari_vec *a = self;
  return shoal_error_set(err, SHOAL_ENOTSUP, "env '%s' has no physical state to read", a->id);
}

const env__backend env__atari_backend = {
    .prefix = "gym:ALE/",
    .create = atari_create,
    .destroy = atari_destroy,
    .reset = atari_reset,
    .step = atari_step,
    .render = atari_render,
    .get_state = atari_get_state,
};
