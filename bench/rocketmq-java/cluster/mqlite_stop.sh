#!/bin/bash
# Stop what mqlite_start.sh started for STORE (SIGTERM: graceful; SIGKILL after 30 s).
STORE=$1; RUN="$STORE.run"; f="$RUN/mqlite.pid"
[ -f "$f" ] || exit 0
pid=$(cat "$f")
if kill -0 "$pid" 2>/dev/null; then
  kill "$pid"
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && { echo "mqlite ($pid) did not stop on SIGTERM within 30 s; killing" >&2; kill -9 "$pid"; }
fi
rm -f "$f"; echo "stopped mqlite ($pid)"
