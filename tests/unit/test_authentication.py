"""The authentication service without a network: which provider a request's credentials go to,
the htpasswd file, the provider registry (how the token provider joins), the CLI's
--auth-plugin/--auth-params."""

from __future__ import annotations

import argparse
import base64
from pathlib import Path

import bcrypt
import pytest

from pulsar_grpc.broker.config import ConfigError, load_config
from pulsar_grpc.broker.errors import AuthenticationError
from pulsar_grpc.broker.security import authentication as auth
from pulsar_grpc.broker.security.authentication import (
    AuthenticationData,
    AuthenticationProvider,
    AuthenticationService,
    BasicProvider,
    TlsProvider,
    parse_htpasswd,
)
from pulsar_grpc.broker.security.htpasswd import (
    PasswordHash,
)
from pulsar_grpc.cli.auth import authentication_of
from pulsar_grpc.client import AuthenticationBasic, AuthenticationTLS, AuthenticationToken


def data(authorization: str | None = None, cn: str | None = None) -> AuthenticationData:
    return AuthenticationData(authorization, cn, "ipv4:127.0.0.1:1234")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def users() -> dict[str, PasswordHash]:
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    return parse_htpasswd(f"# comment\n\nalice:$2y${hashed[4:]}\n")


def config(**values: str):  # type: ignore[no-untyped-def]
    return load_config(None, {}, values)


async def test_each_kind_of_credentials_goes_to_its_provider():
    service = AuthenticationService([TlsProvider(), BasicProvider(users())])
    assert (await service.authenticate(data(basic("alice", "pw")))).role == "alice"
    assert (await service.authenticate(data(cn="client-cn"))).method == "tls"
    # A header wins over the certificate: a wrong password is not rescued by the CN.
    with pytest.raises(AuthenticationError):
        await service.authenticate(data(basic("alice", "no"), cn="client-cn"))
    with pytest.raises(AuthenticationError, match="token is not enabled"):
        await service.authenticate(data("Bearer abc"))
    with pytest.raises(AuthenticationError, match="no credentials"):
        await service.authenticate(data())


async def test_anonymous_role_only_for_requests_without_credentials():
    service = AuthenticationService([BasicProvider(users())], anonymous_role="guest")
    result = await service.authenticate(data())
    assert (result.role, result.method) == ("guest", "anonymous")
    with pytest.raises(AuthenticationError):
        await service.authenticate(data(basic("alice", "wrong")))


def test_htpasswd_takes_well_formed_hashes_only():
    assert set(users()) == {"alice"}
    with pytest.raises(ConfigError, match="line 1"):
        parse_htpasswd("bob:$apr1$salt$md5hash\n")  # a digest is 22 characters
    with pytest.raises(ConfigError, match="line 1"):
        parse_htpasswd("bob:$2y$10$cut-short\n")  # would fail at the first login otherwise
    with pytest.raises(ConfigError, match="line 2"):
        parse_htpasswd("alice:$2b$04$" + "a" * 53 + "\nno-colon\n")


def test_service_from_config(tmp_path: Path):
    assert AuthenticationService.from_config(config()) is None  # disabled: nothing checks
    with pytest.raises(ConfigError, match="basicAuthConf: required"):
        AuthenticationService.from_config(
            config(authenticationEnabled="true", authenticationProviders="basic")
        )
    with pytest.raises(ConfigError, match="cannot read"):
        AuthenticationService.from_config(
            config(
                authenticationEnabled="true",
                authenticationProviders="basic",
                basicAuthConf=str(tmp_path / "absent"),
            )
        )
    with pytest.raises(ConfigError, match="unknown provider kerberos"):
        AuthenticationService.from_config(
            config(authenticationEnabled="true", authenticationProviders="tls,kerberos")
        )


async def test_a_registered_provider_is_used_for_its_scheme(monkeypatch: pytest.MonkeyPatch):
    """How the token provider joins: one class, registered under its names."""

    class Fixed(AuthenticationProvider):
        auth_method_name = "token"  # type: ignore[assignment]

        async def authenticate(self, data: AuthenticationData) -> str:
            return "from-" + (data.authorization or "").removeprefix("Bearer ")

    monkeypatch.setitem(auth.PROVIDERS, "token", lambda config: Fixed())
    service = AuthenticationService.from_config(
        config(authenticationEnabled="true", authenticationProviders="token")
    )
    assert service is not None
    assert (await service.authenticate(data("Bearer xyz"))).role == "from-xyz"


def cli_args(plugin: str | None, params: str = "") -> argparse.Namespace:
    return argparse.Namespace(auth_plugin=plugin, auth_params=params)


def test_cli_auth_flags(tmp_path: Path):
    assert authentication_of(cli_args(None)) is None
    token = authentication_of(cli_args("token", "token:abc"))
    assert isinstance(token, AuthenticationToken) and token.authorization() == "Bearer abc"
    path = tmp_path / "token"
    path.write_text("first\n")
    from_file = authentication_of(cli_args("token", f"file://{path}"))
    assert from_file is not None and from_file.authorization() == "Bearer first"
    path.write_text("rotated\n")
    assert from_file.authorization() == "Bearer rotated"  # read again on every call
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
    for params in ('{"userId":"u","password":"p:q"}', "userId:u,password:p:q"):
        creds = authentication_of(cli_args(plugin, params))
        assert isinstance(creds, AuthenticationBasic)
        assert creds.authorization() == basic("u", "p:q")
    tls = authentication_of(cli_args("tls", "tlsCertFile:/c.pem,tlsKeyFile:/k.pem"))
    assert isinstance(tls, AuthenticationTLS) and tls.certificate_path == "/c.pem"
    for plugin, params in [("kerberos", ""), ("basic", "userId:u"), (None, "token:x")]:
        with pytest.raises(ValueError):
            authentication_of(cli_args(plugin, params))
