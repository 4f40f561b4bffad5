"""`ProcessQueue`: RocketMQ's `ProcessQueueTest` ported, plus the contract the push consumer relies on.

The numbers of the Java test (reference 8.3): 100 messages with 123-byte bodies cache 100 messages
and 12300 bytes; taking and committing 10 leaves 90 and 11070; removing the last one leaves 89.
The rest pins what reference 8.1 and 8.3 say of `removeMessage`, `putMessage`, `getMaxSpan`,
`takeMessages`/`commit`/`rollback`/`makeMessageToConsumeAgain`, and the "dispatch a consumer"
flag that orderly consumption starts from.
"""

from __future__ import annotations

import threading
import time

import pytest

from mqlite.consumer.processqueue import ProcessQueue
from mqlite.errors import MQClientError
from mqlite.message import PROPERTY_CONSUME_START_TIMESTAMP, MessageExt

BODY_SIZE = 123


def _message(offset: int, body_size: int = BODY_SIZE) -> MessageExt:
    """A `MessageExt` as the Java test builds it: a queue offset, a body of zeros, keys `keys<i>`."""
    msg = MessageExt("TopicTest", bytes(body_size), keys=f"keys{offset}")
    msg.queue_id = 0
    msg.queue_offset = offset
    msg.reconsume_times = 0
    msg.properties[PROPERTY_CONSUME_START_TIMESTAMP] = str(int(time.time() * 1000))
    return msg


def _messages(count: int = 100, first: int = 0, body_size: int = BODY_SIZE) -> list[MessageExt]:
    return [_message(offset, body_size) for offset in range(first, first + count)]


# -- ProcessQueueTest ---------------------------------------------------------------------------------------
def test_cached_message_count() -> None:
    pq = ProcessQueue()
    pq.put_messages(_messages())
    assert pq.msg_count == 100 and len(pq) == 100

    pq.take_messages(10)
    pq.commit()
    assert pq.msg_count == 90

    last = _message(99)
    pq.remove_messages([last])
    assert pq.msg_count == 89


def test_cached_message_size() -> None:
    pq = ProcessQueue()
    pq.put_messages(_messages())
    assert pq.msg_size == 100 * BODY_SIZE == 12300

    pq.take_messages(10)
    pq.commit()
    assert pq.msg_size == 90 * BODY_SIZE == 11070

    pq.remove_messages([_message(99)])
    assert pq.msg_size == 89 * BODY_SIZE


def test_cached_size_in_mib_follows_take_and_commit() -> None:
    """`testFillProcessQueueInfo`: 102400 x 123 bytes is 12 MiB; after taking 10000, 20000 and all: 10, 9, 0."""
    pq = ProcessQueue()
    pq.put_messages(_messages(102400))
    assert pq.msg_size >> 20 == 12
    for batch, mib in ((10000, 10), (10000, 9), (80000, 0)):
        pq.take_messages(batch)
        pq.commit()
        assert pq.msg_size >> 20 == mib
    assert pq.msg_count == 2400  # 102400 - 100000: still cached, under 1 MiB


def test_rollback_of_nothing_taken_leaves_nothing_consuming() -> None:
    """`testRollback` / `testHasTempMessage` on a fresh queue."""
    pq = ProcessQueue()
    pq.rollback()
    assert pq.commit() == -1  # nothing is being consumed
    assert not pq.has_temp_message()
    assert pq.msg_count == 0 and pq.msg_size == 0 and pq.max_span == 0 and pq.first_offset() is None


# -- removeMessage: the offset to commit (reference 8.1) -------------------------------------------------
def test_remove_returns_smallest_cached_offset_then_max_plus_one_then_minus_one() -> None:
    pq = ProcessQueue()
    msgs = _messages(5, first=10)  # offsets 10..14
    pq.put_messages(msgs)
    # Out-of-order completions never move the offset past an unfinished message.
    assert pq.remove_messages([msgs[3]]) == 10
    assert pq.remove_messages([msgs[1], msgs[2]]) == 10
    assert pq.remove_messages([msgs[0]]) == 14
    assert pq.remove_messages([msgs[4]]) == 15  # empty now: queue_offset_max + 1
    assert pq.msg_count == 0 and pq.msg_size == 0
    assert pq.remove_messages([msgs[4]]) == -1  # already empty
    assert pq.remove_messages([]) == -1


def test_remove_of_messages_not_cached_changes_nothing() -> None:
    pq = ProcessQueue()
    pq.put_messages(_messages(3))
    assert pq.remove_messages([_message(7), _message(8)]) == 0
    assert pq.msg_count == 3 and pq.msg_size == 3 * BODY_SIZE
    assert pq.remove_messages([_message(0), _message(0)]) == 1  # a message listed twice counts once
    assert pq.msg_count == 2 and pq.msg_size == 2 * BODY_SIZE


# -- putMessage ------------------------------------------------------------------------------------------
def test_put_ignores_duplicate_offsets() -> None:
    pq = ProcessQueue()
    pq.put_messages(_messages(10))
    pq.put_messages(_messages(5, first=5) + _messages(3, first=10))  # 5..9 again, then 10..12
    assert pq.msg_count == 13 and pq.msg_size == 13 * BODY_SIZE
    assert pq.remove_messages(_messages(13)) == 13
    assert pq.msg_count == 0 and pq.msg_size == 0


def test_a_duplicate_keeps_the_size_of_the_first_copy() -> None:
    pq = ProcessQueue()
    pq.put_messages([_message(0, body_size=10)])
    pq.put_messages([_message(0, body_size=99)])
    assert pq.msg_count == 1 and pq.msg_size == 10
    pq.remove_messages([_message(0, body_size=10)])
    assert pq.msg_size == 0


def test_max_span_is_last_minus_first_cached_offset() -> None:
    pq = ProcessQueue()
    assert pq.max_span == 0
    pq.put_messages([_message(3)])
    assert pq.max_span == 0
    pq.put_messages([_message(7), _message(2500)])
    assert pq.max_span == 2497
    pq.remove_messages([_message(3)])
    assert pq.max_span == 2493
    pq.remove_messages([_message(2500)])
    assert pq.max_span == 0


def test_put_returns_true_only_when_a_consumer_should_be_dispatched() -> None:
    pq = ProcessQueue()
    assert pq.put_messages([]) is False  # nothing cached, nothing to consume
    assert pq.put_messages(_messages(2)) is True  # the first worker is dispatched
    assert pq.put_messages(_messages(2, first=2)) is False  # one is already consuming
    assert len(pq.take_messages(10)) == 4
    assert pq.put_messages(_messages(1, first=4)) is False  # the worker still runs: it will take these
    assert pq.commit() == 4
    assert [m.queue_offset for m in pq.take_messages(10)] == [4]
    assert pq.commit() == 5
    assert pq.take_messages(10) == []  # found nothing: the worker stops, consuming is over
    assert pq.put_messages(_messages(1, first=5)) is True  # so the next put dispatches one again
    assert pq.put_messages(_messages(1, first=5)) is False  # a duplicate, and still consuming


def test_clear_resets_the_dispatch_flag_and_counters() -> None:
    pq = ProcessQueue()
    pq.put_messages(_messages(4))
    pq.take_messages(2)
    pq.clear()
    assert pq.msg_count == 0 and pq.msg_size == 0 and pq.commit() == -1 and not pq.has_temp_message()
    assert pq.put_messages(_messages(1, first=40)) is True
    assert pq.remove_messages([_message(40)]) == 41


def test_first_offset_and_span_skip_messages_removed_out_of_order() -> None:
    pq = ProcessQueue()
    msgs = _messages(10)
    pq.put_messages(msgs)
    assert pq.remove_messages([msgs[i] for i in (0, 1, 2, 9, 8, 5)]) == 3
    assert pq.first_offset() == 3 and pq.max_span == 4  # 3..7 left, 5 gone from the middle
    assert pq.remove_messages([msgs[3], msgs[4]]) == 6
    pq.put_messages(_messages(2, first=10))  # the pull moves on behind the holes
    assert pq.first_offset() == 6 and pq.max_span == 5
    assert pq.remove_messages([msgs[6], msgs[7]]) == 10
    assert pq.msg_count == 2 and pq.msg_size == 2 * BODY_SIZE


# -- orderly: take, commit, rollback, consume again -----------------------------------------------------------
def test_take_commit_returns_last_taken_plus_one() -> None:
    pq = ProcessQueue()
    pq.put_messages(_messages(10, first=100))
    taken = pq.take_messages(3)
    assert [m.queue_offset for m in taken] == [100, 101, 102]
    assert pq.msg_count == 10  # taken messages stay counted until committed
    assert pq.first_offset() == 103 and pq.has_temp_message()
    assert pq.commit() == 103
    assert pq.msg_count == 7 and pq.msg_size == 7 * BODY_SIZE
    assert pq.commit() == -1  # nothing taken since


def test_rollback_puts_every_taken_message_back_in_order() -> None:
    pq = ProcessQueue()
    pq.put_messages(_messages(5))
    pq.take_messages(3)
    pq.rollback()
    assert pq.commit() == -1
    assert pq.msg_count == 5 and pq.msg_size == 5 * BODY_SIZE
    assert [m.queue_offset for m in pq.take_messages(10)] == [0, 1, 2, 3, 4]


def test_make_message_to_consume_again_returns_only_those() -> None:
    pq = ProcessQueue()
    pq.put_messages(_messages(6))
    taken = pq.take_messages(4)  # 0..3
    pq.make_message_to_consume_again(taken[2:])  # 2 and 3 go back
    assert pq.commit() == 2  # 0 and 1 stay taken: commit covers them
    assert pq.msg_count == 4
    assert [m.queue_offset for m in pq.take_messages(10)] == [2, 3, 4, 5]
    assert pq.commit() == 6
    assert pq.msg_count == 0 and pq.msg_size == 0


def test_messages_put_back_go_before_those_pulled_meanwhile() -> None:
    pq = ProcessQueue()
    pq.put_messages(_messages(4))
    taken = pq.take_messages(2)  # 0, 1
    assert pq.put_messages(_messages(2, first=4)) is False  # pulled while 0 and 1 are consumed
    pq.make_message_to_consume_again(taken)
    assert [m.queue_offset for m in pq.take_messages(3)] == [0, 1, 2]
    pq.put_messages(_messages(1, first=6))
    pq.rollback()
    assert [m.queue_offset for m in pq.take_messages(10)] == [0, 1, 2, 3, 4, 5, 6]
    assert pq.commit() == 7
    assert pq.msg_count == 0 and pq.msg_size == 0


def test_take_in_batches_walks_the_queue_in_offset_order() -> None:
    pq = ProcessQueue()
    pq.put_messages(list(reversed(_messages(7))))  # arrival order does not matter
    seen: list[int] = []
    while batch := pq.take_messages(3):
        seen.extend(m.queue_offset for m in batch)
        assert pq.commit() == batch[-1].queue_offset + 1
    assert seen == list(range(7))
    assert pq.msg_count == 0


# -- threads ---------------------------------------------------------------------------------------------
def test_concurrent_puts_and_removes_keep_the_counters_exact() -> None:
    pq = ProcessQueue()
    msgs = _messages(4000)
    pq.put_messages(msgs)
    errors: list[BaseException] = []

    def remove(part: list[MessageExt]) -> None:
        try:
            for i in range(0, len(part), 7):
                offset = pq.remove_messages(part[i:i + 7])
                assert offset == -1 or 0 <= offset <= 4000
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=remove, args=(msgs[k::4],), name=f"test-pq-{k}") for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert pq.msg_count == 0 and pq.msg_size == 0 and pq.max_span == 0
    assert pq.remove_messages(msgs[:1]) == -1


# -- a lite pull consumer's whole pull results (runs) ----------------------------------------------------
def test_runs_commit_the_first_message_not_handed_out_of_the_oldest_run() -> None:
    pq = ProcessQueue()
    first = pq.put_run(_messages(10))
    second = pq.put_run(_messages(5, first=12))  # 10 and 11 were filtered out by the pull
    assert pq.msg_count == 15 and pq.msg_size == 15 * BODY_SIZE and pq.max_span == 16
    # Two pollers: the later result is handed out first; the offset stays at the older one's front.
    assert pq.remove_from_run(second, second.msgs) == 0
    assert pq.msg_count == 10 and pq.msg_size == 10 * BODY_SIZE and pq.first_offset() == 0
    assert pq.remove_from_run(first, first.msgs[:3]) == 3  # an iteration hands out a part
    assert pq.msg_size == 7 * BODY_SIZE and pq.max_span == 16 - 3
    assert pq.remove_from_run(first, first.msgs[3:]) == 17  # everything handed out: queue_offset_max + 1
    assert pq.msg_count == 0 and pq.msg_size == 0 and pq.max_span == 0 and pq.first_offset() is None


def test_a_run_is_handed_out_from_its_front_only() -> None:
    pq = ProcessQueue()
    run = pq.put_run(_messages(4))
    with pytest.raises(MQClientError, match="in order"):
        pq.remove_from_run(run, run.msgs[1:2])
    with pytest.raises(MQClientError, match="in order"):
        pq.remove_from_run(run, run.msgs + _messages(1, first=4))
    assert pq.msg_count == 4  # a refused hand-out changes nothing
    assert pq.remove_from_run(run, run.msgs[:2]) == 2
    with pytest.raises(MQClientError, match="expected offset 2"):
        pq.remove_from_run(run, run.msgs[:2])  # twice
    assert pq.remove_from_run(run, []) == -1


def test_runs_of_a_cleared_queue_count_nothing_when_handed_out_late() -> None:
    pq = ProcessQueue()
    stale = pq.put_run(_messages(3))
    pq.clear()  # a seek: the result in a poller's hands is stale
    fresh = pq.put_run(_messages(2, first=7))
    assert pq.remove_from_run(stale, stale.msgs) == -1
    assert pq.msg_count == 2 and pq.msg_size == 2 * BODY_SIZE and pq.first_offset() == 7
    assert pq.remove_from_run(fresh, fresh.msgs) == 9


# -- a push consumer's pull results: whole runs, acks noted lock-free by consume threads, folded by the pull thread
def test_acks_fold_in_and_never_commit_past_a_message_not_acked() -> None:
    pq = ProcessQueue()
    run = pq.push_run(_messages(10))
    assert pq.msg_count == 10 and pq.msg_size == 10 * BODY_SIZE and pq.first_offset() == 0
    assert pq.fold_acked() == -1  # nothing noted
    pq.ack(run, 3, 5)
    assert pq.msg_count == 10 and pq.acked_pending == 2  # noted, not folded: still cached
    assert pq.fold_acked() == 0 and pq.pending_offset == 0
    assert pq.msg_count == 8 and pq.settle_size() == 8 * BODY_SIZE and pq.acked_pending == 0
    pq.ack(run, 0, 3)
    pq.ack(run, 6, 10)
    assert pq.fold_acked() == 5 and pq.pending_offset == 5 and pq.first_offset() == 5
    assert pq.max_span == 0  # only 5 is left
    pq.ack(run, 5, 6)
    assert pq.fold_acked() == 10 and pq.msg_count == 0 and pq.msg_size == 0 and pq.first_offset() is None


def test_acks_and_removals_of_one_message_count_it_once() -> None:
    """A timed-out message sent back (removed one by one) whose listener call then succeeds (acked)."""
    pq = ProcessQueue()
    run = pq.push_run(_messages(4))
    assert pq.remove_messages([run.msgs[1]]) == 0 and pq.msg_count == 3
    pq.ack(run, 0, 4)
    pq.ack(run, 0, 2)
    assert pq.fold_acked() == 4 and pq.msg_count == 0 and pq.msg_size == 0
    assert pq.remove_messages([run.msgs[2]]) == -1 and pq.msg_count == 0  # nothing is left


def test_runs_count_body_bytes_exactly_once_settled() -> None:
    """Flow control by size: an acked range of a run in progress keeps its bytes counted (never less than
    the exact figure) until `settle_size`; a removal one by one and a finished run free them at once."""
    pq = ProcessQueue()
    first = pq.push_run([_message(offset, body_size=10 * (offset + 1)) for offset in range(4)])  # 10..40
    second = pq.push_run([_message(offset, body_size=100) for offset in range(4, 6)])
    assert pq.msg_count == 6 and pq.msg_size == 100 + 200
    pq.ack(first, 1, 3)  # 20 + 30
    assert pq.fold_acked() == 0 and pq.msg_count == 4 and pq.msg_size == 300 and pq.max_span == 5
    assert pq.settle_size() == 250 and pq.msg_size == 250
    pq.ack(second, 1, 2)  # the newest run's tail: the span ends at 4 now
    assert pq.fold_acked() == 0 and pq.msg_size == 250 and pq.max_span == 4
    assert pq.remove_messages([first.msgs[0]]) == 3 and pq.msg_size == 240  # one by one: exact at once
    pq.ack(first, 3, 4)  # the run is done: all of what it still counted goes
    assert pq.fold_acked() == 4 and pq.msg_count == 1 and pq.msg_size == 200 and pq.max_span == 0
    assert pq.settle_size() == 100
    pq.ack(second, 0, 1)
    assert pq.fold_acked() == 6 and pq.msg_count == 0 and pq.msg_size == 0 == pq.settle_size()


def test_runs_drop_what_is_cached_already_and_a_clear_forgets_acks() -> None:
    pq = ProcessQueue()
    run = pq.push_run(_messages(3))
    again = pq.push_run(_messages(3, first=1))  # 1 and 2 are cached already
    assert [m.queue_offset for m in again.msgs] == [3] and pq.msg_count == 4
    pq.ack(run, 0, 1)
    assert pq.fold_acked() == 1 and pq.msg_count == 3
    pq.ack(run, 1, 2)
    pq.clear()  # an illegal offset: everything cached is forgotten, acks noted before too
    fresh = pq.push_run(_messages(2, first=7))
    pq.ack(run, 2, 3)  # a late ack of a run cleared away counts nothing
    assert pq.fold_acked() == 7 and pq.msg_count == 2 and pq.msg_size == 2 * BODY_SIZE
    assert pq.first_offset() == 7 and fresh.left == 2


def test_acks_from_many_threads_while_the_owner_folds() -> None:
    pq = ProcessQueue()
    runs = [pq.push_run(_messages(32, first=first)) for first in range(0, 4000, 32)]
    acked: set[int] = set()
    done = threading.Event()
    errors: list[BaseException] = []

    def fold() -> None:
        try:
            while not done.is_set() or pq.acked_pending:
                offset = pq.fold_acked()
                # Never past a message some thread has not acknowledged yet.
                assert offset == -1 or all(o in acked for o in range(offset))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def consume_noting(k: int) -> None:
        for run in runs[k::4]:
            for start in range(0, len(run.msgs), 3):
                stop = min(start + 3, len(run.msgs))
                acked.update(m.queue_offset for m in run.msgs[start:stop])  # noted before the ack is visible
                pq.ack(run, start, stop)

    folder = threading.Thread(target=fold, name="test-pq-fold")
    folder.start()
    threads = [threading.Thread(target=consume_noting, args=(k,), name=f"test-pq-ack-{k}") for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    done.set()
    folder.join(30)
    assert not errors
    assert pq.fold_acked() in (-1, 4000)
    assert pq.msg_count == 0 and pq.msg_size == 0 and pq.pending_offset == 4000
