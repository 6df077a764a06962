/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_nn_device.c — the device-agnostic calls (nn_model_alloc, _to_device,
 * _to_host, _sync, _params_changed, nn_model_loss) on a CPU model, where they must be
 * plain memory operations and the CPU losses exactly. The same calls on a CUDA model
 * are tested against these in tests/test_nn_cuda.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nn/nn.h"

static nn_model *small(void) {
  shoal_error err = {0};
  nn_model *m = nn_model_create(NN_CPU, &err);
  assert_non_null(m);
  nn_input(m, 3, 1, 1);
  nn_dense(m, "fc", 2);
  assert_int_equal(nn_model_build(m, 4, 1, &err), 0);
  return m;
}

static void test_memory(void **s) {
  shoal_error err = {0};
  nn_model *m = small();
  assert_int_equal(nn_model_device(m), NN_CPU);
  float *d = nn_model_alloc(m, 5, &err);
  assert_non_null(d);
  for (int i = 0; i < 5; i++) assert_true(d[i] == 0.0f);
  float h[5] = {1, 2, 3, 4, 5}, back[5] = {0};
  assert_int_equal(nn_model_to_device(m, d, h, 5, &err), 0);
  assert_int_equal(nn_model_to_host(m, back, d, 5, &err), 0);
  assert_memory_equal(back, h, sizeof h);
  h[3] = INFINITY;
  assert_int_equal(nn_model_to_device(m, d, h, 5, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "src[3]"));
  assert_non_null(strstr(err.msg, "infinite"));
  assert_int_equal(nn_model_to_device(m, NULL, h, 5, &err), SHOAL_EINVAL);
  assert_int_equal(nn_model_sync(m, &err), 0);
  assert_int_equal(nn_model_params_changed(m, &err), 0);
  assert_int_equal(nn_model_sync(NULL, &err), SHOAL_EINVAL);
  nn_model_free(m, d);
  nn_model_free(m, NULL);
  nn_model_destroy(m);
}

/* nn_model_loss on a CPU model is the CPU loss functions, bit for bit. */
static void test_loss_dispatch(void **s) {
  shoal_error err = {0};
  nn_model *m = small();
  enum { B = 4, N = 3 };
  float p[B * N], t[B * N], w[B] = {1, 0.5f, 2, 1}, d1[B * N], d2[B * N], l1, l2;
  for (int i = 0; i < B * N; i++) p[i] = (float)(i % 5) - 2.0f, t[i] = (float)(i % 3) / 3.0f;
  for (int kind = NN_LOSS_MSE; kind <= NN_LOSS_CROSS_ENTROPY; kind++) {
    if (kind == NN_LOSS_CROSS_ENTROPY)
      for (int i = 0; i < B * N; i++) t[i] = i % N == 0 ? 0.5f : 0.25f;
    assert_int_equal(nn_model_loss(m, kind, &l1, d1, p, t, w, B, N, 0.5f, &err), 0);
    int rc = kind == NN_LOSS_MSE     ? nn_mse_loss(&l2, d2, p, t, w, B, N, &err)
             : kind == NN_LOSS_HUBER ? nn_huber_loss(&l2, d2, p, t, w, B, N, 0.5f, &err)
             : kind == NN_LOSS_BCE_LOGITS
                 ? nn_bce_with_logits_loss(&l2, d2, p, t, w, B, N, &err)
                 : nn_cross_entropy_soft_loss(&l2, d2, p, t, w, B, N, &err);
    assert_int_equal(rc, 0);
    assert_true(l1 == l2);
    assert_memory_equal(d1, d2, sizeof d1);
    /* loss NULL: the gradient alone */
    memset(d1, 0, sizeof d1);
    assert_int_equal(nn_model_loss(m, kind, NULL, d1, p, t, w, B, N, 0.5f, &err), 0);
    assert_memory_equal(d1, d2, sizeof d1);
  }
  assert_int_equal(nn_model_loss(m, (nn_loss_kind)9, &l1, d1, p, t, w, B, N, 0, &err),
                   SHOAL_EINVAL);
  p[2] = NAN;
  assert_int_equal(nn_model_loss(m, NN_LOSS_MSE, &l1, d1, p, t, w, B, N, 0, &err), SHOAL_ENAN);
  nn_model_destroy(m);
}

/* Proportional priorities, hand-worked: (sum_j |pred - target| + eps)^alpha. */
static void test_priorities(void **s) {
  shoal_error err = {0};
  nn_model *m = small(); /* max_batch 4 */
  float pred[6] = {1, 2, 0, 0, -1, 5}, target[6] = {1, 0, 0, 0.5f, 1, 5}, prio[3];
  assert_int_equal(nn_model_priorities(m, prio, pred, target, 3, 2, 0.6f, 0.01f, &err), 0);
  assert_true(fabs(prio[0] - pow(2.01, 0.6)) < 1e-6);
  assert_true(fabs(prio[1] - pow(0.51, 0.6)) < 1e-6);
  assert_true(fabs(prio[2] - pow(2.01, 0.6)) < 1e-6);
  assert_int_equal(nn_model_priorities(m, prio, pred, target, 5, 2, 0.6f, 0.01f, &err),
                   SHOAL_EINVAL); /* over max_batch */
  assert_int_equal(nn_model_priorities(m, prio, pred, target, 3, 2, -1.0f, 0.01f, &err),
                   SHOAL_EINVAL);
  pred[3] = INFINITY;
  assert_int_equal(nn_model_priorities(m, prio, pred, target, 3, 2, 0.6f, 0.01f, &err), SHOAL_ENAN);
  assert_non_null(strstr(err.msg, "sample 1"));
  nn_model_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memory),
      cmocka_unit_test(test_loss_dispatch),
      cmocka_unit_test(test_priorities),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
