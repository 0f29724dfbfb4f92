"""The composition root hands each module a view of itself limited to that module's port."""

from __future__ import annotations

from typing import Protocol

import pytest

from pulsar_grpc.broker import service_parts as parts
from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.service import BrokerService
from pulsar_grpc.broker.web.app import WebPort
from pulsar_grpc.broker.web.topics_admin import TopicsPort


class _Service:
    def __init__(self) -> None:
        self.config = "config"
        self.late: str | None = None

    @property
    def topics(self) -> str:
        return "topics"

    def check_open(self) -> None:
        return None


class _LatePort(parts.HasConfig, Protocol):
    @property
    def late(self) -> str | None: ...


def test_a_view_reaches_what_its_port_declares_and_nothing_else() -> None:
    view = parts.narrowed(_Service(), parts.HasConfig)
    assert view.config == "config"
    with pytest.raises(AttributeError, match="'topics' is not in the port HasConfig"):
        _ = view.topics


def test_a_view_of_a_composed_port_reaches_every_part_of_it() -> None:
    class Port(parts.HasConfig, parts.HasTopics, parts.HasOpenCheck, Protocol): ...

    view = parts.narrowed(_Service(), Port)
    assert (view.config, view.topics, view.check_open()) == ("config", "topics", None)


def test_a_view_reads_a_part_made_after_it() -> None:
    service = _Service()
    view = parts.narrowed(service, _LatePort)
    assert view.late is None
    service.late = "load reporter"
    assert view.late == "load reporter"


def test_a_target_that_lacks_part_of_the_port_is_refused_at_composition() -> None:
    with pytest.raises(TypeError, match=r"lacks \['schemas'\] of the port HasSchemas"):
        parts.narrowed(_Service(), parts.HasSchemas)


def test_the_broker_service_satisfies_the_web_ports() -> None:
    service = BrokerService(ServiceConfiguration())
    web = parts.narrowed(service, WebPort)
    assert web.config is service.config
    topics = parts.narrowed(web, TopicsPort)  # what the web service hands the topics routes
    assert parts.port_members(TopicsPort) >= {"topics", "ledgers", "resources", "schemas"}
    with pytest.raises(AttributeError, match="'config' is not in the port TopicsPort"):
        _ = topics.config
