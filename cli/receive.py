"""`pulsar-grpc consume` and `pulsar-grpc read`: pulsar-client's CmdConsume and CmdRead.

Both print each message as pulsar-client does (``----- got message -----``, then
``key:[...], properties:[...], content:...``) until ``-n`` messages (0: until Ctrl-C or
``--timeout``), at most ``-r`` a second. ``consume`` acknowledges on a subscription; ``read``
opens a reader at ``-m earliest|latest|LEDGER:ENTRY[:PARTITION[:BATCH]]`` and acknowledges nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from pulsar_grpc.cli.client_cmd import Pacer, UsageError, client_of, fail, topic_of
from pulsar_grpc.cli.crypto_args import receiver_decryption
from pulsar_grpc.client import Message, MessageId, PulsarError

# pulsar-client prints a count instead of each message with --hide-content, this often.
HIDDEN_PROGRESS_EVERY = 1000


def run_consume(args: argparse.Namespace) -> int:
    try:
        topic = topic_of(args.topic)
        return asyncio.run(_consume(args, topic, receiver_decryption(args)))
    except Exception as exc:
        return fail("consume", args, exc)


def run_read(args: argparse.Namespace) -> int:
    try:
        topic = topic_of(args.topic)
        try:
            start = MessageId.parse(args.start_message_id)
        except ValueError as exc:
            raise UsageError(f"-m/--start-message-id: {exc}") from None
        return asyncio.run(_read(args, topic, start, receiver_decryption(args)))
    except Exception as exc:
        return fail("read", args, exc)


def _stop_on_signals() -> asyncio.Event:
    """An event SIGINT and SIGTERM set, installed before the subscription exists: a signal
    that comes while it is made (the broker already lists the consumer) must still end the
    command with its summary line, not Python's KeyboardInterrupt."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _consume(args: argparse.Namespace, topic: str, decryption: dict[str, Any]) -> int:
    stop = _stop_on_signals()
    async with client_of(args) as client:
        consumer = await client.subscribe(
            topic,
            args.subscription_name,
            args.subscription_type,
            initial_position=args.subscription_position,
            **decryption,
        )
        try:
            await _print_messages(args, "consume", consumer.receive, consumer.acknowledge, stop)
        finally:
            await consumer.close_if_open()  # sends the grouped acks
    return 0


async def _read(
    args: argparse.Namespace, topic: str, start: MessageId, decryption: dict[str, Any]
) -> int:
    stop = _stop_on_signals()
    async with client_of(args) as client:
        reader = await client.create_reader(
            topic, start, start_message_id_inclusive=args.start_message_id_inclusive, **decryption
        )
        try:
            await _print_messages(args, "read", reader.read_next, None, stop)
        finally:
            await reader.close_if_open()
    return 0


async def _print_messages(
    args: argparse.Namespace,
    command: str,
    receive: Callable[[], Awaitable[Message]],
    acknowledge: Callable[[Message], Awaitable[None]] | None,
    stop: asyncio.Event,
) -> int:
    """Print (and acknowledge) messages until -n, --timeout or ``stop`` (a signal); the
    count."""
    pacer = Pacer(args.rate)
    done = 0
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while args.num_messages == 0 or done < args.num_messages:
            await pacer.wait()
            receiving = asyncio.ensure_future(receive())
            finished, _ = await asyncio.wait(
                {receiving, stopping}, timeout=args.timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if receiving not in finished:
                receiving.cancel()
                with contextlib.suppress(asyncio.CancelledError, PulsarError):
                    await receiving
                note = (
                    "interrupted"
                    if stopping in finished
                    else f"no message within {args.timeout:g} s"
                )
                print(f"pulsar-grpc {command}: {note}; {_summary(command, done)}", file=sys.stderr)
                return done
            message = receiving.result()
            done += 1
            if not args.hide_content:
                print(
                    format_message(message, hex_payload=args.hex, with_id=args.verbose), flush=True
                )
            elif done % HIDDEN_PROGRESS_EVERY == 0:
                print(f"Received {done} messages", flush=True)
            if acknowledge is not None:
                await acknowledge(message)
    finally:
        stopping.cancel()
    print(_summary(command, done), file=sys.stderr)
    return done


def _summary(command: str, count: int) -> str:
    """pulsar-client's closing line."""
    return f"{count} messages successfully {'consumed' if command == 'consume' else 'read'}"


# What consume, read and inspect print as the payload of a null value (a tombstone), told apart
# from an empty payload (which prints as nothing) and from the text "null".
NULL_CONTENT = "<null value>"


def format_message(message: Message, *, hex_payload: bool = False, with_id: bool = False) -> str:
    """pulsar-client's block for one message (``key:[null]`` when it has none, and
    ``content:`` followed by :data:`NULL_CONTENT` for a null value, which no payload prints as,
    not even an empty one); with ``with_id``, a first line with its message id, which
    ``read -m`` takes::

        ----- got message -----
        message id: 1:2:-1:-1
        key:[user-1], properties:[a=1, b=2], content:hello
    """
    properties = ", ".join(f"{k}={v}" for k, v in sorted(message.properties().items()))
    key = message.partition_key() or "null"
    data = message.data()
    if message.has_null_value():
        content = NULL_CONTENT
    elif hex_payload:
        content = "\n" + hex_dump(data)
    else:
        content = data.decode("utf-8", errors="backslashreplace")
    lines = ["----- got message -----"]
    if with_id:
        lines.append(f"message id: {message.message_id()}")
    lines.append(f"key:[{key}], properties:[{properties}], content:{content}")
    return "\n".join(lines)


def hex_dump(data: bytes) -> str:
    """16 bytes a line: offset, hex bytes, printable ASCII.

    >>> hex_dump(b"AB")
    '00000000  41 42                                            |AB|'
    """
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<47}  |{text}|")
    return "\n".join(lines) if lines else "(empty)"
