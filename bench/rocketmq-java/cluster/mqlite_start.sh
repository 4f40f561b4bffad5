#!/bin/bash
# Start `mqlite serve STORE --listen 127.0.0.1:PORT ARGS...` in the background; wait until the port answers.
#   cluster/mqlite_start.sh STORE PORT [serve arguments...]
# MQLITE_PY / MQLITE_SRC as in mqlite_e2e.sh. Pid and output: STORE.run/mqlite.{pid,out}.
set -uo pipefail
STORE=$1; PORT=$2; shift 2
PY=${MQLITE_PY:-python3}; SRC=${MQLITE_SRC:?set MQLITE_SRC to the src directory of an mqlite checkout}
RUN="$STORE.run"; mkdir -p "$RUN"
PYTHONPATH="$SRC" "$PY" -m mqlite serve "$STORE" --listen 127.0.0.1:$PORT "$@" > "$RUN/mqlite.out" 2>&1 &
echo $! > "$RUN/mqlite.pid"
for _ in $(seq 1 150); do
  if ! kill -0 "$(cat "$RUN/mqlite.pid")" 2>/dev/null; then echo "mqlite serve died:" >&2; cat "$RUN/mqlite.out" >&2; exit 1; fi
  python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $PORT), 0.5).close()" 2>/dev/null && { echo "mqlite serve up on 127.0.0.1:$PORT (pid $(cat "$RUN/mqlite.pid"))"; exit 0; }
  sleep 0.2
done
echo "mqlite serve did not listen on $PORT within 30 s" >&2; cat "$RUN/mqlite.out" >&2; exit 1
