/* SPDX-License-Identifier: Apache-2.0 */
/* The image torsos of the Atari presets, shared by DQN's network (algos/dqn.c) and the
 * actor-critic's (algos/ac.c), so that `nature` and `impala` are the same layers in
 * both. */
#include <stdio.h>

#include "algos/algos.h"

/* Adds layer names prefix + suffix; returns nn's node or a negative code. */
#define NAMED(call, suffix, ...)                          \
  do {                                                    \
    snprintf(name, sizeof name, "%s%s", prefix, suffix);  \
    if ((rc = call(m, name, __VA_ARGS__)) < 0) return rc; \
  } while (0)

/* x + conv(relu(conv(relu(x)))), 3x3 convolutions with padding 1 (IMPALA's residual
 * block). */
static int res_block(nn_model *m, const char *prefix, int stage, int block, int ch) {
  char name[96], sfx[48];
  int rc, x = nn_model_current(m);
  for (int k = 0; k < 2; k++) {
    snprintf(sfx, sizeof sfx, "stage%d.res%d.relu%d", stage, block, k);
    NAMED(nn_activation, sfx, NN_RELU, 0);
    snprintf(sfx, sizeof sfx, "stage%d.res%d.conv%d", stage, block, k);
    NAMED(nn_conv2d, sfx, ch, 3, 3, 1, 1, 1);
  }
  int y = rc;
  snprintf(sfx, sizeof sfx, "stage%d.res%d.add", stage, block);
  NAMED(nn_add, sfx, x, y);
  return rc;
}

int algos_image_torso(nn_model *m, bool impala, const char *prefix,
                      const nn_layer_type *dense_kind) {
  char name[96];
  int rc;
  /* bytes to [0, 1] as the first layer: frames stay uint8 until the network reads them */
  NAMED(nn_activation, "scale", NN_SCALE, 1.0f / 255.0f);
  if (!impala) {
    /* Mnih et al. 2015 */
    NAMED(nn_conv2d, "conv1", 32, 8, 8, 4, 0, 1);
    NAMED(nn_activation, "conv1_relu", NN_RELU, 0);
    NAMED(nn_conv2d, "conv2", 64, 4, 4, 2, 0, 1);
    NAMED(nn_activation, "conv2_relu", NN_RELU, 0);
    NAMED(nn_conv2d, "conv3", 64, 3, 3, 1, 0, 1);
    NAMED(nn_activation, "conv3_relu", NN_RELU, 0);
    NAMED(nn_dense_as, "fc1", 512, dense_kind);
    NAMED(nn_activation, "fc1_relu", NN_RELU, 0);
    return rc;
  }
  /* Espeholt et al. 2018's deep network: three stages of conv, max-pool and two
   * residual blocks, then ReLU and a 256-unit layer */
  static const int channels[3] = {16, 32, 32};
  for (int s = 0; s < 3; s++) {
    char sfx[48];
    snprintf(sfx, sizeof sfx, "stage%d.conv", s);
    NAMED(nn_conv2d, sfx, channels[s], 3, 3, 1, 1, 1);
    snprintf(sfx, sizeof sfx, "stage%d.pool", s);
    NAMED(nn_maxpool2d, sfx, 3, 2, 1);
    for (int b = 0; b < 2; b++)
      if ((rc = res_block(m, prefix, s, b, channels[s])) < 0) return rc;
  }
  NAMED(nn_activation, "out_relu", NN_RELU, 0);
  NAMED(nn_dense_as, "fc1", 256, dense_kind);
  NAMED(nn_activation, "fc1_relu", NN_RELU, 0);
  return rc;
}
