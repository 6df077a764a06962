/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common/crc32c.c — CRC32C (Castagnoli polynomial 0x1EDC6F41, reflected
 * 0x82F63B78), the checksum of iSCSI, ext4 and LevelDB. The SSE4.2 crc32
 * instruction computes it 8 bytes at a time, three independent chains at once over
 * long buffers; without it, slicing-by-8 tables.
 * Check value: crc32c("123456789") = 0xE3069283 (RFC 3720, appendix B.4).
 */
#include "common/crc32c.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t crc_soft(uint32_t crc, const uint8_t *p, size_t n) {
  while (n && ((uintptr_t)p & 7)) {
    crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    w ^= crc; /* little-endian: the low 4 bytes take the running crc */
    crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
          table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
          table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__)
/* One crc32 instruction chain: each step waits for the last (3 cycles), so one chain
 * runs at a third of the instruction's throughput. */
__attribute__((target("sse4.2"))) static uint64_t chain(uint64_t c, const uint8_t *p, size_t n) {
  while (n && ((uintptr_t)p & 7)) {
    c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
    p += 8;
    n -= 8;
  }
  while (n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
  return c;
}

/* Three chains over three adjacent blocks of L bytes at once, joined by linearity: the
 * register after A|B|C is shift_2L(crc(c, A)) ^ shift_L(crc(0, B)) ^ crc(0, C), where
 * shift_n(v) is the register after n zero bytes from v (a linear map of v, applied as
 * four byte tables). Two block sizes: long for segments, short for what is left. */
enum { LONG = 4096, SHORT = 256 };
static uint32_t shift_long[2][4][256], shift_short[2][4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

__attribute__((target("sse4.2"))) static uint32_t zeros(uint32_t v, size_t n) {
  static const uint8_t z[LONG];
  uint64_t c = v;
  while (n) {
    size_t k = n < LONG ? n : LONG;
    c = chain(c, z, k);
    n -= k;
  }
  return (uint32_t)c;
}

static void make_shifts(void) {
  for (int k = 0; k < 4; k++)
    for (uint32_t b = 0; b < 256; b++) {
      uint32_t v = b << (8 * k);
      shift_long[0][k][b] = zeros(v, LONG);
      shift_long[1][k][b] = zeros(v, 2 * LONG);
      shift_short[0][k][b] = zeros(v, SHORT);
      shift_short[1][k][b] = zeros(v, 2 * SHORT);
    }
}

static uint32_t shift(const uint32_t t[4][256], uint32_t v) {
  return t[0][v & 0xff] ^ t[1][(v >> 8) & 0xff] ^ t[2][(v >> 16) & 0xff] ^ t[3][v >> 24];
}

__attribute__((target("sse4.2"))) static uint64_t three(uint64_t c, const uint8_t **pp, size_t *nn,
                                                        size_t L, const uint32_t t[2][4][256]) {
  const uint8_t *p = *pp;
  size_t n = *nn;
  while (n >= 3 * L) {
    uint64_t a = c, b = 0, d = 0;
    for (size_t i = 0; i < L; i += 8) {
      uint64_t x, y, z;
      memcpy(&x, p + i, 8);
      memcpy(&y, p + L + i, 8);
      memcpy(&z, p + 2 * L + i, 8);
      a = __builtin_ia32_crc32di(a, x);
      b = __builtin_ia32_crc32di(b, y);
      d = __builtin_ia32_crc32di(d, z);
    }
    c = shift(t[1], (uint32_t)a) ^ shift(t[0], (uint32_t)b) ^ (uint32_t)d;
    p += 3 * L;
    n -= 3 * L;
  }
  *pp = p;
  *nn = n;
  return c;
}

static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
  uint64_t c = crc;
  if (n >= 3 * SHORT) {
    pthread_once(&shift_once, make_shifts);
    size_t head = (8 - ((uintptr_t)p & 7)) & 7;
    c = chain(c, p, head);
    p += head;
    n -= head;
    c = three(c, &p, &n, LONG, shift_long);
    c = three(c, &p, &n, SHORT, shift_short);
  }
  return (uint32_t)chain(c, p, n);
}
#endif

uint32_t shoal_crc32c(uint32_t crc, const void *buf, size_t n) {
  crc = ~crc;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return ~crc_hw(crc, buf, n);
#endif
  pthread_once(&table_once, make_table);
  return ~crc_soft(crc, buf, n);
}

uint32_t shoal__crc32c_soft(uint32_t crc, const void *buf, size_t n) {
  pthread_once(&table_once, make_table);
  return ~crc_soft(~crc, buf, n);
}
