"""The store's bytes, pinned: a scripted run writes exactly the files it always wrote.

A deterministic run (a `ManualClock` from a fixed instant, fixed msg_ids, explicit queues)
drives every writer path of the commit log on a fresh store: `Producer.send` singles with
tags, keys and user properties, a bytearray body, a compressed body, a resend of a message
that has its id, `send_batch`, a delayed message delivered by moving the clock, a
transactional half committed and one rolled back, a long topic (MAGIC_V2), born hosts in
IPv6 (single and batch puts), staged Spark chunks appended with `inbox.append_staged`
(`encode_records` + `CommitLog.append_encoded_records`: one size, mixed sizes, heads of
mixed lengths, routed and hashed rows), send-back to the retry topic (then delivered) and
to the DLQ. Segments are small, so the log rolls over (BLANK records) and so do the
consume queues and the index. The broker is closed, then every file's content is hashed.

The expected digests were recorded by this same script against the code before the
record-codec move (issue 13), so the test proves a change of shape left the bytes alone.

What is hashed: every file of `commitlog/` and `consumequeue/` by path; the `index/` files
by content only (their names follow the wall time the reput thread rolls a file at), as a
sorted list; `checkpoint` (its timestamps are store times, from the manual clock);
`config/*.json` (their `dataVersion` timestamps come from the manual clock too).

Regenerate the digests only on a deliberate format change:

    PYTHONPATH=src python tests/test_store_bytes.py

prints `EXPECTED = {...}`; paste it below and say in the commit why the bytes changed.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sys
import tempfile
from typing import Any

import numpy as np

import mqlite
from mqlite import inbox
from mqlite.clock import ManualClock

#: Small files: the commit log rolls (BLANK records), consume queues and the index roll too.
SETTINGS: dict[str, Any] = {
    "commitlog_file_size": 32 * 1024,
    "consumequeue_file_size": 20 * 8,
    "max_hash_slot_num": 16,
    "max_index_num": 64,
    "flush_disk_type": "ASYNC_FLUSH",
}
STORE_EPOCH_MS = 1_760_000_000_000  # store time starts here
TOPIC = "Gold"
#: Over 127 UTF-8 bytes: MAGIC_V2, a 2-byte topic length. Not a name a client may send to (RocketMQ's
#: `Validators` allow [%|a-zA-Z0-9_-], at most 127 characters), so it goes through the store's puts.
LONG_TOPIC = "Long-\u00e9t\u00e9" + "\u00e9" * 70
GROUP = "golden-cg"


def _uid(seq: int) -> str:
    """A fixed msg_id (UNIQ_KEY): the producer keeps an id it is given."""
    return f"60{seq:030X}"


def _body(seq: int, size: int) -> bytes:
    return (f"body-{seq}|".encode() * (size // 8 + 1))[:size]


class _Decide:
    """A transaction listener that commits or rolls back by the message's tag."""

    def execute_local_transaction(self, msg: Any, arg: Any) -> Any:
        return (mqlite.LocalTransactionState.COMMIT_MESSAGE if msg.tags == "Commit"
                else mqlite.LocalTransactionState.ROLLBACK_MESSAGE)

    def check_local_transaction(self, msg: Any) -> Any:
        return mqlite.LocalTransactionState.UNKNOW


def _fixed_ids(start: int) -> Any:
    """An `inbox._new_ids` that hands out fixed ids (the staged rows' UNIQ_KEYs) from `start`."""
    counter = [start]

    def new_ids(count: int) -> list[str]:
        first = counter[0]
        counter[0] += count
        return [_uid(seq) for seq in range(first, first + count)]

    return new_ids


def _sends(broker: Any, clock: ManualClock) -> None:
    producer = mqlite.Producer(broker, "golden-pg")
    producer.start()
    try:
        for seq in range(24):
            queue_id = seq % 4
            keys = [f"key-{seq}", f"shard-{seq % 3}"] if seq % 3 == 0 else ([f"key-{seq}"] if seq % 3 == 1 else None)
            props = {"UNIQ_KEY": _uid(seq)}
            if seq % 5 == 0:
                props["color"] = "blue" if seq % 2 else "green"
            msg = mqlite.Message(TOPIC, _body(seq, 200 + 37 * seq), tags=f"Tag{seq % 3}" if seq % 4 else None,
                                 keys=keys, flag=seq % 7, properties=props)
            producer.send(msg, queue=mqlite.MessageQueue(TOPIC, broker.broker_name, queue_id))
            clock.advance(11)
        mq0 = mqlite.MessageQueue(TOPIC, broker.broker_name, 0)
        producer.send(mqlite.Message(TOPIC, bytearray(_body(100, 300)), tags="Bytes",  # type: ignore[arg-type]
                                     properties={"UNIQ_KEY": _uid(100)}), queue=mq0)
        big = mqlite.Message(TOPIC, _body(101, 3 * producer.compress_msg_body_over_howmuch), tags="Zip",
                             keys="zipped", properties={"UNIQ_KEY": _uid(101)})
        producer.send(big, queue=mq0)  # compressed (over compress_msg_body_over_howmuch)
        again = mqlite.Message(TOPIC, _body(102, 150), tags="Again", properties={"UNIQ_KEY": _uid(102)})
        producer.send(again, queue=mq0)
        clock.advance(5)
        producer.send(again, queue=mq0)  # the resend keeps its id
        batch = [mqlite.Message(TOPIC, _body(seq, 90 + seq % 3 * 40), tags="Batch", keys=f"bk-{seq}",
                                properties={"UNIQ_KEY": _uid(seq)}) for seq in range(110, 116)]
        producer.send_batch(batch, queue=mqlite.MessageQueue(TOPIC, broker.broker_name, 1))
        producer.send_batch([mqlite.Message(TOPIC, _body(seq, 64), properties={"UNIQ_KEY": _uid(seq)})
                             for seq in range(116, 120)], queue=mqlite.MessageQueue(TOPIC, broker.broker_name, 2))
        clock.advance(13)
        delayed = mqlite.Message(TOPIC, _body(130, 180), tags="Later", delay_time_level=1,
                                 properties={"UNIQ_KEY": _uid(130)})
        producer.send(delayed, queue=mqlite.MessageQueue(TOPIC, broker.broker_name, 3))
        clock.advance(1000)  # level 1 is 1 s: due now
        assert broker.wait_idle(timeout=10)
    finally:
        producer.shutdown()


class _FixedIds:
    """Stands in for the broker's `UniqIdGenerator` of op messages: fixed ids from `start`."""

    def __init__(self, start: int) -> None:
        self.seq = start

    def next_id(self) -> str:
        self.seq += 1
        return _uid(self.seq)


def _transactions(broker: Any, clock: ManualClock) -> None:
    # Fixed ids and queues where the code makes its own: the op messages' ids (the broker's
    # generator holds the pid and the time) and the producer's queue turn (a random start).
    broker.transactions._ids = _FixedIds(400)
    txn = mqlite.TransactionProducer(broker, "golden-txn", listener=_Decide())
    txn._round_robin = itertools.count(0)
    txn.start()
    try:
        for seq, tag in ((140, "Commit"), (141, "Rollback")):
            txn.send_message_in_transaction(mqlite.Message(TOPIC, _body(seq, 160), tags=tag,
                                                           properties={"UNIQ_KEY": _uid(seq)}))
            clock.advance(3)
    finally:
        txn.shutdown()


def _store_puts(broker: Any) -> None:
    """IPv6 born hosts (single and batch) and the long topic, through the store's own puts."""
    broker.put_message(TOPIC, 2, _body(150, 220), {"UNIQ_KEY": _uid(150), "TAGS": "V6"}, born_host="[::1]:40000")
    broker.put_messages(TOPIC, 3, [_body(seq, 75) for seq in (151, 152)],
                        [{"UNIQ_KEY": _uid(seq), "KEYS": f"v6-{seq}"} for seq in (151, 152)],
                        born_host="[2001:db8::7]:9876")
    store = broker.store
    store.put(LONG_TOPIC, 0, _body(120, 400), {"UNIQ_KEY": _uid(120), "TAGS": "Long"})
    store.put(LONG_TOPIC, 0, _body(121, 10), None, flag=3, born_host="[fe80::1]:1")
    store.put_batch(LONG_TOPIC, 1, [_body(seq, 120) for seq in range(122, 125)],
                    [{"UNIQ_KEY": _uid(seq), "TAGS": "LongBatch"} for seq in range(122, 125)])


def _staged(broker: Any, root: str) -> None:
    """Spark's write path without pyspark: `write_chunk` (`encode_records`) then `append_staged`."""
    job = os.path.join(root, inbox.STAGING_DIR, "golden-job")
    os.makedirs(job)
    path = os.path.join(job, "part-0")
    born = STORE_EPOCH_MS - 60_000
    with open(path, "wb") as f:
        # One size, one head, routed to queue 1: the 2-D copy of encode_records.
        lengths = np.full(5, 48, dtype=np.int64)
        inbox.write_chunk(f, TOPIC, born, lengths, b"".join(_body(s, 48) for s in range(200, 205)),
                          [{"TAGS": "Spark", "KEYS": "sk"}], np.zeros(5, dtype=np.int64),
                          routes=np.ones(5, dtype=np.int64))
        # Mixed sizes and heads of mixed lengths, routes by queue and by hash, flags.
        sizes = [30, 75, 12, 60, 41, 99]
        bodies = b"".join(_body(s, n) for s, n in zip(range(210, 216), sizes))
        heads = [{"TAGS": "A"}, {"TAGS": "Bee", "KEYS": "k1 k2", "where": "here"}, {}]
        inbox.write_chunk(f, TOPIC, born + 1, np.array(sizes), bodies, heads, np.array([0, 1, 2, 0, 1, 2]),
                          routes=np.array([0, 3, -2 - 7, 2, -2 - 12345, 0], dtype=np.int64),
                          flags=np.array([0, 1, 2, 3, 4, 5], dtype=np.int32))
    assert inbox.append_staged(broker, [path]) == 11
    # The long topic (no client may name it, so no staged job does): its chunk, bare (each head
    # carries its own id), read back and put with the store's own encoded-records put.
    long_path = os.path.join(job, "part-long")
    with open(long_path, "wb") as f:
        inbox.write_chunk(f, LONG_TOPIC, born + 2, np.array([20, 20]), _body(220, 40),
                          [{"UNIQ_KEY": _uid(220), "TAGS": "x"}, {"UNIQ_KEY": _uid(221)}], np.array([0, 1]),
                          bare=True)
    (chunk,) = inbox.read_chunks(long_path)
    broker.store.put_encoded_records(LONG_TOPIC, 1, chunk.records, chunk.sizes, [7, 0], chunk.key_hashes,
                                     chunk.key_rows)


def _send_back(broker: Any, clock: ManualClock) -> None:
    failed = broker.query_message_by_offset(TOPIC, 1, 0)
    broker.send_message_back(GROUP, failed)  # level 3 + reconsume times: 10 s
    clock.advance(10_000)
    assert broker.wait_idle(timeout=10)  # delivered to %RETRY%golden-cg
    retried = broker.query_message_by_offset(f"%RETRY%{GROUP}", 0, 0)
    broker.send_message_back(GROUP, retried, max_reconsume_times=1)  # its second failure: the DLQ
    broker.send_message_back(GROUP, broker.query_message_by_offset(TOPIC, 0, 1), delay_level=-1)  # straight there


def build_store(root: str) -> None:
    """Write the scripted store at `root` (a fresh directory) and close it."""
    clock = ManualClock(start_ms=STORE_EPOCH_MS)
    new_ids = inbox._new_ids
    inbox._new_ids = _fixed_ids(300)  # type: ignore[assignment]  # the staged rows' ids, fixed
    try:
        with mqlite.open(root, clock=clock, **SETTINGS) as opened:
            broker: Any = opened  # the writer Broker (mqlite.open's union also names RemoteBroker)
            broker.create_topic(TOPIC, 4)
            _sends(broker, clock)
            _transactions(broker, clock)
            _store_puts(broker)
            clock.advance(17)
            _staged(broker, root)
            _send_back(broker, clock)
            assert broker.wait_idle(timeout=10)
    finally:
        inbox._new_ids = new_ids  # type: ignore[assignment]


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def store_digests(root: str) -> dict[str, str]:
    """SHA-256 of every file that holds the store's bytes (see the module docstring), by name."""
    digests: dict[str, str] = {}
    for sub in ("commitlog", "consumequeue"):
        for dirpath, _, files in os.walk(os.path.join(root, sub)):
            for name in files:
                path = os.path.join(dirpath, name)
                digests[os.path.relpath(path, root)] = _sha(path)
    index_dir = os.path.join(root, "index")
    index = sorted(_sha(os.path.join(index_dir, name)) for name in os.listdir(index_dir))
    for i, digest in enumerate(index):
        digests[f"index/#{i}"] = digest
    digests["checkpoint"] = _sha(os.path.join(root, "checkpoint"))
    config_dir = os.path.join(root, "config")
    for name in os.listdir(config_dir):
        if name.endswith(".json"):
            digests[f"config/{name}"] = _sha(os.path.join(config_dir, name))
    return dict(sorted(digests.items()))


#: Recorded against the starting commit 14a5cef (before the record codec moved).
EXPECTED: dict[str, str] = {
    'checkpoint': '6b5d5088c309f9069acf807556273912c6008ba25fde95f59161ff43d9950d3e',
    'commitlog/00000000000000000000': '74617864449cec9333c2a6f9b647ef92c8c059875bb1eed3adc38b9847c2ffcc',
    'commitlog/00000000000000032768': 'ef97e00c49d5654732c93aef7ed8553f307d40a4a12d79065fa145902050c02b',
    'config/consumerOffset.json': '5920feb303b1dfc2da76f6cfd41cd6f019d14d87f9fa76fa1f340a3edff6351c',
    'config/delayOffset.json': '7b4b49f62c9368372b657981629e6b874982ddbc570b65909c8cfe0cc9a06a15',
    'config/logHead.json': '53944e9b4fc841f4100ee3240bb3190a36a379041a0d56bdb52bd3f8e4f3c301',
    'config/store.json': 'cd15b697ae95ad312f84d65517abb82cef20bde9b3cfb348c11d8d93c1fc0264',
    'config/topics.json': 'ac68902b55520fc0d1173ddee5dd688dc627d1d55f02d3684ad1a88d38a6124b',
    'consumequeue/%DLQ%golden-cg/0/00000000000000000000': '95eaff92c7cf8967a04cdf5d17f4bddd20764852d0ab08f9e533fe3326ceb451',
    'consumequeue/%RETRY%golden-cg/0/00000000000000000000': '2b4f319e5e65a6607c8d6084c5fd2e6beedda6deabf7cd782b6a204a79ded401',
    'consumequeue/Gold/0/00000000000000000000': '4e2368d45d84c1e37636402096fc9e2a6a48eb92bb4cdaafa269b11c61b8a8ff',
    'consumequeue/Gold/0/00000000000000000160': '8ac9c3db96fec5e37ae0c82e894f2b41c0cf5d659cab448926339cc091d10f41',
    'consumequeue/Gold/1/00000000000000000000': '8d61fc74c90c5efeae5040e2877a468a6d6ce2fad7c005564bfb5c66f8f0a5eb',
    'consumequeue/Gold/1/00000000000000000160': 'ec32b8f592ed388e682e54d2c1770aaa5a65d1d593ef3e31b65dab7e868c8d48',
    'consumequeue/Gold/1/00000000000000000320': '307ad248f2c8d133c42dfc267f0bd4d8b43e3a71d0623b71e94afdc26c882016',
    'consumequeue/Gold/2/00000000000000000000': 'f411f2504c24545d56092208a8a839658659fbd2de7a76ab362b4c7569dbce81',
    'consumequeue/Gold/2/00000000000000000160': '5f01c909986cb50c75c4654707f3bf0100713bb318d3436262f90db82f2e8de9',
    'consumequeue/Gold/3/00000000000000000000': '4d3bf3c3125b80cd8526138c99bf50bfa9417b882fe6c76e986406ebeb84e83a',
    'consumequeue/Gold/3/00000000000000000160': 'd508b4c76b2a9e5ba09991c8344786d1666be62db3db30cc1e56e42f9dcf0167',
    'consumequeue/Long-étééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé/0/00000000000000000000': '3edca2c23ff37f511171bc94c91530af9c8ebb06c56de8b2d9506118eb5a5694',
    'consumequeue/Long-étééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé/1/00000000000000000000': '89db32170cc268641b21d6cef10751d8b6fa86950d16ee6487cc60ffe5fdeacf',
    'consumequeue/RMQ_SYS_TRANS_HALF_TOPIC/0/00000000000000000000': '9711b39f66090ab551fa15df5419eb1104655f050255fc716dd7bdbf47dcfaef',
    'consumequeue/RMQ_SYS_TRANS_OP_HALF_TOPIC/0/00000000000000000000': '75f909bdaf5f60044b689c43b17605abedd69d34717d00f99ac6b890463df304',
    'consumequeue/SCHEDULE_TOPIC_XXXX/0/00000000000000000000': 'bf3bba7d49395b4940db60bd8b20753ebbcf9e2b9e31dcd09b11e02bb0030da2',
    'consumequeue/SCHEDULE_TOPIC_XXXX/2/00000000000000000000': 'ff3879beacaed8abe1fdbc26c4d2ade4e207018b5aa98dd9ce3de002269fbf1a',
    'index/#0': '2bbdb4baae9d3fc9c2fd037d1202b32a772727ebc8e0c00ba3e865a48d1b8b70',
    'index/#1': '69da7436e0dc95be13cd2aed8702c1cdbeea5ec3fccdd398afff89dd42e4909e',
}


def test_store_bytes_are_unchanged(tmp_path: Any) -> None:
    root = str(tmp_path / "store")
    build_store(root)
    got = store_digests(root)
    changed = sorted(name for name in EXPECTED.keys() | got.keys() if EXPECTED.get(name) != got.get(name))
    assert not changed, (f"the scripted run wrote other bytes in {changed}: a change of shape must not change "
                         f"the format (regenerate EXPECTED only for a deliberate format change: see the docstring)")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        build_store(os.path.join(tmp, "store"))
        digests = store_digests(os.path.join(tmp, "store"))
    sys.stdout.write("EXPECTED: dict[str, str] = {\n")
    for name, digest in digests.items():
        sys.stdout.write(f"    {name!r}: {digest!r},\n")
    sys.stdout.write("}\n")
