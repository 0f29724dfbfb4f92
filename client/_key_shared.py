"""pulsar-client's Key_Shared policy: ``KeySharedMode`` and ``ConsumerKeySharedPolicy``.

The policy travels as the Consume call's ``x-pulsar-key-shared-*`` parameters, and only on a
Key_Shared subscription (pulsar-client ignores it on the others). Validation is
pulsar-client's, with its messages: the C++ ``KeySharedPolicy`` checks bounds and overlaps
when the ranges are set, and leaves a range whose start exceeds its end to the broker, which
refuses it with ConsumerAssignError.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum

from ._headers import Header
from ._stream import Params

__all__ = ["ConsumerKeySharedPolicy", "KeySharedMode", "key_shared_params"]

_MAX_HASH = 65535


class KeySharedMode(IntEnum):
    """pulsar-client's ``KeySharedMode``: AutoSplit (the broker splits the key hashes among
    the consumers) or Sticky (each consumer declares the ranges it takes)."""

    AutoSplit = 0
    Sticky = 1


class ConsumerKeySharedPolicy:
    """How a Key_Shared subscription assigns keys (pulsar-client's ``ConsumerKeySharedPolicy``).

    >>> ConsumerKeySharedPolicy(KeySharedMode.Sticky, sticky_ranges=[(0, 32767)]).sticky_ranges
    [(0, 32767)]
    """

    def __init__(
        self,
        key_shared_mode: KeySharedMode = KeySharedMode.AutoSplit,
        allow_out_of_order_delivery: bool = False,
        sticky_ranges: list[tuple[int, int]] | None = None,
    ) -> None:
        if not isinstance(key_shared_mode, KeySharedMode):
            raise TypeError(f"key_shared_mode: {key_shared_mode!r} is not a KeySharedMode")
        if not isinstance(allow_out_of_order_delivery, bool | int):
            raise TypeError(f"allow_out_of_order_delivery: {allow_out_of_order_delivery!r}")
        if key_shared_mode is KeySharedMode.Sticky and sticky_ranges is None:
            raise ValueError(
                "When using key_shared_mode = KeySharedMode.Sticky you must also provide "
                "sticky_ranges"
            )
        self._mode = key_shared_mode
        self._allow_out_of_order_delivery = bool(allow_out_of_order_delivery)
        self._ranges = _checked(sticky_ranges) if sticky_ranges is not None else []

    @property
    def key_shared_mode(self) -> KeySharedMode:
        return self._mode

    @property
    def allow_out_of_order_delivery(self) -> bool:
        return self._allow_out_of_order_delivery

    @property
    def sticky_ranges(self) -> list[tuple[int, int]]:
        return list(self._ranges)

    def __repr__(self) -> str:
        return (
            f"ConsumerKeySharedPolicy({self._mode!s}, allow_out_of_order_delivery="
            f"{self._allow_out_of_order_delivery}, sticky_ranges={self._ranges})"
        )


def _checked(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """pulsar-client's checks of ``set_sticky_ranges``, in its order and words."""
    pairs = []
    for pair in ranges:
        if (
            not isinstance(pair, tuple | list)
            or len(pair) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) for b in pair)
        ):
            raise TypeError(f"sticky_ranges: {pair!r} is not a (start, end) pair of ints")
        pairs.append((pair[0], pair[1]))
    if not pairs:
        raise ValueError("Ranges for KeyShared policy must not be empty.")
    if not all(0 <= b <= _MAX_HASH for pair in pairs for b in pair):
        raise ValueError("KeySharedPolicy Exception: Ranges must be [0, 65535].")
    for i, (start, end) in enumerate(pairs):
        for other_start, other_end in pairs[i + 1 :]:
            if max(start, other_start) <= min(end, other_end):
                raise ValueError("Ranges for KeyShared policy with overlap.")
    return pairs


def key_shared_params(policy: ConsumerKeySharedPolicy | None) -> Params:
    """The Consume call's parameters for ``policy`` on a Key_Shared subscription."""
    if policy is None:
        return {}
    if not isinstance(policy, ConsumerKeySharedPolicy):
        raise TypeError(f"key_shared_policy: {policy!r} is not a ConsumerKeySharedPolicy")
    params: Params = {
        Header.KEY_SHARED_MODE: policy.key_shared_mode.name,
        Header.KEY_SHARED_ALLOW_OUT_OF_ORDER: policy.allow_out_of_order_delivery,
    }
    if policy.key_shared_mode is KeySharedMode.Sticky:
        params[Header.KEY_SHARED_RANGES] = ",".join(f"{s}-{e}" for s, e in policy.sticky_ranges)
    return params
