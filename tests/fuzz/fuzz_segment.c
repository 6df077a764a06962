/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_segment.c — the experience-segment decoder (store__seg_header_read,
 * what store_segment_read runs on a file's or document's bytes) and the value check a
 * learner makes before a segment enters its replay (store_segment_check). The first
 * byte's bit 0 asks the target to stamp a correct CRC into the rest, so the fuzzer
 * reaches the checks behind the CRC instead of stopping at it.
 *
 * Properties: a refusal is SHOAL_EFORMAT with a message and leaves no columns; an
 * accepted segment has 1 <= ends <= rows, exactly the bytes its header says, columns
 * inside the buffer, and re-encodes (store__seg_header_write) to the same bytes; the
 * value check returns 0 or a shoal error with a message, and accepts every segment
 * that it accepted once when asked again (it is a pure function).
 */
#include <string.h>

#include "store/internal.h"
#include "store/store_segments.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const uint8_t *in = data + 1;
  size_t len = size - 1;
  store_segment seg;
  memset(&seg, 0, sizeof seg);
  shoal_error err = {0};
  FUZZ_CHECK(!store__seg_grow(&seg, len ? len : 1, &err));
  memcpy(seg.buf, in, len);
  if ((data[0] & 1) && len >= 16)
    store__put_le32(seg.buf + 12, store__crc32(seg.buf + 16, len - 16));
  unsigned char *copy = malloc(len ? len : 1);
  memcpy(copy, seg.buf, len);

  int rc = store__seg_header_read(&seg, len, "fuzz", &err);
  if (rc) {
    FUZZ_CHECK(rc == SHOAL_EFORMAT && err.code == rc && err.msg[0]);
    FUZZ_CHECK(!seg.rows && !seg.obs && !seg.action && !seg.reward && !seg.priority);
    goto done;
  }
  FUZZ_CHECK(seg.rows >= 1 && seg.ends <= seg.rows);
  FUZZ_CHECK(seg.len == len && len >= STORE_SEG_HEADER);
  FUZZ_CHECK(len == store_segment_encoded_bytes(&seg.spec, seg.rows, seg.ends, seg.has_priority));
  FUZZ_CHECK(memchr(seg.run, 0, sizeof seg.run) && memchr(seg.source, 0, sizeof seg.source));
  /* Every column inside the buffer: the last one ends at or before len. */
  const unsigned char *end = seg.buf + len;
  FUZZ_CHECK((unsigned char *)seg.obs >= seg.buf + STORE_SEG_HEADER &&
             (unsigned char *)seg.obs <= end);
  FUZZ_CHECK(seg.terminated + seg.rows <= end && seg.truncated + seg.rows <= end);
  FUZZ_CHECK(!seg.priority || (unsigned char *)(seg.priority + seg.rows) <= end);
  FUZZ_CHECK((seg.ends == 0) == (seg.final_obs == NULL));
  /* Canonical: what was accepted is what the writer would have written. */
  store__seg_header_write(&seg);
  FUZZ_CHECK(!memcmp(seg.buf, copy, len));

  shoal_error e1 = {0}, e2 = {0};
  int c1 = store_segment_check(&seg, NULL, &e1);
  if (c1) FUZZ_CHECK(c1 < 0 && e1.code == c1 && e1.msg[0]);
  int c2 = store_segment_check(&seg, NULL, &e2);
  FUZZ_CHECK(c1 == c2);
done:
  free(copy);
  store_segment_free(&seg);
  return 0;
}
