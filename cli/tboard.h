/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli/tboard.h — metrics as TensorBoard event files, so people who use TensorBoard can
 * point it at a run folder (`tensorboard --logdir runs/`).
 *
 * A file is a sequence of TFRecords: uint64 length (little endian), uint32 masked
 * CRC32C of those 8 bytes, the data, uint32 masked CRC32C of the data, where
 * masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (TensorFlow's record_writer). Each
 * record is an Event protobuf (tensorflow/core/util/event.proto), encoded here by hand:
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *             Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 * The first record is the file_version "brain.Event:2" event TensorBoard expects.
 *
 *   tb_writer *w;
 *   tb_writer_open(&w, "runs/cartpole-1/tb", &err);   // events.out.tfevents.<time>.<host>
 *   tb_writer_scalar(w, "return100", 12000, unix_time, 187.5f, &err);
 *   tb_writer_flush(w, &err);
 *   tb_writer_close(w);
 */
#ifndef SHOAL_CLI_TBOARD_H
#define SHOAL_CLI_TBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"
#include "store/store.h"

typedef struct tb_writer tb_writer;

/* TFRecord's masking of a CRC32C (common/crc32c.h). Can't fail. */
uint32_t tb_mask_crc(uint32_t crc);

/* Makes dir (and its parents) if missing and creates a new event file in it, writing
 * the file_version event. Caller owns *out (tb_writer_close). Returns 0, SHOAL_EIO
 * (with the path and the system's reason) or SHOAL_ENOMEM. */
int tb_writer_open(tb_writer **out, const char *dir, shoal_error *err);
/* The file's path; borrowed, valid until close. */
const char *tb_writer_path(const tb_writer *w);
/* Appends one scalar event (buffered). tag: 1..255 bytes. Non-finite values are written
 * as they are (TensorBoard shows NaN). Returns 0, SHOAL_EINVAL or SHOAL_EIO. */
int tb_writer_scalar(tb_writer *w, const char *tag, int64_t step, double wall_time, float value,
                     shoal_error *err);
/* Writes buffered events to the file. Returns 0 or SHOAL_EIO. */
int tb_writer_flush(tb_writer *w, shoal_error *err);
/* Flushes and closes; NULL is a no-op. */
void tb_writer_close(tb_writer *w);

/* Mirrors a run's metrics from the store into an event file: each call writes the rows
 * that appeared since the last call (rows are told apart by time and name, so rows
 * that a resumed learner writes at earlier steps are not missed). */
typedef struct tb_mirror tb_mirror;
/* Caller owns *out (tb_mirror_destroy); st and run are borrowed for its life. */
int tb_mirror_create(tb_mirror **out, store *st, const char *run, const char *dir,
                     shoal_error *err);
/* Writes new rows and flushes; *written (may be NULL) gets how many. */
int tb_mirror_sync(tb_mirror *m, size_t *written, shoal_error *err);
const char *tb_mirror_path(const tb_mirror *m);
/* Marks the rows the store holds now as written (a resumed run's new event file then
 * holds only what is new). */
int tb_mirror_skip_existing(tb_mirror *m, shoal_error *err);
void tb_mirror_destroy(tb_mirror *m);

#endif
