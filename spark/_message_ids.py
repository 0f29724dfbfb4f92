"""The message-id form of Spark offsets (``ledger:entry[:batch[:partition]]``): a leaf that
both the options' checks and the offsets' arithmetic use."""

from __future__ import annotations

from pulsar_grpc.client import MessageId


def parse_id(text: str) -> MessageId:
    """An offset value (``ledger:entry[:batch[:partition]]``) -> MessageId, with the partition
    dropped (ranges are per partition). Offsets keep this order of their own, not the SDK's
    text form (Pulsar's ``ledger:entry:partition:batch``): checkpoints written before hold it,
    and read in the SDK's form the offsets of partitioned topics would move."""
    parts = [int(p) for p in text.strip().split(":")]
    if not 2 <= len(parts) <= 4:
        raise ValueError(f"invalid offset {text!r}: expected ledger:entry[:batch[:partition]]")
    batch_index = parts[2] if len(parts) > 2 else -1
    return MessageId(ledger_id=parts[0], entry_id=parts[1], batch_index=batch_index, partition=-1)
