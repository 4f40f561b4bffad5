"""`Dashboard`: the HTTP server, its routes, static files, request checks and the sampler thread.

Threads, each named and owned by the `Dashboard` and joined by `close()`:
`mqlite-dashboard-http` (the accept loop: one `select` on the listening socket
and a wake socket), one `mqlite-dashboard-request` per connection (HTTP/1.0: one
request each), and `mqlite-dashboard-sampler` (a `Service`: one round per
`interval`, woken at once by `close()`). `close()` ends a running verify's child,
stops accepting, shuts the open connections' sockets (an idle browser
pre-connection would otherwise hold its thread), joins every request thread,
then stops the sampler.

Request checks (the dashboard has no login; see docs/dashboard.md):
- `Host` must name this server (a loopback name when it listens on loopback; no
  port means 80), or one of the names given as `allow_hosts` (a reverse proxy's
  public name, any port), so a page on another site that rebinds its DNS name to
  127.0.0.1 cannot read the store through the user's browser;
- a POST must be `application/json` (a cross-site form cannot send that
  without a CORS preflight, which is never answered), its `Origin`, when the
  browser sends one, must be this server (`http://`) or an allowed name
  (`http://` or `https://`), and a write must say `"confirm": true`.

Client faults (a reset or closed connection, a client too slow to send or
read) are the client's doing: one debug line, never a traceback; a request
that arrives once `close()` has begun is refused (503), not served.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import mimetypes
import re
import selectors
import socket
import threading
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from .._service import Service, close_at_exit, forget_at_exit
from ..errors import ConfigError, IllegalStateError, MessageNotFoundError, MQClientError, MQLiteError, RemotingError
from ..metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ..metrics import render_prometheus
from ..remoting.address import parse_address
from . import DEFAULT_HISTORY, DEFAULT_INTERVAL, MIN_INTERVAL
from .api import Api
from .history import History
from .source import ConflictError, DashboardBroker, ForbiddenError, NotFoundError, Source

__all__ = ["Dashboard", "RequestError", "MethodNotAllowedError", "UnsupportedMediaTypeError", "RequestTimeoutError",
           "allowed_host"]

log = logging.getLogger("mqlite.dashboard")

#: The largest POST body read (a re-send of 1000 ids is some 40 KiB).
_MAX_BODY = 1 << 20
#: Seconds a connection may stay silent before its thread gives up on it.
_IDLE_TIMEOUT = 30.0
#: Seconds a POST body may take to arrive once its headers are in (bodies are a few KiB): 408 after.
_BODY_TIMEOUT = 5.0
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
    (ConflictError, HTTPStatus.CONFLICT),
    (IllegalStateError, HTTPStatus.SERVICE_UNAVAILABLE),
)
#: Connection faults that are the client's doing (gone, reset, too slow): no error of the dashboard's.
_CLIENT_FAULTS = (ConnectionError, TimeoutError)


class RequestError(MQLiteError):
    """A request refused for its form before it reached a route; `status` is its HTTP status (the base class
    answers http.server's own refusals: a bad request line, an over-long URI, an unknown method)."""

    status = HTTPStatus.BAD_REQUEST

    def __init__(self, message: str, status: HTTPStatus | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class MethodNotAllowedError(RequestError):
    """A method the path does not take (HTTP 405)."""

    status = HTTPStatus.METHOD_NOT_ALLOWED


class UnsupportedMediaTypeError(RequestError):
    """A POST that is not `application/json` (HTTP 415)."""

    status = HTTPStatus.UNSUPPORTED_MEDIA_TYPE


class RequestTimeoutError(RequestError):
    """A POST body that did not arrive in time (HTTP 408)."""

    status = HTTPStatus.REQUEST_TIMEOUT


def _status_of(exc: Exception) -> HTTPStatus | None:
    """The HTTP status of a failure the dashboard expects, or None for a fault of its own (500)."""
    if isinstance(exc, RequestError):
        return exc.status
    return next((status for kind, status in _STATUS_OF if isinstance(exc, kind)), None)


class _Sampler(Service):
    """`mqlite-dashboard-sampler`: one sampling round per `interval` into the history."""

    def __init__(self, source: Source, history: History, interval: float) -> None:
        super().__init__("dashboard-sampler", interval)
        self.source = source
        self.history = history

    def run_once(self) -> None:
        try:
            sample = self.source.sample()
        except Exception as exc:  # noqa: BLE001 - the serving broker went away, the broker was closed, a file
            # vanished under a reader: say so on the page, log it once (a traceback for what is no MQLiteError),
            # try again next round
            if self.source.last_error is None:
                log.warning("dashboard: sampling %s failed: %s", self.source.broker.path, exc,
                            exc_info=not isinstance(exc, MQLiteError))
            self.source.last_error = f"the last sampling round failed: {type(exc).__name__}: {exc}"
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
        log.debug("dashboard: connection from %s failed", client_address)

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

    def version_string(self) -> str:
        """The `Server` header: the name only (no Python version to fingerprint)."""
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("dashboard: %s " + format, self.address_string(), *args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (bad request line, URI too long, unknown method, idle timeout) as the
        dashboard's JSON errors, with its security headers."""
        self.close_connection = True
        status = HTTPStatus(code)
        self.server.dashboard.send_error(self, RequestError(message or status.phrase, status))

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

    def do_PATCH(self) -> None:  # noqa: N802
        self.server.dashboard.handle(self, "PATCH")

    def do_OPTIONS(self) -> None:  # noqa: N802 - a CORS preflight too: answered 405, never with CORS headers
        self.server.dashboard.handle(self, "OPTIONS")


class Dashboard:
    """A web dashboard over `broker`, served at `address` until `close()`.

    `broker` is a `Broker` (its writer or a read-only one, from `mqlite.open`)
    or a `RemoteBroker` (`mqlite.connect`); the dashboard does not close it.
    `address` is `host:port` (port 0 picks a free one; `url` tells which).
    `interval` is the seconds between two sampling rounds (at least 0.01),
    `history` how many rounds the charts keep. `writable=True` allows
    re-sending dead letters (a writer or a serving broker only).
    `allow_hosts` are more names the page may be reached by (a reverse proxy's
    public name: `Host` and `Origin` naming them pass, on any port). Takes the
    first round before it returns, so the first page has figures. Starts three
    kinds of thread (see the module docstring) and, for a verify, a child
    process, all joined or ended by `close()`; use it as a context manager:

    >>> import mqlite, tempfile, urllib.request, json
    >>> with mqlite.open(tempfile.mkdtemp(), commitlog_file_size=1 << 20) as broker:
    ...     _ = broker.put_message("orders", 0, b"hi")
    ...     with Dashboard(broker) as dashboard:
    ...         with urllib.request.urlopen(dashboard.url + "api/overview") as response:
    ...             [t["topic"] for t in json.load(response)["topics"]]
    ['orders']
    """

    def __init__(self, broker: DashboardBroker, address: str = "127.0.0.1:0", *, interval: float = DEFAULT_INTERVAL,
                 writable: bool = False, history: int = DEFAULT_HISTORY, allow_hosts: Iterable[str] = ()) -> None:
        if not isinstance(interval, int | float) or isinstance(interval, bool) or not MIN_INTERVAL <= interval <= 3600:
            raise ConfigError(f"interval must be a number of seconds from {MIN_INTERVAL} to 3600, got {interval!r}")
        allowed = {allowed_host(name) for name in ([allow_hosts] if isinstance(allow_hosts, str) else allow_hosts)}
        if not isinstance(history, int) or isinstance(history, bool) or not 2 <= history <= 1_000_000:
            raise ConfigError(f"history must be an int from 2 to 1000000 (rounds kept), got {history!r}")
        host, port = parse_address(address, allow_port_0=True)
        self._source = Source(broker, writable=writable)
        self._history = History(history, self._source.out_window)
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
        self._names = {shown.lower()} | (set(_LOOPBACK_NAMES) if self._loopback else set())
        self._allowed = frozenset(allowed)
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
        # From here on requests are refused (`handle` reads `_closed`).
        self._api.verifier.abandon()  # a running verify ends now, not when it has read the whole store
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
            if self._closed:  # e.g. a half-sent request whose socket `close()` just shut
                raise IllegalStateError("the dashboard is closing")
            if request.request_version == "HTTP/0.9":  # an answer without a status line or headers
                raise RequestError("HTTP/0.9 is not served: send HTTP/1.0 or 1.1")
            self._check_host(request)
            url = urlsplit(request.path)
            if url.path.startswith("/api/"):
                status, payload = HTTPStatus.OK, self._call_api(request, method, url.path, url.query)
                self._send_json(request, status, payload, head=method == "HEAD")
            else:
                self._send_static(request, method, url.path)
        except _CLIENT_FAULTS as exc:  # the client went away or stalled: nothing of ours failed
            log.debug("dashboard: %s %s: the client failed: %r", method, request.path, exc)
        except Exception as exc:  # noqa: BLE001 - every failure is one JSON answer, never a traceback
            if _status_of(exc) is None:
                log.exception("dashboard: %s %s failed", method, request.path)
            self.send_error(request, exc)

    def _check_host(self, request: _RequestHandler) -> None:
        host = (request.headers.get("Host") or "").strip().lower()
        if not self._host_allowed(host):
            raise ForbiddenError(f"Host {host!r} is not this dashboard ({self._address}): requests through "
                                 "another name are refused (DNS rebinding; a proxy's name needs --allow-host)")

    def _host_allowed(self, host: str, default_port: int = 80) -> bool:
        """True when `host` (a lower-case `Host` header, or an Origin's host) names this dashboard: an allowed
        name on any port, else our port (`default_port` when none is given) with our address, a loopback name
        when we listen on loopback, and beyond loopback any IP literal (a rebinding attack needs a DNS name),
        the machine's own name or localhost."""
        split = _split_host(host)
        if split is None:
            return False
        name, port = split
        if name in self._allowed:
            return True
        if (default_port if port is None else port) != self._port:
            return False
        if name in self._names:
            return True
        if self._loopback:
            return False
        if name in ("localhost", socket.gethostname().lower()):
            return True
        try:
            ipaddress.ip_address(name.strip("[]"))
        except ValueError:
            return False
        return True

    def _origin_allowed(self, origin: str) -> bool:
        """An `Origin` header from this dashboard's own page: `http://` and our host, or an allowed name over
        `http://` or `https://` (a proxy in front may add TLS)."""
        scheme, sep, rest = origin.lower().partition("://")
        host = rest.rstrip("/")
        if sep and scheme == "http":
            return self._host_allowed(host)
        split = _split_host(host) if sep and scheme == "https" else None
        return split is not None and split[0] in self._allowed

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
            raise MethodNotAllowedError(f"{method} {path}: use {' or '.join(sorted(set(allowed)))}")
        raise NotFoundError(f"no route {path}; see docs/dashboard.md for the API")

    def _json_body(self, request: _RequestHandler, pattern: str) -> dict[str, Any]:
        """A POST's JSON object, after the cross-site checks; writes must carry `"confirm": true`."""
        origin = request.headers.get("Origin")
        if origin is not None and not self._origin_allowed(origin):
            raise ForbiddenError(f"Origin {origin!r} is not this dashboard ({self.url}): cross-site writes are refused")
        kind = (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise UnsupportedMediaTypeError(f"a POST must be Content-Type: application/json, not {kind or 'none'!r}")
        try:
            length = int(request.headers.get("Content-Length") or 0)
        except ValueError:
            raise MQClientError("bad Content-Length") from None
        if not 0 <= length <= _MAX_BODY:
            raise MQClientError(f"the body is {length} bytes; at most {_MAX_BODY}")
        raw = _read_body(request, length) if length else b"{}"
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
            raise MethodNotAllowedError(f"{method} {path}: static files take GET")
        if path == "/":
            path = "/static/index.html"
        if path == "/metrics":  # Prometheus' scrape: the figures of `mqlite.metrics`, as text
            text = render_prometheus(self._source.metrics())
            self._send(request, HTTPStatus.OK, text.encode("utf-8"), METRICS_CONTENT_TYPE, head=method == "HEAD")
            return
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

    def send_error(self, request: _RequestHandler, exc: Exception) -> None:
        """Answer `exc` as `{"error", "kind"}` with its status (500 for what `_status_of` does not know)."""
        status = _status_of(exc) or HTTPStatus.INTERNAL_SERVER_ERROR
        if request.request_version == "HTTP/0.9":  # a request line too bad to say its version, or HTTP/0.9:
            request.request_version = "HTTP/1.0"  # http.server would send the body alone
        try:
            self._send_json(request, status, {"error": str(exc), "kind": type(exc).__name__},
                            head=request.command == "HEAD")
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


def _read_body(request: _RequestHandler, length: int) -> bytes:
    """`length` bytes of a POST body: 400 when the client ends it early, 408 when it stops sending."""
    request.connection.settimeout(_BODY_TIMEOUT)
    try:
        raw = request.rfile.read(length)
    except TimeoutError:
        raise RequestTimeoutError(f"the body did not arrive: Content-Length is {length}, and nothing more came "
                                  f"for {_BODY_TIMEOUT:g} s") from None
    finally:
        request.connection.settimeout(_IDLE_TIMEOUT)  # the answer may take the usual time to be read
    if len(raw) < length:
        raise RequestError(f"the body ended after {len(raw)} of the {length} bytes its Content-Length says")
    return raw


def _split_host(host: str) -> tuple[str, int | None] | None:
    """(name, port or None) of `host[:port]` (`[v6]:port` for IPv6), or None when it is no such thing."""
    if host.startswith("["):
        end = host.find("]") + 1
        if end == 0:
            return None
        name, rest = host[:end], host[end:]
    else:
        name, sep, port = host.partition(":")
        rest = sep + port
    if not name:
        return None
    if not rest:
        return name, None
    digits = rest[1:]
    if rest[0] != ":" or not (digits.isascii() and digits.isdigit()) or len(digits) > 5:
        return None
    return name, int(digits)


_HOST_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?")


def allowed_host(name: str) -> str:
    """A name for `allow_hosts` (a DNS name or IP literal, no port, scheme or path), lower-cased;
    `ConfigError` saying why otherwise."""
    text = name.strip().lower() if isinstance(name, str) else ""
    if _HOST_NAME.fullmatch(text):
        return text
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        raise ConfigError(f"bad host name {name!r} to allow: give a DNS name or an IP address, without a port, "
                          "scheme or path (e.g. dash.example.com)") from None
    return f"[{ip}]" if ip.version == 6 else str(ip)


def _is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
