"""The admin commands' HTTP client (cli/rest.py): a broker that fails mid-answer is one
AdminRequestError naming the URL, never an exception from the HTTP library."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from pulsar_grpc.cli.rest import AdminRequestError, print_lines, request


@pytest.fixture
def hangs_up() -> Iterator[int]:
    """A port whose server reads a request and closes the connection without answering."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(4096)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        yield server.getsockname()[1]
        thread.join(timeout=10)


def test_a_connection_closed_without_an_answer_is_an_admin_request_error(hangs_up: int) -> None:
    url = f"http://127.0.0.1:{hangs_up}/admin/v2/clusters"
    where = f"http://127.0.0.1:{hangs_up} closed the connection without an answer"
    with pytest.raises(AdminRequestError, match=where):
        request("GET", url)


def test_a_listing_that_is_not_a_list_is_an_admin_request_error() -> None:
    with pytest.raises(AdminRequestError, match="expected a JSON list"):
        print_lines({"not": "a list"})
