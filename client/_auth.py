"""Client credentials, named as pulsar-client's: ``Client(..., authentication=...)``.

A token or a user and password travel as the ``authorization`` header of every call (a token
supplier is asked again for each call and each reconnection, so a refreshed token is picked
up, and a stream the broker ends because its token expired reopens with a fresh one); a TLS
client certificate is presented on the TLS channels (mutual TLS), and the broker takes its
common name as the role. SCRAM (client/_scram.py) first runs its two-way exchange with the
broker, then sends the role token it earned. client/_auth_params.py builds any of them from
Pulsar's authPlugin and authParams.
"""

from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

import grpc


class CredentialRenewal(Enum):
    """Whether connecting again can bring credentials other than those the broker refused."""

    FIXED = "fixed"  # the same every time: a token string, a password, a certificate
    SUPPLIED = "supplied"  # asked for afresh at every call: a token supplier, SCRAM's exchange


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

    @property
    def renewal(self) -> CredentialRenewal:
        """SUPPLIED: when the broker ends a stream because its credentials expired (it checks
        every authenticationRefreshCheckSeconds), the stream reopens at once with fresh ones;
        FIXED: the application gets the AuthenticationError."""
        return CredentialRenewal.FIXED

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

    @property
    def renewal(self) -> CredentialRenewal:
        return CredentialRenewal.SUPPLIED if callable(self._token) else CredentialRenewal.FIXED


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
