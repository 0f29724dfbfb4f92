"""Protocol handlers are found through entry points and chosen by messagingProtocols (PIP-41)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsar_grpc.broker.config import ConfigError
from pulsar_grpc.broker.protocol import ProtocolHandler, load_protocol_handlers
from tests.support import broker_config


def test_grpc_handler_is_loaded_and_initialized(tmp_path: Path) -> None:
    (handler,) = load_protocol_handlers(broker_config(tmp_path))
    assert isinstance(handler, ProtocolHandler)
    assert handler.protocol_name() == "grpc" and handler.accept("GRPC")
    # Read before start, as Pulsar reads it for the load report: already computed.
    assert '"internal"' in handler.protocol_data_to_advertise()


def test_unknown_protocol_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    config = broker_config(tmp_path)
    config.messagingProtocols = ["grpc", "kafka"]
    with pytest.raises(ConfigError, match="kafka") as err:
        load_protocol_handlers(config)
    assert "installed: grpc" in str(err.value)
