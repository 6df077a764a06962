/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envs/apng.c — PNG and animated PNG (APNG) encoding with zlib, into memory or a file:
 * shoal's one PNG encoder (env_png_write and env_png_strip are env_png_encode's
 * bytes written out).
 *
 * PNG: signature, IHDR, IDAT, IEND (ISO/IEC 15948). APNG (the Mozilla APNG 1.0
 * specification, supported by every current browser and by PIL): acTL after IHDR
 * gives the frame count, each frame has an fcTL (size, offset, delay, dispose and
 * blend ops); frame 0 is the IDAT image, later frames are fdAT chunks, and fcTL and
 * fdAT share one sequence number. A frame after the first covers only the rectangle
 * where it differs from the previous frame (dispose NONE, blend SOURCE), so a mostly
 * still picture such as CartPole costs little per frame. Rows are filtered with the
 * filter of least absolute sum (the libpng heuristic) and deflated at level 6.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "envs/envs.h"

typedef struct buf {
  uint8_t *p;
  size_t n, cap;
  int oom;
} buf;

static void put(buf *b, const void *d, size_t n) {
  if (b->oom) return;
  if (b->n + n > b->cap) {
    size_t nc = b->cap ? b->cap : 4096;
    while (nc < b->n + n) nc *= 2;
    uint8_t *q = realloc(b->p, nc);
    if (!q) {
      b->oom = 1;
      return;
    }
    b->p = q, b->cap = nc;
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}

static void be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* One chunk: length, type, data (a then b), CRC of type and data. */
static void chunk(buf *o, const char type[4], const uint8_t *a, size_t na, const uint8_t *b,
                  size_t nb) {
  uint8_t h[8];
  be32(h, (uint32_t)(na + nb));
  memcpy(h + 4, type, 4);
  put(o, h, 8);
  if (na) put(o, a, na);
  if (nb) put(o, b, nb);
  uLong c = crc32(0, (const Bytef *)type, 4);
  if (na) c = crc32(c, a, (uInt)na);
  if (nb) c = crc32(c, b, (uInt)nb);
  uint8_t t[4];
  be32(t, (uint32_t)c);
  put(o, t, 4);
}

static int paeth(int a, int b, int c) {
  int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Filters and deflates the (w, h) RGB rectangle at rgb (row stride `stride` bytes)
 * into out. line is scratch of 5 * (w * 3 + 1) bytes. */
static int deflate_rect(buf *out, const uint8_t *rgb, size_t stride, int w, int h, uint8_t *line,
                        shoal_error *err) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit(&z, 6) != Z_OK)
    return shoal_error_set(err, SHOAL_ENOMEM, "png: zlib deflateInit failed");
  size_t rb = (size_t)w * 3, ln = rb + 1;
  uint8_t tmp[1 << 14];
  int rc = 0;
  for (int y = 0; y < h && !rc; y++) {
    const uint8_t *cur = rgb + (size_t)y * stride, *up = y ? cur - stride : NULL;
    long best = -1;
    int bf = 0;
    for (int f = 0; f < 5; f++) {
      uint8_t *o = line + (size_t)f * ln;
      o[0] = (uint8_t)f;
      long sum = 0;
      for (size_t i = 0; i < rb; i++) {
        int a = i >= 3 ? cur[i - 3] : 0, b = up ? up[i] : 0, c = up && i >= 3 ? up[i - 3] : 0;
        int pred = f == 0 ? 0 : f == 1 ? a : f == 2 ? b : f == 3 ? (a + b) / 2 : paeth(a, b, c);
        uint8_t v = (uint8_t)(cur[i] - pred);
        o[1 + i] = v;
        sum += v < 128 ? v : 256 - v;
      }
      if (best < 0 || sum < best) best = sum, bf = f;
    }
    z.next_in = line + (size_t)bf * ln;
    z.avail_in = (uInt)ln;
    int flush = y == h - 1 ? Z_FINISH : Z_NO_FLUSH;
    do {
      z.next_out = tmp, z.avail_out = sizeof tmp;
      int zr = deflate(&z, flush);
      if (zr == Z_STREAM_ERROR) {
        rc = shoal_error_set(err, SHOAL_EINTERNAL, "png: zlib deflate failed");
        break;
      }
      put(out, tmp, sizeof tmp - z.avail_out);
    } while (z.avail_out == 0); /* zlib's zpipe.c: a full buffer means more may come */
  }
  deflateEnd(&z);
  if (!rc && out->oom) rc = shoal_error_set(err, SHOAL_ENOMEM, "png: out of memory");
  return rc;
}

static void header(buf *o, int w, int h) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put(o, sig, 8);
  uint8_t ihdr[13];
  be32(ihdr, (uint32_t)w), be32(ihdr + 4, (uint32_t)h);
  ihdr[8] = 8, ihdr[9] = 2, ihdr[10] = ihdr[11] = ihdr[12] = 0; /* 8-bit RGB, no interlace */
  chunk(o, "IHDR", ihdr, 13, NULL, 0);
}

int env_png_encode(const uint8_t *rgb, int w, int h, uint8_t **png, size_t *len, shoal_error *err) {
  if (!rgb || !png || !len || w < 1 || h < 1 || w > 1 << 15 || h > 1 << 15)
    return shoal_error_set(err, SHOAL_EINVAL, "env_png_encode: bad arguments (%dx%d image)", w, h);
  buf o = {0}, z = {0};
  uint8_t *line = malloc(5 * ((size_t)w * 3 + 1));
  if (!line) return shoal_error_set(err, SHOAL_ENOMEM, "env_png_encode: out of memory");
  header(&o, w, h);
  int rc = deflate_rect(&z, rgb, (size_t)w * 3, w, h, line, err);
  if (!rc) {
    chunk(&o, "IDAT", z.p, z.n, NULL, 0);
    chunk(&o, "IEND", NULL, 0, NULL, 0);
    if (o.oom) rc = shoal_error_set(err, SHOAL_ENOMEM, "env_png_encode: out of memory");
  }
  free(line), free(z.p);
  if (rc) {
    free(o.p);
    return rc;
  }
  *png = o.p, *len = o.n;
  return 0;
}

/* Writes n bytes to path; on failure removes what was written and names the path. */
static int write_file(const char *who, const char *path, const uint8_t *p, size_t n,
                      shoal_error *err) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return shoal_error_set(err, SHOAL_EIO, "%s: cannot open '%s': %s", who, path, strerror(errno));
  if (fwrite(p, 1, n, f) != n || fflush(f) != 0 || ferror(f)) {
    int e = errno;
    fclose(f);
    remove(path);
    return shoal_error_set(err, SHOAL_EIO, "%s: writing '%s': %s", who, path, strerror(e));
  }
  if (fclose(f) != 0) {
    int e = errno;
    remove(path);
    return shoal_error_set(err, SHOAL_EIO, "%s: closing '%s': %s", who, path, strerror(e));
  }
  return 0;
}

int env_png_write(const char *path, const uint8_t *rgb, int w, int h, shoal_error *err) {
  if (!path || !rgb || w < 1 || h < 1 || w > 1 << 15 || h > 1 << 15)
    return shoal_error_set(err, SHOAL_EINVAL, "env_png_write: bad arguments (%dx%d image)", w, h);
  uint8_t *png;
  size_t len;
  int rc = env_png_encode(rgb, w, h, &png, &len, err);
  if (rc) return rc;
  rc = write_file("env_png_write", path, png, len, err);
  free(png);
  return rc;
}

int env_png_strip(const char *path, const uint8_t *frames, int n, int w, int h, int cols,
                  shoal_error *err) {
  if (!path || !frames || n < 1 || w < 1 || h < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "env_png_strip: bad arguments (%d frames %dx%d)", n,
                           w, h);
  uint8_t *img, *png = NULL;
  int W, H;
  size_t len;
  int rc = env_strip_compose(frames, n, w, h, cols, &img, &W, &H, err);
  if (rc) return rc;
  rc = env_png_encode(img, W, H, &png, &len, err);
  if (!rc) rc = write_file("env_png_strip", path, png, len, err);
  free(png), free(img);
  return rc;
}

int env_strip_compose(const uint8_t *frames, int n, int w, int h, int cols, uint8_t **img, int *W,
                      int *H, shoal_error *err) {
  if (!frames || !img || !W || !H || n < 1 || w < 1 || h < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "env_strip_compose: bad arguments (%d frames %dx%d)",
                           n, w, h);
  if (cols <= 0 || cols > n) cols = n;
  int rows = (n + cols - 1) / cols, gap = 2;
  long SW = (long)cols * w + (long)(cols + 1) * gap, SH = (long)rows * h + (long)(rows + 1) * gap;
  if (SW > 1 << 15 || SH > 1 << 15)
    return shoal_error_set(err, SHOAL_EINVAL, "env_strip_compose: %ldx%ld pixels is too large", SW,
                           SH);
  uint8_t *p = malloc((size_t)SW * (size_t)SH * 3);
  if (!p) return shoal_error_set(err, SHOAL_ENOMEM, "env_strip_compose: out of memory");
  memset(p, 128, (size_t)SW * (size_t)SH * 3); /* the grey border env_png_strip draws */
  for (int k = 0; k < n; k++) {
    size_t ox = (size_t)(gap + (k % cols) * (w + gap)), oy = (size_t)(gap + (k / cols) * (h + gap));
    for (int y = 0; y < h; y++)
      memcpy(p + ((oy + (size_t)y) * (size_t)SW + ox) * 3,
             frames + ((size_t)k * h + (size_t)y) * (size_t)w * 3, (size_t)w * 3);
  }
  *img = p, *W = (int)SW, *H = (int)SH;
  return 0;
}

/* ---- APNG ------------------------------------------------------------------------ */

struct env_apng {
  int w, h;
  uint16_t delay_num, delay_den;
  uint32_t frames, seq;
  size_t actl_at; /* offset of the acTL chunk in out, patched at finish */
  buf out;
  buf z;         /* one frame's deflated data */
  uint8_t *prev; /* (h, w, 3) the previous frame */
  uint8_t *line; /* filter scratch */
};

int env_apng_create(env_apng **out, int w, int h, int delay_num, int delay_den, shoal_error *err) {
  if (!out || w < 1 || h < 1 || w > 1 << 15 || h > 1 << 15 || delay_num < 0 || delay_num > 65535 ||
      delay_den < 1 || delay_den > 65535)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "env_apng_create: bad arguments (%dx%d, delay %d/%d s)", w, h, delay_num,
                           delay_den);
  env_apng *a = calloc(1, sizeof *a);
  if (!a) return shoal_error_set(err, SHOAL_ENOMEM, "env_apng_create: out of memory");
  a->w = w, a->h = h, a->delay_num = (uint16_t)delay_num, a->delay_den = (uint16_t)delay_den;
  a->prev = malloc((size_t)w * (size_t)h * 3);
  a->line = malloc(5 * ((size_t)w * 3 + 1));
  header(&a->out, w, h);
  a->actl_at = a->out.n;
  uint8_t actl[8] = {0}; /* num_frames (patched), num_plays 0 = loop forever */
  chunk(&a->out, "acTL", actl, 8, NULL, 0);
  if (!a->prev || !a->line || a->out.oom) {
    env_apng_destroy(a);
    return shoal_error_set(err, SHOAL_ENOMEM, "env_apng_create: out of memory");
  }
  *out = a;
  return 0;
}

void env_apng_destroy(env_apng *a) {
  if (!a) return;
  free(a->out.p), free(a->z.p), free(a->prev), free(a->line);
  free(a);
}

int env_apng_add(env_apng *a, const uint8_t *rgb, shoal_error *err) {
  if (!a || !rgb) return shoal_error_set(err, SHOAL_EINVAL, "env_apng_add: NULL argument");
  size_t stride = (size_t)a->w * 3;
  int x0 = 0, y0 = 0, x1 = a->w, y1 = a->h; /* the rectangle to code, [x0, x1) x [y0, y1) */
  if (a->frames) {
    x0 = a->w, y0 = a->h, x1 = 0, y1 = 0;
    for (int y = 0; y < a->h; y++) {
      const uint8_t *r = rgb + (size_t)y * stride, *p = a->prev + (size_t)y * stride;
      if (!memcmp(r, p, stride)) continue;
      int l = 0, rr = a->w - 1;
      while (!memcmp(r + l * 3, p + l * 3, 3)) l++;
      while (!memcmp(r + rr * 3, p + rr * 3, 3)) rr--;
      if (y < y0) y0 = y;
      y1 = y + 1;
      if (l < x0) x0 = l;
      if (rr + 1 > x1) x1 = rr + 1;
    }
    if (x1 == 0) x0 = y0 = 0, x1 = y1 = 1; /* unchanged: one pixel, shown for the delay */
  }
  uint8_t fc[26];
  be32(fc, a->seq++);
  be32(fc + 4, (uint32_t)(x1 - x0)), be32(fc + 8, (uint32_t)(y1 - y0));
  be32(fc + 12, (uint32_t)x0), be32(fc + 16, (uint32_t)y0);
  fc[20] = (uint8_t)(a->delay_num >> 8), fc[21] = (uint8_t)a->delay_num;
  fc[22] = (uint8_t)(a->delay_den >> 8), fc[23] = (uint8_t)a->delay_den;
  fc[24] = 0; /* dispose NONE: the next frame draws over this one */
  fc[25] = 0; /* blend SOURCE: the rectangle replaces what is under it */
  chunk(&a->out, "fcTL", fc, 26, NULL, 0);
  a->z.n = 0;
  int rc = deflate_rect(&a->z, rgb + (size_t)y0 * stride + (size_t)x0 * 3, stride, x1 - x0, y1 - y0,
                        a->line, err);
  if (rc) return rc;
  if (a->frames == 0) {
    chunk(&a->out, "IDAT", a->z.p, a->z.n, NULL, 0);
  } else {
    uint8_t s[4];
    be32(s, a->seq++);
    chunk(&a->out, "fdAT", s, 4, a->z.p, a->z.n);
  }
  if (a->out.oom) return shoal_error_set(err, SHOAL_ENOMEM, "env_apng_add: out of memory");
  memcpy(a->prev, rgb, stride * (size_t)a->h);
  a->frames++;
  return 0;
}

uint32_t env_apng_frames(const env_apng *a) { return a ? a->frames : 0; }

int env_apng_set_delay(env_apng *a, int delay_num, int delay_den, shoal_error *err) {
  if (!a || delay_num < 0 || delay_num > 65535 || delay_den < 1 || delay_den > 65535)
    return shoal_error_set(err, SHOAL_EINVAL, "env_apng_set_delay: bad arguments (delay %d/%d s)",
                           delay_num, delay_den);
  a->delay_num = (uint16_t)delay_num, a->delay_den = (uint16_t)delay_den;
  return 0;
}

int env_apng_finish(env_apng *a, uint8_t **png, size_t *len, shoal_error *err) {
  if (!a || !png || !len) return shoal_error_set(err, SHOAL_EINVAL, "env_apng_finish: NULL");
  if (!a->frames) {
    env_apng_destroy(a);
    return shoal_error_set(err, SHOAL_EINVAL, "env_apng_finish: no frames were added");
  }
  chunk(&a->out, "IEND", NULL, 0, NULL, 0);
  if (a->out.oom) {
    env_apng_destroy(a);
    return shoal_error_set(err, SHOAL_ENOMEM, "env_apng_finish: out of memory");
  }
  /* acTL: length(4) type(4) num_frames(4) num_plays(4) crc(4) */
  uint8_t *c = a->out.p + a->actl_at;
  be32(c + 8, a->frames);
  be32(c + 16, (uint32_t)crc32(0, c + 4, 12));
  *png = a->out.p, *len = a->out.n;
  a->out.p = NULL;
  env_apng_destroy(a);
  return 0;
}

int env_strip_columns(int n) {
  if (n <= 6) return n > 0 ? n : 1;
  for (int c = 6; c >= 4; c--)
    if (n % c == 0) return c;
  return 6;
}
