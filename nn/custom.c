/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/custom.c — nn's transparent backend: layers, activations and losses that users write
 * against nn/nn.h alone. A custom layer is a node of kind NN__CUSTOM (nn/model.c makes it
 * and its tensors); here are the call it gets on each backend, the CPU's layer ops, the
 * element-wise activations and losses built on it, the registry configs name layers
 * from, the plugin loader, and the gradient checker.
 */
#define _GNU_SOURCE /* realpath, strdup, dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"

/* ---- the call a custom layer gets -------------------------------------------------- */

void nn__custom_call(nn_model *m, nn__node *n, int B, float *params, float *grads, float *state,
                     nn_layer_call *c) {
  const nn__node *x = nn__input(m, n, 0);
  memset(c, 0, sizeof *c);
  c->config = n->cconf;
  c->name = n->name;
  c->B = B;
  c->in_C = x->C, c->in_H = x->H, c->in_W = x->W, c->in_F = x->F;
  c->C = n->C, c->H = n->H, c->W = n->W, c->F = n->F;
  c->x = x->out;
  c->y = n->out;
  for (int k = 0; k < n->c_n; k++) {
    if (n->ctrain[k]) {
      c->t[k] = params + n->poff[n->cslot[k]];
      c->g[k] = grads + n->poff[n->cslot[k]];
    } else {
      c->t[k] = state + n->soff[n->cslot[k]];
    }
  }
  c->cache = n->cache;
  c->training = n->fwd_training;
  c->rng = &m->rng;
}

void nn__custom_grad(nn_model *m, nn__node *n, nn_layer_call *c) {
  bool acc = false;
  c->dy = n->dout;
  c->dx = nn__dinput(m, n, 0, &acc);
  c->dx_add = c->dx && acc;
  c->rng = NULL; /* backward draws nothing: forward's draws are what it differentiates */
}

static int cpu_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  nn_layer_call c;
  nn__custom_call(m, n, B, m->params, m->grads, m->state, &c);
  shoal_error why = {0};
  int rc = n->ctype->forward(&c, &why);
  if (!rc) return 0;
  return shoal_error_set(err, rc, "nn: layer '%s' (%s): %s", n->name, n->ckind,
                         why.msg[0] ? why.msg : "its forward failed");
}

static void cpu_backward(nn_model *m, nn__node *n, int B) {
  nn_layer_call c;
  nn__custom_call(m, n, B, m->params, m->grads, m->state, &c);
  nn__custom_grad(m, n, &c);
  n->ctype->backward(&c);
}

const nn__layer_ops nn__cpu_custom = {cpu_forward, cpu_backward};

void nn_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
  if (M < 1 || N < 1 || K < 1 || !A || !B || !C) return;
  nn__sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ---- element-wise activations ------------------------------------------------------- */

typedef struct act_conf {
  const nn_activation_type *t;
  float alpha;
} act_conf;

static int act_shape(nn_layer_shape *s, shoal_error *err) {
  s->C = s->in_C, s->H = s->in_H, s->W = s->in_W;
  return 0;
}

static int act_forward(const nn_layer_call *c, shoal_error *err) {
  const act_conf *a = c->config;
  size_t n = (size_t)c->B * (size_t)c->F;
  for (size_t i = 0; i < n; i++) c->y[i] = a->t->f(c->x[i], a->alpha);
  return 0;
}

static void act_backward(const nn_layer_call *c) {
  const act_conf *a = c->config;
  if (!c->dx) return;
  size_t n = (size_t)c->B * (size_t)c->F;
  for (size_t i = 0; i < n; i++) {
    float g = c->dy[i] * a->t->df(c->x[i], c->y[i], a->alpha);
    c->dx[i] = c->dx_add ? c->dx[i] + g : g;
  }
}

static const nn_layer_type act_type = {
    .abi = NN_LAYER_ABI,
    .kind = "activation",
    .config_size = sizeof(act_conf),
    .shape = act_shape,
    .forward = act_forward,
    .backward = act_backward,
};

int nn_custom_activation(nn_model *m, const char *name, const nn_activation_type *type,
                         float alpha) {
  if (!m) return SHOAL_EINVAL;
  if (!type || type->abi != NN_LAYER_ABI || !type->kind || !*type->kind || !type->f ||
      !type->df) {
    char msg[200];
    snprintf(msg, sizeof msg,
             "nn: layer '%s': a custom activation needs abi NN_LAYER_ABI (%d; it says %d), a "
             "kind, f and df",
             name ? name : "?", NN_LAYER_ABI, type ? type->abi : -1);
    return nn__model_fail(m, SHOAL_EINVAL, msg);
  }
  act_conf a = {type, alpha};
  int id = nn_custom(m, name, &act_type, &a);
  if (id >= 0) m->nodes[id].ckind = type->kind;
  return id;
}

/* ---- element-wise losses ------------------------------------------------------------ */

int nn_custom_loss(const nn_loss_type *type, float *loss, float *dpred, const float *pred,
                   const float *target, const float *w, int B, int N, float param,
                   shoal_error *err) {
  if (!type || type->abi != NN_LAYER_ABI || !type->l || !type->dl)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "nn: custom loss: its type needs abi NN_LAYER_ABI and l, dl");
  const char *k = type->kind ? type->kind : "custom loss";
  if (!loss) return shoal_error_set(err, SHOAL_EINVAL, "nn: %s: NULL loss", k);
  int rc = nn__loss_check(k, pred, target, w, B, N, true, err);
  if (rc) return rc;
  double sum = 0;
  for (int i = 0; i < B; i++) {
    double s = 0;
    for (int j = 0; j < N; j++) {
      size_t q = (size_t)i * N + j;
      s += type->l(pred[q], target[q], param);
    }
    sum += (w ? w[i] : 1.0) * s;
  }
  double scale = 1.0 / ((double)B * N);
  float l;
  if ((rc = nn__loss_finish(k, sum * scale, &l, err))) return rc;
  if (dpred) {
    for (int i = 0; i < B; i++) {
      double c = scale * (w ? w[i] : 1.0);
      for (int j = 0; j < N; j++) {
        size_t q = (size_t)i * N + j;
        float g = (float)(c * type->dl(pred[q], target[q], param));
        if (!isfinite(g))
          return shoal_error_set(err, SHOAL_ENAN, "nn: %s: gradient at [%d, %d] is %g", k, i, j,
                                 (double)g);
        dpred[q] = g;
      }
    }
  }
  *loss = l;
  return 0;
}

/* ---- the registry and plugins --------------------------------------------------------- */

#define REG_MAX 256
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static const nn_layer_type *reg[REG_MAX];
static int n_reg;

int nn_layer_register(const nn_layer_type *type, shoal_error *err) {
  if (!type || type->abi != NN_LAYER_ABI || !type->shape || !type->forward || !type->backward)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "nn: register: a layer type needs abi NN_LAYER_ABI (%d, it says %d) "
                           "and shape, forward and backward functions",
                           NN_LAYER_ABI, type ? type->abi : -1);
  if (!nn__ident_ok(type->kind, 63))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "nn: register: kind '%s' is not 1-63 letters, digits or '_'",
                           type->kind ? type->kind : "(null)");
  int rc = 0;
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < n_reg; i++) {
    if (strcmp(reg[i]->kind, type->kind)) continue;
    if (reg[i] != type)
      rc = shoal_error_set(err, SHOAL_EEXIST,
                           "nn: register: another layer type is registered as '%s'", type->kind);
    pthread_mutex_unlock(&reg_mu);
    return rc;
  }
  if (n_reg == REG_MAX)
    rc = shoal_error_set(err, SHOAL_ENOMEM, "nn: register: %d layer types already", REG_MAX);
  else
    reg[n_reg++] = type;
  pthread_mutex_unlock(&reg_mu);
  return rc;
}

const nn_layer_type *nn_layer_find(const char *kind) {
  const nn_layer_type *t = NULL;
  if (!kind) return NULL;
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < n_reg && !t; i++)
    if (!strcmp(reg[i]->kind, kind)) t = reg[i];
  pthread_mutex_unlock(&reg_mu);
  return t;
}

size_t nn_layer_kinds(char *buf, size_t n) {
  size_t k = 0;
  char nil[1];
  if (!buf) buf = nil, n = 0; /* a length query */
  if (n) buf[0] = '\0';
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < n_reg; i++) {
    int w = snprintf(buf + (k < n ? k : n), k < n ? n - k : 0, "%s%s", i ? ", " : "",
                     reg[i]->kind);
    if (w > 0) k += (size_t)w;
  }
  pthread_mutex_unlock(&reg_mu);
  return k;
}

typedef int (*plugin_init_fn)(int abi, shoal_error *err);

#define PLUGINS_MAX 32
static char *loaded[PLUGINS_MAX]; /* real paths of the libraries loaded, which stay loaded */
static int n_loaded;

int nn_layer_plugin_load(const char *path, shoal_error *err) {
  if (!path || !*path) return shoal_error_set(err, SHOAL_EINVAL, "nn: layer plugin: no path");
  char real[PATH_MAX];
  if (!realpath(path, real))
    return shoal_error_set(err, SHOAL_ENOENT, "nn: layer plugin %s: %s", path, strerror(errno));
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < n_loaded; i++)
    if (!strcmp(loaded[i], real)) {
      pthread_mutex_unlock(&reg_mu);
      return 0;
    }
  bool full = n_loaded == PLUGINS_MAX;
  pthread_mutex_unlock(&reg_mu);
  if (full) return shoal_error_set(err, SHOAL_ENOMEM, "nn: layer plugin %s: too many", path);
  /* The plugin takes nn's functions from whatever loaded nn. A program exports them
   * (ENABLE_EXPORTS); libshoal.so loaded RTLD_LOCAL (Python's ctypes) does not, so it
   * is made global first, or the plugin's nn_layer_register would not resolve. */
  Dl_info self;
  if (dladdr((void *)nn_layer_plugin_load, &self) && self.dli_fname)
    (void)dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  void *h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (!h) return shoal_error_set(err, SHOAL_EINVAL, "nn: layer plugin %s: %s", path, dlerror());
  plugin_init_fn init;
  *(void **)&init = dlsym(h, "shoal_nn_plugin_init");
  if (!init) {
    dlclose(h);
    return shoal_error_set(err, SHOAL_EINVAL,
                           "nn: layer plugin %s exports no shoal_nn_plugin_init (see "
                           "docs/custom-layers.md)",
                           path);
  }
  shoal_error why = {0};
  int rc = init(NN_LAYER_ABI, &why);
  if (rc) {
    /* what it registered may be in the registry: the library stays loaded */
    return shoal_error_set(err, rc, "nn: layer plugin %s: %s", path,
                           why.msg[0] ? why.msg : "its init failed");
  }
  pthread_mutex_lock(&reg_mu);
  if (n_loaded < PLUGINS_MAX && (loaded[n_loaded] = strdup(real))) n_loaded++;
  pthread_mutex_unlock(&reg_mu);
  return 0;
}

int nn_layer_plugins_load(const char *paths, shoal_error *err) {
  if (!paths || !*paths) return 0;
  char *copy = strdup(paths), *save = NULL;
  if (!copy) return shoal_error_set(err, SHOAL_ENOMEM, "nn: layer plugins: out of memory");
  int rc = 0;
  for (char *p = strtok_r(copy, ":", &save); p && !rc; p = strtok_r(NULL, ":", &save))
    rc = nn_layer_plugin_load(p, err);
  free(copy);
  return rc;
}

int nn_layer_dense_kind(const char *kind, const char *plugins, const nn_layer_type **type,
                        shoal_error *err) {
  *type = NULL;
  int rc = nn_layer_plugins_load(plugins, err);
  if (rc || !kind || !*kind || !strcmp(kind, "dense")) return rc;
  const nn_layer_type *t = nn_layer_find(kind);
  if (!t) {
    char kinds[512];
    nn_layer_kinds(kinds, sizeof kinds);
    return shoal_error_set(err, SHOAL_ENOENT,
                           "layer '%s' is not a registered layer (registered: %s); name the "
                           "plugin that registers it in nn.plugins",
                           kind, kinds[0] ? kinds : "none");
  }
  if (!t->dense_config)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "layer '%s' has no dense_config, so it cannot stand where a dense "
                           "layer goes",
                           kind);
  *type = t;
  return 0;
}

int nn_dense_as(nn_model *m, const char *name, int out_features, const nn_layer_type *type) {
  if (!type) return nn_dense(m, name, out_features);
  if (!m) return SHOAL_EINVAL;
  if (!type->dense_config) return nn__model_fail(m, SHOAL_EINVAL, "nn: the type has no dense_config");
  void *conf = calloc(1, type->config_size ? type->config_size : 1);
  if (!conf) return nn__model_fail(m, SHOAL_ENOMEM, "nn: out of memory");
  shoal_error why = {0};
  int rc = type->dense_config(conf, out_features, &why);
  if (rc) {
    char msg[1024];
    snprintf(msg, sizeof msg, "nn: layer '%.128s' (%.64s): %.400s", name ? name : "?", type->kind,
             why.msg[0] ? why.msg : "its dense_config failed");
    rc = nn__model_fail(m, rc, msg);
  } else {
    rc = nn_custom(m, name, type, conf);
  }
  free(conf);
  return rc;
}

/* ---- the gradient checker ------------------------------------------------------------ */

/* L = sum(y * r) in double, from a forward that sees the same random draws each time. */
static int proj_loss(nn_model *m, const float *x, int B, const float *r, const shoal_rng *rng0,
                     double *L, shoal_error *err) {
  m->rng = *rng0;
  const float *y;
  int rc = nn_model_forward(m, x, B, &y, err);
  if (rc) return rc;
  size_t ny = (size_t)B * (size_t)m->nodes[m->output].F;
  double s = 0;
  for (size_t i = 0; i < ny; i++) s += (double)y[i] * r[i];
  *L = s;
  return 0;
}

/* Distinct coordinates of [0, n): all of them when want < 0 or want >= n. */
static size_t pick(size_t n, int want, shoal_rng *rng, size_t *out) {
  if (want < 0 || (size_t)want >= n) {
    for (size_t i = 0; i < n; i++) out[i] = i;
    return n;
  }
  size_t k = 0;
  while (k < (size_t)want) {
    size_t c = (size_t)(shoal_rng_next(rng) % n);
    bool dup = false;
    for (size_t j = 0; j < k && !dup; j++) dup = out[j] == c;
    if (!dup) out[k++] = c;
  }
  return k;
}

int nn_check_gradients(nn_model *m, const float *x, int B, const nn_gradcheck_options *o,
                       nn_gradcheck_report *report, shoal_error *err) {
  nn_gradcheck_options opt = o ? *o : (nn_gradcheck_options){0};
  if (opt.eps <= 0) opt.eps = 1e-2f;
  if (opt.tol <= 0) opt.tol = 1e-2f;
  if (!opt.per_tensor) opt.per_tensor = 24;
  if (!opt.seed) opt.seed = 1;
  nn_gradcheck_report rep = {0};
  if (!m || !x) return shoal_error_set(err, SHOAL_EINVAL, "nn: gradcheck: model or x is NULL");
  if (!m->built) return shoal_error_set(err, SHOAL_ESTATE, "nn: gradcheck: the model is not built");
  if (m->device != NN_CPU)
    return shoal_error_set(err, SHOAL_ENOTSUP,
                           "nn: gradcheck: runs on CPU models (check the layer there, then its "
                           "CUDA functions against the CPU's)");
  if (B < 1 || B > m->max_batch)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: gradcheck: batch %d is outside [1, %d]", B,
                           m->max_batch);
  size_t nx = (size_t)B * (size_t)m->nodes[0].F;
  size_t ny = (size_t)B * (size_t)m->nodes[m->output].F; /* build set the output */
  size_t biggest = nx;
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].trainable && m->tensors[i].numel > biggest) biggest = m->tensors[i].numel;
  float *xb = malloc(nx * sizeof *xb), *r = malloc(ny * sizeof *r);
  float *g0 = malloc((m->n_params ? m->n_params : 1) * sizeof *g0);
  float *ga = malloc((m->n_params ? m->n_params : 1) * sizeof *ga);
  float *s0 = malloc((m->n_state ? m->n_state : 1) * sizeof *s0);
  float *dxa = malloc(nx * sizeof *dxa);
  size_t *idx = malloc(biggest * sizeof *idx);
  int rc = 0;
  if (!xb || !r || !g0 || !ga || !s0 || !dxa || !idx) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "nn: gradcheck: out of memory");
    goto out;
  }
  memcpy(xb, x, nx * sizeof *xb);
  memcpy(g0, m->grads, m->n_params * sizeof *g0);
  memcpy(s0, m->state, m->n_state * sizeof *s0);
  shoal_rng pr, rng0 = m->rng;
  shoal_rng_seed(&pr, opt.seed);
  for (size_t i = 0; i < ny; i++) r[i] = (float)shoal_rng_normal(&pr);

  /* the analytic gradients */
  double L;
  if ((rc = proj_loss(m, xb, B, r, &rng0, &L, err))) goto restore;
  nn_model_zero_grad(m);
  const float *dx = NULL;
  if ((rc = nn_model_backward(m, r, opt.skip_input ? NULL : &dx, err))) goto restore;
  memcpy(ga, m->grads, m->n_params * sizeof *ga);
  if (dx) memcpy(dxa, dx, nx * sizeof *dxa);

  /* the numeric ones, a coordinate at a time; batch norm's statistics are put back
   * after each forward so every one sees the same state */
  for (int ti = -1; ti < m->n_tensors; ti++) {
    float *base;
    const float *an;
    size_t n;
    char what[160];
    if (ti < 0) {
      if (opt.skip_input) continue;
      base = xb, an = dxa, n = nx;
      snprintf(what, sizeof what, "input");
    } else {
      const nn__tensor *t = &m->tensors[ti];
      if (!t->trainable) continue;
      base = m->params + t->offset, an = ga + t->offset, n = t->numel;
      snprintf(what, sizeof what, "%s", t->name);
    }
    size_t k = pick(n, opt.per_tensor, &pr, idx);
    for (size_t q = 0; q < k; q++) {
      size_t i = idx[q];
      float keep = base[i];
      double lp, lm;
      base[i] = keep + opt.eps;
      rc = proj_loss(m, xb, B, r, &rng0, &lp, err);
      memcpy(m->state, s0, m->n_state * sizeof *s0);
      base[i] = keep - opt.eps;
      if (!rc) rc = proj_loss(m, xb, B, r, &rng0, &lm, err);
      memcpy(m->state, s0, m->n_state * sizeof *s0);
      base[i] = keep;
      if (rc) goto restore;
      double num = (lp - lm) / (2.0 * (double)opt.eps);
      double d = fabs((double)an[i] - num) / (1.0 + fabs(num));
      rep.checked++;
      if (d > opt.tol) rep.failed++;
      if (d > rep.worst || rep.checked == 1) {
        rep.worst = d;
        snprintf(rep.worst_where, sizeof rep.worst_where, "%.140s[%zu]", what, i);
      }
    }
  }
  if (rep.failed)
    rc = shoal_error_set(err, SHOAL_ERANGE,
                         "nn: gradcheck: %d of %d gradients differ from finite differences; "
                         "worst %s, |analytic - numeric| / (1 + |numeric|) = %.3g > %.3g",
                         rep.failed, rep.checked, rep.worst_where, rep.worst, (double)opt.tol);

restore:
  memcpy(m->grads, g0, m->n_params * sizeof *g0);
  memcpy(m->state, s0, m->n_state * sizeof *s0);
  m->rng = rng0;
  m->B = 0; /* the last forward was a probe: nothing to go back through */
out:
  free(xb), free(r), free(g0), free(ga), free(s0), free(dxa), free(idx);
  if (report) *report = rep;
  return rc;
}
