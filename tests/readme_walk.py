# SPDX-License-Identifier: Apache-2.0
"""test_readme_walk: a newcomer's walk through README.md, against the built programs.

Every fenced block that README.md opens with ```sh runnable is run, in order, as a bash
script (set -euo pipefail) in a fresh folder that looks like the source tree: each
top-level entry of the tree is linked there, `build` links to the build folder, and the
store is the folder's own ./runs. So the commands run exactly as a reader would type them
from the repository root after `make demo` built the programs, and the README cannot
drift from them: a command that fails, a flag or key that no longer exists, a config
that moved, fails this test. A block that trains a gym: env is skipped, saying so, where
no Gymnasium is installed for shoal (`shoal envs` lists no gym: ids).

Only one change is made to the text: a `shoal run` that does not set run.max_seconds
gets `--set run.max_seconds=S` (S from --max-seconds, default 10), so a run that would
train for minutes stops in time; a run that solves sooner is unchanged. The walk prints
each block's commands and output.

Usage: readme_walk.py --root SRC --build BUILD [--readme README.md] [--budget 110]
                      [--max-seconds 10] [--list]
Exit: 0 every block passed; 1 a block failed (its output and the command are printed);
77 (SKIPPED) when the programs are not built.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

FENCE_OPEN = re.compile(r"^```sh runnable\s*$")
SHOAL_RUN = re.compile(r"^(\s*build/bin/shoal run )(?!.*--resume)")


def blocks(readme):
    """(line number, text) of each ```sh runnable block, in order."""
    out, cur, start = [], None, 0
    with open(readme, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if cur is None:
                if FENCE_OPEN.match(line):
                    cur, start = [], n + 1
            elif line.startswith("```"):
                out.append((start, "".join(cur)))
                cur = None
            else:
                cur.append(line)
    if cur is not None:
        raise SystemExit("readme_walk: %s: the block from line %d is not closed" % (readme, start))
    return out


def shorten(text, max_s):
    """Adds --set run.max_seconds=max_s to each `shoal run` command that lacks it."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        # A command may continue over lines ending in a backslash.
        j = i
        while lines[j].endswith("\\") and j + 1 < len(lines):
            j += 1
        cmd = lines[i:j + 1]
        joined = " ".join(cmd)
        if SHOAL_RUN.match(cmd[0]) and "run.max_seconds" not in joined:
            last = cmd[-1]
            # before a trailing comment, if any
            m = re.search(r"\s+#", last)
            add = " --set run.max_seconds=%g" % max_s
            cmd[-1] = last[:m.start()] + add + last[m.start():] if m else last + add
        out.extend(cmd)
        i = j + 1
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--readme")
    ap.add_argument("--budget", type=float, default=110.0)
    ap.add_argument("--max-seconds", type=float, default=10.0)
    ap.add_argument("--list", action="store_true", help="print the blocks as they would run")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    build = os.path.abspath(a.build)
    readme = a.readme or os.path.join(root, "README.md")
    name = os.path.basename(readme)
    runnable = blocks(readme)
    if not runnable:
        print("readme_walk: %s has no ```sh runnable block" % readme)
        return 1
    if a.list:
        for start, text in runnable:
            print("# %s line %d\n%s" % (name, start, shorten(text, a.max_seconds)))
        return 0
    if not os.access(os.path.join(build, "bin", "shoal"), os.X_OK):
        print("SKIPPED: %s/bin/shoal is not built" % build)
        return 77

    work = tempfile.mkdtemp(prefix="shoal-readme-walk-")
    for name in os.listdir(root):
        if name in ("runs",) or name.startswith("build") or name.startswith(".git"):
            continue
        os.symlink(os.path.join(root, name), os.path.join(work, name))
    os.symlink(build, os.path.join(work, "build"))
    env = dict(os.environ)
    for k in ("SHOAL_STORE_URI", "SHOAL_TOKEN", "SHOAL_STORE_PASSWORD"):
        env.pop(k, None)
    env["PS4"] = "+ "
    # gym: ids need the Python venv `make deps` makes (or SHOAL_ENV_PYTHON); where it is
    # missing `shoal envs` lists no gym: ids, and a block that trains one is skipped.
    envs = subprocess.run([os.path.join(build, "bin", "shoal"), "envs"], cwd=work, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode()
    have_gym = "gym:CartPole-v1" in envs.split()
    t0 = time.monotonic()
    ok = True
    for start, text in runnable:
        script = shorten(text, a.max_seconds)
        if "gym:" in script and not have_gym:
            print("== %s line %d: SKIPPED: no Gymnasium for gym: ids (make deps makes its "
                  "venv; or set SHOAL_ENV_PYTHON)" % (name, start))
            continue
        left = a.budget - (time.monotonic() - t0)
        print("== %s line %d (%.0f s of the budget left)" % (name, start, left), flush=True)
        if left <= 0:
            print("readme_walk: out of time before this block (budget %.0f s)" % a.budget)
            ok = False
            break
        try:
            p = subprocess.run(["bash", "-x", "-e", "-u", "-o", "pipefail", "-c", script],
                               cwd=work, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=left)
            out, rc = p.stdout.decode("utf-8", "replace"), p.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode("utf-8", "replace")
            rc = "timeout"
        sys.stdout.write(out)
        if rc != 0:
            print("readme_walk: the block at %s line %d failed (%s): the last '+ ' "
                  "line above is the command" % (name, start, rc))
            ok = False
            break
    print("readme_walk: %d block(s), %.1f s" % (len(runnable), time.monotonic() - t0))
    if ok and not os.environ.get("SHOAL_TEST_KEEP"):
        shutil.rmtree(work, ignore_errors=True)
    else:
        print("readme_walk: the walk's folder is kept: %s" % work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
