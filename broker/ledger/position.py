"""Positions in a managed ledger: (ledger id, entry id), ordered like Pulsar's PositionImpl."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Entry", "Position"]


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """An entry's address. entry_id -1 means "just before the ledger's first entry", which is
    how an empty mark-delete position is expressed (as in Pulsar)."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Inverse of str(): "12:34" -> Position(12, 34)."""
        ledger, _, entry = text.partition(":")
        return cls(int(ledger), int(entry))


@dataclass(slots=True)
class Entry:
    """A stored entry: the broker's serialized batch at its position."""

    position: Position
    data: bytes
