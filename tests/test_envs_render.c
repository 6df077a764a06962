/* SPDX-License-Identifier: Apache-2.0 */
/* Rendering: every renderable env draws a frame; PNGs (one frame and a strip) are
 * written and read back with libpng pixel for pixel; a bad path is a clear error. */
#define _DEFAULT_SOURCE
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "envs/envs.h"

/* Reads an 8-bit RGB PNG into a malloc'd buffer; NULL if it is not one. */
static uint8_t *read_png(const char *path, int *w, int *h) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  uint8_t *volatile img = NULL;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
    free(img);
    return NULL;
  }
  png_init_io(png, f);
  png_read_info(png, info);
  if (png_get_color_type(png, info) != PNG_COLOR_TYPE_RGB || png_get_bit_depth(png, info) != 8)
    longjmp(png_jmpbuf(png), 1);
  *w = (int)png_get_image_width(png, info);
  *h = (int)png_get_image_height(png, info);
  img = malloc((size_t)*w * (size_t)*h * 3);
  for (int y = 0; y < *h; y++) png_read_row(png, img + (size_t)y * (size_t)*w * 3, NULL);
  png_read_end(png, NULL);
  png_destroy_read_struct(&png, &info, NULL);
  fclose(f);
  return img;
}

static void out_path(char *buf, size_t n, const char *name) {
  const char *dir = getenv("SHOAL_BINARY_DIR");
  snprintf(buf, n, "%s/tests/%s", dir ? dir : ".", name);
}

static long count_not(const uint8_t *rgb, int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  long n = 0;
  for (long i = 0; i < (long)w * h; i++)
    n += rgb[3 * i] != r || rgb[3 * i + 1] != g || rgb[3 * i + 2] != b;
  return n;
}

static void test_render_all(void **unused) {
  static const char *ids[] = {"CartPole-v1",
                              "MountainCar-v0",
                              "MountainCarContinuous-v0",
                              "Acrobot-v1",
                              "Pendulum-v1",
                              "MinAtar/Breakout-v1",
                              "MinAtar/Freeway-v1",
                              "MinAtar/Asterix-v1",
                              "MinAtar/Seaquest-v1",
                              "MinAtar/SpaceInvaders-v1"};
  for (int k = 0; k < 10; k++) {
    env *e;
    shoal_error err = {0};
    assert_int_equal(env_make(&e, ids[k], &err), 0);
    const env_spec *sp = env_get_spec(e);
    assert_true(sp->render_w > 0 && sp->render_h > 0);
    size_t fb = (size_t)sp->render_w * (size_t)sp->render_h * 3;
    uint8_t *frames = malloc(fb * 6);
    uint8_t obs[1000];
    assert_int_equal(env_render(e, frames, &err), SHOAL_ESTATE); /* before reset */
    env_seed(e, 1);
    env_reset(e, obs);
    for (int f = 0; f < 6; f++) {
      assert_int_equal(env_render(e, frames + f * fb, &err), 0);
      long ink = k < 5 ? count_not(frames + f * fb, sp->render_w, sp->render_h, 255, 255, 255)
                       : count_not(frames + f * fb, sp->render_w, sp->render_h, 0, 0, 0);
      assert_true(ink > 200); /* something is drawn */
      int32_t a = 1;
      float u = 0.7f;
      env_result r;
      if (env_step(e, sp->act.n ? (void *)&a : (void *)&u, obs, &r, &err) == 0 &&
          (r.terminated || r.truncated))
        env_reset(e, obs);
    }
    char name[128], path[1024];
    snprintf(name, sizeof name, "render_%d.png", k);
    out_path(path, sizeof path, name);
    assert_int_equal(env_png_write(path, frames, sp->render_w, sp->render_h, &err), 0);
    int w, h;
    uint8_t *back = read_png(path, &w, &h);
    assert_non_null(back);
    assert_int_equal(w, sp->render_w);
    assert_int_equal(h, sp->render_h);
    assert_memory_equal(back, frames, fb);
    free(back);
    snprintf(name, sizeof name, "render_strip_%d.png", k);
    out_path(path, sizeof path, name);
    assert_int_equal(env_png_strip(path, frames, 6, sp->render_w, sp->render_h, 3, &err), 0);
    back = read_png(path, &w, &h);
    assert_non_null(back);
    assert_int_equal(w, 3 * sp->render_w + 4 * 2);
    assert_int_equal(h, 2 * sp->render_h + 3 * 2);
    /* frame 4 (row 1, column 1) sits at (2 + w + 2, 2 + h + 2) */
    size_t ox = (size_t)(4 + sp->render_w), oy = (size_t)(4 + sp->render_h);
    for (int y = 0; y < sp->render_h; y += 7)
      assert_memory_equal(back + ((oy + (size_t)y) * (size_t)w + ox) * 3,
                          frames + 4 * fb + (size_t)y * (size_t)sp->render_w * 3,
                          (size_t)sp->render_w * 3);
    free(back);
    free(frames);
    env_destroy(e);
  }
}

/* CartPole's cart is drawn where the state puts it: x * 125 + 300 pixels, on y = 300. */
static void test_cartpole_geometry(void **unused) {
  env *e;
  shoal_error err = {0};
  assert_int_equal(env_make(&e, "CartPole-v1", &err), 0);
  float obs[4];
  env_reset(e, obs);
  double st[4] = {1.0, 0, 0, 0};
  assert_int_equal(env_set_state(e, st, 4, &err), 0);
  uint8_t *rgb = malloc(600 * 400 * 3);
  assert_int_equal(env_render(e, rgb, &err), 0);
  const uint8_t *p = rgb + (300 * 600 + 425) * 3; /* the cart's centre */
  assert_true(p[0] == 0 && p[1] == 0 && p[2] == 0);
  p = rgb + (299 * 600 + 100) * 3; /* the track (Gymnasium: y = 100 from the bottom) */
  assert_true(p[0] == 0);
  p = rgb + (250 * 600 + 300) * 3; /* above the track at the middle: background */
  assert_true(p[0] == 255 && p[1] == 255 && p[2] == 255);
  p = rgb + (200 * 600 + 425) * 3; /* the upright pole above the cart */
  assert_true(p[0] == 202 && p[1] == 152 && p[2] == 101);
  free(rgb);
  env_destroy(e);
}

static void test_png_errors(void **unused) {
  uint8_t px[12] = {0};
  shoal_error err = {0};
  assert_int_equal(env_png_write("/nonexistent-dir/x.png", px, 2, 2, &err), SHOAL_EIO);
  assert_non_null(strstr(err.msg, "/nonexistent-dir/x.png"));
  assert_int_equal(env_png_write("x.png", px, 0, 2, &err), SHOAL_EINVAL);
  assert_int_equal(env_png_strip("x.png", px, 0, 2, 2, 0, &err), SHOAL_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_render_all),
      cmocka_unit_test(test_cartpole_geometry),
      cmocka_unit_test(test_png_errors),
  };
  return cmocka_run_group_tests_name("envs_render", tests, NULL, NULL);
}
