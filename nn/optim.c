/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/optim.c — SGD, Adam, AdamW and RMSprop as torch.optim (1.13) computes them, one
 * loop over the flat parameter buffer with the moments in buffers of the same layout.
 *
 * Each step first sums the squared gradient in double: that gives the global norm for
 * clipping (torch.nn.utils.clip_grad_norm_) and, in the same pass, detects a NaN or an
 * infinity, in which case the step is skipped and nothing changes. Per-element
 * arithmetic is float in torch's order; scalars (bias corrections, step sizes) are
 * computed in double as torch's Python code does.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cpu/cpu.h"
#include "nn/internal.h"
#include "nn/nn.h"
#include "nn/safetensors.h"

struct nn_optim {
  nn_optim_config cfg;
  float *params; /* (n,), borrowed from the model or the caller */
  float *grads;  /* (n,), borrowed */
  size_t n;
  float *mom;        /* one allocation holding the buffers below */
  float *buf;        /* (n,) sgd momentum, rmsprop momentum; NULL when unused */
  float *exp_avg;    /* (n,) adam m, rmsprop centered grad average */
  float *exp_avg_sq; /* (n,) adam v, rmsprop square average */
  long step;         /* steps taken (skipped steps not counted) */
  float last_norm;
  nn_model *dm;       /* a model whose backend steps on its device, else NULL */
  nn__optim_dev *dev; /* its moments on the device; mom above is their host copy */
};

nn_optim_config nn_optim_defaults(nn_optim_kind kind) {
  nn_optim_config c;
  memset(&c, 0, sizeof c);
  c.kind = kind;
  c.beta1 = 0.9f;
  c.beta2 = 0.999f;
  c.eps = 1e-8f;
  c.alpha = 0.99f;
  switch (kind) {
    case NN_SGD: c.lr = 0.01f; break;
    case NN_ADAM: c.lr = 1e-3f; break;
    case NN_ADAMW:
      c.lr = 1e-3f;
      c.weight_decay = 0.01f;
      break;
    case NN_RMSPROP: c.lr = 0.01f; break;
  }
  return c;
}

static int check_config(const nn_optim_config *c, shoal_error *err) {
  const char *names[] = {"sgd", "adam", "adamw", "rmsprop"};
  if ((unsigned)c->kind > NN_RMSPROP)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: optimizer: unknown kind %d", (int)c->kind);
  const char *k = names[c->kind];
#define BAD(cond, ...) \
  if (cond) return shoal_error_set(err, SHOAL_EINVAL, __VA_ARGS__)
  BAD(!(c->lr >= 0) || !isfinite(c->lr), "nn: %s: lr %g must be finite and >= 0", k, (double)c->lr);
  BAD(!(c->weight_decay >= 0) || !isfinite(c->weight_decay),
      "nn: %s: weight_decay %g must be finite and >= 0", k, (double)c->weight_decay);
  BAD(!(c->clip_norm >= 0) || !isfinite(c->clip_norm), "nn: %s: clip_norm %g must be >= 0", k,
      (double)c->clip_norm);
  BAD(!(c->momentum >= 0 && c->momentum < 1) && c->kind != NN_ADAM && c->kind != NN_ADAMW,
      "nn: %s: momentum %g must be in [0, 1)", k, (double)c->momentum);
  if (c->kind == NN_SGD) {
    BAD(!(c->dampening >= 0 && c->dampening <= 1), "nn: sgd: dampening %g must be in [0, 1]",
        (double)c->dampening);
    BAD(c->nesterov && (c->momentum <= 0 || c->dampening != 0),
        "nn: sgd: nesterov needs momentum > 0 and dampening 0 (momentum %g, dampening %g)",
        (double)c->momentum, (double)c->dampening);
  }
  if (c->kind == NN_ADAM || c->kind == NN_ADAMW) {
    BAD(!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1),
        "nn: %s: betas (%g, %g) must be in [0, 1)", k, (double)c->beta1, (double)c->beta2);
  }
  if (c->kind != NN_SGD)
    BAD(!(c->eps >= 0) || !isfinite(c->eps), "nn: %s: eps %g must be finite and >= 0", k,
        (double)c->eps);
  if (c->kind == NN_RMSPROP)
    BAD(!(c->alpha >= 0 && c->alpha <= 1), "nn: rmsprop: alpha %g must be in [0, 1]",
        (double)c->alpha);
#undef BAD
  return 0;
}

nn_optim *nn_optim_create_buffers(float *params, float *grads, size_t n, const nn_optim_config *cfg,
                                  shoal_error *err) {
  if (!params || !grads || !cfg || n == 0) {
    shoal_error_set(err, SHOAL_EINVAL, "nn: optimizer: NULL buffers or config, or no parameters");
    return NULL;
  }
  if (check_config(cfg, err)) return NULL;
  int nbuf = 0;
  bool use_buf = cfg->momentum > 0 && (cfg->kind == NN_SGD || cfg->kind == NN_RMSPROP);
  bool use_avg =
      cfg->kind == NN_ADAM || cfg->kind == NN_ADAMW || (cfg->kind == NN_RMSPROP && cfg->centered);
  bool use_sq = cfg->kind != NN_SGD;
  nbuf = use_buf + use_avg + use_sq;
  nn_optim *o = calloc(1, sizeof *o);
  if (!o) goto nomem;
  o->cfg = *cfg;
  o->params = params;
  o->grads = grads;
  o->n = n;
  if (nbuf) {
    if (n > SIZE_MAX / sizeof(float) / (size_t)nbuf) goto nomem;
    o->mom = calloc((size_t)nbuf * n, sizeof(float));
    if (!o->mom) goto nomem;
    float *p = o->mom;
    if (use_buf) o->buf = p, p += n;
    if (use_avg) o->exp_avg = p, p += n;
    if (use_sq) o->exp_avg_sq = p;
  }
  return o;
nomem:
  free(o);
  shoal_error_set(err, SHOAL_ENOMEM, "nn: optimizer: cannot allocate moments for %zu parameters",
                  n);
  return NULL;
}

nn_optim *nn_optim_create(nn_model *m, const nn_optim_config *cfg, shoal_error *err) {
  if (!m) {
    shoal_error_set(err, SHOAL_EINVAL, "nn: optimizer: NULL model");
    return NULL;
  }
  size_t n = 0, ng = 0;
  float *p = nn_model_params(m, &n), *g = nn_model_grads(m, &ng);
  if (!p || !g || n != ng) {
    shoal_error_set(err, SHOAL_ESTATE,
                    "nn: optimizer: the model is not built or has no parameters");
    return NULL;
  }
  nn_optim *o = nn_optim_create_buffers(p, g, n, cfg, err);
  if (o && m->be->optim_create) {
    size_t nbuf = (o->buf != NULL) + (o->exp_avg != NULL) + (o->exp_avg_sq != NULL);
    o->dm = m;
    o->dev = m->be->optim_create(m, nbuf, err);
    if (!o->dev) {
      nn_optim_destroy(o);
      return NULL;
    }
  }
  return o;
}

void nn_optim_destroy(nn_optim *o) {
  if (!o) return;
  if (o->dev) o->dm->be->optim_destroy(o->dev);
  free(o->mom);
  free(o);
}

void nn_optim_set_lr(nn_optim *o, float lr) { o->cfg.lr = lr; }
float nn_optim_lr(const nn_optim *o) { return o->cfg.lr; }
float nn_optim_last_grad_norm(const nn_optim *o) { return o->last_norm; }
long nn_optim_steps(const nn_optim *o) { return o->step; }

void nn_optim_reset(nn_optim *o) {
  if (o->mom) {
    size_t nbuf = (o->buf != NULL) + (o->exp_avg != NULL) + (o->exp_avg_sq != NULL);
    memset(o->mom, 0, nbuf * o->n * sizeof(float));
  }
  o->step = 0;
  if (o->dev) o->dm->be->optim_set(o->dev, o->mom, NULL); /* failures show at the next step */
}

/* The slot of a moment buffer in the device's copy of mom (-1: unused). */
static int slot(const nn_optim *o, const float *b) { return b ? (int)((b - o->mom) / o->n) : -1; }

/* The loops over the whole buffer are NN__CLONES (nn/cpu/cpu.h): AVX-512, AVX2 and
 * baseline x86-64 copies, chosen at load time. Same operations in the same order in all
 * (no FMA contraction in ISO C mode), so the results are identical. */

/* The buffer is walked in chunks of this many elements, run on nn's threads when there
 * are two or more: the split does not depend on the thread count, so neither does any
 * result (the norm's chunk sums are added in chunk order). */
#define OPT_CHUNK ((size_t)32768)

static size_t n_chunks(size_t n) { return n ? (n + OPT_CHUNK - 1) / OPT_CHUNK : 0; }

/* Chunk t of an n-element buffer: its first element, and its length in *len. */
static size_t chunk_at(size_t n, int t, size_t *len) {
  size_t lo = (size_t)t * OPT_CHUNK;
  *len = n - lo < OPT_CHUNK ? n - lo : OPT_CHUNK;
  return lo;
}

/* Runs fn over the chunks of an n-element buffer: on nn's threads when there are two or
 * more chunks and threads, else in order on the caller's. */
static void over_chunks(size_t n, void (*fn)(void *, int, int), void *ctx) {
  size_t c = n_chunks(n);
  if (c > 1 && nn__cpu_threads() > 1 && c <= (size_t)INT32_MAX) {
    nn__parallel_for((int)c, fn, ctx);
    return;
  }
  for (size_t t = 0; t < c; t++) fn(ctx, (int)t, 0);
}

/* Eight partial sums: the loop vectorises and rounding grows slower. */
NN__CLONES static double sum_squares_1(const float *restrict g, size_t n) {
  double s[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) s[k] += (double)g[i + k] * g[i + k];
  for (; i < n; i++) s[0] += (double)g[i] * g[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

enum { SQ_GROUP = 64 }; /* chunks summed per round: their sums fit on the stack */

typedef struct sq_job {
  const float *g;
  size_t n;
  double part[SQ_GROUP];
} sq_job;

static void sq_task(void *ctx, int task, int thread) {
  (void)thread;
  sq_job *j = ctx;
  size_t len, lo = chunk_at(j->n, task, &len);
  j->part[task] = sum_squares_1(j->g + lo, len);
}

/* The chunks' sums in chunk order, SQ_GROUP chunks a round (no allocation per step). */
static double sum_squares(const float *g, size_t n) {
  const size_t group = SQ_GROUP * OPT_CHUNK;
  double s = 0;
  for (size_t off = 0; off < n; off += group) {
    sq_job j = {.g = g + off, .n = n - off < group ? n - off : group};
    over_chunks(j.n, sq_task, &j);
    for (size_t t = 0, c = n_chunks(j.n); t < c; t++) s += j.part[t];
  }
  return s;
}

/* torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1, multiplied in. A
 * non-finite norm leaves g as it is (torch would spread the NaN over every gradient). */
static void scale_to(float *g, size_t n, float norm, float max_norm) {
  float coef = max_norm / (norm + 1e-6f);
  if (coef < 1.0f)
    for (size_t i = 0; i < n; i++) g[i] *= coef;
}

float nn_clip_grad_norm(float *g, size_t n, float max_norm) {
  float norm = (float)sqrt(sum_squares(g, n));
  if (isfinite(norm) && max_norm >= 0) scale_to(g, n, norm, max_norm);
  return norm;
}

/* torch: d = g + wd p; buf = d on the first step, else mu buf + (1 - dampening) d;
 * d = d + mu buf (nesterov) or buf; p -= lr d. One loop per case, so each vectorises. */
NN__CLONES static void step_sgd(nn_optim *o) {
  const nn_optim_config *c = &o->cfg;
  float *restrict p = o->params, *restrict buf = o->buf;
  const float *restrict g = o->grads;
  float lr = c->lr, wd = c->weight_decay, mu = c->momentum, damp = 1.0f - c->dampening;
  size_t n = o->n;
  if (!buf) {
    for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]); /* wd = 0 adds nothing */
  } else if (o->step == 0) {
    for (size_t i = 0; i < n; i++) {
      float d = g[i] + wd * p[i];
      buf[i] = d;
      p[i] -= lr * (c->nesterov ? d + mu * d : d);
    }
  } else if (c->nesterov) {
    for (size_t i = 0; i < n; i++) {
      float d = g[i] + wd * p[i];
      float b = mu * buf[i] + damp * d;
      buf[i] = b;
      p[i] -= lr * (d + mu * b);
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      float d = g[i] + wd * p[i];
      float b = mu * buf[i] + damp * d;
      buf[i] = b;
      p[i] -= lr * b;
    }
  }
}

typedef struct adam_k {
  float *p, *m, *v;
  const float *g;
  size_t n;
  float step_size, inv_bc2_sqrt, b1, b2, eps, one_b1, one_b2, wd, shrink;
} adam_k;

NN__CLONES static void adam_range(const adam_k *k, size_t lo, size_t hi) {
  float *restrict p = k->p, *restrict m = k->m, *restrict v = k->v;
  const float *restrict g = k->g;
  const float step_size = k->step_size, inv_bc2_sqrt = k->inv_bc2_sqrt, b1 = k->b1, b2 = k->b2;
  const float eps = k->eps, one_b1 = k->one_b1, one_b2 = k->one_b2, wd = k->wd;
  const float shrink = k->shrink;
  for (size_t i = lo; i < hi; i++) {
    float pi = p[i] * shrink;
    float gi = g[i] + wd * pi;
    float mi = b1 * m[i] + one_b1 * gi;
    float vi = b2 * v[i] + one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    /* torch divides by sqrt(bc2); the product by its inverse (rounded once, in double)
     * differs by an ulp and leaves one division, not two, beside the square root: the
     * divider was the loop's bound (MinAtar's 132K parameters 61 -> 45 us). */
    float denom = sqrtf(vi) * inv_bc2_sqrt + eps;
    p[i] = pi - step_size * (mi / denom);
  }
}

static void adam_task(void *ctx, int task, int thread) {
  (void)thread;
  const adam_k *k = ctx;
  size_t len, lo = chunk_at(k->n, task, &len);
  adam_range(k, lo, lo + len);
}

/* Branch-free over the buffer so that it vectorises (nn/CMakeLists.txt builds nn
 * with -O3 -fno-math-errno): Adam adds wd * p to the gradient, AdamW shrinks p by
 * 1 - lr wd first (Loshchilov & Hutter 2019); a zero factor changes nothing, exactly.
 * Element by element, so the chunks may run on any thread. */
static void step_adam(nn_optim *o) {
  const nn_optim_config *c = &o->cfg;
  double t = (double)(o->step + 1);
  double bc1 = 1.0 - pow((double)c->beta1, t), bc2 = 1.0 - pow((double)c->beta2, t);
  bool decoupled = c->kind == NN_ADAMW;
  adam_k k = {
      .p = o->params,
      .m = o->exp_avg,
      .v = o->exp_avg_sq,
      .g = o->grads,
      .n = o->n,
      .step_size = (float)((double)c->lr / bc1),
      .inv_bc2_sqrt = (float)(1.0 / sqrt(bc2)),
      .b1 = c->beta1,
      .b2 = c->beta2,
      .eps = c->eps,
      .one_b1 = 1.0f - c->beta1,
      .one_b2 = 1.0f - c->beta2,
      .wd = decoupled ? 0.0f : c->weight_decay,
      .shrink = decoupled ? (float)(1.0 - (double)c->lr * c->weight_decay) : 1.0f,
  };
  over_chunks(o->n, adam_task, &k);
}

NN__CLONES static void step_rmsprop(nn_optim *o) {
  const nn_optim_config *c = &o->cfg;
  float *restrict p = o->params, *restrict sq = o->exp_avg_sq, *restrict ga = o->exp_avg;
  float *restrict buf = o->buf;
  const float *g = o->grads;
  float lr = c->lr, wd = c->weight_decay, a = c->alpha, one_a = 1.0f - c->alpha;
  float eps = c->eps, mu = c->momentum;
  for (size_t i = 0; i < o->n; i++) {
    float gi = g[i] + wd * p[i];
    float s = a * sq[i] + one_a * gi * gi;
    sq[i] = s;
    float var = s;
    if (ga) {
      float gm = a * ga[i] + one_a * gi;
      ga[i] = gm;
      var = s - gm * gm;
      if (var < 0) var = 0; /* rounding; mathematically var >= 0 */
    }
    float avg = sqrtf(var) + eps;
    if (buf) {
      float b = mu * buf[i] + gi / avg;
      buf[i] = b;
      p[i] -= lr * b;
    } else {
      p[i] -= lr * (gi / avg);
    }
  }
}

int nn_optim_step(nn_optim *o, shoal_error *err) {
  if (!(o->cfg.lr >= 0) || !isfinite(o->cfg.lr)) /* set_lr from a broken schedule */
    return shoal_error_set(err, SHOAL_EINVAL, "nn: optimizer: lr %g must be finite and >= 0",
                           (double)o->cfg.lr);
  if (o->dev) {
    bool skipped = false;
    float dnorm = 0;
    int rc = o->dm->be->optim_step(o->dev, &o->cfg, o->step, slot(o, o->buf), slot(o, o->exp_avg),
                                   slot(o, o->exp_avg_sq), &dnorm, &skipped, err);
    if (rc) return rc;
    o->last_norm = dnorm;
    if (skipped)
      return shoal_error_set(err, SHOAL_ENAN,
                             "nn: optimizer: gradient norm is %g on the device; step skipped, "
                             "parameters kept",
                             (double)dnorm);
    o->step++;
    o->dm->host_stale = true;
    return 0;
  }
  float norm = (float)sqrt(sum_squares(o->grads, o->n));
  o->last_norm = norm;
  if (!isfinite(norm)) {
    size_t i = 0;
    while (i < o->n && isfinite(o->grads[i])) i++;
    if (i == o->n)
      return shoal_error_set(err, SHOAL_ENAN,
                             "nn: optimizer: gradient norm overflows float; step skipped");
    return shoal_error_set(err, SHOAL_ENAN,
                           "nn: optimizer: gradient[%zu] is %g; step skipped, parameters kept", i,
                           (double)o->grads[i]);
  }
  if (o->cfg.clip_norm > 0) scale_to(o->grads, o->n, norm, o->cfg.clip_norm);
  switch (o->cfg.kind) {
    case NN_SGD: step_sgd(o); break;
    case NN_ADAM:
    case NN_ADAMW: step_adam(o); break;
    case NN_RMSPROP: step_rmsprop(o); break;
  }
  o->step++;
  return 0;
}

/* ---- optimizer checkpoints ------------------------------------------------------------- */

static const char *kind_name(nn_optim_kind k) {
  static const char *names[] = {"sgd", "adam", "adamw", "rmsprop"};
  return (unsigned)k <= NN_RMSPROP ? names[k] : "unknown";
}

/* The table of o's state under torch.optim's names; step points to a copy of the
 * step count. Returns the number of tensors. */
static int optim_table(const nn_optim *o, nn__st_tensor t[4], int64_t *step) {
  int n = 0;
  bool rms = o->cfg.kind == NN_RMSPROP;
  struct {
    float *buf;
    const char *name;
  } bufs[3] = {
      {o->buf, "momentum_buffer"},
      {o->exp_avg, rms ? "grad_avg" : "exp_avg"},
      {o->exp_avg_sq, rms ? "square_avg" : "exp_avg_sq"},
  };
  for (int i = 0; i < 3; i++) {
    if (!bufs[i].buf) continue;
    memset(&t[n], 0, sizeof t[n]);
    t[n].name = bufs[i].name;
    t[n].ndim = 1;
    t[n].shape[0] = (int)o->n;
    t[n].numel = o->n;
    t[n].f32 = bufs[i].buf;
    n++;
  }
  memset(&t[n], 0, sizeof t[n]);
  t[n].name = "step";
  t[n].ndim = 0;
  t[n].numel = 1;
  t[n].i64 = step;
  return n + 1;
}

int nn_optim_save_buffer(const nn_optim *o, uint8_t **buf, size_t *len, shoal_error *err) {
  if (!o || !buf || !len)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: optimizer save: NULL argument");
  if (o->n > INT32_MAX)
    return shoal_error_set(err, SHOAL_ENOTSUP, "nn: optimizer save: %zu parameters", o->n);
  if (o->dev) {
    int rc = o->dm->be->optim_get(o->dev, o->mom, err);
    if (rc) return rc;
  }
  nn__st_tensor t[4];
  int64_t step = o->step;
  int n = optim_table(o, t, &step);
  const char *meta[] = {"format", "shoal-optim", "kind", kind_name(o->cfg.kind)};
  return nn__st_save_buffer(t, n, meta, 2, buf, len, err);
}

static int optim_load(nn_optim *o, const uint8_t *buf, size_t len, const char *src,
                      shoal_error *err) {
  if (!o || !buf) return shoal_error_set(err, SHOAL_EINVAL, "nn: optimizer load: NULL argument");
  if (o->n > INT32_MAX)
    return shoal_error_set(err, SHOAL_ENOTSUP, "nn: optimizer load: %zu parameters", o->n);
  nn__st_tensor t[4];
  int64_t step = -1;
  int n = optim_table(o, t, &step);
  /* The reader changes nothing on error: start from the device's current moments. */
  if (o->dev) {
    int rc = o->dm->be->optim_get(o->dev, o->mom, err);
    if (rc) return rc;
  }
  int rc = nn__st_load_buffer(t, n, "optimizer", buf, len, src, NULL, err);
  if (rc) return rc;
  o->step = (long)step; /* >= 0, checked by the reader */
  if (o->dev) return o->dm->be->optim_set(o->dev, o->mom, err);
  return 0;
}

int nn_optim_load_buffer(nn_optim *o, const uint8_t *buf, size_t len, shoal_error *err) {
  return optim_load(o, buf, len, "buffer", err);
}

int nn_optim_save(const nn_optim *o, const char *path, shoal_error *err) {
  if (!path) return shoal_error_set(err, SHOAL_EINVAL, "nn: optimizer save: NULL path");
  uint8_t *buf = NULL;
  size_t len = 0;
  int rc = nn_optim_save_buffer(o, &buf, &len, err);
  if (!rc) rc = nn__st_write_file(path, buf, len, err);
  free(buf);
  return rc;
}

int nn_optim_load(nn_optim *o, const char *path, shoal_error *err) {
  if (!path || !o) return shoal_error_set(err, SHOAL_EINVAL, "nn: optimizer load: NULL argument");
  uint8_t *buf = NULL;
  size_t len = 0;
  int rc = nn__st_read_file(path, &buf, &len, err);
  if (!rc) rc = optim_load(o, buf, len, path, err);
  free(buf);
  return rc;
}
