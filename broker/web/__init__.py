"""HTTP service (webServicePort): Prometheus /metrics and Pulsar's admin REST paths
(broker.web.app.WebService). Nothing is imported here: the load report uses the metrics'
rate tracker without pulling the admin routes (and through them the namespace service) in."""
