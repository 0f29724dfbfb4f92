"""The htpasswd schemes Pulsar's AuthenticationProviderBasic accepts ($apr1$ MD5 and DES crypt),
and bcrypt, checked against hashes that real tools made."""

from __future__ import annotations

import asyncio
import base64
import logging
import shutil
import subprocess

import pytest

from pulsar_grpc.broker.config import ConfigError
from pulsar_grpc.broker.errors import AuthenticationError
from pulsar_grpc.broker.security.authentication import AuthenticationData, BasicProvider
from pulsar_grpc.broker.security.htpasswd import HashScheme, parse_htpasswd

# pulsar-client-python's tests/test-conf/.htpasswd: admin / 123456 (its CI's basic auth user).
PULSAR_CLIENT_PYTHON = "admin:$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf."
# `openssl passwd -apr1 -salt Zx9.ab/c 'a-long passphrase, past 8'`
OPENSSL_APR1 = "carol:$apr1$Zx9.ab/c$k8TBi/gowu7EbUxjvAwdD1"
# `perl -e 'print crypt("123456","pu")'` (the C library's crypt(3): what htpasswd -d writes)
LIBC_CRYPT = "dave:pu4xVegw74rKs"


def check(text: str, user: str, password: str) -> str:
    provider = BasicProvider(parse_htpasswd(text))
    header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    data = AuthenticationData(header, None, "ipv4:127.0.0.1:1")
    return asyncio.run(provider.authenticate(data))


def test_pulsar_client_pythons_htpasswd_file() -> None:
    assert check(PULSAR_CLIENT_PYTHON, "admin", "123456") == "admin"
    with pytest.raises(AuthenticationError):
        check(PULSAR_CLIENT_PYTHON, "admin", "1234567")


def test_apr1_md5_from_openssl() -> None:
    users = parse_htpasswd(OPENSSL_APR1)
    assert users["carol"].scheme is HashScheme.APR1_MD5
    assert check(OPENSSL_APR1, "carol", "a-long passphrase, past 8") == "carol"
    with pytest.raises(AuthenticationError):  # APR1 reads the whole password
        check(OPENSSL_APR1, "carol", "a-long passphrase, past 9")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_apr1_md5_with_a_fresh_random_salt() -> None:
    made = subprocess.run(
        ["openssl", "passwd", "-apr1", "s3cret:x"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert check(f"erin:{made}", "erin", "s3cret:x") == "erin"


def test_des_crypt_as_pulsar_reads_only_8_characters(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert parse_htpasswd(LIBC_CRYPT)["dave"].scheme is HashScheme.DES_CRYPT
    assert "dave have crypt (DES) hashes" in caplog.text
    assert check(LIBC_CRYPT, "dave", "123456") == "dave"
    with pytest.raises(AuthenticationError):
        check(LIBC_CRYPT, "dave", "123457")


def test_unknown_user_is_refused_whatever_the_scheme() -> None:
    for text in (PULSAR_CLIENT_PYTHON, LIBC_CRYPT, ""):
        with pytest.raises(AuthenticationError, match="unknown user or wrong password"):
            check(text, "nobody", "123456")


def test_schemes_mix_in_one_file_and_bad_lines_are_named() -> None:
    users = parse_htpasswd(f"{PULSAR_CLIENT_PYTHON}\n{LIBC_CRYPT}\n{OPENSSL_APR1}\n")
    assert {u: h.scheme for u, h in users.items()} == {
        "admin": HashScheme.APR1_MD5,
        "dave": HashScheme.DES_CRYPT,
        "carol": HashScheme.APR1_MD5,
    }
    with pytest.raises(ConfigError) as info:
        parse_htpasswd("a:{SHA}fEqNCco3Yq9h5ZUglD3CZJT4lBs=\nb:plaintext\nc:$1$abc$def\n")
    assert [error.split(":")[1] for error in info.value.errors] == [" line 1", " line 2", " line 3"]
    assert "$apr1$ (MD5) or crypt (DES)" in info.value.errors[0]
