"""A TLS front end for a gRPC listener that asks clients for a certificate *optionally*.

Pulsar's broker, with the TLS authentication provider and
``tlsRequireTrustedClientCertOnConnect=false``, requests a client certificate without requiring
one: a trusted certificate authenticates as its CN, a missing one leaves the client to send a
token (or other credentials), an untrusted one fails the handshake. grpcio's Python server
credentials cannot do that: ``ssl_server_credentials(require_client_auth=False)`` is gRPC core's
DONT_REQUEST_CLIENT_CERTIFICATE and ``True`` its REQUEST_AND_REQUIRE (grpc/_cython's
credentials.pyx.pxi picks one of the two), so the core mode REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
is out of reach.

So such a listener's public port is served by :class:`TlsFront`: Python's ``ssl`` with
CERT_OPTIONAL terminates TLS (ALPN ``h2``) on a thread and event loop of its own, so handshakes
and copying never cost the broker's loop, and pipes each connection to the gRPC server's
plaintext port, bound on 127.0.0.1 only. Before the first byte is piped it records, in
:class:`PipedPeers`, the loopback port of the piped connection with the client's address and
verified certificate; the authentication interceptor finds them from ``context.peer()``. A
connection to the internal port that the front did not make has no entry, hence no certificate.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
import ssl
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.security.authentication import PROVIDERS, TlsProvider
from pulsar_grpc.broker.tls import certificate_common_name, server_ssl_context

log = logging.getLogger(__name__)

# The only host the gRPC server behind a front binds: nothing off this machine reaches it.
LOOPBACK = "127.0.0.1"
_PEER_PREFIX = f"ipv4:{LOOPBACK}:"
# A client that connects and never finishes its handshake is dropped after this long.
HANDSHAKE_TIMEOUT_S = 10.0
_CHUNK = 256 * 1024
# The names of the provider that takes the certificate (its short and its Pulsar name): asking
# for one optionally only serves that provider.
_TLS_PROVIDERS = frozenset(
    name for name, factory in PROVIDERS.items() if factory == TlsProvider.from_config
)


def needs_front(config: ServiceConfiguration) -> bool:
    """A TLS listener needs the front when the TLS provider authenticates and the certificate
    is optional; with tlsRequireTrustedClientCertOnConnect=true grpcio's own TLS requires it."""
    return (
        config.authenticationEnabled
        and not config.tlsRequireTrustedClientCertOnConnect
        and bool(config.tlsTrustCertsFilePath)
        and any(name in _TLS_PROVIDERS for name in config.authenticationProviders)
    )


def front_ssl_context(config: ServiceConfiguration) -> ssl.SSLContext:
    """The broker's server TLS settings (which ask for a client certificate without requiring
    it: a presented one must chain to tlsTrustCertsFilePath), speaking HTTP/2 as gRPC needs."""
    context = server_ssl_context(config)
    assert context.verify_mode is ssl.CERT_OPTIONAL  # needs_front: trust certs, not required
    context.set_alpn_protocols(["h2"])
    return context


@dataclass(frozen=True, slots=True)
class PipedPeer:
    """Who is at the other end of one piped connection."""

    address: str  # the client's, as gRPC writes a peer: ipv4:1.2.3.4:5678, ipv6:[::1]:5678
    common_name: str | None  # the CN of the certificate the handshake verified; None: none sent


class PipedPeers:
    """The front's live connections by the loopback port they reach the gRPC server from.

    The front's thread writes, the broker's loop reads: a lock keeps each step whole."""

    def __init__(self) -> None:
        self._by_port: dict[int, PipedPeer] = {}
        self._lock = threading.Lock()

    def add(self, port: int, peer: PipedPeer) -> None:
        with self._lock:
            self._by_port[port] = peer

    def remove(self, port: int) -> None:
        with self._lock:
            self._by_port.pop(port, None)

    def of(self, grpc_peer: str) -> PipedPeer | None:
        """The piped peer behind ``context.peer()``; None for a connection the front did not
        make (another process on this machine dialling the internal port)."""
        if not grpc_peer.startswith(_PEER_PREFIX):
            return None
        try:
            port = int(grpc_peer.removeprefix(_PEER_PREFIX))
        except ValueError:
            return None
        with self._lock:
            return self._by_port.get(port)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_port)


class FrontState(enum.Enum):
    NEW = "new"
    SERVING = "serving"
    CLOSED = "closed"


LoopFactory = Callable[[], asyncio.AbstractEventLoop]


class TlsFront:
    """Terminates TLS on ``host:port`` and pipes each connection to ``LOOPBACK:upstream_port``;
    at most ``max_connections`` at once (handshaking ones included), further ones are closed
    as they arrive."""

    def __init__(
        self,
        host: str,
        port: int,
        context: ssl.SSLContext,
        upstream_port: int,
        max_connections: int,
        peers: PipedPeers,
        loop_factory: LoopFactory | None = None,
    ) -> None:
        self.peers = peers
        self._host, self._port = host, port
        self._context = context
        self.upstream_port = upstream_port
        self._max_connections = max_connections
        self._loop_factory = loop_factory
        self._connections: set[asyncio.Task[None]] = set()
        # The writer of every socket while the loop holds it (closing ones too: a transport
        # holds its protocol, which holds the writer), weak so that a closed one leaves by
        # itself; writers, because uvloop's TLS transports cannot be weakly referenced.
        self._writers: weakref.WeakSet[asyncio.StreamWriter] = weakref.WeakSet()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self.state = FrontState.NEW

    async def start(self) -> int:
        """Bind and serve on the front's own thread; the bound port (``port`` may be 0). A
        bind failure is raised here, as grpc's add_secure_port would."""
        assert self.state is FrontState.NEW
        bound: concurrent.futures.Future[int] = concurrent.futures.Future()
        thread = self._thread = threading.Thread(
            target=self._run, args=(bound,), name=f"tls-front-{self._port}", daemon=True
        )
        thread.start()
        port = await asyncio.wrap_future(bound)
        self.state = FrontState.SERVING
        return port

    async def close(self) -> None:
        """Stop accepting, close every piped connection and end the thread."""
        if self.state is not FrontState.SERVING:
            self.state = FrontState.CLOSED
            return
        self.state = FrontState.CLOSED
        loop, stop, thread = self._loop, self._stop, self._thread
        assert loop is not None and stop is not None and thread is not None
        loop.call_soon_threadsafe(stop.set)
        await asyncio.to_thread(thread.join)

    # ------------------------------------------------------------ the front's thread

    def _run(self, bound: concurrent.futures.Future[int]) -> None:
        try:
            with asyncio.Runner(loop_factory=self._loop_factory) as runner:
                runner.run(self._serve(bound))
        except BaseException as exc:  # a bind error before bound was set goes to start()
            if not bound.done():
                bound.set_exception(exc)
            else:
                log.exception("TLS front on port %d failed", self._port)

    async def _serve(self, bound: concurrent.futures.Future[int]) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        # The handshake is the server's (ssl=), done before _accept runs: upgrading an accepted
        # stream with start_tls would lose a ClientHello that arrived before the upgrade (the
        # stream reader buffers it), and the handshake would hang until the client gave up.
        server = await asyncio.start_server(
            self._accept,
            self._host,
            self._port,
            ssl=self._context,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S,
        )
        port = server.sockets[0].getsockname()[1]
        bound.set_result(port)
        log.info(
            "TLS front on %s:%d pipes to %s:%d", self._host, port, LOOPBACK, self.upstream_port
        )
        try:
            await self._stop.wait()
        finally:
            server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            # A closed TLS connection may still wait for its peer's goodbye (up to 30 s): the
            # loop ends now, so every socket still open is dropped.
            for writer in list(self._writers):
                writer.transport.abort()
            await asyncio.sleep(0)  # the aborts close their sockets on the next iteration
            await server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self._max_connections:
            log.warning(
                "TLS front: %d connections open (grpcTlsFrontMaxConnections), closing a new one",
                len(self._connections),
            )
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(writer)
        try:
            await self._pipe(reader, writer)
        except asyncio.CancelledError:
            # close() cancelled it: ending normally keeps asyncio's stream callback from
            # logging the cancellation as an error.
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = _grpc_peer(writer.get_extra_info("peername"))
        peer = PipedPeer(address, certificate_common_name(writer.get_extra_info("peercert")))
        try:
            up_reader, up_writer = await asyncio.open_connection(LOOPBACK, self.upstream_port)
        except OSError as exc:
            log.warning("TLS front: cannot reach the gRPC server: %s", exc)
            return
        self._writers.add(up_writer)
        local_port = up_writer.get_extra_info("sockname")[1]
        self.peers.add(local_port, peer)  # before any byte reaches the gRPC server
        try:
            copies = (
                asyncio.ensure_future(_copy(reader, up_writer)),
                asyncio.ensure_future(_copy(up_reader, writer)),
            )
            try:
                await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for copy in copies:
                    copy.cancel()
                await asyncio.gather(*copies, return_exceptions=True)
        finally:
            up_writer.close()
            self.peers.remove(local_port)


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Until end of stream or a broken connection; the caller closes both sides."""
    try:
        while chunk := await source.read(_CHUNK):
            sink.write(chunk)
            await sink.drain()
    except (OSError, ConnectionError):
        return


def _grpc_peer(peername: tuple[str, int] | tuple[str, int, int, int] | None) -> str:
    if peername is None:
        return "unknown"
    host, port = peername[0], peername[1]
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
