"""ledgerStorageUrl: which LedgerStore holds the entries.

Empty means the embedded SQLite store in the data directory (standalone); a
``postgresql://user[:password]@host[:port]/database`` URL (libpq's form, as asyncpg reads it)
means PostgreSQL shared by the brokers of a cluster. Parsed without connecting, so a bad URL is
a configuration error at start-up, reported with the other ones.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["LedgerStorageKind", "LedgerStorageUrl", "parse_ledger_storage_url"]

_POSTGRES_SCHEMES = ("postgresql", "postgres")


class LedgerStorageKind(enum.Enum):
    EMBEDDED = "embedded"  # SQLite in <dataDirectory>/ledgers.db
    POSTGRESQL = "postgresql"


@dataclass(frozen=True)
class LedgerStorageUrl:
    kind: LedgerStorageKind
    dsn: str = ""
    # host:port/database, never the password: what messages and logs name.
    where: str = ""


def parse_ledger_storage_url(url: str) -> LedgerStorageUrl:
    """The storage a ledgerStorageUrl names; ValueError saying what is wrong otherwise."""
    url = url.strip()
    if not url:
        return LedgerStorageUrl(LedgerStorageKind.EMBEDDED)
    parts = urlsplit(url)
    if parts.scheme not in _POSTGRES_SCHEMES:
        raise ValueError(
            f"{_redact(url)!r} is not a postgresql://user@host:port/database URL "
            "(leave it empty for the embedded store)"
        )
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{_redact(url)!r} has an invalid port") from None
    if not parts.hostname:
        raise ValueError(f"{_redact(url)!r} names no host")
    database = parts.path.lstrip("/")
    if not database or "/" in database:
        raise ValueError(f"{_redact(url)!r} names no database (postgresql://user@host/database)")
    where = f"{parts.hostname}:{port or 5432}/{database}"
    return LedgerStorageUrl(LedgerStorageKind.POSTGRESQL, url, where)


def _redact(url: str) -> str:
    """The URL with any password replaced, so that it can be shown in an error."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()
