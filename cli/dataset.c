/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli/dataset.c — datasets in the store (store.h's data hub):
 *   shoal dataset put NAME [FIELD=]FILE... [--store URI] [--chunk-records N] [--source TEXT]
 *   shoal dataset ls [--store URI]
 *   shoal dataset info NAME [--store URI] [--verify]
 *   shoal dataset rm NAME [--store URI]
 *
 * put reads IDX files (the MNIST format; gzip or plain; unsigned byte, signed byte,
 * int16, int32, float32 or float64 elements), one field per file, all with the same
 * first dimension N, and stores N records in chunks. It streams: memory holds one
 * chunk of records whatever the files' size. A field is named by FIELD= or, without
 * it, "images" / "labels" when the file name says so, else the name up to its first
 * '.' or '-'.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "cli/commands.h"
#include "store/store.h"

static int die(const char *what, const shoal_error *err) {
  fprintf(stderr, "shoal dataset: %s: %s\n", what,
          err->msg[0] ? err->msg : shoal_strerror(err->code));
  return 1;
}

/* ---- streaming IDX ----------------------------------------------------------------- */

typedef struct idx_in {
  const char *path;
  gzFile f;
  int dtype;
  size_t esize;
  uint64_t n; /* first dimension */
  int ndim;   /* of one record */
  int64_t dim[3];
  size_t rec_bytes;
} idx_in;

static int idx_type(int t, size_t *es) {
  switch (t) {
    case 0x08: *es = 1; return STORE_DTYPE_U8;
    case 0x09: *es = 1; return STORE_DTYPE_I8;
    case 0x0B: *es = 2; return STORE_DTYPE_I16;
    case 0x0C: *es = 4; return STORE_DTYPE_I32;
    case 0x0D: *es = 4; return STORE_DTYPE_F32;
    case 0x0E: *es = 8; return STORE_DTYPE_F64;
    default: return 0;
  }
}

static int read_full(gzFile f, void *b, size_t n) {
  size_t got = 0;
  while (got < n) {
    int r = gzread(f, (char *)b + got, (unsigned)(n - got > (1u << 30) ? (1u << 30) : n - got));
    if (r <= 0) break;
    got += (size_t)r;
  }
  return got == n ? 0 : -1;
}

static int idx_open(idx_in *in, const char *path, shoal_error *err) {
  memset(in, 0, sizeof *in);
  in->path = path;
  FILE *probe = fopen(path, "rb");
  if (!probe) return shoal_error_set(err, SHOAL_ENOENT, "%s: cannot open", path);
  fclose(probe);
  if (!(in->f = gzopen(path, "rb")))
    return shoal_error_set(err, SHOAL_EIO, "%s: cannot open", path);
  gzbuffer(in->f, 1 << 17);
  uint8_t h[4];
  if (read_full(in->f, h, 4) || h[0] || h[1])
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: not an IDX file (bad magic)", path);
  if (!(in->dtype = idx_type(h[2], &in->esize)))
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: IDX element type 0x%02x is not supported", path,
                           h[2]);
  if (h[3] < 1 || h[3] > 4)
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: IDX ndim %d (1..4 supported)", path, h[3]);
  uint8_t d[16];
  if (read_full(in->f, d, 4u * h[3]))
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: truncated IDX header", path);
  in->rec_bytes = in->esize;
  for (int i = 0; i < h[3]; i++) {
    uint64_t v = (uint64_t)d[4 * i] << 24 | (uint64_t)d[4 * i + 1] << 16 |
                 (uint64_t)d[4 * i + 2] << 8 | d[4 * i + 3];
    if (v == 0) return shoal_error_set(err, SHOAL_EFORMAT, "%s: IDX dimension %d is 0", path, i);
    if (i == 0) {
      in->n = v;
    } else {
      in->dim[in->ndim++] = (int64_t)v;
      in->rec_bytes *= v;
    }
  }
  return 0;
}

/* n records of in into out (n * rec_bytes), big-endian elements made little-endian. */
static int idx_read(idx_in *in, uint8_t *out, size_t n, shoal_error *err) {
  size_t bytes = n * in->rec_bytes;
  if (read_full(in->f, out, bytes)) {
    int ze = 0;
    const char *m = gzerror(in->f, &ze);
    return shoal_error_set(err, SHOAL_EFORMAT, "%s: truncated or corrupt (%s)", in->path,
                           ze < 0 && m ? m : "fewer records than its header says");
  }
  if (in->esize > 1)
    for (size_t i = 0; i < bytes; i += in->esize)
      for (size_t a = 0, b = in->esize - 1; a < b; a++, b--) {
        uint8_t t = out[i + a];
        out[i + a] = out[i + b], out[i + b] = t;
      }
  return 0;
}

static void field_name_of(const char *path, char *out, size_t cap) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (strstr(base, "images"))
    snprintf(out, cap, "images");
  else if (strstr(base, "labels"))
    snprintf(out, cap, "labels");
  else
    snprintf(out, cap, "%.*s", (int)strcspn(base, ".-"), base);
}

static int cmd_put(int argc, char **argv, const char *uri) {
  const char *name = NULL, *source = NULL;
  const char *files[STORE_DATASET_FIELDS_MAX];
  int nfiles = 0;
  long chunk_records = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--chunk-records") && i + 1 < argc) {
      chunk_records = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--source") && i + 1 < argc) {
      source = argv[++i];
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "shoal dataset put: unknown option '%s'\n", argv[i]);
      return 2;
    } else if (!name) {
      name = argv[i];
    } else if (nfiles < STORE_DATASET_FIELDS_MAX) {
      files[nfiles++] = argv[i];
    } else {
      fprintf(stderr, "shoal dataset put: at most %d files (one per field)\n",
              STORE_DATASET_FIELDS_MAX);
      return 2;
    }
  }
  if (!name || !nfiles || chunk_records < 0) {
    cli_bad_usage("dataset");
    return 2;
  }
  shoal_error err = {0};
  idx_in in[STORE_DATASET_FIELDS_MAX];
  store_dataset_field f[STORE_DATASET_FIELDS_MAX];
  memset(f, 0, sizeof f);
  int opened = 0, rc = 0;
  size_t rb = 0;
  char src[256];
  int so = snprintf(src, sizeof src, "%s", source ? source : "idx:");
  for (int i = 0; i < nfiles && !rc; i++) {
    const char *eq = strchr(files[i], '='), *path = files[i];
    if (eq && eq - files[i] < STORE_FIELD_NAME_MAX &&
        !memchr(files[i], '/', (size_t)(eq - files[i]))) {
      snprintf(f[i].name, sizeof f[i].name, "%.*s", (int)(eq - files[i]), files[i]);
      path = eq + 1;
    } else {
      field_name_of(path, f[i].name, sizeof f[i].name);
    }
    if ((rc = idx_open(&in[i], path, &err))) {
      opened = i + 1;
      break;
    }
    opened = i + 1;
    if (in[i].n != in[0].n) {
      rc = shoal_error_set(&err, SHOAL_ESHAPE, "%s has %" PRIu64 " records, %s has %" PRIu64, path,
                           in[i].n, in[0].path, in[0].n);
      break;
    }
    f[i].dtype = in[i].dtype;
    f[i].ndim = in[i].ndim;
    memcpy(f[i].shape, in[i].dim, sizeof in[i].dim);
    rb += in[i].rec_bytes;
    if (!source && so < (int)sizeof src)
      so += snprintf(src + so, sizeof src - (size_t)so, " %s=%s", f[i].name, path);
  }
  if (rc) {
    for (int i = 0; i < opened; i++)
      if (in[i].f) gzclose(in[i].f);
    return die("put", &err);
  }
  if (!chunk_records) {
    /* About 1 MiB a chunk: small enough to bound memory tightly and to shuffle over
     * many chunks, large enough that reading is a few big sequential reads. */
    chunk_records = (long)((1 << 20) / rb);
    if (chunk_records < 1) chunk_records = 1;
  }
  store *st = NULL;
  store_dataset_writer *w = NULL;
  uint8_t *rec = NULL, *col[STORE_DATASET_FIELDS_MAX] = {0};
  uint64_t N = in[0].n, done = 0;
  double t0 = (double)clock();
  if ((rc = store_open(&st, uri, &err))) goto out;
  if ((rc = store_dataset_create(st, name, f, nfiles, (uint32_t)chunk_records, src, &w, &err)))
    goto out;
  rec = malloc((size_t)chunk_records * rb);
  for (int i = 0; i < nfiles; i++) col[i] = malloc((size_t)chunk_records * in[i].rec_bytes);
  for (int i = 0; i < nfiles; i++)
    if (!col[i]) rec = (free(rec), NULL);
  if (!rec) {
    rc = shoal_error_set(&err, SHOAL_ENOMEM, "out of memory");
    goto out;
  }
  while (done < N && !rc) {
    size_t n = N - done < (uint64_t)chunk_records ? (size_t)(N - done) : (size_t)chunk_records;
    for (int i = 0; i < nfiles && !rc; i++) rc = idx_read(&in[i], col[i], n, &err);
    if (rc) break;
    size_t off = 0;
    for (int i = 0; i < nfiles; i++) {
      for (size_t r = 0; r < n; r++)
        memcpy(rec + r * rb + off, col[i] + r * in[i].rec_bytes, in[i].rec_bytes);
      off += in[i].rec_bytes;
    }
    rc = store_dataset_write(w, rec, n, &err);
    done += n;
  }
  for (int i = 0; i < nfiles && !rc; i++) {
    uint8_t extra;
    if (gzread(in[i].f, &extra, 1) > 0)
      rc = shoal_error_set(&err, SHOAL_EFORMAT, "%s: trailing bytes after %" PRIu64 " records",
                           in[i].path, N);
  }
  store_dataset_info info = {0};
  if (!rc) {
    rc = store_dataset_commit(w, &info, &err);
    w = NULL;
  }
  if (!rc) {
    printf("dataset %s: %" PRIu64
           " records of %zu bytes in %u chunks of %u, stored in %s "
           "(%.1f s CPU)\n",
           name, info.records, info.record_bytes, info.chunks, info.chunk_records, store_uri(st),
           ((double)clock() - t0) / CLOCKS_PER_SEC);
    store_dataset_info_clear(&info);
  }
out:
  store_dataset_abort(w);
  free(rec);
  for (int i = 0; i < nfiles; i++) free(col[i]);
  for (int i = 0; i < opened; i++) gzclose(in[i].f);
  store_close(st);
  return rc ? die("put", &err) : 0;
}

static void fields_text(const store_dataset_info *d, char *out, size_t cap) {
  size_t o = 0;
  out[0] = 0;
  for (int i = 0; i < d->nfields && o < cap; i++) {
    const store_dataset_field *f = &d->fields[i];
    o += (size_t)snprintf(out + o, cap - o, "%s%s %s(", i ? ", " : "", f->name,
                          store_dtype_name(f->dtype));
    for (int k = 0; k < f->ndim && o < cap; k++)
      o += (size_t)snprintf(out + o, cap - o, "%s%" PRId64, k ? "," : "", f->shape[k]);
    if (o < cap) o += (size_t)snprintf(out + o, cap - o, ")");
  }
}

static int cmd_ls(const char *uri) {
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) return die("ls", &err);
  store_dataset_info *d;
  size_t n;
  if (store_dataset_list(st, &d, &n, &err)) {
    store_close(st);
    return die("ls", &err);
  }
  if (n) printf("%-24s %10s %8s %10s  %s\n", "NAME", "RECORDS", "CHUNKS", "MB", "FIELDS");
  for (size_t i = 0; i < n; i++) {
    char fl[512];
    fields_text(&d[i], fl, sizeof fl);
    printf("%-24s %10" PRIu64 " %8u %10.1f  %s\n", d[i].name, d[i].records, d[i].chunks,
           (double)d[i].records * (double)d[i].record_bytes / 1e6, fl);
  }
  if (!n) printf("no datasets in %s\n", store_uri(st));
  store_dataset_infos_free(d, n);
  store_close(st);
  return 0;
}

static int cmd_info(const char *name, const char *uri, int verify) {
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) return die("info", &err);
  store_dataset_info d;
  int rc = store_dataset_info_get(st, name, &d, &err);
  if (rc) {
    store_close(st);
    return die("info", &err);
  }
  char fl[512], when[64];
  fields_text(&d, fl, sizeof fl);
  time_t t = (time_t)d.created_time;
  struct tm tm;
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&t, &tm));
  printf("dataset %s in %s\n  records %" PRIu64
         " of %zu bytes (%.1f MB)\n"
         "  chunks  %u of %u records (%.2f MB each), one CRC-32 each\n  fields  %s\n"
         "  created %s\n  source  %s\n",
         d.name, store_uri(st), d.records, d.record_bytes,
         (double)d.records * (double)d.record_bytes / 1e6, d.chunks, d.chunk_records,
         (double)d.chunk_records * (double)d.record_bytes / 1e6, fl, when, d.source);
  if (verify) {
    size_t cap = (size_t)d.chunk_records * d.record_bytes;
    void *buf = malloc(cap);
    uint32_t bad = 0;
    for (uint32_t c = 0; buf && c < d.chunks; c++) {
      shoal_error e2 = {0};
      if (store_dataset_chunk_read(st, &d, c, buf, cap, NULL, &e2)) {
        fprintf(stderr, "shoal dataset info: %s\n", e2.msg);
        bad++;
      }
    }
    if (!buf) bad = d.chunks;
    free(buf);
    printf("  verify  %u of %u chunks good\n", d.chunks - bad, d.chunks);
    rc = bad ? 1 : 0;
  }
  store_dataset_info_clear(&d);
  store_close(st);
  return rc ? 1 : 0;
}

int cmd_dataset(int argc, char **argv) {
  const char *uri = NULL;
  int verify = 0, k = 0;
  char **rest = argc ? malloc((size_t)argc * sizeof *rest) : NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--store") && i + 1 < argc)
      uri = argv[++i];
    else if (!strcmp(argv[i], "--verify"))
      verify = 1;
    else
      rest[k++] = argv[i];
  }
  int rc = 2;
  if (k >= 1 && !strcmp(rest[0], "put"))
    rc = cmd_put(k - 1, rest + 1, uri);
  else if (k == 1 && !strcmp(rest[0], "ls"))
    rc = cmd_ls(uri);
  else if (k == 2 && !strcmp(rest[0], "info"))
    rc = cmd_info(rest[1], uri, verify);
  else if (k == 2 && !strcmp(rest[0], "rm")) {
    store *st = NULL;
    shoal_error err = {0};
    if (store_open(&st, uri, &err) || store_dataset_delete(st, rest[1], &err)) {
      rc = die("rm", &err);
    } else {
      printf("dataset %s removed from %s\n", rest[1], store_uri(st));
      rc = 0;
    }
    store_close(st);
  } else
    cli_bad_usage("dataset");
  free(rest);
  return rc;
}
