/* SPDX-License-Identifier: Apache-2.0 */
/* tests/faults/faults_log.h — the log a fault_pusher shares with its test through a
 * mapped file (it survives a kill -9 of the pusher). */
#ifndef SHOAL_TEST_FAULTS_LOG_H
#define SHOAL_TEST_FAULTS_LOG_H

#include <stdint.h>

enum { FAULT_LOG_SEQS = 1 << 16 };

typedef struct fault_log {
  int64_t pid;
  double t_start;               /* wall time the pusher started */
  uint64_t pushed;              /* batches queued: seqs 1..pushed */
  uint64_t delivered;           /* acknowledged: seqs 1..delivered */
  uint64_t reconnects;          /* streams that failed and were retried */
  uint64_t duplicates;          /* resent batches the learner already had */
  int64_t done;                 /* 1 after a clean exit */
  int64_t last_status;          /* gRPC status of the last failed stream, 0 if none */
  double ack_t[FAULT_LOG_SEQS]; /* [seq]: wall time the ack was first seen; 0: not acked */
} fault_log;

#endif
