/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store/store_segments.h — experience segments in the store (store/segments.c): the
 * columns of an Ape-X SampleBatch written by other systems or by shoal, for a learner
 * with replay.source store|mixed. Part of store.h, which includes it.
 */
#ifndef SHOAL_STORE_SEGMENTS_H
#define SHOAL_STORE_SEGMENTS_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- experience segments (store/segments.c) ------------------------------ */

/* Experience written by other systems (a deployed policy's logs, `shoal import`) or
 * by shoal itself, for a learner with replay.source store|mixed to train from. A
 * segment holds N transitions of one source in the columns of an Ape-X SampleBatch:
 *
 *   obs         (N, obs...)  u8 or f32    o_t
 *   action      (N, act...)  i32 or f32   a_t (i32 scalar: discrete; f32: a box)
 *   reward      (N)          f32          r_t, finite
 *   terminated  (N)          u8 0|1       the episode ended in a terminal state
 *   truncated   (N)          u8 0|1       the episode (or this piece of it) was cut
 *   final_obs   (K, obs...)  as obs       o_{t+1} of each of the K rows that ended
 *                                         (terminated or truncated), in row order;
 *                                         absent when K = 0
 *   priority    (N)          f32 >= 0     optional initial |TD| for prioritized replay
 *
 * Rows are in time order: the next observation of row i is obs[i+1] unless row i
 * ended, and then it is its final_obs entry. The segments of one source, by seq,
 * form one stream: a segment whose last row did not end continues in that source's
 * next segment. Each run's segments have sequence numbers 0, 1, 2, ... assigned by
 * store_segment_write in the order they become visible (a writer that loses a race
 * takes the next number), so a reader that has seen seq s has seen every seq < s.
 *
 * Every segment carries a CRC-32 (zlib's polynomial) of its canonical encoding: the
 * file below from byte 16 on. In the file store it is that file,
 * DIR/<run>/segments/<seq, 20 digits>.seg, written atomically (temp file, fsync,
 * link, fsync of the folder):
 *
 *   0   "SHOALSEG"  8 bytes      48  run     64 bytes, NUL-padded
 *   8   version 1   u32          112 source  64 bytes, NUL-padded
 *   12  crc32       u32          176 obs dtype u32, ndim u32, shape 4 x i64
 *   16  seq         u64          216 action dtype u32, ndim u32, shape 4 x i64
 *   24  wall_time   f64 (Unix s) 256 the columns' bytes in the order above, packed
 *   32  rows N      u32
 *   36  ends K      u32          little-endian; dtypes 0 = u8, 1 = i32, 3 = f32 (as
 *   40  flags       u32          replay/rpc); flags bit 0: a priority column follows
 *   44  header size u32 (256)
 *
 * In MongoDB it is a document of collection `segments` (unique index run+seq):
 *   {run, seq, source, wall_time, rows, ends, crc,
 *    spec: {obs: {dtype: "f32", shape: [4]}, action: {dtype: "i32", shape: []}},
 *    obs, action, reward, terminated, truncated, final_obs, [priority]: binary}
 * whose crc is that of the same canonical encoding, so a segment copied between
 * stores keeps it. Readers check magic, version, sizes and CRC (SHOAL_EFORMAT) and
 * never hand out a damaged segment. */

enum {
  STORE_SEG_U8 = 0,
  STORE_SEG_I32 = 1,
  STORE_SEG_F32 = 3,
  STORE_SEG_MAX_DIMS = 4,
  STORE_SEG_HEADER = 256,
};

/* Largest encoded segment, header included: what a MongoDB document holds. */
#define STORE_SEGMENT_MAX ((size_t)15 * 1024 * 1024)

typedef struct store_segment_spec {
  int obs_dtype; /* STORE_SEG_U8 or STORE_SEG_F32 */
  int obs_ndim;  /* 0..4 */
  int64_t obs_shape[STORE_SEG_MAX_DIMS];
  int act_dtype; /* STORE_SEG_I32 (ndim 0: a discrete action) or STORE_SEG_F32 */
  int act_ndim;
  int64_t act_shape[STORE_SEG_MAX_DIMS];
} store_segment_spec;

/* One segment. The column pointers point into buf, which the segment owns; reuse one
 * segment for many reads so a follower allocates only when a segment is larger than
 * any before. Zero-initialise before first use; free with store_segment_free. */
typedef struct store_segment {
  char run[STORE_NAME_MAX];
  char source[STORE_NAME_MAX]; /* who wrote it: a name as for runs */
  uint64_t seq;                /* set by store_segment_write and by reads */
  double wall_time;            /* Unix time it was written (set by write) */
  uint32_t rows;               /* N */
  uint32_t ends;               /* K: rows with terminated or truncated set */
  int has_priority;
  uint32_t crc; /* set by write and by reads */
  store_segment_spec spec;
  void *obs;           /* (N, obs...) */
  void *action;        /* (N, act...) */
  float *reward;       /* (N) */
  uint8_t *terminated; /* (N) */
  uint8_t *truncated;  /* (N) */
  void *final_obs;     /* (K, obs...); NULL when K = 0 */
  float *priority;     /* (N) or NULL */
  unsigned char *buf;  /* owned: the canonical encoding, header first */
  size_t len, cap;     /* bytes used and allocated */
} store_segment;

/* Bytes of dtype (1 or 4); 0 for an unknown one. "u8", "i32", "f32" or "?". */
size_t store_segment_dtype_size(int dtype);
const char *store_segment_dtype_name(int dtype);

/* Bytes of the canonical encoding of a segment with this spec, N rows, K ends and
 * optionally a priority column; 0 when the spec is invalid. Can't fail otherwise. */
size_t store_segment_encoded_bytes(const store_segment_spec *spec, uint32_t rows, uint32_t ends,
                                   int has_priority);

/* Lays seg out for N rows and K ends with spec (copied): sizes seg->buf (growing it
 * only when too small), sets rows, ends, has_priority and the column pointers, which
 * the caller then fills. run, source and seq are left as they are. SHOAL_EINVAL for a
 * bad spec, SHOAL_EFULL when the encoding would exceed STORE_SEGMENT_MAX, SHOAL_ENOMEM.
 * On error seg keeps its buffer but has no columns (rows = 0). */
int store_segment_reserve(store_segment *seg, const store_segment_spec *spec, uint32_t rows,
                          uint32_t ends, int has_priority, shoal_error *err);

/* Frees seg's buffer and zeroes it. NULL is a no-op. */
void store_segment_free(store_segment *seg);

/* What a segment must satisfy to enter a learner's replay: the env's spaces. */
typedef struct store_segment_limits {
  store_segment_spec spec; /* must match exactly */
  int64_t num_actions;     /* discrete: actions are 0..num_actions-1; 0 for a box */
  const float *act_low;    /* box: (act size) bounds or NULL (any finite value) */
  const float *act_high;
} store_segment_limits;

/* Checks seg's contents: the spec equals lim's (SHOAL_ESHAPE), the flags are 0 or 1
 * and K is the number of ended rows (SHOAL_EFORMAT), every float is finite
 * (SHOAL_ENAN: obs, final_obs, reward, box actions, priority), discrete actions are in
 * range and box actions in their bounds (SHOAL_ERANGE), priorities are >= 0
 * (SHOAL_ERANGE). err names the segment, the column and the first bad row. lim may
 * be NULL: everything but the spec match and the action bounds is checked. */
int store_segment_check(const store_segment *seg, const store_segment_limits *lim,
                        shoal_error *err);

/* Appends seg to run's segments: checks its layout (not its values: see
 * store_segment_check), stamps run, wall_time and the CRC, takes the next sequence
 * number (written into seg->seq) and writes it atomically. The run must exist
 * (SHOAL_ENOENT); seg->source must be a valid name (SHOAL_EINVAL). Thread- and
 * process-safe: concurrent writers get distinct, consecutive numbers. */
int store_segment_write(store *st, const char *run, store_segment *seg, shoal_error *err);

/* Lists the sequence numbers of run's segments above after (all: pass
 * STORE_SEG_FIRST) in ascending order, at most cap of them, into seqs; *n is how many.
 * A run without segments gives *n = 0; a missing run SHOAL_ENOENT. */
#define STORE_SEG_FIRST UINT64_MAX /* "after nothing": as after = -1 */
int store_segment_list(store *st, const char *run, uint64_t after, uint64_t *seqs, size_t cap,
                       size_t *n, shoal_error *err);

/* Reads segment seq of run into seg (reusing its buffer) and checks its magic,
 * version, sizes, spec and CRC. SHOAL_ENOENT when there is no such segment,
 * SHOAL_EFORMAT when it is damaged (err names the file or document and what is
 * wrong; seg then holds no columns). Values are not checked: store_segment_check. */
int store_segment_read(store *st, const char *run, uint64_t seq, store_segment *seg,
                       shoal_error *err);

#ifdef __cplusplus
}
#endif
#endif
