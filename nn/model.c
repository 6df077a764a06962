/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/model.c — the model: a graph of nodes built in order, its tensor table, one
 * parameter buffer, one gradient buffer and one state buffer, the activation arena,
 * and the forward and backward drivers that call the backend's layer kernels.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/internal.h"

static const char *const kind_names[NN__KIND_COUNT] = {
    [NN__INPUT] = "input",
    [NN__DENSE] = "dense",
    [NN__CONV] = "conv2d",
    [NN__CONVT] = "conv_transpose2d",
    [NN__MAXPOOL] = "maxpool2d",
    [NN__AVGPOOL] = "avgpool2d",
    [NN__BATCHNORM] = "batchnorm",
    [NN__LAYERNORM] = "layernorm",
    [NN__DROPOUT] = "dropout",
    [NN__FLATTEN] = "flatten",
    [NN__RESHAPE] = "reshape",
    [NN__EMBEDDING] = "embedding",
    [NN__ACT] = "activation",
    [NN__LSTM] = "lstm_cell",
    [NN__GRU] = "gru_cell",
    [NN__SLICE] = "slice",
    [NN__ADD] = "add",
    [NN__CONCAT] = "concat",
    [NN__MUL] = "mul",
    [NN__CUSTOM] = "custom",
};

/* ---- errors ------------------------------------------------------------------- */

/* Records a failed layer-adding call (the first one is what build reports) and
 * returns code. */
__attribute__((format(printf, 3, 4))) static int model_fail(nn_model *m, int code, const char *fmt,
                                                            ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->last_msg, sizeof m->last_msg, fmt, ap);
  va_end(ap);
  if (!m->err_code) {
    m->err_code = code;
    memcpy(m->err_msg, m->last_msg, sizeof m->err_msg);
  }
  return code;
}

const char *nn_model_error(const nn_model *m) { return m ? m->last_msg : ""; }

int nn__model_fail(nn_model *m, int code, const char *what) {
  return model_fail(m, code, "%s", what);
}

/* ---- create / destroy ----------------------------------------------------------- */

nn_model *nn_model_create(nn_device device, shoal_error *err) {
  shoal_error why = {0};
  const nn__backend *be = nn__backend_get(device, &why);
  if (!be) {
    shoal_error_set(err, why.code, "nn: cannot create a model: %s", why.msg + 4); /* past "nn: " */
    return NULL;
  }
  nn_model *m = calloc(1, sizeof *m);
  if (!m) {
    shoal_error_set(err, SHOAL_ENOMEM, "nn: out of memory creating a model");
    return NULL;
  }
  m->device = device;
  m->be = be;
  m->output = -1;
  m->training = true;
  if (be->create && be->create(m, err)) {
    be->destroy(m);
    free(m);
    return NULL;
  }
  return m;
}

void nn_model_destroy(nn_model *m) {
  if (!m) return;
  m->be->destroy(m); /* first: a device backend unpins the host mirrors */
  for (int i = 0; i < m->n_nodes; i++)
    if (m->nodes[i].cconf_owned) free(m->nodes[i].cconf);
  free(m->nodes);
  free(m->tensors);
  free(m->params);
  free(m->grads);
  free(m->state);
  free(m);
}

/* ---- graph construction --------------------------------------------------------- */

/* Checks what every layer needs and fills the common fields of a new node t (not yet
 * in the graph: a layer whose checks fail leaves the model as it was). */
static int node_begin(nn_model *m, nn__node *t, nn__kind kind, const char *name) {
  if (!m) return SHOAL_EINVAL;
  memset(t, 0, sizeof *t);
  t->kind = kind;
  t->in[0] = t->in[1] = -1;
  t->id = m->n_nodes;
  if (name && *name) {
    if (strlen(name) >= NN__NAME_MAX)
      return model_fail(m, SHOAL_EINVAL, "nn: layer '%.40s...': name longer than %d characters",
                        name, NN__NAME_MAX - 1);
    /* A PyTorch module path ("features.0", "layer1.0.conv1") names the layer as its
     * state_dict does. Tensor names stay unambiguous: a tensor is "<layer>.<suffix>"
     * and no suffix holds a '.', so the last '.' splits them; empty parts ("a..b",
     * ".a", "a.") are refused, as no module path has them. Quotes and backslashes
     * would need escaping in a safetensors header. */
    size_t len = strlen(name);
    if (name[0] == '.' || name[len - 1] == '.' || strstr(name, ".."))
      return model_fail(m, SHOAL_EINVAL,
                        "nn: layer '%s': a dotted name needs a non-empty part between dots "
                        "(a module path such as \"features.0\")",
                        name);
    if (strpbrk(name, "\"\\"))
      return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': name may not contain '\"' or '\\'", name);
    for (size_t i = 0; i < len; i++)
      if ((unsigned char)name[i] < 0x20)
        return model_fail(m, SHOAL_EINVAL,
                          "nn: layer '%s': name may not contain control characters", name);
    snprintf(t->name, sizeof t->name, "%s", name);
  } else {
    snprintf(t->name, sizeof t->name, "%s%d", kind_names[kind], m->n_nodes);
  }
  if (m->built)
    return model_fail(m, SHOAL_ESTATE, "nn: layer '%s': the model is already built", t->name);
  if (kind == NN__INPUT) {
    if (m->n_nodes > 0) return model_fail(m, SHOAL_ESTATE, "nn: the input was already declared");
  } else if (m->n_nodes == 0) {
    return model_fail(m, SHOAL_ESTATE, "nn: layer '%s': declare the input (nn_input) first",
                      t->name);
  }
  for (int i = 0; i < m->n_nodes; i++)
    if (!strcmp(m->nodes[i].name, t->name))
      return model_fail(m, SHOAL_EEXIST, "nn: layer '%s': the name is already used", t->name);
  if (kind != NN__INPUT) {
    t->in[0] = m->current;
    t->n_in = 1;
  }
  /* Room for the node and its tensors now, so that adding them cannot fail halfway. */
  if (m->n_nodes == m->cap_nodes) {
    int cap = m->cap_nodes ? 2 * m->cap_nodes : 16;
    nn__node *nn = realloc(m->nodes, (size_t)cap * sizeof *nn);
    if (!nn) return model_fail(m, SHOAL_ENOMEM, "nn: layer '%s': out of memory", t->name);
    m->nodes = nn;
    m->cap_nodes = cap;
  }
  if (m->n_tensors + NN__MAX_TENSORS + NN__MAX_STATE > m->cap_tensors) {
    int cap = 2 * m->cap_tensors + NN__MAX_TENSORS + NN__MAX_STATE;
    nn__tensor *nt = realloc(m->tensors, (size_t)cap * sizeof *nt);
    if (!nt) return model_fail(m, SHOAL_ENOMEM, "nn: layer '%s': out of memory", t->name);
    m->tensors = nt;
    m->cap_tensors = cap;
  }
  return 0;
}

static void set_shape(nn__node *t, int C, int H, int W) {
  t->C = C;
  t->H = H;
  t->W = W;
  t->F = C * H * W;
}

/* Registers a tensor of node t ("<name>.<suffix>"), keeping the table as
 * nn_model_tensor promises: parameters first, then state, each in layer order.
 * Offsets come from the running counts. Returns the tensor (valid until the next
 * add). Can't fail: node_begin reserved the room. */
static nn__tensor *add_tensor(nn_model *m, nn__node *t, const char *suffix, bool trainable,
                              int ndim,
                       const int *shape, int fan_in, int fan_out, nn__init init, float bound) {
  SHOAL_ASSERT(m->n_tensors < m->cap_tensors);
  int at = m->n_tensors;
  if (trainable) {
    at = 0;
    while (at < m->n_tensors && m->tensors[at].trainable) at++;
    memmove(&m->tensors[at + 1], &m->tensors[at], (size_t)(m->n_tensors - at) * sizeof *m->tensors);
  }
  m->n_tensors++;
  nn__tensor *s = &m->tensors[at];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s.%s", t->name, suffix);
  s->ndim = ndim;
  s->numel = 1;
  for (int i = 0; i < ndim; i++) {
    s->shape[i] = shape[i];
    s->numel *= (size_t)shape[i];
  }
  s->trainable = trainable;
  s->fan_in = fan_in;
  s->fan_out = fan_out;
  s->init = init;
  s->bound = bound;
  if (trainable) {
    s->offset = m->n_params;
    m->n_params += s->numel;
    t->poff[t->n_poff++] = s->offset;
    t->has_params = true;
  } else {
    s->offset = m->n_state;
    m->n_state += s->numel;
    t->soff[t->n_soff++] = s->offset;
  }
  return s;
}

/* Appends t to the graph; it becomes the current node. Can't fail (node_begin
 * reserved the room). */
static int node_commit(nn_model *m, nn__node *t) {
  SHOAL_ASSERT(m->n_nodes < m->cap_nodes);
  m->nodes[m->n_nodes] = *t;
  m->current = m->n_nodes;
  return m->n_nodes++;
}

#define TENSOR(...) add_tensor(m, &t, __VA_ARGS__)

static const nn__node *cur(const nn_model *m, const nn__node *t) { return &m->nodes[t->in[0]]; }

int nn_input(nn_model *m, int C, int H, int W) {
  nn__node t;
  int rc = node_begin(m, &t, NN__INPUT, "input");
  if (rc) return rc;
  if (C < 1 || H < 1 || W < 1)
    return model_fail(m, SHOAL_EINVAL, "nn: input shape (%d, %d, %d) must be positive", C, H, W);
  if ((long long)C * H * W > (1 << 28))
    return model_fail(m, SHOAL_EINVAL, "nn: input shape (%d, %d, %d) is too large", C, H, W);
  set_shape(&t, C, H, W);
  return node_commit(m, &t);
}

int nn_model_select(nn_model *m, int node) {
  if (!m) return SHOAL_EINVAL;
  if (m->built) return model_fail(m, SHOAL_ESTATE, "nn: select: the model is already built");
  if (node < 0 || node >= m->n_nodes)
    return model_fail(m, SHOAL_ERANGE, "nn: select: no node %d (the model has %d)", node,
                      m->n_nodes);
  m->current = node;
  return node;
}

int nn_model_current(const nn_model *m) { return m ? m->current : SHOAL_EINVAL; }

const char *nn_node_kind(const nn_model *m, int node, bool *custom) {
  if (custom) *custom = false;
  if (!m || node < 0 || node >= m->n_nodes) return NULL;
  if (custom) *custom = m->nodes[node].kind == NN__CUSTOM;
  return nn__node_kind(&m->nodes[node]);
}

int nn_node_shape(const nn_model *m, int node, int *C, int *H, int *W) {
  if (!m || node < 0 || node >= m->n_nodes) return SHOAL_ERANGE;
  if (C) *C = m->nodes[node].C;
  if (H) *H = m->nodes[node].H;
  if (W) *W = m->nodes[node].W;
  return 0;
}

/* The flags the bias-carrying layers take; anything else is a caller's mistake. */
static int check_flags(nn_model *m, const nn__node *t, unsigned flags) {
  if (flags & ~(unsigned)NN_NO_BIAS)
    return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': unknown flags 0x%x", t->name,
                      flags & ~(unsigned)NN_NO_BIAS);
  return 0;
}

int nn_dense_ex(nn_model *m, const char *name, int out_features, unsigned flags) {
  nn__node t;
  int rc = node_begin(m, &t, NN__DENSE, name);
  if (rc) return rc;
  if ((rc = check_flags(m, &t, flags))) return rc;
  int in = cur(m, &t)->F;
  if (out_features < 1)
    return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': out_features %d must be positive", t.name,
                      out_features);
  t.out_c = out_features;
  t.bias = !(flags & NN_NO_BIAS);
  set_shape(&t, out_features, 1, 1);
  float bound = 1.0f / sqrtf((float)in);
  TENSOR("weight", true, 2, (int[]){out_features, in}, in, out_features, NN__INIT_UNIFORM, bound);
  if (t.bias)
    TENSOR("bias", true, 1, (int[]){out_features}, in, out_features, NN__INIT_UNIFORM, bound);
  return node_commit(m, &t);
}

int nn_dense(nn_model *m, const char *name, int out_features) {
  return nn_dense_ex(m, name, out_features, 0);
}

static int conv_check(nn_model *m, nn__node *t, int out_c, int kh, int kw, int stride, int pad,
                      int dil) {
  if (out_c < 1 || kh < 1 || kw < 1 || stride < 1 || pad < 0 || dil < 1)
    return model_fail(m, SHOAL_EINVAL,
                      "nn: layer '%s': out_c %d, kernel %dx%d, stride %d, padding %d, dilation "
                      "%d: need out_c, kernel, stride, dilation >= 1 and padding >= 0",
                      t->name, out_c, kh, kw, stride, pad, dil);
  return 0;
}

int nn_conv2d_ex(nn_model *m, const char *name, int out_c, int kh, int kw, int stride, int pad,
                 int dilation, unsigned flags) {
  nn__node t;
  int rc = node_begin(m, &t, NN__CONV, name);
  if (rc) return rc;
  if ((rc = check_flags(m, &t, flags))) return rc;
  rc = conv_check(m, &t, out_c, kh, kw, stride, pad, dilation);
  if (rc) return rc;
  const nn__node *x = cur(m, &t);
  int ho = (x->H + 2 * pad - dilation * (kh - 1) - 1) / stride + 1;
  int wo = (x->W + 2 * pad - dilation * (kw - 1) - 1) / stride + 1;
  if (x->H + 2 * pad - dilation * (kh - 1) - 1 < 0 || x->W + 2 * pad - dilation * (kw - 1) - 1 < 0)
    return model_fail(m, SHOAL_ESHAPE,
                      "nn: layer '%s': input %dx%d (padding %d) is smaller than the kernel %dx%d "
                      "(dilation %d)",
                      t.name, x->H, x->W, pad, kh, kw, dilation);
  t.out_c = out_c, t.kh = kh, t.kw = kw, t.stride = stride, t.pad = pad, t.dil = dilation;
  t.bias = !(flags & NN_NO_BIAS);
  set_shape(&t, out_c, ho, wo);
  int fan_in = x->C * kh * kw, fan_out = out_c * kh * kw;
  float bound = 1.0f / sqrtf((float)fan_in);
  TENSOR("weight", true, 4, (int[]){out_c, x->C, kh, kw}, fan_in, fan_out, NN__INIT_UNIFORM, bound);
  if (t.bias) TENSOR("bias", true, 1, (int[]){out_c}, fan_in, fan_out, NN__INIT_UNIFORM, bound);
  return node_commit(m, &t);
}

int nn_conv2d(nn_model *m, const char *name, int out_c, int kh, int kw, int stride, int pad,
              int dilation) {
  return nn_conv2d_ex(m, name, out_c, kh, kw, stride, pad, dilation, 0);
}

int nn_conv_transpose2d_ex(nn_model *m, const char *name, int out_c, int kh, int kw, int stride,
                           int pad, int output_pad, unsigned flags) {
  nn__node t;
  int rc = node_begin(m, &t, NN__CONVT, name);
  if (rc) return rc;
  if ((rc = check_flags(m, &t, flags))) return rc;
  rc = conv_check(m, &t, out_c, kh, kw, stride, pad, 1);
  if (rc) return rc;
  if (output_pad < 0 || output_pad >= stride)
    return model_fail(m, SHOAL_EINVAL,
                      "nn: layer '%s': output_padding %d must be in [0, stride %d) as PyTorch's",
                      t.name, output_pad, stride);
  const nn__node *x = cur(m, &t);
  int ho = (x->H - 1) * stride - 2 * pad + (kh - 1) + output_pad + 1;
  int wo = (x->W - 1) * stride - 2 * pad + (kw - 1) + output_pad + 1;
  if (ho < 1 || wo < 1)
    return model_fail(m, SHOAL_ESHAPE, "nn: layer '%s': input %dx%d gives an empty output %dx%d",
                      t.name, x->H, x->W, ho, wo);
  t.out_c = out_c, t.kh = kh, t.kw = kw, t.stride = stride, t.pad = pad, t.dil = 1;
  t.opad = output_pad;
  t.bias = !(flags & NN_NO_BIAS);
  set_shape(&t, out_c, ho, wo);
  /* PyTorch's fan of a (in, out, kh, kw) weight: fan_in = size(1) * kh * kw. */
  int fan_in = out_c * kh * kw, fan_out = x->C * kh * kw;
  float bound = 1.0f / sqrtf((float)fan_in);
  TENSOR("weight", true, 4, (int[]){x->C, out_c, kh, kw}, fan_in, fan_out, NN__INIT_UNIFORM, bound);
  if (t.bias) TENSOR("bias", true, 1, (int[]){out_c}, fan_in, fan_out, NN__INIT_UNIFORM, bound);
  return node_commit(m, &t);
}

int nn_conv_transpose2d(nn_model *m, const char *name, int out_c, int kh, int kw, int stride,
                        int pad, int output_pad) {
  return nn_conv_transpose2d_ex(m, name, out_c, kh, kw, stride, pad, output_pad, 0);
}

static int pool(nn_model *m, nn__kind kind, const char *name, int k, int stride, int pad) {
  nn__node t;
  int rc = node_begin(m, &t, kind, name);
  if (rc) return rc;
  if (k < 1 || stride < 1 || pad < 0 || pad > k / 2)
    return model_fail(m, SHOAL_EINVAL,
                      "nn: layer '%s': kernel %d, stride %d, padding %d: need kernel, stride >= 1 "
                      "and 0 <= padding <= kernel/2",
                      t.name, k, stride, pad);
  const nn__node *x = cur(m, &t);
  if (x->H + 2 * pad < k || x->W + 2 * pad < k)
    return model_fail(m, SHOAL_ESHAPE,
                      "nn: layer '%s': input %dx%d (padding %d) is smaller than the kernel %d",
                      t.name, x->H, x->W, pad, k);
  t.kh = t.kw = k, t.stride = stride, t.pad = pad;
  set_shape(&t, x->C, (x->H + 2 * pad - k) / stride + 1, (x->W + 2 * pad - k) / stride + 1);
  return node_commit(m, &t);
}

int nn_maxpool2d(nn_model *m, const char *name, int k, int stride, int pad) {
  return pool(m, NN__MAXPOOL, name, k, stride, pad);
}
int nn_avgpool2d(nn_model *m, const char *name, int k, int stride, int pad) {
  return pool(m, NN__AVGPOOL, name, k, stride, pad);
}

int nn_batchnorm(nn_model *m, const char *name, float eps, float momentum) {
  nn__node t;
  int rc = node_begin(m, &t, NN__BATCHNORM, name);
  if (rc) return rc;
  if (!(eps > 0) || !(momentum >= 0 && momentum <= 1))
    return model_fail(m, SHOAL_EINVAL,
                      "nn: layer '%s': eps %g must be > 0 and momentum %g in [0, 1]", t.name,
                      (double)eps, (double)momentum);
  const nn__node *x = cur(m, &t);
  t.eps = eps, t.momentum = momentum;
  set_shape(&t, x->C, x->H, x->W);
  int C = x->C;
  TENSOR("weight", true, 1, (int[]){C}, C, C, NN__INIT_ONES, 0);
  TENSOR("bias", true, 1, (int[]){C}, C, C, NN__INIT_ZEROS, 0);
  TENSOR("running_mean", false, 1, (int[]){C}, C, C, NN__INIT_ZEROS, 0);
  TENSOR("running_var", false, 1, (int[]){C}, C, C, NN__INIT_ONES, 0);
  TENSOR("num_batches_tracked", false, 0, NULL, 1, 1, NN__INIT_ZEROS, 0);
  return node_commit(m, &t);
}

int nn_layernorm(nn_model *m, const char *name, float eps) {
  nn__node t;
  int rc = node_begin(m, &t, NN__LAYERNORM, name);
  if (rc) return rc;
  if (!(eps > 0))
    return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': eps %g must be > 0", t.name, (double)eps);
  const nn__node *x = cur(m, &t);
  t.eps = eps;
  set_shape(&t, x->C, x->H, x->W);
  /* PyTorch's LayerNorm(normalized_shape): (N,) for vectors, (C, H, W) otherwise. */
  int nd = (x->H == 1 && x->W == 1) ? 1 : 3;
  int shape[3] = {x->C, x->H, x->W};
  if (nd == 1) shape[0] = x->F;
  TENSOR("weight", true, nd, shape, x->F, x->F, NN__INIT_ONES, 0);
  TENSOR("bias", true, nd, shape, x->F, x->F, NN__INIT_ZEROS, 0);
  return node_commit(m, &t);
}

int nn_dropout(nn_model *m, const char *name, float p) {
  nn__node t;
  int rc = node_begin(m, &t, NN__DROPOUT, name);
  if (rc) return rc;
  if (!(p >= 0 && p <= 1))
    return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': p %g must be in [0, 1]", t.name, (double)p);
  const nn__node *x = cur(m, &t);
  t.p = p;
  set_shape(&t, x->C, x->H, x->W);
  return node_commit(m, &t);
}

int nn_flatten(nn_model *m, const char *name) {
  nn__node t;
  int rc = node_begin(m, &t, NN__FLATTEN, name);
  if (rc) return rc;
  set_shape(&t, cur(m, &t)->F, 1, 1);
  return node_commit(m, &t);
}

int nn_reshape(nn_model *m, const char *name, int C, int H, int W) {
  nn__node t;
  int rc = node_begin(m, &t, NN__RESHAPE, name);
  if (rc) return rc;
  const nn__node *x = cur(m, &t);
  if (C < 1 || H < 1 || W < 1 || (long long)C * H * W != x->F)
    return model_fail(m, SHOAL_ESHAPE,
                      "nn: layer '%s': cannot reshape (%d, %d, %d) (%d features) to (%d, %d, %d)",
                      t.name, x->C, x->H, x->W, x->F, C, H, W);
  set_shape(&t, C, H, W);
  return node_commit(m, &t);
}

int nn_embedding(nn_model *m, const char *name, int num, int dim) {
  nn__node t;
  int rc = node_begin(m, &t, NN__EMBEDDING, name);
  if (rc) return rc;
  if (num < 1 || dim < 1)
    return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': num %d and dim %d must be positive", t.name,
                      num, dim);
  const nn__node *x = cur(m, &t);
  if ((long long)x->F * dim > (1 << 28))
    return model_fail(m, SHOAL_ESHAPE, "nn: layer '%s': output of %d x %d features is too large",
                      t.name, x->F, dim);
  t.num = num, t.dim = dim;
  set_shape(&t, x->F * dim, 1, 1);
  TENSOR("weight", true, 2, (int[]){num, dim}, dim, num, NN__INIT_NORMAL, 0);
  return node_commit(m, &t);
}

int nn_activation(nn_model *m, const char *name, nn_act act, float alpha) {
  nn__node t;
  int rc = node_begin(m, &t, NN__ACT, name);
  if (rc) return rc;
  if ((int)act < NN_RELU || (int)act > NN_SCALE)
    return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': unknown activation %d", t.name, (int)act);
  if (!isfinite(alpha))
    return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': alpha must be finite", t.name);
  const nn__node *x = cur(m, &t);
  t.act = act, t.alpha = alpha;
  set_shape(&t, x->C, x->H, x->W);
  return node_commit(m, &t);
}

static int rnn_cell(nn_model *m, nn__kind kind, const char *name, int hidden) {
  nn__node t;
  int rc = node_begin(m, &t, kind, name);
  if (rc) return rc;
  const nn__node *x = cur(m, &t);
  int ng = kind == NN__LSTM ? 4 : 3; /* gates */
  int ns = kind == NN__LSTM ? 2 : 1; /* state vectors in the input: h (and c) */
  if (hidden < 1)
    return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': hidden %d must be positive", t.name,
                      hidden);
  int I = x->F - ns * hidden;
  if (I < 1)
    return model_fail(m, SHOAL_ESHAPE,
                      "nn: layer '%s': input has %d features; a %s with hidden %d needs [x | h%s] "
                      "= I + %d*%d with I >= 1",
                      t.name, x->F, kind_names[kind], hidden, ns == 2 ? " | c" : "", ns, hidden);
  t.hidden = hidden;
  t.num = I; /* input size */
  set_shape(&t, ns * hidden, 1, 1);
  float bound = 1.0f / sqrtf((float)hidden);
  TENSOR("weight_ih", true, 2, (int[]){ng * hidden, I}, I, ng * hidden, NN__INIT_UNIFORM, bound);
  TENSOR("weight_hh", true, 2, (int[]){ng * hidden, hidden}, hidden, ng * hidden, NN__INIT_UNIFORM,
         bound);
  TENSOR("bias_ih", true, 1, (int[]){ng * hidden}, hidden, ng * hidden, NN__INIT_UNIFORM, bound);
  TENSOR("bias_hh", true, 1, (int[]){ng * hidden}, hidden, ng * hidden, NN__INIT_UNIFORM, bound);
  return node_commit(m, &t);
}

int nn_lstm_cell(nn_model *m, const char *name, int hidden) {
  return rnn_cell(m, NN__LSTM, name, hidden);
}
int nn_gru_cell(nn_model *m, const char *name, int hidden) {
  return rnn_cell(m, NN__GRU, name, hidden);
}

int nn_slice(nn_model *m, const char *name, int start, int count) {
  nn__node t;
  int rc = node_begin(m, &t, NN__SLICE, name);
  if (rc) return rc;
  const nn__node *x = cur(m, &t);
  if (start < 0 || count < 1 || start > x->C - count)
    return model_fail(m, SHOAL_ERANGE,
                      "nn: layer '%s': slice [%d, %d) is outside the input's %d channels", t.name,
                      start, start + count, x->C);
  t.start = start, t.count = count;
  set_shape(&t, count, x->H, x->W);
  return node_commit(m, &t);
}

static int two_input(nn_model *m, nn__kind kind, const char *name, int a, int b) {
  nn__node t;
  int rc = node_begin(m, &t, kind, name);
  if (rc) return rc;
  if (a < 0 || a >= m->n_nodes || b < 0 || b >= m->n_nodes)
    return model_fail(m, SHOAL_ERANGE,
                      "nn: layer '%s': inputs %d and %d: the model has nodes 0..%d", t.name, a, b,
                      m->n_nodes - 1);
  const nn__node *x = &m->nodes[a], *y = &m->nodes[b];
  t.in[0] = a, t.in[1] = b, t.n_in = 2;
  if (kind == NN__ADD) {
    if (x->C != y->C || x->H != y->H || x->W != y->W)
      return model_fail(m, SHOAL_ESHAPE,
                        "nn: layer '%s': cannot add '%s' (%d, %d, %d) and '%s' (%d, %d, %d)",
                        t.name, x->name, x->C, x->H, x->W, y->name, y->C, y->H, y->W);
    set_shape(&t, x->C, x->H, x->W);
  } else if (kind == NN__MUL) {
    /* b is a's shape, or one value per sample (a mask or gate broadcast over a) */
    if (y->F != 1 && (x->C != y->C || x->H != y->H || x->W != y->W))
      return model_fail(m, SHOAL_ESHAPE,
                        "nn: layer '%s': cannot multiply '%s' (%d, %d, %d) by '%s' (%d, %d, %d): "
                        "the second must have the first's shape or one value per sample",
                        t.name, x->name, x->C, x->H, x->W, y->name, y->C, y->H, y->W);
    set_shape(&t, x->C, x->H, x->W);
  } else {
    if (x->H != y->H || x->W != y->W)
      return model_fail(m, SHOAL_ESHAPE,
                        "nn: layer '%s': cannot concatenate '%s' (%d, %d, %d) and '%s' (%d, %d, "
                        "%d): H and W differ",
                        t.name, x->name, x->C, x->H, x->W, y->name, y->C, y->H, y->W);
    set_shape(&t, x->C + y->C, x->H, x->W);
  }
  return node_commit(m, &t);
}

int nn_add(nn_model *m, const char *name, int a, int b) {
  return two_input(m, NN__ADD, name, a, b);
}
int nn_concat(nn_model *m, const char *name, int a, int b) {
  return two_input(m, NN__CONCAT, name, a, b);
}
int nn_mul(nn_model *m, const char *name, int a, int b) {
  return two_input(m, NN__MUL, name, a, b);
}

int nn_shared(nn_model *m, const char *name, int like) {
  if (!m) return SHOAL_EINVAL;
  if (like < 1 || like >= m->n_nodes)
    return model_fail(m, SHOAL_ERANGE, "nn: layer '%s': shares node %d, but the layers are 1..%d",
                      name ? name : "?", like, m->n_nodes - 1);
  nn__node t;
  int rc = node_begin(m, &t, m->nodes[like].kind, name);
  if (rc) return rc;
  /* after node_begin, which may move the node array */
  const nn__node *src = &m->nodes[like];
  if (src->n_in != 1)
    return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': cannot share '%s', a two-input %s layer",
                      t.name, src->name, kind_names[src->kind]);
  const nn__node *x = cur(m, &t), *sx = &m->nodes[src->in[0]];
  if (x->C != sx->C || x->H != sx->H || x->W != sx->W)
    return model_fail(m, SHOAL_ESHAPE,
                      "nn: layer '%s': input (%d, %d, %d) differs from the input (%d, %d, %d) of "
                      "'%s', whose parameters it shares",
                      t.name, x->C, x->H, x->W, sx->C, sx->H, sx->W, src->name);
  /* Same kind, hyper-parameters and parameter offsets: gradients of both add up in
   * the one gradient slot, as tied weights need. No tensors of its own. */
  nn__node s = *src;
  memcpy(s.name, t.name, sizeof s.name);
  s.id = t.id;
  s.in[0] = t.in[0];
  s.in[1] = -1;
  s.out = s.dout = s.dout_buf = s.cache = NULL;
  s.idx = NULL;
  s.cconf_owned = false; /* a custom layer's config stays its source's */
  return node_commit(m, &s);
}

bool nn__ident_ok(const char *s, size_t max) {
  if (!s || !*s || strlen(s) > max) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_'))
      return false;
  return true;
}

int nn_custom(nn_model *m, const char *name, const nn_layer_type *type, const void *config) {
  nn__node t;
  int rc = node_begin(m, &t, NN__CUSTOM, name);
  if (rc) return rc;
  const char *miss = !type                            ? "no type"
                     : !type->kind || !*type->kind      ? "no kind"
                     : !type->shape                     ? "no shape function"
                     : !type->forward                   ? "no forward function"
                     : !type->backward                  ? "no backward function"
                                                        : NULL;
  if (type && type->abi != NN_LAYER_ABI)
    return model_fail(m, SHOAL_EINVAL,
                      "nn: layer '%s': its type is for layer abi %d, this nn has %d (rebuild it "
                      "against this nn/nn.h)",
                      t.name, type->abi, NN_LAYER_ABI);
  if (miss)
    return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': its custom layer type has %s", t.name,
                      miss);
  if (type->config_size && !config)
    return model_fail(m, SHOAL_EINVAL, "nn: layer '%s': custom layer '%s' needs a config",
                      t.name, type->kind);
  const nn__node *x = cur(m, &t);
  nn_layer_shape sh = {.name = t.name, .in_C = x->C, .in_H = x->H, .in_W = x->W};
  void *conf = NULL;
  if (type->config_size) {
    if (!(conf = malloc(type->config_size)))
      return model_fail(m, SHOAL_ENOMEM, "nn: layer '%s': out of memory", t.name);
    memcpy(conf, config, type->config_size);
  }
  sh.config = conf;
  shoal_error why = {0};
  rc = type->shape(&sh, &why);
  const char *bad = NULL;
  char msg[160];
  if (rc) {
    bad = why.msg[0] ? why.msg : "its shape function failed";
  } else if (sh.C < 1 || sh.H < 1 || sh.W < 1 || (long long)sh.C * sh.H * sh.W > (1 << 28)) {
    snprintf(msg, sizeof msg, "output shape (%d, %d, %d) is not a positive size", sh.C, sh.H,
             sh.W);
    bad = msg, rc = SHOAL_ESHAPE;
  } else if (sh.n_params < 0 || sh.n_params > NN_LAYER_TENSORS) {
    snprintf(msg, sizeof msg, "%d tensors (at most %d)", sh.n_params, NN_LAYER_TENSORS);
    bad = msg, rc = SHOAL_EINVAL;
  }
  for (int k = 0; !bad && k < sh.n_params; k++) {
    const nn_param_spec *p = &sh.params[k];
    long long numel = 1;
    bool dims_ok = p->ndim >= 0 && p->ndim <= 4;
    for (int d = 0; dims_ok && d < p->ndim; d++) {
      dims_ok = p->shape[d] >= 1;
      numel *= dims_ok ? p->shape[d] : 1;
    }
    /* a '.' would make "<layer>.<suffix>" split in the wrong place */
    if (!nn__ident_ok(p->name, 22))
      snprintf(msg, sizeof msg, "tensor %d's name '%s' is not 1-22 letters, digits or '_'", k,
               p->name ? p->name : "(null)");
    else if (!dims_ok || numel > (1LL << 31))
      snprintf(msg, sizeof msg, "tensor '%s' has a bad shape (ndim %d)", p->name, p->ndim);
    else if ((unsigned)p->init > NN_INIT_TORCH_DEFAULT)
      snprintf(msg, sizeof msg, "tensor '%s' has an unknown initialiser %d", p->name,
               (int)p->init);
    else
      continue;
    bad = msg, rc = SHOAL_EINVAL;
  }
  for (int k = 0; !bad && k < sh.n_params; k++)
    for (int j = 0; j < k; j++)
      if (!strcmp(sh.params[j].name, sh.params[k].name)) {
        snprintf(msg, sizeof msg, "two tensors are named '%s'", sh.params[k].name);
        bad = msg, rc = SHOAL_EINVAL;
      }
  if (bad) {
    free(conf);
    return model_fail(m, rc, "nn: layer '%s' (%s): %s", t.name, type->kind, bad);
  }
  set_shape(&t, sh.C, sh.H, sh.W);
  t.ctype = type;
  t.cconf = conf;
  t.cconf_owned = true;
  t.ckind = type->kind;
  t.c_cps = sh.cache_per_sample;
  t.c_cfix = sh.cache_fixed;
  t.c_flops = sh.flops;
  t.c_n = sh.n_params;
  for (int k = 0; k < sh.n_params; k++) {
    const nn_param_spec *p = &sh.params[k];
    /* PyTorch's fans: dim 1 (in) and dim 0 (out) times the receptive field */
    int rf = 1;
    for (int d = 2; d < p->ndim; d++) rf *= p->shape[d];
    int fin = p->fan_in ? p->fan_in : (p->ndim >= 2 ? p->shape[1] * rf : p->ndim ? p->shape[0] : 1);
    int fout = p->fan_out ? p->fan_out : (p->ndim >= 1 ? p->shape[0] * rf : 1);
    nn__init init = NN__INIT_ZEROS;
    float a = p->a, b = p->b;
    switch (p->init) {
      case NN_INIT_ZEROS: init = NN__INIT_ZEROS; break;
      case NN_INIT_ONES: init = NN__INIT_ONES; break;
      case NN_INIT_CONSTANT: init = NN__INIT_CONSTANT; break;
      case NN_INIT_UNIFORM: init = NN__INIT_RANGE; break;
      case NN_INIT_NORMAL: init = NN__INIT_GAUSS; break;
      case NN_INIT_TORCH_DEFAULT: init = NN__INIT_UNIFORM, a = 1.0f / sqrtf((float)fin); break;
    }
    t.ctrain[k] = p->trainable;
    t.cslot[k] = p->trainable ? t.n_poff : t.n_soff;
    TENSOR(p->name, p->trainable, p->ndim, p->shape, fin, fout, init, a)->b = b;
  }
  return node_commit(m, &t);
}

int nn_model_set_output(nn_model *m, int node) {
  if (!m) return SHOAL_EINVAL;
  if (m->built) return model_fail(m, SHOAL_ESTATE, "nn: set_output: the model is already built");
  if (node < 0 || node >= m->n_nodes)
    return model_fail(m, SHOAL_ERANGE, "nn: set_output: no node %d (the model has %d)", node,
                      m->n_nodes);
  m->output = node;
  return 0;
}

/* ---- build -------------------------------------------------------------------------- */

float *nn__alloc_floats(size_t n) {
  size_t bytes = (n ? n : 1) * sizeof(float);
  bytes = (bytes + 63) & ~(size_t)63;
  float *p = aligned_alloc(64, bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

static void init_tensor(float *w, const nn__tensor *t, shoal_rng *rng) {
  for (size_t i = 0; i < t->numel; i++) {
    switch (t->init) {
      case NN__INIT_UNIFORM: w[i] = t->bound * (2.0f * shoal_rng_uniformf(rng) - 1.0f); break;
      case NN__INIT_NORMAL: w[i] = (float)shoal_rng_normal(rng); break;
      case NN__INIT_ONES: w[i] = 1.0f; break;
      case NN__INIT_ZEROS: w[i] = 0.0f; break;
      case NN__INIT_CONSTANT: w[i] = t->bound; break;
      case NN__INIT_RANGE: w[i] = t->bound + (t->b - t->bound) * shoal_rng_uniformf(rng); break;
      case NN__INIT_GAUSS: w[i] = t->bound + t->b * (float)shoal_rng_normal(rng); break;
    }
  }
}

int nn_model_build(nn_model *m, int max_batch, uint64_t seed, shoal_error *err) {
  if (!m) return shoal_error_set(err, SHOAL_EINVAL, "nn: build: model is NULL");
  if (m->built) return shoal_error_set(err, SHOAL_ESTATE, "nn: build: the model is already built");
  if (m->err_code) return shoal_error_set(err, m->err_code, "%s", m->err_msg);
  if (m->n_nodes < 2)
    return shoal_error_set(err, SHOAL_ESTATE, "nn: build: the model has %s",
                           m->n_nodes ? "no layers" : "no input (nn_input) and no layers");
  if (max_batch < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: build: max_batch %d must be >= 1", max_batch);
  if (m->output < 0) m->output = m->n_nodes - 1;
  if (m->output == 0)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: build: the output is the input node");
  for (int i = 1; i < m->n_nodes; i++) {
    const nn__node *n = &m->nodes[i];
    const nn__layer_ops *ops = m->be->ops[n->kind];
    if (!ops || !ops->forward || !ops->backward)
      return shoal_error_set(err, SHOAL_ENOTSUP, "nn: layer '%s': the %s backend has no %s layer",
                             n->name, m->be->name, kind_names[n->kind]);
    if (n->kind == NN__CUSTOM && m->device != NN_CPU &&
        (!n->ctype->forward_cuda || !n->ctype->backward_cuda))
      return shoal_error_set(err, SHOAL_ENOTSUP,
                             "nn: layer '%s': custom layer '%s' has no %s implementation (its "
                             "nn_layer_type has no forward_cuda and backward_cuda); build the "
                             "model on NN_CPU or give it them",
                             n->name, n->ckind, m->be->name);
  }

  /* Live nodes: the output and its ancestors; forward and backward visit only them. */
  for (int i = 0; i < m->n_nodes; i++) m->nodes[i].live = false;
  m->nodes[m->output].live = true;
  for (int i = m->output; i >= 0; i--) {
    nn__node *n = &m->nodes[i];
    if (!n->live) continue;
    for (int k = 0; k < n->n_in; k++) m->nodes[n->in[k]].live = true;
  }

  m->params = nn__alloc_floats(m->n_params);
  m->grads = nn__alloc_floats(m->n_params);
  m->state = nn__alloc_floats(m->n_state);
  int rc = 0;
  if (!m->params || !m->grads || !m->state) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "nn: build: out of memory for %zu parameters",
                         m->n_params);
    goto fail;
  }
  /* Initialise in table order: the parameters layer by layer, each weight before its
   * bias (state is constant-initialised, so its place does not change the draws). The
   * same draws on every backend: a CUDA model starts from the CPU model's weights. */
  shoal_rng rng;
  shoal_rng_seed(&rng, seed);
  for (int i = 0; i < m->n_tensors; i++) {
    const nn__tensor *t = &m->tensors[i];
    init_tensor((t->trainable ? m->params : m->state) + t->offset, t, &rng);
  }
  /* Activations, caches and (device backends) the upload of what was just drawn. */
  m->max_batch = max_batch;
  rc = m->be->build(m, err);
  if (rc) goto fail;
  /* Dropout draws from its own stream, so masks do not depend on the init. */
  nn_model_set_seed(m, seed);
  m->built = true;
  return 0;

fail:
  free(m->params), free(m->grads), free(m->state);
  m->params = m->grads = m->state = NULL;
  m->max_batch = 0;
  return rc;
}

void nn_model_set_training(nn_model *m, bool training) {
  if (m) m->training = training;
}

bool nn_model_training(const nn_model *m) { return m && m->training; }
void nn_model_set_seed(nn_model *m, uint64_t seed) {
  if (m) shoal_rng_seed(&m->rng, seed ^ 0x9e3779b97f4a7c15ull);
}
int nn_model_max_batch(const nn_model *m) { return m && m->built ? m->max_batch : 0; }

/* ---- forward / backward ---------------------------------------------------------------- */

int nn_model_forward(nn_model *m, const float *x, int B, const float **y, shoal_error *err) {
  if (!m || !x) return shoal_error_set(err, SHOAL_EINVAL, "nn: forward: model or input is NULL");
  if (!m->built) return shoal_error_set(err, SHOAL_ESTATE, "nn: forward: the model is not built");
  if (B < 1 || B > m->max_batch)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: forward: batch %d is outside [1, %d]", B,
                           m->max_batch);
  nn__node *in = &m->nodes[0];
  size_t nx = (size_t)B * (size_t)in->F;
  /* Layers write their outputs while reading x: x inside m's buffers (its own output
   * fed back, as a recurrent step might) would be overwritten mid-pass. */
  if ((uintptr_t)x < (uintptr_t)(m->arena + m->arena_n) &&
      (uintptr_t)(x + nx) > (uintptr_t)m->arena)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "nn: forward: x points into the model's own buffers; copy it out first");
  int rc = m->be->check_input(m, x, nx, err);
  if (rc) return rc;
  m->B = 0; /* a failed forward leaves nothing for backward */
  m->x = x;
  in->out = (float *)x;
  for (int i = 1; i < m->n_nodes; i++) {
    nn__node *n = &m->nodes[i];
    if (!n->live) continue;
    n->fwd_training = m->training;
    uint64_t t0 = m->profiling ? shoal_now_ns() : 0;
    rc = m->be->ops[n->kind]->forward(m, n, B, err);
    if (rc) return rc;
    if (m->profiling) n->prof_ns[0] += shoal_now_ns() - t0, n->prof_calls[0]++;
  }
  if (m->be->status && (rc = m->be->status(m, err))) return rc;
  /* Batch norm's running statistics moved on the device. */
  if (m->be->pull && m->training) m->host_stale = true;
  m->B = B;
  if (y) *y = m->nodes[m->output].out;
  return 0;
}

float *nn__dinput(nn_model *m, nn__node *n, int k, bool *accumulate) {
  nn__node *x = &m->nodes[n->in[k]];
  if (!x->need_grad) return NULL;
  *accumulate = x->written;
  x->written = true;
  return x->dout;
}

int nn_model_backward(nn_model *m, const float *dy, const float **dx, shoal_error *err) {
  if (!m || !dy) return shoal_error_set(err, SHOAL_EINVAL, "nn: backward: model or dy is NULL");
  if (!m->built || m->B < 1)
    return shoal_error_set(err, SHOAL_ESTATE, "nn: backward: no forward to go back through");
  int B = m->B;
  if (m->be->check_ptr) {
    int rc = m->be->check_ptr(m, dy, "backward: dy", err);
    if (rc) return rc;
  }
  /* A node's output gradient is needed when it or an ancestor has parameters, or
   * when the caller wants the input gradient. */
  for (int i = 0; i < m->n_nodes; i++) {
    nn__node *n = &m->nodes[i];
    n->written = false;
    n->dout = n->dout_buf;
    if (i == 0) {
      n->need_grad = dx != NULL;
      continue;
    }
    n->need_grad = n->has_params;
    for (int k = 0; k < n->n_in; k++) n->need_grad |= m->nodes[n->in[k]].need_grad;
  }
  nn__node *o = &m->nodes[m->output];
  o->dout = (float *)dy;
  o->written = true;
  for (int i = m->output; i >= 1; i--) {
    nn__node *n = &m->nodes[i];
    if (!n->live || !n->written || !n->need_grad) continue;
    uint64_t t0 = m->profiling ? shoal_now_ns() : 0;
    m->be->ops[n->kind]->backward(m, n, B);
    if (m->profiling) n->prof_ns[1] += shoal_now_ns() - t0, n->prof_calls[1]++;
  }
  if (dx) {
    nn__node *in = &m->nodes[0];
    /* An input no path reaches (it cannot happen in a built graph, but keep dx sane). */
    if (!in->written) m->be->zero(m, in->dout_buf, (size_t)B * (size_t)in->F);
    *dx = in->dout_buf;
  }
  return m->be->status ? m->be->status(m, err) : 0;
}

void nn_model_zero_grad(nn_model *m) {
  if (m && m->built) m->be->zero(m, NULL, m->n_params); /* NULL: the gradient buffer */
}

/* A device backend's host mirrors are brought up to date on access. */
static float *host_view(nn_model *m, float *buf, bool grads) {
  if (m->be->pull && m->built && (grads || m->host_stale)) {
    if (m->be->pull(m, grads, NULL)) return NULL;
    m->host_stale = false;
  }
  return buf;
}

float *nn_model_params(nn_model *m, size_t *n) {
  if (n) *n = m ? m->n_params : 0;
  return m ? host_view(m, m->params, false) : NULL;
}
float *nn_model_grads(nn_model *m, size_t *n) {
  if (n) *n = m ? m->n_params : 0;
  return m ? host_view(m, m->grads, true) : NULL;
}
float *nn_model_state(nn_model *m, size_t *n) {
  if (n) *n = m ? m->n_state : 0;
  return m ? host_view(m, m->state, false) : NULL;
}

/* ---- devices ----------------------------------------------------------------------------- */

nn_device nn_model_device(const nn_model *m) { return m ? m->device : NN_CPU; }

float *nn_model_alloc(nn_model *m, size_t n, shoal_error *err) {
  if (!m) {
    shoal_error_set(err, SHOAL_EINVAL, "nn: alloc: model is NULL");
    return NULL;
  }
  return m->be->alloc(m, n, err);
}

void nn_model_free(nn_model *m, float *p) {
  if (m && p) m->be->free_buf(m, p);
}

int nn_model_to_device(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err) {
  if (!m || (n && (!dst || !src)))
    return shoal_error_set(err, SHOAL_EINVAL, "nn: to_device: NULL argument");
  return m->be->to_device(m, dst, src, n, err);
}

int nn_model_to_host(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err) {
  if (!m || (n && (!dst || !src)))
    return shoal_error_set(err, SHOAL_EINVAL, "nn: to_host: NULL argument");
  return m->be->to_host(m, dst, src, n, err);
}

int nn_model_sync(nn_model *m, shoal_error *err) {
  if (!m) return shoal_error_set(err, SHOAL_EINVAL, "nn: sync: model is NULL");
  return m->be->sync ? m->be->sync(m, err) : 0;
}

int nn_model_params_changed(nn_model *m, shoal_error *err) {
  if (!m) return shoal_error_set(err, SHOAL_EINVAL, "nn: params_changed: model is NULL");
  if (m->be->push && m->built) {
    int rc = m->be->push(m, err);
    if (!rc) m->host_stale = false;
    return rc;
  }
  return 0;
}

int nn_model_priorities(nn_model *m, float *prio, const float *pred, const float *target, int B,
                        int N, float alpha, float eps, shoal_error *err) {
  if (!m || !prio || !pred || !target)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: priorities: NULL argument");
  if (!m->built || B < 1 || B > m->max_batch || N < 1 || !(alpha >= 0) || !(eps >= 0))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "nn: priorities: B %d (max_batch %d), N %d, alpha %g, eps %g: need a "
                           "built model, 1 <= B <= max_batch, N >= 1, alpha, eps >= 0",
                           B, m->max_batch, N, (double)alpha, (double)eps);
  int rc = m->be->priorities(m, prio, pred, target, B, N, alpha, eps, err);
  if (rc) return rc;
  for (int i = 0; i < B; i++)
    if (!isfinite(prio[i]))
      return shoal_error_set(err, SHOAL_ENAN, "nn: priorities: sample %d's priority is %g", i,
                             (double)prio[i]);
  return 0;
}

int nn_model_loss(nn_model *m, nn_loss_kind kind, float *loss, float *dpred, const float *pred,
                  const float *target, const float *w, int B, int N, float delta,
                  shoal_error *err) {
  if (!m) return shoal_error_set(err, SHOAL_EINVAL, "nn: loss: model is NULL");
  if ((unsigned)kind > NN_LOSS_CROSS_ENTROPY)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: loss: unknown kind %d", (int)kind);
  return m->be->loss(m, kind, loss, dpred, pred, target, w, B, N, delta, err);
}

/* ---- the tensor table ------------------------------------------------------------------ */

int nn_model_tensor_count(const nn_model *m) { return m ? m->n_tensors : 0; }

static void fill_info(const nn__tensor *t, nn_tensor_info *info) {
  info->name = t->name;
  info->ndim = t->ndim;
  for (int i = 0; i < 4; i++) info->shape[i] = i < t->ndim ? t->shape[i] : 0;
  info->offset = t->offset;
  info->numel = t->numel;
  info->trainable = t->trainable;
  info->fan_in = t->fan_in;
  info->fan_out = t->fan_out;
}

int nn_model_tensor(const nn_model *m, int i, nn_tensor_info *info) {
  if (!m || !info || i < 0 || i >= m->n_tensors) return SHOAL_ERANGE;
  fill_info(&m->tensors[i], info);
  return 0;
}

int nn_model_find_tensor(const nn_model *m, const char *name, nn_tensor_info *info) {
  if (!m || !name) return SHOAL_EINVAL;
  for (int i = 0; i < m->n_tensors; i++) {
    if (!strcmp(m->tensors[i].name, name)) {
      if (info) fill_info(&m->tensors[i], info);
      return 0;
    }
  }
  return SHOAL_ENOENT;
}

static void shape_str(const nn__tensor *t, char *buf, size_t n) {
  int k = snprintf(buf, n, "(");
  for (int i = 0; i < t->ndim && k < (int)n; i++)
    k += snprintf(buf + k, n - (size_t)k, i ? ", %d" : "%d", t->shape[i]);
  if (k < (int)n) snprintf(buf + k, n - (size_t)k, ")");
}

int nn_model_copy(nn_model *dst, const nn_model *src, shoal_error *err) {
  if (!dst || !src) return shoal_error_set(err, SHOAL_EINVAL, "nn: copy: model is NULL");
  if (!dst->built || !src->built)
    return shoal_error_set(err, SHOAL_ESTATE, "nn: copy: both models must be built");
  if (dst->n_tensors != src->n_tensors)
    return shoal_error_set(err, SHOAL_ESHAPE, "nn: copy: source has %d tensors, destination %d",
                           src->n_tensors, dst->n_tensors);
  for (int i = 0; i < src->n_tensors; i++) {
    const nn__tensor *a = &src->tensors[i], *b = &dst->tensors[i];
    bool same = !strcmp(a->name, b->name) && a->ndim == b->ndim && a->trainable == b->trainable &&
                a->offset == b->offset;
    for (int k = 0; same && k < a->ndim; k++) same = a->shape[k] == b->shape[k];
    if (!same) {
      char sa[64], sb[64];
      shape_str(a, sa, sizeof sa);
      shape_str(b, sb, sizeof sb);
      return shoal_error_set(err, SHOAL_ESHAPE,
                             "nn: copy: tensor %d is '%s' %s in the source, '%s' %s in the "
                             "destination",
                             i, a->name, sa, b->name, sb);
    }
  }
  if (dst == src) return 0;
  if (dst->be == src->be && dst->be->copy) {
    int rc = dst->be->copy(dst, src, err);
    if (!rc) dst->host_stale = true;
    return rc;
  }
  /* Across backends: through the host mirrors (a device source's are downloaded first). */
  const float *sp = nn_model_params((nn_model *)src, NULL);
  const float *ss = nn_model_state((nn_model *)src, NULL);
  if (!sp || !ss)
    return shoal_error_set(err, SHOAL_ECUDA, "nn: copy: cannot download the source's parameters");
  memcpy(dst->params, sp, src->n_params * sizeof(float));
  memcpy(dst->state, ss, src->n_state * sizeof(float));
  return nn_model_params_changed(dst, err);
}

double nn_model_flops_per_sample(const nn_model *m) {
  if (!m) return 0;
  double f = 0;
  for (int i = 1; i < m->n_nodes; i++) {
    const nn__node *n = &m->nodes[i];
    if (m->built && !n->live) continue;
    const nn__node *x = &m->nodes[n->in[0]];
    switch (n->kind) {
      case NN__DENSE: f += 2.0 * x->F * n->F; break;
      case NN__CONV: f += 2.0 * n->F * x->C * n->kh * n->kw; break;
      case NN__CONVT: f += 2.0 * x->F * n->C * n->kh * n->kw; break;
      case NN__LSTM: f += 2.0 * 4 * n->hidden * (n->num + n->hidden); break;
      case NN__GRU: f += 2.0 * 3 * n->hidden * (n->num + n->hidden); break;
      case NN__CUSTOM: f += n->c_flops; break;
      default: break;
    }
  }
  return f;
}

const char *nn__kind_name(nn__kind k) { return kind_names[k]; }
const char *nn__node_kind(const nn__node *n) {
  return n->kind == NN__CUSTOM ? n->ckind : kind_names[n->kind];
}

int nn_model_find_node(const nn_model *m, const char *name) {
  if (!m || !name) return SHOAL_EINVAL;
  for (int i = 0; i < m->n_nodes; i++)
    if (!strcmp(m->nodes[i].name, name)) return i;
  return SHOAL_ENOENT;
}

/* Parameters a node owns (a shared layer owns none: its tensors are its source's). */
static size_t node_params(const nn_model *m, int id) {
  size_t n = 0;
  const nn__node *nd = &m->nodes[id];
  for (int t = 0; t < m->n_tensors; t++) {
    const nn__tensor *ts = &m->tensors[t];
    /* "<layer>.<suffix>": the last '.' ends the layer's name, which may hold dots */
    size_t len = strlen(nd->name);
    const char *dot = strrchr(ts->name, '.');
    if (ts->trainable && dot && (size_t)(dot - ts->name) == len &&
        !strncmp(ts->name, nd->name, len))
      n += ts->numel;
  }
  return n;
}

size_t nn_model_describe(const nn_model *m, char *buf, size_t n) {
  if (!m) return 0;
  size_t k = 0;
#define PUT(...)                                                                           \
  do {                                                                                     \
    int w_ = snprintf(buf ? buf + (k < n ? k : n) : NULL, k < n ? n - k : 0, __VA_ARGS__); \
    if (w_ > 0) k += (size_t)w_;                                                           \
  } while (0)
  PUT("%-4s %-18s %-20s %-16s %-16s %10s\n", "node", "layer", "name", "input", "output", "params");
  for (int i = 0; i < m->n_nodes; i++) {
    const nn__node *nd = &m->nodes[i];
    char in[48] = "", out[24];
    if (nd->n_in == 1) snprintf(in, sizeof in, "%d", nd->in[0]);
    if (nd->n_in == 2) snprintf(in, sizeof in, "%d, %d", nd->in[0], nd->in[1]);
    snprintf(out, sizeof out, "(%d, %d, %d)", nd->C, nd->H, nd->W);
    PUT("%-4d %-18s %-20s %-16s %-16s %10zu%s\n", i, nn__node_kind(nd), nd->name, in, out,
        node_params(m, i),
        i == m->output || (m->output < 0 && i == m->n_nodes - 1) ? "  <- output" : "");
  }
  PUT("%zu parameters, %zu state values, %.3g MFLOP per sample forward\n", m->n_params, m->n_state,
      nn_model_flops_per_sample(m) / 1e6);
#undef PUT
  return k;
}

int nn_model_profile(nn_model *m, bool on, shoal_error *err) {
  if (!m) return shoal_error_set(err, SHOAL_EINVAL, "nn: profile: model is NULL");
  if (m->device != NN_CPU)
    return shoal_error_set(err, SHOAL_ENOTSUP,
                           "nn: profile: per-layer times are for CPU models (a device's kernels "
                           "run asynchronously; use Nsight Systems)");
  if (on)
    for (int i = 0; i < m->n_nodes; i++)
      memset(m->nodes[i].prof_ns, 0, sizeof m->nodes[i].prof_ns),
          memset(m->nodes[i].prof_calls, 0, sizeof m->nodes[i].prof_calls);
  m->profiling = on;
  return 0;
}

static uint64_t prof_total(const nn__node *n) { return n->prof_ns[0] + n->prof_ns[1]; }

size_t nn_model_profile_table(const nn_model *m, char *buf, size_t n) {
  if (!m) return 0;
  size_t k = 0;
  char nil[1];
  if (!buf) buf = nil, n = 0; /* a length query */
#define PUT(...)                                                              \
  do {                                                                        \
    int w_ = snprintf(buf + (k < n ? k : n), k < n ? n - k : 0, __VA_ARGS__); \
    if (w_ > 0) k += (size_t)w_;                                              \
  } while (0)
  /* the layers that ran, heaviest first (insertion sort: a model has tens of nodes) */
  int ord[NN__PROFILE_MAX], cnt = 0;
  uint64_t all = 0;
  for (int i = 0; i < m->n_nodes; i++) {
    const nn__node *nd = &m->nodes[i];
    if (!nd->prof_calls[0] && !nd->prof_calls[1]) continue;
    all += prof_total(nd);
    if (cnt == NN__PROFILE_MAX) continue;
    int j = cnt++;
    for (; j > 0 && prof_total(&m->nodes[ord[j - 1]]) < prof_total(nd); j--) ord[j] = ord[j - 1];
    ord[j] = i;
  }
  PUT("%-18s %-20s %8s %11s %8s %11s %7s\n", "layer", "name", "fwd", "fwd ms", "bwd", "bwd ms",
      "share");
  for (int q = 0; q < cnt; q++) {
    const nn__node *nd = &m->nodes[ord[q]];
    PUT("%-18s %-20s %8lld %11.3f %8lld %11.3f %6.1f%%\n", nn__node_kind(nd), nd->name,
        (long long)nd->prof_calls[0], (double)nd->prof_ns[0] / 1e6, (long long)nd->prof_calls[1],
        (double)nd->prof_ns[1] / 1e6, all ? 100.0 * (double)prof_total(nd) / (double)all : 0.0);
  }
  PUT("total %.3f ms\n", (double)all / 1e6);
#undef PUT
  return k;
}
