"""Listeners on a real broker (PIP-95, PIP-338): one broker bound on 127.0.0.1 for listener
``internal`` and on 127.0.0.2 for listener ``external``, each advertised under a host name of
its own. A lookup answers the addresses of the listener the client came through, unless it
names another; through a primary address, lookupListenerName's, else the internal listener's.
The same over gRPC and over Pulsar's HTTP lookup endpoint. Then the Python client: given the
internal address and ``listener_name="external"``, it connects where the lookup says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc
import pytest

from pulsar_grpc.client import Client, ConnectError
from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pbg
from tests.support import BrokerThread

INTERNAL_HOST = "127.0.0.1"
EXTERNAL_HOST = "127.0.0.2"
TOPIC = "persistent://public/default/t"
# Addresses a gateway terminates TLS on for the external listener: advertised, never bound by
# the broker (PIP-95 allows that), so lookups must still answer them.
EXTERNAL_TLS = (
    "external:grpc+ssl://broker.example.com:6651,external:https://broker.example.com:8443"
)


def free_ports(*hosts: str) -> list[int]:
    """One free port per host, all held until every one is chosen (so none repeats)."""
    sockets = []
    try:
        for host in hosts:
            s = socket.socket()
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class Ports:
    grpc_internal: int  # bound on 127.0.0.1, listener internal
    http_internal: int
    grpc_external: int  # bound on 127.0.0.2, listener external
    http_external: int
    grpc_primary: int  # bindAddress 127.0.0.1, no listener
    http_primary: int

    @classmethod
    def pick(cls) -> Ports:
        i, e = INTERNAL_HOST, EXTERNAL_HOST
        return cls(*free_ports(i, i, e, e, i, i))


def two_listener_config(
    ports: Ports, internal_host: str, external_grpc: str, **extra: str
) -> dict[str, str]:
    """``external_grpc`` is the external listener's advertised gRPC ``host:port``."""
    p = ports
    return {
        "advertisedListeners": ",".join(
            [
                f"internal:grpc://{internal_host}:{p.grpc_internal}",
                f"internal:http://{internal_host}:{p.http_internal}",
                f"external:grpc://{external_grpc}",
                f"external:http://broker.example.com:{p.http_external}",
                EXTERNAL_TLS,
            ]
        ),
        "bindAddresses": ",".join(
            [
                f"internal:grpc://{INTERNAL_HOST}:{p.grpc_internal}",
                f"internal:http://{INTERNAL_HOST}:{p.http_internal}",
                f"external:grpc://{EXTERNAL_HOST}:{p.grpc_external}",
                f"external:http://{EXTERNAL_HOST}:{p.http_external}",
            ]
        ),
        "bindAddress": INTERNAL_HOST,
        "grpcServicePort": str(p.grpc_primary),
        "webServicePort": str(p.http_primary),
        **extra,
    }


def internal_answer(p: Ports) -> dict[str, str]:
    return {
        "listener_name": "internal",
        "grpc_url": f"grpc://broker.internal:{p.grpc_internal}",
        "grpc_url_tls": "",
        "http_url": f"http://broker.internal:{p.http_internal}",
        "http_url_tls": "",
    }


def external_answer(p: Ports) -> dict[str, str]:
    return {
        "listener_name": "external",
        "grpc_url": f"grpc://broker.example.com:{p.grpc_external}",
        "grpc_url_tls": "grpc+ssl://broker.example.com:6651",
        "http_url": f"http://broker.example.com:{p.http_external}",
        "http_url_tls": "https://broker.example.com:8443",
    }


def as_lookup_data(answer: dict[str, str]) -> dict[str, str | None]:
    """The HTTP endpoint's JSON for a gRPC answer (absent URLs are null there)."""

    def url(key: str) -> str | None:
        return answer[key] or None

    return {
        "brokerUrl": url("grpc_url"),
        "brokerUrlTls": url("grpc_url_tls"),
        "httpUrl": url("http_url"),
        "httpUrlTls": url("http_url_tls"),
        "grpcUrl": url("grpc_url"),
        "grpcUrlTls": url("grpc_url_tls"),
    }


@dataclass
class ListenerBroker:
    broker: BrokerThread
    ports: Ports

    @property
    def grpc_addresses(self) -> dict[str, str]:
        p = self.ports
        return {
            "internal": f"{INTERNAL_HOST}:{p.grpc_internal}",
            "external": f"{EXTERNAL_HOST}:{p.grpc_external}",
            "primary": f"{INTERNAL_HOST}:{p.grpc_primary}",
        }

    @property
    def http_urls(self) -> dict[str, str]:
        p = self.ports
        return {
            "internal": f"http://{INTERNAL_HOST}:{p.http_internal}",
            "external": f"http://{EXTERNAL_HOST}:{p.http_external}",
            "primary": f"http://{INTERNAL_HOST}:{p.http_primary}",
        }


@pytest.fixture
def listener_broker(
    broker_factory: Callable[..., BrokerThread],
) -> Callable[..., ListenerBroker]:
    def make(**extra: str) -> ListenerBroker:
        ports = Ports.pick()
        config = two_listener_config(
            ports, "broker.internal", f"broker.example.com:{ports.grpc_external}", **extra
        )
        return ListenerBroker(broker_factory(**config), ports)

    return make


async def grpc_lookup(
    address: str, topic: str = TOPIC, header: str | None = None, listener_name: str = ""
) -> dict[str, Any]:
    metadata = (("x-pulsar-listenername", header),) if header is not None else None
    async with grpc.aio.insecure_channel(address) as channel:
        response = await pbg.PulsarServiceStub(channel).Lookup(
            pb.LookupRequest(topic=topic, listener_name=listener_name),
            metadata=metadata,
            timeout=10,
        )
    assert response.response == pb.LookupResponse.Connect
    assert response.authoritative
    return {
        "listener_name": response.listener_name,
        "grpc_url": response.grpc_url,
        "grpc_url_tls": response.grpc_url_tls,
        "http_url": response.http_url,
        "http_url_tls": response.http_url_tls,
    }


async def grpc_lookup_error(address: str, **kwargs: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await grpc_lookup(address, **kwargs)
    return info.value


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def http_lookup(
    http: aiohttp.ClientSession,
    base: str,
    query: str = "",
    header: str | None = None,
    expect: int = 200,
) -> dict[str, Any]:
    headers = {"X-Pulsar-ListenerName": header} if header is not None else {}
    url = f"{base}/lookup/v2/topic/persistent/public/default/t{query}"
    async with http.get(url, headers=headers) as response:
        body = await response.json()
        assert response.status == expect, body
    return body


LOOKUP_DATA_KEYS = ("brokerUrl", "brokerUrlTls", "httpUrl", "httpUrlTls", "grpcUrl", "grpcUrlTls")


def url_fields(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body.get(k, "<absent>") for k in LOOKUP_DATA_KEYS}


# --------------------------------------------------------------------------- gRPC lookups


async def test_grpc_lookup_through_each_bind_address_answers_its_listener(listener_broker):
    lb = listener_broker()
    p = lb.ports
    assert await grpc_lookup(lb.grpc_addresses["internal"]) == internal_answer(p)
    assert await grpc_lookup(lb.grpc_addresses["external"]) == external_answer(p)
    # A partition and a short name are answered the same way.
    assert await grpc_lookup(
        lb.grpc_addresses["external"], topic="t-partition-3"
    ) == external_answer(p)


async def test_grpc_listener_header_and_request_field_override_the_bind_address(
    listener_broker,
):
    lb = listener_broker()
    p = lb.ports
    internal, external = lb.grpc_addresses["internal"], lb.grpc_addresses["external"]
    assert await grpc_lookup(internal, header="external") == external_answer(p)
    assert await grpc_lookup(external, header="internal") == internal_answer(p)
    assert await grpc_lookup(internal, listener_name="external") == external_answer(p)
    # The request's field is the more specific of the two (pulsar.proto).
    assert await grpc_lookup(
        internal, header="internal", listener_name="external"
    ) == external_answer(p)
    # An empty header names no listener.
    assert await grpc_lookup(external, header="") == external_answer(p)


async def test_grpc_unknown_listener_is_invalid_argument_naming_it(listener_broker):
    lb = listener_broker()
    for address in lb.grpc_addresses.values():
        error = await grpc_lookup_error(address, header="nope")
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "'nope'" in (error.details() or "")
        error = await grpc_lookup_error(address, listener_name="nope2")
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "'nope2'" in (error.details() or "")
    # Streams are refused the same way, before anything is opened.
    async with grpc.aio.insecure_channel(lb.grpc_addresses["internal"]) as channel:
        call = pbg.PulsarServiceStub(channel).Produce(
            metadata=(("x-pulsar-topic", TOPIC), ("x-pulsar-listenername", "nope3"))
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(call.read(), 10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "'nope3'" in (info.value.details() or "")


async def test_grpc_lookup_through_primary_address_answers_internal_listener(listener_broker):
    lb = listener_broker()
    assert await grpc_lookup(lb.grpc_addresses["primary"]) == internal_answer(lb.ports)
    assert await grpc_lookup(lb.grpc_addresses["primary"], header="external") == external_answer(
        lb.ports
    )


async def test_grpc_lookup_through_primary_address_answers_lookup_listener_name(
    listener_broker,
):
    lb = listener_broker(lookupListenerName="external")
    p = lb.ports
    assert await grpc_lookup(lb.grpc_addresses["primary"]) == external_answer(p)
    # The bind address's listener still wins over lookupListenerName, and a header over both.
    assert await grpc_lookup(lb.grpc_addresses["internal"]) == internal_answer(p)
    assert await grpc_lookup(lb.grpc_addresses["primary"], header="internal") == internal_answer(p)


# --------------------------------------------------------------------------- HTTP lookups


async def test_http_lookup_through_each_bind_address_answers_its_listener(listener_broker, http):
    lb = listener_broker()
    p = lb.ports
    internal = await http_lookup(http, lb.http_urls["internal"])
    assert url_fields(internal) == as_lookup_data(internal_answer(p))
    external = await http_lookup(http, lb.http_urls["external"])
    assert url_fields(external) == as_lookup_data(external_answer(p))
    primary = await http_lookup(http, lb.http_urls["primary"])
    assert url_fields(primary) == as_lookup_data(internal_answer(p))


async def test_http_query_then_header_override_the_bind_address(listener_broker, http):
    lb = listener_broker()
    p = lb.ports
    internal, external = lb.http_urls["internal"], lb.http_urls["external"]
    ext, int_ = as_lookup_data(external_answer(p)), as_lookup_data(internal_answer(p))
    assert url_fields(await http_lookup(http, internal, "?listenerName=external")) == ext
    assert url_fields(await http_lookup(http, internal, header="external")) == ext
    assert url_fields(await http_lookup(http, external, header="internal")) == int_
    # The query parameter comes before the header.
    body = await http_lookup(http, external, "?listenerName=internal", header="external")
    assert url_fields(body) == int_


async def test_http_unknown_listener_is_400_naming_it(listener_broker, http):
    lb = listener_broker()
    for base in lb.http_urls.values():
        body = await http_lookup(http, base, "?listenerName=nope", expect=400)
        assert "'nope'" in body["reason"]
        body = await http_lookup(http, base, header="nope2", expect=400)
        assert "'nope2'" in body["reason"]


async def test_http_lookup_through_primary_address_answers_lookup_listener_name(
    listener_broker, http
):
    lb = listener_broker(lookupListenerName="external")
    p = lb.ports
    primary = await http_lookup(http, lb.http_urls["primary"])
    assert url_fields(primary) == as_lookup_data(external_answer(p))
    internal = await http_lookup(http, lb.http_urls["internal"])
    assert url_fields(internal) == as_lookup_data(internal_answer(p))


# --------------------------------------------------------------------------- advertised data


def test_protocol_data_lists_grpc_endpoints_of_every_listener(listener_broker):
    lb = listener_broker()
    assert lb.broker.service is not None
    (handler,) = lb.broker.service.handlers
    assert handler.protocol_name() == "grpc"
    assert json.loads(handler.protocol_data_to_advertise()) == {
        "internal": {"grpc": f"grpc://broker.internal:{lb.ports.grpc_internal}"},
        "external": {
            "grpc": f"grpc://broker.example.com:{lb.ports.grpc_external}",
            "grpc+ssl": "grpc+ssl://broker.example.com:6651",
        },
    }


# --------------------------------------------------------------------------- the client


class Gateway:
    """A TCP forwarder standing in for an ingress gateway: the external listener advertises
    its address, so a connection here proves a client went where the lookup answered."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._accept, host, port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                up_writer.close()
        except asyncio.CancelledError:
            # Ended by close(). Return normally: on Python 3.11 asyncio.start_server's done
            # callback raises (on the loop) for a handler task that ends cancelled.
            return
        finally:
            writer.close()
            self._tasks.discard(task)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError, RuntimeError):
        writer.write_eof()


@pytest.fixture
async def gateway_broker(
    broker_factory: Callable[..., BrokerThread],
) -> AsyncIterator[tuple[ListenerBroker, Gateway, int]]:
    """The two-listener broker with resolvable advertised addresses: internal as 127.0.0.1
    (its bind address), external as a gateway's port on 127.0.0.2 that forwards to the
    external bind address."""
    ports = Ports.pick()
    (gateway_port,) = free_ports(EXTERNAL_HOST)
    config = two_listener_config(ports, INTERNAL_HOST, f"{EXTERNAL_HOST}:{gateway_port}")
    lb = ListenerBroker(broker_factory(**config), ports)
    gateway = Gateway((EXTERNAL_HOST, ports.grpc_external))
    await gateway.start(EXTERNAL_HOST, gateway_port)
    try:
        yield lb, gateway, gateway_port
    finally:
        await gateway.close()


async def produce_and_consume(c: Client, topic: str, payload: bytes) -> bytes:
    producer = await c.create_producer(topic, batching_max_messages=1)
    await producer.send(payload)
    consumer = await c.subscribe(topic, "sub", initial_position="earliest")
    msg = await consumer.receive(timeout_ms=10000)
    await consumer.acknowledge(msg)
    await producer.close()
    await consumer.close()
    return msg.data()


async def test_client_with_external_listener_connects_to_the_answered_address(gateway_broker):
    lb, gateway, gateway_port = gateway_broker
    internal_url = f"grpc://{lb.grpc_addresses['internal']}"
    async with Client(internal_url, listener_name="external") as c:
        result = await c.lookup("t")
        assert result.listener_name == "external"
        assert result.grpc_url == f"grpc://{EXTERNAL_HOST}:{gateway_port}"
        assert await produce_and_consume(c, "t", b"via the gateway") == b"via the gateway"
    through_gateway = gateway.connections
    assert through_gateway >= 1

    # Without a listener name, the internal address answers the internal listener.
    async with Client(internal_url) as c:
        assert (await c.lookup("t")).grpc_url == internal_url
        assert await produce_and_consume(c, "t2", b"direct") == b"direct"
    assert gateway.connections == through_gateway

    # With the gateway down, the external client fails: it never falls back to the service URL.
    await gateway.close()
    async with Client(internal_url, listener_name="external", operation_timeout_ms=5000) as c:
        with pytest.raises(ConnectError):
            await c.create_producer("t")


# --------------------------------------------------------------------------- host-name binds


@pytest.fixture
def host_name_bind_broker(
    broker_factory: Callable[..., BrokerThread],
) -> tuple[BrokerThread, dict[str, int]]:
    """Listener external bound by host name (``localhost``), internal by IP address."""
    g1, h1, g2, h2 = free_ports(INTERNAL_HOST, INTERNAL_HOST, INTERNAL_HOST, INTERNAL_HOST)
    broker = broker_factory(
        advertisedListeners=(
            f"internal:grpc://int.example:{g1},internal:http://int.example:{h1},"
            f"external:grpc://ext.example:{g2},external:http://ext.example:{h2}"
        ),
        bindAddresses=(
            f"internal:grpc://127.0.0.1:{g1},internal:http://127.0.0.1:{h1},"
            f"external:grpc://localhost:{g2},external:http://localhost:{h2}"
        ),
        grpcServicePort="",
        webServicePort="",
    )
    return broker, {"g1": g1, "h1": h1, "g2": g2, "h2": h2}


async def test_grpc_bind_address_given_by_host_name_answers_its_listener(host_name_bind_broker):
    _, p = host_name_bind_broker
    answer = await grpc_lookup(f"localhost:{p['g2']}")
    assert (answer["listener_name"], answer["grpc_url"]) == (
        "external",
        f"grpc://ext.example:{p['g2']}",
    )


async def test_http_bind_address_given_by_host_name_answers_its_listener(
    host_name_bind_broker, http
):
    _, p = host_name_bind_broker
    body = await http_lookup(http, f"http://localhost:{p['h2']}")
    assert body["httpUrl"] == f"http://ext.example:{p['h2']}"
