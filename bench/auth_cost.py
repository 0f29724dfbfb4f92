"""What authentication costs: SDK produce and consume throughput on a broker without
authentication, with token authentication, and with SCRAM (after its exchange, a role token),
in one run; and how long a first call takes when it must run the SCRAM exchange.

A credential is checked once per call (a Produce or Consume stream is one call however many
messages it carries), so streaming throughput should not move; what does cost is the exchange:
PBKDF2 over the password on the client and a few HMACs on the broker.

Each mode, in turn and ``--rounds`` times over, gets its own standalone broker (a child
process, as a deployment runs it) with the same load: one SDK producer enqueues
``--messages`` 100-byte messages as fast as it can (batches of up to 100), then one consumer
reads them back. Prints a Markdown table for docs/benchmarks.md.

Usage::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.auth_cost --messages 100000
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.killsoak import Broker
from bench.sdk_load import produce_then_consume
from pulsar_grpc.broker.security.scram import verifier
from pulsar_grpc.broker.security.tokens import create_secret_key, create_token
from pulsar_grpc.client import (
    Authentication,
    AuthenticationSCRAM,
    AuthenticationToken,
    Client,
)

PASSWORD = "bench-password"


async def throughput(url: str, auth: Authentication | None, messages: int) -> tuple[float, float]:
    async with Client(url, authentication=auth) as client:
        return await produce_then_consume(client, "bench-auth", [b"x" * 100] * messages, batch=100)


async def first_call_ms(url: str, make_auth: type[AuthenticationSCRAM], tries: int) -> list[float]:
    """A fresh client's first lookup, which runs the whole exchange, in milliseconds."""
    times = []
    for _ in range(tries):
        async with Client(url, authentication=make_auth("bench", PASSWORD)) as client:
            started = time.perf_counter()
            await client.get_partitions_for_topic("bench-auth")
            times.append((time.perf_counter() - started) * 1000)
    return times


async def main(messages: int, rounds: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-auth-"))
    key = create_secret_key()
    (root / "scram-users").write_text(f"bench:{verifier(PASSWORD)}\n")
    token_flags = [
        "--set", "authenticationEnabled=true", "--set", "authenticationProviders=token",
        "--set", "tokenSecretKey=data:;base64," + base64.b64encode(key).decode(),
    ]  # fmt: skip
    scram_flags = [
        "--set", "authenticationEnabled=true", "--set", "authenticationProviders=scram",
        "--set", f"scramAuthConf={root / 'scram-users'}",
    ]  # fmt: skip
    token = AuthenticationToken(create_token(key, "bench", expires_at=int(time.time()) + 3600))
    modes: list[tuple[str, list[str], Authentication | None]] = [
        ("none", [], None),
        ("token", token_flags, token),
        ("SCRAM (role token)", scram_flags, AuthenticationSCRAM("bench", PASSWORD)),
    ]
    rows = []
    exchange: list[float] = []
    try:
        # Twice round, so that a machine getting busier or quieter does not favour one mode.
        for round_no, (name, flags, auth) in enumerate(modes * rounds):
            data = root / f"{name.split()[0]}-{round_no}"
            data.mkdir()
            broker = Broker(data / "store", data, flags)
            broker.start()
            try:
                rows.append((name, *await throughput(broker.service_url, auth, messages)))
                if name.startswith("SCRAM") and not exchange:
                    exchange = await first_call_ms(broker.service_url, AuthenticationSCRAM, 20)
            finally:
                broker.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{messages} messages of 100 bytes; load average {os.getloadavg()[0]:.2f}")
    print("| authentication | produce msg/s | consume msg/s |")
    print("|---|---|---|")
    for name, produce, consume in rows:
        print(f"| {name} | {produce:,.0f} | {consume:,.0f} |")
    print(
        f"\nSCRAM exchange (a fresh client's first lookup), 20 tries: median "
        f"{statistics.median(exchange):.1f} ms, max {max(exchange):.1f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.messages, args.rounds))
