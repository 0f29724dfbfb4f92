"""Listeners and bind addresses (PIP-95) and the lookup listener (PIP-338), protocol-neutral.

Clients reach a broker through different networks (inside the cluster, through an ingress
gateway, over the internet with TLS); a lookup must answer with the addresses that work from
where the client is. A *listener* is a named route to the broker: the URLs advertised for it.
A *bind address* is a server socket; one from ``bindAddresses`` is tied to a listener, so a
lookup arriving through it answers that listener's URLs unless the request names another.

The gRPC handler and the web service read a :class:`ListenerConfig` and call
:func:`choose_listener`; they never parse these properties themselves. Validation (the
:data:`LISTENER_RULES`, registered in ``broker.config.RULES``) and :class:`ListenerConfig` share
one parser, so what validates is exactly what is served.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pulsar_grpc.broker.errors import InvalidArgumentError

if TYPE_CHECKING:
    from pulsar_grpc.broker.service_configuration import ServiceConfiguration

GRPC = "grpc"
GRPC_TLS = "grpc+ssl"
HTTP = "http"
HTTPS = "https"
SCHEMES = (GRPC, GRPC_TLS, HTTP, HTTPS)
TLS_SCHEMES = frozenset({GRPC_TLS, HTTPS})
GRPC_SCHEMES = frozenset({GRPC, GRPC_TLS})
WEB_SCHEMES = frozenset({HTTP, HTTPS})

# The listener made from advertisedAddress and the primary ports when advertisedListeners is
# empty, unless internalListenerName names it otherwise (Pulsar's default name).
IMPLICIT_INTERNAL_LISTENER = "internal"

# The property holding each primary port, by the scheme it serves.
PRIMARY_PORT_PROPERTIES = {
    GRPC: "grpcServicePort",
    GRPC_TLS: "grpcServicePortTls",
    HTTP: "webServicePort",
    HTTPS: "webServicePortTls",
}

# Pulsar's MultipleListenerValidator rule: names travel unescaped in a listenerName query
# parameter and in x-pulsar-listenername headers. ASCII only (Python's \w would admit Unicode).
_LISTENER_NAME = re.compile(r"[A-Za-z0-9_-]+")
_HOST_PORT = re.compile(r"(?:\[(?P<ipv6>[^\]]*)\]|(?P<name>[A-Za-z0-9._-]+)):(?P<port>[0-9]+)")
_ENTRY_FORMAT = "<name>:<scheme>://<host>:<port>"


# --- data model ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """A host and port; an IPv6 host is kept without brackets and gets them when printed."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class Listener:
    """A named route to the broker: at most one endpoint per scheme."""

    name: str
    urls: dict[str, Endpoint]

    def url(self, scheme: str) -> str | None:
        """``<scheme>://<host>:<port>``, or None when this listener advertises no such URL."""
        endpoint = self.urls.get(scheme)
        return None if endpoint is None else f"{scheme}://{endpoint}"

    @property
    def grpc_url(self) -> str | None:
        return self.url(GRPC)

    @property
    def grpc_url_tls(self) -> str | None:
        return self.url(GRPC_TLS)

    @property
    def http_url(self) -> str | None:
        return self.url(HTTP)

    @property
    def https_url(self) -> str | None:
        return self.url(HTTPS)


@dataclass(frozen=True)
class BindAddress:
    """A server socket to open; ``listener`` is None for the primary addresses (PIP-95)."""

    listener: str | None
    scheme: str
    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port`` as a server binds it (IPv6 in brackets), e.g. for grpc's add_port."""
        return str(Endpoint(self.host, self.port))

    @property
    def tls(self) -> bool:
        return self.scheme in TLS_SCHEMES

    def __str__(self) -> str:
        url = f"{self.scheme}://{self.address}"
        return url if self.listener is None else f"{self.listener}:{url}"


@dataclass(frozen=True)
class ListenerEntry:
    """One parsed ``<name>:<scheme>://<host>:<port>`` of advertisedListeners or bindAddresses."""

    listener: str
    scheme: str
    endpoint: Endpoint

    def __str__(self) -> str:
        return f"{self.listener}:{self.scheme}://{self.endpoint}"


# --- parsing -------------------------------------------------------------------------------


class _Malformed(Exception):
    """Why one entry does not parse; the text follows the quoted entry."""


def parse_entries(text: str) -> tuple[list[ListenerEntry], list[str]]:
    """The entries of an advertisedListeners or bindAddresses value, and the malformed ones.

    Entries are trimmed, empty ones skipped and exact duplicates dropped: a list folded over
    lines or assembled by templates should not fail for its punctuation. Each problem names the
    offending entry; the caller prefixes the property.
    """
    entries: list[ListenerEntry] = []
    problems: list[str] = []
    for raw in text.split(","):
        raw = raw.strip()
        if not raw:
            continue
        try:
            entry = _parse_entry(raw)
        except _Malformed as e:
            problems.append(f"{raw!r} {e}")
            continue
        if entry not in entries:
            entries.append(entry)
    return entries, problems


def _parse_entry(raw: str) -> ListenerEntry:
    name, sep, url = raw.partition(":")
    name, url = name.strip(), url.strip()
    # "grpc://h:1" splits into name "grpc" and "//h:1": a URL without a name, not a bad URL.
    if not sep or not name or url.startswith("//"):
        raise _Malformed(f"has no listener name (expected {_ENTRY_FORMAT})")
    if not _LISTENER_NAME.fullmatch(name):
        raise _Malformed(
            f"has listener name {name!r}; a listener name may contain only ASCII letters, "
            "digits, '_' and '-'"
        )
    scheme, sep, rest = url.partition("://")
    scheme = scheme.strip().lower()
    if not sep or not scheme:
        raise _Malformed(f"has no <scheme>:// after the listener name (expected {_ENTRY_FORMAT})")
    if scheme not in SCHEMES:
        raise _Malformed(
            f"has unsupported scheme {scheme!r} (expected one of {', '.join(SCHEMES)})"
        )
    return ListenerEntry(name, scheme, _parse_endpoint(rest))


def _parse_endpoint(text: str) -> Endpoint:
    match = _HOST_PORT.fullmatch(text.strip())
    if match is None:
        raise _Malformed(
            f"has a bad URL: expected {_ENTRY_FORMAT} without a path, an IPv6 host in brackets"
        )
    port = int(match["port"])
    if port > 65535:
        raise _Malformed(f"has port {port}, which is not a port number (0..65535)")
    if match["ipv6"] is not None:
        try:
            return Endpoint(ipaddress.IPv6Address(match["ipv6"]).compressed, port)
        except ValueError:
            raise _Malformed(f"has host [{match['ipv6']}], which is not an IPv6 address") from None
    return Endpoint(_normalize_host(match["name"]), port)


def _normalize_host(host: str) -> str:
    """One spelling per host, so that clashes are found whatever the notation."""
    host = host.strip().removeprefix("[").removesuffix("]")
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host.lower()


# --- reading a configuration ---------------------------------------------------------------


def listener_names(config: ServiceConfiguration) -> list[str]:
    """The listeners' names in order; without advertisedListeners, the implicit listener's."""
    entries, _ = parse_entries(config.advertisedListeners)
    names = list(dict.fromkeys(entry.listener for entry in entries))
    return names or [config.internalListenerName or IMPLICIT_INTERNAL_LISTENER]


def primary_bind_addresses(config: ServiceConfiguration) -> list[BindAddress]:
    """bindAddress with each primary port that is set, tied to no listener (as PIP-95 says)."""
    ports = {
        GRPC: config.grpcServicePort,
        GRPC_TLS: config.grpcServicePortTls,
        HTTP: config.webServicePort,
        HTTPS: config.webServicePortTls,
    }
    host = _normalize_host(config.bindAddress)
    return [
        BindAddress(None, scheme, host, port) for scheme, port in ports.items() if port is not None
    ]


def extra_bind_addresses(config: ServiceConfiguration) -> list[BindAddress]:
    """The well-formed bindAddresses entries, each tied to its listener."""
    entries, _ = parse_entries(config.bindAddresses)
    return [BindAddress(e.listener, e.scheme, e.endpoint.host, e.endpoint.port) for e in entries]


def _advertised_host(config: ServiceConfiguration) -> str:
    """advertisedAddress, else bindAddress unless it is a wildcard no client can connect to."""
    if config.advertisedAddress:
        return _normalize_host(config.advertisedAddress)
    host = _normalize_host(config.bindAddress)
    if host in ("0.0.0.0", "::"):
        return socket.gethostname()  # Pulsar advertises the machine's name in this case
    return host


def _implicit_internal_listener(config: ServiceConfiguration, name: str) -> Listener:
    """Pulsar's behaviour without advertisedListeners: advertise the primary ports.

    A port of 0 is advertised as 0; whoever binds it knows the real port and must substitute it.
    """
    host = _advertised_host(config)
    return Listener(
        name, {bind.scheme: Endpoint(host, bind.port) for bind in primary_bind_addresses(config)}
    )


def _listeners(config: ServiceConfiguration) -> dict[str, Listener]:
    entries, _ = parse_entries(config.advertisedListeners)
    if not entries:
        (name,) = listener_names(config)
        return {name: _implicit_internal_listener(config, name)}
    urls: dict[str, dict[str, Endpoint]] = {}
    for entry in entries:
        urls.setdefault(entry.listener, {}).setdefault(entry.scheme, entry.endpoint)
    return {name: Listener(name, endpoints) for name, endpoints in urls.items()}


@dataclass(frozen=True)
class ListenerConfig:
    """What the serving side needs: listeners by name (in order) and the sockets to open."""

    listeners: dict[str, Listener]
    internal_listener_name: str
    lookup_listener_name: str | None
    bind_addresses: list[BindAddress]  # the primary ones first

    @classmethod
    def from_config(cls, config: ServiceConfiguration) -> ListenerConfig:
        """Build from ``config``; raises ValueError when a listener rule fails.

        ``load_config`` has already refused such a configuration; this guards configurations
        built in code, which would otherwise fail later in a lookup.
        """
        problems = [
            f"{prop}: {problem}" for rule in LISTENER_RULES for prop, problem in rule(config)
        ]
        if problems:
            raise ValueError("\n".join(problems))
        return cls(
            listeners=_listeners(config),
            internal_listener_name=config.internalListenerName or listener_names(config)[0],
            lookup_listener_name=config.lookupListenerName or None,
            bind_addresses=primary_bind_addresses(config) + extra_bind_addresses(config),
        )

    @property
    def internal_listener(self) -> Listener:
        return self.listeners[self.internal_listener_name]

    def bind_addresses_for(self, schemes: Collection[str]) -> list[BindAddress]:
        """The sockets one server opens, e.g. ``GRPC_SCHEMES`` for the gRPC handler."""
        return [bind for bind in self.bind_addresses if bind.scheme in schemes]


# --- resolution ----------------------------------------------------------------------------


def choose_listener(config: ListenerConfig, requested: str | None, via: str | None) -> Listener:
    """The listener whose addresses a lookup answers.

    Precedence: the listener named in the request (``requested``: header or query parameter,
    an empty value counting as none) > the listener of the bind address the request came
    through (``via``; None for a primary address) > lookupListenerName (PIP-338) > the internal
    listener. A name the broker does not know is the client's mistake, so it is an
    InvalidArgumentError naming it (PIP-95 asks for 400 where Pulsar answers 500).
    """
    if requested:
        listener = config.listeners.get(requested)
        if listener is None:
            raise InvalidArgumentError(
                f"unknown listener name {requested!r}; "
                f"this broker's listeners are {', '.join(config.listeners)}"
            )
        return listener
    return config.listeners[via or config.lookup_listener_name or config.internal_listener_name]


# --- validation rules ----------------------------------------------------------------------

# Same shape as broker.config.Rule: (property, problem) pairs, the problem following "<property>: ".
ListenerRule = Callable[["ServiceConfiguration"], Iterator[tuple[str, str]]]


def _check_malformed_entries(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    for prop, text in (
        ("advertisedListeners", config.advertisedListeners),
        ("bindAddresses", config.bindAddresses),
    ):
        for problem in parse_entries(text)[1]:
            yield prop, problem


def _check_one_url_per_scheme(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """A lookup answers one URL per scheme; a second would be silently ignored."""
    first: dict[tuple[str, str], ListenerEntry] = {}
    for entry in parse_entries(config.advertisedListeners)[0]:
        seen = first.setdefault((entry.listener, entry.scheme), entry)
        if seen != entry:
            yield (
                "advertisedListeners",
                f"listener {entry.listener!r} has two {entry.scheme} URLs: "
                f"{str(seen)!r} and {str(entry)!r}",
            )


def _check_host_port_advertised_once(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """Two listeners sharing a host:port cannot be told apart by the address a client used."""
    first: dict[Endpoint, ListenerEntry] = {}
    for entry in parse_entries(config.advertisedListeners)[0]:
        seen = first.setdefault(entry.endpoint, entry)
        if seen.listener != entry.listener:
            yield (
                "advertisedListeners",
                f"{entry.endpoint} is advertised under two listeners: {str(seen)!r} and "
                f"{str(entry)!r}",
            )


def _check_listener_names_known(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    names = listener_names(config)
    for prop, name in (
        ("internalListenerName", config.internalListenerName),
        ("lookupListenerName", config.lookupListenerName),
    ):
        if name and name not in names:
            yield prop, f"{name!r} is not among the listeners ({', '.join(names)})"


def _check_bind_listeners_advertised(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """A socket tied to an unknown listener would answer lookups with nothing."""
    names = listener_names(config)
    for bind in extra_bind_addresses(config):
        if bind.listener not in names:
            yield (
                "bindAddresses",
                f"{str(bind)!r} is tied to listener {bind.listener!r}, which is not advertised "
                f"(listeners: {', '.join(names)})",
            )


def _describe(bind: BindAddress) -> str:
    if bind.listener is None:
        return f"{PRIMARY_PORT_PROPERTIES[bind.scheme]} ({bind})"
    return f"bindAddresses entry {str(bind)!r}"


def _check_bind_clashes(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """One ip:port serves one scheme for one listener.

    The second bind would fail, or worse succeed: grpc sets SO_REUSEPORT, so two servers on one
    port silently share its connections. Port 0 asks for an ephemeral port and never clashes.
    Clashes among the primary ports alone are broker.config's _check_ports_distinct's.
    """
    first: dict[tuple[str, int], BindAddress] = {}
    for bind in primary_bind_addresses(config) + extra_bind_addresses(config):
        if bind.port == 0:
            continue
        seen = first.setdefault((bind.host, bind.port), bind)
        if seen != bind and bind.listener is not None:
            yield (
                "bindAddresses",
                f"{bind.address} is bound twice: by {_describe(seen)} and by {_describe(bind)}",
            )


LISTENER_RULES: list[ListenerRule] = [
    _check_malformed_entries,
    _check_one_url_per_scheme,
    _check_host_port_advertised_once,
    _check_listener_names_known,
    _check_bind_listeners_advertised,
    _check_bind_clashes,
]
