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

/* The Debug (sanitizer) build runs nn unoptimised, about 10x slower: shorter runs there. */
#ifndef SHOAL_EXAMPLES_QUICK
#define SHOAL_EXAMPLES_QUICK 0
#endif

static char g_tmp[256], g_bin[512];

/* Runs `<bin>/<prog> args`, returns its stdout (caller frees) and checks exit status 0. */
static char *run(const char *prog, const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s/%s' %s 2>&1", g_bin, prog, args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t cap = 1 << 16, n = 0;
  char *out = malloc(cap);
  n = fread(out, 1, cap - 1, p);
  out[n] = 0;
  int st = pclose(p);
  if (st != 0) fail_msg("%s exited with %d:\n%s", cmd, st, out);
  printf("%s", out);
  return out;
}

/* The number after key in s (the last occurrence), or NAN. */
static double field(const char *s, const char *key) {
  const char *p = NULL;
  for (const char *q = strstr(s, key); q; q = strstr(q + 1, key)) p = q;
  double v;
  return p && sscanf(p + strlen(key), " %lf", &v) == 1 ? v : NAN;
}

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
