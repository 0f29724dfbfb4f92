"""`pulsar-grpc produce` and `pulsar-grpc consume`: pulsar-client's two commands, over gRPC.

Exit codes: 0 done, 1 the broker refused or could not be reached, 2 bad usage (argparse's own
message, a bad topic name, a bad service URL or property). Errors are one line on stderr.

    pulsar-grpc produce my-topic -m hello -m world -n 10 -k user-1 -p source=cli
    pulsar-grpc consume my-topic -s my-sub -n 20 -p earliest --timeout 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from pulsar_grpc.broker.errors import InvalidTopicNameError
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.cli.auth import authentication_of
from pulsar_grpc.cli.client_conf import UrlFlag, add_connection_args
from pulsar_grpc.client import (
    Client,
    ConnectError,
    Consumer,
    InvalidTopicName,
    Message,
    MessageId,
    PulsarError,
)

SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


class UsageError(Exception):
    """Bad input found after argparse: reported on one line, exit code 2."""


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    produce = sub.add_parser(
        "produce",
        help="send messages to a topic",
        description="Send each -m message (and each -f file's content) COUNT times.",
    )
    produce.add_argument("topic", help="topic name, e.g. my-topic or persistent://t/ns/topic")
    produce.add_argument(
        "-m", "--messages", action="append", default=[], metavar="MESSAGE",
        help="a message payload (UTF-8 text; repeatable)",
    )  # fmt: skip
    produce.add_argument(
        "-f", "--files", action="append", default=[], type=Path, metavar="FILE",
        help="a file whose bytes are one message (repeatable)",
    )  # fmt: skip
    produce.add_argument(
        "-n", "--num-produce", type=_positive_int, default=1, metavar="COUNT",
        help="send every message COUNT times (default 1)",
    )  # fmt: skip
    produce.add_argument("-k", "--key", help="partition key of every message")
    produce.add_argument(
        "-p", "--properties", action="append", default=[], metavar="KEY=VALUE",
        help="a message property (repeatable)",
    )  # fmt: skip
    produce.add_argument(
        "-v", "--verbose", action="store_true", help="print the id of every message"
    )
    _connection_args(produce)
    produce.set_defaults(run=run_produce)

    consume = sub.add_parser(
        "consume",
        help="print and acknowledge messages of a subscription",
        description="Receive, print and acknowledge messages until COUNT are consumed, "
        "--timeout passes without a message, or Ctrl-C.",
    )
    consume.add_argument("topic", help="topic name, e.g. my-topic or persistent://t/ns/topic")
    consume.add_argument("-s", "--subscription-name", required=True, metavar="SUBSCRIPTION")
    consume.add_argument(
        "-t", "--subscription-type", default="Exclusive", choices=SUBSCRIPTION_TYPES,
        help="subscription type (default Exclusive)",
    )  # fmt: skip
    consume.add_argument(
        "-n", "--num-messages", type=_non_negative_int, default=1, metavar="COUNT",
        help="stop after COUNT messages; 0 consumes until Ctrl-C or --timeout (default 1)",
    )  # fmt: skip
    consume.add_argument(
        "-p", "--subscription-position", default="latest", choices=("earliest", "latest"),
        help="where a new subscription starts (default latest)",
    )  # fmt: skip
    consume.add_argument(
        "--timeout", type=_positive_float, metavar="SECONDS",
        help="stop when no message arrives for SECONDS (default: wait forever)",
    )  # fmt: skip
    consume.add_argument("--hex", action="store_true", help="print payloads as a hex dump")
    _connection_args(consume)
    consume.set_defaults(run=run_consume)


def _connection_args(parser: argparse.ArgumentParser) -> None:
    add_connection_args(parser, [UrlFlag.SERVICE])
    parser.add_argument("--listener-name", help="advertised listener to look topics up through")
    parser.add_argument(
        "--operation-timeout-ms", type=_positive_int, default=30000, metavar="MS",
        help="how long to keep trying to reach a broker that is down or restarting before "
        "giving up (Pulsar's operationTimeoutMs; default 30000)",
    )  # fmt: skip


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


def _topic(name: str) -> str:
    try:
        return TopicName.get(name).full_name
    except InvalidTopicNameError as exc:
        raise UsageError(str(exc)) from None


def _properties(pairs: Sequence[str]) -> dict[str, str]:
    properties: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"-p {pair!r}: expected KEY=VALUE")
        properties[key] = value
    return properties


def _payloads(messages: Sequence[str], files: Sequence[Path]) -> list[bytes]:
    payloads = [m.encode() for m in messages]
    for path in files:
        try:
            payloads.append(path.read_bytes())
        except OSError as exc:
            raise UsageError(f"-f {path}: {exc.strerror or exc}") from None
    if not payloads:
        raise UsageError("nothing to send: give at least one -m MESSAGE or -f FILE")
    return payloads


def _fail(command: str, args: argparse.Namespace, exc: BaseException) -> int:
    """One line on stderr and the exit code; anything unexpected keeps its traceback."""
    if isinstance(exc, UsageError | InvalidTopicName | ValueError):  # ValueError: --service-url
        code, text = 2, str(exc)
    elif isinstance(exc, ConnectError):
        code, text = 1, f"cannot reach the broker at {args.service_url}: {exc}"
    elif isinstance(exc, PulsarError):
        code, text = 1, f"{type(exc).__name__}: {exc}"
    else:
        raise exc
    print(f"pulsar-grpc {command}: {' '.join(text.split())}", file=sys.stderr)
    return code


def _client(args: argparse.Namespace) -> Client:
    """The client the connection flags (and client.conf) describe."""
    if args.tls_allow_insecure:
        raise UsageError(
            "tlsAllowInsecureConnection: not offered over gRPC; trust the broker's CA with "
            "--tls-trust-cert-path (client.conf's tlsTrustCertsFilePath)"
        )
    return Client(
        args.service_url,
        args.listener_name,
        operation_timeout_ms=args.operation_timeout_ms,
        authentication=authentication_of(args),
        tls_trust_certs_file_path=args.tls_trust_cert_path,
    )


# ------------------------------------------------------------------------------- produce


def run_produce(args: argparse.Namespace) -> int:
    try:
        topic = _topic(args.topic)
        properties = _properties(args.properties)
        payloads = _payloads(args.messages, args.files)
        count = asyncio.run(_produce(args, topic, payloads, properties))
    except KeyboardInterrupt:
        print("pulsar-grpc produce: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        return _fail("produce", args, exc)
    print(f"{count} messages produced")
    return 0


async def _produce(
    args: argparse.Namespace, topic: str, payloads: list[bytes], properties: dict[str, str]
) -> int:
    async with _client(args) as client:
        producer = await client.create_producer(topic, block_if_queue_full=True)
        try:
            futures: list[asyncio.Future[MessageId]] = []
            for _ in range(args.num_produce):
                for payload in payloads:
                    futures.append(
                        await producer.enqueue(payload, properties, partition_key=args.key)
                    )
            await producer.flush()
            ids = await asyncio.gather(*futures)
        finally:
            with contextlib.suppress(PulsarError):
                await producer.close()
    if args.verbose:
        for message_id in ids:
            print(message_id)
    return len(ids)


# ------------------------------------------------------------------------------- consume


def run_consume(args: argparse.Namespace) -> int:
    try:
        topic = _topic(args.topic)
        return asyncio.run(_consume(args, topic))
    except Exception as exc:
        return _fail("consume", args, exc)


async def _consume(args: argparse.Namespace, topic: str) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with _client(args) as client:
        consumer = await client.subscribe(
            topic,
            args.subscription_name,
            args.subscription_type,
            initial_position=args.subscription_position,
        )
        try:
            await _consume_loop(args, consumer, stop)
        finally:
            await consumer.close()  # sends the grouped acks
    return 0


async def _consume_loop(args: argparse.Namespace, consumer: Consumer, stop: asyncio.Event) -> int:
    consumed = 0
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while args.num_messages == 0 or consumed < args.num_messages:
            receiving = asyncio.ensure_future(consumer.receive())
            done, _ = await asyncio.wait(
                {receiving, stopping}, timeout=args.timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if receiving not in done:
                receiving.cancel()
                with contextlib.suppress(asyncio.CancelledError, PulsarError):
                    await receiving
                if stopping in done:
                    note = "interrupted"
                else:
                    note = f"no message within {args.timeout:g} s"
                print(
                    f"pulsar-grpc consume: {note}; {consumed} messages consumed",
                    file=sys.stderr,
                )
                return consumed
            message = receiving.result()
            print(format_message(message, hex_payload=args.hex), flush=True)
            await consumer.acknowledge(message)
            consumed += 1
    finally:
        stopping.cancel()
    print(f"{consumed} messages consumed", file=sys.stderr)
    return consumed


def format_message(message: Message, *, hex_payload: bool = False) -> str:
    """pulsar-client's block for one message.

    >>> print(format_message(Message(b"hi", MessageId(1, 2, 0), topic_name="t")))
    ----- got message -----
    message id: 1:2:0:-1, key: [], properties: []
    content: hi
    """
    properties = ", ".join(f"{k}={v}" for k, v in sorted(message.properties().items()))
    header = (
        f"message id: {message.message_id()}, key: [{message.partition_key()}], "
        f"properties: [{properties}]"
    )
    data = message.data()
    if hex_payload:
        content = "content:\n" + hex_dump(data)
    else:
        content = "content: " + data.decode("utf-8", errors="backslashreplace")
    return f"----- got message -----\n{header}\n{content}"


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
