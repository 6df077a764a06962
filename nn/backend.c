/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/backend.c — the one place that knows which backends shoal was built with: the
 * CPU always, CUDA when SHOAL_HAVE_CUDA is defined (nn/CMakeLists.txt compiles nn/cuda
 * then). Everything else reaches a backend through the table this returns.
 */
#include "nn/internal.h"

extern const nn__backend nn__cpu_backend; /* nn/cpu/backend.c */
#ifdef SHOAL_HAVE_CUDA
extern const nn__backend nn__cuda_backend; /* nn/cuda/layers.c */
#endif

const nn__backend *nn__backend_get(nn_device device, shoal_error *err) {
  switch (device) {
    case NN_CPU: return &nn__cpu_backend;
    case NN_CUDA:
#ifdef SHOAL_HAVE_CUDA
      return &nn__cuda_backend;
#else
      shoal_error_set(err, SHOAL_ENOTSUP, "nn: shoal was built without the CUDA backend");
      return NULL;
#endif
  }
  shoal_error_set(err, SHOAL_EINVAL, "nn: unknown device %d", (int)device);
  return NULL;
}

bool nn_cuda_available(shoal_error *err) {
  const nn__backend *be = nn__backend_get(NN_CUDA, err);
  return be && (!be->available || be->available(err));
}
