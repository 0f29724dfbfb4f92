"""Admin request bodies a client controls: a partition count is a JSON integer, nothing else
(a boolean, a fraction or a float too large for Python is a 400, never a 500)."""

from __future__ import annotations

import pytest

from pulsar_grpc.broker.errors import InvalidArgumentError
from pulsar_grpc.broker.web.topics_admin import partition_count


@pytest.mark.parametrize("body", ["1e400", "true", "2.9", '"3"', "[3]", "", "x" * 10_000])
def test_a_partition_count_that_is_not_an_integer_is_refused(body: str) -> None:
    with pytest.raises(InvalidArgumentError, match="number of partitions"):
        partition_count(body)


def test_a_partition_count_is_read() -> None:
    assert partition_count(" 4\n") == 4
