"""`mqlite.aio`: round trips under `asyncio.run`, cancellation that loses nothing, async push listeners."""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import mqlite
import mqlite.aio
from mqlite.aio import _Handoff
from mqlite.errors import IllegalStateError, MQClientError
from mqlite.testing import TEST_BROKER_CONFIG, MockClock

FIRST = mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
SRC = Path(mqlite.__file__).resolve().parent.parent
#: Each async client and the blocking client it wraps.
WRAPS = {mqlite.aio.Producer: mqlite.Producer, mqlite.aio.LitePullConsumer: mqlite.LitePullConsumer,
         mqlite.aio.PushConsumer: mqlite.PushConsumer}


def _store(tmp_path: Path) -> str:
    return str(tmp_path / "mq")


def test_round_trip_send_poll_iterate_commit(tmp_path: Path) -> None:
    async def main() -> None:
        async with mqlite.aio.open(_store(tmp_path), **TEST_BROKER_CONFIG) as broker:
            broker.create_topic("orders", 1)
            consumer = mqlite.aio.LitePullConsumer(broker, "lg", auto_commit=False, pull_batch_size=20)
            consumer.subscribe("orders")
            async with mqlite.aio.Producer(broker, "pg") as producer, consumer:
                first = await producer.send(mqlite.Message("orders", b"0"))
                assert first.send_status is mqlite.SendStatus.SEND_OK and first.queue_offset == 0
                results = await asyncio.gather(*(producer.send_async(mqlite.Message("orders", b"%d" % i))
                                                 for i in range(1, 6)))
                assert sorted(r.queue_offset for r in results) == [1, 2, 3, 4, 5]
                batch = await producer.send_batch([mqlite.Message("orders", b"%d" % i) for i in range(6, 10)])
                assert batch.queue_offset == 6
                await producer.send_oneway(mqlite.Message("orders", b"10"))
                got: list[bytes] = []
                async for msg in consumer:
                    got.append(msg.body)
                    if len(got) == 3:
                        break  # mid-batch: the rest waits for the next poll
                while len(got) < 11:
                    got += [m.body for m in await consumer.poll(timeout=5)]
                assert sorted(got, key=int) == [b"%d" % i for i in range(11)]
                mq = mqlite.MessageQueue("orders", broker.broker_name, 0)
                assert consumer.sync.committed(mq) == -1
                await consumer.commit_sync()
                assert consumer.sync.committed(mq) == 11

    asyncio.run(main())


def test_cancelled_poll_loses_no_message(tmp_path: Path) -> None:
    """Whether the cancelled take was waiting or not yet started, the next poll gets the message."""
    async def main() -> None:
        async with mqlite.aio.open(_store(tmp_path), **TEST_BROKER_CONFIG) as broker:
            broker.create_topic("T", 1)
            mq = mqlite.MessageQueue("T", broker.broker_name, 0)
            async with mqlite.aio.Producer(broker, "pg") as producer, \
                    mqlite.aio.LitePullConsumer(broker, "lg", auto_commit=True) as consumer:
                consumer.assign([mq])
                for i in range(20):
                    waiting = asyncio.create_task(consumer.poll(timeout=30))
                    for _ in range(i % 3):  # 0, 1 or 2 turns of the loop: the take is at different stages
                        await asyncio.sleep(0)
                    waiting.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await waiting
                    await producer.send(mqlite.Message("T", b"%d" % i))
                    assert consumer.sync.committed(mq) <= i  # auto-commit never passed an unreturned message
                    assert [m.body for m in await consumer.poll(timeout=10)] == [b"%d" % i]
                await consumer.commit_sync()
                assert consumer.sync.committed(mq) == 20

    asyncio.run(main())


def test_shutdown_ends_a_waiting_poll_and_commits_nothing_unreturned(tmp_path: Path) -> None:
    async def main() -> None:
        async with mqlite.aio.open(_store(tmp_path), **TEST_BROKER_CONFIG) as broker:
            consumer = mqlite.aio.LitePullConsumer(broker, "lg")
            consumer.subscribe("T")
            await consumer.start()
            waiting = asyncio.create_task(consumer.poll(timeout=30))
            await asyncio.sleep(0)
            await consumer.shutdown()
            assert await waiting == []
            with pytest.raises(IllegalStateError):
                await consumer.poll()

    asyncio.run(main())


def test_handoff_gives_the_value_to_exactly_one_side() -> None:
    taken: _Handoff[str] = _Handoff()
    assert taken.offer("result") is True
    assert taken.abandon() == "result"  # offered, then the caller was cancelled: the caller undoes it
    late: _Handoff[str] = _Handoff()
    assert late.abandon() is None
    assert late.offer("result") is False  # the worker undoes it


def test_async_push_listener_runs_on_the_loop_and_is_retried_by_the_clock(tmp_path: Path) -> None:
    clock = MockClock()
    attempts: list[tuple[bytes, int]] = []

    async def main() -> None:
        loop_thread = threading.get_ident()

        async def listener(msgs: list[mqlite.MessageExt], context: Any) -> None:
            assert threading.get_ident() == loop_thread
            await asyncio.sleep(0)
            for msg in msgs:
                attempts.append((msg.body, msg.reconsume_times))
                if msg.body == b"flaky" and msg.reconsume_times == 0:
                    raise RuntimeError("first attempt fails")

        async with mqlite.aio.open(_store(tmp_path), clock=clock, **TEST_BROKER_CONFIG) as broker:
            clock.attach(broker)
            consumer = mqlite.aio.PushConsumer(broker, "cg", subscription={"T": "*"}, listener=listener,
                                               consume_from_where=FIRST)
            async with consumer, mqlite.aio.Producer(broker, "pg") as producer:
                for i in range(10):
                    await producer.send(mqlite.Message("T", b"%d" % i))
                await producer.send(mqlite.Message("T", b"flaky"))
                assert await consumer.join(timeout=10)
                assert len(attempts) == 11
                await asyncio.to_thread(clock.advance, 10)  # the retry falls due (delay level 3)
                assert await consumer.join(timeout=10)
                assert attempts[-1] == (b"flaky", 1)

    asyncio.run(main())


def test_bad_use_is_refused(tmp_path: Path) -> None:
    def plain(msgs: list[mqlite.MessageExt], context: Any) -> None:
        return None

    with pytest.raises(MQClientError, match="coroutine function"):
        mqlite.aio.PushConsumer(_store(tmp_path), "cg", listener=plain)  # type: ignore[arg-type]

    async def main() -> None:
        consumer = mqlite.aio.LitePullConsumer(_store(tmp_path), "lg")
        with pytest.raises(IllegalStateError):
            await consumer.poll()
        async with consumer:
            consumer.subscribe("T")
            with pytest.raises(MQClientError, match="negative"):
                await consumer.poll(timeout=-1)

    asyncio.run(main())


def test_cancelling_a_queued_send_cancels_it_and_a_stored_one_still_completes(tmp_path: Path) -> None:
    """A send still queued on the pool is cancelled with its loop future (as `wrap_future` does);
    a pipelined SYNC_FLUSH send is stored at once, so cancelling its loop future loses nothing."""
    release = threading.Event()

    async def main() -> list[bytes]:
        async with mqlite.aio.open(_store(tmp_path), flush_disk_type="SYNC_FLUSH", **TEST_BROKER_CONFIG) as broker:
            broker.create_topic("T", 1)
            async with mqlite.aio.Producer(broker, "pg") as piped:
                stored = piped.send_async(mqlite.Message("T", b"pipelined"))
                stored.cancel()  # the send was stored before send_async returned
            hooked = mqlite.aio.Producer(broker, "hg", async_thread_nums=1)
            hooked.sync.add_send_hook(lambda ctx: release.wait(10))  # hooked sends go to the pool
            async with hooked:
                first = hooked.send_async(mqlite.Message("T", b"first"))  # holds the one pool thread
                queued = hooked.send_async(mqlite.Message("T", b"queued"))
                queued.cancel()
                await asyncio.sleep(0)  # one loop turn: the cancelled future's callbacks run
                release.set()
                assert (await first).send_status is mqlite.SendStatus.SEND_OK
            with pytest.raises(asyncio.CancelledError):
                await queued
            return [m.body for m in broker.store.get_messages("T", 0, 0, 10).messages]

    assert asyncio.run(main()) == [b"pipelined", b"first"]


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(cls, eval_str=True).parameters)


@pytest.mark.parametrize("aio_class", list(WRAPS), ids=lambda cls: cls.__name__)
def test_async_clients_take_the_keywords_of_the_blocking_ones(aio_class: type) -> None:
    # Same names, kinds, defaults and types, in the same order, so the two cannot drift apart; the async
    # client adds `executor`, and an async push consumer's listener is a coroutine function.
    ours, theirs = _parameters(aio_class), _parameters(WRAPS[aio_class])
    executor = ours.pop("executor")
    assert (executor.kind, executor.default) == (inspect.Parameter.KEYWORD_ONLY, None)
    if aio_class is mqlite.aio.PushConsumer:
        assert ours["listener"].annotation == (mqlite.aio.AsyncMessageListener | None)
        assert theirs["listener"].annotation != ours["listener"].annotation
        ours["listener"] = theirs["listener"]
    assert list(ours.values()) == list(theirs.values())


def test_mypy_refuses_a_wrong_keyword_or_type_for_an_async_client(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    calls = {  # line -> what mypy says about it
        'mqlite.aio.Producer("mq", "pg", send_msg_timeot=1.0)': 'Unexpected keyword argument "send_msg_timeot"',
        'mqlite.aio.LitePullConsumer("mq", "lg", pol_timeout=1.0)': 'Unexpected keyword argument "pol_timeout"',
        'mqlite.aio.PushConsumer("mq", "cg", consume_thread_num=4)':
            'Unexpected keyword argument "consume_thread_num"',
        'mqlite.aio.LitePullConsumer("mq", "lg", poll_timeout="1")': 'Argument "poll_timeout"',
    }
    fine = 'mqlite.aio.PushConsumer("mq", "cg", consume_thread_nums=4, executor=None)'
    (tmp_path / "calls.py").write_text("import mqlite.aio\n\n\ndef calls() -> None:\n"
                                       + "".join(f"    {call}\n" for call in [*calls, fine]), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir", os.devnull, str(tmp_path / "calls.py")],
        cwd=SRC.parent, env=dict(os.environ, MYPYPATH=str(SRC)), capture_output=True, text=True, timeout=300)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    for line, (call, message) in enumerate(calls.items(), start=5):
        assert any(f"calls.py:{line}:" in error and message in error for error in errors), (call, result.stdout)
    assert len(errors) == len(calls), result.stdout
