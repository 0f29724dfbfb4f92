"""TLS material from the broker's configuration (tlsCertificateFilePath, tlsKeyFilePath,
tlsTrustCertsFilePath, tlsRequireTrustedClientCertOnConnect), for every server that
terminates TLS: the web service and the gRPC handler's TLS front (broker/tls_front.py) here,
and protocol handlers through :func:`read_tls_files`. Like Pulsar, a listener with trust
certificates asks clients for a certificate: it must send one with
tlsRequireTrustedClientCertOnConnect=true, else one it sends must be trusted."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration


@dataclass(frozen=True)
class TlsFiles:
    certificate_chain: bytes
    private_key: bytes
    trust_certs: bytes | None
    require_client_cert: bool


def read_tls_files(config: ServiceConfiguration) -> TlsFiles:
    """Read the PEM files once at start-up; a missing file is a configuration error."""

    def read(prop: str, value: str | None) -> bytes:
        if not value:
            raise ConfigError([f"{prop}: required to serve TLS"])
        try:
            return Path(value).read_bytes()
        except OSError as exc:
            raise ConfigError([f"{prop}: cannot read {value}: {exc.strerror}"]) from None

    trust = config.tlsTrustCertsFilePath
    return TlsFiles(
        certificate_chain=read("tlsCertificateFilePath", config.tlsCertificateFilePath),
        private_key=read("tlsKeyFilePath", config.tlsKeyFilePath),
        trust_certs=read("tlsTrustCertsFilePath", trust) if trust else None,
        require_client_cert=config.tlsRequireTrustedClientCertOnConnect,
    )


def server_ssl_context(config: ServiceConfiguration) -> ssl.SSLContext:
    files = read_tls_files(config)  # validates and reports unreadable files the same way
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    assert config.tlsCertificateFilePath and config.tlsKeyFilePath
    context.load_cert_chain(config.tlsCertificateFilePath, config.tlsKeyFilePath)
    if files.trust_certs is not None:
        context.load_verify_locations(cadata=files.trust_certs.decode())
    if files.require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
    elif files.trust_certs is not None:
        # Pulsar's "want client auth": a certificate is asked for, and one that is sent must
        # chain to the trust certificates; a client without one goes on to other credentials.
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def certificate_common_name(cert: Mapping[str, Any] | None) -> str | None:
    """The subject's CN in ``SSLSocket.getpeercert()``'s nested tuples; None without a
    (verified) certificate."""
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
