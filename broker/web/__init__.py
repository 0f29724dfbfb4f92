"""HTTP service (webServicePort): Prometheus /metrics and Pulsar's admin REST paths."""

from pulsar_grpc.broker.web.app import WebService

__all__ = ["WebService"]
