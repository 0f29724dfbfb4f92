"""A namespace's ``encryption_required`` policy (Pulsar's Policies.encryption_required): when
set, the broker refuses every batch that is not end-to-end encrypted, as Pulsar's
Producer.checkAndStartPublish does ("Messages must be encrypted", MetadataError).

The broker never decrypts: a batch counts as encrypted when it carries at least one encrypted
data key (Pulsar's ``encryption_keys_count > 0``). The policy lives in the namespace's Policies
node; :class:`~pulsar_grpc.broker.topics.rate_policies.RatePolicies`, which already re-reads
that node for every loaded topic whenever it changes (on any broker), sets it on each topic,
so the check on the produce path is an attribute read.
"""

from __future__ import annotations

import enum
from typing import Any

from pulsar_grpc.broker.errors import NotEncryptedError

FIELD = "encryption_required"
REFUSAL = "Messages must be encrypted"


class EncryptionPolicy(enum.Enum):
    OPTIONAL = "optional"
    REQUIRED = "required"

    @classmethod
    def of(cls, policies: dict[str, Any] | None) -> EncryptionPolicy:
        """The policy a namespace's Policies node sets (absent: optional, Pulsar's default)."""
        return cls.REQUIRED if (policies or {}).get(FIELD) is True else cls.OPTIONAL

    def check(self, encrypted: bool) -> None:
        """Refuse an unencrypted batch where encryption is required."""
        if self is EncryptionPolicy.REQUIRED and not encrypted:
            raise NotEncryptedError(REFUSAL)
