"""The README's "TLS and client certificates, from scratch" works as written: its openssl
commands make a CA and certificates that a broker configured with its properties block accepts,
and its client, holding alice's certificate, produces and consumes over mutual TLS as alice.

The blocks are taken from the README itself, with /tmp/pulsar-tls moved into the test's own
directory and the documented ports replaced by the ones the test broker got.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from tests.e2e.test_docs_snippets import ROOT, Block, blocks_of, run_block
from tests.e2e.test_tls import tls_url
from tests.support import BrokerThread

DOC_DIR = "/tmp/pulsar-tls"
DOC_TLS_URL = "grpc+ssl://127.0.0.1:6651"


def readme_block(lang: str, contains: str) -> Block:
    found = [b for b in blocks_of(ROOT / "README.md") if b.lang == lang and contains in b.code]
    assert len(found) == 1, f"the README has {len(found)} {lang} blocks with {contains!r}"
    return found[0]


def test_the_readmes_tls_commands_make_a_working_mutual_tls_broker(
    broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    files = tmp_path / "pulsar-tls"

    def moved(block: Block) -> Block:
        return dataclasses.replace(block, code=block.code.replace(DOC_DIR, str(files)))

    openssl = moved(readme_block("bash", f"mkdir -p {DOC_DIR}"))
    properties = moved(readme_block("properties", f"{DOC_DIR}/broker.cert.pem"))
    client = moved(readme_block("python", DOC_TLS_URL))
    settings = {
        key: "0" if key in ("grpcServicePortTls", "webServicePortTls") else value
        for key, value in (
            line.split("=", 1) for line in properties.code.splitlines() if "=" in line
        )
    }
    assert settings["tlsRequireTrustedClientCertOnConnect"] == "true"
    workdir = tmp_path / "work"
    workdir.mkdir()
    # The commands need no broker: a plain one only satisfies run_block.
    run_block(openssl, broker_factory(), workdir, timeout=120)
    assert (files / "alice.cert.pem").exists()
    broker = broker_factory(**settings)
    client = dataclasses.replace(client, code=client.code.replace(DOC_TLS_URL, tls_url(broker)))
    output = run_block(client, broker, workdir, timeout=120)
    assert "received b'over mutual TLS'" in output
