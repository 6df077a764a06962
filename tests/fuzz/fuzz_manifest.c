/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_manifest.c — a dataset's manifest as the file store keeps it
 * (DIR/_datasets/NAME/manifest.json, read by store_dataset_info_get and
 * store_dataset_list): the JSON text through libbson into the manifest check.
 *
 * Properties: a refusal is a shoal error with a message and leaves *out as it was; an
 * accepted manifest has 1..STORE_DATASET_FIELDS_MAX fields laid out back to back,
 * chunks = ceil(records / chunk_records), one CRC per chunk and chunks no larger than
 * STORE_DATASET_CHUNK_MAX; written back as JSON it parses to the same info, and that
 * JSON is a fixed point (writing the reparsed info gives the same text).
 */
#include <string.h>

#include "store/internal.h"
#include "store/store_data.h"
#include "tests/fuzz/fuzz.h"

static void same_info(const store_dataset_info *a, const store_dataset_info *b) {
  FUZZ_CHECK(!strcmp(a->name, b->name) && !strcmp(a->source, b->source) &&
             !strcmp(a->upload, b->upload));
  FUZZ_CHECK(a->records == b->records && a->chunk_records == b->chunk_records &&
             a->chunks == b->chunks && a->nfields == b->nfields &&
             a->record_bytes == b->record_bytes);
  FUZZ_CHECK(!memcmp(&a->created_time, &b->created_time, sizeof a->created_time));
  FUZZ_CHECK(!memcmp(a->crc, b->crc, a->chunks * sizeof *a->crc));
  for (int i = 0; i < a->nfields; i++) {
    const store_dataset_field *f = &a->fields[i], *g = &b->fields[i];
    FUZZ_CHECK(!strcmp(f->name, g->name) && f->dtype == g->dtype && f->ndim == g->ndim &&
               f->bytes == g->bytes && f->offset == g->offset);
    FUZZ_CHECK(!memcmp(f->shape, g->shape, sizeof f->shape));
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  store_dataset_info info, sentinel;
  memset(&sentinel, 0xa5, sizeof sentinel);
  info = sentinel;
  shoal_error err = {0};
  int rc = store__dataset_manifest_from_json("ds", (const char *)data, size, &info, &err);
  if (rc) {
    FUZZ_CHECK(rc < 0 && err.code == rc && err.msg[0]);
    FUZZ_CHECK(!memcmp(&info, &sentinel, sizeof info));
    return 0;
  }
  FUZZ_CHECK(!strcmp(info.name, "ds"));
  FUZZ_CHECK(info.nfields >= 1 && info.nfields <= STORE_DATASET_FIELDS_MAX);
  FUZZ_CHECK(info.records >= 1 && info.chunk_records >= 1 && info.crc);
  FUZZ_CHECK(info.chunks == (info.records + info.chunk_records - 1) / info.chunk_records);
  size_t off = 0;
  for (int i = 0; i < info.nfields; i++) {
    const store_dataset_field *f = &info.fields[i];
    FUZZ_CHECK(f->offset == off && f->bytes >= 1 && f->name[0]);
    FUZZ_CHECK(f->ndim >= 0 && f->ndim <= STORE_DATASET_NDIM_MAX);
    off += f->bytes;
  }
  FUZZ_CHECK(off == info.record_bytes);
  FUZZ_CHECK((uint64_t)info.chunk_records * info.record_bytes <= STORE_DATASET_CHUNK_MAX);

  size_t n1 = 0, n2 = 0;
  char *j1 = store__dataset_manifest_to_json(&info, &n1);
  FUZZ_CHECK(j1);
  store_dataset_info back;
  memset(&back, 0, sizeof back);
  shoal_error e2 = {0};
  int rc2 = store__dataset_manifest_from_json("ds", j1, n1, &back, &e2);
  if (rc2) fprintf(stderr, "reparse: %s\n%s\n", e2.msg, j1);
  FUZZ_CHECK(rc2 == 0);
  same_info(&info, &back);
  char *j2 = store__dataset_manifest_to_json(&back, &n2);
  FUZZ_CHECK(j2 && n1 == n2 && !memcmp(j1, j2, n1));
  free(j1);
  free(j2);
  store_dataset_info_clear(&back);
  store_dataset_info_clear(&info);
  return 0;
}
