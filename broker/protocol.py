"""The protocol-handler contract (PIP-41), the only way a transport plugs into the broker.

Handlers are found through the ``pulsar_grpc.protocol_handlers`` entry-point group and chosen by
``messagingProtocols``. The lifecycle is Pulsar's: ``initialize`` once configuration is known,
``protocol_data_to_advertise`` read before ``start`` (it goes into the broker's load data, so a
lookup can tell clients where this handler listens), ``start`` with the running broker,
``close`` on shutdown.

A handler sees the broker only through :class:`BrokerContext`, the few calls a transport needs,
never the broker service itself: the core can change behind it, and a new transport can be
written against this module alone.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol

from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration

if TYPE_CHECKING:
    from pulsar_grpc.broker.cluster.ownership import NamespaceEphemeralData
    from pulsar_grpc.broker.cluster.ownership_watch import OwnershipWatchService
    from pulsar_grpc.broker.listeners import BindAddress
    from pulsar_grpc.broker.lookup import LookupResult
    from pulsar_grpc.broker.naming import TopicName
    from pulsar_grpc.broker.schema import TopicSchemas
    from pulsar_grpc.broker.security.authentication import AuthenticationService
    from pulsar_grpc.broker.security.authorization import AuthorizationService
    from pulsar_grpc.broker.topics import PersistentTopic

ENTRY_POINT_GROUP = "pulsar_grpc.protocol_handlers"
log = logging.getLogger(__name__)


class BrokerContext(Protocol):
    """What a protocol handler may use of the running broker (BrokerService implements it)."""

    @property
    def bound(self) -> Mapping[BindAddress, int]:
        """The port each server socket really got, by bind address, for lookups and the load
        report to advertise (read-only: :meth:`record_bound` adds to it)."""

    def record_bound(self, bind: BindAddress, port: int) -> None:
        """A handler bound ``bind``'s socket to ``port`` (a configured 0 is resolved at bind
        time): the broker keeps it, the one owner of the bound ports."""

    @property
    def authentication(self) -> AuthenticationService | None:
        """Who a call is (authenticationEnabled); None: nothing is checked."""

    @property
    def authorization(self) -> AuthorizationService | None:
        """What a call's role may do (authorizationEnabled); None: everything. A handler
        checks before any side effect of the call."""

    @property
    def schemas(self) -> TopicSchemas:
        """Topics' schemas: a producer's or consumer's declared schema is applied here before
        it is added (IncompatibleSchemaError refuses it)."""

    @property
    def ownership_watches(self) -> OwnershipWatchService | None:
        """Clients' watches of their topics' bundle ownership (a cluster member's; None
        standalone, where bundles never move)."""

    def check_open(self) -> None:
        """Raise ServiceNotReadyError once the broker is closing."""

    async def get_topic(self, name: str | TopicName, create: bool = True) -> PersistentTopic:
        """The loaded topic, loading it (and creating it when ``create`` and the broker
        allows) first; NotOwnerError when another broker owns it."""

    async def lookup_topic(
        self, topic: str, requested: str | None, via: str | None, authoritative: bool = False
    ) -> LookupResult:
        """The owner's addresses for the listener ``requested`` (or the one the call came
        in on, ``via``), or a redirect (``redirect``) to the broker to ask next: the leader,
        or the broker the leader chose (then ``authoritative``). ``authoritative``: the
        client follows such an answer, and this broker takes the unowned bundle itself."""

    def owner_lookup(
        self, owner: NamespaceEphemeralData, requested: str | None, via: str | None
    ) -> LookupResult:
        """The addresses of ``owner`` (from a NotOwnerError) for the chosen listener."""

    async def get_partitioned_metadata(self, name: str) -> int:
        """Partitions of a topic, 0 when not partitioned (may auto-create, as Pulsar)."""

    async def list_topics(self, namespace: str) -> list[str]:
        """Every stored topic of ``namespace``."""


class ProtocolHandler(ABC):
    @abstractmethod
    def protocol_name(self) -> str:
        """The name ``messagingProtocols`` selects this handler by."""

    def accept(self, protocol: str) -> bool:
        return protocol.lower() == self.protocol_name()

    @abstractmethod
    def initialize(self, config: ServiceConfiguration) -> None:
        """Validate and keep the configuration; bind nothing yet."""

    @abstractmethod
    def protocol_data_to_advertise(self) -> str:
        """Endpoints to publish in the broker's load data, computed by ``initialize``."""

    @abstractmethod
    async def start(self, context: BrokerContext) -> None:
        """Open the handler's servers on the running broker."""

    async def drain(self) -> None:
        """The broker began shutting down: tell health checks at once, before any stream is
        ended, so that load balancers send new calls elsewhere (nothing to do by default)."""
        return

    @abstractmethod
    async def close(self) -> None:
        """Stop accepting, end open streams, release ports."""


def load_protocol_handlers(config: ServiceConfiguration) -> list[ProtocolHandler]:
    """Instantiate and initialize one handler per entry of ``messagingProtocols``."""
    available = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    handlers: list[ProtocolHandler] = []
    for protocol in config.messagingProtocols:
        ep = available.get(protocol)
        if ep is None:
            raise ConfigError(
                [
                    f"messagingProtocols: no protocol handler named '{protocol}' is installed "
                    f"(installed: {', '.join(sorted(available)) or 'none'})"
                ]
            )
        handler: ProtocolHandler = ep.load()()
        if not handler.accept(protocol):
            raise ConfigError([f"messagingProtocols: handler {ep.value} refuses '{protocol}'"])
        handler.initialize(config)
        handlers.append(handler)
    return handlers
