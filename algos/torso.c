/* SPDX-License-Identifier: Apache-2.0 */
/* Torsos from a description (algos_model: the config's `model` section), shared by DQN's
 * network (algos/dqn.c) and the actor-critic's (algos/ac.c). The named presets are
 * descriptions too, so `nature` is the same layers in both and a custom stack of rows is
 * built by the same code as the presets. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "algos/algos.h"

int algos_model_preset(const char *name, const int hidden[2], bool tanh, algos_model *out) {
  algos_model md = {.input_scale = 1.0f};
  if (!strcmp(name, "mlp")) {
    for (int i = 0; i < 2 && hidden && hidden[i] > 0; i++) md.dense[md.ndense++] = hidden[i];
    md.tanh = tanh;
  } else if (!strcmp(name, "minatar")) {
    /* MinAtar's networks (Young & Tian 2019) */
    md.conv[md.nconv++] = (algos_conv){16, 3, 1, 0};
    md.dense[md.ndense++] = 128;
  } else if (!strcmp(name, "nature")) {
    /* Mnih et al. 2015 */
    md.input_scale = 1.0f / 255.0f;
    md.conv[md.nconv++] = (algos_conv){32, 8, 4, 0};
    md.conv[md.nconv++] = (algos_conv){64, 4, 2, 0};
    md.conv[md.nconv++] = (algos_conv){64, 3, 1, 0};
    md.dense[md.ndense++] = 512;
  } else if (!strcmp(name, "impala")) {
    /* Espeholt et al. 2018's deep network */
    md.input_scale = 1.0f / 255.0f;
    md.stages[md.nstages++] = 16;
    md.stages[md.nstages++] = 32;
    md.stages[md.nstages++] = 32;
    md.dense[md.ndense++] = 256;
  } else {
    return SHOAL_EINVAL;
  }
  *out = md;
  return 0;
}

bool algos_model_is_image(const algos_model *md) { return md->nconv > 0 || md->nstages > 0; }

int algos_model_check(const algos_model *md, int c, int h, int w, const char *who, int *features,
                      shoal_error *err) {
  if (md->nconv < 0 || md->nconv > ALGOS_MAX_CONV || md->nstages < 0 ||
      md->nstages > ALGOS_MAX_STAGES || md->ndense < 0 || md->ndense > ALGOS_MAX_DENSE)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "%s: model of %d conv rows, %d stages, %d dense layers: at most %d, "
                           "%d and %d",
                           who, md->nconv, md->nstages, md->ndense, ALGOS_MAX_CONV,
                           ALGOS_MAX_STAGES, ALGOS_MAX_DENSE);
  if (!(md->input_scale > 0 && md->input_scale < 1e6f))
    return shoal_error_set(err, SHOAL_EINVAL, "%s: model input scale %g is not in (0, 1e6)", who,
                           (double)md->input_scale);
  if (algos_model_is_image(md) && (c < 1 || h < 1 || w < 1))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "%s: a model with convolutions needs image "
                           "observations (C, H, W), got %dx%dx%d",
                           who, c, h, w);
  for (int i = 0; i < md->nconv; i++) {
    const algos_conv *r = &md->conv[i];
    if (r->channels < 1 || r->channels > 65536 || r->kernel < 1 || r->kernel > 64 ||
        r->stride < 1 || r->stride > 64 || r->padding < 0 || r->padding >= r->kernel)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "%s: model conv%d [%d, %d, %d, %d]: channels in [1, 65536], kernel "
                             "and stride in [1, 64], padding in [0, kernel) are needed",
                             who, i + 1, r->channels, r->kernel, r->stride, r->padding);
    int oh = (h + 2 * r->padding - r->kernel) / r->stride + 1,
        ow = (w + 2 * r->padding - r->kernel) / r->stride + 1;
    if (h + 2 * r->padding < r->kernel || w + 2 * r->padding < r->kernel)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "%s: model conv%d (%d %dx%d stride %d padding %d) does not fit its "
                             "%dx%d input (observations %dx%dx%d)",
                             who, i + 1, r->channels, r->kernel, r->kernel, r->stride, r->padding,
                             h, w, c, h, w);
    c = r->channels, h = oh, w = ow;
  }
  for (int s = 0; s < md->nstages; s++) {
    if (md->stages[s] < 1 || md->stages[s] > 65536)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "%s: model stage%d has %d channels, not in "
                             "[1, 65536]",
                             who, s, md->stages[s]);
    c = md->stages[s], h = (h - 1) / 2 + 1, w = (w - 1) / 2 + 1;
  }
  for (int i = 0; i < md->ndense; i++)
    if (md->dense[i] < 1 || md->dense[i] > 1 << 20)
      return shoal_error_set(err, SHOAL_EINVAL, "%s: model fc%d has %d units, not in [1, 2^20]",
                             who, i + 1, md->dense[i]);
  long long out = md->ndense ? md->dense[md->ndense - 1] : (long long)c * h * w;
  if (out > 1 << 24)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: the model's torso gives %lld features", who,
                           out);
  if (features) *features = (int)out;
  return 0;
}

/* prefix + the printf-style suffix into name (128 bytes); returns name. */
__attribute__((format(printf, 3, 4))) static const char *name_of(char *name, const char *prefix,
                                                                 const char *fmt, ...) {
  char sfx[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sfx, sizeof sfx, fmt, ap);
  va_end(ap);
  snprintf(name, 128, "%s%s", prefix, sfx);
  return name;
}

/* x + conv(relu(conv(relu(x)))), 3x3 convolutions with padding 1 (IMPALA's residual
 * block). */
static int res_block(nn_model *m, const char *prefix, int stage, int block, int ch) {
  char name[128];
  int rc, x = nn_model_current(m);
  for (int k = 0; k < 2; k++) {
    if ((rc = nn_activation(m, name_of(name, prefix, "stage%d.res%d.relu%d", stage, block, k),
                            NN_RELU, 0)) < 0)
      return rc;
    if ((rc = nn_conv2d(m, name_of(name, prefix, "stage%d.res%d.conv%d", stage, block, k), ch, 3, 3,
                        1, 1, 1)) < 0)
      return rc;
  }
  return nn_add(m, name_of(name, prefix, "stage%d.res%d.add", stage, block), x, rc);
}

int algos_model_build(nn_model *m, const algos_model *md, const char *prefix,
                      const nn_layer_type *dense_kind) {
  char name[128];
  const nn_act act = md->tanh ? NN_TANH : NN_RELU;
  const char *an = md->tanh ? "tanh" : "relu";
  int rc = nn_model_current(m);
  if (md->input_scale != 1.0f &&
      (rc = nn_activation(m, name_of(name, prefix, "scale"), NN_SCALE, md->input_scale)) < 0)
    return rc;
  for (int i = 0; i < md->nconv; i++) {
    const algos_conv *r = &md->conv[i];
    if ((rc = nn_conv2d(m, name_of(name, prefix, "conv%d", i + 1), r->channels, r->kernel,
                        r->kernel, r->stride, r->padding, 1)) < 0 ||
        (rc = nn_activation(m, name_of(name, prefix, "conv%d_%s", i + 1, an), act, 0)) < 0)
      return rc;
  }
  for (int s = 0; s < md->nstages; s++) {
    if ((rc = nn_conv2d(m, name_of(name, prefix, "stage%d.conv", s), md->stages[s], 3, 3, 1, 1,
                        1)) < 0 ||
        (rc = nn_maxpool2d(m, name_of(name, prefix, "stage%d.pool", s), 3, 2, 1)) < 0)
      return rc;
    for (int b = 0; b < 2; b++)
      if ((rc = res_block(m, prefix, s, b, md->stages[s])) < 0) return rc;
  }
  if (md->nstages > 0 && (rc = nn_activation(m, name_of(name, prefix, "out_relu"), NN_RELU, 0)) < 0)
    return rc;
  for (int i = 0; i < md->ndense; i++)
    if ((rc = nn_dense_as(m, name_of(name, prefix, "fc%d", i + 1), md->dense[i], dense_kind)) < 0 ||
        (rc = nn_activation(m, name_of(name, prefix, "fc%d_%s", i + 1, an), act, 0)) < 0)
      return rc;
  return rc;
}

__attribute__((format(printf, 4, 5))) static bool put(char *b, size_t cap, size_t *k,
                                                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(b + *k, cap - *k, fmt, ap);
  va_end(ap);
  if (w < 0 || (size_t)w >= cap - *k) return false;
  *k += (size_t)w;
  return true;
}

int algos_model_describe(const algos_model *md, int c, int h, int w, const char *dense_kind,
                         char *buf, size_t cap, size_t *k) {
  const char *an = md->tanh ? "tanh" : "relu";
  bool ok = true;
  for (int i = 0; i < md->nconv; i++) {
    const algos_conv *r = &md->conv[i];
    ok = ok && put(buf, cap, k,
                   "{\"kind\":\"conv2d\",\"name\":\"conv%d\",\"in\":%d,\"out\":%d,"
                   "\"kernel\":[%d,%d],\"stride\":%d,\"padding\":%d,\"activation\":\"%s\"},",
                   i + 1, c, r->channels, r->kernel, r->kernel, r->stride, r->padding, an);
    c = r->channels, h = (h + 2 * r->padding - r->kernel) / r->stride + 1,
    w = (w + 2 * r->padding - r->kernel) / r->stride + 1;
  }
  if (md->nstages > 0) {
    /* residual stages: named for a reader to recognise or refuse, not spelled out */
    int c0 = c;
    for (int s = 0; s < md->nstages; s++)
      c = md->stages[s], h = (h - 1) / 2 + 1, w = (w - 1) / 2 + 1;
    ok = ok && put(buf, cap, k,
                   "{\"kind\":\"impala_stages\",\"names\":\"stage0..stage%d\",\"in\":%d,"
                   "\"channels\":[",
                   md->nstages - 1, c0);
    for (int s = 0; s < md->nstages; s++)
      ok = ok && put(buf, cap, k, "%s%d", s ? "," : "", md->stages[s]);
    ok = ok && put(buf, cap, k, "],\"out\":[%d,%d,%d],\"activation\":\"relu\"},", c, h, w);
  }
  ok = ok && put(buf, cap, k, "{\"kind\":\"flatten\"},");
  int in = c * h * w;
  for (int i = 0; i < md->ndense; i++) {
    ok = ok && put(buf, cap, k,
                   "{\"kind\":\"%s\",\"name\":\"fc%d\",\"in\":%d,\"out\":%d,"
                   "\"activation\":\"%s\"},",
                   dense_kind, i + 1, in, md->dense[i], an);
    in = md->dense[i];
  }
  return ok ? in : -1;
}

int algos_image_torso(nn_model *m, bool impala, const char *prefix,
                      const nn_layer_type *dense_kind) {
  algos_model md;
  algos_model_preset(impala ? "impala" : "nature", NULL, false, &md);
  return algos_model_build(m, &md, prefix, dense_kind);
}
