"""The settings of how clients authenticate, shared by the broker's and the proxy's
configurations (both read them under Pulsar's names, with the same meaning).

The broker's ``ServiceConfiguration`` and the proxy's ``ProxyConfiguration`` derive from
:class:`ClientAuthenticationSettings`, so a property is declared, defaulted and documented once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ClientAuthenticationSettings"]


@dataclass
class ClientAuthenticationSettings:
    """Authentication of clients and the server's own TLS identity."""

    # Authentication (broker/security/authentication.py): the providers by Pulsar's class
    # name or short name (tls, basic, token); anonymousUserRole is the role of a request with
    # no credentials (unset: such a request is refused); basicAuthConf is the basic provider's
    # htpasswd file (a path, or data:;base64,...).
    authenticationEnabled: bool = False
    authenticationProviders: list[str] = field(default_factory=list)
    anonymousUserRole: str | None = None
    basicAuthConf: str | None = None
    # How often the server re-checks the credentials of each open Produce and Consume stream
    # and ends the streams whose credentials have expired (Pulsar's property and default).
    authenticationRefreshCheckSeconds: int = 60
    tlsCertificateFilePath: str | None = None
    tlsKeyFilePath: str | None = None
    tlsTrustCertsFilePath: str | None = None
    tlsRequireTrustedClientCertOnConnect: bool = False
    # Token authentication (Pulsar's AuthenticationProviderToken): keys as Pulsar reads them
    # (data:, file:, a path, or base64); the secret key wins when both are set, as in Pulsar.
    tokenSecretKey: str | None = None
    tokenPublicKey: str | None = None
    tokenPublicAlg: str = "RS256"
    tokenAuthClaim: str = "sub"
    tokenAudienceClaim: str | None = None
    tokenAudience: str | None = None
    # SCRAM-SHA-256 two-way authentication (broker/security/scram.py, provider "scram"):
    # scramAuthConf is the users' file (a path, or data:;base64,...), one
    # user:SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey> a line (PostgreSQL's
    # verifier format; `pulsar-grpc scram add-user` writes it). An exchange waiting for its
    # client-final is forgotten after inflightSaslContextExpiryMs, and at most
    # maxInflightSaslContext wait at once (Pulsar's names; smaller defaults than Pulsar's 30 s
    # and 50000: an abandoned exchange should not hold memory long). A completed exchange gets
    # a role token valid scramRoleTokenExpirySeconds, signed with the cluster's key
    # (broker/security/role_tokens.py).
    scramAuthConf: str | None = None
    inflightSaslContextExpiryMs: int = 10000
    maxInflightSaslContext: int = 10000
    scramRoleTokenExpirySeconds: int = 3600
