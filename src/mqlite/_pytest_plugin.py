"""The pytest side of `mqlite.testing` (registered by mqlite's `pytest11` entry point).

Kept apart so `mqlite.testing` (`MockClock`, `temporary_broker`, `wait_idle`)
imports without pytest, for unittest suites and scripts. Every pytest run of a project
that installs mqlite loads this module, so it imports `mqlite.testing` (the broker, the
store, numpy) only when a test asks for a fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .broker import Broker
    from .testing import MockClock

__all__ = ["pytest_configure", "mqlite_clock", "mqlite_broker"]


def pytest_configure(config: pytest.Config) -> None:
    """Register the `mqlite` marker (settings for `mqlite_broker`)."""
    config.addinivalue_line("markers", "mqlite(**config): settings for the mqlite_broker fixture's mqlite.open")


@pytest.fixture
def mqlite_clock() -> MockClock:
    """The test's `MockClock`: `mqlite_clock.advance(seconds)` moves the broker's time."""
    from .testing import MockClock  # noqa: PLC0415 - loading the plugin stays free of the store

    return MockClock()


@pytest.fixture
def mqlite_broker(request: pytest.FixtureRequest, tmp_path: Path, mqlite_clock: MockClock) -> Iterator[Broker]:
    """A fresh broker at `tmp_path / "mq"` on `mqlite_clock`, closed after the test (no thread may outlive it)."""
    from .testing import temporary_broker  # noqa: PLC0415 - loading the plugin stays free of the store

    marker = request.node.get_closest_marker("mqlite")
    config = dict(marker.kwargs) if marker is not None else {}
    with temporary_broker(tmp_path / "mq", clock=mqlite_clock, **config) as broker:
        yield broker
