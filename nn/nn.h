/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/nn.h — shoal's layer library: float32 NCHW tensors, layers with forward and
 * backward, models that own one contiguous parameter buffer and one gradient buffer,
 * losses, optimizers and safetensors checkpoints. Depends on common/ and (optionally)
 * BLAS and CUDA only.
 *
 * A model is a small graph built in order: each layer takes the current node as input
 * (the last one added, or the one chosen with nn_model_select) and becomes the current
 * node. Two-input nodes (nn_add, nn_concat) make residual blocks; D(G(z)) is two models,
 * G's output fed to D and D's input gradient fed back to G's backward.
 *
 *   shoal_error err = {0};
 *   nn_model *q = nn_model_create(NN_CPU, &err);
 *   nn_input(q, 4, 1, 1);                       // per-sample shape C, H, W
 *   nn_dense(q, "fc1", 64);  nn_activation(q, "act1", NN_RELU, 0);
 *   nn_dense(q, "fc2", 64);  nn_activation(q, "act2", NN_RELU, 0);
 *   nn_dense(q, "out", 2);
 *   if (nn_model_build(q, 256, 42, &err)) die(err.msg);   // max batch 256, init seed 42
 *
 *   nn_optim_config oc = nn_optim_defaults(NN_ADAM);  oc.lr = 1e-3f;  oc.clip_norm = 10;
 *   nn_optim *opt = nn_optim_create(q, &oc, &err);
 *   const float *y;  float loss;
 *   nn_model_zero_grad(q);
 *   nn_model_forward(q, x, 256, &y, &err);               // y: (256, 2), owned by q
 *   nn_huber_loss(&loss, dy, y, target, weights, 256, 2, 1.0f, &err);
 *   nn_model_backward(q, dy, NULL, &err);                // grads += d loss / d params
 *   nn_optim_step(opt, &err);
 *   nn_model_save(q, "q.safetensors", &err);
 *
 * Errors: every fallible function returns 0 or a negative SHOAL_E... code and, when err
 * is not NULL, a message naming the layer or tensor. Layer-adding functions return the
 * new node's id (>= 0) or a negative code.
 */
#ifndef SHOAL_NN_H
#define SHOAL_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nn_model nn_model;
typedef struct nn_optim nn_optim;

typedef enum nn_device { NN_CPU = 0, NN_CUDA = 1 } nn_device;

typedef enum nn_act {
  NN_RELU = 0,
  NN_LEAKY_RELU = 1, /* alpha: negative slope (PyTorch default 0.01) */
  NN_ELU = 2,        /* alpha (PyTorch default 1.0) */
  NN_TANH = 3,
  NN_SIGMOID = 4,
  NN_SOFTMAX = 5,     /* over the C*H*W features of each sample */
  NN_LOG_SOFTMAX = 6, /* likewise */
  NN_SCALE = 7,       /* alpha * x: a fixed scale (1/255 takes byte images to [0, 1]) */
} nn_act;

/* Sets the threads nn uses: its own pool, which also runs big matrix products as
 * blocks (OpenBLAS itself stays on the calling thread). n <= 0: one per core. */
void nn_set_threads(int n);
/* True when a CUDA device is usable; else false and, if err, the reason ("no CUDA
 * device", or "shoal was built without the CUDA backend"). */
bool nn_cuda_available(shoal_error *err);

/* ---- models ------------------------------------------------------------------ */

/* Creates an empty model on a device. Caller owns it; NULL on error (err says why,
 * e.g. "no CUDA device"). */
nn_model *nn_model_create(nn_device device, shoal_error *err);
void nn_model_destroy(nn_model *m); /* NULL is fine */

/* Declares the per-sample input shape (C, H, W; a vector of N features is N, 1, 1).
 * Must come first, once. Returns node 0. */
int nn_input(nn_model *m, int C, int H, int W);
/* Makes node the input of the next layer added. Returns node or a negative code. */
int nn_model_select(nn_model *m, int node);
/* The current (last added or selected) node. */
int nn_model_current(const nn_model *m);
/* What node is: its layer kind ("dense", "conv2d", a custom layer's kind such as
 * "noisy_linear"), or NULL for a node m does not have; *custom (may be NULL) says whether
 * it is a custom layer (nn_custom, nn_custom_activation). Owned by m. */
const char *nn_node_kind(const nn_model *m, int node, bool *custom);
/* Per-sample output shape of a node. */
int nn_node_shape(const nn_model *m, int node, int *C, int *H, int *W);

/* Layers. name must be unique in the model (it prefixes the tensor names in
 * checkpoints: "fc1.weight", "fc1.bias", as PyTorch's state_dict names them). It may be
 * a PyTorch module path, parts joined by '.' ("features.0", "layer1.0.conv1"), so a
 * model built by hand matches a torch model's state_dict ("features.0.weight"); the
 * parts must be non-empty. '"', '\\' and control characters are refused; at most 127
 * bytes. NULL or "" names the layer after its kind and node ("dense3"). */

/* Flags of the layers with a bias (dense, conv2d, conv_transpose2d). */
typedef enum nn_layer_flags {
  NN_NO_BIAS = 1 << 0, /* PyTorch's bias=False: no bias tensor is allocated, initialised,
                        * trained, saved or loaded, and y = W x alone */
} nn_layer_flags;

/* y = x W^T + b over the C*H*W input features; weight (out, in), bias (out). */
int nn_dense(nn_model *m, const char *name, int out_features);
/* y = conv(x, W) + b; weight (out_c, C, kh, kw), bias (out_c). */
int nn_conv2d(nn_model *m, const char *name, int out_c, int kh, int kw, int stride, int pad,
              int dilation);
/* The adjoint of conv2d, + b; weight (C, out_c, kh, kw) as PyTorch lays it out. */
int nn_conv_transpose2d(nn_model *m, const char *name, int out_c, int kh, int kw, int stride,
                        int pad, int output_pad);
/* The same with flags (nn_layer_flags; 0 is the plain call). An unknown flag is
 * SHOAL_EINVAL. */
int nn_dense_ex(nn_model *m, const char *name, int out_features, unsigned flags);
int nn_conv2d_ex(nn_model *m, const char *name, int out_c, int kh, int kw, int stride, int pad,
                 int dilation, unsigned flags);
int nn_conv_transpose2d_ex(nn_model *m, const char *name, int out_c, int kh, int kw, int stride,
                           int pad, int output_pad, unsigned flags);
int nn_maxpool2d(nn_model *m, const char *name, int k, int stride, int pad);
int nn_avgpool2d(nn_model *m, const char *name, int k, int stride, int pad);
/* Batch norm over C (1-d when H = W = 1, else 2-d); running statistics updated in
 * training mode with momentum (PyTorch's convention: new = (1-m)*old + m*batch). */
int nn_batchnorm(nn_model *m, const char *name, float eps, float momentum);
int nn_layernorm(nn_model *m, const char *name, float eps); /* over C*H*W, with affine */
int nn_dropout(nn_model *m, const char *name, float p);     /* inverted dropout */
int nn_flatten(nn_model *m, const char *name);              /* (C,H,W) -> (C*H*W,1,1) */
int nn_reshape(nn_model *m, const char *name, int C, int H, int W);
/* Embedding: input features are indices stored as floats (exact below 2^24), each
 * mapped to a dim-vector: (N,1,1) -> (N*dim,1,1). An index out of range is an error. */
int nn_embedding(nn_model *m, const char *name, int num, int dim);
int nn_activation(nn_model *m, const char *name, nn_act act, float alpha);
/* LSTM cell: input features [x (I) | h (Hd) | c (Hd)], output [h' | c'] (2*Hd), with
 * PyTorch's gate order i, f, g, o and tensors weight_ih (4Hd, I), weight_hh (4Hd, Hd),
 * bias_ih, bias_hh. GRU cell: input [x | h], output h' (Hd), gates r, z, n as PyTorch. */
int nn_lstm_cell(nn_model *m, const char *name, int hidden);
int nn_gru_cell(nn_model *m, const char *name, int hidden);
/* Feature-axis (C) slice [start, start+count) of the current node. */
int nn_slice(nn_model *m, const char *name, int start, int count);
/* Element-wise sum of two nodes of the same shape (residual blocks). */
int nn_add(nn_model *m, const char *name, int a, int b);
/* Concatenation of two nodes along C (same H, W). */
int nn_concat(nn_model *m, const char *name, int a, int b);
/* Element-wise product y = a ⊙ b. b has a's shape, or one feature per sample (C = H =
 * W = 1), which scales every feature of that sample: a per-sample mask, such as the
 * 0/1 that resets a recurrent state at an episode's start. Gradients flow to both. */
int nn_mul(nn_model *m, const char *name, int a, int b);

/* Applies layer `like` again, to the current node, with the same parameters (and
 * state): tied weights whose gradients add up, for recurrent cells unrolled over time
 * (backpropagation through time) and Siamese branches. The current node's shape must
 * be like's input shape; like must be a one-input layer. Adds no tensors. */
int nn_shared(nn_model *m, const char *name, int like);

/* The message of the last failed call on m that took no shoal_error (the layer-adding
 * functions, select, set_output): "nn: layer 'fc1': ...". "" when none failed. Owned
 * by m. nn_model_build reports the first such failure. */
const char *nn_model_error(const nn_model *m);

/* Marks the model's output node (default: the last added). */
int nn_model_set_output(nn_model *m, int node);
/* Allocates and initialises parameters (PyTorch's default init for each layer, from
 * seed), gradients and the activation buffers for batches up to max_batch. No layer
 * may be added afterwards. */
int nn_model_build(nn_model *m, int max_batch, uint64_t seed, shoal_error *err);

/* Training mode (dropout active, batch norm uses batch statistics) or evaluation.
 * A new model is in training mode. */
void nn_model_set_training(nn_model *m, bool training);
bool nn_model_training(const nn_model *m);
/* Reseeds the model's own random stream, the one dropout masks and custom layers'
 * draws (nn_layer_call.rng) come from; build seeds it from its init seed. For copies
 * of one network that must draw differently (one per actor). Can't fail. */
void nn_model_set_seed(nn_model *m, uint64_t seed);
/* The max_batch given to build; 0 before build. */
int nn_model_max_batch(const nn_model *m);

/* Forward pass of B samples (B <= max_batch). x: (B, C, H, W), borrowed and read again
 * by backward, so it must stay valid until then; it may not point into m's own buffers
 * (copy m's output out before feeding it back). *y points into the model's own
 * buffer, valid until the next forward. Errors: B out of range, a NaN in x (ENAN). */
int nn_model_forward(nn_model *m, const float *x, int B, const float **y, shoal_error *err);
/* Backward of the last forward. dy: (B, output shape), borrowed. Adds parameter
 * gradients to the gradient buffer. When dx is not NULL, *dx points to the input
 * gradient, in the model's buffer (computed only then: without dx the first layer
 * skips its input gradient). Batch norm and dropout go back in the forward's mode.
 * Calling it twice adds the gradients twice. Errors: no forward before it. */
int nn_model_backward(nn_model *m, const float *dy, const float **dx, shoal_error *err);
void nn_model_zero_grad(nn_model *m); /* can't fail */

/* The flat buffers. Parameters are trained; state holds the rest that a checkpoint
 * keeps (batch norm running mean, var and num_batches_tracked). Owned by the model. */
float *nn_model_params(nn_model *m, size_t *n);
float *nn_model_grads(nn_model *m, size_t *n);
float *nn_model_state(nn_model *m, size_t *n);

/* The model's tensors, parameters first then state, in layer order. */
typedef struct nn_tensor_info {
  const char *name; /* "fc1.weight"; owned by the model */
  int ndim;         /* 0..4; 0 is a scalar (num_batches_tracked), numel 1 */
  int shape[4];     /* PyTorch's layout: dense weight (out, in), conv (out, in, kh, kw) */
  size_t offset;    /* in floats, into the params buffer (trainable) or the state buffer */
  size_t numel;
  bool trainable;
  /* fan_in, fan_out as torch.nn.init computes them, for the initialisers below; a
   * 1-d tensor (a bias) has its layer weight's fans (PyTorch bounds the bias init
   * with the weight's fan_in) */
  int fan_in, fan_out;
} nn_tensor_info;
int nn_model_tensor_count(const nn_model *m);
/* Fills *info for tensor i (0 <= i < count). */
int nn_model_tensor(const nn_model *m, int i, nn_tensor_info *info);
/* Finds a tensor by name; SHOAL_ENOENT when there is none. */
int nn_model_find_tensor(const nn_model *m, const char *name, nn_tensor_info *info);

/* Copies parameters and state from src (same architecture: same tensors, names and
 * shapes; else SHOAL_ESHAPE naming the first difference). For target networks. */
int nn_model_copy(nn_model *dst, const nn_model *src, shoal_error *err);
/* Number of multiply-adds ×2 for a forward of one sample (for GFLOP/s reports). */
double nn_model_flops_per_sample(const nn_model *m);
/* The node named name, or SHOAL_ENOENT (SHOAL_EINVAL for NULL). */
int nn_model_find_node(const nn_model *m, const char *name);
/* Writes a table of the model (one line per node: kind, name, inputs, output shape,
 * parameters; then the totals) into buf, snprintf-style: at most n bytes, always
 * terminated when n > 0; returns the length the whole table needs. Can't fail. */
size_t nn_model_describe(const nn_model *m, char *buf, size_t n);

/* Per-layer wall time, as torch.profiler's table: nn_model_profile(m, true, err) zeroes the
 * counts and makes every later forward and backward add each layer's calls and time to
 * them (two clock reads a layer, ~50 ns); false stops counting and keeps the counts.
 * A fused ReLU's time is its conv's or dense's. CPU models only: SHOAL_ENOTSUP on a
 * device model, whose kernels run asynchronously (use Nsight Systems there). */
int nn_model_profile(nn_model *m, bool on, shoal_error *err);
/* Writes the counts into buf as nn_model_describe does (snprintf-style, returns the
 * length the whole table needs): one line per layer that ran (kind, name, forward calls
 * and ms, backward calls and ms, share of the total), heaviest first, then the total.
 * Can't fail. */
size_t nn_model_profile_table(const nn_model *m, char *buf, size_t n);
/* Which kernel path each conv2d, conv_transpose2d and dense layer of a CPU model runs,
 * per batch size it has run at, as chosen by timing the paths on this CPU (docs/nn.md,
 * "Kernel paths"): one line per layer and batch, "NAME: batch B: forward P, dW P, dx P"
 * ("-": not run yet; "rules": the fixed rules). Written into buf as nn_model_describe
 * does; returns the length the whole text needs (0: no plans, e.g. a CUDA model or
 * SHOAL_NN_PLAN=rules). Can't fail. */
size_t nn_model_kernels(const nn_model *m, char *buf, size_t n);

/* ---- devices: the same calls on a CPU or a CUDA model ------------------------------ */
/* A model created on NN_CUDA (when shoal is built with the CUDA backend and a device
 * is present) keeps its parameters, gradients, state and activations in device memory
 * and queues its work on the calling thread's own CUDA stream (cudaStreamPerThread), so
 * the models one thread uses run in call order (G's output fed to D needs nothing
 * more) and other threads' models do not wait on them. A model is used by one thread
 * at a time.
 *  - nn_model_forward takes x in device memory; *y, backward's dy and *dx are device
 *    pointers. The calls return before the device finishes; a kernel's failure shows at
 *    the next call that waits (nn_model_sync, nn_model_to_host, nn_optim_step, a loss
 *    with loss != NULL). forward does not scan x for NaN: nn_model_to_device does, on
 *    the way in.
 *  - nn_model_params, _state and _grads return host copies, downloaded when the
 *    device's are newer (a wait); NULL on a CUDA failure. After writing into the host
 *    parameters or state, call nn_model_params_changed to upload them. Checkpoints,
 *    nn_model_copy (across devices too) and nn_optim_* handle this themselves.
 *  - nn_optim_create over it keeps the moments on the device and steps there (fused
 *    kernels over the flat buffer; clipping and the NaN skip decided on the device;
 *    each step waits once, for that decision).
 *  - A host array passed where device memory belongs (x, dy, a loss's arrays) is
 *    refused with SHOAL_EINVAL before any kernel reads it.
 * On a CPU model the helpers below are plain memory operations, so an algorithm is
 * written once for both. */

nn_device nn_model_device(const nn_model *m);
/* n zeroed floats in m's memory (the device's for a CUDA model). Caller frees with
 * nn_model_free. NULL on error. */
float *nn_model_alloc(nn_model *m, size_t n, shoal_error *err);
void nn_model_free(nn_model *m, float *p); /* NULL is fine */
/* Copies n floats from host src into dst in m's memory. On a CUDA model it goes
 * through the model's pinned staging buffers asynchronously on its stream: src may be
 * reused as soon as this returns. A NaN or infinity in src is SHOAL_ENAN naming the
 * first one (dst may then hold a prefix of src). Borrows both for the call. */
int nn_model_to_device(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err);
/* Copies n floats from src in m's memory to host dst, after m's queued work. */
int nn_model_to_host(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err);
/* Waits for m's queued work; returns the first CUDA failure not yet reported
 * (SHOAL_ECUDA, naming the layer and the call). 0 at once on a CPU model. */
int nn_model_sync(nn_model *m, shoal_error *err);
/* Uploads the host parameters and state of a CUDA model after the caller wrote into
 * them (no-op on a CPU model). */
int nn_model_params_changed(nn_model *m, shoal_error *err);

typedef enum nn_loss_kind {
  NN_LOSS_MSE = 0,
  NN_LOSS_HUBER = 1,      /* threshold delta */
  NN_LOSS_BCE_LOGITS = 2, /* binary cross-entropy with logits */
  /* cross-entropy over logits (B, N) with target (B, N) class probabilities (one-hot
   * rows for hard labels): nn_cross_entropy_soft_loss, mean over B */
  NN_LOSS_CROSS_ENTROPY = 3,
} nn_loss_kind;
/* A loss on m's device, with the formulas, weights and "mean" reduction of
 * nn_mse_loss, nn_huber_loss, nn_bce_with_logits_loss and nn_cross_entropy_soft_loss
 * below; pred, target, w (B per-sample weights) and dpred (B, N) are in m's memory
 * (device pointers on a CUDA model; w and dpred may be NULL; dpred is overwritten).
 * On a CUDA model, loss may be NULL: then nothing waits and nothing checks for NaN
 * (launch-bound training loops); else it waits and a non-finite loss or input is
 * SHOAL_ENAN. On a CPU model it calls the functions below. */
int nn_model_loss(nn_model *m, nn_loss_kind kind, float *loss, float *dpred, const float *pred,
                  const float *target, const float *w, int B, int N, float delta, shoal_error *err);

/* Priorities for proportional prioritized replay (Schaul et al. 2016), computed where
 * pred lives, so a CUDA learner downloads B floats instead of its outputs:
 * prio[i] = (sum_j |pred_ij - target_ij| + eps)^alpha. With a DQN target that differs
 * from pred only in the taken action's column, the sum is |TD error|. pred and target
 * (B, N) are in m's memory; prio is host memory, written after m's queued work.
 * Errors: B outside [1, max_batch], N < 1, alpha < 0, eps < 0 (SHOAL_EINVAL); a NaN
 * or infinite priority (SHOAL_ENAN, naming the sample). */
int nn_model_priorities(nn_model *m, float *prio, const float *pred, const float *target, int B,
                        int N, float alpha, float eps, shoal_error *err);

/* ---- initialisers (torch.nn.init's formulas), on raw arrays --------------------- */
/* Each fills w[0..n) from rng (borrowed; the same seed gives the same weights). fan_in
 * and fan_out as nn_tensor_info gives them; they must be > 0 (checked by SHOAL_ASSERT:
 * a caller's bug). These can't fail otherwise. */

void nn_init_zeros(float *w, size_t n);
/* U[lo, hi). */
void nn_init_uniform(float *w, size_t n, float lo, float hi, shoal_rng *rng);
/* Glorot: U(-a, a), a = gain sqrt(6 / (fan_in + fan_out)). */
void nn_init_xavier_uniform(float *w, size_t n, int fan_in, int fan_out, float gain,
                            shoal_rng *rng);
/* Glorot: N(0, std^2), std = gain sqrt(2 / (fan_in + fan_out)). */
void nn_init_xavier_normal(float *w, size_t n, int fan_in, int fan_out, float gain, shoal_rng *rng);
/* Kaiming/He with gain sqrt(2) (ReLU), fan_in mode: U(-sqrt(6 / fan_in), +) and
 * N(0, 2 / fan_in). */
void nn_init_kaiming_uniform(float *w, size_t n, int fan_in, shoal_rng *rng);
void nn_init_kaiming_normal(float *w, size_t n, int fan_in, shoal_rng *rng);
/* Orthogonal (Saxe et al. 2013, as torch.nn.init.orthogonal_): w (rows x cols, row-major)
 * gets W W^T = gain^2 I when rows <= cols, W^T W = gain^2 I otherwise; for a conv
 * weight pass rows = out channels, cols = the rest. Returns 0, SHOAL_EINVAL for a
 * non-positive size or SHOAL_ENOMEM (w untouched then). */
int nn_init_orthogonal(float *w, int rows, int cols, float gain, shoal_rng *rng);

/* ---- losses ------------------------------------------------------------------- */
/* Each writes the loss to *loss and, when dpred is not NULL, d loss / d pred to dpred
 * (overwriting it, not adding). Reduction is PyTorch's "mean"; w, when not NULL, holds
 * B per-sample weights (importance weights) and the loss is (1/(B*N)) sum_i w_i
 * sum_j l_ij (1/B for cross-entropy). Sums run in double. Errors, with nothing written:
 * a NaN or infinity in the inputs or the loss (SHOAL_ENAN, naming the first bad entry),
 * B or N < 1 or a NULL input (SHOAL_EINVAL). All arrays are borrowed for the call. */
int nn_mse_loss(float *loss, float *dpred, const float *pred, const float *target, const float *w,
                int B, int N, shoal_error *err);
/* Huber / smooth L1 with threshold delta > 0 (PyTorch's HuberLoss): with d = pred -
 * target, d^2 / 2 when |d| < delta, else delta (|d| - delta / 2). */
int nn_huber_loss(float *loss, float *dpred, const float *pred, const float *target, const float *w,
                  int B, int N, float delta, shoal_error *err);
/* Cross-entropy over logits (B, C) with class indices in [0, C) (else SHOAL_ERANGE),
 * through a shifted log-sum-exp, so large logits do not overflow. */
int nn_cross_entropy_loss(float *loss, float *dlogits, const float *logits, const int32_t *labels,
                          const float *w, int B, int C, shoal_error *err);
/* Cross-entropy over logits with soft targets (probabilities, each row sums to 1):
 * -sum_c p_c log_softmax(x)_c, PyTorch's cross_entropy with probability targets. */
int nn_cross_entropy_soft_loss(float *loss, float *dlogits, const float *logits, const float *probs,
                               const float *w, int B, int C, shoal_error *err);
/* Binary cross-entropy with logits, targets in [0, 1], in the stable form
 * max(x, 0) - x t + log(1 + exp(-|x|)). */
int nn_bce_with_logits_loss(float *loss, float *dlogits, const float *logits, const float *targets,
                            const float *w, int B, int N, shoal_error *err);

/* ---- optimizers ------------------------------------------------------------------ */

typedef enum nn_optim_kind { NN_SGD = 0, NN_ADAM = 1, NN_ADAMW = 2, NN_RMSPROP = 3 } nn_optim_kind;

typedef struct nn_optim_config {
  nn_optim_kind kind;
  float lr;
  float momentum;     /* sgd, rmsprop */
  float dampening;    /* sgd (PyTorch's default 0); nesterov needs 0 */
  bool nesterov;      /* sgd */
  float weight_decay; /* L2 added to the gradient (sgd, adam, rmsprop); decoupled (adamw) */
  float beta1, beta2; /* adam, adamw */
  float eps;          /* adam, adamw, rmsprop */
  float alpha;        /* rmsprop smoothing */
  bool centered;      /* rmsprop */
  float clip_norm;    /* > 0: clip the global gradient L2 norm to this before the step */
} nn_optim_config;

/* PyTorch's defaults for kind (adam: lr 1e-3, betas 0.9, 0.999, eps 1e-8; adamw:
 * weight_decay 0.01; rmsprop: lr 0.01, alpha 0.99, eps 1e-8; sgd: lr 0.01, no
 * momentum). The update formulas are torch.optim 1.13's, element for element. Can't
 * fail. */
nn_optim_config nn_optim_defaults(nn_optim_kind kind);
/* An optimizer over all of m's parameters; it keeps its moments in buffers laid out as
 * the parameter buffer. Caller owns it; m must outlive it. NULL on error. */
nn_optim *nn_optim_create(nn_model *m, const nn_optim_config *cfg, shoal_error *err);
/* The same over any flat buffers of n floats (params updated in place, grads read and,
 * when clipping, scaled). Borrows both; they must outlive the optimizer. A bad config
 * (negative lr, betas outside [0, 1), nesterov without momentum, ...) is SHOAL_EINVAL. */
nn_optim *nn_optim_create_buffers(float *params, float *grads, size_t n, const nn_optim_config *cfg,
                                  shoal_error *err);
void nn_optim_destroy(nn_optim *o); /* NULL is fine */
/* One step from the gradient buffer: clip (when clip_norm > 0; the gradient buffer is
 * scaled in place, as PyTorch's clip_grad_norm_ does), then update. A non-finite
 * gradient skips the step and returns SHOAL_ENAN (parameters, moments and the step
 * count are left as they were; the caller zeroes the gradient and goes on). */
int nn_optim_step(nn_optim *o, shoal_error *err);
/* Steps taken (Adam's bias correction uses it). */
long nn_optim_steps(const nn_optim *o);
/* Zeroes the moments and the step count (a fresh optimizer on the same buffers). */
void nn_optim_reset(nn_optim *o);
/* The optimizer's state, to resume training: a safetensors file (or buffer) with
 * torch.optim's state names, each a (n,) F32 tensor: "exp_avg", "exp_avg_sq" (adam,
 * adamw), "momentum_buffer" (sgd and rmsprop with momentum), "square_avg", "grad_avg"
 * (rmsprop, centered) and "step" (an I64 scalar); __metadata__ names the kind. Load
 * checks every tensor against o (same parameter count and optimizer kind) and changes
 * nothing on error; the config (lr, betas, ...) is o's own. save_buffer: caller frees
 * *buf with free(). Saving is atomic as nn_model_save. */
int nn_optim_save(const nn_optim *o, const char *path, shoal_error *err);
int nn_optim_load(nn_optim *o, const char *path, shoal_error *err);
int nn_optim_save_buffer(const nn_optim *o, uint8_t **buf, size_t *len, shoal_error *err);
int nn_optim_load_buffer(nn_optim *o, const uint8_t *buf, size_t len, shoal_error *err);
/* Sets the learning rate of the next steps (a schedule's value); a negative or
 * non-finite lr makes nn_optim_step refuse (SHOAL_EINVAL) until it is fixed. */
void nn_optim_set_lr(nn_optim *o, float lr);
float nn_optim_lr(const nn_optim *o);
/* Global L2 norm of the gradient before clipping, from the last step. */
float nn_optim_last_grad_norm(const nn_optim *o);
/* Scales g so its L2 norm is at most max_norm (PyTorch's clip_grad_norm_: by
 * max_norm / (norm + 1e-6) when that is below 1); returns the norm before scaling,
 * summed in double. A non-finite norm is returned and g left unscaled. */
float nn_clip_grad_norm(float *g, size_t n, float max_norm);

typedef enum nn_schedule_kind {
  NN_SCHED_CONSTANT = 0,
  NN_SCHED_LINEAR = 1, /* from start to end over steps, then end */
  NN_SCHED_COSINE = 2, /* cosine annealing from start to end over steps, then end */
} nn_schedule_kind;
typedef struct nn_schedule {
  nn_schedule_kind kind;
  float start, end;
  long steps;
  long warmup; /* linear warm-up from 0 over the first warmup steps; 0 for none */
} nn_schedule;
/* The value at step (0-based). With warm-up W: start * step / W for step < W; then
 * the schedule runs from start at step W to end at step `steps` (so `steps` counts the
 * warm-up too) and stays at end. A constant schedule is start after any warm-up.
 * E.g. linear 1.0 -> 0.1 over 100 steps: 1.0 at 0, 0.55 at 50, 0.1 from 100 on. Can't
 * fail. */
float nn_schedule_value(const nn_schedule *s, long step);

/* ---- checkpoints (safetensors: u64 header length, JSON header, raw LE data) ----- */
/* The files are safetensors exactly (https://github.com/huggingface/safetensors): an
 * 8-byte little-endian header length N, N bytes of JSON padded with spaces to a
 * multiple of 8 ({"__metadata__": {"format": "pt", ...}, "fc1.weight": {"dtype": "F32",
 * "shape": [64, 4], "data_offsets": [0, 1024]}, ...}), then the data, so PyTorch's
 * safetensors loaders read them into the same architecture and shoal reads theirs. */

/* Writes every tensor (parameters and state) under its name as F32, shaped as PyTorch's
 * state_dict shapes it; atomic (temporary file beside path, fsync, rename, fsync of the
 * folder), so a crash leaves the old file or the new one. */
int nn_model_save(const nn_model *m, const char *path, shoal_error *err);
/* Reads a safetensors file into m. Every tensor of m must be present once, with the
 * same shape and dtype F32, F16 or BF16 (widened to float exactly; state such as
 * num_batches_tracked may also be I64, as torch writes it), and no other; offsets must
 * tile the data exactly and values be finite. A missing, extra or mis-shaped tensor,
 * another dtype, a truncated or malformed file or a NaN or infinity is an error
 * (SHOAL_ESHAPE, SHOAL_EFORMAT, SHOAL_ENAN, SHOAL_ENOENT, SHOAL_EIO) naming the tensor
 * and the file, and leaves m unchanged. */
int nn_model_load(nn_model *m, const char *path, shoal_error *err);
/* The same to and from memory. save_buffer: caller frees *buf with free(). */
int nn_model_save_buffer(const nn_model *m, uint8_t **buf, size_t *len, shoal_error *err);
int nn_model_load_buffer(nn_model *m, const uint8_t *buf, size_t len, shoal_error *err);

/* How nn_model_load_ex matches the file's tensor names to the model's. A zeroed struct
 * is nn_model_load.
 *
 *   nn_load_options o = {.from_prefix = "module."};      // DataParallel's checkpoint
 *   nn_load_options o = {.from_prefix = "backbone.", .skip_unmatched = true};
 *                                                         // a detector's backbone alone */
typedef struct nn_load_options {
  /* A file name that starts with from_prefix loads into the model's tensor named
   * to_prefix + the rest ("module.fc1.weight" -> "fc1.weight" with "module." -> "").
   * NULL is "". When from_prefix is not "", no file name starting with it is
   * SHOAL_ENOENT naming the prefix, and a file name without it is an error unless
   * skip_unmatched. Borrowed for the call. */
  const char *from_prefix;
  const char *to_prefix;
  /* File tensors outside from_prefix, or whose mapped name the model lacks, are
   * skipped (their bytes still count in the file's checks; any safetensors dtype) instead
   * of being errors. Every tensor of the model must still be in the file. */
  bool skip_unmatched;
} nn_load_options;
/* nn_model_load and nn_model_load_buffer with options (NULL: none). Errors as theirs;
 * each names the file's tensor and, when mapped, the model's. */
int nn_model_load_ex(nn_model *m, const char *path, const nn_load_options *opt, shoal_error *err);
int nn_model_load_buffer_ex(nn_model *m, const uint8_t *buf, size_t len, const nn_load_options *opt,
                            shoal_error *err);

/* ---- custom layers, activations and losses: nn's transparent backend ------------ */
/* A layer of your own, written in C against this header alone, sits in a model as any
 * built-in layer does: in nn_add / nn_concat graphs, shared with nn_shared, in
 * nn_model_save / load (its tensors under "<layer>.<name>", as a torch.nn.Module's
 * state_dict names them), in every optimizer, in gradient clipping, in nn_model_copy,
 * nn_model_describe and nn_model_profile. What it needs to give is a table:
 *
 *   static int glu_shape(nn_layer_shape *s, shoal_error *err) {     // (2n) -> (n)
 *     if (s->in_C % 2) return shoal_error_set(err, SHOAL_ESHAPE, "glu: odd width");
 *     s->C = s->in_C / 2, s->H = s->in_H, s->W = s->in_W;
 *     return 0;
 *   }
 *   static int glu_forward(const nn_layer_call *c, shoal_error *err) { ... c->y ... }
 *   static void glu_backward(const nn_layer_call *c) { ... c->dx ... }
 *   static const nn_layer_type glu = {NN_LAYER_ABI, "glu", 0, glu_shape, glu_forward,
 *                                     glu_backward};
 *   nn_custom(m, "gate", &glu, NULL);
 *
 * docs/custom-layers.md walks through a whole one (NoisyNet's noisy linear layer,
 * examples/noisy_net/) and its tests. nn_check_gradients tests a backward against finite
 * differences. */

#define NN_LAYER_ABI 1       /* nn_layer_type.abi: the version of this table */
#define NN_LAYER_TENSORS 8   /* tensors (parameters and state) a custom layer may have */

/* How nn_model_build fills a custom layer's tensor (from the model's init seed, in table
 * order, as the built-in layers' tensors are filled). */
typedef enum nn_param_init {
  NN_INIT_ZEROS = 0,
  NN_INIT_ONES = 1,
  NN_INIT_CONSTANT = 2, /* a */
  NN_INIT_UNIFORM = 3,  /* U(a, b) */
  NN_INIT_NORMAL = 4,   /* N(a, b^2): mean a, standard deviation b */
  /* PyTorch's nn.Linear / nn.Conv2d default for weights and biases alike:
   * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
  NN_INIT_TORCH_DEFAULT = 5,
} nn_param_init;

/* One tensor of a custom layer, declared by its shape function. */
typedef struct nn_param_spec {
  const char *name; /* the suffix: "weight_mu" is saved as "<layer>.weight_mu"; letters,
                       digits and '_' only (no '.'); copied at nn_custom */
  int ndim;         /* 0..4 (0: a scalar) */
  int shape[4];
  bool trainable; /* true: a parameter (trained, clipped, in nn_model_params); false:
                     state (saved, loaded and copied, never trained: running statistics,
                     noise), in nn_model_state */
  nn_param_init init;
  float a, b;          /* the initialiser's arguments */
  int fan_in, fan_out; /* as nn_tensor_info reports them; 0: PyTorch's from the shape
                          (dim 1 times the rest for fan_in, dim 0 times the rest out) */
} nn_param_spec;

/* What a layer type's shape function reads and fills, once, at nn_custom. */
typedef struct nn_layer_shape {
  const void *config; /* in: the layer's copy of the config nn_custom was given */
  const char *name;   /* in: the layer's name, for messages */
  int in_C, in_H, in_W;
  int C, H, W; /* out: the per-sample output shape (each >= 1) */
  nn_param_spec params[NN_LAYER_TENSORS];
  int n_params;            /* out: tensors declared, in the order calls see them */
  size_t cache_per_sample; /* out: floats per sample that forward keeps for backward */
  size_t cache_fixed;      /* out: floats that do not grow with the batch */
  double flops;            /* out: multiply-adds x 2 per sample of a forward (reports) */
} nn_layer_shape;

/* What a layer's forward and backward get. Arrays are (B, C, H, W), row-major per
 * sample: x holds in_F = in_C*in_H*in_W floats a sample, y and dy F = C*H*W. All in
 * the model's memory (device memory for the _cuda functions). */
typedef struct nn_layer_call {
  const void *config;
  const char *name;
  int B;
  int in_C, in_H, in_W, in_F;
  int C, H, W, F;
  const float *x; /* the input, as forward saw it (backward too) */
  float *y;       /* forward writes the output; backward may read what forward wrote */
  const float *dy; /* backward: the gradient of the output; NULL in forward */
  /* backward: where the input's gradient goes; NULL when nothing upstream needs it
   * (skip the work). dx_add: add into dx (a node read twice) instead of writing. */
  float *dx;
  bool dx_add;
  /* tensor k's values (spec order) and, for a trainable one, its gradient, which
   * backward ADDS to (gradients accumulate over backward calls until zeroed); NULL
   * for state */
  float *t[NN_LAYER_TENSORS];
  float *g[NN_LAYER_TENSORS];
  float *cache; /* B * cache_per_sample + cache_fixed floats, kept from forward to
                   backward; NULL when none was asked for */
  bool training;  /* nn_model_set_training's mode of this forward */
  shoal_rng *rng; /* the model's own stream for random layers (dropout's); forward only */
  void *stream;   /* the _cuda functions: the model's cudaStream_t; NULL on the CPU */
} nn_layer_call;

typedef struct nn_layer_type {
  int abi;           /* NN_LAYER_ABI */
  const char *kind;  /* what describe, profile and messages call it ("noisy_linear") and
                        the name nn_layer_register files it under; letters, digits, '_' */
  size_t config_size; /* bytes of the config nn_custom copies (0: none) */
  /* Required. Checks the config against the input shape and fills the output shape and
   * the tensors; an error here fails nn_custom with the message. */
  int (*shape)(nn_layer_shape *s, shoal_error *err);
  /* Required. The CPU forward: writes y (and whatever it keeps in cache). Errors (a
   * value out of range) fail nn_model_forward with the message. */
  int (*forward)(const nn_layer_call *c, shoal_error *err);
  /* Required. The CPU backward: adds parameter gradients, writes or adds dx. */
  void (*backward)(const nn_layer_call *c);
  /* Optional: the same on a CUDA model, launched on c->stream; a model that holds a
   * layer without them is refused at nn_model_build (SHOAL_ENOTSUP, naming it). */
  int (*forward_cuda)(const nn_layer_call *c, shoal_error *err);
  void (*backward_cuda)(const nn_layer_call *c);
  /* Optional: fills a zeroed config for a layer of out_features outputs, so that an RL
   * config can put this kind where a dense layer goes (dqn.layer, ac.layer). */
  int (*dense_config)(void *config, int out_features, shoal_error *err);
} nn_layer_type;

/* Adds a custom layer of type after the current node. config (type->config_size bytes,
 * may be NULL when that is 0) is copied; type is borrowed and must outlive the model
 * (a static table, or a plugin that stays loaded). Returns the node or a negative code:
 * a bad table (wrong abi, a missing function) is SHOAL_EINVAL; the shape function's
 * own error is passed on. */
int nn_custom(nn_model *m, const char *name, const nn_layer_type *type, const void *config);

/* An element-wise activation of your own: y = f(x); backward dx = dy * df(x, y). Both
 * required; alpha is nn_custom_activation's. */
typedef struct nn_activation_type {
  int abi; /* NN_LAYER_ABI */
  const char *kind;
  float (*f)(float x, float alpha);
  float (*df)(float x, float y, float alpha); /* dy/dx at x (y = f(x) given too) */
} nn_activation_type;
/* Adds it as a layer (output shape = input shape). type is borrowed, as nn_custom's. */
int nn_custom_activation(nn_model *m, const char *name, const nn_activation_type *type,
                         float alpha);

/* An element-wise loss of your own: l(pred, target) and dl/dpred per element, reduced as
 * the built-in losses are (PyTorch's "mean", optional per-sample weights w). */
typedef struct nn_loss_type {
  int abi; /* NN_LAYER_ABI */
  const char *kind;
  double (*l)(float pred, float target, float param);
  float (*dl)(float pred, float target, float param);
} nn_loss_type;
/* As nn_mse_loss with type's formula: *loss = (1/(B*N)) sum_i w_i sum_j l(pred_ij,
 * target_ij), dpred (when not NULL) overwritten with its gradient; sums in double.
 * Host arrays. Errors as nn_mse_loss's (SHOAL_ENAN naming the entry, SHOAL_EINVAL). */
int nn_custom_loss(const nn_loss_type *type, float *loss, float *dpred, const float *pred,
                   const float *target, const float *w, int B, int N, float param,
                   shoal_error *err);

/* C (M, N) = alpha op(A) op(B) + beta C on host memory, row-major with row strides lda,
 * ldb, ldc; op transposes when ta / tb. nn's own product (OpenBLAS where it pays, nn's
 * threads on big ones), for custom layers' CPU functions. Borrows the arrays; can't fail
 * (sizes < 1 do nothing). */
void nn_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

/* ---- a registry by name, for configs and plugins ---- */
/* Files type under type->kind, so configs can name it (dqn.layer: noisy_linear). A kind
 * filed already by another table is SHOAL_EEXIST; the same table again is fine. type is
 * borrowed for the life of the process. Thread-safe. */
int nn_layer_register(const nn_layer_type *type, shoal_error *err);
/* The type filed under kind, or NULL. */
const nn_layer_type *nn_layer_find(const char *kind);
/* Writes the registered kinds, comma-separated, into buf (snprintf-style). */
size_t nn_layer_kinds(char *buf, size_t n);
/* Loads a shared library of layers: dlopen(path), then calls the function it exports as
 *   int shoal_nn_plugin_init(int abi, shoal_error *err);
 * which registers its types with nn_layer_register and returns 0 (abi is NN_LAYER_ABI;
 * a plugin built for another returns SHOAL_ENOTSUP). The library stays loaded. Loading
 * the same path again does nothing. Errors: the file, the symbol, or the init's own. */
int nn_layer_plugin_load(const char *path, shoal_error *err);
/* nn_layer_plugin_load for each of a ':'-separated list of paths (NULL or "": none). */
int nn_layer_plugins_load(const char *paths, shoal_error *err);
/* For configs that name the kind of their dense layers: loads plugins (as
 * nn_layer_plugins_load), then sets *type to the registered type of kind, or NULL for
 * nn's own ("" or "dense"). A kind not registered (SHOAL_ENOENT, listing the registered
 * ones) or without dense_config (SHOAL_EINVAL) is an error naming it. */
int nn_layer_dense_kind(const char *kind, const char *plugins, const nn_layer_type **type,
                        shoal_error *err);
/* Adds a dense layer of out_features: nn_dense when type is NULL, else a layer of type
 * with the config its dense_config fills. Returns the node or a negative code; the
 * message is nn_model_error(m)'s. */
int nn_dense_as(nn_model *m, const char *name, int out_features, const nn_layer_type *type);

/* ---- a gradient checker for layers and models ---- */
typedef struct nn_gradcheck_options {
  float eps;        /* central-difference step (0: 1e-2, right for float32 values ~1) */
  float tol;        /* |analytic - numeric| <= tol * (1 + |numeric|) (0: 1e-2) */
  int per_tensor;   /* coordinates checked per tensor and of the input (0: 24; < 0: all) */
  bool skip_input;  /* do not check the input gradient (integer-valued inputs) */
  uint64_t seed;    /* which coordinates and the projection r below (0: 1) */
} nn_gradcheck_options;
typedef struct nn_gradcheck_report {
  int checked;            /* coordinates compared */
  int failed;             /* of them, outside the tolerance */
  double worst;           /* the largest |analytic - numeric| / (1 + |numeric|) */
  char worst_where[160];  /* "fc.weight[12]" or "input[3]" of the worst */
} nn_gradcheck_report;
/* Checks m's backward against central finite differences of the scalar L = sum(y * r)
 * (r a fixed random projection of the output) at input x (B samples, host memory, on a
 * built CPU model): the gradient of each parameter tensor and of the input, at
 * o->per_tensor coordinates each. Random layers (dropout, noise drawn from
 * nn_layer_call.rng) see the same draws in every forward of the check. The model's
 * parameters and gradients are as before on return. Returns 0 when every coordinate is
 * within tolerance, SHOAL_ERANGE naming the worst otherwise (the report says more),
 * or an error of the forward. */
int nn_check_gradients(nn_model *m, const float *x, int B, const nn_gradcheck_options *o,
                       nn_gradcheck_report *report, shoal_error *err);

#ifdef __cplusplus
}
#endif
#endif
