/* SPDX-License-Identifier: Apache-2.0 */
/*
 * examples/noisy_net/noisy_linear.c — NoisyNet's factorised noisy linear layer (Fortunato
 * et al. 2018, "Noisy Networks for Exploration", section 3) as a custom nn layer, written
 * against nn/nn.h alone and built as a layer plugin (see docs/custom-layers.md):
 *
 *   y = x (mu_w + sigma_w * eps_w)^T + mu_b + sigma_b * eps_b
 *   eps_w = f(eps_out) f(eps_in)^T,  eps_b = f(eps_out),  f(e) = sgn(e) sqrt(|e|)
 *
 * with eps_in (in) and eps_out (out) standard normal, drawn afresh at every forward in
 * training mode (from the model's random stream, so a seed gives the same run), and
 * zero in evaluation mode, which leaves the mean network mu. An Ape-X config that puts
 * it where the dense layers go (dqn.layer: noisy_linear) explores by its noise with
 * epsilon 0: configs/cartpole-apex-noisy.yaml.
 *
 * Tensors, as a torch.nn.Module with the same names would save them: weight_mu,
 * weight_sigma (out, in), bias_mu, bias_sigma (out), trained; eps_in (in) and eps_out
 * (out), state (the noise of the last forward, which backward differentiates through).
 * Initialised as the paper's factorised case: mu ~ U(-1/sqrt(in), 1/sqrt(in)), sigma =
 * sigma0 / sqrt(in) with sigma0 = 0.5.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "examples/noisy_net/noisy_linear.h"
#include "nn/nn.h"

enum { W_MU, W_SIGMA, B_MU, B_SIGMA, EPS_IN, EPS_OUT };

static int noisy_shape(nn_layer_shape *s, shoal_error *err) {
  const noisy_config *c = s->config;
  if (c->out_features < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "out_features %d must be positive",
                           c->out_features);
  if (!(c->sigma0 >= 0) || !isfinite(c->sigma0))
    return shoal_error_set(err, SHOAL_EINVAL, "sigma0 %g must be finite and >= 0",
                           (double)c->sigma0);
  int in = s->in_C * s->in_H * s->in_W, out = c->out_features;
  float bound = 1.0f / sqrtf((float)in), sigma = c->sigma0 / sqrtf((float)in);
  s->C = out, s->H = 1, s->W = 1;
  s->params[W_MU] = (nn_param_spec){"weight_mu", 2, {out, in}, true, NN_INIT_UNIFORM, -bound,
                                    bound};
  s->params[W_SIGMA] = (nn_param_spec){"weight_sigma", 2, {out, in}, true, NN_INIT_CONSTANT,
                                       sigma};
  s->params[B_MU] = (nn_param_spec){"bias_mu", 1, {out}, true, NN_INIT_UNIFORM, -bound, bound,
                                    in, out};
  s->params[B_SIGMA] = (nn_param_spec){"bias_sigma", 1, {out}, true, NN_INIT_CONSTANT, sigma, 0,
                                       in, out};
  s->params[EPS_IN] = (nn_param_spec){"eps_in", 1, {in}, false, NN_INIT_ZEROS};
  s->params[EPS_OUT] = (nn_param_spec){"eps_out", 1, {out}, false, NN_INIT_ZEROS};
  s->n_params = 6;
  /* the effective weight and bias of the last forward, f(eps) of both sides, and room
   * for backward's dW */
  s->cache_fixed = 2 * (size_t)out * in + (size_t)out + (size_t)in + (size_t)out;
  s->flops = 2.0 * in * out;
  return 0;
}

static float f_noise(float e) { return copysignf(sqrtf(fabsf(e)), e); }

static int noisy_forward(const nn_layer_call *c, shoal_error *err) {
  const noisy_config *cf = c->config;
  int in = c->in_F, out = c->F;
  float *eps_in = c->t[EPS_IN], *eps_out = c->t[EPS_OUT];
  float *w = c->cache, *b = w + 2 * (size_t)out * in, *fi = b + out, *fo = fi + in;
  if (c->training && !cf->fixed) {
    for (int i = 0; i < in; i++) eps_in[i] = (float)shoal_rng_normal(c->rng);
    for (int o = 0; o < out; o++) eps_out[o] = (float)shoal_rng_normal(c->rng);
  }
  /* evaluation: the mean network (f(0) = 0) */
  for (int i = 0; i < in; i++) fi[i] = c->training ? f_noise(eps_in[i]) : 0.0f;
  for (int o = 0; o < out; o++) fo[o] = c->training ? f_noise(eps_out[o]) : 0.0f;
  const float *mw = c->t[W_MU], *sw = c->t[W_SIGMA], *mb = c->t[B_MU], *sb = c->t[B_SIGMA];
  for (int o = 0; o < out; o++) {
    const float *mr = mw + (size_t)o * in, *sr = sw + (size_t)o * in;
    float *wr = w + (size_t)o * in;
    for (int i = 0; i < in; i++) wr[i] = mr[i] + sr[i] * fo[o] * fi[i];
    b[o] = mb[o] + sb[o] * fo[o];
  }
  /* y = x W^T + b: the bias in every row, then nn's product adds x W^T */
  for (int n = 0; n < c->B; n++) memcpy(c->y + (size_t)n * out, b, (size_t)out * sizeof *b);
  nn_sgemm(false, true, c->B, out, in, 1.0f, c->x, in, w, in, 1.0f, c->y, out);
  return 0;
}

static void noisy_backward(const nn_layer_call *c) {
  int in = c->in_F, out = c->F, B = c->B;
  const float *w = c->cache, *fi = w + 2 * (size_t)out * in + out, *fo = fi + in;
  float *dw = c->cache + (size_t)out * in;
  float *gmw = c->g[W_MU], *gsw = c->g[W_SIGMA], *gmb = c->g[B_MU], *gsb = c->g[B_SIGMA];
  /* dW = dy^T x is weight_mu's gradient; weight_sigma's is dW * eps_w. Gradients add to
   * what is there (they accumulate until the model zeroes them). */
  nn_sgemm(true, false, out, in, B, 1.0f, c->dy, out, c->x, in, 0.0f, dw, in);
  for (int o = 0; o < out; o++) {
    const float *dr = dw + (size_t)o * in;
    float *gr = gmw + (size_t)o * in, *sr = gsw + (size_t)o * in;
    for (int i = 0; i < in; i++) {
      gr[i] += dr[i];
      sr[i] += dr[i] * fo[o] * fi[i];
    }
  }
  for (int o = 0; o < out; o++) {
    double s = 0;
    for (int n = 0; n < B; n++) s += c->dy[(size_t)n * out + o];
    gmb[o] += (float)s;
    gsb[o] += (float)s * fo[o];
  }
  /* dx = dy W, W the effective weight of the forward */
  if (c->dx)
    nn_sgemm(false, false, B, in, out, 1.0f, c->dy, out, w, in, c->dx_add ? 1.0f : 0.0f, c->dx,
             in);
}

static int noisy_dense_config(void *config, int out_features, shoal_error *err) {
  noisy_config *c = config;
  c->out_features = out_features;
  c->sigma0 = 0.5f;
  c->fixed = 0;
  return 0;
}

const nn_layer_type noisy_linear_type = {
    .abi = NN_LAYER_ABI,
    .kind = "noisy_linear",
    .config_size = sizeof(noisy_config),
    .shape = noisy_shape,
    .forward = noisy_forward,
    .backward = noisy_backward,
    .dense_config = noisy_dense_config,
};

/* The plugin's entry point: nn_layer_plugin_load (and configs' nn.plugins) call it. */
__attribute__((visibility("default"))) int shoal_nn_plugin_init(int abi, shoal_error *err) {
  if (abi != NN_LAYER_ABI)
    return shoal_error_set(err, SHOAL_ENOTSUP, "built for layer ABI %d, shoal has %d",
                           NN_LAYER_ABI, abi);
  return nn_layer_register(&noisy_linear_type, err);
}
