"""What a request handler sees, and the table of handlers by request code.

Each concern's module (`nameserver`, `send`, `pull`, `clients`, `offsets`, `admin`) registers its
functions with `@handles(code, mode=...)`:

- `INLINE` handlers run on the event loop thread: they must not block (a table look-up, a store
  read of mapped memory); one that finds it has to write files after all (a heartbeat of a new
  group creates its retry topic) calls `request.will_write_files()` first and runs again on the executor;
- `BLOCKING` handlers run on the server's bounded executor (a put that may wait for SYNC_FLUSH, an
  admin call that writes files);
- `ASYNC` handlers are coroutines on the loop (a long-polling pull parks there, not on a thread);
- `PUT` handlers write to the store: inline when the store flushes asynchronously (a put returns
  without waiting), on the executor under SYNC_FLUSH (a put waits for the group commit).

A handler returns the response (`request.reply(...)`), or None for a oneway request. It refuses
bad input by raising `RequestError(code, remark)`; `MQClientError` from the broker becomes
`SYSTEM_ERROR` with the error's text as the remark (what RocketMQ's `NettyRemotingAbstract` does
with a processor's exception), so a bad request never takes the connection down.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import MQClientError
from ..message import MessageQueue
from .codes import ResponseCode
from .frames import RemotingCommand
from .wirejson import from_wire_json

if TYPE_CHECKING:
    import asyncio

    from ..broker import Broker
    from .clients import ClientRegistry

__all__ = ["NAME_MAX", "Mode", "Handler", "HANDLERS", "handles", "RequestError", "NeedsExecutor", "Header", "Request",
           "Peer", "ServerState", "ParkedWaker"]

_JAVA_LONG = re.compile(r"[-+]?[0-9]{1,19}")
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
#: Longest topic or group name a header may carry (the broker checks the name itself; a retry or
#: dead-letter topic is a group name with a prefix, longer than RocketMQ's 127-character topics).
NAME_MAX = 1024
#: Longest string header field accepted (a topic is at most 127 chars; properties are the long one).
_MAX_TEXT = 1 << 20


class Mode(enum.Enum):
    """Where a handler runs."""

    INLINE = "inline"
    BLOCKING = "blocking"
    ASYNC = "async"
    PUT = "put"
    """A store write: inline under ASYNC_FLUSH (a put does not wait), on the executor under SYNC_FLUSH."""


class RequestError(Exception):
    """A request refused with a RocketMQ response code and a remark (never leaves the server)."""

    def __init__(self, code: int, remark: str, fields: dict[str, str] | None = None) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark
        self.fields = fields  # ext fields of the answer (`faults.ERROR_FIELD`), if any


def _missing(name: str) -> RequestError:
    # RemotingCommand.decodeCommandCustomHeader's words for a @CFNotNull field left out.
    return RequestError(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is null")


class Header:
    """A request's ext fields read as a custom header: each field parsed and range-checked like API input."""

    __slots__ = ("fields", "aliases", "_renamed")

    def __init__(self, fields: Mapping[str, str]) -> None:
        self.fields = fields
        #: Another name each field may come under (`SendMessageRequestHeaderV2`'s one-letter names).
        self.aliases: Mapping[str, str] | None = None
        self._renamed: Mapping[str, str] | None = None  # aliases, when no field is under its own name

    def use_aliases(self, aliases: Mapping[str, str]) -> None:
        """Read each field under its alias too (its own name first, when both are there)."""
        self.aliases = aliases
        # Only aliases present (what the clients send): one look-up per field, under the alias.
        self._renamed = aliases if self.fields.keys().isdisjoint(aliases) else None

    def get(self, name: str) -> str | None:
        """The raw text of field `name` (or of its alias), or None."""
        renamed = self._renamed
        if renamed is not None:
            return self.fields.get(renamed.get(name, name))
        value = self.fields.get(name)
        if value is None and self.aliases is not None:
            alias = self.aliases.get(name)
            if alias is not None:
                value = self.fields.get(alias)
        return value

    def text(self, name: str, default: str | None = None, *, max_length: int = _MAX_TEXT) -> str:
        """A string field; `default` when absent (None: required)."""
        value = self.get(name)
        if value is None:
            if default is None:
                raise _missing(name)
            return default
        if len(value) > max_length:
            raise RequestError(ResponseCode.SYSTEM_ERROR,
                               f"the custom field <{name}> is {len(value)} characters; at most {max_length} fit")
        return value

    def optional_text(self, name: str) -> str | None:
        """A string field, or None when absent."""
        value = self.get(name)
        return None if value is None else self.text(name)

    def _number(self, name: str, default: int | None, low: int, high: int) -> int:
        value = self.get(name)
        if value is None:
            if default is None:
                raise _missing(name)
            return default
        if value.isdigit() and value.isascii() and len(value) < 20:  # the common case, without a regex
            number = int(value)
        elif _JAVA_LONG.fullmatch(value.strip()):
            number = int(value.strip())
        else:
            raise RequestError(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is not a number: {value!r}")
        if not low <= number <= high:
            raise RequestError(ResponseCode.SYSTEM_ERROR,
                               f"the custom field <{name}> is {number}; it must be in [{low}, {high}]")
        return number

    def int32(self, name: str, default: int | None = None, *, low: int = _INT32[0], high: int = _INT32[1]) -> int:
        """A Java `Integer` field within [low, high]; `default` when absent (None: required)."""
        renamed = self._renamed  # (get, inlined: five of these a send)
        value = self.fields.get(renamed.get(name, name)) if renamed is not None else self.get(name)
        if value is not None and value.isdigit() and value.isascii() and len(value) < 11:  # the common case
            number = int(value)
            if low <= number <= high:
                return number
        return self._number(name, default, low, high)  # absent, signed, out of range: the checks and their words

    def int64(self, name: str, default: int | None = None, *, low: int = _INT64[0], high: int = _INT64[1]) -> int:
        """A Java `Long` field within [low, high]; `default` when absent (None: required)."""
        renamed = self._renamed  # (get, inlined: five of these a send)
        value = self.fields.get(renamed.get(name, name)) if renamed is not None else self.get(name)
        if value is not None and value.isdigit() and value.isascii() and len(value) < 19:  # the common case
            number = int(value)
            if low <= number <= high:
                return number
        return self._number(name, default, low, high)

    def flag(self, name: str, default: bool = False) -> bool:
        """A Java `boolean` field: `Boolean.parseBoolean` ("true" in any case is true, anything else false)."""
        value = self.get(name)
        return default if value is None else value.strip().lower() == "true"

    def queue(self, broker_name: str, topic_field: str = "topic", queue_field: str = "queueId") -> MessageQueue:
        """The `MessageQueue` named by a topic and a queue id field of this broker."""
        return MessageQueue(self.text(topic_field, max_length=NAME_MAX), broker_name,
                            self.int32(queue_field, low=0))


class Peer(Protocol):
    """The connection a request came on, as handlers use it."""

    @property
    def remote_address(self) -> str:
        """`host:port` of the client."""
        ...

    @property
    def local_address(self) -> str:
        """`host:port` the client reached this server at (what routes name)."""
        ...

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request that expects no answer (thread-safe; dropped when the connection is gone)."""
        ...

    def touch(self) -> None:
        """The client showed it is alive (a heartbeat)."""
        ...


class ParkedWaker(Protocol):
    """A parked pull's waker (`pull._LoopWaker`): setting `event` on the loop answers the pull now."""

    @property
    def event(self) -> asyncio.Event:
        """Set on the loop thread to wake the parked pull."""
        ...


class ServerState(Protocol):
    """What handlers need of the server."""

    @property
    def broker(self) -> Broker:
        """The served broker."""
        ...

    @property
    def address(self) -> str:
        """`host:port` clients reach this server at (routes name it)."""
        ...

    @property
    def clients(self) -> ClientRegistry:
        """The registry of remote consumers and producers (`clients.ClientRegistry`)."""
        ...

    def to_executor(self, fn: Callable[[], Any]) -> Awaitable[Any]:
        """Run `fn` on the bounded executor; await its result on the loop."""
        ...

    @property
    def acl_enabled(self) -> bool:
        """True when requests must carry ACL signatures."""
        ...

    @property
    def max_frame_size(self) -> int:
        """The largest frame this server reads (and, its clients alike, the largest answer it should send)."""
        ...

    @property
    def closing(self) -> bool:
        """True once `close()` began: parked pulls answer now."""
        ...

    def park(self, waker: ParkedWaker, peer: Peer) -> bool:
        """Remember a parked request's waker (`close()` sets it); False when the caps on parked
        requests are reached or the server closes: answer now instead."""
        ...

    def unpark(self, waker: ParkedWaker, peer: Peer) -> None:
        """Forget a waker `park` took."""
        ...


class NeedsExecutor(Exception):
    """Raised by a handler running on the loop (`Request.on_loop`), before any side effect, when the
    request turns out to write files (a topic to create): the server runs it again on the executor."""


class Request:
    """One request being handled: the command, its header, its connection and the server."""

    __slots__ = ("cmd", "header", "peer", "server", "on_loop")

    def __init__(self, cmd: RemotingCommand, peer: Peer, server: ServerState) -> None:
        self.cmd = cmd
        self.header = Header(cmd.ext_fields)
        self.peer = peer
        self.server = server
        #: True while an INLINE or PUT handler runs on the event loop thread (the server sets it).
        self.on_loop = False

    def will_write_files(self) -> None:
        """Call before writing files (creating a topic): on the loop it raises `NeedsExecutor`, so the
        request is handled again on the executor; there it returns."""
        if self.on_loop:
            raise NeedsExecutor()

    @property
    def broker(self) -> Broker:
        """The served broker."""
        return self.server.broker

    def reply(self, code: int = ResponseCode.SUCCESS, ext_fields: Mapping[str, object] | None = None,
              body: bytes | None = None, remark: str | None = None) -> RemotingCommand:
        """The response to this request."""
        return self.cmd.reply(code, ext_fields, body, remark)

    def body_json(self) -> Any:
        """The body parsed as fastjson JSON; `RequestError` when absent or unreadable."""
        if not self.cmd.body:
            raise RequestError(ResponseCode.SYSTEM_ERROR, f"request {self.cmd.code} needs a JSON body")
        try:
            return from_wire_json(self.cmd.body)
        except MQClientError as exc:
            raise RequestError(ResponseCode.SYSTEM_ERROR, str(exc)) from None


HandlerFn = Callable[[Request], Any]


class Handler:
    """A registered handler: the function and where it runs."""

    __slots__ = ("fn", "mode")

    def __init__(self, fn: HandlerFn, mode: Mode) -> None:
        self.fn = fn
        self.mode = mode


#: Request code -> handler; filled by the handler modules when `server` imports them.
HANDLERS: dict[int, Handler] = {}


def handles(*codes: int, mode: Mode = Mode.INLINE) -> Callable[[HandlerFn], HandlerFn]:
    """Register the decorated function for `codes`."""

    def register(fn: HandlerFn) -> HandlerFn:
        for code in codes:
            if code in HANDLERS:
                raise RuntimeError(f"request code {code} has two handlers")
            HANDLERS[int(code)] = Handler(fn, mode)
        return fn

    return register
