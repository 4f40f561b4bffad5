"""Child processes of the damage campaign (`test_damage_campaign.py`; run as a script, never collected).

    python tests/_damagechild.py build DIR MODEL STATE
        Build a campaign store at DIR and write the model of what it acknowledged to MODEL
        (JSON). The store is written in two sessions (so every config file has a `.bak`):
        three topics, keys and tags, a batch, a delayed message (level 18: not due while
        building, nor when a case reopens the store by the model's `check_clock_ms`), a timer
        message due in a day,
        a transactional half message left UNKNOW, committed offsets of a consumer group.
        STATE `clean`: close and print DONE. STATE `crash` (SYNC_FLUSH), or `crash-async`
        (ASYNC_FLUSH, then an explicit flush of everything): print READY and wait for the
        parent's SIGKILL, so the store is left as a crashed writer leaves it.
    python tests/_damagechild.py serve
        A fork server: import mqlite once, then for each JSON line on stdin
        (``{"root", "model", "timeout"}``, and ``"selftest": "sigbus"|"hang"`` to test the
        harness itself) fork a process that runs `check_store` on the
        damaged copy and print its verdict as one JSON line. A case that crashes the
        interpreter (SIGBUS, SIGSEGV) or hangs past `timeout` costs only its forked
        process: the verdict says `crash` (with the signal) or `hang` (with every
        thread's stack, from faulthandler).

The verdict is raw facts (what verify said, what open did, which acknowledged things
were unreachable); the test module judges them.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import random
import select
import signal
import sys
import time
import traceback
from typing import Any

#: Small files so that a couple of hundred messages make several of each file kind.
SETTINGS: dict[str, Any] = {
    "commitlog_file_size": 64 * 1024,
    "consumequeue_file_size": 20 * 8,
    "max_hash_slot_num": 32,
    "max_index_num": 128,  # 4 x slots: the shape a lost store.json is inferred with
}
#: (topic, queue count) of the user topics; DmgC/0 gets a third of the messages (many queue files).
TOPICS = (("DmgA", 4), ("DmgB", 2), ("DmgC", 1))
GROUP = "campaign-cg"  # the consumer group whose offsets are committed
FRESH_GROUP = "campaign-fresh"  # the group that reads every queue from its first offset in the check
DELAY_LEVEL = 18  # 2 h
STORE_EPOCH_MS = 1_760_000_000_000  # the build's store time starts here (2025-10-09)
SESSION_MESSAGES = 80  # single sends per session (two sessions, plus a batch)


# -- building a store ---------------------------------------------------------------------------
def _uniq(seq: int) -> dict[str, str]:
    """A fixed msg_id (UNIQ_KEY, which the producer keeps): the index's layout is the same every run."""
    return {"UNIQ_KEY": f"DA{seq:030X}"}


def _body(rng: random.Random, seq: int) -> bytes:
    return f"msg-{seq}|".encode() + rng.randbytes(rng.randint(300, 1200))


class _Unknown:
    """A transaction listener that leaves every half message to the check-back."""

    def execute_local_transaction(self, msg: Any, arg: Any) -> Any:
        from mqlite import LocalTransactionState
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: Any) -> Any:
        from mqlite import LocalTransactionState
        return LocalTransactionState.UNKNOW


def _session(broker: Any, clock: Any, rng: random.Random, first_seq: int, sent: list[dict[str, Any]]) -> None:
    """Send SESSION_MESSAGES single messages (a third to DmgC/0) to explicit queues, a second apart."""
    import mqlite

    producer = mqlite.Producer(broker, "campaign-pg")
    producer.start()
    try:
        for seq in range(first_seq, first_seq + SESSION_MESSAGES):
            topic, queues = TOPICS[2] if seq % 3 == 0 else rng.choice(TOPICS[:2])
            queue_id = rng.randrange(queues)
            keys = [f"key-{seq}", f"shard-{seq % 4}"] if seq % 4 == 0 else ([f"key-{seq}"] if seq % 4 == 1 else [])
            msg = mqlite.Message(topic, _body(rng, seq), tags=f"Tag{seq % 3}", keys=keys or None,
                                 properties=_uniq(seq))
            result = producer.send(msg, queue=mqlite.MessageQueue(topic, broker.broker_name, queue_id))
            assert result.send_status is mqlite.SendStatus.SEND_OK, result
            sent.append({"topic": topic, "queue_id": queue_id, "queue_offset": result.queue_offset,
                         "msg_id": result.msg_id, "body": msg.body.hex(), "keys": keys})
            clock.advance(1000)
    finally:
        producer.shutdown()


def _batch(broker: Any, rng: random.Random, first_seq: int, sent: list[dict[str, Any]]) -> None:
    import mqlite

    producer = mqlite.Producer(broker, "campaign-pg")
    producer.start()
    try:
        mq = mqlite.MessageQueue("DmgB", broker.broker_name, 1)
        msgs = [mqlite.Message("DmgB", _body(rng, seq), tags="Batch", keys=[f"key-{seq}"], properties=_uniq(seq))
                for seq in range(first_seq, first_seq + 3)]
        result = producer.send_batch(msgs, queue=mq)
        assert result.send_status is mqlite.SendStatus.SEND_OK, result
        for i, (msg, msg_id) in enumerate(zip(msgs, result.msg_id.split(","))):
            sent.append({"topic": "DmgB", "queue_id": 1, "queue_offset": result.queue_offset + i,
                         "msg_id": msg_id, "body": msg.body.hex(), "keys": [f"key-{first_seq + i}"]})
    finally:
        producer.shutdown()


def _commit_offsets(broker: Any, model: dict[str, Any], share: float) -> None:
    """Commit `share` of every user queue's messages for GROUP and persist the table at once."""
    import mqlite

    table: dict[str, dict[str, int]] = model.setdefault("offsets", {})
    for topic, queues in TOPICS:
        for queue_id in range(queues):
            mq = mqlite.MessageQueue(topic, broker.broker_name, queue_id)
            offset = int(broker.max_offset(mq) * share)
            broker.commit_offset(GROUP, mq, offset)
            table.setdefault(topic, {})[str(queue_id)] = offset
    assert broker.offsets is not None
    broker.offsets.persist()


def _find(broker: Any, topic: str, queue_id: int, msg_id: str) -> int:
    """The queue offset of the message `msg_id` in a system queue."""
    store = broker.store
    for offset in range(store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)):
        msg = broker.query_message_by_offset(topic, queue_id, offset)
        if msg.msg_id == msg_id:
            return offset
    raise AssertionError(f"{msg_id} is not in {topic}/{queue_id}")


def build(root: str, model_path: str, state: str) -> None:
    """Write the campaign store and its model (see the module docstring)."""
    import mqlite
    from mqlite.clock import ManualClock
    from mqlite.delay import SCHEDULE_TOPIC, TIMER_TOPIC
    from mqlite.txn import HALF_TOPIC

    rng = random.Random(20261125)
    flush = "SYNC_FLUSH" if state == "crash" else "ASYNC_FLUSH"  # clean and crash-async
    # Store times a second apart from a fixed past instant: segments span minutes, so a current
    # checkpoint (crash-async) makes abnormal recovery start at the newest segment, not at 0 (its
    # safe time is 3 s before the last flushed record); and every run writes the same bytes (with
    # the fixed msg_ids), so seeded damage hits the same fields. A case reopens the store by this
    # clock a minute on (`check_clock_ms`), so what waits here still waits there.
    clock = ManualClock(start_ms=STORE_EPOCH_MS)
    sent: list[dict[str, Any]] = []
    model: dict[str, Any] = {"topics": dict(TOPICS), "group": GROUP}
    with mqlite.open(root, flush_disk_type=flush, clock=clock, **SETTINGS) as broker:
        for topic, queues in TOPICS:
            broker.create_topic(topic, queues)
        _session(broker, clock, rng, 0, sent)
        _commit_offsets(broker, model, 0.25)
        assert broker.delay is not None
        broker.delay.persist()
    broker = mqlite.open(root, clock=clock)  # the second session: store.json (and the rest) get a .bak
    _session(broker, clock, rng, SESSION_MESSAGES, sent)
    _batch(broker, rng, 2 * SESSION_MESSAGES, sent)
    producer = mqlite.Producer(broker, "campaign-pg")
    producer.start()
    delayed = producer.send(mqlite.Message("DmgA", b"delayed|" + rng.randbytes(200), tags="Later",
                                           delay_time_level=DELAY_LEVEL, properties=_uniq(1000)),
                            queue=mqlite.MessageQueue("DmgA", broker.broker_name, 0))
    timer_msg = mqlite.Message("DmgA", b"timer|" + rng.randbytes(200), tags="Timer", properties=_uniq(1002))
    timer_msg.deliver_time_ms = clock.now_ms() + 86_400_000  # a timer message due in a day
    timer = producer.send(timer_msg, queue=mqlite.MessageQueue("DmgA", broker.broker_name, 1))
    producer.shutdown()
    txn = mqlite.TransactionProducer(broker, "campaign-txn", listener=_Unknown())
    txn.start()
    half = txn.send_message_in_transaction(mqlite.Message("DmgB", b"half|" + rng.randbytes(200), tags="Half",
                                                          properties=_uniq(1001)))
    txn.shutdown()
    _commit_offsets(broker, model, 0.5)
    assert broker.delay is not None
    broker.delay.persist()
    # Where each acknowledged record is in the commit log: the test excuses only the loss of
    # records whose bytes the damage destroyed.
    for entry in sent:
        msg = broker.query_message_by_offset(entry["topic"], entry["queue_id"], entry["queue_offset"])
        assert msg.msg_id == entry["msg_id"] and msg.body.hex() == entry["body"], entry
        entry["offset"], entry["size"] = msg.commit_log_offset, msg.store_size
    model["messages"] = sent
    level_queue = DELAY_LEVEL - 1
    model["delayed"] = {"msg_id": delayed.msg_id, "topic": SCHEDULE_TOPIC, "queue_id": level_queue,
                        "level": DELAY_LEVEL, "real_topic": "DmgA",
                        "queue_offset": _find(broker, SCHEDULE_TOPIC, level_queue, delayed.msg_id)}
    model["timer"] = {"msg_id": timer.msg_id, "topic": TIMER_TOPIC, "queue_id": 0, "real_topic": "DmgA",
                      "queue_offset": _find(broker, TIMER_TOPIC, 0, timer.msg_id)}
    model["half"] = {"msg_id": half.msg_id, "topic": HALF_TOPIC, "queue_id": 0,
                     "queue_offset": _find(broker, HALF_TOPIC, 0, half.msg_id)}
    # A case reopens the store a minute after the build by this clock: nothing above is due.
    model["check_clock_ms"] = clock.now_ms() + 60_000
    for key in ("delayed", "timer", "half"):
        entry = model[key]
        msg = broker.query_message_by_offset(entry["topic"], entry["queue_id"], entry["queue_offset"])
        entry["offset"], entry["size"] = msg.commit_log_offset, msg.store_size
    with open(model_path + ".tmp", "w") as f:
        json.dump(model, f)
    os.replace(model_path + ".tmp", model_path)
    if state.startswith("crash"):
        if state == "crash-async":
            store = broker.store
            assert isinstance(store, mqlite.MessageStore)
            store.flush()  # ASYNC_FLUSH: the model is what this flush made durable (all of it)
        print("READY", flush=True)
        sys.stdin.read()  # until SIGKILL: the store stays as a crashed writer leaves it
        return
    broker.close()
    print("DONE", flush=True)


# -- checking a damaged store -----------------------------------------------------------------
class _Losses:
    """What the checks found unreachable: [{"what", "msg" (model index or a name), "detail"}]."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, what: str, msg: int | str | None, detail: str) -> None:
        self.items.append({"what": what, "msg": msg, "detail": detail[:300]})


def _documented(exc: BaseException) -> bool:
    import mqlite
    return isinstance(exc, mqlite.MQLiteError)


def _check_messages(broker: Any, model: dict[str, Any], losses: _Losses) -> None:
    """Every acknowledged message by queue offset, by msg_id (the index) and by each key."""
    for i, entry in enumerate(model["messages"]):
        topic, queue_id, qoff = entry["topic"], entry["queue_id"], entry["queue_offset"]
        try:
            msg = broker.query_message_by_offset(topic, queue_id, qoff)
            if msg.msg_id != entry["msg_id"] or msg.body.hex() != entry["body"]:
                losses.add("offset", i, f"{topic}/{queue_id}@{qoff} holds {msg.msg_id}, another message or body")
        except Exception as exc:
            if not _documented(exc):
                raise
            losses.add("offset", i, f"{topic}/{queue_id}@{qoff}: {type(exc).__name__}: {exc}")
        try:
            msg = broker.view_message(entry["msg_id"])
            if msg.body.hex() != entry["body"]:
                losses.add("view", i, f"view_message({entry['msg_id']}) returned another body")
        except Exception as exc:
            if not _documented(exc):
                raise
            losses.add("view", i, f"view_message({entry['msg_id']}): {type(exc).__name__}: {exc}")
        for key in entry["keys"]:
            try:
                found = broker.query_message(topic, key)
            except Exception as exc:
                if not _documented(exc):
                    raise
                found = []
            if not any(m.msg_id == entry["msg_id"] for m in found):
                losses.add("key", i, f"query_message({topic!r}, {key!r}) misses {entry['msg_id']}")


def _check_pull(broker: Any, model: dict[str, Any], losses: _Losses) -> None:
    """A fresh group pulls every queue from its first offset: each acknowledged message arrives, no stall."""
    import mqlite
    from mqlite.longpoll import PullStatus

    expected: dict[tuple[str, int], dict[int, int]] = {}
    for i, entry in enumerate(model["messages"]):
        expected.setdefault((entry["topic"], entry["queue_id"]), {})[entry["queue_offset"]] = i
    for (topic, queue_id), wanted in sorted(expected.items()):
        mq = mqlite.MessageQueue(topic, broker.broker_name, queue_id)
        offset = broker.min_offset(mq)
        got: dict[int, Any] = {}
        for _ in range(4 * len(wanted) + 16):  # more rounds than units: a loop that cannot end is a stall
            result = broker.pull(FRESH_GROUP, mq, offset, 32)
            for msg in result.msg_found_list:
                got[msg.queue_offset] = msg
            if result.pull_status is PullStatus.NO_NEW_MSG and result.next_begin_offset >= broker.max_offset(mq):
                break
            if result.next_begin_offset <= offset:
                losses.add("stall", f"{topic}/{queue_id}", f"pull at {offset} returned {result!r}")
                break
            offset = result.next_begin_offset
        else:
            losses.add("stall", f"{topic}/{queue_id}", f"pulling never reached the end (at {offset})")
        for qoff, i in wanted.items():
            msg = got.get(qoff)
            if msg is None or msg.msg_id != model["messages"][i]["msg_id"] \
                    or msg.body.hex() != model["messages"][i]["body"]:
                losses.add("pull", i, f"a fresh group's pulls of {topic}/{queue_id} miss offset {qoff}")


def _check_waiting(broker: Any, name: str, entry: dict[str, Any], passed: bool, losses: _Losses) -> None:
    """A delayed or timer message waits in its system queue, or (its cursor `passed` it) is in its topic."""
    try:
        if passed:  # delivered early would be a bug of its own, but not a loss
            if not any(m.msg_id == entry["msg_id"] for m in broker.query_message(entry["real_topic"], entry["msg_id"])):
                losses.add(name, name, f"the delivery cursor passed the {name} message at {entry['queue_offset']}, "
                                       f"which is not in {entry['real_topic']}")
            return
        msg = broker.query_message_by_offset(entry["topic"], entry["queue_id"], entry["queue_offset"])
        if msg.msg_id != entry["msg_id"]:
            losses.add(name, name, f"{entry['topic']} holds {msg.msg_id} at {entry['queue_offset']}")
    except Exception as exc:
        if not _documented(exc):
            raise
        losses.add(name, name, f"{type(exc).__name__}: {exc}")


def _check_pending(broker: Any, model: dict[str, Any], losses: _Losses) -> None:
    """The delayed and the timer message still wait (or were delivered); the half message still waits."""
    from mqlite.txn import CID_SYS_TRANS

    assert broker.delay is not None
    # The cursors first: delivery stores a message in its topic before its cursor passes it.
    delayed, timer = model["delayed"], model["timer"]
    cursor = broker.delay.offset_table().get(delayed["level"], 0)
    low, done = broker.delay.timer_state()
    _check_waiting(broker, "delayed", delayed, cursor > delayed["queue_offset"], losses)
    _check_waiting(broker, "timer", timer, timer["queue_offset"] < low or timer["queue_offset"] in done, losses)
    half = model["half"]
    mq_offset = broker.store.min_offset(half["topic"], half["queue_id"])
    committed = broker.offsets.query(CID_SYS_TRANS, half["topic"], half["queue_id"])  # read before the scan
    start = max(committed, mq_offset)
    found = False
    for offset in range(start, broker.store.max_offset(half["topic"], half["queue_id"])):
        try:
            found = broker.query_message_by_offset(half["topic"], half["queue_id"], offset).msg_id == half["msg_id"]
        except Exception as exc:
            if not _documented(exc):
                raise
        if found:
            break
    if not found:
        losses.add("half", "half", f"no copy of the half message at or after the check's offset {start}")


def _check_offsets(broker: Any, model: dict[str, Any], losses: _Losses) -> None:
    """Committed offsets never move forward (a smaller one only re-delivers)."""
    import mqlite

    for topic, queues in model["offsets"].items():
        for queue_id, committed in queues.items():
            mq = mqlite.MessageQueue(topic, broker.broker_name, int(queue_id))
            now = broker.query_offset(model["group"], mq)
            if now > committed:
                losses.add("offsets", f"{topic}/{queue_id}", f"committed offset {committed} became {now}")
            elif now != committed:
                losses.add("offsets-back", f"{topic}/{queue_id}", f"committed offset {committed} became {now}")


def _check_append(broker: Any, losses: _Losses) -> None:
    """After the recovery a new message is stored, and found by its queue offset, its id and its key."""
    import mqlite

    producer = mqlite.Producer(broker, "campaign-after")
    producer.start()
    try:
        body = b"after-recovery"
        result = producer.send(mqlite.Message("DmgC", body, tags="After", keys="after-recovery"),
                               queue=mqlite.MessageQueue("DmgC", broker.broker_name, 0))
    except Exception as exc:
        if not _documented(exc):
            raise
        losses.add("append", "after", f"a send after the recovery failed: {type(exc).__name__}: {exc}")
        return
    finally:
        producer.shutdown()
    try:
        by_offset = broker.query_message_by_offset("DmgC", 0, result.queue_offset)
        by_id = broker.view_message(result.msg_id)
        by_key = broker.query_message("DmgC", "after-recovery")
    except Exception as exc:
        if not _documented(exc):
            raise
        losses.add("append", "after", f"the message sent after the recovery: {type(exc).__name__}: {exc}")
        return
    if by_offset.body != body or by_id.body != body or not any(m.msg_id == result.msg_id for m in by_key):
        losses.add("append", "after", f"the message sent after the recovery reads back wrong ({result!r})")


def _find_losses(broker: Any, model: dict[str, Any], writer: bool) -> list[dict[str, Any]]:
    losses = _Losses()
    _check_messages(broker, model, losses)
    _check_pull(broker, model, losses)
    if writer:
        _check_pending(broker, model, losses)
        _check_offsets(broker, model, losses)
        _check_append(broker, losses)
    return losses.items


def _raw(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_tb(exc.__traceback__)[-4:])


class _LogTap(logging.Handler):
    """Keeps mqlite's warnings and errors for the verdict (they name what recovery did)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < 12:
            self.lines.append(f"{record.levelname}: {record.getMessage()}"[:300])


def check_store(root: str, model: dict[str, Any]) -> dict[str, Any]:
    """The facts about one damaged store: verify before reopen, a read-only probe, then a writer's open."""
    import mqlite
    from mqlite.clock import ManualClock
    from mqlite.verify import verify_store

    tap = _LogTap()
    logging.getLogger("mqlite").addHandler(tap)
    verdict: dict[str, Any] = {"raw": []}
    try:
        report = verify_store(root)
        verdict["verify_ok"] = report.ok
        verdict["verify_problems"] = report.problems[:50]
    except Exception as exc:  # verify promises a report, never an exception, on damage
        verdict["raw"].append("verify: " + _raw(exc))
        verdict["verify_ok"] = False  # it did not say OK: the read-only probe is not needed
    if verdict["verify_ok"]:
        # Only needed to judge a silent verify: did the damage, as it lies, hide acknowledged data?
        try:
            with mqlite.open(root, read_only=True) as reader:
                verdict["hidden"] = _find_losses(reader, model, writer=False)
        except Exception as exc:
            verdict["hidden"] = [{"what": "read-only", "msg": None, "detail": f"{type(exc).__name__}: {exc}"}]
            if not _documented(exc):
                verdict["raw"].append("read-only open/read: " + _raw(exc))
    try:
        # The build's clock, a minute on: the delayed and timer messages are not due yet.
        broker = mqlite.open(root, clock=ManualClock(start_ms=model["check_clock_ms"]))
    except mqlite.StoreCorruptedError as exc:
        verdict["outcome"] = "refused"
        verdict["error"] = str(exc)[:500]
    except Exception as exc:
        verdict["outcome"] = "open-raised"
        verdict["error"] = _raw(exc)
    else:
        verdict["outcome"] = "opened"
        try:
            verdict["recovery"] = repr(getattr(broker.store, "recovery", None))
            verdict["losses"] = _find_losses(broker, model, writer=True)
        except Exception as exc:
            verdict["outcome"] = "check-raised"
            verdict["error"] = _raw(exc)
        finally:
            try:
                broker.close()
            except Exception as exc:
                verdict["raw"].append("close: " + _raw(exc))
    verdict["log"] = tap.lines
    return verdict


# -- the fork server ------------------------------------------------------------------------------
def _run_forked(case: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """Run `check_store` in a forked process; a crash or a hang is the verdict, not the server's end."""
    read_fd, write_fd = os.pipe()
    stack_path = case["root"] + ".stacks"
    pid = os.fork()
    if pid == 0:  # the case's process: never returns
        code = 0
        try:
            os.close(read_fd)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)  # stdout is the server's answer pipe: nothing the case prints may reach it
            with open(stack_path, "w") as stacks:
                faulthandler.enable(stacks)  # SIGBUS/SIGSEGV: the stack goes to the file
                faulthandler.dump_traceback_later(case["timeout"] - 1, exit=True, file=stacks)
                try:
                    _selftest(case.get("selftest"))
                    data = json.dumps(check_store(case["root"], model))
                except BaseException as exc:
                    data = json.dumps({"outcome": "harness-error", "error": _raw(exc), "raw": []})
                view = memoryview(data.encode())
                while view:
                    view = view[os.write(write_fd, view):]
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + case["timeout"] + 5
    timed_out = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([read_fd], [], [], left)
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_fd)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    stack_text = ""
    try:
        with open(stack_path) as f:
            stack_text = f.read()[-4000:]
        os.unlink(stack_path)
    except OSError:
        pass
    if chunks and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        verdict: dict[str, Any] = json.loads(b"".join(chunks))
        return verdict
    if timed_out or "Timeout" in stack_text:
        return {"outcome": "hang", "error": stack_text, "raw": []}
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
    return {"outcome": "crash", "error": f"{how}\n{stack_text}", "raw": []}


def _selftest(kind: str | None) -> None:
    """The harness's own tests: a case that dies of SIGBUS, or one that never ends."""
    if kind == "sigbus":
        os.kill(os.getpid(), signal.SIGBUS)
    elif kind == "hang":
        select.select([], [], [])  # no descriptor, no timeout: only the watchdog ends it


def serve() -> None:
    """Answer one JSON verdict line per JSON case line on stdin (see the module docstring)."""
    import mqlite  # noqa: F401 - imported once here, inherited by every forked case
    import mqlite.verify  # noqa: F401

    models: dict[str, dict[str, Any]] = {}
    for line in sys.stdin:
        case = json.loads(line)
        if case["model"] not in models:
            with open(case["model"]) as f:
                models[case["model"]] = json.load(f)
        print(json.dumps(_run_forked(case, models[case["model"]])), flush=True)


def main(argv: list[str]) -> None:
    mode, *rest = argv
    if mode == "build":
        root, model_path, state = rest
        build(root, model_path, state)
    elif mode == "serve":
        serve()
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
