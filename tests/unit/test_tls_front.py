"""Which TLS listeners get the TLS front, and how a call's peer finds the connection the front
piped (broker/tls_front.py); the front itself runs in tests/e2e/test_tls_optional_client_cert.py."""

from __future__ import annotations

import pytest

from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.tls_front import PipedPeer, PipedPeers, needs_front

OPTIONAL = {
    "authenticationEnabled": True,
    "authenticationProviders": ["token", "tls"],
    "tlsTrustCertsFilePath": "/etc/pulsar/ca.pem",
    "tlsRequireTrustedClientCertOnConnect": False,
}


@pytest.mark.parametrize(
    ("changes", "front"),
    [
        ({}, True),
        (
            {
                "authenticationProviders": [
                    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
                ]
            },
            True,
        ),
        ({"tlsRequireTrustedClientCertOnConnect": True}, False),  # grpcio requires it itself
        ({"authenticationProviders": ["token"]}, False),  # nobody would read a certificate
        ({"authenticationEnabled": False}, False),
        ({"tlsTrustCertsFilePath": None}, False),  # no certificate could be verified
    ],
)
def test_only_an_optional_certificate_for_the_tls_provider_needs_the_front(changes, front):
    assert needs_front(ServiceConfiguration(**{**OPTIONAL, **changes})) is front


def test_a_peer_is_found_by_its_loopback_port_only_while_piped():
    peers = PipedPeers()
    piped = PipedPeer("ipv4:10.0.0.7:40000", "alice")
    peers.add(51000, piped)
    assert peers.of("ipv4:127.0.0.1:51000") == piped
    for other in ("ipv4:127.0.0.1:51001", "ipv4:127.0.0.2:51000", "ipv6:[::1]:51000",
                  "ipv4:127.0.0.1:", "ipv4:127.0.0.1:x", "unix:/tmp/s", ""):  # fmt: skip
        assert peers.of(other) is None, other
    peers.remove(51000)
    assert peers.of("ipv4:127.0.0.1:51000") is None
    assert len(peers) == 0
