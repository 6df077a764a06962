/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/internal.h — nn's private structures: the model graph, its nodes, the layer
 * table (one forward and one backward per layer kind, as darknet's layer table) and
 * the backend table (layer kernels and device operations) that nn/cpu and nn/cuda fill.
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

/* Layer names hold PyTorch module paths ("layer4.1.downsample.0"), whose depth grows
 * with the model; 128 bytes cover torchvision's and Hugging Face's deepest. */
#define NN__NAME_MAX 128
/* Parameter and state tensors per layer: LSTM/GRU have 4 and batch norm 3 state; a
 * custom layer up to NN_LAYER_TENSORS of both together. */
#define NN__MAX_TENSORS NN_LAYER_TENSORS
#define NN__MAX_STATE NN_LAYER_TENSORS

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
  NN__CUSTOM, /* a user's nn_layer_type (nn/custom.c) */
  NN__KIND_COUNT
} nn__kind;

typedef enum nn__init {
  NN__INIT_UNIFORM = 0, /* U(-bound, bound): PyTorch's kaiming_uniform(a=sqrt(5)) and biases */
  NN__INIT_NORMAL,      /* N(0, 1): embeddings */
  NN__INIT_ONES,
  NN__INIT_ZEROS,
  NN__INIT_CONSTANT, /* custom layers' initialisers (nn_param_init): a */
  NN__INIT_RANGE,    /* U(a, b) */
  NN__INIT_GAUSS,    /* N(a, b^2) */
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
  float bound;   /* NN__INIT_UNIFORM: U(-bound, bound); CONSTANT, RANGE, GAUSS: a */
  float b;       /* RANGE, GAUSS: b */
} nn__tensor;

#define NN__PROFILE_MAX 1024 /* lines nn_model_profile_table lists, heaviest first */

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
  bool bias; /* dense, conv, convT: a bias tensor, at poff[1] (NN_NO_BIAS: none) */
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
  /* CPU (set by its build): a dense or conv2d layer whose one reader is a ReLU writes relu(y)
   * straight into that node's out (fuse_act: its index) and leaves its own out unwritten;
   * the ReLU's forward (fused) then does nothing. Its backward needs only its output. */
  int fuse_act;
  bool fused;

  /* NN__CUSTOM: the user's table (borrowed), its config (copied; owned by the node
   * unless it is a nn_shared copy), the cache it asked for, its forward FLOPs per sample,
   * and where each of its tensors is: tensor k is poff[cslot[k]] when ctrain[k], else
   * soff[cslot[k]]. ckind is what describe and profile call it. */
  const nn_layer_type *ctype;
  void *cconf;
  bool cconf_owned;
  const char *ckind;
  size_t c_cps, c_cfix;
  double c_flops;
  int c_n;
  bool ctrain[NN_LAYER_TENSORS];
  int cslot[NN_LAYER_TENSORS];

  /* CPU conv2d and dense: the kernel path this call's forward, dW and dx run (an nn__kpath
   * of nn/cpu/cpu.h; 0: convk.c's or densek.c's rules), and those chosen for each batch
   * size seen, by timing the candidates (nn/cpu/plan.c). */
  signed char kp[3];
  struct {
    int B;
    signed char kp[3];
  } plans[4];
  int n_plans;

  /* nn_model_profile's counts: calls and wall time (ns) of this layer's forward, backward */
  uint64_t prof_ns[2];
  int64_t prof_calls[2];
} nn__node;

/* A layer kind's kernels on one backend. forward may fail (an index out of range,
 * batch statistics of one value); backward can't. */
typedef struct nn__layer_ops {
  int (*forward)(nn_model *m, nn__node *n, int B, shoal_error *err);
  void (*backward)(nn_model *m, nn__node *n, int B);
} nn__layer_ops;

/* A backend's optimizer state on its device (nn/cuda: the moments, the step's decision). */
typedef struct nn__optim_dev nn__optim_dev;

/* A backend, as ggml's backend interface: a name, a table of layer kernels indexed by
 * nn__kind, and every memory and device operation that nn/model.c and nn/optim.c need,
 * so that those two files never ask which backend they drive. nn/cpu fills it for host
 * memory; nn/cuda for device memory with host mirrors of params, grads and state;
 * nn__backend_get (nn/backend.c), the one place that knows which backends were built,
 * picks one per device. A NULL layer entry means the backend lacks that layer, and
 * nn_model_build says so. Members marked optional may be NULL; each says its default.
 *
 * "Device memory" below is the memory the backend's kernels read: host memory for the
 * CPU, GPU memory for CUDA. The model's out, dout_buf, cache and arena point into it. */
typedef struct nn__backend {
  const char *name;
  const nn__layer_ops *ops[NN__KIND_COUNT];

  /* ---- the backend and a model's life ---- */
  /* Optional (default: always true). Whether a device is usable; else false and, if
   * err, the reason. */
  bool (*available)(shoal_error *err);
  /* Optional (default: nothing to set up). At nn_model_create: the model's context
   * (m->ctx). On failure destroy still runs, then the model is freed. */
  int (*create)(nn_model *m, shoal_error *err);
  /* Frees what create and build took (the arena, scratch, per-node buffers, the
   * context) and leaves m->arena NULL; before the model frees its host buffers. Runs on
   * models never built or whose create failed. Can't fail. */
  void (*destroy)(nn_model *m);
  /* At nn_model_build, once m->params and m->state hold their initial values and
   * m->max_batch is set: every live node's out (views and the input excepted),
   * dout_buf, cache and cache_n, and m->arena / arena_n. On error frees what it took,
   * leaves m->arena NULL and returns the code. */
  int (*build)(nn_model *m, shoal_error *err);

  /* ---- the caller's arrays (device memory) ---- */
  /* Checks x, forward's input of n floats: the CPU scans it for NaN and infinities
   * (SHOAL_ENAN naming the sample and feature); CUDA checks that it is device memory
   * (nn_model_to_device scanned its values on the way in). */
  int (*check_input)(nn_model *m, const float *x, size_t n, shoal_error *err);
  /* Optional (default: any pointer will do). SHOAL_EINVAL when p is memory the
   * backend's kernels cannot read (a host array handed to a CUDA model); what names the
   * argument in the message. */
  int (*check_ptr)(nn_model *m, const void *p, const char *what, shoal_error *err);
  /* n zeroed floats of device memory; caller frees them with free_buf. NULL and err on
   * failure (SHOAL_ENOMEM). */
  float *(*alloc)(nn_model *m, size_t n, shoal_error *err);
  void (*free_buf)(nn_model *m, float *p); /* waits for queued work that may read p */
  /* Host src -> device dst, n floats, values scanned (SHOAL_ENAN names the first bad
   * one). May be queued: src is free for reuse on return, dst is written in order. */
  int (*to_device)(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err);
  /* Device src -> host dst, n floats; dst holds the values on return. */
  int (*to_host)(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err);
  /* p[0, n) = 0 (p NULL: the gradient buffer). May be queued; a failure is reported by
   * status. */
  void (*zero)(nn_model *m, float *p, size_t n);
  /* Optional (default: nothing is queued, returns 0). Waits for the model's queued work
   * and reports a failure recorded since the last report. */
  int (*sync)(nn_model *m, shoal_error *err);
  /* Optional (default: nothing is recorded, returns 0). Reports and clears the first
   * failure recorded in a call that could not return one (backward, zero). */
  int (*status)(nn_model *m, shoal_error *err);

  /* ---- host mirrors of params, grads and state. All optional (default: m->params,
   * m->grads and m->state are what the kernels use, so there is nothing to move). ---- */
  /* Device -> host: params and state, and grads when grads. */
  int (*pull)(nn_model *m, bool grads, shoal_error *err);
  /* Host -> device: params and state. */
  int (*push)(nn_model *m, shoal_error *err);
  /* dst's params and state <- src's on the device, both models of this backend with
   * the same layout (checked by the caller). Default: through the host mirrors. */
  int (*copy)(nn_model *dst, const nn_model *src, shoal_error *err);

  /* ---- losses on device memory (nn_model_loss and nn_model_priorities check the
   * model, kind and sizes first) ---- */
  int (*loss)(nn_model *m, nn_loss_kind kind, float *loss, float *dpred, const float *pred,
              const float *target, const float *w, int B, int N, float delta, shoal_error *err);
  /* prio (host, B floats) = (sum_j |pred_ij - target_ij| + eps)^alpha. */
  int (*priorities)(nn_model *m, float *prio, const float *pred, const float *target, int B, int N,
                    float alpha, float eps, shoal_error *err);

  /* ---- the optimizer's device half. All optional, together (default: nn/optim.c
   * steps m->params with m->grads on the host). ---- */
  /* Moments of nbuf * n_params zeroed floats, laid out as the host's. NULL and err on
   * failure. */
  nn__optim_dev *(*optim_create)(nn_model *m, size_t nbuf, shoal_error *err);
  void (*optim_destroy)(nn__optim_dev *o); /* NULL is fine */
  /* Step number step + 1 over moment slots ibuf, iavg, isq (-1: unused); waits for the
   * device's decision and fills *norm and *skipped (a non-finite norm: nothing
   * changed). */
  int (*optim_step)(nn__optim_dev *o, const nn_optim_config *cfg, long step, int ibuf, int iavg,
                    int isq, float *norm, bool *skipped, shoal_error *err);
  /* The moments (nbuf * n_params floats) device -> host mom, host mom -> device. */
  int (*optim_get)(nn__optim_dev *o, float *mom, shoal_error *err);
  int (*optim_set)(nn__optim_dev *o, const float *mom, shoal_error *err);
} nn__backend;

/* The backend that runs models on device (nn/backend.c). NULL and err when it was not
 * built (SHOAL_ENOTSUP) or device is unknown (SHOAL_EINVAL). Can be called any time. */
const nn__backend *nn__backend_get(nn_device device, shoal_error *err);

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

  void *ctx;       /* the backend's context (nn/cuda: nn__cuda), or NULL */
  bool host_stale; /* the device's params or state are newer than the host mirrors */

  bool profiling; /* nn_model_profile: forward and backward time each layer */

  int err_code;       /* the first failed layer-adding call, reported by build */
  char err_msg[512];  /* its message */
  char last_msg[512]; /* the last failed call's message (nn_model_error) */
};

const char *nn__kind_name(nn__kind k);
/* True when s is 1 to max letters, digits or '_' (tensor suffixes, layer kinds). */
bool nn__ident_ok(const char *s, size_t max);
/* Records a failed layer-adding call on m (build reports the first) and returns code. */
int nn__model_fail(nn_model *m, int code, const char *what);
/* What describe, profile and messages call node n: its kind's name, or a custom layer's. */
const char *nn__node_kind(const nn__node *n);

/* ---- custom layers (nn/custom.c) ---- */
/* The CPU's layer ops for NN__CUSTOM: the user's forward and backward on host arrays. */
extern const nn__layer_ops nn__cpu_custom;
/* Fills *c for node n's forward (dy NULL) or backward, on either backend: B, shapes,
 * the tensors of buffers params / grads / state (the model's own on the CPU, the
 * device's on CUDA), x, y, cache, mode and rng. */
void nn__custom_call(nn_model *m, nn__node *n, int B, float *params, float *grads, float *state,
                     nn_layer_call *c);
/* Fills a custom node's backward-only fields (dy, dx, dx_add) after nn__custom_call. */
void nn__custom_grad(nn_model *m, nn__node *n, nn_layer_call *c);

/* The input node's output is the caller's x; an input of a node. */
static inline nn__node *nn__input(nn_model *m, nn__node *n, int k) { return &m->nodes[n->in[k]]; }

/* Where backward puts the gradient of input k of n, or NULL when that input needs
 * none. *accumulate says whether to add (true) or overwrite (false). */
float *nn__dinput(nn_model *m, nn__node *n, int k, bool *accumulate);

/* Zeroed float buffers for the model's host arrays: n floats (at least one), 64-byte
 * aligned for vector loads; free() frees them. NULL when out of memory. */
float *nn__alloc_floats(size_t n);

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

/* At a CPU model's create: OpenBLAS to one thread, not its own default of one per core
 * (nn__sgemm splits big products over nn's pool instead). No-op without OpenBLAS. */
void nn__cpu_apply_threads(void);
/* Which conv2d kernels the CPU layers use from now on, by name: "gemm" (im2col +
 * nn__sgemm), "portable", "avx2", "avx512" (nn/cpu/convk.c), as SHOAL_NN_CONV_PATH
 * would set it; for benchmarks that compare them in one process. Returns the name of
 * the path in force (a path the CPU lacks gives the best it has; name NULL: no change),
 * NULL for an unknown name (nothing changes). Not thread-safe against running models. */
const char *nn__conv_path_force(const char *name);
/* Winograd F(m x m, r x r) for conv2d and conv-transpose2d on nn's own kernels
 * (nn/cpu/wino.c), as SHOAL_NN_WINOGRAD sets it: mode -1 where it pays, 0 never, 1 every
 * layer it can run, 2..5 every layer with tile size m = mode where it has one (another
 * value changes nothing). Returns the mode before. Not thread-safe against
 * running models. */
int nn__wino_mode(int mode);
/* The direct conv2d forward (nn/cpu/convk.c): 1 on, 0 off (SHOAL_NN_DIRECT), -1 leaves it;
 * returns the mode before. For the tests and benchmarks. */
int nn__direct_mode(int mode);
/* The row kernels for small stride-1 conv2d layers (nn/cpu/convk.c): 0 off, 1 where they
 * pay, 2 every layer they can run (SHOAL_NN_ROW), -1 leaves it; returns the mode before
 * (always 0 off x86). For the tests and benchmarks. */
int nn__row_mode(int mode);
/* Kernel paths chosen by timing (nn/cpu/plan.c): 1 on, 0 off (convk.c's rules, as
 * SHOAL_NN_PLAN=rules), -1 leaves it; returns the mode before. A model keeps the paths it
 * has timed; one built while off runs the rules. For the tests and benchmarks. */
int nn__plan_mode(int mode);
/* The thread count nn_set_threads set (1 unless set). */
int nn__cpu_threads(void);

/* Conv2d runs samples in groups whose im2col matrix (K x g*P floats) fits in about
 * NN__COL_BUDGET floats; the group size for max_batch. */
#define NN__COL_BUDGET ((size_t)256 * 1024)
int nn__conv_group(int K, int P, int max_batch);

/* The losses' checks (nn/loss.c): NULL inputs and sizes, then a NaN or infinity in pred,
 * target (when target_is_float) or w, named; and the mean's finish, refusing a
 * non-finite loss. For nn_custom_loss. */
int nn__loss_check(const char *loss, const float *pred, const void *target, const float *w, int B,
                   int N, bool target_is_float, shoal_error *err);
int nn__loss_finish(const char *loss, double sum, float *out, shoal_error *err);

/* y = accumulate ? y + x : x, n floats. */
void nn__put(float *y, const float *x, size_t n, bool accumulate);

/* NN__CAN_CLONE: nn may give hot loops per-ISA clones (target_clones, chosen at load time):
 * x86-64 with gcc >= 8 or clang >= 14, and not under ThreadSanitizer, where a clone's
 * resolver runs during relocation, before TSan's runtime is up, and crashes there. */
#if defined(__SANITIZE_THREAD__)
#define NN__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NN__TSAN 1
#endif
#endif
#if defined(__x86_64__) && !defined(NN__TSAN) &&      \
    ((defined(__clang__) && __clang_major__ >= 14) || \
     (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 8))
#define NN__CAN_CLONE 1
#endif

#endif
