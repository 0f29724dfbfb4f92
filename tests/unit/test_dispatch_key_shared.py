"""The Key_Shared dispatcher's contract, through fake transports: every message of a key goes
to the same consumer, in order; a consumer that cannot take more holds back its own keys only;
a departing consumer's keys, and what it had not acked, go on to the consumers left.

Which consumer owns which key is the selector's business (tests/unit/test_key_shared_*.py):
these tests only ask that the routing be consistent, so they hold for any hash-range scheme."""

from __future__ import annotations

import enum
from collections import defaultdict

import pytest

from pulsar_grpc.broker.topics.consumer import Consumer
from pulsar_grpc.broker.topics.subscription import SubType
from tests.unit.dispatch_support import DispatchEnv, FakeTransport, dispatch_env
from tests.waiting import eventually

# Enough keys that each of three consumers owns some, whatever the hash (the first to join
# keeps a quarter of the hash space).
KEYS = [f"k{i}" for i in range(32)]


async def publish_rounds(env: DispatchEnv, rounds: range) -> None:
    """Each key once per round; the payload names the round and the key (r0-k3...)."""
    for r in rounds:
        for key in KEYS:
            await env.publish(f"r{r}-{key}".encode(), key=key)


def owners(transports: list[FakeTransport]) -> dict[str, set[str]]:
    """key -> the names of the consumers that received it."""
    found: dict[str, set[str]] = defaultdict(set)
    for transport in transports:
        for key in transport.keys:
            found[key].add(transport.name)
    return found


def total(transports: list[FakeTransport]) -> int:
    return sum(len(t.sent) for t in transports)


async def test_every_message_of_a_key_goes_to_one_consumer_in_order() -> None:
    async with dispatch_env() as env:
        subscribed = await env.subscribe_each(SubType.Key_Shared, {"c1": 100, "c2": 100, "c3": 100})
        transports = [t for _, t in subscribed]
        await publish_rounds(env, range(3))
        await eventually(lambda: total(transports) == 3 * len(KEYS))
        assert all(len(names) == 1 for names in owners(transports).values())
        assert sum(1 for t in transports if t.sent) > 1, "the keys went to one consumer only"
        for transport in transports:
            for key in set(transport.keys):
                rounds = [p for k, p in transport.keyed if k == key]
                assert rounds == [f"r{r}-{key}".encode() for r in range(3)]


class Stall(enum.Enum):
    """Why a consumer cannot take more, and what lets it again."""

    NO_PERMITS = "no permits"
    UNWRITABLE = "unwritable"

    def stall(self, env: DispatchEnv, consumer: Consumer, transport: FakeTransport) -> None:
        if self is Stall.UNWRITABLE:
            transport.fill()
            env.flow(consumer, 100)

    def release(self, env: DispatchEnv, consumer: Consumer, transport: FakeTransport) -> None:
        if self is Stall.UNWRITABLE:
            transport.drain()
        else:
            env.flow(consumer, 100)


@pytest.mark.parametrize("stall", list(Stall), ids=lambda s: s.value)
async def test_a_stalled_consumer_holds_back_only_its_own_keys(stall: Stall) -> None:
    async with dispatch_env() as env:
        subscribed = await env.subscribe_each(SubType.Key_Shared, {"c1": 0, "c2": 100, "c3": 100})
        (stalled, stalled_transport), *others = subscribed
        stall.stall(env, stalled, stalled_transport)
        await publish_rounds(env, range(2))
        await env.settle()
        assert stalled_transport.sent == []
        served = owners([t for _, t in others])
        held_back = set(KEYS) - set(served)
        assert held_back, "the stalled consumer owns no key: the test proves nothing"
        assert total([t for _, t in others]) == 2 * len(served)
        stall.release(env, stalled, stalled_transport)
        await eventually(lambda: len(stalled_transport.sent) == 2 * len(held_back))
        assert set(stalled_transport.keys) == held_back
        assert total([t for _, t in others]) == 2 * len(served)


async def test_a_departing_consumer_hands_its_keys_and_unacked_messages_on() -> None:
    async with dispatch_env() as env:
        subscribed = await env.subscribe_each(SubType.Key_Shared, {"c1": 100, "c2": 100, "c3": 100})
        await publish_rounds(env, range(1))
        await eventually(lambda: total([t for _, t in subscribed]) == len(KEYS))
        leaving, leaving_transport = next((c, t) for c, t in subscribed if t.sent)
        stay = [t for c, t in subscribed if c is not leaving]
        handed_on = set(leaving_transport.keys)
        before = {t.name: len(t.sent) for t in stay}
        await env.subscription.remove_consumer(leaving)
        await publish_rounds(env, range(1, 2))
        # The departed consumer's first round comes again, then every key's second round.
        await eventually(lambda: total(stay) == len(KEYS) + len(handed_on) + sum(before.values()))
        routed = owners([FakeTransport(t.name, t.sent[before[t.name] :]) for t in stay])
        assert set(routed) == set(KEYS)
        assert all(len(names) == 1 for names in routed.values())
        for transport in stay:
            after = transport.keyed[before[transport.name] :]
            for key in handed_on & set(transport.keys):
                assert [p for k, p in after if k == key] == [
                    f"r0-{key}".encode(),
                    f"r1-{key}".encode(),
                ]


async def test_a_joining_consumer_waits_until_what_was_read_before_it_is_acked() -> None:
    async with dispatch_env() as env:
        [(first, first_transport)] = await env.subscribe_each(SubType.Key_Shared, {"c1": 100})
        await publish_rounds(env, range(1))
        await eventually(lambda: len(first_transport.sent) == len(KEYS))
        [(_, joined_transport)] = await env.subscribe_each(SubType.Key_Shared, {"c2": 100})
        await publish_rounds(env, range(1, 2))
        await env.settle()
        # Its keys' earlier messages are unacked at c1: taking their next ones now would let
        # them overtake (Pulsar's recently joined consumers).
        assert joined_transport.sent == []
        moved = set(KEYS) - set(first_transport.keys[len(KEYS) :])
        assert moved, "the joining consumer took no key: the test proves nothing"
        await env.ack(first, *[(p, -1) for p in first_transport.positions[: len(KEYS)]])
        await eventually(lambda: len(joined_transport.sent) == len(moved))
        assert sorted(joined_transport.payloads) == sorted(f"r1-{k}".encode() for k in moved)
