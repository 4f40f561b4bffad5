"""mqlite's exceptions and RocketMQ's response codes: one table, read one way by the server, the other by the client.

A server answers an exception a handler raised with the code of the first row the exception is an
instance of (`refusal`); a client raises, for a refused request, the exception of the first row with
the answer's code (`exception_for`). Where one code stands for more than one exception
(SERVICE_NOT_AVAILABLE: a closed broker or a full disk), the server names the exception in the ext
field `mqliteError` when it is not the code's first row, so the client never reads the remark's prose.
A real RocketMQ broker never sends that field: its SERVICE_NOT_AVAILABLE (whose remark lists "the
broker's disk is full" among possible causes whatever the cause) raises `IllegalStateError`.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import DiskFullError, IllegalStateError, MQClientError, MQLiteError, SendTimeoutError
from .codes import ResponseCode

__all__ = ["ERROR_FIELD", "EXCEPTION_CODES", "PUT_EXCEPTION_CODES", "refusal", "exception_for"]

#: The response ext field that names the exception when the code alone names another one.
ERROR_FIELD = "mqliteError"

Table = tuple[tuple[type[MQLiteError], ResponseCode], ...]

#: Any request: a closed (or read-only) broker and a full disk are SERVICE_NOT_AVAILABLE, as RocketMQ's
#: `PutMessageStatus.SERVICE_NOT_AVAILABLE`; bad input is SYSTEM_ERROR, as `NettyRemotingAbstract` answers
#: an exception. Another `MQLiteError` (the store's own words) is SYSTEM_ERROR too, but logged.
EXCEPTION_CODES: Table = (
    (IllegalStateError, ResponseCode.SERVICE_NOT_AVAILABLE),
    (DiskFullError, ResponseCode.SERVICE_NOT_AVAILABLE),
    (MQClientError, ResponseCode.SYSTEM_ERROR),
)
#: A put (SEND_MESSAGE and friends), as `SendMessageProcessor.handlePutMessageResult` answers it.
_PUT_ROWS: Table = (
    (SendTimeoutError, ResponseCode.FLUSH_DISK_TIMEOUT),
    (MQClientError, ResponseCode.MESSAGE_ILLEGAL),
)
PUT_EXCEPTION_CODES: Table = _PUT_ROWS + tuple(row for row in EXCEPTION_CODES if row[0] not in dict(_PUT_ROWS))

_BY_CODE: dict[int, type[MQLiteError]] = {}
for _kind, _code in EXCEPTION_CODES + _PUT_ROWS:
    _BY_CODE.setdefault(_code, _kind)  # a code's first row is what it means without ERROR_FIELD
_BY_NAME = {kind.__name__: kind for kind, _ in PUT_EXCEPTION_CODES}


def refusal(exc: BaseException, table: Table = EXCEPTION_CODES) -> tuple[ResponseCode, dict[str, str]] | None:
    """The response code and ext fields that answer `exc` (None: not in `table`).

    >>> refusal(DiskFullError("the disk is full"))
    (<ResponseCode.SERVICE_NOT_AVAILABLE: 14>, {'mqliteError': 'DiskFullError'})
    >>> refusal(IllegalStateError("closed"))
    (<ResponseCode.SERVICE_NOT_AVAILABLE: 14>, {})
    """
    for kind, code in table:
        if isinstance(exc, kind):
            return code, ({} if _BY_CODE.get(code) is kind else {ERROR_FIELD: kind.__name__})
    return None


def exception_for(code: int, ext_fields: Mapping[str, str] | None) -> type[MQLiteError]:
    """The exception a client raises for a refusal with `code` and `ext_fields` (`MQClientError` for a
    code the table does not have).

    >>> exception_for(ResponseCode.SERVICE_NOT_AVAILABLE, {"mqliteError": "DiskFullError"}).__name__
    'DiskFullError'
    >>> exception_for(ResponseCode.SERVICE_NOT_AVAILABLE, {}).__name__
    'IllegalStateError'
    """
    named = _BY_NAME.get((ext_fields or {}).get(ERROR_FIELD, ""))
    return named if named is not None else _BY_CODE.get(code, MQClientError)
