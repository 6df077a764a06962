/* SPDX-License-Identifier: Apache-2.0 */
/* tests/peers_ref.c — shoal's side of the interop checks with the real peer libraries
 * (tests/test_peers_interop.py, run by ctest with the peers' venv of
 * benchmarks/peers/setup.sh). Prints what it wrote or read as text, one item a line, so
 * the Python side compares with what TensorBoard, safetensors and torch make of it.
 *
 *   peers_ref tb DIR            writes an event file in DIR (cli/tboard.c) and prints
 *                               "scalar TAG STEP VALUE" for every scalar written
 *   peers_ref save FILE         saves the test net (nn_model_save) and prints
 *                               "tensor NAME NUMEL v0 v1 ..." and "y i VALUE" (its outputs
 *                               on input()) in evaluation mode
 *   peers_ref load FILE         loads FILE into the test net and prints "y i VALUE"
 * The net: dense 5 -> 7, batch norm, tanh, dense 3 (torch: Linear, BatchNorm1d, Tanh,
 * Linear, named fc1, bn1, act, out).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/tboard.h"
#include "nn/nn.h"

enum { IN = 5, HID = 7, OUT = 3, NB = 4 };

static int die(const char *what, const shoal_error *err) {
  fprintf(stderr, "peers_ref: %s: %s\n", what, err->msg);
  return 1;
}

static nn_model *make_net(uint64_t seed, shoal_error *err) {
  nn_model *m = nn_model_create(NN_CPU, err);
  if (!m) return NULL;
  nn_input(m, IN, 1, 1);
  nn_dense(m, "fc1", HID);
  nn_batchnorm(m, "bn1", 1e-5f, 0.1f);
  nn_activation(m, "act", NN_TANH, 0);
  nn_dense(m, "out", OUT);
  if (nn_model_build(m, 16, seed, err)) {
    nn_model_destroy(m);
    return NULL;
  }
  return m;
}

/* The fixed input both sides use: x[b][i] = sin(1 + 0.7 b + 1.3 i) * 2. */
static void input(float *x) {
  for (int b = 0; b < NB; b++)
    for (int i = 0; i < IN; i++) x[b * IN + i] = (float)(2.0 * sin(1.0 + 0.7 * b + 1.3 * i));
}

static int print_outputs(nn_model *m, shoal_error *err) {
  float x[NB * IN];
  input(x);
  nn_model_set_training(m, false);
  const float *y;
  if (nn_model_forward(m, x, NB, &y, err)) return -1;
  for (int i = 0; i < NB * OUT; i++) printf("y %d %.9g\n", i, y[i]);
  return 0;
}

static int cmd_tb(const char *dir) {
  shoal_error err = {0};
  tb_writer *w;
  if (tb_writer_open(&w, dir, &err)) return die("open", &err);
  static const char *tags[] = {"return100", "loss/td", "throughput/steps_per_s"};
  double t0 = 1.8e9;
  for (int k = 0; k < 50; k++)
    for (int j = 0; j < 3; j++) {
      int64_t step = (int64_t)k * 1000 + j;
      float v = (float)(j == 0 ? 10.0 + 9.5 * k : j == 1 ? exp(-0.1 * k) : 12345.678 * (k + 1));
      if (tb_writer_scalar(w, tags[j], step, t0 + k, v, &err)) return die("scalar", &err);
      printf("scalar %s %lld %.9g\n", tags[j], (long long)step, v);
    }
  if (tb_writer_flush(w, &err)) return die("flush", &err);
  tb_writer_close(w);
  return 0;
}

static int cmd_save(const char *file) {
  shoal_error err = {0};
  nn_model *m = make_net(11, &err);
  if (!m) return die("build", &err);
  /* training-mode forwards so the running statistics are not their initial 0 / 1 */
  shoal_rng r;
  shoal_rng_seed(&r, 3);
  float x[16 * IN];
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 16 * IN; i++) x[i] = (float)(1.5 * shoal_rng_normal(&r) + 0.5);
    const float *y;
    if (nn_model_forward(m, x, 16, &y, &err)) return die("forward", &err);
  }
  if (nn_model_save(m, file, &err)) return die("save", &err);
  for (int i = 0; i < nn_model_tensor_count(m); i++) {
    nn_tensor_info t;
    nn_model_tensor(m, i, &t);
    size_t cnt;
    const float *base = t.trainable ? nn_model_params(m, &cnt) : nn_model_state(m, &cnt);
    printf("tensor %s %zu", t.name, t.numel);
    for (size_t j = 0; j < t.numel; j++) printf(" %.9g", base[t.offset + j]);
    printf("\n");
  }
  if (print_outputs(m, &err)) return die("forward", &err);
  nn_model_destroy(m);
  return 0;
}

static int cmd_load(const char *file) {
  shoal_error err = {0};
  nn_model *m = make_net(99, &err);
  if (!m) return die("build", &err);
  if (nn_model_load(m, file, &err)) return die("load", &err);
  if (print_outputs(m, &err)) return die("forward", &err);
  nn_model_destroy(m);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "tb") == 0) return cmd_tb(argv[2]);
  if (argc == 3 && strcmp(argv[1], "save") == 0) return cmd_save(argv[2]);
  if (argc == 3 && strcmp(argv[1], "load") == 0) return cmd_load(argv[2]);
  fprintf(stderr, "usage: peers_ref tb DIR | save FILE | load FILE\n");
  return 2;
}
