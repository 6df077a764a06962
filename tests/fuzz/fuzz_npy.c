/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_npy.c — `shoal import`'s .npy reader (cli/import.c,
 * import__npy_header: NumPy's format versions 1-3, the header a Python dict literal).
 * The input is the whole file.
 *
 * Properties: a refusal is SHOAL_EFORMAT with a message and a zeroed result; an
 * accepted header has 1..8 dims, a supported dtype (f4 f8 i1 i4 i8 u1 b1), rows =
 * shape[0], rows x elements per row x element size = the data's bytes without
 * overflow, and the data inside the file after the header; a canonical header written
 * for the same dtype and shape (as numpy.save writes it) parses to the same result.
 */
#include <string.h>

#include "cli/import.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  npy a, b;
  size_t off = 0, off2 = 0;
  char msg[300] = "";
  int rc = import__npy_header(data, size, size, &a, &off, msg, sizeof msg);
  if (rc) {
    npy zero;
    memset(&zero, 0, sizeof zero);
    FUZZ_CHECK(rc == SHOAL_EFORMAT && msg[0] && !memcmp(&a, &zero, sizeof a));
    return 0;
  }
  FUZZ_CHECK(a.ndim >= 1 && a.ndim <= 8 && !a.data && !a.present);
  FUZZ_CHECK(strchr("fiub", a.kind) && (a.size == 1 || a.size == 4 || a.size == 8));
  FUZZ_CHECK(a.kind == 'f' ? a.size != 1 : a.kind == 'i' || a.size == 1);
  FUZZ_CHECK(a.rows == a.shape[0]);
  size_t per_row = 1, bytes;
  for (int i = 0; i < a.ndim; i++) FUZZ_CHECK(a.shape[i] >= 0);
  for (int i = 1; i < a.ndim; i++)
    FUZZ_CHECK(!__builtin_mul_overflow(per_row, (size_t)a.shape[i], &per_row));
  FUZZ_CHECK(per_row == a.per_row);
  FUZZ_CHECK(!__builtin_mul_overflow((size_t)a.rows, per_row, &bytes));
  FUZZ_CHECK(!__builtin_mul_overflow(bytes, (size_t)a.size, &bytes));
  FUZZ_CHECK(bytes == a.bytes);
  FUZZ_CHECK(off >= 10 && off <= size && a.bytes <= size - off);

  /* numpy.save's header: the dict, spaces, a newline, the whole a multiple of 64. */
  char dict[512];
  int n = snprintf(dict, sizeof dict, "{'descr': '<%c%d', 'fortran_order': False, 'shape': (",
                   a.kind, a.size);
  for (int i = 0; i < a.ndim; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld,%s", (long long)a.shape[i],
                  i + 1 < a.ndim ? " " : "");
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  size_t hl = ((size_t)n + 1 + 10 + 63) / 64 * 64 - 10;
  size_t total = 10 + hl + a.bytes;
  uint8_t *file = malloc(10 + hl);
  memcpy(file, "\x93NUMPY\x01\x00", 8);
  file[8] = (uint8_t)hl, file[9] = (uint8_t)(hl >> 8);
  memset(file + 10, ' ', hl);
  memcpy(file + 10, dict, (size_t)n);
  file[10 + hl - 1] = '\n';
  /* Only the header is in memory: the data's bytes are counted, not read. */
  rc = import__npy_header(file, 10 + hl, total, &b, &off2, msg, sizeof msg);
  if (rc) fprintf(stderr, "canonical header refused: %s\n%.*s\n", msg, (int)hl, file + 10);
  FUZZ_CHECK(rc == 0 && off2 == 10 + hl);
  FUZZ_CHECK(a.kind == b.kind && a.size == b.size && a.ndim == b.ndim && a.rows == b.rows &&
             a.per_row == b.per_row && a.bytes == b.bytes);
  FUZZ_CHECK(!memcmp(a.shape, b.shape, sizeof a.shape));
  free(file);
  return 0;
}
