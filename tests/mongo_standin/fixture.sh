#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tests/mongo_standin/fixture.sh start|stop DIR — ctest's fixture mongo_standin, which
# every test of the MongoDB backend requires (see tests/mongo_test.h).
#
# start: unless $SHOAL_TEST_MONGO_URI names a server (then the tests use it and nothing is
#   started), starts the stand-in (standin.py: mockupdb + mongomock) on a free port of
#   127.0.0.1 as the primary of the one-member replica set "shoal", in the background, and
#   writes DIR/uri (the tests read it through $SHOAL_TEST_MONGO_URI_FILE), DIR/pid and
#   DIR/standin.log. It watches ctest's pid and exits when ctest is gone.
# stop: stops it (SIGTERM; it logs its peak memory and command counts) and prints the log.
set -eu
cmd=${1:?usage: fixture.sh start|stop DIR}
dir=${2:?usage: fixture.sh start|stop DIR}
here=$(cd "$(dirname "$0")" && pwd)
# Debian's interpreter: a python3 earlier on PATH (pyenv, a venv) may not see
# python3-mockupdb and python3-mongomock.
py=/usr/bin/python3

stop_pid() {
  pid=$1
  # Only a stand-in: the pid file may be stale and its number reused.
  if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q standin.py; then
    kill -TERM "$pid" 2>/dev/null || true
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
}

case $cmd in
start)
  mkdir -p "$dir"
  if [ -f "$dir/pid" ]; then stop_pid "$(cat "$dir/pid")"; fi
  rm -f "$dir/uri" "$dir/port" "$dir/pid"
  if [ -n "${SHOAL_TEST_MONGO_URI:-}" ]; then
    echo "mongo_standin: SHOAL_TEST_MONGO_URI names a server: the MongoDB tests run against it;" \
      "the stand-in is not started"
    exit 0
  fi
  : >"$dir/standin.log"
  # $PPID is ctest: the stand-in exits when it is gone (a ctest killed before its cleanup).
  if ! "$py" "$here/standin.py" --port 0 --replset shoal --background --parent-pid "$PPID" \
    --port-file "$dir/port" --pid-file "$dir/pid" --log "$dir/standin.log"; then
    echo "mongo_standin: the stand-in did not start; its log:" >&2
    cat "$dir/standin.log" >&2
    exit 1
  fi
  port=$(cat "$dir/port")
  echo "mongodb://127.0.0.1:$port/shoal_test?replicaSet=shoal" >"$dir/uri"
  echo "mongo_standin: MongoDB stand-in (tests/mongo_standin/standin.py: mockupdb + mongomock)" \
    "on 127.0.0.1:$port, pid $(cat "$dir/pid"); URI in $dir/uri"
  ;;
stop)
  if [ -f "$dir/pid" ]; then
    stop_pid "$(cat "$dir/pid")"
    rm -f "$dir/pid"
  fi
  rm -f "$dir/uri" "$dir/port"
  if [ -s "$dir/standin.log" ]; then cat "$dir/standin.log"; fi
  ;;
*)
  echo "usage: fixture.sh start|stop DIR" >&2
  exit 2
  ;;
esac
