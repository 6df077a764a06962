#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tests/header_examples.py — keeps every public header's usage example true.

A public header (DIR/*.h under DIRS, internal.h excepted) opens with a comment that
says what the part is for and gives a short usage example (shoal's style). An example
is a run of lines indented three or more spaces inside that opening comment, starting
right after a blank comment line; blank lines within it keep it going, a prose line
ends it. Indented text that follows a prose line
directly (a grammar, a formula, a list of URI forms) is not an example.

Each example is compiled with the header included, as the body of a function, after a
prelude that declares the names it takes from around it (die, the caller's buffers,
callbacks): PRELUDES below, one per header. Compiling is -fsyntax-only with warnings
as errors, so a call that no longer matches its prototype fails the test.

  tests/header_examples.py --cc cc -I SRC -I BUILD [--root SRC]    # exit 0: all compile

To cover another folder, add it to DIRS.
"""
import argparse
import os
import subprocess
import sys
import tempfile

DIRS = ["common", "config", "nn", "envs", "replay", "rpc", "store", "algos", "run", "learner", "actor", "data",
        "cli"]

# What each header's example uses without declaring it, declared at the top of the
# function (so that a name such as trunc may shadow a libc one); lines starting with '#'
# go before it, at file scope. Scalars get values, so no compiler sees them unset.
PRELUDES = {
    "common/crc32c.h": """
const uint8_t head[8] = {0}, body[4] = {0};
size_t body_len = sizeof body;
""",
    "common/file.h": """
#include <stdio.h>
shoal_error err = {0};
const char buf[4] = {0}, head[2] = {0}, body[2] = {0};
size_t len = sizeof buf, head_len = sizeof head, body_len = sizeof body;
const char *path = "out/x";
int rc;
""",
    "common/shoal.h": """
#include "nn/nn.h"
nn_model *m = NULL;
""",
    "config/config.h": """
void die(const char *msg);
shoal_error err = {0};
""",
    "nn/nn.h": """
void die(const char *msg);
const float x[256 * 4] = {0}, target[256 * 2] = {0}, weights[256] = {0};
float dy[256 * 2];
""",
    "envs/envs.h": """
shoal_error err = {0};
int32_t policy(const float *obs);
void choose_actions(const float *obs, int32_t *act);
""",
    "replay/replay.h": """
shoal_error err = {0};
shoal_rng rng;
shoal_rng_seed(&rng, 1);
enum { N = 16 };
float obs[N * 4] = {0}, rew[N] = {0}, final_obs[4] = {0};
int64_t act[N] = {0};
uint8_t term[N] = {0}, trunc[N] = {0};
float obs_b[256 * 4], nobs_b[256 * 4], ret[256], disc[256], w[256], td_abs[256];
int64_t act_b[256], idx[256];
uint64_t gen[256];
""",
    "rpc/rpc.h": """
int insert(void *user, const rpc_batch *b, shoal_error *err);
shoal_error err = {0};
void *replay = NULL;
const float params[8] = {0};
size_t bytes = sizeof params;
const rpc_param_entry layout[1] = {{0}};
int nlayout = 1;
float obs[64 * 4] = {0}, rew[64] = {0};
rpc_client_stats stats;
""",
    "store/store.h": """
const char *yaml_text = "a: 1\\n";
const char bytes[4] = {0};
size_t nbytes = sizeof bytes;
""",
    "algos/algos.h": """
shoal_error err = {0};
dqn_batch batch = {0};
dqn_stats stats;
float priorities[32];
const float params[8] = {0}, obs[4] = {0};
size_t n = 8;
int B = 1;
float eps = 0.1f;
shoal_rng rng;
shoal_rng_seed(&rng, 1);
int32_t actions[1];
const float *q = NULL;
""",
    "run/onpolicy_train.h": """
shoal_error err = {0};
const config *cfg = NULL;
""",
    "replay/limiter.h": """
shoal_error err = {0};
""",
    "algos/agent.h": """
#include "run/run.h"
shoal_error err = {0};
const config *cfg = NULL;
const float obs_f[16 * 4] = {0};
shoal_rng rng;
shoal_rng_seed(&rng, 1);
int32_t act[16], env_act[16];
float logp[16];
""",
    "run/run.h": """
shoal_error err = {0};
const char *path = "run.yaml";
""",
    "learner/follow.h": """
shoal_error err = {0};
store *st = NULL;
replay *mem = NULL;
int A = 2, E = 16;
store_segment_limits lim = {0};
int fn(void *ctx, uint32_t n);
void *L = NULL;
""",
    "learner/replay_log.h": """
shoal_error err = {0};
store *st = NULL;
store_writer *wr = NULL;
rlog_batch rec = {0};
uint64_t first_item = 0, oldest_item_held = 0, n = 1;
const float p[1] = {1};
rlog_stats stats;
""",
    "actor/runtime.h": """
#include "actor/actors.h"
int argc = 1;
char *argv[] = {"shoal-actor", NULL};
""",
    "learner/runtime.h": """
#include "learner/learners.h"
int argc = 1;
char *argv[] = {"shoal-learner", NULL};
""",
    "data/data.h": """
#include "nn/nn.h"
void die(const char *msg);
nn_model *model = NULL;
const float *y = NULL;
""",
    "cli/tboard.h": """
shoal_error err = {0};
double unix_time = 1.7e9;
""",
    "cli/supervise.h": """
shoal_error err = {0};
char *const learner_argv[] = {"shoal-learner", NULL};
char *const actor_argv[] = {"shoal-actor", NULL};
void on_line(void *ud, int index, const char *name, const char *line);
void on_tick(void *ud);
void *ud = NULL;
""",
}

CFLAGS = ["-std=c17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-Wno-unused-variable",
          "-Wno-unused-but-set-variable", "-Wno-unused-parameter", "-Wno-unused-value",
          "-Wno-missing-field-initializers"]


def opening_comment(text):
    """The lines of the comment a header opens with (after its SPDX line), without ' * ',
    or []."""
    if text.startswith("/* SPDX-License-Identifier:"):
        text = text[text.index("\n") + 1:]
    if not text.startswith("/*"):
        return []
    end = text.find("*/")
    lines = []
    for line in text[2:end].split("\n"):
        if line.startswith(" * "):
            lines.append(line[3:])
        elif line.strip() in ("*", ""):
            lines.append("")
        else:
            lines.append(line.lstrip(" *"))
    return lines


def examples(lines):
    """Blocks of code: indented runs that start after a blank line."""
    blocks, cur, prev_blank = [], None, True
    for line in lines:
        indented = line.startswith("  ") and line.strip() != ""
        if cur is not None:
            if indented or line == "":
                cur.append(line)
            else:
                blocks.append(cur)
                cur = None
        elif indented and prev_blank:
            cur = [line]
        prev_blank = line == ""
    if cur is not None:
        blocks.append(cur)
    return ["\n".join(b).rstrip() for b in blocks]


def check(header, root, cc, includes):
    with open(os.path.join(root, header), encoding="utf-8") as f:
        blocks = examples(opening_comment(f.read()))
    if not blocks:
        return None
    prelude = PRELUDES.get(header, "").strip().split("\n")
    src = ["#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>",
           '#include "%s"' % header] + [p for p in prelude if p.startswith("#")]
    src += ["int example(void);", "int example(void) {"]
    src += ["  " + p for p in prelude if p and not p.startswith("#")]
    for b in blocks:
        src += ["  {", b, "  }"]
    src += ["  return 0;", "}", ""]
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write("\n".join(src))
        path = f.name
    try:
        r = subprocess.run([cc] + CFLAGS + ["-I" + i for i in includes] + [path],
                           capture_output=True, text=True)
    finally:
        os.unlink(path)
    if r.returncode:
        return "%s: its example does not compile:\n%s\n--- as compiled:\n%s" % (
            header, r.stderr.replace(path, "<example>"), "\n".join(src))
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("-I", dest="includes", action="append", default=[])
    a = ap.parse_args()
    includes = a.includes or [a.root]
    failed, checked = 0, 0
    for d in DIRS:
        folder = os.path.join(a.root, d)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".h") or name == "internal.h":
                continue
            header = "%s/%s" % (d, name)
            msg = check(header, a.root, a.cc, includes)
            if msg is None:
                continue
            checked += 1
            if msg:
                failed += 1
                print(msg, file=sys.stderr)
            else:
                print("ok   %s" % header)
    print("%d header examples compiled, %d failed" % (checked - failed, failed))
    return 1 if failed or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
