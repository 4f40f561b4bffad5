"""`ProcessQueue`: the messages of one queue a consumer has pulled and not finished.

Messages sit in a map sorted by queue offset (RocketMQ's TreeMap; here a
`sortedcontainers.SortedDict`). The committed offset is the smallest offset
still in the map, so an unfinished message is never skipped however the
consume threads finish. Counts and body sizes drive the pull flow control.
Orderly consumption moves a batch into a second map while it is being
consumed (`take_messages`), then `commit`s it or puts it back (`rollback`,
`make_message_to_consume_again`).

One lock per queue, taken once per batch, never while user code runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from sortedcontainers import SortedDict

from ..message import PROPERTY_CONSUME_START_TIMESTAMP, MessageExt

__all__ = ["ProcessQueue", "PULL_MAX_IDLE_MS", "REBALANCE_LOCK_MAX_LIVE_MS"]

#: A queue nobody pulled for 2 minutes is considered stale by rebalance (`PULL_MAX_IDLE_TIME`).
PULL_MAX_IDLE_MS = 120_000
#: The client considers its orderly lock expired after 30 s without renewal.
REBALANCE_LOCK_MAX_LIVE_MS = 30_000


class ProcessQueue:
    """Pulled, unfinished messages of one queue; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: Held by the orderly worker while it consumes this queue (`MessageQueueLock` + `consumeLock`).
        self.consume_lock = threading.Lock()
        self._msgs: SortedDict = SortedDict()
        self._consuming: SortedDict = SortedDict()
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0
        self.dropped = False
        self.consuming = False
        self.locked = False
        self.last_lock_timestamp = 0
        self.last_pull_timestamp = 0
        self.last_consume_timestamp = 0
        #: Set by a pull loop that skipped this queue for flow control; the consume side clears it and wakes the loop.
        self.flow_blocked = False

    # -- pulling ---------------------------------------------------------------------------------------------
    def put_messages(self, msgs: Sequence[MessageExt]) -> bool:
        """Add pulled messages (duplicates ignored). True when an orderly worker should be woken."""
        with self.lock:
            tree = self._msgs
            added = 0
            size = 0
            for msg in msgs:
                offset = msg.queue_offset
                if offset not in tree:
                    tree[offset] = msg
                    added += 1
                    size += len(msg.body)
            self.msg_count += added
            self.msg_size += size
            if msgs:
                self.queue_offset_max = max(self.queue_offset_max, msgs[-1].queue_offset)
            if tree and not self.consuming:
                self.consuming = True
                return True
            return False

    @property
    def max_span(self) -> int:
        """Offset distance between the first and last cached message (`getMaxSpan`)."""
        with self.lock:
            tree = self._msgs
            return tree.peekitem(-1)[0] - tree.peekitem(0)[0] if tree else 0

    # -- concurrent consumption ----------------------------------------------------------------------------
    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Forget consumed messages; the offset to commit, or -1 when the queue was empty.

        The result is the smallest offset still cached, or `queue_offset_max + 1`
        once nothing is left (`ProcessQueue.removeMessage`).
        """
        with self.lock:
            tree = self._msgs
            if not tree:
                return -1
            removed = 0
            size = 0
            pop = tree.pop
            for msg in msgs:
                if pop(msg.queue_offset, None) is not None:
                    removed += 1
                    size += len(msg.body)
            self.msg_count -= removed
            self.msg_size -= size
            return tree.peekitem(0)[0] if tree else self.queue_offset_max + 1

    def expired(self, now_ms: int, timeout_ms: int, limit: int = 16) -> list[MessageExt]:
        """Up to `limit` of the oldest messages consumed for longer than `timeout_ms` (`cleanExpiredMsg`)."""
        found: list[MessageExt] = []
        with self.lock:
            for _, msg in self._msgs.items()[:limit]:
                start = msg.properties.get(PROPERTY_CONSUME_START_TIMESTAMP)
                if start and start.isdigit() and now_ms - int(start) > timeout_ms:
                    found.append(msg)
                else:
                    break  # the oldest one is still within time, so are the younger ones
        return found

    # -- orderly consumption ---------------------------------------------------------------------------------
    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """Move up to `batch_size` of the first messages into the consuming map and return them."""
        with self.lock:
            taken: list[MessageExt] = []
            tree = self._msgs
            while tree and len(taken) < batch_size:
                offset, msg = tree.popitem(0)
                self._consuming[offset] = msg
                taken.append(msg)
            if not taken:
                self.consuming = False
            return taken

    def has_temp_message(self) -> bool:
        """True when messages wait to be taken."""
        with self.lock:
            return bool(self._msgs)

    def commit(self) -> int:
        """The taken batch is done: the offset to commit (last taken + 1), or -1 when nothing was taken."""
        with self.lock:
            consuming = self._consuming
            if not consuming:
                return -1
            offset = consuming.peekitem(-1)[0]
            self.msg_count -= len(consuming)
            self.msg_size -= sum(len(m.body) for m in consuming.values())
            consuming.clear()
            return offset + 1

    def rollback(self) -> None:
        """Put every taken message back to be consumed again."""
        with self.lock:
            self._msgs.update(self._consuming)
            self._consuming.clear()

    def make_message_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Put these taken messages back (a suspended batch)."""
        with self.lock:
            for msg in msgs:
                self._consuming.pop(msg.queue_offset, None)
                self._msgs[msg.queue_offset] = msg

    # -- lifecycle -------------------------------------------------------------------------------------------
    def clear(self) -> None:
        """Drop everything cached (a seek or an offset reset)."""
        with self.lock:
            self._msgs.clear()
            self._consuming.clear()
            self.msg_count = 0
            self.msg_size = 0
            self.queue_offset_max = 0
            self.consuming = False

    def is_lock_expired(self, now_ms: int) -> bool:
        """The client-side view of the orderly lock: stale after 30 s without renewal."""
        return now_ms - self.last_lock_timestamp > REBALANCE_LOCK_MAX_LIVE_MS

    def is_pull_expired(self, now_ms: int) -> bool:
        """Nobody pulled this queue for two minutes."""
        return now_ms - self.last_pull_timestamp > PULL_MAX_IDLE_MS

    def first_offset(self) -> int | None:
        """The smallest cached offset, or None."""
        with self.lock:
            return self._msgs.peekitem(0)[0] if self._msgs else None

    def __len__(self) -> int:
        return self.msg_count

    def __repr__(self) -> str:
        state = " dropped" if self.dropped else ""
        return f"<ProcessQueue {self.msg_count} msgs, {self.msg_size} B{state}>"
