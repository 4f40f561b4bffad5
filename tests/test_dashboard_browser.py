"""The dashboard in a real browser: Debian's chromium driven through Debian's chromedriver (selenium).

`mqlite dashboard` runs as users start it (a child process, port 0, the URL on its first stdout line)
on fixture stores built here: a read-only one beside this process as the writer (topics, keys, a group
that falls behind) and one opened with `--write` for the dead-letter resend. Every page is loaded, its
screenshot written to `$MQLITE_SCREENSHOTS` or build/screenshots/ (the run prints where), and the
browser's console must stay free of errors. One browser serves the module.

Waiting: the page counts its completed loads in `#view[data-loaded]` and names its view in
`data-view`; the tests wait on those (WebDriverWait) rather than on time. Charts are uPlot instances
the page exposes as `window.mqlite.charts[id]`, so a test reads the data a chart draws.

The README's test command installs chromium and chromium-driver; without them this module is skipped.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import mqlite
from support import SMALL_STORE, deadline, wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip(f"the browser tests need Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}): "
                "apt-get install chromium chromium-driver (the README's test command does)", allow_module_level=True)

from selenium import webdriver  # noqa: E402  (after the skip: the dev extra has selenium, the browser may be absent)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WAIT = 20.0  # seconds a page may take to show what a test waits for (2 cores shared by a whole suite)
ORDERS = 20  # messages in "orders": key order-<i>, body "order <i> body", round robin over 4 queues
PAYMENTS = 6
COMMITTED = 2  # billing's committed offset in each of orders' 4 queues
MORE = 8  # messages sent to orders while the group page is open
BLOB = bytes([0xFF, 0xFE, 0x00, 0x01]) + b"not utf-8"  # "blobs" queue 0 offset 0
MARKUP = '<img src="x" onerror="window.pwned = 1"><script>window.pwned = 2</script>'  # offset 1: shown as text


@dataclass(frozen=True)
class Dashboard:
    """A running `mqlite dashboard` child process and the store it shows."""

    url: str
    path: str
    process: subprocess.Popen[str]


def _message_back(broker: mqlite.Broker, group: str, msg_id: str) -> None:
    """Store the dead-letter copy of `msg_id` for `group` (delay level -1: straight to %DLQ%group)."""
    broker.send_message_back(group, broker.view_message(msg_id), delay_level=-1)


def _fill_store(path: str) -> None:
    """orders (4 queues, ORDERS keyed messages), payments (2 queues), billing lagging on orders, one dead letter."""
    with mqlite.open(path, **SMALL_STORE) as broker:
        broker.create_topic("orders", 4)
        broker.create_topic("payments", 2)
        with mqlite.Producer(broker, group="pg") as producer:
            ids = [producer.send(mqlite.Message("orders", f"order {i} body".encode(), tags="TagA",
                                                keys=f"order-{i}")).msg_id for i in range(ORDERS)]
            for i in range(PAYMENTS):
                producer.send(mqlite.Message("payments", f"payment {i}".encode(), keys=f"pay-{i}"))
            blobs = mqlite.MessageQueue("blobs", broker.broker_name, 0)
            producer.send(mqlite.Message("blobs", BLOB), queue=blobs)
            producer.send(mqlite.Message("blobs", MARKUP.encode(), keys="<b>k</b>", properties={"note": MARKUP}), queue=blobs)
        for mq in broker.fetch_subscribe_queues("orders"):
            broker.commit_offset("billing", mq, COMMITTED)
        _message_back(broker, "billing", ids[0])
        assert broker.wait_dispatched(10)


def _fill_dlq_store(path: str) -> str:
    """A store whose group cg has one dead letter; returns its msg_id."""
    with mqlite.open(path, **SMALL_STORE) as broker:
        with mqlite.Producer(broker, group="pg") as producer:
            msg_id = producer.send(mqlite.Message("jobs", b"dead job", keys="job-1")).msg_id
        broker.commit_offset("cg", broker.fetch_subscribe_queues("jobs")[0], 0)
        _message_back(broker, "cg", msg_id)
        assert broker.wait_dispatched(10)
        return msg_id


@contextmanager
def _start(path: str, tmp: Path, *extra: str) -> Iterator[Dashboard]:
    """Run `mqlite dashboard PATH` (or, with PATH "", `mqlite dashboard -n ...`) as a user would; SIGTERM it
    afterwards (it must exit cleanly)."""
    err = open(tmp / "dashboard.stderr", "w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "mqlite", "dashboard", *([path] if path else []), "--listen", "127.0.0.1:0",
         "--interval", "0.2", *extra],
        stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert process.stdout is not None
        with deadline(30):
            url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), f"first stdout line {url!r}; stderr: {(tmp / 'dashboard.stderr').read_text()}"
        yield Dashboard(url, path, process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError("mqlite dashboard did not exit within 15 s of SIGTERM")
        finally:
            err.close()
            if process.stdout:
                process.stdout.close()
        assert code == 0, f"mqlite dashboard exited {code}; stderr: {(tmp / 'dashboard.stderr').read_text()}"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """A read-only dashboard on the fixture store (this process may open the store as its writer)."""
    tmp = tmp_path_factory.mktemp("dashboard")
    path = str(tmp / "store")
    _fill_store(path)
    with _start(path, tmp) as dashboard:
        yield dashboard


@pytest.fixture(scope="module")
def writable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """A dashboard that holds its store (--write): dead-letter resend is enabled."""
    tmp = tmp_path_factory.mktemp("dashboard-write")
    path = str(tmp / "store")
    _fill_dlq_store(path)
    with _start(path, tmp, "--write") as dashboard:
        yield dashboard


@pytest.fixture(scope="module")
def shots(request: pytest.FixtureRequest) -> Path:
    """Where the screenshots go; printed on the terminal so a person can look at them."""
    where = Path(os.environ.get("MQLITE_SCREENSHOTS") or ROOT / "build" / "screenshots").resolve()
    where.mkdir(parents=True, exist_ok=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # past pytest's capture, onto the terminal
            reporter.ensure_newline()
            reporter.write_line(f"dashboard screenshots: {where}")
    return where


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """One headless chromium for the module; nothing it does reaches the network beyond 127.0.0.1."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1280,900", f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture(autouse=True)
def no_console_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test ends with a console free of errors (SEVERE entries) for all the pages it loaded."""
    yield
    if "driver" in request.fixturenames:
        browser: WebDriver = request.getfixturevalue("driver")
        errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        assert not errors, f"browser console errors: {errors}"


def open_page(browser: WebDriver, base: str, route: str, view: str) -> None:
    """Load `base#/route` and wait until the view named `view` has finished its first load."""
    target = f"{base}#/{route}"
    if browser.current_url.startswith(base):
        # The old view is marked stale so its own loads cannot satisfy the wait below.
        browser.execute_script("document.getElementById('view').dataset.loaded = 'stale'")
    if browser.current_url == target:
        browser.refresh()
    else:
        browser.get(target)
    wait_loaded(browser, view)


def wait_loaded(browser: WebDriver, view: str) -> None:
    """Wait until the page shows `view` with its data (or an error banner, which fails the test)."""
    WebDriverWait(browser, WAIT).until(lambda b: _loaded(b, view) or _banner(b), f"the {view} page to load")
    assert not _banner(browser), f"error banner on the {view} page: {_banner(browser)}"


def _loaded(browser: WebDriver, view: str) -> bool:
    return bool(browser.execute_script(
        "const v = document.getElementById('view'); return v.dataset.view === arguments[0] && Number(v.dataset.loaded) >= 1",
        view))


def _banner(browser: WebDriver) -> str:
    return str(browser.execute_script(
        "const b = document.getElementById('banner'); return b.hidden ? '' : document.getElementById('banner-text').textContent"))


def screenshot(browser: WebDriver, shots: Path, name: str) -> None:
    """The whole page (beyond the window's height) as shots/<name>.png."""
    png = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    (shots / f"{name}.png").write_bytes(base64.b64decode(png["data"]))


def attributes(browser: WebDriver, selector: str, attribute: str) -> list[str]:
    return [el.get_attribute(attribute) or "" for el in browser.find_elements(By.CSS_SELECTOR, selector)]


def wait_for(browser: WebDriver, what: str, script: str, *args: Any) -> Any:
    """Wait until `script` (a JavaScript expression's body returning a truthy value) holds; return its value."""
    return WebDriverWait(browser, WAIT).until(lambda b: b.execute_script(script, *args), what)


def test_overview_lists_the_stores_topics(driver: WebDriver, store: Dashboard, shots: Path) -> None:
    open_page(driver, store.url, "", "overview")
    rows = {row.get_attribute("data-topic"): row for row in
            driver.find_elements(By.CSS_SELECTOR, "[data-testid=topics-table] tbody tr[data-topic]")}
    assert {"orders", "payments", "%DLQ%billing"} <= set(rows)
    # The messages column is the store's count (max - min offsets summed over the topic's queues).
    with mqlite.open(store.path, read_only=True) as reader:
        stored = {topic: sum(q.max_offset - q.min_offset for q in reader.topic_status(topic)) for topic in rows}
    assert stored["payments"] == PAYMENTS and stored["orders"] >= ORDERS
    wait_for(driver, f"the messages column to show {stored}",
             "return Object.entries(arguments[0]).every(([topic, n]) => document.querySelector("
             "`[data-testid=topics-table] tr[data-topic=\"${topic}\"] td:nth-child(4)`).textContent === String(n))", stored)
    assert driver.find_element(By.CSS_SELECTOR, "[data-testid=store-line]").text.startswith(store.path)
    screenshot(driver, shots, "overview")
    open_page(driver, store.url, "topic/orders", "topic")
    assert attributes(driver, "[data-testid=queues-table] tbody tr", "data-queue") == ["0", "1", "2", "3"]
    screenshot(driver, shots, "topic")


def test_search_by_key_finds_the_message_and_shows_its_body(driver: WebDriver, store: Dashboard, shots: Path) -> None:
    open_page(driver, store.url, "search", "search")
    form = driver.find_element(By.CSS_SELECTOR, "[data-testid=search-key]")
    form.find_element(By.NAME, "topic").send_keys("orders")
    form.find_element(By.NAME, "key").send_keys("order-7")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(driver, "search results", "return document.querySelectorAll('[data-testid=search-results] tbody tr[data-msg-id]').length")
    rows = driver.find_elements(By.CSS_SELECTOR, "[data-testid=search-results] tbody tr[data-msg-id]")
    with mqlite.open(store.path, read_only=True) as reader:
        [found] = reader.query_message("orders", "order-7")
        groups = sorted(track.consumer_group for track in reader.message_track(found.msg_id))
    assert [row.get_attribute("data-msg-id") for row in rows] == [found.msg_id]
    assert "order-7" in rows[0].text
    screenshot(driver, shots, "search")
    rows[0].find_element(By.CSS_SELECTOR, "a.mono").click()
    wait_loaded(driver, "message")
    body = driver.find_element(By.CSS_SELECTOR, "[data-testid=message-body]")
    assert body.text == "order 7 body"
    properties = attributes(driver, "[data-testid=properties-table] tbody tr", "data-property")
    assert "KEYS" in properties and "UNIQ_KEY" in properties
    screenshot(driver, shots, "message")
    driver.find_element(By.CSS_SELECTOR, "[data-testid=body-hex]").click()
    assert "6f 72 64 65 72 20 37" in body.text  # "order 7" as hex bytes
    assert body.text.rstrip().endswith("order 7 body")  # the dump's ASCII column
    driver.find_element(By.CSS_SELECTOR, "[data-testid=trace-link]").click()
    wait_loaded(driver, "trace")
    # The track per group is the store's (Broker.message_track).
    assert sorted(attributes(driver, "[data-testid=tracks-table] tbody tr[data-group]", "data-group")) == groups
    screenshot(driver, shots, "trace")
    # A body that is not UTF-8 shows as hex, and the text view is not offered.
    open_page(driver, store.url, "search?mode=offset&topic=blobs&queue_id=0&offset=0", "search")
    driver.find_element(By.CSS_SELECTOR, "[data-testid=search-results] tbody tr[data-msg-id] a.mono").click()
    wait_loaded(driver, "message")
    body = driver.find_element(By.CSS_SELECTOR, "[data-testid=message-body]")
    assert body.get_attribute("data-mode") == "hex" and body.text.startswith("00000000  ff fe 00 01 6e 6f 74")
    assert not driver.find_element(By.CSS_SELECTOR, "[data-testid=body-text]").is_enabled()
    screenshot(driver, shots, "message-binary")
    # Markup in a body, key or property is text on the page, never markup (nothing runs, nothing loads).
    driver.back()
    wait_loaded(driver, "search")
    driver.find_elements(By.CSS_SELECTOR, "[data-testid=search-results] tbody tr[data-msg-id] a.mono")[1].click()
    wait_loaded(driver, "message")
    assert driver.find_element(By.CSS_SELECTOR, "[data-testid=message-body]").text == MARKUP
    assert MARKUP in driver.find_element(By.CSS_SELECTOR, "[data-testid=properties-table]").text
    assert "<b>k</b>" in driver.find_element(By.CSS_SELECTOR, "[data-testid=message-headers]").text
    assert driver.execute_script("return window.pwned === undefined && !document.querySelector('#view img, #view script')")


def test_lag_chart_draws_as_the_consumer_falls_behind(driver: WebDriver, store: Dashboard, shots: Path) -> None:
    open_page(driver, store.url, "group/billing", "group")
    behind = 4 * (ORDERS // 4 - COMMITTED)
    data = wait_for(driver, f"the lag chart to show {behind}", "const c = window.mqlite.charts['group-lag'];"
                    "return c && c.data[1].at(-1) === arguments[0] ? c.data : null;", behind)
    assert len(data) == 2  # time and one series: billing consumes one topic
    driver.execute_script("window.mqlite.charts['group-lag'].testMark = 1")
    # The consumer falls further behind while the page is open: this process becomes the store's writer.
    with mqlite.open(store.path, **SMALL_STORE) as broker:
        with mqlite.Producer(broker, group="pg") as producer:
            for i in range(MORE):
                producer.send(mqlite.Message("orders", f"late {i}".encode()))
        assert broker.wait_dispatched(10)
        expected = sum(p.diff for p in broker.consumer_progress("billing") if p.topic == "orders")
        assert expected == behind + MORE
        data = wait_for(driver, f"the lag chart to reach {expected}",
                        "const c = window.mqlite.charts['group-lag'];"
                        "return c && c.data[1].at(-1) === arguments[0] && c.testMark === 1 ? c.data : null;", expected)
    lags = [v for v in data[1] if v is not None]
    assert behind in lags and lags[-1] == expected  # the line steps up from the first lag to the new one
    # The canvas shows it: opaque pixels near the series' colour (uPlot strokes the line in #2f6fdf).
    drawn = driver.execute_script(
        "const cv = document.querySelector('[data-testid=lag-chart] canvas');"
        "const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data; let n = 0;"
        "for (let i = 0; i < px.length; i += 4)"
        "  if (px[i+3] > 200 && Math.abs(px[i] - 47) + Math.abs(px[i+1] - 111) + Math.abs(px[i+2] - 223) < 60) n++;"
        "return n;")
    assert drawn > 100, f"{drawn} pixels of the lag line on the canvas"
    wait_for(driver, "the lag table", "return [...document.querySelectorAll('[data-testid=lag-table] tbody tr')]"
             ".reduce((s, r) => s + Number(r.dataset.lag), 0) === arguments[0]", expected)
    screenshot(driver, shots, "group")
    open_page(driver, store.url, "groups", "groups")
    assert "billing" in attributes(driver, "[data-testid=groups-table] tbody tr", "data-group")
    screenshot(driver, shots, "groups")


def test_dlq_resend_moves_the_message(driver: WebDriver, writable: Dashboard, shots: Path) -> None:
    open_page(driver, writable.url, "dlq/cg", "dlq")
    box = WebDriverWait(driver, WAIT).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "[data-testid=dlq-messages] input[data-msg-id]"))
    msg_id = box.get_attribute("data-msg-id")
    resend = driver.find_element(By.CSS_SELECTOR, "[data-testid=resend-button]")
    assert not resend.is_enabled()  # nothing chosen yet
    box.click()
    wait_for(driver, "the resend button", "return !document.querySelector('[data-testid=resend-button]').disabled")
    resend.click()
    dialog = driver.find_element(By.CSS_SELECTOR, "[data-testid=confirm-dialog]")
    wait_for(driver, "the confirmation dialog", "return document.getElementById('confirm').open")
    assert "%RETRY%cg" in dialog.text and msg_id in dialog.text
    screenshot(driver, shots, "dlq-confirm")
    dialog.find_element(By.CSS_SELECTOR, "[data-testid=confirm-ok]").click()
    row = WebDriverWait(driver, WAIT).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "[data-testid=resend-table] tbody tr[data-msg-id]"))
    assert row.get_attribute("data-msg-id") == msg_id and row.get_attribute("data-topic") == "%RETRY%cg"
    screenshot(driver, shots, "dlq-resent")
    # Through the page: the result links to the copy, which is in %RETRY%cg with the dead letter's body.
    row.find_element(By.LINK_TEXT, "view").click()
    wait_loaded(driver, "message")
    assert driver.find_element(By.CSS_SELECTOR, "[data-testid=message-topic]").text == "%RETRY%cg"
    assert driver.find_element(By.CSS_SELECTOR, "[data-testid=message-body]").text == "dead job"
    # Through the store: a read-only open beside the dashboard (the writer) finds it in %RETRY%cg.
    def in_retry() -> bool:
        with mqlite.open(writable.path, read_only=True) as reader:
            queues = [mq for mq in reader.fetch_subscribe_queues("%RETRY%cg") if reader.max_offset(mq) > 0]
            return any(reader.query_message_by_offset(mq.topic, mq.queue_id, 0).msg_id == msg_id for mq in queues)
    wait_until(in_retry, "the resent message in %RETRY%cg")


def test_every_page_loads_without_console_errors(driver: WebDriver, store: Dashboard, shots: Path) -> None:
    for route, view in [("", "overview"), ("topic/payments", "topic"), ("groups", "groups"),
                        ("group/billing", "group"), ("dlq", "dlq"), ("dlq/billing", "dlq"), ("health", "health"),
                        ("search?mode=time&topic=payments&begin=2000-01-01T00:00:00&end=2100-01-01T00:00:00", "search")]:
        open_page(driver, store.url, route, view)
        screenshot(driver, shots, f"page-{view}-{route.split('?')[0].replace('/', '-') or 'index'}")
    # The time-range search (the last search above) found every payment.
    assert len(attributes(driver, "[data-testid=search-results] tbody tr[data-msg-id]", "data-msg-id")) == PAYMENTS
    # The read-only dashboard offers no resend: the button stays disabled and says why.
    open_page(driver, store.url, "dlq/billing", "dlq")
    assert driver.find_element(By.CSS_SELECTOR, "[data-testid=readonly-note]").is_displayed()
    assert not driver.find_element(By.CSS_SELECTOR, "[data-testid=resend-button]").is_enabled()
    screenshot(driver, shots, "dlq")
    open_page(driver, store.url, "health", "health")
    driver.find_element(By.CSS_SELECTOR, "[data-testid=verify-button]").click()
    result = WebDriverWait(driver, WAIT).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "[data-testid=verify-result] .badge"))
    assert result.text == "ok", _banner(driver)
    screenshot(driver, shots, "health")
    # The dark theme (prefers-color-scheme), for a person to look at.
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        open_page(driver, store.url, "group/billing", "group")
        screenshot(driver, shots, "group-dark")
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def test_a_served_broker_shows_its_members(driver: WebDriver, tmp_path: Path, shots: Path) -> None:
    """`mqlite dashboard -n` on a serving broker: the group page lists the live consumer; no file facts."""
    path = str(tmp_path / "store")
    with mqlite.open(path, **SMALL_STORE) as broker:
        with mqlite.Producer(broker, group="pg") as producer:
            for i in range(4):
                producer.send(mqlite.Message("orders", f"order {i}".encode()))
        server = broker.serve("127.0.0.1:0")
        try:
            with mqlite.PushConsumer(broker, group="live", subscription={"orders": "*"},
                                     listener=lambda msgs, context: None) as consumer:
                assert broker.wait_idle(consumer, timeout=10)
                with _start("", tmp_path, "-n", server.address) as served:
                    open_page(driver, served.url, "group/live", "group")
                    wait_for(driver, "the live consumer among the members",
                             "return document.querySelector('[data-testid=group-facts]').textContent.includes(arguments[0])",
                             consumer.client_id)
                    assert driver.find_element(By.CSS_SELECTOR, "[data-testid=store-line]").text.startswith(server.address)
                    screenshot(driver, shots, "group-remote")
                    open_page(driver, served.url, "health", "health")
                    assert driver.find_element(By.CSS_SELECTOR, "[data-testid=files-unavailable]").is_displayed()
                    assert not driver.find_element(By.CSS_SELECTOR, "[data-testid=verify-button]").is_displayed()
                    screenshot(driver, shots, "health-remote")
        finally:
            server.close()


def test_an_api_error_shows_in_the_banner_not_the_console(driver: WebDriver, store: Dashboard, shots: Path) -> None:
    driver.get(f"{store.url}#/topic/no-such-topic")
    text = WebDriverWait(driver, WAIT).until(_banner, "the error banner")
    assert "no-such-topic" in text and "HTTP 404" in text
    screenshot(driver, shots, "error-banner")
    # Chromium itself logs the failed request; the page adds nothing (no uncaught error, no console.error).
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors and all(e["source"] == "network" and "/api/topics/no-such-topic" in e["message"] for e in errors), errors
    # A working page clears it.
    open_page(driver, store.url, "", "overview")
