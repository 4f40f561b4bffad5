"""`Server`: a broker served over RocketMQ's remoting protocol (`Broker.serve`, `mqlite serve`).

Threads (DESIGN.md, "Serving"): one event loop thread, `mqlite-remoting`, owns the listening socket
and every connection, decodes frames and runs the handlers that do not block; handlers that may
block (a put waiting for SYNC_FLUSH's group commit, an admin call writing files, a request that
turns out to create a topic) run on a bounded executor (`mqlite-remoting-exec_N`, at most
`executor_queue` requests waiting, then SYSTEM_BUSY); a long-polling pull parks on the arrival hub
as a pending response on the loop, not on a thread. `close()` stops reading, stops accepting,
answers parked pulls, refuses what was read but not started, waits for in-flight requests, closes
the connections (their consumers leave their groups), then joins both.

One bad peer never harms another: a malformed, truncated or oversized frame closes that connection
only; a connection's requests are started only while it has fewer than `MAX_IN_FLIGHT` at work and
reads its answers (it is not read meanwhile), so a flood from one client queues behind itself, not
in front of everyone; parked pulls are capped per connection (`MAX_PARKED`) and per server
(`max_parked`) and end with their connection.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import fcntl
import hmac
import ipaddress
import logging
import socket
import struct
import termios
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import (
    ConfigError,
    IllegalStateError,
    MQLiteError,
    ProtocolError,
    RemotingError,
)
from . import admin, clients, nameserver, offsets, pull, send  # noqa: F401 - importing registers their handlers
from .clients import ClientRegistry
from .handlers import HANDLERS, Mode, NeedsExecutor, Peer, Request, RequestError
from .address import parse_address
from .acl import ACCESS_KEY, SIGNATURE, sign
from .codes import ResponseCode
from .faults import refusal
from .frames import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, RemotingCommand, encode_frame
from .registry import clear_address, record_address

if TYPE_CHECKING:
    from ..broker import Broker
    from .handlers import ParkedWaker

__all__ = ["Server", "MAX_IN_FLIGHT", "MAX_PARKED", "MAX_PARKED_TOTAL", "MAX_EXECUTOR_QUEUE", "CHANNEL_EXPIRED_TIMEOUT"]

log = logging.getLogger("mqlite.remoting")

#: Requests of one connection the executor may hold at once; reading from it pauses beyond that.
MAX_IN_FLIGHT = 64
#: Parked pulls one connection may have (a push consumer parks one per queue it owns); past it a pull
#: that finds nothing answers PULL_NOT_FOUND at once, as RocketMQ's does with long polling off.
MAX_PARKED = 4096
#: Parked pulls of all connections together (the `max_parked` option), with the same answer past it.
MAX_PARKED_TOTAL = 65_536
#: `ClientHousekeepingService`'s channel expiry: a connection silent this long is closed (seconds).
CHANNEL_EXPIRED_TIMEOUT = 120.0
#: Requests waiting for or running on the executor, all connections together: past it a request is
#: answered SYSTEM_BUSY at once (RocketMQ's `sendThreadPoolQueueCapacity`, its fast failure).
MAX_EXECUTOR_QUEUE = 10_000
_BUSY = "[OVERLOAD]system busy, start flow control for a while"
_WRITE_HIGH_WATER = 4 * 1024 * 1024  # stop reading a client's requests while this much waits to be sent to it
_CLOSE_GRACE = 10.0  # seconds close() waits for in-flight requests and for connections to flush


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _primary_ipv4() -> str:
    """This machine's outward IPv4 address (a UDP socket's choice of source; nothing is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: routed like any address, never answered
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def _check_acl(acl: object) -> dict[str, str] | None:
    if acl is None:
        return None
    if not isinstance(acl, Mapping) or not acl or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in acl.items()):
        raise ConfigError("acl must be a non-empty {access_key: secret_key} dict of non-empty strings")
    return dict(acl)


class _Connection(asyncio.Protocol):
    """One client connection: frames in, responses and broker-to-client requests out.

    Decoded requests wait in `queue` and are dispatched only while the connection has fewer than
    `MAX_IN_FLIGHT` requests being worked on and its client is reading its answers; reading pauses
    while any wait. So a client pipelining hundreds of pulls gets them answered at the pace it
    reads, and one read of the socket never starts more work than that bound.
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.decoder = FrameDecoder(server.max_frame_size)
        self.transport: asyncio.Transport | None = None
        self.remote_address = "0.0.0.0:0"  # (an address, as a record's born host needs one)
        self.local_address = server.address
        self.last_seen = time.monotonic()
        self.queue: collections.deque[RemotingCommand] = collections.deque()
        self.active = 0  # requests on the executor or running coroutines, not counting parked pulls
        self.parked = 0
        self.tasks: set[asyncio.Future[Any]] = set()  # its coroutines (pulls): cancelled when it closes
        self._write_paused = False
        self._read_paused = False
        self._stopped = False  # close() stopped reading it
        self._draining = False  # close() sent everything and its FIN: what arrives now is read and dropped
        self._batch: list[bytes] | None = None  # answers collected while requests are dispatched: one write
        self._batched = 0

    # -- asyncio callbacks (loop thread) ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        peer, local = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        if peer:
            self.remote_address = f"{peer[0]}:{peer[1]}" if ":" not in peer[0] else f"[{peer[0]}]:{peer[1]}"
        if local and local[0] not in ("0.0.0.0", "::"):
            self.local_address = f"{local[0]}:{local[1]}" if ":" not in local[0] else f"[{local[0]}]:{local[1]}"
        self.server.connection_opened(self)

    def data_received(self, data: bytes) -> None:
        if self._draining:
            return  # requests sent after close() began: read only so the close is not a reset (see `drain`)
        self.last_seen = time.monotonic()
        try:
            commands = self.decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing the connection from %s: %s", self.remote_address, exc)
            self.abort()
            return
        # The broker's own requests to clients are oneway: a response has nothing to match.
        self.queue.extend(cmd for cmd in commands if not cmd.is_response)
        self._pump()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connection_closed(self)
        self.transport = None
        self.queue.clear()
        for task in list(self.tasks):
            task.cancel()  # a parked pull's `finally` stops watching the queue: nobody is there to answer
        self.server.clients.drop_peer(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._pump()

    # -- dispatch ------------------------------------------------------------------------------------------------
    def _may_dispatch(self) -> bool:
        transport = self.transport
        return (transport is not None and not transport.is_closing() and self.active < MAX_IN_FLIGHT
                and not self._write_paused and self._batched < _WRITE_HIGH_WATER)

    def _pump(self) -> None:
        """Dispatch queued requests while the bounds allow; answers of one pass go out in one write."""
        while self.queue and self._may_dispatch():
            batch: list[bytes] = []
            self._batch, self._batched = batch, 0
            try:
                while self.queue and self._may_dispatch():
                    self.server.dispatch(self, self.queue.popleft())
            finally:
                self._batch, self._batched = None, 0
                if batch:
                    self._write(b"".join(batch))
        self._update_reading()

    # -- used by handlers ------------------------------------------------------------------------------------------
    def touch(self) -> None:
        """A heartbeat arrived (every frame counts as a sign of life already)."""
        self.last_seen = time.monotonic()

    def send(self, cmd: RemotingCommand) -> None:
        """Write the answer `cmd` (loop thread)."""
        frame = encode_frame(cmd)
        if self._batch is not None:
            self._batch.append(frame)
            self._batched += len(frame)
        else:
            self._write(frame)

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def _send_request(self, cmd: RemotingCommand) -> None:
        """Write a broker-to-client request. Answers are bounded by the dispatch rule; these are not (the
        broker notifies whenever a group changes), so a client that lets them pile up unread is dropped."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(encode_frame(cmd))
        if transport.get_write_buffer_size() > self.server.max_frame_size + 16 * _WRITE_HIGH_WATER:
            log.warning("dropping the connection from %s: it does not read what it is sent", self.remote_address)
            self.abort()

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send a broker-to-client request from any thread (the broker calls members back from its own threads)."""
        self.server.call_on_loop(self._send_request, cmd)

    def abort(self) -> None:
        """Close at once, dropping unsent bytes."""
        if self.transport is not None:
            self.transport.abort()

    def stop_reading(self) -> None:
        """`close()` began: read nothing more from this client."""
        self._stopped = True
        self._update_reading()

    def drain(self) -> None:
        """`close()` answered everything: send the answers and a FIN, then read and drop what comes.

        A socket closed with unread bytes in its receive buffer resets the connection, and the reset
        discards what its send buffer still holds: answers to requests already stored, whose client would
        then send them again. So the server half-closes first and closes once the client has acknowledged
        every byte sent to it (`drained`; a reset then loses nothing it was sent), or when the client closes.
        """
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not transport.can_write_eof():
            transport.close()
            return
        self._draining = True
        transport.write_eof()  # after what is buffered
        self._stopped = False
        self._read_paused = False
        transport.resume_reading()

    def drained(self) -> bool:
        """True when everything written to the client has reached it (the kernel holds nothing unacknowledged)."""
        transport = self.transport
        if transport is None:
            return True
        if transport.get_write_buffer_size():
            return False
        sock = transport.get_extra_info("socket")
        if sock is None:
            return True
        try:  # SIOCOUTQ: bytes sent but not yet acknowledged, and not yet sent
            unacknowledged = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
        except OSError:
            return True  # the socket is gone
        return unacknowledged == 0

    def started(self) -> None:
        """A request went to the executor (or became a coroutine on the loop)."""
        self.active += 1

    def finished(self) -> None:
        """A request from `started` was answered: dispatch what waits."""
        self.active -= 1
        self._pump()

    def park(self) -> bool:
        """A pull of this connection wants to park: False when it has `MAX_PARKED` parked already."""
        if self.parked >= MAX_PARKED:
            return False
        self.parked += 1
        self.active -= 1  # a parked pull costs no work: it leaves room for the next request
        self._pump()
        return True

    def unpark(self) -> None:
        """A pull from `park` woke (it answers next)."""
        self.parked -= 1
        self.active += 1

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        pause = not self._draining and (self._stopped or self._write_paused or bool(self.queue))
        if pause != self._read_paused:
            self._read_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()


class Server:
    """A broker served over RocketMQ's remoting protocol. Build it with `Broker.serve`.

    `address` is where it listens (`host:port`). `close()` stops it (idempotent; `Broker.close()`
    calls it first). Thread-safe; never call `close()` from a handler.
    """

    def __init__(self, broker: Broker, address: str = "127.0.0.1:0", *, acl: Mapping[str, str] | None = None,
                 allow_anonymous: bool = False, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 channel_expired_timeout: float = CHANNEL_EXPIRED_TIMEOUT, executor_threads: int = 8,
                 executor_queue: int = MAX_EXECUTOR_QUEUE, max_parked: int = MAX_PARKED_TOTAL) -> None:
        host, port = parse_address(address, allow_port_0=True)
        self._acl = _check_acl(acl)
        if not isinstance(allow_anonymous, bool):
            raise ConfigError(f"allow_anonymous must be a bool, got {allow_anonymous!r}")
        if not _is_loopback(host) and self._acl is None and not allow_anonymous:
            raise ConfigError(f"serving on {address} would let anyone who reaches it read and write the store: "
                              "pass acl={access_key: secret_key}, or allow_anonymous=True if the network is trusted "
                              "(the default, 127.0.0.1, is reachable from this machine only)")
        if not isinstance(max_frame_size, int) or isinstance(max_frame_size, bool) or max_frame_size < 1024:
            raise ConfigError(f"max_frame_size must be an int >= 1024 (bytes), got {max_frame_size!r}")
        if not isinstance(channel_expired_timeout, (int, float)) or not channel_expired_timeout > 0:
            raise ConfigError(f"channel_expired_timeout must be seconds > 0, got {channel_expired_timeout!r}")
        if not isinstance(executor_threads, int) or not 1 <= executor_threads <= 256:
            raise ConfigError(f"executor_threads must be an int in 1..256, got {executor_threads!r}")
        if not isinstance(executor_queue, int) or isinstance(executor_queue, bool) or executor_queue < 1:
            raise ConfigError(f"executor_queue must be an int >= 1 (requests), got {executor_queue!r}")
        if not isinstance(max_parked, int) or isinstance(max_parked, bool) or max_parked < 0:
            raise ConfigError(f"max_parked must be an int >= 0 (pulls; 0 turns long polling off), got {max_parked!r}")
        self._max_parked = max_parked
        self._broker = broker
        self.max_frame_size = max_frame_size
        self.channel_expired_timeout = float(channel_expired_timeout)
        self.clients = ClientRegistry(broker)
        self._put_inline = not broker.config.sync_flush
        self._connections: set[_Connection] = set()
        self._pending: set[asyncio.Future[Any]] = set()
        self._parked: set[ParkedWaker] = set()
        self._closing = False
        self._closed = False
        self._close_lock = threading.Lock()
        # The stdlib pool names its threads mqlite-remoting-exec_0 ... _N-1 and joins them on shutdown.
        self._executor = concurrent.futures.ThreadPoolExecutor(executor_threads, "mqlite-remoting-exec")
        self._executor_queue = executor_queue
        self._queued = 0  # requests on the executor (loop thread only)
        self._loop = asyncio.new_event_loop()
        self._loop_thread_id = -1
        self._listener: asyncio.AbstractServer | None = None
        self._housekeeping: asyncio.Task[None] | None = None
        self._address = ""
        self._thread = threading.Thread(target=self._run, name="mqlite-remoting")
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(host, port), self._loop).result()
        except BaseException as exc:
            self._stop_loop()
            self._executor.shutdown()
            if isinstance(exc, OSError):
                raise RemotingError(f"cannot listen on {address}: {exc.strerror or exc}; pick another address or "
                                    "port (port 0 picks a free one), or stop what listens there") from exc
            raise
        self._registered = broker.path if not broker.read_only else None
        self._store_host = self._advertised_ipv4() if not broker.read_only else None
        if self._store_host is not None:
            broker.set_store_host(self._store_host)  # clients send send-backs to the host in the records
        if self._registered is not None:
            record_address(self._registered, self._recorded_address())
        log.info("serving %s on %s", broker.path, self._address)

    # -- lifecycle -----------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        self._loop_thread_id = threading.get_ident()
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _start(self, host: str, port: int) -> None:
        self._listener = await self._loop.create_server(lambda: _Connection(self), host, port, reuse_address=True)
        sockets = self._listener.sockets
        bound = sockets[0].getsockname()
        shown = host if host != "localhost" else bound[0]
        self._address = f"[{shown}]:{bound[1]}" if ":" in shown else f"{shown}:{bound[1]}"
        for sock in sockets:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self._housekeeping = self._loop.create_task(self._expire_silent())

    def _recorded_address(self) -> str:
        """What other processes on this machine should connect to (loopback for a wildcard bind)."""
        host, port = parse_address(self._address, allow_port_0=True)
        return f"127.0.0.1:{port}" if host in ("0.0.0.0", "::") else self._address

    def _advertised_ipv4(self) -> str | None:
        """`ip:port` to write into records as their store host (RocketMQ's `brokerIP1:listenPort`): the bound
        IPv4 address, this machine's for a wildcard bind; None for IPv6 (a record's host is 4 bytes here)."""
        host, port = parse_address(self._address, allow_port_0=True)
        if host == "0.0.0.0":
            host = _primary_ipv4()
        try:
            socket.inet_pton(socket.AF_INET, host)
        except OSError:
            return None
        return f"{host}:{port}"

    @property
    def address(self) -> str:
        """`host:port` this server listens on (the real port when 0 was asked)."""
        return self._address

    @property
    def broker(self) -> Broker:
        """The served broker."""
        return self._broker

    @property
    def store_host(self) -> str | None:
        """`ip:port` records stored while it serves name as their store host (None: a read-only broker, or
        an IPv6 address)."""
        return self._store_host

    @property
    def acl_enabled(self) -> bool:
        """True when requests must carry ACL signatures."""
        return self._acl is not None

    @property
    def closing(self) -> bool:
        """True once `close()` began."""
        return self._closing

    @property
    def closed(self) -> bool:
        """True after `close()`."""
        return self._closed

    def close(self) -> None:
        """Stop accepting, answer parked pulls, finish in-flight requests, close every connection (its
        consumers leave their groups) and join the threads. Idempotent; the broker stays open."""
        with self._close_lock:
            if self._closed:
                return
            if threading.get_ident() == self._loop_thread_id:
                raise IllegalStateError("Server.close() was called from a request handler; call it from another thread")
            self._closing = True
            try:
                if self._thread.is_alive():  # (a loop that died would never run the coroutine)
                    asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(_CLOSE_GRACE * 3)
            except concurrent.futures.TimeoutError:
                log.error("stopping the server on %s took over %.0f s; closing its loop anyway", self._address,
                          _CLOSE_GRACE * 3)
            finally:
                self._stop_loop()
                self._executor.shutdown()
                self.clients.drop_all()  # connections the loop stopped with never ran connection_lost
                if self._registered is not None:
                    clear_address(self._registered, self._recorded_address())
                if not self._broker.closed:
                    self._broker.forget_server(self)  # another server of this broker keeps its store host
                self._closed = True
        log.info("stopped serving %s on %s", self._broker.path, self._address)

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()

    async def _shutdown(self) -> None:
        for conn in list(self._connections):
            conn.stop_reading()  # what is read from now on would only be refused
        if self._listener is not None:
            self._listener.close()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        for waker in list(self._parked):
            waker.event.set()  # parked pulls answer with what they have
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=_CLOSE_GRACE)
        for conn in list(self._connections):
            conn.drain()  # the answers, then a FIN; what the client still sends is dropped
        deadline = time.monotonic() + _CLOSE_GRACE
        while self._connections and time.monotonic() < deadline:
            for conn in list(self._connections):
                if conn.drained():
                    conn.abort()  # the client has every answer: closing now loses nothing
            await asyncio.sleep(0.01)
        for conn in list(self._connections):
            conn.abort()
        await asyncio.sleep(0)  # let connection_lost run for the aborted ones

    async def _expire_silent(self) -> None:
        """`ClientHousekeepingService`: close connections silent for longer than the channel expiry, and
        drop consumers and producers whose last heartbeat is older than that (their connection may carry
        other traffic)."""
        period = min(10.0, self.channel_expired_timeout / 4)
        while True:
            await asyncio.sleep(period)
            limit = time.monotonic() - self.channel_expired_timeout
            for member in self.clients.expire_consumers(limit):
                log.info("dropping consumer %s of group %s: no heartbeat for over %.0f s", member.client_id,
                         member.group, self.channel_expired_timeout)
            for producer in self.clients.expire_producers(limit):
                log.info("dropping a producer of group %s: no heartbeat for over %.0f s", producer.group,
                         self.channel_expired_timeout)
            for conn in list(self._connections):
                if conn.last_seen < limit:
                    log.info("closing the connection from %s: silent for over %.0f s", conn.remote_address,
                             self.channel_expired_timeout)
                    conn.abort()

    # -- for handlers (ServerState) ------------------------------------------------------------------------------------
    def to_executor(self, fn: Callable[[], Any]) -> Awaitable[Any]:
        """Run `fn` on the bounded executor, awaited on the loop; `RequestError(SYSTEM_BUSY)` when
        `executor_queue` requests wait there already."""
        if self._queued >= self._executor_queue:
            raise RequestError(ResponseCode.SYSTEM_BUSY, _BUSY)
        future = asyncio.wrap_future(self._executor.submit(fn), loop=self._loop)
        self._queued += 1
        future.add_done_callback(self._dequeued)
        return future

    def _dequeued(self, future: asyncio.Future[Any]) -> None:
        self._queued -= 1

    def park(self, waker: ParkedWaker, peer: Peer) -> bool:
        """A pull wants to park: False (answer now) when its connection or the server holds its cap of
        parked pulls already; otherwise `close()` wakes it."""
        if self._closing or len(self._parked) >= self._max_parked or not isinstance(peer, _Connection) \
                or not peer.park():
            return False
        self._parked.add(waker)
        return True

    def unpark(self, waker: ParkedWaker, peer: Peer) -> None:
        """A parked pull (`park` said True) woke."""
        self._parked.discard(waker)
        if isinstance(peer, _Connection):
            peer.unpark()

    # -- for the connections (loop thread unless said otherwise) ---------------------------------------------------
    def connection_opened(self, conn: _Connection) -> None:
        """Count `conn` among the live connections (`close()` drains them)."""
        self._connections.add(conn)

    def connection_closed(self, conn: _Connection) -> None:
        """Forget `conn`: its transport is gone."""
        self._connections.discard(conn)

    def call_on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        """Run `fn(*args)` on the loop thread, from any thread: at once when called there, else scheduled.

        Nothing happens when the loop is already gone (closed): so are its connections.
        """
        if threading.get_ident() == self._loop_thread_id:
            fn(*args)
            return
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is gone: so is the connection

    # -- dispatch (loop thread) --------------------------------------------------------------------------------------
    def _refused(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """The answer to a request the ACL refuses, or None when it passes."""
        acl = self._acl
        if acl is None:
            return None
        access_key = cmd.ext_fields.get(ACCESS_KEY)
        if not access_key:
            return cmd.reply(ResponseCode.NO_PERMISSION, remark="No accessKey is configured")
        secret = acl.get(access_key)
        signature = cmd.ext_fields.get(SIGNATURE) or ""
        if secret is None:
            return cmd.reply(ResponseCode.NO_PERMISSION, remark=f"No acl config for {access_key}")
        if not hmac.compare_digest(sign(cmd.ext_fields, cmd.body, secret).encode(), signature.encode("utf-8", "replace")):
            return cmd.reply(ResponseCode.NO_PERMISSION, remark=f"Check signature failed for accessKey={access_key}")
        return None

    def dispatch(self, conn: _Connection, cmd: RemotingCommand) -> None:
        """Handle one decoded request of `conn` (loop thread): refused while closing or unsigned under ACL, else
        its handler runs on the loop or on the executor and its answer goes back on `conn`."""
        if self._closing:  # a request read before close() stopped reading: its answer might never be sent
            if not cmd.is_oneway:
                conn.send(cmd.reply(ResponseCode.SERVICE_NOT_AVAILABLE, remark="the server is closing"))
            return
        if self._acl is not None:
            refused = self._refused(cmd)
            if refused is not None:
                if not cmd.is_oneway:
                    conn.send(refused)
                return
        handler = HANDLERS.get(cmd.code)
        if handler is None:
            if not cmd.is_oneway:
                conn.send(cmd.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                    remark=f" request type {cmd.code} not supported"))
            return
        request = Request(cmd, conn, self)
        mode = handler.mode
        if mode is Mode.INLINE or (mode is Mode.PUT and self._put_inline):
            request.on_loop = True
            if self._answer(conn, cmd, handler.fn, request):
                return
            request.on_loop = False  # it has files to write: again, on the executor
        if mode is Mode.ASYNC:
            awaitable = handler.fn(request)
        else:
            try:
                awaitable = self.to_executor(lambda: handler.fn(request))
            except RequestError as exc:
                if not cmd.is_oneway:
                    conn.send(cmd.reply(exc.code, remark=exc.remark))
                return
        future = asyncio.ensure_future(awaitable, loop=self._loop)
        conn.started()
        self._pending.add(future)
        if mode is Mode.ASYNC:
            conn.tasks.add(future)
        future.add_done_callback(lambda f: self._done(conn, cmd, f))

    def _done(self, conn: _Connection, cmd: RemotingCommand, future: asyncio.Future[Any]) -> None:
        self._pending.discard(future)
        conn.tasks.discard(future)
        conn.finished()
        self._answer(conn, cmd, future.result)

    def _answer(self, conn: _Connection, cmd: RemotingCommand, run: Callable[..., Any], *args: Any) -> bool:
        """Run (or collect) a handler's result, `run(*args)`, and send it; exceptions become error responses.
        False when the handler raised `NeedsExecutor` (nothing was sent)."""
        try:
            response = run(*args)
        except NeedsExecutor:
            return False
        except RequestError as exc:
            response = cmd.reply(exc.code, exc.fields, remark=exc.remark)
        except MQLiteError as exc:
            answer = refusal(exc)
            if answer is not None:
                response = cmd.reply(answer[0], answer[1], remark=str(exc))
            else:  # the store's own words (a damaged record, a message not found): one line
                log.warning("request %s from %s failed: %s: %s", cmd.code, conn.remote_address, type(exc).__name__,
                            exc)
                response = cmd.reply(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        except asyncio.CancelledError:
            return True
        except Exception as exc:  # a bug here: the client gets an answer, the log the stack
            log.exception("request %r from %s failed", cmd, conn.remote_address)
            response = cmd.reply(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        if response is not None and not cmd.is_oneway:
            conn.send(response)
        return True

    def __repr__(self) -> str:
        state = "closed" if self._closed else "closing" if self._closing else "serving"
        return f"<mqlite.Server {self._address} {state} {self._broker.path!r}>"
