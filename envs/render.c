/* A small rasteriser (rectangles, convex polygons, circles, thick lines) into RGB
 * buffers, and PNG output through libpng. */
#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"

static inline void put(env__canvas *c, int x, int y, const uint8_t col[3]) {
  if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
  uint8_t *p = c->rgb + ((size_t)y * (size_t)c->w + (size_t)x) * 3;
  p[0] = col[0];
  p[1] = col[1];
  p[2] = col[2];
}

void env__fill(env__canvas *c, uint8_t r, uint8_t g, uint8_t b) {
  size_t n = (size_t)c->w * (size_t)c->h;
  for (size_t i = 0; i < n; i++) {
    c->rgb[3 * i] = r;
    c->rgb[3 * i + 1] = g;
    c->rgb[3 * i + 2] = b;
  }
}

void env__rect(env__canvas *c, int x0, int y0, int x1, int y1, const uint8_t col[3]) {
  for (int y = y0; y < y1; y++)
    for (int x = x0; x < x1; x++) put(c, x, y, col);
}

/* Scanline fill of a convex polygon: a pixel is in when its centre is. */
void env__poly(env__canvas *c, const double *xy, int n, const uint8_t col[3]) {
  double ymin = xy[1], ymax = xy[1];
  for (int k = 1; k < n; k++) {
    ymin = fmin(ymin, xy[2 * k + 1]);
    ymax = fmax(ymax, xy[2 * k + 1]);
  }
  int y0 = (int)floor(ymin), y1 = (int)ceil(ymax);
  if (y0 < 0) y0 = 0;
  if (y1 > c->h) y1 = c->h;
  for (int y = y0; y < y1; y++) {
    double yc = y + 0.5, lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < n; k++) {
      double ax = xy[2 * k], ay = xy[2 * k + 1];
      double bx = xy[2 * ((k + 1) % n)], by = xy[2 * ((k + 1) % n) + 1];
      if ((ay <= yc && by > yc) || (by <= yc && ay > yc)) {
        double x = ax + (yc - ay) * (bx - ax) / (by - ay);
        lo = fmin(lo, x);
        hi = fmax(hi, x);
      }
    }
    if (lo > hi) continue;
    int xa = (int)ceil(lo - 0.5), xb = (int)floor(hi - 0.5);
    for (int x = xa; x <= xb; x++) put(c, x, y, col);
  }
}

void env__circle(env__canvas *c, double cx, double cy, double r, const uint8_t col[3]) {
  int y0 = (int)floor(cy - r), y1 = (int)ceil(cy + r);
  int x0 = (int)floor(cx - r), x1 = (int)ceil(cx + r);
  for (int y = y0; y <= y1; y++)
    for (int x = x0; x <= x1; x++) {
      double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
      if (dx * dx + dy * dy <= r * r) put(c, x, y, col);
    }
}

void env__line(env__canvas *c, double x0, double y0, double x1, double y1, double width,
               const uint8_t col[3]) {
  double dx = x1 - x0, dy = y1 - y0, len = sqrt(dx * dx + dy * dy);
  if (len == 0) {
    env__circle(c, x0, y0, width / 2, col);
    return;
  }
  double w = width < 1.0 ? 1.0 : width;
  double nx = -dy / len * w / 2, ny = dx / len * w / 2;
  double q[8] = {x0 + nx, y0 + ny, x1 + nx, y1 + ny, x1 - nx, y1 - ny, x0 - nx, y0 - ny};
  env__poly(c, q, 4, col);
}

/* libpng reports errors through longjmp; keep that confined to this function. */
static int write_rows(const char *path, const uint8_t *rgb, int w, int h, shoal_error *err) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return shoal_error_set(err, SHOAL_EIO, "env_png_write: cannot open '%s': %s", path,
                           strerror(errno));
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    fclose(f);
    return shoal_error_set(err, SHOAL_ENOMEM, "env_png_write: '%s': libpng out of memory", path);
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    fclose(f);
    remove(path);
    return shoal_error_set(err, SHOAL_EIO, "env_png_write: libpng failed writing '%s'", path);
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; y++) png_write_row(png, (png_const_bytep)(rgb + (size_t)y * w * 3));
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  if (fflush(f) != 0 || ferror(f)) {
    int e = errno;
    fclose(f);
    remove(path);
    return shoal_error_set(err, SHOAL_EIO, "env_png_write: writing '%s': %s", path, strerror(e));
  }
  if (fclose(f) != 0) {
    remove(path);
    return shoal_error_set(err, SHOAL_EIO, "env_png_write: closing '%s': %s", path,
                           strerror(errno));
  }
  return 0;
}

int env_png_write(const char *path, const uint8_t *rgb, int w, int h, shoal_error *err) {
  if (!path || !rgb || w < 1 || h < 1 || w > 1 << 15 || h > 1 << 15)
    return shoal_error_set(err, SHOAL_EINVAL, "env_png_write: bad arguments (%dx%d image)", w, h);
  return write_rows(path, rgb, w, h, err);
}

int env_png_strip(const char *path, const uint8_t *frames, int n, int w, int h, int cols,
                  shoal_error *err) {
  if (!path || !frames || n < 1 || w < 1 || h < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "env_png_strip: bad arguments (%d frames %dx%d)", n,
                           w, h);
  if (cols <= 0 || cols > n) cols = n;
  int rows = (n + cols - 1) / cols, gap = 2;
  long W = (long)cols * w + (long)(cols + 1) * gap, H = (long)rows * h + (long)(rows + 1) * gap;
  if (W > 1 << 15 || H > 1 << 15)
    return shoal_error_set(err, SHOAL_EINVAL, "env_png_strip: %ldx%ld pixels is too large", W, H);
  uint8_t *img = malloc((size_t)W * (size_t)H * 3);
  if (!img) return shoal_error_set(err, SHOAL_ENOMEM, "env_png_strip: out of memory");
  memset(img, 128, (size_t)W * (size_t)H * 3);
  for (int k = 0; k < n; k++) {
    int r = k / cols, cc = k % cols;
    size_t ox = (size_t)(gap + cc * (w + gap)), oy = (size_t)(gap + r * (h + gap));
    for (int y = 0; y < h; y++)
      memcpy(img + ((oy + (size_t)y) * (size_t)W + ox) * 3,
             frames + ((size_t)k * h + (size_t)y) * (size_t)w * 3, (size_t)w * 3);
  }
  int rc = write_rows(path, img, (int)W, (int)H, err);
  free(img);
  return rc;
}
