"""Expiring credentials without a network: the expiry the authentication result carries (a
token's ``exp``), the broker's check that ends watched streams once it has passed (on a test
clock), and the SDK's reconnect decision (renew once with a supplier, give up otherwise)."""

from __future__ import annotations

import time

import grpc
import pytest

from pulsar_grpc import client
from pulsar_grpc.broker.config import ConfigError, load_config
from pulsar_grpc.broker.errors import AuthenticationError
from pulsar_grpc.broker.security.authentication import (
    AuthenticationData,
    AuthenticationService,
    BasicProvider,
    TokenProvider,
    parse_htpasswd,
)
from pulsar_grpc.broker.security.expiry import CredentialExpiryCheck
from pulsar_grpc.broker.security.tokens import TokenAuthenticator, create_secret_key, create_token
from pulsar_grpc.client import AuthenticationBasic, AuthenticationToken
from pulsar_grpc.client._auth import CredentialRenewal
from pulsar_grpc.client._connection import Backoff, ConnectionHandler, HandleState
from tests.unit.test_client_reconnect import Recorder, rpc_error
from tests.waiting import eventually

KEY = create_secret_key()


def bearer(token: str) -> AuthenticationData:
    return AuthenticationData(f"Bearer {token}", None, "ipv4:127.0.0.1:1")


async def test_a_tokens_exp_is_the_expiry_of_what_it_authenticates() -> None:
    service = AuthenticationService([TokenProvider(TokenAuthenticator(KEY, ("HS256",)))])
    expires_at = int(time.time()) + 600
    result = await service.authenticate(bearer(create_token(KEY, "alice", expires_at)))
    assert (result.role, result.expires_at) == ("alice", expires_at)
    forever = await service.authenticate(bearer(create_token(KEY, "alice")))
    assert forever.expires_at is None


async def test_passwords_do_not_expire() -> None:
    service = AuthenticationService([BasicProvider(parse_htpasswd(""))], anonymous_role="guest")
    assert (await service.authenticate(AuthenticationData(None, None, "x"))).expires_at is None


def test_the_check_interval_is_pulsars_property() -> None:
    assert load_config(None, {}, {}).authenticationRefreshCheckSeconds == 60
    config = load_config(None, {}, {"authenticationRefreshCheckSeconds": "5"})
    assert config.authenticationRefreshCheckSeconds == 5
    with pytest.raises(ConfigError, match="authenticationRefreshCheckSeconds"):
        load_config(None, {}, {"authenticationRefreshCheckSeconds": "0"})


async def test_the_check_ends_only_streams_whose_credentials_expired() -> None:
    now = [100.0]
    check = CredentialExpiryCheck(60, clock=lambda: now[0])
    ended: dict[str, AuthenticationError] = {}
    check.watch(110, lambda error: ended.setdefault("soon", error))
    unwatch_later = check.watch(120, lambda error: ended.setdefault("later", error))
    check.watch(None, lambda error: ended.setdefault("never", error))
    assert len(check) == 2  # credentials without an expiry are not watched
    assert check.check() == 0 and ended == {}
    now[0] = 110.0
    assert check.check() == 1
    assert list(ended) == ["soon"] and "credentials expired at" in ended["soon"].message
    unwatch_later()  # that stream ended on its own
    now[0] = 1000.0
    assert check.check() == 0 and list(ended) == ["soon"] and len(check) == 0
    await check.close()


async def test_the_check_runs_at_its_interval_while_anything_is_watched() -> None:
    check = CredentialExpiryCheck(0.01)
    ended: list[AuthenticationError] = []
    check.watch(time.time() + 0.05, ended.append)
    await eventually(lambda: ended, 5)
    assert len(check) == 0
    await check.close()


def handler(recorder: Recorder, renewal: CredentialRenewal) -> ConnectionHandler:
    return ConnectionHandler(
        "test",
        Backoff(0.1, 0.5, rand=lambda: 0.0),
        recorder.reopen,
        recorder.give_up,
        recorder.drop,
        sleep=recorder.sleep,
        renewal=renewal,
    )


def expired() -> client.PulsarException:
    """How the SDK reads a stream the broker ended for expired credentials."""
    return rpc_error(grpc.StatusCode.UNAUTHENTICATED, "3")


def test_only_a_token_supplier_renews() -> None:
    assert AuthenticationToken(lambda: "t").renewal is CredentialRenewal.SUPPLIED
    assert AuthenticationToken("t").renewal is CredentialRenewal.FIXED
    assert AuthenticationBasic("u", "p").renewal is CredentialRenewal.FIXED


async def test_a_supplier_reconnects_at_once_when_credentials_expired() -> None:
    rec = Recorder([])
    h = handler(rec, CredentialRenewal.SUPPLIED)
    await h.connect_first(5)
    assert h.retries(expired())
    h.lost(expired())
    assert await h.wait_ready(5)
    assert (h.reconnects, rec.delays, rec.given_up) == (1, [0.0], [])


async def test_a_refused_renewal_gives_up_without_looping() -> None:
    refused = expired()
    rec = Recorder([])
    h = handler(rec, CredentialRenewal.SUPPLIED)
    await h.connect_first(5)
    rec.failures = [refused, refused, refused]
    h.lost(expired())
    await eventually(lambda: rec.given_up, 5)
    assert rec.given_up == [refused] and len(rec.failures) == 2  # one attempt only
    assert h.state is not HandleState.READY and h.reconnects == 0


async def test_fixed_credentials_give_up_at_once() -> None:
    rec = Recorder([])
    h = handler(rec, CredentialRenewal.FIXED)
    await h.connect_first(5)
    error = expired()
    assert not h.retries(error)
    h.lost(error)
    assert rec.given_up == [error] and rec.opened == 1
