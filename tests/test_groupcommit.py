"""SYNC_FLUSH group commit (`storeservices.GroupCommit`) and the pipelined `send_async` on top of it.

The flush is driven through the group commit's one seam, `_flush_to` (the call that flushes the
log and returns the offset now durable; tests/test_services.py replaces it the same way): a
`GatedFlush` reads the log end when a flush begins (the offset it will report durable, as the
store's flush reads it before `fdatasync`), then waits until the test opens its gate, then flushes
for real. So a test decides exactly which records a flush covers and when it ends.
"""

from __future__ import annotations

import _thread
import asyncio
import collections
import concurrent.futures
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import mqlite
import mqlite.aio
from mqlite.commitlog import PutMessageStatus
from mqlite.config import StoreConfig
from mqlite.store import MessageStore
from mqlite import storeservices
from mqlite.storeservices import GroupCommit
from support import SMALL_STORE, deadline, no_leftover_threads, wait_until  # noqa: F401

SYNC: dict[str, Any] = {**SMALL_STORE, "flush_disk_type": "SYNC_FLUSH"}


class GatedFlush:
    """The store's flush, held at a gate: `begun` gets each flush's target (the log end it read
    first); the flush then waits for a permit (`open()`), flushes and reports that target durable."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        group_commit = store.group_commit
        assert group_commit is not None, "GatedFlush needs a SYNC_FLUSH store"
        self.group_commit = group_commit
        self.real = self.group_commit._flush_to
        self.begun: queue.Queue[int] = queue.Queue()
        self._permits = threading.Semaphore(0)

    def __call__(self) -> int:
        target = self.store.commitlog.max_offset
        self.begun.put(target)
        if not self._permits.acquire(timeout=30):
            raise AssertionError("the test never let this flush finish")
        if not self.store.closed:  # (a store that closed meanwhile flushed everything itself)
            self.real()
        return target

    def install(self) -> GatedFlush:
        self.group_commit._flush_to = self  # type: ignore[method-assign]
        return self

    def next_target(self) -> int:
        """The target of the next flush to begin (waits for it)."""
        return self.begun.get(timeout=10)

    def open(self, flushes: int = 1) -> None:
        for _ in range(flushes):
            self._permits.release()


def _put_in_thread(store: MessageStore, body: bytes) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(store.put("T", 0, body)), name=f"writer-{body!r}")
    thread.start()
    return thread, out


def _end(result: Any) -> int:
    return int(result.commit_log_offset + result.wrote_bytes)


def _parked(group_commit: GroupCommit, n: int) -> Callable[[], bool]:
    return lambda: len(group_commit._waiters) == n


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(str(tmp_path), StoreConfig(**SYNC)) as store:
        yield store


# -- writers --------------------------------------------------------------------------------------------
def test_many_writers_are_acked_only_once_durable_and_find_their_messages_after_reopen(tmp_path: Path) -> None:
    acked: list[tuple[int, int, bytes]] = []  # (record end, durable offset seen at the ack, body)

    with MessageStore(str(tmp_path), StoreConfig(**SYNC)) as store:
        flushed = store.commitlog.mapped_files

        def writer(n: int) -> None:
            for i in range(25):
                body = b"w%d-%d" % (n, i)
                result = store.put("T", n % 4, body)
                assert result.status is PutMessageStatus.PUT_OK
                acked.append((_end(result), flushed.flushed_where, body))

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(16)]
        with deadline(60):
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert len(acked) == 400
    assert all(end <= durable for end, durable, _ in acked)  # never acked before its flush
    with MessageStore(str(tmp_path), StoreConfig(**SYNC)) as reopened:
        bodies = {m.body for q in range(4) for m in reopened.get_messages("T", q, 0, 100).messages}
    assert bodies == {body for _, _, body in acked}


def test_a_flush_releases_only_the_writers_whose_records_it_began_with(store: MessageStore) -> None:
    gate = GatedFlush(store).install()
    group_commit = store.group_commit
    with deadline(30):
        first, first_out = _put_in_thread(store, b"first")
        covered = gate.next_target()  # the first writer leads: its flush covers its own record only
        second, second_out = _put_in_thread(store, b"second")
        wait_until(_parked(group_commit, 1), "the second writer parked behind the running flush")
        gate.open()
        first.join()
        assert first_out[0].status is PutMessageStatus.PUT_OK and _end(first_out[0]) <= covered
        # The lead passed on; the next flush began with the second record and is held at its gate:
        # the second writer has no answer yet (the first flush did not release it).
        assert gate.next_target() > covered
        assert second.is_alive() and not second_out
        gate.open()
        second.join()
    assert second_out[0].status is PutMessageStatus.PUT_OK and _end(second_out[0]) > covered


def test_a_failing_flush_acks_nothing_and_every_writer_times_out(tmp_path: Path) -> None:
    config = StoreConfig(**{**SYNC, "sync_flush_timeout": 0.3})
    with MessageStore(str(tmp_path), config) as store:
        durable_before = store.group_commit._flushed

        def broken() -> int:
            raise OSError(5, "Input/output error")

        store.group_commit._flush_to = broken  # type: ignore[method-assign]
        with deadline(30):
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                results = list(pool.map(lambda i: store.put("T", 0, b"%d" % i), range(8)))
        assert [r.status for r in results] == [PutMessageStatus.FLUSH_DISK_TIMEOUT] * 8
        assert store.group_commit._flushed == durable_before
        assert not store.group_commit._waiters
        # Nobody keeps the lead once nobody waits (the flush thread may be ending its last failed flush).
        wait_until(lambda: not store.group_commit._flushing, "the lead given up")
        store.group_commit._flush_to = store._flush_all_commitlog  # type: ignore[method-assign]
        with deadline(30):
            assert store.put("T", 0, b"after").status is PutMessageStatus.PUT_OK  # the disk is back


class _WatchedLock:
    """`GroupCommit._mu` with a signal: `wanted` is set when the thread named `who` asks for it."""

    def __init__(self, who: str) -> None:
        self.inner = threading.Lock()
        self.who = who
        self.wanted = threading.Event()

    def __enter__(self) -> bool:
        if threading.current_thread().name == self.who:
            self.wanted.set()
        return self.inner.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.inner.release()


@pytest.mark.parametrize("outcome", ["acked", "lead"])
def test_a_timeout_racing_a_release_settles_once(tmp_path: Path, outcome: str) -> None:
    config = StoreConfig(**{**SYNC, "sync_flush_timeout": 0.2})
    with MessageStore(str(tmp_path), config) as store:
        gate = GatedFlush(store).install()
        group_commit = store.group_commit
        with deadline(30):
            leader, leader_out = _put_in_thread(store, b"leader")
            gate.next_target()
            watched = _WatchedLock("writer-b'late'")
            group_commit._mu = watched  # type: ignore[assignment]
            late, late_out = _put_in_thread(store, b"late")
            wait_until(_parked(group_commit, 1), "the late writer parked")
            watched.wanted.clear()
            with watched:  # the late writer's wait times out and queues for the mutex behind the release
                assert watched.wanted.wait(10)
                if outcome == "acked":
                    group_commit._settle(store.commitlog.max_offset)  # what a flush covering it does
                else:
                    group_commit._pass_lead()  # the lead goes to the late writer just as it gives up
            gate.open(3)  # the leader's flush, and the late writer's if it leads
            late.join()
            leader.join()
        # Released (acked, or handed the lead) before it settled its timeout: the release wins.
        assert late_out[0].status is PutMessageStatus.PUT_OK
        assert not group_commit._waiters
        group_commit._flush_to = store._flush_all_commitlog  # type: ignore[method-assign]
        with deadline(30):  # the lead was not stranded by a writer that timed out holding it
            assert store.put("T", 0, b"next").status is PutMessageStatus.PUT_OK


def test_close_answers_every_parked_writer(tmp_path: Path) -> None:
    store = MessageStore(str(tmp_path), StoreConfig(**SYNC))
    gate = GatedFlush(store).install()
    with deadline(30):
        leader, leader_out = _put_in_thread(store, b"leader")
        gate.next_target()
        parked = [_put_in_thread(store, b"parked-%d" % i) for i in range(3)]
        wait_until(_parked(store.group_commit, 3), "three writers parked")
        closer = threading.Thread(target=store.close)
        closer.start()
        for thread, _ in parked:
            thread.join()  # close flushed their records and released them
        gate.open()
        leader.join()
        closer.join()
    assert [out[0].status for _, out in parked] == [PutMessageStatus.PUT_OK] * 3
    assert leader_out[0].status is PutMessageStatus.PUT_OK
    assert not store.group_commit._waiters


# -- the send_async pipeline -------------------------------------------------------------------------------
@pytest.fixture
def broker(tmp_path: Path) -> Iterator[mqlite.Broker]:
    with mqlite.open(str(tmp_path), **SYNC) as broker:
        broker.create_topic("T", 1)
        yield broker


def test_a_thousand_sends_in_flight_complete_in_order_with_one_callback_each(broker: mqlite.Broker) -> None:
    calls: list[int] = []
    with mqlite.Producer(broker) as producer, deadline(60):
        futures = [producer.send_async(mqlite.Message("T", b"%d" % i),
                                       callback=lambda f, i=i: calls.append(i)) for i in range(1000)]
        results = [f.result(30) for f in futures]
    assert [r.send_status for r in results] == [mqlite.SendStatus.SEND_OK] * 1000
    assert [r.queue_offset for r in results] == list(range(1000))
    assert calls == list(range(1000))
    assert broker.store.commitlog.mapped_files.flushed_where >= broker.store.commitlog.max_offset


def test_a_flush_completes_its_sends_together_and_not_before(broker: mqlite.Broker) -> None:
    gate = GatedFlush(broker.store).install()  # type: ignore[arg-type]
    with mqlite.Producer(broker) as producer, deadline(30):
        futures = [producer.send_async(mqlite.Message("T", b"0"))]
        first = gate.next_target()  # the flush thread began as the first send registered
        futures += [producer.send_async(mqlite.Message("T", b"%d" % i)) for i in range(1, 50)]
        assert not any(f.done() for f in futures)
        gate.open()
        rest = gate.next_target()  # the next flush began with the other 49 written
        assert rest >= broker.store.commitlog.max_offset
        assert futures[0].result(10).send_status is mqlite.SendStatus.SEND_OK
        assert not any(f.done() for f in futures[1:])  # the first flush did not complete them
        threads: set[str] = set()
        for f in futures[1:]:
            f.add_done_callback(lambda f: threads.add(threading.current_thread().name))
        gate.open()
        results = [f.result(10) for f in futures]
        assert gate.begun.empty()  # that one flush completed all of them
    assert first < rest
    assert {r.send_status for r in results} == {mqlite.SendStatus.SEND_OK}
    assert len(threads) == 1 and threads.pop().startswith("mqlite-producer-")


def test_a_failing_flush_completes_pipelined_sends_with_flush_disk_timeout(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path), **{**SYNC, "sync_flush_timeout": 0.3}) as broker:
        def broken() -> int:
            raise OSError(5, "Input/output error")

        broker.create_topic("T", 1)
        broker.store.group_commit._flush_to = broken  # type: ignore[union-attr]
        with mqlite.Producer(broker) as producer, deadline(30):
            futures = [producer.send_async(mqlite.Message("T", b"%d" % i)) for i in range(20)]
            results = [f.result(10) for f in futures]
        assert {r.send_status for r in results} == {mqlite.SendStatus.FLUSH_DISK_TIMEOUT}
        assert len(broker.store.get_messages("T", 0, 0, 100).messages) == 20  # stored all the same


def test_shutdown_waits_for_the_sends_in_flight(broker: mqlite.Broker) -> None:
    gate = GatedFlush(broker.store).install()  # type: ignore[arg-type]
    producer = mqlite.Producer(broker)
    producer.start()
    with deadline(30):
        futures = [producer.send_async(mqlite.Message("T", b"%d" % i)) for i in range(20)]
        gate.next_target()
        stopper = threading.Thread(target=producer.shutdown)
        stopper.start()
        gate.open(5)
        stopper.join()
    assert all(f.done() for f in futures)
    assert {f.result().send_status for f in futures} == {mqlite.SendStatus.SEND_OK}
    with pytest.raises(mqlite.IllegalStateError):
        producer.send_async(mqlite.Message("T", b"late"))


def test_close_answers_every_pipelined_send(tmp_path: Path) -> None:
    store = MessageStore(str(tmp_path), StoreConfig(**SYNC))
    gate = GatedFlush(store).install()
    group_commit = store.group_commit
    assert group_commit is not None
    settled: list[tuple[list[Any], list[Any]]] = []
    with deadline(30):
        with group_commit.deferring():  # the puts do not wait: they register below
            results = [store.put("T", 0, b"%d" % i) for i in range(3)]
        for i, result in enumerate(results):
            group_commit.when_durable(_end(result), i, lambda durable, failed: settled.append((durable, failed)))
        gate.next_target()  # the flush thread's flush is held at the gate
        closer = threading.Thread(target=store.close)
        closer.start()
        wait_until(lambda: sum(len(d) + len(f) for d, f in settled) == 3, "every pipelined send answered")
        gate.open()
        closer.join()
    assert sorted(i for durable, _ in settled for i in durable) == [0, 1, 2]  # close flushed them first


def test_sends_keep_their_order_behind_queued_oneway_sends(broker: mqlite.Broker) -> None:
    # One pool thread runs queued sends in order: the async send must queue behind them, not overtake.
    with mqlite.Producer(broker, async_thread_nums=1) as producer, deadline(30):
        for i in range(20):
            producer.send_oneway(mqlite.Message("T", b"oneway-%d" % i))
        producer.send_async(mqlite.Message("T", b"async")).result(10)
        bodies = [m.body for m in broker.store.get_messages("T", 0, 0, 100).messages]
    assert bodies == [b"oneway-%d" % i for i in range(20)] + [b"async"]


def test_aio_completes_a_group_with_one_loop_call(broker: mqlite.Broker) -> None:
    gate = GatedFlush(broker.store).install()  # type: ignore[arg-type]

    async def main() -> tuple[list[mqlite.SendResult], int]:
        loop = asyncio.get_running_loop()
        calls = [0]
        real = loop.call_soon_threadsafe

        def counting(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            return real(*args, **kwargs)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        async with mqlite.aio.Producer(broker) as producer:
            futures = [producer.send_async(mqlite.Message("T", b"%d" % i)) for i in range(100)]
            await loop.run_in_executor(None, gate.next_target)
            calls[0] = 0
            gate.open(2)  # the flush that began (with some of the sends written) and the one after it
            # Hold the loop until both groups are settled: the first completion schedules the one drain,
            # the rest queue behind it. Letting the loop drain meanwhile made the count depend on how the
            # results thread and the loop took turns for the GIL (42 calls seen under load).
            durable = producer.sync._durable
            assert durable is not None, "send_async under SYNC_FLUSH takes the pipeline"
            with durable._cv:
                assert durable._cv.wait_for(lambda: not durable._outstanding, timeout=30)
            results = await asyncio.gather(*futures)
            return results, calls[0]

    with deadline(30):
        results, loop_calls = asyncio.run(main())
    assert [r.queue_offset for r in results] == list(range(100))
    assert {r.send_status for r in results} == {mqlite.SendStatus.SEND_OK}
    assert loop_calls <= 2  # one drain for both groups here (wrap_future made one a future: 100)


def test_close_fails_the_writers_it_did_not_flush() -> None:
    durable = threading.Semaphore(0)

    def flush_to() -> int:  # the group commit's flush, held until the test lets it report offset 100
        durable.acquire(timeout=30)
        return 100

    group_commit = GroupCommit(flush_to, 30.0)
    answers: dict[str, bool] = {}

    def wait(name: str, end: int) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.__setitem__(name, group_commit.wait(end)))
        thread.start()
        return thread

    with deadline(10):
        leader = wait("leader", 100)
        wait_until(lambda: group_commit._flushing, "the first writer leads")
        late = [wait("covered", 150), wait("beyond", 300)]
        wait_until(_parked(group_commit, 2), "two writers parked")
        group_commit.close(200)  # the store's last flush reached 200, then it closed
        for thread in late:
            thread.join()
        durable.release()
        leader.join()
    assert answers == {"covered": True, "beyond": False, "leader": True}
    assert group_commit.wait(300) is False and group_commit.wait(200) is True  # after close: at once


class _RacingDeque(collections.deque[Any]):
    """The group commit's deque of pipelined sends, with a sender that registers right after the
    flush thread last looked at it before going idle: that look answers as the deque was, then
    `sender` runs on its own thread until it returns or blocks on the group commit's mutex."""

    sender: Callable[[], None] | None = None

    def __bool__(self) -> bool:
        answer = len(self) > 0
        if self.sender is not None and sys._getframe(1).f_code.co_name == "_thread_loop":
            sender, self.sender = self.sender, None
            thread = threading.Thread(target=sender, name="racing-sender")
            thread.start()
            thread.join(0.5)  # returned, or parked on the mutex the flush thread holds (no event says so)
        return answer


def test_a_send_registering_as_the_flush_thread_goes_idle_is_flushed() -> None:
    log_end = [0]
    group_commit = GroupCommit(lambda: log_end[0], 30.0)
    racing = group_commit._pipelined = _RacingDeque()
    settled: queue.Queue[tuple[list[Any], list[Any]]] = queue.Queue()

    def sink(durable: list[Any], failed: list[Any]) -> None:
        settled.put((durable, failed))

    def register(end: int, item: str) -> None:
        log_end[0] = end  # its record is written, then it registers
        group_commit.when_durable(end, item, sink)

    racing.sender = lambda: register(200, "late")
    with deadline(30):
        register(100, "first")  # no flush runs: the flush thread leads
        assert settled.get(timeout=10) == (["first"], [])
        assert settled.get(timeout=10) == (["late"], [])  # not stranded behind the idle flush thread
        group_commit.close(200)
    assert racing.sender is None  # the race was run


def test_a_send_registering_after_close_is_answered_at_once() -> None:
    group_commit = GroupCommit(lambda: 100, 30.0)
    group_commit.close(100)
    answers: list[tuple[list[Any], list[Any], str]] = []

    def sink(durable: list[Any], failed: list[Any]) -> None:
        answers.append((durable, failed, threading.current_thread().name))

    group_commit.when_durable(100, "covered", sink)
    group_commit.when_durable(101, "beyond", sink)
    here = threading.current_thread().name
    assert answers == [(["covered"], [], here), ([], ["beyond"], here)]


def test_pipelined_sends_are_stored_before_send_async_returns_whichever_path(broker: mqlite.Broker) -> None:
    gate = GatedFlush(broker.store).install()  # type: ignore[arg-type]
    log = broker.store.commitlog
    big = bytes(range(256)) * 20  # over 4 KiB: compressed, so the full send path
    sends: list[tuple[mqlite.Message, dict[str, Any]]] = [
        (mqlite.Message("T", b"plain-learns", tags="a"), {}),  # a property map not seen before: checked, cached
        (mqlite.Message("T", b"plain-cached", tags="a"), {}),  # the plain send, cached encoding
        (mqlite.Message("T", big, tags="a"), {}),
        (mqlite.Message("T", b"selected", keys="k1"), {"selector": mqlite.SelectMessageQueueByHash(), "arg": 7}),
        (mqlite.Message("T", b"delayed", delay_time_level=1), {}),  # to the schedule topic
    ]
    with mqlite.Producer(broker) as producer, deadline(30):
        futures = []
        for msg, options in sends:
            before = log.max_offset
            futures.append(producer.send_async(msg, **options))
            assert log.max_offset > before  # stored on this thread, before send_async returned
            if len(futures) == 1:
                gate.next_target()  # the flush thread's first flush is held at the gate
        assert not any(f.done() for f in futures)
        gate.open(3)
        results = [f.result(10) for f in futures]
    assert {r.send_status for r in results} == {mqlite.SendStatus.SEND_OK}
    stored = {m.body: m for m in broker.store.get_messages("T", 0, 0, 10).messages}
    assert sorted(stored) == sorted([b"plain-learns", b"plain-cached", big, b"selected"])
    for (msg, _), result in zip(sends[:4], results):
        assert stored[msg.body].msg_id == result.msg_id == msg.properties["UNIQ_KEY"]
        assert stored[msg.body].tags == msg.tags and stored[msg.body].keys == msg.keys


# -- review 14: the group commit never stalls, groups keep their order, sends answer at their deadline -------
class _RaisingOnce:
    """The store's flush, raising `exc` on its first call (a `KeyboardInterrupt` in `fdatasync`, a
    `ValueError` from a map a racing close unmapped), then flushing for real."""

    def __init__(self, group_commit: GroupCommit, exc: BaseException) -> None:
        self.real = group_commit._flush_to
        self.exc: BaseException | None = exc
        self.calls = 0
        group_commit._flush_to = self  # type: ignore[method-assign]

    def __call__(self) -> int:
        self.calls += 1
        exc, self.exc = self.exc, None
        if exc is not None:
            raise exc
        return self.real()


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), ValueError("mmap closed or invalid")], ids=repr)
def test_a_leader_that_leaves_on_any_exception_passes_the_lead_on(tmp_path: Path, exc: BaseException) -> None:
    with MessageStore(str(tmp_path), StoreConfig(**{**SYNC, "sync_flush_timeout": 0.5})) as store:
        group_commit = store.group_commit
        assert group_commit is not None
        flush = _RaisingOnce(group_commit, exc)
        out: list[Any] = []

        def put() -> None:
            try:
                out.append(store.put("T", 0, b"first").status)
            except BaseException as caught:  # noqa: B036 (the interrupt leaves the put, as it would the main thread's)
                out.append(type(caught))

        with deadline(30):
            thread = threading.Thread(target=put)
            thread.start()
            thread.join()
            # A KeyboardInterrupt leaves the put; any Exception is a failed flush, retried.
            assert out == [KeyboardInterrupt if isinstance(exc, KeyboardInterrupt) else PutMessageStatus.PUT_OK]
            assert store.put("T", 0, b"second").status is PutMessageStatus.PUT_OK  # acked durable: not stalled
        assert flush.calls >= 2 and store.commitlog.mapped_files.flushed_where >= store.commitlog.max_offset


def test_the_flush_thread_survives_a_flush_that_raises_a_non_os_error(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path), StoreConfig(**SYNC)) as store:
        group_commit = store.group_commit
        assert group_commit is not None
        _RaisingOnce(group_commit, ValueError("mmap closed or invalid"))
        settled: queue.Queue[tuple[list[Any], list[Any]]] = queue.Queue()
        with deadline(30):
            with group_commit.deferring():
                result = store.put("T", 0, b"pipelined")
            group_commit.when_durable(_end(result), "item", lambda durable, failed: settled.put((durable, failed)))
            assert settled.get(timeout=10) == (["item"], [])  # the thread retried after the failed flush
            assert store.put("T", 0, b"next").status is PutMessageStatus.PUT_OK


def test_a_parked_writer_interrupted_after_it_was_handed_the_lead_passes_it_on(tmp_path: Path) -> None:
    with MessageStore(str(tmp_path), StoreConfig(**{**SYNC, "sync_flush_timeout": 0.5})) as store:
        gate = GatedFlush(store).install()
        group_commit = store.group_commit
        assert group_commit is not None
        with deadline(30):
            leader, leader_out = _put_in_thread(store, b"leader")
            gate.next_target()

            def interrupt_when_parked() -> None:
                wait_until(_parked(group_commit, 1), "the main thread parked")
                _thread.interrupt_main()  # Ctrl-C while it sleeps on its lock

            interrupter = threading.Thread(target=interrupt_when_parked)
            interrupter.start()
            with pytest.raises(KeyboardInterrupt):
                store.put("T", 0, b"interrupted")
            interrupter.join()
            gate.open()  # the leader's flush: the lead may not go to the writer that left
            leader.join()
            group_commit._flush_to = gate.real  # type: ignore[method-assign]
            assert store.put("T", 0, b"later").status is PutMessageStatus.PUT_OK
        assert leader_out[0].status is PutMessageStatus.PUT_OK
        assert not group_commit._waiters and not group_commit._flushing


class _StallingLock:
    """The group commit's mutex; the first release by thread `name` after `armed` is set waits
    (up to 2 s) for `go`: the thread loses the CPU right after it released the mutex."""

    def __init__(self, name: str) -> None:
        self.inner = threading.Lock()
        self.name = name
        self.armed = threading.Event()
        self.go = threading.Event()
        self._stalled = False

    def __enter__(self) -> None:
        self.inner.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.inner.release()
        if self.armed.is_set() and not self._stalled and threading.current_thread().name == self.name:
            self._stalled = True
            self.go.wait(2)


def test_pipelined_groups_reach_their_sink_in_end_order_when_the_next_leader_overtakes() -> None:
    first_may_end = threading.Event()
    stall = _StallingLock("L1")

    def flush_to() -> int:
        if threading.current_thread().name == "L1":
            first_may_end.wait(10)
            stall.armed.set()  # L1 stalls as it releases the mutex after settling P1
            return 25
        return 50

    group_commit = GroupCommit(flush_to, 5.0)
    group_commit._mu = stall  # type: ignore[assignment]
    order: list[list[Any]] = []

    def sink(durable: list[Any], failed: list[Any]) -> None:
        order.append(durable)
        if len(order) == 2:
            stall.go.set()

    with deadline(30):
        l1 = threading.Thread(target=lambda: group_commit.wait(20), name="L1")
        l1.start()
        wait_until(lambda: group_commit._flushing, "L1 leads")
        group_commit.when_durable(15, "P1", sink)  # covered by L1's flush
        w = threading.Thread(target=lambda: group_commit.wait(40), name="W")
        w.start()
        wait_until(_parked(group_commit, 1), "W parked: it leads next")  # (P1 waits in the deque)
        group_commit.when_durable(35, "P2", sink)  # covered by W's flush only
        first_may_end.set()
        l1.join()
        w.join()
        wait_until(lambda: len(order) == 2, "both groups delivered")
        group_commit.close(50)
    assert order == [["P1"], ["P2"]]


def test_a_pipelined_send_answers_flush_disk_timeout_at_its_deadline_while_a_flush_hangs(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path), **{**SYNC, "sync_flush_timeout": 0.2}) as broker:
        broker.create_topic("T", 1)
        gate = GatedFlush(broker.store).install()  # type: ignore[arg-type]
        with mqlite.Producer(broker) as producer, deadline(30):
            future = producer.send_async(mqlite.Message("T", b"stuck"))
            gate.next_target()  # the flush began and hangs (no error) until the gate opens
            assert future.result(10).send_status is mqlite.SendStatus.FLUSH_DISK_TIMEOUT
            assert gate.begun.empty()  # answered by its deadline, not by a flush
            gate.open(10)


class _HeldPause(threading.Event):
    """The group commit's close event (`_stop`): a leader pausing after a failed flush waits on it.
    Here each such wait is reported on `steps` and lasts until the test lets it end (`let_go`)."""

    def __init__(self, steps: queue.Queue[tuple[str, float | None]]) -> None:
        super().__init__()
        self.steps = steps
        self._permits = threading.Semaphore(0)

    def wait(self, timeout: float | None = None) -> bool:
        self.steps.put(("pause", timeout))
        self._permits.acquire()
        return self.is_set()

    def let_go(self) -> None:
        self._permits.release()


@pytest.mark.parametrize("log_interval", [3600.0, 0.0])
def test_a_failing_flush_is_retried_after_a_pause_and_logged_once_with_its_traceback(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, log_interval: float) -> None:
    monkeypatch.setattr(storeservices, "FLUSH_FAILURE_LOG_INTERVAL", log_interval)
    with MessageStore(str(tmp_path), StoreConfig(**{**SYNC, "sync_flush_timeout": 30.0})) as store:
        group_commit = store.group_commit
        assert group_commit is not None
        steps: queue.Queue[tuple[str, float | None]] = queue.Queue()
        pause = group_commit._stop = _HeldPause(steps)

        def broken() -> int:
            steps.put(("flush", None))
            raise OSError(5, "Input/output error")

        group_commit._flush_to = broken  # type: ignore[method-assign]
        with deadline(30), caplog.at_level("ERROR", logger="mqlite"):
            writer, out = _put_in_thread(store, b"x")
            for _ in range(3):  # each failed flush is followed by a pause before the next try
                assert steps.get(timeout=10) == ("flush", None)
                assert steps.get(timeout=10) == ("pause", storeservices.FLUSH_RETRY_PAUSE)
                assert steps.empty()  # no try while the pause lasts
                pause.let_go()
            assert steps.get(timeout=10) == ("flush", None)
            assert steps.get(timeout=10) == ("pause", storeservices.FLUSH_RETRY_PAUSE)
            group_commit._flush_to = store._flush_all_commitlog  # type: ignore[method-assign]
            pause.let_go()  # the disk recovered: the next try makes the record durable
            writer.join()
        assert out[0].status is PutMessageStatus.PUT_OK
    records = [r for r in caplog.records if "flushing the commit log" in r.getMessage()]
    assert records[0].exc_info is not None and not any(r.exc_info for r in records[1:])
    # The first failure with its traceback; later ones one line each, at most once an interval.
    assert len(records) == (1 if log_interval else 4)
    if not log_interval:
        assert "(4 times in a row)" in records[-1].getMessage()


def test_a_callback_may_send_again_and_wait_for_that_send(broker: mqlite.Broker) -> None:
    outcome: queue.Queue[Any] = queue.Queue()
    with mqlite.Producer(broker) as producer, deadline(30):
        def callback(future: concurrent.futures.Future[mqlite.SendResult]) -> None:
            try:
                outcome.put(producer.send_async(mqlite.Message("T", b"second")).result(10).send_status)
            except Exception as exc:  # a TimeoutError when the callback blocks the thread completing it
                outcome.put(exc)

        producer.send_async(mqlite.Message("T", b"first"), callback)
        assert outcome.get(timeout=20) is mqlite.SendStatus.SEND_OK


def test_a_refused_send_calls_back_off_the_callers_thread(tmp_path: Path) -> None:
    # A full disk (any disk is fuller than this ratio): the put raises in send_async.
    with mqlite.open(str(tmp_path), **{**SYNC, "disk_space_warning_level_ratio": 1e-9}) as broker:
        broker.create_topic("T", 1)
        threads: queue.Queue[int] = queue.Queue()
        with mqlite.Producer(broker) as producer, deadline(30):
            future = producer.send_async(mqlite.Message("T", b"x"), lambda f: threads.put(threading.get_ident()))
            assert isinstance(future.exception(10), mqlite.DiskFullError)
            assert threads.get(timeout=10) != threading.get_ident()


def test_a_callback_shutting_down_another_producer_of_its_group_waits_for_that_ones_sends(
        broker: mqlite.Broker) -> None:
    gate = GatedFlush(broker.store).install()  # type: ignore[arg-type]
    a, b = mqlite.Producer(broker, "same"), mqlite.Producer(broker, "same")
    a.start()
    b.start()
    shutting_down = threading.Event()
    seen: queue.Queue[bool] = queue.Queue()

    def on_a_done(future: concurrent.futures.Future[mqlite.SendResult]) -> None:  # on a's results thread
        shutting_down.set()
        b.shutdown()
        seen.put(b_future.done())

    with deadline(30):
        a_future = a.send_async(mqlite.Message("T", b"a"))
        gate.next_target()  # a's flush began before b's record was written
        b_future = b.send_async(mqlite.Message("T", b"b"))
        a_future.add_done_callback(on_a_done)
        gate.open()  # a's flush: a's future completes, its callback shuts b down
        assert shutting_down.wait(10)
        gate.next_target()
        gate.open()  # the flush that covers b's send
        assert seen.get(timeout=10)  # b's shutdown waited for its send in flight
        a.shutdown()


def test_the_group_commit_threads_are_not_daemons_when_a_daemon_thread_starts_them(broker: mqlite.Broker) -> None:
    with mqlite.Producer(broker) as producer, deadline(30):
        sender = threading.Thread(target=lambda: producer.send_async(mqlite.Message("T", b"x")).result(10),
                                  daemon=True)
        sender.start()
        sender.join()
        threads = {t.name: t.daemon for t in threading.enumerate() if t.name.startswith("mqlite-group-commit")}
    assert threads == {"mqlite-group-commit": False, "mqlite-group-commit-timeouts": False}
