/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common/crc32c.h — CRC32C (Castagnoli), the checksum of iSCSI, ext4, LevelDB and
 * TensorFlow's TFRecords, for every part that checks bytes it wrote: replay saves and
 * TensorBoard event files. Uses the SSE4.2 crc32 instruction when the CPU has it.
 *
 *   uint32_t crc = shoal_crc32c(0, head, 8);
 *   crc = shoal_crc32c(crc, body, body_len);   // the same as one call over both
 */
#ifndef SHOAL_COMMON_CRC32C_H
#define SHOAL_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CRC32C of n bytes at buf continuing from crc (0 to start), so a checksum can be
 * computed in pieces. Thread-safe; can't fail. */
uint32_t shoal_crc32c(uint32_t crc, const void *buf, size_t n);

/* The same through the portable tables only, for the test that checks both paths agree. */
uint32_t shoal__crc32c_soft(uint32_t crc, const void *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
