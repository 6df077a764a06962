/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc/client.c — the actor's side of shoal.v1.Learner.
 *
 * Batches are encoded by the pushing thread into gRPC slices and held in a ring until
 * the server acknowledges them: [head, sendp) sent and not acknowledged, [sendp, tail)
 * queued. The client thread polls the Push stream's completion queue; sends are started
 * from whichever thread sees the stream ready (the pusher when the stream is idle, the
 * client thread when a send completes), always under the client mutex, so batches on
 * the call are serialised as gRPC requires and no send waits for a poll timeout.
 * A stream is rotated every ack_every batches, and when the queue goes idle, to read
 * its PushSummary: that is the acknowledgement that frees held batches.
 */
#define _GNU_SOURCE /* strdup, clock_gettime, pthread_cond_timedwait */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <lz4.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "proto/shoal.pb-c.h"
#include "rpc/internal.h"

enum { T_SENDMD, T_INIT, T_SEND, T_HALFCLOSE, T_STATUS };

typedef struct ctag {
  int kind;
} ctag;

typedef struct slot {
  grpc_slice sl;
  uint64_t seq;
  bool rejected; /* larger than the learner's limit: never sent, freed when at the head */
} slot;

/* Encoded batches live in buffers from a pool, handed to gRPC without a copy through
 * grpc_slice_new_with_user_data; gRPC's last unref returns a buffer to the pool, from
 * whatever thread drops it. The pool is its own object, freed by whoever is last (the
 * closing client or a late unref inside grpc_shutdown), so pushing allocates nothing once
 * the pool has warmed up. */
typedef struct cbuf {
  struct cpool *pool;
  struct cbuf *next;
  size_t cap;
  _Alignas(16) uint8_t data[];
} cbuf;

typedef struct cpool {
  pthread_mutex_t mu;
  cbuf *free;
  int nfree, max_free;
  int live;    /* buffers handed out and not yet returned */
  bool closed; /* the client is gone: free what comes back, and the pool with the last */
} cpool;

static void cpool_destroy(cpool *p) {
  pthread_mutex_destroy(&p->mu);
  free(p);
}

static void cbuf_release(void *arg) {
  cbuf *b = arg;
  cpool *p = b->pool;
  pthread_mutex_lock(&p->mu);
  p->live--;
  if (!p->closed && p->nfree < p->max_free) {
    b->next = p->free;
    p->free = b;
    p->nfree++;
    b = NULL;
  }
  bool last = p->closed && p->live == 0;
  pthread_mutex_unlock(&p->mu);
  free(b);
  if (last) cpool_destroy(p);
}

/* A slice of n bytes over a pooled buffer; NULL-sized slice on allocation failure. */
static int cbuf_slice(cpool *p, size_t n, grpc_slice *out) {
  pthread_mutex_lock(&p->mu);
  cbuf **at = &p->free, *b = NULL;
  while (*at && (*at)->cap < n) at = &(*at)->next;
  if (*at) {
    b = *at;
    *at = b->next;
    p->nfree--;
  }
  pthread_mutex_unlock(&p->mu);
  if (!b) {
    size_t cap = (n + 65535) & ~(size_t)65535; /* room for batches that vary a little */
    b = malloc(sizeof *b + cap);
    if (!b) return SHOAL_ENOMEM;
    b->pool = p;
    b->cap = cap;
  }
  pthread_mutex_lock(&p->mu);
  p->live++;
  pthread_mutex_unlock(&p->mu);
  *out = grpc_slice_new_with_user_data(b->data, n, cbuf_release, b);
  return 0;
}

static void cpool_close(cpool *p) {
  pthread_mutex_lock(&p->mu);
  p->closed = true;
  cbuf *f = p->free;
  p->free = NULL;
  p->nfree = 0;
  bool last = p->live == 0;
  pthread_mutex_unlock(&p->mu);
  while (f) {
    cbuf *next = f->next;
    free(f);
    f = next;
  }
  if (last) cpool_destroy(p);
}

/* A stream with nothing to send and batches unacknowledged is rotated after this long,
 * so acknowledgements (and flush) do not wait for the next ack_every. */
#define IDLE_ACK_S 0.02

struct rpc_client {
  char *run_id, *auth;
  cpool *pool;
  uint64_t actor_id, incarnation;
  grpc_channel *ch;
  grpc_completion_queue *cq;
  pthread_t thr;
  bool thr_started;
  pthread_mutex_t mu;      /* everything below */
  pthread_cond_t cv;       /* space freed, acknowledgements, state changes */
  pthread_mutex_t push_mu; /* serialises pushers so seq order is queue order */
  slot *ring;
  uint64_t cap, head, sendp, tail, next_seq;
  size_t bytes_held, max_bytes;
  int policy;
  double block_timeout, call_timeout;
  uint64_t ack_every;
  size_t server_max; /* the learner's message limit (initial metadata), 0 until known */
  /* the Push stream */
  grpc_call *call;
  int outstanding;
  bool send_inflight, half_closed, got_initial, status_done, cancel_sent;
  uint64_t sent_on_stream;
  double last_send_t;
  grpc_byte_buffer *send_bb, *recv_bb;
  grpc_metadata_array init_md, trail_md;
  grpc_status_code status;
  grpc_slice status_details;
  grpc_metadata auth_md;
  ctag t_sendmd, t_init, t_send, t_halfclose, t_status;
  double backoff, backoff_initial, backoff_max, next_attempt;
  bool stop, closing;
  double stop_t; /* when stop was first seen by the client thread */
  int flush_waiters;
  int fatal_rc;
  char fatal_msg[256];
  rpc_client_stats st;
  shoal_rng rng;
  /* compression scratch, used by pushers under push_mu */
  uint8_t *zbuf[RPC_MAX_COLUMNS];
  size_t zcap[RPC_MAX_COLUMNS];
};

static void set_deadline_abs(struct timespec *ts, double after_s) {
  clock_gettime(CLOCK_REALTIME, ts);
  double t = (double)ts->tv_sec + ts->tv_nsec * 1e-9 + after_s;
  ts->tv_sec = (time_t)t;
  ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
}

static gpr_timespec gpr_after(double s) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_micros((int64_t)(s * 1e6), GPR_TIMESPAN));
}

/* ---- the stream (all under c->mu) ----------------------------------------- */

static void cstart(rpc_client *c, const grpc_op *ops, size_t n, ctag *tag) {
  rpc__tsan_handoff(tag);
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
  if (e != GRPC_CALL_OK) {
    fprintf(stderr, "rpc client: grpc_call_start_batch: error %d (kind %d)\n", (int)e, tag->kind);
    SHOAL_ASSERT(e == GRPC_CALL_OK);
  }
  c->outstanding++;
}

static void drop_head(rpc_client *c) {
  slot *s = &c->ring[c->head % c->cap];
  c->bytes_held -= GRPC_SLICE_LENGTH(s->sl);
  grpc_slice_unref(s->sl);
  c->head++;
  if (c->sendp < c->head) c->sendp = c->head;
}

static void ack(rpc_client *c, uint64_t last_seq) {
  while (c->head < c->sendp) {
    slot *s = &c->ring[c->head % c->cap];
    if (!s->rejected && s->seq > last_seq) break;
    if (s->rejected)
      c->st.rejected++;
    else
      c->st.delivered++;
    drop_head(c);
  }
  pthread_cond_broadcast(&c->cv);
}

static void half_close(rpc_client *c) {
  if (!c->call || c->half_closed || c->send_inflight || c->status_done) return;
  grpc_op op = {0};
  op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  c->half_closed = true;
  cstart(c, &op, 1, &c->t_halfclose);
}

static void try_send(rpc_client *c) {
  if (!c->call || c->send_inflight || c->half_closed || c->status_done || c->cancel_sent) return;
  if (c->sendp < c->head) c->sendp = c->head;
  if (c->sent_on_stream >= c->ack_every) {
    half_close(c);
    return;
  }
  if (c->sendp == c->tail) {
    /* Idle with batches unacknowledged: rotate at once when someone waits for them. */
    if (c->head < c->sendp && (c->flush_waiters || c->closing)) half_close(c);
    return;
  }
  /* Batches queued before the learner's limit was known and larger than it would break
   * every stream they are sent on: refuse them here, once. */
  slot *s = &c->ring[c->sendp % c->cap];
  if (c->server_max && GRPC_SLICE_LENGTH(s->sl) > c->server_max) {
    s->rejected = true;
    c->sendp++;
    ack(c, 0); /* frees rejected batches that reached the head */
    try_send(c);
    return;
  }
  grpc_op op = {0};
  op.op = GRPC_OP_SEND_MESSAGE;
  /* Hint only when another batch is queued behind this one and will be sent when this
   * completes: a hinted write may be held until the next unhinted one (notes, item 9). */
  bool more = c->sendp + 1 < c->tail && c->sent_on_stream + 1 < c->ack_every;
  op.flags = more ? GRPC_WRITE_BUFFER_HINT : 0;
  c->send_bb = grpc_raw_byte_buffer_create(&s->sl, 1);
  op.data.send_message.send_message = c->send_bb;
  c->send_inflight = true;
  cstart(c, &op, 1, &c->t_send);
  c->sendp++;
  c->sent_on_stream++;
  c->last_send_t = shoal_now_s();
}

static void open_stream(rpc_client *c) {
  c->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                     grpc_slice_from_static_string("/shoal.v1.Learner/Push"), NULL,
                                     gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  c->outstanding = 0;
  c->send_inflight = c->half_closed = c->got_initial = c->status_done = c->cancel_sent = false;
  c->sent_on_stream = 0;
  c->recv_bb = NULL;
  c->status = GRPC_STATUS_OK;
  c->status_details = grpc_empty_slice();
  grpc_metadata_array_init(&c->init_md);
  grpc_metadata_array_init(&c->trail_md);
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = c->auth ? 1 : 0;
  ops[0].data.send_initial_metadata.metadata = c->auth ? &c->auth_md : NULL;
  cstart(c, ops, 1, &c->t_sendmd);
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[0].data.recv_initial_metadata.recv_initial_metadata = &c->init_md;
  cstart(c, ops, 1, &c->t_init);
  /* Status posted up front so a failure surfaces at once (notes, item 14). */
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_RECV_MESSAGE;
  ops[0].data.recv_message.recv_message = &c->recv_bb;
  ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[1].data.recv_status_on_client.trailing_metadata = &c->trail_md;
  ops[1].data.recv_status_on_client.status = &c->status;
  ops[1].data.recv_status_on_client.status_details = &c->status_details;
  cstart(c, ops, 2, &c->t_status);
  c->st.streams++;
  c->sendp = c->head; /* resend whatever was not acknowledged; the server drops dups */
  try_send(c);
}

static uint64_t md_u64(const grpc_metadata_array *md, const char *key) {
  for (size_t i = 0; i < md->count; i++) {
    if (grpc_slice_str_cmp(md->metadata[i].key, key)) continue;
    char buf[32];
    size_t n = GRPC_SLICE_LENGTH(md->metadata[i].value);
    if (n >= sizeof buf) return 0;
    memcpy(buf, GRPC_SLICE_START_PTR(md->metadata[i].value), n);
    buf[n] = 0;
    return strtoull(buf, NULL, 10);
  }
  return 0;
}

static void on_status(rpc_client *c) {
  uint64_t last = md_u64(&c->trail_md, "shoal-last-seq");
  uint64_t bad = md_u64(&c->trail_md, "shoal-bad-seq");
  bool stopping = md_u64(&c->trail_md, "shoal-stopping") != 0;
  if (stopping) c->st.learner = RPC_LEARNER_STOPPED;
  if (c->status == GRPC_STATUS_OK && c->recv_bb) {
    grpc_byte_buffer_reader r;
    if (grpc_byte_buffer_reader_init(&r, c->recv_bb)) {
      grpc_slice all = grpc_byte_buffer_reader_readall(&r);
      Shoal__V1__PushSummary *m =
          shoal__v1__push_summary__unpack(NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
      if (m) {
        if (m->last_seq > last) last = m->last_seq;
        c->st.duplicates += m->duplicate_batches;
        shoal__v1__push_summary__free_unpacked(m, NULL);
      }
      grpc_slice_unref(all);
      grpc_byte_buffer_reader_destroy(&r);
    }
  }
  if (c->recv_bb) grpc_byte_buffer_destroy(c->recv_bb);
  c->recv_bb = NULL;
  ack(c, last);
  double now = shoal_now_s();
  grpc_status_code st = c->status;
  if (st == GRPC_STATUS_INVALID_ARGUMENT && bad && c->head < c->sendp &&
      c->ring[c->head % c->cap].seq == bad) {
    /* The server refused this batch as invalid: resending it cannot help. */
    drop_head(c);
    c->st.rejected++;
    pthread_cond_broadcast(&c->cv);
  }
  if (st == GRPC_STATUS_OK || (st == GRPC_STATUS_INVALID_ARGUMENT && bad)) {
    if (st == GRPC_STATUS_OK) {
      c->st.rotations++;
      if (!stopping) c->st.learner = RPC_LEARNER_UP; /* a summary: the learner is there */
    }
    c->backoff = c->backoff_initial;
    c->next_attempt = now;
  } else if (st == GRPC_STATUS_FAILED_PRECONDITION || st == GRPC_STATUS_UNAUTHENTICATED ||
             st == GRPC_STATUS_PERMISSION_DENIED || st == GRPC_STATUS_UNIMPLEMENTED) {
    c->st.last_status = (int)st;
    c->fatal_rc = SHOAL_EPERM;
    snprintf(c->fatal_msg, sizeof c->fatal_msg, "learner refused this actor (gRPC status %d): %.*s",
             (int)st, (int)GRPC_SLICE_LENGTH(c->status_details),
             (const char *)GRPC_SLICE_START_PTR(c->status_details));
    pthread_cond_broadcast(&c->cv);
  } else if (!c->stop) {
    /* Exponential backoff with jitter in [backoff/2, backoff): actors that lost the
     * learner together do not come back together. A stream that was up starts over. */
    c->st.last_status = (int)st;
    /* A refusal for now (replay full, too many calls) came from a learner that answered. */
    bool answered = c->got_initial && st == GRPC_STATUS_RESOURCE_EXHAUSTED;
    if (c->st.learner != RPC_LEARNER_STOPPED) {
      c->st.reconnects++;
      if (!answered && c->st.learner == RPC_LEARNER_UP) c->st.learner = RPC_LEARNER_LOST;
    }
    if (c->got_initial) c->backoff = c->backoff_initial;
    c->next_attempt = now + c->backoff * (0.5 + 0.5 * shoal_rng_uniform(&c->rng));
    c->backoff = c->backoff * 2 > c->backoff_max ? c->backoff_max : c->backoff * 2;
  }
  c->status_done = true;
}

static void release_call_if_done(rpc_client *c) {
  if (!c->call || c->outstanding > 0) return;
  grpc_call_unref(c->call);
  c->call = NULL;
  grpc_slice_unref(c->status_details);
  grpc_metadata_array_destroy(&c->init_md);
  grpc_metadata_array_destroy(&c->trail_md);
  pthread_cond_broadcast(&c->cv);
}

static void on_event(rpc_client *c, ctag *t, bool ok) {
  c->outstanding--;
  switch (t->kind) {
    case T_INIT:
      if (ok) {
        c->got_initial = true;
        c->server_max = (size_t)md_u64(&c->init_md, "shoal-max-message");
        /* Only a stream the learner took announces its limit: one it ends at once as it
         * stops, or one gRPC refuses, may still bring (empty) initial metadata. */
        if (c->server_max) c->st.learner = RPC_LEARNER_UP;
      }
      break;
    case T_SEND:
      c->send_inflight = false;
      grpc_byte_buffer_destroy(c->send_bb);
      c->send_bb = NULL;
      if (ok) try_send(c);
      break;
    case T_STATUS: on_status(c); break;
    default: break;
  }
  release_call_if_done(c);
}

static void *client_thread(void *arg) {
  shoal_thread_name("shoal-rpc-send");
  rpc_client *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    double now = shoal_now_s();
    if (!c->call) {
      if (c->stop) break;
      if (!c->fatal_rc && now >= c->next_attempt) open_stream(c);
    } else {
      /* Stopping: an idle stream with nothing unacknowledged ends cleanly (half-close,
       * the summary); anything else, or a learner that does not answer, is cancelled. */
      if (c->stop && !c->cancel_sent) {
        if (c->stop_t == 0) c->stop_t = now;
        if (c->head == c->tail && !c->send_inflight && now - c->stop_t < 1.0) {
          half_close(c);
        } else {
          grpc_call_cancel(c->call, NULL);
          c->cancel_sent = true;
        }
      }
      if (!c->send_inflight && c->sendp == c->tail && c->head < c->sendp &&
          now - c->last_send_t >= IDLE_ACK_S)
        half_close(c);
    }
    double wait = 0.1;
    if (!c->call && !c->fatal_rc && c->next_attempt - now < wait) wait = c->next_attempt - now;
    if (c->call && (c->head < c->sendp || c->stop)) wait = IDLE_ACK_S / 2;
    if (wait < 0.001) wait = 0.001;
    pthread_mutex_unlock(&c->mu);
    grpc_event ev = grpc_completion_queue_next(c->cq, gpr_after(wait), NULL);
    pthread_mutex_lock(&c->mu);
    if (ev.type == GRPC_OP_COMPLETE) {
      rpc__tsan_taken(ev.tag);
      on_event(c, ev.tag, ev.success != 0);
    }
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ---- create / close ------------------------------------------------------- */

static int channel_credentials(const rpc_client_config *cfg, grpc_channel_credentials **out,
                               shoal_error *err) {
  if (!cfg->tls_ca_file) {
    if (cfg->tls_cert_file || cfg->tls_key_file)
      return shoal_error_set(err, SHOAL_EINVAL, "rpc client: a client cert needs tls_ca_file");
    *out = grpc_insecure_credentials_create();
    return 0;
  }
  char *ca = NULL, *cert = NULL, *key = NULL;
  int rc = rpc__read_file(cfg->tls_ca_file, &ca, err);
  if (!rc && (cfg->tls_cert_file || cfg->tls_key_file)) {
    if (!cfg->tls_cert_file || !cfg->tls_key_file)
      rc = shoal_error_set(err, SHOAL_EINVAL, "rpc client: a client cert needs cert and key");
    if (!rc) rc = rpc__read_file(cfg->tls_cert_file, &cert, err);
    if (!rc) rc = rpc__read_file(cfg->tls_key_file, &key, err);
  }
  if (!rc) {
    grpc_ssl_pem_key_cert_pair pair = {key, cert};
    *out = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
    if (!*out) rc = shoal_error_set(err, SHOAL_EINVAL, "rpc client: bad TLS files");
  }
  free(ca);
  free(cert);
  free(key);
  return rc;
}

static void client_free(rpc_client *c) {
  if (c->pool) cpool_close(c->pool);
  for (int i = 0; i < RPC_MAX_COLUMNS; i++) free(c->zbuf[i]);
  free(c->ring);
  free(c->run_id);
  free(c->auth);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->push_mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

int rpc_client_create(const rpc_client_config *cfg, rpc_client **out, shoal_error *err) {
  if (!cfg || !out || !cfg->target || !cfg->run_id || !cfg->run_id[0])
    return shoal_error_set(err, SHOAL_EINVAL, "rpc client: target and run_id are required");
  rpc_client *c = calloc(1, sizeof *c);
  if (!c) return shoal_error_set(err, SHOAL_ENOMEM, "rpc client: out of memory");
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->push_mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->cap = cfg->queue_batches > 0 ? (uint64_t)cfg->queue_batches : 64;
  c->max_bytes = cfg->queue_bytes ? cfg->queue_bytes : (size_t)256 << 20;
  c->policy = cfg->backpressure;
  c->block_timeout = cfg->block_timeout_s;
  c->ack_every = cfg->ack_every > 0 ? (uint64_t)cfg->ack_every : (c->cap + 1) / 2;
  if (c->ack_every > c->cap) c->ack_every = c->cap;
  c->backoff_initial = cfg->backoff_initial_s > 0 ? cfg->backoff_initial_s : 0.05;
  c->backoff_max = cfg->backoff_max_s > 0 ? cfg->backoff_max_s : 2.0;
  if (c->backoff_max < c->backoff_initial) c->backoff_max = c->backoff_initial;
  c->backoff = c->backoff_initial;
  c->call_timeout = cfg->call_timeout_s > 0 ? cfg->call_timeout_s : 10.0;
  c->actor_id = cfg->actor_id;
  c->next_seq = 1;
  c->t_sendmd = (ctag){T_SENDMD};
  c->t_init = (ctag){T_INIT};
  c->t_send = (ctag){T_SEND};
  c->t_halfclose = (ctag){T_HALFCLOSE};
  c->t_status = (ctag){T_STATUS};
  shoal_rng_seed(&c->rng, shoal_now_ns() ^ ((uint64_t)getpid() << 32) ^ cfg->actor_id);
  c->incarnation = shoal_rng_next(&c->rng) | 1;
  c->ring = calloc(c->cap, sizeof *c->ring);
  c->pool = calloc(1, sizeof *c->pool);
  if (c->pool) {
    pthread_mutex_init(&c->pool->mu, NULL);
    c->pool->max_free = (int)c->cap + 8;
  }
  c->run_id = strdup(cfg->run_id);
  if (cfg->token && cfg->token[0]) {
    size_t n = strlen(cfg->token) + 8;
    c->auth = malloc(n);
    if (c->auth) snprintf(c->auth, n, "Bearer %s", cfg->token);
  }
  if (!c->ring || !c->run_id || !c->pool || (cfg->token && cfg->token[0] && !c->auth)) {
    client_free(c);
    return shoal_error_set(err, SHOAL_ENOMEM, "rpc client: out of memory");
  }
  if (c->auth) {
    c->auth_md.key = grpc_slice_from_static_string("authorization");
    c->auth_md.value = grpc_slice_from_static_string(c->auth);
  }
  grpc_init();
  grpc_channel_credentials *creds = NULL;
  int rc = channel_credentials(cfg, &creds, err);
  if (rc) {
    grpc_shutdown();
    client_free(c);
    return rc;
  }
  /* Params may be large: no receive limit on the actor side (it trusts its learner). The
   * channel's own reconnect backoff follows ours, else a learner that comes back would
   * wait for gRPC's default of 1 s and up. */
  grpc_arg args[9];
  int na = 0;
  args[na].type = GRPC_ARG_INTEGER;
  args[na].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[na++].value.integer = -1;
  args[na].type = GRPC_ARG_INTEGER;
  args[na].key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
  args[na++].value.integer = (int)(c->backoff_initial * 1000);
  args[na].type = GRPC_ARG_INTEGER;
  args[na].key = (char *)GRPC_ARG_MIN_RECONNECT_BACKOFF_MS;
  args[na++].value.integer = (int)(c->backoff_initial * 1000);
  args[na].type = GRPC_ARG_INTEGER;
  args[na].key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
  args[na++].value.integer = (int)(c->backoff_max * 1000);
  /* Keepalive pings on the (always open) Push stream: a learner host that vanished
   * without closing its sockets is detected within keepalive_s + 10 s and the client
   * reconnects, instead of waiting forever. */
  int ka_ms = (int)((cfg->keepalive_s > 0 ? cfg->keepalive_s : 30.0) * 1000);
  args[na].type = GRPC_ARG_INTEGER;
  args[na].key = (char *)GRPC_ARG_KEEPALIVE_TIME_MS;
  args[na++].value.integer = ka_ms;
  args[na].type = GRPC_ARG_INTEGER;
  args[na].key = (char *)GRPC_ARG_KEEPALIVE_TIMEOUT_MS;
  args[na++].value.integer = 10000;
  args[na].type = GRPC_ARG_INTEGER;
  args[na].key = (char *)GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA;
  args[na++].value.integer = 0;
  if (cfg->tls_server_name) {
    args[na].type = GRPC_ARG_STRING;
    args[na].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    args[na++].value.string = (char *)cfg->tls_server_name;
  }
  grpc_channel_args ca = {(size_t)na, args};
  c->ch = grpc_channel_create(cfg->target, creds, &ca);
  grpc_channel_credentials_release(creds);
  c->cq = grpc_completion_queue_create_for_next(NULL);
  if (pthread_create(&c->thr, NULL, client_thread, c)) {
    rpc_client_close(c, 0, NULL, NULL);
    return shoal_error_set(err, SHOAL_ENOMEM, "rpc client: cannot start its thread");
  }
  c->thr_started = true;
  *out = c;
  return 0;
}

/* ---- push ------------------------------------------------------------------ */

static int encode(rpc_client *c, const rpc_batch *b, uint64_t seq, grpc_slice *out,
                  shoal_error *err) {
  if (b->ncols < 1 || b->ncols > RPC_MAX_COLUMNS || b->n < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "rpc push: %d columns, %u samples", b->ncols, b->n);
  Shoal__V1__Column cols[RPC_MAX_COLUMNS];
  Shoal__V1__Column *cp[RPC_MAX_COLUMNS];
  for (int i = 0; i < b->ncols; i++) {
    const rpc_column *bc = &b->cols[i];
    Shoal__V1__Column *m = &cols[i];
    shoal__v1__column__init(m);
    if (!bc->name || bc->ndim < 0 || bc->ndim > RPC_MAX_DIMS || (bc->bytes && !bc->data))
      return shoal_error_set(err, SHOAL_EINVAL, "rpc push: column %d is malformed", i);
    m->name = (char *)bc->name;
    m->dtype = (Shoal__V1__DType)bc->dtype;
    m->n_shape = (size_t)bc->ndim;
    m->shape = (int64_t *)bc->shape;
    m->data.data = (uint8_t *)bc->data;
    m->data.len = bc->bytes;
    if (bc->frames) {
      if (bc->ndim < 1 || !bc->frame_index)
        return shoal_error_set(err, SHOAL_EINVAL, "rpc push: column '%s': frames need an index",
                               bc->name);
      if (bc->frame_planes && bc->ndim < 3)
        return shoal_error_set(err, SHOAL_EINVAL, "rpc push: column '%s': planes need ndim >= 3",
                               bc->name);
      rpc_column_spec cs = {.ndim = bc->ndim};
      memcpy(cs.shape, bc->shape, sizeof cs.shape);
      m->layout = bc->frame_planes ? SHOAL__V1__LAYOUT__LAYOUT_FRAME_PLANES
                                   : SHOAL__V1__LAYOUT__LAYOUT_FRAME_STACK;
      m->frames = bc->frames;
      m->frame_index.data = (uint8_t *)bc->frame_index;
      m->frame_index.len = (size_t)b->n * rpc_column_frames_per_item(&cs, bc->frame_planes) * 4;
    }
    if (bc->codec == RPC_CODEC_LZ4 || bc->codec == RPC_CODEC_ZSTD) {
      size_t bound = bc->codec == RPC_CODEC_LZ4 ? (size_t)LZ4_compressBound((int)bc->bytes)
                                                : ZSTD_compressBound(bc->bytes);
      if (bc->bytes > (size_t)LZ4_MAX_INPUT_SIZE && bc->codec == RPC_CODEC_LZ4)
        return shoal_error_set(err, SHOAL_EINVAL, "rpc push: column '%s' too large for LZ4",
                               bc->name);
      if (c->zcap[i] < bound) {
        uint8_t *p = realloc(c->zbuf[i], bound);
        if (!p) return shoal_error_set(err, SHOAL_ENOMEM, "rpc push: out of memory");
        c->zbuf[i] = p;
        c->zcap[i] = bound;
      }
      size_t zn;
      if (bc->codec == RPC_CODEC_LZ4) {
        int k = LZ4_compress_default(bc->data, (char *)c->zbuf[i], (int)bc->bytes, (int)bound);
        zn = k > 0 ? (size_t)k : 0;
      } else {
        /* Level 1: fast enough to keep up with an actor; frames compress well anyway. */
        zn = ZSTD_compress(c->zbuf[i], bound, bc->data, bc->bytes, 1);
        if (ZSTD_isError(zn)) zn = 0;
      }
      if (zn > 0 && zn < bc->bytes) { /* else the raw bytes are smaller: send those */
        m->codec = (Shoal__V1__Codec)bc->codec;
        m->raw_size = bc->bytes;
        m->data.data = c->zbuf[i];
        m->data.len = zn;
      }
    } else if (bc->codec != RPC_CODEC_NONE) {
      return shoal_error_set(err, SHOAL_EINVAL, "rpc push: column '%s': unknown codec %d", bc->name,
                             bc->codec);
    }
    cp[i] = m;
  }
  Shoal__V1__SampleBatch m = SHOAL__V1__SAMPLE_BATCH__INIT;
  m.actor_id = c->actor_id;
  m.incarnation = c->incarnation;
  m.run_id = c->run_id;
  m.policy_version = b->policy_version;
  m.seq = seq;
  m.n = b->n;
  m.n_columns = (size_t)b->ncols;
  m.columns = cp;
  size_t n = shoal__v1__sample_batch__get_packed_size(&m);
  if (n > c->max_bytes)
    return shoal_error_set(err, SHOAL_EINVAL, "rpc push: a batch of %zu bytes exceeds queue_bytes",
                           n);
  if (cbuf_slice(c->pool, n, out))
    return shoal_error_set(err, SHOAL_ENOMEM, "rpc push: %zu bytes for a batch", n);
  shoal__v1__sample_batch__pack(&m, GRPC_SLICE_START_PTR(*out));
  return 0;
}

int rpc_client_push(rpc_client *c, const rpc_batch *b, shoal_error *err) {
  pthread_mutex_lock(&c->push_mu);
  grpc_slice sl;
  int rc;
  pthread_mutex_lock(&c->mu);
  uint64_t seq = c->next_seq;
  rc = c->closing    ? shoal_error_set(err, SHOAL_ECLOSED, "rpc push: the client is closing")
       : c->fatal_rc ? shoal_error_set(err, c->fatal_rc, "rpc push: %s", c->fatal_msg)
                     : 0;
  pthread_mutex_unlock(&c->mu);
  if (rc) goto out;
  rc = encode(c, b, seq, &sl, err);
  if (rc) goto out;
  size_t n = GRPC_SLICE_LENGTH(sl);
  pthread_mutex_lock(&c->mu);
  if (c->server_max && n > c->server_max) {
    rc = shoal_error_set(err, SHOAL_EINVAL,
                         "rpc push: a batch of %zu bytes exceeds the learner's limit of %zu "
                         "(its spec's max_items and shapes)",
                         n, c->server_max);
    pthread_mutex_unlock(&c->mu);
    grpc_slice_unref(sl);
    goto out;
  }
  struct timespec until;
  set_deadline_abs(&until, c->block_timeout);
  while (!c->fatal_rc && (c->tail - c->head >= c->cap || c->bytes_held + n > c->max_bytes)) {
    if (c->policy == RPC_DROP_OLDEST) {
      drop_head(c);
      c->st.dropped++;
      continue;
    }
    int w = c->block_timeout > 0 ? pthread_cond_timedwait(&c->cv, &c->mu, &until)
                                 : pthread_cond_wait(&c->cv, &c->mu);
    if (w) {
      rc = shoal_error_set(err, SHOAL_ETIMEDOUT,
                           "rpc push: queue full for %.3g s (%llu batches held, learner slow "
                           "or away)",
                           c->block_timeout, (unsigned long long)(c->tail - c->head));
      break;
    }
  }
  if (!rc && c->fatal_rc) rc = shoal_error_set(err, c->fatal_rc, "rpc push: %s", c->fatal_msg);
  if (rc) {
    pthread_mutex_unlock(&c->mu);
    grpc_slice_unref(sl);
    goto out;
  }
  c->ring[c->tail % c->cap] = (slot){sl, seq, false};
  c->tail++;
  c->next_seq++;
  c->bytes_held += n;
  c->st.pushed++;
  try_send(c);
  pthread_mutex_unlock(&c->mu);
out:
  pthread_mutex_unlock(&c->push_mu);
  return rc;
}

int rpc_client_flush(rpc_client *c, double timeout_s, shoal_error *err) {
  struct timespec until;
  set_deadline_abs(&until, timeout_s);
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  c->flush_waiters++;
  try_send(c); /* rotates an idle stream for its acknowledgement */
  while (c->head < c->tail && !c->fatal_rc) {
    if (pthread_cond_timedwait(&c->cv, &c->mu, &until)) break;
    try_send(c);
  }
  c->flush_waiters--;
  if (c->fatal_rc)
    rc = shoal_error_set(err, c->fatal_rc, "rpc flush: %s", c->fatal_msg);
  else if (c->head < c->tail)
    rc = shoal_error_set(err, SHOAL_ETIMEDOUT, "rpc flush: %llu batches not acknowledged in %.3g s",
                         (unsigned long long)(c->tail - c->head), timeout_s);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void rpc_client_stats_get(rpc_client *c, rpc_client_stats *out) {
  pthread_mutex_lock(&c->mu);
  *out = c->st;
  out->pending = c->tail - c->head;
  pthread_mutex_unlock(&c->mu);
}

int rpc_client_close(rpc_client *c, double flush_s, rpc_client_stats *final, shoal_error *err) {
  if (!c) return 0;
  int rc = 0;
  pthread_mutex_lock(&c->push_mu);
  pthread_mutex_lock(&c->mu);
  c->closing = true;
  pthread_mutex_unlock(&c->mu);
  if (c->thr_started && flush_s > 0) rc = rpc_client_flush(c, flush_s, err);
  pthread_mutex_lock(&c->mu);
  c->stop = true;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (c->thr_started) pthread_join(c->thr, NULL);
  /* Order from the notes (item 16): the call is gone; channel, queue, grpc_shutdown. */
  grpc_channel_destroy(c->ch);
  grpc_completion_queue_shutdown(c->cq);
  while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(c->cq);
  c->st.pending = c->tail - c->head;
  c->st.undelivered = c->st.pending;
  while (c->head < c->tail) drop_head(c);
  c->st.pending = 0;
  if (!rc && c->st.undelivered)
    rc = shoal_error_set(err, SHOAL_ETIMEDOUT, "rpc close: %llu batches not delivered",
                         (unsigned long long)c->st.undelivered);
  if (rc && c->st.undelivered && err && err->msg[0]) {
    size_t k = strlen(err->msg);
    if (k < sizeof err->msg)
      snprintf(err->msg + k, sizeof err->msg - k, " (%llu batches not delivered)",
               (unsigned long long)c->st.undelivered);
  }
  if (final) *final = c->st;
  pthread_mutex_unlock(&c->push_mu);
  grpc_shutdown();
  client_free(c);
  return rc;
}

/* ---- unary calls ----------------------------------------------------------- */

static int status_to_rc(grpc_status_code st) {
  switch (st) {
    case GRPC_STATUS_OK: return 0;
    case GRPC_STATUS_DEADLINE_EXCEEDED: return SHOAL_ETIMEDOUT;
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_PERMISSION_DENIED:
    case GRPC_STATUS_FAILED_PRECONDITION: return SHOAL_EPERM;
    case GRPC_STATUS_NOT_FOUND: return SHOAL_ENOENT;
    case GRPC_STATUS_UNIMPLEMENTED: return SHOAL_ENOTSUP;
    case GRPC_STATUS_INVALID_ARGUMENT: return SHOAL_EINVAL;
    default: return SHOAL_ENET;
  }
}

/* One request, one reply, on a queue of its own that this thread plucks. *reply is an
 * owned contiguous slice on success. */
static int unary(rpc_client *c, const char *method, const ProtobufCMessage *req, grpc_slice *reply,
                 shoal_error *err) {
  size_t n = protobuf_c_message_get_packed_size(req);
  grpc_slice sl = grpc_slice_malloc(n);
  protobuf_c_message_pack(req, GRPC_SLICE_START_PTR(sl));
  grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_call *call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                             grpc_slice_from_static_string(method), NULL,
                                             gpr_after(c->call_timeout), NULL);
  grpc_metadata_array init_md, trail_md;
  grpc_metadata_array_init(&init_md);
  grpc_metadata_array_init(&trail_md);
  grpc_byte_buffer *recv = NULL;
  grpc_status_code st = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = c->auth ? 1 : 0;
  ops[0].data.send_initial_metadata.metadata = c->auth ? &c->auth_md : NULL;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trail_md;
  ops[5].data.recv_status_on_client.status = &st;
  ops[5].data.recv_status_on_client.status_details = &details;
  int rc = 0;
  grpc_call_error e = grpc_call_start_batch(call, ops, 6, call, NULL);
  if (e == GRPC_CALL_OK) {
    grpc_completion_queue_pluck(cq, call, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  } else {
    rc = shoal_error_set(err, SHOAL_EINTERNAL, "rpc %s: start_batch error %d", method, (int)e);
  }
  if (!rc && st != GRPC_STATUS_OK) {
    rc = shoal_error_set(err, status_to_rc(st), "rpc %s: gRPC status %d: %.*s", method, (int)st,
                         (int)GRPC_SLICE_LENGTH(details),
                         (const char *)GRPC_SLICE_START_PTR(details));
  } else if (!rc && !recv) {
    rc = shoal_error_set(err, SHOAL_ENET, "rpc %s: no reply", method);
  } else if (!rc) {
    grpc_byte_buffer_reader r;
    if (grpc_byte_buffer_reader_init(&r, recv)) {
      *reply = grpc_byte_buffer_reader_readall(&r);
      grpc_byte_buffer_reader_destroy(&r);
    } else {
      rc = shoal_error_set(err, SHOAL_EFORMAT, "rpc %s: unreadable reply", method);
    }
  }
  if (recv) grpc_byte_buffer_destroy(recv);
  grpc_byte_buffer_destroy(send);
  grpc_slice_unref(details);
  grpc_metadata_array_destroy(&init_md);
  grpc_metadata_array_destroy(&trail_md);
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  grpc_completion_queue_destroy(cq);
  return rc;
}

int rpc_client_pull_params(rpc_client *c, int64_t have_version, rpc_params **out,
                           shoal_error *err) {
  *out = NULL;
  Shoal__V1__ParamsRequest req = SHOAL__V1__PARAMS_REQUEST__INIT;
  req.actor_id = c->actor_id;
  req.run_id = c->run_id;
  req.have_version = have_version;
  grpc_slice reply;
  int rc = unary(c, "/shoal.v1.Learner/PullParams", &req.base, &reply, err);
  if (rc) return rc;
  rc = rpc_params_decode(GRPC_SLICE_START_PTR(reply), GRPC_SLICE_LENGTH(reply), out, err);
  grpc_slice_unref(reply);
  return rc;
}

/* Layout entries at most: far above any network's tensor count, and it bounds what a
 * hostile reply can make the decoder allocate for the table. */
#define RPC_MAX_PARAM_ENTRIES 65536

int rpc_params_decode(const uint8_t *buf, size_t len, rpc_params **out, shoal_error *err) {
  *out = NULL;
  Shoal__V1__Params *m = shoal__v1__params__unpack(NULL, len, buf);
  if (!m) return shoal_error_set(err, SHOAL_EFORMAT, "Params: malformed (%zu bytes)", len);
  if (m->not_newer) {
    shoal__v1__params__free_unpacked(m, NULL);
    return 0;
  }
  /* Everything an actor indexes with is checked here, once: a known dtype, a blob of
   * whole elements, and every entry's shape, element count and extent inside the blob. */
  int rc = 0;
  size_t esize = rpc_dtype_size((int)m->dtype);
  if (!esize) {
    rc = shoal_error_set(err, SHOAL_EFORMAT, "Params: unknown dtype %d (%s)", (int)m->dtype,
                         rpc_dtype_name((int)m->dtype));
    goto fail;
  }
  if (m->blob.len % esize) {
    rc = shoal_error_set(err, SHOAL_EFORMAT,
                         "Params: blob of %zu bytes is not whole elements of %zu", m->blob.len,
                         esize);
    goto fail;
  }
  if (m->n_layout > RPC_MAX_PARAM_ENTRIES) {
    rc = shoal_error_set(err, SHOAL_EFORMAT, "Params: %zu layout entries (at most %d)", m->n_layout,
                         RPC_MAX_PARAM_ENTRIES);
    goto fail;
  }
  uint64_t nelem = m->blob.len / esize;
  size_t names = 0;
  for (size_t i = 0; i < m->n_layout; i++) {
    const Shoal__V1__ParamEntry *e = m->layout[i];
    if (e->n_shape > RPC_MAX_DIMS) {
      rc = shoal_error_set(err, SHOAL_EFORMAT, "Params: entry %zu has %zu dims (at most %d)", i,
                           e->n_shape, RPC_MAX_DIMS);
      goto fail;
    }
    uint64_t prod = 1;
    for (size_t j = 0; j < e->n_shape; j++) {
      if (e->shape[j] < 0 || (e->shape[j] > 0 && prod > UINT64_MAX / (uint64_t)e->shape[j])) {
        rc = shoal_error_set(err, SHOAL_EFORMAT, "Params: entry %zu: bad shape[%zu] = %lld", i, j,
                             (long long)e->shape[j]);
        goto fail;
      }
      prod *= (uint64_t)e->shape[j];
    }
    if (prod != e->numel || e->offset > nelem || e->numel > nelem - e->offset) {
      rc = shoal_error_set(err, SHOAL_EFORMAT,
                           "Params: entry %zu ('%.64s'): %llu elements at %llu, shape holds %llu, "
                           "blob %llu",
                           i, e->name, (unsigned long long)e->numel, (unsigned long long)e->offset,
                           (unsigned long long)prod, (unsigned long long)nelem);
      goto fail;
    }
    names += strlen(e->name) + 1;
  }
  /* One allocation: the struct, the layout table, the names, the description, the blob. */
  size_t arch_len = m->arch ? strlen(m->arch) : 0;
  size_t sz = sizeof(rpc_params) + m->n_layout * sizeof(rpc_param_entry) + names + arch_len + 1 +
              16 + m->blob.len;
  rpc_params *p = calloc(1, sz);
  if (!p) {
    rc = shoal_error_set(err, SHOAL_ENOMEM, "Params: %zu bytes", sz);
    goto fail;
  }
  p->version = m->version;
  p->dtype = (int)m->dtype;
  p->nlayout = (int)m->n_layout;
  p->layout = (rpc_param_entry *)(p + 1);
  char *names_at = (char *)(p->layout + m->n_layout);
  for (size_t i = 0; i < m->n_layout; i++) {
    const Shoal__V1__ParamEntry *e = m->layout[i];
    rpc_param_entry *d = &p->layout[i];
    size_t k = strlen(e->name) + 1;
    memcpy(names_at, e->name, k);
    d->name = names_at;
    names_at += k;
    d->ndim = (int)e->n_shape;
    for (int j = 0; j < d->ndim; j++) d->shape[j] = e->shape[j];
    d->offset = e->offset;
    d->numel = e->numel;
  }
  if (arch_len) memcpy(names_at, m->arch, arch_len);
  names_at[arch_len] = '\0';
  p->arch = names_at;
  names_at += arch_len + 1;
  uint8_t *blob = (uint8_t *)(((uintptr_t)names_at + 15) & ~(uintptr_t)15);
  if (m->blob.len) memcpy(blob, m->blob.data, m->blob.len);
  p->blob = blob;
  p->bytes = m->blob.len;
  shoal__v1__params__free_unpacked(m, NULL);
  *out = p;
  return 0;
fail:
  shoal__v1__params__free_unpacked(m, NULL);
  return rc;
}

void rpc_params_free(rpc_params *p) { free(p); }

int rpc_client_status(rpc_client *c, rpc_status *out, shoal_error *err) {
  Shoal__V1__StatusRequest req = SHOAL__V1__STATUS_REQUEST__INIT;
  grpc_slice reply;
  int rc = unary(c, "/shoal.v1.Learner/Status", &req.base, &reply, err);
  if (rc) return rc;
  rc = rpc__status_decode(GRPC_SLICE_START_PTR(reply), GRPC_SLICE_LENGTH(reply), out, err);
  grpc_slice_unref(reply);
  return rc;
}

int rpc__status_decode(const uint8_t *p, size_t n, rpc_status *out, shoal_error *err) {
  Shoal__V1__Status *m = shoal__v1__status__unpack(NULL, n, p);
  if (!m) return shoal_error_set(err, SHOAL_EFORMAT, "rpc status: malformed Status");
  memset(out, 0, sizeof *out);
  snprintf(out->run_id, sizeof out->run_id, "%s", m->run_id);
  out->policy_version = m->policy_version;
  out->server.batches = m->batches;
  out->server.samples = m->samples;
  out->server.bytes = m->bytes;
  out->server.rejected = m->rejected;
  out->server.duplicates = m->duplicates;
  out->server.streams_active = m->streams_active;
  out->server.streams_total = m->streams_total;
  out->server.streams_aborted = m->streams_aborted;
  out->server.unauthenticated = m->unauthenticated;
  out->server.params_pulls = m->params_pulls;
  out->uptime_s = m->uptime_s;
  out->ncounters = m->n_counters > RPC_MAX_COUNTERS ? RPC_MAX_COUNTERS : (int)m->n_counters;
  for (int i = 0; i < out->ncounters; i++) {
    snprintf(out->counters[i].name, sizeof out->counters[i].name, "%s", m->counters[i]->name);
    out->counters[i].value = m->counters[i]->value;
  }
  shoal__v1__status__free_unpacked(m, NULL);
  return 0;
}

int rpc_client_set_hyperparams(rpc_client *c, const rpc_hyperparam *h, int n, uint32_t *applied,
                               shoal_error *err) {
  enum { MAXH = 64 };
  if (n < 0 || n > MAXH || (n && !h))
    return shoal_error_set(err, SHOAL_EINVAL, "rpc set_hyperparams: %d entries (0..64)", n);
  Shoal__V1__Hyperparam e[MAXH];
  Shoal__V1__Hyperparam *ep[MAXH];
  for (int i = 0; i < n; i++) {
    shoal__v1__hyperparam__init(&e[i]);
    e[i].key = (char *)h[i].key;
    if (h[i].is_text) {
      e[i].value_case = SHOAL__V1__HYPERPARAM__VALUE_TEXT;
      e[i].text = (char *)(h[i].text ? h[i].text : "");
    } else {
      e[i].value_case = SHOAL__V1__HYPERPARAM__VALUE_NUMBER;
      e[i].number = h[i].number;
    }
    ep[i] = &e[i];
  }
  Shoal__V1__Hyperparams req = SHOAL__V1__HYPERPARAMS__INIT;
  req.run_id = c->run_id;
  req.n_entries = (size_t)n;
  req.entries = ep;
  grpc_slice reply;
  int rc = unary(c, "/shoal.v1.Learner/SetHyperparams", &req.base, &reply, err);
  if (rc) return rc;
  Shoal__V1__HyperparamsReply *m = shoal__v1__hyperparams_reply__unpack(
      NULL, GRPC_SLICE_LENGTH(reply), GRPC_SLICE_START_PTR(reply));
  grpc_slice_unref(reply);
  if (!m) return shoal_error_set(err, SHOAL_EFORMAT, "rpc set_hyperparams: malformed reply");
  if (applied) *applied = m->applied;
  shoal__v1__hyperparams_reply__free_unpacked(m, NULL);
  return 0;
}
