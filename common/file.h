/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common/file.h — atomic file writes: a file appears whole or not at all, and a crash
 * leaves the old file or the new one, never a torn one. The bytes go to a temporary
 * file beside the destination, which is fsynced and then renamed over the destination
 * (SHOAL_FILE_REPLACE) or hard-linked to it (SHOAL_FILE_EXCL: the destination must not
 * exist, so of several writers of one name exactly one wins and the others get
 * SHOAL_EEXIST); last the folder is fsynced so the new name survives a crash too.
 *
 *   shoal_error err = {0};
 *   if (shoal_file_write_atomic("out/ckpt.safetensors", buf, len, SHOAL_FILE_REPLACE, &err))
 *     fprintf(stderr, "%s\n", err.msg);
 *
 * Output written piece by piece goes through a temporary file the caller fills:
 *
 *   shoal_file_tmp t;
 *   if ((rc = shoal_file_tmp_open(&t, path, &err))) return rc;
 *   rc = shoal_file_tmp_write(&t, head, head_len, &err);  // or write(t.fd, ...) unless direct
 *   if (!rc) rc = shoal_file_tmp_write(&t, body, body_len, &err);
 *   if (rc) shoal_file_tmp_abort(&t);
 *   else rc = shoal_file_tmp_commit(&t, SHOAL_FILE_REPLACE, &err);
 *
 * The temporary file is DIR/.tmp.<name>.<host>.<pid>.<n> (name: the destination's,
 * cut to 100 characters; host: shoal_file_host_tag(); n counts this process's files),
 * so whoever cleans a folder can tell what a killed process left (its pid gone, on this
 * host) from a live writer's file. No call leaves a temporary file behind on error.
 *
 * Errors: an errno of ENOENT (a missing folder) is SHOAL_ENOENT, EEXIST SHOAL_EEXIST,
 * any other SHOAL_EIO, and the message names the file and what failed, without a part
 * prefix: "cannot create '/no/dir/.tmp.x.host.12.0': No such file or directory". A
 * path longer than SHOAL_FILE_PATH_MAX is SHOAL_EINVAL.
 */
#ifndef SHOAL_COMMON_FILE_H
#define SHOAL_COMMON_FILE_H

#include <stddef.h>

#include "common/shoal.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  SHOAL_FILE_REPLACE = 0, /* rename() over the destination, which may exist */
  SHOAL_FILE_EXCL = 1,    /* link() to the destination, which must not exist */
  SHOAL_FILE_PATH_MAX = 4096,
};

/* A temporary file being filled. The caller owns the struct (the stack will do); fd
 * is closed and the temporary file gone once commit or abort returns. */
typedef struct shoal_file_tmp {
  int fd;                         /* open for writing; -1 after commit or abort */
  int reused;                     /* 1: the file was a spare (shoal_file_tmp_reuse) */
  int direct;                     /* 1: writes go around the page cache (shoal_file_tmp_direct) */
  char *stage;                    /* direct: the aligned buffer writes gather in (borrowed) */
  size_t staged;                  /* direct: bytes waiting in stage */
  unsigned long long len;         /* bytes written so far through shoal_file_tmp_write */
  char path[SHOAL_FILE_PATH_MAX]; /* the destination */
  char tmp[SHOAL_FILE_PATH_MAX];  /* the temporary file beside it */
} shoal_file_tmp;

/* Writes len bytes of buf (borrowed for the call) to path atomically: flags
 * SHOAL_FILE_REPLACE or SHOAL_FILE_EXCL (SHOAL_EEXIST when path exists; the message
 * then reads "'PATH' exists"). Returns 0 or an error as above; on error path is as it
 * was and no temporary file is left. */
int shoal_file_write_atomic(const char *path, const void *buf, size_t len, int flags,
                            shoal_error *err);

/* Creates the temporary file for path (copied into t) and opens it for writing. On
 * error t holds no open file and nothing was created. */
int shoal_file_tmp_open(shoal_file_tmp *t, const char *path, shoal_error *err);

/* As shoal_file_tmp_open, but the temporary file is the existing file spare (in the
 * same folder, renamed to the temporary name), overwritten from its start; commit cuts
 * it to what was written. Writing into a file's allocated blocks skips the inode and
 * block allocation a new file costs (a log recycling its retired segments). A spare
 * that cannot be taken (gone: another process took or removed it) is no error: a new
 * file is created as by shoal_file_tmp_open, and t->reused says which happened. The
 * folder is fsynced once the spare is taken, before its bytes are overwritten, so its
 * old names cannot come back after a crash over the new bytes. The writes must be
 * sequential from offset 0 (shoal_file_tmp_write or write(t.fd, ...)). On error nothing
 * is open and the spare is gone. */
int shoal_file_tmp_reuse(shoal_file_tmp *t, const char *path, const char *spare, shoal_error *err);

/* Makes t's writes from here on go around the page cache (O_DIRECT), for a large file
 * written once and read rarely (a log's segments). A buffered write copies every byte
 * into the kernel's cache, and fsync then writes that cache back: measured on ext4,
 * 4 MiB segments cost 3.2 ms of CPU each that way against 0.8 ms written directly, and
 * wrote 1.4-1.9x faster. The bytes gather in an aligned buffer of SHOAL_FILE_STAGE
 * bytes and go out a full buffer at a time; commit writes the last one padded to a
 * block and cuts the file to its length. Call it before any write; from then on write
 * only through shoal_file_tmp_write. Returns 1 when direct writes are on, 0 when they
 * cannot be (the filesystem has none, no buffer could be had, a write already went
 * out): t then writes through the cache as before. A filesystem that refuses the first
 * direct write (an alignment it will not take) is written through the cache from
 * there on, with no error. Can't fail. */
int shoal_file_tmp_direct(shoal_file_tmp *t);
enum { SHOAL_FILE_STAGE = (4 << 20) + (64 << 10) }; /* a 4 MiB segment and its header */

/* Writes len bytes of buf (borrowed) to t's temporary file, retrying short writes.
 * On error the caller still commits or aborts t (an abort, to leave nothing). */
int shoal_file_tmp_write(shoal_file_tmp *t, const void *buf, size_t len, shoal_error *err);

/* Writes what direct writes left staged, fsyncs and closes t's temporary file, renames
 * or links it into place (flags as for
 * shoal_file_write_atomic) and fsyncs the folder. Consumes t: on error the temporary
 * file is removed and the destination is as it was (a failed folder fsync excepted:
 * then the file is in place but its name may not survive a crash). */
int shoal_file_tmp_commit(shoal_file_tmp *t, int flags, shoal_error *err);

/* Closes and removes t's temporary file. A t that is not open is a no-op. Can't fail. */
void shoal_file_tmp_abort(shoal_file_tmp *t);

/* This host's name reduced to [A-Za-z0-9-] (at most 63 characters; "host" when it has
 * none), as temporary names carry it. Static; can't fail. */
const char *shoal_file_host_tag(void);

#ifdef __cplusplus
}
#endif
#endif
