/*
 * nn/internal.h — nn's private structures: the model graph, its nodes, the layer
 * table (one forward and one backward per layer kind, as darknet's layer table) and
 * the backend table that the CPU code fills and that nn/cuda can fill later.
 *
 * Conventions (llm.c's): a node's output is (B, F) with F = C*H*W per sample, NCHW.
 * Forward reads its inputs' outputs and writes its own. Backward reads its output
 * gradient (dout) and
 *   - adds parameter gradients into the model's gradient buffer (+=),
 *   - writes or adds the gradient of each input that needs one (nn__dinput says which:
 *     the first consumer to reach an input writes, later ones add, so a node used
 *     twice, as in a residual block, gets the sum).
 */
#ifndef SHOAL_NN_INTERNAL_H
#define SHOAL_NN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"
#include "nn/nn.h"

#define NN__NAME_MAX 64
#define NN__MAX_TENSORS 4 /* parameter tensors per layer (LSTM/GRU: 4) */
#define NN__MAX_STATE 3   /* state tensors per layer (batch norm: 3) */

typedef enum nn__kind {
  NN__INPUT = 0,
  NN__DENSE,
  NN__CONV,
  NN__CONVT,
  NN__MAXPOOL,
  NN__AVGPOOL,
  NN__BATCHNORM,
  NN__LAYERNORM,
  NN__DROPOUT,
  NN__FLATTEN,
  NN__RESHAPE,
  NN__EMBEDDING,
  NN__ACT,
  NN__LSTM,
  NN__GRU,
  NN__SLICE,
  NN__ADD,
  NN__CONCAT,
  NN__MUL,
  NN__KIND_COUNT
} nn__kind;

typedef enum nn__init {
  NN__INIT_UNIFORM = 0, /* U(-bound, bound): PyTorch's kaiming_uniform(a=sqrt(5)) and biases */
  NN__INIT_NORMAL,      /* N(0, 1): embeddings */
  NN__INIT_ONES,
  NN__INIT_ZEROS,
} nn__init;

/* One tensor of a layer, as its state_dict entry. */
typedef struct nn__tensor {
  char name[NN__NAME_MAX + 24]; /* "<layer>.<suffix>" */
  int ndim;                     /* 0..4 (0: a scalar, num_batches_tracked) */
  int shape[4];
  size_t offset; /* floats into params (trainable) or state */
  size_t numel;
  bool trainable;
  int fan_in, fan_out;
  nn__init init; /* how nn_model_build fills it */
  float bound;   /* NN__INIT_UNIFORM: U(-bound, bound) */
} nn__tensor;

typedef struct nn__node {
  nn__kind kind;
  char name[NN__NAME_MAX];
  int id;
  int in[2]; /* input nodes (-1 when unused) */
  int n_in;
  int C, H, W; /* per-sample output shape */
  int F;       /* C*H*W */

  /* Hyper-parameters; which are used depends on kind. */
  int out_c, kh, kw, stride, pad, dil, opad; /* dense (out_c), conv, convT, pools */
  int hidden, num, dim, start, count;        /* cells (num: input size), embedding, slice */
  nn_act act;
  float alpha, eps, momentum, p;

  /* Offsets (floats) of the parameter tensors in params/grads, and of the state
   * tensors in state, in the order the layer registers them. */
  size_t poff[NN__MAX_TENSORS];
  int n_poff;
  size_t soff[NN__MAX_STATE];
  int n_soff;

  /* Buffers, set by nn_model_build. out is NULL for views until forward points it
   * at the input's output. */
  float *out;      /* (max_batch, F) */
  float *dout_buf; /* (max_batch, F): gradient of the output */
  float *dout;     /* this backward's output gradient (dout_buf, or dy for the output) */
  float *cache;    /* layer-specific, cache_n floats */
  size_t cache_n;
  int32_t *idx; /* max-pool argmax, (max_batch, F) */

  bool live;         /* an ancestor of the output (or the output) */
  bool has_params;   /* uses trainable tensors (its own or, shared, another's) */
  bool need_grad;    /* this backward needs the gradient of this node's output */
  bool written;      /* dout holds a value in this backward */
  bool fwd_training; /* the mode of the last forward (dropout, batch norm) */
} nn__node;

/* A layer kind's kernels on one backend. forward may fail (an index out of range,
 * batch statistics of one value); backward can't. */
typedef struct nn__layer_ops {
  int (*forward)(nn_model *m, nn__node *n, int B, shoal_error *err);
  void (*backward)(nn_model *m, nn__node *n, int B);
} nn__layer_ops;

/* A backend: a name and a table of layer kernels, indexed by nn__kind. The model's
 * buffers are host memory, which is what the CPU kernels use; a device backend
 * (nn/cuda) adds its buffer management here when it lands. A NULL entry means the
 * backend lacks that layer, and nn_model_build says so. */
typedef struct nn__backend {
  const char *name;
  const nn__layer_ops *ops[NN__KIND_COUNT];
} nn__backend;

extern const nn__backend nn__cpu_backend;

/* The CUDA backend (nn/cuda), compiled in when SHOAL_HAVE_CUDA is defined. A CUDA
 * model's context: stream, handles and device buffers (nn/cuda/cuda.h). */
typedef struct nn__cuda nn__cuda;
#ifdef SHOAL_HAVE_CUDA
extern const nn__backend nn__cuda_backend;
bool nn__cuda_available(shoal_error *err);
/* At create: a stream and handles on the current device (m->cuda). */
int nn__cuda_create(nn_model *m, shoal_error *err);
void nn__cuda_destroy(nn_model *m); /* frees everything of m->cuda; NULL is fine */
/* At build, after the host parameters and state are initialised: device buffers,
 * descriptors, algorithm choices for max_batch, then the upload. Sets every node's
 * out, dout_buf and cache, and m->arena / arena_n to the device arena. */
int nn__cuda_build(nn_model *m, shoal_error *err);
/* SHOAL_EINVAL when p is ordinary host memory, which the device cannot read (a host
 * array passed where a CUDA model wants device memory); what names the argument. */
int nn__cuda_check_ptr(nn_model *m, const void *p, const char *what, shoal_error *err);
/* Reports (and clears) the first failure recorded since the last report. */
int nn__cuda_status(nn_model *m, shoal_error *err);
int nn__cuda_sync(nn_model *m, shoal_error *err);
void nn__cuda_zero(nn_model *m, float *dev, size_t n); /* queued memset; failures recorded */
/* Host mirrors <-> device: params and state (pull also grads when grads). */
int nn__cuda_pull(nn_model *m, bool grads, shoal_error *err);
int nn__cuda_push(nn_model *m, shoal_error *err);
/* dst (device of dst_m) <- src model's params and state, both CUDA models. */
int nn__cuda_copy_model(nn_model *dst, const nn_model *src, shoal_error *err);
float *nn__cuda_alloc(nn_model *m, size_t n, shoal_error *err);
void nn__cuda_free(nn_model *m, float *p);
int nn__cuda_to_device(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err);
int nn__cuda_to_host(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err);
int nn__cuda_loss(nn_model *m, nn_loss_kind kind, float *loss, float *dpred, const float *pred,
                  const float *target, const float *w, int B, int N, float delta, shoal_error *err);
/* prio (host, B floats) from pred and target on the device (nn_model_priorities). */
int nn__cuda_priorities(nn_model *m, float *prio, const float *pred, const float *target, int B,
                        int N, float alpha, float eps, shoal_error *err);
/* The optimizer's device half (nn/optim.c calls these for a CUDA model): moments
 * (nbuf * n floats, laid out as the host's), the step, and moving them. */
typedef struct nn__cuda_optim nn__cuda_optim;
nn__cuda_optim *nn__cuda_optim_create(nn_model *m, size_t nbuf, shoal_error *err);
void nn__cuda_optim_destroy(nn__cuda_optim *o);
/* One step number step + 1 over slots ibuf, iavg, isq of the moments (-1: unused);
 * waits for the device's decision and fills *norm and *skipped (a non-finite norm:
 * nothing changed). */
int nn__cuda_optim_step(nn__cuda_optim *o, const nn_optim_config *cfg, long step, int ibuf,
                        int iavg, int isq, float *norm, bool *skipped, shoal_error *err);
/* Host moments (nbuf * n floats) and step <-> device. */
int nn__cuda_optim_get(nn__cuda_optim *o, float *mom, long *step, shoal_error *err);
int nn__cuda_optim_set(nn__cuda_optim *o, const float *mom, long step, shoal_error *err);
#endif

struct nn_model {
  nn_device device;
  const nn__backend *be;
  nn__node *nodes;
  int n_nodes, cap_nodes;
  int current; /* input of the next layer */
  int output;  /* -1: the last node */
  bool built;
  bool training;
  int max_batch;

  nn__tensor *tensors; /* parameters first (layer order), then state */
  int n_tensors, cap_tensors;
  float *params; /* (n_params) */
  float *grads;  /* (n_params), same layout */
  float *state;  /* (n_state) */
  size_t n_params, n_state;

  float *arena; /* every node's out, dout and cache */
  size_t arena_n;
  float *scratch; /* shared by layers within one call (im2col, gathers), scratch_n floats */
  size_t scratch_n;

  const float *x; /* the last forward's input, borrowed */
  int B;          /* the last forward's batch; 0 before any */
  shoal_rng rng;  /* dropout masks */

  nn__cuda *cuda;  /* the CUDA context (device == NN_CUDA), else NULL */
  bool host_stale; /* CUDA: the device's params or state are newer than the host's */

  int err_code;       /* the first failed layer-adding call, reported by build */
  char err_msg[512];  /* its message */
  char last_msg[512]; /* the last failed call's message (nn_model_error) */
};

const char *nn__kind_name(nn__kind k);

/* The input node's output is the caller's x; an input of a node. */
static inline nn__node *nn__input(nn_model *m, nn__node *n, int k) { return &m->nodes[n->in[k]]; }

/* Where backward puts the gradient of input k of n, or NULL when that input needs
 * none. *accumulate says whether to add (true) or overwrite (false). */
float *nn__dinput(nn_model *m, nn__node *n, int k, bool *accumulate);

/* ---- CPU kernels (nn/cpu) --------------------------------------------------- */

/* C (M,N) = alpha * op(A) op(B) + beta * C, row-major, op = transpose when ta/tb.
 * OpenBLAS's cblas_sgemm when built with it and the product is big enough for its
 * call overhead to pay; else nn's own loops. */
void nn__sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);

/* im2col of one sample x (C, H, W) into col (C*kh*kw, Ho*Wo) with row stride ldc
 * (ldc >= Ho*Wo, so samples can sit side by side in one matrix); col2im adds back. */
void nn__im2col(const float *x, int C, int H, int W, int kh, int kw, int stride, int pad, int dil,
                int Ho, int Wo, float *col, int ldc);
void nn__col2im(const float *col, int ldc, int C, int H, int W, int kh, int kw, int stride, int pad,
                int dil, int Ho, int Wo, float *x);

/* Sets OpenBLAS's thread count (no-op without OpenBLAS). */
void nn__blas_set_threads(int n);

/* Conv2d runs samples in groups whose im2col matrix (K x g*P floats) fits in about
 * NN__COL_BUDGET floats; the group size for max_batch. */
#define NN__COL_BUDGET ((size_t)256 * 1024)
int nn__conv_group(int K, int P, int max_batch);

/* y = accumulate ? y + x : x, n floats. */
void nn__put(float *y, const float *x, size_t n, bool accumulate);

/* Sizes of the per-node cache and of the shared scratch the CPU kernels need for
 * batches up to max_batch (in floats). */
size_t nn__cpu_cache_floats(const nn_model *m, const nn__node *n, int max_batch);
size_t nn__cpu_scratch_floats(const nn_model *m, const nn__node *n, int max_batch);

#endif
