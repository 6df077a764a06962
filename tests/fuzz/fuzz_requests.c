/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_requests.c — the other decoders of untrusted messages: the server's
 * ParamsRequest and Hyperparams (what any client may send to the learner) and the
 * client's Status reply. The first byte picks the decoder, the rest is the message.
 * Properties: a refusal says why; accepted Hyperparams hold at most 64 entries with
 * NUL-terminated keys and texts; a decoded Status has a NUL-terminated run id and at
 * most RPC_MAX_COUNTERS counters.
 */
#include <string.h>

#include "rpc/internal.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int which = data[0] % 3;
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  shoal_error err = {0};
  if (which == 0) {
    int64_t have = 0;
    int rc = rpc__params_request_decode(p, n, "fuzz-run", &have, &err);
    FUZZ_CHECK(rc == 0 || rc == SHOAL_EFORMAT || rc == SHOAL_EPERM);
    if (rc) FUZZ_CHECK(err.msg[0]);
  } else if (which == 1) {
    rpc__hyper_req r;
    int rc = rpc__hyperparams_decode(p, n, "fuzz-run", &r, &err);
    FUZZ_CHECK(rc == 0 || rc == SHOAL_EFORMAT || rc == SHOAL_EPERM || rc == SHOAL_EINVAL);
    if (rc) {
      FUZZ_CHECK(err.msg[0] && !r.msg);
      return 0;
    }
    FUZZ_CHECK(r.n >= 0 && r.n <= RPC__MAX_HYPER);
    for (int i = 0; i < r.n; i++) {
      FUZZ_CHECK(r.h[i].key);
      (void)strlen(r.h[i].key);
      FUZZ_CHECK(r.h[i].is_text == (r.h[i].text != NULL));
      if (r.h[i].text) (void)strlen(r.h[i].text);
    }
    rpc__hyperparams_release(&r);
  } else {
    rpc_status st;
    int rc = rpc__status_decode(p, n, &st, &err);
    FUZZ_CHECK(rc == 0 || rc == SHOAL_EFORMAT);
    if (!rc) {
      FUZZ_CHECK(memchr(st.run_id, 0, sizeof st.run_id));
      FUZZ_CHECK(st.ncounters >= 0 && st.ncounters <= RPC_MAX_COUNTERS);
      for (int i = 0; i < st.ncounters; i++)
        FUZZ_CHECK(memchr(st.counters[i].name, 0, sizeof st.counters[i].name));
    }
  }
  return 0;
}
