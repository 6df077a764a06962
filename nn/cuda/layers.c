/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cuda/layers.c — the CUDA backend's layer table: dense through cuBLAS, conv,
 * transposed conv and pools through cuDNN, the rest through shoal's own kernels
 * (nn/cuda/kernels.cu). Same contract as the CPU layers (nn/internal.h): forward
 * writes n->out; backward adds parameter gradients and writes or adds the input
 * gradients that nn__dinput hands out. All work is queued on the model's stream.
 *
 * Backward cannot return a code: a failure is recorded in the context by the checking
 * macros and nn_model_backward reports it after the pass.
 *
 * The embedding's forward waits for the device once, to report an index out of range
 * as the CPU backend does (SHOAL_ERANGE naming the sample and position).
 */
#include <string.h>

#include "nn/cuda/cuda.h"

static const float ONE = 1.0f, ZERO = 0.0f;

#define CTX nn__cuda *c = nn__cu(m)
#define S (c->stream)
#define P(k) (c->d_params + n->poff[k])
#define G(k) (c->d_grads + n->poff[k])
#define ST(k) (c->d_state + n->soff[k])
/* A backward that can't fail outwardly: its checked body records any failure. */
#define BACKWARD(name)                                           \
  static void name##_backward(nn_model *m, nn__node *n, int B) { \
    nn__cu(m)->sticky = true;                                    \
    (void)name##_bwd(m, n, B, NULL);                             \
    nn__cu(m)->sticky = false;                                   \
  }

static inline const nn__node *in0(nn_model *m, nn__node *n) { return &m->nodes[n->in[0]]; }

/* ---- dense: y (B, out) = x (B, in) W^T + b (none with NN_NO_BIAS); W (out, in) ----
 * cuBLAS is column-major: a row-major (B, out) matrix is its column-major (out, B),
 * so y^T = W x^T is gemm(T, N) with W read as (in, out). */

static int dense_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const nn__node *x = in0(m, n);
  int in = x->F, out = n->F;
  NN_CUBLAS(c, n->name,
            cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, B, in, &ONE, P(0), in, x->out, in,
                        &ZERO, n->out, out));
  if (n->bias) NN_CU(c, n->name, nn__k_bias_rows(S, n->out, P(1), B, out));
  return 0;
}

static int dense_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const nn__node *x = in0(m, n);
  int in = x->F, out = n->F;
  const float *dy = n->dout;
  /* dW (out, in) += dy^T x; db += dy^T 1 */
  NN_CUBLAS(c, n->name,
            cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, B, &ONE, x->out, in, dy, out,
                        &ONE, G(0), in));
  if (n->bias)
    NN_CUBLAS(c, n->name,
              cublasSgemv(c->blas, CUBLAS_OP_N, out, B, &ONE, dy, out, c->ones, 1, &ONE, G(1), 1));
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (dx) /* dx (B, in) = dy W */
    NN_CUBLAS(c, n->name,
              cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, B, out, &ONE, P(0), in, dy, out,
                          acc ? &ONE : &ZERO, dx, in));
  return 0;
}
BACKWARD(dense)

/* ---- conv2d and conv_transpose2d through cuDNN ------------------------------------
 * conv: y = conv(x, W) + b (b only with a bias). convT is the input gradient of the conv that maps
 * its output back to its input, so its forward is cuDNN's backward-data, its input gradient cuDNN's
 * forward, and its weight gradient cuDNN's backward-filter with the roles of x and y swapped. */

static int conv_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  nn__cuda_node *d = &c->nodes[n->id];
  const nn__node *x = in0(m, n);
  int rc = nn__cuda_shape(m, n, B, err);
  if (rc) return rc;
  const nn__conv_algos *a = nn__cuda_algos(m, n, B, err);
  if (!a) return SHOAL_ECUDA;
  if (n->kind == NN__CONV)
    NN_CUDNN(c, n->name,
             cudnnConvolutionForward(c->dnn, &ONE, d->x, x->out, d->w, P(0), d->conv, a->fwd, c->ws,
                                     c->ws_bytes, &ZERO, d->y, n->out));
  else
    NN_CUDNN(c, n->name,
             cudnnConvolutionBackwardData(c->dnn, &ONE, d->w, P(0), d->x, x->out, d->conv,
                                          a->bwd_data, c->ws, c->ws_bytes, &ZERO, d->y, n->out));
  if (n->bias)
    NN_CUDNN(c, n->name, cudnnAddTensor(c->dnn, &ONE, d->bias, P(1), &ONE, d->y, n->out));
  return 0;
}

static int conv_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  nn__cuda_node *d = &c->nodes[n->id];
  const nn__node *x = in0(m, n);
  const float *dy = n->dout;
  int rc = nn__cuda_shape(m, n, B, err);
  if (rc) return rc;
  const nn__conv_algos *a = nn__cuda_algos(m, n, B, err);
  if (!a) return SHOAL_ECUDA;
  bool t = n->kind == NN__CONVT;
  if (n->bias)
    NN_CUDNN(c, n->name, cudnnConvolutionBackwardBias(c->dnn, &ONE, d->y, dy, &ONE, d->bias, G(1)));
  if (!t)
    NN_CUDNN(c, n->name,
             cudnnConvolutionBackwardFilter(c->dnn, &ONE, d->x, x->out, d->y, dy, d->conv,
                                            a->bwd_filter, c->ws, c->ws_bytes, &ONE, d->w, G(0)));
  else
    NN_CUDNN(c, n->name,
             cudnnConvolutionBackwardFilter(c->dnn, &ONE, d->y, dy, d->x, x->out, d->conv,
                                            a->bwd_filter, c->ws, c->ws_bytes, &ONE, d->w, G(0)));
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return 0;
  const float *beta = acc ? &ONE : &ZERO;
  if (!t)
    NN_CUDNN(c, n->name,
             cudnnConvolutionBackwardData(c->dnn, &ONE, d->w, P(0), d->y, dy, d->conv, a->bwd_data,
                                          c->ws, c->ws_bytes, beta, d->x, dx));
  else
    NN_CUDNN(c, n->name,
             cudnnConvolutionForward(c->dnn, &ONE, d->y, dy, d->w, P(0), d->conv, a->fwd, c->ws,
                                     c->ws_bytes, beta, d->x, dx));
  return 0;
}
BACKWARD(conv)

/* ---- max / avg pool through cuDNN (PyTorch's floor mode) ------------------------- */

static int pool_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  nn__cuda_node *d = &c->nodes[n->id];
  int rc = nn__cuda_shape(m, n, B, err);
  if (rc) return rc;
  NN_CUDNN(c, n->name,
           cudnnPoolingForward(c->dnn, d->pool, &ONE, d->x, in0(m, n)->out, &ZERO, d->y, n->out));
  return 0;
}

static int pool_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  nn__cuda_node *d = &c->nodes[n->id];
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return 0;
  int rc = nn__cuda_shape(m, n, B, err);
  if (rc) return rc;
  NN_CUDNN(c, n->name,
           cudnnPoolingBackward(c->dnn, d->pool, &ONE, d->y, n->out, d->y, n->dout, d->x,
                                in0(m, n)->out, acc ? &ONE : &ZERO, d->x, dx));
  return 0;
}
BACKWARD(pool)

/* ---- batch norm and layer norm (nn/cpu/norm.c's algebra) ----------------------------
 * Batch norm in training mode goes through cuDNN (spatial mode: per channel over
 * N, H, W; the running variance takes the unbiased batch variance, as PyTorch's);
 * its saved mean and 1/sqrt(var + eps) sit in the node's cache. Evaluation mode, and
 * layer norm, use shoal's kernels. cache: xhat (max_batch * F), rstd (C), mean (C). */

static int bn_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  int P_ = n->H * n->W;
  if (n->fwd_training && (size_t)B * (size_t)P_ < 2)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "nn: layer '%s': batch norm in training needs more than 1 value per "
                           "channel (batch %d of %d)",
                           n->name, B, P_);
  float *rstd = n->cache + (size_t)m->max_batch * n->F;
  const float *x = in0(m, n)->out;
  if (!n->fwd_training) {
    NN_CU(c, n->name,
          nn__k_bn_fwd(S, n->out, n->cache, rstd, x, P(0), P(1), ST(0), ST(1), ST(2), B, n->C, P_,
                       n->eps, n->momentum, false));
    return 0;
  }
  nn__cuda_node *d = &c->nodes[n->id];
  int rc = nn__cuda_shape(m, n, B, err);
  if (rc) return rc;
  NN_CUDNN(c, n->name,
           cudnnBatchNormalizationForwardTraining(
               c->dnn, CUDNN_BATCHNORM_SPATIAL, &ONE, &ZERO, d->x, x, d->y, n->out, d->bias, P(0),
               P(1), (double)n->momentum, ST(0), ST(1), (double)n->eps, rstd + n->C, rstd));
  NN_CU(c, n->name, nn__k_inc(S, ST(2)));
  return 0;
}

static int bn_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  bool acc = false;
  float *dx = nn__dinput(m, n, 0, &acc);
  const float *rstd = n->cache + (size_t)m->max_batch * n->F;
  if (!n->fwd_training) {
    NN_CU(c, n->name,
          nn__k_bn_bwd(S, dx, G(0), G(1), n->dout, n->cache, rstd, P(0), B, n->C, n->H * n->W,
                       false, acc));
    return 0;
  }
  nn__cuda_node *d = &c->nodes[n->id];
  nn__node *x = &m->nodes[n->in[0]];
  int rc = nn__cuda_shape(m, n, B, err);
  if (rc) return rc;
  /* cuDNN always writes dx: without a consumer, into the input's unused gradient buffer */
  if (!dx) dx = x->dout_buf, acc = false;
  NN_CUDNN(
      c, n->name,
      cudnnBatchNormalizationBackward(c->dnn, CUDNN_BATCHNORM_SPATIAL, &ONE, acc ? &ONE : &ZERO,
                                      &ONE, &ONE, d->x, x->out, d->y, n->dout, d->x, dx, d->bias,
                                      P(0), G(0), G(1), (double)n->eps, rstd + n->C, rstd));
  return 0;
}
BACKWARD(bn)

static int ln_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  float *rstd = n->cache + (size_t)m->max_batch * n->F;
  NN_CU(c, n->name,
        nn__k_ln_fwd(S, n->out, n->cache, rstd, in0(m, n)->out, P(0), P(1), B, n->F, n->eps));
  return 0;
}

static int ln_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  bool acc = false;
  float *dx = nn__dinput(m, n, 0, &acc);
  const float *rstd = n->cache + (size_t)m->max_batch * n->F;
  NN_CU(c, n->name, nn__k_ln_bwd(S, dx, G(0), G(1), n->dout, n->cache, rstd, P(0), B, n->F, acc));
  return 0;
}
BACKWARD(ln)

/* ---- activations ------------------------------------------------------------------ */

static bool is_softmax(const nn__node *n) {
  return n->act == NN_SOFTMAX || n->act == NN_LOG_SOFTMAX;
}

static int act_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const float *x = in0(m, n)->out;
  if (is_softmax(n))
    NN_CU(c, n->name, nn__k_softmax_fwd(S, n->act == NN_LOG_SOFTMAX, n->out, x, B, n->F));
  else
    NN_CU(c, n->name, nn__k_act_fwd(S, (int)n->act, n->alpha, n->out, x, (size_t)B * n->F));
  return 0;
}

static int act_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return 0;
  if (is_softmax(n))
    NN_CU(c, n->name,
          nn__k_softmax_bwd(S, n->act == NN_LOG_SOFTMAX, dx, n->dout, n->out, B, n->F, acc));
  else
    NN_CU(c, n->name,
          nn__k_act_bwd(S, (int)n->act, n->alpha, dx, n->dout, in0(m, n)->out, n->out,
                        (size_t)B * n->F, acc));
  return 0;
}
BACKWARD(act)

/* ---- dropout (inverted); masks from a counter hash seeded by the model's rng ------- */

static int dropout_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  size_t N = (size_t)B * n->F;
  const float *x = in0(m, n)->out;
  if (!n->fwd_training || n->p == 0.0f) {
    NN_CU(c, n->name, nn__k_put(S, n->out, x, N, false));
    return 0;
  }
  float scale = n->p < 1.0f ? 1.0f / (1.0f - n->p) : 0.0f;
  uint64_t seed = shoal_rng_next(&m->rng);
  NN_CU(c, n->name, nn__k_dropout_fwd(S, n->out, n->cache, x, N, n->p, scale, seed));
  return 0;
}

static int dropout_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return 0;
  size_t N = (size_t)B * n->F;
  if (!n->fwd_training || n->p == 0.0f)
    NN_CU(c, n->name, nn__k_put(S, dx, n->dout, N, acc));
  else
    NN_CU(c, n->name, nn__k_mul_put(S, dx, n->dout, n->cache, N, acc));
  return 0;
}
BACKWARD(dropout)

/* ---- LSTM and GRU cells (nn/cpu/rnn.c's equations and cache layout) -----------------
 * GEMMs on row-major matrices with row strides: C (M, N) = op(A) op(B) is cuBLAS's
 * column-major C^T = op(B)^T op(A)^T, the same transpose flags with A and B swapped. */

static int gemm_rm(nn__cuda *c, const nn__node *n, bool ta, bool tb, int M, int N, int K,
                   const float *A, int lda, const float *Bm, int ldb, float beta, float *C, int ldc,
                   shoal_error *err) {
  NN_CUBLAS(c, n->name,
            cublasSgemm(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N,
                        M, K, &ONE, Bm, ldb, A, lda, &beta, C, ldc));
  return 0;
}

/* db (N) += sum over the B rows of d (B, N). */
static int bias_grad(nn__cuda *c, const nn__node *n, float *db, const float *d, int B, int N,
                     shoal_error *err) {
  NN_CUBLAS(c, n->name,
            cublasSgemv(c->blas, CUBLAS_OP_N, N, B, &ONE, d, N, c->ones, 1, &ONE, db, 1));
  return 0;
}

static int lstm_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const float *in = in0(m, n)->out;
  int I = n->num, Hd = n->hidden, NG = 4 * Hd, Fin = I + 2 * Hd;
  float *gates = n->cache, *tc = n->cache + (size_t)m->max_batch * NG;
  NN_CU(c, n->name, nn__k_bias_set(S, gates, P(2), P(3), B, NG));
  int rc = gemm_rm(c, n, false, true, B, NG, I, in, Fin, P(0), I, 1.0f, gates, NG, err);
  if (!rc) rc = gemm_rm(c, n, false, true, B, NG, Hd, in + I, Fin, P(1), Hd, 1.0f, gates, NG, err);
  if (rc) return rc;
  NN_CU(c, n->name, nn__k_lstm_fwd(S, gates, tc, n->out, in, B, I, Hd));
  return 0;
}

static int lstm_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const float *in = in0(m, n)->out;
  int I = n->num, Hd = n->hidden, NG = 4 * Hd, Fin = I + 2 * Hd;
  size_t mb = (size_t)m->max_batch;
  const float *gates = n->cache, *tc = n->cache + mb * NG;
  float *dg = n->cache + mb * 5 * Hd, *dcp = n->cache + mb * 9 * Hd;
  NN_CU(c, n->name, nn__k_lstm_bwd(S, dg, dcp, gates, tc, in, n->dout, B, I, Hd));
  int rc = bias_grad(c, n, G(2), dg, B, NG, err);
  if (!rc) rc = bias_grad(c, n, G(3), dg, B, NG, err);
  if (!rc) rc = gemm_rm(c, n, true, false, NG, I, B, dg, NG, in, Fin, 1.0f, G(0), I, err);
  if (!rc) rc = gemm_rm(c, n, true, false, NG, Hd, B, dg, NG, in + I, Fin, 1.0f, G(1), Hd, err);
  if (rc) return rc;
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return 0;
  float beta = acc ? 1.0f : 0.0f;
  rc = gemm_rm(c, n, false, false, B, I, NG, dg, NG, P(0), I, beta, dx, Fin, err);
  if (!rc) rc = gemm_rm(c, n, false, false, B, Hd, NG, dg, NG, P(1), Hd, beta, dx + I, Fin, err);
  if (rc) return rc;
  NN_CU(c, n->name, nn__k_rows(S, dx + I + Hd, Fin, dcp, Hd, B, Hd, acc));
  return 0;
}
BACKWARD(lstm)

static int gru_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const float *in = in0(m, n)->out;
  int I = n->num, Hd = n->hidden, NG = 3 * Hd, Fin = I + Hd;
  size_t mb = (size_t)m->max_batch;
  float *gi = n->cache + mb * 4 * Hd, *gh = gi + mb * NG;
  NN_CU(c, n->name, nn__k_bias_set(S, gi, P(2), NULL, B, NG));
  NN_CU(c, n->name, nn__k_bias_set(S, gh, P(3), NULL, B, NG));
  int rc = gemm_rm(c, n, false, true, B, NG, I, in, Fin, P(0), I, 1.0f, gi, NG, err);
  if (!rc) rc = gemm_rm(c, n, false, true, B, NG, Hd, in + I, Fin, P(1), Hd, 1.0f, gh, NG, err);
  if (rc) return rc;
  NN_CU(c, n->name, nn__k_gru_fwd(S, n->cache, n->out, gi, gh, in, B, I, Hd));
  return 0;
}

static int gru_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const float *in = in0(m, n)->out;
  int I = n->num, Hd = n->hidden, NG = 3 * Hd, Fin = I + Hd;
  size_t mb = (size_t)m->max_batch;
  float *dgi = n->cache + mb * 4 * Hd, *dgh = dgi + mb * NG;
  NN_CU(c, n->name, nn__k_gru_bwd(S, dgi, dgh, n->cache, in, n->dout, B, I, Hd));
  int rc = bias_grad(c, n, G(2), dgi, B, NG, err);
  if (!rc) rc = bias_grad(c, n, G(3), dgh, B, NG, err);
  if (!rc) rc = gemm_rm(c, n, true, false, NG, I, B, dgi, NG, in, Fin, 1.0f, G(0), I, err);
  if (!rc) rc = gemm_rm(c, n, true, false, NG, Hd, B, dgh, NG, in + I, Fin, 1.0f, G(1), Hd, err);
  if (rc) return rc;
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return 0;
  float beta = acc ? 1.0f : 0.0f;
  rc = gemm_rm(c, n, false, false, B, I, NG, dgi, NG, P(0), I, beta, dx, Fin, err);
  if (!rc) rc = gemm_rm(c, n, false, false, B, Hd, NG, dgh, NG, P(1), Hd, beta, dx + I, Fin, err);
  if (rc) return rc;
  /* h reaches h' directly too: dh += dh' z */
  NN_CU(c, n->name, nn__k_gru_dh(S, dx, n->cache, n->dout, B, I, Hd));
  return 0;
}
BACKWARD(gru)

/* ---- embedding: y[s, j*dim ..] = W[x[s, j]]; W (num, dim) ---------------------------- */

static int embedding_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const nn__node *x = in0(m, n);
  int Fx = x->F;
  NN_CU(c, n->name, cudaMemsetAsync(c->d_acc, 0, sizeof *c->d_acc, S));
  NN_CU(c, n->name, cudaMemsetAsync(&c->d_acc->pad[0], 0xff, sizeof c->d_acc->pad[0], S));
  NN_CU(c, n->name, nn__k_embed_fwd(S, c->d_acc, n->out, x->out, P(0), B, Fx, n->dim, n->num));
  NN_CU(c, n->name,
        cudaMemcpyAsync(c->h_acc, c->d_acc, sizeof *c->h_acc, cudaMemcpyDeviceToHost, S));
  NN_CU(c, n->name, cudaStreamSynchronize(S));
  if (c->h_acc->bad > 0) {
    unsigned long long pos;
    memcpy(&pos, &c->h_acc->pad[0], sizeof pos);
    float v = 0;
    NN_CU(c, n->name, cudaMemcpy(&v, x->out + pos, sizeof v, cudaMemcpyDeviceToHost));
    return shoal_error_set(err, SHOAL_ERANGE,
                           "nn: layer '%s': index %g (sample %llu, position %llu) is not an "
                           "integer in [0, %d)",
                           n->name, (double)v, pos / (unsigned long long)Fx,
                           pos % (unsigned long long)Fx, n->num);
  }
  return 0;
}

static int embedding_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const nn__node *x = in0(m, n);
  NN_CU(c, n->name, nn__k_embed_bwd(S, G(0), x->out, n->dout, B, x->F, n->dim));
  /* Indices have no gradient; a caller asking for dx gets zeros there. */
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (dx && !acc) NN_CU(c, n->name, cudaMemsetAsync(dx, 0, (size_t)B * x->F * sizeof(float), S));
  return 0;
}
BACKWARD(embedding)

/* ---- views, slice, add, concat ----------------------------------------------------- */

static int view_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  n->out = m->nodes[n->in[0]].out;
  return 0;
}

static int view_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (dx) NN_CU(c, n->name, nn__k_put(S, dx, n->dout, (size_t)B * n->F, acc));
  return 0;
}
BACKWARD(view)

static int slice_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const nn__node *x = in0(m, n);
  int hw = n->H * n->W;
  NN_CU(c, n->name,
        nn__k_rows(S, n->out, n->F, x->out + (size_t)n->start * hw, x->F, B, n->count * hw, false));
  return 0;
}

static int slice_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const nn__node *x = in0(m, n);
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return 0;
  int hw = n->H * n->W;
  /* The channels outside the slice get no gradient from it. */
  if (!acc) NN_CU(c, n->name, cudaMemsetAsync(dx, 0, (size_t)B * x->F * sizeof(float), S));
  NN_CU(c, n->name,
        nn__k_rows(S, dx + (size_t)n->start * hw, x->F, n->dout, n->F, B, n->count * hw, true));
  return 0;
}
BACKWARD(slice)

static int add_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  NN_CU(c, n->name,
        nn__k_add2(S, n->out, m->nodes[n->in[0]].out, m->nodes[n->in[1]].out, (size_t)B * n->F,
                   false));
  return 0;
}

static int add_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  for (int k = 0; k < 2; k++) {
    bool acc;
    float *dx = nn__dinput(m, n, k, &acc);
    if (dx) NN_CU(c, n->name, nn__k_put(S, dx, n->dout, (size_t)B * n->F, acc));
  }
  return 0;
}
BACKWARD(add)

static int concat_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const nn__node *a = &m->nodes[n->in[0]], *b = &m->nodes[n->in[1]];
  NN_CU(c, n->name, nn__k_rows(S, n->out, n->F, a->out, a->F, B, a->F, false));
  NN_CU(c, n->name, nn__k_rows(S, n->out + a->F, n->F, b->out, b->F, B, b->F, false));
  return 0;
}

static int concat_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const nn__node *a = &m->nodes[n->in[0]], *b = &m->nodes[n->in[1]];
  bool acc;
  float *da = nn__dinput(m, n, 0, &acc);
  if (da) NN_CU(c, n->name, nn__k_rows(S, da, a->F, n->dout, n->F, B, a->F, acc));
  float *db = nn__dinput(m, n, 1, &acc);
  if (db) NN_CU(c, n->name, nn__k_rows(S, db, b->F, n->dout + a->F, n->F, B, b->F, acc));
  return 0;
}
BACKWARD(concat)

/* y = a ⊙ b (b of a's shape, or one value per sample); da = dy ⊙ b, db = dy ⊙ a or its
 * per-sample sum. */
static int mul_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const nn__node *a = &m->nodes[n->in[0]], *b = &m->nodes[n->in[1]];
  bool bcast = b->F == 1 && n->F > 1;
  NN_CU(c, n->name,
        nn__k_mul(S, n->out, a->out, b->out, (size_t)B * n->F, (size_t)n->F, bcast, false));
  return 0;
}

static int mul_bwd(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  const nn__node *a = &m->nodes[n->in[0]], *b = &m->nodes[n->in[1]];
  bool bcast = b->F == 1 && n->F > 1, acc;
  float *da = nn__dinput(m, n, 0, &acc);
  if (da)
    NN_CU(c, n->name,
          nn__k_mul(S, da, n->dout, b->out, (size_t)B * n->F, (size_t)n->F, bcast, acc));
  float *db = nn__dinput(m, n, 1, &acc);
  if (db) {
    if (bcast)
      NN_CU(c, n->name, nn__k_rowdot(S, db, n->dout, a->out, B, n->F, acc));
    else
      NN_CU(c, n->name,
            nn__k_mul(S, db, n->dout, a->out, (size_t)B * n->F, (size_t)n->F, false, acc));
  }
  return 0;
}
BACKWARD(mul)

/* ---- custom layers: the user's CUDA functions on the model's stream ---------------- */

static int custom_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  CTX;
  nn_layer_call call;
  nn__custom_call(m, n, B, c->d_params, c->d_grads, c->d_state, &call);
  call.stream = (void *)c->stream;
  call.rng = NULL; /* m->rng is host state; a device layer draws with its own generator */
  shoal_error why = {0};
  int rc = n->ctype->forward_cuda(&call, &why);
  if (!rc) return 0;
  return shoal_error_set(err, rc, "nn: layer '%s' (%s): %s", n->name, n->ckind,
                         why.msg[0] ? why.msg : "its forward_cuda failed");
}

static void custom_backward(nn_model *m, nn__node *n, int B) {
  CTX;
  nn_layer_call call;
  nn__custom_call(m, n, B, c->d_params, c->d_grads, c->d_state, &call);
  nn__custom_grad(m, n, &call);
  call.stream = (void *)c->stream;
  n->ctype->backward_cuda(&call);
}

static const nn__layer_ops cuda_dense = {dense_forward, dense_backward};
static const nn__layer_ops cuda_conv = {conv_forward, conv_backward};
static const nn__layer_ops cuda_pool = {pool_forward, pool_backward};
static const nn__layer_ops cuda_bn = {bn_forward, bn_backward};
static const nn__layer_ops cuda_ln = {ln_forward, ln_backward};
static const nn__layer_ops cuda_act = {act_forward, act_backward};
static const nn__layer_ops cuda_dropout = {dropout_forward, dropout_backward};
static const nn__layer_ops cuda_view = {view_forward, view_backward};
static const nn__layer_ops cuda_slice = {slice_forward, slice_backward};
static const nn__layer_ops cuda_add = {add_forward, add_backward};
static const nn__layer_ops cuda_concat = {concat_forward, concat_backward};
static const nn__layer_ops cuda_mul = {mul_forward, mul_backward};
static const nn__layer_ops cuda_lstm = {lstm_forward, lstm_backward};
static const nn__layer_ops cuda_embedding = {embedding_forward, embedding_backward};
static const nn__layer_ops cuda_gru = {gru_forward, gru_backward};
static const nn__layer_ops cuda_custom = {custom_forward, custom_backward};

/* Every optional member is filled: device memory with host mirrors, a queue, and the
 * optimizer on the device (nn/cuda/context.c). */
const nn__backend nn__cuda_backend = {
    .name = "cuda",
    .available = nn__cuda_available,
    .create = nn__cuda_create,
    .destroy = nn__cuda_destroy,
    .build = nn__cuda_build,
    .check_input = nn__cuda_check_input,
    .check_ptr = nn__cuda_check_ptr,
    .alloc = nn__cuda_alloc,
    .free_buf = nn__cuda_free,
    .to_device = nn__cuda_to_device,
    .to_host = nn__cuda_to_host,
    .zero = nn__cuda_zero,
    .sync = nn__cuda_sync,
    .status = nn__cuda_status,
    .pull = nn__cuda_pull,
    .push = nn__cuda_push,
    .copy = nn__cuda_copy_model,
    .loss = nn__cuda_loss,
    .priorities = nn__cuda_priorities,
    .optim_create = nn__cuda_optim_create,
    .optim_destroy = nn__cuda_optim_destroy,
    .optim_step = nn__cuda_optim_step,
    .optim_get = nn__cuda_optim_get,
    .optim_set = nn__cuda_optim_set,
    .ops =
        {
            [NN__DENSE] = &cuda_dense,
            [NN__CONV] = &cuda_conv,
            [NN__CONVT] = &cuda_conv,
            [NN__MAXPOOL] = &cuda_pool,
            [NN__AVGPOOL] = &cuda_pool,
            [NN__BATCHNORM] = &cuda_bn,
            [NN__LAYERNORM] = &cuda_ln,
            [NN__DROPOUT] = &cuda_dropout,
            [NN__FLATTEN] = &cuda_view,
            [NN__RESHAPE] = &cuda_view,
            [NN__ACT] = &cuda_act,
            [NN__SLICE] = &cuda_slice,
            [NN__ADD] = &cuda_add,
            [NN__CONCAT] = &cuda_concat,
            [NN__MUL] = &cuda_mul,
            [NN__LSTM] = &cuda_lstm,
            [NN__EMBEDDING] = &cuda_embedding,
            [NN__GRU] = &cuda_gru,
            [NN__CUSTOM] = &cuda_custom,
        },
};
