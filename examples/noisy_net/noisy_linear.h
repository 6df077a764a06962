/* SPDX-License-Identifier: Apache-2.0 */
/*
 * examples/noisy_net/noisy_linear.h — the config of NoisyNet's noisy linear layer
 * (noisy_linear.c), for programs that build models with it by hand:
 *
 *   nn_layer_plugin_load("build/examples/noisy_linear.so", &err);
 *   noisy_config nc = {.out_features = 64, .sigma0 = 0.5f};
 *   nn_custom(m, "fc1", nn_layer_find("noisy_linear"), &nc);
 *
 * Configs need none of this: dqn.layer: noisy_linear fills it from each dense width.
 */
#ifndef SHOAL_EXAMPLES_NOISY_LINEAR_H
#define SHOAL_EXAMPLES_NOISY_LINEAR_H

typedef struct noisy_config {
  int out_features;
  float sigma0; /* sigma's initial value times sqrt(in) (the paper: 0.5) */
  int fixed;    /* 1: never draw; the noise is what the state holds (tests, parity) */
} noisy_config;

#endif
