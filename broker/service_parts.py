"""The parts BrokerService holds, one Protocol each, so a module that needs some of them names
exactly those (a port such as ``class TopicsPort(HasResources, HasTopics, Protocol)``) instead
of importing the service itself.

BrokerService (broker/service.py) is the composition root: it satisfies every port by what it
holds and hands itself over typed as the port (a route group that needs one part only, such as
the schemas routes, gets that part), so nothing below it imports it and the types say, for each
route group, which parts it reaches. Every member is a read-only property: the service may hold
it as an attribute or compute it once started, and a part that comes later (the load reporter
of a cluster member) is read at each call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pulsar_grpc.broker.config import ServiceConfiguration
    from pulsar_grpc.broker.dynamic_config import DynamicConfig
    from pulsar_grpc.broker.ledger import ManagedLedgerFactory
    from pulsar_grpc.broker.listeners import BindAddress, ListenerConfig
    from pulsar_grpc.broker.lookup import BrokerData
    from pulsar_grpc.broker.metadata import MetadataStore
    from pulsar_grpc.broker.namespace_service import NamespaceService
    from pulsar_grpc.broker.resources import NamespaceResources
    from pulsar_grpc.broker.schema import TopicSchemas
    from pulsar_grpc.broker.security.authentication import AuthenticationService
    from pulsar_grpc.broker.security.authorization import AuthorizationService
    from pulsar_grpc.broker.security.permissions import PermissionStore
    from pulsar_grpc.broker.stalls import StallMonitor
    from pulsar_grpc.broker.topics.registry import TopicRegistry


class HasConfig(Protocol):
    @property
    def config(self) -> ServiceConfiguration: ...


class HasListeners(Protocol):
    """The configured listeners and the port each server socket really got."""

    @property
    def listeners(self) -> ListenerConfig: ...

    @property
    def bound(self) -> Mapping[BindAddress, int]: ...

    def record_bound(self, bind: BindAddress, port: int) -> None: ...


class HasIdentity(Protocol):
    """This broker's name and advertised addresses (known once its sockets are bound)."""

    def broker_data(self) -> BrokerData: ...

    def broker_id(self) -> str: ...

    def web_service_url(self) -> str: ...


class HasAuthentication(Protocol):
    """None while authenticationEnabled is false."""

    @property
    def authentication(self) -> AuthenticationService | None: ...


class HasAuthorization(Protocol):
    """None while authorizationEnabled is false."""

    @property
    def authorization(self) -> AuthorizationService | None: ...


class HasOpenCheck(Protocol):
    def check_open(self) -> None: ...


class HasStore(Protocol):
    @property
    def store(self) -> MetadataStore: ...


class HasLedgers(Protocol):
    @property
    def ledgers(self) -> ManagedLedgerFactory: ...


class HasPermissions(Protocol):
    @property
    def permissions(self) -> PermissionStore: ...


class HasResources(Protocol):
    @property
    def resources(self) -> NamespaceResources: ...


class HasNamespaces(Protocol):
    @property
    def namespaces(self) -> NamespaceService: ...


class HasTopics(Protocol):
    @property
    def topics(self) -> TopicRegistry: ...


class HasSchemas(Protocol):
    @property
    def schemas(self) -> TopicSchemas: ...


class HasDynamicConfig(Protocol):
    """None until the broker has started."""

    @property
    def dynamic_config(self) -> DynamicConfig | None: ...


class HasStalls(Protocol):
    """None until the broker has started."""

    @property
    def stalls(self) -> StallMonitor | None: ...


def port_members(port: type) -> frozenset[str]:
    """The public names a port (a Protocol, or several composed) declares: its properties and
    methods, from every Protocol it is made of."""
    names: set[str] = set()
    for cls in port.__mro__:
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        names.update(name for name in vars(cls) if not name.startswith("_"))
        names.update(
            name for name in getattr(cls, "__annotations__", {}) if not name.startswith("_")
        )
    return frozenset(names)


class NarrowedView:
    """What a module receives instead of the composition root itself: the members its port
    declares, read from the root at each access (a part made later, such as a cluster
    member's load reporter, is seen once it exists), and nothing else. The types already
    bound what a module may touch; this bounds the object too, so reaching past the port is
    an AttributeError at once rather than a dependency nobody sees.

    >>> class Service:
    ...     config, secret = "c", "s"
    >>> view = NarrowedView(Service(), HasConfig)
    >>> view.config
    'c'
    >>> view.secret
    Traceback (most recent call last):
    AttributeError: 'secret' is not in the port HasConfig
    """

    __slots__ = ("_members", "_port", "_target")

    def __init__(self, target: object, port: type) -> None:
        self._target = target
        self._members = port_members(port)
        self._port = port.__name__
        missing = sorted(name for name in self._members if not _holds(target, name))
        if missing:
            raise TypeError(f"{type(target).__name__} lacks {missing} of the port {self._port}")

    def __getattr__(self, name: str) -> object:
        if name in self._members:
            return getattr(self._target, name)
        raise AttributeError(f"{name!r} is not in the port {self._port}")

    def __repr__(self) -> str:
        return f"<{self._port} of {type(self._target).__name__}>"


def narrowed(target: object, port: type) -> Any:
    """``target`` seen through ``port`` (a :class:`NarrowedView`), typed for the parameter it
    is passed to: the composition root's way of handing a module its port."""
    return NarrowedView(target, port)


def _holds(target: object, name: str) -> bool:
    """Whether ``target`` has the member ``name``, without reading it (a part's property may
    not be ready before the broker starts)."""
    if isinstance(target, NarrowedView):
        return name in target._members
    return hasattr(type(target), name) or name in getattr(target, "__dict__", {})
