/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/checkpoint.c — safetensors checkpoints (https://github.com/huggingface/safetensors):
 *
 *   u64 N (little-endian) | N bytes of JSON header, space-padded | raw little-endian data
 *   header: {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
 *            "data_offsets": [begin, end]}, ...}, offsets relative to the data section.
 *
 * The format has no magic number; its checks are the header length (bounded by the file
 * and by the reference implementation's 100 MB limit), a header that is a JSON object,
 * and offsets that tile the data section exactly, as the reference reader demands.
 *
 * Loading parses and validates the whole file against the model (names, dtypes, shapes,
 * offsets, finite values) before it writes one float, so a bad file leaves the model as
 * it was. The JSON reader covers what a safetensors header can hold (objects, arrays,
 * strings with escapes, non-negative integers) and rejects the rest.
 *
 * Every dtype of the specification is parsed, so the layout of a whole file is checked;
 * F32 loads as it is, F16 and BF16 widen exactly (torch's half models), I64 fills
 * integer state. nn_model_load_ex renames the file's tensors by a prefix before they
 * are matched, and may skip those that match nothing (a detector's head when only its
 * backbone is wanted).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "nn/nn.h"
#include "nn/safetensors.h"

#define ST_MAX_HEADER (100u << 20) /* the reference implementation's limit */
#define ST_MAX_DIMS 8

/* ---- little-endian helpers ------------------------------------------------------------ */

static uint64_t read_u64le(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void write_u64le(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static float read_f32le(const uint8_t *p) {
  uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

__attribute__((unused)) static void write_f32le(uint8_t *p, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(u >> (8 * i));
}

/* Copies n floats to/from little-endian bytes; one memcpy on a little-endian host. */
static void floats_to_le(uint8_t *dst, const float *src, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  memcpy(dst, src, n * 4);
#else
  for (size_t i = 0; i < n; i++) write_f32le(dst + 4 * i, src[i]);
#endif
}

static void floats_from_le(float *dst, const uint8_t *src, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  memcpy(dst, src, n * 4);
#else
  for (size_t i = 0; i < n; i++) dst[i] = read_f32le(src + 4 * i);
#endif
}

/* ---- a growing byte buffer for the header --------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
      b->oom = true;
      return;
    }
    b->p = q, b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt_u64(sbuf *b, uint64_t v) {
  char tmp[24];
  int k = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
  sb_put(b, tmp, (size_t)k);
}

/* A JSON string literal; names are UTF-8 and pass through except for the escapes JSON
 * requires (quote, backslash, control characters). */
static void sb_json_string(sbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      sb_put(b, e, 2);
    } else if (c < 0x20) {
      char e[8];
      snprintf(e, sizeof e, "\\u%04x", c);
      sb_put(b, e, 6);
    } else {
      sb_put(b, s, 1);
    }
  }
  sb_put(b, "\"", 1);
}

/* ---- saving --------------------------------------------------------------------------- */

static size_t elem_size(const nn__st_tensor *t) { return t->i64 ? 8 : 4; }

int nn__st_save_buffer(const nn__st_tensor *t, int count, const char *const *meta, int n_meta,
                       uint8_t **out, size_t *out_len, shoal_error *err) {
  sbuf h = {0};
  sb_str(&h, "{\"__metadata__\":{");
  for (int i = 0; i < n_meta; i++) {
    if (i) sb_put(&h, ",", 1);
    sb_json_string(&h, meta[2 * i]);
    sb_put(&h, ":", 1);
    sb_json_string(&h, meta[2 * i + 1]);
  }
  sb_put(&h, "}", 1);
  uint64_t off = 0;
  for (int i = 0; i < count; i++) {
    sb_put(&h, ",", 1);
    sb_json_string(&h, t[i].name);
    sb_str(&h, t[i].i64 ? ":{\"dtype\":\"I64\",\"shape\":[" : ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < t[i].ndim; d++) {
      if (d) sb_put(&h, ",", 1);
      sb_fmt_u64(&h, (uint64_t)t[i].shape[d]);
    }
    sb_str(&h, "],\"data_offsets\":[");
    sb_fmt_u64(&h, off);
    sb_put(&h, ",", 1);
    off += (uint64_t)t[i].numel * elem_size(&t[i]);
    sb_fmt_u64(&h, off);
    sb_str(&h, "]}");
  }
  sb_put(&h, "}", 1);
  while (!h.oom && h.len % 8) sb_put(&h, " ", 1); /* data starts 8-aligned */
  if (h.oom) {
    free(h.p);
    return shoal_error_set(err, SHOAL_ENOMEM, "nn: save: cannot allocate the header");
  }
  size_t len = 8 + h.len + (size_t)off;
  uint8_t *buf = malloc(len);
  if (!buf) {
    free(h.p);
    return shoal_error_set(err, SHOAL_ENOMEM, "nn: save: cannot allocate %zu bytes", len);
  }
  write_u64le(buf, h.len);
  memcpy(buf + 8, h.p, h.len);
  uint8_t *data = buf + 8 + h.len;
  free(h.p);
  for (int i = 0; i < count; i++) {
    if (t[i].i64)
      for (size_t j = 0; j < t[i].numel; j++) write_u64le(data + 8 * j, (uint64_t)t[i].i64[j]);
    else
      floats_to_le(data, t[i].f32, t[i].numel);
    data += t[i].numel * elem_size(&t[i]);
  }
  *out = buf;
  *out_len = len;
  return 0;
}

/* The model's tensor table; caller frees *out. */
static int model_table(nn_model *m, nn__st_tensor **out, int *count, const char *what,
                       shoal_error *err) {
  int n = nn_model_tensor_count(m);
  if (n <= 0)
    return shoal_error_set(err, SHOAL_ESTATE, "nn: %s: the model has no tensors (not built?)",
                           what);
  nn__st_tensor *t = calloc((size_t)n, sizeof *t);
  if (!t) return shoal_error_set(err, SHOAL_ENOMEM, "nn: %s: out of memory", what);
  for (int i = 0; i < n; i++) {
    nn_tensor_info info;
    size_t cnt = 0;
    float *base = NULL;
    if (!nn_model_tensor(m, i, &info))
      base = info.trainable ? nn_model_params(m, &cnt) : nn_model_state(m, &cnt);
    if (!base || info.ndim < 0 || info.ndim > 4) {
      free(t);
      return shoal_error_set(err, SHOAL_EINTERNAL, "nn: %s: tensor %d has no data", what, i);
    }
    t[i].name = info.name;
    t[i].ndim = info.ndim;
    memcpy(t[i].shape, info.shape, sizeof t[i].shape);
    t[i].numel = info.numel;
    t[i].f32 = base + info.offset;
    t[i].trainable = info.trainable;
    /* torch keeps integer state (num_batches_tracked) as I64, and a half-precision
     * model's floats as F16 or BF16 */
    t[i].i64_ok = !info.trainable;
    t[i].half_ok = true;
  }
  *out = t;
  *count = n;
  return 0;
}

int nn_model_save_buffer(const nn_model *cm, uint8_t **out, size_t *out_len, shoal_error *err) {
  if (!cm || !out || !out_len)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: save: NULL model or output");
  nn__st_tensor *t;
  int n;
  /* only read: the buffer accessors are not const */
  int rc = model_table((nn_model *)cm, &t, &n, "save", err);
  if (rc) return rc;
  static const char *const meta[] = {"format", "pt", "producer", "shoal"};
  rc = nn__st_save_buffer(t, n, meta, 2, out, out_len, err);
  free(t);
  return rc;
}

/* Atomic (common/file.h): a crash leaves either the old file or the new one, never
 * half. A missing folder is SHOAL_ENOENT; every other failure SHOAL_EIO. */
int nn__st_write_file(const char *path, const uint8_t *buf, size_t len, shoal_error *err) {
  shoal_error e = {0};
  int rc = shoal_file_write_atomic(path, buf, len, SHOAL_FILE_REPLACE, &e);
  if (rc)
    return shoal_error_set(err, rc == SHOAL_ENOENT ? SHOAL_ENOENT : SHOAL_EIO, "nn: save '%s': %s",
                           path, e.msg);
  return 0;
}

int nn_model_save(const nn_model *m, const char *path, shoal_error *err) {
  if (!path) return shoal_error_set(err, SHOAL_EINVAL, "nn: save: NULL path");
  uint8_t *buf = NULL;
  size_t len = 0;
  int rc = nn_model_save_buffer(m, &buf, &len, err);
  if (!rc) rc = nn__st_write_file(path, buf, len, err);
  free(buf);
  return rc;
}

/* ---- the header reader ---------------------------------------------------------------- */

/* The dtypes of the safetensors specification, with their sizes. Every one is parsed,
 * so a file's layout is checked whole; F32, F16, BF16 and I64 are the ones loaded. */
typedef enum st_dtype {
  ST_F32 = 0,
  ST_I64,
  ST_F16,
  ST_BF16,
  ST_F64,
  ST_I32,
  ST_U32,
  ST_I16,
  ST_U16,
  ST_I8,
  ST_U8,
  ST_BOOL,
  ST_U64,
  ST_F8_E4M3,
  ST_F8_E5M2,
  ST_DTYPE_COUNT
} st_dtype;

static const struct {
  const char *name;
  unsigned size;
} st_dtypes[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4},   [ST_I64] = {"I64", 8},         [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_F64] = {"F64", 8},         [ST_I32] = {"I32", 4},
    [ST_U32] = {"U32", 4},   [ST_I16] = {"I16", 2},         [ST_U16] = {"U16", 2},
    [ST_I8] = {"I8", 1},     [ST_U8] = {"U8", 1},           [ST_BOOL] = {"BOOL", 1},
    [ST_U64] = {"U64", 8},   [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

/* binary16: sign, 5 exponent bits (bias 15), 10 mantissa bits. A float has 8 exponent
 * bits (bias 127) and 23 mantissa bits, so every half maps to one float: the mantissa
 * moves up 13 bits and the exponent is rebased by 127 - 15 = 112. */
float nn__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (uint32_t)h >> 10 & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | man << 13; /* infinity, or NaN with its payload */
  } else if (exp) {
    u = sign | (exp + 112) << 23 | man << 13;
  } else if (!man) {
    u = sign; /* +-0 */
  } else {
    /* subnormal: man * 2^-24 = 2^(k-24) * 1.f, k the top set bit of man (0..9); the
     * float is normal, with exponent field k - 24 + 127 */
    int k = 9;
    while (!(man >> k)) k--;
    u = sign | (uint32_t)(k + 103) << 23 | (man << (23 - k) & 0x7fffffu);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float nn__bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Element j of a tensor whose data start at p, as float (F32, F16, BF16 or I64). */
static float st_value(st_dtype dt, const uint8_t *p, uint64_t j) {
  switch (dt) {
    case ST_F16: return nn__f16_to_f32((uint16_t)(p[2 * j] | p[2 * j + 1] << 8));
    case ST_BF16: return nn__bf16_to_f32((uint16_t)(p[2 * j] | p[2 * j + 1] << 8));
    case ST_I64: return (float)(int64_t)read_u64le(p + 8 * j);
    default: return read_f32le(p + 4 * j);
  }
}

typedef struct st_entry {
  char *name; /* decoded, malloc'd */
  st_dtype dtype;
  int ndim;
  uint64_t shape[ST_MAX_DIMS];
  uint64_t begin, end; /* bytes into the data section */
  int model_index;     /* the table entry it fills; -1 before matching, -2 skipped */
} st_entry;

typedef struct st_parser {
  const char *src; /* the file or "buffer", for messages */
  const uint8_t *p, *end, *start;
  shoal_error *err;
  st_entry *e;
  int n, cap;
} st_parser;

static int perr(st_parser *ps, const char *what) {
  return shoal_error_set(ps->err, SHOAL_EFORMAT,
                         "nn: checkpoint '%s': malformed header at byte %zu: %s", ps->src,
                         (size_t)(ps->p - ps->start) + 8, what);
}

static void skip_ws(st_parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static int expect(st_parser *ps, char c) {
  skip_ws(ps);
  if (ps->p >= ps->end || *ps->p != (uint8_t)c) {
    char msg[32];
    snprintf(msg, sizeof msg, "expected '%c'", c);
    return perr(ps, msg);
  }
  ps->p++;
  return 0;
}

/* Peeks the next non-space byte (0 at the end). */
static int peek(st_parser *ps) {
  skip_ws(ps);
  return ps->p < ps->end ? *ps->p : 0;
}

static int hex4(st_parser *ps, unsigned *out) {
  if (ps->end - ps->p < 4) return perr(ps, "short \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int c = *ps->p++, d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return perr(ps, "bad \\u escape");
    v = v << 4 | (unsigned)d;
  }
  *out = v;
  return 0;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when it is not one. */
static int utf8_len(const uint8_t *p, const uint8_t *end) {
  uint8_t c = p[0];
  int n = c < 0x80             ? 1
          : (c & 0xE0) == 0xC0 ? 2
          : (c & 0xF0) == 0xE0 ? 3
          : (c & 0xF8) == 0xF0 ? 4
                               : 0;
  if (n == 0 || end - p < n) return 0;
  for (int i = 1; i < n; i++)
    if ((p[i] & 0xC0) != 0x80) return 0;
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1Fu : n == 3 ? c & 0x0Fu : c & 0x07u;
  for (int i = 1; i < n; i++) cp = cp << 6 | (p[i] & 0x3Fu);
  static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

static void put_utf8(sbuf *b, uint32_t cp) {
  char u[4];
  int n;
  if (cp < 0x80)
    u[0] = (char)cp, n = 1;
  else if (cp < 0x800)
    u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
  else if (cp < 0x10000)
    u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3F)),
    u[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
  else
    u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3F)),
    u[2] = (char)(0x80 | (cp >> 6 & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
  sb_put(b, u, (size_t)n);
}

/* A JSON string into *out (malloc'd, NUL-terminated; a NUL inside is refused, as no
 * tensor name can hold one). */
static int parse_string(st_parser *ps, char **out) {
  int rc = expect(ps, '"');
  if (rc) return rc;
  sbuf b = {0};
  sb_put(&b, "", 0);
  for (;;) {
    if (ps->p >= ps->end) {
      rc = perr(ps, "unterminated string");
      break;
    }
    uint8_t c = *ps->p;
    if (c == '"') {
      ps->p++;
      break;
    }
    if (c < 0x20) {
      rc = perr(ps, "control character in string");
      break;
    }
    if (c == '\\') {
      ps->p++;
      if (ps->p >= ps->end) {
        rc = perr(ps, "unterminated escape");
        break;
      }
      uint8_t e = *ps->p++;
      const char *simple = strchr("\"\\/bfnrt", e);
      if (e && simple) {
        static const char map[] = "\"\\/\b\f\n\r\t";
        sb_put(&b, &map[simple - "\"\\/bfnrt"], 1);
        continue;
      }
      if (e != 'u') {
        rc = perr(ps, "bad escape");
        break;
      }
      unsigned cp = 0, lo = 0;
      if ((rc = hex4(ps, &cp))) break;
      if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
        if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') {
          rc = perr(ps, "lone surrogate");
          break;
        }
        ps->p += 2;
        if ((rc = hex4(ps, &lo))) break;
        if (lo < 0xDC00 || lo > 0xDFFF) {
          rc = perr(ps, "bad surrogate pair");
          break;
        }
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        rc = perr(ps, "lone surrogate");
        break;
      }
      if (cp == 0) {
        rc = perr(ps, "NUL in string");
        break;
      }
      put_utf8(&b, cp);
      continue;
    }
    int n = utf8_len(ps->p, ps->end);
    if (n == 0) {
      rc = perr(ps, "invalid UTF-8");
      break;
    }
    sb_put(&b, (const char *)ps->p, (size_t)n);
    ps->p += n;
  }
  if (!rc && b.oom) rc = shoal_error_set(ps->err, SHOAL_ENOMEM, "nn: checkpoint: out of memory");
  if (rc) {
    free(b.p);
    return rc;
  }
  *out = b.p;
  return 0;
}

/* A non-negative JSON integer (no sign, fraction or exponent: shapes and offsets). */
static int parse_u64(st_parser *ps, uint64_t *out) {
  skip_ws(ps);
  if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
    return perr(ps, "expected a non-negative integer");
  if (*ps->p == '0' && ps->end - ps->p > 1 && ps->p[1] >= '0' && ps->p[1] <= '9')
    return perr(ps, "leading zero");
  uint64_t v = 0;
  while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
    unsigned d = *ps->p++ - '0';
    if (v > (UINT64_MAX - d) / 10) return perr(ps, "integer overflows 64 bits");
    v = v * 10 + d;
  }
  if (ps->p < ps->end && (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E'))
    return perr(ps, "expected an integer");
  *out = v;
  return 0;
}

/* [u64, ...] with at most max items; *n gets the count. */
static int parse_u64_array(st_parser *ps, uint64_t *v, int max, int *n) {
  int rc = expect(ps, '[');
  if (rc) return rc;
  *n = 0;
  if (peek(ps) == ']') {
    ps->p++;
    return 0;
  }
  for (;;) {
    if (*n == max) return perr(ps, "too many dimensions");
    if ((rc = parse_u64(ps, &v[(*n)++]))) return rc;
    int c = peek(ps);
    if (c == ',') {
      ps->p++;
      continue;
    }
    return expect(ps, ']');
  }
}

static int parse_metadata(st_parser *ps) {
  int rc = expect(ps, '{');
  if (rc) return rc;
  if (peek(ps) == '}') {
    ps->p++;
    return 0;
  }
  for (;;) {
    char *k = NULL, *v = NULL;
    rc = parse_string(ps, &k);
    if (!rc) rc = expect(ps, ':');
    if (!rc) {
      if (peek(ps) != '"')
        rc = perr(ps, "__metadata__ values must be strings");
      else
        rc = parse_string(ps, &v);
    }
    free(k);
    free(v);
    if (rc) return rc;
    int c = peek(ps);
    if (c == ',') {
      ps->p++;
      continue;
    }
    return expect(ps, '}');
  }
}

static int parse_entry(st_parser *ps, st_entry *e) {
  int rc = expect(ps, '{');
  if (rc) return rc;
  bool have_dtype = false, have_shape = false, have_off = false;
  for (;;) {
    char *key = NULL;
    if ((rc = parse_string(ps, &key))) return rc;
    if ((rc = expect(ps, ':'))) {
      free(key);
      return rc;
    }
    if (!strcmp(key, "dtype") && !have_dtype) {
      char *dt = NULL;
      if ((rc = parse_string(ps, &dt))) {
        free(key);
        return rc;
      }
      int k = 0;
      while (k < ST_DTYPE_COUNT && strcmp(dt, st_dtypes[k].name)) k++;
      if (k < ST_DTYPE_COUNT)
        e->dtype = (st_dtype)k;
      else
        rc = shoal_error_set(ps->err, SHOAL_EFORMAT,
                             "nn: checkpoint '%s': tensor '%s' has dtype %s, which safetensors "
                             "does not define",
                             ps->src, e->name, dt);
      free(dt);
      have_dtype = true;
    } else if (!strcmp(key, "shape") && !have_shape) {
      rc = parse_u64_array(ps, e->shape, ST_MAX_DIMS, &e->ndim);
      have_shape = true;
    } else if (!strcmp(key, "data_offsets") && !have_off) {
      uint64_t v[2];
      int n = 0;
      rc = parse_u64_array(ps, v, 2, &n);
      if (!rc && n != 2) rc = perr(ps, "data_offsets needs [begin, end]");
      if (!rc) e->begin = v[0], e->end = v[1];
      have_off = true;
    } else {
      rc = shoal_error_set(ps->err, SHOAL_EFORMAT,
                           "nn: checkpoint '%s': tensor '%s': unexpected or repeated key '%s'",
                           ps->src, e->name, key);
    }
    free(key);
    if (rc) return rc;
    int c = peek(ps);
    if (c == ',') {
      ps->p++;
      continue;
    }
    if ((rc = expect(ps, '}'))) return rc;
    break;
  }
  if (!have_dtype || !have_shape || !have_off)
    return shoal_error_set(ps->err, SHOAL_EFORMAT, "nn: checkpoint '%s': tensor '%s' lacks %s",
                           ps->src, e->name,
                           !have_dtype   ? "dtype"
                           : !have_shape ? "shape"
                                         : "data_offsets");
  return 0;
}

static void free_entries(st_parser *ps) {
  for (int i = 0; i < ps->n; i++) free(ps->e[i].name);
  free(ps->e);
  ps->e = NULL;
  ps->n = ps->cap = 0;
}

static int parse_header(st_parser *ps) {
  int rc = expect(ps, '{');
  if (rc) return rc;
  bool have_meta = false;
  if (peek(ps) == '}') {
    ps->p++;
  } else {
    for (;;) {
      char *name = NULL;
      if ((rc = parse_string(ps, &name))) return rc;
      if ((rc = expect(ps, ':'))) {
        free(name);
        return rc;
      }
      if (!strcmp(name, "__metadata__")) {
        free(name);
        if (have_meta) return perr(ps, "repeated __metadata__");
        have_meta = true;
        if ((rc = parse_metadata(ps))) return rc;
      } else {
        for (int i = 0; i < ps->n; i++)
          if (!strcmp(ps->e[i].name, name)) {
            rc = shoal_error_set(ps->err, SHOAL_EFORMAT,
                                 "nn: checkpoint '%s': tensor '%s' appears twice", ps->src, name);
            free(name);
            return rc;
          }
        if (ps->n == ps->cap) {
          int cap = ps->cap ? 2 * ps->cap : 16;
          st_entry *e = realloc(ps->e, (size_t)cap * sizeof *e);
          if (!e) {
            free(name);
            return shoal_error_set(ps->err, SHOAL_ENOMEM, "nn: checkpoint: out of memory");
          }
          ps->e = e, ps->cap = cap;
        }
        st_entry *e = &ps->e[ps->n++];
        memset(e, 0, sizeof *e);
        e->name = name;
        e->model_index = -1;
        if ((rc = parse_entry(ps, e))) return rc;
      }
      int c = peek(ps);
      if (c == ',') {
        ps->p++;
        continue;
      }
      if ((rc = expect(ps, '}'))) return rc;
      break;
    }
  }
  skip_ws(ps);
  if (ps->p != ps->end) return perr(ps, "data after the header object");
  return 0;
}

/* ---- loading ---------------------------------------------------------------------------- */

static void shape_text(char *buf, size_t cap, const uint64_t *s, int n) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < n && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, i ? ", %llu" : "%llu", (unsigned long long)s[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

static int cmp_begin(const void *a, const void *b) {
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* The file's name e as the table names it under opt's mapping, into buf (cap bytes).
 * Returns false when e lies outside from_prefix or the result does not fit. */
static bool map_name(const char *e, const char *from, const char *to, char *buf, size_t cap) {
  size_t nf = strlen(from);
  if (strncmp(e, from, nf)) return false;
  int k = snprintf(buf, cap, "%s%s", to, e + nf);
  return k >= 0 && (size_t)k < cap;
}

/* "'<file name>'" or, when mapped, "'<file name>' (the <owner>'s '<name>')", for messages. */
static void entry_desc(char *buf, size_t cap, const char *fname, const char *mname,
                       const char *owner) {
  if (!mname || !strcmp(fname, mname))
    snprintf(buf, cap, "'%s'", fname);
  else
    snprintf(buf, cap, "'%s' (the %s's '%s')", fname, owner, mname);
}

/* Entry e's data_offsets hold its shape's bytes in its dtype, inside the data section
 * of dlen bytes. */
static int check_bytes(const st_entry *e, uint64_t dlen, const char *src, shoal_error *err) {
  uint64_t size = st_dtypes[e->dtype].size, numel = 1;
  bool overflow = false;
  for (int d = 0; d < e->ndim; d++) {
    if (e->shape[d] && numel > UINT64_MAX / 8 / e->shape[d]) overflow = true;
    numel *= e->shape[d];
  }
  if (overflow || e->end < e->begin || e->end - e->begin != numel * size) {
    char fs[96];
    shape_text(fs, sizeof fs, e->shape, e->ndim);
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "nn: checkpoint '%s': tensor '%s': data_offsets [%llu, %llu] do not "
                           "hold %llu values of %llu bytes (shape %s, %s)",
                           src, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                           (unsigned long long)numel, (unsigned long long)size, fs,
                           st_dtypes[e->dtype].name);
  }
  if (e->end > dlen)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "nn: checkpoint '%s': tensor '%s' ends at byte %llu of the data, which "
                           "has %llu bytes (truncated file)",
                           src, e->name, (unsigned long long)e->end, (unsigned long long)dlen);
  return 0;
}

int nn__st_load_buffer(const nn__st_tensor *tab, int count, const char *owner, const uint8_t *buf,
                       size_t len, const char *src, const nn_load_options *opt, shoal_error *err) {
  if (!buf) return shoal_error_set(err, SHOAL_EINVAL, "nn: load: NULL data");
  if (len < 8)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "nn: checkpoint '%s': %zu bytes, shorter than the 8-byte header length "
                           "(truncated or not a safetensors file)",
                           src, len);
  uint64_t hlen = read_u64le(buf);
  if (hlen > ST_MAX_HEADER || hlen > len - 8)
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "nn: checkpoint '%s': header length %llu does not fit the %zu-byte "
                           "file (truncated or not a safetensors file)",
                           src, (unsigned long long)hlen, len);
  if (hlen < 2 || buf[8] != '{')
    return shoal_error_set(err, SHOAL_EFORMAT,
                           "nn: checkpoint '%s': the header is not a JSON object (not a "
                           "safetensors file)",
                           src);
  st_parser ps = {.src = src, .p = buf + 8, .end = buf + 8 + hlen, .start = buf + 8, .err = err};
  const uint8_t *data = buf + 8 + hlen;
  uint64_t dlen = len - 8 - hlen;
  st_entry **order = NULL;
  char *mapped = NULL, *desc = NULL;
  const char *from = opt && opt->from_prefix ? opt->from_prefix : "";
  const char *to = opt && opt->to_prefix ? opt->to_prefix : "";
  bool skip = opt && opt->skip_unmatched;
  int rc = parse_header(&ps);
  if (rc) goto done;

  /* names: room for the longest file name with to_prefix in place of from_prefix */
  size_t cap = strlen(to) + 1, dcap;
  for (int i = 0; i < ps.n; i++)
    if (strlen(ps.e[i].name) + strlen(to) + 1 > cap) cap = strlen(ps.e[i].name) + strlen(to) + 1;
  dcap = 2 * cap + 64;
  mapped = malloc(cap);
  desc = malloc(dcap);
  if (!mapped || !desc) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "nn: checkpoint: out of memory");
    goto done;
  }
  /* a prefix that no name carries is a wrong prefix, not an empty load */
  if (*from) {
    int with = 0;
    for (int i = 0; i < ps.n; i++) with += !strncmp(ps.e[i].name, from, strlen(from));
    if (!with) {
      rc = shoal_error_set(err, SHOAL_ENOENT,
                           "nn: checkpoint '%s': no tensor name starts with the prefix '%s'%s%s%s",
                           src, from, ps.n ? " (the first is '" : "", ps.n ? ps.e[0].name : "",
                           ps.n ? "')" : "");
      goto done;
    }
  }

  /* each entry: a tensor of the table, the same shape, a dtype that fits, bytes in range */
  char fs[96], ms[96];
  for (int i = 0; i < ps.n; i++) {
    st_entry *e = &ps.e[i];
    if (!map_name(e->name, from, to, mapped, cap)) {
      if (skip) {
        e->model_index = -2;
        if ((rc = check_bytes(e, dlen, src, err))) goto done;
        continue;
      }
      rc = shoal_error_set(err, SHOAL_ESHAPE,
                           "nn: checkpoint '%s': tensor '%s' does not start with the prefix '%s' "
                           "(skip_unmatched skips such tensors)",
                           src, e->name, from);
      goto done;
    }
    int found = -1;
    for (int k = 0; k < count && found < 0; k++)
      if (!strcmp(tab[k].name, mapped)) found = k;
    entry_desc(desc, dcap, e->name, mapped, owner);
    if (found < 0) {
      if (skip) {
        e->model_index = -2;
        if ((rc = check_bytes(e, dlen, src, err))) goto done;
        continue;
      }
      rc = shoal_error_set(err, SHOAL_ESHAPE, "nn: checkpoint '%s': tensor %s is not in the %s",
                           src, desc, owner);
      goto done;
    }
    e->model_index = found;
    const nn__st_tensor *t = &tab[found];
    uint64_t ms64[4];
    for (int d = 0; d < t->ndim; d++) ms64[d] = (uint64_t)t->shape[d];
    bool same = e->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = e->shape[d] == ms64[d];
    if (!same) {
      shape_text(fs, sizeof fs, e->shape, e->ndim);
      shape_text(ms, sizeof ms, ms64, t->ndim);
      rc = shoal_error_set(err, SHOAL_ESHAPE,
                           "nn: checkpoint '%s': tensor %s has shape %s in the file, %s in the %s",
                           src, desc, fs, ms, owner);
      goto done;
    }
    /* torch writes integer state (num_batches_tracked) as I64, and half-precision
     * models' floats as F16 or BF16 */
    bool fits = t->i64 ? e->dtype == ST_I64
                       : e->dtype == ST_F32 || (e->dtype == ST_I64 && t->i64_ok) ||
                             ((e->dtype == ST_F16 || e->dtype == ST_BF16) && t->half_ok);
    if (!fits) {
      rc = shoal_error_set(err, SHOAL_EFORMAT, "nn: checkpoint '%s': %s %s is %s; expected %s", src,
                           t->trainable ? "parameter" : "tensor", desc, st_dtypes[e->dtype].name,
                           t->i64       ? "I64"
                           : t->half_ok ? (t->i64_ok ? "F32, F16, BF16 or I64" : "F32, F16 or BF16")
                           : t->i64_ok  ? "F32 or I64"
                                        : "F32");
      goto done;
    }
    if ((rc = check_bytes(e, dlen, src, err))) goto done;
  }
  for (int k = 0; k < count; k++) {
    bool present = false;
    for (int i = 0; i < ps.n && !present; i++) present = ps.e[i].model_index == k;
    if (!present) {
      /* the name the file would need, under the mapping */
      size_t nt = strlen(to);
      if (!*from && !*to)
        rc = shoal_error_set(err, SHOAL_ESHAPE,
                             "nn: checkpoint '%s': the %s's tensor '%s' is missing from the file",
                             src, owner, tab[k].name);
      else if (!strncmp(tab[k].name, to, nt))
        rc = shoal_error_set(err, SHOAL_ESHAPE,
                             "nn: checkpoint '%s': the %s's tensor '%s' is missing from the file "
                             "(as '%s%s')",
                             src, owner, tab[k].name, from, tab[k].name + nt);
      else
        rc = shoal_error_set(err, SHOAL_ESHAPE,
                             "nn: checkpoint '%s': the %s's tensor '%s' is missing from the file "
                             "(it lies outside the prefix '%s' that '%s' maps to)",
                             src, owner, tab[k].name, to, from);
      goto done;
    }
  }

  /* the tensors tile the data section: no overlap, no gap, nothing after */
  order = malloc((size_t)ps.n * sizeof *order + 1); /* + 1: never malloc(0) */
  if (!order) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "nn: checkpoint: out of memory");
    goto done;
  }
  for (int i = 0; i < ps.n; i++) order[i] = &ps.e[i];
  qsort(order, (size_t)ps.n, sizeof *order, cmp_begin);
  for (int i = 1; i < ps.n; i++)
    if (order[i]->begin < order[i - 1]->end) {
      rc = shoal_error_set(err, SHOAL_EFORMAT,
                           "nn: checkpoint '%s': tensor '%s' [%llu, %llu) overlaps '%s'", src,
                           order[i]->name, (unsigned long long)order[i]->begin,
                           (unsigned long long)order[i]->end, order[i - 1]->name);
      goto done;
    }
  uint64_t at = 0;
  for (int i = 0; i < ps.n; i++) {
    if (order[i]->begin != at) {
      rc = shoal_error_set(err, SHOAL_EFORMAT,
                           "nn: checkpoint '%s': a gap of %llu bytes before tensor '%s'", src,
                           (unsigned long long)(order[i]->begin - at), order[i]->name);
      goto done;
    }
    at = order[i]->end;
  }
  if (at != dlen) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "nn: checkpoint '%s': %llu bytes after the last tensor's data", src,
                         (unsigned long long)(dlen - at));
    goto done;
  }

  /* values: finite floats (after widening a half); counts >= 0; integers that a float
   * holds exactly */
  for (int i = 0; i < ps.n; i++) {
    st_entry *e = &ps.e[i];
    if (e->model_index < 0) continue;
    const nn__st_tensor *t = &tab[e->model_index];
    const uint8_t *p = data + e->begin;
    for (uint64_t j = 0; j < t->numel; j++) {
      if (e->dtype != ST_I64) {
        float v = st_value(e->dtype, p, j);
        if (!isfinite(v)) {
          entry_desc(desc, dcap, e->name, t->name, owner);
          rc = shoal_error_set(err, SHOAL_ENAN, "nn: checkpoint '%s': tensor %s[%llu] is %g", src,
                               desc, (unsigned long long)j, (double)v);
          goto done;
        }
        continue;
      }
      int64_t v = (int64_t)read_u64le(p + 8 * j);
      if (t->i64 ? v < 0 : v > (1 << 24) || v < -(1 << 24)) {
        entry_desc(desc, dcap, e->name, t->name, owner);
        rc = shoal_error_set(err, SHOAL_ERANGE, "nn: checkpoint '%s': tensor %s[%llu] = %lld %s",
                             src, desc, (unsigned long long)j, (long long)v,
                             t->i64 ? "; a count must be >= 0" : "is not exact as float");
        goto done;
      }
    }
  }

  /* all checked: now fill the destinations */
  for (int i = 0; i < ps.n; i++) {
    st_entry *e = &ps.e[i];
    if (e->model_index < 0) continue;
    const nn__st_tensor *t = &tab[e->model_index];
    const uint8_t *p = data + e->begin;
    if (t->i64)
      for (size_t j = 0; j < t->numel; j++) t->i64[j] = (int64_t)read_u64le(p + 8 * j);
    else if (e->dtype == ST_F32)
      floats_from_le(t->f32, p, t->numel);
    else
      for (size_t j = 0; j < t->numel; j++) t->f32[j] = st_value(e->dtype, p, j);
  }
done:
  free(order);
  free(mapped);
  free(desc);
  free_entries(&ps);
  return rc;
}

static int model_load(nn_model *m, const uint8_t *buf, size_t len, const char *src,
                      const nn_load_options *opt, shoal_error *err) {
  if (!m || !buf) return shoal_error_set(err, SHOAL_EINVAL, "nn: load: NULL model or data");
  nn__st_tensor *t;
  int n;
  int rc = model_table(m, &t, &n, "load", err);
  if (rc) return rc;
  rc = nn__st_load_buffer(t, n, "model", buf, len, src, opt, err);
  free(t);
  if (!rc) rc = nn_model_params_changed(m, err); /* a CUDA model's device copy */
  return rc;
}

int nn_model_load_buffer_ex(nn_model *m, const uint8_t *buf, size_t len, const nn_load_options *opt,
                            shoal_error *err) {
  return model_load(m, buf, len, "buffer", opt, err);
}

int nn_model_load_buffer(nn_model *m, const uint8_t *buf, size_t len, shoal_error *err) {
  return model_load(m, buf, len, "buffer", NULL, err);
}

int nn_model_load_ex(nn_model *m, const char *path, const nn_load_options *opt, shoal_error *err) {
  if (!path) return shoal_error_set(err, SHOAL_EINVAL, "nn: load: NULL path");
  if (!m) return shoal_error_set(err, SHOAL_EINVAL, "nn: load: NULL model");
  uint8_t *buf = NULL;
  size_t len = 0;
  int rc = nn__st_read_file(path, &buf, &len, err);
  if (!rc) rc = model_load(m, buf, len, path, opt, err);
  free(buf);
  return rc;
}

int nn_model_load(nn_model *m, const char *path, shoal_error *err) {
  return nn_model_load_ex(m, path, NULL, err);
}

int nn__st_read_file(const char *path, uint8_t **out, size_t *out_len, shoal_error *err) {
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return shoal_error_set(err, errno == ENOENT ? SHOAL_ENOENT : SHOAL_EIO, "nn: load '%s': %s",
                           path, strerror(errno));
  struct stat st;
  uint8_t *buf = NULL;
  size_t len = 0, got = 0;
  int rc = 0;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    rc = shoal_error_set(err, SHOAL_EIO, "nn: load '%s': not a regular file", path);
    goto done;
  }
  len = (size_t)st.st_size;
  buf = malloc(len ? len : 1);
  if (!buf) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "nn: load '%s': cannot allocate %zu bytes", path, len);
    goto done;
  }
  while (got < len) {
    ssize_t k = read(fd, buf + got, len - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      rc = shoal_error_set(err, SHOAL_EIO, "nn: load '%s': read failed at byte %zu: %s", path, got,
                           k < 0 ? strerror(errno) : "unexpected end of file");
      goto done;
    }
    got += (size_t)k;
  }
done:
  close(fd);
  if (rc) {
    free(buf);
    return rc;
  }
  *out = buf;
  *out_len = len;
  return 0;
}
