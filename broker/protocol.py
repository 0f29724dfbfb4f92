"""The protocol-handler contract (PIP-41), the only way a transport plugs into the broker.

Handlers are found through the ``pulsar_grpc.protocol_handlers`` entry-point group and chosen by
``messagingProtocols``. The lifecycle is Pulsar's: ``initialize`` once configuration is known,
``protocol_data_to_advertise`` read before ``start`` (it goes into the broker's load data, so a
lookup can tell clients where this handler listens), ``start`` with the running broker service,
``close`` on shutdown.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration

if TYPE_CHECKING:
    from pulsar_grpc.broker.service import BrokerService

ENTRY_POINT_GROUP = "pulsar_grpc.protocol_handlers"
log = logging.getLogger(__name__)


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
    async def start(self, service: BrokerService) -> None:
        """Open the handler's servers on the running broker."""

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
