#!/usr/bin/env bash
# Full anchor run. Usage: bash run_all.sh [python]   (default ../.venv-bench/bin/python)
set -euo pipefail
cd "$(dirname "$0")"
PY=${1:-../.venv-bench/bin/python}
OUT=results/scratch/$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$OUT"
# 1. peers, every mode, N calibrated so the slower phase takes ~6 s
$PY bench_peers.py --target-s 6 --out "$OUT/peers.jsonl" > "$OUT/peers.log"
# 2. durable (fsync-per-put) modes, fixed N, 3 interleaved rounds + raw fdatasync floor
$PY bench_peers.py --rounds 3 --out "$OUT/durable.jsonl" --configs \
file-append:fdatasync:3000,proto:sync:3000,persistqueue.SQLiteQueue:default:3000,\
persistqueue.SQLiteAckQueue:default:1500,litequeue:full:1500,diskcache.Deque:full:1500,\
queuelib.FifoSQLiteQueue:default:1500,lmdb-queue:default:1500,\
sqlite-batch1000:full:100000,proto-batch1000:sync:100000 > "$OUT/durable.log"
# 2b. non-durable modes, fixed N, 3 interleaved rounds (robust ratios)
$PY bench_peers.py --rounds 3 --out "$OUT/fast.jsonl" --configs \
deque:default:5000000,queue.Queue:default:2000000,proto:async:500000,proto-batch1000:async:1000000,\
file-append:nosync:500000,queuelib.FifoDiskQueue:default:500000,lmdb-queue:nosync:200000,\
sqlite-batch1000:default:500000,persistqueue.SQLiteQueue:normal:50000,persistqueue.SQLiteAckQueue:normal:5000,\
litequeue:default:5000,diskcache.Deque:default:30000,persistqueue.Queue:default:10000,\
persistqueue.Queue:autosave:10000 > "$OUT/fast.log"
# 3. physical / interpreter limits and the pure-Python prototype
$PY bench_physical.py --out "$OUT/physical.jsonl" > "$OUT/physical.log"
{ for f in peers fast durable physical; do echo "## $f"; python3 report.py --settings "$OUT/$f.jsonl"; done; } > "$OUT/tables.md"
echo "results in $OUT"
