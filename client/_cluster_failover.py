"""Which cluster a client uses: the provider behind its ``service_url`` argument
(:func:`provider_for`), and how :class:`AutoClusterFailover` decides: a probe of the clusters every
``check_interval_ms``, counted against the thresholds (pulsar-client-cpp's
AutoClusterFailoverImpl, which pulsar-client 3.13 wraps).

A probe is a TCP connect to the service URL's address, as Pulsar's: it says the cluster's front
door answers, whatever the state of a topic. On the primary, ``failover_threshold`` failed
probes in a row switch to the first secondary that answers a probe (none answering: the client
stays and tries again next time). On a secondary, the primary is probed every time too:
``switch_back_threshold`` answers in a row switch back; and once the secondary itself failed
``failover_threshold`` probes in a row, the first answer of the primary switches back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable

from ._auth import Authentication
from ._service_info import AutoClusterFailover, ServiceInfo, ServiceInfoProvider

__all__ = ["AutoFailoverProvider", "OneCluster", "initial_service_info", "probe", "provider_for"]

log = logging.getLogger("pulsar_grpc.client")

# A probe that neither connects nor fails within this long failed (pulsar-client-cpp's).
PROBE_TIMEOUT_S = 30.0

Probe = Callable[[ServiceInfo], Awaitable[bool]]


async def probe(service_info: ServiceInfo, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the cluster's service address opens."""
    host, _, port = service_info.target.rpartition(":")
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
    except (OSError, TimeoutError, ValueError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


class Serving(enum.Enum):
    PRIMARY = "primary"
    SECONDARY = "secondary"


class AutoFailoverProvider(ServiceInfoProvider):
    """:class:`AutoClusterFailover` as the client's provider of service information: a task
    on the client's loop probes and, when the thresholds say so, calls the update callback."""

    def __init__(self, config: AutoClusterFailover, probe: Probe = probe) -> None:
        self.config = config
        self._probe = probe
        self.current = config.primary
        self._failures = 0  # failed probes of the current cluster in a row
        self._recoveries = 0  # answers of the primary in a row, while on a secondary
        self._update: Callable[[ServiceInfo], None] = lambda _: None
        self._task: asyncio.Task[None] | None = None

    @property
    def serving(self) -> Serving:
        return Serving.PRIMARY if self.current is self.config.primary else Serving.SECONDARY

    def initial_service_info(self) -> ServiceInfo:
        return self.config.primary

    def initialize(self, on_service_info_update: Callable[[ServiceInfo], None]) -> None:
        self._update = on_service_info_update
        self._task = asyncio.get_running_loop().create_task(self._run())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        interval_s = self.config.check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            await self.check()

    async def check(self) -> None:
        """One round of probes (see the module doc)."""
        if await self._probe(self.current):
            self._failures = 0
        else:
            self._failures += 1
        failing = self._failures >= self.config.failover_threshold
        if self.serving is Serving.PRIMARY:
            if failing:
                await self._fail_over()
            return
        if not await self._probe(self.config.primary):
            self._recoveries = 0
            return
        self._recoveries += 1
        if failing or self._recoveries >= self.config.switch_back_threshold:
            self._switch(self.config.primary)

    async def _fail_over(self) -> None:
        for secondary in self.config.secondary:
            if await self._probe(secondary):
                self._switch(secondary)
                return
        # Said once when it happens, not at every check while it lasts.
        say = log.warning if self._failures == self.config.failover_threshold else log.debug
        say("%s is unreachable and so is every secondary", self.current.service_url)

    def _switch(self, service_info: ServiceInfo) -> None:
        self.current = service_info
        self._failures = self._recoveries = 0
        self._update(service_info)


class OneCluster(ServiceInfoProvider):
    """A plain service URL: the client stays on its one cluster."""

    def __init__(self, service_info: ServiceInfo) -> None:
        self._service_info = service_info

    def initial_service_info(self) -> ServiceInfo:
        return self._service_info

    def initialize(self, on_service_info_update: Callable[[ServiceInfo], None]) -> None:
        return None


ServiceSpec = str | AutoClusterFailover | ServiceInfoProvider


def provider_for(
    service_url: ServiceSpec,
    authentication: Authentication | None,
    tls_trust_certs_file_path: str | None,
) -> ServiceInfoProvider:
    """The provider behind a client's ``service_url`` argument. As pulsar-client's, a client
    given several clusters refuses its own ``authentication`` and ``tls_trust_certs_file_path``:
    each :class:`ServiceInfo` carries those of its cluster."""
    if isinstance(service_url, str):
        return OneCluster(ServiceInfo(service_url, authentication, tls_trust_certs_file_path))
    if not isinstance(service_url, AutoClusterFailover | ServiceInfoProvider):
        raise ValueError(
            "Argument service_url is expected to be of type 'str', 'AutoClusterFailover' or "
            "'ServiceInfoProvider'"
        )
    for name, value in (
        ("authentication", authentication),
        ("tls_trust_certs_file_path", tls_trust_certs_file_path),
    ):
        if value is not None:
            raise ValueError(
                f"Argument {name} is not supported when service_url is an AutoClusterFailover "
                f"or ServiceInfoProvider; set {name} on each ServiceInfo instead"
            )
    if isinstance(service_url, AutoClusterFailover):
        return AutoFailoverProvider(service_url)
    return service_url


def initial_service_info(provider: ServiceInfoProvider) -> ServiceInfo:
    """The provider's first cluster, checked (an application's provider may return anything)."""
    service_info = provider.initial_service_info()
    if not isinstance(service_info, ServiceInfo):
        raise ValueError("Expected a pulsar_grpc.client.ServiceInfo instance")
    return service_info
