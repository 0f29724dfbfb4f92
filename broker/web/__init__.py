"""HTTP service (webServicePort): Prometheus /metrics and Pulsar's admin REST paths."""

from broker.web.app import WebService

__all__ = ["WebService"]
