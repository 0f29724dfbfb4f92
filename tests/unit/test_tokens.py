"""Pulsar-compatible JWTs (broker/security/tokens.py): keys read as Pulsar reads them, tokens
byte-identical to those Pulsar's tool makes, and a clear refusal for every bad token."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration, load_config
from pulsar_grpc.broker.errors import AuthenticationError, ServerError
from pulsar_grpc.broker.security.tokens import (
    KeyValueError,
    TokenAuthenticator,
    create_token,
    decode_private_key,
    decode_public_key,
    hmac_algorithms,
    parse_relative_time,
    read_key,
    same_family,
)

SECRET = bytes(range(32))
SECRET_B64 = base64.b64encode(SECRET).decode()
PEM_B64 = base64.b64encode(
    rsa.generate_private_key(65537, 2048)
    .public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
).decode()


def now() -> int:
    """Seconds since the epoch when the test runs (not when the module was imported: the
    suite can take longer than a token's validity window)."""
    return int(time.time())


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jws(header: bytes, payload: bytes, sign: Callable[[bytes], bytes]) -> str:
    """A compact JWS built by hand, as jjwt lays it out."""
    signing_input = f"{b64url(header)}.{b64url(payload)}".encode()
    return f"{signing_input.decode()}.{b64url(sign(signing_input))}"


def hs256(key: bytes = SECRET) -> Callable[[bytes], bytes]:
    return lambda data: hmac.new(key, data, hashlib.sha256).digest()


def claims_token(claims: dict[str, Any], key: bytes = SECRET, alg: str = "HS256") -> str:
    header = json.dumps({"alg": alg}, separators=(",", ":")).encode()
    return jws(header, json.dumps(claims, separators=(",", ":")).encode(), hs256(key))


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(65537, 2048)


def der_public(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def der_private(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def secret_auth(**kwargs: Any) -> TokenAuthenticator:
    return TokenAuthenticator(SECRET, hmac_algorithms(SECRET), **kwargs)


# --- interchangeability with Pulsar's tool --------------------------------------------------


def test_hs256_token_matches_pulsar_bytes_both_ways() -> None:
    pulsar_token = jws(b'{"alg":"HS256"}', b'{"sub":"admin"}', hs256())
    assert pulsar_token.startswith("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.")
    assert create_token(SECRET, "admin") == pulsar_token
    assert secret_auth().role_of(pulsar_token) == "admin"


def test_expiry_and_headers_laid_out_as_jjwt() -> None:
    exp = int(time.time()) + 3600
    expected = jws(
        b'{"kid":"k1","alg":"HS256"}', f'{{"sub":"admin","exp":{exp}}}'.encode(), hs256()
    )
    assert create_token(SECRET, "admin", exp, {"kid": "k1"}) == expected
    assert secret_auth().role_of(expected) == "admin"


@pytest.mark.parametrize(("size", "alg"), [(32, "HS256"), (48, "HS384"), (64, "HS512")])
def test_hmac_algorithm_chosen_by_key_length_as_jjwt(size: int, alg: str) -> None:
    token = create_token(bytes(size), "r")
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header == {"alg": alg}
    assert TokenAuthenticator(bytes(size), hmac_algorithms(bytes(size))).role_of(token) == "r"


def test_rs256_token_matches_pulsar_bytes_both_ways(rsa_key: rsa.RSAPrivateKey) -> None:
    pulsar_token = jws(
        b'{"alg":"RS256"}',
        b'{"sub":"admin"}',
        lambda data: rsa_key.sign(data, padding.PKCS1v15(), hashes.SHA256()),
    )
    ours = create_token(decode_private_key(der_private(rsa_key), "RS256"), "admin")
    assert ours == pulsar_token
    public = decode_public_key(
        read_key("data:;base64," + base64.b64encode(der_public(rsa_key)).decode()), "RS256"
    )
    assert TokenAuthenticator(public, same_family("RS256")).role_of(pulsar_token) == "admin"


def test_es256_round_trip() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    token = create_token(decode_private_key(der_private(key), "ES256"), "eve")
    assert token.startswith(b64url(b'{"alg":"ES256"}') + ".")
    auth = TokenAuthenticator(decode_public_key(der_public(key), "ES256"), same_family("ES256"))
    assert auth.role_of(token) == "eve"


# --- key values -----------------------------------------------------------------------------


def test_key_values_as_pulsar_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    path.write_bytes(SECRET)
    assert read_key(f"data:;base64,{SECRET_B64}") == SECRET
    assert read_key(f"data:application/octet-stream;base64,{SECRET_B64}") == SECRET
    assert read_key("data:,plain%20text") == b"plain text"
    assert read_key(path.as_uri()) == SECRET
    assert read_key(str(path)) == SECRET
    assert read_key(SECRET_B64) == SECRET
    assert read_key(f"{SECRET_B64[:20]}\n{SECRET_B64[20:]}\n") == SECRET


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("file:///no/such/key", "cannot read key file '/no/such/key'"),
        ("not base64 !", "neither a data: or file: URL, an existing file, nor base64"),
        ("data:;base64", "needs a ','"),
        ("data:;base64,@@@", "not valid base64"),
    ],
)
def test_unreadable_key_values(value: str, problem: str) -> None:
    with pytest.raises(KeyValueError, match=problem):
        read_key(value)


def test_public_key_pem_accepted_and_type_checked(rsa_key: rsa.RSAPrivateKey) -> None:
    pem = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert decode_public_key(pem, "RS256").public_numbers() == rsa_key.public_key().public_numbers()
    with pytest.raises(KeyValueError, match="not a EC key"):
        decode_public_key(pem, "ES256")
    with pytest.raises(KeyValueError, match="not a DER or PEM public key"):
        decode_public_key(b"junk", "RS256")


# --- refusals -------------------------------------------------------------------------------

OTHER_SECRET = bytes(range(1, 33))
NONE_HEADER = b64url(b'{"alg":"none"}')
ROOT_PAYLOAD = b64url(b'{"sub":"root"}')


def refusal_cases(rsa_key: rsa.RSAPrivateKey) -> list[tuple[str, TokenAuthenticator, str, str]]:
    """(case, authenticator, token, expected message part)."""
    public_pem = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    rsa_auth = TokenAuthenticator(decode_public_key(der_public(rsa_key), "RS256"), ("RS256",))
    good = create_token(SECRET, "admin")
    h, p, s = good.split(".")
    audience = secret_auth(audience_claim="aud", audience="broker-a")
    return [
        ("garbage", secret_auth(), "abc", "malformed token"),
        ("two parts", secret_auth(), f"{h}.{p}", "malformed token"),
        (
            "payload not json",
            secret_auth(),
            jws(b'{"alg":"HS256"}', b"nope", hs256()),
            "malformed token",
        ),
        ("alg none", secret_auth(), f"{NONE_HEADER}.{p}.", "alg=none"),
        (
            "HS256 signed with the RSA public key",
            rsa_auth,
            claims_token({"sub": "admin"}, key=public_pem),
            "signed with 'HS256', but the key verifies only RS256",
        ),
        (
            "RS256 token against a secret key",
            secret_auth(),
            create_token(decode_private_key(der_private(rsa_key), "RS256"), "admin"),
            "signed with 'RS256'",
        ),
        ("bad signature", secret_auth(), create_token(OTHER_SECRET, "admin"), "does not verify"),
        (
            "tampered payload",
            secret_auth(),
            f"{h}.{ROOT_PAYLOAD}.{s}",
            "does not verify",
        ),
        (
            "expired",
            secret_auth(),
            claims_token({"sub": "a", "exp": now() - 10}),
            "token expired at",
        ),
        (
            "not yet valid",
            secret_auth(),
            claims_token({"sub": "a", "nbf": now() + 600}),
            "not valid before",
        ),
        ("no role claim", secret_auth(), claims_token({"name": "a"}), "no 'sub' claim"),
        (
            "role not a string",
            secret_auth(auth_claim="role"),
            claims_token({"role": 7}),
            "not a non-empty string",
        ),
        ("no audience", audience, claims_token({"sub": "a"}), "no audience claim 'aud'"),
        (
            "wrong audience",
            audience,
            claims_token({"sub": "a", "aud": "broker-b"}),
            "does not include this broker's 'broker-a'",
        ),
        ("wrong audience list", audience, claims_token({"sub": "a", "aud": ["x", "y"]}), "'x, y'"),
        (
            "audience not a string",
            audience,
            claims_token({"sub": "a", "aud": 5}),
            "not a string or list",
        ),
        ("oversized", secret_auth(), "x" * 70000, "longer than"),
        (
            "HS512 with a 256-bit key",
            secret_auth(),
            jws(
                b'{"alg":"HS512"}', b'{"sub":"a"}', lambda d: hmac.new(SECRET, d, "sha512").digest()
            ),
            "signed with 'HS512', but the key verifies only HS256",
        ),
        (
            "kid not a string",
            secret_auth(),
            jws(b'{"alg":"HS256","kid":5}', b"{}", hs256()),
            "header",
        ),
        ("header not an object", secret_auth(), jws(b"[1]", b"{}", hs256()), "malformed"),
        ("not ascii", secret_auth(), "\u00e9.\u00e9.\u00e9", "malformed"),
    ]


def test_every_bad_token_refused_with_a_clear_message(rsa_key: rsa.RSAPrivateKey) -> None:
    for case, auth, token, expected in refusal_cases(rsa_key):
        with pytest.raises(AuthenticationError) as info:
            auth.role_of(token)
        message = str(info.value)
        assert expected in message, (case, message)
        assert len(message) < 200, (case, message)
        assert info.value.code is ServerError.AuthenticationError


def test_huge_claims_never_echoed() -> None:
    auth = secret_auth(audience_claim="aud", audience="me")
    with pytest.raises(AuthenticationError) as info:
        auth.role_of(claims_token({"sub": "a", "aud": "z" * 5000}))
    assert len(str(info.value)) < 200


def test_accepted_claims() -> None:
    audience = secret_auth(audience_claim="aud", audience="broker-a")
    assert audience.role_of(claims_token({"sub": "a", "aud": ["x", "broker-a"]})) == "a"
    assert audience.role_of(claims_token({"sub": "a", "aud": "broker-a"})) == "a"
    custom = secret_auth(auth_claim="role", audience_claim="scope", audience="pulsar")
    assert custom.role_of(claims_token({"role": "ops", "scope": "pulsar"})) == "ops"
    # iat in the future is not checked, as jjwt does not check it.
    assert secret_auth().role_of(claims_token({"sub": "a", "iat": now() + 3600})) == "a"
    assert secret_auth().role_of(claims_token({"sub": "a", "exp": now() + 60})) == "a"


# --- configuration --------------------------------------------------------------------------


def test_from_config(tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    public = tmp_path / "public.key"
    public.write_bytes(der_public(rsa_key))
    rsa_token = create_token(decode_private_key(der_private(rsa_key), "RS256"), "bob")
    by_public = TokenAuthenticator.from_config(
        ServiceConfiguration(tokenPublicKey=public.as_uri(), tokenAuthClaim="sub")
    )
    assert by_public.role_of(rsa_token) == "bob"
    # Pulsar's rule: the secret key wins when both are set.
    both = TokenAuthenticator.from_config(
        ServiceConfiguration(tokenSecretKey=SECRET_B64, tokenPublicKey=public.as_uri())
    )
    assert both.role_of(create_token(SECRET, "admin")) == "admin"
    with pytest.raises(AuthenticationError):
        both.role_of(rsa_token)
    with pytest.raises(KeyValueError, match="needs tokenSecretKey or tokenPublicKey"):
        TokenAuthenticator.from_config(ServiceConfiguration())


def test_config_loads_token_properties(tmp_path: Path) -> None:
    config = load_config(
        None,
        {},
        {
            "tokenSecretKey": f"data:;base64,{SECRET_B64}",
            "tokenAuthClaim": "role",
            "tokenAudienceClaim": "aud",
            "tokenAudience": "me",
        },
    )
    auth = TokenAuthenticator.from_config(config)
    assert auth.role_of(claims_token({"role": "ops", "aud": "me"})) == "ops"


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"tokenSecretKey": "file:///no/such.key"}, "tokenSecretKey: cannot read key file"),
        ({"tokenPublicKey": "file:///no/such.key"}, "tokenPublicKey: cannot read key file"),
        ({"tokenSecretKey": "data:;base64,AAAA"}, "tokenSecretKey: a secret key must be at least"),
        ({"tokenPublicKey": SECRET_B64}, "tokenPublicKey: not a DER or PEM public key"),
        ({"tokenPublicAlg": "HS256"}, "tokenPublicAlg: must be one of RS256"),
        ({"tokenSecretKey": PEM_B64}, "tokenSecretKey: the secret key is a PEM public key"),
        ({"tokenAudienceClaim": "aud"}, "tokenAudience: required when tokenAudienceClaim"),
    ],
)
def test_config_refuses_bad_token_settings(overrides: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {}, overrides)
    assert any(problem in line for line in info.value.errors), info.value.errors


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30),
        ("30s", 30),
        ("5m", 300),
        ("1h", 3600),
        ("2d", 172800),
        ("1w", 604800),
        ("10y", 315360000),
        ("1H", 3600),
    ],
)
def test_relative_time(text: str, seconds: int) -> None:
    assert parse_relative_time(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1x", "-1h", "1.5h"])
def test_bad_relative_time(text: str) -> None:
    with pytest.raises(ValueError):
        parse_relative_time(text)


def test_unsupported_ec_curve_refused_for_signing() -> None:
    key = ec.generate_private_key(ec.SECP256K1())
    with pytest.raises(KeyValueError, match="secp256k1 is not one of"):
        create_token(key, "a")
