"""Real TLS material for tests, made with ``cryptography``: a CA, a server certificate and a
client certificate it signs, and a second, unrelated CA (with a client certificate of its own)
that the broker must not trust. PEM files in a temporary directory; never disabled checks.

>>> files = make_tls_files(tmp_path)
>>> broker_factory(grpcServicePortTls="0", tlsCertificateFilePath=str(files.server_cert), ...)
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# What the server certificate is valid for: the loopback addresses the e2e tests bind and the
# host names the listener tests advertise.
SERVER_HOSTS = ("127.0.0.1", "127.0.0.2", "localhost", "broker.internal", "broker.example.com")

Key = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Issuer:
    name: x509.Name
    key: Key
    cert: x509.Certificate


@dataclass(frozen=True)
class TlsFiles:
    """Paths of PEM files (certificates and unencrypted PKCS#8 keys)."""

    ca: Path  # trusted by the broker and by well-configured clients
    server_cert: Path
    server_key: Path
    client_cert: Path  # signed by ``ca``
    client_key: Path
    other_ca: Path  # unrelated to ``ca``
    other_client_cert: Path  # signed by ``other_ca``
    other_client_key: Path


def _key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())  # fast, and every TLS stack here takes it


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pulsar-grpc tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(subject: x509.Name, issuer: x509.Name, key: Key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def make_ca(common_name: str) -> Issuer:
    """A self-signed certificate authority."""
    key = _key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Issuer(name, key, cert)


def _subject_alt_names(hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def issue(
    ca: Issuer, common_name: str, *, server_hosts: Iterable[str] | None = None
) -> tuple[x509.Certificate, Key]:
    """A leaf certificate signed by ``ca``: for a server when ``server_hosts`` is given (its
    subject alternative names), else for a client."""
    key = _key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_hosts else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _builder(_name(common_name), ca.name, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if server_hosts:
        builder = builder.add_extension(_subject_alt_names(server_hosts), critical=False)
    return builder.sign(ca.key, hashes.SHA256()), key


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(path: Path, key: Key) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path


def make_tls_files(directory: Path, server_hosts: Iterable[str] = SERVER_HOSTS) -> TlsFiles:
    """Write a CA, a server and a client certificate it signs, and an unrelated CA with a
    client certificate of its own, as PEM files under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca("pulsar-grpc test CA")
    other = make_ca("unrelated test CA")
    server_cert, server_key = issue(ca, "broker", server_hosts=tuple(server_hosts))
    client_cert, client_key = issue(ca, "client")
    other_cert, other_key = issue(other, "stranger")
    return TlsFiles(
        ca=_write_cert(directory / "ca.pem", ca.cert),
        server_cert=_write_cert(directory / "server.pem", server_cert),
        server_key=_write_key(directory / "server.key", server_key),
        client_cert=_write_cert(directory / "client.pem", client_cert),
        client_key=_write_key(directory / "client.key", client_key),
        other_ca=_write_cert(directory / "other-ca.pem", other.cert),
        other_client_cert=_write_cert(directory / "other-client.pem", other_cert),
        other_client_key=_write_key(directory / "other-client.key", other_key),
    )


@pytest.fixture(name="tls_files")
def tls_files_fixture(tmp_path: Path) -> TlsFiles:
    """TLS material in ``tmp_path/tls``; import ``tls_files_fixture`` to use ``tls_files``."""
    return make_tls_files(tmp_path / "tls")
