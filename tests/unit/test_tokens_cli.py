"""`pulsar-grpc tokens` as a user runs it: Pulsar's verbs and flags, Pulsar's key files."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

ROOT = Path(__file__).resolve().parents[2]
SECRET = bytes(range(32))
SECRET_VALUE = "data:;base64," + base64.b64encode(SECRET).decode()
HS256_HEADER = b'{"alg":"HS256"}'


def tokens(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_grpc.cli.main", "tokens", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> str:
    result = tokens(*args, stdin=stdin, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def fails(code: int, *args: str, env: dict[str, str] | None = None) -> str:
    result = tokens(*args, env=env)
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stderr


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def pulsar_hs256_token(payload: bytes) -> str:
    """A token laid out as Pulsar's tool (jjwt) makes it, built by hand."""
    signing_input = b64url(HS256_HEADER) + "." + b64url(payload)
    signature = hmac.new(SECRET, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + b64url(signature)


def test_create_is_byte_identical_to_pulsar_and_validates() -> None:
    pulsar_token = pulsar_hs256_token(b'{"sub":"admin"}')
    assert ok("create", "-sk", SECRET_VALUE, "-s", "admin").strip() == pulsar_token
    # Pulsar ignores -a with a secret key; scripts passing it keep working.
    assert ok("create", "-a", "HS256", "-sk", SECRET_VALUE, "-s", "admin").strip() == pulsar_token
    assert json.loads(ok("validate", "-sk", SECRET_VALUE, pulsar_token)) == {"sub": "admin"}


def test_secret_key_files(tmp_path: Path) -> None:
    raw = tmp_path / "secret.key"
    ok("create-secret-key", "--output", str(raw))
    assert len(raw.read_bytes()) == 32
    assert len(base64.b64decode(ok("create-secret-key", "-b"))) == 32
    big = tmp_path / "hs512.key"
    ok("create-secret-key", "-a", "HS512", "-o", str(big))
    assert len(big.read_bytes()) == 64

    token = ok("create", "--secret-key", raw.as_uri(), "--subject", "app", "-e", "1h").strip()
    header, separator, payload = ok("show", token).splitlines()
    assert (json.loads(header), separator) == ({"alg": "HS256"}, "---")
    claims = json.loads(payload)
    assert claims["sub"] == "app"
    assert abs(claims["exp"] - (time.time() + 3600)) < 30
    assert json.loads(ok("validate", "-sk", str(raw), token))["sub"] == "app"
    big_token = ok("create", "-sk", big.as_uri(), "-s", "x")
    assert json.loads(ok("show", big_token).splitlines()[0]) == {"alg": "HS512"}
    other = tmp_path / "other.key"
    ok("create-secret-key", "-o", str(other))
    assert "does not verify" in fails(1, "validate", "-sk", other.as_uri(), token)


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_key_pairs_in_pulsar_der_format(tmp_path: Path, algorithm: str) -> None:
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    ok(
        "create-key-pair",
        "-a",
        algorithm,
        "--output-private-key",
        str(private),
        "--output-public-key",
        str(public),
    )
    # DER PKCS#8 and X.509 SubjectPublicKeyInfo, as Pulsar's tool writes them.
    private_key = serialization.load_der_private_key(private.read_bytes(), password=None)
    public_key = serialization.load_der_public_key(public.read_bytes())
    expected = rsa.RSAPrivateKey if algorithm == "RS256" else ec.EllipticCurvePrivateKey
    assert isinstance(private_key, expected)
    assert (
        public_key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        == public.read_bytes()
    )

    token = ok(
        "create", "-a", algorithm, "-pk", private.as_uri(), "-s", "svc", "-hs", "kid=k1"
    ).strip()
    header = json.loads(ok("show", token).splitlines()[0])
    assert header == {"kid": "k1", "alg": algorithm}
    assert json.loads(ok("validate", "-a", algorithm, "-pk", public.as_uri(), token)) == {
        "sub": "svc"
    }
    # The public key is no HMAC secret: an HS256 token is refused, not verified with it.
    refused = fails(
        1,
        "validate",
        "-a",
        algorithm,
        "-pk",
        str(public),
        ok("create", "-sk", SECRET_VALUE, "-s", "svc").strip(),
    )
    assert "signed with 'HS256'" in refused


def test_token_sources(tmp_path: Path) -> None:
    token = ok("create", "-sk", SECRET_VALUE, "-s", "admin").strip()
    path = tmp_path / "token.txt"
    path.write_text(token + "\n", encoding="utf-8")
    expected = {"sub": "admin"}
    assert json.loads(ok("validate", "-sk", SECRET_VALUE, "-f", str(path))) == expected
    assert json.loads(ok("validate", "-sk", SECRET_VALUE, "-i", stdin=token + "\n")) == expected
    assert json.loads(ok("validate", "-sk", SECRET_VALUE, env={"TOKEN": token})) == expected
    assert ok("show", "--token-file", str(path)).splitlines()[2] == '{"sub":"admin"}'


def test_expired_token_refused() -> None:
    expired = pulsar_hs256_token(b'{"sub":"a","exp":1000}')
    stderr = fails(1, "validate", "-sk", SECRET_VALUE, expired)
    assert "token expired at 1970-01-01T00:16:40" in stderr


def test_usage_errors() -> None:
    env = {"TOKEN": ""}
    assert "exactly one of --secret-key and --private-key" in fails(2, "create", "-s", "a")
    both = fails(2, "create", "-s", "a", "-sk", SECRET_VALUE, "-pk", SECRET_VALUE)
    assert "exactly one" in both
    assert "--expiry-time" in fails(2, "create", "-sk", SECRET_VALUE, "-s", "a", "-e", "1x")
    assert "KEY=VALUE" in fails(2, "create", "-sk", SECRET_VALUE, "-s", "a", "-hs", "kid")
    assert "--subject" in fails(2, "create", "-sk", SECRET_VALUE)
    assert "--stdin, --token-file or $TOKEN" in fails(2, "show", env=env)
    assert "cannot read key file" in fails(1, "create", "-sk", "file:///no/such.key", "-s", "a")
    assert "HS256 signs with a secret key" in fails(
        1, "create", "-a", "HS256", "-pk", SECRET_VALUE, "-s", "a"
    )
    assert "at least 256 bits" in fails(1, "create", "-sk", "data:;base64,AAAA", "-s", "a")
    assert "three base64url parts" in fails(1, "show", "not-a-token")
