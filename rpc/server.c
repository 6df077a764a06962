/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc/server.c — the learner's side of shoal.v1.Learner on the gRPC C core.
 *
 * One completion queue, polled by the server's own threads (config.threads). Every call
 * has a small state struct with one tag per operation kind; each started batch yields
 * exactly one event, the struct counts outstanding batches and is freed when the count
 * reaches zero after the close event: the gRPC C core (1.51) gives exactly one event per
 * started batch, and a call may be unreffed only once all of its batches, the close
 * included, have completed.
 * Several request_call are kept armed so that actors connecting together are not
 * serialised. A call's events are handled under its own mutex, so several polling
 * threads may serve one server.
 */
#define _GNU_SOURCE /* strdup, clock_gettime, pthread_cond_timedwait */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/shoal.pb-c.h"
#include "rpc/internal.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shoal's wire tensors are little-endian");

enum { M_UNKNOWN, M_PUSH, M_PULL, M_STATUS, M_HYPER };
enum { T_NEW, T_RECV, T_FINISH, T_CLOSE, T_SHUTDOWN };
#define PENDING_ACCEPTS 8
/* How long a stopping server still takes calls (rpc_server_destroy). */
#define ANNOUNCE_S 0.1

typedef struct scall scall;
typedef struct stag {
  scall *c;
  int kind;
} stag;

struct scall {
  rpc_server *s;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array md;
  stag t_new, t_recv, t_finish, t_close;
  pthread_mutex_t mu;
  int outstanding; /* batches started and not yet completed */
  int cancelled;   /* RECV_CLOSE_ON_SERVER's out value */
  int method;
  bool finished; /* a status was sent */
  bool closed;   /* the close event arrived */
  grpc_byte_buffer *recv;
  grpc_byte_buffer *send; /* the reply in flight, destroyed when FINISH completes */
  grpc_metadata trail[3];
  char trail_val[2][24];
  grpc_metadata init_md; /* Push: shoal-max-message, so clients refuse what would not fit */
  char init_val[24];
  /* Push streams */
  uint64_t acc_batches, acc_samples, dups, last_seq;
  int actor; /* index into s->actors, -1 until the first batch */
  /* The server's list of open calls (under s->mu), for the idle reaper. */
  scall *prev, *next;
  bool listed;
  _Atomic int64_t waiting_since_ns; /* a RECV_MESSAGE is pending since then; 0: none */
  struct sbufs *bufs;               /* taken from the server's pool at the first message */
};

/* A stream's buffers: the contiguous copy of a message that arrived in several slices
 * and the validator's scratch. Actors rotate their streams every few dozen batches, so
 * these go back to a pool and the next stream reuses them: steady-state ingest
 * allocates nothing. */
typedef struct sbufs {
  uint8_t *msg;
  size_t msg_cap;
  rpc__scratch scratch;
  struct sbufs *next;
} sbufs;

typedef struct actor_ent {
  uint64_t actor_id, incarnation, last_seq;
} actor_ent;

struct rpc_server {
  rpc_spec spec;
  rpc_batch_fn on_batch;
  rpc_status_fn on_status;
  rpc_hyperparams_fn on_hyper;
  void *user;
  char *auth; /* "Bearer <token>" or NULL */
  char *arch; /* Params.arch (JSON) or NULL; set once, before any params */
  size_t auth_len;
  grpc_server *srv;
  grpc_completion_queue *cq;
  int port;
  pthread_t threads[16];
  int nthreads;
  size_t max_msg;
  sbufs *pool; /* free stream buffers, under mu */
  int npool;
  double t0;
  pthread_mutex_t mu; /* actors, params, shutdown_done */
  pthread_cond_t cv;
  actor_ent *actors;
  int nactors, cap_actors;
  bool have_params;
  int64_t params_version;
  grpc_slice params_full, params_same; /* encoded once per version, refcounted by gRPC */
  atomic_bool draining;                /* stopping: Push streams are ended, with shoal-stopping */
  atomic_bool accepting;               /* new calls are taken (until gRPC's shutdown starts) */
  bool shutdown_done;
  stag t_shutdown;
  /* Limits (rpc_server_config) and the idle reaper. */
  int max_calls;
  int64_t idle_call_ns;
  scall *calls; /* open calls, under mu */
  int ncalls;
  pthread_t reaper;
  bool have_reaper, stop_reaper;
  _Atomic uint64_t n_over_limit, n_idle_cancelled;
  _Atomic uint64_t n_batches, n_samples, n_bytes, n_rejected, n_wrong_run, n_dups, n_refused,
      n_unauth, n_streams_total, n_streams_active, n_aborted, n_pulls, n_not_newer;
};

#define INC(x) atomic_fetch_add_explicit(&(x), 1, memory_order_relaxed)
#define ADD(x, v) atomic_fetch_add_explicit(&(x), (v), memory_order_relaxed)
#define GET(x) atomic_load_explicit(&(x), memory_order_relaxed)

/* ---- call state --------------------------------------------------------- */

static void arm_accept(rpc_server *s);

static scall *scall_new(rpc_server *s) {
  scall *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->s = s;
  c->actor = -1;
  grpc_call_details_init(&c->details);
  grpc_metadata_array_init(&c->md);
  c->t_new = (stag){c, T_NEW};
  c->t_recv = (stag){c, T_RECV};
  c->t_finish = (stag){c, T_FINISH};
  c->t_close = (stag){c, T_CLOSE};
  pthread_mutex_init(&c->mu, NULL);
  return c;
}

static void sbufs_free(sbufs *b) {
  free(b->msg);
  rpc__scratch_free(&b->scratch);
  free(b);
}

static sbufs *bufs_of(scall *c) {
  if (c->bufs) return c->bufs;
  rpc_server *s = c->s;
  pthread_mutex_lock(&s->mu);
  c->bufs = s->pool;
  if (c->bufs) {
    s->pool = c->bufs->next;
    s->npool--;
  }
  pthread_mutex_unlock(&s->mu);
  if (!c->bufs) c->bufs = calloc(1, sizeof *c->bufs);
  return c->bufs;
}

/* Adds c to the open calls, or returns false when max_calls are open. */
static bool calls_add(rpc_server *s, scall *c) {
  pthread_mutex_lock(&s->mu);
  bool ok = s->ncalls < s->max_calls;
  if (ok) {
    c->next = s->calls;
    if (s->calls) s->calls->prev = c;
    s->calls = c;
    c->listed = true;
    s->ncalls++;
  }
  pthread_mutex_unlock(&s->mu);
  return ok;
}

static void scall_free(scall *c) {
  if (c->listed) {
    rpc_server *s = c->s;
    pthread_mutex_lock(&s->mu);
    if (c->prev)
      c->prev->next = c->next;
    else
      s->calls = c->next;
    if (c->next) c->next->prev = c->prev;
    s->ncalls--;
    pthread_mutex_unlock(&s->mu);
  }
  if (c->call) grpc_call_unref(c->call);
  if (c->recv) grpc_byte_buffer_destroy(c->recv);
  if (c->send) grpc_byte_buffer_destroy(c->send);
  grpc_call_details_destroy(&c->details);
  grpc_metadata_array_destroy(&c->md);
  pthread_mutex_destroy(&c->mu);
  if (c->bufs) {
    rpc_server *s = c->s;
    pthread_mutex_lock(&s->mu);
    if (s->npool < 64) {
      c->bufs->next = s->pool;
      s->pool = c->bufs;
      s->npool++;
      c->bufs = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (c->bufs) sbufs_free(c->bufs);
  }
  free(c);
}

/* Starts a batch and counts it. A refused batch is a bug in this file (wrong op order
 * or two ops of one kind in flight), never a peer's doing. */
static void start(scall *c, const grpc_op *ops, size_t n, stag *tag) {
  rpc__tsan_handoff(tag);
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
  if (e != GRPC_CALL_OK) {
    fprintf(stderr, "rpc server: grpc_call_start_batch: error %d (kind %d)\n", (int)e, tag->kind);
    SHOAL_ASSERT(e == GRPC_CALL_OK);
  }
  c->outstanding++;
}

static void post_recv(scall *c) {
  atomic_store(&c->waiting_since_ns, (int64_t)shoal_now_ns());
  grpc_op op = {0};
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &c->recv;
  start(c, &op, 1, &c->t_recv);
}

/* Ends the call with a status. reply (may be NULL) is sent first and owned by the call.
 * Push streams carry shoal-last-seq (and shoal-bad-seq) in the trailing metadata so the
 * client knows what to resend, and shoal-stopping once the server drains. */
static void finish(scall *c, grpc_status_code code, const char *msg, grpc_byte_buffer *reply,
                   bool send_initial, uint64_t bad_seq) {
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (send_initial) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (reply) {
    c->send = reply;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = reply;
  }
  size_t ntrail = 0;
  if (c->method == M_PUSH) {
    snprintf(c->trail_val[0], sizeof c->trail_val[0], "%llu", (unsigned long long)c->last_seq);
    c->trail[0].key = grpc_slice_from_static_string("shoal-last-seq");
    c->trail[0].value = grpc_slice_from_static_string(c->trail_val[0]);
    ntrail = 1;
    if (bad_seq) {
      snprintf(c->trail_val[1], sizeof c->trail_val[1], "%llu", (unsigned long long)bad_seq);
      c->trail[1].key = grpc_slice_from_static_string("shoal-bad-seq");
      c->trail[1].value = grpc_slice_from_static_string(c->trail_val[1]);
      ntrail = 2;
    }
    /* The learner is stopping on purpose: the actor reports it as such, and does not
     * count its retries as reconnects (rpc.h, RPC_LEARNER_STOPPED). */
    if (atomic_load(&c->s->draining)) {
      c->trail[ntrail].key = grpc_slice_from_static_string("shoal-stopping");
      c->trail[ntrail].value = grpc_slice_from_static_string("1");
      ntrail++;
    }
  }
  grpc_slice details = grpc_slice_from_static_string(msg ? msg : "");
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = code;
  ops[n].data.send_status_from_server.status_details = &details;
  ops[n].data.send_status_from_server.trailing_metadata_count = ntrail;
  ops[n++].data.send_status_from_server.trailing_metadata = ntrail ? c->trail : NULL;
  c->finished = true;
  start(c, ops, n, &c->t_finish);
}

/* A packed protobuf-c message as a byte buffer (one copy, into gRPC's slice). */
static grpc_byte_buffer *pack_bb(const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  grpc_slice sl = grpc_slice_malloc(n);
  protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(sl));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
  grpc_slice_unref(sl);
  return bb;
}

static grpc_byte_buffer *bb_from_slice(grpc_slice sl) {
  return grpc_raw_byte_buffer_create(&sl, 1);
}

/* The received message as contiguous bytes: in place when it is one slice (small
 * messages), else copied once into the call's buffer. */
static int message_bytes(scall *c, grpc_byte_buffer *bb, const uint8_t **p, size_t *n) {
  size_t len = grpc_byte_buffer_length(bb);
  if (bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE &&
      bb->data.raw.slice_buffer.count == 1) {
    *p = GRPC_SLICE_START_PTR(bb->data.raw.slice_buffer.slices[0]);
    *n = GRPC_SLICE_LENGTH(bb->data.raw.slice_buffer.slices[0]);
    return 0;
  }
  sbufs *b = bufs_of(c);
  if (!b) return SHOAL_ENOMEM;
  if (b->msg_cap < len) {
    uint8_t *m = realloc(b->msg, len);
    if (!m) return SHOAL_ENOMEM;
    b->msg = m;
    b->msg_cap = len;
  }
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb)) return SHOAL_EFORMAT;
  size_t off = 0;
  grpc_slice sl;
  while (grpc_byte_buffer_reader_next(&r, &sl)) {
    size_t k = GRPC_SLICE_LENGTH(sl);
    if (off + k <= len) memcpy(b->msg + off, GRPC_SLICE_START_PTR(sl), k);
    off += k;
    grpc_slice_unref(sl);
  }
  grpc_byte_buffer_reader_destroy(&r);
  if (off != len) return SHOAL_EFORMAT;
  *p = b->msg;
  *n = len;
  return 0;
}

/* ---- Push --------------------------------------------------------------- */

/* The actor table entry for (actor_id, incarnation); a new incarnation of a known actor
 * replaces the old one (a restarted process starts again at seq 1). Under s->mu. */
static int actor_slot(rpc_server *s, uint64_t actor_id, uint64_t incarnation) {
  for (int i = 0; i < s->nactors; i++) {
    if (s->actors[i].actor_id != actor_id) continue;
    if (s->actors[i].incarnation != incarnation) {
      s->actors[i].incarnation = incarnation;
      s->actors[i].last_seq = 0;
    }
    return i;
  }
  if (s->nactors == s->cap_actors) {
    int cap = s->cap_actors ? 2 * s->cap_actors : 64;
    actor_ent *a = realloc(s->actors, (size_t)cap * sizeof *a);
    if (!a) return -1;
    s->actors = a;
    s->cap_actors = cap;
  }
  s->actors[s->nactors] = (actor_ent){actor_id, incarnation, 0};
  return s->nactors++;
}

static void push_message(scall *c, grpc_byte_buffer *bb) {
  rpc_server *s = c->s;
  shoal_error err = {0};
  const uint8_t *p;
  size_t len;
  rpc_wire_batch w;
  int rc = message_bytes(c, bb, &p, &len);
  if (!rc) rc = rpc_wire_read(p, len, &w, &err);
  if (rc) {
    INC(s->n_rejected);
    finish(c, GRPC_STATUS_INVALID_ARGUMENT, err.msg[0] ? err.msg : "SampleBatch: unreadable", NULL,
           false, 0);
    return;
  }
  size_t rl = strlen(s->spec.run_id);
  if (w.run_id_len != rl || memcmp(w.run_id, s->spec.run_id, rl)) {
    INC(s->n_wrong_run);
    shoal_error_set(&err, SHOAL_EPERM, "batch for run '%.*s', this learner runs '%s'",
                    (int)(w.run_id_len > 100 ? 100 : w.run_id_len), w.run_id ? w.run_id : "",
                    s->spec.run_id);
    finish(c, GRPC_STATUS_FAILED_PRECONDITION, err.msg, NULL, false, w.seq);
    return;
  }
  /* An id the run has no actor for gets no slot: a client cycling ids cannot grow the
   * actor table. */
  if (s->spec.max_actors && w.actor_id >= s->spec.max_actors) {
    INC(s->n_rejected);
    shoal_error_set(&err, SHOAL_ERANGE, "actor id %llu outside [0, %llu)",
                    (unsigned long long)w.actor_id, (unsigned long long)s->spec.max_actors);
    finish(c, GRPC_STATUS_INVALID_ARGUMENT, err.msg, NULL, false, w.seq);
    return;
  }
  /* A batch already accepted (resent after a reconnect) is dropped before any work. */
  pthread_mutex_lock(&s->mu);
  int slot = actor_slot(s, w.actor_id, w.incarnation);
  uint64_t last = slot >= 0 ? s->actors[slot].last_seq : 0;
  pthread_mutex_unlock(&s->mu);
  if (slot < 0) {
    finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "learner: out of memory for the actor table", NULL,
           false, 0);
    return;
  }
  c->actor = slot;
  if (w.seq >= 1 && w.seq <= last) {
    INC(s->n_dups);
    c->dups++;
    c->last_seq = last;
    post_recv(c);
    return;
  }
  rpc_batch b;
  sbufs *bufs = bufs_of(c);
  if (!bufs) {
    finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "learner: out of memory", NULL, false, 0);
    return;
  }
  rc = rpc__validate(&s->spec, &w, &bufs->scratch, &b, &err);
  if (rc) {
    c->last_seq = last;
    if (rc == SHOAL_EPERM) {
      INC(s->n_wrong_run);
      finish(c, GRPC_STATUS_FAILED_PRECONDITION, err.msg, NULL, false, w.seq);
    } else {
      INC(s->n_rejected);
      finish(c, GRPC_STATUS_INVALID_ARGUMENT, err.msg, NULL, false, w.seq);
    }
    return;
  }
  rc = s->on_batch(s->user, &b, &err);
  if (rc == SHOAL_EINVAL || rc == SHOAL_ESHAPE || rc == SHOAL_ERANGE || rc == SHOAL_ENAN) {
    /* The learner found the data itself bad (an action out of range, ...): resending
     * cannot help, so it is rejected as an invalid batch and the client drops it. */
    INC(s->n_rejected);
    c->last_seq = last;
    finish(c, GRPC_STATUS_INVALID_ARGUMENT, err.msg[0] ? err.msg : shoal_strerror(rc), NULL, false,
           w.seq);
    return;
  }
  if (rc) {
    INC(s->n_refused);
    c->last_seq = last;
    finish(c, rc == SHOAL_EFULL ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INTERNAL,
           err.msg[0] ? err.msg : shoal_strerror(rc), NULL, false, 0);
    return;
  }
  pthread_mutex_lock(&s->mu);
  if (s->actors[slot].actor_id == w.actor_id && s->actors[slot].incarnation == w.incarnation &&
      w.seq > s->actors[slot].last_seq)
    s->actors[slot].last_seq = w.seq;
  c->last_seq = s->actors[slot].last_seq;
  pthread_mutex_unlock(&s->mu);
  c->acc_batches++;
  c->acc_samples += b.n;
  INC(s->n_batches);
  ADD(s->n_samples, b.n);
  ADD(s->n_bytes, len);
  if (atomic_load(&s->draining)) {
    finish(c, GRPC_STATUS_UNAVAILABLE, "learner: shutting down", NULL, false, 0);
    return;
  }
  post_recv(c);
}

static void push_summary(scall *c) {
  Shoal__V1__PushSummary m = SHOAL__V1__PUSH_SUMMARY__INIT;
  m.accepted_batches = c->acc_batches;
  m.accepted_samples = c->acc_samples;
  m.duplicate_batches = c->dups;
  m.last_seq = c->last_seq;
  finish(c, GRPC_STATUS_OK, NULL, pack_bb(&m.base), false, 0);
}

/* ---- unary methods ------------------------------------------------------- */

int rpc__params_request_decode(const uint8_t *p, size_t n, const char *run_id, int64_t *have,
                               shoal_error *err) {
  Shoal__V1__ParamsRequest *req = shoal__v1__params_request__unpack(NULL, n, p);
  if (!req) return shoal_error_set(err, SHOAL_EFORMAT, "ParamsRequest: malformed");
  bool wrong_run = req->run_id[0] && strcmp(req->run_id, run_id);
  *have = req->have_version;
  shoal__v1__params_request__free_unpacked(req, NULL);
  if (wrong_run) return shoal_error_set(err, SHOAL_EPERM, "ParamsRequest: wrong run");
  return 0;
}

static void pull_params(scall *c, const uint8_t *p, size_t n) {
  rpc_server *s = c->s;
  shoal_error err = {0};
  int64_t have;
  int rc = rpc__params_request_decode(p, n, s->spec.run_id, &have, &err);
  if (rc) {
    finish(c, rc == SHOAL_EPERM ? GRPC_STATUS_FAILED_PRECONDITION : GRPC_STATUS_INVALID_ARGUMENT,
           err.msg, NULL, true, 0);
    return;
  }
  pthread_mutex_lock(&s->mu);
  bool have_params = s->have_params, same = have >= s->params_version;
  grpc_slice sl =
      have_params ? grpc_slice_ref(same ? s->params_same : s->params_full) : grpc_empty_slice();
  pthread_mutex_unlock(&s->mu);
  if (!have_params) {
    finish(c, GRPC_STATUS_NOT_FOUND, "learner: no params published yet", NULL, true, 0);
    return;
  }
  INC(s->n_pulls);
  if (same) INC(s->n_not_newer);
  grpc_byte_buffer *bb = bb_from_slice(sl);
  grpc_slice_unref(sl);
  finish(c, GRPC_STATUS_OK, NULL, bb, true, 0);
}

static void status_reply(scall *c) {
  rpc_server *s = c->s;
  rpc_server_stats st;
  rpc_server_stats_get(s, &st);
  Shoal__V1__Status m = SHOAL__V1__STATUS__INIT;
  m.run_id = (char *)s->spec.run_id;
  pthread_mutex_lock(&s->mu);
  m.policy_version = s->have_params ? s->params_version : -1;
  pthread_mutex_unlock(&s->mu);
  m.batches = st.batches;
  m.samples = st.samples;
  m.bytes = st.bytes;
  m.rejected = st.rejected + st.wrong_run;
  m.duplicates = st.duplicates;
  m.streams_active = st.streams_active;
  m.streams_total = st.streams_total;
  m.streams_aborted = st.streams_aborted;
  m.unauthenticated = st.unauthenticated;
  m.params_pulls = st.params_pulls;
  m.uptime_s = shoal_now_s() - s->t0;
  rpc_counter counters[RPC_MAX_COUNTERS];
  Shoal__V1__Counter cm[RPC_MAX_COUNTERS];
  Shoal__V1__Counter *cp[RPC_MAX_COUNTERS];
  int nc = RPC_MAX_COUNTERS;
  if (s->on_status) {
    memset(counters, 0, sizeof counters);
    s->on_status(s->user, counters, &nc);
    if (nc < 0) nc = 0;
    if (nc > RPC_MAX_COUNTERS) nc = RPC_MAX_COUNTERS;
  } else {
    nc = 0;
  }
  for (int i = 0; i < nc; i++) {
    shoal__v1__counter__init(&cm[i]);
    counters[i].name[sizeof counters[i].name - 1] = 0;
    cm[i].name = counters[i].name;
    cm[i].value = counters[i].value;
    cp[i] = &cm[i];
  }
  m.n_counters = (size_t)nc;
  m.counters = cp;
  finish(c, GRPC_STATUS_OK, NULL, pack_bb(&m.base), true, 0);
}

int rpc__hyperparams_decode(const uint8_t *p, size_t n, const char *run_id, rpc__hyper_req *out,
                            shoal_error *err) {
  memset(out, 0, sizeof *out);
  Shoal__V1__Hyperparams *req = shoal__v1__hyperparams__unpack(NULL, n, p);
  if (!req) return shoal_error_set(err, SHOAL_EFORMAT, "Hyperparams: malformed");
  if (req->run_id[0] && strcmp(req->run_id, run_id)) {
    shoal__v1__hyperparams__free_unpacked(req, NULL);
    return shoal_error_set(err, SHOAL_EPERM, "Hyperparams: wrong run");
  }
  if (req->n_entries > RPC__MAX_HYPER) {
    shoal__v1__hyperparams__free_unpacked(req, NULL);
    return shoal_error_set(err, SHOAL_EINVAL, "Hyperparams: more than %d entries", RPC__MAX_HYPER);
  }
  out->msg = req;
  out->n = (int)req->n_entries;
  for (int i = 0; i < out->n; i++) {
    const Shoal__V1__Hyperparam *e = req->entries[i];
    bool text = e->value_case == SHOAL__V1__HYPERPARAM__VALUE_TEXT;
    out->h[i] = (rpc_hyperparam){.key = e->key,
                                 .is_text = text,
                                 .number = text ? 0 : e->number,
                                 .text = text ? e->text : NULL};
  }
  return 0;
}

void rpc__hyperparams_release(rpc__hyper_req *r) {
  if (r->msg) shoal__v1__hyperparams__free_unpacked(r->msg, NULL);
  memset(r, 0, sizeof *r);
}

static void set_hyper(scall *c, const uint8_t *p, size_t n) {
  rpc_server *s = c->s;
  if (!s->on_hyper) {
    finish(c, GRPC_STATUS_UNIMPLEMENTED, "learner: no live hyperparameters", NULL, true, 0);
    return;
  }
  shoal_error err = {0};
  rpc__hyper_req req;
  int rc = rpc__hyperparams_decode(p, n, s->spec.run_id, &req, &err);
  if (rc) {
    finish(c, rc == SHOAL_EPERM ? GRPC_STATUS_FAILED_PRECONDITION : GRPC_STATUS_INVALID_ARGUMENT,
           err.msg, NULL, true, 0);
    return;
  }
  uint32_t applied = 0;
  rc = s->on_hyper(s->user, req.h, req.n, &applied, &err);
  rpc__hyperparams_release(&req);
  if (rc) {
    finish(c, GRPC_STATUS_INVALID_ARGUMENT, err.msg[0] ? err.msg : shoal_strerror(rc), NULL, true,
           0);
    return;
  }
  Shoal__V1__HyperparamsReply m = SHOAL__V1__HYPERPARAMS_REPLY__INIT;
  m.applied = applied;
  m.message = (char *)"";
  finish(c, GRPC_STATUS_OK, NULL, pack_bb(&m.base), true, 0);
}

/* ---- events ------------------------------------------------------------- */

/* Compares in time independent of where the first difference lies. */
static bool auth_ok(rpc_server *s, scall *c) {
  if (!s->auth) return true;
  for (size_t i = 0; i < c->md.count; i++) {
    if (grpc_slice_str_cmp(c->md.metadata[i].key, "authorization")) continue;
    const uint8_t *v = GRPC_SLICE_START_PTR(c->md.metadata[i].value);
    size_t n = GRPC_SLICE_LENGTH(c->md.metadata[i].value);
    if (n != s->auth_len) return false;
    unsigned diff = 0;
    for (size_t k = 0; k < n; k++) diff |= (unsigned)(v[k] ^ (uint8_t)s->auth[k]);
    return diff == 0;
  }
  return false;
}

static void on_new(scall *c) {
  rpc_server *s = c->s;
  if (!grpc_slice_str_cmp(c->details.method, "/shoal.v1.Learner/Push"))
    c->method = M_PUSH;
  else if (!grpc_slice_str_cmp(c->details.method, "/shoal.v1.Learner/PullParams"))
    c->method = M_PULL;
  else if (!grpc_slice_str_cmp(c->details.method, "/shoal.v1.Learner/Status"))
    c->method = M_STATUS;
  else if (!grpc_slice_str_cmp(c->details.method, "/shoal.v1.Learner/SetHyperparams"))
    c->method = M_HYPER;
  grpc_op op = {0};
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->cancelled;
  start(c, &op, 1, &c->t_close);
  if (c->method == M_PUSH) {
    INC(s->n_streams_total);
    INC(s->n_streams_active);
  }
  if (!calls_add(s, c)) {
    INC(s->n_over_limit);
    finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "learner: too many open calls, retry later", NULL,
           true, 0);
    return;
  }
  if (!auth_ok(s, c)) {
    INC(s->n_unauth);
    finish(c, GRPC_STATUS_UNAUTHENTICATED, "learner: missing or wrong token", NULL, true, 0);
    return;
  }
  if (c->method == M_UNKNOWN) {
    finish(c, GRPC_STATUS_UNIMPLEMENTED, "shoal.v1.Learner: no such method", NULL, true, 0);
    return;
  }
  if (c->method == M_PUSH && atomic_load(&s->draining)) {
    /* A client between two streams hears that the learner is stopping. */
    finish(c, GRPC_STATUS_UNAVAILABLE, "learner: shutting down", NULL, true, 0);
    return;
  }
  if (c->method == M_PUSH) {
    /* Initial metadata now, so the client learns at once that the stream is up. */
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    snprintf(c->init_val, sizeof c->init_val, "%zu", s->max_msg);
    c->init_md.key = grpc_slice_from_static_string("shoal-max-message");
    c->init_md.value = grpc_slice_from_static_string(c->init_val);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &c->init_md;
    ops[1].op = GRPC_OP_RECV_MESSAGE;
    ops[1].data.recv_message.recv_message = &c->recv;
    atomic_store(&c->waiting_since_ns, (int64_t)shoal_now_ns());
    start(c, ops, 2, &c->t_recv);
    return;
  }
  post_recv(c);
}

static void on_recv(scall *c, bool ok) {
  /* Take the message out first: the next RECV_MESSAGE posted while handling this one
   * may complete (and write c->recv) before this handler returns. */
  grpc_byte_buffer *bb = c->recv;
  c->recv = NULL;
  atomic_store(&c->waiting_since_ns, 0);
  if (!ok || c->finished) {
    /* The call broke: peer gone, message over the limit, or cancelled. */
    if (bb) grpc_byte_buffer_destroy(bb);
    return;
  }
  if (!bb) { /* the client half-closed */
    if (c->method == M_PUSH)
      push_summary(c);
    else
      finish(c, GRPC_STATUS_INVALID_ARGUMENT, "request message missing", NULL, true, 0);
    return;
  }
  if (c->method == M_PUSH) {
    push_message(c, bb);
  } else {
    const uint8_t *p;
    size_t n;
    if (message_bytes(c, bb, &p, &n)) {
      finish(c, GRPC_STATUS_INTERNAL, "learner: cannot read the request", NULL, true, 0);
    } else if (c->method == M_PULL) {
      pull_params(c, p, n);
    } else if (c->method == M_STATUS) {
      status_reply(c);
    } else {
      set_hyper(c, p, n);
    }
  }
  grpc_byte_buffer_destroy(bb);
}

static void on_event(rpc_server *s, stag *t, bool ok) {
  scall *c = t->c;
  if (t->kind == T_NEW) {
    if (!ok) { /* the server is shutting down: this accept will never get a call */
      scall_free(c);
      return;
    }
    if (atomic_load(&s->accepting)) arm_accept(s);
    pthread_mutex_lock(&c->mu);
    on_new(c);
  } else {
    pthread_mutex_lock(&c->mu);
    c->outstanding--;
    if (t->kind == T_RECV) {
      on_recv(c, ok);
    } else if (t->kind == T_FINISH) {
      if (c->send) grpc_byte_buffer_destroy(c->send);
      c->send = NULL;
    } else if (t->kind == T_CLOSE) {
      c->closed = true;
      if (c->method == M_PUSH) {
        atomic_fetch_sub(&s->n_streams_active, 1);
        /* cancelled: the call ended by an error (peer gone, message too large, cancel)
         * rather than by our status; a dead peer may look like a half-close first. */
        if (c->cancelled || !c->finished) INC(s->n_aborted);
      }
    }
  }
  bool done = c->outstanding == 0;
  pthread_mutex_unlock(&c->mu);
  if (done) scall_free(c);
}

static void *poll_thread(void *arg) {
  shoal_thread_name("shoal-rpc-poll");
  rpc_server *s = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type != GRPC_OP_COMPLETE) continue;
    rpc__tsan_taken(ev.tag);
    stag *t = ev.tag;
    if (t->kind == T_SHUTDOWN) {
      pthread_mutex_lock(&s->mu);
      s->shutdown_done = true;
      pthread_cond_broadcast(&s->cv);
      pthread_mutex_unlock(&s->mu);
      continue;
    }
    on_event(s, t, ev.success != 0);
  }
  return NULL;
}

/* Cancels calls that have waited longer than idle_call_s for a message: a peer that
 * trickles a message byte by byte or opens streams and never sends would otherwise
 * hold a call slot and its buffers for as long as it likes. Calls are ref'd under the
 * lock and cancelled outside it; the cancel's events arrive on the queue as usual. */
static void *reaper_thread(void *arg) {
  shoal_thread_name("shoal-rpc-reap");
  rpc_server *s = arg;
  enum { MAXBATCH = 64 };
  grpc_call *victims[MAXBATCH];
  double period = (double)s->idle_call_ns * 1e-9 / 4;
  if (period > 1.0) period = 1.0;
  if (period < 0.05) period = 0.05;
  pthread_mutex_lock(&s->mu);
  while (!s->stop_reaper) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + period;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    if (s->stop_reaper) break;
    int64_t now = (int64_t)shoal_now_ns();
    int nv = 0;
    for (scall *c = s->calls; c && nv < MAXBATCH; c = c->next) {
      int64_t since = atomic_load(&c->waiting_since_ns);
      if (since && now - since > s->idle_call_ns) {
        atomic_store(&c->waiting_since_ns, 0); /* once */
        grpc_call_ref(c->call);
        victims[nv++] = c->call;
      }
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < nv; i++) {
      grpc_call_cancel_with_status(victims[i], GRPC_STATUS_DEADLINE_EXCEEDED,
                                   "learner: no complete message within the idle limit", NULL);
      grpc_call_unref(victims[i]);
      INC(s->n_idle_cancelled);
    }
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static void arm_accept(rpc_server *s) {
  scall *c = scall_new(s);
  if (!c) return; /* the next accepted call re-arms */
  rpc__tsan_handoff(&c->t_new);
  grpc_call_error e =
      grpc_server_request_call(s->srv, &c->call, &c->details, &c->md, s->cq, s->cq, &c->t_new);
  if (e != GRPC_CALL_OK) scall_free(c);
}

/* ---- lifecycle ----------------------------------------------------------- */

static int server_credentials(const rpc_server_config *cfg, grpc_server_credentials **out,
                              shoal_error *err) {
  if (!cfg->tls_cert_file && !cfg->tls_key_file) {
    *out = grpc_insecure_server_credentials_create();
    return 0;
  }
  if (!cfg->tls_cert_file || !cfg->tls_key_file)
    return shoal_error_set(err, SHOAL_EINVAL, "rpc server: TLS needs both a cert and a key file");
  char *cert = NULL, *key = NULL, *ca = NULL;
  int rc = rpc__read_file(cfg->tls_cert_file, &cert, err);
  if (!rc) rc = rpc__read_file(cfg->tls_key_file, &key, err);
  if (!rc && cfg->tls_client_ca_file) rc = rpc__read_file(cfg->tls_client_ca_file, &ca, err);
  if (!rc) {
    grpc_ssl_pem_key_cert_pair pair = {key, cert};
    *out = grpc_ssl_server_credentials_create_ex(
        ca, &pair, 1,
        ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
           : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
    if (!*out) rc = shoal_error_set(err, SHOAL_EINVAL, "rpc server: bad TLS cert or key");
  }
  free(cert);
  free(key);
  free(ca);
  return rc;
}

static void stop_reaper(rpc_server *s) {
  if (!s->have_reaper) return;
  pthread_mutex_lock(&s->mu);
  s->stop_reaper = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->reaper, NULL);
  s->have_reaper = false;
}

int rpc_server_create(const rpc_server_config *cfg, const rpc_spec *spec, rpc_server **out,
                      shoal_error *err) {
  if (!cfg || !out || !cfg->on_batch)
    return shoal_error_set(err, SHOAL_EINVAL, "rpc server: config with on_batch required");
  int rc = rpc_spec_check(spec, err);
  if (rc) return rc;
  int nthreads = cfg->threads > 0 ? cfg->threads : 1;
  if (nthreads > 16)
    return shoal_error_set(err, SHOAL_EINVAL, "rpc server: threads %d (1..16)", nthreads);
  rpc_server *s = calloc(1, sizeof *s);
  if (!s) return shoal_error_set(err, SHOAL_ENOMEM, "rpc server: out of memory");
  if (rpc__spec_copy(&s->spec, spec)) {
    free(s);
    return shoal_error_set(err, SHOAL_ENOMEM, "rpc server: out of memory");
  }
  s->on_batch = cfg->on_batch;
  s->on_status = cfg->on_status;
  s->on_hyper = cfg->on_hyperparams;
  s->user = cfg->user;
  s->t0 = shoal_now_s();
  s->t_shutdown = (stag){NULL, T_SHUTDOWN};
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (cfg->token && cfg->token[0]) {
    s->auth_len = strlen("Bearer ") + strlen(cfg->token);
    s->auth = malloc(s->auth_len + 1);
    if (s->auth) snprintf(s->auth, s->auth_len + 1, "Bearer %s", cfg->token);
  }
  s->max_msg = rpc__max_message_bytes(&s->spec);
  s->max_calls = cfg->max_calls > 0 ? cfg->max_calls : 1024;
  s->idle_call_ns = (int64_t)((cfg->idle_call_s > 0 ? cfg->idle_call_s : 120.0) * 1e9);
  int per_conn = cfg->max_streams_per_conn > 0 ? cfg->max_streams_per_conn : 16;
  double hs_s = cfg->handshake_timeout_s > 0 ? cfg->handshake_timeout_s : 10.0;
  double idle_conn_s = cfg->idle_conn_s > 0 ? cfg->idle_conn_s : 600.0;
  size_t mem = cfg->memory_limit;
  if (!mem) {
    mem = (size_t)1 << 30;
    if (s->max_msg < SIZE_MAX / 16 && 16 * s->max_msg > mem) mem = 16 * s->max_msg;
  }
  grpc_init();

  grpc_server_credentials *creds = NULL;
  rc = server_credentials(cfg, &creds, err);
  if (rc) {
    grpc_shutdown();
    rpc__spec_free(&s->spec);
    free(s->auth);
    free(s);
    return rc;
  }
  /* The receive limit follows the spec (not gRPC's 4 MiB default); SO_REUSEPORT off so a
   * second learner on the same port fails loudly instead of taking some actors. */
  grpc_arg args[9];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = s->max_msg > INT_MAX ? INT_MAX : (int)s->max_msg;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
  args[1].value.integer = 0;
  /* Clients ping every keepalive_s (>= 10 s); allow it rather than answer with GOAWAY. */
  args[2].type = GRPC_ARG_INTEGER;
  args[2].key = (char *)GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS;
  args[2].value.integer = 10000;
  args[3].type = GRPC_ARG_INTEGER;
  args[3].key = (char *)GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS;
  args[3].value.integer = 1;
  /* Limits against hostile peers (rpc_server_config): streams per connection, the
   * handshake deadline, idle connections, metadata size and a memory quota. */
  args[4].type = GRPC_ARG_INTEGER;
  args[4].key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS;
  args[4].value.integer = per_conn;
  args[5].type = GRPC_ARG_INTEGER;
  args[5].key = (char *)GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS;
  args[5].value.integer = hs_s * 1000 > INT_MAX ? INT_MAX : (int)(hs_s * 1000);
  args[6].type = GRPC_ARG_INTEGER;
  args[6].key = (char *)GRPC_ARG_MAX_CONNECTION_IDLE_MS;
  args[6].value.integer = idle_conn_s * 1000 > INT_MAX ? INT_MAX : (int)(idle_conn_s * 1000);
  args[7].type = GRPC_ARG_INTEGER;
  args[7].key = (char *)GRPC_ARG_MAX_METADATA_SIZE;
  args[7].value.integer = 16384;
  grpc_resource_quota *quota = grpc_resource_quota_create("shoal-learner");
  grpc_resource_quota_resize(quota, mem);
  args[8].type = GRPC_ARG_POINTER;
  args[8].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
  args[8].value.pointer.p = quota;
  args[8].value.pointer.vtable = grpc_resource_quota_arg_vtable();
  grpc_channel_args ca = {9, args};
  s->srv = grpc_server_create(&ca, NULL);
  grpc_resource_quota_unref(quota);
  s->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(s->srv, s->cq, NULL);
  const char *listen = cfg->listen ? cfg->listen : "127.0.0.1:0";
  s->port = grpc_server_add_http2_port(s->srv, listen, creds);
  grpc_server_credentials_release(creds);
  if (s->port <= 0) {
    rc = shoal_error_set(err, SHOAL_ENET, "rpc server: cannot listen on '%s' (in use?)", listen);
    grpc_server_destroy(s->srv);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(s->cq);
    grpc_shutdown();
    rpc__spec_free(&s->spec);
    free(s->auth);
    free(s);
    return rc;
  }
  grpc_server_start(s->srv);
  s->have_reaper = pthread_create(&s->reaper, NULL, reaper_thread, s) == 0;
  atomic_store(&s->accepting, true);
  for (int i = 0; i < PENDING_ACCEPTS; i++) arm_accept(s);
  for (int i = 0; s->have_reaper && i < nthreads; i++) {
    if (pthread_create(&s->threads[i], NULL, poll_thread, s)) break;
    s->nthreads++;
  }
  if (s->nthreads == 0) {
    /* No poller: tear down polling here (pending accepts complete with success=0). */
    stop_reaper(s);
    grpc_server_shutdown_and_notify(s->srv, s->cq, &s->t_shutdown);
    grpc_server_cancel_all_calls(s->srv);
    for (;;) {
      grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
      rpc__tsan_taken(ev.tag);
      stag *t = ev.tag;
      if (t->kind == T_SHUTDOWN) break;
      on_event(s, t, ev.success != 0);
    }
    grpc_server_destroy(s->srv);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(s->cq);
    grpc_shutdown();
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->auth);
    rpc__spec_free(&s->spec);
    free(s);
    return shoal_error_set(err, SHOAL_ENOMEM, "rpc server: cannot start a thread");
  }
  *out = s;
  return 0;
}

int rpc_server_port(const rpc_server *s) { return s->port; }

int rpc_server_set_params(rpc_server *s, int64_t version, int dtype, const void *blob, size_t bytes,
                          const rpc_param_entry *layout, int nlayout, shoal_error *err) {
  if (!rpc_dtype_size(dtype) || (bytes && !blob) || nlayout < 0 || (nlayout && !layout))
    return shoal_error_set(err, SHOAL_EINVAL, "rpc set_params: bad arguments");
  size_t esize = rpc_dtype_size(dtype);
  for (int i = 0; i < nlayout; i++) {
    if (layout[i].ndim < 0 || layout[i].ndim > RPC_MAX_DIMS ||
        (layout[i].offset + layout[i].numel) * esize > bytes)
      return shoal_error_set(err, SHOAL_ERANGE, "rpc set_params: entry '%s' outside the blob",
                             layout[i].name ? layout[i].name : "?");
  }
  pthread_mutex_lock(&s->mu);
  bool older = s->have_params && version <= s->params_version;
  pthread_mutex_unlock(&s->mu);
  if (older)
    return shoal_error_set(err, SHOAL_ERANGE, "rpc set_params: version %lld is not newer",
                           (long long)version);
  Shoal__V1__ParamEntry *ents = calloc((size_t)nlayout + 1, sizeof *ents);
  Shoal__V1__ParamEntry **ep = calloc((size_t)nlayout + 1, sizeof *ep);
  if (!ents || !ep) {
    free(ents);
    free(ep);
    return shoal_error_set(err, SHOAL_ENOMEM, "rpc set_params: out of memory");
  }
  for (int i = 0; i < nlayout; i++) {
    shoal__v1__param_entry__init(&ents[i]);
    ents[i].name = (char *)(layout[i].name ? layout[i].name : "");
    ents[i].n_shape = (size_t)layout[i].ndim;
    ents[i].shape = (int64_t *)layout[i].shape;
    ents[i].offset = layout[i].offset;
    ents[i].numel = layout[i].numel;
    ep[i] = &ents[i];
  }
  Shoal__V1__Params m = SHOAL__V1__PARAMS__INIT;
  m.version = version;
  m.dtype = (Shoal__V1__DType)dtype;
  m.blob.data = (uint8_t *)blob;
  m.blob.len = bytes;
  m.n_layout = (size_t)nlayout;
  m.layout = ep;
  m.run_id = (char *)s->spec.run_id;
  /* Set before the first version and never changed after, so read without the lock. */
  if (s->arch) m.arch = s->arch;
  size_t n = protobuf_c_message_get_packed_size(&m.base);
  grpc_slice full = grpc_slice_malloc(n);
  protobuf_c_message_pack(&m.base, GRPC_SLICE_START_PTR(full));
  free(ents);
  free(ep);
  Shoal__V1__Params same = SHOAL__V1__PARAMS__INIT;
  same.version = version;
  same.not_newer = 1;
  same.run_id = (char *)s->spec.run_id;
  size_t ns = protobuf_c_message_get_packed_size(&same.base);
  grpc_slice small = grpc_slice_malloc(ns);
  protobuf_c_message_pack(&same.base, GRPC_SLICE_START_PTR(small));

  pthread_mutex_lock(&s->mu);
  grpc_slice old_full = s->params_full, old_same = s->params_same;
  bool had = s->have_params;
  s->params_full = full;
  s->params_same = small;
  s->params_version = version;
  s->have_params = true;
  pthread_mutex_unlock(&s->mu);
  if (had) { /* pulls still sending the old version hold their own refs */
    grpc_slice_unref(old_full);
    grpc_slice_unref(old_same);
  }
  return 0;
}

int rpc_server_set_arch(rpc_server *s, const char *json, shoal_error *err) {
  if (!s || !json) return shoal_error_set(err, SHOAL_EINVAL, "rpc set_arch: bad arguments");
  pthread_mutex_lock(&s->mu);
  bool late = s->have_params || s->arch;
  pthread_mutex_unlock(&s->mu);
  if (late)
    return shoal_error_set(err, SHOAL_ESTATE,
                           "rpc set_arch: the description is set once, before any params");
  char *c = strdup(json);
  if (!c) return shoal_error_set(err, SHOAL_ENOMEM, "rpc set_arch: out of memory");
  s->arch = c;
  return 0;
}

void rpc_server_stats_get(const rpc_server *cs, rpc_server_stats *o) {
  rpc_server *s = (rpc_server *)cs;
  o->batches = GET(s->n_batches);
  o->samples = GET(s->n_samples);
  o->bytes = GET(s->n_bytes);
  o->rejected = GET(s->n_rejected);
  o->wrong_run = GET(s->n_wrong_run);
  o->duplicates = GET(s->n_dups);
  o->refused = GET(s->n_refused);
  o->unauthenticated = GET(s->n_unauth);
  o->streams_total = GET(s->n_streams_total);
  o->streams_active = GET(s->n_streams_active);
  o->streams_aborted = GET(s->n_aborted);
  o->params_pulls = GET(s->n_pulls);
  o->params_not_newer = GET(s->n_not_newer);
  o->over_limit = GET(s->n_over_limit);
  o->idle_cancelled = GET(s->n_idle_cancelled);
  pthread_mutex_lock(&s->mu);
  o->actors = (uint64_t)s->nactors;
  o->calls_active = (uint64_t)s->ncalls;
  pthread_mutex_unlock(&s->mu);
}

static bool wait_shutdown(rpc_server *s, double timeout_s) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + timeout_s;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  pthread_mutex_lock(&s->mu);
  while (!s->shutdown_done)
    if (pthread_cond_timedwait(&s->cv, &s->mu, &ts)) break;
  bool done = s->shutdown_done;
  pthread_mutex_unlock(&s->mu);
  return done;
}

void rpc_server_destroy(rpc_server *s, double drain_s) { rpc_server_close(s, drain_s, NULL); }

void rpc_server_close(rpc_server *s, double drain_s, rpc_server_stats *final) {
  if (final) memset(final, 0, sizeof *final);
  if (!s) return;
  /* Order from the notes (item 15): shutdown_and_notify, poll until its tag, destroy the
   * server, shut the queue down and drain it, destroy it, grpc_shutdown. */
  atomic_store(&s->draining, true);
  /* Clients open their next Push stream at once after a rotation: calls are still taken
   * for a moment, so that one caught between two streams learns that this is a stop
   * (shoal-stopping) rather than finding the port closed. */
  pthread_mutex_lock(&s->mu);
  bool had_actors = s->nactors > 0;
  pthread_mutex_unlock(&s->mu);
  if (had_actors && drain_s > 0) {
    double announce_s = drain_s < ANNOUNCE_S ? drain_s : ANNOUNCE_S;
    struct timespec ts = {0, (long)(announce_s * 1e9)};
    nanosleep(&ts, NULL);
  }
  atomic_store(&s->accepting, false);
  stop_reaper(s);
  grpc_server_shutdown_and_notify(s->srv, s->cq, &s->t_shutdown);
  if (!wait_shutdown(s, drain_s > 0 ? drain_s : 0.0)) {
    grpc_server_cancel_all_calls(s->srv);
    while (!wait_shutdown(s, 1.0)) {
    }
  }
  grpc_server_destroy(s->srv);
  grpc_completion_queue_shutdown(s->cq);
  for (int i = 0; i < s->nthreads; i++) pthread_join(s->threads[i], NULL);
  if (final) rpc_server_stats_get(s, final);
  grpc_completion_queue_destroy(s->cq);
  if (s->have_params) {
    grpc_slice_unref(s->params_full);
    grpc_slice_unref(s->params_same);
  }
  grpc_shutdown();
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  while (s->pool) {
    sbufs *b = s->pool;
    s->pool = b->next;
    sbufs_free(b);
  }
  free(s->actors);
  free(s->auth);
  free(s->arch);
  rpc__spec_free(&s->spec);
  free(s);
}
