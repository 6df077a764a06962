/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli/import.h — private to cli/import.c (`shoal import`): its state and the two
 * parsers of outside input, exposed on buffers so tests/fuzz/fuzz_jsonl.c and
 * fuzz_npy.c reach them without a store or files. Nothing else includes it.
 */
#ifndef SHOAL_CLI_IMPORT_H
#define SHOAL_CLI_IMPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envs/envs.h"
#include "store/store.h"

/* One transition as read, before it is known whether it continues into the next. */
typedef struct record {
  float *obs, *next_obs; /* (obs size) */
  bool has_next;
  int32_t action_i;
  float *action_f; /* (act size) for a box */
  float reward;
  bool terminated, truncated;
  bool has_prio;
  float prio;
} record;

typedef struct importer {
  store *st;
  const char *run;
  const char *create_env; /* the run is made with the first segment, for this env (or NULL) */
  char source[STORE_NAME_MAX];
  const env_spec *spec;
  store_segment_limits lim;
  size_t obs_n, act_n; /* elements of one obs / one box action */
  size_t ob, ab;       /* bytes of one obs / one action as stored */
  uint32_t seg_rows;   /* rows per segment */
  bool quiet;
  int prio_mode; /* -1 unknown yet, 0 none, 1 every record */

  /* Staging for the segment being built (seg_rows rows). */
  unsigned char *s_obs, *s_act, *s_fin;
  float *s_rew, *s_prio;
  uint8_t *s_term, *s_trunc;
  uint32_t n, k;
  store_segment seg;

  /* The pending record (its end is decided by the next one). */
  record cur, pend;
  bool have_pend;

  /* Counts. */
  uint64_t read, imported, bad, shown, segments, first_seq, last_seq;
  uint64_t file_read, file_imported, file_bad;
  const char *file;
  int store_rc;
  double t0;
} importer;

/* Parses one JSON Lines line (NUL-terminated, its newline removed) into r (whose
 * buffers are sized for im->spec) and checks it against the env as every imported
 * record is; the first record fixes im->prio_mode. Uses im->spec, obs_n, act_n,
 * lim.spec.obs_dtype and prio_mode only. false with msg (cap bytes) naming the fault. */
bool import__jsonl_line(importer *im, const char *line, record *r, char *msg, size_t cap);

/* One .npy column file (NumPy's format, versions 1-3). */
typedef struct npy {
  char kind; /* 'f', 'i', 'u', 'b' */
  int size;  /* bytes per element */
  int ndim;
  int64_t shape[8];
  int64_t rows;   /* shape[0] */
  size_t per_row; /* elements per row */
  unsigned char *data;
  size_t bytes;
  bool present;
} npy;

/* Parses the header of a .npy file whose first len bytes are buf (borrowed: the whole
 * file, or at least its header) and which holds file_size bytes in all: *out gets the
 * dtype and shape (data NULL, present false), *data_off where the data starts; the
 * data (out->bytes) fits in the file. SHOAL_EFORMAT with msg (cap bytes) naming the
 * fault; *out is then zeroed. Can't fail otherwise. */
int import__npy_header(const unsigned char *buf, size_t len, uint64_t file_size, npy *out,
                       size_t *data_off, char *msg, size_t cap);

#endif
