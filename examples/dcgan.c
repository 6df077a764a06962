/* SPDX-License-Identifier: Apache-2.0 */
/*
 * examples/dcgan.c — DCGAN (Radford et al. 2016) scaled to 28x28 Fashion-MNIST.
 *
 *   dcgan [--epochs 5] [--batch 64] [--limit N] [--seed 0] [--threads 2] [--out DIR]
 *         [--classifier classify.safetensors] [--data DIR]
 *
 * G: z (100) -> dense 7*7*128, BN, ReLU -> convT 64 4x4/2, BN, ReLU -> convT 1 4x4/2, tanh.
 * D: conv 64 4x4/2, lrelu 0.2 -> conv 128 4x4/2, BN, lrelu 0.2 -> dense 1 (a logit).
 * Losses: BCE with logits, D on real (1) and G(z) (0), G on D(G(z)) against 1 (the
 * non-saturating loss); Adam lr 2e-4, beta1 0.5, as the paper. Each epoch writes 64
 * samples of a fixed z to DIR/dcgan_epoch<N>.png and, given classify's checkpoint, scores
 * 1,000 samples with that classifier: the Inception score exp(E KL(p(y|x) || p(y))) (1 to
 * 10: sure and varied classes score high) and the mean top-class confidence, beside the
 * figures of 1,000 real test images. At the end: G and D in DIR/dcgan_{g,d}.safetensors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "envs/envs.h"
#include "nn/nn.h"

#define Z 100
#define NS 1000 /* samples scored */

static _Noreturn void die(const char *what, const shoal_error *err) {
  fprintf(stderr, "dcgan: %s: %s\n", what, err && err->msg[0] ? err->msg : "failed");
  exit(1);
}

/* Prints the Inception score and mean confidence of classifier c on n images in [-1, 1]. */
static void score(nn_model *c, const float *x, int n, const char *what) {
  shoal_error err = {0};
  static float in[100 * 784];
  double py[10] = {0}, *p = malloc((size_t)n * 10 * sizeof(double));
  const float *y;
  double conf = 0, kl = 0;
  for (int s = 0; s < n; s += 100) {
    for (int i = 0; i < 100 * 784; i++) /* to classify's normalisation */
      in[i] = ((x[(size_t)s * 784 + i] + 1) / 2 - 0.2860f) / 0.3530f;
    if (nn_model_forward(c, in, 100, &y, &err)) die("classifier", &err);
    for (int k = 0; k < 100; k++) {
      double mx = y[k * 10], z = 0, top = 0;
      for (int j = 1; j < 10; j++) mx = fmax(mx, y[k * 10 + j]);
      for (int j = 0; j < 10; j++) z += exp(y[k * 10 + j] - mx);
      for (int j = 0; j < 10; j++) {
        double q = exp(y[k * 10 + j] - mx) / z;
        p[(s + k) * 10 + j] = q, py[j] += q / n, top = fmax(top, q);
      }
      conf += top / n;
    }
  }
  for (int k = 0; k < n * 10; k++) kl += p[k] > 0 ? p[k] * log(p[k] / py[k % 10]) / n : 0;
  printf("%s inception score %.3f, confidence %.3f\n", what, exp(kl), conf);
  free(p);
}

int main(int argc, char **argv) {
  int epochs = 5, B = 64, limit = 0, threads = 2;
  uint64_t seed = 0;
  const char *out = ".", *ckpt = "classify.safetensors", *dir = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *a = argv[i], *v = argv[i + 1];
    int k = 0; /* flags known */
    if (!strcmp(a, "--epochs")) epochs = atoi(v), k++;
    if (!strcmp(a, "--batch")) B = atoi(v), k++;
    if (!strcmp(a, "--limit")) limit = atoi(v), k++;
    if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10), k++;
    if (!strcmp(a, "--threads")) threads = atoi(v), k++;
    if (!strcmp(a, "--out")) out = v, k++;
    if (!strcmp(a, "--classifier")) ckpt = v, k++;
    if (!strcmp(a, "--data")) dir = v, k++;
    if (!k) argc = 0; /* an unknown flag: usage below */
  }
  if (argc % 2 == 0 || epochs < 1 || B < 2 || B > NS || limit < 0 || threads < 1) {
    fprintf(stderr,
            "usage: dcgan [--epochs N] [--batch N] [--limit N] [--seed N] [--threads N] "
            "[--out DIR] [--classifier FILE] [--data DIR]\n");
    return 2;
  }
  nn_set_threads(threads);
  shoal_error err = {0};
  data_set *train, *test;
  if (data_fashion_mnist_load(dir, true, &train, &err) ||
      data_fashion_mnist_load(dir, false, &test, &err))
    die("data", &err);
  data_loader_config lc = data_loader_defaults(); /* pixels to [-1, 1], tanh's range */
  lc.batch = B, lc.seed = seed, lc.mean = 0.5f, lc.std = 0.5f, lc.limit = limit, lc.drop_last = 1;
  data_loader *ld = data_loader_create(train, &lc, &err);
  if (!ld) die("loader", &err);

  nn_model *g = nn_model_create(NN_CPU, &err), *d = nn_model_create(NN_CPU, &err);
  if (!g || !d) die("model", &err);
  nn_input(g, Z, 1, 1);
  nn_dense(g, "fc", 7 * 7 * 128), nn_reshape(g, "view", 128, 7, 7);
  nn_batchnorm(g, "bn0", 1e-5f, 0.1f), nn_activation(g, "relu0", NN_RELU, 0);
  nn_conv_transpose2d(g, "ct1", 64, 4, 4, 2, 1, 0);
  nn_batchnorm(g, "bn1", 1e-5f, 0.1f), nn_activation(g, "relu1", NN_RELU, 0);
  nn_conv_transpose2d(g, "ct2", 1, 4, 4, 2, 1, 0), nn_activation(g, "tanh", NN_TANH, 0);
  nn_input(d, 1, 28, 28);
  nn_conv2d(d, "c1", 64, 4, 4, 2, 1, 1), nn_activation(d, "lrelu1", NN_LEAKY_RELU, 0.2f);
  nn_conv2d(d, "c2", 128, 4, 4, 2, 1, 1), nn_batchnorm(d, "bn2", 1e-5f, 0.1f);
  nn_activation(d, "lrelu2", NN_LEAKY_RELU, 0.2f), nn_dense(d, "fc", 1);
  /* The classifier of examples/classify (same layers), to score samples; optional. */
  nn_model *c = nn_model_create(NN_CPU, &err);
  nn_input(c, 1, 28, 28);
  nn_conv2d(c, "conv1", 32, 3, 3, 1, 1, 1), nn_batchnorm(c, "bn1", 1e-5f, 0.1f);
  nn_activation(c, "relu1", NN_RELU, 0), nn_maxpool2d(c, "pool1", 2, 2, 0);
  nn_conv2d(c, "conv2", 64, 3, 3, 1, 1, 1), nn_batchnorm(c, "bn2", 1e-5f, 0.1f);
  nn_activation(c, "relu2", NN_RELU, 0), nn_maxpool2d(c, "pool2", 2, 2, 0);
  nn_dense(c, "fc1", 256), nn_activation(c, "relu3", NN_RELU, 0);
  nn_dropout(c, "drop", 0.3f), nn_dense(c, "fc2", 10);
  if (nn_model_build(g, NS, seed, &err) || nn_model_build(d, B, seed + 1, &err) ||
      nn_model_build(c, 100, 0, &err))
    die("build", &err);
  nn_optim_config oc = nn_optim_defaults(NN_ADAM);
  oc.lr = 2e-4f, oc.beta1 = 0.5f;
  nn_optim *og = nn_optim_create(g, &oc, &err), *od = nn_optim_create(d, &oc, &err);
  if (!og || !od) die("optimizer", &err);
  nn_model_set_training(c, false);
  bool scored = !nn_model_load(c, ckpt, &err);
  static float zs[NS * Z], real[NS * 784], ones[1024], zeros[1024], dl[1024];
  static uint8_t rgb[64 * 784 * 3];
  shoal_rng rng;
  shoal_rng_seed(&rng, seed + 2);
  for (int i = 0; i < NS * 784; i++) real[i] = data_set_image(test, i / 784)[i % 784] / 127.5f - 1;
  for (int i = 0; i < B; i++) ones[i] = 1, zeros[i] = 0;
  char path[4096];
  if (!scored) printf("no classifier score (%s): run classify first\n", err.msg);
  if (scored) score(c, real, NS, "real test images:");

  for (int e = 1; e <= epochs; e++) {
    double t0 = shoal_now_s(), sd = 0, sg = 0;
    long n = data_loader_batches(ld);
    for (long it = 0; it < n; it++) {
      data_batch b;
      const float *fake, *logit, *dx;
      float ld_real, ld_fake, lg;
      for (int i = 0; i < B * Z; i++) zs[i] = (float)shoal_rng_normal(&rng);
      if (data_loader_next(ld, &b, &err) || nn_model_forward(g, zs, B, &fake, &err)) die("G", &err);
      /* D step: real -> 1, G(z) -> 0 (G's output is only read here: no gradient to G) */
      nn_model_zero_grad(d);
      if (nn_model_forward(d, b.x, B, &logit, &err) ||
          nn_bce_with_logits_loss(&ld_real, dl, logit, ones, NULL, B, 1, &err) ||
          nn_model_backward(d, dl, NULL, &err) || nn_model_forward(d, fake, B, &logit, &err) ||
          nn_bce_with_logits_loss(&ld_fake, dl, logit, zeros, NULL, B, 1, &err) ||
          nn_model_backward(d, dl, NULL, &err) || nn_optim_step(od, &err))
        die("D step", &err);
      /* G step: D(G(z)) -> 1, D's input gradient back through G (D's own is discarded) */
      nn_model_zero_grad(g);
      if (nn_model_forward(d, fake, B, &logit, &err) ||
          nn_bce_with_logits_loss(&lg, dl, logit, ones, NULL, B, 1, &err) ||
          nn_model_backward(d, dl, &dx, &err) || nn_model_backward(g, dx, NULL, &err) ||
          nn_optim_step(og, &err))
        die("G step", &err);
      sd += (ld_real + ld_fake) / n, sg += lg / (double)n;
    }
    double rate = n / (shoal_now_s() - t0);
    /* 1,000 samples of a fixed z with batch statistics in G's batch norm, as in training
     * (PyTorch's DCGAN example samples so; running averages lag a fast-moving G) */
    const float *x;
    shoal_rng zr;
    shoal_rng_seed(&zr, 7);
    for (int i = 0; i < NS * Z; i++) zs[i] = (float)shoal_rng_normal(&zr);
    if (nn_model_forward(g, zs, NS, &x, &err)) die("sample", &err);
    for (int i = 0; i < 64 * 784 * 3; i++) rgb[i] = (uint8_t)lrintf((x[i / 3] + 1) * 127.5f);
    snprintf(path, sizeof path, "%s/dcgan_epoch%d.png", out, e);
    if (env_png_strip(path, rgb, 64, 28, 28, 8, &err)) die("png", &err);
    printf("epoch %d/%d loss_d %.4f loss_g %.4f %.2f it/s, samples %s", e, epochs, sd, sg, rate,
           path);
    scored ? score(c, x, NS, ",") : (void)printf("\n");
    fflush(stdout);
  }
  snprintf(path, sizeof path, "%s/dcgan_g.safetensors", out);
  if (nn_model_save(g, path, &err)) die("save", &err);
  snprintf(path, sizeof path, "%s/dcgan_d.safetensors", out);
  if (nn_model_save(d, path, &err)) die("save", &err);
  nn_optim_destroy(og), nn_optim_destroy(od), data_loader_destroy(ld);
  nn_model_destroy(g), nn_model_destroy(d), nn_model_destroy(c);
  data_set_destroy(train), data_set_destroy(test);
  return 0;
}
