"""docs/pulsar-client.md's compatibility table stays true (issue 26).

pulsar-client's public names come from the installed package (a dev dependency), never from
a copied list: a new pulsar-client name without a row fails here, and so does a row that
says "works" when the signatures differ, or a difference without a reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.pulsar_client_api import ours, public_names, same_signature

_DOC = Path(__file__).resolve().parents[2] / "docs" / "pulsar-client.md"
_ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| (?P<status>[^|]+?) \| (?P<why>[^|]*?) \|$")
_STATUSES = {"works", "works differently", "absent"}


def _table() -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    for line in _DOC.read_text().splitlines():
        match = _ROW.match(line)
        if match:
            assert match["name"] not in rows, f"two rows for {match['name']}"
            rows[match["name"]] = (match["status"], match["why"].strip())
    return rows


def test_every_public_name_of_pulsar_client_has_a_row() -> None:
    rows = _table()
    missing = [name for name in public_names() if name not in rows]
    assert not missing, f"docs/pulsar-client.md lacks rows for {missing}"
    stale = set(rows) - set(public_names())
    assert not stale, f"rows for names pulsar-client does not have: {sorted(stale)}"


@pytest.mark.parametrize("name", sorted(_table()))
def test_each_row_is_true(name: str) -> None:
    status, why = _table()[name]
    assert status in _STATUSES, f"{name}: unknown status {status!r}"
    if status == "works":
        assert same_signature(name) is None, f"{name} is marked works: {same_signature(name)}"
    else:
        assert why, f"{name} is marked {status} without a reason"
    if status == "absent":
        assert ours(name) is None, f"{name} is marked absent but exists here"
