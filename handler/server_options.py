"""The gRPC server settings of the broker's handler, shared with the PIP-1 proxy so that a
client meets the same message-size limit and the same keepalive whichever it connects to."""

from __future__ import annotations

# Room for a batch of maxMessageSize plus its framing; larger gets gRPC's own RESOURCE_EXHAUSTED.
# Outbound too: a consume response holds at most codec.MAX_RESPONSE_BYTES of entries, or one
# entry alone (at most maxMessageSize plus the broker's fields), so it always fits.
FRAME_MARGIN = 1 << 20


def max_frame(max_message_size: int) -> int:
    """The largest gRPC message a server of maxMessageSize sends or takes."""
    return max_message_size + FRAME_MARGIN


# gRPC core's default is 1,000 calls waiting (soft: above it, calls are refused at random)
# and 3,000 (hard): a burst of streams opened at once overflowed it, and the refused ones ended
# CANCELLED, which a client cannot tell from its own cancellation, so it did not retry.
DEFAULT_MAX_PENDING_CALLS = 100_000


def server_options(
    max_message_size: int,
    keepalive_interval_s: int,
    max_pending_calls: int = DEFAULT_MAX_PENDING_CALLS,
) -> list[tuple[str, int]]:
    """grpc.aio server options for maxMessageSize, keepAliveIntervalSeconds and
    grpcMaxPendingCalls."""
    frame = max_frame(max_message_size)
    keepalive_ms = keepalive_interval_s * 1000
    return [
        ("grpc.max_receive_message_length", frame),
        ("grpc.max_send_message_length", frame),
        ("grpc.so_reuseport", 0),
        # The server's own pings find dead clients (Pulsar's keepAliveIntervalSeconds): one
        # every interval, with or without calls and data, and a connection whose ping has no
        # answer within as long again is closed, ending its calls (a consumer's unacked
        # messages go to the others). grpc core applies the keepalive timeout or the ping
        # timeout depending on its version: both are set.
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", keepalive_ms),
        ("grpc.http2.ping_timeout_ms", keepalive_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # Clients' pings are always answered, however often (as a Pulsar broker answers every
        # ping): grpc's default policy answers more than two pings under 5 minutes apart
        # without data with GOAWAY too_many_pings, cutting off idle consumers of any client
        # with keepalive on (the SDK pings every 30 s while it has calls).
        ("grpc.http2.max_ping_strikes", 0),
        # Calls that arrived and wait for the server's loop to take them (grpc.aio takes them
        # one at a time). Past the soft limit gRPC core refuses calls at random, past the hard
        # one every call, always as CANCELLED with no log line: both are set to
        # grpcMaxPendingCalls so that a burst of that many new streams waits to be served
        # (docs/protocol.md "Many streams").
        ("grpc.server.max_pending_requests", max_pending_calls),
        ("grpc.server.max_pending_requests_hard_limit", max_pending_calls),
    ]
