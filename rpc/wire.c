/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc/wire.c — shoal's own reader of SampleBatch and the validator that turns it into a
 * checked, dense batch. protobuf-c's unpack copies every bytes field and needs its own
 * allocations; for batches of tens of KiB that copy costs 30-50% of the ingest rate
 * (measured with gRPC 1.51 and protobuf-c over loopback: -50% at 64 KiB, -30% at
 * 1 MiB), so the hot path reads the protobuf wire format in place. Field numbers are those of
 * proto/shoal.proto; tests/test_proto.c checks this reader against protoc-c's encoder.
 */
#define _GNU_SOURCE /* strdup, clock_gettime, pthread_cond_timedwait */
#include <lz4.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "rpc/internal.h"

const char *rpc_dtype_name(int dtype) {
  static const char *const names[] = {"UNSPECIFIED", "U8",  "I8",   "I16", "I32", "I64", "F16",
                                      "F32",         "F64", "BOOL", "U16", "U32", "U64"};
  return dtype >= 0 && dtype < (int)(sizeof names / sizeof *names) ? names[dtype] : "unknown";
}

size_t rpc_dtype_size(int dtype) {
  switch (dtype) {
    case RPC_U8:
    case RPC_I8:
    case RPC_BOOL: return 1;
    case RPC_I16:
    case RPC_U16:
    case RPC_F16: return 2;
    case RPC_I32:
    case RPC_U32:
    case RPC_F32: return 4;
    case RPC_I64:
    case RPC_U64:
    case RPC_F64: return 8;
    default: return 0;
  }
}

size_t rpc_column_item_bytes(const rpc_column_spec *c) {
  size_t b = rpc_dtype_size(c->dtype);
  for (int d = 0; d < c->ndim; d++) b *= (size_t)c->shape[d];
  return b;
}

int rpc_spec_check(const rpc_spec *spec, shoal_error *err) {
  if (!spec || !spec->run_id || !spec->run_id[0])
    return shoal_error_set(err, SHOAL_EINVAL, "rpc spec: run_id is empty");
  if (spec->max_items < 1) return shoal_error_set(err, SHOAL_EINVAL, "rpc spec: max_items is 0");
  if (spec->ncols < 1 || spec->ncols > RPC_MAX_COLUMNS)
    return shoal_error_set(err, SHOAL_EINVAL, "rpc spec: %d columns (1..%d)", spec->ncols,
                           RPC_MAX_COLUMNS);
  for (int i = 0; i < spec->ncols; i++) {
    const rpc_column_spec *c = &spec->cols[i];
    if (!c->name || !c->name[0])
      return shoal_error_set(err, SHOAL_EINVAL, "rpc spec: column %d has no name", i);
    for (int j = 0; j < i; j++)
      if (!strcmp(spec->cols[j].name, c->name))
        return shoal_error_set(err, SHOAL_EINVAL, "rpc spec: column '%s' twice", c->name);
    if (!rpc_dtype_size(c->dtype))
      return shoal_error_set(err, SHOAL_EINVAL, "rpc spec: column '%s': unknown dtype %d", c->name,
                             c->dtype);
    if (c->ndim < 0 || c->ndim > RPC_MAX_DIMS)
      return shoal_error_set(err, SHOAL_EINVAL, "rpc spec: column '%s': ndim %d", c->name, c->ndim);
    for (int d = 0; d < c->ndim; d++)
      if (c->shape[d] < 1 || c->shape[d] > (1 << 24))
        return shoal_error_set(err, SHOAL_EINVAL, "rpc spec: column '%s': shape[%d] = %lld",
                               c->name, d, (long long)c->shape[d]);
    if (c->frame_stack && c->ndim < 2)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "rpc spec: column '%s': a frame stack needs ndim >= 2 (S, H, ...)",
                             c->name);
  }
  return 0;
}

size_t rpc_column_frames_per_item(const rpc_column_spec *c, bool planes) {
  if (!planes) return c->ndim >= 1 ? (size_t)c->shape[0] : 1;
  size_t p = 1;
  for (int d = 0; d + 2 < c->ndim; d++) p *= (size_t)c->shape[d];
  return p;
}

size_t rpc_column_frames_of(const rpc_column *c) {
  rpc_column_spec cs = {.ndim = c->ndim};
  memcpy(cs.shape, c->shape, sizeof cs.shape);
  return rpc_column_frames_per_item(&cs, c->frame_planes);
}

uint32_t rpc_frames_dedup(const uint8_t *in, size_t count, size_t frame_bytes, size_t depth,
                          uint8_t *frames, uint32_t *index) {
  uint32_t nf = 0;
  for (size_t p = 0; p < count; p++) {
    const uint8_t *f = in + p * frame_bytes;
    /* where the same frame most likely was: one slot down the previous stack (the stack
     * moved on by one), the slot before (a reset fills a stack with one frame), the
     * same slot of the previous stack (nothing moved) */
    size_t cand[3] = {p + 1 >= depth ? p + 1 - depth : SIZE_MAX, p >= 1 ? p - 1 : SIZE_MAX,
                      p >= depth ? p - depth : SIZE_MAX};
    uint32_t hit = UINT32_MAX;
    for (int k = 0; k < 3 && hit == UINT32_MAX; k++)
      if (cand[k] != SIZE_MAX && !memcmp(f, in + cand[k] * frame_bytes, frame_bytes))
        hit = index[cand[k]];
    if (hit == UINT32_MAX) {
      memcpy(frames + (size_t)nf * frame_bytes, f, frame_bytes);
      hit = nf++;
    }
    index[p] = hit;
  }
  return nf;
}

size_t rpc__max_message_bytes(const rpc_spec *spec) {
  size_t total = 1024; /* ids, run id, seq, n */
  for (int i = 0; i < spec->ncols; i++) {
    const rpc_column_spec *c = &spec->cols[i];
    size_t bytes = (size_t)spec->max_items * rpc_column_item_bytes(c);
    /* Incompressible data grows a little under LZ4 or zstd; take the larger bound. */
    size_t lz = (size_t)LZ4_compressBound(bytes > (size_t)LZ4_MAX_INPUT_SIZE ? 0 : (int)bytes);
    size_t zs = ZSTD_compressBound(bytes);
    if (lz > bytes) bytes = lz;
    if (zs > bytes) bytes = zs;
    if (c->frame_stack) bytes += (size_t)spec->max_items * rpc_column_frames_per_item(c, true) * 4;
    total += bytes + 256 + strlen(c->name);
  }
  return total;
}

int rpc__spec_copy(rpc_spec *dst, const rpc_spec *src) {
  *dst = *src;
  dst->run_id = strdup(src->run_id);
  int ok = dst->run_id != NULL;
  for (int i = 0; i < src->ncols; i++) {
    dst->cols[i].name = strdup(src->cols[i].name);
    ok = ok && dst->cols[i].name;
  }
  if (!ok) {
    rpc__spec_free(dst);
    return SHOAL_ENOMEM;
  }
  return 0;
}

void rpc__spec_free(rpc_spec *s) {
  free((char *)s->run_id);
  s->run_id = NULL;
  for (int i = 0; i < s->ncols; i++) {
    free((char *)s->cols[i].name);
    s->cols[i].name = NULL;
  }
}

int rpc__read_file(const char *path, char **out, shoal_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return shoal_error_set(err, SHOAL_EIO, "rpc: cannot open '%s'", path);
  int rc = 0;
  char *buf = NULL;
  long n = 0;
  if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
    rc = shoal_error_set(err, SHOAL_EIO, "rpc: cannot size '%s'", path);
    goto done;
  }
  buf = malloc((size_t)n + 1);
  if (!buf) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "rpc: %ld bytes for '%s'", n, path);
    goto done;
  }
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    rc = shoal_error_set(err, SHOAL_EIO, "rpc: cannot read '%s'", path);
    free(buf);
    buf = NULL;
    goto done;
  }
  buf[n] = 0;
  *out = buf;
done:
  fclose(f);
  return rc;
}

/* ---- protobuf wire format ---------------------------------------------- */

typedef struct rd {
  const uint8_t *p, *end;
} rd;

static int rd_varint(rd *r, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (r->p >= r->end) return -1;
    uint8_t b = *r->p++;
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1; /* more than 10 bytes */
}

static int rd_len(rd *r, const uint8_t **p, size_t *n) {
  uint64_t len;
  if (rd_varint(r, &len) || len > (uint64_t)(r->end - r->p)) return -1;
  *p = r->p;
  *n = (size_t)len;
  r->p += len;
  return 0;
}

/* Skips a field of an unknown number (forward compatibility). Groups are refused. */
static int rd_skip(rd *r, int wt) {
  uint64_t v;
  const uint8_t *p;
  size_t n;
  switch (wt) {
    case 0: return rd_varint(r, &v);
    case 1:
      if (r->end - r->p < 8) return -1;
      r->p += 8;
      return 0;
    case 2: return rd_len(r, &p, &n);
    case 5:
      if (r->end - r->p < 4) return -1;
      r->p += 4;
      return 0;
    default: return -1;
  }
}

/* A repeated int64 arrives packed (proto3's default) or one value per field; both are
 * accepted, as protobuf requires of readers. */
static int rd_shape(rd *r, int wt, rpc_wire_column *c) {
  uint64_t v;
  if (wt == 0) {
    if (rd_varint(r, &v) || c->ndim >= RPC_MAX_DIMS) return -1;
    c->shape[c->ndim++] = (int64_t)v;
    return 0;
  }
  if (wt != 2) return -1;
  const uint8_t *p;
  size_t n;
  if (rd_len(r, &p, &n)) return -1;
  rd sub = {p, p + n};
  while (sub.p < sub.end) {
    if (rd_varint(&sub, &v) || c->ndim >= RPC_MAX_DIMS) return -1;
    c->shape[c->ndim++] = (int64_t)v;
  }
  return 0;
}

static int rd_column(const uint8_t *p, size_t n, rpc_wire_column *c) {
  memset(c, 0, sizeof *c);
  rd r = {p, p + n};
  while (r.p < r.end) {
    uint64_t key, v;
    if (rd_varint(&r, &key)) return -1;
    int field = (int)(key >> 3), wt = (int)(key & 7);
    const uint8_t *q;
    size_t m;
    switch (field) {
      case 1:
        if (wt != 2 || rd_len(&r, &q, &m)) return -1;
        c->name = (const char *)q;
        c->name_len = m;
        break;
      case 2:
      case 5:
      case 6:
      case 7:
      case 8:
        if (wt != 0 || rd_varint(&r, &v)) return -1;
        if (field == 2) c->dtype = (int)v;
        if (field == 5) c->codec = (int)v;
        if (field == 6) c->raw_size = v;
        if (field == 7) c->layout = (int)v;
        if (field == 8) c->frames = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
        break;
      case 3:
        if (rd_shape(&r, wt, c)) return -1;
        break;
      case 4:
        if (wt != 2 || rd_len(&r, &q, &m)) return -1;
        c->data = q;
        c->data_len = m;
        break;
      case 9:
        if (wt != 2 || rd_len(&r, &q, &m)) return -1;
        c->index = q;
        c->index_len = m;
        break;
      default:
        if (rd_skip(&r, wt)) return -1;
    }
  }
  return 0;
}

int rpc_wire_read(const uint8_t *buf, size_t len, rpc_wire_batch *out, shoal_error *err) {
  memset(out, 0, offsetof(rpc_wire_batch, cols));
  rd r = {buf, buf + len};
  while (r.p < r.end) {
    uint64_t key, v;
    if (rd_varint(&r, &key)) goto bad;
    int field = (int)(key >> 3), wt = (int)(key & 7);
    const uint8_t *q;
    size_t m;
    switch (field) {
      case 1:
      case 3:
      case 4:
      case 5:
      case 7:
        if (wt != 0 || rd_varint(&r, &v)) goto bad;
        if (field == 1) out->actor_id = v;
        if (field == 3) out->policy_version = (int64_t)v;
        if (field == 4) out->seq = v;
        if (field == 5) out->n = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
        if (field == 7) out->incarnation = v;
        break;
      case 2:
        if (wt != 2 || rd_len(&r, &q, &m)) goto bad;
        out->run_id = (const char *)q;
        out->run_id_len = m;
        break;
      case 6:
        if (wt != 2 || rd_len(&r, &q, &m)) goto bad;
        if (out->ncols >= RPC_MAX_COLUMNS)
          return shoal_error_set(err, SHOAL_EFORMAT, "SampleBatch: more than %d columns",
                                 RPC_MAX_COLUMNS);
        if (rd_column(q, m, &out->cols[out->ncols]))
          return shoal_error_set(err, SHOAL_EFORMAT, "SampleBatch: column %d is malformed",
                                 out->ncols);
        out->ncols++;
        break;
      default:
        if (rd_skip(&r, wt)) goto bad;
    }
  }
  return 0;
bad:
  return shoal_error_set(err, SHOAL_EFORMAT, "SampleBatch: malformed at byte %zu of %zu",
                         (size_t)(r.p - buf), len);
}

/* ---- validation -------------------------------------------------------- */

void rpc__scratch_free(rpc__scratch *s) {
  for (int i = 0; i < RPC_MAX_COLUMNS; i++) {
    free(s->dense[i]);
    free(s->raw[i]);
    free(s->index[i]);
  }
  memset(s, 0, sizeof *s);
}

static int grow(uint8_t **buf, size_t *cap, size_t need) {
  if (*cap >= need) return 0;
  uint8_t *p = realloc(*buf, need);
  if (!p) return SHOAL_ENOMEM;
  *buf = p;
  *cap = need;
  return 0;
}

/* Index of the first non-finite element, or -1. Works on the bit patterns: an exponent
 * of all ones is inf or NaN in every IEEE format. Unaligned data is read via memcpy. */
static long first_nonfinite(const uint8_t *p, size_t count, int dtype) {
  if (dtype == RPC_F32) {
    /* Blocks of 64 without an early exit, so the test vectorises (the early-exit loop
     * was a seventh of a CartPole learner's ingest thread); the exact index only once
     * a block has one. */
    size_t i = 0;
    for (; i + 64 <= count; i += 64) {
      uint32_t bad = 0;
      for (size_t k = 0; k < 64; k++) {
        uint32_t u;
        memcpy(&u, p + 4 * (i + k), 4);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
      }
      if (bad) break;
    }
    for (; i < count; i++) {
      uint32_t u;
      memcpy(&u, p + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u) return (long)i;
    }
  } else if (dtype == RPC_F64) {
    for (size_t i = 0; i < count; i++) {
      uint64_t u;
      memcpy(&u, p + 8 * i, 8);
      if ((u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull) return (long)i;
    }
  } else if (dtype == RPC_F16) {
    for (size_t i = 0; i < count; i++) {
      uint16_t u;
      memcpy(&u, p + 2 * i, 2);
      if ((u & 0x7c00u) == 0x7c00u) return (long)i;
    }
  }
  return -1;
}

static int name_eq(const rpc_wire_column *w, const char *name) {
  size_t n = strlen(name);
  return w->name_len == n && !memcmp(w->name, name, n);
}

static int decompress(const rpc_wire_column *w, const char *name, uint8_t *dst, size_t raw,
                      shoal_error *err) {
  if (w->raw_size != raw)
    return shoal_error_set(err, SHOAL_ESHAPE, "column '%s': raw_size %llu, expected %zu bytes",
                           name, (unsigned long long)w->raw_size, raw);
  if (w->codec == RPC_CODEC_LZ4) {
    if (w->data_len > (size_t)INT32_MAX || raw > (size_t)INT32_MAX)
      return shoal_error_set(err, SHOAL_EFORMAT, "column '%s': too large for LZ4", name);
    int got = LZ4_decompress_safe((const char *)w->data, (char *)dst, (int)w->data_len, (int)raw);
    if (got < 0 || (size_t)got != raw)
      return shoal_error_set(err, SHOAL_EFORMAT, "column '%s': bad LZ4 data", name);
  } else {
    size_t got = ZSTD_decompress(dst, raw, w->data, w->data_len);
    if (ZSTD_isError(got) || got != raw)
      return shoal_error_set(err, SHOAL_EFORMAT, "column '%s': bad zstd data (%s)", name,
                             ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
  }
  return 0;
}

static void shape_str(char *buf, size_t cap, const int64_t *shape, int ndim) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, cap - o, "(");
  for (int d = 0; d < ndim && o < cap; d++)
    o += (size_t)snprintf(buf + o, cap - o, d ? ", %lld" : "%lld", (long long)shape[d]);
  if (o < cap) snprintf(buf + o, cap - o, ")");
}

int rpc__validate(const rpc_spec *spec, const rpc_wire_batch *w, rpc__scratch *s, rpc_batch *out,
                  shoal_error *err) {
  size_t rl = strlen(spec->run_id);
  if (w->run_id_len != rl || (rl && memcmp(w->run_id, spec->run_id, rl)))
    return shoal_error_set(err, SHOAL_EPERM, "batch for run '%.*s', this learner runs '%s'",
                           (int)(w->run_id_len > 100 ? 100 : w->run_id_len),
                           w->run_id ? w->run_id : "", spec->run_id);
  if (w->n < 1 || w->n > spec->max_items)
    return shoal_error_set(err, SHOAL_ERANGE, "batch of %u samples (1..%u)", w->n, spec->max_items);
  if (w->seq < 1) return shoal_error_set(err, SHOAL_EINVAL, "batch without a seq (seq >= 1)");
  if (w->ncols != spec->ncols)
    return shoal_error_set(err, SHOAL_ESHAPE, "batch has %d columns, the spec %d", w->ncols,
                           spec->ncols);
  out->actor_id = w->actor_id;
  out->incarnation = w->incarnation;
  out->seq = w->seq;
  out->policy_version = w->policy_version;
  out->run_id = spec->run_id;
  out->n = w->n;
  out->ncols = spec->ncols;
  uint32_t seen = 0;
  for (int k = 0; k < w->ncols; k++) {
    const rpc_wire_column *wc = &w->cols[k];
    int i = 0;
    while (i < spec->ncols && !name_eq(wc, spec->cols[i].name)) i++;
    if (i == spec->ncols)
      return shoal_error_set(err, SHOAL_ESHAPE, "column '%.*s' is not in the spec",
                             (int)(wc->name_len > 64 ? 64 : wc->name_len),
                             wc->name ? wc->name : "");
    if (seen & (1u << i))
      return shoal_error_set(err, SHOAL_ESHAPE, "column '%s' twice", spec->cols[i].name);
    seen |= 1u << i;
    const rpc_column_spec *cs = &spec->cols[i];
    if (wc->dtype != cs->dtype)
      return shoal_error_set(err, SHOAL_ESHAPE, "column '%s': dtype %s (%d), expected %s", cs->name,
                             rpc_dtype_name(wc->dtype), wc->dtype, rpc_dtype_name(cs->dtype));
    int same = wc->ndim == cs->ndim;
    for (int d = 0; same && d < cs->ndim; d++) same = wc->shape[d] == cs->shape[d];
    if (!same) {
      char got[96], want[96];
      shape_str(got, sizeof got, wc->shape, wc->ndim);
      shape_str(want, sizeof want, cs->shape, cs->ndim);
      return shoal_error_set(err, SHOAL_ESHAPE, "column '%s': item shape %s, expected %s", cs->name,
                             got, want);
    }
    if (wc->codec < RPC_CODEC_NONE || wc->codec > RPC_CODEC_ZSTD)
      return shoal_error_set(err, SHOAL_EINVAL, "column '%s': unknown codec %d", cs->name,
                             wc->codec);
    size_t item = rpc_column_item_bytes(cs), esize = rpc_dtype_size(cs->dtype);
    rpc_column *oc = &out->cols[i];
    memset(oc, 0, sizeof *oc);
    oc->name = cs->name;
    oc->dtype = cs->dtype;
    oc->ndim = cs->ndim;
    memcpy(oc->shape, cs->shape, sizeof oc->shape);
    oc->bytes = (size_t)w->n * item;

    /* The bytes as sent, decompressed when a codec is set. */
    size_t raw;
    if (wc->layout == 0) {
      raw = oc->bytes;
    } else if (wc->layout == 1 || wc->layout == 2) {
      if (!cs->frame_stack)
        return shoal_error_set(err, SHOAL_EINVAL, "column '%s' may not be frame-stacked", cs->name);
      if (wc->layout == 2 && cs->ndim < 3)
        return shoal_error_set(err, SHOAL_EINVAL, "column '%s': frame planes need ndim >= 3",
                               cs->name);
      size_t S = rpc_column_frames_per_item(cs, wc->layout == 2);
      if (wc->frames < 1 || wc->frames > (size_t)w->n * S)
        return shoal_error_set(err, SHOAL_ERANGE, "column '%s': %u frames for %u stacks of %zu",
                               cs->name, wc->frames, w->n, S);
      raw = (size_t)wc->frames * (item / S);
      if (wc->index_len != (size_t)w->n * S * 4)
        return shoal_error_set(err, SHOAL_ESHAPE,
                               "column '%s': frame_index has %zu bytes, expected %zu", cs->name,
                               wc->index_len, (size_t)w->n * S * 4);
    } else {
      return shoal_error_set(err, SHOAL_EINVAL, "column '%s': unknown layout %d", cs->name,
                             wc->layout);
    }
    const uint8_t *src = wc->data;
    if (wc->codec != RPC_CODEC_NONE) {
      if (grow(&s->raw[i], &s->raw_cap[i], raw))
        return shoal_error_set(err, SHOAL_ENOMEM, "column '%s': %zu bytes", cs->name, raw);
      int rc = decompress(wc, cs->name, s->raw[i], raw, err);
      if (rc) return rc;
      src = s->raw[i];
    } else if (wc->data_len != raw) {
      return shoal_error_set(
          err, SHOAL_ESHAPE, "column '%s': %zu bytes for %u samples of %zu bytes (%s)", cs->name,
          wc->data_len, w->n, item, wc->layout ? "frame stack" : "expected n x item size");
    }
    if (!cs->allow_nonfinite) {
      long bad = first_nonfinite(src, raw / esize, cs->dtype);
      if (bad >= 0)
        return shoal_error_set(err, SHOAL_ENAN, "column '%s': element %ld is not finite", cs->name,
                               bad);
    }
    if (cs->dtype == RPC_BOOL) {
      for (size_t e = 0; e < raw; e++)
        if (src[e] > 1)
          return shoal_error_set(err, SHOAL_ERANGE, "column '%s': bool element %zu is %u", cs->name,
                                 e, src[e]);
    }
    if (wc->layout == 0) {
      /* Callers index the column as typed arrays: bytes inside a protobuf message sit at
       * any offset, so a misaligned column is copied once into aligned scratch. */
      if ((uintptr_t)src % esize) {
        if (grow(&s->dense[i], &s->dense_cap[i], oc->bytes))
          return shoal_error_set(err, SHOAL_ENOMEM, "column '%s': %zu bytes", cs->name, oc->bytes);
        memcpy(s->dense[i], src, oc->bytes);
        src = s->dense[i];
      }
      oc->data = src;
      continue;
    }
    /* Rebuild the stacks: item j's slot t is frame index[j*S + t]. */
    size_t S = rpc_column_frames_per_item(cs, wc->layout == 2), fb = item / S;
    size_t nidx = (size_t)w->n * S;
    if (grow(&s->dense[i], &s->dense_cap[i], oc->bytes))
      return shoal_error_set(err, SHOAL_ENOMEM, "column '%s': %zu bytes", cs->name, oc->bytes);
    if (grow(&s->index[i], &s->index_cap[i], nidx * 4))
      return shoal_error_set(err, SHOAL_ENOMEM, "column '%s': %zu indices", cs->name, nidx);
    uint8_t *dst = s->dense[i];
    uint32_t *ix = (uint32_t *)(void *)s->index[i]; /* malloc'd: aligned for u32 */
    memcpy(ix, wc->index, nidx * 4);
    for (size_t e = 0; e < nidx; e++) {
      uint32_t f = ix[e];
      if (f >= wc->frames)
        return shoal_error_set(err, SHOAL_ERANGE, "column '%s': frame_index[%zu] = %u of %u",
                               cs->name, e, f, wc->frames);
      memcpy(dst + e * fb, src + (size_t)f * fb, fb);
    }
    oc->data = dst;
    oc->frames = wc->frames;
    oc->frame_index = ix;
    oc->frame_planes = wc->layout == 2;
    oc->frame_data = src;
  }
  return 0;
}
