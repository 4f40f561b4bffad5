"""`delete_topic` refuses system topics (RocketMQ's `TopicValidator.isSystemTopic`) and keeps their
pending work; a group's retry and dead-letter topics stay deletable, as in RocketMQ."""

from __future__ import annotations

from pathlib import Path

import pytest

import mqlite
from mqlite.cli import main
from mqlite.errors import MQClientError
from mqlite.testing import MockClock, wait_idle
from mqlite.topics import SYSTEM_TOPICS

#: Every name `TopicValidator.isSystemTopic` accepts, and a name of its `rmq_sys_` prefix.
SYSTEM_TOPIC_NAMES = sorted(SYSTEM_TOPICS | {"rmq_sys_anything"})


@pytest.mark.parametrize("topic", SYSTEM_TOPIC_NAMES)
def test_system_topics_are_refused(mqlite_broker: mqlite.Broker, topic: str) -> None:
    with pytest.raises(MQClientError, match="system topic.*cannot be deleted"):
        mqlite_broker.delete_topic(topic)


def test_deleting_the_schedule_topic_keeps_a_pending_delayed_message(mqlite_broker: mqlite.Broker,
                                                                     mqlite_clock: MockClock) -> None:
    mqlite_broker.create_topic("orders", 1)
    with mqlite.Producer(mqlite_broker, "pg") as producer:
        producer.send(mqlite.Message("orders", b"later", delay_time_level=3))  # 10 s
    wait_idle(mqlite_broker)
    for topic in ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "RMQ_SYS_TRANS_HALF_TOPIC"):
        with pytest.raises(MQClientError):
            mqlite_broker.delete_topic(topic)
    assert "SCHEDULE_TOPIC_XXXX" in mqlite_broker.topic_list()
    mqlite_clock.advance(10)
    assert [m.body for m in mqlite_broker.store.get_messages("orders", 0, 0, 10).messages] == [b"later"]


def test_retry_and_dead_letter_topics_stay_deletable(mqlite_broker: mqlite.Broker) -> None:
    put = mqlite_broker.put_message("orders", 0, b"x")
    msg = mqlite_broker.view_message(put.offset_msg_id)
    mqlite_broker.send_message_back("cg", msg)  # %RETRY%cg, through the schedule topic
    mqlite_broker.send_message_back("cg", msg, delay_level=-1)  # %DLQ%cg at once
    assert {"%RETRY%cg", "%DLQ%cg"} <= set(mqlite_broker.topic_list())
    mqlite_broker.delete_topic("%DLQ%cg")
    mqlite_broker.delete_topic("%RETRY%cg")
    assert not {"%RETRY%cg", "%DLQ%cg"} & set(mqlite_broker.topic_list())


def test_cli_delete_topic_refuses_a_system_topic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "mq")
    with mqlite.open(path, commitlog_file_size=1 << 20) as broker:
        broker.put_message("orders", 0, b"x", {"DELAY": "3"})
    assert main(["deleteTopic", path, "-t", "SCHEDULE_TOPIC_XXXX"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.startswith("mqlite deleteTopic: the topic 'SCHEDULE_TOPIC_XXXX' is a system topic")
    assert err.count("\n") == 1
    with mqlite.open(path, read_only=True) as reader:
        assert reader.topic_status("SCHEDULE_TOPIC_XXXX")[2].max_offset == 1  # the delayed message is still there
