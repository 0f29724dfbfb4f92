"""JSON Web Tokens as Apache Pulsar's token authentication reads and writes them.

Pulsar (AuthenticationProviderToken, AuthTokenUtils, TokensCliUtils) signs with jjwt; the facts
that make tokens interchangeable with its ``pulsar tokens`` tool are kept here:

- a key is given as ``data:[<mediatype>][;base64],<data>``, ``file:///path``, a plain path that
  exists, or else a base64 value (``readKeyFromUrl``);
- a secret key is the raw HMAC key bytes (at least 256 bits, as jjwt's ``hmacShaKeyFor``);
  a public key is DER X.509 SubjectPublicKeyInfo and a private key DER PKCS#8, as the tool
  writes them (PEM is accepted too);
- jjwt picks the signing algorithm from the key (HMAC by key length, RSA by modulus size, EC by
  curve), writes the header ``{"alg":...}`` after any extra headers, no ``typ``, and the claims
  ``{"sub":...,"exp":...}`` as compact JSON, base64url without padding.

A validator pins the algorithms its key may verify (the HMAC family for a secret key, the family
of ``tokenPublicAlg`` for a public key), so neither ``alg=none`` nor an HMAC token "signed" with
the public key as secret passes.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from pulsar_grpc.broker.errors import AuthenticationError

if TYPE_CHECKING:
    from pulsar_grpc.broker.service_configuration import ServiceConfiguration

# A token this long is no token: refused before any parsing (a client controls its size).
MAX_TOKEN_CHARS = 64 * 1024
# At most this much of a client-supplied value is quoted back in an error message.
_QUOTE_CHARS = 64
_MIN_SECRET_BYTES = 32

KEY_VALUE_HELP = "data:;base64,<b64>, data:<raw>, file:///path, a path, or a base64 value"


class KeyFamily(Enum):
    """The kind of key an algorithm signs with."""

    HMAC = "HMAC"
    RSA = "RSA"
    EC = "EC"


# The algorithms jjwt (and so Pulsar) supports, by family.
ALGORITHMS: dict[str, KeyFamily] = {
    "HS256": KeyFamily.HMAC,
    "HS384": KeyFamily.HMAC,
    "HS512": KeyFamily.HMAC,
    "RS256": KeyFamily.RSA,
    "RS384": KeyFamily.RSA,
    "RS512": KeyFamily.RSA,
    "PS256": KeyFamily.RSA,
    "PS384": KeyFamily.RSA,
    "PS512": KeyFamily.RSA,
    "ES256": KeyFamily.EC,
    "ES384": KeyFamily.EC,
    "ES512": KeyFamily.EC,
}
ASYMMETRIC_ALGORITHMS = tuple(a for a, f in ALGORITHMS.items() if f is not KeyFamily.HMAC)
HMAC_ALGORITHMS = tuple(a for a, f in ALGORITHMS.items() if f is KeyFamily.HMAC)

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
SigningKey = bytes | PrivateKey


class KeyValueError(ValueError):
    """A key value that cannot be read or decoded; the message says which and why."""


def _clip(value: str) -> str:
    return value if len(value) <= _QUOTE_CHARS else value[:_QUOTE_CHARS] + "..."


# --- reading keys ---------------------------------------------------------------------------


def read_key(value: str) -> bytes:
    """The key bytes a Pulsar key value names (``readKeyFromUrl``).

    >>> read_key("data:;base64,AAEC")
    b'\\x00\\x01\\x02'
    """
    if value.startswith("data:"):
        return _read_data_url(value)
    if value.startswith("file:"):
        path = urllib.request.url2pathname(urllib.parse.urlparse(value).path)
        return _read_file(Path(path))
    if value and os.path.exists(value):
        return _read_file(Path(value))
    try:
        # Whitespace is allowed, as commons-codec's isBase64 allows it (a pasted key wraps).
        return base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        # The value may be a mistyped secret: never quoted back.
        raise KeyValueError(
            "the key value is neither a data: or file: URL, an existing file, nor base64"
        ) from None


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise KeyValueError(f"cannot read key file {str(path)!r}: {e.strerror or e}") from None


def _read_data_url(value: str) -> bytes:
    header, sep, data = value[len("data:") :].partition(",")
    if not sep:
        raise KeyValueError("a data: URL needs a ',' before its data (data:;base64,<b64>)")
    if header.split(";")[-1] == "base64":
        try:
            return base64.b64decode("".join(data.split()), validate=True)
        except (binascii.Error, ValueError):
            raise KeyValueError("the data: URL's base64 data is not valid base64") from None
    return urllib.parse.unquote_to_bytes(data)


def decode_secret_key(raw: bytes) -> bytes:
    """An HMAC key, refused below 256 bits as jjwt's ``Keys.hmacShaKeyFor`` does."""
    if len(raw) < _MIN_SECRET_BYTES:
        raise KeyValueError(
            f"a secret key must be at least {_MIN_SECRET_BYTES * 8} bits; this one has "
            f"{len(raw) * 8}"
        )
    try:
        jwt.get_algorithm_by_name("HS256").prepare_key(raw)
    except jwt.InvalidKeyError:
        raise KeyValueError(
            "the secret key is a PEM public key or certificate, not an HMAC secret"
        ) from None
    return raw


def hmac_algorithms(secret: bytes) -> tuple[str, ...]:
    """The HMAC algorithms ``secret`` may verify: jjwt refuses a key shorter than the hash."""
    return tuple(a for a in HMAC_ALGORITHMS if int(a[2:]) <= len(secret) * 8)


def _family_of(algorithm: str) -> KeyFamily:
    family = ALGORITHMS.get(algorithm)
    if family is None:
        raise KeyValueError(f"unknown signature algorithm {_clip(algorithm)!r}")
    return family


_KEY_TYPES: dict[KeyFamily, tuple[type, ...]] = {
    KeyFamily.RSA: (rsa.RSAPublicKey, rsa.RSAPrivateKey),
    KeyFamily.EC: (ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey),
}


def same_family(algorithm: str) -> tuple[str, ...]:
    """The algorithms a key for ``algorithm`` may verify: jjwt accepts any of its family."""
    family = _family_of(algorithm)
    return tuple(a for a, f in ALGORITHMS.items() if f is family)


def _pair_family(algorithm: str, kind: str) -> KeyFamily:
    """The family of ``algorithm``, which must sign with a key pair."""
    family = _family_of(algorithm)
    if family is KeyFamily.HMAC:
        raise KeyValueError(f"{algorithm} signs with a secret key, not a {kind} key")
    return family


def _typed(key: Any, family: KeyFamily, algorithm: str, kind: str) -> Any:
    if not isinstance(key, _KEY_TYPES[family]):
        raise KeyValueError(f"the {kind} key is not a {family.value} key, as {algorithm} needs")
    return key


def decode_public_key(raw: bytes, algorithm: str) -> PublicKey:
    """A DER X.509 SubjectPublicKeyInfo (what Pulsar writes) or PEM public key for ``algorithm``."""
    family = _pair_family(algorithm, "public")
    try:
        key: Any = serialization.load_der_public_key(raw)
    except ValueError:
        try:
            key = serialization.load_pem_public_key(raw)
        except ValueError:
            raise KeyValueError("not a DER or PEM public key") from None
    return _typed(key, family, algorithm, "public")  # type: ignore[no-any-return]


def decode_private_key(raw: bytes, algorithm: str) -> PrivateKey:
    """A DER PKCS#8 (what Pulsar writes) or PEM private key for ``algorithm``."""
    family = _pair_family(algorithm, "private")
    try:
        key: Any = serialization.load_der_private_key(raw, password=None)
    except (ValueError, TypeError):
        try:
            key = serialization.load_pem_private_key(raw, password=None)
        except (ValueError, TypeError):
            raise KeyValueError("not an unencrypted DER (PKCS#8) or PEM private key") from None
    return _typed(key, family, algorithm, "private")  # type: ignore[no-any-return]


# --- creating keys and tokens ---------------------------------------------------------------


def create_secret_key(algorithm: str = "HS256") -> bytes:
    """Random key bytes as long as ``algorithm``'s hash, as jjwt's ``Keys.secretKeyFor``."""
    if _family_of(algorithm) is not KeyFamily.HMAC:
        raise KeyValueError(f"{algorithm} does not use a secret key (use create-key-pair)")
    return os.urandom(int(algorithm[2:]) // 8)


_RSA_BITS = {"256": 2048, "384": 3072, "512": 4096}
_EC_CURVES: dict[str, ec.EllipticCurve] = {
    "ES256": ec.SECP256R1(),
    "ES384": ec.SECP384R1(),
    "ES512": ec.SECP521R1(),
}


def create_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """(private PKCS#8 DER, public X.509 DER) as jjwt's ``Keys.keyPairFor`` and Pulsar write."""
    family = _family_of(algorithm)
    private: PrivateKey
    if family is KeyFamily.RSA:
        private = rsa.generate_private_key(65537, _RSA_BITS[algorithm[2:]])
    elif family is KeyFamily.EC:
        private = ec.generate_private_key(_EC_CURVES[algorithm])
    else:
        raise KeyValueError(f"{algorithm} does not use a key pair (use create-secret-key)")
    return (
        private.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


def signing_algorithm(key: SigningKey) -> str:
    """The algorithm jjwt's ``signWith(key)`` picks for ``key``."""
    if isinstance(key, bytes):
        bits = len(key) * 8
        return "HS512" if bits >= 512 else "HS384" if bits >= 384 else "HS256"
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < 2048:
            raise KeyValueError(
                f"an RSA key must be at least 2048 bits; this one has {key.key_size}"
            )
        return "RS512" if key.key_size >= 4096 else "RS384" if key.key_size >= 3072 else "RS256"
    algorithm = {256: "ES256", 384: "ES384", 521: "ES512"}.get(key.curve.key_size)
    if algorithm is None or key.curve.name not in ("secp256r1", "secp384r1", "secp521r1"):
        raise KeyValueError(f"EC curve {key.curve.name} is not one of P-256, P-384, P-521")
    return algorithm


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _compact_json(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def create_token(
    key: SigningKey,
    subject: str,
    expires_at: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> str:
    """A compact JWS byte for byte as Pulsar's ``AuthTokenUtils.createToken`` makes it.

    ``expires_at`` is in seconds since the epoch.
    """
    algorithm = signing_algorithm(key)
    header = {**(headers or {}), "alg": algorithm}
    claims: dict[str, Any] = {"sub": subject}
    if expires_at is not None:
        claims["exp"] = expires_at
    signing_input = f"{_b64url(_compact_json(header))}.{_b64url(_compact_json(claims))}"
    signer = jwt.get_algorithm_by_name(algorithm)
    signature = signer.sign(signing_input.encode("ascii"), signer.prepare_key(key))
    return f"{signing_input}.{_b64url(signature)}"


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_relative_time(text: str) -> int:
    """Seconds in ``1h``, ``3d``, ``10y``... (Pulsar's RelativeTimeUtil; no unit: seconds)."""
    text = text.strip()
    number, unit = (text[:-1], text[-1].lower()) if text[-1:].isalpha() else (text, "s")
    if unit not in _UNITS:
        raise ValueError(f"invalid time unit {text[-1]!r} in {_clip(text)!r} (use s m h d w y)")
    if not number.isdigit():
        raise ValueError(f"invalid relative time {_clip(text)!r} (e.g. 30m, 1h, 3d, 10y)")
    return int(number) * _UNITS[unit]


def split_unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims of ``token`` without checking its signature (``tokens show``)."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise ValueError("a token has three base64url parts separated by '.'")
    try:
        decoded = [json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in parts[:2]]
    except (binascii.Error, ValueError):
        raise ValueError("the token's header or payload is not base64url-encoded JSON") from None
    if not all(isinstance(d, dict) for d in decoded):
        raise ValueError("the token's header and payload must be JSON objects")
    return decoded[0], decoded[1]


def expiry_of(token: str) -> float | None:
    """The ``exp`` claim of a token already verified (seconds since the epoch), None without
    one: when a stream it opened must end (broker/security/expiry.py)."""
    try:
        expiry = split_unverified(token)[1].get("exp")
    except ValueError:
        return None
    if isinstance(expiry, bool) or not isinstance(expiry, int | float):
        return None
    return float(expiry)


# --- validating tokens ----------------------------------------------------------------------


@dataclass(frozen=True)
class TokenAuthenticator:
    """Checks tokens against one key and tells the role they carry.

    >>> auth = TokenAuthenticator.from_config(config)
    >>> auth.role_of(token)
    'admin'
    """

    key: bytes | PublicKey
    algorithms: tuple[str, ...]
    auth_claim: str = "sub"
    audience_claim: str | None = None
    audience: str | None = None

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> TokenAuthenticator:
        """Pulsar's rule: ``tokenSecretKey`` if set, else ``tokenPublicKey``.

        Raises :class:`KeyValueError` (a ValueError) when no key is set or a key does not decode.
        """
        if config.tokenSecretKey:
            secret = decode_secret_key(read_key(config.tokenSecretKey))
            key: bytes | PublicKey = secret
            algorithms = hmac_algorithms(secret)
        elif config.tokenPublicKey:
            key = decode_public_key(read_key(config.tokenPublicKey), config.tokenPublicAlg)
            algorithms = same_family(config.tokenPublicAlg)
        else:
            raise KeyValueError("token authentication needs tokenSecretKey or tokenPublicKey")
        return cls(
            key,
            algorithms,
            auth_claim=config.tokenAuthClaim,
            audience_claim=config.tokenAudienceClaim or None,
            audience=config.tokenAudience or None,
        )

    def role_of(self, token: str) -> str:
        """The role ``token`` proves, or :class:`AuthenticationError` saying why not."""
        claims = self._verified_claims(token)
        self._check_audience(claims)
        role = claims.get(self.auth_claim)
        if role is None:
            raise AuthenticationError(f"token has no {self.auth_claim!r} claim to take a role from")
        if not isinstance(role, str) or not role:
            raise AuthenticationError(
                f"token's {self.auth_claim!r} claim is not a non-empty string"
            )
        return role

    def _verified_claims(self, token: str) -> dict[str, Any]:
        if len(token) > MAX_TOKEN_CHARS:
            raise AuthenticationError(f"token is longer than {MAX_TOKEN_CHARS} characters")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise AuthenticationError(
                "malformed token: not a compact JWS (header.payload.signature)"
            ) from None
        except jwt.InvalidTokenError as e:
            raise AuthenticationError(f"malformed token header: {_clip(str(e))}") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm.lower() == "none":
            raise AuthenticationError("unsigned token (alg=none) refused")
        if algorithm not in self.algorithms:
            raise AuthenticationError(
                f"token signed with {_clip(algorithm)!r}, but the key verifies only "
                f"{', '.join(self.algorithms)}"
            )
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                self.key,  # type: ignore[arg-type]
                algorithms=list(self.algorithms),
                # jjwt checks exp and nbf only; the audience claim is checked below, by name.
                options={
                    "verify_aud": False,
                    "verify_iat": False,
                    "verify_sub": False,
                    "verify_jti": False,
                },
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationError(f"token expired {_when(token, 'exp')}") from None
        except jwt.ImmatureSignatureError:
            raise AuthenticationError(f"token not valid before {_when(token, 'nbf')}") from None
        except jwt.InvalidSignatureError:
            raise AuthenticationError("token signature does not verify with the key") from None
        except jwt.DecodeError as e:
            raise AuthenticationError(f"malformed token: {_clip(str(e))}") from None
        except jwt.InvalidTokenError as e:
            raise AuthenticationError(f"invalid token: {_clip(str(e))}") from None
        return claims

    def _check_audience(self, claims: Mapping[str, Any]) -> None:
        if self.audience_claim is None:
            return
        found = claims.get(self.audience_claim)
        if found is None:
            raise AuthenticationError(f"token has no audience claim {self.audience_claim!r}")
        audiences = [found] if isinstance(found, str) else found
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise AuthenticationError(
                f"token's audience claim {self.audience_claim!r} is not a string or list of strings"
            )
        if self.audience not in audiences:
            raise AuthenticationError(
                f"token's audience {_clip(', '.join(audiences))!r} does not include this "
                f"broker's {self.audience!r}"
            )


def _when(token: str, claim: str) -> str:
    """``at <UTC time>`` of a time claim, for an error message."""
    try:
        value = float(split_unverified(token)[1][claim])
        return f"at {datetime.fromtimestamp(value, UTC).isoformat()}"
    except (KeyError, ValueError, TypeError, OverflowError):
        return ""


def config_problems(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """The token properties' problems, for broker/config.py's rules: every key set must decode."""
    if config.tokenPublicAlg not in ASYMMETRIC_ALGORITHMS:
        yield "tokenPublicAlg", f"must be one of {', '.join(ASYMMETRIC_ALGORITHMS)}"
    elif config.tokenPublicKey:
        try:
            decode_public_key(read_key(config.tokenPublicKey), config.tokenPublicAlg)
        except KeyValueError as e:
            yield "tokenPublicKey", str(e)
    if config.tokenSecretKey:
        try:
            decode_secret_key(read_key(config.tokenSecretKey))
        except KeyValueError as e:
            yield "tokenSecretKey", str(e)
    if config.tokenAudienceClaim and not config.tokenAudience:
        yield "tokenAudience", "required when tokenAudienceClaim is set: this broker's audience"
