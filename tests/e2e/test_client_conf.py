"""A client.conf in Pulsar's format (``--conf FILE`` or ``$PULSAR_CLIENT_CONF``) for every
command that connects, against a broker with token authentication: the file gives the URLs
and the token; a flag overrides the file's key; a file that cannot be used is a usage error
(exit 2) naming the file and line; its tlsTrustCertsFilePath is the CA trusted over grpc+ssl and
https."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from pulsar_grpc.broker.security.tokens import create_token
from pulsar_grpc.cli.client_conf import ClientConf, read_client_conf
from tests.e2e.test_cli import cli
from tests.e2e.test_tls import tls_config, tls_url
from tests.e2e.test_token_authentication import KEY, token_broker
from tests.support import BrokerThread
from tests.tls import TlsFiles, tls_files_fixture

__all__ = ["tls_files_fixture", "token_broker"]  # fixtures

# The start of Pulsar's own conf/client.conf, keys this CLI does not use included.
PULSAR_STYLE = """\
# Configuration for pulsar-client and pulsar-admin CLI tools

# URL for Pulsar REST API (for admin operations)
webServiceUrl={web}

# URL for Pulsar Binary Protocol (for produce and consume operations)
brokerServiceUrl={grpc}

# Authentication plugin to authenticate with servers
authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken

# Parameters passed to authentication plugin.
authParams=token:{token}

# Allow TLS connections to servers whose certificate cannot be verified
tlsAllowInsecureConnection=false
tlsEnableHostnameVerification=false
tlsTrustCertsFilePath=
useKeyStoreTls=false
"""


def client_conf(tmp_path: Path, broker: BrokerThread, token: str) -> Path:
    path = tmp_path / f"client-{uuid.uuid4().hex[:6]}.conf"
    path.write_text(PULSAR_STYLE.format(web=broker.http_url, grpc=broker.service_url, token=token))
    return path


def test_pulsars_client_conf_is_read(tmp_path: Path) -> None:
    path = tmp_path / "client.conf"
    path.write_text(PULSAR_STYLE.format(web="http://h:8080/", grpc="grpc://h:50051", token="t"))
    assert read_client_conf(path) == ClientConf(
        web_service_url="http://h:8080/",
        broker_service_url="grpc://h:50051",
        auth_plugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
        auth_params="token:t",
        tls_allow_insecure_connection=False,
    )
    # Java properties' other separators, as Pulsar's tools read the file.
    path.write_text("webServiceUrl: http://h:8080/\nbrokerServiceUrl pulsar://h:6650/\n")
    assert read_client_conf(path) == ClientConf(
        web_service_url="http://h:8080/", broker_service_url="pulsar://h:6650/"
    )
    bad = {
        "noseparator\n": "client.conf:2: expected <key>=<value>",
        "webServiceUrl=h:8080\n": "must be an http:// or https:// URL",
        "tlsAllowInsecureConnection=maybe\n": "must be true or false",
    }
    for text, message in bad.items():
        path.write_text("# a comment\n" + text)  # the bad line is line 2
        with pytest.raises(ValueError, match=re.escape(message)):
            read_client_conf(path)


def test_every_command_connects_with_the_conf_and_flags_override_it(
    token_broker: BrokerThread, tmp_path: Path
) -> None:
    good = create_token(KEY, "conf-user", expires_at=int(time.time()) + 3600)
    conf = str(client_conf(tmp_path, token_broker, good))
    topic = f"conf-{uuid.uuid4().hex[:6]}"

    created = cli("topics", "--conf", conf, "create", topic)
    assert created.returncode == 0, created.stderr
    produced = cli("produce", topic, "-m", "from-conf", "--conf", conf)
    assert produced.returncode == 0, produced.stderr
    consumed = cli("consume", topic, "-s", "sub", "-p", "earliest", "--timeout", "10",
                   "--conf", conf)  # fmt: skip
    assert consumed.returncode == 0 and "from-conf" in consumed.stdout, consumed.stderr
    # $PULSAR_CLIENT_CONF names the file when --conf does not.
    env = {**os.environ, "PULSAR_CLIENT_CONF": conf}
    listed = cli("topics", "list", env=env)
    assert listed.returncode == 0 and topic in listed.stdout, listed.stderr
    leader = cli("admin", "brokers", "leader-broker", env=env)
    assert leader.returncode == 0, leader.stderr

    # A flag overrides its key: a bad token given on the command line is the one sent.
    denied = cli("produce", topic, "-m", "x", "--conf", conf, "--auth-params", "token:bad",
                 "--operation-timeout-ms", "3000")  # fmt: skip
    assert denied.returncode == 1 and "AuthenticationError" in denied.stderr, denied.stderr
    refused = cli("topics", "--auth-params", "token:bad", "list", env=env)
    assert refused.returncode == 1 and "401" in refused.stderr, refused.stderr
    # Without the file, no credentials: refused.
    bare = cli("topics", "--admin-url", token_broker.http_url, "list")
    assert bare.returncode == 1 and "401" in bare.stderr, bare.stderr


def test_a_conf_that_cannot_be_used_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "absent.conf"
    # Each command's connection flags come before its verbs.
    for command, *verbs in (
        ["produce", "t", "-m", "x"],
        ["topics", "list"],
        ["admin", "brokers", "leader-broker"],
    ):
        done = cli(command, "--conf", str(missing), *verbs)
        assert done.returncode == 2, (command, done.stderr)
        assert f"client.conf {missing}: cannot be read" in done.stderr
    # A stock Pulsar client.conf names a pulsar:// broker URL: a command that would connect
    # there is a usage error naming it; one that only needs webServiceUrl goes on.
    stock = tmp_path / "stock.conf"
    stock.write_text(
        "webServiceUrl=http://127.0.0.1:1/\nbrokerServiceUrl=pulsar://localhost:6650/\n"
    )
    env = {**os.environ, "PULSAR_CLIENT_CONF": str(stock)}
    done = cli("consume", "t", "-s", "s", env=env)
    assert done.returncode == 2 and "brokerServiceUrl must be a grpc://" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    listed = cli("topics", "list", env=env)  # reaches for webServiceUrl: nobody there
    assert listed.returncode == 1 and "cannot reach http://127.0.0.1:1/" in listed.stderr, listed


def test_the_conf_trusts_the_brokers_ca_over_grpc_and_https(
    broker_factory: Callable[..., BrokerThread], tls_files: TlsFiles, tmp_path: Path
) -> None:
    broker = broker_factory(**tls_config(tls_files, webServicePortTls="0"))
    assert broker.service is not None
    https_url = broker.service.namespaces.internal_urls().http_url_tls
    assert https_url is not None
    conf = tmp_path / "tls-client.conf"
    conf.write_text(
        f"brokerServiceUrl={tls_url(broker)}\nwebServiceUrl={https_url}\n"
        f"tlsTrustCertsFilePath={tls_files.ca}\n"
    )
    produced = cli("produce", "--conf", str(conf), "tls-conf", "-m", "over-tls")
    assert produced.returncode == 0, produced.stderr
    listed = cli("topics", "--conf", str(conf), "list")
    assert listed.returncode == 0 and "tls-conf" in listed.stdout, listed.stderr
    # The flag overrides the file: another CA is not trusted.
    other = ["--tls-trust-cert-path", str(tls_files.other_ca)]
    refused = cli("topics", "--conf", str(conf), *other, "list")
    assert refused.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr, refused.stderr
    refused = cli("produce", "--conf", str(conf), *other, "tls-conf", "-m", "x",
                  "--operation-timeout-ms", "3000")  # fmt: skip
    assert refused.returncode == 1, refused.stderr


def test_a_web_service_broker_url_in_the_conf_is_used_as_pulsar_client_uses_it(
    broker: BrokerThread, tmp_path: Path
) -> None:
    """brokerServiceUrl=http://...: the commands look topics up over HTTP, send over gRPC."""
    conf = tmp_path / "web.conf"
    conf.write_text(f"brokerServiceUrl={broker.http_url}\nwebServiceUrl={broker.http_url}\n")
    produced = cli("produce", "conf-web", "-m", "over-http", "--conf", str(conf))
    assert produced.returncode == 0, produced.stderr
    consumed = cli("consume", "conf-web", "-s", "sub", "-p", "earliest", "-n", "1",
                   "--timeout", "10", "--conf", str(conf))  # fmt: skip
    assert consumed.returncode == 0 and "over-http" in consumed.stdout, consumed.stderr
