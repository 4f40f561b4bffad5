"""`Server`: a broker served over RocketMQ's remoting protocol (`Broker.serve`, `mqlite serve`).

Threads (DESIGN.md, "Serving"): one event loop thread, `mqlite-remoting`, owns the listening socket
and every connection, decodes frames and runs the handlers that do not block; handlers that may
block (a put waiting for SYSTEM_FLUSH's group commit, an admin call writing files) run on a bounded
executor (`mqlite-remoting-exec-N`); a long-polling pull parks on the arrival hub as a pending
response on the loop, not on a thread. `close()` stops accepting, answers parked pulls, waits for
in-flight requests, closes the connections (their consumers leave their groups), then joins both.

One bad peer never harms another: a malformed, truncated or oversized frame closes that connection
only; a connection whose client stops reading is not read from either (its writes are buffered up
to a bound, then it is dropped); each connection has at most `MAX_IN_FLIGHT` requests on the
executor and `MAX_PARKED` parked pulls, so a flood from one client queues behind itself, not in
front of everyone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import ipaddress
import logging
import queue
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, DiskFullError, IllegalStateError, MQClientError, ProtocolError, RemotingError
from . import admin, clients, nameserver, offsets, pull, send  # noqa: F401 - importing registers their handlers
from .clients import ClientRegistry
from .handlers import HANDLERS, Mode, Request, RequestError
from .protocol import (
    ACCESS_KEY,
    DEFAULT_MAX_FRAME_SIZE,
    SIGNATURE,
    FrameDecoder,
    RemotingCommand,
    ResponseCode,
    encode_frame,
    sign,
)
from .registry import clear_address, record_address

if TYPE_CHECKING:
    from ..broker import Broker

__all__ = ["Server", "MAX_IN_FLIGHT", "MAX_PARKED", "CHANNEL_EXPIRED_TIMEOUT"]

log = logging.getLogger("mqlite.remoting")

#: Requests of one connection the executor may hold at once; reading from it pauses beyond that.
MAX_IN_FLIGHT = 64
#: Parked pulls one connection may have (a push consumer parks one per queue it owns).
MAX_PARKED = 4096
#: `ClientHousekeepingService`'s channel expiry: a connection silent this long is closed (seconds).
CHANNEL_EXPIRED_TIMEOUT = 120.0
_WRITE_HIGH_WATER = 4 * 1024 * 1024  # stop reading a client's requests while this much waits to be sent to it
_CLOSE_GRACE = 10.0  # seconds close() waits for in-flight requests and for connections to flush


class _Executor:
    """A bounded pool of named threads (`<prefix>-1` ... `<prefix>-N`), started as work arrives.

    As `concurrent.futures.ThreadPoolExecutor` (an idle-thread semaphore decides whether a new thread
    is needed), which cannot name its threads `-N`.
    """

    def __init__(self, prefix: str, workers: int) -> None:
        self._prefix = prefix
        self._max = workers
        self._queue: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]] | None] = \
            queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Queue `fn`; a thread is started when none is idle and fewer than N run."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._shutdown:
                raise IllegalStateError("the server's executor is shut down")
            self._queue.put((future, fn))
            if not self._idle.acquire(timeout=0) and len(self._threads) < self._max:
                thread = threading.Thread(target=self._work, name=f"{self._prefix}-{len(self._threads) + 1}")
                self._threads.append(thread)
                thread.start()
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
                    future.set_exception(exc)
            del item, future, fn
            self._idle.release()

    def shutdown(self) -> None:
        """Finish queued work, then join every thread."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join()


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` (`[v6]:port` too) -> (host, port); `ConfigError` when it is not one."""
    if not isinstance(address, str) or ":" not in address:
        raise ConfigError(f"address must be 'host:port' (port 0 picks a free one), got {address!r}")
    host, _, port_text = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"address must be 'host:port' with a port in 0..65535, got {address!r}")
    return host, int(port_text)


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
    """One client connection: frames in, responses and broker-to-client requests out."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.decoder = FrameDecoder(server.max_frame_size)
        self.transport: asyncio.Transport | None = None
        self.remote_address = "0.0.0.0:0"  # (an address, as a record's born host needs one)
        self.local_address = server.address
        self.last_seen = time.monotonic()
        self.in_flight = 0
        self.parked = 0
        self._write_paused = False
        self._read_paused = False
        self._batch: list[bytes] | None = None  # answers collected while a read is handled: one write

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
        self.server._connections.add(self)

    def data_received(self, data: bytes) -> None:
        self.last_seen = time.monotonic()
        try:
            commands = self.decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing the connection from %s: %s", self.remote_address, exc)
            self.abort()
            return
        if not commands:
            return
        # Answers to the requests of one read go out in one write (a pipelining client sends many).
        batch: list[bytes] = []
        self._batch = batch
        try:
            for cmd in commands:
                if not cmd.is_response:  # the broker's own requests to clients are oneway: nothing to match
                    self.server._dispatch(self, cmd)
        finally:
            self._batch = None
            if batch:
                self._write(b"".join(batch))

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._connections.discard(self)
        self.transport = None
        self.server.clients.drop_peer(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # -- used by handlers ------------------------------------------------------------------------------------------
    def touch(self) -> None:
        """A heartbeat arrived (every frame counts as a sign of life already)."""
        self.last_seen = time.monotonic()

    def send(self, cmd: RemotingCommand) -> None:
        """Write `cmd` (loop thread). A client that lets too much pile up unread is dropped."""
        frame = encode_frame(cmd)
        if self._batch is not None:
            self._batch.append(frame)
        else:
            self._write(frame)

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(data)
        if transport.get_write_buffer_size() > self.server.max_frame_size + 16 * _WRITE_HIGH_WATER:
            log.warning("dropping the connection from %s: it does not read what it is sent", self.remote_address)
            self.abort()

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """`send` from any thread (the broker calls members back from its own threads)."""
        if threading.get_ident() == self.server._loop_thread_id:
            self.send(cmd)
        else:
            try:
                self.server._loop.call_soon_threadsafe(self.send, cmd)
            except RuntimeError:
                pass  # the loop is gone: so is the connection

    def abort(self) -> None:
        """Close at once, dropping unsent bytes."""
        if self.transport is not None:
            self.transport.abort()

    def started(self, on_loop: bool) -> None:
        """A request went to the executor (or, `on_loop`, a coroutine that may park)."""
        if on_loop:
            self.parked += 1
        else:
            self.in_flight += 1
        self._update_reading()

    def finished(self, on_loop: bool) -> None:
        """A request from `started` was answered."""
        if on_loop:
            self.parked -= 1
        else:
            self.in_flight -= 1
        self._update_reading()

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        pause = self._write_paused or self.in_flight >= MAX_IN_FLIGHT or self.parked >= MAX_PARKED
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
                 channel_expired_timeout: float = CHANNEL_EXPIRED_TIMEOUT, executor_threads: int = 8) -> None:
        host, port = parse_address(address)
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
        self._broker = broker
        self.max_frame_size = max_frame_size
        self.channel_expired_timeout = float(channel_expired_timeout)
        self.clients = ClientRegistry(broker)
        self._put_inline = not broker.config.sync_flush
        self._connections: set[_Connection] = set()
        self._pending: set[asyncio.Future[Any]] = set()
        self._parked: set[Any] = set()
        self._closing = False
        self._closed = False
        self._close_lock = threading.Lock()
        self._executor = _Executor("mqlite-remoting-exec", executor_threads)
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
        host, port = parse_address(self._address)
        return f"127.0.0.1:{port}" if host in ("0.0.0.0", "::") else self._address

    def _advertised_ipv4(self) -> str | None:
        """`ip:port` to write into records as their store host (RocketMQ's `brokerIP1:listenPort`): the bound
        IPv4 address, this machine's for a wildcard bind; None for IPv6 (a record's host is 4 bytes here)."""
        host, port = parse_address(self._address)
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
                if self._registered is not None:
                    clear_address(self._registered, self._recorded_address())
                if self._store_host is not None and not self._broker.closed:
                    self._broker.set_store_host(None)
                self._closed = True
        log.info("stopped serving %s on %s", self._broker.path, self._address)

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()

    async def _shutdown(self) -> None:
        if self._listener is not None:
            self._listener.close()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        for waker in list(self._parked):
            waker.event.set()  # parked pulls answer with what they have
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=_CLOSE_GRACE)
        for conn in list(self._connections):
            if conn.transport is not None:
                conn.transport.close()  # flushes what is buffered, then connection_lost
        deadline = time.monotonic() + _CLOSE_GRACE
        while self._connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self._connections):
            conn.abort()
        await asyncio.sleep(0)  # let connection_lost run for the aborted ones

    async def _expire_silent(self) -> None:
        """`ClientHousekeepingService`: close connections silent for longer than the channel expiry."""
        period = min(10.0, self.channel_expired_timeout / 4)
        while True:
            await asyncio.sleep(period)
            limit = time.monotonic() - self.channel_expired_timeout
            for conn in list(self._connections):
                if conn.last_seen < limit:
                    log.info("closing the connection from %s: silent for over %.0f s", conn.remote_address,
                             self.channel_expired_timeout)
                    conn.abort()

    # -- for handlers (ServerState) ------------------------------------------------------------------------------------
    def to_executor(self, fn: Callable[[], Any]) -> Awaitable[Any]:
        """Run `fn` on the bounded executor, awaited on the loop."""
        return asyncio.wrap_future(self._executor.submit(fn), loop=self._loop)

    def park(self, waker: Any) -> None:
        """A pull parked: `close()` wakes it."""
        self._parked.add(waker)

    def unpark(self, waker: Any) -> None:
        """A parked pull answered."""
        self._parked.discard(waker)

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

    def _dispatch(self, conn: _Connection, cmd: RemotingCommand) -> None:
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
            self._answer(conn, cmd, lambda: handler.fn(request))
            return
        if mode is Mode.ASYNC:
            awaitable = handler.fn(request)
        else:
            awaitable = self.to_executor(lambda: handler.fn(request))
        future = asyncio.ensure_future(awaitable, loop=self._loop)
        on_loop = mode is Mode.ASYNC
        conn.started(on_loop)
        self._pending.add(future)
        future.add_done_callback(lambda f: self._done(conn, cmd, f, on_loop))

    def _done(self, conn: _Connection, cmd: RemotingCommand, future: asyncio.Future[Any], on_loop: bool) -> None:
        self._pending.discard(future)
        conn.finished(on_loop)
        self._answer(conn, cmd, future.result)

    def _answer(self, conn: _Connection, cmd: RemotingCommand, run: Callable[[], Any]) -> None:
        """Run (or collect) a handler's result and send it; exceptions become error responses."""
        try:
            response = run()
        except RequestError as exc:
            response = cmd.reply(exc.code, remark=exc.remark)
        except (DiskFullError, IllegalStateError) as exc:
            response = cmd.reply(ResponseCode.SERVICE_NOT_AVAILABLE, remark=str(exc))
        except MQClientError as exc:
            response = cmd.reply(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        except asyncio.CancelledError:
            return
        except Exception as exc:  # a bug here: the client gets an answer, the log the stack
            log.exception("request %r from %s failed", cmd, conn.remote_address)
            response = cmd.reply(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        if response is not None and not cmd.is_oneway:
            conn.send(response)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "closing" if self._closing else "serving"
        return f"<mqlite.Server {self._address} {state} {self._broker.path!r}>"
