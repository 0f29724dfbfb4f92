"""Protobuf's base-128 varint, for the byte strings the broker builds by hand (stored entries,
acked-index sets, delivery frames) where building a message object per entry would cost the
loop more than the bytes themselves."""


def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer.

    >>> encode_varint(300)
    b'\\xac\\x02'
    """
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
