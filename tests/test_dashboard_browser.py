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
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.request import urlopen

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
DEAD = 205  # dead letters of cg in the --write store: more than the page's 200, so there is a second page
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
        # Traced: a send and its consumption write Pub, SubBefore and SubAfter records (docs/guide.md).
        with mqlite.Producer(broker, group="tp", trace=True) as traced:
            traced.send(mqlite.Message("traced", b"traced body", keys="traced-1"))
        with mqlite.PushConsumer(broker, group="tracer", subscription={"traced": "*"},
                                 listener=lambda msgs, context: None, trace=True) as consumer:
            assert broker.wait_idle(consumer, timeout=10)
        assert broker.wait_dispatched(10)


def _fill_dlq_store(path: str) -> str:
    """A store whose group cg has DEAD dead letters: "dead job" twice (the same msg_id at offsets 0 and 1, as
    when a re-sent message dies again), then one each of other jobs; returns the twice-dead msg_id."""
    with mqlite.open(path, **SMALL_STORE) as broker:
        with mqlite.Producer(broker, group="pg") as producer:
            msg_id = producer.send(mqlite.Message("jobs", b"dead job", keys="job-1")).msg_id
            others = [producer.send(mqlite.Message("jobs", f"job {i}".encode())).msg_id for i in range(DEAD - 2)]
        broker.commit_offset("cg", broker.fetch_subscribe_queues("jobs")[0], 0)
        for dead in [msg_id, msg_id, *others]:
            _message_back(broker, "cg", dead)
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
    """Every test ends with a console free of errors (SEVERE entries) for all the pages it loaded, and no
    error in the page's banner (a live refresh that failed after the page's first load shows there)."""
    yield
    if "driver" in request.fixturenames:
        browser: WebDriver = request.getfixturevalue("driver")
        errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        assert not errors, f"browser console errors: {errors}"
        assert not _banner(browser), f"the page ends the test with an error: {_banner(browser)}"


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


def api_get(dashboard: Dashboard, path: str) -> Any:
    """The dashboard's JSON answer to `GET /api/<path>`."""
    with urlopen(f"{dashboard.url}api/{path}", timeout=WAIT) as answer:
        return json.load(answer)


def loads(browser: WebDriver) -> int:
    """How many loads the current view has completed."""
    return int(browser.execute_script("return Number(document.getElementById('view').dataset.loaded)"))


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
    assert driver.title == "Overview · mqlite dashboard"
    # Live: messages sent after the page loaded show up without a reload, in the "in" series and not in "out"
    # (no group consumes payments, and no committed offset moves).
    first = loads(driver)
    with mqlite.open(store.path, **SMALL_STORE) as broker:
        with mqlite.Producer(broker, group="pg") as producer:
            for i in range(3):
                producer.send(mqlite.Message("payments", f"late payment {i}".encode()))
        assert broker.wait_dispatched(10)
    wait_for(driver, "the overview to show the new payments",
             "return document.querySelector('[data-testid=topics-table] tr[data-topic=payments] td:nth-child(4)')"
             ".textContent === String(arguments[0])", PAYMENTS + 3)
    assert loads(driver) > first and not _banner(driver)
    rates = wait_for(driver, "the in series to rise", "const c = window.mqlite.charts['overview-rates'];"
                     "return c && c.series[1].label === 'in' && c.data[1].some((v) => v > 0) ? c.data : null;")
    assert [s for s in driver.execute_script("return window.mqlite.charts['overview-rates'].series.map((s) => s.label)")] == [
        "Time", "in", "out"]
    assert all(v in (0, None) for v in rates[2]), f"out {rates[2]}: nothing was consumed"
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
    # The same message by its msg_id, and by its offset_msg_id, through their forms.
    for mode, value in [("msg_id", found.msg_id), ("offset_msg_id", found.offset_msg_id)]:
        open_page(driver, store.url, "search", "search")
        form = driver.find_element(By.CSS_SELECTOR, f"[data-testid=search-{mode}]")
        form.find_element(By.NAME, mode).send_keys(value)
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_loaded(driver, "search")
        hits = wait_for(driver, f"the {mode} search's result",
                        "const rows = [...document.querySelectorAll('[data-testid=search-results] tbody tr[data-msg-id]')];"
                        "return rows.length ? rows.map((r) => [r.dataset.msgId, r.dataset.offsetMsgId]) : null;")
        assert hits == [[found.msg_id, found.offset_msg_id]], mode
    rows = driver.find_elements(By.CSS_SELECTOR, "[data-testid=search-results] tbody tr[data-msg-id]")
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
    screenshot(driver, shots, "trace-untraced")
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
    # Lag reads against 0, not against its own minimum.
    assert driver.execute_script("return window.mqlite.charts['group-lag'].scales.y.min") == 0
    # The legend (series and latest values) is there for screen readers too, and a summary says it in words.
    assert driver.execute_script("const host = document.querySelector('[data-testid=lag-chart]');"
                                 "return !host.closest('[role=img], [aria-hidden=true]') && !!host.querySelector('.u-legend')")
    assert driver.find_element(By.CSS_SELECTOR, "[data-testid=lag-chart] [data-testid=chart-summary]").get_attribute(
        "textContent") == f"messages behind, latest: orders {expected}."
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
    # The twice-dead letter: two rows with one msg_id; the second copy (offset 1) is the one chosen.
    boxes = driver.find_elements(By.CSS_SELECTOR, "[data-testid=dlq-messages] input[data-msg-id]")[:2]
    msg_id = boxes[0].get_attribute("data-msg-id")
    assert boxes[1].get_attribute("data-msg-id") == msg_id
    chosen = boxes[1].get_attribute("data-offset-msg-id")
    assert chosen != boxes[0].get_attribute("data-offset-msg-id")
    box = boxes[1]
    resend = driver.find_element(By.CSS_SELECTOR, "[data-testid=resend-button]")
    assert not resend.is_enabled()  # nothing chosen yet
    box.click()
    wait_for(driver, "the resend button", "return !document.querySelector('[data-testid=resend-button]').disabled")
    # A refresh keeps exactly that row checked (not every row with its msg_id).
    loaded = loads(driver)
    wait_for(driver, "a refresh", "return Number(document.getElementById('view').dataset.loaded) > arguments[0]", loaded)
    assert [b.is_selected() for b in driver.find_elements(By.CSS_SELECTOR, "[data-testid=dlq-messages] input[data-msg-id]")[:2]] == [False, True]
    # Record what the page posts, and whether the button is disabled while the request runs.
    driver.execute_script("""
        const real = window.fetch;
        window.posted = [];
        window.fetch = (url, init) => {
          if (init && init.method === 'POST') window.posted.push({url, body: JSON.parse(init.body),
            disabled: document.querySelector('[data-testid=resend-button]').disabled});
          return real(url, init);
        };""")
    resend.click()
    dialog = driver.find_element(By.CSS_SELECTOR, "[data-testid=confirm-dialog]")
    wait_for(driver, "the confirmation dialog", "return document.getElementById('confirm').open")
    assert "%RETRY%cg" in dialog.text and msg_id in dialog.text
    screenshot(driver, shots, "dlq-confirm")
    dialog.find_element(By.CSS_SELECTOR, "[data-testid=confirm-ok]").click()
    row = WebDriverWait(driver, WAIT).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "[data-testid=resend-table] tbody tr[data-msg-id]"))
    [post] = driver.execute_script("return window.posted")
    assert post["body"] == {"msg_ids": [chosen], "to_origin": False, "confirm": True} and post["disabled"], post
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
    with mqlite.open(store.path, read_only=True) as reader:
        payments = sum(q.max_offset - q.min_offset for q in reader.topic_status("payments"))
    assert len(attributes(driver, "[data-testid=search-results] tbody tr[data-msg-id]", "data-msg-id")) == payments
    # Date inputs show their whole value at 1280 px (not cut under the calendar button).
    assert driver.execute_script("return [...document.querySelectorAll('input[type=datetime-local]')]"
                                 ".every((i) => i.getBoundingClientRect().width >= 235)")
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
    # A segment shows what is written in it (the commit log's end past its base offset) apart from the
    # blocks the file has on disk (the API's bytes).
    health = api_get(store, "health")
    log = health["commitlog"]
    segments = {s["name"]: s for s in log["segments"]}
    for row in driver.find_elements(By.CSS_SELECTOR, "[data-testid=segments-table] tbody tr[data-segment]"):
        name = row.get_attribute("data-segment")
        assert int(row.get_attribute("data-written")) == min(max(log["max_offset"] - int(name), 0), log["file_size"])
        assert int(row.get_attribute("data-allocated")) == segments[name]["bytes"]
    heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "[data-testid=segments-table] th")]
    assert heads[:2] == ["SEGMENT", "WRITTEN"] and "ALLOCATED ON DISK" in heads
    # The recovery history: readable columns, what a crash cost first; every field behind "all fields".
    heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "[data-testid=recovery-table] th")]
    assert heads[:4] == ["WHEN", "SHUTDOWN BEFORE", "SCANNED", "DISPATCHED"] and "DAMAGED BYTES" in heads, heads
    assert len(driver.find_elements(By.CSS_SELECTOR, "[data-testid=recovery-table] tbody tr[data-seq]")) == len(health["recovery_history"])
    # A time stamp of 0 (never) is a dash, not "0".
    for key, value in health["checkpoint"].items():
        shown = driver.execute_script("return [...document.querySelectorAll('[data-testid=checkpoint-facts] > div')]"
                                      ".find((d) => d.querySelector('dt').textContent === arguments[0]).querySelector('dd').textContent", key)
        assert (shown == "—") == (value == 0), (key, value, shown)
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


def test_trace_table_shows_the_stores_trace_records(driver: WebDriver, store: Dashboard, shots: Path) -> None:
    with mqlite.open(store.path, read_only=True) as reader:
        [msg] = reader.query_message("traced", "traced-1")
        views = reader.query_trace(msg.msg_id)
    assert {"Pub", "SubBefore", "SubAfter"} <= {v.msg_type for v in views}
    open_page(driver, store.url, f"trace/{msg.msg_id}", "trace")
    rows = [[td.text for td in row.find_elements(By.TAG_NAME, "td")]
            for row in driver.find_elements(By.CSS_SELECTOR, "[data-testid=traces-table] tbody tr[data-type]")]
    assert [row[1:8] for row in rows] == [[v.msg_type, v.status, v.topic, v.group_name, v.client_host, v.store_host,
                                           f"{v.cost_time:,}"] for v in views]
    assert [row[9] for row in rows] == [v.consume_return_type or v.transaction_state or "" for v in views]
    screenshot(driver, shots, "trace")


def test_live_checkbox_stops_and_resumes_the_refresh(driver: WebDriver, store: Dashboard) -> None:
    open_page(driver, store.url, "groups", "groups")
    live = driver.find_element(By.CSS_SELECTOR, "[data-testid=live-toggle]")
    assert driver.execute_script("return arguments[0].labels[0].textContent.trim()", live) == "Live"  # not the clock
    live.click()
    # After the page's next refresh tick (its own 2 s timer; a refresh under way at the click has ended by
    # then), the next tick loads nothing.
    wait_for(driver, "a refresh tick", "return window.mqlite.ticks >= arguments[0] + 1", driver.execute_script("return window.mqlite.ticks"))
    stopped = loads(driver)
    wait_for(driver, "another refresh tick", "return window.mqlite.ticks >= arguments[0] + 1", driver.execute_script("return window.mqlite.ticks"))
    assert loads(driver) == stopped
    live.click()
    wait_for(driver, "the refresh to resume", "return Number(document.getElementById('view').dataset.loaded) > arguments[0]", stopped)


def test_a_crashed_store_before_and_after_a_writer_recovers_it(driver: WebDriver, tmp_path: Path, shots: Path) -> None:
    """A writer died; no writer opened since: the page says so (not that recovery ran); once a writer holds it
    again, that it recovered it. With --interval 60 the charts have one sample: they wait for a second rather
    than draw an empty axis."""
    path = str(tmp_path / "store")
    crash = (f"import mqlite, os\nb = mqlite.open({path!r})\n"
             "with mqlite.Producer(b, group='pg') as p: p.send(mqlite.Message('orders', b'x'))\n"
             "b.wait_dispatched(10)\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", crash], check=True, timeout=60)
    with _start(path, tmp_path, "--interval", "60") as crashed:
        open_page(driver, crashed.url, "", "overview")
        health = driver.find_element(By.CSS_SELECTOR, "[data-testid=overview-health]").text
        assert "did not shut down cleanly" in health and "recovery runs when a writer next opens" in health, health
        assert "recovery ran" not in health
        waiting = driver.find_element(By.CSS_SELECTOR, "[data-testid=chart-overview-rates] [data-testid=chart-waiting]")
        assert waiting.is_displayed() and waiting.text == "Waiting for samples…"
        # One sample with a value (the second round's rate, before the third): still waiting, no axis drawn
        # (uPlot's range for one time stamp spans years).
        assert driver.execute_script("""
            const chart = new window.mqlite.TimeChart("probe", "msg/s", String);
            document.getElementById("view").append(chart.host);
            chart.set([Date.now()], [{ label: "in", values: [0] }]);
            const shown = [!chart.empty.hidden, getComputedStyle(chart.host.querySelector(".uplot")).visibility];
            chart.destroy();
            chart.host.remove();
            return shown;""") == [True, "hidden"]
        screenshot(driver, shots, "crashed-overview")
        open_page(driver, crashed.url, "health", "health")
        assert driver.find_element(By.CSS_SELECTOR, "[data-testid=last-shutdown]").text == "abnormal"
        note = driver.find_element(By.CSS_SELECTOR, "[data-testid=shutdown-note]").text
        assert "did not shut down cleanly" in note and "recovery runs when a writer next opens" in note, note
        screenshot(driver, shots, "crashed-health")
        with mqlite.open(path):  # a writer opens it (this process) and recovers it: the page says so
            open_page(driver, crashed.url, "", "overview")
            health = driver.find_element(By.CSS_SELECTOR, "[data-testid=overview-health]").text
            assert "that writer recovered the store when it opened it" in health, health
            assert "recovery runs when a writer next opens" not in health


def test_a_narrow_window_keeps_the_nav_reachable(driver: WebDriver, store: Dashboard, shots: Path) -> None:
    driver.set_window_size(800, 900)
    try:
        open_page(driver, store.url, "", "overview")
        # The store line takes its own row under the nav, whole (the path, the badge, the flush mode).
        assert driver.execute_script(
            "const nav = document.querySelector('nav').getBoundingClientRect();"
            "const line = document.querySelector('[data-testid=store-line]');"
            "return line.getBoundingClientRect().top >= nav.bottom && line.scrollWidth <= line.clientWidth")
        for nav, view in [("nav-health", "health"), ("nav-dlq", "dlq")]:
            link = driver.find_element(By.CSS_SELECTOR, f"[data-testid={nav}]")
            assert driver.execute_script(
                "const r = arguments[0].getBoundingClientRect();"
                "return arguments[0].contains(document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2))", link), \
                f"something covers {nav}"
            link.click()
            wait_loaded(driver, view)
            # Focus moved to the new page's heading, and the window's title names it.
            assert driver.execute_script("return document.activeElement.tagName") == "H1"
            assert driver.title == driver.find_element(By.TAG_NAME, "h1").text + " · mqlite dashboard"
        screenshot(driver, shots, "narrow-dlq")
    finally:
        driver.set_window_size(1280, 900)


def test_dlq_pages_past_the_first_200(driver: WebDriver, writable: Dashboard, shots: Path) -> None:
    open_page(driver, writable.url, "dlq/cg", "dlq")
    def rows() -> list[list[Any]]:  # in one script: a live refresh may replace the rows between two calls
        return driver.execute_script(  # [offset, origin topic] per row
            "return [...document.querySelectorAll('[data-testid=dlq-messages] tbody tr[data-offset]')]"
            ".map((r) => [Number(r.dataset.offset), r.cells[2].textContent])")
    assert rows() == [[o, "jobs"] for o in range(200)]
    driver.find_element(By.CSS_SELECTOR, "[data-testid=dlq-next]").click()
    wait_for(driver, "the second page", "return document.querySelector('[data-testid=dlq-messages] tbody tr[data-offset]')"
             ".dataset.offset === '200'")
    assert rows() == [[o, "jobs"] for o in range(200, DEAD)]  # later pages name the origin topic too
    assert not driver.find_element(By.CSS_SELECTOR, "[data-testid=dlq-next]").is_enabled()
    screenshot(driver, shots, "dlq-page-2")
    driver.find_element(By.CSS_SELECTOR, "[data-testid=dlq-previous]").click()
    wait_for(driver, "the first page again", "return document.querySelectorAll('[data-testid=dlq-messages] tbody tr[data-offset]').length === 200")
    assert [o for o, _ in rows()] == list(range(200))


def test_a_queue_without_a_committed_offset_shows_a_dash(driver: WebDriver, writable: Dashboard) -> None:
    open_page(driver, writable.url, "group/cg", "group")
    cells = driver.execute_script(  # [committed, consumer offset cell, its title] per queue of jobs
        "return [...document.querySelectorAll('[data-testid=lag-table] tbody tr[data-topic=jobs]')].map((r) => "
        "[r.dataset.committed, r.cells[3].textContent, (r.cells[3].firstElementChild || {}).title || null])")
    assert cells[0] == ["true", "0", None]  # cg committed offset 0 on queue 0 only
    assert len(cells) > 1 and all(c[:2] == ["false", "—"] and "ConsumerLagCalculator" in c[2] for c in cells[1:]), cells


def test_the_wheel_ships_every_static_file() -> None:
    """setuptools' own package-data matching (build_py.find_data_files, what a wheel build uses) on
    pyproject's globs takes every file under dashboard/static/, in subfolders too."""
    import tomllib

    from setuptools.command.build_py import build_py
    from setuptools.dist import Distribution

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dist = Distribution({"name": "mqlite", "packages": ["mqlite"], "package_dir": {"": "src"},
                         "package_data": config["package-data"]})
    command = build_py(dist)
    command.ensure_finalized()
    command.manifest_files = {}  # no MANIFEST.in files: package-data alone must carry them
    src = ROOT / "src" / "mqlite"
    shipped = {Path(f).resolve() for f in command.find_data_files("mqlite", str(src))}
    static = {f.resolve() for f in (src / "dashboard" / "static").rglob("*") if f.is_file()}
    assert static and static <= shipped, sorted(str(f) for f in static - shipped)
