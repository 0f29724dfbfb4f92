"""Typed options of the ``pulsar-grpc`` source and sink, parsed once with clear errors.

Spark hands options over as a case-insensitive ``str -> str`` mapping (keys lowered); the data
source parses them here in its constructor, on the driver, when the query is planned. Every
mistake raises one :class:`OptionError` whose message names the option and the form it
expects (``startingOffsets: expected earliest, latest or ..., got 'bogus'``); an option
nobody reads (a typo such as ``startingOffset``) is refused with a did-you-mean, except the
pass-through prefixes ``pulsar.client.``, ``pulsar.reader.`` and ``pulsar.producer.``, whose
rest must name a keyword parameter of the SDK call they are passed to.

Credentials, as Pulsar's Spark connector names them or short: ``pulsar.client.authPluginClassName``
(or ``authPlugin``) and ``pulsar.client.authParams`` (or ``authParams``), parsed as a client.conf's
authPlugin/authParams are; ``pulsar.client.tlsTrustCertsFilePath`` (or
``tlsTrustCertsFilePath``) for a broker whose certificate a private CA signed. They serve both
the reads and the writes, and the admin calls (``admin.url``) as well.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro

from pulsar_grpc.client import (
    Authentication,
    AuthenticationToken,
    Client,
    authentication_from,
)

from ._encryption import ACTIONS, EncryptionOptions
from ._message_ids import parse_id
from ._passthrough import CLIENT_PARAMETERS, PRODUCER_PARAMETERS, READER_PARAMETERS


class OptionError(ValueError):
    """A bad option of the source or sink; the message names it and the expected form."""


def _bad(name: str, expected: str, raw: object) -> OptionError:
    return OptionError(f"{name}: expected {expected}, got {raw!r}")


OFFSETS_FORM = "earliest, latest or a JSON object of partition -> message id"
ENDING_FORM = "latest or a JSON object of partition -> message id or latest"
SELECTOR_FORM = "exactly one of the options topic, topics, topicsPattern"

#: Every option the source or sink reads (canonical spelling, as docs/spark.md lists them).
OPTIONS = (
    "service.url admin.url listenerName tlsTrustCertsFilePath tlsCertFilePath tlsKeyFilePath "
    "tlsServerName authToken authPlugin authParams operationTimeoutMs topic topics "
    "topicsPattern startingOffsets "
    "endingOffsets startingTime endingTime failOnDataLoss maxMessagesPerTrigger "
    "maxOffsetsPerTrigger maxBytesPerTrigger minOffsetsPerTrigger maxTriggerDelay "
    "entriesPerSplit minPartitions receiverQueueSize pollTimeoutMs latestIdleMs arrowBatchSize "
    "includeProperties includeHeaders valueFormat avroSchema batchingMaxMessages "
    "batchingMaxPublishDelayMs maxPendingMessages sendTimeoutMs encryptionKeys publicKeyFile "
    "privateKeyFile cryptoFailureAction"
).split()
#: Pulsar's Spark connector's names (lowered, as Spark hands them over) -> the option they are.
ALIASES = {
    "pulsar.client.authpluginclassname": "authPlugin",
    "pulsar.client.authparams": "authParams",
    "pulsar.client.tlstrustcertsfilepath": "tlsTrustCertsFilePath",
    "avro.schema": "avroSchema",
}
VALUE_FORMATS = ("typed", "binary")
#: Options Spark itself adds to a source's or sink's map.
SPARK_OWNED = ("path", "checkpointLocation")
PASS_THROUGH = {
    "pulsar.client.": CLIENT_PARAMETERS,
    "pulsar.reader.": READER_PARAMETERS,
    "pulsar.producer.": PRODUCER_PARAMETERS,
}
_CANONICAL = {name.lower(): name for name in (*OPTIONS, *SPARK_OWNED)}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$")
_UNIT_MS = {
    None: 1,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def _suggest(word: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(word.lower(), [c.lower() for c in candidates], n=1)
    if not close:
        return ""
    by_lower = {c.lower(): c for c in candidates}
    return f"; did you mean {by_lower[close[0]]}?"


class _Raw:
    """Spark's option map with lowered keys, read through typed getters."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.values = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        for alias, name in ALIASES.items():
            if alias not in self.values:
                continue
            value = self.values.pop(alias)
            if self.values.setdefault(name.lower(), value) != value:
                raise _bad(alias, f"the same value as {name}, or only one of them", value)

    def text(self, name: str) -> str | None:
        value = self.values.get(name.lower(), "").strip()
        return value or None

    def integer(self, name: str, default: int, minimum: int = 0) -> int:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise _bad(name, f"an integer >= {minimum}", raw) from None
        if value < minimum:
            raise _bad(name, f"an integer >= {minimum}", raw)
        return value

    def boolean(self, name: str, default: bool) -> bool:
        raw = self.text(name)
        if raw is None:
            return default
        if raw.lower() in ("true", "1", "yes"):
            return True
        if raw.lower() in ("false", "0", "no"):
            return False
        raise _bad(name, "true or false", raw)

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        raw = self.text(name)
        if raw is None:
            return default
        if raw.lower() not in choices:
            raise _bad(name, " or ".join(choices), raw)
        return raw.lower()

    def avro_schema(self, name: str) -> str | None:
        """An Avro record definition (JSON text), checked here so a typo fails at planning."""
        raw = self.text(name)
        if raw is None:
            return None
        try:
            definition = json.loads(raw)
            fastavro.parse_schema(definition)
        except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
            raise _bad(name, f"an Avro schema in JSON ({exc})", raw) from None
        if not isinstance(definition, dict) or definition.get("type") != "record":
            raise _bad(name, "an Avro record schema in JSON", raw)
        return raw

    def time_ms(self, name: str) -> int | None:
        """A publish time in ms since the epoch, None when unset."""
        if self.text(name) is None:
            return None
        return self.integer(name, 0)

    def duration_ms(self, name: str, default: int) -> int:
        raw = self.text(name)
        if raw is None:
            return default
        match = _DURATION.match(raw.lower())
        if match is None:
            raise _bad(name, "a duration such as 500ms, 30s, 15m or 1h", raw)
        return int(match.group(1)) * _UNIT_MS[match.group(2)]

    def offsets(self, name: str, allow_earliest: bool) -> str | None:
        """``earliest`` | ``latest`` | a JSON object of partition -> id (checked here)."""
        raw = self.text(name)
        if raw is None:
            return None
        form = OFFSETS_FORM if allow_earliest else ENDING_FORM
        words = ("earliest", "latest") if allow_earliest else ("latest",)
        if raw.lower() in words:
            return raw.lower()
        try:
            given = json.loads(raw)
        except json.JSONDecodeError:
            raise _bad(name, form, raw) from None
        if not isinstance(given, dict) or not given:
            raise _bad(name, form, raw)
        for value in given.values():
            text = str(value).strip().lower()
            if text in words:
                continue
            try:
                parse_id(text)  # the offset form
            except ValueError:
                raise _bad(name, form, raw) from None
        return raw

    def pass_through(self, prefix: str) -> tuple[tuple[str, Any], ...]:
        """``prefix.someName`` options -> (SDK keyword, value converted to its default's type)."""
        parameters = PASS_THROUGH[prefix]
        out = []
        for key, raw in sorted(self.values.items()):
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix) :]
            found = parameters.get(rest.replace("_", ""))
            if found is None:
                names = [prefix + name for name, _ in parameters.values()]
                raise OptionError(
                    f"{key}: not a parameter of the SDK call {prefix}* is passed to; expected "
                    f"one of {', '.join(sorted(names))}{_suggest(key, names)}"
                )
            name, default = found
            out.append((name, _convert(key, raw, default)))
        return tuple(out)

    def check_unknown(self) -> None:
        for key in self.values:
            if key in _CANONICAL or key.startswith(tuple(PASS_THROUGH)):
                continue
            raise OptionError(
                f"{key}: not an option of the pulsar-grpc source/sink (options are listed in "
                f"docs/spark.md; pass-through prefixes: {', '.join(p + '*' for p in PASS_THROUGH)})"
                f"{_suggest(key, list(_CANONICAL.values()))}"
            )


def _convert(name: str, raw: str, default: object) -> object:
    """A pass-through value as the SDK parameter's type (that of its default)."""
    if isinstance(default, bool):
        return _Raw({name: raw}).boolean(name, default)
    if isinstance(default, int):
        return _Raw({name: raw}).integer(name, default, minimum=-(2**63))
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise _bad(name, "a number", raw) from None
    return raw


@dataclass(frozen=True)
class ClientOptions:
    """How to reach the broker: what :class:`client.Client` takes, picklable for executors."""

    service_url: str
    listener_name: str | None = None
    tls_trust_certs_file_path: str | None = None
    tls_cert_file_path: str | None = None
    tls_key_file_path: str | None = None
    tls_server_name: str | None = None
    auth_token: str | None = None
    # Kept as text (picklable); made into an Authentication where a client is made.
    auth_plugin: str | None = None
    auth_params: str | None = None
    operation_timeout_ms: int = 30000
    extra: tuple[tuple[str, Any], ...] = ()  # pulsar.client.* pass-through

    def authentication(self) -> Authentication | None:
        """The credentials the options name (authToken, or authPlugin and authParams)."""
        if self.auth_token:
            return AuthenticationToken(self.auth_token)
        return authentication_from(self.auth_plugin, self.auth_params or "")

    def client(self) -> Client:
        """A new asyncio client; call inside the event loop that will use it."""
        named: dict[str, Any] = {
            "tls_trust_certs_file_path": self.tls_trust_certs_file_path,
            "tls_cert_file_path": self.tls_cert_file_path,
            "tls_key_file_path": self.tls_key_file_path,
            "tls_server_name": self.tls_server_name,
            "authentication": self.authentication(),
            "operation_timeout_ms": self.operation_timeout_ms,
        }
        named.update(self.extra)
        return Client(self.service_url, listener_name=self.listener_name, **named)


def _check_credentials(client: ClientOptions) -> None:
    """Refuse at planning what would fail on every executor."""
    if client.auth_token and (client.auth_plugin or client.auth_params):
        raise _bad("authToken", "either authToken or authPlugin/authParams, not both", "both")
    try:
        client.authentication()
    except ValueError as exc:
        raise OptionError(str(exc)) from None


def _encryption(raw: _Raw) -> EncryptionOptions:
    """The sink's key names and public key go together; the source's private key and failure
    action stand alone (no key: every encrypted message meets the action)."""
    keys, public = raw.text("encryptionKeys"), raw.text("publicKeyFile")
    names = tuple(k.strip() for k in (keys or "").split(",") if k.strip())
    if bool(names) != bool(public):
        raise _bad("encryptionKeys", "both encryptionKeys and publicKeyFile, or neither", keys)
    return EncryptionOptions(
        keys=names,
        public_key_file=public,
        private_key_file=raw.text("privateKeyFile"),
        failure_action=raw.choice("cryptoFailureAction", ACTIONS, "fail"),
    )


@dataclass(frozen=True)
class SourceOptions:
    """Every option of the source and the sink (see docs/spark.md for the table)."""

    client: ClientOptions
    admin_url: str | None = None
    topic: str | None = None
    topics: tuple[str, ...] = ()
    topics_pattern: str | None = None
    starting_offsets: str | None = None
    ending_offsets: str = "latest"
    starting_time_ms: int | None = None
    ending_time_ms: int | None = None
    fail_on_data_loss: bool = True
    max_messages_per_trigger: int = 0
    max_bytes_per_trigger: int = 0
    min_messages_per_trigger: int = 0
    max_trigger_delay_ms: int = 15 * 60_000
    entries_per_split: int = 2000
    min_partitions: int = 0
    receiver_queue_size: int = 5000
    poll_timeout_ms: int = 30000
    latest_idle_ms: int = 300
    arrow_batch_size: int = 10000
    include_properties: bool = True
    value_format: str = "typed"  # typed: the topic's schema decides the value column
    avro_schema: str | None = None  # the sink's Avro record definition (JSON text)
    batching_max_messages: int = 1000
    batching_max_publish_delay_ms: int = 10
    max_pending_messages: int = 10000
    send_timeout_ms: int = 30000
    encryption: EncryptionOptions = field(default_factory=EncryptionOptions)
    reader_extra: tuple[tuple[str, Any], ...] = ()  # pulsar.reader.* pass-through
    producer_extra: tuple[tuple[str, Any], ...] = ()  # pulsar.producer.* pass-through

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's option map; raise :class:`OptionError` naming the bad option."""
        raw = _Raw(options)
        raw.check_unknown()
        service_url = raw.text("service.url")
        if not service_url or not re.match(r"^grpc(\+ssl)?://[^/]+:\d+/?$", service_url):
            raise _bad("service.url", "grpc://host:port or grpc+ssl://host:port", service_url)
        client = ClientOptions(
            service_url=service_url,
            listener_name=raw.text("listenerName"),
            tls_trust_certs_file_path=raw.text("tlsTrustCertsFilePath"),
            tls_cert_file_path=raw.text("tlsCertFilePath"),
            tls_key_file_path=raw.text("tlsKeyFilePath"),
            tls_server_name=raw.text("tlsServerName"),
            auth_token=raw.text("authToken"),
            auth_plugin=raw.text("authPlugin"),
            auth_params=raw.text("authParams"),
            operation_timeout_ms=raw.integer("operationTimeoutMs", 30000, minimum=1),
            extra=raw.pass_through("pulsar.client."),
        )
        _check_credentials(client)
        admin_url = raw.text("admin.url")
        if admin_url is not None and not re.match(r"^https?://", admin_url):
            raise _bad("admin.url", "http://host:port or https://host:port", admin_url)
        starting_offsets = raw.offsets("startingOffsets", allow_earliest=True)
        starting_time = raw.time_ms("startingTime")
        if starting_time is not None and starting_offsets is not None:
            raise _bad("startingTime", "either startingOffsets or startingTime, not both", "both")
        ending_time = raw.time_ms("endingTime")
        ending_offsets = raw.offsets("endingOffsets", allow_earliest=False)
        if ending_time is not None and ending_offsets is not None:
            raise _bad("endingTime", "either endingOffsets or endingTime, not both", "both")
        if starting_time is not None and ending_time is not None and ending_time < starting_time:
            raise _bad("endingTime", f"a time >= startingTime={starting_time}", str(ending_time))
        max_messages = raw.integer("maxMessagesPerTrigger", 0, minimum=1)
        return cls(
            client=client,
            admin_url=admin_url.rstrip("/") if admin_url else None,
            topic=raw.text("topic"),
            topics=tuple(t.strip() for t in (raw.text("topics") or "").split(",") if t.strip()),
            topics_pattern=raw.text("topicsPattern"),
            starting_offsets=starting_offsets,
            ending_offsets=ending_offsets or "latest",
            starting_time_ms=starting_time,
            ending_time_ms=ending_time,
            fail_on_data_loss=raw.boolean("failOnDataLoss", True),
            max_messages_per_trigger=max_messages or raw.integer("maxOffsetsPerTrigger", 0, 1),
            max_bytes_per_trigger=raw.integer("maxBytesPerTrigger", 0, minimum=1),
            min_messages_per_trigger=raw.integer("minOffsetsPerTrigger", 0, minimum=1),
            max_trigger_delay_ms=raw.duration_ms("maxTriggerDelay", 15 * 60_000),
            entries_per_split=raw.integer("entriesPerSplit", 2000, minimum=1),
            min_partitions=raw.integer("minPartitions", 0, minimum=1),
            receiver_queue_size=raw.integer("receiverQueueSize", 5000, minimum=1),
            poll_timeout_ms=raw.integer("pollTimeoutMs", 30000, minimum=1),
            latest_idle_ms=raw.integer("latestIdleMs", 300, minimum=1),
            arrow_batch_size=raw.integer("arrowBatchSize", 10000, minimum=1),
            include_properties=raw.boolean(
                "includeProperties", raw.boolean("includeHeaders", True)
            ),
            value_format=raw.choice("valueFormat", VALUE_FORMATS, "typed"),
            avro_schema=raw.avro_schema("avroSchema"),
            batching_max_messages=raw.integer("batchingMaxMessages", 1000, minimum=1),
            batching_max_publish_delay_ms=raw.integer("batchingMaxPublishDelayMs", 10),
            max_pending_messages=raw.integer("maxPendingMessages", 10000, minimum=1),
            send_timeout_ms=raw.integer("sendTimeoutMs", 30000),
            encryption=_encryption(raw),
            reader_extra=raw.pass_through("pulsar.reader."),
            producer_extra=raw.pass_through("pulsar.producer."),
        )

    def read_selector(self) -> tuple[str, str | tuple[str, ...]]:
        """Exactly one of topic / topics / topicsPattern, as (kind, value)."""
        given: list[tuple[str, str | tuple[str, ...]]] = [
            (k, v)
            for k, v in (
                ("topic", self.topic),
                ("topics", self.topics),
                ("topicsPattern", self.topics_pattern),
            )
            if v
        ]
        if len(given) != 1:
            names = ", ".join(k for k, _ in given) or "none"
            raise _bad("topic", SELECTOR_FORM, names)
        if given[0][0] == "topicsPattern":
            pattern = str(given[0][1])
            try:
                re.compile(pattern)
            except re.error as exc:
                raise _bad("topicsPattern", f"a regular expression ({exc})", pattern) from None
            if not self.admin_url:
                raise _bad(
                    "admin.url", "the broker's http://host:port (topicsPattern needs it)", None
                )
        return given[0]
