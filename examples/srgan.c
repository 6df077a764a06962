/* SPDX-License-Identifier: Apache-2.0 */
/*
 * examples/srgan.c — SRGAN-style 2x super-resolution (Ledig et al. 2017) on Fashion-MNIST:
 * 14x14 -> 28x28.
 *
 *   srgan [--steps 1500] [--pretrain 300] [--batch 32] [--adv 1e-3] [--limit N]
 *         [--test-limit N] [--seed 0] [--threads 2] [--out DIR] [--data DIR]
 *
 * Low-resolution inputs are 2x2 means of the 28x28 images (pixels in [0, 1]).
 * G (SRResNet, scaled down): conv 32 3x3, ReLU -> 3 residual blocks (conv, BN, ReLU,
 * conv, BN, + input) -> conv, BN, + the first conv's output (the long skip) -> convT 32
 * 4x4/2 (the 2x upsampling), ReLU -> conv 1 3x3.
 * D: conv 32 3x3, lrelu -> conv 32 3x3/2, BN, lrelu -> conv 64 3x3/2, BN, lrelu ->
 * dense 128, lrelu -> dense 1 (a logit).
 * Loss of G: content (pixel MSE) + adv * BCE(D(G(lr)), 1), the paper's 1e-3 weighting of
 * its adversarial term; the first --pretrain steps train G on the content loss alone
 * (the paper starts from a trained SRResNet too). D: BCE on real (1) and G(lr) (0).
 * At the end it reports the mean PSNR of G's images and of bicubic upsampling (PyTorch's
 * F.interpolate(mode="bicubic", align_corners=False): a = -0.75, clamped borders) over the
 * test set, writes DIR/srgan.png (rows: low-res input, bicubic, G, the original) and
 * DIR/srgan_g.safetensors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "envs/envs.h"
#include "nn/nn.h"

static _Noreturn void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "srgan: %s: %s\n", what, err && err->msg[0] ? err->msg : "failed");
  exit(1);
}

/* lr (n, 14, 14) = 2x2 means of hr (n, 28, 28). */
static void downsample(float *lr, const float *hr, int n) {
  for (int k = 0; k < n; k++)
    for (int y = 0; y < 14; y++)
      for (int x = 0; x < 14; x++) {
        const float *p = hr + (size_t)k * 784 + 2 * y * 28 + 2 * x;
        lr[(size_t)k * 196 + y * 14 + x] = (p[0] + p[1] + p[28] + p[29]) / 4;
      }
}

/* Keys' cubic convolution weights for offset t in [0, 1), a = -0.75 (PyTorch's). */
static void cubic_weights(float w[4], float t) {
  const float a = -0.75f;
  float t1 = t + 1, t2 = 1 - t;
  w[0] = ((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a;
  w[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
  w[2] = ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1;
  w[3] = 1 - w[0] - w[1] - w[2];
}

/* hr (28, 28) = bicubic 2x of lr (14, 14), as F.interpolate(scale_factor=2, mode="bicubic",
 * align_corners=False): source coordinate (d + 0.5) / 2 - 0.5, taps clamped to the edge. */
static void bicubic2x(float *hr, const float *lr) {
  for (int y = 0; y < 28; y++)
    for (int x = 0; x < 28; x++) {
      float sy = (y + 0.5f) / 2 - 0.5f, sx = (x + 0.5f) / 2 - 0.5f, wy[4], wx[4], v = 0;
      int y0 = (int)floorf(sy), x0 = (int)floorf(sx);
      cubic_weights(wy, sy - (float)y0), cubic_weights(wx, sx - (float)x0);
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
          int yy = y0 - 1 + i, xx = x0 - 1 + j;
          yy = yy < 0 ? 0 : yy > 13 ? 13 : yy, xx = xx < 0 ? 0 : xx > 13 ? 13 : xx;
          v += wy[i] * wx[j] * lr[yy * 14 + xx];
        }
      hr[y * 28 + x] = v;
    }
}

/* PSNR in dB of a (clamped to [0, 1]) against b, peak 1; 100 for identical images. */
static double psnr(const float *a, const float *b) {
  double se = 0;
  for (int i = 0; i < 784; i++) {
    double d = fmin(fmax(a[i], 0), 1) - b[i];
    se += d * d;
  }
  return se > 0 ? 10 * log10(784 / se) : 100;
}

static nn_model *make_generator(int B, uint64_t seed, shoal_error *err) {
  nn_model *g = nn_model_create(NN_CPU, err);
  if (!g) return NULL;
  char name[32];
  nn_input(g, 1, 14, 14);
  nn_conv2d(g, "head", 32, 3, 3, 1, 1, 1);
  int skip = nn_activation(g, "head_relu", NN_RELU, 0), x = skip;
  for (int r = 0; r < 3; r++) {
    snprintf(name, sizeof name, "res%d_conv1", r), nn_conv2d(g, name, 32, 3, 3, 1, 1, 1);
    snprintf(name, sizeof name, "res%d_bn1", r), nn_batchnorm(g, name, 1e-5f, 0.1f);
    snprintf(name, sizeof name, "res%d_relu", r), nn_activation(g, name, NN_RELU, 0);
    snprintf(name, sizeof name, "res%d_conv2", r), nn_conv2d(g, name, 32, 3, 3, 1, 1, 1);
    snprintf(name, sizeof name, "res%d_bn2", r);
    int y = nn_batchnorm(g, name, 1e-5f, 0.1f);
    snprintf(name, sizeof name, "res%d_add", r), x = nn_add(g, name, x, y);
  }
  nn_conv2d(g, "mid", 32, 3, 3, 1, 1, 1);
  nn_add(g, "skip", skip, nn_batchnorm(g, "mid_bn", 1e-5f, 0.1f));
  nn_conv_transpose2d(g, "up", 32, 4, 4, 2, 1, 0);
  nn_activation(g, "up_relu", NN_RELU, 0);
  nn_conv2d(g, "out", 1, 3, 3, 1, 1, 1);
  if (nn_model_build(g, B, seed, err)) nn_model_destroy(g), g = NULL;
  return g;
}

static nn_model *make_discriminator(int B, uint64_t seed, shoal_error *err) {
  nn_model *d = nn_model_create(NN_CPU, err);
  if (!d) return NULL;
  nn_input(d, 1, 28, 28);
  nn_conv2d(d, "c1", 32, 3, 3, 1, 1, 1), nn_activation(d, "a1", NN_LEAKY_RELU, 0.2f);
  nn_conv2d(d, "c2", 32, 3, 3, 2, 1, 1), nn_batchnorm(d, "bn2", 1e-5f, 0.1f);
  nn_activation(d, "a2", NN_LEAKY_RELU, 0.2f);
  nn_conv2d(d, "c3", 64, 3, 3, 2, 1, 1), nn_batchnorm(d, "bn3", 1e-5f, 0.1f);
  nn_activation(d, "a3", NN_LEAKY_RELU, 0.2f);
  nn_dense(d, "fc1", 128), nn_activation(d, "a4", NN_LEAKY_RELU, 0.2f);
  nn_dense(d, "fc2", 1);
  if (nn_model_build(d, B, seed, err)) nn_model_destroy(d), d = NULL;
  return d;
}

int main(int argc, char **argv) {
  int steps = 1500, pretrain = 300, B = 32, limit = 0, test_limit = 0, threads = 2;
  float adv = 1e-3f;
  uint64_t seed = 0;
  const char *out = ".", *dir = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *a = argv[i], *v = argv[i + 1];
    int k = 0; /* flags known */
    if (!strcmp(a, "--steps")) steps = atoi(v), k++;
    if (!strcmp(a, "--pretrain")) pretrain = atoi(v), k++;
    if (!strcmp(a, "--batch")) B = atoi(v), k++;
    if (!strcmp(a, "--adv")) adv = strtof(v, NULL), k++;
    if (!strcmp(a, "--limit")) limit = atoi(v), k++;
    if (!strcmp(a, "--test-limit")) test_limit = atoi(v), k++;
    if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10), k++;
    if (!strcmp(a, "--threads")) threads = atoi(v), k++;
    if (!strcmp(a, "--out")) out = v, k++;
    if (!strcmp(a, "--data")) dir = v, k++;
    if (!k) argc = 0; /* an unknown flag: usage below */
  }
  if (argc % 2 == 0 || steps < 1 || pretrain < 0 || B < 2 || B > 1024 || !(adv >= 0) || limit < 0 ||
      test_limit < 0 || threads < 1) {
    fprintf(stderr,
            "usage: srgan [--steps N] [--pretrain N] [--batch N] [--adv X] [--limit N] "
            "[--test-limit N] [--seed N] [--threads N] [--out DIR] [--data DIR]\n");
    return 2;
  }
  nn_set_threads(threads);
  shoal_error err = {0};
  data_set *train, *test;
  if (data_fashion_mnist_load(dir, true, &train, &err) ||
      data_fashion_mnist_load(dir, false, &test, &err))
    die("data", &err);
  data_loader_config lc = data_loader_defaults(); /* pixels in [0, 1] */
  lc.batch = B, lc.seed = seed, lc.limit = limit, lc.drop_last = true;
  data_loader *tl = data_loader_create(train, &lc, &err);
  lc.shuffle = false, lc.drop_last = false, lc.limit = test_limit;
  data_loader *vl = tl ? data_loader_create(test, &lc, &err) : NULL;
  if (!vl) die("loader", &err);
  nn_model *g = make_generator(B, seed, &err),
           *d = g ? make_discriminator(B, seed + 1, &err) : NULL;
  if (!d) die("model", &err);
  nn_optim_config oc = nn_optim_defaults(NN_ADAM);
  oc.lr = 1e-3f;
  nn_optim *og = nn_optim_create(g, &oc, &err);
  oc.lr = 2e-4f, oc.beta1 = 0.5f;
  nn_optim *od = nn_optim_create(d, &oc, &err);
  float *lr = malloc((size_t)B * 196 * sizeof(float)),
        *dsr = malloc((size_t)B * 784 * sizeof(float));
  float *ones = malloc((size_t)B * sizeof(float)), *zeros = calloc((size_t)B, sizeof(float));
  float *dl = malloc((size_t)B * sizeof(float)), *bic = malloc(784 * sizeof(float));
  if (!og || !od || !lr || !dsr || !ones || !zeros || !dl || !bic) die("setup", &err);
  for (int i = 0; i < B; i++) ones[i] = 1;
  printf("srgan: %d steps of %d (%d on the content loss alone), adversarial weight %g\n", steps, B,
         pretrain, (double)adv);

  double t0 = shoal_now_s(), sum_c = 0, sum_a = 0, sum_d = 0;
  int cnt = 0;
  for (int s = 1; s <= steps; s++) {
    data_batch b;
    const float *sr, *logit, *dx;
    float lc_, la = 0, ldr, ldf;
    bool gan = s > pretrain && adv > 0;
    if (data_loader_next(tl, &b, &err)) die("data", &err);
    downsample(lr, b.x, B);
    if (nn_model_forward(g, lr, B, &sr, &err)) die("G", &err);
    if (gan) { /* D step: originals -> 1, G's images -> 0 */
      nn_model_zero_grad(d);
      if (nn_model_forward(d, b.x, B, &logit, &err) ||
          nn_bce_with_logits_loss(&ldr, dl, logit, ones, NULL, B, 1, &err) ||
          nn_model_backward(d, dl, NULL, &err) || nn_model_forward(d, sr, B, &logit, &err) ||
          nn_bce_with_logits_loss(&ldf, dl, logit, zeros, NULL, B, 1, &err) ||
          nn_model_backward(d, dl, NULL, &err) || nn_optim_step(od, &err))
        die("D step", &err);
      sum_d += ldr + ldf;
    }
    /* G step: d/dsr of MSE + adv * BCE(D(sr), 1), the second through D's input gradient */
    nn_model_zero_grad(g);
    if (nn_mse_loss(&lc_, dsr, sr, b.x, NULL, B, 784, &err)) die("content loss", &err);
    if (gan) {
      if (nn_model_forward(d, sr, B, &logit, &err) ||
          nn_bce_with_logits_loss(&la, dl, logit, ones, NULL, B, 1, &err) ||
          nn_model_backward(d, dl, &dx, &err))
        die("adversarial loss", &err);
      for (int i = 0; i < B * 784; i++) dsr[i] += adv * dx[i];
    }
    if (nn_model_backward(g, dsr, NULL, &err) || nn_optim_step(og, &err)) die("G step", &err);
    sum_c += lc_, sum_a += la, cnt++;
    if (s % 100 == 0 || s == steps) {
      printf("step %d/%d content %.5f adversarial %.4f d_loss %.4f %.1f steps/s\n", s, steps,
             sum_c / cnt, sum_a / cnt, sum_d / cnt, s / (shoal_now_s() - t0));
      fflush(stdout);
      sum_c = sum_a = sum_d = 0, cnt = 0;
    }
  }

  /* Test set: PSNR of G and of bicubic, and a picture of the first 8 images. */
  static uint8_t rgb[32 * 784 * 3];
  double p_g = 0, p_b = 0;
  long n = 0;
  nn_model_set_training(g, false);
  for (long i = 0; i < data_loader_batches(vl); i++) {
    data_batch b;
    const float *sr;
    if (data_loader_next(vl, &b, &err)) die("data", &err);
    downsample(lr, b.x, b.n);
    if (nn_model_forward(g, lr, b.n, &sr, &err)) die("G", &err);
    for (int k = 0; k < b.n; k++, n++) {
      const float *hr = b.x + (size_t)k * 784;
      bicubic2x(bic, lr + (size_t)k * 196);
      p_g += psnr(sr + (size_t)k * 784, hr), p_b += psnr(bic, hr);
      for (int j = 0; n < 8 && j < 784; j++) {
        float v[4] = {lr[k * 196 + (j / 28 / 2) * 14 + (j % 28) / 2], bic[j], sr[k * 784 + j],
                      hr[j]};
        for (int r = 0; r < 4; r++)
          memset(rgb + (((size_t)r * 8 + (size_t)n) * 784 + (size_t)j) * 3,
                 (int)lrintf(fminf(fmaxf(v[r], 0), 1) * 255), 3);
      }
    }
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/srgan.png", out);
  if (env_png_strip(path, rgb, 32, 28, 28, 8, &err)) die("png", &err);
  printf("test set (%ld images): PSNR G %.3f dB, bicubic %.3f dB (%+.3f dB); picture %s\n", n,
         p_g / (double)n, p_b / (double)n, (p_g - p_b) / (double)n, path);
  snprintf(path, sizeof path, "%s/srgan_g.safetensors", out);
  if (nn_model_save(g, path, &err)) die("save", &err);
  free(lr), free(dsr), free(ones), free(zeros), free(dl), free(bic);
  nn_optim_destroy(og), nn_optim_destroy(od), nn_model_destroy(g), nn_model_destroy(d);
  data_loader_destroy(vl), data_loader_destroy(tl), data_set_destroy(test), data_set_destroy(train);
  return 0;
}
