#!/bin/bash
# Before/after on one machine: the same benchmarks on two source trees, interleaved round by round
# (the order flips each round, so drift on a shared machine hits both alike).
#
#   bash bench/compare_trees.sh BASE_SRC HEAD_SRC [ROUNDS=3] [OUTDIR=results/scratch/compare]
#   python3 bench/compare_report.py OUTDIR
#
# BASE_SRC and HEAD_SRC are `src` directories (e.g. of `git worktree add --detach ../base <commit>`).
# Rows: the producer's send paths and their store floors, push and lite-pull draining, the Spark
# reader alone, reading through the consume queue, and a SYNC_FLUSH put beside write+fdatasync.
# The benchmark scripts are this checkout's; they use only names both trees have.
set -euo pipefail
BASE=$(realpath "$1"); HEAD=$(realpath "$2"); ROUNDS=${3:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(realpath -m "${4:-$HERE/results/scratch/compare}")
PY=${PY:-$HERE/../.venv/bin/python}
mkdir -p "$OUT"; cd "$HERE"
run() {  # side src round
  local side=$1 src=$2 r=$3 f="$OUT/$1.txt"
  PYTHONPATH=$src $PY bench_producer.py --rounds 1 --n 50000 --only floor_put,send,floor_batch,batch 2>&1 \
    | sed "s/^/$side r$r producer: /" >> "$f"
  PYTHONPATH=$src $PY bench_consumer.py --n 200000 --only push_backlog,poll 2>&1 | sed "s/^/$side r$r consumer: /" >> "$f"
  PYTHONPATH=$src $PY bench_spark.py --n 300000 --rounds 1 --only python 2>&1 | grep -v WARN \
    | sed "s/^/$side r$r spark: /" >> "$f"
  PYTHONPATH=$src $PY bench_mqlite.py --rounds 1 --only sync_single,get_backlog --backlogs 100000 --sync-n 2000 2>&1 \
    | sed "s/^/$side r$r mqlite: /" >> "$f"
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run base "$BASE" "$r"; run head "$HEAD" "$r"; else run head "$HEAD" "$r"; run base "$BASE" "$r"; fi
done
echo "results in $OUT: python3 $HERE/compare_report.py $OUT"
