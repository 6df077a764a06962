/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_safetensors.c — the safetensors reader behind nn_model_load and
 * nn_optim_load (checkpoints written by shoal or torch, read back on resume). The first
 * byte picks the model (dense, batch norm with its I64 counter, dense) or its Adam
 * optimizer; the rest is the file. Properties: a refused file changes nothing (the
 * model's bytes stay as they were); an accepted one leaves every parameter finite.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "tests/fuzz/fuzz.h"

static nn_model *model;
static nn_optim *optim;
static float *before;
static size_t nparams;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  shoal_error err = {0};
  model = nn_model_create(NN_CPU, &err);
  if (!model || nn_input(model, 4, 1, 1) < 0 || nn_dense(model, "fc1", 3) < 0 ||
      nn_batchnorm(model, "bn", 1e-5f, 0.1f) < 0 || nn_activation(model, "act", NN_RELU, 0) < 0 ||
      nn_dense(model, "out", 2) < 0 || nn_model_build(model, 4, 7, &err)) {
    fprintf(stderr, "fuzz_safetensors: model: %s\n", err.msg);
    abort();
  }
  nn_optim_config oc = nn_optim_defaults(NN_ADAM);
  optim = nn_optim_create(model, &oc, &err);
  if (!optim) abort();
  const float *p = nn_model_params(model, &nparams);
  before = malloc(nparams * sizeof *before);
  memcpy(before, p, nparams * sizeof *before);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  shoal_error err = {0};
  size_t n;
  const float *p = nn_model_params(model, &n);
  FUZZ_CHECK(n == nparams);
  if (data[0] & 1) {
    int rc = nn_optim_load_buffer(optim, data + 1, size - 1, &err);
    if (rc) FUZZ_CHECK(err.msg[0]);
    return 0;
  }
  int rc = nn_model_load_buffer(model, data + 1, size - 1, &err);
  if (rc) {
    FUZZ_CHECK(err.msg[0]);
    FUZZ_CHECK(!memcmp(p, before, nparams * sizeof *p));
    return 0;
  }
  for (size_t i = 0; i < n; i++) FUZZ_CHECK(isfinite(p[i]));
  /* Back to the reference weights, so the next refusal can be checked against them. */
  memcpy((float *)p, before, nparams * sizeof *p);
  return 0;
}
