/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cuda/context.c — a CUDA model's context: the device check, one stream and the
 * cuBLAS/cuDNN handles per model, the device buffers carved at build, the algorithm
 * choices of the convolutions, host <-> device copies (pinned staging for batches),
 * the losses' and the optimizer's host halves, and error recording.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cuda/cuda.h"

/* ---- errors ---------------------------------------------------------------------- */

const char *nn__cublas_str(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}

int nn__cuda_fail(nn__cuda *c, const char *layer, const char *call, const char *file, int line,
                  const char *what, shoal_error *err) {
  char msg[512];
  snprintf(msg, sizeof msg, "nn: cuda: layer '%s': %.200s failed (%s:%d): %s", layer ? layer : "-",
           call, file, line, what ? what : "?");
  if (c && c->sticky && !c->err_code) {
    c->err_code = SHOAL_ECUDA;
    memcpy(c->err_msg, msg, sizeof c->err_msg);
  }
  return shoal_error_set(err, SHOAL_ECUDA, "%s", msg);
}

int nn__cuda_status(nn_model *m, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  if (!c->err_code) return 0;
  int rc = shoal_error_set(err, c->err_code, "%s", c->err_msg);
  c->err_code = 0;
  return rc;
}

int nn__cuda_check_ptr(nn_model *m, const void *p, const char *what, shoal_error *err) {
  struct cudaPointerAttributes a;
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return shoal_error_set(err, SHOAL_EINVAL, "nn: %s: cannot tell where %p lives: %s", what, p,
                           cudaGetErrorString(e));
  }
  if (a.type == cudaMemoryTypeUnregistered)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "nn: %s is host memory; a CUDA model takes device memory (copy it "
                           "with nn_model_to_device)",
                           what);
  return 0;
}

int nn__cuda_check_input(nn_model *m, const float *x, size_t n, shoal_error *err) {
  return nn__cuda_check_ptr(m, x, "forward: x", err);
}

int nn__cuda_sync(nn_model *m, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  int rc = nn__cuda_status(m, err);
  if (rc) return rc;
  NN_CU(c, "sync", cudaStreamSynchronize(c->stream));
  /* A fault inside a kernel is sticky in the context and reported here. */
  NN_CU(c, "sync", cudaGetLastError());
  return 0;
}

/* ---- device and context ------------------------------------------------------------- */

bool nn__cuda_available(shoal_error *err) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    shoal_error_set(err, SHOAL_ENOTSUP, "nn: no CUDA device (cudaGetDeviceCount: %s)",
                    e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    (void)cudaGetLastError(); /* clear it, so later calls do not see it */
    return false;
  }
  return true;
}

int nn__cuda_create(nn_model *m, shoal_error *err) {
  shoal_error why = {0};
  if (!nn__cuda_available(&why)) {
    const char *w = strncmp(why.msg, "nn: ", 4) ? why.msg : why.msg + 4;
    return shoal_error_set(err, SHOAL_ENOTSUP, "nn: cannot create a CUDA model: %s", w);
  }
  nn__cuda *c = calloc(1, sizeof *c);
  if (!c) return shoal_error_set(err, SHOAL_ENOMEM, "nn: cuda: out of memory");
  m->ctx = c;
  NN_CU(c, "create", cudaGetDevice(&c->device));
  /* The calling thread's own stream (not the legacy default one): every model used
   * by one thread queues in call order, so G's output feeding D, a batch uploaded for
   * the target network or D's input gradient fed to G need no cross-stream events,
   * and models used by different threads do not wait for each other. */
  c->stream = cudaStreamPerThread;
  NN_CUBLAS(c, "create", cublasCreate(&c->blas));
  NN_CUBLAS(c, "create", cublasSetStream(c->blas, c->stream));
  /* Plain FP32 (no TF32), so results agree with the CPU backend to float rounding. */
  NN_CUBLAS(c, "create", cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
  NN_CUDNN(c, "create", cudnnCreate(&c->dnn));
  NN_CUDNN(c, "create", cudnnSetStream(c->dnn, c->stream));
  for (int i = 0; i < 2; i++)
    NN_CU(c, "create", cudaEventCreateWithFlags(&c->stage_ev[i], cudaEventDisableTiming));
  return 0;
}

static void free_node(nn__cuda_node *d) {
  if (d->x) cudnnDestroyTensorDescriptor(d->x);
  if (d->y) cudnnDestroyTensorDescriptor(d->y);
  if (d->bias) cudnnDestroyTensorDescriptor(d->bias);
  if (d->w) cudnnDestroyFilterDescriptor(d->w);
  if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
  if (d->pool) cudnnDestroyPoolingDescriptor(d->pool);
}

/* Frees the device buffers of a build (the handles stay). */
static void free_buffers(nn_model *m) {
  nn__cuda *c = nn__cu(m);
  if (c->pinned) {
    cudaHostUnregister(m->params), cudaHostUnregister(m->grads);
    if (m->n_state) cudaHostUnregister(m->state);
    c->pinned = false;
  }
  if (c->nodes)
    for (int i = 0; i < m->n_nodes; i++) free_node(&c->nodes[i]);
  free(c->nodes);
  c->nodes = NULL;
  cudaFree(c->d_params), cudaFree(c->d_grads), cudaFree(c->d_state), cudaFree(c->d_arena);
  cudaFree(c->ws), cudaFree(c->ones), cudaFree(c->d_prio), cudaFree(c->d_acc);
  cudaFreeHost(c->h_acc), cudaFreeHost(c->stage[0]);
  c->d_params = c->d_grads = c->d_state = c->d_arena = c->ones = c->d_prio = NULL;
  c->ws = NULL, c->d_acc = NULL, c->h_acc = NULL, c->stage[0] = c->stage[1] = NULL;
}

void nn__cuda_destroy(nn_model *m) {
  nn__cuda *c = nn__cu(m);
  if (!c) return;
  cudaStreamSynchronize(c->stream);
  free_buffers(m);
  for (int i = 0; i < 2; i++)
    if (c->stage_ev[i]) cudaEventDestroy(c->stage_ev[i]);
  if (c->dnn) cudnnDestroy(c->dnn);
  if (c->blas) cublasDestroy(c->blas);
  free(c);
  m->ctx = NULL;
  m->arena = NULL; /* it was d_arena */
  m->arena_n = 0;
}

/* ---- build --------------------------------------------------------------------------- */

static bool is_view(nn__kind k) { return k == NN__FLATTEN || k == NN__RESHAPE; }
static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; } /* 256-byte starts */

/* Floats of a node's cache on the device (see the kernels' comments). */
static size_t cache_floats(const nn__node *n, int max_batch) {
  size_t mb = (size_t)max_batch, F = (size_t)n->F;
  switch (n->kind) {
    case NN__DROPOUT: return mb * F;                      /* mask */
    case NN__BATCHNORM: return mb * F + 2 * (size_t)n->C; /* xhat, rstd, mean */
    case NN__LAYERNORM:
      return mb * F + mb; /* xhat, rstd */
    /* LSTM: gates (4Hd), tanh(c') (Hd), then the backward's dg (4Hd) and dc (Hd);
     * GRU: [r | z | n | hn] (4Hd), then gi, gh or their gradients (3Hd each) */
    case NN__LSTM:
    case NN__GRU: return mb * 10 * (size_t)n->hidden;
    case NN__CUSTOM: return mb * n->c_cps + n->c_cfix; /* what the layer asked for */
    default: return 0;
  }
}

static int set4d(nn__cuda *c, const nn__node *n, cudnnTensorDescriptor_t d, int B, int C, int H,
                 int W, shoal_error *err) {
  NN_CUDNN(c, n->name,
           cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, C, H, W));
  return 0;
}

/* Sets a conv or pool node's x and y descriptors for batch B (host-only work). */
int nn__cuda_shape(nn_model *m, nn__node *n, int B, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  nn__cuda_node *d = &c->nodes[n->id];
  const nn__node *x = &m->nodes[n->in[0]];
  int rc = set4d(c, n, d->x, B, x->C, x->H, x->W, err);
  if (!rc) rc = set4d(c, n, d->y, B, n->C, n->H, n->W, err);
  return rc;
}

/* Workspace limit per convolution: algorithms needing more are passed over. */
#define NN__WS_CAP ((size_t)512 << 20)

/* The algorithms of conv node n at batch B: remembered per batch size. At build (for
 * max_batch) cuDNN's Find times every algorithm; other batch sizes take cuDNN's
 * heuristic choice that fits the workspace, which costs no device time or memory. */
static int choose_algos(nn_model *m, nn__node *n, int B, bool find, nn__conv_algos *out,
                        size_t *need, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  nn__cuda_node *d = &c->nodes[n->id];
  int rc = nn__cuda_shape(m, n, B, err);
  if (rc) return rc;
  /* In cuDNN's terms a conv maps X -> Y; a transposed conv is the gradient of the conv
   * that maps its output to its input, so the roles swap. */
  bool t = n->kind == NN__CONVT;
  cudnnTensorDescriptor_t X = t ? d->y : d->x, Y = t ? d->x : d->y;
  size_t cap = find ? NN__WS_CAP : c->ws_bytes;
  int got = 0;
  *need = 0;
  {
    cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    if (find)
      NN_CUDNN(c, n->name,
               cudnnFindConvolutionForwardAlgorithm(c->dnn, X, d->w, d->conv, Y,
                                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p));
    else
      NN_CUDNN(c, n->name,
               cudnnGetConvolutionForwardAlgorithm_v7(c->dnn, X, d->w, d->conv, Y,
                                                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p));
    int k = 0;
    while (k < got && (p[k].status != CUDNN_STATUS_SUCCESS || p[k].memory > cap)) k++;
    if (k == got)
      return shoal_error_set(err, SHOAL_ECUDA,
                             "nn: cuda: layer '%s': no cuDNN forward algorithm fits %zu bytes",
                             n->name, cap);
    out->fwd = p[k].algo;
    if (p[k].memory > *need) *need = p[k].memory;
  }
  {
    cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    if (find)
      NN_CUDNN(c, n->name,
               cudnnFindConvolutionBackwardDataAlgorithm(
                   c->dnn, d->w, Y, d->conv, X, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, p));
    else
      NN_CUDNN(c, n->name,
               cudnnGetConvolutionBackwardDataAlgorithm_v7(
                   c->dnn, d->w, Y, d->conv, X, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, p));
    int k = 0;
    while (k < got && (p[k].status != CUDNN_STATUS_SUCCESS || p[k].memory > cap)) k++;
    if (k == got)
      return shoal_error_set(
          err, SHOAL_ECUDA, "nn: cuda: layer '%s': no cuDNN backward-data algorithm fits", n->name);
    out->bwd_data = p[k].algo;
    if (p[k].memory > *need) *need = p[k].memory;
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    if (find)
      NN_CUDNN(c, n->name,
               cudnnFindConvolutionBackwardFilterAlgorithm(
                   c->dnn, X, Y, d->conv, d->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, p));
    else
      NN_CUDNN(c, n->name,
               cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                   c->dnn, X, Y, d->conv, d->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, p));
    int k = 0;
    while (k < got && (p[k].status != CUDNN_STATUS_SUCCESS || p[k].memory > cap)) k++;
    if (k == got)
      return shoal_error_set(err, SHOAL_ECUDA,
                             "nn: cuda: layer '%s': no cuDNN backward-filter algorithm fits",
                             n->name);
    out->bwd_filter = p[k].algo;
    if (p[k].memory > *need) *need = p[k].memory;
  }
  out->B = B;
  return 0;
}

const nn__conv_algos *nn__cuda_algos(nn_model *m, nn__node *n, int B, shoal_error *err) {
  nn__cuda_node *d = &nn__cu(m)->nodes[n->id];
  for (int i = 0; i < NN__CONV_CACHE; i++)
    if (d->algos[i].B == B) return &d->algos[i];
  nn__conv_algos a;
  size_t need;
  if (choose_algos(m, n, B, false, &a, &need, err)) return NULL;
  nn__conv_algos *slot = &d->algos[d->next_slot];
  d->next_slot = (d->next_slot + 1) % NN__CONV_CACHE;
  *slot = a;
  return slot;
}

static int node_descriptors(nn_model *m, nn__node *n, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  nn__cuda_node *d = &c->nodes[n->id];
  const nn__node *x = &m->nodes[n->in[0]];
  if (n->kind != NN__CONV && n->kind != NN__CONVT && n->kind != NN__MAXPOOL &&
      n->kind != NN__AVGPOOL && n->kind != NN__BATCHNORM)
    return 0;
  NN_CUDNN(c, n->name, cudnnCreateTensorDescriptor(&d->x));
  NN_CUDNN(c, n->name, cudnnCreateTensorDescriptor(&d->y));
  if (n->kind == NN__BATCHNORM) { /* scale, bias, means and variances: (1, C, 1, 1) */
    NN_CUDNN(c, n->name, cudnnCreateTensorDescriptor(&d->bias));
    NN_CUDNN(
        c, n->name,
        cudnnSetTensor4dDescriptor(d->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, n->C, 1, 1));
    return 0;
  }
  if (n->kind == NN__MAXPOOL || n->kind == NN__AVGPOOL) {
    NN_CUDNN(c, n->name, cudnnCreatePoolingDescriptor(&d->pool));
    /* PyTorch's: max pads with -inf and passes NaN on; avg counts the padding. */
    cudnnPoolingMode_t mode =
        n->kind == NN__MAXPOOL ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    NN_CUDNN(c, n->name,
             cudnnSetPooling2dDescriptor(d->pool, mode, CUDNN_PROPAGATE_NAN, n->kh, n->kw, n->pad,
                                         n->pad, n->stride, n->stride));
    return 0;
  }
  NN_CUDNN(c, n->name, cudnnCreateTensorDescriptor(&d->bias));
  NN_CUDNN(c, n->name, cudnnCreateFilterDescriptor(&d->w));
  NN_CUDNN(c, n->name, cudnnCreateConvolutionDescriptor(&d->conv));
  NN_CUDNN(c, n->name,
           cudnnSetTensor4dDescriptor(d->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, n->C, 1, 1));
  /* conv weight (out, in, kh, kw); convT weight (in, out, kh, kw), PyTorch's layouts,
   * which are cuDNN's filter (K, C, kh, kw) of the conv and of the conv it inverts. */
  int K = n->kind == NN__CONV ? n->C : x->C, C = n->kind == NN__CONV ? x->C : n->C;
  NN_CUDNN(
      c, n->name,
      cudnnSetFilter4dDescriptor(d->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, n->kh, n->kw));
  NN_CUDNN(c, n->name,
           cudnnSetConvolution2dDescriptor(d->conv, n->pad, n->pad, n->stride, n->stride, n->dil,
                                           n->dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  /* FMA math: no TF32 tensor-core rounding, so the CPU's results hold to float error. */
  NN_CUDNN(c, n->name, cudnnSetConvolutionMathType(d->conv, CUDNN_FMA_MATH));
  return 0;
}

static int upload(nn_model *m, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  NN_CU(c, "upload",
        cudaMemcpyAsync(c->d_params, m->params, m->n_params * sizeof(float), cudaMemcpyHostToDevice,
                        c->stream));
  if (m->n_state)
    NN_CU(c, "upload",
          cudaMemcpyAsync(c->d_state, m->state, m->n_state * sizeof(float), cudaMemcpyHostToDevice,
                          c->stream));
  NN_CU(c, "upload", cudaStreamSynchronize(c->stream));
  return 0;
}

static int build(nn_model *m, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  int mb = m->max_batch;
  c->nodes = calloc((size_t)m->n_nodes, sizeof *c->nodes);
  if (!c->nodes) return shoal_error_set(err, SHOAL_ENOMEM, "nn: cuda: build: out of memory");

  /* Convolution algorithms for max_batch, timed by cuDNN; the workspace is the most
   * any chosen one needs. */
  size_t ws = 0;
  for (int i = 1; i < m->n_nodes; i++) {
    nn__node *n = &m->nodes[i];
    if (!n->live) continue;
    int rc = node_descriptors(m, n, err);
    if (rc) return rc;
    if (n->kind == NN__CONV || n->kind == NN__CONVT) {
      size_t need = 0;
      nn__cuda_node *d = &c->nodes[i];
      rc = choose_algos(m, n, mb, true, &d->algos[0], &need, err);
      if (rc) return rc;
      d->next_slot = 1;
      if (need > ws) ws = need;
    }
  }
  c->ws_bytes = ws;
  if (ws) NN_CU(c, "build", cudaMalloc(&c->ws, ws));

  size_t total = 0;
  for (int i = 0; i < m->n_nodes; i++) {
    nn__node *n = &m->nodes[i];
    if (!n->live) continue;
    size_t f = (size_t)mb * (size_t)n->F;
    size_t own = (i == 0 || is_view(n->kind)) ? 0 : f;
    n->cache_n = cache_floats(n, mb);
    total += round64(own) + round64(f) + round64(n->cache_n);
  }
  NN_CU(c, "build", cudaMalloc((void **)&c->d_params, (m->n_params ? m->n_params : 1) * 4));
  NN_CU(c, "build", cudaMalloc((void **)&c->d_grads, (m->n_params ? m->n_params : 1) * 4));
  NN_CU(c, "build", cudaMalloc((void **)&c->d_state, (m->n_state ? m->n_state : 1) * 4));
  NN_CU(c, "build", cudaMalloc((void **)&c->d_arena, (total ? total : 1) * sizeof(float)));
  NN_CU(c, "build", cudaMalloc((void **)&c->ones, (size_t)mb * sizeof(float)));
  NN_CU(c, "build", cudaMalloc((void **)&c->d_prio, (size_t)mb * sizeof(float)));
  NN_CU(c, "build", cudaMalloc((void **)&c->d_acc, sizeof *c->d_acc));
  NN_CU(c, "build", cudaMallocHost((void **)&c->h_acc, sizeof *c->h_acc));
  NN_CU(c, "build", cudaMemsetAsync(c->d_grads, 0, (m->n_params ? m->n_params : 1) * 4, c->stream));
  NN_CU(c, "build", cudaMemsetAsync(c->d_arena, 0, (total ? total : 1) * 4, c->stream));
  c->arena_n = total;

  /* Staging: a batch of the input or the output at once, double-buffered so that the
   * copy of one overlaps the fill of the next. */
  size_t fmax = (size_t)m->nodes[0].F;
  if ((size_t)m->nodes[m->output].F > fmax) fmax = (size_t)m->nodes[m->output].F;
  c->stage_n = (size_t)mb * fmax;
  if (c->stage_n < ((size_t)1 << 16)) c->stage_n = (size_t)1 << 16;
  NN_CU(c, "build", cudaMallocHost((void **)&c->stage[0], 2 * c->stage_n * sizeof(float)));
  c->stage[1] = c->stage[0] + c->stage_n;

  float *p = c->d_arena;
  for (int i = 0; i < m->n_nodes; i++) {
    nn__node *n = &m->nodes[i];
    if (!n->live) continue;
    size_t f = (size_t)mb * (size_t)n->F;
    if (!(i == 0 || is_view(n->kind))) n->out = p, p += round64(f);
    n->dout_buf = p, p += round64(f);
    n->cache = n->cache_n ? p : NULL;
    p += round64(n->cache_n);
  }
  SHOAL_ASSERT(p == c->d_arena + total);
  m->arena = c->d_arena; /* nn_model_forward's "x inside the model" check */
  m->arena_n = total;

  /* ones for the bias gradients (a GEMV with the output gradient) */
  for (size_t done = 0; done < (size_t)mb;) {
    size_t k = (size_t)mb - done < c->stage_n ? (size_t)mb - done : c->stage_n;
    for (size_t i = 0; i < k; i++) c->stage[0][i] = 1.0f;
    NN_CU(c, "build",
          cudaMemcpyAsync(c->ones + done, c->stage[0], k * sizeof(float), cudaMemcpyHostToDevice,
                          c->stream));
    NN_CU(c, "build", cudaStreamSynchronize(c->stream));
    done += k;
  }
  /* Page-locked host mirrors: parameter downloads (to actors, checkpoints) at full
   * speed. Best effort: where the system refuses, they stay pageable and work alike. */
  size_t pb = (m->n_params ? m->n_params : 1) * sizeof(float);
  if (cudaHostRegister(m->params, pb, cudaHostRegisterDefault) == cudaSuccess) {
    if (cudaHostRegister(m->grads, pb, cudaHostRegisterDefault) == cudaSuccess &&
        (!m->n_state || cudaHostRegister(m->state, m->n_state * sizeof(float),
                                         cudaHostRegisterDefault) == cudaSuccess)) {
      c->pinned = true;
    } else {
      cudaHostUnregister(m->params);
      cudaHostUnregister(m->grads); /* an error when it was not registered; cleared below */
    }
  }
  (void)cudaGetLastError(); /* a refused registration is no failure of the model */
  return upload(m, err);
}

int nn__cuda_build(nn_model *m, shoal_error *err) {
  int rc = build(m, err);
  if (rc) {
    free_buffers(m);
    m->arena = NULL;
    m->arena_n = 0;
  }
  return rc;
}

/* ---- memory and copies ------------------------------------------------------------- */

void nn__cuda_zero(nn_model *m, float *dev, size_t n) {
  nn__cuda *c = nn__cu(m);
  shoal_error *err = NULL;
  cudaError_t e = cudaMemsetAsync(dev ? dev : c->d_grads, 0, n * sizeof(float), c->stream);
  c->sticky = true;
  if (e != cudaSuccess)
    NN__CU_FAIL(c, dev ? "backward" : "zero_grad", "cudaMemsetAsync", cudaGetErrorString(e));
  c->sticky = false;
}

int nn__cuda_pull(nn_model *m, bool grads, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  int rc = nn__cuda_status(m, err);
  if (rc) return rc;
  NN_CU(c, "download",
        cudaMemcpyAsync(m->params, c->d_params, m->n_params * sizeof(float), cudaMemcpyDeviceToHost,
                        c->stream));
  if (m->n_state)
    NN_CU(c, "download",
          cudaMemcpyAsync(m->state, c->d_state, m->n_state * sizeof(float), cudaMemcpyDeviceToHost,
                          c->stream));
  if (grads)
    NN_CU(c, "download",
          cudaMemcpyAsync(m->grads, c->d_grads, m->n_params * sizeof(float), cudaMemcpyDeviceToHost,
                          c->stream));
  NN_CU(c, "download", cudaStreamSynchronize(c->stream));
  return 0;
}

int nn__cuda_push(nn_model *m, shoal_error *err) {
  int rc = nn__cuda_status(m, err);
  return rc ? rc : upload(m, err);
}

int nn__cuda_copy_model(nn_model *dst, const nn_model *src, shoal_error *err) {
  nn__cuda *c = nn__cu(dst), *s = nn__cu(src);
  /* The source's queued work (its last optimizer step) must land first. */
  NN_CU(c, "copy", cudaStreamSynchronize(s->stream));
  NN_CU(c, "copy",
        cudaMemcpyAsync(c->d_params, s->d_params, src->n_params * sizeof(float),
                        cudaMemcpyDeviceToDevice, c->stream));
  if (src->n_state)
    NN_CU(c, "copy",
          cudaMemcpyAsync(c->d_state, s->d_state, src->n_state * sizeof(float),
                          cudaMemcpyDeviceToDevice, c->stream));
  return 0;
}

float *nn__cuda_alloc(nn_model *m, size_t n, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  float *p = NULL;
  cudaError_t e = cudaMalloc((void **)&p, (n ? n : 1) * sizeof(float));
  if (e == cudaSuccess) e = cudaMemset(p, 0, (n ? n : 1) * sizeof(float));
  if (e != cudaSuccess) {
    shoal_error_set(err, SHOAL_ENOMEM, "nn: cuda: cannot allocate %zu floats on the device: %s", n,
                    cudaGetErrorString(e));
    (void)c;
    if (p) cudaFree(p);
    return NULL;
  }
  return p;
}

void nn__cuda_free(nn_model *m, float *p) {
  cudaStreamSynchronize(nn__cu(m)->stream); /* queued work may still read it */
  cudaFree(p);
}

int nn__cuda_to_device(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  if (!c->stage[0])
    return shoal_error_set(err, SHOAL_ESTATE, "nn: to_device: the model is not built");
  for (size_t done = 0; done < n;) {
    size_t k = n - done < c->stage_n ? n - done : c->stage_n;
    int b = c->stage_next;
    c->stage_next ^= 1;
    /* The copy that last used this half must have left it. */
    NN_CU(c, "to_device", cudaEventSynchronize(c->stage_ev[b]));
    float *st = c->stage[b];
    const float *s = src + done;
    uint32_t bad = 0;
    for (size_t i = 0; i < k; i++) {
      uint32_t u;
      memcpy(&u, &s[i], sizeof u);
      bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
      st[i] = s[i];
    }
    if (bad) {
      size_t i = 0;
      while (isfinite(s[i])) i++;
      return shoal_error_set(err, SHOAL_ENAN, "nn: to_device: src[%zu] is %s", done + i,
                             isnan(s[i]) ? "NaN" : "infinite");
    }
    NN_CU(c, "to_device",
          cudaMemcpyAsync(dst + done, st, k * sizeof(float), cudaMemcpyHostToDevice, c->stream));
    NN_CU(c, "to_device", cudaEventRecord(c->stage_ev[b], c->stream));
    done += k;
  }
  return 0;
}

int nn__cuda_to_host(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  int rc = nn__cuda_status(m, err);
  if (rc) return rc;
  if (n)
    NN_CU(c, "to_host",
          cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
  NN_CU(c, "to_host", cudaStreamSynchronize(c->stream));
  NN_CU(c, "to_host", cudaGetLastError());
  return 0;
}

/* ---- losses ------------------------------------------------------------------------ */

int nn__cuda_loss(nn_model *m, nn_loss_kind kind, float *loss, float *dpred, const float *pred,
                  const float *target, const float *w, int B, int N, float delta,
                  shoal_error *err) {
  static const char *names[] = {"mse", "huber", "bce_with_logits", "cross_entropy"};
  nn__cuda *c = nn__cu(m);
  if (!pred || !target || B < 1 || N < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: %s loss: NULL input or B %d, N %d < 1",
                           names[kind], B, N);
  if (kind == NN_LOSS_HUBER && !(delta > 0))
    return shoal_error_set(err, SHOAL_EINVAL, "nn: huber loss: delta %g must be > 0",
                           (double)delta);
  if (!c->d_acc) return shoal_error_set(err, SHOAL_ESTATE, "nn: loss: the model is not built");
  int rc = nn__cuda_check_ptr(m, pred, "loss: pred", err);
  if (!rc) rc = nn__cuda_check_ptr(m, target, "loss: target", err);
  if (!rc && w) rc = nn__cuda_check_ptr(m, w, "loss: w", err);
  if (!rc && dpred) rc = nn__cuda_check_ptr(m, dpred, "loss: dpred", err);
  if (rc) return rc;
  /* mean over every term; cross-entropy's over the B samples */
  double scale = 1.0 / ((double)B * (kind == NN_LOSS_CROSS_ENTROPY ? 1.0 : (double)N));
  NN_CU(c, names[kind], cudaMemsetAsync(c->d_acc, 0, sizeof *c->d_acc, c->stream));
  NN_CU(c, names[kind],
        nn__k_loss(c->stream, (int)kind, c->d_acc, dpred, pred, target, w, B, N, delta,
                   (float)scale));
  if (!loss) return 0;
  NN_CU(c, names[kind],
        cudaMemcpyAsync(c->h_acc, c->d_acc, sizeof *c->h_acc, cudaMemcpyDeviceToHost, c->stream));
  NN_CU(c, names[kind], cudaStreamSynchronize(c->stream));
  rc = nn__cuda_status(m, err);
  if (rc) return rc;
  double l = c->h_acc->sum * scale;
  if (c->h_acc->bad > 0 || !isfinite(l))
    return shoal_error_set(err, SHOAL_ENAN,
                           "nn: %s loss: %.0f non-finite terms (a NaN or infinity in pred, target "
                           "or w), loss %g",
                           names[kind], c->h_acc->bad, l);
  *loss = (float)l;
  return 0;
}

int nn__cuda_priorities(nn_model *m, float *prio, const float *pred, const float *target, int B,
                        int N, float alpha, float eps, shoal_error *err) {
  nn__cuda *c = nn__cu(m);
  int rc = nn__cuda_check_ptr(m, pred, "priorities: pred", err);
  if (!rc) rc = nn__cuda_check_ptr(m, target, "priorities: target", err);
  if (rc) return rc;
  NN_CU(c, "priorities", nn__k_priorities(c->stream, c->d_prio, pred, target, B, N, alpha, eps));
  return nn__cuda_to_host(m, prio, c->d_prio, (size_t)B, err);
}

/* ---- the optimizer's device half ----------------------------------------------------- */

struct nn__optim_dev {
  nn_model *m;
  size_t n, nbuf;
  float *d_mom;        /* (nbuf * n), the host's layout */
  nn__cuda_acc *d_acc; /* the step's decision */
  nn__cuda_acc *h_acc; /* pinned */
};

nn__optim_dev *nn__cuda_optim_create(nn_model *m, size_t nbuf, shoal_error *err) {
  nn__optim_dev *o = calloc(1, sizeof *o);
  if (!o) {
    shoal_error_set(err, SHOAL_ENOMEM, "nn: optimizer: out of memory");
    return NULL;
  }
  o->m = m, o->n = m->n_params, o->nbuf = nbuf;
  cudaError_t e = cudaSuccess;
  if (nbuf) e = cudaMalloc((void **)&o->d_mom, nbuf * o->n * sizeof(float));
  if (e == cudaSuccess && nbuf) e = cudaMemset(o->d_mom, 0, nbuf * o->n * sizeof(float));
  if (e == cudaSuccess) e = cudaMalloc((void **)&o->d_acc, sizeof *o->d_acc);
  if (e == cudaSuccess) e = cudaMallocHost((void **)&o->h_acc, sizeof *o->h_acc);
  if (e != cudaSuccess) {
    shoal_error_set(err, SHOAL_ECUDA,
                    "nn: optimizer: cannot allocate moments for %zu parameters on the device: %s",
                    o->n, cudaGetErrorString(e));
    nn__cuda_optim_destroy(o);
    return NULL;
  }
  return o;
}

void nn__cuda_optim_destroy(nn__optim_dev *o) {
  if (!o) return;
  if (o->m && o->m->ctx) cudaStreamSynchronize(nn__cu(o->m)->stream);
  cudaFree(o->d_mom), cudaFree(o->d_acc), cudaFreeHost(o->h_acc);
  free(o);
}

int nn__cuda_optim_step(nn__optim_dev *o, const nn_optim_config *cfg, long step, int ibuf, int iavg,
                        int isq, float *norm, bool *skipped, shoal_error *err) {
  nn_model *m = o->m;
  nn__cuda *c = nn__cu(m);
  int rc = nn__cuda_status(m, err);
  if (rc) return rc;
  float *mom = o->d_mom;
  float *buf = ibuf >= 0 ? mom + (size_t)ibuf * o->n : NULL;
  float *avg = iavg >= 0 ? mom + (size_t)iavg * o->n : NULL;
  float *sq = isq >= 0 ? mom + (size_t)isq * o->n : NULL;
  NN_CU(c, "optimizer", cudaMemsetAsync(o->d_acc, 0, sizeof *o->d_acc, c->stream));
  NN_CU(c, "optimizer", nn__k_sumsq(c->stream, o->d_acc, c->d_grads, o->n));
  NN_CU(c, "optimizer",
        nn__k_optim(c->stream, cfg, step, o->d_acc, c->d_params, c->d_grads, buf, avg, sq, o->n));
  /* The decision comes back with the step: 48 bytes, one wait per step. */
  NN_CU(c, "optimizer",
        cudaMemcpyAsync(o->h_acc, o->d_acc, sizeof *o->h_acc, cudaMemcpyDeviceToHost, c->stream));
  NN_CU(c, "optimizer", cudaStreamSynchronize(c->stream));
  NN_CU(c, "optimizer", cudaGetLastError());
  *norm = (float)o->h_acc->norm;
  *skipped = o->h_acc->skipped != 0;
  return 0;
}

int nn__cuda_optim_get(nn__optim_dev *o, float *mom, shoal_error *err) {
  nn__cuda *c = nn__cu(o->m);
  if (o->nbuf)
    NN_CU(c, "optimizer",
          cudaMemcpyAsync(mom, o->d_mom, o->nbuf * o->n * sizeof(float), cudaMemcpyDeviceToHost,
                          c->stream));
  NN_CU(c, "optimizer", cudaStreamSynchronize(c->stream));
  return 0;
}

/* The host keeps the step count and passes it to each step. */
int nn__cuda_optim_set(nn__optim_dev *o, const float *mom, shoal_error *err) {
  nn__cuda *c = nn__cu(o->m);
  if (o->nbuf && mom)
    NN_CU(c, "optimizer",
          cudaMemcpyAsync(o->d_mom, mom, o->nbuf * o->n * sizeof(float), cudaMemcpyHostToDevice,
                          c->stream));
  NN_CU(c, "optimizer", cudaStreamSynchronize(c->stream));
  return 0;
}
