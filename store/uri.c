/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/uri.c — the one reader of store URIs (store_uri_parse: which backend, and for
 * the file backend its folder and options) and their redaction for messages. store_open
 * opens what store_uri_parse reads; programs ask it, or store_local_dir, rather than
 * looking at a URI themselves.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store/internal.h"

const char *store__uri_or_default(const char *uri) {
  if (uri && uri[0]) return uri;
  const char *env = getenv("SHOAL_STORE_URI");
  return env && env[0] ? env : "file:runs";
}

const char *store__uri_authority(const char *uri, const char **at, const char **colon) {
  const char *s = uri ? strstr(uri, "://") : NULL;
  if (at) *at = NULL;
  if (colon) *colon = NULL;
  if (!s) return NULL;
  const char *p = s + 3, *end = p + strcspn(p, "/?#"), *a = NULL;
  /* Passwords may hold '@' only percent-encoded, but be generous and take the last. */
  for (const char *q = p; q < end; q++)
    if (*q == '@') a = q;
  if (at) *at = a;
  if (colon && a) *colon = memchr(p, ':', (size_t)(a - p));
  return p;
}

/* ---- parsing ----------------------------------------------------------------- */

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* file:///abs, file://localhost/abs, file://rel, file:rel or a plain path, with
 * %XX escapes and ?sync=always|never. Messages show uri as given: a folder holds no
 * credentials. */
static int parse_file(const char *uri, store_uri_info *u, shoal_error *err) {
  const char *p = uri;
  if (strncmp(p, "file://", 7) == 0) {
    p += 7;
    if (strncmp(p, "localhost/", 10) == 0) p += 9;
  } else if (strncmp(p, "file:", 5) == 0) {
    p += 5;
  }
  u->has_scheme = p != uri;
  size_t plen = strcspn(p, "?#");
  if (plen == 0) return shoal_error_set(err, SHOAL_EINVAL, "store: '%s' names no folder", uri);
  if (plen >= 3000)
    return shoal_error_set(err, SHOAL_EINVAL, "store: folder name in '%.100s...' is too long", uri);
  size_t o = 0;
  for (size_t i = 0; i < plen; i++) {
    if (p[i] == '%') {
      int h = i + 2 < plen ? hexval(p[i + 1]) : -1, l = h >= 0 ? hexval(p[i + 2]) : -1;
      if (h < 0 || l < 0 || (h == 0 && l == 0))
        return shoal_error_set(err, SHOAL_EINVAL, "store: bad %%-escape in '%s'", uri);
      u->dir[o++] = (char)(h * 16 + l);
      i += 2;
    } else {
      u->dir[o++] = p[i];
    }
  }
  while (o > 1 && u->dir[o - 1] == '/') o--;
  u->dir[o] = 0;

  u->sync_metrics = 1;
  const char *q = p[plen] == '?' ? p + plen + 1 : NULL;
  while (q && *q) {
    size_t n = strcspn(q, "&");
    if (n == 11 && strncmp(q, "sync=always", 11) == 0) {
      u->sync_metrics = 1;
    } else if (n == 10 && strncmp(q, "sync=never", 10) == 0) {
      u->sync_metrics = 0;
    } else {
      return shoal_error_set(err, SHOAL_EINVAL,
                             "store: unknown option '%.*s' in '%s' (known: sync=always|never)",
                             (int)n, q, uri);
    }
    q += n;
    if (*q == '&') q++;
  }
  return 0;
}

int store_uri_parse(const char *uri, store_uri_info *out, shoal_error *err) {
  if (!out) return shoal_error_set(err, SHOAL_EINVAL, "store_uri_parse: out is NULL");
  uri = store__uri_or_default(uri);
  store_uri_info *u = calloc(1, sizeof *u); /* 4 KB: off the stack of deep callers */
  if (!u) return shoal_error_set(err, SHOAL_ENOMEM, "store: out of memory");
  int rc = 0;
  if (strncmp(uri, "mongodb://", 10) == 0 || strncmp(uri, "mongodb+srv://", 14) == 0) {
    /* The rest is libmongoc's to read (store_open reports what it refuses). */
    u->backend = "mongodb";
    u->has_scheme = 1;
    const char *at, *colon;
    store__uri_authority(uri, &at, &colon);
    u->password_masked = colon && at - colon - 1 == 3 && strncmp(colon + 1, "***", 3) == 0;
  } else if (strncmp(uri, "file:", 5) == 0 || !strstr(uri, "://")) {
    /* A plain path has no scheme; "C:"-like prefixes do not occur here. */
    u->backend = "file";
    rc = parse_file(uri, u, err);
  } else {
    char red[512];
    store_uri_redact(red, sizeof red, uri);
    rc = shoal_error_set(err, SHOAL_EINVAL,
                         "store: unknown URI scheme in '%s' (expected file:// or mongodb://)", red);
  }
  if (!rc) *out = *u;
  free(u);
  return rc;
}

/* ---- redaction --------------------------------------------------------------- */

static int secret_key(const char *k, size_t n) {
  static const char *words[] = {"password", "secret", "token", "pwd", "key"};
  for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
    size_t wl = strlen(words[w]);
    for (size_t i = 0; i + wl <= n; i++)
      if (strncasecmp(k + i, words[w], wl) == 0) return 1;
  }
  return 0;
}

size_t store_uri_redact(char *out, size_t cap, const char *uri) {
  /* Built in a local buffer sized for any URI, then copied with snprintf's
   * truncation rules. */
  if (!uri) uri = "";
  size_t len = strlen(uri);
  char *buf = malloc(len + 16 * 4 + 64);
  if (!buf) {
    if (cap) snprintf(out, cap, "%s", "(uri)");
    return 5;
  }
  size_t o = 0;
  const char *at, *colon;
  const char *p = store__uri_authority(uri, &at, &colon);
  if (p) {
    memcpy(buf, uri, (size_t)(p - uri));
    o = (size_t)(p - uri);
    if (at) {
      const char *user_end = colon ? colon : at;
      memcpy(buf + o, p, (size_t)(user_end - p));
      o += (size_t)(user_end - p);
      if (colon) {
        memcpy(buf + o, ":***", 4);
        o += 4;
      }
      p = at;
    }
  } else {
    p = uri;
  }
  /* Copy the rest, masking values of secret-looking options after '?'. */
  const char *q = strchr(p, '?');
  size_t head = q ? (size_t)(q - p) : strlen(p);
  memcpy(buf + o, p, head);
  o += head;
  if (q) {
    p = q;
    while (*p) {
      buf[o++] = *p++; /* '?' or '&' */
      size_t kl = strcspn(p, "=&");
      memcpy(buf + o, p, kl);
      o += kl;
      int secret = secret_key(p, kl);
      p += kl;
      if (*p == '=') {
        buf[o++] = *p++;
        size_t vl = strcspn(p, "&");
        if (secret) {
          memcpy(buf + o, "***", 3);
          o += 3;
        } else {
          memcpy(buf + o, p, vl);
          o += vl;
        }
        p += vl;
      }
    }
  }
  buf[o] = 0;
  size_t n = o;
  if (cap) snprintf(out, cap, "%s", buf);
  free(buf);
  return n;
}
