"""Transactional messages: commit, rollback, and an UNKNOW outcome resolved by the broker's check-back.

send_message_in_transaction() stores a *half* message (invisible to consumers), runs your
local transaction, then commits (the message becomes visible) or rolls back (it never
does). When the local transaction answers UNKNOW, the broker's check service later asks
the producer group's check_local_transaction() until it gets an answer.

The store is opened with a short transaction_timeout (a half message is checked once it
is 1 s old; RocketMQ's default is 6 s) and transaction_check_interval (a check round every
0.5 s; default 30 s) so the example finishes quickly.

Run: python examples/transactions.py [store-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
import threading

import mqlite

State = mqlite.LocalTransactionState


class PaymentListener:
    """Runs the local transaction for each payment and answers the broker's check-backs."""

    def __init__(self) -> None:
        self.checked = threading.Event()

    def execute_local_transaction(self, msg: mqlite.Message, arg: str) -> mqlite.LocalTransactionState:
        # A real application would write to its database here. `arg` is what the caller passed.
        if arg == "ok":
            return State.COMMIT_MESSAGE
        if arg == "declined":
            return State.ROLLBACK_MESSAGE
        return State.UNKNOW  # e.g. the database timed out: we do not know yet

    def check_local_transaction(self, msg: mqlite.MessageExt) -> mqlite.LocalTransactionState:
        # Called on the broker's mqlite-txn-check thread for a half message left UNKNOW.
        # A real application would look the transaction up by msg.keys or msg.transaction_id.
        print(f"  check-back for {msg.keys[0]}: the payment went through after all -> commit")
        self.checked.set()
        return State.COMMIT_MESSAGE


def main(path: str) -> None:
    with mqlite.open(path, transaction_timeout=1.0, transaction_check_interval=0.5) as broker:
        broker.create_topic("payments", queue_nums=4)
        visible: list[str] = []
        lock = threading.Lock()
        two_visible = threading.Event()

        def on_payment(msgs: list[mqlite.MessageExt], context: mqlite.ConsumeConcurrentlyContext) -> None:
            with lock:
                visible.extend(m.keys[0] for m in msgs)
                if len(visible) == 2:
                    two_visible.set()

        listener = PaymentListener()
        consumer = mqlite.PushConsumer(broker, "payment-consumer", subscription={"payments": "*"}, listener=on_payment)
        producer = mqlite.TransactionProducer(broker, group="payment-producer", listener=listener)
        with consumer, producer:
            for key, outcome in (("pay-1", "ok"), ("pay-2", "declined"), ("pay-3", "db-timeout")):
                result = producer.send_message_in_transaction(mqlite.Message("payments", b"100 EUR", keys=key),
                                                              arg=outcome)
                print(f"{key}: local transaction answered {result.local_transaction_state.name}")
            # The producer must stay up: the check-back goes to a live producer of its group.
            if not listener.checked.wait(timeout=10) or not two_visible.wait(timeout=10):
                raise SystemExit(f"the check-back did not resolve pay-3 (visible: {visible})")

        print(f"consumers saw {sorted(visible)}; the rolled-back pay-2 never became visible "
              f"(found by key: {broker.query_message('payments', 'pay-2')})")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
