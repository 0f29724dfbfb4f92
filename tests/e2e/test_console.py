"""The live console (/console) in a real headless browser: Debian's chromium driven by
Playwright. The page loads with no console error and no failed request, shows a topic a test
produces to with its rate moving and its rate chart filling, writes a hostile topic name as
text, and with authentication on shows the refusal until a token is given."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, Response, sync_playwright

from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.client import Client
from tests.e2e.test_authorization import AUTHZ, SUPER, token
from tests.support import BrokerThread, broker_config
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures, imported to be found

TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless chromium for the module: Debian's (make cluster-deps), never a download."""
    chromium = shutil.which("chromium")
    if chromium is None:
        raise RuntimeError(
            "chromium is not installed: install the Debian package (make cluster-deps)"
        )
    with sync_playwright() as playwright:
        # Chromium's sandbox needs user namespaces, which a root CI container lacks.
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        launched = playwright.chromium.launch(executable_path=chromium, headless=True, args=args)
        try:
            yield launched
        finally:
            launched.close()


def stop(broker: BrokerThread) -> None:
    """Stop ``broker`` from a thread of its own: Playwright's sync API keeps an event loop
    running on the main thread, where BrokerThread.stop could not close the broker's loop."""
    stopping = threading.Thread(target=broker.stop, name="stop-broker")
    stopping.start()
    stopping.join(60)
    assert not stopping.is_alive(), "the broker did not stop"


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """statsUpdateFrequencyInSecs=1 (tests/support.py): the page polls every second."""
    broker = BrokerThread(broker_config(tmp_path_factory.mktemp("console"))).start()
    try:
        yield broker
    finally:
        stop(broker)


class Watched:
    """A page with everything that went wrong in it: console errors, uncaught exceptions,
    failed requests, answers >= 400 and dialogs (an injected script's alert)."""

    def __init__(self, browser: Browser) -> None:
        self.page: Page = browser.new_page()
        self.problems: list[str] = []
        self.exceptions: list[str] = []
        page = self.page
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.exceptions.append(str(exc)))
        page.on("requestfailed", lambda r: self.problems.append(f"{r.url}: {r.failure}"))
        page.on("response", self._response)
        page.on("dialog", self._dialog)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.problems.append(message.text)

    def _response(self, response: Response) -> None:
        if response.status >= 400:
            self.problems.append(f"{response.status} {response.url}")

    def _dialog(self, dialog: Dialog) -> None:
        self.exceptions.append(f"dialog {dialog.message}")
        dialog.dismiss()

    def close(self) -> None:
        self.page.close()


class Producing:
    """Sends steadily to a topic (with a consumer on it) from a thread of its own until
    stopped, so that the broker's rates move while the browser watches."""

    def __init__(self, service_url: str, topic: str, subscription: str = "watchers") -> None:
        self.service_url = service_url
        self.topic = topic
        self.subscription = subscription
        self.started = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="producing", daemon=True)

    def __enter__(self) -> Producing:
        self._thread.start()
        assert self.started.wait(30), "the producer did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the producer did not stop"
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as exc:
            self._error = exc
            self.started.set()

    async def _produce(self) -> None:
        async with Client(self.service_url, operation_timeout_ms=10_000) as client:
            consumer = await client.subscribe(self.topic, self.subscription)
            producer = await client.create_producer(self.topic, "console-producer")
            self.started.set()
            while not self._stop.is_set():
                await producer.send(b"x" * 200)
                await consumer.acknowledge(await consumer.receive(timeout_ms=10_000))
                await asyncio.sleep(0.01)


def topic_box_text(page: Page, topic: str, selector: str) -> str | None:
    """The text under ``selector`` in the box of ``topic`` (matched by its data attribute, so
    that no name needs escaping into a selector); None while the page does not show it."""
    return page.evaluate(
        """([topic, selector]) => {
            const box = [...document.querySelectorAll(".topic")]
                .find((b) => b.dataset.topic === topic);
            const node = box && box.querySelector(selector);
            return node ? node.textContent : null;
        }""",
        [topic, selector],
    )


def wait_for_figure_above_zero(page: Page, topic: str, selector: str) -> None:
    page.wait_for_function(
        """([topic, selector]) => {
            const box = [...document.querySelectorAll(".topic")]
                .find((b) => b.dataset.topic === topic);
            const node = box && box.querySelector(selector);
            return node !== null && node !== undefined && parseFloat(node.textContent) > 0;
        }""",
        arg=[topic, selector],
        timeout=TIMEOUT_MS,
    )


def test_the_console_shows_a_topic_and_its_rate_moves(
    browser: Browser, console_broker: BrokerThread
) -> None:
    topic = f"persistent://public/default/console-{uuid.uuid4().hex[:8]}"
    watched = Watched(browser)
    page = watched.page
    try:
        with Producing(console_broker.service_url, topic):
            response = page.goto(console_broker.http_url + "/", timeout=TIMEOUT_MS)
            assert response is not None and response.url.endswith("/console")
            assert "script-src 'self'" in response.headers["content-security-policy"]
            wait_for_figure_above_zero(page, topic, ".rate-in .value")
            wait_for_figure_above_zero(page, topic, ".rate-out .value")
            page.wait_for_function(
                """(topic) => [...document.querySelectorAll(".topic")]
                    .some((b) => b.dataset.topic === topic
                        && Number(b.querySelector("canvas.chart").dataset.samples) >= 3)""",
                arg=topic,
                timeout=TIMEOUT_MS,
            )
            tables = topic_box_text(page, topic, "table:nth-of-type(1)") or ""
            assert "console-producer" in tables
            subscriptions = topic_box_text(page, topic, "table:nth-of-type(2)") or ""
            assert "watchers" in subscriptions
            assert "no topics" not in (page.text_content("#tenants") or "")
            assert "standalone" in (page.text_content("#brokers") or "")
        assert page.is_hidden("#message")
        assert watched.problems == []
        assert watched.exceptions == []
    finally:
        watched.close()


def test_a_hostile_topic_name_is_shown_as_text(
    browser: Browser, console_broker: BrokerThread
) -> None:
    """Printable ASCII but '/' is allowed in a topic's local name (broker/naming.py): markup
    in it must be shown, not parsed (the CSP would report an inline handler as an error)."""
    local = f"<img src=x onerror=\"alert('pwned')\">&amp;-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://public/default/{local}"
    watched = Watched(browser)
    page = watched.page
    try:
        with Producing(console_broker.service_url, topic):
            page.goto(console_broker.http_url + "/console", timeout=TIMEOUT_MS)
            wait_for_figure_above_zero(page, topic, ".rate-in .value")
        assert topic_box_text(page, topic, ".topic-name") == topic
        assert page.get_by_text(topic, exact=True).count() == 1
        assert page.locator("img").count() == 0
        assert watched.problems == []
        assert watched.exceptions == []
    finally:
        watched.close()


def test_with_authentication_the_page_needs_a_token(
    browser: Browser, tmp_path_factory: pytest.TempPathFactory
) -> None:
    broker = BrokerThread(broker_config(tmp_path_factory.mktemp("console-authz"), **AUTHZ))
    broker.start()
    watched = Watched(browser)
    page = watched.page
    try:
        page.goto(broker.http_url + "/console", timeout=TIMEOUT_MS)
        message = page.locator("#message")
        message.wait_for(state="visible", timeout=TIMEOUT_MS)
        page.wait_for_function(
            "() => document.querySelector('#message').textContent.includes('401')",
            timeout=TIMEOUT_MS,
        )
        assert "Paste a token" in (message.text_content() or "")
        assert page.locator(".tenant").count() == 0

        page.fill("#token", token("stranger"))  # authenticated, but no super-user
        page.click("#save-token")
        page.wait_for_function(
            "() => document.querySelector('#message').textContent.includes('403')",
            timeout=TIMEOUT_MS,
        )
        assert "is refused" in (message.text_content() or "")

        page.fill("#token", token(SUPER))
        page.click("#save-token")
        page.wait_for_function(
            """() => [...document.querySelectorAll(".tenant")]
                .some((t) => t.dataset.tenant === "public")""",
            timeout=TIMEOUT_MS,
        )
        assert page.is_hidden("#message")
        page.reload()  # the token stays with the tab (sessionStorage)
        page.wait_for_selector(".tenant", timeout=TIMEOUT_MS)
        assert page.input_value("#token") != ""
        assert watched.exceptions == []
    finally:
        watched.close()
        stop(broker)


def take_bundle_of(broker: BrokerThread, topic: str) -> str:
    """Make ``broker`` the owner of ``topic``'s bundle; the bundle's name."""
    assert broker.service is not None and broker.service.namespaces.ownership is not None
    ownership = broker.service.namespaces.ownership
    bundle = broker.run(ownership.bundle_of(TopicName.get(topic)))
    assert broker.run(ownership.acquire(bundle)) is ownership.me
    return str(bundle)


def topic_outside(broker: BrokerThread, bundle: str) -> str:
    """A fresh topic of public/default whose bundle is not ``bundle``."""
    assert broker.service is not None and broker.service.namespaces.ownership is not None
    ownership = broker.service.namespaces.ownership
    while True:
        topic = f"persistent://public/default/console-there-{uuid.uuid4().hex[:6]}"
        if str(broker.run(ownership.bundle_of(TopicName.get(topic)))) != bundle:
            return topic


def test_in_a_cluster_the_page_shows_each_broker_its_load_and_bundles(
    browser: Browser,
    zookeeper: ZooKeeperServer,
    zk_chroot: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Two brokers on ZooKeeper: the page on the first shows both with their load reports and
    the bundles each owns, and a topic's stats come through the page's broker whichever owns
    it (the admin API's own answer is a 307 that a page cannot follow to another origin)."""
    url = f"zk:{zookeeper.hosts}{zk_chroot}"
    brokers: list[BrokerThread] = []
    watched = Watched(browser)
    page = watched.page
    try:
        for i in range(2):
            config = broker_config(
                tmp_path_factory.mktemp(f"console-cluster-{i}"),
                metadataStoreUrl=url,
                loadBalancerReportUpdateMinIntervalMillis=200,
                loadBalancerReportUpdateThresholdPercentage=0,
            )
            brokers.append(BrokerThread(config).start())
        first, second = brokers
        here = f"persistent://public/default/console-here-{uuid.uuid4().hex[:6]}"
        bundle = take_bundle_of(first, here)
        there = topic_outside(second, bundle)
        ids = []
        for broker in brokers:
            assert broker.service is not None and broker.service.load_reporter is not None
            ids.append(broker.service.load_reporter.broker_id)
        with Producing(first.service_url, here):
            page.goto(first.http_url + "/console", timeout=TIMEOUT_MS)
            wait_for_figure_above_zero(page, here, ".rate-in .value")
            page.wait_for_function(
                """([ids, owner, bundle]) => {
                    const boxes = [...document.querySelectorAll(".broker")];
                    const shown = boxes.map((b) => b.dataset.broker).sort();
                    const mine = boxes.find((b) => b.dataset.broker === owner);
                    return JSON.stringify(shown) === JSON.stringify(ids.slice().sort())
                        && mine !== undefined && mine.textContent.includes(bundle)
                        && parseFloat(mine.querySelector(".rate-in .value").textContent) > 0;
                }""",
                arg=[ids, ids[0], bundle.split("/", 2)[2]],
                timeout=TIMEOUT_MS,
            )
            cpu = page.evaluate(
                "(id) => [...document.querySelectorAll('.broker')]"
                ".find((b) => b.dataset.broker === id).querySelector('.cpu .value').textContent",
                ids[1],
            )
            assert cpu.endswith("%") or cpu == "n/a"
            # Pulsar's path for this broker's own report, computed now.
            status, report = page.evaluate(
                """async () => {
                    const r = await fetch("/admin/v2/broker-stats/load-report");
                    return [r.status, await r.json()];
                }"""
            )
            assert status == 200 and bundle in report["bundles"] and report["numProducers"] == 1

        take_bundle_of(second, there)
        with Producing(second.service_url, there):
            local = TopicName.get(there).local_name
            answer = page.evaluate(
                """async (local) => {
                    const r = await fetch("/console/api/persistent/public/default/"
                        + encodeURIComponent(local) + "/stats");
                    return [r.status, r.redirected, await r.json()];
                }""",
                local,
            )
        status, redirected, stats = answer
        assert (status, redirected) == (200, False)
        assert stats["publishers"][0]["producerName"] == "console-producer"
        assert watched.problems == []
        assert watched.exceptions == []
    finally:
        watched.close()
        for broker in reversed(brokers):
            stop(broker)
