/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_rlog.c — the replay log's segment reader (rlog_decode, then rlog_next
 * over every record), what a resuming learner and a store follower run on the bytes of
 * a replay segment. The first byte's bit 0 asks the target to stamp a correct CRC32C of
 * the body into a raw-codec segment's header, so the fuzzer reaches the record parser
 * behind the checksum (framed records, kind 3, included) instead of stopping at it.
 *
 * Properties: a refusal is SHOAL_EFORMAT (or SHOAL_ENOMEM) with a message; an accepted
 * segment's body is the length its header says; every record rlog_next hands out is a
 * batch or priorities, its position moves forward, a batch's columns lie inside the body
 * or inside the segment's rebuilt rows, priorities inside the body; a record that does
 * not fit is SHOAL_EFORMAT with a message and ends the walk.
 */
#include <string.h>

#include "common/crc32c.h"
#include "learner/replay_log.h"
#include "tests/fuzz/fuzz.h"

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int inside(const void *p, size_t n, const unsigned char *lo, size_t len) {
  const unsigned char *q = p;
  return q >= lo && n <= len && q - lo <= (ptrdiff_t)(len - n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t len = size - 1;
  uint8_t *b = malloc(len ? len : 1);
  memcpy(b, data + 1, len);
  /* A raw body's CRC32C, restamped: header, then ncols specs, then the body. */
  if ((data[0] & 1) && len >= RLOG_HEADER && le32(b + 12) == RLOG_CODEC_NONE && le32(b + 72) >= 1 &&
      le32(b + 72) <= RLOG_MAX_COLS) {
    size_t hl = RLOG_HEADER + (size_t)le32(b + 72) * RLOG_COL_SPEC;
    if (hl <= len) {
      uint32_t c = shoal_crc32c(0, b + hl, len - hl);
      for (int i = 0; i < 4; i++) b[24 + i] = (uint8_t)(c >> (8 * i));
    }
  }
  rlog_segment seg;
  memset(&seg, 0, sizeof seg);
  shoal_error err = {0};
  int rc = rlog_decode(b, len, 7, &seg, &err);
  if (rc) {
    FUZZ_CHECK((rc == SHOAL_EFORMAT || rc == SHOAL_ENOMEM) && err.code == rc && err.msg[0]);
    goto done;
  }
  FUZZ_CHECK(seg.ncols >= 1 && seg.ncols <= RLOG_MAX_COLS);
  size_t pos = 0;
  for (int k = 0; k < 100000; k++) {
    size_t before = pos;
    rlog_record r;
    shoal_error e = {0};
    int got = rlog_next(&seg, &pos, &r, &e);
    if (got == 0) {
      FUZZ_CHECK(pos >= seg.body_len);
      break;
    }
    if (got < 0) {
      FUZZ_CHECK((got == SHOAL_EFORMAT || got == SHOAL_ENOMEM) && e.code == got && e.msg[0]);
      break;
    }
    FUZZ_CHECK(got == 1 && pos > before && pos <= seg.body_len);
    if (r.kind == RLOG_REC_PRIORITIES) {
      FUZZ_CHECK(inside(r.p, (size_t)r.n * 4, seg.body, seg.body_len));
      continue;
    }
    FUZZ_CHECK(r.kind == RLOG_REC_BATCH);
    for (uint32_t c = 0; c < seg.ncols; c++) {
      size_t n = (size_t)r.batch.rows * rlog_column_bytes(&seg.cols[c]);
      FUZZ_CHECK(inside(r.batch.cols[c], n, seg.body, seg.body_len) ||
                 (seg.rows && inside(r.batch.cols[c], n, seg.rows, seg.rows_cap)));
      /* every byte readable (the sanitizers see a read past either buffer) */
      volatile unsigned char sink = 0;
      const unsigned char *q = r.batch.cols[c];
      for (size_t i = 0; i < n; i += 4096) sink ^= q[i];
      if (n) sink ^= q[n - 1];
      (void)sink;
    }
  }
done:
  rlog_segment_free(&seg);
  free(b);
  return 0;
}
