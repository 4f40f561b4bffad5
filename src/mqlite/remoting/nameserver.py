"""The name server's requests, answered from the topic table on the broker's own port.

`GET_ROUTEINFO_BY_TOPIC` names this server as broker 0 (the master) of cluster `DefaultCluster`,
at the address the client reached it at (so a server bound to every interface names the one the
client used). With `auto_create_topic` on, the default topic `TBW102` has a route, so RocketMQ's
producers send to an unknown topic with `defaultTopic` set and the send creates it, as with a real
broker. `GET_BROKER_CLUSTER_INFO`, `GET_ALL_TOPIC_LIST_FROM_NAMESERVER`, and
`DELETE_TOPIC_IN_NAMESRV` and the KV config codes (nothing to keep: routes come from the topic
table; `GET_KV_CONFIG` finds nothing) complete the set.

Routes for clients of RocketMQ 4.9.4 and later (request version >= 401) are standard JSON
(`{"0": addr}`), for older ones fastjson's (`{0: addr}`), as the 5.0.0 name server answers.
"""

from __future__ import annotations

from typing import Any

from ..topics import PERM_READ, PERM_WRITE
from .handlers import NAME_MAX, Request, RequestError, handles
from .codes import DEFAULT_TOPIC, RequestCode, ResponseCode
from .frames import RemotingCommand
from .wirejson import to_wire_json

__all__ = ["CLUSTER_NAME", "DEFAULT_TOPIC", "route_data"]

CLUSTER_NAME = "DefaultCluster"
_PERM_INHERIT = 1
#: `MQVersion.Version.V4_9_4.ordinal()`: clients from there on get standard JSON routes.
_STANDARD_JSON_VERSION = 401
_FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def _broker_data(request: Request) -> dict[str, Any]:
    return {"brokerAddrs": {0: request.peer.local_address}, "brokerName": request.broker.broker_name,
            "cluster": CLUSTER_NAME, "enableActingMaster": False}


def route_data(request: Request, topic: str) -> dict[str, Any] | None:
    """`TopicRouteData` of `topic` on this broker, or None when it has no route."""
    broker = request.broker
    config = broker.topic_config(topic)
    if config is not None:
        read, write, perm, flag = config.read_queue_nums, config.write_queue_nums, config.perm, config.topic_sys_flag
    elif topic == DEFAULT_TOPIC and broker.config.auto_create_topic and not broker.read_only:
        read = write = broker.config.default_topic_queue_nums
        perm, flag = PERM_READ | PERM_WRITE | _PERM_INHERIT, 0
    else:
        queues = broker.fetch_subscribe_queues(topic)  # a topic with files but no config: readable
        if not queues:
            return None
        read = write = len(queues)
        perm, flag = PERM_READ | PERM_WRITE, 0
    queue_data = {"brokerName": broker.broker_name, "perm": perm, "readQueueNums": read, "topicSysFlag": flag,
                  "writeQueueNums": write}
    return {"brokerDatas": [_broker_data(request)], "filterServerTable": {}, "queueDatas": [queue_data]}


def _standard(value: Any) -> Any:
    """`SerializerFeature.BrowserCompatible`: map keys as strings."""
    if isinstance(value, dict):
        return {str(k): _standard(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_standard(v) for v in value]
    return value


@handles(RequestCode.GET_ROUTEINFO_BY_TOPIC)
def get_route_info(request: Request) -> RemotingCommand | None:
    """Routes of a topic: this broker, its queue counts and permission."""
    h = request.header
    topic = h.text("topic", max_length=NAME_MAX)
    route = route_data(request, topic)
    if route is None:
        raise RequestError(ResponseCode.TOPIC_NOT_EXIST,
                           f"No topic route info in name server for the topic: {topic}{_FAQ}")
    if request.cmd.version >= _STANDARD_JSON_VERSION or h.flag("acceptStandardJsonOnly"):
        route = _standard(route)
    return request.reply(body=to_wire_json(route))


@handles(RequestCode.GET_BROKER_CLUSTER_INFO)
def get_cluster_info(request: Request) -> RemotingCommand | None:
    """`ClusterInfo`: one cluster of one broker."""
    name = request.broker.broker_name
    return request.reply(body=to_wire_json({"brokerAddrTable": {name: _broker_data(request)},
                                            "clusterAddrTable": {CLUSTER_NAME: [name]}}))


@handles(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
def get_all_topics(request: Request) -> RemotingCommand | None:
    """`TopicList`: every topic of the broker (the default topic too when producers may create topics)."""
    broker = request.broker
    topics = set(broker.topic_list())
    if broker.config.auto_create_topic and not broker.read_only:
        topics.add(DEFAULT_TOPIC)
    return request.reply(body=to_wire_json({"topicList": sorted(topics)}))


@handles(RequestCode.DELETE_TOPIC_IN_NAMESRV)
def delete_topic_in_namesrv(request: Request) -> RemotingCommand | None:
    """Nothing to do: routes come from the broker's topic table (`DELETE_TOPIC_IN_BROKER` deletes)."""
    request.header.text("topic", max_length=NAME_MAX)
    return request.reply()


@handles(RequestCode.GET_KV_CONFIG)
def get_kv_config(request: Request) -> RemotingCommand | None:
    """The name server's KV store holds nothing here (order-topic settings come from the topic table)."""
    h = request.header
    raise RequestError(ResponseCode.QUERY_NOT_FOUND,
                       f"No config item, Namespace: {h.text('namespace', '')} Key: {h.text('key', '')}")


@handles(RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG)
def put_or_delete_kv_config(request: Request) -> RemotingCommand | None:
    """Accepted and dropped: `mqadmin deleteTopic` deletes the topic's order config here after the topic."""
    return None if request.cmd.is_oneway else request.reply()
