#!/bin/bash
# acl_e2e.sh's scenarios against `mqlite serve` with ACL: the account of 5.0.0's plain_acl.yml (RocketMQ/12345678).
# mqlite's acl is {access_key: secret_key} only (no per-topic / per-group permissions), so `acl_deny` (topicA=DENY
# in plain_acl.yml) has nothing to deny with.   cluster/mqlite_acl_e2e.sh OUTDIR [PORT]
# MQLITE_ACL_ARGS: the serve arguments that set the account (default: --acl-file with the account RocketMQ / 12345678 of plain_acl.yml).
set -uo pipefail
K="$(cd "$(dirname "$0")/.." && pwd)"
OUT=$(mkdir -p "$1" && cd "$1" && pwd); NP=${2:-19890}; NS=127.0.0.1:$NP
rm -rf "$OUT/store" "$OUT/store.run" "$OUT/clientlogs"; rm -f "$OUT"/*.jsonl
export RMQ_CLIENT_LOG_DIR="$OUT/clientlogs"
R="$K/clients/run.sh"
echo '{"RocketMQ": "12345678"}' > "$OUT/acl.json"
"$K/cluster/mqlite_start.sh" "$OUT/store" $NP ${MQLITE_ACL_ARGS:---acl-file $OUT/acl.json} || exit 1
trap '"$K/cluster/mqlite_stop.sh" "$OUT/store"' EXIT
step() { local name=$1; shift; echo "== $name: $*" >&2; "$@" > "$OUT/$name.jsonl" 2> "$OUT/$name.err"; echo "   rc=$? $(tail -1 "$OUT/$name.jsonl")" >&2; }
step acl_ok      $R Produce $NS topicB 5 ak=RocketMQ sk=12345678 tags=TagA
step acl_badsk   $R Produce $NS topicB 2 ak=RocketMQ sk=wrong retries=0
step acl_noak    $R Produce $NS topicB 2 retries=0
step acl_deny    $R Produce $NS topicA 2 ak=RocketMQ sk=12345678 retries=0
step acl_consume $R PushConsume $NS groupB topicB "*" 5 ak=RocketMQ sk=12345678 seconds=30
step acl_consume_noak $R PushConsume $NS groupB2 topicB "*" 1 seconds=15
python3 - "$OUT" <<'PY'
import json, os, sys
o = sys.argv[1]
def rows(n): return [json.loads(l) for l in open(os.path.join(o, n + '.jsonl')) if l.startswith('{')]
fails = 0
def check(name, cond, d=''):
    global fails
    print(('ok   ' if cond else 'FAIL ') + name + ('  ' + str(d) if d else '')); fails += 0 if cond else 1
r = rows('acl_ok'); check('signed producer, topicB (PUB|SUB): 5 SEND_OK', sum(x.get('status') == 'SEND_OK' for x in r) == 5, r[-1])
for n, what in (('acl_badsk', 'wrong secret key'), ('acl_noak', 'no AclClientRPCHook'), ('acl_deny', 'topicA=DENY')):
    r = rows(n); errs = [x['error'] for x in r if 'error' in x]
    check(f'{what}: every send refused', len(errs) == 2, errs[:1])
r = rows('acl_consume'); check('signed push consumer groupB: 5 delivered', r[-1].get('uniqueAcked') == 5, r[-1])
r = rows('acl_consume_noak'); check('unsigned push consumer: nothing delivered', r[-1].get('acked') == 0, r[-1])
print('FAILED %d' % fails if fails else 'ALL OK'); sys.exit(1 if fails else 0)
PY
