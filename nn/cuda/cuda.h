/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cuda/cuda.h — what the CUDA backend's files share: the per-model context (its
 * stream, the cuBLAS and cuDNN handles, the device buffers, pinned staging), the
 * checking macros, and the launchers of shoal's own kernels (nn/cuda/kernels.cu).
 *
 * Layout on a CUDA model: m->params, m->grads and m->state are host mirrors; the
 * device copies live here (d_params, d_grads, d_state) with the same layout. Every
 * node's out, dout_buf and cache point into the device arena, so the drivers in
 * nn/model.c hand device pointers to the layer kernels unchanged.
 *
 * Errors: every CUDA, cuBLAS and cuDNN call goes through NN_CU / NN_CUBLAS / NN_CUDNN,
 * which name the call, file, line and layer and return SHOAL_ECUDA with the library's
 * error string. Layer backward cannot return a code: there the first failure is kept
 * in the context and nn_model_backward reports it after the pass.
 */
#ifndef SHOAL_NN_CUDA_H
#define SHOAL_NN_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "nn/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nn__cuda nn__cuda;

#define NN__CONV_CACHE 8 /* batch sizes whose algorithm choice a conv node remembers */

/* The algorithms of one convolution node for one batch size. */
typedef struct nn__conv_algos {
  int B; /* 0: empty slot */
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
} nn__conv_algos;

/* Per-node cuDNN descriptors (conv, convT, pools); zero for other kinds. */
typedef struct nn__cuda_node {
  cudnnTensorDescriptor_t x, y, bias; /* x, y re-shaped per call (host-only, cheap) */
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnPoolingDescriptor_t pool;
  nn__conv_algos algos[NN__CONV_CACHE];
  int next_slot; /* round-robin replacement */
} nn__cuda_node;

/* Device scalars of the optimizer's and the losses' reductions, and their pinned
 * host copy (one 64-byte line). */
typedef struct nn__cuda_acc {
  double sum;     /* sum of squares (optimizer) or of the loss terms */
  double bad;     /* count of non-finite terms */
  double norm;    /* optimizer: the global gradient norm */
  double coef;    /* optimizer: clip coefficient applied (1 when none) */
  double step;    /* optimizer: steps taken (skipped steps not counted) */
  double skipped; /* optimizer: 1 when the last step was skipped */
  double pad[2];
} nn__cuda_acc;

struct nn__cuda {
  int device;
  cudaStream_t stream; /* cudaStreamPerThread: the calling thread's stream */
  cublasHandle_t blas;
  cudnnHandle_t dnn;
  float *d_params, *d_grads, *d_state; /* (n_params), (n_params), (n_state) */
  float *d_arena;                      /* every node's out, dout and cache */
  size_t arena_n;
  void *ws; /* cuDNN workspace, ws_bytes, sized at build for max_batch */
  size_t ws_bytes;
  float *ones;         /* (max_batch) ones: bias gradients as a GEMV */
  float *d_prio;       /* (max_batch) replay priorities on their way out */
  nn__cuda_acc *d_acc; /* loss reductions */
  nn__cuda_acc *h_acc; /* pinned */
  float *stage[2];     /* pinned staging for host -> device copies, stage_n floats each */
  size_t stage_n;
  cudaEvent_t stage_ev[2];
  int stage_next;
  nn__cuda_node *nodes; /* (n_nodes) */
  bool pinned;          /* the host mirrors are page-locked (cudaHostRegister) */
  bool sticky;          /* in a call that cannot return a code (backward, zero_grad) */
  int err_code;         /* the first failure of such a call (kept until reported) */
  char err_msg[512];
};

/* A CUDA model's context (m->ctx, set by nn__cuda_create). */
static inline nn__cuda *nn__cu(const nn_model *m) { return (nn__cuda *)m->ctx; }

/* ---- the backend's members (nn/cuda/context.c); nn/internal.h's nn__backend says
 * what each does. ---- */

extern const nn__backend nn__cuda_backend; /* nn/cuda/layers.c */

bool nn__cuda_available(shoal_error *err);
/* A stream and handles on the current device (m->ctx). */
int nn__cuda_create(nn_model *m, shoal_error *err);
void nn__cuda_destroy(nn_model *m); /* everything of m->ctx; NULL is fine */
/* Device buffers, descriptors, algorithm choices for max_batch, then the upload of the
 * host parameters and state. */
int nn__cuda_build(nn_model *m, shoal_error *err);
int nn__cuda_check_input(nn_model *m, const float *x, size_t n, shoal_error *err);
int nn__cuda_check_ptr(nn_model *m, const void *p, const char *what, shoal_error *err);
int nn__cuda_status(nn_model *m, shoal_error *err);
int nn__cuda_sync(nn_model *m, shoal_error *err);
void nn__cuda_zero(nn_model *m, float *dev, size_t n); /* queued memset; failures recorded */
int nn__cuda_pull(nn_model *m, bool grads, shoal_error *err);
int nn__cuda_push(nn_model *m, shoal_error *err);
int nn__cuda_copy_model(nn_model *dst, const nn_model *src, shoal_error *err);
float *nn__cuda_alloc(nn_model *m, size_t n, shoal_error *err);
void nn__cuda_free(nn_model *m, float *p);
int nn__cuda_to_device(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err);
int nn__cuda_to_host(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err);
int nn__cuda_loss(nn_model *m, nn_loss_kind kind, float *loss, float *dpred, const float *pred,
                  const float *target, const float *w, int B, int N, float delta, shoal_error *err);
int nn__cuda_priorities(nn_model *m, float *prio, const float *pred, const float *target, int B,
                        int N, float alpha, float eps, shoal_error *err);
nn__optim_dev *nn__cuda_optim_create(nn_model *m, size_t nbuf, shoal_error *err);
void nn__cuda_optim_destroy(nn__optim_dev *o);
int nn__cuda_optim_step(nn__optim_dev *o, const nn_optim_config *cfg, long step, int ibuf, int iavg,
                        int isq, float *norm, bool *skipped, shoal_error *err);
int nn__cuda_optim_get(nn__optim_dev *o, float *mom, shoal_error *err);
int nn__cuda_optim_set(nn__optim_dev *o, const float *mom, shoal_error *err);

/* Sets conv/pool node n's x and y descriptors for batch B (host-only work). */
int nn__cuda_shape(nn_model *m, nn__node *n, int B, shoal_error *err);
/* The algorithm choice of conv node n for batch B (cached per batch size); NULL on
 * error. */
const nn__conv_algos *nn__cuda_algos(nn_model *m, nn__node *n, int B, shoal_error *err);

/* Fills err and returns SHOAL_ECUDA; inside a call that cannot return a code
 * (c->sticky), also keeps the first such failure for nn__cuda_status. */
int nn__cuda_fail(nn__cuda *c, const char *layer, const char *call, const char *file, int line,
                  const char *what, shoal_error *err);

#define NN__CU_FAIL(c, layer, call, what) \
  nn__cuda_fail((c), (layer), (call), __FILE__, __LINE__, (what), err)

/* Each evaluates call once; on failure records it and returns SHOAL_ECUDA from the
 * enclosing function, which must have `shoal_error *err` in scope (NULL is fine). */
#define NN_CU(c, layer, call)                                                           \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) return NN__CU_FAIL(c, layer, #call, cudaGetErrorString(e_)); \
  } while (0)
#define NN_CUBLAS(c, layer, call)                                                             \
  do {                                                                                        \
    cublasStatus_t s_ = (call);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) return NN__CU_FAIL(c, layer, #call, nn__cublas_str(s_)); \
  } while (0)
#define NN_CUDNN(c, layer, call)                                                                  \
  do {                                                                                            \
    cudnnStatus_t s_ = (call);                                                                    \
    if (s_ != CUDNN_STATUS_SUCCESS) return NN__CU_FAIL(c, layer, #call, cudnnGetErrorString(s_)); \
  } while (0)

const char *nn__cublas_str(cublasStatus_t s);

/* ---- shoal's own kernels (nn/cuda/kernels.cu); each queues on stream s and returns
 * cudaGetLastError() of the launch. acc: add into the output (true) or overwrite. ---- */

/* y (B, N) += b (N) per row. */
cudaError_t nn__k_bias_rows(cudaStream_t s, float *y, const float *b, int B, int N);
/* y = acc ? y + x : x, n floats. */
cudaError_t nn__k_put(cudaStream_t s, float *y, const float *x, size_t n, bool acc);
/* y = acc ? y + a + b : a + b. */
cudaError_t nn__k_add2(cudaStream_t s, float *y, const float *a, const float *b, size_t n,
                       bool acc);
/* y[i] (+)= a[i] * b[i], or a[i] * b[i / F] when bcast (one b per row of F), n floats. */
cudaError_t nn__k_mul(cudaStream_t s, float *y, const float *a, const float *b, size_t n, size_t F,
                      bool bcast, bool acc);
/* d[r] (+)= Σ_j x[r, j] y[r, j] over B rows of F. */
cudaError_t nn__k_rowdot(cudaStream_t s, float *d, const float *x, const float *y, int B, int F,
                         bool acc);
/* For each of B rows: dst[r*dld + j] (+)= src[r*sld + j], j < len. */
cudaError_t nn__k_rows(cudaStream_t s, float *dst, int dld, const float *src, int sld, int B,
                       int len, bool acc);
/* Activations (not softmax): forward y = f(x); backward dx (+)= dy f'(x, y). */
cudaError_t nn__k_act_fwd(cudaStream_t s, int act, float alpha, float *y, const float *x, size_t n);
cudaError_t nn__k_act_bwd(cudaStream_t s, int act, float alpha, float *dx, const float *dy,
                          const float *x, const float *y, size_t n, bool acc);
/* Softmax / log-softmax over each of B rows of F. */
cudaError_t nn__k_softmax_fwd(cudaStream_t s, bool log, float *y, const float *x, int B, int F);
cudaError_t nn__k_softmax_bwd(cudaStream_t s, bool log, float *dx, const float *dy, const float *y,
                              int B, int F, bool acc);
/* Dropout: mask = u >= p ? scale : 0 with u from a counter hash of (seed, i). */
cudaError_t nn__k_dropout_fwd(cudaStream_t s, float *y, float *mask, const float *x, size_t n,
                              float p, float scale, uint64_t seed);
cudaError_t nn__k_mul_put(cudaStream_t s, float *dx, const float *dy, const float *mask, size_t n,
                          bool acc);
/* Batch norm over C channels of B samples of P values (nn/cpu/norm.c's algebra).
 * Training: batch statistics, running stats updated, nbt += 1. Eval: running stats.
 * cache: xhat (B*C*P) then rstd (C) then mean (C). */
cudaError_t nn__k_bn_fwd(cudaStream_t s, float *y, float *xhat, float *rstd, const float *x,
                         const float *gamma, const float *beta, float *rmean, float *rvar,
                         float *nbt, int B, int C, int P, float eps, float momentum, bool training);
cudaError_t nn__k_bn_bwd(cudaStream_t s, float *dx, float *dgamma, float *dbeta, const float *dy,
                         const float *xhat, const float *rstd, const float *gamma, int B, int C,
                         int P, bool training, bool acc);
/* Layer norm over each of B rows of F with an element-wise affine. cache: xhat, rstd. */
cudaError_t nn__k_ln_fwd(cudaStream_t s, float *y, float *xhat, float *rstd, const float *x,
                         const float *gamma, const float *beta, int B, int F, float eps);
cudaError_t nn__k_ln_bwd(cudaStream_t s, float *dx, float *dgamma, float *dbeta, const float *dy,
                         const float *xhat, const float *rstd, const float *gamma, int B, int F,
                         bool acc);
/* Recurrent cells (nn/cpu/rnn.c's equations and cache layouts), per (sample, unit):
 * y (B, N) = b1 + b2 (b2 may be NULL);
 * lstm_fwd: gates (B, 4Hd) pre-activations in, activations out; tc = tanh(c'),
 *   out = [h' | c'] from in = [x | h | c] (row stride I + 2Hd);
 * lstm_bwd: dg (B, 4Hd) and dcp = d c (B, Hd) from dout;
 * gru_fwd: cache (B, 4Hd) = [r | z | n | W_hn h + b_hn], out = h' from gi, gh (B, 3Hd);
 * gru_bwd: dgi, dgh (B, 3Hd) from dout; gru_dh: dx_h += dh' z. */
cudaError_t nn__k_bias_set(cudaStream_t s, float *y, const float *b1, const float *b2, int B,
                           int N);
cudaError_t nn__k_lstm_fwd(cudaStream_t s, float *gates, float *tc, float *out, const float *in,
                           int B, int I, int Hd);
cudaError_t nn__k_lstm_bwd(cudaStream_t s, float *dg, float *dcp, const float *gates,
                           const float *tc, const float *in, const float *dout, int B, int I,
                           int Hd);
cudaError_t nn__k_gru_fwd(cudaStream_t s, float *cache, float *out, const float *gi,
                          const float *gh, const float *in, int B, int I, int Hd);
cudaError_t nn__k_gru_bwd(cudaStream_t s, float *dgi, float *dgh, const float *cache,
                          const float *in, const float *dout, int B, int I, int Hd);
cudaError_t nn__k_gru_dh(cudaStream_t s, float *dx, const float *cache, const float *dout, int B,
                         int I, int Hd);
/* Embedding: y[s, j*dim + k] = W[x[s, j], k] for B*Fx indices. An index that is not
 * an integer in [0, num) gives zeros, counts in acc->bad, and its position goes to
 * acc->pad[0] read as an unsigned 64-bit minimum (acc zeroed, pad[0] all ones before).
 * Backward: dW[x[i]] += dy[i] (atomic adds). */
cudaError_t nn__k_embed_fwd(cudaStream_t s, nn__cuda_acc *acc, float *y, const float *x,
                            const float *w, int B, int Fx, int dim, int num);
cudaError_t nn__k_embed_bwd(cudaStream_t s, float *dw, const float *x, const float *dy, int B,
                            int Fx, int dim);
/* prio (device, B) = (sum_j |pred_ij - target_ij| + eps)^alpha, one thread a sample. */
cudaError_t nn__k_priorities(cudaStream_t s, float *prio, const float *pred, const float *target,
                             int B, int N, float alpha, float eps);
/* num_batches_tracked += 1 (a scalar in device memory). */
cudaError_t nn__k_inc(cudaStream_t s, float *v);

/* Losses (nn.h's formulas): acc->sum += sum_i w_i sum_j l_ij (cross-entropy: the
 * per-sample l_i), acc->bad += non-finite terms; dpred (when not NULL) = w_i dl_ij *
 * scale. kind: nn_loss_kind. acc must be zeroed before. */
cudaError_t nn__k_loss(cudaStream_t s, int kind, nn__cuda_acc *acc, float *dpred, const float *pred,
                       const float *target, const float *w, int B, int N, float delta, float scale);

/* The optimizer step on the device, with no host round trip: sum of squares into
 * acc (zeroed before), then a one-thread kernel that decides (non-finite norm: skip,
 * nothing changes), the clip coefficient and the bias corrections, then the update
 * reading that decision. cfg: nn_optim_config. */
cudaError_t nn__k_sumsq(cudaStream_t s, nn__cuda_acc *acc, const float *g, size_t n);
cudaError_t nn__k_optim(cudaStream_t s, const nn_optim_config *cfg, long step, nn__cuda_acc *acc,
                        float *p, float *g, float *buf, float *exp_avg, float *exp_avg_sq,
                        size_t n);

#ifdef __cplusplus
}
#endif
#endif
