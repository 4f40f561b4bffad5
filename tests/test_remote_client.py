"""The remoting connection (`mqlite.remoting.client`): opaque matching, the server's requests,
failing fast when a connection drops, reconnecting, timeouts, ACL signing, threads joined.

The peer here is a plain socket speaking frames with the codec, so a test can make it answer out
of order, stay silent or hang up at exactly the moment it needs.
"""

from __future__ import annotations

import os
import resource
import socket
import threading
from collections.abc import Iterator

import pytest

from mqlite.errors import ConfigError, IllegalStateError, MQClientError, RemotingError
from mqlite.remoting import client as client_module
from mqlite.remoting.address import parse_address
from mqlite.remoting.client import RemotingClient
from mqlite.remoting.protocol import (
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    encode_frame,
    sign,
)
from support import deadline, no_leftover_threads, wait_until  # noqa: F401 - no_leftover_threads: autouse


class Peer:
    """A one-connection-at-a-time frame server on loopback; the test drives it from its own thread."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.conn: socket.socket | None = None
        self.decoder = FrameDecoder()
        self.pending: list[RemotingCommand] = []

    def accept(self) -> None:
        self.conn, _ = self.listener.accept()
        self.decoder = FrameDecoder()
        self.pending = []

    def receive(self) -> RemotingCommand:
        assert self.conn is not None
        while not self.pending:
            data = self.conn.recv(65536)
            assert data, "the client closed the connection"
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def send(self, cmd: RemotingCommand) -> None:
        assert self.conn is not None
        self.conn.sendall(encode_frame(cmd))

    def hang_up(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def close(self) -> None:
        self.hang_up()
        self.listener.close()


@pytest.fixture
def peer() -> Iterator[Peer]:
    p = Peer()
    yield p
    p.close()


def _in_thread(fn, *args) -> tuple[threading.Thread, dict]:  # type: ignore[no-untyped-def]
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, name="test-caller")
    thread.start()
    return thread, box


def _remote_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("mqlite-remote")]


def test_responses_are_matched_by_opaque_not_by_order(peer: Peer) -> None:
    client = RemotingClient(peer.address, timeout=5)
    with deadline(10):
        first = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "a", "queueId": 0})
        second = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "b", "queueId": 0})
        t1, box1 = _in_thread(client.request, first)
        peer.accept()
        got_first = peer.receive()
        t2, box2 = _in_thread(client.request, second)
        got_second = peer.receive()
        # Answer the second request first.
        peer.send(got_second.reply(ResponseCode.SUCCESS, {"offset": 2}))
        peer.send(got_first.reply(ResponseCode.SUCCESS, {"offset": 1}))
        t1.join()
        t2.join()
    assert box1["value"].ext_fields["offset"] == "1"
    assert box2["value"].ext_fields["offset"] == "2"
    client.close()


def test_a_dropped_connection_fails_every_waiting_request_at_once(peer: Peer) -> None:
    client = RemotingClient(peer.address, timeout=60)  # far beyond the deadline: only the drop can end them
    with deadline(10):
        callers = [_in_thread(client.request, RemotingCommand.request(RequestCode.HEART_BEAT)) for _ in range(3)]
        peer.accept()
        for _ in range(3):
            peer.receive()
        peer.hang_up()
        for thread, _ in callers:
            thread.join()
    for _, box in callers:
        assert isinstance(box["error"], RemotingError)
        assert "closed the connection" in str(box["error"])
    client.close()


def test_the_next_request_reconnects_and_reconnect_callbacks_run(peer: Peer) -> None:
    client = RemotingClient(peer.address, timeout=5)
    reconnected = threading.Event()
    client.on_reconnect(reconnected.set)
    with deadline(10):
        thread, box = _in_thread(client.request, RemotingCommand.request(RequestCode.HEART_BEAT))
        peer.accept()
        peer.send(peer.receive().reply(ResponseCode.SUCCESS))
        thread.join()
        peer.hang_up()
        wait_until(lambda: not client.connected, "the reader to notice the hang-up")
        assert not reconnected.is_set()
        thread, box = _in_thread(client.request, RemotingCommand.request(RequestCode.HEART_BEAT))
        peer.accept()
        peer.send(peer.receive().reply(ResponseCode.SUCCESS, {"again": "yes"}))
        thread.join()
        assert reconnected.wait(5)
    assert box["value"].ext_fields == {"again": "yes"}
    client.close()
    assert _remote_threads() == []


def test_a_silent_server_times_the_request_out(peer: Peer) -> None:
    client = RemotingClient(peer.address, timeout=5)
    with deadline(10):
        thread, box = _in_thread(client.request, RemotingCommand.request(RequestCode.HEART_BEAT), 0.2)
        peer.accept()
        request = peer.receive()
        thread.join()
        assert isinstance(box["error"], RemotingError)
        assert "within 0.2 s" in str(box["error"])
        # A late answer is dropped; the connection still serves the next request.
        peer.send(request.reply(ResponseCode.SUCCESS))
        thread, box = _in_thread(client.request, RemotingCommand.request(RequestCode.HEART_BEAT))
        peer.send(peer.receive().reply(ResponseCode.SUCCESS, {"n": "2"}))
        thread.join()
    assert box["value"].ext_fields == {"n": "2"}
    client.close()


def test_an_async_request_gets_its_answer_or_its_error_once(peer: Peer) -> None:
    client = RemotingClient(peer.address, timeout=5)
    results: list[tuple[object, object]] = []
    done = threading.Semaphore(0)

    def callback(response: RemotingCommand | None, error: BaseException | None) -> None:
        results.append((response, error))
        done.release()

    with deadline(10):
        peer_thread, _ = _in_thread(peer.accept)
        client.request_async(RemotingCommand.request(RequestCode.PULL_MESSAGE), 5, callback)
        peer_thread.join()
        peer.send(peer.receive().reply(ResponseCode.PULL_NOT_FOUND))
        done.acquire()
        client.request_async(RemotingCommand.request(RequestCode.PULL_MESSAGE), 60, callback)
        peer.receive()
        peer.hang_up()
        done.acquire()
    assert results[0][0].code == ResponseCode.PULL_NOT_FOUND and results[0][1] is None  # type: ignore[union-attr]
    assert results[1][0] is None and isinstance(results[1][1], RemotingError)
    client.close()


def test_the_servers_requests_go_to_handlers_and_are_answered_on_the_same_connection(peer: Peer) -> None:
    client = RemotingClient(peer.address, timeout=5)
    seen: list[dict[str, str]] = []

    def on_notify(cmd: RemotingCommand) -> RemotingCommand | None:
        seen.append(dict(cmd.ext_fields))
        return cmd.reply(ResponseCode.SUCCESS, {"handled": "yes"})

    client.register_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    with deadline(10):
        thread, _ = _in_thread(client.request, RemotingCommand.request(RequestCode.HEART_BEAT))
        peer.accept()
        heartbeat = peer.receive()
        notify = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g"})
        peer.send(notify)
        answer = peer.receive()
        unknown = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO)
        peer.send(unknown)
        refused = peer.receive()
        peer.send(heartbeat.reply(ResponseCode.SUCCESS))
        thread.join()
    assert seen == [{"consumerGroup": "g"}]
    assert answer.is_response and answer.opaque == notify.opaque and answer.ext_fields == {"handled": "yes"}
    assert refused.opaque == unknown.opaque and refused.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    client.close()


def test_acl_signs_every_request_and_oneway_sets_its_flag(peer: Peer) -> None:
    client = RemotingClient(peer.address, timeout=5, access_key="ak", secret_key="sk")
    with deadline(10):
        peer_thread, _ = _in_thread(peer.accept)
        client.oneway(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"topic": "t", "queueId": 1},
                                              b"body"))
        peer_thread.join()
        got = peer.receive()
    assert got.is_oneway
    fields = dict(got.ext_fields)
    assert fields["AccessKey"] == "ak"
    assert fields["Signature"] == sign(fields, b"body", "sk")
    client.close()


def test_nothing_listening_is_a_remoting_error_and_bad_addresses_are_refused() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        address = f"127.0.0.1:{s.getsockname()[1]}"
    client = RemotingClient(address, timeout=2)
    with pytest.raises(RemotingError, match="cannot connect"):
        client.request(RemotingCommand.request(RequestCode.HEART_BEAT))
    client.close()
    with pytest.raises(IllegalStateError):
        client.request(RemotingCommand.request(RequestCode.HEART_BEAT))
    for bad in ("localhost", "host:0", "host:99999", ":9876", 9876, "host:\u0661\u0662", "host:+1", "host: 1",
                "::1:9876", "[::1:9876", "[]:1", "a b:1", "host:123456", "[host]:1", "host:"):
        with pytest.raises(MQClientError):
            parse_address(bad)  # type: ignore[arg-type]
    assert parse_address("[::1]:9876") == ("::1", 9876)
    assert parse_address("example.com:65535") == ("example.com", 65535)
    assert parse_address("0.0.0.0:0", allow_port_0=True) == ("0.0.0.0", 0)
    with pytest.raises(ConfigError, match=r"0\.\.65535"):
        parse_address("[::]:70000", allow_port_0=True)
    with pytest.raises(MQClientError, match="together"):
        RemotingClient("127.0.0.1:1", access_key="ak")


def test_a_server_that_stops_reading_fails_a_send_instead_of_blocking_it(peer: Peer) -> None:
    client = RemotingClient(peer.address, timeout=1)
    big = b"x" * (4 << 20)
    with deadline(30):
        thread, _ = _in_thread(peer.accept)  # accepts, then never reads: the socket buffers fill up
        with pytest.raises(RemotingError) as refused:
            for _ in range(64):  # far more than the kernel buffers hold
                client.oneway(RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "t"}, big))
        thread.join()
    # The client's own timeout ended the send, not the test's deadline (its TimeoutError is an OSError too).
    assert "still running" not in str(refused.value), refused.value
    client.close()


@pytest.fixture
def patient(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader thread stays parked 0.5 s (not 5 ms) after the last caller read its own answer, so a
    test's next request surely finds it parked however slowly the test's thread starts."""
    monkeypatch.setattr(client_module, "_PARK", 0.5)


def _until_the_reader_parks(client: RemotingClient, peer: Peer) -> None:
    """One sync request answered through the reader thread, which then leaves the socket to the next
    sync caller (it reads its own answer: `_Connection`)."""
    thread, _ = _in_thread(client.request, RemotingCommand.request(RequestCode.HEART_BEAT))
    peer.accept()
    peer.send(peer.receive().reply(ResponseCode.SUCCESS))
    thread.join()
    _parked(client)


def _parked(client: RemotingClient) -> None:
    # `parked` is set just after an answer is handed over.
    wait_until(lambda: client._conn.parked, "the reader to leave the socket")  # type: ignore[union-attr]


@pytest.mark.usefixtures("patient")
def test_a_caller_reading_its_own_answer_passes_on_what_else_arrives(peer: Peer) -> None:
    client = RemotingClient(peer.address, timeout=5)
    notified: list[str] = []
    async_threads: list[str] = []
    got_async = threading.Event()

    def on_notify(cmd: RemotingCommand) -> RemotingCommand | None:
        notified.append(cmd.ext_fields["consumerGroup"])
        return cmd.reply(ResponseCode.SUCCESS)

    def callback(response: RemotingCommand | None, error: BaseException | None) -> None:
        async_threads.append(threading.current_thread().name)
        got_async.set()

    client.register_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    with deadline(10):
        _until_the_reader_parks(client, peer)
        leader, box = _in_thread(client.request, RemotingCommand.request(RequestCode.GET_MAX_OFFSET))
        own = peer.receive()  # sent: its caller now reads the socket
        client.request_async(RemotingCommand.request(RequestCode.PULL_MESSAGE), 5, callback)
        other = peer.receive()
        first = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "while-leading"})
        peer.send(first)
        assert peer.receive().opaque == first.opaque  # the server's request went to its handler
        peer.send(other.reply(ResponseCode.PULL_NOT_FOUND))
        assert got_async.wait(5)
        peer.send(own.reply(ResponseCode.SUCCESS, {"offset": "7"}))
        leader.join()
        # Nobody sends now: the reader thread has the socket again and answers the server at once.
        second = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "idle"})
        peer.send(second)
        assert peer.receive().opaque == second.opaque
    assert box["value"].ext_fields == {"offset": "7"}
    assert async_threads == ["test-caller"]  # read by the waiting caller itself, not the reader thread
    assert notified == ["while-leading", "idle"]
    client.close()
    assert _remote_threads() == []


@pytest.mark.usefixtures("patient")
def test_a_caller_reading_its_own_answer_times_out_and_fails_at_once_on_a_drop(peer: Peer) -> None:
    client = RemotingClient(peer.address, timeout=60)
    with deadline(10):
        _until_the_reader_parks(client, peer)
        thread, box = _in_thread(client.request, RemotingCommand.request(RequestCode.HEART_BEAT), 0.2)
        late = peer.receive()
        thread.join()
        assert "within 0.2 s" in str(box["error"])
        peer.send(late.reply(ResponseCode.SUCCESS))  # dropped by whoever reads next
        thread, box = _in_thread(client.request, RemotingCommand.request(RequestCode.HEART_BEAT))
        peer.send(peer.receive().reply(ResponseCode.SUCCESS, {"n": "2"}))
        thread.join()
        assert box["value"].ext_fields == {"n": "2"}
        _parked(client)
        thread, box = _in_thread(client.request, RemotingCommand.request(RequestCode.HEART_BEAT))
        peer.receive()
        peer.hang_up()
        thread.join()  # the timeout is 60 s: only the drop ends it
    assert isinstance(box["error"], RemotingError) and "closed the connection" in str(box["error"])
    client.close()
    assert _remote_threads() == []


def test_a_connection_whose_descriptor_is_past_1024_works(peer: Peer) -> None:
    # select() refuses descriptors >= FD_SETSIZE (1024); a process holding a store and many sockets gets there.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1100:
        if hard != resource.RLIM_INFINITY and hard < 1100:
            pytest.skip(f"the hard limit on open files ({hard}) is below 1100")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1100, hard))
    fillers: list[int] = []
    try:
        base = os.open(os.devnull, os.O_RDONLY)
        fillers.append(base)
        while fillers[-1] < 1030:
            fillers.append(os.dup(base))
        client = RemotingClient(peer.address, timeout=5)
        with deadline(10):
            for n in range(2):  # through the reader thread, then by a caller reading its own answer
                # 4 s < the client's 5: a caller reading its own answer waits for readiness before recv
                thread, box = _in_thread(client.request, RemotingCommand.request(RequestCode.HEART_BEAT), 4)
                if n == 0:
                    peer.accept()
                peer.send(peer.receive().reply(ResponseCode.SUCCESS, {"n": str(n)}))
                thread.join()
                assert box.get("value") is not None, box
                assert box["value"].ext_fields == {"n": str(n)}
        assert client._conn is not None and client._conn.sock.fileno() >= 1024
        client.close()
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
