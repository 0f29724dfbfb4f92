"""The client looks topics up and connects where the answer says: lookup-then-connect,
redirects (bounded), the listener name on every call, TLS chosen by the answered scheme.

Fake brokers on loopback stand in for a cluster: the one at the service URL answers lookups,
the others own topics; each records the calls it got.
"""

from __future__ import annotations

import grpc
import pytest

from pulsar_grpc import client
from pulsar_grpc.client import Client, LookupResult
from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pb_grpc
from tests.tls import make_tls_files, tls_files_fixture  # noqa: F401
from tests.unit.test_client_fake_server import FakeBroker, fake_broker

CONNECT = pb.LookupResponse.Connect
REDIRECT = pb.LookupResponse.Redirect


def answer(url: str, response: int = CONNECT, **fields: str) -> pb.LookupResponse:
    tls = url.startswith("grpc+ssl://")
    return pb.LookupResponse(
        response=response,  # type: ignore[arg-type]
        authoritative=response == CONNECT,
        grpc_url="" if tls else url,
        grpc_url_tls=url if tls else "",
        **fields,
    )


def stream_topics(fake: FakeBroker) -> list[str]:
    return [md["x-pulsar-topic"] for md in fake.metadata]


async def produce_and_consume(c: Client, topic: str) -> bytes:
    producer = await c.create_producer(topic, batching_max_messages=1)
    await producer.send(b"payload")
    consumer = await c.subscribe(topic, "sub", initial_position="earliest")
    msg = await consumer.receive(timeout_ms=5000)
    return msg.data()


async def test_streams_open_on_the_looked_up_broker_not_the_service_url():
    async with fake_broker() as service, fake_broker() as owner:
        service.lookup_answers["t"] = answer(owner.url)
        async with Client(service.url) as c:
            assert await produce_and_consume(c, "t") == b"payload"
            reader = await c.create_reader("t", "earliest")
            await reader.close()
        assert stream_topics(service) == []
        assert stream_topics(owner) == ["t", "t", "t"]
        assert [r.topic for r, _ in service.lookups] == ["t", "t", "t"]
        assert owner.lookups == []


async def test_partitions_are_looked_up_one_by_one_and_served_where_answered():
    async with fake_broker() as service, fake_broker() as b1, fake_broker() as b2:
        service.partitions["orders"] = 2
        # The service broker owns nothing: its own streams would show up in its metadata.
        service.lookup_answers["orders-partition-0"] = answer(b1.url)
        service.lookup_answers["orders-partition-1"] = answer(b2.url)
        async with Client(service.url) as c:
            producer = await c.create_producer("orders")
            await producer.close()
            consumer = await c.subscribe("orders", "s")
            await consumer.close()
        assert stream_topics(service) == []
        assert stream_topics(b1) == ["orders-partition-0"] * 2
        assert stream_topics(b2) == ["orders-partition-1"] * 2
        # Partition metadata is asked of the service URL only.
        assert b1.lookups == b2.lookups == []


async def test_redirects_are_followed_to_the_authoritative_broker():
    async with fake_broker() as service, fake_broker() as middle, fake_broker() as owner:
        service.lookup_answers["t"] = answer(middle.url, REDIRECT)
        middle.lookup_answers["t"] = answer(owner.url, REDIRECT)
        owner.lookup_answers["t"] = answer(owner.url, http_url="http://owner:8080")
        async with Client(service.url, listener_name="external") as c:
            result = await c.lookup("t")
            assert result == LookupResult(
                grpc_url=owner.url,
                grpc_url_tls="",
                http_url="http://owner:8080",
                http_url_tls="",
                authoritative=True,
                redirect=False,
                listener_name="",
            )
            producer = await c.create_producer("t")
            await producer.close()
        assert stream_topics(owner) == ["t"]
        assert stream_topics(service) == stream_topics(middle) == []
        # Every hop is asked for the client's listener.
        for fake in (service, middle, owner):
            assert len(fake.lookups) == 2
            for request, md in fake.lookups:
                assert request.listener_name == "external"
                assert md["x-pulsar-listenername"] == "external"


async def test_each_hop_is_asked_with_the_authoritative_flag_of_the_redirect_it_follows():
    # Pulsar's lookup: a non-leader sends the client to the leader (not authoritative), the
    # leader to the broker it chose (authoritative: that broker takes the bundle itself).
    async with fake_broker() as service, fake_broker() as leader, fake_broker() as chosen:
        service.lookup_answers["t"] = answer(leader.url, REDIRECT)
        leader.lookup_answers["t"] = pb.LookupResponse(
            response=REDIRECT, authoritative=True, grpc_url=chosen.url
        )
        chosen.lookup_answers["t"] = answer(chosen.url)
        async with Client(service.url) as c:
            assert (await c.lookup("t")).grpc_url == chosen.url
        assert [r.authoritative for r, _ in service.lookups] == [False]
        assert [r.authoritative for r, _ in leader.lookups] == [False]
        assert [r.authoritative for r, _ in chosen.lookups] == [True]


async def test_redirect_loop_ends_with_a_clear_error_after_the_bound():
    async with fake_broker() as service:
        service.lookup_answers["t"] = answer(service.url, REDIRECT)
        async with Client(service.url, max_lookup_redirects=3) as c:
            with pytest.raises(client.LookupFailed, match="redirected more than 3 times") as info:
                await c.create_producer("t")
        assert str(info.value).count(service.url) == 5  # the service URL and 4 redirects
        assert len(service.lookups) == 4  # the first lookup and 3 redirects followed
        assert service.metadata == []  # no stream was opened


async def test_answer_without_grpc_address_is_a_lookup_error():
    async with fake_broker() as service:
        service.lookup_answers["t"] = pb.LookupResponse(
            http_url="http://h:8080", listener_name="internal"
        )
        async with Client(service.url) as c:
            with pytest.raises(client.LookupFailed, match=r"no gRPC address.*'internal'"):
                await c.subscribe("t", "s")
        assert service.metadata == []


async def test_lookup_error_from_the_broker_surfaces():
    class Refusing(FakeBroker):
        async def Lookup(self, request, context):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown listener 'nope'")

    server = grpc.aio.server()
    pb_grpc.add_PulsarServiceServicer_to_server(Refusing(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with Client(f"grpc://127.0.0.1:{port}", listener_name="nope") as c:
            with pytest.raises(client.PulsarError, match="unknown listener 'nope'") as info:
                await c.create_producer("t")
            assert info.value.status == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await server.stop(None)


async def test_listener_name_travels_on_every_call():
    async with fake_broker() as service, fake_broker() as owner:
        service.lookup_answers["t"] = answer(owner.url)
        async with Client(service.url, listener_name="external") as c:
            assert await produce_and_consume(c, "t") == b"payload"
        assert len(service.lookups) == 2
        assert all(r.listener_name == "external" for r, _ in service.lookups)
        assert all(md["x-pulsar-listenername"] == "external" for _, md in service.lookups)
        assert [md["x-pulsar-listenername"] for md in owner.metadata] == ["external"] * 2


async def test_without_listener_name_no_listener_header_is_sent():
    async with fake_broker() as service:
        async with Client(service.url) as c:
            assert await produce_and_consume(c, "t") == b"payload"
        assert all(r.listener_name == "" for r, _ in service.lookups)
        calls = [md for _, md in service.lookups] + service.metadata
        assert len(calls) == 4
        assert all("x-pulsar-listenername" not in md for md in calls)


@pytest.mark.parametrize(
    ("grpc_url", "grpc_url_tls", "prefer_tls", "expected"),
    [
        ("grpc://a:1", "grpc+ssl://a:2", False, ("a:1", False)),
        ("grpc://a:1", "grpc+ssl://a:2", True, ("a:2", True)),
        ("grpc://a:1", "", True, ("a:1", False)),
        ("", "grpc+ssl://a:2", False, ("a:2", True)),
        ("grpc://[::1]:1", "", False, ("[::1]:1", False)),
    ],
)
def test_address_is_chosen_by_the_service_url_scheme(grpc_url, grpc_url_tls, prefer_tls, expected):
    result = LookupResult(grpc_url, grpc_url_tls, "", "", True, False, "l")
    assert result.grpc_address(prefer_tls) == expected


@pytest.mark.parametrize(
    ("grpc_url", "message"),
    [("", "no gRPC address"), ("http://a:1", "unusable address"), ("grpc://a:1/x", "unusable")],
)
def test_unusable_answers(grpc_url, message):
    with pytest.raises(client.LookupFailed, match=message):
        LookupResult(grpc_url, "", "", "", True, False, "l").grpc_address(False)


async def test_plaintext_service_url_answered_with_tls_only_connects_over_tls(tls_files):
    server_credentials = grpc.ssl_server_credentials(
        [(tls_files.server_key.read_bytes(), tls_files.server_cert.read_bytes())]
    )
    async with fake_broker() as service, fake_broker(server_credentials) as owner:
        assert owner.url.startswith("grpc+ssl://")
        service.lookup_answers["t"] = answer(owner.url)
        async with Client(service.url, tls_trust_certs_file_path=str(tls_files.ca)) as c:
            assert await produce_and_consume(c, "t") == b"payload"
            assert c._calls.pool.addresses == [
                (service.url.removeprefix("grpc://"), False),
                (owner.url.removeprefix("grpc+ssl://"), True),
            ]
        assert stream_topics(owner) == ["t", "t"]
        # Trusting another CA, the TLS handshake with the owner fails: never a silent fallback.
        async with Client(
            service.url,
            tls_trust_certs_file_path=str(tls_files.other_ca),
            operation_timeout_ms=1000,
        ) as c:
            with pytest.raises(client.ConnectError):
                await c.create_producer("t")
        assert stream_topics(owner) == ["t", "t"]


async def test_tls_service_url_prefers_the_tls_address_and_server_name_override(tmp_path):
    # A certificate for a name only: connecting to 127.0.0.1 verifies with the override alone.
    files = make_tls_files(tmp_path, server_hosts=("broker.example.com",))
    server_credentials = grpc.ssl_server_credentials(
        [(files.server_key.read_bytes(), files.server_cert.read_bytes())]
    )
    async with fake_broker(server_credentials) as owner:
        target = owner.url.removeprefix("grpc+ssl://")
        # Both answered; port 1 is closed, so only the TLS address can work.
        owner.lookup_answers["t"] = pb.LookupResponse(
            grpc_url="grpc://127.0.0.1:1", grpc_url_tls=owner.url
        )
        async with Client(
            owner.url, tls_trust_certs_file_path=str(files.ca), operation_timeout_ms=1000
        ) as c:
            with pytest.raises(client.ConnectError):
                await c.lookup("t")
        async with Client(
            owner.url,
            tls_trust_certs_file_path=str(files.ca),
            tls_server_name="broker.example.com",
        ) as c:
            assert await produce_and_consume(c, "t") == b"payload"
            assert c._calls.pool.addresses == [(target, True)]
        assert stream_topics(owner) == ["t", "t"]


def test_tls_options_are_checked_up_front(tmp_path):
    with pytest.raises(ValueError, match="go together"):
        Client("grpc://h:1", tls_cert_file_path="c.pem")
    with pytest.raises(FileNotFoundError):
        Client("grpc://h:1", tls_trust_certs_file_path=str(tmp_path / "missing.pem"))
    with pytest.raises(ValueError, match="max_lookup_redirects"):
        Client("grpc://h:1", max_lookup_redirects=-1)
