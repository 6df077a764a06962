/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Gymnasium backend: "gym:ID" envs stepped by an embedded CPython.
 *
 * ID is anything gymnasium.make takes, its "module:ID" form included, so a user's env
 * registered with gymnasium.register in an importable module needs nothing of shoal's.
 * The Python side (envs/gym_bridge.py, compiled into this library) holds B envs and
 * writes each step into NumPy views of buffers this file owns; the step here is one
 * call into Python, then the checks Gymnasium leaves to the user (a NaN reward, an
 * observation outside the declared space) and one copy of the rows to the caller.
 *
 * The interpreter: the one already running when libshoal.so is loaded by Python
 * (ctypes), else one started here on first use, once per process, from the Python the
 * SHOAL_ENV_PYTHON environment variable names (a venv's bin/python; its site-packages are
 * used), else from the venv `make deps` made (SHOAL_DEFAULT_PYTHON, set at build time).
 * It installs no signal handlers: SIGINT and SIGTERM stay the program's. The working
 * folder is put first on sys.path, as `python -m` does, so "mymodule:MyEnv-v0" finds
 * mymodule.py there; PYTHONPATH is honoured as usual.
 *
 * Threads: every call takes the GIL (PyGILState_Ensure) and releases it on return, so
 * any thread may step; a vector env's copies run one after another on the caller's
 * thread (the GIL would serialise worker threads). Parallelism is across processes:
 * each actor is one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "envs/internal.h"
#include "envs/pyembed.h"

#ifndef SHOAL_DEFAULT_PYTHON
#define SHOAL_DEFAULT_PYTHON ""
#endif

extern const char env__gym_bridge_src[]; /* envs/gym_bridge.py, generated at build time */

static pthread_once_t py_once = PTHREAD_ONCE_INIT;
static int py_rc;         /* 0 once the bridge module is loaded */
static char py_msg[1024]; /* why it is not */
static PyObject *bridge;  /* the bridge module (a strong reference, never freed) */
static char py_exe[256];  /* which Python was started, for messages */

/* The pending Python exception as one line ("ValueError: ..."), cleared. GIL held. */
void env__py_error_line(char *out, size_t cap) {
  PyObject *type = NULL, *value = NULL, *tb = NULL;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  const char *s = NULL;
  PyObject *line = NULL;
  if (bridge && value) line = PyObject_CallMethod(bridge, "_last_line", "O", value);
  if (!line && value) {
    PyErr_Clear();
    line = PyObject_Str(value);
  }
  if (line) s = PyUnicode_AsUTF8(line);
  if (!s) PyErr_Clear();
  snprintf(out, cap, "%s", s ? s : "unknown Python error");
  Py_XDECREF(line);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
}

static void py_start(void) {
  int own = !Py_IsInitialized();
  if (own) {
    const char *exe = getenv("SHOAL_ENV_PYTHON");
    if (!exe || !exe[0]) exe = SHOAL_DEFAULT_PYTHON;
    PyConfig cfg;
    PyConfig_InitPythonConfig(&cfg);
    cfg.install_signal_handlers = 0; /* SIGINT and SIGTERM are the program's */
    cfg.parse_argv = 0;
    PyStatus st = PyStatus_Ok();
    if (exe[0]) {
      if (access(exe, X_OK) != 0) {
        PyConfig_Clear(&cfg);
        py_rc = SHOAL_ENOENT;
        snprintf(py_msg, sizeof py_msg,
                 "no Python at %s (SHOAL_ENV_PYTHON, or the venv `make deps` makes): run `make "
                 "deps`, or set SHOAL_ENV_PYTHON to a venv's bin/python that has gymnasium",
                 exe);
        return;
      }
      snprintf(py_exe, sizeof py_exe, "%s", exe);
      /* program_name makes Python find the venv's pyvenv.cfg, so sys.prefix and
       * site-packages are the venv's. */
      st = PyConfig_SetBytesString(&cfg, &cfg.program_name, exe);
    }
    if (!PyStatus_Exception(st)) st = Py_InitializeFromConfig(&cfg);
    PyConfig_Clear(&cfg);
    if (PyStatus_Exception(st)) {
      py_rc = SHOAL_EINTERNAL;
      snprintf(py_msg, sizeof py_msg, "could not start Python (%s): %s",
               py_exe[0] ? py_exe : "libpython's default",
               st.err_msg ? st.err_msg : "unknown error");
      return;
    }
  }
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *code = NULL, *mod = NULL;
  /* sys.path[0] = the working folder, as `python -m` has it */
  PyObject *sys_path = PySys_GetObject("path"); /* borrowed */
  PyObject *cwd = PyUnicode_FromString(".");
  if (sys_path && cwd && PySequence_Contains(sys_path, cwd) == 0) PyList_Insert(sys_path, 0, cwd);
  Py_XDECREF(cwd);
  PyErr_Clear();
  code = Py_CompileString(env__gym_bridge_src, "shoal/envs/gym_bridge.py", Py_file_input);
  if (code) mod = PyImport_ExecCodeModule("shoal_gym_bridge", code);
  if (!mod) {
    char line[300];
    env__py_error_line(line, sizeof line);
    py_rc = SHOAL_ENOENT;
    snprintf(py_msg, sizeof py_msg,
             "Python (%s) could not load shoal's Gymnasium bridge: %s; run `make deps` (it "
             "makes the venv with NumPy and Gymnasium), or set SHOAL_ENV_PYTHON to a venv's "
             "bin/python that has them",
             py_exe[0] ? py_exe : "the running interpreter", line);
  } else {
    bridge = mod;
  }
  Py_XDECREF(code);
  PyGILState_Release(g);
  if (own) PyEval_SaveThread(); /* the GIL is free for whichever thread steps */
}

typedef struct gym_vec {
  PyObject *vec; /* bridge.Vec */
  int B;
  char id[256];  /* "gym:ID", for messages and the spec */
  env_spec spec; /* points into id and the bounds below */
  float *olow, *ohigh, *alow, *ahigh;
  int check_bounds; /* a float observation space with a finite bound somewhere */
  size_t ob, ab;    /* bytes of one observation / one action */
  void *obs, *fin, *act;
  double *rew;
  uint8_t *term, *trunc;
  uint64_t steps; /* vector steps, for messages */
} gym_vec;

static void gym_destroy(void *p) {
  gym_vec *g = p;
  if (!g) return;
  if (g->vec) {
    PyGILState_STATE st = PyGILState_Ensure();
    PyObject *r = PyObject_CallMethod(g->vec, "close", NULL);
    if (!r) PyErr_Clear();
    Py_XDECREF(r);
    Py_DECREF(g->vec);
    PyGILState_Release(st);
  }
  free(g->olow), free(g->ohigh), free(g->alow), free(g->ahigh);
  free(g->obs), free(g->fin), free(g->act), free(g->rew), free(g->term), free(g->trunc);
  free(g);
}

/* A Python sequence of numbers into a new float array of n; NULL on a mismatch. */
static float *floats_of(PyObject *seq, int n) {
  if (!PySequence_Check(seq) || PySequence_Size(seq) != n) return NULL;
  float *out = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  for (int i = 0; out && i < n; i++) {
    PyObject *x = PySequence_GetItem(seq, i);
    double d = x ? PyFloat_AsDouble(x) : NAN;
    Py_XDECREF(x);
    if (PyErr_Occurred()) {
      free(out);
      return NULL;
    }
    out[i] = (float)d;
  }
  return out;
}

static int shape_of(PyObject *t, env_space *s) {
  if (!PyTuple_Check(t) || PyTuple_Size(t) > ENV_MAX_DIMS) return -1;
  s->ndim = (int)PyTuple_Size(t);
  long size = 1;
  for (int i = 0; i < s->ndim; i++) {
    long d = PyLong_AsLong(PyTuple_GetItem(t, i));
    if (d < 1 || d > (1 << 24)) return -1;
    s->shape[i] = (int)d;
    size *= d;
    if (size > (1 << 24)) return -1;
  }
  s->size = (int)size;
  return 0;
}

/* Fills g->spec from bridge.Vec.spec(). GIL held. */
static int take_spec(gym_vec *g, PyObject *t, shoal_error *err) {
  PyObject *oshape, *olow, *ohigh, *ashape, *alow, *ahigh, *render_hw;
  int ou8, an, max_steps;
  double thr;
  if (!PyArg_ParseTuple(t, "OiOOiOOOidO", &oshape, &ou8, &olow, &ohigh, &an, &ashape, &alow, &ahigh,
                        &max_steps, &thr, &render_hw))
    return shoal_error_set(err, SHOAL_EINTERNAL, "%s: the bridge's spec is malformed", g->id);
  env_spec *sp = &g->spec;
  sp->id = g->id;
  if (shape_of(oshape, &sp->obs) || (an == 0 && shape_of(ashape, &sp->act)))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "%s: a space of more than 4 dimensions or 2^24 elements", g->id);
  sp->obs.dtype = ou8 ? ENV_UINT8 : ENV_FLOAT32;
  sp->obs.n = 0;
  g->olow = floats_of(olow, sp->obs.size);
  g->ohigh = floats_of(ohigh, sp->obs.size);
  if (!g->olow || !g->ohigh)
    return shoal_error_set(err, SHOAL_EINTERNAL, "%s: observation bounds unreadable", g->id);
  sp->obs.low = g->olow;
  sp->obs.high = g->ohigh;
  for (int i = 0; i < sp->obs.size && !ou8; i++)
    g->check_bounds |= isfinite(g->olow[i]) || isfinite(g->ohigh[i]);
  if (an > 0) {
    sp->act = (env_space){.dtype = ENV_INT32, .ndim = 0, .size = 1, .n = an};
  } else {
    sp->act.dtype = ENV_FLOAT32;
    sp->act.n = 0;
    g->alow = floats_of(alow, sp->act.size);
    g->ahigh = floats_of(ahigh, sp->act.size);
    if (!g->alow || !g->ahigh)
      return shoal_error_set(err, SHOAL_EINTERNAL, "%s: action bounds unreadable", g->id);
    sp->act.low = g->alow;
    sp->act.high = g->ahigh;
  }
  sp->max_episode_steps = max_steps;
  sp->reward_threshold = thr;
  int rh = 0, rw = 0;
  if (!PyArg_ParseTuple(render_hw, "ii", &rh, &rw)) PyErr_Clear();
  sp->render_h = rh;
  sp->render_w = rw;
  return 0;
}

static int bind_buffers(gym_vec *g, shoal_error *err) {
  size_t B = (size_t)g->B;
  g->ob = env_space_bytes(&g->spec.obs);
  g->ab = env_space_bytes(&g->spec.act);
  g->obs = calloc(B, g->ob);
  g->fin = calloc(B, g->ob);
  g->act = calloc(B, g->ab);
  g->rew = calloc(B, sizeof *g->rew);
  g->term = calloc(B, 1);
  g->trunc = calloc(B, 1);
  if (!g->obs || !g->fin || !g->act || !g->rew || !g->term || !g->trunc)
    return shoal_error_set(err, SHOAL_ENOMEM, "%s x %d: out of memory", g->id, g->B);
  PyObject *mv[6] = {
      PyMemoryView_FromMemory(g->obs, (Py_ssize_t)(B * g->ob), PyBUF_WRITE),
      PyMemoryView_FromMemory(g->act, (Py_ssize_t)(B * g->ab), PyBUF_WRITE),
      PyMemoryView_FromMemory((char *)g->rew, (Py_ssize_t)(B * sizeof *g->rew), PyBUF_WRITE),
      PyMemoryView_FromMemory((char *)g->term, (Py_ssize_t)B, PyBUF_WRITE),
      PyMemoryView_FromMemory((char *)g->trunc, (Py_ssize_t)B, PyBUF_WRITE),
      PyMemoryView_FromMemory(g->fin, (Py_ssize_t)(B * g->ob), PyBUF_WRITE),
  };
  PyObject *r = NULL;
  if (mv[0] && mv[1] && mv[2] && mv[3] && mv[4] && mv[5])
    r = PyObject_CallMethod(g->vec, "bind", "OOOOOO", mv[0], mv[1], mv[2], mv[3], mv[4], mv[5]);
  for (int i = 0; i < 6; i++) Py_XDECREF(mv[i]);
  if (!r) {
    char line[300];
    env__py_error_line(line, sizeof line);
    return shoal_error_set(err, SHOAL_EINTERNAL, "%s: binding buffers: %s", g->id, line);
  }
  Py_DECREF(r);
  return 0;
}

int env__py_bridge(const char *id, PyObject **out, shoal_error *err) {
  pthread_once(&py_once, py_start);
  if (py_rc) return shoal_error_set(err, py_rc, "gym:%s: %s", id, py_msg);
  *out = bridge;
  return 0;
}

static int gym_create(void **self, const char *id, int B, const char *options, int evaluation,
                      env_spec *spec, shoal_error *err) {
  (void)evaluation; /* a Gymnasium env trains as it scores */
  PyObject *br;
  int brc = env__py_bridge(id, &br, err);
  if (brc) return brc;
  gym_vec *g = calloc(1, sizeof *g);
  if (!g) return shoal_error_set(err, SHOAL_ENOMEM, "gym:%s: out of memory", id);
  g->B = B;
  snprintf(g->id, sizeof g->id, "gym:%s", id);
  PyGILState_STATE st = PyGILState_Ensure();
  int rc = 0;
  PyObject *t = NULL;
  g->vec = PyObject_CallMethod(bridge, "Vec", "sis", id, B, options ? options : "");
  if (!g->vec) {
    char line[300];
    env__py_error_line(line, sizeof line);
    /* gymnasium's own words say what is wrong (an unknown id lists close ones) */
    rc = shoal_error_set(err, SHOAL_EINVAL, "%s: %s", g->id, line);
  }
  if (!rc && !(t = PyObject_CallMethod(g->vec, "spec", NULL))) {
    char line[300];
    env__py_error_line(line, sizeof line);
    rc = shoal_error_set(err, SHOAL_EINTERNAL, "%s: %s", g->id, line);
  }
  if (!rc) rc = take_spec(g, t, err);
  Py_XDECREF(t);
  if (!rc) rc = bind_buffers(g, err);
  PyGILState_Release(st);
  if (rc) {
    gym_destroy(g);
    return rc;
  }
  *spec = g->spec;
  *self = g;
  return 0;
}

/* The bridge's answer: None is success, a str names what the env raised. GIL held. */
static int bridge_result(gym_vec *g, PyObject *r, const char *what, shoal_error *err) {
  if (r == Py_None) {
    Py_DECREF(r);
    return 0;
  }
  char line[400];
  if (!r) {
    env__py_error_line(line, sizeof line);
  } else {
    const char *s = PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : NULL;
    snprintf(line, sizeof line, "%s", s ? s : "malformed answer from the bridge");
    Py_DECREF(r);
  }
  return shoal_error_set(err, SHOAL_EENV, "env '%s': %s (vector step %llu): %s", g->id, what,
                         (unsigned long long)g->steps, line);
}

static int check_outputs(gym_vec *g, const void *rows, int only_ended, const char *what,
                         shoal_error *err);

static int gym_reset(void *self, const uint64_t *seeds, const uint8_t *reseed, void *obs,
                     shoal_error *err) {
  gym_vec *g = self;
  PyGILState_STATE st = PyGILState_Ensure();
  PyObject *list = PyList_New(g->B);
  for (int i = 0; list && i < g->B; i++) {
    PyObject *s = seeds && (!reseed || reseed[i]) ? PyLong_FromUnsignedLongLong(seeds[i])
                                                  : Py_NewRef(Py_None);
    PyList_SET_ITEM(list, i, s);
  }
  PyObject *r = list ? PyObject_CallMethod(g->vec, "reset", "O", list) : NULL;
  Py_XDECREF(list);
  int rc = bridge_result(g, r, "reset", err);
  PyGILState_Release(st);
  if (!rc) rc = check_outputs(g, g->obs, 0, "first observation", err);
  if (rc) return rc;
  memcpy(obs, g->obs, (size_t)g->B * g->ob);
  return 0;
}

/* What Gymnasium leaves to its users: rewards must be finite and observations inside
 * the declared space, or training goes on with garbage. Checks the B rows of rows
 * (only_ended: those of copies whose episode ended in this step). */
static int check_outputs(gym_vec *g, const void *rows, int only_ended, const char *what,
                         shoal_error *err) {
  for (int i = 0; i < g->B; i++)
    if (!isfinite(g->rew[i]))
      return shoal_error_set(err, SHOAL_EENV,
                             "env '%s': copy %d returned a %s reward (vector step %llu)", g->id, i,
                             isnan(g->rew[i]) ? "NaN" : "infinite", (unsigned long long)g->steps);
  if (g->spec.obs.dtype != ENV_FLOAT32) return 0;
  const int n = g->spec.obs.size;
  for (int i = 0; i < g->B; i++) {
    if (only_ended && !(g->term[i] | g->trunc[i])) continue;
    const float *o = (const float *)rows + (size_t)i * (size_t)n;
    for (int k = 0; k < n; k++) {
      float x = o[k];
      if (x != x)
        return shoal_error_set(err, SHOAL_EENV,
                               "env '%s': copy %d returned a NaN in %s[%d] (vector step %llu)",
                               g->id, i, what, k, (unsigned long long)g->steps);
      if (g->check_bounds && (x < g->olow[k] || x > g->ohigh[k]))
        return shoal_error_set(err, SHOAL_EENV,
                               "env '%s': copy %d returned %s[%d] = %g, outside its declared "
                               "space [%g, %g] (vector step %llu); fix the env or declare the "
                               "bounds it keeps",
                               g->id, i, what, k, (double)x, (double)g->olow[k],
                               (double)g->ohigh[k], (unsigned long long)g->steps);
    }
  }
  return 0;
}

static int gym_step(void *self, const void *actions, int autoreset, void *obs, double *reward,
                    uint8_t *terminated, uint8_t *truncated, void *final_obs, shoal_error *err) {
  gym_vec *g = self;
  const size_t B = (size_t)g->B;
  memcpy(g->act, actions, B * g->ab);
  g->steps++;
  PyGILState_STATE st = PyGILState_Ensure();
  PyObject *r = PyObject_CallMethod(g->vec, "step", "ii", autoreset, final_obs != NULL);
  int rc = bridge_result(g, r, "step", err);
  PyGILState_Release(st);
  if (rc) return rc;
  if ((rc = check_outputs(g, g->obs, 0, "observation", err))) return rc;
  if (autoreset && final_obs) {
    /* the ended copies' last observations are outputs too (bootstrapping reads them) */
    if ((rc = check_outputs(g, g->fin, 1, "final observation", err))) return rc;
    for (size_t i = 0; i < B; i++)
      if (g->term[i] | g->trunc[i])
        memcpy((char *)final_obs + i * g->ob, (char *)g->fin + i * g->ob, g->ob);
  }
  memcpy(obs, g->obs, B * g->ob);
  memcpy(reward, g->rew, B * sizeof *reward);
  memcpy(terminated, g->term, B);
  memcpy(truncated, g->trunc, B);
  return 0;
}

static int gym_render(void *self, int i, uint8_t *rgb, shoal_error *err) {
  gym_vec *g = self;
  if (g->spec.render_w < 1)
    return shoal_error_set(err, SHOAL_ENOTSUP,
                           "env '%s' renders no frames: make it with render_mode=rgb_array "
                           "(env.options) if it supports that",
                           g->id);
  PyGILState_STATE st = PyGILState_Ensure();
  PyObject *r = PyObject_CallMethod(g->vec, "render", "i", i);
  int rc = 0;
  int h = 0, w = 0;
  const char *bytes = NULL;
  Py_ssize_t len = 0;
  PyObject *b = NULL;
  if (r && PyTuple_Check(r) && PyArg_ParseTuple(r, "iiO", &h, &w, &b) &&
      PyBytes_AsStringAndSize(b, (char **)&bytes, &len) == 0) {
    if (h != g->spec.render_h || w != g->spec.render_w || len != (Py_ssize_t)h * w * 3)
      rc = shoal_error_set(err, SHOAL_EENV, "env '%s': a frame of %dx%d, the first was %dx%d",
                           g->id, w, h, g->spec.render_w, g->spec.render_h);
    else
      memcpy(rgb, bytes, (size_t)len);
    Py_DECREF(r);
  } else {
    rc = bridge_result(g, r, "render", err);
  }
  PyGILState_Release(st);
  return rc;
}

static int gym_get_state(void *self, int i, double *out, int cap, shoal_error *err) {
  gym_vec *g = self;
  PyGILState_STATE st = PyGILState_Ensure();
  PyObject *r = PyObject_CallMethod(g->vec, "get_state", "i", i);
  int rc;
  if (r && PyList_Check(r)) {
    Py_ssize_t n = PyList_Size(r);
    for (Py_ssize_t k = 0; k < n && k < cap; k++) out[k] = PyFloat_AsDouble(PyList_GetItem(r, k));
    rc = (int)n;
    Py_DECREF(r);
  } else if (r == Py_None) {
    Py_DECREF(r);
    rc = shoal_error_set(err, SHOAL_ENOTSUP, "env '%s' has no env.unwrapped.state", g->id);
  } else {
    rc = bridge_result(g, r, "get_state", err);
  }
  PyGILState_Release(st);
  return rc;
}

const env__backend env__gym_backend = {
    .prefix = "gym:",
    .create = gym_create,
    .destroy = gym_destroy,
    .reset = gym_reset,
    .step = gym_step,
    .render = gym_render,
    .get_state = gym_get_state,
};

const env__backend *env__backend_for(const char *id) {
  /* ALE games take the Atari path: the emulator through ale-py, the preprocessing in C */
  if (id && strncmp(id, env__atari_backend.prefix, strlen(env__atari_backend.prefix)) == 0)
    return &env__atari_backend;
  if (id && strncmp(id, env__gym_backend.prefix, strlen(env__gym_backend.prefix)) == 0)
    return &env__gym_backend;
  return NULL;
}

int env_gym_registered(char ***ids, int *n, shoal_error *err) {
  pthread_once(&py_once, py_start);
  if (py_rc) return shoal_error_set(err, py_rc, "gym: %s", py_msg);
  PyGILState_STATE st = PyGILState_Ensure();
  PyObject *r = PyObject_CallMethod(bridge, "registered", NULL);
  int rc = 0;
  Py_ssize_t k = r && PyList_Check(r) ? PyList_Size(r) : -1;
  char **out = k >= 0 ? calloc((size_t)k + 1, sizeof *out) : NULL;
  if (!out) {
    char line[300] = "out of memory";
    if (!r) env__py_error_line(line, sizeof line);
    rc = shoal_error_set(err, r ? SHOAL_ENOMEM : SHOAL_EINTERNAL, "gym: registry: %s", line);
  }
  for (Py_ssize_t i = 0; !rc && i < k; i++) {
    const char *s = PyUnicode_AsUTF8(PyList_GetItem(r, i));
    out[i] = strdup(s ? s : "?");
    if (!out[i]) rc = shoal_error_set(err, SHOAL_ENOMEM, "gym: registry: out of memory");
  }
  Py_XDECREF(r);
  PyGILState_Release(st);
  if (rc) {
    for (Py_ssize_t i = 0; out && i < k; i++) free(out[i]);
    free(out);
    return rc;
  }
  *ids = out;
  *n = (int)k;
  return 0;
}
