"""The htpasswd file of the basic authentication provider (``basicAuthConf``).

Pulsar's AuthenticationProviderBasic checks ``$apr1$`` hashes with commons-codec's
``Md5Crypt.apr1Crypt`` (``htpasswd -m``, ``openssl passwd -apr1``) and every other line with
``Crypt.crypt`` on the hash's first two characters, which is traditional DES crypt
(``htpasswd -d``): so a file made for a Pulsar broker holds those two schemes. bcrypt
(``htpasswd -B``) is taken as well, the strongest of them and this broker's own choice so far.

APR1-MD5 and DES crypt come from libpass (the maintained fork of passlib; pure Python, unlike
the ``crypt`` module that Python 3.13 removed). DES crypt reads only the first 8 bytes of a
password, as in Pulsar: the file's DES users are named in a warning at load.
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass

import bcrypt
from passlib.hash import apr_md5_crypt, des_crypt

from pulsar_grpc.broker.config import ConfigError

log = logging.getLogger(__name__)

# bcrypt only reads the first 72 bytes of a password; a longer one is refused rather than
# silently accepted on its prefix.
BCRYPT_MAX_PASSWORD = 72


class HashScheme(enum.Enum):
    """The htpasswd schemes taken; each hash is checked at load, lest a malformed one fail
    only at the first login."""

    # $2y$ (htpasswd's name; the same algorithm as $2b$), $2b$ or $2a$, the cost, 53 characters.
    BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
    # $apr1$, up to 8 characters of salt, 22 of digest.
    APR1_MD5 = re.compile(r"\$apr1\$[./A-Za-z0-9]{1,8}\$[./A-Za-z0-9]{22}")
    # 2 characters of salt, 11 of digest.
    DES_CRYPT = re.compile(r"[./A-Za-z0-9]{13}")

    @classmethod
    def of(cls, hashed: str) -> HashScheme | None:
        return next((s for s in cls if s.value.fullmatch(hashed)), None)


@dataclass(frozen=True, slots=True)
class PasswordHash:
    scheme: HashScheme
    hashed: str

    def verify(self, password: bytes) -> bool:
        """Whether ``password`` matches (slow by design for bcrypt: call it off the loop)."""
        if self.scheme is HashScheme.BCRYPT:
            if len(password) > BCRYPT_MAX_PASSWORD:
                return False
            # $2y$ is $2b$ under htpasswd's name; the bcrypt package knows only the latter.
            hashed = "$2b$" + self.hashed[4:] if self.hashed.startswith("$2y$") else self.hashed
            return bcrypt.checkpw(password, hashed.encode())
        handler = apr_md5_crypt if self.scheme is HashScheme.APR1_MD5 else des_crypt
        return bool(handler.verify(password, self.hashed))

    def decoy(self) -> PasswordHash:
        """A hash of the same scheme and cost, for an unknown user: the answer then takes as
        long as for a known one, so timing does not tell who exists."""
        if self.scheme is HashScheme.BCRYPT:
            cost = int(self.hashed[4:6])
            made = bcrypt.hashpw(b"decoy", bcrypt.gensalt(rounds=cost)).decode()
        elif self.scheme is HashScheme.APR1_MD5:
            made = apr_md5_crypt.hash("decoy")
        else:
            made = des_crypt.hash("decoy")
        return PasswordHash(self.scheme, made)


def parse_htpasswd(text: str) -> dict[str, PasswordHash]:
    """``user:hash`` lines (blank lines and ``#`` comments skipped); every malformed line is
    reported at once, naming its number."""
    users: dict[str, PasswordHash] = {}
    errors: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, hashed = line.partition(":")
        scheme = HashScheme.of(hashed) if sep and user else None
        if scheme is None:
            errors.append(
                f"basicAuthConf: line {number}: expected user:<hash> with a bcrypt ($2y$), "
                "$apr1$ (MD5) or crypt (DES) hash"
            )
            continue
        users[user] = PasswordHash(scheme, hashed)
    if errors:
        raise ConfigError(errors)
    weak = sorted(u for u, h in users.items() if h.scheme is HashScheme.DES_CRYPT)
    if weak:
        log.warning(
            "basicAuthConf: %s have crypt (DES) hashes, which check only the first 8 characters "
            "of a password (as in Pulsar); htpasswd -B makes bcrypt ones",
            ", ".join(weak),
        )
    return users
