"""The dashboard's backend: `mqlite dashboard` as users run it, and `mqlite.dashboard.Dashboard` in-process.

Every route of the JSON contract (docs/dashboard.md) is asked over HTTP with urllib, on a small store
holding two queues of `orders`, a consumer group `cg` that fell behind and one of its dead letters. The
browser side (the page itself) is tests/test_dashboard_browser.py.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import SMALL_STORE, TINY_STORE, deadline, no_leftover_threads, wait_until  # noqa: F401

import mqlite
from mqlite.cli.app import main
from mqlite.clock import ManualClock
from mqlite.broker import QueueProgress
from mqlite.dashboard import Dashboard
from mqlite.dashboard import server as server_module
from mqlite.dashboard.api import _in_total, _out_total
from mqlite.dashboard.history import History, Point, Sample
from mqlite.dashboard.server import _static_file
from mqlite.dashboard.source import Source

HOUR_MS = 3600_000
SRC = str(Path(mqlite.__file__).resolve().parent.parent)


@dataclass(frozen=True)
class Facts:
    """What the template store holds."""

    path: str
    start_ms: int  # store time of message 0; message i is stored at start_ms + 1000 * i
    msg_ids: list[str]  # message i: queue i % 2, offset i // 2, key k<i>, body "body-<i>"
    offset_ids: list[str]
    dead_msg_id: str  # the dead letter of cg: a copy of message 0


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Facts:
    """orders (2 queues, 6 messages an hour ago); cg consumed queue 0 up to offset 1; message 0 is a dead letter."""
    path = str(tmp_path_factory.mktemp("dashboard") / "store")
    start = int(time.time() * 1000) - HOUR_MS
    clock = ManualClock(start - 1000)
    msg_ids, offset_ids = [], []
    with mqlite.open(path, clock=clock, **SMALL_STORE) as broker:
        broker.create_topic("orders", 2)
        with mqlite.Producer(broker, group="pg") as producer:
            for i in range(6):
                clock.advance(1000)
                msg = mqlite.Message("orders", f"body-{i}".encode(), tags="TagA", keys=[f"k{i}"])
                result = producer.send(msg, queue=mqlite.MessageQueue("orders", broker.broker_name, i % 2))
                msg_ids.append(result.msg_id)
                offset_ids.append(result.offset_msg_id)
        broker.commit_offset("cg", mqlite.MessageQueue("orders", broker.broker_name, 0), 1)
        clock.advance(1000)
        broker.send_message_back("cg", broker.query_message_by_offset("orders", 0, 0), delay_level=-1)
    return Facts(path, start, msg_ids, offset_ids, msg_ids[0])


@pytest.fixture()
def store(template: Facts, tmp_path: Path) -> Facts:
    """A private copy of the template, for tests that write to it."""
    path = str(tmp_path / "store")
    shutil.copytree(template.path, path)
    return Facts(path, template.start_ms, template.msg_ids, template.offset_ids, template.dead_msg_id)


@pytest.fixture()
def reader(template: Facts) -> Iterator[Dashboard]:
    """A dashboard on the template opened read-only (sampling every 0.05 s)."""
    with mqlite.open(template.path, read_only=True) as broker, Dashboard(broker, interval=0.05) as board:
        yield board


# -- HTTP -------------------------------------------------------------------------------------------------------
def call(board: Dashboard | str, path: str, body: Any = None, *, headers: dict[str, str] | None = None,
         method: str | None = None) -> tuple[int, Any]:
    """(status, decoded JSON) of one request; a body makes it a JSON POST."""
    url = board if isinstance(board, str) else board.url
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    sent = {"Content-Type": "application/json"} if data is not None else {}
    request = urllib.request.Request(url + path.lstrip("/"), data=data, headers={**sent, **(headers or {})},
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.load(exc)


def get(board: Dashboard | str, path: str) -> Any:
    """The JSON of a GET that must succeed."""
    status, payload = call(board, path)
    assert status == 200, payload
    return payload


# -- the command ------------------------------------------------------------------------------------------------
@contextmanager
def dashboard_process(*argv: str) -> Iterator[str]:
    """`mqlite dashboard ARGV --listen 127.0.0.1:0` as users run it: yields the URL it prints first, then
    stops it with SIGTERM and checks it exits 0 without a traceback."""
    with deadline(30):
        child = subprocess.Popen([sys.executable, "-m", "mqlite", "dashboard", *argv, "--listen", "127.0.0.1:0",
                                  "--interval", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "PYTHONPATH": SRC})
        try:
            assert child.stdout is not None
            url = child.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:") and url.endswith("/"), url
            yield url
        finally:
            child.send_signal(signal.SIGTERM)
            out, err = child.communicate(timeout=20)
        assert child.returncode == 0, err
        assert "SIGINT or SIGTERM stops" in err and "Traceback" not in err


def test_the_command_serves_a_store_read_only_until_sigterm(template: Facts) -> None:
    with dashboard_process(template.path) as url:
        overview = get(url, "api/overview")
        assert {t["topic"] for t in overview["topics"]} >= {"orders", "%DLQ%cg"}
        assert overview["store"]["mode"] == "read-only" and overview["store"]["writable"] is False
        status, refused = call(url, "api/dlq/cg/resend", {"msg_ids": [template.dead_msg_id], "confirm": True})
        assert (status, refused["kind"]) == (403, "ForbiddenError")


def test_the_command_over_n_re_sends_on_the_serving_broker(store: Facts) -> None:
    with mqlite.open(store.path, **SMALL_STORE) as broker:
        server = broker.serve("127.0.0.1:0")
        with dashboard_process("-n", server.address) as url:
            overview = get(url, "api/overview")
            assert overview["store"]["mode"] == "remote" and overview["store"]["writable"] is True
            status, result = call(url, "api/dlq/cg/resend", {"msg_ids": [store.dead_msg_id], "confirm": True})
            assert status == 200, result
        [sent] = result["results"]
        copy = broker.query_message_by_offset(sent["topic"], sent["queue_id"], sent["queue_offset"])
        assert (copy.topic, copy.msg_id, copy.body) == ("%RETRY%cg", store.dead_msg_id, b"body-0")
        server.close()


def test_the_command_refuses_write_while_another_holds_the_store(store: Facts,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with mqlite.open(store.path):
        assert main(["dashboard", store.path, "--write", "--listen", "127.0.0.1:0"]) == 1
    err = capsys.readouterr().err
    assert "held by a live writer" in err and "drop --write" in err


def test_the_command_checks_its_options(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", template.path, "--interval", "0"]) == 2
    assert "bad interval" in capsys.readouterr().err
    assert main(["dashboard", template.path, "--listen", "nowhere"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err
    with deadline(10):  # without the check, the command would serve
        assert main(["dashboard", template.path, "--json", "--listen", "127.0.0.1:0"]) == 2
    assert "its JSON is the API" in capsys.readouterr().err


# -- pages ------------------------------------------------------------------------------------------------------
def test_overview_lists_the_topics_groups_and_totals(reader: Dashboard, template: Facts) -> None:
    overview = get(reader, "api/overview")
    topics = {t["topic"]: t for t in overview["topics"]}
    assert topics["orders"]["kind"] == "user" and topics["orders"]["queues"] == 2
    assert topics["orders"]["messages"] == 6 and topics["orders"]["last_store_time"] == template.start_ms + 5000
    assert topics["%DLQ%cg"]["kind"] == "dlq" and topics["%DLQ%cg"]["messages"] == 1
    assert overview["groups"] == ["cg"]
    assert overview["totals"]["messages"] == sum(t["messages"] for t in topics.values())
    assert overview["totals"]["disk_bytes"] > 0 and overview["health"]["clean_shutdown"] is True
    assert overview["store"]["path"] == template.path


def test_topic_page_has_its_queues_and_settings(reader: Dashboard, template: Facts) -> None:
    topic = get(reader, "api/topics/orders")
    assert (topic["read_queues"], topic["write_queues"], topic["groups"]) == (2, 2, ["cg"])
    assert [(q["queue_id"], q["min_offset"], q["max_offset"]) for q in topic["queues"]] == [(0, 0, 3), (1, 0, 3)]
    assert get(reader, "api/topics/%25DLQ%25cg")["kind"] == "dlq"  # a % in a name travels percent-encoded
    status, missing = call(reader, "api/topics/nope")
    assert status == 404 and "nope" in missing["error"]


def test_each_search_form_finds_the_message(reader: Dashboard, template: Facts) -> None:
    def found(query: str) -> list[tuple[str, int, int]]:
        return [(m["msg_id"], m["queue_id"], m["queue_offset"]) for m in get(reader, f"api/messages?{query}")["messages"]]

    three = (template.msg_ids[3], 1, 1)
    assert found("key=k3&topic=orders") == [three]
    assert found(f"msg_id={template.msg_ids[3]}") == [three]
    assert found(f"offset_msg_id={template.offset_ids[3]}") == [three]
    assert found("topic=orders&queue_id=1&offset=1") == [three, (template.msg_ids[5], 1, 2)]
    assert found("topic=orders&queue_id=1&offset=1&limit=1") == [three]
    start = template.start_ms
    assert found(f"topic=orders&begin={start + 2000}&end={start + 4000}") == [
        (template.msg_ids[2], 0, 1), three]  # [begin, end), oldest first over both queues
    window = get(reader, f"api/messages?topic=orders&begin={start}&end={start + 10_000}&limit=4")
    assert len(window["messages"]) == 4 and window["truncated"] is True


@pytest.mark.parametrize(("query", "status", "words"), [
    ("key=k3", 400, "topic is missing"),
    ("key=k3&topic=nope", 404, "no topic"),
    ("key=k3&topic=orders&limit=100000", 400, "limit must be from 1 to 1000"),
    ("topic=orders&queue_id=0&offset=-1", 400, "offset must be from 0"),
    ("topic=orders&queue_id=0&offset=abc", 400, "offset must be an integer"),
    ("topic=orders&queue_id=0&offset=99", 404, "no message at orders/0 offset 99"),
    ("msg_id=xyz", 400, "32 or 56 hexadecimal"),
    ("msg_id=" + "0" * 32, 404, "no message"),
    ("topic=orders&begin=5&end=1", 400, "before begin"),
    ("topic=orders", 400, "give key and topic"),
])
def test_bad_searches_answer_with_what_was_wrong(reader: Dashboard, query: str, status: int, words: str) -> None:
    got, error = call(reader, f"api/messages?{query}")
    assert (got, words in error["error"]) == (status, True), error
    assert set(error) == {"error", "kind"}


def test_message_detail_has_headers_properties_and_body(reader: Dashboard, template: Facts) -> None:
    msg = get(reader, f"api/message?msg_id={template.msg_ids[2]}")
    assert (msg["topic"], msg["queue_id"], msg["queue_offset"], msg["tags"], msg["keys"]) == ("orders", 0, 1, "TagA", ["k2"])
    assert msg["body_text"] == "body-2" and msg["body_hex"] == b"body-2".hex() and msg["body_truncated"] is False
    assert msg["properties"]["KEYS"] == "k2" and msg["offset_msg_id"] == template.offset_ids[2]
    assert msg["store_timestamp"] == template.start_ms + 2000 and msg["commit_log_offset"] >= 0
    by_offset = get(reader, "api/message?topic=orders&queue_id=0&offset=1")
    assert by_offset["msg_id"] == template.msg_ids[2]


def test_binary_and_long_bodies_show_as_hex(tmp_path: Path) -> None:
    with mqlite.open(str(tmp_path / "mq"), **SMALL_STORE) as broker, Dashboard(broker) as board:
        binary = broker.put_message("T", 0, b"\xff\x00\xfe")
        long = broker.put_message("T", 0, b"a" * (70 * 1024))
        msg = get(board, f"api/message?offset_msg_id={binary.offset_msg_id}")
        assert (msg["body_text"], msg["body_hex"]) == (None, "ff00fe")
        msg = get(board, f"api/message?offset_msg_id={long.offset_msg_id}")
        assert len(msg["body_hex"]) == 2 * 64 * 1024 and msg["body_truncated"] is True
        assert msg["body_text"] == "a" * (64 * 1024) and msg["body_size"] == 70 * 1024


def test_trace_route_shows_where_the_message_stands(reader: Dashboard, template: Facts) -> None:
    trace = get(reader, f"api/trace?msg_id={template.msg_ids[2]}")
    assert trace["traces"] == []  # nobody traced it
    assert [(t["consumer_group"], t["track_type"]) for t in trace["tracks"]] == [("cg", "NOT_CONSUME_YET")]
    assert call(reader, "api/trace?msg_id=" + "0" * 32)[0] == 404


# -- consumer groups and history ------------------------------------------------------------------------------
def test_group_lag_and_its_history_after_a_consumer_falls_behind(store: Facts) -> None:
    with mqlite.open(store.path, **SMALL_STORE) as broker, Dashboard(broker, interval=0.05, history=8) as board:
        q0 = mqlite.MessageQueue("orders", broker.broker_name, 0)
        assert get(board, "api/groups/cg")["lag"] == 2 + 3  # queue 0: 3 stored, 1 consumed; queue 1: none
        wait_until(lambda: get(board, "api/groups/cg")["history"]["lag"], "a first point in the history")
        for i in range(4):
            broker.put_message("orders", 0, f"late-{i}".encode())
        broker.commit_offset("cg", q0, 2)
        wait_until(lambda: get(board, "api/groups/cg")["history"]["lag"][-1:] == [8], "the lag of 8 in the history")
        group = get(board, "api/groups/cg")
        assert group["lag"] == 8 and group["members"] == []  # the writer knows its (absent) members
        # Queue 1 has no committed offset: counted from 0 (mqadmin's consumerProgress), and marked so.
        assert [(q["queue_id"], q["broker_offset"], q["consumer_offset"], q["committed"], q["lag"])
                for q in group["queues"]] == [(0, 7, 2, True, 5), (1, 3, 0, False, 3)]
        history = group["history"]
        assert len(history["t"]) == len(history["lag"]) == len(history["by_topic"]["orders"])
        assert history["by_queue"]["orders/0"][-1] == 5 and history["t"] == sorted(history["t"])
        assert 5 in history["lag"]  # before the sends: what fell behind shows as a rise
        groups = get(board, "api/groups")["groups"]
        assert [(g["group"], g["lag"], g["dlq"], g["topics"]) for g in groups] == [("cg", 8, 1, ["orders"])]
        wait_until(lambda: len(get(board, "api/overview")["history"]["t"]) == 8, "the history to fill")
        full = get(board, "api/overview")["history"]["t"]
        wait_until(lambda: get(board, "api/overview")["history"]["t"][-1] > full[-1], "a round after the history filled")
        assert len(get(board, "api/overview")["history"]["t"]) == 8  # bounded: the oldest rounds went
        assert call(board, "api/groups/nobody")[0] == 404


def test_rates_come_from_offsets_between_rounds(store: Facts) -> None:
    with mqlite.open(store.path, **SMALL_STORE) as broker, Dashboard(broker, interval=0.05) as board:
        for i in range(20):
            broker.put_message("orders", 1, b"x")
        wait_until(lambda: any(get(board, "api/overview")["history"]["in_per_s"]), "a send rate above 0")
        rates = get(board, "api/topics/orders")["history"]["in_per_s"]
        assert all(r is None or r >= 0 for r in rates) and any(r for r in rates)


# -- dead letters -----------------------------------------------------------------------------------------------
def test_dlq_list_and_resend_with_write(store: Facts) -> None:
    with mqlite.open(store.path, **SMALL_STORE) as broker, Dashboard(broker, writable=True) as board:
        dlq = get(board, "api/dlq")
        assert dlq == {"writable": True, "queues": [{"group": "cg", "topic": "%DLQ%cg", "messages": 1}]}
        [letter] = get(board, "api/dlq/cg")["messages"]
        assert (letter["msg_id"], letter["origin_topic"], letter["topic"]) == (store.dead_msg_id, "orders", "%DLQ%cg")
        status, result = call(board, "api/dlq/cg/resend", {"msg_ids": [store.dead_msg_id], "confirm": True})
        assert status == 200, result
        [sent] = result["results"]
        assert (sent["msg_id"], sent["topic"]) == (store.dead_msg_id, "%RETRY%cg")
        copy = broker.query_message_by_offset("%RETRY%cg", sent["queue_id"], sent["queue_offset"])
        assert copy.msg_id == store.dead_msg_id and copy.body == b"body-0" and copy.reconsume_times == 0


@pytest.mark.parametrize(("body", "headers", "status", "words"), [
    ({"msg_ids": ["X"]}, {}, 400, '"confirm": true'),
    ({"msg_ids": ["X"], "confirm": "yes"}, {}, 400, '"confirm": true'),
    ({"msg_ids": [], "confirm": True}, {}, 400, "non-empty list"),
    ({"msg_ids": ["nothex"], "confirm": True}, {}, 400, "hexadecimal"),
    ({"msg_ids": ["0" * 32], "confirm": True}, {}, 404, "no message"),
    ({"msg_ids": ["X"], "confirm": True}, {"Host": "evil.example:80"}, 403, "Host"),
    ({"msg_ids": ["X"], "confirm": True}, {"Origin": "http://evil.example"}, 403, "Origin"),
    ({"msg_ids": ["X"], "confirm": True}, {"Content-Type": "text/plain"}, 415, "application/json"),
    (b"{not json", {}, 400, "not JSON"),
    (b"[1]", {}, 400, "JSON object"),
])
def test_resend_refuses_unconfirmed_foreign_and_bad_requests(store: Facts, body: Any, headers: dict[str, str],
                                                             status: int, words: str) -> None:
    with mqlite.open(store.path, **SMALL_STORE) as broker, Dashboard(broker, writable=True) as board:
        got, error = call(board, "api/dlq/cg/resend", body, headers=headers)
        assert (got, words in error["error"]) == (status, True), error
        assert broker.topic_config("%RETRY%cg") is None or broker.max_offset(
            mqlite.MessageQueue("%RETRY%cg", broker.broker_name, 0)) == 0  # nothing was re-sent


def test_resend_is_refused_when_read_only(reader: Dashboard, template: Facts) -> None:
    status, error = call(reader, "api/dlq/cg/resend", {"msg_ids": [template.dead_msg_id], "confirm": True})
    assert status == 403 and "--write" in error["error"]
    assert call(reader, "api/dlq/cg/resend", method="GET")[0] == 405
    assert get(reader, "api/dlq")["writable"] is False


def test_a_read_only_broker_cannot_be_made_writable(template: Facts) -> None:
    with mqlite.open(template.path, read_only=True) as broker:
        with pytest.raises(mqlite.MQClientError, match="read-only"):
            Dashboard(broker, writable=True)


# -- requests from elsewhere, files -----------------------------------------------------------------------------
def test_a_foreign_host_is_refused_on_every_route(reader: Dashboard) -> None:
    for path in ("api/overview", "static/index.html", "api/dlq"):
        status, error = call(reader, path, headers={"Host": "rebound.example:8080"})
        assert status == 403 and "DNS rebinding" in error["error"]
    port = reader.address.rsplit(":", 1)[1]
    assert call(reader, "api/overview", headers={"Host": f"localhost:{port}"})[0] == 200


def test_beyond_loopback_ip_literals_pass_and_names_do_not(template: Facts) -> None:
    with mqlite.open(template.path, read_only=True) as broker, Dashboard(broker, "0.0.0.0:0") as board:
        assert board.loopback is False
        port = board.address.rsplit(":", 1)[1]
        url = f"http://127.0.0.1:{port}/"
        assert call(url, "api/dlq")[0] == 200
        assert call(url, "api/dlq", headers={"Host": f"10.1.2.3:{port}"})[0] == 200  # as a LAN client sends it
        assert call(url, "api/dlq", headers={"Host": f"rebound.example:{port}"})[0] == 403
        assert call(url, "api/dlq", headers={"Host": "10.1.2.3:1"})[0] == 403  # another port


def test_static_paths_never_leave_the_static_directory(reader: Dashboard, tmp_path: Path) -> None:
    for path in ("static/../server.py", "static/%2e%2e/server.py", "static/..%2fserver.py", "static//etc/passwd",
                 "static/%5c..%5cserver.py", "../pyproject.toml"):
        status, error = call(reader, path)
        assert status == 404 and error["kind"] == "NotFoundError", path
    assert call(reader, "api/nothing")[0] == 404
    (tmp_path / "static" / "vendor").mkdir(parents=True)
    (tmp_path / "static" / "vendor" / "chart.js").write_text("let x;")
    (tmp_path / "secret.txt").write_text("secret")
    root = tmp_path / "static"
    assert _static_file(root, "vendor/chart.js") == (b"let x;", "text/javascript; charset=utf-8")
    for path in ("../secret.txt", "vendor/../../secret.txt", "%2e%2e/secret.txt", "vendor%2f..%2f..%2fsecret.txt",
                 "", "vendor/", "vendor"):
        assert _static_file(root, path) is None, path


def test_the_page_and_its_files_are_served_when_present(reader: Dashboard) -> None:
    from importlib import resources

    static = resources.files("mqlite.dashboard").joinpath("static")
    if not static.joinpath("index.html").is_file():
        pytest.skip("the page (static/index.html) is not in this checkout")
    with urllib.request.urlopen(reader.url, timeout=10) as response:
        assert response.headers["Content-Type"] == "text/html; charset=utf-8"
        assert response.read() == static.joinpath("index.html").read_bytes()
        assert "default-src 'self'" in response.headers["Content-Security-Policy"]


# -- store health -----------------------------------------------------------------------------------------------
def test_health_and_verify(reader: Dashboard, template: Facts) -> None:
    health = get(reader, "api/health")
    assert health["available"] is True and health["flush_disk_type"] == "ASYNC_FLUSH"
    assert health["commitlog"]["file_size"] == SMALL_STORE["commitlog_file_size"]
    assert [s["name"] for s in health["commitlog"]["segments"]] == ["00000000000000000000"]
    assert health["commitlog"]["max_offset"] > 0 and health["consume_queue_bytes"] > 0
    assert health["clean_shutdown"] is True and health["checkpoint"]["physic_msg_timestamp"] > 0
    status, verify = call(reader, "api/verify", {})
    assert status == 200, verify
    assert verify["ok"] is True and verify["records"] == 7 and verify["problems"] == []


def test_a_store_its_writer_did_not_close_shows_as_unclean(store: Facts) -> None:
    Path(store.path, "abort").touch()  # what a crashed writer leaves
    with mqlite.open(store.path, read_only=True) as broker, Dashboard(broker) as board:  # no writer since
        health = get(board, "api/overview")["health"]
        assert (health["clean_shutdown"], health["writer_alive"], health["status"]) == (False, False, "warn")
        assert "no writer has opened it since" in health["notes"][0]
        assert (get(board, "api/health")["clean_shutdown"], get(board, "api/health")["writer_alive"]) == (False, False)
    with mqlite.open(store.path, **SMALL_STORE) as writer:  # recovers, and records it
        with mqlite.open(store.path, read_only=True) as broker, Dashboard(broker) as board:  # beside it
            health = get(board, "api/overview")["health"]
            assert (health["clean_shutdown"], health["writer_alive"], health["status"]) == (False, True, "warn")
            assert "which recovered it when it opened" in health["notes"][0]
            assert "a writer holds the store" in health["notes"][1]
            assert (get(board, "api/health")["clean_shutdown"], get(board, "api/health")["writer_alive"]) == (False, True)
        with Dashboard(writer) as board:
            assert (get(board, "api/health")["clean_shutdown"], get(board, "api/health")["writer_alive"]) == (False, True)
            assert get(board, "api/health")["recovery_history"][-1]["abnormal"] is True


# -- metrics ------------------------------------------------------------------------------------------------------
def scrape(board: Dashboard) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """`/metrics` parsed by Prometheus' own parser: (sample name, labels) -> value."""
    with urllib.request.urlopen(board.url + "metrics", timeout=10) as response:
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = response.read().decode("utf-8")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_are_served_for_prometheus_and_match_the_store(reader: Dashboard) -> None:
    samples = scrape(reader)
    orders = frozenset({("topic", "orders"), ("message_type", "normal"), ("is_system", "false")})
    assert samples[("rocketmq_messages_in_total", orders)] == 6
    lag = {labels: v for (name, labels), v in samples.items() if name == "rocketmq_consumer_lag_messages"}
    # Queue 0: 3 stored, 1 consumed; queue 1 has no committed offset, so no lag (RocketMQ's ConsumerLagCalculator).
    assert [v for labels, v in lag.items() if ("consumer_group", "cg") in labels and ("topic", "orders") in labels] == [2]
    assert samples[("rocketmq_storage_size", frozenset({("storage_type", "local"), ("storage_medium", "disk")}))] > 0


# -- beside a live writer, and over the wire ----------------------------------------------------------------------
def test_a_read_only_dashboard_follows_a_live_writer(store: Facts) -> None:
    with mqlite.open(store.path, **SMALL_STORE) as writer:
        with mqlite.open(store.path, read_only=True) as broker, Dashboard(broker, interval=0.05) as board:
            writer.put_message("fresh", 0, b"new", {"KEYS": "knew"})
            writer.put_message("orders", 1, b"more", {"KEYS": "kmore"})
            writer.wait_dispatched()

            def topics() -> dict[str, int]:
                return {t["topic"]: t["messages"] for t in get(board, "api/overview")["topics"]}

            wait_until(lambda: topics().get("fresh") == 1 and topics()["orders"] == 7, topics)
            [found] = get(board, "api/messages?key=knew&topic=fresh")["messages"]
            assert found["topic"] == "fresh"
            health = get(board, "api/overview")["health"]
            assert health["clean_shutdown"] is True  # the writer's open recorded a clean store
            assert "a writer holds the store" in health["notes"][0]


def test_searches_beside_a_live_writer_see_its_latest_messages(store: Facts) -> None:
    with mqlite.open(store.path, **SMALL_STORE) as writer:
        # No sampling round after the first: each request itself picks up what the writer stored.
        with mqlite.open(store.path, read_only=True) as broker, Dashboard(broker, interval=3600) as board:
            writer.put_message("orders", 1, b"more", {"KEYS": "kmore"})
            writer.wait_dispatched()
            [more] = get(board, "api/messages?key=kmore&topic=orders")["messages"]
            assert get(board, f"api/message?offset_msg_id={more['offset_msg_id']}")["body_text"] == "more"
            assert get(board, "api/topics/orders")["queues"][1]["max_offset"] == 4


def test_a_dashboard_over_the_wire(store: Facts) -> None:
    with mqlite.open(store.path, **SMALL_STORE) as broker:
        server = broker.serve("127.0.0.1:0")
        with mqlite.connect(server.address) as remote, Dashboard(remote, interval=0.05, writable=True) as board:
            overview = get(board, "api/overview")
            assert overview["store"]["mode"] == "remote" and overview["store"]["address"] == server.address
            assert {"orders", "%DLQ%cg"} <= {t["topic"] for t in overview["topics"]}
            assert get(board, "api/groups/cg")["lag"] == 5
            [found] = get(board, "api/messages?key=k4&topic=orders")["messages"]
            assert found["msg_id"] == store.msg_ids[4]
            assert get(board, "api/health")["available"] is False
            assert scrape(board)[("rocketmq_topic_number", frozenset())] == len(overview["topics"])
            status, error = call(board, "api/verify", {})
            assert status == 400 and "mqlite verify PATH" in error["error"]
            status, result = call(board, "api/dlq/cg/resend", {"msg_ids": [store.dead_msg_id], "confirm": True})
            assert status == 200 and result["results"][0]["topic"] == "%RETRY%cg"
        server.close()


# -- the review's findings (issue 15): hosts, client faults, closing, errors, rates ---------------------------------
def test_a_host_without_a_port_means_port_80(reader: Dashboard, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not reader._host_allowed("127.0.0.1")  # this board's port is not 80
    monkeypatch.setattr(reader, "_port", 80)  # as a board listening on 127.0.0.1:80 (binding it needs root)
    for host in ("127.0.0.1", "localhost", "[::1]", "127.0.0.1:80", "localhost:80"):
        assert reader._host_allowed(host), host
    for host in ("rebound.example", "rebound.example:80", "127.0.0.1:81", "", ":80", "127.0.0.1:80.", "[::1",
                 "127.0.0.1:٨٠"):
        assert not reader._host_allowed(host), host


def test_allowed_hosts_let_a_reverse_proxy_through(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    with mqlite.open(template.path, read_only=True) as broker, \
            Dashboard(broker, allow_hosts=["Dash.Example.com"]) as board:
        for host in ("dash.example.com", "dash.example.com:443", "DASH.example.com:8443"):  # as a proxy passes it
            assert call(board, "api/dlq", headers={"Host": host})[0] == 200, host
        assert call(board, "api/dlq", headers={"Host": "evil.example"})[0] == 403
        for origin, status in (("https://dash.example.com", 200), ("http://dash.example.com:8080", 200),
                               ("https://evil.example", 403), ("https://127.0.0.1", 403)):
            got, answer = call(board, "api/verify", {}, headers={"Host": "dash.example.com", "Origin": origin})
            assert got == status, (origin, answer)
    with pytest.raises(mqlite.ConfigError, match="bad host name"):
        Dashboard(broker, allow_hosts=["https://dash.example.com/"])
    assert main(["dashboard", template.path, "--allow-host", "a b"]) == 2
    assert "bad host name" in capsys.readouterr().err
    with dashboard_process(template.path, "--allow-host", "dash.example.com", "--allow-host", "10.0.0.9") as url:
        for host in ("dash.example.com", "10.0.0.9:80"):
            assert call(url, "api/overview", headers={"Host": host})[0] == 200, host


def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("mqlite.dashboard") and r.levelno >= level]


def test_clients_that_reset_leave_no_error_in_the_log(template: Facts, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "mqlite.dashboard")
    with mqlite.open(template.path, read_only=True) as broker:
        board = Dashboard(broker, interval=3600)
        host, port = board.address.rsplit(":", 1)
        for _ in range(5):  # a browser leaving a page while a poll is in flight
            with socket.create_connection((host, int(port))) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
                sock.sendall(b"GET /api/overview HTTP/1.1\r\nHost: %s\r\n\r\n" % board.address.encode())
        half = socket.create_connection((host, int(port)))  # headers without their end, then the board closes
        half.sendall(b"GET /api/overview?half HTTP/1.1\r\nHost: %s\r\n" % board.address.encode())
        assert get(board, "api/dlq")["writable"] is False  # accepted after the others: they are being served
        board.close()  # joins every connection's thread
        half.close()
    assert _records(caplog, logging.INFO) == []
    # The half request ended at EOF when close() shut its socket: refused, not served during the shutdown.
    assert [m for m in _records(caplog, logging.DEBUG) if "?half" in m and '" 503 ' not in m] == []
    assert [m for m in _records(caplog, logging.DEBUG) if "?half" in m and '" 503 ' in m]


def test_a_short_or_stalled_body_is_refused_soon(store: Facts, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "_BODY_TIMEOUT", 0.2)
    with mqlite.open(store.path, read_only=True) as broker, Dashboard(broker, interval=3600) as board:
        host, port = board.address.rsplit(":", 1)
        head = (b"POST /api/verify HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: 10\r\n\r\n{}" % board.address.encode())

        def answer(half_close: bool) -> tuple[bytes, Any]:
            with socket.create_connection((host, int(port))) as sock:
                sock.sendall(head)
                if half_close:
                    sock.shutdown(socket.SHUT_WR)  # the body ends there
                sock.settimeout(10)  # less than the 30 s idle timeout a stalled body sat out before
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
            status_line, _, rest = data.partition(b"\r\n")
            return status_line, json.loads(rest.partition(b"\r\n\r\n")[2])

        status_line, error = answer(half_close=True)
        assert b" 400 " in status_line and "ended after 2 of the 10 bytes" in error["error"]
        status_line, error = answer(half_close=False)
        assert b" 408 " in status_line and error["kind"] == "RequestTimeoutError"


def test_close_does_not_wait_for_an_idle_connection(template: Facts) -> None:
    with mqlite.open(template.path, read_only=True) as broker:
        board = Dashboard(broker, interval=3600)
        host, port = board.address.rsplit(":", 1)
        idle = socket.create_connection((host, int(port)))  # a browser's pre-connection: sends nothing
        try:
            get(board, "api/dlq")  # accepted after the idle one: its thread now waits for a request line
            closer = threading.Thread(target=board.close, name="test-close")
            closer.start()
            closer.join(10)  # an idle connection's thread would sit out its 30 s timeout
            assert not closer.is_alive(), "close() waited for an idle connection"
        finally:
            idle.close()
            board.close()


def test_every_error_is_json_with_the_security_headers(reader: Dashboard) -> None:
    host, port = reader.address.rsplit(":", 1)

    def raw(request: bytes) -> tuple[str, dict[str, str], Any]:
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(request)
            sock.settimeout(10)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        return status_line, headers, json.loads(body)

    ours = b"Host: %s\r\n\r\n" % reader.address.encode()
    for request, status, kind in (
            (b"OPTIONS /api/overview HTTP/1.1\r\n" + ours, " 405 ", "MethodNotAllowedError"),
            (b"PATCH /api/overview HTTP/1.1\r\n" + ours, " 405 ", "MethodNotAllowedError"),
            (b"PUT /static/index.html HTTP/1.1\r\n" + ours, " 405 ", "MethodNotAllowedError"),
            (b"BREW /api/overview HTTP/1.1\r\n" + ours, " 501 ", "RequestError"),
            (b"GET /api/overview HTTP/1.1 more\r\n" + ours, " 400 ", "RequestError"),
            (b"GET /api/overview\r\n" + ours, " 400 ", "RequestError"),  # HTTP/0.9
            (b"GET /api/messages?key=" + b"k" * 70000 + b" HTTP/1.1\r\n" + ours, " 414 ", "RequestError")):
        status_line, headers, error = raw(request)
        assert status in status_line and error["kind"] == kind and error["error"], (request[:30], status_line, error)
        assert headers["content-type"] == "application/json; charset=utf-8"
        assert headers["x-content-type-options"] == "nosniff" and "frame-ancestors 'none'" in headers[
            "content-security-policy"]
        assert headers["server"] == "mqlite-dashboard"
    status, error = call(reader, "api/verify", {}, headers={"Content-Type": "text/plain"})
    assert (status, error["kind"]) == (415, "UnsupportedMediaTypeError")


def test_a_resend_naming_an_id_twice_sends_it_once(store: Facts) -> None:
    with mqlite.open(store.path, **SMALL_STORE) as broker, Dashboard(broker, writable=True) as board:
        status, result = call(board, "api/dlq/cg/resend", {"msg_ids": [store.dead_msg_id] * 2, "confirm": True})
        assert status == 200 and len(result["results"]) == 1, result
        assert broker.max_offset(mqlite.MessageQueue("%RETRY%cg", broker.broker_name, 0)) == 1


def test_verify_gives_up_when_the_dashboard_closes_and_runs_once_at_a_time(template: Facts) -> None:
    with mqlite.open(template.path, read_only=True) as broker:
        board = Dashboard(broker, interval=3600)
        answers: list[Any] = []

        def ask() -> None:
            try:
                answers.append(call(board, "api/verify", {}))
            except (OSError, http.client.HTTPException) as exc:  # close() ended the connection (or its 503)
                answers.append(exc)

        first = threading.Thread(target=ask, name="test-verify")
        first.start()
        wait_until(lambda: board._api.verifier._child is not None, "the verify's child process")
        child = board._api.verifier._child
        assert child is not None
        os.kill(child.pid, signal.SIGSTOP)  # a verify of a store as big as it takes: it cannot end by itself
        try:
            second, error = call(board, "api/verify", {})
            assert (second, error["kind"]) == (409, "ConflictError"), error
            closer = threading.Thread(target=board.close, name="test-close")
            closer.start()
            closer.join(10)  # without the kill it would wait forever
            assert not closer.is_alive(), "close() waited for the verify"
            first.join(10)
            assert not first.is_alive() and child.returncode == -signal.SIGKILL and answers
        finally:  # a failure above leaves nothing stopped behind
            if child.returncode is None:
                os.kill(child.pid, signal.SIGKILL)
            board.close()
    with mqlite.open(template.path, read_only=True) as broker, Dashboard(broker, interval=3600) as board:
        status, verify = call(board, "api/verify", {})  # nothing left running: one verify at a time, not one ever
        assert status == 200 and verify["ok"] is True and verify["records"] == 7


def _steady_consumer(seconds: int) -> History:
    """A history of `seconds` rounds, one a second, of a group consuming 25/s whose offsets are seen every 5 s
    (as a reader sees a writer persist them), over a 10 s consume window."""
    history = History(100, out_window=10.0)
    for second in range(seconds):
        consumed = 125 * (second // 5)
        history.add(Sample(second * 1000, {}, {"cg": (QueueProgress("t", "b", 0, 10_000, consumed, "", 0),)}))
    return history


def test_the_overview_totals_are_unknown_until_a_rate_is_known() -> None:
    """Before the consume window is spanned the total is null, as docs/dashboard.md says, not a rate of 0."""

    totals = [_out_total(p) for p in _steady_consumer(13).points()]
    assert totals[:9] == [None] * 9 and totals[9:] == [25.0] * 3
    assert _out_total(Point(0, {}, {}, {})) == 0  # no group at all: nothing is consumed
    assert _in_total(Point(0, {"orders": None, "%RETRY%cg": 3.0}, {}, {})) is None  # a new user topic: unknown
    assert _in_total(Point(0, {"orders": 2.0, "new": None}, {}, {})) == 2.0


def test_consume_rates_span_the_offset_persist_interval() -> None:
    """A consumer steady at 25/s whose offsets a reader sees every 5 s (as the writer persists them)."""

    rates = [p.group_out["cg"] for p in _steady_consumer(31).points()]
    assert rates[:9] == [None] * 9  # seconds 1-9: the window is not spanned yet
    assert rates[9:] == [25.0] * 21


def test_a_reader_takes_consume_rates_over_two_offset_persists(template: Facts) -> None:
    with mqlite.open(template.path, read_only=True, flush_consumer_offset_interval=8.0) as broker:
        assert Source(broker).out_window == 16.0
    with mqlite.open(template.path, read_only=True) as broker:
        assert Source(broker).out_window == 10.0


def test_a_search_right_after_the_consume_queue_rolls_finds_the_newest(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    with mqlite.open(path, **TINY_STORE) as writer:  # 64 units per consume-queue file
        writer.create_topic("t", 1)
        for i in range(60):
            writer.put_message("t", 0, b"x", {"KEYS": f"k{i}"})
        writer.wait_dispatched()
        with mqlite.open(path, read_only=True, **TINY_STORE) as broker, Dashboard(broker, interval=3600) as board:
            assert len(get(board, "api/messages?key=k59&topic=t")["messages"]) == 1  # the first file: 60 of 64
            for i in range(60, 70):  # fills the file and rolls to the next one
                writer.put_message("t", 0, b"x", {"KEYS": f"k{i}"})
            writer.wait_dispatched()
            assert len(get(board, "api/messages?key=k69&topic=t")["messages"]) == 1  # one refresh: both steps
            assert get(board, "api/topics/t")["queues"][0]["max_offset"] == 70


def test_a_sampling_failure_of_any_kind_shows_as_warn(template: Facts, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    with mqlite.open(template.path, read_only=True) as broker, Dashboard(broker, interval=0.05) as board:
        failed = []

        def vanished() -> list[str]:
            failed.append(1)
            raise FileNotFoundError(2, "No such file or directory", "consumequeue/t/0/00000000000000000000")

        monkeypatch.setattr(broker, "topic_list", vanished)  # as a file retention removed under the reader
        wait_until(lambda: get(board, "api/overview")["health"]["status"] == "warn", "the page to say warn")
        notes = get(board, "api/overview")["health"]["notes"]
        assert "FileNotFoundError" in notes[0] and "No such file" in notes[0]
        wait_until(lambda: len(failed) >= 3, "more failed rounds")
        monkeypatch.undo()
        wait_until(lambda: get(board, "api/overview")["health"]["status"] == "ok", "ok once rounds succeed")
    assert len([m for m in _records(caplog, logging.WARNING) if "sampling" in m]) == 1


def test_the_interval_has_a_floor(template: Facts, capsys: pytest.CaptureFixture[str]) -> None:
    with deadline(10):  # without the floor, the command would serve
        assert main(["dashboard", template.path, "--interval", "0.05", "--listen", "127.0.0.1:0"]) == 2
    assert "from 0.1 to 3600" in capsys.readouterr().err
    with mqlite.open(template.path, read_only=True) as broker, pytest.raises(mqlite.ConfigError, match="0.01"):
        Dashboard(broker, interval=0.001)


# -- the page's asks (issue 15): dead letters past the first page, and one copy of two sharing a msg_id ----------
def test_dead_letters_page_from_an_offset(store: Facts) -> None:
    with mqlite.open(store.path, **SMALL_STORE) as broker, Dashboard(broker) as board:
        for offset in (1, 2):  # messages 2 and 4 (queue 0) die too: %DLQ%cg holds 0, 2, 4 at offsets 0, 1, 2
            broker.send_message_back("cg", broker.query_message_by_offset("orders", 0, offset), delay_level=-1)
        assert broker.wait_dispatched(10)

        def page(query: str) -> tuple[list[tuple[int, str, str]], bool]:
            answer = get(board, "api/dlq/cg?" + query)
            return [(m["queue_offset"], m["msg_id"], m["origin_topic"]) for m in answer["messages"]], answer["truncated"]

        ids = store.msg_ids
        assert page("limit=2") == ([(0, ids[0], "orders"), (1, ids[2], "orders")], True)
        assert page("limit=2&offset=2") == ([(2, ids[4], "orders")], False)  # a later page keeps its origin topic
        assert page("limit=2&offset=0") == page("limit=2")
        assert page("offset=3") == page("offset=99") == ([], False)  # past the newest: empty, not 404
        status, error = call(board, "api/dlq/cg?offset=-1")
        assert status == 400 and "parameter offset" in error["error"]


def test_resend_by_offset_msg_id_sends_that_copy_of_two(store: Facts) -> None:
    """Two dead letters share a msg_id when a re-sent message dies again: the page names the copy it shows
    by its offset_msg_id, and that copy is the one re-sent (a msg_id finds the newest)."""
    with mqlite.open(store.path, **SMALL_STORE) as broker, Dashboard(broker, writable=True) as board:
        first = broker.query_message_by_offset("%DLQ%cg", 0, 0)
        broker.put_message("%DLQ%cg", 0, first.body, {**first.properties, "copy": "again"})  # the same msg_id
        assert broker.wait_dispatched(10)
        letters = get(board, "api/dlq/cg")["messages"]
        assert [m["msg_id"] for m in letters] == [store.dead_msg_id] * 2
        retry = mqlite.MessageQueue("%RETRY%cg", broker.broker_name, 0)
        for named, copy in [(letters[0]["offset_msg_id"], None), (store.dead_msg_id, "again"),
                            (letters[1]["offset_msg_id"], "again")]:
            status, result = call(board, "api/dlq/cg/resend", {"msg_ids": [named], "confirm": True})
            assert status == 200, result
            [sent] = result["results"]
            resent = broker.query_message_by_offset("%RETRY%cg", 0, sent["queue_offset"])
            assert (resent.msg_id, resent.properties.get("copy")) == (store.dead_msg_id, copy), named
        # One copy named by both its ids is sent once.
        before = broker.max_offset(retry)
        status, result = call(board, "api/dlq/cg/resend", {"msg_ids": [letters[0]["offset_msg_id"], store.dead_msg_id,
                                                                       letters[1]["offset_msg_id"]], "confirm": True})
        assert status == 200 and len(result["results"]) == 2 and broker.max_offset(retry) == before + 2, result
