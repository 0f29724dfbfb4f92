"""Where the commands find a broker when no flag names one.

The standalone broker's addresses (gRPC 127.0.0.1:50051, HTTP 127.0.0.1:8080) unless the
environment names others, so a shell that works with another broker sets it once instead of
passing ``--service-url`` / ``--admin-url`` to every command (and the README's commands run
as written against any broker).
"""

from __future__ import annotations

import os

SERVICE_URL_ENV = "PULSAR_GRPC_SERVICE_URL"
ADMIN_URL_ENV = "PULSAR_GRPC_ADMIN_URL"
STANDALONE_SERVICE_URL = "grpc://127.0.0.1:50051"
STANDALONE_ADMIN_URL = "http://127.0.0.1:8080"


def default_service_url() -> str:
    """The broker's gRPC URL: $PULSAR_GRPC_SERVICE_URL, else the standalone broker's."""
    return os.environ.get(SERVICE_URL_ENV) or STANDALONE_SERVICE_URL


def default_admin_url() -> str:
    """The broker's web (admin) URL: $PULSAR_GRPC_ADMIN_URL, else the standalone broker's."""
    return os.environ.get(ADMIN_URL_ENV) or STANDALONE_ADMIN_URL


SERVICE_URL_HELP = f"broker gRPC URL (default ${SERVICE_URL_ENV}, else {STANDALONE_SERVICE_URL})"
ADMIN_URL_HELP = f"broker web service URL (default ${ADMIN_URL_ENV}, else {STANDALONE_ADMIN_URL})"
