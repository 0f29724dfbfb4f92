"""Role tokens: what a completed two-way authentication (SCRAM) earns, so that later calls do
not run the exchange again (PIP-59: "a signed token which contains the authentication role and
an expiration date").

A role token is a JWT (HS256) with ``sub`` (the role), ``exp``, ``iat`` and ``jti`` (its id),
and the id of the key that signed it in its header's ``kid``. Clients send it back as
``authorization: RoleToken <token>``.

Unlike Pulsar's SASL provider, whose signing secret is random per broker, the keys are the
cluster's: a :class:`KeyRing` kept in the metadata store at :data:`KEYS_PATH`, created by the
first broker that needs it, so that a role token works on every broker sharing the store and
after a restart, and a store (a cluster) never accepts another's tokens. The ring is rotatable:
:meth:`RoleTokens.rotate` adds a new current key and retires the old one, which still verifies
the tokens it signed until they expire (a retired key older than a token's lifetime is
dropped), or at once no longer when the rotation revokes the previous keys (a leaked key).
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

import jwt

from pulsar_grpc.broker.errors import AuthenticationError, ServiceNotReadyError
from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    MetadataStore,
    Notification,
)

log = logging.getLogger(__name__)

KEYS_PATH = "/pulsar-grpc/role-token-keys"
ALGORITHM = "HS256"
_SECRET_BYTES = 32  # HS256's own strength
# A token naming a key this broker does not know makes it read the ring again (a key another
# broker just created), at most this often: forged kids must not turn into a read each.
_RELOAD_INTERVAL_S = 1.0
# The cached ring is read again after this long even without a notification: a watch lost with
# a ZooKeeper session must not let a revoked key verify for longer.
_CACHE_TTL_S = 30.0
# Concurrent rotations by several brokers or admins: each re-reads and tries again.
_ROTATE_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One HMAC key of the ring; ``retired_ms`` is when a rotation replaced it (None: the
    current key, which signs new tokens)."""

    id: str
    secret: bytes
    created_ms: int
    retired_ms: int | None = None

    def verifies_at(self, now_ms: int, lifetime_ms: int) -> bool:
        """A retired key still verifies the tokens it signed until the last of them expires."""
        return self.retired_ms is None or now_ms < self.retired_ms + lifetime_ms

    def public(self) -> dict[str, str | int | None]:
        """What an admin may see of it (never the secret)."""
        return {"id": self.id, "createdMs": self.created_ms, "retiredMs": self.retired_ms}


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The cluster's keys, the current one last."""

    keys: tuple[SigningKey, ...]

    @staticmethod
    def new(now_ms: int) -> KeyRing:
        return KeyRing((_new_key(now_ms),))

    @property
    def current(self) -> SigningKey:
        return self.keys[-1]

    def find(self, key_id: str) -> SigningKey | None:
        return next((k for k in self.keys if k.id == key_id), None)

    def rotated(self, now_ms: int, lifetime_ms: int, revoke_previous: bool) -> KeyRing:
        """A new current key; the previous ones retired (kept while their tokens may live)
        or, with ``revoke_previous``, removed."""
        kept: tuple[SigningKey, ...] = ()
        if not revoke_previous:
            retired = (
                k if k.retired_ms is not None else replace(k, retired_ms=now_ms) for k in self.keys
            )
            kept = tuple(k for k in retired if k.verifies_at(now_ms, lifetime_ms))
        return KeyRing((*kept, _new_key(now_ms)))

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "keys": [
                    {**k.public(), "secret": base64.b64encode(k.secret).decode()} for k in self.keys
                ]
            }
        ).encode()

    @staticmethod
    def from_json(raw: bytes) -> KeyRing:
        try:
            doc = json.loads(raw)
            keys = tuple(
                SigningKey(
                    id=str(k["id"]),
                    secret=base64.b64decode(k["secret"]),
                    created_ms=int(k["createdMs"]),
                    retired_ms=None if k.get("retiredMs") is None else int(k["retiredMs"]),
                )
                for k in doc["keys"]
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{KEYS_PATH} does not hold a key ring: {exc}") from None
        if not keys:
            raise ValueError(f"{KEYS_PATH} holds no key")
        return KeyRing(keys)


def _new_key(now_ms: int) -> SigningKey:
    return SigningKey(uuid.uuid4().hex, secrets.token_bytes(_SECRET_BYTES), now_ms)


@dataclass(frozen=True, slots=True)
class RoleToken:
    token: str
    expires_ms: int


class RoleTokens:
    """Issues and checks role tokens with the cluster's key ring; one per broker.

    The ring is read from the store when first needed and cached; a change of the node (a
    rotation anywhere in the cluster) drops the cache, so a revoked key stops verifying on
    every broker as soon as the store tells them (and within ``_CACHE_TTL_S`` regardless).
    """

    def __init__(
        self,
        metadata: MetadataStore,
        lifetime_s: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._metadata = metadata
        self._lifetime_ms = lifetime_s * 1000
        self._clock = clock
        self._ring: KeyRing | None = None
        # Counts the store's changes of the node: a read that a change overtook is not cached.
        self._changes = 0
        self._last_load = float("-inf")  # time.monotonic() of the last read of the ring
        metadata.register_listener(self._on_change)

    def _on_change(self, notification: Notification) -> None:
        if notification.path == KEYS_PATH:
            self._changes += 1
            self._ring = None

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def _load(self) -> KeyRing:
        """The ring in the store, created there (with one key) by the first broker to ask."""
        self._last_load = time.monotonic()
        changes = self._changes
        while True:
            stored = await self._metadata.get(KEYS_PATH)
            if stored is not None:
                ring = KeyRing.from_json(stored.value)
                break
            ring = KeyRing.new(self._now_ms())
            try:
                await self._metadata.put(KEYS_PATH, ring.to_json(), expected_version=-1)
                log.info("created the cluster's role-token signing key %s", ring.current.id)
                break
            except BadVersionError:  # another broker created it first: use theirs
                continue
        if changes == self._changes:
            self._ring = ring
        return ring

    async def ring(self) -> KeyRing:
        if self._ring is None or time.monotonic() - self._last_load >= _CACHE_TTL_S:
            return await self._load()
        return self._ring

    async def issue(self, role: str) -> RoleToken:
        """A token for ``role`` signed with the current key."""
        key = (await self.ring()).current
        now = self._now_ms()
        # exp is in whole seconds: rounded up, so a token never dies before its lifetime.
        expires_ms = -(-(now + self._lifetime_ms) // 1000) * 1000
        claims = {
            "sub": role,
            "iat": now // 1000,
            "exp": expires_ms // 1000,
            "jti": uuid.uuid4().hex,
        }
        token = jwt.encode(claims, key.secret, algorithm=ALGORITHM, headers={"kid": key.id})
        return RoleToken(token, expires_ms)

    async def role_of(self, token: str) -> str:
        """The role ``token`` proves, or AuthenticationError saying why not."""
        try:
            key_id = jwt.get_unverified_header(token).get("kid")
        except jwt.InvalidTokenError:
            raise AuthenticationError("malformed role token") from None
        if not isinstance(key_id, str):
            raise AuthenticationError("malformed role token: no key id")
        key = (await self.ring()).find(key_id)
        if key is None and time.monotonic() - self._last_load >= _RELOAD_INTERVAL_S:
            key = (await self._load()).find(key_id)  # a key created since the cache was read
        if key is None or not key.verifies_at(self._now_ms(), self._lifetime_ms):
            raise AuthenticationError(
                "role token signed by a key this cluster does not accept "
                "(rotated out, or another cluster's)"
            )
        try:
            claims = jwt.decode(
                token,
                key.secret,
                algorithms=[ALGORITHM],
                options={"require": ["sub", "exp", "jti"]},
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationError("role token expired: authenticate again") from None
        except jwt.InvalidSignatureError:
            raise AuthenticationError("role token signature does not verify") from None
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"invalid role token: {exc}") from None
        role = claims["sub"]
        if not isinstance(role, str) or not role:
            raise AuthenticationError("invalid role token: no role")
        return role

    async def rotate(self, revoke_previous: bool = False) -> KeyRing:
        """A new current key for the whole cluster (see the module docstring)."""
        for _ in range(_ROTATE_ATTEMPTS):
            stored = await self._metadata.get(KEYS_PATH)
            now = self._now_ms()
            if stored is None:
                ring, version = KeyRing.new(now), -1
            else:
                ring = KeyRing.from_json(stored.value).rotated(
                    now, self._lifetime_ms, revoke_previous
                )
                version = stored.version
            try:
                await self._metadata.put(KEYS_PATH, ring.to_json(), expected_version=version)
            except BadVersionError:
                continue
            # Not cached: the next read arms the store's watch again (the put fired it).
            self._ring = None
            log.info(
                "rotated the role-token signing key: current %s, %d still accepted",
                ring.current.id,
                len(ring.keys),
            )
            return ring
        raise ServiceNotReadyError("the key ring changed under every rotation attempt: retry")
