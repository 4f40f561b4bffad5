#!/bin/bash
# Send rates of the 5.0.0 Java client (clients/Perf.java: one DefaultMQProducer, one calling thread, 100 B bodies)
# against the real 5.0.0 NameServer+Broker and against `mqlite serve`, alternating, ROUNDS rounds, both ASYNC_FLUSH,
# a fresh store for every server start.     cluster/perf.sh OUTDIR [ROUNDS]
# Env: NSYNC NASYNC NBATCH (messages per timed run), MQLITE_PY / MQLITE_SRC (see mqlite_start.sh), ports NP BP MP.
set -uo pipefail
K="$(cd "$(dirname "$0")/.." && pwd)"
OUT=$(mkdir -p "$1" && cd "$1" && pwd); ROUNDS=${2:-3}
NP=${NP:-27886}; BP=${BP:-27931}; MP=${MP:-27896}
NSYNC=${NSYNC:-20000}; NASYNC=${NASYNC:-60000}; NBATCH=${NBATCH:-300000}
export RMQ_CLIENT_LOG_DIR="$OUT/clientlogs"
R="$K/clients/run.sh"
res="$OUT/perf.jsonl"; : > "$res"
runperf() {  # runperf SERVER ROUND NS
  for mode in sync async batch; do
    n=$NSYNC; [ $mode = async ] && n=$NASYNC; [ $mode = batch ] && n=$NBATCH
    line=$($R Perf $3 Perf_$mode $mode $n size=100 batch=100 warm=5000 2> "$OUT/$1-$2-$mode.err" | tail -1)
    echo "{\"server\":\"$1\",\"round\":$2,\"result\":$line}" | tee -a "$res"
  done
}
for r in $(seq 1 $ROUNDS); do
  rm -rf "$OUT/java" "$OUT/java.run"
  "$K/cluster/start.sh" $NP $BP "$OUT/java" > "$OUT/java-start-$r.log" 2>&1 || { cat "$OUT/java-start-$r.log"; exit 1; }
  runperf rocketmq-5.0.0 $r 127.0.0.1:$NP
  "$K/cluster/stop.sh" "$OUT/java" > /dev/null
  rm -rf "$OUT/mqlite" "$OUT/mqlite.run"
  "$K/cluster/mqlite_start.sh" "$OUT/mqlite" $MP ${MQLITE_SET:-} > "$OUT/mqlite-start-$r.log" 2>&1 || { cat "$OUT/mqlite-start-$r.log"; exit 1; }
  runperf mqlite $r 127.0.0.1:$MP
  "$K/cluster/mqlite_stop.sh" "$OUT/mqlite" > /dev/null
done
python3 - "$res" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault((r['server'], r['result'].get('mode')), []).append(r['result'].get('msgsPerSec', 0))
print('mode    rocketmq-5.0.0 (rounds)            mqlite serve (rounds)               ratio of medians')
for mode in ('sync', 'async', 'batch'):
    j = by.get(('rocketmq-5.0.0', mode), []); m = by.get(('mqlite', mode), [])
    ratio = statistics.median(m) / statistics.median(j) if j and m and statistics.median(j) else float('nan')
    print(f'{mode:6}  {str(j):34} {str(m):34} {ratio:.2f}x')
PY
