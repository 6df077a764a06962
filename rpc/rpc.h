/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc/rpc.h — the transport between actors and the learner: service shoal.v1.Learner
 * (proto/shoal.proto) on the gRPC C core with protobuf-c. Only rpc/ includes gRPC.
 *
 * Learner side: a server that owns its completion-queue threads, validates every
 * SampleBatch against the run's spec and hands valid ones to a callback.
 *
 *   rpc_spec spec = {.run_id = "cartpole-1", .max_items = 1024, .ncols = 2, .cols = {
 *       {.name = "obs", .dtype = RPC_F32, .ndim = 1, .shape = {4}},
 *       {.name = "reward", .dtype = RPC_F32, .ndim = 0}}};
 *   rpc_server_config sc = {.listen = "127.0.0.1:0", .on_batch = insert, .user = replay};
 *   rpc_server *srv;
 *   if (rpc_server_create(&sc, &spec, &srv, &err)) return 1;   // bound and serving
 *   rpc_server_set_params(srv, 1, RPC_F32, params, bytes, layout, nlayout, &err);
 *   // ... insert() gets every valid batch until the run ends
 *   rpc_server_destroy(srv, 2.0);                               // drains for up to 2 s
 *
 * Actor side: a client with a persistent Push stream on its own thread, a bounded
 * send queue, reconnects with exponential backoff and jitter.
 *
 *   rpc_client_config cc = {.target = "127.0.0.1:50051", .run_id = "cartpole-1",
 *                           .actor_id = 3};
 *   rpc_client *c;
 *   rpc_client_create(&cc, &c, &err);
 *   rpc_batch b = {.n = 64, .ncols = 2, .cols = {
 *       {.name = "obs", .dtype = RPC_F32, .ndim = 1, .shape = {4}, .data = obs, .bytes = 64*16},
 *       {.name = "reward", .dtype = RPC_F32, .data = rew, .bytes = 64*4}}};
 *   rpc_client_push(c, &b, &err);          // encodes and queues; blocks or drops when full
 *   rpc_client_close(c, 5.0, &stats, &err); // flushes, reports what was not delivered
 *
 * Delivery. Every batch gets a sequence number per (actor_id, incarnation). The client
 * keeps a batch until the server acknowledges it: the Push stream is rotated (half-
 * closed, its PushSummary read, a new one opened) every ack_every batches or when the
 * queue goes idle, and the summary names the last accepted seq. After a failure the
 * client reconnects and resends what was not acknowledged; the server drops and counts
 * batches whose seq it has already accepted. So a batch is delivered once, and what was
 * not delivered at close is known exactly. The learner keeps seqs in memory: across a
 * graceful drain delivery stays exactly-once, across a learner crash batches that were
 * in flight may arrive twice at its successor. A learner that stops on purpose says so
 * in the streams it ends (shoal-stopping), so a client can tell it from one that broke.
 *
 * Bad input. An invalid batch ends its stream with INVALID_ARGUMENT (FAILED_PRECONDITION
 * for a wrong run, UNAUTHENTICATED for a wrong token) and trailing metadata
 * shoal-last-seq / shoal-bad-seq; the server counts it and serves on. The client drops
 * that one batch (stats.rejected) and carries on; a wrong run or token stops it for good
 * (SHOAL_EPERM). Push streams announce the learner's message limit in their initial
 * metadata (shoal-max-message, derived from the spec), so clients refuse larger batches
 * instead of retrying them.
 *
 * Frame deduplication. A column whose spec item shape is (S, H, W, ...) may be sent with
 * frames > 0: data then holds `frames` single frames of shape (H, W, ...) and
 * frame_index holds n*S indices into them. The server rebuilds full stacks, so the
 * callback sees the same dense column either way. With a replay memory that stacks
 * frames itself (replay.h's frame_stack), send one frame per sample as a plain dense
 * column instead: each frame then travels and is stored once. Any column may be
 * compressed (codec LZ4 or ZSTD); the server decompresses.
 */
#ifndef SHOAL_RPC_H
#define SHOAL_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types; values equal shoal.v1.DType. */
typedef enum rpc_dtype {
  RPC_U8 = 1,
  RPC_I8 = 2,
  RPC_I16 = 3,
  RPC_I32 = 4,
  RPC_I64 = 5,
  RPC_F16 = 6,
  RPC_F32 = 7,
  RPC_F64 = 8,
  RPC_BOOL = 9,
  RPC_U16 = 10,
  RPC_U32 = 11,
  RPC_U64 = 12,
} rpc_dtype;

/* Bytes per element of dtype; 0 for an unknown dtype. Can't fail. */
size_t rpc_dtype_size(int dtype);
/* The dtype's name as shoal.proto spells it ("F32", "U8", ...); "unknown" for another
 * value. Static; can't fail. */
const char *rpc_dtype_name(int dtype);

/* Compression of column bytes; values equal shoal.v1.Codec. */
enum { RPC_CODEC_NONE = 0, RPC_CODEC_LZ4 = 1, RPC_CODEC_ZSTD = 2 };

#define RPC_MAX_DIMS 6
#define RPC_MAX_COLUMNS 32

/* ------------------------------------------------------------------------- */
/* The run's spec: what every batch must look like.                           */

typedef struct rpc_column_spec {
  const char *name;            /* "obs" */
  int dtype;                   /* rpc_dtype */
  int ndim;                    /* 0 (a scalar per item) .. RPC_MAX_DIMS */
  int64_t shape[RPC_MAX_DIMS]; /* per-item shape, every entry >= 1 */
  bool frame_stack;            /* may arrive deduplicated as frames + index (ndim >= 2) */
  bool allow_nonfinite;        /* floats may hold NaN/inf (default: rejected) */
} rpc_column_spec;

typedef struct rpc_spec {
  const char *run_id;  /* every batch's run_id must equal it */
  uint32_t max_items;  /* samples per batch at most; sets the max message size */
  uint64_t max_actors; /* actor ids below it, refused before any state is kept (0: any) */
  int ncols;           /* 1 .. RPC_MAX_COLUMNS */
  rpc_column_spec cols[RPC_MAX_COLUMNS];
} rpc_spec;

/* Bytes of one item of column c (product of shape times dtype size). */
size_t rpc_column_item_bytes(const rpc_column_spec *c);

/* Frames in one item of a frame_stack column: shape[0] (frame stacks), or with planes the
 * product of all but the last two dimensions (each (H, W) plane a frame). Can't fail. */
size_t rpc_column_frames_per_item(const rpc_column_spec *c, bool planes);

struct rpc_column;
/* The same for a column a batch callback sees that arrived as frames (frames > 0): its
 * shape and frame_planes say how many frames make one item. Can't fail. */
size_t rpc_column_frames_of(const struct rpc_column *c);

/* Deduplicates count frames of frame_bytes each, laid out one after another in `in` as
 * stacks of depth frames (any number of items): frames gets each distinct frame once,
 * index[p] which of them frame p is. A frame is matched against where a stack that
 * moved on by one, a reset's repeated frame or an unchanged stack would hold it, by
 * content, so the result is exact for any input. frames needs room for count frames
 * (the worst case), index for count entries. Returns the number of frames written.
 * Can't fail. */
uint32_t rpc_frames_dedup(const uint8_t *in, size_t count, size_t frame_bytes, size_t depth,
                          uint8_t *frames, uint32_t *index);

/* Checks a spec (names unique and non-empty, dtypes known, shapes >= 1, max_items >= 1).
 * Returns 0 or SHOAL_EINVAL with err naming the first problem. */
int rpc_spec_check(const rpc_spec *spec, shoal_error *err);

/* ------------------------------------------------------------------------- */
/* Batches: what an actor pushes and what the learner's callback receives.    */

typedef struct rpc_column {
  const char *name;
  int dtype;
  int ndim;
  int64_t shape[RPC_MAX_DIMS]; /* per-item shape */
  const void *data;            /* n items (dense) or `frames` frames (frame stack) */
  size_t bytes;                /* byte count of data */
  /* Sending: codec, and frames/frame_index/frame_planes for the frame-stack layout. The
   * server's callback always sees dense, uncompressed columns in data; when a column
   * arrived as frames, it also sees them as they came (frames, frame_index,
   * frame_planes and frame_data, checked and aligned), so a consumer that keeps each
   * frame once (the learner's replay log) need not deduplicate them again. */
  int codec;                   /* RPC_CODEC_*: compress data on the wire */
  uint32_t frames;             /* > 0: frame-stack layout, data holds this many frames */
  const uint32_t *frame_index; /* frames > 0: n * shape[0] indices, each < frames (n * P
                                  with frame_planes) */
  bool frame_planes;           /* frames are the trailing (H, W) planes, P per item
                                  (rpc_column_frames_per_item): LAYOUT_FRAME_PLANES */
  const void *frame_data;      /* callback only, frames > 0: the distinct frames */
} rpc_column;

typedef struct rpc_batch {
  uint64_t actor_id;      /* set by the client from its config */
  uint64_t incarnation;   /* set by the client (random per client) */
  uint64_t seq;           /* set by the client: 1, 2, ... */
  int64_t policy_version; /* the params version that acted */
  const char *run_id;     /* set by the client from its config */
  uint32_t n;             /* samples */
  int ncols;
  rpc_column cols[RPC_MAX_COLUMNS];
} rpc_batch;

/* ------------------------------------------------------------------------- */
/* Server (learner side).                                                     */

typedef struct rpc_server rpc_server;

/* Called on a server thread for every valid batch, with columns in the spec's order,
 * dense, decompressed and aligned to their element size. b and its data are borrowed for the call
 * only. Return 0 to accept; SHOAL_EFULL refuses the batch with RESOURCE_EXHAUSTED (the client
 * retries later); SHOAL_EINVAL, SHOAL_ESHAPE, SHOAL_ERANGE or SHOAL_ENAN reject it as invalid
 * (INVALID_ARGUMENT, counted in `rejected`; the client drops it and goes on); any other error
 * refuses it with INTERNAL (retried). May run on several threads at once when
 * the server has several (config.threads > 1). */
typedef int (*rpc_batch_fn)(void *user, const rpc_batch *b, shoal_error *err);

/* Extra figures for Status replies: the learner's own counters. */
#define RPC_MAX_COUNTERS 32
typedef struct rpc_counter {
  char name[48];
  double value;
} rpc_counter;
typedef void (*rpc_status_fn)(void *user, rpc_counter *out, int *n /* in: capacity, out: used */);

/* A live hyperparameter change (SetHyperparams). */
typedef struct rpc_hyperparam {
  const char *key;
  bool is_text;
  double number;
  const char *text;
} rpc_hyperparam;
/* Returns 0 and sets *applied, or an error that goes back as INVALID_ARGUMENT with
 * err's message. */
typedef int (*rpc_hyperparams_fn)(void *user, const rpc_hyperparam *h, int n, uint32_t *applied,
                                  shoal_error *err);

typedef struct rpc_server_config {
  const char *listen; /* "host:port"; NULL: "127.0.0.1:0" (an OS-chosen port) */
  int threads;        /* completion-queue polling threads; 0: 1 */
  /* Security, off by default. token: every call must carry the metadata
   * "authorization: Bearer <token>" (else UNAUTHENTICATED, before any other work).
   * tls_cert_file + tls_key_file (PEM): serve TLS. tls_client_ca_file: also require
   * client certificates signed by that CA. */
  const char *token;
  const char *tls_cert_file;
  const char *tls_key_file;
  const char *tls_client_ca_file;
  /* Limits against hostile or broken peers; 0 takes the default. Memory held for
   * requests is bounded by about max_calls x the spec's largest message, and gRPC's
   * buffers by memory_limit.
   *  max_calls: calls open at once over all connections; more are refused at once with
   *    RESOURCE_EXHAUSTED (clients back off and retry). Default 1024.
   *  max_streams_per_conn: HTTP/2 streams one connection may have open. Default 16.
   *  idle_call_s: a call that has waited this long for its next message (a slow-loris
   *    client sending a message byte by byte, or opening streams and sending nothing)
   *    is cancelled. Default 120.
   *  handshake_timeout_s: a new connection must complete its TLS / HTTP/2 handshake in
   *    this time. Default 10.
   *  idle_conn_s: a connection without calls for this long is closed (GOAWAY; clients
   *    reconnect when they need to). Default 600.
   *  memory_limit: bytes gRPC may use for connections and messages (a resource quota);
   *    default the larger of 1 GiB and 16 messages of the spec's largest. */
  int max_calls;
  int max_streams_per_conn;
  double idle_call_s;
  double handshake_timeout_s;
  double idle_conn_s;
  size_t memory_limit;
  rpc_batch_fn on_batch;             /* required */
  rpc_status_fn on_status;           /* optional */
  rpc_hyperparams_fn on_hyperparams; /* optional; without it SetHyperparams is UNIMPLEMENTED */
  void *user;
} rpc_server_config;

typedef struct rpc_server_stats {
  uint64_t batches;         /* accepted */
  uint64_t samples;         /* accepted */
  uint64_t bytes;           /* wire bytes of accepted batches */
  uint64_t rejected;        /* invalid: malformed, wrong shape, NaN, ... (INVALID_ARGUMENT) */
  uint64_t wrong_run;       /* FAILED_PRECONDITION */
  uint64_t duplicates;      /* dropped: seq already accepted */
  uint64_t refused;         /* the callback returned an error */
  uint64_t unauthenticated; /* calls without the right token */
  uint64_t streams_total;
  uint64_t streams_active;
  uint64_t streams_aborted; /* the peer went away or the call broke mid-stream */
  uint64_t params_pulls;
  uint64_t params_not_newer;
  uint64_t actors;         /* distinct actor incarnations seen */
  uint64_t calls_active;   /* calls of every method open now */
  uint64_t over_limit;     /* calls refused because max_calls were open */
  uint64_t idle_cancelled; /* calls cancelled after idle_call_s without a message */
} rpc_server_stats;

/* Creates, binds and starts a server for spec (deep-copied). SO_REUSEPORT is off, so a
 * port in use fails here. Caller owns *out (rpc_server_destroy). Returns 0 or
 * SHOAL_EINVAL (bad spec or config), SHOAL_EIO (cert files), SHOAL_ENET (bind). */
int rpc_server_create(const rpc_server_config *cfg, const rpc_spec *spec, rpc_server **out,
                      shoal_error *err);
/* The bound port (useful with port 0). Can't fail. */
int rpc_server_port(const rpc_server *s);
/* Publishes params version `version`: encodes them once (copying blob and layout) and
 * serves that encoding to every PullParams until the next call; pulls in flight keep
 * the old encoding alive (reference counted). version must grow. */
typedef struct rpc_param_entry {
  const char *name;
  int ndim;
  int64_t shape[RPC_MAX_DIMS];
  uint64_t offset; /* in elements, into blob */
  uint64_t numel;
} rpc_param_entry;
int rpc_server_set_params(rpc_server *s, int64_t version, int dtype, const void *blob, size_t bytes,
                          const rpc_param_entry *layout, int nlayout, shoal_error *err);
/* Sets the description of the network (JSON, Params.arch) that every params version
 * published after this call carries; copies json. Set it once, before the first
 * rpc_server_set_params: a description that changed under a running actor would not
 * match what it holds. Returns 0, SHOAL_EINVAL (json NULL), SHOAL_ESTATE (already set or
 * params already published) or SHOAL_ENOMEM. */
int rpc_server_set_arch(rpc_server *s, const char *json, shoal_error *err);
/* A snapshot of the counters. Can't fail. */
void rpc_server_stats_get(const rpc_server *s, rpc_server_stats *out);
/* Graceful stop: Push streams in flight end at their next message with UNAVAILABLE
 * (clients resend elsewhere or later), and for a moment (0.1 s, at most drain_s, when
 * any actor was seen) new Push streams end at once the same way, so that a client
 * between two streams hears of the stop (shoal-stopping); then no new calls are taken,
 * and calls still running after drain_s seconds are cancelled. Then frees everything.
 * s may be NULL. */
void rpc_server_destroy(rpc_server *s, double drain_s);
/* rpc_server_destroy, and final (when not NULL) gets the counters after the last call
 * has ended: exact, where a snapshot taken while batches are in flight can count a batch
 * the learner has taken but the server not yet. */
void rpc_server_close(rpc_server *s, double drain_s, rpc_server_stats *final);

/* ------------------------------------------------------------------------- */
/* Client (actor side).                                                       */

typedef struct rpc_client rpc_client;

enum { RPC_BLOCK = 0, RPC_DROP_OLDEST = 1 };

typedef struct rpc_client_config {
  const char *target; /* "host:port" */
  const char *run_id;
  uint64_t actor_id;
  const char *token;         /* sent as "authorization: Bearer <token>" when set */
  const char *tls_ca_file;   /* set: TLS, verifying the server against this CA (PEM) */
  const char *tls_cert_file; /* optional client certificate + key (PEM) */
  const char *tls_key_file;
  const char *tls_server_name; /* optional: the name to verify instead of target's host */
  int queue_batches;           /* batches held (queued + sent, not yet acknowledged); 0: 64 */
  size_t queue_bytes;          /* encoded bytes held at most; 0: 256 MiB */
  int backpressure;            /* RPC_BLOCK (default) or RPC_DROP_OLDEST */
  double block_timeout_s;      /* RPC_BLOCK: push gives up after this (SHOAL_ETIMEDOUT); 0: never */
  int ack_every;               /* rotate the stream for an acknowledgement every this many
                                  batches; 0: queue_batches / 2 */
  double backoff_initial_s;    /* 0: 0.05 */
  double backoff_max_s;        /* 0: 2.0 */
  double call_timeout_s;       /* deadline of unary calls; 0: 10 */
  double keepalive_s;          /* ping the learner after this long without traffic; >= 10 (the
                                  server takes pings every 10 s); 0: 30 */
} rpc_client_config;

/* What the client last knew of the learner (rpc_client_stats.learner), so that an
 * actor stopping with batches still held can say why. */
enum {
  RPC_LEARNER_NEVER = 0,   /* no Push stream has come up yet */
  RPC_LEARNER_UP = 1,      /* the last stream came up (the learner took it or acknowledged
                              on it); if it ended, it ended normally or the learner refused
                              a batch for now (it was reachable) */
  RPC_LEARNER_STOPPED = 2, /* the learner said it was stopping (a drain, shoal-stopping in a
                              stream's trailing metadata) and no stream has come up since */
  RPC_LEARNER_LOST = 3     /* a stream that was up broke without such word, and none has
                              come up since */
};

typedef struct rpc_client_stats {
  uint64_t pushed;      /* batches accepted by rpc_client_push */
  uint64_t delivered;   /* acknowledged by the server */
  uint64_t duplicates;  /* resent batches the server already had (reported by summaries) */
  uint64_t dropped;     /* dropped by RPC_DROP_OLDEST (not known to be delivered) */
  uint64_t rejected;    /* refused by the server as invalid (not retried) */
  uint64_t pending;     /* held now: queued or sent, not yet acknowledged */
  uint64_t undelivered; /* at close: batches not known to be delivered, freed */
  uint64_t streams;     /* Push streams opened */
  uint64_t rotations;   /* streams that ended normally with their summary: the rotation for
                           an acknowledgement (every ack_every batches, when idle, at close) */
  uint64_t reconnects;  /* streams that failed and were retried after a backoff; not those
                           while the learner is RPC_LEARNER_STOPPED (a stop it announced is
                           no failure) */
  int last_status;      /* gRPC status code of the last failed stream, 0 if none */
  int learner;          /* RPC_LEARNER_*: what the client last knew of the learner */
} rpc_client_stats;

/* Creates a client and starts its thread; it connects in the background. Caller owns
 * *out (rpc_client_close). Returns 0 or SHOAL_EINVAL / SHOAL_EIO (TLS files). */
int rpc_client_create(const rpc_client_config *cfg, rpc_client **out, shoal_error *err);

/* Encodes b (compressing columns that ask for it) and queues it; b is borrowed for the
 * call only (actor_id, run_id, incarnation and seq are filled in from the client).
 * Returns 0; SHOAL_ETIMEDOUT (full queue, RPC_BLOCK, block_timeout_s passed);
 * SHOAL_EINVAL (a batch that cannot be encoded: too many columns, sizes that disagree);
 * SHOAL_EPERM (the server refused this client for good: wrong run or token, the
 * message says which); SHOAL_ECLOSED (closing). */
int rpc_client_push(rpc_client *c, const rpc_batch *b, shoal_error *err);

/* Waits until every queued batch is acknowledged, for up to timeout_s.
 * Returns 0, SHOAL_ETIMEDOUT or SHOAL_EPERM. */
int rpc_client_flush(rpc_client *c, double timeout_s, shoal_error *err);

/* Counters now. Can't fail. */
void rpc_client_stats_get(rpc_client *c, rpc_client_stats *out);

/* Params pulled from the learner. Caller owns it (rpc_params_free). */
typedef struct rpc_params {
  int64_t version;
  int dtype;
  const void *blob; /* owned by the struct */
  size_t bytes;
  int nlayout;
  rpc_param_entry *layout; /* names owned by the struct */
  const char *arch;        /* Params.arch, owned by the struct; "" when the learner sent none */
} rpc_params;
/* Asks for params newer than have_version (-1: any). *out is NULL when the server has
 * nothing newer (a cheap reply), else a new rpc_params. Returns 0, SHOAL_ENET (with the
 * gRPC status in err), SHOAL_ETIMEDOUT, SHOAL_EPERM, SHOAL_ENOENT (no params yet). */
int rpc_client_pull_params(rpc_client *c, int64_t have_version, rpc_params **out, shoal_error *err);
void rpc_params_free(rpc_params *p);

/* The learner's status. counters: the learner's own figures (up to RPC_MAX_COUNTERS). */
typedef struct rpc_status {
  char run_id[128];
  int64_t policy_version;
  rpc_server_stats server;
  double uptime_s;
  int ncounters;
  rpc_counter counters[RPC_MAX_COUNTERS];
} rpc_status;
int rpc_client_status(rpc_client *c, rpc_status *out, shoal_error *err);

/* Sets hyperparameters on the learner; *applied (may be NULL) gets the count applied.
 * Returns 0, SHOAL_EINVAL (refused, err says why), SHOAL_ENOTSUP, SHOAL_ENET, ... */
int rpc_client_set_hyperparams(rpc_client *c, const rpc_hyperparam *h, int n, uint32_t *applied,
                               shoal_error *err);

/* Flushes for up to flush_s seconds, then stops the stream and frees the client.
 * final (may be NULL) gets the last counters; final->undelivered counts batches not
 * known to be delivered. Returns 0 when everything was delivered, else SHOAL_ETIMEDOUT
 * or SHOAL_EPERM with err saying how many were not. c may be NULL. */
int rpc_client_close(rpc_client *c, double flush_s, rpc_client_stats *final, shoal_error *err);

/* ------------------------------------------------------------------------- */
/* The wire reader, public for tests and tools.                               */

/* A SampleBatch as read from its encoding, pointing into the encoded bytes (no copy).
 * Unknown fields are skipped. Columns are in wire order, possibly compressed or
 * frame-stacked: rpc_batch_validate turns them into the dense, checked view. */
typedef struct rpc_wire_column {
  const char *name;
  size_t name_len;
  int dtype, codec, layout;
  int ndim;
  int64_t shape[RPC_MAX_DIMS];
  const uint8_t *data;
  size_t data_len;
  uint64_t raw_size;
  uint32_t frames;
  const uint8_t *index;
  size_t index_len;
} rpc_wire_column;
typedef struct rpc_wire_batch {
  uint64_t actor_id, incarnation, seq;
  int64_t policy_version;
  const char *run_id;
  size_t run_id_len;
  uint32_t n;
  int ncols;
  rpc_wire_column cols[RPC_MAX_COLUMNS];
} rpc_wire_batch;

/* Reads a SampleBatch encoding. Returns 0 or SHOAL_EFORMAT (truncated, bad varint,
 * group wire types, more than RPC_MAX_COLUMNS columns or RPC_MAX_DIMS dims). */
int rpc_wire_read(const uint8_t *buf, size_t len, rpc_wire_batch *out, shoal_error *err);

/* Decodes and checks a Params message (what rpc_client_pull_params receives): a known
 * dtype, a blob of whole elements, at most 65536 layout entries of at most RPC_MAX_DIMS
 * dims whose shape product equals numel and whose extent lies inside the blob. *out is
 * NULL for a not_newer reply, else a new rpc_params the caller frees (rpc_params_free).
 * Returns 0, SHOAL_EFORMAT (err says what and which entry) or SHOAL_ENOMEM. */
int rpc_params_decode(const uint8_t *buf, size_t len, rpc_params **out, shoal_error *err);

#ifdef __cplusplus
}
#endif
#endif
