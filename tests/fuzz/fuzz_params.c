/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_params.c — the actor's decoder of the learner's Params reply
 * (rpc_params_decode). Properties: an accepted reply has a known dtype, a blob of whole
 * elements, and every layout entry's shape product equal to its numel and its extent
 * inside the blob, so an actor may index the blob by the layout without checks.
 */
#include <string.h>

#include "rpc/rpc.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rpc_params *p = NULL;
  shoal_error err = {0};
  int rc = rpc_params_decode(data, size, &p, &err);
  if (rc) {
    FUZZ_CHECK(rc < 0 && err.msg[0] && !p);
    return 0;
  }
  if (!p) return 0; /* not_newer */
  size_t es = rpc_dtype_size(p->dtype);
  FUZZ_CHECK(es && p->bytes % es == 0 && (p->bytes == 0 || p->blob));
  uint64_t nelem = p->bytes / es;
  FUZZ_CHECK(p->nlayout >= 0);
  for (int i = 0; i < p->nlayout; i++) {
    const rpc_param_entry *e = &p->layout[i];
    FUZZ_CHECK(e->name && e->ndim >= 0 && e->ndim <= RPC_MAX_DIMS);
    (void)strlen(e->name);
    uint64_t prod = 1;
    for (int d = 0; d < e->ndim; d++) {
      FUZZ_CHECK(e->shape[d] >= 0);
      prod *= (uint64_t)e->shape[d];
    }
    FUZZ_CHECK(prod == e->numel && e->offset <= nelem && e->numel <= nelem - e->offset);
    /* The first and last byte of the entry are readable (ASan). */
    if (e->numel) {
      volatile uint8_t a = ((const uint8_t *)p->blob)[e->offset * es];
      volatile uint8_t z = ((const uint8_t *)p->blob)[(e->offset + e->numel) * es - 1];
      (void)a;
      (void)z;
    }
  }
  rpc_params_free(p);
  return 0;
}
