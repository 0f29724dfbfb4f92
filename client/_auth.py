"""Client credentials, named as pulsar-client's: ``Client(..., authentication=...)``.

A token or a user and password travel as the ``authorization`` header of every call (a token
supplier is asked again for each call and each reconnection, so a refreshed token is picked
up); a TLS client certificate is presented on the TLS channels (mutual TLS), and the broker
takes its common name as the role. SCRAM (client/_scram.py) first runs its two-way exchange
with the broker, then sends the role token it earned.
"""

from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc


@dataclass(frozen=True, slots=True)
class ExchangeAnswer:
    """How the broker ended one call of a two-way exchange."""

    code: grpc.StatusCode
    details: str
    trailers: dict[str, str]


# Makes one call carrying the given ``authorization`` header and says how it ended.
Exchange = Callable[[str], Awaitable[ExchangeAnswer]]


class Authentication(ABC):
    """What a client proves itself with."""

    @abstractmethod
    def authorization(self) -> str | None:
        """The ``authorization`` header value for the next call (None: no header)."""

    async def prepare(self, exchange: Exchange) -> None:
        """Runs before each call: a two-way method completes its exchange with the broker
        here (on ``exchange``) when it has nothing valid to send; one-step methods have
        nothing to do."""
        return None

    def refused(self, authorization: str | None) -> bool:
        """The broker refused a call sent with ``authorization``: whether that credential is
        now dropped, so that the call is worth one more try after :meth:`prepare`."""
        return False


class AuthenticationToken(Authentication):
    """A token (a JWT), or a function returning the current one, sent as ``Bearer``."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        if not callable(token) and not token:
            raise ValueError("AuthenticationToken needs a token or a token supplier")
        self._token = token

    def authorization(self) -> str:
        token = self._token() if callable(self._token) else self._token
        return f"Bearer {token}"


class AuthenticationBasic(Authentication):
    """A user name and password (the broker checks them against its htpasswd file)."""

    def __init__(self, username: str, password: str) -> None:
        if not username or ":" in username:
            raise ValueError("AuthenticationBasic needs a user name without ':'")
        pair = f"{username}:{password}".encode()
        self._header = "Basic " + base64.b64encode(pair).decode()

    def authorization(self) -> str:
        return self._header


class AuthenticationTLS(Authentication):
    """A client certificate and its key (PEM files), presented on TLS connections."""

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        self.certificate_path = certificate_path
        self.private_key_path = private_key_path

    def authorization(self) -> None:
        return None
