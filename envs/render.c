/* SPDX-License-Identifier: Apache-2.0 */
/* A small rasteriser (rectangles, convex polygons, circles, thick lines) into RGB
 * buffers. PNG output is envs/apng.c's. */
#include <math.h>

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
