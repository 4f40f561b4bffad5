#!/bin/bash
# The end-to-end scenarios of cluster/e2e.sh, run against `mqlite serve` instead of the Java NameServer + Broker.
#   cluster/mqlite_e2e.sh OUTDIR [PORT]
# mqlite answers name-server and broker requests on one port, so the clients' namesrv is 127.0.0.1:PORT.
# Environment: MQLITE_PY (a Python with mqlite's dependencies, default python3), MQLITE_SRC (PYTHONPATH: an mqlite
# checkout's src, required), MQLITE_SET (extra "--set k=v ..." arguments), MQLITE_ARGS (any other serve arguments).
# Settings mirror e2e.sh's broker: transactionCheckInterval=3000 -> transaction_check_interval=3.
set -uo pipefail
K="$(cd "$(dirname "$0")/.." && pwd)"
OUT=$(mkdir -p "$1" && cd "$1" && pwd); PORT=${2:-19886}; NS=127.0.0.1:$PORT
PY=${MQLITE_PY:-python3}; SRC=${MQLITE_SRC:?set MQLITE_SRC to the src directory of an mqlite checkout}
rm -rf "$OUT/store" "$OUT/clientlogs"; rm -f "$OUT"/*.jsonl "$OUT"/*.err
export RMQ_CLIENT_LOG_DIR="$OUT/clientlogs"
R="$K/clients/run.sh"
"$K/cluster/mqlite_start.sh" "$OUT/store" "$PORT" --set transaction_check_interval=3 ${MQLITE_SET:-} ${MQLITE_ARGS:-} || exit 1
trap '"$K/cluster/mqlite_stop.sh" "$OUT/store"' EXIT
step() { local name=$1; shift; echo "== $name: $*" >&2; local t=$(date +%s); "$@" > "$OUT/$name.jsonl" 2> "$OUT/$name.err"; echo "   rc=$? $(( $(date +%s) - t ))s $(tail -1 "$OUT/$name.jsonl")" >&2; }
step produce       $R Produce $NS E2E 100 tags=TagA,TagB,TagC keys props
step admin_topics  $R Admin $NS topicList
step admin_status  $R Admin $NS topicStatus E2E
step push_tag      $R PushConsume $NS g_tag E2E "TagA || TagB" 67 seconds=60
step push_all      $R PushConsume $NS g_all E2E "*" 100 seconds=60
step push_sql      $R PushConsume $NS g_sql E2E "sql:p IN ('v-0','v-3','v-6','v-7') AND TAGS <> 'TagB'" 3 seconds=30
step progress_all  $R Admin $NS consumerProgress g_all
step push_again    $R PushConsume $NS g_all E2E "*" 1 seconds=15
step retry_produce $R Produce $NS E2ERetry 10 tags=TagR keys
step push_retry    $R PushConsume $NS g_retry E2ERetry "*" 10 retryFirst seconds=90
step orderly_prod  $R Produce $NS E2EOrder 20 props queue=1
step push_orderly  $R PushConsume $NS g_order E2EOrder "*" 20 orderly retryFirst seconds=60
step tx_commit     $R TxProduce $NS E2ETx 5 local=COMMIT
step tx_rollback   $R TxProduce $NS E2ETx 5 local=ROLLBACK
step tx_unknown    $R TxProduce $NS E2ETx 5 local=UNKNOW check=COMMIT seconds=90
step tx_unknown_rb $R TxProduce $NS E2ETx 3 local=UNKNOW check=ROLLBACK seconds=90
step push_tx       $R PushConsume $NS g_tx E2ETx "*" 10 seconds=40
step push_tx_more  $R PushConsume $NS g_tx E2ETx "*" 1 seconds=10
step lite_sub      $R LitePull $NS g_lite E2E 100 commit seconds=60
step progress_lite $R Admin $NS consumerProgress g_lite
step lite_assign   $R LitePull $NS g_lite_assign E2E 100 assign seconds=60
step batch         $R Produce $NS E2EBatch 30 batch=10 tags=TagB
step async         $R Produce $NS E2EBatch 20 async tags=TagB
step oneway        $R Produce $NS E2EBatch 10 oneway tags=TagB
step push_batch    $R PushConsume $NS g_batch E2EBatch "TagB" 60 seconds=60
step delay         $R Produce $NS E2EDelay 5 delayLevel=2
step push_delay    $R PushConsume $NS g_delay E2EDelay "*" 5 seconds=60
step broadcast     $R PushConsume $NS g_bc E2E "TagC" 33 broadcast seconds=60
step acl_produce   $R Produce $NS E2EAcl 3 ak=RocketMQ sk=12345678
step push_dlq      $R PushConsume $NS g_dlq E2ERetry "*" 1 fail=100 maxReconsume=1 seconds=45
step progress_dlq  $R Admin $NS consumerProgress g_dlq
step admin_dlq     $R Admin $NS topicStatus %DLQ%g_dlq
python3 "$K/cluster/e2e_check.py" "$OUT"
