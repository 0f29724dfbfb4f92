"""Lookups over a broker's web service, for ``http://`` and ``https://`` service URLs, as
pulsar-client's HTTPLookupService: a topic's broker from Pulsar's REST lookup
(``GET /lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}``, its ``grpcUrl`` and
``grpcUrlTls``: the broker's gRPC addresses, docs/protocol.md), partition counts from
``GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/partitions`` and a namespace's topics
from ``GET /admin/v2/persistent/{tenant}/{namespace}``. The data then flows over gRPC, to the
address the lookup answered.

A ``307`` to another broker is followed (up to ``max_lookup_redirects`` times) with the same
credentials, whatever its host: the brokers of a cluster share them. The credentials are the
client's ``authentication``; a two-way exchange (SCRAM) runs its steps on the request itself,
as the broker answers them over HTTP (RFC 7804 headers).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import grpc
from yarl import URL

from ._auth import Authentication, Exchange, ExchangeAnswer
from ._channels import LookupResult, full_topic_name
from ._errors import (
    AuthenticationError,
    AuthorizationError,
    ConnectError,
    LookupFailed,
    PulsarException,
    ServiceUnitNotReady,
    TooManyLookupRequestException,
    TopicNotFound,
)

__all__ = ["HttpLookup", "ssl_context"]

# What a web service's error status means to the client (Pulsar's HTTPLookupService maps
# them alike); any other status is a LookupError.
_ERRORS: dict[int, type[PulsarException]] = {
    401: AuthenticationError,
    403: AuthorizationError,
    404: TopicNotFound,
    429: TooManyLookupRequestException,
    503: ServiceUnitNotReady,
}
_REDIRECTS = (301, 302, 303, 307, 308)


def ssl_context(
    service_url: str, trust_path: str | None, cert_path: str | None, key_path: str | None
) -> ssl.SSLContext | None:
    """The TLS settings of an ``https://`` service URL (None for ``http://``): the client's
    trusted CAs (the system's when none) and its certificate for mutual TLS."""
    if not service_url.startswith("https://"):
        return None
    context = ssl.create_default_context(cafile=trust_path)
    if cert_path and key_path:
        context.load_cert_chain(cert_path, key_path)
    return context


class HttpLookup:
    """The lookups of a client whose service URL is a broker's web service."""

    def __init__(
        self,
        service_url: str,
        tls: ssl.SSLContext | None,
        listener_name: str | None,
        authentication: Authentication | None,
        timeout_s: float,
        max_redirects: int,
    ) -> None:
        parsed = URL(service_url)
        if not parsed.host or parsed.path not in ("", "/") or parsed.query_string:
            raise ValueError(
                f"invalid service URL {service_url!r}: expected http://host:port or "
                "https://host:port (a broker's web service)"
            )
        self.url = service_url.rstrip("/")
        self._tls = tls
        self._listener_name = listener_name
        self._authentication = authentication
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._max_redirects = max_redirects
        self._session: aiohttp.ClientSession | None = None  # made in the client's loop

    @property
    def prefers_tls(self) -> bool:
        """An https service URL connects to the brokers' TLS gRPC addresses."""
        return self.url.startswith("https://")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def lookup(self, topic: str) -> LookupResult:
        """The broker serving ``topic``: the lookup JSON of the broker that owns it."""
        query = {"listenerName": self._listener_name} if self._listener_name else {}
        data = await self._get("/lookup/v2/topic/" + _topic_path(topic), query)
        if not isinstance(data, dict):
            raise LookupFailed(f"the lookup of {topic} at {self.url} answered {data!r}")
        return LookupResult(
            grpc_url=str(data.get("grpcUrl") or ""),
            grpc_url_tls=str(data.get("grpcUrlTls") or ""),
            http_url=str(data.get("httpUrl") or ""),
            http_url_tls=str(data.get("httpUrlTls") or ""),
            authoritative=True,
            redirect=False,
            listener_name=self._listener_name or "",
        )

    async def partition_count(self, topic: str) -> int:
        data = await self._get(f"/admin/v2/{_topic_path(topic)}/partitions", {})
        partitions = data.get("partitions") if isinstance(data, dict) else None
        if not isinstance(partitions, int):
            raise LookupFailed(f"the partitions of {topic} at {self.url}: {data!r}")
        return partitions

    async def topics_of_namespace(self, namespace: str) -> list[str]:
        tenant, _, name = namespace.partition("/")
        topics = await self._get(f"/admin/v2/persistent/{_segment(tenant)}/{_segment(name)}", {})
        if not isinstance(topics, list):
            raise LookupFailed(f"the topics of {namespace} at {self.url}: {topics!r}")
        return [str(t) for t in topics]

    async def _get(self, path: str, query: Mapping[str, str]) -> Any:
        """The JSON answer to a GET of ``path``, with the client's credentials (obtained
        anew once when the broker refuses those it sent, as gRPC calls do)."""
        url = URL(self.url + path, encoded=True).with_query(query)
        auth = self._authentication
        if auth is not None:
            await auth.prepare(self._exchange(url))
        sent = auth.authorization() if auth is not None else None
        response = await self._request(url, sent)
        if response.status == 401 and auth is not None and sent and auth.refused(sent):
            await auth.prepare(self._exchange(url))
            response = await self._request(url, auth.authorization())
        if response.status != 200:
            raise _error(response, url)
        return response.body

    def _exchange(self, url: URL) -> Exchange:
        """A two-way authentication's step, riding on the request about to be made."""

        async def exchange(authorization: str) -> ExchangeAnswer:
            response = await self._request(url, authorization)
            if response.status == 200:
                return ExchangeAnswer(grpc.StatusCode.OK, "", {})
            if response.status != 401:
                raise _error(response, url)
            reason = str(response.reason)
            return ExchangeAnswer(grpc.StatusCode.UNAUTHENTICATED, reason, response.headers)

        return exchange

    async def _request(self, url: URL, authorization: str | None) -> _Response:
        """One GET, following the brokers' redirects; ConnectError when none answers."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        headers = {"Authorization": authorization} if authorization else {}
        hops = [str(url)]
        for _ in range(self._max_redirects + 1):
            try:
                async with self._session.get(
                    url, headers=headers, allow_redirects=False, ssl=self._tls or True
                ) as answer:
                    if answer.status in _REDIRECTS and "Location" in answer.headers:
                        url = url.join(URL(answer.headers["Location"], encoded=True))
                        hops.append(str(url))
                        continue
                    return await _Response.read(answer)
            except (aiohttp.ClientError, TimeoutError) as exc:
                # "connection refused": nothing listens (yet), retried as gRPC's is.
                refused = isinstance(getattr(exc, "os_error", None), ConnectionRefusedError)
                why = "connection refused" if refused else repr(exc)
                raise ConnectError(f"the web service at {url} is unreachable: {why}") from None
        raise LookupFailed(f"more than {self._max_redirects} redirects: " + " -> ".join(hops))


class _Response:
    """What the client keeps of an answer: its status, headers (lower-case names), and its
    JSON body (or, for an error, Pulsar's ``reason``)."""

    def __init__(self, status: int, headers: dict[str, str], body: Any) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @classmethod
    async def read(cls, answer: aiohttp.ClientResponse) -> _Response:
        headers = {k.lower(): v for k, v in answer.headers.items()}
        try:
            body = await answer.json(content_type=None)
        except ValueError:
            body = (await answer.text())[:200]
        return cls(answer.status, headers, body)

    @property
    def reason(self) -> object:
        return self.body.get("reason", self.body) if isinstance(self.body, dict) else self.body


def _error(response: _Response, url: URL) -> PulsarException:
    cls = _ERRORS.get(response.status, LookupFailed)
    return cls(f"{url} answered HTTP {response.status}: {response.reason}")


def _segment(name: str) -> str:
    return quote(name, safe="")


def _topic_path(topic: str) -> str:
    """``persistent/{tenant}/{namespace}/{topic}`` of a topic name in any of Pulsar's forms
    (its local name percent-encoded, as Pulsar's clients encode it)."""
    domain, _, rest = full_topic_name(topic).partition("://")
    tenant, _, rest = rest.partition("/")
    namespace, _, local = rest.partition("/")
    return "/".join(_segment(part) for part in (domain, tenant, namespace, local))
