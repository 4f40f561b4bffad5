"""The pytest side of `mqlite.testing` (registered by mqlite's `pytest11` entry point).

Kept apart so `mqlite.testing` (`MockClock`, `temporary_broker`, `wait_idle`)
imports without pytest, for unittest suites and scripts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .broker import Broker
from .testing import MockClock, temporary_broker

__all__ = ["pytest_configure", "mqlite_clock", "mqlite_broker"]


def pytest_configure(config: pytest.Config) -> None:
    """Register the `mqlite` marker (settings for `mqlite_broker`)."""
    config.addinivalue_line("markers", "mqlite(**config): settings for the mqlite_broker fixture's mqlite.open")


@pytest.fixture
def mqlite_clock() -> MockClock:
    """The test's `MockClock`: `mqlite_clock.advance(seconds)` moves the broker's time."""
    return MockClock()


@pytest.fixture
def mqlite_broker(request: pytest.FixtureRequest, tmp_path: Path, mqlite_clock: MockClock) -> Iterator[Broker]:
    """A fresh broker at `tmp_path / "mq"` on `mqlite_clock`, closed after the test (no thread may outlive it)."""
    marker = request.node.get_closest_marker("mqlite")
    config = dict(marker.kwargs) if marker is not None else {}
    with temporary_broker(tmp_path / "mq", clock=mqlite_clock, **config) as broker:
        yield broker
