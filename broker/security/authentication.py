"""Who is calling: Pulsar's authentication providers, behind every protocol.

A request brings an :class:`AuthenticationData` (its ``Authorization`` header, the CN of the
client certificate its TLS connection verified, where it came from); the
:class:`AuthenticationService` built from the broker's configuration (authenticationEnabled,
authenticationProviders, anonymousUserRole) picks the provider the credentials are meant for
and returns the caller's role, or raises :class:`AuthenticationError`. Which provider: a
``Bearer`` header goes to the token provider, ``Basic`` to the basic one, ``SCRAM-SHA-256`` and
``RoleToken`` to the SCRAM one (broker/security/scram.py), no header but a client certificate to
the TLS one, nothing at all to anonymousUserRole when it is set.

The gRPC interceptor and the admin API's middleware both use the one service, so a role means
the same on either path.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration
from pulsar_grpc.broker.errors import AuthenticationError
from pulsar_grpc.broker.metadata.store import MetadataStore
from pulsar_grpc.broker.security.htpasswd import HashScheme, PasswordHash, parse_htpasswd
from pulsar_grpc.broker.security.role_tokens import RoleTokens
from pulsar_grpc.broker.security.scram import (
    ROLE_TOKEN_SCHEME,
    SCRAM_SCHEME,
    PendingExchanges,
    ScramAuthenticator,
    parse_credentials,
)
from pulsar_grpc.broker.security.tokens import KeyValueError, TokenAuthenticator, expiry_of

log = logging.getLogger(__name__)

# An Authorization header longer than this is refused before it is decoded: a real token or
# user:password pair is far shorter, and a client must not make the broker decode megabytes.
MAX_AUTHORIZATION_BYTES = 16 * 1024
# A cost-4 bcrypt hash: the decoy's pattern when the file names no user.
_EMPTY_BCRYPT = "$2b$04$" + "." * 53


@dataclass(frozen=True, slots=True)
class AuthenticationData:
    """What one request carries that can prove who sent it."""

    authorization: str | None  # the Authorization header, as sent
    tls_common_name: str | None  # CN of the client certificate the TLS handshake verified
    remote_address: str
    listener: str | None = None  # the listener the request arrived on (None: primary)


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The outcome of a successful authentication: the role and the method that proved it."""

    role: str
    method: str  # a provider's auth_method_name, or "anonymous"
    # When the credentials stop being valid, in seconds since the epoch (None: never). A
    # long-lived stream is ended at the first authenticationRefreshCheckSeconds check after it
    # (broker/security/expiry.py).
    expires_at: float | None = None


class AuthenticationProvider(ABC):
    """One way of proving a role (Pulsar's AuthenticationProvider)."""

    @property
    @abstractmethod
    def auth_method_name(self) -> str:
        """Pulsar's short name of the method: "tls", "basic", "token"."""

    @abstractmethod
    async def authenticate(self, data: AuthenticationData) -> str:
        """The role ``data`` proves, or AuthenticationError."""

    def expires_at(self, data: AuthenticationData) -> float | None:
        """When the credentials in ``data``, which :meth:`authenticate` accepted, stop being
        valid (seconds since the epoch); None: they do not expire. Providers whose credentials
        carry an expiry (tokens, role tokens) override this."""
        return None

    def use_metadata(self, metadata: MetadataStore) -> None:
        """Called once the broker's metadata store is open; only a provider that keeps
        cluster-wide state there (SCRAM's role-token keys) needs it."""
        return None


class TlsProvider(AuthenticationProvider):
    """The role is the CN of the client certificate the connection's TLS verified (Pulsar's
    AuthenticationProviderTls). With tlsRequireTrustedClientCertOnConnect=true the listeners
    require one (grpcio's mutual TLS); without it they ask for one optionally, through a TLS
    front (broker/tls_front.py), as Pulsar does: a client without one may send a token."""

    @property
    def auth_method_name(self) -> str:
        return "tls"

    async def authenticate(self, data: AuthenticationData) -> str:
        if not data.tls_common_name:
            raise AuthenticationError("no verified TLS client certificate with a common name")
        return data.tls_common_name

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> TlsProvider:
        if not config.tlsTrustCertsFilePath:
            log.warning(
                "authenticationProviders has the TLS provider but no tlsTrustCertsFilePath: "
                "no client certificate can be verified, so it authenticates no one"
            )
        return cls()


class BasicProvider(AuthenticationProvider):
    """Users and password hashes from an htpasswd file (Pulsar's AuthenticationProviderBasic):
    ``basicAuthConf`` is the file's path or its content as ``data:;base64,...``; the schemes
    are Pulsar's ($apr1$ MD5, crypt) and bcrypt (broker/security/htpasswd.py)."""

    def __init__(self, users: Mapping[str, PasswordHash]) -> None:
        self._users = dict(users)
        first = next(iter(self._users.values()), None)
        self._decoy = (first or PasswordHash(HashScheme.BCRYPT, _EMPTY_BCRYPT)).decoy()

    @property
    def auth_method_name(self) -> str:
        return "basic"

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> BasicProvider:
        source = config.basicAuthConf
        if not source:
            raise ConfigError(["basicAuthConf: required by the basic authentication provider"])
        return cls(parse_htpasswd(_read_conf(source)))

    async def authenticate(self, data: AuthenticationData) -> str:
        user, password = _basic_credentials(data.authorization)
        hashed = self._users.get(user)
        # bcrypt costs tens of milliseconds by design: off the event loop.
        matches = await asyncio.to_thread((hashed or self._decoy).verify, password)
        if hashed is None or not matches:
            raise AuthenticationError("unknown user or wrong password")
        return user


def _read_conf(source: str, name: str = "basicAuthConf") -> str:
    if source.startswith("data:"):
        _, _, encoded = source.partition(",")
        try:
            return base64.b64decode(encoded, validate=True).decode()
        except ValueError:  # not base64 (binascii.Error), not ASCII, not UTF-8
            raise ConfigError([f"{name}: the data: URL is not base64 text"]) from None
    try:
        return Path(source).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{name}: cannot read {source}: {exc}"]) from None


def _basic_credentials(authorization: str | None) -> tuple[str, bytes]:
    encoded = (authorization or "").partition(" ")[2]
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except ValueError:  # binascii.Error, or characters outside ASCII
        raise AuthenticationError("Basic credentials are not base64") from None
    user, sep, password = decoded.partition(b":")
    if not sep or not user:
        raise AuthenticationError("Basic credentials are not user:password")
    try:
        return user.decode(), password
    except UnicodeDecodeError:
        raise AuthenticationError("Basic credentials: the user name is not UTF-8") from None


class TokenProvider(AuthenticationProvider):
    """A JWT in ``Authorization: Bearer <token>`` (Pulsar's AuthenticationProviderToken): the
    key, algorithms, role claim and audience are broker.conf's token* properties
    (broker/security/tokens.py checks the token)."""

    def __init__(self, tokens: TokenAuthenticator) -> None:
        self._tokens = tokens

    @property
    def auth_method_name(self) -> str:
        return "token"

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> TokenProvider:
        try:
            return cls(TokenAuthenticator.from_config(config))
        except KeyValueError as exc:
            raise ConfigError([f"token authentication: {exc}"]) from None

    async def authenticate(self, data: AuthenticationData) -> str:
        token = _bearer_token(data)
        if not token:
            raise AuthenticationError("Bearer credentials carry no token")
        return self._tokens.role_of(token)

    def expires_at(self, data: AuthenticationData) -> float | None:
        """The token's ``exp`` claim."""
        return expiry_of(_bearer_token(data))


def _bearer_token(data: AuthenticationData) -> str:
    return (data.authorization or "").partition(" ")[2].strip()


class ScramProvider(AuthenticationProvider):
    """SCRAM-SHA-256 two-way authentication and the role tokens it issues (PIP-59): users
    from ``scramAuthConf``; see broker/security/scram.py for the exchange."""

    def __init__(self, scram: ScramAuthenticator, role_token_lifetime_s: int) -> None:
        self.scram = scram
        self._lifetime_s = role_token_lifetime_s

    @property
    def auth_method_name(self) -> str:
        return "scram"

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> ScramProvider:
        source = config.scramAuthConf
        if not source:
            raise ConfigError(["scramAuthConf: required by the scram authentication provider"])
        pending = PendingExchanges(
            config.maxInflightSaslContext, config.inflightSaslContextExpiryMs / 1000
        )
        users = parse_credentials(_read_conf(source, "scramAuthConf"))
        return cls(ScramAuthenticator(users, pending), config.scramRoleTokenExpirySeconds)

    def use_metadata(self, metadata: MetadataStore) -> None:
        self.scram.use_role_tokens(RoleTokens(metadata, self._lifetime_s))

    async def authenticate(self, data: AuthenticationData) -> str:
        return await self.scram.authenticate(data.authorization or "", data.remote_address)

    def expires_at(self, data: AuthenticationData) -> float | None:
        """A role token's ``exp``: a stream it opened ends when it does (an exchange step
        never opens a stream: it ends with its challenge or its role token)."""
        return expiry_of(_bearer_token(data))


class _Scheme(enum.Enum):
    """How a request presents its credentials, and the provider that reads them."""

    BEARER = "token"
    BASIC = "basic"
    SCRAM = "scram"  # a SCRAM step, or the role token a completed exchange earned
    CLIENT_CERTIFICATE = "tls"
    NONE = "anonymous"


ProviderFactory = Callable[[ServiceConfiguration], AuthenticationProvider]
_PULSAR_PACKAGE = "org.apache.pulsar.broker.authentication."
# authenticationProviders accepts Pulsar's class names and the short method names.
PROVIDERS: dict[str, ProviderFactory] = {
    "token": TokenProvider.from_config,
    _PULSAR_PACKAGE + "AuthenticationProviderToken": TokenProvider.from_config,
    "tls": TlsProvider.from_config,
    _PULSAR_PACKAGE + "AuthenticationProviderTls": TlsProvider.from_config,
    "basic": BasicProvider.from_config,
    _PULSAR_PACKAGE + "AuthenticationProviderBasic": BasicProvider.from_config,
    "scram": ScramProvider.from_config,
}


class AuthenticationService:
    """The configured providers, by method name, and the anonymous role."""

    def __init__(
        self, providers: list[AuthenticationProvider], anonymous_role: str | None = None
    ) -> None:
        self._providers = {p.auth_method_name: p for p in providers}
        self._anonymous_role = anonymous_role

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> AuthenticationService | None:
        """None when authenticationEnabled is false: then nothing checks credentials."""
        if not config.authenticationEnabled:
            return None
        unknown = [n for n in config.authenticationProviders if n not in PROVIDERS]
        if unknown:
            raise ConfigError(
                [
                    f"authenticationProviders: unknown provider {name} "
                    f"(known: {', '.join(sorted(PROVIDERS))})"
                    for name in unknown
                ]
            )
        providers = [PROVIDERS[name](config) for name in config.authenticationProviders]
        return cls(providers, config.anonymousUserRole or None)

    def use_metadata(self, metadata: MetadataStore) -> None:
        """Hand the broker's open metadata store to the providers that keep state there."""
        for provider in self._providers.values():
            provider.use_metadata(metadata)

    @property
    def scram(self) -> ScramAuthenticator | None:
        """The SCRAM exchanges when the scram provider is on."""
        provider = self._providers.get("scram")
        return provider.scram if isinstance(provider, ScramProvider) else None

    @property
    def role_tokens(self) -> RoleTokens | None:
        """The cluster's role-token keys when the scram provider is on (for the admin API)."""
        return self.scram.role_tokens if self.scram is not None else None

    async def authenticate(self, data: AuthenticationData) -> Authenticated:
        scheme = _scheme_of(data)
        if scheme is _Scheme.NONE:
            if self._anonymous_role is None:
                raise AuthenticationError("authentication required: no credentials sent")
            return Authenticated(self._anonymous_role, scheme.value)
        provider = self._providers.get(scheme.value)
        if provider is None:
            raise AuthenticationError(
                f"authentication method {scheme.value} is not enabled on this broker"
            )
        role = await provider.authenticate(data)
        return Authenticated(role, provider.auth_method_name, provider.expires_at(data))


def _scheme_of(data: AuthenticationData) -> _Scheme:
    header = data.authorization
    if header is None or header == "":
        return _Scheme.CLIENT_CERTIFICATE if data.tls_common_name else _Scheme.NONE
    if len(header) > MAX_AUTHORIZATION_BYTES:
        raise AuthenticationError("the Authorization header is too long")
    scheme = header.partition(" ")[0].lower()
    if scheme == "bearer":
        return _Scheme.BEARER
    if scheme == "basic":
        return _Scheme.BASIC
    if scheme in (SCRAM_SCHEME, ROLE_TOKEN_SCHEME):
        return _Scheme.SCRAM
    raise AuthenticationError(f"unsupported Authorization scheme '{scheme[:20]}'")
