"""SCRAM-SHA-256 (RFC 5802, RFC 7677) as PIP-59's two-way authentication, with the
``scramp`` package doing the cryptography.

The exchange rides on any call, in the ``authorization`` header, with RFC 7804's (SCRAM over
HTTP) syntax; the broker answers each step by ending the call UNAUTHENTICATED with the next
message in its trailing metadata (docs/protocol.md has the whole flow):

1. ``authorization: SCRAM-SHA-256 data=<base64 client-first>``
   -> ``www-authenticate: SCRAM-SHA-256 sid=<state id>, data=<base64 server-first>``
2. ``authorization: SCRAM-SHA-256 sid=<state id>, data=<base64 client-final>``
   -> ``authentication-info: sid=<state id>, data=<base64 server-final>`` (the server's
   signature: the client checks that the broker knows the user's keys) and
   ``pulsar-role-token: <token>``, ``pulsar-role-token-expires-ms: <epoch ms>``
3. later calls: ``authorization: RoleToken <token>`` (broker/security/role_tokens.py).

Users come from a file of salted keys, never passwords (:func:`parse_credentials`): bcrypt
hashes cannot serve SCRAM, whose server must hold the StoredKey and ServerKey. Between steps 1
and 2 the broker keeps the exchange (:class:`PendingExchanges`): at most a fixed number, each
for a few seconds, and each usable once, so abandoned or replayed exchanges cost nothing lasting.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scramp import ScramException, ScramMechanism
from scramp.core import ScramServer

from pulsar_grpc.broker.config import ConfigError
from pulsar_grpc.broker.errors import AuthenticationChallenge, AuthenticationError
from pulsar_grpc.broker.security.role_tokens import RoleTokens

MECHANISM = "SCRAM-SHA-256"
# The Authorization schemes of the two steps and of the calls after them.
SCRAM_SCHEME = MECHANISM.lower()
ROLE_TOKEN_SCHEME = "roletoken"
# Trailing metadata of the broker's answers (lower case: gRPC metadata keys are).
H_CHALLENGE = "www-authenticate"
H_SERVER_FINAL = "authentication-info"
H_ROLE_TOKEN = "pulsar-role-token"
H_ROLE_TOKEN_EXPIRES = "pulsar-role-token-expires-ms"
DEFAULT_ITERATIONS = 4096  # RFC 7677's minimum, and scramp's
# A client message longer than this is refused before it is parsed: real ones are a few
# hundred bytes, and a pending exchange keeps its client-first (a huge user name would make
# each of maxInflightSaslContext exchanges costly).
MAX_MESSAGE_CHARS = 1024
# PostgreSQL's verifier: SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>, base64.
_VERIFIER = re.compile(
    r"SCRAM-SHA-256\$(?P<i>[0-9]{1,9}):(?P<salt>[A-Za-z0-9+/=]+)"
    r"\$(?P<stored>[A-Za-z0-9+/=]+):(?P<server>[A-Za-z0-9+/=]+)"
)
_MECHANISM = ScramMechanism(MECHANISM)


@dataclass(frozen=True, slots=True)
class ScramCredentials:
    """What the broker keeps of a user: enough to check a proof, not to make one."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def as_auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        return self.salt, self.stored_key, self.server_key, self.iterations


def verifier(password: str, iterations: int = DEFAULT_ITERATIONS) -> str:
    """The credentials line's value for ``password`` (a fresh random salt)."""
    salt, stored, server, i = _MECHANISM.make_auth_info(password, iteration_count=iterations)
    b64 = base64.b64encode
    return f"{MECHANISM}${i}:{b64(salt).decode()}${b64(stored).decode()}:{b64(server).decode()}"


def parse_credentials(text: str) -> dict[str, ScramCredentials]:
    """``user:<verifier>`` lines (see :data:`_VERIFIER`); blank lines and ``#`` comments
    are skipped. Every bad line is reported at once."""
    users: dict[str, ScramCredentials] = {}
    errors: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, value = line.partition(":")
        match = _VERIFIER.fullmatch(value)
        if not sep or not user or match is None:
            errors.append(
                f"scramAuthConf: line {number}: expected "
                "user:SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>"
            )
            continue
        try:
            credentials = ScramCredentials(
                salt=base64.b64decode(match["salt"], validate=True),
                stored_key=base64.b64decode(match["stored"], validate=True),
                server_key=base64.b64decode(match["server"], validate=True),
                iterations=int(match["i"]),
            )
        except binascii.Error:
            errors.append(f"scramAuthConf: line {number}: a key or salt is not base64")
            continue
        if credentials.iterations < DEFAULT_ITERATIONS:
            errors.append(
                f"scramAuthConf: line {number}: {credentials.iterations} iterations, "
                f"fewer than the minimum {DEFAULT_ITERATIONS}"
            )
            continue
        users[user] = credentials
    if errors:
        raise ConfigError(errors)
    return users


def parse_params(text: str) -> dict[str, str]:
    """RFC 7804's ``name=value, name=value`` (a base64 value keeps its ``=`` padding)."""
    params: dict[str, str] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        if sep:
            params[name.strip().lower()] = value.strip().strip('"')
    return params


@dataclass(slots=True)
class _Pending:
    server: ScramServer
    user: str
    host: str  # where the client-first came from
    deadline: float  # time.monotonic()


# One client address may hold this share of the pending exchanges: the first step needs no
# credentials, and one host filling the whole pool would lock every user out.
_HOST_SHARE = 10


def host_of(peer: str) -> str:
    """The address without its port: gRPC's ``ipv4:10.0.0.5:51234`` or
    ``ipv6:[::1]:51234``, or HTTP's bare address."""
    for scheme in ("ipv4:", "ipv6:"):
        if peer.startswith(scheme):
            return peer.removeprefix(scheme).rpartition(":")[0]
    return peer


class PendingExchanges:
    """Exchanges between their first and second step, by state id: bounded in number and in
    time, and each taken at most once (a replayed client-final finds nothing)."""

    def __init__(
        self, limit: int, expiry_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._limit = limit
        self._host_limit = max(1, limit // _HOST_SHARE)
        self._expiry_s = expiry_s
        self._clock = clock
        # Insertion order is deadline order: every exchange lives equally long.
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._per_host: Counter[str] = Counter()

    def __len__(self) -> int:
        self._drop_expired()
        return len(self._pending)

    def _drop_expired(self) -> None:
        now = self._clock()
        while self._pending:
            first = next(iter(self._pending.values()))
            if first.deadline > now:
                break
            self._release(self._pending.popitem(last=False)[1])

    def _release(self, pending: _Pending) -> None:
        self._per_host[pending.host] -= 1
        if not self._per_host[pending.host]:
            del self._per_host[pending.host]

    def add(self, server: ScramServer, user: str, host: str = "") -> str:
        self._drop_expired()
        if len(self._pending) >= self._limit:
            raise AuthenticationError(
                "too many SCRAM exchanges in progress on this broker: try again shortly"
            )
        if self._per_host[host] >= self._host_limit:
            raise AuthenticationError(
                "too many SCRAM exchanges in progress from this address: finish them first"
            )
        state_id = secrets.token_urlsafe(18)
        self._pending[state_id] = _Pending(server, user, host, self._clock() + self._expiry_s)
        self._per_host[host] += 1
        return state_id

    def take(self, state_id: str) -> _Pending:
        self._drop_expired()
        pending = self._pending.pop(state_id, None)
        if pending is None:
            raise AuthenticationError(
                "unknown SCRAM state (expired, already used, or never issued): start again"
            )
        self._release(pending)
        return pending


class ScramAuthenticator:
    """The broker's side of the exchange for the users of one credentials file."""

    def __init__(
        self,
        users: Mapping[str, ScramCredentials],
        pending: PendingExchanges,
    ) -> None:
        self._users = dict(users)
        self.pending = pending
        # An unknown user gets a salt that is the same every time (derived from this secret)
        # and keys no password matches: the challenge does not tell who exists.
        self._decoy_secret = secrets.token_bytes(32)
        self._role_tokens: RoleTokens | None = None

    def use_role_tokens(self, role_tokens: RoleTokens) -> None:
        self._role_tokens = role_tokens

    @property
    def role_tokens(self) -> RoleTokens:
        if self._role_tokens is None:
            raise AuthenticationError("role tokens are not available before the broker started")
        return self._role_tokens

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        known = self._users.get(user)
        if known is not None:
            return known.as_auth_info()
        salt = hmac.new(self._decoy_secret, user.encode(), hashlib.sha256).digest()[:16]
        return salt, secrets.token_bytes(32), secrets.token_bytes(32), DEFAULT_ITERATIONS

    async def authenticate(self, authorization: str, peer: str = "") -> str:
        """The role of a RoleToken header; for a SCRAM step, AuthenticationChallenge carrying
        the next message (or AuthenticationError when the step fails). ``peer`` is where the
        request came from: one address may hold only a share of the pending exchanges."""
        scheme, _, rest = authorization.partition(" ")
        if scheme.lower() == ROLE_TOKEN_SCHEME:
            token = rest.strip()
            if not token:
                raise AuthenticationError("RoleToken credentials carry no token")
            return await self.role_tokens.role_of(token)
        params = parse_params(rest)
        data = _decode(params.get("data"))
        if "sid" in params:
            await self._client_final(params["sid"], data)
        self._client_first(data, host_of(peer))
        raise AssertionError("unreachable: each step raises")

    def _client_first(self, client_first: str, host: str) -> None:
        users: list[str] = []  # the name scramp read from the message, as it read it

        def auth_info(user: str) -> tuple[bytes, bytes, bytes, int]:
            users.append(user)
            return self._auth_info(user)

        server = _MECHANISM.make_server(auth_info)
        try:
            server.set_client_first(client_first)
            server_first = server.get_server_first()
        except ScramException as exc:
            raise AuthenticationError(f"malformed SCRAM client-first message: {exc}") from None
        state_id = self.pending.add(server, users[0], host)
        raise AuthenticationChallenge(
            "SCRAM challenge: answer with the client-final message in a new call",
            ((H_CHALLENGE, f"{MECHANISM} sid={state_id}, data={_encode(server_first)}"),),
        )

    async def _client_final(self, state_id: str, client_final: str) -> None:
        pending = self.pending.take(state_id)
        try:
            pending.server.set_client_final(client_final)
            server_final = pending.server.get_server_final()
        except ScramException:
            raise AuthenticationError(
                "SCRAM proof does not verify: unknown user or wrong password"
            ) from None
        token = await self.role_tokens.issue(pending.user)
        raise AuthenticationChallenge(
            "SCRAM exchange complete: send the role token in later calls",
            (
                (H_SERVER_FINAL, f"sid={state_id}, data={_encode(server_final)}"),
                (H_ROLE_TOKEN, token.token),
                (H_ROLE_TOKEN_EXPIRES, str(token.expires_ms)),
            ),
        )


def _decode(value: str | None) -> str:
    if not value:
        raise AuthenticationError("SCRAM credentials carry no data=")
    if len(value) > MAX_MESSAGE_CHARS * 4 // 3 + 4:
        raise AuthenticationError(f"SCRAM message longer than {MAX_MESSAGE_CHARS} characters")
    try:
        return base64.b64decode(value, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise AuthenticationError("SCRAM data= is not base64 UTF-8 text") from None


def _encode(message: str) -> str:
    return base64.b64encode(message.encode()).decode()
