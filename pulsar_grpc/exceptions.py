"""pulsar-client's ``pulsar.exceptions`` under this package's name: ``PulsarException`` and its
subclasses, so ``from pulsar_grpc.exceptions import Timeout`` ports from
``from pulsar.exceptions import Timeout`` unchanged."""

from .client.exceptions import *  # noqa: F403
from .client.exceptions import __all__ as __all__
