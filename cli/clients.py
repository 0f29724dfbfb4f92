"""`pulsar-grpc produce`, `consume` and `read`: pulsar-client's three commands, over gRPC,
with its flags (CmdProduce, CmdConsume, CmdRead).

Exit codes: 0 done, 1 the broker refused or could not be reached, 2 bad usage (argparse's own
message, a bad topic name, a bad service URL or property). Errors are one line on stderr.

    pulsar-grpc produce my-topic -m "hello,world" -n 10 -r 100 -k user-1 -p source=cli,n=1
    pulsar-grpc consume my-topic -s my-sub -t Shared -p Earliest -n 20 --timeout 5
    pulsar-grpc read my-topic -m earliest -n 0 --timeout 5
    pulsar-grpc produce my-topic -m secret -ekn app-key -ekv file:///keys/public.pem
    pulsar-grpc consume my-topic -s my-sub -ekv file:///keys/private.pem

The encryption flags are pulsar-client's (cli/crypto_args.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pulsar_grpc.cli import crypto_args
from pulsar_grpc.cli.client_cmd import (
    Pacer,
    UsageError,
    add_client_args,
    choice_of,
    client_of,
    fail,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    split_pairs,
    topic_of,
)
from pulsar_grpc.cli.receive import HIDDEN_PROGRESS_EVERY, run_consume, run_read
from pulsar_grpc.client import ConsumerType, InitialPosition, MessageId, PulsarError

TOPIC_HELP = "topic name, e.g. my-topic or persistent://t/ns/topic"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    produce = sub.add_parser(
        "produce",
        description="Send each -m message (and each -f file's content) COUNT times.",
    )
    produce.add_argument("topic", help=TOPIC_HELP)
    produce.add_argument(
        "-m", "--messages", action="append", default=[], metavar="MESSAGES",
        help="messages to send (UTF-8 text), split on the separator: -m a,b sends two "
        "(repeatable)",
    )  # fmt: skip
    produce.add_argument(
        "-s", "--separator", default=",", metavar="SEP",
        help="what -m values are split on (default ','; a separator absent from the text "
        "sends it whole)",
    )  # fmt: skip
    produce.add_argument(
        "-f", "--files", action="append", default=[], type=Path, metavar="FILE",
        help="a file whose bytes are one message (repeatable)",
    )  # fmt: skip
    produce.add_argument(
        "-n", "--num-produce", type=positive_int, default=1, metavar="COUNT",
        help="send every message COUNT times (default 1)",
    )  # fmt: skip
    produce.add_argument(
        "-r", "--rate", type=non_negative_float, default=0, metavar="MSG_PER_S",
        help="messages a second; 0 sends as fast as possible (default 0)",
    )  # fmt: skip
    produce.add_argument("-k", "--key", help="partition key of every message")
    produce.add_argument(
        "-p", "--properties", action="append", default=[], metavar="K=V[,K=V...]",
        help="message properties, comma separated: -p k1=v1,k2=v2 (repeatable). -p is "
        "pulsar-client's: properties for produce, the subscription position for consume",
    )  # fmt: skip
    produce.add_argument(
        "-v", "--verbose", action="store_true", help="print the id of every message"
    )
    crypto_args.add_produce_args(produce)
    add_client_args(produce)
    produce.set_defaults(run=run_produce)

    consume = sub.add_parser(
        "consume",
        description="Receive, print and acknowledge messages until COUNT are consumed, "
        "--timeout passes without a message, or Ctrl-C.",
    )
    consume.add_argument("topic", help=TOPIC_HELP)
    consume.add_argument(
        "-s", "--subscription-name", required=True, metavar="SUBSCRIPTION",
        help="the subscription to consume on (created if new)",
    )  # fmt: skip
    consume.add_argument(
        "-t", "--subscription-type", default=ConsumerType.Exclusive.value,
        type=choice_of(ConsumerType), metavar="TYPE",
        help="Exclusive, Shared, Failover or Key_Shared, any case (default Exclusive)",
    )  # fmt: skip
    consume.add_argument(
        "-p", "--subscription-position", default=InitialPosition.Latest.value,
        type=choice_of(InitialPosition), metavar="POSITION",
        help="where a new subscription starts: Latest or Earliest, any case (default "
        "Latest). -p is pulsar-client's: the position here, the properties for produce",
    )  # fmt: skip
    _receive_args(consume, "consumed")
    consume.set_defaults(run=run_consume)

    read = sub.add_parser(
        "read",
        description="Read and print messages from -m on until COUNT are read, --timeout "
        "passes without a message, or Ctrl-C.",
    )
    read.add_argument("topic", help=TOPIC_HELP)
    read.add_argument(
        "-m", "--start-message-id", default="latest", metavar="ID",
        help="where to start: latest (default), earliest or LEDGER:ENTRY[:PARTITION[:BATCH]]",
    )  # fmt: skip
    read.add_argument(
        "-i", "--start-message-id-inclusive", action="store_true",
        help="read the -m message too, not only those after it",
    )  # fmt: skip
    _receive_args(read, "read")
    read.set_defaults(run=run_read)


def _receive_args(parser: argparse.ArgumentParser, done: str) -> None:
    """The flags consume and read share."""
    parser.add_argument(
        "-n", "--num-messages", type=non_negative_int, default=1, metavar="COUNT",
        help=f"stop after COUNT messages {done}; 0 goes on until Ctrl-C or --timeout (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "-r", "--rate", type=non_negative_float, default=0, metavar="MSG_PER_S",
        help="messages a second at most; 0 is as fast as they come (default 0)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=positive_float, metavar="SECONDS",
        help="stop when no message arrives for SECONDS (default: wait forever)",
    )  # fmt: skip
    parser.add_argument("--hex", action="store_true", help="print payloads as a hex dump")
    parser.add_argument(
        "--hide-content", action="store_true",
        help=f"print no messages, only a count every {HIDDEN_PROGRESS_EVERY} (for load checks)",
    )  # fmt: skip
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print each message's id above it"
    )
    crypto_args.add_receive_args(parser)
    add_client_args(parser)


def _payloads(messages: Sequence[str], separator: str, files: Sequence[Path]) -> list[bytes]:
    if not separator:
        raise UsageError("-s/--separator must not be empty")
    payloads = [part.encode() for m in messages for part in m.split(separator)]
    for path in files:
        try:
            payloads.append(path.read_bytes())
        except OSError as exc:
            raise UsageError(f"-f {path}: {exc.strerror or exc}") from None
    if not payloads:
        raise UsageError("nothing to send: give at least one -m MESSAGE or -f FILE")
    return payloads


def run_produce(args: argparse.Namespace) -> int:
    try:
        topic = topic_of(args.topic)
        properties = split_pairs(args.properties, "-p")
        payloads = _payloads(args.messages, args.separator, args.files)
        encryption = crypto_args.producer_encryption(args)
        count = asyncio.run(_produce(args, topic, payloads, properties, encryption))
    except KeyboardInterrupt:
        print("pulsar-grpc produce: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        return fail("produce", args, exc)
    print(f"{count} messages successfully produced")
    return 0


async def _produce(
    args: argparse.Namespace,
    topic: str,
    payloads: list[bytes],
    properties: dict[str, str],
    encryption: dict[str, Any],
) -> int:
    pacer = Pacer(args.rate)
    async with client_of(args) as client:
        producer = await client.create_producer(topic, block_if_queue_full=True, **encryption)
        try:
            futures: list[asyncio.Future[MessageId]] = []
            for _ in range(args.num_produce):
                for payload in payloads:
                    await pacer.wait()
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
