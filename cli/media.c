/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli/media.c — media in the store (episode recordings):
 *   shoal media ls RUN [--store URI]
 *   shoal media get RUN NAME [-o FILE|-] [--store URI]
 * and the recorder behind `shoal eval --render`, which keeps, for each recorded
 * episode, a strip of at most strip_max evenly spaced frames and an animated PNG of
 * the whole episode (every step of its first ANIM_FRAMES_MAX, then every 2nd step for
 * the next ANIM_FRAMES_MAX frames, every 4th after..., each frame shown for the steps
 * it stands for), then stores both in the run's media.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "envs/envs.h"

/* ---- the recorder ------------------------------------------------------------------ */

enum { ANIM_FRAMES_MAX = 1000, STEPS_PER_SECOND = 50 };

struct eval_rec {
  int w, h, strip_max;
  size_t fbytes;
  /* (2·strip_max, h, w, 3): twice the frames wanted, halved when full, so that at the
   * end strip_max evenly spaced ones can be picked whatever the episode's length. */
  uint8_t *strip;
  int nstrip, every;
  /* The animation keeps step anim_next, then one every anim_every steps; the stride is
   * set by the episode as it runs (its length is unknown until it ends), so a short
   * episode keeps every step whatever the env's step limit. */
  int anim_every, anim_next;
  env_apng *anim;
};

int eval_rec_create(eval_rec **out, int w, int h, int strip_max, shoal_error *err) {
  eval_rec *r = calloc(1, sizeof *r);
  if (!r) return shoal_error_set(err, SHOAL_ENOMEM, "render: out of memory");
  r->w = w, r->h = h, r->strip_max = strip_max, r->every = 1;
  r->fbytes = (size_t)w * (size_t)h * 3;
  r->anim_every = 1, r->anim_next = 0;
  int rc = 0;
  if (!(r->strip = malloc((size_t)(2 * strip_max) * r->fbytes)))
    rc = shoal_error_set(err, SHOAL_ENOMEM, "render: out of memory");
  /* Real time at 50 steps a second (CartPole's tau = 0.02 s); a frame that stands for
   * several steps is shown as long. */
  if (!rc) rc = env_apng_create(&r->anim, w, h, 1, STEPS_PER_SECOND, err);
  if (rc) {
    eval_rec_destroy(r);
    return rc;
  }
  *out = r;
  return 0;
}

void eval_rec_destroy(eval_rec *r) {
  if (!r) return;
  free(r->strip);
  env_apng_destroy(r->anim);
  free(r);
}

int eval_rec_wants(const eval_rec *r, int t) { return t % r->every == 0 || t >= r->anim_next; }

int eval_rec_add(eval_rec *r, int t, const uint8_t *rgb, shoal_error *err) {
  if (t >= r->anim_next) {
    int rc = env_apng_add(r->anim, rgb, err);
    if (rc) return rc;
    /* Every ANIM_FRAMES_MAX frames kept, the stride doubles: a long episode's animation
     * grows with the logarithm of its length, not with it. */
    if (env_apng_frames(r->anim) % ANIM_FRAMES_MAX == 0 && r->anim_every < 65535 / 2) {
      r->anim_every *= 2;
      rc = env_apng_set_delay(r->anim, r->anim_every, STEPS_PER_SECOND, err);
      if (rc) return rc;
    }
    r->anim_next = t + r->anim_every;
  }
  if (t % r->every == 0) {
    /* Full: drop every other frame and double the spacing, so memory stays bounded
     * whatever the episode's length. */
    if (r->nstrip == 2 * r->strip_max) {
      for (int j = 0; j < r->strip_max; j++)
        memmove(r->strip + (size_t)j * r->fbytes, r->strip + (size_t)(2 * j) * r->fbytes,
                r->fbytes);
      r->nstrip = r->strip_max;
      r->every *= 2;
    }
    if (t % r->every == 0) memcpy(r->strip + (size_t)r->nstrip++ * r->fbytes, rgb, r->fbytes);
  }
  return 0;
}

/* The strip: strip_max frames picked evenly from those kept (all of a shorter episode),
 * the first and the last among them; compacted in place (picks only move down). */
static int strip_pick(eval_rec *r) {
  int n = r->nstrip, k = n < r->strip_max ? n : r->strip_max;
  for (int i = 0; k > 1 && i < k; i++) {
    int j = (int)(((long)i * (n - 1) + (k - 1) / 2) / (k - 1));
    if (j != i)
      memmove(r->strip + (size_t)i * r->fbytes, r->strip + (size_t)j * r->fbytes, r->fbytes);
  }
  if (k < n) r->every = (r->every * (n - 1) + (k - 1) / 2) / (k - 1);
  r->nstrip = k;
  return k;
}

int eval_rec_strip_frames(const eval_rec *r, int *every) {
  int n = r->nstrip, k = n < r->strip_max ? n : r->strip_max;
  if (every) *every = k > 1 && k < n ? (r->every * (n - 1) + (k - 1) / 2) / (k - 1) : r->every;
  return k;
}

static int put_one(store *st, const store_media_meta *m, const void *b, size_t n, int *stored,
                   shoal_error *err) {
  shoal_error e2 = {0};
  int rc = store_media_put(st, m, b, n, &e2);
  *stored = rc == 0;
  if (rc == SHOAL_EEXIST) {
    /* A snapshot played with the same seed gives the same episode: it is stored. */
    printf("eval %s media: %s is already stored\n", m->run, m->name);
    return 0;
  }
  if (rc) shoal_error_set(err, rc, "%s", e2.msg);
  return rc;
}

int eval_rec_store(eval_rec *r, store *st, const store_media_meta *base, uint64_t seed,
                   const char *strip_path, shoal_error *err) {
  uint8_t *img = NULL, *png = NULL, *apng = NULL;
  size_t npng = 0, napng = 0;
  int W, H, stored;
  strip_pick(r);
  const int cols = env_strip_columns(r->nstrip);
  int rc = env_strip_compose(r->strip, r->nstrip, r->w, r->h, cols, &img, &W, &H, err);
  if (!rc) rc = env_png_encode(img, W, H, &png, &npng, err);
  if (!rc && strip_path) rc = env_png_strip(strip_path, r->strip, r->nstrip, r->w, r->h, cols, err);
  int frames = (int)env_apng_frames(r->anim);
  if (!rc) {
    rc = env_apng_finish(r->anim, &apng, &napng, err);
    r->anim = NULL;
  }
  store_media_meta m = *base;
  if (!rc) {
    snprintf(m.name, sizeof m.name, "v%" PRId64 "-s%" PRIu64 "-ep%" PRId64 "-strip.png",
             base->version, seed, base->episode);
    snprintf(m.content_type, sizeof m.content_type, "image/png");
    m.frames = r->nstrip;
    rc = put_one(st, &m, png, npng, &stored, err);
    if (!rc && stored)
      printf("eval %s media: stored %s (%d frames, %zu bytes)\n", m.run, m.name, r->nstrip, npng);
  }
  if (!rc) {
    snprintf(m.name, sizeof m.name, "v%" PRId64 "-s%" PRIu64 "-ep%" PRId64 ".apng", base->version,
             seed, base->episode);
    snprintf(m.content_type, sizeof m.content_type, "image/apng");
    m.frames = frames;
    rc = put_one(st, &m, apng, napng, &stored, err);
    if (!rc && stored)
      printf("eval %s media: stored %s (%d frames of %" PRId64 " steps, %zu bytes)\n", m.run,
             m.name, frames, m.length, napng);
  }
  free(img), free(png), free(apng);
  return rc;
}

/* ---- shoal media ------------------------------------------------------------------- */

static int die(const char *what, const shoal_error *err) {
  fprintf(stderr, "shoal media: %s: %s\n", what,
          err->msg[0] ? err->msg : shoal_strerror(err->code));
  return 1;
}

static int media_ls(store *st, const char *run) {
  shoal_error err = {0};
  store_media_meta *m;
  size_t n;
  if (store_media_list(st, run, &m, &n, &err)) return die("ls", &err);
  if (!n)
    printf("run %s has no media\n", run);
  else
    printf("%-36s %-10s %8s %7s %9s %7s %6s %10s\n", "NAME", "TYPE", "VERSION", "EPISODE", "RETURN",
           "LENGTH", "FRAMES", "BYTES");
  for (size_t i = 0; i < n; i++) {
    char ret[32] = "-";
    if (isfinite(m[i].ret)) snprintf(ret, sizeof ret, "%.2f", m[i].ret);
    printf("%-36s %-10s %8" PRId64 " %7" PRId64 " %9s %7" PRId64 " %6" PRId64 " %10" PRIu64 "\n",
           m[i].name, m[i].content_type, m[i].version, m[i].episode, ret, m[i].length, m[i].frames,
           m[i].size);
  }
  free(m);
  return 0;
}

static int media_get(store *st, const char *run, const char *name, const char *out) {
  shoal_error err = {0};
  void *b;
  size_t n;
  if (store_media_get(st, run, name, NULL, &b, &n, &err)) return die("get", &err);
  if (!out) out = name;
  int rc = 0;
  if (!strcmp(out, "-")) {
    if (fwrite(b, 1, n, stdout) != n || fflush(stdout)) rc = 1;
  } else {
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(b, 1, n, f) != n) rc = 1;
    if (f && fclose(f)) rc = 1;
    if (rc) {
      fprintf(stderr, "shoal media: get: writing '%s': %s\n", out, strerror(errno));
      remove(out);
    } else {
      fprintf(stderr, "shoal media: %s of run %s: %zu bytes written to %s\n", name, run, n, out);
    }
  }
  free(b);
  return rc;
}

int cmd_media(int argc, char **argv) {
  const char *uri = NULL, *out = NULL, *pos[3] = {0};
  int np = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--store") && i + 1 < argc)
      uri = argv[++i];
    else if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--out")) && i + 1 < argc)
      out = argv[++i];
    else if (argv[i][0] != '-' && np < 3)
      pos[np++] = argv[i];
    else
      np = 99;
  }
  int ls = np == 2 && !strcmp(pos[0], "ls"), get = np == 3 && !strcmp(pos[0], "get");
  if (!ls && !get) {
    cli_bad_usage("media");
    return 2;
  }
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) return die("store", &err);
  int rc = ls ? media_ls(st, pos[1]) : media_get(st, pos[1], pos[2], out);
  store_close(st);
  return rc;
}
