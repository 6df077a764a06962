/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_examples_srgan.c — examples/srgan as a user runs it: a short run whose
 * bicubic baseline must equal PyTorch's and whose generator must beat it.
 * Runs build/bin/srgan (SHOAL_BINARY_DIR). Without the Fashion-MNIST
 * files it prints SKIPPED and returns 77. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "data/data.h"

#include "tests/examples_util.h"

/* A short SRGAN run: the bicubic PSNR over the first 200 test images equals PyTorch's
 * (F.interpolate(F.avg_pool2d(x, 2), scale_factor=2, mode="bicubic",
 * align_corners=False).clamp(0, 1), mean per-image PSNR: 19.3451 dB), and G, trained 150
 * steps of 16 (half of them with the adversarial term), beats it (measured +1.76 dB). */
static void test_srgan_short(void **state) {
  (void)state;
  char args[1024];
  snprintf(args, sizeof args, "--steps %d --pretrain %d --batch 16 --test-limit 200 --out %s",
           SHOAL_EXAMPLES_QUICK ? 40 : 150, SHOAL_EXAMPLES_QUICK ? 20 : 75, g_tmp);
  char *out = run("srgan", args);
  double g = field(out, "PSNR G"), bic = field(out, "bicubic");
  assert_true(fabs(bic - 19.3451) < 2e-3);
  assert_true(isfinite(g) && g > 10);
  if (!SHOAL_EXAMPLES_QUICK) assert_true(g > bic);
  free(out);
}

int main(void) {
  char p[512];
  snprintf(
      p, sizeof p, "%s/train-images-idx3-ubyte.gz",
      getenv("SHOAL_FASHION_MNIST") ? getenv("SHOAL_FASHION_MNIST") : data_fashion_mnist_dir());
  if (access(p, R_OK) != 0) {
    printf("SKIPPED: the Fashion-MNIST files are missing (%s); install dataset-fashion-mnist\n", p);
    return 77;
  }
  const char *bd = getenv("SHOAL_BINARY_DIR");
  snprintf(g_bin, sizeof g_bin, "%s/bin", bd ? bd : ".");
  snprintf(g_tmp, sizeof g_tmp, "/tmp/shoal_test_examples_srgan_XXXXXX");
  if (!mkdtemp(g_tmp)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_srgan_short),
  };
  int rc = cmocka_run_group_tests_name("examples_srgan", tests, NULL, NULL);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_tmp);
  return rc;
}
