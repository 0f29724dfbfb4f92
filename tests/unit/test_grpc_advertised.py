"""The gRPC handler reads its own advertised data back from a lookup answer: the broker core
carries it as an opaque string and answers only the listener's advertised addresses."""

from __future__ import annotations

from pulsar_grpc.broker.listeners import Endpoint, Listener
from pulsar_grpc.broker.lookup import LookupResult
from pulsar_grpc.handler.advertised import advertise, grpc_urls


def answer(protocols: dict[str, str]) -> LookupResult:
    return LookupResult(
        listener="external",
        grpc_url="grpc://listener.example.com:6650",
        grpc_url_tls=None,
        http_url=None,
        http_url_tls=None,
        protocols=protocols,
    )


def test_the_handler_answers_from_its_own_advertised_data() -> None:
    data = advertise(
        {
            "internal": Listener("internal", {"grpc": Endpoint("10.0.0.1", 1)}),
            "external": Listener(
                "external",
                {"grpc": Endpoint("gw.example.com", 2), "grpc+ssl": Endpoint("gw.example.com", 3)},
            ),
        }
    )
    assert grpc_urls(answer({"grpc": data})) == (
        "grpc://gw.example.com:2",
        "grpc+ssl://gw.example.com:3",
    )
    # An owner whose handler advertised nothing for the listener: its listener's addresses.
    assert grpc_urls(answer({})) == ("grpc://listener.example.com:6650", None)
