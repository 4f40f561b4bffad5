"""Serving a store over Apache RocketMQ's remoting protocol (layer L4: adapters).

`protocol` is the wire (frames, codes, body codecs, ACL signing); `server` runs the
asyncio loop that answers RocketMQ's clients and mqlite's own `RemoteBroker`; the
handler modules translate one concern's requests into calls on the `Broker`.
"""
