"""One connection to a RocketMQ remoting server: RocketMQ's `NettyRemotingClient`, in threads.

A `RemotingClient` talks to one address (mqlite's server answers the name
server's and the broker's requests on one port, so one connection serves a
`RemoteBroker`). What it does, as RocketMQ's client does:

- `request(cmd, timeout)` sends a frame and waits for the response with the same
  `opaque` (`invokeSync`); `request_async` calls back instead (`invokeAsync`);
  `oneway(cmd)` sends and forgets (`invokeOneway`).
- Requests the server sends the other way (`NOTIFY_CONSUMER_IDS_CHANGED`,
  `CHECK_TRANSACTION_STATE`, ...) go to handlers registered per request code
  (`ClientRemotingProcessor`), run off the I/O thread, and their responses go
  back on the same connection.
- When the connection drops, every request waiting on it fails at once with
  `RemotingError` (nothing waits for its timeout); the next request connects
  again (`createChannel` on demand), and `on_reconnect` callbacks run then, so a
  `RemoteBroker` heartbeats its members to a restarted server at once.
- With `access_key`/`secret_key`, every request carries RocketMQ ACL's
  `AccessKey` and `Signature` ext fields (`AclClientRPCHook`).

Threads: per live connection one reader, `mqlite-remote-io` (blocks in
its selector (epoll or poll), decodes frames, completes waiters, times out async requests about
once a second, RocketMQ's `scanResponseTable`), and one handler thread
`mqlite-remote-callback` for the server's requests. Writers send from their own
thread under a lock (no hand-off on the send path); a sync caller with nothing
else waiting on the connection reads its own answer too (no hand-off on the
answer's path either; `_Connection` tells how the socket passes between it and
the reader). `close()` joins both threads. Callbacks of `request_async` run on
the thread that reads their answer and must not block or send.
"""

from __future__ import annotations

import concurrent.futures
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from .._service import close_at_exit, forget_at_exit
from ..config import check_seconds
from ..errors import IllegalStateError, MQClientError, ProtocolError, RemotingError
from .acl import ACCESS_KEY, SIGNATURE, sign
from .address import parse_address
from .codes import ONEWAY_FLAG, ResponseCode
from .frames import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, RemotingCommand, encode_frame

__all__ = ["RemotingClient", "parse_address", "Handler", "AsyncCallback"]

log = logging.getLogger("mqlite.remoting")

#: A server-initiated request's handler: the response to send back, or None (nothing to answer).
Handler = Callable[[RemotingCommand], "RemotingCommand | None"]
#: `request_async`'s callback: (response, None) or (None, the error).
AsyncCallback = Callable[["RemotingCommand | None", "BaseException | None"], None]

#: How often the reader looks for async requests past their deadline (`scanResponseTable`: 1 s).
_SCAN_INTERVAL = 1.0
#: At most this much a recv. Not more: CPython allocates the whole size for each call (256 KiB took 13 us
#: more a call than 64 KiB, measured on a loopback socket pair), and a bigger frame just takes a few reads.
_RECV_SIZE = 1 << 16
#: How long the reader thread leaves the socket to callers reading their own answers after the last one did.
_PARK = 0.005
#: How late past its deadline a caller reading its own answer may notice the deadline passed.
_RECV_SLACK = 0.01


class _Pending:
    """A request waiting for its response: a sync caller blocks on `latch`, an async one has `callback`."""

    __slots__ = ("latch", "callback", "deadline", "response", "error")

    def __init__(self, callback: AsyncCallback | None, deadline: float) -> None:
        self.callback = callback
        self.deadline = deadline
        self.response: RemotingCommand | None = None
        self.error: BaseException | None = None
        self.latch: Any = None
        if callback is None:
            # A pre-acquired lock is CPython's cheapest cross-thread hand-off (Event adds a Condition).
            self.latch = threading.Lock()
            self.latch.acquire()

    def complete(self, response: RemotingCommand | None, error: BaseException | None) -> None:
        self.response, self.error = response, error
        if self.callback is None:
            self.latch.release()
            return
        try:
            self.callback(response, error)
        except Exception:
            log.exception("remoting: an async request's callback failed")


def _readable(sock: socket.socket, timeout: float) -> bool:
    """Whether `sock` has bytes (or EOF) to read within `timeout` s; any descriptor number (not select())."""
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        return bool(selector.select(timeout))


class _Connection:
    """One socket and what waits on it; dies once (the client then makes a new one).

    Who reads the socket (leader/follower): normally the reader thread. Handing
    an answer from it to the thread that waits costs a second thread wake-up per
    round trip, most of a loopback round trip's client time. So once the reader
    has handed a sync caller its answer and nothing else waits, it parks, and the
    next sync request made while nothing else waits is read by its own caller
    (`_lead`): it reads and dispatches whatever comes (other answers, the
    server's requests) until its own answer arrives. A request made meanwhile
    waits as usual and the leader, leaving, gives the socket back to the reader
    thread at once. A parked reader takes the socket back by itself once no
    caller has led for `_PARK` s, so the server's requests are still answered
    within about 2 x `_PARK` when nobody sends. Exactly one of the reader thread
    (not `parked`) and a leader (`leading`) reads at a time; `state` guards both.
    """

    def __init__(self, client: RemotingClient, sock: socket.socket) -> None:
        self.client = client
        self.sock = sock
        self.write_lock = threading.Lock()
        self.pending: dict[int, _Pending] = {}
        self.alive = True
        self.decoder = FrameDecoder(client.max_frame_size)
        self.state = threading.Condition(threading.Lock())
        self.parked = False  # the reader thread leaves the socket to callers
        self.leading = False  # a caller reads the socket for its own answer
        self.led_at = 0.0  # when the last leader left
        self.thread = threading.Thread(target=self._read_loop, name="mqlite-remote-io")

    def send(self, frame: bytes) -> None:
        try:
            with self.write_lock:
                self.sock.sendall(frame)
        except OSError as exc:
            self.fail(f"sending to {self.client.address} failed ({exc})")
            raise RemotingError(f"sending to {self.client.address} failed ({exc}); the connection is closed, "
                                "the next request connects again") from None

    def fail(self, why: str) -> None:
        """The connection is gone: close it, and fail everything that waits on it."""
        with self.write_lock:
            if not self.alive:
                return
            self.alive = False
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # a leader's or the reader's recv returns at once
        except OSError:
            pass
        with self.state:
            pending, self.pending = self.pending, {}
            self.parked = False
            self.state.notify_all()
        # Whoever reads (the reader thread or a caller) may still pop from the old table: each waiter is
        # completed once, by the one whose pop got it.
        for opaque, waiter in list(pending.items()):
            if pending.pop(opaque, None) is waiter:
                waiter.complete(None, RemotingError(f"{why}; the request's outcome is unknown"))

    # -- requests ---------------------------------------------------------------------------------------
    def call(self, opaque: int, frame: bytes, timeout: float) -> RemotingCommand | None:
        """Send a request's `frame` and wait for the answer with `opaque`: None when time runs out."""
        with self.state:
            lead = self.parked and not self.leading and not self.pending and self.alive
            if lead:
                self.leading = True
        if lead:
            try:
                self.send(frame)
                return self._lead(opaque, time.monotonic() + max(timeout, 0.0))
            finally:
                self._unlead()
        waiter = _Pending(None, 0.0)
        self.register(opaque, waiter)
        self.send(frame)
        if not waiter.latch.acquire(timeout=max(timeout, 0.0)):
            self.pending.pop(opaque, None)
            if waiter.latch.acquire(blocking=False) and waiter.response is not None:
                return waiter.response  # it arrived while giving up
            return None
        if waiter.error is not None:
            raise waiter.error
        return waiter.response

    def register(self, opaque: int, waiter: _Pending) -> None:
        """Wait for the answer with `opaque` (before the request is sent); a parked reader resumes."""
        with self.state:
            self.pending[opaque] = waiter
            if self.parked and not self.leading:
                self.parked = False
                self.state.notify()
        if not self.alive:  # it died before the request went out: fail now rather than wait
            self.pending.pop(opaque, None)
            raise RemotingError(f"the connection to {self.client.address} closed; retry the request")

    def _lead(self, opaque: int, deadline: float) -> RemotingCommand | None:
        """Read the socket until the answer with `opaque` arrives (None: the deadline passed)."""
        sock = self.sock
        # recv waits up to the socket's own timeout; a readiness wait first (one more system call) only when the
        # request's deadline comes sooner than that (by more than _RECV_SLACK).
        patience = self.client.timeout - _RECV_SLACK
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                if remaining < patience and not _readable(sock, remaining):
                    continue
                data = sock.recv(_RECV_SIZE)
            except TimeoutError:
                continue
            except (OSError, ValueError) as exc:
                self._broken(f"the connection to {self.client.address} broke ({exc})")
            if not data:
                self._broken(f"the server at {self.client.address} closed the connection")
            try:
                commands = self.decoder.feed(data)
            except ProtocolError as exc:
                self._broken(f"the server at {self.client.address} sent a malformed frame ({exc})")
            mine = None
            for cmd in commands:
                if cmd.opaque == opaque and cmd.is_response:
                    mine = cmd
                else:
                    self._dispatch(cmd)
            if mine is not None:
                return mine

    def _broken(self, why: str) -> NoReturn:
        self.fail(why)
        raise RemotingError(f"{why}; the request's outcome is unknown")

    def _unlead(self) -> None:
        with self.state:
            self.leading = False
            self.led_at = time.monotonic()
            if self.pending or not self.alive:  # others wait: the reader thread reads for them
                self.parked = False
                self.state.notify_all()

    # -- the reader thread ------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        sock = self.sock
        next_scan = time.monotonic() + _SCAN_INTERVAL
        # epoll/poll, registered once: select() refuses descriptors >= FD_SETSIZE (1024), which a process
        # holding a store and many sockets soon reaches.
        selector = selectors.DefaultSelector()
        try:
            selector.register(sock, selectors.EVENT_READ)
            while self.alive:
                if self.parked:
                    next_scan = self._park(next_scan)
                    continue
                if selector.select(_SCAN_INTERVAL):
                    data = sock.recv(_RECV_SIZE)
                    if not data:
                        self.fail(f"the server at {self.client.address} closed the connection")
                        break
                    handed = False
                    for cmd in self.decoder.feed(data):
                        handed = self._dispatch(cmd) or handed
                    if handed:
                        with self.state:
                            # A sync caller got its answer and nothing else waits: it will likely send
                            # again, and then read its own answer.
                            self.parked = not self.pending and self.alive
                now = time.monotonic()
                if now >= next_scan:
                    self._expire(now)
                    next_scan = now + _SCAN_INTERVAL
        except (OSError, ValueError) as exc:  # ValueError: registering a socket closed meanwhile
            self.fail(f"the connection to {self.client.address} broke ({exc})")
        except ProtocolError as exc:
            self.fail(f"the server at {self.client.address} sent a malformed frame ({exc})")
        finally:
            self.fail(f"the connection to {self.client.address} is closed")
            with self.state:
                self.state.wait_for(lambda: not self.leading, 1.0)  # it stops reading as the socket is shut
            selector.close()
            try:
                sock.close()
            except OSError:
                pass

    def _park(self, next_scan: float) -> float:
        """Wait while callers read their own answers; take the socket back once none has for `_PARK` s."""
        with self.state:
            if self.parked and self.alive:
                self.state.wait(_PARK)
            if self.parked and not self.leading and time.monotonic() - self.led_at >= _PARK:
                self.parked = False
        now = time.monotonic()
        if now >= next_scan:  # async requests made while a caller leads still time out
            self._expire(now)
            return now + _SCAN_INTERVAL
        return next_scan

    def _dispatch(self, cmd: RemotingCommand) -> bool:
        """Hand `cmd` to whoever waits for it; True when that was a sync caller."""
        if cmd.is_response:
            waiter = self.pending.pop(cmd.opaque, None)
            if waiter is not None:
                waiter.complete(cmd, None)
                return waiter.callback is None
            # else: a response after its request timed out (RocketMQ logs and drops it too)
            return False
        self.client.handle_request(self, cmd)
        return False

    def _expire(self, now: float) -> None:
        expired = [(opaque, w) for opaque, w in list(self.pending.items())
                   if w.callback is not None and w.deadline <= now]
        for opaque, waiter in expired:
            if self.pending.pop(opaque, None) is waiter:
                waiter.complete(None, RemotingError(f"no response from {self.client.address} in time"))


class RemotingClient:
    """A thread-safe connection to the remoting server at `address` ("host:port").

    `timeout` is the default for requests and for connecting. Connecting is
    lazy (the first request) and repeated after the connection drops.
    """

    def __init__(self, address: str, *, timeout: float = 3.0, access_key: str | None = None,
                 secret_key: str | None = None, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.host, self.port = parse_address(address)
        self.address = address
        self.timeout = check_seconds("timeout", timeout)
        if (access_key is None) != (secret_key is None):
            raise MQClientError("give access_key and secret_key together (RocketMQ ACL signs requests with both), "
                                "or neither")
        self._access_key = access_key
        self._secret_key = secret_key
        self.max_frame_size = max_frame_size
        self._handlers: dict[int, Handler] = {}
        self._on_reconnect: list[Callable[[], None]] = []
        self._lock = threading.Lock()  # guards _conn, _closed and the thread lists
        self._conn: _Connection | None = None
        self._dead: list[_Connection] = []  # readers that ended, joined on the next connect or close
        self._connects = 0
        self._closed = False
        self._callbacks = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mqlite-remote-callback")
        close_at_exit(self)  # its threads are not daemons: one the program forgets is closed at exit

    # -- set-up ------------------------------------------------------------------------------------------
    def register_handler(self, code: int, handler: Handler) -> None:
        """Answer the server's requests of `code` with `handler` (run on `mqlite-remote-callback`)."""
        self._handlers[int(code)] = handler

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        """Call `callback` (on the callback thread) after each connect but the first."""
        self._on_reconnect.append(callback)

    @property
    def closed(self) -> bool:
        """True after `close()`."""
        return self._closed

    @property
    def connected(self) -> bool:
        """True while a connection is up."""
        conn = self._conn
        return conn is not None and conn.alive

    # -- requests ------------------------------------------------------------------------------------------
    def request(self, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send `cmd` and wait for its response; `RemotingError` when the connection fails or time runs out.

        Blocks up to `timeout` seconds (the client's default when None). When
        nothing else waits on the connection, the calling thread reads the answer
        itself (see `_Connection`).
        """
        timeout = self.timeout if timeout is None else timeout
        conn = self._connection(timeout)
        # RemotingCommand.request numbered it (unique in the process).
        response = conn.call(cmd.opaque, encode_frame(self._signed(cmd)), timeout)
        if response is None:
            raise RemotingError(f"no response from {self.address} within {timeout:g} s "
                                f"(request code {cmd.code}); the server may be overloaded or stopped")
        return response

    def request_async(self, cmd: RemotingCommand, timeout: float, callback: AsyncCallback) -> None:
        """Send `cmd`; `callback(response, None)` or `callback(None, error)` runs once, on the thread
        that reads the answer (the I/O thread, or a caller reading its own answer meanwhile).

        The callback must be quick and must not send requests itself. Raises
        `RemotingError` at once when the request cannot be sent.
        """
        conn = self._connection(self.timeout)
        frame = encode_frame(self._signed(cmd))
        conn.register(cmd.opaque, _Pending(callback, time.monotonic() + timeout))
        conn.send(frame)

    def oneway(self, cmd: RemotingCommand) -> None:
        """Send `cmd` flagged oneway; no response comes. `RemotingError` when it cannot be sent."""
        conn = self._connection(self.timeout)
        cmd.flag |= ONEWAY_FLAG
        conn.send(encode_frame(self._signed(cmd)))

    def _signed(self, cmd: RemotingCommand) -> RemotingCommand:
        if self._access_key is not None and self._secret_key is not None:
            fields = cmd.ext_fields
            fields[ACCESS_KEY] = self._access_key
            fields[SIGNATURE] = sign(fields, cmd.body, self._secret_key)  # sign() leaves Signature out
        return cmd

    # -- the connection ---------------------------------------------------------------------------------
    def _connection(self, timeout: float) -> _Connection:
        conn = self._conn
        if conn is not None and conn.alive:
            return conn
        with self._lock:
            if self._closed:
                raise IllegalStateError(f"the connection to {self.address} is closed")
            conn = self._conn
            if conn is not None and conn.alive:
                return conn
            if conn is not None:
                self._dead.append(conn)
            self._reap()
            try:
                sock = socket.create_connection((self.host, self.port), timeout=max(timeout, 0.05))
            except OSError as exc:
                raise RemotingError(f"cannot connect to {self.address} ({exc}); is `mqlite serve` (or "
                                    "broker.serve()) running there?") from None
            # A send that cannot go out within the timeout (a server that stopped reading) fails instead of
            # blocking for ever; the reader is unaffected: it only receives what its selector found ready.
            sock.settimeout(self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(self, sock)
            conn.thread.start()
            self._conn = conn
            self._connects += 1
            again = self._connects > 1
        if again:
            for callback in self._on_reconnect:
                self._callbacks.submit(_logged, callback)
        return conn

    def _reap(self) -> None:
        """Join readers of dead connections (caller holds `_lock`; they end once their socket is shut)."""
        for conn in self._dead:
            if conn.thread is not threading.current_thread():
                conn.thread.join()
        self._dead = [c for c in self._dead if c.thread.is_alive()]

    def drop_connection(self) -> None:
        """Close the current connection (tests; pending requests fail); the next request reconnects."""
        conn = self._conn
        if conn is not None:
            conn.fail(f"the connection to {self.address} was dropped")

    # -- the server's requests -----------------------------------------------------------------------------
    def handle_request(self, conn: _Connection, cmd: RemotingCommand) -> None:
        """Answer a request the server sent on `conn` (a check-back, a notification) on the callback executor."""
        try:
            self._callbacks.submit(self._answer, conn, cmd)
        except RuntimeError:  # closing: the executor refuses work
            pass

    def _answer(self, conn: _Connection, cmd: RemotingCommand) -> None:
        handler = self._handlers.get(cmd.code)
        try:
            if handler is None:
                response: RemotingCommand | None = cmd.reply(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f"request code {cmd.code} is not supported by this client")
            else:
                response = handler(cmd)
        except Exception as exc:
            log.exception("remoting: handling the server's request %s failed", cmd.code)
            response = cmd.reply(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        if response is None or cmd.is_oneway or not conn.alive:
            return
        response.opaque = cmd.opaque
        try:
            conn.send(encode_frame(response))
        except RemotingError:
            pass  # the connection died; the server forgets the request with it

    # -- closing -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (waiting requests fail with `RemotingError`) and join the threads. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                self._dead.append(conn)
        forget_at_exit(self)
        if conn is not None:
            conn.fail(f"the connection to {self.address} was closed")
        # A handler closing its own client cannot wait for itself.
        self._callbacks.shutdown(wait=not threading.current_thread().name.startswith("mqlite-remote-callback"))
        with self._lock:
            self._reap()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self.connected else "not connected")
        return f"<RemotingClient {self.address} {state}>"


def _logged(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.exception("remoting: a reconnect callback failed")
