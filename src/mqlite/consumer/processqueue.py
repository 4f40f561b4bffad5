"""`ProcessQueue`: the messages of one queue a consumer has pulled and not finished.

Orderly consumption keeps messages in a map ordered by queue offset (RocketMQ's TreeMap). Pulls
add offsets in increasing order, so the map is a dict (insertion order) plus
a deque of offsets whose removed entries are skipped lazily: adding,
removing and finding the smallest offset cost O(1) amortised, about 0.4 us a
message against 2.4 us for a `sortedcontainers.SortedDict` (measured). The
rare out-of-order insert (an orderly batch put back) re-sorts the deque.
Orderly consumption moves a batch into a second map while it is being
consumed (`take_messages`), then `commit`s it (last taken + 1) or puts it
back (`rollback`, `make_message_to_consume_again`). Counts and body sizes
drive the pull flow control.

Concurrent push consumption and lite pull keep each pull result whole
instead (`PulledRun`: no step per message on the pull thread). A push run
has a done flag per message; the committed offset is its first message not
done, so it never passes an unfinished one either.

One lock per queue, taken once per batch, never while user code runs. A
push consumer's consume threads do not take it for a batch they finished:
they `ack` its index range into a deque, and a task of several messages
publishes how far it got (`track`, one list store a message), which the pull
thread folds in (`fold_acked`) on its next round, before it commits; so the
committed offset still never passes a message not folded in. Failures,
send-backs and timeouts mark messages done one by one (`remove_messages`).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

from ..errors import MQClientError
from ..message import MessageExt
from ..record import body_bytes

__all__ = ["ProcessQueue", "PulledRun", "REBALANCE_LOCK_MAX_LIVE_MS"]

#: The client considers its orderly lock expired after 30 s without renewal.
REBALANCE_LOCK_MAX_LIVE_MS = 30_000

_OFFSET = attrgetter("queue_offset")


class PulledRun:
    """One pull result, kept whole: a lite pull consumer's, handed out from its front (`ProcessQueue.put_run`),
    or a push consumer's, whose messages are marked done one by one or by ranges (`ProcessQueue.push_run`)."""

    __slots__ = ("msgs", "next", "size", "live", "done", "left", "unsettled")

    def __init__(self, msgs: list[MessageExt], size: int) -> None:
        self.msgs = msgs
        self.next = 0  # index of the first message not handed out (lite pull) / not done (push) yet
        self.size = size  # body bytes not handed out / not done yet
        self.live = True  # False once its process queue was cleared: hand-outs then count nothing
        #: A push run's done flag per message (1: consumed or sent back), and how many are not done.
        self.done: bytearray | None = None
        self.left = len(msgs)
        #: A push run whose `size` still counts bodies of ranges acked (`ProcessQueue.settle_size`).
        self.unsettled = False

    def __repr__(self) -> str:
        return f"<PulledRun {self.next}/{len(self.msgs)} {'done' if self.done is not None else 'handed out'}>"


class ProcessQueue:
    """Pulled, unfinished messages of one queue; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: Held by the orderly worker while it consumes this queue (`MessageQueueLock` + `consumeLock`).
        self.consume_lock = threading.Lock()
        self._msgs: dict[int, MessageExt] = {}
        self._order: deque[int] = deque()  # offsets of _msgs ascending, plus removed ones not yet skipped
        self._consuming: dict[int, MessageExt] = {}
        self._runs: deque[PulledRun] = deque()  # pull results of a lite pull or concurrent push consumer, oldest first
        #: Ranges of push runs consumed, not folded yet (`ack`, `fold_acked`).
        self._acked: deque[tuple[PulledRun, int, int]] = deque()
        #: Progress of running tasks: `[run, start, stop]`, `stop` raised as each message succeeds (`track`).
        self._progress: dict[int, list[Any]] = {}
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0
        self.dropped = False
        self.consuming = False
        self.locked = False
        self.last_lock_timestamp = 0
        #: Set by a pull loop that skipped this queue for flow control; the consume side clears it and wakes the loop.
        self.flow_blocked = False
        #: The highest offset found committable (`fold_acked`, `remove_messages`), and what the owner last
        #: committed of it: consume threads only note it (under the lock they already hold); the pull thread
        #: commits it.
        self.pending_offset = -1
        self.committed_offset = -1

    # -- the offset-ordered map (call with `lock` held) -----------------------------------------------------
    def _first(self) -> int | None:
        order, tree = self._order, self._msgs
        while order and order[0] not in tree:
            order.popleft()
        return order[0] if order else None

    def _last(self) -> int | None:
        order, tree = self._order, self._msgs
        while order and order[-1] not in tree:
            order.pop()
        return order[-1] if order else None

    def _put_back(self, msgs: Iterable[MessageExt]) -> None:
        tree = self._msgs
        for msg in msgs:
            tree[msg.queue_offset] = msg
        self._order = deque(sorted(tree))

    # -- pulling ---------------------------------------------------------------------------------------------
    def put_messages(self, msgs: Sequence[MessageExt]) -> bool:
        """Add pulled messages (duplicates ignored). True when an orderly worker should be woken."""
        with self.lock:
            tree = self._msgs
            order = self._order
            tail = order[-1] if order else -1
            added = 0
            size = 0
            for msg in msgs:
                offset = msg.queue_offset
                if offset not in tree:
                    tree[offset] = msg
                    if offset > tail:
                        order.append(offset)
                        tail = offset
                    else:  # behind the tail: re-sort (never on the pull path, which only moves forward)
                        self._order = order = deque(sorted(tree))
                        tail = order[-1]
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
            runs = self._runs
            if runs:
                first_run = runs[0]
                first_offset = first_run.msgs[first_run.next].queue_offset
                for run in reversed(runs):  # a push run's last message not done (its tail may be done)
                    done = run.done
                    if done is None:
                        return run.msgs[-1].queue_offset - first_offset
                    if run.left:
                        return run.msgs[done.rfind(0)].queue_offset - first_offset
                return 0
            first = self._first()
            last = self._last()
            return last - first if first is not None and last is not None else 0

    # -- lite pull: whole pull results --------------------------------------------------------------------
    def put_run(self, msgs: list[MessageExt]) -> PulledRun:
        """Add one pull result (non-empty, ascending offsets, after everything cached) as a whole."""
        run = PulledRun(msgs, body_bytes(msgs))
        with self.lock:
            self._runs.append(run)
            self.msg_count += len(msgs)
            self.msg_size += run.size
            last = msgs[-1].queue_offset
            if last > self.queue_offset_max:
                self.queue_offset_max = last
        return run

    def remove_from_run(self, run: PulledRun, msgs: Sequence[MessageExt]) -> int:
        """`msgs`, the front of `run`'s messages not handed out yet, are handed out: the offset to commit.

        That is the first message not handed out of the oldest unfinished run,
        or `queue_offset_max + 1` once every run is done; -1 when `run` no
        longer belongs here (the queue was cleared since). Raises `MQClientError`
        when `msgs` is not the front of what is left of `run`.
        """
        count = len(msgs)
        if not count:
            return -1
        with self.lock:
            if not run.live:
                return -1
            start = run.next
            end = start + count
            left = run.msgs
            if end > len(left) or msgs[0] is not left[start] or msgs[-1] is not left[end - 1]:
                raise MQClientError(f"hand-outs of a pull result go in order: expected offset "
                                 f"{left[start].queue_offset}, got {msgs[0].queue_offset} to {msgs[-1].queue_offset}")
            run.next = end
            if end == len(left):
                size = run.size
            else:  # a part (an iteration): count its bytes
                size = body_bytes(msgs)
            run.size -= size
            self.msg_size -= size
            self.msg_count -= count
            runs = self._runs
            while runs and runs[0].next == len(runs[0].msgs):
                runs.popleft()
            if runs:
                first = runs[0]
                return first.msgs[first.next].queue_offset
            return self.queue_offset_max + 1

    # -- push: whole pull results with a done flag per message ----------------------------------------------
    def push_run(self, msgs: list[MessageExt]) -> PulledRun:
        """Cache a push consumer's pull result (non-empty, ascending offsets) whole: no step per message.

        Consume threads mark its messages done by index ranges (`ack`, folded by
        `fold_acked`) or one by one (`remove_messages`: failures, send-backs,
        timeouts). Messages at or below an offset already cached are dropped.
        """
        with self.lock:
            if (self._runs or self._msgs) and msgs[0].queue_offset <= self.queue_offset_max:
                msgs = [msg for msg in msgs if msg.queue_offset > self.queue_offset_max]
            run = PulledRun(msgs, body_bytes(msgs))
            if not msgs:
                run.live = False
                return run
            run.done = bytearray(len(msgs))
            self._runs.append(run)
            self.msg_count += len(msgs)
            self.msg_size += run.size
            self.queue_offset_max = msgs[-1].queue_offset
            return run

    def _mark_done(self, run: PulledRun, start: int, stop: int, exact: bool = False) -> int:
        """Mark `run.msgs[start:stop]` done, counting only those not done yet (`lock` held).

        Their bytes leave `msg_size` once the whole run is done, or at once when
        `exact` (a removal one by one). A range acked while the run is still in
        progress leaves them counted until `settle_size` recounts (the pull
        thread does before it lets the size hold a queue back): no step per
        message on the common path. Returns how many were not done yet.
        """
        done = run.done
        if done is None or not run.live:
            return 0  # the queue was cleared since: nothing of it is counted any more
        fresh = done.count(0, start, stop)
        if not fresh:
            return 0
        left = run.left - fresh
        if fresh == stop - start:
            done[start:stop] = b"\x01" * fresh
            size = body_bytes(run.msgs[start:stop]) if exact and left else 0
        else:  # some of them were removed one by one already (a timeout's send-back, say)
            size = 0
            msgs = run.msgs
            for index in range(start, stop):
                if not done[index]:
                    done[index] = 1
                    if exact and left:
                        size += len(msgs[index].body)
        run.left = left
        self.msg_count -= fresh
        if left:
            if size:
                run.size -= size
                self.msg_size -= size
            elif not exact:
                run.unsettled = True
            if done[run.next]:
                run.next = done.find(0, run.next)
        else:
            self.msg_size -= run.size
            run.size = 0
            run.next = len(run.msgs)
            runs = self._runs
            while runs and not runs[0].left:
                runs.popleft()
        return fresh

    def settle_size(self) -> int:
        """`msg_size` made exact (bodies of messages not done only) and returned.

        Between settlements `msg_size` may still count the bodies of ranges
        acked in push runs not finished yet, never less than the exact figure:
        flow control settles before it holds a queue back for its size.
        """
        with self.lock:
            for run in self._runs:
                if run.unsettled:
                    done = run.done
                    assert done is not None
                    size = body_bytes([msg for msg, flag in zip(run.msgs, done) if not flag])
                    self.msg_size -= run.size - size
                    run.size = size
                    run.unsettled = False
            return self.msg_size

    def _locate(self, msg: MessageExt) -> tuple[PulledRun, int] | None:
        """The push run holding `msg` (by queue offset) and its index there (`lock` held)."""
        offset = msg.queue_offset
        for run in self._runs:
            msgs = run.msgs
            if msgs[0].queue_offset <= offset <= msgs[-1].queue_offset:
                index = bisect_left(msgs, offset, key=_OFFSET)
                return (run, index) if msgs[index].queue_offset == offset else None
        return None

    # -- concurrent consumption ----------------------------------------------------------------------------
    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Forget consumed messages; the offset to commit, or -1 when the queue was empty.

        The result is the smallest offset still cached, or `queue_offset_max + 1`
        once nothing is left (`ProcessQueue.removeMessage`).
        """
        with self.lock:
            tree = self._msgs
            if self._runs:
                for msg in msgs:
                    found = self._locate(msg)
                    # The very object: after `clear`, a late removal of an old run's message must not mark
                    # the new run's message at the same offset done.
                    if found is not None and found[0].msgs[found[1]] is msg:
                        self._mark_done(found[0], found[1], found[1] + 1, exact=True)
                return self._note_committable()
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
            return self._note_committable()

    def _note_committable(self) -> int:
        """The smallest offset still cached, or `queue_offset_max + 1`; noted as pending (`lock` held)."""
        runs = self._runs
        if runs:
            first: int | None = runs[0].msgs[runs[0].next].queue_offset
        else:
            first = self._first()
        offset = first if first is not None else self.queue_offset_max + 1
        if offset > self.pending_offset:
            self.pending_offset = offset
        return offset

    def ack(self, run: PulledRun, start: int, stop: int) -> None:
        """`run.msgs[start:stop]` were consumed: noted without the lock (a consume thread); `fold_acked` marks them.

        The hand-off of a consume thread's successful batch or task: one
        `deque.append`, atomic under the GIL, so consume threads never queue
        on `lock`, and the pull thread folds a range in a constant number of
        Python steps (the flags themselves are counted and set in C).
        """
        self._acked.append((run, start, stop))

    def track(self, run: PulledRun, start: int) -> list[Any]:
        """Publish a running task's progress: `cell[2] = index + 1` once message `index` succeeded.

        `fold_acked` marks `run.msgs[start:cell[2]]` done on every fold, so a
        queue given up mid-task still commits what the task consumed so far.
        Only `cell[2]` changes (one list store, atomic under the GIL), so every
        message below it succeeded; a failure ends the cell (`untrack`) and the
        task tracks the rest in a new one.
        """
        cell = [run, start, start]
        self._progress[id(cell)] = cell
        return cell

    def untrack(self, cell: list[Any]) -> None:
        """The task acknowledged `cell`'s range (`ack`) or gave it up: stop folding it."""
        self._progress.pop(id(cell), None)

    def fold_acked(self) -> int:
        """Mark what `ack` noted done (the owner's thread): the offset to commit, or -1 when nothing was noted.

        Like `remove_messages`: the smallest offset still cached (an acked
        message not folded yet counts as cached, so the offset never passes
        it), or `queue_offset_max + 1` once nothing is left. A fold that marked
        nothing (stale acks of a cleared queue, progress folded before) notes
        nothing either: -1.
        """
        acked = self._acked
        progress = self._progress
        if not acked and not progress:
            return -1
        with self.lock:
            take = acked.popleft
            mark = self._mark_done
            marked = 0
            while acked:  # until empty: an ack appended meanwhile is folded too
                marked += mark(*take())
            for run, start, stop in list(progress.values()):
                if stop > start:
                    marked += mark(run, start, stop)
            return self._note_committable() if marked else -1

    @property
    def acked_pending(self) -> int:
        """Messages `ack` noted that `fold_acked` has not marked done yet."""
        return sum(stop - start for _, start, stop in list(self._acked))

    # -- orderly consumption ---------------------------------------------------------------------------------
    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """Move up to `batch_size` of the first messages into the consuming map and return them."""
        with self.lock:
            taken: list[MessageExt] = []
            tree = self._msgs
            while len(taken) < batch_size:
                offset = self._first()
                if offset is None:
                    break
                self._order.popleft()
                msg = tree.pop(offset)
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
            offset = max(consuming)
            self.msg_count -= len(consuming)
            self.msg_size -= sum(len(m.body) for m in consuming.values())
            consuming.clear()
            return offset + 1

    def rollback(self) -> None:
        """Put every taken message back to be consumed again."""
        with self.lock:
            self._put_back(self._consuming.values())
            self._consuming.clear()

    def make_message_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Put these taken messages back (a suspended batch)."""
        with self.lock:
            msgs = list(msgs)
            for msg in msgs:
                self._consuming.pop(msg.queue_offset, None)
            self._put_back(msgs)

    # -- lifecycle -------------------------------------------------------------------------------------------
    def clear(self) -> None:
        """Drop everything cached (a seek or an offset reset)."""
        with self.lock:
            self._msgs.clear()
            self._order.clear()
            self._consuming.clear()
            for run in self._runs:
                run.live = False
            self._runs.clear()
            self._acked.clear()
            self._progress.clear()
            self.msg_count = 0
            self.msg_size = 0
            self.queue_offset_max = 0
            self.consuming = False
            self.pending_offset = self.committed_offset = -1

    def is_lock_expired(self, now_ms: int) -> bool:
        """The client-side view of the orderly lock: stale after 30 s without renewal."""
        return now_ms - self.last_lock_timestamp > REBALANCE_LOCK_MAX_LIVE_MS

    def first_offset(self) -> int | None:
        """The smallest cached offset, or None."""
        with self.lock:
            if self._runs:
                return self._runs[0].msgs[self._runs[0].next].queue_offset
            return self._first()

    def __len__(self) -> int:
        return self.msg_count

    def __repr__(self) -> str:
        state = " dropped" if self.dropped else ""
        return f"<ProcessQueue {self.msg_count} msgs, {self.msg_size} B{state}>"
