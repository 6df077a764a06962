/* SPDX-License-Identifier: Apache-2.0 */
/* rpc/internal.h — what rpc's files share; not part of the public API. */
#ifndef SHOAL_RPC_INTERNAL_H
#define SHOAL_RPC_INTERNAL_H

#include "rpc/rpc.h"

/* Per-stream buffers the validator writes decompressed and rebuilt columns into. They
 * grow to the largest batch the stream has sent (bounded by the spec) and are reused,
 * so the steady state allocates nothing. */
typedef struct rpc__scratch {
  uint8_t *dense[RPC_MAX_COLUMNS]; /* rebuilt frame stacks */
  size_t dense_cap[RPC_MAX_COLUMNS];
  uint8_t *raw[RPC_MAX_COLUMNS]; /* decompressed bytes */
  size_t raw_cap[RPC_MAX_COLUMNS];
  uint8_t *index[RPC_MAX_COLUMNS]; /* frame indices as received, aligned (u32) */
  size_t index_cap[RPC_MAX_COLUMNS];
} rpc__scratch;
void rpc__scratch_free(rpc__scratch *s);

/* Checks w against spec and fills out (columns in spec order, dense, decompressed),
 * pointing into w's bytes or s. Returns 0; SHOAL_EPERM for a wrong run id; another
 * negative code (EINVAL, ESHAPE, ENAN, EFORMAT) for an invalid batch; err says what. */
int rpc__validate(const rpc_spec *spec, const rpc_wire_batch *w, rpc__scratch *s, rpc_batch *out,
                  shoal_error *err);

/* The largest encoded SampleBatch that spec allows (frame stacks sent dense, all columns
 * uncompressed or at their compression bound), plus slack for framing. */
size_t rpc__max_message_bytes(const rpc_spec *spec);

/* Deep copy of a spec (names and run id duplicated); rpc__spec_free frees the copy. */
int rpc__spec_copy(rpc_spec *dst, const rpc_spec *src);
void rpc__spec_free(rpc_spec *s);

/* Reads a whole file into a NUL-terminated buffer the caller frees. */
int rpc__read_file(const char *path, char **out, shoal_error *err);

/* The server's decoders of unary requests, apart from the call so they can be fuzzed.
 * A run id in the request other than run_id (empty means the running one) is SHOAL_EPERM;
 * an unreadable message SHOAL_EFORMAT. */
int rpc__params_request_decode(const uint8_t *p, size_t n, const char *run_id, int64_t *have,
                               shoal_error *err);
#define RPC__MAX_HYPER 64
typedef struct rpc__hyper_req {
  void *msg; /* the unpacked message; keys and texts point into it */
  int n;
  rpc_hyperparam h[RPC__MAX_HYPER];
} rpc__hyper_req;
/* Also SHOAL_EINVAL for more than RPC__MAX_HYPER entries. On success release *out with
 * rpc__hyperparams_release once h is no longer needed. */
int rpc__hyperparams_decode(const uint8_t *p, size_t n, const char *run_id, rpc__hyper_req *out,
                            shoal_error *err);
void rpc__hyperparams_release(rpc__hyper_req *r);

/* The client's decoder of a Status reply. Returns 0 or SHOAL_EFORMAT. */
int rpc__status_decode(const uint8_t *p, size_t n, rpc_status *out, shoal_error *err);

/* ThreadSanitizer does not see gRPC's own synchronisation (the distribution's libgrpc is
 * not instrumented): a tag handed to gRPC on one thread and returned by a completion
 * queue on another looks unordered with the writes made before the hand-over.
 * rpc__tsan_handoff(tag) as the tag goes to gRPC and rpc__tsan_taken(tag) as the queue
 * returns it tell TSan the order gRPC guarantees. No-ops in other builds. */
#if defined(__SANITIZE_THREAD__)
#define RPC__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RPC__TSAN 1
#endif
#endif
#ifdef RPC__TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define rpc__tsan_handoff(tag) __tsan_release(tag)
#define rpc__tsan_taken(tag) __tsan_acquire(tag)
#else
#define rpc__tsan_handoff(tag) ((void)(tag))
#define rpc__tsan_taken(tag) ((void)(tag))
#endif

#endif
