#!/usr/bin/env bash
# mqlite against its targets, everything in one session (~10 min on the 2-core VM):
#   1. peers + mqlite adapters, 100 B, fixed N, 3 interleaved rounds (bench_peers.py)
#   2. mqlite-only sections, 3 rounds (bench_mqlite.py: get vs backlog, SYNC vs raw fdatasync,
#      group commit, clean reopen, abnormal recovery)
#   3. targets.md (ratios + PASS/FAIL), tables.md, profile.txt
# Usage: bash run_mqlite.sh [python]   (default ../.venv-bench/bin/python)
set -euo pipefail
cd "$(dirname "$0")"
PY=${1:-../.venv-bench/bin/python}
OUT=results/scratch/$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$OUT"
echo "writing $OUT" >&2
$PY bench_peers.py --rounds 3 --payloads 100 --out "$OUT/peers.jsonl" --configs \
proto:async:500000,mqlite:async:500000,proto-batch1000:async:500000,mqlite-batch1000:async:500000,\
sqlite-batch1000:default:500000,persistqueue.SQLiteQueue:normal:50000,persistqueue.SQLiteAckQueue:normal:5000,\
litequeue:default:5000,file-append:fdatasync:2000,mqlite:sync:2000,proto:sync:2000,litequeue:full:1500,\
persistqueue.SQLiteQueue:default:1500,sqlite-batch1000:full:100000,mqlite-batch1000:sync:100000 \
  > "$OUT/peers.log"
$PY bench_mqlite.py --rounds 3 --out "$OUT/mqlite.jsonl" > "$OUT/mqlite.log"
python3 targets.py "$OUT/peers.jsonl" "$OUT/mqlite.jsonl" > "$OUT/targets.md"
python3 report.py --ref proto:async "$OUT/peers.jsonl" "$OUT/mqlite.jsonl" > "$OUT/tables.md"
$PY profile_mqlite.py > "$OUT/profile.txt" 2>&1
cat "$OUT/targets.md"
echo "results in $OUT" >&2
