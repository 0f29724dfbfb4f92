"""Which brokers the proxy may forward to (PIP-1's first step: "verify the target broker is
indeed a valid broker").

With a metadata store, the live members are those with a load report under
/loadbalance/brokers (an ephemeral node: it goes with the broker's session), and each one's
gRPC URLs are read from it: the internal ones (pulsarServiceUrl, pulsarServiceUrlTls) and those
of every advertised listener. With only brokerServiceURL / brokerServiceURLTLS, those URLs are
the brokers, plus the owners the brokers themselves answered in the proxy's own lookups (a
cluster behind one gateway URL): a client's header can never add one.

The member list is read again when it is older than :data:`REFRESH_S`, and at once (at most
every :data:`RECHECK_S`) when a call names a URL not in it: a broker that has just joined is
found without waiting, and a stream of forged URLs cannot make the proxy hammer the store.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable

from pulsar_grpc.broker.cluster import LISTENER_FIELDS
from pulsar_grpc.broker.cluster.load_report import LOADBALANCE_BROKERS_ROOT
from pulsar_grpc.broker.errors import InvalidArgumentError, ServiceNotReadyError
from pulsar_grpc.broker.listeners import GRPC_SCHEMES
from pulsar_grpc.broker.metadata.store import MetadataStore, MetadataStoreError
from pulsar_grpc.interceptors.headers import Header

log = logging.getLogger(__name__)

REFRESH_S = 5.0
RECHECK_S = 0.5
# Owners learned from lookup answers, without a store: the most recent ones are kept.
MAX_LEARNED = 1024
_GRPC_FIELDS = [f for f, scheme in LISTENER_FIELDS.items() if scheme in GRPC_SCHEMES]


class BrokerDirectory:
    """The live brokers' gRPC URLs, and one of them after another for the proxy's lookups."""

    def __init__(
        self,
        store: MetadataStore | None,
        static_urls: Iterable[str],
        tls: bool,
    ) -> None:
        self._store = store
        self._static = [u for u in static_urls if u]
        self._tls = tls
        # Per broker id (its load-report node): its gRPC URLs; the service URLs to ask first.
        self._members: dict[str, frozenset[str]] = {}
        self._service_urls: list[str] = []
        self._read_at = -REFRESH_S
        self._learned: OrderedDict[str, None] = OrderedDict()
        self._turn = itertools.count()
        self._refreshing: asyncio.Lock = asyncio.Lock()

    def _urls(self) -> set[str]:
        urls = {u for member in self._members.values() for u in member}
        return urls | set(self._static) | set(self._learned)

    async def _refresh(self, max_age: float) -> None:
        """Read the member list again if it is older than ``max_age``. While the store cannot
        be read (ZooKeeper away for a moment), the last list stands and is not asked for again
        before ``max_age``; with no list at all, calls fail as retryable."""
        if self._store is None:
            return
        async with self._refreshing:
            if time.monotonic() - self._read_at < max_age:
                return  # another call read it meanwhile
            try:
                self._members, self._service_urls = await self._read(self._store)
            except MetadataStoreError as exc:
                if not self._members:
                    raise ServiceNotReadyError(f"cannot read the brokers' list: {exc}") from None
                log.warning("keeping the last list of brokers: cannot read it again: %s", exc)
            self._read_at = time.monotonic()

    async def _read(self, store: MetadataStore) -> tuple[dict[str, frozenset[str]], list[str]]:
        """Every live broker's gRPC URLs, by broker id; the URLs to ask first, sorted."""
        names = await store.get_children(LOADBALANCE_BROKERS_ROOT)
        paths = [f"{LOADBALANCE_BROKERS_ROOT}/{n}" for n in names]
        found = await asyncio.gather(*(store.get(path) for path in paths))
        members: dict[str, frozenset[str]] = {}
        service_urls: list[str] = []
        for name, node in zip(names, found, strict=True):
            if node is None:
                continue  # gone between the listing and the read
            try:
                report = json.loads(node.value)
                urls = _grpc_urls(report)
            except (ValueError, TypeError, AttributeError):
                log.warning("ignoring the unreadable load report of broker %s", name)
                continue
            members[name] = urls
            internal = report.get("pulsarServiceUrlTls" if self._tls else "pulsarServiceUrl")
            if internal:
                service_urls.append(internal)
        return members, sorted(service_urls)

    async def service_url(self) -> str:
        """A broker to ask (lookups, metadata): each live one in turn."""
        await self._refresh(REFRESH_S)
        urls = self._service_urls or [u for u in self._static if _is_tls(u) is self._tls]
        if not urls:
            scheme = "grpc+ssl" if self._tls else "grpc"
            raise ServiceNotReadyError(f"the proxy knows no live broker with a {scheme} address")
        return urls[next(self._turn) % len(urls)]

    async def check(self, url: str) -> str:
        """``url`` when it is a live broker's gRPC URL; InvalidArgumentError otherwise, so a
        header naming any other address is never forwarded to (not an open relay)."""
        if url in self._urls():
            return url
        await self._refresh(RECHECK_S)
        if url in self._urls():
            return url
        raise InvalidArgumentError(
            f"{Header.PROXY_TO_BROKER_URL}: {url[:200]!r} is not a broker of this cluster"
        )

    def learn(self, url: str) -> None:
        """An owner a broker answered to the proxy's own lookup: without a store it is how the
        proxy knows the brokers behind its brokerServiceURL."""
        if self._store is not None or not url:
            return
        self._learned[url] = None
        self._learned.move_to_end(url)
        while len(self._learned) > MAX_LEARNED:
            self._learned.popitem(last=False)


def _grpc_urls(report: dict[str, object]) -> frozenset[str]:
    """Every gRPC URL a load report (LocalBrokerData) names for its broker."""
    urls = {report.get("pulsarServiceUrl"), report.get("pulsarServiceUrlTls")}
    listeners = report.get("advertisedListeners") or {}
    if not isinstance(listeners, dict):
        raise TypeError("advertisedListeners is not an object")
    for listener in listeners.values():
        urls.update(listener.get(f) for f in _GRPC_FIELDS)
    return frozenset(u for u in urls if isinstance(u, str) and u)


def _is_tls(url: str) -> bool:
    return url.startswith("grpc+ssl://")
