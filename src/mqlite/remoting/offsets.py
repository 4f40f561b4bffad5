"""Offsets: consumer offsets (`ConsumerManageProcessor`) and queue bounds (`AdminBrokerProcessor`).

`QUERY_CONSUMER_OFFSET`, `UPDATE_CONSUMER_OFFSET`, `GET_MAX_OFFSET`, `GET_MIN_OFFSET`,
`SEARCH_OFFSET_BY_TIMESTAMP`, `GET_EARLIEST_MSG_STORETIME`: each one call on the broker.
"""

from __future__ import annotations

from .handlers import NAME_MAX, Request, RequestError, handles
from .codes import RequestCode, ResponseCode
from .frames import RemotingCommand

__all__: list[str] = []


def _answer(request: Request, **fields: object) -> RemotingCommand | None:
    return None if request.cmd.is_oneway else request.reply(ResponseCode.SUCCESS, fields)


@handles(RequestCode.QUERY_CONSUMER_OFFSET)
def query_consumer_offset(request: Request) -> RemotingCommand | None:
    """The group's committed offset; for a group without one, 0 when the queue still starts at its
    first message (`Broker.offset_for_new_group`), else `QUERY_NOT_FOUND`."""
    h, broker = request.header, request.broker
    group = h.text("consumerGroup", max_length=NAME_MAX)
    mq = h.queue(broker.broker_name)
    offset = broker.query_offset(group, mq)
    if offset >= 0:
        return _answer(request, offset=offset)
    if h.get("setZeroIfNotFound") is not None and not h.flag("setZeroIfNotFound"):
        raise RequestError(ResponseCode.QUERY_NOT_FOUND, "Not found, do not set to zero, maybe this group boot first")
    if broker.offset_for_new_group(mq) == 0:
        return _answer(request, offset=0)
    raise RequestError(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")


@handles(RequestCode.UPDATE_CONSUMER_OFFSET)
def update_consumer_offset(request: Request) -> RemotingCommand | None:
    """Record the group's next offset (often oneway)."""
    h, broker = request.header, request.broker
    broker.commit_offset(h.text("consumerGroup", max_length=NAME_MAX), h.queue(broker.broker_name),
                         h.int64("commitOffset", low=0))
    return _answer(request)


@handles(RequestCode.GET_MAX_OFFSET)
def get_max_offset(request: Request) -> RemotingCommand | None:
    """The next queue offset to be written."""
    return _answer(request, offset=request.broker.max_offset(request.header.queue(request.broker.broker_name)))


@handles(RequestCode.GET_MIN_OFFSET)
def get_min_offset(request: Request) -> RemotingCommand | None:
    """The oldest queue offset still stored."""
    return _answer(request, offset=request.broker.min_offset(request.header.queue(request.broker.broker_name)))


@handles(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP)
def search_offset(request: Request) -> RemotingCommand | None:
    """The first queue offset stored at or after `timestamp`."""
    h, broker = request.header, request.broker
    return _answer(request, offset=broker.search_offset(h.queue(broker.broker_name), h.int64("timestamp")))


@handles(RequestCode.GET_EARLIEST_MSG_STORETIME)
def earliest_store_time(request: Request) -> RemotingCommand | None:
    """The store time of the queue's oldest message (-1 when it has none)."""
    broker = request.broker
    return _answer(request, timestamp=broker.earliest_store_time(request.header.queue(broker.broker_name)))
