"""SCRAM-SHA-256 with the broker (PIP-59's two-way authentication; docs/protocol.md).

The client proves it knows the password without sending it, the broker proves it knows the
user's keys (the client checks the server signature: a broker impersonator learns nothing and
is refused), and the broker hands out a role token the client then sends with every call until
it nears its expiry or the broker refuses it; then the exchange runs again. A wrong password
ends in :class:`AuthenticationError` at once, never in a retry loop.
"""

from __future__ import annotations

import asyncio
import base64
import time

import grpc
from scramp import ScramClient, ScramException

from ._auth import Exchange, ExchangeAnswer, ExpiringHeader, ObtainedAuthentication
from ._errors import AuthenticationError

MECHANISM = "SCRAM-SHA-256"
# The broker's trailing metadata (see broker/security/scram.py).
_CHALLENGE = "www-authenticate"
_SERVER_FINAL = "authentication-info"
_ROLE_TOKEN = "pulsar-role-token"
_ROLE_TOKEN_EXPIRES = "pulsar-role-token-expires-ms"
_ROLE_TOKEN_SCHEME = "RoleToken "


class AuthenticationSCRAM(ObtainedAuthentication):
    """A user name and password proven by SCRAM-SHA-256 (the broker's ``scram`` provider)."""

    scheme = _ROLE_TOKEN_SCHEME

    def __init__(self, username: str, password: str) -> None:
        if not username:
            raise ValueError("AuthenticationSCRAM needs a user name")
        super().__init__()
        self._username = username
        self._password = password

    async def obtain(self, exchange: Exchange) -> ExpiringHeader:
        """Run the exchange: the role token the broker hands out at its end."""
        client = ScramClient([MECHANISM], self._username, self._password)
        challenge = await exchange(f"{MECHANISM} data={_b64(client.get_client_first())}")
        params = _params(_expect(challenge, _CHALLENGE).partition(" ")[2])
        server_first = _unb64(params.get("data", ""))
        _check_iterations(server_first)
        try:
            client.set_server_first(server_first)
            # PBKDF2 over the password: thousands of HMACs, off the event loop.
            client_final = await asyncio.to_thread(client.get_client_final)
        except ScramException as exc:
            raise AuthenticationError(f"SCRAM: the broker's challenge is invalid: {exc}") from None
        sid = params.get("sid", "")
        answer = await exchange(f"{MECHANISM} sid={sid}, data={_b64(client_final)}")
        server_final = _params(_expect(answer, _SERVER_FINAL)).get("data", "")
        try:
            client.set_server_final(_unb64(server_final))
        except ScramException:
            raise AuthenticationError(
                "SCRAM: the broker's signature does not verify: it does not know this user's "
                "keys (not the broker it claims to be)"
            ) from None
        token = answer.trailers.get(_ROLE_TOKEN)
        if not token:
            raise AuthenticationError("SCRAM: the broker completed the exchange without a token")
        now = time.time()
        expires_ms = answer.trailers.get(_ROLE_TOKEN_EXPIRES, "")
        expires = int(expires_ms) / 1000 if expires_ms.isdigit() else now
        return ExpiringHeader(_ROLE_TOKEN_SCHEME + token, now, expires)


def _expect(answer: ExchangeAnswer, trailer: str) -> str:
    """The trailer the step's answer must carry; otherwise the broker's refusal, as said."""
    value = answer.trailers.get(trailer)
    if answer.code == grpc.StatusCode.UNAUTHENTICATED and value:
        return value
    if answer.code == grpc.StatusCode.OK:
        raise AuthenticationError(
            "SCRAM: the broker accepted the call without an exchange "
            "(authentication is not enabled there)"
        )
    raise AuthenticationError(f"SCRAM refused: {answer.details or answer.code.name}")


def _params(text: str) -> dict[str, str]:
    """RFC 7804's ``name=value, name=value``."""
    pairs = (item.strip().partition("=") for item in text.split(","))
    return {name.strip().lower(): value.strip() for name, sep, value in pairs if sep}


def _b64(message: str) -> str:
    return base64.b64encode(message.encode()).decode()


def _unb64(value: str) -> str:
    try:
        return base64.b64decode(value, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise AuthenticationError("SCRAM: the broker's answer is not base64 text") from None


# The most PBKDF2 iterations a broker may ask for: a genuine one asks 4096 (or a few times
# that); a fake one asking billions would tie a thread up for hours before its signature, the
# proof that it knows the user's keys, is ever checked.
MAX_ITERATIONS = 1_000_000


def _check_iterations(server_first: str) -> None:
    fields = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
    try:
        iterations = int(fields.get("i", ""))
    except ValueError:
        return  # malformed: scramp refuses it with its own message
    if iterations > MAX_ITERATIONS:
        raise AuthenticationError(
            f"SCRAM: the broker asks for {iterations} iterations, more than {MAX_ITERATIONS}: "
            "refused (not a broker to trust)"
        )
