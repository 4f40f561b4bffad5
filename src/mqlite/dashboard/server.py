"""`Dashboard`: the HTTP server, its routes, static files, request checks and the sampler thread.

Threads, each named and owned by the `Dashboard` and joined by `close()`:
`mqlite-dashboard-http` (the accept loop, `serve_forever`), one
`mqlite-dashboard-request` per connection (HTTP/1.0: one request each), and
`mqlite-dashboard-sampler` (a `Service`: one round per `interval`, woken at
once by `close()`). `close()` stops accepting, shuts the open connections'
sockets (an idle browser pre-connection would otherwise hold its thread),
joins every request thread, then stops the sampler.

Request checks (the dashboard has no login; see docs/dashboard.md):
- `Host` must name this server (a loopback name when it listens on loopback),
  so a page on another site that rebinds its DNS name to 127.0.0.1 cannot read
  the store through the user's browser;
- a POST must be `application/json` (a cross-site form cannot send that
  without a CORS preflight, which is never answered), its `Origin`, when the
  browser sends one, must be this server, and a write must say `"confirm": true`.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import mimetypes
import selectors
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from .._service import Service, close_at_exit, forget_at_exit
from ..errors import ConfigError, IllegalStateError, MessageNotFoundError, MQClientError, MQLiteError, RemotingError
from ..remoting.address import parse_address
from . import DEFAULT_HISTORY, DEFAULT_INTERVAL
from .api import Api
from .history import History
from .source import DashboardBroker, ForbiddenError, NotFoundError, Source

__all__ = ["Dashboard"]

log = logging.getLogger("mqlite.dashboard")

#: The largest POST body read (a re-send of 1000 ids is some 40 KiB).
_MAX_BODY = 1 << 20
#: Seconds a connection may stay silent before its thread gives up on it.
_IDLE_TIMEOUT = 30.0
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                  ".mjs": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                  ".json": "application/json", ".map": "application/json", ".svg": "image/svg+xml",
                  ".txt": "text/plain; charset=utf-8", ".md": "text/plain; charset=utf-8", ".png": "image/png",
                  ".ico": "image/x-icon", ".woff2": "font/woff2"}
#: Everything the page loads comes from this server (no CDN); scripts only from files, never inline.
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'",
}
_STATUS_OF: tuple[tuple[type[Exception], HTTPStatus], ...] = (
    (ForbiddenError, HTTPStatus.FORBIDDEN),
    (NotFoundError, HTTPStatus.NOT_FOUND),
    (MessageNotFoundError, HTTPStatus.NOT_FOUND),
    (MQClientError, HTTPStatus.BAD_REQUEST),
    (RemotingError, HTTPStatus.BAD_GATEWAY),
    (IllegalStateError, HTTPStatus.SERVICE_UNAVAILABLE),
)


class _Refused(Exception):
    """A request answered with an error status before it reached a route."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Sampler(Service):
    """`mqlite-dashboard-sampler`: one sampling round per `interval` into the history."""

    def __init__(self, source: Source, history: History, interval: float) -> None:
        super().__init__("dashboard-sampler", interval)
        self.source = source
        self.history = history

    def run_once(self) -> None:
        try:
            sample = self.source.sample()
        except MQLiteError as exc:  # the serving broker went away, the broker was closed: say so on the page,
            # log it once, try again next round
            if self.source.last_error is None:
                log.warning("dashboard: sampling %s failed: %s", self.source.broker.path, exc)
            self.source.last_error = f"the last sampling round failed: {exc}"
            return
        self.source.last_error = None
        self.history.add(sample)


# -- routing --------------------------------------------------------------------------------------------------
Handler = Callable[..., dict[str, Any]]


def _routes(api: Api) -> dict[tuple[str, str], Handler]:
    """(method, path pattern) -> handler; `*` in a pattern is one path segment (decoded), passed positionally."""
    return {
        ("GET", "/api/overview"): api.overview,
        ("GET", "/api/topics/*"): api.topic,
        ("GET", "/api/groups"): api.groups,
        ("GET", "/api/groups/*"): api.group,
        ("GET", "/api/messages"): api.messages,
        ("GET", "/api/message"): api.message,
        ("GET", "/api/trace"): api.trace,
        ("GET", "/api/dlq"): api.dlq,
        ("GET", "/api/dlq/*"): api.dlq_group,
        ("POST", "/api/dlq/*/resend"): api.resend,
        ("GET", "/api/health"): api.health,
        ("POST", "/api/verify"): api.verify,
    }


def _match(pattern: str, segments: list[str]) -> list[str] | None:
    parts = pattern.strip("/").split("/")
    if len(parts) != len(segments):
        return None
    args = []
    for part, segment in zip(parts, segments):
        if part == "*":
            args.append(segment)
        elif part != segment:
            return None
    return args


def _static_file(root: Traversable, path: str) -> tuple[bytes, str] | None:
    """The bytes and content type of `path` under `root`, or None; a segment that is empty, `.`, `..` or holds a
    backslash or NUL (after percent-decoding) refuses the whole path: nothing outside `root` is reachable."""
    segments = [unquote(s) for s in path.split("/")]
    if not segments or any(s in ("", ".", "..") or "\\" in s or "\0" in s or "/" in s for s in segments):
        return None
    target = root.joinpath(*segments)
    if not target.is_file():
        return None
    suffix = "." + segments[-1].rsplit(".", 1)[-1] if "." in segments[-1] else ""
    kind = _CONTENT_TYPES.get(suffix.lower()) or mimetypes.guess_type(segments[-1])[0] or "application/octet-stream"
    return target.read_bytes(), kind


# -- the server -----------------------------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    """The HTTP server: one named thread per connection, each joined by `close_all` (not daemons)."""

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, dashboard: Dashboard) -> None:
        self.address_family = family
        self.dashboard = dashboard
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._conn_threads: list[threading.Thread] = []
        super().__init__(address, _RequestHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread of its own, named as mqlite's threads are."""
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  name="mqlite-dashboard-request")
        with self._lock:
            self._open.add(request)
            self._conn_threads = [t for t in self._conn_threads if t.is_alive()]
            self._conn_threads.append(thread)
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("dashboard: connection from %s failed", client_address, exc_info=True)

    def close_all(self) -> None:
        """After `shutdown()`: end every connection (a thread waiting for its client wakes at once), join
        their threads, close the listening socket."""
        with self._lock:
            requests, threads = list(self._open), list(self._conn_threads)
        for request in requests:
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed meanwhile
        for thread in threads:
            thread.join()
        self.server_close()


class _RequestHandler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "mqlite-dashboard"
    protocol_version = "HTTP/1.0"
    timeout = _IDLE_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("dashboard: %s " + format, self.address_string(), *args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.dashboard.handle(self, "GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self.server.dashboard.handle(self, "HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self.server.dashboard.handle(self, "POST")

    def do_PUT(self) -> None:  # noqa: N802
        self.server.dashboard.handle(self, "PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self.server.dashboard.handle(self, "DELETE")


class Dashboard:
    """A web dashboard over `broker`, served at `address` until `close()`.

    `broker` is a `Broker` (its writer or a read-only one, from `mqlite.open`)
    or a `RemoteBroker` (`mqlite.connect`); the dashboard does not close it.
    `address` is `host:port` (port 0 picks a free one; `url` tells which).
    `interval` is the seconds between two sampling rounds, `history` how many
    rounds the charts keep. `writable=True` allows re-sending dead letters (a
    writer or a serving broker only). Takes the first round before it returns,
    so the first page has figures. Starts three kinds of thread (see the module
    docstring), all joined by `close()`; use it as a context manager:

    >>> import mqlite, tempfile, urllib.request, json
    >>> with mqlite.open(tempfile.mkdtemp(), commitlog_file_size=1 << 20) as broker:
    ...     _ = broker.put_message("orders", 0, b"hi")
    ...     with Dashboard(broker) as dashboard:
    ...         with urllib.request.urlopen(dashboard.url + "api/overview") as response:
    ...             [t["topic"] for t in json.load(response)["topics"]]
    ['orders']
    """

    def __init__(self, broker: DashboardBroker, address: str = "127.0.0.1:0", *, interval: float = DEFAULT_INTERVAL,
                 writable: bool = False, history: int = DEFAULT_HISTORY) -> None:
        if not isinstance(interval, int | float) or isinstance(interval, bool) or not 0 < interval <= 3600:
            raise ConfigError(f"interval must be a number of seconds in (0, 3600], got {interval!r}")
        if not isinstance(history, int) or isinstance(history, bool) or not 2 <= history <= 1_000_000:
            raise ConfigError(f"history must be an int from 2 to 1000000 (rounds kept), got {history!r}")
        host, port = parse_address(address, allow_port_0=True)
        self._source = Source(broker, writable=writable)
        self._history = History(history)
        self._api = Api(self._source, self._history)
        self._routes = _routes(self._api)
        self._static = resources.files(__package__).joinpath("static")
        self._history.add(self._source.sample())
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._server = _Server((host, port), family, self)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {address}: {exc.strerror or exc}") from None
        bound_host, bound_port = self._server.socket.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in str(bound_host) else str(bound_host)
        self._address = f"{shown}:{bound_port}"
        self._loopback = _is_loopback(str(bound_host))
        self._hosts = {self._address} | ({f"{name}:{bound_port}" for name in _LOOPBACK_NAMES} if self._loopback else set())
        self._port = int(bound_port)
        self._closed = False
        self._close_lock = threading.Lock()
        self._sampler = _Sampler(self._source, self._history, float(interval))
        self._wake_r, self._wake_w = socket.socketpair()
        self._serving = threading.Thread(target=self._accept_loop, name="mqlite-dashboard-http")
        self._sampler.start()
        self._serving.start()
        close_at_exit(self)

    # -- public surface -------------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        """`host:port` the dashboard listens on (the port chosen when 0 was asked)."""
        return self._address

    @property
    def url(self) -> str:
        """The page's URL, `http://host:port/`."""
        return f"http://{self._address}/"

    @property
    def loopback(self) -> bool:
        """True when only this machine can reach the dashboard."""
        return self._loopback

    @property
    def writable(self) -> bool:
        """True when the dashboard may re-send dead letters."""
        return self._source.writable

    def close(self) -> None:
        """Stop serving and sampling: stop accepting, end open connections, join every thread. Idempotent;
        the broker stays open (its owner closes it)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._wake_w.send(b"x")  # the accept loop wakes and ends
            self._serving.join()
            self._server.close_all()
            self._wake_r.close()
            self._wake_w.close()
        finally:
            self._sampler.stop()
            forget_at_exit(self)

    def _accept_loop(self) -> None:
        """`mqlite-dashboard-http`: accept connections until `close()` writes to the wake socket.

        `serve_forever` would do, but its `shutdown()` waits up to a poll interval: this loop sleeps
        in one `select` on the listening and the wake socket, so closing is immediate and idle costs nothing.
        """
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake_r in ready:
                    return
                self._server.handle_request()  # the listening socket is readable: accepts at once

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Dashboard({self.url}, {self._source.mode} {self._source.broker.path})"

    # -- requests ---------------------------------------------------------------------------------------------
    def handle(self, request: _RequestHandler, method: str) -> None:
        """Answer one request (on its connection's thread): checks, then a route, a static file or an error."""
        try:
            self._check_host(request)
            url = urlsplit(request.path)
            if url.path.startswith("/api/"):
                status, payload = HTTPStatus.OK, self._call_api(request, method, url.path, url.query)
                self._send_json(request, status, payload, head=method == "HEAD")
            else:
                self._send_static(request, method, url.path)
        except _Refused as exc:
            self._send_error(request, exc.status, str(exc), exc.status.phrase.replace(" ", ""))
        except Exception as exc:  # noqa: BLE001 - every failure is one JSON answer, never a traceback
            known = next((s for kind, s in _STATUS_OF if isinstance(exc, kind)), None)
            if known is None:
                log.exception("dashboard: %s %s failed", method, request.path)
            self._send_error(request, known or HTTPStatus.INTERNAL_SERVER_ERROR, str(exc), type(exc).__name__)

    def _check_host(self, request: _RequestHandler) -> None:
        host = (request.headers.get("Host") or "").strip().lower()
        if not self._host_allowed(host):
            raise ForbiddenError(f"Host {host!r} is not this dashboard ({self._address}): requests through "
                                 "another name are refused (DNS rebinding)")

    def _host_allowed(self, host: str) -> bool:
        if host in self._hosts:
            return True
        if self._loopback:
            return False
        # Listening beyond loopback: any IP literal with our port (a rebinding attack needs a DNS name), the
        # machine's own name, or localhost.
        name, _, port = host.rpartition(":")
        if port != str(self._port):
            return False
        if name in ("localhost", socket.gethostname().lower()):
            return True
        try:
            ipaddress.ip_address(name.strip("[]"))
        except ValueError:
            return False
        return True

    def _call_api(self, request: _RequestHandler, method: str, path: str, query_text: str) -> dict[str, Any]:
        segments = [unquote(s) for s in path.strip("/").split("/")]
        allowed = []
        for (route_method, pattern), handler in self._routes.items():
            args = _match(pattern, segments)
            if args is None:
                continue
            if route_method != method and not (method == "HEAD" and route_method == "GET"):
                allowed.append(route_method)
                continue
            if route_method == "POST":
                return handler(self._json_body(request, pattern), *args)
            return handler(dict(parse_qsl(query_text, keep_blank_values=True)), *args)
        if allowed:
            raise _Refused(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} {path}: use {' or '.join(sorted(set(allowed)))}")
        raise NotFoundError(f"no route {path}; see docs/dashboard.md for the API")

    def _json_body(self, request: _RequestHandler, pattern: str) -> dict[str, Any]:
        """A POST's JSON object, after the cross-site checks; writes must carry `"confirm": true`."""
        origin = request.headers.get("Origin")
        if origin is not None and not (origin.lower().startswith("http://")
                                       and self._host_allowed(origin.lower()[len("http://"):].rstrip("/"))):
            raise ForbiddenError(f"Origin {origin!r} is not this dashboard ({self.url}): cross-site writes are refused")
        kind = (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise _Refused(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                           f"a POST must be Content-Type: application/json, not {kind or 'none'!r}")
        try:
            length = int(request.headers.get("Content-Length") or 0)
        except ValueError:
            raise MQClientError("bad Content-Length") from None
        if not 0 <= length <= _MAX_BODY:
            raise MQClientError(f"the body is {length} bytes; at most {_MAX_BODY}")
        raw = request.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise MQClientError(f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise MQClientError("the body must be a JSON object")
        if pattern.endswith("/resend"):
            self._source.require_writable()  # before the confirmation: it would not help
            if body.get("confirm") is not True:
                raise MQClientError('a write must be confirmed: send "confirm": true in the body')
        return body

    def _send_static(self, request: _RequestHandler, method: str, path: str) -> None:
        if method not in ("GET", "HEAD"):
            raise _Refused(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} {path}: static files take GET")
        if path == "/":
            path = "/static/index.html"
        if path == "/metrics":
            raise NotFoundError("/metrics is not served yet")
        found = _static_file(self._static, path[len("/static/"):]) if path.startswith("/static/") else None
        if found is None:
            raise NotFoundError(f"no file {path}")
        data, kind = found
        self._send(request, HTTPStatus.OK, data, kind, head=method == "HEAD", cache="no-cache")

    # -- answers -------------------------------------------------------------------------------------------------
    def _send_json(self, request: _RequestHandler, status: HTTPStatus, payload: dict[str, Any], *,
                   head: bool = False) -> None:
        data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self._send(request, status, data, "application/json; charset=utf-8", head=head)

    def _send_error(self, request: _RequestHandler, status: HTTPStatus, message: str, kind: str) -> None:
        try:
            self._send_json(request, status, {"error": message, "kind": kind}, head=request.command == "HEAD")
        except OSError:
            pass  # the client is gone

    @staticmethod
    def _send(request: _RequestHandler, status: HTTPStatus, data: bytes, kind: str, *, head: bool = False,
              cache: str = "no-store") -> None:
        request.send_response(status)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(data)))
        request.send_header("Cache-Control", cache)
        for name, value in _SECURITY_HEADERS.items():
            request.send_header(name, value)
        request.end_headers()
        if not head:
            request.wfile.write(data)


def _is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
