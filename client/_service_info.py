"""Which cluster a client talks to: pulsar-client's ``ServiceInfo``, ``ServiceInfoProvider`` and
``AutoClusterFailover`` (its names, parameters, defaults and argument errors).

Why these shapes: pulsar-client (3.13) takes them in place of the service URL,
``Client(AutoClusterFailover(primary, [secondary]))``, and refuses the client-level
``authentication`` and ``tls_trust_certs_file_path`` then: each cluster carries its own in its
``ServiceInfo``. An application moving to this SDK keeps its code. How the client follows a
change is in client/_cluster_switch.py; how AutoClusterFailover decides one, in
client/_cluster_failover.py.
"""

from __future__ import annotations

from collections.abc import Callable

from ._arguments import check_type, check_types
from ._auth import Authentication
from ._channels import WEB_SERVICE_SCHEMES, service_address

__all__ = ["AutoClusterFailover", "ServiceInfo", "ServiceInfoProvider"]


class ServiceInfo:
    """Connection information for one cluster: its service URL (``grpc://`` or
    ``grpc+ssl://``, or its web service, ``http://`` or ``https://``), the authentication and
    the trusted CAs to use there."""

    def __init__(
        self,
        service_url: str,
        authentication: Authentication | None = None,
        tls_trust_certs_file_path: str | None = None,
    ) -> None:
        check_types(
            service_url=(service_url, str, False),
            authentication=(authentication, Authentication, True),
            tls_trust_certs_file_path=(tls_trust_certs_file_path, str, True),
        )
        # Checked now: a typo in a secondary's URL must not wait for the primary to fail.
        self.target, self._tls = service_address(service_url)
        self._service_url = service_url
        self.authentication = authentication
        self._trust = tls_trust_certs_file_path

    @property
    def service_url(self) -> str:
        return self._service_url

    @property
    def web_service(self) -> bool:
        """Whether the URL is a broker's web service (http:// or https://), which the client
        asks its lookups over HTTP, rather than a gRPC service URL."""
        return self._service_url.startswith(WEB_SERVICE_SCHEMES)

    @property
    def use_tls(self) -> bool:
        return self._tls

    @property
    def tls_trust_certs_file_path(self) -> str | None:
        return self._trust

    def __repr__(self) -> str:
        return (
            f"ServiceInfo(service_url={self.service_url!r}, use_tls={self.use_tls!r}, "
            f"tls_trust_certs_file_path={self.tls_trust_certs_file_path!r})"
        )


class ServiceInfoProvider:
    """Base class for an application's own service discovery (pulsar-client's): the client
    starts with :meth:`initial_service_info`, then hands :meth:`initialize` a callback that
    switches it to another cluster (callable from any thread), and calls :meth:`close` when it
    closes."""

    def initial_service_info(self) -> ServiceInfo:
        raise NotImplementedError

    def initialize(self, on_service_info_update: Callable[[ServiceInfo], None]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop background work (the client is closing)."""
        return None


def _positive(**values: int) -> None:
    for name, value in values.items():
        check_type(int, value, name)
        if value <= 0:
            raise ValueError(f"Argument {name} is expected to be greater than 0")


class AutoClusterFailover:
    """Automatic cluster-level failover: the client uses ``primary`` and probes it every
    ``check_interval_ms``; after ``failover_threshold`` failed probes in a row it switches to
    the first reachable of ``secondary``, and back to the primary after
    ``switch_back_threshold`` successful probes of it in a row."""

    def __init__(
        self,
        primary: ServiceInfo,
        secondary: list[ServiceInfo],
        check_interval_ms: int = 5000,
        failover_threshold: int = 1,
        switch_back_threshold: int = 1,
    ) -> None:
        check_types(primary=(primary, ServiceInfo, False), secondary=(secondary, list, False))
        if not secondary:
            raise ValueError("Argument secondary is expected to contain at least one ServiceInfo")
        for index, service_info in enumerate(secondary):
            check_type(ServiceInfo, service_info, f"secondary[{index}]")
        _positive(
            check_interval_ms=check_interval_ms,
            failover_threshold=failover_threshold,
            switch_back_threshold=switch_back_threshold,
        )
        self.primary = primary
        self.secondary = list(secondary)
        self.check_interval_ms = check_interval_ms
        self.failover_threshold = failover_threshold
        self.switch_back_threshold = switch_back_threshold

    def __repr__(self) -> str:
        return (
            f"AutoClusterFailover(primary={self.primary!r}, secondary={self.secondary!r}, "
            f"check_interval_ms={self.check_interval_ms!r}, "
            f"failover_threshold={self.failover_threshold!r}, "
            f"switch_back_threshold={self.switch_back_threshold!r})"
        )
