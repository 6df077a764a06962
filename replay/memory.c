/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay/memory.c — the transition memory: create, insert from many threads,
 * uniform and prioritized sampling with n-step returns and frame stacks gathered
 * by following the per-slot links, priority updates with stale protection.
 *
 * Concurrency, in short (see replay.h for the contract):
 *  - a writer reserves m slots with one atomic add on head, waits only if a
 *    reader's pin covers what it would overwrite, copies without a lock, sets the
 *    priorities under tree_lock (prioritized only) and publishes each slot's seq
 *    with a release store;
 *  - the reader stores its pin and then re-reads head (both seq_cst): either a
 *    writer's reservation is visible in head, and the reader stays below what it
 *    overwrites, or the writer sees the pin and waits (Dekker's argument);
 *  - links to a successor that arrives in a later insert are set with a CAS that
 *    only succeeds while the slot still holds its owner (the owner's seq tag is in
 *    the word), and a reader also checks the successor's prev, so a link never
 *    points into an overwritten item.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <time.h>

#include "replay/internal.h"

/* ---------------------------------------------------------------- dtypes */

size_t replay_dtype_size(replay_dtype dt) {
  switch (dt) {
    case REPLAY_U8:
    case REPLAY_BOOL: return 1;
    case REPLAY_I32:
    case REPLAY_F32: return 4;
    case REPLAY_I64:
    case REPLAY_F64: return 8;
  }
  return 0;
}

static const char *const dtype_names[] = {"u8", "i32", "i64", "f32", "f64", "bool"};

const char *replay_dtype_name(replay_dtype dt) {
  if ((unsigned)dt < sizeof dtype_names / sizeof dtype_names[0]) return dtype_names[dt];
  return "?";
}

int replay_dtype_parse(const char *name, replay_dtype *out) {
  if (!name || !out) return SHOAL_EINVAL;
  for (unsigned i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
    if (strcmp(name, dtype_names[i]) == 0) {
      *out = (replay_dtype)i;
      return 0;
    }
  return SHOAL_EINVAL;
}

size_t replay_column_bytes(const replay_column *c) {
  if (!c || c->ndim < 0 || c->ndim > REPLAY_MAX_DIMS) return 0;
  size_t n = replay_dtype_size(c->dtype);
  for (int d = 0; d < c->ndim; d++) {
    if (c->shape[d] <= 0 || c->shape[d] > (int64_t)1 << 40) return 0;
    n *= (size_t)c->shape[d];
  }
  return n;
}

/* ---------------------------------------------------------------- create */

/* Levels of the fan-out-8 tree over n leaves: nodes per level, root first.
 * Returns the nodes in all. */
static size_t tree_shape(int64_t n, int *depth, int64_t *lv_n) {
  int64_t per[REPLAY__MAX_LEVELS];
  int d = 0;
  per[d++] = n;
  while (n > 1) {
    n = (n + REPLAY__FAN - 1) / REPLAY__FAN;
    per[d++] = n;
  }
  if (d == 1) per[d++] = 1; /* a root above a single leaf */
  size_t total = 0;
  for (int l = 0; l < d; l++) {
    lv_n[l] = per[d - 1 - l];
    total += (size_t)lv_n[l];
  }
  *depth = d;
  return total;
}

static int check_config(const replay_config *c, shoal_error *err) {
  if (!c) return shoal_error_set(err, SHOAL_EINVAL, "replay: config is NULL");
  if (c->kind != REPLAY_UNIFORM && c->kind != REPLAY_PRIORITIZED)
    return shoal_error_set(err, SHOAL_EINVAL, "replay: kind %d is neither uniform nor prioritized",
                           (int)c->kind);
  if (c->capacity < 2 || c->capacity >= ((int64_t)1 << 31))
    return shoal_error_set(err, SHOAL_EINVAL, "replay: capacity %lld outside [2, 2^31)",
                           (long long)c->capacity);
  if (c->streams < 0 || c->streams > (1 << 24))
    return shoal_error_set(err, SHOAL_EINVAL, "replay: streams %d outside [0, 2^24]", c->streams);
  if (c->ncols < 1 || c->ncols > REPLAY_MAX_COLUMNS)
    return shoal_error_set(err, SHOAL_EINVAL, "replay: ncols %d outside [1, %d]", c->ncols,
                           REPLAY_MAX_COLUMNS);
  for (int i = 0; i < c->ncols; i++) {
    const replay_column *col = &c->cols[i];
    size_t len = strnlen(col->name, REPLAY_NAME_MAX);
    if (len == 0 || len == REPLAY_NAME_MAX)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "replay: column %d has an empty or unterminated name", i);
    if (replay_dtype_size(col->dtype) == 0)
      return shoal_error_set(err, SHOAL_EINVAL, "replay: column '%s' has unknown dtype %d",
                             col->name, (int)col->dtype);
    if (replay_column_bytes(col) == 0)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "replay: column '%s' has a bad shape (ndim %d, dims must be > 0)",
                             col->name, col->ndim);
    for (int j = 0; j < i; j++)
      if (strcmp(c->cols[j].name, col->name) == 0)
        return shoal_error_set(err, SHOAL_EINVAL, "replay: column name '%s' appears twice",
                               col->name);
  }
  if (c->obs_column) {
    int found = 0;
    for (int i = 0; i < c->ncols; i++) found |= strcmp(c->cols[i].name, c->obs_column) == 0;
    if (!found)
      return shoal_error_set(err, SHOAL_EINVAL, "replay: obs_column '%s' is not a column",
                             c->obs_column);
  }
  if (c->frame_stack < 0 || c->frame_stack > REPLAY__MAX_STACK)
    return shoal_error_set(err, SHOAL_EINVAL, "replay: frame_stack %d outside [0, %d]",
                           c->frame_stack, REPLAY__MAX_STACK);
  if (c->frame_stack > 1 && !c->obs_column)
    return shoal_error_set(err, SHOAL_EINVAL, "replay: frame_stack %d needs an obs_column",
                           c->frame_stack);
  if (c->kind == REPLAY_PRIORITIZED) {
    if (!(c->alpha >= 0 && c->alpha <= 10))
      return shoal_error_set(err, SHOAL_EINVAL, "replay: alpha %g outside [0, 10]", c->alpha);
    if (!(c->eps > 0 && isfinite(c->eps)))
      return shoal_error_set(err, SHOAL_EINVAL, "replay: eps %g must be > 0 and finite", c->eps);
  }
  if (!(c->samples_per_insert >= 0 && isfinite(c->samples_per_insert)) ||
      !(c->spi_tolerance >= 0 && isfinite(c->spi_tolerance)) || c->min_size_to_sample < 0)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "replay: rate limiter samples_per_insert %g, spi_tolerance %g, "
                           "min_size_to_sample %lld must be finite and >= 0",
                           c->samples_per_insert, c->spi_tolerance,
                           (long long)c->min_size_to_sample);
  if (c->writer_slack >= c->capacity / 2)
    return shoal_error_set(err, SHOAL_EINVAL, "replay: writer_slack %lld must be < capacity/2",
                           (long long)c->writer_slack);
  return 0;
}

size_t replay_memory_bytes(const replay_config *c) {
  if (check_config(c, NULL)) return 0;
  size_t cap = (size_t)c->capacity, n = 0;
  for (int i = 0; i < c->ncols; i++) n += cap * replay_column_bytes(&c->cols[i]);
  if (c->memory_limit && n > c->memory_limit) n = c->memory_limit; /* the rest is spilled */
  n += cap * sizeof(replay__meta) + REPLAY__CHUNK * sizeof(replay__resolved);
  n += (size_t)(c->streams ? c->streams : 1) * sizeof(replay__stream);
  if (c->kind == REPLAY_PRIORITIZED) {
    int depth;
    int64_t lv[REPLAY__MAX_LEVELS];
    n += 2 * tree_shape(c->capacity, &depth, lv) * sizeof(double);
  }
  return n + sizeof(struct replay);
}

static void *alloc_touched(size_t n) {
  void *p = NULL;
  /* Large arrays on 2 MiB pages where the kernel allows: sampling touches random
   * slots and tree nodes, and with 4 KiB pages nearly every one is a TLB miss. */
  size_t align = n >= ((size_t)4 << 20) ? ((size_t)2 << 20) : 64;
  if (posix_memalign(&p, align, n ? n : 64)) return NULL;
  if (align > 64) madvise(p, n, MADV_HUGEPAGE);
  memset(p, 0, n); /* touch now: memory use is known and paid at create */
  return p;
}

/* memory_limit: columns of large items (observations) go to the spill file; small ones
 * (actions, log-probs) stay in memory, where a cold sample reads them without a call. */
static int spilled(const struct replay *r, int c) { return r->item[c] >= 256; }

static size_t page_up(size_t n) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return (n + pg - 1) / pg * pg;
}

/* memory_limit: maps every column into one unlinked file in dir, each column at a page
 * boundary. Nothing is touched: pages come in as items are written. */
static int spill_map(struct replay *r, const char *dir, shoal_error *err) {
  size_t cap = (size_t)r->cap, total = 0, per_item = 0;
  for (int i = 0; i < r->cfg.ncols; i++) {
    if (!spilled(r, i)) continue;
    total += page_up(cap * r->item[i]);
    per_item += r->item[i];
  }
  char path[4096];
  const char *d = dir && dir[0] ? dir : getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/shoal-replay-spill-XXXXXX", d && d[0] ? d : "/tmp");
  int fd = mkostemp(path, O_CLOEXEC);
  if (fd < 0)
    return shoal_error_set(err, SHOAL_EIO, "replay: cannot create a spill file in '%s': %s",
                           d && d[0] ? d : "/tmp", strerror(errno));
  unlink(path); /* lives as long as it is mapped */
  if (ftruncate(fd, (off_t)total)) {
    int e = errno;
    close(fd);
    return shoal_error_set(err, SHOAL_EIO, "replay: cannot size a %zu-byte spill file: %s", total,
                           strerror(e));
  }
  void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int e = errno;
    close(fd);
    return shoal_error_set(err, SHOAL_ENOMEM, "replay: cannot map a %zu-byte spill file: %s", total,
                           strerror(e));
  }
  /* Samples read single items at random: no read-ahead or fault-around of neighbours,
   * which would make a cold read map 64 KiB instead of a page. */
  madvise(base, total, MADV_RANDOM);
  r->spill_fd = fd;
  r->spill_base = base;
  r->spill_len = total;
  size_t off = 0;
  for (int i = 0; i < r->cfg.ncols; i++) {
    if (!spilled(r, i)) {
      if (!(r->col[i] = alloc_touched(cap * r->item[i])))
        return shoal_error_set(err, SHOAL_ENOMEM, "replay: out of memory");
      continue;
    }
    r->col[i] = r->spill_base + off;
    off += page_up(cap * r->item[i]);
  }
  if (r->obs >= 0 && spilled(r, r->obs) &&
      !(r->gather_buf = malloc((size_t)(2 * r->k + 64) * r->item[r->obs])))
    return shoal_error_set(err, SHOAL_ENOMEM, "replay: out of memory");
  /* At least what writers and one sample touch near the head stays resident. */
  r->hot = (int64_t)(r->cfg.memory_limit / (per_item ? per_item : 1));
  int64_t floor_hot = r->slack + 4096;
  if (r->hot < floor_hot) r->hot = floor_hot;
  if (r->hot > r->cap) r->hot = r->cap;
  r->sweep_every = r->hot / 8 > 1024 ? r->hot / 8 : 1024;
  return 0;
}

/* Releases the resident pages of items older than the newest r->hot, when the head has
 * moved sweep_every items on (an inserting thread, after its insert). Samples read cold
 * items with pread (gather), so only writes bring pages in; a page released while a
 * sample copies from it is read back from the file, unchanged. Their data stays in the
 * file (the kernel writes it back). Writers work near the head, never in the released
 * range. */
static void spill_sweep(struct replay *r) {
  if (!r->spill_base) return;
  uint64_t head = atomic_load(&r->head), at = atomic_load(&r->swept_at);
  if (head < at + (uint64_t)r->sweep_every) return;
  if (!atomic_compare_exchange_strong(&r->swept_at, &at, head)) return; /* another does it */
  if ((int64_t)head - 1 <= r->hot) return;
  uint64_t lo = head > (uint64_t)r->cap ? head - (uint64_t)r->cap : 1;
  uint64_t hi = head - (uint64_t)r->hot; /* items [lo, hi) go */
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  /* In slots, the range may wrap around the ring: at most two pieces. */
  int64_t s0 = replay__slot(r, lo), n = (int64_t)(hi - lo);
  int64_t piece[2][2] = {{s0, s0 + n < r->cap ? s0 + n : r->cap}, {0, 0}};
  if (s0 + n > r->cap) piece[1][1] = s0 + n - r->cap;
  for (int c = 0; c < r->cfg.ncols; c++)
    for (int k = 0; k < 2; k++) {
      if (!spilled(r, c) || piece[k][1] <= piece[k][0]) continue;
      uintptr_t a = (uintptr_t)(r->col[c] + (size_t)piece[k][0] * r->item[c]);
      uintptr_t b = (uintptr_t)(r->col[c] + (size_t)piece[k][1] * r->item[c]);
      a = (a + pg - 1) / pg * pg; /* whole pages inside the range only */
      b = b / pg * pg;
      if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
    }
  atomic_fetch_add(&r->n_sweeps, 1);
}

int replay_create(const replay_config *cfg, replay **out, shoal_error *err) {
  int rc = check_config(cfg, err);
  if (rc) return rc;
  if (!out) return shoal_error_set(err, SHOAL_EINVAL, "replay_create: out is NULL");
  struct replay *r = calloc(1, sizeof *r);
  if (!r) return shoal_error_set(err, SHOAL_ENOMEM, "replay: out of memory");
  r->cfg = *cfg;
  if (r->cfg.streams == 0) r->cfg.streams = 1;
  if (r->cfg.frame_stack == 0) r->cfg.frame_stack = 1;
  r->obs = -1;
  if (cfg->obs_column) {
    snprintf(r->obs_name, sizeof r->obs_name, "%s", cfg->obs_column);
    r->cfg.obs_column = r->obs_name;
    for (int i = 0; i < cfg->ncols; i++)
      if (strcmp(cfg->cols[i].name, r->obs_name) == 0) r->obs = i;
  }
  r->k = r->cfg.frame_stack;
  r->cap = cfg->capacity;
  r->slack = cfg->writer_slack < 0 ? cfg->capacity / 64 : cfg->writer_slack;
  if (cfg->kind == REPLAY_UNIFORM) r->cfg.alpha = r->cfg.eps = 0;
  size_t cap = (size_t)r->cap, col_bytes = 0;
  int ok = 1;
  r->spill_fd = -1;
  for (int i = 0; i < cfg->ncols; i++) {
    r->item[i] = replay_column_bytes(&cfg->cols[i]);
    col_bytes += cap * r->item[i];
  }
  size_t spillable = 0;
  for (int i = 0; i < cfg->ncols; i++) spillable += spilled(r, i) ? cap * r->item[i] : 0;
  if (cfg->memory_limit && col_bytes > cfg->memory_limit && spillable > 0) {
    rc = spill_map(r, cfg->spill_dir, err);
    r->cfg.spill_dir = NULL; /* borrowed for create only */
    if (rc) {
      for (int i = 0; i < cfg->ncols; i++)
        if (!spilled(r, i)) free(r->col[i]);
      if (r->spill_base) {
        munmap(r->spill_base, r->spill_len);
        close(r->spill_fd);
      }
      free(r->gather_buf);
      free(r);
      return rc;
    }
  } else {
    r->hot = r->cap;
    for (int i = 0; i < cfg->ncols; i++)
      ok &= (r->col[i] = alloc_touched(cap * r->item[i])) != NULL;
  }
  ok &= (r->meta = alloc_touched(cap * sizeof *r->meta)) != NULL;
  ok &= (r->scratch = alloc_touched(REPLAY__CHUNK * sizeof *r->scratch)) != NULL;
  ok &= (r->streams = alloc_touched((size_t)r->cfg.streams * sizeof *r->streams)) != NULL;
  if (cfg->kind == REPLAY_PRIORITIZED) {
    size_t nodes = tree_shape(r->cap, &r->depth, r->lv_n);
    ok &= (r->sum = alloc_touched(nodes * sizeof(double))) != NULL;
    ok &= (r->mn = alloc_touched(nodes * sizeof(double))) != NULL;
    if (ok) {
      size_t off = 0;
      for (int l = 0; l < r->depth; l++) {
        r->lsum[l] = r->sum + off;
        r->lmin[l] = r->mn + off;
        off += (size_t)r->lv_n[l];
      }
    }
  }
  if (ok && cfg->samples_per_insert > 0) {
    replay_limiter_config lc = {.samples_per_insert = cfg->samples_per_insert,
                                .insert_tolerance = cfg->spi_tolerance,
                                .sample_tolerance = cfg->spi_tolerance,
                                .min_size_to_sample = cfg->min_size_to_sample};
    ok = replay_limiter_create(&lc, &r->lim, NULL) == 0;
  }
  if (!ok || pthread_mutex_init(&r->tree_lock, NULL)) {
    replay_destroy(r);
    return shoal_error_set(err, SHOAL_ENOMEM, "replay: out of memory for %zu bytes",
                           replay_memory_bytes(cfg));
  }
  replay__clear(r);
  *out = r;
  return 0;
}

void replay__clear(struct replay *r) {
  for (int64_t i = 0; i < r->cap; i++) {
    atomic_store_explicit(&r->meta[i].seq, 0, memory_order_relaxed);
    atomic_store_explicit(&r->meta[i].link, 0, memory_order_relaxed);
    r->meta[i].prev = 0;
    r->meta[i].flags = 0;
    r->meta[i].reward = 0;
  }
  for (int i = 0; i < r->cfg.streams; i++) {
    atomic_store(&r->streams[i].last, 0);
    atomic_store(&r->streams[i].busy, 0);
  }
  if (r->sum) {
    size_t nodes = 0;
    for (int l = 0; l < r->depth; l++) nodes += (size_t)r->lv_n[l];
    for (size_t i = 0; i < nodes; i++) {
      r->sum[i] = 0;
      r->mn[i] = INFINITY;
    }
  }
  r->max_p = 1.0;
  atomic_store(&r->head, 1);
  atomic_store(&r->swept_at, 0);
  atomic_store(&r->pin, UINT64_MAX);
  atomic_store(&r->n_steps, 0);
  atomic_store(&r->n_tails, 0);
  atomic_store(&r->n_tails_held, 0);
  atomic_store(&r->n_sampled, 0);
  atomic_store(&r->n_rejected, 0);
  atomic_store(&r->n_stale, 0);
  atomic_store(&r->n_waits, 0);
  atomic_store(&r->wait_ns, 0);
  if (r->lim) replay_limiter_set_counts(r->lim, 0, 0);
}

void replay_destroy(replay *r) {
  if (!r) return;
  for (int i = 0; i < REPLAY_MAX_COLUMNS; i++)
    if (!r->spill_base || i >= r->cfg.ncols || !spilled(r, i)) free(r->col[i]);
  if (r->spill_base) {
    munmap(r->spill_base, r->spill_len);
    close(r->spill_fd);
  }
  free(r->gather_buf);
  free(r->meta);
  free(r->scratch);
  free(r->streams);
  free(r->sum);
  free(r->mn);
  pthread_mutex_destroy(&r->tree_lock);
  replay_limiter_destroy(r->lim);
  free(r);
}

const replay_config *replay_get_config(const replay *r) { return &r->cfg; }

int replay_column_index(const replay *r, const char *name) {
  if (!r || !name) return -1;
  for (int i = 0; i < r->cfg.ncols; i++)
    if (strcmp(r->cfg.cols[i].name, name) == 0) return i;
  return -1;
}

void replay_get_stats(const replay *r, replay_stats *o) {
  struct replay *m = (struct replay *)r;
  memset(o, 0, sizeof *o);
  o->inserted_steps = atomic_load(&m->n_steps);
  o->inserted_tails = atomic_load(&m->n_tails);
  uint64_t h = atomic_load(&m->head) - 1;
  o->held = (int64_t)(h < (uint64_t)m->cap ? h : (uint64_t)m->cap);
  o->held_tails = atomic_load(&m->n_tails_held);
  o->sampled = atomic_load(&m->n_sampled);
  o->rejected_draws = atomic_load(&m->n_rejected);
  o->stale_updates = atomic_load(&m->n_stale);
  o->writer_waits = atomic_load(&m->n_waits);
  o->writer_wait_s = (double)atomic_load(&m->wait_ns) * 1e-9;
  o->next_seq = h + 1;
  o->resident_items = m->hot;
  o->spill_sweeps = atomic_load(&m->n_sweeps);
  if (m->lim) {
    replay_limiter_stats ls;
    replay_limiter_stats_get(m->lim, &ls);
    o->limiter_waits = ls.insert_waits + ls.sample_waits;
  }
  if (m->sum) {
    pthread_mutex_lock(&m->tree_lock);
    o->priority_total = m->lsum[0][0];
    o->priority_max = m->max_p;
    pthread_mutex_unlock(&m->tree_lock);
  }
}

double replay_beta_linear(double beta0, double beta1, int64_t step, int64_t steps) {
  if (steps <= 0 || step >= steps) return beta1;
  if (step <= 0) return beta0;
  return beta0 + (beta1 - beta0) * ((double)step / (double)steps);
}

/* ---------------------------------------------------------------- trees */

/* Recomputes node x of level l from its children. */
static inline void tree_fix(struct replay *r, int l, int64_t x) {
  int64_t c0 = x * REPLAY__FAN, c1 = c0 + REPLAY__FAN;
  if (c1 > r->lv_n[l + 1]) c1 = r->lv_n[l + 1];
  const double *cs = r->lsum[l + 1], *cm = r->lmin[l + 1];
  double sm = 0, mn = INFINITY;
  for (int64_t c = c0; c < c1; c++) {
    sm += cs[c];
    mn = cm[c] < mn ? cm[c] : mn;
  }
  r->lsum[l][x] = sm;
  r->lmin[l][x] = mn;
}

void replay__tree_set(struct replay *r, int64_t a, int64_t b, const double *pr) {
  double *ls = replay__leaves(r), *lm = replay__leaves_min(r);
  for (int64_t i = a; i < b; i++) {
    double p = pr[i - a];
    ls[i] = p;
    lm[i] = p > 0 ? p : INFINITY;
  }
  /* Parents level by level, recomputed from their children (no drift from
   * adding differences): O((b - a) + depth) for a contiguous range. */
  for (int l = r->depth - 2; l >= 0; l--) {
    a /= REPLAY__FAN;
    b = (b - 1) / REPLAY__FAN + 1;
    for (int64_t x = a; x < b; x++) tree_fix(r, l, x);
  }
}

void replay__tree_rebuild(struct replay *r) {
  for (int l = r->depth - 2; l >= 0; l--)
    for (int64_t x = 0; x < r->lv_n[l]; x++) tree_fix(r, l, x);
}

static double priority_of(const struct replay *r, double td_abs) {
  return pow(td_abs + r->cfg.eps, r->cfg.alpha);
}

/* ---------------------------------------------------------------- pin */

void replay__pin(struct replay *r, int64_t slack, uint64_t *lo, uint64_t *hi) {
  uint64_t h1 = atomic_load(&r->head);
  atomic_store(&r->pin, replay__low(r, h1, slack));
  uint64_t h2 = atomic_load(&r->head);
  uint64_t l = replay__low(r, h2, slack);
  /* Raise the pin to what is read: writers reserved before h2 overwrite only
   * below h2 - cap <= l, so none of them waits on this reader. */
  atomic_store(&r->pin, l);
  *lo = l;
  *hi = h2;
}

void replay__unpin(struct replay *r) {
  atomic_store_explicit(&r->pin, UINT64_MAX, memory_order_release);
  replay__pin_moved(r);
}

void replay__pin_moved(struct replay *r) {
  atomic_fetch_add(&r->pin_epoch, 1);
  if (atomic_load(&r->pin_waiters) > 0)
    syscall(SYS_futex, (uint32_t *)&r->pin_epoch, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Waits until the pin allows overwriting item ov. Sleeps rather than spins: when
 * cores are oversubscribed, the reader holding the pin may be waiting for a core,
 * and a spinning writer would keep it from one. The reader bumps pin_epoch after
 * moving the pin; a writer counted in pin_waiters before it read the epoch is
 * either woken or sees the new epoch (both sides are seq_cst). A 1 ms timeout
 * bounds any other case. */
static void wait_for_pin(struct replay *r, uint64_t ov) {
  for (;;) {
    atomic_fetch_add(&r->pin_waiters, 1);
    uint32_t e = atomic_load(&r->pin_epoch);
    if (ov < atomic_load(&r->pin)) {
      atomic_fetch_sub(&r->pin_waiters, 1);
      return;
    }
    struct timespec ts = {0, 1000000};
    syscall(SYS_futex, (uint32_t *)&r->pin_epoch, FUTEX_WAIT_PRIVATE, e, &ts, NULL, 0);
    atomic_fetch_sub(&r->pin_waiters, 1);
  }
}

/* ---------------------------------------------------------------- rate limiter */

/* The memory's limiter (replay/limiter.h): inserts and samples wait up to
 * limit_timeout_ms; without one nothing waits. */
static int limit_enter(struct replay *r, int inserting, double amount, shoal_error *err) {
  if (!r->lim) return 0;
  int64_t ms = r->cfg.limit_timeout_ms;
  return inserting ? replay_limiter_insert(r->lim, amount, ms, err)
                   : replay_limiter_sample(r->lim, amount, ms, err);
}

void replay_close(replay *r) {
  if (r && r->lim) replay_limiter_close(r->lim);
}

/* ---------------------------------------------------------------- insert */

static inline uint64_t link_word(uint64_t owner, uint64_t dist) {
  return ((owner & 0xffffffffu) << 32) | (dist & 0xffffffffu);
}

/* Copies items [i0, i1) of a packed source column into consecutive sequence
 * numbers starting at s, splitting at the ring's end. */
static void copy_run(struct replay *r, int c, uint64_t s, const uint8_t *src, int64_t count) {
  size_t isz = r->item[c];
  while (count > 0) {
    int64_t slot = replay__slot(r, s);
    int64_t run = r->cap - slot < count ? r->cap - slot : count;
    memcpy(r->col[c] + (size_t)slot * isz, src, (size_t)run * isz);
    src += (size_t)run * isz;
    s += (uint64_t)run;
    count -= run;
  }
}

int replay_insert(replay *r, int stream, const replay_steps *st, shoal_error *err) {
  if (!r || !st) return shoal_error_set(err, SHOAL_EINVAL, "replay_insert: NULL argument");
  if (stream < 0 || stream >= r->cfg.streams)
    return shoal_error_set(err, SHOAL_ERANGE, "replay_insert: stream %d outside [0, %d)", stream,
                           r->cfg.streams);
  int64_t n = st->n;
  if (n < 1) return shoal_error_set(err, SHOAL_EINVAL, "replay_insert: n = %lld", (long long)n);
  for (int c = 0; c < r->cfg.ncols; c++)
    if (!st->cols[c])
      return shoal_error_set(err, SHOAL_EINVAL, "replay_insert: column '%s' is NULL",
                             r->cfg.cols[c].name);
  if (!st->reward) return shoal_error_set(err, SHOAL_EINVAL, "replay_insert: reward is NULL");
  int64_t K = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(st->reward[i]))
      return shoal_error_set(err, SHOAL_ENAN, "replay_insert: reward[%lld] = %g is not finite",
                             (long long)i, (double)st->reward[i]);
    if (st->priority && !(st->priority[i] >= 0 && isfinite(st->priority[i])))
      return shoal_error_set(err, isfinite(st->priority[i]) ? SHOAL_EINVAL : SHOAL_ENAN,
                             "replay_insert: priority[%lld] = %g must be finite and >= 0",
                             (long long)i, (double)st->priority[i]);
    K += (st->terminated && st->terminated[i]) || (st->truncated && st->truncated[i]);
  }
  int tails = r->obs >= 0;
  if (tails && K > 0 && !st->final_obs)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "replay_insert: %lld episode(s) end but final_obs is NULL",
                           (long long)K);
  int64_t m = n + (tails ? K : 0);
  if (m > r->cap - r->slack)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "replay_insert: %lld items exceed capacity %lld minus slack %lld",
                           (long long)m, (long long)r->cap, (long long)r->slack);
  replay__stream *sm = &r->streams[stream];
  int expect = 0;
  if (!atomic_compare_exchange_strong(&sm->busy, &expect, 1))
    return shoal_error_set(err, SHOAL_ESTATE,
                           "replay_insert: stream %d is being inserted by another thread", stream);
  int lrc = limit_enter(r, 1, (double)n, err);
  if (lrc) {
    atomic_store_explicit(&sm->busy, 0, memory_order_release);
    return lrc;
  }

  uint64_t a = atomic_fetch_add(&r->head, (uint64_t)m);
  uint64_t top = a + (uint64_t)m - 1;
  if (top > (uint64_t)r->cap) {
    uint64_t ov = top - (uint64_t)r->cap; /* the newest item this insert overwrites */
    if (ov >= atomic_load(&r->pin)) {
      uint64_t t0 = shoal_now_ns();
      atomic_fetch_add_explicit(&r->n_waits, 1, memory_order_relaxed);
      wait_for_pin(r, ov);
      atomic_fetch_add_explicit(&r->wait_ns, shoal_now_ns() - t0, memory_order_relaxed);
    }
  }
  /* A slow writer can be lapped: another may reserve the same slots one capacity
   * later. Take each slot only once its previous item is published (0 on the
   * first lap), so two writers never write one slot. */
  uint64_t lap_t0 = 0;
  int64_t tails_gone = 0; /* tails this insert overwrites (their slot is ours once published) */
  /* The m slots are consecutive around the ring: stepped, not divided for (a 64-bit
   * division per item was half of an insert's time). */
  const int64_t slot_a = replay__slot(r, a);
  for (int64_t j = 0, slot = slot_a; j < m; j++) {
    uint64_t q = a + (uint64_t)j, before = q > (uint64_t)r->cap ? q - (uint64_t)r->cap : 0;
    _Atomic uint64_t *sq = &r->meta[slot].seq;
    while (atomic_load_explicit(sq, memory_order_acquire) != before) {
      if (!lap_t0) lap_t0 = shoal_now_ns();
      sched_yield();
    }
    if (before && (r->meta[slot].flags & REPLAY__TAIL)) tails_gone++;
    atomic_store_explicit(sq, 0, memory_order_relaxed);
    if (++slot == r->cap) slot = 0;
  }
  if (lap_t0) {
    atomic_fetch_add_explicit(&r->n_waits, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->wait_ns, shoal_now_ns() - lap_t0, memory_order_relaxed);
  }

  /* Columns: runs of steps between episode ends are contiguous in the ring. */
  uint64_t prev = atomic_load_explicit(&sm->last, memory_order_relaxed);
  uint64_t first = a;
  uint64_t s = a;
  int64_t run0 = 0, ended = 0, slot_s = slot_a; /* slot_s: s's slot */
  for (int64_t i = 0; i < n; i++) {
    int term = st->terminated && st->terminated[i];
    int trunc = st->truncated && st->truncated[i];
    int64_t slot = slot_s;
    r->meta[slot].prev = prev;
    r->meta[slot].reward = st->reward[i];
    r->meta[slot].flags =
        (uint8_t)((term ? REPLAY__TERM : 0) | (!term && trunc ? REPLAY__TRUNC : 0));
    int end = term || trunc;
    if (end || i == n - 1) {
      int64_t count = i + 1 - run0;
      uint64_t s0 = s + 1 - (uint64_t)count;
      for (int c = 0; c < r->cfg.ncols; c++)
        copy_run(r, c, s0, (const uint8_t *)st->cols[c] + (size_t)run0 * r->item[c], count);
      run0 = i + 1;
    }
    int64_t ts = slot + 1 == r->cap ? 0 : slot + 1; /* s + 1's slot */
    if (end && tails) {
      memcpy(r->col[r->obs] + (size_t)ts * r->item[r->obs],
             (const uint8_t *)st->final_obs + (size_t)ended * r->item[r->obs], r->item[r->obs]);
      r->meta[ts].prev = s;
      r->meta[ts].reward = 0;
      r->meta[ts].flags = REPLAY__TAIL;
      atomic_store_explicit(&r->meta[ts].link, link_word(s + 1, 0), memory_order_relaxed);
      atomic_store_explicit(&r->meta[slot].link, link_word(s, 1), memory_order_relaxed);
      ended++;
      prev = 0;
      s += 2;
      slot_s = ts + 1 == r->cap ? 0 : ts + 1;
    } else if (end) {
      atomic_store_explicit(&r->meta[slot].link, link_word(s, 0), memory_order_relaxed);
      prev = 0;
      s += 1;
      slot_s = ts;
    } else {
      atomic_store_explicit(&r->meta[slot].link, link_word(s, i < n - 1 ? 1 : 0),
                            memory_order_relaxed);
      prev = s;
      s += 1;
      slot_s = ts;
    }
  }
  SHOAL_ASSERT(s == a + (uint64_t)m);

  if (r->sum) {
    /* Priorities: a short lock for the whole call, leaves set in contiguous runs. */
    double buf[256];
    pthread_mutex_lock(&r->tree_lock);
    if (st->priority)
      for (int64_t i = 0; i < n; i++) {
        double p = priority_of(r, st->priority[i]);
        if (p > r->max_p) r->max_p = p;
      }
    int64_t i = 0; /* step index of the next step */
    uint64_t q = a;
    while (q < a + (uint64_t)m) {
      int64_t slot = replay__slot(r, q);
      int64_t run = r->cap - slot;
      if (run > (int64_t)(a + (uint64_t)m - q)) run = (int64_t)(a + (uint64_t)m - q);
      if (run > 256) run = 256;
      for (int64_t j = 0; j < run; j++) {
        if (r->meta[slot + j].flags & REPLAY__TAIL) {
          buf[j] = 0;
        } else {
          buf[j] = st->priority ? priority_of(r, st->priority[i]) : r->max_p;
          i++;
        }
      }
      replay__tree_set(r, slot, slot + run, buf);
      q += (uint64_t)run;
    }
    pthread_mutex_unlock(&r->tree_lock);
  }

  for (int64_t j = 0, slot = slot_a; j < m; j++) {
    atomic_store_explicit(&r->meta[slot].seq, a + (uint64_t)j, memory_order_release);
    if (++slot == r->cap) slot = 0;
  }
  /* Join the stream's previous step to this call's first step. */
  uint64_t last = atomic_load_explicit(&sm->last, memory_order_relaxed);
  if (last && first - last < (uint64_t)r->cap) {
    uint64_t expect_w = link_word(last, 0);
    atomic_compare_exchange_strong(&r->meta[replay__slot(r, last)].link, &expect_w,
                                   link_word(last, first - last));
  }
  atomic_store_explicit(&sm->last, prev ? prev : 0, memory_order_relaxed);
  atomic_fetch_add_explicit(&r->n_steps, (uint64_t)n, memory_order_relaxed);
  if (tails) atomic_fetch_add_explicit(&r->n_tails, (uint64_t)K, memory_order_relaxed);
  atomic_fetch_add_explicit(&r->n_tails_held, (tails ? K : 0) - tails_gone, memory_order_relaxed);
  atomic_store_explicit(&sm->busy, 0, memory_order_release);
  spill_sweep(r);
  return 0;
}

int replay_insert_one(replay *r, int stream, const void *const *cols, float reward, int terminated,
                      int truncated, const void *final_obs, float priority, shoal_error *err) {
  if (!r || !cols) return shoal_error_set(err, SHOAL_EINVAL, "replay_insert_one: NULL argument");
  replay_steps st = {.n = 1, .reward = &reward, .final_obs = final_obs};
  uint8_t te = terminated != 0, tr = truncated != 0;
  st.terminated = &te;
  st.truncated = &tr;
  if (priority >= 0 || isnan(priority)) st.priority = &priority;
  for (int c = 0; c < r->cfg.ncols; c++) st.cols[c] = cols[c];
  return replay_insert(r, stream, &st, err);
}

int replay_reset_stream(replay *r, int stream, shoal_error *err) {
  if (!r) return shoal_error_set(err, SHOAL_EINVAL, "replay_reset_stream: NULL argument");
  if (stream < 0 || stream >= r->cfg.streams)
    return shoal_error_set(err, SHOAL_ERANGE, "replay_reset_stream: stream %d outside [0, %d)",
                           stream, r->cfg.streams);
  replay__stream *sm = &r->streams[stream];
  int expect = 0;
  if (!atomic_compare_exchange_strong(&sm->busy, &expect, 1))
    return shoal_error_set(err, SHOAL_ESTATE,
                           "replay_reset_stream: stream %d is being inserted by another thread",
                           stream);
  atomic_store_explicit(&sm->last, 0, memory_order_relaxed);
  atomic_store_explicit(&sm->busy, 0, memory_order_release);
  return 0;
}

static int check_named(const replay_column_data *d, replay_dtype want, int want_bool_ok,
                       int64_t rows, const replay_column *item, shoal_error *err) {
  int dt_ok =
      d->dtype == want || (want_bool_ok && (d->dtype == REPLAY_U8 || d->dtype == REPLAY_BOOL));
  if (!dt_ok)
    return shoal_error_set(err, SHOAL_EINVAL, "replay: column '%s' has dtype %s, expected %s",
                           d->name, replay_dtype_name(d->dtype), replay_dtype_name(want));
  int ndim = item ? item->ndim : 0;
  if (d->ndim != ndim + 1 || !d->shape || d->shape[0] != rows)
    return shoal_error_set(err, SHOAL_ESHAPE,
                           "replay: column '%s' has ndim %d and %lld rows, expected ndim %d and "
                           "%lld rows",
                           d->name, d->ndim,
                           d->shape && d->ndim > 0 ? (long long)d->shape[0] : -1LL, ndim + 1,
                           (long long)rows);
  for (int i = 0; i < ndim; i++)
    if (d->shape[i + 1] != item->shape[i])
      return shoal_error_set(err, SHOAL_ESHAPE,
                             "replay: column '%s' dim %d is %lld, the spec says %lld", d->name,
                             i + 1, (long long)d->shape[i + 1], (long long)item->shape[i]);
  size_t want_bytes = (size_t)rows * (item ? replay_column_bytes(item) : replay_dtype_size(want));
  if (d->nbytes != want_bytes || (!d->data && want_bytes))
    return shoal_error_set(err, SHOAL_ESHAPE, "replay: column '%s' has %zu bytes, expected %zu",
                           d->name, d->nbytes, want_bytes);
  return 0;
}

int replay_insert_columns(replay *r, int stream, const replay_column_data *cols, int ncols,
                          shoal_error *err) {
  if (!r || (!cols && ncols))
    return shoal_error_set(err, SHOAL_EINVAL, "replay_insert_columns: NULL argument");
  enum { REW = REPLAY_MAX_COLUMNS, TERM, TRUNC, FINAL, PRIO, NSLOT };
  const replay_column_data *by[NSLOT] = {0};
  for (int i = 0; i < ncols; i++) {
    const char *nm = cols[i].name ? cols[i].name : "";
    int at = replay_column_index(r, nm);
    if (at < 0) {
      if (!strcmp(nm, "reward"))
        at = REW;
      else if (!strcmp(nm, "terminated"))
        at = TERM;
      else if (!strcmp(nm, "truncated"))
        at = TRUNC;
      else if (!strcmp(nm, "final_obs"))
        at = FINAL;
      else if (!strcmp(nm, "priority"))
        at = PRIO;
      else
        return shoal_error_set(err, SHOAL_EINVAL, "replay: unknown column '%s'", nm);
    }
    if (by[at]) return shoal_error_set(err, SHOAL_EINVAL, "replay: column '%s' given twice", nm);
    by[at] = &cols[i];
  }
  for (int c = 0; c < r->cfg.ncols; c++)
    if (!by[c])
      return shoal_error_set(err, SHOAL_EINVAL, "replay: column '%s' is missing",
                             r->cfg.cols[c].name);
  if (!by[REW]) return shoal_error_set(err, SHOAL_EINVAL, "replay: column 'reward' is missing");
  if (!by[TERM])
    return shoal_error_set(err, SHOAL_EINVAL, "replay: column 'terminated' is missing");
  const replay_column_data *c0 = by[0];
  if (c0->ndim < 1 || !c0->shape)
    return shoal_error_set(err, SHOAL_ESHAPE, "replay: column '%s' has no leading N dim", c0->name);
  int64_t n = c0->shape[0];
  if (n < 1) return shoal_error_set(err, SHOAL_ESHAPE, "replay: N = %lld", (long long)n);
  int rc = 0;
  for (int c = 0; c < r->cfg.ncols && !rc; c++)
    rc = check_named(by[c], r->cfg.cols[c].dtype, 0, n, &r->cfg.cols[c], err);
  if (!rc) rc = check_named(by[REW], REPLAY_F32, 0, n, NULL, err);
  if (!rc) rc = check_named(by[TERM], REPLAY_U8, 1, n, NULL, err);
  if (!rc && by[TRUNC]) rc = check_named(by[TRUNC], REPLAY_U8, 1, n, NULL, err);
  if (!rc && by[PRIO]) rc = check_named(by[PRIO], REPLAY_F32, 0, n, NULL, err);
  if (rc) return rc;
  const uint8_t *te = by[TERM]->data, *tr = by[TRUNC] ? by[TRUNC]->data : NULL;
  int64_t K = 0;
  for (int64_t i = 0; i < n; i++) K += te[i] || (tr && tr[i]);
  if (r->obs >= 0 && K > 0) {
    if (!by[FINAL])
      return shoal_error_set(err, SHOAL_EINVAL,
                             "replay: %lld episode(s) end but column 'final_obs' is missing",
                             (long long)K);
    rc = check_named(by[FINAL], r->cfg.cols[r->obs].dtype, 0, K, &r->cfg.cols[r->obs], err);
    if (rc) return rc;
  }
  replay_steps st = {.n = n,
                     .reward = by[REW]->data,
                     .terminated = te,
                     .truncated = tr,
                     .final_obs = by[FINAL] ? by[FINAL]->data : NULL,
                     .priority = by[PRIO] ? by[PRIO]->data : NULL};
  for (int c = 0; c < r->cfg.ncols; c++) st.cols[c] = by[c]->data;
  return replay_insert(r, stream, &st, err);
}

/* ---------------------------------------------------------------- sample */

static inline int holds(const struct replay *r, uint64_t s, uint64_t lo, uint64_t hi) {
  return s >= lo && s < hi &&
         atomic_load_explicit(&r->meta[replay__slot(r, s)].seq, memory_order_acquire) == s;
}

/* The successor of step cur, or 0 when it has not arrived or is gone. */
static uint64_t next_of(const struct replay *r, uint64_t cur, uint64_t lo, uint64_t hi) {
  uint64_t w = atomic_load_explicit(&r->meta[replay__slot(r, cur)].link, memory_order_acquire);
  uint64_t d = w & 0xffffffffu;
  if ((w >> 32) != (cur & 0xffffffffu) || d == 0) return 0;
  uint64_t nx = cur + d;
  if (!holds(r, nx, lo, hi) || r->meta[replay__slot(r, nx)].prev != cur) return 0;
  return nx;
}

/* Frames of the stack ending at item s (which the caller checked): follows prev,
 * repeating the episode's first frame before its start. 0 if a frame is gone. */
static int stack_of(const struct replay *r, uint64_t s, uint64_t lo, uint64_t hi,
                    uint64_t *frames) {
  int k = r->k;
  frames[k - 1] = s;
  uint64_t cur = s;
  for (int j = k - 2; j >= 0; j--) {
    uint64_t p = r->meta[replay__slot(r, cur)].prev;
    if (p) {
      if (!holds(r, p, lo, hi)) return 0;
      cur = p;
    }
    frames[j] = cur;
  }
  return 1;
}

static int resolve(const struct replay *r, uint64_t s, uint64_t lo, uint64_t hi, int n,
                   double gamma, replay__resolved *out) {
  if (!holds(r, s, lo, hi)) return 0;
  if (r->meta[replay__slot(r, s)].flags & REPLAY__TAIL) return 0;
  double ret = 0, g = 1;
  uint64_t cur = s;
  out->boot = 0;
  for (int i = 0;; i++) {
    int64_t slot = replay__slot(r, cur);
    uint8_t f = r->meta[slot].flags;
    ret += g * (double)r->meta[slot].reward;
    g *= gamma;
    int last = i == n - 1 || (f & (REPLAY__TERM | REPLAY__TRUNC));
    if (last) {
      out->m = i + 1;
      out->disc = (f & REPLAY__TERM) ? 0.0 : g;
      if (r->obs >= 0) {
        out->boot = next_of(r, cur, lo, hi);
        if (!out->boot) return 0;
      }
      break;
    }
    cur = next_of(r, cur, lo, hi);
    if (!cur) return 0;
  }
  out->ret = ret;
  if (r->obs >= 0) {
    if (!stack_of(r, s, lo, hi, out->frames)) return 0;
    if (!stack_of(r, out->boot, lo, hi, out->nframes)) return 0;
  }
  return 1;
}

/* memcpy with the common small item sizes as constants, so they compile to moves. */
static inline void copy_item(void *dst, const void *src, size_t n) {
  switch (n) {
    case 1: memcpy(dst, src, 1); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    case 16: memcpy(dst, src, 16); break;
    case 32: memcpy(dst, src, 32); break;
    default: memcpy(dst, src, n);
  }
}

/* memory_limit: whether item seq is cold (its pages released; read with pread, so a
 * sample maps nothing into the process). head is the head when the gather began. */
static inline int cold(const struct replay *r, int c, uint64_t seq, uint64_t head) {
  return r->spill_base && spilled(r, c) && seq + (uint64_t)r->hot < head;
}

/* iov[0..n) from the spill file at off: a loop over short reads (which the page cache
 * does not give, but the call allows). 0, or -1 when the file will not give them. */
static int pread_all(int fd, struct iovec *iov, int n, off_t off) {
  while (n > 0) {
    ssize_t k = preadv(fd, iov, n, off);
    if (k <= 0) return -1;
    off += k;
    while (n > 0 && (size_t)k >= iov->iov_len) k -= (ssize_t)iov->iov_len, iov++, n--;
    if (n > 0) iov->iov_base = (uint8_t *)iov->iov_base + k, iov->iov_len -= (size_t)k;
  }
  return 0;
}

/* n consecutive items of column c from seq on (their slots consecutive) into dst. */
static void fetch(const struct replay *r, int c, uint8_t *dst, uint64_t seq, int n, uint64_t head) {
  size_t isz = r->item[c];
  const uint8_t *src = r->col[c] + (size_t)replay__slot(r, seq) * isz;
  if (!cold(r, c, seq, head)) {
    if (n == 1)
      copy_item(dst, src, isz);
    else
      memcpy(dst, src, (size_t)n * isz);
    return;
  }
  struct iovec v = {dst, (size_t)n * isz};
  /* cannot fail with the file mapped; read through the mapping then */
  if (pread_all(r->spill_fd, &v, 1, (off_t)(src - r->spill_base)))
    memcpy(dst, src, (size_t)n * isz);
}

/* A stack of k frames (items seqs[0..k-1]) into dst, consecutive items in one read. */
static void fetch_stack(const struct replay *r, int c, uint8_t *dst, const uint64_t *seqs, int k,
                        uint64_t head) {
  size_t isz = r->item[c];
  for (int j = 0; j < k;) {
    int n = 1;
    while (j + n < k && seqs[j + n] == seqs[j] + (uint64_t)n &&
           replay__slot(r, seqs[j]) + n < r->cap)
      n++;
    fetch(r, c, dst + (size_t)j * isz, seqs[j], n, head);
    j += n;
  }
}

/* A cold stack and its bootstrap stack, when together they are one run of consecutive
 * items (the usual case: frames a .. a+k-1 and, m steps on, a+m .. z), in one read
 * straight into both: the run's frames are scattered to dst and ndst as they come off
 * the file (preadv), and where the stacks share frames (m < k) the shared ones are copied
 * once from dst. Read into a buffer and copied out twice, as before, the copies cost
 * as much as the read (sampling with the limit was 0.55-0.61 of in memory). Returns 1
 * when it filled both, else 0 (the caller reads them apart). */
static int fetch_span(const struct replay *r, const replay__resolved *rs, uint8_t *dst,
                      uint8_t *ndst, uint64_t head) {
  int k = r->k;
  uint64_t a = rs->frames[0], z = rs->nframes[k - 1];
  if (!r->gather_buf || z + 1 < a + (uint64_t)k || z - a + 1 > (uint64_t)(2 * k + 64) ||
      !cold(r, r->obs, a, head) || replay__slot(r, a) + (int64_t)(z - a) >= r->cap)
    return 0;
  for (int j = 0; j < k; j++)
    if (rs->frames[j] != a + (uint64_t)j || rs->nframes[j] != z - (uint64_t)(k - 1 - j)) return 0;
  const size_t isz = r->item[r->obs], m = (size_t)(z + 1 - a) - (size_t)k;
  const uint8_t *src = r->col[r->obs] + (size_t)replay__slot(r, a) * isz;
  struct iovec iov[3];
  int n = 0;
  iov[n++] = (struct iovec){dst, (size_t)k * isz};
  if (m >= (size_t)k) { /* no frame shared: the gap between them into the buffer */
    if (m > (size_t)k) iov[n++] = (struct iovec){r->gather_buf, (m - (size_t)k) * isz};
    iov[n++] = (struct iovec){ndst, (size_t)k * isz};
  } else if (m > 0) { /* ndst's frames past dst's last */
    iov[n++] = (struct iovec){ndst + ((size_t)k - m) * isz, m * isz};
  }
  if (pread_all(r->spill_fd, iov, n, (off_t)(src - r->spill_base))) return 0;
  if (m < (size_t)k) memcpy(ndst, dst + m * isz, ((size_t)k - m) * isz);
  return 1;
}

static void gather(const struct replay *r, uint64_t s, const replay__resolved *rs, int b,
                   replay_batch *out) {
  int64_t slot = replay__slot(r, s);
  uint64_t head = r->spill_base ? atomic_load(&((struct replay *)r)->head) : 0;
  int both = 0;
  if (r->obs >= 0 && out->cols[r->obs] && out->next_obs) {
    size_t isz = r->item[r->obs];
    both = fetch_span(r, rs, (uint8_t *)out->cols[r->obs] + (size_t)b * (size_t)r->k * isz,
                      (uint8_t *)out->next_obs + (size_t)b * (size_t)r->k * isz, head);
  }
  for (int c = 0; c < r->cfg.ncols; c++) {
    if (!out->cols[c] || (c == r->obs && both)) continue;
    size_t isz = r->item[c];
    if (c == r->obs)
      fetch_stack(r, c, (uint8_t *)out->cols[c] + (size_t)b * (size_t)r->k * isz, rs->frames, r->k,
                  head);
    else
      fetch(r, c, (uint8_t *)out->cols[c] + (size_t)b * isz, s, 1, head);
  }
  if (out->next_obs && r->obs >= 0 && !both) {
    size_t isz = r->item[r->obs];
    fetch_stack(r, r->obs, (uint8_t *)out->next_obs + (size_t)b * (size_t)r->k * isz, rs->nframes,
                r->k, head);
  }
  if (out->reward) out->reward[b] = (float)rs->ret;
  if (out->discount) out->discount[b] = (float)rs->disc;
  if (out->steps) out->steps[b] = rs->m;
  if (out->index) out->index[b] = slot;
  if (out->generation) out->generation[b] = s;
}

/* Draws in chunks: first every candidate's slot record is prefetched, then each
 * is resolved, then the chosen items' data are prefetched and copied, so the cache
 * misses of a chunk overlap instead of following one another. */
enum { CHUNK = REPLAY__CHUNK };

/* Before resolving candidate slot: its record and its successors' (n-step chain,
 * two 32-byte records per line), and its columns' data. */
static void prefetch_slot(const struct replay *r, int64_t slot, int n) {
  const replay__meta *m = &r->meta[slot];
  for (int j = 0; j <= n && slot + j < r->cap; j += 2) __builtin_prefetch(m + j);
  for (int c = 0; c < r->cfg.ncols; c++) __builtin_prefetch(r->col[c] + (size_t)slot * r->item[c]);
}

static void prefetch_items(const struct replay *r, uint64_t s, const replay__resolved *rs) {
  int64_t slot = replay__slot(r, s);
  for (int c = 0; c < r->cfg.ncols; c++)
    if (c != r->obs) __builtin_prefetch(r->col[c] + (size_t)slot * r->item[c]);
  if (r->obs >= 0 && r->item[r->obs] <= 256)
    for (int j = 0; j < r->k; j++) {
      __builtin_prefetch(r->col[r->obs] + (size_t)replay__slot(r, rs->frames[j]) * r->item[r->obs]);
      __builtin_prefetch(r->col[r->obs] +
                         (size_t)replay__slot(r, rs->nframes[j]) * r->item[r->obs]);
    }
}

/* PER: the leaves holding prefix masses u[0..n), all descending the tree in lock
 * step so their misses overlap. Caller holds tree_lock. */
static void tree_find_many(const struct replay *r, const double *u0, int n, int64_t *leaf) {
  double u[CHUNK];
  int64_t x[CHUNK];
  for (int j = 0; j < n; j++) {
    u[j] = u0[j];
    x[j] = 0;
  }
  for (int l = 0; l + 1 < r->depth; l++) {
    const double *cs = r->lsum[l + 1];
    int64_t nc = r->lv_n[l + 1];
    for (int j = 0; j < n; j++) {
      int64_t c0 = x[j] * REPLAY__FAN, c1 = c0 + REPLAY__FAN, pick = -1, last = c0;
      if (c1 > nc) c1 = nc;
      double v = u[j];
      for (int64_t c = c0; c < c1; c++) {
        if (cs[c] <= 0) continue;
        last = c;
        if (v < cs[c]) {
          pick = c;
          break;
        }
        v -= cs[c];
      }
      /* Rounding can leave v past the last child with mass: take that child, and
       * its last one below. */
      if (pick < 0) {
        pick = last;
        v = cs[last];
      }
      u[j] = v;
      x[j] = pick;
      if (l + 2 < r->depth) __builtin_prefetch(&r->lsum[l + 2][pick * REPLAY__FAN]);
    }
  }
  for (int j = 0; j < n; j++) leaf[j] = x[j];
}

int replay_sample(replay *r, shoal_rng *rng, const replay_sample_args *args, replay_batch *out,
                  shoal_error *err) {
  if (!r || !rng || !args || !out)
    return shoal_error_set(err, SHOAL_EINVAL, "replay_sample: NULL argument");
  int B = args->batch, n = args->n_step ? args->n_step : 1;
  if (B < 1 || n < 1 || n > 1000000)
    return shoal_error_set(err, SHOAL_EINVAL, "replay_sample: batch %d, n_step %d", B, n);
  if (!(args->gamma >= 0 && args->gamma <= 1))
    return shoal_error_set(err, SHOAL_EINVAL, "replay_sample: gamma %g outside [0, 1]",
                           args->gamma);
  if (r->sum && !(args->beta >= 0 && args->beta <= 1))
    return shoal_error_set(err, SHOAL_EINVAL, "replay_sample: beta %g outside [0, 1]", args->beta);
  int lrc = limit_enter(r, 0, (double)B, err);
  if (lrc) return lrc;
  uint64_t lo = 0, hi = 0;
  int64_t budget = 64 * (int64_t)B + 4096, rejected = 0;
  replay__resolved *rs = r->scratch;
  uint64_t cand[CHUNK];
  double pr[CHUNK], u[CHUNK], pmin = 0;
  int64_t slots[CHUNK];
  int ok[CHUNK];
  int b = 0, stratified = 1;
  while (b < B && rejected < budget) {
    /* Pinned per chunk, not per call: a writer waits at most one chunk's copies. */
    replay__pin(r, r->slack, &lo, &hi);
    if (hi <= lo) break;
    int cnt = B - b < CHUNK ? B - b : CHUNK;
    if (!r->sum) {
      for (int j = 0; j < cnt; j++) {
        cand[j] = lo + shoal_rng_below(rng, hi - lo);
        prefetch_slot(r, replay__slot(r, cand[j]), n);
      }
    } else {
      /* Stratified (Schaul et al., appendix B.2.1): draw b falls in the b-th of B equal
       * slices of the total mass; a rejected draw is redone from the whole range. */
      pthread_mutex_lock(&r->tree_lock);
      double total = r->lsum[0][0];
      pmin = r->lmin[0][0];
      if (!(total > 0)) {
        pthread_mutex_unlock(&r->tree_lock);
        break;
      }
      for (int j = 0; j < cnt; j++) {
        u[j] = stratified ? ((double)(b + j) + shoal_rng_uniform(rng)) * (total / B)
                          : shoal_rng_uniform(rng) * total;
        if (u[j] >= total) u[j] = nextafter(total, 0);
      }
      tree_find_many(r, u, cnt, slots);
      const double *leaves = replay__leaves(r);
      for (int j = 0; j < cnt; j++) pr[j] = leaves[slots[j]];
      pthread_mutex_unlock(&r->tree_lock);
      for (int j = 0; j < cnt; j++) prefetch_slot(r, slots[j], n);
      for (int j = 0; j < cnt; j++) {
        cand[j] =
            pr[j] > 0 ? atomic_load_explicit(&r->meta[slots[j]].seq, memory_order_acquire) : 0;
      }
    }
    for (int j = 0; j < cnt; j++) {
      ok[j] = cand[j] && resolve(r, cand[j], lo, hi, n, args->gamma, &rs[j]);
      if (ok[j]) prefetch_items(r, cand[j], &rs[j]);
    }
    for (int j = 0; j < cnt; j++) {
      if (!ok[j]) {
        rejected++;
        stratified = 0;
        continue;
      }
      gather(r, cand[j], &rs[j], b, out);
      if (out->weight) out->weight[b] = r->sum ? (float)pow(pmin / pr[j], args->beta) : 1.0f;
      b++;
    }
    replay__unpin(r);
  }
  replay__unpin(r); /* after a break */
  atomic_fetch_add_explicit(&r->n_rejected, (uint64_t)rejected, memory_order_relaxed);
  if (b < B && r->lim) replay_limiter_undo(r->lim, 0, (double)B);
  if (b < B)
    return shoal_error_set(err, SHOAL_ESTATE,
                           "replay_sample: %d of %d drawn; no sampleable step among %llu items "
                           "(%lld draws rejected; a step needs its %d-step successors and its "
                           "frames)",
                           b, B, (unsigned long long)(hi > lo ? hi - lo : 0), (long long)rejected,
                           n);
  atomic_fetch_add_explicit(&r->n_sampled, (uint64_t)B, memory_order_relaxed);
  return 0;
}

/* ---------------------------------------------------------------- priorities */

int replay_priorities_get(replay *r, uint64_t lo, int64_t n, float *p, shoal_error *err) {
  if (!r || n < 0 || (n && !p))
    return shoal_error_set(err, SHOAL_EINVAL, "replay_priorities_get: bad argument");
  if (!r->sum)
    return shoal_error_set(err, SHOAL_ENOTSUP,
                           "replay_priorities_get: the memory is uniform, not prioritized");
  pthread_mutex_lock(&r->tree_lock);
  const double *leaf = replay__leaves(r);
  for (int64_t i = 0; i < n; i++) {
    uint64_t q = lo + (uint64_t)i;
    int64_t slot = replay__slot(r, q);
    int held = q && atomic_load_explicit(&r->meta[slot].seq, memory_order_acquire) == q;
    p[i] = held && leaf[slot] > 0 ? (float)leaf[slot] : -1.0f;
  }
  pthread_mutex_unlock(&r->tree_lock);
  return 0;
}

int replay_priorities_set(replay *r, uint64_t lo, int64_t n, const float *p, int64_t *set,
                          shoal_error *err) {
  if (!r || n < 0 || (n && !p))
    return shoal_error_set(err, SHOAL_EINVAL, "replay_priorities_set: bad argument");
  if (!r->sum)
    return shoal_error_set(err, SHOAL_ENOTSUP,
                           "replay_priorities_set: the memory is uniform, not prioritized");
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(p[i]))
      return shoal_error_set(err, SHOAL_ENAN, "replay_priorities_set: p[%lld] = %g", (long long)i,
                             (double)p[i]);
  int64_t k = 0;
  pthread_mutex_lock(&r->tree_lock);
  const double *leaf = replay__leaves(r);
  for (int64_t i = 0; i < n; i++) {
    uint64_t q = lo + (uint64_t)i;
    int64_t slot = replay__slot(r, q);
    /* Tails keep 0: they are never sampled. A priority of 0 would hide a step for
     * good, so the smallest one kept is the floor eps^alpha. */
    if (p[i] < 0 || !q || atomic_load_explicit(&r->meta[slot].seq, memory_order_acquire) != q ||
        leaf[slot] <= 0)
      continue;
    double v = p[i];
    double floor_p = pow(r->cfg.eps, r->cfg.alpha);
    if (v < floor_p) v = floor_p;
    if (v > r->max_p) r->max_p = v;
    replay__tree_set(r, slot, slot + 1, &v);
    k++;
  }
  pthread_mutex_unlock(&r->tree_lock);
  if (set) *set = k;
  return 0;
}

int replay_update_priorities(replay *r, int64_t n, const int64_t *index, const uint64_t *generation,
                             const float *td_abs, shoal_error *err) {
  if (!r || (n && (!index || !generation || !td_abs)) || n < 0)
    return shoal_error_set(err, SHOAL_EINVAL, "replay_update_priorities: NULL argument");
  if (!r->sum)
    return shoal_error_set(err, SHOAL_ENOTSUP,
                           "replay_update_priorities: the memory is uniform, not prioritized");
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(td_abs[i]))
      return shoal_error_set(err, SHOAL_ENAN, "replay_update_priorities: td_abs[%lld] = %g",
                             (long long)i, (double)td_abs[i]);
    if (td_abs[i] < 0 || index[i] < 0 || index[i] >= r->cap)
      return shoal_error_set(err, td_abs[i] < 0 ? SHOAL_EINVAL : SHOAL_ERANGE,
                             "replay_update_priorities: entry %lld: index %lld, td_abs %g",
                             (long long)i, (long long)index[i], (double)td_abs[i]);
  }
  uint64_t stale = 0;
  /* The leaves and their parents, fetched together before the walk up. */
  for (int64_t i = 0; i < n; i++) {
    __builtin_prefetch(&r->meta[index[i]]);
    __builtin_prefetch(&replay__leaves(r)[index[i]]);
    __builtin_prefetch(&replay__leaves_min(r)[index[i]]);
    if (r->depth > 2) __builtin_prefetch(&r->lsum[r->depth - 2][index[i] / REPLAY__FAN]);
  }
  pthread_mutex_lock(&r->tree_lock);
  for (int64_t i = 0; i < n; i++) {
    /* Under the lock: a writer invalidates seq before it sets a slot's new priority. */
    if (atomic_load_explicit(&r->meta[index[i]].seq, memory_order_acquire) != generation[i] ||
        generation[i] == 0 || replay__leaves(r)[index[i]] <= 0 /* a tail */) {
      stale++;
      continue;
    }
    double p = priority_of(r, td_abs[i]);
    if (p > r->max_p) r->max_p = p;
    replay__tree_set(r, index[i], index[i] + 1, &p);
  }
  pthread_mutex_unlock(&r->tree_lock);
  atomic_fetch_add_explicit(&r->n_stale, stale, memory_order_relaxed);
  return 0;
}
