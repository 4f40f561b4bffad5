"""Unit-testing code that uses mqlite queues, with the `mqlite.testing` pytest plugin.

The application below bills each order as it comes in and reminds the customer
two hours later. Its tests (`TESTS`, what you would keep in `tests/test_orders.py`)
get a fresh broker per test from the `mqlite_broker` fixture, move time with
`mqlite_clock.advance(seconds)` and wait for the consumers with `wait_idle`, so
the two-hour reminder and the retry of a failed payment are tested in
milliseconds, with no sleep. Installing mqlite registers the plugin: no
conftest.py. This script writes the tests to a file and runs pytest on them.

Run: python examples/unit_testing.py [work-dir]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pytest

import mqlite

# -- the application -------------------------------------------------------------------------------------
REMINDER_DELAY_LEVEL = 18  # two hours with RocketMQ's default delay levels


class PaymentGateway(Protocol):
    def charge(self, order_id: str, cents: int) -> None: ...


def place_order(producer: mqlite.Producer, order_id: str, cents: int) -> None:
    """Publish the order for billing now, and its reminder for two hours from now."""
    producer.send(mqlite.Message("orders", str(cents).encode(), keys=order_id))
    producer.send(mqlite.Message("reminders", order_id.encode(), keys=order_id,
                                 delay_time_level=REMINDER_DELAY_LEVEL))


def billing_listener(gateway: PaymentGateway) -> Callable[[list[mqlite.MessageExt], object], None]:
    """A push listener that charges each order; if the gateway raises, mqlite retries the order later."""

    def bill(msgs: list[mqlite.MessageExt], context: object) -> None:
        for msg in msgs:
            gateway.charge(msg.keys[0], int(msg.body))

    return bill


# -- its tests ---------------------------------------------------------------------------------------------
TESTS = '''\
import mqlite
from mqlite.testing import wait_idle

from unit_testing import billing_listener, place_order


class Gateway:
    """A fake payment gateway that is down for its first `outages` calls."""

    def __init__(self, outages=0):
        self.outages = outages
        self.charged = []

    def charge(self, order_id, cents):
        if self.outages:
            self.outages -= 1
            raise ConnectionError("gateway down")
        self.charged.append((order_id, cents))


def test_an_order_is_charged_once(mqlite_broker):
    gateway = Gateway()
    with mqlite.PushConsumer(mqlite_broker, "billing", subscription={"orders": "*"},
                             listener=billing_listener(gateway)) as billing, \\
            mqlite.Producer(mqlite_broker, "shop") as shop:
        place_order(shop, "o-1", 1999)
        wait_idle(mqlite_broker, billing)
    assert gateway.charged == [("o-1", 1999)]


def test_the_reminder_comes_two_hours_later(mqlite_broker, mqlite_clock):
    with mqlite.LitePullConsumer(mqlite_broker, "mailer") as mailer, mqlite.Producer(mqlite_broker, "shop") as shop:
        mailer.subscribe("reminders")
        place_order(shop, "o-2", 500)
        mqlite_clock.advance(2 * 3600 - 1)
        assert mailer.poll(timeout=0) == []
        mqlite_clock.advance(1)
        assert [m.body for m in mailer.poll(timeout=5)] == [b"o-2"]


def test_a_failed_charge_is_retried_ten_seconds_later(mqlite_broker, mqlite_clock):
    gateway = Gateway(outages=1)
    with mqlite.PushConsumer(mqlite_broker, "billing", subscription={"orders": "*"},
                             listener=billing_listener(gateway)) as billing, \\
            mqlite.Producer(mqlite_broker, "shop") as shop:
        place_order(shop, "o-3", 700)
        wait_idle(mqlite_broker, billing)
        assert gateway.charged == []              # the gateway was down: retry at delay level 3
        mqlite_clock.advance(10)
        wait_idle(mqlite_broker, billing)
    assert gateway.charged == [("o-3", 700)]
'''


def main(workdir: Path) -> int:
    workdir.mkdir(parents=True, exist_ok=True)
    tests = workdir / "test_orders.py"
    tests.write_text(TESTS)
    print(f"wrote the application's tests to {tests}; running pytest on them:")
    # The application module (this file) is importable as `unit_testing`: its directory is sys.path[0].
    # This script imported mqlite before pytest started, so pytest cannot rewrite the plugin's asserts
    # and would warn about it; a plain `pytest` run of your project has no such warning.
    code = pytest.main([str(tests), "-q", "-p", "no:cacheprovider", "--rootdir", str(workdir),
                        "--basetemp", str(workdir / "pytest-tmp"), "-W", "ignore::pytest.PytestAssertRewriteWarning",
                        "--durations=3"])
    print("the order service's tests passed: billing, the two-hour reminder and the retry, without a sleep"
          if code == 0 else f"pytest exited with {code}")
    return int(code)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory() as scratch:
        sys.exit(main(Path(scratch)))
